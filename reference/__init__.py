"""The NumPy reference codec (the specification); see :mod:`reference.codec`."""
from .codec import decode_chunks, encode_chunks, pack_bits, unpack_bits

__all__ = ["encode_chunks", "decode_chunks", "pack_bits", "unpack_bits"]
