/* Scalar oracle of AutoAWQ GEMM: w[i, c] = scale[c / G, i] * (q[c, i] - zero[c / G, i]), codes
 * and zeros packed along n with the [0,2,4,6,1,3,5,7] interleave, zeros stored as-is. */
#include "lq_kernels_impl.h"

static float awq_w(const lq_qlinear *w, int64_t i, int64_t c) {
    const int64_t  words = w->n / 8;
    const int64_t  g     = c / w->group_size;
    const uint32_t q     = lq_awq_get((const int32_t *)w->qweight + c * words, i);
    const uint32_t z     = lq_awq_get((const int32_t *)w->qzeros + g * words, i);
    const float    s     = lq_f16_to_f32(((const uint16_t *)w->scales)[g * w->n + i]);
    return s * (float)((int32_t)q - (int32_t)z);
}

void lq_dequant_awq_ref(const lq_qlinear *w, float *out) {
    lq_ref_dequant(w, awq_w, out);
}

void lq_gemm_awq_ref(const lq_qlinear *w, const float *x, int64_t m, float *y) {
    lq_ref_gemm(w, awq_w, x, m, y);
}

static uint32_t awq_code(const lq_qlinear *w, int64_t c, int64_t i) {
    return lq_awq_get((const int32_t *)w->qweight + c * (w->n / 8), i);
}
static int32_t awq_zero(const lq_qlinear *w, int64_t g, int64_t i) {
    return (int32_t)lq_awq_get((const int32_t *)w->qzeros + g * (w->n / 8), i);
}

int lq_awq_qx_bits(const lq_qlinear *w, int64_t m) {
    /* int8 at every row count, as GPTQ (int16 at m <= 4 until 0.2.3) */
    return m >= 1 && m <= LQ_QX_X8_MAX_M && lq_awq_qx_block(w) ? 8 : 0;
}

int64_t lq_awq_qx_block(const lq_qlinear *w) {
    /* in units of 8 channels: from 5 rows GPTQ's kernel runs on a repacked copy, whose words
     * hold 8 */
    return lq_qx_block_size(w->group_size, w->k, 8);
}

void lq_gemm_awq_qx_ref(const lq_qlinear *w, const float *x, int64_t m, float *y) {
    const int xbits = lq_awq_qx_bits(w, m);
    lq_ref_gemm_qx(w, awq_code, awq_zero, xbits ? lq_awq_qx_block(w) : 0, x, m, y);
}

void lq_awq_quant_group(float *w, int64_t len, int maxq, uint8_t *q, float *scale, int32_t *zero) {
    float mx = w[0], mn = w[0];
    for (int64_t j = 1; j < len; j++) {
        mx = w[j] > mx ? w[j] : mx;
        mn = w[j] < mn ? w[j] : mn;
    }
    float s = (mx - mn) > 1e-5f ? (mx - mn) : 1e-5f;
    s /= (float)maxq;
    float z = -nearbyintf(mn / s);
    z       = z < 0 ? 0 : z > (float)maxq ? (float)maxq : z;
    for (int64_t j = 0; j < len; j++) {
        float c = nearbyintf(w[j] / s) + z;
        c       = c < 0 ? 0 : c > (float)maxq ? (float)maxq : c;
        if (q)
            q[j] = (uint8_t)c;
        w[j] = (c - z) * s;
    }
    if (scale)
        *scale = s;
    if (zero)
        *zero = (int32_t)z;
}
