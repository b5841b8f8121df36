/* The model forward's vector functions on AVX-512, else AVX2 (lq_kernels.h), picked once per caller
 * with lq_vec_ops_get. The attention's softmax calls exp on every causal score: with libm's scalar
 * expf it took a third of a SmolLM2 forward at 2048 tokens a sequence.
 *
 * exp: Cephes' expf (range reduction by n = round(x log2 e) with ln 2 split in two, a degree-6
 * polynomial on [-ln2/2, ln2/2], 2^n applied by vscalefps): at most 1.26 ulp from the exact
 * exp on every float in [-87, 88] (checked exhaustively); 0 below -104, where float underflows. */
#include "lq_kernels_impl.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define VEC_TARGET __attribute__((target("avx512f")))

VEC_TARGET static inline __m512 exp16(__m512 x) {
    x              = _mm512_max_ps(_mm512_set1_ps(-104.f), x); /* NaN passes: the second operand */
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512       r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r              = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p       = _mm512_set1_ps(1.9875691500E-4f);
    p              = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507E-3f));
    p              = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073E-3f));
    p              = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894E-2f));
    p              = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459E-1f));
    p              = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201E-1f));
    p              = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.f)));
    return _mm512_scalef_ps(p, n);
}

static inline __mmask16 tail_mask(int64_t left) {
    return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
}

VEC_TARGET static void softmax_row_avx512(float *row, int64_t n, int64_t lo, int64_t hi) {
    const int64_t len = hi - lo + 1;
    float        *p   = row + lo;
    __m512        vm  = _mm512_set1_ps(-INFINITY);
    for (int64_t j = 0; j < len; j += 16)
        vm = _mm512_mask_max_ps(vm, tail_mask(len - j), vm,
                                _mm512_maskz_loadu_ps(tail_mask(len - j), p + j));
    const __m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(vm));
    /* sums in double, as the reference (2048 probabilities of very different sizes) */
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    for (int64_t j = 0; j < len; j += 16) {
        const __mmask16 k = tail_mask(len - j);
        const __m512    e =
            _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, p + j), mx)));
        _mm512_mask_storeu_ps(p + j, k, e);
        s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        s1 = _mm512_add_pd(
            s1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
    }
    const __m512 inv = _mm512_set1_ps((float)(1.0 / _mm512_reduce_add_pd(_mm512_add_pd(s0, s1))));
    for (int64_t j = 0; j < len; j += 16) {
        const __mmask16 k = tail_mask(len - j);
        _mm512_mask_storeu_ps(p + j, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, p + j), inv));
    }
    memset(row, 0, (size_t)lo * sizeof(float));
    memset(row + hi + 1, 0, (size_t)(n - hi - 1) * sizeof(float));
}

VEC_TARGET static void silu_mul_avx512(float *g, const float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = tail_mask(n - i);
        const __m512    x = _mm512_maskz_loadu_ps(k, gate + i);
        const __m512    d =
            _mm512_add_ps(_mm512_set1_ps(1.f), exp16(_mm512_sub_ps(_mm512_setzero_ps(), x)));
        _mm512_mask_storeu_ps(g + i, k,
                              _mm512_mul_ps(_mm512_div_ps(x, d), _mm512_maskz_loadu_ps(k, up + i)));
    }
}

static const lq_vec_ops vec_avx512 = {softmax_row_avx512, silu_mul_avx512};

/* AVX2 + FMA (CPUs without AVX-512): the same exp 8 wide. Without vscalefps, 2^n is applied
 * as two exact-or-once-rounded multiplies by 2^(n/2) and 2^(n - n/2), each a normal float for
 * every n the clamp allows (-150..128), so underflow and overflow round as vscalefps does. */
#define AVX2_VEC_TARGET __attribute__((target("avx2,fma")))

AVX2_VEC_TARGET static inline __m256 exp8(__m256 x) {
    x              = _mm256_max_ps(_mm256_set1_ps(-104.f), x); /* NaN passes: the second operand */
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256       r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r              = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p       = _mm256_set1_ps(1.9875691500E-4f);
    p              = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507E-3f));
    p              = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073E-3f));
    p              = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894E-2f));
    p              = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459E-1f));
    p              = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201E-1f));
    p              = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.f)));
    /* n is NaN for a NaN x: its integer conversion is garbage, but p is NaN already */
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256  s1   = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    const __m256  s2   = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

AVX2_VEC_TARGET static inline __m256i tail_mask8(int64_t left) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(left < 8 ? left : 8)), lane);
}

AVX2_VEC_TARGET static void softmax_row_avx2(float *row, int64_t n, int64_t lo, int64_t hi) {
    const int64_t len = hi - lo + 1;
    float        *p   = row + lo;
    __m256        vm  = _mm256_set1_ps(-INFINITY);
    for (int64_t j = 0; j < len; j += 8) {
        const __m256i k = tail_mask8(len - j);
        vm              = _mm256_blendv_ps(vm, _mm256_max_ps(vm, _mm256_maskload_ps(p + j, k)),
                                           _mm256_castsi256_ps(k));
    }
    float m8[8];
    _mm256_storeu_ps(m8, vm);
    float mxs = m8[0];
    for (int l = 1; l < 8; l++)
        mxs = m8[l] > mxs ? m8[l] : mxs;
    const __m256 mx = _mm256_set1_ps(mxs);
    __m256d      s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    for (int64_t j = 0; j < len; j += 8) {
        const __m256i k = tail_mask8(len - j);
        const __m256  e = _mm256_and_ps(exp8(_mm256_sub_ps(_mm256_maskload_ps(p + j, k), mx)),
                                        _mm256_castsi256_ps(k));
        _mm256_maskstore_ps(p + j, k, e);
        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    double sd[4];
    _mm256_storeu_pd(sd, _mm256_add_pd(s0, s1));
    const __m256 inv = _mm256_set1_ps((float)(1.0 / ((sd[0] + sd[1]) + (sd[2] + sd[3]))));
    for (int64_t j = 0; j < len; j += 8) {
        const __m256i k = tail_mask8(len - j);
        _mm256_maskstore_ps(p + j, k, _mm256_mul_ps(_mm256_maskload_ps(p + j, k), inv));
    }
    memset(row, 0, (size_t)lo * sizeof(float));
    memset(row + hi + 1, 0, (size_t)(n - hi - 1) * sizeof(float));
}

AVX2_VEC_TARGET static void silu_mul_avx2(float *g, const float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i += 8) {
        const __m256i k = tail_mask8(n - i);
        const __m256  x = _mm256_maskload_ps(gate + i, k);
        const __m256  d =
            _mm256_add_ps(_mm256_set1_ps(1.f), exp8(_mm256_sub_ps(_mm256_setzero_ps(), x)));
        _mm256_maskstore_ps(g + i, k,
                            _mm256_mul_ps(_mm256_div_ps(x, d), _mm256_maskload_ps(up + i, k)));
    }
}

static const lq_vec_ops vec_avx2 = {softmax_row_avx2, silu_mul_avx2};

/* LQ_CPU_KERNELS=portable: the references only (the tests run both) */
const lq_vec_ops *lq_vec_ops_get(void) {
    return lq_cpu_avx512() ? &vec_avx512 : lq_cpu_avx2i() ? &vec_avx2 : &lq_vec_ops_ref;
}
#else
const lq_vec_ops *lq_vec_ops_get(void) {
    return &lq_vec_ops_ref;
}
#endif
