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
