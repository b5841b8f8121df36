/* config.json for the Llama family. Only architectures whose forward we implement are
 * accepted, so a model we would silently mis-run is refused up front. */
#include "lq_config.h"

#include "lq_json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const k_supported[] = {"llama", "mistral", "qwen2"};

lq_status lq_config_parse(const char *json, size_t len, const char *label, lq_model_config *cfg,
                          lq_err *err) {
    memset(cfg, 0, sizeof *cfg);
    cJSON *root = NULL;
    LQ_TRY(lq_json_parse(json, len, label, &root, err));
    lq_status st = LQ_OK;
    if (!cJSON_IsObject(root))
        LQ_FAIL_GOTO(err, LQ_ERR_CONFIG_VALUE, "%s: top level is not a JSON object", label);

    LQ_TRY_GOTO(lq_json_get_str(root, "model_type", 1, cfg->model_type, sizeof cfg->model_type,
                                label, err));
    int ok = 0;
    for (size_t i = 0; i < sizeof k_supported / sizeof *k_supported; i++)
        ok |= strcmp(cfg->model_type, k_supported[i]) == 0;
    if (!ok)
        LQ_FAIL_GOTO(err, LQ_ERR_UNSUPPORTED_ARCH,
                     "%s: model_type \"%s\" is not supported (supported: llama, mistral, qwen2)",
                     label, cfg->model_type);
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    if (cJSON_IsArray(arch) && cJSON_GetArraySize(arch) > 0 &&
        cJSON_IsString(cJSON_GetArrayItem(arch, 0))) {
        snprintf(cfg->architecture, sizeof cfg->architecture, "%s",
                 cJSON_GetArrayItem(arch, 0)->valuestring);
        if (!strstr(cfg->architecture, "ForCausalLM"))
            LQ_FAIL_GOTO(err, LQ_ERR_UNSUPPORTED_ARCH,
                         "%s: architecture \"%s\" is not supported (need *ForCausalLM)", label,
                         cfg->architecture);
    }
    LQ_TRY_GOTO(lq_json_get_str(root, "torch_dtype", 0, cfg->torch_dtype, sizeof cfg->torch_dtype,
                                label, err));
    if (!cfg->torch_dtype[0])
        LQ_TRY_GOTO(lq_json_get_str(root, "dtype", 0, cfg->torch_dtype, sizeof cfg->torch_dtype,
                                    label, err));

    const int64_t BIG = (int64_t)1 << 40;
    LQ_TRY_GOTO(lq_json_get_i64(root, "hidden_size", 1, 1, BIG, &cfg->hidden_size, label, err));
    LQ_TRY_GOTO(lq_json_get_i64(root, "intermediate_size", 1, 1, BIG, &cfg->intermediate_size,
                                label, err));
    LQ_TRY_GOTO(lq_json_get_i64(root, "num_hidden_layers", 1, 1, 1 << 20, &cfg->num_layers, label,
                                err));
    LQ_TRY_GOTO(lq_json_get_i64(root, "num_attention_heads", 1, 1, 1 << 20, &cfg->num_heads,
                                label, err));
    cfg->num_kv_heads = cfg->num_heads;
    LQ_TRY_GOTO(lq_json_get_i64(root, "num_key_value_heads", 0, 1, 1 << 20, &cfg->num_kv_heads,
                                label, err));
    LQ_TRY_GOTO(lq_json_get_i64(root, "vocab_size", 1, 1, BIG, &cfg->vocab_size, label, err));
    cfg->max_position_embeddings = 2048;
    LQ_TRY_GOTO(lq_json_get_i64(root, "max_position_embeddings", 0, 1, BIG,
                                &cfg->max_position_embeddings, label, err));
    cfg->rms_norm_eps = 1e-6;
    LQ_TRY_GOTO(lq_json_get_f64(root, "rms_norm_eps", 0, &cfg->rms_norm_eps, label, err));
    cfg->rope_theta = 10000.0;
    LQ_TRY_GOTO(lq_json_get_f64(root, "rope_theta", 0, &cfg->rope_theta, label, err));
    if (cfg->rms_norm_eps <= 0 || cfg->rope_theta <= 0)
        LQ_FAIL_GOTO(err, LQ_ERR_CONFIG_VALUE, "%s: rms_norm_eps and rope_theta must be > 0",
                     label);

    if (cfg->hidden_size % cfg->num_heads != 0)
        LQ_FAIL_GOTO(err, LQ_ERR_CONFIG_VALUE,
                     "%s: hidden_size %lld is not divisible by num_attention_heads %lld", label,
                     (long long)cfg->hidden_size, (long long)cfg->num_heads);
    if (cfg->num_heads % cfg->num_kv_heads != 0)
        LQ_FAIL_GOTO(err, LQ_ERR_CONFIG_VALUE,
                     "%s: num_attention_heads %lld is not divisible by num_key_value_heads %lld",
                     label, (long long)cfg->num_heads, (long long)cfg->num_kv_heads);
    cfg->head_dim = cfg->hidden_size / cfg->num_heads;
    LQ_TRY_GOTO(lq_json_get_i64(root, "head_dim", 0, 2, 1 << 16, &cfg->head_dim, label, err));
    if (cfg->head_dim % 2 != 0)
        LQ_FAIL_GOTO(err, LQ_ERR_CONFIG_VALUE, "%s: head_dim %lld must be even for RoPE", label,
                     (long long)cfg->head_dim);

    LQ_TRY_GOTO(lq_json_get_bool(root, "tie_word_embeddings", 0, &cfg->tie_word_embeddings,
                                 label, err));
    LQ_TRY_GOTO(lq_json_get_bool(root, "attention_bias", 0, &cfg->attention_bias, label, err));
    LQ_TRY_GOTO(lq_json_get_bool(root, "mlp_bias", 0, &cfg->mlp_bias, label, err));
    if (strcmp(cfg->model_type, "qwen2") == 0)
        cfg->qkv_bias = 1; /* Qwen2Attention: q/k/v with bias, o_proj without */
    cfg->bos_token_id = -1;
    cfg->eos_token_id = -1;
    LQ_TRY_GOTO(lq_json_get_i64(root, "bos_token_id", 0, -1, BIG, &cfg->bos_token_id, label, err));
    const cJSON *eos = cJSON_GetObjectItemCaseSensitive(root, "eos_token_id");
    if (cJSON_IsArray(eos) && cJSON_GetArraySize(eos) > 0 &&
        cJSON_IsNumber(cJSON_GetArrayItem(eos, 0)))
        cfg->eos_token_id = (int64_t)cJSON_GetArrayItem(eos, 0)->valuedouble;
    else
        LQ_TRY_GOTO(lq_json_get_i64(root, "eos_token_id", 0, -1, BIG, &cfg->eos_token_id, label,
                                    err));
    const cJSON *sw = cJSON_GetObjectItemCaseSensitive(root, "sliding_window");
    if (cJSON_IsNumber(sw))
        LQ_TRY_GOTO(lq_json_get_i64(root, "sliding_window", 0, 0, BIG, &cfg->sliding_window,
                                    label, err));

    char act[32] = "silu";
    LQ_TRY_GOTO(lq_json_get_str(root, "hidden_act", 0, act, sizeof act, label, err));
    if (strcmp(act, "silu") != 0 && strcmp(act, "swish") != 0)
        LQ_FAIL_GOTO(err, LQ_ERR_UNSUPPORTED_ARCH, "%s: hidden_act \"%s\" is not supported (silu)",
                     label, act);

    cfg->rope_type = LQ_ROPE_DEFAULT;
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
    if (rs && !cJSON_IsNull(rs)) {
        if (!cJSON_IsObject(rs))
            LQ_FAIL_GOTO(err, LQ_ERR_CONFIG_VALUE, "%s: rope_scaling must be an object or null",
                         label);
        char type[32] = "";
        LQ_TRY_GOTO(lq_json_get_str(rs, "rope_type", 0, type, sizeof type, label, err));
        if (!type[0])
            LQ_TRY_GOTO(lq_json_get_str(rs, "type", 0, type, sizeof type, label, err));
        cfg->rope_factor = 1.0;
        LQ_TRY_GOTO(lq_json_get_f64(rs, "factor", 0, &cfg->rope_factor, label, err));
        if (!strcmp(type, "default") || !type[0]) {
            cfg->rope_type = LQ_ROPE_DEFAULT;
        } else if (!strcmp(type, "linear")) {
            cfg->rope_type = LQ_ROPE_LINEAR;
        } else if (!strcmp(type, "llama3")) {
            cfg->rope_type = LQ_ROPE_LLAMA3;
            LQ_TRY_GOTO(lq_json_get_f64(rs, "low_freq_factor", 1, &cfg->rope_low_freq_factor,
                                        label, err));
            LQ_TRY_GOTO(lq_json_get_f64(rs, "high_freq_factor", 1, &cfg->rope_high_freq_factor,
                                        label, err));
            LQ_TRY_GOTO(lq_json_get_i64(rs, "original_max_position_embeddings", 1, 1, BIG,
                                        &cfg->rope_original_max_pos, label, err));
            if (cfg->rope_high_freq_factor <= cfg->rope_low_freq_factor)
                LQ_FAIL_GOTO(err, LQ_ERR_CONFIG_VALUE,
                             "%s: rope_scaling high_freq_factor must exceed low_freq_factor",
                             label);
        } else {
            LQ_FAIL_GOTO(err, LQ_ERR_UNSUPPORTED_ARCH,
                         "%s: rope_scaling type \"%s\" is not supported (linear, llama3)", label,
                         type);
        }
        if (cfg->rope_factor <= 0)
            LQ_FAIL_GOTO(err, LQ_ERR_CONFIG_VALUE, "%s: rope_scaling factor must be > 0", label);
    }
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
    char     *buf = NULL;
    int64_t   len = 0;
    LQ_TRY(lq_read_file(path, 16 << 20, &buf, &len, err));
    lq_status st = lq_config_parse(buf, (size_t)len, path, cfg, err);
    free(buf);
    return st;
}
