/* lq_source.h -- a model checkpoint as the rest of llmquant sees it, wherever it comes from:
 * a Hugging Face directory (config.json, safetensors single/sharded, tokenizer files) or a
 * GGUF file, presented in the Hugging Face layout (config.json built from the metadata, tensors
 * under their transformers names, decoded and un-permuted on read, tokenizer files rebuilt from
 * the vocabulary). Every command that takes a model goes through here, so a .gguf works
 * wherever a directory does. */
#ifndef LQ_SOURCE_H
#define LQ_SOURCE_H

#include "lq_config.h"
#include "lq_st.h"

typedef struct lq_source lq_source;

/* A directory -> Hugging Face layout (needs config.json: LQ_ERR_NOT_FOUND "not a Hugging Face
 * model directory" otherwise); a regular file starting with the GGUF magic -> GGUF. Tensors of
 * a GGUF file must all be decodable (LQ_ERR_GGUF_TYPE names the first that is not) and map onto
 * the architecture (LQ_ERR_UNSUPPORTED_ARCH names it). config.json is parsed (lq_config_parse:
 * its errors come before any about the weights) and the tensor files opened. */
lq_status lq_source_open(const char *path, lq_source **out, lq_err *err);
void      lq_source_close(lq_source *s);

const char *lq_source_path(const lq_source *s);
bool        lq_source_is_gguf(const lq_source *s);
/* Tensors under Hugging Face names (valid until close). */
lq_st      *lq_source_st(const lq_source *s);
/* config.json text (NUL-terminated, valid until close) and the label for messages about it
 * ("<dir>/config.json", or the .gguf path). */
const char *lq_source_config(const lq_source *s, int64_t *len);
/* The parsed config.json. */
const lq_model_config *lq_source_model_config(const lq_source *s);
const char *lq_source_config_label(const lq_source *s);
/* A file of the Hugging Face layout other than the weights ("tokenizer.json",
 * "generation_config.json", ...): read from the directory, or rebuilt from the GGUF metadata.
 * LQ_ERR_NOT_FOUND when the checkpoint has none. *data is malloc'd, NUL-terminated. */
lq_status lq_source_read(const lq_source *s, const char *name, char **data, int64_t *len,
                         lq_err *err);
bool      lq_source_has(const lq_source *s, const char *name);
/* Where a side file lives, for messages and fingerprints: "<dir>/<name>" or "<gguf>:<name>". */
void      lq_source_file_label(const lq_source *s, const char *name, char *buf, size_t cap);

#endif
