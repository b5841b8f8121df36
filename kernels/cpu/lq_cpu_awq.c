/* Optimized CPU AutoAWQ GEMM.
 *
 * qweight is [k, n/8]: row c holds input channel c of all n outputs, 8 per word in the
 * [0,2,4,6,1,3,5,7] interleave. Decoding a word with the per-column shift vector
 * 4 * field_of(col) = {0,16,4,20,8,24,12,28} yields its 8 codes already in column order, so the
 * kernels vectorize across output columns exactly like GPTQ's.
 * Small m (up to 16 rows with AVX-512, 48 without): per group acc = sum_c x[c] * q[c],
 * y += s * acc - (s * z) * sum_c x[c]; from 5 rows through a decoded L1 buffer (lq_buf_rows).
 * Large m: W^T tiles ([k, nt]) dequantized into the workspace, then sgemm. */
#include "lq_kernels_impl.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* Multiply-adds may fuse (see lq_cpu_gptq.c). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=fast")
#endif

#define NB 16 /* output columns per block of the fused kernel (two words) */

/* sc[g * ld + j] = scale, zs[g * ld + j] = scale * zero for columns i0 + j, j < nc. */
static void awq_params(const lq_qlinear *w, int64_t g0, int64_t g1, int64_t i0, int64_t nc,
                       int64_t ld, float *sc, float *zs) {
    const uint16_t *s     = w->scales;
    const int64_t   words = w->n / 8;
    for (int64_t g = g0; g < g1; g++)
        for (int64_t j = 0; j < nc; j++) {
            const float v  = lq_f16_to_f32(s[g * w->n + i0 + j]);
            sc[g * ld + j] = v;
            zs[g * ld + j] = v * (float)lq_awq_get((const int32_t *)w->qzeros + g * words, i0 + j);
        }
}

/* W^T rows c in [c0, c1) for output columns [i0, i0 + nc), i0 and nc multiples of 8:
 * out[(c - c0) * ldo + j]. A group at a time, no division a channel; with nc a constant (the
 * panel decode's 16) the group's scales stay in registers (restrict: out is not them). */
static inline __attribute__((always_inline)) void awq_kn_run(const lq_qlinear *w, int64_t c0,
                                                             int64_t c1, int64_t i0, int64_t nc,
                                                             const float *restrict sc,
                                                             const float *restrict zs, int64_t ldp,
                                                             float *restrict out, int64_t ldo) {
    const int64_t words = w->n / 8, gs = w->group_size;
    const lq_v8u  sh    = {0, 16, 4, 20, 8, 24, 12, 28};
    const lq_v8u  mask  = lq_v8u_splat(15u);
    for (int64_t c = c0; c < c1;) {
        const int64_t g = c / gs, ce = (g + 1) * gs < c1 ? (g + 1) * gs : c1;
        const float  *s = sc + g * ldp, *z = zs + g * ldp;
        for (; c < ce; c++) {
            const uint32_t *row = (const uint32_t *)w->qweight + c * words + i0 / 8;
            float          *o   = out + (c - c0) * ldo;
            for (int64_t t = 0; t < nc / 8; t++) {
                const lq_v8f q = lq_v8u_to_f((lq_v8u_splat(row[t]) >> sh) & mask);
                lq_v8f_store(o + 8 * t, lq_v8f_load(s + 8 * t) * q - lq_v8f_load(z + 8 * t));
            }
        }
    }
}

LQ_CLONES static void awq_kn(const lq_qlinear *w, int64_t c0, int64_t c1, int64_t i0, int64_t nc,
                             const float *sc, const float *zs, int64_t ldp, float *out,
                             int64_t ldo) {
    awq_kn_run(w, c0, c1, i0, nc, sc, zs, ldp, out, ldo);
}

/* The panel decode (lq_kn_ops.pack): a channel's words hold 8 columns each, so awq_kn's rows
 * are the panel's rows as they are (16 columns: two words a channel), with the columns of a
 * short panel (nr < 16, a multiple of 8) zero past nr. Before, from 49 rows AWQ went through
 * dequantized tiles and OpenBLAS's sgemm: 64 rows of 4096 x 4096 32.3-34.4 -> 27.9-28.4 ms on 1
 * thread, 18.7-19.2 -> 14.3-14.5 on 2; 11008 x 4096 94.5-101.9 -> 77.8-80.2 (1). */
static int awq_pack_ok(const lq_qlinear *w) {
    return w->n % 8 == 0;
}

LQ_CLONES static void awq_pack(const void *ctx, int64_t n0, int nr, int64_t k0, int kc, float *pan,
                               int ldp) {
    const lq_kn_pack *p = ctx;
    const lq_qlinear *w = p->w;
    if (nr == 16 && ldp == 16) {
        awq_kn_run(w, k0, k0 + kc, n0, 16, p->sc + n0, p->zs + n0, w->n, pan, 16);
        return;
    }
    awq_kn(w, k0, k0 + kc, n0, nr, p->sc + n0, p->zs + n0, w->n, pan, ldp);
    for (int kk = 0; nr < ldp && kk < kc; kk++)
        memset(pan + kk * ldp + nr, 0, (size_t)(ldp - nr) * sizeof(float));
}

static const lq_kn_ops k_awq_kn = {
    .params = awq_params, .kn = awq_kn, .pack_ok = awq_pack_ok, .pack = awq_pack};

lq_status lq_dequant_awq_cpu(const lq_qlinear *w, float *out, int nthreads) {
    return lq_dequant_kn_cpu(w, &k_awq_kn, w->k / w->group_size, out, nthreads);
}

/* Group g of the columns [i0, i0 + 8 * NV) (NV whole words) into y (first group: assign).
 * M x NV accumulators in registers; see lq_cpu_gptq.c for the loop order. A word broadcast to
 * 8 lanes is masked lane by lane in place (lane j keeps column j's field where AWQ's order puts
 * it, bits o_j .. o_j + 3) and converted: the field times 2^o_j, taken back out with the scale
 * at the group's end (exact). That is an AND and a conversion per 8 weights where a variable
 * shift came first. Lane 7 holds the word's top field, which would convert as negative: its bit
 * 31 is flipped, so the lane holds q - 8, and its zero point, decoded the same way, z - 8. */
#define AWQ_NV_MAX 8
static inline __attribute__((always_inline)) lq_v8f awq_inplace(uint32_t w, lq_v8u fm, lq_v8u top) {
    return __builtin_convertvector((lq_v8i)((lq_v8u_splat(w) & fm) ^ top), lq_v8f);
}
/* 8 words at 2 rows too (16 accumulators): 4096 x 4096, 1 thread: 2.75 -> 2.40 ms with the
 * shift decode */
#define AWQ_NV(M) ((M) <= 2 ? 8 : 2) /* M < LQ_BUF_M */
static inline __attribute__((always_inline)) void awq_group_block(const lq_qlinear *w,
                                                                  const float *x, const float *xsum,
                                                                  int64_t g, int64_t i0, float *y,
                                                                  const int M, const int NV) {
    const int64_t n = w->n, k = w->k, gs = w->group_size, G = k / gs, words = n / 8;
    /* column j's field, in place, and the factor that takes its bit offset back out */
    const lq_v8u fm   = {15u,      15u << 16, 15u << 4,  15u << 20,
                         15u << 8, 15u << 24, 15u << 12, 15u << 28};
    const lq_v8u top  = {0, 0, 0, 0, 0, 0, 0, 1u << 31};
    const lq_v8f unsh = {1.f, 0x1p-16f, 0x1p-4f, 0x1p-20f, 0x1p-8f, 0x1p-24f, 0x1p-12f, 0x1p-28f};
    lq_v8f       acc[LQ_FUSED_M][AWQ_NV_MAX];
    for (int r = 0; r < M; r++)
        for (int jv = 0; jv < NV; jv++)
            acc[r][jv] = lq_v8f_splat(0.f);
    for (int64_t c = g * gs; c < (g + 1) * gs; c++) {
        const uint32_t *row = (const uint32_t *)w->qweight + c * words + i0 / 8;
        __builtin_prefetch(row + 16); /* next blocks, same row */
        /* each word's products as it is decoded: with the 8 decoded first GCC spilled
         * accumulators at one and two rows (4096 x 4096, 1 thread: 1.38 -> 1.20 and 2.38 ->
         * 1.75 ms; 4 rows keep that order, the other took 3.4 -> 5.5 ms) */
        if (M <= 3) {
            const lq_v8f x0 = lq_v8f_splat(x[c]), x1 = lq_v8f_splat(M > 1 ? x[k + c] : 0.f);
            const lq_v8f x2 = lq_v8f_splat(M > 2 ? x[2 * k + c] : 0.f);
            for (int jv = 0; jv < NV; jv++) {
                const lq_v8f q = awq_inplace(row[jv], fm, top);
                acc[0][jv] += x0 * q;
                if (M > 1)
                    acc[1][jv] += x1 * q;
                if (M > 2)
                    acc[2][jv] += x2 * q;
            }
            continue;
        }
        lq_v8f q[AWQ_NV_MAX];
        for (int jv = 0; jv < NV; jv++)
            q[jv] = awq_inplace(row[jv], fm, top);
        for (int r = 0; r < M; r++) {
            const lq_v8f xb = lq_v8f_splat(x[r * k + c]);
            for (int jv = 0; jv < NV; jv++)
                acc[r][jv] += xb * q[jv];
        }
    }
    const uint32_t *zrow = (const uint32_t *)w->qzeros + g * words + i0 / 8;
    for (int r = 0; r < M; r++) {
        const lq_v8f xs = lq_v8f_splat(xsum[r * G + g]);
        float       *yr = y + r * n + i0;
        for (int jv = 0; jv < NV; jv++) {
            const lq_v8f s = lq_v8f_from_f16((const uint16_t *)w->scales + g * n + i0 + 8 * jv);
            /* the zero point decoded as the weights were (lane 7: z - 8, as q - 8) */
            const lq_v8f z    = awq_inplace(zrow[jv], fm, top);
            const lq_v8f su   = s * unsh;
            const lq_v8f part = su * acc[r][jv] - (su * z) * xs;
            lq_v8f_store(yr + 8 * jv, g ? lq_v8f_load(yr + 8 * jv) + part : part);
        }
    }
}

static inline __attribute__((always_inline)) void
awq_fused_range(const lq_qlinear *w, const float *x, const float *xsum, int64_t blk0, int64_t blk1,
                float *y, const int M, const int NV) {
    const int64_t G = w->k / w->group_size;
    for (int64_t g = 0; g < G; g++)
        for (int64_t bi = blk0; bi < blk1; bi++)
            awq_group_block(w, x, xsum, g, bi * 8 * NV, y, M, NV);
}

typedef void (*awq_fused_fn)(const lq_qlinear *w, const float *x, const float *xsum, int64_t blk0,
                             int64_t blk1, float *y);
#define AWQ_INST(M, CLONES)                                                                        \
    CLONES static void awq_fused_m##M(const lq_qlinear *w, const float *x, const float *xsum,      \
                                      int64_t blk0, int64_t blk1, float *y) {                      \
        awq_fused_range(w, x, xsum, blk0, blk1, y, M, AWQ_NV(M));                                  \
    }
AWQ_INST(1, LQ_CLONES_V4)
AWQ_INST(2, LQ_CLONES_V4)
AWQ_INST(3, LQ_CLONES)
AWQ_INST(4, LQ_CLONES)
static const awq_fused_fn k_awq_fused[LQ_BUF_M - 1] = {awq_fused_m1, awq_fused_m2, awq_fused_m3,
                                                       awq_fused_m4};
_Static_assert(LQ_BUF_M == 5, "one instance per m < LQ_BUF_M");

/* From LQ_BUF_M rows: a group's 16-column block decoded once into an L1 buffer, every row run
 * over it (lq_buf_rows; xt is x channel-major), instead of decoding it again for each chunk of
 * 8 rows. */
static inline __attribute__((always_inline)) void awq_buf_block(const lq_qlinear *w,
                                                                const float *xt, const float *xsum,
                                                                int64_t m, int64_t g, int64_t i0,
                                                                float *y, float *buf, float *part) {
    const int64_t n = w->n, k = w->k, gs = w->group_size, G = k / gs, words = n / 8;
    const lq_v8u  sh   = {0, 16, 4, 20, 8, 24, 12, 28};
    const lq_v8u  mask = lq_v8u_splat(15u);
    for (int64_t cc = g * gs; cc < (g + 1) * gs; cc += LQ_BUF_KC) {
        const int64_t ce = cc + LQ_BUF_KC < (g + 1) * gs ? cc + LQ_BUF_KC : (g + 1) * gs;
        for (int64_t c = cc; c < ce; c++) {
            const uint32_t *row = (const uint32_t *)w->qweight + c * words + i0 / 8;
            __builtin_prefetch(row + 16);
            for (int h = 0; h < 2; h++)
                lq_v8f_store(buf + (c - cc) * LQ_BUF_NC + 8 * h,
                             lq_v8u_to_f((lq_v8u_splat(row[h]) >> sh) & mask));
        }
        lq_buf_rows(xt + cc * m, m, buf, ce - cc, part, cc == g * gs);
    }
    const uint32_t *zrow = (const uint32_t *)w->qzeros + g * words + i0 / 8;
    lq_v8f          s[2], zs[2];
    for (int h = 0; h < 2; h++) {
        s[h]  = lq_v8f_from_f16((const uint16_t *)w->scales + g * n + i0 + 8 * h);
        zs[h] = s[h] * lq_v8u_to_f((lq_v8u_splat(zrow[h]) >> sh) & mask);
    }
    lq_buf_epilogue(part, m, xsum + g, G, s, zs, g != 0, y + i0, n);
}

LQ_CLONES static void awq_buf(const lq_qlinear *w, const float *xt, const float *xsum, int64_t m,
                              int64_t blk0, int64_t blk1, float *y) {
    float buf[LQ_BUF_KC * LQ_BUF_NC] __attribute__((aligned(32)));
    float part[LQ_BUF_MAX_M * LQ_BUF_NC] __attribute__((aligned(32)));
    for (int64_t g = 0; g < w->k / w->group_size; g++)
        for (int64_t bi = blk0; bi < blk1; bi++)
            awq_buf_block(w, xt, xsum, m, g, bi * LQ_BUF_NC, y, buf, part);
}

/* The n % (8 * NV) last columns, 8 at a time: dequantize them once, then dot. */
static void awq_tail(const lq_qlinear *w, const float *x, int64_t m, int64_t i0, float *y,
                     float *buf /* [k * 8 + 2 * G * 8] */) {
    const int64_t k = w->k, G = k / w->group_size;
    float        *sc = buf + k * 8, *zs = sc + G * 8;
    awq_params(w, 0, G, i0, 8, 8, sc, zs);
    awq_kn(w, 0, k, i0, 8, sc, zs, 8, buf, 8);
    for (int64_t r = 0; r < m; r++)
        for (int j = 0; j < 8; j++) {
            float acc = 0.f;
            for (int64_t c = 0; c < k; c++)
                acc += x[r * k + c] * buf[c * 8 + j];
            y[r * w->n + i0 + j] = acc;
        }
}

/* The GPTQ descriptor of a repacked copy (lq_awq_gptq_build): [k/8, np] codes, [G, np] scales,
 * [G, np/8] zeros (stored minus one, as GPTQ v1), g_idx c / group_size; padding columns have
 * scale 0. */
size_t lq_awq_gptq_bytes(const lq_qlinear *w) {
    const int64_t np = lq_awq_np(w), G = w->k / w->group_size;
    return (size_t)(lq_align_up(w->k / 8 * np * 4, 64) + lq_align_up(G * np * 2, 64) +
                    lq_align_up(G * np / 2, 64) + lq_align_up(w->k * 4, 64));
}

size_t lq_awq_gptq_ws(const lq_qlinear *w, int64_t m) {
    const int64_t ab = lq_awq_qx_block(w);
    return lq_awq_gptq_bytes(w) + (size_t)lq_align_up((int64_t)lq_qx_ws_bytes(w->k, ab, m, 8), 64) +
           (size_t)(m * lq_awq_np(w)) * 4;
}

float *lq_awq_gptq_yf(const lq_qlinear *w, int64_t m, void *ws) {
    return (float *)(void *)((uint8_t *)ws + lq_awq_gptq_ws(w, m) - (size_t)(m * lq_awq_np(w)) * 4);
}

void lq_awq_gptq_build(const lq_qlinear *w, void *buf, lq_qlinear *g, lq_awq_codes_fn codes,
                       int nt) {
    const int64_t n = w->n, k = w->k, np = lq_awq_np(w), G = k / w->group_size, nw = n / 8;
    uint8_t      *p  = buf;
    uint32_t     *qg = (uint32_t *)(void *)p;
    uint16_t     *sg = (uint16_t *)(void *)(p += lq_align_up(k / 8 * np * 4, 64));
    uint32_t     *zg = (uint32_t *)(void *)(p += lq_align_up(G * np * 2, 64));
    int32_t      *gi = (int32_t *)(void *)(p + lq_align_up(G * np / 2, 64));
    *g               = *w;
    g->format        = LQ_FMT_GPTQ;
    g->n             = np;
    g->qweight       = qg;
    g->scales        = sg;
    g->qzeros        = zg;
    g->g_idx         = gi;
    g->bias          = NULL;
#pragma omp parallel num_threads(nt)
    {
#pragma omp for schedule(static)
        for (int64_t wr = 0; wr < (codes ? k / 8 : 0); wr++)
            codes(w, wr, qg, np);
#pragma omp for schedule(static)
        for (int64_t gg = 0; gg < G; gg++) {
            const uint16_t *s  = (const uint16_t *)w->scales + gg * n;
            const uint32_t *zw = (const uint32_t *)w->qzeros + gg * nw;
            for (int64_t pw = 0; pw < np / 8; pw++) { /* zero word: positions 8 pw .. 8 pw + 7 */
                uint32_t zword = 0;
                for (int t = 0; t < 8; t++) {
                    const int64_t pos = 8 * pw + t, blk = pos / 128, f = (pos % 128) / 16,
                                  l = pos % 16, j = blk * 16 + l;
                    const int64_t col = blk * 128 + 8 * l + lq_awq_col_of((int)f);
                    uint32_t      z   = 0;
                    uint16_t      sc  = 0;
                    if (j < nw && col < n) {
                        z  = (zw[j] >> (4 * f)) & 15u;
                        sc = s[col];
                    }
                    zword |= ((z - 1u) & 15u) << (4 * t);
                    sg[gg * np + pos] = sc;
                }
                zg[gg * (np / 8) + pw] = zword;
            }
        }
#pragma omp for schedule(static)
        for (int64_t c = 0; c < k; c++)
            gi[c] = (int32_t)(c / w->group_size);
    }
}

/* Integer activations (AVX-512 VNNI, cpu/lq_cpu_vnni.c; AVX2, cpu/lq_cpu_avx2.c): their width
 * at m rows, 0 where the CPU or the layout has none. */
static int awq_qx(const lq_qlinear *w, int64_t m) {
    return lq_cpu_vnni() || lq_cpu_avx2i() ? lq_awq_qx_bits(w, m) : 0;
}

int lq_awq_cpu_quantizes_x(const lq_qlinear *w, int64_t m, unsigned flags) {
    return (flags & LQ_QLINEAR_INT_X) && awq_qx(w, m) != 0;
}

size_t lq_ws_awq_cpu_qx(const lq_qlinear *w, int64_t m) {
    const int xb = awq_qx(w, m);
    return !xb ? 0 : lq_cpu_vnni() ? lq_ws_awq_vnni(w, m, xb) : lq_ws_awq_avx2(w, m);
}

lq_status lq_gemm_awq_cpu_qx(const lq_qlinear *w, const float *x, int64_t m, float *y, void *ws,
                             size_t ws_size, int nthreads) {
    const int xb = awq_qx(w, m);
    if (!xb)
        return LQ_ERR_UNSUPPORTED;
    if (!ws || ws_size < lq_ws_awq_cpu_qx(w, m))
        return LQ_ERR_INVALID_ARG;
    if (lq_cpu_vnni())
        LQ_TRY(lq_gemm_awq_vnni(w, x, m, y, ws, xb, nthreads));
    else
        LQ_TRY(lq_gemm_awq_avx2(w, x, m, y, ws, nthreads));
    lq_add_bias_f16(w->bias, m, w->n, y);
    return LQ_OK;
}

size_t lq_ws_awq_cpu(const lq_qlinear *w, int64_t m) {
    const int64_t G = w->k / w->group_size;
    if (m <= lq_grouped_max_m()) /* x sums [m, G] + an 8-column tail buffer + x channel-major */
        return (size_t)(m * G + w->k * 8 + 2 * G * 8 + m * w->k) * sizeof(float);
    return lq_ws_kn_tiled(w, &k_awq_kn, G, m);
}

lq_status lq_gemm_awq_cpu(const lq_qlinear *w, const float *x, int64_t m, float *y, void *ws,
                          size_t ws_size, int nthreads) {
    if (!ws || ws_size < lq_ws_awq_cpu(w, m))
        return LQ_ERR_INVALID_ARG;
    const int64_t n = w->n, k = w->k, gs = w->group_size, G = k / gs;
    const int     nt = lq_cpu_threads(nthreads);
    float        *f  = ws;
    if (m <= lq_grouped_max_m()) { /* as GPTQ's grouped kernel */
        float *xsum = f, *xt = f + m * G + k * 8 + 2 * G * 8;
        lq_group_sums(x, m, k, gs, G, xsum);
        if (m >= LQ_BUF_M)
            lq_buf_xt(x, m, k, xt);
        const int64_t nbw = m >= LQ_BUF_M ? LQ_BUF_NC : 8 * AWQ_NV(m);
#pragma omp parallel num_threads(nt)
        {
            const int64_t th = omp_get_thread_num(), tn = omp_get_num_threads();
            const int64_t nblk = n / nbw;
            if (m >= LQ_BUF_M)
                awq_buf(w, xt, xsum, m, nblk * th / tn, nblk * (th + 1) / tn, y);
            else
                k_awq_fused[m - 1](w, x, xsum, nblk * th / tn, nblk * (th + 1) / tn, y);
        }
        for (int64_t rc = 0; rc < m; rc += LQ_FUSED_M) {
            const int64_t mc = m - rc < LQ_FUSED_M ? m - rc : LQ_FUSED_M;
            for (int64_t i0 = n / nbw * nbw; i0 < n; i0 += 8)
                awq_tail(w, x + rc * k, mc, i0, y + rc * n, f + m * G);
        }
    } else {
        LQ_TRY(lq_gemm_kn_tiled(w, &k_awq_kn, G, x, m, y, f, nthreads));
    }
    lq_add_bias_f16(w->bias, m, n, y);
    return LQ_OK;
}
