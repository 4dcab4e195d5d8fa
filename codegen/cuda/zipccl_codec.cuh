// zipccl CUDA codec kernels: the hand-written logic every generated kernel file instantiates.
//
// The generated files (codegen/templates/cuda_codec.cu.tmpl, rendered per dtype and arch) define a
// layout struct L of constants (exponent and mantissa widths, masks, table sizes, symbol ids, the word
// type) and one extern "C" entry point per function below, which only forwards its arguments.
// One warp decodes one CODED chunk: rANS lane l is warp lane l; refills and plane/escape indices are
// placed with ballots and popcounts (DietGPU's scheme); the encoder kernels mirror the Triton ones row
// for row (codegen.device drives both).  Built-in types only: NVRTC has no standard headers.  Every
// offset read from a stream is range-checked; a failed check sets err[chunk] and the host raises
// codec.FormatError.
#pragma once
typedef unsigned char u8;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

namespace zipccl {

template <class L>
__device__ __forceinline__ void decode(const u8* __restrict__ buf,       // the whole stream
                      const i64* __restrict__ meta,     // (n_chunks, L::META_WIDTH): codegen/rows.py META
                      const i64* __restrict__ tables,   // (n_tables, L::TOTAL) sym | (slot-cum) << 7 | freq << 19
                      const i64* __restrict__ hi,       // (n_tables, L::N_SYMBOLS) exponent/leading bit, -1 impossible
                      const i64* __restrict__ nzb,      // non-zero block indices of zero-block chunks
                      typename L::word_t* __restrict__ out,
                      int* __restrict__ err)
{
    __shared__ u32 slot[L::TOTAL];
    __shared__ i64 hsym[L::N_SYMBOLS];
    const int c = blockIdx.x;
    const int lane = threadIdx.x;
    const i64* m = meta + (i64)c * L::META_WIDTH;
    const i64 states_at = m[L::META_STATES_AT], words_at = m[L::META_WORDS_AT], n_words = m[L::META_N_WORDS];
    const i64 plane_at = m[L::META_PLANE_AT], esc_at = m[L::META_ESC_AT], n_sm = m[L::META_N_SM];
    const i64 n_esc = m[L::META_N_ESC], n_coded = m[L::META_N_CODED], tab = m[L::META_TABLE];
    const i64 out_at = m[L::META_OUT_AT], nzb_at = m[L::META_NZB_AT];
    const int shift = (int)m[L::META_SHIFT], mode = (int)m[L::META_MODE], k = (int)m[L::META_LANES];
    const int sign = (int)m[L::META_SIGN];       // codec/format.py SIGN_*: a plane without signs is 1 bit narrower
    const int narrow = (int)m[L::META_NARROW];   // ... and leaves out this many high bits
    for (int t = lane; t < L::TOTAL; t += 32) slot[t] = (u32)tables[tab * L::TOTAL + t];
    for (int t = lane; t < L::N_SYMBOLS; t += 32) hsym[t] = hi[tab * L::N_SYMBOLS + t];
    __syncwarp();

    const bool live = lane < k;
    u64 x = 0;
    if (live) {
        const u8* p = buf + states_at + 4 * lane;
        x = (u64)p[0] | ((u64)p[1] << 8) | ((u64)p[2] << 16) | ((u64)p[3] << 24);
    }
    const int width = L::M - shift - (sign != L::SIGN_STORED) - narrow, full = width >> 3, rem = width & 7;
    const int ssr = L::M - 1 - shift;
    const u64 neg = sign == L::SIGN_NEGATIVE;
    const unsigned below = (1u << lane) - 1u;
    i64 ptr = 0, kk = 0, ke = 0;
    int bad = 0;
    const i64 rounds = (n_coded + k - 1) / k;
    for (i64 r = 0; r < rounds; ++r) {
        const i64 i = r * k + lane;
        const bool active = live && i < n_coded;
        const u32 ent = active ? slot[x & L::MASK] : 0u;
        const int s = (int)(ent & 0x7Fu);
        u64 xn = (u64)(ent >> 19) * (x >> L::PROB_BITS) + ((ent >> 7) & 0xFFFu);
        const bool need = active && xn < ((u64)L::RANS_L);
        const unsigned need_mask = __ballot_sync(0xffffffffu, need);
        const i64 widx = ptr + __popc(need_mask & below);
        if (need) {
            if (widx < n_words) {
                const u8* w = buf + words_at + 2 * widx;
                xn = (xn << 16) | (u64)w[0] | ((u64)w[1] << 8);
            } else {
                bad = 1;
            }
        }
        if (active) x = xn;
        ptr += __popc(need_mask);

        const bool nz = active && s != L::SYM_ZERO;
        const unsigned nz_mask = __ballot_sync(0xffffffffu, nz);
        const i64 kidx = kk + __popc(nz_mask & below);
        const bool isesc = active && s == L::SYM_ESC;
        const unsigned esc_mask = __ballot_sync(0xffffffffu, isesc);
        const i64 eidx = ke + __popc(esc_mask & below);
        u64 v = 0;
        if (nz) {
            i64 h = hsym[s];
            if (isesc) {
                if (eidx < n_esc) {
                    const u8* e = buf + esc_at + 2 * eidx;
                    const u32 ev = (u32)e[0] | ((u32)e[1] << 8);
                    if ((ev >> 1) > ((u32)L::TOP)) bad = 1;
                    h = ((i64)(ev >> 1) << L::M) | ((i64)(ev & 1u) << (L::M - 1));
                } else {
                    bad = 1;
                }
            }
            if (h < 0) bad = 1;
            if (kidx < n_sm) {
                u64 res = 0;
                for (int b = 0; b < full; ++b) res |= (u64)buf[plane_at + b * n_sm + kidx] << (8 * b);
                if (rem) {
                    const i64 bitpos = kidx * rem;
                    const u8* q = buf + plane_at + full * n_sm + (bitpos >> 3);
                    const int o = (int)(bitpos & 7);
                    u32 two = q[0];
                    if (o + rem > 8) two |= (u32)q[1] << 8;
                    res |= (u64)((two >> o) & ((1u << rem) - 1u)) << (8 * full);
                }
                v = (((res >> ssr) | neg) << (L::E + L::M)) | (u64)h | ((res & ((1ull << ssr) - 1ull)) << shift);
            } else {
                bad = 1;
            }
        }
        if (active) {
            const i64 dst = mode == 0 ? i : nzb[nzb_at + (i >> mode)] * (1ll << mode) + (i & ((1ll << mode) - 1));
            out[out_at + dst] = (typename L::word_t)v;
        }
        kk += __popc(nz_mask);
        ke += __popc(esc_mask);
    }
    if (live && x != ((u64)L::RANS_L)) bad = 1;
    const unsigned any_bad = __ballot_sync(0xffffffffu, bad != 0);
    if (lane == 0) err[c] = (any_bad != 0u) || ptr != n_words || kk != n_sm || ke != n_esc;
}


// ------------------------------------------------------------------------------------ encoder
// The same four steps and row layouts as the Triton encoder (codegen.triton_backend drives both):
// enc_stats (a block per chunk), enc_rans and enc_planes (a warp per payload: ballots and popcounts
// place the words, residuals and escapes), enc_copy and dec_copy (a block per RAW/CONST chunk).
__device__ __forceinline__ i64 zipccl_position(i64 i, int mode, const i64* __restrict__ nzb, i64 nzb_at)
{
    return mode == 0 ? i : nzb[nzb_at + (i >> mode)] * (1ll << mode) + (i & ((1ll << mode) - 1));
}

template <class L>
__device__ __forceinline__ int zipccl_symbol(u64 w, i64 ref, const i64* f, bool has_zero)
{
    const i64 e = (i64)((w >> L::M) & ((u32)L::TOP));
    const i64 j = e - ref + L::WINDOW_LOW;
    int s = (j >= 0 && j < L::WINDOW) ? (int)(L::SYM_WINDOW0 + 2 * j + (i64)((w >> (L::M - 1)) & 1u)) : L::SYM_ESC;
    if (f[s] <= 0) s = L::SYM_ESC;
    if (has_zero && w == 0) s = L::SYM_ZERO;
    return s;
}

__device__ __forceinline__ void zipccl_store_le(u8* __restrict__ out, i64 at, u64 v, int nbytes)
{
    for (int b = 0; b < nbytes; ++b) out[at + b] = (u8)((v >> (8 * b)) & 0xFFu);
}

template <class L>
__device__ __forceinline__ void enc_stats(const typename L::word_t* __restrict__ words, i64 n_total, i64 cs,
                         i64* __restrict__ stats,          // (C, L::ST_WIDTH) as in the Triton kernel
                         u8* __restrict__ nz16, u8* __restrict__ nz64, i64 nb16, i64 nb64)
{
    __shared__ i64 red[9][256];
    const i64 c = blockIdx.x;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, n_warps = blockDim.x >> 5;
    const i64 start = c * cs;
    const i64 n = n_total - start < cs ? n_total - start : cs;
    const u64 first = (u64)words[start];
    i64 differ = 0, zeros = 0, n_log = 0, s1 = 0, s2 = 0, skip16 = 0, skip64 = 0, neg = 0;
    u64 low = 0;
    for (i64 seg = warp; seg * 64 < n; seg += n_warps) {      // a warp reads 64 consecutive words
        unsigned m[2];
        for (int h = 0; h < 2; ++h) {
            const i64 i = seg * 64 + h * 32 + lane;
            const bool valid = i < n;
            const u64 w = valid ? (u64)words[start + i] : 0ull;
            differ += valid && w != first;
            zeros += valid && w == 0;
            neg += (w >> (L::E + L::M)) & 1u;                    // 0 for the invalid lanes (w = 0)
            const u64 e = (w >> L::M) & ((u32)L::TOP);
            const u64 mant = w & ((u64)L::MANMASK);
            if (valid && (w & ((u64)L::MAGMASK)) != 0) {
                const i64 lg = e ? (i64)e : 1 - L::M + (63 - __clzll((long long)mant));
                n_log += 1;
                s1 += lg;
                s2 += lg * lg;
            }
            low |= mant & ((u64)L::LOWMASK);
            m[h] = __ballot_sync(0xffffffffu, w != 0);
        }
        if (lane == 0) {
            for (int q = 0; q < 4; ++q) {
                const i64 b = seg * 4 + q;
                if (b * 16 >= n) break;
                const unsigned any = (m[q >> 1] >> (16 * (q & 1))) & 0xFFFFu;
                nz16[c * nb16 + b] = any != 0;
                if (!any) skip16 += n - b * 16 < 16 ? n - b * 16 : 16;
            }
            nz64[c * nb64 + seg] = (m[0] | m[1]) != 0;
            if (!(m[0] | m[1])) skip64 += n - seg * 64 < 64 ? n - seg * 64 : 64;
        }
    }
    red[0][tid] = differ; red[1][tid] = zeros; red[2][tid] = n_log; red[3][tid] = s1;
    red[4][tid] = s2; red[5][tid] = (i64)low; red[6][tid] = skip16; red[7][tid] = skip64; red[8][tid] = neg;
    __syncthreads();
    for (int half = blockDim.x >> 1; half > 0; half >>= 1) {
        if (tid < half) {
            for (int q = 0; q < 9; ++q) red[q][tid] = q == 5 ? (red[q][tid] | red[q][tid + half]) : red[q][tid] + red[q][tid + half];
        }
        __syncthreads();
    }
    if (tid == 0) {
        i64* row = stats + c * L::ST_WIDTH;
        row[L::ST_N] = n; row[L::ST_CONST] = red[0][0] == 0; row[L::ST_FIRST] = (i64)first;
        row[L::ST_ZEROS] = red[1][0]; row[L::ST_N_LOG] = red[2][0]; row[L::ST_S1] = red[3][0];
        row[L::ST_S2] = red[4][0]; row[L::ST_LOW] = red[5][0]; row[L::ST_SKIP16] = red[6][0];
        row[L::ST_SKIP64] = red[7][0]; row[L::ST_NEG] = red[8][0];
    }
}

template <class L>
__device__ __forceinline__ void enc_rans(const typename L::word_t* __restrict__ words,
                        const i64* __restrict__ rows,      // (R, 9) as in the Triton kernel
                        const i64* __restrict__ freq, const i64* __restrict__ cum, const i64* __restrict__ nzb,
                        i64* __restrict__ counts,          // (R, 3) out: words, non-ZERO values, escapes
                        u8* __restrict__ scratch)          // out: L::MAX_LANES u32 states, words in emission order
{
    __shared__ i64 f_s[L::N_SYMBOLS];
    __shared__ i64 c_s[L::N_SYMBOLS];
    __shared__ i64 red[2][32];
    const i64 r = blockIdx.x;
    const int lane = threadIdx.x;
    const i64* row = rows + r * L::RR_WIDTH;
    const i64 start = row[L::RR_START], n = row[L::RR_N_CODED], nzb_at = row[L::RR_NZB_AT];
    const i64 tab = row[L::RR_TABLE], ref = row[L::RR_REF], at = row[L::RR_RANS_AT];
    const int k = (int)row[L::RR_LANES], mode = (int)row[L::RR_MODE];
    for (int t = lane; t < L::N_SYMBOLS; t += 32) {
        f_s[t] = freq[tab * L::N_SYMBOLS + t];
        c_s[t] = cum[tab * L::N_SYMBOLS + t];
    }
    __syncwarp();
    const bool has_zero = f_s[L::SYM_ZERO] > 0;
    const bool live = lane < k;
    const unsigned above = lane == 31 ? 0u : ~((2u << lane) - 1u);
    u32 x = ((u32)L::RANS_L);
    i64 cnt = 0, n_sm = 0, n_esc = 0;
    const i64 rounds = (n + k - 1) / k;
    for (i64 t = rounds - 1; t >= 0; --t) {           // rANS is a stack: the last round first
        const i64 i = t * k + lane;
        const bool active = live && i < n;
        u32 f = 1, cm = 0;
        if (active) {
            const int s = zipccl_symbol<L>((u64)words[start + zipccl_position(i, mode, nzb, nzb_at)], ref, f_s, has_zero);
            n_sm += s != L::SYM_ZERO;
            n_esc += s == L::SYM_ESC;
            f = f_s[s] > 0 ? (u32)f_s[s] : 1u;
            cm = (u32)c_s[s];
        }
        const bool emit = active && (u64)x >= ((u64)f << L::RENORM_SHIFT);
        const unsigned mask = __ballot_sync(0xffffffffu, emit);
        if (emit) {
            const i64 em = cnt + __popc(mask & above);       // flushing lanes above this one went first
            if (em < n) zipccl_store_le(scratch, at + 4 * L::MAX_LANES + 2 * em, x & 0xFFFFu, 2);
            x >>= 16;
        }
        cnt += __popc(mask);
        if (active) x = ((x / f) << L::PROB_BITS) + x % f + cm;
    }
    if (live) zipccl_store_le(scratch, at + 4 * lane, x, 4);
    red[0][lane] = n_sm;
    red[1][lane] = n_esc;
    __syncwarp();
    if (lane == 0) {
        i64 a = 0, b = 0;
        for (int l = 0; l < 32; ++l) { a += red[0][l]; b += red[1][l]; }
        i64* crow = counts + r * L::CT_WIDTH;
        crow[L::CT_N_WORDS] = cnt; crow[L::CT_N_SM] = a; crow[L::CT_N_ESC] = b;
    }
}

template <class L>
__device__ __forceinline__ void enc_place(const i64* __restrict__ rows,     // (R, L::PL_WIDTH): codegen/rows.py PLACE
                         const u8* __restrict__ scratch, u8* __restrict__ out)
{
    const i64* row = rows + (i64)blockIdx.x * L::PL_WIDTH;
    const i64 at = row[L::PL_RANS_AT], k = row[L::PL_LANES], nw = row[L::PL_N_WORDS], dst = row[L::PL_STATES_AT];
    for (i64 j = threadIdx.x; j < 4 * k; j += blockDim.x) out[dst + j] = scratch[at + j];
    for (i64 j = threadIdx.x; j < 2 * nw; j += blockDim.x)   // the stream holds the words reversed
        out[dst + 4 * k + j] = scratch[at + 4 * L::MAX_LANES + 2 * (nw - 1 - j / 2) + (j & 1)];
}

template <class L>
__device__ __forceinline__ void enc_planes(const typename L::word_t* __restrict__ words,
                          const i64* __restrict__ rows,    // (R, L::PN_WIDTH): codegen/rows.py PLANES
                          const i64* __restrict__ freq, const i64* __restrict__ nzb,
                          u8* __restrict__ out, u8* __restrict__ scratch)
{
    __shared__ i64 f_s[L::N_SYMBOLS];
    const i64 r = blockIdx.x;
    const int lane = threadIdx.x;
    const i64* row = rows + r * L::PN_WIDTH;
    const i64 start = row[L::PN_START], n = row[L::PN_N_CODED], nzb_at = row[L::PN_NZB_AT], tab = row[L::PN_TABLE];
    const i64 ref = row[L::PN_REF], n_sm = row[L::PN_N_SM], n_esc = row[L::PN_N_ESC], n_words = row[L::PN_N_WORDS];
    const i64 cb = row[L::PN_CODEBOOK], pay_at = row[L::PN_PAY_AT], plane_at = row[L::PN_PLANE_AT];
    const i64 scratch_at = row[L::PN_SCRATCH_AT];
    const int mode = (int)row[L::PN_MODE], shift = (int)row[L::PN_SHIFT], sign = (int)row[L::PN_SIGN];
    const int narrow = (int)row[L::PN_NARROW];
    for (int t = lane; t < L::N_SYMBOLS; t += 32) f_s[t] = freq[tab * L::N_SYMBOLS + t];
    if (lane == 0) {       // the chunk head (codec/format.py CHUNK_HEAD)
        zipccl_store_le(out, pay_at + L::CH_CODEBOOK, (u64)cb, 2);
        zipccl_store_le(out, pay_at + L::CH_REF, (u64)ref & 0xFFFFu, 2);
        zipccl_store_le(out, pay_at + L::CH_SHIFT, (u64)shift, 1);
        zipccl_store_le(out, pay_at + L::CH_MODE, (u64)mode, 1);
        zipccl_store_le(out, pay_at + L::CH_SIGN, (u64)sign, 1);
        zipccl_store_le(out, pay_at + L::CH_NARROW, (u64)narrow, 1);
        zipccl_store_le(out, pay_at + L::CH_N_SM, (u64)n_sm, 4);
        zipccl_store_le(out, pay_at + L::CH_N_ESC, (u64)n_esc, 4);
        zipccl_store_le(out, pay_at + L::CH_N_WORDS, (u64)n_words, 4);
    }
    __syncwarp();
    const bool has_zero = f_s[L::SYM_ZERO] > 0;
    const int width = L::M - shift - (sign != L::SIGN_STORED) - narrow, full = width >> 3, rem = width & 7;
    const i64 esc_at = plane_at + full * n_sm + (n_sm * rem + 7) / 8;
    const unsigned below = (1u << lane) - 1u;
    i64 kk = 0, ke = 0;
    for (i64 t = 0; t < n; t += 32) {
        const i64 i = t + lane;
        const bool active = i < n;
        u64 w = 0;
        int s = L::SYM_ZERO;
        if (active) {
            w = (u64)words[start + zipccl_position(i, mode, nzb, nzb_at)];
            s = zipccl_symbol<L>(w, ref, f_s, has_zero);
        }
        const bool keep = active && s != L::SYM_ZERO;
        const bool isesc = active && s == L::SYM_ESC;
        const unsigned km = __ballot_sync(0xffffffffu, keep);
        const unsigned xm = __ballot_sync(0xffffffffu, isesc);
        if (keep) {
            const i64 kidx = kk + __popc(km & below);
            const u64 res = (((w >> (L::E + L::M)) & 1u) << (L::M - 1 - shift)) | ((w & ((u64)L::LOWMASK)) >> shift);
            for (int b = 0; b < full; ++b) out[plane_at + b * n_sm + kidx] = (u8)((res >> (8 * b)) & 0xFFu);
            if (rem) scratch[scratch_at + kidx] = (u8)((res >> (8 * full)) & 0xFFu);
        }
        if (isesc) {
            const i64 eidx = ke + __popc(xm & below);
            zipccl_store_le(out, esc_at + 2 * eidx, (((w >> L::M) & ((u32)L::TOP)) << 1) | ((w >> (L::M - 1)) & 1u), 2);
        }
        kk += __popc(km);
        ke += __popc(xm);
    }
    __syncwarp();                                      // every lane's scratch bytes are written
    const i64 n_bytes = (n_sm * rem + 7) / 8;          // pack: bit p is bit p % rem of residual p / rem
    for (i64 j = lane; j < n_bytes; j += 32) {
        unsigned acc = 0;
        for (int bit = 0; bit < 8; ++bit) {
            const i64 p = 8 * j + bit, v = p / rem;
            if (v < n_sm) acc |= ((unsigned)(scratch[scratch_at + v] >> (p - v * rem)) & 1u) << bit;
        }
        out[plane_at + full * n_sm + j] = (u8)acc;
    }
}

template <class L>
__device__ __forceinline__ void enc_copy(const typename L::word_t* __restrict__ words,
                        const i64* __restrict__ rows,      // (R, L::CP_WIDTH): codegen/rows.py COPY
                        u8* __restrict__ out)
{
    const i64* row = rows + (i64)blockIdx.x * L::CP_WIDTH;
    const i64 start = row[L::CP_START], pay_at = row[L::CP_PAY_AT];
    const i64 n = row[L::CP_KIND] == L::KIND_CONST ? 1 : row[L::CP_N];
    for (i64 i = threadIdx.x; i < n; i += blockDim.x)
        zipccl_store_le(out, pay_at + L::ITEMSIZE * i, (u64)words[start + i], L::ITEMSIZE);
}

template <class L>
__device__ __forceinline__ void dec_copy(const u8* __restrict__ buf,
                        const i64* __restrict__ rows,      // (R, L::DC_WIDTH): codegen/rows.py DEC_COPY
                        typename L::word_t* __restrict__ out)
{
    const i64* row = rows + (i64)blockIdx.x * L::DC_WIDTH;
    const i64 out_at = row[L::DC_OUT_AT], n = row[L::DC_N], pay_at = row[L::DC_PAY_AT];
    const i64 step = row[L::DC_KIND] == L::KIND_CONST ? 0 : L::ITEMSIZE;
    for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
        u64 w = 0;
        for (int b = 0; b < L::ITEMSIZE; ++b) w |= (u64)buf[pay_at + step * i + b] << (8 * b);
        out[out_at + i] = (typename L::word_t)w;
    }
}

}  // namespace zipccl
