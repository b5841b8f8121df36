/* Optimized CPU NF4 (bitsandbytes).
 *
 * Codes are the flattened row-major [n, k] weight, two per byte, so each output column's weights
 * are contiguous. A byte is decoded with one 8-byte load from a 256-entry table of value pairs
 * (built per call from the descriptor's quant_map, 2 KiB, L1-resident) instead of two nibble
 * lookups; the block's absmax is applied by a vector multiply over each run of the row that
 * lies in one block. w = quant_map[code] * absmax is the same float product as the reference.
 * Small m: decode a chunk of a row into L1 and dot it with the m activation rows (with AVX2,
 * cpu/lq_cpu_avx2.c: lq_gemm_nf4f_avx2 looks 32 codes up by vpshufb on byte planes instead).
 * With AVX2 (and no AVX-512) lq_gemm_nf4f_avx2 takes every m: from 9 to LQ_BUF_MAX_M rows 16
 * columns x 128 channels decoded into an L1 buffer that every row runs over, above decoded
 * into the panels of the AVX2 GEMM. Else large m: rows of W dequantized into a workspace tile,
 * then sgemm. */
#include "lq_kernels_impl.h"

#include <omp.h>
#include <string.h>

/* Multiply-adds may fuse (see lq_cpu_gptq.c); w = map * absmax stays a plain product. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=fast")
#endif

#define CHUNK 512 /* elements of a row decoded at once (2 KiB) */

typedef struct nf4_pairs {
    float v[256][2]; /* byte b -> {map[b >> 4], map[b & 15]} (first element in the high nibble) */
} nf4_pairs;

static void nf4_pairs_init(const lq_qlinear *w, nf4_pairs *p) {
    for (int b = 0; b < 256; b++) {
        p->v[b][0] = w->quant_map[b >> 4];
        p->v[b][1] = w->quant_map[b & 15];
    }
}

LQ_CLONES static void scale_run(float *o, int64_t len, float a) {
    for (int64_t t = 0; t < len; t++)
        o[t] *= a;
}

/* out[c - c0] = map[code(i, c)] * absmax(block of (i, c)) for c in [c0, c1). */
static void nf4_decode(const lq_qlinear *w, const nf4_pairs *p, int64_t i, int64_t c0, int64_t c1,
                       float *out) {
    const uint8_t *q  = w->qweight;
    const int64_t  e0 = i * w->k + c0, e1 = i * w->k + c1;
    int64_t        e = e0;
    if (e & 1) { /* odd start (odd k): low nibble of a shared byte */
        out[0] = w->quant_map[q[e >> 1] & 15];
        e++;
    }
    for (; e + 1 < e1; e += 2)
        memcpy(out + (e - e0), p->v[q[e >> 1]], 2 * sizeof(float));
    if (e < e1)
        out[e - e0] = w->quant_map[q[e >> 1] >> 4];
    /* blocks run over the flattened index: scale each run that shares one absmax */
    const int64_t bs = w->group_size;
    for (int64_t s = e0; s < e1;) {
        const int64_t blk = s / bs;
        const int64_t end = (blk + 1) * bs < e1 ? (blk + 1) * bs : e1;
        scale_run(out + (s - e0), end - s, lq_nf4_absmax(w, blk));
        s = end;
    }
}

/* Rows [i0, i1) with k % 8 == 0: 8 weights per 32-bit load, table lookup by shuffles (the
 * same product map[code] * absmax as the reference). */
LQ_CLONES static void nf4_rows_vec(const lq_qlinear *w, int64_t i0, int64_t i1, float *out) {
    const int64_t  k = w->k, bs = w->group_size;
    const uint8_t *qb = w->qweight;
    const lq_v8f   lo = lq_v8f_load(w->quant_map), hi = lq_v8f_load(w->quant_map + 8);
    const lq_v8u   sh   = {4, 0, 12, 8, 20, 16, 28, 24};
    const lq_v8u   mask = lq_v8u_splat(15u);
    for (int64_t i = i0; i < i1; i++) {
        const int64_t e0 = i * k;
        float        *o  = out + (i - i0) * k;
        for (int64_t s = e0; s < e0 + k;) {
            const int64_t blk = s / bs, end = (blk + 1) * bs < e0 + k ? (blk + 1) * bs : e0 + k;
            const lq_v8f  a = lq_v8f_splat(lq_nf4_absmax(w, blk));
            for (; s < end; s += 8) {
                uint32_t u;
                memcpy(&u, qb + s / 2, 4);
                lq_v8f_store(o + (s - e0),
                             lq_v8f_lut16(lo, hi, (lq_v8i)((lq_v8u_splat(u) >> sh) & mask)) * a);
            }
        }
    }
}

static void nf4_rows(const lq_qlinear *w, int64_t i0, int64_t i1, float *out, int nt) {
    if (w->k % 8 == 0) {
#pragma omp parallel num_threads(nt)
        {
            const int64_t th = omp_get_thread_num(), tn = omp_get_num_threads();
            const int64_t a = i0 + (i1 - i0) * th / tn, b = i0 + (i1 - i0) * (th + 1) / tn;
            nf4_rows_vec(w, a, b, out + (a - i0) * w->k);
        }
        return;
    }
    nf4_pairs p;
    nf4_pairs_init(w, &p);
#pragma omp          parallel for schedule(static) num_threads(nt)
    for (int64_t i = i0; i < i1; i++)
        nf4_decode(w, &p, i, 0, w->k, out + (i - i0) * w->k);
}

lq_status lq_dequant_nf4_cpu(const lq_qlinear *w, float *out, int nthreads) {
    nf4_rows(w, 0, w->n, out, lq_cpu_threads(nthreads));
    return LQ_OK;
}

/* acc[r][l] += sum over lanes of x[r, c0 + t] * buf[t] (8 independent lanes: vectorizes without
 * reassociating a single float sum). */
LQ_CLONES static void dot_rows(const float *x, int64_t m, int64_t k, int64_t c0, const float *buf,
                               int64_t len, float acc[LQ_FUSED_M][8]) {
    const int64_t full = len - len % 8;
    for (int64_t r = 0; r < m; r++) {
        const float *xr = x + r * k + c0;
        for (int64_t t = 0; t < full; t += 8)
            for (int l = 0; l < 8; l++)
                acc[r][l] += xr[t + l] * buf[t + l];
        for (int64_t t = full; t < len; t++)
            acc[r][t - full] += xr[t] * buf[t];
    }
}

/* Rows whose codes start on a 4-byte boundary and whose blocks hold whole groups of 8 (k % 8
 * == 0): decode 8 weights from one 32-bit load, table lookup by two 8-lane shuffles,
 * w = map[code] * absmax as in the reference, M multiply-adds. */
static inline __attribute__((always_inline)) void
nf4_rows_fast(const lq_qlinear *w, const float *x, int64_t i0, int64_t i1, float *y, const int M) {
    const int64_t  n = w->n, k = w->k, bs = w->group_size;
    const uint8_t *qb = w->qweight;
    const lq_v8f   lo = lq_v8f_load(w->quant_map), hi = lq_v8f_load(w->quant_map + 8);
    const lq_v8u   sh   = {4, 0, 12, 8, 20, 16, 28, 24}; /* high nibble first in each byte */
    const lq_v8u   mask = lq_v8u_splat(15u);
    for (int64_t i = i0; i < i1; i++) {
        lq_v8f acc[LQ_FUSED_M][2];
        for (int r = 0; r < M; r++)
            acc[r][0] = acc[r][1] = lq_v8f_splat(0.f);
        const int64_t e0 = i * k;
        float         am[64];
        int64_t       am0 = -1; /* first block held in am[] */
        for (int64_t s = e0; s < e0 + k;) {
            const int64_t blk = s / bs, end = (blk + 1) * bs < e0 + k ? (blk + 1) * bs : e0 + k;
            if (am0 < 0 || blk >= am0 + 64) {
                const int64_t last = (e0 + k - 1) / bs + 1;
                am0                = blk;
                lq_nf4_absmax_range(w, blk, blk + 64 < last ? blk + 64 : last, am);
            }
            const lq_v8f a = lq_v8f_splat(am[blk - am0]);
            __builtin_prefetch(qb + end / 2 + 256);
            /* two independent accumulator sets hide the multiply-add latency */
            for (; s + 16 <= end; s += 16) {
                uint32_t u[2];
                memcpy(u, qb + s / 2, 8);
                const lq_v8f w0 =
                    lq_v8f_lut16(lo, hi, (lq_v8i)((lq_v8u_splat(u[0]) >> sh) & mask)) * a;
                const lq_v8f w1 =
                    lq_v8f_lut16(lo, hi, (lq_v8i)((lq_v8u_splat(u[1]) >> sh) & mask)) * a;
                for (int r = 0; r < M; r++) {
                    acc[r][0] += lq_v8f_load(x + r * k + (s - e0)) * w0;
                    acc[r][1] += lq_v8f_load(x + r * k + (s - e0) + 8) * w1;
                }
            }
            if (s < end) { /* runs are whole groups of 8 */
                uint32_t u;
                memcpy(&u, qb + s / 2, 4);
                const lq_v8f w0 =
                    lq_v8f_lut16(lo, hi, (lq_v8i)((lq_v8u_splat(u) >> sh) & mask)) * a;
                for (int r = 0; r < M; r++)
                    acc[r][0] += lq_v8f_load(x + r * k + (s - e0)) * w0;
                s += 8;
            }
        }
        for (int r = 0; r < M; r++) {
            const lq_v8f t   = acc[r][0] + acc[r][1];
            float        sum = 0.f;
            for (int l = 0; l < 8; l++)
                sum += t[l];
            y[r * n + i] = sum;
        }
    }
}

typedef void (*nf4_fast_fn)(const lq_qlinear *w, const float *x, int64_t i0, int64_t i1, float *y);
#define NF4_INST(M)                                                                                \
    LQ_CLONES static void nf4_fast_m##M(const lq_qlinear *w, const float *x, int64_t i0,           \
                                        int64_t i1, float *y) {                                    \
        nf4_rows_fast(w, x, i0, i1, y, M);                                                         \
    }
NF4_INST(1)
NF4_INST(2)
NF4_INST(3)
NF4_INST(4)
NF4_INST(5)
NF4_INST(6)
NF4_INST(7)
NF4_INST(8)
static const nf4_fast_fn k_nf4_fast[LQ_FUSED_M] = {nf4_fast_m1, nf4_fast_m2, nf4_fast_m3,
                                                   nf4_fast_m4, nf4_fast_m5, nf4_fast_m6,
                                                   nf4_fast_m7, nf4_fast_m8};
_Static_assert(LQ_FUSED_M == 8, "one instance per m <= LQ_FUSED_M");

/* the AVX2 kernels (lq_gemm_nf4f_avx2): from 9 rows only where there is no AVX-512 (its own
 * kernels, or sgemm on lq_gemm512) */
static int nf4f_ok(const lq_qlinear *w, int64_t m) {
    return lq_nf4f_avx2_ok(w) && lq_cpu_avx2i() && (m <= LQ_FUSED_M || !lq_cpu_avx512());
}

size_t lq_ws_nf4_cpu(const lq_qlinear *w, int64_t m) {
    if (m > LQ_FUSED_M && nf4f_ok(w, m))
        return lq_ws_nf4f_avx2(w, m);
    const size_t tile = m <= LQ_FUSED_M ? 0 : (size_t)(lq_tile_rows(w) * w->k) * sizeof(float);
    const size_t v512 = lq_nf4_avx512_ok(w, m) ? lq_ws_nf4_avx512(w, m) : 0;
    return tile > v512 ? tile : v512;
}

lq_status lq_gemm_nf4_cpu(const lq_qlinear *w, const float *x, int64_t m, float *y, void *ws,
                          size_t ws_size, int nthreads) {
    const int64_t n = w->n, k = w->k;
    const int     nt = lq_cpu_threads(nthreads);
    if (lq_nf4_avx512_ok(w, m) && ws && ws_size >= lq_ws_nf4_avx512(w, m) && lq_cpu_avx512()) {
        LQ_TRY(lq_gemm_nf4_avx512(w, x, m, y, ws, ws_size, nt));
    } else if (nf4f_ok(w, m)) {
        const size_t need = lq_ws_nf4f_avx2(w, m);
        if (need && (!ws || ws_size < need))
            return LQ_ERR_INVALID_ARG;
        LQ_TRY(lq_gemm_nf4f_avx2(w, x, m, y, ws, nt));
    } else if (m <= LQ_FUSED_M && k % 8 == 0) {
        const nf4_fast_fn fn = k_nf4_fast[m - 1];
#pragma omp parallel num_threads(nt)
        {
            const int64_t th = omp_get_thread_num(), tn = omp_get_num_threads();
            fn(w, x, n * th / tn, n * (th + 1) / tn, y);
        }
    } else if (m <= LQ_FUSED_M) {
        nf4_pairs p;
        nf4_pairs_init(w, &p);
#pragma omp parallel for schedule(static) num_threads(nt)
        for (int64_t i = 0; i < n; i++) {
            float buf[CHUNK];
            float acc[LQ_FUSED_M][8];
            memset(acc, 0, sizeof acc);
            for (int64_t c0 = 0; c0 < k; c0 += CHUNK) {
                const int64_t len = c0 + CHUNK < k ? CHUNK : k - c0;
                nf4_decode(w, &p, i, c0, c0 + len, buf);
                dot_rows(x, m, k, c0, buf, len, acc);
            }
            for (int64_t r = 0; r < m; r++) {
                float s = 0.f;
                for (int l = 0; l < 8; l++)
                    s += acc[r][l];
                y[r * n + i] = s;
            }
        }
    } else {
        if (!ws || ws_size < lq_ws_nf4_cpu(w, m))
            return LQ_ERR_INVALID_ARG;
        if (!lq_blas_dims_ok(m, n, k))
            return LQ_ERR_UNSUPPORTED;
        const int64_t tr = lq_tile_rows(w);
        const int     tt = lq_blas_tile_threads(nthreads); /* see LQ_TILE_ROWS */
        for (int64_t i0 = 0; i0 < n; i0 += tr) {
            const int64_t nc = i0 + tr < n ? tr : n - i0;
            nf4_rows(w, i0, i0 + nc, ws, tt);
            lq_sgemm_tile(x, m, k, ws, nc, 0, y + i0, n, 0.f, nthreads);
        }
    }
    lq_add_bias_f16(w->bias, m, n, y);
    return LQ_OK;
}

/* Integer activations (cpu/lq_cpu_vnni.c; else AVX2, cpu/lq_cpu_avx2.c): the semantics of
 * lq_gemm_nf4_qx_ref. */
static int nf4_qx_kind(const lq_qlinear *w) {
    return lq_cpu_vnni() ? 2 : lq_nf4_avx2_ok(w) && lq_cpu_avx2i() ? 1 : 0;
}

int lq_nf4_cpu_quantizes_x(const lq_qlinear *w, int64_t m, unsigned flags) {
    return (flags & LQ_QLINEAR_INT_X) && nf4_qx_kind(w) && lq_nf4_qx_bits(w, m);
}

size_t lq_ws_nf4_cpu_qx(const lq_qlinear *w, int64_t m) {
    if (!lq_nf4_cpu_quantizes_x(w, m, LQ_QLINEAR_INT_X))
        return 0;
    return nf4_qx_kind(w) == 2 ? lq_ws_nf4_vnni(w, m) : lq_ws_nf4_avx2(w, m);
}

lq_status lq_gemm_nf4_cpu_qx(const lq_qlinear *w, const float *x, int64_t m, float *y, void *ws,
                             size_t ws_size, int nthreads) {
    if (!lq_nf4_cpu_quantizes_x(w, m, LQ_QLINEAR_INT_X))
        return LQ_ERR_UNSUPPORTED;
    if (!ws || ws_size < lq_ws_nf4_cpu_qx(w, m))
        return LQ_ERR_INVALID_ARG;
    LQ_TRY(nf4_qx_kind(w) == 2 ? lq_gemm_nf4_vnni(w, x, m, y, ws, nthreads)
                               : lq_gemm_nf4_avx2(w, x, m, y, ws, nthreads));
    lq_add_bias_f16(w->bias, m, w->n, y);
    return LQ_OK;
}
