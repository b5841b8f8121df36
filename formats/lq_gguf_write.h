/* lq_gguf_write.h -- GGUF writer (version 3) and llama-quantize's per-tensor type rules.
 *
 * The file is laid out as ggml's gguf writer lays it out (gguf.cpp gguf_write_out): header, the
 * key/values in the order set (setting a key that exists moves it to the end, as gguf_set_val
 * does), the tensor infos in the order added with ggml_n_dims dimensions (trailing 1s dropped),
 * zero padding to the alignment, then each tensor's data padded to the alignment. Sizes and
 * offsets are known once the tensors are added, so the header goes first and the data streams
 * after it. */
#ifndef LQ_GGUF_WRITE_H
#define LQ_GGUF_WRITE_H

#include "lq_gguf.h"

#include <stdio.h>

typedef struct lq_gguf_out lq_gguf_out;

lq_status lq_gguf_out_create(uint32_t alignment, lq_gguf_out **out, lq_err *err);
void      lq_gguf_out_free(lq_gguf_out *o);
/* The key/value kv of the open file g, as stored there. */
lq_status lq_gguf_out_copy_kv(lq_gguf_out *o, const lq_gguf *g, const lq_gguf_kv *kv, lq_err *err);
lq_status lq_gguf_out_set_u32(lq_gguf_out *o, const char *key, uint32_t v, lq_err *err);
void      lq_gguf_out_remove(lq_gguf_out *o, const char *key);
/* Append a tensor (ne fastest first, ndim 1..4) of GGML type id ggml_type; LQ_ERR_INVALID_ARG
 * for an unknown type or a row that is not a whole number of its blocks. */
lq_status lq_gguf_out_add_tensor(lq_gguf_out *o, const char *name, uint32_t ggml_type, int ndim,
                                 const int64_t *ne, lq_err *err);
int64_t   lq_gguf_out_tensor_bytes(const lq_gguf_out *o, int64_t i);
/* Header, key/values, tensor infos and padding; then lq_gguf_out_write_data for each tensor in
 * order, in as many pieces as the caller likes (the padding follows its last byte). label names
 * the file in messages. */
lq_status lq_gguf_out_write_header(lq_gguf_out *o, FILE *f, const char *label, lq_err *err);
lq_status lq_gguf_out_write_data(lq_gguf_out *o, FILE *f, const void *data, int64_t len,
                                 const char *label, lq_err *err);
/* Bytes of the whole file (header + data). */
int64_t   lq_gguf_out_file_bytes(const lq_gguf_out *o);

/* ------------------------------------------------------------------------------------------
 * llama-quantize's file types ("Q4_K_M") and the per-tensor types they imply
 * (llama-quant.cpp llama_tensor_get_type: categories by name, more bits for attn_v / ffn_down
 * in chosen layers, the output and tied embeddings at Q6_K or Q8_0, fallbacks when a row is
 * not a whole number of 256-element blocks), so a file matches llama-quantize's tensor for
 * tensor and in size.
 * ------------------------------------------------------------------------------------------ */
typedef struct lq_gguf_ftype {
    const char *name;  /* llama-quantize's name ("Q4_K_M"; aliases "Q4_K" -> Q4_K_M) */
    int         ftype; /* llama_ftype, written as general.file_type */
    uint32_t    dflt;  /* the GGML type most tensors get */
} lq_gguf_ftype;

/* The layer of a tensor name as llama.cpp reads it ("blk.12.attn_q.weight" -> 12), -1 for the
 * others. */
int lq_gguf_layer_of(const char *name);

/* Case-insensitive, as llama-quantize; NULL if unknown. lq_gguf_ftype_list: the names, '|'. */
const lq_gguf_ftype *lq_gguf_ftype_find(const char *name);
const char          *lq_gguf_ftype_list(void);

/* The tensors of g in llama.cpp's order (layer number, then name; non-layer tensors first) and
 * the GGML type each gets under ft: order[i] and types[i] for i < tensor count (arrays of that
 * many). *n_fallback counts tensors whose row did not fit the chosen type. has_imatrix: the
 * rules llama-quantize follows when it has an importance matrix (a calibrated method's file has
 * the size of that one). LQ_ERR_UNSUPPORTED naming the file and key for a header llama.cpp's
 * rules need and g lacks. */
lq_status lq_gguf_plan_types(const lq_gguf *g, const lq_gguf_ftype *ft, int has_imatrix,
                             int64_t *order, uint32_t *types, int64_t *n_fallback, lq_err *err);

#endif
