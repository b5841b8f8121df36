/* Input statistics of a Linear, accumulated over calibration chunks. */
#include "lq_kernels.h"
#include "lq_quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

lq_status lq_xstats_init(lq_xstats *s, int64_t k, unsigned what, lq_err *err) {
    memset(s, 0, sizeof *s);
    s->k = k;
    if (what & LQ_XS_HESSIAN)
        s->H = lq_aligned_alloc((size_t)(k * k) * sizeof(float));
    if (what & (LQ_XS_ABSMEAN))
        s->abssum = calloc((size_t)k, sizeof(double));
    if (what & LQ_XS_ABSMAX)
        s->absmax = calloc((size_t)k, sizeof(float));
    if (((what & LQ_XS_HESSIAN) && !s->H) || ((what & LQ_XS_ABSMEAN) && !s->abssum) ||
        ((what & LQ_XS_ABSMAX) && !s->absmax)) {
        lq_xstats_free(s);
        LQ_FAIL(err, LQ_ERR_NOMEM, "out of memory for a %lld x %lld Hessian", (long long)k,
                (long long)k);
    }
    if (s->H)
        memset(s->H, 0, (size_t)(k * k) * sizeof(float));
    return LQ_OK;
}

void lq_xstats_add(lq_xstats *s, const float *x, int64_t t, int64_t nseq) {
    int64_t k = s->k;
    if (s->H) {
        /* gptq.py add_batch: H *= n/(n+tmp); n += tmp; H += (2/n) x^T x, tmp = sequences. */
        int64_t nn    = s->nsamples + nseq;
        float   beta  = (float)((double)s->nsamples / (double)nn);
        float   alpha = (float)(2.0 / (double)nn);
        lq_ssyrk_upper(k, t, alpha, x, beta, s->H, 0);
    }
    if (s->abssum)
        for (int64_t r = 0; r < t; r++)
            for (int64_t c = 0; c < k; c++)
                s->abssum[c] += fabsf(x[r * k + c]);
    if (s->absmax) /* a select, not a conditional store: the loop vectorizes (max) */
        for (int64_t r = 0; r < t; r++) {
            const float *xr = x + r * k;
            float       *mx = s->absmax;
            for (int64_t c = 0; c < k; c++) {
                const float a = fabsf(xr[c]);
                mx[c]         = a > mx[c] ? a : mx[c];
            }
        }
    s->nsamples += nseq;
    s->ntokens += t;
}

void lq_xstats_finish(lq_xstats *s) {
    if (!s->H)
        return;
    enum { TB = 64 }; /* in tiles: the upper triangle is read down its columns */
    const int64_t k = s->k;
    for (int64_t i0 = 0; i0 < k; i0 += TB)
        for (int64_t j0 = 0; j0 <= i0; j0 += TB) {
            const int64_t i1 = i0 + TB < k ? i0 + TB : k, j1 = j0 + TB < k ? j0 + TB : k;
            for (int64_t i = i0; i < i1; i++)
                for (int64_t j = j0; j < j1 && j < i; j++)
                    s->H[i * k + j] = s->H[j * k + i];
        }
}

void lq_xstats_absmean(const lq_xstats *s, float *out) {
    for (int64_t c = 0; c < s->k; c++)
        out[c] = s->ntokens ? (float)(s->abssum[c] / (double)s->ntokens) : 0.0f;
}

void lq_xstats_free(lq_xstats *s) {
    if (!s)
        return;
    lq_aligned_free(s->H);
    free(s->abssum);
    free(s->absmax);
    memset(s, 0, sizeof *s);
}
