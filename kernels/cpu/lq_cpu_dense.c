/* Unquantized float32 linears: OpenBLAS sgemm. */
#include "lq_kernels_impl.h"

#include <string.h>

lq_status lq_dequant_dense_cpu(const lq_qlinear *w, float *out, int nthreads) {
    memcpy(out, w->dense, (size_t)(w->n * w->k) * sizeof(float));
    return LQ_OK;
}

size_t lq_ws_dense_cpu(const lq_qlinear *w, int64_t m) {
    return 0;
}

lq_status lq_gemm_dense_cpu(const lq_qlinear *w, const float *x, int64_t m, float *y, void *ws,
                            size_t ws_size, int nthreads) {
    if (!lq_blas_dims_ok(m, w->n, w->k))
        return LQ_ERR_UNSUPPORTED;
    lq_sgemm_tile(x, m, w->k, w->dense, w->n, 0, y, w->n, 0.f);
    lq_add_bias_f16(w->bias, m, w->n, y);
    return LQ_OK;
}
