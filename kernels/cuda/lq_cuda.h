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

/* The one device layer: the conversion pipeline (quant/gpu) works on an lq_cuda_ctx too and
 * borrows its cuBLAS handle. Each side states its math mode at every use, since the handle is
 * shared: the kernels' fp16 products reduce in fp32 (LQ_CUDA_MATH_KERNELS), the pipeline's fp32
 * products stay fp32 without TF32 (LQ_CUDA_MATH_FP32, so GPU and CPU conversions agree).
 * Returns the cublasHandle_t bound to `stream` (its workspace reset to cuBLAS's own pool), or
 * NULL when cuBLAS refused a setting. */
enum { LQ_CUDA_MATH_KERNELS = 0, LQ_CUDA_MATH_FP32 = 1 };
void *lq_cuda_ctx_blas(lq_cuda_ctx *ctx, void *stream, int math);
int   lq_cuda_ctx_device(const lq_cuda_ctx *ctx);

/* Activations between the float32 model and the fp16 kernels: y[i] = (fp16)x[i] (round to
 * nearest even, out of range -> inf as the cast does) and back, on `stream`. */
lq_status lq_cuda_f32_to_f16(const float *x, void *y, int64_t count, void *stream);
lq_status lq_cuda_f16_to_f32(const void *x, float *y, int64_t count, void *stream);

#ifdef __cplusplus
}
#endif
#endif
