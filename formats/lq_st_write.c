/* Streaming safetensors writer. Tensor bytes go to a per-shard spill file as they arrive, so
 * memory stays bounded by one tensor; finish() writes each shard as header + data in the order
 * Python safetensors uses (dtype descending in its enum order, then name), which makes our files
 * byte-identical to safetensors.save_file for the same tensors. */
#include "lq_st.h"

#include "lq_json.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct w_tensor {
    char    *name;
    lq_dtype dtype;
    int      ndim;
    int64_t  shape[LQ_ST_MAX_DIMS];
    int64_t  nbytes;
    int      shard;
    int64_t  spill_off; /* offset in the shard's spill file */
} w_tensor;

typedef struct w_shard {
    char   *spill_path;
    int     fd;
    int64_t bytes;
} w_shard;

struct lq_st_writer {
    char     *dir;
    int64_t   max_shard;
    w_tensor *t;
    int64_t   n, cap;
    w_shard  *s;
    int       ns;
    char    **meta_k, **meta_v;
    int       nmeta;
    char    **written; /* final files created (removed if we fail) */
    int       nwritten;
    int       finished;
};

/* safetensors' Dtype enum order (Rust derive(Ord)); files are sorted by it descending. */
static int dtype_rank(lq_dtype t) {
    switch (t) {
    case LQ_DT_BOOL:
        return 0;
    case LQ_DT_U8:
        return 4;
    case LQ_DT_I8:
        return 5;
    case LQ_DT_F8_E5M2:
        return 6;
    case LQ_DT_F8_E4M3:
        return 7;
    case LQ_DT_I16:
        return 9;
    case LQ_DT_U16:
        return 10;
    case LQ_DT_F16:
        return 11;
    case LQ_DT_BF16:
        return 12;
    case LQ_DT_I32:
        return 13;
    case LQ_DT_U32:
        return 14;
    case LQ_DT_F32:
        return 15;
    case LQ_DT_F64:
        return 16;
    case LQ_DT_I64:
        return 17;
    case LQ_DT_U64:
        return 18;
    default:
        return -1;
    }
}

static int cmp_write_order(const void *a, const void *b) {
    const w_tensor *x = *(const w_tensor *const *)a, *y = *(const w_tensor *const *)b;
    int             rx = dtype_rank(x->dtype), ry = dtype_rank(y->dtype);
    if (rx != ry)
        return ry - rx;
    return strcmp(x->name, y->name);
}

lq_status lq_st_writer_create(const char *dir, int64_t max_shard_bytes, lq_st_writer **out,
                              lq_err *err) {
    *out = NULL;
    if (!lq_dir_exists(dir))
        LQ_FAIL(err, LQ_ERR_NOT_FOUND, "%s: output directory does not exist", dir);
    lq_st_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->dir = strdup(dir))) {
        free(w);
        LQ_FAIL(err, LQ_ERR_NOMEM, "out of memory");
    }
    w->max_shard = max_shard_bytes;
    *out         = w;
    return LQ_OK;
}

lq_status lq_st_writer_set_metadata(lq_st_writer *w, const char *key, const char *value,
                                    lq_err *err) {
    char **k = realloc(w->meta_k, (size_t)(w->nmeta + 1) * sizeof *k);
    if (k)
        w->meta_k = k;
    char **v = realloc(w->meta_v, (size_t)(w->nmeta + 1) * sizeof *v);
    if (v)
        w->meta_v = v;
    if (!k || !v)
        LQ_FAIL(err, LQ_ERR_NOMEM, "out of memory");
    w->meta_k[w->nmeta] = strdup(key);
    w->meta_v[w->nmeta] = strdup(value);
    w->nmeta++;
    if (!w->meta_k[w->nmeta - 1] || !w->meta_v[w->nmeta - 1])
        LQ_FAIL(err, LQ_ERR_NOMEM, "out of memory");
    return LQ_OK;
}

static lq_status write_all(int fd, const void *buf, size_t n, const char *path, lq_err *err) {
    const char *p = buf;
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            LQ_FAIL(err, lq_status_from_errno(errno), "%s: write failed: %s", path,
                    strerror(errno));
        }
        p += k;
        n -= (size_t)k;
    }
    return LQ_OK;
}

static lq_status new_shard(lq_st_writer *w, lq_err *err) {
    w_shard *s = realloc(w->s, (size_t)(w->ns + 1) * sizeof *s);
    if (!s)
        LQ_FAIL(err, LQ_ERR_NOMEM, "out of memory");
    w->s       = s;
    w_shard *n = &w->s[w->ns];
    memset(n, 0, sizeof *n);
    n->fd = -1;
    char p[4200];
    snprintf(p, sizeof p, "%s/.lq-shard-%05d.spill", w->dir, w->ns + 1);
    if (!(n->spill_path = strdup(p)))
        LQ_FAIL(err, LQ_ERR_NOMEM, "out of memory");
    w->ns++;
    n->fd = open(p, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (n->fd < 0)
        LQ_FAIL(err, lq_status_from_errno(errno), "%s: %s", p, strerror(errno));
    return LQ_OK;
}

lq_status lq_st_writer_add(lq_st_writer *w, const char *name, lq_dtype dtype, int ndim,
                           const int64_t *shape, const void *data, lq_err *err) {
    if (w->finished)
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "safetensors writer already finished");
    if (ndim < 0 || ndim > LQ_ST_MAX_DIMS || dtype_rank(dtype) < 0 || !name || !*name ||
        strcmp(name, "__metadata__") == 0)
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "%s: bad tensor \"%s\" for safetensors", w->dir,
                name ? name : "");
    for (int64_t i = 0; i < w->n; i++)
        if (strcmp(w->t[i].name, name) == 0)
            LQ_FAIL(err, LQ_ERR_ST_DUPLICATE, "%s: tensor \"%s\" written twice", w->dir, name);
    int64_t nbytes = lq_dtype_size(dtype);
    for (int d = 0; d < ndim; d++)
        if (!lq_mul_i64(nbytes, shape[d], &nbytes))
            LQ_FAIL(err, LQ_ERR_INVALID_ARG, "%s: tensor \"%s\" size overflows", w->dir, name);
    if (w->ns == 0 ||
        (w->max_shard > 0 && w->s[w->ns - 1].bytes > 0 && w->s[w->ns - 1].bytes + nbytes > w->max_shard))
        LQ_TRY(new_shard(w, err));
    if (w->n == w->cap) {
        int64_t   nc = w->cap ? 2 * w->cap : 64;
        w_tensor *nt = realloc(w->t, (size_t)nc * sizeof *nt);
        if (!nt)
            LQ_FAIL(err, LQ_ERR_NOMEM, "out of memory");
        w->t   = nt;
        w->cap = nc;
    }
    w_shard  *s = &w->s[w->ns - 1];
    w_tensor *t = &w->t[w->n];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name)))
        LQ_FAIL(err, LQ_ERR_NOMEM, "out of memory");
    t->dtype = dtype;
    t->ndim  = ndim;
    for (int d = 0; d < ndim; d++)
        t->shape[d] = shape[d];
    t->nbytes    = nbytes;
    t->shard     = w->ns - 1;
    t->spill_off = s->bytes;
    w->n++;
    if (nbytes > 0)
        LQ_TRY(write_all(s->fd, data, (size_t)nbytes, s->spill_path, err));
    s->bytes += nbytes;
    return LQ_OK;
}

lq_status lq_st_writer_add_f32(lq_st_writer *w, const char *name, lq_dtype dtype, int ndim,
                               const int64_t *shape, const float *data, lq_err *err) {
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++)
        numel *= shape[d];
    if (dtype == LQ_DT_F32)
        return lq_st_writer_add(w, name, dtype, ndim, shape, data, err);
    if (dtype != LQ_DT_F16 && dtype != LQ_DT_BF16)
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "tensor \"%s\": cannot store float32 data as %s", name,
                lq_dtype_name(dtype));
    uint16_t *tmp = lq_malloc_n(numel > 0 ? numel : 1, 2);
    if (!tmp)
        LQ_FAIL(err, LQ_ERR_NOMEM, "tensor \"%s\": out of memory", name);
    for (int64_t i = 0; i < numel; i++)
        tmp[i] = dtype == LQ_DT_F16 ? lq_f32_to_f16(data[i]) : lq_f32_to_bf16(data[i]);
    lq_status st = lq_st_writer_add(w, name, dtype, ndim, shape, tmp, err);
    free(tmp);
    return st;
}

/* Append JSON-escaped s to the growing buffer. */
typedef struct sbuf {
    char  *p;
    size_t n, cap;
    int    oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t nc = (b->cap ? b->cap * 2 : 4096);
        while (nc < b->n + n + 1)
            nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p   = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_str(sbuf *b, const char *s) {
    sb_put(b, s, strlen(s));
}

/* JSON string escaping as serde_json does (what safetensors uses). */
static void sb_json_str(sbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        char e[8];
        switch (*c) {
        case '"':
            sb_str(b, "\\\"");
            break;
        case '\\':
            sb_str(b, "\\\\");
            break;
        case '\n':
            sb_str(b, "\\n");
            break;
        case '\r':
            sb_str(b, "\\r");
            break;
        case '\t':
            sb_str(b, "\\t");
            break;
        case '\b':
            sb_str(b, "\\b");
            break;
        case '\f':
            sb_str(b, "\\f");
            break;
        default:
            if (*c < 0x20) {
                snprintf(e, sizeof e, "\\u%04x", *c);
                sb_str(b, e);
            } else {
                sb_put(b, (const char *)c, 1);
            }
        }
    }
    sb_put(b, "\"", 1);
}


static lq_status write_shard(lq_st_writer *w, int si, const char *fname, lq_err *err) {
    w_shard   *s     = &w->s[si];
    int64_t    cnt   = 0;
    w_tensor **order = malloc((size_t)(w->n + 1) * sizeof *order);
    if (!order)
        LQ_FAIL(err, LQ_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < w->n; i++)
        if (w->t[i].shard == si)
            order[cnt++] = &w->t[i];
    qsort(order, (size_t)cnt, sizeof *order, cmp_write_order);

    sbuf b = {0};
    sb_str(&b, "{");
    int first = 1;
    if (w->nmeta > 0) {
        /* Insertion order. Python safetensors keeps metadata in a Rust HashMap whose
         * iteration order is randomized per process, so byte equality with it is only defined
         * for a single key (what transformers writes: {"format": "pt"}). */
        sb_str(&b, "\"__metadata__\":{");
        for (int i = 0; i < w->nmeta; i++) {
            if (i)
                sb_str(&b, ",");
            sb_json_str(&b, w->meta_k[i]);
            sb_str(&b, ":");
            sb_json_str(&b, w->meta_v[i]);
        }
        sb_str(&b, "}");
        first = 0;
    }
    int64_t off = 0;
    for (int64_t i = 0; i < cnt; i++) {
        char num[64];
        if (!first)
            sb_str(&b, ",");
        first = 0;
        sb_json_str(&b, order[i]->name);
        sb_str(&b, ":{\"dtype\":\"");
        sb_str(&b, lq_dtype_name(order[i]->dtype));
        sb_str(&b, "\",\"shape\":[");
        for (int d = 0; d < order[i]->ndim; d++) {
            snprintf(num, sizeof num, "%s%lld", d ? "," : "", (long long)order[i]->shape[d]);
            sb_str(&b, num);
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%lld,%lld]}", (long long)off,
                 (long long)(off + order[i]->nbytes));
        sb_str(&b, num);
        off += order[i]->nbytes;
    }
    sb_str(&b, "}");
    while (!b.oom && b.n % 8 != 0)
        sb_str(&b, " ");
    if (b.oom) {
        free(order);
        free(b.p);
        LQ_FAIL(err, LQ_ERR_NOMEM, "out of memory");
    }

    char path[4200];
    snprintf(path, sizeof path, "%s/%s", w->dir, fname);
    lq_status st = LQ_OK;
    char     *io = NULL;
    int       fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        st = lq_fail(err, lq_status_from_errno(errno), "%s: %s", path, strerror(errno));
        goto done;
    }
    char **wr = realloc(w->written, (size_t)(w->nwritten + 1) * sizeof *wr);
    if (!wr || !(wr[w->nwritten] = strdup(path))) {
        if (wr)
            w->written = wr;
        st = lq_fail(err, LQ_ERR_NOMEM, "out of memory");
        goto done;
    }
    w->written = wr;
    w->nwritten++;
    uint8_t  len8[8];
    uint64_t hl = (uint64_t)b.n;
    for (int i = 0; i < 8; i++)
        len8[i] = (uint8_t)(hl >> (8 * i));
    if ((st = write_all(fd, len8, 8, path, err)) || (st = write_all(fd, b.p, b.n, path, err)))
        goto done;
    const size_t CH = 4 << 20;
    io              = malloc(CH);
    if (!io) {
        st = lq_fail(err, LQ_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int64_t i = 0; i < cnt; i++) {
        int64_t done_b = 0;
        while (done_b < order[i]->nbytes) {
            size_t  want = (size_t)((order[i]->nbytes - done_b) < (int64_t)CH
                                        ? (order[i]->nbytes - done_b)
                                        : (int64_t)CH);
            ssize_t got  = pread(s->fd, io, want, order[i]->spill_off + done_b);
            if (got <= 0) {
                st = lq_fail(err, LQ_ERR_IO, "%s: read back failed", s->spill_path);
                goto done;
            }
            if ((st = write_all(fd, io, (size_t)got, path, err)))
                goto done;
            done_b += got;
        }
    }
    if (fsync(fd) != 0 && errno != EINVAL) {
        st = lq_fail(err, lq_status_from_errno(errno), "%s: fsync failed: %s", path,
                     strerror(errno));
        goto done;
    }
done:
    if (fd >= 0 && close(fd) != 0 && st == LQ_OK)
        st = lq_fail(err, lq_status_from_errno(errno), "%s: close failed: %s", path,
                     strerror(errno));
    free(io);
    free(order);
    free(b.p);
    return st;
}

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(((const w_tensor *)a)->name, ((const w_tensor *)b)->name);
}

lq_status lq_st_writer_finish(lq_st_writer *w, lq_err *err) {
    if (w->finished)
        return LQ_OK;
    if (w->ns == 0)
        LQ_TRY(new_shard(w, err)); /* an empty model.safetensors is still a valid file */
    char fname[128];
    for (int i = 0; i < w->ns; i++) {
        if (w->ns == 1)
            snprintf(fname, sizeof fname, "model.safetensors");
        else
            snprintf(fname, sizeof fname, "model-%05d-of-%05d.safetensors", i + 1, w->ns);
        LQ_TRY(write_shard(w, i, fname, err));
    }
    if (w->ns > 1) {
        /* transformers writes json.dumps(index, indent=2, sort_keys=True) */
        w_tensor *sorted = malloc((size_t)w->n * sizeof *sorted);
        if (!sorted)
            LQ_FAIL(err, LQ_ERR_NOMEM, "out of memory");
        memcpy(sorted, w->t, (size_t)w->n * sizeof *sorted);
        qsort(sorted, (size_t)w->n, sizeof *sorted, cmp_str_ptr);
        cJSON  *root = cJSON_CreateObject();
        cJSON  *meta = cJSON_AddObjectToObject(root, "metadata");
        int64_t tot  = 0;
        for (int64_t i = 0; i < w->n; i++)
            tot += w->t[i].nbytes;
        cJSON_AddNumberToObject(meta, "total_size", (double)tot);
        cJSON *wm = cJSON_AddObjectToObject(root, "weight_map");
        for (int64_t i = 0; i < w->n; i++) {
            snprintf(fname, sizeof fname, "model-%05d-of-%05d.safetensors", sorted[i].shard + 1,
                     w->ns);
            cJSON_AddStringToObject(wm, sorted[i].name, fname);
        }
        free(sorted);
        char path[4200];
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", w->dir);
        lq_status st = lq_json_write_file(root, path, err);
        cJSON_Delete(root);
        LQ_TRY(st);
        char **wr = realloc(w->written, (size_t)(w->nwritten + 1) * sizeof *wr);
        if (wr) {
            w->written             = wr;
            w->written[w->nwritten] = strdup(path);
            if (w->written[w->nwritten])
                w->nwritten++;
        }
    }
    w->finished = 1;
    return LQ_OK;
}

void lq_st_writer_free(lq_st_writer *w) {
    if (!w)
        return;
    for (int i = 0; i < w->ns; i++) {
        if (w->s[i].fd >= 0)
            close(w->s[i].fd);
        if (w->s[i].spill_path)
            unlink(w->s[i].spill_path);
        free(w->s[i].spill_path);
    }
    for (int i = 0; i < w->nwritten; i++) {
        if (!w->finished)
            unlink(w->written[i]);
        free(w->written[i]);
    }
    for (int64_t i = 0; i < w->n; i++)
        free(w->t[i].name);
    for (int i = 0; i < w->nmeta; i++) {
        free(w->meta_k[i]);
        free(w->meta_v[i]);
    }
    free(w->meta_k);
    free(w->meta_v);
    free(w->written);
    free(w->t);
    free(w->s);
    free(w->dir);
    free(w);
}
