/* Optimized CPU AutoAWQ GEMM.
 *
 * qweight is [k, n/8]: row c holds input channel c of all n outputs, 8 per word in the
 * [0,2,4,6,1,3,5,7] interleave. Decoding a word with the per-column shift vector
 * 4 * field_of(col) = {0,16,4,20,8,24,12,28} yields its 8 codes already in column order, so the
 * kernels vectorize across output columns exactly like GPTQ's.
 * Small m: per group acc = sum_c x[c] * q[c], y += s * acc - (s * z) * sum_c x[c].
 * Large m: W^T tiles ([k, nt]) dequantized into the workspace, then sgemm. */
#include "lq_kernels_impl.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define NB 16 /* output columns per block of the fused kernel (two words) */

static const uint32_t k_shift[8] = {0, 16, 4, 20, 8, 24, 12, 28};

/* sc[g * ld + j] = scale, zs[g * ld + j] = scale * zero for columns i0 + j, j < nc. */
static void awq_params(const lq_qlinear *w, int64_t g0, int64_t g1, int64_t i0, int64_t nc,
                       int64_t ld, float *sc, float *zs) {
    const uint16_t *s     = w->scales;
    const int64_t   words = w->n / 8;
    for (int64_t g = g0; g < g1; g++)
        for (int64_t j = 0; j < nc; j++) {
            const float v  = lq_f16_to_f32(s[g * w->n + i0 + j]);
            sc[g * ld + j] = v;
            zs[g * ld + j] = v * (float)lq_awq_get((const int32_t *)w->qzeros + g * words, i0 + j);
        }
}

/* W^T rows c in [c0, c1) for output columns [i0, i0 + nc), i0 and nc multiples of 8:
 * out[(c - c0) * ldo + j]. */
LQ_CLONES static void awq_kn(const lq_qlinear *w, int64_t c0, int64_t c1, int64_t i0, int64_t nc,
                             const float *sc, const float *zs, int64_t ldp, float *out,
                             int64_t ldo) {
    const int64_t words = w->n / 8;
    for (int64_t c = c0; c < c1; c++) {
        const uint32_t *row = (const uint32_t *)w->qweight + c * words + i0 / 8;
        const int64_t   g   = c / w->group_size;
        const float    *s = sc + g * ldp, *z = zs + g * ldp;
        float          *o = out + (c - c0) * ldo;
        for (int64_t t = 0; t < nc / 8; t++) {
            const uint32_t wd = row[t];
            for (int j = 0; j < 8; j++)
                o[8 * t + j] = s[8 * t + j] * (float)((wd >> k_shift[j]) & 15u) - z[8 * t + j];
        }
    }
}

lq_status lq_dequant_awq_cpu(const lq_qlinear *w, float *out, int nthreads) {
    const int64_t n = w->n, k = w->k, G = k / w->group_size;
    float        *sc = lq_malloc_n(2 * G * n, sizeof(float));
    if (!sc)
        return LQ_ERR_NOMEM;
    float *zs = sc + G * n;
    awq_params(w, 0, G, 0, n, n, sc, zs);
    const int64_t cb = 64, nblk = (n + NB - 1) / NB, ncb = (k + cb - 1) / cb;
#pragma omp parallel for schedule(static) num_threads(lq_cpu_threads(nthreads))
    for (int64_t t = 0; t < nblk * ncb; t++) {
        const int64_t i0 = (t % nblk) * NB, nc = i0 + NB < n ? NB : n - i0;
        const int64_t c0 = (t / nblk) * cb, c1 = c0 + cb < k ? c0 + cb : k;
        float         blk[64 * NB];
        awq_kn(w, c0, c1, i0, nc, sc + i0, zs + i0, n, blk, NB);
        for (int64_t j = 0; j < nc; j++)
            for (int64_t c = c0; c < c1; c++)
                out[(i0 + j) * k + c] = blk[(c - c0) * NB + j];
    }
    free(sc);
    return LQ_OK;
}

/* One block of NB output columns at i0 (n % NB columns go through the tail below). */
LQ_CLONES static void awq_fused(const lq_qlinear *w, const float *x, int64_t m, const float *xsum,
                                int64_t i0, float *y) {
    const int64_t n = w->n, k = w->k, gs = w->group_size, G = k / gs, words = n / 8;
    float         out[LQ_FUSED_M][NB];
    memset(out, 0, sizeof out);
    for (int64_t g = 0; g < G; g++) {
        float acc[LQ_FUSED_M][NB];
        memset(acc, 0, sizeof acc);
        for (int64_t c = g * gs; c < (g + 1) * gs; c++) {
            const uint32_t *row = (const uint32_t *)w->qweight + c * words + i0 / 8;
            float           qf[NB];
            for (int t = 0; t < NB / 8; t++)
                for (int j = 0; j < 8; j++)
                    qf[8 * t + j] = (float)((row[t] >> k_shift[j]) & 15u);
            for (int64_t r = 0; r < m; r++) {
                const float xv = x[r * k + c];
                for (int j = 0; j < NB; j++)
                    acc[r][j] += xv * qf[j];
            }
        }
        float s[NB], zs[NB];
        awq_params(w, g, g + 1, i0, NB, 0, s, zs);
        for (int64_t r = 0; r < m; r++) {
            const float xs = xsum[r * G + g];
            for (int j = 0; j < NB; j++)
                out[r][j] += s[j] * acc[r][j] - zs[j] * xs;
        }
    }
    for (int64_t r = 0; r < m; r++)
        memcpy(y + r * n + i0, out[r], sizeof out[r]);
}

/* The last 8 columns when n % 16 == 8: dequantize them once, then dot. */
static void awq_tail(const lq_qlinear *w, const float *x, int64_t m, int64_t i0, float *y,
                     float *buf /* [k * 8 + 2 * G * 8] */) {
    const int64_t k = w->k, G = k / w->group_size;
    float        *sc = buf + k * 8, *zs = sc + G * 8;
    awq_params(w, 0, G, i0, 8, 8, sc, zs);
    awq_kn(w, 0, k, i0, 8, sc, zs, 8, buf, 8);
    for (int64_t r = 0; r < m; r++)
        for (int j = 0; j < 8; j++) {
            float acc = 0.f;
            for (int64_t c = 0; c < k; c++)
                acc += x[r * k + c] * buf[c * 8 + j];
            y[r * w->n + i0 + j] = acc;
        }
}

size_t lq_ws_awq_cpu(const lq_qlinear *w, int64_t m) {
    const int64_t G = w->k / w->group_size;
    if (m <= LQ_FUSED_M) /* x sums [m, G] + the 8-column tail buffer */
        return (size_t)(m * G + w->k * 8 + 2 * G * 8) * sizeof(float);
    return (size_t)(lq_tile_rows(w) * (w->k + 2 * G)) * sizeof(float);
}

lq_status lq_gemm_awq_cpu(const lq_qlinear *w, const float *x, int64_t m, float *y, void *ws,
                          size_t ws_size, int nthreads) {
    if (!ws || ws_size < lq_ws_awq_cpu(w, m))
        return LQ_ERR_INVALID_ARG;
    const int64_t n = w->n, k = w->k, gs = w->group_size, G = k / gs;
    const int     nt = lq_cpu_threads(nthreads);
    float        *f  = ws;
    if (m <= LQ_FUSED_M) {
        float *xsum = f;
        for (int64_t r = 0; r < m; r++)
            for (int64_t g = 0; g < G; g++) {
                float sacc = 0.f;
                for (int64_t c = g * gs; c < (g + 1) * gs; c++)
                    sacc += x[r * k + c];
                xsum[r * G + g] = sacc;
            }
        const int64_t nblk = n / NB;
#pragma omp parallel for schedule(static) num_threads(nt)
        for (int64_t bi = 0; bi < nblk; bi++)
            awq_fused(w, x, m, xsum, bi * NB, y);
        if (nblk * NB < n)
            awq_tail(w, x, m, nblk * NB, y, f + m * G);
    } else {
        if (!lq_blas_dims_ok(m, n, k))
            return LQ_ERR_UNSUPPORTED;
        const int64_t tr = lq_tile_rows(w), cb = 64, ncb = (k + cb - 1) / cb;
        float        *tile = f, *sc = f + tr * k, *zs = sc + G * tr;
        for (int64_t i0 = 0; i0 < n; i0 += tr) {
            const int64_t nc = i0 + tr < n ? tr : n - i0;
#pragma omp parallel num_threads(nt)
            {
#pragma omp for schedule(static)
                for (int64_t g = 0; g < G; g++)
                    awq_params(w, g, g + 1, i0, nc, tr, sc, zs);
#pragma omp for schedule(static)
                for (int64_t t = 0; t < ncb; t++)
                    awq_kn(w, t * cb, (t + 1) * cb < k ? (t + 1) * cb : k, i0, nc, sc, zs, tr,
                           tile + t * cb * nc, nc);
            }
            lq_sgemm_tile(x, m, k, tile, nc, 1, y + i0, n, 0.f);
        }
    }
    lq_add_bias_f16(w->bias, m, n, y);
    return LQ_OK;
}
