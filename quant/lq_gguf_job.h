/* lq_gguf_job.h -- quantization to a GGUF file (--format gguf:TYPE). */
#ifndef LQ_GGUF_JOB_H
#define LQ_GGUF_JOB_H

#include "lq_opts.h"

/* method rtn over a GGUF input: every tensor to the type llama-quantize's mix `type` gives it,
 * with ggml's own rounding (the file equals llama-quantize's for the same input and type),
 * metadata copied from the input. The output is one file, written under a temporary name in
 * its directory and renamed when complete. */
lq_status lq_quantize_gguf(const char *method, const char *model, const char *out_path,
                           const char *type, const lq_opts *o, const lq_callbacks *cb,
                           char **report_json, lq_err *err);

#endif
