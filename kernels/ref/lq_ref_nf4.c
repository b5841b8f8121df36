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

/* ---------------------------------------------------------------------------------------
 * Integer activations (LQ_QLINEAR_INT_X), at any number of rows: int8 activations per
 * block of channels inside one NF4 block, and the code book scaled to int8 as well,
 * tq = round(map * 127 / max|map|): y += ((absmax * (max|map| / 127)) * dx) * sum(tq * xq),
 * block by block, then the bias. Rows of W must hold whole NF4 blocks (k % blocksize == 0) of
 * a power of two >= 64 channels. The code book's rounding adds ~1e-5 of NMSE to the int8
 * activations' ~5e-5.
 * --------------------------------------------------------------------------------------- */
int64_t lq_nf4_qx_block(const lq_qlinear *w) {
    const int64_t bs = w->group_size;
    if (bs < 64 || (bs & (bs - 1)) || w->k % bs)
        return 0;
    return bs < 256 ? bs : 256;
}

int lq_nf4_qx_bits(const lq_qlinear *w, int64_t m) {
    return m >= 1 && m <= LQ_QX_X8_MAX_M && lq_nf4_qx_block(w) ? 8 : 0;
}

float lq_nf4_qx_table(const lq_qlinear *w, int8_t tq[16]) {
    float amax = 0.f;
    for (int c = 0; c < 16; c++)
        amax = fmaxf(amax, fabsf(w->quant_map[c]));
    for (int c = 0; c < 16; c++)
        tq[c] = (int8_t)(amax > 0.f ? nearbyintf(w->quant_map[c] * (127.f / amax)) : 0.f);
    return amax / 127.f;
}

void lq_gemm_nf4_qx_ref(const lq_qlinear *w, const float *x, int64_t m, float *y) {
    const int64_t n = w->n, k = w->k, ab = lq_nf4_qx_bits(w, m) ? lq_nf4_qx_block(w) : 0;
    int8_t        tq[16];
    int32_t       q[256];
    const float   ts = lq_nf4_qx_table(w, tq);
    for (int64_t e = 0; e < m * n; e++)
        y[e] = ab ? 0.f : NAN; /* no such semantics here: make any use impossible to miss */
    if (!ab)
        return;
    for (int64_t r = 0; r < m; r++)
        for (int64_t c0 = 0; c0 < k; c0 += ab) {
            float dx;
            lq_qx_block(x + r * k + c0, ab, 127.f, q, &dx);
            for (int64_t i = 0; i < n; i++) {
                int32_t acc = 0;
                for (int64_t c = c0; c < c0 + ab; c++)
                    acc += tq[lq_nf4_code((const uint8_t *)w->qweight, i * k + c)] * q[c - c0];
                const float s = lq_nf4_absmax(w, (i * k + c0) / w->group_size) * ts;
                y[r * n + i]  = fmaf((float)acc, s * dx, y[r * n + i]);
            }
        }
    if (w->bias)
        for (int64_t r = 0; r < m; r++)
            for (int64_t i = 0; i < n; i++)
                y[r * n + i] += lq_f16_to_f32(w->bias[i]);
}
