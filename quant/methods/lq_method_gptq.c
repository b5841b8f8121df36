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
#include "lq_opts.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cap_ctx {
    lq_xstats       *st; /* per slot: the Hessians of the slots that are some linear's input */
    float          **H;  /* per slot: where they accumulate, on the job's backend (st[].H itself
                            on a host backend, read back into it after the pass elsewhere) */
    lq_be           *be;
    int64_t          seqlen;
    int              wv; /* v_proj: attention-weighted Hessian of its own */
    const lq_fwd_ws *ws;
    float           *scaled; /* [LQ_WV_ROWS, k] rows of x times sqrt(weight), on be */
    lq_err          *err;
} cap_ctx;

#define LQ_WV_ROWS 256

/* q/k/v share one input and gate/up another (an expert's too; experts on all tokens and the
 * shared expert read the block input): accumulate once, copy after (v has its own Hessian when
 * it is attention-weighted). */
static int64_t source_of(const lq_qjob *j, int64_t l, int wv) {
    return l == LQ_LIN_V && wv ? l : lq_slot_input(&j->model->cfg, l, j->moe_mode);
}

/* gptq.py add_batch: H *= n / (n + tmp); n += tmp; H += (2 / n) x^T x, tmp = sequences */
static lq_status add_rows(cap_ctx *c, int64_t id, const float *x, int64_t t, int64_t nseq) {
    lq_xstats    *s     = &c->st[id];
    const int64_t nn    = s->nsamples + nseq;
    const float   beta  = (float)((double)s->nsamples / (double)nn);
    const float   alpha = (float)(2.0 / (double)nn);
    const lq_status st  = c->be->ops->syrk(c->be, c->H[id], x, t, s->k, alpha, beta);
    if (st != LQ_OK)
        return lq_fail(c->err, st, "gptq: Hessian on the %s backend: %s", c->be->ops->name,
                       lq_be_error(c->be));
    s->nsamples = nn;
    s->ntokens += t;
    return LQ_OK;
}

static lq_status on_capture(void *user, int64_t id, const float *x, int64_t t, int64_t k) {
    cap_ctx *c = user;
    if (!c->H[id]) /* not some linear's input in this pass */
        return LQ_OK;
    const float *a = id == LQ_LIN_V && c->wv ? lq_fwd_ws_attn_weights(c->ws) : NULL;
    if (!a) /* an expert's rows are whatever the router sent it: counted as rows */
        return add_rows(c, id, x, t, lq_slot_expert(id) >= 0 ? t : t / c->seqlen);
    /* sum_t a_t x_t x_t^T as the Hessian of rows scaled by sqrt(a_t), in blocks; the chunk's
     * sequences are counted with its first block (the running average weighs sequences alike) */
    for (int64_t r0 = 0; r0 < t; r0 += LQ_WV_ROWS) {
        const int64_t   nr = t - r0 < LQ_WV_ROWS ? t - r0 : LQ_WV_ROWS;
        const lq_status st = c->be->ops->scale_rows(c->be, c->scaled, x + r0 * k, a + r0, nr, k);
        if (st != LQ_OK)
            return lq_fail(c->err, st, "gptq: weighting rows: %s", lq_be_error(c->be));
        LQ_TRY(add_rows(c, id, c->scaled, nr, r0 == 0 ? t / c->seqlen : 0));
    }
    return LQ_OK;
}

/* Hessian memory on the backend: the host statistics' own array on a host backend. */
static void stats_release(cap_ctx *c, int64_t id) {
    if (c->H[id] && c->H[id] != c->st[id].H)
        c->be->ops->release(c->be, c->H[id], (size_t)(c->st[id].k * c->st[id].k) * sizeof(float));
    c->H[id] = NULL;
}

/* Statistics for slot src's input, once (k its width), accumulating on the job's backend. */
static lq_status stats_init(lq_qjob *j, cap_ctx *c, int64_t src, int64_t k) {
    if (c->st[src].H)
        return LQ_OK;
    LQ_TRY(lq_xstats_init(&c->st[src], k, LQ_XS_HESSIAN, j->err));
    if (!c->be->ops->device) {
        c->H[src] = c->st[src].H;
        return LQ_OK;
    }
    void        *p = NULL;
    const size_t b = (size_t)(k * k) * sizeof(float);
    lq_status    st = c->be->ops->alloc(c->be, &p, b);
    if (st == LQ_OK) {
        c->H[src] = p;
        st        = c->be->ops->zero(c->be, p, b);
    }
    if (st != LQ_OK)
        return lq_fail(j->err, st, "gptq: a %lld x %lld Hessian on the %s backend: %s",
                       (long long)k, (long long)k, c->be->ops->name, lq_be_error(c->be));
    return LQ_OK;
}

/* The accumulated Hessian of slot id into its host statistics (a device's: read back). */
static lq_status stats_fetch(cap_ctx *c, int64_t id) {
    if (!c->H[id] || c->H[id] == c->st[id].H)
        return LQ_OK;
    const int64_t   k  = c->st[id].k;
    const lq_status st = c->be->ops->download(c->be, c->st[id].H, c->H[id],
                                              (size_t)(k * k) * sizeof(float));
    return st == LQ_OK ? LQ_OK
                       : lq_fail(c->err, st, "gptq: reading a Hessian back: %s",
                                 lq_be_error(c->be));
}

/* After the pass that routed this layer's calibration tokens: experts that got too few of them
 * read the block input's Hessian for gate/up from now on, and their down Hessians, where this
 * pass accumulated routed rows (experts e0 <= e < e1), are taken again over every token. */
static lq_status moe_fallback(lq_qjob *j, cap_ctx *c, unsigned mask, int64_t e0, int64_t e1) {
    const int64_t E       = j->model->cfg.num_experts;
    uint8_t      *changed = malloc((size_t)E);
    lq_status     st      = changed ? LQ_OK : lq_fail(j->err, LQ_ERR_NOMEM, "gptq: out of memory");
    if (st == LQ_OK && lq_qjob_moe_fallback(j, changed) > 0 && (mask >> LQ_LIN_DOWN & 1)) {
        for (int64_t e = 0; e < E; e++) /* later batches take them in mode ALL anyway */
            changed[e] = changed[e] && e >= e0 && e < e1;
        for (int64_t e = 0; e < E && st == LQ_OK; e++) {
            const int64_t dn = lq_slot_of(LQ_LIN_DOWN, e), k = c->st[dn].k;
            if (!changed[e] || !c->st[dn].H)
                continue;
            stats_release(c, dn);
            lq_xstats_free(&c->st[dn]);
            st = stats_init(j, c, dn, k);
        }
        if (st == LQ_OK)
            st = lq_qjob_moe_recapture_down(j, changed, on_capture, c);
    }
    free(changed);
    return st;
}

static void warn_cb(void *user, const char *msg) {
    lq_qjob *j = user;
    lq_qjob_warn(j, "%s", msg);
}

/* One capture pass and the GPTQ of what it gathered: the linears of the roles in mask, of the
 * layer's own (first batch only) and of experts e0 <= e < e1 (e = num_experts: the shared
 * one); the experts outside the batch are skipped by the forward. */
typedef struct gptq_pass {
    unsigned     mask;
    int64_t      e0, e1;
    int          first, wv, bits;
    lq_fwd_stage from, save;
    lq_acts     *from_spill, *save_spill;
} gptq_pass;

static int in_batch(const gptq_pass *ps, int64_t l) {
    const int64_t e = lq_slot_expert(l);
    return e < 0 ? ps->first : e >= ps->e0 && e < ps->e1;
}

/* --format gguf: GPTQ on the GGUF type's own grid (blocks to the driver). */
static lq_status gguf_linear(lq_qjob *j, int64_t l, const lq_gptq_opts *o, lq_xstats *src,
                            const char *name) {
    lq_qlinear    *w = &lq_qjob_linear(j, l)->buf.q;
    const lq_dtype t = (lq_dtype)j->ggml[l];
    int            bb;
    const int64_t  be = lq_dtype_block(t, &bb), n = w->n, k = w->k;
    float         *H  = lq_aligned_alloc((size_t)(k * k) * sizeof(float));
    uint8_t       *b  = lq_malloc_n(n * (k / be), (size_t)bb);
    lq_status      s  = LQ_OK;
    if (!H || !b) {
        s = lq_fail(j->err, LQ_ERR_NOMEM, "%s: out of memory", name);
    } else {
        lq_gptq_result r;
        lq_xstats_finish(src);
        memcpy(H, src->H, (size_t)(k * k) * sizeof(float));
        s = lq_gptq_ggml((float *)(uintptr_t)w->dense, H, n, k, o, t, b, &r, j->err);
        lq_qjob_changed(j, l); /* its weights are the blocks' values now */
        if (s == LQ_OK) {
            j->loss[l]        = r.loss;
            j->quantized[l]   = 1;
            j->ggml_blocks[l] = b;
            b                 = NULL;
        }
    }
    lq_aligned_free(H);
    free(b);
    return s;
}

static lq_status run_pass(lq_qjob *j, lq_gptq_opts *o, const gptq_pass *ps) {
    const lq_model_config *cf   = &j->model->cfg;
    const int64_t          E    = cf->num_experts;
    const unsigned         mask = ps->mask;
    cap_ctx                c;
    memset(&c, 0, sizeof c);
    c.seqlen       = j->seqlen;
    c.err          = j->err;
    c.ws           = j->ws;
    c.be           = j->be;
    c.wv           = ps->wv && ps->first && (mask >> LQ_LIN_V & 1) && j->plan[LQ_LIN_V];
    lq_status s    = LQ_OK;
    uint8_t  *keep = NULL; /* the experts' modes, while those outside the batch are skipped */
    c.st           = lq_calloc_n(j->nslots, sizeof *c.st);
    c.H            = lq_calloc_n(j->nslots, sizeof *c.H);
    const size_t scaled_bytes =
        c.wv ? (size_t)(LQ_WV_ROWS * j->L->lin[LQ_LIN_V].buf.q.k) * sizeof(float) : 0;
    if (!c.st || !c.H || (E && !(keep = malloc((size_t)E))) ||
        (c.wv && c.be->ops->alloc(c.be, (void **)&c.scaled, scaled_bytes) != LQ_OK))
        s = lq_fail(j->err, LQ_ERR_NOMEM, "gptq: out of memory");
    for (int64_t l = 0; l < j->nslots && s == LQ_OK; l++)
        if ((mask >> lq_slot_role(l) & 1) && lq_slot_present(cf, l) && in_batch(ps, l))
            s = stats_init(j, &c, source_of(j, l, c.wv), lq_qjob_linear(j, l)->buf.q.k);
    if (s == LQ_OK && E && (mask >> LQ_LIN_GATE & 1)) /* for experts on every token */
        s = stats_init(j, &c, LQ_SLOT_MOE_IN, cf->hidden_size);
    if (s == LQ_OK) {
        for (int64_t e = 0; e < E; e++) {
            keep[e] = j->moe_mode[e];
            if (e < ps->e0 || e >= ps->e1)
                j->moe_mode[e] = LQ_MOE_SKIP;
        }
        lq_fwd_ws_want_attn_weights(j->ws, c.wv);
        s = lq_qjob_capture_staged(j, mask, on_capture, &c, ps->from, ps->from_spill, ps->save,
                                   ps->save_spill);
        lq_fwd_ws_want_attn_weights(j->ws, 0);
        if (E)
            memcpy(j->moe_mode, keep, (size_t)E);
    }
    if (s == LQ_OK && E && ps->first && (mask >> LQ_LIN_GATE & 1))
        s = moe_fallback(j, &c, mask, ps->e0, ps->e1);
    if (c.scaled)
        c.be->ops->release(c.be, c.scaled, scaled_bytes);
    free(keep);
    for (int64_t l = 0; c.H && l < j->nslots; l++) {
        if (s == LQ_OK)
            s = stats_fetch(&c, l);
        stats_release(&c, l);
    }
    lq_gptq_backend be, *bep = NULL;
    if (j->gpu && !o->q.mse) { /* the device sweep knows min/max group ranges only */
        lq_gpu_gptq_backend(j->gpu, &be);
        bep = &be;
    }
    /* linears that read one input (q/k/v, gate/up) share its factor: it is factored once */
    lq_gptq_factor shared;
    memset(&shared, 0, sizeof shared);
    int64_t *users = s == LQ_OK ? lq_calloc_n(j->nslots, sizeof *users) : NULL;
    if (s == LQ_OK && !users)
        s = lq_fail(j->err, LQ_ERR_NOMEM, "gptq: out of memory");
    for (int64_t l = 0; l < j->nslots && s == LQ_OK; l++)
        if ((mask >> lq_slot_role(l) & 1) && lq_qjob_planned(j, l) && in_batch(ps, l))
            users[source_of(j, l, c.wv)]++;
    for (int64_t l = 0; l < j->nslots && s == LQ_OK; l++) {
        if (!(mask >> lq_slot_role(l) & 1) || !lq_qjob_planned(j, l) || !in_batch(ps, l))
            continue;
        if (j->ggml && j->ggml[l] <= 0)
            continue; /* a float tensor of the GGUF file */
        lq_xstats  *src = &c.st[source_of(j, l, c.wv)];
        lq_qlinear *w   = &lq_qjob_linear(j, l)->buf.q;
        o->q.bits       = l < LQ_LIN_COUNT && j->bits[l] > 0 ? j->bits[l] : ps->bits;
        o->q.group_size = l < LQ_LIN_COUNT && j->group[l] != 0 ? j->group[l] : j->o->group_size;
        int64_t n = w->n, k = w->k, G = lq_num_groups(k, o->q.group_size);
        char    name[160];
        lq_qjob_module(j, l, name, sizeof name);
        o->name       = name;
        o->shared_key = source_of(j, l, c.wv);
        o->shared     = users[o->shared_key] > 1 ? &shared : NULL;
        if (j->ggml) {
            s = gguf_linear(j, l, o, src, name);
            continue;
        }
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
            s = lq_gptq_ex((float *)(uintptr_t)w->dense, H, n, k, o, bep, q, sc, z, gi, &r, j->err);
            lq_qjob_changed(j, l); /* its weights are the fake-quantized ones now */
            if (s == LQ_OK) {
                j->loss[l] = r.loss;
                s          = lq_gptq_pack_linear(j, l, &o->q, q, z, sc, gi);
            }
        }
        lq_aligned_free(H);
        free(q), free(sc), free(z), free(gi);
    }
    o->shared = NULL;
    lq_gptq_factor_free(&shared);
    free(users);
    for (int64_t l = 0; c.st && l < j->nslots; l++)
        lq_xstats_free(&c.st[l]);
    free(c.st);
    free(c.H);
    return s;
}

/* Experts whose Hessians one pass gathers: --moe-batch, else as many as the layer's float32
 * weights take in bytes (the memory of one layer bounds the statistics too; later batches
 * re-run from the pass's stage, skipping the other experts). */
static int64_t expert_batch(const lq_qjob *j, unsigned mask) {
    const lq_model_config *cf = &j->model->cfg;
    const int64_t          E = cf->num_experts, set = j->o->moe_batch;
    const int64_t          layer      = lq_layer_float_bytes(cf);
    int64_t                per_expert = 0;
    if (!E)
        return 1;
    if (set > 0)
        return set;
    for (int64_t l = 0; l < j->nslots; l++) { /* expert 0's Hessians (up shares gate's) */
        int64_t n, k;
        if (lq_slot_expert(l) != 0 || lq_slot_role(l) == LQ_LIN_UP ||
            !(mask >> lq_slot_role(l) & 1))
            continue;
        lq_slot_shape(cf, l, &n, &k);
        per_expert += 4 * k * k;
    }
    const int64_t n = per_expert > 0 ? layer / per_expert : E + 1;
    return n < 1 ? 1 : n > E + 1 ? E + 1 : n;
}

/* Pass 3 (down) also keeps the MLP activation for the propagation, which then runs down_proj
 * alone instead of gate/up again: half the float32 forward's linear work on SmolLM2 (gate/up
 * 1740 of 3479 GFLOP over 8 x 2048 tokens). Its price is an activation copy of intermediate
 * width, so only without --max-memory (whose plan counts activation copies of hidden width),
 * for a dense MLP, and where it takes at most a quarter of the machine's memory. */
static int keep_act(const lq_qjob *j) {
    const lq_model_config *c = &j->model->cfg;
    if (c->num_experts || j->stage_budget >= 0)
        return 0;
    const int64_t bytes = 4 * j->nseq * j->seqlen * c->intermediate_size;
    return bytes <= lq_phys_mem_bytes() / 4;
}

static lq_status gptq_layer(lq_qjob *j) {
    static const unsigned seq_groups[4] = {
        1u << LQ_LIN_Q | 1u << LQ_LIN_K | 1u << LQ_LIN_V | 1u << LQ_LIN_QKV, 1u << LQ_LIN_O,
        1u << LQ_LIN_GATE | 1u << LQ_LIN_UP | 1u << LQ_LIN_GATE_UP, 1u << LQ_LIN_DOWN};
    const unsigned all      = (1u << LQ_LIN_COUNT) - 1;
    const unsigned expertsm = 1u << LQ_LIN_GATE | 1u << LQ_LIN_UP | 1u << LQ_LIN_DOWN;
    const int64_t  E        = j->model->cfg.num_experts;
    int            true_sq  = j->o->true_sequential;
    lq_gptq_opts   o        = {0};
    o.q.bits                = (int)j->o->bits;
    o.q.group_size          = j->o->group_size;
    o.q.sym                 = j->o->sym;
    o.q.v1_safe             = 1;
    o.q.mse                 = j->o->mse_weighted ? LQ_MSE_WEIGHTED
                              : j->o->mse        ? LQ_MSE_NORM24
                                                                   : LQ_MSE_OFF;
    o.act_order             = j->o->desc_act;
    o.static_groups         = j->o->static_groups;
    o.damp                  = j->o->damp;
    o.damp_retries          = (int)j->o->damp_retries;
    o.block_size            = j->o->block_size;
    o.warn                  = warn_cb;
    o.warn_user             = j;
    /* Each pass's forward starts where the one before stopped (same bytes as re-running the
     * layer from its input): pass 1 (o) saves the attention output, computed with the quantized
     * q/k/v; pass 2 (gate/up) starts there and saves the residual; pass 3 (down) and the
     * driver's propagation start from that. */
    const int cache     = true_sq && j->o->stage_cache;
    const int act       = cache && keep_act(j);
    lq_acts  *stages[4] = {NULL, NULL, NULL, NULL}; /* [sg]: the state pass sg saved */
    lq_status fail      = LQ_OK;
    if (j->o->awq_scales) { /* the passes below see the scaled layer */
        const int64_t seqs = j->o->awq_tokens / j->seqlen;
        LQ_TRY(lq_awq_smooth_layer(j, o.q.group_size, seqs > 0 ? seqs : 1, NULL));
    }
    for (int sg = 0; sg < (true_sq ? 4 : 1) && fail == LQ_OK; sg++) {
        const unsigned mask = true_sq ? seq_groups[sg] : all;
        gptq_pass      ps   = {mask,
                               0,
                               0,
                               1,
                               j->o->v_attn_weights,
                               o.q.bits,
                        !cache || sg < 2 ? LQ_STAGE_INPUT
                               : sg == 2        ? LQ_STAGE_ATTN
                                                : LQ_STAGE_RESID,
                        !cache || sg < 1 ? LQ_STAGE_INPUT
                               : sg == 1        ? LQ_STAGE_ATTN
                               : sg == 2        ? LQ_STAGE_RESID
                               : act            ? LQ_STAGE_ACT
                                                : LQ_STAGE_INPUT,
                               NULL,
                               NULL};
        ps.from_spill       = ps.from == LQ_STAGE_ATTN    ? stages[1]
                              : ps.from == LQ_STAGE_RESID ? stages[2]
                                                          : NULL;
        if (ps.save != LQ_STAGE_INPUT)
            fail = lq_qjob_stage_spill(j, &stages[sg]);
        ps.save_spill = stages[sg];
        /* batches only between true-sequential passes: a single pass quantizes the layer's own
         * linears after its first batch, which later batches would then see */
        const int64_t per = true_sq && (mask & expertsm) ? expert_batch(j, mask) : E + 1;
        for (ps.e0 = 0; fail == LQ_OK && ps.e0 <= E; ps.e0 += per) {
            ps.e1 = ps.e0 + per;
            fail  = run_pass(j, &o, &ps);
            /* later batches: the experts only, from the same stage, saving nothing */
            ps.first = 0, ps.mask = mask & expertsm, ps.save = LQ_STAGE_INPUT, ps.save_spill = NULL;
        }
        if (sg == 2) { /* the attention output has served */
            lq_acts_free(stages[1]);
            stages[1] = NULL;
        }
    }
    if (fail == LQ_OK && cache) { /* the quantized layer's residual (and activation), for the
                                     propagation */
        j->resume     = stages[2];
        j->resume_act = stages[3];
        stages[2] = stages[3] = NULL;
    }
    for (int i = 0; i < 4; i++)
        lq_acts_free(stages[i]);
    return fail;
}

static int64_t gptq_work(const lq_model_config *c, int64_t tokens) {
    int64_t d = c->hidden_size, I = c->intermediate_size, k = d > I ? d : I;
    (void)tokens; /* Hessians, their copy, the permuted inverse, Wt and codes of the widest */
    int64_t w = 4 * (3 * k * k + 2 * d * I) + d * I;
    if (c->num_experts) { /* a Hessian per expert (and the block input's) at once */
        const int64_t ke = d > c->moe_intermediate ? d : c->moe_intermediate;
        w += 4 * (c->num_experts + 1) * ke * ke;
    }
    return w;
}

const lq_method_traits lq_method_gptq = {
    .name                = "gptq",
    .help                = "GPTQ: Hessian-based error compensation from calibration data (GPTQ v1 "
                           "checkpoint for AutoGPTQ/transformers/vLLM)",
    .format              = LQ_FMT_GPTQ,
    .options             = "quantize,group,minmax,calib,gptq,awq_search",
    .needs_calib         = 1,
    .propagate_quantized = 1,
    .gpu                 = 1,
    .stage_copies        = 1, /* two of: attention output, residual, next layer's input */
    .default_seqlen      = 2048,
    .fill_qconfig        = lq_gptq_fill_qconfig,
    .quantize_layer      = gptq_layer,
    .work_bytes          = gptq_work,
};
