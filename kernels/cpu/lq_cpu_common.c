/* Shared pieces of the optimized CPU kernels: thread count, bias, and the large-m path that
 * dequantizes column tiles of W into the caller's workspace and hands them to OpenBLAS. */
#include "lq_kernels_impl.h"

#include <cblas.h>
#include <limits.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

int lq_cpu_threads(int nthreads) {
    return nthreads > 0 ? nthreads : omp_get_max_threads();
}

void lq_split_init(lq_split *s, int nthreads, int64_t n, int64_t steal) {
    s->nseg  = nthreads <= LQ_SEG_MAX && n <= (int64_t)UINT32_MAX ? nthreads : 0;
    s->n     = n;
    s->steal = steal > 0 ? steal : 1;
    for (int t = 0; t < s->nseg; t++)
        s->seg[t].fb = (uint64_t)(n * t / nthreads) | ((uint64_t)(n * (t + 1) / nthreads) << 32);
}

lq_seg_it lq_split_iter(lq_split *s, int th, int tn) {
    lq_seg_it it = {s, th, 0, 0, 0};
    if (!s->nseg || th >= s->nseg) { /* static; (a team larger than asked: nothing of its own) */
        it.mode = s->nseg ? 1 : 2;
        it.a    = s->n * th / tn;
        it.b    = s->n * (th + 1) / tn;
    }
    return it;
}

/* (f, b) of a part's word */
static void seg_fb(uint64_t v, int64_t *f, int64_t *b) {
    *f = (int64_t)(v & 0xffffffffu);
    *b = (int64_t)(v >> 32);
}

/* units a thread takes from [f, b) of a part, its own front or another's back: up to `steal`,
 * and half of what is left once that is less, so that the end is shared in small runs (one unit
 * a claim cost NF4's float kernel 1-2% on one thread: a call and a CAS per 4 rows) */
static int64_t seg_take(const lq_split *s, int64_t f, int64_t b) {
    return (b - f + 1) / 2 < s->steal ? (b - f + 1) / 2 : s->steal;
}

int lq_seg_next(lq_seg_it *it, int64_t *u0, int64_t *u1) {
    int64_t f, b;
    if (it->mode == 2) {
        *u0      = it->a;
        *u1      = it->b;
        it->mode = 3;
        return it->a < it->b;
    }
    if (it->mode == 3)
        return 0;
    if (it->mode == 0) {
        uint64_t *me = &it->s->seg[it->th].fb;
        uint64_t  v  = __atomic_load_n(me, __ATOMIC_RELAXED);
        for (seg_fb(v, &f, &b); f < b; seg_fb(v, &f, &b)) {
            const int64_t c = seg_take(it->s, f, b);
            if (__atomic_compare_exchange_n(me, &v, v + (uint64_t)c, 1, __ATOMIC_RELAXED,
                                            __ATOMIC_RELAXED)) {
                *u0 = f;
                *u1 = f + c;
                return 1;
            }
        }
        it->mode = 1;
    }
    for (;;) {
        int     vi   = -1;
        int64_t most = 0;
        for (int u = 0; u < it->s->nseg; u++) {
            seg_fb(__atomic_load_n(&it->s->seg[u].fb, __ATOMIC_RELAXED), &f, &b);
            if (b - f > most) {
                most = b - f;
                vi   = u;
            }
        }
        if (vi < 0)
            return 0;
        uint64_t *vs = &it->s->seg[vi].fb;
        uint64_t  v  = __atomic_load_n(vs, __ATOMIC_RELAXED);
        for (seg_fb(v, &f, &b); f < b; seg_fb(v, &f, &b)) {
            const int64_t  c  = seg_take(it->s, f, b);
            const uint64_t nv = (uint64_t)f | ((uint64_t)(b - c) << 32);
            if (__atomic_compare_exchange_n(vs, &v, nv, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
                *u0 = b - c;
                *u1 = b;
                return 1;
            }
        }
    }
}

void lq_add_bias_f16(const uint16_t *bias, int64_t m, int64_t n, float *y) {
    if (!bias)
        return;
    for (int64_t r = 0; r < m; r++)
        for (int64_t i = 0; i < n; i++)
            y[r * n + i] += lq_f16_to_f32(bias[i]);
}

int lq_half_cvt_kind(void) {
    return lq_cpu_avx512() ? 2 : lq_cpu_avx2i() ? 1 : 0;
}

void lq_half_to_f32(int kind, const uint16_t *h, int bf, int64_t cnt, float *out) {
    if (kind == 2) {
        lq_dense16_to_f32_avx512(h, bf, cnt, out);
    } else if (kind == 1) {
        lq_dense16_to_f32_avx2(h, bf, cnt, out);
    } else if (bf) {
        for (int64_t e = 0; e < cnt; e++) {
            const uint32_t u = (uint32_t)h[e] << 16;
            memcpy(out + e, &u, 4);
        }
    } else {
        for (int64_t e = 0; e < cnt; e++)
            out[e] = lq_f16_to_f32_fast(h[e]);
    }
}

int lq_blas_dims_ok(int64_t m, int64_t n, int64_t k) {
    return m <= INT_MAX && n <= INT_MAX && k <= INT_MAX;
}

void lq_sgemm_tile(const float *x, int64_t m, int64_t k, const float *tile, int64_t nt, int kn,
                   float *y, int64_t ldy, float beta, int nthreads) {
    if (lq_cpu_avx512() && (kn || m >= LQ_GEMM512_MIN_M)) {
        const lq_gemm_b b = {
            .p = tile, .ld = kn ? nt : k, .kind = kn ? LQ_GEMM_B_KN : LQ_GEMM_B_F32};
        lq_gemm512(x, m, k, &b, nt, y, ldy, beta, lq_cpu_threads(nthreads));
        return;
    }
    lq_sgemm_blas(x, m, k, tile, nt, kn, y, ldy, beta);
}

void lq_sgemm_blas(const float *x, int64_t m, int64_t k, const float *tile, int64_t nt, int kn,
                   float *y, int64_t ldy, float beta) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, kn ? CblasNoTrans : CblasTrans, (int)m, (int)nt,
                (int)k, 1.f, x, (int)k, tile, kn ? (int)nt : (int)k, beta, y, (int)ldy);
}

void lq_ssyrk_upper(int64_t k, int64_t t, float alpha, const float *x, float beta, float *H,
                    int nthreads) {
    if (lq_cpu_avx512()) {
        lq_syrk512(k, t, alpha, x, beta, H, lq_cpu_threads(nthreads));
        return;
    }
    cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, (int)k, (int)t, alpha, x, (int)k, beta, H,
                (int)k);
}

void lq_sgemm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *A,
              int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc,
              int nthreads) {
    if (lq_cpu_avx512()) {
        const lq_gemm_b b = {.p = B, .ld = ldb, .kind = tb ? LQ_GEMM_B_F32 : LQ_GEMM_B_KN};
        lq_gemm512_ex(A, ta ? 1 : lda, ta ? lda : 1, m, k, &b, n, C, ldc, alpha, beta,
                      nthreads == 1 ? 1 : lq_cpu_threads(nthreads));
        return;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (int)m, (int)n, (int)k, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}

lq_status lq_dequant_kn_cpu(const lq_qlinear *w, const lq_kn_ops *ops, int64_t G, float *out,
                            int nthreads) {
    enum { NB = 16, CB = 64 }; /* output columns x input channels per transposed block */
    const int64_t n = w->n, k = w->k;
    float        *sc = lq_malloc_n(2 * G * n, sizeof(float));
    if (!sc)
        return LQ_ERR_NOMEM;
    float *zs = sc + G * n;
    ops->params(w, 0, G, 0, n, n, sc, zs);
    const int64_t nblk = (n + NB - 1) / NB, ncb = (k + CB - 1) / CB;
#pragma omp parallel for schedule(static) num_threads(lq_cpu_threads(nthreads))
    for (int64_t t = 0; t < nblk * ncb; t++) {
        const int64_t i0 = (t % nblk) * NB, nc = i0 + NB < n ? NB : n - i0;
        const int64_t c0 = (t / nblk) * CB, c1 = c0 + CB < k ? c0 + CB : k;
        float         blk[CB * NB];
        ops->kn(w, c0, c1, i0, nc, sc + i0, zs + i0, n, blk, NB);
        for (int64_t j = 0; j < nc; j++)
            for (int64_t c = c0; c < c1; c++)
                out[(i0 + j) * k + c] = blk[(c - c0) * NB + j];
    }
    free(sc);
    return LQ_OK;
}

/* The format's panel decode into lq_gemm256 where sgemm would be OpenBLAS's (no AVX-512). Zen
 * 3, GPTQ-4 4096 x 4096 (weights from memory): 64 rows 29.4-30.3 -> 25.2-25.3 ms on 1 thread,
 * 16.1-16.5 -> 12.9-13.0 on 2; 512 rows on 2 threads 127 -> 104; 118 rows on 1 thread 51.7-55.2
 * -> 44.7-45.2. Below 49 rows GPTQ's buffered kernel stays: at 24-48 rows on 2 threads the GEMM
 * took 10-27% longer (on 1 thread 1-11% less from 32 rows). Through the formats' generic kn
 * hook (a group lookup per channel and 8 columns) the decode cost what the GEMM saved (64 rows:
 * 31.4-31.6 ms). */
static int kn_gemm256(const lq_qlinear *w, const lq_kn_ops *ops) {
    return ops->pack && ops->pack_ok(w) && !lq_cpu_avx512() && lq_cpu_avx2i();
}

size_t lq_ws_kn_tiled(const lq_qlinear *w, const lq_kn_ops *ops, int64_t G, int64_t m) {
    if (kn_gemm256(w, ops))
        return lq_gemm256_ws(m, w->k) + (size_t)(2 * G * w->n) * sizeof(float);
    return (size_t)(lq_tile_rows(w) * (w->k + 2 * G)) * sizeof(float);
}

lq_status lq_gemm_kn_tiled(const lq_qlinear *w, const lq_kn_ops *ops, int64_t G, const float *x,
                           int64_t m, float *y, float *ws, int nthreads) {
    enum { CB = 256 }; /* input channels per piece of a tile's dequantization */
    const int64_t n = w->n, k = w->k, tr = lq_tile_rows(w), ncb = (k + CB - 1) / CB;
    if (!lq_blas_dims_ok(m, n, k))
        return LQ_ERR_UNSUPPORTED;
    if (kn_gemm256(w, ops)) {
        float    *sc = ws + lq_gemm256_ws(m, k) / sizeof(float), *zs = sc + G * n;
        const int nt = lq_cpu_threads(nthreads);
        enum { PB = 256 }; /* columns a piece of the parameters */
#pragma omp parallel for schedule(static) num_threads(nt)
        for (int64_t i0 = 0; i0 < n; i0 += PB)
            ops->params(w, 0, G, i0, n - i0 < PB ? n - i0 : PB, n, sc + i0, zs + i0);
        const lq_kn_pack ctx = {w, sc, zs};
        const lq_gemm_b  b   = {.kind = LQ_GEMM_B_PACK, .pack = ops->pack, .ctx = &ctx};
        lq_gemm256(x, m, k, &b, n, y, n, ws, nt);
        return LQ_OK;
    }
    float    *tile = ws, *sc = ws + tr * k, *zs = sc + G * tr;
    const int nt   = lq_blas_tile_threads(nthreads); /* see LQ_TILE_ROWS */
    for (int64_t i0 = 0; i0 < n; i0 += tr) {
        const int64_t nc = i0 + tr < n ? tr : n - i0;
        ops->params(w, 0, G, i0, nc, tr, sc, zs);
#pragma omp parallel for schedule(static) num_threads(nt)
        for (int64_t cb = 0; cb < ncb; cb++) {
            const int64_t c0 = cb * CB, c1 = c0 + CB < k ? c0 + CB : k;
            ops->kn(w, c0, c1, i0, nc, sc, zs, tr, tile + c0 * nc, nc);
        }
        lq_sgemm_tile(x, m, k, tile, nc, 1, y + i0, n, 0.f, nthreads);
    }
    return LQ_OK;
}

int64_t lq_grouped_max_m(void) {
    return lq_cpu_avx512() ? 2 * LQ_FUSED_M : LQ_BUF_MAX_M;
}

void lq_group_sums(const float *x, int64_t m, int64_t k, int64_t gs, int64_t G, float *xsum) {
    for (int64_t r = 0; r < m; r++)
        for (int64_t g = 0; g < G; g++) {
            const int64_t c1   = (g + 1) * gs < k ? (g + 1) * gs : k;
            float         sacc = 0.f;
            for (int64_t c = g * gs; c < c1; c++)
                sacc += x[r * k + c];
            xsum[r * G + g] = sacc;
        }
}

/* Their workspace: xp [m, k * xbits/8 rounded up to 64 bytes] | block sums [m, nkb] | block
 * scales [m, nkb] (0: no such semantics for w). */
size_t lq_gptq_qx_ws(const lq_qlinear *w, int64_t m, int xbits) {
    const int64_t ab = lq_gptq_qx_block(w);
    return ab ? lq_qx_ws_bytes(w->k, ab, m, xbits) : 0;
}

size_t lq_qx_ws_bytes(int64_t k, int64_t ab, int64_t m, int xbits) {
    const int64_t nkb = (k + ab - 1) / ab;
    return (size_t)(m * lq_align_up(k * (xbits / 8), 64) + 2 * m * nkb * 4);
}

/* The integer kernels' activation layout (lq_cpu_vnni.c, lq_cpu_avx2.c): xr quantized to int8
 * per block of ab channels (lq_qx_block) into xp, its block sums (exact as float) and scales. A
 * qweight word holds 32/b channels of a column; for b != 3, slice s of a word's channels is
 * channels u * (8/b) + s, u = 0..3 (its four bytes masked per byte after a shift by s * b).
 * 3-bit: channel order. */
LQ_CLONES void lq_gptq_qx_row(const lq_qlinear *w, int64_t ab, const float *xr, uint8_t *xp,
                              float *xsf, float *dx) {
    const int64_t k = w->k, nkb = (k + ab - 1) / ab;
    const int     b = w->bits, vpw = 32 / b;
    int32_t       tmp[256];
    if (b == 3) {
        lq_qx_row(k, ab, xr, xp, xsf, dx);
        return;
    }
    for (int64_t kb = 0; kb < nkb; kb++) {
        const int64_t c0 = kb * ab, c1 = c0 + ab < k ? c0 + ab : k;
        xsf[kb] = (float)lq_qx_block(xr + c0, c1 - c0, 127.f, tmp, &dx[kb]);
        for (int64_t c = c0; c < c1; c += vpw) {
            const int32_t *t = tmp + (c - c0);
            int8_t        *o = (int8_t *)(xp + c);
            for (int s = 0; s < 8 / b; s++)
                for (int u = 0; u < 4; u++)
                    o[4 * s + u] = (int8_t)t[u * (8 / b) + s];
        }
    }
}

int64_t lq_awq_np(const lq_qlinear *w) {
    return (w->n + 127) / 128 * 128;
}

size_t lq_awq_seq_ws(const lq_qlinear *w, int64_t m, int64_t nseg) {
    const int64_t ab = lq_awq_qx_block(w);
    return ab ? lq_qx_ws_bytes(w->k, ab, m, 8) + (size_t)(nseg * m * lq_awq_np(w)) * 4 : 0;
}

LQ_CLONES void lq_qx_row(int64_t k, int64_t ab, const float *xr, uint8_t *xp, float *xsf,
                         float *dx) {
    const int64_t nkb = (k + ab - 1) / ab;
    int32_t       tmp[256];
    for (int64_t kb = 0; kb < nkb; kb++) {
        const int64_t c0 = kb * ab, c1 = c0 + ab < k ? c0 + ab : k;
        xsf[kb] = (float)lq_qx_block(xr + c0, c1 - c0, 127.f, tmp, &dx[kb]);
        for (int64_t c = c0; c < c1; c++)
            ((int8_t *)xp)[c] = (int8_t)tmp[c - c0];
    }
}

#define AWQ_SEG_C   1024
#define AWQ_SEG_MAX 16
int64_t lq_awq_nseg(int64_t nkb, int64_t ab) {
    const int64_t want = nkb * ab / AWQ_SEG_C;
    int64_t       ns   = 1;
    while (2 * ns <= want && 2 * ns <= nkb && 2 * ns <= AWQ_SEG_MAX)
        ns *= 2;
    return ns;
}

/* where work t falls: segment *s (nseg past the end), column block *b */
static void awq_pos(int64_t nkb, int64_t nseg, int64_t nblk, int64_t t, int64_t *s, int64_t *b) {
    int64_t si = 0;
    while (si < nseg && lq_awq_seg_kb(nkb, nseg, si + 1) * nblk <= t)
        si++;
    if (si == nseg) {
        *s = si;
        *b = 0;
        return;
    }
    const int64_t k0 = lq_awq_seg_kb(nkb, nseg, si), len = lq_awq_seg_kb(nkb, nseg, si + 1) - k0;
    const int64_t bi = (t - k0 * nblk + len / 2) / len;
    *s               = bi < nblk ? si : si + 1;
    *b               = bi < nblk ? bi : 0;
}

void lq_awq_share_init(lq_awq_share *sh, int64_t nkb, int64_t nseg, int64_t nblk, int64_t th,
                       int64_t tn) {
    sh->nseg = nseg;
    sh->nblk = nblk;
    awq_pos(nkb, nseg, nblk, nkb * nblk * th / tn, &sh->s, &sh->b0);
    awq_pos(nkb, nseg, nblk, nkb * nblk * (th + 1) / tn, &sh->s1, &sh->b1);
}

int lq_awq_share_next(lq_awq_share *sh, int64_t *s, int64_t *c0, int64_t *c1) {
    while (sh->s <= sh->s1 && sh->s < sh->nseg) {
        const int64_t si = sh->s, b0 = sh->b0, e = si == sh->s1 ? sh->b1 : sh->nblk;
        sh->s++;
        sh->b0 = 0;
        if (b0 < e) {
            *s  = si;
            *c0 = b0;
            *c1 = e;
            return 1;
        }
    }
    return 0;
}

void lq_awq_unpermute(const float *yf, int64_t nseg, int64_t np, int64_t m, int64_t n, float *y,
                      int nt) {
    const int64_t bc = 128, nbc = (n + bc - 1) / bc; /* a field-major block (lq_awq_np) */
    /* per row and block: the segments added in order (16 words of a field contiguous), then the
     * columns put in order; one row shares its blocks among the threads. Only the words of
     * columns below n: a kernel need not write the rest. */
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t rb = 0; rb < m * nbc; rb++) {
        const int64_t r = rb / nbc, c0 = rb % nbc * bc, nc = n - c0 < bc ? n - c0 : bc;
        const int64_t vw = (nc + 7) / 8;
        const float  *p  = yf + r * np + c0;
        float         t[128];
        for (int f = 0; f < 8; f++)
            for (int64_t l = 0; l < vw; l++)
                t[16 * f + l] = p[16 * f + l];
        for (int64_t s = 1; s < nseg; s++)
            for (int f = 0; f < 8; f++)
                for (int64_t l = 0; l < vw; l++)
                    t[16 * f + l] += p[s * m * np + 16 * f + l];
        for (int64_t i = 0; i < nc; i++)
            y[r * n + c0 + i] = t[16 * lq_awq_field_of((int)(i % 8)) + i / 8];
    }
}
