/* lq_tok.h -- tokenizers: HF tokenizer.json (BPE: SentencePiece-style with byte fallback as in
 * Llama-2/Mistral, byte-level as in GPT-2/Llama-3/Qwen2), SentencePiece tokenizer.model (BPE),
 * and llama2.c tokenizer .bin files (e.g. tok512.bin). Encoding matches the reference
 * implementations (sentencepiece / tokenizers) token for token. */
#ifndef LQ_TOK_H
#define LQ_TOK_H

#include "lq_base.h"
#include "lq_source.h"

typedef struct lq_tokenizer lq_tokenizer;

typedef enum lq_tok_kind {
    LQ_TOK_HF_JSON  = 0, /* tokenizer.json */
    LQ_TOK_SPM      = 1, /* tokenizer.model (SentencePiece protobuf) */
    LQ_TOK_LLAMA2C  = 2  /* llama2.c tokenizer.bin / tokNNN.bin */
} lq_tok_kind;

/* Look in dir for tokenizer.json, then tokenizer.model, then tokenizer.bin / tok*.bin.
 * LQ_ERR_TOKENIZER_MISSING naming dir if none. */
lq_status lq_tok_load_dir(const char *dir, lq_tokenizer **out, lq_err *err);
/* The tokenizer of a checkpoint: lq_tok_load_dir for a directory; for a GGUF file, the
 * tokenizer.json / tokenizer.model rebuilt from its vocabulary (lq_source_read). */
lq_status lq_tok_load_source(const lq_source *src, lq_tokenizer **out, lq_err *err);
/* A specific file; kind from its name/content. */
lq_status lq_tok_load_file(const char *path, lq_tokenizer **out, lq_err *err);
/* From memory (fuzzing); label names it in messages. */
lq_status lq_tok_load_memory(const void *buf, size_t len, lq_tok_kind kind, const char *label,
                             lq_tokenizer **out, lq_err *err);
void lq_tok_free(lq_tokenizer *t);

lq_tok_kind lq_tok_get_kind(const lq_tokenizer *t);
int64_t     lq_tok_vocab_size(const lq_tokenizer *t);
int32_t     lq_tok_bos_id(const lq_tokenizer *t); /* -1 if none */
int32_t     lq_tok_eos_id(const lq_tokenizer *t);
/* Whether the reference tokenizer prepends BOS by default (Llama-2: yes; GPT-2: no). */
int lq_tok_adds_bos(const lq_tokenizer *t);

/* Encode UTF-8 text (len bytes, need not be NUL-terminated) without special-token parsing
 * (text is text). add_bos: prepend BOS if the tokenizer has one. *ids is malloc'd. */
lq_status lq_tok_encode(const lq_tokenizer *t, const char *text, int64_t len, int add_bos,
                        int32_t **ids, int64_t *n_ids, lq_err *err);
/* Piece text of an id (raw vocab string, e.g. "▁the" or "<0x0A>"), NULL if out of range. */
const char *lq_tok_piece(const lq_tokenizer *t, int32_t id);

/* Source file the tokenizer came from, to copy next to a quantized checkpoint. */
const char *lq_tok_source_path(const lq_tokenizer *t);

#endif
