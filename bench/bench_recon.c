/* bench_recon -- per-layer reconstruction error of the methods on synthetic layers at real sizes.
 *
 * Layers n x k = 4096x4096 (attention), 11008x4096 (gate/up), 4096x11008 (down). Inputs are
 * correlated like a transformer's: X = Z A + noise with a rank-64 mixing A, plus 16 outlier
 * channels scaled 20-50x (the channels AWQ protects and LLM.int8 splits off). 2048 calibration
 * tokens feed the statistics (Hessian, mean |x|, max |x|); 512 separate tokens measure
 *     err = ||X W^T - X W^^T||_F / ||X W^T||_F    (weights only: activations stay fp32).
 * Methods: RTN / GPTQ (act-order off, on) at w4 g128 and w3 g128 (asymmetric, v1-safe zeros),
 * AWQ w4 g128 (scale search + clip), NF4 (blocks of 64), INT8 (row absmax + fp16 outlier
 * columns, threshold 6). Each method runs in its own child process so its wall time and peak
 * RSS (wait4) are its own (peak RSS includes the layer, its inputs and the evaluation). Prints a markdown table; PASS when GPTQ < RTN and AWQ < RTN.
 *
 * Usage: bench_recon [--quick] [--threads N]      (--quick: 1024-wide layers) */
#define _GNU_SOURCE
#include "bench_blas.h"
#include "lq_kernels.h"
#include "lq_dtype.h"
#include "lq_ops.h"
#include "lq_quant.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct layer {
    int64_t n, k, tc, te;
    float  *W, *Xc, *Xe, *Ye; /* Ye = Xe W^T */
} layer;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void make_inputs(lq_rng *r, float *X, int64_t t, int64_t k, const float *A, int rank,
                        const int64_t *outl, const float *oscale, int nout) {
    float *Z = malloc((size_t)(t * rank) * sizeof(float));
    for (int64_t i = 0; i < t * rank; i++)
        Z[i] = lq_rng_normal(r);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)t, (int)k, rank, 1.f, Z, rank, A,
                (int)k, 0.f, X, (int)k);
    for (int64_t i = 0; i < t * k; i++)
        X[i] += 0.3f * lq_rng_normal(r);
    for (int64_t i = 0; i < t; i++)
        for (int o = 0; o < nout; o++)
            X[i * k + outl[o]] *= oscale[o];
    free(Z);
}

static layer make_layer(int64_t n, int64_t k, uint64_t seed) {
    layer  L = {n, k, 2048, 512, NULL, NULL, NULL, NULL};
    lq_rng r;
    lq_rng_seed(&r, seed);
    const int rank = 64, nout = 16;
    float    *A = malloc((size_t)(rank * k) * sizeof(float));
    for (int64_t i = 0; i < rank * k; i++)
        A[i] = lq_rng_normal(&r) / sqrtf((float)rank);
    int64_t outl[16];
    float   osc[16];
    for (int o = 0; o < nout; o++) {
        outl[o] = (int64_t)lq_rng_below(&r, (uint64_t)k);
        osc[o]  = 20.f + 30.f * (float)lq_rng_uniform(&r);
    }
    L.W = malloc((size_t)(n * k) * sizeof(float));
    for (int64_t i = 0; i < n; i++) { /* rows of different magnitude, as trained weights */
        float rs = 0.01f * (0.5f + (float)lq_rng_uniform(&r));
        for (int64_t c = 0; c < k; c++)
            L.W[i * k + c] = rs * lq_rng_normal(&r);
    }
    L.Xc = malloc((size_t)(L.tc * k) * sizeof(float));
    L.Xe = malloc((size_t)(L.te * k) * sizeof(float));
    L.Ye = malloc((size_t)(L.te * n) * sizeof(float));
    make_inputs(&r, L.Xc, L.tc, k, A, rank, outl, osc, nout);
    make_inputs(&r, L.Xe, L.te, k, A, rank, outl, osc, nout);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)L.te, (int)n, (int)k, 1.f, L.Xe,
                (int)k, L.W, (int)k, 0.f, L.Ye, (int)n);
    free(A);
    return L;
}

static double rel_err(const layer *L, const float *Wq) {
    float *Y = malloc((size_t)(L->te * L->n) * sizeof(float));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)L->te, (int)L->n, (int)L->k, 1.f,
                L->Xe, (int)L->k, Wq, (int)L->k, 0.f, Y, (int)L->n);
    double num = 0, den = 0;
    for (int64_t i = 0; i < L->te * L->n; i++) {
        double d = (double)Y[i] - L->Ye[i];
        num += d * d;
        den += (double)L->Ye[i] * L->Ye[i];
    }
    free(Y);
    return sqrt(num / den);
}

/* ------------------------------------------------------------------------------------------ */
typedef struct awq_ctx {
    const layer *L;
    const float *X; /* subsample */
    int64_t      t;
    float       *Y0, *Y, *wq;
} awq_ctx;

static lq_status awq_loss(void *user, const float *sc, double *loss) {
    awq_ctx *a = user;
    int64_t  n = a->L->n, k = a->L->k;
    lq_be    be; /* the candidate Q(W s) / s, as the method makes it */
    lq_be_init_host(&be, lq_ops_cpu(), 0);
    be.ops->awq_fakequant(&be, a->L->W, sc, n, k, 128, 4, a->wq);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)a->t, (int)n, (int)k, 1.f, a->X,
                (int)k, a->wq, (int)k, 0.f, a->Y, (int)n);
    double s = 0;
    for (int64_t i = 0; i < a->t * n; i++) {
        double d = (double)a->Y[i] - a->Y0[i];
        s += d * d;
    }
    *loss = s / (double)(a->t * n);
    return LQ_OK;
}

/* Runs method m on L; Wq gets the fake-quantized weights. 0 ok. */
static int run_method(const char *m, int bits, const layer *L, float *Wq, char *info, size_t cap) {
    int64_t n = L->n, k = L->k, g = 128, G = (k + g - 1) / g;
    lq_err  err = {0};
    memcpy(Wq, L->W, (size_t)(n * k) * sizeof(float));
    lq_qspec qs = {bits, g, 0, 1, 0};
    if (!strcmp(m, "rtn")) {
        uint8_t *q  = malloc((size_t)(n * k));
        float   *sc = malloc((size_t)(G * n) * 4);
        int32_t *z = malloc((size_t)(G * n) * 4), *gi = malloc((size_t)k * 4);
        lq_status s = lq_rtn(L->W, n, k, &qs, q, sc, z, gi, Wq, &err);
        free(q), free(sc), free(z), free(gi);
        return s != LQ_OK;
    }
    if (!strncmp(m, "gptq", 4)) {
        lq_xstats st;
        if (lq_xstats_init(&st, k, LQ_XS_HESSIAN, &err))
            return 1;
        for (int64_t c = 0; c < L->tc; c += 256) /* in chunks, as the pipeline feeds it */
            lq_xstats_add(&st, L->Xc + c * k, 256, 1);
        lq_xstats_finish(&st);
        lq_gptq_opts o = {.q = qs, .act_order = !strcmp(m, "gptq-act"), .damp = 0.01,
                          .damp_retries = 8, .block_size = 128, .name = m};
        uint8_t *q  = malloc((size_t)(n * k));
        float   *sc = malloc((size_t)(G * n) * 4);
        int32_t *z = malloc((size_t)(G * n) * 4), *gi = malloc((size_t)k * 4);
        lq_gptq_result r;
        lq_status      s = lq_gptq(Wq, st.H, n, k, &o, q, sc, z, gi, &r, &err);
        free(q), free(sc), free(z), free(gi);
        lq_xstats_free(&st);
        if (s)
            fprintf(stderr, "%s\n", err.msg);
        return s != LQ_OK;
    }
    if (!strcmp(m, "awq")) {
        lq_xstats st;
        if (lq_xstats_init(&st, k, LQ_XS_ABSMEAN, &err))
            return 1;
        lq_xstats_add(&st, L->Xc, L->tc, 1);
        float *xm = malloc((size_t)k * 4), *s = malloc((size_t)k * 4);
        lq_xstats_absmean(&st, xm);
        awq_ctx a = {L, L->Xc, 512, NULL, NULL, NULL};
        a.wq      = malloc((size_t)(n * k) * 4);
        a.Y0      = malloc((size_t)(a.t * n) * 4);
        a.Y       = malloc((size_t)(a.t * n) * 4);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)a.t, (int)n, (int)k, 1.f, a.X,
                    (int)k, L->W, (int)k, 0.f, a.Y0, (int)n);
        float *const  wl[1] = {(float *)L->W};
        const int64_t nn[1] = {n};
        lq_awq_group  grp   = {1, wl, nn, k, g, 4, 20, 1};
        double        ratio = 0, bl = 0;
        lq_status     rc    = lq_awq_search(&grp, xm, awq_loss, &a, s, &ratio, &bl, &err);
        if (rc == LQ_OK) {
            /* fold: W' = W diag(s) (the previous op takes 1/s), clip, quantize, unfold */
            for (int64_t r = 0; r < n; r++)
                for (int64_t c = 0; c < k; c++)
                    Wq[r * k + c] = L->W[r * k + c] * s[c];
            float *Xs = malloc((size_t)(L->tc * k) * 4);
            for (int64_t i = 0; i < L->tc; i++)
                for (int64_t c = 0; c < k; c++)
                    Xs[i * k + c] = L->Xc[i * k + c] / s[c];
            rc = lq_awq_clip(Wq, n, k, Xs, L->tc, g, 4, &err);
            free(Xs);
            lq_awq_quantize(Wq, n, k, g, 4, NULL, NULL, NULL);
            for (int64_t r = 0; r < n; r++)
                for (int64_t c = 0; c < k; c++)
                    Wq[r * k + c] /= s[c];
            snprintf(info, cap, "scale ratio %.2f", ratio);
        }
        free(xm), free(s), free(a.Y0), free(a.Y), free(a.wq);
        lq_xstats_free(&st);
        return rc != LQ_OK;
    }
    if (!strcmp(m, "nf4")) {
        int64_t  nb = (n * k + 63) / 64;
        uint8_t *c  = malloc((size_t)(n * k));
        float   *am = malloc((size_t)nb * 4);
        lq_nf4_quantize(L->W, n * k, 64, c, am);
        for (int64_t e = 0; e < n * k; e++)
            Wq[e] = lq_nf4_table[c[e]] * am[e / 64];
        free(c), free(am);
        return 0;
    }
    if (!strcmp(m, "int8")) {
        int8_t  *cb  = malloc((size_t)(n * k));
        float   *scb = malloc((size_t)n * 4);
        int32_t *idx = malloc((size_t)k * 4);
        lq_xstats st;
        if (lq_xstats_init(&st, k, LQ_XS_ABSMAX, &err))
            return 1;
        lq_xstats_add(&st, L->Xc, L->tc, 1);
        int64_t no = lq_int8_outliers(st.absmax, k, 6.f, k, idx);
        lq_int8_quantize(L->W, n, k, cb, scb);
        for (int64_t r = 0; r < n; r++)
            for (int64_t c = 0; c < k; c++)
                Wq[r * k + c] = (float)cb[r * k + c] * scb[r] / 127.f;
        for (int64_t o = 0; o < no; o++) /* outlier columns stay in fp16 */
            for (int64_t r = 0; r < n; r++)
                Wq[r * k + idx[o]] = lq_f16_to_f32(lq_f32_to_f16(L->W[r * k + idx[o]]));
        snprintf(info, cap, "%lld outlier columns", (long long)no);
        free(cb), free(scb), free(idx);
        lq_xstats_free(&st);
        return 0;
    }
    return 1;
}

typedef struct result {
    double err, secs;
    long   rss_kb;
    int    ok;
    char   info[64];
} result;

/* Each method runs in a fresh process (this program with --run): its wall time and peak RSS
 * are its own, and no OpenMP runtime is forked mid-flight (libgomp hangs in a forked child). */
static result run_child(const char *self, int quick, int shape, const char *m, int bits) {
    result res = {0};
    int    fd[2];
    if (pipe(fd))
        return res;
    pid_t pid = fork();
    if (pid == 0) {
        char sh[16], bt[16];
        snprintf(sh, sizeof sh, "%d", shape);
        snprintf(bt, sizeof bt, "%d", bits);
        dup2(fd[1], STDOUT_FILENO);
        close(fd[0]);
        close(fd[1]);
        execl(self, self, "--run", sh, m, bt, quick ? "--quick" : "--full", (char *)NULL);
        _exit(127);
    }
    close(fd[1]);
    char    buf[512];
    ssize_t len = read(fd[0], buf, sizeof buf - 1);
    close(fd[0]);
    struct rusage ru;
    int           status = 0;
    wait4(pid, &status, 0, &ru);
    res.rss_kb = ru.ru_maxrss;
    if (len > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        buf[len] = 0;
        res.ok   = sscanf(buf, "%lf %lf %63[^\n]", &res.err, &res.secs, res.info) >= 2;
    }
    return res;
}

int main(int argc, char **argv) {
    bench_blas_reexec(argv);
    int quick = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            omp_set_num_threads(atoi(argv[++i]));
    }
    const int64_t shapes[3][2] = {{4096, 4096}, {11008, 4096}, {4096, 11008}};
    const int64_t qshapes[3][2] = {{1024, 1024}, {2816, 1024}, {1024, 2816}};
    if (argc >= 6 && !strcmp(argv[1], "--run")) { /* child: one method on one layer */
        int     si = atoi(argv[2]), bits = atoi(argv[4]);
        int64_t n  = quick ? qshapes[si][0] : shapes[si][0];
        int64_t k  = quick ? qshapes[si][1] : shapes[si][1];
        layer   L  = make_layer(n, k, 1000 + (uint64_t)si);
        float  *Wq = malloc((size_t)(n * k) * sizeof(float));
        char    info[64] = "-";
        double  t0 = now_s();
        if (!Wq || run_method(argv[3], bits, &L, Wq, info, sizeof info))
            return 1;
        double secs = now_s() - t0;
        printf("%.8f %.3f %s\n", rel_err(&L, Wq), secs, info);
        return 0;
    }
    struct {
        const char *m;
        int         bits;
    } const meth[] = {{"rtn", 4},  {"gptq", 4}, {"gptq-act", 4}, {"awq", 4},
                      {"rtn", 3},  {"gptq", 3}, {"gptq-act", 3}, {"nf4", 4}, {"int8", 8}};
    const int nm = (int)(sizeof meth / sizeof meth[0]);
    printf("inputs: rank-64 correlated + 16 outlier channels (x20-50); 2048 calibration / 512 "
           "evaluation tokens; groups of 128 (NF4: blocks of 64); %d threads\n\n",
           omp_get_max_threads());
    printf("| layer (n x k) | method | bits | rel. error | vs RTN same bits | seconds | peak RSS "
           "MiB | note |\n|---|---|---|---|---|---|---|---|\n");
    int fails = 0;
    for (int si = 0; si < 3; si++) {
        int64_t n = quick ? qshapes[si][0] : shapes[si][0];
        int64_t k = quick ? qshapes[si][1] : shapes[si][1];
        double  rtn_err[9] = {0};
        for (int mi = 0; mi < nm; mi++) {
            result r = run_child("/proc/self/exe", quick, si, meth[mi].m, meth[mi].bits);
            if (!r.ok) {
                printf("| %lldx%lld | %s | %d | FAILED | | | | |\n", (long long)n, (long long)k,
                       meth[mi].m, meth[mi].bits);
                fails++;
                continue;
            }
            if (!strcmp(meth[mi].m, "rtn"))
                rtn_err[meth[mi].bits] = r.err;
            const char *verdict = "";
            char        vs[64]  = "";
            if (strcmp(meth[mi].m, "rtn") && meth[mi].bits <= 4 && rtn_err[meth[mi].bits] > 0 &&
                strcmp(meth[mi].m, "nf4")) {
                double ratio = r.err / rtn_err[meth[mi].bits];
                verdict      = ratio < 1 ? "PASS" : "FAIL";
                fails += ratio >= 1;
                snprintf(vs, sizeof vs, "%.3f %s", ratio, verdict);
            }
            printf("| %lldx%lld | %s | %d | %.5f | %s | %.2f | %.0f | %s |\n", (long long)n,
                   (long long)k, meth[mi].m, meth[mi].bits, r.err, vs, r.secs,
                   (double)r.rss_kb / 1024.0, r.info);
            fflush(stdout);
        }
    }
    printf("\n%s\n", fails ? "FAIL: a method did not beat RTN" : "all checks PASS");
    return fails ? 1 : 0;
}
