/* NF4 (bitsandbytes Linear4bit): blockwise absmax NF4 codes, optional double quantization of
 * the absmax statistics; no calibration. */
#include "lq_methods.h"
#include "lq_opts.h"

#include <stdio.h>
#include <string.h>
#include <stdlib.h>

static void nf4_fill(const lq_opts *o, lq_qconfig *c) {
    c->group_size   = o->blocksize;
    c->double_quant = o->double_quant;
    snprintf(c->quant_type, sizeof c->quant_type, "nf4");
    /* bitsandbytes computes in the model's dtype (float32 is refused for quantized output) */
    snprintf(c->compute_dtype, sizeof c->compute_dtype, "%s",
             !strcmp(o->out_dtype, "bfloat16") ? "bfloat16" : "float16");
}

static lq_status nf4_layer(lq_qjob *j) {
    int64_t bs = j->o->blocksize;
    int     dq = j->o->double_quant;
    if (bs & (bs - 1))
        LQ_FAIL(j->err, LQ_ERR_INVALID_ARG, "nf4: blocksize %lld is not a power of two",
                (long long)bs);
    for (int64_t l = 0; l < j->nslots; l++) {
        if (!lq_qjob_planned(j, l))
            continue;
        lq_linear  *lin = lq_qjob_linear(j, l);
        lq_qlinear *w   = &lin->buf.q;
        int64_t     N = w->n * w->k, nb = (N + bs - 1) / bs;
        uint8_t    *codes = malloc((size_t)N);
        float      *am    = malloc((size_t)nb * sizeof(float));
        lq_status   st    = LQ_OK;
        if (codes && am) {
            lq_nf4_quantize(w->dense, N, bs, codes, am);
            const double t0 = lq_now();
            st = lq_pack_nf4(w->n, w->k, bs, codes, am, dq, 256, lin->bias, &j->out[l], j->err);
            lq_qjob_phase(j, LQ_PH_PACK, t0);
            if (st == LQ_OK)
                j->quantized[l] = 1;
        } else {
            st = lq_fail(j->err, LQ_ERR_NOMEM, "nf4: out of memory");
        }
        free(codes), free(am);
        LQ_TRY(st);
    }
    return LQ_OK;
}

const lq_method_traits lq_method_nf4 = {
    .name           = "nf4",
    .help           = "bitsandbytes NF4: 4-bit normal-float blocks with absmax (optional double "
                      "quant), no calibration data",
    .format         = LQ_FMT_NF4,
    .options        = "quantize,nf4",
    .fill_qconfig   = nf4_fill,
    .quantize_layer = nf4_layer,
};
