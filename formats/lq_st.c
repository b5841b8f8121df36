/* safetensors reader: one parser for files (mmap), buffers (fuzzing) and shard sets.
 * Every validation rule has its own status so bad files are diagnosable from the exit code. */
#define _DEFAULT_SOURCE /* madvise(MADV_DONTNEED): posix_madvise DONTNEED is a no-op in glibc */
#include "lq_st.h"

#include "lq_gguf_hf.h"
#include "lq_json.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Depth allowed in a header: 3 is what safetensors writes; a little slack for metadata-free
 * extensions, nothing more. */
#define LQ_ST_MAX_NESTING 8

typedef struct st_file {
    char          *path;
    void          *map;      /* NULL for memory buffers */
    int            borrowed; /* map belongs to someone else (lq_st_open_views) */
    size_t         map_size;
    const uint8_t *data; /* first byte after the header */
    int64_t        data_len;
} st_file;

typedef struct meta_kv {
    char *key, *val;
} meta_kv;

struct lq_st {
    st_file      *files;
    int           nfiles;
    lq_st_tensor *t; /* sorted by name for lq_st_find */
    int64_t       n, cap;
    meta_kv      *meta;
    int           nmeta;
};

static int cmp_tensor_name(const void *a, const void *b) {
    return strcmp(((const lq_st_tensor *)a)->name, ((const lq_st_tensor *)b)->name);
}

/* Integer JSON number in [0, 2^53]. */
static int json_uint(const cJSON *v, int64_t *out) {
    if (!cJSON_IsNumber(v))
        return 0;
    double d = v->valuedouble;
    if (!(d >= 0) || d > 9007199254740992.0 || d != floor(d))
        return 0;
    *out = (int64_t)d;
    return 1;
}

typedef struct entry {
    int64_t begin, end;
    int64_t idx; /* index into st->t */
} entry;

static int cmp_entry(const void *a, const void *b) {
    const entry *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : (x->end > y->end);
}

static lq_status check_meta(const cJSON *m, const char *label, lq_err *err) {
    if (!cJSON_IsObject(m))
        LQ_FAIL(err, LQ_ERR_ST_HEADER_JSON, "%s: __metadata__ is not an object", label);
    const cJSON *kv;
    cJSON_ArrayForEach(kv, m) {
        if (!cJSON_IsString(kv))
            LQ_FAIL(err, LQ_ERR_ST_HEADER_JSON, "%s: __metadata__ value of \"%s\" is not a string",
                    label, kv->string);
    }
    return LQ_OK;
}

static lq_status add_meta(lq_st *st, const cJSON *m, const char *label, lq_err *err) {
    int cnt  = cJSON_GetArraySize(m);
    st->meta = calloc((size_t)(cnt > 0 ? cnt : 1), sizeof *st->meta);
    if (!st->meta)
        LQ_FAIL(err, LQ_ERR_NOMEM, "%s: out of memory", label);
    const cJSON *kv;
    cJSON_ArrayForEach(kv, m) {
        st->meta[st->nmeta].key = strdup(kv->string);
        st->meta[st->nmeta].val = strdup(kv->valuestring);
        st->nmeta++;
        if (!st->meta[st->nmeta - 1].key || !st->meta[st->nmeta - 1].val)
            LQ_FAIL(err, LQ_ERR_NOMEM, "%s: out of memory", label);
    }
    return LQ_OK;
}

/* The header of a file image: its length prefix, UTF-8, nesting, control bytes and tensor
 * count checked before cJSON sees it, then parsed (*root) with nothing but padding after the
 * object and no escaped NUL; hdr_out and hlen_out locate it in buf. */
static lq_status parse_header(const char *label, const uint8_t *buf, size_t len,
                              const uint8_t **hdr_out, uint64_t *hlen_out, cJSON **root,
                              lq_err *err) {
    *root = NULL;
    if (len < 8)
        LQ_FAIL(err, LQ_ERR_ST_TRUNCATED, "%s: %zu bytes, shorter than the 8-byte header length",
                label, len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = (hlen << 8) | buf[i];
    if (hlen == 0 || hlen > (uint64_t)LQ_ST_MAX_HEADER)
        LQ_FAIL(err, LQ_ERR_ST_HEADER_SIZE, "%s: header length %llu outside 1..%lld bytes", label,
                (unsigned long long)hlen, (long long)LQ_ST_MAX_HEADER);
    if (hlen > len - 8)
        LQ_FAIL(err, LQ_ERR_ST_TRUNCATED, "%s: header of %llu bytes runs past the end of the file",
                label, (unsigned long long)hlen);
    const uint8_t *hdr = buf + 8;
    if (!lq_utf8_valid((const char *)hdr, (int64_t)hlen))
        LQ_FAIL(err, LQ_ERR_ST_HEADER_UTF8, "%s: header is not valid UTF-8", label);
    /* A valid header nests 3 deep ({name: {shape: [..]}}); refusing deeper input before
     * cJSON's recursive descent keeps hostile headers from costing stack. */
    if (lq_json_depth_exceeds((const char *)hdr, (size_t)hlen, LQ_ST_MAX_NESTING))
        LQ_FAIL(err, LQ_ERR_ST_HEADER_JSON, "%s: header JSON nests deeper than %d levels", label,
                LQ_ST_MAX_NESTING);
    /* cJSON takes raw control characters inside strings, which serde_json (the reference
     * parser) refuses; a NUL would also silently cut a tensor name short. */
    for (uint64_t i = 0; i < hlen; i++)
        if (hdr[i] < 0x20 && hdr[i] != ' ' && hdr[i] != '\t' && hdr[i] != '\n' && hdr[i] != '\r')
            LQ_FAIL(err, LQ_ERR_ST_HEADER_JSON, "%s: header has control byte 0x%02x at byte %llu",
                    label, hdr[i], (unsigned long long)i);
    /* count the entries before building the tree (linear, no allocation) */
    int64_t noffs = 0;
    for (const char *q = (const char *)hdr, *e = q + hlen; q + 14 <= e; q++) {
        if (!(q = memchr(q, '"', (size_t)(e - q))) || q + 14 > e)
            break;
        if (!memcmp(q, "\"data_offsets\"", 14) && ++noffs > LQ_ST_MAX_TENSORS)
            LQ_FAIL(err, LQ_ERR_UNSUPPORTED, "%s: more than %d tensors in one file", label,
                    LQ_ST_MAX_TENSORS);
    }
    const char *end = NULL;
    *root           = cJSON_ParseWithLengthOpts((const char *)hdr, (size_t)hlen, &end, 0);
    if (!*root)
        LQ_FAIL(err, LQ_ERR_ST_HEADER_JSON, "%s: header is not valid JSON (near byte %ld)", label,
                end ? (long)(end - (const char *)hdr) : -1L);
    /* cJSON stops after the first value; only the padding (spaces) may follow it. */
    if (!lq_json_only_space(end, (size_t)((const char *)hdr + hlen - end)))
        LQ_FAIL(err, LQ_ERR_ST_HEADER_JSON, "%s: header has data after the JSON object (byte %ld)",
                label, (long)(end - (const char *)hdr));
    /* a tensor name with \u0000 would be cut short and could alias another tensor */
    const int64_t nul = lq_json_escaped_nul((const char *)hdr, (size_t)hlen);
    if (nul >= 0)
        LQ_FAIL(err, LQ_ERR_ST_HEADER_JSON,
                "%s: header string holds an escaped NUL (\\u0000) at byte %lld", label,
                (long long)nul);
    if (!cJSON_IsObject(*root))
        LQ_FAIL(err, LQ_ERR_ST_HEADER_JSON, "%s: header is not a JSON object", label);
    *hdr_out  = hdr;
    *hlen_out = hlen;
    return LQ_OK;
}

/* One tensor entry of the header appended to ss (its data pointer set once the offsets are
 * known good); *ent receives its offsets. */
static lq_status add_tensor(lq_st *ss, int shard, const cJSON *item, const char *label, entry *ent,
                            lq_err *err) {
    const char *name = item->string;
    if (!cJSON_IsObject(item))
        LQ_FAIL(err, LQ_ERR_ST_HEADER_JSON, "%s: entry \"%s\" is not an object", label, name);
    const cJSON *dt  = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    const cJSON *shp = cJSON_GetObjectItemCaseSensitive(item, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!cJSON_IsString(dt) || !cJSON_IsArray(shp) || !cJSON_IsArray(off) ||
        cJSON_GetArraySize(off) != 2)
        LQ_FAIL(err, LQ_ERR_ST_HEADER_JSON,
                "%s: tensor \"%s\" needs dtype (string), shape (array) and data_offsets "
                "(2 integers)",
                label, name);
    int dtype = lq_dtype_from_name(dt->valuestring, strlen(dt->valuestring));
    if (dtype < 0)
        LQ_FAIL(err, LQ_ERR_ST_DTYPE, "%s: tensor \"%s\" has unknown dtype \"%s\"", label, name,
                dt->valuestring);
    int ndim = cJSON_GetArraySize(shp);
    if (ndim > LQ_ST_MAX_DIMS)
        LQ_FAIL(err, LQ_ERR_UNSUPPORTED,
                "%s: tensor \"%s\" has %d dims (this build handles up to %d)", label, name, ndim,
                LQ_ST_MAX_DIMS);
    if (ss->n == ss->cap) {
        int64_t       nc = ss->cap ? ss->cap * 2 : 64;
        lq_st_tensor *nt = realloc(ss->t, (size_t)nc * sizeof *nt);
        if (!nt)
            LQ_FAIL(err, LQ_ERR_NOMEM, "%s: out of memory", label);
        ss->t   = nt;
        ss->cap = nc;
    }
    lq_st_tensor *t = &ss->t[ss->n];
    memset(t, 0, sizeof *t);
    t->dtype      = (lq_dtype)dtype;
    t->ndim       = ndim;
    t->shard      = shard;
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (!json_uint(cJSON_GetArrayItem(shp, d), &t->shape[d]))
            LQ_FAIL(err, LQ_ERR_ST_HEADER_JSON,
                    "%s: tensor \"%s\" shape[%d] is not a non-negative integer", label, name, d);
        if (!lq_mul_i64(numel, t->shape[d], &numel))
            LQ_FAIL(err, LQ_ERR_ST_SHAPE, "%s: tensor \"%s\" element count overflows", label, name);
    }
    int64_t b, e, nbytes;
    if (!json_uint(cJSON_GetArrayItem(off, 0), &b) || !json_uint(cJSON_GetArrayItem(off, 1), &e))
        LQ_FAIL(err, LQ_ERR_ST_HEADER_JSON,
                "%s: tensor \"%s\" data_offsets are not non-negative integers", label, name);
    if (e < b)
        LQ_FAIL(err, LQ_ERR_ST_OFFSETS, "%s: tensor \"%s\" data_offsets end %lld < begin %lld",
                label, name, (long long)e, (long long)b);
    if (!lq_mul_i64(numel, lq_dtype_size(t->dtype), &nbytes) || nbytes != e - b)
        LQ_FAIL(err, LQ_ERR_ST_SHAPE,
                "%s: tensor \"%s\" shape x %s needs %lld bytes but data_offsets span %lld", label,
                name, lq_dtype_name(t->dtype), (long long)nbytes, (long long)(e - b));
    t->numel  = numel;
    t->nbytes = nbytes;
    t->name   = strdup(name);
    if (!t->name)
        LQ_FAIL(err, LQ_ERR_NOMEM, "%s: out of memory", label);
    ent->begin = b;
    ent->end   = e;
    ent->idx   = ss->n;
    ss->n++;
    return LQ_OK;
}

/* The data section holds the tensors back to back from 0 to its end (ent sorted by offset). */
static lq_status check_offsets(const lq_st *ss, const entry *ent, int nent, int64_t data_len,
                               const char *label, lq_err *err) {
    int64_t pos = 0;
    for (int i = 0; i < nent; i++) {
        const lq_st_tensor *t = &ss->t[ent[i].idx];
        if (ent[i].begin != pos)
            LQ_FAIL(err, LQ_ERR_ST_OFFSETS,
                    "%s: tensor \"%s\" starts at %lld, expected %lld (offsets must be "
                    "contiguous from 0)",
                    label, t->name, (long long)ent[i].begin, (long long)pos);
        if (ent[i].end > data_len)
            LQ_FAIL(err, LQ_ERR_ST_BOUNDS,
                    "%s: tensor \"%s\" ends at byte %lld past the %lld data bytes in the file",
                    label, t->name, (long long)ent[i].end, (long long)data_len);
        pos = ent[i].end;
    }
    if (pos != data_len)
        LQ_FAIL(err, LQ_ERR_ST_BOUNDS, "%s: %lld trailing bytes after the last tensor", label,
                (long long)(data_len - pos));
    return LQ_OK;
}

/* Parse one file image into st (appending tensors tagged with `shard`). */
static lq_status parse_image(lq_st *ss, int shard, const uint8_t *buf, size_t len, lq_err *err) {
    const char    *label = ss->files[shard].path;
    const uint8_t *hdr   = NULL;
    uint64_t       hlen  = 0;
    cJSON         *root  = NULL;
    entry         *ent   = NULL;
    lq_status      st    = LQ_OK;
    LQ_TRY_GOTO(parse_header(label, buf, len, &hdr, &hlen, &root, err));
    int64_t data_len          = (int64_t)(len - 8 - hlen);
    ss->files[shard].data     = hdr + hlen;
    ss->files[shard].data_len = data_len;
    int count                 = cJSON_GetArraySize(root);
    ent                       = calloc((size_t)count + 1, sizeof *ent);
    if (!ent)
        LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory", label);
    int          nent = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, root) {
        if (strcmp(item->string, "__metadata__") == 0) {
            /* Validated in every shard; lq_st_metadata reports the first shard's. */
            LQ_TRY_GOTO(check_meta(item, label, err));
            if (shard == 0 && !ss->meta)
                LQ_TRY_GOTO(add_meta(ss, item, label, err));
            continue;
        }
        LQ_TRY_GOTO(add_tensor(ss, shard, item, label, &ent[nent], err));
        nent++;
    }
    qsort(ent, (size_t)nent, sizeof *ent, cmp_entry);
    LQ_TRY_GOTO(check_offsets(ss, ent, nent, data_len, label, err));
    for (int i = 0; i < nent; i++)
        ss->t[ent[i].idx].data = ss->files[shard].data + ent[i].begin;
done:
    free(ent);
    cJSON_Delete(root);
    return st;
}

/* Sort by name, reject duplicates (within a header -- cJSON keeps repeated keys -- or across
 * shards). */
static lq_status finalize(lq_st *st, lq_err *err) {
    if (st->n > 1)
        qsort(st->t, (size_t)st->n, sizeof *st->t, cmp_tensor_name);
    for (int64_t i = 1; i < st->n; i++)
        if (strcmp(st->t[i].name, st->t[i - 1].name) == 0)
            LQ_FAIL(err, LQ_ERR_ST_DUPLICATE, "%s: tensor \"%s\" appears twice%s%s",
                    st->files[st->t[i].shard].path, st->t[i].name,
                    st->t[i].shard != st->t[i - 1].shard ? " (also in " : "",
                    st->t[i].shard != st->t[i - 1].shard ? st->files[st->t[i - 1].shard].path : "");
    return LQ_OK;
}

void lq_st_close(lq_st *st) {
    if (!st)
        return;
    for (int i = 0; i < st->nfiles; i++) {
        if (st->files[i].map && !st->files[i].borrowed)
            munmap(st->files[i].map, st->files[i].map_size);
        free(st->files[i].path);
    }
    for (int64_t i = 0; i < st->n; i++)
        free((void *)(uintptr_t)st->t[i].name);
    for (int i = 0; i < st->nmeta; i++) {
        free(st->meta[i].key);
        free(st->meta[i].val);
    }
    free(st->meta);
    free(st->files);
    free(st->t);
    free(st);
}

static lq_st *st_new(int nfiles) {
    lq_st *st = calloc(1, sizeof *st);
    if (!st)
        return NULL;
    st->files = calloc((size_t)nfiles, sizeof *st->files);
    if (!st->files) {
        free(st);
        return NULL;
    }
    st->nfiles = nfiles;
    return st;
}

lq_status lq_st_open_memory(const void *buf, size_t len, const char *label, lq_st **out,
                            lq_err *err) {
    *out      = NULL;
    lq_st *st = st_new(1);
    if (!st || !(st->files[0].path = strdup(label ? label : "<memory>"))) {
        lq_st_close(st);
        LQ_FAIL(err, LQ_ERR_NOMEM, "out of memory");
    }
    lq_status s = parse_image(st, 0, buf, len, err);
    if (s == LQ_OK)
        s = finalize(st, err);
    if (s != LQ_OK) {
        lq_st_close(st);
        return s;
    }
    *out = st;
    return LQ_OK;
}

lq_status lq_st_open_views(const char *label, const void *map, size_t map_size,
                           const lq_st_tensor *views, int64_t n, lq_st **out, lq_err *err) {
    *out      = NULL;
    lq_st *st = st_new(1);
    if (!st || !(st->files[0].path = strdup(label)) ||
        !(st->t = calloc((size_t)(n ? n : 1), sizeof *st->t))) {
        lq_st_close(st);
        LQ_FAIL(err, LQ_ERR_NOMEM, "%s: out of memory", label);
    }
    st->files[0].map      = (void *)(uintptr_t)map;
    st->files[0].map_size = map_size;
    st->files[0].borrowed = 1;
    st->cap               = n;
    for (int64_t i = 0; i < n; i++) {
        st->t[i]       = views[i];
        st->t[i].shard = 0;
        st->t[i].name  = strdup(views[i].name);
        st->n          = i + 1;
        if (!st->t[i].name) {
            lq_st_close(st);
            LQ_FAIL(err, LQ_ERR_NOMEM, "%s: out of memory", label);
        }
    }
    lq_status s = finalize(st, err);
    if (s != LQ_OK) {
        lq_st_close(st);
        return s;
    }
    *out = st;
    return LQ_OK;
}

static lq_status map_file(st_file *f, lq_err *err) {
    int fd = open(f->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        LQ_FAIL(err, lq_status_from_errno(errno), "%s: %s", f->path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        LQ_FAIL(err, LQ_ERR_IO, "%s: not a regular file", f->path);
    }
    f->map_size = (size_t)sb.st_size;
    if (f->map_size == 0) {
        close(fd);
        LQ_FAIL(err, LQ_ERR_ST_TRUNCATED, "%s: file is empty", f->path);
    }
    void *m = mmap(NULL, f->map_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int   e = errno;
    close(fd);
    if (m == MAP_FAILED)
        LQ_FAIL(err, lq_status_from_errno(e), "%s: mmap failed: %s", f->path, strerror(e));
    f->map = m;
    return LQ_OK;
}

lq_status lq_st_open(const char *path, lq_st **out, lq_err *err) {
    *out      = NULL;
    lq_st *st = st_new(1);
    if (!st || !(st->files[0].path = strdup(path))) {
        lq_st_close(st);
        LQ_FAIL(err, LQ_ERR_NOMEM, "out of memory");
    }
    lq_status s = map_file(&st->files[0], err);
    if (s == LQ_OK)
        s = parse_image(st, 0, st->files[0].map, st->files[0].map_size, err);
    if (s == LQ_OK)
        s = finalize(st, err);
    if (s != LQ_OK) {
        lq_st_close(st);
        return s;
    }
    *out = st;
    return LQ_OK;
}

/* A shard file name from weight_map must stay inside the model directory. */
static int plain_file_name(const char *s) {
    return s[0] != '\0' && s[0] != '.' && !strchr(s, '/') && !strchr(s, '\\');
}

typedef struct shard_ref {
    const char *name;
    int         entry;
} shard_ref;

static int cmp_shard_ref(const void *a, const void *b) {
    const shard_ref *x = a, *y = b;
    int              c = strcmp(x->name, y->name);
    return c ? c : (x->entry > y->entry) - (x->entry < y->entry);
}

/* names[0..n) (weight_map values) -> the distinct names in names[0..*nf) (sorted: shards are
 * named model-0000i-of-0000n), and shard_of[i] = the index of names[i] among them. */
static lq_status dedup_shards(const char **names, int n, int *shard_of, int *nf, const char *label,
                              lq_err *err) {
    shard_ref *r = malloc((size_t)(n > 0 ? n : 1) * sizeof *r);
    if (!r)
        LQ_FAIL(err, LQ_ERR_NOMEM, "%s: out of memory", label);
    for (int i = 0; i < n; i++)
        r[i] = (shard_ref){names[i], i};
    qsort(r, (size_t)n, sizeof *r, cmp_shard_ref);
    int d = 0;
    for (int i = 0; i < n; i++) {
        if (i == 0 || strcmp(r[i].name, r[i - 1].name) != 0)
            names[d++] = r[i].name;
        shard_of[r[i].entry] = d - 1;
    }
    *nf = d;
    free(r);
    return LQ_OK;
}

static lq_status open_index(const char *dir, const char *index_path, lq_st **out, lq_err *err) {
    *out           = NULL;
    cJSON    *root = NULL;
    lq_status s    = lq_json_load_file(index_path, 256 << 20, &root, err);
    if (s == LQ_ERR_JSON) /* the index itself is the bad part of the checkpoint */
        s = err ? (err->code = LQ_ERR_ST_INDEX) : LQ_ERR_ST_INDEX;
    if (s != LQ_OK)
        return s;
    lq_st       *st       = NULL;
    const char **fns      = NULL;
    int         *shard_of = NULL; /* weight_map entry -> index into fns */
    int          nf       = 0;
    const cJSON *wm       = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(wm) || cJSON_GetArraySize(wm) == 0) {
        s = lq_fail(err, LQ_ERR_ST_INDEX, "%s: no \"weight_map\" object", index_path);
        goto done;
    }
    int cnt  = cJSON_GetArraySize(wm);
    fns      = calloc((size_t)cnt, sizeof *fns);
    shard_of = calloc((size_t)cnt, sizeof *shard_of);
    if (!fns || !shard_of) {
        s = lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", index_path);
        goto done;
    }
    const cJSON *kv;
    int          k = 0;
    cJSON_ArrayForEach(kv, wm) {
        if (!cJSON_IsString(kv) || !plain_file_name(kv->valuestring)) {
            s = lq_fail(err, LQ_ERR_ST_INDEX, "%s: weight_map[\"%s\"] is not a plain file name",
                        index_path, kv->string);
            goto done;
        }
        fns[k++] = kv->valuestring;
    }
    /* distinct shard names by sorting (n log n; a linear search per entry was quadratic) */
    s = dedup_shards(fns, cnt, shard_of, &nf, index_path, err);
    if (s != LQ_OK)
        goto done;
    if (nf > LQ_ST_MAX_SHARDS) {
        s = lq_fail(err, LQ_ERR_ST_INDEX, "%s: %d shard files (more than %d)", index_path, nf,
                    LQ_ST_MAX_SHARDS);
        goto done;
    }
    st = st_new(nf);
    if (!st) {
        s = lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", index_path);
        goto done;
    }
    for (int i = 0; i < nf; i++) {
        char p[4200];
        if (!lq_path_join(p, sizeof p, dir, fns[i])) {
            s = lq_fail(err, LQ_ERR_ST_INDEX, "%s: shard path \"%s\" too long", index_path, fns[i]);
            goto done;
        }
        if (!(st->files[i].path = strdup(p))) {
            s = lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", index_path);
            goto done;
        }
        if (!lq_file_exists(p)) {
            s = lq_fail(err, LQ_ERR_ST_INDEX, "%s: shard \"%s\" named in the index is missing",
                        index_path, fns[i]);
            goto done;
        }
        if ((s = map_file(&st->files[i], err)) != LQ_OK ||
            (s = parse_image(st, i, st->files[i].map, st->files[i].map_size, err)) != LQ_OK)
            goto done;
    }
    if ((s = finalize(st, err)) != LQ_OK)
        goto done;
    k = 0;
    cJSON_ArrayForEach(kv, wm) {
        const lq_st_tensor *t = lq_st_find(st, kv->string);
        if (!t || t->shard != shard_of[k]) {
            s = lq_fail(err, LQ_ERR_ST_INDEX, "%s: tensor \"%s\" is not in shard \"%s\"",
                        index_path, kv->string, kv->valuestring);
            goto done;
        }
        k++;
    }
done:
    free(fns);
    free(shard_of);
    cJSON_Delete(root);
    if (s != LQ_OK) {
        lq_st_close(st);
        st = NULL;
    }
    *out = st;
    return s;
}

lq_status lq_st_open_dir(const char *dir, lq_st **out, lq_err *err) {
    *out = NULL;
    char p[4200];
    if (!lq_dir_exists(dir))
        LQ_FAIL(err, LQ_ERR_NOT_FOUND, "%s: model directory not found", dir);
    /* transformers' order: a model.safetensors wins over an index next to it */
    if (lq_path_join(p, sizeof p, dir, "model.safetensors") && lq_file_exists(p))
        return lq_st_open(p, out, err);
    if (lq_path_join(p, sizeof p, dir, "model.safetensors.index.json") && lq_file_exists(p))
        return open_index(dir, p, out, err);
    /* A lone *.safetensors with another name. */
    char found[4200] = "";
    int  count       = 0;
    DIR *d           = opendir(dir);
    if (!d)
        LQ_FAIL(err, lq_status_from_errno(errno), "%s: %s", dir, strerror(errno));
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l > 12 && strcmp(de->d_name + l - 12, ".safetensors") == 0) {
            count++;
            lq_path_join(found, sizeof found, dir, de->d_name);
        }
    }
    closedir(d);
    if (count == 1)
        return lq_st_open(found, out, err);
    if (count > 1)
        LQ_FAIL(err, LQ_ERR_ST_INDEX,
                "%s: %d .safetensors files but no model.safetensors.index.json", dir, count);
    LQ_FAIL(err, LQ_ERR_NOT_FOUND, "%s: no model.safetensors (or index) in model directory", dir);
}

int64_t lq_st_count(const lq_st *st) {
    return st ? st->n : 0;
}

const lq_st_tensor *lq_st_get(const lq_st *st, int64_t i) {
    return (st && i >= 0 && i < st->n) ? &st->t[i] : NULL;
}

const lq_st_tensor *lq_st_find(const lq_st *st, const char *name) {
    if (!st || !name || st->n == 0)
        return NULL;
    lq_st_tensor key;
    key.name = name;
    return bsearch(&key, st->t, (size_t)st->n, sizeof *st->t, cmp_tensor_name);
}

int64_t lq_st_lower_bound(const lq_st *st, const char *name) {
    int64_t lo = 0, hi = st ? st->n : 0;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (strcmp(st->t[mid].name, name) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

const char *lq_st_file_of(const lq_st *st, const lq_st_tensor *t) {
    return (st && t && t->shard >= 0 && t->shard < st->nfiles) ? st->files[t->shard].path : "?";
}

const char *lq_st_metadata(const lq_st *st, const char *key) {
    for (int i = 0; st && i < st->nmeta; i++)
        if (strcmp(st->meta[i].key, key) == 0)
            return st->meta[i].val;
    return NULL;
}

int64_t lq_st_data_bytes(const lq_st *st) {
    int64_t s = 0;
    for (int64_t i = 0; st && i < st->n; i++)
        s += st->t[i].nbytes;
    return s;
}

lq_status lq_st_read_f32(const lq_st *st, const char *name, int ndim, const int64_t *expect_shape,
                         float *dst, lq_err *err) {
    const lq_st_tensor *t = lq_st_find(st, name);
    if (!t)
        LQ_FAIL(err, LQ_ERR_ST_MISSING_TENSOR, "%s: tensor \"%s\" not found",
                st && st->nfiles ? st->files[0].path : "?", name);
    const char *file = lq_st_file_of(st, t);
    if (!lq_dtype_is_float(t->dtype))
        LQ_FAIL(err, LQ_ERR_WEIGHT_DTYPE, "%s: tensor \"%s\" has dtype %s, expected F16/BF16/F32",
                file, name, lq_dtype_name(t->dtype));
    if (expect_shape) {
        int ok = t->ndim == ndim;
        for (int d = 0; ok && d < ndim; d++)
            ok = t->shape[d] == expect_shape[d];
        if (!ok) {
            char got[128] = "", want[128] = "";
            for (int d = 0; d < t->ndim; d++)
                snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? "," : "",
                         (long long)t->shape[d]);
            for (int d = 0; d < ndim; d++)
                snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", d ? "," : "",
                         (long long)expect_shape[d]);
            LQ_FAIL(err, LQ_ERR_WEIGHT_SHAPE, "%s: tensor \"%s\" has shape [%s], expected [%s]",
                    file, name, got, want);
        }
    }
    int64_t bad = lq_convert_to_f32(t->dtype, t->data, t->numel, dst);
    if (bad < 0)
        LQ_FAIL(err, LQ_ERR_WEIGHT_DTYPE, "%s: tensor \"%s\" of dtype %s cannot be decoded", file,
                name, lq_dtype_name(t->dtype));
    if (t->shift != 0.0f)
        for (int64_t i = 0; i < t->numel; i++)
            dst[i] -= t->shift;
    if (t->perm_heads > 0 &&
        !lq_gguf_unpermute_rows(dst, t->shape[0], t->ndim > 1 ? t->numel / t->shape[0] : 1,
                                t->perm_heads))
        LQ_FAIL(err, LQ_ERR_NOMEM, "%s: cannot restore the row order of \"%s\" (%d heads)", file,
                name, t->perm_heads);
    if (bad > 0) {
        int64_t first = 0;
        while (first < t->numel && isfinite(dst[first]))
            first++;
        LQ_FAIL(err, LQ_ERR_WEIGHT_NONFINITE,
                "%s: tensor \"%s\" has %lld NaN/Inf values (first at flat index %lld)", file, name,
                (long long)bad, (long long)first);
    }
    return LQ_OK;
}

void lq_st_prefetch(const lq_st *st, const lq_st_tensor *t) {
    if (!st || !t || t->shard < 0 || t->shard >= st->nfiles || !st->files[t->shard].map ||
        t->nbytes <= 0)
        return;
    long      pg = sysconf(_SC_PAGESIZE);
    uintptr_t a  = (uintptr_t)t->data & ~((uintptr_t)pg - 1);
    uintptr_t e  = (uintptr_t)t->data + (uintptr_t)t->nbytes;
    madvise((void *)a, e - a, MADV_WILLNEED);
}

void lq_st_release(const lq_st *st, const lq_st_tensor *t) {
    if (!st || !t || t->shard < 0 || t->shard >= st->nfiles || !st->files[t->shard].map ||
        t->nbytes <= 0)
        return;
    /* Whole pages inside the tensor only: neighbours may still be in use. */
    long      pg = sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)t->data, e = a + (uintptr_t)t->nbytes;
    uintptr_t a_p = (a + (uintptr_t)pg - 1) & ~((uintptr_t)pg - 1), e_p = e & ~((uintptr_t)pg - 1);
    if (e_p > a_p)
        madvise((void *)a_p, e_p - a_p, MADV_DONTNEED);
}
