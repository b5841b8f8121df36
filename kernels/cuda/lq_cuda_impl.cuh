/* lq_cuda_impl.cuh -- internal to the .cu files of kernels/cuda: the context, launch-error mapping and the
 * per-format decode helpers every kernel shares (device twins of lq_kernels_impl.h, which is C
 * only). Arithmetic that the references do as separate float roundings is spelled with
 * __fmul_rn/__fadd_rn so nvcc cannot contract it into an FMA. */
#ifndef LQ_CUDA_IMPL_CUH
#define LQ_CUDA_IMPL_CUH

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdint.h>
#include <stdio.h>

extern "C" {
#include "lq_base.h"
}
#include "lq_cuda.h"

struct lq_cuda_ctx {
    int            device;
    cublasHandle_t blas;
    char           err[192]; /* cause of the last LQ_ERR_CUDA of a call with this ctx */
    /* the pipeline's side (lq_cuda_dev.cu): its stream, cuSOLVER (made on first use) and the
     * device memory it holds, so a job can report its peak */
    cudaStream_t stream;
    void        *solver; /* cusolverDnHandle_t */
    void        *solver_ws;
    size_t       solver_ws_bytes;
    int         *dinfo;
    int64_t      cur_bytes, peak_bytes;
};

/* The one cuBLAS handle is shared by the kernels and the pipeline's primitives (lq_cuda_dev.cu),
 * so each states its math mode at every use: the kernels' fp16 products reduce in fp32
 * (LQ_CUDA_MATH_KERNELS), the pipeline's fp32 products stay fp32 without TF32 (LQ_CUDA_MATH_FP32,
 * so GPU and CPU conversions agree). Returns the handle bound to `stream` (its workspace reset to
 * cuBLAS's own pool), or NULL when cuBLAS refused a setting. */
enum { LQ_CUDA_MATH_KERNELS = 0, LQ_CUDA_MATH_FP32 = 1 };
cublasHandle_t lq_cuda_ctx_blas(lq_cuda_ctx *ctx, void *stream, int math);
/* lq_cuda_ctx_free's part for the pipeline's resources */
void lq_cuda_dev_release(lq_cuda_ctx *ctx);

/* cuBLAS workspace of one call: part of the caller's workspace (lq_qlinear_workspace_cuda), not
 * of the ctx, so calls on different streams never share it. cuBLAS asks for 32 MiB on Hopper. */
#define LQ_CUBLAS_WS_BYTES ((size_t)32 << 20)

/* Batches up to this many rows take the fused GEMV kernels; larger ones dequantize into the
 * workspace and call cuBLAS (INT8: the fused kernel in chunks of this many rows). */
#define LQ_CUDA_GEMV_MAX_M 16

/* Launch status: a pending launch error (bad configuration, no device) becomes LQ_ERR_CUDA. */
static inline lq_status lq_cuda_launched(void) {
    return cudaGetLastError() == cudaSuccess ? LQ_OK : LQ_ERR_CUDA;
}

static inline size_t lq_align256(size_t b) {
    return (b + 255) & ~(size_t)255;
}

/* INT8 workspace sub-buffers (also used for m > LQ_CUDA_GEMV_MAX_M). */
typedef struct lq_int8_ws {
    uint8_t *flags;  /* [k] 0 int8 path, 1 stored fp16 column, 2 runtime outlier column */
    float   *rowmax; /* [m] */
    int8_t  *qx;     /* [m, kpad] quantized activations */
    int64_t  kpad;
} lq_int8_ws;

static inline int64_t lq_int8_kpad(int64_t k) {
    return (k + 15) & ~(int64_t)15;
}

static inline size_t lq_int8_ws_bytes(int64_t k, int64_t m) {
    return lq_align256((size_t)k) + lq_align256((size_t)m * 4) +
           lq_align256((size_t)(m * lq_int8_kpad(k)));
}

/* ------------------------------------------------------------------------------------------
 * Device decode helpers (the semantics of kernels/ref/).
 * ------------------------------------------------------------------------------------------ */
/* b-bit field j of an LSB-first stream of 32-bit words (stride between words of the stream). */
__device__ __forceinline__ uint32_t lq_d_stream_get(const int32_t *words, int64_t stride, int64_t j,
                                                    int bits) {
    const int64_t  pos  = j * bits;
    const int64_t  wi   = pos >> 5;
    const int      sh   = (int)(pos & 31);
    const uint32_t mask = (1u << bits) - 1u;
    uint32_t       v    = (uint32_t)__ldg(words + wi * stride) >> sh;
    if (sh + bits > 32)
        v |= (uint32_t)__ldg(words + (wi + 1) * stride) << (32 - sh);
    return v & mask;
}

/* GPTQ v1 zero point: stored zero - 1, read back + 1 and masked (see lq_gptq_zero). */
__device__ __forceinline__ int32_t lq_d_gptq_zero(const lq_qlinear &w, int64_t g, int64_t col) {
    const int64_t  zw = w.n * w.bits / 32;
    const uint32_t f  = lq_d_stream_get((const int32_t *)w.qzeros + g * zw, 1, col, w.bits);
    return (int32_t)((f + 1u) & ((1u << w.bits) - 1u));
}

/* AWQ: field of column (col & 7) in its word, order [0,2,4,6,1,3,5,7] inverted. */
__device__ __forceinline__ int lq_d_awq_shift(int col_in_word) {
    /* inv = {0,4,1,5,2,6,3,7}: even columns in fields 0..3, odd ones in 4..7 */
    return 4 * ((col_in_word >> 1) + 4 * (col_in_word & 1));
}

__device__ __forceinline__ float lq_d_f16(const void *p, int64_t i) {
    return __half2float(((const __half *)p)[i]);
}

/* NF4 absmax of a block, double quant expanded with two float roundings like bitsandbytes. */
__device__ __forceinline__ float lq_d_nf4_absmax(const lq_qlinear &w, int64_t b) {
    if (w.nested_blocksize <= 0)
        return __ldg((const float *)w.absmax + b);
    const uint8_t qa = __ldg((const uint8_t *)w.absmax + b);
    const float   a  = __fmul_rn(__ldg(w.nested_code + qa),
                                 __ldg(w.nested_absmax + b / w.nested_blocksize));
    return __fadd_rn(a, w.nested_offset);
}

#define LQ_INT8_MM_DEQUANT_D  6.200124e-05f
#define LQ_INT8_VEC_DEQUANT_D 7.874015718698502e-3f

#endif
