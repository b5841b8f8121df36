/* GGML block decoders (GGUF weights -> float32) and encoders (float32 -> GGUF weights).
 *
 * Layouts are ggml-common.h's block_q4_0 ... block_q6_K. The arithmetic follows the gguf Python
 * package (gguf/quants.py dequantize_blocks) operation by operation -- fp16 scales widened to
 * float32, one float32 product per step, "d * q + m" as a product then a sum (this file is built
 * as ISO C, where GCC does not contract a*b+c into an FMA) -- so the tensors come out
 * bit-identical to that reference (tests/py/test_gguf_oracle.py). Little-endian hosts only, as
 * GGUF itself.
 *
 * The encoders are the algorithms of ggml's deterministic reference quantizers
 * (ggml-quants.c quantize_row_*_ref, MIT), which llama-quantize runs when it has no importance
 * matrix: the same float32 operations in the same order, the same rounding helpers, so a file
 * written here matches llama-quantize's byte for byte (tests/py/test_gguf_write.py checks both
 * against ggml itself). ggml builds them without FMA contraction (baseline x86-64, no -march),
 * which ISO C here matches. */
#include "lq_dtype.h"

#include <float.h>
#include <math.h>

#define QK_K 256

static float f16_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return lq_f16_to_f32(h);
}

/* 32-element blocks: y = d * q (+ m) with q from 4 low bits (+ one high bit from qh). */
static void q4_0(const uint8_t *b, float *y) { /* d f16, qs[16] */
    const float d = f16_at(b);
    for (int j = 0; j < 16; j++) {
        y[j]      = d * (float)((b[2 + j] & 0x0f) - 8);
        y[j + 16] = d * (float)((b[2 + j] >> 4) - 8);
    }
}

static void q4_1(const uint8_t *b, float *y) { /* d f16, m f16, qs[16] */
    const float d = f16_at(b), m = f16_at(b + 2);
    for (int j = 0; j < 16; j++) {
        y[j]      = d * (float)(b[4 + j] & 0x0f) + m;
        y[j + 16] = d * (float)(b[4 + j] >> 4) + m;
    }
}

static void q5_0(const uint8_t *b, float *y) { /* d f16, qh[4] (u32 LE), qs[16] */
    const float d = f16_at(b);
    uint32_t    qh;
    memcpy(&qh, b + 2, 4);
    for (int j = 0; j < 16; j++) {
        const int lo = (b[6 + j] & 0x0f) | (int)((qh >> j & 1) << 4);
        const int hi = (b[6 + j] >> 4) | (int)((qh >> (j + 16) & 1) << 4);
        y[j]         = d * (float)(lo - 16);
        y[j + 16]    = d * (float)(hi - 16);
    }
}

static void q5_1(const uint8_t *b, float *y) { /* d f16, m f16, qh[4], qs[16] */
    const float d = f16_at(b), m = f16_at(b + 2);
    uint32_t    qh;
    memcpy(&qh, b + 4, 4);
    for (int j = 0; j < 16; j++) {
        const int lo = (b[8 + j] & 0x0f) | (int)((qh >> j & 1) << 4);
        const int hi = (b[8 + j] >> 4) | (int)((qh >> (j + 16) & 1) << 4);
        y[j]         = d * (float)lo + m;
        y[j + 16]    = d * (float)hi + m;
    }
}

static void q8_0(const uint8_t *b, float *y) { /* d f16, qs[32] int8 */
    const float d = f16_at(b);
    for (int j = 0; j < 32; j++)
        y[j] = (float)(int8_t)b[2 + j] * d;
}

/* 256-element super-blocks. */
static void q2_k(const uint8_t *b, float *y) { /* scales[16], qs[64], d f16, dmin f16 */
    const uint8_t *sc = b, *qs = b + 16;
    const float    d = f16_at(b + 80), dmin = f16_at(b + 82);
    for (int i = 0; i < QK_K; i++) {
        const int   g = i / 128, s = (i % 128) / 32, l = i % 32, j = i / 16;
        const float dl = d * (float)(sc[j] & 0x0f), ml = dmin * (float)(sc[j] >> 4);
        y[i]           = dl * (float)((qs[g * 32 + l] >> (2 * s)) & 3) - ml;
    }
}

static void q3_k(const uint8_t *b, float *y) { /* hmask[32], qs[64], scales[12], d f16 */
    const uint8_t *hm = b, *qs = b + 32, *sc = b + 96;
    const float    d = f16_at(b + 108);
    float          dl[16];
    for (int j = 0; j < 16; j++) {
        const int lo = (j < 8 ? sc[j] : sc[j - 8] >> 4) & 0x0f;
        const int hi = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
        dl[j]        = d * (float)((int8_t)(lo | hi << 4) - 32);
    }
    for (int i = 0; i < QK_K; i++) {
        const int g = i / 128, s = (i % 128) / 32, l = i % 32;
        const int q = ((qs[g * 32 + l] >> (2 * s)) & 3) - ((((hm[l] >> (i / 32)) & 1) ^ 1) << 2);
        y[i]        = dl[i / 16] * (float)q;
    }
}

/* Q4_K/Q5_K 6-bit sub-block scales and mins (get_scale_min_k4). */
static void k4_scale_min(const uint8_t *s, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m  = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
        *m  = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

static void q4_k(const uint8_t *b, float *y) { /* d, dmin f16, scales[12], qs[128] */
    const float    d = f16_at(b), dmin = f16_at(b + 2);
    const uint8_t *qs = b + 16;
    for (int j = 0; j < 8; j++) {
        int sc, m;
        k4_scale_min(b + 4, j, &sc, &m);
        const float dj = d * (float)sc, mj = dmin * (float)m;
        for (int l = 0; l < 32; l++)
            y[j * 32 + l] = dj * (float)((qs[(j / 2) * 32 + l] >> (4 * (j % 2))) & 0x0f) - mj;
    }
}

static void q5_k(const uint8_t *b, float *y) { /* d, dmin f16, scales[12], qh[32], qs[128] */
    const float    d = f16_at(b), dmin = f16_at(b + 2);
    const uint8_t *qh = b + 16, *qs = b + 48;
    for (int j = 0; j < 8; j++) {
        int sc, m;
        k4_scale_min(b + 4, j, &sc, &m);
        const float dj = d * (float)sc, mj = dmin * (float)m;
        for (int l = 0; l < 32; l++) {
            const int q = ((qs[(j / 2) * 32 + l] >> (4 * (j % 2))) & 0x0f) |
                          (((qh[l] >> j) & 1) << 4);
            y[j * 32 + l] = dj * (float)q - mj;
        }
    }
}

static void q6_k(const uint8_t *b, float *y) { /* ql[128], qh[64], scales[16] int8, d f16 */
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t  *sc = (const int8_t *)(b + 192);
    const float    d  = f16_at(b + 208);
    for (int i = 0; i < QK_K; i++) {
        const int g = i / 128, r = i % 128;
        const int lo = (ql[g * 64 + r % 64] >> (4 * (r / 64))) & 0x0f;
        const int hi = (qh[g * 32 + r % 32] >> (2 * (r / 32))) & 3;
        y[i]         = (d * (float)sc[i / 16]) * (float)((lo | hi << 4) - 32);
    }
}

/* IQ4: 4-bit indices into a non-linear table (ggml-common.h kvalues_iq4nl). */
static const int8_t k_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                   1,    13,   25,  38,  53,  69,  89,  113};

static void iq4_nl(const uint8_t *b, float *y) { /* d f16, qs[16] */
    const float d = f16_at(b);
    for (int j = 0; j < 16; j++) {
        y[j]      = d * (float)k_iq4nl[b[2 + j] & 0x0f];
        y[j + 16] = d * (float)k_iq4nl[b[2 + j] >> 4];
    }
}

/* the 6-bit scale (minus 32) of sub-block ib: 4 low bits in scales_l, 2 high in scales_h */
static int iq4_xs_scale(const uint8_t *b, int ib) {
    const int h = b[2] | b[3] << 8;
    return (((b[4 + ib / 2] >> (4 * (ib % 2))) & 0x0f) | ((h >> (2 * ib)) & 3) << 4) - 32;
}

static void iq4_xs(const uint8_t *b, float *y) { /* d f16, scales_h u16, scales_l[4], qs[128] */
    const float d = f16_at(b);
    for (int ib = 0; ib < 8; ib++) {
        const float    dl = d * (float)iq4_xs_scale(b, ib);
        const uint8_t *qs = b + 8 + 16 * ib;
        for (int j = 0; j < 16; j++) {
            y[32 * ib + j]      = dl * (float)k_iq4nl[qs[j] & 0x0f];
            y[32 * ib + j + 16] = dl * (float)k_iq4nl[qs[j] >> 4];
        }
    }
}

typedef void (*block_fn)(const uint8_t *b, float *y);

static const block_fn k_decode[LQ_DT_COUNT] = {
    [LQ_DT_Q4_0] = q4_0, [LQ_DT_Q4_1] = q4_1, [LQ_DT_Q5_0] = q5_0, [LQ_DT_Q5_1] = q5_1,
    [LQ_DT_Q8_0] = q8_0, [LQ_DT_Q2_K] = q2_k, [LQ_DT_Q3_K] = q3_k, [LQ_DT_Q4_K] = q4_k,
    [LQ_DT_Q5_K] = q5_k, [LQ_DT_Q6_K] = q6_k, [LQ_DT_IQ4_NL] = iq4_nl, [LQ_DT_IQ4_XS] = iq4_xs,
};

void lq_ggml_decode(lq_dtype t, const uint8_t *src, int64_t nblocks, float *dst) {
    int            bb;
    const int      be = lq_dtype_block(t, &bb);
    const block_fn fn = (t >= 0 && t < LQ_DT_COUNT) ? k_decode[t] : NULL;
    if (!fn || be <= 1)
        return;
    for (int64_t i = 0; i < nblocks; i++)
        fn(src + i * bb, dst + i * be);
}

/* ---------------------------------------------------------------------------------------
 * Encoders
 * --------------------------------------------------------------------------------------- */

#define GROUP_MAX_EPS 1e-15f

static void f16_put(uint8_t *p, float f) {
    const uint16_t h = lq_f32_to_f16(f);
    memcpy(p, &h, 2);
}

static int imin(int a, int b) {
    return a < b ? a : b;
}

static int imax(int a, int b) {
    return a > b ? a : b;
}

/* Round to nearest, ties to even, for |v| < 2^22: ggml's nearest_int (the float trick, which
 * rounds in the FPU's current mode; C's default is to nearest-even). */
static int nearest_int(float v) {
    const float f = v + 12582912.f;
    int32_t     i;
    memcpy(&i, &f, 4);
    return (i & 0x007fffff) - 0x00400000;
}

/* The element of largest magnitude (the first of equal ones) and that magnitude. */
static float signed_absmax(const float *x, int n, float *amax) {
    float a = 0, m = 0;
    for (int j = 0; j < n; j++)
        if (a < fabsf(x[j])) {
            a = fabsf(x[j]);
            m = x[j];
        }
    *amax = a;
    return m;
}

static void enc_q4_0(const float *x, uint8_t *b) {
    float       amax;
    const float max = signed_absmax(x, 32, &amax);
    const float d = max / -8, id = d != 0 ? 1.0f / d : 0.0f;
    f16_put(b, d);
    for (int j = 0; j < 16; j++) {
        const uint8_t lo = (uint8_t)imin(15, (int8_t)(x[j] * id + 8.5f));
        const uint8_t hi = (uint8_t)imin(15, (int8_t)(x[j + 16] * id + 8.5f));
        b[2 + j]         = (uint8_t)(lo | hi << 4);
    }
}

static void min_max(const float *x, int n, float *lo, float *hi) {
    float mn = FLT_MAX, mx = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < mn)
            mn = x[j];
        if (x[j] > mx)
            mx = x[j];
    }
    *lo = mn;
    *hi = mx;
}

static void enc_q4_1(const float *x, uint8_t *b) {
    float mn, mx;
    min_max(x, 32, &mn, &mx);
    const float d = (mx - mn) / 15, id = d != 0 ? 1.0f / d : 0.0f;
    f16_put(b, d);
    f16_put(b + 2, mn);
    for (int j = 0; j < 16; j++) {
        const uint8_t lo = (uint8_t)imin(15, (int8_t)((x[j] - mn) * id + 0.5f));
        const uint8_t hi = (uint8_t)imin(15, (int8_t)((x[j + 16] - mn) * id + 0.5f));
        b[4 + j]         = (uint8_t)(lo | hi << 4);
    }
}

/* Q5_0/Q5_1: the low four bits in qs, bit 4 of element j in bit j of the u32 qh. */
static void put_q5(const uint8_t q[32], uint8_t *qh_at, uint8_t *qs) {
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((q[j] & 0x0f) | (q[j + 16] & 0x0f) << 4);
        qh |= (uint32_t)(q[j] >> 4 & 1) << j;
        qh |= (uint32_t)(q[j + 16] >> 4 & 1) << (j + 16);
    }
    memcpy(qh_at, &qh, 4);
}

static void enc_q5_0(const float *x, uint8_t *b) {
    float       amax;
    const float max = signed_absmax(x, 32, &amax);
    const float d = max / -16, id = d != 0 ? 1.0f / d : 0.0f;
    uint8_t     q[32];
    f16_put(b, d);
    for (int j = 0; j < 32; j++)
        q[j] = (uint8_t)imin(31, (int8_t)(x[j] * id + 16.5f));
    put_q5(q, b + 2, b + 6);
}

static void enc_q5_1(const float *x, uint8_t *b) {
    float mn, mx;
    min_max(x, 32, &mn, &mx);
    const float d = (mx - mn) / 31, id = d != 0 ? 1.0f / d : 0.0f;
    uint8_t     q[32];
    f16_put(b, d);
    f16_put(b + 2, mn);
    for (int j = 0; j < 32; j++)
        q[j] = (uint8_t)((x[j] - mn) * id + 0.5f);
    put_q5(q, b + 4, b + 8);
}

static void enc_q8_0(const float *x, uint8_t *b) {
    float amax = 0;
    for (int j = 0; j < 32; j++)
        amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]);
    const float d = amax / 127, id = d != 0 ? 1.0f / d : 0.0f;
    f16_put(b, d);
    for (int j = 0; j < 32; j++)
        b[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
}

/* ggml's make_qx_quants for rmse_type 1 (Q6_K; with importance weights Q3_K, Q4_0, Q5_0): a
 * symmetric scale refined over 18 candidate grids by weighted least squares, weights qw or
 * (NULL) x^2. L gets l + nmax. */
static float make_qx_quants(int n, int nmax, const float *x, int8_t *L, const float *qw) {
    float       amax;
    const float max = signed_absmax(x, n, &amax);
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
        L[i]        = (int8_t)(l + nmax);
        const float w = qw ? qw[i] : x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
    float best  = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0)
            continue;
        iscale = -((float)nmax + 0.1f * (float)is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            const int   l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
            const float w = qw ? qw[i] : x[i] * x[i];
            sumlx += w * x[i] * (float)l;
            suml2 += w * (float)l * (float)l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++)
                L[i] = (int8_t)(nmax + imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i]))));
            scale = sumlx / suml2;
            best  = scale * sumlx;
        }
    }
    return scale;
}

/* ggml's make_q3_quants with do_rmse (Q3_K): coordinate descent on the codes of a symmetric
 * grid, weights x^2. L gets l + nmax. */
static float make_q3_quants(int n, int nmax, const float *x, int8_t *L) {
    float       amax;
    const float max = signed_absmax(x, n, &amax);
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    const float iscale = -nmax / max;
    float       sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
        L[i]        = (int8_t)l;
        const float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            const float w   = x[i] * x[i];
            float       slx = sumlx - w * x[i] * (float)L[i];
            if (slx > 0) {
                float sl2   = suml2 - w * (float)L[i] * (float)L[i];
                int   new_l = imax(-nmax, imin(nmax - 1, nearest_int(x[i] * sl2 / slx)));
                if (new_l != L[i]) {
                    slx += w * x[i] * (float)new_l;
                    sl2 += w * (float)new_l * (float)new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i]  = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        changed++;
                    }
                }
            }
        }
        if (!changed)
            break;
    }
    for (int i = 0; i < n; i++)
        L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* ggml's make_qkx2_quants: an asymmetric grid (scale, min <= 0) searched over nstep + 1
 * candidate ranges with weighted least squares; error in |diff| (use_mad) or diff^2. ggml's
 * make_qkx3_quants, which the importance-weighted encoders call, is this one without use_mad
 * (its max <= min test is max == min once min is clamped to 0 or below). */
static float make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                              float *the_min, float rmin, float rdelta, int nstep, int use_mad) {
    uint8_t Laux[32];
    float   mn = x[0], mx = x[0];
    float   sum_w = weights[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < mn)
            mn = x[i];
        if (x[i] > mx)
            mx = x[i];
        sum_w += weights[i];
        sum_x += weights[i] * x[i];
    }
    if (mn > 0)
        mn = 0;
    if (mx == mn) {
        memset(L, 0, (size_t)n);
        *the_min = -mn;
        return 0.f;
    }
    float iscale = (float)nmax / (mx - mn);
    float scale  = 1 / iscale;
    float best   = 0;
    for (int i = 0; i < n; i++) {
        L[i]       = (uint8_t)imax(0, imin(nmax, nearest_int(iscale * (x[i] - mn))));
        float diff = scale * (float)L[i] + mn - x[i];
        diff       = use_mad ? fabsf(diff) : diff * diff;
        best += weights[i] * diff;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale      = (rmin + rdelta * (float)is + (float)nmax) / (mx - mn);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            const int l = imax(0, imin(nmax, nearest_int(iscale * (x[i] - mn))));
            Laux[i]     = (uint8_t)l;
            const float w = weights[i];
            sum_l += w * (float)l;
            sum_l2 += w * (float)l * (float)l;
            sum_xl += w * (float)l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min   = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min   = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * (float)Laux[i] + this_min - x[i];
                diff       = use_mad ? fabsf(diff) : diff * diff;
                cur += weights[i] * diff;
            }
            if (cur < best) {
                memcpy(L, Laux, (size_t)n);
                best  = cur;
                scale = this_scale;
                mn    = this_min;
            }
        }
    }
    *the_min = -mn;
    return scale;
}

/* Two bits per element, four rows of 32 per byte: element j + 32 s of each 128 at shift 2 s. */
static void pack_2bit(const uint8_t *L, uint8_t *qs) {
    for (int j = 0; j < QK_K; j += 128)
        for (int l = 0; l < 32; l++)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | L[j + l + 32] << 2 | L[j + l + 64] << 4 |
                                      L[j + l + 96] << 6);
}

static void enc_q2_k(const float *x, uint8_t *b) {
    uint8_t *sc = b, *qs = b + 16;
    uint8_t  L[QK_K];
    float    w[16], mins[16], scales[16];
    float    max_scale = 0, max_min = 0;
    for (int j = 0; j < 16; j++) {
        for (int l = 0; l < 16; l++)
            w[l] = fabsf(x[16 * j + l]);
        scales[j] = make_qkx2_quants(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], -0.5f, 0.1f, 15, 1);
        if (scales[j] > max_scale)
            max_scale = scales[j];
        if (mins[j] > max_min)
            max_min = mins[j];
    }
    if (max_scale > 0) {
        const float iscale = 15.f / max_scale;
        for (int j = 0; j < 16; j++)
            sc[j] = (uint8_t)nearest_int(iscale * scales[j]);
        f16_put(b + 80, max_scale / 15.f);
    } else {
        memset(sc, 0, 16);
        f16_put(b + 80, 0.f);
    }
    if (max_min > 0) {
        const float iscale = 15.f / max_min;
        for (int j = 0; j < 16; j++)
            sc[j] = (uint8_t)(sc[j] | nearest_int(iscale * mins[j]) << 4);
        f16_put(b + 82, max_min / 15.f);
    } else {
        f16_put(b + 82, 0.f);
    }
    const float d = f16_at(b + 80), dmin = f16_at(b + 82);
    for (int j = 0; j < 16; j++) {
        const float dj = d * (float)(sc[j] & 0x0f);
        if (dj == 0)
            continue;
        const float mj = dmin * (float)(sc[j] >> 4);
        for (int i = 0; i < 16; i++)
            L[16 * j + i] = (uint8_t)imax(0, imin(3, nearest_int((x[16 * j + i] + mj) / dj)));
    }
    pack_2bit(L, qs);
}

/* Q3_K from its sub-block scale codes Ls (in [0, 63], 32 meaning 0) on the grid of d: the
 * scales packed, d stored, each element rounded on its stored scale, the codes packed. */
static void q3_k_pack(const float *x, float d_block, const int8_t Ls[16], int8_t *L, uint8_t *b) {
    uint8_t *hm = b, *qs = b + 32, *sc = b + 96;
    memset(sc, 0, 12);
    for (int j = 0; j < 16; j++) {
        const int l = Ls[j];
        if (j < 8)
            sc[j] = (uint8_t)(l & 0x0f);
        else
            sc[j - 8] = (uint8_t)(sc[j - 8] | (l & 0x0f) << 4);
        sc[j % 4 + 8] = (uint8_t)(sc[j % 4 + 8] | (l >> 4) << (2 * (j / 4)));
    }
    f16_put(b + 108, d_block);
    const float d = f16_at(b + 108);
    for (int j = 0; j < 16; j++) {
        const int lo = j < 8 ? sc[j] & 0x0f : sc[j - 8] >> 4;
        const int s  = (int8_t)(lo | ((sc[8 + j % 4] >> (2 * (j / 4))) & 3) << 4) - 32;
        const float dj = d * (float)s;
        if (dj == 0)
            continue;
        for (int i = 0; i < 16; i++)
            L[16 * j + i] = (int8_t)(imax(-4, imin(3, nearest_int(x[16 * j + i] / dj))) + 4);
    }
    memset(hm, 0, 32);
    for (int j = 0; j < QK_K; j++)
        if (L[j] > 3) {
            hm[j % 32] = (uint8_t)(hm[j % 32] | 1 << (j / 32));
            L[j]       = (int8_t)(L[j] - 4);
        }
    pack_2bit((const uint8_t *)L, qs);
}

static void enc_q3_k(const float *x, uint8_t *b) {
    int8_t L[QK_K], Ls[16] = {0};
    float  scales[16], amax;
    for (int j = 0; j < 16; j++)
        scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
    const float max_scale = signed_absmax(scales, 16, &amax);
    if (max_scale == 0) { /* every scale code 0 (not 32) under d = 0, as ggml leaves them */
        q3_k_pack(x, 0.f, Ls, L, b);
        return;
    }
    const float iscale = -32.f / max_scale;
    for (int j = 0; j < 16; j++)
        Ls[j] = (int8_t)(imax(-32, imin(31, (int8_t)nearest_int(iscale * scales[j]))) + 32);
    q3_k_pack(x, 1 / iscale, Ls, L, b);
}

/* Q4_K/Q5_K: eight 32-element sub-blocks, each its own asymmetric grid (weights
 * rms(x) + |x|), their scales and mins on 6-bit grids of d and dmin. */
/* Sub-block j's 6-bit scale and min codes into the 12 bytes at s (j = 0 .. 7 in order). */
static void k4_put_scale_min(uint8_t *s, int j, uint8_t ls, uint8_t lm) {
    if (j < 4) {
        s[j]     = ls;
        s[j + 4] = lm;
    } else {
        s[j + 4] = (uint8_t)((ls & 0x0f) | (lm & 0x0f) << 4);
        s[j - 4] = (uint8_t)(s[j - 4] | (ls >> 4) << 6);
        s[j]     = (uint8_t)(s[j] | (lm >> 4) << 6);
    }
}

/* Each element rounded on its sub-block's stored scale and min. */
static void k4_requant(const float *x, const uint8_t *b, uint8_t *L, int nmax) {
    const float d = f16_at(b), dmin = f16_at(b + 2);
    for (int j = 0; j < 8; j++) {
        int sc, m;
        k4_scale_min(b + 4, j, &sc, &m);
        const float dj = d * (float)sc;
        if (dj == 0)
            continue;
        const float mj = dmin * (float)m;
        for (int i = 0; i < 32; i++)
            L[32 * j + i] = (uint8_t)imax(0, imin(nmax, nearest_int((x[32 * j + i] + mj) / dj)));
    }
}

static void k4_scales(const float *x, uint8_t *b, uint8_t *L, int nmax, float rmin, int nstep) {
    float w[32], mins[8], scales[8], max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++)
            sum_x2 += x[32 * j + l] * x[32 * j + l];
        const float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++)
            w[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, w, L + 32 * j, &mins[j], rmin, 0.1f,
                                     nstep, 0);
        if (scales[j] > max_scale)
            max_scale = scales[j];
        if (mins[j] > max_min)
            max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min   = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < 8; j++)
        k4_put_scale_min(b + 4, j, (uint8_t)imin(63, (uint8_t)nearest_int(inv_scale * scales[j])),
                         (uint8_t)imin(63, (uint8_t)nearest_int(inv_min * mins[j])));
    f16_put(b, max_scale / 63.f);
    f16_put(b + 2, max_min / 63.f);
    k4_requant(x, b, L, nmax);
}

static void q4_k_pack(const uint8_t *L, uint8_t *qs) {
    for (int j = 0; j < QK_K; j += 64)
        for (int l = 0; l < 32; l++)
            qs[j / 2 + l] = (uint8_t)(L[j + l] | L[j + l + 32] << 4);
}

static void enc_q4_k(const float *x, uint8_t *b) {
    uint8_t L[QK_K];
    k4_scales(x, b, L, 15, -1.f, 20);
    q4_k_pack(L, b + 16);
}

static void q5_k_pack(const uint8_t *L, uint8_t *qh, uint8_t *qs) {
    memset(qh, 0, 32);
    for (int j = 0; j < QK_K; j += 64) {
        const int s = j / 32; /* sub-blocks s and s + 1 */
        for (int l = 0; l < 32; l++) {
            const int l1 = L[j + l], l2 = L[j + l + 32];
            qh[l]          = (uint8_t)(qh[l] | (l1 >> 4) << s | (l2 >> 4) << (s + 1));
            qs[j / 2 + l]  = (uint8_t)((l1 & 0x0f) | (l2 & 0x0f) << 4);
        }
    }
}

static void enc_q5_k(const float *x, uint8_t *b) {
    uint8_t L[QK_K];
    k4_scales(x, b, L, 31, -0.5f, 15);
    q5_k_pack(L, b + 16, b + 48);
}

/* qw: ggml's quantize_row_q6_K_impl, which takes the importance weights as they are */
static void q6_k_enc(const float *x, const float *qw, uint8_t *b) {
    uint8_t *ql = b, *qh = b + 128;
    int8_t  *sc = (int8_t *)(b + 192);
    int8_t   L[QK_K];
    float    scales[16], max_abs;
    for (int j = 0; j < 16; j++)
        scales[j] = make_qx_quants(16, 32, x + 16 * j, L + 16 * j, qw ? qw + 16 * j : NULL);
    const float max_scale = signed_absmax(scales, 16, &max_abs);
    if (max_abs < GROUP_MAX_EPS) {
        memset(b, 0, 210);
        return;
    }
    const float iscale = -128.f / max_scale;
    f16_put(b + 208, 1 / iscale);
    for (int j = 0; j < 16; j++)
        sc[j] = (int8_t)imin(127, nearest_int(iscale * scales[j]));
    const float d = f16_at(b + 208);
    for (int j = 0; j < 16; j++) {
        const float dj = d * (float)sc[j];
        if (dj == 0)
            continue;
        for (int i = 0; i < 16; i++)
            L[16 * j + i] = (int8_t)(imax(-32, imin(31, nearest_int(x[16 * j + i] / dj))) + 32);
    }
    for (int j = 0; j < QK_K; j += 128) {
        uint8_t *qlj = ql + j / 2, *qhj = qh + j / 4;
        for (int l = 0; l < 32; l++) {
            const int q1 = L[j + l], q2 = L[j + l + 32], q3 = L[j + l + 64], q4 = L[j + l + 96];
            qlj[l]      = (uint8_t)((q1 & 0x0f) | (q3 & 0x0f) << 4);
            qlj[l + 32] = (uint8_t)((q2 & 0x0f) | (q4 & 0x0f) << 4);
            qhj[l] = (uint8_t)((q1 >> 4) | (q2 >> 4) << 2 | (q3 >> 4) << 4 | (q4 >> 4) << 6);
        }
    }
}

/* ggml's best_index_int8: the table entry nearest x (ties to the lower one). */
static int best_index_iq4(float x) {
    if (x <= k_iq4nl[0])
        return 0;
    if (x >= k_iq4nl[15])
        return 15;
    int ml = 0, mu = 15;
    while (mu - ml > 1) {
        const int mav = (ml + mu) / 2;
        if (x < k_iq4nl[mav])
            mu = mav;
        else
            ml = mav;
    }
    return x - k_iq4nl[mu - 1] < k_iq4nl[mu] - x ? mu - 1 : mu;
}

/* ggml's quantize_row_iq4_nl_impl as quantize_iq4_nl / quantize_iq4_xs run it without
 * importance weights (ntry 7, weights x^2): per 32 a scale from 15 trial grids, then for
 * IQ4_XS the 6-bit sub-block scales under one fp16 super-scale and the codes again on them.
 * Writes d at b, the scales (sb > 32) at b + 2, the codes at qs. */
static void enc_iq4(const float *x, const float *qw, int sb, uint8_t *b, uint8_t *qs) {
    const int ntry = 7;
    uint8_t   L[QK_K];
    float     scales[QK_K / 32], weight[32];
    float     max_scale = 0, amax_scale = 0, sigma2 = 0;
    for (int j = 0; j < sb; j++)
        sigma2 += x[j] * x[j];
    sigma2 *= 2.f / (float)sb;
    memset(qs, 0, (size_t)sb / 2);
    f16_put(b, 0.f);
    for (int ib = 0; ib < sb / 32; ib++) {
        const float *xb = x + 32 * ib;
        uint8_t     *Lb = L + 32 * ib;
        float        amax = 0, max = 0;
        for (int j = 0; j < 32; j++) {
            weight[j] = qw ? qw[32 * ib + j] * sqrtf(sigma2 + xb[j] * xb[j]) : xb[j] * xb[j];
            const float ax = fabsf(xb[j]);
            if (ax > amax) {
                amax = ax;
                max  = xb[j];
            }
        }
        if (amax < GROUP_MAX_EPS) {
            scales[ib] = 0;
            continue;
        }
        float d = -max / k_iq4nl[0], id = 1 / d, sumqx = 0, sumq2 = 0;
        for (int j = 0; j < 32; j++) {
            const int   l = best_index_iq4(id * xb[j]);
            const float q = k_iq4nl[l], w = weight[j];
            Lb[j]         = (uint8_t)l;
            sumqx += w * q * xb[j];
            sumq2 += w * q * q;
        }
        d          = sumq2 > 0 ? sumqx / sumq2 : 0.f;
        float best = d * sumqx;
        for (int itry = -ntry; itry <= ntry; itry++) {
            id    = (float)(itry + k_iq4nl[0]) / max;
            sumqx = sumq2 = 0;
            for (int j = 0; j < 32; j++) {
                const float q = k_iq4nl[best_index_iq4(id * xb[j])], w = weight[j];
                sumqx += w * q * xb[j];
                sumq2 += w * q * q;
            }
            if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                d    = sumqx / sumq2;
                best = d * sumqx;
            }
        }
        scales[ib]        = d;
        const float abs_d = fabsf(d);
        if (abs_d > amax_scale) {
            amax_scale = abs_d;
            max_scale  = d;
        }
    }
    if (sb > 32) {
        uint16_t    sh = 0;
        const float d  = -max_scale / 32, id = d ? 1 / d : 0.f;
        f16_put(b, d);
        memset(b + 4, 0, (size_t)sb / 64);
        for (int ib = 0; ib < sb / 32; ib++) {
            const int   l   = imax(-32, imin(31, nearest_int(id * scales[ib])));
            const float dl  = d * (float)l;
            const float idl = dl ? 1 / dl : 0.f;
            for (int j = 0; j < 32; j++)
                L[32 * ib + j] = (uint8_t)best_index_iq4(idl * x[32 * ib + j]);
            b[4 + ib / 2] = (uint8_t)(b[4 + ib / 2] | ((l + 32) & 0x0f) << (4 * (ib % 2)));
            sh            = (uint16_t)(sh | ((l + 32) >> 4) << (2 * ib));
        }
        b[2] = (uint8_t)(sh & 0xff);
        b[3] = (uint8_t)(sh >> 8);
    } else {
        f16_put(b, scales[0]);
        const float id = scales[0] ? 1 / scales[0] : 0;
        for (int j = 0; j < 32; j++)
            L[j] = (uint8_t)best_index_iq4(id * x[j]);
    }
    for (int i = 0; i < sb / 32; i++)
        for (int j = 0; j < 16; j++)
            qs[16 * i + j] = (uint8_t)(L[32 * i + j] | L[32 * i + 16 + j] << 4);
}

static void enc_iq4_nl(const float *x, uint8_t *b) {
    enc_iq4(x, NULL, 32, b, b + 2);
}

static void enc_iq4_xs(const float *x, uint8_t *b) {
    enc_iq4(x, NULL, QK_K, b, b + 8);
}

static void enc_q6_k(const float *x, uint8_t *b) {
    q6_k_enc(x, NULL, b);
}

/* ---------------------------------------------------------------------------------------
 * Encoders with importance weights: ggml's quantize_row_*_impl, which ggml_quantize_chunk runs
 * when llama-quantize has an importance matrix. Element weights are qw * sqrt(sigma2 + x^2),
 * sigma2 the mean square of the row (32-element types) or of the super-block (k-quants, IQ4).
 * --------------------------------------------------------------------------------------- */

/* ggml's make_qp_quants: a scale for non-negative values (the sub-block scales and mins) on
 * [0, nmax], weighted by qw, then coordinate descent on the codes. */
static float make_qp_quants(int n, int nmax, const float *x, uint8_t *L, const float *qw) {
    float max = 0;
    for (int i = 0; i < n; i++)
        max = max > x[i] ? max : x[i];
    if (max < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = (float)nmax / max;
    for (int i = 0; i < n; i++)
        L[i] = (uint8_t)nearest_int(iscale * x[i]);
    const float scale    = 1 / iscale;
    float       best_mse = 0;
    for (int i = 0; i < n; i++) {
        const float diff = x[i] - scale * (float)L[i];
        best_mse += qw[i] * diff * diff;
    }
    for (int is = -4; is <= 4; is++) {
        if (is == 0)
            continue;
        const float iscale_is = (0.1f * (float)is + (float)nmax) / max;
        const float scale_is  = 1 / iscale_is;
        float       mse       = 0;
        for (int i = 0; i < n; i++) {
            const int   l    = imin(nmax, nearest_int(iscale_is * x[i]));
            const float diff = x[i] - scale_is * (float)l;
            mse += qw[i] * diff * diff;
        }
        if (mse < best_mse) {
            best_mse = mse;
            iscale   = iscale_is;
        }
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = imin(nmax, nearest_int(iscale * x[i]));
        L[i]        = (uint8_t)l;
        sumlx += qw[i] * x[i] * (float)l;
        suml2 += qw[i] * (float)l * (float)l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            const float w   = qw[i];
            float       slx = sumlx - w * x[i] * (float)L[i];
            float       sl2 = suml2 - w * (float)L[i] * (float)L[i];
            if (slx > 0 && sl2 > 0) {
                const int new_l = imin(nmax, nearest_int(x[i] * sl2 / slx));
                if (new_l != L[i]) {
                    slx += w * x[i] * (float)new_l;
                    sl2 += w * (float)new_l * (float)new_l;
                    if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i]  = (uint8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        changed++;
                    }
                }
            }
        }
        if (!changed)
            break;
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* qw[j] * sqrt(sigma2 + x[j]^2) for n elements */
static void imp_weights(const float *x, const float *qw, float sigma2, int n, float *w) {
    for (int j = 0; j < n; j++)
        w[j] = qw[j] * sqrtf(sigma2 + x[j] * x[j]);
}

static float block_sigma2(const float *x, float k) {
    float sum_x2 = 0;
    for (int j = 0; j < QK_K; j++)
        sum_x2 += x[j] * x[j];
    return k * sum_x2 / QK_K;
}

static void encw_q4_0(const float *x, const float *qw, float sigma2, uint8_t *b) {
    float  w[32];
    int8_t L[32];
    imp_weights(x, qw, sigma2, 32, w);
    f16_put(b, make_qx_quants(32, 8, x, L, w));
    for (int j = 0; j < 16; j++)
        b[2 + j] = (uint8_t)(L[j] | L[j + 16] << 4);
}

static void encw_q5_0(const float *x, const float *qw, float sigma2, uint8_t *b) {
    float  w[32];
    int8_t L[32];
    imp_weights(x, qw, sigma2, 32, w);
    f16_put(b, make_qx_quants(32, 16, x, L, w));
    put_q5((const uint8_t *)L, b + 2, b + 6);
}

/* Q4_1 / Q5_1: d and m = -min at b, b + 2; codes at qs */
static void encw_q_1(const float *x, const float *qw, float sigma2, int nmax, uint8_t *b,
                     uint8_t L[32]) {
    float w[32], mn;
    imp_weights(x, qw, sigma2, 32, w);
    f16_put(b, make_qkx2_quants(32, nmax, x, w, L, &mn, -0.9f, 0.05f, 36, 0));
    f16_put(b + 2, -mn);
}

static void encw_q4_1(const float *x, const float *qw, float sigma2, uint8_t *b) {
    uint8_t L[32];
    encw_q_1(x, qw, sigma2, 15, b, L);
    for (int j = 0; j < 16; j++)
        b[4 + j] = (uint8_t)(L[j] | L[j + 16] << 4);
}

static void encw_q5_1(const float *x, const float *qw, float sigma2, uint8_t *b) {
    uint8_t L[32];
    encw_q_1(x, qw, sigma2, 31, b, L);
    put_q5(L, b + 4, b + 8);
}

static void encw_q8_0(const float *x, const float *qw, float sigma2, uint8_t *b) {
    (void)qw, (void)sigma2; /* ggml's quantize_q8_0 ignores the weights */
    enc_q8_0(x, b);
}

static void encw_q2_k(const float *x, const float *qw, float sigma2, uint8_t *b) {
    uint8_t    *sc = b, L[QK_K], Ls[16], Lm[16];
    float       w[16], mins[16], scales[16], sw[16];
    const float s2 = block_sigma2(x, 1.f);
    (void)sigma2;
    for (int j = 0; j < 16; j++) {
        imp_weights(x + 16 * j, qw + 16 * j, s2, 16, w);
        sw[j] = 0;
        for (int l = 0; l < 16; l++)
            sw[j] += w[l];
        scales[j] = make_qkx2_quants(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], -0.9f, 0.05f, 36, 0);
    }
    f16_put(b + 80, make_qp_quants(16, 15, scales, Ls, sw));
    f16_put(b + 82, make_qp_quants(16, 15, mins, Lm, sw));
    const float dm = f16_at(b + 80), mm = f16_at(b + 82);
    for (int j = 0; j < 16; j++)
        sc[j] = (uint8_t)(Ls[j] | Lm[j] << 4);
    for (int j = 0; j < 16; j++) {
        const float d = dm * (float)(sc[j] & 0x0f);
        if (d == 0)
            continue;
        const float m = mm * (float)(sc[j] >> 4);
        for (int i = 0; i < 16; i++)
            L[16 * j + i] = (uint8_t)imax(0, imin(3, nearest_int((x[16 * j + i] + m) / d)));
    }
    pack_2bit(L, b + 16);
}

static void encw_q3_k(const float *x, const float *qw, float sigma2, uint8_t *b) {
    float       w[16], sw[16], scales[16];
    int8_t      L[QK_K], Ls[16];
    const float s2 = block_sigma2(x, 2.f);
    (void)sigma2;
    for (int j = 0; j < 16; j++) {
        imp_weights(x + 16 * j, qw + 16 * j, s2, 16, w);
        sw[j] = 0;
        for (int l = 0; l < 16; l++)
            sw[j] += w[l];
        scales[j] = make_qx_quants(16, 4, x + 16 * j, L + 16 * j, w);
    }
    q3_k_pack(x, make_qx_quants(16, 32, scales, Ls, sw), Ls, L, b);
}

/* Q4_K / Q5_K: sub-block grids by ggml's weighted search, their scales and mins by
 * make_qp_quants */
static void encw_k4(const float *x, const float *qw, uint8_t *b, uint8_t *L, int nmax) {
    float       w[32], sw[8], mins[8], scales[8];
    uint8_t     Ls[8], Lm[8];
    const float s2 = block_sigma2(x, 2.f);
    for (int j = 0; j < 8; j++) {
        imp_weights(x + 32 * j, qw + 32 * j, s2, 32, w);
        sw[j] = 0;
        for (int l = 0; l < 32; l++)
            sw[j] += w[l];
        scales[j] =
            make_qkx2_quants(32, nmax, x + 32 * j, w, L + 32 * j, &mins[j], -0.9f, 0.05f, 36, 0);
    }
    const float d_block = make_qp_quants(8, 63, scales, Ls, sw);
    const float m_block = make_qp_quants(8, 63, mins, Lm, sw);
    for (int j = 0; j < 8; j++)
        k4_put_scale_min(b + 4, j, (uint8_t)imin(63, Ls[j]), (uint8_t)imin(63, Lm[j]));
    f16_put(b, d_block);
    f16_put(b + 2, m_block);
    k4_requant(x, b, L, nmax);
}

static void encw_q4_k(const float *x, const float *qw, float sigma2, uint8_t *b) {
    uint8_t L[QK_K];
    (void)sigma2;
    encw_k4(x, qw, b, L, 15);
    q4_k_pack(L, b + 16);
}

static void encw_q5_k(const float *x, const float *qw, float sigma2, uint8_t *b) {
    uint8_t L[QK_K];
    (void)sigma2;
    encw_k4(x, qw, b, L, 31);
    q5_k_pack(L, b + 16, b + 48);
}

static void encw_q6_k(const float *x, const float *qw, float sigma2, uint8_t *b) {
    (void)sigma2;
    q6_k_enc(x, qw, b);
}

static void encw_iq4_nl(const float *x, const float *qw, float sigma2, uint8_t *b) {
    (void)sigma2;
    enc_iq4(x, qw, 32, b, b + 2);
}

static void encw_iq4_xs(const float *x, const float *qw, float sigma2, uint8_t *b) {
    (void)sigma2;
    enc_iq4(x, qw, QK_K, b, b + 8);
}

typedef void (*encw_fn)(const float *x, const float *qw, float sigma2, uint8_t *b);

static const encw_fn k_encode_w[LQ_DT_COUNT] = {
    [LQ_DT_Q4_0] = encw_q4_0,     [LQ_DT_Q4_1] = encw_q4_1,    [LQ_DT_Q5_0] = encw_q5_0,
    [LQ_DT_Q5_1] = encw_q5_1,     [LQ_DT_Q8_0] = encw_q8_0,    [LQ_DT_Q2_K] = encw_q2_k,
    [LQ_DT_Q3_K] = encw_q3_k,     [LQ_DT_Q4_K] = encw_q4_k,    [LQ_DT_Q5_K] = encw_q5_k,
    [LQ_DT_Q6_K] = encw_q6_k,     [LQ_DT_IQ4_NL] = encw_iq4_nl, [LQ_DT_IQ4_XS] = encw_iq4_xs,
};

int lq_ggml_bits(lq_dtype t) {
    static const int8_t bits[LQ_DT_COUNT] = {
        [LQ_DT_Q4_0] = 4, [LQ_DT_Q4_1] = 4, [LQ_DT_Q5_0] = 5,   [LQ_DT_Q5_1] = 5,
        [LQ_DT_Q8_0] = 8, [LQ_DT_Q2_K] = 2, [LQ_DT_Q3_K] = 3,   [LQ_DT_Q4_K] = 4,
        [LQ_DT_Q5_K] = 5, [LQ_DT_Q6_K] = 6, [LQ_DT_IQ4_NL] = 4, [LQ_DT_IQ4_XS] = 4,
    };
    return t >= 0 && t < LQ_DT_COUNT ? bits[t] : 0;
}

float lq_ggml_row_sigma2(const float *x, int64_t n) {
    float sum_x2 = 0;
    for (int64_t j = 0; j < n; j++)
        sum_x2 += x[j] * x[j];
    return n > 0 ? sum_x2 / (float)n : 0.f;
}

bool lq_ggml_encode_w(lq_dtype t, const float *src, int64_t nblocks, const float *qw, float sigma2,
                      uint8_t *dst) {
    int           bb;
    const int     be = lq_dtype_block(t, &bb);
    const encw_fn fn = (t >= 0 && t < LQ_DT_COUNT) ? k_encode_w[t] : NULL;
    if (!qw)
        return lq_ggml_encode(t, src, nblocks, dst);
    if (!fn || be <= 1 || nblocks < 0)
        return false;
    for (int64_t i = 0; i < nblocks; i++)
        fn(src + i * be, qw + i * be, sigma2, dst + i * bb);
    return true;
}

typedef void (*enc_fn)(const float *x, uint8_t *b);

static const enc_fn k_encode[LQ_DT_COUNT] = {
    [LQ_DT_Q4_0] = enc_q4_0, [LQ_DT_Q4_1] = enc_q4_1, [LQ_DT_Q5_0] = enc_q5_0,
    [LQ_DT_Q5_1] = enc_q5_1, [LQ_DT_Q8_0] = enc_q8_0, [LQ_DT_Q2_K] = enc_q2_k,
    [LQ_DT_Q3_K] = enc_q3_k, [LQ_DT_Q4_K] = enc_q4_k, [LQ_DT_Q5_K] = enc_q5_k,
    [LQ_DT_Q6_K] = enc_q6_k, [LQ_DT_IQ4_NL] = enc_iq4_nl, [LQ_DT_IQ4_XS] = enc_iq4_xs,
};

bool lq_ggml_encode(lq_dtype t, const float *src, int64_t nblocks, uint8_t *dst) {
    int          bb;
    const int    be = lq_dtype_block(t, &bb);
    const enc_fn fn = (t >= 0 && t < LQ_DT_COUNT) ? k_encode[t] : NULL;
    if (!fn || be <= 1 || nblocks < 0)
        return false;
    for (int64_t i = 0; i < nblocks; i++)
        fn(src + i * be, dst + i * bb);
    return true;
}

/* ---------------------------------------------------------------------------------------
 * One element on its block's grid (GPTQ on a GGML type)
 *
 * Element j decodes as A * (L - off) (+ B when the type has a min), L in [lmin, lmax]: the
 * expressions of the decoders above, so the value returned is the one ggml and gguf-py read.
 * --------------------------------------------------------------------------------------- */
typedef struct elem_grid {
    float A, B;
    int   has_b, off, lmin, lmax;
} elem_grid;

static elem_grid grid_of(lq_dtype t, const uint8_t *b, int j) {
    elem_grid g = {0, 0, 0, 0, 0, 0};
    int       sc, m;
    switch (t) {
    case LQ_DT_Q4_0: g = (elem_grid){f16_at(b), 0, 0, 8, 0, 15}; break;
    case LQ_DT_Q4_1: g = (elem_grid){f16_at(b), f16_at(b + 2), 1, 0, 0, 15}; break;
    case LQ_DT_Q5_0: g = (elem_grid){f16_at(b), 0, 0, 16, 0, 31}; break;
    case LQ_DT_Q5_1: g = (elem_grid){f16_at(b), f16_at(b + 2), 1, 0, 0, 31}; break;
    case LQ_DT_Q8_0: g = (elem_grid){f16_at(b), 0, 0, 128, 1, 255}; break;
    case LQ_DT_Q2_K: {
        const uint8_t s = b[j / 16];
        g = (elem_grid){f16_at(b + 80) * (float)(s & 0x0f), -(f16_at(b + 82) * (float)(s >> 4)), 1,
                        0, 0, 3};
        break;
    }
    case LQ_DT_Q3_K: {
        const uint8_t *s  = b + 96;
        const int      q  = j / 16;
        const int      lo = (q < 8 ? s[q] : s[q - 8] >> 4) & 0x0f;
        const int      hi = (s[8 + q % 4] >> (2 * (q / 4))) & 3;
        g = (elem_grid){f16_at(b + 108) * (float)((int8_t)(lo | hi << 4) - 32), 0, 0, 4, 0, 7};
        break;
    }
    case LQ_DT_Q4_K:
    case LQ_DT_Q5_K:
        k4_scale_min(b + 4, j / 32, &sc, &m);
        g = (elem_grid){f16_at(b) * (float)sc, -(f16_at(b + 2) * (float)m), 1, 0, 0,
                        t == LQ_DT_Q4_K ? 15 : 31};
        break;
    case LQ_DT_Q6_K:
        g = (elem_grid){f16_at(b + 208) * (float)((const int8_t *)(b + 192))[j / 16], 0, 0, 32, 0,
                        63};
        break;
    default: break;
    }
    return g;
}

static float grid_value(const elem_grid *g, int L) {
    const float v = g->A * (float)(L - g->off);
    return g->has_b ? v + g->B : v;
}

/* Store code L (in [lmin, lmax]) of element j. */
static void set_code(lq_dtype t, uint8_t *b, int j, int L) {
    uint8_t *p;
    int      sh;
    switch (t) {
    case LQ_DT_Q4_0: case LQ_DT_Q4_1: case LQ_DT_Q5_0: case LQ_DT_Q5_1: {
        const int qs = t == LQ_DT_Q4_0 ? 2 : t == LQ_DT_Q4_1 ? 4 : t == LQ_DT_Q5_0 ? 6 : 8;
        p  = b + qs + j % 16;
        sh = 4 * (j / 16);
        *p = (uint8_t)((*p & ~(0x0f << sh)) | (L & 0x0f) << sh);
        if (t == LQ_DT_Q5_0 || t == LQ_DT_Q5_1) {
            uint32_t qh;
            memcpy(&qh, b + qs - 4, 4);
            qh = (qh & ~(1u << j)) | (uint32_t)(L >> 4 & 1) << j;
            memcpy(b + qs - 4, &qh, 4);
        }
        break;
    }
    case LQ_DT_Q8_0: b[2 + j] = (uint8_t)(int8_t)(L - 128); break;
    case LQ_DT_Q2_K:
    case LQ_DT_Q3_K: {
        const int g = j / 128, s = (j % 128) / 32, l = j % 32;
        p  = b + (t == LQ_DT_Q2_K ? 16 : 32) + g * 32 + l;
        *p = (uint8_t)((*p & ~(3 << (2 * s))) | (L & 3) << (2 * s));
        if (t == LQ_DT_Q3_K) /* high bit: element j in bit j / 32 of hmask[j % 32] */
            b[l] = (uint8_t)((b[l] & ~(1 << (j / 32))) | (L >> 2 & 1) << (j / 32));
        break;
    }
    case LQ_DT_Q4_K:
    case LQ_DT_Q5_K: {
        const int q = j / 32, l = j % 32;
        p  = b + (t == LQ_DT_Q4_K ? 16 : 48) + (q / 2) * 32 + l;
        sh = 4 * (q % 2);
        *p = (uint8_t)((*p & ~(0x0f << sh)) | (L & 0x0f) << sh);
        if (t == LQ_DT_Q5_K)
            b[16 + l] = (uint8_t)((b[16 + l] & ~(1 << q)) | (L >> 4 & 1) << q);
        break;
    }
    case LQ_DT_Q6_K: {
        const int g = j / 128, r = j % 128;
        p  = b + g * 64 + r % 64;
        sh = 4 * (r / 64);
        *p = (uint8_t)((*p & ~(0x0f << sh)) | (L & 0x0f) << sh);
        p  = b + 128 + g * 32 + r % 32;
        sh = 2 * (r / 32);
        *p = (uint8_t)((*p & ~(3 << sh)) | (L >> 4 & 3) << sh);
        break;
    }
    default: break;
    }
}

/* IQ4: the table entry nearest x on the element's scale, as ggml's last pass picks it
 * (best_index_int8 of x times the reciprocal scale; a zero scale gives the entry nearest 0). */
static float requant_iq4(lq_dtype t, uint8_t *b, int j, float x) {
    const float    dl  = t == LQ_DT_IQ4_NL ? f16_at(b) : f16_at(b) * (float)iq4_xs_scale(b, j / 32);
    const float    idl = dl ? 1 / dl : 0.f;
    const int      L   = best_index_iq4(idl * x);
    const int      l   = j % 32;
    uint8_t *const p   = b + (t == LQ_DT_IQ4_NL ? 2 : 8 + 16 * (j / 32)) + l % 16;
    const int      sh  = 4 * (l / 16);
    *p                 = (uint8_t)((*p & ~(0x0f << sh)) | L << sh);
    return dl * (float)k_iq4nl[L];
}

float lq_ggml_requant(lq_dtype t, uint8_t *block, int j, float x) {
    if (t == LQ_DT_IQ4_NL || t == LQ_DT_IQ4_XS)
        return requant_iq4(t, block, j, x);
    const elem_grid g = grid_of(t, block, j);
    int             L = g.off;
    if (g.A != 0) { /* ggml's own final rounding: nearest_int((x + dm) / d), clamped */
        const float v  = (g.has_b ? x - g.B : x) / g.A;
        const float lo = (float)(g.lmin - g.off), hi = (float)(g.lmax - g.off);
        L = g.off + (v > lo ? (v < hi ? nearest_int(v) : g.lmax - g.off) : g.lmin - g.off);
    }
    set_code(t, block, j, L);
    return grid_value(&g, L);
}
