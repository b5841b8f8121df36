/* lq_gguf.h -- GGUF reader (llama.cpp's single-file model format, versions 2 and 3).
 *
 * Layout (ggml/docs/gguf.md): "GGUF" u32 version, u64 tensor count, u64 key/value count; the
 * key/values (u64-length strings, u32 value type, value; arrays are u32 element type, u64
 * count, elements); the tensor infos (name, u32 ndim, u64 dims[ndim] fastest first, u32 GGML
 * type, u64 offset into the data section); padding to general.alignment (default 32); data.
 *
 * Validation (LQ_ERR_GGUF_FORMAT unless said otherwise, each message naming the file and what is
 * wrong): magic, version 2 or 3; counts bounded by the file size; every string, array and tensor
 * info inside the file; keys and tensor names valid UTF-8 without NUL bytes, unique; no arrays of
 * arrays; general.alignment a power of two <= 1 MiB; 1..4 dims, each >= 1, the row a whole number
 * of the type's blocks, sizes without overflow; offsets aligned, inside the data section and not
 * overlapping; unknown GGML type ids -> LQ_ERR_GGUF_TYPE. Types llmquant knows the size of but
 * cannot decode (IQ*, TQ*) parse fine; reading them is what fails.
 *
 * Strings and arrays are views into the mapping (valid until lq_gguf_close); immutable once open,
 * so lookups from several threads are safe. */
#ifndef LQ_GGUF_H
#define LQ_GGUF_H

#include "lq_base.h"

#define LQ_GGUF_MAX_DIMS 4

typedef enum lq_gguf_vtype {
    LQ_GGUF_U8 = 0, LQ_GGUF_I8 = 1, LQ_GGUF_U16 = 2, LQ_GGUF_I16 = 3, LQ_GGUF_U32 = 4,
    LQ_GGUF_I32 = 5, LQ_GGUF_F32 = 6, LQ_GGUF_BOOL = 7, LQ_GGUF_STRING = 8, LQ_GGUF_ARRAY = 9,
    LQ_GGUF_U64 = 10, LQ_GGUF_I64 = 11, LQ_GGUF_F64 = 12, LQ_GGUF_VTYPE_COUNT
} lq_gguf_vtype;

typedef struct lq_gguf_kv {
    const char *key;   /* NUL-terminated copy */
    int         type;  /* lq_gguf_vtype */
    int         atype; /* element type of an array */
    int64_t     n;     /* elements of an array (1 otherwise) */
    const uint8_t *val; /* the value's bytes in the file (for a string: its u64 length first) */
} lq_gguf_kv;

typedef struct lq_gguf_tensor {
    const char *name; /* NUL-terminated copy */
    uint32_t    ggml_type;
    int         ndim;
    int64_t     ne[LQ_GGUF_MAX_DIMS]; /* ne[0] is the fastest (row length) */
    int64_t     numel, nbytes;
    int64_t     offset; /* from the start of the data section */
    const uint8_t *data;
} lq_gguf_tensor;

typedef struct lq_gguf lq_gguf;

lq_status lq_gguf_open(const char *path, lq_gguf **out, lq_err *err);
/* Parse a buffer (not copied; must outlive the handle). label names it in messages. */
lq_status lq_gguf_open_memory(const void *buf, size_t len, const char *label, lq_gguf **out,
                              lq_err *err);
void      lq_gguf_close(lq_gguf *g);

/* Whether the file starts with the GGUF magic (a cheap probe, no parse). */
bool        lq_gguf_is_gguf_file(const char *path);
const char *lq_gguf_path(const lq_gguf *g);
/* The mapping (for lq_st views of the tensors). */
const void *lq_gguf_map(const lq_gguf *g, size_t *size);

int64_t               lq_gguf_kv_count(const lq_gguf *g);
const lq_gguf_kv     *lq_gguf_kv_get(const lq_gguf *g, int64_t i);
const lq_gguf_kv     *lq_gguf_find(const lq_gguf *g, const char *key);
int64_t               lq_gguf_tensor_count(const lq_gguf *g);
const lq_gguf_tensor *lq_gguf_tensor_get(const lq_gguf *g, int64_t i);
const lq_gguf_tensor *lq_gguf_tensor_find(const lq_gguf *g, const char *name);

/* Typed getters. Integer getters accept any integer or bool type whose value fits; float getters
 * any numeric type. They return false when the key is absent or of another type. */
bool lq_gguf_get_i64(const lq_gguf *g, const char *key, int64_t *out);
bool lq_gguf_get_f64(const lq_gguf *g, const char *key, double *out);
bool lq_gguf_get_bool(const lq_gguf *g, const char *key, bool *out);
/* A string value: pointer into the file (not NUL-terminated) and its length. */
bool lq_gguf_get_str(const lq_gguf *g, const char *key, const char **s, int64_t *len);

/* Array elements. lq_gguf_arr_str: element i of a string array (kv->atype STRING). */
bool   lq_gguf_arr_str(const lq_gguf *g, const lq_gguf_kv *kv, int64_t i, const char **s,
                       int64_t *len);
/* Numeric element i as double / int64 (false for a non-numeric array or i out of range). */
bool   lq_gguf_arr_f64(const lq_gguf_kv *kv, int64_t i, double *out);
bool   lq_gguf_arr_i64(const lq_gguf_kv *kv, int64_t i, int64_t *out);

#endif
