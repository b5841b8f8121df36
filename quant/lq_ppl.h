/* lq_ppl.h -- perplexity over a token stream with the two standard protocols.
 *
 * "gptq" (GPTQ/AWQ papers, gptq/datautils.py + llama_eval): the whole text is one token stream
 *   with BOS once at the very start (when the tokenizer adds BOS); it is cut into
 *   floor(n / ctx) non-overlapping windows, the tail is dropped, every window is evaluated
 *   independently and scores its ctx-1 next-token predictions; ppl = exp(mean NLL).
 * "llamacpp" (llama-perplexity): windows of n_ctx tokens whose first token is replaced by BOS;
 *   only the second half of each window is scored (n_ctx - 1 - n_ctx/2 tokens), so every scored
 *   token sees at least n_ctx/2 tokens of context. Needs at least 2 * n_ctx tokens.
 * "docs" (llama2.c-style evaluation of document collections such as TinyStories): the text is
 *   split at a separator ("<|endoftext|>"), each document is stripped of surrounding whitespace,
 *   encoded as BOS + text, truncated to ctx, and all its next-token predictions are scored. This
 *   reproduces the llama2.c reference for stories260K (NLL 1.266 on tinystories_sample.txt). */
#ifndef LQ_PPL_H
#define LQ_PPL_H

#include "lq_model.h"

typedef enum lq_ppl_protocol {
    LQ_PPL_GPTQ     = 0,
    LQ_PPL_LLAMACPP = 1,
    LQ_PPL_DOCS     = 2
} lq_ppl_protocol;

typedef struct lq_ppl_opts {
    int64_t             ctx;      /* window; 0 = protocol default */
    int                 protocol; /* lq_ppl_protocol */
    int32_t             bos;      /* BOS id, -1 if the tokenizer has none */
    const lq_callbacks *cb;       /* progress ("ppl", windows) */
} lq_ppl_opts;

typedef struct lq_ppl_result {
    double  ppl;
    double  nll;           /* mean NLL per scored token (nats) */
    int64_t tokens;        /* tokens in the stream */
    int64_t tokens_scored;
    int64_t windows;
    int64_t ctx;
    double  seconds;
} lq_ppl_result;

/* Default window of a protocol for a model: gptq min(2048, max_pos), llamacpp min(512, max_pos). */
int64_t lq_ppl_default_ctx(const lq_model_config *c, int protocol);

/* Evaluate ids[n] (BOS already prepended for gptq if wanted). Loads all layers. */
lq_status lq_ppl_tokens(lq_model *m, const int32_t *ids, int64_t n, const lq_ppl_opts *o,
                        lq_ppl_result *r, lq_err *err);

/* Evaluate independent sequences (docs protocol): seq i is ids[off[i] .. off[i+1]), all its
 * predictions scored (sequences longer than ctx are truncated to ctx). */
lq_status lq_ppl_sequences(lq_model *m, const int32_t *ids, const int64_t *off, int64_t nseq,
                           const lq_ppl_opts *o, lq_ppl_result *r, lq_err *err);

#endif
