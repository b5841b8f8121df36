/* Scalar oracle of bitsandbytes NF4: element e of the flattened row-major [n, k] weight is
 * quant_map[code(e)] * absmax(e / blocksize), absmax expanded from double quant when nested. */
#include "lq_kernels_impl.h"

static float nf4_w(const lq_qlinear *w, int64_t i, int64_t c) {
    const int64_t e = i * w->k + c;
    return w->quant_map[lq_nf4_code((const uint8_t *)w->qweight, e)] *
           lq_nf4_absmax(w, e / w->group_size);
}

void lq_dequant_nf4_ref(const lq_qlinear *w, float *out) {
    lq_ref_dequant(w, nf4_w, out);
}

void lq_gemm_nf4_ref(const lq_qlinear *w, const float *x, int64_t m, float *y) {
    lq_ref_gemm(w, nf4_w, x, m, y);
}
