/* AWQ: activation-aware weight quantization (Lin et al. 2023) with AutoAWQ's choices: duo
 * scaling, a 20-point ratio grid, normalized scales, zero-point groups, and the clip search of
 * auto_clip_layer. The module-level loss comes from the driver through a callback so the same
 * search serves the attention block, the MLP, and single linears. */
#include "lq_kernels.h"
#include "lq_ops.h"
#include "lq_quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void lq_awq_quantize(float *W, int64_t n, int64_t k, int64_t group, int bits, uint8_t *q,
                     float *scales, int32_t *zeros) {
    int64_t g = group <= 0 || group > k ? k : group, G = k / g;
    int     maxq = (1 << bits) - 1;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n; r++)
        for (int64_t gi = 0; gi < G; gi++)
            lq_awq_quant_group(W + r * k + gi * g, g, maxq, q ? q + r * k + gi * g : NULL,
                        scales ? &scales[gi * n + r] : NULL, zeros ? &zeros[gi * n + r] : NULL);
}

lq_status lq_awq_search(const lq_awq_group *g, const float *x_mean, lq_awq_loss_fn loss, void *user,
                        float *best_s, double *best_ratio, double *best_loss, lq_err *err) {
    int64_t k = g->k, grp = g->group <= 0 || g->group > k ? k : g->group;
    int     ngrid = g->n_grid > 0 ? g->n_grid : 20;
    if (k % grp)
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "awq: group size %lld does not divide %lld inputs",
                (long long)grp, (long long)k);
    float    *w_mean = calloc((size_t)k, sizeof(float));
    float    *s      = malloc((size_t)k * sizeof(float));
    lq_status st     = LQ_OK;
    int64_t   rows   = 0;
    if (!w_mean || !s) {
        st = lq_fail(err, LQ_ERR_NOMEM, "awq: out of memory");
        goto done;
    }
    /* w_mean: |W| normalized by each group's max, averaged over all rows of all linears. */
    for (int l = 0; l < g->nlin; l++)
        for (int64_t r = 0; r < g->n[l]; r++) {
            const float *w = g->w[l] + r * k;
            for (int64_t c0 = 0; c0 < k; c0 += grp) {
                float mx = 0;
                for (int64_t c = c0; c < c0 + grp; c++)
                    mx = fabsf(w[c]) > mx ? fabsf(w[c]) : mx;
                for (int64_t c = c0; c < c0 + grp; c++)
                    w_mean[c] += mx > 0 ? fabsf(w[c]) / mx : 0.0f;
            }
            rows++;
        }
    for (int64_t c = 0; c < k; c++)
        w_mean[c] /= (float)rows;

    double best = INFINITY, best_r = -1;
    for (int gi = 0; gi < ngrid; gi++) {
        double ratio = (double)gi / ngrid;
        float  smax = 0, smin = INFINITY;
        for (int64_t c = 0; c < k; c++) {
            double v = g->duo_scaling ? pow(x_mean[c], ratio) / (pow(w_mean[c], 1 - ratio) + 1e-4)
                                      : pow(x_mean[c], ratio);
            s[c]     = v < 1e-4 ? 1e-4f : (float)v;
            smax     = s[c] > smax ? s[c] : smax;
            smin     = s[c] < smin ? s[c] : smin;
        }
        float norm = sqrtf(smax * smin);
        for (int64_t c = 0; c < k; c++)
            s[c] /= norm;
        double ls = 0;
        if ((st = loss(user, s, &ls)) != LQ_OK)
            goto done;
        if (ls < best) { /* strict: the first (smallest) ratio wins ties, as AutoAWQ */
            best   = ls;
            best_r = ratio;
            memcpy(best_s, s, (size_t)k * sizeof(float));
        }
    }
    if (best_r < 0) {
        st = lq_fail(err, LQ_ERR_NUMERIC, "awq: every scale candidate gave a non-finite loss");
        goto done;
    }
    if (best_ratio)
        *best_ratio = best_r;
    if (best_loss)
        *best_loss = best;
done:
    free(w_mean);
    free(s);
    return st;
}

void lq_awq_gram(const float *X, int64_t t, int64_t k, float *G) {
    lq_ssyrk_upper(k, t, 1.0f, X, 0.0f, G, 0);
    for (int64_t i = 0; i < k; i++)
        for (int64_t j = 0; j < i; j++)
            G[i * k + j] = G[j * k + i];
}

double lq_awq_gram_loss(const float *w, const float *wq, int64_t n, int64_t k, const float *G,
                        int64_t t, float *scratch) {
    float *dw = scratch, *m = scratch + n * k;
    for (int64_t i = 0; i < n * k; i++)
        dw[i] = wq[i] - w[i];
    lq_sgemm(0, 0, n, k, k, 1.0f, dw, k, G, k, 0.0f, m, k, 0);
    double s = 0;
    for (int64_t i = 0; i < n * k; i++)
        s += (double)m[i] * dw[i];
    return s / ((double)t * (double)n);
}

lq_status lq_awq_clip(float *W, int64_t n, int64_t k, const float *X, int64_t t, int64_t group,
                      int bits, lq_err *err) {
    int64_t g = group <= 0 || group > k ? k : group;
    if (k % g) /* AutoAWQ groups must tile k exactly (the GEMM layout requires it too) */
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "awq clip: group size %lld does not divide %lld inputs",
                (long long)g, (long long)k);
    lq_be be; /* the op table's, on the host */
    lq_be_init_host(&be, lq_ops_cpu(), 0);
    const lq_status st = be.ops->awq_clip(&be, W, n, k, X, t, group, bits);
    lq_be_free(&be);
    if (st != LQ_OK)
        LQ_FAIL(err, st, "awq clip: out of memory");
    return LQ_OK;
}
