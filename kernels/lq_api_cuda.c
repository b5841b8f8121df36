/* Public CUDA entry points of llmquant.h: validate on the host, then dispatch through the
 * format table. In a build without CUDA the table's CUDA entries are the stubs of
 * kernels/cuda/lq_cuda_stub.c, so every call ends in LQ_ERR_NO_CUDA_BUILD. */
#include "lq_kernels_impl.h"
#include "cuda/lq_cuda.h"

#include <stdint.h>

static const lq_format_traits *cuda_traits(const lq_qlinear *w) {
    if (lq_qlinear_check(w, NULL) != LQ_OK)
        return NULL;
    return lq_format_traits_get((lq_format)w->format);
}

LQ_API size_t lq_qlinear_workspace_cuda(const lq_qlinear *w, int64_t m) {
    const lq_format_traits *t = cuda_traits(w);
    if (m <= 0 || !t)
        return 0;
    return t->ws_cuda(w, m);
}

/* The kernels load 16 bytes at a time: a misaligned view (a torch slice, say) would fault on the
 * device and take the CUDA context with it, so it is refused here. */
static int misaligned(const void *p) {
    return ((uintptr_t)p & 15u) != 0;
}

/* [a, a + na) and [b, b + nb) share a byte (the kernels take x, y, ws as __restrict__) */
static int overlap(const void *a, size_t na, const void *b, size_t nb) {
    const uintptr_t pa = (uintptr_t)a, pb = (uintptr_t)b;
    return na > 0 && nb > 0 && pa < pb + nb && pb < pa + na;
}

LQ_API lq_status lq_qlinear_forward_cuda(lq_cuda_ctx *ctx, const lq_qlinear *w, const void *x,
                                         int64_t m, void *y, void *ws, size_t ws_size,
                                         void *stream) {
    const lq_format_traits *t = cuda_traits(w);
    if (!t)
        return LQ_ERR_INVALID_ARG;
    if (m <= 0 || !x || !y)
        return m == 0 ? LQ_OK : LQ_ERR_INVALID_ARG;
    if (ws_size < t->ws_cuda(w, m) || (!ws && ws_size > 0))
        return LQ_ERR_INVALID_ARG;
    int64_t xb, yb;
    if (!lq_mul_i64(m, w->k, &xb) || !lq_mul_i64(xb, 2, &xb) || !lq_mul_i64(m, w->n, &yb) ||
        !lq_mul_i64(yb, 2, &yb))
        return LQ_ERR_INVALID_ARG;
    if (misaligned(x) || misaligned(y) || (ws_size > 0 && misaligned(ws)) ||
        overlap(x, (size_t)xb, y, (size_t)yb) || overlap(ws, ws_size, x, (size_t)xb) ||
        overlap(ws, ws_size, y, (size_t)yb))
        return LQ_ERR_INVALID_ARG;
    const lq_status st = lq_cuda_call_begin(ctx);
    if (st != LQ_OK)
        return st;
    return lq_cuda_call_end(ctx, t->gemm_cuda(ctx, w, x, m, y, ws, ws_size, stream));
}

LQ_API lq_status lq_qlinear_dequant_cuda(const lq_qlinear *w, void *out, void *stream) {
    const lq_format_traits *t = cuda_traits(w);
    if (!t || !out || misaligned(out))
        return LQ_ERR_INVALID_ARG;
    return lq_cuda_call_end(NULL, t->dequant_cuda(w, out, stream));
}
