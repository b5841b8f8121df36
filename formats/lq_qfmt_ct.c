/* compressed-tensors "pack-quantized" (llm-compressor's output, vLLM's native W4A16 / W8A16
 * checkpoints; the layout of compressed-tensors 0.20, PackedQuantizationCompressor):
 *   <module>.weight_packed      I32 [n, ceil(k*b/32)]  each output row's codes (signed code +
 *                               2^(b-1)) as one little-endian bit stream, code j at bit j*b
 *   <module>.weight_scale       model dtype [n, G]     (G = 1 per channel)
 *   <module>.weight_zero_point  I32 [ceil(n*b/32), G]  asymmetric only: each group's zero points
 *                               (+ 2^(b-1)) as one bit stream along n
 *   <module>.weight_shape       I64 [2] = {n, k}
 *   [<module>.weight_g_idx      I32 [k]: act-order "group", read only (0.20 refuses it)]
 *   [<module>.bias              model dtype [n]]
 * and quantization_config {"quant_method": "compressed-tensors", "format": "pack-quantized",
 * "config_groups": {name: {"targets", "weights": {num_bits, symmetric, strategy, group_size,
 * actorder, ...}}}, "ignore": [...]}.
 *
 * A weight is (code - zero) * scale with both stored offset by 2^(b-1): the stored code is
 * GPTQ's unsigned code and the stored zero GPTQ's zero (2^(b-1) when symmetric), so this layout
 * holds GPTQ's content. With k*b a multiple of 32 (the kernels need it) GPTQ's qweight
 * [k*b/32, n] is weight_packed transposed: the same bit stream per output channel. Readers make
 * GPTQ descriptors; the writer takes GPTQ descriptors (rtn, gptq) and AWQ ones (awq). */
#include "lq_qformat_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CT_FORMAT  "pack-quantized"
#define CT_VERSION "0.20.1" /* the compressed-tensors release whose layout this writes */

/* --- what the writer reads from a GPTQ or AWQ descriptor ------------------------------- */
static uint32_t code_of(const lq_qlinear *w, int64_t i, int64_t c) {
    if (w->format == LQ_FMT_AWQ)
        return lq_awq_get((const int32_t *)w->qweight + c * (w->n / 8), i);
    return lq_stream_get((const int32_t *)w->qweight + i, w->n, c, w->bits);
}

static uint32_t zero_of(const lq_qlinear *w, int64_t g, int64_t i) {
    if (w->format == LQ_FMT_AWQ)
        return lq_awq_get((const int32_t *)w->qzeros + g * (w->n / 8), i);
    return (uint32_t)lq_gptq_zero(w, g, i);
}

static int64_t group_of(const lq_qlinear *w, int64_t c) {
    return w->format == LQ_FMT_AWQ ? c / w->group_size : w->g_idx[c];
}

/* A float array of the model's dtype from float32 values. */
static lq_status put_f32(lq_st_writer *wr, const char *prefix, const char *suffix,
                         const lq_qconfig *c, int ndim, int64_t d0, int64_t d1, const float *v,
                         lq_err *err) {
    char          name[LQ_TNAME_CAP];
    const int64_t shape[2] = {d0, d1};
    LQ_TRY(lq_tname(name, prefix, suffix, err));
    return lq_st_writer_add_f32(wr, name, lq_qconfig_model_dtype(c), ndim, shape, v, err);
}

lq_status lq_ct_write_linear(lq_st_writer *wr, const char *prefix, const lq_qlinear *w,
                             const lq_qconfig *c, lq_err *err) {
    LQ_RETURN_IF(w->format != LQ_FMT_GPTQ && w->format != LQ_FMT_AWQ, err, LQ_ERR_UNSUPPORTED,
                 "%s: compressed-tensors holds GPTQ and AWQ results, not %s", prefix,
                 lq_qformat_get((lq_format)w->format)->name);
    LQ_RETURN_IF(w->perm, err, LQ_ERR_INVALID_ARG,
                 "%s: a sorted descriptor (perm set) cannot be written as a checkpoint", prefix);
    lq_qconfig eff;
    int        excluded;
    LQ_TRY(lq_qconfig_for_module(c, prefix, &eff, &excluded, err));
    const int64_t n = w->n, k = w->k, gs = w->group_size, G = (k + gs - 1) / gs;
    const int     b   = w->bits;
    const int     sym = w->format == LQ_FMT_GPTQ && eff.sym;
    /* the config says what the file holds: a descriptor that disagrees is a bug upstream */
    const int64_t cgs = eff.group_size <= 0 || eff.group_size > k ? k : eff.group_size;
    LQ_RETURN_IF(eff.bits != b || cgs != gs, err, LQ_ERR_INTERNAL,
                 "%s: %d-bit group %lld linear under a %d-bit group %lld config", prefix, b,
                 (long long)gs, eff.bits, (long long)cgs);
    for (int64_t col = 0; col < k; col++)
        LQ_RETURN_IF(group_of(w, col) != col / gs, err, LQ_ERR_UNSUPPORTED,
                     "%s: act-order groups (g_idx) cannot be stored in compressed-tensors, "
                     "which keeps groups in column order (actorder \"weight\": --static-groups)",
                     prefix);
    for (int64_t g = 0; sym && g < G; g++)
        for (int64_t i = 0; i < n; i++)
            LQ_RETURN_IF(zero_of(w, g, i) != 1u << (b - 1), err, LQ_ERR_INTERNAL,
                         "%s: symmetric config, but group %lld of row %lld has zero %u", prefix,
                         (long long)g, (long long)i, zero_of(w, g, i));

    const int64_t W      = (k * b + 31) / 32; /* words per output row */
    const int64_t ZW     = (n * b + 31) / 32; /* words per group's zero points */
    int32_t      *packed = lq_calloc_n(n * W, 4);
    float        *sc     = lq_malloc_n(n * G, sizeof(float));
    int32_t      *zp     = sym ? NULL : lq_calloc_n(ZW * G, 4);
    lq_status     st     = LQ_OK;
    if (!packed || !sc || (!sym && !zp))
        LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory", prefix);
    if (w->format == LQ_FMT_GPTQ && (k * b) % 32 == 0) { /* the same streams: a transpose */
        const int32_t *q = w->qweight;
        for (int64_t j = 0; j < W; j++)
            for (int64_t i = 0; i < n; i++)
                packed[i * W + j] = q[j * n + i];
    } else {
        for (int64_t i = 0; i < n; i++)
            for (int64_t col = 0; col < k; col++)
                lq_stream_put(packed + i * W, 1, col, b, code_of(w, i, col));
    }
    for (int64_t g = 0; g < G; g++)
        for (int64_t i = 0; i < n; i++) {
            sc[i * G + g] = lq_f16_to_f32(((const uint16_t *)w->scales)[g * n + i]);
            if (zp)
                lq_stream_put(zp + g, G, i, b, zero_of(w, g, i));
        }
    const int64_t shape[2] = {n, k};
    LQ_TRY_GOTO(lq_wr_put(wr, prefix, "weight_packed", LQ_DT_I32, 2, n, W, packed, err));
    LQ_TRY_GOTO(put_f32(wr, prefix, "weight_scale", c, 2, n, G, sc, err));
    if (zp)
        LQ_TRY_GOTO(lq_wr_put(wr, prefix, "weight_zero_point", LQ_DT_I32, 2, ZW, G, zp, err));
    LQ_TRY_GOTO(lq_wr_put(wr, prefix, "weight_shape", LQ_DT_I64, 1, 2, 0, shape, err));
    if (w->bias) {
        float *bias = lq_malloc_n(n, sizeof(float));
        if (!bias)
            LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory", prefix);
        lq_f16_to_f32_array(w->bias, n, bias);
        st = put_f32(wr, prefix, "bias", c, 1, n, 0, bias, err);
        free(bias);
    }
done:
    free(packed);
    free(sc);
    free(zp);
    return st;
}

/* --- reading into a GPTQ descriptor ---------------------------------------------------- */
lq_status lq_ct_read_linear(const lq_st *st, const char *prefix, const lq_qconfig *base,
                            int64_t n_exp, int64_t k_exp, lq_qbuf *out, lq_err *err) {
    lq_rd               r = {st, prefix, out, err};
    const lq_st_tensor *pk, *shp, *sc, *zt, *gi;
    lq_qconfig          eff;
    int                 excluded;
    static const int    i32[] = {LQ_DT_I32, -1}, ints[] = {LQ_DT_I64, LQ_DT_I32, -1};
    LQ_TRY(lq_qconfig_for_module(base, prefix, &eff, &excluded, err));
    const int b = eff.bits;
    LQ_TRY(lq_rd_find(&r, "weight_packed", 1, &pk));
    LQ_TRY(lq_rd_find(&r, "weight_shape", 1, &shp));
    LQ_TRY(lq_rd_find(&r, "weight_scale", 1, &sc));
    LQ_TRY(lq_rd_find(&r, "weight_zero_point", !eff.sym, &zt));
    LQ_TRY(lq_rd_find(&r, "weight_g_idx", 0, &gi));
    LQ_TRY(lq_rd_expect(&r, shp, ints, 1, 2, 0, "expected an integer [2] weight_shape"));
    int64_t nk[2];
    for (int d = 0; d < 2; d++) {
        if (shp->dtype == LQ_DT_I64) {
            memcpy(&nk[d], (const char *)shp->data + 8 * d, 8);
        } else {
            int32_t v;
            memcpy(&v, (const char *)shp->data + 4 * d, 4);
            nk[d] = v;
        }
    }
    const int64_t n = nk[0], k = nk[1];
    LQ_RETURN_IF(n <= 0 || k <= 0 || n > (INT64_C(1) << 28) || k > (INT64_C(1) << 28), err,
                 LQ_ERR_QFORMAT, "%s: tensor \"%s\" = [%lld, %lld], not a linear's shape",
                 lq_rd_file(&r, shp), shp->name, (long long)n, (long long)k);
    LQ_TRY(lq_rd_dims(&r, shp, n, k, n_exp, k_exp));
    char why[192];
    LQ_RETURN_IF(!lq_qfmt_gptq.fits(&eff, n, k, why, sizeof why), err, LQ_ERR_UNSUPPORTED,
                 "%s: linear %s [%lld x %lld]: %s (llmquant's kernels run this layout as GPTQ)",
                 lq_rd_file(&r, pk), prefix, (long long)n, (long long)k, why);
    const int64_t gs = eff.group_size <= 0 || eff.group_size > k ? k : eff.group_size;
    const int64_t G = (k + gs - 1) / gs, W = k * b / 32, ZW = (n * b + 31) / 32;
    LQ_TRY(lq_rd_expect(&r, pk, i32, 2, n, W, "expected I32 [out_features, in_features*bits/32]"));
    LQ_TRY(lq_rd_expect(&r, sc, lq_rd_float_dts, 2, n, G, "expected float [out_features, groups]"));
    if (zt)
        LQ_TRY(lq_rd_expect(&r, zt, i32, 2, ZW, G,
                            "expected I32 [out_features*bits/32 (rounded up), groups]"));
    if (gi)
        LQ_TRY(lq_rd_expect(&r, gi, i32, 1, k, 0, "expected I32 [in_features]"));

    lq_qlinear *q = &out->q;
    q->format     = LQ_FMT_GPTQ;
    q->bits       = b;
    q->n          = n;
    q->k          = k;
    q->group_size = gs;
    LQ_TRY(lq_qbuf_alloc_layout(out, err)); /* GPTQ's arrays, zeroed */
    int32_t  *qw  = lq_qbuf_mut(out, q->qweight);
    int32_t  *qz  = lq_qbuf_mut(out, q->qzeros);
    uint16_t *s16 = lq_qbuf_mut(out, q->scales);
    int32_t  *g   = lq_qbuf_mut(out, q->g_idx);
    float    *f   = lq_malloc_n(G * n, sizeof(float));
    if (!f)
        return lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory reading %s", lq_rd_file(&r, pk),
                       prefix);
    const int32_t *src;
    LQ_TRY(lq_rd_view(&r, pk, (const void **)&src));
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < W; j++)
            qw[j * n + i] = src[i * W + j];
    const int64_t bad = lq_convert_to_f32(sc->dtype, sc->data, G * n, f);
    for (int64_t i = 0; i < n; i++)
        for (int64_t gg = 0; gg < G; gg++)
            s16[gg * n + i] = lq_f32_to_f16(f[i * G + gg]);
    free(f);
    LQ_RETURN_IF(bad != 0, err, LQ_ERR_WEIGHT_NONFINITE, "%s: tensor \"%s\" has %lld NaN/Inf",
                 lq_rd_file(&r, sc), sc->name, (long long)bad);
    const int32_t *z = NULL;
    if (zt)
        LQ_TRY(lq_rd_view(&r, zt, (const void **)&z));
    for (int64_t gg = 0; gg < G; gg++)
        for (int64_t i = 0; i < n; i++) {
            const uint32_t zero = z ? lq_stream_get(z + gg, G, i, b) : 1u << (b - 1);
            lq_stream_put(qz + gg * (n * b / 32), 1, i, b, zero - 1u); /* v1 stores zero - 1 */
        }
    if (gi) {
        LQ_TRY(lq_rd_view(&r, gi, (const void **)&src));
        for (int64_t c = 0; c < k; c++) {
            LQ_RETURN_IF(src[c] < 0 || src[c] >= G, err, LQ_ERR_QFORMAT,
                         "%s: tensor \"%s\"[%lld] = %d outside [0, %lld) groups",
                         lq_rd_file(&r, gi), gi->name, (long long)c, src[c], (long long)G);
            g[c] = src[c];
        }
    } else {
        for (int64_t c = 0; c < k; c++)
            g[c] = (int32_t)(c / gs);
    }
    LQ_TRY(lq_rd_bias(&r, n));
    return lq_rd_finish(&r, "weight_packed");
}

/* --- quantization_config ---------------------------------------------------------------- */
/* One scheme of config_groups: weight-only integer quantization as QuantizationArgs
 * serializes it. */
static cJSON *scheme(cJSON *targets, int bits, int64_t group_size, int sym, int actorder) {
    cJSON *s = cJSON_CreateObject(), *w = cJSON_CreateObject();
    int    ok = s && w && lq_qc_add(s, "targets", targets) && lq_qc_add(s, "weights", w);
    ok        = ok && lq_qc_add(w, "num_bits", cJSON_CreateNumber(bits)) &&
         lq_qc_add(w, "type", cJSON_CreateString("int")) &&
         lq_qc_add(w, "symmetric", cJSON_CreateBool(sym)) &&
         lq_qc_add(w, "group_size",
                   group_size > 0 ? cJSON_CreateNumber((double)group_size) : cJSON_CreateNull()) &&
         lq_qc_add(w, "strategy", cJSON_CreateString(group_size > 0 ? "group" : "channel")) &&
         lq_qc_add(w, "dynamic", cJSON_CreateBool(0)) &&
         (!actorder || lq_qc_add(w, "actorder", cJSON_CreateString("weight"))) &&
         lq_qc_add(s, "input_activations", cJSON_CreateNull()) &&
         lq_qc_add(s, "output_activations", cJSON_CreateNull()) &&
         lq_qc_add(s, "format", cJSON_CreateString(CT_FORMAT));
    if (!ok) {
        if (!s || !cJSON_GetObjectItem(s, "targets"))
            cJSON_Delete(targets);
        if (!s || !cJSON_GetObjectItem(s, "weights"))
            cJSON_Delete(w);
        cJSON_Delete(s);
        return NULL;
    }
    return s;
}

#define PUSH(arr, str)                                                                             \
    do {                                                                                           \
        cJSON *v_ = cJSON_CreateString(str);                                                       \
        if (!v_ || !cJSON_AddItemToArray((arr), v_)) {                                             \
            cJSON_Delete(v_);                                                                      \
            LQ_FAIL(err, LQ_ERR_NOMEM, "out of memory building quantization_config");              \
        }                                                                                          \
    } while (0)

static cJSON *str_list(const char *s) {
    cJSON *a = cJSON_CreateArray(), *v = cJSON_CreateString(s);
    if (!a || !v || !cJSON_AddItemToArray(a, v)) {
        cJSON_Delete(a);
        cJSON_Delete(v);
        return NULL;
    }
    return a;
}

/* llm-compressor's config.json object (ModelCompressor.update_config, keys sorted as it writes
 * them): the base scheme targets every Linear; each "dynamic" override of the mixed-precision
 * planner (anchored, non-overlapping patterns) is a group of its own, whose regex target takes
 * precedence over the class target; skipped modules and lm_head are ignored. */
lq_status lq_ct_write_config(const lq_qconfig *c, cJSON *qc, lq_err *err) {
    LQ_RETURN_IF(c->format != LQ_FMT_GPTQ && c->format != LQ_FMT_AWQ, err, LQ_ERR_UNSUPPORTED,
                 "compressed-tensors holds GPTQ and AWQ results, not %s",
                 lq_qformat_get(c->format)->name);
    const int     awq = c->format == LQ_FMT_AWQ;
    const int     sym = !awq && c->sym, act = !awq && c->desc_act;
    const int64_t gs     = c->group_size;
    cJSON        *groups = cJSON_CreateObject(), *ignore = cJSON_CreateArray();
    ADD(qc, "config_groups", groups);
    ADD(groups, "group_0", scheme(str_list("Linear"), c->bits, gs, sym, act));
    int ng = 1;
    for (int64_t i = 0; i < c->n_dynamic; i++) {
        const lq_qrule *r = &c->dynamic[i];
        char            t[4200], name[32];
        snprintf(t, sizeof t, "re:%s", r->pattern);
        if (r->negative) {
            PUSH(ignore, t);
            continue;
        }
        snprintf(name, sizeof name, "group_%d", ng++);
        ADD(groups, name,
            scheme(str_list(t), r->bits > 0 ? r->bits : c->bits,
                   r->group_size != 0 ? r->group_size : gs, r->sym >= 0 ? r->sym : sym, act));
    }
    ADD(qc, "format", cJSON_CreateString(CT_FORMAT));
    ADD(qc, "global_compression_ratio", cJSON_CreateNull());
    ADD(qc, "ignore", ignore);
    PUSH(ignore, "lm_head");
    for (int i = 0; i < c->n_skip; i++) {
        char   t[300];
        size_t len = (size_t)snprintf(t, sizeof t, "re:.*\\.");
        len        = lq_qrule_append_name(t, sizeof t, len, c->skip[i]);
        len        = lq_qrule_append_name(t, sizeof t, len, "$");
        LQ_RETURN_IF(len >= sizeof t, err, LQ_ERR_INTERNAL, "module name too long: %s", c->skip[i]);
        PUSH(ignore, t);
    }
    ADD(qc, "kv_cache_scheme", cJSON_CreateNull());
    ADD(qc, "moe_sparsity_config", cJSON_CreateNull());
    ADD(qc, "quant_method", cJSON_CreateString(LQ_CT_QUANT_METHOD));
    ADD(qc, "quantization_status", cJSON_CreateString("compressed"));
    ADD(qc, "sparsity_config", cJSON_CreateObject());
    ADD(qc, "transform_config", cJSON_CreateObject());
    ADD(qc, "version", cJSON_CreateString(CT_VERSION));
    return LQ_OK;
}

/* One group's weights -> bits, group size (-1 per channel), sym, act-order. */
static lq_status parse_weights(const cJSON *w, const char *label, int *bits, int64_t *gs, int *sym,
                               int *act, lq_err *err) {
    LQ_RETURN_IF(!cJSON_IsObject(w), err, LQ_ERR_UNSUPPORTED,
                 "%s: no \"weights\" quantization (llmquant reads weight-only schemes)", label);
    int64_t b        = 0;
    char    type[16] = "int", strat[32] = "", ao[16] = "";
    int     dyn = 0;
    *sym        = 1;
    LQ_TRY(lq_json_get_i64(w, "num_bits", 1, 1, 64, &b, label, err));
    if (lq_qc_has(w, "type"))
        LQ_TRY(lq_json_get_str(w, "type", 1, type, sizeof type, label, err));
    LQ_RETURN_IF(!lq_ieq(type, "int"), err, LQ_ERR_UNSUPPORTED,
                 "%s: weights \"type\" = \"%s\" (llmquant reads integer weights)", label, type);
    LQ_RETURN_IF(b != 2 && b != 3 && b != 4 && b != 8, err, LQ_ERR_UNSUPPORTED,
                 "%s: weights \"num_bits\" = %lld (llmquant's kernels: 2, 3, 4, 8)", label,
                 (long long)b);
    LQ_TRY(lq_qc_bool(w, "symmetric", sym, label, err));
    LQ_TRY(lq_qc_bool(w, "dynamic", &dyn, label, err));
    LQ_RETURN_IF(dyn, err, LQ_ERR_UNSUPPORTED, "%s: dynamic weight quantization", label);
    *gs = 0;
    if (lq_qc_has(w, "group_size"))
        LQ_TRY(lq_json_get_i64(w, "group_size", 1, -1, INT32_MAX, gs, label, err));
    if (lq_qc_has(w, "strategy"))
        LQ_TRY(lq_json_get_str(w, "strategy", 1, strat, sizeof strat, label, err));
    else /* QuantizationArgs infers it from the group size */
        snprintf(strat, sizeof strat, "%s", *gs > 0 ? "group" : *gs == -1 ? "channel" : "tensor");
    if (lq_ieq(strat, "channel"))
        *gs = -1;
    else
        LQ_RETURN_IF(!lq_ieq(strat, "group") || *gs <= 0, err, LQ_ERR_UNSUPPORTED,
                     "%s: weights \"strategy\" = \"%s\" with group_size %lld (llmquant reads "
                     "group and channel)",
                     label, strat, (long long)*gs);
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(w, "actorder");
    if (cJSON_IsBool(a))
        *act = cJSON_IsTrue(a);
    else if (a && !cJSON_IsNull(a))
        LQ_TRY(lq_json_get_str(w, "actorder", 1, ao, sizeof ao, label, err));
    if (ao[0])
        *act = 1; /* "weight"/"static" keep column-order groups; "group" adds weight_g_idx */
    *bits = (int)b;
    return LQ_OK;
}

/* A module target of a config group and its group's scheme. */
typedef struct ct_target {
    const char *name;
    int         bits, sym, act;
    int64_t     gs;
} ct_target;

static int cmp_target(const void *a, const void *b) {
    return strcmp(((const ct_target *)a)->name, ((const ct_target *)b)->name);
}

/* A target or ignore entry as a "dynamic" pattern: "re:X" -> X (re.match: anchored at the
 * start), a module name -> the name literally, to its end. */
static lq_status entry_pattern(const char *e, char *buf, size_t cap, const char *label,
                               lq_err *err) {
    if (!strncmp(e, "re:", 3)) {
        LQ_RETURN_IF(strlen(e + 3) >= cap, err, LQ_ERR_UNSUPPORTED, "%s: pattern too long", label);
        snprintf(buf, cap, "%s", e + 3);
        return LQ_OK;
    }
    buf[0]     = '\0';
    size_t len = lq_qrule_append_name(buf, cap, 0, e);
    len        = lq_qrule_append_name(buf, cap, len, "$");
    LQ_RETURN_IF(len >= cap, err, LQ_ERR_UNSUPPORTED, "%s: module name too long", label);
    return LQ_OK;
}

/* A class name target ("Linear"), not a module name. */
static int is_class(const char *t) {
    return strncmp(t, "re:", 3) && !strchr(t, '.') && t[0] >= 'A' && t[0] <= 'Z';
}

/* config_groups -> the base config (the group targeting "Linear", else the first) and one
 * "dynamic" rule per other target, in compressed-tensors' precedence: ignore first, then exact
 * module names, then regular expressions in sorted order (match_targets), then the class. */
lq_status lq_ct_parse_config(const cJSON *qc, const char *label, lq_qconfig *c, lq_err *err) {
    char s[64]   = "";
    c->format    = LQ_FMT_GPTQ;
    c->container = LQ_CONTAINER_CT;
    c->desc_act  = 0;
    if (lq_qc_has(qc, "format"))
        LQ_TRY(lq_json_get_str(qc, "format", 1, s, sizeof s, label, err));
    LQ_RETURN_IF(!lq_ieq(s, CT_FORMAT) && !lq_ieq(s, "mixed-precision"), err, LQ_ERR_UNSUPPORTED,
                 "%s: compressed-tensors \"format\" = \"%s\" (llmquant reads %s)", label, s,
                 CT_FORMAT);
    if (lq_qc_has(qc, "quantization_status")) {
        LQ_TRY(lq_json_get_str(qc, "quantization_status", 1, s, sizeof s, label, err));
        LQ_RETURN_IF(!lq_ieq(s, "compressed"), err, LQ_ERR_UNSUPPORTED,
                     "%s: \"quantization_status\" = \"%s\": the weights are not stored "
                     "compressed",
                     label, s);
    }
    LQ_RETURN_IF(lq_qc_has(qc, "kv_cache_scheme"), err, LQ_ERR_UNSUPPORTED,
                 "%s: \"kv_cache_scheme\" (a quantized KV cache) is not supported", label);
    static const char *const empty_keys[] = {"transform_config", "sparsity_config"};
    for (int i = 0; i < 2; i++) {
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(qc, empty_keys[i]);
        LQ_RETURN_IF(o && !cJSON_IsNull(o) && cJSON_GetArraySize(o) > 0, err, LQ_ERR_UNSUPPORTED,
                     "%s: a non-empty \"%s\" is not supported", label, empty_keys[i]);
    }
    const cJSON *groups = cJSON_GetObjectItemCaseSensitive(qc, "config_groups");
    LQ_RETURN_IF(!cJSON_IsObject(groups) || cJSON_GetArraySize(groups) == 0, err,
                 LQ_ERR_CONFIG_VALUE, "%s: \"config_groups\" is missing or empty", label);
    const cJSON *ign = cJSON_GetObjectItemCaseSensitive(qc, "ignore"), *it;
    LQ_RETURN_IF(ign && !cJSON_IsNull(ign) && !cJSON_IsArray(ign), err, LQ_ERR_CONFIG_VALUE,
                 "%s: \"ignore\" is not a list", label);
    cJSON_ArrayForEach(it, ign) {
        char pat[4096];
        LQ_RETURN_IF(!cJSON_IsString(it), err, LQ_ERR_CONFIG_VALUE,
                     "%s: \"ignore\" holds a non-string", label);
        if (is_class(it->valuestring))
            continue; /* a class ("Embedding") llmquant never quantizes anyway */
        LQ_TRY(entry_pattern(it->valuestring, pat, sizeof pat, label, err));
        LQ_TRY(lq_qconfig_add_rule(c, pat, 1, 0, 0, -1, -1, label, err));
    }
    /* every target, sorted as compressed-tensors ranks them: names, then "re:" sorted */
    int          nt = 0, base_set = 0;
    ct_target    targets[512];
    const cJSON *g;
    cJSON_ArrayForEach(g, groups) {
        char sub[256];
        snprintf(sub, sizeof sub, "%s: config group \"%.64s\"", label, g->string ? g->string : "");
        LQ_RETURN_IF(!cJSON_IsObject(g), err, LQ_ERR_CONFIG_VALUE, "%s is not an object", sub);
        const cJSON *ia = cJSON_GetObjectItemCaseSensitive(g, "input_activations");
        LQ_RETURN_IF(ia && !cJSON_IsNull(ia), err, LQ_ERR_UNSUPPORTED,
                     "%s: quantized activations (llmquant runs weight-only schemes)", sub);
        if (lq_qc_has(g, "format")) {
            LQ_TRY(lq_json_get_str(g, "format", 1, s, sizeof s, sub, err));
            LQ_RETURN_IF(!lq_ieq(s, CT_FORMAT), err, LQ_ERR_UNSUPPORTED,
                         "%s: \"format\" = \"%s\" (llmquant reads %s)", sub, s, CT_FORMAT);
        }
        int     bits = 0, sym = 1, act = 0;
        int64_t gs = 0;
        LQ_TRY(parse_weights(cJSON_GetObjectItemCaseSensitive(g, "weights"), sub, &bits, &gs, &sym,
                             &act, err));
        const cJSON *ts = cJSON_GetObjectItemCaseSensitive(g, "targets"), *t;
        LQ_RETURN_IF(!cJSON_IsArray(ts), err, LQ_ERR_CONFIG_VALUE, "%s: \"targets\" is not a list",
                     sub);
        cJSON_ArrayForEach(t, ts) {
            LQ_RETURN_IF(!cJSON_IsString(t), err, LQ_ERR_CONFIG_VALUE,
                         "%s: \"targets\" holds a non-string", sub);
            if (!is_class(t->valuestring)) {
                LQ_RETURN_IF(nt == 512, err, LQ_ERR_UNSUPPORTED, "%s: over 512 targets", label);
                targets[nt++] = (ct_target){t->valuestring, bits, sym, act, gs};
                continue;
            }
            LQ_RETURN_IF(strcmp(t->valuestring, "Linear"), err, LQ_ERR_UNSUPPORTED,
                         "%s: target \"%s\" (llmquant quantizes Linear modules)", sub,
                         t->valuestring);
            if (!base_set) {
                base_set = 1, c->bits = bits, c->group_size = gs, c->sym = sym;
                c->desc_act |= act;
            }
        }
    }
    /* the order of match_targets: exact names before "re:", each sorted */
    qsort(targets, (size_t)nt, sizeof *targets, cmp_target);
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < nt; i++) {
            const ct_target *tg = &targets[i];
            char             pat[4096];
            if ((strncmp(tg->name, "re:", 3) == 0) != pass)
                continue;
            LQ_TRY(entry_pattern(tg->name, pat, sizeof pat, label, err));
            LQ_TRY(lq_qconfig_add_rule(c, pat, 0, tg->bits, tg->gs, tg->sym, tg->act, label, err));
            if (!base_set) { /* no class target: the first target's scheme is the default */
                base_set = 1, c->bits = tg->bits, c->group_size = tg->gs, c->sym = tg->sym;
            }
        }
    LQ_RETURN_IF(!base_set, err, LQ_ERR_CONFIG_VALUE, "%s: \"config_groups\" has no targets",
                 label);
    return LQ_OK;
}
