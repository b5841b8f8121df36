/* Scalar oracle of GPTQ v1 (AutoGPTQ): w[i, c] = scale[g, i] * (q[c, i] - zero[g, i]) with
 * g = g_idx[c]. Plain loops on purpose: every other GPTQ kernel is tested against these. */
#include "lq_kernels_impl.h"

static float gptq_w(const lq_qlinear *w, int64_t i, int64_t c) {
    const int64_t  g = w->g_idx[c];
    const uint32_t q = lq_stream_get((const int32_t *)w->qweight + i, w->n, c, w->bits);
    const int32_t  z = lq_gptq_zero(w, g, i);
    const float    s = lq_f16_to_f32(((const uint16_t *)w->scales)[g * w->n + i]);
    return s * (float)((int32_t)q - z);
}

void lq_dequant_gptq_ref(const lq_qlinear *w, float *out) {
    lq_ref_dequant(w, gptq_w, out);
}

void lq_gemm_gptq_ref(const lq_qlinear *w, const float *x, int64_t m, float *y) {
    lq_ref_gemm(w, gptq_w, x, m, y);
}

static uint32_t gptq_code(const lq_qlinear *w, int64_t c, int64_t i) {
    return lq_stream_get((const int32_t *)w->qweight + i, w->n, c, w->bits);
}

/* Without a division per channel: dispatch scans g_idx several times a call, and with a 64-bit
 * division per channel that was 0.05 ms of every call at k = 4096 and 0.13 at 11008 (Zen 3, one
 * row on the integer kernels, which take 0.46 and 1.3 ms for n = 4096). */
int lq_gptq_gidx_plain(const lq_qlinear *w) {
    const int64_t k = w->k, gs = w->group_size;
    int32_t       g = 0;
    for (int64_t c0 = 0; c0 < k; c0 += gs, g++) {
        const int64_t c1  = c0 + gs < k ? c0 + gs : k;
        int32_t       bad = 0;
        for (int64_t c = c0; c < c1; c++)
            bad |= w->g_idx[c] ^ g;
        if (bad)
            return 0;
    }
    return 1;
}

int lq_gptq_qx_bits(const lq_qlinear *w, int64_t m) {
    /* int8 at every row count: int16 codes double the shifts, masks and dot products a weight,
     * and on Intel's two 512-bit ports that is the pace even at one row (Emerald Rapids, 2
     * threads, GPTQ-4 at one row, 4096 x 11008: 0.87-1.10 ms on int16, 0.78-0.84 on int8) */
    return m >= 1 && m <= LQ_QX_X8_MAX_M && lq_gptq_qx_block(w) ? 8 : 0;
}

int64_t lq_gptq_qx_block(const lq_qlinear *w) {
    const int b = w->bits;
    if (b != 2 && b != 3 && b != 4 && b != 8)
        return 0;
    if (!lq_gptq_gidx_plain(w))
        return 0;
    /* whole words (3-bit: whole 32-channel units of 3 words) */
    return lq_qx_block_size(w->group_size, w->k, b == 3 ? 32 : 32 / b);
}

void lq_gemm_gptq_qx_ref(const lq_qlinear *w, const float *x, int64_t m, float *y) {
    const int xbits = lq_gptq_qx_bits(w, m);
    lq_ref_gemm_qx(w, gptq_code, lq_gptq_zero, xbits ? lq_gptq_qx_block(w) : 0, x, m, y);
}
