/* x86-64 AVX-512 VNNI kernels: integer dot products where the float kernels were
 * compute-bound. Chosen at run time (lq_cpu_vnni); the format files fall back to their float
 * kernels elsewhere.
 *
 * GPTQ (bits 2/4/8, and 3 with VBMI: gptq3_vnni_tile; g_idx = c / group_size): the semantics
 * of lq_gemm_gptq_qx_ref (activations quantized to int8 per row and block of channels), bit for
 * bit: vpdpbusd, 4 u8 codes x 4 s8 activations per 32-bit lane (64 products an instruction).
 * Layout: a qweight word holds 32/b input channels of one output column. Shifted by s*b and
 * masked per byte its bytes hold channels t*(8/b) + s, t = 0..3. The activations are stored in
 * that order (xp: per word row, one 4-byte slice per shift), so one 32-bit broadcast of x
 * against 16 columns of masked words is one instruction. AWQ as stored at m <= 4 reads its words
 * in place, 4 channel rows byte-interleaved (awq_vnni_seq); above, GPTQ's kernel on a repacked
 * copy.
 *
 * Loop order: m <= 4: activation blocks outer and column blocks inner, so each thread streams
 * the word rows of a block through its contiguous column range (the float kernel's order);
 * larger m: column blocks outer, rows in chunks of 4, every block of k inner, so a column
 * block's weights (64 columns x k) stay in L2 for all rows and its y tile in L1; from
 * VNNI_COPY_M rows on a CPU with AMX-INT8 the same on AMX tiles (gptq_amx_cols). */
#include "lq_kernels_impl.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* GCC's partial redundancy elimination turned the integer tiles' accumulator arrays into
 * register copies around every vpdpbusd (the NF4 tile at 4 rows: 16 multiply-adds and 30
 * copies and a spill an iteration); without it 10-29% less time from 16 rows (4096 x 4096,
 * 1 thread, Zen 5). The NF4 row kernel keeps it (19% more time at one row without). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-tree-pre")
#define LQ_TREE_PRE_PUSH _Pragma("GCC push_options") _Pragma("GCC optimize(\"tree-pre\")")
#define LQ_TREE_PRE_POP  _Pragma("GCC pop_options")
#else
#define LQ_TREE_PRE_PUSH
#define LQ_TREE_PRE_POP
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define VNNI_TARGET   __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512dq")))
#define VNNI_INLINE   static inline __attribute__((always_inline)) VNNI_TARGET
#define VNNI_NV       4   /* 16-column vectors per column block */
#define VNNI_M        4   /* activation rows per chunk */
#define VNNI_COPY_M   16  /* from this many rows a column block's words are copied contiguous */
/* m <= VNNI_M, 4- and 8-bit: a block's word rows (16 or 32 at 128 channels) in slices of this
 * many, each across all the thread's columns before the next, the int32 sums kept between them
 * (vnni_job part). 32 word rows n words apart were 32 streams at once, which one Zen 4 core read
 * at 11-12 GB/s: 11008 x 4096 at 1 row, 1 thread, 3.9-4.7 -> 1.7-2.8 ms (16 rows: 2.3-4.0; 4: as
 * 8). 4-bit's 16 in slices of 8 gain where the codes come from memory (bench_kernels_cpu -e 96,
 * 1 thread; both without the prefetch below: 4096 x 4096 one row 0.53-0.57 -> 0.45-0.46 ms;
 * against the whole block with it: two rows 0.59-0.69 -> 0.49-0.51, 11008 x 4096 two rows
 * 1.23-1.43 -> 1.00-1.04; slices of 2 or 1 slower) and lose up to 10% where the L3 holds them. No
 * software prefetch along the word rows: with it (128 words ahead at m <= 2; 256-1024 worse) the
 * same one row of GPTQ-8 from memory took 0.88-0.91 ms against 0.71-0.75, GPTQ-3 0.43-0.45 against
 * 0.37-0.38. */
#define VNNI_SLICE 8

#define AMXI_TARGET                                                                                \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,amx-tile,amx-int8")))
#define AMXI_INLINE static inline __attribute__((always_inline)) AMXI_TARGET

#define VBMI_TARGET                                                                                \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,avx512vbmi")))
#define VBMI_INLINE static inline __attribute__((always_inline)) VBMI_TARGET

int lq_cpu_vnni(void) { /* lq_cpu_avx512 also honours LQ_CPU_KERNELS=portable */
    return lq_cpu_avx512() && __builtin_cpu_supports("avx512vnni");
}

int lq_cpu_vbmi(void) {
    return lq_cpu_vnni() && __builtin_cpu_supports("avx512vbmi");
}

size_t lq_ws_gptq_vnni(const lq_qlinear *w, int64_t m, int xbits) {
    return lq_gptq_qx_ws(w, m, xbits);
}

typedef struct vnni_job {
    const lq_qlinear *w;
    int64_t           ab, nkb, kp, m; /* kp: bytes per row of xp */
    const uint8_t    *xp;  /* [m, kp] */
    const float      *xsf; /* [m, nkb] block sums of xq (as float, exact) */
    const float      *dx;  /* [m, nkb] */
    float            *y;
    /* the word rows the tiles read: qweight (ldq = n, qcol0 = 0), or a column block of it
     * copied contiguous (see GPTQ_VNNI_RANGE) */
    const uint32_t *qw;
    int64_t         ldq, qcol0;
    /* AWQ codes to repack into each 128-column block from 16 rows instead of copying qw's
     * (lq_gemm_awq_vnni; the descriptor w is then the GPTQ view of it, without codes), and the
     * thread's buffer for them: k / 8 word rows x 128 columns */
    const lq_qlinear *awq;
    uint32_t         *awq_blk;
    int               amx; /* from VNNI_COPY_M rows on AMX tiles (gptq_amx_cols) */
    /* m <= VNNI_M: word rows [sl0, sl1) of each block (relative to its first; sl1 0: to its
     * end), and the thread's int32 sums of the slices before the last ([vector - pv0][row][lane];
     * see VNNI_SLICE) */
    int64_t  sl0, sl1, pv0;
    int32_t *part;
} vnni_job;

/* The zero points of 16 columns starting at col (a multiple of 16) of group g, as float. */
VNNI_INLINE __m512 gptq_vnni_zeros(const lq_qlinear *w, int64_t g, int64_t col, int nc) {
    const int       b   = w->bits;
    const int64_t   zw = w->n * b / 32, bit0 = col * b; /* 3-bit: col * 3 need not be whole words */
    const uint32_t *qz  = (const uint32_t *)w->qzeros + g * zw + (bit0 >> 5);
    const int       off = (int)(bit0 & 31);
    const int64_t   nw = (off + nc * b + 31) / 32, left = zw - (bit0 >> 5); /* words to read */
    const __m512i   words = _mm512_maskz_loadu_epi32(
          (__mmask16)((1u << (nw < left ? nw : left)) - 1u), (const void *)qz);
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i bit =
        _mm512_add_epi32(_mm512_mullo_epi32(lane, _mm512_set1_epi32(b)), _mm512_set1_epi32(off));
    const __m512i wi = _mm512_srli_epi32(bit, 5), sh = _mm512_and_si512(bit, _mm512_set1_epi32(31));
    /* a field straddling two words takes its high bits from the next (shift 32 gives 0) */
    const __m512i v =
        _mm512_or_si512(_mm512_srlv_epi32(_mm512_permutexvar_epi32(wi, words), sh),
                        _mm512_sllv_epi32(_mm512_permutexvar_epi32(
                                              _mm512_add_epi32(wi, _mm512_set1_epi32(1)), words),
                                          _mm512_sub_epi32(_mm512_set1_epi32(32), sh)));
    const __m512i mask = _mm512_set1_epi32((1 << b) - 1);
    /* v1 stores zero - 1: add one back and mask, as lq_gptq_zero */
    return _mm512_cvtepi32_ps(
        _mm512_and_si512(_mm512_add_epi32(_mm512_and_si512(v, mask), _mm512_set1_epi32(1)), mask));
}

/* block kb's scales and zero points (as float) of the NV vectors of columns from i0 */
VNNI_INLINE void gptq_vnni_sz(const vnni_job *j, int64_t kb, int64_t i0,
                              const __mmask16 vm[VNNI_NV], const int NV, __m512 sc[VNNI_NV],
                              __m512 zf[VNNI_NV]) {
    const lq_qlinear *w = j->w;
    const int64_t     g = kb * j->ab / w->group_size;
    for (int jv = 0; jv < NV; jv++) {
        const int64_t col = i0 + 16 * jv;
        sc[jv]            = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(
                       vm[jv], (const void *)((const uint16_t *)w->scales + g * w->n + col)));
        zf[jv]            = gptq_vnni_zeros(w, g, col, __builtin_popcount(vm[jv]));
    }
}

/* y[rr, i0 + 16 jv + l] (+)= block kb's integer sums acc[jv] of row rr (columns in order)
 * scaled: s * dx * (acc - z * sum(xq)). First block (kb == 0) assigns. */
VNNI_INLINE void gptq_vnni_flush_row(const vnni_job *j, int64_t kb, int64_t i0,
                                     const __mmask16 vm[VNNI_NV], int64_t rr, const int NV,
                                     const __m512 sc[VNNI_NV], const __m512 zf[VNNI_NV],
                                     const __m512i acc[VNNI_NV]) {
    const __m512 xs = _mm512_set1_ps(j->xsf[rr * j->nkb + kb]);
    const __m512 d  = _mm512_set1_ps(j->dx[rr * j->nkb + kb]);
    float       *yr = j->y + rr * j->w->n + i0;
    for (int jv = 0; jv < NV; jv++) {
        /* acc - z * sum(xq), one rounding (none with int8: all below 2^24) */
        const __m512 t  = _mm512_fnmadd_ps(zf[jv], xs, _mm512_cvtepi32_ps(acc[jv]));
        const __m512 f  = _mm512_mul_ps(sc[jv], d);
        __m512       yv = kb ? _mm512_maskz_loadu_ps(vm[jv], yr + 16 * jv) : _mm512_setzero_ps();
        _mm512_mask_storeu_ps(yr + 16 * jv, vm[jv], _mm512_fmadd_ps(t, f, yv));
    }
}

/* rows r0 .. r0 + M - 1 of it */
VNNI_INLINE void gptq_vnni_flush(const vnni_job *j, int64_t kb, int64_t i0,
                                 const __mmask16 vm[VNNI_NV], int64_t r0, const int M, const int NV,
                                 __m512i acc[VNNI_M][VNNI_NV]) {
    __m512 sc[VNNI_NV], zf[VNNI_NV];
    gptq_vnni_sz(j, kb, i0, vm, NV, sc, zf);
    for (int r = 0; r < M; r++)
        gptq_vnni_flush_row(j, kb, i0, vm, r0 + r, NV, sc, zf, acc[r]);
}

/* GCC 12 sees the partial sums' loads and stores where it has inlined a job without them (part
 * NULL, sl0 0: never run) and calls them out of bounds */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Warray-bounds"
#endif
/* y[r0 + r, i0 + 16 jv + l] (+)= block kb of the product, r < M, jv < NV; the last vector's
 * valid lanes are lastm. First block (kb == 0) assigns. */
VNNI_INLINE void gptq_vnni_tile(const vnni_job *j, int64_t kb, int64_t i0, __mmask16 lastm,
                                int64_t r0, const int b, const int M, const int NV) {
    const lq_qlinear *w = j->w;
    const int64_t     k = w->k, ab = j->ab;
    const int         P = 8 / b, vpw = 32 / b;
    const int64_t     c0 = kb * ab, c1 = c0 + ab < k ? c0 + ab : k;
    const uint32_t   *qw    = j->qw - j->qcol0;
    const int64_t     ldq   = j->ldq;
    const __m512i     bmask = _mm512_set1_epi8((char)((1 << b) - 1));
    __mmask16         vm[VNNI_NV];
    for (int jv = 0; jv < NV; jv++)
        vm[jv] = jv == NV - 1 ? lastm : (__mmask16)0xffff;
    __m512i       acc[VNNI_M][VNNI_NV];
    const int64_t wa = c0 / vpw, wb = c1 / vpw;
    const int64_t w1   = j->sl1 > 0 && j->sl1 < wb - wa ? wa + j->sl1 : wb; /* sl1 0: to the end */
    int32_t      *part = j->part ? j->part + ((i0 / 16 - j->pv0) * M) * 16 : NULL;
    if (j->sl0 && wa + j->sl0 >= wb)
        return; /* a short last block, already flushed */
    for (int r = 0; r < M; r++)
        for (int jv = 0; jv < NV; jv++)
            acc[r][jv] = j->sl0 ? _mm512_loadu_si512((const void *)(part + (jv * M + r) * 16))
                                : _mm512_setzero_si512();
    for (int64_t wr = wa + j->sl0; wr < w1; wr++) {
        const uint32_t *row = qw + wr * ldq + i0;
        __m512i         wv[VNNI_NV];
        for (int jv = 0; jv < NV; jv++)
            wv[jv] = _mm512_maskz_loadu_epi32(vm[jv], (const void *)(row + 16 * jv));
        const uint8_t *xw = j->xp + wr * vpw;
        for (int s = 0; s < P; s++) {
            __m512i q[VNNI_NV];
            for (int jv = 0; jv < NV; jv++)
                q[jv] = _mm512_and_si512(_mm512_srli_epi32(wv[jv], (unsigned)(s * b)), bmask);
            for (int r = 0; r < M; r++) {
                int32_t xv;
                memcpy(&xv, xw + (r0 + r) * j->kp + s * 4, 4);
                const __m512i xb = _mm512_set1_epi32(xv);
                for (int jv = 0; jv < NV; jv++)
                    acc[r][jv] = _mm512_dpbusd_epi32(acc[r][jv], q[jv], xb);
            }
        }
    }
    if (w1 < wb) { /* a slice before the block's last */
        for (int r = 0; r < M; r++)
            for (int jv = 0; jv < NV; jv++)
                _mm512_storeu_si512((void *)(part + (jv * M + r) * 16), acc[r][jv]);
        return;
    }
    gptq_vnni_flush(j, kb, i0, vm, r0, M, NV, acc);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

/* AMX-INT8 tiles for mr <= 16 activation rows: 0-3 C (mr x 16 int32), 4 A (mr x 64 bytes),
 * 5-7 B (16 x 64 bytes) */
AMXI_INLINE void amxi_config(int mr) {
    lq_amx_cfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 8; t++) {
        c.colsb[t] = 64;
        c.rows[t]  = (uint8_t)(t < 5 ? mr : 16);
    }
    _tile_loadconfig(&c);
}

/* not inlined: an AMX target, called from VNNI ones */
AMXI_TARGET static void amxi_release(void) {
    _tile_release();
}

/* tiles 0-3 = sum over steps s < ns of A (the configured rows of 64 bytes from a + 64 s, lda
 * apart) times the four B tiles from b + bstep s, boff apart, rows ldb apart */
AMXI_INLINE void amxi_c4(const void *a, int64_t lda, const void *b, int64_t ldb, int64_t boff,
                         int64_t bstep, int64_t ns) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t s = 0; s < ns; s++) {
        const char *t = (const char *)b + s * bstep;
        _tile_loadd(4, (const char *)a + 64 * s, lda);
        _tile_loadd(5, t, ldb);
        _tile_loadd(6, t + boff, ldb);
        _tile_loadd(7, t + 2 * boff, ldb);
        _tile_dpbsud(0, 4, 5);
        _tile_dpbsud(1, 4, 6);
        _tile_dpbsud(2, 4, 7);
        _tile_loadd(5, t + 3 * boff, ldb);
        _tile_dpbsud(3, 4, 5);
    }
}

/* block kb's sums of rows r0 .. (as configured) into tiles 0-3, from gptq_amx_cols' B tiles */
AMXI_INLINE void gptq_amx_block(const vnni_job *j, const uint8_t *bb, int64_t kb, int64_t r0) {
    const int64_t ab = j->ab, k = j->w->k, g0 = kb * ab / 64;
    const int64_t g1 = (kb * ab + ab < k ? kb * ab + ab : k) / 64;
    amxi_c4(j->xp + r0 * j->kp + g0 * 64, j->kp, bb + g0 * VNNI_NV * 1024, 64, 1024, VNNI_NV * 1024,
            g1 - g0);
}

/* From VNNI_COPY_M rows where the CPU has AMX-INT8 (j->amx: bits 2, 4 or 8, blocks of whole
 * 64-channel groups): columns [16 v, 16 v + 64) of every row. A word row shifted by s * b and
 * masked per byte is slice s of xp's order, so the codes of 64 channels (2b word rows of 8/b
 * slices) and 16 columns, slice-major, are an AMX B tile whose row t meets bytes 4t .. 4t + 3 of
 * the activations' 64: bb gets the block's tiles (k / 64 groups x 4, 1 KiB each), then
 * tdpbsud (signed activations x unsigned codes) of up to 16 rows into four C tiles gives
 * vpdpbusd's integer sums, flushed per block as the tiles do. acc: 16 x 64 int32; *cfg: the
 * rows the tiles are configured for. Not inlined: its target has AMX, its callers' do not. */
__attribute__((noinline)) AMXI_TARGET static void
gptq_amx_cols(const vnni_job *j, int64_t v, const int b, uint8_t *bb, int32_t *acc, int *cfg) {
    const lq_qlinear *w = j->w;
    const int64_t     n = w->n, k = w->k, m = j->m, i0 = v * 16, ldq = j->ldq;
    const uint32_t   *qw = j->qw - j->qcol0;
    const int         P = 8 / b, R = 2 * b;
    const __m512i     bmask = _mm512_set1_epi8((char)((1 << b) - 1));
    __mmask16         vm[VNNI_NV];
    for (int jv = 0; jv < VNNI_NV; jv++) {
        const int64_t left = n - i0 - 16 * jv;
        vm[jv]             = left >= 16  ? (__mmask16)0xffff
                             : left <= 0 ? (__mmask16)0
                                         : (__mmask16)((1u << left) - 1u);
    }
    for (int64_t g = 0; g < k / 64; g++)
        for (int jv = 0; jv < VNNI_NV; jv++) {
            uint8_t *t = bb + (g * VNNI_NV + jv) * 1024;
            for (int wl = 0; wl < R; wl++) {
                const __m512i wv = _mm512_maskz_loadu_epi32(
                    vm[jv], (const void *)(qw + (g * R + wl) * ldq + i0 + 16 * jv));
                for (int s = 0; s < P; s++)
                    _mm512_storeu_si512(
                        (void *)(t + (wl * P + s) * 64),
                        _mm512_and_si512(_mm512_srli_epi32(wv, (unsigned)(s * b)), bmask));
            }
        }
    for (int64_t r0 = 0; r0 < m; r0 += 16) {
        const int mr = m - r0 < 16 ? (int)(m - r0) : 16;
        if (*cfg != mr) {
            amxi_config(mr);
            *cfg = mr;
        }
        /* block kb + 1's tile products are issued before block kb's sums are flushed, so that
         * the tile unit and the vector epilogue overlap (as nf4_amx_rows) */
        gptq_amx_block(j, bb, 0, r0);
        for (int64_t kb = 0; kb < j->nkb; kb++) {
            _tile_stored(0, acc, 256);
            _tile_stored(1, acc + 16, 256);
            _tile_stored(2, acc + 32, 256);
            _tile_stored(3, acc + 48, 256);
            if (kb + 1 < j->nkb)
                gptq_amx_block(j, bb, kb + 1, r0);
            __m512 sc[VNNI_NV], zf[VNNI_NV];
            gptq_vnni_sz(j, kb, i0, vm, VNNI_NV, sc, zf);
            for (int r = 0; r < mr; r++) {
                __m512i a[VNNI_NV];
                for (int jv = 0; jv < VNNI_NV; jv++)
                    a[jv] = _mm512_loadu_si512((const void *)(acc + r * 64 + 16 * jv));
                gptq_vnni_flush_row(j, kb, i0, vm, r0 + r, VNNI_NV, sc, zf, a);
            }
        }
    }
}

/* 3-bit (needs VBMI): a unit of 32 channels is 3 word rows, 96 bits a column. Two qword views
 * of each column, words 0|1 (bits 0..63) and 1|2 (bits 32..95), hold every channel whole, and
 * vpmultishiftqb picks 8 channels' fields into the bytes of a qword: 0-7 and 8-15 from the
 * first, 16-23 and 24-31 from the second. A qword is one column, so the two dword lanes of it
 * sum different channels of that column: a vector holds 8 columns (unpacklo/hi of the words give
 * columns 0,1,4,5,.. and 2,3,6,7,..), and the lane pairs are added and put back in column order
 * at the block's flush. Activations in channel order, one 64-bit broadcast per 8 channels. */
VBMI_INLINE void gptq3_vnni_tile(const vnni_job *j, int64_t kb, int64_t i0, __mmask16 lastm,
                                 int64_t r0, const int b, const int M, const int NV) {
    const lq_qlinear *w = j->w;
    const int64_t     k = w->k, ab = j->ab;
    const int64_t     c0 = kb * ab, c1 = c0 + ab < k ? c0 + ab : k;
    const uint32_t   *qw  = j->qw - j->qcol0;
    const int64_t     ldq = j->ldq;
    /* bit offsets of channels 8t .. 8t + 7 in their qword view (t < 2: words 0|1; else 1|2) */
    const __m512i ctl[4] = {
        _mm512_set1_epi64(0x15120F0C09060300LL), _mm512_set1_epi64(0x2D2A2724211E1B18LL),
        _mm512_set1_epi64(0x25221F1C19161310LL), _mm512_set1_epi64(0x3D3A3734312E2B28LL)};
    const __m512i m7 = _mm512_set1_epi8(7);
    /* the low dword of qword q of the (lo, hi) views -> column c */
    const __m512i order =
        _mm512_set_epi32(30, 28, 14, 12, 26, 24, 10, 8, 22, 20, 6, 4, 18, 16, 2, 0);
    __mmask16 vm[VNNI_NV];
    __m512i   out[VNNI_M][VNNI_NV];
    (void)b;
    for (int jv = 0; jv < NV; jv++)
        vm[jv] = jv == NV - 1 ? lastm : (__mmask16)0xffff;
    for (int jv = 0; jv < NV; jv++) { /* one 16-column vector at a time: 8 accumulators a row */
        __m512i acc[VNNI_M][2];
        for (int r = 0; r < M; r++)
            acc[r][0] = acc[r][1] = _mm512_setzero_si512();
        for (int64_t u = c0 / 32; u < c1 / 32; u++) {
            const uint32_t *row = qw + 3 * u * ldq + i0 + 16 * jv;
            const __m512i   a   = _mm512_maskz_loadu_epi32(vm[jv], (const void *)row);
            const __m512i   bw  = _mm512_maskz_loadu_epi32(vm[jv], (const void *)(row + ldq));
            const __m512i   cw  = _mm512_maskz_loadu_epi32(vm[jv], (const void *)(row + 2 * ldq));
            const __m512i view[2][2] = {
                {_mm512_unpacklo_epi32(a, bw), _mm512_unpacklo_epi32(bw, cw)},
                {_mm512_unpackhi_epi32(a, bw), _mm512_unpackhi_epi32(bw, cw)}};
            for (int t = 0; t < 4; t++) {
                __m512i q[2];
                for (int h = 0; h < 2; h++)
                    q[h] =
                        _mm512_and_si512(_mm512_multishift_epi64_epi8(ctl[t], view[h][t >> 1]), m7);
                for (int r = 0; r < M; r++) {
                    int64_t xv;
                    memcpy(&xv, j->xp + (r0 + r) * j->kp + u * 32 + 8 * t, 8);
                    const __m512i xb = _mm512_set1_epi64(xv);
                    for (int h = 0; h < 2; h++)
                        acc[r][h] = _mm512_dpbusd_epi32(acc[r][h], q[h], xb);
                }
            }
        }
        for (int r = 0; r < M; r++) { /* lane pairs summed, columns in order */
            const __m512i s0 = _mm512_add_epi32(acc[r][0], _mm512_srli_epi64(acc[r][0], 32));
            const __m512i s1 = _mm512_add_epi32(acc[r][1], _mm512_srli_epi64(acc[r][1], 32));
            out[r][jv]       = _mm512_permutex2var_epi32(s0, order, s1);
        }
    }
    gptq_vnni_flush(j, kb, i0, vm, r0, M, NV, out);
}

/* AWQ word row wr (channels 8 wr .. 8 wr + 7), words [j0, j0 + 16) -> 128 columns in GPTQ's
 * layout, field-major: dst[16 f + l] = field f of word j0 + l of the 8 channels (an 8 x 8 nibble
 * transpose, three swap stages); see lq_gemm_awq_vnni. The prefetch goes to L2 as in
 * awq_vnni_seq (16 rows, 1 thread, best of 4: 4096 x 11008 7.6 -> 6.9 ms, 11008 x 4096 7.7 ->
 * 7.0; Zen 4). */
#define AWQ_PF_ROWS 4
VNNI_INLINE void awq_repack_group(const lq_qlinear *w, int64_t wr, int64_t j0, uint32_t *dst) {
    const int64_t   nw = w->n / 8;
    const uint32_t *qw = (const uint32_t *)w->qweight + wr * 8 * nw;
    const __mmask16 wm = (__mmask16)((1u << (nw - j0 < 16 ? nw - j0 : 16)) - 1u);
    __m512i         r[8];
    for (int t = 0; t < 8; t++) {
        _mm_prefetch((const char *)(qw + (t + 8 * AWQ_PF_ROWS) * nw + j0), _MM_HINT_T1);
        r[t] = _mm512_maskz_loadu_epi32(wm, (const void *)(qw + t * nw + j0));
    }
    /* transpose: afterwards r[f] holds field f of rows 0..7 as nibbles 0..7 */
    for (int sh = 4, st = 1; st < 8; sh *= 2, st *= 2) {
        const __m512i mk = _mm512_set1_epi32(sh == 4   ? 0x0F0F0F0F
                                             : sh == 8 ? 0x00FF00FF
                                                       : 0x0000FFFF);
        for (int t = 0; t < 8; t++) {
            if (t & st)
                continue;
            const __m512i d = _mm512_and_si512(
                _mm512_xor_si512(_mm512_srli_epi32(r[t], (unsigned)sh), r[t + st]), mk);
            r[t + st] = _mm512_xor_si512(r[t + st], d);
            r[t]      = _mm512_xor_si512(r[t], _mm512_slli_epi32(d, (unsigned)sh));
        }
    }
    for (int f = 0; f < 8; f++)
        _mm512_storeu_si512((void *)(dst + 16 * f), r[f]);
}

/* One thread's column vectors [v0, v1): blocks of VNNI_NV vectors, then single vectors (the
 * last may be partial). One loop for both tiles: NAME's target (INL) must include its TILE's. */
#define VNNI_TILE(TILE, J, KB, V, NVV, R0, MM)                                                     \
    do {                                                                                           \
        const __mmask16 lm_ = (V) + (NVV)-1 < nfull ? (__mmask16)0xffff : tailm;                   \
        switch (MM) {                                                                              \
        case 1:                                                                                    \
            TILE(J, KB, (V)*16, lm_, R0, b, 1, NVV);                                               \
            break;                                                                                 \
        case 2:                                                                                    \
            TILE(J, KB, (V)*16, lm_, R0, b, 2, NVV);                                               \
            break;                                                                                 \
        case 3:                                                                                    \
            TILE(J, KB, (V)*16, lm_, R0, b, 3, NVV);                                               \
            break;                                                                                 \
        default:                                                                                   \
            TILE(J, KB, (V)*16, lm_, R0, b, 4, NVV);                                               \
            break;                                                                                 \
        }                                                                                          \
    } while (0)
#define GPTQ_VNNI_RANGE(NAME, INL, TILE)                                                           \
    INL void NAME(const vnni_job *j, int64_t v0, int64_t v1, const int b) {                        \
        const int64_t   n = j->w->n, m = j->m;                                                     \
        const int64_t   nfull = n / 16; /* vectors with 16 valid columns */                        \
        const __mmask16 tailm = (__mmask16)((1u << (n % 16)) - 1u);                                \
        if (m <= VNNI_M) {                                                                         \
            vnni_job      jb  = *j;                                                                \
            const int64_t wpb = j->ab * b / 32; /* word rows a block */                            \
            const int64_t sl  = b == 4 || b == 8 ? VNNI_SLICE : wpb;                               \
            jb.part = wpb > sl ? malloc((size_t)((v1 - v0) * m * 16) * sizeof(int32_t)) : NULL;    \
            jb.pv0  = v0;                                                                          \
            for (int64_t kb = 0; kb < j->nkb; kb++)                                                \
                for (int64_t s0 = 0; s0 < wpb; s0 += jb.part ? sl : wpb) {                         \
                    jb.sl0    = s0;                                                                \
                    jb.sl1    = jb.part && s0 + sl < wpb ? s0 + sl : 0;                            \
                    int64_t v = v0;                                                                \
                    for (; v + VNNI_NV <= v1; v += VNNI_NV)                                        \
                        VNNI_TILE(TILE, &jb, kb, v, VNNI_NV, 0, m);                                \
                    for (; v < v1; v++)                                                            \
                        VNNI_TILE(TILE, &jb, kb, v, 1, 0, m);                                      \
                }                                                                                  \
            free(jb.part);                                                                         \
            return;                                                                                \
        }                                                                                          \
        /* a column block's word rows, copied contiguous once: in qweight they lie n words         \
         * apart, and with n a power of two they fall into a few cache sets (AWQ: a block of       \
         * 128 columns, repacked there from its own codes) */                                      \
        const int64_t rows = j->w->k * b / 32;                                                     \
        uint8_t      *bb   = j->amx ? malloc((size_t)(j->w->k * 64)) : NULL; /* gptq_amx_cols */   \
        uint32_t     *blk  = j->awq                    ? j->awq_blk                                \
                             : m >= VNNI_COPY_M && !bb ? malloc((size_t)(rows * 16 * VNNI_NV) * 4) \
                                                       : NULL;                                     \
        int           cfg  = 0;                                                                    \
        _Alignas(64) int32_t acc[16 * 64];                                                         \
        int64_t              v = v0;                                                               \
        for (; v + VNNI_NV <= v1; v += VNNI_NV) {                                                  \
            vnni_job jb = *j;                                                                      \
            if (j->awq) { /* v0 and v1 are whole 128-column blocks (lq_gemm_awq_vnni) */           \
                const int64_t va = v - (v - v0) % 8;                                               \
                if (v == va)                                                                       \
                    for (int64_t wr = 0; wr < rows; wr++)                                          \
                        awq_repack_group(j->awq, wr, 2 * v, blk + wr * 128);                       \
                jb.qw    = blk;                                                                    \
                jb.ldq   = 128;                                                                    \
                jb.qcol0 = va * 16;                                                                \
            } else if (blk) {                                                                      \
                const int64_t nc = n - v * 16 < 16 * VNNI_NV ? n - v * 16 : 16 * VNNI_NV;          \
                for (int64_t wr = 0; wr < rows; wr++)                                              \
                    memcpy(blk + wr * 16 * VNNI_NV, j->qw + wr * j->ldq + v * 16, (size_t)nc * 4); \
                jb.qw    = blk;                                                                    \
                jb.ldq   = 16 * VNNI_NV;                                                           \
                jb.qcol0 = v * 16;                                                                 \
            }                                                                                      \
            if (bb) {                                                                              \
                gptq_amx_cols(&jb, v, b, bb, acc, &cfg);                                           \
                continue;                                                                          \
            }                                                                                      \
            for (int64_t r0 = 0; r0 < m; r0 += VNNI_M)                                             \
                for (int64_t kb = 0; kb < j->nkb; kb++)                                            \
                    VNNI_TILE(TILE, &jb, kb, v, VNNI_NV, r0, m - r0 < VNNI_M ? m - r0 : VNNI_M);   \
        }                                                                                          \
        if (!j->awq)                                                                               \
            free(blk);                                                                             \
        if (cfg)                                                                                   \
            amxi_release();                                                                        \
        free(bb);                                                                                  \
        for (; v < v1; v++)                                                                        \
            for (int64_t r0 = 0; r0 < m; r0 += VNNI_M)                                             \
                for (int64_t kb = 0; kb < j->nkb; kb++)                                            \
                    VNNI_TILE(TILE, j, kb, v, 1, r0, m - r0 < VNNI_M ? m - r0 : VNNI_M);           \
    }
GPTQ_VNNI_RANGE(gptq_vnni_range, VNNI_INLINE, gptq_vnni_tile)

GPTQ_VNNI_RANGE(gptq3_vnni_range, VBMI_INLINE, gptq3_vnni_tile)

typedef void (*gptq_vnni_fn)(const vnni_job *j, int64_t v0, int64_t v1);
#define GPTQ_VNNI_INST(B)                                                                          \
    VNNI_TARGET static void gptq_vnni_b##B(const vnni_job *j, int64_t v0, int64_t v1) {            \
        gptq_vnni_range(j, v0, v1, B);                                                             \
    }
GPTQ_VNNI_INST(2)
GPTQ_VNNI_INST(4)
GPTQ_VNNI_INST(8)
VBMI_TARGET static void gptq_vnni_b3(const vnni_job *j, int64_t v0, int64_t v1) {
    gptq3_vnni_range(j, v0, v1, 3);
}
static const gptq_vnni_fn k_gptq_vnni[4] = {gptq_vnni_b2, gptq_vnni_b3, gptq_vnni_b4,
                                            gptq_vnni_b8}; /* bits 2, 3, 4, 8 */

/* awq: see vnni_job (then xbits 8, m >= VNNI_COPY_M, w->n a multiple of 128) */
static lq_status gptq_vnni_run(const lq_qlinear *w, const lq_qlinear *awq, const float *x,
                               int64_t m, float *y, void *ws, int xbits, int nthreads) {
    vnni_job j = {0};
    j.w        = w;
    j.awq      = awq;
    j.ab       = lq_gptq_qx_block(w);
    if (!j.ab || xbits != 8)
        return LQ_ERR_UNSUPPORTED;
    j.nkb        = (w->k + j.ab - 1) / j.ab;
    j.kp         = lq_align_up(w->k, 64);
    j.m          = m;
    j.amx =
        m >= VNNI_COPY_M && w->bits != 3 && j.ab % 64 == 0 && w->k % 64 == 0 && lq_cpu_amx_int8();
    uint8_t *xp  = ws;
    float   *xsf = (float *)(void *)(xp + m * j.kp), *dx = xsf + m * j.nkb;
    j.xp                    = xp;
    j.xsf                   = xsf;
    j.dx                    = dx;
    j.y                     = y;
    j.qw                    = (const uint32_t *)w->qweight;
    j.ldq                   = w->n;
    const int          nt   = lq_cpu_threads(nthreads);
    const int64_t      nvec = (w->n + 15) / 16;
    const int          bi   = w->bits == 2 ? 0 : w->bits == 3 ? 1 : w->bits == 4 ? 2 : 3;
    const gptq_vnni_fn fn   = k_gptq_vnni[bi];
    const size_t       per  = awq ? (size_t)(w->k / 8 * 128) : 0; /* words a thread */
    uint32_t          *blks = awq ? malloc(per * 4 * (size_t)nt) : NULL;
    if (awq && !blks)
        return LQ_ERR_NOMEM;
#pragma omp parallel num_threads(nt)
    {
        const int64_t th = omp_get_thread_num(), tn = omp_get_num_threads();
#pragma omp for schedule(static)
        for (int64_t r = 0; r < m; r++)
            lq_gptq_qx_row(w, j.ab, x + r * w->k, xp + r * j.kp, xsf + r * j.nkb, dx + r * j.nkb);
        /* column vectors split evenly, in whole blocks where possible (AWQ: of 128 columns) */
        const int64_t unit = awq ? 2 * VNNI_NV : VNNI_NV, nblk = (nvec + unit - 1) / unit;
        const int64_t b0 = nblk * th / tn, b1 = nblk * (th + 1) / tn;
        const int64_t v0 = b0 * unit, v1 = b1 * unit < nvec ? b1 * unit : nvec;
        vnni_job jt = j;
        jt.awq_blk  = awq ? blks + per * (size_t)th : NULL;
        if (v0 < v1)
            fn(&jt, v0, v1);
    }
    free(blks);
    return LQ_OK;
}

lq_status lq_gemm_gptq_vnni(const lq_qlinear *w, const float *x, int64_t m, float *y, void *ws,
                            int xbits, int nthreads) {
    return gptq_vnni_run(w, NULL, x, m, y, ws, xbits, nthreads);
}

/* ---------------------------------------------------------------------------------------
 * NF4: the semantics of lq_gemm_nf4_qx_ref. A column's codes lie along k, while a vector's
 * lanes must be columns: per thread, a block of 64 columns and NF4_KC channels is decoded once
 * (nibbles to bytes, vpshufb against the int8 code book offset by 128 to vpdpbusd's unsigned
 * operand), transposed 16 x 16 dwords into a buffer [channel quad][column] beside each block's
 * absmax * scale, and every row runs over it: sum((tq + 128) * xq) - 128 * sum(xq) is the
 * reference's sum exactly.
 * --------------------------------------------------------------------------------------- */
/* channels decoded at once: 32 KiB of codes a thread, which the tiles then read from L1 (1024
 * channels, 64 KiB, from L2: 4096 x 4096 at 16 rows, 2 threads, 0.80 -> 0.69 ms; 1 thread
 * 1.46-1.50 -> 1.36-1.39; 4096 x 11008 at 512 rows 91 -> 85-88 ms; 5-10% slower at 16 rows of
 * 4096 x 11008 on one thread, 256 channels slower everywhere) */
#define NF4_KC 512

typedef struct nf4_job {
    const lq_qlinear *w;
    int64_t           ab, nkb, kp, m;
    const int8_t     *xp; /* [m, kp] */
    const int32_t    *xs; /* [m, nkb] block sums of xq */
    const float      *dx; /* [m, nkb] */
    float             ts; /* code book scale */
    uint8_t           tq[16]; /* tq + 128 */
    int               amx;    /* the transposed path on AMX tiles (nf4_amx_rows) */
    int               row1;   /* 1-2 rows, 64-channel blocks: nf4_row1_group */
    float            *y;
} nf4_job;

size_t lq_ws_nf4_vnni(const lq_qlinear *w, int64_t m) {
    const int64_t ab = lq_nf4_qx_block(w);
    return ab ? (size_t)(m * lq_align_up(w->k, 128) + 2 * m * (w->k / ab) * 4) : 0;
}

/* where channel c's int8 activation goes in a row of xp: layout 0 in order (the transposed
 * kernel), 1 per 64 channels the even ones then the odd (nf4_rows_group), 2 per 128 channels
 * the even ones of both 64-channel blocks then the odd (nf4_row1_group) */
static int64_t nf4_xpos(int layout, int64_t c) {
    if (layout == 1)
        return (c & ~(int64_t)63) + (c & 1) * 32 + (c & 63) / 2;
    if (layout == 2)
        return (c & ~(int64_t)127) + (c & 1) * 64 + (c & 64) / 2 + (c & 63) / 2;
    return c;
}

/* r[i] lane l -> r[l] lane i (unpack 32, unpack 64, then 128-bit lanes twice) */
VNNI_INLINE void tr16x16_epi32(__m512i r[16]) {
    __m512i t[16], u[16];
    for (int a = 0; a < 8; a++) {
        t[2 * a]     = _mm512_unpacklo_epi32(r[2 * a], r[2 * a + 1]);
        t[2 * a + 1] = _mm512_unpackhi_epi32(r[2 * a], r[2 * a + 1]);
    }
    for (int b = 0; b < 4; b++) { /* u[4b + c] lane L: column 4L + c of rows 4b .. 4b + 3 */
        u[4 * b]     = _mm512_unpacklo_epi64(t[4 * b], t[4 * b + 2]);
        u[4 * b + 1] = _mm512_unpackhi_epi64(t[4 * b], t[4 * b + 2]);
        u[4 * b + 2] = _mm512_unpacklo_epi64(t[4 * b + 1], t[4 * b + 3]);
        u[4 * b + 3] = _mm512_unpackhi_epi64(t[4 * b + 1], t[4 * b + 3]);
    }
    for (int c = 0; c < 4; c++) {
        const __m512i v0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44);
        const __m512i v1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xEE);
        const __m512i v2 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44);
        const __m512i v3 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xEE);
        r[c]             = _mm512_shuffle_i32x4(v0, v2, 0x88);
        r[4 + c]         = _mm512_shuffle_i32x4(v0, v2, 0xDD);
        r[8 + c]         = _mm512_shuffle_i32x4(v1, v3, 0x88);
        r[12 + c]        = _mm512_shuffle_i32x4(v1, v3, 0xDD);
    }
}

/* Whole blocks a row: nf4_vnni_range takes a block of 64 columns' absmax in place, or decodes
 * double quant's for all of k at once (else a column's are copied a range at a time); the
 * bytes a thread needs for that decode. */
static size_t nf4_vnni_amd_bytes(const lq_qlinear *w) {
    return w->k % w->group_size == 0 && w->nested_blocksize > 0
               ? (size_t)(64 * (w->k / w->group_size)) * sizeof(float)
               : 0;
}

/* Columns [i0, i0 + 64) (zeros past n), channels [c0, c1): buf[q * 64 + col] = the unsigned
 * codes of channels c0 + 4q .. + 3, sc[b * 64 + col] = absmax * ts of block c0 / ab + b. */
VNNI_INLINE void nf4_vnni_decode(const nf4_job *j, int64_t i0, int64_t c0, int64_t c1,
                                 const float *amb, uint32_t *buf, float *sc) {
    const lq_qlinear *w = j->w;
    const int64_t     n = w->n, k = w->k, ab = j->ab;
    const uint8_t    *qb  = w->qweight;
    const __m512i     lut = _mm512_broadcast_i32x4(_mm_loadu_si128((const void *)j->tq));
    const __m512i     m0f = _mm512_set1_epi16(0x000F);
    /* the next range's codes (of the next 64 columns after the last) into L2 while this one's
     * tiles run: 64 rows' 256 bytes each are too many short streams for the hardware
     * prefetcher (16 rows, 1 thread, best of 3, Zen 4: 11008 x 4096 with double quant 8.8 ->
     * 7.9 ms, 4096 x 11008 9.3 -> 8.4; 4096 x 4096 unchanged) */
    for (int64_t l = 0; l < 64; l++) {
        const int64_t i = c1 < k ? i0 + l : i0 + 64 + l, c = c1 < k ? c1 : 0;
        const int64_t e = c + NF4_KC < k ? c + NF4_KC : k;
        if (i < n)
            for (int64_t o = 0; o < (e - c) / 2; o += 64)
                _mm_prefetch((const char *)(qb + (i * k + c) / 2 + o), _MM_HINT_T1);
    }
    for (int jv = 0; jv < 4; jv++) {
        for (int64_t c = c0; c < c1; c += 64) {
            __m512i r[16];
            for (int l = 0; l < 16; l++) {
                const int64_t i = i0 + 16 * jv + l;
                if (i >= n) {
                    r[l] = _mm512_setzero_si512();
                    continue;
                }
                const __m512i wd = _mm512_cvtepu8_epi16(
                    _mm256_loadu_si256((const void *)(qb + (i * k + c) / 2)));
                /* the first element of a byte is its high nibble */
                const __m512i codes = _mm512_or_si512(
                    _mm512_srli_epi16(wd, 4), _mm512_slli_epi16(_mm512_and_si512(wd, m0f), 8));
                r[l] = _mm512_shuffle_epi8(lut, codes);
            }
            tr16x16_epi32(r);
            for (int q = 0; q < 16; q++)
                _mm512_storeu_si512((void *)(buf + ((c - c0) / 4 + q) * 64 + 16 * jv), r[q]);
        }
        /* a column's NF4 blocks in this range, decoded in one run (ab divides the block) */
        const int64_t bs = w->group_size, per = bs / ab, b0 = c0 / ab, nbk = c1 / ab - b0;
        float         amr[NF4_KC / 64];
        for (int l = 0; l < 16; l++) {
            const int64_t i  = i0 + 16 * jv + l;
            float        *sl = sc + 16 * jv + l;
            if (i >= n) {
                for (int64_t b = 0; b < nbk; b++)
                    sl[b * 64] = 0.f;
                continue;
            }
            const float *am = amr;
            if (amb)
                am = amb + (16 * jv + l) * (k / bs) + c0 / bs;
            else
                lq_nf4_absmax_range(w, (i * k + c0) / bs, (i * k + c1 - 1) / bs + 1, amr);
            /* activation block b0 + b lies in NF4 block (b0 % per + b) / per of the run; a
             * division per block was a fifth of this kernel's time at 16 rows */
            for (int64_t b = 0, q = 0, r = b0 % per; b < nbk; b++) {
                sl[b * 64] = am[q] * j->ts;
                if (++r == per)
                    r = 0, q++;
            }
        }
    }
}

/* y[rr, i0 .. i0 + 64) (+)= block kb's integer sums a[jv] of row rr, scaled by sb (the block's
 * absmax * ts of the 64 columns) and the row's dx, as the reference does. First block (kb == 0)
 * assigns. sub: a[] still holds the codes' offset of 128 times sum(xq) (the VNNI tile starts
 * its sums at minus that instead). */
VNNI_INLINE void nf4_vnni_flush(const nf4_job *j, const float *sb, int64_t kb, int64_t i0,
                                int64_t rr, const __mmask16 vm[4], const __m512i a[4],
                                const int sub) {
    const __m512i off = _mm512_set1_epi32(sub ? 128 * j->xs[rr * j->nkb + kb] : 0);
    const __m512  d   = _mm512_set1_ps(j->dx[rr * j->nkb + kb]);
    float        *yr  = j->y + rr * j->w->n + i0;
    for (int jv = 0; jv < 4; jv++) {
        const __m512 t  = _mm512_cvtepi32_ps(sub ? _mm512_sub_epi32(a[jv], off) : a[jv]);
        const __m512 f  = _mm512_mul_ps(_mm512_loadu_ps(sb + 16 * jv), d);
        __m512       yv = kb ? _mm512_maskz_loadu_ps(vm[jv], yr + 16 * jv) : _mm512_setzero_ps();
        _mm512_mask_storeu_ps(yr + 16 * jv, vm[jv], _mm512_fmadd_ps(t, f, yv));
    }
}

/* Block kb of rows r0 .. r0 + M - 1 against the decoded columns [i0, i0 + 64). */
VNNI_INLINE void nf4_vnni_tile(const nf4_job *j, const uint32_t *buf, const float *sc, int64_t c0,
                               int64_t kb, int64_t i0, int64_t r0, const __mmask16 vm[4],
                               const int M) {
    const int64_t ab = j->ab, q0 = (kb * ab - c0) / 4;
    __m512i       acc[VNNI_M][4];
    for (int r = 0; r < M; r++) {
        const __m512i off = _mm512_set1_epi32(-128 * j->xs[(r0 + r) * j->nkb + kb]);
        for (int jv = 0; jv < 4; jv++)
            acc[r][jv] = off;
    }
    /* unrolled, GCC 12 keeps the accumulators in place: rolled, it copied them between
     * registers around the vpdpbusd (89 copies for the 40 of M = 1-4; 4096 x 4096 and 11008 x
     * 4096, 16 and 64 rows, 1 thread, Zen 4: 4-7% less time, best of 4 alternated runs) */
#pragma GCC unroll 4
    for (int64_t q = 0; q < ab / 4; q++) {
        __m512i wv[4];
        for (int jv = 0; jv < 4; jv++)
            wv[jv] = _mm512_loadu_si512((const void *)(buf + (q0 + q) * 64 + 16 * jv));
        for (int r = 0; r < M; r++) {
            int32_t xv;
            memcpy(&xv, j->xp + (r0 + r) * j->kp + kb * ab + 4 * q, 4);
            const __m512i xb = _mm512_set1_epi32(xv);
            for (int jv = 0; jv < 4; jv++)
                acc[r][jv] = _mm512_dpbusd_epi32(acc[r][jv], wv[jv], xb);
        }
    }
    for (int r = 0; r < M; r++)
        nf4_vnni_flush(j, sc + (kb - c0 / ab) * 64, kb, i0, r0 + r, vm, acc[r], 0);
}

/* The same on AMX tiles (j->amx: lq_cpu_amx_int8), every block of [c0, c1) for rows
 * r0 .. r0 + mr - 1, mr <= 16. The decode buffer is already AMX's B layout (a row per channel
 * quad, 4 codes a column) and xp's rows in channel order are A tiles: tdpbsud (signed x unsigned
 * bytes) of 16 rows x 64 channels x 16 columns gives vpdpbusd's integer sums exactly. Tiles 0-3:
 * C of the 64 columns; 4: A; 5-7: B. *cfg: the rows the tiles are configured for; acc: 16 x
 * 64 int32. Not inlined: its target has AMX, its caller's does not. */
/* block kb's sums into tiles 0-3 */
AMXI_INLINE void nf4_amx_block(const nf4_job *j, const uint32_t *buf, int64_t c0, int64_t kb,
                               int64_t r0) {
    const int64_t ab = j->ab;
    amxi_c4(j->xp + r0 * j->kp + kb * ab, j->kp, buf + (kb * ab - c0) / 4 * 64, 256, 64, 16 * 256,
            ab / 64);
}

AMXI_TARGET static void nf4_amx_rows(const nf4_job *j, const uint32_t *buf, const float *sc,
                                     int64_t c0, int64_t c1, int64_t i0, int64_t r0, int mr,
                                     const __mmask16 vm[4], int *cfg, int32_t *acc) {
    const int64_t ab = j->ab;
    if (*cfg != mr) {
        amxi_config(mr);
        *cfg = mr;
    }
    /* block kb + 1's tile products are issued before block kb's sums are scaled into y, so
     * that the tile unit and the vector epilogue overlap */
    const int64_t kb0 = c0 / ab, kb1 = c1 / ab;
    nf4_amx_block(j, buf, c0, kb0, r0);
    for (int64_t kb = kb0; kb < kb1; kb++) {
        _tile_stored(0, acc, 256);
        _tile_stored(1, acc + 16, 256);
        _tile_stored(2, acc + 32, 256);
        _tile_stored(3, acc + 48, 256);
        if (kb + 1 < kb1)
            nf4_amx_block(j, buf, c0, kb + 1, r0);
        for (int r = 0; r < mr; r++) {
            __m512i a[4];
            for (int jv = 0; jv < 4; jv++)
                a[jv] = _mm512_loadu_si512((const void *)(acc + r * 64 + 16 * jv));
            nf4_vnni_flush(j, sc + (kb - kb0) * 64, kb, i0, r0 + r, vm, a, 1);
        }
    }
}

/* One thread's 64-column blocks [b0, b1), with its decode buffers; amd: nf4_vnni_amd_bytes */
VNNI_TARGET static void nf4_vnni_range(const nf4_job *j, int64_t b0, int64_t b1, uint32_t *buf,
                                       float *sc, float *amd) {
    const int64_t n = j->w->n, k = j->w->k, m = j->m;
    const int64_t        nq  = k % j->w->group_size == 0 ? k / j->w->group_size : 0;
    const int            dq  = nf4_vnni_amd_bytes(j->w) > 0;
    int                  cfg = 0;
    _Alignas(64) int32_t acc[16 * 64];
    for (int64_t blk = b0; blk < b1; blk++) {
        const int64_t i0 = blk * 64;
        __mmask16     vm[4];
        for (int jv = 0; jv < 4; jv++) {
            const int64_t left = n - i0 - 16 * jv;
            vm[jv]             = left >= 16 ? (__mmask16)0xffff
                                 : left <= 0 ? (__mmask16)0
                                             : (__mmask16)((1u << left) - 1u);
        }
        /* the 64 columns' absmax over all of k, 16 blocks a vector (one column's 8 blocks of a
         * range one by one took a fifth of the time: 16 rows, 1 thread, Zen 4, 4096 x 4096
         * 3.1-3.3 -> 2.6-2.7 ms, 11008 x 4096 8.9-9.4 -> 6.9-7.7) */
        const float *amb = !nq ? NULL : dq ? amd : (const float *)j->w->absmax + i0 * nq;
        for (int64_t l = 0; dq && l < 64 && i0 + l < n; l++)
            lq_nf4_absmax_avx512(j->w, amd + l * nq, (i0 + l) * nq, (i0 + l + 1) * nq);
        for (int64_t c0 = 0; c0 < k; c0 += NF4_KC) {
            const int64_t c1 = c0 + NF4_KC < k ? c0 + NF4_KC : k;
            nf4_vnni_decode(j, i0, c0, c1, amb, buf, sc);
            for (int64_t r0 = 0; j->amx && r0 < m; r0 += 16)
                nf4_amx_rows(j, buf, sc, c0, c1, i0, r0, m - r0 < 16 ? (int)(m - r0) : 16, vm, &cfg,
                             acc);
            for (int64_t r0 = 0; !j->amx && r0 < m; r0 += VNNI_M)
                for (int64_t kb = c0 / j->ab; kb < c1 / j->ab; kb++)
                    switch (m - r0 < VNNI_M ? m - r0 : VNNI_M) {
                    case 1: nf4_vnni_tile(j, buf, sc, c0, kb, i0, r0, vm, 1); break;
                    case 2: nf4_vnni_tile(j, buf, sc, c0, kb, i0, r0, vm, 2); break;
                    case 3: nf4_vnni_tile(j, buf, sc, c0, kb, i0, r0, vm, 3); break;
                    default: nf4_vnni_tile(j, buf, sc, c0, kb, i0, r0, vm, 4); break;
                    }
        }
    }
    if (cfg)
        amxi_release();
}

/* ---------------------------------------------------------------------------------------
 * NF4 below NF4_ROWS_M rows: the transposed decode above costs what it saves there, so the
 * codes stay along k. A row's 64 codes of a step are 32 bytes; two rows' side by side fill a
 * vector whose high nibbles (the even channels) and low nibbles (the odd ones), vpshufb'd
 * against the code book, meet the activations stored in that order (xp: per 64 channels, the
 * even ones, then the odd ones) broadcast to both halves: 2 vpdpbusd per 2 rows and 64
 * channels. Each of 8 row pairs keeps 8 lanes of partial sums a row over an activation block;
 * at the block's end a 3-stage add tree and one permute turn the 8 vectors into one whose lane
 * j is weight row j's sum, and one FMA per 16 columns applies the block's scales as the
 * reference does. (One row a vector took 16 vpdpbusd and a 4-stage tree over 16 vectors; the
 * pairs halve the nibble work and the tree.) m > 1: a block's decoded codes (16 rows x ab
 * bytes) go to an L1 buffer, in that pair order, that every row reads.
 * --------------------------------------------------------------------------------------- */
#define NF4_ROWS_M 16
LQ_TREE_PRE_PUSH

/* a[p]: lanes 0-7 partial sums of row 2p, lanes 8-15 of row 2p + 1 -> lane j: row j's sum */
VNNI_INLINE __m512i nf4_pairs_sum(const __m512i a[8]) {
    __m512i t[4], u[2];
    for (int p = 0; p < 4; p++) /* 128-bit lane L: rows of a[2p] and a[2p + 1] alternating */
        t[p] = _mm512_add_epi32(_mm512_unpacklo_epi32(a[2 * p], a[2 * p + 1]),
                                _mm512_unpackhi_epi32(a[2 * p], a[2 * p + 1]));
    for (int p = 0; p < 2; p++) /* lane L: a[4p .. 4p + 3]'s lane-L sums */
        u[p] = _mm512_add_epi32(_mm512_unpacklo_epi64(t[2 * p], t[2 * p + 1]),
                                _mm512_unpackhi_epi64(t[2 * p], t[2 * p + 1]));
    /* lanes: rows 0 2 4 6 | 1 3 5 7 | 8 10 12 14 | 9 11 13 15 */
    const __m512i v = _mm512_add_epi32(_mm512_shuffle_i32x4(u[0], u[1], 0x88),
                                       _mm512_shuffle_i32x4(u[0], u[1], 0xDD));
    return _mm512_permutexvar_epi32(
        _mm512_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15), v);
}

/* the unsigned codes (tq + 128) of 64 channels of rows a and b from c (their 32 code bytes
 * at qa, qb): *hi the even channels, *lo the odd ones, row a in the low half */
VNNI_INLINE void nf4_pair_codes(const uint8_t *qa, const uint8_t *qb, __m512i lut, __m512i *hi,
                                __m512i *lo) {
    const __m512i m0f = _mm512_set1_epi8(0x0F);
    const __m512i v   = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256((const void *)qa)),
        _mm256_loadu_si256((const void *)qb), 1);
    *hi = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), m0f));
    *lo = _mm512_shuffle_epi8(lut, _mm512_and_si512(v, m0f));
}

/* weight rows [i0, i0 + 16) of one thread; amd: room for the rows' absmax, copied (or, double
 * quant, decoded) here so that the per-block gathers read L1: from the full array they were 16
 * more streams beside the 16 code rows, and one thread's time at 4096 x 11008 varied 2x from
 * run to run; buf: 16 x ab bytes */
VNNI_INLINE void nf4_rows_group(const nf4_job *j, int64_t i0, float *amd, uint8_t *buf) {
    const lq_qlinear *w = j->w;
    const int64_t     n = w->n, k = w->k, ab = j->ab, bs = w->group_size;
    const uint8_t    *qrow[16];
    int32_t           bi[16]; /* first NF4 block of each row */
    const __m512i     lut  = _mm512_broadcast_i32x4(_mm_loadu_si128((const void *)j->tq));
    const int64_t     left = n - i0;
    const __mmask16   vm   = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
    for (int l = 0; l < 16; l++) { /* rows past n repeat the last one (results dropped) */
        const int64_t i = i0 + l < n ? i0 + l : n - 1;
        qrow[l]         = (const uint8_t *)w->qweight + i * k / 2;
        bi[l]           = (int32_t)((i - i0) * (k / bs));
    }
    const int64_t i1 = i0 + 16 < n ? i0 + 16 : n;
    if (w->nested_blocksize > 0) /* 16 at a time */
        lq_nf4_absmax_avx512(w, amd, i0 * (k / bs), i1 * (k / bs));
    else
        lq_nf4_absmax_range(w, i0 * (k / bs), i1 * (k / bs), amd);
    const float *am = amd;
    const __m512i bv = _mm512_loadu_si512((const void *)bi);
    for (int64_t kb = 0; kb < j->nkb; kb++) {
        const int64_t c0 = kb * ab;
        if (j->m > 1) /* per 64 channels and pair: the even channels' codes, then the odd */
            for (int64_t c = 0; c < ab; c += 64)
                for (int p = 0; p < 8; p++) {
                    __m512i hi, lo;
                    nf4_pair_codes(qrow[2 * p] + (c0 + c) / 2, qrow[2 * p + 1] + (c0 + c) / 2,
                                   lut, &hi, &lo);
                    _mm512_storeu_si512((void *)(buf + c * 16 + p * 128), hi);
                    _mm512_storeu_si512((void *)(buf + c * 16 + p * 128 + 64), lo);
                }
        const __m512 sv =
            _mm512_mul_ps(/* absmax * ts, as the reference rounds it */
                          _mm512_i32gather_ps(
                              _mm512_add_epi32(bv, _mm512_set1_epi32((int32_t)(c0 / bs))), am, 4),
                          _mm512_set1_ps(j->ts));
        for (int64_t r = 0; r < j->m; r++) {
            const int8_t *xr = j->xp + r * j->kp + c0;
            __m512i       acc[8];
            for (int p = 0; p < 8; p++)
                acc[p] = _mm512_setzero_si512();
            for (int64_t c = 0; c < ab; c += 64) {
                const __m512i xe =
                    _mm512_broadcast_i64x4(_mm256_loadu_si256((const void *)(xr + c)));
                const __m512i xo =
                    _mm512_broadcast_i64x4(_mm256_loadu_si256((const void *)(xr + c + 32)));
                for (int p = 0; p < 8; p++) {
                    __m512i hi, lo;
                    if (j->m > 1) {
                        hi = _mm512_loadu_si512((const void *)(buf + c * 16 + p * 128));
                        lo = _mm512_loadu_si512((const void *)(buf + c * 16 + p * 128 + 64));
                    } else
                        nf4_pair_codes(qrow[2 * p] + (c0 + c) / 2,
                                       qrow[2 * p + 1] + (c0 + c) / 2, lut, &hi, &lo);
                    acc[p] = _mm512_dpbusd_epi32(acc[p], hi, xe);
                    acc[p] = _mm512_dpbusd_epi32(acc[p], lo, xo);
                }
            }
            const __m512i tot = _mm512_sub_epi32(nf4_pairs_sum(acc),
                                                 _mm512_set1_epi32(128 * j->xs[r * j->nkb + kb]));
            const __m512  f   = _mm512_mul_ps(sv, _mm512_set1_ps(j->dx[r * j->nkb + kb]));
            float        *yr  = j->y + r * n + i0;
            const __m512  yv  = kb ? _mm512_maskz_loadu_ps(vm, yr) : _mm512_setzero_ps();
            _mm512_mask_storeu_ps(yr, vm, _mm512_fmadd_ps(_mm512_cvtepi32_ps(tot), f, yv));
        }
    }
}

/* ---------------------------------------------------------------------------------------
 * NF4 at one or two rows, 64-channel blocks: each weight row is read whole, one stream, where the
 * kernel above reads 16 rows 32 bytes at a time (16 streams, which a Zen 4 core reads at about
 * half the bandwidth of one). A 64-byte load is two blocks' codes; its even channels (the high
 * nibbles) meet xp's even channels of both blocks, its odd ones the odd: lanes 0-7 of the sums
 * are the first block's, 8-15 the second's, so 8 loads (16 blocks) reduce with nf4_pairs_sum to
 * one vector of 16 blocks' sums. Each lane is scaled there as the reference scales its block and
 * added into one of 16 float lanes, summed at the row's end: the reference's products added in
 * another order (its float sum runs block by block; tol_nmse_qx_ref). Adding in its order
 * took a 16-row group's sums and absmax, [row][block], through two 16 x 16 transposes per 16
 * blocks, a chain of 16 dependent FMAs, and (without double quant) a copy of the group's absmax:
 * the whole kernel took 1.13-1.31x the time of this one on 1 thread and 1.06-1.18x on 2 (one row
 * from memory, the three shapes of bench/kernels_vs_llamacpp.sh, with and without double quant,
 * the two alternated per call in one process, medians; two rows 1.01-1.14x but once 0.95).
 * xp: per 128 channels, the even channels of both blocks, then the odd ones (nf4_xpos).
 * The codes are prefetched into L2 NF4_ROW1_PF bytes ahead, and the next group's absmax (row
 * l's 16 blocks while this group's row l reads its): without the prefetches the hardware prefetcher
 * fell behind the stream (one row from memory, bench_kernels_cpu -e 96, 1 thread, Zen 4, best of 3
 * alternated runs; double quant: 4096 x 4096 0.56 -> 0.435 ms, 11008 x 4096 1.47 -> 1.09, 4096 x
 * 11008 1.49 -> 1.20; 2 or 4 KB ahead slower than none, 16-32 KB as 8, into L1 slower than none;
 * two threads within the noise).
 * --------------------------------------------------------------------------------------- */
#define NF4_ROW1_PF 8192
/* Up to this many activation rows share each decoded 64-byte load (their sums kept apart): two rows
 * went through the kernel above at 2.7 times one row's time (from memory, 1 thread, 4096 x
 * 4096: 1.17-1.34 ms against 0.43; now 0.62-0.96; 11008 x 4096 3.2-3.8 -> 1.6-2.2). Three would
 * need 24 accumulators. */
#define NF4_ROW1_M 2
/* 16-row groups a thread takes at a time from another thread's part (lq_split): 2-16 measured
 * alike; each run's last prefetches fall past it */
#define NF4_ROW1_STEAL 4

VBMI_INLINE void nf4_row1_group(const nf4_job *j, int64_t i0, float *amd, const int M) {
    const lq_qlinear *w = j->w;
    const int64_t     n = w->n, k = w->k, nkb = j->nkb;
    const __m512i     lut  = _mm512_broadcast_i32x4(_mm_loadu_si128((const void *)j->tq));
    const __m512      ts   = _mm512_set1_ps(j->ts);
    const int64_t     rows = n - i0 < 16 ? n - i0 : 16;
    const float      *am   = (const float *)w->absmax + i0 * nkb; /* [rows][nkb] */
    if (w->nested_blocksize > 0) {
        lq_nf4_absmax_avx512(w, amd, i0 * nkb, (i0 + rows) * nkb);
        am = amd;
    }
    const int64_t esz = w->nested_blocksize > 0 ? 1 : 4, amn = (i0 + 16) * nkb;
    for (int64_t l = 0; l < rows; l++) {
        const int64_t  qo = (i0 + l) * k / 2; /* the row's first code byte */
        const uint8_t *q  = (const uint8_t *)w->qweight + qo;
        __m512         yv[NF4_ROW1_M];
        for (int r = 0; r < M; r++)
            yv[r] = _mm512_setzero_ps();
        for (int64_t b0 = 0; b0 < nkb; b0 += 16) {
            const int64_t nb = nkb - b0 < 16 ? nkb - b0 : 16;
            if (amn + l * nkb + b0 < n * nkb)
                _mm_prefetch((const char *)w->absmax + (amn + l * nkb + b0) * esz, _MM_HINT_T1);
            __m512i acc[NF4_ROW1_M][8];
            for (int p = 0; p < 8; p++) {
                for (int r = 0; r < M; r++)
                    acc[r][p] = _mm512_setzero_si512();
                if (2 * p >= nb)
                    continue;
                /* an odd last block: its 32 code bytes alone (past them: the next row, or
                 * the end of the array) */
                const __mmask64 lm = 2 * p + 1 < nb ? ~(__mmask64)0 : (__mmask64)0xffffffffu;
                const int64_t   o  = (b0 + 2 * p) * 32;
                if (qo + o + NF4_ROW1_PF < n * k / 2)
                    _mm_prefetch((const char *)(q + o + NF4_ROW1_PF), _MM_HINT_T1);
                const __m512i v = _mm512_maskz_loadu_epi8(lm, q + o);
                /* vpermb reads 6 index bits: the code book repeated 4 times */
                const __m512i hi = _mm512_permutexvar_epi8(_mm512_srli_epi16(v, 4), lut);
                const __m512i lo = _mm512_permutexvar_epi8(v, lut);
                for (int r = 0; r < M; r++) {
                    const int8_t *xr = j->xp + r * j->kp + (b0 + 2 * p) * 64;
                    acc[r][p] =
                        _mm512_dpbusd_epi32(acc[r][p], hi, _mm512_loadu_si512((const void *)xr));
                    acc[r][p] = _mm512_dpbusd_epi32(acc[r][p], lo,
                                                    _mm512_loadu_si512((const void *)(xr + 64)));
                }
            }
            /* the 16 blocks' sums, each scaled (absmax * ts) * dx as the reference rounds it,
             * into lane b - b0 of the row's float sums (lanes past nb: zero sums and scales) */
            const __mmask16 bm = (__mmask16)((1u << nb) - 1u);
            const __m512    a  = _mm512_mul_ps(_mm512_maskz_loadu_ps(bm, am + l * nkb + b0), ts);
            for (int r = 0; r < M; r++) {
                const __m512i xs = _mm512_maskz_loadu_epi32(bm, j->xs + r * nkb + b0);
                const __m512i s  = _mm512_sub_epi32(nf4_pairs_sum(acc[r]),
                                                    _mm512_slli_epi32(xs, 7)); /* 128 * xs */
                const __m512  f = _mm512_mul_ps(a, _mm512_maskz_loadu_ps(bm, j->dx + r * nkb + b0));
                yv[r]           = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), f, yv[r]);
            }
        }
        for (int r = 0; r < M; r++)
            j->y[r * n + i0 + l] = _mm512_reduce_add_ps(yv[r]);
    }
}

VNNI_TARGET static void nf4_rows_range(const nf4_job *j, int64_t g0, int64_t g1, float *amd,
                                       uint8_t *buf) {
    for (int64_t g = g0; g < g1; g++)
        nf4_rows_group(j, g * 16, amd, buf);
}

VBMI_TARGET static void nf4_row1_range(const nf4_job *j, int64_t g0, int64_t g1, float *amd) {
    for (int64_t g = g0; g < g1; g++)
        if (j->m == 1)
            nf4_row1_group(j, g * 16, amd, 1);
        else
            nf4_row1_group(j, g * 16, amd, 2);
}

LQ_TREE_PRE_POP

/* A row of x quantized per block in layout lay (nf4_xpos); the block sums to xs. Not in the
 * OpenMP region's body: the outlined function does not inherit the target, and nearbyintf was a
 * libm call there. */
VNNI_TARGET static void nf4_vnni_qx_row(const nf4_job *j, const float *xr, int lay, int8_t *xp,
                                        int32_t *xs, float *dx) {
    const int64_t k = j->w->k;
    int32_t       tmp[256];
    /* the pad (layout 2 puts an odd last block's odd channels there) */
    memset(xp + k, 0, (size_t)(j->kp - k));
    for (int64_t kb = 0; kb < j->nkb; kb++) {
        const int64_t c0 = kb * j->ab;
        xs[kb]           = lq_qx_block(xr + c0, j->ab, 127.f, tmp, &dx[kb]);
        for (int64_t c = c0; c < c0 + j->ab; c++)
            xp[nf4_xpos(lay, c)] = (int8_t)tmp[c - c0];
    }
}

lq_status lq_gemm_nf4_vnni(const lq_qlinear *w, const float *x, int64_t m, float *y, void *ws,
                           int nthreads) {
    nf4_job j = {0};
    j.w       = w;
    j.ab      = lq_nf4_qx_block(w);
    if (!j.ab)
        return LQ_ERR_UNSUPPORTED;
    int8_t tq[16];
    j.ts = lq_nf4_qx_table(w, tq);
    for (int c = 0; c < 16; c++)
        j.tq[c] = (uint8_t)(tq[c] + 128);
    j.nkb        = w->k / j.ab;
    j.kp         = lq_align_up(w->k, 128);
    j.m          = m;
    int8_t  *xp  = ws;
    int32_t *xs  = (int32_t *)(void *)(xp + m * j.kp);
    float   *dx  = (float *)(xs + m * j.nkb);
    j.xp         = xp;
    j.xs         = xs;
    j.dx         = dx;
    j.y          = y;
    const int nt = lq_cpu_threads(nthreads);
    /* the kernel above, k-major codes (its absmax gather takes 32-bit indices into a group's
     * 16 rows) */
    const int rows = m < NF4_ROWS_M && 16 * (w->k / w->group_size) <= INT32_MAX;
    j.amx          = !rows && lq_cpu_amx_int8();
    j.row1         = rows && m <= NF4_ROW1_M && j.ab == 64 && lq_cpu_vbmi();
    /* per thread: NF4_KC / 4 quads x 64 columns of codes, NF4_KC / 64 blocks x 64 scales;
     * rows: 16 x ab codes (row1: none), and the 16 rows' absmax, copied or decoded a group at a
     * time (row1: decoded, with double quant) */
    const size_t amd = rows ? (size_t)(16 * (w->k / w->group_size)) * sizeof(float) : 0;
    const size_t rb  = j.row1 ? 0 : (size_t)(16 * j.ab);
    /* the transposed kernel's: codes, then scales, then nf4_vnni_amd_bytes */
    const size_t cbytes = (size_t)NF4_KC * 64, sbytes = (size_t)(NF4_KC / 64) * 64 * sizeof(float);
    const size_t per  = rows ? rb + amd : cbytes + sbytes + nf4_vnni_amd_bytes(w);
    char        *bufs = malloc(per * (size_t)nt);
    if (!bufs)
        return LQ_ERR_NOMEM;
    const int64_t nblk = (w->n + 63) / 64, ngrp = (w->n + 15) / 16;
    lq_split      sp; /* 16-row groups, for nf4_row1_range */
    lq_split_init(&sp, nt, ngrp, NF4_ROW1_STEAL);
#pragma omp parallel num_threads(nt)
    {
        const int64_t th = omp_get_thread_num(), tn = omp_get_num_threads();
#pragma omp for schedule(static)
        for (int64_t r = 0; r < m; r++)
            nf4_vnni_qx_row(&j, x + r * w->k, rows + j.row1, xp + r * j.kp, xs + r * j.nkb,
                            dx + r * j.nkb);
        char *mine = bufs + per * (size_t)th;
        if (j.row1) {
            lq_seg_it it = lq_split_iter(&sp, (int)th, (int)tn);
            for (int64_t g0, g1; lq_seg_next(&it, &g0, &g1);)
                nf4_row1_range(&j, g0, g1, (float *)(void *)(mine + rb));
        } else if (rows)
            nf4_rows_range(&j, ngrp * th / tn, ngrp * (th + 1) / tn, (float *)(void *)(mine + rb),
                           (uint8_t *)mine);
        else
            nf4_vnni_range(&j, nblk * th / tn, nblk * (th + 1) / tn, (uint32_t *)(void *)mine,
                           (float *)(void *)(mine + cbytes),
                           (float *)(void *)(mine + cbytes + sbytes));
    }
    free(bufs);
    return LQ_OK;
}

/* ---------------------------------------------------------------------------------------
 * AWQ: the semantics of lq_gemm_awq_qx_ref. Word (c, j) packs columns 8j + o of channel c, in
 * field [0,4,1,5,2,6,3,7][o]. A block is 16 words of a row (128 columns): field f of the 16
 * words is a vector whose lane l is column 8l + lq_awq_col_of(f).
 * m <= 4: a lane of a vpdpbusd needs 4 consecutive channels of one column: 4 channel rows
 * byte-interleaved in registers (awq_vnni_quad). Results come out field-major and go to a scratch y
 * (rows padded to 128 columns), put back in column order at the end; the scales are permuted
 * to field-major with two vpermt2w per field at each block flush, the zeros come packed like
 * the codes. The channels are cut into segments (lq_awq_nseg), each summed into its own
 * scratch y and the segments added in order at the end (awq_vnni_part).
 * More rows: see awq_repack_codes.
 * --------------------------------------------------------------------------------------- */

typedef struct awq_job {
    const lq_qlinear *w;
    int64_t           ab, nkb, kp, m, np; /* np: scratch row stride */
    const uint8_t    *xp;                 /* [m, kp] int8 codes in channel order */
    const float      *xsf, *dx;
    int64_t           nseg; /* segments of the channels (lq_awq_nseg) */
    float            *yf;   /* [nseg][m, np] field-major */
} awq_job;

/* yf (+)= block kb's integer sums acc[r][f] of words [w0, w0 + 16) scaled: zeros (packed like
 * the codes) and scales permuted to field-major; yf: a segment's scratch y. The segment's first
 * block (first) assigns. */
VNNI_INLINE void awq_vnni_flush(const awq_job *j, float *yf, int64_t kb, int first, int64_t w0,
                                int64_t r0, const int M, __m512i acc[][8]) {
    const lq_qlinear *w  = j->w;
    const int64_t     n  = w->n, nw = n / 8;
    const int64_t     vw = nw - w0 < 16 ? nw - w0 : 16; /* valid words */
    const __mmask16   wm = (__mmask16)((1u << vw) - 1u);
    const int64_t     g  = kb * j->ab / w->group_size;
    const __m512i   zw = _mm512_maskz_loadu_epi32(wm, (const uint32_t *)w->qzeros + g * nw + w0);
    const uint16_t *sp = (const uint16_t *)w->scales + g * n + 8 * w0;
    const int64_t   vc = 8 * vw; /* valid columns */
    __m512i         sh[4];
    for (int h = 0; h < 4; h++) {
        const int64_t   left = vc - 32 * h;
        const __mmask32 hm   = left >= 32  ? ~(__mmask32)0
                               : left <= 0 ? 0
                                           : (__mmask32)((1u << left) - 1u);
        sh[h]                = _mm512_maskz_loadu_epi16(hm, (const void *)(sp + 32 * h));
    }
    for (int f = 0; f < 8; f++) {
        const int o = lq_awq_col_of(f);
        /* lanes 0..7: columns 8l + o of the first 64 (sh[0], sh[1]); 8..15: of the next 64 */
        const __m512i idx =
            _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                             56 + o, 48 + o, 40 + o, 32 + o, 24 + o, 16 + o, 8 + o, o);
        const __m512i lo = _mm512_permutex2var_epi16(sh[0], idx, sh[1]);
        const __m512i hi = _mm512_permutex2var_epi16(sh[2], idx, sh[3]);
        const __m512  sc = _mm512_cvtph_ps(
             _mm256_set_m128i(_mm512_castsi512_si128(hi), _mm512_castsi512_si128(lo)));
        const __m512 zf = _mm512_cvtepi32_ps(
            _mm512_and_si512(_mm512_srli_epi32(zw, 4u * (unsigned)f), _mm512_set1_epi32(0xF)));
        for (int r = 0; r < M; r++) {
            const int64_t rr = r0 + r;
            const __m512  xs = _mm512_set1_ps(j->xsf[rr * j->nkb + kb]);
            const __m512  d  = _mm512_set1_ps(j->dx[rr * j->nkb + kb]);
            float        *yp = yf + rr * j->np + 8 * w0 + 16 * f;
            const __m512  t  = _mm512_fnmadd_ps(zf, xs, _mm512_cvtepi32_ps(acc[r][f]));
            const __m512  yv = first ? _mm512_setzero_ps() : _mm512_loadu_ps(yp);
            _mm512_storeu_ps(yp, _mm512_fmadd_ps(t, _mm512_mul_ps(sc, d), yv));
        }
    }
}

/* 16 words of 4 consecutive channel rows (wv) into acc[r][0..7]. Byte-interleaving
 * the rows (vpunpck*bw, then *wd) puts in 32-bit lane (q, i) (128-bit lane q, dword i) byte i
 * of word 4q + u of the 4 channels, u = 0..3 the four results; its low nibbles are field 2i,
 * its high ones 2i + 1, and one 32-bit broadcast of the 4 channels' activations multiplies
 * them. vpdpbusd of the raw bytes sums lo + 16 hi, of the bytes & 0xF0 16 hi: acc[r][2u] and
 * [2u + 1], taken apart and put field-major once per block (awq_vnni_unquad). 8 shuffles, 4
 * masks and 8 dot products for 512 products, where int16 pairs took 16 dot products and 64
 * shifts and masks (no saturation: a block's raw sums stay below 256 x 255 x 128). Words u in
 * [u0, u0 + NU) only: the halves above two rows. */
VNNI_INLINE void awq_vnni_quad(const __m512i wv[4], const __m512i xb[4], const int M, const int u0,
                               const int NU, __m512i acc[][8]) {
    const __m512i hi4 = _mm512_set1_epi8((char)0xF0);
    for (int v = u0 / 2; v < (u0 + NU) / 2; v++) { /* byte-pairs of words 4q + 2v, 4q + 2v + 1 */
        const __m512i ab =
            v ? _mm512_unpackhi_epi8(wv[0], wv[1]) : _mm512_unpacklo_epi8(wv[0], wv[1]);
        const __m512i cd =
            v ? _mm512_unpackhi_epi8(wv[2], wv[3]) : _mm512_unpacklo_epi8(wv[2], wv[3]);
        for (int t = 0; t < 2; t++) {
            const __m512i q  = t ? _mm512_unpackhi_epi16(ab, cd) : _mm512_unpacklo_epi16(ab, cd);
            const __m512i qh = _mm512_and_si512(q, hi4);
            const int     f  = 2 * (2 * v + t - u0);
            for (int r = 0; r < M; r++) {
                acc[r][f]     = _mm512_dpbusd_epi32(acc[r][f], q, xb[r]);
                acc[r][f + 1] = _mm512_dpbusd_epi32(acc[r][f + 1], qh, xb[r]);
            }
        }
    }
}

/* One row's sums of a block from awq_vnni_quad's order (s[2u]: lo + 16 hi, s[2u + 1]: 16 hi,
 * lane (q, i) = word 4q + u, byte i) to field-major (s[f], lane l = word l): per nibble, a 4 x 4
 * transpose of dwords in each 128-bit lane. */
VNNI_INLINE void awq_vnni_unquad(__m512i s[8]) {
    __m512i v[2][4];
    for (int u = 0; u < 4; u++) {
        v[1][u] = _mm512_srai_epi32(s[2 * u + 1], 4);
        v[0][u] = _mm512_sub_epi32(s[2 * u], s[2 * u + 1]);
    }
    for (int h = 0; h < 2; h++) {
        const __m512i t0 = _mm512_unpacklo_epi32(v[h][0], v[h][1]);
        const __m512i t1 = _mm512_unpackhi_epi32(v[h][0], v[h][1]);
        const __m512i t2 = _mm512_unpacklo_epi32(v[h][2], v[h][3]);
        const __m512i t3 = _mm512_unpackhi_epi32(v[h][2], v[h][3]);
        s[0 + h]         = _mm512_unpacklo_epi64(t0, t2);
        s[2 + h]         = _mm512_unpackhi_epi64(t0, t2);
        s[4 + h]         = _mm512_unpacklo_epi64(t1, t3);
        s[6 + h]         = _mm512_unpackhi_epi64(t1, t3);
    }
}

/* m <= 4: channel quads over runs of rb 16-word blocks [b0, b1) of segment s, the sums of a run
 * in the thread's buffer sum ([block][row][awq_vnni_quad's order]), as gptq_vnni_seq. Reading a
 * block's 128 channel rows 64 bytes each, n / 2 bytes apart, as tiles would, every one falls
 * into the same two L1 sets at n = 4096: 4096 x 11008 on 2 threads took 0.63-0.76 ms at one row
 * against 0.39 with the codes sorted at load, and at 4 rows, two rows a tile, 5.8 ms against
 * 0.34 at one (int16). Per pass, P channel quads, and the results in halves (all 8 up to 2 rows,
 * 4 above), keep M x 8 or M x 4 accumulators in registers (runs and P: awq_vnni_part). Each
 * load prefetches the same place PF rows on, into L2: into L1 (T0) the 16 KiB in flight crowd
 * out the sums, and one row of 4096 x 11008 on 1 thread took 1.3-1.7 ms against 0.86-0.97;
 * without, 1.40-1.60 against 1.17-1.19 (Zen 4). */
#define AWQ_SEQ_M  4   /* up to this many rows the words are read in place */
#define AWQ_SEQ_B  32  /* blocks a run whose sums stay in L1 (16 KiB) */
#define AWQ_SEQ_BL 128 /* one row: blocks a run at most, its sums in L2 */
VNNI_INLINE void awq_vnni_seq(const awq_job *j, int64_t s, int64_t b0, int64_t b1, int64_t rb,
                              __m512i (*sum)[8], const int M, const int P) {
    const lq_qlinear *w = j->w;
    const int64_t     n = w->n, k = w->k, nw = n / 8, ab = j->ab;
    const uint32_t   *qw  = (const uint32_t *)w->qweight;
    const int         NU  = M <= 2 ? 4 : 2;
    const int         PF  = M == 1 ? 16 : 8; /* rows ahead of each load */
    const int64_t     kb0 = lq_awq_seg_kb(j->nkb, j->nseg, s);
    const int64_t     kb1 = lq_awq_seg_kb(j->nkb, j->nseg, s + 1);
    float            *yf = j->yf + s * j->m * j->np;
    for (int64_t ba = b0; ba < b1; ba += rb) {
        const int64_t nb = b1 - ba < rb ? b1 - ba : rb;
        for (int64_t kb = kb0; kb < kb1; kb++) {
            const int64_t c0 = kb * ab, c1 = c0 + ab < k ? c0 + ab : k;
            for (int64_t b = 0; b < nb * M; b++)
                for (int f = 0; f < 8; f++)
                    sum[b][f] = _mm512_setzero_si512();
            for (int64_t c = c0; c < c1;) {
                const int np = c1 - c >= 4 * P ? P : 1; /* channel quads this pass */
                for (int64_t b = 0; b < nb; b++) {
                    const int64_t   w0 = (ba + b) * 16;
                    const __mmask16 wm = (__mmask16)((1u << (nw - w0 < 16 ? nw - w0 : 16)) - 1u);
                    for (int u0 = 0; u0 < 4; u0 += NU) {
                        __m512i acc[4][8];
                        for (int r = 0; r < M; r++)
                            for (int f = 0; f < 2 * NU; f++)
                                acc[r][f] = sum[b * M + r][2 * u0 + f];
                        for (int p = 0; p < np; p++) {
                            __m512i wv[4], xb[4];
                            for (int t = 0; t < 4; t++) {
                                const uint32_t *row = qw + (c + 4 * p + t) * nw + w0;
                                if (u0 == 0)
                                    _mm_prefetch((const char *)(row + PF * nw), _MM_HINT_T1);
                                wv[t] = _mm512_maskz_loadu_epi32(wm, (const void *)row);
                            }
                            for (int r = 0; r < M; r++) {
                                int32_t xv;
                                memcpy(&xv, j->xp + r * j->kp + c + 4 * p, 4);
                                xb[r] = _mm512_set1_epi32(xv);
                            }
                            if (u0 == 0) /* constant u0: acc stays in registers */
                                awq_vnni_quad(wv, xb, M, 0, NU, acc);
                            else
                                awq_vnni_quad(wv, xb, M, 2, NU, acc);
                        }
                        for (int r = 0; r < M; r++)
                            for (int f = 0; f < 2 * NU; f++)
                                sum[b * M + r][2 * u0 + f] = acc[r][f];
                    }
                }
                c += 4 * np;
            }
            for (int64_t b = 0; b < nb * M; b++)
                awq_vnni_unquad(sum[b]);
            for (int64_t b = 0; b < nb; b++)
                awq_vnni_flush(j, yf, kb, kb == kb0, (ba + b) * 16, 0, M, &sum[b * M]);
        }
    }
}

/* Thread th of tn: an equal share of the work, segment-major, so a thread reads the word rows of
 * the segments it has whole in order from end to end, and at most two segments in part (their
 * columns split with a neighbour). Threads splitting every row by columns instead (until
 * 2026-12-06) read each in pieces (1 KiB of 2 at 4096 x 4096 on 2 threads): at one row, one
 * process alternating both per call, segments took 0.60-0.93x the time on 2 threads and
 * 0.99-1.07x on 1 (12 samples each, the three shapes of bench/kernels_vs_llamacpp.sh, Zen 4;
 * of that, 1-2% on 1 thread at 4096 x 4096 is the segments' own: one segment instead of four).
 * Segments of 1024 channels with the last one shorter, one of them split between 2 threads at
 * k = 11008, took 0.61-0.98x; two equal halves there 0.58-0.95x.
 * One row: runs of a segment's whole width; one channel quad a pass while the sums stay in L1
 * (two or four took 1.12-1.24x the time on 1 thread at 4096 x 4096); wider, in a team, four (16
 * rows of the matrix a pass, a quarter of one's traffic to the sums, in L2): at one row of
 * 11008 x 4096 on 2 threads whole-width runs took 0.81-0.91x the time of the column split, runs
 * of half the width (sums in L1) 0.85-1.02x, and against whole-width ones runs of a third in
 * L1 (two quads) took 1.04-1.09x the time, of half (two or four) 1.04-1.17x (2 samples each). A
 * thread alone keeps even runs in L1 with one quad: 0.94x the time of whole-width runs there (3
 * samples). Neither changes the sums' order. More rows: runs in L1, two quads a pass (at two rows
 * runs of up to 64 blocks took 0.88-1.08x the time). */
VNNI_TARGET static void awq_vnni_part(const awq_job *j, int64_t th, int64_t tn, __m512i (*sum)[8]) {
    lq_awq_share sh;
    lq_awq_share_init(&sh, j->nkb, j->nseg, (j->w->n / 8 + 15) / 16, th, tn);
    for (int64_t s, c0, c1; lq_awq_share_next(&sh, &s, &c0, &c1);) {
        const int64_t nb = c1 - c0;
        switch (j->m) {
        case 1: { /* even runs: sums in L1 (one quad a pass) or, in a team, in L2 (four) */
            const int     l1   = nb <= AWQ_SEQ_B || tn == 1;
            const int64_t most = l1 ? AWQ_SEQ_B : AWQ_SEQ_BL, runs = (nb + most - 1) / most;
            if (l1)
                awq_vnni_seq(j, s, c0, c1, (nb + runs - 1) / runs, sum, 1, 1);
            else
                awq_vnni_seq(j, s, c0, c1, (nb + runs - 1) / runs, sum, 1, 4);
            break;
        }
        case 2:
            awq_vnni_seq(j, s, c0, c1, AWQ_SEQ_B / 2, sum, 2, 2);
            break;
        case 3:
            awq_vnni_seq(j, s, c0, c1, AWQ_SEQ_B / 4, sum, 3, 2);
            break;
        default:
            awq_vnni_seq(j, s, c0, c1, AWQ_SEQ_B / 4, sum, 4, 2);
            break;
        }
    }
}

/* More rows: the codes are repacked once into GPTQ's layout (a word per column holding 8
 * channels: an 8 x 8 nibble transpose of 8 channel rows, three swap stages) in field-major
 * column order, the scales and zeros likewise, and the GPTQ kernel runs on that: the same
 * blocks and integer sums, so the same result bit for bit, with the unpacking paid once
 * instead of once per row chunk. */
VNNI_TARGET static void awq_repack_codes(const lq_qlinear *w, int64_t wr, uint32_t *qg,
                                         int64_t np) {
    for (int64_t j0 = 0; j0 < w->n / 8; j0 += 16)
        awq_repack_group(w, wr, j0, qg + wr * np + j0 * 8);
}

size_t lq_ws_awq_vnni(const lq_qlinear *w, int64_t m, int xbits) {
    if (!lq_awq_qx_block(w))
        return 0;
    if (m > AWQ_SEQ_M) /* the GPTQ copy (same blocks), its kernel's workspace, y field-major */
        return lq_awq_gptq_ws(w, m);
    const int64_t ab = lq_awq_qx_block(w);
    return lq_awq_seq_ws(w, m, lq_awq_nseg((w->k + ab - 1) / ab, ab));
}

lq_status lq_gemm_awq_vnni(const lq_qlinear *w, const float *x, int64_t m, float *y, void *ws,
                           int xbits, int nthreads) {
    const int64_t ab = lq_awq_qx_block(w), n = w->n, k = w->k, np = lq_awq_np(w);
    const int     nt = lq_cpu_threads(nthreads);
    if (!ab || xbits != 8)
        return LQ_ERR_UNSUPPORTED;
    if (m > AWQ_SEQ_M) {
        /* from VNNI_COPY_M rows the GPTQ kernel copies each column block's words anyway: it
         * repacks them there instead, without the copy through memory (16 rows, 1 thread,
         * 11008 x 4096: 5.8 -> 3.4 ms; 3.1-3.2 with the codes sorted at load) */
        const int  fused = m >= VNNI_COPY_M;
        lq_qlinear g;
        lq_awq_gptq_build(w, ws, &g, fused ? NULL : awq_repack_codes, nt);
        uint8_t *gws = (uint8_t *)ws + lq_awq_gptq_bytes(w);
        float   *yf  = lq_awq_gptq_yf(w, m, ws);
        LQ_TRY(gptq_vnni_run(&g, fused ? w : NULL, x, m, yf, gws, 8, nthreads));
        lq_awq_unpermute(yf, 1, np, m, n, y, nt);
        return LQ_OK;
    }
    awq_job j = {
        .w = w, .ab = ab, .nkb = (k + ab - 1) / ab, .kp = lq_align_up(k, 64), .m = m, .np = np};
    j.nseg       = lq_awq_nseg(j.nkb, ab);
    uint8_t *xp = ws;
    float   *xsf = (float *)(void *)(xp + m * j.kp), *dx = xsf + m * j.nkb, *yf = dx + m * j.nkb;
    j.xp              = xp;
    j.xsf             = xsf;
    j.dx              = dx;
    j.yf              = yf;
    const size_t sums = (size_t)AWQ_SEQ_BL * sizeof(__m512i[8]); /* a thread's, one row's most */
    __m512i(*sum)[8]  = aligned_alloc(64, sums * (size_t)nt);
    if (!sum)
        return LQ_ERR_NOMEM;
#pragma omp parallel num_threads(nt)
    {
        const int64_t th = omp_get_thread_num(), tn = omp_get_num_threads();
#pragma omp for schedule(static)
        for (int64_t r = 0; r < m; r++)
            lq_qx_row(k, ab, x + r * k, xp + r * j.kp, xsf + r * j.nkb, dx + r * j.nkb);
        awq_vnni_part(&j, th, tn, sum + AWQ_SEQ_BL * th);
    }
    free(sum);
    lq_awq_unpermute(yf, j.nseg, np, m, n, y, nt);
    return LQ_OK;
}

/* ---------------------------------------------------------------------------------------
 * LLM.int8: acc[r, i] = sum_c qx[r, c] * cb[i, c], exact. vpdpbusd takes one unsigned operand:
 * the activations go in as qx + 128 and 128 * sum_c cb[i, c] (one more vpdpbusd against ones
 * per column, shared by the rows) comes off. Rows of cb are contiguous in k: each step loads 64
 * codes of 4 columns and 64 activations of up to 4 rows; lanes are summed at the end.
 * --------------------------------------------------------------------------------------- */
#define I8_NC 4 /* columns per block */
#define I8_PF 4096 /* bytes ahead on each of the tile's weight rows (see D16_PF) */
#define I8_STEAL 16   /* blocks a thread takes at a time from another thread's part (lq_split) */

VNNI_INLINE void int8_vnni_tile(const int8_t *cb, int64_t k, const uint8_t *xu, int64_t kp,
                                int64_t i0, int64_t r0, int32_t *acc, int64_t n, const int M,
                                const int NC, const int PF, const int SW, int32_t *s128) {
    __m512i       a[VNNI_M][I8_NC], sw[I8_NC];
    const __m512i ones = _mm512_set1_epi8(1);
    for (int c = 0; c < NC; c++) {
        sw[c] = _mm512_setzero_si512();
        for (int r = 0; r < M; r++)
            a[r][c] = _mm512_setzero_si512();
    }
    for (int64_t c0 = 0; c0 < k; c0 += 64) {
        const __mmask64 km = k - c0 >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << (k - c0)) - 1);
        __m512i         wv[I8_NC];
        /* past a row's end: the same row of the next block, not the next row (in this one) */
        const int64_t pf = c0 + I8_PF < k ? c0 + I8_PF : c0 + I8_PF + (I8_NC - 1) * k;
        for (int c = 0; c < NC; c++) {
            if (PF)
                _mm_prefetch((const char *)(cb + (i0 + c) * k + pf), _MM_HINT_T0);
            wv[c] = _mm512_maskz_loadu_epi8(km, cb + (i0 + c) * k + c0);
            if (SW)
                sw[c] = _mm512_dpbusd_epi32(sw[c], ones, wv[c]);
        }
        for (int r = 0; r < M; r++) {
            const __m512i xv = _mm512_loadu_si512((const void *)(xu + (r0 + r) * kp + c0));
            for (int c = 0; c < NC; c++)
                a[r][c] = _mm512_dpbusd_epi32(a[r][c], xv, wv[c]);
        }
    }
    for (int c = 0; c < NC; c++) {
        if (SW)
            s128[c] = 128 * _mm512_reduce_add_epi32(sw[c]);
        for (int r = 0; r < M; r++)
            acc[(r0 + r) * n + i0 + c] = _mm512_reduce_add_epi32(a[r][c]) - s128[c];
    }
}

VNNI_TARGET static void int8_vnni_range(const int8_t *cb, int64_t n, int64_t k, const uint8_t *xu,
                                        int64_t kp, int64_t m, int64_t i0, int64_t i1,
                                        int32_t *acc) {
/* the columns' code sums once per block, in its first row chunk (SW), kept for the others:
 * before, every 4-row chunk redid them (4 more vpdpbusd per 16) and the tiles took twice the
 * time (Zen 4, 1 thread, ms: 4096 x 11008 at 16 rows 12.0-12.3 -> 7.0-8.3, 64 47-49 -> 24-25,
 * 512 394-409 -> 211-230) */
#define I8_CASE(M_, NCC)                                                                           \
    if (r0 == 0)                                                                                   \
        int8_vnni_tile(cb, k, xu, kp, i, r0, acc, n, M_, NCC, 1, 1, s128);                         \
    else                                                                                           \
        int8_vnni_tile(cb, k, xu, kp, i, r0, acc, n, M_, NCC, 1, 0, s128);                         \
    break;
#define I8_TILE(NCC)                                                                               \
    for (int64_t r0 = 0; r0 < m; r0 += VNNI_M)                                                     \
        switch (m - r0 < VNNI_M ? m - r0 : VNNI_M) {                                               \
        case 1:                                                                                    \
            I8_CASE(1, NCC)                                                                        \
        case 2:                                                                                    \
            I8_CASE(2, NCC)                                                                        \
        case 3:                                                                                    \
            I8_CASE(3, NCC)                                                                        \
        default:                                                                                   \
            I8_CASE(4, NCC)                                                                        \
        }
    int32_t s128[I8_NC];
    int64_t i = i0;
    /* one row: one weight row at a time, no software prefetch, so the codes are one stream
     * (Zen 4 VM, 1 thread, ms in alternated runs: 11008 x 4096 2.26-2.88 -> 1.64-1.70, 4096 x
     * 11008 2.14-2.43 -> 1.70-1.85, 4096 x 4096 0.37-0.39 -> 0.41; with the prefetch kept,
     * or 2 rows a tile, slower) */
    if (m == 1)
        for (; i < i1; i++)
            int8_vnni_tile(cb, k, xu, kp, i, 0, acc, n, 1, 1, 0, 1, s128);
    for (; i + I8_NC <= i1; i += I8_NC)
        I8_TILE(I8_NC)
    for (; i < i1; i++)
        I8_TILE(1)
#undef I8_TILE
#undef I8_CASE
}

size_t lq_ws_int8_vnni(int64_t n, int64_t k, int64_t m) {
    (void)n;
    return (size_t)(m * lq_align_up(k, 64));
}

lq_status lq_int8_dots_vnni(const int8_t *cb, int64_t n, int64_t k, const int8_t *qx, int64_t m,
                            int32_t *acc, void *ws, int nthreads) {
    uint8_t      *xu = ws;
    const int64_t kp = lq_align_up(k, 64);
    const int     nt = lq_cpu_threads(nthreads);
    lq_split      sp;
    lq_split_init(&sp, nt, (n + I8_NC - 1) / I8_NC, I8_STEAL);
#pragma omp parallel num_threads(nt)
    {
#pragma omp for schedule(static)
        for (int64_t r = 0; r < m; r++) {
            for (int64_t c = 0; c < k; c++)
                xu[r * kp + c] = (uint8_t)(qx[r * k + c] + 128);
            memset(xu + r * kp + k, 0, (size_t)(kp - k));
        }
        lq_seg_it it = lq_split_iter(&sp, omp_get_thread_num(), omp_get_num_threads());
        for (int64_t i0, i1; lq_seg_next_rows(&it, I8_NC, n, &i0, &i1);)
            int8_vnni_range(cb, n, k, xu, kp, m, i0, i1, acc);
    }
    return LQ_OK;
}

#else /* not x86-64 GCC/clang: the float kernels only */

int lq_cpu_vnni(void) {
    return 0;
}
size_t lq_ws_gptq_vnni(const lq_qlinear *w, int64_t m, int xbits) {
    (void)w, (void)m, (void)xbits;
    return 0;
}
lq_status lq_gemm_gptq_vnni(const lq_qlinear *w, const float *x, int64_t m, float *y, void *ws,
                            int xbits, int nthreads) {
    (void)w, (void)x, (void)m, (void)y, (void)ws, (void)xbits, (void)nthreads;
    return LQ_ERR_UNSUPPORTED;
}
size_t lq_ws_int8_vnni(int64_t n, int64_t k, int64_t m) {
    (void)n, (void)k, (void)m;
    return 0;
}
size_t lq_ws_awq_vnni(const lq_qlinear *w, int64_t m, int xbits) {
    (void)w, (void)m, (void)xbits;
    return 0;
}
lq_status lq_gemm_awq_vnni(const lq_qlinear *w, const float *x, int64_t m, float *y, void *ws,
                           int xbits, int nthreads) {
    (void)w, (void)x, (void)m, (void)y, (void)ws, (void)xbits, (void)nthreads;
    return LQ_ERR_UNSUPPORTED;
}
lq_status lq_int8_dots_vnni(const int8_t *cb, int64_t n, int64_t k, const int8_t *qx, int64_t m,
                            int32_t *acc, void *ws, int nthreads) {
    (void)cb, (void)n, (void)k, (void)qx, (void)m, (void)acc, (void)ws, (void)nthreads;
    return LQ_ERR_UNSUPPORTED;
}
#endif
