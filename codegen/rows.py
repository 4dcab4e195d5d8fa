"""The host<->kernel interface of the device backend, declared once: the int64 rows that
:mod:`codegen.device` builds (or reads back) and the generated kernels of both dialects read (or write).

Each :class:`codec.records.Row` names its columns; the host builds tables with ``ROW.order(name=...)``
and the generator injects ``<PREFIX>_<COLUMN>`` (the column's index) and ``<PREFIX>_WIDTH`` into the
kernels (:func:`constants`): the Triton library reads them as module constants, the CUDA header as
members of the layout struct ``L`` of each generated source.  Nothing but this file knows an index.
"""
from __future__ import annotations

from codec.records import Row

# encoder, step 1 (enc_stats writes one row per chunk): the chunk's integer statistics
STATS = Row("enc_stats", ["n", "const", "first", "zeros", "n_log", "s1", "s2", "low", "skip16", "skip64", "neg"],
            "ST")
# step 2 (enc_rans reads one row per candidate payload, writes COUNTS): rANS-code the exponent symbols
RANS = Row("enc_rans", ["start", "n_coded", "lanes", "mode", "nzb_at", "table", "ref", "rans_at"], "RR")
COUNTS = Row("enc_counts", ["n_words", "n_sm", "n_esc"], "CT")
# step 3 (enc_place): the chosen candidates' states and words into the stream
PLACE = Row("enc_place", ["rans_at", "lanes", "n_words", "states_at"], "PL")
# step 4 (enc_planes): chunk head, residual plane and escapes of the chosen candidates
PLANES = Row("enc_planes", ["start", "n_coded", "mode", "nzb_at", "table", "ref", "shift", "n_sm", "n_esc",
                            "n_words", "codebook", "pay_at", "plane_at", "scratch_at", "sign", "narrow"], "PN")
# RAW and CONST chunks: encoder (enc_copy) and decoder (dec_copy)
COPY = Row("enc_copy", ["start", "n", "pay_at", "kind"], "CP")
DEC_COPY = Row("dec_copy", ["out_at", "n", "pay_at", "kind"], "DC")
# the decoder's row per coded chunk (decode_coded_chunks, dec_symbols, dec_values)
META = Row("decode_meta", ["states_at", "words_at", "n_words", "plane_at", "esc_at", "n_sm", "n_esc", "n_coded",
                           "shift", "table", "out_at", "mode", "nzb_at", "lanes", "sign", "narrow"],
           "META")

ROWS = (STATS, RANS, COUNTS, PLACE, PLANES, COPY, DEC_COPY, META)


def constants() -> dict[str, int]:
    """Every row's column indices and width, by the names the kernels use."""
    out = {}
    for row in ROWS:
        for name, value in row.constants().items():
            if name in out:
                raise ValueError(f"two rows define {name}")
            out[name] = value
    return out
