/* The conversion pipeline's device primitives on an lq_cuda_ctx (lq_cuda.h): memory counted
 * for the job's report, copies on the context's stream, fp32 BLAS without TF32, GPTQ's inverse
 * Cholesky factor (cuSOLVER) and its column-sweep kernel. quant/gpu orchestrates them in C;
 * all of it is fp32 so a GPU conversion and a CPU conversion agree to rounding. */
#include "lq_cuda_impl.cuh"
#include "lq_qparams.h"

#include <cusolverDn.h>

#include <stdlib.h>
#include <string.h>

/* LQ_ERR_CUDA (LQ_ERR_NOMEM for an allocation failure) with the cause kept in the ctx */
static lq_status dev_fail(lq_cuda_ctx *ctx, cudaError_t e, const char *what) {
    (void)cudaGetLastError(); /* not sticky: the next call starts clean */
    snprintf(ctx->err, sizeof ctx->err, "%s: %s", what, cudaGetErrorString(e));
    return e == cudaErrorMemoryAllocation ? LQ_ERR_NOMEM : LQ_ERR_CUDA;
}

#define DEV_TRY(call, what)                                                                        \
    do {                                                                                           \
        const cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess)                                                                     \
            return dev_fail(ctx, e_, (what));                                                      \
    } while (0)

static lq_status blas_fail(lq_cuda_ctx *ctx, cublasStatus_t b, const char *what) {
    snprintf(ctx->err, sizeof ctx->err, "%s: cuBLAS %s", what, cublasGetStatusName(b));
    return b == CUBLAS_STATUS_ALLOC_FAILED ? LQ_ERR_NOMEM : LQ_ERR_CUDA;
}

static lq_status solver_fail(lq_cuda_ctx *ctx, cusolverStatus_t c, const char *what) {
    snprintf(ctx->err, sizeof ctx->err, "%s: cuSOLVER status %d", what, (int)c);
    return LQ_ERR_CUDA;
}

extern "C" void *lq_cuda_ctx_stream(lq_cuda_ctx *ctx) {
    if (!ctx->stream &&
        cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking) != cudaSuccess) {
        (void)cudaGetLastError();
        ctx->stream = NULL;
        snprintf(ctx->err, sizeof ctx->err, "creating a stream failed");
    }
    return ctx->stream;
}

static cudaStream_t stream_of(lq_cuda_ctx *ctx) {
    return (cudaStream_t)lq_cuda_ctx_stream(ctx);
}

void lq_cuda_dev_release(lq_cuda_ctx *ctx) {
    if (ctx->stream)
        cudaStreamSynchronize(ctx->stream);
    if (ctx->solver_ws)
        cudaFree(ctx->solver_ws);
    if (ctx->dinfo)
        cudaFree(ctx->dinfo);
    if (ctx->solver)
        cusolverDnDestroy((cusolverDnHandle_t)ctx->solver);
    if (ctx->stream)
        cudaStreamDestroy(ctx->stream);
}

extern "C" lq_status lq_cuda_alloc(lq_cuda_ctx *ctx, void **p, size_t bytes) {
    *p = NULL;
    if (bytes == 0)
        return LQ_OK;
    DEV_TRY(cudaMalloc(p, bytes), "cudaMalloc");
    ctx->cur_bytes += (int64_t)bytes;
    if (ctx->cur_bytes > ctx->peak_bytes)
        ctx->peak_bytes = ctx->cur_bytes;
    return LQ_OK;
}

extern "C" void lq_cuda_free(lq_cuda_ctx *ctx, void *p, size_t bytes) {
    if (!p)
        return;
    cudaFree(p);
    ctx->cur_bytes -= (int64_t)bytes;
}

extern "C" int64_t lq_cuda_ctx_peak_bytes(const lq_cuda_ctx *ctx) {
    return ctx ? ctx->peak_bytes : 0;
}

extern "C" lq_status lq_cuda_copy(lq_cuda_ctx *ctx, void *dst, const void *src, size_t bytes,
                                  int dir) {
    static const cudaMemcpyKind kinds[] = {cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost,
                                           cudaMemcpyDeviceToDevice};
    if (bytes == 0)
        return LQ_OK;
    /* from pageable host memory the copy completes before the call returns: src may be reused */
    DEV_TRY(cudaMemcpyAsync(dst, src, bytes, kinds[dir], stream_of(ctx)), "cudaMemcpyAsync");
    return LQ_OK;
}

extern "C" lq_status lq_cuda_zero(lq_cuda_ctx *ctx, void *dst, size_t bytes) {
    DEV_TRY(cudaMemsetAsync(dst, 0, bytes, stream_of(ctx)), "cudaMemsetAsync");
    return LQ_OK;
}

extern "C" lq_status lq_cuda_sync(lq_cuda_ctx *ctx) {
    DEV_TRY(cudaStreamSynchronize(stream_of(ctx)), "cudaStreamSynchronize");
    return LQ_OK;
}

/* ------------------------------------------------------------------------------------------
 * fp32 BLAS on the context's stream: the shared handle in fp32 math without TF32.
 * ------------------------------------------------------------------------------------------ */
static cublasHandle_t fp32_blas(lq_cuda_ctx *ctx) {
    return lq_cuda_ctx_blas(ctx, stream_of(ctx), LQ_CUDA_MATH_FP32);
}

extern "C" lq_status lq_cuda_ssyrk_lower(lq_cuda_ctx *ctx, int64_t n, int64_t k, float alpha,
                                         const float *A, int64_t lda, float beta, float *C,
                                         int64_t ldc) {
    if (n > INT32_MAX || k > INT32_MAX || lda > INT32_MAX || ldc > INT32_MAX)
        return LQ_ERR_UNSUPPORTED;
    const cublasStatus_t b = cublasSsyrk(fp32_blas(ctx), CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N,
                                         (int)n, (int)k, &alpha, A, (int)lda, &beta, C, (int)ldc);
    return b == CUBLAS_STATUS_SUCCESS ? LQ_OK : blas_fail(ctx, b, "SYRK");
}

extern "C" lq_status lq_cuda_sgemm(lq_cuda_ctx *ctx, int trans_a, int trans_b, int64_t m, int64_t n,
                                   int64_t k, float alpha, const float *A, int64_t lda,
                                   const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX || lda > INT32_MAX || ldb > INT32_MAX ||
        ldc > INT32_MAX)
        return LQ_ERR_UNSUPPORTED;
    const cublasStatus_t b = cublasSgemm(
        fp32_blas(ctx), trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
        (int)m, (int)n, (int)k, &alpha, A, (int)lda, B, (int)ldb, &beta, C, (int)ldc);
    return b == CUBLAS_STATUS_SUCCESS ? LQ_OK : blas_fail(ctx, b, "SGEMM");
}

/* ------------------------------------------------------------------------------------------
 * GPTQ factorization: U with H^-1 = U^T U, U upper, stored row-major.
 * In column-major terms: L L^T = H (potrf 'L'), H^-1 = potrs(L, I) (full, symmetric), then the
 * lower Cholesky factor L2 of H^-1 (potrf 'L'): L2 = U^T, and column-major L2 *is* row-major U.
 * cuSOLVER's 64-bit API throughout: the 32-bit one takes int sizes and workspace counts, which
 * k > 46340 (k^2 > 2^31) would overflow.
 * ------------------------------------------------------------------------------------------ */
__global__ void k_set_diag(float *A, int64_t k) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < k)
        A[i + i * k] = 1.f;
}

__global__ void k_zero_upper(float *A, int64_t k) {
    int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t i = blockIdx.y;
    for (; i < k; i += gridDim.y)
        if (j < k && i < j)
            A[i + j * k] = 0.f;
}

static dim3 tri_grid(int64_t k) {
    return dim3((unsigned)((k + 255) / 256), (unsigned)(k < 4096 ? k : 4096));
}

static lq_status solver_ready(lq_cuda_ctx *ctx) {
    if (!ctx->solver) {
        cusolverDnHandle_t h = NULL;
        if (cusolverDnCreate(&h) != CUSOLVER_STATUS_SUCCESS) {
            snprintf(ctx->err, sizeof ctx->err, "cuSOLVER initialization failed");
            return LQ_ERR_CUDA;
        }
        ctx->solver = h;
    }
    if (cusolverDnSetStream((cusolverDnHandle_t)ctx->solver, stream_of(ctx)) !=
        CUSOLVER_STATUS_SUCCESS) {
        snprintf(ctx->err, sizeof ctx->err, "cuSOLVER: setting the stream failed");
        return LQ_ERR_CUDA;
    }
    if (!ctx->dinfo)
        DEV_TRY(cudaMalloc((void **)&ctx->dinfo, sizeof(int)), "solver status");
    return LQ_OK;
}

/* device workspace in bytes (grown, reused; not counted: it lives as long as the ctx) */
static lq_status solver_ws(lq_cuda_ctx *ctx, size_t bytes) {
    if (bytes <= ctx->solver_ws_bytes)
        return LQ_OK;
    if (ctx->solver_ws)
        cudaFree(ctx->solver_ws);
    ctx->solver_ws       = NULL;
    ctx->solver_ws_bytes = 0;
    DEV_TRY(cudaMalloc(&ctx->solver_ws, bytes), "cuSOLVER workspace");
    ctx->solver_ws_bytes = bytes;
    return LQ_OK;
}

static lq_status solver_info(lq_cuda_ctx *ctx, int *info) {
    DEV_TRY(cudaMemcpyAsync(info, ctx->dinfo, sizeof(int), cudaMemcpyDeviceToHost, stream_of(ctx)),
            "reading the solver status");
    DEV_TRY(cudaStreamSynchronize(stream_of(ctx)), "Cholesky factorization");
    return LQ_OK;
}

/* A = L L^T in place (lower); *info as LAPACK's. */
static lq_status xpotrf(lq_cuda_ctx *ctx, cusolverDnParams_t prm, float *A, int64_t k, int *info,
                        const char *what) {
    cusolverDnHandle_t h   = (cusolverDnHandle_t)ctx->solver;
    size_t             dws = 0, hws = 0;
    cusolverStatus_t c = cusolverDnXpotrf_bufferSize(h, prm, CUBLAS_FILL_MODE_LOWER, k, CUDA_R_32F,
                                                     A, k, CUDA_R_32F, &dws, &hws);
    if (c != CUSOLVER_STATUS_SUCCESS)
        return solver_fail(ctx, c, "potrf workspace");
    LQ_TRY(solver_ws(ctx, dws));
    void *hw = hws ? malloc(hws) : NULL;
    if (hws && !hw)
        return LQ_ERR_NOMEM;
    c = cusolverDnXpotrf(h, prm, CUBLAS_FILL_MODE_LOWER, k, CUDA_R_32F, A, k, CUDA_R_32F,
                         ctx->solver_ws, dws, hw, hws, ctx->dinfo);
    const lq_status st =
        c == CUSOLVER_STATUS_SUCCESS ? solver_info(ctx, info) : solver_fail(ctx, c, what);
    free(hw); /* after the synchronization in solver_info */
    return st;
}

static lq_status chol_inverse_with(lq_cuda_ctx *ctx, cusolverDnParams_t prm, float *A, float *B,
                                   int64_t k) {
    const cudaStream_t st   = stream_of(ctx);
    int                info = 0;
    LQ_TRY(xpotrf(ctx, prm, A, k, &info, "Cholesky factorization"));
    if (info != 0)
        return LQ_ERR_CHOLESKY;
    DEV_TRY(cudaMemsetAsync(B, 0, (size_t)(k * k) * sizeof(float), st), "identity");
    k_set_diag<<<(unsigned)((k + 255) / 256), 256, 0, st>>>(B, k);
    DEV_TRY(cudaGetLastError(), "identity");
    const cusolverStatus_t c =
        cusolverDnXpotrs((cusolverDnHandle_t)ctx->solver, prm, CUBLAS_FILL_MODE_LOWER, k, k,
                         CUDA_R_32F, A, k, CUDA_R_32F, B, k, ctx->dinfo);
    if (c != CUSOLVER_STATUS_SUCCESS)
        return solver_fail(ctx, c, "Cholesky inverse");
    LQ_TRY(solver_info(ctx, &info));
    if (info != 0)
        return LQ_ERR_CHOLESKY;
    DEV_TRY(cudaMemcpyAsync(A, B, (size_t)(k * k) * sizeof(float), cudaMemcpyDeviceToDevice, st),
            "copying the inverse");
    LQ_TRY(xpotrf(ctx, prm, A, k, &info, "Cholesky factorization of the inverse"));
    if (info != 0)
        return LQ_ERR_CHOLESKY;
    k_zero_upper<<<tri_grid(k), 256, 0, st>>>(A, k);
    DEV_TRY(cudaGetLastError(), "clearing the factor");
    return LQ_OK;
}

extern "C" lq_status lq_cuda_chol_inverse_upper(lq_cuda_ctx *ctx, float *A, float *B, int64_t k) {
    LQ_TRY(solver_ready(ctx));
    cusolverDnParams_t prm = NULL;
    if (cusolverDnCreateParams(&prm) != CUSOLVER_STATUS_SUCCESS) {
        snprintf(ctx->err, sizeof ctx->err, "cusolverDnCreateParams failed");
        return LQ_ERR_CUDA;
    }
    const lq_status st = chol_inverse_with(ctx, prm, A, B, k);
    cusolverDnDestroyParams(prm);
    cudaStreamSynchronize(stream_of(ctx));
    return st;
}

/* ------------------------------------------------------------------------------------------
 * GPTQ column sweep. One thread per output row r; a block of LQ_SWEEP_ROWS rows keeps the
 * current column block of Wt (cnt x LQ_SWEEP_ROWS) in shared memory, so the O(cnt^2)
 * intra-block updates never touch global memory. U is read row by row (the same address across
 * the warp: broadcast). The arithmetic is the CPU's, operation for operation (lq_gptq.c
 * cpu_sweep).
 * ------------------------------------------------------------------------------------------ */
#define SW_ROWS LQ_SWEEP_ROWS

__global__ void k_sweep_block(lq_cuda_sweep a) {
    extern __shared__ float tile[]; /* [cnt][SW_ROWS] */
    int64_t                 r = (int64_t)blockIdx.x * SW_ROWS + threadIdx.x;
    int64_t                 n = a.n, k = a.k, i1 = a.i1, i2 = a.i2, cnt = i2 - i1;
    int                     tid  = threadIdx.x;
    bool                    on   = r < n;
    int                     maxq = (1 << a.bits) - 1;
    if (on)
        for (int64_t j = 0; j < cnt; j++)
            tile[j * SW_ROWS + tid] = a.Wt[(i1 + j) * n + r];
    if (!on)
        return; /* no block-wide barrier follows */
    float  sc = a.sc_r[r], zr = a.zr_r[r];
    double l = 0;
    for (int64_t i = i1; i < i2; i++) {
        const float *U   = a.U + i * k;
        float        d   = U[i];
        int32_t      grp = a.gcol[i];
        if (a.g && !a.static_groups && i % a.g == 0) {
            int64_t w_ = i + a.g < k ? a.g : k - i;
            float   v0 = tile[(i - i1) * SW_ROWS + tid], mn = v0, mx = v0;
            for (int64_t c = 1; c < w_; c++) {
                int64_t row = i + c;
                float   v   = row < i2 ? tile[(row - i1) * SW_ROWS + tid] : a.Wt[row * n + r];
                mn          = v < mn ? v : mn;
                mx          = v > mx ? v : mx;
            }
            lq_qparams(mn, mx, a.bits, a.sym, a.v1_safe, &sc, &zr);
            a.scales[(int64_t)grp * n + r] = sc;
            a.zeros[(int64_t)grp * n + r]  = (int32_t)zr;
        }
        float s = sc, z = zr;
        if (a.static_groups && a.g) {
            s = a.ssc[(int64_t)grp * n + r];
            z = a.szr[(int64_t)grp * n + r];
        }
        float w         = tile[(i - i1) * SW_ROWS + tid];
        float qf        = rintf(w / s) + z;
        int   code      = qf < 0 ? 0 : qf > (float)maxq ? maxq : (int)qf;
        float qv        = s * ((float)code - z);
        a.qt[i * n + r] = (uint8_t)code;
        float diff      = w - qv;
        l += (double)diff * diff / ((double)d * d) / 2;
        float e                        = diff / d;
        a.Err[(i - i1) * n + r]        = e;
        tile[(i - i1) * SW_ROWS + tid] = qv;
        for (int64_t j = i + 1; j < i2; j++)
            tile[(j - i1) * SW_ROWS + tid] -= U[j] * e;
    }
    for (int64_t j = 0; j < cnt; j++)
        a.Wt[(i1 + j) * n + r] = tile[j * SW_ROWS + tid];
    a.sc_r[r] = sc;
    a.zr_r[r] = zr;
    a.loss[r] += l; /* one thread per row: summed on the host in row order (deterministic) */
}

extern "C" lq_status lq_cuda_gptq_sweep_block(lq_cuda_ctx *ctx, const lq_cuda_sweep *a) {
    const int64_t cnt = a->i2 - a->i1;
    const size_t  shm = (size_t)cnt * SW_ROWS * sizeof(float);
    if (cnt <= 0 || cnt > LQ_SWEEP_MAX_COLS)
        return LQ_ERR_INVALID_ARG;
    if (shm > 48 * 1024) /* past the default: opt in (the kernel's attribute, set once is enough) */
        DEV_TRY(cudaFuncSetAttribute(k_sweep_block, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)shm),
                "sweep shared memory");
    k_sweep_block<<<(unsigned)((a->n + SW_ROWS - 1) / SW_ROWS), SW_ROWS, shm, stream_of(ctx)>>>(*a);
    DEV_TRY(cudaGetLastError(), "GPTQ column sweep");
    return LQ_OK;
}

/* q[r, perm[i]] = qt[i, r]: 32 x 32 tiles through shared memory, read along r and written along
 * i (contiguous in q where the permutation keeps neighbours, as it does without act-order) */
__global__ void k_codes_unpermute(const uint8_t *__restrict__ qt, const int32_t *__restrict__ perm,
                                  int64_t n, int64_t k, uint8_t *q) {
    __shared__ uint8_t tile[32][33];
    const int64_t      i0 = (int64_t)blockIdx.x * 32, r0 = (int64_t)blockIdx.y * 32;
    const int          tx = threadIdx.x, ty = threadIdx.y; /* 32 x 8 threads */
    for (int y = ty; y < 32; y += 8) {
        const int64_t i = i0 + y, r = r0 + tx;
        if (i < k && r < n)
            tile[y][tx] = qt[i * n + r];
    }
    __syncthreads();
    for (int y = ty; y < 32; y += 8) {
        const int64_t r = r0 + y, i = i0 + tx;
        if (i < k && r < n)
            q[r * k + perm[i]] = tile[tx][y];
    }
}

extern "C" lq_status lq_cuda_codes_unpermute(lq_cuda_ctx *ctx, const uint8_t *qt,
                                             const int32_t *perm, int64_t n, int64_t k,
                                             uint8_t *q) {
    if (n <= 0 || k <= 0)
        return LQ_OK;
    if ((k + 31) / 32 > INT32_MAX || (n + 31) / 32 > 65535)
        return LQ_ERR_UNSUPPORTED;
    const dim3 grid((unsigned)((k + 31) / 32), (unsigned)((n + 31) / 32)), block(32, 8);
    k_codes_unpermute<<<grid, block, 0, stream_of(ctx)>>>(qt, perm, n, k, q);
    DEV_TRY(cudaGetLastError(), "GPTQ codes");
    return LQ_OK;
}
