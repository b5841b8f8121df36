/* lq_mixed.h -- mixed precision under a bits-per-weight budget (gptq --target-bpw).
 *
 * The unit of choice is what vLLM fuses into one linear, so that every loader can run the
 * result: per decoder layer, q/k/v (or qkv), o, gate/up (or gate_up) and down. Each unit's
 * sensitivity is measured on the float model: the unit alone is rounded to nearest at the probe
 * width (the widest choice whose uniform use fits the budget), the calibration tokens run to the
 * logits, and the mean KL divergence from the float model's next-token distribution is the
 * unit's cost at that width. Its cost at the other widths scales with the unit's own output
 * error, sum ||x (Q_b(W) - W)^T||^2 over its linears and the same tokens. The widths then go to
 * the units by greedy marginal cost per bit (a multiple-choice knapsack), bits counted as the
 * format writes them: codes, scales, zeros and g_idx. */
#ifndef LQ_MIXED_H
#define LQ_MIXED_H

#include "lq_model.h"

#define LQ_MIXED_UNITS       4 /* per layer: attention input, o, MLP input, down */
#define LQ_MIXED_MAX_CHOICES 8 /* GPTQ v1 stores 2, 3, 4 and 8 bits, at any group size */

typedef struct lq_mixed_opts {
    double         target_bpw;
    /* widths and their group sizes (0: group_size), ascending in the bits they cost */
    int            choices[LQ_MIXED_MAX_CHOICES];
    int64_t        choice_group[LQ_MIXED_MAX_CHOICES];
    int            n_choices;
    int64_t        group_size; /* <= 0: per output channel */
    int            sym;
    const int     *plan; /* [LQ_LIN_COUNT]: the linears the format stores (others stay 16-bit) */
    const int32_t *ids;  /* [nseq * seqlen] calibration windows */
    int64_t        nseq, seqlen;
    /* called once per decoder layer; non-zero stops the pass (LQ_ERR_INTERRUPTED) */
    int (*progress)(void *user, int64_t layer, int64_t layers);
    void *user;
} lq_mixed_opts;

typedef struct lq_mixed_unit {
    int64_t layer;
    int     unit;   /* 0 .. LQ_MIXED_UNITS - 1 */
    int64_t params; /* weights of its linears */
    double  kl;     /* measured at the probe width */
    double  err[LQ_MIXED_MAX_CHOICES];
    int     choice; /* chosen: index into the options' choices */
    int     bits;   /* its width */
    int64_t group;  /* and group size (the size itself, never 0) */
} lq_mixed_unit;

typedef struct lq_mixed_result {
    lq_mixed_unit *units; /* [n_units], owned */
    int64_t        n_units;
    int            probe_bits;
    int64_t        probe_group; /* 0: the options' group_size */
    double         bpw;     /* of the decoder linears as written */
    double         min_bpw; /* every unit at the narrowest choice */
    double         seconds;
} lq_mixed_result;

/* Bits as written by the format, for a linear [n, k] at `bits` and group size. */
int64_t lq_mixed_linear_bits(int64_t n, int64_t k, int bits, int64_t group_size);
/* Bits per weight of the decoder linears of cfg with every planned linear at `bits` (and the
 * others 16-bit). */
double lq_mixed_uniform_bpw(const lq_model_config *cfg, const int *plan, int bits,
                            int64_t group_size);
/* The linears of unit u (bit i = lq_lin_id i), and its name for reports ("self_attn.qkv", ...). */
unsigned    lq_mixed_unit_lins(int u);
const char *lq_mixed_unit_name(int u);

/* Measures and allocates; ws: a forward workspace of m (any chunk size). */
lq_status lq_mixed_plan(const lq_model *m, const lq_mixed_opts *o, lq_fwd_ws *ws,
                        lq_mixed_result *out, lq_err *err);
/* Choice c's group size. */
int64_t lq_mixed_choice_group(const lq_mixed_opts *o, int c);
/* Allocation alone, from the units' measured kl and err (tests): sets units[].choice / bits /
 * group and out->bpw. */
lq_status lq_mixed_allocate(const lq_model_config *cfg, const lq_mixed_opts *o,
                            lq_mixed_result *res, lq_err *err);
void      lq_mixed_result_free(lq_mixed_result *r);

#endif
