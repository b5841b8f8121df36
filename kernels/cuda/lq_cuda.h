/* lq_cuda.h -- the library's one CUDA device layer (extern "C"; callable from C): the launchers
 * per format and the conversion pipeline's device primitives, all on an lq_cuda_ctx.
 * Implemented in kernels/cuda/ (.cu files) when LQ_HAVE_CUDA, else by kernels/cuda/lq_cuda_stub.c
 * (the one stub: LQ_ERR_NO_CUDA_BUILD, 0 for sizes), so no other folder holds CUDA code or asks
 * whether it was built. Launchers: device pointers, fp16 activations, caller workspace,
 * stream = cudaStream_t as void*; they never allocate, never sync. */
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

/* ------------------------------------------------------------------------------------------
 * The pipeline's device primitives (quant/gpu orchestrates them). They run on the context's
 * own stream (created on first use) and keep the cause of a failure in the ctx
 * (lq_cuda_ctx_error). Allocations are counted so that a job can report its peak.
 * ------------------------------------------------------------------------------------------ */
void     *lq_cuda_ctx_stream(lq_cuda_ctx *ctx);
lq_status lq_cuda_alloc(lq_cuda_ctx *ctx, void **p, size_t bytes); /* LQ_ERR_NOMEM when full */
void      lq_cuda_free(lq_cuda_ctx *ctx, void *p, size_t bytes);
int64_t   lq_cuda_ctx_peak_bytes(const lq_cuda_ctx *ctx);
enum { LQ_CUDA_H2D = 0, LQ_CUDA_D2H = 1, LQ_CUDA_D2D = 2 };
lq_status lq_cuda_copy(lq_cuda_ctx *ctx, void *dst, const void *src, size_t bytes, int dir);
lq_status lq_cuda_zero(lq_cuda_ctx *ctx, void *dst, size_t bytes);
lq_status lq_cuda_sync(lq_cuda_ctx *ctx);
/* fp32 BLAS, cuBLAS's column-major conventions (LQ_ERR_UNSUPPORTED past int sizes) */
lq_status lq_cuda_ssyrk_lower(lq_cuda_ctx *ctx, int64_t n, int64_t k, float alpha, const float *A,
                              int64_t lda, float beta, float *C, int64_t ldc);
lq_status lq_cuda_sgemm(lq_cuda_ctx *ctx, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                        float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                        float beta, float *C, int64_t ldc);
/* GPTQ's factor: A [k, k] holds H (column-major lower = row-major upper) and gets U, upper and
 * row-major, with H^-1 = U^T U; B is k x k scratch. Synchronous. LQ_ERR_CHOLESKY when H (or its
 * inverse) is not positive definite. */
lq_status lq_cuda_chol_inverse_upper(lq_cuda_ctx *ctx, float *A, float *B, int64_t k);

/* One column block [i1, i2) of the GPTQ sweep over every output row (quant/algo's lq_gptq_sweep
 * on device arrays): quantizes the block's columns with error feedback inside the block. */
/* output rows per thread block; columns of one block (the tile of cols x rows floats is shared
 * memory) */
#define LQ_SWEEP_ROWS     64
#define LQ_SWEEP_MAX_COLS 256
typedef struct lq_cuda_sweep {
    float         *Wt;  /* [k, n] */
    const float   *U;   /* [k, k] row-major upper */
    float         *Err; /* [i2 - i1, n] */
    uint8_t       *qt;  /* [k, n] codes, permuted order */
    float         *sc_r, *zr_r;
    const float   *ssc, *szr;
    const int32_t *gcol;
    float         *scales;
    int32_t       *zeros;
    double        *loss; /* [n]: per row, summed over the column blocks */
    int64_t        n, k, g, i1, i2;
    int            bits, sym, v1_safe, static_groups;
} lq_cuda_sweep;
lq_status lq_cuda_gptq_sweep_block(lq_cuda_ctx *ctx, const lq_cuda_sweep *a);
/* q [n, k] (the checkpoint's order) from the sweep's codes qt [k, n] in permuted order:
 * q[r, perm[i]] = qt[i, r]; device arrays, on the context's stream. */
lq_status lq_cuda_codes_unpermute(lq_cuda_ctx *ctx, const uint8_t *qt, const int32_t *perm,
                                  int64_t n, int64_t k, uint8_t *q);

/* Activations between the float32 model and the fp16 kernels: y[i] = (fp16)x[i] (round to
 * nearest even, out of range -> inf as the cast does) and back, on `stream`. */
lq_status lq_cuda_f32_to_f16(const float *x, void *y, int64_t count, void *stream);
lq_status lq_cuda_f16_to_f32(const void *x, float *y, int64_t count, void *stream);


#ifdef __cplusplus
}
#endif
#endif
