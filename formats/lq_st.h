/* lq_st.h -- safetensors reader (mmap, single file, sharded index, from memory) and streaming
 * writer (sharding with index json, __metadata__).
 *
 * Validation (each rule its own status, see llmquant.h 20-39): 8-byte little-endian header
 * length; header <= 100 MB and inside the file; UTF-8 JSON object; every entry has dtype, shape,
 * data_offsets; dtype known; prod(shape) * size == end - begin (checked arithmetic); offsets
 * contiguous from 0 in sorted order; last end == data length (no gap, no trailing bytes); names
 * unique (within a file and across shards). */
#ifndef LQ_ST_H
#define LQ_ST_H

#include "lq_base.h"
#include "lq_dtype.h"

#define LQ_ST_MAX_DIMS     8
#define LQ_ST_MAX_HEADER   (100ll * 1000 * 1000)
/* Tensors one file may hold (real shards hold at most tens of thousands); the header's JSON
 * tree costs ~700 bytes per tensor while it is parsed, so 1M tensors cost 0.9 GB. */
#define LQ_ST_MAX_TENSORS  (1 << 18)
/* Shard files one index may name (the largest checkpoints have a few hundred). */
#define LQ_ST_MAX_SHARDS   65536

typedef struct lq_st_tensor {
    const char *name;
    lq_dtype    dtype;
    int         ndim;
    int64_t     shape[LQ_ST_MAX_DIMS];
    int64_t     numel;
    int64_t     nbytes;
    /* Into the mapping, valid until lq_st_close. NOT necessarily aligned to the element size:
     * safetensors pads its headers so data starts 8-aligned, but a valid file need not; read
     * through memcpy or lq_convert_to_f32 (which does). */
    const void *data;
    int         shard; /* index of the file it came from */
    /* > 0: the rows were stored interleaved per rotary head over this many heads (llama.cpp's
     * q/k permutation in GGUF files); lq_st_read_f32 restores the Hugging Face order. */
    int         perm_heads;
    /* The file holds w + shift (llama.cpp stores Gemma's norm weights as 1 + w); lq_st_read_f32
     * subtracts it. */
    float       shift;
} lq_st_tensor;

/* One file or a set of shards. Immutable once opened: lookups and reads from several threads
 * at once are safe. */
typedef struct lq_st lq_st;

/* One .safetensors file, memory-mapped read-only. */
lq_status lq_st_open(const char *path, lq_st **out, lq_err *err);
/* Parse a buffer (not copied; must outlive the handle). label names it in messages. */
lq_status lq_st_open_memory(const void *buf, size_t len, const char *label, lq_st **out,
                            lq_err *err);
/* A model directory, searched in transformers' order: model.safetensors, else
 * model.safetensors.index.json (every shard it names is opened and validated; a listed tensor
 * absent from its shard, a missing shard or a malformed index -> LQ_ERR_ST_INDEX; one name in
 * two shards -> LQ_ERR_ST_DUPLICATE), else the single *.safetensors file in dir.
 * LQ_ERR_NOT_FOUND if none. */
lq_status lq_st_open_dir(const char *dir, lq_st **out, lq_err *err);
void      lq_st_close(lq_st *st);
/* A tensor set over memory another object owns (a GGUF mapping): views[i] give name, dtype,
 * shape, numel, nbytes, data and perm_heads (names are copied, data is not; map/map_size must
 * contain every view's data and outlive the handle). release/prefetch act on the pages as for a
 * mapped file. Duplicate names -> LQ_ERR_ST_DUPLICATE. */
lq_status lq_st_open_views(const char *label, const void *map, size_t map_size,
                           const lq_st_tensor *views, int64_t n, lq_st **out, lq_err *err);

int64_t             lq_st_count(const lq_st *st);
const lq_st_tensor *lq_st_get(const lq_st *st, int64_t i);
const lq_st_tensor *lq_st_find(const lq_st *st, const char *name);
/* Tensors are sorted by name (strcmp): the index of the first whose name is >= name (count when
 * none), so the tensors under a prefix are lq_st_get(lower_bound(prefix)) onwards. */
int64_t lq_st_lower_bound(const lq_st *st, const char *name);
/* Path of the file a tensor lives in (for messages). */
const char *lq_st_file_of(const lq_st *st, const lq_st_tensor *t);
/* String value of __metadata__[key] (of the first shard), or NULL. */
const char *lq_st_metadata(const lq_st *st, const char *key);
/* Total bytes of tensor data over all shards. */
int64_t lq_st_data_bytes(const lq_st *st);

/* Drop the tensor's pages from this process's resident set (file-backed mappings are re-read
 * from the page cache on the next access). The layer-by-layer driver calls it after converting a
 * tensor so the mapped checkpoint does not accumulate in RSS. No-op for memory buffers. */
void lq_st_release(const lq_st *st, const lq_st_tensor *t);
/* Ask the kernel to start reading the tensor's pages now (MADV_WILLNEED, asynchronous): the
 * driver prefetches layer i+1 while it computes layer i so disk reads overlap compute. */
void lq_st_prefetch(const lq_st *st, const lq_st_tensor *t);

/* Find `name`, check it is a float tensor of exactly `ndim` dims with the given shape (pass
 * expect_shape NULL to skip), convert to float32 into dst (numel floats; GGML blocks decoded,
 * permuted rows restored). NaN/Inf ->
 * LQ_ERR_WEIGHT_NONFINITE naming file and tensor; missing -> LQ_ERR_ST_MISSING_TENSOR; wrong
 * dtype -> LQ_ERR_WEIGHT_DTYPE; wrong shape -> LQ_ERR_WEIGHT_SHAPE. */
lq_status lq_st_read_f32(const lq_st *st, const char *name, int ndim, const int64_t *expect_shape,
                         float *dst, lq_err *err);

/* ---------------------------------------------------------------------------------------- */
/* Streaming writer. Tensor data goes to disk as it is added (memory stays bounded); headers are
 * written at finish. Output is byte-identical to Python safetensors' save_file for the same
 * tensors and metadata (same ordering, header padded with spaces to a multiple of 8).
 * Files: "<dir>/model.safetensors" when everything fits one shard, else
 * "<dir>/model-0000i-of-0000N.safetensors" + "<dir>/model.safetensors.index.json". */
typedef struct lq_st_writer lq_st_writer;

lq_status lq_st_writer_create(const char *dir, int64_t max_shard_bytes /* 0 = one file */,
                              lq_st_writer **out, lq_err *err);
lq_status lq_st_writer_set_metadata(lq_st_writer *w, const char *key, const char *value,
                                    lq_err *err);
/* Copies `data` (nbytes = numel * dtype size) out immediately. */
lq_status lq_st_writer_add(lq_st_writer *w, const char *name, lq_dtype dtype, int ndim,
                           const int64_t *shape, const void *data, lq_err *err);
/* Convenience: float32 source stored as dtype (F32/F16/BF16). */
lq_status lq_st_writer_add_f32(lq_st_writer *w, const char *name, lq_dtype dtype, int ndim,
                               const int64_t *shape, const float *data, lq_err *err);
lq_status lq_st_writer_finish(lq_st_writer *w, lq_err *err);
/* Frees; removes temporary files if finish was not reached. */
void lq_st_writer_free(lq_st_writer *w);

#endif
