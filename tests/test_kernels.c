/* test_kernels -- every format x backend x shape against the scalar references, shaped like
 * ggml's test-backend-ops.
 *
 * For each case (format + bits/group variant) and m in {1, 2, 3, 7, 16, 118} (plus 4, 5, 6, 8, 13
 * exact; 4096 on a smaller n x k), with fixed seeds printed on failure:
 *   exact   small-integer activations/codes, power-of-2 scales: gemm_cpu and dequant_cpu are
 *           bit-identical to gemm_ref / dequant_ref
 *   random  gaussian activations, realistic scales: NMSE(gemm_cpu, gemm_ref) <= tol_nmse_cpu,
 *           dequant_cpu == dequant_ref exactly
 *   oracle  gemm_ref against x @ dequant_ref^T computed in double (LLM.int8 within its
 *           activation-quantization error)
 * plus layout checks of the packers against independent transcriptions of the reference
 * packing loops (AutoGPTQ 3-bit straddling, AutoAWQ interleave, bitsandbytes nibble order) and
 * descriptor validation. The case table (tests/lq_test_qlinear.h) is the one test_kernels_gpu.c
 * runs on CUDA; CUDA rows print SKIP here.
 *
 * Usage: test_kernels [-f FMT] [-b cpu|cuda] [-v] [perf]
 */
#include "lq_dtype.h"
#include "lq_kernels.h"
#include "lq_kernels_impl.h"
#include "lq_test.h"
#include "lq_test_qlinear.h"

#include <stdint.h>

static const int64_t k_ms[] = {1, 2, 3, 7, 16, 118};
/* the other instances of the register-blocked small-m kernels: exact mode only */
static const int64_t k_ms_extra[] = {4, 5, 6, 8, 13};

typedef struct opts {
    const char *fmt;     /* NULL: all */
    const char *backend; /* NULL: all */
    int         verbose;
    int         perf;
} opts;

static double nmse(const float *a, const float *ref, int64_t cnt) {
    double num = 0, den = 0;
    for (int64_t e = 0; e < cnt; e++) {
        const double d = (double)a[e] - (double)ref[e];
        num += d * d;
        den += (double)ref[e] * (double)ref[e];
    }
    return den > 0 ? num / den : num;
}

static int64_t first_diff(const float *a, const float *b, int64_t cnt) {
    for (int64_t e = 0; e < cnt; e++)
        if (memcmp(&a[e], &b[e], sizeof(float)) != 0)
            return e;
    return -1;
}

static int want(const char *filter, const char *name) {
    return !filter || strstr(name, filter) != NULL;
}

/* ---------------------------------------------------------------------------------------- */
static void run_case(const kcase *c, int64_t n, int64_t k, int64_t m, int exact, uint64_t seed,
                     const opts *o) {
    const lq_format_traits *t = lq_format_traits_get(c->fmt);
    lq_qbuf                 qb;
    float                  *dense = NULL;
    if (build(c, n, k, exact, seed, &qb, &dense) != LQ_OK) {
        CHECK_MSG(0, "%s: build failed (seed %llu)", c->name, (unsigned long long)seed);
        return;
    }
    const lq_qlinear *w   = &qb.q;
    lq_err            err = {0};
    CHECK_MSG(lq_qformat_get(c->fmt)->check(w, &err) == LQ_OK, "%s: check: %s", c->name, err.msg);
    CHECK_MSG(lq_qlinear_check(w, &err) == LQ_OK, "%s: lq_qlinear_check: %s", c->name, err.msg);

    float *x    = malloc((size_t)(m * k) * sizeof(float));
    float *yref = malloc((size_t)(m * n) * sizeof(float));
    float *ycpu = malloc((size_t)(m * n) * sizeof(float));
    float *wref = malloc((size_t)(n * k) * sizeof(float));
    float *wcpu = malloc((size_t)(n * k) * sizeof(float));
    make_x(c, w, m, exact, seed ^ 0x9e3779b97f4a7c15ull, x);

    const char *mode = exact ? "exact" : "random";
    t->gemm_ref(w, x, m, yref);
    t->dequant_ref(w, wref);

    /* backend cpu */
    if (want(o->backend, "cpu")) {
        const size_t ws_size = lq_qlinear_workspace_cpu(w, m);
        void        *ws      = ws_size ? lq_aligned_alloc(ws_size) : NULL;
        for (int64_t e = 0; e < m * n; e++)
            ycpu[e] = NAN;
        lq_status st = lq_qlinear_forward_cpu(w, x, m, ycpu, ws, ws_size, 0);
        CHECK_MSG(st == LQ_OK, "%s cpu m=%lld: forward returned %s", c->name, (long long)m,
                  lq_status_name(st));
        if (exact) {
            const int64_t d = first_diff(ycpu, yref, m * n);
            CHECK_MSG(d < 0,
                      "%s cpu %s m=%lld n=%lld k=%lld seed=%llu: y[%lld] = %.9g, ref %.9g (not "
                      "bit-identical)",
                      c->name, mode, (long long)m, (long long)n, (long long)k,
                      (unsigned long long)seed, (long long)d, d < 0 ? 0. : (double)ycpu[d],
                      d < 0 ? 0. : (double)yref[d]);
        } else {
            const double e = nmse(ycpu, yref, m * n);
            CHECK_MSG(e <= t->tol_nmse_cpu,
                      "%s cpu %s m=%lld n=%lld k=%lld seed=%llu: NMSE %.3g > %.3g", c->name, mode,
                      (long long)m, (long long)n, (long long)k, (unsigned long long)seed, e,
                      t->tol_nmse_cpu);
            if (o->verbose)
                printf("  %-28s cpu  %-6s m=%-5lld NMSE %.3g\n", c->name, mode, (long long)m, e);
        }
        lq_aligned_free(ws);
        if (m == 1) { /* dequant does not depend on m */
            for (int64_t e = 0; e < n * k; e++)
                wcpu[e] = NAN;
            CHECK_OK(lq_qlinear_dequant_cpu(w, wcpu, 0));
            const int64_t d = first_diff(wcpu, wref, n * k);
            CHECK_MSG(d < 0, "%s cpu %s dequant seed=%llu: w[%lld] = %.9g, ref %.9g", c->name, mode,
                      (unsigned long long)seed, (long long)d, d < 0 ? 0. : (double)wcpu[d],
                      d < 0 ? 0. : (double)wref[d]);
        }
    }
    /* backend cuda: the device run lives in test_kernels_gpu.c */
    if (want(o->backend, "cuda") && m == 1 && exact && o->verbose)
        printf("  %-28s cuda SKIP (device tests: test_kernels_gpu)\n", c->name);

    /* oracle: gemm_ref against x @ dequant_ref^T in double */
    if (m <= 16 || o->verbose) {
        float *yd = malloc((size_t)(m * n) * sizeof(float));
        for (int64_t r = 0; r < m; r++)
            for (int64_t i = 0; i < n; i++) {
                double acc = 0;
                for (int64_t cc = 0; cc < k; cc++)
                    acc += (double)x[r * k + cc] * (double)wref[i * k + cc];
                if (w->bias)
                    acc += (double)lq_f16_to_f32(w->bias[i]);
                yd[r * n + i] = (float)acc;
            }
        const double e = nmse(yref, yd, m * n);
        /* LLM.int8 quantizes activations to 8 bits: ~5e-5 NMSE for gaussian rows */
        const double tol = c->fmt == LQ_FMT_INT8 ? 1e-3 : 1e-12;
        CHECK_MSG(e <= tol,
                  "%s oracle %s m=%lld seed=%llu: NMSE(gemm_ref, x@dequant_ref^T) %.3g > %.3g",
                  c->name, mode, (long long)m, (unsigned long long)seed, e, tol);
        if (c->fmt == LQ_FMT_INT8 && !exact)
            CHECK_MSG(e > 0, "%s oracle: int8 gemm equals the float product exactly", c->name);
        free(yd);
    }
    free(x);
    free(yref);
    free(ycpu);
    free(wref);
    free(wcpu);
    free(dense);
    lq_qbuf_free(&qb);
}

/* ---------------------------------------------------------------------------------------- */
/* Independent transcription of AutoGPTQ's pack loop (qlinear_cuda_old.py) for 3 bits. */
static void autogptq_pack3(const uint32_t *intweight /* [k, n] */, int64_t k, int64_t n,
                           uint32_t *qweight /* [k*3/32, n] */) {
    memset(qweight, 0, (size_t)(k * 3 / 32 * n) * 4);
    for (int64_t col = 0; col < n; col++) {
        int64_t i = 0, row = 0;
#define IW(j) intweight[(j)*n + col]
        while (row < k * 3 / 32) {
            for (int64_t j = i; j < i + 10; j++)
                qweight[row * n + col] |= IW(j) << (3 * (j - i));
            i += 10;
            qweight[row * n + col] |= IW(i) << 30;
            row++;
            qweight[row * n + col] |= (IW(i) >> 2) & 1;
            i++;
            for (int64_t j = i; j < i + 10; j++)
                qweight[row * n + col] |= IW(j) << (3 * (j - i) + 1);
            i += 10;
            qweight[row * n + col] |= IW(i) << 31;
            row++;
            qweight[row * n + col] |= (IW(i) >> 1) & 3;
            i++;
            for (int64_t j = i; j < i + 10; j++)
                qweight[row * n + col] |= IW(j) << (3 * (j - i) + 2);
            i += 10;
            row++;
        }
#undef IW
    }
}

static void test_layouts(void) {
    lq_rng r;
    lq_rng_seed(&r, 7);
    lq_err err = {0};
    /* GPTQ 3-bit: straddling words exactly as AutoGPTQ */
    {
        const int64_t n = 32, k = 64;
        uint8_t       q[32 * 64];
        int32_t       z[32];
        float         s[32];
        uint32_t      iw[64 * 32], want[6 * 32];
        for (int64_t e = 0; e < n * k; e++)
            q[e] = (uint8_t)rnd_int(&r, 0, 7);
        for (int i = 0; i < 32; i++) {
            z[i] = rnd_int(&r, 1, 7);
            s[i] = 1.f;
        }
        for (int64_t i = 0; i < n; i++)
            for (int64_t c = 0; c < k; c++)
                iw[c * n + i] = q[i * k + c];
        autogptq_pack3(iw, k, n, want);
        lq_qbuf b;
        CHECK_OK(lq_pack_gptq(3, n, k, -1, q, z, s, NULL, NULL, &b, &err));
        CHECK_MSG(memcmp(b.q.qweight, want, sizeof want) == 0, "3-bit qweight != AutoGPTQ pack");
        /* qzeros: (z - 1) as a 3-bit stream along n, same straddling */
        uint32_t zw[3] = {0, 0, 0};
        {
            uint32_t ziw[32 * 1], zq[3];
            for (int i = 0; i < 32; i++)
                ziw[i] = (uint32_t)(z[i] - 1);
            /* the column stream of a [32, 1] matrix is the row stream of qzeros */
            autogptq_pack3(ziw, 32, 1, zq);
            memcpy(zw, zq, sizeof zw);
        }
        CHECK_MSG(memcmp(b.q.qzeros, zw, sizeof zw) == 0, "3-bit qzeros != AutoGPTQ pack");
        lq_qbuf_free(&b);
    }
    /* GPTQ 4-bit symmetric: zero 8 stored as 7 in every nibble (0x77777777) */
    {
        const int64_t n = 8, k = 8;
        uint8_t       q[64];
        int32_t       z[8];
        float         s[8];
        for (int e = 0; e < 64; e++)
            q[e] = (uint8_t)(e % 16);
        for (int i = 0; i < 8; i++) {
            z[i] = 8;
            s[i] = 0.5f;
        }
        lq_qbuf b;
        CHECK_OK(lq_pack_gptq(4, n, k, 128, q, z, s, NULL, NULL, &b, &err));
        CHECK_EQ_INT(((const int32_t *)b.q.qzeros)[0], 2004318071);
        /* qweight[0, col] = sum_j q[col, j] << 4j (LSB = lowest k) */
        uint32_t w0 = 0;
        for (int j = 0; j < 8; j++)
            w0 |= (uint32_t)q[0 * k + j] << (4 * j);
        CHECK_EQ_INT(((const uint32_t *)b.q.qweight)[0], w0);
        CHECK_EQ_INT(b.q.group_size, 8); /* clamped to k: one group */
        lq_qbuf_free(&b);
    }
    /* GPTQ zero 0 round-trips through the masked v1 field (AutoGPTQ torch dequant) */
    {
        uint8_t q[8 * 8] = {0};
        int32_t z[8]     = {0, 1, 2, 3, 4, 5, 6, 15};
        float   s[8]     = {1, 1, 1, 1, 1, 1, 1, 1};
        q[0]             = 3;
        lq_qbuf b;
        CHECK_OK(lq_pack_gptq(4, 8, 8, 8, q, z, s, NULL, NULL, &b, &err));
        CHECK_EQ_INT(((const uint32_t *)b.q.qzeros)[0] & 15u, 15u);
        float wd[64];
        lq_format_traits_get(LQ_FMT_GPTQ)->dequant_ref(&b.q, wd);
        CHECK_NEAR(wd[0], 3.0, 0); /* s * (3 - 0) */
        CHECK_NEAR(wd[7 * 8], -15.0, 0);
        lq_qbuf_free(&b);
    }
    /* AWQ: qweight[c, j] = sum_f q[c, 8j + order[f]] << 4f */
    {
        const int64_t    n = 16, k = 32;
        uint8_t          q[16 * 32];
        int32_t          z[16];
        float            s[16];
        static const int order[8] = {0, 2, 4, 6, 1, 3, 5, 7};
        for (int e = 0; e < 16 * 32; e++)
            q[e] = (uint8_t)rnd_int(&r, 0, 15);
        for (int i = 0; i < 16; i++) {
            z[i] = rnd_int(&r, 0, 15);
            s[i] = 1.f;
        }
        lq_qbuf b;
        CHECK_OK(lq_pack_awq(n, k, 32, q, z, s, NULL, &b, &err));
        int ok = 1;
        for (int64_t c = 0; c < k; c++)
            for (int64_t j = 0; j < n / 8; j++) {
                uint32_t v = 0;
                for (int f = 0; f < 8; f++)
                    v |= (uint32_t)q[(8 * j + order[f]) * k + c] << (4 * f);
                ok &= ((const uint32_t *)b.q.qweight)[c * 2 + j] == v;
            }
        CHECK_MSG(ok, "AWQ qweight interleave");
        uint32_t zv = 0;
        for (int f = 0; f < 8; f++)
            zv |= (uint32_t)z[order[f]] << (4 * f);
        CHECK_EQ_INT(((const uint32_t *)b.q.qzeros)[0], zv); /* zeros as-is */
        lq_qbuf_free(&b);
    }
    /* NF4: first element in the high nibble; quant_map is bitsandbytes' table */
    {
        uint8_t codes[64];
        float   am[1] = {2.f};
        for (int e = 0; e < 64; e++)
            codes[e] = (uint8_t)(e % 16);
        lq_qbuf b;
        CHECK_OK(lq_pack_nf4(1, 64, 64, codes, am, 0, 0, NULL, &b, &err));
        CHECK_EQ_INT(((const uint8_t *)b.q.qweight)[0], 0x01);
        CHECK_EQ_INT(((const uint8_t *)b.q.qweight)[1], 0x23);
        CHECK(b.q.quant_map[0] == -1.0f && b.q.quant_map[7] == 0.0f && b.q.quant_map[15] == 1.0f);
        CHECK(b.q.quant_map[1] == -0.6961928009986877f);
        float wd[64];
        lq_format_traits_get(LQ_FMT_NF4)->dequant_ref(&b.q, wd);
        CHECK(wd[9] == 2.f * 0.16093020141124725f);
        lq_qbuf_free(&b);
    }
    /* dynamic map: sorted, 0 and 1 present, symmetric around 0 except the 1.0 end */
    {
        float dm[256];
        lq_dynamic_map_8bit(dm);
        int sorted = 1;
        for (int j = 1; j < 256; j++)
            sorted &= dm[j - 1] <= dm[j];
        CHECK(sorted);
        CHECK(dm[255] == 1.0f);
        CHECK(dm[0] == -0.992968738079071f); /* bitsandbytes create_dynamic_map(signed=True)[0] */
        CHECK(dm[127] == 0.0f);
        for (int j = 0; j < 127; j++)
            CHECK_MSG(dm[j] == -dm[254 - j], "dynamic map asymmetric at %d", j);
    }
    /* double quant: absmax within the 8-bit code error; offset = mean */
    {
        const int64_t nb    = 600;
        uint8_t      *codes = calloc((size_t)(nb * 64), 1);
        float        *am    = malloc((size_t)nb * 4);
        double        mean  = 0;
        for (int64_t i = 0; i < nb; i++) {
            am[i] = 0.01f + (float)lq_rng_uniform(&r);
            mean += am[i];
        }
        mean /= (double)nb;
        lq_qbuf b;
        CHECK_OK(lq_pack_nf4(nb, 64, 64, codes, am, 1, 256, NULL, &b, &err));
        CHECK_NEAR(b.q.nested_offset, mean, 1e-6);
        CHECK_EQ_INT(b.q.nested_blocksize, 256);
        double maxerr = 0;
        for (int64_t i = 0; i < nb; i++) {
            const double e = fabs((double)lq_nf4_absmax(&b.q, i) - am[i]);
            maxerr         = e > maxerr ? e : maxerr;
        }
        /* dynamic code step near |x| = 1 is 1/64 of the block absmax (~0.5) */
        CHECK_MSG(maxerr < 0.5 / 64 + 1e-6, "double quant max error %g", maxerr);
        lq_qbuf_free(&b);
        free(codes);
        free(am);
    }
}

/* The branchless fp16 decode of the CPU kernels equals the reference one on all 65536 inputs
 * (NaN payloads included: compared as bits). */
static void test_f16_fast(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const float a = lq_f16_to_f32((uint16_t)h), b = lq_f16_to_f32_fast((uint16_t)h);
        bad += memcmp(&a, &b, 4) != 0;
    }
    CHECK_MSG(bad == 0, "lq_f16_to_f32_fast differs on %d inputs", bad);
}

static void test_validation(void) {
    lq_err  err        = {0};
    uint8_t q[64 * 64] = {0};
    int32_t z[64 * 2];
    float   s[64 * 2];
    for (int i = 0; i < 128; i++) {
        z[i] = 1;
        s[i] = 1.f;
    }
    lq_qbuf b;
    CHECK_EQ_INT(lq_pack_gptq(5, 64, 64, 32, q, z, s, NULL, NULL, &b, &err), LQ_ERR_INVALID_ARG);
    CHECK_MSG(strstr(err.msg, "bits = 5") != NULL, "%s", err.msg);
    CHECK_EQ_INT(lq_pack_gptq(3, 16, 64, 32, q, z, s, NULL, NULL, &b, &err), LQ_ERR_INVALID_ARG);
    CHECK_MSG(strstr(err.msg, "n % 32") != NULL, "%s", err.msg);
    q[5] = 16;
    CHECK_EQ_INT(lq_pack_gptq(4, 64, 64, 32, q, z, s, NULL, NULL, &b, &err), LQ_ERR_INVALID_ARG);
    CHECK_MSG(strstr(err.msg, "code 16") != NULL, "%s", err.msg);
    q[5] = 0;
    CHECK_EQ_INT(lq_pack_awq(64, 64, 48, q, z, s, NULL, &b, &err), LQ_ERR_INVALID_ARG);
    CHECK_MSG(strstr(err.msg, "divide k") != NULL, "%s", err.msg);
    float am[64];
    for (int i = 0; i < 64; i++)
        am[i] = 1.f;
    CHECK_EQ_INT(lq_pack_nf4(64, 64, 48, q, am, 0, 0, NULL, &b, &err), LQ_ERR_INVALID_ARG);
    CHECK_MSG(strstr(err.msg, "blocksize = 48") != NULL, "%s", err.msg);
    int8_t  cb[64 * 64] = {0};
    int32_t oi[2]       = {5, 3};
    float   ow[128]     = {0};
    CHECK_EQ_INT(lq_pack_int8(64, 64, cb, s, oi, 2, ow, 0, NULL, &b, &err), LQ_ERR_INVALID_ARG);
    CHECK_MSG(strstr(err.msg, "strictly increasing") != NULL, "%s", err.msg);

    /* descriptor checks name the format and the rule */
    lq_qlinear w = {0};
    w.format     = LQ_FMT_GPTQ;
    w.bits       = 4;
    w.n          = 64;
    w.k          = 60;
    w.group_size = 32;
    CHECK_EQ_INT(lq_qlinear_check(&w, &err), LQ_ERR_INVALID_ARG);
    CHECK_MSG(strstr(err.msg, "gptq") && strstr(err.msg, "k % 8"), "%s", err.msg);
    w.k = 64;
    CHECK_EQ_INT(lq_qlinear_check(&w, &err), LQ_ERR_INVALID_ARG);
    CHECK_MSG(strstr(err.msg, "qweight is NULL") != NULL, "%s", err.msg);
    w.format = 77;
    CHECK_EQ_INT(lq_qlinear_check(&w, &err), LQ_ERR_INVALID_ARG);
    CHECK_EQ_INT(lq_qlinear_check(NULL, &err), LQ_ERR_INVALID_ARG);
    CHECK_EQ_INT(lq_qlinear_workspace_cpu(&w, 4), 0);

    /* bytes: 4-bit GPTQ n=64 k=64 g32: qweight 8*64*4 + qzeros 2*8*4 + scales 2*64*2 + g_idx 256 */
    CHECK_OK(lq_pack_gptq(4, 64, 64, 32, q, z, s, NULL, NULL, &b, &err));
    CHECK_EQ_INT(lq_qlinear_bytes(&b.q), 2048 + 64 + 256 + 256);
    /* workspace misuse is rejected, not crashed on */
    float x[64 * 20] = {0}, y[64 * 20];
    CHECK_EQ_INT(lq_qlinear_forward_cpu(&b.q, x, 20, y, NULL, 0, 1), LQ_ERR_INVALID_ARG);
    lq_qbuf_free(&b);
}

/* ---------------------------------------------------------------------------------------- */
static void perf(const opts *o) {
    printf("perf mode: see bench/bench_kernels_cpu for the full sweep\n");
    for (int ci = 0; ci < NCASES; ci++) {
        const kcase *c = &k_cases[ci];
        if (!want(o->fmt, c->name))
            continue;
        const int64_t n = 1024, k = 1024;
        lq_qbuf       qb;
        float        *dense;
        kcase         cc = *c;
        if (c->fmt == LQ_FMT_INT8 && c->n_outlier)
            cc.n_outlier = 8;
        if (build(&cc, n, k, 0, 1, &qb, &dense) != LQ_OK)
            continue;
        for (int mi = 0; mi < 2; mi++) {
            const int64_t m = mi ? 64 : 1;
            float        *x = calloc((size_t)(m * k), 4), *y = calloc((size_t)(m * n), 4);
            const size_t  wsz = lq_qlinear_workspace_cpu(&qb.q, m);
            void         *ws  = wsz ? lq_aligned_alloc(wsz) : NULL;
            make_x(&cc, &qb.q, m, 0, 3, x);
            lq_qlinear_forward_cpu(&qb.q, x, m, y, ws, wsz, 0);
            int          it = 0;
            const double t0 = lq_now();
            while (lq_now() - t0 < 0.2) {
                lq_qlinear_forward_cpu(&qb.q, x, m, y, ws, wsz, 0);
                it++;
            }
            const double dt = (lq_now() - t0) / it;
            printf("  %-28s m=%-4lld %8.3f ms  %7.2f GB/s (weights)\n", c->name, (long long)m,
                   dt * 1e3, (double)lq_qlinear_bytes(&qb.q) / dt / 1e9);
            lq_aligned_free(ws);
            free(x);
            free(y);
        }
        free(dense);
        lq_qbuf_free(&qb);
    }
}

int main(int argc, char **argv) {
    opts o = {0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-f") && i + 1 < argc)
            o.fmt = argv[++i];
        else if (!strcmp(argv[i], "-b") && i + 1 < argc)
            o.backend = argv[++i];
        else if (!strcmp(argv[i], "-v"))
            o.verbose = 1;
        else if (!strcmp(argv[i], "perf"))
            o.perf = 1;
        else {
            fprintf(stderr, "usage: %s [-f FMT] [-b cpu|cuda] [-v] [perf]\n", argv[0]);
            return 2;
        }
    }
    if (o.perf) {
        perf(&o);
        return 0;
    }
    if (!o.fmt) {
        test_layouts();
        test_f16_fast();
        test_validation();
    }
    int cuda_skip_printed      = 0;
    int big_done[LQ_FMT_COUNT] = {0};
    for (int ci = 0; ci < NCASES; ci++) {
        const kcase *c = &k_cases[ci];
        if (!want(o.fmt, c->name))
            continue;
        const int before = lq_test_failures_;
        for (int exact = 1; exact >= 0; exact--)
            for (size_t mi = 0; mi < sizeof k_ms / sizeof k_ms[0]; mi++)
                run_case(c, c->n, c->k, k_ms[mi], exact, 1000 + (uint64_t)ci * 16 + mi, &o);
        for (size_t mi = 0; mi < sizeof k_ms_extra / sizeof k_ms_extra[0]; mi++)
            run_case(c, c->n, c->k, k_ms_extra[mi], 1, 3000 + (uint64_t)ci * 16 + mi, &o);
        /* m = 4096 on a small weight (once per format): the large-m path over many row blocks */
        if (big_done[c->fmt]++)
            goto report;
        const int64_t n4 = c->fmt == LQ_FMT_GPTQ && c->bits == 3 ? 32 : (c->n % 16 ? 24 : 32);
        const int64_t k4 = c->fmt == LQ_FMT_NF4 && c->k % 2 ? 63 : 128;
        kcase         c4 = *c;
        if (c4.fmt == LQ_FMT_NF4 && c4.gs > 64)
            c4.gs = 64;
        run_case(&c4, c->fmt == LQ_FMT_AWQ ? 24 : n4, k4, 4096, 1, 5000 + (uint64_t)ci, &o);
        run_case(&c4, c->fmt == LQ_FMT_AWQ ? 24 : n4, k4, 4096, 0, 6000 + (uint64_t)ci, &o);
    report:
        printf("%-28s cpu %s", c->name, lq_test_failures_ == before ? "OK" : "FAIL");
        if (!want(o.backend, "cuda") || cuda_skip_printed)
            printf("\n");
        else
            printf("   cuda SKIP (run by test_kernels_gpu)\n");
    }
    (void)cuda_skip_printed;
    return lq_test_end("test_kernels");
}
