"""Public API: ``encode``, ``decode``, ``decode_chunks``, ``slice_stream``, ``inspect``."""
from __future__ import annotations

import math

import numpy as np

from . import backends
from . import format as fmt
from . import filters, repeats
from .codebook import PHASES, ZERO_LEVELS, codebook_params
from .format import FormatError
from .layouts import FloatLayout, as_words, host_array, is_torch, layout_for
from .model import SHAPES

DEFAULT_CHUNK_SIZE = 1 << 16   # values per chunk: ~0.2% overhead (32 rANS states + 25 B) on bf16 Gaussians
# float32 chunks are smaller: finer dropping of all-zero low mantissa bits (weights up-cast from
# 16-bit formats) outweighs the overhead.  MiniLM fp32 weights: 1.2219 at 16K, 1.2174 at 64K values.
DEFAULT_CHUNK_SIZE_F32 = 1 << 14
# float8 chunks hold as many bytes as 16-bit ones: per value, a chunk's head, rANS states and (format 7)
# table weigh twice as much at a byte a value, and an fp8 weight's ~6.2 coded bits leave little to lose.
# MiniLM e4m3 weights: 1.3140 at 64K, 1.3156 at 128K values (tensors >= the best peer 1 -> 12 of 39); e5m2
# weights 1.4368 -> 1.4387; activations (whose scale changes within a tensor) 0.1-0.2 % lower
# (bench/results/fp8_chunks_amd-epyc-f25-m1.md)
DEFAULT_CHUNK_SIZE_F8 = 1 << 17


def default_chunk_size(lay: FloatLayout) -> int:
    """Values per chunk where the caller names none: 64 KiB of float32, 128 KiB of 16- and 8-bit types."""
    return {4: DEFAULT_CHUNK_SIZE_F32, 1: DEFAULT_CHUNK_SIZE_F8}.get(lay.itemsize, DEFAULT_CHUNK_SIZE)


BACKENDS = backends.names()
DEVICE_BACKENDS = backends.device_names()   # generated GPU kernels (codegen); "auto" picks triton for GPU data


def partition(numel: int, parts: int, dtype, *, chunk_size: int | None = None) -> list[int]:
    """Boundaries ``[0, b1, ..., numel]`` of ``parts`` near-equal shards that fall on chunk boundaries,
    for collectives that split a tensor into shards (and shards into slices of whole chunks).

    ``encode(x, partition=bounds)`` then writes each shard as one contiguous byte range that
    :func:`shard_streams` cuts out as a standalone stream, without decoding or re-encoding.
    """
    if parts < 1 or numel < 0:
        raise ValueError(f"need parts >= 1 and numel >= 0, got parts={parts}, numel={numel}")
    cs = chunk_size or default_chunk_size(layout_for(dtype))
    share = -(-numel // parts)                       # ceil(numel / parts) values per shard...
    per = -(-share // cs) * cs                       # ...rounded up to whole chunks
    return [min(i * per, numel) for i in range(parts)] + [numel]


def _partition_chunk_size(bounds, numel: int, default: int) -> int:
    b = [int(v) for v in bounds]
    if not b or b[0] != 0 or b[-1] != numel or any(x > y for x, y in zip(b, b[1:])):
        raise ValueError(f"partition must rise from 0 to numel={numel}, got {b[:8]}{'...' if len(b) > 8 else ''}")
    g = 0
    for v in b[1:-1]:
        if 0 < v < numel:                            # the ends are chunk boundaries whatever the size
            g = math.gcd(g, v)
    cs = math.gcd(g, default) if g else default
    if cs < min(default, 1024) and numel > cs:
        raise ValueError(f"partition boundaries share no chunk size >= 1024 (largest common: {cs}): use "
                         "codec.partition(numel, parts, dtype) for chunk-aligned shards")
    return cs


def shard_streams(buf, bounds) -> list[bytes]:
    """Standalone streams of the shards ``[bounds[i], bounds[i+1])`` of a 1-D view of ``buf``'s tensor;
    every interior boundary must fall on a chunk boundary (see :func:`partition`)."""
    h = fmt.parse_header(buf)
    if [int(bounds[0]), int(bounds[-1])] != [0, h.numel]:
        raise ValueError(f"bounds must run from 0 to {h.numel}")
    out = []
    for a, b in zip(bounds, bounds[1:]):
        a, b = int(a), int(b)
        if (a % h.chunk_size and a != h.numel) or (b % h.chunk_size and b != h.numel) or b < a:
            raise ValueError(f"shard [{a}, {b}) does not fall on chunk boundaries (chunk size {h.chunk_size})")
        first = -(-a // h.chunk_size)
        out.append(slice_stream(buf, first, max(first, -(-b // h.chunk_size))))
    return out


def _chunk_plan(numel: int, shape, lay: FloatLayout, chunk_size, partition, checksum):
    """The chunk size of an encode, the header's size and the most bytes the stream can take."""
    if chunk_size is None:
        chunk_size = default_chunk_size(lay)
    if partition is not None:
        chunk_size = _partition_chunk_size(partition, numel, chunk_size)
    if not 1 <= chunk_size <= fmt.MAX_CHUNK_SIZE:
        raise ValueError(f"chunk_size must be in [1, {fmt.MAX_CHUNK_SIZE}], got {chunk_size}")
    if len(shape) > fmt.MAX_NDIM:
        raise ValueError(f"at most {fmt.MAX_NDIM} dimensions are supported, got {len(shape)}")
    head = fmt.header_nbytes(len(shape), -(-numel // chunk_size), checksum)
    return chunk_size, head, head + numel * lay.itemsize


def _encode_plan(x, chunk_size, partition, checksum):
    """The words, layout, shape, torch flag and chunk size of an encode, the header's size and the
    most bytes the stream can take (every chunk raw)."""
    words, lay, shape, from_torch = as_words(x)
    return (words, lay, shape, from_torch) + _chunk_plan(len(words), shape, lay, chunk_size, partition, checksum)


def _on_device(x):
    """``x`` as a torch tensor if it lives on a CUDA device (a torch tensor, or a CuPy-style array
    through DLPack), else None."""
    if is_torch(x):
        return x if x.device.type == "cuda" else None
    if isinstance(x, (np.ndarray, bytes, bytearray, memoryview)) or not hasattr(x, "__cuda_array_interface__"):
        return None
    import torch

    if hasattr(x, "__dlpack__"):
        return torch.from_dlpack(x)
    return torch.as_tensor(x, device="cuda")       # __cuda_array_interface__ alone (Numba's device arrays)


def _host_stream(buf):
    """A stream held on the host as something ``memoryview`` takes: a uint8 CPU tensor (what
    ``encode(x, out=tensor)`` returns) becomes its NumPy view; anything else is returned as is."""
    if is_torch(buf) and buf.device.type == "cpu":
        import torch

        if buf.dtype != torch.uint8 or buf.dim() != 1:
            raise ValueError(f"a stream in a tensor must be a 1-D uint8 tensor, got {buf.dtype} {tuple(buf.shape)}")
        return host_array(buf.detach().contiguous())
    return buf


def _device_dialect(backend: str, what: str, on) -> str:
    """The kernels' dialect for data on a device (or sent there by a device backend): "auto" is Triton."""
    if backend not in ("auto",) + DEVICE_BACKENDS:
        raise ValueError(f"backend {backend!r} runs on the CPU; this {what} is on {on.device}")
    return "triton" if backend == "auto" else backend


def _encode_device(x, dev_x, chunk_size, checksum, partition, out, dialect):
    """Encode with the generated kernels of ``dialect``: ``x`` on a CUDA device (``dev_x``), or a host
    tensor copied to the GPU (or, for Triton, encoded on the CPU under TRITON_INTERPRET)."""
    import torch

    dev = backends.get(dialect)
    if dev_x is not None:
        lay = layout_for(dev_x.dtype)
        shape, from_torch = tuple(dev_x.shape), is_torch(x)
        words = dev_x.detach().contiguous().view(-1).view(lay.torch_words)
    else:
        host, lay, shape, from_torch = as_words(x)
        signed = host.view(lay.view_ints)
        words = torch.from_numpy(np.array(signed)).view(lay.torch_words).to(dev.device())
    chunk_size, _, bound = _chunk_plan(words.numel(), shape, lay, chunk_size, partition, checksum)
    flags = (fmt.FLAG_CHECKSUM if checksum else 0) | (fmt.FLAG_TORCH if from_torch else 0)
    def code(w, section=b""):          # as the host encoders: the row filter where its gate opens
        coded = dev.encode_stream(w, lay, shape, chunk_size, flags, section)
        width = _find_filter(w, shape, lay, chunk_size)
        if width:
            up = dev.encode_stream(filters.forward_torch(w, lay, chunk_size, width), lay, shape, chunk_size, flags,
                                   section)
            merged = filters.merge(coded.cpu().numpy(), up.cpu().numpy(), width, repeats=section)
            if section or len(merged) <= bound:           # as the host: past the bound, the caller drops the section
                coded = torch.from_numpy(np.frombuffer(merged, np.uint8).copy()).to(coded.device)
        return coded

    stream = None
    found = _find_repeats(words, shape, lay, partition)
    if found is not None:              # as the host encoders: the section where it pays, on the device
        stream = code(repeats.cleared(words, found[0], found[1]), found[3])
        plain = None
        if _plain_may_win(stream.numel(), len(found[3]), bound):
            plain = code(words)
        if stream.numel() > bound or (plain is not None and plain.numel() <= stream.numel()):
            stream = plain
    if stream is None:
        stream = code(words)
    n = stream.numel()
    if dev_x is not None:
        if out is None:
            return stream if is_torch(x) else _like(x, stream)
        if not (is_torch(out) and out.device == stream.device and out.dtype == torch.uint8 and out.is_contiguous()):
            raise ValueError(f"out must be a contiguous uint8 tensor on {stream.device} for a tensor there")
        if out.numel() < n:
            raise ValueError(f"out holds {out.numel()} bytes; this stream needs {n}")
        out.view(-1)[:n].copy_(stream)
        return out.view(-1)[:n]
    data = stream.cpu().numpy()
    if out is None:
        return bytearray(data)
    dst, result = _out_bytes(out)
    if len(dst) < n:
        raise ValueError(f"out holds {len(dst)} bytes; this stream needs {n} (codec.max_encoded_size)")
    dst[:n] = data
    return result(n)


def _like(x, t):
    """``t`` (a torch CUDA tensor) as the array family of ``x`` (CuPy and the like, through DLPack);
    the torch tensor itself where that family cannot take one."""
    import importlib

    family = importlib.import_module(type(x).__module__.split(".")[0])
    return family.from_dlpack(t) if hasattr(family, "from_dlpack") else t


def max_encoded_size(x, *, chunk_size: int | None = None, checksum: bool = False,
                     partition: list[int] | None = None) -> int:
    """The most bytes :func:`encode` can write for ``x`` with these options (every chunk stored raw,
    plus the header and chunk table): the size of an ``out`` buffer that always suffices."""
    return _encode_plan(x, chunk_size, partition, checksum)[-1]


def _input_memory(x) -> np.ndarray:
    """A NumPy view of the memory ``x`` itself occupies, whatever its strides (the words handed to the
    encoder may be a contiguous copy of it); an empty array when ``x`` is not on the host."""
    if is_torch(x):
        t = x.detach()
        if t.device.type != "cpu":
            return np.empty(0, np.uint8)
        return host_array(t.view(layout_for(t.dtype).torch_view_ints))
    return np.asarray(x)


def _out_bytes(out):
    """A writeable uint8 view of a caller's encode buffer, and how to return its first n bytes."""
    if is_torch(out):
        import torch

        if out.device.type != "cpu" or not out.is_contiguous() or out.dtype != torch.uint8:
            raise ValueError("out must be a contiguous CPU uint8 tensor")
        return host_array(out.detach().view(-1)), lambda n: out.view(-1)[:n]
    if isinstance(out, np.ndarray):
        if out.dtype != np.uint8 or out.ndim != 1 or not out.flags.c_contiguous or not out.flags.writeable:
            raise ValueError("out must be a writeable 1-D contiguous uint8 array")
        return out, lambda n: out[:n]
    try:
        mv = memoryview(out).cast("B")
    except TypeError as e:
        raise ValueError(f"out must be a writeable contiguous byte buffer: {e}") from None
    if mv.readonly:
        raise ValueError("out must be writeable")
    return np.frombuffer(mv, np.uint8), lambda n: mv[:n]


def encode(x, *, chunk_size: int | None = None, checksum: bool = False, backend: str = "auto",
           partition: list[int] | None = None, out=None):
    """Compress a float tensor losslessly.

    x: NumPy array (``ml_dtypes`` for bfloat16/float8) or torch tensor of dtype
    bfloat16, float16, float32, float8_e4m3fn or float8_e5m2, any shape and strides.  A tensor on a
    CUDA device (torch, or an array with ``__cuda_array_interface__`` such as CuPy's) is encoded there
    by the generated kernels (``backend`` "auto"/"triton" or "cuda"), and the stream is returned as a
    1-D uint8 tensor on that device (a CuPy array for CuPy input); ``out`` must then be one there too.
    chunk_size: values per independently decodable chunk, 1..2**20; default 65536 (16384 for float32,
    131072 for float8).
    checksum: store CRC32C of the header and of every chunk (decode then detects any corruption).
    partition: shard boundaries over the flattened tensor (see :func:`partition`); the chunk size is
    chosen so that every boundary is a chunk boundary (``ValueError`` if that needs chunks < 1024).
    out: a writeable contiguous byte buffer (``bytearray``, 1-D uint8 NumPy array or CPU tensor) of at
    least :func:`max_encoded_size` bytes to encode into; the stream is then returned as a view of its
    first bytes (a memoryview, array or tensor): no allocation, no page faults for a reused buffer.
    Returns the stream (format: :mod:`codec.format`) as a ``bytearray`` (without ``out``), built in
    place: peak extra memory is about the output (plus up to 16 MiB of scratch with several numba
    threads), but for a tensor whose row filter's gate opens (format 10, :mod:`codec.filters`: tensors of
    two or more dimensions and at least 1 MiB whose columns keep their scale), coded twice into streams of its
    own (the words as they are and filtered: about three times the tensor) and merged, then copied to ``out``.
    ``x`` is never modified.
    """
    dev_x = _on_device(x)
    if dev_x is not None or backend in DEVICE_BACKENDS:
        return _encode_device(x, dev_x, chunk_size, checksum, partition, out,
                              _device_dialect(backend, "tensor", dev_x))
    words, lay, shape, from_torch, chunk_size, pos, bound = _encode_plan(x, chunk_size, partition, checksum)
    impl = backends.get(_host_backend(backend, fmt.WRITE_VERSION))
    flags = (fmt.FLAG_CHECKSUM if checksum else 0) | (fmt.FLAG_TORCH if from_torch else 0)
    dst = None
    if out is not None:
        dst, result = _out_bytes(out)
        if len(dst) < bound:
            raise ValueError(f"out holds {len(dst)} bytes; encoding this tensor may need {bound} "
                             "(codec.max_encoded_size)")
        if np.may_share_memory(dst, words) or np.may_share_memory(dst, _input_memory(x)):
            raise ValueError("out overlaps the tensor being encoded")
    found = _find_repeats(words, shape, lay, partition)
    if found is not None:
        section = found[3]
        base = repeats.cleared(words, found[0], found[1])
        # the payloads are coded after the section: where ``out`` lacks the room for every chunk raw
        # there, the stream is coded apart and copied (the same bytes whatever buffer is given)
        room = dst is None or len(dst) >= bound + len(section)
        width = _find_filter(base, shape, lay, chunk_size, impl)
        if width:
            stream = _encode_filtered(impl, base, width, lay, shape, chunk_size, checksum, flags,
                                      pos + len(section), section)
            room = False
        else:
            stream = _encode_host(impl, base, lay, shape, chunk_size, checksum, flags, pos + len(section),
                                  dst if room else None, section)
        n = stream if isinstance(stream, int) else len(stream)
        plain = None
        if _plain_may_win(n, len(section), bound):
            plain = _encode_words(impl, words, lay, shape, chunk_size, checksum, flags, pos)
        if n <= bound and (plain is None or n < len(plain)):
            if dst is None:
                return stream
            if not room:
                dst[:n] = np.frombuffer(stream, np.uint8)
            return result(n)
        if plain is not None:             # the words as they are made the smaller stream
            if dst is None:
                return plain
            dst[:len(plain)] = np.frombuffer(plain, np.uint8)
            return result(len(plain))
    stream = _filtered(impl, words, lay, shape, chunk_size, checksum, flags, pos)
    if stream is not None:
        if dst is None:
            return stream
        dst[:len(stream)] = np.frombuffer(stream, np.uint8)
        return result(len(stream))
    stream = _encode_host(impl, words, lay, shape, chunk_size, checksum, flags, pos, dst, b"")
    return stream if dst is None else result(stream)


def _find_filter(words, shape, lay, chunk_size, impl=None) -> int:
    """The row width of the row filter (version 10) an encode tries, or 0: where the encoders write version 7
    (a filter needs version 10, which is version 7's chunks) and :func:`codec.filters.choose` opens (its sample
    counted by the host backend ``impl``, or on the device for a torch tensor there)."""
    if fmt.WRITE_VERSION != fmt.FORMAT_VERSION:
        return 0
    if is_torch(words):
        return filters.choose(words, shape, lay, chunk_size, filters.torch_costs)
    return filters.choose(words, shape, lay, chunk_size, getattr(impl, "filter_costs", filters.numpy_costs))


def _encode_filtered(impl, words, width, lay, shape, chunk_size, checksum, flags, pos, section) -> bytearray:
    """``words`` coded as they are and through the row filter, each chunk's smaller payload kept
    (:func:`codec.filters.merge`); ``section``: a row-repeat section both carry."""
    plain = _encode_host(impl, words, lay, shape, chunk_size, checksum, flags, pos, None, section)
    up = _encode_host(impl, impl.filter_forward(words, lay, chunk_size, width), lay, shape, chunk_size,
                      checksum, flags, pos, None, section)
    return filters.merge(plain, up, width, repeats=section)


def _filtered(impl, words, lay, shape, chunk_size, checksum, flags, pos) -> bytearray | None:
    """The stream of ``words`` (no row-repeat section, the head at most ``pos`` bytes) through the row filter,
    where its gate opens and the stream stays within the bound; else None."""
    width = _find_filter(words, shape, lay, chunk_size, impl)
    if width:
        stream = _encode_filtered(impl, words, width, lay, shape, chunk_size, checksum, flags, pos, b"")
        if len(stream) <= pos + len(words) * lay.itemsize:
            return stream
    return None


def _encode_words(impl, words, lay, shape, chunk_size, checksum, flags, pos) -> bytearray:
    """The stream of ``words`` without a row-repeat section: through the row filter where it is tried."""
    stream = _filtered(impl, words, lay, shape, chunk_size, checksum, flags, pos)
    if stream is not None:
        return stream
    return _encode_host(impl, words, lay, shape, chunk_size, checksum, flags, pos, None, b"")


def _find_repeats(words, shape, lay, partition):
    """The row-repeat section an encode writes (``(row, dst, src, section bytes)``), or None: where the encoders write
    version 7 (a section needs version 9, which is version 7's chunks) and no partition asks for shards
    that stand alone (a repeat's source may lie in another shard)."""
    if partition is not None or fmt.WRITE_VERSION != fmt.FORMAT_VERSION:
        return None
    return repeats.find(words, shape, lay.itemsize)


def _plain_may_win(n: int, section: int, bound: int) -> bool:
    """Whether an encoder also codes the words without their row-repeat section (``section`` bytes of a
    stream of ``n`` within ``bound``) and keeps the smaller stream (a tie: the one without): where the
    section is a quarter of the stream or more, the repeated rows may have cost little in the chunks (a
    constant tensor's rows: CONST chunks either way).  Past the bound the stream is coded without it."""
    return n <= bound and 4 * section >= n


def _encode_host(impl, words, lay, shape, chunk_size, checksum, flags, pos, dst, section):
    """The stream of ``words`` coded by the host backend ``impl`` from offset ``pos`` (the most header bytes
    plus ``section``, the row-repeat section): a new bytearray, or its length, written to the front of ``dst``."""
    if dst is None:
        buf = bytearray(pos)
        impl.reserve(buf, pos + len(words) * lay.itemsize)     # payloads coded straight into it, then shrunk
    view = dst if dst is not None else np.frombuffer(buf, np.uint8)
    kinds, sizes, crcs = impl.encode_into(view, pos, words, lay, chunk_size, checksum)
    del view                                     # release the export before ``buf`` is resized
    end = pos + int(sizes.sum())
    if dst is None:
        impl.shrink(buf, end)
    head = fmt.pack_header(lay, shape, chunk_size, flags, kinds, sizes, crcs if checksum else None,
                           repeats=section)
    slack = pos - len(head)              # a compact head is shorter than the fixed-width one coded behind
    if dst is None:
        buf[slack:pos] = head
        del buf[:slack]                  # O(1): a bytearray's front is dropped by moving its start
        return buf
    if slack:                            # the stream starts at out[0]: move the payloads (a compact
        dst[len(head):end - slack] = dst[pos:end]     # head: at most COMPACT_MAX_CHUNKS chunks of them)
    dst[:len(head)] = np.frombuffer(head, np.uint8)
    return end - slack


def _host_backend(backend: str, version: int) -> str:
    """The host backend that writes format ``version``: format 8 (a draft) has no numba encoder yet (see
    codec._numba's layout section), so the reference writes its streams where numba was asked for."""
    return "reference" if fmt.explicit_layouts(version) and backend in ("auto", "numba") else backend


def _decode_words(buf, first: int | None, last: int | None, backend: str, dest=None, max_numel=None):
    """Header and the words of chunks ``[first, last)``; decoded into ``dest(h, n)`` (a callable giving
    a writeable uint array of ``n`` words) when given, else into a fresh array.  ``max_numel``: refuse a
    stream of more values (``ValueError``) before anything is allocated or written."""
    h = fmt.parse_header(buf)
    if max_numel is not None and h.numel > max_numel:
        raise ValueError(f"the stream holds {h.numel} values, more than max_numel={max_numel}")
    first = 0 if first is None else first
    last = h.n_chunks if last is None else last
    if not 0 <= first <= last <= h.n_chunks:
        raise IndexError(f"chunk range [{first}, {last}) outside [0, {h.n_chunks}]")
    chunks = range(first, last)
    fmt.verify_chunk_crcs(h, buf, chunks)
    n = min(last * h.chunk_size, h.numel) - first * h.chunk_size if last > first else 0
    impl = backends.get(backend)
    out = impl.empty(n, h.layout.uint) if dest is None else dest(h, n)
    impl.decode_chunks(h, buf, chunks, out)
    if h.filter is not None and n:
        _filter_inverse(impl)(out, h.layout, h.chunk_size, h.filter.width, h.filter.chunks, first)
    if h.repeats is not None and n:
        if n == h.numel:
            fmt.apply_repeats(h.repeats, out)
        else:
            _range_repeats(h, buf, first, out, impl)
    return h, out


def _filter_inverse(impl):
    """The row filter's inverse a backend runs on host words (a device backend decoding to the host: NumPy's)."""
    return getattr(impl, "filter_inverse", filters.inverse)


def _range_repeats(h, buf, first: int, out: np.ndarray, impl) -> None:
    """Give the repeated rows (version 9) that overlap the decoded chunks ``out`` (from chunk ``first``) their
    sources' words, decoding the chunks outside ``out`` that hold sources (each checked by its CRC)."""
    rep, cs = h.repeats, h.chunk_size
    a = first * cs
    b = a + len(out)
    lo, hi = np.searchsorted(rep.dst, [a // rep.row, -(-b // rep.row)])
    at = np.arange(rep.row, dtype=np.int64)
    step = max(1, fmt.REPEAT_COPY_WORDS // rep.row)
    decoded = {}                                        # chunks outside ``out`` decoded for their sources
    for r in range(lo, hi, step):
        to = (rep.dst[r:min(r + step, hi), None] * rep.row + at).ravel()
        fro = (rep.src[r:min(r + step, hi), None] * rep.row + at).ravel()
        keep = (to >= a) & (to < b)
        to, fro = to[keep], fro[keep]
        vals = np.empty(len(fro), dtype=out.dtype)
        inside = (fro >= a) & (fro < b)
        vals[inside] = out[fro[inside] - a]
        for c in np.unique(fro[~inside] // cs).tolist():
            if c not in decoded:
                fmt.verify_chunk_crcs(h, buf, [c])
                decoded[c] = impl.empty(h.chunk_len(c), h.layout.uint)
                impl.decode_chunks(h, buf, range(c, c + 1), decoded[c])
                if h.filter is not None:
                    _filter_inverse(impl)(decoded[c], h.layout, cs, h.filter.width, h.filter.chunks, c)
            sel = ~inside & (fro // cs == c)
            vals[sel] = decoded[c][fro[sel] - c * cs]
        out[to - a] = vals


def _to_family(words: np.ndarray, lay: FloatLayout, shape, torch_out: bool):
    arr = words.view(lay.numpy_dtype).reshape(shape)
    if not torch_out:
        return arr
    import torch

    return torch.from_numpy(words.view(lay.view_ints)).view(lay.torch_dtype).reshape(shape)


def _writable_memory(addr: int, nbytes: int) -> bool:
    """Whether the process may write ``[addr, addr + nbytes)`` (Linux: the mappings' permissions in
    /proc/self/maps; elsewhere assumed so).  A tensor over a read-only mapping (``np.memmap`` mode
    "r" through ``torch.from_numpy``) looks writeable to torch and NumPy alike; writing it faults."""
    if nbytes == 0:
        return True
    try:
        with open("/proc/self/maps") as f:
            lines = f.readlines()
    except OSError:
        return True
    end, at = addr + nbytes, addr
    for line in lines:                      # sorted by address
        span, perms = line.split()[:2]
        lo, hi = (int(v, 16) for v in span.split("-"))
        if hi <= at:
            continue
        if lo > at or "w" not in perms:
            return False
        at = hi
        if at >= end:
            return True
    return False


def _out_words(out):
    """The words of a caller's ``out`` to decode into, in place (never a copy)."""
    if is_torch(out):
        if out.device.type != "cpu" or not out.is_contiguous():
            raise ValueError("out must be a contiguous CPU tensor")
        lay = layout_for(out.dtype)
        # torch's own allocations are writable; memory it was handed (from_numpy, frombuffer, DLPack:
        # storage that cannot be resized) may be a read-only mapping
        if not out.untyped_storage().resizable() and \
                not _writable_memory(out.data_ptr(), out.numel() * out.element_size()):
            raise ValueError("out is read-only memory (a tensor over a read-only mapping)")
        return host_array(out.detach().view(-1).view(lay.torch_view_ints)).view(lay.uint), lay
    if not (isinstance(out, np.ndarray) and out.flags.c_contiguous and out.flags.writeable):
        raise ValueError("out must be a writeable C-contiguous array")
    if not out.dtype.isnative:
        raise ValueError(f"out has non-native byte order ({out.dtype.str}): decode into a native array, then "
                         "byteswap if needed")
    lay = layout_for(out.dtype)
    return out.reshape(-1).view(lay.uint), lay


def decode(buf, *, out=None, backend: str = "auto", max_numel: int | None = None):
    """Decompress a stream made by :func:`encode`; bit-exact.

    Returns an array of the original dtype and shape: a torch tensor if a torch tensor was
    encoded and torch is importable, else a NumPy array.  A stream in a 1-D uint8 CUDA tensor (or CuPy
    array) is decoded on that device into a tensor there (``backend`` "auto"/"triton" or "cuda").
    ``out``: a C-contiguous array or tensor (on the stream's device) of the same dtype and number of
    elements, decoded into in place and returned (if the
    stream turns out to be bad, ``out`` may be partly overwritten before the error is raised).
    ``max_numel``: refuse (``ValueError``) a stream of more values than this before allocating or
    writing anything: a service that decodes what others send bounds its memory with it (a valid
    stream of a few KB can describe 2**40 zeros).
    Raises :class:`codec.FormatError` for any malformed, truncated or corrupted stream.
    """
    dev_buf = _on_device(buf)
    if dev_buf is not None:
        return _decode_device(buf, dev_buf, out, _device_dialect(backend, "stream", dev_buf))
    buf = _host_stream(buf)
    if out is not None:
        dst, lay = _out_words(out)
        if np.may_share_memory(dst, np.frombuffer(memoryview(buf).cast("B"), np.uint8)):
            raise ValueError("out overlaps the stream being decoded: decode into a separate buffer")

        def dest(h, n):
            if lay is not h.layout or dst.size != n:
                raise ValueError(f"out must hold {n} values of {h.layout.name}, got {dst.size} of {lay.name}")
            return dst

        _decode_words(buf, None, None, backend, dest, max_numel)
        return out
    h, words = _decode_words(buf, None, None, backend, max_numel=max_numel)
    torch_out = bool(h.flags & fmt.FLAG_TORCH)
    if torch_out:
        try:
            import torch  # noqa: F401
        except ImportError:
            torch_out = False
    return _to_family(words, h.layout, h.shape, torch_out)


def _decode_device(buf, dev_buf, out, dialect):
    """Decode a stream held on a CUDA device there; the result is a torch tensor on that device
    (or the array family of ``buf``, through DLPack), or ``out`` (a tensor there) decoded into."""
    import torch

    dev = backends.get(dialect)

    if dev_buf.dtype != torch.uint8 or dev_buf.dim() != 1:
        raise ValueError(f"a stream on a GPU must be a 1-D uint8 tensor, got {dev_buf.dtype} {tuple(dev_buf.shape)}")
    words = None
    if out is not None:
        if not (is_torch(out) and out.device == dev_buf.device and out.is_contiguous()):
            raise ValueError(f"out must be a contiguous tensor on {dev_buf.device}")
        out_lay = layout_for(out.dtype)
        words = out.detach().view(-1).view(out_lay.torch_words)
    h, words = dev.decode_stream(dev_buf.contiguous(), words, out_lay if out is not None else None)
    if out is not None:
        return out
    result = words.view(h.layout.torch_dtype).reshape(h.shape)
    return result if is_torch(buf) else _like(buf, result)


def decode_chunks(buf, first: int, last: int, *, backend: str = "auto") -> np.ndarray:
    """Values of chunks ``[first, last)`` only, as a flat NumPy array (others are not touched)."""
    h, words = _decode_words(_host_stream(buf), first, last, backend)
    return words.view(h.layout.numpy_dtype)


def slice_stream(buf, first: int, last: int) -> bytes:
    """A standalone stream of chunks ``[first, last)`` (1-D), made without decoding (but for a stream with a
    row-repeat section, whose rows may repeat rows of other chunks: those chunks are decoded, then coded
    again with the stream's chunk size and checksum setting)."""
    buf = _host_stream(buf)
    h = fmt.parse_header(buf)
    if not 0 <= first <= last <= h.n_chunks:
        raise IndexError(f"chunk range [{first}, {last}) outside [0, {h.n_chunks}]")
    if h.repeats is not None:
        return bytes(encode(decode_chunks(buf, first, last), chunk_size=h.chunk_size, checksum=h.checksum))
    section, version = b"", max(h.version, fmt.FORMAT_VERSION)
    if h.filter is not None:              # filtered chunks stay filtered: their rows start at their own first value
        picked = h.filter.chunks[first:last]
        section = fmt.pack_filter(h.filter.width, picked, h.filter.kind) if picked.any() else b""
        version = fmt.FILTER_VERSION if section else fmt.FORMAT_VERSION
    numel = min(last * h.chunk_size, h.numel) - first * h.chunk_size if last > first else 0
    a = h.chunk_span(first)[0] if last > first else h.payload_start
    b = h.chunk_span(last - 1)[1] if last > first else h.payload_start
    sizes = np.diff(h.ends[first:last], prepend=h.ends[first - 1] if first else 0)
    crcs = h.crcs[first:last] if h.checksum else None
    # the newer of the stream's version and the encoder's: every older payload is a valid newer one
    head = fmt.pack_header(h.layout, (numel,), h.chunk_size, h.flags & ~fmt.FLAG_TORCH, h.kinds[first:last],
                           sizes, crcs, version=version, filter=section)
    return head + bytes(memoryview(buf).cast("B")[a:b])


def inspect(buf) -> dict:
    """Header facts and per-chunk statistics of a stream (without decoding the values)."""
    buf = _host_stream(buf)
    h = fmt.parse_header(buf)
    lay = h.layout
    total = len(memoryview(buf).cast("B"))
    chunks = []
    for i in range(h.n_chunks):
        a, b = h.chunk_span(i)
        n = h.chunk_len(i)
        info = {"index": i, "values": n, "kind": fmt.KIND_NAMES[int(h.kinds[i])], "nbytes": b - a,
                "bits_per_value": 8 * (b - a) / n, "filtered": bool(h.filter is not None and h.filter.chunks[i])}
        if h.kinds[i] == fmt.KIND_CODED:
            hd = fmt.parse_chunk_head(h, buf, i)
            if hd.codebook == fmt.CB_EXPLICIT:        # version 7: the chunk's own frequencies, not a fitted shape
                k, sgn = fmt.layout_parts(hd.layout)
                info.update(codebook=hd.codebook, shape="explicit", frequencies=[int(f) for f in hd.table],
                            table_nbytes=len(fmt.pack_explicit_table(hd.table, hd.layout if fmt.explicit_layouts(h.version)
                                                                     else None)),
                            symbol_mantissa_bits=1 + k, sign_in_symbol=bool(sgn))   # version 8's layouts
            else:
                s, q, z = codebook_params(hd.codebook)
                info.update(codebook=hd.codebook, shape=SHAPES[s].name, phase=(q + 0.5) / PHASES, zero_level=ZERO_LEVELS[z])
            info.update(ref_exponent=hd.ref - lay.bias, escapes=hd.n_esc,
                        zeros=n - hd.n_sm, dropped_mantissa_bits=hd.shift,
                        zero_block_size=(1 << hd.mode) if hd.mode else 0, coded_values=hd.n_coded,
                        sign=fmt.SIGN_NAMES[hd.sign], dropped_high_bits=hd.narrow)
        elif h.kinds[i] == fmt.KIND_SPARSE:
            mv = np.frombuffer(memoryview(buf).cast("B"), dtype=np.uint8)
            pos, words = fmt.parse_sparse(mv[a:b], n, lay.itemsize, i)
            info.update(nonzero=len(pos), zeros=n - len(pos),
                        word_bits=int(np.bitwise_or.reduce(words, initial=0)).bit_length())
        chunks.append(info)
    numel = h.numel
    return {"format_version": h.version, "dtype": lay.name, "shape": h.shape, "numel": numel,
            "chunk_size": h.chunk_size, "n_chunks": h.n_chunks, "checksum": h.checksum,
            "row_repeats": None if h.repeats is None else {"row_values": h.repeats.row, "rows": h.repeats.n_repeated,
                                                             "nbytes": h.repeats.nbytes},
            "row_filter": None if h.filter is None else {"filter": fmt.FILTER_NAMES[h.filter.kind],
                                                          "row_values": h.filter.width,
                                                          "chunks": int(h.filter.chunks.sum()),
                                                          "nbytes": h.filter.nbytes},
            "nbytes": total, "raw_nbytes": numel * lay.itemsize,
            "ratio": numel * lay.itemsize / total if total else math.inf,
            "bits_per_value": 8 * total / numel if numel else 0.0,
            "header_nbytes": h.payload_start, "chunks": chunks}
