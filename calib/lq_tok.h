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
    LQ_TOK_HF_JSON = 0, /* tokenizer.json */
    LQ_TOK_SPM     = 1, /* tokenizer.model (SentencePiece protobuf) */
    LQ_TOK_LLAMA2C = 2  /* llama2.c tokenizer.bin / tokNNN.bin */
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
void      lq_tok_free(lq_tokenizer *t);

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
/* Streaming encoder: text pushed in pieces (whole UTF-8 characters) and its ids handed to fn in
 * order, the same ids lq_tok_encode gives for the whole text (BOS first when add_bos and the
 * tokenizer has one). The text is encoded part_bytes at a time (0: 8 MiB), each part ending just
 * after a newline where encoding the two sides apart was checked to give the ids of encoding
 * them together: first on min(1 KiB, part/4) bytes either side, then on the whole part (from
 * the previous cut, so with its real left context) plus that much to the right, with no long
 * whitespace run across the cut. What is assumed is only that nothing past that right window
 * changes the ids left of the cut (a pre-tokenizer's lookahead or merges reaching further across
 * a newline). Tokenizing costs about twice a single pass. Where no such newline exists the text
 * stays buffered until one does or the text ends (e.g. a Strip normalizer, which acts on the ends
 * of the text), so memory is a part for every tokenizer llmquant knows and the whole text at worst.
 * fn's error stops the stream and is returned. */
typedef lq_status (*lq_tok_ids_fn)(void *user, const int32_t *ids, int64_t n, lq_err *err);
typedef struct lq_tok_stream lq_tok_stream;
typedef struct lq_tok_stream_stats {
    int64_t parts;         /* encode calls */
    int64_t checks;        /* cuts checked */
    int64_t rejected;      /* ... and refused */
    int64_t text_bytes;    /* text encoded */
    int64_t ids;           /* ids handed out */
    int64_t peak_buffered; /* most text held at once */
} lq_tok_stream_stats;
lq_status lq_tok_stream_create(const lq_tokenizer *t, int add_bos, int64_t part_bytes,
                               lq_tok_ids_fn fn, void *user, lq_tok_stream **out, lq_err *err);
lq_status lq_tok_stream_push(lq_tok_stream *s, const char *text, int64_t len, lq_err *err);
/* Encode what is buffered (the end of the text). */
lq_status           lq_tok_stream_finish(lq_tok_stream *s, lq_err *err);
lq_tok_stream_stats lq_tok_stream_get_stats(const lq_tok_stream *s);
void                lq_tok_stream_free(lq_tok_stream *s);

/* Piece text of an id (raw vocab string, e.g. "▁the" or "<0x0A>"), NULL if out of range. */
const char *lq_tok_piece(const lq_tokenizer *t, int32_t id);

/* Source file the tokenizer came from, to copy next to a quantized checkpoint. */
const char *lq_tok_source_path(const lq_tokenizer *t);

#endif
