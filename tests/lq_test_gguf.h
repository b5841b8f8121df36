/* lq_test_gguf.h -- build GGUF files in memory for tests and fuzz seeds (version 3, little
 * endian, ggml/docs/gguf.md). Key/values are appended as raw records; tensors are described with
 * their data and laid out at finish with the chosen alignment. Tests then corrupt bytes or
 * fields of the result to exercise each validation rule. */
#ifndef LQ_TEST_GGUF_H
#define LQ_TEST_GGUF_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct tg_buf {
    uint8_t *p;
    size_t   n, cap;
} tg_buf;

static void tg_put(tg_buf *b, const void *d, size_t n) {
    if (n == 0)
        return; /* an empty kv section has no buffer; memcpy(NULL) is UB */
    if (b->n + n > b->cap) {
        size_t c = b->cap ? b->cap : 1024;
        while (c < b->n + n)
            c *= 2;
        b->p   = realloc(b->p, c);
        b->cap = c;
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void tg_u32(tg_buf *b, uint32_t v) {
    tg_put(b, &v, 4);
}
static void tg_u64(tg_buf *b, uint64_t v) {
    tg_put(b, &v, 8);
}
static void tg_str(tg_buf *b, const char *s) {
    tg_u64(b, strlen(s));
    tg_put(b, s, strlen(s));
}

#define TG_MAX_T 512
typedef struct tg_gguf {
    tg_buf   kv;
    uint64_t nkv;
    struct {
        char           name[128];
        uint32_t       type, ndim;
        uint64_t       ne[8]; /* room for the invalid 5-dimensional case */
        const uint8_t *data;
        size_t         nbytes;
    } t[TG_MAX_T];
    int      nt;
    uint32_t align;
} tg_gguf;

static void tg_kv_u32(tg_gguf *g, const char *k, uint32_t v) {
    tg_str(&g->kv, k), tg_u32(&g->kv, 4), tg_u32(&g->kv, v), g->nkv++;
}
static void tg_kv_i32(tg_gguf *g, const char *k, int32_t v) {
    tg_str(&g->kv, k), tg_u32(&g->kv, 5), tg_put(&g->kv, &v, 4), g->nkv++;
}
static void tg_kv_f32(tg_gguf *g, const char *k, float v) {
    tg_str(&g->kv, k), tg_u32(&g->kv, 6), tg_put(&g->kv, &v, 4), g->nkv++;
}
static void tg_kv_bool(tg_gguf *g, const char *k, int v) {
    uint8_t b = (uint8_t)(v != 0);
    tg_str(&g->kv, k), tg_u32(&g->kv, 7), tg_put(&g->kv, &b, 1), g->nkv++;
}
static void tg_kv_str(tg_gguf *g, const char *k, const char *v) {
    tg_str(&g->kv, k), tg_u32(&g->kv, 8), tg_str(&g->kv, v), g->nkv++;
}
/* n strings of given lengths (may contain any byte). */
static void tg_kv_strs(tg_gguf *g, const char *k, const char *const *v, const int64_t *len,
                       uint64_t n) {
    tg_str(&g->kv, k), tg_u32(&g->kv, 9), tg_u32(&g->kv, 8), tg_u64(&g->kv, n);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t l = len ? (uint64_t)len[i] : strlen(v[i]);
        tg_u64(&g->kv, l);
        tg_put(&g->kv, v[i], l);
    }
    g->nkv++;
}
/* numeric array of element type `ty` (size `es`). */
static void tg_kv_arr(tg_gguf *g, const char *k, uint32_t ty, const void *v, size_t es,
                      uint64_t n) {
    tg_str(&g->kv, k), tg_u32(&g->kv, 9), tg_u32(&g->kv, ty), tg_u64(&g->kv, n);
    tg_put(&g->kv, v, es * n);
    g->nkv++;
}
/* ne fastest first (ne[0] = row length), data of nbytes (borrowed until tg_finish). */
static void tg_tensor(tg_gguf *g, const char *name, uint32_t type, uint32_t ndim,
                      const uint64_t *ne, const void *data, size_t nbytes) {
    if (g->nt >= TG_MAX_T)
        return;
    strncpy(g->t[g->nt].name, name, sizeof g->t[0].name - 1);
    g->t[g->nt].type = type;
    g->t[g->nt].ndim = ndim;
    for (uint32_t d = 0; d < ndim && d < 8; d++)
        g->t[g->nt].ne[d] = ne[d];
    g->t[g->nt].data   = data;
    g->t[g->nt].nbytes = nbytes;
    g->nt++;
}

/* The file: header, key/values, tensor infos, padding, data. Caller frees *out. */
static size_t tg_finish(tg_gguf *g, uint8_t **out) {
    tg_buf   b     = {0};
    uint64_t align = g->align ? g->align : 32, off = 0;
    uint64_t offs[TG_MAX_T];
    for (int i = 0; i < g->nt; i++) {
        offs[i] = off;
        off += (g->t[i].nbytes + align - 1) / align * align;
    }
    tg_u32(&b, 0x46554747u);
    tg_u32(&b, 3);
    tg_u64(&b, (uint64_t)g->nt);
    tg_u64(&b, g->nkv);
    tg_put(&b, g->kv.p, g->kv.n);
    for (int i = 0; i < g->nt; i++) {
        tg_str(&b, g->t[i].name);
        tg_u32(&b, g->t[i].ndim);
        for (uint32_t d = 0; d < g->t[i].ndim; d++)
            tg_u64(&b, g->t[i].ne[d]);
        tg_u32(&b, g->t[i].type);
        tg_u64(&b, offs[i]);
    }
    static const uint8_t zero[256] = {0};
    while (b.n % align)
        tg_put(&b, zero, 1);
    for (int i = 0; i < g->nt; i++) {
        tg_put(&b, g->t[i].data, g->t[i].nbytes);
        while ((b.n % align) && i + 1 < g->nt)
            tg_put(&b, zero, 1);
    }
    free(g->kv.p);
    memset(&g->kv, 0, sizeof g->kv);
    *out = b.p;
    return b.n;
}

#endif
