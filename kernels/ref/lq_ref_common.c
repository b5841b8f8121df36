/* The scalar oracles of the weight-only formats share one shape: decode w[i, c] from the packed
 * layout, then multiply in double. Only the decoder differs, so only it is per format. */
#include "lq_kernels_impl.h"

#include <math.h>
#include <stdlib.h>

/* The input channel of stored row c (a sorted GPTQ descriptor stores them permuted). */
static int64_t in_channel(const lq_qlinear *w, int64_t c) {
    return w->perm ? w->perm[c] : c;
}

void lq_ref_dequant(const lq_qlinear *w, lq_ref_weight_fn wf, float *out) {
    for (int64_t i = 0; i < w->n; i++)
        for (int64_t c = 0; c < w->k; c++)
            out[i * w->k + in_channel(w, c)] = wf(w, i, c);
}

void lq_ref_gemm(const lq_qlinear *w, lq_ref_weight_fn wf, const float *x, int64_t m, float *y) {
    /* weights decoded once per (i, c); each y[r, i] still sums c in ascending order */
    double *acc = malloc((size_t)m * sizeof *acc);
    if (!acc) { /* the oracle has no error channel: make the failure impossible to miss */
        for (int64_t e = 0; e < m * w->n; e++)
            y[e] = NAN;
        return;
    }
    for (int64_t i = 0; i < w->n; i++) {
        for (int64_t r = 0; r < m; r++)
            acc[r] = 0.0;
        for (int64_t c = 0; c < w->k; c++) {
            const double wv = (double)wf(w, i, c);
            for (int64_t r = 0; r < m; r++)
                acc[r] += (double)x[r * w->k + in_channel(w, c)] * wv;
        }
        for (int64_t r = 0; r < m; r++)
            y[r * w->n + i] = (float)(acc[r] + (w->bias ? (double)lq_f16_to_f32(w->bias[i]) : 0.0));
    }
    free(acc);
}

/* Integer-activation oracle shared by GPTQ and AWQ (their decoders differ only). */
void lq_ref_gemm_qx(const lq_qlinear *w, lq_ref_code_fn code, lq_ref_zero_fn zero, int64_t ab,
                    const float *x, int64_t m, float *y) {
    const int64_t n = w->n, k = w->k;
    int32_t       q[256];
    float         xg[256];                  /* a block of x in stored order */
    const int     ok = ab > 0 && ab <= 256; /* lq_qx_block_size's blocks fit q */
    for (int64_t e = 0; e < m * n; e++)
        y[e] = ok ? 0.f : NAN; /* no such semantics at this m: make any use impossible to miss */
    if (!ok)
        return;
    for (int64_t r = 0; r < m; r++)
        for (int64_t c0 = 0; c0 < k; c0 += ab) {
            const int64_t len = c0 + ab < k ? ab : k - c0, g = c0 / w->group_size;
            float         dx;
            for (int64_t c = c0; c < c0 + len; c++)
                xg[c - c0] = x[r * k + in_channel(w, c)];
            const int32_t xs = lq_qx_block(xg, len, 127.f, q, &dx);
            for (int64_t i = 0; i < n; i++) {
                int32_t acc = 0;
                for (int64_t c = c0; c < c0 + len; c++)
                    acc += q[c - c0] * (int32_t)code(w, c, i);
                const float s = lq_f16_to_f32(((const uint16_t *)w->scales)[g * n + i]);
                const float t = fmaf(-(float)zero(w, g, i), (float)xs, (float)acc);
                y[r * n + i]  = fmaf(t, s * dx, y[r * n + i]);
            }
        }
    if (w->bias)
        for (int64_t r = 0; r < m; r++)
            for (int64_t i = 0; i < n; i++)
                y[r * n + i] += lq_f16_to_f32(w->bias[i]);
}

int64_t lq_qx_block_size(int64_t gs, int64_t k, int64_t unit) {
    const int64_t max = 256;
    if (k % unit || gs % unit)
        return 0;
    if (gs <= max)
        return gs;
    for (int64_t d = max; d >= 32; d /= 2)
        if (gs % d == 0 && d % unit == 0)
            return d;
    return 0;
}
