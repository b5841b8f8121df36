/* RTN: round-to-nearest per group, no calibration -- the baseline every method must beat.
 * Written as a GPTQ v1 checkpoint (the same layout AutoGPTQ loads). */
#include "lq_methods.h"
#include "lq_opts.h"

#include <stdlib.h>

void lq_gptq_fill_qconfig(const lq_opts *o, lq_qconfig *c) {
    c->bits            = (int)o->bits;
    int64_t g          = o->group_size;
    c->group_size      = g <= 0 ? -1 : g;
    c->sym             = o->sym;
    c->desc_act        = o->desc_act;
    c->static_groups   = o->static_groups;
    c->damp_percent    = o->damp;
    c->true_sequential = o->true_sequential;
}

lq_status lq_gptq_pack_linear(lq_qjob *j, int64_t l, const lq_qspec *s, const uint8_t *q,
                              const int32_t *zeros, const float *scales, const int32_t *g_idx) {
    const lq_linear  *lin = lq_qjob_linear(j, l);
    const lq_qlinear *w   = &lin->buf.q;
    int64_t           g   = s->group_size > 0 ? s->group_size : w->k;
    const double      t0  = lq_now();
    lq_status         st  = lq_pack_gptq(s->bits, w->n, w->k, g, q, zeros, scales, g_idx, lin->bias,
                                         &j->out[l], j->err);
    lq_qjob_phase(j, LQ_PH_PACK, t0);
    if (st == LQ_OK)
        j->quantized[l] = 1;
    return st;
}

static lq_status rtn_layer(lq_qjob *j) {
    lq_qspec s = {(int)j->o->bits, j->o->group_size,
                  j->o->sym, 1, j->o->mse};
    for (int64_t l = 0; l < j->nslots; l++) {
        if (!lq_qjob_planned(j, l))
            continue;
        lq_qlinear *w = &lq_qjob_linear(j, l)->buf.q;
        int64_t     n = w->n, k = w->k, G = lq_num_groups(k, s.group_size);
        uint8_t    *q  = malloc((size_t)(n * k));
        float      *sc = malloc((size_t)(G * n) * sizeof(float));
        int32_t    *z  = malloc((size_t)(G * n) * sizeof(int32_t));
        int32_t    *gi = malloc((size_t)k * sizeof(int32_t));
        float      *W  = (float *)(uintptr_t)w->dense;
        lq_status   st = LQ_ERR_NOMEM;
        if (q && sc && z && gi) {
            st = lq_rtn(W, n, k, &s, q, sc, z, gi, W, j->err);
            if (st == LQ_OK)
                st = lq_gptq_pack_linear(j, l, &s, q, z, sc, gi);
        } else {
            lq_fail(j->err, st, "rtn: out of memory");
        }
        free(q), free(sc), free(z), free(gi);
        LQ_TRY(st);
    }
    return LQ_OK;
}

const lq_method_traits lq_method_rtn = {
    .name                = "rtn",
    .help                = "round-to-nearest per group, no calibration data (GPTQ v1 checkpoint)",
    .format              = LQ_FMT_GPTQ,
    .options             = "quantize,group,minmax",
    .needs_calib         = 0,
    .propagate_quantized = 0,
    .fill_qconfig        = lq_gptq_fill_qconfig,
    .quantize_layer      = rtn_layer,
};
