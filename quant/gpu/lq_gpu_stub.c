/* No-CUDA build of lq_gpu.h: no devices; every entry point reports LQ_ERR_NO_CUDA_BUILD. */
#ifndef LQ_HAVE_CUDA
#include "lq_gpu.h"

#include <stddef.h>

lq_status lq_gpu_open(int device, lq_gpu **out, lq_err *err) {
    (void)device;
    *out = NULL;
    LQ_FAIL(err, LQ_ERR_NO_CUDA_BUILD, "llmquant was built without CUDA");
}

void lq_gpu_close(lq_gpu *g) {
    (void)g;
}

const char *lq_gpu_describe(const lq_gpu *g) {
    (void)g;
    return "none";
}

int64_t lq_gpu_peak_bytes(const lq_gpu *g) {
    (void)g;
    return 0;
}

lq_status lq_gpu_hess_create(lq_gpu *g, int64_t k, lq_gpu_hess **out, lq_err *err) {
    (void)g, (void)k;
    *out = NULL;
    LQ_FAIL(err, LQ_ERR_NO_CUDA_BUILD, "llmquant was built without CUDA");
}

lq_status lq_gpu_hess_add(lq_gpu_hess *h, const float *x, int64_t t, int64_t nseq, lq_err *err) {
    (void)h, (void)x, (void)t, (void)nseq;
    LQ_FAIL(err, LQ_ERR_NO_CUDA_BUILD, "llmquant was built without CUDA");
}

lq_status lq_gpu_hess_get(lq_gpu_hess *h, lq_xstats *s, lq_err *err) {
    (void)h, (void)s;
    LQ_FAIL(err, LQ_ERR_NO_CUDA_BUILD, "llmquant was built without CUDA");
}

void lq_gpu_hess_free(lq_gpu_hess *h) {
    (void)h;
}

lq_status lq_gpu_dense_gemm(void *user, const float *W, int64_t n, int64_t k, const float *x,
                            int64_t t, float *y, lq_err *err) {
    (void)user, (void)W, (void)n, (void)k, (void)x, (void)t, (void)y, (void)err;
    return LQ_ERR_UNSUPPORTED; /* the forward stays on the CPU */
}

lq_status lq_gpu_qlinear(void *user, const lq_qlinear *w, const float *x, int64_t t, float *y,
                         lq_err *err) {
    (void)user, (void)w, (void)x, (void)t, (void)y, (void)err;
    return LQ_ERR_UNSUPPORTED; /* the forward stays on the CPU */
}

static lq_status no_factor(void *ctx, float *Hp, int64_t k, lq_err *err) {
    (void)ctx, (void)Hp, (void)k;
    LQ_FAIL(err, LQ_ERR_NO_CUDA_BUILD, "llmquant was built without CUDA");
}

static lq_status no_sweep(void *ctx, lq_gptq_sweep *s, lq_err *err) {
    (void)ctx, (void)s;
    LQ_FAIL(err, LQ_ERR_NO_CUDA_BUILD, "llmquant was built without CUDA");
}

void lq_gpu_gptq_backend(lq_gpu *g, lq_gptq_backend *be) {
    be->ctx    = g;
    be->factor = no_factor;
    be->sweep  = no_sweep;
}
#else
typedef int lq_gpu_stub_unused_;
#endif
