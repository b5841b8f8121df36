/* The backend instance of the op table (lq_ops.h): initialization, the scratch its ops share
 * and the memory it counts. Backend-independent: every allocation goes through the table. */
#include "lq_ops.h"

#include "cuda/lq_cuda.h"

#include <stdio.h>
#include <string.h>

void lq_be_init_host(lq_be *be, const lq_ops *ops, int nthreads) {
    memset(be, 0, sizeof *be);
    be->ops      = ops;
    be->nthreads = nthreads;
}

lq_status lq_be_init_cuda(lq_be *be, lq_cuda_ctx *ctx, int precision, lq_err *err) {
    memset(be, 0, sizeof *be);
    const lq_ops *ops = lq_ops_cuda();
    if (!ops)
        LQ_FAIL(err, LQ_ERR_NO_CUDA_BUILD, "llmquant was built without CUDA");
    LQ_RETURN_IF(!ctx, err, LQ_ERR_INVALID_ARG, "cuda backend: no device context");
    be->ops       = ops;
    be->cuda      = ctx;
    be->precision = precision;
    be->stream    = lq_cuda_ctx_stream(ctx);
    LQ_RETURN_IF(!be->stream, err, LQ_ERR_CUDA, "cuda backend: %s", lq_cuda_ctx_error(ctx));
    return LQ_OK;
}

void lq_be_free(lq_be *be) {
    if (!be || !be->ops)
        return;
    if (be->scratch)
        be->ops->release(be, be->scratch, be->scratch_cap);
    be->scratch     = NULL;
    be->scratch_cap = 0;
}

lq_status lq_be_scratch(lq_be *be, size_t bytes, void **p) {
    if (bytes > be->scratch_cap) {
        if (be->scratch)
            be->ops->release(be, be->scratch, be->scratch_cap);
        be->scratch     = NULL;
        be->scratch_cap = 0;
        /* a quarter more than asked: growing by a few rows at a time would reallocate often */
        const size_t want = bytes + bytes / 4;
        LQ_TRY(be->ops->alloc(be, &be->scratch, want));
        be->scratch_cap = want;
    }
    *p = be->scratch;
    return LQ_OK;
}

void lq_be_count(lq_be *be, int64_t delta) {
    be->cur_bytes += delta;
    if (be->cur_bytes > be->peak_bytes)
        be->peak_bytes = be->cur_bytes;
}

const char *lq_be_error(const lq_be *be) {
    return be->errmsg[0] ? be->errmsg : "no detail";
}
