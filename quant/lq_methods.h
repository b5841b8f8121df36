/* lq_methods.h -- the method-traits table and the per-layer job a method works on.
 *
 * The driver (lq_pipeline.c) walks the decoder layers; for each it loads the dense layer, hands
 * it to the method's quantize_layer together with the calibration activations entering the
 * layer, then writes whatever the method put in job->out[] and propagates the activations.
 * A new method is one lq_method_<name>.c defining its traits plus one row in lq_methods.c. */
#ifndef LQ_METHODS_H
#define LQ_METHODS_H

#include "lq_format_io.h"
#include "lq_model.h"
#include "lq_quant.h"
#include "lq_spill.h"

typedef struct lq_qjob {
    const lq_model  *model;
    const lq_params *p;
    int64_t          layer;
    lq_layer        *L;    /* dense float32 layer; methods may rewrite weights and norms */
    lq_spill        *acts; /* calibration inputs of the layer, chunks of chunk_seqs
                              sequences [chunk_seqs * seqlen, d]; NULL without calibration */
    float         *chunk;  /* scratch for one chunk */
    int64_t        nseq, seqlen, chunk_seqs;
    lq_fwd_ws     *ws;
    struct lq_gpu *gpu;                /* device to use, NULL = CPU (lq_gpu.h) */
    int            plan[LQ_LIN_COUNT]; /* the linears the format can store (driver) */
    int            bits[LQ_LIN_COUNT]; /* --target-bpw: each linear's width (0: option bits) */
    lq_qbuf        out[LQ_LIN_COUNT];  /* packed results (format of the method) */
    int            quantized[LQ_LIN_COUNT];
    double         loss[LQ_LIN_COUNT]; /* method-specific error measure (reported) */
    lq_qconfig    *qcfg;               /* written to config.json; methods may add per-module info */
    /* Stage states (lq_qjob_stage_spill) go under this budget per spill, in spill_dir. */
    int64_t     stage_budget;
    const char *spill_dir;
    /* Set by a method whose last pass saved LQ_STAGE_RESID of the quantized layer, one chunk
     * per calibration chunk: the driver's propagation starts there, then frees it. */
    lq_spill *resume;
    /* Set by the driver for a method whose next layer sees the FP layer (fp_first_capture):
     * the method's first capture runs the unmodified layer to its end and appends the outputs
     * here (the next layer's inputs, sparing a forward), then clears it. */
    lq_spill *fp_out;
    void (*warn)(void *user, const char *msg);
    void   *warn_user;
    lq_err *err;
} lq_qjob;

typedef struct lq_method_traits {
    const char *name;
    const char *help;
    lq_format   format;
    int         needs_calib;         /* calibration activations flow through the layers */
    int         propagate_quantized; /* next layer sees the quantized layer's output (GPTQ) */
    int         gpu;                 /* quantizes on the device too (not only the forwards) */
    int64_t     default_seqlen;      /* calibration window when --seqlen is not given */
    int         stage_copies;        /* activation-sized stage states it may hold beside the layer's
                                        input and output (--max-memory plan) */
    int fp_first_capture;            /* captures from the layer's input before changing it */
    /* Method options -> quantization_config (format defaults already filled). */
    void (*fill_qconfig)(const lq_params *p, lq_qconfig *c);
    lq_status (*quantize_layer)(lq_qjob *j);
    /* Bytes of working memory beyond the layer's fp32 weights for `tokens` calibration tokens
     * (statistics, caches), for the --max-memory plan. */
    int64_t (*work_bytes)(const lq_model_config *c, int64_t tokens);
} lq_method_traits;

int                     lq_method_index(const char *name);
const lq_method_traits *lq_method_traits_get(int i);

/* Runs the layer forward over all calibration sequences, calling fn for the linears in
 * lin_mask (bit i = lq_lin_id i) and stopping after the highest of them; h is not changed. */
lq_status lq_qjob_capture(lq_qjob *j, unsigned lin_mask, lq_capture_fn fn, void *user);
/* lq_qjob_capture starting each chunk from its state in `from` (saved at stage from_stage by an
 * earlier pass; LQ_STAGE_INPUT: from the layer input as usual) and, unless save_stage is
 * LQ_STAGE_INPUT, appending each chunk's state at save_stage to `save` (one spill chunk per
 * calibration chunk). */
lq_status lq_qjob_capture_staged(lq_qjob *j, unsigned lin_mask, lq_capture_fn fn, void *user,
                                 lq_fwd_stage from_stage, lq_spill *from, lq_fwd_stage save_stage,
                                 lq_spill *save);
/* An empty spill for stage states, under the job's budget. */
lq_status lq_qjob_stage_spill(lq_qjob *j, lq_spill **out);
/* Module name "model.layers.<i>.<lin>" into buf. */
void lq_qjob_module(const lq_qjob *j, lq_lin_id id, char *buf, size_t cap);
void lq_qjob_warn(lq_qjob *j, const char *fmt, ...) LQ_PRINTF(2, 3);

/* AWQ's scale search and fold for the layer in j (lq_method_awq.c), shared by awq and by gptq's
 * --awq-scales: captures the linears' inputs over the first max_seqs calibration sequences (0:
 * all), searches per-input-channel scales for input_layernorm -> q/k/v, v -> o (no GQA),
 * post_attention_layernorm -> gate/up and up -> down at group size g, and folds them into the
 * previous op and the linears' columns; the layer's FP function is unchanged. keep non-NULL:
 * receives the captured inputs divided by the scales, [LQ_LIN_COUNT], rows for q/o/gate/down
 * (or qkv/gate_up), the caller frees them. */
lq_status lq_awq_smooth_layer(lq_qjob *j, int64_t g, int64_t max_seqs, float **keep);

/* Each method file. */
extern const lq_method_traits lq_method_rtn;
extern const lq_method_traits lq_method_gptq;
extern const lq_method_traits lq_method_awq;
extern const lq_method_traits lq_method_nf4;
extern const lq_method_traits lq_method_int8;

#endif
