/* GGML block decoders (GGUF weights -> float32).
 *
 * Layouts are ggml-common.h's block_q4_0 ... block_q6_K. The arithmetic follows the gguf Python
 * package (gguf/quants.py dequantize_blocks) operation by operation -- fp16 scales widened to
 * float32, one float32 product per step, "d * q + m" as a product then a sum (this file is built
 * as ISO C, where GCC does not contract a*b+c into an FMA) -- so the tensors come out
 * bit-identical to that reference (tests/py/test_gguf_oracle.py). Little-endian hosts only, as
 * GGUF itself. */
#include "lq_dtype.h"

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

typedef void (*block_fn)(const uint8_t *b, float *y);

static const block_fn k_decode[LQ_DT_COUNT] = {
    [LQ_DT_Q4_0] = q4_0, [LQ_DT_Q4_1] = q4_1, [LQ_DT_Q5_0] = q5_0, [LQ_DT_Q5_1] = q5_1,
    [LQ_DT_Q8_0] = q8_0, [LQ_DT_Q2_K] = q2_k, [LQ_DT_Q3_K] = q3_k, [LQ_DT_Q4_K] = q4_k,
    [LQ_DT_Q5_K] = q5_k, [LQ_DT_Q6_K] = q6_k,
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
