/* config.json for the Llama family. Only architectures whose forward we implement are
 * accepted, so a model we would silently mis-run is refused up front. */
#include "lq_config.h"

#include "lq_json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The model families, one row each: what a config of that model_type means where the file is
 * silent (the transformers config class defaults) and what its layers hold. */
typedef struct family {
    const char *model_type;
    int64_t     default_max_pos;
    int64_t     default_bos, default_eos; /* absent bos/eos ids (-1: none) */
    /* 0 none, 1 "sliding_window" on every layer (mistral), 2 "use_sliding_window" (qwen), 3 per
     * layer by "layer_types" or a period (gemma) */
    int     sliding;
    int64_t default_window;   /* sliding 1: the window when the key is absent (0: none) */
    int64_t swa_period;       /* sliding 3: the default period, full attention last in it */
    int     qkv_bias;         /* q/k/v always have biases, o_proj none (Qwen2Attention) */
    int     qk_norm;          /* RMSNorm of each q and k head before RoPE (Qwen3, Gemma 3) */
    int64_t default_kv_heads; /* absent num_key_value_heads: this, 0 = num_attention_heads */
    int64_t default_head_dim; /* absent head_dim: this, 0 = hidden_size / heads */
    /* (1 + w) norms, post norms, scaled embeddings, tied, GeGLU, query_pre_attn_scalar
     * (default 256) */
    int     gemma;
    double  default_attn_softcap, default_final_softcap;
    double  default_rope_theta;
    double  default_local_theta; /* > 0: sliding layers have their own RoPE base (Gemma 3) */
    int     fused; /* qkv_proj and gate_up_proj (Phi-3); "su" and "yarn" RoPE mean longrope */
    int64_t default_orig_max_pos; /* original_max_position_embeddings, a class field (Phi-3) */
    double  default_eps;          /* absent rms_norm_eps: this, 0 = 1e-6 */
    /* mixture of experts: 1 Mixtral (num_local_experts, intermediate_size per expert, top-k
     * renormalized), 2 Qwen (num_experts, moe_intermediate_size, norm_topk_prob) */
    int         moe;
    int64_t     default_experts, default_topk, default_moe_ff, default_shared_ff;
    const char *verified; /* what the tests check of it (llmquant inspect prints it) */
} family;

static const family k_families[] = {
    {.model_type      = "llama",
     .default_max_pos = 2048,
     .default_bos     = 1,
     .default_eos     = 2,
     .verified        = "logits vs transformers on stories260K and SmolLM2-135M (real) and random "
                        "models (GQA, biases, llama3 RoPE); every method end to end on real models"},
    {.model_type      = "mistral",
     .default_max_pos = 4096 * 32,
     .default_bos     = 1,
     .default_eos     = 2,
     .sliding         = 1,
     .default_window  = 4096,
     .verified        = "logits vs transformers on a random model (window shorter than the "
                        "sequence)"},
    {.model_type      = "qwen2",
     .default_max_pos = 32768,
     .default_bos     = -1,
     .default_eos     = -1,
     .sliding         = 2,
     .qkv_bias        = 1,
     .verified        = "logits vs transformers on a random model (q/k/v biases, linear RoPE)"},
    {.model_type       = "qwen3", /* Qwen3Config: 32 KV heads, head_dim 128 */
     .default_max_pos  = 32768,
     .default_bos      = -1,
     .default_eos      = -1,
     .sliding          = 2,
     .qk_norm          = 1,
     .default_kv_heads = 32,
     .default_head_dim = 128,
     .verified         = "logits vs transformers on a random model; its RTN checkpoint "
                         "dequantized into transformers"},
    {.model_type            = "gemma2", /* Gemma2Config */
     .default_max_pos       = 8192,
     .default_bos           = 2,
     .default_eos           = 1,
     .sliding               = 3,
     .swa_period            = 2,
     .default_kv_heads      = 4,
     .default_head_dim      = 256,
     .gemma                 = 1,
     .default_attn_softcap  = 50.0,
     .default_final_softcap = 30.0,
     .verified              = "logits vs transformers on random models (soft-caps, alternating "
                              "windows), also through llama.cpp's GGUF converter"},
    {.model_type          = "gemma3_text", /* Gemma3TextConfig */
     .default_max_pos     = 131072,
     .default_bos         = 2,
     .default_eos         = 1,
     .sliding             = 3,
     .swa_period          = 6,
     .qk_norm             = 1,
     .default_kv_heads    = 4,
     .default_head_dim    = 256,
     .gemma               = 1,
     .default_rope_theta  = 1000000.0,
     .default_local_theta = 10000.0,
     .verified            = "logits and perplexity vs transformers on Gemma-3-270M (real, GGUF); "
                            "every method end to end; its AWQ checkpoint dequantized back"},
    {.model_type           = "phi3", /* Phi3Config (Phi-3, Phi-3.5-mini, Phi-4) */
     .default_max_pos      = 4096,
     .default_bos          = 1,
     .default_eos          = 32000,
     .sliding              = 1,
     .fused                = 1,
     .default_orig_max_pos = 4096,
     .default_eps          = 1e-5,
     .verified = "logits vs transformers on random models (LongRoPE short and long); AWQ and "
                 "GPTQ checkpoints dequantized back; the same codes as its weights as a Llama; "
                 "through llama.cpp's GGUF converter"},
    {.model_type         = "mixtral", /* MixtralConfig */
     .default_max_pos    = 4096 * 32,
     .default_bos        = 1,
     .default_eos        = 2,
     .sliding            = 1, /* sliding_window: null by default */
     .default_rope_theta = 1e6,
     .default_eps        = 1e-5,
     .moe                = 1,
     .default_experts    = 8,
     .default_topk       = 2,
     .verified           = "logits vs transformers on random models (top-2 of 8 experts), ppl "
                           "vs its NLL, also through llama.cpp's GGUF converter; every "
                           "method's checkpoint (experts quantized, router float) dequantized "
                           "into transformers"},
    {.model_type        = "qwen2_moe", /* Qwen2MoeConfig */
     .default_max_pos   = 32768,
     .default_bos       = -1,
     .default_eos       = -1,
     .sliding           = 2,
     .qkv_bias          = 1,
     .moe               = 2,
     .default_experts   = 60,
     .default_topk      = 4,
     .default_moe_ff    = 1408,
     .default_shared_ff = 5632,
     .verified          = "logits vs transformers on random models (shared expert and its "
                          "gate, top-k without renormalizing), also through llama.cpp's GGUF "
                          "converter; every method's checkpoint dequantized into transformers"},
    {.model_type       = "qwen3_moe", /* Qwen3MoeConfig */
     .default_max_pos  = 32768,
     .default_bos      = -1,
     .default_eos      = -1,
     .sliding          = 2,
     .qk_norm          = 1,
     .default_kv_heads = 4,
     .moe              = 2,
     .default_experts  = 128,
     .default_topk     = 8,
     .default_moe_ff   = 768,
     .verified         = "logits vs transformers on random models (q/k norms, top-k "
                         "renormalized), also through llama.cpp's GGUF converter; every "
                         "method's checkpoint dequantized into transformers"},
};

/* The experts of a Mixtral / Qwen MoE config (the family's moe column). Layers that keep a
 * dense MLP among the sparse ones (decoder_sparse_step > 1, mlp_only_layers) are refused. */
static lq_status parse_moe(const cJSON *root, const char *label, const family *fam,
                           lq_model_config *c, lq_err *err) {
    if (!fam->moe)
        return LQ_OK;
    const int64_t MAXE = LQ_CFG_MAX_EXPERTS;
    c->num_experts     = fam->default_experts;
    c->experts_per_tok = fam->default_topk;
    /* Mixtral and transformers 5 write num_local_experts, Qwen's files num_experts */
    int64_t a = -1, b = -1;
    LQ_TRY(lq_json_get_i64(root, "num_experts", 0, 1, MAXE, &a, label, err));
    LQ_TRY(lq_json_get_i64(root, "num_local_experts", 0, 1, MAXE, &b, label, err));
    if (a > 0 && b > 0 && a != b)
        return lq_fail(err, LQ_ERR_CONFIG_VALUE,
                       "%s: num_experts %lld and num_local_experts %lld disagree", label,
                       (long long)a, (long long)b);
    c->num_experts = a > 0 ? a : b > 0 ? b : c->num_experts;
    LQ_TRY(
        lq_json_get_i64(root, "num_experts_per_tok", 0, 1, MAXE, &c->experts_per_tok, label, err));
    if (c->experts_per_tok > c->num_experts)
        return lq_fail(err, LQ_ERR_CONFIG_VALUE,
                       "%s: num_experts_per_tok %lld is more than the %lld experts", label,
                       (long long)c->experts_per_tok, (long long)c->num_experts);
    c->moe_mixtral = fam->moe == 1;
    if (fam->moe == 1) { /* MixtralSparseMoeBlock: softmax, top-k, renormalized */
        c->moe_intermediate = c->intermediate_size;
        c->norm_topk        = 1;
        return LQ_OK;
    }
    c->moe_intermediate    = fam->default_moe_ff;
    c->shared_intermediate = fam->default_shared_ff;
    LQ_TRY(lq_json_get_i64(root, "moe_intermediate_size", 0, 1, LQ_CFG_MAX_DIM,
                           &c->moe_intermediate, label, err));
    if (fam->default_shared_ff)
        LQ_TRY(lq_json_get_i64(root, "shared_expert_intermediate_size", 0, 0, LQ_CFG_MAX_DIM,
                               &c->shared_intermediate, label, err));
    LQ_TRY(lq_json_get_bool(root, "norm_topk_prob", 0, &c->norm_topk, label, err));
    int64_t step = 1;
    LQ_TRY(lq_json_get_i64(root, "decoder_sparse_step", 0, 0, 1 << 16, &step, label, err));
    const cJSON *only = cJSON_GetObjectItemCaseSensitive(root, "mlp_only_layers");
    if (step != 1 ||
        (only && !cJSON_IsNull(only) && (!cJSON_IsArray(only) || cJSON_GetArraySize(only) > 0)))
        return lq_fail(err, LQ_ERR_UNSUPPORTED_ARCH,
                       "%s: dense MLP layers among the expert layers (decoder_sparse_step %lld, "
                       "mlp_only_layers) are not supported",
                       label, (long long)step);
    return LQ_OK;
}

const char *lq_config_family_verified(const char *model_type) {
    for (size_t i = 0; i < sizeof k_families / sizeof *k_families; i++)
        if (!strcmp(model_type, k_families[i].model_type))
            return k_families[i].verified;
    return NULL;
}

int lq_config_layer_sliding(const lq_model_config *c, int64_t i) {
    if (c->sliding_window <= 0)
        return 0;
    return c->swa_period <= 0 || i % c->swa_period != c->swa_full_phase;
}

/* RoPE as transformers resolves it: the parameters dict is "rope_scaling" (transformers < 5)
 * or "rope_parameters" (>= 5, which also moves rope_theta inside); rope_theta comes from that
 * dict, else the top level, else the class default (10000; Gemma 3 1e6); the type from
 * "rope_type", else "type", else default. Gemma 3 has a second base for its sliding layers,
 * "rope_local_base_freq" (< 5) or rope_parameters["sliding_attention"] (>= 5, where
 * ["full_attention"] holds the global one); the scaling only ever applies to full attention. */
/* RoPE over part of each head (Phi-3.5-MoE, Phi-4-mini: partial_rotary_factor < 1) is not
 * implemented: refused rather than run over the whole head. */
static lq_status check_full_rotary(const cJSON *obj, const char *label, lq_err *err) {
    double f = 1.0;
    LQ_TRY(lq_json_get_f64(obj, "partial_rotary_factor", 0, &f, label, err));
    if (f != 1.0)
        LQ_FAIL(err, LQ_ERR_UNSUPPORTED_ARCH,
                "%s: partial_rotary_factor %g (RoPE on part of each head) is not supported", label,
                f);
    return LQ_OK;
}

/* LongRoPE's factor lists: head_dim / 2 numbers each. */
static lq_status parse_factors(const cJSON *rs, const char *name, const char *label,
                               const lq_model_config *cfg, float *out, lq_err *err) {
    const cJSON  *a    = cJSON_GetObjectItemCaseSensitive(rs, name);
    const int64_t half = cfg->head_dim / 2;
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != half || half > LQ_ROPE_MAX_HALF)
        LQ_FAIL(err, LQ_ERR_CONFIG_VALUE,
                "%s: longrope %s must be a list of head_dim / 2 (%lld) numbers", label, name,
                (long long)half);
    int          i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a) {
        const float f = cJSON_IsNumber(e) ? (float)e->valuedouble : 0.f; /* as float32 */
        if (!(f > 0) || !isfinite(f))
            LQ_FAIL(err, LQ_ERR_CONFIG_VALUE,
                    "%s: longrope %s[%d] must be a number > 0 (and finite in float32)", label, name,
                    i);
        out[i++] = f;
    }
    return LQ_OK;
}

/* original_max_position_embeddings of llama3 / longrope RoPE: transformers gives a top-level
 * field priority (Phi-3 always has one), then the dict's, then max_position_embeddings. */
static lq_status original_max_pos(const cJSON *root, const cJSON *rs, const char *label,
                                  const family *fam, lq_model_config *cfg, lq_err *err) {
    const int64_t BIG          = (int64_t)1 << 40;
    cfg->rope_original_max_pos = cfg->max_position_embeddings;
    LQ_TRY(lq_json_get_i64(rs, "original_max_position_embeddings", 0, 1, BIG,
                           &cfg->rope_original_max_pos, label, err));
    if (fam->default_orig_max_pos > 0)
        cfg->rope_original_max_pos = fam->default_orig_max_pos;
    return lq_json_get_i64(root, "original_max_position_embeddings", 0, 1, BIG,
                           &cfg->rope_original_max_pos, label, err);
}

static lq_status parse_rope_dict(const cJSON *root, const cJSON *rs, const char *key,
                                 const char *label, const family *fam, lq_model_config *cfg,
                                 lq_err *err) {
    if (!cJSON_IsObject(rs))
        LQ_FAIL(err, LQ_ERR_CONFIG_VALUE, "%s: %s must be an object or null", label, key);
    char type[32] = "";
    LQ_TRY(lq_json_get_str(rs, "rope_type", 0, type, sizeof type, label, err));
    if (!type[0])
        LQ_TRY(lq_json_get_str(rs, "type", 0, type, sizeof type, label, err));
    if (!type[0]) { /* {"full_attention": {...}, ...}: per-layer-type RoPE, not Llama's */
        const cJSON *kv;
        cJSON_ArrayForEach(kv, rs) {
            if (cJSON_IsObject(kv))
                LQ_FAIL(err, LQ_ERR_UNSUPPORTED_ARCH,
                        "%s: per-layer %s (\"%s\") is not supported for model_type \"%s\"", label,
                        key, kv->string, cfg->model_type);
        }
    }
    /* a factor without a type: transformers finds no RoPE function for type None */
    if (!type[0] && cJSON_GetObjectItemCaseSensitive(rs, "factor"))
        LQ_FAIL(err, LQ_ERR_CONFIG_VALUE,
                "%s: %s has a \"factor\" but no \"rope_type\" (or \"type\"): which scaling "
                "is meant?",
                label, key);
    LQ_TRY(lq_json_get_f64(rs, "rope_theta", 0, &cfg->rope_theta, label, err));
    LQ_TRY(check_full_rotary(rs, label, err));
    if (!strcmp(type, "default") || !type[0]) {
        cfg->rope_type = LQ_ROPE_DEFAULT;
    } else if (!strcmp(type, "linear")) {
        cfg->rope_type = LQ_ROPE_LINEAR;
        LQ_TRY(lq_json_get_f64(rs, "factor", 1, &cfg->rope_factor, label, err));
    } else if (!strcmp(type, "llama3")) {
        cfg->rope_type = LQ_ROPE_LLAMA3;
        LQ_TRY(lq_json_get_f64(rs, "factor", 1, &cfg->rope_factor, label, err));
        LQ_TRY(lq_json_get_f64(rs, "low_freq_factor", 1, &cfg->rope_low_freq_factor, label, err));
        LQ_TRY(lq_json_get_f64(rs, "high_freq_factor", 1, &cfg->rope_high_freq_factor, label, err));
        LQ_TRY(original_max_pos(root, rs, label, fam, cfg, err));
        if (cfg->rope_high_freq_factor <= cfg->rope_low_freq_factor)
            LQ_FAIL(err, LQ_ERR_CONFIG_VALUE, "%s: %s high_freq_factor must exceed low_freq_factor",
                    label, key);
    } else if (!strcmp(type, "longrope") ||
               (fam->fused && (!strcmp(type, "su") || !strcmp(type, "yarn")))) {
        /* _compute_longrope_parameters; Phi3Config reads the old "su" and "yarn" as longrope */
        cfg->rope_type = LQ_ROPE_LONGROPE;
        LQ_TRY(original_max_pos(root, rs, label, fam, cfg, err));
        LQ_TRY(parse_factors(rs, "short_factor", label, cfg, cfg->rope_short, err));
        LQ_TRY(parse_factors(rs, "long_factor", label, cfg, cfg->rope_long, err));
        double factor = (double)cfg->max_position_embeddings / (double)cfg->rope_original_max_pos;
        LQ_TRY(lq_json_get_f64(rs, "factor", 0, &factor, label, err));
        cfg->rope_attn_factor =
            factor <= 1.0 ? 1.0 : sqrt(1 + log(factor) / log((double)cfg->rope_original_max_pos));
        LQ_TRY(lq_json_get_f64(rs, "attention_factor", 0, &cfg->rope_attn_factor, label, err));
        if (!(cfg->rope_attn_factor > 0) || !isfinite((float)cfg->rope_attn_factor))
            LQ_FAIL(err, LQ_ERR_CONFIG_VALUE, "%s: %s attention_factor must be > 0", label, key);
    } else {
        LQ_FAIL(err, LQ_ERR_UNSUPPORTED_ARCH,
                "%s: %s type \"%s\" is not supported (default, linear, llama3, longrope)", label,
                key, type);
    }
    if (cfg->rope_factor <= 0)
        LQ_FAIL(err, LQ_ERR_CONFIG_VALUE, "%s: %s factor must be > 0", label, key);
    return LQ_OK;
}

static lq_status parse_rope(const cJSON *root, const char *label, const family *fam,
                            lq_model_config *cfg, lq_err *err) {
    cfg->rope_type   = LQ_ROPE_DEFAULT;
    cfg->rope_factor = 1.0;
    cfg->rope_theta  = fam->default_rope_theta > 0 ? fam->default_rope_theta : 10000.0;
    LQ_TRY(lq_json_get_f64(root, "rope_theta", 0, &cfg->rope_theta, label, err));
    LQ_TRY(check_full_rotary(root, label, err));
    if (fam->default_local_theta > 0) {
        cfg->rope_local_theta = fam->default_local_theta;
        LQ_TRY(
            lq_json_get_f64(root, "rope_local_base_freq", 0, &cfg->rope_local_theta, label, err));
    }
    const char  *key = "rope_scaling";
    const cJSON *rs  = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!rs || cJSON_IsNull(rs)) {
        key = "rope_parameters";
        rs  = cJSON_GetObjectItemCaseSensitive(root, key);
    }
    if (fam->default_local_theta > 0 && cJSON_IsObject(rs)) {
        const cJSON *full = cJSON_GetObjectItemCaseSensitive(rs, "full_attention");
        const cJSON *swa  = cJSON_GetObjectItemCaseSensitive(rs, "sliding_attention");
        if (cJSON_IsObject(swa)) {
            lq_model_config local = *cfg;
            local.rope_theta      = cfg->rope_local_theta;
            LQ_TRY(parse_rope_dict(root, swa, "rope_parameters[\"sliding_attention\"]", label, fam,
                                   &local, err));
            if (local.rope_type != LQ_ROPE_DEFAULT)
                LQ_FAIL(err, LQ_ERR_UNSUPPORTED_ARCH,
                        "%s: RoPE scaling of the sliding layers is not supported", label);
            cfg->rope_local_theta = local.rope_theta;
        }
        if (full || swa) {
            key = "rope_parameters[\"full_attention\"]";
            rs  = full;
        }
    }
    if (rs && !cJSON_IsNull(rs))
        LQ_TRY(parse_rope_dict(root, rs, key, label, fam, cfg, err));
    if (cfg->rope_theta <= 0 || cfg->rope_local_theta < 0 ||
        (fam->default_local_theta > 0 && cfg->rope_local_theta <= 0))
        LQ_FAIL(err, LQ_ERR_CONFIG_VALUE, "%s: rope_theta must be > 0", label);
    return LQ_OK;
}

/* Gemma's sliding and full layers: "layer_types" when present, else a period ("sliding_window_
 * pattern", Gemma 3, default 6; Gemma 2 alternates) whose last layer has full attention. Held as
 * a period and phase, so a list that is not periodic is refused rather than approximated. */
static lq_status parse_layer_types(const cJSON *root, const char *label, const family *fam,
                                   lq_model_config *cfg, lq_err *err) {
    int64_t period = fam->swa_period;
    if (fam->swa_period != 2) {
        LQ_TRY(
            lq_json_get_i64(root, "_sliding_window_pattern", 0, 1, 1 << 16, &period, label, err));
        LQ_TRY(lq_json_get_i64(root, "sliding_window_pattern", 0, 1, 1 << 16, &period, label, err));
    }
    cfg->swa_period     = period;
    cfg->swa_full_phase = period - 1;
    const cJSON *lt     = cJSON_GetObjectItemCaseSensitive(root, "layer_types");
    if (!lt || cJSON_IsNull(lt))
        return LQ_OK;
    if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != cfg->num_layers)
        LQ_FAIL(err, LQ_ERR_CONFIG_VALUE,
                "%s: layer_types must be a list of num_hidden_layers (%lld) strings", label,
                (long long)cfg->num_layers);
    int64_t      first = -1, second = -1, i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, lt) {
        const int full = cJSON_IsString(e) && !strcmp(e->valuestring, "full_attention");
        if (!full && !(cJSON_IsString(e) && !strcmp(e->valuestring, "sliding_attention")))
            LQ_FAIL(err, LQ_ERR_UNSUPPORTED_ARCH,
                    "%s: layer_types[%lld] is not \"sliding_attention\" or \"full_attention\"",
                    label, (long long)i);
        if (full && first < 0)
            first = i;
        else if (full && second < 0)
            second = i;
        i++;
    }
    if (first < 0) { /* every layer slides */
        cfg->swa_period = 0;
        return LQ_OK;
    }
    cfg->swa_period     = second > 0 ? second - first : cfg->num_layers;
    cfg->swa_full_phase = first;
    i                   = 0;
    cJSON_ArrayForEach(e, lt) {
        const int full = !strcmp(e->valuestring, "full_attention");
        if (full != (i % cfg->swa_period == cfg->swa_full_phase))
            LQ_FAIL(err, LQ_ERR_UNSUPPORTED_ARCH,
                    "%s: layer_types is not a periodic pattern of sliding and full layers "
                    "(layer %lld breaks it); only periodic ones are supported",
                    label, (long long)i);
        i++;
    }
    return LQ_OK;
}

/* Sliding-window attention as the transformers config classes define it. Mistral: every layer
 * uses sliding_window (class default 4096 when the key is absent, none when null). Qwen2: only
 * with use_sliding_window, and then only layers >= max_window_layers -- a per-layer mix we do
 * not model, so it is refused rather than run as full attention. Llama: no sliding window. */
static lq_status parse_sliding_window(const cJSON *root, const char *label, const family *fam,
                                      lq_model_config *cfg, lq_err *err) {
    cfg->sliding_window = 0;
    const cJSON *sw     = cJSON_GetObjectItemCaseSensitive(root, "sliding_window");
    if (fam->sliding == 1) {
        if (!sw)
            cfg->sliding_window = fam->default_window;
        else if (!cJSON_IsNull(sw))
            LQ_TRY(lq_json_get_i64(root, "sliding_window", 0, 1, (int64_t)1 << 40,
                                   &cfg->sliding_window, label, err));
    } else if (fam->sliding == 2) {
        int use = 0;
        LQ_TRY(lq_json_get_bool(root, "use_sliding_window", 0, &use, label, err));
        if (use && sw && !cJSON_IsNull(sw)) {
            int64_t      max_window = 28;
            const cJSON *lt         = cJSON_GetObjectItemCaseSensitive(root, "layer_types");
            int          sliding    = 0;
            if (cJSON_IsArray(lt)) {
                const cJSON *e;
                cJSON_ArrayForEach(e, lt) {
                    sliding |= cJSON_IsString(e) && !strcmp(e->valuestring, "sliding_attention");
                }
            } else {
                LQ_TRY(lq_json_get_i64(root, "max_window_layers", 0, 0, (int64_t)1 << 20,
                                       &max_window, label, err));
                sliding = max_window < cfg->num_layers;
            }
            if (sliding)
                LQ_FAIL(err, LQ_ERR_UNSUPPORTED_ARCH,
                        "%s: model_type \"%s\" with use_sliding_window on some layers is not "
                        "supported",
                        label, cfg->model_type);
        }
    } else if (fam->sliding == 3) {
        int bidir = 0;
        LQ_TRY(lq_json_get_bool(root, "use_bidirectional_attention", 0, &bidir, label, err));
        if (bidir)
            LQ_FAIL(err, LQ_ERR_UNSUPPORTED_ARCH,
                    "%s: use_bidirectional_attention (an embedding model, not a decoder) is not "
                    "supported",
                    label);
        cfg->sliding_window = 4096;
        if (sw && cJSON_IsNull(sw))
            cfg->sliding_window = 0;
        else
            LQ_TRY(lq_json_get_i64(root, "sliding_window", 0, 1, (int64_t)1 << 40,
                                   &cfg->sliding_window, label, err));
        LQ_TRY(parse_layer_types(root, label, fam, cfg, err));
    }
    return LQ_OK;
}

/* A config whose parameter count cannot be a real model (products that overflow, or above
 * LQ_CFG_MAX_PARAMS) is refused here, so nothing downstream multiplies absurd sizes. */
static lq_status check_plausible(const lq_model_config *c, const char *label, lq_err *err) {
    const int64_t q = c->num_heads * c->head_dim, kv = c->num_kv_heads * c->head_dim;
    int64_t       a, b, layer = 0, total = 0;
    bool          ok = lq_mul_i64(c->hidden_size, q, &a) && lq_add_i64(layer, a, &layer) &&
              lq_add_i64(layer, a, &layer) && /* q_proj and o_proj */
              lq_mul_i64(c->hidden_size, kv, &a) && lq_mul_i64(a, 2, &a) &&
              lq_add_i64(layer, a, &layer) && /* k_proj, v_proj */
              lq_mul_i64(c->hidden_size, c->num_experts ? 0 : c->intermediate_size, &a) &&
              lq_mul_i64(a, 3, &a) && lq_add_i64(layer, a, &layer) && /* gate, up, down */
              lq_mul_i64(c->hidden_size, c->moe_intermediate, &a) &&
              lq_mul_i64(a, 3 * c->num_experts, &a) && lq_add_i64(layer, a, &layer) &&
              lq_mul_i64(c->hidden_size, c->shared_intermediate, &a) && lq_mul_i64(a, 3, &a) &&
              lq_add_i64(layer, a, &layer) && /* experts, shared expert */
              lq_mul_i64(layer, c->num_layers, &total) &&
              lq_mul_i64(c->vocab_size, c->hidden_size, &b) &&
              lq_mul_i64(b, c->tie_word_embeddings ? 1 : 2, &b) && lq_add_i64(total, b, &total);
    if (!ok || total > LQ_CFG_MAX_PARAMS)
        return lq_fail(err, LQ_ERR_CONFIG_VALUE,
                       "%s: sizes cannot be a real model (hidden_size %lld, intermediate_size "
                       "%lld, %lld layers, vocab %lld: %s parameters, limit %.0e)",
                       label, (long long)c->hidden_size, (long long)c->intermediate_size,
                       (long long)c->num_layers, (long long)c->vocab_size,
                       ok ? "too many" : "an overflowing count of", (double)LQ_CFG_MAX_PARAMS);
    return LQ_OK;
}

/* model_type -> its family row (*fam), the architecture (must be *ForCausalLM), the dtype. */
static lq_status parse_family(const cJSON *root, const char *label, const family **fam_out,
                              lq_model_config *cfg, lq_err *err) {
    LQ_TRY(lq_json_get_str(root, "model_type", 1, cfg->model_type, sizeof cfg->model_type, label,
                           err));
    const family *fam        = NULL;
    char          names[128] = "";
    for (size_t i = 0; i < sizeof k_families / sizeof *k_families; i++) {
        if (!strcmp(cfg->model_type, k_families[i].model_type))
            fam = &k_families[i];
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
                 k_families[i].model_type);
    }
    if (!fam)
        LQ_FAIL(err, LQ_ERR_UNSUPPORTED_ARCH,
                "%s: model_type \"%s\" is not supported (supported: %s)", label, cfg->model_type,
                names);
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    if (cJSON_IsArray(arch) && cJSON_GetArraySize(arch) > 0 &&
        cJSON_IsString(cJSON_GetArrayItem(arch, 0))) {
        snprintf(cfg->architecture, sizeof cfg->architecture, "%s",
                 cJSON_GetArrayItem(arch, 0)->valuestring);
        if (!strstr(cfg->architecture, "ForCausalLM"))
            LQ_FAIL(err, LQ_ERR_UNSUPPORTED_ARCH,
                    "%s: architecture \"%s\" is not supported (need *ForCausalLM)", label,
                    cfg->architecture);
    }
    LQ_TRY(lq_json_get_str(root, "torch_dtype", 0, cfg->torch_dtype, sizeof cfg->torch_dtype, label,
                           err));
    if (!cfg->torch_dtype[0])
        LQ_TRY(lq_json_get_str(root, "dtype", 0, cfg->torch_dtype, sizeof cfg->torch_dtype, label,
                               err));

    *fam_out = fam;
    return LQ_OK;
}

/* Sizes, heads and head_dim, within limits that keep every size product in 64 bits. */
static lq_status parse_dims(const cJSON *root, const char *label, const family *fam,
                            lq_model_config *cfg, lq_err *err) {
    const int64_t BIG = (int64_t)1 << 40;
    /* Per-dimension limits far above any real model (largest today: hidden 16k-25k,
     * intermediate ~100k, vocab ~256k) keep every size product in 64 bits. */
    LQ_TRY(
        lq_json_get_i64(root, "hidden_size", 1, 1, LQ_CFG_MAX_DIM, &cfg->hidden_size, label, err));
    LQ_TRY(lq_json_get_i64(root, "intermediate_size", 1, 1, LQ_CFG_MAX_DIM, &cfg->intermediate_size,
                           label, err));
    LQ_TRY(lq_json_get_i64(root, "num_hidden_layers", 1, 1, 1 << 16, &cfg->num_layers, label, err));
    LQ_TRY(
        lq_json_get_i64(root, "num_attention_heads", 1, 1, 1 << 16, &cfg->num_heads, label, err));
    cfg->num_kv_heads = fam->default_kv_heads ? fam->default_kv_heads : cfg->num_heads;
    LQ_TRY(lq_json_get_i64(root, "num_key_value_heads", 0, 1, 1 << 16, &cfg->num_kv_heads, label,
                           err));
    LQ_TRY(lq_json_get_i64(root, "vocab_size", 1, 1, LQ_CFG_MAX_DIM, &cfg->vocab_size, label, err));
    /* the config classes' defaults, for the rare file that omits the key */
    cfg->max_position_embeddings = fam->default_max_pos;
    LQ_TRY(lq_json_get_i64(root, "max_position_embeddings", 0, 1, BIG,
                           &cfg->max_position_embeddings, label, err));
    cfg->rms_norm_eps = fam->default_eps > 0 ? fam->default_eps : 1e-6;
    LQ_TRY(lq_json_get_f64(root, "rms_norm_eps", 0, &cfg->rms_norm_eps, label, err));
    if (cfg->rms_norm_eps <= 0)
        LQ_FAIL(err, LQ_ERR_CONFIG_VALUE, "%s: rms_norm_eps must be > 0", label);

    if (cfg->num_heads % cfg->num_kv_heads != 0)
        LQ_FAIL(err, LQ_ERR_CONFIG_VALUE,
                "%s: num_attention_heads %lld is not divisible by num_key_value_heads %lld", label,
                (long long)cfg->num_heads, (long long)cfg->num_kv_heads);
    /* transformers: head_dim = config.head_dim if given, else hidden_size // heads; q_proj maps
     * hidden_size -> heads * head_dim, so divisibility only matters for the derived value. */
    cfg->head_dim = fam->default_head_dim;
    LQ_TRY(lq_json_get_i64(root, "head_dim", 0, 2, 1 << 16, &cfg->head_dim, label, err));
    if (cfg->head_dim == 0) {
        if (cfg->hidden_size % cfg->num_heads != 0)
            LQ_FAIL(err, LQ_ERR_CONFIG_VALUE,
                    "%s: hidden_size %lld is not divisible by num_attention_heads %lld", label,
                    (long long)cfg->hidden_size, (long long)cfg->num_heads);
        cfg->head_dim = cfg->hidden_size / cfg->num_heads;
    }
    if (cfg->head_dim % 2 != 0)
        LQ_FAIL(err, LQ_ERR_CONFIG_VALUE, "%s: head_dim %lld must be even for RoPE", label,
                (long long)cfg->head_dim);

    return LQ_OK;
}

/* Tied embeddings, biases, q/k norms, fused projections, BOS/EOS ids. */
static lq_status parse_io(const cJSON *root, const char *label, const family *fam,
                          lq_model_config *cfg, lq_err *err) {
    const int64_t BIG        = (int64_t)1 << 40;
    cfg->tie_word_embeddings = fam->gemma; /* GemmaConfig ties by default, the others not */
    LQ_TRY(lq_json_get_bool(root, "tie_word_embeddings", 0, &cfg->tie_word_embeddings, label, err));
    LQ_TRY(lq_json_get_bool(root, "attention_bias", 0, &cfg->attention_bias, label, err));
    LQ_TRY(lq_json_get_bool(root, "mlp_bias", 0, &cfg->mlp_bias, label, err));
    cfg->qkv_bias = fam->qkv_bias;
    cfg->qk_norm  = fam->qk_norm;
    cfg->fused    = fam->fused;
    if (fam->fused && (cfg->attention_bias || cfg->mlp_bias)) /* Phi3Attention has none */
        LQ_FAIL(err, LQ_ERR_UNSUPPORTED_ARCH,
                "%s: attention_bias / mlp_bias are not part of model_type \"%s\"", label,
                cfg->model_type);
    /* Absent: the config class default (LlamaConfig / MistralConfig 1 and 2, Qwen2Config none,
     * Gemma 2 and 1); null: none (-1). */
    cfg->bos_token_id =
        cJSON_GetObjectItemCaseSensitive(root, "bos_token_id") ? -1 : fam->default_bos;
    cfg->eos_token_id =
        cJSON_GetObjectItemCaseSensitive(root, "eos_token_id") ? -1 : fam->default_eos;
    LQ_TRY(lq_json_get_i64(root, "bos_token_id", 0, -1, BIG, &cfg->bos_token_id, label, err));
    const cJSON *eos = cJSON_GetObjectItemCaseSensitive(root, "eos_token_id");
    if (cJSON_IsArray(eos)) { /* Llama 3.x lists several; the first is the primary one */
        const cJSON *e0 = cJSON_GetArrayItem(eos, 0);
        double       d  = e0 && cJSON_IsNumber(e0) ? e0->valuedouble : -2;
        if (!(d >= -1 && d <= (double)BIG) || d != floor(d))
            LQ_FAIL(err, LQ_ERR_CONFIG_VALUE,
                    "%s: key \"eos_token_id\" must be an integer or a non-empty list of "
                    "integers",
                    label);
        cfg->eos_token_id = (int64_t)d;
    } else {
        LQ_TRY(lq_json_get_i64(root, "eos_token_id", 0, -1, BIG, &cfg->eos_token_id, label, err));
    }
    return LQ_OK;
}

/* The MLP activation and Gemma's conventions ((1 + w) norms, post norms, scaled embeddings,
 * query_pre_attn_scalar, soft-caps). */
static lq_status parse_act_gemma(const cJSON *root, const char *label, const family *fam,
                                 lq_model_config *cfg, lq_err *err) {
    /* GemmaMLP reads hidden_activation (older Gemma files also carry hidden_act) */
    char act[32] = "";
    if (fam->gemma)
        LQ_TRY(lq_json_get_str(root, "hidden_activation", 0, act, sizeof act, label, err));
    if (!act[0])
        LQ_TRY(lq_json_get_str(root, "hidden_act", 0, act, sizeof act, label, err));
    if (!act[0])
        snprintf(act, sizeof act, "%s", fam->gemma ? "gelu_pytorch_tanh" : "silu");
    if (!strcmp(act, "silu") || !strcmp(act, "swish"))
        cfg->act = LQ_ACT_SILU;
    else if (!strcmp(act, "gelu_pytorch_tanh") || !strcmp(act, "gelu_new"))
        cfg->act = LQ_ACT_GELU_TANH; /* both are the tanh approximation */
    else
        LQ_FAIL(err, LQ_ERR_UNSUPPORTED_ARCH,
                "%s: hidden activation \"%s\" is not supported (silu, gelu_pytorch_tanh)", label,
                act);

    cfg->embed_scale = 1.0;
    if (fam->gemma) {
        cfg->norm_plus_one = 1;
        cfg->post_norms    = 1;
        cfg->embed_scale   = sqrt((double)cfg->hidden_size);
        double qpas        = 256;
        LQ_TRY(lq_json_get_f64(root, "query_pre_attn_scalar", 0, &qpas, label, err));
        if (!(qpas > 0))
            LQ_FAIL(err, LQ_ERR_CONFIG_VALUE, "%s: query_pre_attn_scalar must be > 0", label);
        cfg->attn_scale     = pow(qpas, -0.5);
        cfg->attn_softcap   = fam->default_attn_softcap;
        cfg->final_softcap  = fam->default_final_softcap;
        const char *caps[2] = {"attn_logit_softcapping", "final_logit_softcapping"};
        double     *vals[2] = {&cfg->attn_softcap, &cfg->final_softcap};
        for (int i = 0; i < 2; i++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, caps[i]);
            if (v && cJSON_IsNull(v))
                *vals[i] = 0;
            else
                LQ_TRY(lq_json_get_f64(root, caps[i], 0, vals[i], label, err));
            if (*vals[i] < 0)
                LQ_FAIL(err, LQ_ERR_CONFIG_VALUE, "%s: %s must be > 0 or null", label, caps[i]);
        }
    }

    return LQ_OK;
}

lq_status lq_config_parse(const char *json, size_t len, const char *label, lq_model_config *cfg,
                          lq_err *err) {
    memset(cfg, 0, sizeof *cfg);
    cJSON *root = NULL;
    LQ_TRY(lq_json_parse(json, len, label, &root, err));
    lq_status     st  = LQ_OK;
    const family *fam = NULL;
    if (!cJSON_IsObject(root))
        LQ_FAIL_GOTO(err, LQ_ERR_CONFIG_VALUE, "%s: top level is not a JSON object", label);
    LQ_TRY_GOTO(parse_family(root, label, &fam, cfg, err));
    LQ_TRY_GOTO(parse_dims(root, label, fam, cfg, err));
    LQ_TRY_GOTO(parse_io(root, label, fam, cfg, err));
    LQ_TRY_GOTO(parse_sliding_window(root, label, fam, cfg, err));
    LQ_TRY_GOTO(parse_act_gemma(root, label, fam, cfg, err));
    LQ_TRY_GOTO(parse_rope(root, label, fam, cfg, err));
    LQ_TRY_GOTO(parse_moe(root, label, fam, cfg, err));
    LQ_TRY_GOTO(check_plausible(cfg, label, err));
    cfg->quantized = cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(root, "quantization_config"));
done:
    cJSON_Delete(root);
    return st;
}

lq_status lq_config_load(const char *dir, lq_model_config *cfg, lq_err *err) {
    char path[4200];
    if (!lq_path_join(path, sizeof path, dir, "config.json"))
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "%s: path too long", dir);
    if (!lq_dir_exists(dir))
        LQ_FAIL(err, LQ_ERR_NOT_FOUND, "%s: model directory not found", dir);
    if (!lq_file_exists(path))
        LQ_FAIL(err, LQ_ERR_NOT_FOUND, "%s: no config.json in model directory", path);
    char   *buf = NULL;
    int64_t len = 0;
    LQ_TRY(lq_read_file(path, 16 << 20, &buf, &len, err));
    lq_status st = lq_config_parse(buf, (size_t)len, path, cfg, err);
    free(buf);
    return st;
}
