"""Framing: a tensor (or a split-send slice) as the bytes that go on the wire and back, and the checks of
a received frame before anything is decoded (dtype, number of values, checksums, size bound).
Every frame made here is counted in :data:`collectives.traffic.traffic`."""
from __future__ import annotations

import torch

import codec
from codec import format as fmt
from codec.layouts import host_array
from codec.layouts import layout_for
from codec.planes import join_low, split_low

from .traffic import traffic


def encode(t: torch.Tensor, compress: bool, checksum: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """The frame of ``t``: its codec stream, or its raw bytes when uncompressed (a view: never written to).
    ``out``: a uint8 buffer of at least :func:`codec.max_encoded_size` bytes to encode into (the frame
    is then a view of it)."""
    if not compress:
        out = t.detach().contiguous().reshape(-1).view(torch.uint8)     # sent as is: never written to
    elif out is not None:
        out = codec.encode(t.detach(), checksum=checksum, out=out)
    else:
        out = torch.frombuffer(codec.encode(t.detach(), checksum=checksum), dtype=torch.uint8)
    traffic.add(t.numel() * t.element_size(), out.numel())
    return out


def check_frame(stream, out: torch.Tensor, checksum: bool):
    """The header of a frame a peer sent for ``out``, checked before anything is decoded: the dtype and
    number of values must be ``out``'s (so the decoded size is bounded by this rank's own tensor, not
    by what the peer announces), and a receiver that asks for checksums gets a checksummed frame."""
    h = fmt.parse_header(stream)
    if h.layout is not layout_for(out.dtype):
        raise TypeError(f"a peer sent {h.layout.name} values for a {out.dtype} tensor")
    if h.numel != out.numel():
        raise ValueError(f"a peer sent {h.numel} values for a tensor of {out.numel()}")
    if checksum and not h.checksum:
        raise codec.FormatError("a peer sent a frame without checksums although checksum=True here: "
                                "corruption would pass undetected")
    return h


def decode_into(buf: torch.Tensor, out: torch.Tensor, compress: bool, checksum: bool = False) -> torch.Tensor:
    """Decode the frame ``buf`` (checked first) into ``out``."""
    if not compress:
        if buf.numel() != out.numel() * out.element_size():
            raise ValueError(f"a peer sent {buf.numel()} bytes for a tensor of {out.numel() * out.element_size()}")
        out.view(-1).copy_(buf.view(out.dtype))
        return out
    stream = host_array(buf)
    check_frame(stream, out, checksum)
    if out.is_contiguous():
        codec.decode(stream, out=out.detach())
    else:
        out.view(-1).copy_(codec.decode(stream).reshape(-1))
    return out


def frame_limit(t: torch.Tensor, compress: bool) -> int:
    """The most bytes a frame for ``t`` can take: its raw size uncompressed; compressed, every chunk
    stored raw with the largest chunk table (one value per chunk, with checksums)."""
    raw = t.numel() * t.element_size()
    return fmt.header_nbytes(t.dim(), t.numel(), True) + raw if compress else raw


def as_numpy(t: torch.Tensor):
    """A NumPy view of a CPU tensor with the matching NumPy/ml_dtypes float dtype."""
    lay = layout_for(t.dtype)
    return host_array(t.view(lay.torch_view_ints)).view(lay.numpy_dtype)


def split_encode(part: torch.Tensor):
    """Split-send of one slice: (low-bit plane, to send at once; the head, still to be coded)."""
    head, low = split_low(as_numpy(part))
    traffic.add(part.numel() * part.element_size() - head.nbytes, low.nbytes)
    return torch.from_numpy(low), head


def encode_head(head, checksum: bool) -> torch.Tensor:
    """The frame of a split slice's head (from :func:`split_encode`)."""
    out = torch.frombuffer(codec.encode(head, checksum=checksum), dtype=torch.uint8)
    traffic.add(head.nbytes, out.numel())
    return out


def join_into(low: torch.Tensor, payload: torch.Tensor, out: torch.Tensor, checksum: bool) -> None:
    """Decode a split slice (its low-bit plane and its head's frame, checked first) into ``out``."""
    stream = host_array(payload)
    check_frame(stream, out, checksum)
    as_numpy(out.view(-1))[:] = join_low(codec.decode(stream), host_array(low)).reshape(-1)
