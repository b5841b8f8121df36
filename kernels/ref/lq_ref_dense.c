/* Scalar oracle of the unquantized path: dense [n, k] in float32, fp16 or bf16. */
#include "lq_kernels_impl.h"

#include <stdlib.h>

static float dense_w(const lq_qlinear *w, int64_t i, int64_t c) {
    const int64_t e = i * w->k + c;
    switch (w->dense_dtype) {
    case LQ_DENSE_F16:
        return lq_f16_to_f32(((const uint16_t *)w->dense)[e]);
    case LQ_DENSE_BF16:
        return lq_bf16_to_f32(((const uint16_t *)w->dense)[e]);
    default:
        return ((const float *)w->dense)[e];
    }
}

void lq_dequant_dense_ref(const lq_qlinear *w, float *out) {
    lq_ref_dequant(w, dense_w, out);
}

void lq_gemm_dense_ref(const lq_qlinear *w, const float *x, int64_t m, float *y) {
    lq_ref_gemm(w, dense_w, x, m, y);
}

/* LQ_QLINEAR_BF16_X / LQ_QLINEAR_F16_X: the float oracle on x rounded to the weights' own
 * 16-bit type (to nearest even) */
void lq_gemm_dense_qx_ref(const lq_qlinear *w, const float *x, int64_t m, float *y) {
    float *xb = malloc((size_t)(m * w->k) * sizeof *xb);
    if (!xb) { /* the oracle has no error channel: make the failure impossible to miss */
        for (int64_t e = 0; e < m * w->n; e++)
            y[e] = NAN;
        return;
    }
    for (int64_t e = 0; e < m * w->k; e++)
        xb[e] = w->dense_dtype == LQ_DENSE_F16 ? lq_round_f16(x[e])
                                               : lq_bf16_to_f32(lq_f32_to_bf16(x[e]));
    lq_ref_gemm(w, dense_w, xb, m, y);
    free(xb);
}
