/* test_quant_props -- the one property test of the quantization algorithms on plain arrays
 * (quant/algo), every random case printing its seed on failure:
 *   RTN     codes in range, zeros, g_idx, s * (q - z); half a step inside the clamp range (and
 *           everywhere with v1-safe zeros, asymmetric zeros >= 1); power-of-2 grids exact
 *   GPTQ    == RTN code for code when H is diagonal; beats RTN on tr((W-Q) H (W-Q)^T) for bits
 *           2/3/4/8 x per-channel/32/128 x act-order x sym x static groups, g_idx a group map,
 *           codes/scales/zeros giving its fake-quantized weights exactly and through the packed
 *           GPTQ scalar reference; damping retries (first retry on an indefinite calibration
 *           Hessian, the whole ladder on 2I - J, LQ_ERR_CHOLESKY naming the layer), dead inputs
 *   MSE     the range search (2.4-norm, and GPTQ's weighted loss) picks the grid point a
 *           transcription of gptq quant.py picks
 *   AWQ     the scale search returns the least loss it evaluated, AutoAWQ-normalized scales,
 *           never worse than s = 1; clipping never raises a group's loss
 *   NF4     codes nearest by brute force (bitsandbytes' tie rule), double-quant absmax bounds
 *   INT8    SCB = row absmax, codes round(127 w / SCB), outlier columns
 *   MIXED   --target-bpw allocation within budget, no affordable upgrade left, monotone in
 *           sensitivity, equal to the uniform widths at their own budgets
 *   XSTATS  Hessian / absmean / absmax accumulation in uneven chunks */
#include "lq_kernels.h"
#include "lq_kernels_impl.h"
#include "lq_mixed.h"
#include "lq_quant.h"
#include "lq_ops.h"
#include "lq_test.h"

#include <float.h>
#include <lapacke.h>
#include <omp.h>
#include <stdint.h>

static void fill_normal(lq_rng *r, float *x, int64_t cnt, float scale) {
    for (int64_t i = 0; i < cnt; i++)
        x[i] = scale * lq_rng_normal(r);
}

/* X [t, k] = Z [t, k] L with L = I + low-rank (rank 8) mixing, plus a few loud channels: the
 * shape of real transformer activations, where GPTQ's error feedback has something to use. */
static void correlated_x(lq_rng *r, float *X, int64_t t, int64_t k) {
    const int64_t rank = 8;
    float        *A    = malloc((size_t)(rank * k) * sizeof(float));
    float        *z    = malloc((size_t)(rank) * sizeof(float));
    fill_normal(r, A, rank * k, 1.0f);
    for (int64_t i = 0; i < t; i++) {
        fill_normal(r, z, rank, 1.0f);
        for (int64_t c = 0; c < k; c++) {
            float v = 0.3f * lq_rng_normal(r);
            for (int64_t j = 0; j < rank; j++)
                v += z[j] * A[j * k + c];
            X[i * k + c] = v;
        }
    }
    for (int64_t c = 0; c < k; c += k / 4) /* 4 outlier channels */
        for (int64_t i = 0; i < t; i++)
            X[i * k + c] *= 20.0f;
    free(A);
    free(z);
}

/* H [k, k] = (2 / t) X^T X, as lq_xstats. */
static void hessian(const float *X, int64_t t, int64_t k, float *H) {
    for (int64_t i = 0; i < k; i++)
        for (int64_t j = 0; j < k; j++) {
            double s = 0;
            for (int64_t a = 0; a < t; a++)
                s += (double)X[a * k + i] * X[a * k + j];
            H[i * k + j] = (float)(2.0 * s / (double)t);
        }
}

/* tr((W - Q) H (W - Q)^T) */
static double proxy_loss(const float *W, const float *Q, const float *H, int64_t n, int64_t k) {
    double *d   = malloc((size_t)k * sizeof(double));
    double  tot = 0;
    for (int64_t r = 0; r < n; r++) {
        for (int64_t c = 0; c < k; c++)
            d[c] = (double)W[r * k + c] - Q[r * k + c];
        for (int64_t i = 0; i < k; i++) {
            double s = 0;
            for (int64_t j = 0; j < k; j++)
                s += (double)H[i * k + j] * d[j];
            tot += d[i] * s;
        }
    }
    free(d);
    return tot;
}

typedef struct qout {
    uint8_t *q;
    float   *scales;
    int32_t *zeros;
    int32_t *g_idx;
    float   *wq;
} qout;

static qout qout_alloc(int64_t n, int64_t k, int64_t gs) {
    int64_t G = lq_num_groups(k, gs);
    qout    o = {malloc((size_t)(n * k)), malloc((size_t)(G * n) * sizeof(float)),
                 malloc((size_t)(G * n) * sizeof(int32_t)), malloc((size_t)k * sizeof(int32_t)),
                 malloc((size_t)(n * k) * sizeof(float))};
    return o;
}

static void qout_free(qout *o) {
    free(o->q);
    free(o->scales);
    free(o->zeros);
    free(o->g_idx);
    free(o->wq);
}

/* ---------------------------------------------------------------------------------------- */

static void test_rtn(void) {
    const int64_t n = 24, k = 256;
    const int64_t groups[] = {-1, 32, 128, 100};
    float        *W        = malloc((size_t)(n * k) * sizeof(float));
    for (int bits = 2; bits <= 8; bits++)
        for (int gi = 0; gi < 4; gi++)
            for (int sym = 0; sym < 2; sym++) {
                uint64_t seed = 1000u + (uint64_t)(bits * 100 + gi * 10 + sym);
                lq_rng   r;
                lq_rng_seed(&r, seed);
                fill_normal(&r, W, n * k, 0.05f);
                int64_t  gs = groups[gi], g = gs <= 0 ? k : gs, G = lq_num_groups(k, gs);
                int      maxq = (1 << bits) - 1;
                lq_qspec s    = {bits, gs, sym, 0, 0};
                qout     o    = qout_alloc(n, k, gs);
                lq_err   err  = {0};
                CHECK_MSG(lq_rtn(W, n, k, &s, o.q, o.scales, o.zeros, o.g_idx, o.wq, &err) == LQ_OK,
                          "seed %llu: %s", (unsigned long long)seed, err.msg);
                CHECK_EQ_INT(G, gs <= 0 ? 1 : (k + gs - 1) / gs);
                int bad_code = 0, bad_zero = 0, bad_gidx = 0, bad_wq = 0, bad_err = 0;
                for (int64_t c = 0; c < k; c++)
                    bad_gidx += o.g_idx[c] != (int32_t)(c / g);
                for (int64_t x = 0; x < G * n; x++) {
                    if (sym)
                        bad_zero += o.zeros[x] != (maxq + 1) / 2;
                    else
                        bad_zero += o.zeros[x] < 0 || o.zeros[x] > maxq;
                }
                for (int64_t row = 0; row < n; row++)
                    for (int64_t c = 0; c < k; c++) {
                        int64_t gg = c / g;
                        float   sc = o.scales[gg * n + row];
                        int32_t z  = o.zeros[gg * n + row];
                        int     q  = o.q[row * k + c];
                        bad_code += q > maxq;
                        bad_wq += o.wq[row * k + c] != sc * ((float)q - (float)z);
                        /* inside the clamp range the error is at most half a step */
                        float e = fabsf(W[row * k + c] - o.wq[row * k + c]);
                        if (q > 0 && q < maxq && e > 0.5f * sc * (1 + 1e-5f))
                            bad_err++;
                    }
                CHECK_MSG(!bad_code && !bad_zero && !bad_gidx && !bad_wq && !bad_err,
                          "rtn bits %d group %lld sym %d seed %llu: codes %d zeros %d g_idx %d "
                          "wq %d err %d",
                          bits, (long long)gs, sym, (unsigned long long)seed, bad_code, bad_zero,
                          bad_gidx, bad_wq, bad_err);
                qout_free(&o);
            }

    /* Values on an asymmetric grid with power-of-2 steps reconstruct exactly: each group holds
     * codes 0 and maxq so find_params recovers the same scale and zero. */
    for (int bits = 2; bits <= 8; bits++) {
        const int64_t gs = 32, G = k / gs;
        int           maxq = (1 << bits) - 1;
        lq_rng        r;
        uint64_t      seed = 2000u + (uint64_t)bits;
        lq_rng_seed(&r, seed);
        uint8_t *codes = malloc((size_t)(n * k));
        float   *sc    = malloc((size_t)(G * n) * sizeof(float));
        int32_t *zr    = malloc((size_t)(G * n) * sizeof(int32_t));
        for (int64_t row = 0; row < n; row++)
            for (int64_t gg = 0; gg < G; gg++) {
                float   s        = ldexpf(1.0f, -(int)lq_rng_below(&r, 8) - 4);
                int32_t z        = (int32_t)lq_rng_below(&r, (uint64_t)maxq + 1);
                sc[gg * n + row] = s;
                zr[gg * n + row] = z;
                for (int64_t c = gg * gs; c < (gg + 1) * gs; c++) {
                    int64_t j = c - gg * gs;
                    int q = j == 0 ? 0 : j == 1 ? maxq : (int)lq_rng_below(&r, (uint64_t)maxq + 1);
                    codes[row * k + c] = (uint8_t)q;
                    W[row * k + c]     = s * (float)(q - z);
                }
            }
        lq_qspec s   = {bits, gs, 0, 0, 0};
        qout     o   = qout_alloc(n, k, gs);
        lq_err   err = {0};
        CHECK(lq_rtn(W, n, k, &s, o.q, o.scales, o.zeros, o.g_idx, o.wq, &err) == LQ_OK);
        CHECK_MSG(memcmp(o.q, codes, (size_t)(n * k)) == 0, "grid codes bits %d seed %llu", bits,
                  (unsigned long long)seed);
        CHECK_MSG(memcmp(o.wq, W, (size_t)(n * k) * sizeof(float)) == 0,
                  "grid reconstruction bits %d seed %llu", bits, (unsigned long long)seed);
        CHECK_MSG(memcmp(o.scales, sc, (size_t)(G * n) * sizeof(float)) == 0 &&
                      memcmp(o.zeros, zr, (size_t)(G * n) * sizeof(int32_t)) == 0,
                  "grid params bits %d seed %llu", bits, (unsigned long long)seed);
        qout_free(&o);
        free(codes);
        free(sc);
        free(zr);
    }

    /* v1_safe: asymmetric zero 0 (all-positive group) is moved to 1, max still representable */
    {
        float    w[8] = {0.5f, 1, 2, 3, 4, 5, 6, 7.5f};
        uint8_t  q[8];
        float    scl, wq[8];
        int32_t  z, gidx[8];
        lq_qspec s   = {4, -1, 0, 1, 0};
        lq_err   err = {0};
        CHECK(lq_rtn(w, 1, 8, &s, q, &scl, &z, gidx, wq, &err) == LQ_OK);
        CHECK_EQ_INT(z, 1);
        CHECK_EQ_INT(q[7], 15);
        CHECK_NEAR(wq[7], 7.5, 1e-5);
        s.bits = 9;
        CHECK(lq_rtn(w, 1, 8, &s, q, &scl, &z, gidx, wq, &err) == LQ_ERR_INVALID_ARG);
    }
    free(W);
}

static lq_gptq_opts gopts(int bits, int64_t gs, int sym, int act, int stat) {
    lq_gptq_opts o  = {0};
    o.q             = (lq_qspec){bits, gs, sym, 0, 0};
    o.act_order     = act;
    o.static_groups = stat;
    o.damp          = 0.01;
    o.damp_retries  = 4;
    o.block_size    = 128;
    o.name          = "test.linear";
    return o;
}

/* With a diagonal H the inverse factor U is diagonal: no error feedback, so GPTQ is RTN. */
static void test_gptq_diag_is_rtn(void) {
    const int64_t n = 16, k = 192;
    const int64_t groups[] = {-1, 32, 128};
    float        *W        = malloc((size_t)(n * k) * sizeof(float));
    float        *W2       = malloc((size_t)(n * k) * sizeof(float));
    float        *H        = malloc((size_t)(k * k) * sizeof(float));
    for (int bits = 2; bits <= 8; bits++)
        for (int gi = 0; gi < 3; gi++)
            for (int sym = 0; sym < 2; sym++)
                for (int diag = 0; diag < 2; diag++)
                    for (int stat = 0; stat < 2; stat++) {
                        uint64_t seed =
                            3000u + (uint64_t)(bits * 1000 + gi * 100 + sym * 10 + diag * 2 + stat);
                        lq_rng r;
                        lq_rng_seed(&r, seed);
                        fill_normal(&r, W, n * k, 0.02f);
                        memcpy(W2, W, (size_t)(n * k) * sizeof(float));
                        memset(H, 0, (size_t)(k * k) * sizeof(float));
                        for (int64_t c = 0; c < k; c++)
                            H[c * k + c] = diag ? 0.5f + (float)lq_rng_uniform(&r) : 1.0f;
                        int64_t        gs = groups[gi];
                        lq_gptq_opts   o  = gopts(bits, gs, sym, 0, stat);
                        qout           a = qout_alloc(n, k, gs), b = qout_alloc(n, k, gs);
                        lq_gptq_result res;
                        lq_err         err = {0};
                        CHECK_MSG(lq_gptq(W2, H, n, k, &o, a.q, a.scales, a.zeros, a.g_idx, &res,
                                          &err) == LQ_OK,
                                  "seed %llu: %s", (unsigned long long)seed, err.msg);
                        CHECK(lq_rtn(W, n, k, &o.q, b.q, b.scales, b.zeros, b.g_idx, b.wq, &err) ==
                              LQ_OK);
                        int64_t G = lq_num_groups(k, gs);
                        int     same =
                            memcmp(a.q, b.q, (size_t)(n * k)) == 0 &&
                            memcmp(a.scales, b.scales, (size_t)(G * n) * sizeof(float)) == 0 &&
                            memcmp(a.zeros, b.zeros, (size_t)(G * n) * sizeof(int32_t)) == 0 &&
                            memcmp(a.g_idx, b.g_idx, (size_t)k * sizeof(int32_t)) == 0 &&
                            memcmp(W2, b.wq, (size_t)(n * k) * sizeof(float)) == 0;
                        CHECK_MSG(same,
                                  "gptq(diag H) != rtn: bits %d group %lld sym %d diag %d static "
                                  "%d seed %llu",
                                  bits, (long long)gs, sym, diag, stat, (unsigned long long)seed);
                        qout_free(&a);
                        qout_free(&b);
                    }
    free(W);
    free(W2);
    free(H);
}

/* Reconstruct through the GPTQ scalar reference after packing: the on-disk layout, g_idx
 * included, must decode to GPTQ's own fake-quantized weights (up to fp16 scales). */
static void check_through_ref(int bits, int64_t n, int64_t k, int64_t gs, const qout *a,
                              const float *wq, const char *what) {
    lq_qbuf   qb  = {0};
    lq_err    err = {0};
    lq_status st =
        lq_pack_gptq(bits, n, k, gs, a->q, a->zeros, a->scales, a->g_idx, NULL, &qb, &err);
    CHECK_MSG(st == LQ_OK, "%s: pack: %s", what, err.msg);
    if (st != LQ_OK)
        return;
    float *out = malloc((size_t)(n * k) * sizeof(float));
    lq_format_traits_get(LQ_FMT_GPTQ)->dequant_ref(&qb.q, out);
    int64_t bad = 0, worst = -1;
    for (int64_t r = 0; r < n; r++)
        for (int64_t c = 0; c < k; c++) {
            float s   = a->scales[(int64_t)a->g_idx[c] * n + r];
            float tol = fabsf(s) * (float)(1 << bits) * 1e-3f + 1e-7f; /* fp16 scale rounding */
            if (!(fabsf(out[r * k + c] - wq[r * k + c]) <= tol)) {
                bad++;
                worst = r * k + c;
            }
        }
    CHECK_MSG(bad == 0, "%s: %lld elements differ from the reference dequant (e.g. %lld: %g vs %g)",
              what, (long long)bad, (long long)worst, worst >= 0 ? out[worst] : 0.0,
              worst >= 0 ? wq[worst] : 0.0);
    free(out);
    lq_qbuf_free(&qb);
}

static void test_gptq_beats_rtn(void) {
    const int64_t  n = 32, k = 256, t = 512;
    const int64_t  groups[] = {-1, 32, 128};
    float         *X        = malloc((size_t)(t * k) * sizeof(float));
    float         *H        = malloc((size_t)(k * k) * sizeof(float));
    float         *Hc       = malloc((size_t)(k * k) * sizeof(float));
    float         *W        = malloc((size_t)(n * k) * sizeof(float));
    float         *Wg       = malloc((size_t)(n * k) * sizeof(float));
    lq_rng         r;
    const uint64_t seed = 4242;
    lq_rng_seed(&r, seed);
    correlated_x(&r, X, t, k);
    hessian(X, t, k, H);
    fill_normal(&r, W, n * k, 0.02f);
    const int bitsv[] = {2, 3, 4, 8};
    for (int bi = 0; bi < 4; bi++)
        for (int gi = 0; gi < 3; gi++)
            for (int act = 0; act < 2; act++)
                for (int sym = 0; sym < 2; sym++)
                    for (int stat = 0; stat < 2; stat++) {
                        int64_t gs = groups[gi];
                        if (stat && gs <= 0)
                            continue;
                        int            bits = bitsv[bi];
                        lq_gptq_opts   o    = gopts(bits, gs, sym, act, stat);
                        qout           a = qout_alloc(n, k, gs), b = qout_alloc(n, k, gs);
                        lq_gptq_result res;
                        lq_err         err = {0};
                        memcpy(Wg, W, (size_t)(n * k) * sizeof(float));
                        memcpy(Hc, H, (size_t)(k * k) * sizeof(float));
                        char what[160];
                        snprintf(what, sizeof what,
                                 "bits %d group %lld act %d sym %d static %d seed %llu", bits,
                                 (long long)gs, act, sym, stat, (unsigned long long)seed);
                        CHECK_MSG(lq_gptq(Wg, Hc, n, k, &o, a.q, a.scales, a.zeros, a.g_idx, &res,
                                          &err) == LQ_OK,
                                  "%s: %s", what, err.msg);
                        CHECK(lq_rtn(W, n, k, &o.q, b.q, b.scales, b.zeros, b.g_idx, b.wq, &err) ==
                              LQ_OK);
                        double lg = proxy_loss(W, Wg, H, n, k), lr = proxy_loss(W, b.wq, H, n, k);
                        CHECK_MSG(lg < lr, "%s: gptq proxy loss %g not below rtn %g", what, lg, lr);
                        CHECK_MSG(isfinite(res.loss) && res.loss > 0, "%s: loss %g", what,
                                  res.loss);
                        /* g_idx is a group map: values in range, each group exactly its size */
                        int64_t  G = lq_num_groups(k, gs), g = gs <= 0 ? k : gs;
                        int64_t *cnt = calloc((size_t)G, sizeof(int64_t));
                        int      bad = 0;
                        for (int64_t c = 0; c < k; c++) {
                            if (a.g_idx[c] < 0 || a.g_idx[c] >= G)
                                bad++;
                            else
                                cnt[a.g_idx[c]]++;
                        }
                        for (int64_t x = 0; x < G; x++)
                            bad += cnt[x] != (x + 1 < G ? g : k - g * (G - 1));
                        if (!act || stat) /* monotone c / g unless act-order regroups */
                            for (int64_t c = 0; c < k; c++)
                                bad += a.g_idx[c] != (int32_t)(c / g);
                        CHECK_MSG(bad == 0, "%s: g_idx is not a valid group map", what);
                        /* codes, scales and zeros give GPTQ's own fake-quantized weights */
                        int64_t off = 0;
                        for (int64_t row = 0; bad == 0 && row < n; row++)
                            for (int64_t c = 0; c < k; c++) {
                                const int64_t gg = a.g_idx[c];
                                off += Wg[row * k + c] !=
                                       a.scales[gg * n + row] *
                                           ((float)a.q[row * k + c] - (float)a.zeros[gg * n + row]);
                            }
                        CHECK_MSG(off == 0, "%s: %lld weights are not s * (q - z)", what,
                                  (long long)off);
                        free(cnt);
                        if (bits != 8 || gs != 32) /* pack covers 2/3/4/8; skip one for time */
                            check_through_ref(bits, n, k, gs, &a, Wg, what);
                        qout_free(&a);
                        qout_free(&b);
                    }
    free(X);
    free(H);
    free(Hc);
    free(W);
    free(Wg);
}

typedef struct warn_log {
    int  calls;
    char last[256];
} warn_log;

static void on_warn(void *user, const char *msg) {
    warn_log *w = user;
    w->calls++;
    snprintf(w->last, sizeof w->last, "%s", msg);
}

static void test_gptq_damping_and_dead(void) {
    const int64_t n = 8, k = 16;
    float         W[8 * 16], H[16 * 16];
    lq_rng        r;
    lq_rng_seed(&r, 77);
    qout           a = qout_alloc(n, k, -1);
    lq_gptq_result res;
    lq_err         err = {0};

    /* singular (all ones, rank 1) with damp 0: the first Cholesky fails, 0.01 succeeds */
    {
        fill_normal(&r, W, n * k, 1.0f);
        for (int64_t x = 0; x < k * k; x++)
            H[x] = 1.0f;
        lq_gptq_opts o = gopts(4, -1, 1, 0, 0);
        o.damp         = 0;
        warn_log wl    = {0};
        o.warn         = on_warn;
        o.warn_user    = &wl;
        CHECK_MSG(lq_gptq(W, H, n, k, &o, a.q, a.scales, a.zeros, a.g_idx, &res, &err) == LQ_OK,
                  "%s", err.msg);
        CHECK(wl.calls >= 1 && res.retries == wl.calls);
        CHECK(strstr(wl.last, "test.linear") != NULL);
        CHECK(res.damp_used > 0);
        int finite = 1;
        for (int64_t x = 0; x < n * k; x++)
            finite &= isfinite(W[x]);
        CHECK(finite);
    }
    /* indefinite (2I - J has eigenvalue 2 - k): needs damping 100 x mean(diag) */
    {
        fill_normal(&r, W, n * k, 1.0f);
        for (int64_t i = 0; i < k; i++)
            for (int64_t j = 0; j < k; j++)
                H[i * k + j] = (i == j ? 2.0f : 0.0f) - 1.0f;
        lq_gptq_opts o  = gopts(4, -1, 0, 1, 0);
        warn_log     wl = {0};
        o.warn          = on_warn;
        o.warn_user     = &wl;
        CHECK_MSG(lq_gptq(W, H, n, k, &o, a.q, a.scales, a.zeros, a.g_idx, &res, &err) == LQ_OK,
                  "%s", err.msg);
        CHECK_EQ_INT(res.retries, 4);
        CHECK_EQ_INT(wl.calls, 4);
        CHECK_NEAR(res.damp_used, 100.0, 1e-6);
        /* ... and with too few retries it fails with LQ_ERR_CHOLESKY naming the layer */
        for (int64_t i = 0; i < k; i++)
            for (int64_t j = 0; j < k; j++)
                H[i * k + j] = (i == j ? 2.0f : 0.0f) - 1.0f;
        o.damp_retries = 2;
        wl.calls       = 0;
        CHECK(lq_gptq(W, H, n, k, &o, a.q, a.scales, a.zeros, a.g_idx, &res, &err) ==
              LQ_ERR_CHOLESKY);
        CHECK(strstr(err.msg, "test.linear") != NULL);
        CHECK_EQ_INT(wl.calls, 2);
    }
    /* dead inputs: H_ii = 0 columns are quantized to exactly zero */
    for (int act = 0; act < 2; act++) {
        const int64_t t = 64;
        float         X[64 * 16];
        fill_normal(&r, X, t * k, 1.0f);
        for (int64_t i = 0; i < t; i++)
            X[i * k + 3] = X[i * k + 11] = 0;
        hessian(X, t, k, H);
        fill_normal(&r, W, n * k, 1.0f);
        lq_gptq_opts o = gopts(4, 8, 0, act, 0);
        qout         b = qout_alloc(n, k, 8);
        CHECK_MSG(lq_gptq(W, H, n, k, &o, b.q, b.scales, b.zeros, b.g_idx, &res, &err) == LQ_OK,
                  "%s", err.msg);
        int bad = 0;
        for (int64_t row = 0; row < n; row++) {
            bad += W[row * k + 3] != 0 || W[row * k + 11] != 0;
            for (int64_t c = 0; c < k; c++)
                bad += !isfinite(W[row * k + c]);
            bad += b.q[row * k + 3] != b.zeros[(int64_t)b.g_idx[3] * n + row];
        }
        CHECK_MSG(bad == 0, "dead columns act %d", act);
        qout_free(&b);
    }
    qout_free(&a);
}

/* A calibration Hessian made indefinite (its smallest eigenvalue moved to -5% of the mean
 * diagonal, as a rank-deficient calibration set can make it): damping 0.01 fails, the first
 * retry (0.1) succeeds with one warning; without retries it is LQ_ERR_CHOLESKY. */
static void test_gptq_first_retry(void) {
    const int64_t n = 32, k = 128, t = 512;
    float        *X = malloc((size_t)(t * k) * sizeof(float)), *H = malloc((size_t)(k * k) * 4);
    float        *W = malloc((size_t)(n * k) * sizeof(float)), *Ev = malloc((size_t)(k * k) * 4);
    float        *ev = malloc((size_t)k * 4);
    lq_rng        r;
    lq_rng_seed(&r, 4343);
    correlated_x(&r, X, t, k);
    hessian(X, t, k, H);
    fill_normal(&r, W, n * k, 0.1f);
    double mean = 0;
    for (int64_t i = 0; i < k; i++)
        mean += H[i * k + i];
    mean /= (double)k;
    memcpy(Ev, H, (size_t)(k * k) * 4);
    CHECK_EQ_INT(LAPACKE_ssyev(LAPACK_ROW_MAJOR, 'N', 'U', (lapack_int)k, Ev, (lapack_int)k, ev),
                 0);
    for (int64_t i = 0; i < k; i++)
        H[i * k + i] -= (float)(ev[0] + 0.05 * mean);
    for (int retries = 8; retries >= 0; retries -= 8) {
        float *Hc = malloc((size_t)(k * k) * 4), *Wc = malloc((size_t)(n * k) * 4);
        memcpy(Hc, H, (size_t)(k * k) * 4), memcpy(Wc, W, (size_t)(n * k) * 4);
        lq_gptq_opts o    = gopts(4, 32, 0, 0, 0);
        warn_log     wl   = {0};
        o.damp_retries    = retries;
        o.warn            = on_warn;
        o.warn_user       = &wl;
        qout            a = qout_alloc(n, k, 32);
        lq_gptq_result  res;
        lq_err          err = {0};
        const lq_status st = lq_gptq(Wc, Hc, n, k, &o, a.q, a.scales, a.zeros, a.g_idx, &res, &err);
        if (retries) {
            CHECK_MSG(st == LQ_OK && wl.calls == 1 && res.retries == 1 &&
                          fabs(res.damp_used - 0.1) < 1e-12,
                      "first retry: status %d, %d warnings, %d retries, damp %g", (int)st, wl.calls,
                      res.retries, res.damp_used);
        } else {
            CHECK_EQ_INT(st, LQ_ERR_CHOLESKY);
        }
        qout_free(&a);
        free(Hc), free(Wc);
    }
    free(X), free(H), free(W), free(Ev), free(ev);
}

/* ---------------------------------------------------------------------------------------- */

typedef struct awq_ctx {
    const float *X;
    int64_t      t, n, k;
    const float *W;
    int          calls;
    double       seen_min; /* smallest loss the search asked for */
} awq_ctx;

static double out_mse(const awq_ctx *c, const float *wq) {
    double s = 0;
    for (int64_t i = 0; i < c->t; i++)
        for (int64_t r = 0; r < c->n; r++) {
            double a = 0, b = 0;
            for (int64_t j = 0; j < c->k; j++) {
                a += (double)c->X[i * c->k + j] * c->W[r * c->k + j];
                b += (double)c->X[i * c->k + j] * wq[r * c->k + j];
            }
            s += (a - b) * (a - b);
        }
    return s / (double)(c->t * c->n);
}

/* AWQ's candidate Q(W s) / s on the host (the op table's awq_fakequant, cpu backend) */
static float *candidate(const float *W, const float *s, int64_t n, int64_t k, int64_t gs) {
    float *wq = malloc((size_t)(n * k) * sizeof(float));
    lq_be  be;
    lq_be_init_host(&be, lq_ops_cpu(), 0);
    (void)be.ops->awq_fakequant(&be, W, s, n, k, gs, 4, wq);
    return wq;
}

static lq_status awq_loss(void *user, const float *s, double *loss) {
    awq_ctx *c  = user;
    float   *wq = candidate(c->W, s, c->n, c->k, 32);
    c->calls++;
    *loss = out_mse(c, wq);
    free(wq);
    if (*loss < c->seen_min)
        c->seen_min = *loss;
    return LQ_OK;
}

typedef struct gram_ctx {
    const float *W, *G;
    float       *scr;
    int64_t      t, n, k;
} gram_ctx;

static lq_status gram_loss(void *user, const float *s, double *loss) {
    gram_ctx *c  = user;
    float    *wq = candidate(c->W, s, c->n, c->k, 32);
    *loss        = lq_awq_gram_loss(c->W, wq, c->n, c->k, c->G, c->t, c->scr);
    free(wq);
    return LQ_OK;
}

static void test_awq(void) {
    const int64_t  n = 32, k = 128, t = 256, gs = 32;
    float         *X    = malloc((size_t)(t * k) * sizeof(float));
    float         *W    = malloc((size_t)(n * k) * sizeof(float));
    float         *Wq   = malloc((size_t)(n * k) * sizeof(float));
    float         *xm   = malloc((size_t)k * sizeof(float));
    float         *s    = malloc((size_t)k * sizeof(float));
    const uint64_t seed = 555;
    lq_rng         r;
    lq_rng_seed(&r, seed);
    correlated_x(&r, X, t, k);
    fill_normal(&r, W, n * k, 0.02f);
    for (int64_t j = 0; j < k; j++) {
        double a = 0;
        for (int64_t i = 0; i < t; i++)
            a += fabs(X[i * k + j]);
        xm[j] = (float)(a / (double)t);
    }
    for (int duo = 0; duo < 2; duo++) {
        awq_ctx      c     = {X, t, n, k, W, 0, INFINITY};
        float       *wl[1] = {W};
        int64_t      nn[1] = {n};
        lq_awq_group g     = {1, wl, nn, k, gs, 4, 20, duo};
        double       ratio = -1, best = -1;
        lq_err       err = {0};
        CHECK_MSG(lq_awq_search(&g, xm, awq_loss, &c, s, &ratio, &best, &err) == LQ_OK, "%s",
                  err.msg);
        CHECK_EQ_INT(c.calls, 20);
        CHECK_MSG(best == c.seen_min, "awq duo %d: best %g is not the least loss seen %g", duo,
                  best, c.seen_min);
        /* s = 1 baseline: plain zero-point quantization */
        memcpy(Wq, W, (size_t)(n * k) * sizeof(float));
        lq_awq_quantize(Wq, n, k, gs, 4, NULL, NULL, NULL);
        double base = out_mse(&c, Wq);
        if (!duo) /* ratio 0 is exactly s = 1 */
            CHECK_MSG(best <= base, "awq duo %d seed %llu: best %g > s=1 %g", duo,
                      (unsigned long long)seed, best, base);
        CHECK_MSG(best < base,
                  "awq duo %d seed %llu: search found nothing better than s=1 (%g vs %g)", duo,
                  (unsigned long long)seed, best, base);
        /* normalized as AutoAWQ: sqrt(max * min) = 1 */
        float mx = 0, mn = INFINITY;
        for (int64_t j = 0; j < k; j++) {
            mx = s[j] > mx ? s[j] : mx;
            mn = s[j] < mn ? s[j] : mn;
        }
        CHECK_NEAR(sqrtf(mx * mn), 1.0, 1e-4);
        CHECK(ratio >= 0 && ratio < 1);
        if (!duo) { /* s = x_mean^ratio, normalized */
            double pmx = 0, pmn = INFINITY;
            for (int64_t j = 0; j < k; j++) {
                double v = pow(xm[j], ratio);
                v        = v < 1e-4 ? 1e-4 : v;
                pmx      = v > pmx ? v : pmx;
                pmn      = v < pmn ? v : pmn;
            }
            int bad = 0;
            for (int64_t j = 0; j < k; j++) {
                double v = pow(xm[j], ratio);
                v        = (v < 1e-4 ? 1e-4 : v) / sqrt(pmx * pmn);
                bad += fabs(v - s[j]) > 1e-4 * v;
            }
            CHECK_MSG(bad == 0, "awq scales are not x_mean^%g normalized", ratio);
        }
        /* the returned best loss is the loss of Q(W s) / s with the returned s */
        for (int64_t row = 0; row < n; row++)
            for (int64_t j = 0; j < k; j++)
                Wq[row * k + j] = W[row * k + j] * s[j];
        lq_awq_quantize(Wq, n, k, gs, 4, NULL, NULL, NULL);
        for (int64_t row = 0; row < n; row++)
            for (int64_t j = 0; j < k; j++)
                Wq[row * k + j] /= s[j];
        CHECK_NEAR(out_mse(&c, Wq), best, 1e-6 * best);
        /* the Gram-matrix loss (single linears) is the same loss, and the search scored by it
         * picks the same scales */
        float *G   = malloc((size_t)(k * k) * sizeof(float));
        float *scr = malloc((size_t)(2 * n * k) * sizeof(float));
        float *s2  = malloc((size_t)k * sizeof(float));
        lq_awq_gram(X, t, k, G);
        CHECK_NEAR(lq_awq_gram_loss(W, Wq, n, k, G, t, scr), best, 1e-5 * best);
        gram_ctx gc     = {W, G, scr, t, n, k};
        double   ratio2 = -1, best2 = -1;
        CHECK(lq_awq_search(&g, xm, gram_loss, &gc, s2, &ratio2, &best2, &err) == LQ_OK);
        CHECK_MSG(ratio2 == ratio && !memcmp(s, s2, (size_t)k * sizeof(float)),
                  "awq duo %d: the Gram loss picked ratio %g, the forward %g", duo, ratio2, ratio);
        CHECK_NEAR(best2, best, 1e-5 * best);
        free(G), free(scr), free(s2);
    }

    /* clip: per (row, group) the objective never rises; clamp only shrinks */
    {
        float *Wc = malloc((size_t)(n * k) * sizeof(float));
        memcpy(Wc, W, (size_t)(n * k) * sizeof(float));
        for (int64_t row = 0; row < n; row += 5) /* a few spikes worth clipping */
            Wc[row * k + (row % k)] *= 8;
        float *W0 = malloc((size_t)(n * k) * sizeof(float));
        memcpy(W0, Wc, (size_t)(n * k) * sizeof(float));
        lq_err err = {0};
        CHECK(lq_awq_clip(Wc, n, k, X, t, gs, 4, &err) == LQ_OK);
        CHECK_EQ_INT(lq_awq_clip(Wc, n, 100, X, t, 32, 4, &err), LQ_ERR_INVALID_ARG); /* k % g */
        int    worse = 0, grew = 0, changed = 0;
        float *a = malloc((size_t)gs * sizeof(float)), *b = malloc((size_t)gs * sizeof(float));
        for (int64_t row = 0; row < n; row++)
            for (int64_t g0 = 0; g0 < k; g0 += gs) {
                memcpy(a, W0 + row * k + g0, (size_t)gs * sizeof(float));
                memcpy(b, Wc + row * k + g0, (size_t)gs * sizeof(float));
                for (int64_t j = 0; j < gs; j++) {
                    grew += fabsf(b[j]) > fabsf(a[j]);
                    changed += b[j] != a[j];
                }
                lq_awq_quantize(a, 1, gs, gs, 4, NULL, NULL, NULL);
                lq_awq_quantize(b, 1, gs, gs, 4, NULL, NULL, NULL);
                double ea = 0, eb = 0;
                for (int64_t i = 0; i < t; i++) {
                    double o = 0, oa = 0, ob = 0;
                    for (int64_t j = 0; j < gs; j++) {
                        double x = X[i * k + g0 + j];
                        o += x * W0[row * k + g0 + j];
                        oa += x * a[j];
                        ob += x * b[j];
                    }
                    ea += (oa - o) * (oa - o);
                    eb += (ob - o) * (ob - o);
                }
                worse += eb > ea * (1 + 1e-4) + 1e-12;
            }
        CHECK_MSG(worse == 0, "awq clip seed %llu: %d groups got worse", (unsigned long long)seed,
                  worse);
        CHECK(grew == 0);
        CHECK(changed > 0);
        free(a);
        free(b);
        free(Wc);
        free(W0);
    }
    free(X);
    free(W);
    free(Wq);
    free(xm);
    free(s);
}

/* ---------------------------------------------------------------------------------------- */

static int nf4_brute(float x) {
    int    best = 0;
    double bd   = INFINITY;
    for (int c = 0; c < 16; c++) {
        double d = fabs((double)x - (double)lq_nf4_table[c]);
        if (d < bd) { /* strict: a tie keeps the lower code, as x > threshold moves up */
            bd   = d;
            best = c;
        }
    }
    return best;
}

static void test_nf4(void) {
    const int64_t numel = 64 * 50 + 17; /* tail block */
    const int64_t bsz[] = {64, 32, 256};
    float        *w     = malloc((size_t)numel * sizeof(float));
    uint8_t      *codes = malloc((size_t)numel);
    float        *am    = malloc((size_t)(numel / 32 + 2) * sizeof(float));
    for (int bi = 0; bi < 3; bi++) {
        uint64_t seed = 6000u + (uint64_t)bi;
        lq_rng   r;
        lq_rng_seed(&r, seed);
        fill_normal(&r, w, numel, 0.03f);
        for (int64_t i = 0; i < 64; i++) /* an all-zero block */
            w[64 + i] = 0;
        int64_t bs = bsz[bi], nb = (numel + bs - 1) / bs;
        lq_nf4_quantize(w, numel, bs, codes, am);
        int bad_am = 0, bad_code = 0;
        for (int64_t b = 0; b < nb; b++) {
            float m = 0;
            for (int64_t i = b * bs; i < (b + 1) * bs && i < numel; i++)
                m = fabsf(w[i]) > m ? fabsf(w[i]) : m;
            bad_am += m != am[b];
        }
        for (int64_t i = 0; i < numel; i++) {
            float a = am[i / bs];
            float x = a > 0 ? w[i] * (1.0f / a) : 0.0f;
            bad_code += codes[i] != nf4_brute(x);
        }
        CHECK_MSG(bad_am == 0 && bad_code == 0, "nf4 block %lld seed %llu: absmax %d codes %d",
                  (long long)bs, (unsigned long long)seed, bad_am, bad_code);
    }
    /* ties: exactly on bitsandbytes' decision thresholds the lower code wins; just above, the
     * upper. */
    {
        float x[32];
        int   m = 0;
        /* the thresholds of bitsandbytes csrc dQuantizeNF4, transcribed independently */
        static const float bnb_mid[15] = {
            -0.8480964004993439f,   -0.6106329262256622f,  -0.4599952697753906f,
            -0.33967943489551544f,  -0.23460740596055984f, -0.13791173323988914f,
            -0.045525018125772476f, 0.03979014977812767f,  0.1202552504837513f,
            0.2035212516784668f,    0.2920137718319893f,   0.3893125355243683f,
            0.5016634166240692f,    0.6427869200706482f,   0.8614784181118011f};
        for (int c = 0; c < 15; c++) {
            float mid = bnb_mid[c];
            x[m++]    = mid;
            x[m++]    = nextafterf(mid, 2.0f);
        }
        x[m++] = 1.0f; /* block absmax = 1 so x / absmax == x */
        x[m++] = -1.0f;
        uint8_t cc[32];
        float   a1;
        lq_nf4_quantize(x, m, 32, cc, &a1);
        CHECK(a1 == 1.0f);
        int bad = 0;
        for (int c = 0; c < 15; c++) {
            if (cc[2 * c] != c || cc[2 * c + 1] != c + 1)
                fprintf(stderr, "nf4 tie at threshold %d (%.9g): codes %d %d\n", c, x[2 * c],
                        cc[2 * c], cc[2 * c + 1]);
            bad += cc[2 * c] != c;
            bad += cc[2 * c + 1] != c + 1;
        }
        CHECK_MSG(bad == 0, "nf4 tie-breaking differs from bitsandbytes in %d places", bad);
        CHECK(cc[30] == 15 && cc[31] == 0);
    }
    /* double quant: absmax back within half a step of the 8-bit dynamic code */
    {
        const int64_t n = 64, k = 1024, bs = 64, nb = n * k / bs;
        float        *ww = malloc((size_t)(n * k) * sizeof(float));
        uint8_t      *cc = malloc((size_t)(n * k));
        float        *aa = malloc((size_t)nb * sizeof(float));
        lq_rng        r;
        lq_rng_seed(&r, 6100);
        for (int64_t i = 0; i < n * k; i++)
            ww[i] = lq_rng_normal(&r) * (float)(0.01 + 0.05 * lq_rng_uniform(&r));
        lq_nf4_quantize(ww, n * k, bs, cc, aa);
        float code[256];
        lq_dynamic_map_8bit(code);
        double gap = 0;
        for (int i = 0; i + 1 < 256; i++)
            gap = fmax(gap, fabs((double)code[i + 1] - code[i]));
        lq_qbuf qb  = {0};
        lq_err  err = {0};
        CHECK(lq_pack_nf4(n, k, bs, cc, aa, 1, 256, NULL, &qb, &err) == LQ_OK);
        int bad = 0;
        for (int64_t b = 0; b < nb; b++) {
            double dq  = lq_nf4_absmax(&qb.q, b);
            double tol = 0.5 * gap * qb.q.nested_absmax[b / 256] + 1e-6 * aa[b];
            bad += fabs(dq - aa[b]) > tol;
        }
        CHECK_MSG(bad == 0, "double-quant absmax off in %d of %lld blocks (seed 6100)", bad,
                  (long long)nb);
        lq_qbuf_free(&qb);
        free(ww);
        free(cc);
        free(aa);
    }
    free(w);
    free(codes);
    free(am);
}

static void test_int8(void) {
    const int64_t n = 40, k = 300;
    float        *W   = malloc((size_t)(n * k) * sizeof(float));
    int8_t       *cb  = malloc((size_t)(n * k));
    float        *scb = malloc((size_t)n * sizeof(float));
    lq_rng        r;
    lq_rng_seed(&r, 7000);
    fill_normal(&r, W, n * k, 0.05f);
    for (int64_t c = 0; c < k; c++)
        W[5 * k + c] = 0; /* a zero row */
    lq_int8_quantize(W, n, k, cb, scb);
    int bad_scb = 0, bad_cb = 0, extreme = 0;
    for (int64_t row = 0; row < n; row++) {
        float m = 0;
        for (int64_t c = 0; c < k; c++)
            m = fabsf(W[row * k + c]) > m ? fabsf(W[row * k + c]) : m;
        bad_scb += scb[row] != m;
        for (int64_t c = 0; c < k; c++) {
            double want = m > 0 ? 127.0 * W[row * k + c] / m : 0;
            /* round(127 w / SCB); one ulp of slack where the float product sits on .5 */
            bad_cb += fabs((double)cb[row * k + c] - want) > 0.5 + 1e-4;
            extreme += fabsf(W[row * k + c]) == m && m > 0 && abs(cb[row * k + c]) != 127;
        }
    }
    CHECK_MSG(bad_scb == 0 && bad_cb == 0 && extreme == 0,
              "int8 seed 7000: scb %d cb %d extreme %d", bad_scb, bad_cb, extreme);

    float   am[10] = {0.5f, 7.0f, 6.0f, 5.99f, 100.0f, 0.0f, 6.5f, 9.0f, 1.0f, 20.0f};
    int32_t idx[10];
    int64_t m      = lq_int8_outliers(am, 10, 6.0f, 0, idx);
    int32_t want[] = {1, 2, 4, 6, 7, 9};
    CHECK_EQ_INT(m, 6);
    CHECK(m == 6 && memcmp(idx, want, sizeof want) == 0);
    m               = lq_int8_outliers(am, 10, 6.0f, 3, idx); /* largest 3, ascending */
    int32_t want3[] = {4, 7, 9};
    CHECK_EQ_INT(m, 3);
    CHECK(m == 3 && memcmp(idx, want3, sizeof want3) == 0);
    CHECK_EQ_INT(lq_int8_outliers(am, 10, 1000.0f, 0, idx), 0);
    free(W);
    free(cb);
    free(scb);
}

static void test_xstats(void) {
    const int64_t k = 24, seqlen = 16, nseq = 6, t = seqlen * nseq;
    float        *X = malloc((size_t)(t * k) * sizeof(float));
    float        *H = malloc((size_t)(k * k) * sizeof(float));
    lq_rng        r;
    lq_rng_seed(&r, 8000);
    fill_normal(&r, X, t * k, 1.0f);
    lq_xstats s;
    lq_err    err = {0};
    CHECK(lq_xstats_init(&s, k, LQ_XS_HESSIAN | LQ_XS_ABSMEAN | LQ_XS_ABSMAX, &err) == LQ_OK);
    /* in uneven chunks: the running rescale must give (2 / nseq_total) sum x x^T... */
    lq_xstats_add(&s, X, 2 * seqlen, 2);
    lq_xstats_add(&s, X + 2 * seqlen * k, 4 * seqlen, 4);
    lq_xstats_finish(&s);
    hessian(X, t, k, H);
    int bad = 0;
    for (int64_t x = 0; x < k * k; x++) /* ... which is (2/t) X^T X up to the seqlen factor */
        bad += fabs((double)s.H[x] - (double)H[x] * seqlen) > 1e-4 * (1 + fabs(H[x] * seqlen));
    CHECK_MSG(bad == 0, "xstats H differs in %d entries", bad);
    float am[24];
    lq_xstats_absmean(&s, am);
    for (int64_t j = 0; j < k; j++) {
        double a = 0, mx = 0;
        for (int64_t i = 0; i < t; i++) {
            a += fabs(X[i * k + j]);
            mx = fmax(mx, fabs(X[i * k + j]));
        }
        bad += fabs(am[j] - a / (double)t) > 1e-5;
        bad += s.absmax[j] != (float)mx;
    }
    CHECK_MSG(bad == 0, "xstats absmean/absmax differ");
    CHECK_EQ_INT(s.nsamples, nseq);
    CHECK_EQ_INT(s.ntokens, t);
    lq_xstats_free(&s);
    free(X);
    free(H);
}

#define RUN(f)                                                                                     \
    do {                                                                                           \
        double t0_ = lq_now();                                                                     \
        f();                                                                                       \
        printf("%-28s %.2f s\n", #f, lq_now() - t0_);                                              \
    } while (0)

/* ---------------------------------------------------------------------------------------- */
/* RTN with GPTQ v1-safe zeros (the setting the methods write): every weight within half a step
 * plus rounding, even where a shifted zero moves the range, and asymmetric zeros >= 1. */
static void test_rtn_v1_safe(uint64_t seed) {
    lq_rng r;
    lq_rng_seed(&r, seed);
    const int64_t n = 24, k = 96;
    float        *W = malloc((size_t)(n * k) * 4), *Q = malloc((size_t)(n * k) * 4);
    for (int64_t i = 0; i < n * k; i++)
        W[i] = lq_rng_normal(&r) * (i % 13 == 0 ? 5.f : 1.f);
    for (int bits = 2; bits <= 8; bits++)
        for (int sym = 0; sym < 2; sym++)
            for (int gi = 0; gi < 3; gi++) {
                const int64_t gs[3] = {-1, 32, 48};
                lq_qspec      qs    = {bits, gs[gi], sym, 1, 0};
                int64_t       G     = lq_num_groups(k, qs.group_size);
                uint8_t      *q     = malloc((size_t)(n * k));
                float        *sc    = malloc((size_t)(G * n) * 4);
                int32_t      *z = malloc((size_t)(G * n) * 4), *g = malloc((size_t)k * 4);
                lq_err        err = {0};
                CHECK_OK(lq_rtn(W, n, k, &qs, q, sc, z, g, Q, &err));
                int maxq = (1 << bits) - 1, bad = 0;
                for (int64_t rr = 0; rr < n; rr++)
                    for (int64_t c = 0; c < k; c++) {
                        int64_t gg = g[c];
                        float   s = sc[gg * n + rr], zz = (float)z[gg * n + rr];
                        bad += q[rr * k + c] > maxq;
                        bad += Q[rr * k + c] != s * ((float)q[rr * k + c] - zz);
                        /* half a step, plus the rounding of s * (q - z) (a few ulp of w) */
                        if (fabsf(W[rr * k + c] - Q[rr * k + c]) >
                            0.5f * s + 4e-7f * fabsf(W[rr * k + c])) {
                            if (bad < 2)
                                fprintf(stderr, "w %.9g q %d s %.9g z %.9g wq %.9g\n",
                                        W[rr * k + c], q[rr * k + c], s, zz, Q[rr * k + c]);
                            bad++;
                        }
                        bad += sym && z[gg * n + rr] != (maxq + 1) / 2;
                        bad += !sym && z[gg * n + rr] < 1; /* v1-safe: zero-1 must be >= 0 */
                    }
                CHECK_MSG(bad == 0, "seed %llu rtn bits %d sym %d group %lld: %d violations",
                          (unsigned long long)seed, bits, sym, (long long)qs.group_size, bad);
                free(q), free(sc), free(z), free(g);
            }
    free(W), free(Q);
}

static void count_warn(void *user, const char *msg) {
    (void)msg;
    ++*(int *)user;
}

/* gptq quant.py's MSE search, written out again here (float64, its loop order): for every
 * group, lq_group_params picks the same grid point, whose error is no worse than min/max's; on
 * groups with an outlier it shrinks the range; and GPTQ with it still runs and stays finite. */
static double grid_err(const float *x, int64_t n, float sc, float z, int maxq) {
    double e = 0;
    for (int64_t c = 0; c < n; c++) {
        const float d = sc * ((float)lq_quant_code(x[c], sc, z, maxq) - z) - x[c];
        e += pow(fabs((double)d), 2.4);
    }
    return e;
}

static double wsq_err(const float *x, const float *wt, int64_t n, int64_t stride, float sc, float z,
                      int maxq) {
    double e = 0;
    for (int64_t c = 0; c < n; c++) {
        const float v = x[c * stride];
        const float d = sc * ((float)lq_quant_code(v, sc, z, maxq) - z) - v;
        e += (double)d * d * wt[c];
    }
    return e;
}

/* The search written out again (float64 errors, its loop order): the grid point of least
 * error, the 2.4-norm without weights, the weighted squared error with them; optionally also the
 * min/max parameters. */
static void ref_search(const float *x, const float *wt, int64_t n, const lq_qspec *s, float *bsc,
                       float *bz, float *sc0, float *z0) {
    const int maxq = (1 << s->bits) - 1;
    float     mn = x[0], mx = x[0];
    for (int64_t c = 1; c < n; c++)
        mn = x[c] < mn ? x[c] : mn, mx = x[c] > mx ? x[c] : mx;
    if (sc0)
        lq_params_from_range(mn, mx, s, sc0, z0);
    double best = INFINITY;
    *bsc = *bz = 0;
    for (int i = 0; i < 80; i++) {
        float p = 1.f - (float)i / 100.f, csc, cz;
        lq_params_from_range(p * mn, p * mx, s, &csc, &cz);
        double e = wt ? wsq_err(x, wt, n, 1, csc, cz, maxq) : grid_err(x, n, csc, cz, maxq);
        if (e < best)
            best = e, *bsc = csc, *bz = cz;
    }
}

static void test_mse(uint64_t seed) {
    lq_rng r;
    lq_rng_seed(&r, seed);
    const int64_t n = 64;
    float         x[64];
    int           shrunk = 0, groups = 0;
    for (int bits = 2; bits <= 8; bits += 2)
        for (int sym = 0; sym <= 1; sym++)
            for (int t = 0; t < 20; t++, groups++) {
                for (int64_t c = 0; c < n; c++)
                    x[c] = lq_rng_normal(&r);
                if (t % 2)
                    x[lq_rng_below(&r, n)] *= 8.f; /* an outlier */
                lq_qspec s = {bits, n, sym, 1, 0};
                float    sc0, z0, sc, z;
                lq_group_params(x, n, 1, &s, &sc0, &z0);
                s.mse = 1;
                lq_group_params(x, n, 1, &s, &sc, &z);
                const int maxq = (1 << bits) - 1;
                /* the reference loop */
                float bsc, bz;
                ref_search(x, NULL, n, &s, &bsc, &bz, NULL, NULL);
                CHECK_MSG(sc == bsc && z == bz,
                          "bits %d sym %d: mse picked (%g, %g), reference "
                          "(%g, %g)",
                          bits, sym, sc, z, bsc, bz);
                CHECK(grid_err(x, n, sc, z, maxq) <= grid_err(x, n, sc0, z0, maxq));
                shrunk += sc < sc0;
            }
    CHECK_MSG(shrunk > groups / 4, "mse shrank %d of %d groups", shrunk, groups);
}

/* LQ_MSE_WEIGHTED: lq_group_params_w picks the grid point of least weighted squared error (the
 * loop written out again), never worse than min/max on that measure; inside GPTQ on a diagonal
 * Hessian (no error feedback: GPTQ is round-to-nearest there) every group's error weighted by
 * the damped diagonal -- GPTQ's own loss -- is no worse than with min/max groups; static and
 * per-channel groups, fixed before the sweep, the same with the undamped diagonal. */
static void test_mse_weighted(uint64_t seed) {
    lq_rng r;
    lq_rng_seed(&r, seed);
    const int64_t n = 64;
    float         x[64], wt[64];
    for (int bits = 2; bits <= 8; bits += 2)
        for (int sym = 0; sym <= 1; sym++)
            for (int t = 0; t < 20; t++) {
                for (int64_t c = 0; c < n; c++) {
                    x[c]  = lq_rng_normal(&r);
                    wt[c] = (float)exp(3.0 * lq_rng_normal(&r)); /* spread over decades */
                }
                if (t % 2)
                    x[lq_rng_below(&r, n)] *= 8.f;
                lq_qspec  s    = {bits, n, sym, 1, LQ_MSE_WEIGHTED};
                const int maxq = (1 << bits) - 1;
                float     sc, z, bsc, bz, sc0, z0;
                lq_group_params_w(x, n, 1, &s, wt, &sc, &z);
                ref_search(x, wt, n, &s, &bsc, &bz, &sc0, &z0);
                CHECK_MSG(sc == bsc && z == bz,
                          "bits %d sym %d: weighted search (%g, %g), "
                          "reference (%g, %g)",
                          bits, sym, sc, z, bsc, bz);
                CHECK(wsq_err(x, wt, n, 1, sc, z, maxq) <= wsq_err(x, wt, n, 1, sc0, z0, maxq));
            }

    const int64_t rows = 16, k = 96, grp = 32;
    float        *W = malloc((size_t)(rows * k) * 4), *Wq = malloc((size_t)(rows * k) * 4);
    float        *D = calloc((size_t)(k * k), 4), *dd = malloc((size_t)k * 4);
    uint8_t      *q  = malloc((size_t)(rows * k));
    float        *sc = malloc((size_t)(k * rows) * 4), *sc0 = malloc((size_t)(k * rows) * 4);
    int32_t      *z = malloc((size_t)(k * rows) * 4), *z0 = malloc((size_t)(k * rows) * 4);
    int32_t      *g    = malloc((size_t)k * 4);
    double        mean = 0;
    for (int64_t i = 0; i < rows * k; i++)
        W[i] = 0.1f * lq_rng_normal(&r);
    for (int64_t i = 0; i < k; i++)
        mean += D[i * k + i] = (float)exp(2.0 * lq_rng_normal(&r));
    for (int64_t i = 0; i < k; i++)
        dd[i] = D[i * k + i] + 0.01f * (float)(mean / (double)k);
    lq_gptq_result res;
    int            warns = 0, better = 0;
    float *hd = malloc((size_t)k * 4); /* undamped diagonal: the static / per-channel weights */
    for (int64_t i = 0; i < k; i++)
        hd[i] = D[i * k + i];
    /* mode 0: groups found in the sweep, 1: static groups, 2: per channel (one group of k) */
    for (int mode = 0; mode < 3; mode++)
        for (int bits = 2; bits <= 4; bits++) {
            const int64_t gs  = mode == 2 ? k : grp;
            lq_gptq_opts  o   = {.q             = {bits, mode == 2 ? -1 : grp, 0, 1, LQ_MSE_OFF},
                                 .static_groups = mode == 1,
                                 .damp          = 0.01,
                                 .block_size    = 32,
                                 .name          = "t",
                                 .warn          = count_warn,
                                 .warn_user     = &warns};
            lq_err        err = {0};
            float        *H   = malloc((size_t)(k * k) * 4);
            memcpy(H, D, (size_t)(k * k) * 4), memcpy(Wq, W, (size_t)(rows * k) * 4);
            CHECK_OK(lq_gptq(Wq, H, rows, k, &o, q, sc0, z0, g, &res, &err));
            o.q.mse = LQ_MSE_WEIGHTED;
            memcpy(H, D, (size_t)(k * k) * 4), memcpy(Wq, W, (size_t)(rows * k) * 4);
            CHECK_OK(lq_gptq(Wq, H, rows, k, &o, q, sc, z, g, &res, &err));
            free(H);
            const int    maxq = (1 << bits) - 1;
            const float *wts  = mode == 0 ? dd : hd;
            for (int64_t gi = 0; gi < k / gs; gi++)
                for (int64_t rr = 0; rr < rows; rr++) {
                    const float *xw = W + rr * k + gi * gs;
                    double       ew = wsq_err(xw, wts + gi * gs, gs, 1, sc[gi * rows + rr],
                                              (float)z[gi * rows + rr], maxq);
                    double       e0 = wsq_err(xw, wts + gi * gs, gs, 1, sc0[gi * rows + rr],
                                              (float)z0[gi * rows + rr], maxq);
                    CHECK_MSG(ew <= e0 * (1 + 1e-5), "mode %d bits %d group %lld row %lld: %g > %g",
                              mode, bits, (long long)gi, (long long)rr, ew, e0);
                    better += ew < e0 * (1 - 1e-5);
                }
        }
    free(hd);
    CHECK_MSG(better > 0, "the weighted search never improved on min/max");
    free(W), free(Wq), free(D), free(dd), free(q), free(sc), free(sc0), free(z), free(z0), free(g);
}

/* A llama of 4 layers (GQA 4/2) with every linear planned: units with the same error profile
 * and random sensitivities, allocated at budgets from the narrowest to the widest. */
static void test_mixed(uint64_t seed) {
    lq_model_config cfg;
    memset(&cfg, 0, sizeof cfg);
    snprintf(cfg.model_type, sizeof cfg.model_type, "llama");
    cfg.hidden_size = 64, cfg.intermediate_size = 128, cfg.num_layers = 4;
    cfg.num_heads = 4, cfg.num_kv_heads = 2, cfg.head_dim = 16;
    int plan[LQ_LIN_COUNT];
    for (int l = 0; l < LQ_LIN_COUNT; l++)
        plan[l] = lq_lin_present(&cfg, (lq_lin_id)l);
    lq_mixed_opts o;
    memset(&o, 0, sizeof o);
    o.choices[0] = 3, o.choices[1] = 4, o.choices[2] = 8, o.n_choices = 3;
    o.group_size = 32, o.sym = 1, o.plan = plan;
    const double lo  = lq_mixed_uniform_bpw(&cfg, plan, 3, 32),
                 mid = lq_mixed_uniform_bpw(&cfg, plan, 4, 32),
                 hi  = lq_mixed_uniform_bpw(&cfg, plan, 8, 32);
    CHECK_MSG(lo < mid && mid < hi && lo > 3 && hi < 16, "uniform bpw %g %g %g", lo, mid, hi);
    lq_rng r;
    lq_rng_seed(&r, seed);
    lq_mixed_unit units[4 * LQ_MIXED_UNITS];
    for (int i = 0; i < 4 * LQ_MIXED_UNITS; i++) {
        units[i].layer  = i / LQ_MIXED_UNITS;
        units[i].unit   = i % LQ_MIXED_UNITS;
        units[i].kl     = 1e-3 * (0.05 + lq_rng_uniform(&r));
        units[i].err[0] = 4, units[i].err[1] = 1, units[i].err[2] = 1.0 / 256;
    }
    const double targets[] = {lo, lo + 0.3 * (mid - lo), mid, mid + 0.5 * (hi - mid), hi, 15.9};
    for (size_t t = 0; t < sizeof targets / sizeof targets[0]; t++) {
        lq_mixed_result res;
        memset(&res, 0, sizeof res);
        res.units      = units;
        res.n_units    = 4 * LQ_MIXED_UNITS;
        res.probe_bits = 4;
        lq_err err     = {0};
        o.target_bpw   = targets[t];
        CHECK_OK(lq_mixed_allocate(&cfg, &o, &res, &err));
        CHECK_MSG(res.bpw <= targets[t] + 1e-12, "seed %llu: bpw %.6f over the target %.6f",
                  (unsigned long long)seed, res.bpw, targets[t]);
        CHECK_MSG(fabs(res.min_bpw - lo) < 1e-9, "min_bpw %.6f != uniform 3-bit %.6f", res.min_bpw,
                  lo);
        /* the bits in use, recounted from the choices */
        int all3 = 1, all4 = 1, all8 = 1;
        for (int i = 0; i < res.n_units; i++) {
            all3 &= units[i].bits == 3, all4 &= units[i].bits == 4, all8 &= units[i].bits == 8;
            for (int j = 0; j < res.n_units; j++)
                if (units[i].unit == units[j].unit && units[i].kl > units[j].kl)
                    CHECK_MSG(units[i].bits >= units[j].bits,
                              "seed %llu target %.4f: unit %d kl %.3g got %d bits, unit %d kl "
                              "%.3g got %d",
                              (unsigned long long)seed, targets[t], i, units[i].kl, units[i].bits,
                              j, units[j].kl, units[j].bits);
        }
        if (t == 0)
            CHECK_MSG(all3, "target = uniform 3-bit: not all 3-bit");
        if (t == 2)
            CHECK_MSG(all4 || res.bpw > lo, "target = uniform 4-bit: nothing upgraded");
        if (t >= 4)
            CHECK_MSG(all8, "target >= uniform 8-bit (%.4f): not all 8-bit", targets[t]);
        /* greedy to the end: no unit can take its next width within the budget */
        for (int i = 0; i < res.n_units && t < 4; i++) {
            if (units[i].bits == 8)
                continue;
            const int nb  = units[i].bits == 3 ? 4 : 8;
            int64_t   add = 0;
            for (int l = 0; l < LQ_LIN_COUNT; l++)
                if (lq_mixed_unit_lins(units[i].unit) >> l & 1 && plan[l]) {
                    int64_t n, k;
                    lq_lin_shape(&cfg, (lq_lin_id)l, &n, &k);
                    add += lq_mixed_linear_bits(n, k, nb, 32) -
                           lq_mixed_linear_bits(n, k, units[i].bits, 32);
                }
            int64_t total = 0;
            for (int l = 0; l < LQ_LIN_COUNT; l++)
                if (plan[l]) {
                    int64_t n, k;
                    lq_lin_shape(&cfg, (lq_lin_id)l, &n, &k);
                    total += n * k * cfg.num_layers;
                }
            CHECK_MSG(res.bpw + (double)add / (double)total > targets[t] + 1e-12,
                      "seed %llu target %.4f: unit %d could still go to %d bits",
                      (unsigned long long)seed, targets[t], i, nb);
        }
    }
}

/* Linears that read one input take its factor from the first (q/k/v, gate/up): the same codes,
 * scales, zero points, fake-quantized weights and loss as factoring the Hessian again, with and
 * without act-order, also after a damping retry; a different key refactors. */
static void test_gptq_shared_factor(void) {
    const int64_t n = 48, k = 96, t = 400, G = k / 32;
    float        *X = malloc((size_t)(t * k) * sizeof(float));
    lq_rng        r;
    lq_rng_seed(&r, 4242);
    correlated_x(&r, X, t, k);
    lq_xstats st;
    lq_err    err = {0};
    CHECK_OK(lq_xstats_init(&st, k, LQ_XS_HESSIAN, &err));
    lq_xstats_add(&st, X, t, 1);
    lq_xstats_finish(&st);
    for (int act = 0; act < 2; act++) {
        lq_gptq_factor sh;
        memset(&sh, 0, sizeof sh);
        for (int lin = 0; lin < 3; lin++) {
            float   *W[2], *H = malloc((size_t)(k * k) * 4);
            uint8_t *q[2];
            float   *sc[2];
            int32_t *z[2], *gi[2];
            double   loss[2];
            float *W0 = malloc((size_t)(n * k) * 4);
            fill_normal(&r, W0, n * k, 0.02f);
            for (int v = 0; v < 2; v++) { /* v 0: factored again, v 1: shared */
                lq_gptq_opts o = gopts(4, 32, 0, act, 0);
                o.shared       = v ? &sh : NULL;
                o.shared_key   = lin < 2 ? 7 : 8; /* the third linear reads another input */
                W[v]  = malloc((size_t)(n * k) * 4), q[v] = malloc((size_t)(n * k));
                sc[v] = malloc((size_t)(G * n) * 4), z[v] = malloc((size_t)(G * n) * 4);
                gi[v] = malloc((size_t)k * 4);
                memcpy(W[v], W0, (size_t)(n * k) * 4);
                memcpy(H, st.H, (size_t)(k * k) * 4);
                lq_gptq_result res;
                CHECK_OK(lq_gptq(W[v], H, n, k, &o, q[v], sc[v], z[v], gi[v], &res, &err));
                loss[v] = res.loss;
            }
            CHECK_MSG(!memcmp(W[0], W[1], (size_t)(n * k) * 4) && !memcmp(q[0], q[1], (size_t)(n * k)) &&
                          !memcmp(sc[0], sc[1], (size_t)(G * n) * 4) &&
                          !memcmp(z[0], z[1], (size_t)(G * n) * 4) && !memcmp(gi[0], gi[1], (size_t)k * 4) &&
                          loss[0] == loss[1],
                      "act %d linear %d: the shared factor changed the result", act, lin);
            CHECK_EQ_INT(sh.valid, 1);
            CHECK_EQ_INT(sh.key, lin < 2 ? 7 : 8);
            for (int v = 0; v < 2; v++)
                free(W[v]), free(q[v]), free(sc[v]), free(z[v]), free(gi[v]);
            free(W0), free(H);
        }
        lq_gptq_factor_free(&sh);
    }
    lq_xstats_free(&st);
    free(X);
}

int main(void) {
    omp_set_num_threads(1); /* tiny problems: OpenMP spin-waits would cost more than they save */
    RUN(test_rtn);
    RUN(test_gptq_diag_is_rtn);
    RUN(test_gptq_beats_rtn);
    RUN(test_gptq_damping_and_dead);
    RUN(test_gptq_first_retry);
    RUN(test_gptq_shared_factor);
    RUN(test_awq);
    RUN(test_nf4);
    RUN(test_int8);
    RUN(test_xstats);
    for (uint64_t seed = 1; seed <= 3; seed++) {
        test_rtn_v1_safe(seed);
        test_mse(400 + seed);
        test_mse_weighted(500 + seed);
        test_mixed(600 + seed);
    }
    return lq_test_end("test_quant_props");
}
