/* Scalar oracle of AutoAWQ GEMM: w[i, c] = scale[c / G, i] * (q[c, i] - zero[c / G, i]), codes
 * and zeros packed along n with the [0,2,4,6,1,3,5,7] interleave, zeros stored as-is. */
#include "lq_kernels_impl.h"

#include <math.h>
#include <stdlib.h>

static float awq_w(const lq_qlinear *w, int64_t i, int64_t c) {
    const int64_t  words = w->n / 8;
    const int64_t  g     = c / w->group_size;
    const uint32_t q     = lq_awq_get((const int32_t *)w->qweight + c * words, i);
    const uint32_t z     = lq_awq_get((const int32_t *)w->qzeros + g * words, i);
    const float    s     = lq_f16_to_f32(((const uint16_t *)w->scales)[g * w->n + i]);
    return s * (float)((int32_t)q - (int32_t)z);
}

void lq_dequant_awq_ref(const lq_qlinear *w, float *out) {
    for (int64_t i = 0; i < w->n; i++)
        for (int64_t c = 0; c < w->k; c++)
            out[i * w->k + c] = awq_w(w, i, c);
}

void lq_gemm_awq_ref(const lq_qlinear *w, const float *x, int64_t m, float *y) {
    /* weights decoded once per (i, c); each y[r, i] still sums c in ascending order */
    double *acc = malloc((size_t)m * sizeof *acc);
    if (!acc) { /* the oracle has no error channel: make the failure impossible to miss */
        for (int64_t e = 0; e < m * w->n; e++)
            y[e] = NAN;
        return;
    }
    for (int64_t i = 0; i < w->n; i++) {
        for (int64_t r = 0; r < m; r++)
            acc[r] = 0.0;
        for (int64_t c = 0; c < w->k; c++) {
            const double wv = (double)awq_w(w, i, c);
            for (int64_t r = 0; r < m; r++)
                acc[r] += (double)x[r * w->k + c] * wv;
        }
        for (int64_t r = 0; r < m; r++)
            y[r * w->n + i] = (float)(acc[r] + (w->bias ? (double)lq_f16_to_f32(w->bias[i]) : 0.0));
    }
    free(acc);
}
