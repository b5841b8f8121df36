/* GGUF -> Hugging Face: architecture table, tensor names, config.json and tokenizer files.
 *
 * Facts from llama.cpp (convert_hf_to_gguf.py, src/llama-vocab.cpp, src/llama-arch.cpp) and
 * transformers (integrations/ggml.py):
 *   - tensor names: token_embd / output_norm / output and blk.N.{attn_norm, ffn_norm, attn_q,
 *     attn_k, attn_v, attn_output, ffn_gate, ffn_up, ffn_down}.{weight,bias};
 *   - dims are stored fastest first, so a [n, k] weight has ne = {k, n};
 *   - LlamaModel.permute interleaves the two rotary halves of every q/k head (llama arch only);
 *   - "gpt2" vocabularies are byte-level BPE with merges "a b"; how text is split before BPE is
 *     named by tokenizer.ggml.pre (k_pretok); "llama" vocabularies are SentencePiece with
 *     scores and token types. */
#include "lq_gguf_hf.h"

#include "lq_json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const lq_gguf_arch k_archs[] = {
    /* gguf     model_type     class            permute_qk qkv_bias qk_norm gemma fused moe */
    {"llama", "llama", "LlamaForCausalLM", 1, 0, 0, 0, 0, 0},
    {"qwen2", "qwen2", "Qwen2ForCausalLM", 0, 1, 0, 0, 0, 0},
    {"qwen3", "qwen3", "Qwen3ForCausalLM", 0, 0, 1, 0, 0, 0},
    {"gemma2", "gemma2", "Gemma2ForCausalLM", 0, 0, 0, 1, 0, 0},
    {"gemma3", "gemma3_text", "Gemma3ForCausalLM", 0, 0, 1, 1, 0, 0},
    {"phi3", "phi3", "Phi3ForCausalLM", 0, 0, 0, 0, 1, 0},
    {"qwen2moe", "qwen2_moe", "Qwen2MoeForCausalLM", 0, 1, 0, 0, 0, 2},
    {"qwen3moe", "qwen3_moe", "Qwen3MoeForCausalLM", 0, 0, 1, 0, 0, 2},
};
/* convert_hf_to_gguf.py writes Mixtral as a llama with experts */
static const lq_gguf_arch k_mixtral = {"llama", "mixtral", "MixtralForCausalLM", 1, 0, 0, 0, 0, 1};

lq_status lq_gguf_hf_arch(const lq_gguf *g, const lq_gguf_arch **out, lq_err *err) {
    const char *s;
    int64_t     n;
    *out = NULL;
    if (!lq_gguf_get_str(g, "general.architecture", &s, &n))
        LQ_FAIL(err, LQ_ERR_GGUF_FORMAT, "%s: no general.architecture", lq_gguf_path(g));
    for (size_t i = 0; i < sizeof k_archs / sizeof k_archs[0]; i++)
        if ((int64_t)strlen(k_archs[i].gguf) == n && !memcmp(k_archs[i].gguf, s, (size_t)n)) {
            int64_t e = 0;
            *out      = &k_archs[i];
            if (!strcmp(k_archs[i].gguf, "llama") && lq_gguf_get_i64(g, "llama.expert_count", &e) &&
                e > 0)
                *out = &k_mixtral;
            return LQ_OK;
        }
    char list[256] = "";
    for (size_t i = 0; i < sizeof k_archs / sizeof k_archs[0]; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                 k_archs[i].gguf);
    LQ_FAIL(err, LQ_ERR_UNSUPPORTED_ARCH, "%s: unsupported architecture %.*s (supported: %s)",
            lq_gguf_path(g), (int)(n > 64 ? 64 : n), s, list);
}

/* ---------------------------------------------------------------------------------------- */
/* Tensor names                                                                               */
/* ---------------------------------------------------------------------------------------- */
static const struct {
    const char *gguf, *hf;
    int         perm;    /* 1: q heads, 2: kv heads */
    int         qk_norm; /* exists only where the architecture has q/k norms */
    int         gemma;   /* 1: only in Gemma's layout, -1: only outside it, 0: both */
    int         fused;   /* 1: only in a fused layout (phi3), -1: only outside it, 0: both */
    int         moe;     /* only with experts: 1 Mixtral's names, 2 Qwen's, 3 either */
} k_block_names[] = {
    {"attn_norm", "input_layernorm", 0, 0, 0, 0, 0},
    {"ffn_norm", "post_attention_layernorm", 0, 0, -1, 0, 0},
    {"ffn_norm", "pre_feedforward_layernorm", 0, 0, 1, 0, 0},
    {"post_attention_norm", "post_attention_layernorm", 0, 0, 1, 0, 0},
    {"post_ffw_norm", "post_feedforward_layernorm", 0, 0, 1, 0, 0},
    {"attn_q", "self_attn.q_proj", 1, 0, 0, 0, 0},
    {"attn_k", "self_attn.k_proj", 2, 0, 0, 0, 0},
    {"attn_v", "self_attn.v_proj", 0, 0, 0, 0, 0},
    {"attn_output", "self_attn.o_proj", 0, 0, 0, 0, 0},
    {"ffn_gate", "mlp.gate_proj", 0, 0, 0, 0, 0},
    {"ffn_up", "mlp.up_proj", 0, 0, 0, -1, 0},
    {"ffn_up", "mlp.gate_up_proj", 0, 0, 0, 1, 0},
    {"attn_qkv", "self_attn.qkv_proj", 0, 0, 0, 1, 0},
    {"ffn_down", "mlp.down_proj", 0, 0, 0, 0, 0},
    {"attn_q_norm", "self_attn.q_norm", 0, 1, 0, 0, 0},
    {"attn_k_norm", "self_attn.k_norm", 0, 1, 0, 0, 0},
    /* experts: '*' is the expert's index (one HF tensor per slice of the stacked one) */
    {"ffn_gate_inp", "block_sparse_moe.gate", 0, 0, 0, 0, 1},
    {"ffn_gate_exps", "block_sparse_moe.experts.*.w1", 0, 0, 0, 0, 1},
    {"ffn_up_exps", "block_sparse_moe.experts.*.w3", 0, 0, 0, 0, 1},
    {"ffn_down_exps", "block_sparse_moe.experts.*.w2", 0, 0, 0, 0, 1},
    {"ffn_gate_inp", "mlp.gate", 0, 0, 0, 0, 2},
    {"ffn_gate_exps", "mlp.experts.*.gate_proj", 0, 0, 0, 0, 2},
    {"ffn_up_exps", "mlp.experts.*.up_proj", 0, 0, 0, 0, 2},
    {"ffn_down_exps", "mlp.experts.*.down_proj", 0, 0, 0, 0, 2},
    {"ffn_gate_shexp", "mlp.shared_expert.gate_proj", 0, 0, 0, 0, 2},
    {"ffn_up_shexp", "mlp.shared_expert.up_proj", 0, 0, 0, 0, 2},
    {"ffn_down_shexp", "mlp.shared_expert.down_proj", 0, 0, 0, 0, 2},
    {"ffn_gate_inp_shexp", "mlp.shared_expert_gate", 0, 0, 0, 0, 2},
};

bool lq_gguf_hf_is_stacked(const char *hf) {
    return strchr(hf, '*') != NULL;
}
static const struct {
    const char *gguf, *hf;
} k_global_names[] = {
    {"token_embd", "model.embed_tokens"}, {"output_norm", "model.norm"}, {"output", "lm_head"}};

static int64_t arch_key_i64(const lq_gguf *g, const lq_gguf_arch *a, const char *key, int64_t def) {
    char    k[128];
    int64_t v;
    snprintf(k, sizeof k, "%s.%s", a->gguf, key);
    return lq_gguf_get_i64(g, k, &v) ? v : def;
}

bool lq_gguf_hf_tensor_name(const lq_gguf *g, const lq_gguf_arch *a, const char *name, char *hf,
                            size_t cap, int *perm_heads) {
    *perm_heads        = 0;
    const char *suffix = strrchr(name, '.');
    if (!suffix || (strcmp(suffix, ".weight") && strcmp(suffix, ".bias")))
        return false;
    const size_t stem = (size_t)(suffix - name);
    for (size_t i = 0; i < sizeof k_global_names / sizeof k_global_names[0]; i++)
        if (strlen(k_global_names[i].gguf) == stem && !strncmp(name, k_global_names[i].gguf, stem))
            return snprintf(hf, cap, "%s%s", k_global_names[i].hf, suffix) < (int)cap;
    long long layer;
    int       used = 0;
    if (sscanf(name, "blk.%lld.%n", &layer, &used) != 1 || used == 0 || layer < 0)
        return false;
    const char  *part = name + used;
    const size_t plen = (size_t)(suffix - part);
    for (size_t i = 0; i < sizeof k_block_names / sizeof k_block_names[0]; i++) {
        if (strlen(k_block_names[i].gguf) != plen || strncmp(part, k_block_names[i].gguf, plen))
            continue;
        if ((k_block_names[i].qk_norm && !a->qk_norm) ||
            (k_block_names[i].gemma && k_block_names[i].gemma != (a->gemma ? 1 : -1)) ||
            (k_block_names[i].fused && k_block_names[i].fused != (a->fused ? 1 : -1)) ||
            (k_block_names[i].moe && k_block_names[i].moe != a->moe))
            continue;
        if (a->permute_qk && k_block_names[i].perm) {
            const int64_t nh = arch_key_i64(g, a, "attention.head_count", 0);
            *perm_heads      = (int)(k_block_names[i].perm == 1
                                         ? nh
                                         : arch_key_i64(g, a, "attention.head_count_kv", nh));
        }
        return snprintf(hf, cap, "model.layers.%lld.%s%s", layer, k_block_names[i].hf, suffix) <
               (int)cap;
    }
    return false;
}

bool lq_gguf_hf_tensor_is_config(const lq_gguf_arch *a, const char *name) {
    return a->fused && (!strcmp(name, "rope_factors_long.weight") ||
                        !strcmp(name, "rope_factors_short.weight"));
}

static double f32_decimal(double v);

/* phi3: sliding window, original context and LongRoPE's factor lists (llama.cpp keeps those
 * as the float32 tensors rope_factors_short / rope_factors_long of head_dim / 2 values). */
static bool phi3_config(const lq_gguf *g, const lq_gguf_arch *a, cJSON *r, int64_t head_dim,
                        lq_err *err) {
    const int64_t sw = arch_key_i64(g, a, "attention.sliding_window", 0);
    if (sw > 0)
        cJSON_AddNumberToObject(r, "sliding_window", (double)sw);
    else
        cJSON_AddNullToObject(r, "sliding_window");
    const int64_t orig = arch_key_i64(g, a, "rope.scaling.original_context_length", 0);
    if (orig > 0)
        cJSON_AddNumberToObject(r, "original_max_position_embeddings", (double)orig);
    const lq_gguf_tensor *lf = lq_gguf_tensor_find(g, "rope_factors_long.weight");
    const lq_gguf_tensor *sf = lq_gguf_tensor_find(g, "rope_factors_short.weight");
    if (!lf && !sf)
        return true;
    const lq_gguf_tensor *t[2] = {sf, lf};
    for (int i = 0; i < 2; i++)
        if (!t[i] || t[i]->ggml_type != 0 /* F32 */ || t[i]->ndim != 1 ||
            t[i]->ne[0] != head_dim / 2 || orig <= 0) {
            lq_fail(err, LQ_ERR_GGUF_FORMAT,
                    "%s: LongRoPE needs rope_factors_short and rope_factors_long as float32 "
                    "[%lld] and %s.rope.scaling.original_context_length",
                    lq_gguf_path(g), (long long)(head_dim / 2), a->gguf);
            return false;
        }
    cJSON_DeleteItemFromObject(r, "rope_scaling");
    cJSON *o = cJSON_AddObjectToObject(r, "rope_scaling");
    cJSON_AddStringToObject(o, "type", "longrope");
    const char *names[2] = {"short_factor", "long_factor"};
    for (int i = 0; i < 2; i++) {
        cJSON *arr = cJSON_AddArrayToObject(o, names[i]);
        for (int64_t j = 0; j < head_dim / 2; j++) {
            float f;
            memcpy(&f, t[i]->data + 4 * j, sizeof f);
            cJSON_AddItemToArray(arr, cJSON_CreateNumber(f32_decimal(f)));
        }
    }
    return true;
}

float lq_gguf_hf_shift(const lq_gguf_arch *a, const char *hf_name) {
    const size_t n = strlen(hf_name), s = strlen("norm.weight");
    return a->gemma && n >= s && !strcmp(hf_name + n - s, "norm.weight") ? 1.0f : 0.0f;
}

bool lq_gguf_unpermute_rows(float *w, int64_t n, int64_t k, int heads) {
    if (heads <= 0 || n % heads || (n / heads) % 2)
        return false;
    const int64_t hd = n / heads, half = hd / 2;
    float        *tmp = lq_malloc_n(hd * k, sizeof(float));
    if (!tmp)
        return false;
    for (int64_t h = 0; h < heads; h++) {
        float *blk = w + h * hd * k;
        memcpy(tmp, blk, (size_t)(hd * k) * sizeof(float));
        for (int64_t i = 0; i < half; i++)
            for (int64_t j = 0; j < 2; j++)
                memcpy(blk + (j * half + i) * k, tmp + (2 * i + j) * k, (size_t)k * sizeof(float));
    }
    free(tmp);
    return true;
}

/* ---------------------------------------------------------------------------------------- */
/* config.json                                                                                */
/* ---------------------------------------------------------------------------------------- */
/* GGUF stores these as float32: write the shortest decimal that reads back as the same float32
 * (1e-05, not 9.999999747378752e-06), which is the value the original config.json held. */
static double f32_decimal(double v) {
    const float f = (float)v;
    char        buf[64];
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, (double)f);
        if (strtof(buf, NULL) == f)
            return strtod(buf, NULL);
    }
    return (double)f;
}

static const lq_gguf_kv *vocab_tokens(const lq_gguf *g) {
    const lq_gguf_kv *kv = lq_gguf_find(g, "tokenizer.ggml.tokens");
    return kv && kv->type == LQ_GGUF_ARRAY && kv->atype == LQ_GGUF_STRING ? kv : NULL;
}

static int64_t special_id(const lq_gguf *g, const char *which, int64_t def) {
    char    k[96];
    int64_t v;
    snprintf(k, sizeof k, "tokenizer.ggml.%s_token_id", which);
    return lq_gguf_get_i64(g, k, &v) ? v : def;
}

/* llama.cpp's defaults when the ids are not in the file. */
static int is_spm(const lq_gguf *g) {
    const char *m;
    int64_t     n;
    return lq_gguf_get_str(g, "tokenizer.ggml.model", &m, &n) && n == 5 && !memcmp(m, "llama", 5);
}

/* Gemma 2/3 hyper-parameters as llama.cpp reads them (src/models/gemma2.cpp, gemma3.cpp):
 * GeGLU; attention scale 1/sqrt(head_dim) except the 27B models (1/sqrt(hidden / heads));
 * soft-capping keys; a sliding window on all layers but every n-th (the pattern, 2 or 6, or a
 * per-layer list); the sliding layers' RoPE base (10000 unless rope.freq_base_swa). */
static bool gemma_config(const lq_gguf *g, const lq_gguf_arch *a, cJSON *r, int64_t layers,
                         int64_t hidden, int64_t heads, int64_t head_dim, lq_err *err) {
    const int g3 = !strcmp(a->gguf, "gemma3");
    char      k[128];
    cJSON_ReplaceItemInObject(r, "hidden_act", cJSON_CreateString("gelu_pytorch_tanh"));
    cJSON_AddStringToObject(r, "hidden_activation", "gelu_pytorch_tanh");
    const int big = layers == (g3 ? 62 : 46);
    cJSON_AddNumberToObject(r, "query_pre_attn_scalar", (double)(big ? hidden / heads : head_dim));
    const char *caps[2] = {"attn_logit_softcapping", "final_logit_softcapping"};
    for (int i = 0; i < 2; i++) {
        double v = 0;
        snprintf(k, sizeof k, "%s.%s", a->gguf, caps[i]);
        if (lq_gguf_get_f64(g, k, &v) && v > 0)
            cJSON_AddNumberToObject(r, caps[i], f32_decimal(v));
        else
            cJSON_AddNullToObject(r, caps[i]);
    }
    int64_t sw = arch_key_i64(g, a, "attention.sliding_window", 0);
    if (sw > 0) {
        cJSON_AddNumberToObject(r, "sliding_window", (double)sw);
        snprintf(k, sizeof k, "%s.attention.sliding_window_pattern", a->gguf);
        const lq_gguf_kv *pk  = lq_gguf_find(g, k);
        const int         arr = pk && pk->type == LQ_GGUF_ARRAY;
        int64_t           pat = g3 ? 6 : 2, v;
        if (arr && pk->n != layers) {
            lq_fail(err, LQ_ERR_GGUF_FORMAT, "%s: %s lists %lld layers, not %lld", lq_gguf_path(g),
                    k, (long long)pk->n, (long long)layers);
            return false;
        }
        cJSON *lt = cJSON_AddArrayToObject(r, "layer_types");
        for (int64_t i = 0; i < layers; i++) {
            int swa;
            if (arr && lq_gguf_arr_i64(pk, i, &v)) /* per-layer list of is_swa */
                swa = v != 0;
            else if (pk && lq_gguf_get_i64(g, k, &pat) && pat < 1)
                swa = 1; /* a pattern of 0: every layer slides */
            else
                swa = i % pat < pat - 1;
            cJSON_AddItemToArray(lt,
                                 cJSON_CreateString(swa ? "sliding_attention" : "full_attention"));
        }
    } else {
        cJSON_AddNullToObject(r, "sliding_window");
    }
    if (g3) {
        double local = 10000.0;
        snprintf(k, sizeof k, "%s.rope.freq_base_swa", a->gguf);
        lq_gguf_get_f64(g, k, &local);
        cJSON_AddNumberToObject(r, "rope_local_base_freq", f32_decimal(local));
    }
    return true;
}

lq_status lq_gguf_hf_config(const lq_gguf *g, const lq_gguf_arch *a, const char *torch_dtype,
                            char **json, int64_t *len, lq_err *err) {
    const char *path = lq_gguf_path(g);
    *json            = NULL;
    char k[128];
#define REQ(var, key)                                                                              \
    do {                                                                                           \
        snprintf(k, sizeof k, "%s.%s", a->gguf, key);                                              \
        if (!lq_gguf_get_i64(g, k, &var) || var < 1)                                               \
            LQ_FAIL(err, LQ_ERR_GGUF_FORMAT, "%s: %s missing or not a positive integer", path, k); \
    } while (0)
    int64_t layers, hidden, ff, heads;
    REQ(layers, "block_count");
    REQ(hidden, "embedding_length");
    REQ(ff, "feed_forward_length");
    REQ(heads, "attention.head_count");
#undef REQ
    /* config.json's own limit; a Gemma config lists every layer's type */
    if (layers > (int64_t)1 << 16)
        LQ_FAIL(err, LQ_ERR_GGUF_FORMAT,
                "%s: %s.block_count %lld is not a real model (at most 65536)", path, a->gguf,
                (long long)layers);
    const int64_t kv_heads = arch_key_i64(g, a, "attention.head_count_kv", heads);
    const int64_t ctx      = arch_key_i64(g, a, "context_length", 2048);
    int64_t       head_dim = arch_key_i64(g, a, "attention.key_length", 0);
    if (head_dim <= 0)
        head_dim = arch_key_i64(g, a, "rope.dimension_count", 0);
    if (head_dim <= 0)
        head_dim = hidden / heads;
    double eps = 1e-6, theta = 10000.0;
    snprintf(k, sizeof k, "%s.attention.layer_norm_rms_epsilon", a->gguf);
    lq_gguf_get_f64(g, k, &eps);
    snprintf(k, sizeof k, "%s.rope.freq_base", a->gguf);
    lq_gguf_get_f64(g, k, &theta);
    snprintf(k, sizeof k, "%s.rope.dimension_count", a->gguf);
    int64_t rot;
    if (lq_gguf_get_i64(g, k, &rot) && rot != head_dim)
        LQ_FAIL(err, LQ_ERR_UNSUPPORTED_ARCH,
                "%s: partial rotary embedding (%s %lld of head_dim %lld) is not supported", path, k,
                (long long)rot, (long long)head_dim);
    const lq_gguf_kv *toks  = vocab_tokens(g);
    int64_t           vocab = toks ? toks->n : arch_key_i64(g, a, "vocab_size", 0);
    if (vocab <= 0)
        LQ_FAIL(err, LQ_ERR_GGUF_FORMAT, "%s: no tokenizer.ggml.tokens and no %s.vocab_size", path,
                a->gguf);
    const lq_gguf_tensor *emb = lq_gguf_tensor_find(g, "token_embd.weight");
    if (emb && emb->ndim == 2 && emb->ne[1] != vocab)
        vocab = emb->ne[1]; /* padded embeddings: the tensor is what the model computes with */

    cJSON *r    = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(r, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString(a->hf_class));
    cJSON_AddStringToObject(r, "model_type", a->model_type);
    cJSON_AddNumberToObject(r, "hidden_size", (double)hidden);
    cJSON_AddNumberToObject(r, "intermediate_size", (double)ff);
    cJSON_AddNumberToObject(r, "num_hidden_layers", (double)layers);
    cJSON_AddNumberToObject(r, "num_attention_heads", (double)heads);
    cJSON_AddNumberToObject(r, "num_key_value_heads", (double)kv_heads);
    cJSON_AddNumberToObject(r, "head_dim", (double)head_dim);
    cJSON_AddNumberToObject(r, "max_position_embeddings", (double)ctx);
    cJSON_AddNumberToObject(r, "rms_norm_eps", f32_decimal(eps));
    cJSON_AddNumberToObject(r, "rope_theta", f32_decimal(theta));
    cJSON_AddNumberToObject(r, "vocab_size", (double)vocab);
    cJSON_AddStringToObject(r, "hidden_act", "silu");
    /* biases beyond the architecture's own (qwen2's q/k/v): llama's attention_bias / mlp_bias,
     * so that a file holding them is computed with them */
    cJSON_AddBoolToObject(r, "attention_bias",
                          !a->qkv_bias && lq_gguf_tensor_find(g, "blk.0.attn_output.bias"));
    cJSON_AddBoolToObject(r, "mlp_bias", lq_gguf_tensor_find(g, "blk.0.ffn_up.bias") != NULL);
    cJSON_AddBoolToObject(r, "tie_word_embeddings", !lq_gguf_tensor_find(g, "output.weight"));
    const int spm = is_spm(g);
    int64_t   bos = special_id(g, "bos", spm ? 1 : -1), eos = special_id(g, "eos", spm ? 2 : -1);
    int64_t   pad = special_id(g, "padding", -1);
    if (bos >= 0)
        cJSON_AddNumberToObject(r, "bos_token_id", (double)bos);
    else
        cJSON_AddNullToObject(r, "bos_token_id");
    if (eos >= 0)
        cJSON_AddNumberToObject(r, "eos_token_id", (double)eos);
    else
        cJSON_AddNullToObject(r, "eos_token_id");
    if (pad >= 0)
        cJSON_AddNumberToObject(r, "pad_token_id", (double)pad);
    if (!strncmp(a->model_type, "qwen", 4))
        cJSON_AddBoolToObject(r, "use_sliding_window", 0);
    /* RoPE scaling: linear is the only kind the llama mapping carries in metadata; the rest
     * (yarn, rope_freqs tensors of Llama 3.1) would run wrongly, so they are refused. */
    const char *rs;
    int64_t     rsl;
    snprintf(k, sizeof k, "%s.rope.scaling.type", a->gguf);
    if (lq_gguf_get_str(g, k, &rs, &rsl) && !(rsl == 4 && !memcmp(rs, "none", 4))) {
        double f = 1;
        snprintf(k, sizeof k, "%s.rope.scaling.factor", a->gguf);
        if (!(rsl == 6 && !memcmp(rs, "linear", 6)) || !lq_gguf_get_f64(g, k, &f) || !(f > 0)) {
            cJSON_Delete(r);
            LQ_FAIL(err, LQ_ERR_UNSUPPORTED_ARCH,
                    "%s: RoPE scaling \"%.*s\" is not supported (linear with a factor is)", path,
                    (int)(rsl > 32 ? 32 : rsl), rs);
        }
        cJSON *o = cJSON_AddObjectToObject(r, "rope_scaling");
        cJSON_AddStringToObject(o, "type", "linear");
        cJSON_AddNumberToObject(o, "factor", f32_decimal(f));
    } else {
        cJSON_AddNullToObject(r, "rope_scaling");
    }
    if (a->moe) {
        /* llama.cpp's graphs: Mixtral and Qwen3-MoE renormalize the chosen experts' weights,
         * Qwen2-MoE does not (build_moe_ffn's norm_w), whatever the original config said */
        const int64_t ne = arch_key_i64(g, a, "expert_count", 0);
        const int64_t nu = arch_key_i64(g, a, "expert_used_count", 0);
        if (ne < 1 || nu < 1 || nu > ne) {
            cJSON_Delete(r);
            LQ_FAIL(err, LQ_ERR_GGUF_FORMAT,
                    "%s: %s.expert_count %lld / expert_used_count %lld are not a mixture of "
                    "experts",
                    path, a->gguf, (long long)ne, (long long)nu);
        }
        cJSON_AddNumberToObject(r, a->moe == 1 ? "num_local_experts" : "num_experts", (double)ne);
        cJSON_AddNumberToObject(r, "num_experts_per_tok", (double)nu);
        if (a->moe == 2) {
            cJSON_AddNumberToObject(r, "moe_intermediate_size",
                                    (double)arch_key_i64(g, a, "expert_feed_forward_length", ff));
            cJSON_AddNumberToObject(
                r, "shared_expert_intermediate_size",
                (double)arch_key_i64(g, a, "expert_shared_feed_forward_length", 0));
            cJSON_AddBoolToObject(r, "norm_topk_prob", !strcmp(a->gguf, "qwen3moe"));
        }
    }
    if ((a->gemma && !gemma_config(g, a, r, layers, hidden, heads, head_dim, err)) ||
        (a->fused && !phi3_config(g, a, r, head_dim, err))) {
        cJSON_Delete(r);
        return err ? err->code : LQ_ERR_GGUF_FORMAT;
    }
    cJSON_AddStringToObject(r, "torch_dtype", torch_dtype);
    cJSON_AddBoolToObject(r, "use_cache", 1);
    cJSON_AddStringToObject(r, "transformers_version", "4.46.0");
    char *s = cJSON_Print(r);
    cJSON_Delete(r);
    if (!s)
        LQ_FAIL(err, LQ_ERR_NOMEM, "%s: out of memory", path);
    *json = s;
    *len  = (int64_t)strlen(s);
    return LQ_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Tokenizer files                                                                            */
/* ---------------------------------------------------------------------------------------- */
enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };

/* BPE pre-tokenizers: tokenizer.ggml.pre -> the tokenizer.json "pre_tokenizer" transformers
 * uses for the same models (llama-vocab.cpp gives llama.cpp's equivalent regexes). */
#define BYTELEVEL(rx)                                                                              \
    "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":" rx "}"
#define LLAMA3_RX                                                                                  \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| "         \
    "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+"
#define QWEN2_RX                                                                                   \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}| "              \
    "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+"
#define SPLIT(rx)                                                                                  \
    "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"" rx "\"},\"behavior\":\"Isolated\","            \
    "\"invert\":false}"
static const struct {
    const char *names; /* '|'-separated tokenizer.ggml.pre values */
    const char *pre_tokenizer;
    int         ignore_merges, add_bos;
} k_pretok[] = {
    {"gpt-2|gpt2|phi-2", BYTELEVEL("true"), 0, 0},
    {"smollm|starcoder|refact|codeshell",
     "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Digits\",\"individual_digits\":true}"
     "," BYTELEVEL("true") "]}",
     0, 0},
    {"llama3|llama-v3|llama-bpe|falcon3",
     "{\"type\":\"Sequence\",\"pretokenizers\":[" SPLIT(LLAMA3_RX) "," BYTELEVEL("false") "]}", 1,
     1},
    {"qwen2|deepseek-r1-qwen",
     "{\"type\":\"Sequence\",\"pretokenizers\":[" SPLIT(QWEN2_RX) "," BYTELEVEL("false") "]}", 0,
     0},
};

static int name_in(const char *list, const char *s, int64_t n) {
    for (const char *p = list; *p;) {
        const char  *e = strchr(p, '|');
        const size_t l = e ? (size_t)(e - p) : strlen(p);
        if ((int64_t)l == n && !memcmp(p, s, l))
            return 1;
        p += l + (e != NULL);
    }
    return 0;
}

static cJSON *str_n(const char *s, int64_t n) {
    char *t = lq_strndup(s, n);
    if (!t)
        return NULL;
    cJSON *j = cJSON_CreateString(t);
    free(t);
    return j;
}

typedef struct vocab {
    const lq_gguf_kv *tokens, *types, *scores, *merges;
    int64_t           n;
    int               spm;
    int64_t           bos, eos, unk, pad;
    int               add_bos, add_eos, add_prefix, remove_extra_ws;
    char              model[32], pre[64];
} vocab;

static lq_status load_vocab(const lq_gguf *g, vocab *v, lq_err *err) {
    const char *path = lq_gguf_path(g), *s;
    int64_t     n;
    memset(v, 0, sizeof *v);
    if (!lq_gguf_get_str(g, "tokenizer.ggml.model", &s, &n))
        LQ_FAIL(err, LQ_ERR_GGUF_TOKENIZER, "%s: no tokenizer (tokenizer.ggml.model is missing)",
                path);
    snprintf(v->model, sizeof v->model, "%.*s", (int)(n < 31 ? n : 31), s);
    if (lq_gguf_get_str(g, "tokenizer.ggml.pre", &s, &n))
        snprintf(v->pre, sizeof v->pre, "%.*s", (int)(n < 63 ? n : 63), s);
    v->tokens = vocab_tokens(g);
    if (!v->tokens || v->tokens->n < 1)
        LQ_FAIL(err, LQ_ERR_GGUF_TOKENIZER, "%s: tokenizer.ggml.tokens missing or empty", path);
    v->n      = v->tokens->n;
    v->types  = lq_gguf_find(g, "tokenizer.ggml.token_type");
    v->scores = lq_gguf_find(g, "tokenizer.ggml.scores");
    v->merges = lq_gguf_find(g, "tokenizer.ggml.merges");
    if (v->types && (v->types->type != LQ_GGUF_ARRAY || v->types->n != v->n ||
                     v->types->atype == LQ_GGUF_STRING))
        LQ_FAIL(err, LQ_ERR_GGUF_TOKENIZER,
                "%s: tokenizer.ggml.token_type has %lld entries for %lld "
                "tokens",
                path, (long long)v->types->n, (long long)v->n);
    if (v->scores && (v->scores->type != LQ_GGUF_ARRAY || v->scores->n != v->n ||
                      v->scores->atype == LQ_GGUF_STRING))
        LQ_FAIL(err, LQ_ERR_GGUF_TOKENIZER,
                "%s: tokenizer.ggml.scores has %lld entries for %lld "
                "tokens",
                path, (long long)v->scores->n, (long long)v->n);
    v->spm = !strcmp(v->model, "llama");
    if (!v->spm && strcmp(v->model, "gpt2"))
        LQ_FAIL(err, LQ_ERR_GGUF_TOKENIZER,
                "%s: tokenizer.ggml.model \"%s\" is not supported (gpt2 BPE and llama "
                "SentencePiece are)",
                path, v->model);
    v->bos          = special_id(g, "bos", v->spm ? 1 : -1);
    v->eos          = special_id(g, "eos", v->spm ? 2 : -1);
    v->unk          = special_id(g, "unknown", v->spm ? 0 : -1);
    v->pad          = special_id(g, "padding", -1);
    int64_t *ids[4] = {&v->bos, &v->eos, &v->unk, &v->pad};
    for (int i = 0; i < 4; i++)
        if (*ids[i] >= v->n)
            *ids[i] = -1; /* llama.cpp ignores out-of-range special ids too */
    bool b;
    v->add_bos    = v->spm;
    v->add_prefix = v->spm;
    if (!v->spm) {
        size_t i;
        for (i = 0; i < sizeof k_pretok / sizeof k_pretok[0]; i++)
            if (name_in(k_pretok[i].names, v->pre, (int64_t)strlen(v->pre)))
                break;
        if (i == sizeof k_pretok / sizeof k_pretok[0])
            LQ_FAIL(err, LQ_ERR_GGUF_TOKENIZER,
                    "%s: BPE pre-tokenizer \"%s\" (tokenizer.ggml.pre) is not supported "
                    "(gpt-2, smollm, starcoder, llama3, qwen2, ...)",
                    path, v->pre);
        v->add_bos = k_pretok[i].add_bos;
        if (!v->merges || v->merges->type != LQ_GGUF_ARRAY || v->merges->atype != LQ_GGUF_STRING)
            LQ_FAIL(err, LQ_ERR_GGUF_TOKENIZER, "%s: BPE vocabulary without tokenizer.ggml.merges",
                    path);
    }
    if (lq_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b))
        v->add_bos = b;
    if (lq_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &b))
        v->add_eos = b;
    if (lq_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &b))
        v->add_prefix = b;
    if (lq_gguf_get_bool(g, "tokenizer.ggml.remove_extra_whitespaces", &b))
        v->remove_extra_ws = b;
    if (v->add_bos && v->bos < 0)
        v->add_bos = 0;
    return LQ_OK;
}

static int token_type(const vocab *v, int64_t i) {
    int64_t t = TT_NORMAL;
    if (v->types)
        lq_gguf_arr_i64(v->types, i, &t);
    return (int)t;
}

static cJSON *token_str(const lq_gguf *g, const vocab *v, int64_t i) {
    const char *s;
    int64_t     n;
    return i >= 0 && lq_gguf_arr_str(g, v->tokens, i, &s, &n) ? str_n(s, n) : cJSON_CreateNull();
}

/* Set of token strings (open addressing over token ids) to keep the first id of a repeated
 * string: a JSON object cannot hold a key twice. */
typedef struct strset {
    int64_t *slot; /* token id + 1, 0 = empty */
    int64_t  cap;
} strset;

static uint64_t fnv1a(const char *s, int64_t n) {
    uint64_t h = 1469598103934665603ull;
    for (int64_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

/* 1: added, 0: already there. */
static int strset_add(strset *set, const lq_gguf *g, const lq_gguf_kv *toks, int64_t id) {
    const char *s, *o;
    int64_t     n, on;
    lq_gguf_arr_str(g, toks, id, &s, &n);
    for (uint64_t h = fnv1a(s, n) & (uint64_t)(set->cap - 1);;
         h          = (h + 1) & (uint64_t)(set->cap - 1)) {
        if (!set->slot[h]) {
            set->slot[h] = id + 1;
            return 1;
        }
        lq_gguf_arr_str(g, toks, set->slot[h] - 1, &o, &on);
        if (on == n && !memcmp(o, s, (size_t)n))
            return 0;
    }
}

/* convert_hf_to_gguf.py "pre-normalizes" the spaces of user-defined pieces (U+2581 -> ' ',
 * llama.cpp matches them in the raw text); SentencePiece and Hugging Face match them in the
 * normalized text, so the piece gets its U+2581 back. A new string (*len bytes), or NULL when
 * the piece has no space (or on out of memory: *len = -1). */
static char *spm_user_piece(const char *s, int64_t n, int64_t *len) {
    *len = n;
    if (!memchr(s, ' ', (size_t)n))
        return NULL;
    char *u = lq_malloc_n(n, 3);
    if (!u) {
        *len = -1;
        return NULL;
    }
    int64_t o = 0;
    for (int64_t b = 0; b < n; b++)
        if (s[b] == ' ')
            memcpy(u + o, "\xe2\x96\x81", 3), o += 3;
        else
            u[o++] = s[b];
    *len = o;
    return u;
}

/* Hugging Face's entry for a CONTROL (special) or USER_DEFINED piece, NULL for other types:
 * tokenizer.json's added_tokens and tokenizer_config.json's added_tokens_decoder hold it.
 * Without it llama.cpp's convert_hf_to_gguf.py types a SentencePiece user-defined piece (Gemma's
 * runs of spaces, tabs and newlines) NORMAL and its tokenizer then splits code differently. */
static cJSON *added_token(int64_t id, int ty, const cJSON *content, int normalized) {
    if (ty != TT_CONTROL && ty != TT_USER)
        return NULL;
    cJSON *a = cJSON_CreateObject();
    if (id >= 0) /* tokenizer.json's list names the id; the decoder map is keyed by it */
        cJSON_AddNumberToObject(a, "id", (double)id);
    cJSON_AddItemToObject(a, "content", cJSON_Duplicate(content, 0));
    cJSON_AddBoolToObject(a, "single_word", 0);
    cJSON_AddBoolToObject(a, "lstrip", 0);
    cJSON_AddBoolToObject(a, "rstrip", 0);
    cJSON_AddBoolToObject(a, "normalized", normalized && ty == TT_USER);
    cJSON_AddBoolToObject(a, "special", ty == TT_CONTROL);
    return a;
}

/* tokenizer_config.json's added_tokens_decoder of a SentencePiece vocabulary: each piece as
 * tokenizer.model holds it, user-defined ones matched in the normalized text (spaces as U+2581),
 * as SentencePiece matches them; a content that is not the model's piece would be a new token to
 * Hugging Face, past the vocabulary. */
static cJSON *spm_added_tokens(const lq_gguf *g, const vocab *v) {
    cJSON *d = cJSON_CreateObject();
    for (int64_t t = 0; d && t < v->n; t++) {
        const char *s;
        int64_t     n;
        const int   ty = token_type(v, t);
        if ((ty != TT_CONTROL && ty != TT_USER) || !lq_gguf_arr_str(g, v->tokens, t, &s, &n))
            continue;
        int64_t un;
        char   *u   = ty == TT_USER ? spm_user_piece(s, n, &un) : NULL;
        cJSON  *str = u ? str_n(u, un) : str_n(s, n);
        cJSON  *a   = str ? added_token(-1, ty, str, 1) : NULL;
        free(u);
        cJSON_Delete(str);
        char key[24];
        snprintf(key, sizeof key, "%lld", (long long)t);
        if (!a || !cJSON_AddItemToObject(d, key, a)) {
            cJSON_Delete(a);
            cJSON_Delete(d);
            return NULL;
        }
    }
    return d;
}

static lq_status bpe_tokenizer_json(const lq_gguf *g, const vocab *v, char **out, lq_err *err) {
    strset set = {NULL, 64};
    while (set.cap < 2 * v->n)
        set.cap *= 2;
    if (!(set.slot = lq_calloc_n(set.cap, sizeof *set.slot)))
        LQ_FAIL(err, LQ_ERR_NOMEM, "%s: out of memory", lq_gguf_path(g));
    size_t i;
    for (i = 0; i < sizeof k_pretok / sizeof k_pretok[0]; i++)
        if (name_in(k_pretok[i].names, v->pre, (int64_t)strlen(v->pre)))
            break;
    cJSON *pre = cJSON_Parse(k_pretok[i].pre_tokenizer);
    cJSON *r   = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "version", "1.0");
    cJSON_AddNullToObject(r, "truncation");
    cJSON_AddNullToObject(r, "padding");
    cJSON *added = cJSON_AddArrayToObject(r, "added_tokens");
    cJSON *model = cJSON_CreateObject();
    cJSON *vmap  = cJSON_CreateObject();
    for (int64_t t = 0; t < v->n; t++) {
        const char *s;
        int64_t     n;
        lq_gguf_arr_str(g, v->tokens, t, &s, &n);
        if (memchr(s, 0, (size_t)n)) {
            free(set.slot);
            cJSON_Delete(pre);
            cJSON_Delete(r);
            cJSON_Delete(model);
            cJSON_Delete(vmap);
            LQ_FAIL(err, LQ_ERR_GGUF_TOKENIZER, "%s: token %lld contains a NUL byte",
                    lq_gguf_path(g), (long long)t);
        }
        cJSON *str = str_n(s, n);
        if (!str)
            break;
        cJSON *a = added_token(t, token_type(v, t), str, 1);
        if (a)
            cJSON_AddItemToArray(added, a);
        /* a repeated token string keeps its first id, as llama.cpp's token_to_id does */
        if (strset_add(&set, g, v->tokens, t))
            cJSON_AddNumberToObject(vmap, str->valuestring, (double)t);
        cJSON_Delete(str);
    }
    free(set.slot);
    cJSON_AddNullToObject(r, "normalizer");
    cJSON_AddItemToObject(r, "pre_tokenizer", pre);
    if (v->add_bos) {
        char   tp[1024];
        cJSON *bos = token_str(g, v, v->bos);
        snprintf(tp, sizeof tp,
                 "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"%s\","
                 "\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"pair\":[],"
                 "\"special_tokens\":{}}",
                 cJSON_IsString(bos) ? bos->valuestring : "");
        cJSON *pp = cJSON_Parse(tp);
        /* the bos string goes in through cJSON so any quote or backslash in it is escaped */
        if (pp) {
            cJSON *single = cJSON_GetArrayItem(cJSON_GetObjectItem(pp, "single"), 0);
            cJSON *tok    = cJSON_GetObjectItem(single, "SpecialToken");
            cJSON_ReplaceItemInObject(tok, "id", cJSON_Duplicate(bos, 0));
            cJSON *st = cJSON_GetObjectItem(pp, "special_tokens");
            cJSON *e  = cJSON_CreateObject();
            cJSON_AddItemToObject(e, "id", cJSON_Duplicate(bos, 0));
            cJSON *ids = cJSON_AddArrayToObject(e, "ids");
            cJSON_AddItemToArray(ids, cJSON_CreateNumber((double)v->bos));
            cJSON *toks = cJSON_AddArrayToObject(e, "tokens");
            cJSON_AddItemToArray(toks, cJSON_Duplicate(bos, 0));
            cJSON_AddItemToObject(st, cJSON_IsString(bos) ? bos->valuestring : "", e);
        }
        cJSON_Delete(bos);
        cJSON_AddItemToObject(r, "post_processor", pp);
    } else {
        cJSON_AddItemToObject(
            r, "post_processor",
            cJSON_Parse("{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":false,"
                        "\"use_regex\":true}"));
    }
    cJSON_AddItemToObject(
        r, "decoder",
        cJSON_Parse("{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":true,"
                    "\"use_regex\":true}"));
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddNullToObject(model, "dropout");
    cJSON_AddNullToObject(model, "unk_token");
    cJSON_AddNullToObject(model, "continuing_subword_prefix");
    cJSON_AddNullToObject(model, "end_of_word_suffix");
    cJSON_AddBoolToObject(model, "fuse_unk", 0);
    cJSON_AddBoolToObject(model, "byte_fallback", 0);
    cJSON_AddBoolToObject(model, "ignore_merges", k_pretok[i].ignore_merges);
    cJSON_AddItemToObject(model, "vocab", vmap);
    cJSON *merges = cJSON_AddArrayToObject(model, "merges");
    for (int64_t m = 0; m < v->merges->n; m++) {
        const char *s;
        int64_t     n;
        lq_gguf_arr_str(g, v->merges, m, &s, &n);
        cJSON_AddItemToArray(merges, str_n(s, n));
    }
    cJSON_AddItemToObject(r, "model", model);
    char *txt = cJSON_PrintUnformatted(r);
    cJSON_Delete(r);
    if (!txt)
        LQ_FAIL(err, LQ_ERR_NOMEM, "%s: out of memory building tokenizer.json", lq_gguf_path(g));
    *out = txt;
    return LQ_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* SentencePiece model proto                                                                  */
/* ---------------------------------------------------------------------------------------- */
static void pb_put(lq_buf *b, const void *d, int64_t n) {
    lq_buf_put(b, d, n);
}

static void pb_varint(lq_buf *b, uint64_t v) {
    uint8_t t[10];
    int     n = 0;
    do {
        t[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    pb_put(b, t, n);
}

static void pb_tag(lq_buf *b, uint32_t field, uint32_t wt) {
    pb_varint(b, (uint64_t)field << 3 | wt);
}

static void pb_int(lq_buf *b, uint32_t field, int64_t v) { /* int32 fields: two's complement */
    pb_tag(b, field, 0);
    pb_varint(b, (uint64_t)v);
}

static void pb_bytes(lq_buf *b, uint32_t field, const void *d, int64_t n) {
    pb_tag(b, field, 2);
    pb_varint(b, (uint64_t)n);
    pb_put(b, d, n);
}

lq_status lq_spm_model_write(const char *const *pieces, const int64_t *piece_lens,
                             const float *scores, const int32_t *types, int64_t n,
                             const lq_spm_spec *spec, char **data, int64_t *len, lq_err *err) {
    lq_buf out = {0}, msg = {0};
    for (int64_t i = 0; i < n; i++) {
        msg.n = 0;
        pb_bytes(&msg, 1, pieces[i], piece_lens[i]);
        pb_tag(&msg, 2, 5);
        pb_put(&msg, &scores[i], 4);
        pb_int(&msg, 3, types[i]);
        pb_bytes(&out, 1, msg.p, msg.n);
    }
    msg.n = 0;          /* TrainerSpec */
    pb_int(&msg, 3, 2); /* model_type: BPE */
    pb_int(&msg, 4, n); /* vocab_size */
    pb_int(&msg, 35, spec->byte_fallback);
    pb_int(&msg, 40, spec->unk_id);
    pb_int(&msg, 41, spec->bos_id);
    pb_int(&msg, 42, spec->eos_id);
    pb_int(&msg, 43, spec->pad_id);
    pb_bytes(&out, 2, msg.p, msg.n);
    msg.n = 0; /* NormalizerSpec */
    pb_bytes(&msg, 1, "identity", 8);
    pb_int(&msg, 3, spec->add_dummy_prefix);
    pb_int(&msg, 4, spec->remove_extra_whitespaces);
    pb_int(&msg, 5, 1); /* escape_whitespaces */
    pb_bytes(&out, 3, msg.p, msg.n);
    const int oom = out.oom || msg.oom;
    lq_buf_free(&msg);
    if (oom) {
        lq_buf_free(&out);
        LQ_FAIL(err, LQ_ERR_NOMEM, "out of memory writing a SentencePiece model");
    }
    *data = out.p;
    *len  = out.n;
    return LQ_OK;
}

static lq_status spm_model(const lq_gguf *g, const vocab *v, char **out, int64_t *len,
                           lq_err *err) {
    const char **pieces = lq_malloc_n(v->n, sizeof *pieces);
    int64_t     *lens   = lq_malloc_n(v->n, sizeof *lens);
    float       *scores = lq_malloc_n(v->n, sizeof *scores);
    int32_t     *types  = lq_malloc_n(v->n, sizeof *types);
    char       **owned  = lq_calloc_n(v->n, sizeof *owned); /* rewritten pieces */
    int64_t      nowned = 0;
    lq_status    st     = LQ_OK;
    int          bytes  = 0;
    if (!pieces || !lens || !scores || !types || !owned)
        LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory", lq_gguf_path(g));
    for (int64_t i = 0; i < v->n; i++) {
        double sc = 0;
        lq_gguf_arr_str(g, v->tokens, i, &pieces[i], &lens[i]);
        if (v->scores)
            lq_gguf_arr_f64(v->scores, i, &sc);
        scores[i] = (float)sc;
        types[i]  = token_type(v, i);
        /* Gemma's GGUF marks <unk> CONTROL and names it by unknown_token_id; SentencePiece
         * needs the piece typed UNKNOWN */
        if (i == v->unk && types[i] == TT_CONTROL)
            types[i] = TT_UNKNOWN;
        if (types[i] == TT_USER) {
            int64_t un;
            char   *u = spm_user_piece(pieces[i], lens[i], &un);
            if (un < 0)
                LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory", lq_gguf_path(g));
            if (u) {
                pieces[i] = owned[nowned++] = u;
                lens[i]                     = un;
            }
        }
        if (types[i] < TT_NORMAL || types[i] > TT_BYTE)
            LQ_FAIL_GOTO(err, LQ_ERR_GGUF_TOKENIZER, "%s: token %lld has unknown type %d",
                         lq_gguf_path(g), (long long)i, types[i]);
        if (lens[i] == 0)
            LQ_FAIL_GOTO(err, LQ_ERR_GGUF_TOKENIZER, "%s: token %lld is empty", lq_gguf_path(g),
                         (long long)i);
        bytes |= types[i] == TT_BYTE;
    }
    lq_spm_spec spec = {v->add_prefix,   v->remove_extra_ws, bytes,          (int32_t)v->unk,
                        (int32_t)v->bos, (int32_t)v->eos,    (int32_t)v->pad};
    st               = lq_spm_model_write(pieces, lens, scores, types, v->n, &spec, out, len, err);
done:
    for (int64_t i = 0; i < nowned; i++)
        free(owned[i]);
    free(owned);
    free(pieces);
    free(lens);
    free(scores);
    free(types);
    return st;
}

/* ---------------------------------------------------------------------------------------- */
/* Side files                                                                                 */
/* ---------------------------------------------------------------------------------------- */
const char *const lq_gguf_hf_file_names[] = {"tokenizer.json",         "tokenizer.model",
                                             "tokenizer_config.json",  "special_tokens_map.json",
                                             "generation_config.json", NULL};

static void add_tok(const lq_gguf *g, const vocab *v, cJSON *o, const char *key, int64_t id) {
    if (id >= 0)
        cJSON_AddItemToObject(o, key, token_str(g, v, id));
}

static lq_status json_out(cJSON *r, const char *path, char **data, int64_t *len, lq_err *err) {
    char *s = cJSON_Print(r);
    cJSON_Delete(r);
    if (!s)
        LQ_FAIL(err, LQ_ERR_NOMEM, "%s: out of memory", path);
    *data = s;
    *len  = (int64_t)strlen(s);
    return LQ_OK;
}

lq_status lq_gguf_hf_file(const lq_gguf *g, const char *name, char **data, int64_t *len,
                          lq_err *err) {
    const char *path = lq_gguf_path(g);
    vocab       v;
    *data = NULL;
    *len  = 0;
    if (!strcmp(name, "generation_config.json")) {
        cJSON  *r   = cJSON_CreateObject();
        int     spm = is_spm(g);
        int64_t bos = special_id(g, "bos", spm ? 1 : -1), eos = special_id(g, "eos", spm ? 2 : -1);
        if (bos >= 0)
            cJSON_AddNumberToObject(r, "bos_token_id", (double)bos);
        if (eos >= 0)
            cJSON_AddNumberToObject(r, "eos_token_id", (double)eos);
        cJSON_AddStringToObject(r, "transformers_version", "4.46.0");
        return json_out(r, path, data, len, err);
    }
    LQ_TRY(load_vocab(g, &v, err));
    if (!strcmp(name, "tokenizer.json")) {
        if (v.spm)
            LQ_FAIL(err, LQ_ERR_NOT_FOUND,
                    "%s: a SentencePiece vocabulary travels as "
                    "tokenizer.model",
                    path);
        LQ_TRY(bpe_tokenizer_json(g, &v, data, err));
        *len = (int64_t)strlen(*data);
        return LQ_OK;
    }
    if (!strcmp(name, "tokenizer.model")) {
        if (!v.spm)
            LQ_FAIL(err, LQ_ERR_NOT_FOUND, "%s: a BPE vocabulary travels as tokenizer.json", path);
        return spm_model(g, &v, data, len, err);
    }
    if (!strcmp(name, "special_tokens_map.json") || !strcmp(name, "tokenizer_config.json")) {
        cJSON *r = cJSON_CreateObject();
        add_tok(g, &v, r, "bos_token", v.bos);
        add_tok(g, &v, r, "eos_token", v.eos);
        add_tok(g, &v, r, "unk_token", v.unk);
        add_tok(g, &v, r, "pad_token", v.pad);
        if (!strcmp(name, "tokenizer_config.json")) {
            const char *s;
            int64_t     n;
            cJSON_AddBoolToObject(r, "add_bos_token", v.add_bos);
            cJSON_AddBoolToObject(r, "add_eos_token", v.add_eos);
            cJSON_AddBoolToObject(r, "clean_up_tokenization_spaces", 0);
            const lq_gguf_arch *a = NULL;
            lq_err              e2;
            const int           has_arch = lq_gguf_hf_arch(g, &a, &e2) == LQ_OK;
            /* Gemma's SentencePiece has no dummy prefix: transformers' LlamaTokenizer would add
             * one ("#include" -> "\u2581#") where GemmaTokenizer, like SentencePiece, does not */
            cJSON_AddStringToObject(r, "tokenizer_class",
                                    !v.spm                 ? "PreTrainedTokenizerFast"
                                    : has_arch && a->gemma ? "GemmaTokenizer"
                                                           : "LlamaTokenizer");
            if (v.spm) {
                cJSON_AddBoolToObject(r, "legacy", 1);
                cJSON *d = spm_added_tokens(g, &v);
                if (!d) {
                    cJSON_Delete(r);
                    LQ_FAIL(err, LQ_ERR_NOMEM, "%s: out of memory", path);
                }
                cJSON_AddItemToObject(r, "added_tokens_decoder", d);
            }
            if (has_arch)
                cJSON_AddNumberToObject(r, "model_max_length",
                                        (double)arch_key_i64(g, a, "context_length", 2048));
            if (lq_gguf_get_str(g, "tokenizer.chat_template", &s, &n))
                cJSON_AddItemToObject(r, "chat_template", str_n(s, n));
        }
        return json_out(r, path, data, len, err);
    }
    LQ_FAIL(err, LQ_ERR_NOT_FOUND, "%s: no side file \"%s\"", path, name);
}
