/* LLM.int8 (Dettmers et al. 2022; bitsandbytes Linear8bitLt): row-wise absmax int8 weights.
 * Calibration finds the input columns whose activations reach the outlier threshold; those
 * weight columns are also stored in fp16 so the kernel's mixed-precision decomposition uses
 * exact weights for them (bitsandbytes recovers them from the int8 codes). */
#include "lq_methods.h"
#include "lq_opts.h"

#include <stdlib.h>
#include <string.h>

static void int8_fill(const lq_opts *o, lq_qconfig *c) {
    c->int8_threshold = o->threshold;
}

typedef struct amax_ctx {
    lq_xstats *st;   /* per slot, those that are some linear's input */
    float    **amax; /* where their maxima accumulate, on the job's backend (st[].absmax itself
                        on a host backend, read back into it after the passes elsewhere) */
    lq_be     *be;
    lq_err    *err;
} amax_ctx;

static lq_status on_cap(void *user, int64_t slot, const float *x, int64_t t, int64_t k) {
    amax_ctx *c = user;
    if (!c->amax[slot])
        return LQ_OK;
    const lq_status st = c->be->ops->col_absmax(c->be, c->amax[slot], x, t, k);
    return st == LQ_OK ? LQ_OK
                       : lq_fail(c->err, st, "int8: activation maxima: %s", lq_be_error(c->be));
}

/* The statistics every slot's linear reads. */
static lq_status init_stats(lq_qjob *j, amax_ctx *c) {
    int64_t *k = lq_malloc_n(j->nslots, sizeof *k);
    if (!k)
        LQ_FAIL(j->err, LQ_ERR_NOMEM, "int8: out of memory");
    lq_qjob_input_widths(j, k);
    lq_status st = LQ_OK;
    for (int64_t s = 0; s < j->nslots && st == LQ_OK; s++) {
        if (!k[s])
            continue;
        st = lq_xstats_init(&c->st[s], k[s], LQ_XS_ABSMAX, j->err);
        if (st != LQ_OK || !c->be->ops->device) {
            c->amax[s] = c->st[s].absmax;
            continue;
        }
        void *p = NULL;
        if ((st = c->be->ops->alloc(c->be, &p, (size_t)k[s] * sizeof(float))) == LQ_OK) {
            c->amax[s] = p;
            st         = c->be->ops->zero(c->be, p, (size_t)k[s] * sizeof(float));
        }
        if (st != LQ_OK)
            st = lq_fail(j->err, st, "int8: statistics on the %s backend: %s", c->be->ops->name,
                         lq_be_error(c->be));
    }
    free(k);
    return st;
}

/* The maxima into the host statistics (a device's read back) and the backend's memory freed. */
static lq_status fetch_stats(lq_qjob *j, amax_ctx *c, lq_status st) {
    for (int64_t s = 0; s < j->nslots; s++) {
        if (!c->amax[s] || c->amax[s] == c->st[s].absmax)
            continue;
        const size_t b = (size_t)c->st[s].k * sizeof(float);
        if (st == LQ_OK && (st = c->be->ops->download(c->be, c->st[s].absmax, c->amax[s], b)) != LQ_OK)
            st = lq_fail(j->err, st, "int8: reading statistics back: %s", lq_be_error(c->be));
        c->be->ops->release(c->be, c->amax[s], b);
        c->amax[s] = NULL;
    }
    return st;
}

/* One pass over the layer (also without outliers: it computes the next layer's inputs); with
 * experts, a second one for the down inputs of experts that received too few tokens. */
static lq_status calibrate(lq_qjob *j, amax_ctx *c) {
    LQ_TRY(init_stats(j, c));
    LQ_TRY(lq_qjob_capture(j, (1u << LQ_LIN_COUNT) - 1, on_cap, c));
    const int64_t E = j->model->cfg.num_experts;
    if (!E)
        return LQ_OK;
    uint8_t  *changed = malloc((size_t)E);
    lq_status st      = changed ? LQ_OK : lq_fail(j->err, LQ_ERR_NOMEM, "int8: out of memory");
    if (st == LQ_OK && lq_qjob_moe_fallback(j, changed) > 0) {
        for (int64_t e = 0; e < E; e++) /* routed statistics of those downs no longer apply */
            if (changed[e] && st == LQ_OK && c->amax[lq_slot_of(LQ_LIN_DOWN, e)]) {
                const int64_t s = lq_slot_of(LQ_LIN_DOWN, e);
                st = c->be->ops->zero(c->be, c->amax[s], (size_t)c->st[s].k * sizeof(float));
            }
        if (st == LQ_OK)
            st = lq_qjob_moe_recapture_down(j, changed, on_cap, c);
    }
    free(changed);
    return st;
}

static lq_status int8_layer(lq_qjob *j) {
    float    thr = (float)j->o->threshold;
    amax_ctx c;
    memset(&c, 0, sizeof c);
    c.be         = j->be;
    c.err        = j->err;
    lq_status st = LQ_OK;
    c.st         = lq_calloc_n(j->nslots, sizeof *c.st);
    c.amax       = lq_calloc_n(j->nslots, sizeof *c.amax);
    if (!c.st || !c.amax) {
        free(c.st), free(c.amax);
        LQ_FAIL(j->err, LQ_ERR_NOMEM, "int8: out of memory");
    }
    st = fetch_stats(j, &c, calibrate(j, &c));
    for (int64_t l = 0; l < j->nslots && st == LQ_OK; l++) {
        if (!lq_qjob_planned(j, l))
            continue;
        lq_linear   *lin = lq_qjob_linear(j, l);
        lq_qlinear  *w   = &lin->buf.q;
        int64_t      n = w->n, k = w->k, no = 0;
        int8_t      *cb   = malloc((size_t)(n * k));
        float       *scb  = malloc((size_t)n * sizeof(float));
        int32_t     *idx  = malloc((size_t)k * sizeof(int32_t));
        float       *wout = NULL;
        const float *W    = w->dense;
        if (!cb || !scb || !idx) {
            st = lq_fail(j->err, LQ_ERR_NOMEM, "int8: out of memory");
        } else {
            if (thr > 0)
                no = lq_int8_outliers(c.st[lq_slot_input(&j->model->cfg, l, j->moe_mode)].absmax, k,
                                      thr, 0, idx);
            if (no > 0 && !(wout = malloc((size_t)(n * no) * sizeof(float))))
                st = lq_fail(j->err, LQ_ERR_NOMEM, "int8: out of memory");
            for (int64_t r = 0; r < n && wout; r++)
                for (int64_t o = 0; o < no; o++)
                    wout[r * no + o] = W[r * k + idx[o]];
            if (st == LQ_OK) {
                lq_int8_quantize(W, n, k, cb, scb);
                const double t0 = lq_now();
                st = lq_pack_int8(n, k, cb, scb, idx, no, wout, thr, lin->bias, &j->out[l], j->err);
                lq_qjob_phase(j, LQ_PH_PACK, t0);
            }
            if (st == LQ_OK) {
                j->quantized[l] = 1;
                j->loss[l]      = (double)no; /* reported: outlier columns kept in fp16 */
                if (no > 0) {
                    char name[160];
                    lq_qjob_module(j, l, name, sizeof name);
                    st = lq_qconfig_add_outlier_module(j->qcfg, name, j->err);
                }
            }
        }
        free(cb), free(scb), free(idx), free(wout);
    }
    for (int64_t l = 0; l < j->nslots; l++)
        lq_xstats_free(&c.st[l]);
    free(c.st);
    free(c.amax);
    return st;
}

static int64_t int8_work(const lq_model_config *c, int64_t tokens) {
    (void)tokens; /* codes + outlier copies of the widest linear */
    return 2 * c->hidden_size * c->intermediate_size;
}

const lq_method_traits lq_method_int8 = {
    .name                = "int8",
    .help                = "bitsandbytes LLM.int8: 8-bit row-wise absmax with fp16 outlier "
                           "columns found on calibration data",
    .format              = LQ_FMT_INT8,
    .options             = "quantize,calib,int8",
    .needs_calib         = 1,
    .propagate_quantized = 0,
    .fp_first_capture    = 1, /* its first capture is of the unmodified layer */
    .default_seqlen      = 512,
    .fill_qconfig        = int8_fill,
    .quantize_layer      = int8_layer,
    .work_bytes          = int8_work,
};
