/* bitsandbytes (Linear4bit / Linear8bitLt _save_to_state_dict, QuantState.as_dict(packed=True),
 * transformers BitsAndBytesConfig.to_dict): two formats under one quant_method.
 *   NF4   <module>.weight U8 [n*k/2, 1]  .weight.absmax F32|U8 [nblocks]  .weight.quant_map
 *         F32 [16]  [.weight.nested_absmax F32, .weight.nested_quant_map F32 [256]]
 *         .weight.quant_state.bitsandbytes__nf4 U8 (json.dumps of the non-tensor state)  [.bias]
 *   INT8  <module>.weight I8 [n, k]  .SCB F32 [n]  .weight_format U8 [] (0 = row)  [.bias]
 *         plus llmquant's .outlier_idx I32 [n_outlier] and .outlier_weight F16 [n, n_outlier]
 *         (listed in quantization_config["llmquant_int8_outlier_modules"])
 * Biases keep the model dtype. */
#include "lq_qformat_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static lq_status check_nf4(const lq_qlinear *w, lq_err *err) {
    const char *fmt = "nf4";
    LQ_TRY(lq_qcheck_dims(w, fmt, err));
    RULE(w->bits == 4, "bits = %d, NF4 is 4-bit", w->bits);
    const int64_t bs = w->group_size;
    RULE(bs >= 32 && bs <= 4096 && (bs & (bs - 1)) == 0,
         "blocksize = %lld, bitsandbytes allows 32, 64, ..., 4096", (long long)bs);
    RULE((w->n * w->k) % 2 == 0, "n * k must be even (two codes per byte)");
    RULE(w->nested_blocksize >= 0, "nested_blocksize = %d", (int)w->nested_blocksize);
    NEED(w->qweight, "qweight");
    NEED(w->absmax, "absmax");
    NEED(w->quant_map, "quant_map");
    if (w->nested_blocksize > 0) {
        NEED(w->nested_absmax, "nested_absmax (double quant)");
        NEED(w->nested_code, "nested_code (double quant)");
        RULE(isfinite(w->nested_offset), "nested_offset is not finite");
    }
    return LQ_OK;
}

static lq_status check_int8(const lq_qlinear *w, lq_err *err) {
    const char *fmt = "int8";
    LQ_TRY(lq_qcheck_dims(w, fmt, err));
    RULE(w->bits == 8, "bits = %d, LLM.int8 is 8-bit", w->bits);
    RULE(w->n_outlier >= 0 && w->n_outlier <= w->k, "n_outlier = %lld out of [0, k]",
         (long long)w->n_outlier);
    RULE(w->threshold >= 0.f && isfinite(w->threshold), "threshold = %g must be >= 0",
         (double)w->threshold);
    NEED(w->qweight, "qweight (CB)");
    NEED(w->scb, "scb");
    if (w->n_outlier > 0) {
        NEED(w->outlier_idx, "outlier_idx");
        NEED(w->outlier_w, "outlier_w");
    }
    return LQ_OK;
}

static int fits_nf4(const lq_qconfig *c, int64_t n, int64_t k, char *why, size_t cap) {
    (void)c;
    if ((n * k) % 2 == 0)
        return 1;
    if (why)
        snprintf(why, cap,
                 "NF4 stores two codes per byte: out_features x in_features must be even");
    return 0;
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

/* bitsandbytes QuantState JSON (packed non-tensor fields). */
static lq_status nf4_state(const lq_rd *r, const lq_st_tensor *t, char *qt, int64_t *bs, int64_t *n,
                           int64_t *k, int64_t *nbs, float *offset) {
    cJSON    *js = NULL;
    lq_status st;
    char      label[LQ_TNAME_CAP + 64];
    snprintf(label, sizeof label, "%s: tensor \"%s\"", lq_rd_file(r, t), t->name);
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

static lq_status read_nf4(const lq_st *st, const char *prefix, const lq_qconfig *c, int64_t n_exp,
                          int64_t k_exp, lq_qbuf *out, lq_err *err) {
    lq_rd               r  = {st, prefix, out, err};
    const lq_st_tensor *qs = NULL, *qw, *am, *qm, *na = NULL, *nc = NULL;
    static const int    u8[] = {LQ_DT_U8, -1}, f32[] = {LQ_DT_F32, -1};
    const char         *kinds[3] = {c->quant_type[0] ? c->quant_type : "nf4", "nf4", "fp4"};
    for (int i = 0; i < 3 && !qs; i++) {
        char suffix[64];
        snprintf(suffix, sizeof suffix, "weight.quant_state.bitsandbytes__%s", kinds[i]);
        LQ_TRY(lq_rd_find(&r, suffix, i == 2, &qs));
    }
    LQ_TRY(lq_rd_expect(&r, qs, u8, 1, -1, 0, "quant_state is U8 JSON bytes"));
    char    qt[8] = "";
    int64_t bs = 0, n = 0, k = 0, nbs = 0;
    float   offset = 0.f;
    LQ_TRY(nf4_state(&r, qs, qt, &bs, &n, &k, &nbs, &offset));
    LQ_RETURN_IF(strcmp(qt, "nf4") != 0 && strcmp(qt, "fp4") != 0, err, LQ_ERR_UNSUPPORTED,
                 "%s: tensor \"%s\": quant_type \"%s\"", lq_rd_file(&r, qs), qs->name, qt);
    LQ_TRY(lq_rd_dims(&r, qs, n, k, n_exp, k_exp));
    LQ_RETURN_IF(n <= 0 || k <= 0 || (n * k) % 2 != 0, err, LQ_ERR_UNSUPPORTED,
                 "%s: tensor \"%s\": shape [%lld, %lld] needs an even element count",
                 lq_rd_file(&r, qs), qs->name, (long long)n, (long long)k);
    lq_qlinear *q       = &out->q;
    q->format           = LQ_FMT_NF4;
    q->bits             = 4;
    q->n                = n;
    q->k                = k;
    q->group_size       = bs;
    q->nested_blocksize = (int32_t)nbs;
    LQ_TRY(lq_rd_find(&r, "weight", 1, &qw));
    LQ_TRY(lq_rd_find(&r, "weight.absmax", 1, &am));
    LQ_TRY(lq_rd_find(&r, "weight.quant_map", 1, &qm));
    LQ_TRY(LQ_RD_EXPECT_NUMEL(&r, qw, qweight, u8, "expected U8 with n*k/2 packed codes"));
    LQ_TRY(LQ_RD_EXPECT(&r, qm, quant_map, f32, "expected F32 [16] code table"));
    if (nbs > 0) {
        LQ_TRY(lq_rd_find(&r, "weight.nested_absmax", 1, &na));
        LQ_TRY(lq_rd_find(&r, "weight.nested_quant_map", 1, &nc));
        LQ_TRY(LQ_RD_EXPECT(&r, am, absmax, u8, "double quant absmax is U8 [blocks]"));
        LQ_TRY(LQ_RD_EXPECT(&r, na, nested_absmax, f32,
                            "expected F32 [ceil(blocks/nested_blocksize)]"));
        LQ_TRY(LQ_RD_EXPECT(&r, nc, nested_code, f32, "expected F32 [256] code"));
        LQ_TRY(lq_rd_view(&r, na, (const void **)&q->nested_absmax));
        LQ_TRY(lq_rd_view(&r, nc, (const void **)&q->nested_code));
        q->nested_offset = offset;
    } else {
        LQ_TRY(LQ_RD_EXPECT(&r, am, absmax, f32, "absmax is F32 [blocks]"));
    }
    LQ_TRY(lq_rd_view(&r, qw, &q->qweight));
    LQ_TRY(lq_rd_view(&r, am, &q->absmax));
    LQ_TRY(lq_rd_view(&r, qm, (const void **)&q->quant_map));
    LQ_TRY(lq_rd_bias(&r, n));
    return lq_rd_finish(&r, "weight");
}

static lq_status read_int8(const lq_st *st, const char *prefix, const lq_qconfig *c, int64_t n_exp,
                           int64_t k_exp, lq_qbuf *out, lq_err *err) {
    lq_rd               r = {st, prefix, out, err};
    const lq_st_tensor *cb, *scb, *wf, *oi, *ow;
    static const int    i8[] = {LQ_DT_I8, -1}, f32[] = {LQ_DT_F32, -1}, u8[] = {LQ_DT_U8, -1},
                     i32[] = {LQ_DT_I32, -1}, f16[] = {LQ_DT_F16, -1};
    lq_qlinear *q = &out->q;
    LQ_TRY(lq_rd_find(&r, "weight", 1, &cb));
    LQ_TRY(lq_rd_expect(&r, cb, i8, 2, -1, -1, "LLM.int8 weight is I8 [n, k]"));
    const int64_t n = cb->shape[0], k = cb->shape[1];
    LQ_TRY(lq_rd_dims(&r, cb, n, k, n_exp, k_exp));
    q->format    = LQ_FMT_INT8;
    q->bits      = 8;
    q->n         = n;
    q->k         = k;
    q->threshold = (float)c->int8_threshold;
    LQ_TRY(lq_rd_find(&r, "SCB", 1, &scb));
    LQ_TRY(LQ_RD_EXPECT(&r, scb, scb, f32, "expected F32 [out_features] SCB"));
    LQ_TRY(lq_rd_find(&r, "weight_format", 0, &wf));
    if (wf) {
        LQ_TRY(lq_rd_expect(&r, wf, u8, -1, 1, 0, "weight_format is a U8 scalar"));
        const uint8_t v = *(const uint8_t *)wf->data;
        LQ_RETURN_IF(v != 0, err, LQ_ERR_UNSUPPORTED,
                     "%s: tensor \"%s\" = %u: only the row-major format (0) is supported",
                     lq_rd_file(&r, wf), wf->name, v);
    }
    LQ_TRY(lq_rd_view(&r, cb, &q->qweight));
    LQ_TRY(lq_rd_view(&r, scb, (const void **)&q->scb));
    LQ_TRY(lq_rd_find(&r, "outlier_idx", 0, &oi));
    LQ_TRY(lq_rd_find(&r, "outlier_weight", 0, &ow));
    LQ_RETURN_IF(!oi != !ow, err, LQ_ERR_QFORMAT, "%s: tensor \"%s\" without its .%s",
                 lq_rd_file(&r, oi ? oi : ow), (oi ? oi : ow)->name,
                 oi ? "outlier_weight" : "outlier_idx");
    if (oi) {
        LQ_TRY(lq_rd_expect(&r, oi, i32, 1, -1, 0, "expected I32 [n_outlier] outlier_idx"));
        const int64_t no = oi->shape[0];
        q->n_outlier     = no;
        LQ_TRY(LQ_RD_EXPECT(&r, ow, outlier_w, f16, "expected F16 [out_features, n_outlier]"));
        LQ_TRY(lq_rd_view(&r, oi, (const void **)&q->outlier_idx));
        LQ_TRY(lq_rd_view(&r, ow, (const void **)&q->outlier_w));
        for (int64_t j = 0; j < no; j++) {
            const int32_t v = q->outlier_idx[j];
            LQ_RETURN_IF(v < 0 || v >= k || (j > 0 && v <= q->outlier_idx[j - 1]), err,
                         LQ_ERR_QFORMAT,
                         "%s: tensor \"%s\"[%lld] = %d: columns must be strictly increasing in "
                         "[0, %lld)",
                         lq_rd_file(&r, oi), oi->name, (long long)j, v, (long long)k);
        }
    }
    LQ_TRY(lq_rd_bias(&r, n));
    return lq_rd_finish(&r, "weight");
}

/* transformers BitsAndBytesConfig.to_dict (copies __dict__, so the private _load_in_* too). */
static lq_status bnb_write(const lq_qconfig *c, cJSON *qc, int four, lq_err *err) {
    ADD(qc, "quant_method", cJSON_CreateString("bitsandbytes"));
    ADD(qc, "_load_in_8bit", cJSON_CreateBool(!four));
    ADD(qc, "_load_in_4bit", cJSON_CreateBool(four));
    ADD(qc, "llm_int8_threshold", lq_qc_float(c->int8_threshold));
    ADD(qc, "llm_int8_skip_modules", lq_qc_skip_list(c));
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

static lq_status write_cfg_nf4(const lq_qconfig *c, cJSON *qc, lq_err *err) {
    return bnb_write(c, qc, 1, err);
}

static lq_status write_cfg_int8(const lq_qconfig *c, cJSON *qc, lq_err *err) {
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

static lq_status bnb_parse(const cJSON *qc, const char *label, lq_qconfig *c, lq_err *err) {
    if (lq_qc_has(qc, "llm_int8_threshold"))
        LQ_TRY(lq_json_get_f64(qc, "llm_int8_threshold", 0, &c->int8_threshold, label, err));
    LQ_RETURN_IF(!(c->int8_threshold >= 0) || !isfinite(c->int8_threshold), err,
                 LQ_ERR_CONFIG_VALUE, "%s: key \"llm_int8_threshold\" = %g", label,
                 c->int8_threshold);
    LQ_TRY(
        lq_qc_bool(qc, "llm_int8_enable_fp32_cpu_offload", &c->int8_fp32_cpu_offload, label, err));
    int fp16w = 0;
    LQ_TRY(lq_qc_bool(qc, "llm_int8_has_fp16_weight", &fp16w, label, err));
    LQ_RETURN_IF(fp16w, err, LQ_ERR_UNSUPPORTED,
                 "%s: key \"llm_int8_has_fp16_weight\" = true (weights not stored quantized)",
                 label);
    if (lq_qc_has(qc, "bnb_4bit_quant_type"))
        LQ_TRY(lq_json_get_str(qc, "bnb_4bit_quant_type", 0, c->quant_type, sizeof c->quant_type,
                               label, err));
    LQ_TRY(lq_qc_bool(qc, "bnb_4bit_use_double_quant", &c->double_quant, label, err));
    if (lq_qc_has(qc, "bnb_4bit_compute_dtype"))
        LQ_TRY(lq_json_get_str(qc, "bnb_4bit_compute_dtype", 0, c->compute_dtype,
                               sizeof c->compute_dtype, label, err));
    if (lq_qc_has(qc, "bnb_4bit_quant_storage")) {
        char s[16];
        LQ_TRY(lq_json_get_str(qc, "bnb_4bit_quant_storage", 0, s, sizeof s, label, err));
        LQ_RETURN_IF(strcmp(s, "uint8") != 0, err, LQ_ERR_UNSUPPORTED,
                     "%s: key \"bnb_4bit_quant_storage\" = \"%s\" (uint8 only)", label, s);
    }
    return lq_qc_parse_skip(qc, "llm_int8_skip_modules", c, label, err);
}

static lq_status parse_cfg_nf4(const cJSON *qc, const char *label, lq_qconfig *c, lq_err *err) {
    LQ_TRY(bnb_parse(qc, label, c, err));
    LQ_RETURN_IF(strcmp(c->quant_type, "nf4") != 0 && strcmp(c->quant_type, "fp4") != 0, err,
                 LQ_ERR_UNSUPPORTED, "%s: key \"bnb_4bit_quant_type\" = \"%s\" (nf4, fp4)", label,
                 c->quant_type);
    return LQ_OK;
}

static lq_status parse_cfg_int8(const cJSON *qc, const char *label, lq_qconfig *c, lq_err *err) {
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

static int arrays_nf4(const lq_qlinear *w, lq_qarray *a) {
    const int64_t nb = (w->n * w->k + w->group_size - 1) / w->group_size;
    const int     dq = w->nested_blocksize > 0;
    int           c  = 0;
    a[c++]           = LQ_ARRAY(qweight, "weight", LQ_DT_U8, 2, w->n * w->k / 2, 1);
    a[c++]           = LQ_ARRAY(absmax, "weight.absmax", dq ? LQ_DT_U8 : LQ_DT_F32, 1, nb, 0);
    a[c++]           = LQ_ARRAY(quant_map, "weight.quant_map", LQ_DT_F32, 1, 16, 0);
    if (dq) {
        const int64_t nnb = (nb + w->nested_blocksize - 1) / w->nested_blocksize;
        a[c++]            = LQ_ARRAY(nested_absmax, "weight.nested_absmax", LQ_DT_F32, 1, nnb, 0);
        a[c++]            = LQ_ARRAY(nested_code, "weight.nested_quant_map", LQ_DT_F32, 1, 256, 0);
    }
    return c;
}

/* The quant_state tensor: the non-tensor part of QuantState, as bitsandbytes serializes it. */
static lq_status write_nf4_state(lq_st_writer *wr, const char *prefix, const lq_qlinear *w,
                                 const lq_qconfig *c, lq_err *err) {
    const char *qt = c->quant_type[0] ? c->quant_type : "nf4";
    char        js[512], suffix[64];
    const int   len = nf4_state_json(w, c, qt, js, sizeof js);
    snprintf(suffix, sizeof suffix, "weight.quant_state.bitsandbytes__%s", qt);
    return lq_wr_put(wr, prefix, suffix, LQ_DT_U8, 1, len, 0, js, err);
}

static const uint8_t k_row_format =
    0; /* weight_format "row" (LINEAR_8BIT_WEIGHTS_FORMAT_MAPPING) */

static int arrays_int8(const lq_qlinear *w, lq_qarray *a) {
    int c  = 0;
    a[c++] = LQ_ARRAY(qweight, "weight", LQ_DT_I8, 2, w->n, w->k);
    a[c++] = LQ_ARRAY(scb, "SCB", LQ_DT_F32, 1, w->n, 0);
    a[c++] = (lq_qarray){.constant  = &k_row_format,
                         .suffix    = "weight_format",
                         .dtype     = LQ_DT_U8,
                         .dev_dtype = LQ_DT_U8};
    if (w->n_outlier > 0) {
        a[c++] = LQ_ARRAY(outlier_idx, "outlier_idx", LQ_DT_I32, 1, w->n_outlier, 0);
        a[c++] = LQ_ARRAY(outlier_w, "outlier_weight", LQ_DT_F16, 2, w->n, w->n_outlier);
    }
    return c;
}

static void default_bnb(lq_qconfig *c, int four) {
    c->bits           = four ? 4 : 8;
    c->group_size     = four ? 64 : 0;
    c->int8_threshold = 6.0;
    snprintf(c->quant_type, sizeof c->quant_type, four ? "nf4" : "fp4");
    snprintf(c->compute_dtype, sizeof c->compute_dtype, "float32");
}

static void default_nf4(lq_qconfig *c) {
    default_bnb(c, 1);
}

static void default_int8(lq_qconfig *c) {
    default_bnb(c, 0);
}

/* LLM.int8 stores any shape: one int8 code per weight. */
static int fits_int8(const lq_qconfig *c, int64_t n, int64_t k, char *why, size_t cap) {
    (void)c, (void)n, (void)k, (void)why, (void)cap;
    return 1;
}

const lq_qformat lq_qfmt_nf4 = {
    .name         = "nf4",
    .desc         = "bitsandbytes NF4",
    .quant_method = "bitsandbytes",
    .select_key   = "load_in_4bit",
    .legacy_keys  = {"load_in_4bit", "load_in_8bit"},
    .ids = {".weight.quant_state.bitsandbytes__nf4", ".weight.quant_state.bitsandbytes__fp4"},
    .bias_model_dtype = 1,
    .fits             = fits_nf4,
    .check            = check_nf4,
    .arrays           = arrays_nf4,
    .write_extra      = write_nf4_state,
    .read_tensors     = read_nf4,
    .qconfig_default  = default_nf4,
    .write_hf_config  = write_cfg_nf4,
    .parse_hf_config  = parse_cfg_nf4,
};

const lq_qformat lq_qfmt_int8 = {
    .name             = "int8",
    .desc             = "bitsandbytes LLM.int8",
    .quant_method     = "bitsandbytes",
    .select_key       = "load_in_8bit",
    .legacy_keys      = {"load_in_4bit", "load_in_8bit"},
    .ids              = {".SCB"},
    .bias_model_dtype = 1,
    .fits             = fits_int8,
    .check            = check_int8,
    .arrays           = arrays_int8,
    .read_tensors     = read_int8,
    .qconfig_default  = default_int8,
    .write_hf_config  = write_cfg_int8,
    .parse_hf_config  = parse_cfg_int8,
};
