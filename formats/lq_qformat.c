/* The format table, and what derives from a format's arrays: byte counts, the tensor writer,
 * the listing of a checkpoint's quantized linears; the helpers the per-format readers share. */
#include "lq_qformat_int.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* One line per format (lq_qfmt_<name>.c). */
static const lq_qformat *const k_qformats[LQ_FMT_COUNT] = {
    [LQ_FMT_DENSE] = &lq_qfmt_dense, [LQ_FMT_GPTQ] = &lq_qfmt_gptq, [LQ_FMT_AWQ] = &lq_qfmt_awq,
    [LQ_FMT_NF4] = &lq_qfmt_nf4,     [LQ_FMT_INT8] = &lq_qfmt_int8,
};
_Static_assert(sizeof k_qformats / sizeof k_qformats[0] == LQ_FMT_COUNT, "one row per lq_format");

const lq_qformat *lq_qformat_get(lq_format f) {
    if ((int)f < 0 || f >= LQ_FMT_COUNT)
        return NULL;
    return k_qformats[f];
}

/* Every format's optional bias: fp16 [n] in the descriptor. */
static lq_qarray bias_array(const lq_qformat *f, const lq_qlinear *w) {
    lq_qarray a   = LQ_ARRAY(bias, "bias", LQ_DT_F16, 1, w->n, 0);
    a.model_dtype = f->bias_model_dtype;
    return a;
}

int lq_qlinear_arrays(const lq_qlinear *w, lq_qarray out[LQ_QARRAY_MAX + 2]) {
    const lq_qformat *f = lq_qformat_get((lq_format)w->format);
    int               c = f->arrays(w, out);
    if (w->bias)
        out[c++] = bias_array(f, w);
    if (w->perm) /* a sorted descriptor's: copied and uploaded, never written */
        out[c++] = LQ_ARRAY(perm, "perm", LQ_DT_I32, 1, w->k, 0);
    return c;
}

/* Bytes of the arrays a[0..na) (constants are not the descriptor's), -1 on overflow. */
static int64_t arrays_bytes(const lq_qarray *a, int na) {
    int64_t bytes = 0, b;
    for (int i = 0; i < na; i++) {
        const int64_t d1 = a[i].ndim > 1 ? a[i].shape[1] : 1;
        if (a[i].constant)
            continue;
        if (!lq_mul_i64(a[i].ndim > 0 ? a[i].shape[0] : 1, d1, &b) ||
            !lq_mul_i64(b, lq_dtype_size(a[i].dtype), &b) || !lq_add_i64(bytes, b, &bytes))
            return -1;
    }
    return bytes;
}

int64_t lq_qformat_bytes(const lq_qconfig *cfg, int64_t n, int64_t k) {
    const lq_qformat *f = lq_qformat_get(cfg->format);
    lq_qlinear        w = {.format = (int32_t)cfg->format, .bits = cfg->bits, .n = n, .k = k};
    w.group_size        = cfg->group_size > 0 ? cfg->group_size : k;
    w.nested_blocksize  = cfg->double_quant ? LQ_NF4_NESTED_BLOCKSIZE : 0;
    lq_qarray a[LQ_QARRAY_MAX];
    return arrays_bytes(a, f->arrays(&w, a));
}

LQ_API lq_status lq_qlinear_check(const lq_qlinear *w, lq_err *err) {
    LQ_RETURN_IF(!w, err, LQ_ERR_INVALID_ARG, "lq_qlinear: NULL descriptor");
    const lq_qformat *f = lq_qformat_get((lq_format)w->format);
    LQ_RETURN_IF(!f, err, LQ_ERR_INVALID_ARG, "lq_qlinear: unknown format %d", (int)w->format);
    LQ_RETURN_IF(w->perm && !f->sort, err, LQ_ERR_INVALID_ARG,
                 "%s linear [%lld x %lld]: perm is set, but only GPTQ sorts input channels",
                 f->name, (long long)w->n, (long long)w->k);
    return f->check(w, err);
}

LQ_API size_t lq_qlinear_sort_bytes(const lq_qlinear *w) {
    if (lq_qlinear_check(w, NULL) != LQ_OK)
        return 0;
    const lq_qformat *f = lq_qformat_get((lq_format)w->format);
    return f->sort ? f->sort_bytes(w) : 0;
}

LQ_API lq_status lq_qlinear_sort(const lq_qlinear *w, void *buf, size_t cap, lq_qlinear *out) {
    if (!out)
        return LQ_ERR_INVALID_ARG;
    LQ_TRY(lq_qlinear_check(w, NULL));
    const lq_qformat *f    = lq_qformat_get((lq_format)w->format);
    const size_t      need = f->sort ? f->sort_bytes(w) : 0;
    if (need == 0) {
        *out = *w;
        return LQ_OK;
    }
    if (!buf || cap < need || ((uintptr_t)buf & 63u))
        return LQ_ERR_INVALID_ARG;
    return f->sort(w, buf, out);
}

LQ_API size_t lq_qlinear_bytes(const lq_qlinear *w) {
    if (lq_qlinear_check(w, NULL) != LQ_OK)
        return 0;
    lq_qarray     a[LQ_QARRAY_MAX + 2];
    const int64_t bytes = arrays_bytes(a, lq_qlinear_arrays(w, a));
    return bytes > 0 ? (size_t)bytes : 0; /* a valid descriptor's n * k is below 2^56 */
}

lq_status lq_qcheck_dims(const lq_qlinear *w, const char *fmt, lq_err *err) {
    RULE(w->n > 0 && w->k > 0, "n and k must be positive");
    int64_t nk;
    RULE(lq_mul_i64(w->n, w->k, &nk) && nk < ((int64_t)1 << 56), "n * k overflows");
    return LQ_OK;
}

/* ---------------------------------------------------------------------------------------
 * Writing: every array under its suffix, the format's fixed tensors, the bias.
 * --------------------------------------------------------------------------------------- */
lq_status lq_tname(char *buf, const char *prefix, const char *suffix, lq_err *err) {
    const int len = snprintf(buf, LQ_TNAME_CAP, "%s.%s", prefix, suffix);
    LQ_RETURN_IF(len < 0 || len >= LQ_TNAME_CAP, err, LQ_ERR_INVALID_ARG,
                 "%s: module name too long for tensor names", prefix);
    return LQ_OK;
}

lq_dtype lq_qconfig_model_dtype(const lq_qconfig *c) {
    if (!strcmp(c->torch_dtype, "bfloat16"))
        return LQ_DT_BF16;
    if (!strcmp(c->torch_dtype, "float32"))
        return LQ_DT_F32;
    return LQ_DT_F16;
}

lq_status lq_wr_put(lq_st_writer *wr, const char *prefix, const char *suffix, lq_dtype dt, int ndim,
                    int64_t d0, int64_t d1, const void *data, lq_err *err) {
    char    name[LQ_TNAME_CAP];
    int64_t shape[2] = {d0, d1};
    LQ_TRY(lq_tname(name, prefix, suffix, err));
    return lq_st_writer_add(wr, name, dt, ndim, shape, data, err);
}

/* A float array in the model's dtype: its float32 values (fp16 ones widened) converted once. */
static lq_status put_model_dtype(lq_st_writer *wr, const char *prefix, const lq_qarray *a,
                                 const void *data, lq_dtype dt, lq_err *err) {
    char          name[LQ_TNAME_CAP];
    const int64_t numel = lq_qarray_numel(a);
    LQ_TRY(lq_tname(name, prefix, a->suffix, err));
    if (a->dtype == LQ_DT_F32)
        return lq_st_writer_add_f32(wr, name, dt, a->ndim, a->shape, data, err);
    if (a->dtype == dt) /* already the model's (fp16 or bf16 dense weights) */
        return lq_st_writer_add(wr, name, dt, a->ndim, a->shape, data, err);
    float *tmp = lq_malloc_n(numel, sizeof(float));
    LQ_RETURN_IF(!tmp, err, LQ_ERR_NOMEM, "%s: out of memory", name);
    if (a->dtype == LQ_DT_BF16)
        for (int64_t i = 0; i < numel; i++)
            tmp[i] = lq_bf16_to_f32(((const uint16_t *)data)[i]);
    else
        lq_f16_to_f32_array(data, numel, tmp);
    const lq_status st = lq_st_writer_add_f32(wr, name, dt, a->ndim, a->shape, tmp, err);
    free(tmp);
    return st;
}

static lq_status put_array(lq_st_writer *wr, const char *prefix, const lq_qarray *a,
                           const lq_qlinear *w, const lq_qconfig *c, lq_err *err) {
    const void *data = lq_qarray_data(a, w);
    if (a->model_dtype)
        return put_model_dtype(wr, prefix, a, data, lq_qconfig_model_dtype(c), err);
    return lq_wr_put(wr, prefix, a->suffix, a->dtype, a->ndim, a->shape[0], a->shape[1], data, err);
}

lq_status lq_qlinear_write(lq_st_writer *wr, const char *prefix, const lq_qlinear *w,
                           const lq_qconfig *c, lq_err *err) {
    LQ_RETURN_IF(!wr || !prefix || !w || !c, err, LQ_ERR_INVALID_ARG,
                 "lq_qlinear_write: NULL argument");
    const lq_qformat *f = lq_qformat_get((lq_format)w->format);
    LQ_RETURN_IF(!f, err, LQ_ERR_UNSUPPORTED, "%s: no tensor writer for format %d", prefix,
                 (int)w->format);
    const lq_status st = lq_qlinear_check(w, err);
    if (st != LQ_OK) {
        lq_err_prefix(err, "%s", prefix);
        return st;
    }
    if (c->container == LQ_CONTAINER_CT)
        return lq_ct_write_linear(wr, prefix, w, c, err);
    /* its rows are in the kernels' order, not the checkpoint's */
    LQ_RETURN_IF(w->perm, err, LQ_ERR_INVALID_ARG,
                 "%s: a sorted descriptor (perm set) cannot be written as a checkpoint", prefix);
    lq_qarray a[LQ_QARRAY_MAX];
    const int na = f->arrays(w, a);
    for (int i = 0; i < na; i++)
        LQ_TRY(put_array(wr, prefix, &a[i], w, c, err));
    if (f->write_extra)
        LQ_TRY(f->write_extra(wr, prefix, w, c, err));
    if (!w->bias)
        return LQ_OK;
    const lq_qarray b = bias_array(f, w);
    return put_array(wr, prefix, &b, w, c, err);
}

/* ---------------------------------------------------------------------------------------
 * Reading: the helpers of the per-format readers
 * --------------------------------------------------------------------------------------- */
const int lq_rd_float_dts[] = {LQ_DT_F16, LQ_DT_BF16, LQ_DT_F32, -1};

const char *lq_rd_file(const lq_rd *r, const lq_st_tensor *t) {
    const char *f = lq_st_file_of(r->st, t);
    return f ? f : "safetensors";
}

/* Find <prefix>.<suffix>; *t = NULL when optional and absent. */
lq_status lq_rd_find(const lq_rd *r, const char *suffix, int required, const lq_st_tensor **t) {
    char name[LQ_TNAME_CAP];
    LQ_TRY(lq_tname(name, r->prefix, suffix, r->err));
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
lq_status lq_rd_expect(const lq_rd *r, const lq_st_tensor *t, const int *dts, int ndim, int64_t d0,
                       int64_t d1, const char *why) {
    int ok = 0;
    for (int i = 0; dts[i] >= 0; i++)
        ok |= (int)t->dtype == dts[i];
    if (!ok)
        return lq_fail(r->err, LQ_ERR_QFORMAT, "%s: tensor \"%s\" has dtype %s, %s",
                       lq_rd_file(r, t), t->name, lq_dtype_name(t->dtype), why);
    if (ndim < 0)
        ok = t->numel == d0;
    else
        ok = t->ndim == ndim && (ndim < 1 || d0 < 0 || t->shape[0] == d0) &&
             (ndim < 2 || d1 < 0 || t->shape[1] == d1);
    if (!ok) {
        char s[96];
        shape_str(t, s, sizeof s);
        return lq_fail(r->err, LQ_ERR_QFORMAT, "%s: tensor \"%s\" has shape %s, %s",
                       lq_rd_file(r, t), t->name, s, why);
    }
    return LQ_OK;
}

/* Pointer to the tensor data when aligned for its element type, else an owned copy. */
lq_status lq_rd_view(const lq_rd *r, const lq_st_tensor *t, const void **p) {
    const int es = lq_dtype_size(t->dtype);
    if (((uintptr_t)t->data % (uintptr_t)es) == 0) {
        *p = t->data;
        return LQ_OK;
    }
    void *cp = lq_qbuf_alloc(r->out, (size_t)t->nbytes);
    LQ_RETURN_IF(!cp, r->err, LQ_ERR_NOMEM, "%s: out of memory copying tensor \"%s\"",
                 lq_rd_file(r, t), t->name);
    memcpy(cp, t->data, (size_t)t->nbytes);
    *p = cp;
    return LQ_OK;
}

/* fp16 array: a view of F16 data, or an fp16 copy of BF16/F32 data. */
lq_status lq_rd_view_f16(const lq_rd *r, const lq_st_tensor *t, const uint16_t **p) {
    if (t->dtype == LQ_DT_F16)
        return lq_rd_view(r, t, (const void **)p);
    uint16_t *h = lq_qbuf_alloc(r->out, (size_t)t->numel * 2);
    float    *f = lq_malloc_n(t->numel, sizeof(float));
    if (!h || !f) {
        free(f);
        return lq_fail(r->err, LQ_ERR_NOMEM, "%s: out of memory converting \"%s\"",
                       lq_rd_file(r, t), t->name);
    }
    const int64_t bad = lq_convert_to_f32(t->dtype, t->data, t->numel, f);
    lq_f32_to_f16_array(f, t->numel, h);
    free(f);
    LQ_RETURN_IF(bad != 0, r->err, LQ_ERR_WEIGHT_NONFINITE, "%s: tensor \"%s\" has %lld NaN/Inf",
                 lq_rd_file(r, t), t->name, (long long)bad);
    *p = h;
    return LQ_OK;
}

lq_status lq_rd_bias(const lq_rd *r, int64_t n) {
    const lq_st_tensor *t;
    LQ_TRY(lq_rd_find(r, "bias", 0, &t));
    if (!t)
        return LQ_OK;
    LQ_TRY(lq_rd_expect(r, t, lq_rd_float_dts, 1, n, 0, "expected a float [out_features] bias"));
    return lq_rd_view_f16(r, t, &r->out->q.bias);
}

lq_status lq_rd_expect_layout(const lq_rd *r, const lq_st_tensor *t, size_t field, int numel_only,
                              const int *dts, const char *why) {
    const lq_qlinear *q = &r->out->q;
    lq_qarray         a[LQ_QARRAY_MAX];
    const int         na = lq_qformat_get((lq_format)q->format)->arrays(q, a);
    for (int i = 0; i < na; i++) {
        if (a[i].constant || a[i].field != field)
            continue;
        if (numel_only)
            return lq_rd_expect(r, t, dts, -1, lq_qarray_numel(&a[i]), 0, why);
        return lq_rd_expect(r, t, dts, a[i].ndim, a[i].shape[0], a[i].shape[1], why);
    }
    return lq_fail(r->err, LQ_ERR_INTERNAL, "%s: no such array in the %s layout", t->name,
                   lq_qformat_get((lq_format)q->format)->name);
}

/* The descriptor rules restated as a checkpoint error naming the tensor. */
lq_status lq_rd_finish(const lq_rd *r, const char *main_tensor) {
    lq_err          e;
    const lq_status st = lq_qlinear_check(&r->out->q, &e);
    if (st != LQ_OK)
        return lq_fail(r->err, LQ_ERR_QFORMAT, "%s.%s: %s", r->prefix, main_tensor, e.msg);
    return LQ_OK;
}

lq_status lq_rd_dims(const lq_rd *r, const lq_st_tensor *t, int64_t n, int64_t k, int64_t n_exp,
                     int64_t k_exp) {
    if ((n_exp > 0 && n != n_exp) || (k_exp > 0 && k != k_exp))
        return lq_fail(r->err, LQ_ERR_QFORMAT,
                       "%s: tensor \"%s\" encodes a [%lld, %lld] linear, config.json expects "
                       "[%lld, %lld]",
                       lq_rd_file(r, t), t->name, (long long)n, (long long)k, (long long)n_exp,
                       (long long)k_exp);
    return LQ_OK;
}

lq_status lq_qlinear_read(const lq_st *st, const char *prefix, const lq_qconfig *c, int64_t n,
                          int64_t k, lq_qbuf *out, lq_err *err) {
    memset(out, 0, sizeof *out);
    LQ_RETURN_IF(!st || !prefix || !c, err, LQ_ERR_INVALID_ARG, "lq_qlinear_read: NULL argument");
    const lq_qformat *t = lq_qformat_get(c->format);
    LQ_RETURN_IF(!t || !t->read_tensors, err, LQ_ERR_UNSUPPORTED,
                 "%s: no tensor reader for format %d", prefix, (int)c->format);
    const lq_status s = c->container == LQ_CONTAINER_CT
                            ? lq_ct_read_linear(st, prefix, c, n, k, out, err)
                            : t->read_tensors(st, prefix, c, n, k, out, err);
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

/* Module names: tensors ending in one of the ids (the format's, or its container's); an
 * unquantized checkpoint's are the 2-D float weights other than embeddings. */
static int is_linear(const lq_qformat *f, const char *const *ids, const lq_st_tensor *t,
                     size_t *stem) {
    for (int i = 0; i < 3 && ids[i]; i++)
        if (ends_with(t->name, ids[i], stem))
            return f != &lq_qfmt_dense || (t->ndim == 2 && lq_dtype_is_float(t->dtype) &&
                                           !strstr(t->name, "embed") && !strstr(t->name, ".wte."));
    return 0;
}

lq_status lq_qlinear_list(const lq_st *st, const lq_qconfig *c, char ***names, int64_t *count,
                          lq_err *err) {
    *names              = NULL;
    *count              = 0;
    const lq_qformat *f = lq_qformat_get(c->format);
    LQ_RETURN_IF(!f, err, LQ_ERR_UNSUPPORTED, "no listing for format %d", (int)c->format);
    static const char *const ct_ids[3] = {LQ_CT_ID};
    const char *const       *ids       = c->container == LQ_CONTAINER_CT ? ct_ids : f->ids;
    const int64_t            nt        = lq_st_count(st);
    size_t                   bytes     = 0;
    int64_t                  cnt       = 0;
    for (int pass = 0; pass < 2; pass++) {
        char  **arr = pass ? *names : NULL;
        char   *s   = pass ? (char *)(arr + cnt) : NULL;
        int64_t j   = 0;
        for (int64_t i = 0; i < nt; i++) {
            const lq_st_tensor *t = lq_st_get(st, i);
            size_t              stem;
            if (!is_linear(f, ids, t, &stem))
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
