/* lq_test_guard.h -- a "guard" backend of the op table for tests: the cpu backend's ops, but
 * every buffer it hands out is an mmap'd region kept PROT_NONE except while one of its ops runs,
 * and it calls itself a device. Code that reads or writes backend memory anywhere but through
 * the ops faults here, on the CPU, instead of on a GPU that a session may not have; whatever
 * does go through the ops gets the cpu backend's bits. Dense linears only (what a conversion's
 * forwards run). Static functions: include from one test source (defining _DEFAULT_SOURCE before
 * any include, for MAP_ANONYMOUS). */
#ifndef LQ_TEST_GUARD_H
#define LQ_TEST_GUARD_H

#include "lq_ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct galloc {
    void  *p;
    size_t len;
} galloc;

typedef struct guard {
    lq_be   be; /* first: the ops get &guard.be */
    galloc *a;
    int     n, cap, inside;
    long    page;
} guard;

static guard *G(lq_be *be) {
    return (guard *)be;
}

static void protect_all(guard *g, int prot) {
    for (int i = 0; i < g->n; i++)
        if (mprotect(g->a[i].p, g->a[i].len, prot) != 0) {
            perror("mprotect");
            exit(1);
        }
}

static void open_(lq_be *be) {
    guard *g = G(be);
    if (g->inside++ == 0)
        protect_all(g, PROT_READ | PROT_WRITE);
}

static void close_(lq_be *be) {
    guard *g = G(be);
    if (--g->inside == 0)
        protect_all(g, PROT_NONE);
}

static lq_status g_alloc(lq_be *be, void **p, size_t bytes) {
    guard *g = G(be);
    *p       = NULL;
    if (bytes == 0)
        return LQ_OK;
    const size_t len = (bytes + (size_t)g->page - 1) / (size_t)g->page * (size_t)g->page;
    void        *m   = mmap(NULL, len, g->inside ? PROT_READ | PROT_WRITE : PROT_NONE,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return LQ_ERR_NOMEM;
    if (g->n == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 64;
        g->a   = realloc(g->a, (size_t)g->cap * sizeof *g->a);
    }
    g->a[g->n++] = (galloc){m, len};
    *p           = m;
    lq_be_count(be, (int64_t)bytes);
    return LQ_OK;
}

static void g_release(lq_be *be, void *p, size_t bytes) {
    guard *g = G(be);
    if (!p)
        return;
    for (int i = 0; i < g->n; i++)
        if (g->a[i].p == p) {
            munmap(p, g->a[i].len);
            g->a[i] = g->a[--g->n];
            lq_be_count(be, -(int64_t)bytes);
            return;
        }
    fprintf(stderr, "guard: releasing %p, which it never handed out\n", p);
    exit(1);
}

/* Every pointer an op is given must be the guard's: a host pointer handed to an op works on the
 * CPU but is an illegal address on a device. */
static int owns(const guard *g, const void *p) {
    const char *c = p;
    for (int i = 0; i < g->n; i++)
        if (c >= (const char *)g->a[i].p && c < (const char *)g->a[i].p + g->a[i].len)
            return 1;
    return 0;
}

static void check_ptrs(lq_be *be, const char *op, const void *const *ptrs, int n) {
    for (int i = 0; i < n; i++)
        if (ptrs[i] && !owns(G(be), ptrs[i])) {
            fprintf(stderr, "guard: %s was given %p (argument %d), which is not backend memory\n",
                    op, ptrs[i], i);
            exit(3);
        }
}

/* name, parameters, arguments of the cpu op, the backend pointers among them */
#define WRAP(name, params, args, ...)                                                             \
    static lq_status g_##name params {                                                            \
        const void *const ptrs_[] = {__VA_ARGS__};                                                 \
        check_ptrs(be, #name, ptrs_, (int)(sizeof ptrs_ / sizeof ptrs_[0]));                       \
        open_(be);                                                                                 \
        const lq_status st_ = lq_ops_cpu()->name args;                                             \
        close_(be);                                                                                \
        return st_;                                                                                \
    }

WRAP(upload, (lq_be * be, void *dst, const void *src, size_t bytes), (be, dst, src, bytes), dst)
WRAP(download, (lq_be * be, void *dst, const void *src, size_t bytes), (be, dst, src, bytes), src)
WRAP(copy, (lq_be * be, void *dst, const void *src, size_t bytes), (be, dst, src, bytes), dst, src)
WRAP(zero, (lq_be * be, void *dst, size_t bytes), (be, dst, bytes), dst)
WRAP(copy2d,
     (lq_be * be, float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows,
      int64_t cols),
     (be, dst, ldd, src, lds, rows, cols), dst, src)
WRAP(sync, (lq_be * be), (be), NULL)
WRAP(rmsnorm,
     (lq_be * be, const float *x, const float *w, int64_t rows, int64_t d, double eps,
      int plus_one, float *out),
     (be, x, w, rows, d, eps, plus_one, out), x, w, out)
WRAP(rope,
     (lq_be * be, float *x, int64_t T, int64_t ld, int64_t nheads, int64_t half, int64_t seqlen,
      const float *cs, const float *sn),
     (be, x, T, ld, nheads, half, seqlen, cs, sn), x, cs, sn)
WRAP(attention, (lq_be * be, const lq_attn_args *a), (be, a), a->q, a->k, a->v, a->out,
     a->attn_w)
WRAP(glu,
     (lq_be * be, float *g, const float *gate, const float *up, int64_t ld, int64_t T, int64_t ff,
      int act),
     (be, g, gate, up, ld, T, ff, act), g, gate, up)
WRAP(add, (lq_be * be, float *out, const float *a, const float *b, int64_t count),
     (be, out, a, b, count), out, a, b)
WRAP(softcap, (lq_be * be, float *x, int64_t count, float cap), (be, x, count, cap), x)
WRAP(linear,
     (lq_be * be, const lq_qlinear *w, const float *bias, const float *x, int64_t t, float *y),
     (be, w, bias, x, t, y), w->dense, w->bias, bias, x, y)
WRAP(moe_route,
     (lq_be * be, float *p, int64_t T, int64_t E, int64_t K, int norm, int32_t *sel, float *w),
     (be, p, T, E, K, norm, sel, w), p, sel, w)
WRAP(gather_rows,
     (lq_be * be, float *dst, const float *src, const int32_t *idx, int64_t cnt, int64_t d,
      int64_t div),
     (be, dst, src, idx, cnt, d, div), dst, src, cnt ? idx : NULL)
WRAP(scatter_add,
     (lq_be * be, float *out, const float *y, const int32_t *idx, const float *wt, int64_t cnt,
      int64_t d, int64_t div),
     (be, out, y, idx, wt, cnt, d, div), out, y, cnt ? idx : NULL, wt)
WRAP(gate_add, (lq_be * be, float *out, const float *y, const float *g, int64_t T, int64_t d),
     (be, out, y, g, T, d), out, y, g)
WRAP(syrk, (lq_be * be, float *H, const float *x, int64_t t, int64_t k, float alpha, float beta),
     (be, H, x, t, k, alpha, beta), H, x)
WRAP(scale_rows, (lq_be * be, float *dst, const float *x, const float *a, int64_t t, int64_t k),
     (be, dst, x, a, t, k), dst, x, a)
WRAP(col_absmax, (lq_be * be, float *amax, const float *x, int64_t t, int64_t k),
     (be, amax, x, t, k), amax, x)
WRAP(col_abssum, (lq_be * be, float *sum, const float *x, int64_t t, int64_t k),
     (be, sum, x, t, k), sum, x)
WRAP(awq_fakequant,
     (lq_be * be, const float *w, const float *s, int64_t n, int64_t k, int64_t group, int bits,
      float *out),
     (be, w, s, n, k, group, bits, out), w, s, out)
WRAP(awq_clip,
     (lq_be * be, float *w, int64_t n, int64_t k, const float *x, int64_t t, int64_t group,
      int bits),
     (be, w, n, k, x, t, group, bits), w, x)
WRAP(sqdiff, (lq_be * be, const float *a, const float *b, int64_t count, double *out),
     (be, a, b, count, out), a, b)
WRAP(dot, (lq_be * be, const float *a, const float *b, int64_t count, double *out),
     (be, a, b, count, out), a, b)
WRAP(sub, (lq_be * be, float *out, const float *a, const float *b, int64_t count),
     (be, out, a, b, count), out, a, b)
WRAP(gemm,
     (lq_be * be, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *A,
      int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc),
     (be, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc), A, B, C)
WRAP(sym_upper, (lq_be * be, float *H, int64_t k), (be, H, k), H)
WRAP(div_cols, (lq_be * be, float *x, int64_t t, int64_t k, const float *s), (be, x, t, k, s), x,
     s)

/* Dense linears only (what a conversion's forwards run): weights and fp16 bias copied into
 * guarded memory. */
static lq_status g_linear_upload(lq_be *be, const lq_qlinear *w, lq_qlinear *dw, void **mem,
                                 size_t *bytes) {
    *dw = *w, *mem = NULL, *bytes = 0;
    if (w->format != LQ_FMT_DENSE)
        return LQ_ERR_UNSUPPORTED;
    const size_t esz = w->dense_dtype == LQ_DENSE_F32 ? 4 : 2;
    const size_t wb = (size_t)(w->n * w->k) * esz, bb = w->bias ? (size_t)w->n * 2 : 0;
    LQ_TRY(g_alloc(be, mem, wb + bb));
    *bytes = wb + bb;
    open_(be);
    memcpy(*mem, w->dense, wb);
    if (bb)
        memcpy((char *)*mem + wb, w->bias, bb);
    close_(be);
    dw->dense = *mem;
    dw->bias  = bb ? (const uint16_t *)((char *)*mem + wb) : NULL;
    return LQ_OK;
}

static const lq_ops k_guard_ops = {
    .name          = "guard",
    .device        = 1,
    .alloc         = g_alloc,
    .release       = g_release,
    .upload        = g_upload,
    .download      = g_download,
    .copy          = g_copy,
    .zero          = g_zero,
    .copy2d        = g_copy2d,
    .sync          = g_sync,
    .rmsnorm       = g_rmsnorm,
    .rope          = g_rope,
    .attention     = g_attention,
    .glu           = g_glu,
    .add           = g_add,
    .softcap       = g_softcap,
    .linear        = g_linear,
    .linear_upload = g_linear_upload,
    .moe_route     = g_moe_route,
    .gather_rows   = g_gather_rows,
    .scatter_add   = g_scatter_add,
    .gate_add      = g_gate_add,
    .syrk          = g_syrk,
    .scale_rows    = g_scale_rows,
    .col_absmax    = g_col_absmax,
    .col_abssum    = g_col_abssum,
    .awq_fakequant = g_awq_fakequant,
    .awq_clip      = g_awq_clip,
    .sqdiff        = g_sqdiff,
    .dot           = g_dot,
    .sub           = g_sub,
    .gemm          = g_gemm,
    .sym_upper     = g_sym_upper,
    .div_cols      = g_div_cols,
};

static void guard_init(guard *g) {
    memset(g, 0, sizeof *g);
    lq_be_init_host(&g->be, &k_guard_ops, 0);
    g->page = sysconf(_SC_PAGESIZE);
}

/* 1 when everything handed out came back */
static int guard_free(guard *g) {
    lq_be_free(&g->be);
    const int ok = g->be.cur_bytes == 0 && g->n == 0;
    free(g->a);
    g->a = NULL;
    return ok;
}

#endif
