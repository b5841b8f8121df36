/* lq_inspect: describe a model directory (original or quantized) as a JSON report.
 *
 * Quantized linears are recognised by module name (q/k/v/o/gate/up/down_proj, lm_head) whose
 * "<module>.weight" is not a float tensor (GPTQ/AWQ qweight+scales+..., bitsandbytes uint8/int8
 * weight + statistics). Their logical size n*k comes from config.json, so the parameter count of
 * a quantized checkpoint equals that of its original, and bits/param = 8 * (all bytes of the
 * module except bias) / (n*k) includes scales, zeros, g_idx and absmax overhead.
 *
 * Memory estimates use config.json shapes (so they are the same for an original and its
 * quantized checkpoint): decoder-layer linears as llmquant would write them, everything else
 * (embeddings, lm_head, norms, biases) at fp16, as the reference tools store them:
 *   int8: the LLM.int8 layout (int8 weight + float32 row absmax SCB),
 *   int4: the 4-bit GPTQ layout at --group-size (qweight, fp16 scales, packed zeros, g_idx),
 * each from its format's array table (formats/lq_qformat.h), and fp16 for a linear whose shape
 * that layout cannot store (it stays unquantized).
 * KV cache: 2 (K and V) * layers * kv_heads * head_dim * ctx * batch * 2 bytes (fp16).
 */
#include "lq_base.h"
#include "lq_config.h"
#include "lq_json.h"
#include "lq_model.h"
#include "lq_qformat.h"
#include "lq_opts.h"
#include "lq_source.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A module's role: a decoder linear (lq_lin_id, named and shaped by lq_model) or the lm_head. */
typedef int role;
#define R_LM_HEAD LQ_LIN_COUNT
#define R_COUNT   (LQ_LIN_COUNT + 1)

static const char *role_leaf(role r) {
    return r == R_LM_HEAD ? "lm_head" : lq_lin_name((lq_lin_id)r);
}

static void role_shape(const lq_model_config *c, role r, int64_t *n, int64_t *k) {
    if (r == R_LM_HEAD)
        *n = c->vocab_size, *k = c->hidden_size;
    else
        lq_lin_shape(c, (lq_lin_id)r, n, k);
}

/* Module prefix length and role of a tensor name ("model.layers.3.mlp.up_proj.qweight" ->
 * length of "model.layers.3.mlp.up_proj", LQ_LIN_UP), or -1. */
static int64_t module_of(const char *name, role *r) {
    for (int i = 0; i < R_COUNT; i++) {
        const char *leaf = role_leaf(i);
        size_t      ll   = strlen(leaf);
        const char *p    = name;
        while ((p = strstr(p, leaf))) {
            if ((p == name || p[-1] == '.') && p[ll] == '.') {
                *r = i;
                return (int64_t)(p - name) + (int64_t)ll;
            }
            p += ll;
        }
    }
    return -1;
}

typedef struct module {
    const char *name; /* points into a tensor name; length name_len */
    int64_t     name_len;
    role        r;
    int64_t     n, k;
    int64_t     bytes; /* all tensors except bias */
    int64_t     bias_numel;
    int64_t     other_numel; /* numel of non-bias tensors (used when not quantized) */
    int         float_weight;
} module;

typedef struct mod_list {
    module *m;
    int64_t n, cap;
} mod_list;

static module *mod_get(mod_list *l, const char *name, int64_t len, role r,
                       const lq_model_config *c) {
    /* Tensors are sorted by name, so a module's tensors are adjacent: check the last first. */
    for (int64_t i = l->n - 1; i >= 0 && i >= l->n - 2; i--)
        if (l->m[i].name_len == len && !strncmp(l->m[i].name, name, (size_t)len))
            return &l->m[i];
    for (int64_t i = 0; i < l->n - 2; i++)
        if (l->m[i].name_len == len && !strncmp(l->m[i].name, name, (size_t)len))
            return &l->m[i];
    if (l->n == l->cap) {
        int64_t nc = l->cap ? l->cap * 2 : 64;
        module *p  = realloc(l->m, (size_t)nc * sizeof *p);
        if (!p)
            return NULL;
        l->m   = p;
        l->cap = nc;
    }
    module *m = &l->m[l->n++];
    memset(m, 0, sizeof *m);
    m->name     = name;
    m->name_len = len;
    m->r        = r;
    role_shape(c, r, &m->n, &m->k);
    return m;
}

static lq_status json_oom(lq_err *err, const char *dir) {
    return lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory building the report", dir);
}

/* cJSON numbers are doubles: exact for the byte and parameter counts we report (< 2^53). */
static cJSON *num(cJSON *obj, const char *key, double v) {
    return cJSON_AddNumberToObject(obj, key, v);
}

/* Bytes of an [n, k] linear stored under cfg: its format's layout where the shape fits, else
 * fp16 (llmquant leaves it unquantized); false on overflow. */
static bool stored_bytes(const lq_qconfig *cfg, int64_t n, int64_t k, int64_t *out) {
    if (lq_qformat_get(cfg->format)->fits(cfg, n, k, NULL, 0)) {
        *out = lq_qformat_bytes(cfg, n, k);
        return *out >= 0;
    }
    return lq_mul_i64(n, k, out) && lq_mul_i64(*out, 2, out);
}

/* Adds an [n, k] linear to the estimates: its parameters and its int8 and int4 bytes. */
static bool estimate_add(int64_t n, int64_t k, const lq_qconfig *c8, const lq_qconfig *c4,
                         int64_t *lin, int64_t *b8, int64_t *b4) {
    int64_t nk, t8, t4;
    return lq_mul_i64(n, k, &nk) && lq_add_i64(*lin, nk, lin) && stored_bytes(c8, n, k, &t8) &&
           lq_add_i64(*b8, t8, b8) && stored_bytes(c4, n, k, &t4) && lq_add_i64(*b4, t4, b4);
}

/* The config's shape and what a decoder layer of this family computes, as the forward reads it. */
static void add_config(cJSON *root, const lq_model_config *c) {
    cJSON_AddStringToObject(root, "model_type", c->model_type);
    cJSON_AddStringToObject(root, "architecture", c->architecture);
    cJSON_AddStringToObject(root, "torch_dtype", c->torch_dtype);
    num(root, "num_layers", (double)c->num_layers);
    num(root, "hidden_size", (double)c->hidden_size);
    num(root, "intermediate_size", (double)c->intermediate_size);
    num(root, "num_heads", (double)c->num_heads);
    num(root, "num_kv_heads", (double)c->num_kv_heads);
    num(root, "head_dim", (double)c->head_dim);
    num(root, "vocab_size", (double)c->vocab_size);
    num(root, "max_position_embeddings", (double)c->max_position_embeddings);
    cJSON_AddBoolToObject(root, "tie_word_embeddings", c->tie_word_embeddings);
    cJSON  *blk     = cJSON_AddObjectToObject(root, "block");
    int64_t sliding = 0;
    for (int64_t i = 0; i < c->num_layers; i++)
        sliding += lq_config_layer_sliding(c, i);
    num(blk, "sliding_layers", (double)sliding);
    num(blk, "sliding_window", (double)c->sliding_window);
    num(blk, "rope_theta", c->rope_theta);
    if (c->rope_local_theta > 0)
        num(blk, "rope_local_theta", c->rope_local_theta);
    cJSON_AddStringToObject(blk, "mlp", c->act == LQ_ACT_GELU_TANH ? "geglu" : "swiglu");
    cJSON_AddBoolToObject(blk, "fused_qkv_gate_up", c->fused);
    if (c->num_experts) {
        num(blk, "experts", (double)c->num_experts);
        num(blk, "experts_per_token", (double)c->experts_per_tok);
        num(blk, "expert_intermediate", (double)c->moe_intermediate);
        num(blk, "shared_expert_intermediate", (double)c->shared_intermediate);
        cJSON_AddBoolToObject(blk, "renormalized_top_k", c->norm_topk);
    }
    if (c->rope_type == LQ_ROPE_LONGROPE) {
        cJSON_AddStringToObject(blk, "rope_scaling", "longrope");
        num(blk, "rope_original_max_pos", (double)c->rope_original_max_pos);
        num(blk, "rope_attention_factor", c->rope_attn_factor);
    } else if (c->rope_type != LQ_ROPE_DEFAULT) {
        cJSON_AddStringToObject(blk, "rope_scaling",
                                c->rope_type == LQ_ROPE_LLAMA3 ? "llama3" : "linear");
        num(blk, "rope_factor", c->rope_factor);
    }
    cJSON_AddBoolToObject(blk, "qk_norm", c->qk_norm);
    cJSON_AddBoolToObject(blk, "post_norms", c->post_norms);
    cJSON_AddBoolToObject(blk, "norm_plus_one", c->norm_plus_one);
    num(blk, "attn_softcap", c->attn_softcap);
    num(blk, "final_softcap", c->final_softcap);
    cJSON_AddStringToObject(root, "family_verified", lq_config_family_verified(c->model_type));
    cJSON_AddBoolToObject(root, "quantized", c->quantized);
}

/* What the tensors add up to: files, per-dtype totals, the linear modules. */
typedef struct tensor_sums {
    int64_t  dt_count[LQ_DT_COUNT], dt_bytes[LQ_DT_COUNT];
    int64_t  loose_params; /* tensors outside linear modules */
    mod_list mods;
} tensor_sums;

/* One entry per tensor in `tensors`, the shard files in `files`, the sums in *ts. */
static lq_status walk_tensors(const lq_st *sf, const lq_model_config *c, cJSON *files,
                              cJSON *tensors, tensor_sums *ts, const char *model_dir, lq_err *err) {
    int last_shard = -1;
    for (int64_t i = 0; i < lq_st_count(sf); i++) {
        const lq_st_tensor *t    = lq_st_get(sf, i);
        const char         *path = lq_st_file_of(sf, t);
        const char         *base = strrchr(path, '/');
        base                     = base ? base + 1 : path;
        if (t->shard != last_shard) {
            int seen = 0;
            for (cJSON *f = files->child; f; f = f->next)
                seen |= strcmp(f->valuestring, base) == 0;
            if (!seen)
                cJSON_AddItemToArray(files, cJSON_CreateString(base));
            last_shard = t->shard;
        }
        ts->dt_count[t->dtype]++;
        ts->dt_bytes[t->dtype] += t->nbytes;

        cJSON *e = cJSON_CreateObject();
        if (!e)
            return json_oom(err, model_dir);
        cJSON_AddItemToArray(tensors, e);
        cJSON_AddStringToObject(e, "name", t->name);
        cJSON_AddStringToObject(e, "dtype", lq_dtype_name(t->dtype));
        cJSON *shape = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < t->ndim; d++)
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[d]));
        num(e, "bytes", (double)t->nbytes);
        cJSON_AddStringToObject(e, "file", base);

        role    r;
        int64_t ml = module_of(t->name, &r);
        if (ml < 0) {
            ts->loose_params += t->numel;
            continue;
        }
        module *m = mod_get(&ts->mods, t->name, ml, r, c);
        if (!m)
            return json_oom(err, model_dir);
        const char *leaf = t->name + ml + 1;
        if (!strcmp(leaf, "bias")) {
            m->bias_numel += t->numel;
        } else {
            m->bytes += t->nbytes;
            m->other_numel += t->numel;
            if (!strcmp(leaf, "weight") && lq_dtype_is_float(t->dtype))
                m->float_weight = 1;
        }
    }
    return LQ_OK;
}

/* Parameters (a quantized linear counts its config shape) and the quantized linears' bits per
 * parameter, summed with overflow checks: a checkpoint may hold any number of modules. */
static lq_status add_sizes(cJSON *root, const lq_st *sf, const tensor_sums *ts, int64_t *params,
                           const char *model_dir, lq_err *err) {
    int64_t q_params = 0, q_bytes = 0, q_count = 0, nk;
    *params = ts->loose_params;
    for (int64_t i = 0; i < ts->mods.n; i++) {
        const module *m  = &ts->mods.m[i];
        bool          ok = lq_add_i64(*params, m->bias_numel, params);
        if (m->float_weight) {
            ok = ok && lq_add_i64(*params, m->other_numel, params);
        } else {
            ok = ok && lq_mul_i64(m->n, m->k, &nk) && lq_add_i64(*params, nk, params) &&
                 lq_add_i64(q_params, nk, &q_params) && lq_add_i64(q_bytes, m->bytes, &q_bytes);
            q_count++;
        }
        if (!ok)
            LQ_FAIL(err, LQ_ERR_CONFIG_VALUE, "%s: parameter count overflows 64 bits", model_dir);
    }
    num(root, "num_tensors", (double)lq_st_count(sf));
    num(root, "tensor_bytes", (double)lq_st_data_bytes(sf));
    cJSON *dts = cJSON_AddObjectToObject(root, "dtypes");
    for (int d = 0; d < LQ_DT_COUNT; d++) {
        if (!ts->dt_count[d])
            continue;
        cJSON *o = cJSON_AddObjectToObject(dts, lq_dtype_name((lq_dtype)d));
        num(o, "tensors", (double)ts->dt_count[d]);
        num(o, "bytes", (double)ts->dt_bytes[d]);
    }
    num(root, "parameters", (double)*params);
    num(root, "linear_modules", (double)ts->mods.n);
    cJSON *ql = cJSON_AddObjectToObject(root, "quantized_linears");
    num(ql, "count", (double)q_count);
    num(ql, "parameters", (double)q_params);
    num(ql, "bytes", (double)q_bytes);
    if (q_params > 0)
        num(ql, "bits_per_param", 8.0 * (double)q_bytes / (double)q_params);
    else
        cJSON_AddNullToObject(ql, "bits_per_param");
    return LQ_OK;
}

/* Memory estimates from config shapes: weights at each precision, the KV cache. */
static lq_status add_memory(cJSON *root, const lq_model_config *c, const lq_opts *opt,
                            int64_t params, const char *model_dir, lq_err *err) {
    int64_t    g   = opt->group_size;
    int64_t    lin = 0, b8 = 0, b4 = 0;
    bool       ok = true;
    lq_qconfig c8, c4;
    lq_qconfig_default(LQ_FMT_INT8, &c8);
    lq_qconfig_default(LQ_FMT_GPTQ, &c4);
    c4.bits       = 4;
    c4.group_size = g > 0 ? g : -1;
    for (int r = 0; r < LQ_LIN_COUNT && ok; r++) {
        int64_t n, k;
        if (!lq_lin_present(c, (lq_lin_id)r))
            continue;
        role_shape(c, r, &n, &k);
        ok = estimate_add(n, k, &c8, &c4, &lin, &b8, &b4);
    }
    /* experts and the shared expert (the routers and the shared expert's gate stay float) */
    for (int64_t j = 1; j < lq_moe_count(c) && ok; j++) {
        int64_t n, k;
        char    leaf[128];
        lq_moe_lin(c, NULL, j, leaf, sizeof leaf, &n, &k, NULL);
        ok = n == 1 || estimate_add(n, k, &c8, &c4, &lin, &b8, &b4);
    }
    ok = ok && lq_mul_i64(lin, c->num_layers, &lin) && lq_mul_i64(b8, c->num_layers, &b8) &&
         lq_mul_i64(b4, c->num_layers, &b4);
    if (!ok)
        LQ_FAIL(err, LQ_ERR_CONFIG_VALUE, "%s: memory estimate overflows 64 bits", model_dir);
    int64_t rest = params > lin ? params - lin : 0;
    cJSON  *mem  = cJSON_AddObjectToObject(root, "memory");
    cJSON  *w    = cJSON_AddObjectToObject(mem, "weights");
    num(w, "layer_linear_parameters", (double)lin);
    num(w, "fp32", 4.0 * (double)params);
    num(w, "fp16", 2.0 * (double)params);
    num(w, "int8", (double)b8 + 2.0 * (double)rest);
    num(w, "int4", (double)b4 + 2.0 * (double)rest);
    num(w, "int4_group_size", (double)(g > 0 ? g : -1));
    int64_t ctx   = opt->ctx;
    int64_t batch = opt->batch;
    if (ctx <= 0)
        ctx = c->max_position_embeddings < 2048 ? c->max_position_embeddings : 2048;
    if (batch <= 0)
        batch = 1;
    int64_t kv = 2 * 2;
    if (!lq_mul_i64(kv, c->num_layers, &kv) || !lq_mul_i64(kv, c->num_kv_heads, &kv) ||
        !lq_mul_i64(kv, c->head_dim, &kv) || !lq_mul_i64(kv, ctx, &kv) ||
        !lq_mul_i64(kv, batch, &kv))
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "%s: KV cache size for ctx %lld x batch %lld overflows",
                model_dir, (long long)ctx, (long long)batch);
    cJSON *kvo = cJSON_AddObjectToObject(mem, "kv_cache");
    num(kvo, "ctx", (double)ctx);
    num(kvo, "batch", (double)batch);
    cJSON_AddStringToObject(kvo, "dtype", "float16");
    num(kvo, "bytes", (double)kv);
    return LQ_OK;
}

lq_status lq_inspect(const char *model_dir, const lq_params *p, char **report_json, lq_err *err) {
    if (report_json)
        *report_json = NULL;
    if (!model_dir || !report_json)
        return lq_fail(err, LQ_ERR_INVALID_ARG,
                       "lq_inspect: model_dir and report_json are required");
    lq_opts opt;
    lq_opts_read(p, &opt);
    lq_source  *src     = NULL;
    cJSON      *raw     = NULL;
    cJSON      *root    = NULL;
    cJSON      *tensors = NULL; /* attached to root last so the summary reads first */
    tensor_sums ts      = {0};
    lq_status   st      = LQ_OK;
    int64_t     clen, params;
    LQ_TRY_GOTO(lq_source_open(model_dir, &src, err));
    const char            *ctext = lq_source_config(src, &clen);
    const lq_model_config *c     = lq_source_model_config(src);
    const lq_st           *sf    = lq_source_st(src);
    LQ_TRY_GOTO(lq_json_parse(ctext, (size_t)clen, lq_source_config_label(src), &raw, err));

    root = cJSON_CreateObject();
    if (!root)
        LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory", model_dir);
    cJSON_AddStringToObject(root, "model_dir", model_dir);
    add_config(root, c);
    const cJSON *qc = cJSON_GetObjectItemCaseSensitive(raw, "quantization_config");
    if (cJSON_IsObject(qc))
        cJSON_AddItemToObject(root, "quantization_config", cJSON_Duplicate(qc, 1));
    static const char *const k_tok_files[] = {"tokenizer.json", "tokenizer.model", "tokenizer.bin"};
    cJSON                   *tok           = cJSON_AddArrayToObject(root, "tokenizer_files");
    for (size_t i = 0; i < sizeof k_tok_files / sizeof *k_tok_files; i++)
        if (lq_source_has(src, k_tok_files[i]))
            cJSON_AddItemToArray(tok, cJSON_CreateString(k_tok_files[i]));

    cJSON *files = cJSON_AddArrayToObject(root, "files");
    tensors      = cJSON_CreateArray();
    if (!files || !tensors)
        LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory", model_dir);
    LQ_TRY_GOTO(walk_tensors(sf, c, files, tensors, &ts, model_dir, err));
    LQ_TRY_GOTO(add_sizes(root, sf, &ts, &params, model_dir, err));
    LQ_TRY_GOTO(add_memory(root, c, &opt, params, model_dir, err));
    cJSON_AddItemToObject(root, "tensors", tensors);
    tensors = NULL;

    char *s = cJSON_PrintUnformatted(root);
    if (!s) {
        st = json_oom(err, model_dir);
        goto done;
    }
    /* cJSON allocates with malloc: lq_free (free) releases it. */
    *report_json = s;
done:
    free(ts.mods.m);
    cJSON_Delete(tensors);
    cJSON_Delete(root);
    cJSON_Delete(raw);
    lq_source_close(src);
    return st;
}
