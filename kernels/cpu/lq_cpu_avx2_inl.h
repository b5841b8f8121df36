/* AVX2 helpers shared by cpu/lq_cpu_avx2.c and cpu/lq_cpu_gemm256.c (x86-64, GCC or clang; the
 * includer has checked). */
#ifndef LQ_CPU_AVX2_INL_H
#define LQ_CPU_AVX2_INL_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

/* The AVX2 kernels' attributes. No signed-overflow checks: at -O1, where the sanitizer build
 * runs, GCC 12 unrolls no loop that carries them, so a register tile's accumulators stay in
 * (instrumented) memory. That build's llmquant ppl of SmolLM2 in fp16 (ctx 256, the demo text)
 * spent 97% of its time in lq_gemm256's tiles: 92 -> 63 s without the checks, the RTN output's
 * 22.6 -> 15.8 s. The tiles' counters and offsets are small, bounded by the tile; ASan and the
 * other UBSan checks stay. */
#define LQ_AVX2_TARGET                                                                             \
    __attribute__((target("avx2,fma,f16c"), no_sanitize("signed-integer-overflow")))
#define LQ_AVX2_INLINE static inline __attribute__((always_inline)) LQ_AVX2_TARGET

/* rows r[0..7] -> r[i] = column i of the 8 x 8 block */
LQ_AVX2_INLINE void lq_avx2_tr8(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i]     = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; i++)
        for (int h = 0; h < 2; h++) {
            u[4 * i + 2 * h]     = _mm256_shuffle_ps(t[4 * i + h], t[4 * i + 2 + h], 0x44);
            u[4 * i + 2 * h + 1] = _mm256_shuffle_ps(t[4 * i + h], t[4 * i + 2 + h], 0xEE);
        }
    for (int i = 0; i < 4; i++) {
        r[i]     = _mm256_permute2f128_ps(u[i], u[4 + i], 0x20);
        r[4 + i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x31);
    }
}

/* 8 fp16 (bf 0) or bf16 (bf 1) values at h as float32, exactly (bf16 is the top half of a
 * float32) */
LQ_AVX2_INLINE __m256 lq_avx2_half8(const uint16_t *h, int bf) {
    const __m128i v = _mm_loadu_si128((const void *)h);
    return bf ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16))
              : _mm256_cvtph_ps(v);
}

LQ_AVX2_INLINE float lq_avx2_half1(uint16_t h, int bf) {
    if (bf) {
        const uint32_t u = (uint32_t)h << 16;
        float          f;
        memcpy(&f, &u, 4);
        return f;
    }
    return _cvtsh_ss(h);
}

#endif
