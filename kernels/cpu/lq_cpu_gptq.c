/* Optimized CPU GPTQ v1.
 *
 * qweight is [k*b/32, n]: a word row holds 32/b consecutive input channels of n neighbouring
 * output columns, so every kernel walks word rows and vectorizes across output columns
 * (contiguous words, one uniform shift per input channel).
 *
 * Small m (<= LQ_FUSED_M) with the common layout (b in {2,4,8}, g_idx[c] == c / group_size,
 * groups made of whole words): per group acc = sum_c x[c] * q[c], then
 * y += s * acc - (s * z) * sum_c x[c]; one multiply-add per weight, scales/zeros decoded once
 * per group. Any other layout (act-order g_idx, 3-bit) dequantizes each weight with scale and
 * scale*zero precomputed as float [G, n] in the workspace.
 * Large m: tiles of W^T ([k, nt], the natural order of qweight) dequantized into the workspace,
 * then sgemm. */
#include "lq_kernels_impl.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define NB 16 /* output columns per block of the fused kernels */

enum gptq_path { PATH_TILED = 0, PATH_FUSED_GROUPS = 1, PATH_FUSED_GENERIC = 2 };

static int gptq_monotone(const lq_qlinear *w) {
    for (int64_t c = 0; c < w->k; c++)
        if (w->g_idx[c] != (int32_t)(c / w->group_size))
            return 0;
    return 1;
}

static enum gptq_path gptq_path_for(const lq_qlinear *w, int64_t m) {
    if (m > LQ_FUSED_M)
        return PATH_TILED;
    const int b = w->bits;
    if ((b == 2 || b == 4 || b == 8) && w->group_size % (32 / b) == 0 && gptq_monotone(w))
        return PATH_FUSED_GROUPS;
    return PATH_FUSED_GENERIC;
}

/* sc[g * ld + j] = scale, zs[g * ld + j] = scale * zero for columns i0 + j, j < nc, all g. */
static void gptq_params(const lq_qlinear *w, int64_t g0, int64_t g1, int64_t i0, int64_t nc,
                        int64_t ld, float *sc, float *zs) {
    const uint16_t *s = w->scales;
    for (int64_t g = g0; g < g1; g++)
        for (int64_t j = 0; j < nc; j++) {
            const float v  = lq_f16_to_f32(s[g * w->n + i0 + j]);
            sc[g * ld + j] = v;
            zs[g * ld + j] = v * (float)lq_gptq_zero(w, g, i0 + j);
        }
}

/* W^T rows c in [c0, c1) for output columns [i0, i0 + nc): out[(c - c0) * ldo + j]. */
LQ_CLONES static void gptq_kn(const lq_qlinear *w, int64_t c0, int64_t c1, int64_t i0,
                              int64_t nc, const float *sc, const float *zs, int64_t ldp,
                              float *out, int64_t ldo) {
    const int      b    = w->bits;
    const uint32_t mask = (1u << b) - 1u;
    const int64_t  n    = w->n;
    for (int64_t c = c0; c < c1; c++) {
        const int64_t  pos = c * b, wr = pos >> 5;
        const int      sh  = (int)(pos & 31);
        const uint32_t *row = (const uint32_t *)w->qweight + wr * n + i0;
        const float    *s = sc + (int64_t)w->g_idx[c] * ldp, *z = zs + (int64_t)w->g_idx[c] * ldp;
        float          *o = out + (c - c0) * ldo;
        if (sh + b <= 32) {
            for (int64_t j = 0; j < nc; j++)
                o[j] = s[j] * (float)((row[j] >> sh) & mask) - z[j];
        } else { /* 3-bit value straddling two words */
            for (int64_t j = 0; j < nc; j++)
                o[j] = s[j] * (float)(((row[j] >> sh) | (row[j + n] << (32 - sh))) & mask) - z[j];
        }
    }
}

lq_status lq_dequant_gptq_cpu(const lq_qlinear *w, float *out, int nthreads) {
    const int64_t n = w->n, k = w->k, G = lq_gptq_groups(w);
    const int64_t cb = 64; /* input channels per transposed block */
    float        *sc = lq_malloc_n(2 * G * n, sizeof(float));
    if (!sc)
        return LQ_ERR_NOMEM;
    float *zs = sc + G * n;
    gptq_params(w, 0, G, 0, n, n, sc, zs);
    const int64_t nblk = (n + NB - 1) / NB, ncb = (k + cb - 1) / cb;
#pragma omp parallel for schedule(static) num_threads(lq_cpu_threads(nthreads))
    for (int64_t t = 0; t < nblk * ncb; t++) {
        const int64_t i0 = (t % nblk) * NB, nc = i0 + NB < n ? NB : n - i0;
        const int64_t c0 = (t / nblk) * cb, c1 = c0 + cb < k ? c0 + cb : k;
        float         blk[64 * NB];
        gptq_kn(w, c0, c1, i0, nc, sc + i0, zs + i0, n, blk, NB);
        for (int64_t j = 0; j < nc; j++)
            for (int64_t c = c0; c < c1; c++)
                out[(i0 + j) * k + c] = blk[(c - c0) * NB + j];
    }
    free(sc);
    return LQ_OK;
}

/* ---------------------------------------------------------------------------------------
 * Fused small-m kernels over one block of NB output columns starting at i0.
 * --------------------------------------------------------------------------------------- */
static inline __attribute__((always_inline)) void
gptq_fused_groups(const lq_qlinear *w, const float *x, int64_t m, const float *xsum, int64_t i0,
                  float *y, const int b) {
    const int      vpw  = 32 / b;
    const uint32_t mask = (1u << b) - 1u;
    const int64_t  n = w->n, k = w->k, gs = w->group_size, G = lq_gptq_groups(w);
    const uint32_t *qw = (const uint32_t *)w->qweight;
    float          out[LQ_FUSED_M][NB];
    memset(out, 0, sizeof out);
    for (int64_t g = 0; g < G; g++) {
        float acc[LQ_FUSED_M][NB];
        memset(acc, 0, sizeof acc);
        const int64_t wr0 = g * gs / vpw;
        const int64_t wr1 = ((g + 1) * gs < k ? (g + 1) * gs : k) / vpw;
        for (int64_t wr = wr0; wr < wr1; wr++) {
            const uint32_t *row = qw + wr * n + i0;
            for (int v = 0; v < vpw; v++) {
                float qf[NB];
                for (int j = 0; j < NB; j++)
                    qf[j] = (float)((row[j] >> (b * v)) & mask);
                const int64_t c = wr * vpw + v;
                for (int64_t r = 0; r < m; r++) {
                    const float xv = x[r * k + c];
                    for (int j = 0; j < NB; j++)
                        acc[r][j] += xv * qf[j];
                }
            }
        }
        float s[NB], zs[NB];
        gptq_params(w, g, g + 1, i0, NB, 0, s, zs);
        for (int64_t r = 0; r < m; r++) {
            const float xs = xsum[r * G + g];
            for (int j = 0; j < NB; j++)
                out[r][j] += s[j] * acc[r][j] - zs[j] * xs;
        }
    }
    for (int64_t r = 0; r < m; r++)
        memcpy(y + r * n + i0, out[r], sizeof out[r]);
}

LQ_CLONES static void gptq_fused_w2(const lq_qlinear *w, const float *x, int64_t m,
                                    const float *xsum, int64_t i0, float *y) {
    gptq_fused_groups(w, x, m, xsum, i0, y, 2);
}
LQ_CLONES static void gptq_fused_w4(const lq_qlinear *w, const float *x, int64_t m,
                                    const float *xsum, int64_t i0, float *y) {
    gptq_fused_groups(w, x, m, xsum, i0, y, 4);
}
LQ_CLONES static void gptq_fused_w8(const lq_qlinear *w, const float *x, int64_t m,
                                    const float *xsum, int64_t i0, float *y) {
    gptq_fused_groups(w, x, m, xsum, i0, y, 8);
}

/* Any layout: dequantize 64 input channels of the block into a small W^T buffer (L1), then
 * multiply-add it into the m output rows. */
LQ_CLONES static void gptq_fused_generic(const lq_qlinear *w, const float *x, int64_t m,
                                         const float *sc, const float *zs, int64_t ldp,
                                         int64_t i0, int64_t nc, float *y) {
    const int64_t n = w->n, k = w->k;
    float         out[LQ_FUSED_M][NB];
    float         blk[64][NB];
    memset(out, 0, sizeof out);
    memset(blk, 0, sizeof blk);
    for (int64_t c0 = 0; c0 < k; c0 += 64) {
        const int64_t c1 = c0 + 64 < k ? c0 + 64 : k;
        gptq_kn(w, c0, c1, i0, nc, sc, zs, ldp, &blk[0][0], NB);
        for (int64_t c = c0; c < c1; c++)
            for (int64_t r = 0; r < m; r++) {
                const float xv = x[r * k + c];
                for (int j = 0; j < NB; j++)
                    out[r][j] += xv * blk[c - c0][j];
            }
    }
    for (int64_t r = 0; r < m; r++)
        memcpy(y + r * n + i0, out[r], (size_t)nc * sizeof(float));
}

size_t lq_ws_gptq_cpu(const lq_qlinear *w, int64_t m) {
    const int64_t G = lq_gptq_groups(w);
    switch (gptq_path_for(w, m)) {
    case PATH_FUSED_GROUPS: /* x sums [m, G] + params of the n % NB tail columns */
        return (size_t)(m * G + 2 * G * NB) * sizeof(float);
    case PATH_FUSED_GENERIC:
        return (size_t)(2 * G * w->n) * sizeof(float);
    default: /* tile [k, nt] + its scales and scale*zero [G, nt] */
        return (size_t)(lq_tile_rows(w) * (w->k + 2 * G)) * sizeof(float);
    }
}

static lq_status gptq_tiled(const lq_qlinear *w, const float *x, int64_t m, float *y, float *ws,
                            int nt) {
    const int64_t n = w->n, k = w->k, G = lq_gptq_groups(w), tr = lq_tile_rows(w);
    if (!lq_blas_dims_ok(m, n, k))
        return LQ_ERR_UNSUPPORTED;
    float *tile = ws, *sc = ws + tr * k, *zs = sc + G * tr;
    for (int64_t i0 = 0; i0 < n; i0 += tr) {
        const int64_t nc = i0 + tr < n ? tr : n - i0;
        const int64_t cb = 64, ncb = (k + cb - 1) / cb;
#pragma omp parallel num_threads(nt)
        {
#pragma omp for schedule(static)
            for (int64_t g = 0; g < G; g++)
                gptq_params(w, g, g + 1, i0, nc, tr, sc, zs);
#pragma omp for schedule(static)
            for (int64_t t = 0; t < ncb; t++)
                gptq_kn(w, t * cb, (t + 1) * cb < k ? (t + 1) * cb : k, i0, nc, sc, zs, tr,
                        tile + t * cb * nc, nc);
        }
        lq_sgemm_tile(x, m, k, tile, nc, 1, y + i0, n, 0.f);
    }
    return LQ_OK;
}

lq_status lq_gemm_gptq_cpu(const lq_qlinear *w, const float *x, int64_t m, float *y, void *ws,
                           size_t ws_size, int nthreads) {
    const enum gptq_path path = gptq_path_for(w, m);
    if (!ws || ws_size < lq_ws_gptq_cpu(w, m))
        return LQ_ERR_INVALID_ARG;
    const int64_t n = w->n, k = w->k, G = lq_gptq_groups(w);
    const int     nt = lq_cpu_threads(nthreads);
    float        *f  = ws;
    if (path == PATH_TILED) {
        LQ_TRY(gptq_tiled(w, x, m, y, f, nt));
    } else if (path == PATH_FUSED_GROUPS) {
        float *xsum = f; /* [m, G]: sum of x over each group, for the zero-point term */
        for (int64_t r = 0; r < m; r++)
            for (int64_t g = 0; g < G; g++) {
                const int64_t c1   = (g + 1) * w->group_size < k ? (g + 1) * w->group_size : k;
                float         sacc = 0.f;
                for (int64_t c = g * w->group_size; c < c1; c++)
                    sacc += x[r * k + c];
                xsum[r * G + g] = sacc;
            }
        const int64_t nblk = n / NB;
#pragma omp parallel for schedule(static) num_threads(nt)
        for (int64_t bi = 0; bi < nblk; bi++) {
            if (w->bits == 4)
                gptq_fused_w4(w, x, m, xsum, bi * NB, y);
            else if (w->bits == 8)
                gptq_fused_w8(w, x, m, xsum, bi * NB, y);
            else
                gptq_fused_w2(w, x, m, xsum, bi * NB, y);
        }
        if (nblk * NB < n) { /* n % NB columns: the generic kernel reads only nc of them */
            float        *sc = xsum + m * G;
            const int64_t i0 = nblk * NB, nc = n - i0;
            gptq_params(w, 0, G, i0, nc, NB, sc, sc + G * NB);
            gptq_fused_generic(w, x, m, sc, sc + G * NB, NB, i0, nc, y);
        }
    } else {
        float *sc = f, *zs = f + G * n;
#pragma omp parallel for schedule(static) num_threads(nt)
        for (int64_t g = 0; g < G; g++)
            gptq_params(w, g, g + 1, 0, n, n, sc, zs);
        const int64_t nblk = (n + NB - 1) / NB;
#pragma omp parallel for schedule(static) num_threads(nt)
        for (int64_t bi = 0; bi < nblk; bi++) {
            const int64_t i0 = bi * NB;
            gptq_fused_generic(w, x, m, sc + i0, zs + i0, n, i0, i0 + NB < n ? NB : n - i0, y);
        }
    }
    lq_add_bias_f16(w->bias, m, n, y);
    return LQ_OK;
}
