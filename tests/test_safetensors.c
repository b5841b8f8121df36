/* safetensors reader/writer: the real stories260K file, write->read round trips (single file,
 * sharded, metadata), and every malformed input in tests/data/bad rejected with its own code. */
#include "lq_config.h"
#include "lq_st.h"
#include "lq_test.h"
#include "lq_test_status.h"

#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* The stories260K checkpoint: every tensor the config implies (tied embeddings: no lm_head, so
 * 1 + 9 per layer + 1 = 47), shapes from config.json, first/last fp16 codes as Python
 * safetensors reads them (safe_open(...).get_tensor(name).view(np.uint16)). */
static void test_real_model(const char *shared) {
    char path[4096];
    snprintf(path, sizeof path, "%s/models/stories260K", shared);
    lq_st          *st  = NULL;
    lq_err          err = {0};
    lq_model_config c;
    CHECK_OK(lq_config_load(path, &c, &err));
    CHECK_OK(lq_st_open_dir(path, &st, &err));
    if (!st)
        return;
    CHECK_EQ_INT(lq_st_count(st), 47);
    const int64_t H = c.hidden_size, I = c.intermediate_size, D = c.head_dim;
    const struct {
        const char *name;
        int         ndim;
        int64_t     shape[2];
    } per_layer[] = {
        {"input_layernorm.weight", 1, {H}},
        {"post_attention_layernorm.weight", 1, {H}},
        {"self_attn.q_proj.weight", 2, {c.num_heads * D, H}},
        {"self_attn.k_proj.weight", 2, {c.num_kv_heads * D, H}},
        {"self_attn.v_proj.weight", 2, {c.num_kv_heads * D, H}},
        {"self_attn.o_proj.weight", 2, {H, c.num_heads * D}},
        {"mlp.gate_proj.weight", 2, {I, H}},
        {"mlp.up_proj.weight", 2, {I, H}},
        {"mlp.down_proj.weight", 2, {H, I}},
    };
    int found = 0;
    for (int64_t l = 0; l < c.num_layers; l++)
        for (size_t k = 0; k < sizeof per_layer / sizeof *per_layer; k++) {
            char name[128];
            snprintf(name, sizeof name, "model.layers.%lld.%s", (long long)l, per_layer[k].name);
            const lq_st_tensor *t = lq_st_find(st, name);
            CHECK_MSG(t != NULL, "%s missing", name);
            if (!t)
                continue;
            found++;
            CHECK_EQ_INT(t->dtype, LQ_DT_F16);
            CHECK_EQ_INT(t->ndim, per_layer[k].ndim);
            for (int d = 0; d < t->ndim; d++)
                CHECK_MSG(t->shape[d] == per_layer[k].shape[d], "%s dim %d = %lld", name, d,
                          (long long)t->shape[d]);
        }
    CHECK_EQ_INT(found, 45);
    const lq_st_tensor *emb = lq_st_find(st, "model.embed_tokens.weight");
    CHECK(emb && emb->ndim == 2 && emb->shape[0] == c.vocab_size && emb->shape[1] == H);
    CHECK(lq_st_find(st, "model.norm.weight") != NULL);
    CHECK(lq_st_find(st, "lm_head.weight") == NULL);
    CHECK(strcmp(lq_st_metadata(st, "format"), "pt") == 0);
    CHECK(lq_st_metadata(st, "nope") == NULL);
    CHECK_EQ_INT(lq_st_data_bytes(st), 520064);

    const struct {
        const char *name;
        int64_t     numel;
        uint16_t    first[4], last[2];
    } vals[] = {
        {"model.embed_tokens.weight", 512 * 64, {0xb4b7, 0x387f, 0x319d, 0x3573}, {0xb147, 0xb6c9}},
        {"model.layers.4.self_attn.k_proj.weight", 32 * 64, {0xa69f, 0x27fe, 0xa5f9, 0x2bb3},
         {0xb601, 0xb43e}},
        {"model.norm.weight", 64, {0x40eb, 0x3d78, 0x3f00, 0x3c6e}, {0x3dd0, 0x3ed5}},
    };
    float *buf = malloc(512 * 64 * sizeof(float));
    for (size_t k = 0; k < sizeof vals / sizeof *vals; k++) {
        const lq_st_tensor *t = lq_st_find(st, vals[k].name);
        CHECK(t && t->numel == vals[k].numel);
        CHECK_OK(lq_st_read_f32(st, vals[k].name, t->ndim, t->shape, buf, &err));
        for (int i = 0; i < 4; i++)
            CHECK_MSG(buf[i] == lq_f16_to_f32(vals[k].first[i]), "%s[%d] = %g", vals[k].name, i,
                      buf[i]);
        for (int i = 0; i < 2; i++)
            CHECK(buf[vals[k].numel - 2 + i] == lq_f16_to_f32(vals[k].last[i]));
    }
    int64_t wrong[2] = {64, 512};
    CHECK_EQ_INT(lq_st_read_f32(st, "model.embed_tokens.weight", 2, wrong, buf, &err),
                 LQ_ERR_WEIGHT_SHAPE);
    CHECK(strstr(err.msg, "model.embed_tokens.weight") && strstr(err.msg, "model.safetensors"));
    CHECK_EQ_INT(lq_st_read_f32(st, "model.embed_tokens.weight", 1, wrong, buf, &err),
                 LQ_ERR_WEIGHT_SHAPE);
    CHECK_EQ_INT(lq_st_read_f32(st, "nope", 1, NULL, buf, &err), LQ_ERR_ST_MISSING_TENSOR);
    CHECK(strstr(err.msg, "nope") != NULL);
    free(buf);
    lq_st_close(st);

    /* the same bytes through the in-memory parser */
    char   *img = NULL;
    int64_t len = 0;
    snprintf(path, sizeof path, "%s/models/stories260K/model.safetensors", shared);
    CHECK_OK(lq_read_file(path, 1 << 24, &img, &len, &err));
    CHECK_OK(lq_st_open_memory(img, (size_t)len, "mem", &st, &err));
    CHECK_EQ_INT(lq_st_count(st), 47);
    lq_st_close(st);
    free(img);
}

/* Files Python wrote (tests/data/st/make_st.py, values recomputed here). */
static double st_value(int64_t j) {
    return (double)(j % 11 - 5) * 0.5;
}

static void test_python_written(const char *data) {
    char path[4096];
    snprintf(path, sizeof path, "%s/st/py_dtypes.safetensors", data);
    lq_st *st  = NULL;
    lq_err err = {0};
    CHECK_OK(lq_st_open(path, &st, &err));
    if (!st)
        return;
    CHECK_EQ_INT(lq_st_count(st), 10);
    CHECK(lq_st_metadata(st, "format") && !strcmp(lq_st_metadata(st, "format"), "pt"));
    for (int64_t i = 0; i < lq_st_count(st); i++) {
        const lq_st_tensor *t = lq_st_get(st, i);
        CHECK(strncmp(t->name, "t_", 2) == 0 && !strcmp(t->name + 2, lq_dtype_name(t->dtype)));
        CHECK_EQ_INT(t->numel, 15 + (t->ndim == 3 ? -3 : 0));
        int ok = 1;
        if (lq_dtype_is_float(t->dtype)) {
            float f[16];
            CHECK_OK(lq_st_read_f32(st, t->name, t->ndim, t->shape, f, &err));
            for (int64_t j = 0; j < t->numel; j++)
                ok &= f[j] == (float)st_value(j);
        } else {
            const uint8_t *p = t->data;
            for (int64_t j = 0; j < t->numel; j++) {
                double  v = st_value(j) + (t->dtype == LQ_DT_U8 ? 5 : 0);
                int64_t want = t->dtype == LQ_DT_BOOL ? v != 0 : (int64_t)v; /* torch truncates */
                int64_t got  = 0;
                int32_t i32;
                int16_t i16;
                if (t->dtype == LQ_DT_I64) {
                    memcpy(&got, p + 8 * j, 8);
                } else if (t->dtype == LQ_DT_I32) {
                    memcpy(&i32, p + 4 * j, 4);
                    got = i32;
                } else if (t->dtype == LQ_DT_I16) {
                    memcpy(&i16, p + 2 * j, 2);
                    got = i16;
                } else if (t->dtype == LQ_DT_I8) {
                    got = (int8_t)p[j];
                } else { /* U8, BOOL */
                    got = p[j];
                }
                ok &= got == want;
            }
            float f[16];
            CHECK_EQ_INT(lq_st_read_f32(st, t->name, t->ndim, t->shape, f, &err),
                         LQ_ERR_WEIGHT_DTYPE);
        }
        CHECK_MSG(ok, "%s values differ from what Python wrote", t->name);
    }
    lq_st_close(st);

    /* transformers 5 save_pretrained with sharding: index + 3 shards, bf16 */
    snprintf(path, sizeof path, "%s/st/hf_tiny_sharded", data);
    CHECK_OK(lq_st_open_dir(path, &st, &err));
    if (!st)
        return;
    CHECK_EQ_INT(lq_st_count(st), 2 + 2 * 9 + 1); /* embed, lm_head, 2 layers, norm */
    int nshard[3] = {0};
    for (int64_t p = 0; p < lq_st_count(st); p++) {
        const lq_st_tensor *t = lq_st_get(st, p); /* sorted by name, as the generator numbers */
        CHECK(t->dtype == LQ_DT_BF16 && t->shard >= 0 && t->shard < 3);
        nshard[t->shard]++;
        float *f = malloc((size_t)t->numel * sizeof *f);
        CHECK_OK(lq_st_read_f32(st, t->name, t->ndim, t->shape, f, &err));
        int ok = 1;
        for (int64_t j = 0; j < t->numel; j++)
            ok &= f[j] == (float)((double)((j * 7 + p * 3) % 17 - 8) / 8);
        CHECK_MSG(ok, "%s values differ from what transformers wrote", t->name);
        free(f);
    }
    CHECK(nshard[0] > 0 && nshard[1] > 0 && nshard[2] > 0);
    const lq_st_tensor *lm = lq_st_find(st, "lm_head.weight");
    CHECK(lm && strstr(lq_st_file_of(st, lm), "model-00003-of-00003.safetensors"));
    CHECK_EQ_INT(lq_st_data_bytes(st), 13984); /* "total_size" in the index */
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
    CHECK_OK(lq_st_writer_set_metadata(w, "by", "llmquant \"test\"", &err)); /* replaces */
    CHECK_OK(lq_st_writer_finish(w, &err));
    /* spills are gone as soon as finish returns; only the final files remain */
    CHECK_EQ_INT(count_all(dir), expect_shards + (expect_shards > 1));
    CHECK_EQ_INT(lq_st_writer_add(w, "late", LQ_DT_I32, 1, &five, ints, &err),
                 LQ_ERR_INVALID_ARG);
    lq_st_writer_free(w);
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
    if (max_shard == 4000) {
        /* huggingface_hub's rule: layer.5 (8192 B > 4000) is a shard of its own, numbered when
         * met (first); the shard being filled (layer.0, .7, .3, .1, .8, .6: 3072 B) continues
         * and closes when layer.4 (1554 B) would overflow it (second); the rest is the third. */
        const char *want[][2] = {{"layer.5.weight", "model-00001-of-00003.safetensors"},
                                 {"layer.0.weight", "model-00002-of-00003.safetensors"},
                                 {"layer.6.weight", "model-00002-of-00003.safetensors"},
                                 {"layer.8.weight", "model-00002-of-00003.safetensors"},
                                 {"layer.4.weight", "model-00003-of-00003.safetensors"},
                                 {"ints", "model-00003-of-00003.safetensors"}};
        for (size_t k = 0; k < sizeof want / sizeof *want; k++) {
            const char *f = lq_st_file_of(st, lq_st_find(st, want[k][0]));
            CHECK_MSG(strstr(f, want[k][1]) != NULL, "%s is in %s, want %s", want[k][0], f,
                      want[k][1]);
        }
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

/* Write errors: RLIMIT_FSIZE makes write() fail with EFBIG (as a full disk would with
 * ENOSPC; root ignores permission bits, so this is the error a test can force). Both while
 * spilling and while finishing, the status is LQ_ERR_DISK_FULL and nothing is left behind. */
static void test_write_errors(const char *tmp) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/st_full", tmp);
    rm_rf_dir(dir);
    CHECK(mkdir(dir, 0755) == 0);
    struct rlimit old;
    CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0);
    signal(SIGXFSZ, SIG_IGN);
    float *big = calloc(8192, sizeof(float));
    for (int phase = 0; phase < 2; phase++) {
        lq_st_writer *w   = NULL;
        lq_err        err = {0};
        CHECK_OK(lq_st_writer_create(dir, 0, &w, &err));
        struct rlimit lim = old;
        /* phase 0: the spill cannot take 32 KB; phase 1: it can (exactly 16 KB), the final
         * file (8 + header + 16 KB) cannot */
        lim.rlim_cur = phase == 0 ? 20000 : 16384;
        CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
        int64_t   n = phase == 0 ? 8192 : 4096;
        lq_status s = lq_st_writer_add_f32(w, "big", LQ_DT_F32, 1, &n, big, &err);
        if (phase == 1) {
            CHECK_OK(s);
            s = lq_st_writer_finish(w, &err);
        }
        setrlimit(RLIMIT_FSIZE, &old);
        CHECK_MSG(s == LQ_ERR_DISK_FULL, "phase %d: %s (%s)", phase, lq_status_name(s), err.msg);
        CHECK_MSG(strstr(err.msg, dir) != NULL, "message names the file: %s", err.msg);
        if (phase == 0) /* a failed add poisons the writer: finish must not write a torn file */
            CHECK_EQ_INT(lq_st_writer_finish(w, &err), LQ_ERR_INVALID_ARG);
        lq_st_writer_free(w);
        CHECK_MSG(count_all(dir) == 0, "phase %d: %d files left", phase, count_all(dir));
    }
    signal(SIGXFSZ, SIG_DFL);

    lq_st_writer *w   = NULL;
    lq_err        err = {0};
    CHECK_EQ_INT(lq_st_writer_create("/nonexistent/dir", 0, &w, &err), LQ_ERR_NOT_FOUND);
    CHECK_OK(lq_st_writer_create(dir, 0, &w, &err));
    int64_t neg = -3;
    CHECK_EQ_INT(lq_st_writer_add(w, "neg", LQ_DT_F32, 1, &neg, big, &err), LQ_ERR_INVALID_ARG);
    CHECK_EQ_INT(lq_st_writer_add(w, "__metadata__", LQ_DT_F32, 0, NULL, big, &err),
                 LQ_ERR_INVALID_ARG);
    lq_st_writer_free(w);
    free(big);
    rmdir(dir);
}

static void write_one(const char *dir, const char *tensor, int64_t max_shard) {
    lq_st_writer *w   = NULL;
    lq_err        err = {0};
    float         x[3] = {1, 2, 3};
    int64_t       n    = 3;
    CHECK_OK(lq_st_writer_create(dir, max_shard, &w, &err));
    CHECK_OK(lq_st_writer_add_f32(w, tensor, LQ_DT_F32, 1, &n, x, &err));
    if (max_shard > 0) /* two tensors over two shards */
        CHECK_OK(lq_st_writer_add_f32(w, "second", LQ_DT_F32, 1, &n, x, &err));
    CHECK_OK(lq_st_writer_finish(w, &err));
    lq_st_writer_free(w);
}

/* Which file lq_st_open_dir picks. */
static void test_dir_choice(const char *tmp) {
    char dir[4096], a[4200], b[4200];
    snprintf(dir, sizeof dir, "%s/st_choice", tmp);
    rm_rf_dir(dir);
    CHECK(mkdir(dir, 0755) == 0);
    lq_st *st  = NULL;
    lq_err err = {0};
    CHECK_EQ_INT(lq_st_open_dir(dir, &st, &err), LQ_ERR_NOT_FOUND);
    CHECK_EQ_INT(lq_st_open_dir("/nonexistent/model", &st, &err), LQ_ERR_NOT_FOUND);
    write_one(dir, "sharded", 12); /* model-0000{1,2}-of-00002 + index */
    CHECK_OK(lq_st_open_dir(dir, &st, &err));
    CHECK(st && lq_st_count(st) == 2 && lq_st_find(st, "sharded"));
    lq_st_close(st);
    write_one(dir, "single", 0); /* model.safetensors next to the index: transformers loads it */
    CHECK_OK(lq_st_open_dir(dir, &st, &err));
    CHECK(st && lq_st_count(st) == 1 && lq_st_find(st, "single"));
    lq_st_close(st);
    rm_rf_dir(dir);
    CHECK(mkdir(dir, 0755) == 0);
    write_one(dir, "lone", 0); /* a lone file under another name is used */
    snprintf(a, sizeof a, "%s/model.safetensors", dir);
    snprintf(b, sizeof b, "%s/weights.safetensors", dir);
    CHECK(rename(a, b) == 0);
    CHECK_OK(lq_st_open_dir(dir, &st, &err));
    CHECK(st && lq_st_find(st, "lone") && strstr(lq_st_file_of(st, lq_st_find(st, "lone")), b));
    lq_st_close(st);
    write_one(dir, "lone", 0);
    snprintf(b, sizeof b, "%s/other.safetensors", dir);
    CHECK(rename(a, b) == 0); /* weights + other, no index: ambiguous */
    CHECK_EQ_INT(lq_st_open_dir(dir, &st, &err), LQ_ERR_ST_INDEX);
    rm_rf_dir(dir);
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
                    memcpy(raw + 8 * j, &(int64_t){v * ((int64_t)1 << 40)}, 8);
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

/* Oracle mode 2: a checkpoint-like tensor list written with sharding (max_shard bytes, 0 = one
 * file) in this insertion order; the Python side shards the same dict with huggingface_hub and
 * saves each shard with safetensors. Element j of tensor i: floats ((5j + i) % 23 - 11) / 8,
 * I32 (5j + i) % 23 - 11, U8 (5j + i) % 256. */
static int write_oracle_sharded(const char *dir, int64_t max_shard) {
    static const struct {
        const char *name;
        lq_dtype    dt;
        int         ndim;
        int64_t     shape[2];
    } k[] = {
        {"model.embed_tokens.weight", LQ_DT_BF16, 2, {64, 16}},
        {"model.layers.0.self_attn.q_proj.weight", LQ_DT_F16, 2, {16, 16}},
        {"model.layers.0.self_attn.q_proj.bias", LQ_DT_F32, 1, {16}},
        {"model.layers.0.mlp.qweight", LQ_DT_I32, 2, {4, 40}},
        {"model.layers.0.mlp.scales", LQ_DT_F16, 2, {2, 40}},
        {"model.layers.0.mlp.g_idx", LQ_DT_I32, 1, {16}},
        {"model.layers.1.big", LQ_DT_F32, 2, {40, 40}},
        {"model.layers.1.codes", LQ_DT_U8, 1, {300}},
        {"model.norm.weight", LQ_DT_F32, 1, {16}},
        {"lm_head.weight", LQ_DT_BF16, 2, {64, 16}},
        {"z.empty", LQ_DT_F32, 1, {0}},
    };
    lq_st_writer *w   = NULL;
    lq_err        err = {0};
    if (lq_st_writer_create(dir, max_shard, &w, &err) != LQ_OK)
        return fprintf(stderr, "%s\n", err.msg), 1;
    lq_st_writer_set_metadata(w, "format", "pt", &err);
    static float   f[1600];
    static int32_t q[1600];
    static uint8_t u[1600];
    for (int i = 0; i < (int)(sizeof k / sizeof k[0]); i++) {
        int64_t n = k[i].shape[0] * (k[i].ndim > 1 ? k[i].shape[1] : 1);
        for (int64_t j = 0; j < n; j++) {
            f[j] = (float)((5 * j + i) % 23 - 11) / 8;
            q[j] = (int32_t)((5 * j + i) % 23 - 11);
            u[j] = (uint8_t)((5 * j + i) % 256);
        }
        lq_status st = k[i].dt == LQ_DT_I32  ? lq_st_writer_add(w, k[i].name, k[i].dt, k[i].ndim,
                                                                k[i].shape, q, &err)
                       : k[i].dt == LQ_DT_U8 ? lq_st_writer_add(w, k[i].name, k[i].dt, k[i].ndim,
                                                                k[i].shape, u, &err)
                                             : lq_st_writer_add_f32(w, k[i].name, k[i].dt,
                                                                    k[i].ndim, k[i].shape, f, &err);
        if (st != LQ_OK)
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
    if (argc == 4 && strcmp(argv[1], "--write-oracle-sharded") == 0)
        return write_oracle_sharded(argv[2], strtoll(argv[3], NULL, 10));
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
    test_python_written(data);
    test_writer_abandoned(tmp);
    test_nonfinite(tmp);
    test_write_errors(tmp);
    test_dir_choice(tmp);
    test_bad_inputs(data);
    return lq_test_end("safetensors");
}
