/* test_kernels -- every format x backend x shape against the scalar references, shaped like
 * ggml's test-backend-ops.
 *
 * For each case (format + bits/group variant) and m in {1, 2, 3, 7, 16, 118} (plus 4, 5, 6, 8, 13
 * exact; 4096 on a smaller n x k), with fixed seeds printed on failure:
 *   exact   small-integer activations/codes, power-of-2 scales: gemm_cpu and dequant_cpu are
 *           bit-identical to gemm_ref / dequant_ref
 *   random  gaussian activations, realistic scales: NMSE(gemm_cpu, gemm_ref) <= tol_nmse_cpu,
 *           dequant_cpu == dequant_ref exactly
 *   int-x   where the CPU has reduced-precision activation kernels for the case (the traits'
 *           quantizes_x_cpu under their qx_flag: GPTQ/AWQ/NF4 with AVX-512 VNNI or AVX2,
 *           LQ_QLINEAR_INT_X; dense bf16 with AVX-512 BF16, LQ_QLINEAR_BF16_X): bit-identical
 *           to gemm_qx_ref, the scalar oracle of that semantics, in both modes (where
 *           tol_nmse_qx_ref is set: in exact mode, and within it in random mode), and NMSE
 *           against gemm_ref <= tol_nmse_qx on random inputs. ctest `kernels_portable` runs all
 *           with LQ_CPU_KERNELS=portable: the kernels every CPU runs.
 *   oracle  gemm_ref against x @ dequant_ref^T computed in double (LLM.int8 within its
 *           activation-quantization error)
 * plus layout checks of the packers against independent transcriptions of the reference
 * packing loops (AutoGPTQ 3-bit straddling, AutoAWQ interleave, bitsandbytes nibble order) and
 * descriptor validation. One case table (tests/lq_test_qlinear.h) for every backend: -b cpu
 * (default; ctest `kernels`) runs the above, -b cuda (ctest `kernels_gpu`, label gpu) the same
 * cases on the device (see its section below; SKIP, 77, without one).
 *
 * Usage: test_kernels [-f FMT] [-b cpu|cuda] [-v] [perf]
 */
#include "lq_dtype.h"
#include "lq_kernels.h"
#include "lq_kernels_impl.h"
#include "lq_test.h"
#include "lq_test_qlinear.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef LQ_HAVE_CUDA
#include <cuda_runtime.h>
#endif

static const int64_t k_ms[] = {1, 2, 3, 4, 5, 7, 16, 118};
/* the other instances of the register-blocked small-m kernels: exact mode only */
/* 40: NF4 AVX-512 k ranges; 64: the top of the dense rows kernels on Zen 4 */
static const int64_t k_ms_extra[] = {4, 5, 6, 8, 13, 40, 64};

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

/* filter: substrings separated by commas, any of which selects */
static int want(const char *filter, const char *name) {
    if (!filter)
        return 1;
    for (const char *p = filter;; p++) {
        const char *e   = strchr(p, ',');
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        char         tok[64];
        if (len < sizeof tok) {
            memcpy(tok, p, len);
            tok[len] = '\0';
            if (strstr(name, tok))
                return 1;
        }
        if (!e)
            return 0;
        p = e;
    }
}

/* ---------------------------------------------------------------------------------------- */
static void run_case(const kcase *c, int64_t n, int64_t k, int64_t m, int exact, uint64_t seed,
                     const opts *o) {
    lq_qbuf qb;
    float  *dense = NULL;
    if (build(c, n, k, exact, seed, &qb, &dense) != LQ_OK) {
        CHECK_MSG(0, "%s: build failed (seed %llu)", c->name, (unsigned long long)seed);
        return;
    }
    const lq_qlinear       *w   = &qb.q; /* a sorted AWQ case is a GPTQ descriptor */
    const lq_format_traits *t   = lq_format_traits_get((lq_format)w->format);
    lq_err                  err = {0};
    CHECK_MSG(lq_qformat_get((lq_format)w->format)->check(w, &err) == LQ_OK, "%s: check: %s",
              c->name, err.msg);
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
        /* a flag of the format's that is not for these weights (LQ_QLINEAR_BF16_X on fp16
         * weights, LQ_QLINEAR_F16_X on bf16) or this CPU: the float path, bit for bit */
        for (unsigned f = 1; f <= t->qx_flag; f <<= 1) {
            if (!(f & t->qx_flag) || (t->quantizes_x_cpu && t->quantizes_x_cpu(w, m, f)))
                continue;
            CHECK_EQ_INT(lq_qlinear_workspace_cpu_ex(w, m, f), ws_size);
            float *yf = malloc((size_t)(m * n) * sizeof(float));
            CHECK_OK(lq_qlinear_forward_cpu_ex(w, x, m, yf, ws, ws_size, 0, f));
            CHECK_MSG(!memcmp(yf, ycpu, (size_t)(m * n) * sizeof(float)),
                      "%s cpu m=%lld flags %u: differs from the float path at %lld", c->name,
                      (long long)m, f, (long long)first_diff(yf, ycpu, m * n));
            free(yf);
        }
        /* reduced-precision activations (the traits' qx_flag): the oracle of that semantics
         * bit for bit (or within tol_nmse_qx_ref where its sums run in another order), the
         * float one within tol_nmse_qx (random inputs) */
        if (t->quantizes_x_cpu && t->quantizes_x_cpu(w, m, t->qx_flag)) {
            const size_t wsq = lq_qlinear_workspace_cpu_ex(w, m, t->qx_flag);
            void        *wq  = wsq ? lq_aligned_alloc(wsq) : NULL;
            float       *yx  = malloc((size_t)(m * n) * sizeof(float));
            float       *yq  = malloc((size_t)(m * n) * sizeof(float));
            for (int64_t e = 0; e < m * n; e++)
                yx[e] = NAN;
            CHECK_OK(lq_qlinear_forward_cpu_ex(w, x, m, yx, wq, wsq, 0, t->qx_flag));
            t->gemm_qx_ref(w, x, m, yq);
            const int64_t d = exact || t->tol_nmse_qx_ref == 0 ? first_diff(yx, yq, m * n) : -1;
            if (!exact && t->tol_nmse_qx_ref > 0) {
                const double e = nmse(yx, yq, m * n);
                CHECK_MSG(e <= t->tol_nmse_qx_ref,
                          "%s cpu int-x random m=%lld n=%lld k=%lld seed=%llu: NMSE %.3g > %.3g "
                          "against the qx ref",
                          c->name, (long long)m, (long long)n, (long long)k,
                          (unsigned long long)seed, e, t->tol_nmse_qx_ref);
            }
            CHECK_MSG(d < 0,
                      "%s cpu int-x %s m=%lld n=%lld k=%lld seed=%llu: y[%lld] = %.9g, qx ref "
                      "%.9g (not bit-identical)",
                      c->name, mode, (long long)m, (long long)n, (long long)k,
                      (unsigned long long)seed, (long long)d, d < 0 ? 0. : (double)yx[d],
                      d < 0 ? 0. : (double)yq[d]);
            if (!exact) {
                const double e = nmse(yx, yref, m * n);
                CHECK_MSG(e <= t->tol_nmse_qx,
                          "%s cpu int-x random m=%lld n=%lld k=%lld seed=%llu: NMSE %.3g > %.3g",
                          c->name, (long long)m, (long long)n, (long long)k,
                          (unsigned long long)seed, e, t->tol_nmse_qx);
                if (o->verbose)
                    printf("  %-28s cpu  int-x  m=%-5lld NMSE %.3g\n", c->name, (long long)m, e);
                /* the same bits at every thread count (a kernel that sums in another order
                 * than the semantics' keeps it fixed by the shape) */
                for (int nt = 1; nt <= 3; nt += 2) {
                    CHECK_OK(lq_qlinear_forward_cpu_ex(w, x, m, yq, wq, wsq, nt, t->qx_flag));
                    const int64_t dt = first_diff(yq, yx, m * n);
                    CHECK_MSG(dt < 0,
                              "%s cpu int-x m=%lld n=%lld k=%lld: %d threads differ at %lld",
                              c->name, (long long)m, (long long)n, (long long)k, nt, (long long)dt);
                }
            }
            free(yx), free(yq);
            lq_aligned_free(wq);
        }
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

/* The branchless fp16 decodes of the CPU kernels, scalar and 8 lanes, equal the reference one
 * on all 65536 inputs (NaN payloads included: compared as bits). */
static void test_f16_fast(void) {
    int bad = 0, badv = 0;
    for (uint32_t h = 0; h < 65536; h += 8) {
        uint16_t hs[8];
        for (int l = 0; l < 8; l++)
            hs[l] = (uint16_t)(h + (uint32_t)l);
        const lq_v8f v = lq_v8f_from_f16(hs);
        for (int l = 0; l < 8; l++) {
            const float a = lq_f16_to_f32(hs[l]), b = lq_f16_to_f32_fast(hs[l]), c = v[l];
            bad += memcmp(&a, &b, 4) != 0;
            badv += memcmp(&a, &c, 4) != 0;
        }
    }
    CHECK_MSG(bad == 0, "lq_f16_to_f32_fast differs on %d inputs", bad);
    CHECK_MSG(badv == 0, "lq_v8f_from_f16 differs on %d inputs", badv);
}

/* lq_gptq_gidx_plain (what picks the grouped and integer GPTQ kernels) against its definition,
 * g_idx[c] == c / group_size: true on the plain index with a short last group or one group,
 * false with any one channel moved to another group (first, group edges, last). */
static void test_gidx_plain(void) {
    enum { K = 300 };
    int32_t    gi[K];
    lq_qlinear w = {0};
    w.bits       = 4;
    w.k          = K;
    w.g_idx      = gi;
    const int64_t gss[3] = {128, 32, K}, cs[6] = {0, 31, 32, 127, 128, K - 1};
    for (int t = 0; t < 3; t++) {
        w.group_size = gss[t];
        for (int64_t c = 0; c < K; c++)
            gi[c] = (int32_t)(c / gss[t]);
        CHECK_MSG(lq_gptq_gidx_plain(&w), "plain g_idx (group %lld) not taken as plain",
                  (long long)gss[t]);
        for (int e = 0; e < 6; e++) {
            const int64_t c = cs[e];
            for (int d = -1; d <= 1; d += 2) {
                gi[c] += d;
                CHECK_MSG(!lq_gptq_gidx_plain(&w) && !lq_gptq_qx_block(&w),
                          "g_idx[%lld] %+d (group %lld) taken as plain", (long long)c, d,
                          (long long)gss[t]);
                gi[c] -= d;
            }
        }
    }
}

/* The AVX-512 GEMM under the large-m paths (lq_gemm512), where the CPU has it: every B kind
 * against a double-precision product on small integers (exact), over the tails of its blocks
 * (m % 6, nt % 64 and % 16, k % 16 and % 128), both betas; y's padding past nt is left alone
 * and y is not read at beta 0 (NaN there). */
static void test_gemm512(void) {
    if (!lq_cpu_avx512())
        return;
    static const int64_t ms[] = {1, 5, 6, 7, 13}, ns[] = {1, 17, 64, 100},
                         ks[] = {1, 15, 16, 130, 300};
    lq_rng r;
    lq_rng_seed(&r, 11);
    int bad = 0, runs = 0;
    for (int kind = LQ_GEMM_B_KN; kind <= LQ_GEMM_B_BF16; kind++)
        for (size_t a = 0; a < sizeof ms / sizeof ms[0]; a++)
            for (size_t b = 0; b < sizeof ns / sizeof ns[0]; b++)
                for (size_t c = 0; c < sizeof ks / sizeof ks[0]; c++)
                    for (int beta = 0; beta <= 1; beta++) {
                        const int64_t m = ms[a], nt = ns[b], k = ks[c], ldy = nt + 3;
                        float *x = malloc((size_t)(m * k) * 4), *w = malloc((size_t)(nt * k) * 4);
                        float *bf    = malloc((size_t)(nt * k) * 4),
                              *y     = malloc((size_t)(m * ldy) * 4);
                        uint16_t *bh = malloc((size_t)(nt * k) * 2);
                        for (int64_t e = 0; e < m * k; e++)
                            x[e] = (float)((int)(lq_rng_uniform(&r) * 7) - 3);
                        for (int64_t j = 0; j < nt; j++)
                            for (int64_t e = 0; e < k; e++) {
                                const float v  = (float)((int)(lq_rng_uniform(&r) * 9) - 4);
                                w[j * k + e]   = v;
                                bf[e * nt + j] = v; /* [k, nt] */
                                bh[j * k + e] =
                                    kind == LQ_GEMM_B_F16 ? lq_f32_to_f16(v) : lq_f32_to_bf16(v);
                            }
                        for (int64_t e = 0; e < m * ldy; e++)
                            y[e] = beta ? (float)(e % 5) : NAN;
                        for (int64_t rr = 0; rr < m; rr++)
                            for (int64_t j = nt; j < ldy; j++)
                                y[rr * ldy + j] = 7.f;
                        const lq_gemm_b src = {.p    = kind == LQ_GEMM_B_KN    ? (const void *)bf
                                                       : kind == LQ_GEMM_B_F32 ? (const void *)w
                                                                               : (const void *)bh,
                                               .ld   = kind == LQ_GEMM_B_KN ? nt : k,
                                               .kind = (lq_gemm_b_kind)kind};
                        lq_gemm512(x, m, k, &src, nt, y, ldy, (float)beta, 2);
                        for (int64_t rr = 0; rr < m; rr++)
                            for (int64_t j = 0; j < ldy; j++) {
                                double want = 7.;
                                if (j < nt) {
                                    want = beta ? (double)((rr * ldy + j) % 5) : 0.;
                                    for (int64_t e = 0; e < k; e++)
                                        want += (double)x[rr * k + e] * w[j * k + e];
                                }
                                bad += y[rr * ldy + j] != (float)want;
                            }
                        runs++;
                        free(x), free(w), free(bf), free(y), free(bh);
                    }
    CHECK_MSG(bad == 0, "lq_gemm512: %d wrong outputs over %d products", bad, runs);
}

/* The two GEMMs of bf16 weights on bf16 activations, where the CPU has them (lq_gemm512_bf16x:
 * AVX-512 BF16, lq_gemm_amx_bf16x: AMX), each called directly so that both stay tested on a CPU
 * whose dense forward takes the AMX one: exact on small integers against a double product over
 * the tails of their blocks (m % 6 and % 32, 16-row tiles, two row blocks; nt % 64, % 32 and
 * % 16; odd k, k % 32, channel blocks of 256); y's padding past nt is left alone. */
static void test_gemm_bf16x(void) {
    static const int64_t ms[] = {1, 7, 16, 17, 33, 300}, ns[] = {1, 17, 40, 64, 100},
                         ks[] = {1, 2, 31, 33, 300, 513};
    lq_rng r;
    lq_rng_seed(&r, 14);
    for (int impl = 0; impl < 2; impl++) {
        if (!(impl ? lq_cpu_amx_bf16() : lq_cpu_avx512bf16()))
            continue;
        int bad = 0, runs = 0;
        for (size_t a = 0; a < sizeof ms / sizeof ms[0]; a++)
            for (size_t b = 0; b < sizeof ns / sizeof ns[0]; b++)
                for (size_t c = 0; c < sizeof ks / sizeof ks[0]; c++) {
                    const int64_t m = ms[a], nt = ns[b], k = ks[c], ldy = nt + 3;
                    const int64_t ldx = (k + 31) / 32 * 32 + 32; /* zeros past k */
                    uint16_t *x = calloc((size_t)(m * ldx), 2), *w = malloc((size_t)(nt * k) * 2);
                    float    *y = malloc((size_t)(m * ldy) * 4);
                    for (int64_t rr = 0; rr < m; rr++)
                        for (int64_t e = 0; e < k; e++)
                            x[rr * ldx + e] =
                                lq_f32_to_bf16((float)((int)(lq_rng_uniform(&r) * 7) - 3));
                    for (int64_t e = 0; e < nt * k; e++)
                        w[e] = lq_f32_to_bf16((float)((int)(lq_rng_uniform(&r) * 9) - 4));
                    for (int64_t e = 0; e < m * ldy; e++)
                        y[e] = 7.f;
                    (impl ? lq_gemm_amx_bf16x : lq_gemm512_bf16x)(x, ldx, m, k, w, k, nt, y, ldy,
                                                                  2);
                    for (int64_t rr = 0; rr < m; rr++)
                        for (int64_t j = 0; j < ldy; j++) {
                            double want = 7.;
                            if (j < nt) {
                                want = 0.;
                                for (int64_t e = 0; e < k; e++)
                                    want += (double)lq_bf16_to_f32(x[rr * ldx + e]) *
                                            lq_bf16_to_f32(w[j * k + e]);
                            }
                            bad += y[rr * ldy + j] != (float)want;
                        }
                    runs++;
                    free(x), free(w), free(y);
                }
        CHECK_MSG(bad == 0, "%s: %d wrong outputs over %d products",
                  impl ? "lq_gemm_amx_bf16x" : "lq_gemm512_bf16x", bad, runs);
    }
}

/* lq_ssyrk_upper (and lq_syrk512 under it where the CPU has AVX-512): exact on small integers
 * against a double product, on the upper triangle, across panel and tile edges; the AVX-512
 * kernel leaves the lower triangle outside the diagonal 64-blocks alone */
static void test_syrk(void) {
    static const int64_t ks[] = {1, 5, 63, 64, 65, 130}, ts[] = {1, 7, 128, 129, 300};
    lq_rng               r;
    lq_rng_seed(&r, 12);
    int bad = 0, runs = 0;
    for (int impl = 0; impl < 2; impl++)
        for (size_t a = 0; a < sizeof ks / sizeof ks[0]; a++)
            for (size_t b = 0; b < sizeof ts / sizeof ts[0]; b++)
                for (int acc = 0; acc <= 1; acc++) {
                    if (impl == 1 && !lq_cpu_avx512())
                        continue;
                    const int64_t k = ks[a], t = ts[b];
                    const float   alpha = acc ? 0.5f : 1.f, beta = acc ? 0.25f : 0.f;
                    float        *x = malloc((size_t)(t * k) * 4), *H = malloc((size_t)(k * k) * 4);
                    for (int64_t e = 0; e < t * k; e++)
                        x[e] = (float)((int)(lq_rng_uniform(&r) * 7) - 3);
                    for (int64_t e = 0; e < k * k; e++)
                        H[e] = acc ? (float)(4 * (e % 5)) : NAN;
                    if (impl)
                        lq_syrk512(k, t, alpha, x, beta, H, 2);
                    else
                        lq_ssyrk_upper(k, t, alpha, x, beta, H, 2);
                    for (int64_t i = 0; i < k; i++)
                        for (int64_t j = 0; j < k; j++) {
                            if (j < i) { /* lower: untouched off the diagonal blocks */
                                if (impl && j / 64 != i / 64)
                                    bad += acc ? H[i * k + j] != (float)(4 * ((i * k + j) % 5))
                                               : !isnan(H[i * k + j]);
                                continue;
                            }
                            double want = acc ? 0.25 * (double)(4 * ((i * k + j) % 5)) : 0.;
                            for (int64_t e = 0; e < t; e++)
                                want += (double)alpha * x[e * k + i] * x[e * k + j];
                            bad += H[i * k + j] != (float)want;
                        }
                    runs++;
                    free(x), free(H);
                }
    CHECK_MSG(bad == 0, "lq_ssyrk_upper / lq_syrk512: %d wrong entries over %d products", bad,
              runs);
}

/* lq_sgemm: every transpose pair, padded strides, alpha and beta, on the calling thread and
 * a team; exact on small integers against a double product, C's padding left alone */
static void test_sgemm(void) {
    static const int64_t ms[] = {1, 7, 48, 601}, ns[] = {1, 64, 65}, ks[] = {1, 64, 129};
    lq_rng               r;
    lq_rng_seed(&r, 13);
    int bad = 0, runs = 0;
    for (int ta = 0; ta <= 1; ta++)
        for (int tb = 0; tb <= 1; tb++)
            for (size_t a = 0; a < 3; a++)
                for (size_t b = 0; b < 3; b++)
                    for (size_t c = 0; c < 3; c++)
                        for (int nth = 1; nth <= 2; nth++) {
                            const int64_t m = ms[a], n = ns[b], k = ks[c];
                            const int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 2,
                                          ldc = n + 5;
                            const float alpha = nth == 1 ? 0.5f : -1.f, beta = nth == 1 ? 0.f : 2.f;
                            float      *A = malloc((size_t)((ta ? k : m) * lda) * 4);
                            float      *B = malloc((size_t)((tb ? n : k) * ldb) * 4);
                            float      *C = malloc((size_t)(m * ldc) * 4);
                            for (int64_t e = 0; e < (ta ? k : m) * lda; e++)
                                A[e] = (float)((int)(lq_rng_uniform(&r) * 7) - 3);
                            for (int64_t e = 0; e < (tb ? n : k) * ldb; e++)
                                B[e] = (float)((int)(lq_rng_uniform(&r) * 9) - 4);
                            for (int64_t e = 0; e < m * ldc; e++)
                                C[e] = beta != 0.f ? (float)(e % 3) : NAN;
                            lq_sgemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, nth);
                            for (int64_t i = 0; i < m; i++)
                                for (int64_t j = 0; j < ldc; j++) {
                                    const float was =
                                        beta != 0.f ? (float)((i * ldc + j) % 3) : NAN;
                                    if (j >= n) {
                                        bad += beta != 0.f ? C[i * ldc + j] != was
                                                           : !isnan(C[i * ldc + j]);
                                        continue;
                                    }
                                    double want = beta != 0.f ? (double)beta * was : 0.;
                                    for (int64_t e = 0; e < k; e++)
                                        want += (double)alpha *
                                                (ta ? A[e * lda + i] : A[i * lda + e]) *
                                                (tb ? B[j * ldb + e] : B[e * ldb + j]);
                                    bad += C[i * ldc + j] != (float)want;
                                }
                            runs++;
                            free(A), free(B), free(C);
                        }
    CHECK_MSG(bad == 0, "lq_sgemm: %d wrong entries over %d products", bad, runs);
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
/* the bytes lq_qlinear_sort adds by holding a GPTQ 3-bit linear 4 bits wide: a fourth word row
 * per 32 channels, and per group a fourth qzeros word per 32 columns */
static size_t widened_bytes(const lq_qlinear *w) {
    return w->bits == 3 ? (size_t)((w->k + lq_gptq_groups(w)) * w->n / 32 * 4) : 0;
}

/* lq_qlinear_sort: the sorted descriptor is the same matrix, independently of the kernels'
 * and oracles' own handling of perm (act-order cases of every width, with a bias). */
static void test_sort(void) {
    for (int ci = 0; ci < NCASES; ci++) {
        const kcase *c = &k_cases[ci];
        if (c->fmt != LQ_FMT_GPTQ || c->act_order != 1 || c->gs <= 0)
            continue;
        lq_qbuf qb;
        float  *dense;
        kcase   cc = *c;
        cc.bias    = 1;
        CHECK_OK(build(&cc, c->n, c->k, 0, 7100 + (uint64_t)ci, &qb, &dense));
        const lq_qlinear *w = &qb.q;
        const int64_t     n = w->n, k = w->k, m = 3;
        const size_t      sb = lq_qlinear_sort_bytes(w);
        CHECK_MSG(sb > 0, "%s: act-order but nothing to sort", c->name);
        void      *buf = lq_aligned_alloc(sb);
        lq_qlinear s, s2;
        CHECK_EQ_INT(lq_qlinear_sort(w, buf, sb - 1, &s), LQ_ERR_INVALID_ARG);
        CHECK_EQ_INT(lq_qlinear_sort(w, (char *)buf + 4, sb, &s), LQ_ERR_INVALID_ARG);
        CHECK_OK(lq_qlinear_sort(w, buf, sb, &s));
        int in_order = 1;
        for (int64_t p = 1; p < k; p++)
            in_order &= s.g_idx[p] >= s.g_idx[p - 1];
        CHECK_MSG(in_order, "%s: sorted g_idx out of order", c->name);
        CHECK_EQ_INT(lq_qlinear_sort_bytes(&s), 0); /* sorting again: nothing to do */
        CHECK_OK(lq_qlinear_sort(&s, NULL, 0, &s2));
        CHECK_MSG(s2.perm == s.perm && s2.qweight == s.qweight, "%s: resort moved", c->name);
        CHECK_EQ_INT(lq_qlinear_bytes(&s), lq_qlinear_bytes(w) + (size_t)k * 4 + widened_bytes(w));
        CHECK_EQ_INT(s.bits, w->bits == 3 ? 4 : w->bits);
        /* the same weights, bit for bit, from the plain oracle of each */
        float *a = malloc((size_t)(n * k) * 4), *b = malloc((size_t)(n * k) * 4);
        lq_format_traits_get(LQ_FMT_GPTQ)->dequant_ref(w, a);
        lq_format_traits_get(LQ_FMT_GPTQ)->dequant_ref(&s, b);
        CHECK_MSG(!memcmp(a, b, (size_t)(n * k) * 4), "%s: sorted dequant_ref differs at %lld",
                  c->name, (long long)first_diff(a, b, n * k));
        CHECK_OK(lq_qlinear_dequant_cpu(&s, b, 0));
        CHECK_MSG(!memcmp(a, b, (size_t)(n * k) * 4), "%s: sorted dequant_cpu differs at %lld",
                  c->name, (long long)first_diff(a, b, n * k));
        /* forwards of the two within float rounding of the sum order */
        float *x = malloc((size_t)(m * k) * 4), *y0 = malloc((size_t)(m * n) * 4),
              *y1 = malloc((size_t)(m * n) * 4);
        make_x(&cc, w, m, 0, 11, x);
        const size_t w0 = lq_qlinear_workspace_cpu(w, m), w1 = lq_qlinear_workspace_cpu(&s, m);
        void        *ws = lq_aligned_alloc(w0 > w1 ? w0 : w1);
        CHECK_OK(lq_qlinear_forward_cpu(w, x, m, y0, ws, w0, 0));
        CHECK_EQ_INT(lq_qlinear_forward_cpu(&s, x, m, y1, ws, w1 - 1, 0), LQ_ERR_INVALID_ARG);
        CHECK_OK(lq_qlinear_forward_cpu(&s, x, m, y1, ws, w1, 0));
        const double e = nmse(y1, y0, m * n);
        CHECK_MSG(e < 1e-10, "%s: sorted forward NMSE %.3g vs unsorted", c->name, e);
        /* a perm entry out of range is refused, not read */
        int32_t *pm   = (int32_t *)buf + (s.perm - (const int32_t *)buf); /* writable: in buf */
        int32_t  keep = pm[k / 2];
        pm[k / 2]     = (int32_t)k;
        CHECK_EQ_INT(lq_qlinear_forward_cpu(&s, x, m, y1, ws, w1, 0), LQ_ERR_INVALID_ARG);
        CHECK_EQ_INT(lq_qlinear_dequant_cpu(&s, b, 0), LQ_ERR_INVALID_ARG);
        pm[k / 2] = keep;
        /* only GPTQ has an input order: perm elsewhere is a malformed descriptor */
        lq_qlinear bad = s;
        bad.format     = LQ_FMT_AWQ;
        CHECK_EQ_INT(lq_qlinear_check(&bad, NULL), LQ_ERR_INVALID_ARG);
        lq_aligned_free(ws);
        free(x);
        free(y0);
        free(y1);
        free(a);
        free(b);
        lq_aligned_free(buf);
        free(dense);
        lq_qbuf_free(&qb);
    }
    /* AWQ repacked into GPTQ's layout, GPTQ 3-bit in order held as 4-bit codes: the same matrix
     * bit for bit, the same integer-activation results bit for bit (the same blocks) */
    for (int ci = 0; ci < NCASES; ci++) {
        const kcase *c = &k_cases[ci];
        if ((c->fmt != LQ_FMT_AWQ && !(c->fmt == LQ_FMT_GPTQ && c->bits == 3)) || c->act_order)
            continue;
        lq_qbuf qb;
        float  *dense;
        CHECK_OK(build(c, c->n, c->k, 0, 7300 + (uint64_t)ci, &qb, &dense));
        const lq_qlinear *w = &qb.q;
        const int64_t     n = w->n, k = w->k;
        const size_t      sb = lq_qlinear_sort_bytes(w);
        CHECK_MSG(sb > 0, "%s: not repacked", c->name);
        void      *buf = lq_aligned_alloc(sb);
        lq_qlinear s, s2;
        CHECK_OK(lq_qlinear_sort(w, buf, sb, &s));
        CHECK_EQ_INT(s.format, LQ_FMT_GPTQ);
        CHECK_OK(lq_qlinear_check(&s, NULL));
        CHECK_EQ_INT(lq_qlinear_sort_bytes(&s), 0);
        CHECK_OK(lq_qlinear_sort(&s, NULL, 0, &s2));
        CHECK_MSG(s2.qweight == s.qweight && s2.format == LQ_FMT_GPTQ, "%s: resort moved", c->name);
        CHECK_EQ_INT(s.bits, 4);
        const size_t more = c->fmt == LQ_FMT_AWQ ? (size_t)k * 4 : widened_bytes(w); /* + g_idx */
        CHECK_EQ_INT(lq_qlinear_bytes(&s), lq_qlinear_bytes(w) + more);
        float *a = malloc((size_t)(n * k) * 4), *b = malloc((size_t)(n * k) * 4);
        lq_format_traits_get(c->fmt)->dequant_ref(w, a);
        lq_format_traits_get(LQ_FMT_GPTQ)->dequant_ref(&s, b);
        CHECK_MSG(!memcmp(a, b, (size_t)(n * k) * 4), "%s: repacked dequant_ref differs at %lld",
                  c->name, (long long)first_diff(a, b, n * k));
        CHECK_OK(lq_qlinear_dequant_cpu(&s, b, 0));
        CHECK_MSG(!memcmp(a, b, (size_t)(n * k) * 4), "%s: repacked dequant_cpu differs at %lld",
                  c->name, (long long)first_diff(a, b, n * k));
        static const int64_t ms[] = {1, 2, 3, 4, 5, 8, 37};
        for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
            const int64_t m = ms[mi];
            float        *x = malloc((size_t)(m * k) * 4), *y0 = malloc((size_t)(m * n) * 4),
                  *y1 = malloc((size_t)(m * n) * 4);
            make_x(c, w, m, 0, 13 + (uint64_t)mi, x);
            for (unsigned fl = 0; fl <= LQ_QLINEAR_INT_X; fl++) {
                const size_t w0 = lq_qlinear_workspace_cpu_ex(w, m, fl),
                             w1 = lq_qlinear_workspace_cpu_ex(&s, m, fl);
                void *ws        = lq_aligned_alloc(w0 > w1 ? w0 : w1);
                CHECK_OK(lq_qlinear_forward_cpu_ex(w, x, m, y0, ws, w0, 0, fl));
                CHECK_OK(lq_qlinear_forward_cpu_ex(&s, x, m, y1, ws, w1, 0, fl));
                /* integer activations where both layouts have them (int8 either way): the same
                 * bits where both kernels sum in the semantics' order (else within 1e-10, as
                 * tol_nmse_qx_ref); else (a CPU with a kernel for one layout only) their NMSE
                 * bound */
                const lq_format_traits *ta = lq_format_traits_get(c->fmt),
                                       *tg = lq_format_traits_get(LQ_FMT_GPTQ);
                const int qa               = fl && ta->quantizes_x_cpu(w, m, fl),
                          qg               = fl && tg->quantizes_x_cpu(&s, m, fl);
                const int same             = qa == qg;
                if (qa && same && ta->tol_nmse_qx_ref == 0 && tg->tol_nmse_qx_ref == 0)
                    CHECK_MSG(!memcmp(y0, y1, (size_t)(m * n) * 4),
                              "%s m=%lld: repacked int-x forward differs at %lld", c->name,
                              (long long)m, (long long)first_diff(y0, y1, m * n));
                const double e = nmse(y1, y0, m * n), tol = same ? 1e-10 : tg->tol_nmse_qx;
                CHECK_MSG(e < tol, "%s m=%lld flags %u: repacked forward NMSE %.3g", c->name,
                          (long long)m, fl, e);
                lq_aligned_free(ws);
            }
            free(x);
            free(y0);
            free(y1);
        }
        lq_qlinear bad = *w; /* AWQ has no input order */
        bad.perm       = s.g_idx;
        if (c->fmt == LQ_FMT_AWQ)
            CHECK_EQ_INT(lq_qlinear_check(&bad, NULL), LQ_ERR_INVALID_ARG);
        free(a);
        free(b);
        lq_aligned_free(buf);
        free(dense);
        lq_qbuf_free(&qb);
    }
    /* a plain layout has nothing to sort and is returned as it is */
    lq_qbuf qb;
    float  *dense;
    CHECK_OK(build(&k_cases[2], k_cases[2].n, k_cases[2].k, 0, 7200, &qb, &dense));
    lq_qlinear s;
    CHECK_EQ_INT(lq_qlinear_sort_bytes(&qb.q), 0);
    CHECK_OK(lq_qlinear_sort(&qb.q, NULL, 0, &s));
    CHECK_MSG(!memcmp(&s, &qb.q, sizeof s), "plain layout changed by lq_qlinear_sort");
    CHECK_EQ_INT(lq_qlinear_sort(&qb.q, NULL, 0, NULL), LQ_ERR_INVALID_ARG);
    free(dense);
    lq_qbuf_free(&qb);
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

/* ---------------------------------------------------------------------------------------------
 * Backend cuda (ctest kernels_gpu, label gpu: test_kernels -b cuda)
 *
 * Every format x widths x shapes x batch rows, fixed seeds printed on failure:
 *  (a) exact mode (lq_test_qlinear.h): small-integer codes/zeros/activations, power-of-2 scales,
 *      NF4 tables of halves and 127/16. Every product, and every partial sum in any order, is a
 *      multiple of the smallest scale below 2^24 of it (NF4, whose activations hold a +-127
 *      in every 64: at the sizes tested, where its sums stay below 2^17), so the fp32
 *      accumulations of the GEMV kernels and of cuBLAS (tensor cores, fp32 compute) and the
 *      reference's double sum all produce the same exact real number; its rounding to fp16 is
 *      then the same on both sides: bit-identical outputs. (LLM.int8: the int8 part is integer
 *      arithmetic, the scaling uses the reference's float operations in its order, the fp16
 *      outlier part is summed in double on both sides.)
 *  (b) random mode: NMSE of the fp16 output vs the reference (fed the same fp16-rounded
 *      activations) <= the format's tol_nmse.
 *  Dequant (W -> fp16) is bit-identical in both modes: the device computes the same float
 *  expression and rounds it to fp16 like the host conversion of the reference.
 * Without a device (or in a build without CUDA) the API contract is checked, then SKIP. */
/* A valid host descriptor for the API-contract checks. */
static int contract_case(lq_qbuf *qb, float **dense) {
    return build(&k_cases[2], k_cases[2].n, k_cases[2].k, 1, 1, qb, dense) == LQ_OK;
}

/* Argument checks that come before any device work (so they hold in every build, with or
 * without a device): 16-byte alignment of x / y / ws and no overlap between them. */
static void cuda_api_validation(void) {
    lq_qbuf qb;
    float  *dense = NULL;
    CHECK(contract_case(&qb, &dense));
    const lq_qlinear           *w = &qb.q;
    const int64_t               m = 2;
    _Alignas(16) static uint8_t pool[1 << 16];
    uint8_t                    *x = pool, *y = pool + 16384, *ws = pool + 32768;
    CHECK(m * w->k * 2 <= 16384 && m * w->n * 2 <= 16384);
    const size_t wsb = 32768;
    struct {
        const void *x;
        void       *y, *ws;
        const char *what;
    } bad[] = {
        {x + 2, y, ws, "x misaligned"},  {x, y + 8, ws, "y misaligned"},
        {x, y, ws + 4, "ws misaligned"}, {x, x + 16, ws, "y inside x"},
        {x, y, y - 16, "ws overlaps y"}, {ws + 16, y, ws, "x inside ws"},
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
static int cuda_backend(const char *fmt) {
    (void)fmt;
    cuda_api_validation();
    int count = -1;
    CHECK_OK(lq_cuda_device_count(&count));
    CHECK_EQ_INT(count, 0);
    lq_qbuf qb;
    float  *dense = NULL;
    CHECK(contract_case(&qb, &dense));
    _Alignas(16) static uint16_t buf[256], ybuf[256];
    lq_cuda_ctx                 *ctx = NULL;
    lq_err                       err = {0};
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

/* the one case also run with a 4096-row batch (cuBLAS path at scale) */
/* batch sizes past k_ms where the CUDA paths change: GPTQ at 4096 rows; bf16 dense weights at
 * the last row of the hi/lo split (256) and past it (converted to fp16) */
static const struct {
    kcase   c;
    int64_t m;
} k_big_m[] = {
    {{"gptq4_g128_m4096", LQ_FMT_GPTQ, 4, 128, 256, 128, 1, 0, 0, 0, 1, 0}, 4096},
    {{"dense_bf16_m256", LQ_FMT_DENSE, 0, 64, 256, 0, 0, 0, 0, 0, 1, LQ_DENSE_BF16}, 256},
    {{"dense_bf16_m300", LQ_FMT_DENSE, 0, 64, 256, 0, 0, 0, 0, 0, 1, LQ_DENSE_BF16}, 300},
};

#define CU(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* first index where the fp16 result differs from the reference rounded to fp16 (+0 == -0) */
static int64_t first_diff_f16(const uint16_t *got, const float *ref, int64_t cnt) {
    for (int64_t e = 0; e < cnt; e++) {
        const uint16_t r = lq_f32_to_f16(ref[e]);
        if (got[e] != r && !(((got[e] | r) & 0x7fffu) == 0))
            return e;
    }
    return -1;
}

static void run_case_cuda(lq_cuda_ctx *ctx, const kcase *c, const int64_t *ms, int nms, int exact,
                          uint64_t seed) {
    const int64_t n = c->n, k = c->k;
    const char   *mode = exact ? "exact" : "random";
    lq_qbuf       qb;
    float        *dense = NULL;
    if (build(c, n, k, exact, seed, &qb, &dense) != LQ_OK) {
        CHECK_MSG(0, "%s: build failed (seed %llu)", c->name, (unsigned long long)seed);
        return;
    }
    const lq_format_traits *t       = lq_format_traits_get((lq_format)qb.q.format);
    lq_qlinear hq      = qb.q; /* what gets uploaded: dense float32 as fp16 */
    uint16_t  *dense_h = NULL;
    if (c->fmt == LQ_FMT_DENSE && c->dense_dt == LQ_DENSE_F32) {
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

static int cuda_backend(const char *fmt) {
    int count = -1;
    CHECK_OK(lq_cuda_device_count(&count));
    CHECK(count >= 0);
    lq_cuda_ctx *ctx = NULL;
    lq_err       err = {0};
    cuda_api_validation();
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
        if (!want(fmt, c->name))
            continue;
        for (int exact = 1; exact >= 0; exact--) {
            const uint64_t seed   = 1000u + (uint64_t)ci * 17u + (uint64_t)exact;
            const int      before = lq_test_failures_;
            run_case_cuda(ctx, c, k_ms, nms, exact, seed);
            printf("  %-28s %-6s %s\n", c->name, exact ? "exact" : "random",
                   lq_test_failures_ == before ? "ok" : "FAILED");
        }
    }
    for (size_t i = 0; i < sizeof k_big_m / sizeof k_big_m[0]; i++)
        for (int exact = 1; exact >= 0 && want(fmt, k_big_m[i].c.name); exact--) {
            const int before = lq_test_failures_;
            run_case_cuda(ctx, &k_big_m[i].c, &k_big_m[i].m, 1, exact, 4242 + 2 * i + !exact);
            printf("  %-28s %-6s %s\n", k_big_m[i].c.name, exact ? "exact" : "random",
                   lq_test_failures_ == before ? "ok" : "FAILED");
        }
    lq_cuda_ctx_free(ctx);
    return lq_test_end("kernels_gpu");
}
#endif

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
            fprintf(stderr, "usage: %s [-f FMT[,FMT...]] [-b cpu|cuda] [-v] [perf]\n", argv[0]);
            return 2;
        }
    }
    if (o.perf) {
        perf(&o);
        return 0;
    }
    if (o.backend && !strcmp(o.backend, "cuda"))
        return cuda_backend(o.fmt);
    if (!o.fmt) {
        test_layouts();
        test_f16_fast();
        test_gidx_plain();
        test_gemm512();
        test_gemm_bf16x();
        test_syrk();
        test_sgemm();
        test_validation();
        test_sort();
    }
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
        /* 300 rows: fp16 / bf16 weights in two row blocks of the GEMMs (lq_gemm256,
         * lq_gemm512), and sgemm on converted tiles where there is no AVX2; LLM.int8 with a runtime
         * threshold past one 256-row chunk of the AVX-512 VNNI path, whose outlier columns are
         * the whole call's */
        if ((c->fmt == LQ_FMT_DENSE && c->dense_dt != LQ_DENSE_F32) ||
            (c->fmt == LQ_FMT_INT8 && c->threshold > 0.f))
            for (int exact = 1; exact >= 0; exact--)
                run_case(c, c->n, c->k, 300, exact, 4000 + (uint64_t)ci * 2 + exact, &o);
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
        /* NF4 on integer activations with AVX2 from 16 rows: row chunks of 255, the last one
         * ending in a group of 2 rows */
        if (c->fmt == LQ_FMT_NF4)
            for (int exact = 1; exact >= 0; exact--)
                run_case(c, c->n, c->k, 302, exact, 7000 + (uint64_t)ci * 2 + exact, &o);
    report:
        printf("%-28s cpu %s\n", c->name, lq_test_failures_ == before ? "OK" : "FAIL");
    }
    return lq_test_end("test_kernels");
}
