/* lq_gpu.h -- the quantization pipeline's GPU side (internal; C-callable).
 *
 * The device a job picked (--device) and what runs on it beside the op table's cuda backend
 * (kernels/lq_ops.h, which runs the calibration forwards and the statistics): the GPTQ
 * factorization (cuSOLVER potrf/potri/potrf: U with H^-1 = U^T U) and the GPTQ column sweep
 * (one thread per output row, the block's columns in shared memory) with lazy block updates
 * (cuBLAS SGEMM), fp32 so that the GPU result matches the CPU path within rounding
 * (tests/test_gpu_pipeline.c states the bounds); perplexity's linears on the kernels.
 *
 * Written in C on the device layer's primitives (kernels/cuda/lq_cuda.h), so the same code is
 * built with and without CUDA: without it the device count is 0 and opening fails with
 * LQ_ERR_NO_CUDA_BUILD. */
#ifndef LQ_GPU_H
#define LQ_GPU_H

#include "lq_quant.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lq_gpu lq_gpu;

/* The --device policy of every job: "cpu" -> NULL; "auto" without a usable device -> NULL after
 * one LQ_LOG_WARN notice (CUDA builds); "cuda" without one -> LQ_ERR_NO_DEVICE; otherwise
 * device 0 when `useful` (the job has work for it), else NULL. */
lq_status lq_device_pick(const char *device, int useful, const lq_callbacks *cb, lq_gpu **out,
                         lq_err *err);

/* Usable CUDA devices; 0 without a driver or device (never fails, never crashes). */
int       lq_gpu_device_count(void);
lq_status lq_gpu_open(int device, lq_gpu **out, lq_err *err);
void      lq_gpu_close(lq_gpu *g);
/* "NVIDIA H100 80GB HBM3 (cc 9.0, 79.1 GiB)" */
const char *lq_gpu_describe(const lq_gpu *g);
/* Peak bytes this context had allocated on the device. */
int64_t   lq_gpu_peak_bytes(const lq_gpu *g);
/* The device layer's context (for the op table's cuda backend, lq_be_init_cuda). */
lq_cuda_ctx *lq_gpu_ctx(lq_gpu *g);
/* Total memory of the device in bytes. */
int64_t      lq_gpu_mem_bytes(const lq_gpu *g);

/* y[t, n] = x[t, k] W^T (+ the descriptor's fp16 bias) for a linear of any format, on the
 * format table's CUDA row (lq_qlinear_forward_cuda: the kernels the GPU kernel test binds):
 * the descriptor's arrays go up per call (dense float32 weights rounded to the device's fp16),
 * activations travel as fp16 as the kernels take them and come back as float32. Host arrays in
 * and out; synchronous (lq_qlinear_fn; user = lq_gpu *). */
lq_status lq_gpu_qlinear(void *user, const lq_qlinear *w, const float *x, int64_t t, float *y,
                         lq_err *err);

/* GPTQ backend on g (see lq_gptq_ex); the backend borrows g. */
void lq_gpu_gptq_backend(lq_gpu *g, lq_gptq_backend *be);

#ifdef __cplusplus
}
#endif
#endif
