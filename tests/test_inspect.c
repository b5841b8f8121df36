/* lq_inspect on the real stories260K and on a GPTQ-layout checkpoint built here from its
 * config: parameter counts from the config formula, bits/param from the written tensor sizes,
 * memory and KV-cache formulas, and the error statuses. */
#include "lq_base.h"
#include "lq_config.h"
#include "lq_st.h"
#include "lq_test.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <sys/stat.h>

static double num(const cJSON *o, const char *path) {
    /* "memory.kv_cache.bytes" */
    char buf[128];
    snprintf(buf, sizeof buf, "%s", path);
    const cJSON *cur = o;
    for (char *tok = strtok(buf, "."); tok && cur; tok = strtok(NULL, "."))
        cur = cJSON_GetObjectItemCaseSensitive(cur, tok);
    return cJSON_IsNumber(cur) ? cur->valuedouble : -1;
}

static cJSON *inspect(const char *dir, const char *ctx, const char *batch, const char *g,
                      lq_status want) {
    lq_params *p = lq_params_create();
    lq_err     e = {0};
    if (ctx)
        CHECK_OK(lq_params_set(p, "ctx", ctx, &e));
    if (batch)
        CHECK_OK(lq_params_set(p, "batch", batch, &e));
    if (g)
        CHECK_OK(lq_params_set(p, "group_size", g, &e));
    char     *rep = NULL;
    lq_status s   = lq_inspect(dir, p, &rep, &e);
    lq_params_free(p);
    CHECK_MSG(s == want, "lq_inspect(%s) = %d (%s), want %d", dir, s, e.msg, want);
    if (s != LQ_OK) {
        CHECK(rep == NULL);
        CHECK_MSG(strstr(e.msg, dir) != NULL, "message does not name %s: %s", dir, e.msg);
        return NULL;
    }
    cJSON *r = cJSON_Parse(rep);
    CHECK(r != NULL);
    lq_free(rep);
    return r;
}

/* Llama parameter count from the config alone. */
static int64_t config_params(const lq_model_config *c, int64_t *layer_linear) {
    int64_t d = c->hidden_size, I = c->intermediate_size, hd = c->head_dim;
    int64_t q = c->num_heads * hd, kv = c->num_kv_heads * hd;
    int64_t lin = d * q + 2 * d * kv + q * d + 3 * d * I;
    *layer_linear = lin * c->num_layers;
    int64_t p     = c->vocab_size * d + d + c->num_layers * (lin + 2 * d);
    if (!c->tie_word_embeddings)
        p += c->vocab_size * d;
    return p;
}

/* GPTQ 4-bit group-32 tensors of one linear (k rounded up to whole words; shapes, not values,
 * matter here). Returns the bytes written, bias excluded. */
static int64_t add_gptq(lq_st_writer *w, const char *mod, int64_t n, int64_t k, int bias,
                        lq_err *e) {
    int64_t G = (k + 31) / 32, kw = (k + 7) / 8;
    char    nm[256];
    int64_t bytes = 0;
    void   *zero  = calloc((size_t)(kw * n + G * n + k + n) * 4 + 64, 1);
    int64_t s_qw[2] = {kw, n}, s_qz[2] = {G, (n + 7) / 8}, s_sc[2] = {G, n},
            s_gi[1] = {k}, s_b[1] = {n};
    snprintf(nm, sizeof nm, "%s.qweight", mod);
    CHECK_OK(lq_st_writer_add(w, nm, LQ_DT_I32, 2, s_qw, zero, e));
    bytes += kw * n * 4;
    snprintf(nm, sizeof nm, "%s.qzeros", mod);
    CHECK_OK(lq_st_writer_add(w, nm, LQ_DT_I32, 2, s_qz, zero, e));
    bytes += s_qz[0] * s_qz[1] * 4;
    snprintf(nm, sizeof nm, "%s.scales", mod);
    CHECK_OK(lq_st_writer_add(w, nm, LQ_DT_F16, 2, s_sc, zero, e));
    bytes += G * n * 2;
    snprintf(nm, sizeof nm, "%s.g_idx", mod);
    CHECK_OK(lq_st_writer_add(w, nm, LQ_DT_I32, 1, s_gi, zero, e));
    bytes += k * 4;
    if (bias) { /* bias counts as parameters, not as quantized bytes */
        snprintf(nm, sizeof nm, "%s.bias", mod);
        CHECK_OK(lq_st_writer_add(w, nm, LQ_DT_F16, 1, s_b, zero, e));
    }
    free(zero);
    return bytes;
}

static void write_text(const char *path, const char *s) {
    FILE *f = fopen(path, "wb");
    if (f) {
        fputs(s, f);
        fclose(f);
    }
}

int main(void) {
    const char *shared = lq_test_env_or_skip("LQ_SHARED");
    const char *tmp    = lq_test_env_or_skip("LQ_TMP");
    char        model[4096], dir[4096], p[4200];
    snprintf(model, sizeof model, "%s/models/stories260K", shared);
    lq_model_config c;
    lq_err          e = {0};
    if (lq_config_load(model, &c, &e) != LQ_OK) {
        printf("SKIP: %s\n", e.msg);
        return 77;
    }
    int64_t lin, params = config_params(&c, &lin);

    /* --- the real model ------------------------------------------------------------------ */
    cJSON *r = inspect(model, "100", "3", "32", LQ_OK);
    if (r) {
        CHECK_EQ_INT(num(r, "parameters"), params);
        CHECK_EQ_INT(params, 260032); /* embed 512x64 + 5 x 45440 + norm 64, by hand */
        CHECK_EQ_INT(num(r, "num_layers"), 5);
        CHECK_EQ_INT(num(r, "num_kv_heads"), 4);
        CHECK_EQ_INT(num(r, "head_dim"), 8);
        CHECK_EQ_INT(num(r, "linear_modules"), 35);
        CHECK_EQ_INT(num(r, "quantized_linears.count"), 0);
        CHECK(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(r, "quantized_linears"), "bits_per_param")));
        CHECK(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(r, "quantized")));
        /* every tensor is listed; shapes multiply to the parameter count (all F16) */
        const cJSON *ts  = cJSON_GetObjectItemCaseSensitive(r, "tensors");
        int64_t      sum = 0, nt = 0;
        for (const cJSON *t = ts ? ts->child : NULL; t; t = t->next, nt++) {
            int64_t n = 1;
            for (const cJSON *d = cJSON_GetObjectItemCaseSensitive(t, "shape")->child; d;
                 d = d->next)
                n *= (int64_t)d->valuedouble;
            sum += n;
            CHECK_EQ_INT(num(t, "bytes"), 2 * n);
        }
        CHECK_EQ_INT(nt, 47);
        CHECK_EQ_INT(num(r, "num_tensors"), 47);
        CHECK_EQ_INT(sum, params);
        CHECK_EQ_INT(num(r, "tensor_bytes"), 2 * params);
        CHECK_EQ_INT(num(r, "dtypes.F16.tensors"), 47);
        CHECK_EQ_INT(num(r, "memory.weights.fp32"), 4 * params);
        CHECK_EQ_INT(num(r, "memory.weights.fp16"), 2 * params);
        CHECK_EQ_INT(num(r, "memory.weights.layer_linear_parameters"), lin);
        /* int8: n*k bytes + 4n (SCB) per linear; int4 g32: n*k/2 + G*n*2 + G*n/2 + 4k where
         * 4-bit GPTQ stores the shape (n and k multiples of 8), else fp16 2nk (the 172-wide
         * MLP stays unquantized, as `llmquant gptq` leaves it) */
        int64_t d = 64, I = 172, q = 64, kv = 32, rest = params - lin;
        int64_t sh[7][2] = {{q, d}, {kv, d}, {kv, d}, {d, q}, {I, d}, {I, d}, {d, I}};
        int64_t b8 = 0, b4 = 0;
        for (int i = 0; i < 7; i++) {
            int64_t n = sh[i][0], k = sh[i][1], G = (k + 31) / 32;
            b8 += n * k + 4 * n;
            b4 += n % 8 == 0 && k % 8 == 0 ? n * k / 2 + G * n * 2 + G * (n / 2) + 4 * k
                                           : 2 * n * k;
        }
        CHECK_EQ_INT(num(r, "memory.weights.int8"), 5 * b8 + 2 * rest);
        CHECK_EQ_INT(num(r, "memory.weights.int4"), 5 * b4 + 2 * rest);
        CHECK_EQ_INT(num(r, "memory.weights.int4_group_size"), 32);
        /* 2 (K,V) x 5 layers x 4 kv heads x 8 head_dim x 100 ctx x 3 batch x 2 bytes */
        CHECK_EQ_INT(num(r, "memory.kv_cache.bytes"), 2 * 5 * 4 * 8 * 100 * 3 * 2);
        cJSON_Delete(r);
    }
    /* ctx 0 -> min(2048, max_position_embeddings) = 512 */
    r = inspect(model, NULL, NULL, NULL, LQ_OK);
    if (r) {
        CHECK_EQ_INT(num(r, "memory.kv_cache.ctx"), 512);
        CHECK_EQ_INT(num(r, "memory.kv_cache.bytes"), 2 * 5 * 4 * 8 * 512 * 2);
        CHECK_EQ_INT(num(r, "memory.weights.int4_group_size"), 128);
        cJSON_Delete(r);
    }

    /* --- a GPTQ-layout checkpoint with the same config ---------------------------------- */
    snprintf(dir, sizeof dir, "%s/inspect_gptq", tmp);
    mkdir(tmp, 0777);
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "cannot create %s\n", dir);
        return 1;
    }
    char *cfg = NULL;
    snprintf(p, sizeof p, "%s/config.json", model);
    CHECK_OK(lq_read_file(p, 1 << 20, &cfg, NULL, &e));
    cJSON *cj = cJSON_Parse(cfg);
    free(cfg);
    cJSON *qc = cJSON_AddObjectToObject(cj, "quantization_config");
    cJSON_AddStringToObject(qc, "quant_method", "gptq");
    cJSON_AddNumberToObject(qc, "bits", 4);
    cJSON_AddNumberToObject(qc, "group_size", 32);
    char *cs = cJSON_Print(cj);
    cJSON_Delete(cj);
    snprintf(p, sizeof p, "%s/config.json", dir);
    write_text(p, cs);
    free(cs);

    lq_st_writer *w = NULL;
    CHECK_OK(lq_st_writer_create(dir, 0, &w, &e));
    int64_t  hd          = 64;
    int64_t  one[1]      = {hd}, emb[2] = {512, hd};
    uint16_t *z          = calloc(512 * 64, 2);
    int64_t  qbytes      = 0, qparams = 0;
    static const char *const mods[7] = {"self_attn.q_proj", "self_attn.k_proj",
                                        "self_attn.v_proj", "self_attn.o_proj",
                                        "mlp.gate_proj",    "mlp.up_proj", "mlp.down_proj"};
    static const int64_t     nk[7][2] = {{64, 64}, {32, 64}, {32, 64}, {64, 64},
                                         {172, 64}, {172, 64}, {64, 172}};
    CHECK_OK(lq_st_writer_add(w, "model.embed_tokens.weight", LQ_DT_F16, 2, emb, z, &e));
    CHECK_OK(lq_st_writer_add(w, "model.norm.weight", LQ_DT_F16, 1, one, z, &e));
    for (int l = 0; l < 5; l++) {
        char nm[256];
        snprintf(nm, sizeof nm, "model.layers.%d.input_layernorm.weight", l);
        CHECK_OK(lq_st_writer_add(w, nm, LQ_DT_F16, 1, one, z, &e));
        snprintf(nm, sizeof nm, "model.layers.%d.post_attention_layernorm.weight", l);
        CHECK_OK(lq_st_writer_add(w, nm, LQ_DT_F16, 1, one, z, &e));
        for (int m = 0; m < 7; m++) {
            snprintf(nm, sizeof nm, "model.layers.%d.%s", l, mods[m]);
            /* layer 0's q_proj carries a bias (Qwen2 style) */
            qbytes += add_gptq(w, nm, nk[m][0], nk[m][1], l == 0 && m == 0, &e);
            qparams += nk[m][0] * nk[m][1];
        }
    }
    CHECK_OK(lq_st_writer_finish(w, &e));
    lq_st_writer_free(w);
    free(z);
    r = inspect(dir, NULL, NULL, NULL, LQ_OK);
    if (r) {
        /* the logical parameter count of a quantized checkpoint is its original's (+ bias) */
        CHECK_EQ_INT(num(r, "parameters"), params + 64);
        CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "quantized")));
        CHECK_EQ_INT(num(r, "quantized_linears.count"), 35);
        CHECK_EQ_INT(num(r, "quantized_linears.parameters"), qparams);
        CHECK_EQ_INT(num(r, "quantized_linears.bytes"), qbytes);
        double bpp = 8.0 * (double)qbytes / (double)qparams;
        CHECK_NEAR(num(r, "quantized_linears.bits_per_param"), bpp, 1e-9);
        CHECK(bpp > 4.5 && bpp < 6); /* 4-bit codes + group/g_idx overhead on tiny layers */
        CHECK_EQ_INT(num(r, "quantization_config.group_size"), 32);
        CHECK_EQ_INT(num(r, "dtypes.I32.tensors"), 35 * 3);
        cJSON_Delete(r);
    }

    /* --- errors ------------------------------------------------------------------------- */
    snprintf(p, sizeof p, "%s/does-not-exist", tmp);
    inspect(p, NULL, NULL, NULL, LQ_ERR_NOT_FOUND);
    snprintf(p, sizeof p, "%s/inspect_empty", tmp);
    mkdir(p, 0777);
    char cp[4300];
    snprintf(cp, sizeof cp, "%s/config.json", p);
    remove(cp); /* left by an earlier run */
    inspect(p, NULL, NULL, NULL, LQ_ERR_NOT_FOUND); /* no config.json */
    write_text(cp, "{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":172,"
                   "\"num_hidden_layers\":5,\"num_attention_heads\":8,\"vocab_size\":512}");
    inspect(p, NULL, NULL, NULL, LQ_ERR_NOT_FOUND); /* no safetensors */
    write_text(cp, "{\"model_type\":\"gpt2\"}");
    inspect(p, NULL, NULL, NULL, LQ_ERR_UNSUPPORTED_ARCH);
    char *rep = NULL;
    CHECK_EQ_INT(lq_inspect(model, NULL, NULL, &e), LQ_ERR_INVALID_ARG);
    CHECK_EQ_INT(lq_inspect(NULL, NULL, &rep, &e), LQ_ERR_INVALID_ARG);
    return lq_test_end("inspect");
}
