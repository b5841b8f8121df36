/* Model checkpoints: Hugging Face directories and GGUF files behind one interface. */
#include "lq_source.h"

#include "lq_gguf_hf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct lq_source {
    char                path[4096];
    char                config_label[4200];
    char               *config; /* config.json text */
    int64_t             config_len;
    lq_st              *st;
    lq_gguf            *gguf; /* NULL for a directory */
    const lq_gguf_arch *arch;
    lq_model_config     cfg;
};

void lq_source_close(lq_source *s) {
    if (!s)
        return;
    lq_st_close(s->st);
    lq_gguf_close(s->gguf);
    free(s->config);
    free(s);
}

static lq_status open_dir(lq_source *s, lq_err *err) {
    if (!lq_path_join(s->config_label, sizeof s->config_label, s->path, "config.json"))
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "%s: path too long", s->path);
    /* unreadable is not missing: say which */
    if (access(s->path, R_OK | X_OK) != 0 && errno == EACCES)
        LQ_FAIL(err, LQ_ERR_PERMISSION, "%s: permission denied (cannot read the model directory)",
                s->path);
    struct stat sb;
    if (stat(s->config_label, &sb) != 0 && errno == EACCES)
        LQ_FAIL(err, LQ_ERR_PERMISSION, "%s: permission denied", s->config_label);
    if (!lq_file_exists(s->config_label))
        LQ_FAIL(err, LQ_ERR_NOT_FOUND,
                "%s: no config.json (not a Hugging Face model directory or a .gguf file)", s->path);
    LQ_TRY(lq_read_file(s->config_label, 16 << 20, &s->config, &s->config_len, err));
    LQ_TRY(lq_config_parse(s->config, (size_t)s->config_len, s->config_label, &s->cfg, err));
    return lq_st_open_dir(s->path, &s->st, err);
}

/* The float type most weights are stored in, as config.json's torch_dtype. */
static const char *gguf_torch_dtype(const lq_gguf *g) {
    int64_t n16 = 0, nbf = 0, n32 = 0, nq = 0;
    for (int64_t i = 0; i < lq_gguf_tensor_count(g); i++) {
        const lq_gguf_tensor *t = lq_gguf_tensor_get(g, i);
        if (t->ndim < 2)
            continue;
        int d = lq_dtype_from_ggml(t->ggml_type);
        n16 += d == LQ_DT_F16;
        nbf += d == LQ_DT_BF16;
        n32 += d == LQ_DT_F32;
        nq += d != LQ_DT_F16 && d != LQ_DT_BF16 && d != LQ_DT_F32;
    }
    if (nbf > n16 && nbf >= n32 && nbf >= nq)
        return "bfloat16";
    if (n32 > n16 && n32 >= nq)
        return "float32";
    return "float16";
}

static lq_status open_gguf(lq_source *s, lq_err *err) {
    snprintf(s->config_label, sizeof s->config_label, "%s", s->path);
    LQ_TRY(lq_gguf_open(s->path, &s->gguf, err));
    const lq_gguf *g = s->gguf;
    const int64_t  n = lq_gguf_tensor_count(g);
    /* Every tensor must decode before anything else is judged: a file of types we cannot read
     * is reported as such, whatever its architecture. */
    for (int64_t i = 0; i < n; i++) {
        const lq_gguf_tensor *t = lq_gguf_tensor_get(g, i);
        if (lq_dtype_from_ggml(t->ggml_type) < 0)
            LQ_FAIL(err, LQ_ERR_GGUF_TYPE,
                    "%s: tensor \"%s\" has type %s, which llmquant cannot decode (F32, F16, "
                    "BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K can be)",
                    s->path, t->name, lq_ggml_type_name(t->ggml_type));
    }
    LQ_TRY(lq_gguf_hf_arch(g, &s->arch, err));
    LQ_TRY(lq_gguf_hf_config(g, s->arch, gguf_torch_dtype(g), &s->config, &s->config_len, err));
    LQ_TRY(lq_config_parse(s->config, (size_t)s->config_len, s->config_label, &s->cfg, err));
    /* views: the tensors but those that are configuration, the experts' stacked tensors one
     * view per expert */
    int64_t nviews = 0;
    for (int64_t ti = 0; ti < n; ti++) {
        const lq_gguf_tensor *t = lq_gguf_tensor_get(g, ti);
        char                  hf[256];
        int                   heads;
        if (lq_gguf_hf_tensor_is_config(s->arch, t->name))
            continue;
        if (!lq_gguf_hf_tensor_name(g, s->arch, t->name, hf, sizeof hf, &heads))
            LQ_FAIL(err, LQ_ERR_UNSUPPORTED_ARCH,
                    "%s: tensor \"%s\" has no counterpart in a Hugging Face %s model", s->path,
                    t->name, s->arch->model_type);
        if (lq_gguf_hf_is_stacked(hf) && (t->ndim != 3 || t->ne[2] < 1 || t->nbytes % t->ne[2]))
            LQ_FAIL(err, LQ_ERR_GGUF_FORMAT,
                    "%s: tensor \"%s\" is not a stack of experts' matrices [experts, n, k]",
                    s->path, t->name);
        nviews += lq_gguf_hf_is_stacked(hf) ? t->ne[2] : 1;
    }
    lq_st_tensor *v   = lq_calloc_n(nviews ? nviews : 1, sizeof *v);
    char(*names)[256] = lq_calloc_n(nviews ? nviews : 1, sizeof *names);
    lq_status st      = LQ_OK;
    if (!v || !names)
        LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory", s->path);
    int64_t nv = 0;
    for (int64_t ti = 0; ti < n; ti++) {
        const lq_gguf_tensor *t = lq_gguf_tensor_get(g, ti);
        int                   heads;
        char                  hf[256];
        if (lq_gguf_hf_tensor_is_config(s->arch, t->name))
            continue; /* its values are in config.json */
        lq_gguf_hf_tensor_name(g, s->arch, t->name, hf, sizeof hf, &heads);
        const int64_t ne = lq_gguf_hf_is_stacked(hf) ? t->ne[2] : 1;
        for (int64_t e = 0; e < ne; e++) {
            const int64_t i = nv++;
            if (ne > 1 || lq_gguf_hf_is_stacked(hf)) {
                const char *star = strchr(hf, '*');
                if (snprintf(names[i], sizeof names[i], "%.*s%lld%s", (int)(star - hf), hf,
                             (long long)e, star + 1) >= (int)sizeof names[i])
                    LQ_FAIL_GOTO(err, LQ_ERR_GGUF_FORMAT, "%s: tensor name too long", s->path);
                v[i].ndim     = 2;
                v[i].shape[0] = t->ne[1];
                v[i].shape[1] = t->ne[0];
                v[i].numel    = t->numel / ne;
                v[i].nbytes   = t->nbytes / ne;
                v[i].data     = (const char *)t->data + e * v[i].nbytes;
            } else {
                snprintf(names[i], sizeof names[i], "%s", hf);
                v[i].ndim   = t->ndim;
                v[i].numel  = t->numel;
                v[i].nbytes = t->nbytes;
                v[i].data   = t->data;
                for (int d = 0; d < t->ndim; d++)
                    v[i].shape[d] = t->ne[t->ndim - 1 - d];
                if (t->ndim == 1 && strstr(hf, "shared_expert_gate")) { /* a [1, d] linear */
                    v[i].ndim     = 2;
                    v[i].shape[0] = 1;
                    v[i].shape[1] = t->ne[0];
                }
            }
            v[i].name  = names[i];
            v[i].dtype = (lq_dtype)lq_dtype_from_ggml(t->ggml_type);
            v[i].shift = lq_gguf_hf_shift(s->arch, names[i]);
        }
        const int64_t i = nv - 1;
        if (heads > 0) {
            const int64_t rows = v[i].shape[0];
            if (rows % heads || (rows / heads) % 2)
                LQ_FAIL_GOTO(err, LQ_ERR_GGUF_FORMAT,
                             "%s: tensor \"%s\" has %lld rows, not an even number per head for "
                             "%d heads",
                             s->path, t->name, (long long)rows, heads);
            v[i].perm_heads = heads;
        }
    }
    {
        size_t      msz;
        const void *map = lq_gguf_map(g, &msz);
        st              = lq_st_open_views(s->path, map, msz, v, nv, &s->st, err);
    }
done:
    free(v);
    free(names);
    return st;
}

lq_status lq_source_open(const char *path, lq_source **out, lq_err *err) {
    *out = NULL;
    LQ_RETURN_IF(!path || !*path, err, LQ_ERR_INVALID_ARG, "no model given");
    lq_source *s = calloc(1, sizeof *s);
    LQ_RETURN_IF(!s, err, LQ_ERR_NOMEM, "%s: out of memory", path);
    lq_status st = LQ_OK;
    if (strlen(path) >= sizeof s->path)
        LQ_FAIL_GOTO(err, LQ_ERR_INVALID_ARG, "%s: path too long", path);
    strcpy(s->path, path);
    if (lq_dir_exists(path))
        st = open_dir(s, err);
    else if (lq_file_exists(path) && access(path, R_OK) != 0 && errno == EACCES)
        st = lq_fail(err, LQ_ERR_PERMISSION, "%s: permission denied", path);
    else if (lq_gguf_is_gguf_file(path))
        st = open_gguf(s, err);
    else if (lq_file_exists(path))
        st = lq_fail(err, LQ_ERR_NOT_FOUND,
                     "%s: not a model (expected a Hugging Face model directory or a .gguf file)",
                     path);
    else if (stat(path, &(struct stat){0}) != 0 && errno == EACCES)
        st = lq_fail(err, LQ_ERR_PERMISSION,
                     "%s: permission denied (a directory on the path cannot be searched)", path);
    else
        st = lq_fail(err, LQ_ERR_NOT_FOUND, "%s: no such model directory or file", path);
done:
    if (st != LQ_OK) {
        lq_source_close(s);
        return st;
    }
    *out = s;
    return LQ_OK;
}

const char *lq_source_path(const lq_source *s) {
    return s ? s->path : "?";
}

bool lq_source_is_gguf(const lq_source *s) {
    return s && s->gguf;
}

lq_st *lq_source_st(const lq_source *s) {
    return s ? s->st : NULL;
}

const char *lq_source_config(const lq_source *s, int64_t *len) {
    if (len)
        *len = s ? s->config_len : 0;
    return s ? s->config : NULL;
}

const lq_model_config *lq_source_model_config(const lq_source *s) {
    return s ? &s->cfg : NULL;
}

const char *lq_source_config_label(const lq_source *s) {
    return s ? s->config_label : "?";
}

void lq_source_file_label(const lq_source *s, const char *name, char *buf, size_t cap) {
    if (s->gguf)
        snprintf(buf, cap, "%s:%s", s->path, name);
    else
        snprintf(buf, cap, "%s/%s", s->path, name);
}

lq_status lq_source_read(const lq_source *s, const char *name, char **data, int64_t *len,
                         lq_err *err) {
    *data = NULL;
    *len  = 0;
    if (s->gguf)
        return lq_gguf_hf_file(s->gguf, name, data, len, err);
    char p[4200];
    if (!lq_path_join(p, sizeof p, s->path, name))
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "%s: path too long", s->path);
    if (!lq_file_exists(p))
        LQ_FAIL(err, LQ_ERR_NOT_FOUND, "%s: not found", p);
    return lq_read_file(p, 1ll << 31, data, len, err);
}

bool lq_source_has(const lq_source *s, const char *name) {
    if (!s)
        return false;
    if (s->gguf) {
        char   *d = NULL;
        int64_t n;
        lq_err  e;
        bool    ok = lq_gguf_hf_file(s->gguf, name, &d, &n, &e) == LQ_OK;
        free(d);
        return ok;
    }
    char p[4200];
    return lq_path_join(p, sizeof p, s->path, name) && lq_file_exists(p);
}
