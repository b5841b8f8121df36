/* lq_config.h -- Hugging Face config.json for Llama-family decoders (llama, mistral, qwen2,
 * qwen3). */
#ifndef LQ_CONFIG_H
#define LQ_CONFIG_H

#include "lq_base.h"

/* Limits on what a config may declare: each of hidden/intermediate/vocab size, and the total
 * parameter count (8.8e12; the largest open models are ~2e12). Above them the config is refused
 * as not a real model (LQ_ERR_CONFIG_VALUE) before anything is sized from it. */
#define LQ_CFG_MAX_DIM    ((int64_t)1 << 24)
#define LQ_CFG_MAX_PARAMS ((int64_t)1 << 43)

typedef enum lq_rope_type {
    LQ_ROPE_DEFAULT = 0,
    LQ_ROPE_LINEAR  = 1, /* position / factor */
    LQ_ROPE_LLAMA3  = 2  /* Llama-3.1 frequency-dependent scaling */
} lq_rope_type;

typedef struct lq_model_config {
    char    model_type[32];   /* "llama", "mistral", "qwen2", "qwen3" */
    char    architecture[64]; /* architectures[0] */
    char    torch_dtype[16];  /* "float16", "bfloat16", "float32" ("" if absent) */
    int64_t hidden_size;
    int64_t intermediate_size;
    int64_t num_layers;
    int64_t num_heads;
    int64_t num_kv_heads; /* defaults to num_heads */
    int64_t head_dim;     /* defaults to hidden_size / num_heads */
    int64_t vocab_size;
    int64_t max_position_embeddings;
    double  rms_norm_eps;
    double  rope_theta;
    int     rope_type; /* lq_rope_type */
    double  rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int64_t rope_original_max_pos;
    int     tie_word_embeddings;
    int     attention_bias; /* q/k/v/o bias (llama attention_bias) */
    int     qkv_bias;       /* q/k/v bias only (qwen2) */
    int     qk_norm;        /* q_norm/k_norm: RMSNorm per head before RoPE (qwen3) */
    int     mlp_bias;
    int64_t bos_token_id; /* -1 if absent */
    int64_t eos_token_id;
    int64_t sliding_window; /* 0 if none */
    int     quantized;      /* config has quantization_config */
} lq_model_config;

/* Parse config.json text. Unsupported model_type -> LQ_ERR_UNSUPPORTED_ARCH naming it;
 * inconsistent sizes (hidden % heads, heads % kv_heads) -> LQ_ERR_CONFIG_VALUE. */
lq_status lq_config_parse(const char *json, size_t len, const char *label, lq_model_config *cfg,
                          lq_err *err);
/* <dir>/config.json */
lq_status lq_config_load(const char *dir, lq_model_config *cfg, lq_err *err);

#endif
