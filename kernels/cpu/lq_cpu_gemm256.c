/* AVX2 float GEMM for dense weights from LQ_GEMM256_M rows: y[m, nt] = x[m, k] @ W^T, W [nt, k]
 * as stored (float32, fp16 or bf16), converted to float32 as it is packed (exact; the products
 * and float32 sums as every other dense path). lq_cpu_gemm512.c's blocking, 8 wide: W is
 * packed in panels of NR = 16 columns x KC channels (16 KiB), k-major, converted and
 * transposed on the way; every MR = 6 rows of x then run against the panel: 12 accumulators,
 * per channel two panel loads and six broadcasts for 12 FMAs.
 *
 * Two differences from the AVX-512 GEMM, both for Zen 3's 32 KiB L1 and 512 KiB L2:
 * - x is packed first, a tile's 6 rows channel-interleaved, so the six broadcasts of a channel
 *   come from one line. Read in place, x's rows lie 16 KiB apart at k = 4096, all in one L1
 *   set (a prototype, 4096 x 4096 at 256 rows on 1 thread: 128-133 ms in place, 114-116
 *   packed).
 * - k is taken in chunks of KCH channels. A panel streams its row block's x once per chunk,
 *   and over all of k = 11008 that was 11 MiB per 16 columns (a prototype at 256 rows on 1
 *   thread: 547-639 ms against the rows kernel's 404-444). Per chunk, y is read and written
 *   once more, m x nt floats per 4096 channels.
 * The tile kernel's prefetch of the next block's weight lines is gemm512's. */
#include "lq_kernels_impl.h"

#include <omp.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "lq_cpu_avx2_inl.h"
#include <immintrin.h>

#define G256_TARGET LQ_AVX2_TARGET
#define G256_INLINE LQ_AVX2_INLINE

enum { NR = 16, MR = 6, NV = NR / 8, KC = 256, MC = 288, KCH = 4096 };

/* pan[kk * NR + j] = B(column n0 + j, channel k0 + kk) for kk < kc, j < NR; zero past nr */
G256_INLINE void pack_w(const lq_gemm_b *b, int64_t n0, int nr, int64_t k0, int kc, float *pan) {
    if (b->kind == LQ_GEMM_B_PACK) {
        b->pack(b->ctx, n0, nr, k0, kc, pan, NR);
        return;
    }
    const int64_t   ld = b->ld;
    const int       bf = b->kind == LQ_GEMM_B_BF16, f32 = b->kind == LQ_GEMM_B_F32;
    const float    *p32 = f32 ? (const float *)b->p + n0 * ld + k0 : NULL;
    const uint16_t *p16 = f32 ? NULL : (const uint16_t *)b->p + n0 * ld + k0;
    const int       k8  = kc & ~7;
    for (int jb = 0; jb < NR; jb += 8) {
        for (int c = 0; c < k8; c += 8) {
            __m256 r[8];
            for (int i = 0; i < 8; i++)
                r[i] = jb + i >= nr ? _mm256_setzero_ps()
                       : f32        ? _mm256_loadu_ps(p32 + (jb + i) * ld + c)
                                    : lq_avx2_half8(p16 + (jb + i) * ld + c, bf);
            lq_avx2_tr8(r);
            for (int i = 0; i < 8; i++)
                _mm256_store_ps(pan + (c + i) * NR + jb, r[i]);
        }
        for (int c = k8; c < kc; c++)
            for (int i = 0; i < 8; i++)
                pan[c * NR + jb + i] = jb + i >= nr ? 0.f
                                       : f32        ? p32[(jb + i) * ld + c]
                                                    : lq_avx2_half1(p16[(jb + i) * ld + c], bf);
    }
}

/* y[r, 0..nr) for r < mr (a constant once inlined) = (first) or += the tile's sums; xs: the
 * tile's packed x at the block's first channel, x(r, kk) at xs[kk * MR + r] */
G256_INLINE void ukr(int mr, const float *xs, const float *pan, int kc, float *y, int64_t ldy,
                     int nr, int first) {
    __m256 acc[MR][NV];
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++)
            acc[r][v] = _mm256_setzero_ps();
#pragma GCC unroll 4
    for (int kk = 0; kk < kc; kk++) {
        __m256 b[NV];
        for (int v = 0; v < NV; v++)
            b[v] = _mm256_load_ps(pan + kk * NR + 8 * v);
        for (int r = 0; r < MR; r++) {
            if (r >= mr)
                break;
            const __m256 xb = _mm256_broadcast_ss(xs + kk * MR + r);
            for (int v = 0; v < NV; v++)
                acc[r][v] = _mm256_fmadd_ps(xb, b[v], acc[r][v]);
        }
    }
    /* a narrow panel (nr < NR) through masks: copying the sums to an array made GCC 12 keep
     * every accumulator in memory, a store after each FMA */
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int v = 0; v < NV; v++) {
        const __m256i mk = _mm256_cmpgt_epi32(_mm256_set1_epi32(nr - 8 * v), lane);
        for (int r = 0; r < mr; r++) {
            float *yp = y + r * ldy + 8 * v;
            if (nr >= 8 * (v + 1)) {
                _mm256_storeu_ps(yp,
                                 first ? acc[r][v] : _mm256_add_ps(acc[r][v], _mm256_loadu_ps(yp)));
            } else if (nr > 8 * v) {
                const __m256 o =
                    first ? acc[r][v] : _mm256_add_ps(acc[r][v], _mm256_maskload_ps(yp, mk));
                _mm256_maskstore_ps(yp, mk, o);
            }
        }
    }
}

/* rows [0, mm) of a row block against the panel at n0 over the chunk's channels [c0, c1); xs:
 * the row block's packed chunk (tiles kch * MR floats apart) */
G256_TARGET static void panel(const float *xs, int64_t kch, int64_t mm, const lq_gemm_b *b,
                              int64_t n0, int nr, int64_t c0, int64_t c1, float *y, int64_t ldy,
                              float *pan) {
    for (int64_t k0 = c0; k0 < c1; k0 += KC) {
        const int kc = c1 - k0 < KC ? (int)(c1 - k0) : KC;
        pack_w(b, n0, nr, k0, kc, pan);
        /* the next block's weight lines into L2, a share before each tile (gemm512's panel) */
        const int     pf = b->kind != LQ_GEMM_B_PACK; /* (a decoder's codes: not fetched) */
        const int64_t nk = pf && k0 + KC < c1 ? (c1 - k0 - KC < KC ? c1 - k0 - KC : KC) : 0;
        const int64_t es = b->kind == LQ_GEMM_B_F32 ? 4 : 2, row = b->ld * es;
        const int64_t lpr = (nk * es + 63) / 64, nl = lpr * nr, nti = (mm + MR - 1) / MR;
        const char   *nb    = pf ? (const char *)b->p + (n0 * b->ld + k0 + KC) * es : NULL;
        const float  *xk    = xs + (k0 - c0) * MR;
        const int     first = k0 == 0;
        int64_t       l = 0, r = 0;
        for (; r < mm; r += MR) {
            for (const int64_t l1 = nl * (r / MR + 1) / nti; l < l1; l++)
                _mm_prefetch(nb + (l / lpr) * row + 64 * (l % lpr), _MM_HINT_T1);
            const float *xt = xk + r / MR * kch * MR;
            float       *yt = y + r * ldy + n0;
            switch (mm - r < MR ? (int)(mm - r) : MR) {
#define G256_TILE(M_)                                                                              \
    case M_:                                                                                       \
        ukr(M_, xt, pan, kc, yt, ldy, nr, first);                                                  \
        break;
                G256_TILE(1)
                G256_TILE(2)
                G256_TILE(3)
                G256_TILE(4)
                G256_TILE(5)
#undef G256_TILE
            default:
                ukr(MR, xt, pan, kc, yt, ldy, nr, first);
            }
        }
    }
}

/* tile t of x (rows 6t.., zero past m), channels [c0, c0 + kch), into xs + t * kch * MR, in
 * the order x8 gives (lq_gemm_b) where it is not NULL */
G256_TARGET static void pack_x(const float *x, int64_t m, int64_t k, int64_t t, int64_t c0,
                               int64_t kch, const int8_t *x8, float *xs) {
    float *d = xs + t * kch * MR;
    for (int r = 0; r < MR; r++) {
        const int64_t row = t * MR + r;
        if (row >= m) {
            for (int64_t c = 0; c < kch; c++)
                d[c * MR + r] = 0.f;
            continue;
        }
        const float *xr = x + row * k + c0;
        if (x8)
            for (int64_t c = 0; c < kch; c += 8)
                for (int l = 0; l < 8; l++)
                    d[(c + l) * MR + r] = xr[c + x8[l]];
        else
            for (int64_t c = 0; c < kch; c++)
                d[c * MR + r] = xr[c];
    }
}

size_t lq_gemm256_ws(int64_t m, int64_t k) {
    const int64_t tiles = (m + MR - 1) / MR, kch = k < KCH ? k : KCH;
    return (size_t)(tiles * MR * kch) * sizeof(float);
}

void lq_gemm256(const float *x, int64_t m, int64_t k, const lq_gemm_b *b, int64_t nt, float *y,
                int64_t ldy, float *ws, int nthreads) {
    if (m <= 0 || nt <= 0)
        return;
    if (k <= 0) {
        for (int64_t r = 0; r < m; r++)
            memset(y + r * ldy, 0, (size_t)nt * sizeof(float));
        return;
    }
    int64_t mc, np, nb; /* (row block, panel) pairs as lq_gemm512 */
    lq_gemm_split(m, nt, MR, NR, MC, &mc, &np, &nb);
    const int64_t tiles = (m + MR - 1) / MR;
    const int     th    = nthreads > 0 ? nthreads : 1;
    /* The threads take the pairs in turn: on a shared VM a neighbour slows one core for seconds
     * at a time, and a static split waits for it (as nf4g_range's tiles). 4096 x 11008, 2
     * threads, 10 alternated runs: 128 rows median 89.3 -> 88.1 ms, best 86.5 -> 82.1; 64 rows
     * 48.3 -> 47.3, best 45.7 -> 43.0. */
#pragma omp parallel num_threads(th)
    {
        _Alignas(64) float pan[KC * NR];
        for (int64_t c0 = 0; c0 < k; c0 += KCH) {
            const int64_t kch = k - c0 < KCH ? k - c0 : KCH;
#pragma omp for schedule(static)
            for (int64_t t = 0; t < tiles; t++)
                pack_x(x, m, k, t, c0, kch, b->kind == LQ_GEMM_B_PACK ? b->x8 : NULL, ws);
#pragma omp for schedule(dynamic, 4)
            for (int64_t i = 0; i < nb; i++) {
                const int64_t r0 = i / np * mc, n0 = i % np * NR;
                panel(ws + r0 / MR * kch * MR, kch, m - r0 < mc ? m - r0 : mc, b, n0,
                      nt - n0 < NR ? (int)(nt - n0) : NR, c0, c0 + kch, y + r0 * ldy, ldy, pan);
            }
        }
    }
}
#else
size_t lq_gemm256_ws(int64_t m, int64_t k) {
    (void)m, (void)k;
    return 0;
}
void lq_gemm256(const float *x, int64_t m, int64_t k, const lq_gemm_b *b, int64_t nt, float *y,
                int64_t ldy, float *ws, int nthreads) {
    (void)x, (void)m, (void)k, (void)b, (void)nt, (void)y, (void)ldy, (void)ws, (void)nthreads;
}
#endif
