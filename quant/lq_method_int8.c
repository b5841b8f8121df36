/* LLM.int8 (Dettmers et al. 2022; bitsandbytes Linear8bitLt): row-wise absmax int8 weights.
 * Calibration finds the input columns whose activations reach the outlier threshold; those
 * weight columns are also stored in fp16 so the kernel's mixed-precision decomposition uses
 * exact weights for them (bitsandbytes recovers them from the int8 codes). */
#include "lq_methods.h"
#include "lq_params_get.h"

#include <stdlib.h>
#include <string.h>

static void int8_fill(const lq_params *p, lq_qconfig *c) {
    c->int8_threshold = lq_params_f64(p, "threshold");
}

typedef struct amax_ctx {
    lq_xstats st[LQ_LIN_COUNT];
    int64_t   seqlen;
} amax_ctx;

static int src_of(int l) {
    return l == LQ_LIN_K || l == LQ_LIN_V ? LQ_LIN_Q : l == LQ_LIN_UP ? LQ_LIN_GATE : l;
}

static lq_status on_cap(void *user, lq_lin_id id, const float *x, int64_t t, int64_t k) {
    amax_ctx *c = user;
    if (src_of(id) == (int)id)
        lq_xstats_add(&c->st[id], x, t, t / c->seqlen);
    return LQ_OK;
}

static lq_status int8_layer(lq_qjob *j) {
    float    thr = (float)lq_params_f64(j->p, "threshold");
    amax_ctx c;
    memset(&c, 0, sizeof c);
    c.seqlen     = j->seqlen;
    lq_status st = LQ_OK;
    for (int l = 0; l < LQ_LIN_COUNT && st == LQ_OK; l++)
        if (src_of(l) == l && lq_lin_present(&j->model->cfg, (lq_lin_id)l))
            st = lq_xstats_init(&c.st[l], j->L->lin[l].buf.q.k, LQ_XS_ABSMAX, j->err);
    if (st == LQ_OK) /* also without outliers: the pass computes the next layer's inputs */
        st = lq_qjob_capture(j, (1u << LQ_LIN_COUNT) - 1, on_cap, &c);
    for (int l = 0; l < LQ_LIN_COUNT && st == LQ_OK; l++) {
        if (!j->plan[l])
            continue;
        lq_qlinear  *w = &j->L->lin[l].buf.q;
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
                no = lq_int8_outliers(c.st[src_of(l)].absmax, k, thr, 0, idx);
            if (no > 0 && !(wout = malloc((size_t)(n * no) * sizeof(float))))
                st = lq_fail(j->err, LQ_ERR_NOMEM, "int8: out of memory");
            for (int64_t r = 0; r < n && wout; r++)
                for (int64_t o = 0; o < no; o++)
                    wout[r * no + o] = W[r * k + idx[o]];
            if (st == LQ_OK) {
                lq_int8_quantize(W, n, k, cb, scb);
                st = lq_pack_int8(n, k, cb, scb, idx, no, wout, thr, j->L->lin[l].bias, &j->out[l],
                                  j->err);
            }
            if (st == LQ_OK) {
                j->quantized[l] = 1;
                j->loss[l]      = (double)no; /* reported: outlier columns kept in fp16 */
                if (no > 0) {
                    char name[160];
                    lq_qjob_module(j, (lq_lin_id)l, name, sizeof name);
                    st = lq_qconfig_add_outlier_module(j->qcfg, name, j->err);
                }
            }
        }
        free(cb), free(scb), free(idx), free(wout);
    }
    for (int l = 0; l < LQ_LIN_COUNT; l++)
        lq_xstats_free(&c.st[l]);
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
    .needs_calib         = 1,
    .propagate_quantized = 0,
    .fp_first_capture    = 1, /* its first capture is of the unmodified layer */
    .default_seqlen      = 512,
    .fill_qconfig        = int8_fill,
    .quantize_layer      = int8_layer,
    .work_bytes          = int8_work,
};
