/* lq_dtype.h -- element types of checkpoint tensors and conversions to/from float32.
 *
 * Two kinds: the safetensors element types (F32 ... F8_E5M2, one value per element) and the
 * GGML block types a GGUF file stores weights in (Q4_0 ... Q6_K, IQ4_NL, IQ4_XS: blocks of 32 or 256 elements
 * with their own scales). Both decode to float32 through lq_convert_to_f32, so a weight read
 * from a GGUF file goes through the same path as one read from safetensors. */
#ifndef LQ_DTYPE_H
#define LQ_DTYPE_H

#include <stdbool.h>
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
    /* GGML block types (GGUF only; ggml-common.h layouts) */
    LQ_DT_Q4_0 = 15,
    LQ_DT_Q4_1 = 16,
    LQ_DT_Q5_0 = 17,
    LQ_DT_Q5_1 = 18,
    LQ_DT_Q8_0 = 19,
    LQ_DT_Q2_K = 20,
    LQ_DT_Q3_K = 21,
    LQ_DT_Q4_K = 22,
    LQ_DT_Q5_K = 23,
    LQ_DT_Q6_K = 24,
    LQ_DT_IQ4_NL = 25, /* 4-bit non-linear (kvalues_iq4nl), one fp16 scale per 32 */
    LQ_DT_IQ4_XS = 26, /* the same codes, 6-bit sub-block scales per 256 */
    LQ_DT_COUNT
} lq_dtype;

/* Bytes per element (0 for block types); name ("F16", "Q4_K"); parse a safetensors dtype name
 * (returns -1 if unknown; block types are not safetensors dtypes). */
int         lq_dtype_size(lq_dtype t);
const char *lq_dtype_name(lq_dtype t);
int         lq_dtype_from_name(const char *name, size_t len);
/* Elements per block (1 for element types, 32 or 256 for GGML blocks); *block_bytes (may be
 * NULL) receives the bytes of one block. 0 for an invalid type. */
int         lq_dtype_block(lq_dtype t, int *block_bytes);
/* Bytes of numel elements: false when numel is negative, not a whole number of blocks, or the
 * product overflows. */
bool        lq_dtype_nbytes(lq_dtype t, int64_t numel, int64_t *out);
/* Types a weight may have in an input checkpoint: F32/F16/BF16/F64 and the GGML blocks (all
 * decode to float32). */
int         lq_dtype_is_float(lq_dtype t);
/* GGML type id (ggml.h enum ggml_type) -> lq_dtype, -1 if llmquant cannot decode it; and the
 * GGML name of any id ("IQ2_XXS"), "?" if unknown. */
int         lq_dtype_from_ggml(uint32_t ggml_type);
const char *lq_ggml_type_name(uint32_t ggml_type);
/* GGML block geometry of any known id (also types llmquant cannot decode, so a GGUF file can be
 * bounds-checked whole): elements per block and bytes per block; 0 if the id is unknown. */
int         lq_ggml_type_block(uint32_t ggml_type, int *block_bytes);

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
 * non-finite values seen (so callers can reject NaN/Inf weights without a second pass), -1 for
 * a type that does not decode to float or (block types) n not a whole number of blocks. GGML
 * blocks decode bit-exactly like the gguf Python package (gguf/quants.py): float32 products
 * and sums in its order, never fused. */
int64_t lq_convert_to_f32(lq_dtype t, const void *src, int64_t n, float *dst);
/* float32 -> fp16 / bf16 arrays. */
void lq_f32_to_f16_array(const float *src, int64_t n, uint16_t *dst);
void lq_f16_to_f32_array(const uint16_t *src, int64_t n, float *dst);
/* The GGML block decoder behind lq_convert_to_f32 (formats/lq_dtype_ggml.c): nblocks blocks of
 * type t (a block type) from src into dst. */
void lq_ggml_decode(lq_dtype t, const uint8_t *src, int64_t nblocks, float *dst);
/* Its inverse: nblocks blocks of float32 from src into GGML blocks of type t, by the algorithm
 * of ggml's reference quantizer for t (what llama-quantize runs without an importance matrix),
 * bit for bit. False (nothing written) when t is not a GGML block type. */
bool lq_ggml_encode(lq_dtype t, const float *src, int64_t nblocks, uint8_t *dst);
/* lq_ggml_encode with importance weights qw (one per element: llama-imatrix's mean squared
 * activations, or GPTQ's Hessian diagonal), by ggml's quantize_row_*_impl: the blocks
 * ggml_quantize_chunk writes with an importance matrix, bit for bit. sigma2: the mean square of
 * the whole row the blocks come from (lq_ggml_row_sigma2; the 32-element types weight by it, the
 * 256-element ones by their own block's). qw NULL: lq_ggml_encode. */
bool  lq_ggml_encode_w(lq_dtype t, const float *src, int64_t nblocks, const float *qw,
                       float sigma2, uint8_t *dst);
float lq_ggml_row_sigma2(const float *x, int64_t n);
/* The code width of GGML block type t (Q2_K 2 ... Q8_0 8; IQ4 4), 0 for other types. */
int   lq_ggml_bits(lq_dtype t);
/* Element j of one block of type t whose scales are set (by lq_ggml_encode): store the code
 * whose decoded value is nearest x and return that value, exactly as the decoder reads it.
 * GPTQ's sweep on a GGML type rounds column by column through this. */
float lq_ggml_requant(lq_dtype t, uint8_t *block, int j, float x);

#endif
