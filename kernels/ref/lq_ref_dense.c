/* Scalar oracle of the unquantized path: dense float32 [n, k]. */
#include "lq_kernels_impl.h"

static float dense_w(const lq_qlinear *w, int64_t i, int64_t c) {
    return ((const float *)w->dense)[i * w->k + c];
}

void lq_dequant_dense_ref(const lq_qlinear *w, float *out) {
    lq_ref_dequant(w, dense_w, out);
}

void lq_gemm_dense_ref(const lq_qlinear *w, const float *x, int64_t m, float *y) {
    lq_ref_gemm(w, dense_w, x, m, y);
}
