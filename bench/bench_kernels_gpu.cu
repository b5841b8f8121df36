/* bench_kernels_gpu -- CUDA dequant-matmul throughput through the public API.
 *
 *   bench_kernels_gpu [--quick] [--iters N] [--json FILE]
 *
 * For each shape (n x k), format and batch m: median time of N launches (cudaEvents, after
 * warmup) with the weights rotated through enough copies to exceed twice the L2, achieved
 * GB/s = (weights + scales/zeros/indices + x + y bytes) / time, % of the device's peak DRAM
 * bandwidth (lq_cuda_device_info), and speedup vs cublasGemmEx on fp16 W (tensor cores, fp32
 * compute) of the same shape, measured in the same run with the same rotation.
 * Prints a markdown table; --json also writes the rows as a JSON array. Exits 0 with
 * "SKIP: no CUDA device" when there is none. */
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "lq_dtype.h"
#include "lq_kernels.h"
}

#define CU(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

typedef struct shape {
    int64_t n, k;
} shape;

typedef struct fmtcase {
    const char *name;
    lq_format   fmt;
    int         act_order;
    int         dense_dt; /* LQ_FMT_DENSE: lq_dense_dtype (cuBLAS on fp16 W is the baseline) */
} fmtcase;

static const shape   k_shapes[] = {{4096, 4096}, {4096, 14336}, {14336, 4096}, {8192, 28672}};
static const fmtcase k_fmts[]   = {{"gptq4_g128", LQ_FMT_GPTQ, 0, 0},
                                   {"gptq4_g128_actorder", LQ_FMT_GPTQ, 1, 0},
                                   /* sorted by group once, as a runtime does at load */
                                   {"gptq4_g128_actorder_sorted", LQ_FMT_GPTQ, 2, 0},
                                   {"awq4_g128", LQ_FMT_AWQ, 0, 0},
                                   {"nf4_b64_dq", LQ_FMT_NF4, 0, 0},
                                   {"int8", LQ_FMT_INT8, 0, 0},
                                   {"dense_f16", LQ_FMT_DENSE, 0, LQ_DENSE_F16},
                                   {"dense_bf16", LQ_FMT_DENSE, 0, LQ_DENSE_BF16}};
static const int64_t k_ms[]     = {1, 2, 4, 8, 16, 64, 256, 512};

static uint64_t rng_next(uint64_t *s) { /* xorshift64* */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

static float rng_unif(uint64_t *s) { /* [-1, 1) */
    return (float)((double)(rng_next(s) >> 11) * 0x1p-52 - 1.0);
}

static void *rnd_bytes(size_t bytes, uint64_t *s) {
    uint8_t *p = (uint8_t *)malloc(bytes);
    for (size_t i = 0; i < bytes; i++)
        p[i] = (uint8_t)(rng_next(s) >> 56);
    return p;
}

static uint16_t *rnd_f16(int64_t count, float lo, float hi, uint64_t *s) {
    uint16_t *p = (uint16_t *)malloc((size_t)count * 2);
    for (int64_t i = 0; i < count; i++) {
        const __half h = __float2half(lo + (hi - lo) * 0.5f * (rng_unif(s) + 1.f));
        memcpy(&p[i], &h, 2);
    }
    return p;
}

/* Host descriptor with random (valid) contents; the arrays are freed with free_host. */
typedef struct hostw {
    lq_qlinear q;
    void      *own[8];
    int        nown;
} hostw;

static void *own(hostw *h, void *p) {
    h->own[h->nown++] = p;
    return p;
}

static void make_host(const fmtcase *f, int64_t n, int64_t k, hostw *h) {
    uint64_t s = 0x1234567ull ^ (uint64_t)(n * 31 + k);
    memset(h, 0, sizeof *h);
    lq_qlinear *q = &h->q;
    q->format     = f->fmt;
    q->n          = n;
    q->k          = k;
    if (f->fmt == LQ_FMT_GPTQ || f->fmt == LQ_FMT_AWQ) {
        const int64_t gs = 128, G = k / gs;
        q->bits          = 4;
        q->group_size    = gs;
        if (f->fmt == LQ_FMT_GPTQ) {
            q->qweight = own(h, rnd_bytes((size_t)(k / 8 * n) * 4, &s));
            q->qzeros  = own(h, rnd_bytes((size_t)(G * n / 8) * 4, &s));
            int32_t *gi = (int32_t *)own(h, malloc((size_t)k * 4));
            for (int64_t c = 0; c < k; c++)
                gi[c] = (int32_t)(c / gs);
            if (f->act_order) /* random permutation of the channels' groups */
                for (int64_t c = k - 1; c > 0; c--) {
                    const int64_t j = (int64_t)(rng_next(&s) % (uint64_t)(c + 1));
                    const int32_t t = gi[c];
                    gi[c]           = gi[j];
                    gi[j]           = t;
                }
            q->g_idx = gi;
        } else {
            q->qweight = own(h, rnd_bytes((size_t)(k * n / 8) * 4, &s));
            q->qzeros  = own(h, rnd_bytes((size_t)(G * n / 8) * 4, &s));
        }
        q->scales = own(h, rnd_f16(G * n, 0.002f, 0.02f, &s));
        const size_t sb = f->act_order == 2 ? lq_qlinear_sort_bytes(q) : 0;
        if (sb) { /* lq_qlinear_sort: qweight and g_idx in group order, plus perm */
            void *buf = own(h, aligned_alloc(64, (sb + 63) & ~(size_t)63));
            if (lq_qlinear_sort(q, buf, sb, q) != LQ_OK) {
                fprintf(stderr, "lq_qlinear_sort failed\n");
                exit(1);
            }
        }
    } else if (f->fmt == LQ_FMT_NF4) {
        const int64_t bs = 64, nb = n * k / bs, nnb = (nb + 255) / 256;
        q->bits             = 4;
        q->group_size       = bs;
        q->qweight          = own(h, rnd_bytes((size_t)(n * k / 2), &s));
        q->absmax           = own(h, rnd_bytes((size_t)nb, &s));
        q->quant_map        = lq_nf4_table;
        float *na           = (float *)own(h, malloc((size_t)nnb * 4));
        float *nc           = (float *)own(h, malloc(256 * 4));
        for (int64_t i = 0; i < nnb; i++)
            na[i] = 0.05f;
        lq_dynamic_map_8bit(nc);
        q->nested_absmax    = na;
        q->nested_code      = nc;
        q->nested_offset    = 0.03f;
        q->nested_blocksize = 256;
    } else if (f->fmt == LQ_FMT_DENSE) {
        uint16_t *w = rnd_f16(n * k, -0.05f, 0.05f, &s);
        if (f->dense_dt == LQ_DENSE_BF16) /* the same values, rounded to bf16 */
            for (int64_t e = 0; e < n * k; e++)
                w[e] = lq_f32_to_bf16(lq_f16_to_f32(w[e]));
        q->dense       = own(h, w);
        q->dense_dtype = f->dense_dt;
    } else { /* INT8 */
        q->bits      = 8;
        q->qweight   = own(h, rnd_bytes((size_t)(n * k), &s));
        float *scb   = (float *)own(h, malloc((size_t)n * 4));
        for (int64_t i = 0; i < n; i++)
            scb[i] = 0.1f + 0.1f * rng_unif(&s);
        q->scb       = scb;
        q->threshold = 6.f; /* bitsandbytes' default; uniform activations never reach it */
    }
}

static void free_host(hostw *h) {
    for (int i = 0; i < h->nown; i++)
        free(h->own[i]);
}

static int cmp_f(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

typedef lq_status (*launch_fn)(void *arg, int copy);

/* median milliseconds of iters launches after warmup, rotating through copies */
static float time_median(launch_fn fn, void *arg, int copies, int iters, lq_status *st) {
    cudaEvent_t *ev = (cudaEvent_t *)malloc(sizeof(cudaEvent_t) * 2 * (size_t)iters);
    float       *ms = (float *)malloc(sizeof(float) * (size_t)iters);
    for (int i = 0; i < 2 * iters; i++)
        CU(cudaEventCreate(&ev[i]));
    *st = LQ_OK;
    for (int i = 0; i < 3 && *st == LQ_OK; i++)
        *st = fn(arg, i % copies);
    for (int i = 0; i < iters && *st == LQ_OK; i++) {
        CU(cudaEventRecord(ev[2 * i]));
        *st = fn(arg, i % copies);
        CU(cudaEventRecord(ev[2 * i + 1]));
    }
    CU(cudaDeviceSynchronize());
    float med = NAN;
    if (*st == LQ_OK) {
        for (int i = 0; i < iters; i++)
            CU(cudaEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]));
        qsort(ms, (size_t)iters, sizeof(float), cmp_f);
        med = ms[iters / 2];
    }
    for (int i = 0; i < 2 * iters; i++)
        CU(cudaEventDestroy(ev[i]));
    free(ev);
    free(ms);
    return med;
}

typedef struct qarg {
    lq_cuda_ctx *ctx;
    lq_qlinear  *dev; /* [copies] */
    const void  *x;
    int64_t      m;
    void        *y, *ws;
    size_t       ws_size;
} qarg;

static lq_status run_q(void *a, int copy) {
    qarg *q = (qarg *)a;
    return lq_qlinear_forward_cuda(q->ctx, &q->dev[copy], q->x, q->m, q->y, q->ws, q->ws_size,
                                   NULL);
}

typedef struct barg {
    cublasHandle_t h;
    void         **w; /* [copies] fp16 [n, k] */
    const void    *x;
    int64_t        m, n, k;
    void          *y;
} barg;

static lq_status run_b(void *a, int copy) {
    barg       *b     = (barg *)a;
    const float alpha = 1.f, beta = 0.f;
    return cublasGemmEx(b->h, CUBLAS_OP_T, CUBLAS_OP_N, (int)b->n, (int)b->m, (int)b->k, &alpha,
                        b->w[copy], CUDA_R_16F, (int)b->k, b->x, CUDA_R_16F, (int)b->k, &beta,
                        b->y, CUDA_R_16F, (int)b->n, CUBLAS_COMPUTE_32F,
                        CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS
               ? LQ_OK
               : LQ_ERR_CUDA;
}

static int copies_for(size_t bytes, size_t l2) {
    size_t c = (2 * l2 + bytes - 1) / bytes + 1;
    return c > 64 ? 64 : (int)c;
}

int main(int argc, char **argv) {
    int         quick = 0, iters = 50;
    const char *json  = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
            iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json") && i + 1 < argc)
            json = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--quick] [--iters N] [--json FILE]\n", argv[0]);
            return 2;
        }
    }
    if (iters < 1)
        iters = 1;
    int count = 0;
    lq_cuda_device_count(&count);
    if (count <= 0) {
        printf("SKIP: no CUDA device\n");
        return 0;
    }
    char   name[256] = "";
    int    ccM = 0, ccm = 0, l2 = 0;
    size_t mem  = 0;
    double peak = 0;
    if (lq_cuda_device_info(0, name, sizeof name, &ccM, &ccm, &mem, &peak) != LQ_OK) {
        fprintf(stderr, "lq_cuda_device_info failed\n");
        return 1;
    }
    CU(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
    lq_cuda_ctx *ctx = NULL;
    lq_err       err = {LQ_OK, ""};
    if (lq_cuda_ctx_create(0, &ctx, &err) != LQ_OK) {
        fprintf(stderr, "lq_cuda_ctx_create: %s\n", err.msg);
        return 1;
    }
    cublasHandle_t blas;
    if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "cublasCreate failed\n");
        return 1;
    }
    FILE *jf = NULL;
    if (json && !(jf = fopen(json, "w"))) {
        fprintf(stderr, "cannot write %s\n", json);
        return 1;
    }
    if (jf)
        fprintf(jf, "{\"device\": \"%s\", \"cc\": \"%d.%d\", \"peak_gbps\": %.1f, \"rows\": [",
                name, ccM, ccm, peak);
    printf("# %s (cc %d.%d), peak %.0f GB/s, L2 %d MiB, median of %d\n\n", name, ccM, ccm, peak,
           l2 >> 20, iters);
    printf("| n x k | format | m | us | GB/s | %% peak | cuBLAS fp16 us | speedup |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    fflush(stdout);

    const int nshapes = quick ? 1 : (int)(sizeof k_shapes / sizeof k_shapes[0]);
    const int nfmts   = (int)(sizeof k_fmts / sizeof k_fmts[0]);
    const int nms     = (int)(sizeof k_ms / sizeof k_ms[0]);
    const int64_t mmax = k_ms[nms - 1];
    int       first   = 1, failed = 0;
    for (int si = 0; si < nshapes; si++) {
        const int64_t n = k_shapes[si].n, k = k_shapes[si].k;
        /* x, y and the fp16 baseline weights (random) */
        uint64_t  s  = 99;
        uint16_t *xh = rnd_f16(mmax * k, -1.f, 1.f, &s);
        void     *xd = NULL, *yd = NULL;
        CU(cudaMalloc(&xd, (size_t)(mmax * k) * 2));
        CU(cudaMalloc(&yd, (size_t)(mmax * n) * 2));
        CU(cudaMemcpy(xd, xh, (size_t)(mmax * k) * 2, cudaMemcpyHostToDevice));
        free(xh);
        const size_t wbytes = (size_t)(n * k) * 2;
        const int    bcop   = copies_for(wbytes, (size_t)l2);
        void       **bw     = (void **)calloc((size_t)bcop, sizeof(void *));
        for (int c = 0; c < bcop; c++) {
            CU(cudaMalloc(&bw[c], wbytes));
            CU(cudaMemset(bw[c], 0x11, wbytes)); /* 0x1111: a small normal fp16 */
        }
        float bms[sizeof k_ms / sizeof k_ms[0]];
        for (int mi = 0; mi < nms; mi++) {
            barg      b = {blas, bw, xd, k_ms[mi], n, k, yd};
            lq_status st;
            bms[mi] = time_median(run_b, &b, bcop, iters, &st);
        }
        for (int c = 0; c < bcop; c++)
            CU(cudaFree(bw[c]));
        free(bw);

        for (int fi = 0; fi < nfmts; fi++) {
            const fmtcase *f = &k_fmts[fi];
            hostw          h;
            make_host(f, n, k, &h);
            const size_t qbytes = lq_qlinear_bytes(&h.q);
            const size_t dbytes = lq_qlinear_device_bytes(&h.q);
            const int    cop    = copies_for(qbytes, (size_t)l2);
            lq_qlinear  *dev    = (lq_qlinear *)calloc((size_t)cop, sizeof *dev);
            void       **bufs   = (void **)calloc((size_t)cop, sizeof(void *));
            for (int c = 0; c < cop; c++) {
                CU(cudaMalloc(&bufs[c], dbytes));
                if (lq_qlinear_upload(&h.q, bufs[c], dbytes, &dev[c], NULL) != LQ_OK) {
                    fprintf(stderr, "upload %s failed\n", f->name);
                    return 1;
                }
            }
            size_t ws = 0;
            for (int mi = 0; mi < nms; mi++) {
                const size_t w = lq_qlinear_workspace_cuda(&dev[0], k_ms[mi]);
                ws             = w > ws ? w : ws;
            }
            void *wsd = NULL;
            if (ws)
                CU(cudaMalloc(&wsd, ws));
            for (int mi = 0; mi < nms; mi++) {
                const int64_t m = k_ms[mi];
                qarg          a = {ctx, dev, xd, m, yd, wsd, ws};
                lq_status     st;
                const float   ms    = time_median(run_q, &a, cop, iters, &st);
                const double  bytes = (double)qbytes + (double)(m * k) * 2 + (double)(m * n) * 2;
                const double  gbps  = bytes / (ms * 1e-3) / 1e9;
                const double  pct   = 100.0 * gbps / peak;
                const double  sp    = bms[mi] / ms;
                if (st != LQ_OK) {
                    printf("| %lldx%lld | %s | %lld | FAILED: %s | | | | |\n", (long long)n,
                           (long long)k, f->name, (long long)m, lq_status_name(st));
                    failed = 1;
                    continue;
                }
                printf("| %lldx%lld | %s | %lld | %.1f | %.0f | %.1f | %.1f | %.2f |\n",
                       (long long)n, (long long)k, f->name, (long long)m, ms * 1e3, gbps, pct,
                       bms[mi] * 1e3, sp);
                fflush(stdout);
                if (jf) {
                    fprintf(jf,
                            "%s\n  {\"n\": %lld, \"k\": %lld, \"format\": \"%s\", \"m\": %lld, "
                            "\"us\": %.2f, \"gbps\": %.1f, \"pct_peak\": %.2f, "
                            "\"cublas_fp16_us\": %.2f, \"speedup\": %.3f}",
                            first ? "" : ",", (long long)n, (long long)k, f->name, (long long)m,
                            ms * 1e3, gbps, pct, bms[mi] * 1e3, sp);
                    first = 0;
                }
            }
            CU(cudaFree(wsd));
            for (int c = 0; c < cop; c++)
                CU(cudaFree(bufs[c]));
            free(bufs);
            free(dev);
            free_host(&h);
        }
        CU(cudaFree(xd));
        CU(cudaFree(yd));
    }
    if (jf) {
        fprintf(jf, "\n]}\n");
        fclose(jf);
    }
    cublasDestroy(blas);
    lq_cuda_ctx_free(ctx);
    return failed;
}
