/* Public CUDA entry points of llmquant.h: validate on the host, then dispatch through the
 * format table. In a build without CUDA the table's CUDA entries are the stubs of
 * kernels/cuda/lq_cuda_stub.c, so every call ends in LQ_ERR_NO_CUDA_BUILD. */
#include "lq_kernels_impl.h"

static const lq_format_traits *cuda_traits(const lq_qlinear *w) {
    const lq_format_traits *t = w ? lq_format_traits_get((lq_format)w->format) : NULL;
    if (!t || t->check(w, NULL) != LQ_OK)
        return NULL;
    return t;
}

LQ_API size_t lq_qlinear_workspace_cuda(const lq_qlinear *w, int64_t m) {
    const lq_format_traits *t = cuda_traits(w);
    if (m <= 0 || !t)
        return 0;
    return t->ws_cuda(w, m);
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
    return t->gemm_cuda(ctx, w, x, m, y, ws, ws_size, stream);
}

LQ_API lq_status lq_qlinear_dequant_cuda(const lq_qlinear *w, void *out, void *stream) {
    const lq_format_traits *t = cuda_traits(w);
    if (!t || !out)
        return LQ_ERR_INVALID_ARG;
    return t->dequant_cuda(w, out, stream);
}
