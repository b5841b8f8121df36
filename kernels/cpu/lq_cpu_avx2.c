/* x86-64 AVX2 integer-activation kernels, for CPUs without AVX-512 VNNI (AMD Zen 1-3, Intel
 * before Ice Lake; and 3-bit where VNNI comes without VBMI): GPTQ bits 2/4/8 (and 3: avx2_tile3)
 * with the semantics of lq_gemm_gptq_qx_ref, bit for bit, as lq_cpu_vnni.c has them with AVX-512.
 * Chosen at run time (lq_cpu_avx2i); elsewhere the float kernels run.
 *
 * The activations are int8, laid out as for the VNNI kernels (lq_gptq_qx_row): a qweight word
 * shifted by s * b and masked per byte holds slice s (channels u * (8/b) + s, u = 0..3), so one
 * 32-bit broadcast of x against 8 columns of masked words is one multiply: vpmaddubsw (u8 codes x
 * s8 activations, pairs summed in int16) then vpmaddwd against ones, exact as long as no int16
 * sum saturates. With b <= 4 a pair is at most 2 * 15 * 127 = 3810, so a word row's 8/b slices
 * are summed in int16 before widening (at most 7620). 8-bit codes would saturate (2 * 255 *
 * 127): the sum is of (code - 128) x instead, by the sign trick (|code - 128| against x carrying
 * its sign: pairs of at most 2 * 128 * 127), and the epilogue's zero point is z - 128. That is
 * bit for bit the reference: the block sum of x is an integer held exactly in float, so
 * fma(-(z - 128), sum(x), sum((c - 128) x)) has the exact value of fma(-z, sum(x), sum(c x)),
 * both sums exact in float (|.| < 2^24: int8 blocks are at most 256).
 * Loop order and the contiguous copy of a column block's words from 16 rows: as the VNNI
 * kernels (see there). */
#include "lq_kernels_impl.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "lq_cpu_avx2_inl.h"
#include <immintrin.h>

#define AVX2_TARGET LQ_AVX2_TARGET
#define AVX2_INLINE LQ_AVX2_INLINE
#define AVX2_M      4   /* activation rows per chunk */
#define AVX2_NV_MAX 4   /* 8-column vectors per tile */
/* prefetch distance along a word row, in words (avx2_tile). 8-bit blocks stream twice the word
 * rows of 4-bit ones, and a long distance then evicts lines from L1 before they are read
 * (4096 x 11008, 1 thread, one row: 4.2 ms at 128 words, 3.4-3.7 at 32) */
#define AVX2_PF(b) ((b) == 8 ? 32 : 128)
/* At one or two rows, a block of more than 16 word rows (8-bit codes at 128 channels: 32 rows n
 * words apart, at n = 4096 all 4 KiB-aliased, so a tile's 64 lines fall into the same two L1 sets)
 * is read in parts of this many rows, each part across all of the thread's tiles, the sums carried
 * between parts in a buffer of 4 bytes a column. Plain loads over 8 MiB in tiles of 32 such rows
 * ran at 4-7 GB/s, in tiles of 16 or 8 rows at 15-20 (Zen 3). 8-bit, 1 thread, weights from
 * memory: 4096 x 4096 1.05-1.12 -> 0.76-0.85 ms, 11008 x 4096 3.2-3.7 -> 1.8-1.9 (parts of 16
 * rows, a noisier run: 1.05-1.43 and 3.0-5.4 against 1.48-2.46 and 4.2-5.1). Two rows as well
 * (tiles of 16 columns): 11008 x 4096 3.60-3.65 -> 2.82-2.90 ms on 1 thread, 1.82-2.24 ->
 * 1.45-1.66 on 2; 4096 x 4096 1.30-1.46 -> 1.27 (1), 4096 x 11008 no change. At 3 and 4 rows
 * and for 4-bit blocks of 16 rows, parts were no faster. */
#define AVX2_SPLIT_ROWS 8
/* Below AVX2_KC_M rows a copied column block holds AVX2_KC_ROWS word rows (whole blocks) at a
 * time, all of a thread's tiles taking their turn before the next rows: 16 rows, 1 thread,
 * 4096 x 4096: 8-bit 7.3-7.8 -> 5.7-6.0 ms, 4-bit 4.7 -> 4.1; 4096 x 11008: 8-bit 22 -> 16, 4-bit
 * 13.3-14.5 -> 10.9-11.2. From 32 rows the whole of k is copied at once: at 32-64 rows chunks
 * took 1-8% longer on 11008 x 4096, and on 4096 x 11008 ranged from 1% slower to 17% faster. */
#define AVX2_KC_ROWS 64
#define AVX2_KC_M 32
#define AVX2_COPY_M 16  /* from this many rows a column block's words are copied contiguous */
/* from this many rows 3-bit codes are decoded once per call (avx2_3to4); below, per tile
 * (4096 x 4096, 1 thread, 8 rows: 3.9 ms per tile, 5.4 ms once) */
#define AVX2_X3_M 16

int lq_cpu_avx2i(void) {
    const char *e = getenv("LQ_CPU_KERNELS");
    __builtin_cpu_init();
    /* F16C is not asked for: clang's builtin has no name for it, and every AVX2 CPU has it
     * (it came with Ivy Bridge and Piledriver, before AVX2) */
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           !(e && !strcmp(e, "portable"));
}

int lq_gptq_avx2_ok(const lq_qlinear *w, int xbits) {
    const int b = w->bits;
    return (b == 2 || b == 3 || b == 4 || b == 8) && w->n % 8 == 0 && xbits == 8;
}

size_t lq_ws_gptq_avx2(const lq_qlinear *w, int64_t m, int xbits) {
    return lq_gptq_qx_ws(w, m, xbits);
}

typedef struct avx2_job {
    const lq_qlinear *w;
    int64_t           ab, nkb, kp, m; /* kp: bytes per row of xp */
    const uint8_t    *xp;             /* [m, kp] */
    const float      *xsf, *dx;       /* [m, nkb] */
    float            *y;
    const uint32_t   *qw; /* qweight (ldq = n, qcol0 = 0) or a column block copied contiguous */
    int64_t           ldq, qcol0;
    uint8_t           ctl3[8][32]; /* 3-bit: per 4 channels, vpshufb and vpmulhuw operands */
    uint16_t          mul3[8][16];
    uint32_t         *x3buf; /* 3-bit from AVX2_X3_M rows: this thread's 4-bit words */
    __m256i          *carry; /* [m, cld] sums of vectors cv0.. between a block's row parts */
    int64_t           cv0, cld;
} avx2_job;

/* The zero points of columns col .. col + 7 (col % 8 == 0) of group g (v1 stores zero - 1), as
 * float. The 8 fields are 8 b contiguous bits: 8-bit ones 8 bytes, else at most 32 bits read
 * across a word boundary (3-bit) into one scalar and split by variable shifts. Built in
 * registers: scalars stored to arrays and loaded as vectors stalled on store forwarding. */
AVX2_INLINE __m256 avx2_zeros(const lq_qlinear *w, int64_t g, int64_t col) {
    const int       b    = w->bits;
    const uint32_t *qz   = (const uint32_t *)w->qzeros + g * (w->n * b / 32);
    const __m256i   mask = _mm256_set1_epi32((1 << b) - 1);
    __m256i         v;
    if (b == 8) {
        v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const void *)(qz + col / 4)));
    } else {
        const int64_t bit = col * b;
        const int     sh  = (int)(bit & 31);
        uint64_t      u   = qz[bit >> 5];
        if (sh + 8 * b > 32)
            u |= (uint64_t)qz[(bit >> 5) + 1] << 32;
        const __m256i f = _mm256_setr_epi32(0, b, 2 * b, 3 * b, 4 * b, 5 * b, 6 * b, 7 * b);
        v = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)(uint32_t)(u >> sh)), f),
                             mask);
    }
    return _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_add_epi32(v, _mm256_set1_epi32(1)), mask));
}

/* y[r0 + r, i0 + 8 jv + l] (+)= block kb of the product from its integer sums acc, r < M,
 * jv < NV: t = fma(-z, sum(xq), acc), y = fma(t, s * dx, y) as the reference; the first block
 * (kb == 0) assigns. zshift: what the sums left out of each code (8-bit int8: 128). */
AVX2_INLINE void avx2_flush(const avx2_job *j, int64_t kb, int64_t i0, int64_t r0, const int M,
                            const int NV, __m256i acc[AVX2_M][AVX2_NV_MAX], float zshift) {
    const lq_qlinear *w = j->w;
    const int64_t     n = w->n, g = kb * j->ab / w->group_size;
    for (int jv = 0; jv < NV; jv++) {
        const int64_t col = i0 + 8 * jv;
        const __m256  sc  = _mm256_cvtph_ps(
              _mm_loadu_si128((const void *)((const uint16_t *)w->scales + g * n + col)));
        const __m256 zf = _mm256_sub_ps(avx2_zeros(w, g, col), _mm256_set1_ps(zshift));
        for (int r = 0; r < M; r++) {
            const int64_t rr = r0 + r;
            const __m256  xs = _mm256_set1_ps(j->xsf[rr * j->nkb + kb]);
            const __m256  d  = _mm256_set1_ps(j->dx[rr * j->nkb + kb]);
            float        *yp = j->y + rr * n + col;
            const __m256  t  = _mm256_fnmadd_ps(zf, xs, _mm256_cvtepi32_ps(acc[r][jv]));
            const __m256  yv = kb ? _mm256_loadu_ps(yp) : _mm256_setzero_ps();
            _mm256_storeu_ps(yp, _mm256_fmadd_ps(t, _mm256_mul_ps(sc, d), yv));
        }
    }
}

/* y[r0 + r, i0 + 8 jv + l] (+)= block kb of the product, r < M, jv < NV (avx2_flush). */
AVX2_INLINE void avx2_tile(const avx2_job *j, int64_t kb, int64_t i0, int64_t r0, const int b,
                           const int M, const int NV, int64_t h, int64_t nh) {
    const lq_qlinear *w = j->w;
    const int64_t     k = w->k, ab = j->ab;
    const int         P = 8 / b, vpw = 32 / b;
    const int64_t     c0 = kb * ab, c1 = c0 + ab < k ? c0 + ab : k;
    const uint32_t   *qw   = j->qw - j->qcol0;
    const int64_t     ldq  = j->ldq;
    const __m256i     ones  = _mm256_set1_epi16(1);
    const __m256i     bmask = b == 8 ? _mm256_set1_epi8((char)0x80) /* the sign bits */
                                     : _mm256_set1_epi8((char)((1 << b) - 1));
    /* 8-bit sums are of (code - 128) x: the epilogue's zero point carries the 128 back */
    const float zshift = b == 8 ? 128.f : 0.f;
    /* software prefetch where the words stream from memory, not from a copied column block;
     * 2-bit above 2 rows does as well without (4096 x 11008 and 11008 x 4096, 1 and 2
     * threads, 3 to 8 rows: 4/8-bit 5-40% faster with it, 2-bit within -5%..+3%) */
    const int         pf     = ldq == w->n && (M <= 2 || b >= 4);
    __m256i           acc[AVX2_M][AVX2_NV_MAX];
    const int64_t     wa = c0 / vpw, wz = c1 / vpw;
    __m256i          *cy = nh > 1 ? j->carry + r0 * j->cld + (i0 / 8 - j->cv0) : NULL;
    for (int r = 0; r < M; r++)
        for (int jv = 0; jv < NV; jv++)
            acc[r][jv] = h ? _mm256_loadu_si256(cy + r * j->cld + jv) : _mm256_setzero_si256();
    /* part h of nh of the block's word rows (avx2_range) */
    const int64_t ws = wa + h * AVX2_SPLIT_ROWS < wz ? wa + h * AVX2_SPLIT_ROWS : wz;
    const int64_t we = h + 1 < nh && ws + AVX2_SPLIT_ROWS < wz ? ws + AVX2_SPLIT_ROWS : wz;
    for (int64_t wr = ws; wr < we; wr++) {
        const uint32_t *row = qw + wr * ldq + i0;
        if (pf)
            for (int jv = 0; jv < NV; jv += 2)
                _mm_prefetch((const char *)(row + AVX2_PF(b) + 8 * jv), _MM_HINT_T0);
        const uint8_t *xw = j->xp + wr * vpw;
        __m256i        xb[AVX2_M][32 / 4]; /* a word row's slices, broadcast */
        for (int r = 0; r < M; r++)
            for (int s = 0; s < P; s++) {
                int32_t xv;
                memcpy(&xv, xw + (r0 + r) * j->kp + s * 4, 4);
                xb[r][s] = _mm256_set1_epi32(xv);
            }
        for (int jv = 0; jv < NV; jv++) {
            const __m256i wv = _mm256_loadu_si256((const void *)(row + 8 * jv));
            if (b == 8) { /* P = 1: code - 128 by the sign trick */
                const __m256i sv = _mm256_xor_si256(wv, bmask);
                const __m256i av = _mm256_abs_epi8(sv);
                for (int r = 0; r < M; r++)
                    acc[r][jv] = _mm256_add_epi32(
                        acc[r][jv],
                        _mm256_madd_epi16(_mm256_maddubs_epi16(av, _mm256_sign_epi8(xb[r][0], sv)),
                                          ones));
            } else {
                __m256i q[32 / 4];
                for (int s = 0; s < P; s++)
                    q[s] = _mm256_and_si256(_mm256_srli_epi32(wv, (int)(s * b)), bmask);
                for (int r = 0; r < M; r++) {
                    __m256i p = _mm256_maddubs_epi16(q[0], xb[r][0]);
                    for (int s = 1; s < P; s++)
                        p = _mm256_add_epi16(p, _mm256_maddubs_epi16(q[s], xb[r][s]));
                    acc[r][jv] = _mm256_add_epi32(acc[r][jv], _mm256_madd_epi16(p, ones));
                }
            }
        }
    }
    if (h + 1 < nh) {
        for (int r = 0; r < M; r++)
            for (int jv = 0; jv < NV; jv++)
                _mm256_storeu_si256(cy + r * j->cld + jv, acc[r][jv]);
        return;
    }
    avx2_flush(j, kb, i0, r0, M, NV, acc, zshift);
}

/* a 3-bit unit of 8 columns at p: the views of words 0|1 and 1|2, each as the columns' low
 * (unpacklo) and high (unpackhi) halves */
AVX2_INLINE void avx2_views3(const uint32_t *p, int64_t ldq, __m256i view[2][2]) {
    const __m256i a  = _mm256_loadu_si256((const void *)p);
    const __m256i bw = _mm256_loadu_si256((const void *)(p + ldq));
    const __m256i cw = _mm256_loadu_si256((const void *)(p + 2 * ldq));
    view[0][0]       = _mm256_unpacklo_epi32(a, bw);
    view[0][1]       = _mm256_unpackhi_epi32(a, bw);
    view[1][0]       = _mm256_unpacklo_epi32(bw, cw);
    view[1][1]       = _mm256_unpackhi_epi32(bw, cw);
}

/* the codes of channels 4t .. 4t + 3 of the unit, a byte each, a dword per column in order */
AVX2_INLINE __m256i avx2_dec3(const avx2_job *j, __m256i view[2][2], int t) {
    const __m256i ctl = _mm256_loadu_si256((const void *)j->ctl3[t]);
    const __m256i mul = _mm256_loadu_si256((const void *)j->mul3[t]);
    const __m256i m7  = _mm256_set1_epi16(7);
    const __m256i lo =
        _mm256_and_si256(_mm256_mulhi_epu16(_mm256_shuffle_epi8(view[t >> 2][0], ctl), mul), m7);
    const __m256i hi =
        _mm256_and_si256(_mm256_mulhi_epu16(_mm256_shuffle_epi8(view[t >> 2][1], ctl), mul), m7);
    return _mm256_packus_epi16(lo, hi);
}

/* acc[r][jv] += the int8 products of vector jv's unit u at p, r < M */
AVX2_INLINE void avx2_unit3(const avx2_job *j, const uint32_t *p, int64_t u, int64_t r0,
                            const int M, int jv, __m256i acc[AVX2_M][AVX2_NV_MAX]) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i       view[2][2], s[AVX2_M];
    avx2_views3(p, j->ldq, view);
    for (int t = 0; t < 8; t++) {
        const __m256i q = avx2_dec3(j, view, t);
        for (int r = 0; r < M; r++) {
            int32_t xv;
            memcpy(&xv, j->xp + (r0 + r) * j->kp + u * 32 + 4 * t, 4);
            const __m256i pr = _mm256_maddubs_epi16(q, _mm256_set1_epi32(xv));
            s[r]             = t ? _mm256_add_epi16(s[r], pr) : pr;
        }
    }
    for (int r = 0; r < M; r++)
        acc[r][jv] = _mm256_add_epi32(acc[r][jv], _mm256_madd_epi16(s[r], ones));
}

/* 3-bit: a unit of 32 channels is 3 word rows, 96 bits a column, channel i at bit 3i. No shift
 * and byte mask picks more than two of its fields at once, so they are decoded in 16-bit lanes:
 * the views of words 0|1 and 1|2 (one qword a column, as the VBMI kernel's; unpacklo gives
 * columns 0, 1, 4, 5, unpackhi 2, 3, 6, 7) hold channels 0-15 and 16-31 whole. Per 4 channels
 * a vpshufb puts each one's byte pair into a 16-bit lane (4 lanes a column), vpmulhuw by
 * 2^(16 - o) shifts each lane right by its field's own offset o (AVX2 has no per-lane 16-bit
 * shift), an AND keeps the field, and vpackuswb of the two halves gives each column's dword its
 * 4 codes in channel order: the int8 activation layout of 3-bit, one broadcast dword per 4
 * channels. vpmullw to the top bits and a shift down, as this began, put 5 of the 7 operations
 * per 32 codes on the two pipes Zen 3 shuffles and shifts on (its multiplies and ANDs go
 * elsewhere): 4096 x 4096, 1 thread, x and W in cache, 1 / 16 / 64 rows 0.94 / 5.6 / 17.8 ms ->
 * 0.93 / 5.2 / 17.3. Products as the 2/4-bit int8 path: a unit's 8 pairs sum in int16 (at
 * most 8 * 2 * 7 * 127 = 14224). */
AVX2_INLINE void avx2_tile3(const avx2_job *j, int64_t kb, int64_t i0, int64_t r0, const int M,
                            const int NV) {
    const int64_t   k = j->w->k, c0 = kb * j->ab, c1 = c0 + j->ab < k ? c0 + j->ab : k;
    const uint32_t *qw  = j->qw - j->qcol0;
    const int64_t   ldq = j->ldq;
    __m256i         acc[AVX2_M][AVX2_NV_MAX];
    for (int r = 0; r < M; r++)
        for (int jv = 0; jv < NV; jv++)
            acc[r][jv] = _mm256_setzero_si256();
    /* no software prefetch: the decode, not the memory, bounds it (at one row, 4096 x 4096,
     * 1.30 ms with the 2/4/8-bit kernels' prefetch, 1.20 without) */
    /* At one and two rows every vector of the tile reads a unit's lines in turn, so each line
     * is used whole as it arrives: a block's 12 word rows n words apart alias in L1 where n is a
     * multiple of 1024, and a vector at a time read each line twice (4096 x 11008, 1 thread,
     * from memory: 2.50 -> 2.29 ms; 4096 x 4096 0.93 -> 0.86). At 3-4 rows the accumulators of
     * all vectors would not fit the registers. */
    if (M <= 2) {
        for (int64_t u = c0 / 32; u < c1 / 32; u++)
            for (int jv = 0; jv < NV; jv++)
                avx2_unit3(j, qw + 3 * u * ldq + i0 + 8 * jv, u, r0, M, jv, acc);
    } else {
        for (int jv = 0; jv < NV; jv++) /* one vector at a time: M * 2 accumulators live */
            for (int64_t u = c0 / 32; u < c1 / 32; u++)
                avx2_unit3(j, qw + 3 * u * ldq + i0 + 8 * jv, u, r0, M, jv, acc);
    }
    avx2_flush(j, kb, i0, r0, M, NV, acc, 0.f);
}

/* From AVX2_X3_M rows the 3-bit codes of a column block are decoded once, into GPTQ's 4-bit
 * words (channel c of a word at nibble c): dst [k / 8, 8 nvv] for vectors [v, v + nvv), which
 * the 4-bit tile then runs on (x in the 4-bit layout; the zero points stay the 3-bit ones).
 * Per 8 channels: each code byte pair as c + 16 c' (vpmaddubsw), the odd half's shifted into
 * the high bytes, and the bytes of each dword put in order. */
AVX2_INLINE void avx2_3to4(const avx2_job *j, int64_t v, int64_t nvv, uint32_t *dst) {
    const __m256i k16 = _mm256_set1_epi16(0x1001);
    const __m256i ord = _mm256_setr_epi8(0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15, 0, 2,
                                         1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15);
    const int64_t ldq = j->ldq;
    for (int64_t u = 0; u < j->w->k / 32; u++)
        for (int64_t jv = 0; jv < nvv; jv++) {
            __m256i view[2][2];
            avx2_views3(j->qw - j->qcol0 + 3 * u * ldq + 8 * (v + jv), ldq, view);
            for (int t = 0; t < 4; t++) {
                const __m256i e = _mm256_maddubs_epi16(avx2_dec3(j, view, 2 * t), k16);
                const __m256i o = _mm256_maddubs_epi16(avx2_dec3(j, view, 2 * t + 1), k16);
                const __m256i wv =
                    _mm256_shuffle_epi8(_mm256_or_si256(e, _mm256_slli_epi16(o, 8)), ord);
                _mm256_storeu_si256((void *)(dst + (4 * u + t) * 8 * nvv + 8 * jv), wv);
            }
        }
}

/* avx2_tile3's operands for channels 4t .. 4t + 3 (view t / 4, at bit 3 c - 32 (t / 4) of a
 * column's qword): per 16-bit lane the byte pair holding the field, and 2^(16 - its offset in
 * that pair); 0x80 zeroes a byte past the qword (only channel 31's, whose field is in byte 7)
 * or before it (channel 0's, which starts the qword: a field on a byte boundary takes the byte
 * below as its pair's low one, so that the offset is never 0, whose factor 2^16 is no uint16) */
static void avx2_tile3_ops(avx2_job *j) {
    for (int t = 0; t < 8; t++)
        for (int l = 0; l < 8; l++) { /* lane l of a 128-bit half: qword l / 4, channel l % 4 */
            const int p = 3 * (4 * t + l % 4) - 32 * (t / 4), q = p / 8, base = 8 * (l / 4);
            const int lowq = p - 8 * q == 0 ? q - 1 : q, o = p - 8 * lowq;
            for (int h = 0; h < 2; h++) {
                j->ctl3[t][16 * h + 2 * l]     = (uint8_t)(lowq < 0 ? 0x80 : base + lowq);
                j->ctl3[t][16 * h + 2 * l + 1] = (uint8_t)(lowq + 1 < 8 ? base + lowq + 1 : 0x80);
                j->mul3[t][8 * h + l]          = (uint16_t)(1u << (16 - o)); /* 1 <= o <= 8 */
            }
        }
}

#define AVX2_NV(M) ((M) == 1 ? 4 : 2) /* vectors per tile for M rows (M * NV accumulators) */

/* tile of rows r0 .. r0 + mm - 1 (mm <= AVX2_M) at vector v, nv vectors: the range's whole
 * tile (AVX2_NV of its row count), or one */
AVX2_INLINE void avx2_tile_m(const avx2_job *j, int64_t kb, int64_t v, int64_t r0, int64_t mm,
                             int64_t nv, const int b, int64_t h, int64_t nh) {
#define AVX2_TILE(MM, NVV)                                                                         \
    do {                                                                                           \
        if (b == 3)                                                                                \
            avx2_tile3(j, kb, v * 8, r0, MM, NVV);                                                 \
        else                                                                                       \
            avx2_tile(j, kb, v * 8, r0, b, MM, NVV, h, nh);                                        \
    } while (0)
#define AVX2_CASE(MM)                                                                              \
    case MM:                                                                                       \
        if (nv == 1)                                                                               \
            AVX2_TILE(MM, 1);                                                                      \
        else if (MM == 1 && nv == AVX2_NV(1))                                                      \
            AVX2_TILE(MM, AVX2_NV(1));                                                             \
        else                                                                                       \
            AVX2_TILE(MM, AVX2_NV(AVX2_M));                                                        \
        break;
    switch (mm) {
        AVX2_CASE(1)
        AVX2_CASE(2)
        AVX2_CASE(3)
    default:
        AVX2_CASE(4)
    }
#undef AVX2_CASE
#undef AVX2_TILE
}

/* the tile of row chunk r0 (of m rows) */
AVX2_INLINE void avx2_tile_b(const avx2_job *j, int64_t kb, int64_t v, int64_t r0, int64_t m,
                             int64_t nv, const int b, int64_t h, int64_t nh) {
    avx2_tile_m(j, kb, v, r0, m - r0 < AVX2_M ? m - r0 : AVX2_M, nv, b, h, nh);
}

/* One thread's 8-column vectors [v0, v1): whole tiles, then single vectors. */
AVX2_INLINE void avx2_range(const avx2_job *j, int64_t v0, int64_t v1, const int b) {
    const int64_t m  = j->m;
    const int     x3 = b == 3 && m >= AVX2_X3_M; /* see avx2_3to4 */
    const int64_t rpb = j->ab * b / 32;           /* word rows a block */
    /* Words read in place: blocks outer, every tile of the thread inside, row chunks
     * innermost, so a block's words stay in L1 for every chunk and a block's word rows in the
     * TLB for every tile (tiles outer streamed each tile down all of k: 4096 x 11008, 1 thread,
     * 8 rows: 8-bit 11.7-11.9 -> 8.8-9.0 ms, 4-bit 7.1-7.2 -> 6.1-6.2). */
    if (m < AVX2_COPY_M && !x3) {
        const int64_t nv = AVX2_NV(m < AVX2_M ? m : AVX2_M);
        avx2_job      jc = *j;
        int64_t       nh = 1;
        if (m <= 2 && b != 3 && rpb > 16) { /* see AVX2_SPLIT_ROWS */
            jc.cv0   = v0;
            jc.cld   = v1 - v0;
            jc.carry = aligned_alloc(32, (size_t)(m * jc.cld) * sizeof(__m256i));
            nh       = jc.carry ? (rpb + AVX2_SPLIT_ROWS - 1) / AVX2_SPLIT_ROWS : 1;
        }
        for (int64_t kb = 0; kb < j->nkb; kb++)
            for (int64_t h = 0; h < nh; h++) {
                int64_t v = v0;
                for (; v + nv <= v1; v += nv)
                    for (int64_t r0 = 0; r0 < m; r0 += AVX2_M)
                        avx2_tile_b(&jc, kb, v, r0, m, nv, b, h, nh);
                for (; v < v1; v++)
                    for (int64_t r0 = 0; r0 < m; r0 += AVX2_M)
                        avx2_tile_b(&jc, kb, v, r0, m, 1, b, h, nh);
            }
        free(jc.carry);
        return;
    }
    const int64_t nv = AVX2_NV(AVX2_M), rows = j->w->k * b / 32;
    const int64_t kc = x3 || m >= AVX2_KC_M ? j->nkb : AVX2_KC_ROWS > rpb ? AVX2_KC_ROWS / rpb : 1;
    const int64_t crows = kc * rpb < rows ? kc * rpb : rows;
    uint32_t     *blk   = x3 ? j->x3buf : malloc((size_t)(crows * 8 * nv) * 4);
    for (int64_t kb0 = 0; kb0 < j->nkb; kb0 += kc) {
        const int64_t kb1 = kb0 + kc < j->nkb ? kb0 + kc : j->nkb;
        const int64_t wr0 = kb0 * rpb, wr1 = kb1 * rpb < rows ? kb1 * rpb : rows;
        for (int64_t v = v0; v < v1; v += nv) {
            const int one = v + nv > v1;
            avx2_job  jb  = *j;
            const int cp  = x3 || (blk && !one);
            if (cp) {
                const int64_t nc = one ? v1 - v : nv;
                if (x3)
                    avx2_3to4(j, v, nc, blk);
                else
                    for (int64_t wr = wr0; wr < wr1; wr++)
                        memcpy(blk + (wr - wr0) * 8 * nc, j->qw + wr * j->ldq + v * 8,
                               (size_t)(8 * nc) * 4);
                jb.qw    = blk;
                jb.ldq   = 8 * nc;
                jb.qcol0 = v * 8 + (x3 ? 0 : wr0 * jb.ldq); /* word row wr0 at blk */
            }
            /* row chunks outer on a copied block, each streaming its activations in order;
             * blocks outer were 2-5% slower at 16 and 64 rows */
            for (int64_t vv = v; vv < (one ? v1 : v + 1); vv++) {
                const int64_t nvv = one ? 1 : nv;
                for (int64_t r0 = 0; r0 < m; r0 += AVX2_M)
                    for (int64_t kb = kb0; kb < kb1; kb++) {
                        if (x3)
                            avx2_tile_b(&jb, kb, vv, r0, m, nvv, 4, 0, 1);
                        else if (cp)
                            avx2_tile_b(&jb, kb, vv, r0, m, nvv, b, 0, 1);
                        else
                            avx2_tile_b(j, kb, vv, r0, m, nvv, b, 0, 1);
                    }
            }
        }
    }
    if (!x3)
        free(blk);
}

typedef void (*avx2_fn)(const avx2_job *j, int64_t v0, int64_t v1);
#define AVX2_INST(B)                                                                               \
    AVX2_TARGET static void gptq_avx2_b##B(const avx2_job *j, int64_t v0, int64_t v1) {            \
        avx2_range(j, v0, v1, B);                                                                  \
    }
AVX2_INST(2)
AVX2_INST(3)
AVX2_INST(4)
AVX2_INST(8)
static const avx2_fn k_gptq_avx2[4] = {gptq_avx2_b2, gptq_avx2_b3, gptq_avx2_b4,
                                       gptq_avx2_b8}; /* bits 2, 3, 4, 8 */

lq_status lq_gemm_gptq_avx2(const lq_qlinear *w, const float *x, int64_t m, float *y, void *ws,
                            int xbits, int nthreads) {
    avx2_job j = {0};
    j.w        = w;
    j.ab       = lq_gptq_qx_block(w);
    if (!j.ab || !lq_gptq_avx2_ok(w, xbits))
        return LQ_ERR_UNSUPPORTED;
    j.nkb        = (w->k + j.ab - 1) / j.ab;
    j.kp         = lq_align_up(w->k, 64);
    j.m          = m;
    uint8_t *xp  = ws;
    float   *xsf = (float *)(void *)(xp + m * j.kp), *dx = xsf + m * j.nkb;
    j.xp               = xp;
    j.xsf              = xsf;
    j.dx               = dx;
    j.y                = y;
    j.qw               = (const uint32_t *)w->qweight;
    j.ldq              = w->n;
    const int     nt   = lq_cpu_threads(nthreads);
    const int64_t nvec = w->n / 8, nv = AVX2_NV(m < AVX2_M ? m : AVX2_M);
    const avx2_fn fn = k_gptq_avx2[w->bits == 8 ? 3 : w->bits - 2];
    /* 3-bit from AVX2_X3_M rows: the 4-bit tiles' activation layout, a buffer per thread */
    lq_qlinear    w4    = *w;
    const int64_t x3    = w->bits == 3 && m >= AVX2_X3_M ? w->k * AVX2_NV(AVX2_M) : 0;
    uint32_t     *x3buf = NULL;
    if (w->bits == 3)
        avx2_tile3_ops(&j);
    if (x3) {
        int64_t bytes;
        w4.bits = 4;
        if (!lq_mul_i64(x3, (int64_t)nt * 4, &bytes) || !(x3buf = malloc((size_t)bytes)))
            return LQ_ERR_NOMEM;
    }
#pragma omp parallel num_threads(nt)
    {
        const int64_t th = omp_get_thread_num(), tn = omp_get_num_threads();
#pragma omp for schedule(static)
        for (int64_t r = 0; r < m; r++)
            lq_gptq_qx_row(&w4, j.ab, x + r * w->k, xp + r * j.kp, xsf + r * j.nkb, dx + r * j.nkb);
        /* whole tiles per thread (the last may be short) */
        const int64_t ntile = (nvec + nv - 1) / nv, t0 = ntile * th / tn,
                      t1 = ntile * (th + 1) / tn;
        const int64_t v1 = t1 * nv < nvec ? t1 * nv : nvec;
        avx2_job      jt = j;
        jt.x3buf         = x3buf ? x3buf + th * x3 : NULL;
        if (t0 * nv < v1)
            fn(&jt, t0 * nv, v1);
    }
    free(x3buf);
    return LQ_OK;
}

/* ---------------------------------------------------------------------------------------
 * AWQ as stored, up to LQ_AWQ_AVX2_M rows: the semantics of lq_gemm_awq_qx_ref, the words
 * read in place (without this the float kernel ran: 4096 x 4096 at one row, 1 thread, 1.36 ms
 * against llama.cpp's Q4_K 0.85). Word (c, j) packs columns 8j + o of channel c in field
 * [0,4,1,5,2,6,3,7][o]. As the VNNI kernel (awq_vnni_quad): 4 consecutive channel rows
 * byte-interleaved (two unpack stages) put in 32-bit lane (q, i) byte i of word 4q + u of the
 * 4 channels, u = 0..3 the four results, against one 32-bit broadcast of their activations.
 * vpmaddubsw takes each nibble masked apart (raw bytes would saturate its int16 pairs): pairs of
 * at most 2 * 15 * 127, AWQ2_Q channel quads summed in int16 (at most 15240), then widened by
 * vpmaddwd against ones into int32 sums per (word, field), 512 bytes a block and row in a
 * thread's buffer. A block is 16 words (128 columns: the field-major scratch of lq_awq_np) read
 * as two halves of 8; the sums are transposed to field-major (a 4 x 4 dword transpose per
 * nibble) and scaled once per activation block (awq2_flush). As the VNNI kernel too, the
 * channels are cut into segments (lq_awq_nseg), each summed into its own scratch y and added in
 * order at the end (awq2_part): the same integer sums as the oracle, added in another order
 * (within 1e-10 NMSE of it, the same bits at every thread count). More rows run the GPTQ kernel
 * on a copy (awq2_repack_codes).
 * --------------------------------------------------------------------------------------- */
#define AWQ2_M  4 /* activation rows a pass over the words */
#define AWQ2_Q  4  /* channel quads a chunk: 16 rows, whose lines stay in L1 between passes */
#define AWQ2_PF 16 /* rows ahead (awq2_seq) */

typedef struct awq2_job {
    const lq_qlinear *w;
    int64_t           ab, nkb, kp, np;
    const uint8_t    *xp; /* [m, kp] int8 codes in channel order */
    const float      *xsf, *dx;
    int64_t           m, nseg; /* rows; segments of the channels (lq_awq_nseg) */
    float            *yf;      /* [nseg][m, np] field-major */
} awq2_job;

/* 16-word blocks of the columns */
static int64_t awq2_nblk(const lq_qlinear *w) {
    return (w->n / 8 + 15) / 16;
}

/* lanes l < valid of a half's 8 words */
AVX2_INLINE __m256i awq2_mask(int64_t valid) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(valid < 0   ? 0
                                                      : valid > 8 ? 8
                                                                  : valid)),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* yf (+)= block kb's sums s[r][f] (field f, lane l = word w0 + l, l < vw) of rows r < M:
 * t = fma(-z, sum(xq), acc), y = fma(t, s * dx, y); yf: a segment's scratch y, whose first
 * block (first) assigns. The 64 scales are put field-major by an 8 x 8 transpose, the zeros
 * come packed like the codes. */
AVX2_INLINE void awq2_flush(const awq2_job *j, float *yf, int64_t kb, int first, int64_t w0,
                            int64_t vw, int64_t ycol, const int M, __m256i s[][8]) {
    const lq_qlinear *w = j->w;
    const int64_t     n = w->n, nw = n / 8, g = kb * j->ab / w->group_size;
    const uint16_t   *sp = (const uint16_t *)w->scales + g * n + 8 * w0;
    __m256            sc[8];
    for (int l = 0; l < 8; l++)
        sc[l] = l < vw ? _mm256_cvtph_ps(_mm_loadu_si128((const void *)(sp + 8 * l)))
                       : _mm256_setzero_ps();
    lq_avx2_tr8(sc); /* sc[o]: column o of each word */
    const __m256i zw = _mm256_maskload_epi32((const int *)w->qzeros + g * nw + w0, awq2_mask(vw));
    for (int f = 0; f < 8; f++) {
        const __m256 zf = _mm256_cvtepi32_ps(
            _mm256_and_si256(_mm256_srli_epi32(zw, 4 * f), _mm256_set1_epi32(15)));
        for (int r = 0; r < M; r++) {
            const __m256 xs = _mm256_set1_ps(j->xsf[r * j->nkb + kb]);
            const __m256 d  = _mm256_set1_ps(j->dx[r * j->nkb + kb]);
            float       *yp = yf + r * j->np + ycol + 16 * f;
            const __m256 t  = _mm256_fnmadd_ps(zf, xs, _mm256_cvtepi32_ps(s[r][f]));
            const __m256 yv = first ? _mm256_setzero_ps() : _mm256_loadu_ps(yp);
            _mm256_storeu_ps(yp, _mm256_fmadd_ps(t, _mm256_mul_ps(sc[lq_awq_col_of(f)], d), yv));
        }
    }
}

/* One chunk of nq channel quads from c for the 16-word block at w0 into its sums
 * sum[(r * 2 + half) * 8 + 2u + nibble]. A pass takes H halves and NU of the 4 words u per
 * lane (M x H x NU x 2 int16 accumulators); FULL: all 16 words valid, else masked loads. */
AVX2_INLINE void awq2_chunk(const awq2_job *j, int64_t c, int nq, int64_t w0, int64_t vw,
                            __m256i *sum, const int M, const int H, const int NU, const int FULL) {
    const int64_t   nw = j->w->n / 8;
    const uint32_t *qw = (const uint32_t *)j->w->qweight + c * nw + w0;
    const __m256i   m4 = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
    for (int hs = 0; hs < 2 && 8 * hs < vw; hs += H) {
        __m256i lm[2];
        for (int hh = 0; hh < H; hh++)
            lm[hh] = awq2_mask(vw - 8 * (hs + hh));
        for (int u0 = 0; u0 < 4; u0 += NU) {
            __m256i acc[4][2][2][2]; /* [r][hh][uu][nibble] */
            for (int r = 0; r < M; r++)
                for (int hh = 0; hh < H; hh++)
                    for (int uu = 0; uu < NU; uu++)
                        acc[r][hh][uu][0] = acc[r][hh][uu][1] = _mm256_setzero_si256();
            for (int p = 0; p < nq; p++) {
                __m256i xb[4];
                for (int r = 0; r < M; r++) {
                    int32_t xv;
                    memcpy(&xv, j->xp + r * j->kp + c + 4 * p, 4);
                    xb[r] = _mm256_set1_epi32(xv);
                }
                for (int hh = 0; hh < H; hh++) {
                    const uint32_t *row = qw + 4 * p * nw + 8 * (hs + hh);
                    __m256i         wv[4];
                    if (u0 == 0 && hs + hh == 0) /* a line each (see awq2_seq) */
                        for (int t = 0; t < 4; t++)
                            _mm_prefetch((const char *)(row + (t + AWQ2_PF) * nw), _MM_HINT_T1);
                    for (int t = 0; t < 4; t++)
                        wv[t] = FULL ? _mm256_loadu_si256((const void *)(row + t * nw))
                                     : _mm256_maskload_epi32((const int *)(row + t * nw), lm[hh]);
                    /* bytes of words 4q + 2v, 4q + 2v + 1 of rows 0|1 and 2|3 */
                    const __m256i ab = u0 < 2 ? _mm256_unpacklo_epi8(wv[0], wv[1])
                                              : _mm256_unpackhi_epi8(wv[0], wv[1]);
                    const __m256i cd = u0 < 2 ? _mm256_unpacklo_epi8(wv[2], wv[3])
                                              : _mm256_unpackhi_epi8(wv[2], wv[3]);
                    for (int uu = 0; uu < NU; uu++) {
                        const __m256i v  = (u0 + uu) & 1 ? _mm256_unpackhi_epi16(ab, cd)
                                                         : _mm256_unpacklo_epi16(ab, cd);
                        const __m256i lo = _mm256_and_si256(v, m4);
                        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                        for (int r = 0; r < M; r++) {
                            acc[r][hh][uu][0] = _mm256_add_epi16(acc[r][hh][uu][0],
                                                                 _mm256_maddubs_epi16(lo, xb[r]));
                            acc[r][hh][uu][1] = _mm256_add_epi16(acc[r][hh][uu][1],
                                                                 _mm256_maddubs_epi16(hi, xb[r]));
                        }
                    }
                }
            }
            for (int r = 0; r < M; r++)
                for (int hh = 0; hh < H; hh++)
                    for (int uu = 0; uu < NU; uu++)
                        for (int e = 0; e < 2; e++) {
                            __m256i *sp = sum + (r * 2 + hs + hh) * 8 + 2 * (u0 + uu) + e;
                            *sp = _mm256_add_epi32(*sp, _mm256_madd_epi16(acc[r][hh][uu][e], ones));
                        }
        }
    }
}

/* 16-word blocks [b0, b1) of segment s, sums at sum [block][r][half][2u + nibble]: per
 * activation block, every chunk of channel rows across all of the blocks (each row read in
 * order along them, as the GPTQ kernel reads its word rows), then the flushes. Each line is
 * prefetched AWQ2_PF rows ahead into L2 (awq2_chunk). One row, 1 thread, three alternated
 * rounds (Zen 3): runs of 16 blocks (sums in 8 KiB of L1) without prefetch 4096 x 4096 1.0-1.4
 * ms, 11008 x 4096 2.2-4.7, 4096 x 11008 3.5-4.2; the whole range with it 0.83-0.87, 1.5-2.5,
 * 2.1-2.2; chunks of 8 quads (32 rows, the sums widened half as often) 1.0-1.2, 2.2-2.4,
 * 2.7-2.9. */
AVX2_INLINE void awq2_seq(const awq2_job *j, int64_t s, int64_t b0, int64_t b1, __m256i *sum,
                          const int M, const int H, const int NU) {
    const int64_t nw = j->w->n / 8, k = j->w->k, ab = j->ab, nb = b1 - b0;
    const int64_t kb0 = lq_awq_seg_kb(j->nkb, j->nseg, s),
                  kb1 = lq_awq_seg_kb(j->nkb, j->nseg, s + 1);
    float *yf         = j->yf + s * j->m * j->np;
    for (int64_t kb = kb0; kb < kb1; kb++) {
        const int64_t c0 = kb * ab, c1 = c0 + ab < k ? c0 + ab : k;
        for (int64_t e = 0; e < nb * M * 16; e++)
            sum[e] = _mm256_setzero_si256();
        for (int64_t c = c0; c < c1; c += 4 * AWQ2_Q) {
            const int nq = c1 - c < 4 * AWQ2_Q ? (int)(c1 - c) / 4 : AWQ2_Q;
            for (int64_t b = 0; b < nb; b++) {
                const int64_t w0 = (b0 + b) * 16, vw = nw - w0 < 16 ? nw - w0 : 16;
                if (vw == 16)
                    awq2_chunk(j, c, nq, w0, vw, sum + b * M * 16, M, H, NU, 1);
                else
                    awq2_chunk(j, c, nq, w0, vw, sum + b * M * 16, M, H, NU, 0);
            }
        }
        for (int64_t b = 0; b < nb; b++) {
            const int64_t w0 = (b0 + b) * 16, vw = nw - w0 < 16 ? nw - w0 : 16;
            for (int h = 0; h < 2 && 8 * h < vw; h++) {
                __m256i sr[4][8]; /* [r][field], lane l = word w0 + 8h + l */
                for (int r = 0; r < M; r++)
                    for (int e = 0; e < 2; e++) { /* 4 x 4 dword transpose per 128 bits */
                        const __m256i *q  = sum + b * M * 16 + (r * 2 + h) * 8 + e;
                        const __m256i  t0 = _mm256_unpacklo_epi32(q[0], q[2]);
                        const __m256i  t1 = _mm256_unpackhi_epi32(q[0], q[2]);
                        const __m256i  t2 = _mm256_unpacklo_epi32(q[4], q[6]);
                        const __m256i  t3 = _mm256_unpackhi_epi32(q[4], q[6]);
                        sr[r][0 + e]      = _mm256_unpacklo_epi64(t0, t2);
                        sr[r][2 + e]      = _mm256_unpackhi_epi64(t0, t2);
                        sr[r][4 + e]      = _mm256_unpacklo_epi64(t1, t3);
                        sr[r][6 + e]      = _mm256_unpackhi_epi64(t1, t3);
                    }
                awq2_flush(j, yf, kb, kb == kb0, w0 + 8 * h, vw - 8 * h, (b0 + b) * 128 + 8 * h, M,
                           sr);
            }
        }
    }
}

/* rows [r0, r0 + mc), mc <= AWQ2_M, of blocks [b0, b1) of segment s; a pass takes all 4 words
 * u and both halves at one row (8 int16 accumulators), fewer above */
AVX2_TARGET static void awq2_rows(const awq2_job *j, int64_t r0, int64_t mc, int64_t s, int64_t b0,
                                  int64_t b1, __m256i *sum) {
    awq2_job jr = *j;
    jr.xp += r0 * j->kp;
    jr.xsf += r0 * j->nkb;
    jr.dx += r0 * j->nkb;
    jr.yf += r0 * j->np;
    switch (mc) {
    case 1:
        awq2_seq(&jr, s, b0, b1, sum, 1, 2, 2);
        break;
    case 2:
        awq2_seq(&jr, s, b0, b1, sum, 2, 1, 2);
        break;
    case 3:
        awq2_seq(&jr, s, b0, b1, sum, 3, 1, 1);
        break;
    default:
        awq2_seq(&jr, s, b0, b1, sum, 4, 1, 1);
        break;
    }
}

/* Thread th of tn: an equal share of the work, segment-major, as the VNNI kernel's
 * (awq_vnni_part): a thread reads the word rows of the segments it has whole from end to end
 * and at most two segments in part (their columns split with a neighbour). Until 2026-12-06
 * every thread read half of every word row (the oracle's order, one segment): one process
 * alternating both per call (Zen 4 held to these kernels, LQ_CPU_KERNELS=avx2), segments took
 * 0.70-0.96x the time at one row on 2 threads (6 samples, the three shapes of
 * bench/kernels_vs_llamacpp.sh), 0.83-0.95x at 2-4 rows, 0.96-1.04x at 8; on 1 thread
 * 1.00-1.03x (their own cost). Runs of at most AWQ2_RB blocks (11008 columns: 86). */
#define AWQ2_RB 128
AVX2_TARGET static void awq2_part(const awq2_job *j, int64_t r0, int64_t mc, int64_t th, int64_t tn,
                                  __m256i *sum) {
    lq_awq_share sh;
    lq_awq_share_init(&sh, j->nkb, j->nseg, awq2_nblk(j->w), th, tn);
    for (int64_t s, c0, c1; lq_awq_share_next(&sh, &s, &c0, &c1);) {
        const int64_t nb = c1 - c0, runs = (nb + AWQ2_RB - 1) / AWQ2_RB,
                      rb = (nb + runs - 1) / runs;
        for (int64_t ba = c0; ba < c1; ba += rb)
            awq2_rows(j, r0, mc, s, ba, ba + rb < c1 ? ba + rb : c1, sum);
    }
}

/* More rows: word row wr of the codes in GPTQ's layout, field-major (lq_awq_gptq_build), 8
 * words at a time: an 8 x 8 nibble transpose of the 8 channel rows, three swap stages, after
 * which r[f] holds field f of the 8 channels as nibbles 0..7. Padding words are zero. */
AVX2_TARGET static void awq2_repack_codes(const lq_qlinear *w, int64_t wr, uint32_t *qg,
                                          int64_t np) {
    const int64_t   nw = w->n / 8;
    const uint32_t *qw = (const uint32_t *)w->qweight + wr * 8 * nw;
    for (int64_t j0 = 0; j0 < np / 8; j0 += 8) {
        const __m256i lm = awq2_mask(nw - j0);
        __m256i       r[8];
        for (int t = 0; t < 8; t++)
            r[t] = _mm256_maskload_epi32((const int *)(qw + t * nw + j0), lm);
        for (int sh = 4, st = 1; st < 8; sh *= 2, st *= 2) {
            const __m256i mk = _mm256_set1_epi32(sh == 4   ? 0x0F0F0F0F
                                                 : sh == 8 ? 0x00FF00FF
                                                           : 0x0000FFFF);
            for (int t = 0; t < 8; t++) {
                if (t & st)
                    continue;
                const __m256i d =
                    _mm256_and_si256(_mm256_xor_si256(_mm256_srli_epi32(r[t], sh), r[t + st]), mk);
                r[t + st] = _mm256_xor_si256(r[t + st], d);
                r[t]      = _mm256_xor_si256(r[t], _mm256_slli_epi32(d, sh));
            }
        }
        uint32_t *dst = qg + wr * np + j0 / 16 * 128 + j0 % 16;
        for (int f = 0; f < 8; f++)
            _mm256_storeu_si256((void *)(dst + 16 * f), r[f]);
    }
}

/* Up to LQ_AWQ_AVX2_M rows: lq_awq_seq_ws's (the int32 sums, 512 bytes a row and 16-word
 * block, are allocated per call: a run's for each thread). More: the GPTQ copy, the GPTQ
 * kernel's activations, y field-major. */
size_t lq_ws_awq_avx2(const lq_qlinear *w, int64_t m) {
    const int64_t ab = lq_awq_qx_block(w);
    if (!ab || m < 1)
        return 0;
    if (m > LQ_AWQ_AVX2_M)
        return lq_awq_gptq_ws(w, m);
    return lq_awq_seq_ws(w, m, lq_awq_nseg((w->k + ab - 1) / ab, ab));
}

lq_status lq_gemm_awq_avx2(const lq_qlinear *w, const float *x, int64_t m, float *y, void *ws,
                           int nthreads) {
    const int64_t ab = lq_awq_qx_block(w), k = w->k;
    if (!ab || m < 1)
        return LQ_ERR_UNSUPPORTED;
    if (m > LQ_AWQ_AVX2_M) {
        const int  nt = lq_cpu_threads(nthreads);
        lq_qlinear g;
        lq_awq_gptq_build(w, ws, &g, awq2_repack_codes, nt);
        float *yf = lq_awq_gptq_yf(w, m, ws);
        LQ_TRY(lq_gemm_gptq_avx2(&g, x, m, yf, (uint8_t *)ws + lq_awq_gptq_bytes(w), 8, nthreads));
        lq_awq_unpermute(yf, 1, g.n, m, w->n, y, nt);
        return LQ_OK;
    }
    awq2_job j   = {.w   = w,
                    .ab  = ab,
                    .nkb = (k + ab - 1) / ab,
                    .kp  = lq_align_up(k, 64),
                    .np  = lq_awq_np(w),
                    .m   = m};
    j.nseg       = lq_awq_nseg(j.nkb, ab);
    uint8_t *xp  = ws;
    float   *xsf = (float *)(void *)(xp + m * j.kp), *dx = xsf + m * j.nkb, *yf = dx + m * j.nkb;
    j.xp             = xp;
    j.xsf            = xsf;
    j.dx             = dx;
    j.yf             = yf;
    const int    nt  = lq_cpu_threads(nthreads);
    const size_t run = (size_t)AWQ2_RB * (size_t)(m < AWQ2_M ? m : AWQ2_M) * 512; /* a thread's */
    __m256i     *sum = aligned_alloc(64, run * (size_t)nt);
    if (!sum)
        return LQ_ERR_NOMEM;
#pragma omp parallel num_threads(nt)
    {
        const int64_t th = omp_get_thread_num(), tn = omp_get_num_threads();
#pragma omp for schedule(static)
        for (int64_t r = 0; r < m; r++)
            lq_qx_row(k, ab, x + r * k, xp + r * j.kp, xsf + r * j.nkb, dx + r * j.nkb);
        for (int64_t r0 = 0; r0 < m; r0 += AWQ2_M)
            awq2_part(&j, r0, m - r0 < AWQ2_M ? m - r0 : AWQ2_M, th, tn,
                      (__m256i *)(void *)((uint8_t *)sum + run * (size_t)th));
    }
    free(sum);
    lq_awq_unpermute(yf, j.nseg, j.np, m, w->n, y, nt);
    return LQ_OK;
}

/* ---------------------------------------------------------------------------------------
 * Dense fp16 / bf16 weights below LQ_GEMM256_M rows (as lq_cpu_avx512.c's kernel, 8 wide): W
 * rows converted as they are read (vcvtph2ps; bf16 is the top half of a float32), tiles of W
 * rows x rows of x (accumulators along k, summed at the end); k's tail scalar. From there
 * lq_gemm256 (cpu/lq_cpu_gemm256.c); lq_dense16_to_f32_avx2 converts the tiles of the sgemm
 * path elsewhere.
 * --------------------------------------------------------------------------------------- */
int lq_dense16_avx2_ok(const lq_qlinear *w, int64_t m) {
    return m >= 1 && m < LQ_GEMM256_M &&
           (w->dense_dtype == LQ_DENSE_F16 || w->dense_dtype == LQ_DENSE_BF16) && lq_cpu_avx2i();
}

AVX2_INLINE float hsum8(__m256 v) {
    const __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 b = _mm_add_ps(a, _mm_movehl_ps(a, a));
    return _mm_cvtss_f32(_mm_add_ss(b, _mm_movehdup_ps(b)));
}

/* y[r, i0 + j] = the sum over k channels, r < mr (<= MR), j < nr (<= NR); a short tile repeats
 * its last row and drops it */
AVX2_INLINE void d16_tile8(const uint16_t *W, int64_t k, const float *x, int64_t i0, int nr, int mr,
                           int bf, float *y, int64_t ldy, const int NR, const int MR) {
    const uint16_t *wr[6];
    const float    *xr[4];
    for (int j = 0; j < NR; j++)
        wr[j] = W + (i0 + (j < nr ? j : nr - 1)) * k;
    for (int r = 0; r < MR; r++)
        xr[r] = x + (r < mr ? r : mr - 1) * k;
    __m256 acc[4][6];
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++)
            acc[r][j] = _mm256_setzero_ps();
    int64_t c = 0;
    for (; c + 8 <= k; c += 8) {
        if (MR == 3 || NR == 6) { /* 4 x 3, 6 x 2: x first, then one W row at a time */
            __m256 xv[4];
            for (int r = 0; r < MR; r++)
                xv[r] = _mm256_loadu_ps(xr[r] + c);
            for (int j = 0; j < NR; j++) {
                const __m256 wv = lq_avx2_half8(wr[j] + c, bf);
                for (int r = 0; r < MR; r++)
                    acc[r][j] = _mm256_fmadd_ps(xv[r], wv, acc[r][j]);
            }
            continue;
        }
        __m256 wv[6];
        for (int j = 0; j < NR; j++)
            wv[j] = lq_avx2_half8(wr[j] + c, bf);
        for (int r = 0; r < MR; r++) {
            if (r >= mr)
                break;
            const __m256 xv = _mm256_loadu_ps(xr[r] + c);
            for (int j = 0; j < NR; j++)
                acc[r][j] = _mm256_fmadd_ps(xv, wv[j], acc[r][j]);
        }
    }
    for (int r = 0; r < mr; r++)
        for (int j = 0; j < nr; j++) {
            float v = hsum8(acc[r][j]);
            for (int64_t t = c; t < k; t++)
                v += xr[r][t] * lq_avx2_half1(wr[j][t], bf);
            y[r * ldy + i0 + j] = v;
        }
}

/* W rows [a, b) against every row of x over all of k. Tiles of 4 W rows x 2 x rows up to 2 rows
 * (memory-bound: more rows of W in flight); 3 x 4 for bf16 (two operations per conversion) and
 * at 4 and 8 rows, which they divide; from 9 rows 6 x 2, else 4 x 3 (x's vectors loaded first,
 * then each W row converted and used at once: 12 accumulators; 4 x 3 was 13-15% faster than 3 x
 * 4 at 16 and 64 rows). 6 x 2 converts twice as often as 4 x 3 but reads x, which comes from L2
 * at these sizes, a third less often: 4096 x 4096, 1 thread, best of 3-5 runs alternated, 8.2-8.7
 * -> 7.6-7.7 ms at 16 rows, 29.0 -> 26.5 at 64; 11008 x 4096 and 4096 x 11008 9-11% less at 16
 * rows, 5-6% at 64; 12 and 256 rows unchanged. Converting each tile's W rows once into a float
 * buffer that every row then read (k blocks of 1024 or 4096 channels) was 20-50% slower: loads,
 * not the conversions, bound this kernel. No k blocks, unlike the AVX-512 kernel: on Zen 3
 * (512 KiB L2) the sums and stores they add cost more than the L2 misses they save (4096 x 4096, 1
 * thread, m = 64: 29.0 ms with x blocks of 512 KiB, 25.5 ms without; with the 6 x 2 tiles and
 * 256 KiB blocks where x exceeds 1 MiB, 4096 x 11008 at 64 rows 72 -> 93 ms). */
AVX2_INLINE void d16_cols8(const lq_qlinear *w, const float *x, int64_t m, float *y, int64_t a,
                           int64_t b, const int bf) {
    const uint16_t *W = w->dense;
    const int64_t   k = w->k, n = w->n;
    const int       t34 = bf || (m % 4 == 0 && m <= 8);
    const int       t62 = !t34 && m >= 9;
    const int NR = m <= 2 ? 4 : t34 ? 3 : t62 ? 6 : 4, MR = m <= 2 ? 2 : t34 ? 4 : t62 ? 2 : 3;
    for (int64_t i = a; i < b; i += NR) {
        const int nr = b - i < NR ? (int)(b - i) : NR;
        for (int64_t r = 0; r < m; r += MR) {
            const int mr = m - r < MR ? (int)(m - r) : MR;
            if (m <= 2)
                d16_tile8(W, k, x + r * k, i, nr, mr, bf, y + r * n, n, 4, 2);
            else if (t34)
                d16_tile8(W, k, x + r * k, i, nr, mr, bf, y + r * n, n, 3, 4);
            else if (t62)
                d16_tile8(W, k, x + r * k, i, nr, mr, bf, y + r * n, n, 6, 2);
            else
                d16_tile8(W, k, x + r * k, i, nr, mr, bf, y + r * n, n, 4, 3);
        }
    }
}
AVX2_TARGET static void d16_cols8_f16(const lq_qlinear *w, const float *x, int64_t m, float *y,
                                      int64_t a, int64_t b) {
    d16_cols8(w, x, m, y, a, b, 0);
}
AVX2_TARGET static void d16_cols8_bf16(const lq_qlinear *w, const float *x, int64_t m, float *y,
                                       int64_t a, int64_t b) {
    d16_cols8(w, x, m, y, a, b, 1);
}

lq_status lq_gemm_dense16_avx2(const lq_qlinear *w, const float *x, int64_t m, float *y,
                               int nthreads) {
    if (!lq_dense16_avx2_ok(w, m))
        return LQ_ERR_INVALID_ARG;
    const int     bf   = w->dense_dtype == LQ_DENSE_BF16;
    const int64_t nblk = (w->n + 11) / 12; /* whole tiles of both shapes per thread */
#pragma omp parallel num_threads(nthreads)
    {
        const int64_t t = omp_get_thread_num(), T = omp_get_num_threads();
        const int64_t a = nblk * t / T * 12, b0 = nblk * (t + 1) / T * 12,
                      b = b0 < w->n ? b0 : w->n;
        if (a < b)
            (bf ? d16_cols8_bf16 : d16_cols8_f16)(w, x, m, y, a, b);
    }
    return LQ_OK;
}

AVX2_TARGET void lq_dense16_to_f32_avx2(const uint16_t *h, int bf, int64_t cnt, float *out) {
    int64_t e = 0;
    for (; e + 8 <= cnt; e += 8)
        _mm256_storeu_ps(out + e, lq_avx2_half8(h + e, bf));
    for (; e < cnt; e++)
        out[e] = lq_avx2_half1(h[e], bf);
}

/* ---------------------------------------------------------------------------------------
 * LLM.int8's integer part, acc[r, i] = sum_c qx[r, c] * cb[i, c] exactly (as
 * lq_int8_dots_vnni). vpmaddubsw needs one unsigned operand: |qx| against cb carrying qx's
 * sign (vpsignb), so every pair is at most 2 * 127 * 127 and never saturates; vpmaddwd against
 * ones widens. Tiles of 4 cb rows x up to 2 activation rows; k's tail scalar.
 * --------------------------------------------------------------------------------------- */
AVX2_INLINE int32_t hsum8i(__m256i v) {
    const __m128i a = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    const __m128i b = _mm_add_epi32(a, _mm_shuffle_epi32(a, 0x4E));
    return _mm_cvtsi128_si32(_mm_add_epi32(b, _mm_shuffle_epi32(b, 0xB1)));
}

AVX2_INLINE void i8_tile(const int8_t *cb, int64_t k, const int8_t *qx, int64_t n, int64_t i0,
                         int nr, int64_t r0, const int MR, int32_t *acc) {
    const int8_t *wr[4], *xr[2];
    for (int j = 0; j < 4; j++)
        wr[j] = cb + (i0 + (j < nr ? j : nr - 1)) * k;
    for (int r = 0; r < MR; r++)
        xr[r] = qx + (r0 + r) * k;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i       a[2][4];
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < 4; j++)
            a[r][j] = _mm256_setzero_si256();
    int64_t c = 0;
    for (; c + 32 <= k; c += 32) {
        __m256i wv[4];
        for (int j = 0; j < 4; j++)
            wv[j] = _mm256_loadu_si256((const void *)(wr[j] + c));
        for (int r = 0; r < MR; r++) {
            const __m256i xv = _mm256_loadu_si256((const void *)(xr[r] + c));
            const __m256i ax = _mm256_abs_epi8(xv);
            for (int j = 0; j < 4; j++) {
                const __m256i p = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(wv[j], xv));
                a[r][j]         = _mm256_add_epi32(a[r][j], _mm256_madd_epi16(p, ones));
            }
        }
    }
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < nr; j++) {
            int32_t v = hsum8i(a[r][j]);
            for (int64_t t = c; t < k; t++)
                v += (int32_t)xr[r][t] * (int32_t)wr[j][t];
            acc[(r0 + r) * n + i0 + j] = v;
        }
}

AVX2_TARGET static void i8_range(const int8_t *cb, int64_t n, int64_t k, const int8_t *qx,
                                 int64_t m, int64_t i0, int64_t i1, int32_t *acc) {
    for (int64_t i = i0; i < i1; i += 4) {
        const int nr = i1 - i < 4 ? (int)(i1 - i) : 4;
        int64_t   r  = 0;
        for (; r + 2 <= m; r += 2)
            i8_tile(cb, k, qx, n, i, nr, r, 2, acc);
        if (r < m)
            i8_tile(cb, k, qx, n, i, nr, r, 1, acc);
    }
}

lq_status lq_int8_dots_avx2(const int8_t *cb, int64_t n, int64_t k, const int8_t *qx, int64_t m,
                            int32_t *acc, int nthreads) {
    if (!lq_cpu_avx2i())
        return LQ_ERR_UNSUPPORTED;
    const int nt = lq_cpu_threads(nthreads);
    lq_split  sp; /* 4-row blocks, 16 at a time taken from another thread's part */
    lq_split_init(&sp, nt, (n + 3) / 4, 16);
#pragma omp parallel num_threads(nt)
    {
        lq_seg_it it = lq_split_iter(&sp, omp_get_thread_num(), omp_get_num_threads());
        for (int64_t i0, i1; lq_seg_next_rows(&it, 4, n, &i0, &i1);)
            i8_range(cb, n, k, qx, m, i0, i1, acc);
    }
    return LQ_OK;
}

/* ---------------------------------------------------------------------------------------
 * NF4 on integer activations: the semantics of lq_gemm_nf4_qx_ref (int8 activations per block
 * of ab channels, the code book scaled to int8 tq), bit for bit. A column's codes lie along k:
 * 32 code bytes are 64 channels, their high nibbles the even channels, the low ones the odd, so
 * the activations are stored split the same way (per 64 channels: 32 even, then 32 odd) and
 * vpshufb against tq decodes a nibble vector straight into lanes that meet its activations.
 * Products by the sign trick (|x|, stored beside x, against tq carrying x's sign: pairs of at
 * most 2 x 127 x 127; |tq| against x carrying tq's sign would take one more instruction per
 * 32 codes), widened by vpmaddwd; a block's integer sum is exact in any order. Below NF4G_M
 * rows, per tile of 8 columns and block, the codes are decoded once for every row, each row's 8
 * column sums stay in registers and are reduced by one hadd tree, so the float epilogue (t =
 * acc, y = fma(t, absmax * ts * dx, y) block by block) runs 8 columns wide. From NF4G_M rows,
 * nf4g_range below.
 * --------------------------------------------------------------------------------------- */
int lq_nf4_avx2_ok(const lq_qlinear *w) {
    return w->n % 8 == 0 && lq_nf4_qx_block(w) > 0;
}

typedef struct nf4x_job {
    const lq_qlinear *w;
    int64_t           ab, nkb, m, kp;
    const int8_t     *xp; /* [m, kp]: per 64 channels the 32 even, then the 32 odd */
    const int8_t     *xa; /* [m, kp]: their magnitudes */
    const float      *dx; /* [m, nkb] */
    float             ts;
    __m128i           lut; /* tq */
    float            *y;
} nf4x_job;

/* the last step of hsum8x8: hadd(hadd(v0, v1), hadd(v2, v3)) and the same of v4..v7 */
AVX2_INLINE __m256i hsum8x8_fold(__m256i a, __m256i b) {
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20),
                            _mm256_permute2x128_si256(a, b, 0x31));
}

/* 8 vectors of 8 int32 lanes -> one vector of their 8 sums, in order */
AVX2_INLINE __m256i hsum8x8(const __m256i v[8]) {
    const __m256i a =
        _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    const __m256i b =
        _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
    return hsum8x8_fold(a, b);
}

/* 32 code bytes (64 channels of one column) -> d: tq of the high and low nibbles */
AVX2_INLINE void nf4x_dec(__m256i lut, __m256i b, __m256i d[2]) {
    const __m256i m0f = _mm256_set1_epi8(0x0F);
    d[0]              = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(b, 4), m0f));
    d[1]              = _mm256_shuffle_epi8(lut, _mm256_and_si256(b, m0f));
}

/* Row r's 64 activations from channel c (c % 64 == 0): even, odd, and their magnitudes */
AVX2_INLINE void nf4x_xv(const nf4x_job *j, int64_t r, int64_t c, __m256i xv[4]) {
    const int8_t *xr = j->xp + r * j->kp + c, *ar = j->xa + r * j->kp + c;
    xv[0]            = _mm256_loadu_si256((const void *)xr);
    xv[1]            = _mm256_loadu_si256((const void *)(xr + 32));
    xv[2]            = _mm256_loadu_si256((const void *)ar);
    xv[3]            = _mm256_loadu_si256((const void *)(ar + 32));
}

/* Decoded codes against one row's even / odd activations x[0..1] and their magnitudes
 * x[2..3]: the int32 partial sums of the 64 products (the sign trick; see above). */
AVX2_INLINE __m256i nf4x_dot(const __m256i d[2], const __m256i x[4]) {
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i ph   = _mm256_maddubs_epi16(x[2], _mm256_sign_epi8(d[0], x[0]));
    const __m256i pl   = _mm256_maddubs_epi16(x[3], _mm256_sign_epi8(d[1], x[1]));
    return _mm256_add_epi32(_mm256_madd_epi16(ph, ones), _mm256_madd_epi16(pl, ones));
}

/* yp[0 .. 8) (row r's outputs) += (t: the 8 column sums) * sv * dx of row r, block kb */
AVX2_INLINE void nf4x_out(const nf4x_job *j, __m256i sum, __m256 sv, int64_t r, int64_t kb,
                          float *yp) {
    const __m256 t  = _mm256_cvtepi32_ps(sum);
    const __m256 d  = _mm256_mul_ps(sv, _mm256_set1_ps(j->dx[r * j->nkb + kb]));
    const __m256 yv = kb ? _mm256_loadu_ps(yp) : _mm256_setzero_ps();
    _mm256_storeu_ps(yp, _mm256_fmadd_ps(t, d, yv));
}

/* One row, a block of 64 channels (nsc == 1, bitsandbytes' default block size): the column sums
 * are folded pair by pair as they come, so no more than two of them are live (8 accumulators
 * beside x, |x| and the constants spilled). The codes are decoded here (qc) or were (dec). */
AVX2_INLINE __m256i nf4x_row64(__m256i lut, const uint8_t *qc[8], __m256i (*dec)[2],
                               const __m256i xv[4]) {
    __m256i h[4], a[2];
    for (int p = 0; p < 4; p++) {
        __m256i d[2][2];
        for (int e = 0; e < 2; e++)
            if (qc)
                nf4x_dec(lut, _mm256_loadu_si256((const void *)qc[2 * p + e]), d[e]);
            else
                d[e][0] = dec[2 * p + e][0], d[e][1] = dec[2 * p + e][1];
        h[p] = _mm256_hadd_epi32(nf4x_dot(d[0], xv), nf4x_dot(d[1], xv));
        if (p & 1)
            a[p / 2] = _mm256_hadd_epi32(h[p - 1], h[p]);
    }
    return hsum8x8_fold(a[0], a[1]);
}

#define NF4X_FUSED_M 1 /* up to this many rows the codes are decoded per row, in registers */

/* Columns [i0, i0 + 8), block kb, every row; sv: the 8 columns' absmax * ts. Up to
 * NF4X_FUSED_M rows: each column's codes are decoded where they are multiplied. More rows: the
 * block's codes are decoded once (per 64 channels and column: tq of the high and low nibbles, 2
 * KiB at most), then per row 8 accumulators in registers, reduced by one hadd tree. */
AVX2_INLINE void nf4x_rows(const nf4x_job *j, int64_t i0, int64_t kb, __m256 sv,
                           __m256i (*dec)[8][2], const int fused, float *yt) {
    const int64_t  k = j->w->k, c0 = kb * j->ab, nsc = j->ab / 64;
    const __m256i  lut = _mm256_broadcastsi128_si256(j->lut);
    const uint8_t *qc[8]; /* each column's codes of this block (k and c0 are even) */
    for (int jc = 0; jc < 8; jc++)
        qc[jc] = (const uint8_t *)j->w->qweight + (i0 + jc) * (k / 2) + c0 / 2;
    for (int64_t r = 0; r < j->m; r++) {
        if (!fused && nsc == 1) {
            __m256i xv[4];
            nf4x_xv(j, r, c0, xv);
            nf4x_out(j, nf4x_row64(lut, NULL, dec[0], xv), sv, r, kb, yt + 8 * r);
            continue;
        }
        __m256i acc[8];
        for (int jc = 0; jc < 8; jc++)
            acc[jc] = _mm256_setzero_si256();
        for (int64_t sc = 0; sc < nsc; sc++) {
            __m256i xv[4];
            nf4x_xv(j, r, c0 + 64 * sc, xv);
            for (int jc = 0; jc < 8; jc++) {
                __m256i d1[2];
                if (fused)
                    nf4x_dec(lut, _mm256_loadu_si256((const void *)(qc[jc] + 32 * sc)), d1);
                acc[jc] = _mm256_add_epi32(acc[jc], nf4x_dot(fused ? d1 : dec[sc][jc], xv));
            }
        }
        nf4x_out(j, hsum8x8(acc), sv, r, kb, yt + 8 * r);
    }
}

/* yt: the tile's outputs, [m, 8] */
AVX2_INLINE void nf4x_tile(const nf4x_job *j, int64_t i0, int64_t kb, __m256 sv, float *yt) {
    if (j->m <= NF4X_FUSED_M) {
        nf4x_rows(j, i0, kb, sv, NULL, 1, yt);
        return;
    }
    const int64_t  k = j->w->k, c0 = kb * j->ab, nsc = j->ab / 64;
    const uint8_t *qb  = j->w->qweight;
    const __m256i  lut = _mm256_broadcastsi128_si256(j->lut);
    __m256i        dec[256 / 64][8][2];
    for (int64_t sc = 0; sc < nsc; sc++)
        for (int jc = 0; jc < 8; jc++)
            nf4x_dec(lut,
                     _mm256_loadu_si256((const void *)(qb + ((i0 + jc) * k + c0 + 64 * sc) / 2)),
                     dec[sc][jc]);
    nf4x_rows(j, i0, kb, sv, dec, 0, yt);
}

#define NF4X_KB   32  /* blocks whose scales are decoded in one run per column */
#define NF4X_ROWS 256 /* the most rows nf4x_range takes */

/* Column-major scales of blocks [b, b + 8) of one column as a vector: the float32 absmax, or
 * the double quant's two roundings lane by lane, as lq_nf4_absmax (nested_code[q] *
 * nested_absmax, then + nested_offset; intrinsics are not contracted into an fma). */
AVX2_INLINE __m256 nf4x_am8(const lq_qlinear *w, int64_t b) {
    if (w->nested_blocksize <= 0)
        return _mm256_loadu_ps((const float *)w->absmax + b);
    const int64_t  nb = w->nested_blocksize, n0 = b / nb;
    const uint8_t *q  = (const uint8_t *)w->absmax + b;
    const float   *cd = w->nested_code; /* scalar loads: vgatherdps took 9% longer on Zen 3 */
    const float   *na = w->nested_absmax;
    const __m256   a  = b + 7 < (n0 + 1) * nb
                            ? _mm256_set1_ps(na[n0])
                            : _mm256_setr_ps(na[b / nb], na[(b + 1) / nb], na[(b + 2) / nb],
                                             na[(b + 3) / nb], na[(b + 4) / nb], na[(b + 5) / nb],
                                             na[(b + 6) / nb], na[(b + 7) / nb]);
    return _mm256_add_ps(_mm256_mul_ps(_mm256_setr_ps(cd[q[0]], cd[q[1]], cd[q[2]], cd[q[3]],
                                                      cd[q[4]], cd[q[5]], cd[q[6]], cd[q[7]]),
                                       a),
                         _mm256_set1_ps(w->nested_offset));
}

/* sv[g] = absmax * ts of columns [i0, i0 + 8), groups [g0, g0 + ng) of their rows. The
 * block scales are decoded 8 groups of the 8 columns at once (one vector per column, transposed
 * to one per group), not one call per column and block: that call cost as much as the products
 * at one row, and gathering the 8 columns' scalars into a vector cost another 10%. Runs
 * shorter than 8 groups (k / group_size not a multiple of 8) take their last groups one scalar
 * at a time. */
AVX2_INLINE void nf4x_scales(const lq_qlinear *w, int64_t i0, int64_t g0, int64_t ng, __m256 ts,
                             __m256 *sv) {
    const int64_t gk = w->k / w->group_size;
    const int64_t b0 = i0 * gk + g0; /* column i0's first block of the run */
    int64_t       g  = 0;
    for (; g + 8 <= ng; g += 8) {
        __m256 r[8];
        for (int jc = 0; jc < 8; jc++)
            r[jc] = nf4x_am8(w, b0 + jc * gk + g);
        lq_avx2_tr8(r);
        for (int l = 0; l < 8; l++)
            sv[g + l] = _mm256_mul_ps(r[l], ts);
    }
    for (; g < ng; g++) {
        float a[8];
        for (int jc = 0; jc < 8; jc++)
            a[jc] = lq_nf4_absmax(w, b0 + jc * gk + g);
        sv[g] = _mm256_mul_ps(_mm256_setr_ps(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]), ts);
    }
}

/* The codes of columns [i0, i0 + 8) (the next tile), fetched while block kb of this tile runs,
 * at its pace: 4 * ab bytes (4 lines at ab = 64). A tile reads 8 streams of k / 2 bytes, too
 * short for the hardware prefetcher to reach pace (at k = 4096, 32 lines each), so without this
 * every tile began with its lines coming from DRAM at full latency. 11008 x 4096 on 1 thread,
 * one row: 3.9-4.2 -> 2.2-2.5 ms (llama.cpp's Q4_K, one long stream: 2.5-2.9); 4 rows:
 * 7.7-8.5 -> 6.9. */
AVX2_INLINE void nf4x_prefetch(const nf4x_job *j, int64_t i0, int64_t kb) {
    const char *q = (const char *)j->w->qweight + i0 * (j->w->k / 2) + 4 * j->ab * kb;
    for (int64_t o = 0; o < 4 * j->ab; o += 64)
        _mm_prefetch(q + o, _MM_HINT_T0);
}

/* ... and the scales of groups [g0, g0 + ng) of those columns, as this tile decodes its own.
 * Spread over the blocks instead, two 64-bit divides a block cost more than they saved (4096 x
 * 4096 with double quant, one row: 0.79 ms; this way 0.64) */
AVX2_INLINE void nf4x_prefetch_scales(const lq_qlinear *w, int64_t i0, int64_t g0, int64_t ng) {
    const int64_t es = w->nested_blocksize > 0 ? 1 : 4, gk = w->k / w->group_size;
    for (int jc = 0; jc < 8; jc++) {
        const char *a = (const char *)w->absmax + ((i0 + jc) * gk + g0) * es;
        for (int64_t o = 0; o < ng * es; o += 64)
            _mm_prefetch(a + o, _MM_HINT_T0);
        _mm_prefetch(a + ng * es - 1, _MM_HINT_T0);
    }
}

/* Tiles [t0, t1). The block scales are decoded a run of NF4X_KB blocks at a time
 * (nf4x_scales). A group spans bs / ab blocks (both powers of two). */
AVX2_TARGET static void nf4x_range(const nf4x_job *j, int64_t t0, int64_t t1) {
    const lq_qlinear *w  = j->w;
    const int         sh = __builtin_ctzll((unsigned long long)(w->group_size / j->ab));
    const __m256      ts = _mm256_set1_ps(j->ts);
    __m256            sv[NF4X_KB];
    /* a tile's outputs, rows 32 bytes apart: in y they are n floats apart, for most models a
     * multiple of 4 KiB that maps every row to the same L1 set */
    float     yt[NF4X_ROWS * 8];
    const int direct = j->m == 1 && j->ab == 64; /* y in a register, see below */
    for (int64_t t = t0; t < t1; t++) {
        for (int64_t kb0 = 0; kb0 < j->nkb; kb0 += NF4X_KB) {
            const int64_t kb1 = kb0 + NF4X_KB < j->nkb ? kb0 + NF4X_KB : j->nkb;
            const int64_t g0 = kb0 >> sh, ng = ((kb1 - 1) >> sh) + 1 - g0;
            if (t + 1 < t1)
                nf4x_prefetch_scales(w, 8 * t + 8, g0, ng);
            nf4x_scales(w, 8 * t, g0, ng, ts, sv);
            /* nf4x_out's arithmetic with y in a register: its store and reload at every block
             * cost a fifth of the time at one row (4096 x 4096, 1 thread: 0.70 -> 0.56 ms) */
            if (direct) {
                const __m256i  lut = _mm256_broadcastsi128_si256(j->lut);
                const uint8_t *qc[8];
                float         *yp = j->y + 8 * t;
                __m256         yv = kb0 ? _mm256_loadu_ps(yp) : _mm256_setzero_ps();
                for (int64_t kb = kb0; kb < kb1; kb++) {
                    __m256i xv[4];
                    if (t + 1 < t1)
                        nf4x_prefetch(j, 8 * t + 8, kb);
                    nf4x_xv(j, 0, 64 * kb, xv);
                    for (int jc = 0; jc < 8; jc++)
                        qc[jc] = (const uint8_t *)w->qweight + (8 * t + jc) * (w->k / 2) + 32 * kb;
                    const __m256 d = _mm256_mul_ps(sv[(kb >> sh) - g0], _mm256_set1_ps(j->dx[kb]));
                    yv = _mm256_fmadd_ps(_mm256_cvtepi32_ps(nf4x_row64(lut, qc, NULL, xv)), d, yv);
                }
                _mm256_storeu_ps(yp, yv);
                continue;
            }
            for (int64_t kb = kb0; kb < kb1; kb++) {
                if (t + 1 < t1)
                    nf4x_prefetch(j, 8 * t + 8, kb);
                nf4x_tile(j, 8 * t, kb, sv[(kb >> sh) - g0], yt);
            }
        }
        if (!direct)
            for (int64_t r = 0; r < j->m; r++)
                memcpy(j->y + r * w->n + 8 * t, yt + 8 * r, 8 * sizeof(float));
    }
}

/* From NF4G_M rows: a GEMM whose int32 lanes are columns, so no sums are reduced across lanes.
 * The products and sums are those above, bit for bit (a block's integer sum in any order, the
 * same float epilogue per block). Per tile of 16 columns and chunk of NF4G_KC channels the codes
 * are decoded once into tq and |tq| bytes laid out per 4 channels ("step"): one vector holds
 * the step's 4 bytes of each of 8 columns. x is packed NF4G_MR rows at a time, interleaved by
 * step, and each row's 4 bytes are broadcast against the step: |tq| against x carrying tq's
 * sign (the sign trick turned round, so |x| is not needed), 6 accumulators, four weight loads
 * and three broadcasts per 6 sign / vpmaddubsw / vpmaddwd / add. The rows kernel above
 * decodes per 8 columns and block, then reduces each row's 8 column sums by a hadd tree: at
 * 256 rows its time per row was that of 16 rows. At 4096 x 4096, 256 rows, 1 thread (best of 6
 * alternated runs): the rows kernel 124 ms; this with x read in place and |x| beside it 95 (the
 * rows lie 4 KiB apart, in one L1 set); packed, and the sign trick turned round, 86; the
 * quantization of x in vectors (nf4g_qx) 83. llama.cpp's Q4_K took 91-104. 4 rows (8
 * accumulators) made GCC 12 keep one of them in memory. */
/* from this many rows (4096 x 4096, 1 thread, best of 3: 8 rows 4.6 ms by the rows kernel
 * against 4.9, 16 rows 8.6 against 6.7) */
#define NF4G_M    16
#define NF4G_KC   512      /* channels decoded at once: 16 KiB for 16 columns */
#define NF4G_MR   3        /* rows a tile kernel takes */
#define NF4G_ROWS (85 * 3) /* rows whose chunk of x (NF4G_KC bytes a row) stays in L2 */

/* The codes of 8 columns (q[j]: column j's code bytes from a channel c, c % 64 == 0) over 64
 * channels -> 16 steps, step s at d + s * 128: lane j holds tq of column j's channels c + 4 s ..
 * c + 4 s + 3, and 64 bytes on |tq|. A column's step is one 16-bit word of its codes, so this
 * is an 8 x 16 transpose of words (two 8 x 8 ones, a lane each), then each word's two bytes
 * split into nibbles in channel order (high nibble first) and looked up. */
AVX2_INLINE void nf4g_dec64(__m256i lut, __m256i luta, const uint8_t *const q[8], int8_t *d) {
    const __m256i m0f = _mm256_set1_epi8(0x0F);
    __m256i       r[8], a[8], b[8];
    for (int j = 0; j < 8; j++)
        r[j] = _mm256_loadu_si256((const void *)q[j]);
    /* a[2i]: words 0-3 of columns 2i and 2i + 1 interleaved, a[2i + 1] words 4-7 */
    for (int i = 0; i < 4; i++) {
        a[2 * i]     = _mm256_unpacklo_epi16(r[2 * i], r[2 * i + 1]);
        a[2 * i + 1] = _mm256_unpackhi_epi16(r[2 * i], r[2 * i + 1]);
    }
    /* b[4i + 2h + o]: columns 4i .. 4i + 3 at words 4h + 2o and 4h + 2o + 1 */
    for (int i = 0; i < 2; i++)
        for (int h = 0; h < 2; h++) {
            b[4 * i + 2 * h]     = _mm256_unpacklo_epi32(a[4 * i + h], a[4 * i + 2 + h]);
            b[4 * i + 2 * h + 1] = _mm256_unpackhi_epi32(a[4 * i + h], a[4 * i + 2 + h]);
        }
    for (int p = 0; p < 4; p++) /* word 2p, then 2p + 1, of all 8 columns (lane 1: 8 more) */
        for (int o = 0; o < 2; o++) {
            const __m256i t =
                o ? _mm256_unpackhi_epi64(b[p], b[4 + p]) : _mm256_unpacklo_epi64(b[p], b[4 + p]);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(t, 4), m0f);
            const __m256i lo = _mm256_and_si256(t, m0f);
            const int     s  = 2 * p + o;
            for (int e = 0; e < 2; e++) {
                const __m256i l  = e ? luta : lut;
                const __m256i hv = _mm256_shuffle_epi8(l, hi), lv = _mm256_shuffle_epi8(l, lo);
                const __m256i u0 = _mm256_unpacklo_epi8(hv, lv), u1 = _mm256_unpackhi_epi8(hv, lv);
                _mm256_store_si256((void *)(d + s * 128 + 64 * e),
                                   _mm256_permute2x128_si256(u0, u1, 0x20));
                _mm256_store_si256((void *)(d + (s + 8) * 128 + 64 * e),
                                   _mm256_permute2x128_si256(u0, u1, 0x31));
            }
        }
}

typedef struct nf4g_blk {
    const int8_t *d;  /* the chunk's decoded steps, 128 bytes each */
    const __m256 *sv; /* per block of the chunk, 2 vectors: absmax * ts of the tile's columns */
    const int8_t *xq; /* the row group's packed x at the chunk's first channel */
    const float  *dx; /* row r0's scale of the chunk's first block; rows nkb apart */
    int64_t       nkb, nb, ns; /* blocks in the chunk, steps in a block */
    float        *y;           /* row r0's outputs of the tile; rows n apart */
    int64_t       n;
    int           first; /* the chunk starts at channel 0: y starts from 0 */
} nf4g_blk;

/* mr rows x nv vectors of 8 columns (constants once inlined), every block of the chunk */
AVX2_INLINE void nf4g_tile(const int mr, const int nv, const nf4g_blk *a) {
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t kb = 0; kb < a->nb; kb++) {
        __m256i acc[NF4G_MR][2];
        for (int r = 0; r < mr; r++)
            for (int v = 0; v < nv; v++)
                acc[r][v] = _mm256_setzero_si256();
        const int8_t *d  = a->d + kb * a->ns * 128;
        const int8_t *xq = a->xq + kb * a->ns * 4 * NF4G_MR;
        for (int64_t s = 0; s < a->ns; s++) {
            __m256i wv[2], wa[2];
            for (int v = 0; v < nv; v++) {
                wv[v] = _mm256_load_si256((const void *)(d + s * 128 + 32 * v));
                wa[v] = _mm256_load_si256((const void *)(d + s * 128 + 64 + 32 * v));
            }
            for (int r = 0; r < mr; r++) {
                int32_t xs;
                memcpy(&xs, xq + (s * NF4G_MR + r) * 4, 4);
                const __m256i xb = _mm256_set1_epi32(xs);
                for (int v = 0; v < nv; v++)
                    acc[r][v] = _mm256_add_epi32(
                        acc[r][v],
                        _mm256_madd_epi16(_mm256_maddubs_epi16(wa[v], _mm256_sign_epi8(xb, wv[v])),
                                          ones));
            }
        }
        for (int r = 0; r < mr; r++) {
            const __m256 dxr = _mm256_set1_ps(a->dx[r * a->nkb + kb]);
            for (int v = 0; v < nv; v++) {
                float       *yp = a->y + r * a->n + 8 * v;
                const __m256 sd = _mm256_mul_ps(a->sv[2 * kb + v], dxr);
                const __m256 yv = a->first && !kb ? _mm256_setzero_ps() : _mm256_loadu_ps(yp);
                _mm256_storeu_ps(yp, _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[r][v]), sd, yv));
            }
        }
    }
}

#define NF4G_INST(MR, NV)                                                                          \
    AVX2_TARGET static void nf4g_tile_##MR##_##NV(const nf4g_blk *a) {                             \
        nf4g_tile(MR, NV, a);                                                                      \
    }
NF4G_INST(1, 1)
NF4G_INST(2, 1)
NF4G_INST(3, 1)
NF4G_INST(1, 2)
NF4G_INST(2, 2)
NF4G_INST(3, 2)
static void (*const k_nf4g_tile[2][NF4G_MR])(const nf4g_blk *) = {
    {nf4g_tile_1_1, nf4g_tile_2_1, nf4g_tile_3_1}, {nf4g_tile_1_2, nf4g_tile_2_2, nf4g_tile_3_2}};

/* x packed for nf4g_tile: row r's channel c at xg[(r / MR) * MR * k + (c / 4 * MR + r % MR) * 4
 * + c % 4] */
static int64_t nf4g_xat(int64_t k, int64_t r, int64_t c) {
    return (r / NF4G_MR) * NF4G_MR * k + (c / 4 * NF4G_MR + r % NF4G_MR) * 4 + c % 4;
}

/* lq_qx_block(x, len, 127) (len % 8 == 0) into nf4g_tile's packing, step by step from xg (a
 * row's first step of the block): the same amax, the same product x * (127 / amax), rounded half
 * to even in the default rounding mode as nearbyintf, the same clamp. Scalar, the call to
 * nearbyintf per value cost about a twentieth of the whole at 256 rows. */
AVX2_TARGET static void nf4g_qx(const float *x, int64_t len, int8_t *xg, float *dx) {
    const __m256 sgn = _mm256_set1_ps(-0.f);
    __m256       am  = _mm256_setzero_ps();
    for (int64_t c = 0; c < len; c += 8) /* max(a, am): am where a is NaN, as the scalar loop */
        am = _mm256_max_ps(_mm256_andnot_ps(sgn, _mm256_loadu_ps(x + c)), am);
    __m128 h          = _mm_max_ps(_mm256_castps256_ps128(am), _mm256_extractf128_ps(am, 1));
    h                 = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h                 = _mm_max_ss(h, _mm_movehdup_ps(h));
    const float  amax = _mm_cvtss_f32(h);
    const __m256 inv  = _mm256_set1_ps(amax > 0.f ? 127.f / amax : 0.f);
    const __m256 hi = _mm256_set1_ps(127.f), lo = _mm256_set1_ps(-127.f);
    for (int64_t c = 0; c < len; c += 8) {
        __m256 v          = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + c), inv),
                                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        v                 = _mm256_blendv_ps(v, hi, _mm256_cmp_ps(v, hi, _CMP_GT_OQ));
        v                 = _mm256_blendv_ps(v, lo, _mm256_cmp_ps(v, lo, _CMP_LT_OQ));
        /* a NaN to 0, the code the scalar conversion leaves on x86 (INT_MIN's low byte) */
        v                 = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));
        const __m256i i32 = _mm256_cvttps_epi32(v);
        const __m256i i8  = _mm256_packs_epi16(_mm256_packs_epi32(i32, i32), i32);
        const int32_t w0  = _mm_cvtsi128_si32(_mm256_castsi256_si128(i8));
        const int32_t w1  = _mm_cvtsi128_si32(_mm256_extracti128_si256(i8, 1));
        memcpy(xg + (c / 4) * NF4G_MR * 4, &w0, 4);
        memcpy(xg + (c / 4 + 1) * NF4G_MR * 4, &w1, 4);
    }
    *dx = amax / 127.f;
}

/* Tiles of 16 columns [t0, t1) (the last may be 8 wide), rows [r0, r0 + j->m) of j's x (at most
 * NF4G_ROWS, r0 % NF4G_MR == 0) */
AVX2_TARGET static void nf4g_range(const nf4x_job *j, int64_t r0, int64_t t0, int64_t t1) {
    const lq_qlinear   *w = j->w;
    const int64_t       n = w->n, k = w->k, ab = j->ab;
    const int           sh   = __builtin_ctzll((unsigned long long)(w->group_size / ab));
    const __m256        ts   = _mm256_set1_ps(j->ts);
    const __m256i       lut  = _mm256_broadcastsi128_si256(j->lut);
    const __m256i       luta = _mm256_abs_epi8(lut);
    _Alignas(32) int8_t dec[NF4G_KC / 4 * 128];
    __m256              sg[2][NF4G_KC / 64], sv[2 * (NF4G_KC / 64)];
    for (int64_t t = t0; t < t1; t++) {
        const int64_t i0 = 16 * t;
        const int     nv = n - i0 >= 16 ? 2 : 1;
        for (int64_t c0 = 0; c0 < k; c0 += NF4G_KC) {
            const int64_t kc = c0 + NF4G_KC < k ? NF4G_KC : k - c0, kb0 = c0 / ab, nb = kc / ab;
            const int64_t g0 = kb0 >> sh, ng = ((kb0 + nb - 1) >> sh) + 1 - g0;
            for (int v = 0; v < nv; v++) {
                nf4x_scales(w, i0 + 8 * v, g0, ng, ts, sg[v]);
                for (int64_t kb = 0; kb < nb; kb++)
                    sv[2 * kb + v] = sg[v][((kb0 + kb) >> sh) - g0];
                for (int64_t c = 0; c < kc; c += 64) {
                    const uint8_t *q[8];
                    for (int jc = 0; jc < 8; jc++)
                        q[jc] = (const uint8_t *)w->qweight + ((i0 + 8 * v + jc) * k + c0 + c) / 2;
                    nf4g_dec64(lut, luta, q, dec + c / 4 * 128 + 32 * v);
                }
            }
            nf4g_blk a = {dec, sv, NULL, NULL, j->nkb, nb, ab / 4, NULL, n, c0 == 0};
            for (int64_t r = r0; r < r0 + j->m; r += NF4G_MR) {
                const int mr = r0 + j->m - r < NF4G_MR ? (int)(r0 + j->m - r) : NF4G_MR;
                a.xq         = j->xp + nf4g_xat(k, r, c0);
                a.dx         = j->dx + r * j->nkb + kb0;
                a.y          = j->y + r * n + i0;
                k_nf4g_tile[nv - 1][mr - 1](&a);
            }
        }
    }
}

/* x's bytes in the workspace: x and |x| for the rows kernel, x packed for nf4g_range */
static int64_t nf4x_xbytes(const lq_qlinear *w, int64_t m) {
    return m >= NF4G_M ? (m + NF4G_MR - 1) / NF4G_MR * NF4G_MR * w->k
                       : 2 * m * lq_align_up(w->k, 64);
}

size_t lq_ws_nf4_avx2(const lq_qlinear *w, int64_t m) {
    const int64_t ab = lq_nf4_qx_block(w);
    return ab ? (size_t)(nf4x_xbytes(w, m) + m * (w->k / ab) * 4) : 0;
}

/* Row r of x quantized per block into nf4x_range's layout (per 64 channels the even, then the
 * odd ones, and their magnitudes m rows on) or nf4g_tile's packing. Not in the OpenMP region's
 * body: the outlined function does not inherit the target, and nearbyintf was a libm call. */
AVX2_TARGET static void nf4x_qx_row(const nf4x_job *j, const float *xr, int64_t r, int gemm,
                                    int8_t *xp, float *dx) {
    const int64_t k = j->w->k;
    int8_t       *o = xp + r * j->kp, *oa = o + j->m * j->kp;
    int32_t       q[256];
    for (int64_t kb = 0; kb < j->nkb; kb++) {
        const int64_t c0 = kb * j->ab;
        if (gemm) {
            nf4g_qx(xr + c0, j->ab, xp + nf4g_xat(k, r, c0), &dx[r * j->nkb + kb]);
            continue;
        }
        lq_qx_block(xr + c0, j->ab, 127.f, q, &dx[r * j->nkb + kb]);
        for (int64_t c = c0; c < c0 + j->ab; c++) { /* per 64: even, then odd */
            const int64_t u = c - c0, base = c - (c & 63), e = c & 63;
            o[base + (e & 1) * 32 + e / 2]  = (int8_t)q[u];
            oa[base + (e & 1) * 32 + e / 2] = (int8_t)abs(q[u]);
        }
    }
}

lq_status lq_gemm_nf4_avx2(const lq_qlinear *w, const float *x, int64_t m, float *y, void *ws,
                           int nthreads) {
    if (!lq_nf4_avx2_ok(w) || !lq_nf4_qx_bits(w, m))
        return LQ_ERR_UNSUPPORTED;
    nf4x_job j = {0};
    int8_t   tq[16];
    j.w             = w;
    j.ab            = lq_nf4_qx_block(w);
    j.nkb           = w->k / j.ab;
    j.m             = m;
    j.ts            = lq_nf4_qx_table(w, tq);
    j.lut           = _mm_loadu_si128((const void *)tq);
    j.y             = y;
    const int64_t k = w->k, kp = lq_align_up(k, 64);
    int8_t       *xp    = ws; /* x, then |x|; or x packed (nf4g_xat) */
    float        *dx    = (float *)(void *)((uint8_t *)ws + nf4x_xbytes(w, m));
    j.xp                = xp;
    j.xa                = xp + m * kp;
    j.dx                = dx;
    j.kp                = kp;
    const int64_t ntile = w->n / 8;
    const int     gemm  = m >= NF4G_M; /* x packed for nf4g_range */
#pragma omp parallel num_threads(lq_cpu_threads(nthreads))
    {
#pragma omp for schedule(static)
        for (int64_t r = 0; r < m; r++)
            nf4x_qx_row(&j, x + r * k, r, gemm, xp, dx);
        const int64_t th = omp_get_thread_num(), tn = omp_get_num_threads();
        /* Runs of tiles taken in turn, 4 a thread: on a shared VM a neighbour slows one core
         * for seconds at a time, and a static split then waits for that core (llama.cpp's
         * threads take chunks in turn too). 512 rows, 4096 x 4096, 2 threads: the two halves
         * took 88-141 ms each, up to 20 ms apart; 10 alternated runs, median 119 -> 108 ms
         * (best 83 -> 80). */
        const int64_t nt16 = (w->n + 15) / 16, tc = (nt16 + 4 * tn - 1) / (4 * tn);
#pragma omp for schedule(dynamic, 1)
        for (int64_t t0 = 0; t0 < (gemm ? nt16 : 0); t0 += tc)
            for (int64_t r0 = 0; r0 < m; r0 += NF4G_ROWS) {
                nf4x_job jr = j;
                jr.m        = m - r0 < NF4G_ROWS ? m - r0 : NF4G_ROWS;
                nf4g_range(&jr, r0, t0, t0 + tc < nt16 ? t0 + tc : nt16);
            }
        /* Every tile reads all of the rows' activations: in chunks of rows whose x and |x|
         * stay in L2 (256 KiB), not from L3. With the tile's outputs kept in yt, 512 rows on 1
         * thread went from 242-284 to 222-229 ms at 4096 x 4096, 944-1186 to 720-725 ms at
         * 4096 x 11008 (before those rows went to nf4g_range). */
        const int64_t rl = 131072 / kp, rc = rl < 8 ? 8 : rl > NF4X_ROWS ? NF4X_ROWS : rl;
        for (int64_t r0 = 0; r0 < m && !gemm; r0 += rc) {
            nf4x_job jr = j;
            jr.m        = m - r0 < rc ? m - r0 : rc;
            jr.xp       = j.xp + r0 * kp;
            jr.xa       = j.xa + r0 * kp;
            jr.dx       = j.dx + r0 * j.nkb;
            jr.y        = j.y + r0 * w->n;
            nf4x_range(&jr, ntile * th / tn, ntile * (th + 1) / tn);
        }
    }
    return LQ_OK;
}

/* ---------------------------------------------------------------------------------------
 * NF4 on float activations, up to LQ_BUF_MAX_M rows (lq_gemm_nf4_cpu's small-m path where
 * lq_nf4f_avx2_ok; from LQ_FUSED_M + 1 rows through a decoded buffer, below): the 16-entry code
 * book is split into its four byte planes; 32 codes are looked up by four vpshufb, one a plane, and
 * eight unpacks interleave the bytes back into four vectors of 8 floats. That is 12 shuffle-pipe
 * operations per 32 weights where two vpermps, two variable shifts and a blend per 8 (20 per 32)
 * took 2.52 ms at one row against 1.63 with 13 (4096 x 4096, 1 thread). The weights come out in an
 * order of their own (nf4f_decode32), and x is copied into it once per call: putting each byte's
 * two codes in order took one more shuffle per 32 weights, 8% of the time at one row (1.66 -> 1.53
 * ms). A block's dot product is scaled by its absmax once.
 * --------------------------------------------------------------------------------------- */
int lq_nf4f_avx2_ok(const lq_qlinear *w) {
    const int64_t bs = w->group_size;
    return bs > 0 && bs % 32 == 0 && w->k % bs == 0;
}

/* the code book's four byte planes, each in both lanes */
AVX2_INLINE void nf4f_planes(const lq_qlinear *w, __m256i plane[4]) {
    for (int j = 0; j < 4; j++) {
        uint8_t t[16];
        for (int c = 0; c < 16; c++) {
            uint32_t u;
            memcpy(&u, &w->quant_map[c], 4);
            t[c] = (uint8_t)(u >> (8 * j));
        }
        plane[j] = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)t));
    }
}

/* 32 codes from 16 packed bytes (weight 2i in byte i's high nibble, 2i + 1 in its low one) into
 * 4 vectors of 8 floats. Lane 0 looks up the 16 bytes' low nibbles, lane 1 their high ones,
 * and the unpacks take a lane's bytes 4h .. 4h + 3 to vector h: vector h holds weights 8h + 1,
 * 8h + 3, 8h + 5, 8h + 7, 8h, 8h + 2, 8h + 4, 8h + 6 (nf4f_xperm, nf4f_src). */
AVX2_INLINE void nf4f_decode32(const uint8_t *q, const __m256i plane[4], __m256 wv[4]) {
    const __m256i d    = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)q));
    const __m256i c    = _mm256_and_si256(_mm256_blend_epi32(d, _mm256_srli_epi16(d, 4), 0xF0),
                                          _mm256_set1_epi8(0x0f));
    const __m256i p0   = _mm256_shuffle_epi8(plane[0], c);
    const __m256i p1   = _mm256_shuffle_epi8(plane[1], c);
    const __m256i p2   = _mm256_shuffle_epi8(plane[2], c);
    const __m256i p3   = _mm256_shuffle_epi8(plane[3], c);
    const __m256i lo01 = _mm256_unpacklo_epi8(p0, p1), hi01 = _mm256_unpackhi_epi8(p0, p1);
    const __m256i lo23 = _mm256_unpacklo_epi8(p2, p3), hi23 = _mm256_unpackhi_epi8(p2, p3);
    wv[0] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(lo01, lo23));
    wv[1] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(lo01, lo23));
    wv[2] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(hi01, hi23));
    wv[3] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(hi01, hi23));
}

/* the channel whose weight nf4f_decode32 puts at position l of a run of 8 starting on a multiple
 * of 8, relative to the run */
static const int8_t k_nf4f_order[8] = {1, 3, 5, 7, 0, 2, 4, 6};
/* ... and at position c of k */
static inline int64_t nf4f_src(int64_t c) {
    return (c & ~(int64_t)7) + k_nf4f_order[c & 7];
}

/* dst[c] = src[nf4f_src(c)] for c < len (len % 8 == 0) */
AVX2_INLINE void nf4f_xperm(const float *src, int64_t len, float *dst) {
    const __m256i ix = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const void *)k_nf4f_order));
    for (int64_t c = 0; c < len; c += 8)
        _mm256_storeu_ps(dst + c, _mm256_permutevar8x32_ps(_mm256_loadu_ps(src + c), ix));
}

#define NF4F_XC  4096 /* floats of x a chunk holds: 16 KiB of L1 */
#define NF4F_PAD 16   /* floats between a copied chunk's rows: 64 bytes */

/* Output columns [i0, i1) over channels [e0, e1) (multiples of 32), x in nf4f_decode32's order
 * with rows xs floats apart from channel e0: y is set where e0 is 0 and added to after. */
AVX2_INLINE void nf4f_chunk(const lq_qlinear *w, const __m256i plane[4], const float *xc,
                            int64_t xs, int64_t e0, int64_t e1, int64_t i0, int64_t i1, float *y,
                            const int M) {
    const int64_t  n = w->n, k = w->k, bs = w->group_size, nb = k / bs;
    const uint8_t *qb = w->qweight;
    const int64_t  b0 = e0 / bs, b1 = (e1 - 1) / bs + 1;
    /* two accumulator sets hide the multiply-add latency at one and two rows; at 3 and 4 they
     * took 5% longer (four at one row: no change) */
    const int P = M <= 2 ? 2 : 1;
    float     am[NF4F_XC / 32 + 1];
    for (int64_t i = i0; i < i1; i++) {
        __m256 yv[LQ_FUSED_M];
        for (int r = 0; r < M; r++)
            yv[r] = _mm256_setzero_ps();
        lq_nf4_absmax_range(w, i * nb + b0, i * nb + b1, am);
        for (int64_t s = e0; s < e1;) {
            const int64_t  b = s / bs, end = (b + 1) * bs < e1 ? (b + 1) * bs : e1;
            const uint8_t *q = qb + (i * k + s) / 2;
            __m256         acc[LQ_FUSED_M][2];
            for (int r = 0; r < M; r++)
                acc[r][0] = acc[r][1] = _mm256_setzero_ps();
            /* a chunk's next column, or further along this one */
            _mm_prefetch((const char *)q + (e1 - e0 < k ? k / 2 : 512), _MM_HINT_T0);
            for (int64_t t = 0; t < end - s; t += 32) {
                __m256 wv[4];
                nf4f_decode32(q + t / 2, plane, wv);
                for (int r = 0; r < M; r++)
                    for (int h = 0; h < 4; h++)
                        acc[r][h % P] =
                            _mm256_fmadd_ps(_mm256_loadu_ps(xc + r * xs + (s - e0) + t + 8 * h),
                                            wv[h], acc[r][h % P]);
            }
            const __m256 a = _mm256_set1_ps(am[b - b0]);
            for (int r = 0; r < M; r++)
                yv[r] = _mm256_fmadd_ps(P == 2 ? _mm256_add_ps(acc[r][0], acc[r][1]) : acc[r][0], a,
                                        yv[r]);
            s = end;
        }
        for (int r = 0; r < M; r++)
            y[r * n + i] = (e0 ? y[r * n + i] : 0.0f) + hsum8(yv[r]);
    }
}

/* k is taken in chunks of x copied (in nf4f_decode32's order) into L1, rows 64 bytes apart
 * from the 4 KiB multiples they are stored at, which share L1 sets (8 rows: 6.07 -> 5.2 ms
 * before the copy was made at every m). */
AVX2_INLINE void nf4f_rows(const lq_qlinear *w, const float *x, int64_t i0, int64_t i1, float *y,
                           const int M) {
    const int64_t k = w->k, len = NF4F_XC / M / 32 * 32;
    __m256i       plane[4];
    nf4f_planes(w, plane);
    _Alignas(32) float xbuf[NF4F_XC + LQ_FUSED_M * NF4F_PAD];
    for (int64_t e0 = 0; e0 < k; e0 += len) {
        const int64_t e1 = e0 + len < k ? e0 + len : k;
        for (int r = 0; r < M; r++)
            nf4f_xperm(x + r * k + e0, e1 - e0, xbuf + r * (e1 - e0 + NF4F_PAD));
        nf4f_chunk(w, plane, xbuf, e1 - e0 + NF4F_PAD, e0, e1, i0, i1, y, M);
    }
}

#define NF4F_INST(M)                                                                               \
    AVX2_TARGET static void nf4f_m##M(const lq_qlinear *w, const float *x, int64_t i0,             \
                                      int64_t i1, float *y) {                                      \
        nf4f_rows(w, x, i0, i1, y, M);                                                             \
    }
NF4F_INST(1)
NF4F_INST(2)
NF4F_INST(3)
NF4F_INST(4)
NF4F_INST(5)
NF4F_INST(6)
NF4F_INST(7)
NF4F_INST(8)
typedef void (*nf4f_fn)(const lq_qlinear *w, const float *x, int64_t i0, int64_t i1, float *y);
static const nf4f_fn k_nf4f[LQ_FUSED_M] = {nf4f_m1, nf4f_m2, nf4f_m3, nf4f_m4,
                                           nf4f_m5, nf4f_m6, nf4f_m7, nf4f_m8};
_Static_assert(LQ_FUSED_M == 8, "one instance per m <= LQ_FUSED_M");

/* From LQ_FUSED_M + 1 rows (to LQ_BUF_MAX_M): LQ_BUF_NC columns x LQ_BUF_KC channels decoded
 * once into an L1 buffer buf[c][LQ_BUF_NC] (each weight map[code] * absmax, the reference's
 * product), then every row run over it (lq_buf_rows, x channel-major in nf4f_decode32's
 * order), as GPTQ's buffered kernel. Eight columns' decoded vectors are transposed into the
 * buffer's rows. 1 thread, weights from memory: 4096 x 4096 at 16 rows 9.6-10.1 ms against
 * 12.8-13.4 through dequantized tiles and sgemm, 11008 x 4096 26.1 / 36.0, 4096 x 11008 25.3 /
 * 41.0; at 48 rows the two tie (25.5-26.0 / 25.1-26.5), and from 5 to 8 rows the fused kernel
 * stays ahead (8 rows: 5.3-5.4 against 6.4-6.5). */
AVX2_INLINE void nf4b_decode(const lq_qlinear *w, const __m256i plane[4], int64_t i0, int nc,
                             int64_t c0, int64_t kc, float *buf) {
    const int64_t  k = w->k, bs = w->group_size;
    const uint8_t *qb = w->qweight;
    for (int jb = 0; jb < LQ_BUF_NC; jb += 8)
        for (int64_t t = 0; t < kc; t += 32) {
            __m256 d[8][4];
            for (int i = 0; i < 8; i++) {
                if (jb + i >= nc) { /* past a short panel's columns */
                    d[i][0] = d[i][1] = d[i][2] = d[i][3] = _mm256_setzero_ps();
                    continue;
                }
                const int64_t e = (i0 + jb + i) * k + c0 + t;
                nf4f_decode32(qb + e / 2, plane, d[i]);
                const __m256 a = _mm256_set1_ps(lq_nf4_absmax(w, e / bs));
                for (int h = 0; h < 4; h++)
                    d[i][h] = _mm256_mul_ps(d[i][h], a);
            }
            for (int h = 0; h < 4; h++) {
                __m256 r[8];
                for (int i = 0; i < 8; i++)
                    r[i] = d[i][h];
                lq_avx2_tr8(r);
                for (int q = 0; q < 8; q++)
                    _mm256_store_ps(buf + (t + 8 * h + q) * LQ_BUF_NC + jb, r[q]);
            }
        }
}

AVX2_TARGET static void nf4b_range(const lq_qlinear *w, const float *xt, int64_t m, int64_t blk0,
                                   int64_t blk1, float *y) {
    _Alignas(32) float buf[LQ_BUF_KC * LQ_BUF_NC];
    _Alignas(32) float part[LQ_BUF_MAX_M * LQ_BUF_NC];
    const int64_t      n = w->n, k = w->k;
    __m256i            plane[4];
    nf4f_planes(w, plane);
    for (int64_t bi = blk0; bi < blk1; bi++) {
        const int64_t i0 = bi * LQ_BUF_NC;
        for (int64_t cc = 0; cc < k; cc += LQ_BUF_KC) {
            const int64_t kc = k - cc < LQ_BUF_KC ? k - cc : LQ_BUF_KC;
            nf4b_decode(w, plane, i0, LQ_BUF_NC, cc, kc, buf);
            lq_buf_rows(xt + cc * m, m, buf, kc, part, cc == 0);
        }
        for (int64_t r = 0; r < m; r++)
            memcpy(y + r * n + i0, part + r * LQ_BUF_NC, LQ_BUF_NC * sizeof(float));
    }
}

/* From LQ_BUF_MAX_M + 1 rows: lq_gemm256 with nf4b_decode packing its panels (16 columns, as
 * the buffer), x taken in nf4f_decode32's order by the GEMM's own copy (x8), instead of rows
 * dequantized into a tile for OpenBLAS's sgemm. 4096 x 4096, weights from memory: 64 rows 30.5-31.6
 * -> 27.9 ms on 1 thread, 17.0 -> 15.0 on 2; 118 rows 52.7 -> 47.8 (1); 512 rows 115.5 -> 103.6
 * (2). A copy of all of x in that order first took m x k floats more workspace for no time
 * (512 rows of 4096 x 4096, 2 threads: 112.1-115.7 ms with it, 104.1-108.6 without). */
typedef struct nf4p_ctx {
    const lq_qlinear *w;
    __m256i           plane[4];
} nf4p_ctx;

AVX2_TARGET static void nf4p_pack(const void *ctx, int64_t n0, int nr, int64_t k0, int kc,
                                  float *pan, int ldp) {
    const nf4p_ctx *c = ctx;
    (void)ldp; /* lq_gemm256's 16, LQ_BUF_NC */
    nf4b_decode(c->w, c->plane, n0, nr, k0, kc, pan);
}

AVX2_TARGET static void nf4p_gemm(const lq_qlinear *w, const float *x, int64_t m, float *y,
                                  float *ws, int nthreads) {
    nf4p_ctx ctx = {.w = w};
    nf4f_planes(w, ctx.plane);
    const lq_gemm_b b = {
        .kind = LQ_GEMM_B_PACK, .pack = nf4p_pack, .ctx = &ctx, .x8 = k_nf4f_order};
    lq_gemm256(x, m, w->k, &b, w->n, y, w->n, ws, nthreads);
}

size_t lq_ws_nf4f_avx2(const lq_qlinear *w, int64_t m) {
    return m <= LQ_FUSED_M     ? 0
           : m <= LQ_BUF_MAX_M ? (size_t)(m * w->k) * sizeof(float)
                               : lq_gemm256_ws(m, w->k);
}

lq_status lq_gemm_nf4f_avx2(const lq_qlinear *w, const float *x, int64_t m, float *y, void *ws,
                            int nthreads) {
    if (m < 1 || !lq_nf4f_avx2_ok(w))
        return LQ_ERR_UNSUPPORTED;
    if (m > LQ_BUF_MAX_M) {
        nf4p_gemm(w, x, m, y, ws, nthreads);
        return LQ_OK;
    }
    if (m <= LQ_FUSED_M) {
        const nf4f_fn fn = k_nf4f[m - 1];
#pragma omp parallel num_threads(nthreads)
        {
            const int64_t th = omp_get_thread_num(), tn = omp_get_num_threads();
            fn(w, x, w->n * th / tn, w->n * (th + 1) / tn, y);
        }
        return LQ_OK;
    }
    const int64_t n = w->n, k = w->k, nblk = n / LQ_BUF_NC;
    float        *xt = ws;
#pragma omp parallel num_threads(nthreads)
    {
#pragma omp for schedule(static)
        for (int64_t c = 0; c < k; c++)
            for (int64_t r = 0; r < m; r++)
                xt[c * m + r] = x[r * k + nf4f_src(c)];
        const int64_t th = omp_get_thread_num(), tn = omp_get_num_threads();
        nf4b_range(w, xt, m, nblk * th / tn, nblk * (th + 1) / tn, y);
    }
    /* the n % LQ_BUF_NC last columns: the fused kernel, LQ_FUSED_M rows at a time */
    for (int64_t r0 = 0; r0 < m && nblk * LQ_BUF_NC < n; r0 += LQ_FUSED_M) {
        const int64_t mc = m - r0 < LQ_FUSED_M ? m - r0 : LQ_FUSED_M;
        k_nf4f[mc - 1](w, x + r0 * k, nblk * LQ_BUF_NC, n, y + r0 * n);
    }
    return LQ_OK;
}

#else /* not x86-64 GCC/clang: the float kernels run */
int lq_cpu_avx2i(void) {
    return 0;
}
int lq_gptq_avx2_ok(const lq_qlinear *w, int xbits) {
    (void)w, (void)xbits;
    return 0;
}
size_t lq_ws_gptq_avx2(const lq_qlinear *w, int64_t m, int xbits) {
    (void)w, (void)m, (void)xbits;
    return 0;
}
lq_status lq_gemm_gptq_avx2(const lq_qlinear *w, const float *x, int64_t m, float *y, void *ws,
                            int xbits, int nthreads) {
    (void)w, (void)x, (void)m, (void)y, (void)ws, (void)xbits, (void)nthreads;
    return LQ_ERR_UNSUPPORTED;
}
int lq_dense16_avx2_ok(const lq_qlinear *w, int64_t m) {
    (void)w, (void)m;
    return 0;
}
lq_status lq_gemm_dense16_avx2(const lq_qlinear *w, const float *x, int64_t m, float *y,
                               int nthreads) {
    (void)w, (void)x, (void)m, (void)y, (void)nthreads;
    return LQ_ERR_UNSUPPORTED;
}
void lq_dense16_to_f32_avx2(const uint16_t *h, int bf, int64_t cnt, float *out) {
    (void)h, (void)bf, (void)cnt, (void)out;
}
lq_status lq_int8_dots_avx2(const int8_t *cb, int64_t n, int64_t k, const int8_t *qx, int64_t m,
                            int32_t *acc, int nthreads) {
    (void)cb, (void)n, (void)k, (void)qx, (void)m, (void)acc, (void)nthreads;
    return LQ_ERR_UNSUPPORTED;
}
int lq_nf4_avx2_ok(const lq_qlinear *w) {
    (void)w;
    return 0;
}
size_t lq_ws_nf4_avx2(const lq_qlinear *w, int64_t m) {
    (void)w, (void)m;
    return 0;
}
lq_status lq_gemm_nf4_avx2(const lq_qlinear *w, const float *x, int64_t m, float *y, void *ws,
                           int nthreads) {
    (void)w, (void)x, (void)m, (void)y, (void)ws, (void)nthreads;
    return LQ_ERR_UNSUPPORTED;
}
size_t lq_ws_awq_avx2(const lq_qlinear *w, int64_t m) {
    (void)w, (void)m;
    return 0;
}
lq_status lq_gemm_awq_avx2(const lq_qlinear *w, const float *x, int64_t m, float *y, void *ws,
                           int nthreads) {
    (void)w, (void)x, (void)m, (void)y, (void)ws, (void)nthreads;
    return LQ_ERR_UNSUPPORTED;
}
int lq_nf4f_avx2_ok(const lq_qlinear *w) {
    (void)w;
    return 0;
}
size_t lq_ws_nf4f_avx2(const lq_qlinear *w, int64_t m) {
    (void)w, (void)m;
    return 0;
}
lq_status lq_gemm_nf4f_avx2(const lq_qlinear *w, const float *x, int64_t m, float *y, void *ws,
                            int nthreads) {
    (void)w, (void)x, (void)m, (void)y, (void)ws, (void)nthreads;
    return LQ_ERR_UNSUPPORTED;
}
#endif
