/* lq_qparams.h -- the affine quantizer's parameters from a range, shared by the CPU code
 * (quant/algo) and the CUDA GPTQ sweep (kernels/cuda) so both compute them with the same
 * operations (gptq quant.py find_params; v1_safe: see lq_quant.h). It lives with the kernels,
 * which the algorithms may see and not the other way round. */
#ifndef LQ_QPARAMS_H
#define LQ_QPARAMS_H

#include <math.h>

#ifdef __CUDACC__
#define LQ_HOSTDEV __host__ __device__
#else
#define LQ_HOSTDEV
#endif

static inline LQ_HOSTDEV void lq_qparams(float xmin, float xmax, int bits, int sym, int v1_safe,
                                         float *scale, float *zero) {
    int maxq = (1 << bits) - 1;
    /* the range always includes 0 */
    if (xmin > 0)
        xmin = 0;
    if (xmax < 0)
        xmax = 0;
    if (sym) {
        float a = fabsf(xmin) > xmax ? fabsf(xmin) : xmax;
        xmax    = a;
        if (xmin < 0)
            xmin = -a;
    }
    if (xmin == 0 && xmax == 0) {
        xmin = -1;
        xmax = 1;
    }
    float sc = (xmax - xmin) / (float)maxq;
    float z  = sym ? (float)((maxq + 1) / 2) : rintf(-xmin / sc);
    if (v1_safe && !sym && z < 1) {
        /* zero 0 is unstorable in v1 (stored as zero-1): shift it to 1 and widen the step so
         * xmax still maps to maxq. */
        z  = 1;
        sc = xmax / (float)(maxq - 1);
        if (sc <= 0)
            sc = 1;
    }
    *scale = sc;
    *zero  = z;
}

#endif
