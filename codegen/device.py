"""Encode and decode on the device through the generated kernels of either dialect (kernel sets:
:mod:`codegen.kernels`; a GPU, or the CPU: the Triton interpreter, the CUDA emulator): the same bytes
as :mod:`reference`, by the same rules.

Encoding (:func:`encode_stream`): everything but the header happens on the device: one pass of
``enc_stats`` over the words, the model fit (:func:`select_codebooks`) and the clipped tables
(:func:`clipped_tables`) as tensor ops for every chunk at once, one rANS pass of every candidate
payload (plain and zero-block) into scratch, which sizes it, then the chosen payloads put in place at
their final offsets (``enc_place``, ``enc_planes``, ``enc_copy``).  Only the chunk kinds and sizes
come back to the host, which packs the header (and, with checksums, computes the CRC32C there).

Decoding (:func:`decode_stream`, :func:`decode_into`): the host reads the header and the chunk table
(:func:`codec.format.parse_header` on a copy of the stream's first bytes); the coded chunks' own
headers are parsed and checked on the device (:func:`_device_heads`, the checks of
:func:`codec.format.parse_chunk_heads`) and the clipped decode tables built there
(:func:`decode_tables`); if a head is bad, the host parses them instead, to name the chunk and the
fault.  One program decodes each CODED chunk and one copies each RAW/CONST chunk.  The kernel checks
the rANS invariants (words used, final states, counts) per chunk; a failure raises
:class:`codec.FormatError` like every other backend.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from codec import codebook as cbk
from codec import filters
from codec import format as fmt
from codec.layouts import packed_nbytes

from .kernels import default_device, kernel_set
from .rows import COPY, COUNTS, DEC_COPY, META, PLACE, PLANES, RANS, STATS

class Backend:
    """The host-facing backend of one dialect for :mod:`codec.api` (``backend="triton"``/``"cuda"``):
    host streams are copied to the device, decoded there, and the words copied back."""

    def __init__(self, dialect: str):
        self.dialect = dialect

    def kernels(self, lay):
        return kernel_set(self.dialect, lay.name)

    @staticmethod
    def empty(n: int, dtype) -> np.ndarray:
        return np.empty(n, dtype)

    @staticmethod
    def device() -> str:
        """Where host data goes for these kernels: the GPU, or the CPU under the Triton interpreter."""
        return default_device()

    def encode_stream(self, words, lay, shape, chunk_size: int, flags: int, repeats: bytes = b""):
        """:func:`encode_stream` with this dialect's kernels."""
        return encode_stream(words, lay, shape, chunk_size, flags, repeats, kernels=self.kernels(lay))

    def decode_stream(self, buf_t, words=None, words_layout=None):
        """:func:`decode_stream` with this dialect's kernels."""
        return decode_stream(buf_t, words, words_layout, kernels=self.kernels)

    def decode_chunks(self, h: fmt.Header, buf, chunks: range, out: np.ndarray) -> None:
        import torch

        mv = np.frombuffer(memoryview(buf).cast("B"), dtype=np.uint8)
        dev = default_device() if self.dialect != "cuda-emulated" else "cpu"
        buf_t = torch.from_numpy(mv.copy()).to(dev)
        words = torch.empty(len(out), dtype=h.layout.torch_words, device=dev)
        decode_into(h, buf_t, chunks, words, host=mv, kernels=self.kernels(h.layout))
        out[:] = words.cpu().numpy().view(out.dtype)


TRITON = Backend("triton")     # registered in codec.backends as "triton"
CUDA = Backend("cuda")         # ... and "cuda"


def decode_stream(buf_t, words=None, words_layout=None, *, kernels=None):
    """``(header, words)``: a stream held in a uint8 tensor on a device, decoded there.  Only the
    header, the chunk table and the coded chunks' own headers are copied to the host (with checksums
    the whole stream is, to verify them there)."""
    import torch

    length = buf_t.numel()
    pre = buf_t[:min(length, fmt.header_nbytes(fmt.MAX_NDIM, 0, False))].cpu().numpy()
    extent = fmt.header_extent(pre)
    while extent > len(pre) and len(pre) < length:     # a compact head or a row-repeat section may ask twice
        pre = buf_t[:min(length, extent)].cpu().numpy()
        extent = fmt.header_extent(pre)
    h = fmt.parse_header(pre, length)
    host = None
    if h.checksum:
        host = buf_t.cpu().numpy()
        fmt.verify_chunk_crcs(h, host, range(h.n_chunks))
    if words is None:
        words = torch.empty(h.numel, dtype=h.layout.torch_words, device=buf_t.device)
    elif words_layout is not h.layout or words.numel() != h.numel:
        raise ValueError(f"out must hold {h.numel} values of {h.layout.name}, got {words.numel()} of "
                         f"{getattr(words_layout, 'name', '?')}")
    if callable(kernels):
        kernels = kernels(h.layout)
    decode_into(h, buf_t, range(h.n_chunks), words, host=host, kernels=kernels)
    if h.filter is not None:
        filters.inverse_torch(h.filter, words, h.layout, h.chunk_size)
    if h.repeats is not None:
        fmt.apply_repeats(h.repeats, words)
    return h, words


def _chunk_prefixes(h, buf, ids):
    """``(bytes, offsets)``: the first bytes of each coded chunk's payload (its header, and its explicit
    table and bitmap where its head says there are), copied to the host in two gathers (on the device for
    a device stream): every chunk's 20-byte header, then the rest of the zero-block and explicit-table
    chunks' :func:`codec.format.chunk_head_extent` only."""
    import torch

    starts = h.payload_start + np.where(ids > 0, h.ends[np.maximum(ids - 1, 0)], 0)
    lens = fmt.chunk_head_extent(h, ids)
    at = np.cumsum(lens) - lens
    out = np.zeros(int(lens.sum()), dtype=np.uint8)

    def gather(first, count, dest):          # stream bytes [first, first + count) of each chunk to out[dest...]
        run = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
        idx = np.repeat(first, count) + run
        got = buf[idx] if isinstance(buf, np.ndarray) else buf[torch.as_tensor(idx, device=buf.device)].cpu().numpy()
        out[np.repeat(dest, count) + run] = got

    head = np.minimum(lens, fmt.CHUNK_HEAD.size)
    gather(starts, head, at)
    whole = np.flatnonzero(head == fmt.CHUNK_HEAD.size)
    mode = np.zeros(len(ids), dtype=np.uint8)
    mode[whole] = out[at[whole] + fmt.CHUNK_HEAD.offset["mode"]]
    cb_at = at[whole] + fmt.CHUNK_HEAD.offset["codebook"]
    explicit = np.zeros(len(ids), dtype=bool)             # format 7: an explicit table follows the head
    explicit[whole] = fmt.explicit_tables(h.version) & (
        (out[cb_at].astype(np.int64) | (out[cb_at + 1].astype(np.int64) << 8)) == fmt.CB_EXPLICIT)
    bitmapped = np.flatnonzero(((mode != 0) | explicit) & (lens > fmt.CHUNK_HEAD.size))
    if len(bitmapped):
        gather(starts[bitmapped] + fmt.CHUNK_HEAD.size, lens[bitmapped] - fmt.CHUNK_HEAD.size,
               at[bitmapped] + fmt.CHUNK_HEAD.size)
    return out, at


def decode_into(h: fmt.Header, buf_t, chunks: range, words, *, host=None, kernels=None, launch=True):
    """Decode ``chunks`` of the stream in the device tensor ``buf_t`` into the word tensor ``words``
    (same device).  The chunk heads are validated and the clipped decode tables built on the device
    (on the host, :func:`codec.format.parse_chunk_heads`, when ``host`` is given or a head is bad); one
    program runs per CODED chunk and one per RAW/CONST chunk; the kernel checks the rANS invariants
    (words used, final states, counts) per chunk, and a failure raises :class:`codec.FormatError` like every other backend.  ``host``: the stream's
    bytes on the host, when it is there too.  Returns the :class:`DecodePlan`; with ``launch=False`` it
    is only prepared (nothing runs)."""
    import torch

    lay = h.layout
    base = chunks.start * h.chunk_size
    ids = np.arange(chunks.start, chunks.stop, dtype=np.int64)
    kinds = h.kinds[chunks.start:chunks.stop]
    lo = ids * h.chunk_size - base
    copied = (kinds == fmt.KIND_RAW) | (kinds == fmt.KIND_CONST)
    rest = ids[copied]
    plain = np.stack(DEC_COPY.order(out_at=lo[copied],
                                    n=np.minimum(h.chunk_size, h.numel - rest * h.chunk_size),
                                    pay_at=h.payload_start + np.where(rest > 0, h.ends[np.maximum(rest - 1, 0)], 0),
                                    kind=kinds[copied].astype(np.int64)), axis=1)
    sparse = _sparse_chunks(h, host if host is not None else buf_t, ids[kinds == fmt.KIND_SPARSE], base, words)
    ids = ids[kinds == fmt.KIND_CODED]
    dev = buf_t.device
    t = lambda a: torch.as_tensor(np.array(a, dtype=np.int64), device=dev)  # noqa: E731
    kern = kernels or kernel_set("triton", lay.name)
    out_at = lo[kinds == fmt.KIND_CODED]
    parsed = _device_heads(h, buf_t, ids, out_at) if host is None and len(ids) else None
    if parsed is None and len(ids):            # on the host (and where the device parse found a bad chunk:
        parsed = _host_heads(h, host if host is not None else buf_t, ids, out_at, dev)   # the message comes from here)
    metas, tables, his, nzb = parsed if parsed is not None else (None, None, None, None)
    plan = DecodePlan(kern, buf_t, words, nzb is not None, t(plain) if len(plain) else None, metas, tables, his,
                      nzb if nzb is not None else t([0]), ids.tolist(), sparse)
    if launch:
        plan.run()
        plan.check()
    return plan


def _sparse_chunks(h, buf, ids, base, words):
    """``(spans, at, values)`` of the SPARSE chunks ``ids``: their output ranges, and the positions and words
    of their non-zero values, parsed and checked on the host (their payloads are small: each is shorter than
    its chunk's coded payload), ready on the words' device; None without SPARSE chunks."""
    import torch

    if not len(ids):
        return None
    spans, at, vals = [], [], []
    for i in ids.tolist():
        a, b = h.chunk_span(i)
        payload = buf[a:b] if isinstance(buf, np.ndarray) else buf[a:b].cpu().numpy()
        pos, v = fmt.parse_sparse(payload, h.chunk_len(i), h.layout.itemsize, i)
        lo = i * h.chunk_size - base
        spans.append((lo, lo + h.chunk_len(i)))
        at.append(lo + pos)
        vals.append(v)
    ints = h.layout.torch_view_ints
    values = np.concatenate(vals).astype(h.layout.uint).view(h.layout.view_ints)
    return (spans, torch.as_tensor(np.concatenate(at), device=words.device),
            torch.as_tensor(values, device=words.device).view(ints))


def _host_heads(h, buf, ids, out_at, dev):
    """:func:`_device_heads`' result from the host parse (:func:`codec.format.parse_chunk_heads`, which
    raises :class:`codec.FormatError` naming the first bad chunk) of the stream in ``buf`` (host bytes,
    or the device tensor); the tables are built on ``dev``."""
    import torch

    lay = h.layout
    t = lambda a: torch.as_tensor(np.asarray(a, dtype=np.int64), device=dev)  # noqa: E731
    prefixes, at = _chunk_prefixes(h, buf, ids)
    hd = fmt.parse_chunk_heads(h, ids, prefixes, at)
    # a table row per (codebook, ref), and one per chunk with an explicit table (format 7; keys below 0)
    explicit = np.array([tb is not None for tb in hd["tables"]], dtype=bool)
    keys, tab = np.unique(np.where(explicit, -1 - np.arange(len(ids)), hd["codebook"] * 65536 + (hd["ref"] + 32768)),
                          return_inverse=True)
    rows = np.maximum(keys, 0)
    cb, ref = rows // 65536, np.where(keys < 0, hd["ref"][np.maximum(-1 - keys, 0)], rows % 65536 - 32768)
    own = keys < 0
    cb[own] = 0
    freq = clipped_tables(t(cb), t(ref), lay)[0]
    if own.any():
        freq[t(np.flatnonzero(own))] = t(np.stack([hd["tables"][-1 - k] for k in keys[own]]))
    tables, his = decode_tables(t(cb), t(ref), lay, freq=freq)
    nzb, nzb_at = [], np.zeros(len(ids), dtype=np.int64)
    for j in np.flatnonzero(hd["mode"]):
        nzb_at[j] = len(nzb)
        nzb.extend(np.flatnonzero(~hd["zero_blocks"][j]).tolist())
    plane_at = hd["words"] + 2 * hd["n_words"]
    esc_at = plane_at + packed_nbytes(hd["n_sm"], fmt.plane_width(lay.man_bits, hd["shift"], hd["sign"], hd["narrow"]))
    metas = np.stack(META.order(states_at=hd["states"], words_at=hd["words"], n_words=hd["n_words"], plane_at=plane_at,
                                esc_at=esc_at, n_sm=hd["n_sm"], n_esc=hd["n_esc"], n_coded=hd["n_coded"],
                                shift=hd["shift"], table=tab.reshape(-1), out_at=out_at, mode=hd["mode"],
                                nzb_at=nzb_at, lanes=hd["lanes"], sign=hd["sign"], narrow=hd["narrow"]), axis=1)
    return t(metas), tables, his, (t(nzb) if nzb else None)


def _device_heads(h, buf_t, ids, out_at):
    """:func:`codec.format.parse_chunk_heads` as tensor ops on the stream's device, and the decode tables
    built there: ``(metas, tables, his, nzb or None)``, or None if any chunk head is bad (the caller
    then parses on the host, which names the chunk and the fault).  Only the header and chunk table
    were copied to the host; nothing comes back but the verdict."""
    import torch

    dev = buf_t.device
    lay = h.layout
    t = lambda a: torch.as_tensor(np.asarray(a, dtype=np.int64), device=dev)  # noqa: E731
    ids_h = ids
    ends = t(h.ends)
    ids = t(ids_h)
    start = h.payload_start + torch.where(ids > 0, ends[(ids - 1).clamp(min=0)], 0)
    end = h.payload_start + ends[ids]
    size = end - start
    n = (h.numel - ids * h.chunk_size).clamp(max=h.chunk_size)
    hsize = fmt.CHUNK_HEAD.size
    short = size < hsize
    at = torch.where(short[:, None], 0, start[:, None] + torch.arange(hsize, device=dev))
    b = buf_t[at].to(torch.int64)

    def field(name):                          # a chunk-head field (codec.format.CHUNK_HEAD), little-endian
        at, width = fmt.CHUNK_HEAD.offset[name], fmt.CHUNK_HEAD.width[name]
        return sum(b[:, at + j] << (8 * j) for j in range(width))

    cb, ref, shift, mode, sign, narrow = (field(f) for f in ("codebook", "ref", "shift", "mode", "sign", "narrow"))
    ref = torch.where(ref >= 1 << 15, ref - (1 << 16), ref)
    n_sm, n_esc, n_words = field("n_sm"), field("n_esc"), field("n_words")
    known = torch.zeros_like(mode, dtype=torch.bool)
    for m in fmt.zero_block_modes(h.version):
        known |= mode == m
    bad = short | ((mode != 0) & ~known) | (sign > max(fmt.sign_modes(h.version))) | (
        (narrow != 0) & (sign == fmt.SIGN_STORED))
    bad |= shift + narrow > lay.man_bits - 1
    bad |= cb >= cbk.n_codebooks(h.family_version)
    pos = start + hsize
    n_coded = n.clone()
    nzb_parts, nzb_at, base = [], torch.zeros_like(ids), 0
    for m in fmt.ZERO_BLOCK_MODES:
        sel = torch.nonzero((mode == m) & ~bad).flatten()
        if not len(sel):
            continue
        nb = -(-n[sel] // (1 << m))
        nbytes = (nb + 7) // 8
        fits = size[sel] - hsize >= nbytes
        width = int(-(-h.chunk_size // (1 << m)) + 7) // 8
        cols = torch.arange(width, device=dev)
        idx = torch.where(fits[:, None] & (cols < nbytes[:, None]), pos[sel][:, None] + cols, 0)
        bits = ((buf_t[idx].to(torch.int64)[:, :, None] >> torch.arange(8, device=dev)) & 1).reshape(len(sel), -1)
        blk = torch.arange(bits.shape[1], device=dev)[None, :]
        zero = (bits == 1) & (blk < nb[:, None])
        last = n[sel] - (nb - 1) * (1 << m)                      # the last block may be short
        blen = torch.where(blk == (nb - 1)[:, None], last[:, None], 1 << m)
        n_coded[sel] = n[sel] - (zero * blen).sum(dim=1)
        pos[sel] += nbytes
        bad[sel] |= ~fits | (n_coded[sel] == 0)
        blocks, first, count = _block_lists(~zero & (blk < nb[:, None]))
        nzb_at[sel] = base + first
        nzb_parts.append(blocks)
        base += count
    bad |= (n_sm > n_coded) | (n_esc > n_sm) | (n_words > n_coded)
    k = _lanes(n_coded)
    w = fmt.plane_width(lay.man_bits, shift, sign, narrow)
    tail = 4 * k + 2 * n_words + packed_nbytes(n_sm, w) + 2 * n_esc
    bad |= pos + tail != end
    if bool(bad.any()):
        return None
    keys, tab = torch.unique(cb * 65536 + (ref + 32768), return_inverse=True)
    tables, his = decode_tables(keys // 65536, keys % 65536 - 32768, lay)
    words_at = pos + 4 * k
    plane_at = words_at + 2 * n_words
    esc_at = plane_at + packed_nbytes(n_sm, w)
    metas = _stack_rows(META, states_at=pos, words_at=words_at, n_words=n_words, plane_at=plane_at, esc_at=esc_at,
                        n_sm=n_sm, n_esc=n_esc, n_coded=n_coded, shift=shift, table=tab.reshape(-1),
                        out_at=t(out_at), mode=mode, nzb_at=nzb_at, lanes=k, sign=sign, narrow=narrow)
    return metas, tables, his, (torch.cat(nzb_parts) if nzb_parts and base else None)


assert cbk.N_SYMBOLS <= 1 << 7 and cbk.TOTAL < 1 << 13      # decode_tables' entries: 7 + 12 + 13 bits


def decode_tables(cb, ref, lay, freq=None):
    """The decoders' tables for each ``(codebook, ref)`` row (or, given, of the clipped frequencies ``freq``
    ``(R, N_SYMBOLS)``: an explicit table's), as tensor ops (the device's copy of ``_tables``): slot -> ``sym | (slot - cum) << 7 | freq << 19`` (13 bits of frequency: an explicit table may give one symbol all of TOTAL; the CUDA decoder keeps the entries as u32) and symbol -> exponent/leading bit."""
    import torch

    if freq is None:
        freq = clipped_tables(cb, ref, lay)[0]
    cum = torch.cumsum(freq, dim=1) - freq
    slot = torch.arange(cbk.TOTAL, device=cb.device).expand(len(cb), -1).contiguous()
    sym = torch.searchsorted(torch.cumsum(freq, dim=1), slot, right=True)
    entries = sym | ((slot - cum.gather(1, sym)) << 7) | (freq.gather(1, sym) << 19)
    s = torch.arange(cbk.N_SYMBOLS, device=cb.device)[None, :]
    e = (s - cbk.SYM_WINDOW0) // 2 + ref[:, None] - cbk.WINDOW_LOW
    hi = (e << lay.man_bits) | (((s - cbk.SYM_WINDOW0) & 1) << (lay.man_bits - 1))
    hi = torch.where((s >= cbk.SYM_WINDOW0) & (e >= 0) & (e < (1 << lay.exp_bits)), hi, -1)
    return entries, hi


@dataclass
class DecodePlan:
    """Everything the kernels need to decode a stream, on the device: :meth:`run` launches them (and
    can be timed alone, as bench.gpu_check does), :meth:`check` reads back the per-chunk verdicts."""
    kernels: object
    buf: object
    words: object
    zero_first: bool
    plain: object
    metas: object
    tables: object
    his: object
    nzb: object
    ids: list
    sparse: object = None        # (spans, positions, words) of the SPARSE chunks (_sparse_chunks)
    err: object = None

    def run(self, split: bool | None = None):
        """Launch the kernels.  ``split``: the two-pass decoder (the rANS walks alone, then the values in
        whole vectors), the default where the kernel set has it (Triton); False: the one-pass decoder."""
        import torch

        if split is None:
            split = hasattr(self.kernels, "decode_split")
        if self.zero_first:                    # zero blocks are not written by the kernel
            self.words.zero_()
        if self.plain is not None:
            self.kernels.dec_copy(len(self.plain), self.buf, self.plain, self.words)
        if self.sparse is not None:
            spans, at, values = self.sparse
            ints = self.words.view(values.dtype)
            for a, b in spans:
                ints[a:b].zero_()
            ints[at] = values
        if self.metas is None:
            return
        self.err = torch.zeros(len(self.metas), dtype=torch.int32, device=self.buf.device)
        if split:
            n_coded = self.metas[:, 7]
            sym_at = torch.cumsum(n_coded, 0) - n_coded
            sym = torch.empty(max(1, int(n_coded.sum())), dtype=torch.uint8, device=self.buf.device)
            self.kernels.decode_split(len(self.metas), self.buf, self.metas, self.tables, self.his, self.nzb, sym,
                                      sym_at, self.words, self.err)
        else:
            self.kernels.decode(len(self.metas), self.buf, self.metas, self.tables, self.his, self.nzb, self.words,
                                self.err)

    def check(self):
        if self.err is None:
            return
        bad = np.flatnonzero(self.err.cpu().numpy())
        if len(bad):
            raise fmt.chunk_fault(self.ids[int(bad[0])], fmt.FAULT_PAYLOAD)


# --------------------------------------------------------------------------------- device encoder
@functools.cache
def _family_tensors(device: str):
    """The codebook family's freqs, mean offsets, code lengths and zero thresholds as int64 tensors on
    ``device`` (copied there once per device: the fit and the tables use them on every call)."""
    import torch

    fam = cbk.load_family()
    t = lambda a: torch.tensor(np.asarray(a, dtype=np.int64), device=device)  # noqa: E731
    return t(fam.freqs), t(fam.mean_offsets), t(fam.code_lengths), t(fam.zero_thresholds)


def sample_histograms(words, lay, chunk_size: int):
    """:func:`codec.codebook.sample_histogram` of every chunk of the word tensor ``words``, at its
    :func:`~codec.codebook.sample_step`: ``(n_chunks, n_bins)`` int64, on the words' device."""
    import torch

    numel, cs = words.numel(), chunk_size
    C = -(-numel // cs)
    nb = cbk.n_bins(lay.exp_bits)
    mask = (1 << (8 * lay.itemsize)) - 1

    def widen(sample):                     # the sampled words only (not the whole tensor) as int64
        return sample.to(torch.int64) & mask

    full = numel // cs
    groups = [(0, full, widen(words[:full * cs].view(full, cs)[:, ::cbk.sample_step(cs)]).reshape(full, -1))] if full else []
    if full < C:
        rest = words[full * cs:]
        groups.append((full, 1, widen(rest[::cbk.sample_step(len(rest))]).reshape(1, -1)))
    hist = torch.zeros((C, nb), dtype=torch.int64, device=words.device)
    M, E = lay.man_bits, lay.exp_bits
    for first, count, sample in groups:
        b = torch.where(sample == 0, nb - 1, 2 * ((sample >> M) & ((1 << E) - 1)) + ((sample >> (M - 1)) & 1))
        b = b + nb * torch.arange(count, device=words.device)[:, None]
        hist[first:first + count] = torch.bincount(b.reshape(-1), minlength=count * nb).view(count, nb)
    return hist


def select_codebooks(n, n_zero, n_log, sum_e, hist, lay, *, rows_per_pass: int = 1 << 15):
    """:func:`codec.codebook.select_codebook` on int64 tensors (one entry, or histogram row, per
    chunk), on their device: the same integer arithmetic, so every backend selects identically.

    Every chunk's candidates (each shape at its mean's reference and at the top one) are scored at
    once, ``rows_per_pass`` candidates at a time, in a few dozen tensor ops whatever the family's size:
    on a GPU each op costs a launch, and a loop over shapes and phases cost some 3,000 of them."""
    import torch

    _, offsets, lengths, thresholds = _family_tensors(str(n.device))
    dev = n.device
    fb = cbk.STAT_FRAC_BITS
    S, Q = offsets.shape
    nl = n_log.clamp(min=1)
    m = torch.where(n_log > 0, torch.div(sum_e << fb, nl, rounding_mode="floor"), 0)
    z = ((n_zero[:, None] << cbk.ZERO_FRAC_BITS) >= thresholds[None, :] * n[:, None]).sum(dim=1)
    nb = hist.shape[1] - 1
    # codec.codebook.top_ref: the sample's highest field at the top of the window (REF_MIN: none)
    top = torch.where(hist[:, :nb] > 0, torch.arange(nb, device=dev)[None, :], -1).max(dim=1).values
    top_ref = torch.where(top >= 0, (top >> 1) - (cbk.WINDOW - cbk.WINDOW_LOW - 1), cbk.REF_MIN)
    # codec.codebook.mean_matches for every shape: the phase nearest the mean, the first on ties
    d = m[:, None, None] - offsets[None, :, :]                                    # (chunks, S, Q)
    refs = (d + (1 << (fb - 1))) >> fb
    err = (d - (refs << fb)).abs()
    q = torch.argmin(err * Q + torch.arange(Q, device=dev), dim=2)                  # unique keys: the first
    ref_s = torch.gather(refs, 2, q[:, :, None])[:, :, 0].clamp(min=cbk.REF_MIN)    # (chunks, S)
    cb = (torch.arange(S, device=dev)[None, :] * Q + q) * len(cbk.ZERO_LEVELS) + z[:, None]
    # candidates in the reference's order: shape 0 at the mean's reference, at the top one, shape 1, ...
    K = 2 * S
    cand_cb = cb[:, :, None].expand(-1, -1, 2).reshape(-1)
    cand_ref = torch.stack([ref_s, top_ref[:, None].expand(-1, S)], dim=2).reshape(-1)
    allowed = torch.stack([torch.ones_like(ref_s, dtype=torch.bool), top_ref[:, None] > ref_s], dim=2).reshape(-1)
    zeros = hist[:, nb]
    mass = hist[:, :nb].sum(dim=1)
    hflat = hist[:, :nb].reshape(-1)
    score = torch.empty(len(n) * K, dtype=torch.int64, device=dev)
    k = torch.arange(2 * cbk.WINDOW, device=dev)[None, :]
    for a in range(0, len(score), rows_per_pass):
        b = min(a + rows_per_pass, len(score))
        row = torch.arange(a, b, device=dev) // K                                    # each candidate's chunk
        ref = cand_ref[a:b]
        freq, _ = clipped_tables(cand_cb[a:b], ref, lay)
        esc = lengths[freq[:, cbk.SYM_ESC]] + cbk.ESC_LENGTH
        has_zero = freq[:, cbk.SYM_ZERO] > 0
        zr = zeros[row]
        extra = torch.where(has_zero, 0, zr)                  # +0 coded as field 0 with leading bit 0
        # codec.codebook.sample_length: the window's symbols k are the sample's bins 2 (ref - WINDOW_LOW) + k;
        # every other occupied bin (and an empty window symbol) costs ESC
        bins = 2 * (ref[:, None] - cbk.WINDOW_LOW) + k
        ok = (bins >= 0) & (bins < nb)
        h = torch.where(ok, hflat[row[:, None] * nb + bins.clamp(0, nb - 1)], 0) + torch.where(bins == 0, extra[:, None], 0)
        fs = freq[:, cbk.SYM_WINDOW0:]
        inside = (h * torch.where(fs > 0, lengths[fs], esc[:, None])).sum(dim=1)
        outside = mass[row] + extra - h.sum(dim=1)
        total = torch.where(has_zero, zr * lengths[freq[:, cbk.SYM_ZERO]], 0) + inside + outside * esc
        score[a:b] = torch.where(allowed[a:b], total, 1 << 50)
    # the smallest, the first candidate on ties (keys made unique by the candidate's index)
    best = torch.argmin(score.view(-1, K) * K + torch.arange(K, device=dev), dim=1)
    pick = torch.arange(len(n), device=dev) * K + best
    return cand_cb[pick], cand_ref[pick]


def clipped_tables(cb, ref, lay):
    """``(freq, cum)`` ``(R, N_SYMBOLS)`` int64 of :func:`codec.codebook.chunk_tables` for each row's
    ``(codebook, ref)``: the family row with the impossible exponent fields' mass moved (a scatter-add)."""
    import torch

    freqs = _family_tensors(str(cb.device))[0]
    s = torch.arange(cbk.N_SYMBOLS, device=cb.device)[None, :]
    r = ref[:, None]
    field = (s - cbk.SYM_WINDOW0) // 2 + r - cbk.WINDOW_LOW
    top = (1 << lay.exp_bits) - 1

    def sym(fld, bit):
        return cbk.SYM_WINDOW0 + 2 * (fld - r + cbk.WINDOW_LOW) + bit

    windowed = s >= cbk.SYM_WINDOW0
    tgt = s.expand(len(cb), -1)
    tgt = torch.where(windowed & (field < -1), sym(0, 0), tgt)
    tgt = torch.where(windowed & (field == -1), sym(0, 1), tgt)
    tgt = torch.where(windowed & (field > top), sym(top, 0 if lay.has_inf else 1), tgt)
    tgt = torch.where((tgt < cbk.SYM_WINDOW0) & windowed | (tgt >= cbk.N_SYMBOLS), cbk.SYM_ESC, tgt)
    freq = torch.zeros((len(cb), cbk.N_SYMBOLS), dtype=torch.int64, device=cb.device)
    freq.scatter_add_(1, tgt, freqs[cb])
    return freq, torch.cumsum(freq, dim=1) - freq


def _sampled_in_zero_blocks(nz, n, mode):
    """How many of the fit's sampled positions (:func:`codec.codebook.sample_step`) of chunks of ``n``
    values fall in their all-+0 blocks of ``2^mode`` values (``nz``: 1 = a block with a non-zero)."""
    import torch

    steps = torch.div(n, cbk.SAMPLE_MIN, rounding_mode="floor").clamp(1, cbk.SAMPLE_STEP)   # sample_step, no host sync
    bs = 1 << mode
    j = torch.arange(nz.shape[1], device=n.device)[None, :]
    lo = (j * bs).clamp(max=n[:, None])
    hi = ((j + 1) * bs).clamp(max=n[:, None])
    st = steps[:, None]
    samples = torch.div(hi + st - 1, st, rounding_mode="floor") - torch.div(lo + st - 1, st, rounding_mode="floor")
    return ((nz == 0) * samples).sum(dim=1)


def _block_lists(keep):
    """The kept (non-zero) block indices of each row of ``keep`` (rows, blocks) back to back, where each
    row's list starts, and how many there are in all."""
    import torch

    counts = keep.sum(dim=1)
    return torch.nonzero(keep)[:, 1], torch.cumsum(counts, 0) - counts, int(counts.sum())


def _lanes(n):
    """:func:`codec.format.lanes` of each entry of ``n``: the largest power of two ``k <= MAX_LANES`` with
    ``k = 1`` or ``k * VALUES_PER_LANE <= n`` (a count of the powers it passes: a few ops, not a loop)."""
    import torch

    pows = torch.tensor([1 << j for j in range(1, fmt.MAX_LANES.bit_length())], dtype=torch.int64, device=n.device)
    return 1 << (pows[None, :] * fmt.VALUES_PER_LANE <= n[:, None]).sum(dim=1)


def _stack_rows(row, **columns):
    """The int64 table of ``row`` (:mod:`codegen.rows`) from its named columns (tensors, one entry each)."""
    import torch

    return torch.stack([c.to(torch.int64) for c in row.order(**columns)], dim=1).contiguous()


def encode_payloads(words, lay, chunk_size: int, head_nbytes: int, kernels=None):
    """Encode the 1-D word tensor ``words`` (on its device: a GPU, or the CPU under TRITON_INTERPRET)
    into a stream buffer with ``head_nbytes`` bytes left free at the front for the header.

    Returns ``(stream, kinds, sizes)``: a uint8 tensor on the device, and the chunk kinds and payload
    sizes as host arrays (the header and chunk table are made from them on the host).  The same bytes
    as :func:`reference.codec.encode_chunks`, decided by the same rules: CONST, then the smallest of
    the plain and zero-block payloads (the plain one on ties), RAW if that does not shrink the chunk.
    """
    import torch

    dev = words.device
    kern = kernels or kernel_set("triton", lay.name)
    numel = words.numel()
    cs = chunk_size
    C = -(-numel // cs)
    stats = torch.empty((C, STATS.width), dtype=torch.int64, device=dev)
    # per zero-block mode m: the chunks' blocks of 2^m values, flagged non-zero by the stats kernel
    # for 16- and 64-value blocks, the larger blocks of codec.format.ZERO_BLOCK_MODES from those
    nz = {m: torch.zeros((C, -(-cs >> m)), dtype=torch.uint8, device=dev) for m in fmt.ZERO_BLOCK_MODES[:2]}
    kern.stats(C, words, numel, cs, stats, *nz.values(), *(t.shape[1] for t in nz.values()))
    st = dict(zip(STATS.columns, stats.unbind(1)))
    n, const, zeros, n_log, s1, s2, low, neg = (st[c] for c in ("n", "const", "zeros", "n_log", "s1", "s2", "low",
                                                                  "neg"))
    skip = dict(zip(fmt.ZERO_BLOCK_MODES[:2], (st["skip16"], st["skip64"])))
    base_mode = fmt.ZERO_BLOCK_MODES[1]
    for m in fmt.ZERO_BLOCK_MODES[2:]:
        ratio = 1 << (m - base_mode)
        fine = nz[base_mode]
        cols = -(-fine.shape[1] // ratio)
        padded = torch.zeros((C, cols * ratio), dtype=torch.uint8, device=dev)
        padded[:, :fine.shape[1]] = fine
        nz[m] = padded.view(C, cols, ratio).amax(dim=2)
        nbc = -(-n // (1 << m))
        kept_blocks = nz[m].long().sum(dim=1)
        last_kept = torch.gather(nz[m], 1, (nbc - 1).clamp(min=0)[:, None])[:, 0].long()
        kept = kept_blocks * (1 << m) - last_kept * (nbc * (1 << m) - n)        # the last block may be short
        skip[m] = n - kept
    M = lay.man_bits
    lowbit = low & -low
    shift = torch.where(low == 0, M - 1, torch.log2(lowbit.clamp(min=1).double()).round().long()).clamp(max=M - 1)

    # candidates: the plain payload of every chunk that is not CONST, zero-block payloads where they may pay
    chunk = torch.arange(C, device=dev)
    cand_chunk, cand_mode, cand_skip = [], [], []
    for mode, skipped in [(0, torch.zeros_like(n))] + list(skip.items()):
        ok = const == 0
        if mode:
            ok = ok & (32 * skipped >= n) & (skipped < n)
        cand_chunk.append(chunk[ok])
        cand_mode.append(torch.full_like(chunk[ok], mode))
        cand_skip.append(skipped[ok])
    cc, cm, csk = torch.cat(cand_chunk), torch.cat(cand_mode), torch.cat(cand_skip)
    n_coded = n[cc] - csk
    # the fit's sample: a chunk's, less its (all +0) sampled positions in skipped zero blocks
    hist = sample_histograms(words, lay, cs)[cc]
    for mode in fmt.ZERO_BLOCK_MODES:
        sel = torch.nonzero(cm == mode).flatten()
        if len(sel):
            hist[sel, -1] -= _sampled_in_zero_blocks(nz[mode][cc[sel]], n[cc[sel]], mode)
    cb, ref = select_codebooks(n_coded, zeros[cc] - csk, n_log[cc], s1[cc], hist, lay)
    freq, cum = clipped_tables(cb, ref, lay)
    tables = torch.zeros_like(n_coded)                 # bytes of each candidate's explicit table (format 7)
    table_bytes = {}
    if fmt.explicit_layouts(fmt.WRITE_VERSION):
        raise NotImplementedError("format 8 (a draft) is written by the reference encoder only")
    if fmt.explicit_tables(fmt.WRITE_VERSION):
        cb, freq, cum, tables, table_bytes = _explicit_tables(words, lay, cs, cc, csk, n_coded, hist, cb, ref, freq,
                                                              cum)
    k = _lanes(n_coded)
    # non-zero block lists of the zero-block candidates
    nzb_parts, nzb_at = [], torch.zeros_like(cc)
    base = 0
    for mode in fmt.ZERO_BLOCK_MODES:
        sel = torch.nonzero(cm == mode).flatten()
        if not len(sel):
            continue
        nbc = -(-n[cc[sel]] // (1 << mode))
        blocks, first, count = _block_lists(nz[mode][cc[sel]].bool()
                                            & (torch.arange(nz[mode].shape[1], device=dev)[None, :] < nbc[:, None]))
        nzb_at[sel] = base + first
        nzb_parts.append(blocks)
        base += count
    nzb = torch.cat(nzb_parts) if base else torch.zeros(1, dtype=torch.int64, device=dev)
    start = cc * cs
    tab = torch.arange(len(cc), device=dev)
    counts = torch.zeros((len(cc), COUNTS.width), dtype=torch.int64, device=dev)
    span = 4 * fmt.MAX_LANES + 2 * n_coded             # a candidate's states and (at most n_coded) words
    rans_at = torch.cumsum(span, 0) - span
    rans_out = torch.empty(max(1, int(span.sum())), dtype=torch.uint8, device=dev)
    if len(cc):
        rows = _stack_rows(RANS, start=start, n_coded=n_coded, lanes=k, mode=cm, nzb_at=nzb_at, table=tab, ref=ref,
                           rans_at=rans_at)
        kern.rans(len(cc), words, rows, freq, cum, nzb, counts, rans_out)
    n_words, n_sm, n_esc = (counts[:, COUNTS.index[c]] for c in ("n_words", "n_sm", "n_esc"))
    # the sign mode (as reference.codec.sign_mode): every negative word is in the plane (+0 is not negative)
    sign = torch.where(neg[cc] == 0, fmt.SIGN_POSITIVE, torch.where(neg[cc] == n_sm, fmt.SIGN_NEGATIVE,
                                                                    fmt.SIGN_STORED))
    # without a sign on top, the high bits above every residual's go too (as reference.codec)
    top = low[cc] >> shift[cc]
    bits = torch.where(top > 0, torch.floor(torch.log2(top.clamp(min=1).double())).long() + 1, 0)
    narrow = torch.where(sign != fmt.SIGN_STORED, (M - 1 - shift[cc] - bits).clamp(min=0), 0)
    bitmap = torch.where(cm > 0, (-(-n[cc] // (1 << cm)) + 7) // 8, 0)
    size = (fmt.CHUNK_HEAD.size + tables + bitmap + 4 * k + 2 * n_words
            + packed_nbytes(n_sm, fmt.plane_width(M, shift[cc], sign, narrow)) + 2 * n_esc)

    # the choice per chunk: the smallest candidate, the earliest (plain first) on ties; RAW if not smaller
    raw_size = n * lay.itemsize
    big = torch.iinfo(torch.int64).max
    best = torch.full_like(n, big)
    pick = torch.full_like(n, -1)
    for mode in (0,) + fmt.ZERO_BLOCK_MODES:             # candidates are grouped by mode in this order
        sel = torch.nonzero(cm == mode).flatten()
        better = size[sel] < best[cc[sel]]
        best[cc[sel[better]]] = size[sel[better]]
        pick[cc[sel[better]]] = sel[better]
    sparse, sparse_bytes = _sparse_payloads(words, lay, cs, n, const, zeros, torch.minimum(best, raw_size))
    coded = (const == 0) & (best < raw_size) & ~sparse
    kinds = torch.where(const == 1, fmt.KIND_CONST, torch.where(coded, fmt.KIND_CODED, fmt.KIND_RAW))
    sizes = torch.where(const == 1, lay.itemsize, torch.where(coded, best, raw_size))
    if sparse_bytes:
        kinds[sparse] = fmt.KIND_SPARSE
        sizes[sparse] = torch.as_tensor([len(p) for p in sparse_bytes], device=dev)
    pay_at = head_nbytes + torch.cumsum(sizes, 0) - sizes
    sizes_h = sizes.cpu().numpy()
    total = head_nbytes + int(sizes_h.sum())
    out = torch.empty(total, dtype=torch.uint8, device=dev)

    chosen = pick[coded]                                 # candidate rows that are written
    if len(chosen):
        at = pay_at[coded]
        cmode = cm[chosen]
        states_at = at + fmt.CHUNK_HEAD.size + tables[chosen] + bitmap[chosen]
        words_at = states_at + 4 * k[chosen]
        kern.place(len(chosen), _stack_rows(PLACE, rans_at=rans_at[chosen], lanes=k[chosen], n_words=n_words[chosen],
                                            states_at=states_at), rans_out, out)
        plane_at = words_at + 2 * n_words[chosen]
        scratch = torch.empty(max(1, int(n_coded[chosen].sum())), dtype=torch.uint8, device=dev)
        scratch_at = torch.cumsum(n_coded[chosen], 0) - n_coded[chosen]
        rows = _stack_rows(PLANES, start=start[chosen], n_coded=n_coded[chosen], mode=cmode, nzb_at=nzb_at[chosen],
                           table=chosen, ref=ref[chosen], shift=shift[cc[chosen]], n_sm=n_sm[chosen],
                           n_esc=n_esc[chosen], n_words=n_words[chosen], codebook=cb[chosen], pay_at=at,
                           plane_at=plane_at, scratch_at=scratch_at, sign=sign[chosen],
                           narrow=narrow[chosen])
        kern.planes(len(chosen), words, rows, freq, nzb, out, scratch)
        _write_bitmaps(out, nz, n[cc[chosen]], cmode, at + fmt.CHUNK_HEAD.size + tables[chosen], cc[chosen])
        ex = torch.nonzero(tables[chosen]).flatten()                     # explicit tables (a few dozen bytes each)
        if len(ex):                                                       # in one copy to the device
            parts = [table_bytes[j] for j in chosen[ex].tolist()]
            starts = (at[ex] + fmt.CHUNK_HEAD.size).tolist()
            dst = np.concatenate([np.arange(a, a + len(p)) for a, p in zip(starts, parts)])
            out[torch.as_tensor(dst, device=dev)] = torch.frombuffer(bytearray(b"".join(parts)), dtype=torch.uint8).to(dev)
    if sparse_bytes:                                     # SPARSE payloads, made on the host
        at = pay_at[sparse]
        lens = torch.as_tensor([len(p) for p in sparse_bytes], device=dev)
        idx = torch.repeat_interleave(at, lens) + torch.arange(int(lens.sum()), device=dev) - torch.repeat_interleave(
            torch.cumsum(lens, 0) - lens, lens)
        out[idx] = torch.frombuffer(bytearray(b"".join(sparse_bytes)), dtype=torch.uint8).to(dev)
    plain = torch.nonzero(~coded & ~sparse).flatten()
    if len(plain):
        rows = _stack_rows(COPY, start=plain * cs, n=n[plain], pay_at=pay_at[plain], kind=kinds[plain])
        kern.copy(len(plain), words, rows, out)
    return out, kinds.cpu().numpy().astype(np.uint8), sizes_h


def _explicit_counts(hist, ref):
    """:func:`codec.codebook.explicit_counts` of each row of ``hist`` (R, bins) at ``ref`` (R,)."""
    import torch

    nb = hist.shape[1] - 1
    b = torch.arange(nb, device=hist.device)[None, :]
    j = (b >> 1) - ref[:, None] + cbk.WINDOW_LOW
    sym = torch.where((j >= 0) & (j < cbk.WINDOW), cbk.SYM_WINDOW0 + 2 * j.clamp(0, cbk.WINDOW - 1) + (b & 1), cbk.SYM_ESC)
    c = torch.zeros((len(hist), cbk.N_SYMBOLS), dtype=torch.int64, device=hist.device)
    c.scatter_add_(1, sym, hist[:, :nb])
    c[:, cbk.SYM_ZERO] = hist[:, nb]
    c[:, cbk.SYM_ESC] += int(cbk.EXPLICIT_STEP > 1)
    return c


def _table_nbytes(f):
    """:func:`codec.codebook.explicit_table_nbytes` of each row of ``f`` (R, N_SYMBOLS)."""
    import torch

    win = f[:, cbk.SYM_WINDOW0:] > 0
    j = torch.arange(win.shape[1], device=f.device)[None, :]
    lo = torch.where(win, j, win.shape[1]).min(dim=1).values
    hi = torch.where(win, j, -1).max(dim=1).values
    listed = (j >= lo[:, None]) & (j <= hi[:, None])
    one = 1 + (f >= 128).long()
    return 2 + one[:, cbk.SYM_ZERO] + one[:, cbk.SYM_ESC] + (one[:, cbk.SYM_WINDOW0:] * listed).sum(dim=1)


def _quantise(c, lengths):
    """:func:`codec.codebook.explicit_frequencies` of each row of ``c``: the same integer steps, every row
    at once (at most N_SYMBOLS steps each way)."""
    import torch

    n = c.sum(dim=1, keepdim=True).clamp(min=1)
    used = c > 0
    f = torch.where(used, torch.clamp(c * cbk.TOTAL // n, min=1), 0)
    rows = torch.arange(len(c), device=c.device)
    big = torch.iinfo(torch.int64).max
    while True:
        short = f.sum(dim=1) < cbk.TOTAL
        if not bool(short.any()):
            break
        gain = torch.where(used, c * (lengths[f] - lengths[(f + 1).clamp(max=cbk.TOTAL)]), -1)
        s = torch.argmax(gain, dim=1)
        f[rows[short], s[short]] += 1
    while True:
        over = f.sum(dim=1) > cbk.TOTAL
        if not bool(over.any()):
            break
        loss = torch.where(f > 1, c * (lengths[(f - 1).clamp(min=1)] - lengths[f]), big)
        s = torch.argmin(loss, dim=1)
        f[rows[over], s[over]] -= 1
    return f


def _fitted_lengths(hist, freq, ref, lengths, man_bits):
    """:func:`codec.codebook.fitted_length` of each row (the sample_length of select_codebooks' score, plus
    the plane bits of +0 where the table has no ZERO symbol)."""
    import torch

    nb = hist.shape[1] - 1
    zeros = hist[:, nb]
    has_zero = freq[:, cbk.SYM_ZERO] > 0
    h = hist[:, :nb].clone()
    h[:, 0] += torch.where(has_zero, 0, zeros)
    b = torch.arange(nb, device=hist.device)[None, :]
    j = (b >> 1) - ref[:, None] + cbk.WINDOW_LOW
    inside = (j >= 0) & (j < cbk.WINDOW)
    fs = torch.where(inside, freq.gather(1, cbk.SYM_WINDOW0 + 2 * j.clamp(0, cbk.WINDOW - 1) + (b & 1)), 0)
    esc = lengths[freq[:, cbk.SYM_ESC]] + cbk.ESC_LENGTH
    ln = torch.where(fs > 0, lengths[fs], esc[:, None])
    total = (h * ln).sum(dim=1) + torch.where(has_zero, zeros * lengths[freq[:, cbk.SYM_ZERO]], 0)
    return total + torch.where(has_zero, 0, (zeros * man_bits) << cbk.LENGTH_FRAC_BITS)


_BINCOUNT_KEYS = 1 << 22          # keys of one bincount of _explicit_tables (32 MiB of int64)


def _explicit_tables(words, lay, cs, cc, csk, n_coded, hist, cb, ref, freq, cum):
    """Format 7 on the device: each candidate's explicit table where it pays (the rules of
    codec.codebook.explicit_may_pay / explicit_pays, integers only, so the bytes are the reference's).
    Returns ``(cb, freq, cum, table sizes, {candidate: table bytes})``."""
    import torch

    lengths = _family_tensors(str(words.device))[2]
    M, E = lay.man_bits, lay.exp_bits
    byte = 8 << cbk.LENGTH_FRAC_BITS
    c = _explicit_counts(hist, ref)
    ns = c.sum(dim=1)
    own = torch.where(c > 0, torch.clamp(c * cbk.TOTAL // ns.clamp(min=1)[:, None], min=1), 0)
    tb = _table_nbytes(own) * byte
    sym_len = (c * lengths[own]).sum(dim=1) + c[:, cbk.SYM_ESC] * cbk.ESC_LENGTH
    saved = _fitted_lengths(hist, freq, ref, lengths, M) - sym_len
    gate = (ns > 0) & (saved * n_coded > cbk.EXPLICIT_GATE * tb * ns)
    sizes = torch.zeros_like(n_coded)
    if not bool(gate.any()):
        return cb, freq, cum, sizes, {}
    sel = torch.nonzero(gate).flatten()
    chunks, slot = torch.unique(cc[sel], return_inverse=True)
    nb = (2 << E) + 1
    if cbk.EXPLICIT_STEP != 1:
        raise NotImplementedError("EXPLICIT_STEP > 1 on the device")
    full = torch.empty((len(chunks), nb), dtype=torch.int64, device=words.device)
    ints = words.view(lay.torch_view_ints)
    total = ints.numel()
    mask = (1 << (8 * lay.itemsize)) - 1
    offs = torch.arange(0, cs, cbk.EXPLICIT_STEP, device=words.device)
    group = max(1, _BINCOUNT_KEYS // len(offs))              # chunks a bincount
    for g in range(0, len(chunks), group):                   # every EXPLICIT_STEP-th value of each chunk
        ch = chunks[g:g + group]
        pos = ch[:, None] * cs + offs[None, :]
        w = ints[pos.clamp(max=total - 1)].to(torch.int64) & mask
        key = torch.where(w == 0, nb - 1, (w >> (M - 1)) & ((2 << E) - 1))
        key = torch.where(pos < total, key + nb * torch.arange(len(ch), device=words.device)[:, None], nb * len(ch))
        full[g:g + group] = torch.bincount(key.flatten(), minlength=nb * len(ch) + 1)[:nb * len(ch)].view(len(ch), nb)
    h = full[slot]
    h[:, nb - 1] -= csk[sel]
    ce = _explicit_counts(h, ref[sel])
    fe = _quantise(ce, lengths)
    tbe = _table_nbytes(fe) * byte
    exp_len = (ce * lengths[fe]).sum(dim=1) + ce[:, cbk.SYM_ESC] * cbk.ESC_LENGTH
    pays = cbk.EXPLICIT_STEP * exp_len + tbe < cbk.EXPLICIT_STEP * _fitted_lengths(h, freq[sel], ref[sel], lengths, M)
    take = sel[pays]
    if not len(take):
        return cb, freq, cum, sizes, {}
    cb = cb.clone()
    freq = freq.clone()
    cum = cum.clone()
    cb[take] = fmt.CB_EXPLICIT
    freq[take] = fe[pays]
    cum[take] = torch.cumsum(fe[pays], dim=1) - fe[pays]
    sizes[take] = tbe[pays] // byte
    packed = {int(j): fmt.pack_explicit_table(f) for j, f in zip(take.tolist(), fe[pays].cpu().numpy())}
    return cb, freq, cum, sizes, packed


def _sparse_payloads(words, lay, cs, n, const, zeros, smallest):
    """``(mask, payloads)``: the chunks that are SPARSE (codec.format: smaller than ``smallest``, their
    best coded or raw size) and their payloads, in chunk order.  Only chunks whose ``k`` non-zero words
    could beat ``smallest`` at a byte a gap and a bit a word are looked at: their non-zero words and
    positions go to the host, where codec.format sizes and packs them (few bytes: such chunks are
    nearly empty)."""
    import torch

    k = n - zeros
    maybe = torch.nonzero((const == 0) & (2 + k + packed_nbytes(k, 1) < smallest)).flatten()
    mask = torch.zeros_like(const, dtype=torch.bool)
    if not len(maybe):
        return mask, []
    ints = words.view(lay.torch_view_ints)
    payloads = []
    for c, limit in zip(maybe.tolist(), smallest[maybe].tolist()):
        seg = ints[c * cs:c * cs + cs]
        pos = torch.nonzero(seg).flatten()
        vals = seg[pos].cpu().numpy().view(lay.uint)
        payload = fmt.pack_sparse_at(pos.cpu().numpy(), vals)        # (a few bytes: packed to be measured)
        if len(payload) < limit:
            mask[c] = True
            payloads.append(payload)
    return mask, payloads


def _write_bitmaps(out, nz, n, mode, at, chunk):
    """Zero-block bitmaps (bit set = block all +0, packed little-endian) of the chosen zero-block payloads."""
    import torch

    for m in fmt.ZERO_BLOCK_MODES:
        sel = torch.nonzero(mode == m).flatten()
        if not len(sel):
            continue
        nbc = -(-n[sel] // (1 << m))
        width = -(-nz[m].shape[1] // 8) * 8
        bits = torch.zeros((len(sel), width), dtype=torch.int64, device=out.device)
        cols = torch.arange(nz[m].shape[1], device=out.device)[None, :]
        bits[:, :nz[m].shape[1]] = ((nz[m][chunk[sel]] == 0) & (cols < nbc[:, None])).long()
        packed = (bits.view(len(sel), -1, 8) << torch.arange(8, device=out.device)).sum(dim=2)
        j = torch.arange(packed.shape[1], device=out.device)[None, :]
        ok = j < ((nbc + 7) // 8)[:, None]
        out[(at[sel][:, None] + j)[ok]] = packed[ok].to(torch.uint8)


def encode_stream(words, lay, shape, chunk_size: int, flags: int, repeats: bytes = b"", *, kernels=None):
    """The whole stream of the word tensor ``words`` as a uint8 tensor on its device; ``repeats``: its
    row-repeat section (codec.format.pack_repeats; the repeated rows of ``words`` are +0)."""
    import torch

    checksum = bool(flags & fmt.FLAG_CHECKSUM)
    n_chunks = -(-words.numel() // chunk_size)
    head_nbytes = fmt.header_nbytes(len(shape), n_chunks, checksum) + len(repeats)
    if n_chunks:
        out, kinds, sizes = encode_payloads(words, lay, chunk_size, head_nbytes, kernels)
    else:
        out, kinds, sizes = torch.empty(head_nbytes, dtype=torch.uint8, device=words.device), [], []
    crcs = None
    if checksum:                                # CRC32C on the host, from a copy of the payloads
        host = out[head_nbytes:].cpu().numpy()
        ends = np.cumsum(sizes)
        crcs = [fmt.crc32c(host[a:b]) for a, b in zip(np.concatenate([[0], ends[:-1]]), ends)]
    head = fmt.pack_header(lay, shape, chunk_size, flags, kinds, sizes, crcs, repeats=repeats)
    slack = head_nbytes - len(head)         # a compact head is shorter: the stream starts later
    out[slack:head_nbytes] = torch.frombuffer(bytearray(head), dtype=torch.uint8).to(out.device)
    return out[slack:]
