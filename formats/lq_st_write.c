/* Streaming safetensors writer.
 *
 * Tensor bytes go to a spill file per shard as they arrive, so memory stays bounded by a small
 * conversion buffer whatever the model size. finish() writes each shard as 8-byte length +
 * header + data copied from the spill in the order Python safetensors uses (dtype descending in
 * its enum order, then name), which makes the files byte-identical to safetensors.save_file.
 * Shards are assigned exactly as huggingface_hub.split_torch_state_dict_into_shards (what
 * transformers' save_pretrained uses) assigns them, and the index is the json.dumps(indent=2,
 * sort_keys=True) text transformers writes. Final files appear under temporary names and are
 * renamed into place only when all of them are complete. */
#include "lq_st.h"

#include "lq_json.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/sendfile.h>
#endif

typedef struct w_tensor {
    char    *name;
    lq_dtype dtype;
    int      ndim;
    int64_t  shape[LQ_ST_MAX_DIMS];
    int64_t  nbytes;
    int      spill;     /* index into w->sp */
    int64_t  spill_off; /* offset in that spill file */
} w_tensor;

typedef struct w_spill {
    char   *path;
    int     fd; /* open while tensors are appended; -1 once the shard is closed */
    int64_t bytes;
    int     shard; /* final shard number (0-based) once closed, else -1 */
} w_spill;

struct lq_st_writer {
    char     *dir;
    int64_t   max_shard;
    w_tensor *t;
    int64_t   n, cap;
    w_spill  *sp;
    int       nsp;
    int       cur; /* spill receiving ordinary tensors, -1 if none open */
    int       nshards;
    char    **meta_k, **meta_v;
    int       nmeta;
    char    **created; /* temporary and final files made by finish (removed unless finished) */
    int       ncreated;
    int       finished;
    int       broken; /* a failed write left the spill inconsistent: finish must refuse */
};

/* safetensors' Dtype enum order (Rust derive(Ord), 0.4 - 0.8); files are sorted by it
 * descending. Only the relative order matters. */
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

static int cmp_name_ptr(const void *a, const void *b) {
    return strcmp((*(const w_tensor *const *)a)->name, (*(const w_tensor *const *)b)->name);
}

lq_status lq_st_writer_create(const char *dir, int64_t max_shard_bytes, lq_st_writer **out,
                              lq_err *err) {
    *out = NULL;
    if (max_shard_bytes < 0)
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "%s: negative max shard size %lld", dir,
                (long long)max_shard_bytes);
    if (!lq_dir_exists(dir))
        LQ_FAIL(err, LQ_ERR_NOT_FOUND, "%s: output directory does not exist", dir);
    lq_st_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->dir = strdup(dir))) {
        free(w);
        LQ_FAIL(err, LQ_ERR_NOMEM, "%s: out of memory", dir);
    }
    w->max_shard = max_shard_bytes;
    w->cur       = -1;
    *out         = w;
    return LQ_OK;
}

lq_status lq_st_writer_set_metadata(lq_st_writer *w, const char *key, const char *value,
                                    lq_err *err) {
    if (w->finished)
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "%s: safetensors writer already finished", w->dir);
    char *v = strdup(value);
    if (!v)
        LQ_FAIL(err, LQ_ERR_NOMEM, "%s: out of memory", w->dir);
    for (int i = 0; i < w->nmeta; i++)
        if (strcmp(w->meta_k[i], key) == 0) { /* a JSON object cannot repeat a key */
            free(w->meta_v[i]);
            w->meta_v[i] = v;
            return LQ_OK;
        }
    char  *k  = strdup(key);
    char **nk = k ? realloc(w->meta_k, (size_t)(w->nmeta + 1) * sizeof *nk) : NULL;
    if (nk)
        w->meta_k = nk;
    char **nv = nk ? realloc(w->meta_v, (size_t)(w->nmeta + 1) * sizeof *nv) : NULL;
    if (nv)
        w->meta_v = nv;
    if (!nv) {
        free(k);
        free(v);
        LQ_FAIL(err, LQ_ERR_NOMEM, "%s: out of memory", w->dir);
    }
    w->meta_k[w->nmeta] = k;
    w->meta_v[w->nmeta] = v;
    w->nmeta++;
    return LQ_OK;
}

static lq_status write_all(int fd, const void *buf, size_t n, const char *path, lq_err *err) {
    const char *p = buf;
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            int e = errno;
            LQ_FAIL(err, lq_status_from_errno(e), "%s: write failed: %s", path, strerror(e));
        }
        p += k;
        n -= (size_t)k;
    }
    return LQ_OK;
}

static lq_status new_spill(lq_st_writer *w, int *idx, lq_err *err) {
    w_spill *s = realloc(w->sp, (size_t)(w->nsp + 1) * sizeof *s);
    if (!s)
        LQ_FAIL(err, LQ_ERR_NOMEM, "%s: out of memory", w->dir);
    w->sp     = s;
    w_spill *n = &w->sp[w->nsp];
    memset(n, 0, sizeof *n);
    n->fd    = -1;
    n->shard = -1;
    char p[4200];
    if (snprintf(p, sizeof p, "%s/.lq-spill-XXXXXX", w->dir) >= (int)sizeof p)
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "%s: path too long", w->dir);
    /* mkstemp: two writers sharing a directory never collide. */
    int fd = mkstemp(p);
    if (fd < 0) {
        int e = errno;
        LQ_FAIL(err, lq_status_from_errno(e), "%s: cannot create a spill file: %s", w->dir,
                strerror(e));
    }
    if (!(n->path = strdup(p))) {
        close(fd);
        unlink(p);
        LQ_FAIL(err, LQ_ERR_NOMEM, "%s: out of memory", w->dir);
    }
    n->fd = fd;
    *idx  = w->nsp++;
    return LQ_OK;
}

/* The shard is complete: its number is its position in close order (as the hub numbers
 * shard_list entries by append order). */
static void close_spill(lq_st_writer *w, int i) {
    if (w->sp[i].fd >= 0)
        close(w->sp[i].fd);
    w->sp[i].fd    = -1;
    w->sp[i].shard = w->nshards++;
}

/* Validate and register a tensor; returns the spill fd its nbytes must be appended to. */
static lq_status add_begin(lq_st_writer *w, const char *name, lq_dtype dtype, int ndim,
                           const int64_t *shape, int *spill, lq_err *err) {
    if (w->finished || w->broken)
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "%s: safetensors writer %s", w->dir,
                w->finished ? "already finished" : "failed earlier");
    if (!name || !*name || strcmp(name, "__metadata__") == 0)
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "%s: invalid tensor name \"%s\"", w->dir,
                name ? name : "(null)");
    if (ndim < 0 || ndim > LQ_ST_MAX_DIMS || dtype_rank(dtype) < 0)
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "%s: tensor \"%s\": bad dtype or %d dims", w->dir, name,
                ndim);
    for (int64_t i = 0; i < w->n; i++)
        if (strcmp(w->t[i].name, name) == 0)
            LQ_FAIL(err, LQ_ERR_ST_DUPLICATE, "%s: tensor \"%s\" written twice", w->dir, name);
    int64_t nbytes = lq_dtype_size(dtype);
    for (int d = 0; d < ndim; d++)
        if (!lq_mul_i64(nbytes, shape[d], &nbytes))
            LQ_FAIL(err, LQ_ERR_INVALID_ARG, "%s: tensor \"%s\" has a negative or overflowing shape",
                    w->dir, name);
    if (w->n == w->cap) {
        int64_t   nc = w->cap ? 2 * w->cap : 64;
        w_tensor *nt = realloc(w->t, (size_t)nc * sizeof *nt);
        if (!nt)
            LQ_FAIL(err, LQ_ERR_NOMEM, "%s: out of memory", w->dir);
        w->t   = nt;
        w->cap = nc;
    }
    char *nm = strdup(name);
    if (!nm)
        LQ_FAIL(err, LQ_ERR_NOMEM, "%s: out of memory", w->dir);
    int s;
    if (w->max_shard > 0 && nbytes > w->max_shard) {
        /* huggingface_hub: an oversized tensor is a shard of its own, numbered when met, while
         * the shard being filled stays open. */
        lq_status st = new_spill(w, &s, err);
        if (st != LQ_OK) {
            free(nm);
            return st;
        }
    } else {
        if (w->cur >= 0 && w->max_shard > 0 && w->sp[w->cur].bytes + nbytes > w->max_shard) {
            close_spill(w, w->cur);
            w->cur = -1;
        }
        if (w->cur < 0) {
            lq_status st = new_spill(w, &w->cur, err);
            if (st != LQ_OK) {
                free(nm);
                return st;
            }
        }
        s = w->cur;
    }
    w_tensor *t = &w->t[w->n++];
    memset(t, 0, sizeof *t);
    t->name  = nm;
    t->dtype = dtype;
    t->ndim  = ndim;
    for (int d = 0; d < ndim; d++)
        t->shape[d] = shape[d];
    t->nbytes    = nbytes;
    t->spill     = s;
    t->spill_off = w->sp[s].bytes;
    w->sp[s].bytes += nbytes;
    *spill = s;
    return LQ_OK;
}

static void add_end(lq_st_writer *w, int spill) {
    if (spill != w->cur) /* oversized tensor: its shard is already complete */
        close_spill(w, spill);
}

lq_status lq_st_writer_add(lq_st_writer *w, const char *name, lq_dtype dtype, int ndim,
                           const int64_t *shape, const void *data, lq_err *err) {
    int s;
    LQ_TRY(add_begin(w, name, dtype, ndim, shape, &s, err));
    const w_tensor *t  = &w->t[w->n - 1];
    lq_status       st = LQ_OK;
    if (t->nbytes > 0)
        st = write_all(w->sp[s].fd, data, (size_t)t->nbytes, w->sp[s].path, err);
    if (st != LQ_OK) {
        w->broken = 1;
        return lq_err_prefix(err, "tensor \"%s\"", name);
    }
    add_end(w, s);
    return LQ_OK;
}

lq_status lq_st_writer_add_f32(lq_st_writer *w, const char *name, lq_dtype dtype, int ndim,
                               const int64_t *shape, const float *data, lq_err *err) {
    if (dtype == LQ_DT_F32)
        return lq_st_writer_add(w, name, dtype, ndim, shape, data, err);
    if (dtype != LQ_DT_F16 && dtype != LQ_DT_BF16)
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "%s: tensor \"%s\": cannot store float32 data as %s",
                w->dir, name ? name : "(null)", lq_dtype_name(dtype));
    int s;
    LQ_TRY(add_begin(w, name, dtype, ndim, shape, &s, err));
    /* Convert in fixed chunks so a multi-GB tensor needs no second full-size buffer. */
    enum { CHUNK = 1 << 14 };
    uint16_t  buf[CHUNK];
    int64_t   numel = w->t[w->n - 1].nbytes / 2;
    lq_status st    = LQ_OK;
    for (int64_t i = 0; i < numel && st == LQ_OK; i += CHUNK) {
        int64_t m = numel - i < CHUNK ? numel - i : CHUNK;
        for (int64_t j = 0; j < m; j++)
            buf[j] = dtype == LQ_DT_F16 ? lq_f32_to_f16(data[i + j]) : lq_f32_to_bf16(data[i + j]);
        st = write_all(w->sp[s].fd, buf, (size_t)m * 2, w->sp[s].path, err);
    }
    if (st != LQ_OK) {
        w->broken = 1;
        return lq_err_prefix(err, "tensor \"%s\"", name);
    }
    add_end(w, s);
    return LQ_OK;
}

static void sb_put(lq_buf *b, const char *s, size_t n) {
    lq_buf_put(b, s, (int64_t)n);
}

static void sb_str(lq_buf *b, const char *s) {
    lq_buf_str(b, s);
}

/* JSON string escaping exactly as serde_json (what safetensors uses): the two-character forms
 * for " \ \b \f \n \r \t, lowercase \u00xx for other control bytes, everything else raw. */
static void sb_json_str(lq_buf *b, const char *s) {
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

/* The header text of one shard (tensors in `order`), padded with spaces to a multiple of 8
 * as safetensors does so that the data section starts 8-aligned. */
static lq_status build_header(const lq_st_writer *w, w_tensor *const *order, int64_t cnt,
                              lq_buf *b, lq_err *err) {
    sb_str(b, "{");
    int first = 1;
    if (w->nmeta > 0) {
        /* Insertion order. Python safetensors keeps metadata in a Rust HashMap whose
         * iteration order is randomized per process, so byte equality with it is only defined
         * for a single key (what transformers writes: {"format": "pt"}). */
        sb_str(b, "\"__metadata__\":{");
        for (int i = 0; i < w->nmeta; i++) {
            if (i)
                sb_str(b, ",");
            sb_json_str(b, w->meta_k[i]);
            sb_str(b, ":");
            sb_json_str(b, w->meta_v[i]);
        }
        sb_str(b, "}");
        first = 0;
    }
    int64_t off = 0;
    for (int64_t i = 0; i < cnt; i++) {
        char num[80];
        if (!first)
            sb_str(b, ",");
        first = 0;
        sb_json_str(b, order[i]->name);
        sb_str(b, ":{\"dtype\":\"");
        sb_str(b, lq_dtype_name(order[i]->dtype));
        sb_str(b, "\",\"shape\":[");
        for (int d = 0; d < order[i]->ndim; d++) {
            snprintf(num, sizeof num, "%s%lld", d ? "," : "", (long long)order[i]->shape[d]);
            sb_str(b, num);
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%lld,%lld]}", (long long)off,
                 (long long)(off + order[i]->nbytes));
        sb_str(b, num);
        off += order[i]->nbytes;
    }
    sb_str(b, "}");
    while (!b->oom && b->n % 8 != 0)
        sb_str(b, " ");
    if (b->oom)
        LQ_FAIL(err, LQ_ERR_NOMEM, "%s: out of memory building a safetensors header", w->dir);
    if ((int64_t)b->n > LQ_ST_MAX_HEADER)
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "%s: safetensors header of %zu bytes exceeds the %lld "
                "byte limit readers enforce (too many tensors in one shard)",
                w->dir, b->n, (long long)LQ_ST_MAX_HEADER);
    return LQ_OK;
}

/* Copy len bytes at in_off of in_fd to the current position of out_fd. sendfile keeps the copy
 * in the kernel; a plain buffered loop covers filesystems that refuse it. */
static lq_status copy_range(int in_fd, int64_t in_off, int64_t len, int out_fd,
                            const char *in_path, const char *out_path, char **iobuf,
                            lq_err *err) {
#if defined(__linux__)
    while (len > 0) {
        off_t   o = (off_t)in_off;
        size_t  want = len > (1 << 30) ? (size_t)1 << 30 : (size_t)len;
        ssize_t k    = sendfile(out_fd, in_fd, &o, want);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && (errno == EINVAL || errno == ENOSYS))
            break; /* not supported here: buffered copy below */
        if (k < 0) {
            int e = errno;
            LQ_FAIL(err, lq_status_from_errno(e), "%s: write failed: %s", out_path, strerror(e));
        }
        if (k == 0)
            LQ_FAIL(err, LQ_ERR_IO, "%s: spill file shorter than expected", in_path);
        in_off += k;
        len -= k;
    }
#endif
    const size_t CH = (size_t)4 << 20;
    if (len > 0 && !*iobuf && !(*iobuf = malloc(CH)))
        LQ_FAIL(err, LQ_ERR_NOMEM, "%s: out of memory", out_path);
    while (len > 0) {
        size_t  want = len < (int64_t)CH ? (size_t)len : CH;
        ssize_t got  = pread(in_fd, *iobuf, want, (off_t)in_off);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            int e = got < 0 ? errno : EIO;
            LQ_FAIL(err, lq_status_from_errno(e), "%s: read back failed: %s", in_path,
                    got < 0 ? strerror(e) : "file shorter than expected");
        }
        LQ_TRY(write_all(out_fd, *iobuf, (size_t)got, out_path, err));
        in_off += got;
        len -= got;
    }
    return LQ_OK;
}

static lq_status remember(lq_st_writer *w, const char *path, lq_err *err) {
    char **c = realloc(w->created, (size_t)(w->ncreated + 1) * sizeof *c);
    if (!c)
        LQ_FAIL(err, LQ_ERR_NOMEM, "%s: out of memory", path);
    w->created = c;
    if (!(c[w->ncreated] = strdup(path)))
        LQ_FAIL(err, LQ_ERR_NOMEM, "%s: out of memory", path);
    w->ncreated++;
    return LQ_OK;
}

static void shard_name(char *buf, size_t cap, int shard, int nshards) {
    if (nshards == 1)
        snprintf(buf, cap, "model.safetensors");
    else
        snprintf(buf, cap, "model-%05d-of-%05d.safetensors", shard + 1, nshards);
}

/* Write shard `shard` (all tensors whose spill has that number) to tmp_path. */
static lq_status write_shard(lq_st_writer *w, int shard, const char *tmp_path, w_tensor **order,
                             char **iobuf, lq_err *err) {
    int64_t cnt = 0;
    for (int64_t i = 0; i < w->n; i++)
        if (w->sp[w->t[i].spill].shard == shard)
            order[cnt++] = &w->t[i];
    qsort(order, (size_t)cnt, sizeof *order, cmp_write_order);
    lq_buf     b  = {0};
    lq_status st = build_header(w, order, cnt, &b, err);
    int       fd = -1, in_fd = -1, in_spill = -1;
    if (st != LQ_OK)
        goto done;
    LQ_TRY_GOTO(remember(w, tmp_path, err));
    fd = open(tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        LQ_FAIL_GOTO(err, lq_status_from_errno(e), "%s: %s", tmp_path, strerror(e));
    }
    uint8_t  len8[8];
    uint64_t hl = (uint64_t)b.n;
    for (int i = 0; i < 8; i++)
        len8[i] = (uint8_t)(hl >> (8 * i));
    LQ_TRY_GOTO(write_all(fd, len8, 8, tmp_path, err));
    LQ_TRY_GOTO(write_all(fd, b.p, b.n, tmp_path, err));
    for (int64_t i = 0; i < cnt; i++) {
        if (order[i]->spill != in_spill) { /* a shard of oversized tensors has several spills */
            if (in_fd >= 0)
                close(in_fd);
            in_spill = order[i]->spill;
            in_fd    = open(w->sp[in_spill].path, O_RDONLY | O_CLOEXEC);
            if (in_fd < 0) {
                int e = errno;
                LQ_FAIL_GOTO(err, lq_status_from_errno(e), "%s: %s", w->sp[in_spill].path,
                             strerror(e));
            }
        }
        LQ_TRY_GOTO(copy_range(in_fd, order[i]->spill_off, order[i]->nbytes, fd,
                               w->sp[in_spill].path, tmp_path, iobuf, err));
    }
    /* Durable before the rename makes it visible under its final name. */
    if (fsync(fd) != 0 && errno != EINVAL) {
        int e = errno;
        LQ_FAIL_GOTO(err, lq_status_from_errno(e), "%s: fsync failed: %s", tmp_path, strerror(e));
    }
done:
    if (in_fd >= 0)
        close(in_fd);
    if (fd >= 0 && close(fd) != 0 && st == LQ_OK) {
        int e = errno;
        st    = lq_fail(err, lq_status_from_errno(e), "%s: close failed: %s", tmp_path,
                        strerror(e));
    }
    free(b.p);
    return st;
}

static lq_status write_index(lq_st_writer *w, lq_err *err) {
    w_tensor **sorted = malloc((size_t)w->n * sizeof *sorted);
    if (!sorted)
        LQ_FAIL(err, LQ_ERR_NOMEM, "%s: out of memory", w->dir);
    int64_t tot = 0;
    for (int64_t i = 0; i < w->n; i++) {
        sorted[i] = &w->t[i];
        tot += w->t[i].nbytes;
    }
    qsort(sorted, (size_t)w->n, sizeof *sorted, cmp_name_ptr); /* json.dumps sort_keys=True */
    cJSON *root = cJSON_CreateObject();
    cJSON *meta = root ? cJSON_AddObjectToObject(root, "metadata") : NULL;
    cJSON *wm   = meta && cJSON_AddNumberToObject(meta, "total_size", (double)tot)
                      ? cJSON_AddObjectToObject(root, "weight_map")
                      : NULL;
    int    ok   = wm != NULL;
    for (int64_t i = 0; ok && i < w->n; i++) {
        char fname[64];
        shard_name(fname, sizeof fname, w->sp[sorted[i]->spill].shard, w->nshards);
        ok = cJSON_AddStringToObject(wm, sorted[i]->name, fname) != NULL;
    }
    free(sorted);
    char      path[4200];
    lq_status st = LQ_OK;
    if (!ok)
        st = lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", w->dir);
    else if (!lq_path_join(path, sizeof path, w->dir, "model.safetensors.index.json"))
        st = lq_fail(err, LQ_ERR_INVALID_ARG, "%s: path too long", w->dir);
    else if ((st = remember(w, path, err)) == LQ_OK)
        st = lq_json_write_file(root, path, err);
    cJSON_Delete(root);
    return st;
}

lq_status lq_st_writer_finish(lq_st_writer *w, lq_err *err) {
    if (w->finished)
        return LQ_OK;
    if (w->broken)
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "%s: safetensors writer failed earlier", w->dir);
    w->broken = 1; /* until everything below succeeds */
    if (w->cur >= 0) {
        close_spill(w, w->cur);
        w->cur = -1;
    }
    if (w->nshards == 0) { /* no tensors: an empty model.safetensors is still a valid file */
        int s;
        LQ_TRY(new_spill(w, &s, err));
        close_spill(w, s);
    }
    lq_status  st    = LQ_OK;
    char      *iobuf = NULL;
    w_tensor **order = malloc((size_t)(w->n + 1) * sizeof *order);
    char       tmp[4200], fin[4200], fname[64];
    if (!order)
        LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory", w->dir);
    for (int i = 0; i < w->nshards; i++) {
        shard_name(fname, sizeof fname, i, w->nshards);
        if (snprintf(tmp, sizeof tmp, "%s/.%s.lq-tmp", w->dir, fname) >= (int)sizeof tmp)
            LQ_FAIL_GOTO(err, LQ_ERR_INVALID_ARG, "%s: path too long", w->dir);
        LQ_TRY_GOTO(write_shard(w, i, tmp, order, &iobuf, err));
    }
    for (int i = 0; i < w->nshards; i++) {
        shard_name(fname, sizeof fname, i, w->nshards);
        snprintf(tmp, sizeof tmp, "%s/.%s.lq-tmp", w->dir, fname);
        snprintf(fin, sizeof fin, "%s/%s", w->dir, fname);
        if (rename(tmp, fin) != 0) {
            int e = errno;
            LQ_FAIL_GOTO(err, lq_status_from_errno(e), "%s: rename failed: %s", fin,
                         strerror(e));
        }
        LQ_TRY_GOTO(remember(w, fin, err));
    }
    if (w->nshards > 1)
        LQ_TRY_GOTO(write_index(w, err));
    for (int i = 0; i < w->nsp; i++) /* the spills are no longer needed */
        unlink(w->sp[i].path);
    w->finished = 1;
    w->broken   = 0;
done:
    free(order);
    free(iobuf);
    return st;
}

void lq_st_writer_free(lq_st_writer *w) {
    if (!w)
        return;
    for (int i = 0; i < w->nsp; i++) {
        if (w->sp[i].fd >= 0)
            close(w->sp[i].fd);
        if (!w->finished)
            unlink(w->sp[i].path);
        free(w->sp[i].path);
    }
    for (int i = 0; i < w->ncreated; i++) {
        if (!w->finished)
            unlink(w->created[i]); /* ENOENT for temporaries already renamed: harmless */
        free(w->created[i]);
    }
    for (int64_t i = 0; i < w->n; i++)
        free(w->t[i].name);
    for (int i = 0; i < w->nmeta; i++) {
        free(w->meta_k[i]);
        free(w->meta_v[i]);
    }
    free(w->meta_k);
    free(w->meta_v);
    free(w->created);
    free(w->t);
    free(w->sp);
    free(w->dir);
    free(w);
}
