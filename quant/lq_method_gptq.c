/* GPTQ method: per layer, "true sequential" sub-groups q/k/v -> o -> gate/up -> down (a fused
 * family's qkv and gate_up are one linear each, with one Hessian, as GPTQModel does); each
 * sub-group's Hessians come from a forward of the layer in which the earlier sub-groups are
 * already quantized (gptq llama.py), then the linears are quantized with lq_gptq.
 *
 * v_proj (option v_attn_weights, on by default): its output reaches the model only through the
 * attention, so its Hessian weights each token by the squared attention probabilities it
 * receives, sum over heads and queries (lq_fwd_ws_want_attn_weights). The reference Hessian
 * (every token alike) lets GPTQ trade error on rare input directions for error elsewhere; the
 * first token of a window -- the attention sink every query reads -- is such a direction. On
 * SmolLM2-135M (v_proj alone quantized, w4 g128, WikiText-2): fp16 24.15, RTN 25.40, reference
 * GPTQ 34.12, weighted 24.26 (8 x 2048 calibration tokens, 4 test windows). */
#include "lq_gpu.h"
#include "lq_methods.h"
#include "lq_params_get.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void      lq_gptq_fill_qconfig(const lq_params *p, lq_qconfig *c);
lq_status lq_gptq_pack_linear(lq_qjob *j, lq_lin_id l, const lq_qspec *s, const uint8_t *q,
                              const int32_t *zeros, const float *scales, const int32_t *g_idx);

typedef struct cap_ctx {
    lq_xstats        st[LQ_LIN_COUNT];
    lq_gpu_hess     *gh[LQ_LIN_COUNT]; /* device accumulators when on a GPU */
    unsigned         mask;
    int64_t          seqlen;
    int              wv; /* v_proj: attention-weighted Hessian of its own */
    const lq_fwd_ws *ws;
    float           *scaled; /* [LQ_WV_ROWS, k] rows of x times sqrt(weight) */
    lq_err          *err;
} cap_ctx;

#define LQ_WV_ROWS 256

/* q/k/v share one input and gate/up another: accumulate once, copy after (v has its own
 * Hessian when it is attention-weighted). */
static int source_of(int l, int wv) {
    return l == LQ_LIN_K || (l == LQ_LIN_V && !wv) ? LQ_LIN_Q : l == LQ_LIN_UP ? LQ_LIN_GATE : l;
}

static lq_status add_rows(cap_ctx *c, lq_lin_id id, const float *x, int64_t t, int64_t nseq) {
    if (c->gh[id])
        return lq_gpu_hess_add(c->gh[id], x, t, nseq, c->err);
    if (c->st[id].H)
        lq_xstats_add(&c->st[id], x, t, nseq);
    return LQ_OK;
}

static lq_status on_capture(void *user, lq_lin_id id, const float *x, int64_t t, int64_t k) {
    cap_ctx *c = user;
    if (source_of(id, c->wv) != (int)id)
        return LQ_OK;
    const float *a = id == LQ_LIN_V && c->wv ? lq_fwd_ws_attn_weights(c->ws) : NULL;
    if (!a)
        return add_rows(c, id, x, t, t / c->seqlen);
    /* sum_t a_t x_t x_t^T as the Hessian of rows scaled by sqrt(a_t), in blocks; the chunk's
     * sequences are counted with its first block (the running average weighs sequences alike) */
    for (int64_t r0 = 0; r0 < t; r0 += LQ_WV_ROWS) {
        const int64_t nr = t - r0 < LQ_WV_ROWS ? t - r0 : LQ_WV_ROWS;
        for (int64_t r = 0; r < nr; r++) {
            const float sa = sqrtf(a[r0 + r]);
            for (int64_t i = 0; i < k; i++)
                c->scaled[r * k + i] = x[(r0 + r) * k + i] * sa;
        }
        LQ_TRY(add_rows(c, id, c->scaled, nr, r0 == 0 ? t / c->seqlen : 0));
    }
    return LQ_OK;
}

static void warn_cb(void *user, const char *msg) {
    lq_qjob *j = user;
    lq_qjob_warn(j, "%s", msg);
}

static lq_status gptq_layer(lq_qjob *j) {
    static const unsigned seq_groups[4] = {
        1u << LQ_LIN_Q | 1u << LQ_LIN_K | 1u << LQ_LIN_V | 1u << LQ_LIN_QKV, 1u << LQ_LIN_O,
        1u << LQ_LIN_GATE | 1u << LQ_LIN_UP | 1u << LQ_LIN_GATE_UP, 1u << LQ_LIN_DOWN};
    const unsigned all     = (1u << LQ_LIN_COUNT) - 1;
    int            true_sq = lq_params_bool(j->p, "true_sequential");
    lq_gptq_opts   o       = {0};
    const int      bits    = (int)lq_params_i64(j->p, "bits");
    o.q.bits               = bits;
    o.q.group_size         = lq_params_i64(j->p, "group_size");
    o.q.sym                = lq_params_bool(j->p, "sym");
    o.q.v1_safe            = 1;
    o.q.mse                = lq_params_bool(j->p, "mse_weighted") ? LQ_MSE_WEIGHTED
                             : lq_params_bool(j->p, "mse")        ? LQ_MSE_NORM24
                                                                  : LQ_MSE_OFF;
    o.act_order            = lq_params_bool(j->p, "desc_act");
    o.static_groups        = lq_params_bool(j->p, "static_groups");
    o.damp                 = lq_params_f64(j->p, "damp");
    o.damp_retries         = (int)lq_params_i64(j->p, "damp_retries");
    o.block_size           = lq_params_i64(j->p, "block_size");
    o.warn                 = warn_cb;
    o.warn_user            = j;
    const int wv           = lq_params_bool(j->p, "v_attn_weights");
    /* Each pass's forward starts where the one before stopped (same bytes as re-running the
     * layer from its input): pass 1 (o) saves the attention output, computed with the quantized
     * q/k/v; pass 2 (gate/up) starts there and saves the residual; pass 3 (down) and the
     * driver's propagation start from that. */
    const int cache     = true_sq && lq_params_bool(j->p, "stage_cache");
    lq_spill *stages[4] = {NULL, NULL, NULL, NULL}; /* [sg]: the state pass sg saved */
    lq_status fail      = LQ_OK;
    if (lq_params_bool(j->p, "awq_scales")) { /* the passes below see the scaled layer */
        const int64_t seqs = lq_params_i64(j->p, "awq_tokens") / j->seqlen;
        LQ_TRY(lq_awq_smooth_layer(j, o.q.group_size, seqs > 0 ? seqs : 1, NULL));
    }
    for (int sg = 0; sg < (true_sq ? 4 : 1) && fail == LQ_OK; sg++) {
        unsigned mask = true_sq ? seq_groups[sg] : all;
        cap_ctx  c;
        memset(&c, 0, sizeof c);
        c.seqlen    = j->seqlen;
        c.err       = j->err;
        c.ws        = j->ws;
        c.wv        = wv && (mask >> LQ_LIN_V & 1) && j->plan[LQ_LIN_V];
        lq_status s = LQ_OK;
        if (c.wv &&
            !(c.scaled = lq_malloc_n(LQ_WV_ROWS * j->L->lin[LQ_LIN_V].buf.q.k, sizeof(float))))
            s = lq_fail(j->err, LQ_ERR_NOMEM, "gptq: out of memory");
        for (int l = 0; l < LQ_LIN_COUNT && s == LQ_OK; l++)
            if ((mask >> l & 1) && source_of(l, c.wv) == l &&
                lq_lin_present(&j->model->cfg, (lq_lin_id)l)) {
                s = lq_xstats_init(&c.st[l], j->L->lin[l].buf.q.k, LQ_XS_HESSIAN, j->err);
                if (s == LQ_OK && j->gpu)
                    s = lq_gpu_hess_create(j->gpu, j->L->lin[l].buf.q.k, &c.gh[l], j->err);
            }
        const lq_fwd_stage from = !cache || sg < 2 ? LQ_STAGE_INPUT
                                  : sg == 2        ? LQ_STAGE_ATTN
                                                   : LQ_STAGE_RESID;
        const lq_fwd_stage save = !cache || sg < 1 || sg > 2 ? LQ_STAGE_INPUT
                                  : sg == 1                  ? LQ_STAGE_ATTN
                                                             : LQ_STAGE_RESID;
        if (s == LQ_OK && save != LQ_STAGE_INPUT)
            s = lq_qjob_stage_spill(j, &stages[sg]);
        if (s == LQ_OK) {
            lq_fwd_ws_want_attn_weights(j->ws, c.wv);
            s = lq_qjob_capture_staged(j, mask, on_capture, &c, from,
                                       from == LQ_STAGE_ATTN    ? stages[1]
                                       : from == LQ_STAGE_RESID ? stages[2]
                                                                : NULL,
                                       save, stages[sg]);
            lq_fwd_ws_want_attn_weights(j->ws, 0);
        }
        free(c.scaled);
        for (int l = 0; l < LQ_LIN_COUNT; l++) {
            if (s == LQ_OK && c.gh[l])
                s = lq_gpu_hess_get(c.gh[l], &c.st[l], j->err);
            lq_gpu_hess_free(c.gh[l]);
            c.gh[l] = NULL;
        }
        lq_gptq_backend be, *bep = NULL;
        if (j->gpu && !o.q.mse) { /* the device sweep knows min/max group ranges only */
            lq_gpu_gptq_backend(j->gpu, &be);
            bep = &be;
        }
        for (int l = 0; l < LQ_LIN_COUNT && s == LQ_OK; l++) {
            if (!(mask >> l & 1) || !j->plan[l])
                continue;
            lq_xstats  *src = &c.st[source_of(l, c.wv)];
            lq_qlinear *w   = &j->L->lin[l].buf.q;
            int64_t     n = w->n, k = w->k, G = lq_num_groups(k, o.q.group_size);
            char        name[160];
            lq_qjob_module(j, (lq_lin_id)l, name, sizeof name);
            o.name      = name;
            o.q.bits    = j->bits[l] > 0 ? j->bits[l] : bits;
            float   *H  = lq_aligned_alloc((size_t)(k * k) * sizeof(float));
            uint8_t *q  = malloc((size_t)(n * k));
            float   *sc = malloc((size_t)(G * n) * sizeof(float));
            int32_t *z  = malloc((size_t)(G * n) * sizeof(int32_t));
            int32_t *gi = malloc((size_t)k * sizeof(int32_t));
            if (!H || !q || !sc || !z || !gi) {
                s = lq_fail(j->err, LQ_ERR_NOMEM, "%s: out of memory", name);
            } else {
                lq_xstats_finish(src);
                memcpy(H, src->H, (size_t)(k * k) * sizeof(float));
                lq_gptq_result r;
                s = lq_gptq_ex((float *)(uintptr_t)w->dense, H, n, k, &o, bep, q, sc, z, gi, &r,
                               j->err);
                if (s == LQ_OK) {
                    j->loss[l] = r.loss;
                    s          = lq_gptq_pack_linear(j, (lq_lin_id)l, &o.q, q, z, sc, gi);
                }
            }
            lq_aligned_free(H);
            free(q), free(sc), free(z), free(gi);
        }
        for (int l = 0; l < LQ_LIN_COUNT; l++)
            lq_xstats_free(&c.st[l]);
        if (sg == 2) { /* the attention output has served */
            lq_spill_free(stages[1]);
            stages[1] = NULL;
        }
        fail = s;
    }
    if (fail == LQ_OK && cache) { /* the quantized layer's residual, for the propagation */
        j->resume = stages[2];
        stages[2] = NULL;
    }
    for (int i = 0; i < 4; i++)
        lq_spill_free(stages[i]);
    return fail;
}

static int64_t gptq_work(const lq_model_config *c, int64_t tokens) {
    int64_t d = c->hidden_size, I = c->intermediate_size, k = d > I ? d : I;
    (void)tokens; /* Hessians, their copy, the permuted inverse, Wt and codes of the widest */
    return 4 * (3 * k * k + 2 * d * I) + d * I;
}

const lq_method_traits lq_method_gptq = {
    .name                = "gptq",
    .help                = "GPTQ: Hessian-based error compensation from calibration data (GPTQ v1 "
                           "checkpoint for AutoGPTQ/transformers/vLLM)",
    .format              = LQ_FMT_GPTQ,
    .needs_calib         = 1,
    .propagate_quantized = 1,
    .gpu                 = 1,
    .stage_copies        = 1, /* two of: attention output, residual, next layer's input */
    .default_seqlen      = 2048,
    .fill_qconfig        = lq_gptq_fill_qconfig,
    .quantize_layer      = gptq_layer,
    .work_bytes          = gptq_work,
};
