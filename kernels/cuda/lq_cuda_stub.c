/* Fallbacks of the CUDA entry points for a build without CUDA: every call reports
 * LQ_ERR_NO_CUDA_BUILD, device count is 0. The real ones live in *.cu. */
#ifndef LQ_HAVE_CUDA
#include "lq_cuda.h"
#include "lq_ops.h"

const lq_ops *lq_ops_cuda(void) {
    return NULL;
}

#define LQ_CUDA_FMT_STUB(fmt)                                                                      \
    lq_status lq_dequant_##fmt##_cuda(const lq_qlinear *w, void *out_f16, void *stream) {          \
        return LQ_ERR_NO_CUDA_BUILD;                                                               \
    }                                                                                              \
    size_t lq_ws_##fmt##_cuda(const lq_qlinear *w, int64_t m) {                                    \
        return 0;                                                                                  \
    }                                                                                              \
    lq_status lq_gemm_##fmt##_cuda(lq_cuda_ctx *ctx, const lq_qlinear *w, const void *x_f16,       \
                                   int64_t m, void *y_f16, void *ws, size_t ws_size,               \
                                   void *stream) {                                                 \
        return LQ_ERR_NO_CUDA_BUILD;                                                               \
    }

LQ_CUDA_FMT_STUB(dense)
LQ_CUDA_FMT_STUB(gptq)
LQ_CUDA_FMT_STUB(awq)
LQ_CUDA_FMT_STUB(nf4)
LQ_CUDA_FMT_STUB(int8)

int lq_cuda_built(void) {
    return 0;
}

lq_status lq_cuda_device_count(int *count) {
    if (count)
        *count = 0;
    return LQ_OK;
}

lq_status lq_cuda_device_info(int device, char *name, size_t name_cap, int *cc_major, int *cc_minor,
                              size_t *mem_bytes, double *peak_gbps) {
    return LQ_ERR_NO_CUDA_BUILD;
}

lq_status lq_cuda_ctx_create(int device, lq_cuda_ctx **out, lq_err *err) {
    if (out)
        *out = NULL;
    return lq_fail(err, LQ_ERR_NO_CUDA_BUILD, "llmquant was built without CUDA");
}

void lq_cuda_ctx_free(lq_cuda_ctx *ctx) {}

const char *lq_cuda_ctx_error(const lq_cuda_ctx *ctx) {
    return "";
}

lq_status lq_cuda_call_begin(lq_cuda_ctx *ctx) {
    return LQ_OK;
}

lq_status lq_cuda_call_end(lq_cuda_ctx *ctx, lq_status st) {
    return st;
}

lq_status lq_cuda_f32_to_f16(const float *x, void *y, int64_t count, void *stream) {
    return LQ_ERR_NO_CUDA_BUILD;
}

lq_status lq_cuda_f16_to_f32(const void *x, float *y, int64_t count, void *stream) {
    return LQ_ERR_NO_CUDA_BUILD;
}

void *lq_cuda_ctx_stream(lq_cuda_ctx *ctx) {
    return NULL;
}

lq_status lq_cuda_alloc(lq_cuda_ctx *ctx, void **p, size_t bytes) {
    *p = NULL;
    return LQ_ERR_NO_CUDA_BUILD;
}

void lq_cuda_free(lq_cuda_ctx *ctx, void *p, size_t bytes) {}

int64_t lq_cuda_ctx_peak_bytes(const lq_cuda_ctx *ctx) {
    return 0;
}

lq_status lq_cuda_copy(lq_cuda_ctx *ctx, void *dst, const void *src, size_t bytes, int dir) {
    return LQ_ERR_NO_CUDA_BUILD;
}

lq_status lq_cuda_zero(lq_cuda_ctx *ctx, void *dst, size_t bytes) {
    return LQ_ERR_NO_CUDA_BUILD;
}

lq_status lq_cuda_sync(lq_cuda_ctx *ctx) {
    return LQ_ERR_NO_CUDA_BUILD;
}

lq_status lq_cuda_ssyrk_lower(lq_cuda_ctx *ctx, int64_t n, int64_t k, float alpha, const float *A,
                              int64_t lda, float beta, float *C, int64_t ldc) {
    return LQ_ERR_NO_CUDA_BUILD;
}

lq_status lq_cuda_sgemm(lq_cuda_ctx *ctx, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                        float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                        float beta, float *C, int64_t ldc) {
    return LQ_ERR_NO_CUDA_BUILD;
}

lq_status lq_cuda_chol_inverse_upper(lq_cuda_ctx *ctx, float *A, float *B, int64_t k) {
    return LQ_ERR_NO_CUDA_BUILD;
}

lq_status lq_cuda_gptq_sweep_block(lq_cuda_ctx *ctx, const lq_cuda_sweep *a) {
    return LQ_ERR_NO_CUDA_BUILD;
}

lq_status lq_cuda_codes_unpermute(lq_cuda_ctx *ctx, const uint8_t *qt, const int32_t *perm,
                                  int64_t n, int64_t k, uint8_t *q) {
    return LQ_ERR_NO_CUDA_BUILD;
}

size_t lq_qlinear_device_bytes(const lq_qlinear *host) {
    return 0;
}

lq_status lq_qlinear_upload(const lq_qlinear *host, void *dev_buf, size_t cap, lq_qlinear *dev,
                            void *stream) {
    return LQ_ERR_NO_CUDA_BUILD;
}
#else
typedef int lq_cuda_stub_unused_;
#endif
