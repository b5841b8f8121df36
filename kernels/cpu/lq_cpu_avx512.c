/* x86-64 AVX-512 float kernels, picked at run time (lq_cpu_avx512); the format files fall back
 * to their portable kernels elsewhere. NF4 here, then dense fp16 / bf16, then dense bf16 on bf16
 * activations (their own notes below).
 *
 * NF4, m <= LQ_NF4_AVX512_M rows, k % 64 == 0, power-of-two blocks of >= 64 (bitsandbytes'
 * default 64 and up): w = quant_map[code] * absmax as the float kernel, up to rounding (the
 * order of the sums; m <= 4 also scales sums, not weights). Decoding is what costs (AVX-512
 * has two vector ALU ports), so it is cut to the bone: 64 weights are 32 code bytes,
 * zero-extended by 16-bit pairs to 16 lanes; vpermps reads the low 4 bits of a lane, so the
 * lane itself and the lane shifted right by 4, 8 and 12 index elements 4l+1, 4l, 4l+3 and 4l+2
 * of the step against the 16-entry code book in a register (a load, 3 shifts and 4 permutes
 * for 64 weights). The activations are stored once per call in
 * that order (xp: per 64-channel step, 4 vectors of 16).
 *   m <= 4: four output columns at a time, decoded in registers; the step's products are summed
 *           unscaled and multiplied into the row's sums by the step's absmax with one FMA (a
 *           step lies in one block), every row's sums in registers over the whole of k.
 *   m > 4:  four columns' runs of 256 channels decoded once, scaled (the reference's product),
 *           into an L1 buffer that every chunk of 4 rows multiply-adds from; the sums parked in
 *           a stack array between runs; k in ranges whose activations fit in L2. */
#include "lq_kernels_impl.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
#define AVX512_INLINE static inline __attribute__((always_inline)) AVX512_TARGET

/* LQ_CPU_KERNELS=portable: the portable kernels only; =avx2: none of AVX-512 (nor AMX), as a
 * CPU with AVX2 only runs (the tests run all three: ctest kernels, kernels_portable and
 * kernels_avx2) */
int lq_cpu_avx512(void) {
    const char *e = getenv("LQ_CPU_KERNELS");
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           !(e && (!strcmp(e, "portable") || !strcmp(e, "avx2")));
}

enum { NC = 4, KC = 256 }; /* columns per block; channels per decoded run (m > 4) */

static int nf4_shape_ok(const lq_qlinear *w) {
    const int64_t bs = w->group_size;
    return w->k % 64 == 0 && bs >= 64 && (bs & (bs - 1)) == 0;
}

int lq_nf4_avx512_ok(const lq_qlinear *w, int64_t m) {
    return m >= 1 && m <= LQ_NF4_AVX512_M && nf4_shape_ok(w);
}

/* xp [m, k], then (double quant) the decoded absmax [nblocks] */
static int64_t nf4_nblocks(const lq_qlinear *w) {
    return (w->n * w->k + w->group_size - 1) / w->group_size;
}

size_t lq_ws_nf4_avx512(const lq_qlinear *w, int64_t m) {
    const int64_t am = w->nested_blocksize > 0 ? lq_align_up(nf4_nblocks(w), 16) : 0;
    return (size_t)(lq_align_up(m * w->k, 16) + am + 16) * sizeof(float);
}

/* bitsandbytes' nested absmax, 16 blocks a vector: code[q] * absmax2 then + offset, two
 * roundings as the reference (the empty asm keeps the compiler from fusing them). */
AVX512_TARGET void lq_nf4_absmax_avx512(const lq_qlinear *w, float *out, int64_t b0, int64_t b1) {
    const uint8_t *q   = w->absmax;
    const float    off = w->nested_offset;
    const int64_t  nb  = w->nested_blocksize;
    int64_t        b   = b0;
    __m512         tab[16];
    for (int t = 0; t < 16; t++)
        tab[t] = _mm512_loadu_ps(w->nested_code + 16 * t);
    /* nested block g of block b, and b's place r in it, kept without a division a vector */
    for (int64_t g = b0 / nb, r = b0 % nb; b + 16 <= b1; b += 16) {
        const __m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(q + b)));
        /* code[idx]: 8 two-table permutes on the low 5 bits, then the 3 high bits select (a
         * gather was most of this function's time on Zen 4) */
        __m512 c8[8];
        for (int t = 0; t < 8; t++)
            c8[t] = _mm512_permutex2var_ps(tab[2 * t], idx, tab[2 * t + 1]);
        for (int bit = 32, h = 8; bit <= 128; bit *= 2, h /= 2) {
            const __mmask16 sel = _mm512_test_epi32_mask(idx, _mm512_set1_epi32(bit));
            for (int t = 0; t < h / 2; t++)
                c8[t] = _mm512_mask_blend_ps(sel, c8[2 * t], c8[2 * t + 1]);
        }
        const __m512  c = c8[0];
        __m512        a;
        if (r + 15 < nb) {
            a = _mm512_set1_ps(w->nested_absmax[g]);
        } else {
            float t[16];
            for (int l = 0; l < 16; l++)
                t[l] = w->nested_absmax[(b + l) / nb];
            a = _mm512_loadu_ps(t);
        }
        for (r += 16; r >= nb; r -= nb)
            g++;
        __m512 p = _mm512_mul_ps(c, a);
        __asm__("" : "+v"(p));
        _mm512_storeu_ps(out + (b - b0), _mm512_add_ps(p, _mm512_set1_ps(off)));
    }
    for (; b < b1; b++)
        out[b - b0] = lq_nf4_absmax(w, b);
}

/* x [m, k] -> xp: each 64-channel step as x[4l+1], x[4l], x[4l+3], x[4l+2] for l = 0..15 */
static void nf4_x_order(const float *x, int64_t m, int64_t k, float *xp) {
    static const int sel[4] = {1, 0, 3, 2};
    for (int64_t e = 0; e < m * k; e += 64)
        for (int v = 0; v < 4; v++)
            for (int l = 0; l < 16; l++)
                xp[e + 16 * v + l] = x[e + 4 * l + sel[v]];
}

typedef struct nf4_job {
    const lq_qlinear *w;
    const float      *xp, *am; /* am: the absmax per block (double quant: decoded into ws) */
    int64_t           m, sh;   /* sh: log2(blocksize) */
    float            *y;
} nf4_job;

AVX512_INLINE float nf4_a(const nf4_job *j, int64_t e) {
    return j->am[e >> j->sh];
}

/* the 64 code-book values of column i from channel c, in xp's order: w[0..3] */
AVX512_INLINE void nf4_step(const nf4_job *j, __m512 map, int64_t i, int64_t c, __m512 w[4]) {
    const int64_t e = i * j->w->k + c;
    const __m512i v = _mm512_cvtepu16_epi32(
        _mm256_loadu_si256((const __m256i *)((const uint8_t *)j->w->qweight + e / 2)));
    w[0] = _mm512_permutexvar_ps(v, map);
    w[1] = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), map);
    w[2] = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 8), map);
    w[3] = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 12), map);
}

/* m <= 4: columns [i0, i1), M rows, all in registers */
AVX512_INLINE void nf4_cols_direct(const nf4_job *j, int64_t i0, int64_t i1, const int M) {
    const lq_qlinear *w = j->w;
    const int64_t     n = w->n, k = w->k;
    const __m512      map = _mm512_loadu_ps(w->quant_map);
    for (int64_t i = i0; i < i1; i += NC) {
        int64_t col[NC];
        for (int c = 0; c < NC; c++) /* past the end: the last column again, not stored */
            col[c] = i + c < i1 ? i + c : i1 - 1;
        __m512 acc[NC][4];
        for (int c = 0; c < NC; c++)
            for (int r = 0; r < M; r++)
                acc[c][r] = _mm512_setzero_ps();
        for (int64_t s = 0; s < k; s += 64) {
            for (int c = 0; c < NC; c++) {
                __m512 wv[4];
                nf4_step(j, map, col[c], s, wv);
                const __m512 a = _mm512_set1_ps(nf4_a(j, col[c] * k + s));
                for (int r = 0; r < M; r++) {
                    const float *xr = j->xp + r * k + s;
                    __m512       t  = _mm512_mul_ps(_mm512_loadu_ps(xr), wv[0]);
                    t               = _mm512_fmadd_ps(_mm512_loadu_ps(xr + 16), wv[1], t);
                    t               = _mm512_fmadd_ps(_mm512_loadu_ps(xr + 32), wv[2], t);
                    t               = _mm512_fmadd_ps(_mm512_loadu_ps(xr + 48), wv[3], t);
                    acc[c][r]       = _mm512_fmadd_ps(t, a, acc[c][r]);
                }
            }
        }
        for (int c = 0; c < NC && i + c < i1; c++)
            for (int r = 0; r < M; r++)
                j->y[r * n + i + c] = _mm512_reduce_add_ps(acc[c][r]);
    }
}

/* m > 4: rows r0..r0+M of one column block against its decoded run wb [NC][KC] (channels
 * c0..c0+len); the sums live in park [m][NC] between runs */
AVX512_INLINE void nf4_rows_run(const nf4_job *j, const float *wb, int64_t c0, int64_t len,
                                int64_t r0, __m512 *park, const int M) {
    const int64_t k = j->w->k;
    __m512        acc[NC][4];
    for (int c = 0; c < NC; c++)
        for (int r = 0; r < M; r++)
            acc[c][r] = park[(r0 + r) * NC + c];
    for (int64_t s = 0; s < len; s += 16) {
        __m512 xv[4];
        for (int r = 0; r < M; r++)
            xv[r] = _mm512_loadu_ps(j->xp + (r0 + r) * k + c0 + s);
        for (int c = 0; c < NC; c++) {
            const __m512 wv = _mm512_load_ps(wb + c * KC + s);
            for (int r = 0; r < M; r++)
                acc[c][r] = _mm512_fmadd_ps(xv[r], wv, acc[c][r]);
        }
    }
    for (int c = 0; c < NC; c++)
        for (int r = 0; r < M; r++)
            park[(r0 + r) * NC + c] = acc[c][r];
}

/* channels [k0, k1) of columns [i0, i1), every row; adds into y (first range: stores) */
AVX512_TARGET static void nf4_cols_buffered(const nf4_job *j, int64_t i0, int64_t i1, int64_t k0,
                                            int64_t k1) {
    _Alignas(64) float wb[NC * KC];
    __m512             park[LQ_NF4_AVX512_M * NC];
    const lq_qlinear  *w = j->w;
    const int64_t      n = w->n, k = w->k, m = j->m;
    const __m512       map = _mm512_loadu_ps(w->quant_map);
    for (int64_t i = i0; i < i1; i += NC) {
        int64_t col[NC];
        for (int c = 0; c < NC; c++)
            col[c] = i + c < i1 ? i + c : i1 - 1;
        for (int64_t t = 0; t < m * NC; t++)
            park[t] = _mm512_setzero_ps();
        for (int64_t c0 = k0; c0 < k1; c0 += KC) {
            const int64_t len = c0 + KC < k1 ? KC : k1 - c0;
            for (int c = 0; c < NC; c++)
                for (int64_t s = 0; s < len; s += 64) {
                    __m512 wv[4];
                    nf4_step(j, map, col[c], c0 + s, wv);
                    const __m512 a = _mm512_set1_ps(nf4_a(j, col[c] * k + c0 + s));
                    for (int v = 0; v < 4; v++)
                        _mm512_store_ps(wb + c * KC + s + 16 * v, _mm512_mul_ps(wv[v], a));
                }
            int64_t r0 = 0;
            for (; r0 + 4 <= m; r0 += 4)
                nf4_rows_run(j, wb, c0, len, r0, park, 4);
            switch (m - r0) {
            case 3:
                nf4_rows_run(j, wb, c0, len, r0, park, 3);
                break;
            case 2:
                nf4_rows_run(j, wb, c0, len, r0, park, 2);
                break;
            case 1:
                nf4_rows_run(j, wb, c0, len, r0, park, 1);
                break;
            default:
                break;
            }
        }
        for (int c = 0; c < NC && i + c < i1; c++)
            for (int64_t r = 0; r < m; r++) {
                const float v       = _mm512_reduce_add_ps(park[r * NC + c]);
                j->y[r * n + i + c] = k0 == 0 ? v : j->y[r * n + i + c] + v;
            }
    }
}

AVX512_TARGET static void nf4_direct_m1(const nf4_job *j, int64_t a, int64_t b) {
    nf4_cols_direct(j, a, b, 1);
}
AVX512_TARGET static void nf4_direct_m2(const nf4_job *j, int64_t a, int64_t b) {
    nf4_cols_direct(j, a, b, 2);
}
AVX512_TARGET static void nf4_direct_m3(const nf4_job *j, int64_t a, int64_t b) {
    nf4_cols_direct(j, a, b, 3);
}
AVX512_TARGET static void nf4_direct_m4(const nf4_job *j, int64_t a, int64_t b) {
    nf4_cols_direct(j, a, b, 4);
}

lq_status lq_gemm_nf4_avx512(const lq_qlinear *w, const float *x, int64_t m, float *y, void *ws,
                             size_t ws_size, int nthreads) {
    if (!lq_nf4_avx512_ok(w, m) || !ws || ws_size < lq_ws_nf4_avx512(w, m))
        return LQ_ERR_INVALID_ARG;
    float *const base = (float *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
    float       *xp   = base;
    float       *am   = w->nested_blocksize > 0 ? xp + lq_align_up(m * w->k, 16) : NULL;
    nf4_x_order(x, m, w->k, xp);
    if (am) {
        const int64_t nb = nf4_nblocks(w);
#pragma omp parallel num_threads(nthreads)
        {
            const int64_t t = omp_get_thread_num(), T = omp_get_num_threads();
            const int64_t a0 = lq_align_up(nb * t / T, 16),
                          a1 = t + 1 == T ? nb : lq_align_up(nb * (t + 1) / T, 16);
            const int64_t b0 = a0 < nb ? a0 : nb, b1 = a1 < nb ? a1 : nb;
            lq_nf4_absmax_avx512(w, am + b0, b0, b1);
        }
    }
    const float  *absmax = am ? am : (const float *)w->absmax;
    const int64_t sh     = __builtin_ctzll((unsigned long long)w->group_size);
    nf4_job       j      = {w, xp, absmax, m, sh, y};
    void (*const direct[4])(const nf4_job *, int64_t, int64_t) = {nf4_direct_m1, nf4_direct_m2,
                                                                  nf4_direct_m3, nf4_direct_m4};
    const int64_t nblk                                         = (w->n + NC - 1) / NC;
    lq_split      sp; /* up to 4 rows: blocks of NC columns, 16 at a time from another's part */
    lq_split_init(&sp, nthreads, nblk, 16);
#pragma omp parallel num_threads(nthreads)
    {
        const int64_t t = omp_get_thread_num(), T = omp_get_num_threads();
        const int64_t a = nblk * t / T * NC, b0 = nblk * (t + 1) / T * NC,
                      b = b0 < w->n ? b0 : w->n;
        if (m <= 4) {
            lq_seg_it it = lq_split_iter(&sp, (int)t, (int)T);
            for (int64_t i0, i1; lq_seg_next_rows(&it, NC, w->n, &i0, &i1);)
                direct[m - 1](&j, i0, i1);
        } else if (a < b) { /* activations of a k range: <= 512 KiB, half an L2 */
            const int64_t kr   = ((int64_t)131072 / m) & ~(int64_t)(KC - 1);
            const int64_t step = kr > KC ? kr : KC;
            for (int64_t k0 = 0; k0 < w->k; k0 += step)
                nf4_cols_buffered(&j, a, b, k0, k0 + step < w->k ? k0 + step : w->k);
        }
    }
    return LQ_OK;
}
/* ---------------------------------------------------------------------------------------
 * Dense fp16 / bf16 weights, m <= LQ_DENSE16_AVX512_M rows: W rows converted to float32 as
 * they are read (vcvtph2ps; bf16 is the top half of a float32), so the memory-bound rows
 * stream two bytes a weight. Tiles of 4 W rows x 4 x rows (16 accumulators along k, summed
 * at the end); a short n or m tile repeats its last row and drops it. k's tail: masked loads.
 * --------------------------------------------------------------------------------------- */
/* AMD family 19h, which where AVX-512 runs is Zen 4 */
static int zen4(void) {
    __builtin_cpu_init();
    return __builtin_cpu_is("amdfam19h");
}

int lq_dense16_avx512_ok(const lq_qlinear *w, int64_t m) {
    return m >= 1 && m <= (zen4() ? LQ_DENSE16_ZEN4_M : LQ_DENSE16_AVX512_M) &&
           (w->dense_dtype == LQ_DENSE_F16 || w->dense_dtype == LQ_DENSE_BF16) && lq_cpu_avx512();
}

/* Software prefetch 2 KiB ahead along each of the tile's 4 W rows, continuing past a row's
 * end on the same row of the next tile (prefetches do not fault): the hardware prefetcher fell
 * behind on four streams. Running on into the next row instead, which this tile already
 * reads, left the next tile's starts to demand misses: 11008 x 4096 at 1 row took 2.83-2.93
 * ms instead of 2.33-2.38. 4096 x 4096 fp16, 1 thread (Zen 5): 0.97-1.03 -> 0.80-0.83 ms at
 * 1 row, 1.34-1.44 -> 1.01-1.07 at 4 with the prefetch; 512 or 4096 bytes ahead, or into L2
 * only, were slower. On Zen 4 (AMD family 19h with AVX-512) 2 KiB ahead was the slowest of 64
 * B-2 KiB: 4096 x 4096 at 1 row 2.1-2.5 ms against 1.1-1.8 at 256 or 512 B (fp16, bf16 and bf16
 * activations, 1 thread, alternating builds), hence d16_pf. */
#define D16_PF 1024

/* the prefetch distance of the dense tiles, in elements, on this CPU */
static int64_t d16_pf(void) {
    return zen4() ? 256 : D16_PF;
}
/* x rows a tile: 24 accumulators, 10 loads and 4 conversions per 24 FMAs (4 rows: 8 and 4 per
 * 16; 4096 x 4096 fp16 / bf16, 1 thread, Zen 5, from 16 rows 15-25% less time) */
#define D16_MR 6
AVX512_INLINE __m512 d16_cvt(__m256i h, int bf) {
    return bf ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
              : _mm512_cvtph_ps(h);
}

/* the tile's 4 weight rows from i0 (a short tile repeats its last) */
AVX512_INLINE void d16_rows(const uint16_t *W, int64_t k, int64_t i0, int nr,
                            const uint16_t *wr[4]) {
    for (int j = 0; j < 4; j++)
        wr[j] = W + (i0 + (j < nr ? j : nr - 1)) * k;
}

AVX512_INLINE void d16_zero(__m512 acc[D16_MR][4]) {
    for (int r = 0; r < D16_MR; r++)
        for (int j = 0; j < 4; j++)
            acc[r][j] = _mm512_setzero_ps();
}

/* d (d16_pf) elements ahead of channel c on each weight row; past a row's end the same row of the
 * next tile (4 rows on), not the next row */
AVX512_INLINE void d16_prefetch(const uint16_t *const wr[4], int64_t c, int64_t k, int64_t d) {
    const int64_t pf = c + d < k ? c + d : c + d + 3 * k;
    for (int j = 0; j < 4; j++)
        _mm_prefetch((const char *)(wr[j] + pf), _MM_HINT_T0);
}

/* the sums of a[0..3], in that order: a transposing tree (13 operations against 4 x 8 of
 * _mm512_reduce_add_ps; from 512 rows of bf16 activations the k ranges are short enough for
 * that to count; fp16 4096 x 11008 at 48-96 rows, 1 thread, Zen 4: 2-7% less time) */
AVX512_INLINE __m128 d16_sum4(const __m512 a[4]) {
    const __m512 s01 =
        _mm512_add_ps(_mm512_unpacklo_ps(a[0], a[1]), _mm512_unpackhi_ps(a[0], a[1]));
    const __m512 s23 =
        _mm512_add_ps(_mm512_unpacklo_ps(a[2], a[3]), _mm512_unpackhi_ps(a[2], a[3]));
    /* per 128-bit lane: a0, a1, a2, a3 each summed over 4 of its elements */
    const __m512 t = _mm512_add_ps(_mm512_shuffle_ps(s01, s23, _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_ps(s01, s23, _MM_SHUFFLE(3, 2, 3, 2)));
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(t), _mm512_extractf32x8_ps(t, 1));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

/* y[r, i0 + j] (+)= the sum over channels [c0, c1) for r < mr <= D16_MR, j < nr <= 4
 * (constants once inlined); add: accumulate into y (every k range after the first) */
AVX512_INLINE void d16_tile(const uint16_t *W, int64_t k, const float *x, int64_t i0, int nr,
                            int mr, int bf, float *y, int64_t ldy, int64_t c0, int64_t c1, int add,
                            int64_t pf) {
    const uint16_t *wr[4];
    const float    *xr[D16_MR];
    d16_rows(W, k, i0, nr, wr);
    for (int r = 0; r < D16_MR; r++)
        xr[r] = x + (r < mr ? r : mr - 1) * k;
    __m512 acc[D16_MR][4];
    d16_zero(acc);
    int64_t c = c0;
    for (; c + 16 <= c1; c += 16) {
        __m512 wv[4];
        d16_prefetch(wr, c, k, pf);
        for (int j = 0; j < 4; j++)
            wv[j] = d16_cvt(_mm256_loadu_si256((const __m256i *)(wr[j] + c)), bf);
        for (int r = 0; r < D16_MR; r++) {
            if (r >= mr)
                break;
            const __m512 xv = _mm512_loadu_ps(xr[r] + c);
            for (int j = 0; j < 4; j++)
                acc[r][j] = _mm512_fmadd_ps(xv, wv[j], acc[r][j]);
        }
    }
    if (c < c1) {
        const __mmask16 mk = (__mmask16)((1u << (c1 - c)) - 1);
        __m512          wv[4];
        for (int j = 0; j < 4; j++)
            wv[j] = d16_cvt(_mm256_maskz_loadu_epi16(mk, wr[j] + c), bf);
        for (int r = 0; r < D16_MR; r++) {
            if (r >= mr)
                break;
            const __m512 xv = _mm512_maskz_loadu_ps(mk, xr[r] + c);
            for (int j = 0; j < 4; j++)
                acc[r][j] = _mm512_fmadd_ps(xv, wv[j], acc[r][j]);
        }
    }
    const __mmask8 mn = (__mmask8)((1u << nr) - 1);
    for (int r = 0; r < mr; r++) {
        const __m128 v  = d16_sum4(acc[r]);
        float       *yp = y + r * ldy + i0;
        _mm_mask_storeu_ps(yp, mn, add ? _mm_add_ps(v, _mm_maskz_loadu_ps(mn, yp)) : v);
    }
}

/* W rows [a, b) against every row of x, D16_MR x rows at a time, over k ranges whose activations
 * (m rows) fit in 1 MiB, half an L2: a 4096 x 11008 at m = 64 ran 30% slower without them */
#define D16_COLS(bf_)                                                                              \
    AVX512_TARGET static void d16_cols_##bf_(const lq_qlinear *w, const float *x, int64_t m,       \
                                             float *y, int64_t a, int64_t b, int64_t pf) {         \
        const uint16_t *W = w->dense;                                                              \
        const int64_t   k = w->k, n = w->n;                                                        \
        const int64_t   kr = ((int64_t)262144 / m) & ~(int64_t)15;                                 \
        const int64_t   kb = kr > 256 ? kr : 256;                                                  \
        for (int64_t c0 = 0; c0 < k; c0 += kb) {                                                   \
            const int64_t c1 = c0 + kb < k ? c0 + kb : k;                                          \
            for (int64_t i = a; i < b; i += 4) {                                                   \
                const int nr = b - i < 4 ? (int)(b - i) : 4;                                       \
                for (int64_t r = 0; r < m; r += D16_MR) {                                          \
                    const float *xr = x + r * k;                                                   \
                    float       *yr = y + r * n;                                                   \
                    switch (m - r < D16_MR ? (int)(m - r) : D16_MR) {                              \
                    case 1:                                                                        \
                        d16_tile(W, k, xr, i, nr, 1, bf_, yr, n, c0, c1, c0 > 0, pf);              \
                        break;                                                                     \
                    case 2:                                                                        \
                        d16_tile(W, k, xr, i, nr, 2, bf_, yr, n, c0, c1, c0 > 0, pf);              \
                        break;                                                                     \
                    case 3:                                                                        \
                        d16_tile(W, k, xr, i, nr, 3, bf_, yr, n, c0, c1, c0 > 0, pf);              \
                        break;                                                                     \
                    case 4:                                                                        \
                        d16_tile(W, k, xr, i, nr, 4, bf_, yr, n, c0, c1, c0 > 0, pf);              \
                        break;                                                                     \
                    case 5:                                                                        \
                        d16_tile(W, k, xr, i, nr, 5, bf_, yr, n, c0, c1, c0 > 0, pf);              \
                        break;                                                                     \
                    default:                                                                       \
                        d16_tile(W, k, xr, i, nr, 6, bf_, yr, n, c0, c1, c0 > 0, pf);              \
                    }                                                                              \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }
D16_COLS(0)
D16_COLS(1)
#undef D16_COLS

/* One row of x on Zen 4: each weight row read whole, one stream, 4 accumulators (llama.cpp's
 * ggml_vec_dot_f16 loop). A Zen 4 core reads one stream faster than a tile's 4 (a probe over 32
 * and 88 MiB of fp16 on float x, 1 thread: 24-33 GB/s against 19-24), but this loop loads x once
 * a weight rather than once per 4 weights, so x has to stay in L1 (32 KiB) beside the stream. On
 * 2 threads one row read 28-32 GB/s with float x (16 KiB each at k = 4096) against 26-63 for the
 * tiles, and 31-64 against 35-52 with bf16 x (8 KiB); the two vCPUs there are two cores with an
 * L1 each (their FMA rate adds up), so why float x does not scale is not known. Hence, as
 * measured, one row where x's bytes, doubled with a second thread, fit D16_ROW1_X_BYTES. In the
 * library, 1 thread, alternated builds: fp16 4096 x 4096 1.11-1.20 ms against 1.32-1.57,
 * 11008 x 4096 3.45-4.51 against 3.90-4.73; bf16 on bf16 activations 0.80-0.87 against 1.15-1.44
 * and 2.84-3.26 against 4.07-4.41 (2 threads: 0.25-0.69 against 0.40-0.53, 1.52-2.41 against
 * 2.24-2.44). */
#define D16_ROW1_X_BYTES 16384
static int d16_row1_ok(int64_t m, int64_t xbytes, int64_t nthreads) {
    return m == 1 && zen4() && xbytes * (nthreads > 1 ? 2 : 1) <= D16_ROW1_X_BYTES;
}

/* the 4 accumulators' total */
AVX512_INLINE float d16_total4(const __m512 a[4]) {
    return _mm512_reduce_add_ps(
        _mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3])));
}

/* 16 activations from channel c (mk: those below k), float32 or (xh) fp16 */
AVX512_INLINE __m512 d16_x(const void *x, int64_t c, __mmask16 mk, int xh) {
    return xh ? _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mk, (const uint16_t *)x + c))
              : _mm512_maskz_loadu_ps(mk, (const float *)x + c);
}

/* one weight row (fp16, or bf16 when bf) against x (float32, or fp16 when xh) */
AVX512_INLINE float d16_row1(const uint16_t *wr, const void *x, int64_t k, int bf, int xh) {
    __m512  a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                    _mm512_setzero_ps()};
    int64_t c    = 0;
    for (; c + 64 <= k; c += 64)
        for (int j = 0; j < 4; j++)
            a[j] =
                _mm512_fmadd_ps(d16_cvt(_mm256_loadu_si256((const __m256i *)(wr + c + 16 * j)), bf),
                                d16_x(x, c + 16 * j, (__mmask16)0xffff, xh), a[j]);
    for (; c < k; c += 16) { /* into a[0] alone: a variable index kept a[] on the stack */
        const __mmask16 mk = k - c >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (k - c)) - 1);
        a[0]               = _mm512_fmadd_ps(d16_cvt(_mm256_maskz_loadu_epi16(mk, wr + c), bf),
                                             d16_x(x, c, mk, xh), a[0]);
    }
    return d16_total4(a);
}

/* W rows [a, b) against the one row of x */
AVX512_TARGET static void d16_rows1(const lq_qlinear *w, const float *x, float *y, int64_t a,
                                    int64_t b, int bf) {
    const uint16_t *W = w->dense;
    if (bf)
        for (int64_t i = a; i < b; i++)
            y[i] = d16_row1(W + i * w->k, x, w->k, 1, 0);
    else
        for (int64_t i = a; i < b; i++)
            y[i] = d16_row1(W + i * w->k, x, w->k, 0, 0);
}

/* the one-row kernels' rows [a, b) (x: float32, fp16 or bf16 as the kernel reads it) */
typedef void (*d16_rows_fn)(const lq_qlinear *w, const void *x, float *y, int64_t a, int64_t b);
static void d16_rows1_f16(const lq_qlinear *w, const void *x, float *y, int64_t a, int64_t b) {
    d16_rows1(w, x, y, a, b, 0);
}
static void d16_rows1_bf16(const lq_qlinear *w, const void *x, float *y, int64_t a, int64_t b) {
    d16_rows1(w, x, y, a, b, 1);
}

/* A one-row call's rows over the team, 16-row units (lq_split: each thread reads its own part
 * of W from the front, then helps a slower one from the back); every thread calls it */
#define D16_ROWS1_STEAL 4
static void d16_rows1_team(lq_split *sp, d16_rows_fn fn, const lq_qlinear *w, const void *x,
                           float *y) {
    lq_seg_it it = lq_split_iter(sp, omp_get_thread_num(), omp_get_num_threads());
    for (int64_t i0, i1; lq_seg_next_rows(&it, 16, w->n, &i0, &i1);)
        fn(w, x, y, i0, i1);
}

/* lq_split_init's arguments for d16_rows1_team */
static void d16_rows1_split(lq_split *sp, const lq_qlinear *w, int nthreads) {
    lq_split_init(sp, lq_cpu_threads(nthreads), (w->n + 15) / 16, D16_ROWS1_STEAL);
}

AVX512_TARGET void lq_dense16_to_f32_avx512(const uint16_t *h, int bf, int64_t cnt, float *out) {
    int64_t e = 0;
    for (; e + 16 <= cnt; e += 16)
        _mm512_storeu_ps(out + e, d16_cvt(_mm256_loadu_si256((const __m256i *)(h + e)), bf));
    if (e < cnt) {
        const __mmask16 mk = (__mmask16)((1u << (cnt - e)) - 1);
        _mm512_mask_storeu_ps(out + e, mk, d16_cvt(_mm256_maskz_loadu_epi16(mk, h + e), bf));
    }
}

lq_status lq_gemm_dense16_avx512(const lq_qlinear *w, const float *x, int64_t m, float *y,
                                 int nthreads) {
    if (!lq_dense16_avx512_ok(w, m))
        return LQ_ERR_INVALID_ARG;
    const int     bf   = w->dense_dtype == LQ_DENSE_BF16;
    const int64_t nblk = (w->n + 3) / 4, pf = d16_pf();
    lq_split      sp;
    d16_rows1_split(&sp, w, nthreads);
#pragma omp parallel num_threads(nthreads)
    {
        const int64_t t = omp_get_thread_num(), T = omp_get_num_threads();
        const int64_t a = nblk * t / T * 4, b0 = nblk * (t + 1) / T * 4, b = b0 < w->n ? b0 : w->n;
        if (d16_row1_ok(m, w->k * (int64_t)sizeof(float), T)) {
            d16_rows1_team(&sp, bf ? d16_rows1_bf16 : d16_rows1_f16, w, x, y);
        } else if (a < b) {
            if (bf)
                d16_cols_1(w, x, m, y, a, b, pf);
            else
                d16_cols_0(w, x, m, y, a, b, pf);
        }
    }
    return LQ_OK;
}
/* ---------------------------------------------------------------------------------------
 * Dense fp16 weights on fp16 activations (LQ_QLINEAR_F16_X), what llama.cpp runs for F16
 * weights: x rounded to fp16 (to nearest even; vcvtps2ph rounds as lq_f32_to_f16), products
 * exact in float32 (11-bit significands), float32 sums. At one row, where d16_row1_ok holds for
 * the fp16 activations (half the L1 of float ones beside the weight stream), the row kernel reads
 * them as fp16; elsewhere the float kernels run on the rounded activations.
 * --------------------------------------------------------------------------------------- */
int lq_dense_f16x_row_ok(const lq_qlinear *w, int64_t m, int nthreads) {
    return w->dense_dtype == LQ_DENSE_F16 && d16_row1_ok(m, w->k * 2, nthreads);
}

AVX512_TARGET void lq_round_f16_avx512(const float *x, int64_t cnt, float *out) {
    int64_t e = 0;
    for (; e + 16 <= cnt; e += 16)
        _mm512_storeu_ps(out + e, _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_loadu_ps(x + e),
                                                                  _MM_FROUND_TO_NEAREST_INT)));
    if (e < cnt) {
        const __mmask16 mk = (__mmask16)((1u << (cnt - e)) - 1);
        _mm512_mask_storeu_ps(out + e, mk,
                              _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_maskz_loadu_ps(mk, x + e),
                                                              _MM_FROUND_TO_NEAREST_INT)));
    }
}

AVX512_TARGET static void hx_rows1(const lq_qlinear *w, const void *xh, float *y, int64_t a,
                                   int64_t b) {
    for (int64_t i = a; i < b; i++)
        y[i] = d16_row1((const uint16_t *)w->dense + i * w->k, xh, w->k, 0, 1);
}

AVX512_TARGET static void hx_round(const float *x, int64_t k, uint16_t *xh) {
    int64_t c = 0;
    for (; c + 16 <= k; c += 16)
        _mm256_storeu_si256((__m256i *)(xh + c),
                            _mm512_cvtps_ph(_mm512_loadu_ps(x + c), _MM_FROUND_TO_NEAREST_INT));
    if (c < k) {
        const __mmask16 mk = (__mmask16)((1u << (k - c)) - 1);
        _mm256_mask_storeu_epi16(
            xh + c, mk,
            _mm512_cvtps_ph(_mm512_maskz_loadu_ps(mk, x + c), _MM_FROUND_TO_NEAREST_INT));
    }
}

lq_status lq_gemm_dense_f16x_row(const lq_qlinear *w, const float *x, float *y, void *ws,
                                 int nthreads) {
    uint16_t *xh = ws;
    hx_round(x, w->k, xh);
    lq_split sp;
    d16_rows1_split(&sp, w, nthreads);
#pragma omp parallel num_threads(nthreads)
    d16_rows1_team(&sp, hx_rows1, w, xh, y);
    return LQ_OK;
}

/* ---------------------------------------------------------------------------------------
 * Dense bf16 weights on bf16 activations (LQ_QLINEAR_BF16_X; AVX512_BF16), what llama.cpp
 * runs for BF16 weights: x rounded to bf16 (RNE) into the workspace, each row padded with zeros
 * to 32 channels; one vdpbf16ps then adds 32 exact products into 16 float32 lanes, with the
 * weights as they are stored (no conversion). A register loop of independent vdpbf16ps ran at
 * ~490 GFLOP/s on one Zen 5 core against ~270 for vfmadd231ps, so from 16 rows, where the
 * float kernels are bound by their FMAs, this is the only way past llama.cpp's bf16. Tiles,
 * threads and prefetch as d16_tile; the k ranges hold 1 MiB of activations (now 2 bytes each).
 * --------------------------------------------------------------------------------------- */
#define BX_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#define BX_INLINE static inline __attribute__((always_inline)) BX_TARGET

int lq_cpu_avx512bf16(void) {
    return lq_cpu_avx512() && __builtin_cpu_supports("avx512bf16");
}

/* the activations' row stride, in bf16 elements (64-byte rows) */
static int64_t bx_ld(int64_t k) {
    return (k + 31) & ~(int64_t)31;
}

size_t lq_ws_dense_bf16x(int64_t k, int64_t m) {
    int64_t e;
    if (!lq_mul_i64(m, bx_ld(k), &e) || !lq_mul_i64(e, 2, &e) || (uint64_t)e > SIZE_MAX)
        return SIZE_MAX; /* no buffer that size: the forward's workspace check fails */
    return (size_t)e;
}

/* row r of x -> xb, rounded to nearest even, zeros to the padded stride */
BX_TARGET static void bx_round_row(const float *x, int64_t k, uint16_t *xb) {
    for (int64_t c = 0; c < bx_ld(k); c += 32) {
        const int64_t   lo = k - c, hi = k - c - 16;
        const __mmask16 ml = lo >= 16 ? 0xffff : lo > 0 ? (__mmask16)((1u << lo) - 1) : 0;
        const __mmask16 mh = hi >= 16 ? 0xffff : hi > 0 ? (__mmask16)((1u << hi) - 1) : 0;
        const __m512    a  = _mm512_maskz_loadu_ps(ml, x + c);
        const __m512    b  = _mm512_maskz_loadu_ps(mh, x + c + 16);
        _mm512_store_si512((void *)(xb + c), (__m512i)_mm512_cvtne2ps_pbh(b, a));
    }
}

/* d16_tile on bf16 activations (xr rows of stride ldx, 64-byte aligned) */
BX_INLINE void bx_tile(const uint16_t *W, int64_t k, const uint16_t *x, int64_t ldx, int64_t i0,
                       int nr, int mr, float *y, int64_t ldy, int64_t c0, int64_t c1, int add,
                       int64_t pf) {
    const uint16_t *wr[4], *xr[D16_MR];
    d16_rows(W, k, i0, nr, wr);
    for (int r = 0; r < D16_MR; r++)
        xr[r] = x + (r < mr ? r : mr - 1) * ldx;
    __m512 acc[D16_MR][4];
    d16_zero(acc);
    int64_t c = c0;
    for (; c + 32 <= c1; c += 32) {
        __m512i wv[4];
        d16_prefetch(wr, c, k, pf);
        for (int j = 0; j < 4; j++)
            wv[j] = _mm512_loadu_si512((const void *)(wr[j] + c));
        for (int r = 0; r < D16_MR; r++) {
            if (r >= mr)
                break;
            const __m512bh xv = (__m512bh)_mm512_load_si512((const void *)(xr[r] + c));
            for (int j = 0; j < 4; j++)
                acc[r][j] = _mm512_dpbf16_ps(acc[r][j], xv, (__m512bh)wv[j]);
        }
    }
    if (c < c1) { /* k's tail: the activations are zero past k */
        const __mmask32 mk = ((__mmask32)1 << (c1 - c)) - 1;
        __m512i         wv[4];
        for (int j = 0; j < 4; j++)
            wv[j] = _mm512_maskz_loadu_epi16(mk, wr[j] + c);
        for (int r = 0; r < D16_MR; r++) {
            if (r >= mr)
                break;
            const __m512bh xv = (__m512bh)_mm512_load_si512((const void *)(xr[r] + c));
            for (int j = 0; j < 4; j++)
                acc[r][j] = _mm512_dpbf16_ps(acc[r][j], xv, (__m512bh)wv[j]);
        }
    }
    const __mmask8 mn = (__mmask8)((1u << nr) - 1);
    for (int r = 0; r < mr; r++) {
        const __m128 v  = d16_sum4(acc[r]);
        float       *yp = y + r * ldy + i0;
        _mm_mask_storeu_ps(yp, mn, add ? _mm_add_ps(v, _mm_maskz_loadu_ps(mn, yp)) : v);
    }
}

/* d16_row1 on bf16 activations (zeros past k to the padded stride) */
BX_INLINE float bx_row1(const uint16_t *wr, const uint16_t *x, int64_t k) {
    __m512  a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                    _mm512_setzero_ps()};
    int64_t c    = 0;
    for (; c + 128 <= k; c += 128)
        for (int j = 0; j < 4; j++)
            a[j] =
                _mm512_dpbf16_ps(a[j], (__m512bh)_mm512_load_si512((const void *)(x + c + 32 * j)),
                                 (__m512bh)_mm512_loadu_si512((const void *)(wr + c + 32 * j)));
    for (; c < k; c += 32) { /* into a[0] alone (as d16_row1) */
        const __mmask32 mk = k - c >= 32 ? ~(__mmask32)0 : ((__mmask32)1 << (k - c)) - 1;
        a[0] = _mm512_dpbf16_ps(a[0], (__m512bh)_mm512_load_si512((const void *)(x + c)),
                                (__m512bh)_mm512_maskz_loadu_epi16(mk, wr + c));
    }
    return d16_total4(a);
}

/* W rows [a, b) against the one row of xb */
BX_TARGET static void bx_rows1(const lq_qlinear *w, const void *xb, float *y, int64_t a,
                               int64_t b) {
    for (int64_t i = a; i < b; i++)
        y[i] = bx_row1((const uint16_t *)w->dense + i * w->k, xb, w->k);
}

/* activations a k range: 1 MiB (at 512 rows, when this kernel ran there, 1 MiB against 256
 * KiB took 57-63 against 75-77 ms at 4096 x 4096) */
#define BX_KR_BYTES 1048576
/* W rows [a, b) against every row of xb, D16_MR rows at a time, k in ranges of kb channels */
BX_TARGET static void bx_cols(const lq_qlinear *w, const uint16_t *xb, int64_t m, float *y,
                              int64_t a, int64_t b, int64_t pf) {
    const uint16_t *W = w->dense;
    const int64_t   k = w->k, n = w->n, ld = bx_ld(k);
    const int64_t   kr = ((int64_t)BX_KR_BYTES / m) & ~(int64_t)31;
    const int64_t   kb = kr > 256 ? kr : 256;
    for (int64_t c0 = 0; c0 < k; c0 += kb) {
        const int64_t c1 = c0 + kb < k ? c0 + kb : k;
        for (int64_t i = a; i < b; i += 4) {
            const int nr = b - i < 4 ? (int)(b - i) : 4;
            for (int64_t r = 0; r < m; r += D16_MR) {
                const uint16_t *xr = xb + r * ld;
                float          *yr = y + r * n;
                switch (m - r < D16_MR ? (int)(m - r) : D16_MR) {
#define BX_CASE(M_)                                                                                \
    case M_:                                                                                       \
        bx_tile(W, k, xr, ld, i, nr, M_, yr, n, c0, c1, c0 > 0, pf);                               \
        break;
                    BX_CASE(1)
                    BX_CASE(2)
                    BX_CASE(3)
                    BX_CASE(4)
                    BX_CASE(5)
#undef BX_CASE
                default:
                    bx_tile(W, k, xr, ld, i, nr, D16_MR, yr, n, c0, c1, c0 > 0, pf);
                }
            }
        }
    }
}

/* x [m, k] -> xb, the rows shared by the calling team (an orphaned omp for) */
BX_TARGET static void bx_round(const float *x, int64_t m, int64_t k, uint16_t *xb) {
#pragma omp for schedule(static)
    for (int64_t r = 0; r < m; r++)
        bx_round_row(x + r * k, k, xb + r * bx_ld(k));
}

/* the caller (the dense format's gemm_cpu_qx) has checked the weights and the CPU */
lq_status lq_gemm_dense_bf16x(const lq_qlinear *w, const float *x, int64_t m, float *y, void *ws,
                              size_t ws_size, int nthreads) {
    if (!ws || ws_size < lq_ws_dense_bf16x(w->k, m) || ((uintptr_t)ws & 63))
        return LQ_ERR_INVALID_ARG;
    uint16_t     *xb   = ws;
    const int64_t nblk = (w->n + 3) / 4, pf = d16_pf();
    /* the check (a syscall) only where AMX would run: not on the one-row decode path */
    const int amx = m > LQ_DENSE_BF16X_AMX_M && lq_cpu_amx_bf16();
    if (amx || m > (zen4() ? LQ_DENSE_BF16X_ZEN4_M : LQ_DENSE_BF16X_ROWS_M)) { /* a GEMM */
#pragma omp parallel num_threads(nthreads)
        bx_round(x, m, w->k, xb);
        (amx ? lq_gemm_amx_bf16x : lq_gemm512_bf16x)(xb, bx_ld(w->k), m, w->k, w->dense, w->k, w->n,
                                                     y, w->n, nthreads);
        return LQ_OK;
    }
    lq_split sp;
    d16_rows1_split(&sp, w, nthreads);
#pragma omp parallel num_threads(nthreads)
    {
        bx_round(x, m, w->k, xb); /* its barrier: every row is ready */
        const int64_t t = omp_get_thread_num(), T = omp_get_num_threads();
        const int64_t a = nblk * t / T * 4, b0 = nblk * (t + 1) / T * 4, b = b0 < w->n ? b0 : w->n;
        if (d16_row1_ok(m, bx_ld(w->k) * 2, T))
            d16_rows1_team(&sp, bx_rows1, w, xb, y);
        else if (a < b)
            bx_cols(w, xb, m, y, a, b, pf);
    }
    return LQ_OK;
}

#else
int lq_cpu_avx512(void) {
    return 0;
}
int lq_nf4_avx512_ok(const lq_qlinear *w, int64_t m) {
    (void)w, (void)m;
    return 0;
}
size_t lq_ws_nf4_avx512(const lq_qlinear *w, int64_t m) {
    (void)w, (void)m;
    return 0;
}
void lq_nf4_absmax_avx512(const lq_qlinear *w, float *out, int64_t b0, int64_t b1) {
    lq_nf4_absmax_range(w, b0, b1, out);
}
lq_status lq_gemm_nf4_avx512(const lq_qlinear *w, const float *x, int64_t m, float *y, void *ws,
                             size_t ws_size, int nthreads) {
    (void)w, (void)x, (void)m, (void)y, (void)ws, (void)ws_size, (void)nthreads;
    return LQ_ERR_UNSUPPORTED;
}
int lq_dense16_avx512_ok(const lq_qlinear *w, int64_t m) {
    (void)w, (void)m;
    return 0;
}
void lq_dense16_to_f32_avx512(const uint16_t *h, int bf, int64_t cnt, float *out) {
    (void)h, (void)bf, (void)cnt, (void)out;
}
int lq_dense_f16x_row_ok(const lq_qlinear *w, int64_t m, int nthreads) {
    (void)w, (void)m, (void)nthreads;
    return 0;
}
void lq_round_f16_avx512(const float *x, int64_t cnt, float *out) {
    (void)x, (void)cnt, (void)out;
}
lq_status lq_gemm_dense_f16x_row(const lq_qlinear *w, const float *x, float *y, void *ws,
                                 int nthreads) {
    (void)w, (void)x, (void)y, (void)ws, (void)nthreads;
    return LQ_ERR_UNSUPPORTED;
}
lq_status lq_gemm_dense16_avx512(const lq_qlinear *w, const float *x, int64_t m, float *y,
                                 int nthreads) {
    (void)w, (void)x, (void)m, (void)y, (void)nthreads;
    return LQ_ERR_UNSUPPORTED;
}
int lq_cpu_avx512bf16(void) {
    return 0;
}
size_t lq_ws_dense_bf16x(int64_t k, int64_t m) {
    (void)k, (void)m;
    return 0;
}
lq_status lq_gemm_dense_bf16x(const lq_qlinear *w, const float *x, int64_t m, float *y, void *ws,
                              size_t ws_size, int nthreads) {
    (void)w, (void)x, (void)m, (void)y, (void)ws, (void)ws_size, (void)nthreads;
    return LQ_ERR_UNSUPPORTED;
}
#endif
