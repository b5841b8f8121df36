/* lq_cuda.h -- CUDA launchers per format (extern "C"; callable from C). Implemented in
 * kernels/cuda/ (.cu files) when LQ_HAVE_CUDA, else by kernels/cuda/lq_cuda_stub.c which returns
 * LQ_ERR_NO_CUDA_BUILD (and 0 for workspace sizes). Contract: device pointers, fp16
 * activations, caller workspace, stream = cudaStream_t as void*; never allocate, never sync. */
#ifndef LQ_CUDA_H
#define LQ_CUDA_H

#include "lq_base.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LQ_CUDA_FMT_DECL(fmt)                                                                  \
    lq_status lq_dequant_##fmt##_cuda(const lq_qlinear *w, void *out_f16, void *stream);       \
    size_t    lq_ws_##fmt##_cuda(const lq_qlinear *w, int64_t m);                              \
    lq_status lq_gemm_##fmt##_cuda(lq_cuda_ctx *ctx, const lq_qlinear *w, const void *x_f16,   \
                                   int64_t m, void *y_f16, void *ws, size_t ws_size,           \
                                   void *stream);

LQ_CUDA_FMT_DECL(dense)
LQ_CUDA_FMT_DECL(gptq)
LQ_CUDA_FMT_DECL(awq)
LQ_CUDA_FMT_DECL(nf4)
LQ_CUDA_FMT_DECL(int8)

#undef LQ_CUDA_FMT_DECL

/* Around every public call: begin makes ctx's device current (NULL ctx: nothing); end takes a
 * pending runtime error after LQ_ERR_CUDA and keeps its text in ctx (lq_cuda_ctx_error). */
lq_status lq_cuda_call_begin(lq_cuda_ctx *ctx);
lq_status lq_cuda_call_end(lq_cuda_ctx *ctx, lq_status st);

#ifdef __cplusplus
}
#endif
#endif
