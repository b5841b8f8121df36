/* CUDA dequant-matmul launchers: y[m, n] (fp16) = x[m, k] (fp16) @ W^T (+ bias), fp32
 * accumulation, for every lq_format.
 *
 * m <= LQ_CUDA_GEMV_MAX_M: fused kernels that read every weight byte once (memory-bound).
 *   GPTQ/AWQ pack along the dimension that makes output columns contiguous, so their kernels
 *   give each thread a few adjacent columns (GPTQ: 128-bit loads of 4 columns x 32/b codes),
 *   split k across the threads of a block, reduce with warp shuffles + shared memory, and split
 *   k across blocks too when n alone gives too few blocks (fp32 partials in the workspace,
 *   summed in a fixed order by a second kernel: deterministic).
 *   NF4/INT8/dense are row-major along k: one warp per output row, lanes along k, shuffle
 *   reduction.
 * larger m: dequantize W to fp16 [n, k] in the workspace and call cublasGemmEx (tensor cores,
 *   fp32 compute); dense calls cuBLAS on W directly; INT8 keeps LLM.int8 semantics (int8 x int8
 *   products with per-row activation scales) by running the fused kernel in row chunks.
 * Products of dequantized weights are rounded like the reference (w = s * (q - z) in float),
 * then accumulated with FMAs; every reference rounding that is not an accumulation is written
 * with __fmul_rn/__fadd_rn so contraction cannot change it. */
#include "lq_cuda_impl.cuh"

#define LQ_THREADS 256
#define LQ_WARPS   (LQ_THREADS / 32)

/* Activation value x[r, c] as float (rows past m read as 0 without touching memory). */
__device__ __forceinline__ float lq_d_x(const __half *x, int64_t k, int64_t m, int r, int64_t c) {
    return r < m ? __half2float(x[r * k + c]) : 0.f;
}

/* ------------------------------------------------------------------------------------------
 * Column kernels (GPTQ, AWQ): shared block layout.
 *   tid = ks * TPC + lc: lc picks the thread's columns, ks its k-slice; a warp holds 32/TPC
 *   k-slices of the same TPC column lanes, so the per-warp reduction is a shuffle over lane bits
 *   >= log2(TPC), then the LQ_WARPS partials go through shared memory.
 * ------------------------------------------------------------------------------------------ */
template <int MT, int TPC, int CPT>
__device__ __forceinline__ void lq_d_colblock_reduce(float (&acc)[MT][CPT], int64_t col_base,
                                                     int64_t n, int64_t m, const __half *bias,
                                                     __half *y, float *partial) {
    constexpr int BC = TPC * CPT;
    __shared__ float red[LQ_WARPS][MT][BC];
    const int        tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, lc = tid % TPC;
#pragma unroll
    for (int r = 0; r < MT; r++)
#pragma unroll
        for (int q = 0; q < CPT; q++) {
            float v = acc[r][q];
#pragma unroll
            for (int off = TPC; off < 32; off <<= 1)
                v += __shfl_xor_sync(0xffffffffu, v, off);
            acc[r][q] = v;
        }
    if (lane < TPC)
#pragma unroll
        for (int r = 0; r < MT; r++)
#pragma unroll
            for (int q = 0; q < CPT; q++)
                red[warp][r][lc * CPT + q] = acc[r][q];
    __syncthreads();
    for (int t = tid; t < MT * BC; t += LQ_THREADS) {
        const int     r = t / BC, cc = t % BC;
        const int64_t col = col_base + cc;
        if (r >= m || col >= n)
            continue;
        float s = 0.f;
#pragma unroll
        for (int wv = 0; wv < LQ_WARPS; wv++)
            s += red[wv][r][cc];
        if (partial) { /* split-k: fp32 partial of this block's k range, bias added at the end */
            partial[((int64_t)blockIdx.y * m + r) * n + col] = s;
        } else {
            if (bias)
                s = __fadd_rn(s, __half2float(bias[col]));
            y[r * n + col] = __float2half_rn(s);
        }
    }
}

/* y[r, col] = sum over splits (in order) + bias. */
__global__ void k_splitk_finish(const float *__restrict__ partial, int splits, int64_t m,
                                int64_t n, const __half *__restrict__ bias, __half *__restrict__ y) {
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= m * n)
        return;
    float s = 0.f;
    for (int sp = 0; sp < splits; sp++)
        s += partial[sp * m * n + e];
    if (bias)
        s = __fadd_rn(s, __half2float(bias[e % n]));
    y[e] = __float2half_rn(s);
}

/* Split-k factor of a column kernel: enough blocks to cover the GPU (~4 per SM on the largest
 * parts) without giving a k-slice less than a few units of work. Depends only on the shape so
 * the workspace size is known before launch. */
static int lq_splits(int64_t col_blocks, int64_t units, int kslices) {
    const int64_t target = 512;
    int64_t       s      = (target + col_blocks - 1) / col_blocks;
    const int64_t maxs   = units / (4 * (int64_t)kslices);
    if (s > maxs)
        s = maxs;
    if (s > 32)
        s = 32;
    return s < 1 ? 1 : (int)s;
}

/* ------------------------------------------------------------------------------------------
 * GPTQ GEMV. Unit = the codes of one 128-bit load per packed row: 32/b input channels (3-bit:
 * three word rows = 32 channels) x 4 output columns.
 * ------------------------------------------------------------------------------------------ */
#define GPTQ_TPC 8
#define GPTQ_CPT 4
#define GPTQ_BC  (GPTQ_TPC * GPTQ_CPT)
#define GPTQ_KS  (LQ_THREADS / GPTQ_TPC)

template <int BITS> struct gptq_unit {
    static constexpr int KU = BITS == 3 ? 32 : 32 / BITS; /* channels per unit */
    static constexpr int WU = BITS == 3 ? 3 : 1;          /* word rows per unit */
};

template <int BITS>
__device__ __forceinline__ uint32_t gptq_code(const uint32_t (&wd)[gptq_unit<BITS>::WU][4], int j,
                                              int q) {
    constexpr uint32_t mask = (1u << BITS) - 1u;
    if (BITS == 3) {
        const int pos = 3 * j, wi = pos >> 5, sh = pos & 31;
        uint32_t  v   = wd[wi][q] >> sh;
        if (sh + 3 > 32)
            v |= wd[wi + 1 < gptq_unit<BITS>::WU ? wi + 1 : wi][q] << (32 - sh);
        return v & mask;
    }
    return (wd[0][q] >> (j * BITS)) & mask;
}

template <int BITS, int MT>
__global__ void __launch_bounds__(LQ_THREADS)
    k_gemv_gptq(const lq_qlinear w, const __half *__restrict__ x, int64_t m, __half *__restrict__ y,
                float *__restrict__ partial) {
    constexpr int KU = gptq_unit<BITS>::KU, WU = gptq_unit<BITS>::WU;
    const int     tid = threadIdx.x, lc = tid % GPTQ_TPC, ks = tid / GPTQ_TPC;
    const int64_t n = w.n, k = w.k;
    const int64_t col_base = (int64_t)blockIdx.x * GPTQ_BC;
    const int64_t col0     = col_base + lc * GPTQ_CPT; /* n % 4 == 0 for every GPTQ width */
    const int64_t units    = k / KU;
    const int64_t per      = (units + gridDim.y - 1) / gridDim.y;
    const int64_t u0 = (int64_t)blockIdx.y * per, u1 = u0 + per < units ? u0 + per : units;
    float         acc[MT][GPTQ_CPT];
#pragma unroll
    for (int r = 0; r < MT; r++)
#pragma unroll
        for (int q = 0; q < GPTQ_CPT; q++)
            acc[r][q] = 0.f;
    if (col0 < n) {
        const int32_t *qw    = (const int32_t *)w.qweight;
        const __half  *sc    = (const __half *)w.scales;
        int64_t        gcur  = -1;
        float          s[GPTQ_CPT], z[GPTQ_CPT];
        for (int64_t u = u0 + ks; u < u1; u += GPTQ_KS) {
            uint32_t wd[WU][4];
#pragma unroll
            for (int wi = 0; wi < WU; wi++) {
                const int4 v = __ldg((const int4 *)(qw + (u * WU + wi) * n + col0));
                wd[wi][0] = (uint32_t)v.x;
                wd[wi][1] = (uint32_t)v.y;
                wd[wi][2] = (uint32_t)v.z;
                wd[wi][3] = (uint32_t)v.w;
            }
#pragma unroll
            for (int j = 0; j < KU; j += 2) {
                const int64_t c = u * KU + j;
                float         xv[MT][2];
#pragma unroll
                for (int r = 0; r < MT; r++) {
                    if (r < m && w.perm) { /* a sorted descriptor: row c holds channel perm[c] */
                        xv[r][0] = __half2float(x[r * k + __ldg(w.perm + c)]);
                        xv[r][1] = __half2float(x[r * k + __ldg(w.perm + c + 1)]);
                    } else if (r < m) { /* c even, k even: 4-byte aligned pair */
                        const float2 f = __half22float2(*(const __half2 *)(x + r * k + c));
                        xv[r][0]       = f.x;
                        xv[r][1]       = f.y;
                    } else {
                        xv[r][0] = xv[r][1] = 0.f;
                    }
                }
#pragma unroll
                for (int jj = 0; jj < 2; jj++) {
                    const int64_t g = __ldg(w.g_idx + c + jj);
                    if (g != gcur) { /* act-order: groups may change at any channel */
                        gcur = g;
                        const uint2 sv = __ldg((const uint2 *)(sc + g * n + col0));
                        const float2 s01 = __half22float2(*(const __half2 *)&sv.x);
                        const float2 s23 = __half22float2(*(const __half2 *)&sv.y);
                        s[0] = s01.x;
                        s[1] = s01.y;
                        s[2] = s23.x;
                        s[3] = s23.y;
#pragma unroll
                        for (int q = 0; q < GPTQ_CPT; q++)
                            z[q] = (float)lq_d_gptq_zero(w, g, col0 + q);
                    }
#pragma unroll
                    for (int q = 0; q < GPTQ_CPT; q++) {
                        const float wv =
                            __fmul_rn(s[q], (float)gptq_code<BITS>(wd, j + jj, q) - z[q]);
#pragma unroll
                        for (int r = 0; r < MT; r++)
                            acc[r][q] = fmaf(xv[r][jj], wv, acc[r][q]);
                    }
                }
            }
        }
    }
    lq_d_colblock_reduce<MT, GPTQ_TPC, GPTQ_CPT>(acc, col_base, n, m, (const __half *)w.bias, y,
                                                 gridDim.y > 1 ? partial : nullptr);
}

/* ------------------------------------------------------------------------------------------
 * AWQ GEMV. Packed along n: one 32-bit word = 8 interleaved output columns of one input
 * channel; a thread owns one word column and walks k (32-byte segments per warp row).
 * ------------------------------------------------------------------------------------------ */
#define AWQ_TPC 8
#define AWQ_CPT 8
#define AWQ_BC  (AWQ_TPC * AWQ_CPT)
#define AWQ_KS  (LQ_THREADS / AWQ_TPC)

template <int MT>
__global__ void __launch_bounds__(LQ_THREADS)
    k_gemv_awq(const lq_qlinear w, const __half *__restrict__ x, int64_t m, __half *__restrict__ y,
               float *__restrict__ partial) {
    const int     tid = threadIdx.x, lc = tid % AWQ_TPC, ks = tid / AWQ_TPC;
    const int64_t n = w.n, k = w.k, words = n / 8, gs = w.group_size;
    const int64_t col_base = (int64_t)blockIdx.x * AWQ_BC;
    const int64_t wcol     = col_base / 8 + lc;
    const int64_t per      = (k + gridDim.y - 1) / gridDim.y;
    const int64_t c0 = (int64_t)blockIdx.y * per, c1 = c0 + per < k ? c0 + per : k;
    float         acc[MT][AWQ_CPT];
#pragma unroll
    for (int r = 0; r < MT; r++)
#pragma unroll
        for (int q = 0; q < AWQ_CPT; q++)
            acc[r][q] = 0.f;
    if (wcol < words) {
        const int32_t *qw   = (const int32_t *)w.qweight;
        const int32_t *qz   = (const int32_t *)w.qzeros;
        const __half  *sc   = (const __half *)w.scales;
        int64_t        gcur = -1;
        float          s[AWQ_CPT], z[AWQ_CPT];
        for (int64_t c = c0 + ks; c < c1; c += AWQ_KS) {
            const uint32_t word = (uint32_t)__ldg(qw + c * words + wcol);
            const int64_t  g    = c / gs;
            if (g != gcur) {
                gcur              = g;
                const uint32_t zw = (uint32_t)__ldg(qz + g * words + wcol);
#pragma unroll
                for (int q = 0; q < AWQ_CPT; q++) {
                    s[q] = __half2float(sc[g * n + wcol * 8 + q]);
                    z[q] = (float)((zw >> lq_d_awq_shift(q)) & 15u);
                }
            }
            float xv[MT];
#pragma unroll
            for (int r = 0; r < MT; r++)
                xv[r] = lq_d_x(x, k, m, r, c);
#pragma unroll
            for (int q = 0; q < AWQ_CPT; q++) {
                const float wv = __fmul_rn(s[q], (float)((word >> lq_d_awq_shift(q)) & 15u) - z[q]);
#pragma unroll
                for (int r = 0; r < MT; r++)
                    acc[r][q] = fmaf(xv[r], wv, acc[r][q]);
            }
        }
    }
    lq_d_colblock_reduce<MT, AWQ_TPC, AWQ_CPT>(acc, col_base, n, m, (const __half *)w.bias, y,
                                               gridDim.y > 1 ? partial : nullptr);
}

/* ------------------------------------------------------------------------------------------
 * Row kernels (NF4, dense, INT8): one warp per output row, lanes along k.
 * ------------------------------------------------------------------------------------------ */
template <int MT>
__device__ __forceinline__ void lq_d_row_store(float (&acc)[MT], int64_t i, int64_t n, int64_t m,
                                               const __half *bias, __half *y) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int r = 0; r < MT; r++) {
        float v = acc[r];
#pragma unroll
        for (int off = 16; off > 0; off >>= 1)
            v += __shfl_xor_sync(0xffffffffu, v, off);
        if (lane == 0 && r < m) {
            if (bias)
                v = __fadd_rn(v, __half2float(bias[i]));
            y[r * n + i] = __float2half_rn(v);
        }
    }
}

/* 8 activations x[r, c..c+7] (one 128-bit load when aligned). */
__device__ __forceinline__ void lq_d_x8(const __half *x, int64_t k, int r, int64_t c, bool aligned,
                                        float (&o)[8]) {
    if (aligned) {
        const uint4   v = *(const uint4 *)(x + r * k + c);
        const __half2 *h = (const __half2 *)&v;
#pragma unroll
        for (int t = 0; t < 4; t++) {
            const float2 f = __half22float2(h[t]);
            o[2 * t]       = f.x;
            o[2 * t + 1]   = f.y;
        }
    } else {
#pragma unroll
        for (int t = 0; t < 8; t++)
            o[t] = c + t < k ? __half2float(x[r * k + c + t]) : 0.f;
    }
}

/* NF4: chunks of 16 codes (64-bit load) per lane when k % 16 == 0 (a chunk never straddles an
 * absmax block: blocks are >= 32 and chunks start at multiples of 16 of the flattened index);
 * otherwise element by element. */
template <int MT>
__global__ void __launch_bounds__(LQ_THREADS)
    k_gemv_nf4(const lq_qlinear w, const __half *__restrict__ x, int64_t m,
               __half *__restrict__ y) {
    __shared__ float qmap[16];
    if (threadIdx.x < 16)
        qmap[threadIdx.x] = w.quant_map[threadIdx.x];
    __syncthreads();
    const int     lane = threadIdx.x & 31;
    const int64_t i    = (int64_t)blockIdx.x * LQ_WARPS + (threadIdx.x >> 5);
    const int64_t n = w.n, k = w.k, bs = w.group_size;
    if (i >= n)
        return;
    const uint8_t *q = (const uint8_t *)w.qweight;
    float          acc[MT];
#pragma unroll
    for (int r = 0; r < MT; r++)
        acc[r] = 0.f;
    if (k % 16 == 0) {
        for (int64_t c = (int64_t)lane * 16; c < k; c += 32 * 16) {
            const int64_t e  = i * k + c;
            const uint2   v  = __ldg((const uint2 *)(q + e / 2));
            const float   am = lq_d_nf4_absmax(w, e / bs);
            float         wv[16];
#pragma unroll
            for (int b = 0; b < 8; b++) {
                const uint32_t byte = ((b < 4 ? v.x : v.y) >> (8 * (b & 3))) & 0xffu;
                wv[2 * b]           = __fmul_rn(qmap[byte >> 4], am);
                wv[2 * b + 1]       = __fmul_rn(qmap[byte & 15u], am);
            }
#pragma unroll
            for (int r = 0; r < MT; r++) {
                if (r >= m)
                    break;
                float xa[8], xb[8];
                lq_d_x8(x, k, r, c, true, xa);
                lq_d_x8(x, k, r, c + 8, true, xb);
#pragma unroll
                for (int t = 0; t < 8; t++) {
                    acc[r] = fmaf(xa[t], wv[t], acc[r]);
                    acc[r] = fmaf(xb[t], wv[8 + t], acc[r]);
                }
            }
        }
    } else {
        for (int64_t c = lane; c < k; c += 32) {
            const int64_t  e    = i * k + c;
            const uint32_t byte = __ldg(q + e / 2);
            const uint32_t code = (e & 1) ? (byte & 15u) : (byte >> 4);
            const float    wv   = __fmul_rn(qmap[code], lq_d_nf4_absmax(w, e / bs));
#pragma unroll
            for (int r = 0; r < MT; r++)
                acc[r] = fmaf(lq_d_x(x, k, m, r, c), wv, acc[r]);
        }
    }
    lq_d_row_store<MT>(acc, i, n, m, (const __half *)w.bias, y);
}

/* fp16 or bf16 weights (T) as float: both convert exactly */
__device__ __forceinline__ float lq_d_w16(__half v) {
    return __half2float(v);
}
__device__ __forceinline__ float lq_d_w16(__nv_bfloat16 v) {
    return __bfloat162float(v);
}
__device__ __forceinline__ float2 lq_d_w16x2(const void *p, __half) {
    return __half22float2(*(const __half2 *)p);
}
__device__ __forceinline__ float2 lq_d_w16x2(const void *p, __nv_bfloat16) {
    return __bfloat1622float2(*(const __nv_bfloat162 *)p);
}

template <int MT, typename T>
__global__ void __launch_bounds__(LQ_THREADS)
    k_gemv_dense(const lq_qlinear w, const __half *__restrict__ x, int64_t m,
                 __half *__restrict__ y) {
    const int     lane = threadIdx.x & 31;
    const int64_t i    = (int64_t)blockIdx.x * LQ_WARPS + (threadIdx.x >> 5);
    const int64_t n = w.n, k = w.k;
    if (i >= n)
        return;
    const T   *d       = (const T *)w.dense + i * k;
    const bool aligned = k % 8 == 0;
    float      acc[MT];
#pragma unroll
    for (int r = 0; r < MT; r++)
        acc[r] = 0.f;
    for (int64_t c = (int64_t)lane * 8; c < k; c += 32 * 8) {
        float wv[8];
        if (aligned) {
            const uint4     v = __ldg((const uint4 *)(d + c));
            const uint32_t *h = (const uint32_t *)&v;
#pragma unroll
            for (int t = 0; t < 4; t++) {
                const float2 f = lq_d_w16x2(h + t, T());
                wv[2 * t]      = f.x;
                wv[2 * t + 1]  = f.y;
            }
        } else {
#pragma unroll
            for (int t = 0; t < 8; t++)
                wv[t] = c + t < k ? lq_d_w16(d[c + t]) : 0.f;
        }
#pragma unroll
        for (int r = 0; r < MT; r++) {
            if (r >= m)
                break;
            float xv[8];
            lq_d_x8(x, k, r, c, aligned, xv);
#pragma unroll
            for (int t = 0; t < 8; t++)
                acc[r] = fmaf(xv[t], wv[t], acc[r]);
        }
    }
    lq_d_row_store<MT>(acc, i, n, m, (const __half *)w.bias, y);
}

/* ------------------------------------------------------------------------------------------
 * INT8 (LLM.int8). Preprocessing over the whole batch, then the fused kernel:
 *   flags[c]  = 1 stored column, 2 runtime outlier (some row |x| >= threshold), else 0
 *   rowmax[r] = max |x[r, c]| over flags != 1 and |x| < threshold
 *   qx[r, c]  = round_half_even(x * (127 / rowmax)) where flags == 0, else 0
 *   y = ((float)acc * (rowmax * SCB)) * 6.200124e-05 + fp part (double, like the reference,
 *       so the result is the same single rounding) + bias
 * ------------------------------------------------------------------------------------------ */
__global__ void k_int8_flags(const lq_qlinear w, const __half *__restrict__ x, int64_t m,
                             uint8_t *__restrict__ flags) {
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= w.k)
        return;
    uint8_t f = 0;
    if (w.threshold > 0.f)
        for (int64_t r = 0; r < m; r++)
            if (fabsf(__half2float(x[r * w.k + c])) >= w.threshold) {
                f = 2;
                break;
            }
    flags[c] = f;
}

__global__ void k_int8_flags_stored(const lq_qlinear w, uint8_t *__restrict__ flags) {
    const int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j < w.n_outlier)
        flags[w.outlier_idx[j]] = 1; /* stored columns win over runtime ones */
}

/* one block per activation row */
__global__ void __launch_bounds__(LQ_THREADS)
    k_int8_rowquant(const lq_qlinear w, const __half *__restrict__ x,
                    const uint8_t *__restrict__ flags, float *__restrict__ rowmax,
                    int8_t *__restrict__ qx, int64_t kpad) {
    __shared__ float smax[LQ_WARPS];
    const int64_t    r = blockIdx.x, k = w.k;
    const float      thr = w.threshold;
    const __half    *xr  = x + r * k;
    float            mx  = 0.f;
    for (int64_t c = threadIdx.x; c < k; c += LQ_THREADS) {
        const float a = fabsf(__half2float(xr[c]));
        if (flags[c] != 1 && !(thr > 0.f && a >= thr) && a > mx)
            mx = a;
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    if ((threadIdx.x & 31) == 0)
        smax[threadIdx.x >> 5] = mx;
    __syncthreads();
    mx = 0.f;
#pragma unroll
    for (int wv = 0; wv < LQ_WARPS; wv++)
        mx = fmaxf(mx, smax[wv]);
    const float inv = mx > 0.f ? __fdiv_rn(127.f, mx) : 0.f;
    if (threadIdx.x == 0)
        rowmax[r] = mx;
    for (int64_t c = threadIdx.x; c < kpad; c += LQ_THREADS) {
        int8_t v = 0;
        if (c < k && flags[c] == 0) {
            float qv = rintf(__fmul_rn(__half2float(xr[c]), inv));
            qv       = fminf(fmaxf(qv, -127.f), 127.f);
            v        = (int8_t)qv;
        }
        qx[r * kpad + c] = v;
    }
}

/* rows [r0, r0 + m) of the batch; chunks of 16 input channels per lane */
template <int MT>
__global__ void __launch_bounds__(LQ_THREADS)
    k_gemv_int8(const lq_qlinear w, const __half *__restrict__ x, int64_t m,
                __half *__restrict__ y, lq_int8_ws ws) {
    const int      lane = threadIdx.x & 31;
    const int64_t  i    = (int64_t)blockIdx.x * LQ_WARPS + (threadIdx.x >> 5);
    const int64_t  n = w.n, k = w.k, kp = ws.kpad;
    if (i >= n)
        return;
    const int8_t  *cb      = (const int8_t *)w.qweight + i * k;
    const float    scb     = w.scb[i];
    const bool     aligned = k % 16 == 0;
    int32_t        acc[MT];
    double         fp[MT];
#pragma unroll
    for (int r = 0; r < MT; r++) {
        acc[r] = 0;
        fp[r]  = 0.0;
    }
    for (int64_t c = (int64_t)lane * 16; c < k; c += 32 * 16) {
        int32_t wq[4];
        if (aligned) {
            const int4 v = __ldg((const int4 *)(cb + c));
            wq[0] = v.x, wq[1] = v.y, wq[2] = v.z, wq[3] = v.w;
        } else {
#pragma unroll
            for (int t = 0; t < 4; t++) {
                uint32_t u = 0;
#pragma unroll
                for (int b = 0; b < 4; b++) {
                    const int64_t cc = c + 4 * t + b;
                    u |= (uint32_t)(uint8_t)(cc < k ? cb[cc] : 0) << (8 * b);
                }
                wq[t] = (int32_t)u;
            }
        }
#pragma unroll
        for (int r = 0; r < MT; r++) {
            if (r >= m)
                break;
            /* qx rows are padded to 16 and zero past k: the tail contributes nothing */
            const int4 xv = *(const int4 *)(ws.qx + r * kp + c);
            acc[r]        = __dp4a(xv.x, wq[0], acc[r]);
            acc[r]        = __dp4a(xv.y, wq[1], acc[r]);
            acc[r]        = __dp4a(xv.z, wq[2], acc[r]);
            acc[r]        = __dp4a(xv.w, wq[3], acc[r]);
        }
        if (w.threshold > 0.f) { /* runtime outlier columns: rare, checked per chunk */
            for (int t = 0; t < 16 && c + t < k; t++) {
                if (ws.flags[c + t] != 2)
                    continue;
                const int8_t bq = (int8_t)((uint32_t)wq[t >> 2] >> (8 * (t & 3)));
                const float  wf = __fmul_rn(__fmul_rn((float)bq, scb), LQ_INT8_VEC_DEQUANT_D);
                for (int r = 0; r < MT && r < m; r++)
                    fp[r] += (double)__half2float(x[r * k + c + t]) * (double)wf;
            }
        }
    }
    for (int64_t j = lane; j < w.n_outlier; j += 32) {
        const int64_t c  = w.outlier_idx[j];
        const double  wo = (double)__half2float(((const __half *)w.outlier_w)[i * w.n_outlier + j]);
        for (int r = 0; r < MT && r < m; r++)
            fp[r] += (double)__half2float(x[r * k + c]) * wo;
    }
#pragma unroll
    for (int r = 0; r < MT; r++) {
        int32_t a = acc[r];
        double  f = fp[r];
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            a += __shfl_xor_sync(0xffffffffu, a, off);
            f += __shfl_xor_sync(0xffffffffu, f, off);
        }
        if (lane == 0 && r < m) {
            const float o = __fmul_rn(__fmul_rn((float)a, __fmul_rn(ws.rowmax[r], scb)),
                                      LQ_INT8_MM_DEQUANT_D);
            float v = (float)((double)o + f);
            if (w.bias)
                v = __fadd_rn(v, lq_d_f16(w.bias, i));
            y[r * n + i] = __float2half_rn(v);
        }
    }
}

/* ------------------------------------------------------------------------------------------
 * Dequant kernels: W -> fp16 out[n, k], one thread per element along k (coalesced writes).
 * ------------------------------------------------------------------------------------------ */
__global__ void k_dequant_gptq(const lq_qlinear w, __half *__restrict__ out) {
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= w.n * w.k)
        return;
    const int64_t  i = e / w.k, c = e % w.k;
    const int64_t  g = w.g_idx[c];
    const uint32_t q = lq_d_stream_get((const int32_t *)w.qweight + i, w.n, c, w.bits);
    const float    s = lq_d_f16(w.scales, g * w.n + i);
    const int64_t  o = w.perm ? i * w.k + w.perm[c] : e; /* sorted: back to the input channel */
    out[o]           = __float2half_rn(__fmul_rn(s, (float)((int32_t)q - lq_d_gptq_zero(w, g, i))));
}

__global__ void k_dequant_awq(const lq_qlinear w, __half *__restrict__ out) {
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= w.n * w.k)
        return;
    const int64_t  i = e / w.k, c = e % w.k, words = w.n / 8, g = c / w.group_size;
    const int      sh = lq_d_awq_shift((int)(i & 7));
    const uint32_t q  = ((uint32_t)__ldg((const int32_t *)w.qweight + c * words + i / 8) >> sh) & 15u;
    const uint32_t z  = ((uint32_t)__ldg((const int32_t *)w.qzeros + g * words + i / 8) >> sh) & 15u;
    const float    s  = lq_d_f16(w.scales, g * w.n + i);
    out[e] = __float2half_rn(__fmul_rn(s, (float)((int32_t)q - (int32_t)z)));
}

__global__ void k_dequant_nf4(const lq_qlinear w, __half *__restrict__ out) {
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= w.n * w.k)
        return;
    const uint32_t byte = __ldg((const uint8_t *)w.qweight + e / 2);
    const uint32_t code = (e & 1) ? (byte & 15u) : (byte >> 4);
    out[e] = __float2half_rn(__fmul_rn(w.quant_map[code], lq_d_nf4_absmax(w, e / w.group_size)));
}

__global__ void k_dequant_int8(const lq_qlinear w, __half *__restrict__ out) {
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= w.n * w.k)
        return;
    const float v = __fmul_rn(__fmul_rn((float)((const int8_t *)w.qweight)[e], w.scb[e / w.k]),
                              LQ_INT8_VEC_DEQUANT_D);
    out[e] = __float2half_rn(v);
}

/* stored fp16 columns overwrite their dequantized int8 values (runs after k_dequant_int8) */
__global__ void k_dequant_int8_outliers(const lq_qlinear w, __half *__restrict__ out) {
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= w.n * w.n_outlier)
        return;
    const int64_t i = e / w.n_outlier, j = e % w.n_outlier;
    out[i * w.k + w.outlier_idx[j]] = ((const __half *)w.outlier_w)[e];
}

static unsigned lq_blocks(int64_t count) {
    return (unsigned)((count + LQ_THREADS - 1) / LQ_THREADS);
}

/* ------------------------------------------------------------------------------------------
 * Host side: instance selection by batch rows (templated on MT = rows rounded up to a power of
 * two <= 16) and the cuBLAS path.
 * ------------------------------------------------------------------------------------------ */
static unsigned lq_row_blocks(const lq_qlinear *w) {
    return (unsigned)((w->n + LQ_WARPS - 1) / LQ_WARPS);
}

static int lq_mt(int64_t m) {
    return m <= 1 ? 1 : m <= 2 ? 2 : m <= 4 ? 4 : m <= 8 ? 8 : 16;
}

/* Runs the statement with the compile-time row count MT_ of batch m. */
#define LQ_MT_SWITCH(m, ...)                                                                       \
    switch (lq_mt(m)) {                                                                            \
    case 1: {                                                                                      \
        constexpr int MT_ = 1;                                                                     \
        __VA_ARGS__;                                                                               \
    } break;                                                                                       \
    case 2: {                                                                                      \
        constexpr int MT_ = 2;                                                                     \
        __VA_ARGS__;                                                                               \
    } break;                                                                                       \
    case 4: {                                                                                      \
        constexpr int MT_ = 4;                                                                     \
        __VA_ARGS__;                                                                               \
    } break;                                                                                       \
    case 8: {                                                                                      \
        constexpr int MT_ = 8;                                                                     \
        __VA_ARGS__;                                                                               \
    } break;                                                                                       \
    default: {                                                                                     \
        constexpr int MT_ = 16;                                                                    \
        __VA_ARGS__;                                                                               \
    } break;                                                                                       \
    }

/* y = x @ Wh^T (+ bias) with Wh fp16 [n, k] on the device: column-major C[n, m] = Wh^T' ... in
 * cuBLAS terms C(n x m) = op(A) B with A = Wh seen as col-major [k, n] (transposed) and B = x
 * seen as col-major [k, m]. With a bias the product goes to fp32 scratch [m, n] and one
 * kernel adds the bias and rounds once, like the GEMV kernels: an fp16 C with beta = 1 was
 * measured on an H100 (cuBLAS 13.0) to round the product before adding C, one fp16 ulp off the
 * reference on about 1 output in 10^4. */
__global__ void k_bias_round(const float *__restrict__ cf, const __half *__restrict__ bias,
                             int64_t m, int64_t n, __half *__restrict__ y) {
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e < m * n)
        y[e] = __float2half_rn(__fadd_rn(cf[e], __half2float(bias[e % n])));
}

/* C [m, n] (type ct) = B [m, k] A [n, k]^T, both of type at, fp32 accumulation; bl_ws: cuBLAS's
 * workspace (LQ_CUBLAS_WS_BYTES). */
static lq_status lq_cublas_run(lq_cuda_ctx *ctx, cudaStream_t st, void *bl_ws, const void *a,
                               const void *b, cudaDataType at, void *c, cudaDataType ct, int64_t m,
                               int64_t n, int64_t k) {
    if (!ctx || !bl_ws || m > INT32_MAX || n > INT32_MAX || k > INT32_MAX)
        return LQ_ERR_INVALID_ARG;
    /* the handle is shared with the conversion pipeline, which sets its own math mode; binding
     * the stream resets the workspace to cuBLAS's own pool, so ours is set after it */
    cublasStatus_t bs = lq_cuda_ctx_blas(ctx, st, LQ_CUDA_MATH_KERNELS)
                            ? CUBLAS_STATUS_SUCCESS
                            : CUBLAS_STATUS_NOT_INITIALIZED;
    if (bs == CUBLAS_STATUS_SUCCESS)
        bs = cublasSetWorkspace(ctx->blas, bl_ws, LQ_CUBLAS_WS_BYTES);
    const float alpha = 1.f, beta = 0.f;
    if (bs == CUBLAS_STATUS_SUCCESS)
        bs = cublasGemmEx(ctx->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)n, (int)m, (int)k, &alpha, a,
                          at, (int)k, b, at, (int)k, &beta, c, ct, (int)n, CUBLAS_COMPUTE_32F,
                          CUBLAS_GEMM_DEFAULT);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        snprintf(ctx->err, sizeof ctx->err, "cuBLAS: %s (%s)", cublasGetStatusName(bs),
                 cublasGetStatusString(bs));
        return LQ_ERR_CUDA;
    }
    return LQ_OK;
}

static lq_status lq_cublas_gemm(lq_cuda_ctx *ctx, const __half *wh, const __half *bias,
                                const __half *x, int64_t m, int64_t n, int64_t k, __half *y,
                                void *scratch, cudaStream_t st) {
    if (!scratch)
        return LQ_ERR_INVALID_ARG;
    float *cf    = (float *)scratch; /* [m, n] when there is a bias */
    void  *bl_ws = (char *)scratch + (bias ? lq_align256((size_t)(m * n) * 4) : 0);
    LQ_TRY(lq_cublas_run(ctx, st, bl_ws, wh, x, CUDA_R_16F, bias ? (void *)cf : (void *)y,
                         bias ? CUDA_R_32F : CUDA_R_16F, m, n, k));
    if (bias) {
        k_bias_round<<<lq_blocks(m * n), LQ_THREADS, 0, st>>>(cf, bias, m, n, y);
        return lq_cuda_launched();
    }
    return LQ_OK;
}

/* Workspace of the cuBLAS path: the fp32 product when a bias is added after it, then cuBLAS's
 * own workspace. */
static size_t lq_cublas_ws(const lq_qlinear *w, int64_t m) {
    return (w->bias ? lq_align256((size_t)(m * w->n) * 4) : 0) + LQ_CUBLAS_WS_BYTES;
}

/* Dequantized weights first, then lq_cublas_ws's scratch. */
static size_t lq_dequant_ws(const lq_qlinear *w, int64_t m) {
    return lq_align256((size_t)(w->n * w->k) * 2) + lq_cublas_ws(w, m);
}

/* y from the fp16 weights the format's dequant kernel left at the start of ws. */
static lq_status lq_cublas_dequantized(lq_cuda_ctx *ctx, const lq_qlinear *w, const void *x,
                                       int64_t m, void *y, void *ws, cudaStream_t st) {
    return lq_cublas_gemm(ctx, (const __half *)ws, (const __half *)w->bias, (const __half *)x, m,
                          w->n, w->k, (__half *)y,
                          (char *)ws + lq_align256((size_t)(w->n * w->k) * 2), st);
}

/* ------------------------------------------------------------------------------------------
 * One host launcher for dense, GPTQ, AWQ and NF4; each format brings its hooks (INT8 keeps
 * its own: LLM.int8 quantizes the activations first at every batch size).
 * ------------------------------------------------------------------------------------------ */
typedef struct lq_cuda_fmt {
    /* W as fp16 [n, k] into out; NULL: the weights are fp16 already (dense) */
    lq_status (*dequant)(const lq_qlinear *w, void *out, void *stream);
    /* the fused kernel for m <= LQ_CUDA_GEMV_MAX_M rows; part: fp32 split-k partials */
    void (*gemv)(const lq_qlinear *w, const __half *x, int64_t m, __half *y, float *part, dim3 grid,
                 cudaStream_t st);
    /* column kernels: blocks over n and the split-k factor; NULL: a warp per output row */
    void (*grid)(const lq_qlinear *w, int64_t *col_blocks, int *splits);
    /* the most rows the fused kernel takes (0: LQ_CUDA_GEMV_MAX_M) */
    int gemv_max_m;
} lq_cuda_fmt;

static int64_t fmt_gemv_max(const lq_cuda_fmt *f) {
    return f->gemv_max_m > 0 ? f->gemv_max_m : LQ_CUDA_GEMV_MAX_M;
}

static int fmt_splits(const lq_cuda_fmt *f, const lq_qlinear *w, dim3 *grid) {
    if (!f->grid) {
        *grid = dim3(lq_row_blocks(w));
        return 1;
    }
    int64_t cb;
    int     sp;
    f->grid(w, &cb, &sp);
    *grid = dim3((unsigned)cb, (unsigned)sp);
    return sp;
}

/* out[r, c] = x[r, perm[c]]: a sorted descriptor's activations in its stored order. */
__global__ void k_gather_cols(const __half *__restrict__ x, const int32_t *__restrict__ perm,
                              int64_t m, int64_t k, __half *__restrict__ out) {
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e < m * k)
        out[e] = x[e / k * k + __ldg(perm + e % k)];
}

/* Above the GEMV rows a sorted descriptor (perm) is dequantized in its stored order, whose
 * writes coalesce, and multiplied with x gathered into that order behind the weights. */
static size_t perm_x_ws(const lq_qlinear *w, int64_t m) {
    return w->perm ? lq_align256((size_t)(m * w->k) * 2) : 0;
}

/* above the fused rows: the fp16 weights (dequantizing formats), cuBLAS's scratch, then x
 * gathered into a sorted descriptor's order */
static size_t fmt_ws(const lq_cuda_fmt *f, const lq_qlinear *w, int64_t m) {
    if (m > fmt_gemv_max(f))
        return f->dequant ? lq_dequant_ws(w, m) + perm_x_ws(w, m) : lq_cublas_ws(w, m);
    dim3      grid;
    const int sp = fmt_splits(f, w, &grid);
    return sp > 1 ? lq_align256((size_t)(sp * m * w->n) * 4) : 0;
}

static lq_status fmt_gemm(const lq_cuda_fmt *f, lq_cuda_ctx *ctx, const lq_qlinear *w,
                          const void *x, int64_t m, void *y, void *ws, void *stream) {
    const cudaStream_t st = (cudaStream_t)stream;
    if (m > fmt_gemv_max(f)) {
        if (!f->dequant)
            return lq_cublas_gemm(ctx, (const __half *)w->dense, (const __half *)w->bias,
                                  (const __half *)x, m, w->n, w->k, (__half *)y, ws, st);
        if (w->perm) {
            __half *xg = (__half *)((char *)ws + lq_dequant_ws(w, m));
            k_gather_cols<<<lq_blocks(m * w->k), LQ_THREADS, 0, st>>>((const __half *)x, w->perm, m,
                                                                      w->k, xg);
            LQ_TRY(lq_cuda_launched());
            lq_qlinear plain = *w;
            plain.perm       = NULL;
            LQ_TRY(f->dequant(&plain, ws, stream));
            return lq_cublas_dequantized(ctx, &plain, xg, m, y, ws, st);
        }
        LQ_TRY(f->dequant(w, ws, stream));
        return lq_cublas_dequantized(ctx, w, x, m, y, ws, st);
    }
    dim3      grid;
    const int sp = fmt_splits(f, w, &grid);
    f->gemv(w, (const __half *)x, m, (__half *)y, (float *)ws, grid, st);
    LQ_TRY(lq_cuda_launched());
    if (sp > 1) {
        k_splitk_finish<<<lq_blocks(m * w->n), LQ_THREADS, 0, st>>>(
            (const float *)ws, sp, m, w->n, (const __half *)w->bias, (__half *)y);
        LQ_TRY(lq_cuda_launched());
    }
    return LQ_OK;
}

/* The entry points of lq_cuda.h for a format with hooks F. */
#define LQ_CUDA_FMT_ENTRIES(fmt, F)                                                                \
    extern "C" size_t lq_ws_##fmt##_cuda(const lq_qlinear *w, int64_t m) {                         \
        return fmt_ws(&(F), w, m);                                                                 \
    }                                                                                              \
    extern "C" lq_status lq_gemm_##fmt##_cuda(lq_cuda_ctx *ctx, const lq_qlinear *w,               \
                                              const void *x, int64_t m, void *y, void *ws,         \
                                              size_t ws_size, void *stream) {                      \
        return fmt_gemm(&(F), ctx, w, x, m, y, ws, stream);                                        \
    }

/* ---- dense: fp16 (LQ_DENSE_F32's device layout, and LQ_DENSE_F16) or bf16 ---- */
/* 8 values a thread (16-byte loads and stores: the arrays are 256-byte aligned) */
__global__ void k_bf16_to_f16(const __nv_bfloat16 *__restrict__ in, int64_t cnt,
                              __half *__restrict__ out) {
    const int64_t e = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (e + 8 <= cnt) {
        const uint4           v = __ldg((const uint4 *)(in + e));
        const __nv_bfloat162 *b = (const __nv_bfloat162 *)&v;
        uint4                 o;
        __half2              *h = (__half2 *)&o;
#pragma unroll
        for (int t = 0; t < 4; t++)
            h[t] = __float22half2_rn(__bfloat1622float2(b[t]));
        *(uint4 *)(out + e) = o;
    } else {
        for (int64_t i = e; i < cnt; i++)
            out[i] = __float2half_rn(__bfloat162float(in[i]));
    }
}

static lq_status dense_bf16_dequant(const lq_qlinear *w, void *out, void *stream) {
    const int64_t cnt = w->n * w->k;
    if ((uintptr_t)w->dense % 16 || (uintptr_t)out % 16)
        return LQ_ERR_INVALID_ARG;
    k_bf16_to_f16<<<lq_blocks((cnt + 7) / 8), LQ_THREADS, 0, (cudaStream_t)stream>>>(
        (const __nv_bfloat16 *)w->dense, cnt, (__half *)out);
    return lq_cuda_launched();
}

extern "C" lq_status lq_dequant_dense_cuda(const lq_qlinear *w, void *out, void *stream) {
    if (w->dense_dtype == LQ_DENSE_BF16)
        return dense_bf16_dequant(w, out, stream);
    return cudaMemcpyAsync(out, w->dense, (size_t)(w->n * w->k) * 2, cudaMemcpyDeviceToDevice,
                           (cudaStream_t)stream) == cudaSuccess
               ? LQ_OK
               : LQ_ERR_CUDA;
}

static void dense_gemv(const lq_qlinear *w, const __half *x, int64_t m, __half *y, float *part,
                       dim3 grid, cudaStream_t st) {
    LQ_MT_SWITCH(m, k_gemv_dense<MT_, __half><<<grid, LQ_THREADS, 0, st>>>(*w, x, m, y));
}
static void dense_bf16_gemv(const lq_qlinear *w, const __half *x, int64_t m, __half *y, float *part,
                            dim3 grid, cudaStream_t st) {
    LQ_MT_SWITCH(m, k_gemv_dense<MT_, __nv_bfloat16><<<grid, LQ_THREADS, 0, st>>>(*w, x, m, y));
}

/* bf16 weights from 3 to LQ_BF16_SPLIT_M rows. cuBLAS multiplies bf16 by bf16 only, and
 * rounding the fp16 activations to bf16 would drop 3 of their 11 bits; but x = hi + lo exactly
 * with hi = bf16(x) and lo = bf16(x - hi), so one GEMM of W with the 2m rows [hi; lo] (exact
 * products, fp32 accumulation) and a sum of its two halves in fp32 is W x. At these sizes the
 * GEMM is bound by reading W, so the extra rows cost less than converting W to fp16 (~12 us at
 * 4096 x 4096, about one GEMM of 256 rows on an H200); above, the conversion is cheaper. */
#define LQ_BF16_SPLIT_M 256

__global__ void k_split_bf16(const __half *__restrict__ x, int64_t cnt,
                             __nv_bfloat16 *__restrict__ hilo) {
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e < cnt) {
        const float         v = __half2float(x[e]);
        const __nv_bfloat16 h = __float2bfloat16_rn(v);
        hilo[e]               = h;
        hilo[cnt + e]         = __float2bfloat16_rn(__fsub_rn(v, __bfloat162float(h)));
    }
}

__global__ void k_sum_halves(const float *__restrict__ c, const __half *__restrict__ bias,
                             int64_t m, int64_t n, __half *__restrict__ y) {
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e < m * n) {
        float v = __fadd_rn(c[e], c[m * n + e]);
        if (bias)
            v = __fadd_rn(v, __half2float(bias[e % n]));
        y[e] = __float2half_rn(v);
    }
}

static int bf16_split(const lq_qlinear *w, int64_t m) {
    return w->dense_dtype == LQ_DENSE_BF16 && m > 2 && m <= LQ_BF16_SPLIT_M;
}

/* [hi; lo] bf16 [2m, k], the fp32 product [2m, n], cuBLAS's workspace */
static size_t bf16_split_ws(const lq_qlinear *w, int64_t m) {
    return lq_align256((size_t)(2 * m * w->k) * 2) + lq_align256((size_t)(2 * m * w->n) * 4) +
           LQ_CUBLAS_WS_BYTES;
}

static lq_status bf16_split_gemm(lq_cuda_ctx *ctx, const lq_qlinear *w, const __half *x, int64_t m,
                                 __half *y, void *ws, cudaStream_t st) {
    __nv_bfloat16 *hilo = (__nv_bfloat16 *)ws;
    float         *c    = (float *)((char *)ws + lq_align256((size_t)(2 * m * w->k) * 2));
    void          *bl   = (char *)c + lq_align256((size_t)(2 * m * w->n) * 4);
    k_split_bf16<<<lq_blocks(m * w->k), LQ_THREADS, 0, st>>>(x, m * w->k, hilo);
    LQ_TRY(lq_cuda_launched());
    LQ_TRY(
        lq_cublas_run(ctx, st, bl, w->dense, hilo, CUDA_R_16BF, c, CUDA_R_32F, 2 * m, w->n, w->k));
    k_sum_halves<<<lq_blocks(m * w->n), LQ_THREADS, 0, st>>>(c, (const __half *)w->bias, m, w->n,
                                                             y);
    return lq_cuda_launched();
}

/* fp16 weights go to cuBLAS as they are from 2 rows (H200, 4096 x 4096: the warp-per-row
 * kernel 15.7 us at 1 row against cuBLAS's 18.3; 29.4 against 19.5 at 4). bf16 ones leave it
 * from 3 rows (at 2: 20.9 us against the split's 25.4; at 4: 32.8 against 24.6) for the split
 * up to LQ_BF16_SPLIT_M, then conversion to fp16 (the few bf16 values outside fp16's range
 * overflow, as on every fp16 path here; 37.2 us split vs 36.7 converted at 256 rows). */
static const lq_cuda_fmt  dense_fmt      = {NULL, dense_gemv, NULL, 1};
static const lq_cuda_fmt  dense_bf16_fmt = {dense_bf16_dequant, dense_bf16_gemv, NULL, 2};
static const lq_cuda_fmt *dense_hooks(const lq_qlinear *w) {
    return w->dense_dtype == LQ_DENSE_BF16 ? &dense_bf16_fmt : &dense_fmt;
}
extern "C" size_t lq_ws_dense_cuda(const lq_qlinear *w, int64_t m) {
    return bf16_split(w, m) ? bf16_split_ws(w, m) : fmt_ws(dense_hooks(w), w, m);
}
extern "C" lq_status lq_gemm_dense_cuda(lq_cuda_ctx *ctx, const lq_qlinear *w, const void *x,
                                        int64_t m, void *y, void *ws, size_t ws_size,
                                        void *stream) {
    if (bf16_split(w, m))
        return bf16_split_gemm(ctx, w, (const __half *)x, m, (__half *)y, ws, (cudaStream_t)stream);
    return fmt_gemm(dense_hooks(w), ctx, w, x, m, y, ws, stream);
}

/* ---- GPTQ ---- */
static void gptq_grid(const lq_qlinear *w, int64_t *col_blocks, int *splits) {
    const int64_t ku = w->bits == 3 ? 32 : 32 / w->bits;
    *col_blocks      = (w->n + GPTQ_BC - 1) / GPTQ_BC;
    *splits          = lq_splits(*col_blocks, w->k / ku, GPTQ_KS);
}

extern "C" lq_status lq_dequant_gptq_cuda(const lq_qlinear *w, void *out, void *stream) {
    k_dequant_gptq<<<lq_blocks(w->n * w->k), LQ_THREADS, 0, (cudaStream_t)stream>>>(
        *w, (__half *)out);
    return lq_cuda_launched();
}

template <int BITS>
static void gptq_launch(const lq_qlinear *w, const __half *x, int64_t m, __half *y, float *part,
                        dim3 grid, cudaStream_t st) {
    LQ_MT_SWITCH(m, k_gemv_gptq<BITS, MT_><<<grid, LQ_THREADS, 0, st>>>(*w, x, m, y, part));
}

static void gptq_gemv(const lq_qlinear *w, const __half *x, int64_t m, __half *y, float *part,
                      dim3 grid, cudaStream_t st) {
    switch (w->bits) {
    case 2: gptq_launch<2>(w, x, m, y, part, grid, st); break;
    case 3: gptq_launch<3>(w, x, m, y, part, grid, st); break;
    case 4: gptq_launch<4>(w, x, m, y, part, grid, st); break;
    default: gptq_launch<8>(w, x, m, y, part, grid, st); break;
    }
}

static const lq_cuda_fmt gptq_fmt = {lq_dequant_gptq_cuda, gptq_gemv, gptq_grid, 0};
LQ_CUDA_FMT_ENTRIES(gptq, gptq_fmt)

/* ---- AWQ ---- */
static void awq_grid(const lq_qlinear *w, int64_t *col_blocks, int *splits) {
    *col_blocks = (w->n + AWQ_BC - 1) / AWQ_BC;
    *splits     = lq_splits(*col_blocks, w->k, AWQ_KS);
}

extern "C" lq_status lq_dequant_awq_cuda(const lq_qlinear *w, void *out, void *stream) {
    k_dequant_awq<<<lq_blocks(w->n * w->k), LQ_THREADS, 0, (cudaStream_t)stream>>>(
        *w, (__half *)out);
    return lq_cuda_launched();
}

static void awq_gemv(const lq_qlinear *w, const __half *x, int64_t m, __half *y, float *part,
                     dim3 grid, cudaStream_t st) {
    LQ_MT_SWITCH(m, k_gemv_awq<MT_><<<grid, LQ_THREADS, 0, st>>>(*w, x, m, y, part));
}

static const lq_cuda_fmt awq_fmt = {lq_dequant_awq_cuda, awq_gemv, awq_grid, 0};
LQ_CUDA_FMT_ENTRIES(awq, awq_fmt)

/* ---- NF4 ---- */
extern "C" lq_status lq_dequant_nf4_cuda(const lq_qlinear *w, void *out, void *stream) {
    k_dequant_nf4<<<lq_blocks(w->n * w->k), LQ_THREADS, 0, (cudaStream_t)stream>>>(
        *w, (__half *)out);
    return lq_cuda_launched();
}

static void nf4_gemv(const lq_qlinear *w, const __half *x, int64_t m, __half *y, float *part,
                     dim3 grid, cudaStream_t st) {
    LQ_MT_SWITCH(m, k_gemv_nf4<MT_><<<grid, LQ_THREADS, 0, st>>>(*w, x, m, y));
}

static const lq_cuda_fmt nf4_fmt = {lq_dequant_nf4_cuda, nf4_gemv, NULL, 0};
LQ_CUDA_FMT_ENTRIES(nf4, nf4_fmt)

/* ---- INT8 ---- */
extern "C" size_t lq_ws_int8_cuda(const lq_qlinear *w, int64_t m) {
    return lq_int8_ws_bytes(w->k, m);
}

extern "C" lq_status lq_dequant_int8_cuda(const lq_qlinear *w, void *out, void *stream) {
    const cudaStream_t st = (cudaStream_t)stream;
    k_dequant_int8<<<lq_blocks(w->n * w->k), LQ_THREADS, 0, st>>>(*w, (__half *)out);
    LQ_TRY(lq_cuda_launched());
    if (w->n_outlier > 0) {
        k_dequant_int8_outliers<<<lq_blocks(w->n * w->n_outlier), LQ_THREADS, 0, st>>>(
            *w, (__half *)out);
        LQ_TRY(lq_cuda_launched());
    }
    return LQ_OK;
}

extern "C" lq_status lq_gemm_int8_cuda(lq_cuda_ctx *ctx, const lq_qlinear *w, const void *x,
                                       int64_t m, void *y, void *ws, size_t ws_size,
                                       void *stream) {
    const cudaStream_t st = (cudaStream_t)stream;
    const int64_t      k  = w->k;
    lq_int8_ws         b;
    b.kpad   = lq_int8_kpad(k);
    b.flags  = (uint8_t *)ws;
    b.rowmax = (float *)((char *)ws + lq_align256((size_t)k));
    b.qx     = (int8_t *)((char *)b.rowmax + lq_align256((size_t)m * 4));
    k_int8_flags<<<lq_blocks(k), LQ_THREADS, 0, st>>>(*w, (const __half *)x, m, b.flags);
    LQ_TRY(lq_cuda_launched());
    if (w->n_outlier > 0) {
        k_int8_flags_stored<<<lq_blocks(w->n_outlier), LQ_THREADS, 0, st>>>(*w, b.flags);
        LQ_TRY(lq_cuda_launched());
    }
    if (m > INT32_MAX)
        return LQ_ERR_INVALID_ARG;
    k_int8_rowquant<<<(unsigned)m, LQ_THREADS, 0, st>>>(*w, (const __half *)x, b.flags, b.rowmax,
                                                         b.qx, b.kpad);
    LQ_TRY(lq_cuda_launched());
    /* LLM.int8 semantics at every batch size: the fused kernel in chunks of rows (the rows of a
     * chunk share the weight reads) */
    for (int64_t r0 = 0; r0 < m; r0 += LQ_CUDA_GEMV_MAX_M) {
        const int64_t mc = m - r0 < LQ_CUDA_GEMV_MAX_M ? m - r0 : LQ_CUDA_GEMV_MAX_M;
        lq_int8_ws    bc = b;
        bc.rowmax += r0;
        bc.qx += r0 * b.kpad;
        LQ_MT_SWITCH(mc, k_gemv_int8<MT_><<<lq_row_blocks(w), LQ_THREADS, 0, st>>>(
                             *w, (const __half *)x + r0 * k, mc, (__half *)y + r0 * w->n, bc));
        LQ_TRY(lq_cuda_launched());
    }
    return LQ_OK;
}
