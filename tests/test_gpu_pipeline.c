/* The pipeline's GPU side bound to the CPU path (quant/gpu/lq_gpu.h):
 *   - without a device: device count 0, opening fails with the right code (always runs);
 *   (the calibration forwards' ops, SYRK included, are test_ops -b cuda's and
 *   test_forward_be -b cuda's);
 *   - GPTQ on the GPU vs lq_gptq on the CPU over bits / groups / act-order / static groups /
 *     sym: >= 99% identical codes (the rest differ by one step where fp32 rounding of the
 *     error feedback crosses a rounding boundary), proxy loss within 1%;
 *   - a singular Hessian takes the damping retry on the GPU too;
 *   - the forward's linears on the kernels' CUDA row (lq_gpu_qlinear): dense with a bias vs
 *     OpenBLAS within fp16 rounding;
 *   - end to end: `llmquant gptq --device cuda` vs `--device cpu` perplexity within 1%, and
 *     `llmquant ppl --device cuda` (every layer on the CUDA kernels, fp16 activations) vs
 *     `--device cpu` within 0.5% for the original model and its rtn, gptq, awq, nf4 and int8
 *     conversions.
 * Seeds are fixed and printed on failure. Exit 77 (SKIP) after the no-device checks when no
 * CUDA device is present. */
#include "lq_dtype.h"
#include "lq_gpu.h"
#include "lq_quant.h"
#include "lq_test.h"

#include <cblas.h>
#include <lapacke.h>
#include <stdint.h>
#include <unistd.h>

static void rand_inputs(lq_rng *r, float *X, int64_t t, int64_t k) {
    /* correlated channels with a few outliers, as calibration activations are */
    for (int64_t i = 0; i < t; i++) {
        float common = lq_rng_normal(r);
        for (int64_t c = 0; c < k; c++) {
            float v      = 0.6f * common + lq_rng_normal(r);
            X[i * k + c] = c % 17 == 3 ? 8.f * v : v;
        }
    }
}

/* sum (a - b)^2 / sum a^2 */
static double nmse(const float *a, const float *b, int64_t count) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < count; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)a[i] * a[i];
    }
    return num / den;
}

typedef struct gcase {
    int     bits;
    int64_t group;
    int     act_order, static_groups, sym;
} gcase;

static void warn_count(void *user, const char *msg) {
    (void)msg;
    ++*(int *)user;
}

static void test_gptq(lq_gpu *g, uint64_t seed, int64_t n, int64_t k, gcase c, int singular) {
    lq_rng r;
    lq_rng_seed(&r, seed);
    int64_t t = 4 * k;
    float  *X = malloc((size_t)(t * k) * sizeof(float));
    float  *W = malloc((size_t)(n * k) * sizeof(float));
    rand_inputs(&r, X, t, k);
    for (int64_t i = 0; i < n * k; i++)
        W[i] = 0.05f * lq_rng_normal(&r);
    lq_xstats st;
    lq_err    err = {0};
    CHECK_OK(lq_xstats_init(&st, k, LQ_XS_HESSIAN, &err));
    lq_xstats_add(&st, X, t, 1);
    lq_xstats_finish(&st);
    if (singular) {
        /* Move the smallest eigenvalue to -5% of the mean diagonal: indefinite at damp 0.01,
         * positive definite after the first retry (0.1) -- on both backends. */
        double mean = 0;
        for (int64_t i = 0; i < k; i++)
            mean += st.H[i * k + i];
        mean /= (double)k;
        float *A = malloc((size_t)(k * k) * sizeof(float)), *ev = malloc((size_t)k * 4);
        memcpy(A, st.H, (size_t)(k * k) * sizeof(float));
        CHECK_EQ_INT(LAPACKE_ssyev(LAPACK_ROW_MAJOR, 'N', 'U', (lapack_int)k, A, (lapack_int)k, ev),
                     0);
        double shift = ev[0] + 0.05 * mean;
        for (int64_t i = 0; i < k; i++)
            st.H[i * k + i] -= (float)shift;
        free(A), free(ev);
    }

    int64_t  G  = lq_num_groups(k, c.group);
    float   *W2 = malloc((size_t)(n * k) * sizeof(float));
    float   *H2 = malloc((size_t)(k * k) * sizeof(float));
    float   *H1 = malloc((size_t)(k * k) * sizeof(float));
    uint8_t *q1 = malloc((size_t)(n * k)), *q2 = malloc((size_t)(n * k));
    float   *s1 = malloc((size_t)(G * n) * sizeof(float)), *s2 = malloc((size_t)(G * n) * 4);
    int32_t *z1 = malloc((size_t)(G * n) * 4), *z2 = malloc((size_t)(G * n) * 4);
    int32_t *g1 = malloc((size_t)k * 4), *g2 = malloc((size_t)k * 4);
    memcpy(W2, W, (size_t)(n * k) * sizeof(float));
    memcpy(H1, st.H, (size_t)(k * k) * sizeof(float));
    memcpy(H2, st.H, (size_t)(k * k) * sizeof(float));
    int             nw1 = 0, nw2 = 0;
    lq_gptq_opts    o = {.q             = {c.bits, c.group, c.sym, 1},
                         .act_order     = c.act_order,
                         .static_groups = c.static_groups,
                         .damp          = 0.01,
                         .damp_retries  = 8,
                         .block_size    = 128,
                         .name          = "test",
                         .warn          = warn_count,
                         .warn_user     = &nw1};
    lq_gptq_result  r1, r2;
    lq_gptq_backend be;
    lq_gpu_gptq_backend(g, &be);
    CHECK_OK(lq_gptq(W, H1, n, k, &o, q1, s1, z1, g1, &r1, &err));
    o.warn_user = &nw2;
    lq_status s = lq_gptq_ex(W2, H2, n, k, &o, &be, q2, s2, z2, g2, &r2, &err);
    CHECK_MSG(s == LQ_OK, "seed %llu: GPU GPTQ failed: %s", (unsigned long long)seed, err.msg);
    if (s == LQ_OK) {
        int64_t same = 0, far = 0;
        for (int64_t i = 0; i < n * k; i++) {
            same += q1[i] == q2[i];
            far += abs((int)q1[i] - (int)q2[i]) > 1;
        }
        double frac = (double)same / (double)(n * k);
        CHECK_MSG(frac >= 0.99 && far * 1000 <= n * k,
                  "seed %llu n %lld k %lld bits %d group %lld act %d static %d sym %d: %.4f of "
                  "codes equal, %lld differ by more than one step",
                  (unsigned long long)seed, (long long)n, (long long)k, c.bits, (long long)c.group,
                  c.act_order, c.static_groups, c.sym, frac, (long long)far);
        CHECK_MSG(fabs(r1.loss - r2.loss) <= 0.01 * fabs(r1.loss) + 1e-9,
                  "seed %llu: loss CPU %.6g GPU %.6g", (unsigned long long)seed, r1.loss, r2.loss);
        CHECK_EQ_INT(memcmp(g1, g2, (size_t)k * 4), 0);
        CHECK_EQ_INT(r2.retries, r1.retries);
        if (singular)
            CHECK_MSG(nw1 > 0 && nw2 > 0 && r2.retries > 0,
                      "seed %llu: no damping retry (cpu %d warnings, gpu %d)",
                      (unsigned long long)seed, nw1, nw2);
    }
    lq_xstats_free(&st);
    free(X), free(W), free(W2), free(H1), free(H2), free(q1), free(q2);
    free(s1), free(s2), free(z1), free(z2), free(g1), free(g2);
}

/* y = x W^T + b through lq_gpu_qlinear (fp16 weights, activations and bias on the device) vs
 * OpenBLAS on the same fp16-rounded inputs: what is left is fp16 output rounding and the order
 * of the fp32 sums. */
static void test_qlinear_dense(lq_gpu *g, uint64_t seed, int64_t n, int64_t k, int64_t t) {
    lq_rng r;
    lq_rng_seed(&r, seed);
    float    *W = malloc((size_t)(n * k) * 4), *x = malloc((size_t)(t * k) * 4);
    float    *y1 = malloc((size_t)(t * n) * 4), *y2 = malloc((size_t)(t * n) * 4);
    uint16_t *b  = malloc((size_t)n * 2);
    for (int64_t i = 0; i < n * k; i++)
        W[i] = lq_f16_to_f32(lq_f32_to_f16(lq_rng_normal(&r)));
    for (int64_t i = 0; i < t * k; i++)
        x[i] = lq_f16_to_f32(lq_f32_to_f16(lq_rng_normal(&r)));
    for (int64_t i = 0; i < n; i++)
        b[i] = lq_f32_to_f16(lq_rng_normal(&r));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)t, (int)n, (int)k, 1.f, x, (int)k, W,
                (int)k, 0.f, y1, (int)n);
    for (int64_t i = 0; i < t * n; i++)
        y1[i] += lq_f16_to_f32(b[i % n]);
    lq_qlinear w = {.format = LQ_FMT_DENSE, .n = n, .k = k, .dense = W, .bias = b};
    lq_err     err = {0};
    CHECK_OK(lq_gpu_qlinear(g, &w, x, t, y2, &err));
    const double e = nmse(y1, y2, t * n);
    CHECK_MSG(e < 1e-6, "seed %llu %lldx%lld t %lld: qlinear NMSE %.3g",
              (unsigned long long)seed, (long long)n, (long long)k, (long long)t, e);
    free(W), free(x), free(y1), free(y2), free(b);
}

static double ppl_of(const char *bin, const char *out, const char *device) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "'%s' ppl '%s' --data '%s/data/tinystories/tinystories_sample.txt' "
             "--quiet --json --device %s --tokenizer '%s/models/stories260K/llama2c/tok512.bin'",
             bin, out, getenv("LQ_SHARED"), device, getenv("LQ_SHARED"));
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    char   buf[8192];
    size_t len = fread(buf, 1, sizeof buf - 1, p);
    buf[len]   = 0;
    pclose(p);
    const char *k = strstr(buf, "\"ppl\":");
    return k ? atof(k + 6) : -1;
}

static void test_e2e(void) {
    const char *bin = getenv("LQ_BIN"), *sh = getenv("LQ_SHARED"), *tmp = getenv("LQ_TMP");
    if (!bin || !sh || !tmp) {
        printf("e2e part skipped: LQ_BIN/LQ_SHARED/LQ_TMP not set\n");
        return;
    }
    double      ppl[2];
    const char *dev[2] = {"cpu", "cuda"};
    /* WikiText-2 when the shared data is there, else the TinyStories text every layout has */
    char calib[4096];
    snprintf(calib, sizeof calib, "%s/data/wikitext2/wiki.valid.tokens", sh);
    if (access(calib, R_OK) != 0)
        snprintf(calib, sizeof calib, "%s/data/tinystories/tinystories_sample.txt", sh);
    for (int i = 0; i < 2; i++) {
        char out[2048], cmd[8192];
        snprintf(out, sizeof out, "%s/gpu_pipeline_%s_%d", tmp, dev[i], (int)getpid());
        snprintf(cmd, sizeof cmd,
                 "mkdir -p '%s' && '%s' gptq '%s/models/stories260K' -o '%s' --force --quiet "
                 "--device %s --bits 4 --group-size 32 --desc-act --nsamples 16 --seqlen 256 "
                 "--calib '%s' --tokenizer '%s/models/stories260K/llama2c/tok512.bin'",
                 tmp, bin, sh, out, dev[i], calib, sh);
        int rc = system(cmd);
        CHECK_MSG(rc == 0, "%s failed (%d)", cmd, rc);
        ppl[i] = ppl_of(bin, out, "cpu");
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", out);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", out);
    }
    printf("stories260K gptq w4 g32 act-order: ppl cpu %.4f, cuda %.4f\n", ppl[0], ppl[1]);
    CHECK_MSG(ppl[0] > 1 && ppl[1] > 1 && fabs(ppl[1] - ppl[0]) <= 0.01 * ppl[0],
              "ppl cpu %.4f vs cuda %.4f", ppl[0], ppl[1]);

    /* perplexity on the CUDA kernels: the original model, then one conversion per format */
    const char *conv[] = {NULL, "rtn --group-size 32", "gptq --group-size 32",
                          "awq --group-size 32", "nf4", "int8"};
    const int   calibrated[] = {0, 0, 1, 1, 0, 1};
    for (size_t i = 0; i < sizeof conv / sizeof conv[0]; i++) {
        char out[2048], cmd[8192];
        snprintf(out, sizeof out, "%s/models/stories260K", sh);
        if (conv[i]) {
            char cal[6144] = "";
            if (calibrated[i])
                snprintf(cal, sizeof cal,
                         "--nsamples 8 --seqlen 128 --calib '%s' "
                         "--tokenizer '%s/models/stories260K/llama2c/tok512.bin'",
                         calib, sh);
            snprintf(out, sizeof out, "%s/gpu_ppl_%d_%d", tmp, (int)i, (int)getpid());
            snprintf(cmd, sizeof cmd,
                     "mkdir -p '%s' && '%s' %s '%s/models/stories260K' -o '%s' --force --quiet "
                     "--device cpu %s",
                     tmp, bin, conv[i], sh, out, cal);
            int rc = system(cmd);
            CHECK_MSG(rc == 0, "%s failed (%d)", cmd, rc);
        }
        const double pc = ppl_of(bin, out, "cpu"), pg = ppl_of(bin, out, "cuda");
        printf("stories260K %s: ppl --device cpu %.4f, cuda %.4f (%+.3f%%)\n",
               conv[i] ? conv[i] : "original", pc, pg, 100.0 * (pg - pc) / pc);
        CHECK_MSG(pc > 1 && pg > 1 && fabs(pg - pc) <= 0.005 * pc, "%s: ppl cpu %.4f vs cuda %.4f",
                  conv[i] ? conv[i] : "original", pc, pg);
        if (conv[i]) {
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", out);
            if (system(cmd) != 0)
                fprintf(stderr, "could not remove %s\n", out);
        }
    }
}

int main(void) {
    lq_err  err = {0};
    lq_gpu *g   = NULL;
    int     n   = lq_gpu_device_count();
    if (n == 0) {
        lq_status s = lq_gpu_open(0, &g, &err);
        CHECK_EQ_INT(s, lq_cuda_built() ? LQ_ERR_NO_DEVICE : LQ_ERR_NO_CUDA_BUILD);
        CHECK(g == NULL);
        CHECK(strlen(err.msg) > 0);
        if (lq_test_end("gpu_pipeline (no device)") != 0)
            return 1;
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    CHECK_OK(lq_gpu_open(0, &g, &err));
    if (!g)
        return lq_test_end("gpu_pipeline");
    printf("device: %s\n", lq_gpu_describe(g));
    test_qlinear_dense(g, 7, 172, 64, 3);    /* the fused kernel */
    test_qlinear_dense(g, 8, 1000, 576, 77); /* cuBLAS with the bias rounded once */
    const gcase cases[] = {
        {4, 128, 0, 0, 1}, {4, 128, 1, 0, 1}, {4, 32, 1, 1, 0},  {3, 64, 0, 0, 0},
        {2, -1, 1, 0, 0},  {8, 128, 0, 0, 1}, {4, 256, 1, 0, 0}, {4, 48, 0, 0, 1},
    };
    uint64_t seed = 100;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        test_gptq(g, seed++, 96, 512, cases[i], 0);
    test_gptq(g, seed++, 256, 1000, cases[1], 0);  /* k not a multiple of the block */
    test_gptq(g, seed++, 64, 256, cases[0], 1);    /* indefinite H: damping retry */
    test_gptq(g, seed++, 4096, 4096, cases[1], 0); /* real size */
    lq_gpu_close(g);
    test_e2e();
    return lq_test_end("gpu_pipeline");
}
