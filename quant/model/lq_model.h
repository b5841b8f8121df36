/* lq_model.h -- Llama-family decoder on the CPU in float32 (RMSNorm, RoPE, GQA attention with a
 * causal mask, SwiGLU MLP, tied or untied lm_head, optional q/k/v/o/mlp biases), with what
 * Qwen3 and Gemma 2/3 change in it (q/k norms, (1 + w) norms, post norms, GeGLU, scaled
 * embeddings, sliding and full layers with their own RoPE bases, soft-capping).
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
#include "lq_source.h"
#include "lq_st.h"

/* The linears of a decoder layer in the order the forward reaches them. A family has either
 * q/k/v and gate/up, or (cfg.fused, Phi-3) the fused qkv and gate_up in their place, stored
 * and quantized as one linear each: rows q, k, v and gate, up. */
typedef enum lq_lin_id {
    LQ_LIN_Q,
    LQ_LIN_K,
    LQ_LIN_V,
    LQ_LIN_QKV,
    LQ_LIN_O,
    LQ_LIN_GATE,
    LQ_LIN_UP,
    LQ_LIN_GATE_UP,
    LQ_LIN_DOWN,
    LQ_LIN_COUNT
} lq_lin_id;

/* "self_attn.q_proj", ... ; module name is "model.layers.<i>.<this>". */
const char *lq_lin_name(lq_lin_id id);
/* Whether layers of cfg have this linear (fused families: qkv and gate_up, not their parts). */
int lq_lin_present(const lq_model_config *cfg, lq_lin_id id);
/* Weight shape [n = out_features, k = in_features] of a linear under cfg. */
void lq_lin_shape(const lq_model_config *cfg, lq_lin_id id, int64_t *n, int64_t *k);
/* Whether cfg gives the linear a bias (qwen2 q/k/v, llama attention_bias / mlp_bias). */
int lq_lin_has_bias(const lq_model_config *cfg, lq_lin_id id);

typedef struct lq_linear {
    lq_qbuf buf;  /* buf.q describes the weights (LQ_FMT_DENSE: buf.q.dense float32 [n,k]) */
    float  *bias; /* float32 [n] or NULL, owned */
} lq_linear;

void lq_linear_free(lq_linear *l);
/* y[m, n] = x[m, k] W^T + b through the CPU kernels (dense: OpenBLAS sgemm; other formats:
 * lq_format_traits_get(fmt)->gemm_cpu). Both biases are applied when present: buf.q.bias (fp16,
 * by the kernel) and l->bias (float32); the model loader only ever sets l->bias. ws: at least
 * lq_linear_ws_size(l, m) bytes, 64-byte aligned; NULL makes a quantized linear allocate its
 * own scratch for the call (dense needs none). */
lq_status lq_linear_forward(const lq_linear *l, const float *x, int64_t m, float *y, void *ws,
                            size_t ws_size, int nthreads);
size_t    lq_linear_ws_size(const lq_linear *l, int64_t m);
/* The same with lq_qlinear_forward_cpu_ex flags: LQ_QLINEAR_INT_X runs GPTQ/AWQ on integer
 * activations where the CPU has those kernels, in chunks of at most 1024 rows. */
lq_status lq_linear_forward_ex(const lq_linear *l, const float *x, int64_t m, float *y, void *ws,
                               size_t ws_size, int nthreads, unsigned flags);
size_t    lq_linear_ws_size_ex(const lq_linear *l, int64_t m, unsigned flags);
/* Writable float32 [n, k] weights of a dense linear that owns them (every dense linear the
 * loader or lq_layer_alloc_dense makes), else NULL (quantized, or a view such as a tied
 * lm_head). */
float *lq_linear_dense_mut(lq_linear *l);

typedef struct lq_layer {
    int64_t idx;       /* which decoder layer (Gemma: sliding or full attention, RoPE base) */
    float  *attn_norm; /* [d] input_layernorm.weight */
    float  *mlp_norm;  /* [d] the MLP's input norm: post_attention_layernorm.weight, or
                          pre_feedforward_layernorm.weight where cfg.post_norms */
    float    *attn_post_norm; /* [d] post_attention_layernorm.weight (cfg.post_norms), else NULL */
    float    *mlp_post_norm;  /* [d] post_feedforward_layernorm.weight (cfg.post_norms) */
    float    *q_norm;         /* [head_dim] self_attn.q_norm.weight (cfg.qk_norm), else NULL */
    float    *k_norm;         /* [head_dim] self_attn.k_norm.weight (cfg.qk_norm), else NULL */
    lq_linear lin[LQ_LIN_COUNT];
    /* mixture of experts (cfg.num_experts > 0; lq_moe_lin enumerates them): the router [E, d],
     * experts[3 e + 0..2] = gate, up, down of expert e, shared[0..2] the shared expert's and
     * shared[3] its gate [1, d] */
    int64_t    n_experts;
    lq_linear  router;
    lq_linear *experts;
    lq_linear  shared[4];
} lq_layer;

/* The mixture-of-experts linears of a layer, j = 0 .. lq_moe_count(cfg) - 1: the router, then
 * gate / up / down of each expert, then the shared expert's gate / up / down and its gate.
 * Writes the leaf name under "model.layers.N." (Mixtral: block_sparse_moe.gate,
 * block_sparse_moe.experts.E.w1 / w3 / w2; Qwen: mlp.gate, mlp.experts.E.gate_proj ...,
 * mlp.shared_expert.*, mlp.shared_expert_gate), the shape [n, k] and, with l, the slot (l may
 * be NULL). One description for loading, validation and inspect. */
int64_t lq_moe_count(const lq_model_config *c);
/* Whether lq_moe_lin's linear j stays in float (the router, the shared expert's gate): the MoE
 * linears that are not slots. */
int lq_moe_is_float(const lq_model_config *c, int64_t j);
/* Bytes of a decoder layer's linears in float32 (experts and router included). */
int64_t lq_layer_float_bytes(const lq_model_config *c);
void    lq_moe_lin(const lq_model_config *c, lq_layer *l, int64_t j, char *leaf, size_t cap,
                   int64_t *n, int64_t *k, lq_linear **slot);

/* Every linear of a layer that a method may quantize, as one index (a "slot"): s < LQ_LIN_COUNT
 * is the lq_lin_id s; in a mixture-of-experts layer, LQ_LIN_COUNT + 3 e + r is the gate (r = 0),
 * up (1) or down (2) projection of expert e, where e = num_experts is the shared expert
 * (present where the family has one). The router and the shared expert's gate are not slots:
 * they stay in float, as AutoAWQ, GPTQModel and vLLM keep them. Slots of the same "kind" have
 * one shape: kinds 0 .. LQ_LIN_COUNT - 1 are the lq_lin_ids, then the routed experts' gate,
 * up, down, then the shared expert's. */
#define LQ_SLOT_KINDS (LQ_LIN_COUNT + 6)
int64_t   lq_slot_count(const lq_model_config *c);
int       lq_slot_present(const lq_model_config *c, int64_t s);
int64_t   lq_slot_expert(int64_t s); /* -1 for the lq_lin_id slots */
lq_lin_id lq_slot_role(int64_t s);   /* an expert's: LQ_LIN_GATE, LQ_LIN_UP or LQ_LIN_DOWN */
int64_t   lq_slot_of(lq_lin_id role, int64_t expert); /* expert -1: the lq_lin_id slot */
int       lq_slot_kind(const lq_model_config *c, int64_t s);
int64_t   lq_kind_slot(const lq_model_config *c, int kind); /* one slot of the kind */
void      lq_slot_shape(const lq_model_config *c, int64_t s, int64_t *n, int64_t *k);
/* The leaf under "model.layers.N." ("self_attn.q_proj", "mlp.experts.3.down_proj", ...);
 * lq_kind_name writes a routed expert's index as '*' ("mlp.experts.*.down_proj"). */
void       lq_slot_name(const lq_model_config *c, int64_t s, char *leaf, size_t cap);
void       lq_kind_name(const lq_model_config *c, int kind, char *leaf, size_t cap);
lq_linear *lq_layer_slot(lq_layer *l, int64_t s);

/* How a calibration forward captures the inputs of routed expert e (lq_fwd_ws_set_moe_modes):
 * ROUTED: the rows the router sends it; ALL: its gate/up inputs are not captured (they are the
 * block input every token reaches, LQ_SLOT_MOE_IN) and its down input is captured over all
 * tokens, the expert run on every row for that alone; SKIP: not captured (nor run when the
 * forward stops after the captures). The shared expert is always captured like ALL. The
 * forward's output uses the real routing whatever the mode. */
enum { LQ_MOE_ROUTED = 0, LQ_MOE_ALL = 1, LQ_MOE_SKIP = 2 };
/* In a mixture-of-experts layer the block input (after the MLP's norm, every token) is
 * captured under this slot, which such a layer does not otherwise have. */
#define LQ_SLOT_MOE_IN ((int64_t)LQ_LIN_GATE)
/* The slot whose captured input is slot s's: q for k and v, gate for up (also within an
 * expert), LQ_SLOT_MOE_IN for the gate/up of the shared expert and of an expert captured in
 * mode ALL (moe_mode [num_experts], NULL: all ROUTED), else s itself. */
int64_t lq_slot_input(const lq_model_config *c, int64_t s, const uint8_t *moe_mode);

/* The float vectors of a layer besides its linears (norm weights), named as the checkpoint names
 * them under "model.layers.N.". Enumerated here once, so that loading, validation, writing and
 * copying a layer follow the family (Qwen3 adds q_norm / k_norm, Gemma the post norms) without
 * lists of their own. Fills out[] and returns the count. */
#define LQ_LAYER_MAX_VECS 6
typedef struct lq_layer_vec {
    const char *leaf; /* "input_layernorm.weight", ... */
    int64_t     len;
    float     **slot; /* the layer's pointer */
} lq_layer_vec;
int lq_layer_vecs(const lq_model_config *cfg, lq_layer *l, lq_layer_vec out[LQ_LAYER_MAX_VECS]);

void lq_layer_free(lq_layer *l);

typedef struct lq_model {
    lq_model_config cfg;
    char            dir[4096];  /* the checkpoint: a directory or a .gguf file */
    lq_source      *src;        /* NULL for lq_model_create */
    lq_st          *st;         /* source tensors (mmap; owned by src) */
    lq_format       format;     /* LQ_FMT_DENSE for an unquantized checkpoint */
    float          *embed;      /* [vocab, d]; NULL when embed16 holds them */
    /* LQ_MODEL_OPEN_STORED16 and fp16 / bf16 embeddings in the file (no transform on the way):
     * [vocab, d] as stored, embed16_dt LQ_DT_F16 or LQ_DT_BF16 */
    uint16_t       *embed16;
    lq_dtype        embed16_dt;
    float          *final_norm; /* [d] */
    lq_linear       lm_head;    /* tied: dense view of embed (not owned twice) */
    lq_layer       *layers;     /* [num_layers] filled by lq_model_load_all, else NULL */
    void           *qcfg; /* lq_qconfig * of a quantized checkpoint (formats/lq_qformat.h) */
    /* set before loading layers: dense fp16 / bf16 weights stay 16-bit (a forward on the CPU
     * kernels; calibration and the GPU path take float32) */
    int             dense_as_stored;
    double          inv_freq[512]; /* RoPE inverse frequencies [head_dim/2], scaling applied */
} lq_model;

/* RoPE inverse frequencies inv[head_dim/2] for cfg (default, linear, llama3), in float32 with
 * transformers' operation order, so that positions far out round like the reference. */
void lq_rope_inv_freq(const lq_model_config *cfg, float *inv);

/* Open a checkpoint (a Hugging Face directory or a .gguf file, see lq_source.h): config.json
 * (+ quantization_config), safetensors (mmap), embeddings,
 * final norm, lm_head and RoPE frequencies. Layers are not loaded. Validates every tensor up
 * front so errors come before any work: presence (LQ_ERR_ST_MISSING_TENSOR), float dtype
 * (LQ_ERR_WEIGHT_DTYPE), shape vs config.json (LQ_ERR_WEIGHT_SHAPE), NaN/Inf
 * (LQ_ERR_WEIGHT_NONFINITE), each message naming the file and the tensor; quantized linears
 * through the format reader (LQ_ERR_QFORMAT ...) and by dequantizing them (NaN/Inf). A linear
 * of a quantized checkpoint whose "<prefix>.weight" is a float tensor is loaded dense. */
lq_status lq_model_open(const char *dir, lq_model **out, lq_err *err);
/* lq_model_open with flags: LQ_MODEL_OPEN_STORED16 sets dense_as_stored before anything loads,
 * so that fp16 / bf16 embeddings (and a tied lm_head, a view of them) stay 16-bit too (a
 * forward on the CPU kernels: what ppl does; the pipeline writes float embeddings). */
#define LQ_MODEL_OPEN_STORED16 1u
lq_status lq_model_open_flags(const char *dir, unsigned flags, lq_model **out, lq_err *err);
void      lq_model_free(lq_model *m);
/* Load decoder layer i (dense float32, or as stored under dense_as_stored, or quantized
 * descriptors) into *out. */
lq_status lq_model_load_layer(const lq_model *m, int64_t i, lq_layer *out, lq_err *err);
lq_status lq_model_load_all(lq_model *m, lq_err *err);

/* A model without files (synthetic tests, benchmarks, algorithms on made-up layers): embed
 * zeroed [vocab, d], final_norm the identity, lm_head tied to embed or a zeroed dense [vocab, d]
 * per cfg->tie_word_embeddings, RoPE from cfg. The caller fills the arrays and attaches layers
 * (lq_layer_alloc_dense) as it likes; lq_model_free frees m->layers when set. */
lq_status lq_model_create(const lq_model_config *cfg, lq_model **out, lq_err *err);
/* Dense float32 decoder layer `index` for cfg: norm weights all ones (the identity unless
 * cfg.norm_plus_one, where zeros are), weights and biases (where cfg has them) zeroed. */
lq_status lq_layer_alloc_dense(const lq_model_config *cfg, int64_t index, lq_layer *out,
                               lq_err *err);

/* Scratch for forwards over up to max_tokens tokens of sequences up to max_seq. Forwards take
 * any number of sequences: they run chunks of whole sequences of at most max_tokens tokens
 * (max_seq <= max_tokens), which is what bounds the memory. Holds the RoPE tables for
 * positions < max_seq. Quantized-kernel scratch grows on first use. One forward at a time.
 * lq_fwd_ws_create: on a cpu backend of its own. lq_fwd_ws_create_be: on be (borrowed; the op
 * table of kernels/lq_ops.h), where the forwards then run: their h, the layer they are given
 * (lq_layer_to_be), resumed and saved states and what the captures see are that backend's
 * memory. */
typedef struct lq_fwd_ws lq_fwd_ws;
typedef struct lq_be     lq_be;
lq_status lq_fwd_ws_create(const lq_model_config *cfg, int64_t max_tokens, int64_t max_seq,
                           lq_fwd_ws **out, lq_err *err);
lq_status lq_fwd_ws_create_be(const lq_model_config *cfg, int64_t max_tokens, int64_t max_seq,
                              lq_be *be, lq_fwd_ws **out, lq_err *err);
lq_be    *lq_fwd_ws_backend(lq_fwd_ws *ws);
void      lq_fwd_ws_free(lq_fwd_ws *ws);
/* CPU threads of the forwards using ws (<= 0: all cores, the default). */
void    lq_fwd_ws_set_threads(lq_fwd_ws *ws, int nthreads);
/* lq_qlinear_forward_cpu_ex flags for the quantized linears (0: float activations). */
void lq_fwd_ws_set_kernel_flags(lq_fwd_ws *ws, unsigned flags);
int64_t lq_fwd_ws_max_tokens(const lq_fwd_ws *ws);
/* Mixture of experts: how many tokens each layer's router sent to each expert through this
 * workspace, [layers, experts] (NULL, 0, 0 for a dense model). */
const int64_t *lq_fwd_ws_expert_tokens(const lq_fwd_ws *ws, int64_t *layers, int64_t *experts);
/* Capture modes of the routed experts for the forwards that capture (LQ_MOE_*, [num_experts];
 * NULL: all LQ_MOE_ROUTED). The array is read during those forwards, not copied. */
void lq_fwd_ws_set_moe_modes(lq_fwd_ws *ws, const uint8_t *modes);
/* Bytes held by ws (for memory reports). */
size_t lq_fwd_ws_bytes(const lq_fwd_ws *ws);
/* y[t, n] = x[t, k] W^T (+ the descriptor's bias) for a linear of any format somewhere else
 * than the CPU kernels (the GPU's row of the format table; the linear's float bias is added
 * here); LQ_ERR_UNSUPPORTED falls back to the CPU for that call. Perplexity uses it; the
 * conversion's calibration forwards use the float32 dense hook above instead, so that the
 * statistics a GPU conversion gathers agree with a CPU conversion's to rounding. */
typedef lq_status (*lq_linear_dev_fn)(void *user, const lq_qlinear *w, const float *x, int64_t t,
                                      float *y, lq_err *err);
void lq_fwd_ws_set_linear_dev(lq_fwd_ws *ws, lq_linear_dev_fn fn, void *user);

/* v_proj's output reaches the model only through attention: a value vector matters as much as
 * the attention its token receives. With this on, every attention forward also computes, for each
 * key token t of the chunk, a[t] = sum over heads and queries of P(query, t)^2 (the squared
 * attention probabilities it receives), and captures v_proj's input after the attention instead
 * of before it, so the capture callback can weight it (lq_fwd_ws_attn_weights, [t] of the chunk
 * being captured). GPTQ's v_proj Hessian uses it: plain GPTQ spends v's error budget on the
 * attention-sink tokens (the first of each window), which every query reads. */
void         lq_fwd_ws_want_attn_weights(lq_fwd_ws *ws, int on);
const float *lq_fwd_ws_attn_weights(const lq_fwd_ws *ws);

/* Called with the input activations of the linear in `slot` of a layer: x [t, k] row-major, one
 * call per forward chunk. Inputs shared by several linears (q/k/v, gate/up) are reported once per
 * linear; a fused family reports qkv and gate_up instead. In a mixture-of-experts layer: the
 * block input as LQ_SLOT_MOE_IN, then each routed expert's gate and up inputs, then (unless the
 * forward stops after gate/up) each expert's down input and the shared expert's, as the modes
 * of lq_fwd_ws_set_moe_modes say. Return non-OK to abort the forward. */
typedef lq_status (*lq_capture_fn)(void *user, int64_t slot, const float *x, int64_t t, int64_t k);

/* h [nseq * seqlen, d] in/out: residual stream through decoder layer `layer` for nseq
 * independent sequences of seqlen tokens (positions 0..seqlen-1). cap may be NULL.
 * stop_after >= 0: return right after the inputs of that linear were captured (h unchanged).
 * Captures come in lq_lin_id order within each chunk (q, k, v, o, gate, up, down); with
 * stop_after = s every linear with id <= s is captured, for every chunk (experts: every expert's
 * linears of that role). */
lq_status lq_layer_forward(const lq_model *m, const lq_layer *layer, float *h, int64_t nseq,
                           int64_t seqlen, lq_capture_fn cap, void *user, int stop_after,
                           lq_fwd_ws *ws, lq_err *err);

/* Points inside a decoder layer where a forward can hand its state out and a later forward of
 * the same layer can start again, so that GPTQ's true-sequential passes compute what comes
 * before a sub-group once instead of once per sub-group:
 *   LQ_STAGE_ATTN: the attention output, o_proj's input [t, heads * head_dim];
 *   LQ_STAGE_RESID: the residual stream after attention, h + attn [t, hidden];
 *   LQ_STAGE_ACT: the gated MLP's activation, down_proj's input [t, intermediate] (no experts);
 *     a forward resumed there needs the residual too (lq_fwd_resume.resid) and runs down_proj
 *     alone. */
typedef enum lq_fwd_stage {
    LQ_STAGE_INPUT = 0,
    LQ_STAGE_ATTN  = 1,
    LQ_STAGE_RESID = 2,
    LQ_STAGE_ACT   = 3
} lq_fwd_stage;

/* Receives the state at a stage: rows row0.. of the call's nseq * seqlen, x [t, k]. */
typedef lq_status (*lq_save_fn)(void *user, lq_fwd_stage stage, const float *x, int64_t row0,
                                int64_t t, int64_t k);

typedef struct lq_fwd_resume {
    lq_fwd_stage from;  /* LQ_STAGE_INPUT: from h as usual; else from state (h is then only read
                           for LQ_STAGE_ATTN, whose residual input it is) */
    const float *state; /* [nseq * seqlen, k] saved at stage `from` by an earlier forward */
    lq_fwd_stage save;  /* LQ_STAGE_ATTN / RESID / ACT: call save_fn there (INPUT: never) */
    lq_save_fn   save_fn;
    void        *save_user;
    const float *resid; /* from LQ_STAGE_ACT: the residual [nseq * seqlen, hidden] (RESID) */
} lq_fwd_resume;

/* lq_layer_forward, starting from and/or saving at a stage (rs NULL: the plain forward). The
 * captures before `from` are not made; a resumed forward computes bit-for-bit what the full one
 * would, given the same layer and workspace. */
lq_status lq_layer_forward_ex(const lq_model *m, const lq_layer *layer, float *h, int64_t nseq,
                              int64_t seqlen, lq_capture_fn cap, void *user, int stop_after,
                              const lq_fwd_resume *rs, lq_fwd_ws *ws, lq_err *err);

/* Sub-module forwards (AWQ's module2inspect), per sequence batch:
 * attention: xn = input_layernorm(h) [nseq*seqlen, d] -> out [.., d] (after o_proj);
 * mlp: xn = post_attention_layernorm(h) -> out (after down_proj). */
lq_status lq_attn_forward(const lq_model *m, const lq_layer *layer, const float *xn, int64_t nseq,
                          int64_t seqlen, float *out, lq_fwd_ws *ws, lq_err *err);
lq_status lq_mlp_forward(const lq_model *m, const lq_layer *layer, const float *xn, int64_t ntok,
                         float *out, lq_fwd_ws *ws, lq_err *err);

/* Token embeddings -> h [n, d]. Out-of-range ids -> LQ_ERR_INVALID_ARG. */
lq_status lq_model_embed(const lq_model *m, const int32_t *ids, int64_t n, float *h, lq_err *err);
/* Final norm + lm_head (+ Gemma 2's final soft-capping): logits [t, vocab]. */
lq_status lq_model_logits(const lq_model *m, const float *h, int64_t t, float *logits,
                          lq_fwd_ws *ws, lq_err *err);
/* The same with the final norm and lm_head given (on the workspace's backend). */
lq_status lq_model_logits_be(const lq_model *m, const float *final_norm, const lq_linear *lm_head,
                             const float *h, int64_t t, float *logits, lq_fwd_ws *ws, lq_err *err);

/* A decoder layer on a backend: on a host backend the host layer itself (a shallow copy), on a
 * device its norms, biases and linears (lq_ops.linear_upload: dense float32 weights as bf16
 * under LQ_PREC_FAST) uploaded. The host layer must outlive it on a host backend. */
typedef struct lq_layer_be {
    lq_layer L;
    lq_be   *be;
    void   **mem; /* what was allocated on the backend */
    size_t  *bytes;
    int64_t  nmem, cap;
} lq_layer_be;
lq_status lq_layer_to_be(lq_be *be, const lq_model_config *cfg, const lq_layer *host,
                         lq_layer_be *out, lq_err *err);
void      lq_layer_be_free(lq_layer_be *d);
/* The linear in slot s (and its float bias) put on the backend again from the host layer, after
 * a method rewrote it (a host backend: nothing to do, d shares the host's arrays). */
lq_status lq_layer_be_update(lq_be *be, const lq_model_config *cfg, const lq_layer *host,
                             lq_layer_be *d, int64_t s, lq_err *err);

#endif
