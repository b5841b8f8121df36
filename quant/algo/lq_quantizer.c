/* Affine quantizer and round-to-nearest (IST-DASLab gptq quant.py semantics). */
#include "lq_qparams.h"
#include "lq_quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int64_t lq_num_groups(int64_t k, int64_t group_size) {
    return group_size <= 0 || group_size >= k ? 1 : (k + group_size - 1) / group_size;
}

void lq_params_from_range(float xmin, float xmax, const lq_qspec *s, float *scale, float *zero) {
    lq_qparams(xmin, xmax, s->bits, s->sym, s->v1_safe, scale, zero);
}

void lq_group_params(const float *x, int64_t cnt, int64_t stride, const lq_qspec *s, float *scale,
                     float *zero) {
    lq_group_params_w(x, cnt, stride, s, NULL, scale, zero);
}

void lq_group_params_w(const float *x, int64_t cnt, int64_t stride, const lq_qspec *s,
                       const float *wt, float *scale, float *zero) {
    float mn = x[0], mx = x[0];
    for (int64_t c = 1; c < cnt; c++) {
        const float v = x[c * stride];
        mn            = v < mn ? v : mn;
        mx            = v > mx ? v : mx;
    }
    lq_params_from_range(mn, mx, s, scale, zero);
    if (!s->mse)
        return;
    const int maxq = (1 << s->bits) - 1;
    double    best = INFINITY;
    for (int i = 0; i < (int)(LQ_MSE_MAXSHRINK * LQ_MSE_GRID); i++) {
        const float p = 1.f - (float)i / (float)LQ_MSE_GRID;
        float       sc, z;
        lq_params_from_range(p * mn, p * mx, s, &sc, &z);
        double e = 0;
        for (int64_t c = 0; c < cnt; c++) {
            const float v = x[c * stride];
            const float d = sc * ((float)lq_quant_code(v, sc, z, maxq) - z) - v;
            if (s->mse == LQ_MSE_WEIGHTED) /* squared error, weighted when weights are given */
                e += (double)d * d * (wt ? wt[c] : 1.0);
            else
                e += pow(fabs((double)d), LQ_MSE_NORM);
        }
        if (e < best) {
            best   = e;
            *scale = sc;
            *zero  = z;
        }
    }
}

void lq_find_params(const float *w, int64_t rows, int64_t cols, int64_t ld, const lq_qspec *s,
                    float *scale, float *zero) {
    for (int64_t r = 0; r < rows; r++)
        lq_group_params(w + r * ld, cols, 1, s, &scale[r], &zero[r]);
}

lq_status lq_rtn(const float *W, int64_t n, int64_t k, const lq_qspec *s, uint8_t *q, float *scales,
                 int32_t *zeros, int32_t *g_idx, float *Wq, lq_err *err) {
    int64_t g    = s->group_size <= 0 || s->group_size > k ? k : s->group_size;
    int64_t G    = lq_num_groups(k, s->group_size);
    int     maxq = (1 << s->bits) - 1;
    if (s->bits < 2 || s->bits > 8)
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "rtn: bits %d outside 2..8", s->bits);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n; r++) {
        for (int64_t gi = 0; gi < G; gi++) {
            int64_t c0 = gi * g, c1 = c0 + g < k ? c0 + g : k;
            float   sc, z;
            lq_find_params(W + r * k + c0, 1, c1 - c0, k, s, &sc, &z);
            scales[gi * n + r] = sc;
            zeros[gi * n + r]  = (int32_t)z;
            for (int64_t c = c0; c < c1; c++) {
                int code     = lq_quant_code(W[r * k + c], sc, z, maxq);
                q[r * k + c] = (uint8_t)code;
                if (Wq)
                    Wq[r * k + c] = sc * ((float)code - z);
            }
        }
    }
    if (g_idx)
        for (int64_t c = 0; c < k; c++)
            g_idx[c] = (int32_t)(c / g);
    return LQ_OK;
}
