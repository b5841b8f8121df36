/* lq_config.h -- Hugging Face config.json for the decoder families llmquant runs: llama,
 * mistral, qwen2, qwen3, gemma2, gemma3_text, phi3. */
#ifndef LQ_CONFIG_H
#define LQ_CONFIG_H

#include "lq_base.h"

/* Limits on what a config may declare: each of hidden/intermediate/vocab size, and the total
 * parameter count (8.8e12; the largest open models are ~2e12). Above them the config is refused
 * as not a real model (LQ_ERR_CONFIG_VALUE) before anything is sized from it. */
#define LQ_CFG_MAX_DIM     ((int64_t)1 << 24)
#define LQ_CFG_MAX_EXPERTS 4096 /* num_experts, num_experts_per_tok */
#define LQ_CFG_MAX_PARAMS  ((int64_t)1 << 43)

typedef enum lq_rope_type {
    LQ_ROPE_DEFAULT = 0,
    LQ_ROPE_LINEAR  = 1, /* position / factor */
    LQ_ROPE_LLAMA3  = 2, /* Llama-3.1 frequency-dependent scaling */
    /* Phi-3 LongRoPE: per-frequency factors (short_factor up to rope_original_max_pos tokens,
     * long_factor beyond), cos/sin times rope_attn_factor */
    LQ_ROPE_LONGROPE = 3
} lq_rope_type;

#define LQ_ROPE_MAX_HALF 512 /* head_dim / 2 of the largest head (1024) */

typedef enum lq_act {
    LQ_ACT_SILU      = 0, /* SwiGLU: silu(gate) * up */
    LQ_ACT_GELU_TANH = 1  /* GeGLU with the tanh approximation ("gelu_pytorch_tanh") */
} lq_act;

typedef struct lq_model_config {
    char model_type[32]; /* "llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3_text", "phi3",
                            "mixtral", "qwen2_moe", "qwen3_moe" */
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
    double  rope_attn_factor;                                          /* longrope: cos/sin scale */
    float   rope_short[LQ_ROPE_MAX_HALF], rope_long[LQ_ROPE_MAX_HALF]; /* longrope factors */
    int     tie_word_embeddings;
    int     attention_bias; /* q/k/v/o bias (llama attention_bias) */
    int     qkv_bias;       /* q/k/v bias only (qwen2) */
    int     qk_norm;        /* q_norm/k_norm: RMSNorm per head before RoPE (qwen3, gemma3) */
    int     mlp_bias;
    int64_t bos_token_id; /* -1 if absent */
    int64_t eos_token_id;
    int64_t sliding_window; /* 0 if none */
    /* Which layers slide: swa_period 0 = every layer (when sliding_window > 0); else layer i uses
     * full attention iff i % swa_period == swa_full_phase (Gemma 2: 2/1, Gemma 3: 6/5). */
    int64_t swa_period, swa_full_phase;
    double  rope_local_theta; /* RoPE base of the sliding layers (Gemma 3), 0 = rope_theta; those
                                 layers use default RoPE, the scaling is for full attention only */
    int act;                  /* lq_act */
    /* Gemma: every RMSNorm scales by (1 + w), not w; the embeddings are multiplied by
     * sqrt(hidden_size); attention and the MLP each have a norm after them as well
     * (post_attention_layernorm, pre_feedforward_layernorm, post_feedforward_layernorm). */
    int    norm_plus_one;
    int    post_norms;
    double embed_scale;   /* 1 unless Gemma */
    double attn_scale;    /* query scaling, head_dim^-1/2 unless query_pre_attn_scalar */
    double attn_softcap;  /* cap * tanh(score / cap) before the mask (Gemma 2), 0 = none */
    double final_softcap; /* the same on the logits, 0 = none */
    /* Phi-3: q/k/v live in one linear (self_attn.qkv_proj, rows q then k then v) and gate/up
     * in another (mlp.gate_up_proj, rows gate then up), which is what the checkpoint stores and
     * what gets quantized */
    int fused;
    /* Mixture of experts (Mixtral, Qwen2-MoE, Qwen3-MoE; num_experts 0: a dense MLP): the MLP is
     * num_experts gated MLPs of moe_intermediate; each token goes through the experts_per_tok
     * experts its router (a linear d -> num_experts, softmax in float32) ranks highest,
     * weighted by their probabilities (renormalized over the chosen ones when norm_topk), plus
     * a shared expert of shared_intermediate (0: none) scaled by the sigmoid of its own gate
     * (Qwen2-MoE). moe_mixtral: Mixtral's tensor names (block_sparse_moe, w1 / w3 / w2). */
    int64_t num_experts, experts_per_tok, moe_intermediate, shared_intermediate;
    int     norm_topk, moe_mixtral;
    int     quantized; /* config has quantization_config */
} lq_model_config;

/* Parse config.json text. Unsupported model_type -> LQ_ERR_UNSUPPORTED_ARCH naming it;
 * inconsistent sizes (hidden % heads, heads % kv_heads) -> LQ_ERR_CONFIG_VALUE. */
lq_status lq_config_parse(const char *json, size_t len, const char *label, lq_model_config *cfg,
                          lq_err *err);
/* What the tests check of a supported model_type, in a phrase (NULL for an unsupported one). */
const char *lq_config_family_verified(const char *model_type);
/* Whether decoder layer i attends through the sliding window. */
int lq_config_layer_sliding(const lq_model_config *cfg, int64_t i);
/* <dir>/config.json */
lq_status lq_config_load(const char *dir, lq_model_config *cfg, lq_err *err);

#endif
