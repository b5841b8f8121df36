/* GPTQ (Frantar et al., "GPTQ: Accurate Post-Training Quantization for Generative Pre-trained
 * Transformers", 2022), following IST-DASLab gptq.py step by step:
 *   dead columns -> (static groups) -> act-order permutation -> damping -> U = chol(H^-1)^T
 *   -> blocked column sweep with lazy updates -> un-permute.
 * The weights are held transposed (Wt [k, n]) so that a column of W -- what GPTQ quantizes one
 * at a time -- is a contiguous row, and every update is an axpy or an sgemm. */
#include "lq_kernels.h"
#include "lq_quant.h"

#include <cblas.h>
#include <lapacke.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct perm_item {
    float   key;
    int64_t idx;
} perm_item;

/* torch.argsort(diag, descending=True) is not stable; ties keep index order here. */
static int cmp_desc(const void *a, const void *b) {
    const perm_item *x = a, *y = b;
    if (x->key != y->key)
        return x->key > y->key ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

/* CPU backend: U lives in the caller's Hp buffer. */
typedef struct cpu_be {
    const float *U;
} cpu_be;

/* Hinv upper Cholesky factor U (H^-1 = U^T U) in place of H; 0 on success.
 * gptq.py takes cholesky(cholesky_inverse(cholesky(H)), upper=True): three factorizations'
 * worth of flops. The same U in one factorization and a triangular inverse: with J the
 * reversal, J H J = L L^T gives H = R R^T for the upper R = J L J, so H^-1 = R^-T R^-1 and
 * U = R^-1 = J L^-1 J (positive diagonal: the unique factor). In row-major storage J M J is
 * the array read backwards. The column-major calls on the row-major buffer see its transpose
 * (the lower triangle as an upper one) and spare LAPACKE's copies: 3.5x faster at k = 1536. */
static void reverse(float *a, int64_t n) {
    for (int64_t i = 0, j = n - 1; i < j; i++, j--) {
        const float t = a[i];
        a[i]          = a[j];
        a[j]          = t;
    }
}

static int chol_inverse_upper(float *H, int64_t k) {
    reverse(H, k * k); /* J H J */
    /* column-major 'U' = row-major 'L': L, then L^-1, in the lower triangle */
    if (LAPACKE_spotrf_work(LAPACK_COL_MAJOR, 'U', (lapack_int)k, H, (lapack_int)k) != 0)
        return -1;
    if (LAPACKE_strtri_work(LAPACK_COL_MAJOR, 'U', 'N', (lapack_int)k, H, (lapack_int)k) != 0)
        return -1;
    reverse(H, k * k);              /* J L^-1 J = U, in the upper triangle */
    for (int64_t i = 0; i < k; i++) /* clear the stale lower triangle */
        for (int64_t j = 0; j < i; j++)
            H[i * k + j] = 0;
    return 0;
}

static lq_status cpu_factor(void *ctx, float *Hp, int64_t k, lq_err *err) {
    cpu_be *c = ctx;
    (void)err;
    if (chol_inverse_upper(Hp, k) != 0)
        return LQ_ERR_CHOLESKY;
    c->U = Hp;
    return LQ_OK;
}

/* The sweep over output rows r0..r1 (Wt's columns): GPTQ treats every row alike and apart, so
 * threads take contiguous row ranges and run the whole sweep on them (the second core otherwise
 * waited through every column's quantization and updates). Err: [bs, n], this range's columns
 * only; wcol: [g] scratch. Returns the range's share of the loss. */
static double sweep_rows(const lq_gptq_sweep *sw, const float *Hp, float *Err, float *wcol,
                         int64_t r0, int64_t r1) {
    const int64_t  n = sw->n, k = sw->k, bs = sw->bs, g = sw->g, nr = r1 - r0;
    const int      maxq = (1 << sw->qs.bits) - 1;
    float         *Wt = sw->Wt, *sc_r = sw->sc_r, *zr_r = sw->zr_r, *scales = sw->scales;
    const float   *ssc = sw->ssc, *szr = sw->szr;
    int32_t       *zeros = sw->zeros;
    const int32_t *gcol  = sw->gcol;
    const int64_t *perm  = sw->perm;
    uint8_t       *q     = sw->q;
    double         loss  = 0;
    for (int64_t i1 = 0; i1 < k; i1 += bs) {
        int64_t i2 = i1 + bs < k ? i1 + bs : k, cnt = i2 - i1;
        for (int64_t i = i1; i < i2; i++) {
            const float *U   = Hp + i * k; /* row i of U: U[i, i..] */
            float       *w   = Wt + i * n;
            float        d   = U[i];
            float       *e   = Err + (i - i1) * n;
            int32_t      grp = gcol[i];
            if (sw->ggml && i % g == 0) {
                /* the block's scales (and mins) from the error-updated weights, by ggml's own
                 * search; its codes are then set column by column below */
                for (int64_t r = r0; r < r1; r++) {
                    for (int64_t c = 0; c < g; c++)
                        wcol[c] = Wt[(i + c) * n + r];
                    lq_ggml_encode_w((lq_dtype)sw->ggml, wcol, 1, sw->imp ? sw->imp + i : NULL,
                                     sw->sigma2 ? sw->sigma2[r] : 0.f,
                                     sw->blocks + (r * k + i) / g * sw->bb);
                }
            } else if (g && !sw->static_groups && i % g == 0) {
                /* Group parameters at the group's first column from the error-updated weights,
                 * as gptq.py. One deliberate difference: when g < block_size, gptq.py reads W,
                 * which lacks the updates of this block's earlier columns (they live in W1);
                 * we read the updated values (identical when g is a multiple of block_size). */
                int64_t w_ = i + g < k ? g : k - i;
                if (sw->qs.mse == LQ_MSE_WEIGHTED) /* each column's share of GPTQ's loss */
                    for (int64_t c = 0; c < w_; c++) {
                        const float u = Hp[(i + c) * k + i + c];
                        wcol[c]       = 1.0f / (u * u);
                    }
                for (int64_t r = r0; r < r1; r++) {
                    lq_group_params_w(w + r, w_, n, &sw->qs, wcol, &sc_r[r], &zr_r[r]);
                    scales[grp * n + r] = sc_r[r];
                    zeros[grp * n + r]  = (int32_t)zr_r[r];
                }
            }
            const float *sc = sw->static_groups && g ? ssc + (int64_t)grp * n : sc_r;
            const float *zr = sw->static_groups && g ? szr + (int64_t)grp * n : zr_r;
            int64_t      oc = perm[i];
            double       l  = 0;
            for (int64_t r = r0; sw->ggml && r < r1; r++) {
                const float qv = lq_ggml_requant((lq_dtype)sw->ggml,
                                                 sw->blocks + (r * k + i) / g * sw->bb,
                                                 (int)(i % g), w[r]);
                const float diff = w[r] - qv;
                l += (double)diff * diff;
                e[r] = diff / d;
                w[r] = qv;
            }
            for (int64_t r = r0; !sw->ggml && r < r1; r++) {
                int   code    = lq_quant_code(w[r], sc[r], zr[r], maxq);
                float qv      = sc[r] * ((float)code - zr[r]);
                q[r * k + oc] = (uint8_t)code;
                float diff    = w[r] - qv;
                l += (double)diff * diff;
                e[r] = diff / d;
                w[r] = qv; /* Wt row i now holds the fake-quantized column */
            }
            loss += l / ((double)d * d) / 2;
            /* intra-block update of the remaining columns of the block */
            for (int64_t j = i + 1; j < i2; j++)
                cblas_saxpy((int)nr, -U[j], e + r0, 1, Wt + j * n + r0, 1);
        }
        /* lazy update of everything after the block: Wt[i2:] -= U[i1:i2, i2:]^T Err */
        if (i2 < k)
            lq_sgemm(1, 0, k - i2, nr, cnt, -1.0f, Hp + i1 * k + i2, k, Err + r0, n, 1.0f,
                     Wt + i2 * n + r0, n, 1);
    }
    return loss;
}

static lq_status cpu_sweep(void *ctx, lq_gptq_sweep *sw, lq_err *err) {
    const float  *Hp = ((cpu_be *)ctx)->U;
    const int64_t n = sw->n, bs = sw->bs, gw = sw->g > 0 ? sw->g : 1;
    /* ranges of 64 rows and more: narrower ones gain less than a team costs */
    const int64_t fit  = n / 64 < omp_get_max_threads() ? n / 64 : omp_get_max_threads();
    const int     team = fit > 1 ? (int)fit : 1;
    float    *Err  = lq_aligned_alloc((size_t)(bs * n) * sizeof(float));
    float    *wcol = lq_malloc_n(gw * team, sizeof(float));
    if (!Err || !wcol) {
        lq_aligned_free(Err);
        free(wcol);
        LQ_FAIL(err, LQ_ERR_NOMEM, "out of memory for the GPTQ error block (%lld x %lld)",
                (long long)bs, (long long)n);
    }
    double loss = 0;
#pragma omp parallel num_threads(team) reduction(+ : loss)
    {
        const int     t = omp_get_thread_num(), T = omp_get_num_threads();
        const int64_t per = ((n + T - 1) / T + 15) & ~(int64_t)15; /* whole cache lines */
        const int64_t r0 = t * per, r1 = r0 + per < n ? r0 + per : n;
        if (r0 < r1)
            loss += sweep_rows(sw, Hp, Err, wcol + t * gw, r0, r1);
    }
    sw->loss = loss;
    lq_aligned_free(Err);
    free(wcol);
    return LQ_OK;
}

static lq_status cpu_reuse(void *ctx, const float *U, int64_t k, lq_err *err) {
    ((cpu_be *)ctx)->U = U;
    return LQ_OK;
}

static const lq_gptq_backend cpu_backend_proto = {NULL, cpu_factor, cpu_sweep, cpu_reuse};

void lq_gptq_factor_free(lq_gptq_factor *f) {
    if (!f)
        return;
    lq_aligned_free(f->U);
    free(f->perm);
    memset(f, 0, sizeof *f);
}

/* Whether o's shared factor is this linear's (same input, width and column rule). */
static int shared_hit(const lq_gptq_opts *o, int64_t k) {
    const lq_gptq_factor *f = o->shared;
    return f && f->valid && f->key == o->shared_key && f->k == k && f->act_order == o->act_order;
}

/* Keeps what was just factored for the linears that share the input. */
static void shared_keep(const lq_gptq_opts *o, const float *U, const int64_t *perm, int64_t k,
                        const lq_gptq_result *res) {
    lq_gptq_factor *f = o->shared;
    if (!f)
        return;
    if (f->k != k || !f->U) {
        lq_gptq_factor_free(f);
        f->U    = lq_aligned_alloc((size_t)(k * k) * sizeof(float));
        f->perm = malloc((size_t)k * sizeof *f->perm);
        if (!f->U || !f->perm) { /* no sharing then: each linear factors again */
            lq_gptq_factor_free(f);
            return;
        }
        f->k = k;
    }
    memcpy(f->U, U, (size_t)(k * k) * sizeof(float));
    memcpy(f->perm, perm, (size_t)k * sizeof *perm);
    f->key       = o->shared_key;
    f->act_order = o->act_order;
    f->damp_used = res->damp_used;
    f->retries   = res->retries;
    f->valid     = 1;
}

/* The order GPTQ visits the columns: act-order (pi != NULL) by decreasing diag(H), else as
 * they are. */
static void column_order(const float *H, int64_t k, perm_item *pi, int64_t *perm) {
    for (int64_t c = 0; c < k; c++)
        perm[c] = c;
    if (!pi)
        return;
    for (int64_t c = 0; c < k; c++)
        pi[c] = (perm_item){H[c * k + c], c};
    qsort(pi, (size_t)k, sizeof *pi, cmp_desc);
    for (int64_t c = 0; c < k; c++)
        perm[c] = pi[c].idx;
}

/* Wt[i, r] = W[r, perm[i]] (back = 0) or the reverse, in tiles: element by element, one of the
 * two sides walks a column (a cache line per element; at 4096 x 11008 that was seconds). */
static void permute_transpose(float *W, float *Wt, int64_t n, int64_t k, const int64_t *perm,
                              int back) {
    enum { TB = 64 };
    for (int64_t i0 = 0; i0 < k; i0 += TB)
        for (int64_t r0 = 0; r0 < n; r0 += TB) {
            const int64_t i1 = i0 + TB < k ? i0 + TB : k, r1 = r0 + TB < n ? r0 + TB : n;
            for (int64_t r = r0; r < r1; r++)
                for (int64_t i = i0; i < i1; i++) {
                    if (back)
                        W[r * k + perm[i]] = Wt[i * n + r];
                    else
                        Wt[i * n + r] = W[r * k + perm[i]];
                }
        }
}

/* Hp = the permuted H + damp * mean(diag) I, factored by the backend; a Cholesky failure
 * retries with ten times the damping (warning each time) up to o->damp_retries times. */
static lq_status factor_damped(const lq_gptq_backend *be, const float *H, const int64_t *perm,
                               int64_t k, const lq_gptq_opts *o, const char *name, float *Hp,
                               lq_gptq_result *res, lq_err *err) {
    double mean_diag = 0;
    for (int64_t c = 0; c < k; c++)
        mean_diag += H[c * k + c];
    mean_diag /= (double)k;
    double damp = o->damp;
    for (int attempt = 0;; attempt++) {
        for (int64_t i = 0; i < k; i++)
            for (int64_t j = 0; j < k; j++)
                Hp[i * k + j] = H[perm[i] * k + perm[j]];
        for (int64_t i = 0; i < k; i++)
            Hp[i * k + i] += (float)(damp * mean_diag);
        lq_status fs = be->factor(be->ctx, Hp, k, err);
        if (fs == LQ_OK)
            break;
        if (fs != LQ_ERR_CHOLESKY)
            return fs;
        if (attempt >= o->damp_retries)
            return lq_fail(err, LQ_ERR_CHOLESKY,
                           "%s: Hessian not positive definite even with damping %.3g (after %d "
                           "increases); use more calibration data or a larger --damp",
                           name, damp, attempt);
        double nd = damp > 0 ? damp * 10 : 0.01;
        if (o->warn) {
            char msg[256];
            snprintf(msg, sizeof msg, "%s: Cholesky failed with damping %.3g; retrying with %.3g",
                     name, damp, nd);
            o->warn(o->warn_user, msg);
        }
        damp = nd;
        res->retries++;
    }
    res->damp_used = damp;
    return LQ_OK;
}

lq_status lq_gptq(float *W, float *H, int64_t n, int64_t k, const lq_gptq_opts *o, uint8_t *q,
                  float *scales, int32_t *zeros, int32_t *g_idx, lq_gptq_result *res, lq_err *err) {
    return lq_gptq_ex(W, H, n, k, o, NULL, q, scales, zeros, g_idx, res, err);
}

static lq_status gptq_core(float *W, float *H, int64_t n, int64_t k, const lq_gptq_opts *o,
                           const lq_gptq_backend *be, uint8_t *q, float *scales, int32_t *zeros,
                           int32_t *g_idx, int ggml, uint8_t *blocks, lq_gptq_result *res,
                           lq_err *err);

lq_status lq_gptq_ex(float *W, float *H, int64_t n, int64_t k, const lq_gptq_opts *o,
                     const lq_gptq_backend *be, uint8_t *q, float *scales, int32_t *zeros,
                     int32_t *g_idx, lq_gptq_result *res, lq_err *err) {
    return gptq_core(W, H, n, k, o, be, q, scales, zeros, g_idx, 0, NULL, res, err);
}

lq_status lq_gptq_ggml(float *W, float *H, int64_t n, int64_t k, const lq_gptq_opts *o,
                       lq_dtype t, uint8_t *blocks, lq_gptq_result *res, lq_err *err) {
    int         bb;
    const int   be   = lq_dtype_block(t, &bb);
    const char *name = o->name ? o->name : "linear";
    if (t < LQ_DT_Q4_0 || be <= 1)
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "%s: %s is not a GGML block type", name, lq_dtype_name(t));
    if (o->act_order || o->static_groups)
        LQ_FAIL(err, LQ_ERR_INVALID_ARG,
                "%s: GPTQ on %s: no act-order or static groups (GGUF has no g_idx)", name,
                lq_dtype_name(t));
    if (k % be)
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "%s: in_features %lld not a whole number of %s blocks",
                name, (long long)k, lq_dtype_name(t));
    return gptq_core(W, H, n, k, o, NULL, NULL, NULL, NULL, NULL, (int)t, blocks, res, err);
}

static lq_status gptq_core(float *W, float *H, int64_t n, int64_t k, const lq_gptq_opts *o,
                           const lq_gptq_backend *be, uint8_t *q, float *scales, int32_t *zeros,
                           int32_t *g_idx, int ggml, uint8_t *blocks, lq_gptq_result *res,
                           lq_err *err) {
    cpu_be          cpu_ctx = {NULL};
    lq_gptq_backend cpu_b   = cpu_backend_proto;
    if (!be) {
        cpu_b.ctx = &cpu_ctx;
        be        = &cpu_b;
    }
    const lq_qspec *qs   = &o->q;
    int             bb   = 0;
    const int64_t   gb   = ggml ? lq_dtype_block((lq_dtype)ggml, &bb) : 0;
    int64_t         g    = ggml ? gb : qs->group_size <= 0 || qs->group_size >= k ? 0 : qs->group_size;
    int64_t         G    = lq_num_groups(k, qs->group_size);
    int64_t         bs   = o->block_size > 0 ? o->block_size : 128;
    const char     *name = o->name ? o->name : "linear";
    if (!ggml && (qs->bits < 2 || qs->bits > 8))
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "%s: bits %d outside 2..8", name, qs->bits);
    memset(res, 0, sizeof *res);

    lq_status  st   = LQ_OK;
    float     *Wt   = lq_aligned_alloc((size_t)(k * n) * sizeof(float)); /* [k, n] permuted */
    float     *Hp   = lq_aligned_alloc((size_t)(k * k) * sizeof(float));
    float     *sc_r = malloc((size_t)n * sizeof(float)); /* current group params per row */
    float     *zr_r = malloc((size_t)n * sizeof(float));
    float     *ssc = NULL, *szr = NULL; /* static groups [G, n] */
    float     *hd   = NULL;             /* diag(H) for a weighted search before the sweep */
    float     *imp = NULL, *sig = NULL; /* ggml: column importance, row mean squares */
    int64_t   *perm = malloc((size_t)k * sizeof *perm);
    int32_t   *gcol = malloc((size_t)k * sizeof *gcol); /* group of permuted position */
    perm_item *pi   = NULL;
    if (!Wt || !Hp || !sc_r || !zr_r || !perm || !gcol) {
        st = lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory for GPTQ (%lld x %lld)", name,
                     (long long)n, (long long)k);
        goto done;
    }

    /* Dead inputs: a column never excited carries no information; quantize it to zero. */
    for (int64_t c = 0; c < k; c++)
        if (H[c * k + c] == 0) {
            H[c * k + c] = 1;
            for (int64_t r = 0; r < n; r++)
                W[r * k + c] = 0;
        }
    /* Groups fixed before the sweep (static, per-channel) weigh their search by diag(H), each
     * input's mean square (llama.cpp's importance matrix): their columns' U is not known yet. */
    if (qs->mse == LQ_MSE_WEIGHTED && (!g || o->static_groups)) {
        if (!(hd = malloc((size_t)k * sizeof(float)))) {
            st = lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", name);
            goto done;
        }
        for (int64_t c = 0; c < k; c++)
            hd[c] = H[c * k + c];
    }
    if (qs->group_size > 0 && o->static_groups && g) {
        /* One quantizer per group from the unmodified, unpermuted weights. */
        ssc = malloc((size_t)(G * n) * sizeof(float));
        szr = malloc((size_t)(G * n) * sizeof(float));
        if (!ssc || !szr) {
            st = lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", name);
            goto done;
        }
        for (int64_t gi = 0; gi < G; gi++) {
            int64_t c0 = gi * g, w = c0 + g < k ? g : k - c0;
            for (int64_t r = 0; r < n; r++)
                lq_group_params_w(W + r * k + c0, w, 1, qs, hd ? hd + c0 : NULL, &ssc[gi * n + r],
                                  &szr[gi * n + r]);
        }
    }
    if (o->act_order && !(pi = malloc((size_t)k * sizeof *pi))) {
        st = lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", name);
        goto done;
    }
    if (shared_hit(o, k)) { /* the input's factor, made for a linear before this one */
        const lq_gptq_factor *f = o->shared;
        memcpy(perm, f->perm, (size_t)k * sizeof *perm);
        res->damp_used = f->damp_used;
        res->retries   = f->retries;
        st = be->reuse ? be->reuse(be->ctx, f->U, k, err) : LQ_OK;
        if (st != LQ_OK)
            goto done;
        permute_transpose(W, Wt, n, k, perm, 0);
    } else {
        column_order(H, k, pi, perm);
        permute_transpose(W, Wt, n, k, perm, 0); /* Wt[i, :] = W[:, perm[i]] */
        st = factor_damped(be, H, perm, k, o, name, Hp, res, err);
        if (st != LQ_OK)
            goto done;
        shared_keep(o, Hp, perm, k, res);
    }

    /* Group of each permuted position (static: the original column's group). */
    for (int64_t i = 0; i < k; i++)
        gcol[i] = g ? (int32_t)((o->static_groups ? perm[i] : i) / g) : 0;
    if (!g) /* per-channel: parameters from the whole (dead-zeroed) weight, once */
        for (int64_t r = 0; r < n; r++)
            lq_group_params_w(W + r * k, k, 1, qs, hd, &sc_r[r], &zr_r[r]);

    if (ggml) {
        /* ggml's search with importance weights, as llama-quantize runs it with an importance
         * matrix: diag(H), each input's mean square, is the statistic llama-imatrix collects
         * (on SmolLM2-135M it also beat 1 / U_cc^2, each column's share of GPTQ's loss, at Q2_K
         * and Q4_0) */
        if (!(imp = malloc((size_t)k * sizeof(float))) ||
            !(sig = malloc((size_t)n * sizeof(float)))) {
            st = lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", name);
            goto done;
        }
        for (int64_t i = 0; i < k; i++)
            imp[i] = H[perm[i] * k + perm[i]];
        for (int64_t r = 0; r < n; r++)
            sig[r] = lq_ggml_row_sigma2(W + r * k, k);
    }
    lq_gptq_sweep sw = {.n             = n,
                        .k             = k,
                        .bs            = bs,
                        .g             = g,
                        .static_groups = o->static_groups,
                        .qs            = *qs,
                        .perm          = perm,
                        .gcol          = gcol,
                        .ssc           = ssc,
                        .szr           = szr,
                        .sc_r          = sc_r,
                        .zr_r          = zr_r,
                        .Wt            = Wt,
                        .q             = q,
                        .scales        = scales,
                        .zeros         = zeros,
                        .ggml          = ggml,
                        .bb            = bb,
                        .blocks        = blocks,
                        .imp           = imp,
                        .sigma2        = sig};
    st               = be->sweep(be->ctx, &sw, err);
    if (st != LQ_OK)
        goto done;
    double loss = sw.loss;
    res->loss   = loss;

    permute_transpose(W, Wt, n, k, perm, 1); /* outputs in the original column order */
    if (ggml) {
        /* nothing beside the blocks */
    } else if (!g) {
        for (int64_t r = 0; r < n; r++) {
            scales[r] = sc_r[r];
            zeros[r]  = (int32_t)zr_r[r];
        }
    } else if (o->static_groups) {
        memcpy(scales, ssc, (size_t)(G * n) * sizeof(float));
        for (int64_t x = 0; x < G * n; x++)
            zeros[x] = (int32_t)szr[x];
    }
    for (int64_t i = 0; g_idx && i < k; i++)
        g_idx[perm[i]] = gcol[i];
    if (!isfinite(loss))
        st = lq_fail(err, LQ_ERR_NUMERIC, "%s: GPTQ produced non-finite values", name);
done:
    free(imp);
    free(sig);
    lq_aligned_free(Wt);
    lq_aligned_free(Hp);
    free(sc_r);
    free(zr_r);
    free(ssc);
    free(szr);
    free(hd);
    free(perm);
    free(gcol);
    free(pi);
    return st;
}
