/* bench_recon -- per-layer reconstruction error of every method on synthetic layers at real sizes.
 *
 * For each shape (n x k = 4096x4096, 11008x4096, 4096x11008) a random weight W and correlated
 * inputs X = Z L (L = low-rank + diagonal covariance factor; 12 outlier channels scaled 20-50x,
 * the shape of real LLM activations): 2048 calibration tokens feed the methods, 512 separate
 * evaluation tokens measure ||W X - W^ X||_F / ||W X||_F. Methods: RTN and GPTQ (act-order off
 * and on) at w4 g128 and w3 g128, AWQ (scale search + clip, w4 g128), NF4 (blocksize 64), INT8
 * (LLM.int8 weights, outlier columns from calibration absmax >= 6 kept in fp16). Each method runs
 * in a forked child so that its wall time and peak RSS are its own (peak RSS includes the shared
 * inputs the child touches). Prints a markdown table with PASS/FAIL for GPTQ < RTN and
 * AWQ < RTN at the same bits/group.
 *
 * Usage: bench_recon [--quick] [--seed N]
 */
#include "lq_dtype.h"
#include "lq_kernels.h"
#include "lq_quant.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct layer {
    int64_t n, k, tc, te;
    float  *W;  /* [n, k] */
    float  *Xc; /* [tc, k] calibration */
    float  *Xe; /* [te, k] evaluation */
    float  *Ye; /* [te, n] = Xe W^T */
} layer;

static void gen_x(lq_rng *r, const float *A, const float *dg, const float *amp, int64_t rank,
                  int64_t t, int64_t k, float *X) {
    float *z = malloc((size_t)rank * sizeof(float));
    for (int64_t i = 0; i < t; i++) {
        for (int64_t j = 0; j < rank; j++)
            z[j] = lq_rng_normal(r);
        float *x = X + i * k;
        for (int64_t c = 0; c < k; c++)
            x[c] = dg[c] * lq_rng_normal(r);
        /* low-rank part: x += z A */
        cblas_sgemv(CblasRowMajor, CblasTrans, (int)rank, (int)k, 1.0f, A, (int)k, z, 1, 1.0f, x, 1);
        for (int64_t c = 0; c < k; c++)
            x[c] *= amp[c];
    }
    free(z);
}

static void layer_make(layer *L, int64_t n, int64_t k, int64_t tc, int64_t te, uint64_t seed) {
    const int64_t rank = 32, nout = 12;
    lq_rng        r;
    lq_rng_seed(&r, seed);
    L->n = n, L->k = k, L->tc = tc, L->te = te;
    L->W  = malloc((size_t)(n * k) * sizeof(float));
    L->Xc = malloc((size_t)(tc * k) * sizeof(float));
    L->Xe = malloc((size_t)(te * k) * sizeof(float));
    L->Ye = malloc((size_t)(te * n) * sizeof(float));
    float *A   = malloc((size_t)(rank * k) * sizeof(float));
    float *dg  = malloc((size_t)k * sizeof(float));
    float *amp = malloc((size_t)k * sizeof(float));
    /* weights: gaussian with per-row scale spread, as trained matrices have */
    for (int64_t i = 0; i < n; i++) {
        float s = 0.01f * (0.5f + (float)lq_rng_uniform(&r));
        for (int64_t c = 0; c < k; c++)
            L->W[i * k + c] = s * lq_rng_normal(&r);
    }
    for (int64_t x = 0; x < rank * k; x++)
        A[x] = lq_rng_normal(&r) * 0.3f;
    for (int64_t c = 0; c < k; c++) {
        dg[c]  = 0.2f + 0.8f * (float)lq_rng_uniform(&r);
        amp[c] = 1.0f;
    }
    for (int64_t o = 0; o < nout; o++)
        amp[lq_rng_below(&r, (uint64_t)k)] = 20.0f + 30.0f * (float)lq_rng_uniform(&r);
    gen_x(&r, A, dg, amp, rank, tc, k, L->Xc);
    gen_x(&r, A, dg, amp, rank, te, k, L->Xe);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)te, (int)n, (int)k, 1.0f, L->Xe,
                (int)k, L->W, (int)k, 0.0f, L->Ye, (int)n);
    free(A);
    free(dg);
    free(amp);
}

static void layer_free(layer *L) {
    free(L->W);
    free(L->Xc);
    free(L->Xe);
    free(L->Ye);
}

/* ||Xe W^T - Xe Wq^T||_F / ||Xe W^T||_F */
static double rel_err(const layer *L, const float *Wq) {
    float *Y = malloc((size_t)(L->te * L->n) * sizeof(float));
    if (!Y)
        return NAN;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)L->te, (int)L->n, (int)L->k, 1.0f,
                L->Xe, (int)L->k, Wq, (int)L->k, 0.0f, Y, (int)L->n);
    double num = 0, den = 0;
    for (int64_t x = 0; x < L->te * L->n; x++) {
        double d = (double)Y[x] - L->Ye[x];
        num += d * d;
        den += (double)L->Ye[x] * L->Ye[x];
    }
    free(Y);
    return sqrt(num / den);
}

typedef enum { M_RTN, M_GPTQ, M_AWQ, M_NF4, M_INT8 } meth;

typedef struct mcase {
    const char *name;
    meth        m;
    int         bits, act;
} mcase;

static const mcase k_methods[] = {
    {"rtn w4 g128", M_RTN, 4, 0},       {"gptq w4 g128", M_GPTQ, 4, 0},
    {"gptq w4 g128 act", M_GPTQ, 4, 1}, {"awq w4 g128", M_AWQ, 4, 0},
    {"nf4 b64", M_NF4, 4, 0},           {"int8 thr6", M_INT8, 8, 0},
    {"rtn w3 g128", M_RTN, 3, 0},       {"gptq w3 g128", M_GPTQ, 3, 0},
    {"gptq w3 g128 act", M_GPTQ, 3, 1},
};
#define NMETH ((int)(sizeof k_methods / sizeof k_methods[0]))

typedef struct awq_ctx {
    const float *X; /* [t, k] */
    const float *Y; /* [t, n] */
    float       *buf;
    int64_t      t, n, k;
} awq_ctx;

static lq_status awq_loss(void *user, float *const *wq, double *loss) {
    awq_ctx *c = user;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)c->t, (int)c->n, (int)c->k, 1.0f,
                c->X, (int)c->k, wq[0], (int)c->k, 0.0f, c->buf, (int)c->n);
    double s = 0;
    for (int64_t x = 0; x < c->t * c->n; x++) {
        double d = (double)c->buf[x] - c->Y[x];
        s += d * d;
    }
    *loss = s / (double)(c->t * c->n);
    return LQ_OK;
}

/* Runs one method; Wq [n, k] receives the dequantized weights. */
static lq_status run_method(const layer *L, const mcase *mc, float *Wq, lq_err *err) {
    const int64_t n = L->n, k = L->k, gs = 128, G = lq_num_groups(k, gs);
    lq_status     st  = LQ_OK;
    uint8_t      *q   = malloc((size_t)(n * k));
    float        *sc  = malloc((size_t)(G * n) * sizeof(float));
    int32_t      *zr  = malloc((size_t)(G * n) * sizeof(int32_t));
    int32_t      *gi  = malloc((size_t)k * sizeof(int32_t));
    if (!q || !sc || !zr || !gi) {
        st = lq_fail(err, LQ_ERR_NOMEM, "bench: out of memory");
        goto done;
    }
    lq_qspec qs = {mc->bits, gs, 1, 0};
    switch (mc->m) {
    case M_RTN:
        st = lq_rtn(L->W, n, k, &qs, q, sc, zr, gi, Wq, err);
        break;
    case M_GPTQ: {
        lq_xstats xs;
        if ((st = lq_xstats_init(&xs, k, LQ_XS_HESSIAN, err)) != LQ_OK)
            break;
        /* 2048 tokens as 4 sequences of 512 */
        lq_xstats_add(&xs, L->Xc, L->tc, L->tc / 512 > 0 ? L->tc / 512 : 1);
        lq_xstats_finish(&xs);
        memcpy(Wq, L->W, (size_t)(n * k) * sizeof(float));
        lq_gptq_opts o = {0};
        o.q            = qs;
        o.act_order    = mc->act;
        o.damp         = 0.01;
        o.damp_retries = 8;
        o.block_size   = 128;
        o.name         = "bench";
        lq_gptq_result res;
        st = lq_gptq(Wq, xs.H, n, k, &o, q, sc, zr, gi, &res, err);
        lq_xstats_free(&xs);
        break;
    }
    case M_AWQ: {
        /* search on 512 calibration tokens (the loss is a full matmul per grid point) */
        const int64_t ts = L->tc < 512 ? L->tc : 512;
        float        *xm = calloc((size_t)k, sizeof(float));
        float        *s  = malloc((size_t)k * sizeof(float));
        float        *Y  = malloc((size_t)(ts * n) * sizeof(float));
        float        *bf = malloc((size_t)(ts * n) * sizeof(float));
        float        *Xs = malloc((size_t)(L->tc * k) * sizeof(float));
        if (!xm || !s || !Y || !bf || !Xs) {
            st = lq_fail(err, LQ_ERR_NOMEM, "bench: out of memory");
        } else {
            for (int64_t i = 0; i < L->tc; i++)
                for (int64_t c = 0; c < k; c++)
                    xm[c] += fabsf(L->Xc[i * k + c]);
            for (int64_t c = 0; c < k; c++)
                xm[c] /= (float)L->tc;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)ts, (int)n, (int)k, 1.0f,
                        L->Xc, (int)k, L->W, (int)k, 0.0f, Y, (int)n);
            awq_ctx      ctx = {L->Xc, Y, bf, ts, n, k};
            float       *wl[1] = {L->W};
            int64_t      nn[1] = {n};
            lq_awq_group g     = {1, wl, nn, k, gs, 4, 20, 1};
            st                 = lq_awq_search(&g, xm, awq_loss, &ctx, s, NULL, NULL, err);
            if (st == LQ_OK) {
                /* fold: W' = W diag(s), X' = X diag(s)^-1; clip on W'; W^ = Q(W') / s */
                for (int64_t r = 0; r < n; r++)
                    for (int64_t c = 0; c < k; c++)
                        Wq[r * k + c] = L->W[r * k + c] * s[c];
                for (int64_t i = 0; i < L->tc; i++)
                    for (int64_t c = 0; c < k; c++)
                        Xs[i * k + c] = L->Xc[i * k + c] / s[c];
                st = lq_awq_clip(Wq, n, k, Xs, L->tc, gs, 4, err);
            }
            if (st == LQ_OK) {
                lq_awq_quantize(Wq, n, k, gs, 4, q, sc, zr);
                for (int64_t r = 0; r < n; r++)
                    for (int64_t c = 0; c < k; c++)
                        Wq[r * k + c] /= s[c];
            }
        }
        free(xm);
        free(s);
        free(Y);
        free(bf);
        free(Xs);
        break;
    }
    case M_NF4: {
        int64_t  nb = (n * k + 63) / 64;
        float   *am = malloc((size_t)nb * sizeof(float));
        uint8_t *cc = malloc((size_t)(n * k));
        if (!am || !cc) {
            st = lq_fail(err, LQ_ERR_NOMEM, "bench: out of memory");
        } else {
            lq_nf4_quantize(L->W, n * k, 64, cc, am);
            for (int64_t e = 0; e < n * k; e++)
                Wq[e] = lq_nf4_table[cc[e]] * am[e / 64];
        }
        free(am);
        free(cc);
        break;
    }
    case M_INT8: {
        int8_t  *cb  = malloc((size_t)(n * k));
        float   *scb = malloc((size_t)n * sizeof(float));
        float   *amx = calloc((size_t)k, sizeof(float));
        int32_t *idx = malloc((size_t)k * sizeof(int32_t));
        if (!cb || !scb || !amx || !idx) {
            st = lq_fail(err, LQ_ERR_NOMEM, "bench: out of memory");
        } else {
            lq_int8_quantize(L->W, n, k, cb, scb);
            for (int64_t e = 0; e < n * k; e++)
                Wq[e] = (float)cb[e] * (scb[e / k] / 127.0f);
            for (int64_t i = 0; i < L->tc; i++)
                for (int64_t c = 0; c < k; c++)
                    amx[c] = fmaxf(amx[c], fabsf(L->Xc[i * k + c]));
            int64_t no = lq_int8_outliers(amx, k, 6.0f, 0, idx);
            for (int64_t r = 0; r < n; r++) /* outlier columns stay fp16 */
                for (int64_t o = 0; o < no; o++)
                    Wq[r * k + idx[o]] = lq_f16_to_f32(lq_f32_to_f16(L->W[r * k + idx[o]]));
        }
        free(cb);
        free(scb);
        free(amx);
        free(idx);
        break;
    }
    }
done:
    free(q);
    free(sc);
    free(zr);
    free(gi);
    return st;
}

typedef struct result {
    double   err, secs;
    int64_t  rss;
    int32_t  status;
    char     msg[200];
} result;

/* Forks so the method's time and peak RSS are not mixed with the others'. The child builds the
 * layer itself (same seed, same data): libgomp's thread pool does not survive fork, so the
 * parent never touches OpenMP or BLAS. */
static result run_isolated(int64_t n, int64_t k, int64_t tc, int64_t te, uint64_t seed,
                           const mcase *mc) {
    result res = {NAN, 0, 0, LQ_ERR_INTERNAL, "fork failed"};
    int    fd[2];
    if (pipe(fd) != 0)
        return res;
    pid_t pid = fork();
    if (pid < 0) {
        close(fd[0]);
        close(fd[1]);
        return res;
    }
    if (pid == 0) {
        close(fd[0]);
        result r  = {0};
        lq_err e  = {0};
        layer  Ls;
        layer_make(&Ls, n, k, tc, te, seed);
        const layer *L  = &Ls;
        float       *Wq = malloc((size_t)(L->n * L->k) * sizeof(float));
        double t0 = lq_now();
        r.status  = Wq ? run_method(L, mc, Wq, &e) : LQ_ERR_NOMEM;
        r.secs    = lq_now() - t0;
        r.rss     = lq_peak_rss_bytes();
        r.err     = r.status == LQ_OK ? rel_err(L, Wq) : NAN;
        snprintf(r.msg, sizeof r.msg, "%s", e.msg);
        free(Wq);
        layer_free(&Ls);
        ssize_t w = write(fd[1], &r, sizeof r);
        _exit(w == (ssize_t)sizeof r ? 0 : 1);
    }
    close(fd[1]);
    result  r;
    ssize_t got = read(fd[0], &r, sizeof r);
    close(fd[0]);
    int ws = 0;
    waitpid(pid, &ws, 0);
    if (got == (ssize_t)sizeof r)
        res = r;
    else
        snprintf(res.msg, sizeof res.msg, "child died (status %d)", ws);
    return res;
}

int main(int argc, char **argv) {
    int      quick = 0;
    uint64_t seed  = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: %s [--quick] [--seed N]\n", argv[0]);
            return 2;
        }
    }
    const int64_t full[3][2]  = {{4096, 4096}, {11008, 4096}, {4096, 11008}};
    const int64_t small[3][2] = {{512, 512}, {1024, 512}, {512, 1024}};
    const int64_t(*shapes)[2] = quick ? small : full;
    const int64_t tc = quick ? 512 : 2048, te = 512;

    printf("# bench_recon%s: ||WX - W^X||_F / ||WX||_F on %lld held-out tokens (%lld calibration), "
           "seed %llu\n\n",
           quick ? " --quick" : "", (long long)te, (long long)tc, (unsigned long long)seed);
    printf("| n x k | method | rel. error | vs RTN same bits | time (s) | peak RSS (MiB) | check |\n");
    printf("|---|---|---:|---:|---:|---:|---|\n");
    fflush(stdout);
    int fails = 0;
    for (int si = 0; si < 3; si++) {
        const int64_t n = shapes[si][0], k = shapes[si][1];
        double        rtn_err[9] = {0};
        for (int mi = 0; mi < NMETH; mi++) {
            const mcase *mc = &k_methods[mi];
            result       r  = run_isolated(n, k, tc, te, seed + (uint64_t)si, mc);
            const char  *chk = "";
            char         rel[32] = "";
            if (r.status != LQ_OK) {
                chk = "ERROR";
                fails++;
                fprintf(stderr, "%s: %s\n", mc->name, r.msg);
            }
            if (mc->m == M_RTN)
                rtn_err[mc->bits] = r.err;
            if ((mc->m == M_GPTQ || mc->m == M_AWQ) && r.status == LQ_OK) {
                int ok = r.err < rtn_err[mc->bits];
                chk    = ok ? "PASS (< RTN)" : "FAIL (>= RTN)";
                fails += !ok;
            }
            if (mc->m != M_RTN && rtn_err[mc->bits] > 0)
                snprintf(rel, sizeof rel, "%.3f", r.err / rtn_err[mc->bits]);
            printf("| %lldx%lld | %s | %.5f | %s | %.2f | %.0f | %s |\n", (long long)n,
                   (long long)k, mc->name, r.err, rel, r.secs, (double)r.rss / (1 << 20), chk);
            fflush(stdout);
        }
    }
    printf("\n%s\n", fails ? "SOME CHECKS FAILED" : "all checks passed");
    return fails ? 1 : 0;
}
