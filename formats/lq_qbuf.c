/* The owning container of a host lq_qlinear, and the allocation of a layout's arrays. */
#define _DEFAULT_SOURCE /* madvise */
#include "lq_qformat.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Arrays of 2 MiB and more start on a 2 MiB boundary and ask for transparent huge pages over
 * the whole 2 MiB pages they cover (not the tail, which would round the resident size up):
 * the kernels stream weights once per product, and with 4 KiB pages a matrix past the TLB's
 * reach misses the TLB every 4 KiB (one row of NF4 4096 x 11008 on 1 thread, Zen 4:
 * 1.6-1.9 -> 1.4 ms). Advice only: where the kernel declines, nothing changes.
 * They are mapped here rather than taken from malloc: once a program has freed a large block,
 * glibc raises its mmap threshold and serves the next ones from the heap, from pages already
 * there on 4 KiB frames, which the advice does not change (bench_kernels_cpu, whose set-up frees
 * an n x k array of codes before each format, held an advised 8 MiB heap region on 4 KiB
 * pages in 28 of 32 samples through one run). Under AddressSanitizer they stay malloc's, whose
 * bounds it checks. */
#define LQ_HUGE ((size_t)2 << 20)
#if defined(__SANITIZE_ADDRESS__)
#define LQ_QBUF_MAP 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LQ_QBUF_MAP 0
#endif
#endif
#ifndef LQ_QBUF_MAP
#define LQ_QBUF_MAP 1
#endif

/* bytes >= LQ_HUGE in a mapping of their own from a 2 MiB boundary; *len: what to munmap */
static void *qbuf_map(size_t bytes, size_t *len) {
    const size_t l = (bytes + 4095) & ~(size_t)4095;
    if (l < bytes || l + LQ_HUGE < l)
        return NULL;
    char *m = mmap(NULL, l + LQ_HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    /* keep the 2 MiB-aligned l bytes inside, give back what is around them */
    char *p = (char *)(((uintptr_t)m + LQ_HUGE - 1) & ~(uintptr_t)(LQ_HUGE - 1));
    if (p > m)
        (void)munmap(m, (size_t)(p - m));
    if (m + l + LQ_HUGE > p + l)
        (void)munmap(p + l, (size_t)(m + l + LQ_HUGE - (p + l)));
    *len = l;
    return p;
}

/* bytes zeroed, 64-byte aligned (2 MiB from LQ_HUGE); *mapped: the length to munmap, or 0 */
static void *qbuf_mem(size_t bytes, size_t *mapped) {
    void *p = NULL;
    *mapped = 0;
    if (bytes < LQ_HUGE)
        p = lq_aligned_alloc(bytes);
    else if (LQ_QBUF_MAP)
        p = qbuf_map(bytes, mapped);
    else if (posix_memalign(&p, LQ_HUGE, bytes) != 0)
        p = NULL;
    if (!p)
        return NULL;
#ifdef MADV_HUGEPAGE
    if (bytes >= LQ_HUGE)
        (void)madvise(p, bytes & ~(LQ_HUGE - 1), MADV_HUGEPAGE);
#endif
    if (!*mapped) /* anonymous mappings read as zero */
        memset(p, 0, bytes);
    return p;
}

void *lq_qbuf_alloc(lq_qbuf *b, size_t bytes) {
    if (b->nmem >= LQ_QBUF_MAX_ARRAYS || bytes == 0)
        return NULL;
    size_t mapped;
    void  *p = qbuf_mem(bytes, &mapped);
    if (!p)
        return NULL;
    b->mapped[b->nmem] = mapped;
    b->mem[b->nmem++]  = p;
    return p;
}

void lq_qbuf_free(lq_qbuf *b) {
    if (!b)
        return;
    for (int i = 0; i < b->nmem; i++) {
        if (b->mapped[i])
            (void)munmap(b->mem[i], b->mapped[i]);
        else
            lq_aligned_free(b->mem[i]);
    }
    memset(b, 0, sizeof *b);
}

void *lq_qbuf_mut(lq_qbuf *b, const void *p) {
    for (int i = 0; p && i < b->nmem; i++)
        if (b->mem[i] == p)
            return b->mem[i];
    return NULL;
}

static void set_field(lq_qlinear *w, size_t field, const void *p) {
    memcpy((char *)w + field, &p, sizeof p);
}

lq_status lq_qbuf_alloc_layout(lq_qbuf *b, lq_err *err) {
    const lq_qformat *f = lq_qformat_get((lq_format)b->q.format);
    LQ_RETURN_IF(!f, err, LQ_ERR_INVALID_ARG, "lq_qbuf_alloc_layout: unknown format %d",
                 (int)b->q.format);
    /* The rules ask for every array: check the dims with stand-ins, then size the real ones. */
    static const int64_t stand_in[2] = {0, 0};
    lq_qlinear           probe       = b->q;
    probe.qweight = probe.qzeros = probe.scales = probe.absmax = probe.dense = stand_in;
    probe.g_idx = probe.outlier_idx = (const int32_t *)stand_in;
    probe.quant_map = probe.nested_absmax = probe.nested_code = probe.scb = (const float *)stand_in;
    probe.outlier_w = (const uint16_t *)stand_in;
    lq_status st    = f->check(&probe, err);
    if (st != LQ_OK) {
        lq_qbuf_free(b);
        return st;
    }
    lq_qarray a[LQ_QARRAY_MAX];
    const int na = f->arrays(&b->q, a);
    for (int i = 0; i < na; i++) {
        if (a[i].constant)
            continue;
        const size_t bytes = (size_t)lq_qarray_numel(&a[i]) * (size_t)lq_dtype_size(a[i].dtype);
        void        *p     = lq_qbuf_alloc(b, bytes);
        if (!p) {
            lq_qbuf_free(b);
            LQ_FAIL(err, LQ_ERR_NOMEM, "%s linear [%lld x %lld]: cannot allocate %s (%zu bytes)",
                    f->name, (long long)b->q.n, (long long)b->q.k, a[i].suffix, bytes);
        }
        set_field(&b->q, a[i].field, p);
    }
    return LQ_OK;
}
