/* GGUF reader: one parser for files (mmap) and buffers (fuzzing). Every length read from the
 * file is checked against the bytes that remain before it is used, so a hostile file can make
 * the parser fail but never read out of bounds or allocate more than the file could describe. */
#include "lq_gguf.h"

#include "lq_dtype.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAGIC         0x46554747u /* "GGUF" little-endian */
#define GGUF_DEFAULT_ALIGN 32
#define GGUF_MAX_ALIGN     (1 << 20)
#define GGUF_MAX_NAME      65536

struct lq_gguf {
    char           *path;
    void           *map; /* NULL for memory buffers */
    size_t          map_size;
    const uint8_t  *buf;
    size_t          len;
    lq_gguf_kv     *kv;
    int64_t         nkv;
    int64_t       **str_off; /* [nkv]: offsets of the elements of a string array, else NULL */
    lq_gguf_tensor *t;
    int64_t         nt;
    int64_t        *t_sorted; /* indices of t sorted by name, for lookups */
    int64_t         data_start;
};

/* Cursor over the buffer; every read checks the remaining length. */
typedef struct cur {
    const uint8_t *p;
    size_t         len, pos;
    const char    *label;
    lq_err        *err;
} cur;

static lq_status truncated(cur *c, const char *what) {
    return lq_fail(c->err, LQ_ERR_GGUF_FORMAT, "%s: truncated GGUF file (%s at byte %zu)",
                   c->label, what, c->pos);
}

static lq_status rd(cur *c, void *dst, size_t n, const char *what) {
    if (c->len - c->pos < n)
        return truncated(c, what);
    memcpy(dst, c->p + c->pos, n);
    c->pos += n;
    return LQ_OK;
}

static lq_status skip(cur *c, uint64_t n, const char *what) {
    if (n > c->len - c->pos)
        return truncated(c, what);
    c->pos += (size_t)n;
    return LQ_OK;
}

static const int k_vsize[LQ_GGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

static bool name_ok(const uint8_t *s, uint64_t n) {
    for (uint64_t i = 0; i < n; i++)
        if (s[i] == 0)
            return false;
    return lq_utf8_valid((const char *)s, (int64_t)n);
}

/* A u64-length string: *s points into the buffer. */
static lq_status rd_str(cur *c, const uint8_t **s, uint64_t *n, const char *what) {
    LQ_TRY(rd(c, n, 8, what));
    if (*n > c->len - c->pos)
        return truncated(c, what);
    *s = c->p + c->pos;
    c->pos += (size_t)*n;
    return LQ_OK;
}

static lq_status parse_kv(lq_gguf *g, cur *c, int64_t idx) {
    lq_gguf_kv    *kv = &g->kv[idx];
    const uint8_t *ks = NULL;
    uint64_t       kn = 0;
    uint32_t       ty = 0;
    LQ_TRY(rd_str(c, &ks, &kn, "key"));
    if (kn == 0 || kn > GGUF_MAX_NAME || !name_ok(ks, kn))
        LQ_FAIL(c->err, LQ_ERR_GGUF_FORMAT, "%s: key %lld is empty, too long or not UTF-8",
                c->label, (long long)idx);
    if (!(kv->key = lq_strndup((const char *)ks, (int64_t)kn)))
        LQ_FAIL(c->err, LQ_ERR_NOMEM, "%s: out of memory", c->label);
    LQ_TRY(rd(c, &ty, 4, "value type"));
    if (ty >= LQ_GGUF_VTYPE_COUNT)
        LQ_FAIL(c->err, LQ_ERR_GGUF_FORMAT, "%s: key \"%s\" has unknown value type %u", c->label,
                kv->key, ty);
    kv->type = (int)ty;
    kv->n    = 1;
    kv->val  = c->p + c->pos;
    if (ty == LQ_GGUF_STRING) {
        const uint8_t *s = NULL;
        uint64_t       n = 0;
        return rd_str(c, &s, &n, kv->key);
    }
    if (ty != LQ_GGUF_ARRAY)
        return skip(c, (uint64_t)k_vsize[ty], kv->key);
    uint32_t at = 0;
    uint64_t n  = 0;
    LQ_TRY(rd(c, &at, 4, kv->key));
    LQ_TRY(rd(c, &n, 8, kv->key));
    if (at >= LQ_GGUF_VTYPE_COUNT || at == LQ_GGUF_ARRAY)
        LQ_FAIL(c->err, LQ_ERR_GGUF_FORMAT, "%s: key \"%s\": %s", c->label, kv->key,
                at == LQ_GGUF_ARRAY ? "arrays of arrays are not supported"
                                    : "array of unknown element type");
    kv->atype = (int)at;
    kv->val   = c->p + c->pos;
    if (at != LQ_GGUF_STRING) {
        if (n > (c->len - c->pos) / (uint64_t)k_vsize[at])
            return truncated(c, kv->key);
        kv->n = (int64_t)n;
        return skip(c, n * (uint64_t)k_vsize[at], kv->key);
    }
    /* each string takes at least its 8-byte length */
    if (n > (c->len - c->pos) / 8)
        return truncated(c, kv->key);
    kv->n          = (int64_t)n;
    g->str_off[idx] = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    if (!g->str_off[idx])
        LQ_FAIL(c->err, LQ_ERR_NOMEM, "%s: out of memory for \"%s\"", c->label, kv->key);
    for (uint64_t i = 0; i < n; i++) {
        const uint8_t *s  = NULL;
        uint64_t       sl = 0;
        g->str_off[idx][i] = (int64_t)c->pos;
        LQ_TRY(rd_str(c, &s, &sl, kv->key));
    }
    return LQ_OK;
}

static lq_status parse_tensor_info(lq_gguf *g, cur *c, int64_t idx) {
    lq_gguf_tensor *t = &g->t[idx];
    const uint8_t  *ns = NULL;
    uint64_t        nn = 0, off = 0;
    uint32_t        nd = 0, ty = 0;
    LQ_TRY(rd_str(c, &ns, &nn, "tensor name"));
    if (nn == 0 || nn > GGUF_MAX_NAME || !name_ok(ns, nn))
        LQ_FAIL(c->err, LQ_ERR_GGUF_FORMAT,
                "%s: tensor %lld has an empty, overlong or non-UTF-8 name (or a NUL byte in it)",
                c->label, (long long)idx);
    if (!(t->name = lq_strndup((const char *)ns, (int64_t)nn)))
        LQ_FAIL(c->err, LQ_ERR_NOMEM, "%s: out of memory", c->label);
    LQ_TRY(rd(c, &nd, 4, t->name));
    if (nd < 1 || nd > LQ_GGUF_MAX_DIMS)
        LQ_FAIL(c->err, LQ_ERR_GGUF_FORMAT, "%s: tensor \"%s\" has %u dimensions (1..%d allowed)",
                c->label, t->name, nd, LQ_GGUF_MAX_DIMS);
    t->ndim  = (int)nd;
    t->numel = 1;
    for (uint32_t d = 0; d < nd; d++) {
        uint64_t v = 0;
        LQ_TRY(rd(c, &v, 8, t->name));
        if (v < 1 || v > (uint64_t)INT64_MAX || !lq_mul_i64(t->numel, (int64_t)v, &t->numel))
            LQ_FAIL(c->err, LQ_ERR_GGUF_FORMAT,
                    "%s: tensor \"%s\" has dimension %u of %llu (zero or overflowing)", c->label,
                    t->name, d, (unsigned long long)v);
        t->ne[d] = (int64_t)v;
    }
    LQ_TRY(rd(c, &ty, 4, t->name));
    LQ_TRY(rd(c, &off, 8, t->name));
    int bb, be = lq_ggml_type_block(ty, &bb);
    if (be <= 0)
        LQ_FAIL(c->err, LQ_ERR_GGUF_TYPE, "%s: tensor \"%s\" has unknown GGML type %u", c->label,
                t->name, ty);
    if (t->ne[0] % be)
        LQ_FAIL(c->err, LQ_ERR_GGUF_FORMAT,
                "%s: tensor \"%s\": row of %lld elements is not a whole number of %s blocks "
                "(%d)",
                c->label, t->name, (long long)t->ne[0], lq_ggml_type_name(ty), be);
    if (!lq_mul_i64(t->numel / be, bb, &t->nbytes) || off > (uint64_t)INT64_MAX)
        LQ_FAIL(c->err, LQ_ERR_GGUF_FORMAT, "%s: tensor \"%s\" size overflows", c->label,
                t->name);
    t->ggml_type = ty;
    t->offset    = (int64_t)off;
    return LQ_OK;
}

/* qsort without a context argument: sort (name pointer, index) pairs instead. */
typedef struct name_idx {
    const char *name;
    int64_t     idx;
} name_idx;

static int cmp_name_idx(const void *a, const void *b) {
    return strcmp(((const name_idx *)a)->name, ((const name_idx *)b)->name);
}

typedef struct off_idx {
    int64_t off, end, idx;
} off_idx;

static int cmp_off(const void *a, const void *b) {
    const off_idx *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

static lq_status check_layout(lq_gguf *g, cur *c, int64_t align) {
    const int64_t data_len = (int64_t)g->len - g->data_start;
    off_idx      *o        = malloc((size_t)(g->nt ? g->nt : 1) * sizeof *o);
    name_idx     *ni       = malloc((size_t)(g->nt ? g->nt : 1) * sizeof *ni);
    g->t_sorted            = malloc((size_t)(g->nt ? g->nt : 1) * sizeof *g->t_sorted);
    lq_status st           = LQ_OK;
    if (!o || !ni || !g->t_sorted)
        LQ_FAIL_GOTO(c->err, LQ_ERR_NOMEM, "%s: out of memory", c->label);
    for (int64_t i = 0; i < g->nt; i++) {
        lq_gguf_tensor *t = &g->t[i];
        if (t->offset % align)
            LQ_FAIL_GOTO(c->err, LQ_ERR_GGUF_FORMAT,
                         "%s: tensor \"%s\" offset %lld is not a multiple of the alignment %lld",
                         c->label, t->name, (long long)t->offset, (long long)align);
        if (t->offset > data_len || t->nbytes > data_len - t->offset)
            LQ_FAIL_GOTO(c->err, LQ_ERR_GGUF_FORMAT,
                         "%s: tensor \"%s\" data [%lld, +%lld) lies past the end of the file "
                         "(data section of %lld bytes)",
                         c->label, t->name, (long long)t->offset, (long long)t->nbytes,
                         (long long)data_len);
        t->data = g->buf + g->data_start + t->offset;
        o[i]    = (off_idx){t->offset, t->offset + t->nbytes, i};
        ni[i]   = (name_idx){t->name, i};
    }
    qsort(o, (size_t)g->nt, sizeof *o, cmp_off);
    for (int64_t i = 1; i < g->nt; i++)
        if (o[i].off < o[i - 1].end)
            LQ_FAIL_GOTO(c->err, LQ_ERR_GGUF_FORMAT, "%s: tensors \"%s\" and \"%s\" overlap",
                         c->label, g->t[o[i - 1].idx].name, g->t[o[i].idx].name);
    qsort(ni, (size_t)g->nt, sizeof *ni, cmp_name_idx);
    for (int64_t i = 0; i < g->nt; i++) {
        if (i > 0 && !strcmp(ni[i].name, ni[i - 1].name))
            LQ_FAIL_GOTO(c->err, LQ_ERR_GGUF_FORMAT, "%s: tensor \"%s\" appears twice", c->label,
                         ni[i].name);
        g->t_sorted[i] = ni[i].idx;
    }
done:
    free(o);
    free(ni);
    return st;
}

static lq_status parse(lq_gguf *g, lq_err *err) {
    cur      c = {g->buf, g->len, 0, g->path, err};
    uint32_t magic = 0, version = 0;
    uint64_t nt = 0, nkv = 0;
    LQ_TRY(rd(&c, &magic, 4, "magic"));
    if (magic != GGUF_MAGIC)
        LQ_FAIL(err, LQ_ERR_GGUF_FORMAT, "%s: not a GGUF file (bad magic)", g->path);
    LQ_TRY(rd(&c, &version, 4, "version"));
    if (version != 2 && version != 3)
        LQ_FAIL(err, LQ_ERR_GGUF_FORMAT, "%s: GGUF version %u is not supported (2 and 3 are)",
                g->path, version);
    LQ_TRY(rd(&c, &nt, 8, "tensor count"));
    LQ_TRY(rd(&c, &nkv, 8, "key/value count"));
    /* a key/value needs >= 12 bytes (8 length + 4 type), a tensor info >= 24 */
    if (nkv > (c.len - c.pos) / 12 || nt > (c.len - c.pos) / 24)
        LQ_FAIL(err, LQ_ERR_GGUF_FORMAT,
                "%s: %llu tensors / %llu key-values cannot fit in a file of %zu bytes", g->path,
                (unsigned long long)nt, (unsigned long long)nkv, c.len);
    g->nkv     = (int64_t)nkv;
    g->nt      = (int64_t)nt;
    g->kv      = calloc((size_t)(nkv ? nkv : 1), sizeof *g->kv);
    g->str_off = calloc((size_t)(nkv ? nkv : 1), sizeof *g->str_off);
    g->t       = calloc((size_t)(nt ? nt : 1), sizeof *g->t);
    if (!g->kv || !g->str_off || !g->t)
        LQ_FAIL(err, LQ_ERR_NOMEM, "%s: out of memory", g->path);
    for (int64_t i = 0; i < g->nkv; i++)
        LQ_TRY(parse_kv(g, &c, i));
    for (int64_t i = 1; i < g->nkv; i++) /* duplicate keys: O(n^2) but n is ~40 in practice */
        for (int64_t j = 0; j < i && g->nkv <= 4096; j++)
            if (!strcmp(g->kv[i].key, g->kv[j].key))
                LQ_FAIL(err, LQ_ERR_GGUF_FORMAT, "%s: key \"%s\" appears twice", g->path,
                        g->kv[i].key);
    if (g->nkv > 4096)
        LQ_FAIL(err, LQ_ERR_GGUF_FORMAT, "%s: %lld key/values (more than 4096)", g->path,
                (long long)g->nkv);
    for (int64_t i = 0; i < g->nt; i++)
        LQ_TRY(parse_tensor_info(g, &c, i));
    int64_t align = GGUF_DEFAULT_ALIGN, a;
    if (lq_gguf_find(g, "general.alignment")) {
        if (!lq_gguf_get_i64(g, "general.alignment", &a) || a < 1 || a > GGUF_MAX_ALIGN ||
            (a & (a - 1)))
            LQ_FAIL(err, LQ_ERR_GGUF_FORMAT,
                    "%s: general.alignment must be a power of two up to %d", g->path,
                    GGUF_MAX_ALIGN);
        align = a;
    }
    int64_t ds = ((int64_t)c.pos + align - 1) / align * align;
    if (ds > (int64_t)c.len) {
        if (g->nt > 0)
            return truncated(&c, "data section");
        ds = (int64_t)c.len;
    }
    g->data_start = ds;
    return check_layout(g, &c, align);
}

void lq_gguf_close(lq_gguf *g) {
    if (!g)
        return;
    for (int64_t i = 0; g->kv && i < g->nkv; i++) {
        free((void *)(uintptr_t)g->kv[i].key);
        if (g->str_off)
            free(g->str_off[i]);
    }
    for (int64_t i = 0; g->t && i < g->nt; i++)
        free((void *)(uintptr_t)g->t[i].name);
    free(g->kv);
    free(g->str_off);
    free(g->t);
    free(g->t_sorted);
    if (g->map)
        munmap(g->map, g->map_size);
    free(g->path);
    free(g);
}

static lq_status finish_open(lq_gguf *g, lq_gguf **out, lq_err *err) {
    lq_status st = parse(g, err);
    if (st != LQ_OK) {
        lq_gguf_close(g);
        return st;
    }
    *out = g;
    return LQ_OK;
}

lq_status lq_gguf_open_memory(const void *buf, size_t len, const char *label, lq_gguf **out,
                              lq_err *err) {
    *out       = NULL;
    lq_gguf *g = calloc(1, sizeof *g);
    if (!g || !(g->path = strdup(label ? label : "<memory>"))) {
        free(g);
        LQ_FAIL(err, LQ_ERR_NOMEM, "out of memory");
    }
    g->buf = buf;
    g->len = len;
    return finish_open(g, out, err);
}

lq_status lq_gguf_open(const char *path, lq_gguf **out, lq_err *err) {
    *out       = NULL;
    lq_gguf *g = calloc(1, sizeof *g);
    if (!g || !(g->path = strdup(path))) {
        free(g);
        LQ_FAIL(err, LQ_ERR_NOMEM, "out of memory");
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        lq_gguf_close(g);
        LQ_FAIL(err, lq_status_from_errno(e), "%s: %s", path, strerror(e));
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size < 24) {
        int reg = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode);
        close(fd);
        lq_gguf_close(g);
        if (!reg)
            LQ_FAIL(err, LQ_ERR_IO, "%s: not a regular file", path);
        LQ_FAIL(err, LQ_ERR_GGUF_FORMAT, "%s: truncated GGUF file (%lld bytes)", path,
                (long long)sb.st_size);
    }
    g->map_size = (size_t)sb.st_size;
    void *m     = mmap(NULL, g->map_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int   e     = errno;
    close(fd);
    if (m == MAP_FAILED) {
        lq_gguf_close(g);
        LQ_FAIL(err, lq_status_from_errno(e), "%s: mmap failed: %s", path, strerror(e));
    }
    g->map = m;
    g->buf = m;
    g->len = g->map_size;
    return finish_open(g, out, err);
}

bool lq_gguf_is_gguf_file(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    uint32_t    magic = 0;
    struct stat sb;
    bool ok = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && read(fd, &magic, 4) == 4 &&
              magic == GGUF_MAGIC;
    close(fd);
    return ok;
}

const char *lq_gguf_path(const lq_gguf *g) {
    return g ? g->path : "?";
}

const void *lq_gguf_map(const lq_gguf *g, size_t *size) {
    if (size)
        *size = g ? g->len : 0;
    return g ? g->buf : NULL;
}

int64_t lq_gguf_kv_count(const lq_gguf *g) {
    return g ? g->nkv : 0;
}

const lq_gguf_kv *lq_gguf_kv_get(const lq_gguf *g, int64_t i) {
    return g && i >= 0 && i < g->nkv ? &g->kv[i] : NULL;
}

const lq_gguf_kv *lq_gguf_find(const lq_gguf *g, const char *key) {
    for (int64_t i = 0; g && i < g->nkv; i++)
        if (!strcmp(g->kv[i].key, key))
            return &g->kv[i];
    return NULL;
}

int64_t lq_gguf_tensor_count(const lq_gguf *g) {
    return g ? g->nt : 0;
}

const lq_gguf_tensor *lq_gguf_tensor_get(const lq_gguf *g, int64_t i) {
    return g && i >= 0 && i < g->nt ? &g->t[i] : NULL;
}

const lq_gguf_tensor *lq_gguf_tensor_find(const lq_gguf *g, const char *name) {
    int64_t lo = 0, hi = g ? g->nt : 0;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        int     c   = strcmp(g->t[g->t_sorted[mid]].name, name);
        if (c == 0)
            return &g->t[g->t_sorted[mid]];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* Scalar of type ty at p as double / int64 (false for strings and arrays). */
static bool scalar_f64(int ty, const uint8_t *p, double *out) {
    union {
        uint8_t  u8;
        int8_t   i8;
        uint16_t u16;
        int16_t  i16;
        uint32_t u32;
        int32_t  i32;
        float    f32;
        uint64_t u64;
        int64_t  i64;
        double   f64;
    } v;
    if (ty < 0 || ty >= LQ_GGUF_VTYPE_COUNT || !k_vsize[ty])
        return false;
    memcpy(&v, p, (size_t)k_vsize[ty]);
    switch (ty) {
    case LQ_GGUF_U8: *out = v.u8; break;
    case LQ_GGUF_BOOL: *out = v.u8 != 0; break;
    case LQ_GGUF_I8: *out = v.i8; break;
    case LQ_GGUF_U16: *out = v.u16; break;
    case LQ_GGUF_I16: *out = v.i16; break;
    case LQ_GGUF_U32: *out = v.u32; break;
    case LQ_GGUF_I32: *out = v.i32; break;
    case LQ_GGUF_F32: *out = v.f32; break;
    case LQ_GGUF_U64: *out = (double)v.u64; break;
    case LQ_GGUF_I64: *out = (double)v.i64; break;
    default: *out = v.f64; break;
    }
    return true;
}

static bool scalar_i64(int ty, const uint8_t *p, int64_t *out) {
    double d;
    if (ty == LQ_GGUF_F32 || ty == LQ_GGUF_F64 || !scalar_f64(ty, p, &d))
        return false;
    if (ty == LQ_GGUF_U64 || ty == LQ_GGUF_I64) { /* exact, beyond 2^53 */
        uint64_t u;
        memcpy(&u, p, 8);
        if (ty == LQ_GGUF_U64 && u > (uint64_t)INT64_MAX)
            return false;
        *out = (int64_t)u;
        return true;
    }
    *out = (int64_t)d;
    return true;
}

bool lq_gguf_get_i64(const lq_gguf *g, const char *key, int64_t *out) {
    const lq_gguf_kv *kv = lq_gguf_find(g, key);
    return kv && scalar_i64(kv->type, kv->val, out);
}

bool lq_gguf_get_f64(const lq_gguf *g, const char *key, double *out) {
    const lq_gguf_kv *kv = lq_gguf_find(g, key);
    return kv && scalar_f64(kv->type, kv->val, out);
}

bool lq_gguf_get_bool(const lq_gguf *g, const char *key, bool *out) {
    int64_t v;
    if (!lq_gguf_get_i64(g, key, &v))
        return false;
    *out = v != 0;
    return true;
}

bool lq_gguf_get_str(const lq_gguf *g, const char *key, const char **s, int64_t *len) {
    const lq_gguf_kv *kv = lq_gguf_find(g, key);
    if (!kv || kv->type != LQ_GGUF_STRING)
        return false;
    uint64_t n;
    memcpy(&n, kv->val, 8);
    *s   = (const char *)kv->val + 8;
    *len = (int64_t)n;
    return true;
}

bool lq_gguf_arr_str(const lq_gguf *g, const lq_gguf_kv *kv, int64_t i, const char **s,
                     int64_t *len) {
    if (!g || !kv || kv->type != LQ_GGUF_ARRAY || kv->atype != LQ_GGUF_STRING || i < 0 ||
        i >= kv->n)
        return false;
    const int64_t *off = g->str_off[kv - g->kv];
    uint64_t       n;
    memcpy(&n, g->buf + off[i], 8);
    *s   = (const char *)g->buf + off[i] + 8;
    *len = (int64_t)n;
    return true;
}

bool lq_gguf_arr_f64(const lq_gguf_kv *kv, int64_t i, double *out) {
    if (!kv || kv->type != LQ_GGUF_ARRAY || kv->atype == LQ_GGUF_STRING || i < 0 || i >= kv->n)
        return false;
    return scalar_f64(kv->atype, kv->val + i * k_vsize[kv->atype], out);
}

bool lq_gguf_arr_i64(const lq_gguf_kv *kv, int64_t i, int64_t *out) {
    if (!kv || kv->type != LQ_GGUF_ARRAY || kv->atype == LQ_GGUF_STRING || i < 0 || i >= kv->n)
        return false;
    return scalar_i64(kv->atype, kv->val + i * k_vsize[kv->atype], out);
}
