"""16-lane SIMD steps of the rANS coder, written as LLVM vector IR inside numba.

Numba's auto-vectoriser does not vectorise an interleaved rANS round: the lanes share one word
stream, so each lane's refill position depends on the lanes before it.  These intrinsics
write a round for 16 lanes directly as LLVM vector operations with target-independent
intrinsics (``llvm.masked.gather``, ``llvm.masked.expandload``, ``llvm.masked.compressstore``,
``llvm.ctpop``): on AVX-512 they become ``vpgatherdd``/``vpexpandw``/``vpcompressw``, on other
CPUs LLVM lowers them to scalar sequences with the same results.  A round touches the shared
stream as one masked expand (decode: the lanes that refill take the next words in lane order)
or one masked compress (encode: the lanes that flush store their low words in lane order).

Callers (``codec._numba``) guarantee every access is in bounds before calling: 16 table
slots always exist (the index is masked), the stream has 16 words left, the output has room.
Each intrinsic's docstring is the scalar loop it computes; the tests check the bytes against
the NumPy reference (tests/test_simd.py).

Numba's on-disk cache is keyed on a hash of the file that holds the jitted function
(``codec/_numba.py``), not of this one: ``codec._numba`` records a hash of this file (and of the
other modules compiled into the kernels) in the cache directory and drops its stale index files
when it changes (``codec._numba.drop_stale_cache``).
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .codebook import PROB_BITS, SYM_ESC, SYM_WINDOW0, SYM_ZERO, TOTAL, WINDOW, WINDOW_LOW
from .format import RANS_L

LANES = 16
_I1, _I8, _I16, _I32, _I64 = (ir.IntType(b) for b in (1, 8, 16, 32, 64))
_RENORM_SHIFT = 16 + 16 - PROB_BITS


def _vec(t):
    return ir.VectorType(t, LANES)


def _splat(t, v, n=LANES):
    return ir.Constant(ir.VectorType(t, n), [ir.Constant(t, v)] * n)


def _const_vec(t, values):
    return ir.Constant(ir.VectorType(t, len(values)), [ir.Constant(t, v) for v in values])


def _broadcast(builder, t, scalar, n=LANES):
    vt = ir.VectorType(t, n)
    v = builder.insert_element(ir.Constant(vt, None), scalar, ir.Constant(_I32, 0))
    return builder.shuffle_vector(v, ir.Constant(vt, None), _splat(_I32, 0, n))


def _branch(builder, cond, then, otherwise, likely=None):
    """The value of ``then()`` or of ``otherwise()`` (each builds its branch's code and returns an IR value,
    or a tuple of them, of the same types on both sides) as ``cond`` says: a phi after both (a tuple of
    phis for a tuple)."""
    with builder.if_else(cond, likely=likely) as (yes, no):
        with yes:
            a = then()
            block_a = builder.block
        with no:
            b = otherwise()
            block_b = builder.block
    many = isinstance(a, tuple)
    phis = []
    for va, vb in zip(a if many else (a,), b if many else (b,)):
        phi = builder.phi(va.type)
        phi.add_incoming(va, block_a)
        phi.add_incoming(vb, block_b)
        phis.append(phi)
    return tuple(phis) if many else phis[0]


# The features that choose a kernel variant, of the CPUs tests/isa.sh and the benchmarks name in
# NUMBA_CPU_NAME with NUMBA_CPU_FEATURES="" (LLVM then takes the named CPU's features, which llvmlite
# cannot list).  Another name gets the variants that need nothing (correct on any CPU).
_NAMED_FEATURES = {
    "x86-64": "+sse2",
    "haswell": "+sse2,+ssse3,+avx,+avx2",
    "skylake-avx512": "+sse2,+ssse3,+avx,+avx2,+avx512f,+avx512bw",
    "icelake-server": "+sse2,+ssse3,+avx,+avx2,+avx512f,+avx512bw,+avx512vbmi,+avx512vbmi2",
    "znver4": "+sse2,+ssse3,+avx,+avx2,+avx512f,+avx512bw,+avx512vbmi,+avx512vbmi2",
}


def _target_features() -> str:
    """The CPU features numba compiles the kernels for: ``NUMBA_CPU_FEATURES`` when set (tests/isa.sh sets
    it, with ``NUMBA_CPU_NAME``, to compile for another CPU; empty: the named CPU's, as far as
    _NAMED_FEATURES knows them), else the host's."""
    from numba.core import config

    if config.CPU_FEATURES is not None:
        if config.CPU_FEATURES == "" and config.CPU_NAME:
            return _NAMED_FEATURES.get(config.CPU_NAME, "")
        return config.CPU_FEATURES
    import llvmlite.binding as ll

    return ll.get_host_cpu_features().flatten()


def usable_variants(options) -> list:
    """The names of ``options`` ((name, CPU feature it needs, "!feature" it must lack, or None), ... in
    order of preference) the compile target can run."""
    feats = _target_features().split(",")
    return [name for name, need in options
            if need is None or (need[1:] not in feats if need[0] == "!" else need in feats)]


def default_variant(usable: list, prefer=None) -> str:
    """The variant a knob takes unless forced: ``prefer`` (a per-CPU choice, see
    :func:`gathers_preferred`) where the target can run it, else the first usable one."""
    return prefer if prefer in usable else usable[0]


def other_variant(usable: list, chosen: str):
    """The variant tests/isa.sh runs beside the chosen one: the last usable other one, or None."""
    others = [v for v in usable if v != chosen]
    return others[-1] if others else None


def _variant(env: str, options, prefer=None) -> str:
    """A kernel variant: :func:`default_variant`; or the one the environment variable ``env``
    forces (tests and benchmarks: give that run a NUMBA_CACHE_DIR of its own, since numba's cache
    key does not see this choice)."""
    import os

    usable = usable_variants(options)
    forced = os.environ.get(env)
    if forced is None:
        return default_variant(usable, prefer)
    if forced not in usable:
        raise ValueError(f"{env}={forced!r}: this compile target takes one of {', '.join(usable)}")
    return forced


def gathers_preferred(vendor: str, gds_status) -> bool:
    """Whether the table lookups should take vpgatherdd rather than permutes on a CPU of ``vendor``
    (/proc/cpuinfo's vendor_id) whose kernel reports ``gds_status`` (the contents of
    /sys/devices/system/cpu/vulnerabilities/gather_data_sampling, None where absent).

    Measured (bench/results/lookups_*.md, ``python -m bench.variants --knob lookups``): on an Intel
    Xeon with AVX-512 VBMI that the GDS ("Downfall") flaw does not affect, decoding through gathers
    runs bf16/fp16 1.39x/1.45x faster than through permutes (Intel runs every cross-lane permute on
    one port), encoding the same; on AMD Zen 5 the gathers are 1.4-1.9x slower (a 16-lane vpgatherdd
    costs ~14 cycles).  Intel's microcode mitigation of GDS makes gathers several times slower, so
    an Intel part takes them only where the kernel says the flaw is absent or left unmitigated;
    anything unknown (other vendors, no report, a hypervisor-dependent one) keeps the permutes."""
    if vendor != "GenuineIntel" or not gds_status:
        return False
    gds = gds_status.strip()
    return gds == "Not affected" or gds.startswith("Vulnerable")


def _host_gathers_preferred() -> bool:
    """:func:`gathers_preferred` for this host; False when compiling for another CPU (NUMBA_CPU_NAME
    or NUMBA_CPU_FEATURES set: the target's features alone decide)."""
    from numba.core import config

    if config.CPU_FEATURES is not None or config.CPU_NAME:
        return False
    vendor, gds = "", None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    vendor = line.split(":", 1)[1].strip()
                    break
        with open("/sys/devices/system/cpu/vulnerabilities/gather_data_sampling") as f:
            gds = f.read()
    except OSError:
        pass
    return gathers_preferred(vendor, gds)


# How the encoder's round stores the flushed words to the shared stream.  "memory": the masked
# compress-store intrinsic (vpcompressw with a memory operand on AVX-512, a scalar sequence elsewhere).
# "register" (AVX-512 VBMI2 targets): the register form of vpcompressw, then a masked store of the
# first popcount lanes -- vpcompressw to memory is microcoded on AMD Zen 4 (measured: the encoder at
# 0.6x).  The same bytes either way; tests/isa.sh compiles both on such a host.
# "shuffle" (targets with AVX2 but without VBMI2, e.g. Haswell..Zen 3 or Skylake-X AVX-512): there is no
# 16-bit expand/compress, and LLVM's lowering of the generic intrinsics is a branch per lane (measured:
# an AVX2 build decoding at 0.36x ZipNN); each 8-word half is moved by pshufb with a control from a
# 256-entry table instead, and 32-bit lanes (the residuals of chunks with ZERO symbols) by vpermd.
STREAM_MOVE_FORMS = (("register", "+avx512vbmi2"), ("shuffle", "+avx2"), ("memory", None))
STREAM_MOVES = _variant("ZIPCCL_STREAM_MOVES", STREAM_MOVE_FORMS)

# How the rounds look up small per-chunk tables (symbol of a value, a symbol's frequency and
# reciprocal, the decoder's slot table).  "gather": the hardware gathers (vpgatherdd: on AVX-512 from
# the generic llvm.masked.gather, on AVX2 from the x86 intrinsic, two 8-lane gathers, since LLVM
# splits the generic one into scalar loads for CPUs it models as slow gatherers).  "loads" (targets
# without AVX-512): 16 scalar loads (:func:`_lane_loads`; on Zen 3 no slower than vpgatherdd).
# "permute" (AVX-512 VBMI targets): the tables are held in registers and read with
# vpermi2b/vpermi2d/vpermi2pd -- on AMD Zen 5 a 16-lane vpgatherdd costs 14 cycles of throughput, a
# permute about 1 (measured: bench/results/lookups_*.md, ``python -m bench.variants``).  The symbol
# tables are then indexed by rank among the chunk's used symbols, so a chunk with more than
# RANKED_SYMBOLS of them takes the gathers.  Intel parts with fast gathers take the gathers where
# they can (:func:`gathers_preferred`; on one, decode 1.4x faster than by permutes).  The same bytes
# every way; tests/isa.sh runs the chosen and another one.
TABLE_LOOKUP_FORMS = (("permute", "+avx512vbmi"), ("loads", "!+avx512f"), ("gather", "+avx2"))
TABLE_LOOKUPS = _variant("ZIPCCL_TABLE_LOOKUPS", TABLE_LOOKUP_FORMS,
                         prefer="gather" if _host_gathers_preferred() else None)
PERMUTE = TABLE_LOOKUPS == "permute"


def _encode_lookups() -> str:
    """The encoder's table lookups: permutes wherever the target has them, whichever the decoder takes
    -- the per-CPU preference for gathers is the decoder's (on the Intel Xeon of
    bench/results/lookups_intel-*.md both variants encoded at the same speed, and the permute path's
    prepare pass has since halved: encode_prepare32_window); else the decoder's variant.
    ZIPCCL_TABLE_LOOKUPS forces both; ZIPCCL_ENCODE_LOOKUPS the encoder's alone ("permute" or the
    decoder's variant)."""
    import os

    usable = usable_variants(TABLE_LOOKUP_FORMS)
    forced = os.environ.get("ZIPCCL_ENCODE_LOOKUPS")
    if forced is None:
        return "permute" if "permute" in usable and "ZIPCCL_TABLE_LOOKUPS" not in os.environ else TABLE_LOOKUPS
    if forced not in usable or forced not in ("permute", TABLE_LOOKUPS):
        raise ValueError(f"ZIPCCL_ENCODE_LOOKUPS={forced!r}: the encoder takes permutes (where the target has "
                         f"them) or the decoder's lookups ({TABLE_LOOKUPS})")
    return forced


ENCODE_LOOKUPS = _encode_lookups()
ENCODE_PERMUTE = ENCODE_LOOKUPS == "permute"
_FEATURES = _target_features().split(",")
# AVX/AVX2 without AVX-512 (Haswell..Zen 3, Intel client and E-cores): LLVM emits no gathers for the
# generic intrinsic there; _lane_loads or the AVX2 intrinsic do the lookups
_AVX2_ONLY = "+avx512f" not in _FEATURES and "+avx" in _FEATURES
RANKED_SYMBOLS = 32


def _declare(builder, name, ret, args):
    try:
        return builder.module.get_global(name)
    except KeyError:
        return ir.Function(builder.module, ir.FunctionType(ret, args), name=name)


def _data(context, builder, aryty, val):
    """``i8*`` to an array's first element."""
    return builder.bitcast(context.make_array(aryty)(context, builder, val).data, _I8.as_pointer())


def _at(builder, base, byte_offset, elem):
    """Typed pointer ``base + byte_offset`` (bytes)."""
    return builder.bitcast(builder.gep(base, [byte_offset]), elem.as_pointer())


def _gather(builder, base, idx, elem, scale, step=None, paired=False):
    """``base[idx]`` for each lane (``idx``: i32 lanes; ``scale``: element size in bytes) as a masked
    gather from one base pointer and a vector of 32-bit indices, so that x86 uses the base+index
    form (``vpgatherdd``) without 64-bit address arithmetic.  ``step``: the type ``idx`` counts in
    (default ``elem``; ``_I8``: ``elem`` values at byte offsets ``idx``, ``scale`` then 1).
    ``paired``: see :func:`_lane_loads`."""
    t = _vec(elem)
    step = elem if step is None else step
    if _AVX2_ONLY:
        if TABLE_LOOKUPS == "gather" and elem is _I32:
            return _avx2_gather(builder, base, idx, step)
        return _lane_loads(builder, base, idx, elem, step, paired)
    gep = ir.instructions.GEPInstr(builder.block, builder.bitcast(base, step.as_pointer()), [idx], False, "",
                                   source_etype=step)
    gep.type = ir.VectorType(step.as_pointer(), LANES)   # llvmlite types a GEP by its pointer operand; a vector index makes a vector
    builder._insert(gep)
    ptr_t = ir.VectorType(elem.as_pointer(), LANES)
    fn = _declare(builder, f"llvm.masked.gather.v{LANES}i{elem.width}.v{LANES}p0",
                  t, [ptr_t, _I32, _vec(_I1), t])
    ptrs = gep if step is elem else builder.bitcast(gep, ptr_t)
    return builder.call(fn, [ptrs, ir.Constant(_I32, scale), _splat(_I1, 1), ir.Constant(t, None)])


def _avx2_gather(builder, base, idx, step):
    """_gather of 32-bit entries by two 8-lane ``vpgatherdd`` (the AVX2 intrinsic: LLVM would split the
    generic one into scalar loads), at ``base + idx[i] * sizeof(step)``."""
    half = ir.VectorType(_I32, 8)
    fn = _declare(builder, "llvm.x86.avx2.gather.d.d.256", half, [half, _I8.as_pointer(), half, half, _I8])
    p = builder.bitcast(base, _I8.as_pointer())
    scale = ir.Constant(_I8, step.width // 8)
    parts = [builder.call(fn, [ir.Constant(half, None), p,
                               builder.shuffle_vector(idx, idx, _const_vec(_I32, range(h, h + 8))),
                               _splat(_I32, -1, 8), scale]) for h in (0, 8)]
    return builder.shuffle_vector(parts[0], parts[1], _const_vec(_I32, range(LANES)))


def _lane_loads(builder, base, idx, elem, step, paired=False):
    """_gather as 16 scalar loads at ``base + idx[i] * sizeof(step)`` (AVX2 targets).  LLVM does not emit
    vpgatherdd for ``llvm.masked.gather`` on CPUs it models as slow gatherers (AMD Zen, Intel with the
    GDS mitigation) but splits it into 16 loads through a vector of 64-bit addresses; extracting the
    32-bit indices instead and letting each load do its own address arithmetic saves a dozen vector
    operations a gather (measured on Zen 3: encode +3-8 %, decode +5-7 %; vpgatherdd itself was no faster there).
    ``paired`` (32-bit entries): the indices two at a time by 64-bit extracts and the entries two at a
    time by 64-bit inserts, the halves split and joined by scalar shifts: half the vector shuffles
    (vpextrd/vpinsrd each take the shuffle port).  Measured for the decoder's slot table, haswell build
    on Zen 4, alternating A/B: decode bf16 1,792-1,838 -> 2,065-2,074 MB/s, fp16 +13 %, fp32 +5-9 %; for
    the encoder's lookups it measured 1-2 % slower, so they keep one lane at a time."""
    p = builder.bitcast(base, step.as_pointer())
    if paired and elem is _I32:
        # two indices a 64-bit extract and two entries a 64-bit insert: half the vector moves
        pairs = builder.bitcast(idx, ir.VectorType(_I64, LANES // 2))
        v = ir.Constant(ir.VectorType(_I64, LANES // 2), None)
        for i in range(LANES // 2):
            both = builder.extract_element(pairs, ir.Constant(_I32, i))
            got = []
            for j in (builder.and_(both, ir.Constant(_I64, 0xFFFFFFFF)), builder.lshr(both, ir.Constant(_I64, 32))):
                got.append(builder.zext(builder.load(builder.bitcast(builder.gep(p, [j]), elem.as_pointer()), align=1),
                                        _I64))
            v = builder.insert_element(v, builder.or_(got[0], builder.shl(got[1], ir.Constant(_I64, 32))),
                                       ir.Constant(_I32, i))
        return builder.bitcast(v, _vec(_I32))
    v = ir.Constant(_vec(elem), None)
    for i in range(LANES):
        j = builder.zext(builder.extract_element(idx, ir.Constant(_I32, i)), _I64)
        e = builder.load(builder.bitcast(builder.gep(p, [j]), elem.as_pointer()), align=1)
        v = builder.insert_element(v, e, ir.Constant(_I32, i))
    return v


def _gather_bytes(builder, base, idx):
    """``base[idx]`` (bytes, zero-extended to i32 lanes) by a dword gather at byte offsets: reads
    ``base[idx .. idx+3]``, which the caller keeps inside the table."""
    return builder.and_(_gather(builder, base, idx, _I32, 1, step=_I8), _splat(_I32, 0xFF))


def _permute2(builder, kind, table, idx):
    """``table[idx]`` per lane from a table of two registers (``vpermi2<kind>``: "qi" 128 bytes,
    "d" 32 dwords, "ps" 32 floats; ``table``: i8* to it; ``idx``: the intrinsic's index vector,
    of which only the low 7/5/4 bits count)."""
    elem, n = {"qi": (_I8, 64), "d": (_I32, 16), "ps": (ir.FloatType(), 16)}[kind]
    vt = ir.VectorType(elem, n)
    it = ir.VectorType(ir.IntType(512 // n), n)
    lo = builder.load(builder.bitcast(table, vt.as_pointer()), align=1)
    hi = builder.load(builder.bitcast(builder.gep(table, [ir.Constant(_I64, 64)]), vt.as_pointer()), align=1)
    fn = _declare(builder, f"llvm.x86.avx512.vpermi2var.{kind}.512", vt, [vt, it, vt])
    return builder.call(fn, [lo, idx, hi])


def _bytes_lookup(builder, table, idx8):
    """``table[idx8 & 127]`` for 16 byte lanes (``table``: i8* to 128 bytes): vpermi2b."""
    wide = builder.shuffle_vector(idx8, ir.Constant(_vec(_I8), None), _const_vec(_I32, list(range(LANES)) * 4))
    return builder.shuffle_vector(_permute2(builder, "qi", table, wide), ir.Constant(ir.VectorType(_I8, 64), None),
                                  _const_vec(_I32, range(LANES)))


ENCODE_RANKS = 2 * 32           # the encoder's ranked tables: chunks of up to 64 used symbols (two rows of 32)


def _ranked_lookup(builder, rk, ftab, inv, s, ranks=32):
    """(``ftab[rank]``, ``inv[rank]``) for symbols ``s`` (i32 lanes), rank = ``rk[s]``; ``rk``: 128 bytes,
    ``ftab``: ``ranks`` u32, ``inv``: ``ranks`` f32 reciprocals (i8* each); ``ranks`` 32, or 64 (each table
    read as two rows of 32, by two permutes and a select).  Permutes on ENCODE_PERMUTE targets, else gathers."""
    if not ENCODE_PERMUTE:
        r = _gather_bytes(builder, rk, s)                      # rk has 128 bytes: symbols < 82
        return _gather(builder, ftab, r, _I32, 4), builder.bitcast(_gather(builder, inv, r, _I32, 4), _vec(ir.FloatType()))
    r = builder.zext(_bytes_lookup(builder, rk, builder.trunc(s, _vec(_I8))), _vec(_I32))
    fc, rc = _permute2(builder, "d", ftab, r), _permute2(builder, "ps", inv, r)
    if ranks > 32:
        upper = builder.icmp_unsigned("!=", builder.and_(r, _splat(_I32, 32)), _splat(_I32, 0))
        fc = builder.select(upper, _permute2(builder, "d", builder.gep(ftab, [ir.Constant(_I64, 128)]), r), fc)
        rc = builder.select(upper, _permute2(builder, "ps", builder.gep(inv, [ir.Constant(_I64, 128)]), r), rc)
    return fc, rc


def _popcount16(builder, mask):
    return builder.zext(builder.ctpop(builder.bitcast(mask, _I16)), _I64)


def _prefix_mask(builder, count):
    """Lanes ``0 .. count-1`` (``count``: i64)."""
    return builder.icmp_unsigned("<", _const_vec(_I32, range(LANES)), _broadcast(builder, _I32, builder.trunc(count, _I32)))


def _byte_table(builder, name, rows):
    """A module-level constant table of 256 byte rows (pshufb controls: 16 bytes; vpermd controls: 8), by name."""
    try:
        return builder.module.get_global(name)
    except KeyError:
        pass
    row_t = ir.ArrayType(_I8, len(rows[0]))
    t = ir.ArrayType(row_t, 256)
    g = ir.GlobalVariable(builder.module, t, name=name)
    g.initializer = ir.Constant(t, [ir.Constant(row_t, [ir.Constant(_I8, b) for b in row]) for row in rows])
    g.global_constant = True
    g.linkage = "internal"
    g.align = 16
    return g


def _expand_controls():
    """pshufb controls placing the first popcount(m) words of 16 bytes in the set lanes of ``m`` (8 lanes):
    computed once, as _EXPAND."""
    rows = []
    for m in range(256):
        row, k = [], 0
        for j in range(8):
            if m >> j & 1:
                row += [2 * k, 2 * k + 1]
                k += 1
            else:
                row += [0x80, 0x80]
        rows.append(row)
    return rows


def _compress_controls():
    """pshufb controls moving the set lanes of ``m`` (8 words), in lane order, to the top lanes:
    computed once, as _COMPRESS."""
    rows = []
    for m in range(256):
        sel = [j for j in range(8) if m >> j & 1]
        row = [0x80] * (16 - 2 * len(sel))
        for j in sel:
            row += [2 * j, 2 * j + 1]
        rows.append(row)
    return rows


_EXPAND = ("zipccl_expand16", _expand_controls())
_COMPRESS = ("zipccl_compress16", _compress_controls())


def _pshufb(builder, v, ctl):
    fn = _declare(builder, "llvm.x86.ssse3.pshuf.b.128", ir.VectorType(_I8, 16), [ir.VectorType(_I8, 16)] * 2)
    return builder.call(fn, [v, ctl])


def _control(builder, table, m8):
    """Row ``m8`` of a control table (_EXPAND or _COMPRESS) of this module."""
    g = _byte_table(builder, *table)
    p = builder.gep(g, [ir.Constant(_I64, 0), m8])
    return builder.load(builder.bitcast(p, ir.VectorType(_I8, 16).as_pointer()), align=16)


def _mask_bytes(builder, mask):
    """(low 8 lanes, high 8 lanes) of a 16-lane mask as i64 bytes."""
    m = builder.zext(builder.bitcast(mask, _I16), _I64)
    return builder.and_(m, ir.Constant(_I64, 0xFF)), builder.lshr(m, ir.Constant(_I64, 8))


def _expand_words(builder, ptr, mask, exact=False):
    """The next ``popcount(mask)`` u16 words at ``ptr`` placed in the ``mask`` lanes, in lane order
    (zero elsewhere).  ``exact``: nothing past them is read; else, with "shuffle" stream moves, up to
    16 words from ``ptr`` are read (the caller keeps them inside the buffer).  One masked expand-load
    in the other variants: measured on Zen 4, a masked load and the register form of vpexpandw decode
    no faster than the memory form."""
    if STREAM_MOVES == "shuffle" and not exact:
        v16 = ir.VectorType(_I8, 16)
        lo8, hi8 = _mask_bytes(builder, mask)
        bp = builder.bitcast(ptr, _I8.as_pointer())
        lo = _pshufb(builder, builder.load(builder.bitcast(bp, v16.as_pointer()), align=1),
                     _control(builder, _EXPAND, lo8))
        n_lo = builder.shl(builder.ctpop(lo8), ir.Constant(_I64, 1))
        hi = _pshufb(builder, builder.load(builder.bitcast(builder.gep(bp, [n_lo]), v16.as_pointer()), align=1),
                     _control(builder, _EXPAND, hi8))
        both = builder.shuffle_vector(lo, hi, _const_vec(_I32, range(32)))
        return builder.bitcast(both, _vec(_I16))
    expand = _declare(builder, f"llvm.masked.expandload.v{LANES}i16", _vec(_I16),
                      [_I16.as_pointer(), _vec(_I1), _vec(_I16)])
    return builder.call(expand, [ptr, mask, ir.Constant(_vec(_I16), None)])


def _compress_words(builder, words, ptr, mask, count):
    """The ``mask`` lanes of ``words`` (u16), in lane order, to ``ptr`` (``count`` = popcount(mask));
    nothing past them is written.  With "shuffle" stream moves up to 8 words below ``ptr`` are
    overwritten too (the encoder's rounds store downwards: later rounds write there)."""
    if STREAM_MOVES == "register":
        compress = _declare(builder, f"llvm.x86.avx512.mask.compress.v{LANES}i16", _vec(_I16),
                            [_vec(_I16), _vec(_I16), _vec(_I1)])
        packed = builder.call(compress, [words, ir.Constant(_vec(_I16), None), mask])
        store = _declare(builder, f"llvm.masked.store.v{LANES}i16.p0", ir.VoidType(),
                         [_vec(_I16), _I16.as_pointer(), _I32, _vec(_I1)])
        builder.call(store, [packed, ptr, ir.Constant(_I32, 2), _prefix_mask(builder, count)])
        return
    if STREAM_MOVES == "shuffle":
        # each half's words moved to its top lanes, stored to end at its place: the high half's words
        # end at ptr + count, the low half's where the high half's begin (over the high store's tail)
        v16 = ir.VectorType(_I8, 16)
        w8 = builder.bitcast(words, ir.VectorType(_I8, 32))
        lo8, hi8 = _mask_bytes(builder, mask)
        bp = builder.bitcast(ptr, _I8.as_pointer())
        end = builder.shl(count, ir.Constant(_I64, 1))
        for half, m8, shift in ((range(16, 32), hi8, None), (range(16), lo8, hi8)):
            if shift is not None:
                end = builder.sub(end, builder.shl(builder.ctpop(shift), ir.Constant(_I64, 1)))
            part = builder.shuffle_vector(w8, ir.Constant(ir.VectorType(_I8, 32), None), _const_vec(_I32, half))
            packed = _pshufb(builder, part, _control(builder, _COMPRESS, m8))
            at = builder.gep(bp, [builder.sub(end, ir.Constant(_I64, 16))])
            builder.store(packed, builder.bitcast(at, v16.as_pointer()), align=1)
        return
    compress = _declare(builder, f"llvm.masked.compressstore.v{LANES}i16", ir.VoidType(),
                        [_vec(_I16), _I16.as_pointer(), _vec(_I1)])
    builder.call(compress, [words, ptr, mask])


def _scratch16(builder):
    """A 64-byte aligned stack slot of 16 i32 lanes (in the function's entry block)."""
    slot = cgutils.alloca_once(builder, _vec(_I32))
    slot.align = 64
    return slot


def _register_move(builder, kind, v, mask):
    """vpcompressd / vpexpandd (``kind`` "compress" / "expand") of i32 lanes, register form, zero-filled."""
    fn = _declare(builder, f"llvm.x86.avx512.mask.{kind}.v{LANES}i32", _vec(_I32), [_vec(_I32)] * 2 + [_vec(_I1)])
    return builder.call(fn, [v, _splat(_I32, 0), mask])


_V8 = ir.VectorType(_I32, 8)
_IOTA8 = _const_vec(_I32, range(8))
# vpermd controls of 8 lanes by an 8-bit mask m (a byte per lane): _COMPRESS32 gathers the set lanes to
# the front in lane order; _EXPAND32 gives lane j the rank of j among the set lanes (what it takes)
_COMPRESS32 = ("zipccl_compress32", [[j for j in range(8) if m >> j & 1] + [0] * (8 - bin(m).count("1"))
                                     for m in range(256)])
_EXPAND32 = ("zipccl_expand32", [[bin(m & ((1 << j) - 1)).count("1") & 7 for j in range(8)] for m in range(256)])


def _permd(builder, v, idx):
    """``v[idx & 7]`` per lane of 8 i32 lanes (AVX2 vpermd)."""
    return builder.call(_declare(builder, "llvm.x86.avx2.permd", _V8, [_V8, _V8]), [v, idx])


def _half(builder, v, h):
    """Lanes ``8h .. 8h+7`` of a 16-lane vector."""
    return builder.shuffle_vector(v, ir.Constant(v.type, None), _const_vec(_I32, range(8 * h, 8 * h + 8)))


def _lane_control(builder, table, m8):
    """Row ``m8`` (i64) of an 8-lane control table (_COMPRESS32 or _EXPAND32), as i32 lanes."""
    g = _byte_table(builder, *table)
    p = builder.bitcast(builder.gep(g, [ir.Constant(_I64, 0), m8]), ir.VectorType(_I8, 8).as_pointer())
    return builder.zext(builder.load(p, align=8), _V8)


def _count8(builder, n):
    """An i64 count broadcast to 8 i32 lanes."""
    v = builder.insert_element(ir.Constant(_V8, None), builder.trunc(n, _I32), ir.Constant(_I32, 0))
    return builder.shuffle_vector(v, ir.Constant(_V8, None), _const_vec(_I32, [0] * 8))


def _compress_lanes_avx2(builder, v, mask):
    """_compress_lanes by three vpermd: each half's set lanes to its front, then the high half's rotated
    to start at lane n_lo (popcount of the low half) and laid after the low half's."""
    lo8, hi8 = _mask_bytes(builder, mask)
    n_lo, n = _count8(builder, builder.ctpop(lo8)), _count8(builder, _popcount16(builder, mask))
    packed_lo = _permd(builder, _half(builder, v, 0), _lane_control(builder, _COMPRESS32, lo8))
    packed_hi = _permd(builder, _half(builder, v, 1), _lane_control(builder, _COMPRESS32, hi8))
    rot = _permd(builder, packed_hi, builder.and_(builder.sub(_IOTA8, n_lo), _splat8(7)))
    zero = _splat8(0)
    out_lo = builder.select(builder.icmp_unsigned("<", _IOTA8, n_lo), packed_lo, rot)
    out_lo = builder.select(builder.icmp_unsigned("<", _IOTA8, n), out_lo, zero)
    out_hi = builder.select(builder.icmp_unsigned("<", builder.add(_IOTA8, _splat8(8)), n), rot, zero)
    return builder.shuffle_vector(out_lo, out_hi, _const_vec(_I32, range(LANES)))


def _expand_lanes_avx2(builder, v, mask):
    """_expand_lanes by four vpermd: the low half's set lanes take lanes 0.. of ``v``; lanes n_lo .. n_lo+7
    of ``v`` (across its halves) are gathered into one register for the high half's."""
    lo8, hi8 = _mask_bytes(builder, mask)
    n_lo = _count8(builder, builder.ctpop(lo8))
    v_lo, v_hi = _half(builder, v, 0), _half(builder, v, 1)
    out_lo = _permd(builder, v_lo, _lane_control(builder, _EXPAND32, lo8))
    idx = builder.add(_IOTA8, n_lo)                                  # 0 .. 15
    i7 = builder.and_(idx, _splat8(7))
    ahead = builder.select(builder.icmp_unsigned("<", idx, _splat8(8)), _permd(builder, v_lo, i7), _permd(builder, v_hi, i7))
    out_hi = _permd(builder, ahead, _lane_control(builder, _EXPAND32, hi8))
    zero = _splat8(0)
    out_lo = builder.select(_half(builder, mask, 0), out_lo, zero)
    out_hi = builder.select(_half(builder, mask, 1), out_hi, zero)
    return builder.shuffle_vector(out_lo, out_hi, _const_vec(_I32, range(LANES)))


def _splat8(v):
    return ir.Constant(_V8, [ir.Constant(_I32, v)] * 8)


def _compress_lanes(builder, v, mask):
    """The ``mask`` lanes of ``v`` (i32) moved to the front in lane order, the other lanes 0.  The
    register form of vpcompressd where the stream moves are register forms (its memory form is
    microcoded on Zen 4), vpermd where they are shuffles (AVX2: LLVM's generic lowering is a branch
    per lane), else a compress-store to the stack and a reload."""
    zero = _splat(_I32, 0)
    if STREAM_MOVES == "register":
        return _register_move(builder, "compress", v, mask)
    if STREAM_MOVES == "shuffle":
        return _compress_lanes_avx2(builder, v, mask)
    slot = _scratch16(builder)
    ptr = builder.bitcast(slot, _I32.as_pointer())
    fn = _declare(builder, f"llvm.masked.compressstore.v{LANES}i32", ir.VoidType(),
                  [_vec(_I32), _I32.as_pointer(), _vec(_I1)])
    builder.call(fn, [v, ptr, mask])
    return builder.select(_prefix_mask(builder, _popcount16(builder, mask)), builder.load(slot, align=64), zero)


def _expand_lanes(builder, v, mask):
    """Lanes ``0 .. popcount(mask)-1`` of ``v`` (i32) placed in the ``mask`` lanes in lane order, the
    other lanes 0 (the inverse of :func:`_compress_lanes`; vpexpandd, register form or from the stack;
    vpermd where the stream moves are shuffles)."""
    zero = _splat(_I32, 0)
    if STREAM_MOVES == "register":
        return _register_move(builder, "expand", v, mask)
    if STREAM_MOVES == "shuffle":
        return _expand_lanes_avx2(builder, v, mask)
    slot = _scratch16(builder)
    builder.store(v, slot, align=64)
    fn = _declare(builder, f"llvm.masked.expandload.v{LANES}i32", _vec(_I32),
                  [_I32.as_pointer(), _vec(_I1), _vec(_I32)])
    return builder.call(fn, [builder.bitcast(slot, _I32.as_pointer()), mask, zero])


def _decode_step(builder, xp, lookup, bp, wp, valid=None):
    """One rANS decode step of 16 lanes (states at ``xp``, updated): returns (symbols (i32), new wp).
    ``lookup(slot)``: the slot table's entries ``sym | (slot - cum[sym]) << 7 | freq[sym] << 19``
    (7 + 12 + 13 bits) of 16 slots.  ``valid``: where not None, only those lanes step (the others keep
    their states and take no word)."""
    xv = builder.load(builder.bitcast(xp, _vec(_I32).as_pointer()), align=4)
    ent = lookup(builder.and_(xv, _splat(_I32, (1 << PROB_BITS) - 1)))
    freq = builder.lshr(ent, _splat(_I32, 19))
    bias = builder.and_(builder.lshr(ent, _splat(_I32, 7)), _splat(_I32, 0xFFF))
    xn = builder.add(builder.mul(freq, builder.lshr(xv, _splat(_I32, PROB_BITS))), bias)
    need = builder.icmp_unsigned("<", xn, _splat(_I32, RANS_L))
    if valid is not None:
        need = builder.and_(need, valid)
        xn = builder.select(valid, xn, xv)
    w16 = _expand_words(builder, _at(builder, bp, wp, _I16), need)
    refilled = builder.or_(builder.shl(xn, _splat(_I32, 16)), builder.zext(w16, _vec(_I32)))
    builder.store(builder.select(need, refilled, xn), builder.bitcast(xp, _vec(_I32).as_pointer()), align=4)
    wp = builder.add(wp, builder.shl(_popcount16(builder, need), ir.Constant(_I64, 1)))
    return builder.and_(ent, _splat(_I32, 0x7F)), wp


# A ranked slot table (codec._numba._ranked_slots), 128 u32: the slot table's entry of each used symbol
# by rank less its slot term (``entry = RANK_ENTRY[rank] + (slot << 7)``), the next two ranks' first
# slots (``RANK_NEXT[rank] = cum[rank+1] | cum[rank+2] << 16``, 0xFFFF past the last rank), and two byte
# tables: RANK_BUCKET[slot >> 5] = the rank owning the bucket's first slot, when at most two ranks start
# inside the bucket, else 0x80 | f << 5 with f < 4 a row of RANK_FINE, which holds the rank of each of
# that bucket's 32 slots.
RANK_ENTRY, RANK_NEXT, RANK_BUCKET, RANK_FINE = 0, 32, 64, 96       # offsets in u32
RANK_FINE_ROWS = 4
RANKED_AT = TOTAL + LANES       # where the ranked table starts in a decoder's row of tables (u32)
RANKED_LEN = 128 + 4            # u32; + 4: the gather variant reads a byte table's last entry as a u32


def _ranked_entries(builder, tp, slot):
    """Slot-table entries of 16 slots from a ranked table (i8* ``tp``): two byte permutes give each
    slot's bucket rank (or, in a crowded bucket, its exact rank), two compares with the next ranks'
    first slots finish it, a dword permute reads the entry.  Gathers where there are no permutes."""
    at = lambda off: builder.gep(tp, [ir.Constant(_I64, 4 * off)])   # noqa: E731
    if PERMUTE:
        l1 = _bytes_lookup(builder, at(RANK_BUCKET), builder.trunc(builder.lshr(slot, _splat(_I32, 5)), _vec(_I8)))
        fine = builder.or_(l1, builder.and_(builder.trunc(slot, _vec(_I8)), _splat(_I8, 31)))
        exact = _bytes_lookup(builder, at(RANK_FINE), fine)
        crowded = builder.icmp_signed("<", l1, _splat(_I8, 0))
        r = builder.zext(builder.select(crowded, exact, l1), _vec(_I32))
        nxt = _permute2(builder, "d", at(RANK_NEXT), r)
    else:
        l1 = _gather_bytes(builder, at(RANK_BUCKET), builder.lshr(slot, _splat(_I32, 5)))
        fine = builder.or_(builder.and_(l1, _splat(_I32, 0x60)), builder.and_(slot, _splat(_I32, 31)))
        exact = _gather_bytes(builder, at(RANK_FINE), fine)
        r = builder.select(builder.icmp_unsigned(">=", l1, _splat(_I32, 0x80)), exact, l1)
        nxt = _gather(builder, at(RANK_NEXT), r, _I32, 4)
    for half in (builder.and_(nxt, _splat(_I32, 0xFFFF)), builder.lshr(nxt, _splat(_I32, 16))):
        r = builder.sub(r, builder.sext(builder.icmp_unsigned(">=", slot, half), _vec(_I32)))
    ent = _permute2(builder, "d", at(RANK_ENTRY), r) if PERMUTE else _gather(builder, at(RANK_ENTRY), r, _I32, 4)
    return builder.add(ent, builder.shl(slot, _splat(_I32, 7)))


def _slot_lookup(context, builder, aryty, tab, ranked):
    """``lookup(slot)`` for _decode_step from a row ``tab`` of a decoder's tables: the slot table, or
    where ``ranked`` (an i64, not 0) the ranked table at RANKED_AT after it."""
    tp = _data(context, builder, aryty, tab)
    if not PERMUTE:          # no ranked tables (codec._numba._open_chunk): one basic block, no branch
        return lambda slot: _gather(builder, tp, slot, _I32, 4, paired=True)
    is_ranked = builder.icmp_unsigned("!=", ranked, ir.Constant(_I64, 0))

    def lookup(slot):
        return _branch(builder, is_ranked,
                       lambda: _ranked_entries(builder, builder.gep(tp, [ir.Constant(_I64, 4 * RANKED_AT)]), slot),
                       lambda: _gather(builder, tp, slot, _I32, 4, paired=True), likely=True)

    return lookup


@intrinsic(prefer_literal=True)
def rans_decode16(typingctx, x, lane0, tab, buf, wp, sym, at, ranked, lanes):
    """Decode 16 lanes' next symbols; returns the new stream offset.  Scalar equivalent::

        for lane in range(lane0, lane0 + lanes):
            e = tab[x[lane] & 4095]                      # sym | bias << 7 | freq << 19
            x[lane] = (e >> 19) * (x[lane] >> 12) + (e >> 7 & 0xFFF)
            sym[at + lane - lane0] = e & 0x7F
            if x[lane] < 2**16:                          # refill from the shared stream
                x[lane] = x[lane] << 16 | u16(buf, wp); wp += 2

    ``e`` read from the ranked table after the slot table instead where ``ranked`` (see RANK_ENTRY).
    ``lanes``: the literal LANES, or 1..16 for a round of a chunk with fewer lanes, masked (the states
    ``x[lane0:lane0+16]`` must be readable; those past ``lanes`` are left as they were, and only
    ``sym[at:at+lanes]`` is written).
    """
    sig = types.int64(x, lane0, tab, buf, wp, sym, at, ranked, lanes)

    def codegen(context, builder, signature, args):
        xa, lane0v, ta, ba, wpv, sa, atv, rv, nl = args
        xp = builder.gep(_data(context, builder, signature.args[0], xa), [builder.shl(lane0v, ir.Constant(_I64, 2))])
        valid = _round_lanes(builder, signature.args[8], nl)
        s, wpn = _decode_step(builder, xp, _slot_lookup(context, builder, signature.args[2], ta, rv),
                              _data(context, builder, signature.args[3], ba), wpv, valid)
        sp = _at(builder, _data(context, builder, signature.args[5], sa), atv, _I8)
        if valid is None:
            builder.store(builder.trunc(s, _vec(_I8)), builder.bitcast(sp, _vec(_I8).as_pointer()), align=1)
        else:
            store = _declare(builder, f"llvm.masked.store.v{LANES}i8.p0", ir.VoidType(),
                             [_vec(_I8), _I8.as_pointer(), _I32, _vec(_I1)])
            builder.call(store, [builder.trunc(s, _vec(_I8)), sp, ir.Constant(_I32, 1), valid])
        return wpn

    return sig, codegen


def _dense_values_codegen(shifted):
    """Code generator of :func:`rans_decode16_values` (``shifted`` False) and :func:`rans_decode16_shifted`
    (True: one more argument, ``kk``, after ``at``)."""
    def codegen(context, builder, signature, args):
        st = list(signature.args)
        args = list(args)
        if shifted:
            kkv = args.pop(7)
            st.pop(7)
        xa, lane0v, ta, ba, wpv, sa, atv, planev, nsmv, fullv, remv, shiftv, refv, emv, oa, rv = args
        bp = _data(context, builder, st[3], ba)
        xp = builder.gep(_data(context, builder, st[0], xa), [builder.shl(lane0v, ir.Constant(_I64, 2))])
        s, wpn = _decode_step(builder, xp, _slot_lookup(context, builder, st[2], ta, rv), bp, wpv)
        res = _residual16(builder, bp, kkv if shifted else atv, planev, nsmv, fullv, remv, _literal(st[9]),
                          _literal(st[10]), aligned=not shifted)
        t = _window_t(builder, s, refv)
        # a window symbol's field is inside the exponent range: the slot table only holds symbols of
        # non-zero frequency, and the chunk's tables give every field outside the range zero
        # frequency (codec.codebook.clip_to_dtype); so only ESC and ZERO lanes need the scalar path
        bad = builder.icmp_unsigned("<", s, _splat(_I32, SYM_WINDOW0))
        _store_values16(context, builder, st[14], oa, atv, res, t, emv, shiftv)
        any_bad = builder.icmp_unsigned("!=", builder.bitcast(bad, _I16), ir.Constant(_I16, 0))
        with builder.if_then(any_bad, likely=False):     # only the redo of this group reads them
            builder.store(builder.trunc(s, _vec(_I8)), _at(builder, _data(context, builder, st[5], sa), atv,
                                                           _vec(_I8)), align=1)
        return builder.or_(wpn, builder.shl(builder.zext(any_bad, _I64), ir.Constant(_I64, 62)))

    return codegen


# prefer_literal: numba types an intrinsic's constant arguments as plain int64 unless asked to try their
# literal types first; without it every _decode16_values call site compiled the generic residual reader
# (found by bench.probes.kernel_profile on Zen 4; decode fp16 +14 %, bf16 +3 %, fp32 +2 %)
@intrinsic(prefer_literal=True)
def rans_decode16_values(typingctx, x, lane0, tab, buf, wp, sym, at, plane, n_sm, full, rem, shift, ref, em, out,
                         ranked):
    """:func:`rans_decode16`, then the 16 values ``out[at:at+16]`` of a dense chunk (value i =
    residual i: no ZERO symbol, no zero block).

    Returns the new stream offset, ``| 1 << 62`` when some lane's symbol is not a window symbol
    (ESC, ZERO): the caller then redoes these 16 values.  ``sym[at:at+16]`` is written only then.
    ``plane``: offset of the residual plane (``full`` byte planes of ``n_sm`` bytes, then
    ``rem``-bit fields, 8 values per ``rem`` bytes); reads the 8 bytes at each of the two groups
    of ``rem`` bytes, so the caller keeps ``plane + full*n_sm + (at//8 + 1)*rem + 8`` inside
    ``buf`` (16 bytes from the group start when ``full``/``rem`` are literals).  ``em = E << 8 | M`` (exponent and mantissa widths).  Value::

        t = sym - WINDOW0 + 2 * (ref - WINDOW_LOW)          # field e = t >> 1, leading bit t & 1
        (res >> (M-1-shift)) << (E+M) | t << (M-1) | (res & low mask) << shift
    ``full``, ``rem``, ``shift`` and ``em`` may be literals: the kernel is then specialised.  ``ranked``:
    as for :func:`rans_decode16`.
    """
    sig = types.int64(x, lane0, tab, buf, wp, sym, at, plane, n_sm, full, rem, shift, ref, em, out, ranked)
    return sig, _dense_values_codegen(False)


@intrinsic(prefer_literal=True)
def rans_decode16_shifted(typingctx, x, lane0, tab, buf, wp, sym, at, kk, plane, n_sm, full, rem, shift, ref, em,
                          out, ranked):
    """:func:`rans_decode16_values` with the residuals read from index ``kk`` (any alignment, as
    :func:`rans_decode16_window` reads them): values ``at .. at+15`` of a chunk with rare ZERO symbols
    (a sum's exact cancellations), whose ``at - kk`` ZERO values so far took no residual.  A group with
    a ZERO or ESC lane is flagged as in :func:`rans_decode16_values` (``| 1 << 62``, symbols written) for
    the caller to redo with :func:`values16_window_escaped`: where such lanes are rare this skips the
    window path's per-group work (its spread, counts and escape branch) in the common group."""
    sig = types.int64(x, lane0, tab, buf, wp, sym, at, kk, plane, n_sm, full, rem, shift, ref, em, out, ranked)
    return sig, _dense_values_codegen(True)


def _escape_fields(builder, bp, is_esc, n_e, escv, kev, nescv, t):
    """(``t`` with the ``is_esc`` lanes' ``field << 1 | lead`` taken from the chunk's escapes, in lane
    order by a masked expand-load of the next ``n_e`` u16 at byte offset ``escv + 2*kev``; whether the
    ``nescv`` escapes hold that many).  Nothing past the escapes is read: when they run out, no lane
    loads."""
    enough = builder.icmp_signed("<=", builder.add(kev, n_e), nescv)
    take = builder.select(enough, is_esc, _splat(_I1, 0))
    ev = _expand_words(builder, _at(builder, bp, builder.add(escv, builder.shl(kev, ir.Constant(_I64, 1))), _I16),
                       take, exact=True)
    return builder.select(is_esc, builder.zext(ev, _vec(_I32)), t), enough


def _field_top2(builder, emv):
    """``2 * top + 1`` (i32 lanes): the largest ``field << 1 | lead`` of a decoder's ``em``."""
    return builder.sub(builder.shl(_splat(_I32, 2), _broadcast(builder, _I32, builder.trunc(
        _em_exp_bits(builder, emv), _I32))), _splat(_I32, 1))


def _spread_residuals(builder, res, zero, likely=None):
    """``res`` (residuals in lane order) moved into the lanes that are not ``zero``, in lane order, by an
    expand only when some lane is zero (``likely``: the branch hint for that)."""
    some_zero = builder.icmp_unsigned("!=", builder.bitcast(zero, _I16), ir.Constant(_I16, 0))
    return _branch(builder, some_zero, lambda: _expand_lanes(builder, res, builder.not_(zero)), lambda: res, likely)


WINDOW_WP_BITS = 48        # rans_decode16_window's result: the stream offset below bit 48, then counts


@intrinsic(prefer_literal=True)
def rans_decode16_window(typingctx, x, lane0, tab, buf, wp, sym, at, kk, plane, n_sm, full, rem, shift, ref, em,
                         out, esc, ke, n_esc, ranked):
    """:func:`rans_decode16`, then the 16 values ``out[at:at+16]`` of a chunk with ZERO symbols and no
    zero blocks, where value, symbol and residual indices differ (a sum's rare exact cancellations, a
    ReLU's half +0): a ZERO lane is +0 and takes no residual, the others take residuals ``kk, kk+1,
    ...`` in lane order (:func:`values16_window`), an ESC lane ``field << 1 | lead`` from the chunk's
    escapes (u16 from byte offset ``esc``; ``ke`` of the ``n_esc`` consumed so far) as
    :func:`values16_escaped` does.  One pass instead of the symbols' rounds and then the values'.

    Returns ``wp | took << 48 | escapes << 54`` (the residuals and escapes the group took), ``| 1 << 62``
    when the escapes run out or an escape's field exceeds the exponent range: ``sym[at:at+16]`` is
    then written (and only then) and the values are garbage; the caller leaves the group, and the
    rest of the chunk, to the symbol-by-symbol pass, which names the fault.  Reads 16 residuals as
    :func:`_residual16` with ``at = kk`` (not aligned where ``full`` and ``rem`` are literals), and nothing
    past the escapes."""
    sig = types.int64(x, lane0, tab, buf, wp, sym, at, kk, plane, n_sm, full, rem, shift, ref, em, out, esc, ke,
                      n_esc, ranked)

    def codegen(context, builder, signature, args):
        (xa, lane0v, ta, ba, wpv, sa, atv, kkv, planev, nsmv, fullv, remv, shiftv, refv, emv, oa, escv, kev, nescv,
         rv) = args
        st = signature.args
        bp = _data(context, builder, st[3], ba)
        xp = builder.gep(_data(context, builder, st[0], xa), [builder.shl(lane0v, ir.Constant(_I64, 2))])
        s, wpn = _decode_step(builder, xp, _slot_lookup(context, builder, st[2], ta, rv), bp, wpv)
        zero, n_e, fail = _window_group(context, builder, st[15], oa, atv, bp, s, kkv, planev, nsmv, fullv, remv,
                                        _literal(st[10]), _literal(st[11]), shiftv, refv, emv, escv, kev, nescv)
        with builder.if_then(fail, likely=False):        # only the symbol-by-symbol pass reads them
            builder.store(builder.trunc(s, _vec(_I8)), _at(builder, _data(context, builder, st[5], sa), atv,
                                                           _vec(_I8)), align=1)
        counts = builder.or_(builder.shl(_popcount16(builder, builder.not_(zero)), ir.Constant(_I64, WINDOW_WP_BITS)),
                             builder.shl(n_e, ir.Constant(_I64, WINDOW_WP_BITS + 6)))
        return builder.or_(builder.or_(wpn, counts), builder.shl(builder.zext(fail, _I64), ir.Constant(_I64, 62)))

    return sig, codegen


def _window_group(context, builder, aryty, oa, atv, bp, s, kkv, planev, nsmv, fullv, remv, full, rem, shiftv, refv,
                  emv, escv, kev, nescv):
    """The 16 values ``out[at:at+16]`` of symbols ``s`` (i32 lanes) in a chunk with ZERO symbols, as
    :func:`rans_decode16_window` assembles them (residuals from ``kk``, escapes from ``ke``); returns
    (the ZERO lanes, the escapes taken (i64), whether the group failed: escapes run out or a field past
    the exponent range)."""
    zero = builder.icmp_unsigned("==", s, _splat(_I32, SYM_ZERO))
    is_esc = builder.icmp_unsigned("==", s, _splat(_I32, SYM_ESC))
    n_e = _popcount16(builder, is_esc)
    t_window = _window_t(builder, s, refv)
    # escapes are rare: their expand-load (microcoded on Zen 4) only in a group that has one
    def escaped():
        t_esc, enough = _escape_fields(builder, bp, is_esc, n_e, escv, kev, nescv, t_window)
        bad = builder.and_(is_esc, builder.icmp_unsigned(">", t_esc, _field_top2(builder, emv)))
        return t_esc, builder.or_(builder.icmp_unsigned("!=", builder.bitcast(bad, _I16), ir.Constant(_I16, 0)),
                                  builder.not_(enough))

    t, fail = _branch(builder, builder.icmp_unsigned("!=", n_e, ir.Constant(_I64, 0)), escaped,
                      lambda: (t_window, ir.Constant(_I1, 0)), likely=False)
    res = _residual16(builder, bp, kkv, planev, nsmv, fullv, remv, full, rem, aligned=False)
    _store_values16(context, builder, aryty, oa, atv, _spread_residuals(builder, res, zero), t, emv, shiftv, zero)
    return zero, n_e, fail


@intrinsic
def values16_window_escaped(typingctx, buf, sym, at, kk, plane, n_sm, full, rem, shift, ref, em, out, esc, ke,
                            n_esc):
    """The 16 values ``out[at:at+16]`` of a chunk with ZERO symbols and no zero blocks from their decoded
    symbols ``sym[at:at+16]``, residuals from ``kk`` and escapes from ``ke``, as :func:`rans_decode16_window`
    assembles them (the redo of a group :func:`rans_decode16_shifted` flagged).  Returns the residuals
    taken ``| escapes << 8``, or -1 where the escapes run out or an escape's field exceeds the exponent
    range (the caller leaves the group, and the rest of the chunk, to the symbol-by-symbol pass)."""
    sig = types.int64(buf, sym, at, kk, plane, n_sm, full, rem, shift, ref, em, out, esc, ke, n_esc)

    def codegen(context, builder, signature, args):
        ba, sa, atv, kkv, planev, nsmv, fullv, remv, shiftv, refv, emv, oa, escv, kev, nescv = args
        st = signature.args
        bp = _data(context, builder, st[0], ba)
        s = builder.zext(builder.load(_at(builder, _data(context, builder, st[1], sa), atv, _vec(_I8)), align=1),
                         _vec(_I32))
        zero, n_e, fail = _window_group(context, builder, st[11], oa, atv, bp, s, kkv, planev, nsmv, fullv, remv,
                                        _literal(st[6]), _literal(st[7]), shiftv, refv, emv, escv, kev, nescv)
        took = builder.or_(_popcount16(builder, builder.not_(zero)), builder.shl(n_e, ir.Constant(_I64, 8)))
        return builder.select(fail, ir.Constant(_I64, -1), took)

    return sig, codegen


def _window_t(builder, s, refv):
    """``field << 1 | leading bit`` of window symbols ``s`` (i32 lanes): window symbol s codes field
    ``(s - W0 >> 1) + ref - WINDOW_LOW`` and leading bit ``s - W0 & 1``, so ``e << M | lead << (M-1)
    == (s - W0 + 2*(ref - WINDOW_LOW)) << (M-1) =: t << (M-1)``."""
    c = builder.sub(builder.shl(builder.sub(refv, ir.Constant(_I64, WINDOW_LOW)), ir.Constant(_I64, 1)),
                    ir.Constant(_I64, SYM_WINDOW0))
    return builder.add(s, _broadcast(builder, _I32, builder.trunc(c, _I32)))


def _em_exp_bits(builder, emv):
    """E of a decoder's ``em = E << 8 | M | neg << 16`` (i64)."""
    return builder.and_(builder.lshr(emv, ir.Constant(_I64, 8)), ir.Constant(_I64, 0xFF))


def _store_values16(context, builder, aryty, arr, atv, res, t, emv, shiftv, zero=None):
    """``arr[at:at+16] = ((res >> (M-1-shift)) | neg) << (E+M) | t << (M-1) | (res & low mask) << shift``
    (+0 in the ``zero`` lanes, if given); ``em = E << 8 | M | neg << 16``: ``neg`` is set for a chunk
    of sign mode NEGATIVE (its plane has no sign bits)."""
    vec32 = lambda v: _broadcast(builder, _I32, builder.trunc(v, _I32))  # noqa: E731
    e_w = vec32(_em_exp_bits(builder, emv))
    m_w = vec32(builder.and_(emv, ir.Constant(_I64, 0xFF)))
    neg = vec32(builder.lshr(emv, ir.Constant(_I64, 16)))
    sh = vec32(shiftv)
    one = _splat(_I32, 1)
    ssr = builder.sub(builder.sub(m_w, one), sh)
    low = builder.and_(res, builder.sub(builder.shl(one, ssr), one))
    sign = builder.or_(builder.lshr(res, ssr), neg)
    val = builder.or_(builder.shl(sign, builder.add(e_w, m_w)), builder.shl(t, builder.sub(m_w, one)))
    val = builder.or_(val, builder.shl(low, sh))
    if zero is not None:
        val = builder.select(zero, _splat(_I32, 0), val)
    elem = ir.IntType(aryty.dtype.bitwidth)
    dst = _at(builder, _data(context, builder, aryty, arr), builder.mul(atv, ir.Constant(_I64, elem.width // 8)),
              _vec(elem))
    builder.store(builder.trunc(val, _vec(elem)) if elem.width < 32 else val, dst, align=elem.width // 8)


@intrinsic
def values16_escaped(typingctx, buf, sym, at, plane, n_sm, full, rem, shift, ref, em, out, esc, ke, n_esc):
    """The 16 values ``out[at:at+16]`` of a dense chunk from their decoded symbols ``sym[at:at+16]``,
    escaped lanes included: those take ``field << 1 | lead`` from the chunk's escapes (u16 from byte
    offset ``esc``; ``ke`` of the ``n_esc`` consumed so far), in lane order, as a masked expand-load.
    The residuals are read as in :func:`rans_decode16_values` (same bounds).  Returns the escapes
    consumed by the group's end, or -1 (nothing read past the escapes) when a lane is ZERO, the
    escapes run out or an escape's field exceeds the exponent range: the caller then redoes the
    group one value at a time, which names the error."""
    sig = types.int64(buf, sym, at, plane, n_sm, full, rem, shift, ref, em, out, esc, ke, n_esc)

    def codegen(context, builder, signature, args):
        ba, sa, atv, planev, nsmv, fullv, remv, shiftv, refv, emv, oa, escv, kev, nescv = args
        st = signature.args
        bp = _data(context, builder, st[0], ba)
        s = builder.zext(builder.load(_at(builder, _data(context, builder, st[1], sa), atv, _vec(_I8)), align=1),
                         _vec(_I32))
        is_esc = builder.icmp_unsigned("==", s, _splat(_I32, SYM_ESC))
        n_e = _popcount16(builder, is_esc)
        ke_new = builder.add(kev, n_e)
        t, enough = _escape_fields(builder, bp, is_esc, n_e, escv, kev, nescv, _window_t(builder, s, refv))
        bad = builder.or_(builder.icmp_unsigned("<", s, _splat(_I32, SYM_ESC)),
                          builder.icmp_unsigned(">", t, _field_top2(builder, emv)))
        any_bad = builder.or_(builder.icmp_unsigned("!=", builder.bitcast(bad, _I16), ir.Constant(_I16, 0)),
                              builder.not_(enough))
        res = _residual16(builder, bp, atv, planev, nsmv, fullv, remv)
        _store_values16(context, builder, st[10], oa, atv, res, t, emv, shiftv)
        return builder.select(any_bad, ir.Constant(_I64, -1), ke_new)

    return sig, codegen


@intrinsic
def values16_window(typingctx, buf, sym, i, kk, plane, n_sm, full, rem, shift, ref, em, out, oi):
    """``out[oi:oi+16]`` from the decoded symbols ``sym[i:i+16]`` and the next residuals from ``kk`` (any
    alignment: the pass over chunks with ZERO symbols or zero blocks, where value, symbol and residual
    indices differ).  A ZERO lane is +0 and takes no residual; the others take residuals ``kk, kk+1,
    ...`` in lane order.  Returns how many residuals the group took, or -1, having stored garbage,
    when some lane is ESC (the caller then redoes the 16 values one at a time).  Reads 16 residuals
    as :func:`_residual16` with ``at = kk``."""
    sig = types.int64(buf, sym, i, kk, plane, n_sm, full, rem, shift, ref, em, out, oi)

    def codegen(context, builder, signature, args):
        ba, sa, iv, kkv, planev, nsmv, fullv, remv, shiftv, refv, emv, oa, oiv = args
        st = signature.args
        bp = _data(context, builder, st[0], ba)
        s = builder.zext(builder.load(_at(builder, _data(context, builder, st[1], sa), iv, _vec(_I8)), align=1),
                         _vec(_I32))
        zero = builder.icmp_unsigned("==", s, _splat(_I32, SYM_ZERO))
        esc = builder.icmp_unsigned("==", s, _splat(_I32, SYM_ESC))
        res = _spread_residuals(builder, _residual16(builder, bp, kkv, planev, nsmv, fullv, remv), zero, likely=False)
        _store_values16(context, builder, st[11], oa, oiv, res, _window_t(builder, s, refv), emv, shiftv, zero)
        any_esc = builder.icmp_unsigned("!=", builder.bitcast(esc, _I16), ir.Constant(_I16, 0))
        return builder.select(any_esc, ir.Constant(_I64, -1), _popcount16(builder, builder.not_(zero)))

    return sig, codegen


def _literal(ty):
    return getattr(ty, "literal_value", None)


def _residual16(builder, bp, atv, planev, nsmv, fullv, remv, full=None, rem=None, aligned=True):
    """Residuals ``at .. at+15`` of a plane: ``full`` byte planes, then ``rem``-bit fields.  With
    ``full``/``rem`` known at compile time (literal arguments) the fields are cut out of 16 bytes by a
    constant byte shuffle and per-lane shifts: one 16-byte load where ``at`` is a multiple of 8
    (``aligned``), else two 8-byte loads from the byte of the first field's first bit, shifted down by
    that bit's position (a funnel shift); reads up to byte ``plane + full*n_sm + at*rem//8 + 16``.
    Otherwise (any ``at``) from two unaligned 8-byte loads: reads up to byte
    ``plane + full*n_sm + (at+8)*rem//8 + 8``."""
    if full is not None and rem is not None:
        res = _splat(_I32, 0)
        for b in range(full):
            off = builder.add(builder.add(planev, builder.mul(nsmv, ir.Constant(_I64, b))), atv)
            plane_b = builder.zext(builder.load(_at(builder, bp, off, _vec(_I8)), align=1), _vec(_I32))
            res = builder.or_(res, builder.shl(plane_b, _splat(_I32, 8 * b)))
        if rem:
            remstart = builder.add(planev, builder.mul(nsmv, ir.Constant(_I64, full)))
            if aligned:
                g0 = builder.add(remstart, builder.mul(builder.lshr(atv, ir.Constant(_I64, 3)), ir.Constant(_I64, rem)))
                raw = builder.load(_at(builder, bp, g0, _vec(_I8)), align=1)
            else:
                bit = builder.mul(atv, ir.Constant(_I64, rem))
                g0 = builder.add(remstart, builder.lshr(bit, ir.Constant(_I64, 3)))
                lo = builder.load(_at(builder, bp, g0, _I64), align=1)
                hi = builder.load(_at(builder, bp, builder.add(g0, ir.Constant(_I64, 8)), _I64), align=1)
                s0 = builder.and_(bit, ir.Constant(_I64, 7))
                fshr = _declare(builder, "llvm.fshr.i64", _I64, [_I64, _I64, _I64])
                two = ir.VectorType(_I64, 2)
                pair = builder.insert_element(ir.Constant(two, None), builder.call(fshr, [hi, lo, s0]),
                                              ir.Constant(_I32, 0))
                pair = builder.insert_element(pair, builder.lshr(hi, s0), ir.Constant(_I32, 1))
                raw = builder.bitcast(pair, _vec(_I8))
            idx = []
            for j in range(LANES):
                lo = j * rem >> 3
                idx += [lo, min(lo + 1, LANES - 1)]
            pairs = builder.bitcast(builder.shuffle_vector(raw, ir.Constant(_vec(_I8), None),
                                                           _const_vec(_I32, idx)), _vec(_I16))
            fields = builder.and_(builder.lshr(pairs, _const_vec(_I16, [j * rem & 7 for j in range(LANES)])),
                                  _splat(_I16, (1 << rem) - 1))
            res = builder.or_(res, builder.shl(builder.zext(fields, _vec(_I32)), _splat(_I32, 8 * full)))
        return res
    res_slot = cgutils.alloca_once_value(builder, _splat(_I32, 0))
    for b in range(3):
        with builder.if_then(builder.icmp_signed(">", fullv, ir.Constant(_I64, b))):
            off = builder.add(builder.add(planev, builder.mul(nsmv, ir.Constant(_I64, b))), atv)
            plane_b = builder.shl(builder.zext(builder.load(_at(builder, bp, off, _vec(_I8)), align=1), _vec(_I32)),
                                  _splat(_I32, 8 * b))
            builder.store(builder.or_(builder.load(res_slot), plane_b), res_slot)
    with builder.if_then(builder.icmp_signed(">", remv, ir.Constant(_I64, 0))):
        # fields at..at+7 and at+8..at+15: a u64 from the byte of each group's first bit, shifted
        # down by that bit's position in its byte (0 when ``at`` is a multiple of 8)
        remstart = builder.add(planev, builder.mul(nsmv, fullv))
        two = ir.VectorType(_I64, 2)
        pair = ir.Constant(two, None)
        for g in range(2):
            bit = builder.mul(builder.add(atv, ir.Constant(_I64, 8 * g)), remv)
            word = builder.load(_at(builder, bp, builder.add(remstart, builder.lshr(bit, ir.Constant(_I64, 3))),
                                    _I64), align=1)
            word = builder.lshr(word, builder.and_(bit, ir.Constant(_I64, 7)))
            pair = builder.insert_element(pair, word, ir.Constant(_I32, g))
        groups = builder.shuffle_vector(pair, ir.Constant(two, None), _const_vec(_I32, [j // 8 for j in range(LANES)]))
        shifts = builder.mul(_const_vec(_I64, [j % 8 for j in range(LANES)]), _broadcast(builder, _I64, remv))
        fields = builder.trunc(builder.lshr(groups, shifts), _vec(_I32))
        rem32 = _broadcast(builder, _I32, builder.trunc(remv, _I32))
        mask = builder.sub(builder.shl(_splat(_I32, 1), rem32), _splat(_I32, 1))
        fullbits = _broadcast(builder, _I32, builder.trunc(builder.shl(fullv, ir.Constant(_I64, 3)), _I32))
        builder.store(builder.or_(builder.load(res_slot), builder.shl(builder.and_(fields, mask), fullbits)), res_slot)
    return builder.load(res_slot)


def _load_words16(builder, context, aryty, arr, at):
    """16 consecutive values of a 1-D unsigned array from index ``at``, zero-extended to i32."""
    elem = ir.IntType(aryty.dtype.bitwidth)
    p = _at(builder, _data(context, builder, aryty, arr), builder.mul(at, ir.Constant(_I64, elem.width // 8)),
            _vec(elem))
    v = builder.load(p, align=elem.width // 8)
    return v if elem.width == 32 else builder.zext(v, _vec(_I32))


def _store_u64(builder, bp, off, v):
    builder.store(v, _at(builder, bp, off, _I64), align=1)


# A symbol's entry for the rounds where there are no permutes: ``sym | f << 7 | cum << 20`` (7 + 13 + 12
# bits).  The prepare pass looks it up (one gather it does anyway) and stores it per value, so the
# rANS rounds read f and cum with a plain load instead of a 16-lane lookup (scalarised on AVX2).
PACK_F, PACK_CUM = 7, 20


@intrinsic
def encode_prepare16(typingctx, words, at, packtab, em, shift, sym, out, plane, n_sm, full, rem, ent):
    """Symbols and residual plane of the 16 values ``words[at:at+16]`` of a dense chunk (no ZERO
    symbol), and their packed entries (``ent``, u32; ``packtab``: the packed entry (see PACK_F) of
    each key); returns how many of them are escapes.  Scalar equivalent, value i::

        ent[i] = packtab[w >> (M-1) & (2 << E) - 1]       # (field, leading bit) -> symbol or ESC
        sym[i] = ent[i] & 0x7F
        res = (w >> (E+M) & 1) << (M-1-shift) | (w & (1 << (M-1)) - 1) >> shift
        out[plane + b*n_sm + i] = res >> 8b & 0xFF         for b < full
        rem-bit field res >> 8*full at bit i*rem of the remainder plane (plane + full*n_sm)

    The remainder fields of 8 values (``rem`` bytes) are written as one 8-byte store, so values
    must be prepared in increasing order (each store's zero tail is overwritten by the next
    group) and ``out`` needs 8 spare bytes after the plane.  ``em = E << 8 | M``."""
    sig = types.int64(words, at, packtab, em, shift, sym, out, plane, n_sm, full, rem, ent)

    def codegen(context, builder, signature, args):
        tp = _data(context, builder, signature.args[2], args[2])
        return _prepare(context, builder, signature.args, args[:11], lambda key: _gather(builder, tp, key, _I32, 4),
                        ent=(signature.args[11], args[11]))

    return sig, codegen


@intrinsic
def encode_prepare16_window(typingctx, words, at, symwin, em, shift, sym, out, plane, n_sm, full, rem, base):
    """:func:`encode_prepare16` with the symbol table given as its window: ``symwin`` (128 u8) holds the
    symbol of keys ``base .. base+79`` (``base = 2 * (ref - WINDOW_LOW)``: the window's fields), every
    other key is ESC; read by a permute on ENCODE_PERMUTE targets."""
    sig = types.int64(words, at, symwin, em, shift, sym, out, plane, n_sm, full, rem, base)

    def codegen(context, builder, signature, args):
        return _prepare(context, builder, signature.args, args[:11], _window_lookup(context, builder, signature.args, args))

    return sig, codegen


PAIR = 2 * LANES                # encode_prepare32_window's values a call


@intrinsic
def encode_prepare32_window(typingctx, words, at, symwin, em, shift, sym, out, plane, n_sm, full, rem, base):
    """:func:`encode_prepare16_window` for the 32 values ``words[at:at+32]`` of 16-bit words (bfloat16,
    float16) at once, in 16-bit lanes: half the vector operations a value of two 16-value calls, whose
    bytes it writes (ENCODE_PERMUTE targets; ``at`` a multiple of 8; ``full`` <= 1, as a 16-bit word's
    residual has at most 11 bits).  Returns the escapes among values ``at .. at+15`` ``|`` those among
    ``at+16 .. at+31`` ``<< 32``, or -1 (nothing done) for other words and on targets without permutes."""
    sig = types.int64(words, at, symwin, em, shift, sym, out, plane, n_sm, full, rem, base)

    def codegen(context, builder, signature, args):
        return _prepare32(context, builder, signature.args, args)

    return sig, codegen


@intrinsic
def encode_prepare32_zeros(typingctx, words, at, symwin, em, shift, sym, out, plane, n_sm, full, rem, base, kk):
    """:func:`encode_prepare16_zeros` (with permutes) for the 32 values ``words[at:at+32]`` of 16-bit words, as
    :func:`encode_prepare32_window` for a dense chunk: the residuals of the non-+0 values go to plane
    indices ``kk, kk+1, ...`` (a 32-byte store each plane: the caller keeps ``kk + 32 <= n_sm``), the
    remainder fields a byte each.  Returns the escapes among values ``at .. at+15`` ``|`` those among
    ``at+16 .. at+31`` ``<< 16`` ``|`` the residuals written ``<< 32``; -1 (nothing done) for other words,
    and on targets without permutes or the register form of vpcompressw (VBMI2)."""
    sig = types.int64(words, at, symwin, em, shift, sym, out, plane, n_sm, full, rem, base, kk)

    def codegen(context, builder, signature, args):
        if STREAM_MOVES != "register":
            return ir.Constant(_I64, -1)
        return _prepare32(context, builder, signature.args, args[:12], kkv=args[12])

    return sig, codegen


def _prepare32(context, builder, st, args, kkv=None):
    """encode_prepare32_window's body (``kkv``: encode_prepare32_zeros', the plane index of the first
    residual)."""
    if st[0].dtype.bitwidth != 16 or not ENCODE_PERMUTE:
        return ir.Constant(_I64, -1)
    wa, atv, ta, emv, shiftv, sa, oa, planev, nsmv, fullv, remv, basev = args
    v16, v8 = ir.VectorType(_I16, PAIR), ir.VectorType(_I8, PAIR)
    sp16 = lambda v: _splat(_I16, v, PAIR)  # noqa: E731
    b16 = lambda v: _broadcast(builder, _I16, builder.trunc(v, _I16), PAIR)  # noqa: E731
    one = ir.Constant(_I64, 1)
    w = builder.load(_at(builder, _data(context, builder, st[0], wa), builder.shl(atv, one), v16), align=2)
    e_s = builder.lshr(emv, ir.Constant(_I64, 8))
    m_s = builder.and_(emv, ir.Constant(_I64, 0xFF))
    m1 = builder.sub(m_s, one)
    key = builder.and_(builder.lshr(w, b16(m1)), b16(builder.sub(builder.shl(ir.Constant(_I64, 2), e_s), one)))
    j = builder.sub(key, b16(basev))
    inside = builder.icmp_unsigned("<", j, sp16(2 * WINDOW))
    wide = builder.shuffle_vector(builder.trunc(j, v8), ir.Constant(v8, None), _const_vec(_I32, list(range(PAIR)) * 2))
    got = builder.shuffle_vector(_permute2(builder, "qi", _data(context, builder, st[2], ta), wide),
                                 ir.Constant(ir.VectorType(_I8, 64), None), _const_vec(_I32, range(PAIR)))
    s = builder.select(inside, got, _splat(_I8, SYM_ESC, PAIR))
    pos = atv
    if kkv is not None:
        nonzero = builder.icmp_unsigned("!=", w, sp16(0))
        s = builder.select(nonzero, s, _splat(_I8, SYM_ZERO, PAIR))
        pos = kkv
    builder.store(s, _at(builder, _data(context, builder, st[5], sa), atv, v8), align=1)
    sh = b16(shiftv)
    sign = builder.and_(builder.lshr(w, b16(builder.add(e_s, m_s))), sp16(1))
    low = builder.and_(w, b16(builder.sub(builder.shl(one, m1), one)))
    res = builder.or_(builder.shl(sign, builder.sub(b16(m1), sh)), builder.lshr(low, sh))
    if kkv is not None:                       # vpcompressw, register form
        fn = _declare(builder, f"llvm.x86.avx512.mask.compress.v{PAIR}i16", v16, [v16, v16, ir.VectorType(_I1, PAIR)])
        res = builder.call(fn, [res, sp16(0), nonzero])
    ob = _data(context, builder, st[6], oa)
    with builder.if_then(builder.icmp_signed(">", fullv, ir.Constant(_I64, 0))):
        builder.store(builder.trunc(res, v8), _at(builder, ob, builder.add(planev, pos), v8), align=1)
    with builder.if_then(builder.icmp_signed(">", remv, ir.Constant(_I64, 0))):
        fields = builder.trunc(builder.and_(builder.lshr(res, b16(builder.shl(fullv, ir.Constant(_I64, 3)))),
                                            b16(builder.sub(builder.shl(one, remv), one))), v8)
        _store_fields(builder, ob, fields, builder.add(planev, builder.mul(nsmv, fullv)), atv, remv, kkv)
    esc = builder.bitcast(builder.icmp_unsigned("==", s, _splat(_I8, SYM_ESC, PAIR)), _I32)
    ctpop = _declare(builder, "llvm.ctpop.i32", _I32, [_I32])
    count = lambda bits: builder.zext(builder.call(ctpop, [bits]), _I64)  # noqa: E731
    lo, hi = count(builder.and_(esc, ir.Constant(_I32, 0xFFFF))), count(builder.lshr(esc, ir.Constant(_I32, 16)))
    if kkv is None:
        return builder.or_(lo, builder.shl(hi, ir.Constant(_I64, 32)))
    n = count(builder.bitcast(nonzero, _I32))
    return builder.or_(builder.or_(lo, builder.shl(hi, ir.Constant(_I64, 16))), builder.shl(n, ir.Constant(_I64, 32)))


@intrinsic
def encode_prepare16_zeros(typingctx, words, at, symwin, em, shift, sym, out, plane, n_sm, full, rem, base, kk, ent,
                           zero_ent):
    """:func:`encode_prepare16_window` for a chunk with ZERO symbols: a +0 value gets SYM_ZERO and no
    residual, the others' residuals go to plane indices ``kk, kk+1, ...`` in order (``n_sm``: the
    chunk's non-ZERO values).  Returns the escapes ``| (residuals written) << 32``.  Each byte plane
    gets a 16-byte store at ``kk`` (the caller keeps ``kk + 16 <= n_sm``), and so does the remainder
    plane, its fields a byte each (unpacked: :func:`pack_fields16` packs them in place once the chunk's
    are all there, so ``out`` holds ``n_sm`` bytes from the remainder plane's start); values must be
    prepared in increasing order.  Where there are
    no permutes ``symwin`` holds packed entries (u32: see PACK_F; entry 2 * WINDOW is ESC's), which go to
    ``ent`` as in :func:`encode_prepare16` (``zero_ent``: SYM_ZERO's); with permutes ``ent`` is unused."""
    sig = types.int64(words, at, symwin, em, shift, sym, out, plane, n_sm, full, rem, base, kk, ent, zero_ent)

    def codegen(context, builder, signature, args):
        st = signature.args
        if ENCODE_PERMUTE:
            return _prepare(context, builder, st, args[:11], _window_lookup(context, builder, st, args), kkv=args[12])
        tp = _data(context, builder, st[2], args[2])
        basev = _broadcast(builder, _I32, builder.trunc(args[11], _I32))

        def lookup(key):
            j = builder.sub(key, basev)
            inside = builder.icmp_unsigned("<", j, _splat(_I32, 2 * WINDOW))
            return _gather(builder, tp, builder.select(inside, j, _splat(_I32, 2 * WINDOW)), _I32, 4)

        return _prepare(context, builder, st, args[:11], lookup, kkv=args[12], ent=(st[13], args[13]),
                        zero_ent=_broadcast(builder, _I32, builder.trunc(args[14], _I32)))

    return sig, codegen


def _squeeze_fields(builder, w, remv):
    """u64 lanes (two, or four) of 8 fields of ``rem`` bits, one per byte, squeezed into their low
    ``8 * rem`` bits each (SWAR: the unused high bits of each byte go, then of each 16-bit and each
    32-bit half): the remainder plane's packing of 8 values."""
    two = w.type
    sp = lambda v: _broadcast(builder, _I64, v, two.count)  # noqa: E731
    for width, lo_mask in ((8, 0x00FF00FF00FF00FF), (16, 0x0000FFFF0000FFFF)):
        lo = builder.and_(w, _splat(_I64, lo_mask, two.count))
        hi = builder.and_(w, _splat(_I64, ~lo_mask & (2**64 - 1), two.count))
        gap = builder.sub(ir.Constant(_I64, width), builder.mul(remv, ir.Constant(_I64, width // 8)))
        w = builder.or_(lo, builder.lshr(hi, sp(gap)))
    return builder.or_(builder.and_(w, _splat(_I64, 0xFFFFFFFF, two.count)),
                       builder.shl(builder.lshr(w, _splat(_I64, 32, two.count)),
                                   sp(builder.mul(remv, ir.Constant(_I64, 4)))))


@intrinsic
def pack_fields16(typingctx, buf, src, dst, rem):
    """Pack the 16 fields ``buf[src:src+16]`` (one per byte, each < 2^rem) into ``2 * rem`` bytes at
    ``dst`` (little-endian bit order, as the remainder plane), with two 8-byte stores (``dst + rem + 8``
    bytes are written).  In place over a run of fields (``dst = src * rem / 8``) when called in
    increasing order: a group's stores end before the next group's fields begin (``rem < 8``)."""
    sig = types.void(buf, src, dst, rem)

    def codegen(context, builder, signature, args):
        ba, srcv, dstv, remv = args
        bp = _data(context, builder, signature.args[0], ba)
        w = builder.load(_at(builder, bp, srcv, ir.VectorType(_I64, 2)), align=1)
        w = _squeeze_fields(builder, w, remv)
        for g in range(2):
            _store_u64(builder, bp, builder.add(dstv, builder.mul(remv, ir.Constant(_I64, g))),
                       builder.extract_element(w, ir.Constant(_I32, g)))
        return context.get_dummy_value()

    return sig, codegen


def _window_lookup(context, builder, st, args):
    """``lookup(key)`` for _prepare from a symbol window (``args[2]``, keys from ``args[11]``, every
    other key ESC): a byte permute on ENCODE_PERMUTE targets, else a byte gather."""
    tp = _data(context, builder, st[2], args[2])
    basev = _broadcast(builder, _I32, builder.trunc(args[11], _I32))

    def lookup(key):
        j = builder.sub(key, basev)
        inside = builder.icmp_unsigned("<", j, _splat(_I32, 2 * WINDOW))
        if ENCODE_PERMUTE:
            s8 = _bytes_lookup(builder, tp, builder.trunc(j, _vec(_I8)))
            return builder.select(inside, builder.zext(s8, _vec(_I32)), _splat(_I32, SYM_ESC))
        got = _gather_bytes(builder, tp, builder.select(inside, j, _splat(_I32, 0)))   # j < 80 of 128 bytes
        return builder.select(inside, got, _splat(_I32, SYM_ESC))

    return lookup


def _store_fields(builder, ob, fields, remstart, atv, remv, kkv):
    """The remainder plane's fields of a prepared group (``fields``: 16 or 32 i8 lanes, one field each)
    for values ``at ..``: packed, ``rem`` bytes a run of 8 (one 8-byte store each, so the groups must come
    in increasing order: each store's zero tail is overwritten by the next); or, where ``kkv`` (a chunk
    with +0: the residuals compressed), a byte a field from index kk (the compressed-away lanes' zero
    fields are overwritten by the next group's): pack_fields16 packs them in place once all are there."""
    if kkv is not None:
        builder.store(fields, _at(builder, ob, builder.add(remstart, kkv), fields.type), align=1)
        return
    runs = fields.type.count // 8
    w = _squeeze_fields(builder, builder.bitcast(fields, ir.VectorType(_I64, runs)), remv)
    g0 = builder.add(remstart, builder.mul(builder.lshr(atv, ir.Constant(_I64, 3)), remv))
    for g in range(runs):
        _store_u64(builder, ob, builder.add(g0, builder.mul(remv, ir.Constant(_I64, g))),
                   builder.extract_element(w, ir.Constant(_I32, g)))


def _prepare(context, builder, st, args, lookup, kkv=None, ent=None, zero_ent=None):
    """encode_prepare16's body; ``lookup(key)``: the symbols (i32 lanes) of keys ``field << 1 | lead``,
    or their packed entries (see PACK_F) where ``ent`` (type, array) is given: they are stored there
    (``zero_ent``: SYM_ZERO's, with ``kkv``).  ``kkv``: the plane index of the group's first residual
    in a chunk with ZERO symbols (see encode_prepare16_zeros), None in a dense chunk."""
    wa, atv, _, emv, shiftv, sa, oa, planev, nsmv, fullv, remv = args
    w = _load_words16(builder, context, st[0], wa, atv)
    vec32 = lambda v: _broadcast(builder, _I32, builder.trunc(v, _I32))  # noqa: E731
    one = _splat(_I32, 1)
    e_w = vec32(builder.lshr(emv, ir.Constant(_I64, 8)))
    m_w = vec32(builder.and_(emv, ir.Constant(_I64, 0xFF)))
    key = builder.and_(builder.lshr(w, builder.sub(m_w, one)),
                       builder.sub(builder.shl(_splat(_I32, 2), e_w), one))
    s = lookup(key)
    pos = atv
    if kkv is not None:
        nonzero = builder.icmp_unsigned("!=", w, _splat(_I32, 0))
        s = builder.select(nonzero, s, _splat(_I32, SYM_ZERO) if ent is None else zero_ent)
        pos = kkv
    if ent is not None:
        builder.store(s, _at(builder, _data(context, builder, ent[0], ent[1]), builder.shl(atv, ir.Constant(_I64, 2)),
                             _vec(_I32)), align=4)
        s = builder.and_(s, _splat(_I32, (1 << PACK_F) - 1))
    builder.store(builder.trunc(s, _vec(_I8)), _at(builder, _data(context, builder, st[5], sa), atv, _vec(_I8)),
                  align=1)
    sh = vec32(shiftv)
    sign = builder.and_(builder.lshr(w, builder.add(e_w, m_w)), one)
    low = builder.and_(w, builder.sub(builder.shl(one, builder.sub(m_w, one)), one))
    res = builder.or_(builder.shl(sign, builder.sub(builder.sub(m_w, one), sh)), builder.lshr(low, sh))
    if kkv is not None:
        res = _compress_lanes(builder, res, nonzero)
    ob = _data(context, builder, st[6], oa)
    for b in range(3):
        with builder.if_then(builder.icmp_signed(">", fullv, ir.Constant(_I64, b))):
            off = builder.add(builder.add(planev, builder.mul(nsmv, ir.Constant(_I64, b))), pos)
            byte = builder.trunc(builder.lshr(res, _splat(_I32, 8 * b)), _vec(_I8))
            builder.store(byte, _at(builder, ob, off, _vec(_I8)), align=1)
    with builder.if_then(builder.icmp_signed(">", remv, ir.Constant(_I64, 0))):
        rem32 = _broadcast(builder, _I32, builder.trunc(remv, _I32))
        fullbits = _broadcast(builder, _I32, builder.trunc(builder.shl(fullv, ir.Constant(_I64, 3)), _I32))
        fields = builder.trunc(builder.and_(builder.lshr(res, fullbits), builder.sub(builder.shl(one, rem32), one)),
                               _vec(_I8))
        _store_fields(builder, ob, fields, builder.add(planev, builder.mul(nsmv, fullv)), atv, remv, kkv)
    esc = builder.icmp_unsigned("==", s, _splat(_I32, SYM_ESC))
    if kkv is None:
        return _popcount16(builder, esc)
    return builder.or_(_popcount16(builder, esc), builder.shl(_popcount16(builder, nonzero), ir.Constant(_I64, 32)))


_QUOTIENT_BIAS = 0.375     # _divmod_f32's estimate, biased above the quotient: off by at most one, upwards


def _divmod_f32(builder, x, f, recip=None):
    """(x // f, x % f) of u32 lanes ``x`` < f * 2^20 and ``f`` in 1..4096, exactly, in single precision:
    the estimate x * (1/f) + 3/8 (x, 1/f, the product and the sum rounded once each, or product and sum
    once by an FMA where the target has one: the product within 3 * 2^-24 * 2^20 = 0.1875 of x / f, the
    sum within 2^-4 more, so the estimate lies in (x / f + 0.12, x / f + 0.63)), truncated, is x // f or
    one more; one step down on the remainder corrects it.  ``recip``: 1/f (f32 lanes) looked up from a table (the ranked rounds: one permute, in
    place of the f64 reciprocals' four and their conversions), else divided here (where there are no
    permutes a 16-lane lookup is scalarised on AVX2: 16 loads).  The reciprocal does not depend on the
    state, so the division stays off the rounds' dependency chain."""
    f32 = ir.FloatType()
    vf = _vec(f32)
    if recip is None:
        recip = builder.fdiv(ir.Constant(vf, [ir.Constant(f32, 1.0)] * LANES), builder.sitofp(f, vf))
    fmuladd = _declare(builder, f"llvm.fmuladd.v{LANES}f32", vf, [vf, vf, vf])   # one FMA where there is one
    est = builder.call(fmuladd, [builder.uitofp(x, vf), recip, ir.Constant(vf, [ir.Constant(f32, _QUOTIENT_BIAS)] * LANES)])
    q = builder.fptosi(est, _vec(_I32))
    r = builder.sub(x, builder.mul(q, f))                 # in [-f, f): a valid i32
    over = builder.sext(builder.icmp_signed("<", r, _splat(_I32, 0)), _vec(_I32))     # q one too high
    return builder.add(q, over), builder.add(r, builder.and_(f, over))


def _symbols16(context, builder, symty, sa, atv, lookup, valid=None):
    """An _encode_round's ``operands``: the symbols ``sym[at:at+16]`` (array ``sa`` of type ``symty``) looked
    up by ``lookup(s)`` -> (``f | cum << 16``, 1/f or None); lanes outside ``valid`` look up symbol 0."""
    def operands():
        s = builder.zext(builder.load(_at(builder, _data(context, builder, symty, sa), atv, _vec(_I8)), align=1),
                         _vec(_I32))
        if valid is not None:
            s = builder.select(valid, s, _splat(_I32, 0))
        fc, inv = lookup(s)
        return builder.and_(fc, _splat(_I32, 0xFFFF)), builder.lshr(fc, _splat(_I32, 16)), inv
    return operands


def _round_lanes(builder, st_lanes, lanes):
    """The lanes a round runs (``lanes``: the intrinsic's last argument): None for all 16 (the literal
    LANES: no masking in the chunks' hot rounds), else lanes ``0 .. lanes-1``."""
    if _literal(st_lanes) == LANES:
        return None
    return _prefix_mask(builder, lanes)


def _encode_round(context, builder, st, xa, lane0v, wa, posv, operands, valid=None):
    """rans_encode16's round: :func:`_encode_step` on the states ``x[lane0:lane0+16]`` (array ``xa`` of type
    ``st[0]``), loaded and stored back; ``wa``: (index in ``st``, array) of ``wbuf``."""
    xp = builder.bitcast(builder.gep(_data(context, builder, st[0], xa), [builder.shl(lane0v, ir.Constant(_I64, 2))]),
                         _vec(_I32).as_pointer())
    x_in = builder.load(xp, align=4)
    xn, pos = _encode_step(builder, x_in, operands(), _data(context, builder, st[wa[0]], wa[1]), posv, valid)
    builder.store(xn, xp, align=4)
    return pos


def _encode_step(builder, x_in, operands, wb, posv, valid=None):
    """Push 16 lanes of states ``x_in``: returns (their new states, the new ``pos``).  ``operands``: (f, cum,
    1/f or None) of the lanes' symbols (i32 lanes; 1/f: f32 from a table, or None: divided here): the quotient
    from :func:`_divmod_f32`; the flushed words are stored below ``pos`` in ``wb`` (i8*: the u16 words).
    ``valid``: where not None, only those lanes are pushed; the others (states past the chunk's lanes: ``x``
    keeps room for 16) keep their states, flush nothing and are computed from a state and a frequency that
    keep every operation defined."""
    f, cum, inv = operands
    xv = x_in
    if valid is not None:
        xv = builder.select(valid, x_in, _splat(_I32, RANS_L))
        f = builder.select(valid, f, _splat(_I32, 1))
    # x >= f << 20 as x > (f << 20) - 1 in wrapping u32: f = TOTAL (a chunk of one symbol, an explicit table)
    # gives 2^32 - 1, which no state passes (f << 20 alone wrapped to 0: every lane flushed every round)
    thr = builder.sub(builder.shl(f, _splat(_I32, _RENORM_SHIFT)), _splat(_I32, 1))
    need = builder.icmp_unsigned(">", xv, thr)
    if valid is not None:
        need = builder.and_(need, valid)
    cnt = _popcount16(builder, need)
    pos = builder.sub(posv, cnt)
    _compress_words(builder, builder.trunc(xv, _vec(_I16)), _at(builder, wb, builder.shl(pos, ir.Constant(_I64, 1)),
                                                                  _I16), need, cnt)
    xv = builder.select(need, builder.lshr(xv, _splat(_I32, 16)), xv)
    q, r = _divmod_f32(builder, xv, f, inv)
    xn = builder.add(builder.add(builder.shl(q, _splat(_I32, PROB_BITS)), r), cum)
    if valid is not None:
        xn = builder.select(valid, xn, x_in)
    return xn, pos


@intrinsic(prefer_literal=True)
def rans_encode16(typingctx, x, lane0, sym, at, ftab, wbuf, pos, lanes):
    """Push the symbols ``sym[at:at+16]`` onto lanes ``lane0..lane0+15``; returns the new ``pos``.
    Scalar equivalent (the flushed words are stored below ``pos``, in lane order)::

        for lane in range(lane0 + lanes - 1, lane0 - 1, -1):
            s = sym[at + lane - lane0];  f = ftab[s] & 0xFFFF;  cum = ftab[s] >> 16
            if x[lane] >= f << 20:                         # flush 16 bits
                pos -= 1;  wbuf[pos] = x[lane] & 0xFFFF;  x[lane] >>= 16
            q = x[lane] // f                               # by _divmod_f32
            x[lane] = (q << 12) + x[lane] - q * f + cum

    ``lanes``: the literal LANES for a whole round (what the chunks of 16 lanes or more run); 1..16 for a
    round of a chunk with fewer lanes, masked: ``x[lane0:lane0+16]`` and ``sym[at:at+16]`` must still be
    readable (the lanes past ``lanes`` are read, left unchanged and flush nothing).
    """
    sig = types.int64(x, lane0, sym, at, ftab, wbuf, pos, lanes)

    def codegen(context, builder, signature, args):
        xa, lane0v, sa, atv, fa, wa, posv, nl = args
        st = signature.args
        fp = _data(context, builder, st[4], fa)
        valid = _round_lanes(builder, st[7], nl)
        return _encode_round(context, builder, st, xa, lane0v, (5, wa), posv,
                             _symbols16(context, builder, st[2], sa, atv, lambda s: (_gather(builder, fp, s, _I32, 4), None),
                                        valid), valid)

    return sig, codegen


@intrinsic(prefer_literal=True)
def rans_encode16_ranked(typingctx, x, lane0, sym, at, rk, ftab, inv, wbuf, pos, lanes):
    """:func:`rans_encode16` with the symbol tables indexed by rank: ``ftab[rk[s]]``, ``inv[rk[s]]``
    (``rk``: 128 u8, ``ftab``: 32 u32, ``inv``: 32 f32 reciprocals), read by permutes on ENCODE_PERMUTE targets."""
    sig = types.int64(x, lane0, sym, at, rk, ftab, inv, wbuf, pos, lanes)

    def codegen(context, builder, signature, args):
        xa, lane0v, sa, atv, ra, fa, ia, wa, posv, nl = args
        st = signature.args
        rp, fp, ip = (_data(context, builder, st[i], a) for i, a in ((4, ra), (5, fa), (6, ia)))
        valid = _round_lanes(builder, st[9], nl)
        return _encode_round(context, builder, st, xa, lane0v, (7, wa), posv,
                             _symbols16(context, builder, st[2], sa, atv, lambda s: _ranked_lookup(builder, rp, fp, ip, s),
                                        valid), valid)

    return sig, codegen


@intrinsic(prefer_literal=True)
def rans_encode16_packed(typingctx, x, lane0, ent, at, wbuf, pos, lanes):
    """:func:`rans_encode16` with each value's symbol given by its packed entry ``ent[at:at+16]`` (u32,
    see PACK_F, written by the prepare pass): f and cum by a plain load, the quotient by
    :func:`_divmod_f32`.  The rounds of targets without permutes."""
    sig = types.int64(x, lane0, ent, at, wbuf, pos, lanes)

    def codegen(context, builder, signature, args):
        xa, lane0v, ea, atv, wa, posv, nl = args
        st = signature.args

        return _encode_round(context, builder, st, xa, lane0v, (4, wa), posv, _packed16(context, builder, st[2], ea, atv),
                             _round_lanes(builder, st[6], nl))

    return sig, codegen


def _packed16(context, builder, entty, ea, atv):
    """An _encode_round's ``operands`` from the packed entries ``ent[at:at+16]`` (see PACK_F)."""
    def operands():
        p = builder.load(_at(builder, _data(context, builder, entty, ea), builder.shl(atv, ir.Constant(_I64, 2)),
                             _vec(_I32)), align=4)
        f = builder.and_(builder.lshr(p, _splat(_I32, PACK_F)), _splat(_I32, (1 << (PACK_CUM - PACK_F)) - 1))
        return f, builder.lshr(p, _splat(_I32, PACK_CUM)), None
    return operands


def _loop(builder, init, more, body):
    """A loop with its values in registers: ``init`` the values on entry, ``more(values)`` (an i1) whether to
    run ``body(values)`` (-> the next values) once more; returns the values on exit."""
    pre = builder.block
    head = builder.append_basic_block("rounds.head")
    loop = builder.append_basic_block("rounds.body")
    done = builder.append_basic_block("rounds.exit")
    builder.branch(head)
    builder.position_at_end(head)
    phis = [builder.phi(v.type) for v in init]
    for p, v in zip(phis, init):
        p.add_incoming(v, pre)
    builder.cbranch(more(phis), loop, done)
    builder.position_at_end(loop)
    nxt = body(phis)
    for p, v in zip(phis, nxt):
        p.add_incoming(v, builder.block)
    builder.branch(head)
    builder.position_at_end(done)
    return phis


@intrinsic
def rans_encode_rounds(typingctx, x, sym, ent, rk, ftab_r, inv_r, ftab, wbuf, pos, rounds, k, stop, ahead, ranked):
    """The rounds ``r = rounds-1 .. 0`` of a chunk of ``k`` = 16 or 32 lanes, as one call a round of
    :func:`rans_encode16_ranked` (on ENCODE_PERMUTE targets where ``ranked`` is 32: tables of 32 ranks; 64
    (ENCODE_RANKS): the same from tables of 64), :func:`rans_encode16` (other ENCODE_PERMUTE chunks: ``ranked``
    0) or :func:`rans_encode16_packed` (no permutes) pushes them (the group of lanes 16..31 first, then
    0..15): the same states ``x[:k]`` and words below ``pos`` in ``wbuf``; returns the new ``pos``.  The
    states stay in registers from round to round (stored and reloaded by every call, they put a store-to-load
    forwarding on the states' dependency chain, which bounds the rounds: two groups of 16 lanes ran 1.33x
    faster than one).  Stops before a round once ``pos < stop`` (the words so far too many: the caller's
    limit).  Prefetches a cache line of ``ahead`` a round, from its start (the next chunk's input)."""
    sig = types.int64(x, sym, ent, rk, ftab_r, inv_r, ftab, wbuf, pos, rounds, k, stop, ahead, ranked)

    def codegen(context, builder, signature, args):
        xa, sa, ea, ra, fra, ia, fa, wa, posv, roundsv, kv, stopv, aa, rankedv = args
        st = signature.args
        xp = builder.bitcast(_data(context, builder, st[0], xa), _vec(_I32).as_pointer())
        wb = _data(context, builder, st[7], wa)
        ap = _data(context, builder, st[12], aa)
        ary = context.make_array(st[12])(context, builder, aa)
        abytes = builder.mul(builder.extract_value(ary.shape, 0), ir.Constant(_I64, st[12].dtype.bitwidth // 8))
        pf_fn = _declare(builder, "llvm.prefetch.p0", ir.VoidType(), [_I8.as_pointer(), _I32, _I32, _I32])
        zero64 = ir.Constant(_I64, 0)

        def rounds(groups, form):
            xs = [builder.load(builder.gep(xp, [ir.Constant(_I64, g)]), align=4) for g in range(groups)]

            def more(vals):
                r, p = vals[0], vals[1]
                return builder.and_(builder.icmp_signed(">", r, zero64), builder.icmp_signed(">=", p, stopv))

            def body(vals):
                r, p, pf = vals[:3]
                xs = list(vals[3:])
                r = builder.sub(r, ir.Constant(_I64, 1))
                for g in range(groups - 1, -1, -1):
                    atv = builder.add(builder.mul(r, kv), ir.Constant(_I64, LANES * g))
                    if form in (32, ENCODE_RANKS):
                        rp, fp, ip = (_data(context, builder, st[i], a) for i, a in ((3, ra), (4, fra), (5, ia)))
                        ops = _symbols16(context, builder, st[1], sa, atv,
                                         lambda s_: _ranked_lookup(builder, rp, fp, ip, s_, form))
                    elif form == "plain":
                        fp = _data(context, builder, st[6], fa)
                        ops = _symbols16(context, builder, st[1], sa, atv,
                                         lambda s_: (_gather(builder, fp, s_, _I32, 4), None))
                    else:
                        ops = _packed16(context, builder, st[2], ea, atv)
                    xs[g], p = _encode_step(builder, xs[g], ops(), wb, p)
                with builder.if_then(builder.icmp_signed("<", pf, abytes)):
                    builder.call(pf_fn, [builder.gep(ap, [pf]), ir.Constant(_I32, 0), ir.Constant(_I32, 2),
                                         ir.Constant(_I32, 1)])
                return [r, p, builder.add(pf, ir.Constant(_I64, 64))] + xs

            out = _loop(builder, [roundsv, posv, zero64] + xs, more, body)
            for g in range(groups):
                builder.store(out[3 + g], builder.gep(xp, [ir.Constant(_I64, g)]), align=4)
            return out[1]

        def forms(groups):
            if not ENCODE_PERMUTE:
                return rounds(groups, "packed")
            ranks_are = lambda n: builder.icmp_unsigned("==", rankedv, ir.Constant(_I64, n))  # noqa: E731
            return _branch(builder, ranks_are(32), lambda: rounds(groups, 32),
                           lambda: _branch(builder, ranks_are(ENCODE_RANKS), lambda: rounds(groups, ENCODE_RANKS),
                                           lambda: rounds(groups, "plain")))

        return _branch(builder, builder.icmp_signed(">", kv, ir.Constant(_I64, LANES)), lambda: forms(2),
                       lambda: forms(1))

    return sig, codegen


@intrinsic
def stats16(typingctx, words, at, groups, em, acc32):
    """Accumulate the codebook statistics of ``words[at:at+16*groups]`` per lane.  Scalar equivalent,
    value ``w`` in lane j (``acc32`` rows: zeros, non-zero magnitudes, sum of log2, OR of low bits,
    signs)::

        nz = w & (1 << (E+M)) - 1 != 0;   e = w >> M & (1 << E) - 1
        lg = (e if e else bit_length(w & (1 << M) - 1 | 1) - M) if nz else 0
        acc32[j] += w == 0;  acc32[16+j] += nz;  acc32[32+j] += lg;  acc32[48+j] |= w & (1 << (M-1)) - 1
        acc32[64+j] += w >> (E+M) & 1
    acc32[80] += all 16 values of the group are +0          (per group)

    The groups run in one loop with the sums in registers (stored and reloaded per 16 values, they
    were a dependency through memory), and a subnormal's bit length is read from the exponent of its
    mantissa converted to float32 (exact below 2^24): AVX2 has no vector count of leading zeros, and
    LLVM's expansion of ``llvm.ctlz`` was most of the work (with the two changes the statistics pass
    of a 64K-value bf16 chunk went from 38-48 us to 23 us on Zen 3).  A lane sees at most 2^16 values
    of a chunk (at most 2^20): every sum fits its i32.
    """
    sig = types.void(words, at, groups, em, acc32)

    def codegen(context, builder, signature, args):
        wa, atv, gv, emv, a32 = args
        st = signature.args
        vec32 = lambda v: _broadcast(builder, _I32, builder.trunc(v, _I32))  # noqa: E731
        one = _splat(_I32, 1)
        zero = _splat(_I32, 0)
        e_w = vec32(builder.lshr(emv, ir.Constant(_I64, 8)))
        m_w = vec32(builder.and_(emv, ir.Constant(_I64, 0xFF)))
        mask = lambda bits_: builder.sub(builder.shl(one, bits_), one)  # noqa: E731
        emask, mmask, lowmask = mask(e_w), mask(m_w), mask(builder.sub(m_w, one))
        signshift = builder.add(e_w, m_w)
        magmask = mask(signshift)
        bias = builder.add(m_w, _splat(_I32, 126))     # float exponent field - 126 = bit length
        sums = [cgutils.alloca_once_value(builder, zero) for _ in range(5)]
        blocks = cgutils.alloca_once_value(builder, ir.Constant(_I32, 0))
        with cgutils.for_range(builder, gv) as loop:
            w = _load_words16(builder, context, st[0], wa,
                              builder.add(atv, builder.mul(loop.index, ir.Constant(_I64, LANES))))
            e = builder.and_(builder.lshr(w, m_w), emask)
            mant = builder.or_(builder.and_(w, mmask), one)
            fbits = builder.bitcast(builder.sitofp(mant, ir.VectorType(ir.FloatType(), LANES)), _vec(_I32))
            sub = builder.sub(builder.lshr(fbits, _splat(_I32, 23)), bias)
            nz = builder.icmp_unsigned("!=", builder.and_(w, magmask), zero)
            lg = builder.select(nz, builder.select(builder.icmp_unsigned("!=", e, zero), e, sub), zero)
            is_zero = builder.icmp_unsigned("==", w, zero)
            rows = (builder.zext(is_zero, _vec(_I32)), builder.zext(nz, _vec(_I32)),
                    lg, builder.and_(w, lowmask), builder.and_(builder.lshr(w, signshift), one))
            for r, v in enumerate(rows):
                old = builder.load(sums[r])
                builder.store(builder.or_(old, v) if r == 3 else builder.add(old, v), sums[r])
            all_zero = builder.icmp_unsigned("==", builder.bitcast(is_zero, _I16), ir.Constant(_I16, 0xFFFF))
            builder.store(builder.add(builder.load(blocks), builder.zext(all_zero, _I32)), blocks)
        p32 = builder.bitcast(_data(context, builder, st[4], a32), _I32.as_pointer())
        for r in range(5):
            ptr = builder.bitcast(builder.gep(p32, [ir.Constant(_I64, LANES * r)]), _vec(_I32).as_pointer())
            old = builder.load(ptr, align=4)
            v = builder.load(sums[r])
            builder.store(builder.or_(old, v) if r == 3 else builder.add(old, v), ptr, align=4)
        ptr = builder.gep(p32, [ir.Constant(_I64, LANES * 5)])
        builder.store(builder.add(builder.load(ptr, align=4), builder.load(blocks)), ptr, align=4)
        return context.get_dummy_value()

    return sig, codegen


_HALF_GROUP = 2 * LANES         # stats_halves: 16-bit words a step
_HALF_BLOCK = 128               # steps summed in i16 lanes before widening (128 * 255 < 2^15)


@intrinsic
def stats_halves(typingctx, words, m, em, acc32):
    """:func:`stats16` for 16-bit words (bfloat16, float16), 32 a step: the same sums over
    ``words[:g]``, ``g = m - m % 32``, added to ``acc32`` (the counts in lane 0 of their rows, the
    log2 sums spread over the row's lanes, the OR in lane 0); returns ``g``, or 0 (nothing done) for
    other words.  The sign is bit 15 (E + M = 15 in both formats).

    A step is a few 512-bit operations on 32 i16 lanes where :func:`stats16` takes two i32 steps of
    ~20: the exponent fields are summed in i16 lanes (blocks of 128 steps, then widened), the counts
    (+0, non-zero, negative, all-+0 16-value blocks) are popcounts of the compare masks on the scalar
    pipes, and a subnormal's log2 (its bit length, from the float32 conversion as in
    :func:`stats16`) is computed only in a step that holds one (``e == 0`` and not +-0: the log2
    is then the exponent field itself, and 0 for +-0)."""
    sig = types.int64(words, m, em, acc32)

    def codegen(context, builder, signature, args):
        wa, mv, emv, a32 = args
        st = signature.args
        if st[0].dtype.bitwidth != 16:
            return ir.Constant(_I64, 0)
        v16 = ir.VectorType(_I16, _HALF_GROUP)
        splat16 = lambda v: _splat(_I16, v, _HALF_GROUP)  # noqa: E731
        bcast16 = lambda v: _broadcast(builder, _I16, builder.trunc(v, _I16), _HALF_GROUP)  # noqa: E731
        e_s = builder.lshr(emv, ir.Constant(_I64, 8))
        m_s = builder.and_(emv, ir.Constant(_I64, 0xFF))
        mask = lambda bits_: builder.sub(builder.shl(ir.Constant(_I64, 1), bits_), ir.Constant(_I64, 1))  # noqa: E731
        m_w = bcast16(m_s)
        emask = bcast16(mask(e_s))
        mmask = bcast16(mask(m_s))
        magmask = splat16(0x7FFF)
        bias = builder.add(builder.trunc(m_s, _I32), ir.Constant(_I32, 126))
        v32 = ir.VectorType(_I32, _HALF_GROUP)
        biasv = _broadcast(builder, _I32, bias, _HALF_GROUP)
        zero16 = splat16(0)
        g = builder.mul(builder.udiv(mv, ir.Constant(_I64, _HALF_GROUP)), ir.Constant(_I64, _HALF_GROUP))
        steps = builder.udiv(g, ir.Constant(_I64, _HALF_GROUP))
        blocks = builder.udiv(builder.add(steps, ir.Constant(_I64, _HALF_BLOCK - 1)), ir.Constant(_I64, _HALF_BLOCK))
        counts = [cgutils.alloca_once_value(builder, ir.Constant(_I64, 0)) for _ in range(4)]
        orv = cgutils.alloca_once_value(builder, zero16)
        lgsum = cgutils.alloca_once_value(builder, _splat(_I32, 0))
        lg16 = cgutils.alloca_once_value(builder, zero16)
        lgstep = cgutils.alloca_once_value(builder, zero16)
        base = _data(context, builder, st[0], wa)
        ctpop = _declare(builder, "llvm.ctpop.i32", _I32, [_I32])

        def count(r, bits):
            n = builder.zext(builder.call(ctpop, [bits]), _I64)
            builder.store(builder.add(builder.load(counts[r]), n), counts[r])

        with cgutils.for_range(builder, blocks) as outer:
            builder.store(zero16, lg16)
            lo = builder.mul(outer.index, ir.Constant(_I64, _HALF_BLOCK))
            n_in = builder.sub(steps, lo)
            n_in = builder.select(builder.icmp_unsigned(">", n_in, ir.Constant(_I64, _HALF_BLOCK)),
                                  ir.Constant(_I64, _HALF_BLOCK), n_in)
            with cgutils.for_range(builder, n_in) as loop:
                at = builder.mul(builder.add(lo, loop.index), ir.Constant(_I64, 2 * _HALF_GROUP))
                w = builder.load(_at(builder, base, at, v16), align=2)
                e = builder.and_(builder.lshr(w, m_w), emask)
                nz = builder.icmp_unsigned("!=", builder.and_(w, magmask), zero16)
                is_zero = builder.icmp_unsigned("==", w, zero16)
                neg = builder.icmp_signed("<", w, zero16)
                sub = builder.and_(nz, builder.icmp_unsigned("==", e, zero16))
                builder.store(e, lgstep)
                with builder.if_then(builder.icmp_unsigned("!=", builder.bitcast(sub, _I32), ir.Constant(_I32, 0)),
                                     likely=False):
                    mant = builder.or_(builder.and_(w, mmask), splat16(1))
                    fbits = builder.bitcast(builder.sitofp(builder.zext(mant, v32), ir.VectorType(ir.FloatType(),
                                                           _HALF_GROUP)), v32)
                    bl = builder.trunc(builder.sub(builder.lshr(fbits, _splat(_I32, 23, _HALF_GROUP)), biasv), v16)
                    builder.store(builder.select(sub, bl, e), lgstep)
                builder.store(builder.add(builder.load(lg16), builder.load(lgstep)), lg16)
                builder.store(builder.or_(builder.load(orv), w), orv)
                zbits = builder.bitcast(is_zero, _I32)
                count(0, zbits)
                count(1, builder.bitcast(nz, _I32))
                count(2, builder.bitcast(neg, _I32))
                full16 = ir.Constant(_I32, 0xFFFF)
                lo_all = builder.icmp_unsigned("==", builder.and_(zbits, full16), full16)
                hi_all = builder.icmp_unsigned("==", builder.lshr(zbits, ir.Constant(_I32, 16)), full16)
                n_all = builder.add(builder.zext(lo_all, _I64), builder.zext(hi_all, _I64))
                builder.store(builder.add(builder.load(counts[3]), n_all), counts[3])
            wide = builder.sext(builder.load(lg16), v32)
            lo_h = builder.shuffle_vector(wide, wide, _const_vec(_I32, list(range(LANES))))
            hi_h = builder.shuffle_vector(wide, wide, _const_vec(_I32, list(range(LANES, 2 * LANES))))
            builder.store(builder.add(builder.load(lgsum), builder.add(lo_h, hi_h)), lgsum)
        p32 = builder.bitcast(_data(context, builder, st[3], a32), _I32.as_pointer())

        def add_at(i, v):
            ptr = builder.gep(p32, [ir.Constant(_I64, i)])
            builder.store(builder.add(builder.load(ptr, align=4), v), ptr, align=4)

        add_at(0, builder.trunc(builder.load(counts[0]), _I32))
        add_at(LANES, builder.trunc(builder.load(counts[1]), _I32))
        add_at(4 * LANES, builder.trunc(builder.load(counts[2]), _I32))
        add_at(5 * LANES, builder.trunc(builder.load(counts[3]), _I32))
        ptr = builder.bitcast(builder.gep(p32, [ir.Constant(_I64, 2 * LANES)]), _vec(_I32).as_pointer())
        builder.store(builder.add(builder.load(ptr, align=4), builder.load(lgsum)), ptr, align=4)
        orr = builder.load(orv)
        red = _declare(builder, "llvm.vector.reduce.or.v32i16", _I16, [v16])
        ptr = builder.gep(p32, [ir.Constant(_I64, 3 * LANES)])
        builder.store(builder.or_(builder.load(ptr, align=4), builder.zext(builder.call(red, [orr]), _I32)), ptr,
                      align=4)
        return g

    return sig, codegen


@intrinsic
def fill16(typingctx, arr, at, c):
    """``arr[at + j] = c + ((at + j) << 7)`` for ``j < 16`` (a u32 array; the caller keeps 16 entries
    from ``at`` inside it): a run of decode-table entries (see ``codec._numba._open_chunk``)."""
    sig = types.void(arr, at, c)

    def codegen(context, builder, signature, args):
        aa, atv, cv = args
        idx = builder.add(_broadcast(builder, _I32, builder.trunc(atv, _I32)), _const_vec(_I32, list(range(LANES))))
        v = builder.add(builder.shl(idx, _splat(_I32, 7)), _broadcast(builder, _I32, builder.trunc(cv, _I32)))
        p = _at(builder, _data(context, builder, signature.args[0], aa), builder.shl(atv, ir.Constant(_I64, 2)),
                _vec(_I32))
        builder.store(v, p, align=4)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def copy_bytes(typingctx, dst, dst_at, src, src_at, nbytes):
    """``memcpy`` of ``nbytes`` bytes from byte offset ``src_at`` of array ``src`` to byte offset
    ``dst_at`` of array ``dst`` (any dtypes; the caller checks the bounds; no overlap).  Numba's
    slice assignment may first copy the source to a temporary when it cannot rule out overlap."""
    sig = types.void(dst, dst_at, src, src_at, nbytes)

    def codegen(context, builder, signature, args):
        da, dat, sa, sat, nb = args
        d = builder.gep(_data(context, builder, signature.args[0], da), [dat])
        s = builder.gep(_data(context, builder, signature.args[2], sa), [sat])
        cgutils.raw_memcpy(builder, d, s, nb, 1)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def prefetch(typingctx, arr, byte_offset):
    """Prefetch the cache line at ``byte_offset`` bytes into ``arr``'s data (any offset: a prefetch
    never faults and reads nothing architecturally)."""
    sig = types.void(arr, byte_offset)

    def codegen(context, builder, signature, args):
        p = builder.gep(_data(context, builder, signature.args[0], args[0]), [args[1]])
        fn = _declare(builder, "llvm.prefetch.p0", ir.VoidType(), [_I8.as_pointer(), _I32, _I32, _I32])
        builder.call(fn, [p, ir.Constant(_I32, 0), ir.Constant(_I32, 2), ir.Constant(_I32, 1)])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def fetch_add(typingctx, arr, i, v):
    """Atomically ``old = arr[i]; arr[i] += v; return old`` (an int64 array; sequentially consistent):
    the claim counter the threads of one encode share (``codec._numba._encode_window``)."""
    sig = types.int64(arr, i, v)

    def codegen(context, builder, signature, args):
        aa, iv, vv = args
        p = _at(builder, _data(context, builder, signature.args[0], aa), builder.shl(iv, ir.Constant(_I64, 3)), _I64)
        return builder.atomic_rmw("add", p, vv, "seq_cst")

    return sig, codegen


@intrinsic
def frozen(typingctx, arr):
    """The same array typed read-only (no copy; the two types share one data model): a helper called with
    both a read-only tensor and a writeable scratch array is then compiled once, not twice."""
    if not isinstance(arr, types.Array):
        return None
    sig = arr.copy(readonly=True)(arr)

    def codegen(context, builder, signature, args):
        context.nrt.incref(builder, signature.args[0], args[0])     # a new reference to the same array
        return args[0]

    return sig, codegen
