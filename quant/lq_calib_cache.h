/* lq_calib_cache.h -- calibration windows and FP layer inputs cached on disk across the jobs of
 * a batch (see lq_calib_cache.c). All readers degrade to "miss" on any mismatch. */
#ifndef LQ_CALIB_CACHE_H
#define LQ_CALIB_CACHE_H

#include "lq_base.h"
#include "lq_dataset.h"
#include "lq_spill.h"

typedef struct lq_ccache {
    int  enabled;
    char dir[4096];
} lq_ccache;

/* root NULL/"" disables the cache. */
lq_status lq_ccache_open(lq_ccache *c, const char *root, const char *model_dir, const char *calib,
                         const char *tokenizer, int64_t nsamples, int64_t seqlen, uint64_t seed,
                         lq_err *err);
int  lq_ccache_load_windows(const lq_ccache *c, lq_windows *w);
void lq_ccache_store_windows(const lq_ccache *c, const lq_windows *w);
int  lq_ccache_has_acts(const lq_ccache *c, int64_t layer, int64_t nchunks, int64_t numel_total,
                        int64_t d);
lq_status lq_ccache_load_acts(const lq_ccache *c, int64_t layer, lq_spill *dst, float *buf,
                              int64_t nchunks, const int64_t *chunk_numel, int64_t d,
                              lq_err *err);
/* Best effort (a failed write only loses the cache entry). */
void lq_ccache_store_acts(const lq_ccache *c, int64_t layer, lq_spill *src, float *buf, int64_t d);

#endif
