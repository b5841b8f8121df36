/* lq_dataset.h -- calibration / evaluation text and calibration token windows.
 *
 * Text readers
 *   .txt            the file as is (a leading UTF-8 BOM is dropped)
 *   .jsonl          one JSON object per line with a string field "text"; the documents are
 *                   joined with "\n\n" exactly like Python's "\n\n".join(rows["text"]) in the
 *                   GPTQ/AWQ reference scripts (empty documents are kept, so a WikiText dump
 *                   in .jsonl gives the very string the references evaluate). Whitespace-only
 *                   lines are skipped; any other line that is not such an object ->
 *                   LQ_ERR_CALIB_FORMAT "<file>:<line>: ...".
 *   .txt.zst / .jsonl.zst   the same, zstd-compressed; decompressed as a stream (ZSTD_DStream,
 *                   window <= 128 MiB, constant-size I/O buffers). Content that starts with the
 *                   zstd magic is decompressed whatever the file is called. Corrupt or truncated
 *                   -> LQ_ERR_ZSTD naming the file.
 *   Any other name is read as .txt (wiki.test.raw, wiki.valid.tokens).
 * The result must be valid UTF-8 (else LQ_ERR_CALIB_FORMAT "<file>:<line>: invalid UTF-8 at
 * byte N") and contain a non-whitespace character (else LQ_ERR_CALIB_EMPTY).
 *
 * Window sampling (GPTQ datautils.get_wikitext2 style), lq_windows_sample:
 *   seqlen = min(seqlen, max_pos)                       (max_pos <= 0: no limit)
 *   need ntok >= seqlen + 1                              else LQ_ERR_CALIB_EMPTY with counts
 *   lq_rng_seed(&r, seed)
 *   for i in 0..nsamples-1:
 *       off[i] = lq_rng_below(&r, ntok - seqlen)         == random.randint(0, ntok-seqlen-1)
 *       window i = tokens[off[i] .. off[i] + seqlen)
 *   Windows are drawn independently (with replacement) from one token stream; the stream is
 *   the whole text tokenized once (BOS only at its start when the tokenizer adds one), as GPTQ
 *   does. The offsets follow the same distribution as GPTQ's but come from xoshiro256**, not
 *   Python's Mersenne Twister, so they are not the same numbers for the same seed.
 *
 * Thread-safety: no shared state; distinct objects may be used from distinct threads.
 */
#ifndef LQ_DATASET_H
#define LQ_DATASET_H

#include "lq_base.h"

/* Input kind flags (lq_text_read_memory); lq_text_flags_from_path derives them from a name. */
#define LQ_TEXT_JSONL 1u /* one JSON object per line, field "text" */
#define LQ_TEXT_ZSTD  2u /* zstd-compressed */

/* Default cap on the decoded text when max_bytes is 0 (WikiText-103 is 0.5 GB; past the cap the
 * text is cut and out->truncated says so). */
#define LQ_TEXT_DEFAULT_MAX_BYTES (1ll << 30)
/* One .jsonl document, or one line of plain text, may hold at most this much: a longer one is an
 * error, not an allocation (a 337 KB .jsonl.zst inflating to a 10 GB line drove RSS to 8.6 GB). */
#define LQ_TEXT_MAX_DOC_BYTES (64ll << 20)

typedef struct lq_text {
    char   *data;      /* UTF-8, NUL-terminated, malloc'd; owned */
    int64_t len;       /* bytes, without the NUL */
    int64_t ndocs;     /* jsonl documents read (1 for plain text) */
    int     truncated; /* reading stopped at max_bytes (the rest of the input was not read) */
} lq_text;

/* ".jsonl.zst" -> LQ_TEXT_JSONL | LQ_TEXT_ZSTD, ".txt" -> 0, ... (content sniffing is separate). */
unsigned lq_text_flags_from_path(const char *path);

/* Read a calibration/eval text file (see the header comment for formats). max_bytes > 0 caps
 * the decoded text: reading stops once it is reached and the text is cut back to a whole UTF-8
 * character (out->truncated = 1); 0 means LQ_TEXT_DEFAULT_MAX_BYTES. On error *out is empty. */
lq_status lq_text_read_file(const char *path, int64_t max_bytes, lq_text *out, lq_err *err);

/* Same from a buffer (not retained). flags: LQ_TEXT_JSONL / LQ_TEXT_ZSTD; zstd content is also
 * detected by its magic number. label names the input in messages. Used by the fuzzer. */
lq_status lq_text_read_memory(const void *buf, size_t len, unsigned flags, const char *label,
                              int64_t max_bytes, lq_text *out, lq_err *err);

void lq_text_free(lq_text *t);

/* Streaming read: the text lq_text_read_file would return, handed to sink in order in pieces of
 * whole UTF-8 characters as it is decoded (each once piece_bytes are buffered, 0: 1 MiB; a
 * piece is at most that plus one decoded input block of 128 KiB, or one .jsonl document), with the
 * same checks and errors (a bad byte is found before the piece holding it is handed out, so a sink
 * may have seen earlier pieces of a text that then fails). max_bytes > 0 caps the text as
 * there; 0: no cap. The sink sets *stop to end the reading early (not an error); its error
 * ends it and is returned. Memory: a piece plus the reader's buffers, whatever the input. */
typedef lq_status (*lq_text_sink_fn)(void *user, const char *text, int64_t len, int *stop,
                                     lq_err *err);
typedef struct lq_text_stream_info {
    int64_t len; /* bytes handed out */
    int64_t ndocs;
    int     truncated; /* max_bytes cut the text */
    int     stopped;   /* the sink stopped the reading */
} lq_text_stream_info;
lq_status lq_text_stream_file(const char *path, int64_t max_bytes, int64_t piece_bytes,
                              lq_text_sink_fn sink, void *user, lq_text_stream_info *info,
                              lq_err *err);
/* Same from a buffer (lq_text_read_memory's flags and label). Used by the fuzzer. */
lq_status lq_text_stream_memory(const void *buf, size_t len, unsigned flags, const char *label,
                                int64_t max_bytes, int64_t piece_bytes, lq_text_sink_fn sink,
                                void *user, lq_text_stream_info *info, lq_err *err);

/* ---------------------------------------------------------------------------------------- */
typedef struct lq_windows {
    int32_t *ids;     /* [nsamples, seqlen] row-major token ids, malloc'd; owned */
    int64_t *offsets; /* [nsamples] start of each window in the token stream; owned */
    int64_t  nsamples;
    int64_t  seqlen;         /* after shortening to max_pos */
    int64_t  text_bytes;     /* lq_calib_windows: bytes of text the windows come from */
    int      text_truncated; /* ... which is the start of a longer text (see the budget) */
} lq_windows;

/* Sample windows from tokens[ntok] as documented above. label names the text in messages. */
lq_status lq_windows_sample(const int32_t *tokens, int64_t ntok, int64_t nsamples, int64_t seqlen,
                            int64_t max_pos, uint64_t seed, const char *label, lq_windows *out,
                            lq_err *err);
void      lq_windows_free(lq_windows *w);

/* Tokenizer binding for lq_calib_windows: encode text[len] (UTF-8) into a malloc'd id array,
 * prepending BOS when the tokenizer does so by default. */
typedef lq_status (*lq_encode_fn)(void *user, const char *text, int64_t len, int32_t **ids,
                                  int64_t *n_ids, lq_err *err);

/* The built-in calibration corpus (calib/data/SOURCES.md: encyclopedic prose, source code,
 * technical prose, multilingual text), compiled into the library as zstd. A calibration path
 * that is NULL, "" or "builtin" means this corpus (a file called "builtin" is "./builtin"). */
#define LQ_CALIB_BUILTIN "builtin:llmquant-calib-v2"
bool      lq_calib_is_builtin(const char *path);
lq_status lq_text_read_builtin(int64_t max_bytes, lq_text *out, lq_err *err);

/* How much calibration text to read: LQ_CALIB_BYTES_PER_TOKEN bytes per requested token
 * (nsamples x (seqlen + 1); real text is 3-5 bytes per token), at least LQ_CALIB_MIN_TEXT, and
 * with a memory budget (max_memory > 0; tokenizing costs up to ~40 bytes per text byte) at most
 * max_memory / 64 but never less than 8 bytes per requested token. Windows are drawn from that
 * much of the start of a longer file: reading and tokenizing a 64 MB file for 256 tokens is what
 * this avoids (GPTQ's scripts tokenize the whole file; for WikiText-2 and the built-in corpus,
 * a few MB, both read everything). */
#define LQ_CALIB_BYTES_PER_TOKEN 64
#define LQ_CALIB_MIN_TEXT        (4ll << 20)
int64_t lq_calib_text_budget(int64_t nsamples, int64_t seqlen, int64_t max_memory);

/* Read path (or the built-in corpus) up to max_bytes (0: the whole text), tokenize it once with
 * enc, sample windows: the calibration set. */
lq_status lq_calib_windows(const char *path, lq_encode_fn enc, void *enc_user, int64_t nsamples,
                           int64_t seqlen, int64_t max_pos, uint64_t seed, int64_t max_bytes,
                           lq_windows *out, lq_err *err);

#endif
