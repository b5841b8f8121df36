/* AWQ: activation-aware weight quantization (Lin et al. 2023) with AutoAWQ's choices: duo
 * scaling, a 20-point ratio grid, normalized scales, zero-point groups, and the clip search of
 * auto_clip_layer. The module-level loss comes from the driver through a callback so the same
 * search serves the attention block, the MLP, and single linears. */
#include "lq_kernels.h"
#include "lq_quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void quant_group(float *w, int64_t len, int maxq, uint8_t *q, float *scale, int32_t *zero) {
    float mx = w[0], mn = w[0];
    for (int64_t j = 1; j < len; j++) {
        mx = w[j] > mx ? w[j] : mx;
        mn = w[j] < mn ? w[j] : mn;
    }
    float s = (mx - mn) > 1e-5f ? (mx - mn) : 1e-5f;
    s /= (float)maxq;
    float z = -nearbyintf(mn / s);
    z       = z < 0 ? 0 : z > (float)maxq ? (float)maxq : z;
    for (int64_t j = 0; j < len; j++) {
        float c = nearbyintf(w[j] / s) + z;
        c       = c < 0 ? 0 : c > (float)maxq ? (float)maxq : c;
        if (q)
            q[j] = (uint8_t)c;
        w[j] = (c - z) * s;
    }
    if (scale)
        *scale = s;
    if (zero)
        *zero = (int32_t)z;
}

void lq_awq_quantize(float *W, int64_t n, int64_t k, int64_t group, int bits, uint8_t *q,
                     float *scales, int32_t *zeros) {
    int64_t g = group <= 0 || group > k ? k : group, G = k / g;
    int     maxq = (1 << bits) - 1;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n; r++)
        for (int64_t gi = 0; gi < G; gi++)
            quant_group(W + r * k + gi * g, g, maxq, q ? q + r * k + gi * g : NULL,
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
    float   **wq     = calloc((size_t)g->nlin, sizeof *wq);
    lq_status st     = LQ_OK;
    int64_t   rows   = 0;
    if (!w_mean || !s || !wq) {
        st = lq_fail(err, LQ_ERR_NOMEM, "awq: out of memory");
        goto done;
    }
    for (int l = 0; l < g->nlin; l++) {
        wq[l] = malloc((size_t)(g->n[l] * k) * sizeof(float));
        if (!wq[l]) {
            st = lq_fail(err, LQ_ERR_NOMEM, "awq: out of memory");
            goto done;
        }
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
        for (int l = 0; l < g->nlin; l++) {
            int64_t n = g->n[l];
            for (int64_t r = 0; r < n; r++)
                for (int64_t c = 0; c < k; c++)
                    wq[l][r * k + c] = g->w[l][r * k + c] * s[c];
            lq_awq_quantize(wq[l], n, k, grp, g->bits, NULL, NULL, NULL);
            for (int64_t r = 0; r < n; r++)
                for (int64_t c = 0; c < k; c++)
                    wq[l][r * k + c] /= s[c];
        }
        double ls = 0;
        if ((st = loss(user, wq, &ls)) != LQ_OK)
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
    if (wq)
        for (int l = 0; l < g->nlin; l++)
            free(wq[l]);
    free(wq);
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

/* out[i] = sum over j in order of xg[j * ts + i] * w[j], for the ts tokens of a group */
static void group_out(const float *xg, int64_t ts, const float *w, int64_t g, float *out) {
    for (int64_t i = 0; i < ts; i++)
        out[i] = 0.f;
    for (int64_t j = 0; j < g; j++) {
        const float  wj = w[j];
        const float *xc = xg + j * ts;
        for (int64_t i = 0; i < ts; i++)
            out[i] += xc[i] * wj;
    }
}

lq_status lq_awq_clip(float *W, int64_t n, int64_t k, const float *X, int64_t t, int64_t group,
                      int bits, lq_err *err) {
    const int n_grid = 20, max_steps = 10; /* max_shrink 0.5 x n_grid 20 */
    int64_t   g = group <= 0 || group > k ? k : group, G = k / g;
    int64_t   step = t / 512 > 0 ? t / 512 : 1; /* input_feat[:, 0::t // 512] */
    int64_t   ts   = (t + step - 1) / step;
    int       maxq = (1 << bits) - 1;
    if (k % g) /* AutoAWQ groups must tile k exactly (the GEMM layout requires it too) */
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "awq clip: group size %lld does not divide %lld inputs",
                (long long)g, (long long)k);
    /* the sampled tokens transposed, [k, ts]: a group's outputs for all tokens are then
     * vector loops over tokens, each token's dot product still summed in input order (the
     * same floats as one token at a time) */
    float *Xs = malloc((size_t)(ts * k) * sizeof(float));
    if (!Xs)
        LQ_FAIL(err, LQ_ERR_NOMEM, "awq clip: out of memory");
    for (int64_t i = 0; i < ts; i++)
        for (int64_t c = 0; c < k; c++)
            Xs[c * ts + i] = X[i * step * k + c];
    lq_status st = LQ_OK;
#pragma omp parallel
    {
        float *wq   = malloc((size_t)g * sizeof(float));
        float *orig = malloc((size_t)ts * sizeof(float));
        float *out  = malloc((size_t)ts * sizeof(float));
        if (!wq || !orig || !out) {
#pragma omp critical
            st = LQ_ERR_NOMEM;
        }
#pragma omp for schedule(dynamic) collapse(2)
        for (int64_t r = 0; r < n; r++)
            for (int64_t gi = 0; gi < G; gi++) {
                if (!wq || !orig || !out)
                    continue;
                float       *w  = W + r * k + gi * g;
                const float *xg = Xs + gi * g * ts;
                float        mx = 0;
                for (int64_t j = 0; j < g; j++)
                    mx = fabsf(w[j]) > mx ? fabsf(w[j]) : mx;
                group_out(xg, ts, w, g, orig);
                double best = INFINITY;
                float  bmax = mx;
                for (int is = 0; is < max_steps; is++) {
                    float m = mx * (1.0f - (float)is / n_grid);
                    for (int64_t j = 0; j < g; j++)
                        wq[j] = w[j] > m ? m : w[j] < -m ? -m : w[j];
                    quant_group(wq, g, maxq, NULL, NULL, NULL);
                    group_out(xg, ts, wq, g, out);
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
        free(wq);
        free(orig);
        free(out);
    }
    free(Xs);
    if (st != LQ_OK)
        LQ_FAIL(err, st, "awq clip: out of memory");
    return LQ_OK;
}
