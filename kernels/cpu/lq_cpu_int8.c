/* Optimized CPU LLM.int8 (same semantics as ref/lq_ref_int8.c, bitsandbytes forward).
 *
 * A per-call prologue classifies the input columns (stored fp16 outlier / runtime outlier /
 * int8), finds each row's absmax and quantizes the activations once.
 * Small m: per output row, int8 x int8 -> int32 dot products (vectorized integer sums, exact),
 * then the fp columns; with AVX-512 VNNI (any m, MR rows at a time) the same exact sums by
 * vpdpbusd (cpu/lq_cpu_vnni.c), else with AVX2 by vpmaddubsw (cpu/lq_cpu_avx2.c, up to
 * INT8_VNNI_MAX_M rows).
 * Large m: int8 values are exact in float32, so the int32 product is an sgemm of the quantized
 * activations with CB tiles converted to float (exact while |acc| < 2^24, i.e. unless k is huge
 * and every product near 127^2; otherwise relative error 2^-24, far below the activation
 * quantization error), followed by one sgemm over all fp columns. */
#include "lq_kernels_impl.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#define MR 256 /* activation rows per block of the large-m path */
/* rows up to which the AVX2 dot products beat the float sgemm of the large-m path
 * (bench_kernels_cpu, 4096 x 4096); the AVX-512 VNNI ones serve every m, MR rows at a time:
 * at 512 rows they tie OpenBLAS's AVX-512 sgemm (92 against 90 ms, 1 thread, Zen 5) and take
 * 0.6x the time of its AVX2 one (152 ms), which OpenBLAS runs where it does not know the CPU */
#define INT8_VNNI_MAX_M 64

/* the integer sums' kernel: 2 AVX-512 VNNI, 1 AVX2, 0 the dot products of int8_small_out */
static int int8_dots_kind(void) {
    return lq_cpu_vnni() ? 2 : lq_cpu_avx2i() ? 1 : 0;
}

static int int8_small(int64_t m) {
    const int kind = int8_dots_kind();
    return m <= LQ_FUSED_M || kind == 2 || (m <= INT8_VNNI_MAX_M && kind);
}

static size_t al64(size_t b) {
    return (b + 63) & ~(size_t)63;
}

/* Small-m workspace after the head: codes [m, k]; with VNNI their unsigned copy and the sums
 * [m, n]; then (all: with_fp) the gathered fp activations, [m, k] at most. */
static size_t int8_small_ws(const lq_qlinear *w, int64_t m, int with_fp) {
    size_t    b    = al64((size_t)(m * w->k));
    const int kind = int8_dots_kind();
    if (kind)
        b += (kind == 2 ? al64(lq_ws_int8_vnni(w->n, w->k, m)) : 0) + al64((size_t)(m * w->n) * 4);
    return b + (with_fp ? (size_t)(m * ((w->k + 7) & ~7)) * sizeof(float) : 0);
}

/* Workspace layout shared by both paths. */
typedef struct int8_ws {
    uint8_t *col;    /* [k] 0 int8, 1 stored, 2 runtime */
    int32_t *fcols;  /* [k] stored columns (outlier_idx order) then runtime columns */
    float   *rowmax; /* [m] */
    void    *rest;
} int8_ws;

static size_t int8_ws_head(const lq_qlinear *w, int64_t m) {
    return al64((size_t)w->k) + al64((size_t)w->k * 4) + al64((size_t)m * 4);
}

static int8_ws int8_ws_split(const lq_qlinear *w, int64_t m, void *ws) {
    int8_ws  s;
    uint8_t *p = ws;
    s.col      = p;
    p += al64((size_t)w->k);
    s.fcols = (int32_t *)(void *)p;
    p += al64((size_t)w->k * 4);
    s.rowmax = (float *)(void *)p;
    p += al64((size_t)m * 4);
    s.rest = p;
    return s;
}

/* Column classes, fp column list, row absmax. Returns the number of fp columns. */
static int64_t int8_prologue(const lq_qlinear *w, const float *x, int64_t m, int8_ws *s) {
    const int64_t k   = w->k;
    const float   thr = w->threshold;
    memset(s->col, 0, (size_t)k);
    int64_t nf = 0;
    for (int64_t j = 0; j < w->n_outlier; j++) {
        s->col[w->outlier_idx[j]] = 1;
        s->fcols[nf++]            = w->outlier_idx[j];
    }
    if (thr > 0.f) {
        for (int64_t r = 0; r < m; r++)
            for (int64_t c = 0; c < k; c++)
                if (fabsf(x[r * k + c]) >= thr && s->col[c] == 0)
                    s->col[c] = 2;
        for (int64_t c = 0; c < k; c++)
            if (s->col[c] == 2)
                s->fcols[nf++] = (int32_t)c;
    }
    for (int64_t r = 0; r < m; r++) {
        float rm = 0.f;
        for (int64_t c = 0; c < k; c++) {
            const float a = fabsf(x[r * k + c]);
            if (s->col[c] != 1 && !(thr > 0.f && a >= thr) && a > rm)
                rm = a;
        }
        s->rowmax[r] = rm;
    }
    return nf;
}

/* A row's int8 codes (fp columns 0) into q8, or as floats into qf (for sgemm): the other NULL */
static inline __attribute__((always_inline)) void
quant_row_to(const float *xr, int64_t k, const uint8_t *col, float rowmax, int8_t *q8, float *qf) {
    const float inv = rowmax > 0.f ? 127.f / rowmax : 0.f;
    for (int64_t c = 0; c < k; c++) {
        const int8_t q = col[c] ? 0 : lq_int8_quant_x(xr[c], inv);
        if (q8)
            q8[c] = q;
        else
            qf[c] = (float)q;
    }
}

LQ_CLONES static void quant_row(const float *xr, int64_t k, const uint8_t *col, float rowmax,
                                int8_t *q) {
    quant_row_to(xr, k, col, rowmax, q, NULL);
}

LQ_CLONES static void quant_row_f(const float *xr, int64_t k, const uint8_t *col, float rowmax,
                                  float *q) {
    quant_row_to(xr, k, col, rowmax, NULL, q);
}

/* fp weight of fp column t of output row i: stored columns come first in fcols. */
static float fp_weight(const lq_qlinear *w, int64_t i, int64_t t, int32_t c) {
    if (t < w->n_outlier)
        return lq_f16_to_f32(w->outlier_w[i * w->n_outlier + t]);
    return ((float)((const int8_t *)w->qweight)[i * w->k + c] * w->scb[i]) * LQ_INT8_VEC_DEQUANT;
}

LQ_CLONES static int32_t dot_i8(const int8_t *a, const int8_t *b, int64_t k) {
    int32_t s = 0;
    for (int64_t c = 0; c < k; c++)
        s += (int32_t)a[c] * (int32_t)b[c];
    return s;
}

/* y[r, i] for r < m of the small-m path: the integer sums (acc, or dot products here) scaled,
 * plus the fp columns: activations gathered into xg [m, nf] in the reference's order (runtime,
 * then stored), weights decoded once for all rows, dot products in 8 lanes (a different
 * summation order than the reference's: exact on the exact tests, NMSE-bound elsewhere). */
LQ_CLONES static void int8_small_out(const lq_qlinear *w, int64_t i, int64_t m, const int8_t *qx,
                                     const int32_t *acc, const float *rowmax, const int32_t *fcols,
                                     int64_t nf, const float *xg, int cvt, float *y) {
    const int64_t   n = w->n, k = w->k, no = w->n_outlier, nrt = nf - no, nfp = (nf + 7) & ~7;
    const int8_t   *wr = (const int8_t *)w->qweight + i * k;
    const uint16_t *ow = w->outlier_w + i * no;
    const float     sc = w->scb[i];
    lq_v8f          va[MR]; /* m <= MR: the callers' row chunks */
    float           wb[64];
    for (int64_t r = 0; r < m; r++)
        va[r] = lq_v8f_splat(0.f);
    for (int64_t p0 = 0; p0 < nf; p0 += 64) { /* weights decoded 64 at a time, once */
        const int64_t p1 = p0 + 64 < nf ? p0 + 64 : nf, pr = p1 < nrt ? p1 : nrt;
        for (int64_t p = p0; p < pr; p++) /* runtime columns: int8 codes */
            wb[p - p0] = ((float)wr[fcols[no + p]] * sc) * LQ_INT8_VEC_DEQUANT;
        const int64_t ps = p0 > nrt ? p0 : nrt; /* stored: fp16, 16 or 8 at a time */
        if (ps < p1)
            lq_half_to_f32(cvt, ow + (ps - nrt), 0, p1 - ps, wb + (ps - p0));
        for (int64_t p = p1; p < p0 + 64; p++)
            wb[p - p0] = 0.f;
        for (int64_t r = 0; r < m; r++) /* rows of xg are zero-padded to nfp */
            for (int64_t p = p0; p < p1; p += 8)
                va[r] += lq_v8f_load(xg + r * nfp + p) * lq_v8f_load(wb + (p - p0));
    }
    for (int64_t r = 0; r < m; r++) {
        float fp = 0.f;
        for (int l = 0; l < 8; l++)
            fp += va[r][l];
        const int32_t a = acc ? acc[r * n + i] : dot_i8(qx + r * k, wr, k);
        y[r * n + i]    = lq_int8_out(a, rowmax[r], sc) + fp;
    }
}

lq_status lq_dequant_int8_cpu(const lq_qlinear *w, float *out, int nthreads) {
    const int8_t *cb = w->qweight;
    const int64_t k  = w->k;
#pragma omp parallel for schedule(static) num_threads(lq_cpu_threads(nthreads))
    for (int64_t i = 0; i < w->n; i++) {
        const float s = w->scb[i];
        for (int64_t c = 0; c < k; c++)
            out[i * k + c] = ((float)cb[i * k + c] * s) * LQ_INT8_VEC_DEQUANT;
        for (int64_t j = 0; j < w->n_outlier; j++)
            out[i * k + w->outlier_idx[j]] = lq_f16_to_f32(w->outlier_w[i * w->n_outlier + j]);
    }
    return LQ_OK;
}

size_t lq_ws_int8_cpu(const lq_qlinear *w, int64_t m) {
    const size_t head = int8_ws_head(w, m);
    const int64_t mr = m < MR ? m : MR;
    if (int8_small(m))
        return head + int8_small_ws(w, mr, 1);
    /* float activations [mr, k] + gathered fp activations [mr, k] + tile [nt, k] */
    return head + (size_t)(2 * mr * w->k + lq_tile_rows(w) * w->k) * sizeof(float);
}

lq_status lq_gemm_int8_cpu(const lq_qlinear *w, const float *x, int64_t m, float *y, void *ws,
                           size_t ws_size, int nthreads) {
    if (!ws || ws_size < lq_ws_int8_cpu(w, m))
        return LQ_ERR_INVALID_ARG;
    const int64_t n = w->n, k = w->k;
    const int8_t *cb = w->qweight;
    const int     nt = lq_cpu_threads(nthreads);
    int8_ws       s  = int8_ws_split(w, m, ws);
    const int64_t nf = int8_prologue(w, x, m, &s);

    if (int8_small(m)) {
        const int     kind = int8_dots_kind();
        const int64_t nrt = nf - w->n_outlier, nfp = (nf + 7) & ~7;
        const int     cvt = lq_half_cvt_kind();
        /* MR rows at a time (the columns' classes are the whole call's, from the prologue) */
        for (int64_t r0 = 0; r0 < m; r0 += MR) {
            const int64_t mr = r0 + MR < m ? MR : m - r0;
            const float  *xr = x + r0 * k;
            int8_t       *qx = s.rest;
            for (int64_t r = 0; r < mr; r++)
                quant_row(xr + r * k, k, s.col, s.rowmax[r0 + r], qx + r * k);
            int32_t *acc = NULL; /* VNNI / AVX2: all the integer sums first */
            if (kind) {
                uint8_t *vws = (uint8_t *)s.rest + al64((size_t)(mr * k));
                acc = (int32_t *)(void *)(vws + (kind == 2 ? al64(lq_ws_int8_vnni(n, k, mr)) : 0));
                LQ_TRY(kind == 2 ? lq_int8_dots_vnni(cb, n, k, qx, mr, acc, vws, nthreads)
                                 : lq_int8_dots_avx2(cb, n, k, qx, mr, acc, nthreads));
            }
            /* fp columns in the reference's order (runtime, then stored): activations
             * [mr, nfp], rows zero-padded to a multiple of 8 */
            float *xg = (float *)(void *)((uint8_t *)s.rest + int8_small_ws(w, mr, 0));
            for (int64_t r = 0; r < mr; r++)
                for (int64_t p = 0; p < nfp; p++)
                    xg[r * nfp + p] =
                        p < nf ? xr[r * k + s.fcols[p < nrt ? w->n_outlier + p : p - nrt]] : 0.f;
#pragma omp parallel for schedule(static) num_threads(nt)
            for (int64_t i = 0; i < n; i++)
                int8_small_out(w, i, mr, qx, acc, s.rowmax + r0, s.fcols, nf, xg, cvt, y + r0 * n);
        }
    } else {
        if (!lq_blas_dims_ok(m, n, k))
            return LQ_ERR_UNSUPPORTED;
        const int64_t tr = lq_tile_rows(w), mrmax = m < MR ? m : MR;
        const int     tt = lq_blas_tile_threads(nthreads);
        float        *xq = s.rest, *xf = xq + mrmax * k, *tile = xf + mrmax * k;
        for (int64_t r0 = 0; r0 < m; r0 += MR) {
            const int64_t mr = r0 + MR < m ? MR : m - r0;
            for (int64_t r = 0; r < mr; r++) { /* one thread: a few rows */
                const float *xr  = x + (r0 + r) * k;
                const float  rm  = s.rowmax[r0 + r];
                quant_row_f(xr, k, s.col, rm, xq + r * k);
                for (int64_t t = 0; t < nf; t++)
                    xf[r * nf + t] = xr[s.fcols[t]];
            }
            for (int64_t i0 = 0; i0 < n; i0 += tr) {
                const int64_t nc = i0 + tr < n ? tr : n - i0;
                float        *yt = y + r0 * n + i0;
#pragma omp parallel for schedule(static) num_threads(tt) /* tt: see LQ_TILE_ROWS */
                for (int64_t e = 0; e < nc * k; e++)
                    tile[e] = (float)cb[i0 * k + e];
                lq_sgemm_tile(xq, mr, k, tile, nc, 0, yt, n, 0.f, nthreads);
                for (int64_t r = 0; r < mr; r++)
                    for (int64_t j = 0; j < nc; j++)
                        yt[r * n + j] = (yt[r * n + j] * (s.rowmax[r0 + r] * w->scb[i0 + j])) *
                                        LQ_INT8_MM_DEQUANT;
                if (nf > 0) {
                    for (int64_t j = 0; j < nc; j++)
                        for (int64_t t = 0; t < nf; t++)
                            tile[j * nf + t] = fp_weight(w, i0 + j, t, s.fcols[t]);
                    lq_sgemm_tile(xf, mr, nf, tile, nc, 0, yt, n, 1.f, nthreads);
                }
            }
        }
    }
    lq_add_bias_f16(w->bias, m, n, y);
    return LQ_OK;
}
