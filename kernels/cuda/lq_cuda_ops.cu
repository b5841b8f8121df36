/* The cuda op backend (lq_ops.h): every op of the table on device memory, on the backend's
 * stream, asynchronous (download and sync wait). Each kernel is small and plain, one thread per
 * output element or one block per row, so that the op test (tests/test_ops.c -b cuda) pins a
 * mistake to one op. Products go to cuBLAS: float32 pedantic under LQ_PREC_F32 (the CPU-parity
 * switch), bf16 weights with float32 accumulation for the linears and TF32 for attention under
 * LQ_PREC_FAST. Reductions (norms, softmax, statistics) are float32 or double in a fixed order:
 * the same inputs give the same bits on every run. */
#include "lq_cuda_impl.cuh"
extern "C" {
#include "lq_ops.h"
}

#include <string.h>

#define NT 256 /* threads of a block */
/* lq_ops_impl.h's clip steps (that header is C: its inline bodies are the host backends') */
#define LQ_AWQ_CLIP_GRID_D  20
#define LQ_AWQ_CLIP_STEPS_D 10

/* ------------------------------------------------------------------------------------------
 * Errors: the cause goes into be->errmsg (and the context's), the status out.
 * ------------------------------------------------------------------------------------------ */
static lq_status rt_fail(lq_be *be, cudaError_t e, const char *what) {
    (void)cudaGetLastError();
    snprintf(be->errmsg, sizeof be->errmsg, "cuda: %s: %s", what, cudaGetErrorString(e));
    return e == cudaErrorMemoryAllocation ? LQ_ERR_NOMEM : LQ_ERR_CUDA;
}

static lq_status launched(lq_be *be, const char *what) {
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? LQ_OK : rt_fail(be, e, what);
}

static lq_status blas_failed(lq_be *be, cublasStatus_t b, const char *what) {
    snprintf(be->errmsg, sizeof be->errmsg, "cuda: %s: cuBLAS %s", what, cublasGetStatusName(b));
    return b == CUBLAS_STATUS_ALLOC_FAILED ? LQ_ERR_NOMEM : LQ_ERR_CUDA;
}

#define RT_TRY(call, what)                                                                         \
    do {                                                                                           \
        const cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess)                                                                     \
            return rt_fail(be, e_, (what));                                                        \
    } while (0)

#define BLAS_TRY(call, what)                                                                       \
    do {                                                                                           \
        const cublasStatus_t b_ = (call);                                                          \
        if (b_ != CUBLAS_STATUS_SUCCESS)                                                           \
            return blas_failed(be, b_, (what));                                                    \
    } while (0)

static cudaStream_t strm(const lq_be *be) {
    return (cudaStream_t)be->stream;
}

static unsigned blocks_for(int64_t count) {
    const int64_t b = (count + NT - 1) / NT;
    return (unsigned)(b < 1 ? 1 : b > 2147483647 ? 2147483647 : b);
}

/* The shared handle on this stream: pedantic float32 for LQ_PREC_F32, tensor cores otherwise. */
static cublasHandle_t blas(lq_be *be) {
    return lq_cuda_ctx_blas(be->cuda, be->stream,
                            be->precision == LQ_PREC_F32 ? LQ_CUDA_MATH_FP32 : LQ_CUDA_MATH_KERNELS);
}

static int fits_int(int64_t v) {
    return v >= 0 && v <= INT32_MAX;
}

/* ------------------------------------------------------------------------------------------
 * Memory
 * ------------------------------------------------------------------------------------------ */
static lq_status cu_alloc(lq_be *be, void **p, size_t bytes) {
    *p = NULL;
    if (bytes == 0)
        return LQ_OK;
    const lq_status st = lq_cuda_alloc(be->cuda, p, bytes);
    if (st != LQ_OK) {
        snprintf(be->errmsg, sizeof be->errmsg, "cuda: allocating %.1f MiB: %s",
                 (double)bytes / 1048576.0, lq_cuda_ctx_error(be->cuda));
        return st;
    }
    lq_be_count(be, (int64_t)bytes);
    return LQ_OK;
}

static void cu_release(lq_be *be, void *p, size_t bytes) {
    if (!p)
        return;
    /* cudaFree waits for the device: what the stream still does with p finishes first */
    lq_cuda_free(be->cuda, p, bytes);
    lq_be_count(be, -(int64_t)bytes);
}

static lq_status cu_upload(lq_be *be, void *dst, const void *src, size_t bytes) {
    if (bytes)
        RT_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, strm(be)), "upload");
    return LQ_OK;
}

static lq_status cu_download(lq_be *be, void *dst, const void *src, size_t bytes) {
    if (bytes)
        RT_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, strm(be)), "download");
    RT_TRY(cudaStreamSynchronize(strm(be)), "download");
    return LQ_OK;
}

static lq_status cu_copy(lq_be *be, void *dst, const void *src, size_t bytes) {
    if (bytes && dst != src)
        RT_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, strm(be)), "copy");
    return LQ_OK;
}

static lq_status cu_zero(lq_be *be, void *dst, size_t bytes) {
    if (bytes)
        RT_TRY(cudaMemsetAsync(dst, 0, bytes, strm(be)), "zero");
    return LQ_OK;
}

static lq_status cu_copy2d(lq_be *be, float *dst, int64_t ldd, const float *src, int64_t lds,
                           int64_t rows, int64_t cols) {
    if (rows <= 0 || cols <= 0)
        return LQ_OK;
    RT_TRY(cudaMemcpy2DAsync(dst, (size_t)ldd * 4, src, (size_t)lds * 4, (size_t)cols * 4,
                             (size_t)rows, cudaMemcpyDeviceToDevice, strm(be)),
           "copy2d");
    return LQ_OK;
}

static lq_status cu_sync(lq_be *be) {
    RT_TRY(cudaStreamSynchronize(strm(be)), "sync");
    return LQ_OK;
}

/* ------------------------------------------------------------------------------------------
 * Block reductions (NT threads)
 * ------------------------------------------------------------------------------------------ */
template <typename T> __device__ T warp_sum(T v) {
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* The sum over the block, returned to every thread (sh: NT / 32 slots). */
template <typename T> __device__ T block_sum(T v, T *sh) {
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0)
        sh[threadIdx.x >> 5] = v;
    __syncthreads();
    T s = 0;
    for (int w = 0; w < NT / 32; w++)
        s += sh[w];
    __syncthreads();
    return s;
}

__device__ float block_max(float v, float *sh) {
    v = warp_max(v);
    if ((threadIdx.x & 31) == 0)
        sh[threadIdx.x >> 5] = v;
    __syncthreads();
    float m = -INFINITY;
    for (int w = 0; w < NT / 32; w++)
        m = fmaxf(m, sh[w]);
    __syncthreads();
    return m;
}

/* ------------------------------------------------------------------------------------------
 * Elementwise and per-row ops
 * ------------------------------------------------------------------------------------------ */
static __global__ void k_rmsnorm(const float *__restrict__ x, const float *__restrict__ w, int64_t d,
                          double eps, int plus_one, float *out) {
    __shared__ double sh[NT / 32];
    const float *xr = x + (int64_t)blockIdx.x * d;
    float       *o  = out + (int64_t)blockIdx.x * d;
    double       ss = 0;
    for (int64_t i = threadIdx.x; i < d; i += NT)
        ss += (double)xr[i] * xr[i];
    ss              = block_sum(ss, sh);
    const float inv = (float)(1.0 / sqrt(ss / (double)d + eps));
    for (int64_t i = threadIdx.x; i < d; i += NT) /* out may be x: each thread its own values */
        o[i] = plus_one ? __fmul_rn(__fmul_rn(xr[i], inv), __fadd_rn(1.0f, w[i]))
                        : __fmul_rn(w[i], __fmul_rn(xr[i], inv));
}

static lq_status cu_rmsnorm(lq_be *be, const float *x, const float *w, int64_t rows, int64_t d,
                            double eps, int plus_one, float *out) {
    if (rows <= 0)
        return LQ_OK;
    if (rows > INT32_MAX)
        return LQ_ERR_UNSUPPORTED;
    k_rmsnorm<<<(unsigned)rows, NT, 0, strm(be)>>>(x, w, d, eps, plus_one, out);
    return launched(be, "rmsnorm");
}

/* one thread per (token, head, pair) */
static __global__ void k_rope(float *x, int64_t T, int64_t ld, int64_t nheads, int64_t half,
                       int64_t seqlen, const float *__restrict__ cs,
                       const float *__restrict__ sn) {
    const int64_t e = (int64_t)blockIdx.x * NT + threadIdx.x;
    if (e >= T * nheads * half)
        return;
    const int64_t j = e % half, h = (e / half) % nheads, t = e / (half * nheads);
    const int64_t p  = t % seqlen;
    float        *v  = x + t * ld + h * 2 * half;
    const float   c = cs[p * half + j], s = sn[p * half + j];
    const float   x1 = v[j], x2 = v[j + half];
    v[j]             = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));
    v[j + half]      = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
}

static lq_status cu_rope(lq_be *be, float *x, int64_t T, int64_t ld, int64_t nheads,
                         int64_t half, int64_t seqlen, const float *cs, const float *sn) {
    if (T <= 0)
        return LQ_OK;
    k_rope<<<blocks_for(T * nheads * half), NT, 0, strm(be)>>>(x, T, ld, nheads, half, seqlen, cs,
                                                               sn);
    return launched(be, "rope");
}

__device__ __forceinline__ float gelu_tanh_d(float x) {
    const float beta  = (float)(1.41421356237309504880 * 1.12837916709551257390 * 0.5);
    const float kappa = 0.044715f;
    const float inner = __fmul_rn(beta, __fadd_rn(x, __fmul_rn(__fmul_rn(kappa, x), __fmul_rn(x, x))));
    return __fmul_rn(__fmul_rn(0.5f, x), __fadd_rn(1.0f, tanhf(inner)));
}

static __global__ void k_glu(float *g, const float *gate, const float *up, int64_t ld, int64_t T,
                      int64_t ff, int act) {
    const int64_t e = (int64_t)blockIdx.x * NT + threadIdx.x;
    if (e >= T * ff)
        return;
    const int64_t t = e / ff, i = e % ff;
    const float   x = gate[t * ld + i], u = up[t * ld + i];
    g[e] = act == LQ_ACT_GELU_TANH_GLU ? __fmul_rn(gelu_tanh_d(x), u)
                                       : __fmul_rn(__fdiv_rn(x, __fadd_rn(1.0f, expf(-x))), u);
}

static lq_status cu_glu(lq_be *be, float *g, const float *gate, const float *up, int64_t ld,
                        int64_t T, int64_t ff, int act) {
    if (T * ff <= 0)
        return LQ_OK;
    if (g == gate && ld != ff)
        return LQ_ERR_INVALID_ARG; /* rows would overlap other threads' inputs */
    k_glu<<<blocks_for(T * ff), NT, 0, strm(be)>>>(g, gate, up, ld, T, ff, act);
    return launched(be, "glu");
}

/* out = a + b (SUB 0) or a - b (SUB 1), one rounding */
template <int SUB>
static __global__ void k_addsub(float *out, const float *a, const float *b, int64_t count) {
    const int64_t i = (int64_t)blockIdx.x * NT + threadIdx.x;
    if (i < count)
        out[i] = SUB ? __fsub_rn(a[i], b[i]) : __fadd_rn(a[i], b[i]);
}

template <int SUB>
static lq_status addsub(lq_be *be, float *out, const float *a, const float *b, int64_t count) {
    if (count <= 0)
        return LQ_OK;
    k_addsub<SUB><<<blocks_for(count), NT, 0, strm(be)>>>(out, a, b, count);
    return launched(be, SUB ? "sub" : "add");
}

static lq_status cu_add(lq_be *be, float *out, const float *a, const float *b, int64_t count) {
    return addsub<0>(be, out, a, b, count);
}

static __global__ void k_softcap(float *x, int64_t count, float cap) {
    const int64_t i = (int64_t)blockIdx.x * NT + threadIdx.x;
    if (i < count)
        x[i] = __fmul_rn(tanhf(__fdiv_rn(x[i], cap)), cap);
}

static lq_status cu_softcap(lq_be *be, float *x, int64_t count, float cap) {
    if (count <= 0)
        return LQ_OK;
    k_softcap<<<blocks_for(count), NT, 0, strm(be)>>>(x, count, cap);
    return launched(be, "softcap");
}

/* ------------------------------------------------------------------------------------------
 * Attention: per sequence and per query head offset r within a KV group, the heads
 * h = j * group + r of a batch of KV heads j: S = scale Q_h K_j^T (all seqlen x seqlen, the
 * masked part discarded by the softmax), P = softmax(mask(softcap(S))), O_h = P V_j, each a
 * strided-batched cuBLAS product. S of a batch is the scratch: batches are sized so that it
 * stays under ATT_SCRATCH bytes.
 * ------------------------------------------------------------------------------------------ */
#define ATT_SCRATCH ((int64_t)512 << 20)

/* one block per row of S: [batch][query i][key j] */
static __global__ void k_att_softmax(float *S, int64_t L, int64_t window, float softcap) {
    __shared__ float sh[NT / 32];
    const int64_t    i   = blockIdx.x % L;
    float           *row = S + (int64_t)blockIdx.x * L;
    const int64_t    lo  = window > 0 && i - window + 1 > 0 ? i - window + 1 : 0;
    float            mx  = -INFINITY;
    for (int64_t j = lo + threadIdx.x; j <= i; j += NT) {
        float v = row[j];
        if (softcap > 0)
            v = __fmul_rn(tanhf(__fdiv_rn(v, softcap)), softcap), row[j] = v;
        mx = fmaxf(mx, v);
    }
    mx        = block_max(mx, sh);
    float sum = 0.f;
    for (int64_t j = lo + threadIdx.x; j <= i; j += NT) {
        const float e = expf(__fsub_rn(row[j], mx));
        row[j]        = e;
        sum += e;
    }
    sum             = block_sum(sum, sh);
    const float inv = (float)(1.0 / (double)sum);
    for (int64_t j = threadIdx.x; j < L; j += NT)
        row[j] = j >= lo && j <= i ? __fmul_rn(row[j], inv) : 0.f;
}

/* aw[h * T + base + j] = sum over queries i of P[b][i][j]^2, h = (j0 + b) * group + r; one
 * thread per (b, j), queries in order */
static __global__ void k_att_colsq(const float *__restrict__ P, int64_t nb, int64_t L, int64_t window,
                            int64_t j0, int64_t group, int64_t r, int64_t T, int64_t base,
                            float *aw) {
    const int64_t e = (int64_t)blockIdx.x * NT + threadIdx.x;
    if (e >= nb * L)
        return;
    const int64_t b = e / L, j = e % L, h = (j0 + b) * group + r;
    const int64_t hi = window > 0 && j + window < L ? j + window : L;
    const float  *Pb = P + b * L * L;
    float         s  = 0.f;
    for (int64_t i = j; i < hi; i++) {
        const float p = Pb[i * L + j];
        s             = __fadd_rn(s, __fmul_rn(p, p));
    }
    aw[h * T + base + j] = s;
}

/* w[t] = sum over heads in order of aw[h * T + t] */
static __global__ void k_att_sum_heads(const float *__restrict__ aw, int64_t H, int64_t T, float *w) {
    const int64_t t = (int64_t)blockIdx.x * NT + threadIdx.x;
    if (t >= T)
        return;
    float s = 0.f;
    for (int64_t h = 0; h < H; h++)
        s = __fadd_rn(s, aw[h * T + t]);
    w[t] = s;
}

static lq_status cu_attention(lq_be *be, const lq_attn_args *a) {
    const int64_t L = a->seqlen, T = a->ns * L, H = a->heads, KV = a->kv_heads, hd = a->head_dim;
    const int64_t qd = H * hd, kvd = KV * hd, group = H / KV;
    if (T <= 0)
        return LQ_OK;
    if (!fits_int(L) || !fits_int(hd) || !fits_int(qd) || !fits_int(kvd) || L > (1 << 20))
        return LQ_ERR_UNSUPPORTED;
    int64_t nb = ATT_SCRATCH / (L * L * 4);
    nb         = nb < 1 ? 1 : nb > KV ? KV : nb;
    if (nb * L > INT32_MAX)
        return LQ_ERR_UNSUPPORTED;
    const int64_t s_bytes = nb * L * L * 4, aw_bytes = a->attn_w ? H * T * 4 : 0;
    void         *scr;
    LQ_TRY(lq_be_scratch(be, (size_t)(s_bytes + aw_bytes), &scr));
    float                    *S  = (float *)scr;
    float                    *aw = (float *)((char *)scr + s_bytes);
    cublasHandle_t            hb = blas(be);
    const cublasComputeType_t ct =
        be->precision == LQ_PREC_F32 ? CUBLAS_COMPUTE_32F_PEDANTIC : CUBLAS_COMPUTE_32F_FAST_TF32;
    const float one = 1.f, zero = 0.f, scale = a->scale;
    if (!hb)
        return blas_failed(be, CUBLAS_STATUS_NOT_INITIALIZED, "attention");
    for (int64_t s = 0; s < a->ns; s++)
        for (int64_t r = 0; r < group; r++)
            for (int64_t j0 = 0; j0 < KV; j0 += nb) {
                const int64_t bn = KV - j0 < nb ? KV - j0 : nb, base = s * L;
                const float  *Q  = a->q + base * qd + (j0 * group + r) * hd;
                const float  *K  = a->k + base * kvd + j0 * hd;
                /* row-major S_b [L, L] = Q_b K_b^T: column-major S^T = K Q^T */
                BLAS_TRY(cublasGemmStridedBatchedEx(
                             hb, CUBLAS_OP_T, CUBLAS_OP_N, (int)L, (int)L, (int)hd, &scale, K,
                             CUDA_R_32F, (int)kvd, hd, Q, CUDA_R_32F, (int)qd, group * hd, &zero, S,
                             CUDA_R_32F, (int)L, L * L, (int)bn, ct, CUBLAS_GEMM_DEFAULT),
                         "attention scores");
                k_att_softmax<<<(unsigned)(bn * L), NT, 0, strm(be)>>>(S, L, a->window,
                                                                       a->softcap);
                LQ_TRY(launched(be, "attention softmax"));
                if (a->attn_w) {
                    k_att_colsq<<<blocks_for(bn * L), NT, 0, strm(be)>>>(S, bn, L, a->window, j0,
                                                                         group, r, T, base, aw);
                    LQ_TRY(launched(be, "attention weights"));
                }
                if (!a->out)
                    continue;
                /* row-major O_b [L, hd] (ld qd) = P_b V_b: column-major O^T = V^T P^T */
                BLAS_TRY(cublasGemmStridedBatchedEx(
                             hb, CUBLAS_OP_N, CUBLAS_OP_N, (int)hd, (int)L, (int)L, &one,
                             a->v + base * kvd + j0 * hd, CUDA_R_32F, (int)kvd, hd, S, CUDA_R_32F,
                             (int)L, L * L, &zero, a->out + base * qd + (j0 * group + r) * hd,
                             CUDA_R_32F, (int)qd, group * hd, (int)bn, ct, CUBLAS_GEMM_DEFAULT),
                         "attention values");
            }
    if (a->attn_w) {
        k_att_sum_heads<<<blocks_for(T), NT, 0, strm(be)>>>(aw, H, T, a->attn_w);
        LQ_TRY(launched(be, "attention weights"));
    }
    return LQ_OK;
}

/* ------------------------------------------------------------------------------------------
 * Linears. Dense: cuBLAS on the weights' own type (float32, or bf16 / fp16 with the
 * activations rounded to it), float32 out. Quantized: the format's CUDA kernel, which takes and
 * gives fp16 activations (lq_qlinear_forward_cuda).
 * ------------------------------------------------------------------------------------------ */
static __global__ void k_f32_to_bf16(const float *__restrict__ x, __nv_bfloat16 *y, int64_t count) {
    const int64_t i = (int64_t)blockIdx.x * NT + threadIdx.x;
    if (i < count)
        y[i] = __float2bfloat16_rn(x[i]);
}

/* y[r, i] += bias16[i] (fp16, may be NULL) then + bias[i] (float32, may be NULL), in the order
 * of the CPU path (the kernel's bias, then the model's) */
static __global__ void k_bias(float *y, int64_t t, int64_t n, const __half *bias16, const float *bias) {
    const int64_t e = (int64_t)blockIdx.x * NT + threadIdx.x;
    if (e >= t * n)
        return;
    const int64_t i = e % n;
    float         v = y[e];
    if (bias16)
        v = __fadd_rn(v, __half2float(bias16[i]));
    if (bias)
        v = __fadd_rn(v, bias[i]);
    y[e] = v;
}

static lq_status act_to_f16(lq_be *be, const float *x, void *y, int64_t count) {
    if (lq_cuda_f32_to_f16(x, y, count, be->stream) != LQ_OK)
        return launched(be, "linear activations");
    return LQ_OK;
}

static size_t al256(size_t b) {
    return (b + 255) & ~(size_t)255;
}

static lq_status dense_linear(lq_be *be, const lq_qlinear *w, const float *bias, const float *x,
                              int64_t t, float *y) {
    const int64_t n = w->n, k = w->k;
    if (!fits_int(n) || !fits_int(k) || !fits_int(t))
        return LQ_ERR_UNSUPPORTED;
    cublasHandle_t hb = blas(be);
    if (!hb)
        return blas_failed(be, CUBLAS_STATUS_NOT_INITIALIZED, "linear");
    const float one = 1.f, zero = 0.f;
    const void *xs  = x;
    cudaDataType_t dt = CUDA_R_32F;
    if (w->dense_dtype != LQ_DENSE_F32) { /* x rounded to the weights' 16-bit type */
        void *scr;
        LQ_TRY(lq_be_scratch(be, (size_t)(t * k) * 2, &scr));
        if (w->dense_dtype == LQ_DENSE_BF16)
            k_f32_to_bf16<<<blocks_for(t * k), NT, 0, strm(be)>>>(x, (__nv_bfloat16 *)scr, t * k);
        else
            LQ_TRY(act_to_f16(be, x, scr, t * k));
        xs = scr;
        dt = w->dense_dtype == LQ_DENSE_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    }
    /* float32 weights (the CPU-parity switch, or AWQ's candidates) in TF32 under LQ_PREC_FAST */
    const cublasComputeType_t ct =
        dt != CUDA_R_32F                ? CUBLAS_COMPUTE_32F
        : be->precision == LQ_PREC_F32 ? CUBLAS_COMPUTE_32F_PEDANTIC
                                        : CUBLAS_COMPUTE_32F_FAST_TF32;
    /* row-major y [t, n] = x [t, k] W^T: column-major y^T = W x^T */
    BLAS_TRY(cublasGemmEx(hb, CUBLAS_OP_T, CUBLAS_OP_N, (int)n, (int)t, (int)k, &one, w->dense, dt,
                          (int)k, xs, dt, (int)k, &zero, y, CUDA_R_32F, (int)n, ct,
                          CUBLAS_GEMM_DEFAULT),
             "linear");
    if (w->bias || bias) {
        k_bias<<<blocks_for(t * n), NT, 0, strm(be)>>>(y, t, n, (const __half *)w->bias, bias);
        LQ_TRY(launched(be, "linear bias"));
    }
    return LQ_OK;
}

static lq_status cu_linear(lq_be *be, const lq_qlinear *w, const float *bias, const float *x,
                           int64_t t, float *y) {
    if (t <= 0)
        return LQ_OK;
    if (w->format == LQ_FMT_DENSE)
        return dense_linear(be, w, bias, x, t, y);
    const int64_t n = w->n, k = w->k;
    const size_t  xb = al256((size_t)(t * k) * 2), yb = al256((size_t)(t * n) * 2);
    const size_t  kws = lq_qlinear_workspace_cuda(w, t);
    void         *scr;
    LQ_TRY(lq_be_scratch(be, xb + yb + kws, &scr));
    __half *xh = (__half *)scr, *yh = (__half *)((char *)scr + xb);
    void   *ws = kws ? (char *)scr + xb + yb : NULL;
    LQ_TRY(act_to_f16(be, x, xh, t * k));
    const lq_status st = lq_qlinear_forward_cuda(be->cuda, w, xh, t, yh, ws, kws, be->stream);
    if (st != LQ_OK) {
        snprintf(be->errmsg, sizeof be->errmsg, "cuda: linear (format %d): %s", (int)w->format,
                 lq_cuda_ctx_error(be->cuda));
        return st;
    }
    if (lq_cuda_f16_to_f32(yh, y, t * n, be->stream) != LQ_OK)
        return launched(be, "linear output");
    if (bias) {
        k_bias<<<blocks_for(t * n), NT, 0, strm(be)>>>(y, t, n, NULL, bias);
        LQ_TRY(launched(be, "linear bias"));
    }
    return LQ_OK;
}

/* Dense float32 weights: as they are under LQ_PREC_F32, else rounded to bf16 on the device
 * (they go up as float32 through the scratch); 16-bit dense weights and the other formats' arrays
 * go up as they are. The descriptor's fp16 bias follows the weights in the same buffer. */
static lq_status cu_linear_upload(lq_be *be, const lq_qlinear *w, lq_qlinear *dw, void **mem,
                                  size_t *bytes) {
    *mem   = NULL;
    *bytes = 0;
    *dw    = *w;
    if (w->format != LQ_FMT_DENSE) {
        const size_t b = lq_qlinear_device_bytes(w);
        if (b == 0)
            return LQ_ERR_INVALID_ARG;
        LQ_TRY(cu_alloc(be, mem, b));
        *bytes             = b;
        const lq_status st = lq_qlinear_upload(w, *mem, b, dw, be->stream);
        if (st != LQ_OK)
            snprintf(be->errmsg, sizeof be->errmsg, "cuda: uploading a linear failed");
        return st;
    }
    const int64_t nk = w->n * w->k;
    const int     to_bf16 = w->dense_dtype == LQ_DENSE_F32 && be->precision != LQ_PREC_F32;
    const size_t  esz     = w->dense_dtype == LQ_DENSE_F32 && !to_bf16 ? 4 : 2;
    const size_t  wb = al256((size_t)nk * esz), bb = w->bias ? (size_t)w->n * 2 : 0;
    LQ_TRY(cu_alloc(be, mem, wb + bb));
    *bytes = wb + bb;
    if (to_bf16) {
        void *scr;
        LQ_TRY(lq_be_scratch(be, (size_t)nk * 4, &scr));
        LQ_TRY(cu_upload(be, scr, w->dense, (size_t)nk * 4));
        k_f32_to_bf16<<<blocks_for(nk), NT, 0, strm(be)>>>((const float *)scr,
                                                           (__nv_bfloat16 *)*mem, nk);
        LQ_TRY(launched(be, "rounding weights to bf16"));
        dw->dense_dtype = LQ_DENSE_BF16;
    } else {
        LQ_TRY(cu_upload(be, *mem, w->dense, (size_t)nk * esz));
    }
    dw->dense = *mem;
    if (w->bias) {
        LQ_TRY(cu_upload(be, (char *)*mem + wb, w->bias, bb));
        dw->bias = (const uint16_t *)((char *)*mem + wb);
    }
    return LQ_OK;
}

/* ------------------------------------------------------------------------------------------
 * Mixture of experts
 * ------------------------------------------------------------------------------------------ */
/* one thread per token: lq_moe_route_row (lq_ops_impl.h) on the device */
static __global__ void k_moe_route(float *p, int64_t T, int64_t E, int64_t K, int norm, int32_t *sel,
                            float *w) {
    const int64_t t = (int64_t)blockIdx.x * NT + threadIdx.x;
    if (t >= T)
        return;
    float   *pr = p + t * E;
    int32_t *sr = sel + t * K;
    float   *wr = w + t * K;
    float    mx = pr[0], sum = 0;
    for (int64_t e = 1; e < E; e++)
        mx = pr[e] > mx ? pr[e] : mx;
    for (int64_t e = 0; e < E; e++) {
        pr[e] = expf(__fsub_rn(pr[e], mx));
        sum   = __fadd_rn(sum, pr[e]);
    }
    for (int64_t e = 0; e < E; e++)
        pr[e] = __fdiv_rn(pr[e], sum);
    float wsum = 0;
    for (int64_t j = 0; j < K; j++) {
        int64_t best = -1;
        for (int64_t e = 0; e < E; e++) {
            int taken = 0;
            for (int64_t i = 0; i < j && !taken; i++)
                taken = sr[i] == e;
            if (!taken && (best < 0 || pr[e] > pr[best]))
                best = e;
        }
        sr[j] = (int32_t)best;
        wr[j] = pr[best];
        wsum  = __fadd_rn(wsum, pr[best]);
    }
    if (norm)
        for (int64_t j = 0; j < K; j++)
            wr[j] = __fdiv_rn(wr[j], wsum);
}

static lq_status cu_moe_route(lq_be *be, float *p, int64_t T, int64_t E, int64_t K, int norm,
                              int32_t *sel, float *w) {
    if (T <= 0)
        return LQ_OK;
    k_moe_route<<<blocks_for(T), NT, 0, strm(be)>>>(p, T, E, K, norm, sel, w);
    return launched(be, "moe routing");
}

/* one block per row */
static __global__ void k_gather_rows(float *dst, const float *__restrict__ src,
                              const int32_t *__restrict__ idx, int64_t d, int64_t div) {
    const float *s = src + (int64_t)(idx[blockIdx.x] / div) * d;
    float       *o = dst + (int64_t)blockIdx.x * d;
    for (int64_t x = threadIdx.x; x < d; x += NT)
        o[x] = s[x];
}

static lq_status cu_gather_rows(lq_be *be, float *dst, const float *src, const int32_t *idx,
                                int64_t cnt, int64_t d, int64_t div) {
    if (cnt <= 0)
        return LQ_OK;
    if (cnt > INT32_MAX)
        return LQ_ERR_UNSUPPORTED;
    k_gather_rows<<<(unsigned)cnt, NT, 0, strm(be)>>>(dst, src, idx, d, div);
    return launched(be, "gather rows");
}

static __global__ void k_scatter_add(float *out, const float *__restrict__ y,
                              const int32_t *__restrict__ idx, const float *__restrict__ wt,
                              int64_t d, int64_t div) {
    const int32_t j = idx[blockIdx.x];
    const float   w = wt[j];
    float        *o = out + (int64_t)(j / div) * d;
    const float  *v = y + (int64_t)blockIdx.x * d;
    for (int64_t x = threadIdx.x; x < d; x += NT)
        o[x] = __fadd_rn(o[x], __fmul_rn(v[x], w));
}

static lq_status cu_scatter_add(lq_be *be, float *out, const float *y, const int32_t *idx,
                                const float *wt, int64_t cnt, int64_t d, int64_t div) {
    if (cnt <= 0)
        return LQ_OK;
    if (cnt > INT32_MAX)
        return LQ_ERR_UNSUPPORTED;
    k_scatter_add<<<(unsigned)cnt, NT, 0, strm(be)>>>(out, y, idx, wt, d, div);
    return launched(be, "scatter rows");
}

static __global__ void k_gate_add(float *out, const float *__restrict__ y, const float *__restrict__ g,
                           int64_t T, int64_t d) {
    const int64_t e = (int64_t)blockIdx.x * NT + threadIdx.x;
    if (e >= T * d)
        return;
    const float gt = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-g[e / d])));
    out[e]         = __fadd_rn(out[e], __fmul_rn(gt, y[e]));
}

static lq_status cu_gate_add(lq_be *be, float *out, const float *y, const float *g, int64_t T,
                             int64_t d) {
    if (T * d <= 0)
        return LQ_OK;
    k_gate_add<<<blocks_for(T * d), NT, 0, strm(be)>>>(out, y, g, T, d);
    return launched(be, "shared expert gate");
}

/* ------------------------------------------------------------------------------------------
 * Statistics
 * ------------------------------------------------------------------------------------------ */
static lq_status cu_syrk(lq_be *be, float *H, const float *x, int64_t t, int64_t k, float alpha,
                         float beta) {
    if (!fits_int(t) || !fits_int(k))
        return LQ_ERR_UNSUPPORTED;
    /* float32 whatever the precision: the Hessian is what GPTQ inverts. Row-major x [t, k] is
     * column-major x^T [k, t]; its lower triangle is row-major H's upper one. */
    cublasHandle_t hb = lq_cuda_ctx_blas(be->cuda, be->stream, LQ_CUDA_MATH_FP32);
    if (!hb)
        return blas_failed(be, CUBLAS_STATUS_NOT_INITIALIZED, "syrk");
    BLAS_TRY(cublasSsyrk(hb, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, (int)k, (int)t, &alpha, x, (int)k,
                         &beta, H, (int)k),
             "syrk");
    return LQ_OK;
}

static __global__ void k_scale_rows(float *dst, const float *x, const float *__restrict__ a, int64_t t,
                             int64_t k) {
    const int64_t e = (int64_t)blockIdx.x * NT + threadIdx.x;
    if (e < t * k)
        dst[e] = __fmul_rn(x[e], sqrtf(a[e / k]));
}

static lq_status cu_scale_rows(lq_be *be, float *dst, const float *x, const float *a, int64_t t,
                               int64_t k) {
    if (t * k <= 0)
        return LQ_OK;
    k_scale_rows<<<blocks_for(t * k), NT, 0, strm(be)>>>(dst, x, a, t, k);
    return launched(be, "scale rows");
}

/* one thread per column, rows in order (coalesced across the columns of a warp): the running
 * max of |x| (SUM 0) or its float32 sum (SUM 1) */
template <int SUM>
static __global__ void k_col_abs(float *acc, const float *__restrict__ x, int64_t t, int64_t k) {
    const int64_t c = (int64_t)blockIdx.x * NT + threadIdx.x;
    if (c >= k)
        return;
    float v = acc[c];
    for (int64_t r = 0; r < t; r++)
        v = SUM ? __fadd_rn(v, fabsf(x[r * k + c])) : fmaxf(v, fabsf(x[r * k + c]));
    acc[c] = v;
}

template <int SUM>
static lq_status col_abs(lq_be *be, float *acc, const float *x, int64_t t, int64_t k) {
    if (k <= 0)
        return LQ_OK;
    k_col_abs<SUM><<<blocks_for(k), NT, 0, strm(be)>>>(acc, x, t, k);
    return launched(be, SUM ? "column abs sum" : "column absmax");
}

static lq_status cu_col_absmax(lq_be *be, float *amax, const float *x, int64_t t, int64_t k) {
    return col_abs<0>(be, amax, x, t, k);
}

static lq_status cu_col_abssum(lq_be *be, float *sum, const float *x, int64_t t, int64_t k) {
    return col_abs<1>(be, sum, x, t, k);
}

/* ------------------------------------------------------------------------------------------
 * AWQ's searches and the small algebra around them
 * ------------------------------------------------------------------------------------------ */
/* One warp per (row, group): max / min of the group's w s, then each lane's elements rounded
 * (lq_awq_quant_group, lq_awq_fakequant_row), every rounding spelled out */
static __global__ void k_awq_fakequant(const float *__restrict__ w, const float *__restrict__ s,
                                       int64_t n, int64_t k, int64_t g, int maxq, float *out) {
    const int64_t G = k / g, wid = ((int64_t)blockIdx.x * NT + threadIdx.x) / 32;
    const int     lane = threadIdx.x & 31;
    if (wid >= n * G)
        return;
    const int64_t r = wid / G, c0 = (wid % G) * g;
    const float  *wr = w + r * k + c0;
    const float  *sr = s + c0;
    float         mx = -INFINITY, mn = INFINITY;
    for (int64_t j = lane; j < g; j += 32) {
        const float v = __fmul_rn(wr[j], sr[j]);
        mx            = fmaxf(mx, v);
        mn            = fminf(mn, v);
    }
    for (int o = 16; o > 0; o >>= 1) {
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        mn = fminf(mn, __shfl_xor_sync(0xffffffffu, mn, o));
    }
    const float fq  = (float)maxq;
    const float rng = __fsub_rn(mx, mn);
    const float sc  = __fdiv_rn(rng > 1e-5f ? rng : 1e-5f, fq);
    float       z   = -rintf(__fdiv_rn(mn, sc));
    z               = z < 0 ? 0 : z > fq ? fq : z;
    float *o        = out + r * k + c0;
    for (int64_t j = lane; j < g; j += 32) {
        const float v = __fmul_rn(wr[j], sr[j]);
        float       c = __fadd_rn(rintf(__fdiv_rn(v, sc)), z);
        c             = c < 0 ? 0 : c > fq ? fq : c;
        o[j]          = __fdiv_rn(__fmul_rn(__fsub_rn(c, z), sc), sr[j]);
    }
}

static lq_status cu_awq_fakequant(lq_be *be, const float *w, const float *s, int64_t n, int64_t k,
                                  int64_t group, int bits, float *out) {
    const int64_t g = group <= 0 || group > k ? k : group;
    if (n * k <= 0)
        return LQ_OK;
    if (k % g)
        return LQ_ERR_INVALID_ARG;
    k_awq_fakequant<<<blocks_for(n * (k / g) * 32), NT, 0, strm(be)>>>(w, s, n, k, g,
                                                                         (1 << bits) - 1, out);
    return launched(be, "AWQ candidate");
}

/* xs [k, ts] = every step-th row of x [t, k], transposed (lq_awq_clip_sample): the clip
 * kernel's threads (tokens) then read along a row of xs */
static __global__ void k_awq_clip_sample(const float *__restrict__ x, int64_t k, int64_t step,
                                         int64_t ts, float *xs) {
    const int64_t e = (int64_t)blockIdx.x * NT + threadIdx.x;
    if (e < k * ts)
        xs[e] = x[(e % ts) * step * k + e / ts];
}

/* One block per (row, group) of the clip search (lq_awq_clip_group): the group's weights and
 * their clipped copy in shared memory, a thread per sampled token computing its output (inputs
 * in order, as the CPU), the squared errors summed by one thread in token order (the CPU's
 * sum, bit for bit). Shared: 2 g floats, then ts doubles. */
static __global__ void k_awq_clip(float *w, int64_t k, const float *__restrict__ xs, int64_t ts,
                                  int64_t g, int maxq) {
    extern __shared__ double smem[];
    double       *terms = smem;
    float        *ws    = (float *)(smem + ts);
    float        *wq    = ws + g;
    __shared__ float red[2][NT / 32];
    __shared__ float bmax_s;
    const int64_t G = k / g, r = blockIdx.x / G, c0 = (blockIdx.x % G) * g;
    float        *wr = w + r * k + c0;
    for (int64_t j = threadIdx.x; j < g; j += NT)
        ws[j] = wr[j];
    __syncthreads();
    float mx = 0;
    for (int64_t j = threadIdx.x; j < g; j += NT)
        mx = fmaxf(mx, fabsf(ws[j]));
    mx = block_max(mx, red[0]);
    /* each thread's tokens: orig outputs, at most ts / NT + 1 of them per thread */
    float orig[4]; /* ts <= 1024: 4 a thread at NT 256 */
    for (int q = 0; q < 4; q++) {
        const int64_t i = threadIdx.x + (int64_t)q * NT;
        float         o = 0.f;
        if (i < ts) {
            const float *xi = xs + c0 * ts + i;
            for (int64_t j = 0; j < g; j++)
                o = __fadd_rn(o, __fmul_rn(xi[j * ts], ws[j]));
        }
        orig[q] = o;
    }
    double best = INFINITY;
    float  bmax = mx;
    const float fq = (float)maxq;
    for (int is = 0; is < LQ_AWQ_CLIP_STEPS_D; is++) {
        const float m = __fmul_rn(mx, __fsub_rn(1.0f, __fdiv_rn((float)is, (float)LQ_AWQ_CLIP_GRID_D)));
        float       lmx = -INFINITY, lmn = INFINITY;
        for (int64_t j = threadIdx.x; j < g; j += NT) {
            const float v = ws[j] > m ? m : ws[j] < -m ? -m : ws[j];
            wq[j]         = v;
            lmx           = fmaxf(lmx, v);
            lmn           = fminf(lmn, v);
        }
        lmx = block_max(lmx, red[0]);
        lmn = -block_max(-lmn, red[1]);
        const float rng = __fsub_rn(lmx, lmn);
        const float sc  = __fdiv_rn(rng > 1e-5f ? rng : 1e-5f, fq);
        float       z   = -rintf(__fdiv_rn(lmn, sc));
        z               = z < 0 ? 0 : z > fq ? fq : z;
        for (int64_t j = threadIdx.x; j < g; j += NT) {
            float c = __fadd_rn(rintf(__fdiv_rn(wq[j], sc)), z);
            c       = c < 0 ? 0 : c > fq ? fq : c;
            wq[j]   = __fmul_rn(__fsub_rn(c, z), sc);
        }
        __syncthreads();
        for (int q = 0; q < 4; q++) {
            const int64_t i = threadIdx.x + (int64_t)q * NT;
            if (i >= ts)
                continue;
            const float *xi = xs + c0 * ts + i;
            float        o  = 0.f;
            for (int64_t j = 0; j < g; j++)
                o = __fadd_rn(o, __fmul_rn(xi[j * ts], wq[j]));
            const double d = (double)__fsub_rn(o, orig[q]);
            terms[i]       = d * d;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            double e = 0;
            for (int64_t i = 0; i < ts; i++)
                e += terms[i];
            e /= (double)ts;
            if (e < best) {
                best = e;
                bmax = m;
            }
            bmax_s = bmax;
        }
        __syncthreads();
    }
    const float bm = bmax_s;
    for (int64_t j = threadIdx.x; j < g; j += NT)
        wr[j] = ws[j] > bm ? bm : ws[j] < -bm ? -bm : ws[j];
}

static lq_status cu_awq_clip(lq_be *be, float *w, int64_t n, int64_t k, const float *x, int64_t t,
                             int64_t group, int bits) {
    const int64_t g = group <= 0 || group > k ? k : group;
    if (k % g)
        return LQ_ERR_INVALID_ARG;
    const int64_t step = t / 512 > 0 ? t / 512 : 1, ts = (t + step - 1) / step;
    const size_t  sh   = (size_t)ts * sizeof(double) + (size_t)(2 * g) * sizeof(float);
    if (n * (k / g) > INT32_MAX || ts > 4 * NT || sh > (size_t)200 << 10)
        return LQ_ERR_UNSUPPORTED;
    if (sh > (size_t)48 << 10)
        RT_TRY(cudaFuncSetAttribute(k_awq_clip, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)sh),
               "AWQ clip search");
    void *xs;
    LQ_TRY(lq_be_scratch(be, (size_t)(k * ts) * sizeof(float), &xs));
    k_awq_clip_sample<<<blocks_for(k * ts), NT, 0, strm(be)>>>(x, k, step, ts, (float *)xs);
    LQ_TRY(launched(be, "AWQ clip sample"));
    k_awq_clip<<<(unsigned)(n * (k / g)), NT, sh, strm(be)>>>(w, k, (const float *)xs, ts, g,
                                                                (1 << bits) - 1);
    return launched(be, "AWQ clip search");
}

/* sum of f(a[i], b[i]) in double, deterministic: RED_BLOCKS blocks' grid-stride partials, then
 * one block adds them in order (both kernels on the stream, the scalar read back) */
#define RED_BLOCKS 256
template <int SQDIFF>
static __global__ void k_reduce(const float *__restrict__ a, const float *__restrict__ b,
                                int64_t count, double *partial) {
    __shared__ double sh[NT / 32];
    double            s = 0;
    for (int64_t i = (int64_t)blockIdx.x * NT + threadIdx.x; i < count; i += (int64_t)RED_BLOCKS * NT) {
        if (SQDIFF) {
            const double d = (double)a[i] - (double)b[i];
            s += d * d;
        } else {
            s += (double)a[i] * (double)b[i];
        }
    }
    s = block_sum(s, sh);
    if (threadIdx.x == 0)
        partial[blockIdx.x] = s;
}

static __global__ void k_reduce_final(double *partial) {
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        double s = 0;
        for (int i = 0; i < RED_BLOCKS; i++)
            s += partial[i];
        partial[0] = s;
    }
}

static lq_status reduce(lq_be *be, int sq, const float *a, const float *b, int64_t count,
                        double *out) {
    *out = 0;
    if (count <= 0)
        return LQ_OK;
    void *scr;
    LQ_TRY(lq_be_scratch(be, RED_BLOCKS * sizeof(double), &scr));
    if (sq)
        k_reduce<1><<<RED_BLOCKS, NT, 0, strm(be)>>>(a, b, count, (double *)scr);
    else
        k_reduce<0><<<RED_BLOCKS, NT, 0, strm(be)>>>(a, b, count, (double *)scr);
    LQ_TRY(launched(be, "reduction"));
    k_reduce_final<<<1, 32, 0, strm(be)>>>((double *)scr);
    LQ_TRY(launched(be, "reduction"));
    return cu_download(be, out, scr, sizeof(double));
}

static lq_status cu_sqdiff(lq_be *be, const float *a, const float *b, int64_t count, double *out) {
    return reduce(be, 1, a, b, count, out);
}

static lq_status cu_dot(lq_be *be, const float *a, const float *b, int64_t count, double *out) {
    return reduce(be, 0, a, b, count, out);
}

static lq_status cu_sub(lq_be *be, float *out, const float *a, const float *b, int64_t count) {
    return addsub<1>(be, out, a, b, count);
}

static lq_status cu_gemm(lq_be *be, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha,
                         const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                         float *C, int64_t ldc) {
    if (!fits_int(m) || !fits_int(n) || !fits_int(k) || !fits_int(lda) || !fits_int(ldb) ||
        !fits_int(ldc))
        return LQ_ERR_UNSUPPORTED;
    if (m == 0 || n == 0)
        return LQ_OK;
    cublasHandle_t hb = lq_cuda_ctx_blas(be->cuda, be->stream, LQ_CUDA_MATH_FP32);
    if (!hb)
        return blas_failed(be, CUBLAS_STATUS_NOT_INITIALIZED, "gemm");
    /* row-major C = op(A) op(B): column-major C^T = op(B)^T op(A)^T */
    BLAS_TRY(cublasSgemm(hb, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)n,
                         (int)m, (int)k, &alpha, B, (int)ldb, A, (int)lda, &beta, C, (int)ldc),
             "gemm");
    return LQ_OK;
}

static __global__ void k_sym_upper(float *H, int64_t k) {
    const int64_t j = (int64_t)blockIdx.x * NT + threadIdx.x;
    for (int64_t i = blockIdx.y; i < k; i += gridDim.y)
        if (j < i)
            H[i * k + j] = H[j * k + i];
}

static lq_status cu_sym_upper(lq_be *be, float *H, int64_t k) {
    if (k <= 1)
        return LQ_OK;
    const dim3 grid(blocks_for(k), (unsigned)(k < 4096 ? k : 4096));
    k_sym_upper<<<grid, NT, 0, strm(be)>>>(H, k);
    return launched(be, "mirroring a triangle");
}

static __global__ void k_div_cols(float *x, int64_t t, int64_t k, const float *__restrict__ s) {
    const int64_t e = (int64_t)blockIdx.x * NT + threadIdx.x;
    if (e < t * k)
        x[e] = __fdiv_rn(x[e], s[e % k]);
}

static lq_status cu_div_cols(lq_be *be, float *x, int64_t t, int64_t k, const float *s) {
    if (t * k <= 0)
        return LQ_OK;
    k_div_cols<<<blocks_for(t * k), NT, 0, strm(be)>>>(x, t, k, s);
    return launched(be, "dividing columns");
}

static const lq_ops k_ops_cuda = {
    "cuda",         1,
    cu_alloc,       cu_release,
    cu_upload,      cu_download,
    cu_copy,        cu_zero,
    cu_copy2d,      cu_sync,
    cu_rmsnorm,     cu_rope,
    cu_attention,   cu_glu,
    cu_add,         cu_softcap,
    cu_linear,      cu_linear_upload,
    cu_moe_route,   cu_gather_rows,
    cu_scatter_add, cu_gate_add,
    cu_syrk,        cu_scale_rows,
    cu_col_absmax,  cu_col_abssum,
    cu_awq_fakequant, cu_awq_clip,
    cu_sqdiff,      cu_dot,
    cu_sub,         cu_gemm,
    cu_sym_upper,   cu_div_cols,
};

/* positional (C++ has no designated array of them): a field added to lq_ops must come here */
static_assert(sizeof(lq_ops) == 34 * sizeof(void *), "lq_ops changed: update k_ops_cuda");

extern "C" const lq_ops *lq_ops_cuda(void) {
    return &k_ops_cuda;
}
