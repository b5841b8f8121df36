/* lq_quant.h -- quantization algorithms on plain arrays (no model, no files).
 *
 * Every method produces the neutral representation that kernels/lq_pack_* turn into on-disk
 * layouts: integer codes uint8 [n, k] (row-major like W), zero points int32 [G, n], scales
 * float [G, n], g_idx int32 [k]; plus, where the calibration driver propagates quantized
 * activations, the fake-quantized weights W^ = s * (q - z) in float32. */
#ifndef LQ_QUANT_H
#define LQ_QUANT_H

#include "lq_base.h"
#include "lq_dtype.h"

#include <math.h>

/* Warnings from long-running algorithms (damping increased, ...). */
typedef void (*lq_warn_fn)(void *user, const char *msg);

/* ------------------------------------------------------------------------------------------
 * Affine integer quantizer (IST-DASLab gptq quant.py `find_params`): the range always includes
 * 0; sym puts the zero at (maxq+1)/2. v1_safe: GPTQ v1 checkpoints store zero-1 in `bits` bits,
 * so an asymmetric zero of 0 would wrap to 2^bits-1 on load (GPTQModel reports ~13% of groups);
 * with v1_safe a zero of 0 becomes 1 and the scale is recomputed so the maximum still fits
 * (one code of the range is given up instead of corrupting the group).
 * ------------------------------------------------------------------------------------------ */
typedef struct lq_qspec {
    int     bits;       /* 2..8 */
    int64_t group_size; /* <= 0: one group over all k (per output channel) */
    int     sym;
    int     v1_safe;
    int     mse;        /* shrink the range to the grid point of least error: LQ_MSE_* */
} lq_qspec;

/* gptq quant.py's MSE search (Quantizer.configure(mse=True)): candidate ranges p * [min, max]
 * for p = 1, 0.99, .. down to 1 - LQ_MSE_MAXSHRINK, keeping the one whose quantization error
 * sum |q(x) - x|^LQ_MSE_NORM is least (first on ties). */
#define LQ_MSE_OFF       0
#define LQ_MSE_NORM24    1 /* gptq quant.py: sum |q(x) - x|^2.4 */
#define LQ_MSE_WEIGHTED  2 /* sum w_c (q(x_c) - x_c)^2; GPTQ: w_c = 1 / U_cc^2, its own loss */
#define LQ_MSE_GRID      100
#define LQ_MSE_MAXSHRINK 0.8f
#define LQ_MSE_NORM      2.4f

/* Parameters of each of `rows` rows over `cols` columns (row stride ld). */
void lq_find_params(const float *w, int64_t rows, int64_t cols, int64_t ld, const lq_qspec *s,
                    float *scale, float *zero);
/* Parameters of one group x[0], x[stride], .. x[(cnt-1) * stride] (min/max, then the MSE search
 * when s->mse). */
void lq_group_params(const float *x, int64_t cnt, int64_t stride, const lq_qspec *s, float *scale,
                     float *zero);
/* The same with per-element error weights wt[0..cnt-1] for LQ_MSE_WEIGHTED (NULL: all 1). */
void lq_group_params_w(const float *x, int64_t cnt, int64_t stride, const lq_qspec *s,
                       const float *wt, float *scale, float *zero);
/* One row's parameters from its min and max (the core of lq_find_params). */
void lq_params_from_range(float xmin, float xmax, const lq_qspec *s, float *scale, float *zero);

static inline int lq_quant_code(float x, float scale, float zero, int maxq) {
    float q = nearbyintf(x / scale) + zero;
    return q < 0 ? 0 : q > (float)maxq ? maxq : (int)q;
}

/* Round-to-nearest. W [n, k]; outputs q [n, k], scales/zeros [G, n], g_idx [k] (c / g), and
 * Wq [n, k] (may be NULL, may alias W). */
lq_status lq_rtn(const float *W, int64_t n, int64_t k, const lq_qspec *s, uint8_t *q,
                 float *scales, int32_t *zeros, int32_t *g_idx, float *Wq, lq_err *err);

/* Number of groups for k input channels. */
int64_t lq_num_groups(int64_t k, int64_t group_size);

/* ------------------------------------------------------------------------------------------
 * Calibration statistics of one Linear input (accumulated chunk by chunk).
 *   H      = (2 / nsamples) sum x x^T (GPTQ add_batch: running rescale by sequence count)
 *   absmean = mean over tokens of |x| per channel (AWQ)
 *   absmax  = max over tokens of |x| per channel (LLM.int8 outlier columns)
 * ------------------------------------------------------------------------------------------ */
typedef struct lq_xstats {
    int64_t k;
    float  *H;       /* [k, k] upper triangle accumulated; lq_xstats_finish symmetrizes */
    double *abssum;  /* [k] */
    float  *absmax;  /* [k] */
    int64_t nsamples;/* sequences seen */
    int64_t ntokens;
} lq_xstats;

#define LQ_XS_HESSIAN 1u
#define LQ_XS_ABSMEAN 2u
#define LQ_XS_ABSMAX  4u

lq_status lq_xstats_init(lq_xstats *s, int64_t k, unsigned what, lq_err *err);
/* x [t, k] from nseq sequences (t = nseq * seqlen). */
void      lq_xstats_add(lq_xstats *s, const float *x, int64_t t, int64_t nseq);
void      lq_xstats_finish(lq_xstats *s);
/* absmean [k] from the sums. */
void      lq_xstats_absmean(const lq_xstats *s, float *out);
void      lq_xstats_free(lq_xstats *s);

/* ------------------------------------------------------------------------------------------
 * GPTQ (Frantar et al. 2022, Alg. 1 with lazy batch updates) -- IST-DASLab gptq.py semantics.
 * ------------------------------------------------------------------------------------------ */
/* A factor shared by the linears that read one input (q/k/v, gate/up): the first lq_gptq_ex
 * given it with a key factors as usual and keeps the result here, the next ones with the same
 * key and width take it instead of factoring the same Hessian again (lq_gptq_factor_free). */
typedef struct lq_gptq_factor {
    int64_t  key, k;
    int      valid, act_order;
    float   *U;    /* [k, k] the damped, permuted factor */
    int64_t *perm; /* [k] the column order */
    double   damp_used;
    int      retries;
} lq_gptq_factor;
void lq_gptq_factor_free(lq_gptq_factor *f);

typedef struct lq_gptq_opts {
    lq_qspec    q;
    int         act_order;     /* desc_act */
    int         static_groups;
    double      damp;          /* percdamp, relative to mean(diag(H)) */
    int         damp_retries;  /* times to multiply damping by 10 when Cholesky fails */
    int64_t     block_size;    /* lazy-update block (128) */
    const char *name;          /* layer name for messages */
    lq_warn_fn  warn;
    void       *warn_user;
    lq_gptq_factor *shared;    /* NULL, or the factor of the input this linear shares */
    int64_t         shared_key;
} lq_gptq_opts;

typedef struct lq_gptq_result {
    double loss;       /* sum over columns of (w - q)^2 / d^2 / 2 (the reference's Losses) */
    double damp_used;  /* final relative damping */
    int    retries;
} lq_gptq_result;

/* W [n, k] in: weights; out: fake-quantized weights. H [k, k] symmetric (destroyed).
 * Outputs q [n, k], scales/zeros [G, n], g_idx [k]. */
lq_status lq_gptq(float *W, float *H, int64_t n, int64_t k, const lq_gptq_opts *o, uint8_t *q,
                  float *scales, int32_t *zeros, int32_t *g_idx, lq_gptq_result *res,
                  lq_err *err);

/* The two steps of GPTQ that carry its cost, behind a backend so that the preparation (dead
 * columns, static groups, act-order, damping retries, outputs) is shared by CPU and GPU. */
typedef struct lq_gptq_sweep {
    int64_t        n, k, bs, g; /* g: group size, 0 = one group over k */
    int            static_groups;
    lq_qspec       qs;
    const int64_t *perm;  /* [k] original column of permuted position i */
    const int32_t *gcol;  /* [k] group of permuted position i */
    const float   *ssc, *szr; /* static groups [G, n] or NULL */
    float         *sc_r, *zr_r; /* [n] current group parameters (per-channel: preset) */
    float         *Wt;    /* [k, n] permuted transposed weights in, fake-quantized out */
    uint8_t       *q;     /* [n, k] codes, original column order */
    float         *scales; /* [G, n] dynamic groups out */
    int32_t       *zeros;
    int            ggml;   /* a GGML block type (lq_dtype; g is its block): blocks out, not q */
    int            bb;     /* its bytes per block */
    uint8_t       *blocks; /* [n, k / g] blocks */
    const float   *imp;    /* ggml: [k] importance of each permuted column (NULL: none) */
    const float   *sigma2; /* ggml: [n] each row's mean square before the sweep */
    double         loss;  /* out */
} lq_gptq_sweep;

typedef struct lq_gptq_backend {
    void *ctx;
    /* Hp [k, k]: permuted H with damping added (may be destroyed). Keeps U = chol(Hp^-1)^T
     * for the sweep. LQ_OK, LQ_ERR_CHOLESKY when Hp is not positive definite, other errors. */
    lq_status (*factor)(void *ctx, float *Hp, int64_t k, lq_err *err);
    lq_status (*sweep)(void *ctx, lq_gptq_sweep *s, lq_err *err);
    /* Take U [k, k] (what factor made last, kept by the caller) for the next sweep again; NULL:
     * the backend still holds it (one that only ever keeps its last factor). */
    lq_status (*reuse)(void *ctx, const float *U, int64_t k, lq_err *err);
} lq_gptq_backend;

/* GPTQ on a GGML block type's own grid (lq_dtype t, Q4_0 .. Q6_K, IQ4_NL, IQ4_XS): at each
 * block's first column its scales and mins come from ggml's search over the error-updated
 * weights, with diag(H) as the importance matrix (lq_ggml_encode_w), then every column is
 * rounded on them (lq_ggml_requant) and its error spread as usual. No act-order or static
 * groups (a GGUF file has no g_idx); k a whole number of blocks. W [n, k] in: weights, out: the
 * values the blocks decode to; blocks [n, k / block] out, what llama.cpp reads. CPU sweep. */
lq_status lq_gptq_ggml(float *W, float *H, int64_t n, int64_t k, const lq_gptq_opts *o,
                       lq_dtype t, uint8_t *blocks, lq_gptq_result *res, lq_err *err);

/* lq_gptq with an explicit backend (NULL = CPU). */
lq_status lq_gptq_ex(float *W, float *H, int64_t n, int64_t k, const lq_gptq_opts *o,
                     const lq_gptq_backend *be, uint8_t *q, float *scales, int32_t *zeros,
                     int32_t *g_idx, lq_gptq_result *res, lq_err *err);

/* ------------------------------------------------------------------------------------------
 * AWQ (Lin et al. 2023; AutoAWQ quantizer/scale/clip semantics), 4-bit zero-point groups.
 * ------------------------------------------------------------------------------------------ */
/* k must be a multiple of group (search and clip return LQ_ERR_INVALID_ARG otherwise).
 * AutoAWQ pseudo_quantize_tensor (zero_point=True): per group s = clamp(max-min, 1e-5)/maxq,
 * z = clamp(-round(min/s), 0, maxq), q = clamp(round(w/s) + z, 0, maxq); 0 not forced in range.
 * W [n, k] fake-quantized in place (q/scales/zeros may be NULL). */
void lq_awq_quantize(float *W, int64_t n, int64_t k, int64_t group, int bits, uint8_t *q,
                     float *scales, int32_t *zeros);

/* Loss of a candidate: the driver rounds the group's linears with the per-input-channel scales
 * s [k] (Q(W s) / s, lq_ops.awq_fakequant, wherever its weights live), runs the inspected module
 * with them and returns the MSE vs its FP output. */
typedef lq_status (*lq_awq_loss_fn)(void *user, const float *s, double *loss);

typedef struct lq_awq_group {
    int           nlin;
    float *const *w;    /* [nlin] weights [n_i, k] (read only: their magnitudes per group) */
    const int64_t *n;   /* [nlin] */
    int64_t       k;
    int64_t       group;
    int           bits;
    int           n_grid;      /* 20 */
    int           duo_scaling; /* AutoAWQ default */
} lq_awq_group;

/* Grid search of per-input-channel scales s (k). x_mean [k]. best_ratio/best_loss optional. */
lq_status lq_awq_search(const lq_awq_group *g, const float *x_mean, lq_awq_loss_fn loss,
                        void *user, float *best_s, double *best_ratio, double *best_loss,
                        lq_err *err);

/* A single linear's candidate loss without running it: mean over t tokens and n outputs of
 * (x.(wq - w))^2 = tr(dW G dW^T) / (t n), G = X^T X. lq_awq_gram fills G [k, k] from X [t, k]
 * (t k^2 / 2 once, against t n k per candidate for the forward); lq_awq_gram_loss takes the
 * candidate wq and the float weights w [n, k] and scratch for 2 n k floats. */
void   lq_awq_gram(const float *X, int64_t t, int64_t k, float *G);
double lq_awq_gram_loss(const float *w, const float *wq, int64_t n, int64_t k, const float *G,
                        int64_t t, float *scratch);

/* auto_clip_layer: for each output channel and group, the max |w| shrink (max_shrink 0.5,
 * n_grid 20) minimizing mean over (<= 512 subsampled) tokens of (x.(q(w) - w))^2 per group;
 * applies the clamp to W in place. X [t, k]. */
lq_status lq_awq_clip(float *W, int64_t n, int64_t k, const float *X, int64_t t, int64_t group,
                      int bits, lq_err *err);

/* ------------------------------------------------------------------------------------------
 * NF4 (bitsandbytes): blockwise absmax over the flattened weight, nearest code by midpoints.
 * ------------------------------------------------------------------------------------------ */
void lq_nf4_quantize(const float *w, int64_t numel, int64_t blocksize, uint8_t *codes,
                     float *absmax);

/* ------------------------------------------------------------------------------------------
 * LLM.int8 (bitsandbytes): row-wise absmax int8 weights; outlier input columns from
 * calibration max |x| >= threshold (sorted ascending; at most max_out, largest first kept).
 * ------------------------------------------------------------------------------------------ */
void    lq_int8_quantize(const float *W, int64_t n, int64_t k, int8_t *cb, float *scb);
int64_t lq_int8_outliers(const float *absmax, int64_t k, float threshold, int64_t max_out,
                         int32_t *idx);

#endif
