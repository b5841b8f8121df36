/* lq_kernels_impl.h -- internal to kernels/: per-format entry points that the traits table in
 * lq_formats.c binds, and the helpers the scalar references and the optimized CPU kernels share
 * (the bit-level decoding of the layouts is formats/lq_qformat.h's, one copy for all).
 * Nothing outside kernels/ includes this; other modules go through lq_format_traits_get. */
#ifndef LQ_KERNELS_IMPL_H
#define LQ_KERNELS_IMPL_H

#include "lq_dtype.h"
#include "lq_kernels.h"

#include <math.h>

#define LQ_FMT_DECL(fmt)                                                                           \
    void      lq_dequant_##fmt##_ref(const lq_qlinear *w, float *out);                             \
    void      lq_gemm_##fmt##_ref(const lq_qlinear *w, const float *x, int64_t m, float *y);       \
    lq_status lq_dequant_##fmt##_cpu(const lq_qlinear *w, float *out, int nthreads);               \
    size_t    lq_ws_##fmt##_cpu(const lq_qlinear *w, int64_t m);                                   \
    lq_status lq_gemm_##fmt##_cpu(const lq_qlinear *w, const float *x, int64_t m, float *y,        \
                                  void *ws, size_t ws_size, int nthreads);

LQ_FMT_DECL(dense)
LQ_FMT_DECL(gptq)
LQ_FMT_DECL(awq)
LQ_FMT_DECL(nf4)
LQ_FMT_DECL(int8)
#undef LQ_FMT_DECL

/* Scalar oracles of the weight-only formats (ref/lq_ref_common.c): w[i, c] decoded by wf. */
typedef float (*lq_ref_weight_fn)(const lq_qlinear *w, int64_t i, int64_t c);
void lq_ref_dequant(const lq_qlinear *w, lq_ref_weight_fn wf, float *out);
void lq_ref_gemm(const lq_qlinear *w, lq_ref_weight_fn wf, const float *x, int64_t m, float *y);

/* Per-block absmax of NF4, expanding double quant exactly as bitsandbytes does
 * (dequantize_blockwise then `+ offset`: two float32 roundings, never fused). Defined in
 * lq_formats.c, which is compiled without contraction like all of kernels/. */
float lq_nf4_absmax(const lq_qlinear *w, int64_t block);
/* out[b - b0] = lq_nf4_absmax(w, b) for b in [b0, b1): one call per run of blocks. */
void lq_nf4_absmax_range(const lq_qlinear *w, int64_t b0, int64_t b1, float *out);

/* INT8 (LLM.int8) constants, bit-for-bit the ones bitsandbytes multiplies with:
 * int8_mm_dequant uses 6.200124e-05 (~1/127^2), int8_vectorwise_dequant 1/127. */
#define LQ_INT8_MM_DEQUANT  6.200124e-05f
#define LQ_INT8_VEC_DEQUANT 7.874015718698502e-3f

/* Output scale of the int32 accumulator of activation row r, weight row i. */
static inline float lq_int8_out(int32_t acc, float rowmax, float scb) {
    return ((float)acc * (rowmax * scb)) * LQ_INT8_MM_DEQUANT;
}

/* Row quantization of an activation value (torch.round = half to even). */
static inline int8_t lq_int8_quant_x(float x, float inv_scale /* 127 / rowmax */) {
    float q = nearbyintf(x * inv_scale);
    if (q > 127.f)
        q = 127.f;
    if (q < -127.f)
        q = -127.f;
    return (int8_t)q;
}

/* Hot CPU loops are written as plain C over fixed-width column blocks so the compiler
 * vectorizes them; on x86-64 GCC also emits an AVX2 clone picked at load time (ifunc), so a
 * portable build still runs 8-wide where the CPU allows. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(LQ_NO_CLONES)
#define LQ_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
/* The same with an AVX-512 clone too, for the one- and two-row register kernels: still 8-lane
 * vectors, but 32 of them, where the 16 of AVX2 made GCC spill (accumulators, words, field
 * masks) or fold a word's load into each of its field masks. Zen 4, 4096 x 4096 in cache, 1
 * thread, one row: GPTQ-4 0.615 -> 0.575 ms, GPTQ-3 0.82 -> 0.69, AWQ as stored 0.85 -> 0.76;
 * two rows GPTQ-8 1.09 -> 0.89. From 4 rows it lost (act-order as stored 3.20 -> 3.83, the
 * 16-row buffered kernel 6.2 -> 6.9), so those keep LQ_CLONES. */
#define LQ_CLONES_V4 __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define LQ_CLONES
#define LQ_CLONES_V4
#endif

/* 8-lane vectors (GNU vector extensions: AVX2 registers in the x86-64-v3 clone, two SSE
 * registers in the baseline one, NEON pairs on arm64). Kernels spell out their register blocks
 * with these so accumulators stay in registers whatever the auto-vectorizer decides. */
#if defined(__GNUC__) && !defined(__clang__)
/* The helpers below are always inlined into their caller (so they take its target, AVX2 or
 * not, even at -O0): no 32-byte vector ever crosses a call, and the warning that one would be
 * passed differently with and without AVX does not apply. */
#pragma GCC diagnostic ignored "-Wpsabi"
#elif defined(__clang__)
#pragma clang diagnostic ignored "-Wpsabi"
#endif
#define LQ_VINL static inline __attribute__((always_inline))
typedef float    lq_v8f __attribute__((vector_size(32)));
typedef int32_t  lq_v8i __attribute__((vector_size(32)));
typedef uint32_t lq_v8u __attribute__((vector_size(32)));

LQ_VINL lq_v8f lq_v8f_load(const float *p) {
    lq_v8f v;
    memcpy(&v, p, sizeof v);
    return v;
}
LQ_VINL lq_v8u lq_v8u_load(const void *p) {
    lq_v8u v;
    memcpy(&v, p, sizeof v);
    return v;
}
LQ_VINL void lq_v8f_store(float *p, lq_v8f v) {
    memcpy(p, &v, sizeof v);
}
/* broadcast by shuffling lane 0: compilers turn this into one (v)broadcast, from memory when
 * the scalar is loaded (a brace list of eight copies or `zero + f` get assembled lane by lane) */
#if defined(__clang__)
#define LQ_SPLAT8(v) __builtin_shufflevector((v), (v), 0, 0, 0, 0, 0, 0, 0, 0)
#else
#define LQ_SPLAT8(v) __builtin_shuffle((v), (lq_v8i){0, 0, 0, 0, 0, 0, 0, 0})
#endif
LQ_VINL lq_v8f lq_v8f_splat(float f) {
    const lq_v8f v = {f};
    return LQ_SPLAT8(v);
}
LQ_VINL lq_v8u lq_v8u_splat(uint32_t u) {
    const lq_v8u v = {u};
    return (lq_v8u)LQ_SPLAT8((lq_v8i)v);
}
/* t[idx] for a 16-entry table held as lo = t[0..7], hi = t[8..15] (idx in 0..15): two
 * permutes and a blend with AVX2 under GCC; lane by lane elsewhere. */
LQ_VINL lq_v8f lq_v8f_lut16(lq_v8f lo, lq_v8f hi, lq_v8i idx) {
#if defined(__clang__)
    lq_v8f r;
    for (int l = 0; l < 8; l++)
        r[l] = idx[l] < 8 ? lo[idx[l]] : hi[idx[l] - 8];
    return r;
#else
    return __builtin_shuffle(lo, hi, idx);
#endif
}
/* codes (unsigned, < 2^24) -> float */
LQ_VINL lq_v8f lq_v8u_to_f(lq_v8u v) {
    return __builtin_convertvector((lq_v8i)v, lq_v8f);
}

/* Fused (unpack-and-dot) kernels have register-blocked instances for m <= LQ_FUSED_M rows (the
 * GPTQ/AWQ grouped ones below LQ_BUF_M, then their buffered form up to 16 rows with AVX-512 and
 * LQ_BUF_MAX_M without); larger m dequantizes tiles + sgemm. */
#define LQ_FUSED_M 8

/* Buffered small-m GEMM of the fused kernels (GPTQ / AWQ from 5 rows): a block of LQ_BUF_KC
 * channels x LQ_BUF_NC columns of weights decoded once into an L1 buffer buf[c][LQ_BUF_NC],
 * then every row run over it in register blocks of up to LQ_BUF_MR rows x 16 columns. */
#define LQ_BUF_KC    128 /* 128 x 16 floats: 8 KiB */
#define LQ_BUF_NC    16
#define LQ_BUF_MR    6
#define LQ_BUF_M     5  /* from this many rows (below: decoded in registers) */
#define LQ_BUF_MAX_M 48 /* up to this many without AVX-512 (see lq_grouped_max_m) */

/* part[r][0..16) (+)= sum over the kc decoded channels of x[r][c] * buf[c][0..16), MR rows;
 * xc is channel-major (xc[c * m + r]), so a channel's rows share a cache line (rows k floats
 * apart share L1 sets once k is a multiple of 1024; 2-4% less time at 8-16 rows on Zen 3). */
LQ_VINL void lq_buf_rows_mr(const float *xc, int64_t m, const float *buf, int64_t kc,
                            float *part, int first, const int MR) {
    lq_v8f acc[LQ_BUF_MR][2];
    for (int r = 0; r < MR; r++)
        for (int h = 0; h < 2; h++)
            acc[r][h] = first ? lq_v8f_splat(0.f) : lq_v8f_load(part + r * LQ_BUF_NC + 8 * h);
    for (int64_t c = 0; c < kc; c++) {
        const lq_v8f q0 = lq_v8f_load(buf + c * LQ_BUF_NC);
        const lq_v8f q1 = lq_v8f_load(buf + c * LQ_BUF_NC + 8);
        for (int r = 0; r < MR; r++) {
            const lq_v8f xb = lq_v8f_splat(xc[c * m + r]);
            acc[r][0] += xb * q0;
            acc[r][1] += xb * q1;
        }
    }
    for (int r = 0; r < MR; r++)
        for (int h = 0; h < 2; h++)
            lq_v8f_store(part + r * LQ_BUF_NC + 8 * h, acc[r][h]);
}

/* y[r][0..16) (+= when add) s * part[r] - zs * xsum[r * G], r < m: a group's scale and zero-point
 * term applied to its 16 columns' sums. */
LQ_VINL void lq_buf_epilogue(const float *part, int64_t m, const float *xsum, int64_t G,
                             const lq_v8f s[2], const lq_v8f zs[2], int add, float *y,
                             int64_t ldy) {
    for (int64_t r = 0; r < m; r++) {
        const lq_v8f xs = lq_v8f_splat(xsum[r * G]);
        float       *yr = y + r * ldy;
        for (int h = 0; h < 2; h++) {
            const lq_v8f p = s[h] * lq_v8f_load(part + r * LQ_BUF_NC + 8 * h) - zs[h] * xs;
            lq_v8f_store(yr + 8 * h, add ? lq_v8f_load(yr + 8 * h) + p : p);
        }
    }
}

/* xc[c * m + r] = x[r * k + c]: x channel-major, as lq_buf_rows reads it */
static inline void lq_buf_xt(const float *x, int64_t m, int64_t k, float *xc) {
    for (int64_t r = 0; r < m; r++)
        for (int64_t c = 0; c < k; c++)
            xc[c * m + r] = x[r * k + c];
}

/* part[r][0..16) (+)= x[r] . buf for all m rows (xc channel-major, as lq_buf_rows_mr), in
 * ceil(m / 6) even blocks: a block of 2 rows has 4 chains, too few for the multiply-add latency
 * (8 rows: 6 + 2 took 10% longer than 4 + 4). */
LQ_VINL void lq_buf_rows(const float *xc, int64_t m, const float *buf, int64_t kc, float *part,
                         int first) {
    const int64_t nrb = (m + LQ_BUF_MR - 1) / LQ_BUF_MR;
    for (int64_t rb = 0; rb < nrb; rb++) {
        const int64_t r0 = m * rb / nrb, rn = m * (rb + 1) / nrb - r0;
        const float  *xr = xc + r0;
        float        *pr = part + r0 * LQ_BUF_NC;
        switch (rn) {
#define LQ_ROWS(R)                                                                                 \
    case R:                                                                                        \
        lq_buf_rows_mr(xr, m, buf, kc, pr, first, R);                                              \
        break;
            LQ_ROWS(1) LQ_ROWS(2) LQ_ROWS(3) LQ_ROWS(4) LQ_ROWS(5) LQ_ROWS(6)
#undef LQ_ROWS
        default:
            break;
        }
    }
}

/* fp16 -> fp32 without branches (vectorizes; exact for every input, same bits as
 * lq_f16_to_f32): normals by rebiasing, subnormals as em * 2^-24, Inf/NaN by exponent fill. */
static inline float lq_f16_to_f32_fast(uint16_t h) {
    const uint32_t em   = (uint32_t)(h & 0x7fffu);
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t       nb   = (em << 13) + 0x38000000u; /* exponent + (127 - 15) */
    if (em >= 0x7c00u)
        nb = 0x7f800000u | ((em & 0x3ffu) << 13);
    float f;
    memcpy(&f, &nb, 4);
    if (em < 0x400u)
        f = (float)em * 0x1p-24f;
    uint32_t u;
    memcpy(&u, &f, 4);
    u |= sign;
    memcpy(&f, &u, 4);
    return f;
}
/* 8 consecutive fp16 values as a vector: lq_f16_to_f32_fast lane-wise, same bits (selects as
 * masks). Per-group scales are decoded once per column block and group, and scalar decoding
 * (with the zero points') took 27-32% of the float GPTQ kernel at one row (AVX2, 4096 x 4096,
 * 1 thread: 0.96 ms, 0.70 without). */
LQ_VINL lq_v8f lq_v8f_from_f16(const uint16_t *h) {
    typedef uint16_t lq_v8h __attribute__((vector_size(16)));
    lq_v8h           hv;
    memcpy(&hv, h, sizeof hv);
    const lq_v8u u    = __builtin_convertvector(hv, lq_v8u);
    const lq_v8u em   = u & lq_v8u_splat(0x7fffu);
    const lq_v8u infm = (lq_v8u)(em >= lq_v8u_splat(0x7c00u)); /* all ones where Inf/NaN */
    const lq_v8u subm = (lq_v8u)(em < lq_v8u_splat(0x400u));   /* subnormal or zero */
    const lq_v8u nb   = (em << 13) + lq_v8u_splat(0x38000000u) + (infm & lq_v8u_splat(0x38000000u));
    const lq_v8f sf   = __builtin_convertvector((lq_v8i)em, lq_v8f) * lq_v8f_splat(0x1p-24f);
    lq_v8u       sb;
    memcpy(&sb, &sf, sizeof sb);
    const lq_v8u r = ((nb & ~subm) | (sb & subm)) | ((u & lq_v8u_splat(0x8000u)) << 16);
    lq_v8f       f;
    memcpy(&f, &r, sizeof f);
    return f;
}

/* ---------------------------------------------------------------------------------------
 * Integer activations (the VNNI kernels): a block of len values quantized symmetrically to
 * +-qmax (127: int8), dx = absmax / qmax, q = round-half-even(x * qmax / absmax)
 * clamped; returns the sum of the codes. One copy for the kernels and their scalar reference,
 * so both round alike. Kernel-side callers outside an AVX2 target are LQ_CLONES: x86-64's
 * baseline has no rounding instruction, so nearbyintf is a libm call per value there (15 cycles
 * a channel on Zen 3: 0.02 ms of a one-row call at k = 4096, as much as the AVX2 GPTQ-4 kernel
 * takes for 200 columns), while the v3 clone rounds in vectors.
 * --------------------------------------------------------------------------------------- */
static inline int32_t lq_qx_block(const float *x, int64_t len, float qmax, int32_t *q, float *dx) {
    float amax = 0.f;
    for (int64_t c = 0; c < len; c++) {
        const float a = fabsf(x[c]);
        amax          = a > amax ? a : amax;
    }
    const float inv = amax > 0.f ? qmax / amax : 0.f;
    int32_t     sum = 0;
    for (int64_t c = 0; c < len; c++) {
        float v = nearbyintf(x[c] * inv);
        v       = v > qmax ? qmax : v < -qmax ? -qmax : v;
        q[c]    = (int32_t)v;
        sum += (int32_t)v;
    }
    *dx = amax / qmax;
    return sum;
}

/* GPTQ (bits 2/3/4/8, g_idx = c / group_size, whole-word groups) and AWQ with integer
 * activations. The *_qx_bits of a format at m rows: 8 (int8 activations, up to LQ_QX_X8_MAX_M
 * rows: llama.cpp's Q8 activations, in smaller blocks) or 0 (float kernels, or no such kernel
 * for the layout); the same on every CPU (AWQ as stored had int16 at m <= 4 until 0.2.3);
 * *_qx_block: channels per activation block (the group when <= 256 channels, else a divisor
 * of it, a multiple of unit). ref/ defines the semantics; the CPU picks it only with AVX-512
 * VNNI or AVX2. */
#define LQ_QX_X8_MAX_M LQ_QLINEAR_INT_X_ROWS
int64_t lq_qx_block_size(int64_t group_size, int64_t k, int64_t unit);
int     lq_gptq_qx_bits(const lq_qlinear *w, int64_t m);
/* g_idx[c] == c / group_size for every c (no act-order): ref/lq_ref_gptq.c */
int     lq_gptq_gidx_plain(const lq_qlinear *w);
int64_t lq_gptq_qx_block(const lq_qlinear *w);
int     lq_awq_qx_bits(const lq_qlinear *w, int64_t m);
int64_t lq_awq_qx_block(const lq_qlinear *w);
/* Scalar oracles: per block of channels, int32 sums of codes times weights, then
 * t = fma(-z, sum(xq), acc) and y = fma(t, s * dx, y) block by block in order, plus the bias. */
typedef uint32_t (*lq_ref_code_fn)(const lq_qlinear *w, int64_t c, int64_t i);
typedef int32_t (*lq_ref_zero_fn)(const lq_qlinear *w, int64_t g, int64_t i);
void lq_ref_gemm_qx(const lq_qlinear *w, lq_ref_code_fn code, lq_ref_zero_fn zero, int64_t ab,
                    const float *x, int64_t m, float *y);
void lq_gemm_gptq_qx_ref(const lq_qlinear *w, const float *x, int64_t m, float *y);
void lq_gemm_awq_qx_ref(const lq_qlinear *w, const float *x, int64_t m, float *y);
/* NF4 (ref/lq_ref_nf4.c): int8 at every m; the code book scaled to int8 too (tq, returning the
 * scale max|map| / 127). */
int     lq_nf4_qx_bits(const lq_qlinear *w, int64_t m);
int64_t lq_nf4_qx_block(const lq_qlinear *w);
float   lq_nf4_qx_table(const lq_qlinear *w, int8_t tq[16]);
void    lq_gemm_nf4_qx_ref(const lq_qlinear *w, const float *x, int64_t m, float *y);

/* AVX-512 float kernels (cpu/lq_cpu_avx512.c), picked at run time. lq_cpu_avx512: the CPU has
 * AVX-512 F/BW/DQ/VL and LQ_CPU_KERNELS is not "portable". NF4 for m <= LQ_NF4_AVX512_M where
 * lq_nf4_avx512_ok (k % 32 == 0, power-of-two blocks of >= 32), ws of lq_ws_nf4_avx512 bytes;
 * no bias (the caller adds it). */
#define LQ_NF4_AVX512_M 64
int       lq_cpu_avx512(void);
int       lq_nf4_avx512_ok(const lq_qlinear *w, int64_t m);
size_t    lq_ws_nf4_avx512(const lq_qlinear *w, int64_t m);
lq_status lq_gemm_nf4_avx512(const lq_qlinear *w, const float *x, int64_t m, float *y, void *ws,
                             size_t ws_size, int nthreads);
/* out[b - b0] = lq_nf4_absmax(w, b) for b in [b0, b1) (double quant: 16 blocks a vector) */
void lq_nf4_absmax_avx512(const lq_qlinear *w, float *out, int64_t b0, int64_t b1);

/* Dense fp16 / bf16 weights converted as they are read, m <= LQ_DENSE16_AVX512_M (AVX-512;
 * no workspace, no bias); lq_gemm512 above (4096 x 4096, 1 thread, Zen 5: a tie at 48 rows
 * for fp16, 10.3-10.8 ms against 11.7-12.0 at 64, bf16 10.2-10.4 against 12.4). On Zen 4,
 * whose 512-bit shuffles take both halves of its FP pipes, lq_gemm512's transposing pack
 * costs more: there up to LQ_DENSE16_ZEN4_M rows (fp16, 1 thread, 64 rows: 4096 x 4096
 * 19.5-20.1 ms against 22.6-23.8, 11008 x 4096 53-57 against 61-64; 96 rows a tie, 128 the
 * GEMM ahead). */
#define LQ_DENSE16_AVX512_M 48
#define LQ_DENSE16_ZEN4_M   64
int       lq_dense16_avx512_ok(const lq_qlinear *w, int64_t m);
lq_status lq_gemm_dense16_avx512(const lq_qlinear *w, const float *x, int64_t m, float *y,
                                 int nthreads);
/* h[0, cnt) (fp16, or bf16 when bf) -> float32; only where lq_cpu_avx512() */
void lq_dense16_to_f32_avx512(const uint16_t *h, int bf, int64_t cnt, float *out);
/* Dense fp16 weights on fp16 activations (LQ_QLINEAR_F16_X), where lq_cpu_avx512: at one row
 * (where lq_dense_f16x_row_ok for the threads that will run it) lq_gemm_dense_f16x_row, ws of
 * k * 2 bytes, no bias; else the float kernels on x rounded by lq_round_f16_avx512 (x -> fp16 ->
 * float32, to nearest even as lq_f32_to_f16). */
int       lq_dense_f16x_row_ok(const lq_qlinear *w, int64_t m, int nthreads);
void      lq_round_f16_avx512(const float *x, int64_t cnt, float *out);
lq_status lq_gemm_dense_f16x_row(const lq_qlinear *w, const float *x, float *y, void *ws,
                                 int nthreads);
/* Dense bf16 weights on bf16 activations (LQ_QLINEAR_BF16_X): lq_cpu_avx512bf16, the CPU has
 * AVX-512 BF16 besides lq_cpu_avx512; y = round_bf16(x) @ W^T, products exact, float32 sums
 * (in another order than lq_gemm_dense_qx_ref's), for bf16 weights where lq_cpu_avx512bf16
 * (the caller's check); ws of lq_ws_dense_bf16x bytes (SIZE_MAX where that does not fit),
 * 64-byte aligned; no bias. */
int       lq_cpu_avx512bf16(void);
/* the rows kernel up to this many rows, lq_gemm512_bf16x past it (1 thread, Zen 5, ms rows /
 * GEMM: 4096 x 4096 3.90-4.07 / 3.98-4.22 at 32 rows, 5.29-5.59 / 4.74-5.09 at 48; 11008 x
 * 4096 10.3 / 11.6-12.2 at 32, 13.8-14.0 / 13.5-13.9 at 48) */
#define LQ_DENSE_BF16X_ROWS_M 40
/* the same on Zen 4 (as LQ_DENSE16_ZEN4_M; 4096 x 4096, 64 rows: 1 thread 12.2 ms
 * against 11.8-12.5, 2 threads 5.3-6.0 against 5.9; 11008 x 4096 29-32 against 33-36, 48
 * rows 9.0-9.4 against 9.3-9.6) */
#define LQ_DENSE_BF16X_ZEN4_M 64
/* the same where lq_cpu_amx_bf16() (AMX GEMM past it; 2-core Emerald Rapids VM, ms rows kernel
 * / AMX GEMM, 4096 x 4096, 1 thread: 3.14 / 3.32 at 8 rows, 4.68 / 3.48 at 12, 6.24 / 3.59 at
 * 16; 11008 x 4096 9.07 / 9.68 at 8, 13.2 / 10.1 at 12) */
#define LQ_DENSE_BF16X_AMX_M 8
size_t    lq_ws_dense_bf16x(int64_t k, int64_t m);
lq_status lq_gemm_dense_bf16x(const lq_qlinear *w, const float *x, int64_t m, float *y, void *ws,
                              size_t ws_size, int nthreads);

/* The integer kernels' activations of one row (cpu/lq_cpu_common.c): xp [k bytes of int8],
 * block sums and scales [ceil(k / ab)] each, in the layout their tiles read; lq_qx_row in
 * channel order (GPTQ 3-bit, AWQ). */
void lq_gptq_qx_row(const lq_qlinear *w, int64_t ab, const float *xr, uint8_t *xp, float *xsf,
                    float *dx);
void lq_qx_row(int64_t k, int64_t ab, const float *xr, uint8_t *xp, float *xsf, float *dx);
/* The bytes of a workspace of m such rows (0: no integer semantics for w at xbits); of k
 * channels in blocks of ab. */
size_t lq_gptq_qx_ws(const lq_qlinear *w, int64_t m, int xbits);
size_t lq_qx_ws_bytes(int64_t k, int64_t ab, int64_t m, int xbits);
/* AWQ as stored on int8 activations at a few rows, read in place (lq_cpu_vnni.c, lq_cpu_avx2.c;
 * cpu/lq_cpu_common.c): a row's activations in channel order (lq_qx_row); the sums come out
 * field-major (128-column blocks: field f of word l at 16 f + l) into a scratch y of lq_awq_np(w)
 * floats a row, put back in column order by lq_awq_unpermute (nseg scratch y's of m rows, one
 * after another, added in that order: a kernel that sums segments of the channels apart).
 * lq_awq_seq_ws: the workspace of m rows (codes [m, k rounded up to 64], sums and scales
 * [m, nkb], nseg scratch y's). */
int64_t lq_awq_np(const lq_qlinear *w);
size_t  lq_awq_seq_ws(const lq_qlinear *w, int64_t m, int64_t nseg);
/* The segments of those kernels: a power of two of them, about 1024 channels each, at most 16,
 * in whole activation blocks (nkb of ab channels) as even as they come, so that 2, 4, 8 ...
 * threads share them whole. They depend on the shape alone: every thread count gives the same
 * bits. lq_awq_seg_kb: segment s's first block. lq_awq_share: thread th of tn's equal share of
 * the work (a column block of a segment counted once per activation block), segment-major: the
 * segments it has whole, and at most two in part (their column blocks split with a
 * neighbour); lq_awq_share_next gives them in order, segment *s with column blocks [*c0, *c1)
 * of nblk, 0 past the last. */
int64_t               lq_awq_nseg(int64_t nkb, int64_t ab);
static inline int64_t lq_awq_seg_kb(int64_t nkb, int64_t nseg, int64_t s) {
    return s * nkb / nseg;
}
typedef struct lq_awq_share {
    int64_t nseg, nblk, s, b0, s1, b1;
} lq_awq_share;
void    lq_awq_share_init(lq_awq_share *sh, int64_t nkb, int64_t nseg, int64_t nblk, int64_t th,
                          int64_t tn);
int     lq_awq_share_next(lq_awq_share *sh, int64_t *s, int64_t *c0, int64_t *c1);
void    lq_awq_unpermute(const float *yf, int64_t nseg, int64_t np, int64_t m, int64_t n, float *y,
                         int nt);
/* From more rows (cpu/lq_cpu_awq.c): the codes repacked once into GPTQ's layout (a word per
 * column holding 8 channels: an 8 x 8 nibble transpose of 8 channel rows) in that field-major
 * column order, the scales and zeros likewise, and a GPTQ kernel run on it: the same blocks and
 * integer sums, so the same result bit for bit. lq_awq_gptq_build fills buf (lq_awq_gptq_bytes)
 * and the descriptor g; codes (NULL: leave the codes out, for a kernel that repacks them
 * itself) writes word row wr (channels 8 wr .. 8 wr + 7) of them, np words a row. */
typedef void (*lq_awq_codes_fn)(const lq_qlinear *w, int64_t wr, uint32_t *qg, int64_t np);
size_t  lq_awq_gptq_bytes(const lq_qlinear *w);
/* that path's workspace at m rows: the copy, then the GPTQ kernel's activations (from
 * lq_awq_gptq_bytes on), then y field-major [m, np] (lq_awq_gptq_yf) */
size_t  lq_awq_gptq_ws(const lq_qlinear *w, int64_t m);
float  *lq_awq_gptq_yf(const lq_qlinear *w, int64_t m, void *ws);
void    lq_awq_gptq_build(const lq_qlinear *w, void *buf, lq_qlinear *g, lq_awq_codes_fn codes,
                          int nt);

/* AVX2 integer-activation kernels (cpu/lq_cpu_avx2.c) for CPUs without AVX-512 VNNI:
 * lq_cpu_avx2i: the CPU has AVX2 and FMA (so F16C) and LQ_CPU_KERNELS is not "portable".
 * lq_gemm_gptq_avx2: lq_gemm_gptq_qx_ref's semantics, bit for bit, for bits 2/4/8 and 3 on
 * int8 activations, n % 8 == 0 (lq_gptq_avx2_ok), xbits = lq_gptq_qx_bits(w, m). */
int       lq_cpu_avx2i(void);
/* Dense fp16 / bf16 weights as lq_gemm_dense16_avx512, 8 wide, below LQ_GEMM256_M rows (the
 * AVX2 GEMM below takes over there); the conversion of the sgemm path's tiles (only where
 * lq_cpu_avx2i()). */
int       lq_dense16_avx2_ok(const lq_qlinear *w, int64_t m);
lq_status lq_gemm_dense16_avx2(const lq_qlinear *w, const float *x, int64_t m, float *y,
                               int nthreads);
void      lq_dense16_to_f32_avx2(const uint16_t *h, int bf, int64_t cnt, float *out);
/* NF4 on integer activations (lq_gemm_nf4_qx_ref's semantics) where lq_nf4_avx2_ok (n % 8
 * == 0, a qx block) and lq_cpu_avx2i(). */
int       lq_nf4_avx2_ok(const lq_qlinear *w);
size_t    lq_ws_nf4_avx2(const lq_qlinear *w, int64_t m);
lq_status lq_gemm_nf4_avx2(const lq_qlinear *w, const float *x, int64_t m, float *y, void *ws,
                           int nthreads);
/* AWQ as stored on int8 activations (lq_gemm_awq_qx_ref's semantics) where lq_cpu_avx2i(): up
 * to LQ_AWQ_AVX2_M rows the words read in place (4 rows a pass), above on a GPTQ copy
 * (lq_awq_gptq_build); ws of lq_ws_awq_avx2 bytes, no bias. 1 thread, ms in place / on the copy
 * (Zen 3, weights from memory): 4096 x 4096 at 5 rows 2.6 / 3.5, 8 rows 3.9 / 4.2, 16 rows 8.4
 * (four passes at 4) / 6.6. */
#define LQ_AWQ_AVX2_M 8
size_t    lq_ws_awq_avx2(const lq_qlinear *w, int64_t m);
lq_status lq_gemm_awq_avx2(const lq_qlinear *w, const float *x, int64_t m, float *y, void *ws,
                           int nthreads);
/* NF4 on float activations where lq_nf4f_avx2_ok (blocks of a multiple of 32 that divide k)
 * and lq_cpu_avx2i(); the float semantics of lq_gemm_nf4_ref within rounding. Up to
 * LQ_FUSED_M rows fused, to LQ_BUF_MAX_M through a decoded L1 buffer, above on lq_gemm256; ws:
 * lq_ws_nf4f_avx2 bytes (0 up to LQ_FUSED_M rows). */
int       lq_nf4f_avx2_ok(const lq_qlinear *w);
size_t    lq_ws_nf4f_avx2(const lq_qlinear *w, int64_t m);
lq_status lq_gemm_nf4f_avx2(const lq_qlinear *w, const float *x, int64_t m, float *y, void *ws,
                            int nthreads);
/* LLM.int8's integer sums as lq_int8_dots_vnni, no workspace (only where lq_cpu_avx2i()). */
lq_status lq_int8_dots_avx2(const int8_t *cb, int64_t n, int64_t k, const int8_t *qx, int64_t m,
                            int32_t *acc, int nthreads);
int       lq_gptq_avx2_ok(const lq_qlinear *w, int xbits);
size_t    lq_ws_gptq_avx2(const lq_qlinear *w, int64_t m, int xbits);
lq_status lq_gemm_gptq_avx2(const lq_qlinear *w, const float *x, int64_t m, float *y, void *ws,
                            int xbits, int nthreads);

/* AVX-512 VNNI kernels (cpu/lq_cpu_vnni.c), picked at run time. lq_cpu_vnni: the CPU has
 * them and LQ_CPU_KERNELS is not "portable". lq_gemm_gptq_vnni: the semantics above with
 * xbits = lq_gptq_qx_bits(w, m) (8). */
int       lq_cpu_vnni(void);
int       lq_cpu_vbmi(void); /* lq_cpu_vnni and AVX-512 VBMI: the 3-bit GPTQ kernel's */
size_t    lq_ws_gptq_vnni(const lq_qlinear *w, int64_t m, int xbits);
lq_status lq_gemm_gptq_vnni(const lq_qlinear *w, const float *x, int64_t m, float *y, void *ws,
                            int xbits, int nthreads);
size_t    lq_ws_nf4_vnni(const lq_qlinear *w, int64_t m);
lq_status lq_gemm_nf4_vnni(const lq_qlinear *w, const float *x, int64_t m, float *y, void *ws,
                           int nthreads);
/* the CPU has AMX-INT8 besides lq_cpu_vnni and Linux lets this process use the tiles (asked
 * for by the check itself, cpu/lq_cpu_amx.c): lq_gemm_nf4_vnni's transposed path (from 16
 * rows) and lq_gemm_gptq_vnni / lq_gemm_awq_vnni from 16 rows (2/4/8-bit codes, activation
 * blocks of whole 64-channel groups) then run on them, with the same results */
int lq_cpu_amx_int8(void);
/* AMX's tile configuration (_tile_loadconfig, palette 1) */
typedef struct lq_amx_cfg {
    uint8_t  palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t  rows[16];
} lq_amx_cfg;
size_t    lq_ws_awq_vnni(const lq_qlinear *w, int64_t m, int xbits);
lq_status lq_gemm_awq_vnni(const lq_qlinear *w, const float *x, int64_t m, float *y, void *ws,
                           int xbits, int nthreads);
/* LLM.int8's integer part: acc[m, n] = qx[m, k] . cb[n, k] (exact int32); ws of
 * lq_ws_int8_vnni bytes (the activations offset to unsigned, rows padded to 64). */
size_t    lq_ws_int8_vnni(int64_t n, int64_t k, int64_t m);
lq_status lq_int8_dots_vnni(const int8_t *cb, int64_t n, int64_t k, const int8_t *qx, int64_t m,
                            int32_t *acc, void *ws, int nthreads);
/* The traits' reduced-precision activation entries (quantizes_x_cpu, ws_cpu_qx, gemm_cpu_qx,
 * gemm_qx_ref). */
int       lq_dense_cpu_quantizes_x(const lq_qlinear *w, int64_t m, unsigned flags);
size_t    lq_ws_dense_cpu_qx(const lq_qlinear *w, int64_t m);
lq_status lq_gemm_dense_cpu_qx(const lq_qlinear *w, const float *x, int64_t m, float *y,
                               void *ws, size_t ws_size, int nthreads);
void      lq_gemm_dense_qx_ref(const lq_qlinear *w, const float *x, int64_t m, float *y);
int       lq_gptq_cpu_quantizes_x(const lq_qlinear *w, int64_t m, unsigned flags);
size_t    lq_ws_gptq_cpu_qx(const lq_qlinear *w, int64_t m);
lq_status lq_gemm_gptq_cpu_qx(const lq_qlinear *w, const float *x, int64_t m, float *y, void *ws,
                              size_t ws_size, int nthreads);
int       lq_nf4_cpu_quantizes_x(const lq_qlinear *w, int64_t m, unsigned flags);
size_t    lq_ws_nf4_cpu_qx(const lq_qlinear *w, int64_t m);
lq_status lq_gemm_nf4_cpu_qx(const lq_qlinear *w, const float *x, int64_t m, float *y, void *ws,
                             size_t ws_size, int nthreads);
int       lq_awq_cpu_quantizes_x(const lq_qlinear *w, int64_t m, unsigned flags);
size_t    lq_ws_awq_cpu_qx(const lq_qlinear *w, int64_t m);
lq_status lq_gemm_awq_cpu_qx(const lq_qlinear *w, const float *x, int64_t m, float *y, void *ws,
                             size_t ws_size, int nthreads);

/* Threads to use: nthreads <= 0 -> OpenMP default. */
int lq_cpu_threads(int nthreads);

/* ---------------------------------------------------------------------------------------
 * A work split for an OpenMP region over units [0, n) (groups of weight rows) whose results do
 * not depend on the thread that computes them. Each thread owns the contiguous part a static
 * split would give it and takes its units from the front, up to `steal` at a time; done with its
 * own, it takes as many from the back of the part with the most left and runs them forward
 * (near a part's end, half of what is left).
 * Why: on a 2-vCPU VM one thread read memory 10-25% slower than the other whichever half of the
 * rows it had, and a static split waited for it (llama.cpp's threads take chunks off a shared
 * counter). Chunks dealt in turn, or one thread running back from the end, were slower than the
 * static split: two streams far apart read faster here than two side by side, and one running
 * backward lost its prefetches.
 *
 * lq_split_init before the region (nthreads: the threads asked for; a part no thread owns is
 * taken by the others), then in the region each thread lq_split_iter and lq_seg_next until it
 * returns 0. Past LQ_SEG_MAX threads or 2^32 units: each thread its static part of the team.
 * --------------------------------------------------------------------------------------- */
#define LQ_SEG_MAX 256
typedef struct lq_seg {
    _Alignas(64) uint64_t fb; /* front (low 32 bits) and back (high) of a part */
} lq_seg;
typedef struct lq_split {
    lq_seg  seg[LQ_SEG_MAX];
    int     nseg; /* 0: static */
    int64_t n, steal;
} lq_split;
typedef struct lq_seg_it {
    lq_split *s;
    int       th;
    int       mode; /* 0 own front, 1 taking from others, 2 the static part [a, b), 3 done */
    int64_t   a, b;
} lq_seg_it;
void      lq_split_init(lq_split *s, int nthreads, int64_t n, int64_t steal);
lq_seg_it lq_split_iter(lq_split *s, int th, int tn);
int       lq_seg_next(lq_seg_it *it, int64_t *u0, int64_t *u1);
/* lq_seg_next as rows [r0, r1) of units of `unit` rows, the last unit clamped to n */
static inline int lq_seg_next_rows(lq_seg_it *it, int64_t unit, int64_t n, int64_t *r0,
                                   int64_t *r1) {
    int64_t u0, u1;
    if (!lq_seg_next(it, &u0, &u1))
        return 0;
    *r0 = u0 * unit;
    *r1 = u1 * unit < n ? u1 * unit : n;
    return 1;
}

/* h[0, cnt) (fp16, or bf16 when bf) -> float32, exactly; kind: lq_half_cvt_kind() (2 AVX-512,
 * 1 AVX2 + F16C, 0 portable), taken once by callers in a loop */
int  lq_half_cvt_kind(void);
void lq_half_to_f32(int kind, const uint16_t *h, int bf, int64_t cnt, float *out);
/* Bias (fp16 [n] or NULL) added to y[m, n]. */
void lq_add_bias_f16(const uint16_t *bias, int64_t m, int64_t n, float *y);

/* ---------------------------------------------------------------------------------------
 * Large-m path shared by the dequantizing formats: dequantize tiles of LQ_TILE_ROWS output
 * columns into the caller's workspace and multiply with lq_sgemm_tile (lq_gemm512 where the CPU
 * has AVX-512, else OpenBLAS sgemm).
 *
 * The tile dequantization runs on lq_blas_tile_threads threads: all of them where the product
 * is lq_gemm512's or OpenBLAS is its OpenMP build (its threads are libgomp's, the pool the
 * dequantization ran on), one with
 * the pthreads build: that and libgomp keep separate thread pools that both spin after their
 * work, and alternating an OpenMP region with each sgemm made them fight for the cores (10-30x
 * slower on a 2-core machine unless OMP_WAIT_POLICY=PASSIVE).
 * --------------------------------------------------------------------------------------- */
int lq_blas_tile_threads(int nthreads);
/* OpenBLAS runs its AVX-512 kernels (the core it picked) */
int lq_blas_avx512(void);
/* v rounded up to a multiple of a, a power of two (workspace strides, padded block counts) */
static inline int64_t lq_align_up(int64_t v, int64_t a) {
    return (v + a - 1) & ~(a - 1);
}
#define LQ_TILE_ROWS 256
static inline int64_t lq_tile_rows(const lq_qlinear *w) {
    return w->n < LQ_TILE_ROWS ? w->n : LQ_TILE_ROWS;
}
/* ---------------------------------------------------------------------------------------
 * The grouped formats (GPTQ, AWQ) decode into W^T blocks through two hooks; the loops around
 * them (full dequantization, the large-m tiles + sgemm, per-group sums of x) are shared.
 *   params: scale and scale * zero of groups [g0, g1) for output columns [i0, i0 + nc) into
 *           sc / zs (row stride ld)
 *   kn:     W^T[c0:c1, i0:i0+nc] into out (row stride ldo) from those parameters (stride ldp)
 * --------------------------------------------------------------------------------------- */
/* A GEMM panel (LQ_GEMM_B_PACK, below): pan[kk * ldp + j] = B(column n0 + j, channel k0 + kk) for
 * kk < kc and j < ldp, zero from nr: a format decodes its weights straight into the GEMM's panel
 * instead of into a tile that sgemm then packs again. */
typedef void (*lq_gemm_pack_fn)(const void *ctx, int64_t n0, int nr, int64_t k0, int kc, float *pan,
                                int ldp);
typedef struct lq_kn_ops {
    void (*params)(const lq_qlinear *w, int64_t g0, int64_t g1, int64_t i0, int64_t nc, int64_t ld,
                   float *sc, float *zs);
    void (*kn)(const lq_qlinear *w, int64_t c0, int64_t c1, int64_t i0, int64_t nc, const float *sc,
               const float *zs, int64_t ldp, float *out, int64_t ldo);
    /* optional: a GEMM panel's decode (ctx an lq_kn_pack), where the layout allows (else NULL) */
    int (*pack_ok)(const lq_qlinear *w);
    lq_gemm_pack_fn pack;
} lq_kn_ops;
/* what an lq_kn_ops pack reads: the descriptor and its scales and scale * zero, [G, n] */
typedef struct lq_kn_pack {
    const lq_qlinear *w;
    const float      *sc, *zs;
} lq_kn_pack;
/* out[n, k] = W, G groups; blocks of 16 columns x 64 channels across the threads. */
lq_status lq_dequant_kn_cpu(const lq_qlinear *w, const lq_kn_ops *ops, int64_t G, float *out,
                            int nthreads);
/* y[m, n] = x @ W^T by LQ_TILE_ROWS-column tiles of W^T dequantized into ws ([tr * k] tile,
 * then [G, tr] scales and zeros) and sgemm; where the ops' pack takes the layout and the CPU has
 * AVX2 but not AVX-512, lq_gemm256 with the weights decoded into its panels (ws: its own, then
 * [G, n] scales and zeros). ws: lq_ws_kn_tiled bytes. */
size_t    lq_ws_kn_tiled(const lq_qlinear *w, const lq_kn_ops *ops, int64_t G, int64_t m);
lq_status lq_gemm_kn_tiled(const lq_qlinear *w, const lq_kn_ops *ops, int64_t G, const float *x,
                           int64_t m, float *y, float *ws, int nthreads);
/* xsum[r * G + g] = sum of x[r, c] over group g's channels (the last group may be short). */
void lq_group_sums(const float *x, int64_t m, int64_t k, int64_t gs, int64_t G, float *xsum);
/* The most rows of the GPTQ/AWQ grouped kernels: 16 with AVX-512 (lq_gemm512 on the tiles from
 * 13 rows was faster at 4096 x 4096, 16 rows, 4.4-4.8 ms against 4.9-5.1, and slower at 11008 x
 * 4096, 13.1-14.3 against 12.4-13.0), LQ_BUF_MAX_M without (4096 x 4096, 1 / 2 threads: 14.8 /
 * 7.7 ms against dequantize + sgemm's 17.3 / 10.2 at 32, 21.4 / 11.3 against 22.9 / 12.5 at
 * 48, a tie at 64). */
int64_t lq_grouped_max_m(void);

/* False when a dimension exceeds the 32-bit BLAS interface. */
int lq_blas_dims_ok(int64_t m, int64_t n, int64_t k);
/* y[m, nt] (row stride ldy) = x[m, k] @ T, T = tile as [k, nt] (kn != 0, the W^T layout GPTQ
 * and AWQ dequantize into naturally) or as [nt, k] (W rows, kn == 0); y = beta * y + x @ T. */
void lq_sgemm_tile(const float *x, int64_t m, int64_t k, const float *tile, int64_t nt, int kn,
                   float *y, int64_t ldy, float beta, int nthreads);
/* The same always with OpenBLAS. */
void lq_sgemm_blas(const float *x, int64_t m, int64_t k, const float *tile, int64_t nt, int kn,
                   float *y, int64_t ldy, float beta);
/* lq_sgemm_tile's rows from which lq_gemm512 takes over on [nt, k] float32 (4096 x 4096, 1
 * thread, Zen 5, OpenBLAS's AVX2 kernels: 10.3 / 11.5 / 15.5 / 77 ms at 16 / 32 / 64 / 512 rows
 * against sgemm's 8.8 / 12.8 / 21.1 / 134); [k, nt] tiles (GPTQ, AWQ) take it at every m
 * (GPTQ-4 float at 17 / 24 / 31 rows: 4.4-4.7 / 5.3-5.6 / 6.3-6.9 against 9.2-9.7 / 9.2-9.5 /
 * 14.1-14.6 through sgemm) */
#define LQ_GEMM512_MIN_M 32
/* The AVX-512 GEMM behind lq_sgemm_tile where lq_cpu_avx512() (cpu/lq_cpu_gemm512.c): B as
 * [k, nt] float32 (LQ_GEMM_B_KN, element (j, c) at p[c * ld + j]) or as rows [nt, k] of float32,
 * fp16 or bf16 (element (j, c) at p[j * ld + c]); y[m, nt] (row stride ldy) = beta * y + x @ B
 * (y not read when beta is 0), x rows k apart. */
typedef enum {
    LQ_GEMM_B_KN,
    LQ_GEMM_B_F32,
    LQ_GEMM_B_F16,
    LQ_GEMM_B_BF16,
    LQ_GEMM_B_PACK /* a quantized format's decoder packs B (pack, ctx; p and ld unused) */
} lq_gemm_b_kind;
typedef struct lq_gemm_b {
    const void     *p;
    int64_t         ld;
    lq_gemm_b_kind  kind;
    lq_gemm_pack_fn pack;
    const void     *ctx;
    /* lq_gemm256 with _PACK only, NULL elsewhere: the decoder's channel order within each run of
     * 8 (k and the chunks multiples of 8): B's channel c meets x's c - c % 8 + x8[c % 8] */
    const int8_t *x8;
} lq_gemm_b;
void lq_gemm512(const float *x, int64_t m, int64_t k, const lq_gemm_b *b, int64_t nt, float *y,
                int64_t ldy, float beta, int nthreads);
/* The same with x(r, c) at x[r * rs + c * cs] (x^T in place: rs 1) and y = beta * y +
 * alpha * x @ B; nthreads <= 1: on the calling thread, no OpenMP team */
void lq_gemm512_ex(const float *x, int64_t rs, int64_t cs, int64_t m, int64_t k, const lq_gemm_b *b,
                   int64_t nt, float *y, int64_t ldy, float alpha, float beta, int nthreads);
/* The GEMMs' work split (lq_gemm512, lq_gemm256): rows in *mc-row blocks of equal size (at most
 * mc_max rows, whole mr-row tiles), columns in *np panels of nr; *nb (row block, panel) pairs,
 * pair i at rows i / np * mc, columns i % np * nr */
static inline void lq_gemm_split(int64_t m, int64_t nt, int64_t mr, int64_t nr, int64_t mc_max,
                                 int64_t *mc, int64_t *np, int64_t *nb) {
    const int64_t mb0 = (m + mc_max - 1) / mc_max;
    *np               = (nt + nr - 1) / nr;
    *mc               = ((m + mb0 - 1) / mb0 + mr - 1) / mr * mr;
    *nb               = (m + *mc - 1) / *mc * *np;
}
/* y[m, nt] = x @ W^T on bf16 (LQ_QLINEAR_BF16_X; only where lq_cpu_avx512bf16()): x [m, k]
 * bf16 rows ldx apart, 4-byte aligned, zero from k to ldx > k when k is odd; W [nt, k] bf16
 * rows ldw apart */
void lq_gemm512_bf16x(const uint16_t *x, int64_t ldx, int64_t m, int64_t k, const uint16_t *W,
                      int64_t ldw, int64_t nt, float *y, int64_t ldy, int nthreads);
/* The same on AMX tiles (the sums in another order): only where lq_cpu_amx_bf16(), the CPU has
 * AMX-BF16 besides lq_cpu_avx512bf16 and Linux lets this process use the tiles (asked for by
 * the check itself); x also zero from k to the next multiple of 32, within ldx. */
int  lq_cpu_amx_bf16(void);
void lq_gemm_amx_bf16x(const uint16_t *x, int64_t ldx, int64_t m, int64_t k, const uint16_t *W,
                       int64_t ldw, int64_t nt, float *y, int64_t ldy, int nthreads);
/* From LQ_GEMM256_M rows, where lq_cpu_avx2i() and not lq_cpu_avx512(), dense weights run on the
 * AVX2 GEMM (cpu/lq_cpu_gemm256.c): y[m, nt] (row stride ldy) = x[m, k] @ B, B rows [nt, k] of
 * float32, fp16 or bf16 (b->kind LQ_GEMM_B_F32, _F16, _BF16; not _KN), or decoded by a
 * format into 16-column panels (_PACK: GPTQ, AWQ and NF4 from 49 rows); ws: lq_gemm256_ws(m,
 * k) bytes, 32-byte aligned. Below it the rows kernel (fp16 / bf16) and sgemm (float32): on
 * Zen 3 the GEMM was 0-11% slower than the rows kernel at 48 rows, at 64 5% slower to 11%
 * faster (1 thread) and 10% faster (2 threads). float32 takes it too so that fp16 weights and
 * their float32 copy sum in one order (a model's tied head is float32 in the conversion's copy
 * and fp16 in the files: `--check-ppl` prints what `llmquant ppl` does). */
#define LQ_GEMM256_M 64
size_t lq_gemm256_ws(int64_t m, int64_t k);
void   lq_gemm256(const float *x, int64_t m, int64_t k, const lq_gemm_b *b, int64_t nt, float *y,
                  int64_t ldy, float *ws, int nthreads);
/* lq_ssyrk_upper's AVX-512 side (the GEMM's panels, those on or above the diagonal); the
 * lower triangle of the diagonal 64 x 64 blocks is written too, with the same sums */
void lq_syrk512(int64_t k, int64_t t, float alpha, const float *x, float beta, float *H,
                int nthreads);

#endif
