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
    if (m < 1 || m > LQ_QX_X8_MAX_M)
        return 0;
    /* At a few rows the words as stored are read in place: int8 with VBMI (awq_vbmi_seq),
     * int16 on an AVX-512 VNNI CPU without it (awq_vnni_seq), whose int8 path repacks them
     * whole into GPTQ's layout each call, twice the time at one row (Emerald Rapids, 1 thread,
     * 4096 x 11008: 1.6-2.0 ms against 3.8). The model loader repacks once (lq_qlinear_sort)
     * and runs GPTQ's int8 kernels. */
    const int xbits = m <= LQ_QX_X16_MAX_M && lq_cpu_vnni() && !lq_cpu_vbmi() ? 16 : 8;
    return lq_awq_qx_block(w, xbits) ? xbits : 0;
}

int64_t lq_awq_qx_block(const lq_qlinear *w, int xbits) {
    /* int16: a lane takes 2 consecutive channels; int8 runs GPTQ's kernel on a repacked copy,
     * whose words hold 8 */
    return lq_qx_block_size(w->group_size, w->k, xbits == 16 ? 2 : 8, xbits);
}

void lq_gemm_awq_qx_ref(const lq_qlinear *w, const float *x, int64_t m, float *y) {
    const int xbits = lq_awq_qx_bits(w, m);
    lq_ref_gemm_qx(w, awq_code, awq_zero, xbits, xbits ? lq_awq_qx_block(w, xbits) : 0, x, m, y);
}
