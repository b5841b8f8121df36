/* bench_kernels_cpu -- CPU quantized GEMV/GEMM per format against OpenBLAS and memory bandwidth.
 *
 * For each format at W = 4096x4096 and 11008x4096 (n x k; -s NxK[,NxK...] for others) and
 * m = 1, 4, 16, 64, 256:
 * time per forward (best of repeats), effective GB/s of the weight bytes the format stores,
 * the ratio to OpenBLAS sgemm on the same weights as dense float32, and the fraction of a
 * STREAM-like copy bandwidth measured in the same run (the roofline of a weight-streaming GEMV).
 * act-order: "_actorder" as the checkpoint stores it, "_actorder_sorted" after lq_qlinear_sort;
 * "awq_g128_sorted": AWQ after lq_qlinear_sort (GPTQ's layout); "gptq3_g128_sorted": 3-bit
 * after lq_qlinear_sort (held as 4-bit codes).
 * Rows "<format>+ix": the same with LQ_QLINEAR_INT_X (integer activations), where the CPU has
 * those kernels; "dense_bf16+bx": with LQ_QLINEAR_BF16_X (bf16 activations, AVX-512 BF16);
 * "dense_f16+hx": with LQ_QLINEAR_F16_X (fp16 activations, AVX-512).
 *
 * Usage: bench_kernels_cpu [-f FMT (the formats whose name holds FMT; =NAME: that one)]
 *                          [-m 1,4,...] [-s small|large|all|NxK,...] [-t threads] [-r seconds]
 *                          [-c (CPU time instead of wall time)]
 *                          [-q (the reduced-precision rows only where a format has them, and
 *                           no sgemm: a comparison of record on those rows in a fraction of
 *                           the time; formats without them keep their one row)]
 *                          [-e MiB (before each timed run, untimed, read a buffer of that many
 *                           MiB: the weights come from memory, as in a model's forward, not
 *                           from an L3 that holds the one matrix being repeated)]
 *                          [-g TYPE (bench_kernels_ggml, built with -DLQ_BENCH_GGML=<llama.cpp
 *                           tree>: after each point, the same point against llama.cpp's
 *                           ggml_mul_mat of TYPE in the same process, the two alternated call by
 *                           call, -e read before each; a row "pair NAME m NxK TYPE llmquant-best
 *                           llama.cpp-best llmquant-median llama.cpp-median read-best
 *                           read-median" in ms, then "llmquant-bytes llama.cpp-bytes": read, a
 *                           plain read of a buffer of llmquant's weight bytes on as many
 *                           threads, taken in turn with both)]
 *
 * Why -g: on a 2-core VM one process of either program may run 1.5x slower than the next (the
 * stretch of time, where its pages landed); separate processes then compare two draws of that,
 * one process alternating both compares them under the same one.
 */
#include "bench_blas.h"
#include "lq_kernels.h"
#include "lq_dtype.h"

#ifdef LQ_BENCH_GGML
#include "llamacpp/ggml_pair.h"
#endif

#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct fcase {
    const char *name;
    lq_format   fmt;
    int         bits;
    int64_t     gs;
    int         act_order, dq, n_outlier;
    float       threshold;
    int         dense_dt; /* LQ_FMT_DENSE: lq_dense_dtype */
    int         sorted;   /* through lq_qlinear_sort once, as a runtime does at load time */
} fcase;

static const fcase k_fmts[] = {
    {"gptq4_g128", LQ_FMT_GPTQ, 4, 128, 0, 0, 0, 0, 0, 0},
    {"gptq4_g128_actorder", LQ_FMT_GPTQ, 4, 128, 1, 0, 0, 0, 0, 0},
    /* the same sorted by group once (lq_qlinear_sort), as a runtime does at load time */
    {"gptq4_g128_actorder_sorted", LQ_FMT_GPTQ, 4, 128, 1, 0, 0, 0, 0, 1},
    {"gptq3_g128", LQ_FMT_GPTQ, 3, 128, 0, 0, 0, 0, 0, 0},
    /* the same held as 4-bit codes (lq_qlinear_sort) */
    {"gptq3_g128_sorted", LQ_FMT_GPTQ, 3, 128, 0, 0, 0, 0, 0, 1},
    {"gptq2_g128", LQ_FMT_GPTQ, 2, 128, 0, 0, 0, 0, 0, 0},
    {"gptq8_g128", LQ_FMT_GPTQ, 8, 128, 0, 0, 0, 0, 0, 0},
    {"awq_g128", LQ_FMT_AWQ, 4, 128, 0, 0, 0, 0, 0, 0},
    /* the same repacked once into GPTQ's layout (lq_qlinear_sort), as a runtime does at load */
    {"awq_g128_sorted", LQ_FMT_AWQ, 4, 128, 0, 0, 0, 0, 0, 1},
    {"nf4_b64_dq", LQ_FMT_NF4, 4, 64, 0, 1, 0, 0, 0, 0},
    {"nf4_b64", LQ_FMT_NF4, 4, 64, 0, 0, 0, 0, 0, 0},
    {"int8_thr6_out32", LQ_FMT_INT8, 8, 0, 0, 0, 32, 6.f, 0, 0},
    /* dense weights as a checkpoint stores them (the "dense-f32 sgemm" rows: float32) */
    {"dense_f16", LQ_FMT_DENSE, 16, 0, 0, 0, 0, 0, LQ_DENSE_F16, 0},
    {"dense_bf16", LQ_FMT_DENSE, 16, 0, 0, 0, 0, 0, LQ_DENSE_BF16, 0},
    /* float32 through the library (lq_sgemm_tile), against the sgemm column on the same weights */
    {"dense_f32", LQ_FMT_DENSE, 32, 0, 0, 0, 0, 0, LQ_DENSE_F32, 0},
};

static lq_status build(const fcase *c, int64_t n, int64_t k, lq_qbuf *out, lq_err *err) {
    lq_rng r;
    lq_rng_seed(&r, 1);
    if (c->fmt == LQ_FMT_GPTQ || c->fmt == LQ_FMT_AWQ) {
        const int64_t G    = (k + c->gs - 1) / c->gs;
        const int     maxq = (1 << c->bits) - 1;
        uint8_t      *q    = malloc((size_t)(n * k));
        int32_t      *z = malloc((size_t)(G * n) * 4), *gi = NULL;
        float        *s = malloc((size_t)(G * n) * 4);
        for (int64_t e = 0; e < n * k; e++)
            q[e] = (uint8_t)lq_rng_below(&r, (uint64_t)maxq + 1);
        for (int64_t e = 0; e < G * n; e++) {
            z[e] = 1 + (int32_t)lq_rng_below(&r, (uint64_t)maxq);
            s[e] = 0.001f + 0.01f * (float)lq_rng_uniform(&r);
        }
        if (c->act_order) {
            gi = malloc((size_t)k * 4);
            for (int64_t i = 0; i < k; i++)
                gi[i] = (int32_t)(i / c->gs);
            for (int64_t i = k - 1; i > 0; i--) {
                const int64_t j = (int64_t)lq_rng_below(&r, (uint64_t)i + 1);
                const int32_t t = gi[i];
                gi[i]           = gi[j];
                gi[j]           = t;
            }
        }
        lq_status st = c->fmt == LQ_FMT_GPTQ
                           ? lq_pack_gptq(c->bits, n, k, c->gs, q, z, s, gi, NULL, out, err)
                           : lq_pack_awq(n, k, c->gs, q, z, s, NULL, out, err);
        free(q);
        free(z);
        free(s);
        free(gi);
        const size_t sb = st == LQ_OK && c->sorted ? lq_qlinear_sort_bytes(&out->q) : 0;
        if (sb) {
            void *buf = lq_qbuf_alloc(out, sb);
            st        = buf ? lq_qlinear_sort(&out->q, buf, sb, &out->q) : LQ_ERR_NOMEM;
        }
        return st;
    }
    if (c->fmt == LQ_FMT_DENSE) {
        memset(out, 0, sizeof *out);
        const int f32 = c->dense_dt == LQ_DENSE_F32;
        void     *h   = lq_qbuf_alloc(out, (size_t)(n * k) * (f32 ? 4 : 2));
        if (!h)
            return LQ_ERR_NOMEM;
        for (int64_t e = 0; e < n * k; e++) {
            const float v = 0.02f * lq_rng_normal(&r);
            if (f32)
                ((float *)h)[e] = v;
            else
                ((uint16_t *)h)[e] =
                    c->dense_dt == LQ_DENSE_BF16 ? lq_f32_to_bf16(v) : lq_f32_to_f16(v);
        }
        out->q.format      = LQ_FMT_DENSE;
        out->q.n           = n;
        out->q.k           = k;
        out->q.dense       = h;
        out->q.dense_dtype = c->dense_dt;
        return LQ_OK;
    }
    if (c->fmt == LQ_FMT_NF4) {
        const int64_t nb    = n * k / c->gs;
        uint8_t      *codes = malloc((size_t)(n * k));
        float        *am    = malloc((size_t)nb * 4);
        for (int64_t e = 0; e < n * k; e++)
            codes[e] = (uint8_t)lq_rng_below(&r, 16);
        for (int64_t b = 0; b < nb; b++)
            am[b] = 0.01f + 0.1f * (float)lq_rng_uniform(&r);
        lq_status st = lq_pack_nf4(n, k, c->gs, codes, am, c->dq, 256, NULL, out, err);
        free(codes);
        free(am);
        return st;
    }
    int8_t  *cb  = malloc((size_t)(n * k));
    float   *scb = malloc((size_t)n * 4), *ow = malloc((size_t)(n * c->n_outlier) * 4 + 4);
    int32_t *oi = malloc((size_t)c->n_outlier * 4 + 4);
    for (int64_t e = 0; e < n * k; e++)
        cb[e] = (int8_t)((int)lq_rng_below(&r, 255) - 127);
    for (int64_t i = 0; i < n; i++)
        scb[i] = 0.05f + 0.1f * (float)lq_rng_uniform(&r);
    for (int j = 0; j < c->n_outlier; j++)
        oi[j] = (int32_t)(j * (k / c->n_outlier) + 7);
    for (int64_t e = 0; e < n * c->n_outlier; e++)
        ow[e] = 0.1f * lq_rng_normal(&r);
    lq_status st = lq_pack_int8(n, k, cb, scb, oi, c->n_outlier, ow, c->threshold, NULL, out, err);
    free(cb);
    free(scb);
    free(ow);
    free(oi);
    return st;
}

/* -c: process CPU seconds instead of wall time (for single-thread comparisons on a shared
 * machine, where wall time includes waiting for a core). */
static double clock_s(int cpu) {
    if (!cpu)
        return lq_now();
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* -e: a buffer read between runs (reads only: written lines would be written back during the
 * next run); the sum goes to a volatile so that the reads stay */
typedef struct evict_buf {
    const uint64_t *p;
    size_t          n;
} evict_buf;

static void evict(const evict_buf *e) {
    uint64_t s = 0;
    for (size_t i = 0; e && i < e->n; i += 8) /* one word a cache line */
        s += e->p[i];
    volatile uint64_t sink = s;
    (void)sink;
}

/* Best-of time of fn over at least `secs` seconds (and 3 runs). */
typedef void (*run_fn)(void *ctx);
static double best_time(run_fn fn, void *ctx, double secs, int cpu, const evict_buf *ev) {
    fn(ctx); /* warm up: page in, thread pools */
    double best = 1e30, t0 = lq_now();
    int    it = 0;
    while (it < 3 || lq_now() - t0 < secs) {
        evict(ev);
        const double a = clock_s(cpu);
        fn(ctx);
        const double d = clock_s(cpu) - a;
        best           = d < best ? d : best;
        it++;
        if (it > 1000)
            break;
    }
    return best;
}

#ifdef LQ_BENCH_GGML
static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* A plain read of a buffer of the weights' bytes, on as many threads as the kernel, each its
 * static share: the bandwidth a weight stream can have on this machine at this moment */
typedef struct read_ctx {
    const uint64_t *p;
    size_t          n; /* words */
    int             nt;
} read_ctx;

static void run_read(void *v) {
    const read_ctx *c = v;
    uint64_t        s = 0;
#pragma omp parallel for schedule(static) reduction(+ : s) num_threads(c->nt)
    for (size_t i = 0; i < c->n; i++)
        s += c->p[i];
    volatile uint64_t sink = s;
    (void)sink;
}

/* fn, llama.cpp's g and the read rd taken in turn (which goes first rotates too), each after the
 * eviction read, for at least 2 x `secs` seconds and 5 runs each: best and median of llmquant,
 * llama.cpp in t[0..3] (best, best, median, median), the read's best and median in t[4], t[5] */
static int pair_time(run_fn fn, void *ctx, ggml_pair *g, read_ctx *rd, double secs, int cpu,
                     const evict_buf *ev, double t[6]) {
    enum { NMAX = 1000 };
    double d[3][NMAX];
    int    it = 0;
    fn(ctx); /* warm up all three */
    if (ggml_pair_run(g))
        return 1;
    run_read(rd);
    for (const double t0 = lq_now(); it < NMAX && (it < 5 || lq_now() - t0 < 2 * secs); it++)
        for (int h = 0; h < 3; h++) {
            const int side = (h + it) % 3; /* 0: llmquant, 1: llama.cpp, 2: the read */
            evict(ev);
            const double a = clock_s(cpu);
            if (side == 1)
                (void)ggml_pair_run(g);
            else if (side == 2)
                run_read(rd);
            else
                fn(ctx);
            d[side][it] = clock_s(cpu) - a;
        }
    for (int side = 0; side < 3; side++)
        qsort(d[side], (size_t)it, sizeof(double), cmp_double);
    t[0] = d[0][0], t[1] = d[1][0], t[2] = d[0][it / 2], t[3] = d[1][it / 2];
    t[4] = d[2][0], t[5] = d[2][it / 2];
    return 0;
}
#endif

typedef struct fwd_ctx {
    const lq_qlinear *w;
    const float      *x;
    int64_t           m;
    float            *y;
    void             *ws;
    size_t            wss;
    int               nt;
    unsigned          flags;
} fwd_ctx;

static void run_fwd(void *p) {
    fwd_ctx *c = p;
    lq_qlinear_forward_cpu_ex(c->w, c->x, c->m, c->y, c->ws, c->wss, c->nt, c->flags);
}

typedef struct sgemm_ctx {
    const float *x, *w;
    float       *y;
    int          m, n, k;
} sgemm_ctx;

static void run_sgemm(void *p) {
    sgemm_ctx *c = p;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, c->m, c->n, c->k, 1.f, c->x, c->k, c->w,
                c->k, 0.f, c->y, c->n);
}

typedef struct copy_ctx {
    float  *a;
    float  *b;
    int64_t n;
    int     nt;
} copy_ctx;

static void run_copy(void *p) {
    copy_ctx *c = p;
#pragma omp parallel for schedule(static) num_threads(c->nt)
    for (int64_t i = 0; i < c->n; i++)
        c->b[i] = c->a[i];
}

int main(int argc, char **argv) {
    bench_blas_reexec(argv);
    const char *ffilter = NULL, *mlist = NULL, *shapes = "all", *gtype = NULL;
    int         nt   = 0;
    double      secs = 0.5;
    int         cpu = 0, evict_mib = 0, qx_only = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-c")) {
            cpu = 1;
            continue;
        }
        if (!strcmp(argv[i], "-q")) {
            qx_only = 1;
            continue;
        }
        if (i + 1 >= argc)
            break;
        if (!strcmp(argv[i], "-f"))
            ffilter = argv[i + 1];
        else if (!strcmp(argv[i], "-m"))
            mlist = argv[i + 1];
        else if (!strcmp(argv[i], "-s"))
            shapes = argv[i + 1];
        else if (!strcmp(argv[i], "-t"))
            nt = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-r"))
            secs = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "-e"))
            evict_mib = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-g"))
            gtype = argv[i + 1];
        i++;
    }
#ifndef LQ_BENCH_GGML
    if (gtype) {
        fprintf(stderr, "bench_kernels_cpu: -g needs bench_kernels_ggml (cmake "
                        "-DLQ_BENCH_GGML=<llama.cpp tree>)\n");
        return 2;
    }
#endif
    /* -t bounds OpenBLAS too: its OpenMP build (the one llmquant links) takes the OpenMP thread
     * count, and a 1-thread row must not run its sgemm on every core */
    if (nt > 0)
        omp_set_num_threads(nt);
    const int threads = nt > 0 ? nt : omp_get_max_threads();
    evict_buf evb     = {NULL, (size_t)(evict_mib > 0 ? evict_mib : 0) << 17}; /* words */
    uint64_t *evm     = evb.n ? lq_aligned_alloc(evb.n * sizeof(uint64_t)) : NULL;
    for (size_t i = 0; evm && i < evb.n; i++)
        evm[i] = i;
    evb.p               = evm;
    const evict_buf *ev = evm ? &evb : NULL;
    if (evict_mib > 0)
        printf("between runs: %d MiB read (weights from memory)\n", evict_mib);

    /* STREAM-like copy: 2 x 256 MiB, bytes = read + write */
    copy_ctx cc = {NULL, NULL, 64ll << 20, threads};
    cc.a        = lq_aligned_alloc((size_t)cc.n * 4);
    cc.b        = lq_aligned_alloc((size_t)cc.n * 4);
    for (int64_t i = 0; i < cc.n; i++)
        cc.a[i] = (float)i, cc.b[i] = 0.f;
    const double tc = best_time(run_copy, &cc, 1.0, 0, NULL);
    const double bw = 2.0 * (double)cc.n * 4 / tc / 1e9;
    lq_aligned_free(cc.a);
    lq_aligned_free(cc.b);
    printf("threads %d, STREAM-like copy bandwidth %.2f GB/s (read + write)\n", threads, bw);
    printf("%-20s %5s %11s %5s %9s %8s %8s %9s %8s\n", "format", "m", "n x k", "", "time ms",
           "GB/s", "%copyBW", "sgemm ms", "vs sgemm");

    int64_t shp[8][2] = {{4096, 4096}, {11008, 4096}};
    int     nshp      = 2;
    if (strchr(shapes, 'x')) { /* -s 4096x11008,11008x4096 */
        nshp = 0;
        for (const char *p = shapes; *p && nshp < 8;) {
            char *e;
            shp[nshp][0] = strtoll(p, &e, 10);
            if (*e != 'x')
                break;
            shp[nshp][1] = strtoll(e + 1, &e, 10);
            if (shp[nshp][0] > 0 && shp[nshp][1] > 0)
                nshp++;
            p = strchr(e, ',');
            if (!p)
                break;
            p++;
        }
    }
    int64_t ms[16] = {1, 4, 16, 64, 256};
    int     nms    = 5;
    if (mlist) { /* -m 1,8,32 */
        nms = 0;
        for (const char *p = mlist; *p && nms < 16;) {
            ms[nms++] = strtoll(p, NULL, 10);
            p         = strchr(p, ',');
            if (!p)
                break;
            p++;
        }
    }
    for (int si = 0; si < nshp; si++) {
        if ((si == 0 && !strcmp(shapes, "large")) || (si == 1 && !strcmp(shapes, "small")))
            continue;
        const int64_t n = shp[si][0], k = shp[si][1];
        lq_rng        r;
        lq_rng_seed(&r, 2);
        float  *dense = lq_aligned_alloc((size_t)(n * k) * 4);
        int64_t mmax  = 1;
        for (int mi = 0; mi < nms; mi++)
            mmax = ms[mi] > mmax ? ms[mi] : mmax;
        float *x = lq_aligned_alloc((size_t)(mmax * k) * 4);
        float *y = lq_aligned_alloc((size_t)(mmax * n) * 4);
        for (int64_t e = 0; e < n * k; e++)
            dense[e] = 0.02f * lq_rng_normal(&r);
        for (int64_t e = 0; e < mmax * k; e++)
            x[e] = lq_rng_normal(&r);
        double tsg[16] = {0};
        for (int mi = 0; mi < nms && !qx_only; mi++) {
            sgemm_ctx sc = {x, dense, y, (int)ms[mi], (int)n, (int)k};
            tsg[mi]      = best_time(run_sgemm, &sc, secs, cpu, ev);
            if (!ffilter || strstr("dense", ffilter))
                printf("%-20s %5lld %5lldx%-5lld %5s %9.3f %8.2f %8.1f %9.3f %8.2f\n",
                       "dense-f32 sgemm", (long long)ms[mi], (long long)n, (long long)k, "",
                       tsg[mi] * 1e3, (double)(n * k * 4) / tsg[mi] / 1e9,
                       100.0 * (double)(n * k * 4) / tsg[mi] / 1e9 / bw, tsg[mi] * 1e3, 1.0);
        }
        for (size_t fi = 0; fi < sizeof k_fmts / sizeof k_fmts[0]; fi++) {
            const fcase *c = &k_fmts[fi];
            if (ffilter &&
                (*ffilter == '=' ? strcmp(c->name, ffilter + 1) != 0 : !strstr(c->name, ffilter)))
                continue;
            lq_qbuf qb;
            lq_err  err = {0};
            if (build(c, n, k, &qb, &err) != LQ_OK) {
                fprintf(stderr, "%s: %s\n", c->name, err.msg);
                continue;
            }
            const double            wbytes = (double)lq_qlinear_bytes(&qb.q);
#ifdef LQ_BENCH_GGML
            /* -g: the read side, a buffer of the weights' bytes allocated as they are (2 MiB
             * pages from 2 MiB), written so that its pages exist */
            lq_qbuf  rb = {0};
            read_ctx rd = {NULL, lq_qlinear_bytes(&qb.q) / 8, threads};
            if (gtype && !(rd.p = lq_qbuf_alloc(&rb, rd.n * 8))) {
                fprintf(stderr, "bench_kernels_ggml: no memory for the read buffer\n");
                return 1;
            }
            if (gtype)
                memset(lq_qbuf_mut(&rb, rd.p), 1, rd.n * 8);
#endif
            const lq_format_traits *tr     = lq_format_traits_get((lq_format)qb.q.format);
            /* float activations, then (where this CPU has them) the reduced-precision
             * activation kernels of the format's flags as a row "<format>+ix" (integer),
             * "+bx" (bf16) or "+hx" (fp16) */
            for (int ix = 0; ix < 2; ix++)
                for (int mi = 0; mi < nms; mi++) {
                    const int has_qx =
                        tr->quantizes_x_cpu && tr->quantizes_x_cpu(&qb.q, ms[mi], tr->qx_flag);
                    if (ix ? !has_qx : qx_only && has_qx)
                        continue;
                    const unsigned fl  = ix ? tr->qx_flag : 0u;
                    const size_t   wss = lq_qlinear_workspace_cpu_ex(&qb.q, ms[mi], fl);
                    void          *ws  = wss ? lq_aligned_alloc(wss) : NULL;
                    fwd_ctx        fc  = {&qb.q, x, ms[mi], y, ws, wss, nt, fl};
                    const double   t   = best_time(run_fwd, &fc, secs, cpu, ev);
                    char           name[48];
                    snprintf(name, sizeof name, "%s%s", c->name,
                             !ix ? ""
                             : fl != LQ_QLINEAR_INT_X
                                 ? qb.q.dense_dtype == LQ_DENSE_F16 ? "+hx" : "+bx"
                                 : "+ix");
                    printf("%-20s %5lld %5lldx%-5lld %5s %9.3f %8.2f %8.1f %9.3f %8.2f\n", name,
                           (long long)ms[mi], (long long)n, (long long)k, "", t * 1e3,
                           wbytes / t / 1e9, 100.0 * wbytes / t / 1e9 / bw, tsg[mi] * 1e3,
                           tsg[mi] / t); /* -q: sgemm columns 0 */
                    fflush(stdout);
#ifdef LQ_BENCH_GGML
                    ggml_pair *g = gtype ? ggml_pair_new(gtype, n, k, ms[mi], threads) : NULL;
                    double     pt[6];
                    if (gtype && (!g || pair_time(run_fwd, &fc, g, &rd, secs, cpu, ev, pt))) {
                        fprintf(stderr, "bench_kernels_ggml: llama.cpp type %s failed\n", gtype);
                        return 1;
                    }
                    if (g)
                        printf("pair %s %lld %lldx%lld %s %.4f %.4f %.4f %.4f %.4f %.4f %zu %zu\n",
                               name, (long long)ms[mi], (long long)n, (long long)k, gtype,
                               pt[0] * 1e3, pt[1] * 1e3, pt[2] * 1e3, pt[3] * 1e3, pt[4] * 1e3,
                               pt[5] * 1e3, rd.n * 8, ggml_pair_weight_bytes(g));
                    fflush(stdout);
                    ggml_pair_free(g);
#endif
                    lq_aligned_free(ws);
                }
            lq_qbuf_free(&qb);
#ifdef LQ_BENCH_GGML
            lq_qbuf_free(&rb);
#endif
        }
        lq_aligned_free(dense);
        lq_aligned_free(x);
        lq_aligned_free(y);
    }
    lq_aligned_free(evm);
    printf("time: best of repeats; GB/s: stored weight bytes / time; vs sgemm > 1: faster than "
           "OpenBLAS on the dense float32 weights\n");
    return 0;
}
