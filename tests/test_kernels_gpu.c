/* CUDA kernels against the scalar references (ctest label gpu).
 *
 * Every format x widths x shapes x batch rows, fixed seeds printed on failure:
 *  (a) exact mode (lq_test_qlinear.h): small-integer codes/zeros/activations, power-of-2 scales,
 *      integer-valued NF4 tables. Every product, and every partial sum in any order, is a
 *      multiple of the smallest scale below 2^24 of it, so the fp32 accumulations of the GEMV
 *      kernels and of cuBLAS (tensor cores, fp32 compute) and the reference's double sum all
 *      produce the same exact real number; its rounding to fp16 is then the same on both
 *      sides: bit-identical outputs. (LLM.int8: the int8 part is integer arithmetic, the
 *      scaling uses the reference's float operations in its order, the fp16 outlier part is
 *      summed in double on both sides.)
 *  (b) random mode: NMSE of the fp16 output vs the reference (fed the same fp16-rounded
 *      activations) <= the format's tol_nmse.
 *  Dequant (W -> fp16) is bit-identical in both modes: the device computes the same float
 *  expression and rounds it to fp16 like the host conversion of the reference.
 * Without a device (or in a build without CUDA) the API contract is checked, then SKIP. */
#include "lq_kernels_impl.h"
#include "lq_test.h"
#include "lq_test_qlinear.h"

#include <stdint.h>
#include <string.h>

#ifdef LQ_HAVE_CUDA
#include <cuda_runtime.h>
#endif

/* A valid host descriptor for the API-contract checks. */
static int contract_case(lq_qbuf *qb, float **dense) {
    return build(&k_cases[2], k_cases[2].n, k_cases[2].k, 1, 1, qb, dense) == LQ_OK;
}

/* Argument checks that come before any device work (so they hold in every build, with or
 * without a device): 16-byte alignment of x / y / ws and no overlap between them. */
static void api_validation(void) {
    lq_qbuf qb;
    float  *dense = NULL;
    CHECK(contract_case(&qb, &dense));
    const lq_qlinear *w = &qb.q;
    const int64_t     m = 2;
    _Alignas(16) static uint8_t pool[1 << 16];
    uint8_t *x = pool, *y = pool + 16384, *ws = pool + 32768;
    CHECK(m * w->k * 2 <= 16384 && m * w->n * 2 <= 16384);
    const size_t wsb = 32768;
    struct {
        const void *x;
        void       *y, *ws;
        const char *what;
    } bad[] = {
        {x + 2, y, ws, "x misaligned"},
        {x, y + 8, ws, "y misaligned"},
        {x, y, ws + 4, "ws misaligned"},
        {x, x + 16, ws, "y inside x"},
        {x, y, y - 16, "ws overlaps y"},
        {ws + 16, y, ws, "x inside ws"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const lq_status st =
            lq_qlinear_forward_cuda(NULL, w, bad[i].x, m, bad[i].y, bad[i].ws, wsb, NULL);
        CHECK_MSG(st == LQ_ERR_INVALID_ARG, "%s: %s", bad[i].what, lq_status_name(st));
    }
    CHECK_EQ_INT(lq_qlinear_dequant_cuda(w, pool + 1, NULL), LQ_ERR_INVALID_ARG);
    CHECK(!strcmp(lq_cuda_ctx_error(NULL), ""));
    lq_qbuf_free(&qb);
    free(dense);
}

#ifndef LQ_HAVE_CUDA
int main(void) {
    api_validation();
    (void)make_x; /* shared helper header: the device half of this file uses it */
    int count = -1;
    CHECK_OK(lq_cuda_device_count(&count));
    CHECK_EQ_INT(count, 0);
    lq_qbuf qb;
    float  *dense = NULL;
    CHECK(contract_case(&qb, &dense));
    _Alignas(16) static uint16_t buf[256], ybuf[256];
    lq_cuda_ctx *ctx      = NULL;
    lq_err       err      = {0};
    CHECK_EQ_INT(lq_cuda_ctx_create(0, &ctx, &err), LQ_ERR_NO_CUDA_BUILD);
    CHECK(ctx == NULL);
    CHECK_EQ_INT(lq_qlinear_workspace_cuda(&qb.q, 1), 0);
    CHECK_EQ_INT(lq_qlinear_forward_cuda(NULL, &qb.q, buf, 1, ybuf, NULL, 0, NULL),
                 LQ_ERR_NO_CUDA_BUILD);
    CHECK_EQ_INT(lq_qlinear_dequant_cuda(&qb.q, buf, NULL), LQ_ERR_NO_CUDA_BUILD);
    lq_qlinear dev;
    CHECK_EQ_INT(lq_qlinear_upload(&qb.q, buf, sizeof buf, &dev, NULL), LQ_ERR_NO_CUDA_BUILD);
    CHECK_EQ_INT(lq_cuda_device_info(0, NULL, 0, NULL, NULL, NULL, NULL), LQ_ERR_NO_CUDA_BUILD);
    lq_qbuf_free(&qb);
    free(dense);
    if (lq_test_end("kernels_gpu") != 0)
        return 1;
    printf("SKIP: no CUDA build (the stubs behave)\n");
    return 77;
}
#else

static const int64_t k_ms[] = {1, 2, 3, 7, 16, 118};

/* the one case also run with a 4096-row batch (cuBLAS path at scale) */
static const kcase k_big_m = {"gptq4_g128_m4096", LQ_FMT_GPTQ, 4, 128, 256, 128, 1, 0, 0, 0, 1};

#define CU(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static double nmse(const float *a, const float *ref, int64_t cnt) {
    double num = 0, den = 0;
    for (int64_t e = 0; e < cnt; e++) {
        const double d = (double)a[e] - (double)ref[e];
        num += d * d;
        den += (double)ref[e] * (double)ref[e];
    }
    return den > 0 ? num / den : num;
}

/* first index where the fp16 result differs from the reference rounded to fp16 (+0 == -0) */
static int64_t first_diff_f16(const uint16_t *got, const float *ref, int64_t cnt) {
    for (int64_t e = 0; e < cnt; e++) {
        const uint16_t r = lq_f32_to_f16(ref[e]);
        if (got[e] != r && !(((got[e] | r) & 0x7fffu) == 0))
            return e;
    }
    return -1;
}

static void run_case(lq_cuda_ctx *ctx, const kcase *c, const int64_t *ms, int nms, int exact,
                     uint64_t seed) {
    const lq_format_traits *t = lq_format_traits_get(c->fmt);
    const int64_t           n = c->n, k = c->k;
    const char             *mode = exact ? "exact" : "random";
    lq_qbuf                 qb;
    float                  *dense = NULL;
    if (build(c, n, k, exact, seed, &qb, &dense) != LQ_OK) {
        CHECK_MSG(0, "%s: build failed (seed %llu)", c->name, (unsigned long long)seed);
        return;
    }
    lq_qlinear hq      = qb.q; /* what gets uploaded: dense as fp16 */
    uint16_t  *dense_h = NULL;
    if (c->fmt == LQ_FMT_DENSE) {
        dense_h = malloc((size_t)(n * k) * 2);
        lq_f32_to_f16_array(dense, n * k, dense_h);
        lq_f16_to_f32_array(dense_h, n * k, dense); /* the reference sees the fp16 weights */
        hq.dense = dense_h;
    }
    const size_t dbytes = lq_qlinear_device_bytes(&hq);
    CHECK_MSG(dbytes > 0, "%s: device_bytes 0", c->name);
    void      *dbuf = NULL;
    lq_qlinear dq;
    CU(cudaMalloc(&dbuf, dbytes));
    CHECK_OK(lq_qlinear_upload(&hq, dbuf, dbytes, &dq, NULL));
    CHECK_EQ_INT(lq_qlinear_upload(&hq, dbuf, dbytes - 1, &dq, NULL), LQ_ERR_INVALID_ARG);
    CHECK_OK(lq_qlinear_upload(&hq, dbuf, dbytes, &dq, NULL));

    /* dequant: bit-identical to the reference rounded to fp16 */
    {
        float    *wref = malloc((size_t)(n * k) * sizeof(float));
        uint16_t *wh   = malloc((size_t)(n * k) * 2);
        void     *wd   = NULL;
        t->dequant_ref(&qb.q, wref);
        CU(cudaMalloc(&wd, (size_t)(n * k) * 2));
        CU(cudaMemset(wd, 0xff, (size_t)(n * k) * 2));
        CHECK_OK(lq_qlinear_dequant_cuda(&dq, wd, NULL));
        CU(cudaDeviceSynchronize());
        CU(cudaMemcpy(wh, wd, (size_t)(n * k) * 2, cudaMemcpyDeviceToHost));
        const int64_t d = first_diff_f16(wh, wref, n * k);
        CHECK_MSG(d < 0, "%s %s dequant n=%lld k=%lld seed=%llu: w[%lld] = %.9g, ref %.9g", c->name,
                  mode, (long long)n, (long long)k, (unsigned long long)seed, (long long)d,
                  d < 0 ? 0. : (double)lq_f16_to_f32(wh[d]), d < 0 ? 0. : (double)wref[d]);
        CU(cudaFree(wd));
        free(wref);
        free(wh);
    }

    for (int mi = 0; mi < nms; mi++) {
        const int64_t m    = ms[mi];
        float        *x    = malloc((size_t)(m * k) * sizeof(float));
        uint16_t     *xh   = malloc((size_t)(m * k) * 2);
        float        *yref = malloc((size_t)(m * n) * sizeof(float));
        uint16_t     *yh   = malloc((size_t)(m * n) * 2);
        float        *yf   = malloc((size_t)(m * n) * sizeof(float));
        make_x(c, &qb.q, m, exact, seed ^ 0x9e3779b97f4a7c15ull, x);
        lq_f32_to_f16_array(x, m * k, xh);
        lq_f16_to_f32_array(xh, m * k, x); /* the reference sees the fp16 activations */
        t->gemm_ref(&qb.q, x, m, yref);

        void        *xd = NULL, *yd = NULL, *wsd = NULL;
        const size_t ws = lq_qlinear_workspace_cuda(&dq, m);
        CU(cudaMalloc(&xd, (size_t)(m * k) * 2));
        CU(cudaMalloc(&yd, (size_t)(m * n) * 2));
        if (ws)
            CU(cudaMalloc(&wsd, ws));
        CU(cudaMemcpy(xd, xh, (size_t)(m * k) * 2, cudaMemcpyHostToDevice));
        CU(cudaMemset(yd, 0xff, (size_t)(m * n) * 2)); /* NaN: unwritten outputs fail */
        if (ws)
            CHECK_EQ_INT(lq_qlinear_forward_cuda(ctx, &dq, xd, m, yd, wsd, ws - 1, NULL),
                         LQ_ERR_INVALID_ARG);
        const lq_status st = lq_qlinear_forward_cuda(ctx, &dq, xd, m, yd, wsd, ws, NULL);
        CHECK_MSG(st == LQ_OK, "%s m=%lld: forward returned %s", c->name, (long long)m,
                  lq_status_name(st));
        CU(cudaDeviceSynchronize());
        CU(cudaMemcpy(yh, yd, (size_t)(m * n) * 2, cudaMemcpyDeviceToHost));
        if (exact) {
            const int64_t d = first_diff_f16(yh, yref, m * n);
            CHECK_MSG(d < 0,
                      "%s %s m=%lld n=%lld k=%lld seed=%llu: y[%lld] = %.9g, ref %.9g (not "
                      "bit-identical)",
                      c->name, mode, (long long)m, (long long)n, (long long)k,
                      (unsigned long long)seed, (long long)d,
                      d < 0 ? 0. : (double)lq_f16_to_f32(yh[d]), d < 0 ? 0. : (double)yref[d]);
        } else {
            lq_f16_to_f32_array(yh, m * n, yf);
            const double e = nmse(yf, yref, m * n);
            CHECK_MSG(e <= t->tol_nmse, "%s %s m=%lld n=%lld k=%lld seed=%llu: NMSE %.3g > %.3g",
                      c->name, mode, (long long)m, (long long)n, (long long)k,
                      (unsigned long long)seed, e, t->tol_nmse);
        }
        CU(cudaFree(xd));
        CU(cudaFree(yd));
        CU(cudaFree(wsd));
        free(x);
        free(xh);
        free(yref);
        free(yh);
        free(yf);
    }
    CU(cudaFree(dbuf));
    free(dense_h);
    free(dense);
    lq_qbuf_free(&qb);
}

int main(void) {
    int count = -1;
    CHECK_OK(lq_cuda_device_count(&count));
    CHECK(count >= 0);
    lq_cuda_ctx *ctx = NULL;
    lq_err       err = {0};
    api_validation();
    if (count <= 0) {
        /* the CUDA build on a machine without a device: no crash, clean errors */
        CHECK_EQ_INT(lq_cuda_ctx_create(0, &ctx, &err), LQ_ERR_NO_DEVICE);
        CHECK_EQ_INT(lq_cuda_device_info(0, NULL, 0, NULL, NULL, NULL, NULL), LQ_ERR_NO_DEVICE);
        if (lq_test_end("kernels_gpu") != 0)
            return 1;
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    char   name[256];
    int    ccM = 0, ccm = 0;
    size_t mem  = 0;
    double peak = 0;
    CHECK_OK(lq_cuda_device_info(0, name, sizeof name, &ccM, &ccm, &mem, &peak));
    printf("device 0: %s cc %d.%d, %.1f GiB, peak %.0f GB/s\n", name, ccM, ccm,
           (double)mem / (1 << 30), peak);
    CHECK(peak > 0);
    if (lq_cuda_ctx_create(0, &ctx, &err) != LQ_OK) {
        CHECK_MSG(0, "ctx_create: %s", err.msg);
        return lq_test_end("kernels_gpu");
    }
    { /* contract: m == 0 is a no-op, NULL output rejected */
        lq_qbuf qb;
        float  *dense = NULL;
        CHECK(contract_case(&qb, &dense));
        CHECK_EQ_INT(lq_qlinear_forward_cuda(ctx, &qb.q, NULL, 0, NULL, NULL, 0, NULL), LQ_OK);
        CHECK_EQ_INT(lq_qlinear_dequant_cuda(&qb.q, NULL, NULL), LQ_ERR_INVALID_ARG);
        lq_qbuf_free(&qb);
        free(dense);
    }
    const int nms = (int)(sizeof k_ms / sizeof k_ms[0]);
    for (int ci = 0; ci < NCASES; ci++) {
        const kcase *c = &k_cases[ci];
        for (int exact = 1; exact >= 0; exact--) {
            const uint64_t seed   = 1000u + (uint64_t)ci * 17u + (uint64_t)exact;
            const int      before = lq_test_failures_;
            run_case(ctx, c, k_ms, nms, exact, seed);
            printf("  %-28s %-6s %s\n", c->name, exact ? "exact" : "random",
                   lq_test_failures_ == before ? "ok" : "FAILED");
        }
    }
    const int64_t big_m[] = {4096};
    run_case(ctx, &k_big_m, big_m, 1, 1, 4242);
    run_case(ctx, &k_big_m, big_m, 1, 0, 4243);
    lq_cuda_ctx_free(ctx);
    return lq_test_end("kernels_gpu");
}
#endif
