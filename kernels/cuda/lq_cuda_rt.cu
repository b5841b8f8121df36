/* CUDA runtime side of the public API: device discovery, the cuBLAS context and uploading a host
 * descriptor into one device buffer. A machine without a driver must see 0 devices, not a
 * crash: every runtime call's error is checked and mapped. */
#include "lq_cuda_impl.cuh"
extern "C" {
#include "lq_qformat.h"
}

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" LQ_API int lq_cuda_built(void) {
    return 1;
}

extern "C" LQ_API lq_status lq_cuda_device_count(int *count) {
    if (!count)
        return LQ_ERR_INVALID_ARG;
    int c = 0;
    if (cudaGetDeviceCount(&c) != cudaSuccess) {
        /* no driver / no device: clear the sticky-free error so later calls start clean */
        (void)cudaGetLastError();
        c = 0;
    }
    *count = c;
    return LQ_OK;
}

extern "C" LQ_API lq_status lq_cuda_device_info(int device, char *name, size_t name_cap,
                                                int *cc_major, int *cc_minor, size_t *mem_bytes,
                                                double *peak_gbps) {
    int count = 0;
    lq_cuda_device_count(&count);
    if (count == 0)
        return LQ_ERR_NO_DEVICE;
    if (device < 0 || device >= count)
        return LQ_ERR_INVALID_ARG;
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, device) != cudaSuccess)
        return LQ_ERR_CUDA;
    if (name && name_cap > 0) {
        strncpy(name, p.name, name_cap - 1);
        name[name_cap - 1] = '\0';
    }
    if (cc_major)
        *cc_major = p.major;
    if (cc_minor)
        *cc_minor = p.minor;
    if (mem_bytes)
        *mem_bytes = p.totalGlobalMem;
    if (peak_gbps) {
        int clk_khz = 0, bus_bits = 0;
        if (cudaDeviceGetAttribute(&clk_khz, cudaDevAttrMemoryClockRate, device) != cudaSuccess ||
            cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device) !=
                cudaSuccess)
            return LQ_ERR_CUDA;
        /* double data rate: 2 transfers per clock (HBM and GDDR as reported by the driver) */
        *peak_gbps = 2.0 * (double)clk_khz * 1e3 * ((double)bus_bits / 8.0) / 1e9;
    }
    return LQ_OK;
}

extern "C" LQ_API lq_status lq_cuda_ctx_create(int device, lq_cuda_ctx **out, lq_err *err) {
    LQ_RETURN_IF(!out, err, LQ_ERR_INVALID_ARG, "lq_cuda_ctx_create: out is NULL");
    *out = NULL;
    int count = 0;
    lq_cuda_device_count(&count);
    LQ_RETURN_IF(count == 0, err, LQ_ERR_NO_DEVICE, "lq_cuda_ctx_create: no CUDA device");
    LQ_RETURN_IF(device < 0 || device >= count, err, LQ_ERR_INVALID_ARG,
                 "lq_cuda_ctx_create: device %d out of [0, %d)", device, count);
    cudaError_t ce = cudaSetDevice(device);
    LQ_RETURN_IF(ce != cudaSuccess, err, LQ_ERR_CUDA, "lq_cuda_ctx_create: cudaSetDevice(%d): %s",
                 device, cudaGetErrorString(ce));
    lq_cuda_ctx *c = (lq_cuda_ctx *)calloc(1, sizeof *c);
    LQ_RETURN_IF(!c, err, LQ_ERR_NOMEM, "lq_cuda_ctx_create: out of memory");
    c->device = device;
    cublasStatus_t bs = cublasCreate(&c->blas);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        free(c);
        return lq_fail(err, LQ_ERR_CUDA, "lq_cuda_ctx_create: cublasCreate failed (status %d)",
                       (int)bs);
    }
    /* split-k inside cuBLAS must reduce in fp32, not in the fp16 output type: keeps the
     * large-m path's sums as exact as the GEMV kernels' (and the exact-mode tests valid) */
    bs = cublasSetMathMode(c->blas, (cublasMath_t)(CUBLAS_DEFAULT_MATH |
                                                   CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
    if (bs != CUBLAS_STATUS_SUCCESS) {
        cublasDestroy(c->blas);
        free(c);
        return lq_fail(err, LQ_ERR_CUDA, "lq_cuda_ctx_create: cublasSetMathMode failed (status %d)",
                       (int)bs);
    }
    *out            = c;
    return LQ_OK;
}

extern "C" LQ_API void lq_cuda_ctx_free(lq_cuda_ctx *ctx) {
    if (!ctx)
        return;
    lq_cuda_dev_release(ctx);
    cublasDestroy(ctx->blas);
    free(ctx);
}

extern "C" LQ_API const char *lq_cuda_ctx_error(const lq_cuda_ctx *ctx) {
    return ctx ? ctx->err : "";
}

cublasHandle_t lq_cuda_ctx_blas(lq_cuda_ctx *ctx, void *stream, int math) {
    const cublasMath_t mode =
        math == LQ_CUDA_MATH_FP32
            ? CUBLAS_PEDANTIC_MATH
            : (cublasMath_t)(CUBLAS_DEFAULT_MATH |
                             CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
    if (!ctx || cublasSetStream(ctx->blas, (cudaStream_t)stream) != CUBLAS_STATUS_SUCCESS ||
        cublasSetMathMode(ctx->blas, mode) != CUBLAS_STATUS_SUCCESS)
        return NULL;
    return ctx->blas;
}

__global__ void k_f32_to_f16(const float *__restrict__ x, __half *__restrict__ y, int64_t count) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count)
        y[i] = __float2half_rn(x[i]);
}

__global__ void k_f16_to_f32(const __half *__restrict__ x, float *__restrict__ y, int64_t count) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count)
        y[i] = __half2float(x[i]);
}

static unsigned conv_blocks(int64_t count) {
    return (unsigned)((count + 255) / 256);
}

extern "C" lq_status lq_cuda_f32_to_f16(const float *x, void *y, int64_t count, void *stream) {
    if (count <= 0)
        return LQ_OK;
    k_f32_to_f16<<<conv_blocks(count), 256, 0, (cudaStream_t)stream>>>(x, (__half *)y, count);
    return lq_cuda_launched();
}

extern "C" lq_status lq_cuda_f16_to_f32(const void *x, float *y, int64_t count, void *stream) {
    if (count <= 0)
        return LQ_OK;
    k_f16_to_f32<<<conv_blocks(count), 256, 0, (cudaStream_t)stream>>>((const __half *)x, y, count);
    return lq_cuda_launched();
}

/* A call works on the ctx's device whatever the thread's current device is. */
extern "C" lq_status lq_cuda_call_begin(lq_cuda_ctx *ctx) {
    if (!ctx)
        return LQ_OK;
    ctx->err[0] = '\0';
    int cur = -1;
    if (cudaGetDevice(&cur) != cudaSuccess || cur != ctx->device) {
        const cudaError_t e = cudaSetDevice(ctx->device);
        if (e != cudaSuccess) {
            snprintf(ctx->err, sizeof ctx->err, "cudaSetDevice(%d): %s", ctx->device,
                     cudaGetErrorString(e));
            return LQ_ERR_CUDA;
        }
    }
    return LQ_OK;
}

/* LQ_ERR_CUDA from a launch leaves the runtime's error pending: take it (so the next call
 * starts clean) and keep its text in the ctx unless a cuBLAS status was recorded already. */
extern "C" lq_status lq_cuda_call_end(lq_cuda_ctx *ctx, lq_status st) {
    if (st != LQ_ERR_CUDA)
        return st;
    const cudaError_t e = cudaGetLastError();
    if (ctx && !ctx->err[0])
        snprintf(ctx->err, sizeof ctx->err, "%s",
                 e != cudaSuccess ? cudaGetErrorString(e) : "CUDA call failed");
    return st;
}

/* ------------------------------------------------------------------------------------------
 * Upload: the arrays of a descriptor's layout (formats/lq_qformat.h) in its order, each
 * 256-byte aligned, in their device dtypes.
 * ------------------------------------------------------------------------------------------ */
typedef struct up_list {
    size_t      field[LQ_QARRAY_MAX + 2]; /* offsetof the pointer field to redirect */
    const void *src[LQ_QARRAY_MAX + 2];
    size_t      bytes[LQ_QARRAY_MAX + 2];
    int         n;
} up_list;

/* Arrays of a valid host descriptor d. */
static void up_collect(const lq_qlinear *d, up_list *l) {
    lq_qarray a[LQ_QARRAY_MAX + 2];
    const int na = lq_qlinear_arrays(d, a);
    memset(l, 0, sizeof *l);
    for (int i = 0; i < na; i++) {
        const size_t bytes = (size_t)lq_qarray_numel(&a[i]) * (size_t)lq_dtype_size(a[i].dev_dtype);
        if (a[i].constant || bytes == 0)
            continue;
        l->field[l->n] = a[i].field;
        l->src[l->n]   = lq_qarray_data(&a[i], d);
        l->bytes[l->n] = bytes;
        l->n++;
    }
}

extern "C" LQ_API size_t lq_qlinear_device_bytes(const lq_qlinear *host) {
    if (lq_qlinear_check(host, NULL) != LQ_OK)
        return 0;
    lq_qlinear d = *host;
    up_list    l;
    up_collect(&d, &l);
    size_t s = 256; /* slack to align the start of an arbitrary dev_buf */
    for (int i = 0; i < l.n; i++)
        s += lq_align256(l.bytes[i]);
    return s;
}

extern "C" LQ_API lq_status lq_qlinear_upload(const lq_qlinear *host, void *dev_buf, size_t cap,
                                              lq_qlinear *dev, void *stream) {
    if (!host || !dev || !dev_buf)
        return LQ_ERR_INVALID_ARG;
    LQ_TRY(lq_qlinear_check(host, NULL));
    if (cap < lq_qlinear_device_bytes(host))
        return LQ_ERR_INVALID_ARG;
    lq_qlinear d = *host;
    up_list    l;
    up_collect(&d, &l);
    uintptr_t p = ((uintptr_t)dev_buf + 255) & ~(uintptr_t)255;
    for (int i = 0; i < l.n; i++) {
        if (cudaMemcpyAsync((void *)p, l.src[i], l.bytes[i], cudaMemcpyHostToDevice,
                            (cudaStream_t)stream) != cudaSuccess)
            return LQ_ERR_CUDA;
        const void *dp = (const void *)p;
        memcpy((char *)&d + l.field[i], &dp, sizeof dp);
        p += lq_align256(l.bytes[i]);
    }
    *dev = d;
    return LQ_OK;
}
