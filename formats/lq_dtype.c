#include "lq_dtype.h"

#include <float.h>
#include <math.h>

static const struct {
    const char *name;
    int         size;
} k_dtypes[LQ_DT_COUNT] = {
    [LQ_DT_F32] = {"F32", 4},     [LQ_DT_F16] = {"F16", 2},   [LQ_DT_BF16] = {"BF16", 2},
    [LQ_DT_F64] = {"F64", 8},     [LQ_DT_I8] = {"I8", 1},     [LQ_DT_U8] = {"U8", 1},
    [LQ_DT_I16] = {"I16", 2},     [LQ_DT_I32] = {"I32", 4},   [LQ_DT_I64] = {"I64", 8},
    [LQ_DT_BOOL] = {"BOOL", 1},   [LQ_DT_U16] = {"U16", 2},   [LQ_DT_U32] = {"U32", 4},
    [LQ_DT_U64] = {"U64", 8},     [LQ_DT_F8_E4M3] = {"F8_E4M3", 1},
    [LQ_DT_F8_E5M2] = {"F8_E5M2", 1},
};

int lq_dtype_size(lq_dtype t) {
    return (t >= 0 && t < LQ_DT_COUNT) ? k_dtypes[t].size : 0;
}

const char *lq_dtype_name(lq_dtype t) {
    return (t >= 0 && t < LQ_DT_COUNT) ? k_dtypes[t].name : "?";
}

int lq_dtype_from_name(const char *name, size_t len) {
    for (int i = 0; i < LQ_DT_COUNT; i++)
        if (strlen(k_dtypes[i].name) == len && memcmp(k_dtypes[i].name, name, len) == 0)
            return i;
    return -1;
}

int lq_dtype_is_float(lq_dtype t) {
    return t == LQ_DT_F32 || t == LQ_DT_F16 || t == LQ_DT_BF16 || t == LQ_DT_F64;
}

int64_t lq_convert_to_f32(lq_dtype t, const void *src, int64_t n, float *dst) {
    const unsigned char *s      = src;
    int64_t              bad    = 0;
    if (n <= 0) /* also keeps memcpy away from a NULL dst for empty tensors */
        return lq_dtype_is_float(t) ? 0 : -1;
    switch (t) { /* the one dtype dispatch: every reader goes through here */
    case LQ_DT_F32:
        memcpy(dst, s, (size_t)n * 4);
        break;
    case LQ_DT_F16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            dst[i] = lq_f16_to_f32(h);
        }
        break;
    case LQ_DT_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            dst[i] = lq_bf16_to_f32(h);
        }
        break;
    case LQ_DT_F64:
        for (int64_t i = 0; i < n; i++) {
            double d;
            memcpy(&d, s + 8 * i, 8);
            /* C leaves out-of-range double->float undefined; spell out IEEE nearest-even:
             * FLT_MAX up to half an ulp above it, Inf from the tie on. */
            if (fabs(d) > FLT_MAX)
                d = fabs(d) < FLT_MAX + 0x1p103 ? copysign(FLT_MAX, d) : copysign(INFINITY, d);
            dst[i] = (float)d;
        }
        break;
    default:
        return -1;
    }
    for (int64_t i = 0; i < n; i++)
        bad += !isfinite(dst[i]);
    return bad;
}

void lq_f32_to_f16_array(const float *src, int64_t n, uint16_t *dst) {
    for (int64_t i = 0; i < n; i++)
        dst[i] = lq_f32_to_f16(src[i]);
}

void lq_f16_to_f32_array(const uint16_t *src, int64_t n, float *dst) {
    for (int64_t i = 0; i < n; i++)
        dst[i] = lq_f16_to_f32(src[i]);
}
