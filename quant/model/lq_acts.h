/* lq_acts.h -- calibration activations on a backend of the op table, chunk by chunk: what
 * enters and leaves a decoder layer during a conversion, and the stage states a method keeps
 * between its passes.
 *
 * On a host backend every chunk goes through an lq_spill (host memory under a budget, zstd on
 * disk beyond it): the store is that spill and nothing else. On a device, chunks live in device
 * memory while they fit dev_budget and the device has room, the rest in a host lq_spill (as on
 * the host), read back through a host staging buffer. The forward reads and writes chunks where
 * it runs; only chunks that did not fit cross the bus. Not thread-safe. */
#ifndef LQ_ACTS_H
#define LQ_ACTS_H

#include "lq_base.h"
#include "lq_ops.h"
#include "lq_spill.h"

typedef struct lq_acts lq_acts;

/* host_budget, tmp_dir: the spill's (lq_spill_create); dev_budget: device bytes the chunks may
 * hold (< 0: as many as the device takes; ignored on a host backend). */
lq_status lq_acts_create(lq_be *be, int64_t dev_budget, int64_t host_budget, const char *tmp_dir,
                         lq_acts **out, lq_err *err);
void      lq_acts_free(lq_acts *a);
int64_t   lq_acts_count(const lq_acts *a);
int64_t   lq_acts_numel(const lq_acts *a, int64_t i); /* -1 when out of range */
/* x [n] in backend memory (append) or in host memory (append_host) as the next chunk */
lq_status lq_acts_append(lq_acts *a, const float *x, int64_t n, lq_err *err);
lq_status lq_acts_append_host(lq_acts *a, const float *x, int64_t n, lq_err *err);
/* chunk i into dst [numel], backend memory */
lq_status lq_acts_read(lq_acts *a, int64_t i, float *dst, lq_err *err);
/* Drop every chunk (buffers kept for reuse where the spill keeps them). */
lq_status lq_acts_clear(lq_acts *a, lq_err *err);
/* The host spill: every chunk on a host backend (the batch cache reads and fills it there),
 * the ones that did not fit on a device. */
lq_spill *lq_acts_spill(lq_acts *a);

#endif
