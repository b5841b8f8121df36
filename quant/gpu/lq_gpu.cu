/* GPU side of the quantization pipeline (see lq_gpu.h): Hessians, GPTQ factorization and
 * column sweep. Everything is fp32 so that a GPU conversion and a CPU conversion agree to
 * rounding; the expensive parts (SYRK over all calibration tokens, the O(k^3) factorization,
 * the O(n k^2) sweep) are where the device pays off. */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>

extern "C" {
#include "cuda/lq_cuda.h"
#include "lq_gpu.h"
#include "lq_qformat.h"
}
#include "lq_qparams.h"

struct lq_gpu {
    int                device;
    cudaStream_t       stream;
    lq_cuda_ctx       *kc; /* the device layer's context: its cuBLAS handle is the one used */
    cusolverDnHandle_t solver;
    int64_t            cur_bytes, peak_bytes;
    char               desc[320];
    /* GPTQ backend state: U [k, k] (row-major upper = column-major lower of the factor). */
    float   *dU;
    int64_t  U_k;
    float   *dwork; /* cuSOLVER workspace */
    int64_t  work_elems;
    int     *dinfo;
    /* dense GEMM buffers of the forwards (grown, reused) */
    float   *dgW, *dgx, *dgy;
    int64_t  gW_cap, gx_cap, gy_cap; /* elements */
    /* the kernels' linears (lq_gpu_qlinear): descriptor arrays, fp16 activations, workspace */
    void    *dq, *dxh, *dyh, *dkws;
    int64_t  q_cap, xh_cap, yh_cap, kws_cap; /* bytes */
};

/* ------------------------------------------------------------------------------------------
 * Errors and allocation
 * ------------------------------------------------------------------------------------------ */
static lq_status cuda_fail(lq_err *err, cudaError_t e, const char *what) {
    if (e == cudaErrorMemoryAllocation)
        return lq_fail(err, LQ_ERR_NOMEM, "GPU: out of device memory (%s)", what);
    return lq_fail(err, LQ_ERR_CUDA, "GPU: %s: %s", what, cudaGetErrorString(e));
}

#define CU_TRY(call, what)                                                                     \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess)                                                                 \
            return cuda_fail(err, e_, (what));                                                 \
    } while (0)
#define BLAS_TRY(call, what)                                                                   \
    do {                                                                                       \
        cublasStatus_t b_ = (call);                                                            \
        if (b_ != CUBLAS_STATUS_SUCCESS)                                                       \
            return lq_fail(err, b_ == CUBLAS_STATUS_ALLOC_FAILED ? LQ_ERR_NOMEM : LQ_ERR_CUDA, \
                           "GPU: %s: cuBLAS status %d", (what), (int)b_);                      \
    } while (0)
#define SOLVER_TRY(call, what)                                                                 \
    do {                                                                                       \
        cusolverStatus_t c_ = (call);                                                          \
        if (c_ != CUSOLVER_STATUS_SUCCESS)                                                     \
            return lq_fail(err, LQ_ERR_CUDA, "GPU: %s: cuSOLVER status %d", (what), (int)c_);  \
    } while (0)

/* The shared handle on this context's stream, fp32 products without TF32 so that GPU and CPU
 * conversions agree (NULL makes the cuBLAS call fail with its status). */
static cublasHandle_t blas(lq_gpu *g) {
    return (cublasHandle_t)lq_cuda_ctx_blas(g->kc, g->stream, LQ_CUDA_MATH_FP32);
}

/* Sizes are tracked so the report can state peak device memory. */
static lq_status dev_alloc(lq_gpu *g, void **p, int64_t bytes, const char *what, lq_err *err) {
    *p = NULL;
    if (bytes <= 0)
        return LQ_OK;
    cudaError_t e = cudaMalloc(p, (size_t)bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return lq_fail(err, LQ_ERR_NOMEM, "GPU: out of device memory for %s (%.1f MiB)", what,
                       (double)bytes / 1048576.0);
    }
    g->cur_bytes += bytes;
    if (g->cur_bytes > g->peak_bytes)
        g->peak_bytes = g->cur_bytes;
    return LQ_OK;
}

static void dev_free(lq_gpu *g, void *p, int64_t bytes) {
    if (!p)
        return;
    cudaFree(p);
    g->cur_bytes -= bytes;
}

/* ------------------------------------------------------------------------------------------
 * Context
 * ------------------------------------------------------------------------------------------ */
extern "C" lq_status lq_gpu_open(int device, lq_gpu **out, lq_err *err) {
    *out    = NULL;
    int cnt = lq_gpu_device_count();
    if (device < 0 || device >= cnt)
        LQ_FAIL(err, LQ_ERR_NO_DEVICE, "GPU: no CUDA device %d (%d usable)", device, cnt);
    lq_gpu *g = (lq_gpu *)calloc(1, sizeof *g);
    if (!g)
        LQ_FAIL(err, LQ_ERR_NOMEM, "out of memory");
    g->device   = device;
    lq_status s = lq_cuda_ctx_create(device, &g->kc, err); /* sets the device current */
    if (s != LQ_OK) {
        free(g);
        return s;
    }
    cudaError_t e = cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        lq_gpu_close(g);
        return cuda_fail(err, e, "initializing the device");
    }
    if (cusolverDnCreate(&g->solver) != CUSOLVER_STATUS_SUCCESS ||
        cusolverDnSetStream(g->solver, g->stream) != CUSOLVER_STATUS_SUCCESS) {
        s = lq_fail(err, LQ_ERR_CUDA, "GPU: cuSOLVER initialization failed");
    } else {
        s = dev_alloc(g, (void **)&g->dinfo, sizeof(int), "solver status", err);
    }
    if (s != LQ_OK) {
        lq_gpu_close(g);
        return s;
    }
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, device) == cudaSuccess)
        snprintf(g->desc, sizeof g->desc, "%.200s (cc %d.%d, %.1f GiB)", prop.name, prop.major,
                 prop.minor, (double)prop.totalGlobalMem / 1073741824.0);
    else
        snprintf(g->desc, sizeof g->desc, "CUDA device %d", device);
    *out = g;
    return LQ_OK;
}

extern "C" void lq_gpu_close(lq_gpu *g) {
    if (!g)
        return;
    if (g->stream)
        cudaStreamSynchronize(g->stream);
    dev_free(g, g->dU, g->U_k * g->U_k * (int64_t)sizeof(float));
    dev_free(g, g->dwork, g->work_elems * (int64_t)sizeof(float));
    dev_free(g, g->dinfo, sizeof(int));
    dev_free(g, g->dgW, g->gW_cap * (int64_t)sizeof(float));
    dev_free(g, g->dgx, g->gx_cap * (int64_t)sizeof(float));
    dev_free(g, g->dgy, g->gy_cap * (int64_t)sizeof(float));
    dev_free(g, g->dq, g->q_cap);
    dev_free(g, g->dxh, g->xh_cap);
    dev_free(g, g->dyh, g->yh_cap);
    dev_free(g, g->dkws, g->kws_cap);
    if (g->solver)
        cusolverDnDestroy(g->solver);
    lq_cuda_ctx_free(g->kc);
    if (g->stream)
        cudaStreamDestroy(g->stream);
    free(g);
}

extern "C" const char *lq_gpu_describe(const lq_gpu *g) {
    return g ? g->desc : "none";
}

extern "C" int64_t lq_gpu_peak_bytes(const lq_gpu *g) {
    return g ? g->peak_bytes : 0;
}

/* ------------------------------------------------------------------------------------------
 * Hessians: H (column-major lower == row-major upper, as cblas_ssyrk CblasUpper on the CPU)
 * ------------------------------------------------------------------------------------------ */
struct lq_gpu_hess {
    lq_gpu *g;
    int64_t k, nsamples, ntokens;
    float  *dH;
    float  *dx;
    int64_t x_cap; /* elements */
};

extern "C" lq_status lq_gpu_hess_create(lq_gpu *g, int64_t k, lq_gpu_hess **out, lq_err *err) {
    *out           = NULL;
    lq_gpu_hess *h = (lq_gpu_hess *)calloc(1, sizeof *h);
    if (!h)
        LQ_FAIL(err, LQ_ERR_NOMEM, "out of memory");
    h->g        = g;
    h->k        = k;
    lq_status s = dev_alloc(g, (void **)&h->dH, k * k * (int64_t)sizeof(float), "a Hessian", err);
    if (s == LQ_OK && cudaMemsetAsync(h->dH, 0, (size_t)(k * k) * sizeof(float), g->stream) !=
                          cudaSuccess)
        s = lq_fail(err, LQ_ERR_CUDA, "GPU: clearing a Hessian failed");
    if (s != LQ_OK) {
        lq_gpu_hess_free(h);
        return s;
    }
    *out = h;
    return LQ_OK;
}

extern "C" lq_status lq_gpu_hess_add(lq_gpu_hess *h, const float *x, int64_t t, int64_t nseq,
                                     lq_err *err) {
    lq_gpu *g = h->g;
    int64_t k = h->k;
    if (t * k > h->x_cap) {
        dev_free(g, h->dx, h->x_cap * (int64_t)sizeof(float));
        h->dx    = NULL;
        h->x_cap = 0;
        LQ_TRY(dev_alloc(g, (void **)&h->dx, t * k * (int64_t)sizeof(float), "calibration inputs",
                         err));
        h->x_cap = t * k;
    }
    /* Pageable host memory: the copy completes before the call returns, so x may be reused. */
    CU_TRY(cudaMemcpyAsync(h->dx, x, (size_t)(t * k) * sizeof(float), cudaMemcpyHostToDevice,
                           g->stream),
           "copying calibration inputs");
    int64_t nn    = h->nsamples + nseq;
    float   beta  = (float)((double)h->nsamples / (double)nn);
    float   alpha = (float)(2.0 / (double)nn);
    /* Row-major x [t, k] is column-major x^T [k, t]: H += alpha x^T x is SYRK 'N'. */
    BLAS_TRY(cublasSsyrk(blas(g), CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, (int)k, (int)t, &alpha,
                         h->dx, (int)k, &beta, h->dH, (int)k),
             "Hessian SYRK");
    h->nsamples = nn;
    h->ntokens += t;
    return LQ_OK;
}

extern "C" lq_status lq_gpu_hess_get(lq_gpu_hess *h, lq_xstats *s, lq_err *err) {
    lq_gpu *g = h->g;
    if (s->k != h->k || !s->H)
        LQ_FAIL(err, LQ_ERR_INTERNAL, "GPU Hessian of k=%lld read into statistics of k=%lld",
                (long long)h->k, (long long)s->k);
    CU_TRY(cudaMemcpyAsync(s->H, h->dH, (size_t)(h->k * h->k) * sizeof(float),
                           cudaMemcpyDeviceToHost, g->stream),
           "reading a Hessian");
    CU_TRY(cudaStreamSynchronize(g->stream), "reading a Hessian");
    s->nsamples = h->nsamples;
    s->ntokens  = h->ntokens;
    return LQ_OK;
}

extern "C" void lq_gpu_hess_free(lq_gpu_hess *h) {
    if (!h)
        return;
    if (h->g->stream)
        cudaStreamSynchronize(h->g->stream);
    dev_free(h->g, h->dH, h->k * h->k * (int64_t)sizeof(float));
    dev_free(h->g, h->dx, h->x_cap * (int64_t)sizeof(float));
    free(h);
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

/* device workspace in bytes (grown, reused) */
static lq_status ensure_work(lq_gpu *g, int64_t bytes, lq_err *err) {
    const int64_t elems = (bytes + (int64_t)sizeof(float) - 1) / (int64_t)sizeof(float);
    if (elems <= g->work_elems)
        return LQ_OK;
    dev_free(g, g->dwork, g->work_elems * (int64_t)sizeof(float));
    g->dwork      = NULL;
    g->work_elems = 0;
    LQ_TRY(dev_alloc(g, (void **)&g->dwork, elems * (int64_t)sizeof(float), "cuSOLVER workspace",
                     err));
    g->work_elems = elems;
    return LQ_OK;
}

static lq_status solver_info(lq_gpu *g, int *info, lq_err *err) {
    CU_TRY(cudaMemcpyAsync(info, g->dinfo, sizeof(int), cudaMemcpyDeviceToHost, g->stream),
           "reading the solver status");
    CU_TRY(cudaStreamSynchronize(g->stream), "Cholesky factorization");
    return LQ_OK;
}

/* A = L L^T in place (lower); *info as LAPACK's. */
static lq_status xpotrf(lq_gpu *g, cusolverDnParams_t prm, float *A, int64_t k, int *info,
                        const char *what, lq_err *err) {
    size_t dws = 0, hws = 0;
    SOLVER_TRY(cusolverDnXpotrf_bufferSize(g->solver, prm, CUBLAS_FILL_MODE_LOWER, k, CUDA_R_32F,
                                           A, k, CUDA_R_32F, &dws, &hws),
               "potrf workspace");
    LQ_TRY(ensure_work(g, (int64_t)dws, err));
    void *hw = hws ? malloc(hws) : NULL;
    if (hws && !hw)
        return lq_fail(err, LQ_ERR_NOMEM, "out of memory for the cuSOLVER host workspace");
    const cusolverStatus_t c = cusolverDnXpotrf(g->solver, prm, CUBLAS_FILL_MODE_LOWER, k,
                                                CUDA_R_32F, A, k, CUDA_R_32F, g->dwork, dws, hw,
                                                hws, g->dinfo);
    const lq_status st = c == CUSOLVER_STATUS_SUCCESS
                             ? solver_info(g, info, err)
                             : lq_fail(err, LQ_ERR_CUDA, "GPU: %s: cuSOLVER status %d", what,
                                       (int)c);
    free(hw); /* after the synchronization in solver_info */
    return st;
}

static lq_status factor_with(lq_gpu *g, cusolverDnParams_t prm, float *dB, int64_t k,
                             lq_err *err) {
    int info = 0;
    LQ_TRY(xpotrf(g, prm, g->dU, k, &info, "Cholesky factorization", err));
    if (info != 0)
        return LQ_ERR_CHOLESKY;
    CU_TRY(cudaMemsetAsync(dB, 0, (size_t)(k * k) * sizeof(float), g->stream), "identity");
    k_set_diag<<<(unsigned)((k + 255) / 256), 256, 0, g->stream>>>(dB, k);
    CU_TRY(cudaGetLastError(), "identity");
    SOLVER_TRY(cusolverDnXpotrs(g->solver, prm, CUBLAS_FILL_MODE_LOWER, k, k, CUDA_R_32F, g->dU,
                                k, CUDA_R_32F, dB, k, g->dinfo),
               "Cholesky inverse");
    LQ_TRY(solver_info(g, &info, err));
    if (info != 0)
        return LQ_ERR_CHOLESKY;
    CU_TRY(cudaMemcpyAsync(g->dU, dB, (size_t)(k * k) * sizeof(float), cudaMemcpyDeviceToDevice,
                           g->stream),
           "copying the inverse");
    LQ_TRY(xpotrf(g, prm, g->dU, k, &info, "Cholesky factorization of the inverse", err));
    if (info != 0)
        return LQ_ERR_CHOLESKY;
    k_zero_upper<<<tri_grid(k), 256, 0, g->stream>>>(g->dU, k);
    CU_TRY(cudaGetLastError(), "clearing the factor");
    return LQ_OK;
}

static lq_status gpu_factor(void *ctx, float *Hp, int64_t k, lq_err *err) {
    lq_gpu *g = (lq_gpu *)ctx;
    if (g->U_k != k) {
        dev_free(g, g->dU, g->U_k * g->U_k * (int64_t)sizeof(float));
        g->dU  = NULL;
        g->U_k = 0;
        LQ_TRY(dev_alloc(g, (void **)&g->dU, k * k * (int64_t)sizeof(float), "the GPTQ inverse",
                         err));
        g->U_k = k;
    }
    CU_TRY(cudaMemcpyAsync(g->dU, Hp, (size_t)(k * k) * sizeof(float), cudaMemcpyHostToDevice,
                           g->stream),
           "copying the Hessian");
    float *dB = NULL; /* the right-hand sides of the inverse, then the inverse */
    LQ_TRY(dev_alloc(g, (void **)&dB, k * k * (int64_t)sizeof(float), "the GPTQ inverse", err));
    cusolverDnParams_t prm = NULL;
    lq_status          st  = LQ_OK;
    if (cusolverDnCreateParams(&prm) != CUSOLVER_STATUS_SUCCESS)
        st = lq_fail(err, LQ_ERR_CUDA, "GPU: cusolverDnCreateParams failed");
    else
        st = factor_with(g, prm, dB, k, err);
    if (prm)
        cusolverDnDestroyParams(prm);
    cudaStreamSynchronize(g->stream);
    dev_free(g, dB, k * k * (int64_t)sizeof(float));
    return st;
}

/* ------------------------------------------------------------------------------------------
 * GPTQ column sweep. One thread per output row r; a block of SW_ROWS rows keeps the current
 * column block of Wt (cnt x SW_ROWS) in shared memory, so the O(cnt^2) intra-block updates
 * never touch global memory. U is read row by row (the same address across the warp:
 * broadcast). The arithmetic is the CPU's, operation for operation (lq_gptq.c cpu_sweep).
 * ------------------------------------------------------------------------------------------ */
#define SW_ROWS 64


struct sweep_args {
    float         *Wt;   /* [k, n] */
    const float   *U;    /* [k, k] row-major upper */
    float         *Err;  /* [bs, n] */
    uint8_t       *qt;   /* [k, n] codes, permuted order */
    float         *sc_r, *zr_r;
    const float   *ssc, *szr;
    const int32_t *gcol;
    float         *scales;
    int32_t       *zeros;
    double        *loss; /* [n]: per row, summed over the column blocks */
    int64_t        n, k, g, i1, i2;
    int            bits, sym, v1_safe, static_groups;
};

__global__ void k_sweep_block(sweep_args a) {
    extern __shared__ float tile[]; /* [cnt][SW_ROWS] */
    int64_t r   = (int64_t)blockIdx.x * SW_ROWS + threadIdx.x;
    int64_t n   = a.n, k = a.k, i1 = a.i1, i2 = a.i2, cnt = i2 - i1;
    int     tid = threadIdx.x;
    bool    on  = r < n;
    int     maxq = (1 << a.bits) - 1;
    if (on)
        for (int64_t j = 0; j < cnt; j++)
            tile[j * SW_ROWS + tid] = a.Wt[(i1 + j) * n + r];
    if (!on)
        return; /* no block-wide barrier follows */
    float  sc = a.sc_r[r], zr = a.zr_r[r];
    double l  = 0;
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
        float w    = tile[(i - i1) * SW_ROWS + tid];
        float qf   = rintf(w / s) + z;
        int   code = qf < 0 ? 0 : qf > (float)maxq ? maxq : (int)qf;
        float qv   = s * ((float)code - z);
        a.qt[i * n + r] = (uint8_t)code;
        float diff = w - qv;
        l += (double)diff * diff / ((double)d * d) / 2;
        float e = diff / d;
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

static lq_status gpu_sweep(void *ctx, lq_gptq_sweep *sw, lq_err *err) {
    lq_gpu *g = (lq_gpu *)ctx;
    int64_t n = sw->n, k = sw->k, bs = sw->bs, G = sw->g ? (k + sw->g - 1) / sw->g : 1;
    if (!g->dU || g->U_k != k)
        LQ_FAIL(err, LQ_ERR_INTERNAL, "GPU GPTQ sweep without a factorization");
    if (bs > 256)
        bs = 256; /* the tile is bs x SW_ROWS floats of shared memory */
    size_t shm = (size_t)bs * SW_ROWS * sizeof(float);
    if (shm > 48 * 1024)
        CU_TRY(cudaFuncSetAttribute(k_sweep_block, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)shm),
               "sweep shared memory");

    /* One device allocation for everything the sweep touches. */
    int64_t nk = n * k, szs[] = {nk * 4, bs * n * 4, nk, n * 4, n * 4, G * n * 4, G * n * 4,
                                 k * 4, G * n * 4, G * n * 4, n * 8};
    int64_t off[11], total = 0;
    for (int i = 0; i < 11; i++) {
        off[i] = total;
        total += (szs[i] + 255) / 256 * 256;
    }
    char *base = NULL;
    LQ_TRY(dev_alloc(g, (void **)&base, total, "the GPTQ sweep", err));
    sweep_args a;
    memset(&a, 0, sizeof a);
    a.Wt      = (float *)(base + off[0]);
    a.Err     = (float *)(base + off[1]);
    a.qt      = (uint8_t *)(base + off[2]);
    a.sc_r    = (float *)(base + off[3]);
    a.zr_r    = (float *)(base + off[4]);
    float *ds = (float *)(base + off[5]), *dz = (float *)(base + off[6]);
    a.gcol    = (const int32_t *)(base + off[7]);
    a.scales  = (float *)(base + off[8]);
    a.zeros   = (int32_t *)(base + off[9]);
    a.loss    = (double *)(base + off[10]);
    a.U       = g->dU;
    a.ssc     = sw->ssc ? ds : NULL;
    a.szr     = sw->szr ? dz : NULL;
    a.n = n, a.k = k, a.g = sw->g;
    a.bits = sw->qs.bits, a.sym = sw->qs.sym, a.v1_safe = sw->qs.v1_safe;
    a.static_groups = sw->static_groups;

    lq_status   st = LQ_OK;
    cudaError_t e  = cudaSuccess;
    uint8_t    *qt       = (uint8_t *)malloc((size_t)nk);
    double     *row_loss = (double *)malloc((size_t)n * sizeof(double));
    if (!qt || !row_loss) {
        st = lq_fail(err, LQ_ERR_NOMEM, "out of memory for GPTQ codes");
        goto done;
    }
#define SW_CHECK(call, what)                                                                   \
    if ((e = (call)) != cudaSuccess) {                                                         \
        st = cuda_fail(err, e, (what));                                                        \
        goto done;                                                                             \
    }
    SW_CHECK(cudaMemcpyAsync(a.Wt, sw->Wt, (size_t)nk * 4, cudaMemcpyHostToDevice, g->stream),
             "copying weights");
    SW_CHECK(cudaMemcpyAsync(a.sc_r, sw->sc_r, (size_t)n * 4, cudaMemcpyHostToDevice, g->stream),
             "copying parameters");
    SW_CHECK(cudaMemcpyAsync(a.zr_r, sw->zr_r, (size_t)n * 4, cudaMemcpyHostToDevice, g->stream),
             "copying parameters");
    SW_CHECK(cudaMemcpyAsync((void *)a.gcol, sw->gcol, (size_t)k * 4, cudaMemcpyHostToDevice,
                             g->stream),
             "copying groups");
    if (sw->ssc) {
        SW_CHECK(cudaMemcpyAsync(ds, sw->ssc, (size_t)(G * n) * 4, cudaMemcpyHostToDevice,
                                 g->stream),
                 "copying static groups");
        SW_CHECK(cudaMemcpyAsync(dz, sw->szr, (size_t)(G * n) * 4, cudaMemcpyHostToDevice,
                                 g->stream),
                 "copying static groups");
    }
    SW_CHECK(cudaMemsetAsync(a.loss, 0, (size_t)n * sizeof(double), g->stream),
             "clearing the loss");
    for (int64_t i1 = 0; i1 < k; i1 += bs) {
        int64_t i2 = i1 + bs < k ? i1 + bs : k, cnt = i2 - i1;
        a.i1 = i1, a.i2 = i2;
        k_sweep_block<<<(unsigned)((n + SW_ROWS - 1) / SW_ROWS), SW_ROWS,
                        (size_t)cnt * SW_ROWS * sizeof(float), g->stream>>>(a);
        SW_CHECK(cudaGetLastError(), "GPTQ column sweep");
        if (i2 < k) {
            /* Row-major Wt[i2:] -= U[i1:i2, i2:]^T Err, i.e. column-major
             * Wt'(n x k-i2) -= Err'(n x cnt) * U'(k-i2 x cnt)^T. */
            const float    mone = -1.f, one = 1.f;
            cublasStatus_t b = cublasSgemm(blas(g), CUBLAS_OP_N, CUBLAS_OP_T, (int)n, (int)(k - i2),
                                           (int)cnt, &mone, a.Err, (int)n, g->dU + i1 * k + i2,
                                           (int)k, &one, a.Wt + i2 * n, (int)n);
            if (b != CUBLAS_STATUS_SUCCESS) {
                st = lq_fail(err, LQ_ERR_CUDA, "GPU: GPTQ lazy update: cuBLAS status %d", (int)b);
                goto done;
            }
        }
    }
    SW_CHECK(cudaMemcpyAsync(sw->Wt, a.Wt, (size_t)nk * 4, cudaMemcpyDeviceToHost, g->stream),
             "reading weights");
    SW_CHECK(cudaMemcpyAsync(qt, a.qt, (size_t)nk, cudaMemcpyDeviceToHost, g->stream),
             "reading codes");
    SW_CHECK(cudaMemcpyAsync(sw->sc_r, a.sc_r, (size_t)n * 4, cudaMemcpyDeviceToHost, g->stream),
             "reading parameters");
    SW_CHECK(cudaMemcpyAsync(sw->zr_r, a.zr_r, (size_t)n * 4, cudaMemcpyDeviceToHost, g->stream),
             "reading parameters");
    if (sw->g && !sw->static_groups) {
        SW_CHECK(cudaMemcpyAsync(sw->scales, a.scales, (size_t)(G * n) * 4, cudaMemcpyDeviceToHost,
                                 g->stream),
                 "reading scales");
        SW_CHECK(cudaMemcpyAsync(sw->zeros, a.zeros, (size_t)(G * n) * 4, cudaMemcpyDeviceToHost,
                                 g->stream),
                 "reading zeros");
    }
    SW_CHECK(cudaMemcpyAsync(row_loss, a.loss, (size_t)n * sizeof(double),
                             cudaMemcpyDeviceToHost, g->stream),
             "reading the loss");
    SW_CHECK(cudaStreamSynchronize(g->stream), "GPTQ column sweep");
#undef SW_CHECK
    sw->loss = 0;
    for (int64_t r = 0; r < n; r++)
        sw->loss += row_loss[r];
    for (int64_t i = 0; i < k; i++) {
        int64_t oc = sw->perm[i];
        for (int64_t r = 0; r < n; r++)
            sw->q[r * k + oc] = qt[i * n + r];
    }
done:
    free(qt);
    free(row_loss);
    if (st != LQ_OK)
        cudaStreamSynchronize(g->stream);
    dev_free(g, base, total);
    return st;
}

/* ------------------------------------------------------------------------------------------
 * Dense GEMM of the calibration forwards. The weights are uploaded on every call: methods
 * rewrite them in place between forwards (AWQ scaling, GPTQ fake quantization), and the upload
 * is no larger than the activations' for calibration-sized chunks.
 * ------------------------------------------------------------------------------------------ */
static lq_status grow(lq_gpu *g, float **p, int64_t *cap, int64_t elems, const char *what,
                      lq_err *err) {
    if (elems <= *cap)
        return LQ_OK;
    dev_free(g, *p, *cap * (int64_t)sizeof(float));
    *p   = NULL;
    *cap = 0;
    LQ_TRY(dev_alloc(g, (void **)p, elems * (int64_t)sizeof(float), what, err));
    *cap = elems;
    return LQ_OK;
}

extern "C" lq_status lq_gpu_dense_gemm(void *user, const float *W, int64_t n, int64_t k,
                                       const float *x, int64_t t, float *y, lq_err *err) {
    lq_gpu *g = (lq_gpu *)user;
    if (n > INT32_MAX || k > INT32_MAX || t > INT32_MAX)
        return LQ_ERR_UNSUPPORTED;
    LQ_TRY(grow(g, &g->dgW, &g->gW_cap, n * k, "layer weights", err));
    LQ_TRY(grow(g, &g->dgx, &g->gx_cap, t * k, "activations", err));
    LQ_TRY(grow(g, &g->dgy, &g->gy_cap, t * n, "activations", err));
    CU_TRY(cudaMemcpyAsync(g->dgW, W, (size_t)(n * k) * sizeof(float), cudaMemcpyHostToDevice,
                           g->stream),
           "copying layer weights");
    CU_TRY(cudaMemcpyAsync(g->dgx, x, (size_t)(t * k) * sizeof(float), cudaMemcpyHostToDevice,
                           g->stream),
           "copying activations");
    /* Row-major y = x W^T is column-major y' (n x t) = W' (k x n)^T x' (k x t). */
    const float one = 1.f, zero = 0.f;
    BLAS_TRY(cublasSgemm(blas(g), CUBLAS_OP_T, CUBLAS_OP_N, (int)n, (int)t, (int)k, &one, g->dgW,
                         (int)k, g->dgx, (int)k, &zero, g->dgy, (int)n),
             "linear forward");
    CU_TRY(cudaMemcpyAsync(y, g->dgy, (size_t)(t * n) * sizeof(float), cudaMemcpyDeviceToHost,
                           g->stream),
           "reading activations");
    CU_TRY(cudaStreamSynchronize(g->stream), "linear forward");
    return LQ_OK;
}

static lq_status grow_bytes(lq_gpu *g, void **p, int64_t *cap, int64_t bytes, const char *what,
                            lq_err *err) {
    if (bytes <= *cap)
        return LQ_OK;
    dev_free(g, *p, *cap);
    *p   = NULL;
    *cap = 0;
    LQ_TRY(dev_alloc(g, p, bytes, what, err));
    *cap = bytes;
    return LQ_OK;
}

/* The descriptor on the device. Dense weights are float32 on the host and fp16 on the device:
 * they go up as float32 and are rounded there; the other formats' arrays go up as they are. */
static lq_status upload_linear(lq_gpu *g, const lq_qlinear *w, lq_qlinear *dw, lq_err *err) {
    if (w->format != LQ_FMT_DENSE) {
        const size_t bytes = lq_qlinear_device_bytes(w);
        LQ_TRY(grow_bytes(g, &g->dq, &g->q_cap, (int64_t)bytes, "layer weights", err));
        if (lq_qlinear_upload(w, g->dq, bytes, dw, g->stream) != LQ_OK)
            return cuda_fail(err, cudaGetLastError(), "copying layer weights");
        return LQ_OK;
    }
    const int64_t nk = w->n * w->k, wb = (nk * 2 + 255) & ~(int64_t)255;
    LQ_TRY(grow(g, &g->dgW, &g->gW_cap, nk, "layer weights", err));
    LQ_TRY(grow_bytes(g, &g->dq, &g->q_cap, wb + (w->bias ? w->n * 2 : 0), "layer weights", err));
    CU_TRY(cudaMemcpyAsync(g->dgW, w->dense, (size_t)nk * sizeof(float), cudaMemcpyHostToDevice,
                           g->stream),
           "copying layer weights");
    if (lq_cuda_f32_to_f16(g->dgW, g->dq, nk, g->stream) != LQ_OK)
        return cuda_fail(err, cudaGetLastError(), "rounding layer weights to fp16");
    *dw       = *w;
    dw->dense = g->dq;
    if (w->bias) {
        CU_TRY(cudaMemcpyAsync((char *)g->dq + wb, w->bias, (size_t)w->n * 2,
                               cudaMemcpyHostToDevice, g->stream),
               "copying the bias");
        dw->bias = (const uint16_t *)((char *)g->dq + wb);
    }
    return LQ_OK;
}

extern "C" lq_status lq_gpu_qlinear(void *user, const lq_qlinear *w, const float *x, int64_t t,
                                    float *y, lq_err *err) {
    lq_gpu       *g = (lq_gpu *)user;
    const int64_t n = w->n, k = w->k;
    lq_qlinear    dw;
    LQ_TRY(upload_linear(g, w, &dw, err));
    const size_t ws = lq_qlinear_workspace_cuda(&dw, t);
    LQ_TRY(grow(g, &g->dgx, &g->gx_cap, t * k, "activations", err));
    LQ_TRY(grow(g, &g->dgy, &g->gy_cap, t * n, "activations", err));
    LQ_TRY(grow_bytes(g, &g->dxh, &g->xh_cap, t * k * 2, "activations", err));
    LQ_TRY(grow_bytes(g, &g->dyh, &g->yh_cap, t * n * 2, "activations", err));
    LQ_TRY(grow_bytes(g, &g->dkws, &g->kws_cap, (int64_t)ws, "kernel workspace", err));
    CU_TRY(cudaMemcpyAsync(g->dgx, x, (size_t)(t * k) * sizeof(float), cudaMemcpyHostToDevice,
                           g->stream),
           "copying activations");
    lq_status s = lq_cuda_f32_to_f16(g->dgx, g->dxh, t * k, g->stream);
    if (s == LQ_OK)
        s = lq_qlinear_forward_cuda(g->kc, &dw, g->dxh, t, g->dyh, g->dkws, ws, g->stream);
    if (s == LQ_OK)
        s = lq_cuda_f16_to_f32(g->dyh, g->dgy, t * n, g->stream);
    if (s != LQ_OK) {
        const char       *why = lq_cuda_ctx_error(g->kc);
        const lq_qformat *f   = lq_qformat_get((lq_format)w->format);
        return lq_fail(err, s, "GPU: %s linear [%lld x %lld] over %lld tokens: %s",
                       f ? f->name : "?", (long long)n, (long long)k,
                       (long long)t, why && *why ? why : lq_status_name(s));
    }
    CU_TRY(cudaMemcpyAsync(y, g->dgy, (size_t)(t * n) * sizeof(float), cudaMemcpyDeviceToHost,
                           g->stream),
           "reading activations");
    CU_TRY(cudaStreamSynchronize(g->stream), "linear forward");
    return LQ_OK;
}

extern "C" void lq_gpu_gptq_backend(lq_gpu *g, lq_gptq_backend *be) {
    be->ctx    = g;
    be->factor = gpu_factor;
    be->sweep  = gpu_sweep;
}
