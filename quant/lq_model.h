/* lq_model.h -- Llama-family decoder on the CPU in float32 (RMSNorm, RoPE, GQA attention with a
 * causal mask, SwiGLU MLP, tied or untied lm_head, optional q/k/v/o/mlp biases).
 *
 * Layer-by-layer by design: the calibration driver loads one decoder layer at a time, runs it
 * over all samples (with a capture hook that sees the input of every Linear), quantizes it and
 * runs it again. Every Linear goes through lq_linear, which holds either dense float32 weights
 * or a quantized lq_qlinear executed by the CPU kernels. */
#ifndef LQ_MODEL_H
#define LQ_MODEL_H

#include "lq_base.h"
#include "lq_config.h"
#include "lq_kernels.h"
#include "lq_st.h"

typedef enum lq_lin_id {
    LQ_LIN_Q    = 0,
    LQ_LIN_K    = 1,
    LQ_LIN_V    = 2,
    LQ_LIN_O    = 3,
    LQ_LIN_GATE = 4,
    LQ_LIN_UP   = 5,
    LQ_LIN_DOWN = 6,
    LQ_LIN_COUNT
} lq_lin_id;

/* "self_attn.q_proj", ... ; module name is "model.layers.<i>.<this>". */
const char *lq_lin_name(lq_lin_id id);

typedef struct lq_linear {
    lq_qbuf buf;     /* buf.q describes the weights (LQ_FMT_DENSE: buf.q.dense float32 [n,k]) */
    float  *bias;    /* float32 [n] or NULL, owned */
} lq_linear;

void lq_linear_free(lq_linear *l);
/* y[m, n] = x[m, k] W^T + b through the CPU kernels (dense: OpenBLAS sgemm). */
lq_status lq_linear_forward(const lq_linear *l, const float *x, int64_t m, float *y, void *ws,
                            size_t ws_size, int nthreads);

typedef struct lq_layer {
    float    *attn_norm; /* [d] input_layernorm.weight */
    float    *mlp_norm;  /* [d] post_attention_layernorm.weight */
    lq_linear lin[LQ_LIN_COUNT];
} lq_layer;

void lq_layer_free(lq_layer *l);

typedef struct lq_model {
    lq_model_config cfg;
    char            dir[4096];
    lq_st          *st;        /* source tensors (mmap) */
    lq_format       format;    /* LQ_FMT_DENSE for an unquantized checkpoint */
    float          *embed;     /* [vocab, d] */
    float          *final_norm;/* [d] */
    lq_linear       lm_head;   /* tied: dense view of embed (not owned twice) */
    lq_layer       *layers;    /* [num_layers] filled by lq_model_load_all, else NULL */
    void           *qcfg;      /* lq_qconfig * of a quantized checkpoint (kernels/lq_format_io.h) */
    double          inv_freq[512]; /* RoPE inverse frequencies [head_dim/2], scaling applied */
} lq_model;

/* Open a model directory: config.json (+ quantization_config), safetensors (mmap), embeddings,
 * final norm, lm_head and RoPE tables. Layers are not loaded. Validates every tensor's presence,
 * dtype and shape against the config up front so errors come before any work. */
lq_status lq_model_open(const char *dir, lq_model **out, lq_err *err);
void      lq_model_free(lq_model *m);
/* Load decoder layer i (dense float32 or quantized descriptors) into *out. */
lq_status lq_model_load_layer(const lq_model *m, int64_t i, lq_layer *out, lq_err *err);
lq_status lq_model_load_all(lq_model *m, lq_err *err);

/* Scratch for forwards over up to max_tokens tokens of sequences up to max_seq. */
typedef struct lq_fwd_ws lq_fwd_ws;
lq_status lq_fwd_ws_create(const lq_model_config *cfg, int64_t max_tokens, int64_t max_seq,
                           lq_fwd_ws **out, lq_err *err);
void      lq_fwd_ws_free(lq_fwd_ws *ws);

/* Called with the input activations of Linear `lin` of a layer: x [t, k] row-major, one call per
 * forward chunk. Inputs shared by several linears (q/k/v, gate/up) are reported once per linear.
 * Return non-OK to abort the forward. */
typedef lq_status (*lq_capture_fn)(void *user, lq_lin_id lin, const float *x, int64_t t,
                                   int64_t k);

/* h [nseq * seqlen, d] in/out: residual stream through decoder layer `layer` for nseq
 * independent sequences of seqlen tokens (positions 0..seqlen-1). cap may be NULL.
 * stop_after >= 0: return right after the inputs of that linear were captured (h unchanged). */
lq_status lq_layer_forward(const lq_model *m, const lq_layer *layer, float *h, int64_t nseq,
                           int64_t seqlen, lq_capture_fn cap, void *user, int stop_after,
                           lq_fwd_ws *ws, lq_err *err);

/* Sub-module forwards (AWQ's module2inspect), per sequence batch:
 * attention: xn = input_layernorm(h) [nseq*seqlen, d] -> out [.., d] (after o_proj);
 * mlp: xn = post_attention_layernorm(h) -> out (after down_proj). */
lq_status lq_attn_forward(const lq_model *m, const lq_layer *layer, const float *xn,
                          int64_t nseq, int64_t seqlen, float *out, lq_fwd_ws *ws, lq_err *err);
lq_status lq_mlp_forward(const lq_model *m, const lq_layer *layer, const float *xn, int64_t ntok,
                         float *out, lq_fwd_ws *ws, lq_err *err);
/* RMSNorm rows: out = x / sqrt(mean(x^2) + eps) * w. */
void lq_rmsnorm(const float *x, const float *w, int64_t rows, int64_t d, double eps, float *out);

/* Token embeddings -> h [n, d]. Out-of-range ids -> LQ_ERR_INVALID_ARG. */
lq_status lq_model_embed(const lq_model *m, const int32_t *ids, int64_t n, float *h, lq_err *err);
/* Final norm + lm_head: logits [t, vocab]. */
lq_status lq_model_logits(const lq_model *m, const float *h, int64_t t, float *logits,
                          lq_fwd_ws *ws, lq_err *err);

#endif
