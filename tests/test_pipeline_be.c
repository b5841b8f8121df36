/* The conversion driver and every calibrated method on a backend other than the host's, checked
 * without a GPU: each conversion runs once on the cpu backend (lq_quantize) and once with its
 * calibration forwards, activation stores, stage states and statistics on the guard backend
 * (tests/lq_test_guard.h: memory that faults when touched outside the ops), and the tensor files
 * must be the same bytes. The guard runs with its activations resident (no budget), with none
 * resident (every chunk through the host spill, as on a full device) and with room for part of
 * them. Settings: GPTQ (stage cache, act-order, without true-sequential, without the cache,
 * --awq-scales, 8-bit, --target-bpw), AWQ, LLM.int8 with outliers, on stories260K, and GPTQ,
 * AWQ and int8 on a small mixture-of-experts model written here (routed experts, a shared one,
 * experts that fall back to every token). */
#define _DEFAULT_SOURCE 1

#include "lq_config.h"
#include "lq_model.h"
#include "lq_pipeline.h"
#include "lq_st.h"
#include "lq_test.h"
#include "lq_test_guard.h"

#include <sys/stat.h>
#include <unistd.h>

static char g_tmp[1024];

static char *slurp(const char *path, long *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    *len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)*len + 1);
    if (b && fread(b, 1, (size_t)*len, f) != (size_t)*len) {
        free(b);
        b = NULL;
    }
    fclose(f);
    return b;
}

static int same_file(const char *a, const char *b) {
    long  la = 0, lb = 0;
    char *x = slurp(a, &la), *y = slurp(b, &lb);
    int   ok = x && y && la == lb && !memcmp(x, y, (size_t)la);
    free(x), free(y);
    return ok;
}

/* argv-style "--key value" pairs into params */
static lq_params *params(const char *const *kv, const char *calib) {
    lq_params *p = lq_params_create();
    lq_err     e = {0};
    lq_params_set(p, "calib", calib, &e);
    lq_params_set(p, "nsamples", "12", &e);
    lq_params_set(p, "seqlen", "96", &e);
    lq_params_set(p, "device", "cpu", &e);
    lq_params_set(p, "force", "true", &e);
    for (int i = 0; kv && kv[i]; i += 2)
        CHECK_MSG(lq_params_set(p, kv[i], kv[i + 1], &e) == LQ_OK, "%s=%s: %s", kv[i], kv[i + 1],
                  e.msg);
    return p;
}

/* One setting: the cpu conversion, then the guard's under each activation budget. */
static void run(const char *tag, const char *method, const char *model, const char *calib,
                const char *const *kv) {
    char       ref[1200], out[1200], a[1300], b[1300];
    lq_err     e = {0};
    lq_params *p = params(kv, calib);
    snprintf(ref, sizeof ref, "%s/%s_cpu", g_tmp, tag);
    snprintf(out, sizeof out, "%s/%s_guard", g_tmp, tag);
    lq_status st = lq_quantize(method, model, ref, p, NULL, NULL, &e);
    CHECK_MSG(st == LQ_OK, "%s on the cpu: %s", tag, e.msg);
    /* no limit; nothing resident; room for about half the chunks of one store */
    const int64_t budgets[3] = {-1, 0, 12 * 96 * 64 * 4 / 2};
    for (int bi = 0; bi < 3 && st == LQ_OK; bi++) {
        guard g;
        guard_init(&g);
        memset(&e, 0, sizeof e);
        lq_status gs = lq_quantize_be(method, model, out, p, NULL, &g.be, budgets[bi], NULL, &e);
        CHECK_MSG(gs == LQ_OK, "%s on the guard (budget %lld): %s", tag, (long long)budgets[bi],
                  e.msg);
        snprintf(a, sizeof a, "%s/model.safetensors", ref);
        snprintf(b, sizeof b, "%s/model.safetensors", out);
        if (gs == LQ_OK)
            CHECK_MSG(same_file(a, b), "%s: the guard's tensors (budget %lld) differ from the cpu's",
                      tag, (long long)budgets[bi]);
        CHECK_MSG(guard_free(&g), "%s: the guard backend kept %lld bytes in %d buffers", tag,
                  (long long)g.be.cur_bytes, g.n);
    }
    if (st == LQ_OK)
        printf("%-22s %s: the guard backend's output equals the cpu's (3 activation budgets)\n",
               tag, method);
    lq_params_free(p);
}

/* A small qwen2-moe checkpoint (random weights, the stories260K vocabulary and tokenizer). */
static int write_moe(const char *dir, const char *tok) {
    static const char *json =
        "{\"model_type\":\"qwen2_moe\",\"architectures\":[\"Qwen2MoeForCausalLM\"],"
        "\"hidden_size\":64,\"intermediate_size\":96,\"num_hidden_layers\":2,"
        "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"vocab_size\":512,"
        "\"num_experts\":6,\"num_experts_per_tok\":2,\"moe_intermediate_size\":32,"
        "\"shared_expert_intermediate_size\":48,\"norm_topk_prob\":false,"
        "\"max_position_embeddings\":512,\"rms_norm_eps\":1e-6,\"tie_word_embeddings\":false,"
        "\"torch_dtype\":\"float32\"}";
    lq_model_config cfg;
    lq_err          err = {0};
    char            path[1200], name[512];
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f || fputs(json, f) < 0 || fclose(f) != 0)
        return 0;
    snprintf(path, sizeof path, "cp '%s' '%s/tokenizer.model'", tok, dir);
    if (system(path) != 0 || lq_config_parse(json, strlen(json), "moe", &cfg, &err) != LQ_OK)
        return 0;
    lq_st_writer *w = NULL;
    if (lq_st_writer_create(dir, 0, &w, &err) != LQ_OK)
        return 0;
    lq_rng r;
    lq_rng_seed(&r, 5);
    const int64_t d = cfg.hidden_size, V = cfg.vocab_size;
    float        *buf = malloc((size_t)(V * d) * 4);
    int           ok  = buf != NULL;
#define ADD(nm, rows, cols, scale, one)                                                            \
    do {                                                                                           \
        int64_t shp[2] = {(rows), (cols)};                                                         \
        for (int64_t i_ = 0; i_ < (rows) * (cols); i_++)                                           \
            buf[i_] = (one) + (scale)*lq_rng_normal(&r);                                          \
        ok = ok && lq_st_writer_add_f32(w, (nm), LQ_DT_F32, (cols) > 1 ? 2 : 1,                    \
                                        (cols) > 1 ? shp : shp, buf, &err) == LQ_OK;               \
    } while (0)
    ADD("model.embed_tokens.weight", V, d, 1.0f, 0.f);
    for (int64_t l = 0; l < cfg.num_layers && ok; l++) {
        lq_layer L;
        memset(&L, 0, sizeof L);
        lq_layer_vec v[LQ_LAYER_MAX_VECS];
        const int    nv = lq_layer_vecs(&cfg, &L, v);
        for (int i = 0; i < nv; i++) {
            snprintf(name, sizeof name, "model.layers.%lld.%s", (long long)l, v[i].leaf);
            int64_t shp1[1] = {v[i].len};
            for (int64_t j = 0; j < v[i].len; j++)
                buf[j] = 1.0f + 0.1f * lq_rng_normal(&r);
            ok = ok && lq_st_writer_add_f32(w, name, LQ_DT_F32, 1, shp1, buf, &err) == LQ_OK;
        }
        for (int id = 0; id < LQ_LIN_COUNT; id++) {
            int64_t n, k;
            if (!lq_lin_present(&cfg, (lq_lin_id)id) ||
                (cfg.num_experts && id >= LQ_LIN_GATE)) /* the MLP is the experts' */
                continue;
            lq_lin_shape(&cfg, (lq_lin_id)id, &n, &k);
            snprintf(name, sizeof name, "model.layers.%lld.%s.weight", (long long)l,
                     lq_lin_name((lq_lin_id)id));
            ADD(name, n, k, 1.0f / sqrtf((float)k), 0.f);
            if (lq_lin_has_bias(&cfg, (lq_lin_id)id)) {
                snprintf(name, sizeof name, "model.layers.%lld.%s.bias", (long long)l,
                         lq_lin_name((lq_lin_id)id));
                int64_t shp1[1] = {n};
                for (int64_t j = 0; j < n; j++)
                    buf[j] = 0.1f * lq_rng_normal(&r);
                ok = ok && lq_st_writer_add_f32(w, name, LQ_DT_F32, 1, shp1, buf, &err) == LQ_OK;
            }
        }
        for (int64_t j = 0; j < lq_moe_count(&cfg); j++) {
            int64_t n, k;
            char    leaf[256];
            lq_moe_lin(&cfg, NULL, j, leaf, sizeof leaf, &n, &k, NULL);
            snprintf(name, sizeof name, "model.layers.%lld.%s.weight", (long long)l, leaf);
            /* a router that favours the first experts: the last ones fall back to every token */
            ADD(name, n, k, 1.0f / sqrtf((float)k), 0.f);
        }
    }
    int64_t shp1[1] = {d};
    for (int64_t j = 0; j < d; j++)
        buf[j] = 1.0f;
    ok = ok && lq_st_writer_add_f32(w, "model.norm.weight", LQ_DT_F32, 1, shp1, buf, &err) == LQ_OK;
    ADD("lm_head.weight", V, d, 1.0f / sqrtf((float)d), 0.f);
#undef ADD
    ok = ok && lq_st_writer_finish(w, &err) == LQ_OK;
    lq_st_writer_free(w);
    free(buf);
    if (!ok)
        fprintf(stderr, "writing %s: %s\n", dir, err.msg);
    return ok;
}

int main(void) {
    const char *src = getenv("LQ_SRC"), *tmp = getenv("LQ_TMP");
    if (!src || !tmp) {
        printf("SKIP: LQ_SRC / LQ_TMP not set\n");
        return 77;
    }
    snprintf(g_tmp, sizeof g_tmp, "%s/pipeline_be", tmp);
    mkdir(tmp, 0755);
    mkdir(g_tmp, 0755);
    char model[1100], calib[1100], tok[1100], moe[1100];
    snprintf(model, sizeof model, "%s/examples/stories260K", src);
    snprintf(calib, sizeof calib, "%s/examples/data/tinystories_sample.txt", src);
    snprintf(tok, sizeof tok, "%s/examples/stories260K/tokenizer.model", src);
    snprintf(moe, sizeof moe, "%s/moe", g_tmp);

    static const char *gptq_def[] = {"group_size", "32", NULL};
    static const char *gptq_act[] = {"group_size", "32", "desc_act", "true", NULL};
    static const char *gptq_nts[] = {"group_size", "32", "true_sequential", "false", NULL};
    static const char *gptq_noc[] = {"group_size", "32", "stage_cache", "false", NULL};
    static const char *gptq_awq[] = {"group_size", "32", "awq_scales", "true", NULL};
    static const char *gptq_w8[]  = {"group_size", "32", "bits", "8", NULL};
    static const char *gptq_bpw[] = {"group_size", "32", "target_bpw", "14", "bpw_tokens", "512",
                                     NULL};
    static const char *awq_def[]  = {"group_size", "32", NULL};
    static const char *int8_out[] = {"threshold", "1.0", NULL};
    run("gptq", "gptq", model, calib, gptq_def);
    run("gptq_act", "gptq", model, calib, gptq_act);
    run("gptq_nts", "gptq", model, calib, gptq_nts);
    run("gptq_nocache", "gptq", model, calib, gptq_noc);
    run("gptq_awqs", "gptq", model, calib, gptq_awq);
    run("gptq_w8", "gptq", model, calib, gptq_w8);
    run("gptq_bpw", "gptq", model, calib, gptq_bpw);
    run("awq", "awq", model, calib, awq_def);
    run("int8", "int8", model, calib, int8_out);
    if (!write_moe(moe, tok)) {
        CHECK_MSG(0, "could not write the mixture-of-experts model");
    } else {
        static const char *moe_gptq[] = {"group_size", "32", "moe_min_tokens", "200", NULL};
        static const char *moe_batch[] = {"group_size", "32", "moe_batch", "2", NULL};
        run("moe_gptq", "gptq", moe, calib, moe_gptq);
        run("moe_gptq_batches", "gptq", moe, calib, moe_batch);
        run("moe_awq", "awq", moe, calib, awq_def);
        run("moe_int8", "int8", moe, calib, int8_out);
    }
    return lq_test_end("test_pipeline_be");
}
