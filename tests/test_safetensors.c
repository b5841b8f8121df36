/* safetensors reader/writer: the real stories260K file, write->read round trips (single file,
 * sharded, metadata), and every malformed input in tests/data/bad rejected with its own code. */
#include "lq_st.h"
#include "lq_test.h"
#include "lq_test_status.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

static void test_real_model(const char *shared) {
    char path[4096];
    snprintf(path, sizeof path, "%s/models/stories260K", shared);
    lq_st *st  = NULL;
    lq_err err = {0};
    CHECK_OK(lq_st_open_dir(path, &st, &err));
    if (!st)
        return;
    CHECK_EQ_INT(lq_st_count(st), 47);
    const lq_st_tensor *t = lq_st_find(st, "model.layers.0.mlp.down_proj.weight");
    CHECK(t != NULL);
    if (t) {
        CHECK_EQ_INT(t->dtype, LQ_DT_F16);
        CHECK_EQ_INT(t->ndim, 2);
        CHECK_EQ_INT(t->shape[0], 64);
        CHECK_EQ_INT(t->shape[1], 172);
    }
    CHECK(lq_st_find(st, "model.norm.weight") != NULL);
    CHECK(lq_st_find(st, "lm_head.weight") == NULL);
    CHECK(strcmp(lq_st_metadata(st, "format"), "pt") == 0);
    CHECK_EQ_INT(lq_st_data_bytes(st), 520064);
    float  *emb      = malloc(512 * 64 * sizeof(float));
    int64_t shape[2] = {512, 64};
    CHECK_OK(lq_st_read_f32(st, "model.embed_tokens.weight", 2, shape, emb, &err));
    double s = 0;
    for (int i = 0; i < 512 * 64; i++)
        s += fabs(emb[i]);
    CHECK(s > 1.0 && isfinite(s));
    int64_t wrong[2] = {64, 512};
    CHECK_EQ_INT(lq_st_read_f32(st, "model.embed_tokens.weight", 2, wrong, emb, &err),
                 LQ_ERR_WEIGHT_SHAPE);
    CHECK(strstr(err.msg, "model.embed_tokens.weight") != NULL);
    CHECK_EQ_INT(lq_st_read_f32(st, "nope", 1, NULL, emb, &err), LQ_ERR_ST_MISSING_TENSOR);
    free(emb);
    lq_st_close(st);
}

static void rm_rf_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    char           p[4096];
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
            unlink(p);
        }
    closedir(d);
    rmdir(dir);
}

static int count_all(const char *dir) {
    DIR *d = opendir(dir);
    int  n = 0;
    if (!d)
        return -1;
    struct dirent *de;
    while ((de = readdir(d)))
        n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
    closedir(d);
    return n;
}

static void roundtrip(const char *tmp, int64_t max_shard, int expect_shards) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/st_rt_%lld", tmp, (long long)max_shard);
    rm_rf_dir(dir);
    mkdir(tmp, 0755);
    CHECK(mkdir(dir, 0755) == 0);
    lq_st_writer *w   = NULL;
    lq_err        err = {0};
    CHECK_OK(lq_st_writer_create(dir, max_shard, &w, &err));
    if (!w)
        return;
    CHECK_OK(lq_st_writer_set_metadata(w, "format", "pt", &err));
    CHECK_OK(lq_st_writer_set_metadata(w, "by", "llmquant \"test\"", &err));
    lq_rng rng;
    lq_rng_seed(&rng, 7);
    enum { NT = 9 };
    float   *vals[NT];
    int64_t  sizes[NT] = {1000, 3, 4096, 0, 17, 256, 1, 777, 64};
    lq_dtype dts[NT]   = {LQ_DT_F16, LQ_DT_F32, LQ_DT_BF16, LQ_DT_F32, LQ_DT_F16,
                          LQ_DT_F32, LQ_DT_F16, LQ_DT_BF16, LQ_DT_F32};
    for (int i = 0; i < NT; i++) {
        vals[i] = malloc((size_t)(sizes[i] + 1) * sizeof(float));
        for (int64_t j = 0; j < sizes[i]; j++)
            vals[i][j] = lq_rng_normal(&rng);
        char name[64];
        snprintf(name, sizeof name, "layer.%d.weight", (i * 7) % NT);
        CHECK_OK(lq_st_writer_add_f32(w, name, dts[i], 1, &sizes[i], vals[i], &err));
    }
    int32_t ints[5] = {1, -2, 3, -4, 5};
    int64_t five    = 5;
    CHECK_OK(lq_st_writer_add(w, "ints", LQ_DT_I32, 1, &five, ints, &err));
    CHECK_EQ_INT(lq_st_writer_add(w, "ints", LQ_DT_I32, 1, &five, ints, &err),
                 LQ_ERR_ST_DUPLICATE);
    CHECK_OK(lq_st_writer_finish(w, &err));
    lq_st_writer_free(w);
    /* only final files remain: no spill files */
    CHECK_EQ_INT(count_all(dir), expect_shards + (expect_shards > 1));

    lq_st *st = NULL;
    CHECK_OK(lq_st_open_dir(dir, &st, &err));
    if (!st) {
        fprintf(stderr, "open_dir: %s\n", err.msg);
        return;
    }
    CHECK_EQ_INT(lq_st_count(st), NT + 1);
    CHECK(lq_st_metadata(st, "by") && strcmp(lq_st_metadata(st, "by"), "llmquant \"test\"") == 0);
    for (int i = 0; i < NT; i++) {
        char name[64];
        snprintf(name, sizeof name, "layer.%d.weight", (i * 7) % NT);
        float *back = malloc((size_t)(sizes[i] + 1) * sizeof(float));
        CHECK_OK(lq_st_read_f32(st, name, 1, &sizes[i], back, &err));
        int ok = 1;
        for (int64_t j = 0; j < sizes[i]; j++) {
            float want = dts[i] == LQ_DT_F16    ? lq_round_f16(vals[i][j])
                         : dts[i] == LQ_DT_BF16 ? lq_bf16_to_f32(lq_f32_to_bf16(vals[i][j]))
                                                : vals[i][j];
            ok &= back[j] == want;
        }
        CHECK_MSG(ok, "tensor %s round trip", name);
        free(back);
        free(vals[i]);
    }
    const lq_st_tensor *ti = lq_st_find(st, "ints");
    CHECK(ti && ti->dtype == LQ_DT_I32 && memcmp(ti->data, ints, sizeof ints) == 0);
    CHECK_EQ_INT(lq_st_read_f32(st, "ints", 1, &five, (float[5]){0}, &err), LQ_ERR_WEIGHT_DTYPE);
    lq_st_close(st);
}

static void test_writer_abandoned(const char *tmp) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/st_abandon", tmp);
    rm_rf_dir(dir);
    CHECK(mkdir(dir, 0755) == 0);
    lq_st_writer *w   = NULL;
    lq_err        err = {0};
    CHECK_OK(lq_st_writer_create(dir, 0, &w, &err));
    float   x[4] = {1, 2, 3, 4};
    int64_t n    = 4;
    CHECK_OK(lq_st_writer_add_f32(w, "x", LQ_DT_F32, 1, &n, x, &err));
    lq_st_writer_free(w); /* no finish: nothing may remain */
    CHECK_EQ_INT(count_all(dir), 0);
    rmdir(dir);
}

static void test_nonfinite(const char *tmp) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/st_nan", tmp);
    rm_rf_dir(dir);
    CHECK(mkdir(dir, 0755) == 0);
    lq_st_writer *w   = NULL;
    lq_err        err = {0};
    CHECK_OK(lq_st_writer_create(dir, 0, &w, &err));
    float   x[4] = {1, 2, NAN, 4};
    int64_t n    = 4;
    CHECK_OK(lq_st_writer_add_f32(w, "w", LQ_DT_F16, 1, &n, x, &err));
    CHECK_OK(lq_st_writer_finish(w, &err));
    lq_st_writer_free(w);
    lq_st *st = NULL;
    CHECK_OK(lq_st_open_dir(dir, &st, &err));
    float back[4];
    CHECK_EQ_INT(lq_st_read_f32(st, "w", 1, &n, back, &err), LQ_ERR_WEIGHT_NONFINITE);
    CHECK(strstr(err.msg, "flat index 2") != NULL);
    lq_st_close(st);
}

static void test_bad_inputs(const char *data) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/bad", data);
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    if (!d)
        return;
    struct dirent *de;
    int            n = 0;
    while ((de = readdir(d))) {
        int want = lq_test_expected_status(de->d_name);
        if (want < 0 || strncmp(de->d_name, "cfg_", 4) == 0)
            continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        lq_st *st  = NULL;
        lq_err err = {0};
        int    got = strncmp(de->d_name, "shard_", 6) == 0 ? lq_st_open_dir(p, &st, &err)
                                                            : lq_st_open(p, &st, &err);
        CHECK_MSG(got == want, "%s: got %s (%s)", de->d_name, lq_status_name(got), err.msg);
        CHECK_MSG(got == 0 || strlen(err.msg) > 0, "%s: no message", de->d_name);
        /* the message names the offending file */
        CHECK_MSG(got == 0 || strstr(err.msg, de->d_name) != NULL, "%s: message '%s'", de->d_name,
                  err.msg);
        CHECK(st == NULL);
        /* the same bytes through the in-memory parser give the same code */
        if (strncmp(de->d_name, "shard_", 6) != 0) {
            char   *buf = NULL;
            int64_t len = 0;
            if (lq_read_file(p, 1 << 20, &buf, &len, &err) == LQ_OK) {
                int got2 = lq_st_open_memory(buf, (size_t)len, p, &st, &err);
                CHECK_MSG(got2 == want, "%s (memory): got %s", de->d_name, lq_status_name(got2));
                free(buf);
            }
        }
        n++;
    }
    closedir(d);
    CHECK_MSG(n >= 25, "only %d bad inputs found", n);
    printf("bad inputs checked: %d\n", n);
}

/* Oracle mode for tests/py/test_st_oracle.py: a fixed set of tensors the Python side rebuilds
 * with safetensors.numpy.save to compare bytes. Values: element j of tensor i = (j % 13) - 6 +
 * 0.25 * i (exact in every float dtype used). */
static int write_oracle(const char *dir) {
    static const struct {
        const char *name;
        lq_dtype    dt;
        int         ndim;
        int64_t     shape[3];
    } k[] = {
        {"z.weight", LQ_DT_F16, 2, {3, 5}},  {"a.bias", LQ_DT_F32, 1, {7}},
        {"m.qweight", LQ_DT_I32, 2, {2, 4}}, {"b.weight", LQ_DT_BF16, 3, {2, 2, 2}},
        {"c.codes", LQ_DT_U8, 1, {9}},       {"d.cb", LQ_DT_I8, 2, {2, 3}},
        {"e.idx", LQ_DT_I64, 1, {3}},        {"empty", LQ_DT_F32, 1, {0}},
        {"f.w", LQ_DT_F16, 1, {1}},
    };
    lq_st_writer *w   = NULL;
    lq_err        err = {0};
    if (lq_st_writer_create(dir, 0, &w, &err) != LQ_OK)
        return fprintf(stderr, "%s\n", err.msg), 1;
    lq_st_writer_set_metadata(w, "format", "pt", &err);
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        int64_t n = 1;
        for (int d = 0; d < k[i].ndim; d++)
            n *= k[i].shape[d];
        float  *f   = malloc((size_t)(n + 1) * sizeof(float));
        uint8_t raw[64 * 8];
        for (int64_t j = 0; j < n; j++)
            f[j] = (float)(j % 13) - 6 + 0.25f * (float)i;
        lq_status s;
        if (lq_dtype_is_float(k[i].dt)) {
            s = lq_st_writer_add_f32(w, k[i].name, k[i].dt, k[i].ndim, k[i].shape, f, &err);
        } else {
            for (int64_t j = 0; j < n; j++) {
                int64_t v = (int64_t)(j % 13) - 6;
                if (k[i].dt == LQ_DT_U8)
                    raw[j] = (uint8_t)(j * 29);
                else if (k[i].dt == LQ_DT_I8)
                    ((int8_t *)raw)[j] = (int8_t)v;
                else if (k[i].dt == LQ_DT_I32)
                    memcpy(raw + 4 * j, &(int32_t){(int32_t)(v * 100000)}, 4);
                else
                    memcpy(raw + 8 * j, &(int64_t){v << 40}, 8);
            }
            s = lq_st_writer_add(w, k[i].name, k[i].dt, k[i].ndim, k[i].shape, raw, &err);
        }
        free(f);
        if (s != LQ_OK)
            return fprintf(stderr, "%s\n", err.msg), 1;
    }
    if (lq_st_writer_finish(w, &err) != LQ_OK)
        return fprintf(stderr, "%s\n", err.msg), 1;
    lq_st_writer_free(w);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--write-oracle") == 0)
        return write_oracle(argv[2]);
    const char *shared = getenv("LQ_SHARED");
    const char *data   = lq_test_env_or_skip("LQ_TEST_DATA");
    const char *tmp    = lq_test_env_or_skip("LQ_TMP");
    mkdir(tmp, 0755);
    if (shared && lq_dir_exists(shared))
        test_real_model(shared);
    else
        printf("SKIP part: LQ_SHARED not available, real-model checks not run\n");
    roundtrip(tmp, 0, 1);
    roundtrip(tmp, 4000, 3);
    test_writer_abandoned(tmp);
    test_nonfinite(tmp);
    test_bad_inputs(data);
    return lq_test_end("safetensors");
}
