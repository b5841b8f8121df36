/* AVX-512 float GEMM for the large-m paths: y[m, nt] = beta * y + x[m, k] @ B, where B is a
 * dequantized tile (W^T as [k, nt], or W rows as [nt, k]) or the fp16 / bf16 weights of a dense
 * linear as they are stored. Why not OpenBLAS: it picks its kernels once, from the CPU model it
 * knows (lq_cpu_blas.c), and on CPUs newer than the library, or where OPENBLAS_CORETYPE holds it
 * back, that is its AVX2 or SSE3 sgemm, half or a third of this; and B in fp16 / bf16 would have
 * to be converted to a float32 copy first, which this does while packing.
 *
 * The blocking is the usual one for a broadcast-FMA kernel. B is packed in panels of NR = 64
 * columns x KC channels (32 KiB: L1), k-major, converted and transposed on the way; every MR = 6
 * rows of x then run against the panel: 24 accumulators (6 rows x 4 vectors), per channel four
 * panel loads and six broadcasts for 24 FMAs. A panel's y block stays in L2 across the channel
 * blocks while x streams through, which holds for at most MC = 288 rows (72 KiB of y, 144 KiB
 * of x per channel block): over all of m, a calibration chunk of 16384 rows spilled y (4 MiB
 * per panel) out of L2 at every channel block and ran at 270 GFLOP/s on 2 Zen 5 cores where
 * 1024 rows ran at 410-450. So the work is (row block, panel) pairs, each thread taking whole
 * pairs; B is packed again per row block, 1/288 of the FMAs' work. lq_gemm512_bf16x, the
 * same blocking on bf16 activations and weights with vdpbf16ps, is below. */
#include "lq_kernels_impl.h"

#include <omp.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define G512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
#define G512_INLINE static inline __attribute__((always_inline)) G512_TARGET

enum { NR = 64, MR = 6, KC = 128, MC = 288 };

/* rows r[0..15] -> r[i] = column i of the 16 x 16 block */
G512_INLINE void tr16(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i]     = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i]     = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int h = 0; h < 16; h += 8)
        for (int i = 0; i < 4; i++) {
            t[h + i]     = _mm512_shuffle_f32x4(r[h + i], r[h + i + 4], 0x88);
            t[h + i + 4] = _mm512_shuffle_f32x4(r[h + i], r[h + i + 4], 0xdd);
        }
    for (int i = 0; i < 8; i++) {
        r[i]     = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
    }
}

/* float32 rows: 16 channels of 16 rows at a time */
G512_INLINE void pack_nk32(const lq_gemm_b *b, int64_t n0, int nr, int64_t k0, int kc, float *pan) {
    const float *p = (const float *)b->p + n0 * b->ld + k0;
    for (int jb = 0; jb < NR; jb += 16)
        for (int c = 0; c < kc; c += 16) {
            const int       cn = kc - c < 16 ? kc - c : 16;
            const __mmask16 mk = (__mmask16)((1u << cn) - 1);
            __m512          r[16];
            for (int i = 0; i < 16; i++)
                r[i] = jb + i < nr ? _mm512_maskz_loadu_ps(mk, p + (jb + i) * b->ld + c)
                                   : _mm512_setzero_ps();
            tr16(r);
            for (int i = 0; i < cn; i++)
                _mm512_storeu_ps(pan + (c + i) * NR + jb, r[i]);
        }
}

/* The 2-byte sources a line (32 channels) of 16 rows at a time: transposed as 16 channel pairs
 * (32-bit lanes), then split into the even and the odd channel; half the shuffles of
 * converting first */
/* r[i] = channels c + 2i, c + 2i + 1 of rows jb..jb + 15 of p (rows ld apart), one 32-bit lane
 * a row: cn channels of each (zeros past them and past nr rows), transposed as pairs */
G512_INLINE void load_pairs16(const uint16_t *p, int64_t ld, int jb, int nr, int c, int cn,
                              __m512 r[16]) {
    const __mmask32 mk = cn == 32 ? ~(__mmask32)0 : (((__mmask32)1 << cn) - 1);
    for (int i = 0; i < 16; i++)
        r[i] = jb + i < nr
                   ? _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(mk, p + (jb + i) * ld + c))
                   : _mm512_setzero_ps();
    tr16(r);
}

G512_INLINE void pack_nk16(int bf, const lq_gemm_b *b, int64_t n0, int nr, int64_t k0, int kc,
                           float *pan) {
    const uint16_t *p  = (const uint16_t *)b->p + n0 * b->ld + k0;
    const __m512i   hi = _mm512_set1_epi32((int)0xffff0000u);
    for (int jb = 0; jb < NR; jb += 16)
        for (int c = 0; c < kc; c += 32) {
            const int cn = kc - c < 32 ? kc - c : 32;
            __m512    r[16];
            load_pairs16(p, b->ld, jb, nr, c, cn, r);
            for (int i = 0; 2 * i < cn; i++) {
                const __m512i d = _mm512_castps_si512(r[i]);
                __m512        ev, od;
                if (bf) {
                    ev = _mm512_castsi512_ps(_mm512_slli_epi32(d, 16));
                    od = _mm512_castsi512_ps(_mm512_and_si512(d, hi));
                } else {
                    ev = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d));
                    od = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(d, 16)));
                }
                _mm512_storeu_ps(pan + (c + 2 * i) * NR + jb, ev);
                if (2 * i + 1 < cn)
                    _mm512_storeu_ps(pan + (c + 2 * i + 1) * NR + jb, od);
            }
        }
}

/* pan[kk * NR + j] = B(column n0 + j, channel k0 + kk) for kk < kc, j < NR; columns past nr
 * are zero */
G512_TARGET static void pack(const lq_gemm_b *b, int64_t n0, int nr, int64_t k0, int kc,
                             float *pan) {
    switch (b->kind) {
    case LQ_GEMM_B_KN: {
        const __mmask64 all = nr >= NR ? ~(__mmask64)0 : (((__mmask64)1 << nr) - 1);
        const float    *s   = (const float *)b->p + k0 * b->ld + n0;
        for (int kk = 0; kk < kc; kk++)
            for (int v = 0; v < NR / 16; v++)
                _mm512_storeu_ps(
                    pan + kk * NR + 16 * v,
                    _mm512_maskz_loadu_ps((__mmask16)(all >> (16 * v)), s + kk * b->ld + 16 * v));
        break;
    }
    case LQ_GEMM_B_F32:
        pack_nk32(b, n0, nr, k0, kc, pan);
        break;
    case LQ_GEMM_B_F16:
        pack_nk16(0, b, n0, nr, k0, kc, pan);
        break;
    case LQ_GEMM_B_BF16:
        pack_nk16(1, b, n0, nr, k0, kc, pan);
        break;
    case LQ_GEMM_B_PACK:
        b->pack(b->ctx, n0, nr, k0, kc, pan, NR);
        break;
    }
}

/* y[r, 0..nr) for r < mr (a constant once inlined), x(r, kk) at x[r * rs + kk * cs]: first:
 * y = beta * y + alpha * sum (y not read when beta is 0), else y += alpha * sum */
G512_INLINE void ukr(int mr, const float *x, int64_t rs, int64_t cs, const float *pan, int kc,
                     float *y, int64_t ldy, int nr, int first, float alpha, float beta) {
    __m512 acc[MR][NR / 16];
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NR / 16; v++)
            acc[r][v] = _mm512_setzero_ps();
#pragma GCC unroll 2
    for (int kk = 0; kk < kc; kk++) {
        __m512 bv[NR / 16];
        for (int v = 0; v < NR / 16; v++)
            bv[v] = _mm512_load_ps(pan + kk * NR + 16 * v);
        for (int r = 0; r < MR; r++) {
            if (r >= mr)
                break;
            const __m512 xb = _mm512_set1_ps(x[r * rs + kk * cs]);
            for (int v = 0; v < NR / 16; v++)
                acc[r][v] = _mm512_fmadd_ps(xb, bv[v], acc[r][v]);
        }
    }
    const __mmask64 all = nr >= NR ? ~(__mmask64)0 : (((__mmask64)1 << nr) - 1);
    const __m512    bb = _mm512_set1_ps(beta), ba = _mm512_set1_ps(alpha);
    for (int r = 0; r < mr; r++)
        for (int v = 0; v < NR / 16; v++) {
            const __mmask16 mk = (__mmask16)(all >> (16 * v));
            float          *yp = y + r * ldy + 16 * v;
            if (!mk)
                break;
            __m512 o = alpha == 1.f ? acc[r][v] : _mm512_mul_ps(ba, acc[r][v]);
            if (!first)
                o = _mm512_add_ps(o, _mm512_maskz_loadu_ps(mk, yp));
            else if (beta != 0.f)
                o = _mm512_fmadd_ps(bb, _mm512_maskz_loadu_ps(mk, yp), o);
            _mm512_mask_storeu_ps(yp, mk, o);
        }
}

/* the last m % MR rows, each count its own instance (the accumulators stay registers) */
G512_INLINE void tail(int mr, const float *x, int64_t rs, int64_t cs, const float *pan, int kc,
                      float *y, int64_t ldy, int nr, int first, float alpha, float beta) {
#define G512_TAIL(M_)                                                                              \
    case M_:                                                                                       \
        ukr(M_, x, rs, cs, pan, kc, y, ldy, nr, first, alpha, beta);                               \
        break;
    switch (mr) {
        G512_TAIL(5)
        G512_TAIL(4)
        G512_TAIL(3)
        G512_TAIL(2)
        G512_TAIL(1)
#undef G512_TAIL
    default:
        break;
    }
}

/* x(r, c) at x[r * rs + c * cs] */
G512_TARGET static void panel(const float *x, int64_t rs, int64_t cs, int64_t m, int64_t k,
                              const lq_gemm_b *b, int64_t n0, int nr, float *y, int64_t ldy,
                              float alpha, float beta, float *pan) {
    for (int64_t k0 = 0; k0 < k; k0 += KC) {
        const int kc = k - k0 < KC ? (int)(k - k0) : KC;
        pack(b, n0, nr, k0, kc, pan);
        const int first = k0 == 0;
        int64_t   r     = 0;
        /* fp16 / bf16 rows (weights in memory, not a tile just written): the next block's
         * lines into L2, a share before each tile. Issued all at once they did nothing (too
         * many in flight to keep); spread, 4096 x 4096 fp16 at 128 rows took 18.6 ms instead
         * of 24-25. Tiles in the cache were 5% slower with them. */
        const int     pf  = b->kind == LQ_GEMM_B_F16 || b->kind == LQ_GEMM_B_BF16;
        const int64_t nk  = pf && k0 + KC < k ? (k - k0 - KC < KC ? k - k0 - KC : KC) : 0;
        const int64_t lpr = (nk * 2 + 63) / 64, nl = lpr * nr, nti = m / MR > 0 ? m / MR : 1;
        const char *nb = pf ? (const char *)((const uint16_t *)b->p + n0 * b->ld + k0 + KC) : NULL;
        int64_t       l  = 0;
        for (; r + MR <= m; r += MR) {
            for (const int64_t l1 = nl * (r / MR + 1) / nti; l < l1; l++)
                _mm_prefetch(nb + (l / lpr) * b->ld * 2 + 64 * (l % lpr), _MM_HINT_T1);
            ukr(MR, x + r * rs + k0 * cs, rs, cs, pan, kc, y + r * ldy + n0, ldy, nr, first, alpha,
                beta);
        }
        tail((int)(m - r), x + r * rs + k0 * cs, rs, cs, pan, kc, y + r * ldy + n0, ldy, nr, first,
             alpha, beta);
    }
}

/* ---------------------------------------------------------------------------------------
 * bf16 weight rows on bf16 activations (LQ_QLINEAR_BF16_X), the same blocking: a panel holds
 * channel pairs, lane j of pair p the weights (2p, 2p + 1) of column j (a 32-bit element of
 * the row as stored, so packing is tr16 alone), 256 channels in 32 KiB; per pair four panel
 * loads, six broadcasts of a row's pair and 24 vdpbf16ps, each 32 multiply-adds.
 * --------------------------------------------------------------------------------------- */
#define BX_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#define BX_INLINE static inline __attribute__((always_inline)) BX_TARGET
enum { KCB = 256 };

/* pan[p * NR + j] = W(n0 + j, channels k0 + 2p, k0 + 2p + 1); zeros past nr and k */
BX_INLINE void pack_bx(const uint16_t *W, int64_t ldw, int64_t n0, int nr, int64_t k0, int kc,
                       float *pan) {
    const uint16_t *p = W + n0 * ldw + k0;
    for (int jb = 0; jb < NR; jb += 16)
        for (int c = 0; c < kc; c += 32) {
            const int cn = kc - c < 32 ? kc - c : 32;
            __m512    r[16];
            load_pairs16(p, ldw, jb, nr, c, cn, r);
            for (int i = 0; 2 * i < cn; i++)
                _mm512_store_ps(pan + (c / 2 + i) * NR + jb, r[i]);
        }
}

/* y[r, 0..nr) (=, or += unless first) the pairs' sums for r < mr; x rows ldx apart, pairs
 * read whole (the activations are zero past k) */
BX_INLINE void ukr_bx(int mr, const uint16_t *x, int64_t ldx, const float *pan, int kc,
                      float *y, int64_t ldy, int nr, int first) {
    __m512 acc[MR][NR / 16];
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NR / 16; v++)
            acc[r][v] = _mm512_setzero_ps();
    const int np = (kc + 1) / 2; /* pairs */
#pragma GCC unroll 2
    for (int pp = 0; pp < np; pp++) {
        __m512bh bv[NR / 16];
        for (int v = 0; v < NR / 16; v++)
            bv[v] = (__m512bh)_mm512_load_si512((const void *)(pan + pp * NR + 16 * v));
        for (int r = 0; r < MR; r++) {
            if (r >= mr)
                break;
            int32_t xp;
            memcpy(&xp, x + r * ldx + 2 * pp, sizeof xp);
            const __m512bh xb = (__m512bh)_mm512_set1_epi32(xp);
            for (int v = 0; v < NR / 16; v++)
                acc[r][v] = _mm512_dpbf16_ps(acc[r][v], xb, bv[v]);
        }
    }
    const __mmask64 all = nr >= NR ? ~(__mmask64)0 : (((__mmask64)1 << nr) - 1);
    for (int r = 0; r < mr; r++)
        for (int v = 0; v < NR / 16; v++) {
            const __mmask16 mk = (__mmask16)(all >> (16 * v));
            float          *yp = y + r * ldy + 16 * v;
            if (!mk)
                break;
            const __m512 o =
                first ? acc[r][v] : _mm512_add_ps(acc[r][v], _mm512_maskz_loadu_ps(mk, yp));
            _mm512_mask_storeu_ps(yp, mk, o);
        }
}

BX_TARGET static void panel_bx(const uint16_t *x, int64_t ldx, int64_t m, int64_t k,
                               const uint16_t *W, int64_t ldw, int64_t n0, int nr, float *y,
                               int64_t ldy, float *pan) {
    for (int64_t k0 = 0; k0 < k; k0 += KCB) {
        const int kc = k - k0 < KCB ? (int)(k - k0) : KCB;
        pack_bx(W, ldw, n0, nr, k0, kc, pan);
        const int first = k0 == 0;
        /* the next block's weight lines into L2, a share before each tile (as panel()) */
        const int64_t nk  = k0 + KCB < k ? (k - k0 - KCB < KCB ? k - k0 - KCB : KCB) : 0;
        const int64_t lpr = (nk * 2 + 63) / 64, nl = lpr * nr, nti = m / MR > 0 ? m / MR : 1;
        const char   *nb  = (const char *)(W + n0 * ldw + k0 + KCB);
        int64_t       l = 0, r = 0;
        for (; r + MR <= m; r += MR) {
            for (const int64_t l1 = nl * (r / MR + 1) / nti; l < l1; l++)
                _mm_prefetch(nb + (l / lpr) * ldw * 2 + 64 * (l % lpr), _MM_HINT_T1);
            ukr_bx(MR, x + r * ldx + k0, ldx, pan, kc, y + r * ldy + n0, ldy, nr, first);
        }
        switch ((int)(m - r)) {
#define BX_TAIL(M_)                                                                                \
    case M_:                                                                                       \
        ukr_bx(M_, x + r * ldx + k0, ldx, pan, kc, y + r * ldy + n0, ldy, nr, first);              \
        break;
            BX_TAIL(5)
            BX_TAIL(4)
            BX_TAIL(3)
            BX_TAIL(2)
            BX_TAIL(1)
#undef BX_TAIL
        default:
            break;
        }
    }
}

/* Block i of lq_gemm512_ex: rows (i / np) * mc.., panel i % np */
G512_TARGET static void gemm_block(const float *x, int64_t rs, int64_t cs, int64_t m, int64_t mc,
                                   int64_t k, const lq_gemm_b *b, int64_t nt, int64_t np, int64_t i,
                                   float *y, int64_t ldy, float alpha, float beta, float *pan) {
    const int64_t r0 = i / np * mc, n0 = i % np * NR;
    panel(x + r0 * rs, rs, cs, m - r0 < mc ? m - r0 : mc, k, b, n0,
          nt - n0 < NR ? (int)(nt - n0) : NR, y + r0 * ldy, ldy, alpha, beta, pan);
}

void lq_gemm512_ex(const float *x, int64_t rs, int64_t cs, int64_t m, int64_t k, const lq_gemm_b *b,
                   int64_t nt, float *y, int64_t ldy, float alpha, float beta, int nthreads) {
    if (m <= 0 || nt <= 0)
        return;
    if (k <= 0) {
        for (int64_t r = 0; r < m; r++)
            for (int64_t j = 0; j < nt; j++)
                y[r * ldy + j] = beta != 0.f ? beta * y[r * ldy + j] : 0.f;
        return;
    }
    /* (row block, panel) pairs, row block major: a thread's consecutive pairs share x's rows,
     * and a narrow nt (3 panels) still splits evenly over 2 threads */
    int64_t mc, np, nb;
    lq_gemm_split(m, nt, MR, NR, MC, &mc, &np, &nb);
    if (nthreads <= 1 || nb == 1) {            /* no team: callers inside a parallel region */
        _Alignas(64) float pan[KC * NR];
        for (int64_t i = 0; i < nb; i++)
            gemm_block(x, rs, cs, m, mc, k, b, nt, np, i, y, ldy, alpha, beta, pan);
        return;
    }
#pragma omp parallel num_threads(nb < nthreads ? (int)nb : nthreads)
    {
        _Alignas(64) float pan[KC * NR];
#pragma omp for schedule(static)
        for (int64_t i = 0; i < nb; i++)
            gemm_block(x, rs, cs, m, mc, k, b, nt, np, i, y, ldy, alpha, beta, pan);
    }
}

void lq_gemm512(const float *x, int64_t m, int64_t k, const lq_gemm_b *b, int64_t nt, float *y,
                int64_t ldy, float beta, int nthreads) {
    lq_gemm512_ex(x, k, 1, m, k, b, nt, y, ldy, 1.f, beta, nthreads);
}

/* Columns n0..n0+nr of H = beta * H + alpha * x^T x, rows 0..n0+nr: the upper triangle's share
 * of the panel and the rest of its diagonal block. x^T is read in place: its row r, channel kk
 * is x[kk * k + r], so a tile's six broadcasts per channel come from one line of x. */
G512_TARGET static void syrk_panel(const float *x, int64_t t, int64_t k, float alpha, int64_t n0,
                                   int nr, float *H, float beta, float *pan) {
    const lq_gemm_b b    = {.p = x, .ld = k, .kind = LQ_GEMM_B_KN};
    const int64_t   rows = n0 + nr;
    for (int64_t k0 = 0; k0 < t; k0 += KC) {
        const int kc = t - k0 < KC ? (int)(t - k0) : KC;
        pack(&b, n0, nr, k0, kc, pan);
        const int first = k0 == 0;
        int64_t   r     = 0;
        for (; r + MR <= rows; r += MR)
            ukr(MR, x + k0 * k + r, 1, k, pan, kc, H + r * k + n0, k, nr, first, alpha, beta);
        tail((int)(rows - r), x + k0 * k + r, 1, k, pan, kc, H + r * k + n0, k, nr, first, alpha,
             beta);
    }
}

void lq_syrk512(int64_t k, int64_t t, float alpha, const float *x, float beta, float *H,
                int nthreads) {
    const int64_t np = (k + NR - 1) / NR;
    if (k <= 0)
        return;
    if (t <= 0) {
        for (int64_t i = 0; i < k; i++)
            for (int64_t j = i; j < k; j++)
                H[i * k + j] = beta != 0.f ? beta * H[i * k + j] : 0.f;
        return;
    }
#pragma omp parallel num_threads(np < nthreads ? (int)np : nthreads)
    {
        _Alignas(64) float pan[KC * NR];
        /* panel p has (p + 1) * NR rows: the largest first, dealt as threads come free */
#pragma omp for schedule(dynamic, 1)
        for (int64_t i = 0; i < np; i++) {
            const int64_t n0 = (np - 1 - i) * NR;
            syrk_panel(x, t, k, alpha, n0, k - n0 < NR ? (int)(k - n0) : NR, H, beta, pan);
        }
    }
}
/* ---------------------------------------------------------------------------------------
 * The same product on AMX tiles (lq_cpu_amx_bf16). A tile is up to 16 rows of 64 bytes;
 * tdpbf16ps adds A (16 rows of x, 16 channel pairs each) times B (16 pairs x 16 columns: a
 * quarter of pack_bx's panel, read 4 * NR bytes a row) into C (16 x 16 float32). Why: on Intel
 * vdpbf16ps issues every other cycle, so there the GEMM above does half the multiply-adds of
 * the float one (a register loop on a 2-core Emerald Rapids VM: vdpbf16ps 60 GFLOP/s a core,
 * vfmadd231ps 125-135, tdpbf16ps 830-920). Blocks of 32 rows x 32 columns: C in tiles 0-3,
 * A in 4-5, B in 6-7; a block's C starts from y after the panel's first channel block.
 * --------------------------------------------------------------------------------------- */
#define AMX_TARGET                                                                                 \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,amx-tile,amx-bf16")))
#define AMX_INLINE static inline __attribute__((always_inline)) AMX_TARGET
enum { AMR = 32 }; /* rows of a block: two A tiles */

/* tiles for blocks of r0 + r1 rows (r0 <= 16 rows in tiles 0, 1 and 4; r1 in 2, 3 and 5,
 * left unconfigured when 0) */
AMX_INLINE void amx_config(int r0, int r1) {
    lq_amx_cfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 8; t++)
        c.colsb[t] = 64;
    c.rows[0] = c.rows[1] = c.rows[4] = (uint8_t)r0;
    c.rows[2] = c.rows[3] = c.rows[5] = (uint8_t)r1;
    c.rows[6] = c.rows[7] = 16;
    if (!r1)
        c.colsb[2] = c.colsb[3] = c.colsb[5] = 0;
    _tile_loadconfig(&c);
}

/* y[r, 0..nv) (=, or += unless first) for the block's rows; two: rows past 16 (tiles 2, 3,
 * 5 configured); steps of 16 pairs; tmp: 32 x 32 floats for a block narrower than 32 */
AMX_INLINE void amx_block(int two, const uint16_t *x, int64_t ldx, const float *pan, int steps,
                          float *y, int64_t ldy, int mr, int nv, int first, float *tmp) {
    const int64_t sx = ldx * 2;
    float        *c  = nv == 32 ? y : tmp;
    const int64_t sc = nv == 32 ? ldy * 4 : 32 * 4, lc = nv == 32 ? ldy : 32;
    if (first) {
        _tile_zero(0);
        _tile_zero(1);
        if (two) {
            _tile_zero(2);
            _tile_zero(3);
        }
    } else {
        if (nv < 32) {
            const __mmask32 mk = (__mmask32)(((uint64_t)1 << nv) - 1);
            for (int r = 0; r < mr; r++) {
                _mm512_storeu_ps(tmp + r * 32, _mm512_maskz_loadu_ps((__mmask16)mk, y + r * ldy));
                _mm512_storeu_ps(tmp + r * 32 + 16,
                                 _mm512_maskz_loadu_ps((__mmask16)(mk >> 16), y + r * ldy + 16));
            }
        }
        _tile_loadd(0, c, sc);
        _tile_loadd(1, c + 16, sc);
        if (two) {
            _tile_loadd(2, c + 16 * lc, sc);
            _tile_loadd(3, c + 16 * lc + 16, sc);
        }
    }
    for (int s = 0; s < steps; s++) {
        _tile_loadd(4, x + 32 * s, sx);
        _tile_loadd(6, pan + 16 * s * NR, NR * 4);
        _tile_loadd(7, pan + 16 * s * NR + 16, NR * 4);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        if (two) {
            _tile_loadd(5, x + 16 * ldx + 32 * s, sx);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
    }
    _tile_stored(0, c, sc);
    _tile_stored(1, c + 16, sc);
    if (two) {
        _tile_stored(2, c + 16 * lc, sc);
        _tile_stored(3, c + 16 * lc + 16, sc);
    }
    if (nv < 32) {
        const __mmask32 mk = (__mmask32)(((uint64_t)1 << nv) - 1);
        for (int r = 0; r < mr; r++) {
            _mm512_mask_storeu_ps(y + r * ldy, (__mmask16)mk, _mm512_loadu_ps(tmp + r * 32));
            _mm512_mask_storeu_ps(y + r * ldy + 16, (__mmask16)(mk >> 16),
                                  _mm512_loadu_ps(tmp + r * 32 + 16));
        }
    }
}

/* not inlined: an OpenMP region's body has no target attribute of its own */
AMX_TARGET static void amx_release(void) {
    _tile_release();
}

/* *cfg: the rows the tiles are configured for (r0 * 32 + r1), kept across calls */
AMX_TARGET static void panel_amx(const uint16_t *x, int64_t ldx, int64_t m, int64_t k,
                                 const uint16_t *W, int64_t ldw, int64_t n0, int nr, float *y,
                                 int64_t ldy, float *pan, float *tmp, int *cfg) {
    for (int64_t k0 = 0; k0 < k; k0 += KCB) {
        const int kc = k - k0 < KCB ? (int)(k - k0) : KCB, steps = (kc + 31) / 32;
        pack_bx(W, ldw, n0, nr, k0, kc, pan);
        /* pairs from kc up to the last step's 16 are read too: zeros, as x is past k */
        memset(pan + (kc + 1) / 2 * NR, 0, (size_t)(steps * 16 - (kc + 1) / 2) * NR * 4);
        const int first = k0 == 0;
        /* the next block's weight lines into L2, a share before each block (as panel()) */
        const int64_t nk  = k0 + KCB < k ? (k - k0 - KCB < KCB ? k - k0 - KCB : KCB) : 0;
        const int64_t lpr = (nk * 2 + 63) / 64, nl = lpr * nr, nbl = (m + AMR - 1) / AMR;
        const char   *nb = (const char *)(W + n0 * ldw + k0 + KCB);
        int64_t       l  = 0;
        for (int64_t r = 0; r < m; r += AMR) {
            const int mr = m - r < AMR ? (int)(m - r) : AMR;
            const int r0 = mr < 16 ? mr : 16, r1 = mr - r0;
            if (*cfg != r0 * 32 + r1) {
                amx_config(r0, r1);
                *cfg = r0 * 32 + r1;
            }
            for (const int64_t l1 = nl * (r / AMR + 1) / nbl; l < l1; l++)
                _mm_prefetch(nb + (l / lpr) * ldw * 2 + 64 * (l % lpr), _MM_HINT_T1);
            for (int h = 0; h < nr; h += 32) {
                const int nv = nr - h < 32 ? nr - h : 32;
                if (r1)
                    amx_block(1, x + r * ldx + k0, ldx, pan + h, steps, y + r * ldy + n0 + h, ldy,
                              mr, nv, first, tmp);
                else
                    amx_block(0, x + r * ldx + k0, ldx, pan + h, steps, y + r * ldy + n0 + h, ldy,
                              mr, nv, first, tmp);
            }
        }
    }
}

/* (row block, panel) pairs over the team, on vdpbf16ps panels or (amx) AMX ones */
static void bf16x_gemm(int amx, const uint16_t *x, int64_t ldx, int64_t m, int64_t k,
                       const uint16_t *W, int64_t ldw, int64_t nt, float *y, int64_t ldy,
                       int nthreads) {
    if (m <= 0 || nt <= 0 || k <= 0)
        return;
    int64_t mc, np, nb;
    lq_gemm_split(m, nt, amx ? AMR : MR, NR, MC, &mc, &np, &nb);
    const int team = nb < nthreads ? (int)nb : nthreads > 0 ? nthreads : 1;
#pragma omp parallel num_threads(team)
    {
        _Alignas(64) float pan[KCB / 2 * NR];
        _Alignas(64) float tmp[AMR * 32];
        int                cfg = -1;
#pragma omp for schedule(static)
        for (int64_t i = 0; i < nb; i++) {
            const int64_t r0 = i / np * mc, n0 = i % np * NR, rows = m - r0 < mc ? m - r0 : mc;
            const int     nr = nt - n0 < NR ? (int)(nt - n0) : NR;
            if (amx)
                panel_amx(x + r0 * ldx, ldx, rows, k, W, ldw, n0, nr, y + r0 * ldy, ldy, pan, tmp,
                          &cfg);
            else
                panel_bx(x + r0 * ldx, ldx, rows, k, W, ldw, n0, nr, y + r0 * ldy, ldy, pan);
        }
        if (cfg >= 0)
            amx_release();
    }
}

void lq_gemm512_bf16x(const uint16_t *x, int64_t ldx, int64_t m, int64_t k, const uint16_t *W,
                      int64_t ldw, int64_t nt, float *y, int64_t ldy, int nthreads) {
    bf16x_gemm(0, x, ldx, m, k, W, ldw, nt, y, ldy, nthreads);
}

void lq_gemm_amx_bf16x(const uint16_t *x, int64_t ldx, int64_t m, int64_t k, const uint16_t *W,
                       int64_t ldw, int64_t nt, float *y, int64_t ldy, int nthreads) {
    bf16x_gemm(1, x, ldx, m, k, W, ldw, nt, y, ldy, nthreads);
}

#else
void lq_syrk512(int64_t k, int64_t t, float alpha, const float *x, float beta, float *H,
                int nthreads) {
    (void)k, (void)t, (void)alpha, (void)x, (void)beta, (void)H, (void)nthreads;
}
void lq_gemm512_ex(const float *x, int64_t rs, int64_t cs, int64_t m, int64_t k, const lq_gemm_b *b,
                   int64_t nt, float *y, int64_t ldy, float alpha, float beta, int nthreads) {
    (void)x, (void)rs, (void)cs, (void)m, (void)k, (void)b, (void)nt, (void)y, (void)ldy,
        (void)alpha, (void)beta, (void)nthreads;
}
void lq_gemm512(const float *x, int64_t m, int64_t k, const lq_gemm_b *b, int64_t nt, float *y,
                int64_t ldy, float beta, int nthreads) {
    lq_gemm512_ex(x, k, 1, m, k, b, nt, y, ldy, 1.f, beta, nthreads);
}
void lq_gemm512_bf16x(const uint16_t *x, int64_t ldx, int64_t m, int64_t k, const uint16_t *W,
                      int64_t ldw, int64_t nt, float *y, int64_t ldy, int nthreads) {
    (void)x, (void)ldx, (void)m, (void)k, (void)W, (void)ldw, (void)nt, (void)y, (void)ldy,
        (void)nthreads;
}
void lq_gemm_amx_bf16x(const uint16_t *x, int64_t ldx, int64_t m, int64_t k, const uint16_t *W,
                       int64_t ldw, int64_t nt, float *y, int64_t ldy, int nthreads) {
    (void)x, (void)ldx, (void)m, (void)k, (void)W, (void)ldw, (void)nt, (void)y, (void)ldy,
        (void)nthreads;
}
#endif
