/* lq_kernels.h -- per-format kernels (scalar reference, optimized CPU, CUDA), packing from the
 * neutral unpacked representation, and the kernel-traits table. Kernels key on format only.
 * Public entry points (lq_qlinear_*) in llmquant.h dispatch through the table. */
#ifndef LQ_KERNELS_H
#define LQ_KERNELS_H

#include "lq_base.h"
#include "lq_qformat.h" /* lq_qbuf, the layouts the kernels decode */

/* ---------------------------------------------------------------------------------------
 * Packing: the neutral representation a method decides -> on-disk layout in an lq_qbuf.
 *   q      uint8 [n, k]  integer codes 0..2^bits-1 (row-major like W)
 *   zeros  int32 [G, n]  integer zero points (the real zero, v1's "-1" is applied here)
 *   scales float [G, n]  (stored as fp16)
 *   g_idx  int32 [k]     group of each input column (NULL = c / group_size)
 *   bias   float [n] or NULL
 * --------------------------------------------------------------------------------------- */
lq_status lq_pack_gptq(int bits, int64_t n, int64_t k, int64_t group_size, const uint8_t *q,
                       const int32_t *zeros, const float *scales, const int32_t *g_idx,
                       const float *bias, lq_qbuf *out, lq_err *err);
lq_status lq_pack_awq(int64_t n, int64_t k, int64_t group_size, const uint8_t *q,
                      const int32_t *zeros, const float *scales, const float *bias, lq_qbuf *out,
                      lq_err *err);
/* codes uint8 [n*k] 0..15 (NF4 table index), absmax float [nblocks]; double_quant compresses
 * absmax with the 8-bit dynamic map in blocks of nested_blocksize (bitsandbytes semantics). */
lq_status lq_pack_nf4(int64_t n, int64_t k, int64_t blocksize, const uint8_t *codes,
                      const float *absmax, int double_quant, int nested_blocksize,
                      const float *bias, lq_qbuf *out, lq_err *err);
/* cb int8 [n, k], scb float [n], outlier columns idx [n_outlier] with fp16 weights taken from
 * w_outlier float [n, n_outlier]. */
lq_status lq_pack_int8(int64_t n, int64_t k, const int8_t *cb, const float *scb,
                       const int32_t *outlier_idx, int64_t n_outlier, const float *w_outlier,
                       float threshold, const float *bias, lq_qbuf *out, lq_err *err);

/* Code tables (exact bitsandbytes values). */
extern const float lq_nf4_table[16];
/* bitsandbytes create_dynamic_map(signed=True) 256-entry code (for double quant). */
void lq_dynamic_map_8bit(float out[256]);

/* ---------------------------------------------------------------------------------------
 * Vector functions of the model forward, one table per instruction set; lq_vec_ops_get: the
 * fastest this CPU has (LQ_CPU_KERNELS=portable: the scalar references), looked up once per
 * batch of rows. Results within 1e-6 relative of the references (exp differs in the last bits).
 *   softmax_row: softmax of row[lo..hi] (inclusive) in place, zero elsewhere in [0, n)
 *   silu_mul:    g[i] = silu(gate[i]) * up[i] (g may be gate)
 * --------------------------------------------------------------------------------------- */
typedef struct lq_vec_ops {
    void (*softmax_row)(float *row, int64_t n, int64_t lo, int64_t hi);
    void (*silu_mul)(float *g, const float *gate, const float *up, int64_t n);
} lq_vec_ops;
extern const lq_vec_ops lq_vec_ops_ref;
const lq_vec_ops       *lq_vec_ops_get(void);

/* AWQ's group rounding (AutoAWQ pseudo_quantize_tensor, zero point): w[len] in place to
 * (c - z) * s with s = max(max - min, 1e-5) / (2^bits - 1), z = clamp(-round(min / s)),
 * c = clamp(round(w / s) + z), round to nearest even; q, scale, zero receive the codes and
 * parameters when not NULL. */
void lq_awq_quant_group(float *w, int64_t len, int maxq, uint8_t *q, float *scale, int32_t *zero);

/* Second moments of calibration inputs (GPTQ's Hessians, AWQ's Gram matrices):
 * H[k, k] = beta * H + alpha * x^T x for x[t, k] row-major, on the upper triangle (j >= i); the
 * lower one is undefined afterwards. AVX-512: lq_gemm512's blocking on the upper panels (Zen 5
 * VM, 2 threads, t = 8192: k = 576 in 7.7 ms, 1536 in 48 ms, where OpenBLAS's ssyrk took 12.7
 * and 85 on its AVX2 kernels, 7.4 and 45.5 on its AVX-512 ones); else OpenBLAS. nthreads <= 0:
 * the OpenMP default. */
void lq_ssyrk_upper(int64_t k, int64_t t, float alpha, const float *x, float beta, float *H,
                    int nthreads);
/* Row-major float GEMM of the model forward and the methods: C[m, n] = beta * C +
 * alpha * op(A) @ op(B), op(A) = A [m, k] (ta 0) or A^T (A as [k, m]), op(B) = B [k, n] (tb 0)
 * or B^T (B as [n, k]); lda / ldb / ldc the row strides; C not read when beta is 0.
 * nthreads 1 runs on the calling thread (inside a parallel region), <= 0 the OpenMP default.
 * AVX-512: lq_gemm512 (results then depend on neither OpenBLAS's build nor the core it
 * detects); else OpenBLAS's sgemm. */
void lq_sgemm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *A,
              int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc,
              int nthreads);

/* ---------------------------------------------------------------------------------------
 * Kernel traits: one row per lq_format, the compute side of a format (its layout, names and
 * rules are formats/lq_qformat.h's row). NULL function = unsupported (tests print SKIP).
 * --------------------------------------------------------------------------------------- */
typedef struct lq_format_traits {
    /* scalar references: plain loops, no SIMD/threads; the oracle for everything else */
    void (*dequant_ref)(const lq_qlinear *w, float *out /* [n, k] */);
    void (*gemm_ref)(const lq_qlinear *w, const float *x /* [m, k] */, int64_t m,
                     float *y /* [m, n] */);

    /* optimized CPU */
    lq_status (*dequant_cpu)(const lq_qlinear *w, float *out, int nthreads);
    size_t (*ws_cpu)(const lq_qlinear *w, int64_t m);
    lq_status (*gemm_cpu)(const lq_qlinear *w, const float *x, int64_t m, float *y, void *ws,
                          size_t ws_size, int nthreads);

    /* CUDA (NULL in a build without CUDA): fp16 activations, device pointers, no allocation,
     * no synchronization. Defined in kernels/cuda/. */
    lq_status (*dequant_cuda)(const lq_qlinear *w, void *out_f16 /* [n, k] */, void *stream);
    size_t (*ws_cuda)(const lq_qlinear *w, int64_t m);
    lq_status (*gemm_cuda)(lq_cuda_ctx *ctx, const lq_qlinear *w, const void *x_f16, int64_t m,
                           void *y_f16, void *ws, size_t ws_size, void *stream);

    double tol_nmse;     /* NMSE bound of optimized kernels vs _ref on random inputs (all backends,
                            CUDA's fp16 activations included) */
    double tol_nmse_cpu; /* tighter bound for the float32 CPU kernels */

    /* Reduced-precision activations, under the flags qx_flag of lq_qlinear_forward_cpu_ex:
     * where quantizes_x_cpu(w, m, flags) (NULL: never; flags: the caller's), gemm_cpu_qx rounds
     * the activations (LQ_QLINEAR_INT_X: to int16/int8, AVX-512 VNNI; dense LQ_QLINEAR_BF16_X
     * on bf16 weights: to bf16, AVX-512 BF16; LQ_QLINEAR_F16_X on fp16 weights: to fp16) and
     * equals gemm_qx_ref, the scalar oracle of that semantics (which w alone fixes), bit for bit
     * where tol_nmse_qx_ref is 0 (else on small-integer inputs, and within tol_nmse_qx_ref on
     * random ones: float sums in another order), and gemm_ref within tol_nmse_qx. */
    unsigned qx_flag;
    int (*quantizes_x_cpu)(const lq_qlinear *w, int64_t m, unsigned flags);
    size_t (*ws_cpu_qx)(const lq_qlinear *w, int64_t m);
    lq_status (*gemm_cpu_qx)(const lq_qlinear *w, const float *x, int64_t m, float *y, void *ws,
                             size_t ws_size, int nthreads);
    void (*gemm_qx_ref)(const lq_qlinear *w, const float *x, int64_t m, float *y);
    double tol_nmse_qx;
    double tol_nmse_qx_ref;
} lq_format_traits;

const lq_format_traits *lq_format_traits_get(lq_format f);

#endif
