/* lq_methods.h -- the method-traits table and the per-layer job a method works on.
 *
 * The driver (lq_pipeline.c) walks the decoder layers; for each it loads the dense layer, hands
 * it to the method's quantize_layer together with the calibration activations entering the
 * layer, then writes whatever the method put in job->out[] and propagates the activations.
 * A new method is one lq_method_<name>.c defining its traits plus one row in lq_methods.c. */
#ifndef LQ_METHODS_H
#define LQ_METHODS_H

#include "lq_acts.h"
#include "lq_model.h"
#include "lq_opts.h"
#include "lq_qformat.h"
#include "lq_quant.h"

/* Where a conversion's time goes, per phase (the report's phase_seconds): reading a layer and
 * putting it on the backend, the capture passes and propagation (forwards and the statistics
 * they accumulate), the method's own arithmetic (GPTQ's factorization and sweep, AWQ's search,
 * rounding), packing into the checkpoint's layout, writing. */
enum { LQ_PH_READ, LQ_PH_FORWARD, LQ_PH_SOLVE, LQ_PH_PACK, LQ_PH_WRITE, LQ_PH_COUNT };

typedef struct lq_qjob {
    const lq_model  *model;
    const lq_opts   *o; /* the job's options (lq_opts.h) */
    int64_t          layer;
    lq_layer        *L;    /* dense float32 layer on the host; methods may rewrite weights and
                              norms (every capture pass puts the layer as it is then on be) */
    lq_acts         *acts; /* calibration inputs of the layer, chunks of chunk_seqs
                              sequences [chunk_seqs * seqlen, d]; NULL without calibration */
    float         *chunk;  /* scratch for one chunk, on be */
    int64_t        nseq, seqlen, chunk_seqs;
    lq_be         *be;      /* where the capture passes run (lq_ops.h); what a capture hook
                               sees lives there: read it through be's ops */
    lq_fwd_ws     *ws;      /* the forward workspace on be */
    struct lq_gpu *gpu;                 /* device to use, NULL = CPU (lq_gpu.h) */
    int            plan[LQ_SLOT_KINDS]; /* the kinds of linear the format can store (driver) */
    int            bits[LQ_LIN_COUNT];  /* --target-bpw: each linear's width (0: option bits) */
    int64_t          group[LQ_LIN_COUNT]; /* and its group size (0: the option's) */
    /* per slot (lq_model.h: the layer's linears, experts included), nslots of each */
    int64_t  nslots;
    lq_qbuf *out; /* packed results (format of the method) */
    int     *quantized;
    double  *loss; /* method-specific error measure (reported) */
    /* --format gguf (else NULL): each slot's GGML block type (lq_dtype; <= 0: the slot is not the
     * method's, it stays as read) and the blocks a method that rounds on it leaves there
     * (malloc'd, [n, k / block]; the driver takes them) */
    const int *ggml;
    uint8_t  **ggml_blocks;
    /* Mixture of experts (model->cfg.num_experts > 0, else NULL): the capture mode of each routed
     * expert for this layer's passes (LQ_MOE_*; lq_qjob_capture applies it), and the tokens the
     * router sent each over the calibration set (-1 until a pass has routed them). */
    uint8_t    *moe_mode;
    int64_t    *moe_tokens;
    uint8_t    *moe_fallback; /* experts switched to all-token statistics (lq_qjob_moe_fallback) */
    int         moe_all;      /* --moe-calib all: every expert's statistics from every token */
    int64_t     moe_min_tokens;
    lq_qconfig *qcfg; /* written to config.json; methods may add per-module info */
    /* Stage states (lq_qjob_stage_spill) go under these budgets per store (device memory, host
     * memory), in spill_dir beyond them. */
    int64_t     stage_dev_budget, stage_budget;
    const char *spill_dir;
    /* Set by a method whose last pass saved LQ_STAGE_RESID of the quantized layer, one chunk
     * per calibration chunk: the driver's propagation starts there, then frees it. */
    lq_acts *resume;
    /* Set with resume by a method whose last pass also saved LQ_STAGE_ACT: the propagation
     * then runs down_proj alone from it (and frees it). */
    lq_acts *resume_act;
    /* Set by the driver for a method whose next layer sees the FP layer (fp_first_capture):
     * the method's first capture runs the unmodified layer to its end and appends the outputs
     * here (the next layer's inputs, sparing a forward), then clears it. */
    lq_acts *fp_out;
    /* seconds per phase (LQ_PH_*), the driver's; the job adds its passes' and packing's */
    double *phase;
    /* the layer on be (lq_qjob_layer) and what the method rewrote since it went there */
    lq_layer_be be_layer;
    int         be_layer_ok, dirty_all;
    uint8_t    *dirty; /* [nslots] */
    void (*warn)(void *user, const char *msg);
    void   *warn_user;
    lq_err *err;
} lq_qjob;

typedef struct lq_method_traits {
    const char *name;
    const char *help;
    lq_format   format;
    /* the option families it takes (lq_options.def): the method's whole option surface */
    const char *options;
    int         needs_calib;         /* calibration activations flow through the layers */
    int         propagate_quantized; /* next layer sees the quantized layer's output (GPTQ) */
    int         gpu;                 /* quantizes on the device too (not only the forwards) */
    int64_t     default_seqlen;      /* calibration window when --seqlen is not given */
    int         stage_copies;        /* activation-sized stage states it may hold beside the layer's
                                        input and output (--max-memory plan) */
    int fp_first_capture;            /* captures from the layer's input before changing it */
    /* changes the layer's norms and the weights of linears it does not round (AWQ folds its
     * scales into them): --format gguf writes those from the layer, not from the input */
    int folds_scales;
    const char *bits_hint; /* said when --bits is a width the format cannot store, or NULL */
    /* Method options -> quantization_config (format defaults already filled). */
    void (*fill_qconfig)(const lq_opts *o, lq_qconfig *c);
    lq_status (*quantize_layer)(lq_qjob *j);
    /* Bytes of working memory beyond the layer's fp32 weights for `tokens` calibration tokens
     * (statistics, caches), for the --max-memory plan. */
    int64_t (*work_bytes)(const lq_model_config *c, int64_t tokens);
} lq_method_traits;

/* The methods that write GPTQ v1 (rtn, gptq; lq_method_rtn.c): the quantization_config of the
 * options, and slot l's codes packed into job->out[l] (marked quantized). */
void      lq_gptq_fill_qconfig(const lq_opts *o, lq_qconfig *c);
lq_status lq_gptq_pack_linear(lq_qjob *j, int64_t l, const lq_qspec *s, const uint8_t *q,
                              const int32_t *zeros, const float *scales, const int32_t *g_idx);

int                     lq_method_index(const char *name);
/* LQ_ERR_INVALID_ARG naming the first option set in p that does not apply to command. */
lq_status lq_params_check_applies(const lq_params *p, const char *command, lq_err *err);
const lq_method_traits *lq_method_traits_get(int i);

/* Runs the layer forward over all calibration sequences, calling fn for the linears in
 * lin_mask (bit i = lq_lin_id i) and stopping after the highest of them; h is not changed. */
lq_status lq_qjob_capture(lq_qjob *j, unsigned lin_mask, lq_capture_fn fn, void *user);
/* lq_qjob_capture starting each chunk from its state in `from` (saved at stage from_stage by an
 * earlier pass; LQ_STAGE_INPUT: from the layer input as usual) and, unless save_stage is
 * LQ_STAGE_INPUT, appending each chunk's state at save_stage to `save` (one spill chunk per
 * calibration chunk). */
lq_status lq_qjob_capture_staged(lq_qjob *j, unsigned lin_mask, lq_capture_fn fn, void *user,
                                 lq_fwd_stage from_stage, lq_acts *from, lq_fwd_stage save_stage,
                                 lq_acts *save);
/* An empty store for stage states on the job's backend, under the job's budgets. */
lq_status lq_qjob_stage_spill(lq_qjob *j, lq_acts **out);
/* The job's layer on its backend as the method has left it on the host: put there on first use
 * and, for what lq_qjob_changed names since, again (the host layer itself on a host backend).
 * Valid until the next lq_qjob_layer / lq_qjob_release. */
lq_status lq_qjob_layer(lq_qjob *j, const lq_layer **out);
/* The method rewrote slot s's linear on the host (s < 0: anything of the layer, norms, biases
 * and the router included): the backend's copy is refreshed before the next pass. */
void lq_qjob_changed(lq_qjob *j, int64_t s);
/* Adds the seconds since `since` (lq_now) to phase ph (LQ_PH_*). */
void lq_qjob_phase(lq_qjob *j, int ph, double since);
/* Frees what the job allocated for itself (the backend's layer). */
void lq_qjob_release(lq_qjob *j);
/* Module name "model.layers.<i>.<leaf of the slot>" into buf. */
void lq_qjob_module(const lq_qjob *j, int64_t slot, char *buf, size_t cap);
/* Whether the method should quantize slot s (present, and its kind planned). */
int lq_qjob_planned(const lq_qjob *j, int64_t s);
/* k[s] = the width of the input that slot s holds for some present linear of the layer
 * (lq_slot_input under the job's expert modes; in a mixture-of-experts layer also the block
 * input, which experts that fall back read), 0 for the other slots; k has nslots entries. */
void lq_qjob_input_widths(const lq_qjob *j, int64_t *k);
/* The dense linear in slot s of the job's layer. */
lq_linear *lq_qjob_linear(lq_qjob *j, int64_t s);
/* After a pass that routed the calibration tokens: switches each expert that received fewer
 * than --moe-min-tokens of them to LQ_MOE_ALL, records it in moe_fallback and says so. Returns
 * how many experts changed mode, marking them in changed: their routed captures, where a pass
 * made them, no longer apply. */
int64_t lq_qjob_moe_fallback(lq_qjob *j, uint8_t *changed /* [num_experts] or NULL */);
/* Captures, for the experts lq_qjob_moe_fallback just switched (changed[e] != 0), their down
 * input over every token: one pass with the other experts skipped and only down inputs
 * reported. */
lq_status lq_qjob_moe_recapture_down(lq_qjob *j, const uint8_t *changed, lq_capture_fn fn,
                                     void *user);
void      lq_qjob_warn(lq_qjob *j, const char *fmt, ...) LQ_PRINTF(2, 3);

/* Captured inputs of a layer's linears, per slot (NULL where no linear reads it): x [rows, k]
 * on the job's backend (cap rows allocated). */
typedef struct lq_awq_inputs {
    lq_be   *be;
    float  **x;
    int64_t *rows, *cap, *k;
} lq_awq_inputs;
void lq_awq_inputs_free(lq_awq_inputs *in, int64_t nslots);

/* AWQ's scale search and fold for the layer in j (lq_method_awq.c), shared by awq and by gptq's
 * --awq-scales: captures the linears' inputs over the first max_seqs calibration sequences (0:
 * all), searches per-input-channel scales for input_layernorm -> q/k/v, v -> o (no GQA),
 * post_attention_layernorm -> gate/up (with experts: every expert's gate/up, the block
 * inspected) and up -> down (each expert's) at group size g, and folds them into the previous
 * op and the linears' columns; the layer's FP function is unchanged. keep non-NULL: receives
 * the captured inputs divided by the scales, by slot (lq_slot_input says whose each linear
 * reads), for the caller to free with lq_awq_inputs_free. */
lq_status lq_awq_smooth_layer(lq_qjob *j, int64_t g, int64_t max_seqs, lq_awq_inputs *keep);

/* Each method file. */
extern const lq_method_traits lq_method_rtn;
extern const lq_method_traits lq_method_gptq;
extern const lq_method_traits lq_method_awq;
extern const lq_method_traits lq_method_nf4;
extern const lq_method_traits lq_method_int8;

#endif
