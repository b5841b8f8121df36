/* Properties of the quantization algorithms (quant/algo/lq_quant.h), with fixed seeds printed on
 * failure:
 *   RTN     codes in range, symmetric zero point, error <= half a step everywhere
 *   GPTQ    with a diagonal Hessian it is RTN, code for code (no error feedback to spread);
 *           with correlated inputs it beats RTN on its own objective tr((W-Q) H (W-Q)^T) for
 *           bits 2/3/4/8, per-channel / 32 / 128 groups, act-order, static groups, sym/asym;
 *           the returned g_idx/scales/zeros reproduce the fake-quantized weights; an indefinite
 *           Hessian takes the damping retry (warning) and succeeds; no retries left ->
 *           LQ_ERR_CHOLESKY; a dead input column quantizes to exact zeros
 *   AWQ     the returned scales are the best of the evaluated grid and normalized
 *           (sqrt(max*min) = 1); clipping never increases the output error on its tokens
 *   NF4     every code is the nearest table value of x/absmax (brute force)
 *   INT8    SCB = row absmax, codes round(127 w / SCB); outliers = columns over the threshold
 *   MIXED   the --target-bpw allocation never exceeds the budget, leaves no affordable
 *           upgrade, gives a more sensitive unit of a kind at least the width of a less
 *           sensitive one, and meets the uniform widths at their own budgets */
#include "lq_kernels.h"
#include "lq_mixed.h"
#include "lq_quant.h"
#include "lq_test.h"

#include <cblas.h>
#include <lapacke.h>
#include <omp.h>
#include <stdint.h>

static void gen_inputs(lq_rng *r, float *X, int64_t t, int64_t k) {
    for (int64_t i = 0; i < t; i++) {
        float c1 = lq_rng_normal(r), c2 = lq_rng_normal(r);
        for (int64_t c = 0; c < k; c++) {
            float v      = (c % 2 ? c1 : c2) * 0.8f + lq_rng_normal(r);
            X[i * k + c] = c % 31 == 7 ? 12.f * v : v;
        }
    }
}

static float *hessian(const float *X, int64_t t, int64_t k) {
    lq_xstats s;
    lq_err    err = {0};
    if (lq_xstats_init(&s, k, LQ_XS_HESSIAN, &err))
        return NULL;
    lq_xstats_add(&s, X, t, 1);
    lq_xstats_finish(&s);
    float *H = s.H;
    s.H      = NULL;
    lq_xstats_free(&s);
    return H;
}

/* tr((W-Q) H (W-Q)^T) */
static double proxy(const float *W, const float *Q, const float *H, int64_t n, int64_t k) {
    double  tot = 0;
    double *d   = malloc((size_t)k * sizeof(double));
    for (int64_t r = 0; r < n; r++) {
        for (int64_t c = 0; c < k; c++)
            d[c] = (double)W[r * k + c] - Q[r * k + c];
        for (int64_t i = 0; i < k; i++) {
            double a = 0;
            for (int64_t j = 0; j < k; j++)
                a += (double)H[i * k + j] * d[j];
            tot += d[i] * a;
        }
    }
    free(d);
    return tot;
}

static void test_rtn(uint64_t seed) {
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

typedef struct gcfg {
    int     bits;
    int64_t group;
    int     act, stat, sym;
} gcfg;

static void count_warn(void *user, const char *msg) {
    (void)msg;
    ++*(int *)user;
}

static lq_status run_gptq(const float *W0, const float *H0, int64_t n, int64_t k, gcfg c,
                          double damp, int retries, float *Wq, uint8_t *q, float *sc, int32_t *z,
                          int32_t *g, lq_gptq_result *res, int *warns) {
    float *H = malloc((size_t)(k * k) * 4);
    memcpy(H, H0, (size_t)(k * k) * 4);
    memcpy(Wq, W0, (size_t)(n * k) * 4);
    lq_gptq_opts o   = {.q             = {c.bits, c.group, c.sym, 1},
                        .act_order     = c.act,
                        .static_groups = c.stat,
                        .damp          = damp,
                        .damp_retries  = retries,
                        .block_size    = 32,
                        .name          = "t",
                        .warn          = count_warn,
                        .warn_user     = warns};
    lq_err       err = {0};
    lq_status    s   = lq_gptq(Wq, H, n, k, &o, q, sc, z, g, res, &err);
    free(H);
    return s;
}

static void test_gptq(uint64_t seed) {
    lq_rng r;
    lq_rng_seed(&r, seed);
    const int64_t n = 32, k = 128, t = 512;
    float        *X = malloc((size_t)(t * k) * 4), *W = malloc((size_t)(n * k) * 4);
    float        *Wq = malloc((size_t)(n * k) * 4), *Wr = malloc((size_t)(n * k) * 4);
    gen_inputs(&r, X, t, k);
    for (int64_t i = 0; i < n * k; i++)
        W[i] = 0.1f * lq_rng_normal(&r);
    float         *H = hessian(X, t, k);
    int64_t        G = k; /* enough for every group size used */
    uint8_t       *q = malloc((size_t)(n * k)), *qr = malloc((size_t)(n * k));
    float         *sc = malloc((size_t)(G * n) * 4), *scr = malloc((size_t)(G * n) * 4);
    int32_t       *z = malloc((size_t)(G * n) * 4), *zr = malloc((size_t)(G * n) * 4);
    int32_t       *g = malloc((size_t)k * 4), *gr = malloc((size_t)k * 4);
    lq_err         err = {0};
    lq_gptq_result res;
    int            warns = 0;

    /* 1. diagonal Hessian: GPTQ == RTN (no act-order: the order is the identity) */
    float *D = calloc((size_t)(k * k), 4);
    for (int64_t i = 0; i < k; i++)
        D[i * k + i] = 0.5f + (float)lq_rng_uniform(&r);
    const int64_t groups[3] = {-1, 32, 128};
    for (int bits = 2; bits <= 8; bits += 2)
        for (int gi = 0; gi < 3; gi++)
            for (int sym = 0; sym < 2; sym++) {
                gcfg c = {bits, groups[gi], 0, 0, sym};
                CHECK_OK(run_gptq(W, D, n, k, c, 0.01, 0, Wq, q, sc, z, g, &res, &warns));
                lq_qspec qs = {bits, groups[gi], sym, 1, 0};
                CHECK_OK(lq_rtn(W, n, k, &qs, qr, scr, zr, gr, Wr, &err));
                CHECK_MSG(!memcmp(q, qr, (size_t)(n * k)) && !memcmp(g, gr, (size_t)k * 4),
                          "seed %llu bits %d group %lld sym %d: GPTQ with diagonal H differs "
                          "from RTN",
                          (unsigned long long)seed, bits, (long long)groups[gi], sym);
            }

    /* 2. correlated inputs: GPTQ beats RTN on its objective */
    const gcfg cfgs[] = {{2, 32, 0, 0, 0}, {3, 128, 0, 0, 0}, {4, -1, 0, 0, 1},
                         {4, 32, 1, 0, 0}, {4, 32, 1, 1, 1},  {4, 128, 1, 0, 0},
                         {8, 32, 0, 0, 1}, {3, 32, 1, 1, 0},  {2, -1, 1, 0, 1}};
    for (size_t ci = 0; ci < sizeof cfgs / sizeof *cfgs; ci++) {
        gcfg c = cfgs[ci];
        CHECK_OK(run_gptq(W, H, n, k, c, 0.01, 0, Wq, q, sc, z, g, &res, &warns));
        lq_qspec qs = {c.bits, c.group, c.sym, 1, 0};
        CHECK_OK(lq_rtn(W, n, k, &qs, qr, scr, zr, gr, Wr, &err));
        double pg = proxy(W, Wq, H, n, k), pr = proxy(W, Wr, H, n, k);
        CHECK_MSG(pg < pr,
                  "seed %llu bits %d group %lld act %d static %d sym %d: GPTQ %.6g >= "
                  "RTN %.6g",
                  (unsigned long long)seed, c.bits, (long long)c.group, c.act, c.stat, c.sym, pg,
                  pr);
        /* 3. g_idx / scales / zeros reproduce the fake-quantized weights */
        int64_t nG = lq_num_groups(k, c.group), bad = 0;
        for (int64_t col = 0; col < k; col++)
            bad += g[col] < 0 || g[col] >= nG;
        for (int64_t rr = 0; rr < n && !bad; rr++)
            for (int64_t col = 0; col < k; col++) {
                int64_t gg = g[col];
                bad += Wq[rr * k + col] !=
                       sc[gg * n + rr] * ((float)q[rr * k + col] - (float)z[gg * n + rr]);
            }
        if (c.act && !c.stat && c.group > 0) { /* act-order groups hold `group` columns each */
            int64_t *cnt = calloc((size_t)nG, sizeof *cnt);
            for (int64_t col = 0; col < k; col++)
                cnt[g[col]]++;
            for (int64_t gg = 0; gg < nG; gg++)
                bad += cnt[gg] != (gg < nG - 1 ? c.group : k - c.group * (nG - 1));
            free(cnt);
        }
        CHECK_MSG(bad == 0, "seed %llu config %zu: %lld inconsistent g_idx/scales/codes",
                  (unsigned long long)seed, ci, (long long)bad);
    }

    /* 4. indefinite Hessian: damping retry with a warning, then success; no retries: error */
    float *Hi = malloc((size_t)(k * k) * 4);
    memcpy(Hi, H, (size_t)(k * k) * 4);
    double mean = 0;
    for (int64_t i = 0; i < k; i++)
        mean += H[i * k + i];
    mean /= (double)k;
    /* smallest eigenvalue moved to -5% of the mean diagonal: indefinite at damp 0.01, positive
     * definite after the first retry (0.1), as a rank-deficient calibration set can make it */
    float *Ev = malloc((size_t)(k * k) * 4), *ev = malloc((size_t)k * 4);
    memcpy(Ev, H, (size_t)(k * k) * 4);
    CHECK_EQ_INT(LAPACKE_ssyev(LAPACK_ROW_MAJOR, 'N', 'U', (lapack_int)k, Ev, (lapack_int)k, ev),
                 0);
    for (int64_t i = 0; i < k; i++)
        Hi[i * k + i] -= (float)(ev[0] + 0.05 * mean);
    free(Ev), free(ev);
    gcfg c = {4, 32, 0, 0, 0};
    warns  = 0;
    CHECK_OK(run_gptq(W, Hi, n, k, c, 0.01, 8, Wq, q, sc, z, g, &res, &warns));
    CHECK_MSG(warns == 1 && res.retries == 1 && fabs(res.damp_used - 0.1) < 1e-12,
              "seed %llu: retries %d warnings %d damp %.3g", (unsigned long long)seed, res.retries,
              warns, res.damp_used);
    CHECK_EQ_INT(run_gptq(W, Hi, n, k, c, 0.01, 0, Wq, q, sc, z, g, &res, &warns), LQ_ERR_CHOLESKY);

    /* 5. a dead input column (never excited) quantizes to zeros */
    float *Hd = malloc((size_t)(k * k) * 4);
    memcpy(Hd, H, (size_t)(k * k) * 4);
    for (int64_t j = 0; j < k; j++)
        Hd[5 * k + j] = Hd[j * k + 5] = 0;
    CHECK_OK(run_gptq(W, Hd, n, k, c, 0.01, 0, Wq, q, sc, z, g, &res, &warns));
    int nz = 0;
    for (int64_t rr = 0; rr < n; rr++)
        nz += Wq[rr * k + 5] != 0.f;
    CHECK_MSG(nz == 0, "seed %llu: dead column has %d non-zero weights", (unsigned long long)seed,
              nz);
    free(X), free(W), free(Wq), free(Wr), free(H), free(D), free(Hi), free(Hd);
    free(q), free(qr), free(sc), free(scr), free(z), free(zr), free(g), free(gr);
}

typedef struct awq_user {
    const float *X, *Y0;
    float       *Y;
    int64_t      t, n, k;
    double       seen_min;
    int          calls;
} awq_user;

static lq_status awq_loss(void *user, float *const *wq, double *loss) {
    awq_user *a = user;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)a->t, (int)a->n, (int)a->k, 1.f, a->X,
                (int)a->k, wq[0], (int)a->k, 0.f, a->Y, (int)a->n);
    double s = 0;
    for (int64_t i = 0; i < a->t * a->n; i++)
        s += ((double)a->Y[i] - a->Y0[i]) * ((double)a->Y[i] - a->Y0[i]);
    *loss = s / (double)(a->t * a->n);
    if (*loss < a->seen_min)
        a->seen_min = *loss;
    a->calls++;
    return LQ_OK;
}

static double out_err(const float *X, const float *W, const float *Wq, int64_t t, int64_t n,
                      int64_t k) {
    double s = 0;
    for (int64_t i = 0; i < t; i++)
        for (int64_t r = 0; r < n; r++) {
            double a = 0;
            for (int64_t c = 0; c < k; c++)
                a += (double)X[i * k + c] * ((double)Wq[r * k + c] - W[r * k + c]);
            s += a * a;
        }
    return s;
}

static void test_awq(uint64_t seed) {
    lq_rng r;
    lq_rng_seed(&r, seed);
    const int64_t n = 32, k = 128, t = 256, g = 32;
    float        *X = malloc((size_t)(t * k) * 4), *W = malloc((size_t)(n * k) * 4);
    gen_inputs(&r, X, t, k);
    for (int64_t i = 0; i < n * k; i++)
        W[i] = 0.1f * lq_rng_normal(&r);
    lq_xstats st;
    lq_err    err = {0};
    CHECK_OK(lq_xstats_init(&st, k, LQ_XS_ABSMEAN, &err));
    lq_xstats_add(&st, X, t, 1);
    float *xm = malloc((size_t)k * 4), *s = malloc((size_t)k * 4);
    lq_xstats_absmean(&st, xm);
    awq_user a  = {X, NULL, NULL, t, n, k, INFINITY, 0};
    float   *Y0 = malloc((size_t)(t * n) * 4);
    a.Y         = malloc((size_t)(t * n) * 4);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)t, (int)n, (int)k, 1.f, X, (int)k, W,
                (int)k, 0.f, Y0, (int)n);
    a.Y0                = Y0;
    float *const  wl[1] = {W};
    const int64_t nn[1] = {n};
    lq_awq_group  grp   = {1, wl, nn, k, g, 4, 20, 1};
    double        ratio = -1, best = -1;
    CHECK_OK(lq_awq_search(&grp, xm, awq_loss, &a, s, &ratio, &best, &err));
    float smax = 0, smin = INFINITY;
    for (int64_t c = 0; c < k; c++) {
        smax = s[c] > smax ? s[c] : smax;
        smin = s[c] < smin ? s[c] : smin;
    }
    CHECK_MSG(a.calls == 20 && best == a.seen_min && ratio >= 0 && ratio < 1,
              "seed %llu: %d grid points, best %.6g, min seen %.6g, ratio %.2f",
              (unsigned long long)seed, a.calls, best, a.seen_min, ratio);
    CHECK_NEAR(sqrtf(smax * smin), 1.0, 1e-5);
    /* clip: never worse than the unclipped quantization on the tokens it searched */
    float *Wc = malloc((size_t)(n * k) * 4), *Wu = malloc((size_t)(n * k) * 4);
    memcpy(Wc, W, (size_t)(n * k) * 4);
    memcpy(Wu, W, (size_t)(n * k) * 4);
    CHECK_OK(lq_awq_clip(Wc, n, k, X, t, g, 4, &err));
    lq_awq_quantize(Wc, n, k, g, 4, NULL, NULL, NULL);
    lq_awq_quantize(Wu, n, k, g, 4, NULL, NULL, NULL);
    double ec = out_err(X, W, Wc, t, n, k), eu = out_err(X, W, Wu, t, n, k);
    CHECK_MSG(ec <= eu * (1 + 1e-6), "seed %llu: clipped %.6g > unclipped %.6g",
              (unsigned long long)seed, ec, eu);
    CHECK_EQ_INT(lq_awq_clip(Wc, n, 100, X, t, 32, 4, &err), LQ_ERR_INVALID_ARG);
    free(X), free(W), free(xm), free(s), free(Y0), free(a.Y), free(Wc), free(Wu);
    lq_xstats_free(&st);
}

static void test_nf4_int8(uint64_t seed) {
    lq_rng r;
    lq_rng_seed(&r, seed);
    const int64_t n = 16, k = 200, numel = n * k, bs = 64, nb = (numel + bs - 1) / bs;
    float        *W = malloc((size_t)numel * 4), *am = malloc((size_t)nb * 4);
    uint8_t      *c = malloc((size_t)numel);
    for (int64_t i = 0; i < numel; i++)
        W[i] = lq_rng_normal(&r) * (i % 97 == 0 ? 8.f : 1.f);
    lq_nf4_quantize(W, numel, bs, c, am);
    int bad = 0;
    for (int64_t b = 0; b < nb; b++) {
        float mx = 0;
        for (int64_t i = b * bs; i < numel && i < (b + 1) * bs; i++)
            mx = fabsf(W[i]) > mx ? fabsf(W[i]) : mx;
        bad += am[b] != mx;
    }
    for (int64_t i = 0; i < numel; i++) {
        /* x as bitsandbytes computes it: w * (1 / absmax) */
        float x = am[i / bs] > 0 ? W[i] * (1.0f / am[i / bs]) : 0, dbest = INFINITY;
        for (int j = 0; j < 16; j++)
            dbest = fminf(dbest, fabsf(x - lq_nf4_table[j]));
        if (c[i] > 15 || fabsf(x - lq_nf4_table[c[i]]) > dbest + 1e-6f) {
            if (bad < 3)
                fprintf(stderr, "nf4 x %.9g code %d (%.9g) best dist %.9g\n", x, c[i],
                        lq_nf4_table[c[i] & 15], dbest);
            bad++;
        }
    }
    CHECK_MSG(bad == 0, "seed %llu: %d NF4 codes/absmax not nearest", (unsigned long long)seed,
              bad);
    int8_t *cb  = malloc((size_t)numel);
    float  *scb = malloc((size_t)n * 4);
    lq_int8_quantize(W, n, k, cb, scb);
    bad = 0;
    for (int64_t rr = 0; rr < n; rr++) {
        float mx = 0;
        for (int64_t col = 0; col < k; col++)
            mx = fmaxf(mx, fabsf(W[rr * k + col]));
        bad += scb[rr] != mx;
        for (int64_t col = 0; col < k; col++)
            bad += cb[rr * k + col] != (int8_t)nearbyintf(127.f * W[rr * k + col] / mx);
    }
    CHECK_MSG(bad == 0, "seed %llu: %d INT8 mismatches", (unsigned long long)seed, bad);
    float   absmax[10] = {1, 7, 6, 0.5f, 9, 5.99f, 6.01f, 0, 100, 2};
    int32_t idx[10];
    int64_t no = lq_int8_outliers(absmax, 10, 6.f, 0, idx);
    CHECK(no == 5 && idx[0] == 1 && idx[1] == 2 && idx[2] == 4 && idx[3] == 6 && idx[4] == 8);
    no = lq_int8_outliers(absmax, 10, 6.f, 2, idx); /* the two largest, ascending */
    CHECK(no == 2 && idx[0] == 4 && idx[1] == 8);
    free(W), free(am), free(c), free(cb), free(scb);
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
    const double lo = lq_mixed_uniform_bpw(&cfg, plan, 3, 32),
                 mid = lq_mixed_uniform_bpw(&cfg, plan, 4, 32),
                 hi = lq_mixed_uniform_bpw(&cfg, plan, 8, 32);
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
        res.units   = units;
        res.n_units = 4 * LQ_MIXED_UNITS;
        res.probe_bits = 4;
        lq_err err  = {0};
        o.target_bpw = targets[t];
        CHECK_OK(lq_mixed_allocate(&cfg, &o, &res, &err));
        CHECK_MSG(res.bpw <= targets[t] + 1e-12, "seed %llu: bpw %.6f over the target %.6f",
                  (unsigned long long)seed, res.bpw, targets[t]);
        CHECK_MSG(fabs(res.min_bpw - lo) < 1e-9, "min_bpw %.6f != uniform 3-bit %.6f", res.min_bpw,
                  lo);
        /* the bits in use, recounted from the choices */
        int    all3 = 1, all4 = 1, all8 = 1;
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
            const int nb = units[i].bits == 3 ? 4 : 8;
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

int main(void) {
    omp_set_num_threads(1); /* tiny problems: OpenMP spin-waits would cost more than they save */
    for (uint64_t seed = 1; seed <= 3; seed++) {
        test_rtn(seed);
        test_gptq(100 + seed);
        test_awq(200 + seed);
        test_nf4_int8(300 + seed);
        test_mse(400 + seed);
        test_mse_weighted(500 + seed);
        test_mixed(600 + seed);
    }
    return lq_test_end("quant_algos");
}
