#include "lq_json.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

bool lq_json_depth_exceeds(const char *text, size_t len, int max_depth) {
    int  depth     = 0;
    bool in_string = false;
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        if (in_string) {
            if (c == '\\')
                i++; /* the escaped character cannot close the string */
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '{' || c == '[') {
            if (++depth > max_depth)
                return true;
        } else if (c == '}' || c == ']') {
            depth--;
        }
    }
    return false;
}

bool lq_json_only_space(const char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != ' ' && p[i] != '\t' && p[i] != '\n' && p[i] != '\r')
            return false;
    return true;
}

int64_t lq_json_escaped_nul(const char *text, size_t len) {
    bool in_string = false;
    for (size_t i = 0; i < len; i++) {
        const char c = text[i];
        if (!in_string) {
            in_string = c == '"';
        } else if (c == '"') {
            in_string = false;
        } else if (c == '\\' && i + 1 < len) {
            if (text[i + 1] == 'u' && i + 5 < len && !strncmp(text + i + 2, "0000", 4))
                return (int64_t)i;
            i++; /* the escaped character */
        }
    }
    return -1;
}

static int cmp_key(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

const char *lq_json_duplicate_key(const cJSON *v, int *oom) {
    if (!v || !v->child)
        return NULL;
    if (cJSON_IsObject(v) && v->child->next) {
        size_t n = 0;
        for (const cJSON *c = v->child; c; c = c->next)
            n++;
        const char **keys = malloc(n * sizeof *keys);
        if (!keys) {
            *oom = 1;
            return NULL;
        }
        n = 0;
        for (const cJSON *c = v->child; c; c = c->next)
            keys[n++] = c->string ? c->string : "";
        qsort(keys, n, sizeof *keys, cmp_key); /* n log n: a vocabulary has 10^5 keys */
        const char *dup = NULL;
        for (size_t i = 1; i < n && !dup; i++)
            if (!strcmp(keys[i - 1], keys[i]))
                dup = keys[i];
        free(keys);
        if (dup)
            return dup;
    }
    for (const cJSON *c = v->child; c; c = c->next) { /* depth is bounded by the parser */
        const char *d = lq_json_duplicate_key(c, oom);
        if (d || *oom)
            return d;
    }
    return NULL;
}

lq_status lq_json_parse(const char *text, size_t len, const char *label, cJSON **out, lq_err *err) {
    *out = NULL;
    /* cJSON recurses per level (its own cap is 1000); files we read nest < 10 levels, so a
     * tighter bound turns hostile input into a clean error long before the stack matters. */
    if (lq_json_depth_exceeds(text, len, LQ_JSON_MAX_DEPTH))
        LQ_FAIL(err, LQ_ERR_JSON, "%s: JSON nests deeper than %d levels", label, LQ_JSON_MAX_DEPTH);
    const char *end  = NULL;
    cJSON      *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        long off = end ? (long)(end - text) : -1;
        LQ_FAIL(err, LQ_ERR_JSON, "%s: invalid JSON near byte %ld", label, off);
    }
    if (!lq_json_only_space(end, len - (size_t)(end - text))) {
        cJSON_Delete(root);
        LQ_FAIL(err, LQ_ERR_JSON, "%s: unexpected data after the JSON value at byte %ld", label,
                (long)(end - text));
    }
    const int64_t nul = lq_json_escaped_nul(text, len);
    int           oom = 0;
    const char   *dup = nul < 0 ? lq_json_duplicate_key(root, &oom) : NULL;
    if (nul >= 0 || dup || oom) {
        lq_status st = nul >= 0 ? lq_fail(err, LQ_ERR_JSON,
                                          "%s: a string holds an escaped NUL (\\u0000) at byte "
                                          "%lld",
                                          label, (long long)nul)
                       : dup    ? lq_fail(err, LQ_ERR_JSON,
                                          "%s: key \"%.200s\" appears twice in one "
                                             "object",
                                          label, dup)
                                : lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", label);
        cJSON_Delete(root);
        return st;
    }
    *out = root;
    return LQ_OK;
}

lq_status lq_json_load_file(const char *path, int64_t max_bytes, cJSON **out, lq_err *err) {
    char   *buf = NULL;
    int64_t len = 0;
    LQ_TRY(lq_read_file(path, max_bytes, &buf, &len, err));
    lq_status st = lq_json_parse(buf, (size_t)len, path, out, err);
    free(buf);
    return st;
}

static const cJSON *get(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return (v && !cJSON_IsNull(v)) ? v : NULL;
}

lq_status lq_json_get_i64(const cJSON *obj, const char *key, int required, int64_t lo, int64_t hi,
                          int64_t *out, const char *label, lq_err *err) {
    const cJSON *v = get(obj, key);
    if (!v) {
        if (required)
            LQ_FAIL(err, LQ_ERR_CONFIG_MISSING_KEY, "%s: missing key \"%s\"", label, key);
        return LQ_OK;
    }
    if (!cJSON_IsNumber(v))
        LQ_FAIL(err, LQ_ERR_CONFIG_VALUE, "%s: key \"%s\" must be an integer", label, key);
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d) || d < (double)lo || d > (double)hi)
        LQ_FAIL(err, LQ_ERR_CONFIG_VALUE, "%s: key \"%s\" = %g is not an integer in [%lld, %lld]",
                label, key, d, (long long)lo, (long long)hi);
    *out = (int64_t)d;
    return LQ_OK;
}

lq_status lq_json_get_f64(const cJSON *obj, const char *key, int required, double *out,
                          const char *label, lq_err *err) {
    const cJSON *v = get(obj, key);
    if (!v) {
        if (required)
            LQ_FAIL(err, LQ_ERR_CONFIG_MISSING_KEY, "%s: missing key \"%s\"", label, key);
        return LQ_OK;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        LQ_FAIL(err, LQ_ERR_CONFIG_VALUE, "%s: key \"%s\" must be a finite number", label, key);
    *out = v->valuedouble;
    return LQ_OK;
}

lq_status lq_json_get_bool(const cJSON *obj, const char *key, int required, int *out,
                           const char *label, lq_err *err) {
    const cJSON *v = get(obj, key);
    if (!v) {
        if (required)
            LQ_FAIL(err, LQ_ERR_CONFIG_MISSING_KEY, "%s: missing key \"%s\"", label, key);
        return LQ_OK;
    }
    if (!cJSON_IsBool(v))
        LQ_FAIL(err, LQ_ERR_CONFIG_VALUE, "%s: key \"%s\" must be true or false", label, key);
    *out = cJSON_IsTrue(v);
    return LQ_OK;
}

lq_status lq_json_get_str(const cJSON *obj, const char *key, int required, char *buf, size_t cap,
                          const char *label, lq_err *err) {
    const cJSON *v = get(obj, key);
    if (!v) {
        if (required)
            LQ_FAIL(err, LQ_ERR_CONFIG_MISSING_KEY, "%s: missing key \"%s\"", label, key);
        return LQ_OK;
    }
    if (!cJSON_IsString(v))
        LQ_FAIL(err, LQ_ERR_CONFIG_VALUE, "%s: key \"%s\" must be a string", label, key);
    if (strlen(v->valuestring) >= cap)
        LQ_FAIL(err, LQ_ERR_CONFIG_VALUE, "%s: key \"%s\" is too long", label, key);
    strcpy(buf, v->valuestring);
    return LQ_OK;
}

lq_status lq_json_write_file(const cJSON *obj, const char *path, lq_err *err) {
    char *text = cJSON_Print(obj);
    if (!text)
        LQ_FAIL(err, LQ_ERR_NOMEM, "%s: out of memory serializing JSON", path);
    /* cJSON_Print indents with tabs and puts a tab after ':'; HF files (json.dumps indent=2)
     * use two spaces per level and ": ". */
    size_t n = strlen(text), tabs = 0;
    for (size_t i = 0; i < n; i++)
        tabs += text[i] == '\t';
    char *out = malloc(n + tabs + 2);
    if (!out) {
        free(text);
        LQ_FAIL(err, LQ_ERR_NOMEM, "%s: out of memory serializing JSON", path);
    }
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (text[i] == '\t' && i > 0 && text[i - 1] == ':') {
            out[o++] = ' ';
        } else if (text[i] == '\t') {
            out[o++] = ' ';
            out[o++] = ' ';
        } else {
            out[o++] = text[i];
        }
    }
    out[o++] = '\n';
    free(text);

    char tmp[4200];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
        free(out);
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "%s: path too long", path);
    }
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        int e = errno;
        free(out);
        LQ_FAIL(err, lq_status_from_errno(e), "%s: %s", tmp, strerror(e));
    }
    size_t w  = fwrite(out, 1, o, f);
    int    e1 = (w != o) ? errno : 0;
    int    e2 = fclose(f) != 0 ? errno : 0;
    free(out);
    if (w != o || e2) {
        unlink(tmp);
        int e = e1 ? e1 : (e2 ? e2 : EIO);
        LQ_FAIL(err, lq_status_from_errno(e), "%s: write failed: %s", path, strerror(e));
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        LQ_FAIL(err, lq_status_from_errno(e), "%s: rename failed: %s", path, strerror(e));
    }
    return LQ_OK;
}

/* The next number token of text after *pos (strings skipped); its span, or 0 at the end. */
static int next_number(const char *t, size_t len, size_t *pos, size_t *b, size_t *e) {
    size_t i = *pos;
    while (i < len) {
        const char ch = t[i];
        if (ch == '"') {
            for (i++; i < len && t[i] != '"'; i++)
                if (t[i] == '\\')
                    i++;
            i++;
        } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
            *b = i;
            while (i < len && (t[i] == '-' || t[i] == '+' || t[i] == '.' || t[i] == 'e' ||
                               t[i] == 'E' || (t[i] >= '0' && t[i] <= '9')))
                i++;
            *e = *pos = i;
            return 1;
        } else {
            i++;
        }
    }
    *pos = len;
    return 0;
}

/* Walks src (text's own tree, document order = token order) beside dst (the edited tree). */
static lq_status keep_floats(const cJSON *src, cJSON *dst_parent, cJSON *dst, const char *t,
                             size_t len, size_t *pos) {
    if (cJSON_IsNumber(src)) {
        size_t b = 0, e = 0;
        if (!next_number(t, len, pos, &b, &e))
            return LQ_ERR_INTERNAL;
        const int frac =
            memchr(t + b, '.', e - b) || memchr(t + b, 'e', e - b) || memchr(t + b, 'E', e - b);
        if (!frac || !dst || !cJSON_IsNumber(dst) || dst->valuedouble != src->valuedouble)
            return LQ_OK;
        char raw[64];
        if (e - b >= sizeof raw)
            return LQ_OK; /* cJSON's own spelling then */
        memcpy(raw, t + b, e - b);
        raw[e - b] = 0;
        cJSON *r   = cJSON_CreateRaw(raw);
        if (!r)
            return LQ_ERR_NOMEM;
        const int done = dst->string
                             ? cJSON_ReplaceItemInObjectCaseSensitive(dst_parent, dst->string, r)
                             : cJSON_ReplaceItemViaPointer(dst_parent, dst, r);
        if (!done)
            cJSON_Delete(r);
        return LQ_OK;
    }
    int i = 0;
    for (const cJSON *c = src ? src->child : NULL; c; c = c->next, i++) {
        cJSON *d = NULL;
        if (dst && cJSON_IsObject(src) && cJSON_IsObject(dst))
            d = cJSON_GetObjectItemCaseSensitive(dst, c->string);
        else if (dst && cJSON_IsArray(src) && cJSON_IsArray(dst))
            d = cJSON_GetArrayItem(dst, i);
        LQ_TRY(keep_floats(c, dst, d, t, len, pos));
    }
    return LQ_OK;
}

lq_status lq_json_keep_float_spelling(cJSON *root, const char *text, size_t len, lq_err *err) {
    cJSON *src = cJSON_ParseWithLength(text, len);
    if (!src)
        LQ_FAIL(err, LQ_ERR_INTERNAL, "config: the source JSON no longer parses");
    size_t          pos = 0;
    const lq_status st  = keep_floats(src, NULL, root, text, len, &pos);
    cJSON_Delete(src);
    if (st != LQ_OK)
        LQ_FAIL(err, st, "config: keeping the source's number spelling failed");
    return LQ_OK;
}
