/* lq_ops_impl.h -- row bodies the ref and cpu op backends share (kernels/ref/lq_ref_ops.c,
 * kernels/cpu/lq_cpu_ops.c), so that where the cpu backend only adds threads it computes the
 * reference's bits. Internal to kernels/. */
#ifndef LQ_OPS_IMPL_H
#define LQ_OPS_IMPL_H

#include "lq_kernels.h"
#include "lq_ops.h"

#include <math.h>
#include <stdlib.h>
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

/* One row of lq_ops.awq_fakequant: out = Q(w s) / s group by group (k a multiple of g). */
static inline void lq_awq_fakequant_row(const float *w, const float *s, int64_t k, int64_t g,
                                        int maxq, float *out) {
    for (int64_t c = 0; c < k; c++)
        out[c] = w[c] * s[c];
    for (int64_t c0 = 0; c0 + g <= k; c0 += g)
        lq_awq_quant_group(out + c0, g, maxq, NULL, NULL, NULL);
    for (int64_t c = 0; c < k; c++)
        out[c] /= s[c];
}

/* out[i] = sum over j in order of xg[j * ts + i] * w[j], for the ts tokens of a group */
static inline void lq_awq_group_out(const float *xg, int64_t ts, const float *w, int64_t g,
                                    float *out) {
    for (int64_t i = 0; i < ts; i++)
        out[i] = 0.f;
    for (int64_t j = 0; j < g; j++) {
        const float  wj = w[j];
        const float *xc = xg + j * ts;
        for (int64_t i = 0; i < ts; i++)
            out[i] += xc[i] * wj;
    }
}

/* lq_ops.awq_clip's steps */
#define LQ_AWQ_CLIP_GRID  20
#define LQ_AWQ_CLIP_STEPS 10

/* One (row, group) of lq_ops.awq_clip: w [g] in place, xg [g, ts] the group's inputs of the
 * sampled tokens transposed; wq [g], orig and out [ts] scratch. */
static inline void lq_awq_clip_group(float *w, const float *xg, int64_t ts, int64_t g, int maxq,
                                     float *wq, float *orig, float *out) {
    float mx = 0;
    for (int64_t j = 0; j < g; j++)
        mx = fabsf(w[j]) > mx ? fabsf(w[j]) : mx;
    lq_awq_group_out(xg, ts, w, g, orig);
    double best = INFINITY;
    float  bmax = mx;
    for (int is = 0; is < LQ_AWQ_CLIP_STEPS; is++) {
        const float m = mx * (1.0f - (float)is / LQ_AWQ_CLIP_GRID);
        for (int64_t j = 0; j < g; j++)
            wq[j] = w[j] > m ? m : w[j] < -m ? -m : w[j];
        lq_awq_quant_group(wq, g, maxq, NULL, NULL, NULL);
        lq_awq_group_out(xg, ts, wq, g, out);
        double e = 0;
        for (int64_t i = 0; i < ts; i++)
            e += (double)(out[i] - orig[i]) * (out[i] - orig[i]);
        e /= (double)ts;
        if (e < best) {
            best = e;
            bmax = m;
        }
    }
    for (int64_t j = 0; j < g; j++)
        w[j] = w[j] > bmax ? bmax : w[j] < -bmax ? -bmax : w[j];
}

/* awq_clip's token sample: every step-th row (input_feat[:, 0::t // 512]), ts of them, into
 * xs [k, ts] transposed (NULL: out of memory) */
static inline float *lq_awq_clip_sample(const float *x, int64_t t, int64_t k, int64_t *ts_out) {
    const int64_t step = t / 512 > 0 ? t / 512 : 1, ts = (t + step - 1) / step;
    float        *xs = malloc((size_t)(ts * k) * sizeof(float));
    if (xs)
        for (int64_t i = 0; i < ts; i++)
            for (int64_t c = 0; c < k; c++)
                xs[c * ts + i] = x[i * step * k + c];
    *ts_out = ts;
    return xs;
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
/* The ref backend's ops the cpu backend runs as they are (nothing there to spread or vectorize
 * by hand: copies and sums in a fixed order) */
lq_status lq_ref_op_gather_rows(lq_be *be, float *dst, const float *src, const int32_t *idx,
                                int64_t cnt, int64_t d, int64_t div);
lq_status lq_ref_op_scatter_add(lq_be *be, float *out, const float *y, const int32_t *idx,
                                const float *wt, int64_t cnt, int64_t d, int64_t div);
lq_status lq_ref_op_gate_add(lq_be *be, float *out, const float *y, const float *g, int64_t T,
                             int64_t d);
lq_status lq_ref_op_scale_rows(lq_be *be, float *dst, const float *x, const float *a, int64_t t,
                               int64_t k);
lq_status lq_ref_op_col_absmax(lq_be *be, float *amax, const float *x, int64_t t, int64_t k);
lq_status lq_ref_op_col_abssum(lq_be *be, float *sum, const float *x, int64_t t, int64_t k);
lq_status lq_ref_op_sqdiff(lq_be *be, const float *a, const float *b, int64_t count, double *out);
lq_status lq_ref_op_dot(lq_be *be, const float *a, const float *b, int64_t count, double *out);
lq_status lq_ref_op_div_cols(lq_be *be, float *x, int64_t t, int64_t k, const float *s);

#endif
