#include "lq_qformat.h"

#include <stdlib.h>
#include <string.h>

void *lq_qbuf_alloc(lq_qbuf *b, size_t bytes) {
    if (b->nmem >= LQ_QBUF_MAX_ARRAYS || bytes == 0)
        return NULL;
    void *p = lq_aligned_alloc(bytes);
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
