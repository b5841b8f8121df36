/* lq_spill.h -- append-only store of float32 activation chunks under a memory budget.
 *
 * The calibration driver keeps each layer's activations [nsamples * seqlen, hidden] here, one
 * chunk per sample (or per batch of samples). Chunks stay in memory while the held bytes fit
 * mem_budget; a chunk that would exceed it is byte-shuffled (the 4 bytes of every float are
 * grouped into planes, so sign/exponent bytes compress) and zstd-compressed (level 1: speed over
 * ratio) into an unlinked temporary file, and decompressed on demand by lq_spill_read.
 *
 * Memory held = chunks kept in memory (<= mem_budget) + constant scratch (a 256 KiB shuffle
 * block and one zstd stream buffer: compression and decompression stream block by block, so a
 * chunk is never materialised twice) + the zstd contexts; lq_spill_get_stats reports it.
 * Not thread-safe: one user at a time (reads reuse the scratch buffer).
 */
#ifndef LQ_SPILL_H
#define LQ_SPILL_H

#include "lq_base.h"

typedef struct lq_spill lq_spill;

typedef struct lq_spill_stats {
    int64_t chunks;         /* chunks stored */
    int64_t chunks_on_disk; /* of which spilled */
    int64_t mem_bytes;      /* float data held in memory (<= budget) */
    int64_t mem_peak;       /* max of mem_bytes since create */
    int64_t scratch_bytes;  /* shuffle + zstd stream buffers held (constant) */
    int64_t disk_raw_bytes; /* float bytes of the spilled chunks */
    int64_t disk_bytes;     /* compressed bytes written to the temporary file */
} lq_spill_stats;

/* mem_budget: bytes of chunk data kept in memory; < 0 = unlimited, 0 = every chunk to disk.
 * tmp_dir: where the temporary file goes (NULL: $TMPDIR, else /tmp). The file is created on the
 * first spill and unlinked at once, so nothing is left behind even after a crash. */
lq_status lq_spill_create(int64_t mem_budget, const char *tmp_dir, lq_spill **out, lq_err *err);
void      lq_spill_free(lq_spill *s);

/* Copy x[n] in as the next chunk (index = lq_spill_count before the call). n >= 1. */
lq_status lq_spill_append(lq_spill *s, const float *x, int64_t n, lq_err *err);
int64_t   lq_spill_count(const lq_spill *s);
/* Floats in chunk i (-1 when out of range). */
int64_t   lq_spill_chunk_numel(const lq_spill *s, int64_t i);
/* Whether chunk i lives in the temporary file. */
int       lq_spill_chunk_on_disk(const lq_spill *s, int64_t i);
/* Copy chunk i into dst (lq_spill_chunk_numel(s, i) floats), bit-exact. */
lq_status lq_spill_read(lq_spill *s, int64_t i, float *dst, lq_err *err);
/* Drop every chunk (the file is truncated, buffers are kept for reuse). */
lq_status lq_spill_clear(lq_spill *s, lq_err *err);

void lq_spill_get_stats(const lq_spill *s, lq_spill_stats *st);

#endif
