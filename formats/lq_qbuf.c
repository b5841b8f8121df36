/* The owning container of a host lq_qlinear, and the allocation of a layout's arrays. */
#define _DEFAULT_SOURCE /* madvise */
#include "lq_qformat.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Arrays of 2 MiB and more start on a 2 MiB boundary and ask for transparent huge pages over
 * the whole 2 MiB pages they cover (not the tail, which would round the resident size up):
 * the kernels stream weights once per product, and with 4 KiB pages a matrix past the TLB's
 * reach misses the TLB every 4 KiB (one row of NF4 4096 x 11008 on 1 thread, Zen 4:
 * 1.6-1.9 -> 1.4 ms). Advice only: where the kernel declines, nothing changes. */
#define LQ_HUGE ((size_t)2 << 20)

static void *qbuf_mem(size_t bytes) {
    if (bytes < LQ_HUGE)
        return lq_aligned_alloc(bytes);
    void *p = NULL;
    if (posix_memalign(&p, LQ_HUGE, bytes) != 0)
        return NULL;
#ifdef MADV_HUGEPAGE
    (void)madvise(p, bytes & ~(LQ_HUGE - 1), MADV_HUGEPAGE);
#endif
    return p;
}

void *lq_qbuf_alloc(lq_qbuf *b, size_t bytes) {
    if (b->nmem >= LQ_QBUF_MAX_ARRAYS || bytes == 0)
        return NULL;
    void *p = qbuf_mem(bytes);
    if (!p)
        return NULL;
    memset(p, 0, bytes);
    b->mem[b->nmem++] = p;
    return p;
}

void lq_qbuf_free(lq_qbuf *b) {
    if (!b)
        return;
    for (int i = 0; i < b->nmem; i++)
        lq_aligned_free(b->mem[i]);
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
