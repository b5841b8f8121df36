/* Shared pieces of the optimized CPU kernels: thread count, bias, and the large-m path that
 * dequantizes column tiles of W into the caller's workspace and hands them to OpenBLAS. */
#include "lq_kernels_impl.h"

#include <cblas.h>
#include <limits.h>
#include <omp.h>

int lq_cpu_threads(int nthreads) {
    return nthreads > 0 ? nthreads : omp_get_max_threads();
}

void lq_add_bias_f16(const uint16_t *bias, int64_t m, int64_t n, float *y) {
    if (!bias)
        return;
    for (int64_t r = 0; r < m; r++)
        for (int64_t i = 0; i < n; i++)
            y[r * n + i] += lq_f16_to_f32(bias[i]);
}

int lq_blas_dims_ok(int64_t m, int64_t n, int64_t k) {
    return m <= INT_MAX && n <= INT_MAX && k <= INT_MAX;
}

void lq_sgemm_tile(const float *x, int64_t m, int64_t k, const float *tile, int64_t nt, int kn,
                   float *y, int64_t ldy, float beta) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, kn ? CblasNoTrans : CblasTrans, (int)m, (int)nt,
                (int)k, 1.f, x, (int)k, tile, kn ? (int)nt : (int)k, beta, y, (int)ldy);
}
