/* Optimized CPU GPTQ v1.
 *
 * qweight is [k*b/32, n]: a word row holds 32/b consecutive input channels of n neighbouring
 * output columns, so every kernel walks word rows and vectorizes across output columns
 * (contiguous words, one uniform shift per input channel).
 *
 * Small m with the common layout (b in {2,4,8}, g_idx[c] == c / group_size, groups made of
 * whole words; m <= 16 with AVX-512, 48 without): per group acc = sum_c x[c] * q[c], then
 * y += s * acc - (s * z) * sum_c x[c]; one multiply-add per weight, scales/zeros decoded once
 * per group; up to 4 rows the weights are decoded in registers, from 5 into an L1 buffer that
 * every row reads. 3-bit below 5 rows (group size a multiple of 32): the same, over 34 items a
 * unit of 32 channels (gptq3_group_block). Act-order g_idx (b in {2,4,8}, m <= 2): the same
 * decoding, each product scaled by its channel's group scale from an L1 table (gptq_gidx_block).
 * Any other layout (3-bit from 5 rows, act-order from 3 rows; m <= 8) dequantizes each weight with
 * scale and scale*zero precomputed as floats in the workspace. Register-blocked instances per
 * m (see gptq_group_block), software prefetch along the word rows.
 * Large m: tiles of W^T ([k, nt], the natural order of qweight) dequantized into the workspace,
 * then sgemm. */
#include "lq_kernels_impl.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* Multiply-adds may fuse here: kernels are held to the references by NMSE, and small-integer
 * inputs (the bit-exact tests) are exact either way. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=fast")
#endif

#define NB 16 /* output columns per block of the fused kernels */

enum gptq_path {
    PATH_TILED         = 0,
    PATH_FUSED_GROUPS  = 1,
    PATH_FUSED_GENERIC = 2,
    PATH_FUSED_GIDX    = 3 /* act-order g_idx, bits 2/4/8: per-channel group scales */
};

/* Floats of a thread's group scales (gptq_gidx_block): G * 8 * GPTQ_NV(m), 32 KiB, so that
 * they stay in L1 and on the stack. */
#define GPTQ_GIDX_SB_MAX 8192
#define GPTQ_NV(M)   ((M) <= 2 ? 4 : 2)
/* Rows of the act-order kernel: with its former accumulators in L1 (their loads and stores grew
 * with the rows) 3 rows tied the generic kernel at 4096 x 4096 (1.99 against 2.00 ms), 4 lost
 * (2.56 / 2.11); not measured again since. */
#define GPTQ_GIDX_M 2
#define GPTQ_PF_WORDS 64 /* prefetch distance along a word row (256 bytes) */

static enum gptq_path gptq_path_for(const lq_qlinear *w, int64_t m) {
    /* crossovers measured with bench_kernels_cpu (4096 x 4096): the grouped kernel as
     * lq_grouped_max_m says; the generic one beats dequantize + sgemm up to m = 8 */
    const int b = w->bits;
    if ((b == 2 || b == 4 || b == 8) && w->group_size % (32 / b) == 0 && lq_gptq_gidx_plain(w))
        return m <= lq_grouped_max_m() ? PATH_FUSED_GROUPS : PATH_TILED;
    if (b == 3 && m <= lq_grouped_max_m() && w->group_size % 32 == 0 && lq_gptq_gidx_plain(w))
        return PATH_FUSED_GROUPS; /* gptq3_group_block, from LQ_BUF_M rows gptq_buf_block */
    if (b != 3 && m <= GPTQ_GIDX_M && lq_gptq_groups(w) * 8 * GPTQ_NV(m) <= GPTQ_GIDX_SB_MAX)
        return PATH_FUSED_GIDX;
    return m <= LQ_FUSED_M ? PATH_FUSED_GENERIC : PATH_TILED;
}

/* sc[g * ld + j] = scale, zs[g * ld + j] = scale * zero for columns i0 + j, j < nc, all g. */
LQ_CLONES static void gptq_params(const lq_qlinear *w, int64_t g0, int64_t g1, int64_t i0,
                                  int64_t nc, int64_t ld, float *sc, float *zs) {
    const uint16_t *s = w->scales;
    for (int64_t g = g0; g < g1; g++)
        for (int64_t j = 0; j < nc; j++) {
            const float v  = lq_f16_to_f32_fast(s[g * w->n + i0 + j]);
            sc[g * ld + j] = v;
            zs[g * ld + j] = v * (float)lq_gptq_zero(w, g, i0 + j);
        }
}

/* W^T rows c in [c0, c1) for output columns [i0, i0 + nc): out[(c - c0) * ldo + j]. */
LQ_CLONES static void gptq_kn(const lq_qlinear *w, int64_t c0, int64_t c1, int64_t i0, int64_t nc,
                              const float *sc, const float *zs, int64_t ldp, float *out,
                              int64_t ldo) {
    const int      b     = w->bits;
    const uint32_t mask  = (1u << b) - 1u;
    const lq_v8u   vmask = lq_v8u_splat(mask);
    const int64_t  n     = w->n;
    for (int64_t c = c0; c < c1; c++) {
        const int64_t   pos = c * b, wr = pos >> 5;
        const uint32_t  sh  = (uint32_t)(pos & 31);
        const uint32_t *row = (const uint32_t *)w->qweight + wr * n + i0;
        const float    *s = sc + (int64_t)w->g_idx[c] * ldp, *z = zs + (int64_t)w->g_idx[c] * ldp;
        float          *o        = out + (c - c0) * ldo;
        const int       straddle = sh + (uint32_t)b > 32; /* 3-bit value across two words */
        int64_t         j        = 0;
        for (; j + 8 <= nc; j += 8) {
            lq_v8u u = lq_v8u_load(row + j) >> sh;
            if (straddle)
                u |= lq_v8u_load(row + n + j) << (32u - sh);
            lq_v8f_store(o + j, lq_v8f_load(s + j) * lq_v8u_to_f(u & vmask) - lq_v8f_load(z + j));
        }
        for (; j < nc; j++) {
            uint32_t u = row[j] >> sh;
            if (straddle)
                u |= row[j + n] << (32u - sh);
            o[j] = s[j] * (float)(u & mask) - z[j];
        }
    }
}

/* A 3-bit unit (32 channels, 3 word rows n words apart from row) of 16 columns whole into
 * o[i * 16 + j] for channel i, column j: s[h] * code - z[h] (columns 8h..), or the codes where
 * s is NULL (a constant once inlined). Channels 10 and 21 straddle into the next word. */
static inline __attribute__((always_inline)) void
gptq3_unit16(const uint32_t *row, int64_t n, const lq_v8f *s, const lq_v8f *z, float *o) {
    lq_v8u wv[3][2];
    for (int j = 0; j < 3; j++) {
        __builtin_prefetch(row + j * n + GPTQ_PF_WORDS);
        wv[j][0] = lq_v8u_load(row + j * n);
        wv[j][1] = lq_v8u_load(row + j * n + 8);
    }
#pragma GCC unroll 32
    for (int i = 0; i < 32; i++) {
        const int wj = 3 * i / 32, sh = 3 * i % 32;
        for (int h = 0; h < 2; h++) {
            lq_v8u f = wv[wj][h] >> (uint32_t)sh;
            if (sh > 29)
                f |= wv[wj + 1][h] << (uint32_t)(32 - sh);
            const lq_v8f q = lq_v8u_to_f(f & lq_v8u_splat(7u));
            lq_v8f_store(o + i * 16 + 8 * h, s ? s[h] * q - z[h] : q);
        }
    }
}

/* Fields [0, vn) of a word row of 16 columns whole into o[v * 16 + j] (b = 2, 4, 8), as
 * gptq3_unit16: s[h] * code - z[h], or the codes where s is NULL */
static inline __attribute__((always_inline)) void
gptq_word16(const uint32_t *row, const int b, int vn, const lq_v8f *s, const lq_v8f *z, float *o) {
    const lq_v8u wv[2] = {lq_v8u_load(row), lq_v8u_load(row + 8)};
    for (int v = 0; v < vn; v++)
        for (int h = 0; h < 2; h++) {
            const lq_v8f q =
                lq_v8u_to_f((wv[h] >> (uint32_t)(b * v)) & lq_v8u_splat((1u << b) - 1u));
            lq_v8f_store(o + v * 16 + 8 * h, s ? s[h] * q - z[h] : q);
        }
}

/* The panel decode (lq_kn_ops.pack) of whole-word groups in channel order (b 2/4/8, g_idx c /
 * group_size): a word row's 32 / b channels of 16 columns straight into the panel's rows, the
 * group's scales loaded once a row (gptq_kn looks the group up per channel and per 8 columns);
 * 3-bit (groups of whole 32-channel units) a unit at a time (gptq3_unit16): from 49 rows it
 * went through dequantized tiles and sgemm before (64 rows of 4096 x 4096, 1 thread, 28.8-29.0
 * -> 25.0-25.1 ms; 2 threads 16.2-16.3 -> 12.6-13.0). A short panel (nr < 16) goes through
 * gptq_kn. */
static int gptq_pack_ok(const lq_qlinear *w) {
    const int b = w->bits;
    return (b == 2 || b == 4 || b == 8 ? w->group_size % (32 / b) == 0
            : b == 3                   ? w->group_size % 32 == 0
                                       : 0) &&
           lq_gptq_gidx_plain(w);
}

LQ_CLONES static void gptq_pack(const void *ctx, int64_t n0, int nr, int64_t k0, int kc, float *pan,
                                int ldp) {
    const lq_kn_pack *p = ctx;
    const lq_qlinear *w = p->w;
    const int64_t     n = w->n, gs = w->group_size;
    if (nr < 16 || ldp != 16) {
        gptq_kn(w, k0, k0 + kc, n0, nr, p->sc + n0, p->zs + n0, n, pan, ldp);
        for (int kk = 0; kk < kc; kk++)
            memset(pan + kk * ldp + nr, 0, (size_t)(ldp - nr) * sizeof(float));
        return;
    }
    const int       b = w->bits, vpw = 32 / b;
    const uint32_t *qw = (const uint32_t *)w->qweight;
    for (int64_t c = k0; b == 3 && c < k0 + kc; c += 32) { /* k0, kc: multiples of 32 */
        const int64_t g    = c / gs;
        const lq_v8f  s[2] = {lq_v8f_load(p->sc + g * n + n0), lq_v8f_load(p->sc + g * n + n0 + 8)};
        const lq_v8f  z[2] = {lq_v8f_load(p->zs + g * n + n0), lq_v8f_load(p->zs + g * n + n0 + 8)};
        gptq3_unit16(qw + 3 * (c / 32) * n + n0, n, s, z, pan + (c - k0) * 16);
    }
    for (int64_t c = k0; b != 3 && c < k0 + kc; c += vpw) { /* k0 is a multiple of vpw */
        const int64_t g    = c / gs;
        const lq_v8f  s[2] = {lq_v8f_load(p->sc + g * n + n0), lq_v8f_load(p->sc + g * n + n0 + 8)};
        const lq_v8f  z[2] = {lq_v8f_load(p->zs + g * n + n0), lq_v8f_load(p->zs + g * n + n0 + 8)};
        gptq_word16(qw + c / vpw * n + n0, b, k0 + kc - c < vpw ? (int)(k0 + kc - c) : vpw, s, z,
                    pan + (c - k0) * 16);
    }
}

static const lq_kn_ops k_gptq_kn = {
    .params = gptq_params, .kn = gptq_kn, .pack_ok = gptq_pack_ok, .pack = gptq_pack};

/* ---------------------------------------------------------------------------------------
 * A sorted descriptor (perm, lq_qlinear_sort) is the plain layout of the permuted input
 * channels: every kernel below runs it on x gathered into stored order, in front of its own
 * workspace.
 * --------------------------------------------------------------------------------------- */
static size_t perm_ws(const lq_qlinear *w, int64_t m) {
    return w->perm ? ((size_t)(m * w->k) * sizeof(float) + 63) & ~(size_t)63 : 0;
}

/* Every perm entry names a channel: the descriptor's data, which nothing else here checks. */
static int perm_ok(const lq_qlinear *w) {
    for (int64_t c = 0; c < w->k; c++)
        if ((uint32_t)w->perm[c] >= (uint64_t)w->k)
            return 0;
    return 1;
}

/* *plain = w without perm, *x = the gathered rows, ws/ws_size past them. */
static lq_status perm_gather(const lq_qlinear *w, const float **x, int64_t m, void **ws,
                             size_t *ws_size, lq_qlinear *plain, int nthreads) {
    const int64_t k  = w->k;
    const size_t  pb = perm_ws(w, m);
    if (!*ws || *ws_size < pb || !perm_ok(w))
        return LQ_ERR_INVALID_ARG;
    float         *xg = *ws;
    const float   *xs = *x;
    const int32_t *pm = w->perm;
#pragma omp parallel for num_threads(lq_cpu_threads(nthreads)) schedule(static) if (m * k > 65536)
    for (int64_t r = 0; r < m; r++)
        for (int64_t c = 0; c < k; c++)
            xg[r * k + c] = xs[r * k + pm[c]];
    *plain      = *w;
    plain->perm = NULL;
    *x          = xg;
    *ws         = (char *)*ws + pb;
    *ws_size -= pb;
    return LQ_OK;
}

lq_status lq_dequant_gptq_cpu(const lq_qlinear *w, float *out, int nthreads) {
    lq_qlinear plain = *w;
    plain.perm       = NULL;
    LQ_TRY(lq_dequant_kn_cpu(&plain, &k_gptq_kn, lq_gptq_groups(w), out, nthreads));
    if (!w->perm)
        return LQ_OK;
    if (!perm_ok(w))
        return LQ_ERR_INVALID_ARG;
    float *row = malloc((size_t)w->k * sizeof(float)); /* stored order -> input channels */
    if (!row)
        return LQ_ERR_NOMEM;
    for (int64_t i = 0; i < w->n; i++) {
        float *o = out + i * w->k;
        memcpy(row, o, (size_t)w->k * sizeof(float));
        for (int64_t c = 0; c < w->k; c++)
            o[w->perm[c]] = row[c];
    }
    free(row);
    return LQ_OK;
}

/* ---------------------------------------------------------------------------------------
 * Fused small-m kernels over one block of NBW output columns starting at i0. M (rows of x)
 * and NBW are compile-time constants of each instance so the M x NBW accumulators live in
 * registers (M * NBW = 64 floats at most: 8 AVX2 registers).
 * --------------------------------------------------------------------------------------- */
#define NBW_MAX       32

/* The generic kernel's scales and scale * zero: blocks of GPTQ_PB columns, each [G][GPTQ_PB].
 * Laid out [G, n], the rows a block reads are n floats apart, a multiple of 4 KiB at the usual
 * sizes that maps every group of a column block to one L1 set; at act-order's random g_idx
 * that made the unsorted kernel 4x slower than the grouped one. */
#define GPTQ_PB NB /* the tail blocks of gptq_fused_generic read one parameter block each */
static inline int64_t gptq_pidx(int64_t G, int64_t g, int64_t j) {
    return (j / GPTQ_PB) * G * GPTQ_PB + g * GPTQ_PB + j % GPTQ_PB;
}

/* A group of more than this many word rows (4-bit: 16, 8-bit: 32 at group size 128, all n words
 * apart, 4 KiB-aliased at n = 4096) is read in parts of this many rows, each across all of the
 * thread's blocks, the accumulators carried between parts (as the AVX2 integer kernels' 8-bit
 * one-row path, AVX2_SPLIT_ROWS). AVX2, 1 thread, weights from memory, 4096 x 4096 / 4096 x
 * 11008: 8-bit one row 1.20-1.22 -> 0.93-0.98 / 3.12-3.34 -> 2.57-2.64 ms, 4-bit one row
 * 0.82-0.92 -> 0.76-0.80 / 2.24-2.32 -> 2.08-2.20, two rows 1.24-1.25 -> 1.11 / 3.32-3.37 ->
 * 2.98-3.01; parts of 4 rows were slower than of 8. */
#define GPTQ_SPLIT 8

/* Scale and scale * zero (v1: zero - 1, masked) of group g, columns [c, c + 8) (c % 8 == 0), as
 * vectors: the 8 zero fields are 8 b contiguous bits (b = 2, 3, 4: 3-bit ones may cross a word
 * boundary) split by a variable shift, or 8 bytes (b = 8) widened (see lq_v8f_from_f16 for why
 * not lane by lane). */
static inline __attribute__((always_inline)) void gptq_sz8(const lq_qlinear *w, int64_t g,
                                                           int64_t c, const int b, lq_v8f *s,
                                                           lq_v8f *zs) {
    const int64_t   n = w->n, zw = n * b / 32;
    const uint32_t *qz = (const uint32_t *)w->qzeros + g * zw;
    *s                 = lq_v8f_from_f16((const uint16_t *)w->scales + g * n + c);
    lq_v8u zf;
    if (b == 8) {
        typedef uint8_t lq_v8b __attribute__((vector_size(8)));
        lq_v8b          zb;
        memcpy(&zb, (const uint8_t *)qz + c, sizeof zb);
        zf = __builtin_convertvector(zb, lq_v8u);
    } else {
        const lq_v8u  f   = {0, (uint32_t)b, 2u * b, 3u * b, 4u * b, 5u * b, 6u * b, 7u * b};
        const int64_t bit = c * b;
        uint64_t      u   = qz[bit >> 5];
        if ((bit & 31) + 8 * b > 32)
            u |= (uint64_t)qz[(bit >> 5) + 1] << 32;
        zf = lq_v8u_splat((uint32_t)(u >> (bit & 31))) >> f;
    }
    *zs = *s * lq_v8u_to_f((zf + 1u) & lq_v8u_splat((1u << b) - 1u));
}

/* Word row `row` of a block of NV vectors of columns into wv. The blocks after this one read
 * the next bytes of the same rows: one stream per word row of a group is more than the hardware
 * prefetcher follows, hence the prefetch. */
static inline __attribute__((always_inline)) void gptq_load_words(const uint32_t *row, lq_v8u *wv,
                                                                  const int NV) {
    for (int jv = 0; jv < NV; jv += 2)
        __builtin_prefetch(row + GPTQ_PF_WORDS + 8 * jv);
    for (int jv = 0; jv < NV; jv++)
        wv[jv] = lq_v8u_load(row + 8 * jv);
}

/* Field v of the words w as floats, masked in place (against x prescaled by gptq_prescale),
 * the top field shifted down. */
static inline __attribute__((always_inline)) lq_v8f gptq_field(lq_v8u w, int v, const int b) {
    const uint32_t fmask = (1u << b) - 1u;
    return lq_v8u_to_f(v + 1 == 32 / b ? w >> (uint32_t)(32 - b)
                                       : w & lq_v8u_splat(fmask << (b * v)));
}

/* y[r, i0 ..] (+)= s * (sum of the P accumulator sets) - s * z * sum_g(x), group g's share of
 * columns [i0, i0 + 8 * NV) (g == 0 assigns) */
static inline __attribute__((always_inline)) void
gptq_group_flush(const lq_qlinear *w, const float *xsum, int64_t g, int64_t i0, float *y,
                 const int b, const int M, const int NV, const int P,
                 lq_v8f acc[2][LQ_FUSED_M][NBW_MAX / 8]) {
    const int64_t n = w->n, G = lq_gptq_groups(w);
    lq_v8f        s[NBW_MAX / 8], zs[NBW_MAX / 8];
    for (int jv = 0; jv < NV; jv++)
        gptq_sz8(w, g, i0 + 8 * jv, b, &s[jv], &zs[jv]);
    for (int r = 0; r < M; r++) {
        const lq_v8f xs = lq_v8f_splat(xsum[r * G + g]);
        float       *yr = y + r * n + i0;
        for (int jv = 0; jv < NV; jv++) {
            const lq_v8f a    = P == 2 ? acc[0][r][jv] + acc[1][r][jv] : acc[0][r][jv];
            const lq_v8f part = s[jv] * a - zs[jv] * xs;
            lq_v8f_store(yr + 8 * jv, g ? lq_v8f_load(yr + 8 * jv) + part : part);
        }
    }
}

/* Accumulate group g of columns [i0, i0 + 8 * NV) into y (first group: assign). xp is x with
 * channel c scaled by 2^-(b * (c % vpw)) except the word's top field (exact, see
 * gptq_prescale): a field masked in place, times its scaled x, is the field times x, so decoding
 * a weight costs an AND and a conversion (the top field: a logical shift, no mask) instead of a
 * shift, an AND and a conversion. 2-bit took the shift before (its 16 masks do not fit
 * the registers): in place it is faster all the same (AVX2, 1 thread, one row of 4096 x 4096
 * 1.01 -> 0.79 ms, 11008 x 4096 2.63 -> 2.05, two rows 1.22 -> 1.14). P accumulator sets take
 * alternate fields so that M * NV * P >= 8 chains hide the multiply-add latency. The fields go
 * in steps of P with the set a constant inside: indexed by v % P, GCC left 2-bit's 16 fields a
 * loop and kept the sets in memory (one row 0.79 -> 1.29 ms, so 2-bit had one set); stepped,
 * two sets took one row of 4096 x 4096 from 0.771 to 0.735 ms in cache, 0.806 to 0.758 from
 * memory. Parts h of nh: see GPTQ_SPLIT. */
static inline __attribute__((always_inline)) void
gptq_group_block(const lq_qlinear *w, const float *xp, const float *xsum, int64_t g, int64_t i0,
                 float *y, const int b, const int M, const int NV, const int P, int64_t h,
                 int64_t nh, lq_v8f *cy) {
    const int       vpw = 32 / b;
    const int64_t   n = w->n, k = w->k, gs = w->group_size;
    const uint32_t *qw = (const uint32_t *)w->qweight;
    lq_v8f          acc[2][LQ_FUSED_M][NBW_MAX / 8];
    for (int p = 0; p < P; p++)
        for (int r = 0; r < M; r++)
            for (int jv = 0; jv < NV; jv++)
                acc[p][r][jv] = h && !p ? cy[r * NV + jv] : lq_v8f_splat(0.f);
    const int64_t wg0 = g * gs / vpw;
    const int64_t wg1 = ((g + 1) * gs < k ? (g + 1) * gs : k) / vpw;
    const int64_t wr0 = wg0 + h * GPTQ_SPLIT < wg1 ? wg0 + h * GPTQ_SPLIT : wg1;
    const int64_t wr1 = h + 1 < nh && wr0 + GPTQ_SPLIT < wg1 ? wr0 + GPTQ_SPLIT : wg1;
    for (int64_t wr = wr0; wr < wr1; wr++) {
        const uint32_t *row = qw + wr * n + i0;
        const float    *xc  = xp + wr * vpw;
        lq_v8u          wv[NBW_MAX / 8];
        gptq_load_words(row, wv, NV);
        for (int v = 0; v < vpw; v += P)
            for (int p = 0; p < P; p++) {
                lq_v8f q[NBW_MAX / 8];
                for (int jv = 0; jv < NV; jv++)
                    q[jv] = gptq_field(wv[jv], v + p, b);
                for (int r = 0; r < M; r++) {
                    const lq_v8f xb = lq_v8f_splat(xc[r * k + v + p]);
                    for (int jv = 0; jv < NV; jv++)
                        acc[p][r][jv] += xb * q[jv];
                }
            }
    }
    if (h + 1 < nh) {
        for (int r = 0; r < M; r++)
            for (int jv = 0; jv < NV; jv++)
                cy[r * NV + jv] = P == 2 ? acc[0][r][jv] + acc[1][r][jv] : acc[0][r][jv];
        return;
    }
    gptq_group_flush(w, xsum, g, i0, y, b, M, NV, P, acc);
}

/* 3-bit: a unit of 32 channels is 3 word rows (channel i at bit 3i of a column's 96 bits), so
 * two channels straddle words. Each straddling code splits into its two parts, the part in the
 * next word weighted by 4 (channel 10: bit 32) or 2 (channel 21: bits 64-65): code x = lo x +
 * hi (4x or 2x). That makes 34 items a unit, each a field masked in place (or a word's top one
 * shifted down) against its channel's x times 2^e (e = -offset, or 2 / 1 for the high parts),
 * the 4-bit kernel's decode: an AND and a conversion per 8 weights (the generic path took a
 * shift, a mask and the per-weight scale: one row of 4096 x 4096 on AVX2, 1 thread, 2.93 ms).
 * Item t of word j (words 0 / 1 / 2 hold 11 / 12 / 11 items): mask (0: shift by sh), channel
 * and exponent. */
#define GPTQ3_ITEMS 34
/* word j: its first channel (also the index of its first mask among the 31), its masked items
 * (the next, its last, is shifted down), and that shift */
static const int k_gptq3_first[3] = {0, 10, 21}, k_gptq3_nmask[3] = {10, 11, 10},
                 k_gptq3_tsh[3] = {30, 31, 29};
static inline __attribute__((always_inline)) void gptq3_item(int j, int t, uint32_t *mask, int *sh,
                                                             int *ch, int *e) {
    *ch = k_gptq3_first[j] + t;
    *sh = 0;
    if (t == k_gptq3_nmask[j]) { /* bits sh..31: channel 10's low 2 bits, 21's low bit, 31 whole */
        *mask = 0;
        *sh   = k_gptq3_tsh[j];
        *e    = 0;
    } else if (j > 0 && t == 0) { /* the high part of the code straddling from word j - 1 */
        *mask = j == 1 ? 1u : 3u;
        *e    = j == 1 ? 2 : 1;
    } else { /* whole, at bit 3 ch - 32 j */
        const int p = 3 * *ch - 32 * j;
        *mask       = 7u << p;
        *e          = -p;
    }
}
static inline int gptq3_item0(int j) { /* index of word j's first item in a unit */
    return k_gptq3_first[j] + j;
}

/* xp[r * (k / 32 * 34) + 34 u + item] = x[r, 32 u + channel] * 2^e (exact, as gptq_prescale) */
static void gptq3_prescale(const float *x, int64_t m, int64_t k, float *xp) {
    int   ch[GPTQ3_ITEMS];
    float f[GPTQ3_ITEMS];
    for (int j = 0; j < 3; j++)
        for (int t = 0; t <= k_gptq3_nmask[j]; t++) {
            uint32_t mask;
            int      sh, c, e;
            gptq3_item(j, t, &mask, &sh, &c, &e);
            ch[gptq3_item0(j) + t] = c;
            f[gptq3_item0(j) + t]  = ldexpf(1.f, e);
        }
    const int64_t k3 = k / 32 * GPTQ3_ITEMS;
    for (int64_t r = 0; r < m; r++)
        for (int64_t u = 0; u < k / 32; u++)
            for (int i = 0; i < GPTQ3_ITEMS; i++)
                xp[r * k3 + u * GPTQ3_ITEMS + i] = x[r * k + u * 32 + ch[i]] * f[i];
}

/* gptq_group_block for 3-bit (group size a multiple of 32): units of 3 word rows. mk: the 31
 * masks of the items in order, without the 3 shifted ones (each word's last: item i of word j is
 * mask i - j). A loop over a word's masks, two at a time (written as one loop over the items,
 * they did not fold to constants: 1.85 ms at one row of 4096 x 4096, AVX2, 1 thread; now 1.11).
 * One accumulator set: with two, the decoded pairs and 8 accumulators spilled (1.35 ms). Up to 2
 * rows a pair's products go into it as one sum (one add in its chain, not two multiply-adds:
 * one / two rows of 4096 x 4096 1.10 -> 1.05 / 1.68 -> 1.40 ms; 4 rows 1.85 -> 2.35). Groups are
 * not read in parts (GPTQ_SPLIT): parts of 2 units were 2-6% slower. */
static inline __attribute__((always_inline)) void
gptq3_word(const uint32_t *row, const uint32_t *mk, const float *xc, int64_t k3, const int j,
           const int M, const int NV, lq_v8f acc[2][LQ_FUSED_M][NBW_MAX / 8]) {
    const int *m0 = k_gptq3_first, *tsh = k_gptq3_tsh, nm = k_gptq3_nmask[j];
    lq_v8u     wv[NBW_MAX / 8];
    gptq_load_words(row, wv, NV);
    for (int t = 0; t < nm; t += 2) {
        const int two = t + 1 < nm;
        lq_v8f    q0[NBW_MAX / 8], q1[NBW_MAX / 8];
        for (int jv = 0; jv < NV; jv++) {
            q0[jv] = lq_v8u_to_f(wv[jv] & lq_v8u_splat(mk[m0[j] + t]));
            q1[jv] = two ? lq_v8u_to_f(wv[jv] & lq_v8u_splat(mk[m0[j] + t + 1]))
                         : lq_v8u_to_f(wv[jv] >> (uint32_t)tsh[j]);
        }
        for (int r = 0; r < M; r++) {
            const lq_v8f x0 = lq_v8f_splat(xc[r * k3 + m0[j] + j + t]);
            const lq_v8f x1 = lq_v8f_splat(xc[r * k3 + m0[j] + j + t + 1]);
            for (int jv = 0; jv < NV; jv++) {
                if (M <= 2) /* see above */
                    acc[0][r][jv] += x0 * q0[jv] + x1 * q1[jv];
                else {
                    acc[0][r][jv] += x0 * q0[jv];
                    acc[0][r][jv] += x1 * q1[jv];
                }
            }
        }
    }
    if (!(nm & 1)) { /* the top field (with an odd count it went as the last pair's second) */
        for (int r = 0; r < M; r++) {
            const lq_v8f x1 = lq_v8f_splat(xc[r * k3 + m0[j] + j + nm]);
            for (int jv = 0; jv < NV; jv++)
                acc[0][r][jv] += x1 * lq_v8u_to_f(wv[jv] >> (uint32_t)tsh[j]);
        }
    }
}
static inline __attribute__((always_inline)) void
gptq3_group_block(const lq_qlinear *w, const float *xp, const float *xsum, const uint32_t *mk,
                  int64_t g, int64_t i0, float *y, const int M, const int NV) {
    const int64_t   n = w->n, k = w->k, gs = w->group_size;
    const int64_t   k3 = k / 32 * GPTQ3_ITEMS;
    const uint32_t *qw = (const uint32_t *)w->qweight;
    lq_v8f          acc[2][LQ_FUSED_M][NBW_MAX / 8]; /* one set (see above) */
    for (int r = 0; r < M; r++)
        for (int jv = 0; jv < NV; jv++)
            acc[0][r][jv] = lq_v8f_splat(0.f);
    const int64_t u1 = ((g + 1) * gs < k ? (g + 1) * gs : k) / 32;
    for (int64_t u = g * gs / 32; u < u1; u++) {
        const uint32_t *row = qw + 3 * u * n + i0;
        const float    *xc  = xp + u * GPTQ3_ITEMS;
        gptq3_word(row, mk, xc, k3, 0, M, NV, acc);
        gptq3_word(row + n, mk, xc, k3, 1, M, NV, acc);
        gptq3_word(row + 2 * n, mk, xc, k3, 2, M, NV, acc);
    }
    gptq_group_flush(w, xsum, g, i0, y, 3, M, NV, 1, acc);
}

/* Act-order g_idx: the weights in stored order, each product taken with its channel's group
 * scale, x * s (the block's scales decoded once into sb[g][8 * NV], in L1) times the field, in
 * registers; then y = that - sum_g (s * z) * xs[g] with xs[g] the sum of x over group g. Fields
 * are decoded as gptq_group_block's, against xp prescaled the same way: a weight costs the
 * grouped kernel's decode and multiply-add plus a multiply. Each product went into a group
 * accumulator in L1 before (a load and a store a channel and 8 columns): one row, 1 thread,
 * from memory, 4096 x 4096 1.43 -> 1.22-1.28 ms, 11008 x 4096 3.35-3.43 -> 2.99-3.09, 4096 x
 * 11008 4.04-4.20 -> 3.61; two rows 5-14% faster; 2 threads 4096 x 4096 1.02-1.08 -> 0.78-0.82. */
static inline __attribute__((always_inline)) void
gptq_gidx_block(const lq_qlinear *w, const float *xp, const float *xs, int64_t i0, float *y,
                float *sb, const int b, const int M, const int NV) {
    const int       vpw = 32 / b, SW = NV * 8; /* floats of a group's scales */
    const int64_t   n = w->n, k = w->k, G = lq_gptq_groups(w);
    const uint32_t *qw = (const uint32_t *)w->qweight;
    const int32_t  *gi = w->g_idx;
    for (int64_t g = 0; g < G; g++)
        for (int jv = 0; jv < NV; jv++) {
            lq_v8f s, zs;
            gptq_sz8(w, g, i0 + 8 * jv, b, &s, &zs);
            lq_v8f_store(sb + g * SW + 8 * jv, s);
        }
    lq_v8f acc[2][LQ_FUSED_M][NBW_MAX / 8];
    for (int p = 0; p < 2; p++)
        for (int r = 0; r < M; r++)
            for (int jv = 0; jv < NV; jv++)
                acc[p][r][jv] = lq_v8f_splat(0.f);
    for (int64_t wr = 0; wr < k / vpw; wr++) {
        const uint32_t *row = qw + wr * n + i0;
        const float    *xc  = xp + wr * vpw;
        lq_v8u          wv[NBW_MAX / 8];
        gptq_load_words(row, wv, NV);
        for (int v = 0; v < vpw; v += 2)
            for (int p = 0; p < 2; p++) {
                const float *sg = sb + (int64_t)gi[wr * vpw + v + p] * SW;
                lq_v8f       q[NBW_MAX / 8];
                for (int jv = 0; jv < NV; jv++)
                    q[jv] = gptq_field(wv[jv], v + p, b);
                for (int r = 0; r < M; r++) {
                    const lq_v8f xb = lq_v8f_splat(xc[r * k + v + p]);
                    for (int jv = 0; jv < NV; jv++)
                        acc[p][r][jv] += (xb * lq_v8f_load(sg + 8 * jv)) * q[jv];
                }
            }
    }
    for (int jv = 0; jv < NV; jv++) {
        lq_v8f t[LQ_FUSED_M];
        for (int r = 0; r < M; r++)
            t[r] = acc[0][r][jv] + acc[1][r][jv];
        for (int64_t g = 0; g < G; g++) {
            lq_v8f s, zs;
            gptq_sz8(w, g, i0 + 8 * jv, b, &s, &zs);
            for (int r = 0; r < M; r++)
                t[r] -= zs * lq_v8f_splat(xs[r * G + g]);
        }
        for (int r = 0; r < M; r++)
            lq_v8f_store(y + r * n + i0 + 8 * jv, t[r]);
    }
}

typedef void (*gptq_gidx_fn)(const lq_qlinear *w, const float *xp, const float *xs, int64_t blk0,
                             int64_t blk1, float *y);
#define GPTQ_GIDX_INST(B, M, CLONES)                                                               \
    CLONES static void gptq_gidx_b##B##_m##M(const lq_qlinear *w, const float *xp,                 \
                                             const float *xs, int64_t blk0, int64_t blk1,          \
                                             float *y) {                                           \
        float sb[GPTQ_GIDX_SB_MAX] __attribute__((aligned(32)));                                   \
        for (int64_t bi = blk0; bi < blk1; bi++)                                                   \
            gptq_gidx_block(w, xp, xs, bi * 8 * GPTQ_NV(M), y, sb, B, M, GPTQ_NV(M));              \
    }
/* one row keeps LQ_CLONES: its AVX-512 clone took 1.01 -> 1.31 ms from memory (4096 x 4096, Zen
 * 4; two rows 1.71 -> 1.40) */
#define GPTQ_GIDX_INST_B(B) GPTQ_GIDX_INST(B, 1, LQ_CLONES) GPTQ_GIDX_INST(B, 2, LQ_CLONES_V4)
GPTQ_GIDX_INST_B(2)
GPTQ_GIDX_INST_B(4)
GPTQ_GIDX_INST_B(8)
#define GPTQ_GIDX_ROW(B) {gptq_gidx_b##B##_m1, gptq_gidx_b##B##_m2}
static const gptq_gidx_fn k_gptq_gidx[3][GPTQ_GIDX_M] = {GPTQ_GIDX_ROW(2), GPTQ_GIDX_ROW(4),
                                                         GPTQ_GIDX_ROW(8)};
_Static_assert(GPTQ_GIDX_M == 2, "one instance per m <= GPTQ_GIDX_M");

/* xs[r * G + g] = sum of x[r] over the channels of group g; LQ_ERR_INVALID_ARG when g_idx names
 * no group (the descriptor's data, which the accumulators are indexed by). */
static lq_status gptq_gidx_sums(const lq_qlinear *w, const float *x, int64_t m, float *xs) {
    const int64_t G = lq_gptq_groups(w), k = w->k;
    for (int64_t c = 0; c < k; c++)
        if ((uint32_t)w->g_idx[c] >= (uint64_t)G)
            return LQ_ERR_INVALID_ARG;
    memset(xs, 0, (size_t)(m * G) * sizeof(float));
    for (int64_t r = 0; r < m; r++)
        for (int64_t c = 0; c < k; c++)
            xs[r * G + w->g_idx[c]] += x[r * k + c];
    return LQ_OK;
}

/* One thread's share: groups outer, blocks of NBW columns inner, so each group's word rows
 * stream through the thread's contiguous column range (a handful of sequential streams the
 * prefetcher follows) while the block's accumulators stay in registers. */
static inline __attribute__((always_inline)) void
gptq_fused_range(const lq_qlinear *w, const float *x, const float *xsum, int64_t blk0, int64_t blk1,
                 float *y, const int b, const int M, const int NV) {
    const int64_t G   = lq_gptq_groups(w);
    const int64_t rpg = w->group_size * b / 32;
    lq_v8f       *cy  = NULL;
    int64_t       nh  = 1;
    if (b != 3 && rpg > GPTQ_SPLIT) {
        cy = aligned_alloc(32, (size_t)((blk1 - blk0) * M * NV) * sizeof(lq_v8f));
        nh = cy ? (rpg + GPTQ_SPLIT - 1) / GPTQ_SPLIT : 1;
    }
    const int P = M * NV <= 4 ? 2 : 1;
    uint32_t  mk[GPTQ3_ITEMS - 3]; /* 3-bit: the masks of the items (gptq3_group_block) */
    for (int j = 0; b == 3 && j < 3; j++)
        for (int t = 0; t < k_gptq3_nmask[j]; t++) {
            int sh, c, e;
            gptq3_item(j, t, &mk[gptq3_item0(j) - j + t], &sh, &c, &e);
        }
    for (int64_t g = 0; g < G; g++)
        for (int64_t h = 0; h < nh; h++)
            for (int64_t bi = blk0; bi < blk1; bi++) {
                lq_v8f *c = cy ? cy + (bi - blk0) * M * NV : NULL;
                if (b == 3)
                    gptq3_group_block(w, x, xsum, mk, g, bi * 8 * NV, y, M, NV);
                else
                    gptq_group_block(w, x, xsum, g, bi * 8 * NV, y, b, M, NV, P, h, nh, c);
            }
    free(cy);
}

/* xp[i] = x[i] * 2^-(b * f) for channels in field f of their word, except the top field (f =
 * 32 / b - 1), which gptq_group_block shifts down. Scaling by a power of two is exact unless x
 * is below 2^(b * f - 126) (subnormal), far under any activation. */
LQ_CLONES static void gptq_prescale(int b, const float *x, int64_t m, int64_t k, float *xp) {
    const int vpw = 32 / b;
    float     f[16];
    for (int v = 0; v < vpw; v++)
        f[v] = v + 1 < vpw ? ldexpf(1.f, -b * v) : 1.f;
    /* word by word: c % vpw was a 64-bit division a channel, 0.03 ms of a one-row call at k =
     * 11008 (Zen 3) */
    for (int64_t r = 0; r < m; r++) {
        const float *xr = x + r * k;
        float       *o  = xp + r * k;
        int64_t      c  = 0;
        for (; c + vpw <= k; c += vpw)
            for (int v = 0; v < vpw; v++)
                o[c + v] = xr[c + v] * f[v];
        for (int v = 0; c < k; c++, v++)
            o[c] = xr[c] * f[v];
    }
}

static int gptq_nbw(int64_t m) {
    return 8 * GPTQ_NV(m);
}

typedef void (*gptq_fused_fn)(const lq_qlinear *w, const float *x, const float *xsum, int64_t blk0,
                              int64_t blk1, float *y);
#define GPTQ_INST(B, M, CLONES)                                                                    \
    CLONES static void gptq_fused_b##B##_m##M(const lq_qlinear *w, const float *x,                 \
                                              const float *xsum, int64_t blk0, int64_t blk1,       \
                                              float *y) {                                          \
        gptq_fused_range(w, x, xsum, blk0, blk1, y, B, M, GPTQ_NV(M));                             \
    }
#define GPTQ_INST_B(B)                                                                             \
    GPTQ_INST(B, 1, LQ_CLONES_V4)                                                                  \
    GPTQ_INST(B, 2, LQ_CLONES_V4) GPTQ_INST(B, 3, LQ_CLONES) GPTQ_INST(B, 4, LQ_CLONES)
GPTQ_INST_B(2)
GPTQ_INST_B(3)
GPTQ_INST_B(4)
GPTQ_INST_B(8)
#define GPTQ_ROW(B)                                                                                \
    { gptq_fused_b##B##_m1, gptq_fused_b##B##_m2, gptq_fused_b##B##_m3, gptq_fused_b##B##_m4 }
static const gptq_fused_fn k_gptq_fused[4][LQ_BUF_M - 1] = {GPTQ_ROW(2), GPTQ_ROW(4), GPTQ_ROW(8),
                                                            GPTQ_ROW(3)};
_Static_assert(LQ_BUF_M == 5, "one instance per m < LQ_BUF_M");

/* From LQ_BUF_M rows the grouped kernel decodes each weight once into an L1 buffer of
 * LQ_BUF_KC channels x LQ_BUF_NC columns and runs every row over it (lq_buf_rows), instead of
 * decoding it again for each chunk of rows. */

/* Group g of columns [i0, i0 + 16) for all m rows of xt (x channel-major). The codes are
 * decoded whole (a shift and an AND; 3-bit a unit of 32 channels, 3 word rows, at a time), not
 * masked in place against a prescaled x as at fewer rows: with a mask a field, GCC 12 kept one
 * of them in a register across lq_buf_rows, whose 6-row block then had an accumulator in
 * memory (4096 x 4096, 1 thread, in cache: 16 rows 10.6-10.7 -> 7.9-8.0 ms, 48 rows 43.4-44.1
 * -> 22.9-23.3; the same products, so the same sums bit for bit). Before 3-bit took this
 * kernel, it ran from LQ_BUF_M rows on dequantized tiles and sgemm. */
static inline __attribute__((always_inline)) void
gptq_buf_block(const lq_qlinear *w, const float *xt, const float *xsum, int64_t m, int64_t g,
               int64_t i0, float *y, float *buf, float *part, const int b) {
    const int       vpw = 32 / b;
    const int64_t   n = w->n, k = w->k, gs = w->group_size, G = lq_gptq_groups(w);
    const uint32_t *qw = (const uint32_t *)w->qweight;
    const int64_t   c0 = g * gs, c1 = c0 + gs < k ? c0 + gs : k;
    for (int64_t cc = c0; cc < c1; cc += LQ_BUF_KC) {
        const int64_t ce = cc + LQ_BUF_KC < c1 ? cc + LQ_BUF_KC : c1;
        for (int64_t u = cc / 32; b == 3 && u < ce / 32; u++)
            gptq3_unit16(qw + 3 * u * n + i0, n, NULL, NULL, buf + (32 * u - cc) * LQ_BUF_NC);
        for (int64_t wr = cc / vpw; b != 3 && wr < ce / vpw; wr++) {
            const uint32_t *row = qw + wr * n + i0;
            __builtin_prefetch(row + GPTQ_PF_WORDS);
            gptq_word16(row, b, vpw, NULL, NULL, buf + (wr * vpw - cc) * LQ_BUF_NC);
        }
        lq_buf_rows(xt + cc * m, m, buf, ce - cc, part, cc == c0);
    }
    lq_v8f s[2], zs[2];
    for (int h = 0; h < 2; h++)
        gptq_sz8(w, g, i0 + 8 * h, b, &s[h], &zs[h]);
    lq_buf_epilogue(part, m, xsum + g, G, s, zs, g != 0, y + i0, n);
}

typedef void (*gptq_buf_fn)(const lq_qlinear *w, const float *xt, const float *xsum, int64_t m,
                            int64_t blk0, int64_t blk1, float *y);
#define GPTQ_BUF_INST(B)                                                                           \
    LQ_CLONES static void gptq_buf_b##B(const lq_qlinear *w, const float *xt, const float *xsum,   \
                                        int64_t m, int64_t blk0, int64_t blk1, float *y) {         \
        float buf[LQ_BUF_KC * LQ_BUF_NC] __attribute__((aligned(32)));                             \
        float part[LQ_BUF_MAX_M * LQ_BUF_NC] __attribute__((aligned(32)));                         \
        for (int64_t g = 0; g < lq_gptq_groups(w); g++)                                            \
            for (int64_t i0 = blk0 * LQ_BUF_NC; i0 < blk1 * LQ_BUF_NC; i0 += LQ_BUF_NC)            \
                gptq_buf_block(w, xt, xsum, m, g, i0, y, buf, part, B);                            \
    }
GPTQ_BUF_INST(2)
GPTQ_BUF_INST(4)
GPTQ_BUF_INST(8)
GPTQ_BUF_INST(3)
static const gptq_buf_fn k_gptq_buf[4] = {gptq_buf_b2, gptq_buf_b4, gptq_buf_b8, gptq_buf_b3};

/* Any layout (act-order g_idx, 3-bit, groups not made of whole words): input channels
 * [c0, c1) of the columns [i0, i0 + 8 * NV), each weight dequantized as s[g] * q - (s*z)[g]
 * from the precomputed float arrays, laid out by blocks of GPTQ_PB columns ([n / GPTQ_PB][G]
 * [GPTQ_PB], see gptq_pidx); added into y (assigned when c0 == 0). */
static inline __attribute__((always_inline)) void
gptq_any_chunk(const lq_qlinear *w, const float *x, const float *sc, const float *zs, int64_t c0,
               int64_t c1, int64_t i0, float *y, const int M, const int NV) {
    const int       b    = w->bits;
    const lq_v8u    mask = lq_v8u_splat((1u << b) - 1u);
    const int64_t   n = w->n, k = w->k, G = lq_gptq_groups(w);
    const uint32_t *qw = (const uint32_t *)w->qweight;
    lq_v8f          acc[LQ_FUSED_M][NBW_MAX / 8];
    for (int r = 0; r < M; r++)
        for (int jv = 0; jv < NV; jv++)
            acc[r][jv] = lq_v8f_splat(0.f);
    for (int64_t c = c0; c < c1; c++) {
        const int64_t   pos = c * b, wr = pos >> 5;
        const uint32_t  sh  = (uint32_t)(pos & 31);
        const uint32_t *row = qw + wr * n + i0;
        const int64_t   g   = w->g_idx[c];
        if (sh < (uint32_t)b) /* first value of this word row */
            for (int jv = 0; jv < NV; jv += 2)
                __builtin_prefetch(row + GPTQ_PF_WORDS + 8 * jv);
        lq_v8f wq[NBW_MAX / 8];
        for (int jv = 0; jv < NV; jv++) {
            lq_v8u u = lq_v8u_load(row + 8 * jv) >> sh;
            if (sh + (uint32_t)b > 32) /* 3-bit value straddling two words */
                u |= lq_v8u_load(row + n + 8 * jv) << (32u - sh);
            const int64_t pi = gptq_pidx(G, g, i0 + 8 * jv);
            wq[jv]           = lq_v8u_to_f(u & mask) * lq_v8f_load(sc + pi) - lq_v8f_load(zs + pi);
        }
        for (int r = 0; r < M; r++) {
            const lq_v8f xb = lq_v8f_splat(x[r * k + c]);
            for (int jv = 0; jv < NV; jv++)
                acc[r][jv] += xb * wq[jv];
        }
    }
    for (int r = 0; r < M; r++)
        for (int jv = 0; jv < NV; jv++) {
            float *yp = y + r * n + i0 + 8 * jv;
            lq_v8f_store(yp, c0 ? lq_v8f_load(yp) + acc[r][jv] : acc[r][jv]);
        }
}

/* A thread's blocks [blk0, blk1), input channels in chunks so the rows of each chunk stream
 * through the whole column range. */
#define GPTQ_ANY_KC 256
static inline __attribute__((always_inline)) void
gptq_any_range(const lq_qlinear *w, const float *x, const float *sc, const float *zs, int64_t blk0,
               int64_t blk1, float *y, const int M, const int NV) {
    for (int64_t c0 = 0; c0 < w->k; c0 += GPTQ_ANY_KC) {
        const int64_t c1 = c0 + GPTQ_ANY_KC < w->k ? c0 + GPTQ_ANY_KC : w->k;
        for (int64_t bi = blk0; bi < blk1; bi++)
            gptq_any_chunk(w, x, sc, zs, c0, c1, bi * 8 * NV, y, M, NV);
    }
}

typedef void (*gptq_any_fn)(const lq_qlinear *w, const float *x, const float *sc, const float *zs,
                            int64_t blk0, int64_t blk1, float *y);
#define GPTQ_ANY_INST(M)                                                                           \
    LQ_CLONES static void gptq_any_m##M(const lq_qlinear *w, const float *x, const float *sc,      \
                                        const float *zs, int64_t blk0, int64_t blk1, float *y) {   \
        gptq_any_range(w, x, sc, zs, blk0, blk1, y, M, GPTQ_NV(M));                                \
    }
GPTQ_ANY_INST(1)
GPTQ_ANY_INST(2)
GPTQ_ANY_INST(3)
GPTQ_ANY_INST(4)
GPTQ_ANY_INST(5)
GPTQ_ANY_INST(6)
GPTQ_ANY_INST(7)
GPTQ_ANY_INST(8)
static const gptq_any_fn k_gptq_any[LQ_FUSED_M] = {gptq_any_m1, gptq_any_m2, gptq_any_m3,
                                                   gptq_any_m4, gptq_any_m5, gptq_any_m6,
                                                   gptq_any_m7, gptq_any_m8};

/* Any layout: dequantize 64 input channels of the block into a small W^T buffer (L1), then
 * multiply-add it into the m output rows. */
LQ_CLONES static void gptq_fused_generic(const lq_qlinear *w, const float *x, int64_t m,
                                         const float *sc, const float *zs, int64_t ldp, int64_t i0,
                                         int64_t nc, float *y) {
    const int64_t n = w->n, k = w->k;
    float         out[LQ_FUSED_M][NB];
    float         blk[64][NB];
    memset(out, 0, sizeof out);
    memset(blk, 0, sizeof blk);
    for (int64_t c0 = 0; c0 < k; c0 += 64) {
        const int64_t c1 = c0 + 64 < k ? c0 + 64 : k;
        gptq_kn(w, c0, c1, i0, nc, sc, zs, ldp, &blk[0][0], NB);
        for (int64_t c = c0; c < c1; c++)
            for (int64_t r = 0; r < m; r++) {
                const float xv = x[r * k + c];
                for (int j = 0; j < NB; j++)
                    out[r][j] += xv * blk[c - c0][j];
            }
    }
    for (int64_t r = 0; r < m; r++)
        memcpy(y + r * n + i0, out[r], (size_t)nc * sizeof(float));
}

/* Integer activations (AVX-512 VNNI, cpu/lq_cpu_vnni.c; else AVX2, cpu/lq_cpu_avx2.c): their
 * width at m rows, 0 where the CPU or the layout has none. Worked out once per call: it scans
 * g_idx. */
static int gptq_vnni(const lq_qlinear *w) {
    return w->bits == 3 ? lq_cpu_vbmi() : lq_cpu_vnni();
}

static int gptq_qx(const lq_qlinear *w, int64_t m) {
    const int vnni = gptq_vnni(w);
    if (!vnni && !lq_cpu_avx2i())
        return 0;
    const int xb = lq_gptq_qx_bits(w, m); /* the AVX2 kernels need n % 8 == 0 */
    return xb && (vnni || lq_gptq_avx2_ok(w, xb)) ? xb : 0;
}

static size_t ws_qx_kernel(const lq_qlinear *w, int64_t m, int xb) {
    return gptq_vnni(w) ? lq_ws_gptq_vnni(w, m, xb) : lq_ws_gptq_avx2(w, m, xb);
}

int lq_gptq_cpu_quantizes_x(const lq_qlinear *w, int64_t m, unsigned flags) {
    return (flags & LQ_QLINEAR_INT_X) && gptq_qx(w, m) != 0;
}

size_t lq_ws_gptq_cpu_qx(const lq_qlinear *w, int64_t m) {
    const int xb = gptq_qx(w, m);
    return xb ? perm_ws(w, m) + ws_qx_kernel(w, m, xb) : 0;
}

lq_status lq_gemm_gptq_cpu_qx(const lq_qlinear *w, const float *x, int64_t m, float *y, void *ws,
                              size_t ws_size, int nthreads) {
    const int  xb = gptq_qx(w, m);
    lq_qlinear plain;
    if (!xb)
        return LQ_ERR_UNSUPPORTED;
    if (w->perm) {
        LQ_TRY(perm_gather(w, &x, m, &ws, &ws_size, &plain, nthreads));
        w = &plain;
    }
    if (!ws || ws_size < ws_qx_kernel(w, m, xb))
        return LQ_ERR_INVALID_ARG;
    LQ_TRY(gptq_vnni(w) ? lq_gemm_gptq_vnni(w, x, m, y, ws, xb, nthreads)
                        : lq_gemm_gptq_avx2(w, x, m, y, ws, xb, nthreads));
    lq_add_bias_f16(w->bias, m, w->n, y);
    return LQ_OK;
}

static size_t ws_plain(const lq_qlinear *w, int64_t m) {
    const int64_t G = lq_gptq_groups(w);
    switch (gptq_path_for(w, m)) {
    case PATH_FUSED_GROUPS: /* x sums [m, G] + params of the n % NB tail columns + x, scaled */
    case PATH_FUSED_GIDX:   /* (3-bit: 34 items a unit, gptq3_prescale) or from LQ_BUF_M rows
                               channel-major */
        return (size_t)(m * G + 2 * G * NB +
                        m * (w->bits == 3 && m < LQ_BUF_M ? w->k / 32 * GPTQ3_ITEMS : w->k)) *
               sizeof(float);
    case PATH_FUSED_GENERIC:
        return (size_t)(2 * G * ((w->n + GPTQ_PB - 1) / GPTQ_PB * GPTQ_PB)) * sizeof(float);
    default:
        return lq_ws_kn_tiled(w, &k_gptq_kn, G, m);
    }
}

size_t lq_ws_gptq_cpu(const lq_qlinear *w, int64_t m) {
    return perm_ws(w, m) + ws_plain(w, m);
}

lq_status lq_gemm_gptq_cpu(const lq_qlinear *w, const float *x, int64_t m, float *y, void *ws,
                           size_t ws_size, int nthreads) {
    lq_qlinear plain;
    if (w->perm) {
        LQ_TRY(perm_gather(w, &x, m, &ws, &ws_size, &plain, nthreads));
        w = &plain;
    }
    const enum gptq_path path = gptq_path_for(w, m);
    if (!ws || ws_size < ws_plain(w, m))
        return LQ_ERR_INVALID_ARG;
    const int64_t n = w->n, k = w->k, G = lq_gptq_groups(w);
    const int     nt = lq_cpu_threads(nthreads);
    float        *f  = ws;
    if (path == PATH_TILED) {
        LQ_TRY(lq_gemm_kn_tiled(w, &k_gptq_kn, G, x, m, y, f, nthreads));
    } else if (path == PATH_FUSED_GROUPS || path == PATH_FUSED_GIDX) {
        float *xsum = f; /* [m, G]: sum of x over each group, for the zero-point term */
        if (path == PATH_FUSED_GIDX)
            LQ_TRY(gptq_gidx_sums(w, x, m, xsum));
        else
            lq_group_sums(x, m, k, w->group_size, G, xsum);
        float *xp = xsum + m * G + 2 * G * NB; /* read only by the kernels taking it */
        if (m >= LQ_BUF_M)                     /* the buffered kernel: x as it is */
            lq_buf_xt(x, m, k, xp);
        else if (w->bits == 3)
            gptq3_prescale(x, m, k, xp);
        else
            gptq_prescale(w->bits, x, m, k, xp);
        const int     bi  = w->bits == 2 ? 0 : w->bits == 4 ? 1 : w->bits == 8 ? 2 : 3;
        const int64_t nbw = m >= LQ_BUF_M ? LQ_BUF_NC : gptq_nbw(m);
#pragma omp parallel num_threads(nt)
        {
            const int64_t th = omp_get_thread_num(), tn = omp_get_num_threads();
            const int64_t nblk = n / nbw;
            if (path == PATH_FUSED_GIDX)
                k_gptq_gidx[bi][m - 1](w, xp, xsum, nblk * th / tn, nblk * (th + 1) / tn, y);
            else if (m >= LQ_BUF_M)
                k_gptq_buf[bi](w, xp, xsum, m, nblk * th / tn, nblk * (th + 1) / tn, y);
            else
                k_gptq_fused[bi][m - 1](w, xp, xsum, nblk * th / tn, nblk * (th + 1) / tn, y);
        }
        /* the n % nbw last columns: the generic kernel, NB at a time */
        float *sc = xsum + m * G;
        for (int64_t rc = 0; rc < m; rc += LQ_FUSED_M) {
            const int64_t mc = m - rc < LQ_FUSED_M ? m - rc : LQ_FUSED_M;
            for (int64_t i0 = n / nbw * nbw; i0 < n; i0 += NB) {
                const int64_t nc = n - i0 < NB ? n - i0 : NB;
                gptq_params(w, 0, G, i0, nc, NB, sc, sc + G * NB);
                gptq_fused_generic(w, x + rc * k, mc, sc, sc + G * NB, NB, i0, nc, y + rc * n);
            }
        }
    } else {
        const int64_t np = (n + GPTQ_PB - 1) / GPTQ_PB; /* parameter blocks */
        float        *sc = f, *zs = f + G * np * GPTQ_PB;
#pragma omp parallel num_threads(nt)
        {
#pragma omp for schedule(static)
            for (int64_t pb = 0; pb < np; pb++)
                gptq_params(w, 0, G, pb * GPTQ_PB,
                            n - pb * GPTQ_PB < GPTQ_PB ? n - pb * GPTQ_PB : GPTQ_PB, GPTQ_PB,
                            sc + pb * G * GPTQ_PB, zs + pb * G * GPTQ_PB);
            const int64_t th = omp_get_thread_num(), tn = omp_get_num_threads();
            for (int64_t rc = 0; rc < m; rc += LQ_FUSED_M) {
                const int64_t mc   = m - rc < LQ_FUSED_M ? m - rc : LQ_FUSED_M;
                const int64_t nblk = n / gptq_nbw(mc);
                k_gptq_any[mc - 1](w, x + rc * k, sc, zs, nblk * th / tn, nblk * (th + 1) / tn,
                                   y + rc * n);
            }
        }
        for (int64_t rc = 0; rc < m; rc += LQ_FUSED_M) { /* the n % nbw last columns */
            const int64_t mc = m - rc < LQ_FUSED_M ? m - rc : LQ_FUSED_M;
            for (int64_t i0 = n / gptq_nbw(mc) * gptq_nbw(mc); i0 < n; i0 += NB)
                gptq_fused_generic(w, x + rc * k, mc, sc + gptq_pidx(G, 0, i0),
                                   zs + gptq_pidx(G, 0, i0), GPTQ_PB, i0, n - i0 < NB ? n - i0 : NB,
                                   y + rc * n);
        }
    }
    lq_add_bias_f16(w->bias, m, n, y);
    return LQ_OK;
}
