/* GGML block encoders (lq_ggml_encode) against ggml itself: every type's blocks from
 * ggml_quantize_chunk (libggml-base, the code llama-quantize runs; dlopen'd from the llama.cpp
 * build bench/build_llamacpp.sh makes, or $LQ_GGML_BASE) byte for byte, on data that reaches
 * each branch (all zero, constant, positive only, negative only, outliers, ties, tiny and
 * fp16-overflowing magnitudes), and lq_ggml_decode against ggml's to_float bit for bit.
 * The same with an importance matrix (lq_ggml_encode_w against ggml_quantize_chunk's imatrix
 * path, quantize_row_*_impl), whose weights also reach the weighted searches' branches.
 * Without the library: SKIP, a failure where LQ_REQUIRE_ORACLES=1 (CI). Also, with or without
 * it: decode(encode(x)) stays within each type's error bound. */
#include "lq_dtype.h"
#include "lq_test.h"

#include <dlfcn.h>
#include <glob.h>
#include <stdint.h>

typedef size_t (*quantize_chunk_fn)(int type, const float *src, void *dst, int64_t start,
                                    int64_t nrows, int64_t n_per_row, const float *imatrix);
typedef void (*to_float_fn)(const void *x, float *y, int64_t k);
typedef struct ggml_traits { /* ggml.h struct ggml_type_traits */
    const char *type_name;
    int64_t     blck_size, blck_size_interleave;
    size_t      type_size;
    bool        is_quantized;
    to_float_fn to_float;
    void       *from_float_ref;
} ggml_traits;
typedef const ggml_traits *(*get_traits_fn)(int type);

static const struct {
    lq_dtype dt;
    int      ggml;
    double   rel; /* max |x - decode(encode(x))| / block absmax, normal data */
} k_types[] = {
    {LQ_DT_Q4_0, 2, 0.13}, {LQ_DT_Q4_1, 3, 0.08}, {LQ_DT_Q5_0, 6, 0.065}, {LQ_DT_Q5_1, 7, 0.04},
    {LQ_DT_Q8_0, 8, 0.0081}, {LQ_DT_Q2_K, 10, 0.45}, {LQ_DT_Q3_K, 11, 0.25},
    {LQ_DT_Q4_K, 12, 0.11}, {LQ_DT_Q5_K, 13, 0.06}, {LQ_DT_Q6_K, 14, 0.04},
    {LQ_DT_IQ4_NL, 20, 0.1}, {LQ_DT_IQ4_XS, 23, 0.1},
};
#define NT (sizeof k_types / sizeof k_types[0])

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double   uni(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}
static float gauss(void) {
    return (float)(sqrt(-2 * log(uni() + 1e-300)) * cos(6.283185307179586 * uni()));
}

enum { ROW = 512, ROWS_PER_CASE = 16, NCASE = 12 };

/* Case c of the data: 16 rows of 512. */
static void fill(int c, float *x) {
    for (int i = 0; i < ROWS_PER_CASE * ROW; i++) {
        const float g = gauss();
        float       v;
        switch (c) {
        case 0: v = g; break;
        case 1: v = 0; break;
        case 2: v = 0.37f; break;                                   /* constant */
        case 3: v = fabsf(g) + 0.5f; break;                         /* positive: mins */
        case 4: v = -fabsf(g) * 1e-3f; break;                       /* negative, small */
        case 5: v = (i % 97 == 0) ? 40 * g : g; break;              /* outliers */
        case 6: v = (float)((int)(g * 4)) * 0.25f; break;           /* ties on grids */
        case 7: v = g * 1e-20f; break;                              /* under GROUP_MAX_EPS */
        case 8: v = g * 2e4f; break;                                /* scales past fp16 */
        case 9: v = (i / 16) % 2 ? g : 0; break;                    /* zero sub-blocks */
        case 10: v = g * (float)pow(10, (int)(uni() * 8) - 4); break; /* mixed magnitudes */
        default: v = (i % 32 == 5) ? 1 : 0; break;                  /* one-hot */
        }
        x[i] = v;
    }
}

static void *open_ggml(void) {
    const char *env = getenv("LQ_GGML_BASE");
    if (env && *env)
        return dlopen(env, RTLD_NOW | RTLD_LOCAL);
    const char *cache = getenv("XDG_CACHE_HOME");
    const char *home  = getenv("HOME");
    char        pat[1024];
    if (getenv("LQ_LLAMACPP_DIR"))
        snprintf(pat, sizeof pat, "%s/llama_cpp_python-*/vendor/llama.cpp/build/bin/libggml-base.so",
                 getenv("LQ_LLAMACPP_DIR"));
    else
        snprintf(pat, sizeof pat,
                 "%s%s/llmquant/llama.cpp/llama_cpp_python-*/vendor/llama.cpp/build/bin/"
                 "libggml-base.so", cache ? cache : home ? home : "", cache ? "" : "/.cache");
    glob_t gl;
    void  *h = NULL;
    if (glob(pat, 0, NULL, &gl) == 0 && gl.gl_pathc > 0)
        h = dlopen(gl.gl_pathv[gl.gl_pathc - 1], RTLD_NOW | RTLD_LOCAL);
    globfree(&gl);
    return h;
}

int main(void) {
    float   *x   = malloc(sizeof(float) * ROWS_PER_CASE * ROW);
    float   *y   = malloc(sizeof(float) * ROWS_PER_CASE * ROW);
    float   *y2  = malloc(sizeof(float) * ROWS_PER_CASE * ROW);
    float    qw[ROW]; /* an importance matrix: positive, a few columns far louder */
    for (int j = 0; j < ROW; j++)
        qw[j] = (float)(0.05 + uni() * (j % 13 == 0 ? 40.0 : 1.0));
    uint8_t *ours = malloc(ROWS_PER_CASE * ROW * 2), *theirs = malloc(ROWS_PER_CASE * ROW * 2);
    void    *h    = open_ggml();
    quantize_chunk_fn qc = NULL;
    get_traits_fn     gt = NULL;
    if (h) { /* POSIX: a symbol's address converts to a function pointer through its bytes */
        void *a = dlsym(h, "ggml_quantize_chunk"), *b = dlsym(h, "ggml_get_type_traits");
        if (a && b)
            memcpy(&qc, &a, sizeof qc), memcpy(&gt, &b, sizeof gt);
    }
    if (!qc || !gt) {
        fprintf(stderr, "ggml oracle: libggml-base not found (bench/build_llamacpp.sh "
                        "llama-quantize builds it; or set LQ_GGML_BASE)\n");
        if (getenv("LQ_REQUIRE_ORACLES") && !strcmp(getenv("LQ_REQUIRE_ORACLES"), "1"))
            CHECK_MSG(0, "LQ_REQUIRE_ORACLES=1 and no ggml library");
    }
    for (size_t ti = 0; ti < NT; ti++) {
        int       bb;
        const int be = lq_dtype_block(k_types[ti].dt, &bb);
        const int64_t nb = (int64_t)ROWS_PER_CASE * ROW / be, bytes = nb * bb;
        int       same = 0, dec_same = 0, cases = 0, wsame = 0;
        double    worst = 0;
        for (int c = 0; c < NCASE; c++) {
            fill(c, x);
            memset(ours, 0xa5, (size_t)bytes);
            CHECK(lq_ggml_encode(k_types[ti].dt, x, nb, ours));
            lq_ggml_decode(k_types[ti].dt, ours, nb, y);
            if (c == 0) /* the error bound on normal data */
                for (int64_t b = 0; b < ROWS_PER_CASE * ROW / 256; b++) {
                    double amax = 0, e = 0;
                    for (int i = 0; i < 256; i++) {
                        amax = fmax(amax, fabs(x[b * 256 + i]));
                        e    = fmax(e, fabs(x[b * 256 + i] - y[b * 256 + i]));
                    }
                    worst = fmax(worst, e / amax);
                }
            if (c == 1 || c == 7) /* all zero (or below ggml's epsilon) decodes to zero */
                for (int i = 0; i < ROWS_PER_CASE * ROW; i++)
                    if (y[i] != 0 && !(c == 7 && fabsf(y[i]) < 1e-18f)) {
                        CHECK_MSG(0, "%s case %d: element %d decodes to %g",
                                  lq_dtype_name(k_types[ti].dt), c, i, y[i]);
                        break;
                    }
            if (!qc)
                continue;
            cases++;
            memset(theirs, 0x5a, (size_t)bytes);
            qc(k_types[ti].ggml, x, theirs, 0, ROWS_PER_CASE, ROW, NULL);
            int64_t first = -1;
            for (int64_t i = 0; i < bytes && first < 0; i++)
                if (ours[i] != theirs[i])
                    first = i;
            CHECK_MSG(first < 0, "%s case %d: byte %lld (block %lld) differs from ggml's: %02x vs %02x",
                      lq_dtype_name(k_types[ti].dt), c, (long long)first, (long long)(first / bb),
                      first < 0 ? 0 : ours[first], first < 0 ? 0 : theirs[first]);
            same += first < 0;
            gt(k_types[ti].ggml)->to_float(theirs, y2, (int64_t)ROWS_PER_CASE * ROW);
            lq_ggml_decode(k_types[ti].dt, theirs, nb, y);
            const int dsame = !memcmp(y, y2, sizeof(float) * ROWS_PER_CASE * ROW);
            CHECK_MSG(dsame, "%s case %d: decode differs from ggml's to_float",
                      lq_dtype_name(k_types[ti].dt), c);
            dec_same += dsame;

            /* with the importance matrix, row by row as ggml_quantize_chunk runs it */
            const int64_t rb = ROW / be * bb;
            for (int r = 0; r < ROWS_PER_CASE; r++)
                CHECK(lq_ggml_encode_w(k_types[ti].dt, x + r * ROW, ROW / be, qw,
                                       lq_ggml_row_sigma2(x + r * ROW, ROW), ours + r * rb));
            qc(k_types[ti].ggml, x, theirs, 0, ROWS_PER_CASE, ROW, qw);
            first = -1;
            for (int64_t i = 0; i < bytes && first < 0; i++)
                if (ours[i] != theirs[i])
                    first = i;
            CHECK_MSG(first < 0,
                      "%s case %d, imatrix: byte %lld (block %lld) differs from ggml's: %02x vs "
                      "%02x",
                      lq_dtype_name(k_types[ti].dt), c, (long long)first, (long long)(first / bb),
                      first < 0 ? 0 : ours[first], first < 0 ? 0 : theirs[first]);
            wsame += first < 0;
        }
        CHECK_MSG(worst <= k_types[ti].rel, "%s: error %.4f of the block's absmax > %.4f",
                  lq_dtype_name(k_types[ti].dt), worst, k_types[ti].rel);
        printf("%-6s %d/%d data cases byte-identical to ggml (%d/%d with an imatrix), decode "
               "%d/%d; max error %.4f of absmax\n",
               lq_dtype_name(k_types[ti].dt), same, cases, wsame, cases, dec_same, cases, worst);
    }
    CHECK(!lq_ggml_encode(LQ_DT_F16, x, 1, ours)); /* not a block type */
    if (h)
        dlclose(h);
    free(x), free(y), free(y2), free(ours), free(theirs);
    if (!qc && !lq_test_failures_) {
        printf("SKIP: ggml oracle parts (no libggml-base)\n");
        return 77;
    }
    return lq_test_end("ggml_quant");
}
