/* Llama-family decoder forward in float32 on the CPU, shaped exactly like transformers'
 * LlamaForCausalLM (eager attention): RMSNorm with eps inside the root, rotate-half RoPE, GQA by
 * sharing each KV head between num_heads / num_kv_heads query heads, causal (and, for Mistral,
 * sliding-window) mask, softmax in float32, SwiGLU MLP.
 *
 * Every Linear runs over all tokens of a chunk at once (one GEMM per Linear per chunk).
 * Attention runs as independent jobs of (sequence, head, block of query rows), each two sgemms
 * around a masked softmax, spread over OpenMP threads; a query block only multiplies against
 * the keys it may see, so the causal half of QK^T is mostly skipped. Chunks hold whole
 * sequences and at most ws->max_tokens tokens: that, not the number of sequences, bounds the
 * memory. */
#include "lq_model.h"

#include "lq_dtype.h"

#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Below these sizes a loop runs on the calling thread: waking the OpenMP team (whose idle
 * threads then spin and compete with OpenBLAS's own threads for the cores) costs more than
 * the loop. Elementwise loops are counted in elements, attention in multiply-adds. */
#define PAR_ELEMS (1 << 20)
#define PAR_MACS  (1 << 22)

/* Query rows per attention job: large enough for GEMM efficiency, small enough that the
 * per-thread score block (QB x max_seq floats) stays in cache-friendly sizes and that causal
 * blocks skip most masked keys. A multiple of lq_gemm512's 6-row tile: SmolLM2 ppl at ctx 2048
 * ran 1050-1070 tokens/s at 48 (96 the same, 60 and 72 within noise) against 970-990 at 64,
 * which left a 4-row tail in every block. */
#define QB 48

struct lq_fwd_ws {
    int64_t          d, qd, kvd, ff, max_tokens, max_seq;
    int              nthreads;
    float           *xn;                  /* [T, d]   normalized input of the current sub-block */
    float           *q;                   /* [T, qd]  */
    float           *k;                   /* [T, kvd] */
    float           *v;                   /* [T, kvd] */
    float           *att;                 /* [T, qd]  attention output (input of o_proj) */
    float           *r;                   /* [T, d]   residual after attention */
    float           *o;                   /* [T, d]   o_proj / down_proj output */
    float           *g;                   /* [T, ff]  gate, then silu(gate) * up */
    float           *u;                   /* [T, ff]  up */
    float           *rope_cos, *rope_sin; /* [max_seq, head_dim/2] */
    float           *rope_cos_l, *rope_sin_l; /* the sliding layers' (cfg.rope_local_theta) */
    float           *rope_cos_x, *rope_sin_x; /* longrope beyond rope_original_max_pos */
    int64_t          rope_orig; /* longrope: sequences longer than this use the _x tables */
    float           *fz;        /* [T, max(qd + 2 kvd, 2 ff)] a fused linear's output */
    float           *moe_logit; /* [T, E] router logits, then probabilities (mixture of experts) */
    float           *moe_x;     /* [T, d] the rows routed to one expert */
    float           *moe_y;     /* [T, d] their expert output */
    float           *moe_w;     /* [T, topk] routing weights */
    float           *moe_sel;   /* [T, topk] chosen experts (int32 in float-sized slots) */
    int64_t         *moe_count; /* [layers, E] tokens routed to each expert since creation */
    int64_t          moe_layers, moe_e;
    int32_t         *moe_rows; /* [T * topk] (token, choice) indices grouped by expert */
    int64_t         *moe_off;  /* [E + 1] each expert's range in moe_rows */
    const uint8_t   *moe_mode; /* [E] capture modes (LQ_MOE_*), NULL: all routed */
    int64_t          half;
    float           *scores;
    size_t           scores_cap; /* floats */
    void            *kws;        /* quantized-kernel scratch */
    unsigned         kflags;     /* lq_qlinear_forward_cpu_ex flags of the quantized linears */
    size_t           kws_cap;    /* bytes */
    size_t           bytes;
    lq_dense_gemm_fn gemm; /* dense linears elsewhere (GPU), NULL = OpenBLAS */
    void            *gemm_user;
    lq_linear_dev_fn lin_dev; /* linears of every format elsewhere (GPU kernels), NULL = CPU */
    void            *lin_dev_user;
    int              want_attn_w;
    float           *attn_w; /* [max_tokens] */
    /* [heads, max_tokens] partial sums: each head's row is written by one job at a time and
     * summed over heads in order, so the weights do not depend on the thread schedule */
    float *attn_w_thr;
    int    attn_w_thr_n;
};

void lq_fwd_ws_want_attn_weights(lq_fwd_ws *ws, int on) {
    ws->want_attn_w = on != 0;
}

const float *lq_fwd_ws_attn_weights(const lq_fwd_ws *ws) {
    return ws->want_attn_w ? ws->attn_w : NULL;
}

void lq_fwd_ws_set_dense_gemm(lq_fwd_ws *ws, lq_dense_gemm_fn fn, void *user) {
    ws->gemm      = fn;
    ws->gemm_user = user;
}

void lq_fwd_ws_set_linear_dev(lq_fwd_ws *ws, lq_linear_dev_fn fn, void *user) {
    ws->lin_dev      = fn;
    ws->lin_dev_user = user;
}

static int ws_threads(const lq_fwd_ws *ws) {
    return ws->nthreads > 0 ? ws->nthreads : omp_get_max_threads();
}

void lq_fwd_ws_free(lq_fwd_ws *ws) {
    if (!ws)
        return;
    float *bufs[] = {ws->xn,         ws->q,          ws->k,          ws->v,          ws->att,
                     ws->r,          ws->o,          ws->g,          ws->u,          ws->rope_cos,
                     ws->rope_sin,   ws->scores,     ws->attn_w,     ws->attn_w_thr, ws->rope_cos_l,
                     ws->rope_sin_l, ws->rope_cos_x, ws->rope_sin_x, ws->fz,         ws->moe_logit,
                     ws->moe_x,      ws->moe_y,      ws->moe_w,      ws->moe_sel};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        lq_aligned_free(bufs[i]);
    lq_aligned_free(ws->kws);
    free(ws->moe_count);
    free(ws->moe_rows);
    free(ws->moe_off);
    free(ws);
}

/* Width of the MLP's gate / up rows: the intermediate size, or with experts the wider of an
 * expert's and the shared expert's. */
static int64_t ws_ff(const lq_model_config *c) {
    if (!c->num_experts)
        return c->intermediate_size;
    return c->moe_intermediate > c->shared_intermediate ? c->moe_intermediate
                                                        : c->shared_intermediate;
}

static float *ws_alloc(lq_fwd_ws *ws, int64_t rows, int64_t cols, int *ok) {
    int64_t n;
    if (!*ok || !lq_mul_i64(rows, cols, &n) || !lq_mul_i64(n, (int64_t)sizeof(float), &n)) {
        *ok = 0;
        return NULL;
    }
    float *p = lq_aligned_alloc((size_t)n);
    if (!p)
        *ok = 0;
    ws->bytes += (size_t)n;
    return p;
}

/* HF: freqs = inv_freq (fp32) * position (fp32), one rounding; cos/sin of that (times
 * LongRoPE's attention factor, in float32) */
static void rope_table(const lq_model_config *cfg, int64_t max_seq, int64_t half, float *cs,
                       float *sn) {
    float inv[512];
    lq_rope_inv_freq(cfg, inv);
    const int   scaled = cfg->rope_type == LQ_ROPE_LONGROPE;
    const float af     = (float)cfg->rope_attn_factor;
    for (int64_t p = 0; p < max_seq; p++)
        for (int64_t j = 0; j < half; j++) {
            const float a    = (float)p * inv[j];
            cs[p * half + j] = (float)cos((double)a);
            sn[p * half + j] = (float)sin((double)a);
            if (scaled)
                cs[p * half + j] *= af, sn[p * half + j] *= af;
        }
}

lq_status lq_fwd_ws_create(const lq_model_config *cfg, int64_t max_tokens, int64_t max_seq,
                           lq_fwd_ws **out, lq_err *err) {
    *out = NULL;
    LQ_RETURN_IF(max_seq < 1 || max_tokens < max_seq, err, LQ_ERR_INVALID_ARG,
                 "forward workspace: need 1 <= max_seq (%lld) <= max_tokens (%lld)",
                 (long long)max_seq, (long long)max_tokens);
    LQ_RETURN_IF(cfg->head_dim < 2 || cfg->head_dim > 1024 || cfg->head_dim % 2, err,
                 LQ_ERR_UNSUPPORTED, "forward workspace: head_dim %lld (even, <= 1024)",
                 (long long)cfg->head_dim);
    lq_fwd_ws *ws = calloc(1, sizeof *ws);
    LQ_RETURN_IF(!ws, err, LQ_ERR_NOMEM, "forward workspace: out of memory");
    ws->d            = cfg->hidden_size;
    ws->qd           = cfg->num_heads * cfg->head_dim;
    ws->kvd          = cfg->num_kv_heads * cfg->head_dim;
    ws->ff           = ws_ff(cfg);
    ws->max_tokens   = max_tokens;
    ws->max_seq      = max_seq;
    int           ok = 1;
    const int64_t T  = max_tokens;
    ws->xn           = ws_alloc(ws, T, ws->d, &ok);
    ws->q            = ws_alloc(ws, T, ws->qd, &ok);
    ws->k            = ws_alloc(ws, T, ws->kvd, &ok);
    ws->v            = ws_alloc(ws, T, ws->kvd, &ok);
    ws->att          = ws_alloc(ws, T, ws->qd, &ok);
    ws->r            = ws_alloc(ws, T, ws->d, &ok);
    ws->o            = ws_alloc(ws, T, ws->d, &ok);
    ws->g            = ws_alloc(ws, T, ws->ff, &ok);
    ws->u            = ws_alloc(ws, T, ws->ff, &ok);
    ws->half         = cfg->head_dim / 2;
    ws->rope_cos     = ws_alloc(ws, max_seq, ws->half, &ok);
    ws->rope_sin     = ws_alloc(ws, max_seq, ws->half, &ok);
    if (ok)
        rope_table(cfg, max_seq, ws->half, ws->rope_cos, ws->rope_sin);
    if (cfg->rope_type == LQ_ROPE_LONGROPE && max_seq > cfg->rope_original_max_pos) {
        /* transformers switches the whole sequence to the long factors past the original */
        lq_model_config lng = *cfg;
        memcpy(lng.rope_short, cfg->rope_long, sizeof lng.rope_short);
        ws->rope_orig  = cfg->rope_original_max_pos;
        ws->rope_cos_x = ws_alloc(ws, max_seq, ws->half, &ok);
        ws->rope_sin_x = ws_alloc(ws, max_seq, ws->half, &ok);
        if (ok)
            rope_table(&lng, max_seq, ws->half, ws->rope_cos_x, ws->rope_sin_x);
    }
    if (cfg->fused) {
        const int64_t wide = ws->qd + 2 * ws->kvd > 2 * ws->ff ? ws->qd + 2 * ws->kvd : 2 * ws->ff;
        ws->fz             = ws_alloc(ws, T, wide, &ok);
    }
    if (cfg->num_experts) {
        ws->moe_layers = cfg->num_layers;
        ws->moe_e      = cfg->num_experts;
        ws->moe_count  = lq_calloc_n(cfg->num_layers * cfg->num_experts, sizeof *ws->moe_count);
        ok             = ok && ws->moe_count;
        ws->moe_logit  = ws_alloc(ws, T, cfg->num_experts, &ok);
        ws->moe_x      = ws_alloc(ws, T, ws->d, &ok);
        ws->moe_y      = ws_alloc(ws, T, ws->d, &ok);
        ws->moe_w      = ws_alloc(ws, T, cfg->experts_per_tok, &ok);
        ws->moe_sel    = ws_alloc(ws, T, cfg->experts_per_tok, &ok);
        ws->moe_rows   = lq_malloc_n(T * cfg->experts_per_tok, sizeof *ws->moe_rows);
        ws->moe_off    = lq_calloc_n(cfg->num_experts + 1, sizeof *ws->moe_off);
        ok             = ok && ws->moe_rows && ws->moe_off;
        ws->bytes += (size_t)(T * cfg->experts_per_tok) * sizeof *ws->moe_rows +
                     (size_t)(cfg->num_experts + 1) * sizeof *ws->moe_off;
    }
    if (cfg->rope_local_theta > 0) { /* Gemma 3: the sliding layers' base, default RoPE */
        lq_model_config local = *cfg;
        local.rope_theta      = cfg->rope_local_theta;
        local.rope_type       = LQ_ROPE_DEFAULT;
        ws->rope_cos_l        = ws_alloc(ws, max_seq, ws->half, &ok);
        ws->rope_sin_l        = ws_alloc(ws, max_seq, ws->half, &ok);
        if (ok)
            rope_table(&local, max_seq, ws->half, ws->rope_cos_l, ws->rope_sin_l);
    }
    if (!ok) {
        const double gib = (double)ws->bytes / (1 << 30);
        lq_fwd_ws_free(ws);
        LQ_FAIL(err, LQ_ERR_NOMEM, "forward workspace: out of memory (%.2f GiB for %lld tokens)",
                gib, (long long)max_tokens);
    }
    *out = ws;
    return LQ_OK;
}

void lq_fwd_ws_set_threads(lq_fwd_ws *ws, int nthreads) {
    ws->nthreads = nthreads > 0 ? nthreads : 0;
}

void lq_fwd_ws_set_kernel_flags(lq_fwd_ws *ws, unsigned flags) {
    ws->kflags = flags;
}

int64_t lq_fwd_ws_max_tokens(const lq_fwd_ws *ws) {
    return ws->max_tokens;
}

void lq_fwd_ws_set_moe_modes(lq_fwd_ws *ws, const uint8_t *modes) {
    ws->moe_mode = modes;
}

const int64_t *lq_fwd_ws_expert_tokens(const lq_fwd_ws *ws, int64_t *layers, int64_t *experts) {
    *layers  = ws->moe_layers;
    *experts = ws->moe_e;
    return ws->moe_count;
}

size_t lq_fwd_ws_bytes(const lq_fwd_ws *ws) {
    return ws->bytes + ws->scores_cap * sizeof(float) + ws->kws_cap;
}

/* The attention-weight buffers, on first use. */
static lq_status ensure_attn_w(lq_fwd_ws *ws, int nt, lq_err *err) {
    if (ws->attn_w && ws->attn_w_thr_n >= nt)
        return LQ_OK;
    lq_aligned_free(ws->attn_w);
    lq_aligned_free(ws->attn_w_thr);
    ws->attn_w       = lq_aligned_alloc((size_t)ws->max_tokens * sizeof(float));
    ws->attn_w_thr   = lq_aligned_alloc((size_t)nt * (size_t)ws->max_tokens * sizeof(float));
    ws->attn_w_thr_n = nt;
    if (!ws->attn_w || !ws->attn_w_thr) {
        ws->attn_w_thr_n = 0;
        LQ_FAIL(err, LQ_ERR_NOMEM, "forward workspace: out of memory for attention weights");
    }
    return LQ_OK;
}

static lq_status ensure_scores(lq_fwd_ws *ws, int nt, lq_err *err) {
    const size_t need = (size_t)nt * QB * (size_t)ws->max_seq;
    if (ws->scores_cap >= need)
        return LQ_OK;
    lq_aligned_free(ws->scores);
    ws->scores_cap = 0;
    ws->scores     = lq_aligned_alloc(need * sizeof(float));
    LQ_RETURN_IF(!ws->scores, err, LQ_ERR_NOMEM, "forward workspace: out of memory for scores");
    ws->scores_cap = need;
    return LQ_OK;
}

static lq_status ensure_kws(lq_fwd_ws *ws, size_t need, lq_err *err) {
    if (ws->kws_cap >= need)
        return LQ_OK;
    lq_aligned_free(ws->kws);
    ws->kws_cap = 0;
    ws->kws     = lq_aligned_alloc(need);
    LQ_RETURN_IF(!ws->kws, err, LQ_ERR_NOMEM,
                 "forward workspace: out of memory (%zu bytes of "
                 "kernel scratch)",
                 need);
    ws->kws_cap = need;
    return LQ_OK;
}

/* ---------------------------------------------------------------------------------------- */
static void rmsnorm(const float *x, const float *w, int plus_one, int64_t rows, int64_t d,
                    double eps, float *out) {
#pragma omp parallel for schedule(static) if (rows * d >= PAR_ELEMS)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * d;
        float       *o  = out + r * d;
        double       ss = 0;
        for (int64_t i = 0; i < d; i++)
            ss += (double)xr[i] * xr[i];
        const float inv = (float)(1.0 / sqrt(ss / (double)d + eps));
        if (plus_one) /* Gemma: (x * inv) * (1 + w), all in float32 */
            for (int64_t i = 0; i < d; i++)
                o[i] = (xr[i] * inv) * (1.0f + w[i]);
        else
            for (int64_t i = 0; i < d; i++)
                o[i] = w[i] * (xr[i] * inv);
    }
}

void lq_model_rmsnorm(const lq_model_config *cfg, const float *x, const float *w, int64_t rows,
                      int64_t d, float *out) {
    rmsnorm(x, w, cfg->norm_plus_one, rows, d, cfg->rms_norm_eps, out);
}

static lq_status lin(const char *what, const lq_linear *l, const float *x, int64_t t, float *y,
                     lq_fwd_ws *ws, lq_err *err) {
    const lq_qlinear *q  = &l->buf.q;
    lq_status         gs = LQ_ERR_UNSUPPORTED;
    if (ws->lin_dev)
        gs = ws->lin_dev(ws->lin_dev_user, q, x, t, y, err);
    else if (ws->gemm && q->format == LQ_FMT_DENSE && q->dense_dtype == LQ_DENSE_F32 && q->dense &&
             !q->bias)
        gs = ws->gemm(ws->gemm_user, (const float *)q->dense, q->n, q->k, x, t, y, err);
    if (gs == LQ_OK) {
        if (l->bias)
            for (int64_t r = 0; r < t; r++)
                for (int64_t i = 0; i < q->n; i++)
                    y[r * q->n + i] += l->bias[i];
        return LQ_OK;
    }
    if (gs != LQ_ERR_UNSUPPORTED) {
        lq_err_prefix(err, "%s", what);
        return gs;
    }
    LQ_TRY(ensure_kws(ws, lq_linear_ws_size_ex(l, t, ws->kflags), err));
    const lq_status st =
        lq_linear_forward_ex(l, x, t, y, ws->kws, ws->kws_cap, ws_threads(ws), ws->kflags);
    if (st != LQ_OK) {
        const lq_qformat *tr = lq_qformat_get((lq_format)l->buf.q.format);
        return lq_fail(err, st, "%s [%lld x %lld, %s]: linear forward over %lld tokens failed (%s)",
                       what, (long long)l->buf.q.n, (long long)l->buf.q.k, tr ? tr->name : "?",
                       (long long)t, lq_status_name(st));
    }
    return LQ_OK;
}

/* Record the input of the linear in `slot`; *stop once a linear of role stop_after has been
 * captured (experts: moe_core decides, after all experts' linears of the role). */
static lq_status capture(lq_capture_fn cap, void *user, int64_t slot, const float *x, int64_t t,
                         int64_t k, int stop_after, int *stop, lq_err *err) {
    if (cap) {
        const lq_status st = cap(user, slot, x, t, k);
        if (st != LQ_OK)
            return lq_fail(err, st, "capture hook for %s (expert %lld) returned %s",
                           lq_lin_name(lq_slot_role(slot)), (long long)lq_slot_expert(slot),
                           lq_status_name(st));
    }
    if (stop_after >= 0 && (int)lq_slot_role(slot) >= stop_after)
        *stop = 1;
    return LQ_OK;
}

/* Rotate-half RoPE in place on x [T, ld]: heads of hd values at columns h*hd; token t sits at
 * position t % seqlen. */
static void rope_apply(const lq_fwd_ws *ws, int local, float *x, int64_t T, int64_t ld,
                       int64_t nheads, int64_t seqlen, int nt) {
    const int64_t half = ws->half, hd = 2 * half;
    const int     lng = ws->rope_cos_x && seqlen > ws->rope_orig;
    const float  *cs  = local ? ws->rope_cos_l : lng ? ws->rope_cos_x : ws->rope_cos;
    const float  *sn  = local ? ws->rope_sin_l : lng ? ws->rope_sin_x : ws->rope_sin;
#pragma omp parallel for schedule(static) num_threads(nt) if (T * ld >= PAR_ELEMS)
    for (int64_t t = 0; t < T; t++) {
        const int64_t p = t % seqlen;
        const float  *c = cs + p * half, *s = sn + p * half;
        for (int64_t h = 0; h < nheads; h++) {
            float *v = x + t * ld + h * hd;
            for (int64_t j = 0; j < half; j++) {
                const float x1 = v[j], x2 = v[j + half];
                v[j]        = x1 * c[j] - x2 * s[j];
                v[j + half] = x2 * c[j] + x1 * s[j];
            }
        }
    }
}

/* q/k/v projections, RoPE and attention of ns sequences: xn [ns*seqlen, d] -> out [.., qd]
 * (the input of o_proj). Captures q, k, v inputs. */
static lq_status attn_core(const lq_model *m, const lq_layer *L, const float *xn, int64_t ns,
                           int64_t seqlen, float *out, lq_fwd_ws *ws, lq_capture_fn cap, void *user,
                           int stop_after, int *stop, lq_err *err) {
    const lq_model_config *c = &m->cfg;
    const int64_t          T = ns * seqlen, d = c->hidden_size, hd = c->head_dim, H = c->num_heads,
                  KV = c->num_kv_heads, qd = ws->qd, kvd = ws->kvd;
    const int     sliding = lq_config_layer_sliding(c, L->idx);
    const int64_t W       = sliding ? c->sliding_window : 0;
    const int     local   = sliding && ws->rope_cos_l != NULL;
    const float   softcap = (float)c->attn_softcap;
    const int     nt      = ws_threads(ws);
    /* v_proj's input is captured after the attention when its weights are wanted (a fused qkv
     * has one input for all three) */
    const int wts = ws->want_attn_w && cap != NULL && !c->fused;
    /* and when the pass stops at v_proj's capture, the probabilities are all it needs: no
     * values, no attention output */
    const int wts_only = wts && stop_after >= 0 && stop_after <= LQ_LIN_V;
    if (c->fused) {
        LQ_TRY(capture(cap, user, LQ_LIN_QKV, xn, T, d, stop_after, stop, err));
        if (*stop)
            return LQ_OK;
        const int64_t w = qd + 2 * kvd;
        LQ_TRY(lin("self_attn.qkv_proj", &L->lin[LQ_LIN_QKV], xn, T, ws->fz, ws, err));
#pragma omp parallel for schedule(static) num_threads(nt) if (T * w >= PAR_ELEMS)
        for (int64_t t = 0; t < T; t++) {
            const float *f = ws->fz + t * w;
            memcpy(ws->q + t * qd, f, (size_t)qd * sizeof(float));
            memcpy(ws->k + t * kvd, f + qd, (size_t)kvd * sizeof(float));
            memcpy(ws->v + t * kvd, f + qd + kvd, (size_t)kvd * sizeof(float));
        }
    } else {
        for (int id = LQ_LIN_Q; id <= (wts ? LQ_LIN_K : LQ_LIN_V); id++) {
            LQ_TRY(capture(cap, user, (lq_lin_id)id, xn, T, d, stop_after, stop, err));
            if (*stop)
                return LQ_OK;
        }
        if (wts) {
            LQ_TRY(ensure_attn_w(ws, (int)H, err));
            memset(ws->attn_w_thr, 0, (size_t)H * (size_t)T * sizeof(float));
        }
        LQ_TRY(lin("self_attn.q_proj", &L->lin[LQ_LIN_Q], xn, T, ws->q, ws, err));
        LQ_TRY(lin("self_attn.k_proj", &L->lin[LQ_LIN_K], xn, T, ws->k, ws, err));
        if (!wts_only)
            LQ_TRY(lin("self_attn.v_proj", &L->lin[LQ_LIN_V], xn, T, ws->v, ws, err));
    }
    if (L->q_norm && L->k_norm) { /* Qwen3, Gemma 3: RMSNorm of every head, before RoPE */
        lq_model_rmsnorm(c, ws->q, L->q_norm, T * H, hd, ws->q);
        lq_model_rmsnorm(c, ws->k, L->k_norm, T * KV, hd, ws->k);
    }
    rope_apply(ws, local, ws->q, T, qd, H, seqlen, nt);
    rope_apply(ws, local, ws->k, T, kvd, KV, seqlen, nt);
    LQ_TRY(ensure_scores(ws, nt, err));

    /* a job is one block of query rows of one head of one sequence; with attention weights,
     * all blocks of the (sequence, head), heaviest first, so that its row of partial sums has
     * one writer */
    const int64_t nqb = (seqlen + QB - 1) / QB, per = wts ? nqb : 1, njobs = ns * H * nqb / per,
                  group = H / KV;
    /* transformers multiplies by the Python float head_dim**-0.5 (query_pre_attn_scalar**-0.5) */
    const float   scale = c->attn_scale > 0 ? (float)c->attn_scale : 1.0f / sqrtf((float)hd);
    const float  *q = ws->q, *k = ws->k, *v = ws->v;
    float        *scores  = ws->scores;
    const int64_t sstride = (int64_t)QB * ws->max_seq;
    const int64_t macs    = ns * H * seqlen * seqlen * hd; /* QK^T + PV over the causal half */
    void (*const softmax)(float *, int64_t, int64_t, int64_t) = lq_vec_ops_get()->softmax_row;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt) if (macs >= PAR_MACS)
    for (int64_t job = 0; job < njobs; job++)
        for (int64_t bi = 0; bi < per; bi++) {
            /* the heaviest (last) query blocks first: better balance under dynamic scheduling */
            const int64_t u = job * per + bi;
            const int64_t b = nqb - 1 - u % nqb, h = (u / nqb) % H, s = u / (nqb * H);
            const int64_t i0 = b * QB, i1 = i0 + QB < seqlen ? i0 + QB : seqlen, rows = i1 - i0;
            const int64_t j0 = (W > 0 && i0 - W + 1 > 0) ? i0 - W + 1 : 0, cols = i1 - j0;
            const int64_t kvh = h / group, base = s * seqlen;
            float        *S = scores + (int64_t)omp_get_thread_num() * sstride;
            lq_sgemm(0, 1, rows, cols, hd, scale, q + (base + i0) * qd + h * hd, qd,
                     k + (base + j0) * kvd + kvh * hd, kvd, 0.f, S, cols, 1);
            if (softcap > 0) /* Gemma 2: cap * tanh(score / cap), before the mask */
                for (int64_t e = 0; e < rows * cols; e++)
                    S[e] = tanhf(S[e] / softcap) * softcap;
            for (int64_t r = 0; r < rows; r++) {
                const int64_t i  = i0 + r;
                const int64_t lo = (W > 0 && i - W + 1 > j0) ? i - W + 1 : j0;
                softmax(S + r * cols, cols, lo - j0, i - j0);
            }
            if (wts) { /* squared probabilities each key receives, per head */
                float *aw = ws->attn_w_thr + h * T + base + j0;
                for (int64_t r = 0; r < rows; r++)
                    for (int64_t jj = 0; jj < cols; jj++)
                        aw[jj] += S[r * cols + jj] * S[r * cols + jj];
            }
            if (!wts_only)
                lq_sgemm(0, 0, rows, hd, cols, 1.f, S, cols, v + (base + j0) * kvd + kvh * hd, kvd,
                         0.f, out + (base + i0) * qd + h * hd, qd, 1);
        }
    if (wts) {
        for (int64_t t = 0; t < T; t++) {
            float a = 0.f;
            for (int64_t hh = 0; hh < H; hh++)
                a += ws->attn_w_thr[hh * T + t];
            ws->attn_w[t] = a;
        }
        LQ_TRY(capture(cap, user, LQ_LIN_V, xn, T, d, stop_after, stop, err));
    }
    return LQ_OK;
}

/* GELU, tanh approximation, as PyTorch's float kernel writes it */
static inline float gelu_tanh(float x) {
    const float beta  = (float)(1.41421356237309504880 * 1.12837916709551257390 *
                               0.5); /* M_SQRT2 * M_2_SQRTPI * 0.5 */
    const float kappa = 0.044715f;
    const float inner = beta * (x + kappa * x * x * x);
    return 0.5f * x * (1.0f + tanhf(inner));
}

static lq_status moe_core(const lq_model_config *c, const lq_layer *L, const float *xn, int64_t T,
                          float *out, lq_fwd_ws *ws, lq_capture_fn cap, void *user, int stop_after,
                          int *stop, lq_err *err);

/* g[T, ff] = act(gate) * up, gate and up rows of ld values (the fused gate_up_proj output
 * holds both in one row; g may be gate itself) */
static void glu(const lq_model_config *c, float *g, const float *gate, const float *up, int64_t ld,
                int64_t T, int64_t ff, int nt) {
    const int64_t n = T * ff;
    if (c->act == LQ_ACT_GELU_TANH) {
#pragma omp parallel for schedule(static) num_threads(nt) if (n >= PAR_ELEMS)
        for (int64_t t = 0; t < T; t++)
            for (int64_t e = 0; e < ff; e++)
                g[t * ff + e] = gelu_tanh(gate[t * ld + e]) * up[t * ld + e];
    } else {
        const lq_vec_ops *v = lq_vec_ops_get();
#pragma omp parallel for schedule(static) num_threads(nt) if (n >= PAR_ELEMS)
        for (int64_t t = 0; t < T; t++)
            v->silu_mul(g + t * ff, gate + t * ld, up + t * ld, ff);
    }
}

/* Gated MLP (SwiGLU, or GeGLU for Gemma): xn [T, d] -> out [T, d] (down_proj output). Captures
 * gate, up (or gate_up), down inputs. */
static lq_status mlp_core(const lq_model_config *c, const lq_layer *L, const float *xn, int64_t T,
                          float *out, lq_fwd_ws *ws, lq_capture_fn cap, void *user, int stop_after,
                          int *stop, const lq_fwd_resume *sv, int64_t row0, lq_err *err) {
    if (c->num_experts)
        return moe_core(c, L, xn, T, out, ws, cap, user, stop_after, stop, err);
    const int64_t d = ws->d, ff = ws->ff;
    const int     nt = ws_threads(ws);
    const float  *gate, *up; /* rows of ld values */
    int64_t       ld;
    if (c->fused) { /* Phi3MLP: gate, up = gate_up_proj(x).chunk(2, dim=-1) */
        LQ_TRY(capture(cap, user, LQ_LIN_GATE_UP, xn, T, d, stop_after, stop, err));
        if (*stop)
            return LQ_OK;
        LQ_TRY(lin("mlp.gate_up_proj", &L->lin[LQ_LIN_GATE_UP], xn, T, ws->fz, ws, err));
        gate = ws->fz, up = ws->fz + ff, ld = 2 * ff;
    } else {
        for (int id = LQ_LIN_GATE; id <= LQ_LIN_UP; id++) {
            LQ_TRY(capture(cap, user, (lq_lin_id)id, xn, T, d, stop_after, stop, err));
            if (*stop)
                return LQ_OK;
        }
        LQ_TRY(lin("mlp.gate_proj", &L->lin[LQ_LIN_GATE], xn, T, ws->g, ws, err));
        LQ_TRY(lin("mlp.up_proj", &L->lin[LQ_LIN_UP], xn, T, ws->u, ws, err));
        gate = ws->g, up = ws->u, ld = ff;
    }
    float *g = ws->g; /* act(gate) * up, in place when not fused */
    glu(c, g, gate, up, ld, T, ff, nt);
    if (sv)
        LQ_TRY(sv->save_fn(sv->save_user, LQ_STAGE_ACT, g, row0, T, ff));
    LQ_TRY(capture(cap, user, LQ_LIN_DOWN, g, T, ff, stop_after, stop, err));
    if (*stop)
        return LQ_OK;
    return lin("mlp.down_proj", &L->lin[LQ_LIN_DOWN], g, T, out, ws, err);
}

/* One expert's gate/up/act over rows x [t, d] -> ws->g [t, ff] (the down projection's input). */
static lq_status expert_in(const lq_model_config *c, const lq_linear *x3, const float *x, int64_t t,
                           lq_fwd_ws *ws, lq_err *err) {
    const int64_t ff = x3[0].buf.q.n;
    LQ_TRY(lin("mlp.experts.gate", &x3[0], x, t, ws->g, ws, err));
    LQ_TRY(lin("mlp.experts.up", &x3[1], x, t, ws->u, ws, err));
    glu(c, ws->g, ws->g, ws->u, ff, t, ff, ws_threads(ws));
    return LQ_OK;
}

/* The rows routed to expert e into ws->moe_x; their count. */
static int64_t gather_rows(const lq_fwd_ws *ws, int64_t e, int64_t K, const float *xn) {
    const int64_t d = ws->d, lo = ws->moe_off[e], cnt = ws->moe_off[e + 1] - lo;
    for (int64_t i = 0; i < cnt; i++)
        memcpy(ws->moe_x + i * d, xn + (ws->moe_rows[lo + i] / K) * d, (size_t)d * sizeof(float));
    return cnt;
}

/* Mixture of experts, as transformers' sparse MoE blocks: router logits, softmax in float32,
 * the top experts_per_tok (ties to the lower index, as torch.topk), their probabilities
 * (renormalized when norm_topk); each expert runs on the rows routed to it and adds its output
 * times the row's weight, experts in index order; then the shared expert times the sigmoid of
 * its gate (Qwen2-MoE). xn [T, d] -> out [T, d]. Captures (lq_capture_fn): the block input,
 * every expert's gate/up input, then every expert's down input, by the experts' modes. */
static lq_status moe_core(const lq_model_config *c, const lq_layer *L, const float *xn, int64_t T,
                          float *out, lq_fwd_ws *ws, lq_capture_fn cap, void *user, int stop_after,
                          int *stop, lq_err *err) {
    const int64_t d = ws->d, E = c->num_experts, K = c->experts_per_tok;
    const int     nt  = ws_threads(ws);
    int32_t      *sel = (int32_t *)ws->moe_sel;
    LQ_TRY(lin("mlp.gate", &L->router, xn, T, ws->moe_logit, ws, err));
#pragma omp parallel for schedule(static) num_threads(nt) if (T * E >= PAR_ELEMS)
    for (int64_t t = 0; t < T; t++) {
        float *p  = ws->moe_logit + t * E;
        float  mx = p[0], sum = 0;
        for (int64_t e = 1; e < E; e++)
            mx = p[e] > mx ? p[e] : mx;
        for (int64_t e = 0; e < E; e++)
            sum += (p[e] = expf(p[e] - mx));
        for (int64_t e = 0; e < E; e++)
            p[e] /= sum;
        float wsum = 0;
        for (int64_t j = 0; j < K; j++) {
            int64_t best = -1;
            for (int64_t e = 0; e < E; e++) {
                int taken = 0;
                for (int64_t i = 0; i < j && !taken; i++)
                    taken = sel[t * K + i] == e;
                if (!taken && (best < 0 || p[e] > p[best]))
                    best = e;
            }
            sel[t * K + j]       = (int32_t)best;
            ws->moe_w[t * K + j] = p[best];
            wsum += p[best];
        }
        if (c->norm_topk)
            for (int64_t j = 0; j < K; j++)
                ws->moe_w[t * K + j] /= wsum;
    }
    /* (token, choice) pairs grouped by expert, tokens in order within each */
    memset(ws->moe_off, 0, (size_t)(E + 1) * sizeof *ws->moe_off);
    for (int64_t i = 0; i < T * K; i++)
        ws->moe_off[sel[i] + 1]++;
    for (int64_t e = 0; e < E; e++)
        ws->moe_off[e + 1] += ws->moe_off[e];
    for (int64_t i = 0; i < T * K; i++)
        ws->moe_rows[ws->moe_off[sel[i]]++] = (int32_t)i;
    for (int64_t e = E; e > 0; e--) /* the fill advanced each start to the next one's */
        ws->moe_off[e] = ws->moe_off[e - 1];
    ws->moe_off[0] = 0;
    if (L->idx >= 0 && L->idx < ws->moe_layers)
        for (int64_t e = 0; e < E; e++)
            ws->moe_count[L->idx * E + e] += ws->moe_off[e + 1] - ws->moe_off[e];

    const uint8_t *mode  = cap ? ws->moe_mode : NULL;
    const int      up_to = stop_after; /* the captures end with this role's (-1: none) */
    int            dummy = 0;
    if (cap) {
        LQ_TRY(capture(cap, user, LQ_SLOT_MOE_IN, xn, T, d, -1, &dummy, err));
        for (int64_t e = 0; e < E; e++) {
            if (mode && mode[e] != LQ_MOE_ROUTED)
                continue;
            const int64_t cnt = gather_rows(ws, e, K, xn);
            if (!cnt)
                continue;
            LQ_TRY(
                capture(cap, user, lq_slot_of(LQ_LIN_GATE, e), ws->moe_x, cnt, d, -1, &dummy, err));
            LQ_TRY(
                capture(cap, user, lq_slot_of(LQ_LIN_UP, e), ws->moe_x, cnt, d, -1, &dummy, err));
        }
        if (up_to >= 0 && up_to < LQ_LIN_DOWN) {
            *stop = 1;
            return LQ_OK;
        }
    }
    /* after the down captures a stopping forward needs no outputs */
    const int outputs = !(cap && up_to >= 0);
    if (outputs)
        memset(out, 0, (size_t)(T * d) * sizeof(float));
    for (int64_t e = 0; e < E; e++) {
        const lq_linear *x3 = &L->experts[3 * e];
        const int        m  = mode ? mode[e] : LQ_MOE_ROUTED;
        if (cap && m == LQ_MOE_ALL) { /* statistics over every token, the output routed */
            LQ_TRY(expert_in(c, x3, xn, T, ws, err));
            LQ_TRY(capture(cap, user, lq_slot_of(LQ_LIN_DOWN, e), ws->g, T, x3[2].buf.q.k, -1,
                           &dummy, err));
        }
        if (!outputs && !(cap && m == LQ_MOE_ROUTED))
            continue;
        const int64_t cnt = gather_rows(ws, e, K, xn);
        if (!cnt)
            continue;
        LQ_TRY(expert_in(c, x3, ws->moe_x, cnt, ws, err));
        if (cap && m == LQ_MOE_ROUTED)
            LQ_TRY(capture(cap, user, lq_slot_of(LQ_LIN_DOWN, e), ws->g, cnt, x3[2].buf.q.k, -1,
                           &dummy, err));
        if (!outputs)
            continue;
        LQ_TRY(lin("mlp.experts.down", &x3[2], ws->g, cnt, ws->moe_y, ws, err));
        for (int64_t i = 0; i < cnt; i++) {
            const int32_t tj = ws->moe_rows[ws->moe_off[e] + i];
            const float   w  = ws->moe_w[tj];
            const float  *y  = ws->moe_y + i * d;
            float        *o  = out + (tj / K) * d;
            for (int64_t x = 0; x < d; x++)
                o[x] += y[x] * w;
        }
    }
    if (c->shared_intermediate) {
        LQ_TRY(expert_in(c, L->shared, xn, T, ws, err));
        LQ_TRY(capture(cap, user, lq_slot_of(LQ_LIN_DOWN, E), ws->g, T, c->shared_intermediate, -1,
                       &dummy, err));
        if (outputs) {
            LQ_TRY(lin("mlp.shared_expert.down_proj", &L->shared[2], ws->g, T, ws->moe_y, ws, err));
            LQ_TRY(lin("mlp.shared_expert_gate", &L->shared[3], xn, T, ws->moe_logit, ws, err));
            for (int64_t t = 0; t < T; t++) {
                const float gt = 1.0f / (1.0f + expf(-ws->moe_logit[t]));
                for (int64_t i = 0; i < d; i++)
                    out[t * d + i] += gt * ws->moe_y[t * d + i];
            }
        }
    }
    if (!outputs)
        *stop = 1;
    return LQ_OK;
}

static lq_status check_layer(const lq_model *m, const lq_layer *L, lq_err *err) {
    LQ_RETURN_IF(!L || !L->attn_norm || !L->mlp_norm ||
                     (m->cfg.post_norms && (!L->attn_post_norm || !L->mlp_post_norm)) ||
                     (m->cfg.qk_norm && (!L->q_norm || !L->k_norm)),
                 err, LQ_ERR_INVALID_ARG, "%s: layer not loaded", m->dir);
    for (int l = 0; l < LQ_LIN_COUNT; l++) {
        int64_t n, k;
        if (!lq_lin_present(&m->cfg, (lq_lin_id)l))
            continue;
        lq_lin_shape(&m->cfg, (lq_lin_id)l, &n, &k);
        LQ_RETURN_IF(L->lin[l].buf.q.n != n || L->lin[l].buf.q.k != k, err, LQ_ERR_INVALID_ARG,
                     "%s: %s is [%lld x %lld], the config implies [%lld x %lld]", m->dir,
                     lq_lin_name((lq_lin_id)l), (long long)L->lin[l].buf.q.n,
                     (long long)L->lin[l].buf.q.k, (long long)n, (long long)k);
    }
    return LQ_OK;
}

static lq_status check_seq(const lq_model *m, int64_t nseq, int64_t seqlen, const lq_fwd_ws *ws,
                           lq_err *err) {
    LQ_RETURN_IF(!ws, err, LQ_ERR_INVALID_ARG, "forward: no workspace");
    LQ_RETURN_IF(nseq < 0 || seqlen < 1, err, LQ_ERR_INVALID_ARG,
                 "forward: bad batch (%lld sequences of %lld tokens)", (long long)nseq,
                 (long long)seqlen);
    LQ_RETURN_IF(seqlen > ws->max_seq, err, LQ_ERR_INVALID_ARG,
                 "forward: sequence length %lld over the workspace's %lld", (long long)seqlen,
                 (long long)ws->max_seq);
    LQ_RETURN_IF(ws->d != m->cfg.hidden_size || ws->ff != ws_ff(&m->cfg) ||
                     ws->qd != m->cfg.num_heads * m->cfg.head_dim ||
                     ws->kvd != m->cfg.num_kv_heads * m->cfg.head_dim ||
                     ws->half != m->cfg.head_dim / 2,
                 err, LQ_ERR_INVALID_ARG, "forward: workspace made for another model shape");
    return LQ_OK;
}

lq_status lq_layer_forward_ex(const lq_model *m, const lq_layer *L, float *h, int64_t nseq,
                              int64_t seqlen, lq_capture_fn cap, void *user, int stop_after,
                              const lq_fwd_resume *rs, lq_fwd_ws *ws, lq_err *err) {
    LQ_TRY(check_seq(m, nseq, seqlen, ws, err));
    LQ_TRY(check_layer(m, L, err));
    const int64_t          d = m->cfg.hidden_size, per = ws->max_tokens / seqlen;
    const lq_model_config *c    = &m->cfg;
    const int              nt   = ws_threads(ws);
    const lq_fwd_stage     from = rs ? rs->from : LQ_STAGE_INPUT;
    const lq_fwd_stage     save = rs && rs->save_fn ? rs->save : LQ_STAGE_INPUT;
    LQ_RETURN_IF(from != LQ_STAGE_INPUT && !(rs && rs->state), err, LQ_ERR_INVALID_ARG,
                 "forward: resuming without a saved state");
    LQ_RETURN_IF((from == LQ_STAGE_ACT || save == LQ_STAGE_ACT) &&
                     (c->num_experts || (from == LQ_STAGE_ACT && !rs->resid)),
                 err, LQ_ERR_INVALID_ARG,
                 "forward: the MLP activation stage needs a dense MLP (and the residual)");
    const lq_fwd_resume *sv = save == LQ_STAGE_ACT ? rs : NULL;
    for (int64_t s0 = 0; s0 < nseq; s0 += per) {
        const int64_t ns = nseq - s0 < per ? nseq - s0 : per, T = ns * seqlen, row0 = s0 * seqlen;
        float        *hc   = h + row0 * d;
        int           stop = 0;
        const float  *att  = ws->att;
        float        *r = ws->r, *o = ws->o;
        if (from == LQ_STAGE_ACT) { /* down_proj alone, from the saved activation */
            const float *g = rs->state + row0 * ws->ff;
            memcpy(r, rs->resid + row0 * d, (size_t)(T * d) * sizeof(float));
            LQ_TRY(capture(cap, user, LQ_LIN_DOWN, g, T, ws->ff, stop_after, &stop, err));
            if (stop)
                continue;
            LQ_TRY(lin("mlp.down_proj", &L->lin[LQ_LIN_DOWN], g, T, o, ws, err));
            goto mlp_out;
        }
        if (from == LQ_STAGE_RESID) {
            memcpy(r, rs->state + row0 * d, (size_t)(T * d) * sizeof(float));
        } else {
            if (from == LQ_STAGE_INPUT) {
                lq_model_rmsnorm(c, hc, L->attn_norm, T, d, ws->xn);
                LQ_TRY(attn_core(m, L, ws->xn, ns, seqlen, ws->att, ws, cap, user, stop_after,
                                 &stop, err));
                if (stop)
                    continue;
            } else {
                att = rs->state + row0 * ws->qd;
            }
            if (save == LQ_STAGE_ATTN)
                LQ_TRY(rs->save_fn(rs->save_user, save, att, row0, T, ws->qd));
            LQ_TRY(capture(cap, user, LQ_LIN_O, att, T, ws->qd, stop_after, &stop, err));
            if (stop)
                continue;
            LQ_TRY(lin("self_attn.o_proj", &L->lin[LQ_LIN_O], att, T, o, ws, err));
            if (c->post_norms)
                lq_model_rmsnorm(c, o, L->attn_post_norm, T, d, o);
#pragma omp parallel for schedule(static) num_threads(nt) if (T * d >= PAR_ELEMS)
            for (int64_t i = 0; i < T * d; i++)
                r[i] = hc[i] + o[i];
        }
        if (save == LQ_STAGE_RESID)
            LQ_TRY(rs->save_fn(rs->save_user, save, r, row0, T, d));
        lq_model_rmsnorm(c, r, L->mlp_norm, T, d, ws->xn);
        LQ_TRY(mlp_core(c, L, ws->xn, T, o, ws, cap, user, stop_after, &stop, sv, row0, err));
        if (stop)
            continue;
    mlp_out:
        if (c->post_norms)
            lq_model_rmsnorm(c, o, L->mlp_post_norm, T, d, o);
#pragma omp parallel for schedule(static) num_threads(nt) if (T * d >= PAR_ELEMS)
        for (int64_t i = 0; i < T * d; i++)
            hc[i] = r[i] + o[i];
    }
    return LQ_OK;
}

lq_status lq_layer_forward(const lq_model *m, const lq_layer *L, float *h, int64_t nseq,
                           int64_t seqlen, lq_capture_fn cap, void *user, int stop_after,
                           lq_fwd_ws *ws, lq_err *err) {
    return lq_layer_forward_ex(m, L, h, nseq, seqlen, cap, user, stop_after, NULL, ws, err);
}

lq_status lq_attn_forward(const lq_model *m, const lq_layer *L, const float *xn, int64_t nseq,
                          int64_t seqlen, float *out, lq_fwd_ws *ws, lq_err *err) {
    LQ_TRY(check_seq(m, nseq, seqlen, ws, err));
    LQ_TRY(check_layer(m, L, err));
    const int64_t d = m->cfg.hidden_size, per = ws->max_tokens / seqlen;
    for (int64_t s0 = 0; s0 < nseq; s0 += per) {
        const int64_t ns = nseq - s0 < per ? nseq - s0 : per, T = ns * seqlen;
        int           stop = 0;
        LQ_TRY(attn_core(m, L, xn + s0 * seqlen * d, ns, seqlen, ws->att, ws, NULL, NULL, -1, &stop,
                         err));
        LQ_TRY(
            lin("self_attn.o_proj", &L->lin[LQ_LIN_O], ws->att, T, out + s0 * seqlen * d, ws, err));
    }
    return LQ_OK;
}

lq_status lq_mlp_forward(const lq_model *m, const lq_layer *L, const float *xn, int64_t ntok,
                         float *out, lq_fwd_ws *ws, lq_err *err) {
    LQ_TRY(check_seq(m, ntok > 0, 1, ws, err));
    LQ_TRY(check_layer(m, L, err));
    const int64_t d = m->cfg.hidden_size, per = ws->max_tokens;
    for (int64_t t0 = 0; t0 < ntok; t0 += per) {
        const int64_t T    = ntok - t0 < per ? ntok - t0 : per;
        int           stop = 0;
        LQ_TRY(mlp_core(&m->cfg, L, xn + t0 * d, T, out + t0 * d, ws, NULL, NULL, -1, &stop, NULL,
                        0, err));
    }
    return LQ_OK;
}

lq_status lq_model_embed(const lq_model *m, const int32_t *ids, int64_t n, float *h, lq_err *err) {
    const int64_t d = m->cfg.hidden_size;
    for (int64_t i = 0; i < n; i++) {
        LQ_RETURN_IF(ids[i] < 0 || ids[i] >= m->cfg.vocab_size, err, LQ_ERR_INVALID_ARG,
                     "token id %d at position %lld outside the vocabulary [0, %lld)", (int)ids[i],
                     (long long)i, (long long)m->cfg.vocab_size);
        if (m->embed16) /* fp16 / bf16 -> float32 is exact */
            lq_convert_to_f32(m->embed16_dt, m->embed16 + (int64_t)ids[i] * d, d, h + i * d);
        else
            memcpy(h + i * d, m->embed + (int64_t)ids[i] * d, (size_t)d * sizeof(float));
    }
    if (m->cfg.embed_scale != 1.0) { /* Gemma: times sqrt(hidden_size), rounded to float32 */
        const float sc = (float)m->cfg.embed_scale;
        for (int64_t i = 0; i < n * d; i++)
            h[i] *= sc;
    }
    return LQ_OK;
}

lq_status lq_model_logits(const lq_model *m, const float *h, int64_t t, float *logits,
                          lq_fwd_ws *ws, lq_err *err) {
    LQ_RETURN_IF(!ws || ws->d != m->cfg.hidden_size, err, LQ_ERR_INVALID_ARG,
                 "logits: workspace missing or made for another model shape");
    const int64_t d = m->cfg.hidden_size, V = m->cfg.vocab_size, per = ws->max_tokens;
    for (int64_t t0 = 0; t0 < t; t0 += per) {
        const int64_t T = t - t0 < per ? t - t0 : per;
        lq_model_rmsnorm(&m->cfg, h + t0 * d, m->final_norm, T, d, ws->xn);
        LQ_TRY(lin("lm_head", &m->lm_head, ws->xn, T, logits + t0 * V, ws, err));
        const float cap = (float)m->cfg.final_softcap;
        if (cap > 0) { /* Gemma 2: cap * tanh(logit / cap) */
            float *lg = logits + t0 * V;
#pragma omp parallel for schedule(static) num_threads(ws_threads(ws)) if (T * V >= PAR_ELEMS)
            for (int64_t e = 0; e < T * V; e++)
                lg[e] = tanhf(lg[e] / cap) * cap;
        }
    }
    return LQ_OK;
}
