/* Format I/O: lq_qlinear <-> safetensors tensors under Hugging Face names, quantization_config
 * <-> lq_qconfig. Per-format functions are bound in the traits table (lq_formats.c); the
 * generic entry points below dispatch through it. Names, dtypes, shapes and config keys follow
 * AutoGPTQ (qlinear + BaseQuantizeConfig.to_dict), AutoAWQ (WQLinear_GEMM,
 * to_transformers_dict), bitsandbytes (Linear4bit/Linear8bitLt _save_to_state_dict, QuantState
 * .as_dict(packed=True)) and transformers BitsAndBytesConfig.to_dict. */
#include "lq_format_io.h"

#include "lq_json.h"
#include "lq_kernels_impl.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <ctype.h>
#include <math.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME_CAP 512

static lq_status tname(char *buf, const char *prefix, const char *suffix, lq_err *err) {
    const int len = snprintf(buf, NAME_CAP, "%s.%s", prefix, suffix);
    LQ_RETURN_IF(len < 0 || len >= NAME_CAP, err, LQ_ERR_INVALID_ARG,
                 "%s: module name too long for tensor names", prefix);
    return LQ_OK;
}

static lq_dtype model_dtype(const lq_qconfig *c) {
    if (!strcmp(c->torch_dtype, "bfloat16"))
        return LQ_DT_BF16;
    if (!strcmp(c->torch_dtype, "float32"))
        return LQ_DT_F32;
    return LQ_DT_F16;
}

/* ---------------------------------------------------------------------------------------
 * Writing
 * --------------------------------------------------------------------------------------- */
static lq_status put(lq_st_writer *wr, const char *prefix, const char *suffix, lq_dtype dt,
                     int ndim, int64_t d0, int64_t d1, const void *data, lq_err *err) {
    char    name[NAME_CAP];
    int64_t shape[2] = {d0, d1};
    LQ_TRY(tname(name, prefix, suffix, err));
    return lq_st_writer_add(wr, name, dt, ndim, shape, data, err);
}

/* fp16 [n] bias as the model dtype (bitsandbytes keeps the Linear's bias dtype) or as F16. */
static lq_status put_bias(lq_st_writer *wr, const char *prefix, const lq_qlinear *w, lq_dtype dt,
                          lq_err *err) {
    if (!w->bias)
        return LQ_OK;
    if (dt == LQ_DT_F16)
        return put(wr, prefix, "bias", LQ_DT_F16, 1, w->n, 0, w->bias, err);
    float *tmp = lq_malloc_n(w->n, sizeof(float));
    LQ_RETURN_IF(!tmp, err, LQ_ERR_NOMEM, "%s.bias: out of memory", prefix);
    lq_f16_to_f32_array(w->bias, w->n, tmp);
    char      name[NAME_CAP];
    int64_t   shape[1] = {w->n};
    lq_status st       = tname(name, prefix, "bias", err);
    if (st == LQ_OK)
        st = lq_st_writer_add_f32(wr, name, dt, 1, shape, tmp, err);
    free(tmp);
    return st;
}

static lq_status check_fmt(const lq_qlinear *w, lq_format f, const char *prefix, lq_err *err) {
    LQ_RETURN_IF(w->format != (int32_t)f, err, LQ_ERR_INVALID_ARG,
                 "%s: descriptor format %d written as %s", prefix, (int)w->format,
                 lq_format_traits_get(f)->name);
    const lq_status st = lq_format_traits_get(f)->check(w, err);
    if (st != LQ_OK)
        lq_err_prefix(err, "%s", prefix);
    return st;
}

lq_status lq_write_dense(lq_st_writer *wr, const char *prefix, const lq_qlinear *w,
                         const lq_qconfig *c, lq_err *err) {
    LQ_TRY(check_fmt(w, LQ_FMT_DENSE, prefix, err));
    char    name[NAME_CAP];
    int64_t shape[2] = {w->n, w->k};
    LQ_TRY(tname(name, prefix, "weight", err));
    LQ_TRY(lq_st_writer_add_f32(wr, name, model_dtype(c), 2, shape, w->dense, err));
    return put_bias(wr, prefix, w, model_dtype(c), err);
}

lq_status lq_write_gptq(lq_st_writer *wr, const char *prefix, const lq_qlinear *w,
                        const lq_qconfig *c, lq_err *err) {
    LQ_TRY(check_fmt(w, LQ_FMT_GPTQ, prefix, err));
    const int64_t G = lq_gptq_groups(w), b = w->bits;
    LQ_TRY(put(wr, prefix, "qweight", LQ_DT_I32, 2, w->k * b / 32, w->n, w->qweight, err));
    LQ_TRY(put(wr, prefix, "qzeros", LQ_DT_I32, 2, G, w->n * b / 32, w->qzeros, err));
    LQ_TRY(put(wr, prefix, "scales", LQ_DT_F16, 2, G, w->n, w->scales, err));
    LQ_TRY(put(wr, prefix, "g_idx", LQ_DT_I32, 1, w->k, 0, w->g_idx, err));
    return put_bias(wr, prefix, w, LQ_DT_F16, err); /* AutoGPTQ QuantLinear: fp16 buffers */
}

lq_status lq_write_awq(lq_st_writer *wr, const char *prefix, const lq_qlinear *w,
                       const lq_qconfig *c, lq_err *err) {
    LQ_TRY(check_fmt(w, LQ_FMT_AWQ, prefix, err));
    const int64_t G = w->k / w->group_size;
    LQ_TRY(put(wr, prefix, "qweight", LQ_DT_I32, 2, w->k, w->n / 8, w->qweight, err));
    LQ_TRY(put(wr, prefix, "qzeros", LQ_DT_I32, 2, G, w->n / 8, w->qzeros, err));
    LQ_TRY(put(wr, prefix, "scales", LQ_DT_F16, 2, G, w->n, w->scales, err));
    return put_bias(wr, prefix, w, LQ_DT_F16, err);
}

/* Python float repr of a double (shortest string that round-trips; ".0" on integers), as
 * json.dumps prints nested_offset. */
static void py_float_repr(double v, char *buf, size_t cap) {
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, cap, "%.*g", p, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    if (!strpbrk(buf, ".eni"))
        strncat(buf, ".0", cap - strlen(buf) - 1);
}

/* QuantState.as_dict(packed=True) non-tensor part, json.dumps formatting (", " / ": "). */
static int nf4_state_json(const lq_qlinear *w, const lq_qconfig *c, const char *qt, char *buf,
                          size_t cap) {
    int len =
        snprintf(buf, cap,
                 "{\"quant_type\": \"%s\", \"blocksize\": %lld, \"dtype\": \"%s\", "
                 "\"shape\": [%lld, %lld]",
                 qt, (long long)w->group_size, c->torch_dtype, (long long)w->n, (long long)w->k);
    if (w->nested_blocksize > 0) {
        char off[40];
        py_float_repr((double)w->nested_offset, off, sizeof off);
        len += snprintf(buf + len, cap - (size_t)len,
                        ", \"nested_blocksize\": %d, \"nested_dtype\": \"float32\", "
                        "\"nested_offset\": %s",
                        (int)w->nested_blocksize, off);
    }
    len += snprintf(buf + len, cap - (size_t)len, "}");
    return len;
}

lq_status lq_write_nf4(lq_st_writer *wr, const char *prefix, const lq_qlinear *w,
                       const lq_qconfig *c, lq_err *err) {
    LQ_TRY(check_fmt(w, LQ_FMT_NF4, prefix, err));
    const int64_t nb = (w->n * w->k + w->group_size - 1) / w->group_size;
    const int     dq = w->nested_blocksize > 0;
    const char   *qt = c->quant_type[0] ? c->quant_type : "nf4";
    LQ_TRY(put(wr, prefix, "weight", LQ_DT_U8, 2, w->n * w->k / 2, 1, w->qweight, err));
    LQ_TRY(put(wr, prefix, "weight.absmax", dq ? LQ_DT_U8 : LQ_DT_F32, 1, nb, 0, w->absmax, err));
    LQ_TRY(put(wr, prefix, "weight.quant_map", LQ_DT_F32, 1, 16, 0, w->quant_map, err));
    if (dq) {
        const int64_t nnb = (nb + w->nested_blocksize - 1) / w->nested_blocksize;
        LQ_TRY(
            put(wr, prefix, "weight.nested_absmax", LQ_DT_F32, 1, nnb, 0, w->nested_absmax, err));
        LQ_TRY(
            put(wr, prefix, "weight.nested_quant_map", LQ_DT_F32, 1, 256, 0, w->nested_code, err));
    }
    char      js[512], suffix[64];
    const int len = nf4_state_json(w, c, qt, js, sizeof js);
    snprintf(suffix, sizeof suffix, "weight.quant_state.bitsandbytes__%s", qt);
    LQ_TRY(put(wr, prefix, suffix, LQ_DT_U8, 1, len, 0, js, err));
    return put_bias(wr, prefix, w, model_dtype(c), err);
}

lq_status lq_write_int8(lq_st_writer *wr, const char *prefix, const lq_qlinear *w,
                        const lq_qconfig *c, lq_err *err) {
    LQ_TRY(check_fmt(w, LQ_FMT_INT8, prefix, err));
    const uint8_t row =
        0; /* weight_format "row" (bitsandbytes LINEAR_8BIT_WEIGHTS_FORMAT_MAPPING) */
    LQ_TRY(put(wr, prefix, "weight", LQ_DT_I8, 2, w->n, w->k, w->qweight, err));
    LQ_TRY(put(wr, prefix, "SCB", LQ_DT_F32, 1, w->n, 0, w->scb, err));
    LQ_TRY(put(wr, prefix, "weight_format", LQ_DT_U8, 0, 0, 0, &row, err));
    if (w->n_outlier > 0) {
        LQ_TRY(put(wr, prefix, "outlier_idx", LQ_DT_I32, 1, w->n_outlier, 0, w->outlier_idx, err));
        LQ_TRY(
            put(wr, prefix, "outlier_weight", LQ_DT_F16, 2, w->n, w->n_outlier, w->outlier_w, err));
    }
    return put_bias(wr, prefix, w, model_dtype(c), err);
}

lq_status lq_qlinear_write(lq_st_writer *wr, const char *prefix, const lq_qlinear *w,
                           const lq_qconfig *c, lq_err *err) {
    LQ_RETURN_IF(!wr || !prefix || !w || !c, err, LQ_ERR_INVALID_ARG,
                 "lq_qlinear_write: NULL argument");
    const lq_format_traits *t = lq_format_traits_get((lq_format)w->format);
    LQ_RETURN_IF(!t || !t->write_tensors, err, LQ_ERR_UNSUPPORTED,
                 "%s: no tensor writer for format %d", prefix, (int)w->format);
    return t->write_tensors(wr, prefix, w, c, err);
}

/* ---------------------------------------------------------------------------------------
 * Reading
 * --------------------------------------------------------------------------------------- */
typedef struct rd {
    const lq_st *st;
    const char  *prefix;
    lq_qbuf     *out;
    lq_err      *err;
} rd;

static const char *file_of(const rd *r, const lq_st_tensor *t) {
    const char *f = lq_st_file_of(r->st, t);
    return f ? f : "safetensors";
}

/* Find <prefix>.<suffix>; *t = NULL when optional and absent. */
static lq_status find(const rd *r, const char *suffix, int required, const lq_st_tensor **t) {
    char name[NAME_CAP];
    LQ_TRY(tname(name, r->prefix, suffix, r->err));
    *t = lq_st_find(r->st, name);
    LQ_RETURN_IF(!*t && required, r->err, LQ_ERR_ST_MISSING_TENSOR,
                 "tensor \"%s\" is missing (quantized linear %s)", name, r->prefix);
    return LQ_OK;
}

static void shape_str(const lq_st_tensor *t, char *buf, size_t cap) {
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < t->ndim && o < cap; d++)
        o += (size_t)snprintf(buf + o, cap - o, d ? ", %lld" : "%lld", (long long)t->shape[d]);
    if (o < cap)
        snprintf(buf + o, cap - o, "]");
}

/* dtype must be one of dts (terminated by -1); shape checked where d >= 0 (ndim < 0: numel
 * only, in d0). */
static lq_status expect(const rd *r, const lq_st_tensor *t, const int *dts, int ndim, int64_t d0,
                        int64_t d1, const char *why) {
    int ok = 0;
    for (int i = 0; dts[i] >= 0; i++)
        ok |= (int)t->dtype == dts[i];
    if (!ok)
        return lq_fail(r->err, LQ_ERR_QFORMAT, "%s: tensor \"%s\" has dtype %s, %s", file_of(r, t),
                       t->name, lq_dtype_name(t->dtype), why);
    if (ndim < 0)
        ok = t->numel == d0;
    else
        ok = t->ndim == ndim && (ndim < 1 || d0 < 0 || t->shape[0] == d0) &&
             (ndim < 2 || d1 < 0 || t->shape[1] == d1);
    if (!ok) {
        char s[96];
        shape_str(t, s, sizeof s);
        return lq_fail(r->err, LQ_ERR_QFORMAT, "%s: tensor \"%s\" has shape %s, %s", file_of(r, t),
                       t->name, s, why);
    }
    return LQ_OK;
}

/* Pointer to the tensor data when aligned for its element type, else an owned copy. */
static lq_status view(const rd *r, const lq_st_tensor *t, const void **p) {
    const int es = lq_dtype_size(t->dtype);
    if (((uintptr_t)t->data % (uintptr_t)es) == 0) {
        *p = t->data;
        return LQ_OK;
    }
    void *cp = lq_qbuf_alloc(r->out, (size_t)t->nbytes);
    LQ_RETURN_IF(!cp, r->err, LQ_ERR_NOMEM, "%s: out of memory copying tensor \"%s\"",
                 file_of(r, t), t->name);
    memcpy(cp, t->data, (size_t)t->nbytes);
    *p = cp;
    return LQ_OK;
}

/* fp16 array: a view of F16 data, or an fp16 copy of BF16/F32 data. */
static lq_status view_f16(const rd *r, const lq_st_tensor *t, const uint16_t **p) {
    if (t->dtype == LQ_DT_F16)
        return view(r, t, (const void **)p);
    uint16_t *h = lq_qbuf_alloc(r->out, (size_t)t->numel * 2);
    float    *f = lq_malloc_n(t->numel, sizeof(float));
    if (!h || !f) {
        free(f);
        return lq_fail(r->err, LQ_ERR_NOMEM, "%s: out of memory converting \"%s\"", file_of(r, t),
                       t->name);
    }
    const int64_t bad = lq_convert_to_f32(t->dtype, t->data, t->numel, f);
    lq_f32_to_f16_array(f, t->numel, h);
    free(f);
    LQ_RETURN_IF(bad != 0, r->err, LQ_ERR_WEIGHT_NONFINITE, "%s: tensor \"%s\" has %lld NaN/Inf",
                 file_of(r, t), t->name, (long long)bad);
    *p = h;
    return LQ_OK;
}

static const int k_float_dts[] = {LQ_DT_F16, LQ_DT_BF16, LQ_DT_F32, -1};

static lq_status read_bias(const rd *r, int64_t n) {
    const lq_st_tensor *t;
    LQ_TRY(find(r, "bias", 0, &t));
    if (!t)
        return LQ_OK;
    LQ_TRY(expect(r, t, k_float_dts, 1, n, 0, "expected a float [out_features] bias"));
    return view_f16(r, t, &r->out->q.bias);
}

/* The descriptor rules (lq_check_*) restated as a checkpoint error naming the tensor. */
static lq_status finish(const rd *r, const char *main_tensor) {
    lq_err          e;
    const lq_status st = lq_format_traits_get((lq_format)r->out->q.format)->check(&r->out->q, &e);
    if (st != LQ_OK)
        return lq_fail(r->err, LQ_ERR_QFORMAT, "%s.%s: %s", r->prefix, main_tensor, e.msg);
    return LQ_OK;
}

static lq_status dims_match(const rd *r, const lq_st_tensor *t, int64_t n, int64_t k, int64_t n_exp,
                            int64_t k_exp) {
    if ((n_exp > 0 && n != n_exp) || (k_exp > 0 && k != k_exp))
        return lq_fail(r->err, LQ_ERR_QFORMAT,
                       "%s: tensor \"%s\" encodes a [%lld, %lld] linear, config.json expects "
                       "[%lld, %lld]",
                       file_of(r, t), t->name, (long long)n, (long long)k, (long long)n_exp,
                       (long long)k_exp);
    return LQ_OK;
}

lq_status lq_read_dense(const lq_st *st, const char *prefix, const lq_qconfig *c, int64_t n,
                        int64_t k, lq_qbuf *out, lq_err *err) {
    rd                  r = {st, prefix, out, err};
    const lq_st_tensor *t;
    LQ_TRY(find(&r, "weight", 1, &t));
    LQ_TRY(expect(&r, t, k_float_dts, 2, -1, -1, "expected a float [out, in] weight"));
    LQ_TRY(dims_match(&r, t, t->shape[0], t->shape[1], n, k));
    out->q.format = LQ_FMT_DENSE;
    out->q.n      = t->shape[0];
    out->q.k      = t->shape[1];
    if (t->dtype == LQ_DT_F32 && (uintptr_t)t->data % 4 == 0) {
        out->q.dense = t->data;
    } else {
        float *d = lq_qbuf_alloc(out, (size_t)t->numel * 4);
        LQ_RETURN_IF(!d, err, LQ_ERR_NOMEM, "%s: out of memory", t->name);
        LQ_TRY(lq_st_read_f32(st, t->name, 2, t->shape, d, err));
        out->q.dense = d;
    }
    LQ_TRY(read_bias(&r, out->q.n));
    return finish(&r, "weight");
}

lq_status lq_read_gptq(const lq_st *st, const char *prefix, const lq_qconfig *base, int64_t n_exp,
                       int64_t k_exp, lq_qbuf *out, lq_err *err) {
    rd                  r = {st, prefix, out, err};
    const lq_st_tensor *qw, *qz, *sc, *gi;
    lq_qconfig          eff; /* the module's own config ("dynamic" overrides applied) */
    int                 excluded;
    LQ_TRY(lq_qconfig_for_module(base, prefix, &eff, &excluded, err));
    const lq_qconfig *c     = &eff;
    const int         b     = c->bits;
    static const int    i32[] = {LQ_DT_I32, -1};
    lq_qlinear         *q     = &out->q;
    LQ_TRY(find(&r, "qweight", 1, &qw));
    LQ_TRY(expect(&r, qw, i32, 2, -1, -1, "GPTQ qweight is I32 [k*bits/32, n]"));
    LQ_RETURN_IF((qw->shape[0] * 32) % b != 0, err, LQ_ERR_QFORMAT,
                 "%s: tensor \"%s\" has %lld rows, not a whole number of %d-bit input channels",
                 file_of(&r, qw), qw->name, (long long)qw->shape[0], b);
    const int64_t n = qw->shape[1], k = qw->shape[0] * 32 / b;
    LQ_TRY(dims_match(&r, qw, n, k, n_exp, k_exp));
    const int64_t gs = c->group_size <= 0 || c->group_size > k ? k : c->group_size;
    const int64_t G  = (k + gs - 1) / gs;
    q->format        = LQ_FMT_GPTQ;
    q->bits          = b;
    q->n             = n;
    q->k             = k;
    q->group_size    = gs;
    LQ_TRY(find(&r, "qzeros", 1, &qz));
    LQ_TRY(find(&r, "scales", 1, &sc));
    LQ_TRY(find(&r, "g_idx", 0, &gi));
    LQ_TRY(expect(&r, sc, k_float_dts, 2, G, n, "expected float [groups, n] scales"));
    LQ_TRY(expect(&r, qz, i32, 2, G, n * b / 32, "expected I32 [groups, n*bits/32] qzeros"));
    LQ_TRY(view(&r, qw, &q->qweight));
    LQ_TRY(view_f16(&r, sc, (const uint16_t **)&q->scales));
    if (!c->gptq_v2) {
        LQ_TRY(view(&r, qz, &q->qzeros));
    } else { /* GPTQModel v2 stores z itself: rewrite as v1 (z - 1) fields */
        int32_t *z = lq_qbuf_alloc(out, (size_t)qz->nbytes);
        LQ_RETURN_IF(!z, err, LQ_ERR_NOMEM, "%s: out of memory", qz->name);
        memcpy(z, qz->data, (size_t)qz->nbytes);
        const int64_t zw = n * b / 32;
        for (int64_t g = 0; g < G; g++)
            for (int64_t i = 0; i < n; i++)
                lq_stream_put(z + g * zw, 1, i, b, lq_stream_get(z + g * zw, 1, i, b) - 1u);
        q->qzeros = z;
    }
    if (gi) {
        LQ_TRY(expect(&r, gi, i32, 1, k, 0, "expected I32 [in_features] g_idx"));
        LQ_TRY(view(&r, gi, (const void **)&q->g_idx));
        for (int64_t cc = 0; cc < k; cc++) {
            int32_t g;
            memcpy(&g, (const char *)q->g_idx + 4 * cc, 4);
            LQ_RETURN_IF(g < 0 || g >= G, err, LQ_ERR_QFORMAT,
                         "%s: tensor \"%s\"[%lld] = %d outside [0, %lld) groups", file_of(&r, gi),
                         gi->name, (long long)cc, g, (long long)G);
        }
    } else { /* checkpoints without act-order may omit it */
        /* with act-order the columns are permuted: identity groups would be wrong weights */
        LQ_RETURN_IF(c->desc_act, err, LQ_ERR_QFORMAT,
                     "%s: desc_act is true in quantize_config but \"%s.g_idx\" is missing",
                     file_of(&r, qw), prefix);
        int32_t *g = lq_qbuf_alloc(out, (size_t)k * 4);
        LQ_RETURN_IF(!g, err, LQ_ERR_NOMEM, "%s: out of memory", qw->name);
        for (int64_t cc = 0; cc < k; cc++)
            g[cc] = (int32_t)(cc / gs);
        q->g_idx = g;
    }
    LQ_TRY(read_bias(&r, n));
    return finish(&r, "qweight");
}

lq_status lq_read_awq(const lq_st *st, const char *prefix, const lq_qconfig *c, int64_t n_exp,
                      int64_t k_exp, lq_qbuf *out, lq_err *err) {
    rd                  r = {st, prefix, out, err};
    const lq_st_tensor *qw, *qz, *sc;
    static const int    i32[] = {LQ_DT_I32, -1};
    lq_qlinear         *q     = &out->q;
    LQ_TRY(find(&r, "qweight", 1, &qw));
    LQ_TRY(expect(&r, qw, i32, 2, -1, -1, "AWQ qweight is I32 [k, n/8]"));
    const int64_t k = qw->shape[0], n = qw->shape[1] * 8;
    LQ_TRY(dims_match(&r, qw, n, k, n_exp, k_exp));
    const int64_t gs = c->group_size <= 0 ? k : c->group_size;
    LQ_RETURN_IF(k % gs != 0, err, LQ_ERR_QFORMAT,
                 "%s: tensor \"%s\": in_features %lld not a multiple of group_size %lld",
                 file_of(&r, qw), qw->name, (long long)k, (long long)gs);
    const int64_t G = k / gs;
    q->format       = LQ_FMT_AWQ;
    q->bits         = 4;
    q->n            = n;
    q->k            = k;
    q->group_size   = gs;
    LQ_TRY(find(&r, "qzeros", 1, &qz));
    LQ_TRY(find(&r, "scales", 1, &sc));
    LQ_TRY(expect(&r, qz, i32, 2, G, n / 8, "expected I32 [k/group_size, n/8] qzeros"));
    LQ_TRY(expect(&r, sc, k_float_dts, 2, G, n, "expected float [k/group_size, n] scales"));
    LQ_TRY(view(&r, qw, &q->qweight));
    LQ_TRY(view(&r, qz, &q->qzeros));
    LQ_TRY(view_f16(&r, sc, (const uint16_t **)&q->scales));
    LQ_TRY(read_bias(&r, n));
    return finish(&r, "qweight");
}

/* bitsandbytes QuantState JSON (packed non-tensor fields). */
static lq_status nf4_state(const rd *r, const lq_st_tensor *t, char *qt, int64_t *bs, int64_t *n,
                           int64_t *k, int64_t *nbs, float *offset) {
    cJSON    *js = NULL;
    lq_status st;
    char      label[NAME_CAP + 64];
    snprintf(label, sizeof label, "%s: tensor \"%s\"", file_of(r, t), t->name);
    LQ_TRY(lq_json_parse(t->data, (size_t)t->nbytes, label, &js, r->err));
    const cJSON *shape  = cJSON_GetObjectItemCaseSensitive(js, "shape");
    char         dt[16] = "";
    *nbs                = 0;
    double off          = 0;
    LQ_TRY_GOTO(lq_json_get_str(js, "quant_type", 1, qt, 8, label, r->err));
    LQ_TRY_GOTO(lq_json_get_i64(js, "blocksize", 1, 1, INT64_MAX, bs, label, r->err));
    if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) != 2 ||
        !cJSON_IsNumber(cJSON_GetArrayItem(shape, 0)) ||
        !cJSON_IsNumber(cJSON_GetArrayItem(shape, 1)))
        LQ_FAIL_GOTO(r->err, LQ_ERR_QFORMAT, "%s: \"shape\" must be [out_features, in_features]",
                     label);
    *n = (int64_t)cJSON_GetArrayItem(shape, 0)->valuedouble;
    *k = (int64_t)cJSON_GetArrayItem(shape, 1)->valuedouble;
    if (cJSON_GetObjectItemCaseSensitive(js, "nested_blocksize")) {
        LQ_TRY_GOTO(lq_json_get_i64(js, "nested_blocksize", 1, 1, INT32_MAX, nbs, label, r->err));
        LQ_TRY_GOTO(lq_json_get_f64(js, "nested_offset", 1, &off, label, r->err));
        LQ_TRY_GOTO(lq_json_get_str(js, "nested_dtype", 0, dt, sizeof dt, label, r->err));
        if (dt[0] && strcmp(dt, "float32") != 0)
            LQ_FAIL_GOTO(r->err, LQ_ERR_UNSUPPORTED, "%s: nested_dtype \"%s\" (float32 only)",
                         label, dt);
    }
    *offset = (float)off;
    st      = LQ_OK;
done:
    cJSON_Delete(js);
    return st;
}

lq_status lq_read_nf4(const lq_st *st, const char *prefix, const lq_qconfig *c, int64_t n_exp,
                      int64_t k_exp, lq_qbuf *out, lq_err *err) {
    rd                  r  = {st, prefix, out, err};
    const lq_st_tensor *qs = NULL, *qw, *am, *qm, *na = NULL, *nc = NULL;
    static const int    u8[] = {LQ_DT_U8, -1}, f32[] = {LQ_DT_F32, -1};
    const char         *kinds[3] = {c->quant_type[0] ? c->quant_type : "nf4", "nf4", "fp4"};
    for (int i = 0; i < 3 && !qs; i++) {
        char suffix[64];
        snprintf(suffix, sizeof suffix, "weight.quant_state.bitsandbytes__%s", kinds[i]);
        LQ_TRY(find(&r, suffix, i == 2, &qs));
    }
    LQ_TRY(expect(&r, qs, u8, 1, -1, 0, "quant_state is U8 JSON bytes"));
    char    qt[8] = "";
    int64_t bs = 0, n = 0, k = 0, nbs = 0;
    float   offset = 0.f;
    LQ_TRY(nf4_state(&r, qs, qt, &bs, &n, &k, &nbs, &offset));
    LQ_RETURN_IF(strcmp(qt, "nf4") != 0 && strcmp(qt, "fp4") != 0, err, LQ_ERR_UNSUPPORTED,
                 "%s: tensor \"%s\": quant_type \"%s\"", file_of(&r, qs), qs->name, qt);
    LQ_TRY(dims_match(&r, qs, n, k, n_exp, k_exp));
    LQ_RETURN_IF(n <= 0 || k <= 0 || (n * k) % 2 != 0, err, LQ_ERR_UNSUPPORTED,
                 "%s: tensor \"%s\": shape [%lld, %lld] needs an even element count",
                 file_of(&r, qs), qs->name, (long long)n, (long long)k);
    const int64_t nb = (n * k + bs - 1) / bs;
    lq_qlinear   *q  = &out->q;
    q->format        = LQ_FMT_NF4;
    q->bits          = 4;
    q->n             = n;
    q->k             = k;
    q->group_size    = bs;
    LQ_TRY(find(&r, "weight", 1, &qw));
    LQ_TRY(find(&r, "weight.absmax", 1, &am));
    LQ_TRY(find(&r, "weight.quant_map", 1, &qm));
    LQ_TRY(expect(&r, qw, u8, -1, n * k / 2, 0, "expected U8 with n*k/2 packed codes"));
    LQ_TRY(expect(&r, qm, f32, 1, 16, 0, "expected F32 [16] code table"));
    if (nbs > 0) {
        const int64_t nnb = (nb + nbs - 1) / nbs;
        LQ_TRY(find(&r, "weight.nested_absmax", 1, &na));
        LQ_TRY(find(&r, "weight.nested_quant_map", 1, &nc));
        LQ_TRY(expect(&r, am, u8, 1, nb, 0, "double quant absmax is U8 [blocks]"));
        LQ_TRY(expect(&r, na, f32, 1, nnb, 0, "expected F32 [ceil(blocks/nested_blocksize)]"));
        LQ_TRY(expect(&r, nc, f32, 1, 256, 0, "expected F32 [256] code"));
        LQ_TRY(view(&r, na, (const void **)&q->nested_absmax));
        LQ_TRY(view(&r, nc, (const void **)&q->nested_code));
        q->nested_blocksize = (int32_t)nbs;
        q->nested_offset    = offset;
    } else {
        LQ_TRY(expect(&r, am, f32, 1, nb, 0, "absmax is F32 [blocks]"));
    }
    LQ_TRY(view(&r, qw, &q->qweight));
    LQ_TRY(view(&r, am, &q->absmax));
    LQ_TRY(view(&r, qm, (const void **)&q->quant_map));
    LQ_TRY(read_bias(&r, n));
    return finish(&r, "weight");
}

lq_status lq_read_int8(const lq_st *st, const char *prefix, const lq_qconfig *c, int64_t n_exp,
                       int64_t k_exp, lq_qbuf *out, lq_err *err) {
    rd                  r = {st, prefix, out, err};
    const lq_st_tensor *cb, *scb, *wf, *oi, *ow;
    static const int    i8[] = {LQ_DT_I8, -1}, f32[] = {LQ_DT_F32, -1}, u8[] = {LQ_DT_U8, -1},
                     i32[] = {LQ_DT_I32, -1}, f16[] = {LQ_DT_F16, -1};
    lq_qlinear *q = &out->q;
    LQ_TRY(find(&r, "weight", 1, &cb));
    LQ_TRY(expect(&r, cb, i8, 2, -1, -1, "LLM.int8 weight is I8 [n, k]"));
    const int64_t n = cb->shape[0], k = cb->shape[1];
    LQ_TRY(dims_match(&r, cb, n, k, n_exp, k_exp));
    LQ_TRY(find(&r, "SCB", 1, &scb));
    LQ_TRY(expect(&r, scb, f32, 1, n, 0, "expected F32 [out_features] SCB"));
    LQ_TRY(find(&r, "weight_format", 0, &wf));
    if (wf) {
        LQ_TRY(expect(&r, wf, u8, -1, 1, 0, "weight_format is a U8 scalar"));
        const uint8_t v = *(const uint8_t *)wf->data;
        LQ_RETURN_IF(v != 0, err, LQ_ERR_UNSUPPORTED,
                     "%s: tensor \"%s\" = %u: only the row-major format (0) is supported",
                     file_of(&r, wf), wf->name, v);
    }
    q->format    = LQ_FMT_INT8;
    q->bits      = 8;
    q->n         = n;
    q->k         = k;
    q->threshold = (float)c->int8_threshold;
    LQ_TRY(view(&r, cb, &q->qweight));
    LQ_TRY(view(&r, scb, (const void **)&q->scb));
    LQ_TRY(find(&r, "outlier_idx", 0, &oi));
    LQ_TRY(find(&r, "outlier_weight", 0, &ow));
    LQ_RETURN_IF(!oi != !ow, err, LQ_ERR_QFORMAT, "%s: tensor \"%s\" without its .%s",
                 file_of(&r, oi ? oi : ow), (oi ? oi : ow)->name,
                 oi ? "outlier_weight" : "outlier_idx");
    if (oi) {
        LQ_TRY(expect(&r, oi, i32, 1, -1, 0, "expected I32 [n_outlier] outlier_idx"));
        const int64_t no = oi->shape[0];
        LQ_TRY(expect(&r, ow, f16, 2, n, no, "expected F16 [out_features, n_outlier]"));
        LQ_TRY(view(&r, oi, (const void **)&q->outlier_idx));
        LQ_TRY(view(&r, ow, (const void **)&q->outlier_w));
        for (int64_t j = 0; j < no; j++) {
            const int32_t v = q->outlier_idx[j];
            LQ_RETURN_IF(v < 0 || v >= k || (j > 0 && v <= q->outlier_idx[j - 1]), err,
                         LQ_ERR_QFORMAT,
                         "%s: tensor \"%s\"[%lld] = %d: columns must be strictly increasing in "
                         "[0, %lld)",
                         file_of(&r, oi), oi->name, (long long)j, v, (long long)k);
        }
        q->n_outlier = no;
    }
    LQ_TRY(read_bias(&r, n));
    return finish(&r, "weight");
}

lq_status lq_qlinear_read(const lq_st *st, const char *prefix, const lq_qconfig *c, int64_t n,
                          int64_t k, lq_qbuf *out, lq_err *err) {
    memset(out, 0, sizeof *out);
    LQ_RETURN_IF(!st || !prefix || !c, err, LQ_ERR_INVALID_ARG, "lq_qlinear_read: NULL argument");
    const lq_format_traits *t = lq_format_traits_get(c->format);
    LQ_RETURN_IF(!t || !t->read_tensors, err, LQ_ERR_UNSUPPORTED,
                 "%s: no tensor reader for format %d", prefix, (int)c->format);
    const lq_status s = t->read_tensors(st, prefix, c, n, k, out, err);
    if (s != LQ_OK)
        lq_qbuf_free(out);
    return s;
}

/* ---------------------------------------------------------------------------------------
 * Listing
 * --------------------------------------------------------------------------------------- */
static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int ends_with(const char *s, const char *suf, size_t *stem) {
    const size_t ls = strlen(s), lf = strlen(suf);
    if (ls <= lf || strcmp(s + ls - lf, suf) != 0)
        return 0;
    *stem = ls - lf;
    return 1;
}

lq_status lq_qlinear_list(const lq_st *st, const lq_qconfig *c, char ***names, int64_t *count,
                          lq_err *err) {
    *names              = NULL;
    *count              = 0;
    const int64_t nt    = lq_st_count(st);
    size_t        bytes = 0;
    int64_t       cnt   = 0;
    for (int pass = 0; pass < 2; pass++) {
        char  **arr = pass ? *names : NULL;
        char   *s   = pass ? (char *)(arr + cnt) : NULL;
        int64_t j   = 0;
        for (int64_t i = 0; i < nt; i++) {
            const lq_st_tensor *t = lq_st_get(st, i);
            size_t              stem;
            int                 hit = 0;
            switch (c->format) {
            case LQ_FMT_GPTQ:
            case LQ_FMT_AWQ:
                hit = ends_with(t->name, ".qweight", &stem);
                break;
            case LQ_FMT_NF4:
                hit = ends_with(t->name, ".weight.quant_state.bitsandbytes__nf4", &stem) ||
                      ends_with(t->name, ".weight.quant_state.bitsandbytes__fp4", &stem);
                break;
            case LQ_FMT_INT8:
                hit = ends_with(t->name, ".SCB", &stem);
                break;
            default:
                hit = ends_with(t->name, ".weight", &stem) && t->ndim == 2 &&
                      lq_dtype_is_float(t->dtype) && !strstr(t->name, "embed") &&
                      !strstr(t->name, ".wte.");
                break;
            }
            if (!hit)
                continue;
            if (!pass) {
                cnt++;
                bytes += stem + 1;
            } else {
                memcpy(s, t->name, stem);
                s[stem]  = 0;
                arr[j++] = s;
                s += stem + 1;
            }
        }
        if (!pass) {
            *names = malloc((size_t)cnt * sizeof(char *) + bytes + 1);
            LQ_RETURN_IF(!*names, err, LQ_ERR_NOMEM, "out of memory listing linears");
        }
    }
    qsort(*names, (size_t)cnt, sizeof(char *), cmp_str);
    *count = cnt;
    return LQ_OK;
}

/* ---------------------------------------------------------------------------------------
 * quantization_config
 * --------------------------------------------------------------------------------------- */
void lq_qconfig_default(lq_format f, lq_qconfig *c) {
    memset(c, 0, sizeof *c);
    c->format = f;
    snprintf(c->torch_dtype, sizeof c->torch_dtype, "float16");
    switch (f) {
    case LQ_FMT_GPTQ:
        c->bits            = 4;
        c->group_size      = 128;
        c->sym             = 1;
        c->true_sequential = 1;
        c->damp_percent    = 0.01;
        snprintf(c->model_file_base_name, sizeof c->model_file_base_name, "model");
        break;
    case LQ_FMT_AWQ:
        c->bits       = 4;
        c->group_size = 128;
        c->zero_point = 1;
        break;
    case LQ_FMT_NF4:
    case LQ_FMT_INT8:
        c->bits           = f == LQ_FMT_NF4 ? 4 : 8;
        c->group_size     = f == LQ_FMT_NF4 ? 64 : 0;
        c->int8_threshold = 6.0;
        snprintf(c->quant_type, sizeof c->quant_type, f == LQ_FMT_NF4 ? "nf4" : "fp4");
        snprintf(c->compute_dtype, sizeof c->compute_dtype, "float32");
        break;
    default:
        break;
    }
}

void lq_qconfig_free(lq_qconfig *c) {
    if (!c)
        return;
    for (int64_t i = 0; i < c->n_outlier_modules; i++)
        free(c->outlier_modules[i]);
    free(c->outlier_modules);
    c->outlier_modules   = NULL;
    c->n_outlier_modules = 0;
    for (int64_t i = 0; i < c->n_dynamic; i++) {
        free(c->dynamic[i].pattern);
        pcre2_code_free(c->dynamic[i].re);
    }
    free(c->dynamic);
    c->dynamic   = NULL;
    c->n_dynamic = 0;
}

lq_status lq_qconfig_add_rule(lq_qconfig *c, const char *pattern, int negative, int bits,
                              int64_t group_size, int sym, int desc_act, const char *label,
                              lq_err *err) {
    int        ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                                   PCRE2_ANCHORED | PCRE2_UTF, &ec, &eo, NULL);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        LQ_FAIL(err, LQ_ERR_CONFIG_VALUE, "%s: \"dynamic\" pattern \"%.120s\": %s at offset %zu",
                label, pattern, (const char *)msg, (size_t)eo);
    }
    lq_qrule *a = realloc(c->dynamic, (size_t)(c->n_dynamic + 1) * sizeof *a);
    char     *p = strdup(pattern);
    if (!a || !p) {
        pcre2_code_free(re);
        free(p);
        if (a)
            c->dynamic = a;
        LQ_FAIL(err, LQ_ERR_NOMEM, "out of memory");
    }
    c->dynamic                 = a;
    a[c->n_dynamic++]          = (lq_qrule){p, re, negative, bits, group_size, sym, desc_act};
    return LQ_OK;
}

lq_status lq_qconfig_for_module(const lq_qconfig *c, const char *module, lq_qconfig *eff,
                                int *excluded, lq_err *err) {
    *eff                   = *c;
    eff->dynamic           = NULL;
    eff->n_dynamic         = 0;
    eff->outlier_modules   = NULL;
    eff->n_outlier_modules = 0;
    *excluded              = 0;
    if (c->n_dynamic == 0)
        return LQ_OK;
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    LQ_RETURN_IF(!md, err, LQ_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < c->n_dynamic; i++) {
        const lq_qrule *r = &c->dynamic[i];
        const int       m = pcre2_match(r->re, (PCRE2_SPTR)module, PCRE2_ZERO_TERMINATED, 0,
                                        PCRE2_ANCHORED, md, NULL);
        if (m < 0)
            continue;
        *excluded = r->negative;
        if (r->bits > 0)
            eff->bits = r->bits;
        if (r->group_size != 0)
            eff->group_size = r->group_size;
        if (r->sym >= 0)
            eff->sym = r->sym;
        if (r->desc_act >= 0)
            eff->desc_act = r->desc_act;
        break;
    }
    pcre2_match_data_free(md);
    return LQ_OK;
}

lq_status lq_qconfig_add_outlier_module(lq_qconfig *c, const char *module, lq_err *err) {
    char **a = realloc(c->outlier_modules, (size_t)(c->n_outlier_modules + 1) * sizeof *a);
    LQ_RETURN_IF(!a, err, LQ_ERR_NOMEM, "out of memory");
    c->outlier_modules      = a;
    a[c->n_outlier_modules] = strdup(module);
    LQ_RETURN_IF(!a[c->n_outlier_modules], err, LQ_ERR_NOMEM, "out of memory");
    c->n_outlier_modules++;
    return LQ_OK;
}

static int add_ok(cJSON *o, const char *key, cJSON *v) {
    return v && cJSON_AddItemToObject(o, key, v);
}
#define ADD(o, key, v)                                                                             \
    do {                                                                                           \
        if (!add_ok((o), (key), (v)))                                                              \
            LQ_FAIL(err, LQ_ERR_NOMEM, "out of memory building quantization_config");              \
    } while (0)

static cJSON *str_or_null(const char *s) {
    return s && *s ? cJSON_CreateString(s) : cJSON_CreateNull();
}

static cJSON *skip_list(const lq_qconfig *c) {
    if (!c->has_skip)
        return cJSON_CreateNull();
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < c->n_skip; i++)
        cJSON_AddItemToArray(a, cJSON_CreateString(c->skip[i]));
    return a;
}

lq_status lq_hfcfg_write_dense(const lq_qconfig *c, cJSON *qc, lq_err *err) {
    return lq_fail(err, LQ_ERR_INVALID_ARG, "an unquantized model has no quantization_config");
}

/* AutoGPTQ BaseQuantizeConfig.to_dict (+ checkpoint_format of later AutoGPTQ/GPTQModel). */
lq_status lq_hfcfg_write_gptq(const lq_qconfig *c, cJSON *qc, lq_err *err) {
    ADD(qc, "bits", cJSON_CreateNumber(c->bits));
    ADD(qc, "group_size", cJSON_CreateNumber((double)(c->group_size > 0 ? c->group_size : -1)));
    ADD(qc, "damp_percent", cJSON_CreateNumber(c->damp_percent));
    ADD(qc, "desc_act", cJSON_CreateBool(c->desc_act));
    ADD(qc, "static_groups", cJSON_CreateBool(c->static_groups));
    ADD(qc, "sym", cJSON_CreateBool(c->sym));
    ADD(qc, "true_sequential", cJSON_CreateBool(c->true_sequential));
    ADD(qc, "model_name_or_path", str_or_null(c->model_name_or_path));
    ADD(qc, "model_file_base_name", str_or_null(c->model_file_base_name));
    ADD(qc, "quant_method", cJSON_CreateString("gptq"));
    ADD(qc, "checkpoint_format", cJSON_CreateString("gptq"));
    if (c->n_dynamic > 0) { /* GPTQModel / vLLM per-module overrides */
        cJSON *dyn = cJSON_CreateObject();
        ADD(qc, "dynamic", dyn);
        for (int64_t i = 0; i < c->n_dynamic; i++) {
            const lq_qrule *r = &c->dynamic[i];
            char            key[4096];
            cJSON          *o = cJSON_CreateObject();
            snprintf(key, sizeof key, "%s%s", r->negative ? "-:" : "+:", r->pattern);
            ADD(dyn, key, o);
            if (r->bits > 0)
                ADD(o, "bits", cJSON_CreateNumber(r->bits));
            if (r->group_size != 0)
                ADD(o, "group_size", cJSON_CreateNumber((double)r->group_size));
            if (r->sym >= 0)
                ADD(o, "sym", cJSON_CreateBool(r->sym));
            if (r->desc_act >= 0)
                ADD(o, "desc_act", cJSON_CreateBool(r->desc_act));
        }
    }
    return LQ_OK;
}

/* AutoAWQ AwqConfig.to_transformers_dict. */
lq_status lq_hfcfg_write_awq(const lq_qconfig *c, cJSON *qc, lq_err *err) {
    ADD(qc, "quant_method", cJSON_CreateString("awq"));
    ADD(qc, "zero_point", cJSON_CreateBool(1));
    ADD(qc, "group_size", cJSON_CreateNumber((double)c->group_size));
    ADD(qc, "bits", cJSON_CreateNumber(4));
    ADD(qc, "version", cJSON_CreateString("gemm"));
    ADD(qc, "modules_to_not_convert", skip_list(c));
    return LQ_OK;
}

/* A JSON number that Python reads back as a float: transformers type-checks some fields
 * (BitsAndBytesConfig.post_init: "llm_int8_threshold must be a float"), and cJSON would print
 * 6.0 as the integer 6. */
static cJSON *json_float(double v) {
    char buf[64];
    snprintf(buf, sizeof buf, "%.17g", v);
    if (!strpbrk(buf, ".eEn")) /* integral and finite: add the fraction */
        strncat(buf, ".0", sizeof buf - strlen(buf) - 1);
    return cJSON_CreateRaw(buf);
}

/* transformers BitsAndBytesConfig.to_dict (copies __dict__, so the private _load_in_* too). */
static lq_status bnb_write(const lq_qconfig *c, cJSON *qc, int four, lq_err *err) {
    ADD(qc, "quant_method", cJSON_CreateString("bitsandbytes"));
    ADD(qc, "_load_in_8bit", cJSON_CreateBool(!four));
    ADD(qc, "_load_in_4bit", cJSON_CreateBool(four));
    ADD(qc, "llm_int8_threshold", json_float(c->int8_threshold));
    ADD(qc, "llm_int8_skip_modules", skip_list(c));
    ADD(qc, "llm_int8_enable_fp32_cpu_offload", cJSON_CreateBool(c->int8_fp32_cpu_offload));
    ADD(qc, "llm_int8_has_fp16_weight", cJSON_CreateBool(0));
    ADD(qc, "bnb_4bit_quant_type", cJSON_CreateString(c->quant_type[0] ? c->quant_type : "fp4"));
    ADD(qc, "bnb_4bit_use_double_quant", cJSON_CreateBool(four && c->double_quant));
    ADD(qc, "bnb_4bit_compute_dtype",
        cJSON_CreateString(c->compute_dtype[0] ? c->compute_dtype : "float32"));
    ADD(qc, "bnb_4bit_quant_storage", cJSON_CreateString("uint8"));
    ADD(qc, "load_in_4bit", cJSON_CreateBool(four));
    ADD(qc, "load_in_8bit", cJSON_CreateBool(!four));
    return LQ_OK;
}

lq_status lq_hfcfg_write_nf4(const lq_qconfig *c, cJSON *qc, lq_err *err) {
    return bnb_write(c, qc, 1, err);
}

lq_status lq_hfcfg_write_int8(const lq_qconfig *c, cJSON *qc, lq_err *err) {
    LQ_TRY(bnb_write(c, qc, 0, err));
    if (c->n_outlier_modules > 0) { /* llmquant's fp16 calibration outlier columns */
        cJSON *a = cJSON_CreateArray();
        ADD(qc, "llmquant_int8_outlier_modules", a);
        for (int64_t i = 0; i < c->n_outlier_modules; i++)
            if (!cJSON_AddItemToArray(a, cJSON_CreateString(c->outlier_modules[i])))
                LQ_FAIL(err, LQ_ERR_NOMEM, "out of memory building quantization_config");
    }
    return LQ_OK;
}
#undef ADD

lq_status lq_qconfig_to_json(const lq_qconfig *c, cJSON **out, lq_err *err) {
    *out                      = NULL;
    const lq_format_traits *t = lq_format_traits_get(c->format);
    LQ_RETURN_IF(!t || !t->write_hf_config, err, LQ_ERR_UNSUPPORTED,
                 "no quantization_config writer for format %d", (int)c->format);
    cJSON *qc = cJSON_CreateObject();
    LQ_RETURN_IF(!qc, err, LQ_ERR_NOMEM, "out of memory");
    const lq_status st = t->write_hf_config(c, qc, err);
    if (st != LQ_OK) {
        cJSON_Delete(qc);
        return st;
    }
    *out = qc;
    return LQ_OK;
}

lq_status lq_qconfig_apply(const lq_qconfig *c, cJSON *config_root, const char *dir, lq_err *err) {
    cJSON *qc;
    LQ_TRY(lq_qconfig_to_json(c, &qc, err));
    cJSON_DeleteItemFromObjectCaseSensitive(config_root, "quantization_config");
    if (!cJSON_AddItemToObject(config_root, "quantization_config", qc)) {
        cJSON_Delete(qc);
        LQ_FAIL(err, LQ_ERR_NOMEM, "out of memory");
    }
    if (c->format == LQ_FMT_GPTQ && dir) { /* AutoGPTQ save_quantized writes both files */
        char path[4096];
        LQ_RETURN_IF(!lq_path_join(path, sizeof path, dir, "quantize_config.json"), err,
                     LQ_ERR_INVALID_ARG, "%s: path too long", dir);
        LQ_TRY(lq_json_write_file(qc, path, err));
    }
    return LQ_OK;
}

/* --- parsing ---------------------------------------------------------------------------- */
static int key_present(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return v && !cJSON_IsNull(v);
}

static int ieq(const char *a, const char *b) {
    for (; *a && *b; a++, b++)
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b))
            return 0;
    return *a == *b;
}

/* First present key among synonyms (NULL-terminated); NULL if none. */
static const char *synonym(const cJSON *o, const char *const *keys) {
    for (int i = 0; keys[i]; i++)
        if (key_present(o, keys[i]))
            return keys[i];
    return NULL;
}

static lq_status get_bool_opt(const cJSON *o, const char *key, int *v, const char *label,
                              lq_err *err) {
    return key_present(o, key) ? lq_json_get_bool(o, key, 0, v, label, err) : LQ_OK;
}

static lq_status parse_skip(const cJSON *o, const char *key, lq_qconfig *c, const char *label,
                            lq_err *err) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!a || cJSON_IsNull(a))
        return LQ_OK;
    LQ_RETURN_IF(!cJSON_IsArray(a), err, LQ_ERR_CONFIG_VALUE,
                 "%s: key \"%s\" must be a list of module names or null", label, key);
    LQ_RETURN_IF(cJSON_GetArraySize(a) > LQ_QCFG_MAX_SKIP, err, LQ_ERR_UNSUPPORTED,
                 "%s: key \"%s\" lists more than %d modules", label, key, LQ_QCFG_MAX_SKIP);
    c->has_skip = 1;
    c->n_skip   = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, a) {
        LQ_RETURN_IF(!cJSON_IsString(it) || strlen(it->valuestring) >= sizeof c->skip[0], err,
                     LQ_ERR_CONFIG_VALUE, "%s: key \"%s\" has a bad module name", label, key);
        snprintf(c->skip[c->n_skip++], sizeof c->skip[0], "%s", it->valuestring);
    }
    return LQ_OK;
}

lq_status lq_hfcfg_parse_dense(const cJSON *qc, const char *label, lq_qconfig *c, lq_err *err) {
    return LQ_OK;
}

/* GPTQModel's "dynamic": {"+:regex": {"bits": 8, ...}, "-:regex": {}, ...}. Keys other than
 * bits / group_size / sym / desc_act (adapters, GPTQModel-only knobs) do not change the stored
 * layout and are ignored. */
static lq_status parse_dynamic(const cJSON *qc, const char *label, lq_qconfig *c, lq_err *err) {
    const cJSON *dyn = cJSON_GetObjectItemCaseSensitive(qc, "dynamic");
    if (!dyn || cJSON_IsNull(dyn))
        return LQ_OK;
    LQ_RETURN_IF(!cJSON_IsObject(dyn), err, LQ_ERR_CONFIG_VALUE,
                 "%s: key \"dynamic\" is not an object", label);
    const cJSON *it;
    cJSON_ArrayForEach(it, dyn) {
        const char *key = it->string ? it->string : "";
        const int   neg = !strncmp(key, "-:", 2), pre = neg || !strncmp(key, "+:", 2);
        char        sub[4200];
        snprintf(sub, sizeof sub, "%s: \"dynamic\" rule \"%.120s\"", label, key);
        LQ_RETURN_IF(!cJSON_IsObject(it), err, LQ_ERR_CONFIG_VALUE, "%s is not an object", sub);
        int64_t bits = 0, gs = 0;
        int     sym = -1, da = -1;
        if (key_present(it, "bits")) {
            LQ_TRY(lq_json_get_i64(it, "bits", 1, 0, 64, &bits, sub, err));
            LQ_RETURN_IF(bits != 2 && bits != 3 && bits != 4 && bits != 8, err,
                         LQ_ERR_UNSUPPORTED, "%s: \"bits\" = %lld (GPTQ kernels: 2, 3, 4, 8)",
                         sub, (long long)bits);
        }
        if (key_present(it, "group_size")) {
            LQ_TRY(lq_json_get_i64(it, "group_size", 1, -1, INT32_MAX, &gs, sub, err));
            LQ_RETURN_IF(gs == 0, err, LQ_ERR_CONFIG_VALUE, "%s: \"group_size\" = 0", sub);
        }
        if (key_present(it, "sym"))
            LQ_TRY(get_bool_opt(it, "sym", &sym, sub, err));
        if (key_present(it, "desc_act"))
            LQ_TRY(get_bool_opt(it, "desc_act", &da, sub, err));
        LQ_TRY(lq_qconfig_add_rule(c, key + (pre ? 2 : 0), neg, (int)bits, gs, sym, da, label,
                                   err));
    }
    return LQ_OK;
}

lq_status lq_hfcfg_parse_gptq(const cJSON *qc, const char *label, lq_qconfig *c, lq_err *err) {
    int64_t bits = 4, gs = 128;
    LQ_TRY(lq_json_get_i64(qc, "bits", 1, 0, 64, &bits, label, err));
    LQ_RETURN_IF(bits != 2 && bits != 3 && bits != 4 && bits != 8, err, LQ_ERR_UNSUPPORTED,
                 "%s: key \"bits\" = %lld (GPTQ kernels: 2, 3, 4, 8)", label, (long long)bits);
    const char *gk = synonym(qc, (const char *const[]){"group_size", "q_group_size", NULL});
    if (gk)
        LQ_TRY(lq_json_get_i64(qc, gk, 1, -1, INT32_MAX, &gs, label, err));
    LQ_RETURN_IF(gs == 0, err, LQ_ERR_CONFIG_VALUE, "%s: key \"%s\" = 0", label, gk);
    c->bits       = (int)bits;
    c->group_size = gs;
    LQ_TRY(get_bool_opt(qc, "sym", &c->sym, label, err));
    LQ_TRY(get_bool_opt(qc, "desc_act", &c->desc_act, label, err));
    LQ_TRY(get_bool_opt(qc, "static_groups", &c->static_groups, label, err));
    LQ_TRY(get_bool_opt(qc, "true_sequential", &c->true_sequential, label, err));
    if (key_present(qc, "damp_percent"))
        LQ_TRY(lq_json_get_f64(qc, "damp_percent", 0, &c->damp_percent, label, err));
    if (key_present(qc, "model_name_or_path"))
        LQ_TRY(lq_json_get_str(qc, "model_name_or_path", 0, c->model_name_or_path,
                               sizeof c->model_name_or_path, label, err));
    if (key_present(qc, "model_file_base_name"))
        LQ_TRY(lq_json_get_str(qc, "model_file_base_name", 0, c->model_file_base_name,
                               sizeof c->model_file_base_name, label, err));
    int marlin = 0;
    LQ_TRY(get_bool_opt(qc, "is_marlin_format", &marlin, label, err));
    LQ_RETURN_IF(marlin, err, LQ_ERR_UNSUPPORTED,
                 "%s: key \"is_marlin_format\" = true (Marlin-repacked GPTQ is not supported)",
                 label);
    const char *fk = synonym(qc, (const char *const[]){"checkpoint_format", "format", NULL});
    if (fk) {
        char f[32];
        LQ_TRY(lq_json_get_str(qc, fk, 1, f, sizeof f, label, err));
        if (ieq(f, "gptq_v2"))
            c->gptq_v2 = 1;
        else
            LQ_RETURN_IF(!ieq(f, "gptq"), err, LQ_ERR_UNSUPPORTED,
                         "%s: key \"%s\" = \"%s\" (supported: gptq, gptq_v2)", label, fk, f);
    }
    return parse_dynamic(qc, label, c, err);
}

lq_status lq_hfcfg_parse_awq(const cJSON *qc, const char *label, lq_qconfig *c, lq_err *err) {
    int64_t     bits = 4, gs = 128;
    const char *bk = synonym(qc, (const char *const[]){"bits", "w_bit", NULL});
    const char *gk = synonym(qc, (const char *const[]){"group_size", "q_group_size", NULL});
    LQ_RETURN_IF(!gk, err, LQ_ERR_CONFIG_MISSING_KEY, "%s: key \"group_size\" is missing", label);
    if (bk)
        LQ_TRY(lq_json_get_i64(qc, bk, 1, 0, 64, &bits, label, err));
    LQ_TRY(lq_json_get_i64(qc, gk, 1, -1, INT32_MAX, &gs, label, err));
    LQ_RETURN_IF(bits != 4, err, LQ_ERR_UNSUPPORTED, "%s: key \"%s\" = %lld (AWQ GEMM is 4-bit)",
                 label, bk, (long long)bits);
    LQ_RETURN_IF(gs == 0, err, LQ_ERR_CONFIG_VALUE, "%s: key \"%s\" = 0", label, gk);
    c->bits       = 4;
    c->group_size = gs;
    c->zero_point = 1;
    LQ_TRY(get_bool_opt(qc, "zero_point", &c->zero_point, label, err));
    LQ_RETURN_IF(!c->zero_point, err, LQ_ERR_UNSUPPORTED,
                 "%s: key \"zero_point\" = false (AWQ GEMM kernels need zero points)", label);
    const char *vk = synonym(qc, (const char *const[]){"version", "format", NULL});
    if (vk) {
        char v[32];
        LQ_TRY(lq_json_get_str(qc, vk, 1, v, sizeof v, label, err));
        LQ_RETURN_IF(!ieq(v, "gemm"), err, LQ_ERR_UNSUPPORTED,
                     "%s: key \"%s\" = \"%s\" (only the AutoAWQ GEMM layout is supported)", label,
                     vk, v);
    }
    return parse_skip(qc, "modules_to_not_convert", c, label, err);
}

static lq_status bnb_parse(const cJSON *qc, const char *label, lq_qconfig *c, lq_err *err) {
    if (key_present(qc, "llm_int8_threshold"))
        LQ_TRY(lq_json_get_f64(qc, "llm_int8_threshold", 0, &c->int8_threshold, label, err));
    LQ_RETURN_IF(!(c->int8_threshold >= 0) || !isfinite(c->int8_threshold), err,
                 LQ_ERR_CONFIG_VALUE, "%s: key \"llm_int8_threshold\" = %g", label,
                 c->int8_threshold);
    LQ_TRY(get_bool_opt(qc, "llm_int8_enable_fp32_cpu_offload", &c->int8_fp32_cpu_offload, label,
                        err));
    int fp16w = 0;
    LQ_TRY(get_bool_opt(qc, "llm_int8_has_fp16_weight", &fp16w, label, err));
    LQ_RETURN_IF(fp16w, err, LQ_ERR_UNSUPPORTED,
                 "%s: key \"llm_int8_has_fp16_weight\" = true (weights not stored quantized)",
                 label);
    if (key_present(qc, "bnb_4bit_quant_type"))
        LQ_TRY(lq_json_get_str(qc, "bnb_4bit_quant_type", 0, c->quant_type, sizeof c->quant_type,
                               label, err));
    LQ_TRY(get_bool_opt(qc, "bnb_4bit_use_double_quant", &c->double_quant, label, err));
    if (key_present(qc, "bnb_4bit_compute_dtype"))
        LQ_TRY(lq_json_get_str(qc, "bnb_4bit_compute_dtype", 0, c->compute_dtype,
                               sizeof c->compute_dtype, label, err));
    if (key_present(qc, "bnb_4bit_quant_storage")) {
        char s[16];
        LQ_TRY(lq_json_get_str(qc, "bnb_4bit_quant_storage", 0, s, sizeof s, label, err));
        LQ_RETURN_IF(strcmp(s, "uint8") != 0, err, LQ_ERR_UNSUPPORTED,
                     "%s: key \"bnb_4bit_quant_storage\" = \"%s\" (uint8 only)", label, s);
    }
    return parse_skip(qc, "llm_int8_skip_modules", c, label, err);
}

lq_status lq_hfcfg_parse_nf4(const cJSON *qc, const char *label, lq_qconfig *c, lq_err *err) {
    LQ_TRY(bnb_parse(qc, label, c, err));
    LQ_RETURN_IF(strcmp(c->quant_type, "nf4") != 0 && strcmp(c->quant_type, "fp4") != 0, err,
                 LQ_ERR_UNSUPPORTED, "%s: key \"bnb_4bit_quant_type\" = \"%s\" (nf4, fp4)", label,
                 c->quant_type);
    return LQ_OK;
}

lq_status lq_hfcfg_parse_int8(const cJSON *qc, const char *label, lq_qconfig *c, lq_err *err) {
    LQ_TRY(bnb_parse(qc, label, c, err));
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(qc, "llmquant_int8_outlier_modules");
    if (a && !cJSON_IsNull(a)) {
        LQ_RETURN_IF(!cJSON_IsArray(a), err, LQ_ERR_CONFIG_VALUE,
                     "%s: key \"llmquant_int8_outlier_modules\" must be a list", label);
        const cJSON *it;
        cJSON_ArrayForEach(it, a) {
            LQ_RETURN_IF(!cJSON_IsString(it), err, LQ_ERR_CONFIG_VALUE,
                         "%s: key \"llmquant_int8_outlier_modules\" has a non-string entry", label);
            LQ_TRY(lq_qconfig_add_outlier_module(c, it->valuestring, err));
        }
    }
    return LQ_OK;
}

static lq_status parse_qc(const cJSON *qc, const char *label, const char *torch_dtype,
                          lq_qconfig *out, lq_err *err) {
    LQ_RETURN_IF(!cJSON_IsObject(qc), err, LQ_ERR_CONFIG_VALUE,
                 "%s: quantization_config must be an object", label);
    char         qm[64] = "";
    lq_format    f;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(qc, "quant_method");
    if (v && !cJSON_IsNull(v))
        LQ_TRY(lq_json_get_str(qc, "quant_method", 1, qm, sizeof qm, label, err));
    if (!qm[0]) { /* older AutoGPTQ/AutoAWQ files carry no quant_method */
        if (key_present(qc, "w_bit") || key_present(qc, "version") || key_present(qc, "zero_point"))
            snprintf(qm, sizeof qm, "awq");
        else if (key_present(qc, "load_in_4bit") || key_present(qc, "load_in_8bit"))
            snprintf(qm, sizeof qm, "bitsandbytes");
        else if (key_present(qc, "bits"))
            snprintf(qm, sizeof qm, "gptq");
        else
            LQ_FAIL(err, LQ_ERR_CONFIG_MISSING_KEY, "%s: key \"quant_method\" is missing", label);
    }
    if (ieq(qm, "gptq")) {
        f = LQ_FMT_GPTQ;
    } else if (ieq(qm, "awq")) {
        f = LQ_FMT_AWQ;
    } else if (ieq(qm, "bitsandbytes")) {
        int l4 = 0, l8 = 0;
        LQ_TRY(get_bool_opt(qc, "load_in_4bit", &l4, label, err));
        LQ_TRY(get_bool_opt(qc, "load_in_8bit", &l8, label, err));
        LQ_RETURN_IF(l4 == l8, err, LQ_ERR_CONFIG_VALUE,
                     "%s: exactly one of \"load_in_4bit\" / \"load_in_8bit\" must be true", label);
        f = l4 ? LQ_FMT_NF4 : LQ_FMT_INT8;
    } else {
        LQ_FAIL(err, LQ_ERR_UNSUPPORTED,
                "%s: key \"quant_method\" = \"%s\" (supported: gptq, awq, "
                "bitsandbytes)",
                label, qm);
    }
    lq_qconfig_default(f, out);
    if (torch_dtype && torch_dtype[0])
        snprintf(out->torch_dtype, sizeof out->torch_dtype, "%s", torch_dtype);
    const lq_status st = lq_format_traits_get(f)->parse_hf_config(qc, label, out, err);
    if (st != LQ_OK)
        lq_qconfig_free(out);
    return st;
}

lq_status lq_qconfig_parse_qc(const cJSON *qc, const char *label, lq_qconfig *out, lq_err *err) {
    memset(out, 0, sizeof *out);
    return parse_qc(qc, label, NULL, out, err);
}

lq_status lq_qconfig_parse(const cJSON *root, const char *label, lq_qconfig *out, lq_err *err) {
    memset(out, 0, sizeof *out);
    LQ_RETURN_IF(!cJSON_IsObject(root), err, LQ_ERR_CONFIG_VALUE, "%s: not a JSON object", label);
    /* model dtype: transformers < 5 "torch_dtype", >= 5 "dtype" */
    char        td[16] = "";
    const char *dk     = synonym(root, (const char *const[]){"torch_dtype", "dtype", NULL});
    if (dk && cJSON_IsString(cJSON_GetObjectItemCaseSensitive(root, dk)))
        LQ_TRY(lq_json_get_str(root, dk, 0, td, sizeof td, label, err));
    const cJSON *qc = cJSON_GetObjectItemCaseSensitive(root, "quantization_config");
    if (!qc || cJSON_IsNull(qc)) {
        lq_qconfig_default(LQ_FMT_DENSE, out);
        if (td[0])
            snprintf(out->torch_dtype, sizeof out->torch_dtype, "%s", td);
        return LQ_OK;
    }
    return parse_qc(qc, label, td, out, err);
}
