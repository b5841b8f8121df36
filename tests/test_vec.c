/* The model forward's vector functions (lq_kernels.h lq_vec_ops): the table this CPU gets
 * against the scalar references, on random rows and on the edges (one element, tails, masks,
 * underflow, large arguments). */
#include "lq_kernels.h"
#include "lq_test.h"

#include <stdint.h>

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float    urand(float lo, float hi) {
       rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
       return lo + (hi - lo) * (float)((rng >> 40) * (1.0 / 16777216.0));
}

/* |a - b| <= rel * |b|, or both below the smallest normal float (the exp underflows alike) */
static int close_rel(float a, float b, double rel) {
    if (fabsf(b) < 1.2e-38f)
        return fabsf(a) < 1.2e-38f;
    return fabs((double)a - (double)b) <= rel * fabs((double)b);
}

static void check_softmax(const lq_vec_ops *v, int64_t n, int64_t lo, int64_t hi, float spread) {
    float *a = malloc((size_t)n * sizeof(float)), *b = malloc((size_t)n * sizeof(float));
    for (int64_t j = 0; j < n; j++)
        a[j] = b[j] = urand(-spread, spread);
    v->softmax_row(a, n, lo, hi);
    lq_vec_ops_ref.softmax_row(b, n, lo, hi);
    int    bad = 0, outside = 0;
    double sum = 0;
    for (int64_t j = 0; j < n; j++) {
        if (j < lo || j > hi)
            outside += a[j] != 0.f;
        else
            bad += !close_rel(a[j], b[j], 1e-6), sum += a[j];
    }
    CHECK_MSG(bad == 0, "softmax n=%lld lo=%lld hi=%lld spread %g: %d values off", (long long)n,
              (long long)lo, (long long)hi, (double)spread, bad);
    CHECK_MSG(outside == 0, "softmax n=%lld: %d non-zero outside [lo, hi]", (long long)n, outside);
    CHECK_NEAR(sum, 1.0, 1e-5);
    free(a), free(b);
}

static void check_silu(const lq_vec_ops *v, int64_t n, float spread) {
    /* calloc: GCC from -O1 cannot see the loop below fill every element */
    float *x = calloc((size_t)n, sizeof(float)), *u = calloc((size_t)n, sizeof(float)),
          *a = malloc((size_t)n * sizeof(float)), *b = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        x[i] = urand(-spread, spread), u[i] = urand(-2.f, 2.f);
    v->silu_mul(a, x, u, n);
    lq_vec_ops_ref.silu_mul(b, x, u, n);
    int bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += !close_rel(a[i], b[i], 1e-6) && fabsf(a[i] - b[i]) > 1e-37f;
    CHECK_MSG(bad == 0, "silu_mul n=%lld spread %g: %d values off", (long long)n, (double)spread,
              bad);
    v->silu_mul(x, x, u, n); /* in place, as the forward calls it */
    CHECK(memcmp(x, a, (size_t)n * sizeof(float)) == 0);
    free(x), free(u), free(a), free(b);
}

int main(void) {
    const lq_vec_ops *v = lq_vec_ops_get();
    const char       *e = getenv("LQ_CPU_KERNELS");
    if (e && !strcmp(e, "portable"))
        CHECK(v == &lq_vec_ops_ref);
    printf("vector functions: %s\n",
           v == &lq_vec_ops_ref ? "scalar references" : "AVX-512 or AVX2");
    for (int64_t n = 1; n <= 70; n++)
        for (int64_t lo = 0; lo < n; lo += 1 + n / 5)
            for (int64_t hi = lo; hi < n; hi += 1 + n / 4)
                check_softmax(v, n, lo, hi, 8.f);
    for (int i = 0; i < 20; i++) { /* attention rows: long, causal and sliding-window masks */
        const int64_t n = 2048, hi = (int64_t)urand(0.f, 2047.f), lo = i % 2 ? hi / 2 : 0;
        check_softmax(v, n, lo, hi, i < 10 ? 10.f : 200.f); /* 200: most terms underflow */
    }
    { /* one dominant score: the others' exp(x - max) underflow to exact zeros */
        float a[33], b[33];
        for (int j = 0; j < 33; j++)
            a[j] = b[j] = j == 17 ? 1000.f : (float)-j;
        v->softmax_row(a, 33, 0, 32);
        lq_vec_ops_ref.softmax_row(b, 33, 0, 32);
        CHECK(memcmp(a, b, sizeof a) == 0);
        CHECK(a[17] == 1.f);
    }
    { /* a NaN score (a broken model) poisons its row, as libm's expf does */
        float a[20];
        for (int j = 0; j < 20; j++)
            a[j] = (float)j;
        a[7] = NAN;
        v->softmax_row(a, 20, 2, 18);
        int nans = 0;
        for (int j = 2; j <= 18; j++)
            nans += isnan(a[j]) != 0;
        CHECK_EQ_INT(nans, 17);
        float x[3] = {1.f, NAN, -2.f}, u[3] = {1.f, 1.f, 1.f}, g[3];
        v->silu_mul(g, x, u, 3);
        CHECK(isnan(g[1]) && !isnan(g[0]) && !isnan(g[2]));
    }
    for (int64_t n = 1; n <= 40; n++)
        check_silu(v, n, 6.f);
    check_silu(v, 4099, 20.f);
    check_silu(v, 4099, 120.f); /* exp(-x) overflows: silu = x or -0 */
    return lq_test_end("vec");
}
