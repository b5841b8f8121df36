/* Scalar references of the model forward's vector functions (lq_kernels.h): plain libm loops,
 * the oracle of cpu/lq_cpu_vec.c. */
#include "lq_kernels.h"

#include <math.h>

static void softmax_row_ref(float *row, int64_t n, int64_t lo, int64_t hi) {
    float mx = -INFINITY;
    for (int64_t j = lo; j <= hi; j++)
        mx = row[j] > mx ? row[j] : mx;
    double sum = 0;
    for (int64_t j = lo; j <= hi; j++) {
        row[j] = expf(row[j] - mx);
        sum += row[j];
    }
    const float inv = (float)(1.0 / sum);
    for (int64_t j = 0; j < lo; j++)
        row[j] = 0.f;
    for (int64_t j = lo; j <= hi; j++)
        row[j] *= inv;
    for (int64_t j = hi + 1; j < n; j++)
        row[j] = 0.f;
}

static void silu_mul_ref(float *g, const float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float x = gate[i];
        g[i]          = x / (1.0f + expf(-x)) * up[i];
    }
}

const lq_vec_ops lq_vec_ops_ref = {softmax_row_ref, silu_mul_ref};
