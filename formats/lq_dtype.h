/* lq_dtype.h -- element types of checkpoint tensors and conversions to/from float32. */
#ifndef LQ_DTYPE_H
#define LQ_DTYPE_H

#include <stdint.h>
#include <string.h>

typedef enum lq_dtype {
    LQ_DT_F32  = 0,
    LQ_DT_F16  = 1,
    LQ_DT_BF16 = 2,
    LQ_DT_F64  = 3,
    LQ_DT_I8   = 4,
    LQ_DT_U8   = 5,
    LQ_DT_I16  = 6,
    LQ_DT_I32  = 7,
    LQ_DT_I64  = 8,
    LQ_DT_BOOL = 9,
    LQ_DT_U16  = 10,
    LQ_DT_U32  = 11,
    LQ_DT_U64  = 12,
    LQ_DT_F8_E4M3 = 13,
    LQ_DT_F8_E5M2 = 14,
    LQ_DT_COUNT
} lq_dtype;

/* Bytes per element; safetensors name ("F16"); parse a name (returns -1 if unknown). */
int         lq_dtype_size(lq_dtype t);
const char *lq_dtype_name(lq_dtype t);
int         lq_dtype_from_name(const char *name, size_t len);
/* True for F32/F16/BF16/F64: types a weight may have in an input checkpoint. */
int         lq_dtype_is_float(lq_dtype t);

/* IEEE binary16 <-> float32, round to nearest even, handles subnormals/Inf/NaN. */
static inline float lq_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp  = (h >> 10) & 0x1f;
    uint32_t man  = h & 0x3ff;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: renormalize */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while ((man & 0x400) == 0);
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline uint16_t lq_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) /* Inf or NaN (keep a quiet NaN) */
        return (uint16_t)(sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 | ((absx >> 13) & 0x3ff) : 0));
    if (absx >= 0x477ff000u) /* rounds to >= 65520 -> Inf */
        return (uint16_t)(sign | 0x7c00);
    if (absx < 0x38800000u) { /* result is subnormal or zero */
        if (absx < 0x33000000u) /* < 2^-25 rounds to 0 */
            return (uint16_t)sign;
        uint32_t e     = absx >> 23;
        uint32_t m     = (absx & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e; /* 14 + (113 - e) */
        uint32_t r     = m >> shift;
        uint32_t rem   = m & ((1u << shift) - 1);
        uint32_t half  = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1)))
            r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = absx + 0xc8000fffu + ((absx >> 13) & 1); /* rebias exp (-112<<23) + RNE */
    return (uint16_t)(sign | (r >> 13));
}

static inline float lq_bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float    f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline uint16_t lq_f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40);
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

/* Round a float through fp16 (what storing to an fp16 tensor does). */
static inline float lq_round_f16(float f) {
    return lq_f16_to_f32(lq_f32_to_f16(f));
}

/* Convert n elements of src (type t, possibly unaligned) to float32. Returns the count of
 * non-finite values seen (so callers can reject NaN/Inf weights without a second pass). */
int64_t lq_convert_to_f32(lq_dtype t, const void *src, int64_t n, float *dst);
/* float32 -> fp16 / bf16 arrays. */
void lq_f32_to_f16_array(const float *src, int64_t n, uint16_t *dst);
void lq_f16_to_f32_array(const uint16_t *src, int64_t n, float *dst);

#endif
