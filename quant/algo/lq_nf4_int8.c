/* bitsandbytes NF4 and LLM.int8 weight quantizers. */
#include "lq_quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Decision thresholds of bitsandbytes dQuantizeNF4 (midpoints of the NF4 table), ascending. */
static const float k_nf4_mid[15] = {
    -0.8480964004993439f,  -0.6106329262256622f, -0.4599952697753906f, -0.33967943489551544f,
    -0.23460740596055984f, -0.13791173323988914f, -0.045525018125772476f, 0.03979014977812767f,
    0.1202552504837513f,   0.2035212516784668f,  0.2920137718319893f,  0.3893125355243683f,
    0.5016634166240692f,   0.6427869200706482f,  0.8614784181118011f,
};

void lq_nf4_quantize(const float *w, int64_t numel, int64_t blocksize, uint8_t *codes,
                     float *absmax) {
    int64_t nb = (numel + blocksize - 1) / blocksize;
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < nb; b++) {
        int64_t o = b * blocksize, e = o + blocksize < numel ? o + blocksize : numel;
        float   m = 0;
        for (int64_t i = o; i < e; i++)
            m = fabsf(w[i]) > m ? fabsf(w[i]) : m;
        absmax[b] = m;
        float inv = m > 0 ? 1.0f / m : 0.0f;
        for (int64_t i = o; i < e; i++) {
            float x = w[i] * inv;
            int   c = 0; /* x > threshold moves up, as the bitsandbytes decision tree */
            while (c < 15 && x > k_nf4_mid[c])
                c++;
            codes[i] = (uint8_t)c;
        }
    }
}

void lq_int8_quantize(const float *W, int64_t n, int64_t k, int8_t *cb, float *scb) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n; r++) {
        float m = 0;
        for (int64_t c = 0; c < k; c++)
            m = fabsf(W[r * k + c]) > m ? fabsf(W[r * k + c]) : m;
        scb[r]    = m;
        float inv = m > 0 ? 127.0f / m : 0.0f;
        for (int64_t c = 0; c < k; c++)
            cb[r * k + c] = (int8_t)nearbyintf(W[r * k + c] * inv);
    }
}

int64_t lq_int8_outliers(const float *absmax, int64_t k, float threshold, int64_t max_out,
                         int32_t *idx) {
    int64_t n = 0;
    for (int64_t c = 0; c < k; c++)
        if (absmax[c] >= threshold)
            idx[n++] = (int32_t)c;
    if (max_out > 0 && n > max_out) {
        /* keep the largest activations: selection by repeated max (n is small) */
        int32_t *keep = malloc((size_t)max_out * sizeof *keep);
        char    *used = calloc((size_t)n, 1);
        if (keep && used) {
            for (int64_t s = 0; s < max_out; s++) {
                int64_t b = -1;
                for (int64_t i = 0; i < n; i++)
                    if (!used[i] && (b < 0 || absmax[idx[i]] > absmax[idx[b]]))
                        b = i;
                used[b] = 1;
                keep[s] = idx[b];
            }
            n = 0;
            for (int64_t c = 0, s; c < k; c++)
                for (s = 0; s < max_out; s++)
                    if (keep[s] == c) {
                        idx[n++] = (int32_t)c;
                        break;
                    }
        }
        free(keep);
        free(used);
    }
    return n;
}
