"""The zipccl stream format, versions 1 to 10: defined here and nowhere else.

All integers little-endian.  A stream is ``header | chunk table | [row-repeat section] | [row-filter section]
| [checksums] | payloads``::

    offset  size      field
    0       4         magic b"ZCCL"
    4       1         format version (7; 9 with a row-repeat section; 10 with a row filter; 1 to 6 and 8
                      are still read, see "Versions" below)
    5       1         dtype code (codec.layouts: 1 bf16, 2 f16, 3 f32, 4 f8e4m3fn, 5 f8e5m2)
    6       1         flags: bit0 CRC32C checksums present, bit1 input was a torch tensor,
                      bit2 compact head (version 4; the layout below "Compact head" follows),
                      bit3 a row-repeat section follows the chunk table (version 9),
                      bit4 a row-filter section follows (version 10)
    7       1         ndim (<= 32)
    8       4  u32    chunk_size, values per chunk (the last chunk may be shorter)
    12      2  u16    codebook family version (FAMILY_OF_VERSION: 1 in versions 1-2, 2 in version 3)
    14      2  u16    reserved, 0
    16      8*ndim    shape, u64 each
    --- chunk table, n_chunks = ceil(prod(shape) / chunk_size) ---
            n_chunks  u8 kind of each chunk (KIND_*)
            8*n_chunks  u64 end offset of each chunk's payload, relative to the payload start
            ...       the row-repeat section (only with flag bit 3; :func:`pack_repeats`)
            ...       the row-filter section (only with flag bit 4; :func:`pack_filter`)
            4*n_chunks  u32 CRC32C of each payload            (only with checksums)
            4         u32 CRC32C of every byte above           (only with checksums)
    --- payloads, chunk after chunk, no padding ---

Chunk payloads by kind (``n`` = values in the chunk, ``w`` = itemsize)::

    KIND_RAW    n*w bytes: the words as they are (used when coding would expand)
    KIND_CONST  w bytes: one word repeated n times (all-zero chunks are CONST 0)
    KIND_SPARSE (version 6) the chunk's k non-zero words and where they are, every other word +0:
                varint k (1 <= k <= n) | u8 width (1 <= width <= 8w) | k varints: gap_j = pos_j - pos_{j-1} - 1
                (pos_{-1} = -1; each at most 3 bytes, the last position < n) | the k words packed with
                ``width`` bits (the residual plane's packing: width // 8 byte planes, low byte first, then
                the remaining bits little-endian; padding bits 0).  The payload ends exactly there.
    KIND_CODED  u16 codebook id | i16 ref exponent | u8 shift | u8 mode | u8 sign | u8 narrow
                | u32 n_sm | u32 n_esc | u32 n_words                                  (20 bytes)
                | codebook CB_EXPLICIT (version 7): the chunk's own frequency table (below "Explicit table")
                | mode 0: nothing; mode m in zero_block_modes(version): a bitmap of ceil(n / 2^m) bits
                  (packed little-endian), bit set = that block of 2^m values is all +0 and is
                  not coded; the n_coded values of the other blocks are coded below
                | LANES(n_coded) x u32 final rANS states | n_words x u16 rANS words
                | residual plane: for the n_sm non-ZERO values, ``sign << (M-1-shift) |
                  (mantissa & (2^(M-1) - 1)) >> shift`` packed with width M - shift bits
                  (codec.layouts.packed_nbytes); the leading mantissa bit is in the symbol,
                  and ``shift`` low mantissa bits, zero in every value of the chunk, are dropped.
                  With sign mode SIGN_POSITIVE / SIGN_NEGATIVE every one of the n_sm values has
                  sign bit 0 / 1 and the plane leaves it out, and ``narrow`` high bits of the
                  residual, zero in every value of the plane (small subnormals), are left out too:
                  width M - 1 - shift - narrow (:func:`plane_width`; narrow is 0 with SIGN_STORED);
                  the decoder puts the mode's sign back
                | n_esc x u16 escapes: ``exponent field << 1 | leading mantissa bit``

Versions.  Version 2 added the chunk's sign mode (SIGN_*) and ``narrow`` in what version 1 declared
``u16 reserved (0)``: a version-1 head is a version-2 head with sign SIGN_STORED and narrow 0, so one
parser reads both, and a version-1 stream whose sign byte is not 0 is refused.

Version 3 added zero-block modes 8 and 10 (256- and 1024-value blocks: a 64K-value chunk of a few
scattered non-zero values, as fp16 Adam second moments underflow to, pays 8 bytes of bitmap instead
of 128, and fewer rANS lanes), and its streams name codebook family 2 (family 1's tables under the
same ids, plus four wider log-normal shapes); its encoder fits the shape by the code length of a
sample (codec.codebook).  The encoder writes version 3.

Version 4 added the compact head (FLAG_COMPACT), for streams of at most COMPACT_MAX_CHUNKS chunks, where
the fixed-width head is most of a small tensor's stream (a LayerNorm vector, a bias, an all-zero
optimizer state: 33 of 39 bytes)::

    offset  size      field
    0       8         magic, version, dtype, flags (with FLAG_COMPACT), ndim: as above
    8       varint    chunk_size
            varint    each dimension of the shape
            ceil(n_chunks / 4)  the kinds, 2 bits a chunk (chunk i in bits 2(i % 4) of byte i // 4)
            varint    the payload size of each CODED chunk, in chunk order (RAW and CONST chunks' sizes
                      follow from their kind: n*w and w bytes)
            4*n_chunks  u32 CRC32C of each payload            (only with checksums)
            4         u32 CRC32C of every byte above           (only with checksums)

(varint: unsigned LEB128, 7 bits a byte, low group first, the shortest form only.)  The codebook
family is version 4's (FAMILY_OF_VERSION); payloads are version 3's.  The encoder writes the compact
head wherever it may (at most COMPACT_MAX_CHUNKS chunks) and is shorter, the fixed-width one otherwise
(with version 4 and bit 2 clear).

Version 5 changed no byte layout, only the encoder's choice of table (codec.codebook): the fit's sample
is every 17th value (16 before: on rows of 16k values that sampled the same columns of every row), and
each shape is also tried at the reference exponent that puts the sample's highest field at the top of
the window.  Its heads and payloads are version 4's (one parser reads both); the version number says
which encoder wrote the stream, so that the golden streams pin each encoder's bytes.

Version 6 added KIND_SPARSE (a 2-bit kind, so also in the compact head, whose varint sizes then
cover CODED and SPARSE chunks): a chunk of a few non-zero words (an fp16 Adam second moment that
underflowed but for a few entries, an embedding gradient's used rows) pays about a byte a position
and its words' significant bits, instead of a coded chunk's head, bitmap and rANS states.  The
encoder's choice per chunk (every backend): CONST if one word repeats; else the smallest of the coded
payloads (plain, then zero-block modes, as in version 5), SPARSE (``sparse_nbytes``: width is the bit
length of the OR of the chunk's words) and RAW, where CODED wins a tie with SPARSE and RAW wins a
tie with either.  Chunks of other kinds and coded payloads are version 5's byte for byte.

Version 7 added explicit tables: a coded chunk whose codebook id is CB_EXPLICIT carries its own rANS
frequencies right after its head (before its zero-block bitmap), for chunks that no table of the
analytic family fits (gradients and optimizer moments whose magnitudes are not one of its shapes,
scales that change inside a chunk: ``bench/results/format_v7_explicit_amd-epyc-f25-m1.md`` has the
measurements).  Explicit table::

    u8 lo | u8 count              the window symbols SYM_WINDOW0 + lo .. SYM_WINDOW0 + lo + count - 1
                                  (lo + count <= 2 * WINDOW)
    varint f_ZERO | varint f_ESC | count varints: the frequency of each of those window symbols

(varints as the compact head's: LEB128, shortest form.)  Every other symbol has frequency 0; the
frequencies sum to TOTAL (codebook.PROB_BITS); a window symbol with a non-zero frequency names an
exponent field of the dtype (``0 <= ref - WINDOW_LOW + j <= 2^E - 1``), so that decoded symbols are
as the analytic tables' are after clipping.  Its encoders (every backend) choose per coded payload
(plain or with a zero-block bitmap), after the version-6 fit: where the fit's sample says an explicit
table may pay (:func:`codec.codebook.explicit_may_pay`), the histogram of the coded values (every
EXPLICIT_STEP-th of the chunk, less those in skipped blocks) at the fit's ``ref`` is quantised
(:func:`codec.codebook.explicit_frequencies`, integers only) and kept where its estimated size, table
included, is below the fitted table's (:func:`codec.codebook.explicit_pays`).  Everything else is
version 6's, byte for byte.  Every encoder (reference, numba, and the device ones through
codegen.device's host-side choice) writes it by default (``WRITE_VERSION``); every decoder reads it.

Version 8 (a draft: the reference codec writes it where ``WRITE_VERSION`` is 8, the numba decoder hands its
streams to the reference, the device decoders refuse them) adds symbol layouts to explicit tables: a
symbol may carry ``k`` mantissa bits below the leading one (0 <= k <= min(LAYOUT_MAX_EXTRA, M - 1)) and
the sign, where that chunk's values leave information there (the mantissa of fp8 and of subnormals is not
uniform; the sign of GELU outputs and of attention scores depends on the magnitude; measured by
``bench/probes/symbol_study.py``).  A version-8 explicit table starts with one more byte::

    u8 layout                     k | LAYOUT_SIGN (bit 2: the sign is in the symbol); other bits 0
    u8 lo | u8 count | varints    as version 7's

With ``b = 1 + k + (1 if the sign is in the symbol else 0)`` bits below the field, a non-zero value's key
is ``field << b | top << s | sign`` (``top``: its ``1 + k`` high mantissa bits; ``s`` 1 and ``sign`` its
sign bit with LAYOUT_SIGN, else 0 and nothing), window symbol ``SYM_WINDOW0 + j`` stands for the key
``((ref - WINDOW_LOW) << b) + j``, and an escape's u16 is its key.  The residual plane holds the
mantissa below the symbol's bits: as version 7's with ``M - k`` for ``M`` (:func:`plane_width`,
``shift + narrow <= M - 1 - k``).  With LAYOUT_SIGN the head's sign mode is SIGN_POSITIVE (the plane
has no sign; the symbol's is the value's).  Layout 0 is version 7's table and symbols.  The encoder's
choice: where format 7's gate (:func:`codec.codebook.explicit_may_pay`) or the layouts' own
(:func:`codec.codebook.explicit_choice_may_pay`) opens, :func:`codec.codebook.explicit_choice`.

Version 9 added the row-repeat section (FLAG_REPEATS, in fixed-width and compact heads alike, after the
chunk table and before the checksums, which cover it): the tensor's values as rows of a stated width (the
encoders take the last dimension), and the rows that repeat an earlier row bit for bit, each with the
distance back to the row it repeats (:func:`pack_repeats` has the layout).  A repeated row's values in the
payloads are ignored (the encoders code them as +0, which zero-block bitmaps take for a few bits); the
decoder gives the row its source's words after decoding the chunks.  Sources are rows that are not repeats
themselves, so one pass resolves every repeat.  Measured on the ratio corpus: the embedding output of a
padded batch repeats 58 % of its rows, each a sequence (128 rows) or more after its source, beyond any
chunk (``bench/results/row_structure.md``).  The encoders' choice is :mod:`codec.repeats` (every backend,
the same section).  Chunk payloads and the chunk table are version 7's byte for byte, and the encoders
name version 9 only where they write a section: every other stream is a version-7 stream, which older
readers take.

Version 10 added the row filter (FLAG_FILTER, bit 4, in fixed-width and compact heads alike, after the row-repeat
section if there is one, before the checksums, which cover it): chunks whose payloads hold, in place of each
value's magnitude (every bit but the sign), the zigzag code of its difference to the magnitude one row above in the
same chunk, modulo ``2^(E+M)`` (rows of a stated width counted from the chunk's first value; the first row as
it is).  :func:`pack_filter` has the layout, :mod:`codec.filters` the transform and the encoders' choice (every
backend: a gate on a fixed sample, then both codings and each chunk's smaller payload).  Where a tensor's columns
keep their own scale (attention probabilities: one key's column; LayerNorm'd activations: one channel), the value
above is the better model of a value's exponent than the chunk's table: measured on the ratio corpus, MiniLM's
layer-5 attention probabilities 3.37 -> 4.00 in bf16, 3.83 -> 5.94 in e4m3 (``bench/results/format_v10_*.md``).
The decoder decodes the chunks, undoes the filter on the chunks the section names, then applies the row-repeat
section (the encoder clears repeated rows first, then filters).  Chunk payloads are version 7's byte for byte;
the encoders name version 10 only where they write a filter, else 9 or 7.

Any chunk, or run of chunks, decodes alone from its table entries and payload bytes, but for the rows of a
row-repeat section, whose sources may lie in other chunks (:func:`codec.decode_chunks` decodes those too).
Worst case size: ``numel*w + 16 + 8*ndim + 9*n_chunks (+ 4*n_chunks + 4 with checksums)``
(:func:`header_nbytes`: no head the encoder writes is longer), since a chunk that would not shrink is
stored RAW (and an encoder whose stream with a row-repeat section or a row filter would be longer writes it
without).

The rANS stream of a CODED chunk: value ``i`` belongs to lane ``i % K`` (``K = LANES(n)``);
the decoder starts from the K states and, round ``r = 0, 1, ...``, lane ``l = 0..K-1``,
decodes value ``r*K + l`` and, if that lane's state fell below ``2^16``, shifts in the next
word.  Each lane must end in the state ``2^16`` it started from, and all words must be used.
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import numpy as np

from .codebook import (FAMILY_VERSION, LAYOUT_MAX_EXTRA, LAYOUT_SIGN, N_SYMBOLS, SYM_ESC, SYM_WINDOW0, SYM_ZERO, TOTAL,
                       WINDOW, WINDOW_LOW, layout_parts, n_codebooks, symbol_bits)
from .layouts import FloatLayout, layout_by_code, pack_bits, packed_nbytes, unpack_bits
from .records import Record

MAGIC = b"ZCCL"
FORMAT_VERSION = 7                   # what the encoders write by default (the golden streams' newest version)
READ_VERSIONS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10)   # what the decoders read (8: a draft, see "Version 8" above)
DRAFT_VERSIONS = (8,)                # read, written only on request, no golden streams yet
REPEATS_VERSION = 9                  # version 7 plus a row-repeat section: what the encoders write where they write one
FILTER_VERSION = 10                  # version 9 plus a row filter: what the encoders write where they write one
#: what the encoders write: FORMAT_VERSION, or 6 (no explicit tables: the version-6 bytes of every chunk,
#: which ``bench.ratio --format 6`` and the A/B benchmarks set to measure what version 7 adds), or 8 (the
#: draft symbol layouts, written by the reference encoder only: ``bench.ratio --format 8``)
WRITE_VERSION = FORMAT_VERSION
FAMILY_OF_VERSION = {1: 1, 2: 1, 3: 2, 4: 2, 5: 2, 6: 2, 7: 2, 8: 2, 9: 2, 10: 2}   # the codebook family each format version's streams use
CB_EXPLICIT = 0xFFFF                 # version 7: a coded chunk's own frequency table follows its head
EXPLICIT_MAX_BYTES = 3 + 2 * 2 + 80 * 2   # (v8: u8 layout,) u8 lo, u8 count, 2 + 80 varints of at most 2 bytes (f <= TOTAL < 2^14)
FLAG_CHECKSUM = 1
FLAG_TORCH = 2
FLAG_COMPACT = 4                  # version 4: the compact head (varints, 2-bit kinds)
FLAG_REPEATS = 8                  # version 9: a row-repeat section follows the chunk table
FLAG_FILTER = 16                  # version 10: a row-filter section follows (after the row-repeat section, if any)
FILTER_UP = 1                     # version 10's one row filter: each value's magnitude less the one a row above
FILTER_NAMES = {FILTER_UP: "up"}
REPEAT_VARINT_BYTES = 7           # a repeat section's row gaps and distances: < 2^49 (rows < MAX_NUMEL = 2^48)
REPEAT_COPY_WORDS = 1 << 20       # decoders copy repeated rows about this many words at a time (bounded scratch)
COMPACT_MAX_CHUNKS = 4            # the most chunks a compact head describes
COMPACT_FIXED = 8                 # magic, version, dtype, flags, ndim
KIND_RAW, KIND_CODED, KIND_CONST, KIND_SPARSE = 0, 1, 2, 3
KIND_NAMES = {KIND_RAW: "raw", KIND_CODED: "coded", KIND_CONST: "const", KIND_SPARSE: "sparse"}
SPARSE_GAP_BYTES = 3              # a sparse chunk's gap varints: chunks of at most 2^20 values need 21 bits
MAX_NDIM = 32
MAX_CHUNK_SIZE = 1 << 20          # keeps the integer statistics inside int64
MAX_NUMEL = 1 << 48
RANS_L = 1 << 16                  # rANS state interval [2^16, 2^32), 16-bit renormalisation
MAX_LANES = 32
VALUES_PER_LANE = 1024            # lanes(n): about one rANS state per this many values
ZERO_BLOCK_MODES = (4, 6, 8, 10)  # zero-block bitmaps of 16-, 64-, 256- and 1024-value blocks (v3; v1-2: 4, 6)
SIGN_STORED, SIGN_POSITIVE, SIGN_NEGATIVE = 0, 1, 2   # v2 sign modes: in the plane / all + / all -
SIGN_MODES = (SIGN_STORED, SIGN_POSITIVE, SIGN_NEGATIVE)
SIGN_NAMES = {SIGN_STORED: "stored", SIGN_POSITIVE: "positive", SIGN_NEGATIVE: "negative"}


class FormatError(ValueError):
    """A stream is malformed, truncated, corrupted, forged or not a zipccl stream."""


# The fixed parts, declared once (offsets, sizes, the NumPy dtype and the kernels' constants derive from these)
STREAM_HEAD = Record("stream_head", [("magic", "4s"), ("version", "B"), ("dtype", "B"), ("flags", "B"),
                                     ("ndim", "B"), ("chunk_size", "I"), ("family", "H"), ("reserved", "H")],
                     prefix="SH")
CHUNK_HEAD = Record("chunk_head", [("codebook", "H"), ("ref", "h"), ("shift", "B"), ("mode", "B"),
                                   ("sign", "B"), ("narrow", "B"), ("n_sm", "I"), ("n_esc", "I"),
                                   ("n_words", "I")],
                    prefix="CH")

# What can be wrong with a coded chunk: one code and one message per fault, for every decoder (the
# scalar and vectorised parses below, the numba kernels' error codes, the device decoders).  Codes 1-8
# are found from the chunk head alone; 9-13 only by decoding the payload.
FAULT_SHORT, FAULT_MODE, FAULT_SHIFT, FAULT_CODEBOOK, FAULT_BITMAP, FAULT_EMPTY, FAULT_COUNTS, FAULT_SIZE = range(1, 9)
FAULT_RANS_END, FAULT_RANS_STATE, FAULT_SYMBOLS, FAULT_EXPONENT = range(9, 13)
FAULT_PAYLOAD = 13          # the device decoders' verdict: one of 9-12, not told apart
FAULT_SPARSE = 14           # a sparse chunk's payload (version 6); parse_sparse says which part
FAULT_TABLE = 15            # an explicit frequency table (version 7); parse_explicit_table says which part
CHUNK_FAULTS = {
    FAULT_SHORT: "coded payload of {size} bytes is shorter than its header",
    FAULT_MODE: "unknown mode {mode} / sign mode {sign} with narrow {narrow}",
    FAULT_SHIFT: "shift {shift} and narrow {narrow} exceed the {low} low mantissa bits",
    FAULT_CODEBOOK: "codebook id {codebook} outside family v{family} (0..{last})",
    FAULT_BITMAP: "payload too short for its zero-block bitmap",
    FAULT_EMPTY: "zero-block bitmap leaves no value to code",
    FAULT_COUNTS: "counts n_sm={n_sm} n_esc={n_esc} n_words={n_words} impossible for {n_coded} coded values",
    FAULT_SIZE: "coded payload is {size} bytes, its header implies {implied}",
    FAULT_RANS_END: "rANS stream ends early",
    FAULT_RANS_STATE: "rANS stream inconsistent (final state or word count wrong: corrupted payload)",
    FAULT_SYMBOLS: "decoded symbols disagree with the header counts",
    FAULT_EXPONENT: "exponent field out of range for {dtype}",
    FAULT_PAYLOAD: "coded payload inconsistent (rANS stream or counts)",
    FAULT_SPARSE: "sparse payload malformed: {what}",
    FAULT_TABLE: "explicit frequency table malformed: {what}",
}
HEAD_FAULTS = range(FAULT_SHORT, FAULT_SIZE + 1)


def chunk_fault(i: int, code: int, **values) -> FormatError:
    """The :class:`FormatError` of fault ``code`` in chunk ``i``; ``values`` fill its message (a
    decoder that knows only the code gets the message's words up to the first value)."""
    text = CHUNK_FAULTS[code]
    try:
        text = text.format(**values)
    except (KeyError, IndexError):
        text = text.split(" {")[0]
    return FormatError(f"chunk {i}: {text}")


def plane_width(man_bits: int, shift: int, sign: int, narrow: int = 0) -> int:
    """Bits per value of a coded chunk's residual plane: the sign (unless the sign mode says it),
    the mantissa below its leading bit, less ``shift`` low bits and ``narrow`` high ones.  (Also
    element-wise for arrays and torch tensors.)"""
    return man_bits - shift - (sign != SIGN_STORED) * 1 - narrow


def sign_modes(version: int) -> tuple[int, ...]:
    """The sign modes a chunk head of a version-``version`` stream may carry (each decoder checks
    ``sign <= max(sign_modes(version))``)."""
    return SIGN_MODES if version >= 2 else (SIGN_STORED,)


def zero_block_modes(version: int) -> tuple[int, ...]:
    """The zero-block modes a chunk head of a version-``version`` stream may carry (besides 0)."""
    return ZERO_BLOCK_MODES if version >= 3 else ZERO_BLOCK_MODES[:2]


def head_mode_ok(version: int, mode: int, sign: int, narrow: int) -> bool:
    """The FAULT_MODE check of a chunk head: a zero-block mode the version has, a sign mode the version
    has, high bits left out only where the sign is too (both are 0 in a version-1 head)."""
    return (mode == 0 or mode in zero_block_modes(version)) and sign in sign_modes(version) and (
        narrow == 0 or sign != SIGN_STORED)


def max_kind(version: int) -> int:
    """The highest chunk kind a version-``version`` stream may hold."""
    return KIND_SPARSE if version >= 6 else KIND_CONST


def explicit_tables(version: int) -> bool:
    """Whether a version-``version`` stream's coded chunks may carry explicit tables (CB_EXPLICIT)."""
    return version >= 7


def explicit_layouts(version: int) -> bool:
    """Whether a version-``version`` stream's explicit tables start with a symbol layout byte (version 8,
    a draft: version 9's chunks are version 7's)."""
    return version == 8


def row_repeats(version: int) -> bool:
    """Whether a version-``version`` stream may carry a row-repeat section (FLAG_REPEATS)."""
    return version >= REPEATS_VERSION


def row_filters(version: int) -> bool:
    """Whether a version-``version`` stream may carry a row-filter section (FLAG_FILTER)."""
    return version >= FILTER_VERSION


def pack_explicit_table(f, layout: int | None = None) -> bytes:
    """The explicit table of the frequencies ``f`` (N_SYMBOLS of them, summing to TOTAL): the window
    symbols from the first to the last with a non-zero frequency; with a version-8 ``layout``, that byte
    first."""
    f = [int(v) for v in f]
    used = [j for j in range(2 * WINDOW) if f[SYM_WINDOW0 + j]]
    lo, count = (used[0], used[-1] - used[0] + 1) if used else (0, 0)
    return bytes(([] if layout is None else [layout]) + [lo, count]) + b"".join(_varint(v) for v in [f[SYM_ZERO], f[SYM_ESC]]
                                         + f[SYM_WINDOW0 + lo:SYM_WINDOW0 + lo + count])


def parse_explicit_table(mv, pos: int, end: int, ref: int, lay: FloatLayout, i: int = 0, version: int = 7):
    """``(frequencies, next offset, symbol layout)`` of the explicit table at ``mv[pos:end]`` of chunk ``i``
    (whose head says ``ref``) in a version-``version`` stream (layout 0 before version 8); raises
    :class:`FormatError` (FAULT_TABLE) naming what is wrong."""
    def bad(what):
        return chunk_fault(i, FAULT_TABLE, what=what)
    layout = 0
    if explicit_layouts(version):
        if end - pos < 1:
            raise bad("payload ends before its symbol layout")
        layout = int(mv[pos])
        pos += 1
        if layout & ~(3 | LAYOUT_SIGN) or layout_parts(layout)[0] > min(LAYOUT_MAX_EXTRA, lay.man_bits - 1):
            raise bad(f"symbol layout {layout:#x} undefined for {lay.name}")
    if end - pos < 2:
        raise bad("payload ends inside its symbol range")
    lo, count = int(mv[pos]), int(mv[pos + 1])
    pos += 2
    if lo + count > 2 * WINDOW:
        raise bad(f"window symbols {lo}..{lo + count - 1} outside 0..{2 * WINDOW - 1}")
    f = np.zeros(N_SYMBOLS, dtype=np.int64)
    targets = [SYM_ZERO, SYM_ESC] + list(range(SYM_WINDOW0 + lo, SYM_WINDOW0 + lo + count))
    for s in targets:
        v, shift = 0, 0
        while True:
            if pos >= end:
                raise bad("payload ends inside its frequencies")
            b = int(mv[pos])
            pos += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                if b == 0 and shift > 7:
                    raise bad("a frequency is not in its shortest form")
                break
            if shift >= 14:
                raise bad(f"a frequency is longer than 2 bytes")
        f[s] = v
    if int(f.sum()) != TOTAL:
        raise bad(f"frequencies sum to {int(f.sum())}, not {TOTAL}")
    fields = ref - WINDOW_LOW + (np.arange(2 * WINDOW) >> symbol_bits(layout))
    outside = (f[SYM_WINDOW0:] > 0) & ((fields < 0) | (fields > (1 << lay.exp_bits) - 1))
    if outside.any():
        raise bad(f"exponent field {int(fields[np.flatnonzero(outside)[0]])} outside {lay.name}'s")
    return f, pos, layout


def _varint_nbytes(v, max_bytes: int = SPARSE_GAP_BYTES):
    """Bytes of the LEB128 varints of ``v`` (element-wise; values below ``2^(7 max_bytes)``)."""
    return 1 + sum((v >= 1 << 7 * k) for k in range(1, max_bytes))


def _pack_varints(v: np.ndarray, max_bytes: int) -> bytes:
    """The LEB128 varints of the values ``v`` (each below ``2^(7 max_bytes)``), back to back."""
    v = np.asarray(v, dtype=np.int64)
    if len(v):                              # no wider than the largest value needs
        max_bytes = min(max_bytes, max(1, -(-int(v.max()).bit_length() // 7)))
    n_b = np.broadcast_to(_varint_nbytes(v, max_bytes), v.shape)
    vb = np.stack([((v >> 7 * k) & 0x7F) | ((n_b > k + 1) << 7) for k in range(max_bytes)], axis=1)
    return vb[np.arange(max_bytes)[None, :] < n_b[:, None]].astype(np.uint8).tobytes()


def _parse_varints(b: np.ndarray, k: int, max_bytes: int, bad, what: str) -> np.ndarray:
    """The ``k >= 1`` LEB128 varints that fill the bytes ``b`` exactly, each at most ``max_bytes`` long
    and in its shortest form (int64); else ``bad(message)`` is raised, the message naming ``what``."""
    gb = np.asarray(b).astype(np.int64)
    last = np.flatnonzero(gb < 0x80)                     # each varint's last byte
    if len(last) != k or last[-1] != len(gb) - 1:
        raise bad(f"{what} bytes do not hold {k} varints")
    first = np.concatenate([[0], last[:-1] + 1])
    length = last - first + 1
    if int(length.max()) > max_bytes:
        raise bad(f"a {what} varint is longer than {max_bytes} bytes")
    if np.any((length > 1) & (gb[last] == 0)):
        raise bad(f"a {what} varint is not in its shortest form")
    digit = np.arange(len(gb)) - np.repeat(first, length)
    return np.add.reduceat((gb & 0x7F) << (7 * digit), first)


def _sparse_fields(pos: np.ndarray, values: np.ndarray):
    """``(gaps, width)`` of a SPARSE payload: the gaps between the ascending positions ``pos`` of the
    non-zero words ``values``, and the bit length of their OR."""
    return np.diff(pos, prepend=-1).astype(np.int64) - 1, int(np.bitwise_or.reduce(values, initial=0)).bit_length()


def sparse_nbytes_at(pos: np.ndarray, values: np.ndarray) -> int:
    """Bytes of the SPARSE payload of a chunk whose non-zero words are ``values`` at ``pos`` (ascending):
    what the encoders compare with the coded payload and the raw chunk."""
    gaps, width = _sparse_fields(pos, values)
    return int(_varint_nbytes(len(pos))) + 1 + int(_varint_nbytes(gaps).sum()) + packed_nbytes(len(pos), width)


def pack_sparse_at(pos: np.ndarray, values: np.ndarray) -> bytes:
    """The SPARSE payload of a chunk whose non-zero words are ``values`` at ``pos`` (ascending)."""
    g, width = _sparse_fields(pos, values)
    return _varint(len(pos)) + bytes([width]) + _pack_varints(g, SPARSE_GAP_BYTES) + pack_bits(values, width)


def sparse_nbytes(words: np.ndarray) -> int:
    """Bytes of the SPARSE payload of the chunk ``words`` (1-D unsigned, not all +0)."""
    pos = np.flatnonzero(words)
    return sparse_nbytes_at(pos, words[pos])


def pack_sparse(words: np.ndarray) -> bytes:
    """The SPARSE payload of the chunk ``words`` (1-D unsigned, not all +0)."""
    pos = np.flatnonzero(words)
    return pack_sparse_at(pos, words[pos])


def parse_sparse(payload, n: int, itemsize: int, i: int = 0):
    """``(positions, words)`` of the SPARSE payload ``payload`` (a uint8 array) of chunk ``i``, which
    holds ``n`` values of ``itemsize`` bytes; raises :class:`FormatError` (FAULT_SPARSE) naming what
    is wrong.  Vectorised: a sparse payload can hold most of a chunk."""
    b = np.asarray(payload, dtype=np.uint8)

    def bad(what):
        return chunk_fault(i, FAULT_SPARSE, what=what)
    size = len(b)
    k, pos = 0, 0
    for shift in (0, 7, 14):                             # varint k: k <= n <= 2^20
        if pos >= size:
            raise bad("payload ends inside its count")
        k |= (int(b[pos]) & 0x7F) << shift
        pos += 1
        if b[pos - 1] < 0x80:
            break
    else:
        raise bad("count longer than 3 bytes")
    if pos > 1 and b[pos - 1] == 0:
        raise bad("count not in its shortest form")
    if not 1 <= k <= n:
        raise bad(f"count {k} outside [1, {n}]")
    if pos >= size:
        raise bad("payload ends before its width")
    width = int(b[pos])
    pos += 1
    if not 1 <= width <= 8 * itemsize:
        raise bad(f"width {width} outside [1, {8 * itemsize}]")
    packed = packed_nbytes(k, width)
    gaps_end = size - packed
    if not pos + k <= gaps_end <= pos + SPARSE_GAP_BYTES * k:
        raise bad(f"{size} bytes cannot hold {k} gaps and {k} values of {width} bits")
    gaps = _parse_varints(b[pos:gaps_end], k, SPARSE_GAP_BYTES, bad, "gap")
    positions = np.cumsum(gaps + 1) - 1
    if positions[-1] >= n:
        raise bad(f"position {int(positions[-1])} outside the chunk's {n} values")
    plane = b[gaps_end:]
    rem_bits = k * (width % 8)
    if rem_bits % 8 and int(plane[-1]) >> (rem_bits % 8):
        raise bad("padding bits set")
    return positions, unpack_bits(plane, k, width)


@dataclass(frozen=True)
class Repeats:
    """A version-9 stream's row-repeat section, validated: the tensor's values are rows of ``row``
    values (``numel // row`` whole rows; a shorter rest is never repeated), and row ``dst[j]`` holds
    the same words as row ``src[j]``."""
    row: int
    dst: np.ndarray          # (k,) int64, ascending: the repeated rows
    src: np.ndarray          # (k,) int64, src[j] < dst[j]: rows that are not themselves repeated
    nbytes: int              # the section's bytes in the stream

    @property
    def n_repeated(self) -> int:
        """How many rows repeat an earlier one (not the tensor's rows: ``numel // row``)."""
        return len(self.dst)


def pack_repeats(row: int, dst, src) -> bytes:
    """The row-repeat section (version 9) saying that row ``dst[j]`` repeats row ``src[j]`` (rows of ``row``
    values; ``dst`` ascending, every ``src[j] < dst[j]`` a row that is not repeated)::

        varint nbytes             bytes of what follows
        varint row                values per row (>= 1; the tensor holds at least two whole rows)
        varint k                  repeated rows (1 <= k < numel // row)
        k varints                 dst[j] - dst[j-1] - 1 (dst[-1] = -1): the repeated rows, ascending
        k varints                 dst[j] - src[j] >= 1: how many rows back its source is

    (varints as the compact head's, at most REPEAT_VARINT_BYTES bytes.)  A repeated row's values in the
    chunk payloads are ignored (the encoders code them as +0); the decoder gives it its source's words."""
    dst = np.asarray(dst, dtype=np.int64)
    src = np.asarray(src, dtype=np.int64)
    body = (_varint(int(row)) + _varint(len(dst)) + _pack_varints(np.diff(dst, prepend=-1) - 1, REPEAT_VARINT_BYTES)
            + _pack_varints(dst - src, REPEAT_VARINT_BYTES))
    return _varint(len(body)) + body


def _section_body(mv, pos: int, name: str):
    """``(body, offset after it, error maker)`` of the section at ``mv[pos:]`` that its varint size leads (the
    row-repeat and row-filter sections); the body is a view of the bytes present, the errors name the section."""
    def bad(what):
        return FormatError(f"{name} section: {what}")
    nbytes, at = _read_varint(mv, pos, "size", f"{name} section's")
    if nbytes > len(mv) - at:
        raise bad(f"{nbytes} bytes, {len(mv) - at} left in the stream")
    return np.frombuffer(mv, dtype=np.uint8, count=nbytes, offset=at), at + nbytes, bad


def parse_repeats(mv, pos: int, numel: int) -> tuple[Repeats, int]:
    """``(the row-repeat section at mv[pos:], the offset after it)`` of a stream of ``numel`` values;
    raises :class:`FormatError` naming what is wrong.  Its arrays are sized by the bytes present."""
    body, end, bad = _section_body(mv, pos, "row-repeat")
    row, p = _read_varint(body, 0, "row width", "row-repeat section's")
    k, p = _read_varint(body, p, "count", "row-repeat section's")
    n_rows = numel // row if row else 0
    if row < 1 or n_rows < 2:
        raise bad(f"rows of {row} values do not make two rows of the tensor's {numel} values")
    if not 1 <= k < n_rows:
        raise bad(f"{k} repeated rows of {n_rows}")
    v = _parse_varints(body[p:], 2 * k, REPEAT_VARINT_BYTES, bad, "row")
    gaps, dist = v[:k], v[k:]
    if float(gaps.astype(np.float64).sum()) + k > n_rows + 1.0:      # keeps the running sum inside int64
        raise bad(f"repeated rows run past the tensor's {n_rows} rows")
    dst = np.cumsum(gaps + 1) - 1
    src = dst - dist
    if int(dst[-1]) >= n_rows:
        raise bad(f"repeated row {int(dst[-1])} outside the tensor's {n_rows} rows")
    if int(dist.min()) < 1 or int(src.min()) < 0:
        j = int(np.argmax((dist < 1) | (src < 0)))
        raise bad(f"row {int(dst[j])} repeats row {int(src[j])}, not an earlier one")
    at = np.minimum(np.searchsorted(dst, src), k - 1)
    chained = dst[at] == src
    if chained.any():
        j = int(np.argmax(chained))
        raise bad(f"row {int(dst[j])} repeats row {int(src[j])}, itself a repeat")
    return Repeats(int(row), dst, src, end - pos), end


def apply_repeats(rep: Repeats, words) -> None:
    """Give each repeated row of the decoded ``words`` (a whole stream's, 1-D: a NumPy array or a torch
    tensor) its source row's words."""
    if isinstance(words, np.ndarray):
        rows = words[:(len(words) // rep.row) * rep.row].reshape(-1, rep.row)
        step = max(1, REPEAT_COPY_WORDS // rep.row)
        for a in range(0, rep.n_repeated, step):
            rows[rep.dst[a:a + step]] = rows[rep.src[a:a + step]]
    else:                                  # a torch tensor, on its device
        import torch

        rows = signed_view(words)[:(len(words) // rep.row) * rep.row].reshape(-1, rep.row)
        dst, src = (torch.from_numpy(a).to(words.device) for a in (rep.dst, rep.src))
        rows[dst] = rows[src]


@dataclass(frozen=True)
class Filter:
    """A version-10 stream's row-filter section, validated: in each chunk ``j`` with ``chunks[j]`` set, the
    payloads hold the words the filter ``kind`` (FILTER_UP) made of the tensor's, with rows of ``width``
    values counted from the chunk's first value."""
    kind: int
    width: int
    chunks: np.ndarray       # (n_chunks,) bool: the filtered chunks
    nbytes: int              # the section's bytes in the stream


def pack_filter(width: int, chunks, kind: int = FILTER_UP) -> bytes:
    """The row-filter section (version 10) saying that the chunks ``j`` with ``chunks[j]`` true hold filtered
    words (rows of ``width`` values from each chunk's first value)::

        varint nbytes             bytes of what follows
        u8 filter                 FILTER_UP
        varint width              values per row, 1 <= width < chunk_size
        ceil(n_chunks / 8) bytes  bit j % 8 of byte j // 8 set: chunk j is filtered (at least one; padding 0)

    FILTER_UP: a filtered chunk's value at chunk offset ``p >= width`` holds, in place of its magnitude
    (every bit but the sign), the zigzag code of the difference of its magnitude and the magnitude of the
    value at ``p - width``, modulo ``2^(E+M)``; the first ``width`` values are as they are
    (:mod:`codec.filters`)."""
    bits = np.packbits(np.asarray(chunks, dtype=bool), bitorder="little").tobytes()
    body = bytes([kind]) + _varint(int(width)) + bits
    return _varint(len(body)) + body


def parse_filter(mv, pos: int, n_chunks: int, chunk_size: int) -> tuple[Filter, int]:
    """``(the row-filter section at mv[pos:], the offset after it)`` of a stream of ``n_chunks`` chunks of
    ``chunk_size`` values; raises :class:`FormatError` naming what is wrong."""
    body, end, bad = _section_body(mv, pos, "row-filter")
    nbytes = len(body)
    if nbytes < 1:
        raise bad("empty")
    kind = int(body[0])
    if kind not in FILTER_NAMES:
        raise bad(f"unknown filter {kind}")
    width, p = _read_varint(body, 1, "row width", "row-filter section's")
    if not 1 <= width < chunk_size:
        raise bad(f"rows of {width} values in chunks of {chunk_size}")
    nb = -(-n_chunks // 8)
    if nbytes != p + nb:
        raise bad(f"{nbytes} bytes, {p + nb} for {n_chunks} chunks")
    chunks = np.unpackbits(body[p:], bitorder="little").astype(bool)
    if chunks[n_chunks:].any():
        raise bad("chunk bitmap has padding bits set")
    chunks = chunks[:n_chunks].copy()
    if not chunks.any():
        raise bad("no chunk is filtered")
    return Filter(kind, int(width), chunks, end - pos), end


def signed_view(t):
    """The torch tensor ``t`` viewed as signed integers of its width (torch indexes unsigned 16/32-bit
    tensors for reading only)."""
    import torch

    return t.view({1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def lanes(n: int) -> int:
    """Interleaved rANS states for a chunk of ``n`` values: a power of two in [1, MAX_LANES], about one
    per VALUES_PER_LANE values (the numba and device decoders have vectorised twins of this)."""
    k = 1
    while k < MAX_LANES and 2 * k * VALUES_PER_LANE <= n:
        k *= 2
    return k


@dataclass(frozen=True)
class ChunkHead:
    """A coded chunk's header, validated, with the stream offsets of its parts."""
    codebook: int
    ref: int
    shift: int
    mode: int
    sign: int                         # SIGN_*
    narrow: int                       # high residual bits left out
    n_sm: int
    n_esc: int
    n_words: int
    n_coded: int                      # values that are entropy coded (n minus skipped zero blocks)
    zero_blocks: np.ndarray | None    # (ceil(n / 2^mode),) bool, with a bitmap
    states: int                       # offset of the rANS states
    words: int                        # offset of the rANS words
    table: np.ndarray | None = None   # (N_SYMBOLS,) int64 frequencies of an explicit table (version 7)
    layout: int = 0                   # its symbol layout (version 8; 0: version 7's symbols)


def crc32c(data, value: int = 0) -> int:
    """CRC32C of ``data``, continuing from ``value`` (the CRC of the bytes before it; 0 to start)."""
    import crc32c as _crc

    return _crc.crc32c(data, value)


@dataclass(frozen=True)
class Header:
    layout: FloatLayout
    shape: tuple[int, ...]
    chunk_size: int
    flags: int
    kinds: np.ndarray        # (n_chunks,) uint8
    ends: np.ndarray         # (n_chunks,) int64, payload-relative end offsets
    crcs: np.ndarray | None  # (n_chunks,) uint32
    payload_start: int       # offset of the first payload byte in the stream
    family_version: int
    version: int = FORMAT_VERSION
    repeats: Repeats | None = None   # version 9's row-repeat section, where the stream has one
    filter: Filter | None = None     # version 10's row-filter section, where the stream has one

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def n_chunks(self) -> int:
        return len(self.kinds)

    @property
    def checksum(self) -> bool:
        return bool(self.flags & FLAG_CHECKSUM)

    def chunk_len(self, i: int) -> int:
        return min(self.chunk_size, self.numel - i * self.chunk_size)

    def chunk_span(self, i: int) -> tuple[int, int]:
        """Byte range ``[start, end)`` of chunk ``i``'s payload in the stream."""
        start = int(self.ends[i - 1]) if i else 0
        return self.payload_start + start, self.payload_start + int(self.ends[i])


def header_nbytes(ndim: int, n_chunks: int, checksum: bool) -> int:
    """Bytes of the fixed-width head: header, shape and chunk table (and CRCs).  No head the encoder
    writes is longer (a compact one is shorter): encoders code the payloads from this offset and put
    the head right before them (:func:`pack_header`)."""
    return STREAM_HEAD.size + 8 * ndim + 9 * n_chunks + (4 * n_chunks + 4 if checksum else 0)


def _varint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _read_varint(mv, pos: int, what: str, where: str = "compact head's") -> tuple[int, int]:
    """``(value, next offset)`` of the varint at ``pos``; FormatError if it runs past the buffer, is
    longer than 9 bytes (63 bits) or not in its shortest form (the message names ``where`` ``what``)."""
    v = 0
    n = len(mv)
    for shift in range(0, 63, 7):
        if pos >= n:
            raise FormatError(f"stream truncated inside the {where} {what}")
        b = int(mv[pos])
        pos += 1
        v |= (b & 0x7F) << shift
        if b < 0x80:
            if b == 0 and shift:
                raise FormatError(f"{where} {what} is not in its shortest form")
            return v, pos
    raise FormatError(f"{where} {what} is longer than 9 bytes")


def _compact_table(kinds, sizes) -> bytes:
    kinds = [int(k) for k in kinds]
    packed = bytearray(-(-len(kinds) // 4))
    for i, k in enumerate(kinds):
        packed[i >> 2] |= k << (2 * (i & 3))
    return bytes(packed) + b"".join(_varint(int(v)) for k, v in zip(kinds, sizes) if k in (KIND_CODED, KIND_SPARSE))


def pack_header(lay: FloatLayout, shape, chunk_size: int, flags: int, kinds, sizes, crcs=None,
                family_version: int = FAMILY_VERSION, *, compact: bool | None = None,
                version: int | None = None, repeats: bytes = b"", filter: bytes = b"") -> bytes:
    """Header and chunk table for payloads of the given ``sizes``: the compact head (FLAG_COMPACT) where
    there are at most COMPACT_MAX_CHUNKS chunks and it is shorter, else the fixed-width one (never
    longer than :func:`header_nbytes`).  ``compact``: True / False asks for that layout (for tests;
    True only where a compact head can describe the chunks).  ``version``: the format version it names
    (default WRITE_VERSION, what the encoders write; REPEATS_VERSION with ``repeats``, FILTER_VERSION with
    ``filter``).  ``repeats``: a row-repeat section (:func:`pack_repeats`), put after the chunk table with
    FLAG_REPEATS; ``filter``: a row-filter section (:func:`pack_filter`), after it with FLAG_FILTER."""
    if version is None:
        version = FILTER_VERSION if filter else REPEATS_VERSION if repeats else WRITE_VERSION
    if repeats and not row_repeats(version):
        raise ValueError(f"a version-{version} stream has no row-repeat section")
    if filter and not row_filters(version):
        raise ValueError(f"a version-{version} stream has no row-filter section")
    shape = tuple(int(s) for s in shape)
    flags = ((flags & ~(FLAG_COMPACT | FLAG_REPEATS | FLAG_FILTER)) | (FLAG_REPEATS if repeats else 0)
             | (FLAG_FILTER if filter else 0))
    n_chunks = len(kinds)
    parts = None
    if n_chunks <= COMPACT_MAX_CHUNKS and compact is not False:
        short = [MAGIC + bytes([version, lay.code, flags | FLAG_COMPACT, len(shape)]),
                 _varint(chunk_size), b"".join(_varint(d) for d in shape), _compact_table(kinds, sizes)]
        if compact or sum(map(len, short)) < header_nbytes(len(shape), n_chunks, False):
            parts = short
    if parts is None:
        parts = [STREAM_HEAD.pack(magic=MAGIC, version=version, dtype=lay.code, flags=flags, ndim=len(shape),
                                  chunk_size=chunk_size, family=family_version, reserved=0),
                 struct.pack(f"<{len(shape)}Q", *shape),
                 np.asarray(kinds, dtype=np.uint8).tobytes(),
                 np.cumsum(np.asarray(sizes, dtype=np.int64), dtype=np.int64).astype("<u8").tobytes()]
    parts += [repeats, filter]
    if flags & FLAG_CHECKSUM:
        parts.append(np.asarray(crcs, dtype="<u4").tobytes())
        head = b"".join(parts)
        return head + struct.pack("<I", crc32c(head))
    return b"".join(parts)


def _is_compact(mv) -> bool:
    return len(mv) >= COMPACT_FIXED and mv[4] >= 4 and bool(mv[6] & FLAG_COMPACT)


def _compact_bound(ndim: int, checksum: bool) -> int:
    """The longest compact head of ``ndim`` dimensions: varints of a chunk size (<= 2^20: 3 bytes), of
    dimensions (< 2^63: 9 bytes) and of payload sizes (< 2^28: 4 bytes)."""
    n = COMPACT_MAX_CHUNKS
    return COMPACT_FIXED + 3 + 9 * ndim + -(-n // 4) + 4 * n + (4 * n + 4 if checksum else 0)


def header_extent(prefix) -> int:
    """Bytes of header, shape and chunk table (CRCs included) of the stream whose first bytes are
    ``prefix`` (at least ``16 + 8 * MAX_NDIM`` of them, or the whole stream): how much of a stream kept
    elsewhere (on a GPU) :func:`parse_header` needs to see (at most that many more than ``prefix``
    when the prefix ends inside a compact head: then ask again with them).  Nothing is validated here;
    a value that makes no sense comes back small, and ``parse_header`` then says what is wrong."""
    mv = memoryview(prefix).cast("B")
    if _is_compact(mv):
        ndim = min(mv[7], MAX_NDIM)
        try:
            pos = _parse_compact(mv, len(mv) + (1 << 62))[5]
        except FormatError:
            if mv[6] & (FLAG_REPEATS | FLAG_FILTER):       # a section's size may lie beyond the prefix
                return len(mv) + 64
            return max(len(mv), min(_compact_bound(ndim, bool(mv[6] & FLAG_CHECKSUM)), len(mv) + 64))
        return pos
    if len(mv) < STREAM_HEAD.size:
        return STREAM_HEAD.size
    sh = STREAM_HEAD.unpack_from(mv, 0)
    flags, ndim, chunk_size = sh.flags, sh.ndim, sh.chunk_size
    if ndim > MAX_NDIM or len(mv) < STREAM_HEAD.size + 8 * ndim or not 1 <= chunk_size <= MAX_CHUNK_SIZE:
        return min(len(mv), STREAM_HEAD.size + 8 * min(ndim, MAX_NDIM))
    numel = math.prod(struct.unpack_from(f"<{ndim}Q", mv, STREAM_HEAD.size))
    if numel > MAX_NUMEL:
        return STREAM_HEAD.size + 8 * ndim
    n_chunks = -(-numel // chunk_size)
    extent = header_nbytes(ndim, n_chunks, bool(flags & FLAG_CHECKSUM))
    at = header_nbytes(ndim, n_chunks, False)
    for flag in (FLAG_REPEATS, FLAG_FILTER):   # the sections after the chunk table, each led by its size
        if flags & flag:
            try:
                nbytes, body = _read_varint(mv, at, "size", "section's")
            except FormatError:
                return max(len(mv), min(at + 9, extent + 9))
            extent += body - at + nbytes
            at = body + nbytes
    return extent


def _check_shape(chunk_size: int, shape) -> int:
    """The number of chunks of a head's chunk size and shape, checked."""
    if not 1 <= chunk_size <= MAX_CHUNK_SIZE:
        raise FormatError(f"chunk size {chunk_size} outside [1, {MAX_CHUNK_SIZE}]")
    if any(d >= 1 << 63 for d in shape):                 # no array library can hold such a dimension
        raise FormatError(f"shape {tuple(shape)} has a dimension of 2**63 or more")
    numel = math.prod(shape)
    if numel > MAX_NUMEL:
        raise FormatError(f"shape {tuple(shape)} has {numel} elements, more than {MAX_NUMEL}")
    return -(-numel // chunk_size)


def _read_crcs(mv, pos: int, n_chunks: int):
    """``(chunk CRCs, offset after the header CRC)`` at ``pos`` (the caller checked the length); the
    header CRC covers every byte before it."""
    crcs = np.frombuffer(mv, dtype="<u4", count=n_chunks, offset=pos).copy()
    pos += 4 * n_chunks
    (stored,) = struct.unpack_from("<I", mv, pos)
    if crc32c(mv[:pos]) != stored:
        raise FormatError("header checksum mismatch: header or chunk table corrupted")
    return crcs, pos + 4


def _parse_compact(mv, size: int):
    """The compact head's ``(chunk_size, shape, kinds, ends, crcs, payload offset, repeats, filter)`` (ends unchecked
    against the stream's ``size`` but for the CRCs' position); raises :class:`FormatError`."""
    ndim = mv[7]
    if ndim > MAX_NDIM:
        raise FormatError(f"ndim {ndim} exceeds {MAX_NDIM}")
    chunk_size, pos = _read_varint(mv, COMPACT_FIXED, "chunk size")
    shape = []
    for _ in range(ndim):
        d, pos = _read_varint(mv, pos, "shape")
        shape.append(d)
    n_chunks = _check_shape(chunk_size, shape)
    if n_chunks > COMPACT_MAX_CHUNKS:
        raise FormatError(f"compact head describes {n_chunks} chunks, at most {COMPACT_MAX_CHUNKS} allowed")
    nk = -(-n_chunks // 4)
    if len(mv) < pos + nk:
        raise FormatError("stream truncated inside the compact head's kinds")
    bits = int.from_bytes(mv[pos:pos + nk], "little")
    pos += nk
    kinds = [(bits >> (2 * i)) & 3 for i in range(n_chunks)]
    if bits >> (2 * n_chunks):
        raise FormatError("compact head's kinds byte has padding bits set")
    for i, k in enumerate(kinds):
        if k > max_kind(mv[4]):
            raise FormatError(f"chunk {i} has unknown kind {k}")
    lay = layout_by_code(mv[5])
    if lay is None:
        raise FormatError(f"unknown dtype code {mv[5]}")
    numel = math.prod(shape)
    ends, end = [], 0
    for i, k in enumerate(kinds):
        if k in (KIND_CODED, KIND_SPARSE):
            v, pos = _read_varint(mv, pos, "payload sizes")
            if v > size:
                raise FormatError("chunk table points past the end of the stream")
        else:
            v = lay.itemsize * (min(chunk_size, numel - i * chunk_size) if k == KIND_RAW else 1)
        end += v
        ends.append(end)
    repeats = filt = None
    if mv[6] & FLAG_REPEATS:
        repeats, pos = parse_repeats(mv, pos, numel)
    if mv[6] & FLAG_FILTER:
        filt, pos = parse_filter(mv, pos, n_chunks, chunk_size)
    crcs = None
    if mv[6] & FLAG_CHECKSUM:
        if len(mv) < pos + 4 * n_chunks + 4:
            raise FormatError(f"stream truncated: the compact head's checksums need {4 * n_chunks + 4} bytes, "
                              f"{len(mv) - pos} left")
        crcs, pos = _read_crcs(mv, pos, n_chunks)
    return (chunk_size, tuple(shape), np.array(kinds, np.uint8), np.array(ends, np.int64), crcs, pos, repeats,
            filt)


def parse_header(buf, length: int | None = None) -> Header:
    """Parse and validate everything but the payload contents; raises :class:`FormatError`.

    After this returns, every table entry is consistent with the buffer's length, so the
    output (``prod(shape)`` values) is what a valid stream of this size can describe.
    ``length``: the stream's length when ``buf`` holds only its first bytes (at least
    :func:`header_extent` of them, as for a stream on a GPU); payload checks then use it.
    """
    mv = memoryview(buf).cast("B")
    size = len(mv) if length is None else int(length)
    if length is not None and len(mv) < min(size, header_extent(mv)):
        raise ValueError(f"parse_header needs the first {header_extent(mv)} bytes, got {len(mv)}")
    least = COMPACT_FIXED if _is_compact(mv) else STREAM_HEAD.size
    if len(mv) < least:
        raise FormatError(f"stream too short for a header ({len(mv)} < {least} bytes)")
    magic, version, code, flags = bytes(mv[:4]), mv[4], mv[5], mv[6]
    if magic != MAGIC:
        raise FormatError(f"not a zipccl stream (magic {magic!r}, expected {MAGIC!r})")
    if version not in READ_VERSIONS:
        raise FormatError(f"unsupported format version {version} (this build reads "
                          f"{', '.join(map(str, READ_VERSIONS))})")
    lay = layout_by_code(code)
    if lay is None:
        raise FormatError(f"unknown dtype code {code}")
    known = (FLAG_CHECKSUM | FLAG_TORCH | (FLAG_COMPACT if version >= 4 else 0)
             | (FLAG_REPEATS if row_repeats(version) else 0) | (FLAG_FILTER if row_filters(version) else 0))
    if flags & ~known:
        raise FormatError(f"unknown flags {flags:#x} in a version-{version} stream")
    fam = FAMILY_OF_VERSION[version]
    if flags & FLAG_COMPACT:
        chunk_size, shape, kinds, ends, crcs, pos, repeats, filt = _parse_compact(mv, size)
        # the compact table's ends are running sums of sizes >= 0 (increasing by construction; the
        # largest is the last): checked below with plain integers (a small stream's parse is mostly
        # such checks on tiny arrays)
        n_chunks = len(kinds)
        highest = total = int(ends[-1]) if n_chunks else 0
    else:
        _, _, _, _, ndim, chunk_size, fam_field, reserved = STREAM_HEAD.unpack_from(mv, 0)
        if reserved:
            raise FormatError(f"reserved field {reserved} is not 0")
        if fam_field != fam:
            raise FormatError(f"codebook family version {fam_field} is not format version {version}'s ({fam})")
        if ndim > MAX_NDIM:
            raise FormatError(f"ndim {ndim} exceeds {MAX_NDIM}")
        if not 1 <= chunk_size <= MAX_CHUNK_SIZE:
            raise FormatError(f"chunk size {chunk_size} outside [1, {MAX_CHUNK_SIZE}]")
        pos = STREAM_HEAD.size
        if len(mv) < pos + 8 * ndim:
            raise FormatError("stream truncated inside the shape")
        shape = struct.unpack_from(f"<{ndim}Q", mv, pos)
        pos += 8 * ndim
        n_chunks = _check_shape(chunk_size, shape)
        checksum = bool(flags & FLAG_CHECKSUM)
        table = n_chunks * (13 if checksum else 9) + (4 if checksum else 0)
        if len(mv) - pos < table:
            raise FormatError(f"stream truncated: chunk table of {n_chunks} chunks needs {table} bytes, "
                              f"{len(mv) - pos} left")
        # copies, not views: the header must not change if the caller's buffer does (decoding into an
        # ``out`` that overlaps the stream would otherwise rewrite the chunk table under the decoder)
        kinds = np.frombuffer(mv, dtype=np.uint8, count=n_chunks, offset=pos).copy()
        pos += n_chunks
        ends_u = np.frombuffer(mv, dtype="<u8", count=n_chunks, offset=pos)
        pos += 8 * n_chunks
        repeats = filt = None
        if flags & FLAG_REPEATS:
            repeats, pos = parse_repeats(mv, pos, math.prod(shape))
        if flags & FLAG_FILTER:
            filt, pos = parse_filter(mv, pos, n_chunks, chunk_size)
        if flags & (FLAG_REPEATS | FLAG_FILTER):
            if checksum and len(mv) - pos < 4 * n_chunks + 4:
                raise FormatError(f"stream truncated: the checksums need {4 * n_chunks + 4} bytes, "
                                  f"{len(mv) - pos} left")
        crcs = None
        if checksum:
            crcs, pos = _read_crcs(mv, pos, n_chunks)
        highest = int(ends_u.max()) if n_chunks else 0
    if highest > size - pos:
        raise FormatError("chunk table points past the end of the stream")
    if not flags & FLAG_COMPACT:
        ends = ends_u.astype(np.int64)
        sizes = ends.copy()
        sizes[1:] -= ends[:-1]
        if n_chunks and int(sizes.min()) < 0:
            raise FormatError("chunk table offsets are not increasing")
        total = int(ends[-1]) if n_chunks else 0
    if pos + total != size:
        raise FormatError(f"stream length {size} does not match the chunk table ({pos + total} bytes)")
    h = Header(lay, tuple(shape), chunk_size, flags, kinds, ends, crcs, pos, fam, version, repeats, filt)
    if not flags & FLAG_COMPACT:               # (a compact head's RAW and CONST sizes follow from the kinds)
        raw, const = kinds == KIND_RAW, kinds == KIND_CONST
        if raw.any():
            lengths = np.minimum(chunk_size, h.numel - chunk_size * np.arange(n_chunks, dtype=np.int64))
            bad = np.flatnonzero(raw & (sizes != lengths * lay.itemsize))
            if len(bad):
                raise FormatError(f"chunk {int(bad[0])} (raw) has a payload of {int(sizes[bad[0]])} bytes")
        bad = np.flatnonzero(const & (sizes != lay.itemsize))
        if len(bad):
            raise FormatError(f"chunk {int(bad[0])} (const) has a payload of {int(sizes[bad[0]])} bytes")
        if n_chunks and int(kinds.max()) > max_kind(version):
            i = int(np.argmax(kinds > max_kind(version)))
            raise FormatError(f"chunk {i} has unknown kind {int(kinds[i])}")
    return h


def verify_chunk_crcs(h: Header, buf, chunks) -> None:
    if not h.checksum:
        return
    mv = memoryview(buf).cast("B")
    for i in chunks:
        a, b = h.chunk_span(i)
        if crc32c(mv[a:b]) != int(h.crcs[i]):
            raise FormatError(f"chunk {i}: checksum mismatch (payload corrupted)")


def chunk_head_extent(h: Header, i):
    """The most bytes of coded chunk ``i``'s payload that :func:`parse_chunk_head` reads (``i``: an
    index or an array of them)."""
    i = np.asarray(i, dtype=np.int64)
    size = h.ends[i] - np.where(i > 0, h.ends[np.maximum(i - 1, 0)], 0)
    n = np.minimum(h.chunk_size, h.numel - i * h.chunk_size)
    table = EXPLICIT_MAX_BYTES if explicit_tables(h.version) else 0
    extent = np.minimum(size, CHUNK_HEAD.size + table + (-(-n // (1 << min(ZERO_BLOCK_MODES))) + 7) // 8)
    return int(extent) if extent.ndim == 0 else extent


def parse_chunk_head(h: Header, buf, i: int, prefix=None) -> ChunkHead:
    """The validated header of coded chunk ``i`` (raises the :data:`CHUNK_FAULTS` error of the first
    check it fails).  ``prefix``: the first :func:`chunk_head_extent` bytes of its payload, when the
    stream itself is elsewhere (on a GPU); offsets stay the stream's.  :func:`parse_chunk_heads` is its
    vectorised twin: the same checks in the same order, one message table."""
    a, b = h.chunk_span(i)
    n = h.chunk_len(i)
    if b - a < CHUNK_HEAD.size:
        raise chunk_fault(i, FAULT_SHORT, size=b - a)
    if prefix is None:
        mv, shift_at = memoryview(buf).cast("B"), 0
    else:
        mv, shift_at = memoryview(prefix).cast("B"), a
        if len(mv) < chunk_head_extent(h, i):
            raise ValueError(f"chunk {i}: prefix of {len(mv)} bytes, {chunk_head_extent(h, i)} needed")
    hd = CHUNK_HEAD.unpack_from(mv, a - shift_at)
    cb, ref, shift, mode, n_sm, n_esc, n_words = hd.codebook, hd.ref, hd.shift, hd.mode, hd.n_sm, hd.n_esc, hd.n_words
    if not head_mode_ok(h.version, mode, hd.sign, hd.narrow):
        raise chunk_fault(i, FAULT_MODE, mode=mode, sign=hd.sign, narrow=hd.narrow)
    if shift + hd.narrow > h.layout.man_bits - 1:
        raise chunk_fault(i, FAULT_SHIFT, shift=shift, narrow=hd.narrow, low=h.layout.man_bits - 1)
    explicit = cb == CB_EXPLICIT and explicit_tables(h.version)
    if cb >= n_codebooks(h.family_version) and not explicit:
        raise chunk_fault(i, FAULT_CODEBOOK, codebook=cb, family=h.family_version,
                          last=n_codebooks(h.family_version) - 1)
    pos = a + CHUNK_HEAD.size
    table, layout = None, 0
    if explicit:
        table, pos, layout = parse_explicit_table(mv, pos - shift_at, min(b - shift_at, len(mv)), ref,
                                                  h.layout, i, h.version)
        pos += shift_at
        k, s = layout_parts(layout)
        if s and hd.sign != SIGN_POSITIVE:
            raise chunk_fault(i, FAULT_TABLE, what=f"the sign is in the symbols but the sign mode is {hd.sign}, "
                                                   f"not {SIGN_POSITIVE}")
        if shift + hd.narrow > h.layout.man_bits - 1 - k:
            raise chunk_fault(i, FAULT_SHIFT, shift=shift, narrow=hd.narrow, low=h.layout.man_bits - 1 - k)
    zero_blocks, n_coded = None, n
    if mode:
        nb = -(-n // (1 << mode))
        if b - pos < (nb + 7) // 8:
            raise chunk_fault(i, FAULT_BITMAP)
        bits = np.unpackbits(np.frombuffer(mv, np.uint8, (nb + 7) // 8, pos - shift_at), count=nb,
                             bitorder="little")
        zero_blocks = bits.astype(bool)
        pos += (nb + 7) // 8
        n_coded = int(np.repeat(~zero_blocks, 1 << mode)[:n].sum())
        if n_coded == 0:
            raise chunk_fault(i, FAULT_EMPTY)
    if n_sm > n_coded or n_esc > n_sm or n_words > n_coded:
        raise chunk_fault(i, FAULT_COUNTS, n_sm=n_sm, n_esc=n_esc, n_words=n_words, n_coded=n_coded)
    width = plane_width(h.layout.man_bits - layout_parts(layout)[0], shift, hd.sign, hd.narrow)
    tail = 4 * lanes(n_coded) + 2 * n_words + packed_nbytes(n_sm, width) + 2 * n_esc
    if pos + tail != b:
        raise chunk_fault(i, FAULT_SIZE, size=b - a, implied=pos + tail - a)
    return ChunkHead(cb, ref, shift, mode, hd.sign, hd.narrow, n_sm, n_esc, n_words, n_coded, zero_blocks, pos,
                     pos + 4 * lanes(n_coded), table, layout)


def parse_chunk_heads(h: Header, ids, prefixes: np.ndarray, at: np.ndarray) -> dict:
    """:func:`parse_chunk_head` of many coded chunks at once, for decoders that launch thousands of
    chunks (the GPU backends): the same checks in the same order, and the same :class:`FormatError`
    for the first bad chunk.  ``prefixes``: uint8, chunk ``ids[j]``'s first :func:`chunk_head_extent`
    bytes at ``at[j]``.  Returns arrays (one entry per chunk) named like :class:`ChunkHead`'s fields,
    ``zero_blocks`` a list (None for plain chunks)."""
    ids = np.asarray(ids, dtype=np.int64)
    at = np.asarray(at, dtype=np.int64)
    m = len(ids)
    prev = np.where(ids > 0, h.ends[np.maximum(ids - 1, 0)], 0)
    a = h.payload_start + prev
    b = h.payload_start + h.ends[ids]
    n = np.minimum(h.chunk_size, h.numel - ids * h.chunk_size)
    fault = np.zeros(m, dtype=np.int64)           # the first failed check of each chunk (0: none yet)

    def fail(mask, code):
        fault[mask & (fault == 0)] = code

    fail(b - a < CHUNK_HEAD.size, FAULT_SHORT)
    ok = fault == 0
    rows = np.zeros(m, dtype=CHUNK_HEAD.dtype)
    if ok.any():
        idx = at[ok][:, None] + np.arange(CHUNK_HEAD.size)
        rows[ok] = prefixes[idx].reshape(-1).view(CHUNK_HEAD.dtype)
    mode = rows["mode"].astype(np.int64)
    shift = rows["shift"].astype(np.int64)
    narrow = rows["narrow"].astype(np.int64)
    sign = rows["sign"].astype(np.int64)
    codebook = rows["codebook"].astype(np.int64)
    sign_ok = np.isin(sign, sign_modes(h.version))
    fail(ok & (((mode != 0) & ~np.isin(mode, zero_block_modes(h.version))) | ~sign_ok
               | ((narrow != 0) & (sign == SIGN_STORED))),
         FAULT_MODE)
    fail(ok & (shift + narrow > h.layout.man_bits - 1), FAULT_SHIFT)
    explicit = (codebook == CB_EXPLICIT) & explicit_tables(h.version)
    fail(ok & (codebook >= n_codebooks(h.family_version)) & ~explicit, FAULT_CODEBOOK)
    pos = a + CHUNK_HEAD.size
    tables = [None] * m
    table_errors = {}
    for j in np.flatnonzero((fault == 0) & explicit):
        extent = min(int(b[j] - a[j]), chunk_head_extent(h, int(ids[j])))
        try:
            tables[j], end, layout = parse_explicit_table(prefixes, int(at[j]) + CHUNK_HEAD.size, int(at[j]) + extent,
                                                          int(rows["ref"][j]), h.layout, int(ids[j]), h.version)
        except FormatError as e:
            fault[j] = FAULT_TABLE
            table_errors[j] = e
            continue
        if layout:           # the head's other checks first: a forged chunk gets its FormatError
            parse_chunk_head(h, None, int(ids[j]), prefix=prefixes[int(at[j]):int(at[j]) + chunk_head_extent(h, int(ids[j]))])
            raise NotImplementedError(f"chunk {int(ids[j])}: symbol layout {layout} (format 8, a draft) is decoded "
                                      "by the reference and numba backends only")
        pos[j] += end - int(at[j]) - CHUNK_HEAD.size
    n_coded = n.copy()
    zero_blocks = [None] * m
    for j in np.flatnonzero((fault == 0) & (mode != 0)):
        nb = -(-int(n[j]) // (1 << int(mode[j])))
        if b[j] - pos[j] < (nb + 7) // 8:
            fault[j] = FAULT_BITMAP
            continue
        start = at[j] + (pos[j] - a[j])
        bits = np.unpackbits(prefixes[start:start + (nb + 7) // 8], count=nb, bitorder="little").astype(bool)
        zero_blocks[j] = bits
        pos[j] += (nb + 7) // 8
        n_coded[j] = int(np.repeat(~bits, 1 << int(mode[j]))[:int(n[j])].sum())
        if n_coded[j] == 0:
            fault[j] = FAULT_EMPTY
    n_sm, n_esc, n_words = (rows[k].astype(np.int64) for k in ("n_sm", "n_esc", "n_words"))
    fail((n_sm > n_coded) | (n_esc > n_sm) | (n_words > n_coded), FAULT_COUNTS)
    k = np.array([lanes(int(v)) for v in n_coded], dtype=np.int64) if m else np.zeros(0, np.int64)
    width = plane_width(h.layout.man_bits, shift, sign, narrow)
    tail = 4 * k + 2 * n_words + packed_nbytes(n_sm, width) + 2 * n_esc
    fail(pos + tail != b, FAULT_SIZE)
    bad = np.flatnonzero(fault)
    if len(bad):
        j = bad[np.argmin(ids[bad])]
        if j in table_errors:
            raise table_errors[j]
        raise chunk_fault(int(ids[j]), int(fault[j]), size=int(b[j] - a[j]), mode=int(mode[j]),
                          narrow=int(narrow[j]), sign=int(sign[j]), shift=int(shift[j]), low=h.layout.man_bits - 1,
                          codebook=int(codebook[j]), family=h.family_version,
                          last=n_codebooks(h.family_version) - 1,
                          n_sm=int(n_sm[j]), n_esc=int(n_esc[j]), n_words=int(n_words[j]),
                          n_coded=int(n_coded[j]), implied=int(pos[j] + tail[j] - a[j]))
    return {"codebook": codebook, "ref": rows["ref"].astype(np.int64), "shift": shift,
            "mode": mode, "sign": sign, "narrow": narrow, "n_sm": n_sm, "n_esc": n_esc, "n_words": n_words, "n_coded": n_coded,
            "zero_blocks": zero_blocks, "states": pos, "words": pos + 4 * k, "lanes": k, "tables": tables}
