/* lq_gguf_job.h -- quantization to a GGUF file (--format gguf:TYPE).
 *
 * A sink over a GGUF input: its tensors get llama-quantize's types for the mix, the header goes
 * first, then the tensors in llama.cpp's order (the non-layer ones at open, each layer's when
 * the driver has finished the layer). A linear the method rounded itself (GPTQ on the type's own
 * grid) is handed over as blocks in Hugging Face row order; every other tensor is rounded from
 * the input by ggml's reference algorithm, as llama-quantize does. */
#ifndef LQ_GGUF_JOB_H
#define LQ_GGUF_JOB_H

#include "lq_dtype.h"
#include "lq_opts.h"

typedef struct lq_gguf_sink lq_gguf_sink;

/* Whether --format gguf takes method and the options: LQ_ERR_UNSUPPORTED for a method that does
 * not write GGUF, LQ_ERR_INVALID_ARG naming an option the type decides. */
lq_status lq_gguf_check(const char *method, const lq_opts *o, lq_err *err);
/* Checks what --format gguf can do with method and the options, plans the types, creates the
 * temporary file in dir (NULL: beside out_path) and writes the header and the non-layer
 * tensors. */
lq_status lq_gguf_sink_open(const char *method, const char *model, const char *out_path,
                            const char *type, const lq_opts *o, const char *dir,
                            const lq_callbacks *cb, lq_gguf_sink **out, lq_err *err);
/* The GGML block type (Q4_0 .. Q6_K) the linear of Hugging Face weight name hf gets, 0 when
 * it gets a float type or has no GGUF tensor. */
lq_dtype  lq_gguf_sink_type(const lq_gguf_sink *s, const char *hf);
/* Whether the file has a tensor of Hugging Face weight name hf. */
bool      lq_gguf_sink_has(const lq_gguf_sink *s, const char *hf);
/* The blocks of linear hf ([n, k / block] in Hugging Face row order; taken, freed by the sink). */
/* Float values (Hugging Face's convention, numel of the tensor's) for the tensor of weight name
 * hf, written in its planned type in place of the input's: what a method changed beside the
 * linears it rounds (AWQ's folded norms). Copied. */
lq_status lq_gguf_sink_put_f32(lq_gguf_sink *s, const char *hf, const float *x, int64_t numel,
                               lq_err *err);
lq_status lq_gguf_sink_put(lq_gguf_sink *s, const char *hf, uint8_t *blocks, lq_err *err);
/* Every tensor of layer `layer`, in llama.cpp's order. */
lq_status lq_gguf_sink_write_layer(lq_gguf_sink *s, int64_t layer, lq_err *err);
/* The remaining tensors, then the file renamed onto out_path; adds the GGUF fields (type, its
 * tensors' types, sizes) to the report object rep. */
lq_status lq_gguf_sink_finish(lq_gguf_sink *s, void *rep_cjson, lq_err *err);
/* Removes the temporary file unless finished. */
void      lq_gguf_sink_free(lq_gguf_sink *s);

/* method rtn: the whole job (the file equals llama-quantize's for the same input and type). */
lq_status lq_quantize_gguf(const char *method, const char *model, const char *out_path,
                           const char *type, const lq_opts *o, const lq_callbacks *cb,
                           char **report_json, lq_err *err);

#endif
