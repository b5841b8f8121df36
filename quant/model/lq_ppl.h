/* lq_ppl.h -- perplexity of a model on token ids (internal API; the public lq_perplexity in
 * llmquant.h adds model/tokenizer/text loading and the JSON report).
 *
 * Protocols:
 *  "gptq"     (GPTQ / AWQ papers: gptq/datautils.py + llama.py llama_eval, llm-awq entry.py):
 *             the whole text is ONE token stream with BOS once at its start (when the tokenizer
 *             adds BOS); it is cut into floor(n / ctx) non-overlapping windows, the tail dropped;
 *             each window runs independently (no BOS re-inserted) and scores its ctx - 1
 *             next-token predictions; ppl = exp(mean NLL over all n_windows * (ctx - 1)).
 *             ctx default min(2048, max_position_embeddings); needs n >= ctx.
 *  "llamacpp" (llama.cpp llama-perplexity): the same stream cut into floor(n / ctx) chunks whose
 *             first token is replaced by BOS (when the tokenizer adds BOS); only positions
 *             >= ctx/2 are scored, i.e. ctx - 1 - ctx/2 predictions per chunk, each with at
 *             least ctx/2 tokens of context. ctx default min(512, max_position_embeddings);
 *             needs n >= 2 * ctx, like llama-perplexity.
 *  "docs"     (llama2.c-style evaluation of document collections such as TinyStories; in
 *             lq_perplexity): the text is split at a separator ("<|endoftext|>"), each document
 *             stripped of surrounding whitespace and encoded as BOS + text, truncated to ctx,
 *             and all its next-token predictions scored (lq_ppl_sequences). This is the
 *             protocol behind the llama2.c reference for stories260K: NLL 1.266 on
 *             tinystories_sample.txt (tests/test_ppl.c lists the windowings that do not).
 *
 * Memory: with m->layers loaded (lq_model_load_all) windows run a few at a time through all
 * layers; without, they run in batches layer by layer, each layer loaded, applied to the batch
 * and freed (batch activations bounded by max_act_bytes), so a model whose float32 weights do
 * not fit in RAM still evaluates. Windows run as their ids arrive (a buffer of one batch of
 * windows): lq_ppl_text streams the text through the tokenizer (lq_tok_stream) into them, so
 * neither the text nor its ids are ever held whole. */
#ifndef LQ_PPL_H
#define LQ_PPL_H

#include "lq_model.h"

typedef enum lq_ppl_protocol {
    LQ_PPL_GPTQ     = 0,
    LQ_PPL_LLAMACPP = 1,
    LQ_PPL_DOCS     = 2,
    LQ_PPL_PROTOCOL_COUNT
} lq_ppl_protocol;

/* "gptq" / "llamacpp" / "docs" <-> enum; parse fails with LQ_ERR_INVALID_ARG listing them. */
lq_status   lq_ppl_protocol_parse(const char *name, int *protocol, lq_err *err);
const char *lq_ppl_protocol_name(int protocol);

typedef struct lq_ppl_opts {
    int64_t ctx;                     /* window; 0 = protocol default */
    int     protocol;                /* lq_ppl_protocol */
    int32_t bos;                     /* llamacpp: written over each chunk's first token; -1 = the
                                        tokenizer adds no BOS (chunks left as they are) */
    const lq_callbacks *cb;          /* progress ("ppl", windows done / total) and cancel */
    int64_t             max_windows; /* gptq/llamacpp: only the first N windows (0 = all), as
                                        llama-perplexity --chunks */
    unsigned kernel_flags; /* lq_qlinear_forward_cpu_ex flags of the quantized linears */
} lq_ppl_opts;

/* Execution knobs that do not change the result. */
typedef struct lq_ppl_exec {
    int              nthreads;      /* <= 0: all cores */
    int64_t          max_act_bytes; /* streamed layers: activation budget per batch (0: 1 GiB) */
    lq_linear_dev_fn lin_dev;       /* linears elsewhere (GPU kernels), NULL = CPU kernels */
    void            *lin_dev_user;
} lq_ppl_exec;

typedef struct lq_ppl_result {
    double  ppl;
    double  nll;    /* mean NLL per scored token (nats) */
    int64_t tokens; /* tokens in the stream / all documents */
    int64_t tokens_scored;
    int64_t windows;
    int64_t ctx;
    double  seconds;    /* forward + scoring wall time */
    int64_t tokens_run; /* tokens pushed through the model */
    /* mixture of experts: tokens routed to each (layer, expert), the fewest and most any
     * expert got, and how many (layer, expert) pairs got none (experts 0: a dense model) */
    int64_t experts, expert_min, expert_max, experts_unused, expert_min_layer, expert_min_id;
} lq_ppl_result;

/* Default window of a protocol for a model: gptq and docs min(2048, max_pos), llamacpp
 * min(512, max_pos). */
int64_t lq_ppl_default_ctx(const lq_model_config *c, int protocol);

/* gptq / llamacpp windows over ids[n] (BOS already at ids[0] when the tokenizer adds one).
 * Text too short -> LQ_ERR_CALIB_EMPTY naming the token count and the count needed; ctx over
 * max_position_embeddings -> LQ_ERR_INVALID_ARG; NaN/Inf logits -> LQ_ERR_NUMERIC naming the
 * window; progress callback non-zero -> LQ_ERR_INTERRUPTED. */
lq_status lq_ppl_tokens(lq_model *m, const int32_t *ids, int64_t n, const lq_ppl_opts *o,
                        lq_ppl_result *r, lq_err *err);
/* The same with execution knobs (ex may be NULL: defaults). */
lq_status lq_ppl_tokens_ex(lq_model *m, const int32_t *ids, int64_t n, const lq_ppl_opts *o,
                           const lq_ppl_exec *ex, lq_ppl_result *r, lq_err *err);

/* Independent sequences (docs protocol): seq i is ids[off[i] .. off[i+1]), truncated to ctx,
 * all its next-token predictions scored; sequences under 2 tokens are skipped (not counted in
 * r->windows). None long enough -> LQ_ERR_CALIB_EMPTY. */
lq_status lq_ppl_sequences(lq_model *m, const int32_t *ids, const int64_t *off, int64_t nseq,
                           const lq_ppl_opts *o, lq_ppl_result *r, lq_err *err);
lq_status lq_ppl_sequences_ex(lq_model *m, const int32_t *ids, const int64_t *off, int64_t nseq,
                              const lq_ppl_opts *o, const lq_ppl_exec *ex, lq_ppl_result *r,
                              lq_err *err);

/* What lq_ppl_text read and how it ran, for reports. */
typedef struct lq_ppl_text_info {
    int64_t text_bytes;
    int     text_truncated; /* the text was longer than was read (--chunks: its windows were
                               full before the end) */
    int    resident;        /* layers held in memory (else streamed per batch of windows) */
    double load_seconds;    /* loading the layers */
} lq_ppl_text_info;

/* Perplexity of m on a text file under the options in op (protocol, ctx, chunks,
 * doc_separator, threads, max_memory): the text streamed (lq_text_stream_file) through
 * the tokenizer (lq_tok_stream, BOS as the tokenizer adds it; parts of 8 MiB, or max_memory /
 * 64 between 64 KiB and 8 MiB) into windows that run as their ids arrive, the reading stopped once
 * --chunks windows are full; docs: one document at a time. The ids are those of tokenizing the
 * whole text at once. Layers all loaded when their float32 copies fit in half the RAM, else
 * streamed per batch (activations max_memory / 4, default 1 GiB). gpu (may be NULL) takes the
 * dense linears. The one path behind `llmquant ppl` and `--check-ppl`. Errors name data_file. */
struct lq_gpu;
struct lq_tokenizer;
struct lq_opts;
lq_status lq_ppl_text(lq_model *m, const struct lq_tokenizer *tok, const char *data_file,
                      const struct lq_opts *op, struct lq_gpu *gpu, const lq_callbacks *cb,
                      lq_ppl_result *r, lq_ppl_text_info *info, lq_err *err);

#endif
