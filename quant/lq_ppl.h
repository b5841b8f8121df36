/* lq_ppl.h -- perplexity of a model on token ids (internal API; the public lq_perplexity in
 * llmquant.h adds model/tokenizer/text loading and the JSON report).
 *
 * Protocols (windows over ONE token stream: the whole text tokenized once, with BOS at its
 * start when the tokenizer adds one):
 *   gptq      (GPTQ / AWQ papers: gptq/llama.py llama_eval, llm-awq entry.py) ctx default
 *             min(2048, max_position_embeddings); n = ntok / ctx non-overlapping windows, the
 *             tail dropped, each window run independently (no BOS re-inserted); every window
 *             scores its ctx - 1 next-token predictions; ppl = exp(mean NLL over n*(ctx-1)).
 *             Needs ntok >= ctx.
 *   llamacpp  (llama.cpp llama-perplexity) ctx default min(512, max_position_embeddings);
 *             n = ntok / ctx chunks; the first token of every chunk is replaced by BOS (when
 *             the tokenizer adds BOS); only positions >= ctx/2 are scored, i.e. ctx - 1 - ctx/2
 *             predictions per chunk, each with at least ctx/2 tokens of context. Needs
 *             ntok >= 2*ctx, like llama-perplexity.
 * lq_ppl_sequences scores arbitrary independent sequences (e.g. one per document) and is what
 * both protocols reduce to.
 *
 * Memory: with m->layers loaded (lq_model_load_all) windows run a few at a time through all
 * layers; without, the windows run in batches layer by layer, each layer loaded, applied to the
 * batch and freed (batch activations bounded by max_act_bytes), so a model larger than RAM in
 * float32 still evaluates. */
#ifndef LQ_PPL_H
#define LQ_PPL_H

#include "lq_model.h"

typedef enum lq_ppl_protocol {
    LQ_PPL_GPTQ     = 0,
    LQ_PPL_LLAMACPP = 1,
    LQ_PPL_PROTOCOL_COUNT
} lq_ppl_protocol;

/* "gptq" / "llamacpp" <-> enum; parse fails with LQ_ERR_INVALID_ARG listing the choices. */
lq_status   lq_ppl_protocol_parse(const char *name, lq_ppl_protocol *out, lq_err *err);
const char *lq_ppl_protocol_name(lq_ppl_protocol p);
/* The protocol's default window for model m (ctx option 0). */
int64_t     lq_ppl_default_ctx(lq_ppl_protocol p, const lq_model_config *cfg);

typedef struct lq_ppl_opts {
    lq_ppl_protocol     protocol;
    int64_t             ctx;           /* 0: protocol default */
    int32_t             bos_id;        /* llamacpp: BOS written over each chunk's first token;
                                          -1 when the tokenizer adds no BOS */
    int                 nthreads;      /* <= 0: all cores */
    int64_t             max_act_bytes; /* streaming batch bound (0: 1 GiB) */
    const lq_callbacks *cb;            /* progress ("ppl", windows done / total) + cancel */
} lq_ppl_opts;

typedef struct lq_ppl_result {
    double  ppl;           /* exp(nll) */
    double  nll;           /* mean negative log-likelihood per scored token (nats) */
    int64_t tokens_scored;
    int64_t windows;
    int64_t ctx;
    int64_t tokens_run;    /* tokens pushed through the model (windows * ctx) */
    double  seconds;       /* forward + scoring wall time */
} lq_ppl_result;

/* Windows of ids[n] per opts->protocol. Text too short -> LQ_ERR_CALIB_EMPTY naming the token
 * count and the count needed; ctx over max_position_embeddings -> LQ_ERR_INVALID_ARG; NaN/Inf
 * logits -> LQ_ERR_NUMERIC; progress callback non-zero -> LQ_ERR_INTERRUPTED. */
lq_status lq_ppl_tokens(lq_model *m, const int32_t *ids, int64_t n, const lq_ppl_opts *opts,
                        lq_ppl_result *res, lq_err *err);

/* Independent sequences seqs[i] of lens[i] tokens (each <= max_position_embeddings); in each,
 * the predictions of tokens first+1 .. len-1 are scored (first = 0: all len - 1). Sequences run
 * one at a time. opts->protocol / ctx / bos_id are ignored; res->ctx is the longest sequence. */
lq_status lq_ppl_sequences(lq_model *m, const int32_t *const *seqs, const int64_t *lens,
                           int64_t nseqs, int64_t first, const lq_ppl_opts *opts,
                           lq_ppl_result *res, lq_err *err);

#endif
