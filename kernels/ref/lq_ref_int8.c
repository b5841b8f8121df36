/* Scalar oracle of LLM.int8 with bitsandbytes forward semantics (backends/default/ops.py
 * int8_vectorwise_quant + int8_mixed_scaled_mm), extended by calibration outlier columns stored
 * in fp16:
 *   F       = stored outlier columns  U  {c : some row has |x[r, c]| >= threshold}
 *   rowmax  = max |x[r, c]| over c not stored and |x[r, c]| < threshold (bnb zeroes only the
 *             outlier values before the absmax, not their whole column)
 *   qx      = round_half_even(x * (127 / rowmax)), 0 in the columns of F
 *   y       = (acc_int32 * (rowmax * SCB)) * 6.200124e-05            (bnb int8_mm_dequant)
 *           + sum_stored x * outlier_w  + sum_runtime x * (CB * SCB * (1/127))  + bias
 * (int8 part + fp part rounded to float once, then + bias in float). */
#include "lq_kernels_impl.h"

#include <math.h>
#include <stdlib.h>

void lq_dequant_int8_ref(const lq_qlinear *w, float *out) {
    const int8_t *cb = w->qweight;
    for (int64_t i = 0; i < w->n; i++)
        for (int64_t c = 0; c < w->k; c++)
            out[i * w->k + c] = ((float)cb[i * w->k + c] * w->scb[i]) * LQ_INT8_VEC_DEQUANT;
    for (int64_t i = 0; i < w->n; i++)
        for (int64_t j = 0; j < w->n_outlier; j++)
            out[i * w->k + w->outlier_idx[j]] = lq_f16_to_f32(w->outlier_w[i * w->n_outlier + j]);
}

void lq_gemm_int8_ref(const lq_qlinear *w, const float *x, int64_t m, float *y) {
    const int64_t n = w->n, k = w->k;
    const int8_t *cb  = w->qweight;
    const float   thr = w->threshold;
    /* col[c]: 0 int8 path, 1 stored fp16 column, 2 runtime outlier column */
    unsigned char *col = calloc((size_t)k, 1);
    int8_t        *qx  = malloc((size_t)k); /* one quantized activation row */
    if (!col || !qx) {
        free(col);
        free(qx); /* the oracle has no error channel: make the failure impossible to miss */
        for (int64_t e = 0; e < m * n; e++)
            y[e] = NAN;
        return;
    }
    for (int64_t j = 0; j < w->n_outlier; j++)
        col[w->outlier_idx[j]] = 1;
    if (thr > 0.f)
        for (int64_t r = 0; r < m; r++)
            for (int64_t c = 0; c < k; c++)
                if (col[c] == 0 && fabsf(x[r * k + c]) >= thr)
                    col[c] = 2;
    for (int64_t r = 0; r < m; r++) {
        const float *xr     = x + r * k;
        float        rowmax = 0.f;
        for (int64_t c = 0; c < k; c++) {
            const float a = fabsf(xr[c]);
            if (col[c] != 1 && !(thr > 0.f && a >= thr) && a > rowmax)
                rowmax = a;
        }
        const float inv = rowmax > 0.f ? 127.f / rowmax : 0.f;
        for (int64_t c = 0; c < k; c++)
            qx[c] = col[c] == 0 ? lq_int8_quant_x(xr[c], inv) : 0;
        for (int64_t i = 0; i < n; i++) {
            int64_t acc = 0;
            double  fp  = 0.0;
            for (int64_t c = 0; c < k; c++) {
                const int8_t wq = cb[i * k + c];
                if (col[c] == 0)
                    acc += (int64_t)qx[c] * wq;
                else if (col[c] == 2)
                    fp += (double)xr[c] * (double)(((float)wq * w->scb[i]) * LQ_INT8_VEC_DEQUANT);
            }
            for (int64_t j = 0; j < w->n_outlier; j++)
                fp += (double)xr[w->outlier_idx[j]] *
                      (double)lq_f16_to_f32(w->outlier_w[i * w->n_outlier + j]);
            /* int8 part + fp part rounded once, then the bias: the order of the CPU/CUDA kernels,
             * so small-integer inputs agree bit for bit */
            float v = (float)((double)lq_int8_out((int32_t)acc, rowmax, w->scb[i]) + fp);
            if (w->bias)
                v += lq_f16_to_f32(w->bias[i]);
            y[r * n + i] = v;
        }
    }
    free(col);
    free(qx);
}
