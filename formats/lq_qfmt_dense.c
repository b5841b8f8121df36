/* Unquantized linears: <module>.weight [n, k] in the model dtype (float32, fp16 or bf16 in the
 * descriptor: dense_dtype; a float32 one is fp16 on the device) and the bias in the model
 * dtype. No quantization_config. Read as the file holds them (views where aligned). */
#include "lq_qformat_int.h"

#include <stdio.h>
#include <string.h>

static lq_status check_dense(const lq_qlinear *w, lq_err *err) {
    const char *fmt = "dense";
    LQ_TRY(lq_qcheck_dims(w, fmt, err));
    NEED(w->dense, "dense");
    LQ_RETURN_IF(w->dense_dtype < LQ_DENSE_F32 || w->dense_dtype > LQ_DENSE_BF16, err,
                 LQ_ERR_INVALID_ARG, "dense linear: unknown dense_dtype %d", (int)w->dense_dtype);
    return LQ_OK;
}

static int fits_dense(const lq_qconfig *c, int64_t n, int64_t k, char *why, size_t cap) {
    (void)c, (void)n, (void)k, (void)why, (void)cap;
    return 1;
}

static lq_status read_dense(const lq_st *st, const char *prefix, const lq_qconfig *c, int64_t n,
                            int64_t k, lq_qbuf *out, lq_err *err) {
    lq_rd               r = {st, prefix, out, err};
    const lq_st_tensor *t;
    LQ_TRY(lq_rd_find(&r, "weight", 1, &t));
    LQ_TRY(lq_rd_expect(&r, t, lq_rd_float_dts, 2, -1, -1, "expected a float [out, in] weight"));
    LQ_TRY(lq_rd_dims(&r, t, t->shape[0], t->shape[1], n, k));
    out->q.format = LQ_FMT_DENSE;
    out->q.n      = t->shape[0];
    out->q.k      = t->shape[1];
    const int f16 = t->dtype == LQ_DT_F16 || t->dtype == LQ_DT_BF16;
    if (t->dtype == LQ_DT_F32 && (uintptr_t)t->data % 4 == 0) {
        out->q.dense = t->data;
    } else if (f16 && t->perm_heads == 0 && t->shift == 0.f) { /* as stored: no transform */
        out->q.dense_dtype = t->dtype == LQ_DT_F16 ? LQ_DENSE_F16 : LQ_DENSE_BF16;
        if ((uintptr_t)t->data % 2 == 0) {
            out->q.dense = t->data;
        } else {
            void *d = lq_qbuf_alloc(out, (size_t)t->nbytes);
            LQ_RETURN_IF(!d, err, LQ_ERR_NOMEM, "%s: out of memory", t->name);
            memcpy(d, t->data, (size_t)t->nbytes);
            out->q.dense = d;
        }
    } else {
        float *d = lq_qbuf_alloc(out, (size_t)t->numel * 4);
        LQ_RETURN_IF(!d, err, LQ_ERR_NOMEM, "%s: out of memory", t->name);
        LQ_TRY(lq_st_read_f32(st, t->name, 2, t->shape, d, err));
        out->q.dense = d;
    }
    LQ_TRY(lq_rd_bias(&r, out->q.n));
    return lq_rd_finish(&r, "weight");
}

static lq_status write_cfg_dense(const lq_qconfig *c, cJSON *qc, lq_err *err) {
    return lq_fail(err, LQ_ERR_INVALID_ARG, "an unquantized model has no quantization_config");
}

static lq_status parse_cfg_dense(const cJSON *qc, const char *label, lq_qconfig *c, lq_err *err) {
    return LQ_OK;
}

static int arrays_dense(const lq_qlinear *w, lq_qarray *a) {
    const lq_dtype t = w->dense_dtype == LQ_DENSE_F16    ? LQ_DT_F16
                       : w->dense_dtype == LQ_DENSE_BF16 ? LQ_DT_BF16
                                                         : LQ_DT_F32;
    a[0]             = LQ_ARRAY(dense, "weight", t, 2, w->n, w->k);
    a[0].dev_dtype   = t == LQ_DT_F32 ? LQ_DT_F16 : t; /* float32 goes up as fp16 */
    a[0].model_dtype = 1;
    return 1;
}

static void default_dense(lq_qconfig *c) {
    (void)c;
}

const lq_qformat lq_qfmt_dense = {
    .name             = "dense",
    .desc             = "unquantized",
    .ids              = {".weight"},
    .bias_model_dtype = 1,
    .fits             = fits_dense,
    .check            = check_dense,
    .arrays           = arrays_dense,
    .read_tensors     = read_dense,
    .qconfig_default  = default_dense,
    .write_hf_config  = write_cfg_dense,
    .parse_hf_config  = parse_cfg_dense,
};
