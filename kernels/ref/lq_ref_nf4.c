/* Scalar oracle of bitsandbytes NF4: element e of the flattened row-major [n, k] weight is
 * quant_map[code(e)] * absmax(e / blocksize), absmax expanded from double quant when nested. */
#include "lq_kernels_impl.h"

#include <math.h>
#include <stdlib.h>

static float nf4_w(const lq_qlinear *w, int64_t e) {
    return w->quant_map[lq_nf4_code((const uint8_t *)w->qweight, e)] *
           lq_nf4_absmax(w, e / w->group_size);
}

void lq_dequant_nf4_ref(const lq_qlinear *w, float *out) {
    for (int64_t e = 0; e < w->n * w->k; e++)
        out[e] = nf4_w(w, e);
}

void lq_gemm_nf4_ref(const lq_qlinear *w, const float *x, int64_t m, float *y) {
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
            const double wv = (double)nf4_w(w, i * w->k + c);
            for (int64_t r = 0; r < m; r++)
                acc[r] += (double)x[r * w->k + c] * wv;
        }
        for (int64_t r = 0; r < m; r++)
            y[r * w->n + i] = (float)(acc[r] + (w->bias ? (double)lq_f16_to_f32(w->bias[i]) : 0.0));
    }
    free(acc);
}
