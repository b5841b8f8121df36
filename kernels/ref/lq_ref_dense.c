/* Scalar oracle of the unquantized path: dense float32 [n, k]. */
#include "lq_kernels_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void lq_dequant_dense_ref(const lq_qlinear *w, float *out) {
    memcpy(out, w->dense, (size_t)(w->n * w->k) * sizeof(float));
}

void lq_gemm_dense_ref(const lq_qlinear *w, const float *x, int64_t m, float *y) {
    const float *d = w->dense;
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
            const double wv = (double)d[i * w->k + c];
            for (int64_t r = 0; r < m; r++)
                acc[r] += (double)x[r * w->k + c] * wv;
        }
        for (int64_t r = 0; r < m; r++)
            y[r * w->n + i] = (float)(acc[r] + (w->bias ? (double)lq_f16_to_f32(w->bias[i]) : 0.0));
    }
    free(acc);
}
