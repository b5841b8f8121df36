/* quantization_config <-> lq_qconfig: defaults, GPTQModel's "dynamic" rules, the JSON writer and
 * the parser that finds the format (quant_method, or the keys of older files) and hands the
 * object to the format's own parser (lq_qfmt_*.c). Keys and spellings follow the reference
 * tools: AutoGPTQ BaseQuantizeConfig.to_dict, AutoAWQ to_transformers_dict, transformers
 * BitsAndBytesConfig.to_dict. */
#include "lq_qformat_int.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <ctype.h>
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

void lq_qconfig_default(lq_format f, lq_qconfig *c) {
    memset(c, 0, sizeof *c);
    c->format = f;
    snprintf(c->torch_dtype, sizeof c->torch_dtype, "float16");
    const lq_qformat *q = lq_qformat_get(f);
    if (q)
        q->qconfig_default(c);
}

const char *lq_qconfig_format_name(const lq_qconfig *c) {
    return c->container == LQ_CONTAINER_CT ? LQ_CT_QUANT_METHOD : lq_qformat_get(c->format)->name;
}

void lq_qconfig_free(lq_qconfig *c) {
    if (!c)
        return;
    for (int64_t i = 0; i < c->n_outlier_modules; i++)
        free(c->outlier_modules[i]);
    free(c->outlier_modules);
    c->outlier_modules   = NULL;
    c->n_outlier_modules = 0;
    for (int64_t i = 0; i < c->n_block_modules; i++)
        free(c->block_modules[i]);
    free(c->block_modules);
    c->block_modules   = NULL;
    c->n_block_modules = 0;
    for (int64_t i = 0; i < c->n_dynamic; i++) {
        free(c->dynamic[i].pattern);
        pcre2_code_free(c->dynamic[i].re);
    }
    free(c->dynamic);
    c->dynamic   = NULL;
    c->n_dynamic = 0;
}

size_t lq_qrule_append_name(char *buf, size_t cap, size_t n, const char *s) {
    for (; *s; s++) {
        const size_t len = *s == '.' ? 2 : 1;
        if (n + len >= cap)
            return cap;
        if (len == 2)
            buf[n++] = '\\';
        buf[n++] = *s;
        buf[n]   = '\0';
    }
    return n;
}

lq_status lq_qconfig_add_rule(lq_qconfig *c, const char *pattern, int negative, int bits,
                              int64_t group_size, int sym, int desc_act, const char *label,
                              lq_err *err) {
    int         ec;
    PCRE2_SIZE  eo;
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
    c->dynamic        = a;
    a[c->n_dynamic++] = (lq_qrule){p, re, negative, bits, group_size, sym, desc_act};
    return LQ_OK;
}

lq_status lq_qconfig_for_module(const lq_qconfig *c, const char *module, lq_qconfig *eff,
                                int *excluded, lq_err *err) {
    *eff                   = *c;
    eff->dynamic           = NULL;
    eff->n_dynamic         = 0;
    eff->outlier_modules   = NULL;
    eff->n_outlier_modules = 0;
    eff->block_modules     = NULL;
    eff->n_block_modules   = 0;
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

static lq_status push_str(char ***arr, int64_t *n, const char *str, lq_err *err) {
    char **a = realloc(*arr, (size_t)(*n + 1) * sizeof *a);
    LQ_RETURN_IF(!a, err, LQ_ERR_NOMEM, "out of memory");
    *arr  = a;
    a[*n] = strdup(str);
    LQ_RETURN_IF(!a[*n], err, LQ_ERR_NOMEM, "out of memory");
    (*n)++;
    return LQ_OK;
}

lq_status lq_qconfig_add_outlier_module(lq_qconfig *c, const char *module, lq_err *err) {
    return push_str(&c->outlier_modules, &c->n_outlier_modules, module, err);
}

lq_status lq_qconfig_add_block_module(lq_qconfig *c, const char *leaf, lq_err *err) {
    return push_str(&c->block_modules, &c->n_block_modules, leaf, err);
}

int lq_qc_add(cJSON *o, const char *key, cJSON *v) {
    return v && cJSON_AddItemToObject(o, key, v);
}

cJSON *lq_qc_str_or_null(const char *s) {
    return s && *s ? cJSON_CreateString(s) : cJSON_CreateNull();
}

cJSON *lq_qc_skip_list(const lq_qconfig *c) {
    if (!c->has_skip)
        return cJSON_CreateNull();
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < c->n_skip; i++)
        cJSON_AddItemToArray(a, cJSON_CreateString(c->skip[i]));
    return a;
}

/* A JSON number that Python reads back as a float: transformers type-checks some fields
 * (BitsAndBytesConfig.post_init: "llm_int8_threshold must be a float"), and cJSON would print
 * 6.0 as the integer 6. */
cJSON *lq_qc_float(double v) {
    char buf[64];
    snprintf(buf, sizeof buf, "%.17g", v);
    if (!strpbrk(buf, ".eEn")) /* integral and finite: add the fraction */
        strncat(buf, ".0", sizeof buf - strlen(buf) - 1);
    return cJSON_CreateRaw(buf);
}

/* --- parsing ---------------------------------------------------------------------------- */
int lq_qc_has(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return v && !cJSON_IsNull(v);
}

int lq_ieq(const char *a, const char *b) {
    for (; *a && *b; a++, b++)
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b))
            return 0;
    return *a == *b;
}

/* First present key among synonyms (NULL-terminated); NULL if none. */
const char *lq_qc_synonym(const cJSON *o, const char *const *keys) {
    for (int i = 0; keys[i]; i++)
        if (lq_qc_has(o, keys[i]))
            return keys[i];
    return NULL;
}

lq_status lq_qc_bool(const cJSON *o, const char *key, int *v, const char *label, lq_err *err) {
    return lq_qc_has(o, key) ? lq_json_get_bool(o, key, 0, v, label, err) : LQ_OK;
}

lq_status lq_qc_parse_skip(const cJSON *o, const char *key, lq_qconfig *c, const char *label,
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

lq_status lq_qconfig_to_json(const lq_qconfig *c, cJSON **out, lq_err *err) {
    *out                = NULL;
    const lq_qformat *t = lq_qformat_get(c->format);
    LQ_RETURN_IF(!t || !t->write_hf_config, err, LQ_ERR_UNSUPPORTED,
                 "no quantization_config writer for format %d", (int)c->format);
    cJSON *qc = cJSON_CreateObject();
    LQ_RETURN_IF(!qc, err, LQ_ERR_NOMEM, "out of memory");
    const lq_status st = c->container == LQ_CONTAINER_CT ? lq_ct_write_config(c, qc, err)
                                                         : t->write_hf_config(c, qc, err);
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
    if (c->container == LQ_CONTAINER_CT) /* its ignore list says what is left in float */
        return LQ_OK;
    const char *sidecar = lq_qformat_get(c->format)->sidecar;
    if (sidecar && dir) {
        char path[4096];
        LQ_RETURN_IF(!lq_path_join(path, sizeof path, dir, sidecar), err, LQ_ERR_INVALID_ARG,
                     "%s: path too long", dir);
        LQ_TRY(lq_json_write_file(qc, path, err));
    }
    const char *bk = lq_qformat_get(c->format)->block_key;
    if (bk && c->n_block_modules > 0) {
        cJSON *all = cJSON_CreateArray(), *blk = cJSON_CreateArray();
        LQ_RETURN_IF(!all || !blk || !cJSON_AddItemToArray(all, blk) ||
                         !cJSON_AddItemToObject(qc, bk, all),
                     err, LQ_ERR_NOMEM, "out of memory");
        for (int64_t i = 0; i < c->n_block_modules; i++)
            LQ_RETURN_IF(!cJSON_AddItemToArray(blk, cJSON_CreateString(c->block_modules[i])), err,
                         LQ_ERR_NOMEM, "out of memory");
    }
    return LQ_OK;
}

/* The format a quantization_config describes: its quant_method (a format whose select_key is
 * true when several share one), or for older files the first format, from the last row up,
 * whose legacy keys appear (no tool writes another tool's keys). */
static lq_status detect(const cJSON *qc, const char *label, lq_format *out, lq_container *container,
                        lq_err *err) {
    char         qm[64] = "";
    const cJSON *v      = cJSON_GetObjectItemCaseSensitive(qc, "quant_method");
    if (v && !cJSON_IsNull(v))
        LQ_TRY(lq_json_get_str(qc, "quant_method", 1, qm, sizeof qm, label, err));
    for (int f = LQ_FMT_COUNT - 1; !qm[0] && f > LQ_FMT_DENSE; f--) {
        const lq_qformat *q = lq_qformat_get((lq_format)f);
        for (int i = 0; i < 4 && q->legacy_keys[i]; i++)
            if (lq_qc_has(qc, q->legacy_keys[i])) {
                snprintf(qm, sizeof qm, "%s", q->quant_method);
                break;
            }
    }
    if (!qm[0])
        LQ_FAIL(err, LQ_ERR_CONFIG_MISSING_KEY, "%s: key \"quant_method\" is missing", label);
    if (lq_ieq(qm, LQ_CT_QUANT_METHOD)) { /* GPTQ's content in its own layout */
        *out       = LQ_FMT_GPTQ;
        *container = LQ_CONTAINER_CT;
        return LQ_OK;
    }
    int         found = 0, selected = 0;
    const char *keys[2] = {"", ""}; /* the keys that choose between formats of one method */
    for (int f = LQ_FMT_DENSE + 1; f < LQ_FMT_COUNT; f++) {
        const lq_qformat *q = lq_qformat_get((lq_format)f);
        if (!lq_ieq(qm, q->quant_method))
            continue;
        int on = !q->select_key;
        if (q->select_key) {
            keys[found > 0] = q->select_key;
            LQ_TRY(lq_qc_bool(qc, q->select_key, &on, label, err));
        }
        found++;
        if (on)
            selected++, *out = (lq_format)f;
    }
    if (!found)
        LQ_FAIL(err, LQ_ERR_UNSUPPORTED,
                "%s: key \"quant_method\" = \"%s\" (supported: gptq, awq, bitsandbytes, "
                "compressed-tensors)",
                label, qm);
    if (selected != 1)
        LQ_FAIL(err, LQ_ERR_CONFIG_VALUE, "%s: exactly one of \"%s\" / \"%s\" must be true", label,
                keys[0], keys[1]);
    return LQ_OK;
}

static lq_status parse_qc(const cJSON *qc, const char *label, const char *torch_dtype,
                          lq_qconfig *out, lq_err *err) {
    LQ_RETURN_IF(!cJSON_IsObject(qc), err, LQ_ERR_CONFIG_VALUE,
                 "%s: quantization_config must be an object", label);
    lq_format    f  = LQ_FMT_DENSE;
    lq_container ct = LQ_CONTAINER_NATIVE;
    LQ_TRY(detect(qc, label, &f, &ct, err));
    lq_qconfig_default(f, out);
    if (torch_dtype && torch_dtype[0])
        snprintf(out->torch_dtype, sizeof out->torch_dtype, "%s", torch_dtype);
    const lq_status st = ct == LQ_CONTAINER_CT
                             ? lq_ct_parse_config(qc, label, out, err)
                             : lq_qformat_get(f)->parse_hf_config(qc, label, out, err);
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
    const char *dk     = lq_qc_synonym(root, (const char *const[]){"torch_dtype", "dtype", NULL});
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
