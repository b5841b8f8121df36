/* lq_tok_int.h -- internals shared by the tokenizer files (lq_tok.c dispatch + llama2.c,
 * lq_tok_spm.c SentencePiece protobuf, lq_tok_hf.c tokenizer.json). Not installed. */
#ifndef LQ_TOK_INT_H
#define LQ_TOK_INT_H

#include "lq_tok.h"

#include <stdint.h>

/* Bounds that keep a malformed or hostile file from asking for absurd allocations; real
 * vocabularies are at most a few hundred thousand pieces of a few hundred bytes. */
#define LQ_TOK_MAX_VOCAB (1 << 23)
#define LQ_TOK_MAX_PIECE (1 << 16)

/* Open-addressing map from byte strings to int32; keys are borrowed (must outlive the map). */
typedef struct lq_tok_ment {
    const char *s;
    uint64_t    h;
    int32_t     len;
    int32_t     val; /* -1 = empty slot */
} lq_tok_ment;

typedef struct lq_tok_map {
    lq_tok_ment *e;
    int64_t      cap, n; /* cap a power of two */
} lq_tok_map;

uint64_t lq_tok_hash(const char *s, int64_t len);
int      lq_tok_map_init(lq_tok_map *m, int64_t expected); /* 0 ok, -1 nomem */
/* 1 inserted, 0 key already present (value kept), -1 nomem. */
int     lq_tok_map_put(lq_tok_map *m, const char *s, int32_t len, int32_t val);
int32_t lq_tok_map_get(const lq_tok_map *m, const char *s, int64_t len); /* -1 if absent */
void    lq_tok_map_free(lq_tok_map *m);

/* Min-heap of merge candidates ordered by (key, pos): key is -score for SentencePiece (best
 * score first) and the merge rank for tokenizers' BPE (lowest rank first); ties go to the
 * leftmost pair in both references. */
typedef struct lq_tok_cand {
    double  key;
    int64_t pos; /* left symbol */
    int64_t aux; /* engine-specific staleness data */
    int32_t id;  /* merged piece */
} lq_tok_cand;

typedef struct lq_tok_heap {
    lq_tok_cand *v;
    int64_t      n, cap;
} lq_tok_heap;

int         lq_tok_heap_push(lq_tok_heap *h, lq_tok_cand c); /* 0 ok, -1 nomem */
lq_tok_cand lq_tok_heap_pop(lq_tok_heap *h);

/* Growable int32 vector for encode output. */
typedef struct lq_tok_ids {
    int32_t *v;
    int64_t  n, cap;
} lq_tok_ids;
int lq_tok_ids_push(lq_tok_ids *a, int32_t id); /* 0 ok, -1 nomem */

/* Length of a well-formed UTF-8 sequence at s[0..n) (1..4), 0 if ill-formed (overlong,
 * surrogate, > U+10FFFF, truncated or stray continuation byte). *cp gets the code point. */
int lq_tok_utf8_dec(const unsigned char *s, int64_t n, uint32_t *cp);
int lq_tok_utf8_enc(uint32_t cp, char *out); /* bytes written (1..4) */

typedef struct lq_tok_spm lq_tok_spm;
typedef struct lq_tok_hf  lq_tok_hf;

struct lq_tokenizer {
    lq_tok_kind kind;
    char        path[4096];
    int64_t     n;
    char      **piece;  /* [n] NUL-terminated; NULL for an id no piece has (tokenizer.json) */
    int32_t    *plen;   /* [n] */
    float      *score;  /* [n] */
    int32_t    *sorted; /* llama2.c: ids sorted by piece bytes, for lookup */
    int32_t     bos, eos;
    int         adds_bos;
    lq_tok_spm *spm;
    lq_tok_hf  *hf;
};

/* Append the ids of text[len] (no BOS) to out. cont: the text continues an earlier part of one
 * text (lq_tok_stream): what the tokenizer does at the start of a text (dummy prefix, Prepend
 * normalizer, Metaspace's "first" and ByteLevel's prefix space on the opening split) is left
 * out. */
lq_status lq_tok_encode_part(const lq_tokenizer *t, const char *text, int64_t len, int cont,
                             lq_tok_ids *out, lq_err *err);

/* Allocate piece/plen/score for n ids (zeroed). */
lq_status lq_tok_alloc_pieces(lq_tokenizer *t, int64_t n, lq_err *err);

lq_status lq_tok_spm_load(const uint8_t *buf, size_t len, lq_tokenizer *t, lq_err *err);
lq_status lq_tok_spm_encode(const lq_tokenizer *t, const char *text, int64_t len, int cont,
                            lq_tok_ids *out, lq_err *err);
void      lq_tok_spm_free(lq_tok_spm *s);

lq_status lq_tok_hf_load(const char *buf, size_t len, lq_tokenizer *t, lq_err *err);
lq_status lq_tok_hf_encode(const lq_tokenizer *t, const char *text, int64_t len, int cont,
                           lq_tok_ids *out, lq_err *err);
void      lq_tok_hf_free(lq_tok_hf *h);

#endif
