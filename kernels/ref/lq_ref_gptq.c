/* Scalar oracle of GPTQ v1 (AutoGPTQ): w[i, c] = scale[g, i] * (q[c, i] - zero[g, i]) with
 * g = g_idx[c]. Plain loops on purpose: every other GPTQ kernel is tested against these. */
#include "lq_kernels_impl.h"

#include <math.h>
#include <stdlib.h>

static float gptq_w(const lq_qlinear *w, int64_t i, int64_t c) {
    const int64_t  g = w->g_idx[c];
    const uint32_t q = lq_stream_get((const int32_t *)w->qweight + i, w->n, c, w->bits);
    const int32_t  z = lq_gptq_zero(w, g, i);
    const float    s = lq_f16_to_f32(((const uint16_t *)w->scales)[g * w->n + i]);
    return s * (float)((int32_t)q - z);
}

void lq_dequant_gptq_ref(const lq_qlinear *w, float *out) {
    for (int64_t i = 0; i < w->n; i++)
        for (int64_t c = 0; c < w->k; c++)
            out[i * w->k + c] = gptq_w(w, i, c);
}

void lq_gemm_gptq_ref(const lq_qlinear *w, const float *x, int64_t m, float *y) {
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
            const double wv = (double)gptq_w(w, i, c);
            for (int64_t r = 0; r < m; r++)
                acc[r] += (double)x[r * w->k + c] * wv;
        }
        for (int64_t r = 0; r < m; r++)
            y[r * w->n + i] = (float)(acc[r] + (w->bias ? (double)lq_f16_to_f32(w->bias[i]) : 0.0));
    }
    free(acc);
}
