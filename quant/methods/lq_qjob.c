/* The job interface the methods work through (lq_methods.h: lq_qjob_*): captures of a layer's
 * linear inputs over the calibration set, stage states, module names, the plan, MoE fallback and
 * warnings. It reads the job alone; the driver (lq_pipeline.c) fills the job and is never
 * called back. */
#include "lq_methods.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct mask_cap {
    unsigned      mask;
    lq_capture_fn fn;
    void         *user;
} mask_cap;

static lq_status mask_fn(void *user, int64_t slot, const float *x, int64_t t, int64_t k) {
    mask_cap *m = user;
    return (m->mask >> lq_slot_role(slot) & 1) ? m->fn(m->user, slot, x, t, k) : LQ_OK;
}

/* Whether the layers of c have a linear of this role (an expert's counts). */
static int role_present(const lq_model_config *c, int role) {
    return lq_lin_present(c, (lq_lin_id)role) || lq_slot_present(c, lq_slot_of((lq_lin_id)role, 0));
}

/* Collects a chunk's stage state from the forward's pieces (on the job's backend). */
typedef struct stage_buf {
    lq_be  *be;
    float  *x;
    int64_t cap; /* floats */
} stage_buf;

static lq_status stage_save(void *user, lq_fwd_stage stage, const float *x, int64_t row0, int64_t t,
                            int64_t k) {
    stage_buf *b = user;
    (void)stage;
    if ((row0 + t) * k > b->cap)
        return LQ_ERR_INTERNAL;
    return b->be->ops->copy(b->be, b->x + row0 * k, x, (size_t)(t * k) * sizeof(float));
}

static lq_status stage_alloc(lq_qjob *j, stage_buf *b, int64_t floats) {
    void *p = NULL;
    b->be   = j->be;
    if (j->be->ops->alloc(j->be, &p, (size_t)floats * sizeof(float)) != LQ_OK)
        return lq_fail(j->err, LQ_ERR_NOMEM, "out of memory for a chunk's stage state (%s)",
                       lq_be_error(j->be));
    b->x   = p;
    b->cap = floats;
    return LQ_OK;
}

static void stage_release(stage_buf *b) {
    if (b->x)
        b->be->ops->release(b->be, b->x, (size_t)b->cap * sizeof(float));
}

/* Values a token's state at a stage holds. */
static int64_t stage_width(const lq_qjob *j, lq_fwd_stage s) {
    const lq_model_config *c = &j->model->cfg;
    return s == LQ_STAGE_ATTN  ? c->num_heads * c->head_dim
           : s == LQ_STAGE_ACT ? c->intermediate_size
                               : c->hidden_size;
}

typedef struct recap_filter {
    lq_capture_fn fn;
    void         *user;
    int64_t       E;
} recap_filter;

static lq_status recap_fn(void *user, int64_t slot, const float *x, int64_t t, int64_t k) {
    recap_filter *r = user;
    const int64_t e = lq_slot_expert(slot);
    return e >= 0 && e < r->E ? r->fn(r->user, slot, x, t, k) : LQ_OK;
}

lq_status lq_qjob_capture_staged(lq_qjob *j, unsigned lin_mask, lq_capture_fn fn, void *user,
                                 lq_fwd_stage from_stage, lq_acts *from, lq_fwd_stage save_stage,
                                 lq_acts *save) {
    if (!j->acts)
        LQ_FAIL(j->err, LQ_ERR_INTERNAL, "capture without calibration activations");
    int top = -1;
    for (int l = 0; l < LQ_LIN_COUNT; l++)
        if ((lin_mask >> l & 1) && role_present(&j->model->cfg, l))
            top = l;
    /* the router's counts of this layer before the pass: what it adds is this pass's routing */
    const int64_t  E = j->model->cfg.num_experts;
    int64_t        nl, ne, before[LQ_CFG_MAX_EXPERTS];
    const int64_t *cnt = lq_fwd_ws_expert_tokens(j->ws, &nl, &ne);
    if (E > LQ_CFG_MAX_EXPERTS || (E && (!cnt || ne != E || j->layer >= nl)))
        LQ_FAIL(j->err, LQ_ERR_INTERNAL, "capture: no expert counts for this layer");
    for (int64_t e = 0; e < E; e++)
        before[e] = cnt[j->layer * E + e];
    lq_fwd_ws_set_moe_modes(j->ws, j->moe_mode);
    mask_cap      m = {lin_mask, fn, user};
    const int64_t d = j->model->cfg.hidden_size, nc = lq_acts_count(j->acts);
    lq_acts      *fo  = from_stage == LQ_STAGE_INPUT ? j->fp_out : NULL;
    const int64_t tok = j->chunk_seqs * j->seqlen;
    stage_buf     in = {NULL, NULL, 0}, out = {NULL, NULL, 0};
    lq_status     st = LQ_OK;
    lq_fwd_resume rs = {from_stage, NULL, save_stage, stage_save, &out, NULL};
    const lq_layer *Lx = NULL; /* the layer as the method has left it, where the pass runs */
    const double    t0 = lq_now();
    if (from_stage != LQ_STAGE_INPUT && (!from || lq_acts_count(from) != nc))
        LQ_FAIL(j->err, LQ_ERR_INTERNAL, "capture: no saved stage for every chunk");
    if (from_stage == LQ_STAGE_ACT) /* it would need the residual as well: only the driver's */
        LQ_FAIL(j->err, LQ_ERR_INTERNAL, "capture: no pass starts at the MLP activation");
    if (from_stage != LQ_STAGE_INPUT)
        LQ_TRY_GOTO(stage_alloc(j, &in, tok * stage_width(j, from_stage)));
    if (save_stage != LQ_STAGE_INPUT)
        LQ_TRY_GOTO(stage_alloc(j, &out, tok * stage_width(j, save_stage)));
    LQ_TRY_GOTO(lq_qjob_layer(j, &Lx));
    for (int64_t c = 0; c < nc; c++) {
        LQ_TRY_GOTO(lq_acts_read(j->acts, c, j->chunk, j->err));
        const int64_t ns = lq_acts_numel(j->acts, c) / (j->seqlen * d);
        if (in.x) {
            if (lq_acts_numel(from, c) > in.cap)
                LQ_FAIL_GOTO(j->err, LQ_ERR_INTERNAL, "capture: stage chunk %lld too large",
                             (long long)c);
            LQ_TRY_GOTO(lq_acts_read(from, c, in.x, j->err));
            rs.state = in.x;
        }
        LQ_TRY_GOTO(lq_layer_forward_ex(j->model, Lx, j->chunk, ns, j->seqlen, mask_fn, &m,
                                        fo ? -1 : top, &rs, j->ws, j->err));
        if (fo)
            LQ_TRY_GOTO(lq_acts_append(fo, j->chunk, ns * j->seqlen * d, j->err));
        if (out.x)
            LQ_TRY_GOTO(
                lq_acts_append(save, out.x, ns * j->seqlen * stage_width(j, save_stage), j->err));
    }
    if (fo)
        j->fp_out = NULL; /* filled */
    int64_t routed = 0;   /* a pass that stopped before the experts routed nothing */
    for (int64_t e = 0; e < E; e++)
        routed += cnt[j->layer * E + e] - before[e];
    for (int64_t e = 0; e < E && routed > 0; e++)
        j->moe_tokens[e] = cnt[j->layer * E + e] - before[e];
done:
    if (st == LQ_OK && j->be->ops->sync(j->be) != LQ_OK) /* a device's pass ends here */
        st = lq_fail(j->err, LQ_ERR_CUDA, "capture pass: %s", lq_be_error(j->be));
    lq_qjob_phase(j, LQ_PH_FORWARD, t0);
    lq_fwd_ws_set_moe_modes(j->ws, NULL);
    stage_release(&in);
    stage_release(&out);
    return st;
}

lq_status lq_qjob_capture(lq_qjob *j, unsigned lin_mask, lq_capture_fn fn, void *user) {
    return lq_qjob_capture_staged(j, lin_mask, fn, user, LQ_STAGE_INPUT, NULL, LQ_STAGE_INPUT,
                                  NULL);
}

lq_status lq_qjob_stage_spill(lq_qjob *j, lq_acts **out) {
    return lq_acts_create(j->be, j->stage_dev_budget, j->stage_budget, j->spill_dir, out, j->err);
}

lq_status lq_qjob_layer(lq_qjob *j, const lq_layer **out) {
    const lq_model_config *cf = &j->model->cfg;
    *out                      = NULL;
    if (!j->dirty && !(j->dirty = calloc((size_t)j->nslots, 1)))
        LQ_FAIL(j->err, LQ_ERR_NOMEM, "out of memory");
    if (j->be_layer_ok && j->dirty_all) {
        lq_layer_be_free(&j->be_layer);
        j->be_layer_ok = 0;
    }
    if (!j->be_layer_ok) {
        LQ_TRY(lq_layer_to_be(j->be, cf, j->L, &j->be_layer, j->err));
        j->be_layer_ok = 1;
        j->dirty_all   = 0;
        memset(j->dirty, 0, (size_t)j->nslots);
    }
    for (int64_t s = 0; s < j->nslots; s++)
        if (j->dirty[s]) {
            LQ_TRY(lq_layer_be_update(j->be, cf, j->L, &j->be_layer, s, j->err));
            j->dirty[s] = 0;
        }
    *out = &j->be_layer.L;
    return LQ_OK;
}

void lq_qjob_changed(lq_qjob *j, int64_t s) {
    if (s < 0 || s >= j->nslots || !j->dirty)
        j->dirty_all = 1;
    else
        j->dirty[s] = 1;
}

void lq_qjob_phase(lq_qjob *j, int ph, double since) {
    if (j->phase && ph >= 0 && ph < LQ_PH_COUNT)
        j->phase[ph] += lq_now() - since;
}

void lq_qjob_release(lq_qjob *j) {
    if (j->be_layer_ok)
        lq_layer_be_free(&j->be_layer);
    j->be_layer_ok = 0;
    free(j->dirty);
    j->dirty = NULL;
}

void lq_qjob_module(const lq_qjob *j, int64_t slot, char *buf, size_t cap) {
    char leaf[128];
    lq_slot_name(&j->model->cfg, slot, leaf, sizeof leaf);
    snprintf(buf, cap, "model.layers.%lld.%s", (long long)j->layer, leaf);
}

int lq_qjob_planned(const lq_qjob *j, int64_t s) {
    return lq_slot_present(&j->model->cfg, s) && j->plan[lq_slot_kind(&j->model->cfg, s)];
}

void lq_qjob_input_widths(const lq_qjob *j, int64_t *k) {
    const lq_model_config *cf = &j->model->cfg;
    memset(k, 0, (size_t)j->nslots * sizeof *k);
    for (int64_t s = 0; s < j->nslots; s++) {
        int64_t n, ks;
        if (!lq_slot_present(cf, s))
            continue;
        lq_slot_shape(cf, s, &n, &ks);
        k[lq_slot_input(cf, s, j->moe_mode)] = ks;
    }
    if (cf->num_experts)
        k[LQ_SLOT_MOE_IN] = cf->hidden_size;
}

lq_linear *lq_qjob_linear(lq_qjob *j, int64_t s) {
    return lq_layer_slot(j->L, s);
}

int64_t lq_qjob_moe_fallback(lq_qjob *j, uint8_t *changed) {
    const int64_t E         = j->model->cfg.num_experts;
    int64_t       n         = 0;
    char          list[256] = "";
    for (int64_t e = 0; e < E; e++) {
        if (changed)
            changed[e] = 0;
        if (j->moe_mode[e] != LQ_MOE_ROUTED || j->moe_tokens[e] < 0 ||
            j->moe_tokens[e] >= j->moe_min_tokens)
            continue;
        j->moe_mode[e]     = LQ_MOE_ALL;
        j->moe_fallback[e] = 1;
        if (changed)
            changed[e] = 1;
        if (strlen(list) < sizeof list - 40)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%lld (%lld)",
                     n ? ", " : "", (long long)e, (long long)j->moe_tokens[e]);
        n++;
    }
    if (n)
        lq_qjob_warn(
            j,
            "model.layers.%lld: %lld expert(s) got fewer than %lld calibration tokens "
            "from the router: %s; their statistics come from every token (--moe-min-tokens)",
            (long long)j->layer, (long long)n, (long long)j->moe_min_tokens, list);
    return n;
}

lq_status lq_qjob_moe_recapture_down(lq_qjob *j, const uint8_t *changed, lq_capture_fn fn,
                                     void *user) {
    const int64_t E    = j->model->cfg.num_experts;
    uint8_t      *keep = malloc((size_t)E);
    if (!keep)
        LQ_FAIL(j->err, LQ_ERR_NOMEM, "out of memory");
    memcpy(keep, j->moe_mode, (size_t)E);
    for (int64_t e = 0; e < E; e++)
        j->moe_mode[e] = changed[e] ? LQ_MOE_ALL : LQ_MOE_SKIP;
    lq_fwd_ws_want_attn_weights(j->ws, 0);
    /* the shared expert's down input comes again too: only routed experts' downs pass */
    recap_filter rf = {fn, user, E};
    lq_status    st = lq_qjob_capture(j, 1u << LQ_LIN_DOWN, recap_fn, &rf);
    memcpy(j->moe_mode, keep, (size_t)E);
    free(keep);
    return st;
}

void lq_qjob_warn(lq_qjob *j, const char *fmt, ...) {
    if (!j->warn)
        return;
    char    msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    j->warn(j->warn_user, msg);
}
