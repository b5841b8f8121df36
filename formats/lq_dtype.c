#include "lq_dtype.h"

#include "lq_base.h"

#include <float.h>
#include <math.h>

/* One row per type: name, bytes per element (0 for blocks), block geometry, whether
 * safetensors headers may name it, and the GGML id a GGUF file uses for it (-1: none). */
static const struct {
    const char *name;
    int         size;
    int         block, block_bytes;
    int         st;
    int         ggml;
} k_dtypes[LQ_DT_COUNT] = {
    [LQ_DT_F32]     = {"F32", 4, 1, 4, 1, 0},         [LQ_DT_F16] = {"F16", 2, 1, 2, 1, 1},
    [LQ_DT_BF16]    = {"BF16", 2, 1, 2, 1, 30},       [LQ_DT_F64] = {"F64", 8, 1, 8, 1, 28},
    [LQ_DT_I8]      = {"I8", 1, 1, 1, 1, 24},         [LQ_DT_U8] = {"U8", 1, 1, 1, 1, -1},
    [LQ_DT_I16]     = {"I16", 2, 1, 2, 1, 25},        [LQ_DT_I32] = {"I32", 4, 1, 4, 1, 26},
    [LQ_DT_I64]     = {"I64", 8, 1, 8, 1, 27},        [LQ_DT_BOOL] = {"BOOL", 1, 1, 1, 1, -1},
    [LQ_DT_U16]     = {"U16", 2, 1, 2, 1, -1},        [LQ_DT_U32] = {"U32", 4, 1, 4, 1, -1},
    [LQ_DT_U64]     = {"U64", 8, 1, 8, 1, -1},        [LQ_DT_F8_E4M3] = {"F8_E4M3", 1, 1, 1, 1, -1},
    [LQ_DT_F8_E5M2] = {"F8_E5M2", 1, 1, 1, 1, -1},
    [LQ_DT_Q4_0]    = {"Q4_0", 0, 32, 18, 0, 2},      [LQ_DT_Q4_1] = {"Q4_1", 0, 32, 20, 0, 3},
    [LQ_DT_Q5_0]    = {"Q5_0", 0, 32, 22, 0, 6},      [LQ_DT_Q5_1] = {"Q5_1", 0, 32, 24, 0, 7},
    [LQ_DT_Q8_0]    = {"Q8_0", 0, 32, 34, 0, 8},      [LQ_DT_Q2_K] = {"Q2_K", 0, 256, 84, 0, 10},
    [LQ_DT_Q3_K]    = {"Q3_K", 0, 256, 110, 0, 11},   [LQ_DT_Q4_K] = {"Q4_K", 0, 256, 144, 0, 12},
    [LQ_DT_Q5_K]    = {"Q5_K", 0, 256, 176, 0, 13},   [LQ_DT_Q6_K] = {"Q6_K", 0, 256, 210, 0, 14},
    [LQ_DT_IQ4_NL]  = {"IQ4_NL", 0, 32, 18, 0, 20},   [LQ_DT_IQ4_XS] = {"IQ4_XS", 0, 256, 136, 0, 23},
};

/* Every id ggml.h defines (gguf-py GGML_QUANT_SIZES), decodable or not: a GGUF file holding a
 * type llmquant cannot decode still parses and bounds-checks, and the error names the type. */
static const struct {
    uint32_t    id;
    const char *name;
    int         block, block_bytes;
} k_ggml[] = {
    {0, "F32", 1, 4},         {1, "F16", 1, 2},         {2, "Q4_0", 32, 18},
    {3, "Q4_1", 32, 20},      {6, "Q5_0", 32, 22},      {7, "Q5_1", 32, 24},
    {8, "Q8_0", 32, 34},      {9, "Q8_1", 32, 40},      {10, "Q2_K", 256, 84},
    {11, "Q3_K", 256, 110},   {12, "Q4_K", 256, 144},   {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210},   {15, "Q8_K", 256, 292},   {16, "IQ2_XXS", 256, 66},
    {17, "IQ2_XS", 256, 74},  {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},
    {20, "IQ4_NL", 32, 18},   {21, "IQ3_S", 256, 110},  {22, "IQ2_S", 256, 82},
    {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},         {25, "I16", 1, 2},
    {26, "I32", 1, 4},        {27, "I64", 1, 8},        {28, "F64", 1, 8},
    {29, "IQ1_M", 256, 56},   {30, "BF16", 1, 2},       {34, "TQ1_0", 256, 54},
    {35, "TQ2_0", 256, 66},   {39, "MXFP4", 32, 17},    {40, "NVFP4", 64, 36},
    {41, "Q1_0", 128, 18},
};

static int valid(lq_dtype t) {
    return t >= 0 && t < LQ_DT_COUNT;
}

int lq_dtype_size(lq_dtype t) {
    return valid(t) ? k_dtypes[t].size : 0;
}

const char *lq_dtype_name(lq_dtype t) {
    return valid(t) ? k_dtypes[t].name : "?";
}

int lq_dtype_from_name(const char *name, size_t len) {
    for (int i = 0; i < LQ_DT_COUNT; i++)
        if (k_dtypes[i].st && strlen(k_dtypes[i].name) == len &&
            memcmp(k_dtypes[i].name, name, len) == 0)
            return i;
    return -1;
}

int lq_dtype_block(lq_dtype t, int *block_bytes) {
    if (block_bytes)
        *block_bytes = valid(t) ? k_dtypes[t].block_bytes : 0;
    return valid(t) ? k_dtypes[t].block : 0;
}

bool lq_dtype_nbytes(lq_dtype t, int64_t numel, int64_t *out) {
    int bb, b = lq_dtype_block(t, &bb);
    if (b <= 0 || numel < 0 || numel % b)
        return false;
    return lq_mul_i64(numel / b, bb, out);
}

int lq_dtype_from_ggml(uint32_t ggml_type) {
    for (int i = 0; i < LQ_DT_COUNT; i++)
        if (k_dtypes[i].ggml >= 0 && (uint32_t)k_dtypes[i].ggml == ggml_type &&
            lq_dtype_is_float((lq_dtype)i))
            return i;
    return -1;
}

static int ggml_row(uint32_t id) {
    for (size_t i = 0; i < sizeof k_ggml / sizeof k_ggml[0]; i++)
        if (k_ggml[i].id == id)
            return (int)i;
    return -1;
}

const char *lq_ggml_type_name(uint32_t ggml_type) {
    int r = ggml_row(ggml_type);
    return r < 0 ? "?" : k_ggml[r].name;
}

int lq_ggml_type_block(uint32_t ggml_type, int *block_bytes) {
    int r = ggml_row(ggml_type);
    if (block_bytes)
        *block_bytes = r < 0 ? 0 : k_ggml[r].block_bytes;
    return r < 0 ? 0 : k_ggml[r].block;
}

int lq_dtype_is_float(lq_dtype t) {
    return t == LQ_DT_F32 || t == LQ_DT_F16 || t == LQ_DT_BF16 || t == LQ_DT_F64 ||
           (t >= LQ_DT_Q4_0 && t <= LQ_DT_IQ4_XS);
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
    default: {
        int bb, b = lq_dtype_block(t, &bb);
        if (b <= 1 || !lq_dtype_is_float(t) || n % b)
            return -1;
        lq_ggml_decode(t, s, n / b, dst);
        break;
    }
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
