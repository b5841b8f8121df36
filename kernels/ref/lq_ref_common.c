/* The scalar oracles of the weight-only formats share one shape: decode w[i, c] from the packed
 * layout, then multiply in double. Only the decoder differs, so only it is per format. */
#include "lq_kernels_impl.h"

#include <math.h>
#include <stdlib.h>

void lq_ref_dequant(const lq_qlinear *w, lq_ref_weight_fn wf, float *out) {
    for (int64_t i = 0; i < w->n; i++)
        for (int64_t c = 0; c < w->k; c++)
            out[i * w->k + c] = wf(w, i, c);
}

void lq_ref_gemm(const lq_qlinear *w, lq_ref_weight_fn wf, const float *x, int64_t m, float *y) {
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
            const double wv = (double)wf(w, i, c);
            for (int64_t r = 0; r < m; r++)
                acc[r] += (double)x[r * w->k + c] * wv;
        }
        for (int64_t r = 0; r < m; r++)
            y[r * w->n + i] = (float)(acc[r] + (w->bias ? (double)lq_f16_to_f32(w->bias[i]) : 0.0));
    }
    free(acc);
}
