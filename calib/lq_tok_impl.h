/* lq_tok_impl.h -- what the tokenizer readers of calib/ share (internal). */
#ifndef LQ_TOK_IMPL_H
#define LQ_TOK_IMPL_H

#include "lq_tok.h"

#include <stdint.h>

struct lq_tokenizer {
    lq_tok_kind kind;
    char        path[4096];
    int64_t     n;
    char      **piece;  /* [n] NUL-terminated */
    int32_t    *plen;   /* [n] */
    float      *score;  /* [n] */
    int32_t    *sorted; /* ids sorted by piece bytes, for lookup */
    int64_t     nsorted; /* SentencePiece: only the pieces merges may produce */
    int32_t    *htab;    /* open-addressing index of sorted[0..nsorted) by piece bytes */
    uint64_t    hmask;
    int32_t     bos, eos;
    int         adds_bos;
    /* SentencePiece */
    int32_t     unk;
    int         byte_fallback, add_dummy_prefix, remove_extra_ws, escape_ws;
    int32_t     byte_id[256];
    int32_t    *user;   /* user-defined pieces (matched before BPE), longest first */
    struct lq_tok_hf *hf; /* tokenizer.json pipeline (lq_tok_hf.c) */
    int         ws_split; /* no piece joins a non-U+2581 character to a following U+2581:
                             words merge independently (same result, small heaps) */
    int64_t     nuser;
};

/* BPE merge candidates: a max-heap on score, leftmost pair first on ties (sentencepiece's
 * agenda order; llama2.c's left-to-right scan keeps the first strictly better pair too). */
typedef struct cand { /* 32 bytes: the heap of a long text is large */
    float   score;
    int32_t id;          /* merged piece */
    int64_t left, right; /* symbol indices */
    int32_t lver, rver;
} cand;

typedef struct heap {
    cand   *v;
    int64_t n, cap;
} heap;

int     lq_tok_heap_push(heap *h, cand c);
cand    lq_tok_heap_pop(heap *h);
int     lq_tok_cmp_bytes(const char *a, int32_t al, const char *b, int32_t bl);
void    lq_tok_sort_ids(const lq_tokenizer *t, int32_t *ids, int32_t *tmp, int64_t n);
/* Id of the piece with exactly these bytes among the first nsorted of sorted[] (the lowest id
 * on duplicates), -1 if none. lq_tok_index builds the hash index it uses. */
int32_t   lq_tok_lookup(const lq_tokenizer *t, const char *s, int32_t len);
lq_status lq_tok_index(lq_tokenizer *t, lq_err *err);

lq_status lq_tok_load_hf(const char *json, size_t len, const char *label, lq_tokenizer *t,
                         lq_err *err);
lq_status lq_tok_encode_hf(const lq_tokenizer *t, const char *text, int64_t len, int add_bos,
                           int32_t **ids, int64_t *n_ids, lq_err *err);
void      lq_tok_hf_free(struct lq_tok_hf *hf);

lq_status lq_tok_load_spm(const uint8_t *buf, size_t len, const char *label, lq_tokenizer *t,
                          lq_err *err);
lq_status lq_tok_encode_spm(const lq_tokenizer *t, const char *text, int64_t len, int add_bos,
                            int32_t **ids, int64_t *n_ids, lq_err *err);

#endif
