/* Llama-family decoder forward, shaped exactly like transformers' LlamaForCausalLM (eager
 * attention): RMSNorm with eps inside the root, rotate-half RoPE, GQA by sharing each KV head
 * between num_heads / num_kv_heads query heads, causal (and, for Mistral, sliding-window) mask,
 * softmax in float32, SwiGLU MLP; and what Qwen3, Gemma, Phi-3 and the mixtures of experts
 * change in it.
 *
 * Written once over the op table (kernels/lq_ops.h): the workspace's backend decides where it
 * runs (the cpu backend: OpenMP, the ISA kernels, OpenBLAS; cuda: the device), and every tensor
 * the forward touches -- h, the workspace, the layer's weights, what the captures see -- lives
 * on that backend. Only the mixture-of-experts bookkeeping (which rows go to which expert) comes
 * to the host, T x experts_per_tok indices a layer. Every Linear runs over all tokens of a chunk
 * at once; chunks hold whole sequences and at most ws->max_tokens tokens: that, not the number
 * of sequences, bounds the memory. */
#include "lq_model.h"

#include "lq_dtype.h"
#include "lq_ops.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct lq_fwd_ws {
    int64_t          d, qd, kvd, ff, max_tokens, max_seq;
    lq_be           *be;     /* where the forward runs: own_be, or the caller's */
    lq_be            own_be; /* the cpu backend of lq_fwd_ws_create */
    /* backend buffers (each [rows, cols] as noted), allocated through be */
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
    int32_t         *moe_sel;   /* [T, topk] chosen experts */
    int32_t         *moe_rows;  /* [T * topk] (token, choice) indices grouped by expert */
    float           *attn_w;    /* [max_tokens] (lq_fwd_ws_want_attn_weights) */
    /* their sizes in bytes, in the order above, for releasing them */
    size_t           sizes[24];
    float          **slots[24];
    int              nslots;
    /* host side of the routing */
    int32_t         *moe_sel_h;  /* [T, topk] */
    int32_t         *moe_rows_h; /* [T * topk] */
    int64_t         *moe_off;    /* [E + 1] each expert's range in moe_rows */
    int64_t         *moe_count;  /* [layers, E] tokens routed to each expert since creation */
    int64_t          moe_layers, moe_e, moe_k;
    const uint8_t   *moe_mode; /* [E] capture modes (LQ_MOE_*), NULL: all routed */
    int64_t          half;
    size_t           bytes;
    lq_linear_dev_fn lin_dev; /* linears of every format elsewhere (GPU kernels), NULL = ours */
    void            *lin_dev_user;
    int              want_attn_w;
};

void lq_fwd_ws_want_attn_weights(lq_fwd_ws *ws, int on) {
    ws->want_attn_w = on != 0;
}

const float *lq_fwd_ws_attn_weights(const lq_fwd_ws *ws) {
    return ws->want_attn_w ? ws->attn_w : NULL;
}

void lq_fwd_ws_set_linear_dev(lq_fwd_ws *ws, lq_linear_dev_fn fn, void *user) {
    ws->lin_dev      = fn;
    ws->lin_dev_user = user;
}

lq_be *lq_fwd_ws_backend(lq_fwd_ws *ws) {
    return ws->be;
}

void lq_fwd_ws_free(lq_fwd_ws *ws) {
    if (!ws)
        return;
    for (int i = 0; i < ws->nslots; i++)
        ws->be->ops->release(ws->be, *ws->slots[i], ws->sizes[i]);
    if (ws->be == &ws->own_be)
        lq_be_free(&ws->own_be);
    free(ws->moe_count);
    free(ws->moe_sel_h);
    free(ws->moe_rows_h);
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

/* *slot = a backend buffer of rows x cols 4-byte elements (*ok cleared on failure) */
static void ws_alloc(lq_fwd_ws *ws, void *slot, int64_t rows, int64_t cols, int *ok) {
    int64_t n;
    float **s = slot;
    *s        = NULL;
    if (!*ok || !lq_mul_i64(rows, cols, &n) || !lq_mul_i64(n, 4, &n) ||
        ws->nslots == (int)(sizeof ws->sizes / sizeof ws->sizes[0]) ||
        ws->be->ops->alloc(ws->be, (void **)s, (size_t)n) != LQ_OK) {
        *ok = 0;
        return;
    }
    ws->slots[ws->nslots] = s;
    ws->sizes[ws->nslots] = (size_t)n;
    ws->nslots++;
    ws->bytes += (size_t)n;
}

/* HF: freqs = inv_freq (fp32) * position (fp32), one rounding; cos/sin of that (times
 * LongRoPE's attention factor, in float32); computed on the host, then put on the backend */
static void rope_table(lq_fwd_ws *ws, const lq_model_config *cfg, float **cs_slot, float **sn_slot,
                       int *ok) {
    const int64_t max_seq = ws->max_seq, half = ws->half;
    ws_alloc(ws, cs_slot, max_seq, half, ok);
    ws_alloc(ws, sn_slot, max_seq, half, ok);
    float *cs = *ok ? malloc((size_t)(max_seq * half) * sizeof *cs) : NULL;
    float *sn = *ok ? malloc((size_t)(max_seq * half) * sizeof *sn) : NULL;
    if (!cs || !sn) {
        free(cs), free(sn);
        *ok = 0;
        return;
    }
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
    const size_t b = (size_t)(max_seq * half) * sizeof *cs;
    if (ws->be->ops->upload(ws->be, *cs_slot, cs, b) != LQ_OK ||
        ws->be->ops->upload(ws->be, *sn_slot, sn, b) != LQ_OK ||
        ws->be->ops->sync(ws->be) != LQ_OK)
        *ok = 0;
    free(cs), free(sn);
}

lq_status lq_fwd_ws_create_be(const lq_model_config *cfg, int64_t max_tokens, int64_t max_seq,
                              lq_be *be, lq_fwd_ws **out, lq_err *err) {
    *out = NULL;
    LQ_RETURN_IF(max_seq < 1 || max_tokens < max_seq, err, LQ_ERR_INVALID_ARG,
                 "forward workspace: need 1 <= max_seq (%lld) <= max_tokens (%lld)",
                 (long long)max_seq, (long long)max_tokens);
    LQ_RETURN_IF(cfg->head_dim < 2 || cfg->head_dim > 1024 || cfg->head_dim % 2, err,
                 LQ_ERR_UNSUPPORTED, "forward workspace: head_dim %lld (even, <= 1024)",
                 (long long)cfg->head_dim);
    lq_fwd_ws *ws = calloc(1, sizeof *ws);
    LQ_RETURN_IF(!ws, err, LQ_ERR_NOMEM, "forward workspace: out of memory");
    if (be) {
        ws->be = be;
    } else {
        lq_be_init_host(&ws->own_be, lq_ops_cpu(), 0);
        ws->be = &ws->own_be;
    }
    ws->d          = cfg->hidden_size;
    ws->qd         = cfg->num_heads * cfg->head_dim;
    ws->kvd        = cfg->num_kv_heads * cfg->head_dim;
    ws->ff         = ws_ff(cfg);
    ws->max_tokens = max_tokens;
    ws->max_seq    = max_seq;
    ws->half       = cfg->head_dim / 2;
    int           ok = 1;
    const int64_t T  = max_tokens;
    ws_alloc(ws, &ws->xn, T, ws->d, &ok);
    ws_alloc(ws, &ws->q, T, ws->qd, &ok);
    ws_alloc(ws, &ws->k, T, ws->kvd, &ok);
    ws_alloc(ws, &ws->v, T, ws->kvd, &ok);
    ws_alloc(ws, &ws->att, T, ws->qd, &ok);
    ws_alloc(ws, &ws->r, T, ws->d, &ok);
    ws_alloc(ws, &ws->o, T, ws->d, &ok);
    ws_alloc(ws, &ws->g, T, ws->ff, &ok);
    ws_alloc(ws, &ws->u, T, ws->ff, &ok);
    rope_table(ws, cfg, &ws->rope_cos, &ws->rope_sin, &ok);
    if (cfg->rope_type == LQ_ROPE_LONGROPE && max_seq > cfg->rope_original_max_pos) {
        /* transformers switches the whole sequence to the long factors past the original */
        lq_model_config lng = *cfg;
        memcpy(lng.rope_short, cfg->rope_long, sizeof lng.rope_short);
        ws->rope_orig = cfg->rope_original_max_pos;
        rope_table(ws, &lng, &ws->rope_cos_x, &ws->rope_sin_x, &ok);
    }
    if (cfg->fused) {
        const int64_t wide = ws->qd + 2 * ws->kvd > 2 * ws->ff ? ws->qd + 2 * ws->kvd : 2 * ws->ff;
        ws_alloc(ws, &ws->fz, T, wide, &ok);
    }
    if (cfg->num_experts) {
        const int64_t E = cfg->num_experts, K = cfg->experts_per_tok;
        ws->moe_layers  = cfg->num_layers;
        ws->moe_e       = E;
        ws->moe_k       = K;
        ws->moe_count   = lq_calloc_n(cfg->num_layers * E, sizeof *ws->moe_count);
        ws->moe_sel_h   = lq_malloc_n(T * K, sizeof *ws->moe_sel_h);
        ws->moe_rows_h  = lq_malloc_n(T * K, sizeof *ws->moe_rows_h);
        ws->moe_off     = lq_calloc_n(E + 1, sizeof *ws->moe_off);
        ok = ok && ws->moe_count && ws->moe_sel_h && ws->moe_rows_h && ws->moe_off;
        ws_alloc(ws, &ws->moe_logit, T, E, &ok);
        ws_alloc(ws, &ws->moe_x, T, ws->d, &ok);
        ws_alloc(ws, &ws->moe_y, T, ws->d, &ok);
        ws_alloc(ws, &ws->moe_w, T, K, &ok);
        ws_alloc(ws, &ws->moe_sel, T, K, &ok);
        ws_alloc(ws, &ws->moe_rows, T, K, &ok);
        ws->bytes += (size_t)(2 * T * K) * sizeof(int32_t) + (size_t)(E + 1) * sizeof(int64_t);
    }
    if (cfg->rope_local_theta > 0) { /* Gemma 3: the sliding layers' base, default RoPE */
        lq_model_config local = *cfg;
        local.rope_theta      = cfg->rope_local_theta;
        local.rope_type       = LQ_ROPE_DEFAULT;
        rope_table(ws, &local, &ws->rope_cos_l, &ws->rope_sin_l, &ok);
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

lq_status lq_fwd_ws_create(const lq_model_config *cfg, int64_t max_tokens, int64_t max_seq,
                           lq_fwd_ws **out, lq_err *err) {
    return lq_fwd_ws_create_be(cfg, max_tokens, max_seq, NULL, out, err);
}

void lq_fwd_ws_set_threads(lq_fwd_ws *ws, int nthreads) {
    ws->be->nthreads = nthreads > 0 ? nthreads : 0;
}

void lq_fwd_ws_set_kernel_flags(lq_fwd_ws *ws, unsigned flags) {
    ws->be->kflags = flags;
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
    return ws->bytes + ws->be->scratch_cap;
}

/* The attention-weight buffer, on first use. */
static lq_status ensure_attn_w(lq_fwd_ws *ws, lq_err *err) {
    if (ws->attn_w)
        return LQ_OK;
    int ok = 1;
    ws_alloc(ws, &ws->attn_w, ws->max_tokens, 1, &ok);
    LQ_RETURN_IF(!ok, err, LQ_ERR_NOMEM, "forward workspace: out of memory for attention weights");
    return LQ_OK;
}

/* A failed op: its status with the backend's detail. */
static lq_status op_fail(const lq_fwd_ws *ws, lq_status st, const char *what, lq_err *err) {
    return lq_fail(err, st, "%s on the %s backend failed (%s): %s", what, ws->be->ops->name,
                   lq_status_name(st), lq_be_error(ws->be));
}

#define OP(ws, what, call)                                                                         \
    do {                                                                                           \
        const lq_status op_s_ = (call);                                                            \
        if (op_s_ != LQ_OK)                                                                        \
            return op_fail((ws), op_s_, (what), err);                                              \
    } while (0)

/* ---------------------------------------------------------------------------------------- */
static lq_status rmsnorm(const lq_fwd_ws *ws, const lq_model_config *cfg, const float *x,
                         const float *w, int64_t rows, int64_t d, float *out, lq_err *err) {
    OP(ws, "RMSNorm",
       ws->be->ops->rmsnorm(ws->be, x, w, rows, d, cfg->rms_norm_eps, cfg->norm_plus_one, out));
    return LQ_OK;
}

static lq_status lin(const char *what, const lq_linear *l, const float *x, int64_t t, float *y,
                     lq_fwd_ws *ws, lq_err *err) {
    const lq_qlinear *q  = &l->buf.q;
    lq_status         gs = LQ_ERR_UNSUPPORTED;
    /* the hook takes host arrays: a host backend's */
    if (ws->lin_dev && !ws->be->ops->device)
        gs = ws->lin_dev(ws->lin_dev_user, q, x, t, y, err);
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
    const lq_status st = ws->be->ops->linear(ws->be, q, l->bias, x, t, y);
    if (st != LQ_OK) {
        const lq_qformat *tr = lq_qformat_get((lq_format)l->buf.q.format);
        return lq_fail(err, st,
                       "%s [%lld x %lld, %s]: linear forward over %lld tokens failed on the %s "
                       "backend (%s)%s%s",
                       what, (long long)l->buf.q.n, (long long)l->buf.q.k, tr ? tr->name : "?",
                       (long long)t, ws->be->ops->name, lq_status_name(st),
                       ws->be->errmsg[0] ? ": " : "", ws->be->errmsg);
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
static lq_status rope_apply(const lq_fwd_ws *ws, int local, float *x, int64_t T, int64_t ld,
                            int64_t nheads, int64_t seqlen, lq_err *err) {
    const int    lng = ws->rope_cos_x && seqlen > ws->rope_orig;
    const float *cs  = local ? ws->rope_cos_l : lng ? ws->rope_cos_x : ws->rope_cos;
    const float *sn  = local ? ws->rope_sin_l : lng ? ws->rope_sin_x : ws->rope_sin;
    OP(ws, "RoPE", ws->be->ops->rope(ws->be, x, T, ld, nheads, ws->half, seqlen, cs, sn));
    return LQ_OK;
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
    const int     local   = sliding && ws->rope_cos_l != NULL;
    const lq_ops *ops     = ws->be->ops;
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
        OP(ws, "splitting qkv", ops->copy2d(ws->be, ws->q, qd, ws->fz, w, T, qd));
        OP(ws, "splitting qkv", ops->copy2d(ws->be, ws->k, kvd, ws->fz + qd, w, T, kvd));
        OP(ws, "splitting qkv", ops->copy2d(ws->be, ws->v, kvd, ws->fz + qd + kvd, w, T, kvd));
    } else {
        for (int id = LQ_LIN_Q; id <= (wts ? LQ_LIN_K : LQ_LIN_V); id++) {
            LQ_TRY(capture(cap, user, (lq_lin_id)id, xn, T, d, stop_after, stop, err));
            if (*stop)
                return LQ_OK;
        }
        if (wts)
            LQ_TRY(ensure_attn_w(ws, err));
        LQ_TRY(lin("self_attn.q_proj", &L->lin[LQ_LIN_Q], xn, T, ws->q, ws, err));
        LQ_TRY(lin("self_attn.k_proj", &L->lin[LQ_LIN_K], xn, T, ws->k, ws, err));
        if (!wts_only)
            LQ_TRY(lin("self_attn.v_proj", &L->lin[LQ_LIN_V], xn, T, ws->v, ws, err));
    }
    if (L->q_norm && L->k_norm) { /* Qwen3, Gemma 3: RMSNorm of every head, before RoPE */
        LQ_TRY(rmsnorm(ws, c, ws->q, L->q_norm, T * H, hd, ws->q, err));
        LQ_TRY(rmsnorm(ws, c, ws->k, L->k_norm, T * KV, hd, ws->k, err));
    }
    LQ_TRY(rope_apply(ws, local, ws->q, T, qd, H, seqlen, err));
    LQ_TRY(rope_apply(ws, local, ws->k, T, kvd, KV, seqlen, err));
    /* transformers multiplies by the Python float head_dim**-0.5 (query_pre_attn_scalar**-0.5) */
    const lq_attn_args a = {ws->q,
                            ws->k,
                            ws->v,
                            wts_only ? NULL : out,
                            wts ? ws->attn_w : NULL,
                            ns,
                            seqlen,
                            H,
                            KV,
                            hd,
                            sliding ? c->sliding_window : 0,
                            c->attn_scale > 0 ? (float)c->attn_scale : 1.0f / sqrtf((float)hd),
                            (float)c->attn_softcap};
    OP(ws, "attention", ops->attention(ws->be, &a));
    if (wts)
        LQ_TRY(capture(cap, user, LQ_LIN_V, xn, T, d, stop_after, stop, err));
    return LQ_OK;
}

static lq_status moe_core(const lq_model_config *c, const lq_layer *L, const float *xn, int64_t T,
                          float *out, lq_fwd_ws *ws, lq_capture_fn cap, void *user, int stop_after,
                          int *stop, lq_err *err);

/* g[T, ff] = act(gate) * up, gate and up rows of ld values (the fused gate_up_proj output
 * holds both in one row; g may be gate itself) */
static lq_status glu(const lq_model_config *c, lq_fwd_ws *ws, float *g, const float *gate,
                     const float *up, int64_t ld, int64_t T, int64_t ff, lq_err *err) {
    const int act = c->act == LQ_ACT_GELU_TANH ? LQ_ACT_GELU_TANH_GLU : LQ_ACT_SILU_GLU;
    OP(ws, "gated activation", ws->be->ops->glu(ws->be, g, gate, up, ld, T, ff, act));
    return LQ_OK;
}

/* Gated MLP (SwiGLU, or GeGLU for Gemma): xn [T, d] -> out [T, d] (down_proj output). Captures
 * gate, up (or gate_up), down inputs. */
static lq_status mlp_core(const lq_model_config *c, const lq_layer *L, const float *xn, int64_t T,
                          float *out, lq_fwd_ws *ws, lq_capture_fn cap, void *user, int stop_after,
                          int *stop, const lq_fwd_resume *sv, int64_t row0, lq_err *err) {
    if (c->num_experts)
        return moe_core(c, L, xn, T, out, ws, cap, user, stop_after, stop, err);
    const int64_t d = ws->d, ff = ws->ff;
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
    LQ_TRY(glu(c, ws, g, gate, up, ld, T, ff, err));
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
    return glu(c, ws, ws->g, ws->g, ws->u, ff, t, ff, err);
}

/* The rows routed to expert e into ws->moe_x; their count. */
static lq_status gather_rows(lq_fwd_ws *ws, int64_t e, const float *xn, int64_t *cnt,
                             lq_err *err) {
    const int64_t lo = ws->moe_off[e];
    *cnt             = ws->moe_off[e + 1] - lo;
    OP(ws, "gathering an expert's rows",
       ws->be->ops->gather_rows(ws->be, ws->moe_x, xn, ws->moe_rows + lo, *cnt, ws->d, ws->moe_k));
    return LQ_OK;
}

/* Mixture of experts, as transformers' sparse MoE blocks: router logits, softmax in float32,
 * the top experts_per_tok (ties to the lower index, as torch.topk), their probabilities
 * (renormalized when norm_topk); each expert runs on the rows routed to it and adds its output
 * times the row's weight, experts in index order; then the shared expert times the sigmoid of
 * its gate (Qwen2-MoE). xn [T, d] -> out [T, d]. Captures (lq_capture_fn): the block input,
 * every expert's gate/up input, then every expert's down input, by the experts' modes. The
 * choices come to the host, which groups the rows by expert; the rows stay on the backend. */
static lq_status moe_core(const lq_model_config *c, const lq_layer *L, const float *xn, int64_t T,
                          float *out, lq_fwd_ws *ws, lq_capture_fn cap, void *user, int stop_after,
                          int *stop, lq_err *err) {
    const int64_t d = ws->d, E = c->num_experts, K = c->experts_per_tok;
    const lq_ops *ops = ws->be->ops;
    int32_t      *sel = ws->moe_sel_h;
    LQ_TRY(lin("mlp.gate", &L->router, xn, T, ws->moe_logit, ws, err));
    OP(ws, "routing",
       ops->moe_route(ws->be, ws->moe_logit, T, E, K, c->norm_topk, ws->moe_sel, ws->moe_w));
    OP(ws, "routing", ops->download(ws->be, sel, ws->moe_sel, (size_t)(T * K) * sizeof *sel));
    /* (token, choice) pairs grouped by expert, tokens in order within each */
    memset(ws->moe_off, 0, (size_t)(E + 1) * sizeof *ws->moe_off);
    for (int64_t i = 0; i < T * K; i++)
        ws->moe_off[sel[i] + 1]++;
    for (int64_t e = 0; e < E; e++)
        ws->moe_off[e + 1] += ws->moe_off[e];
    for (int64_t i = 0; i < T * K; i++)
        ws->moe_rows_h[ws->moe_off[sel[i]]++] = (int32_t)i;
    for (int64_t e = E; e > 0; e--) /* the fill advanced each start to the next one's */
        ws->moe_off[e] = ws->moe_off[e - 1];
    ws->moe_off[0] = 0;
    OP(ws, "routing",
       ops->upload(ws->be, ws->moe_rows, ws->moe_rows_h, (size_t)(T * K) * sizeof(int32_t)));
    if (L->idx >= 0 && L->idx < ws->moe_layers)
        for (int64_t e = 0; e < E; e++)
            ws->moe_count[L->idx * E + e] += ws->moe_off[e + 1] - ws->moe_off[e];

    const uint8_t *mode  = cap ? ws->moe_mode : NULL;
    const int      up_to = stop_after; /* the captures end with this role's (-1: none) */
    int            dummy = 0;
    int64_t        cnt;
    if (cap) {
        LQ_TRY(capture(cap, user, LQ_SLOT_MOE_IN, xn, T, d, -1, &dummy, err));
        for (int64_t e = 0; e < E; e++) {
            if (mode && mode[e] != LQ_MOE_ROUTED)
                continue;
            LQ_TRY(gather_rows(ws, e, xn, &cnt, err));
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
        OP(ws, "clearing the expert sum", ops->zero(ws->be, out, (size_t)(T * d) * sizeof(float)));
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
        LQ_TRY(gather_rows(ws, e, xn, &cnt, err));
        if (!cnt)
            continue;
        LQ_TRY(expert_in(c, x3, ws->moe_x, cnt, ws, err));
        if (cap && m == LQ_MOE_ROUTED)
            LQ_TRY(capture(cap, user, lq_slot_of(LQ_LIN_DOWN, e), ws->g, cnt, x3[2].buf.q.k, -1,
                           &dummy, err));
        if (!outputs)
            continue;
        LQ_TRY(lin("mlp.experts.down", &x3[2], ws->g, cnt, ws->moe_y, ws, err));
        OP(ws, "adding an expert's output",
           ops->scatter_add(ws->be, out, ws->moe_y, ws->moe_rows + ws->moe_off[e], ws->moe_w, cnt,
                            d, K));
    }
    if (c->shared_intermediate) {
        LQ_TRY(expert_in(c, L->shared, xn, T, ws, err));
        LQ_TRY(capture(cap, user, lq_slot_of(LQ_LIN_DOWN, E), ws->g, T, c->shared_intermediate, -1,
                       &dummy, err));
        if (outputs) {
            LQ_TRY(lin("mlp.shared_expert.down_proj", &L->shared[2], ws->g, T, ws->moe_y, ws, err));
            LQ_TRY(lin("mlp.shared_expert_gate", &L->shared[3], xn, T, ws->moe_logit, ws, err));
            OP(ws, "the shared expert's gate",
               ops->gate_add(ws->be, out, ws->moe_y, ws->moe_logit, T, d));
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
    const lq_ops          *ops  = ws->be->ops;
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
            OP(ws, "resuming", ops->copy(ws->be, r, rs->resid + row0 * d, (size_t)(T * d) * 4));
            LQ_TRY(capture(cap, user, LQ_LIN_DOWN, g, T, ws->ff, stop_after, &stop, err));
            if (stop)
                continue;
            LQ_TRY(lin("mlp.down_proj", &L->lin[LQ_LIN_DOWN], g, T, o, ws, err));
            goto mlp_out;
        }
        if (from == LQ_STAGE_RESID) {
            OP(ws, "resuming", ops->copy(ws->be, r, rs->state + row0 * d, (size_t)(T * d) * 4));
        } else {
            if (from == LQ_STAGE_INPUT) {
                LQ_TRY(rmsnorm(ws, c, hc, L->attn_norm, T, d, ws->xn, err));
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
                LQ_TRY(rmsnorm(ws, c, o, L->attn_post_norm, T, d, o, err));
            OP(ws, "residual", ops->add(ws->be, r, hc, o, T * d));
        }
        if (save == LQ_STAGE_RESID)
            LQ_TRY(rs->save_fn(rs->save_user, save, r, row0, T, d));
        LQ_TRY(rmsnorm(ws, c, r, L->mlp_norm, T, d, ws->xn, err));
        LQ_TRY(mlp_core(c, L, ws->xn, T, o, ws, cap, user, stop_after, &stop, sv, row0, err));
        if (stop)
            continue;
    mlp_out:
        if (c->post_norms)
            LQ_TRY(rmsnorm(ws, c, o, L->mlp_post_norm, T, d, o, err));
        OP(ws, "residual", ops->add(ws->be, hc, r, o, T * d));
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

lq_status lq_model_logits_be(const lq_model *m, const float *final_norm, const lq_linear *lm_head,
                             const float *h, int64_t t, float *logits, lq_fwd_ws *ws, lq_err *err) {
    LQ_RETURN_IF(!ws || ws->d != m->cfg.hidden_size, err, LQ_ERR_INVALID_ARG,
                 "logits: workspace missing or made for another model shape");
    const int64_t d = m->cfg.hidden_size, V = m->cfg.vocab_size, per = ws->max_tokens;
    const float   cap = (float)m->cfg.final_softcap;
    for (int64_t t0 = 0; t0 < t; t0 += per) {
        const int64_t T = t - t0 < per ? t - t0 : per;
        LQ_TRY(rmsnorm(ws, &m->cfg, h + t0 * d, final_norm, T, d, ws->xn, err));
        LQ_TRY(lin("lm_head", lm_head, ws->xn, T, logits + t0 * V, ws, err));
        if (cap > 0) /* Gemma 2: cap * tanh(logit / cap) */
            OP(ws, "soft-capping", ws->be->ops->softcap(ws->be, logits + t0 * V, T * V, cap));
    }
    return LQ_OK;
}

lq_status lq_model_logits(const lq_model *m, const float *h, int64_t t, float *logits,
                          lq_fwd_ws *ws, lq_err *err) {
    return lq_model_logits_be(m, m->final_norm, &m->lm_head, h, t, logits, ws, err);
}
