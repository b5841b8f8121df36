/* GGUF writer (lq_gguf_write.h). */
#include "lq_gguf_write.h"

#include "lq_dtype.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct kv_rec {
    char    *key;
    uint8_t *bytes; /* the whole record: key string, type, value */
    size_t   len;
} kv_rec;

typedef struct t_rec {
    char    *name;
    uint32_t type;
    int      ndim;
    int64_t  ne[LQ_GGUF_MAX_DIMS];
    int64_t  nbytes, offset;
} t_rec;

struct lq_gguf_out {
    uint32_t align;
    kv_rec  *kv;
    int64_t  nkv, kv_cap;
    t_rec   *t;
    int64_t  nt, t_cap;
    int64_t  data_bytes;  /* padded */
    int64_t  cur, cur_in; /* tensor being written, its bytes so far */
    int64_t  header_bytes;
};

static const int k_vsize[LQ_GGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

static int64_t pad_to(int64_t n, int64_t a) {
    return (n + a - 1) / a * a;
}

lq_status lq_gguf_out_create(uint32_t alignment, lq_gguf_out **out, lq_err *err) {
    *out = NULL;
    if (alignment == 0 || (alignment & (alignment - 1)) || alignment > (1u << 20))
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "GGUF alignment %u is not a power of two <= 1 MiB",
                alignment);
    lq_gguf_out *o = calloc(1, sizeof *o);
    if (!o)
        LQ_FAIL(err, LQ_ERR_NOMEM, "GGUF writer: out of memory");
    o->align = alignment;
    *out     = o;
    return LQ_OK;
}

void lq_gguf_out_free(lq_gguf_out *o) {
    if (!o)
        return;
    for (int64_t i = 0; i < o->nkv; i++)
        free(o->kv[i].key), free(o->kv[i].bytes);
    for (int64_t i = 0; i < o->nt; i++)
        free(o->t[i].name);
    free(o->kv), free(o->t), free(o);
}

void lq_gguf_out_remove(lq_gguf_out *o, const char *key) {
    for (int64_t i = 0; i < o->nkv; i++)
        if (!strcmp(o->kv[i].key, key)) {
            free(o->kv[i].key), free(o->kv[i].bytes);
            memmove(&o->kv[i], &o->kv[i + 1], (size_t)(o->nkv - i - 1) * sizeof *o->kv);
            o->nkv--;
            return;
        }
}

/* Append a record: key, then the raw type-and-value bytes (vlen of them). */
static lq_status add_kv(lq_gguf_out *o, const char *key, const void *tv, size_t vlen, lq_err *err) {
    lq_gguf_out_remove(o, key);
    const size_t klen = strlen(key);
    if (o->nkv == o->kv_cap) {
        int64_t cap = o->kv_cap ? 2 * o->kv_cap : 64;
        kv_rec *p   = realloc(o->kv, (size_t)cap * sizeof *p);
        if (!p)
            LQ_FAIL(err, LQ_ERR_NOMEM, "GGUF writer: out of memory");
        o->kv = p, o->kv_cap = cap;
    }
    kv_rec r = {strdup(key), malloc(8 + klen + vlen), 8 + klen + vlen};
    if (!r.key || !r.bytes) {
        free(r.key), free(r.bytes);
        LQ_FAIL(err, LQ_ERR_NOMEM, "GGUF writer: out of memory");
    }
    const uint64_t kl = klen;
    memcpy(r.bytes, &kl, 8);
    memcpy(r.bytes + 8, key, klen);
    memcpy(r.bytes + 8 + klen, tv, vlen);
    o->kv[o->nkv++] = r;
    return LQ_OK;
}

/* Bytes of n values of scalar or string type vt starting at p (strings: u64 length + bytes;
 * the reader has bounds-checked them). */
static size_t values_bytes(int vt, const uint8_t *p, int64_t n) {
    if (vt != LQ_GGUF_STRING)
        return (size_t)n * (size_t)k_vsize[vt];
    size_t off = 0;
    for (int64_t i = 0; i < n; i++) {
        uint64_t l;
        memcpy(&l, p + off, 8);
        off += 8 + (size_t)l;
    }
    return off;
}

lq_status lq_gguf_out_copy_kv(lq_gguf_out *o, const lq_gguf *g, const lq_gguf_kv *kv, lq_err *err) {
    (void)g;
    if (kv->type < 0 || kv->type >= LQ_GGUF_VTYPE_COUNT)
        LQ_FAIL(err, LQ_ERR_INTERNAL, "GGUF writer: key %s has type %d", kv->key, kv->type);
    size_t         hdr = kv->type == LQ_GGUF_ARRAY ? 16 : 4; /* type (+ element type, count) */
    const size_t   vb  = kv->type == LQ_GGUF_ARRAY ? values_bytes(kv->atype, kv->val, kv->n)
                                                   : values_bytes(kv->type, kv->val, 1);
    uint8_t       *tv  = malloc(hdr + vb);
    if (!tv)
        LQ_FAIL(err, LQ_ERR_NOMEM, "GGUF writer: out of memory");
    const uint32_t t = (uint32_t)kv->type;
    memcpy(tv, &t, 4);
    if (kv->type == LQ_GGUF_ARRAY) {
        const uint32_t at = (uint32_t)kv->atype;
        const uint64_t n  = (uint64_t)kv->n;
        memcpy(tv + 4, &at, 4);
        memcpy(tv + 8, &n, 8);
    }
    memcpy(tv + hdr, kv->val, vb);
    lq_status st = add_kv(o, kv->key, tv, hdr + vb, err);
    free(tv);
    return st;
}

lq_status lq_gguf_out_set_u32(lq_gguf_out *o, const char *key, uint32_t v, lq_err *err) {
    uint8_t        tv[8];
    const uint32_t t = LQ_GGUF_U32;
    memcpy(tv, &t, 4);
    memcpy(tv + 4, &v, 4);
    return add_kv(o, key, tv, 8, err);
}

lq_status lq_gguf_out_add_tensor(lq_gguf_out *o, const char *name, uint32_t ggml_type, int ndim,
                                 const int64_t *ne, lq_err *err) {
    int bb, be = lq_ggml_type_block(ggml_type, &bb);
    if (be <= 0)
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "GGUF writer: %s: unknown GGML type %u", name, ggml_type);
    if (ndim < 1 || ndim > LQ_GGUF_MAX_DIMS || ne[0] % be)
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "GGUF writer: %s: %d dims, row %lld not a whole number of "
                "%s blocks", name, ndim, (long long)ne[0], lq_ggml_type_name(ggml_type));
    t_rec r = {.name = strdup(name), .type = ggml_type, .ndim = 1};
    if (!r.name)
        LQ_FAIL(err, LQ_ERR_NOMEM, "GGUF writer: out of memory");
    int64_t rows = 1, nb;
    for (int d = 0; d < LQ_GGUF_MAX_DIMS; d++) {
        r.ne[d] = d < ndim ? ne[d] : 1;
        if (r.ne[d] < 1 || (d > 0 && !lq_mul_i64(rows, r.ne[d], &rows))) {
            free(r.name);
            LQ_FAIL(err, LQ_ERR_INVALID_ARG, "GGUF writer: %s: bad shape", name);
        }
        if (r.ne[d] > 1)
            r.ndim = d + 1; /* ggml_n_dims */
    }
    if (!lq_mul_i64(r.ne[0] / be, bb, &nb) || !lq_mul_i64(nb, rows, &r.nbytes) ||
        !lq_add_i64(o->data_bytes, pad_to(r.nbytes, o->align), &o->data_bytes)) {
        free(r.name);
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "GGUF writer: %s: size overflows", name);
    }
    r.offset = o->data_bytes - pad_to(r.nbytes, o->align);
    if (o->nt == o->t_cap) {
        int64_t cap = o->t_cap ? 2 * o->t_cap : 256;
        t_rec  *p   = realloc(o->t, (size_t)cap * sizeof *p);
        if (!p) {
            free(r.name);
            LQ_FAIL(err, LQ_ERR_NOMEM, "GGUF writer: out of memory");
        }
        o->t = p, o->t_cap = cap;
    }
    o->t[o->nt++] = r;
    return LQ_OK;
}

int64_t lq_gguf_out_tensor_bytes(const lq_gguf_out *o, int64_t i) {
    return i >= 0 && i < o->nt ? o->t[i].nbytes : -1;
}

int64_t lq_gguf_out_file_bytes(const lq_gguf_out *o) {
    return o->header_bytes + o->data_bytes;
}

static lq_status put(FILE *f, const void *p, size_t n, const char *label, lq_err *err) {
    if (n && fwrite(p, 1, n, f) != n) {
        const int e = errno;
        LQ_FAIL(err, lq_status_from_errno(e), "%s: write failed: %s", label, strerror(e));
    }
    return LQ_OK;
}

static lq_status zeros(FILE *f, int64_t n, const char *label, lq_err *err) {
    static const uint8_t z[256];
    for (; n > 0; n -= 256)
        LQ_TRY(put(f, z, (size_t)(n < 256 ? n : 256), label, err));
    return LQ_OK;
}

lq_status lq_gguf_out_write_header(lq_gguf_out *o, FILE *f, const char *label, lq_err *err) {
    const uint32_t ver = 3;
    const uint64_t nt = (uint64_t)o->nt, nkv = (uint64_t)o->nkv;
    int64_t        w = 0;
    LQ_TRY(put(f, "GGUF", 4, label, err));
    LQ_TRY(put(f, &ver, 4, label, err));
    LQ_TRY(put(f, &nt, 8, label, err));
    LQ_TRY(put(f, &nkv, 8, label, err));
    w += 24;
    for (int64_t i = 0; i < o->nkv; i++) {
        LQ_TRY(put(f, o->kv[i].bytes, o->kv[i].len, label, err));
        w += (int64_t)o->kv[i].len;
    }
    for (int64_t i = 0; i < o->nt; i++) {
        const t_rec   *r  = &o->t[i];
        const uint64_t nl = strlen(r->name), off = (uint64_t)r->offset;
        const uint32_t nd = (uint32_t)r->ndim;
        LQ_TRY(put(f, &nl, 8, label, err));
        LQ_TRY(put(f, r->name, nl, label, err));
        LQ_TRY(put(f, &nd, 4, label, err));
        LQ_TRY(put(f, r->ne, 8 * (size_t)r->ndim, label, err));
        LQ_TRY(put(f, &r->type, 4, label, err));
        LQ_TRY(put(f, &off, 8, label, err));
        w += 8 + (int64_t)nl + 4 + 8 * r->ndim + 4 + 8;
    }
    LQ_TRY(zeros(f, pad_to(w, o->align) - w, label, err));
    o->header_bytes = pad_to(w, o->align);
    o->cur = o->cur_in = 0;
    return LQ_OK;
}

lq_status lq_gguf_out_write_data(lq_gguf_out *o, FILE *f, const void *data, int64_t len,
                                 const char *label, lq_err *err) {
    if (o->cur >= o->nt || len < 0 || o->cur_in + len > o->t[o->cur].nbytes)
        LQ_FAIL(err, LQ_ERR_INTERNAL, "%s: GGUF writer: more data than tensor %lld holds", label,
                (long long)o->cur);
    LQ_TRY(put(f, data, (size_t)len, label, err));
    o->cur_in += len;
    const t_rec *r = &o->t[o->cur];
    if (o->cur_in == r->nbytes) {
        LQ_TRY(zeros(f, pad_to(r->nbytes, o->align) - r->nbytes, label, err));
        o->cur++;
        o->cur_in = 0;
    }
    return LQ_OK;
}
