/* lq_pipeline.h -- the conversion driver's internal entry (the public one is lq_quantize). */
#ifndef LQ_PIPELINE_H
#define LQ_PIPELINE_H

#include "lq_ops.h"

/* lq_quantize with the calibration forwards on be (borrowed) instead of the backend --device
 * picks, its activations holding at most dev_budget bytes of its memory per store (< 0: no
 * limit; 0: every chunk through the host, as when a device is full). For tests that run the
 * device's code path on a host-memory stand-in. */
lq_status lq_quantize_be(const char *method, const char *model_dir, const char *out_dir,
                         const lq_params *p, const lq_callbacks *cb, lq_be *be, int64_t dev_budget,
                         char **report_json, lq_err *err);

#endif
