/* lq_ops_impl.h -- row bodies the ref and cpu op backends share (kernels/ref/lq_ref_ops.c,
 * kernels/cpu/lq_cpu_ops.c), so that where the cpu backend only adds threads it computes the
 * reference's bits. Internal to kernels/. */
#ifndef LQ_OPS_IMPL_H
#define LQ_OPS_IMPL_H

#include "lq_ops.h"

#include <math.h>
#include <string.h>

/* One row of RMSNorm (lq_ops.rmsnorm): the sum of squares in double, then float32. */
static inline void lq_rmsnorm_row(const float *xr, const float *w, int64_t d, double eps,
                                  int plus_one, float *o) {
    double ss = 0;
    for (int64_t i = 0; i < d; i++)
        ss += (double)xr[i] * xr[i];
    const float inv = (float)(1.0 / sqrt(ss / (double)d + eps));
    if (plus_one) /* Gemma: (x * inv) * (1 + w), all in float32 */
        for (int64_t i = 0; i < d; i++)
            o[i] = (xr[i] * inv) * (1.0f + w[i]);
    else
        for (int64_t i = 0; i < d; i++)
            o[i] = w[i] * (xr[i] * inv);
}

/* One token's heads of rotate-half RoPE, c / s the position's row of the table. */
static inline void lq_rope_row(float *x, int64_t nheads, int64_t half, const float *c,
                               const float *s) {
    const int64_t hd = 2 * half;
    for (int64_t h = 0; h < nheads; h++) {
        float *v = x + h * hd;
        for (int64_t j = 0; j < half; j++) {
            const float x1 = v[j], x2 = v[j + half];
            v[j]           = x1 * c[j] - x2 * s[j];
            v[j + half]    = x2 * c[j] + x1 * s[j];
        }
    }
}

/* GELU, tanh approximation, as PyTorch's float kernel writes it */
static inline float lq_gelu_tanh(float x) {
    const float beta  = (float)(1.41421356237309504880 * 1.12837916709551257390 *
                               0.5); /* M_SQRT2 * M_2_SQRTPI * 0.5 */
    const float kappa = 0.044715f;
    const float inner = beta * (x + kappa * x * x * x);
    return 0.5f * x * (1.0f + tanhf(inner));
}

/* One token of lq_ops.moe_route, as transformers' sparse MoE blocks: softmax in float32, the
 * top K (ties to the lower index, as torch.topk), their probabilities (renormalized when
 * norm). */
static inline void lq_moe_route_row(float *p, int64_t E, int64_t K, int norm, int32_t *sel,
                                    float *w) {
    float mx = p[0], sum = 0;
    for (int64_t e = 1; e < E; e++)
        mx = p[e] > mx ? p[e] : mx;
    for (int64_t e = 0; e < E; e++)
        sum += (p[e] = expf(p[e] - mx));
    for (int64_t e = 0; e < E; e++)
        p[e] /= sum;
    float wsum = 0;
    for (int64_t j = 0; j < K; j++) {
        int64_t best = -1;
        for (int64_t e = 0; e < E; e++) {
            int taken = 0;
            for (int64_t i = 0; i < j && !taken; i++)
                taken = sel[i] == e;
            if (!taken && (best < 0 || p[e] > p[best]))
                best = e;
        }
        sel[j] = (int32_t)best;
        w[j]   = p[best];
        wsum += p[best];
    }
    if (norm)
        for (int64_t j = 0; j < K; j++)
            w[j] /= wsum;
}

/* Host memory for the host backends (64-byte aligned, counted) */
lq_status lq_ops_host_alloc(lq_be *be, void **p, size_t bytes);
void      lq_ops_host_release(lq_be *be, void *p, size_t bytes);
lq_status lq_ops_host_copy(lq_be *be, void *dst, const void *src, size_t bytes);
lq_status lq_ops_host_zero(lq_be *be, void *dst, size_t bytes);
lq_status lq_ops_host_copy2d(lq_be *be, float *dst, int64_t ldd, const float *src, int64_t lds,
                             int64_t rows, int64_t cols);
lq_status lq_ops_host_sync(lq_be *be);
lq_status lq_ops_host_linear_upload(lq_be *be, const lq_qlinear *w, lq_qlinear *dw, void **mem,
                                    size_t *bytes);

#endif
