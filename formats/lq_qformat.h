/* lq_qformat.h -- the quantized checkpoint formats, each described once: a row of the
 * format table (lq_qformat_get) with the arrays of its layout (lq_qarray: descriptor field,
 * Hugging Face tensor suffix, dtype, shape from n, k, group size and bits), the rules a
 * descriptor must follow, its tensors' reader and its quantization_config. Byte counts, the
 * tensor writer, device uploads (kernels/cuda) and inspect's size estimates all derive from the
 * arrays. A format is one lq_qfmt_<name>.c defining its row plus one line in lq_qformat.c.
 *
 * Reading validates presence, dtype and shape of every tensor (LQ_ERR_ST_MISSING_TENSOR /
 * LQ_ERR_QFORMAT naming file and tensor) and the index data the kernels trust (g_idx range,
 * outlier_idx order). Arrays are views into the mapping when their alignment allows (valid until
 * lq_st_close) and copies owned by the lq_qbuf otherwise (bf16/f32 scales and biases become
 * fp16 copies, GPTQ v2 zeros become v1 copies). */
#ifndef LQ_QFORMAT_H
#define LQ_QFORMAT_H

#include "lq_base.h"
#include "lq_dtype.h"
#include "lq_st.h"

#include <cjson/cJSON.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------
 * Owning container for a host lq_qlinear (what a quantization method or a reader produces).
 * --------------------------------------------------------------------------------------- */
#define LQ_QBUF_MAX_ARRAYS 12
typedef struct lq_qbuf {
    lq_qlinear q;                       /* points into mem[] */
    void      *mem[LQ_QBUF_MAX_ARRAYS]; /* owned allocations */
    size_t     mapped[LQ_QBUF_MAX_ARRAYS]; /* bytes of a mem[] lq_qbuf_alloc mapped itself, else 0
                                             (lq_aligned_alloc's: free with lq_aligned_free) */
    int        nmem;
} lq_qbuf;
/* Allocate an owned zeroed array of bytes and register it; NULL on failure. */
void *lq_qbuf_alloc(lq_qbuf *b, size_t bytes);
void  lq_qbuf_free(lq_qbuf *b);
/* Every array of the layout b->q's format, dims and options (bits, group size, nested blocks,
 * outliers) imply, allocated zeroed and pointed to by the descriptor (the bias is the caller's);
 * the dims are checked by the format's rules first. On failure b is freed. */
lq_status lq_qbuf_alloc_layout(lq_qbuf *b, lq_err *err);
/* The owned, writable array the descriptor's pointer p points to (NULL if b does not own it). */
void *lq_qbuf_mut(lq_qbuf *b, const void *p);

#define LQ_QCFG_MAX_SKIP 64

/* One rule of GPTQModel's / vLLM's "dynamic" quantization_config key: per-module overrides of
 * the base config. The first rule whose pattern matches at the start of the module name
 * (Python re.match, PCRE2 here as in GPTQModel) decides; "-:" rules leave the module
 * unquantized, "+:" (or no prefix) ones override bits / group_size / sym / desc_act. */
typedef struct lq_qrule {
    char   *pattern;    /* without the "+:" / "-:" prefix (owned) */
    void   *re;         /* compiled pattern (pcre2_code *, owned) */
    int     negative;   /* "-:" */
    int     bits;       /* 0: the base config's */
    int64_t group_size; /* 0: the base config's; -1 per output channel */
    int     sym;        /* -1: the base config's */
    int     desc_act;   /* -1: the base config's */
} lq_qrule;

/* Where a format's content sits in the checkpoint: the format's own tensors and config, or
 * compressed-tensors' "pack-quantized" ones (vLLM's native format, llm-compressor's output:
 * lq_qfmt_ct.c), which hold GPTQ's content (codes, scales, zero points, groups) in another
 * layout. Readers of a compressed-tensors checkpoint produce GPTQ descriptors. */
typedef enum lq_container {
    LQ_CONTAINER_NATIVE = 0,
    LQ_CONTAINER_CT     = 1,
} lq_container;

typedef struct lq_qconfig {
    lq_format    format;    /* LQ_FMT_DENSE: no quantization_config */
    lq_container container; /* LQ_CONTAINER_CT: format GPTQ (read) or GPTQ / AWQ (write) */
    int          bits;
    int64_t      group_size; /* GPTQ: -1 = per-channel; AWQ group; NF4 blocksize (per tensor) */

    /* GPTQ (AutoGPTQ BaseQuantizeConfig) */
    int    sym, desc_act, static_groups, true_sequential;
    double damp_percent;
    int    gptq_v2; /* checkpoint_format "gptq_v2": zeros stored without the -1 */
    char   model_name_or_path[512];
    char   model_file_base_name[128];

    /* AWQ */
    int zero_point;

    /* bitsandbytes */
    char   quant_type[8];     /* "nf4" (write); "fp4" is read too: the kernels use quant_map */
    int    double_quant;      /* bnb_4bit_use_double_quant */
    char   compute_dtype[16]; /* bnb_4bit_compute_dtype */
    double int8_threshold;    /* llm_int8_threshold: runtime outlier threshold of LLM.int8 */
    int    int8_fp32_cpu_offload;

    /* model dtype ("float16", "bfloat16"): NF4 quant_state dtype, bitsandbytes bias dtype */
    char torch_dtype[16];

    /* modules left in full precision: AWQ modules_to_not_convert / bnb llm_int8_skip_modules
     * (has_skip == 0 writes null) */
    int  has_skip;
    int  n_skip;
    char skip[LQ_QCFG_MAX_SKIP][128];

    /* the linears of each decoder block that are quantized, when some are not (transformers
     * GPTQConfig modules_in_block_to_quantize; owned; lq_qconfig_free) */
    char  **block_modules;
    int64_t n_block_modules;

    /* INT8 modules carrying stored outlier columns (owned; lq_qconfig_free) */
    char  **outlier_modules;
    int64_t n_outlier_modules;

    /* GPTQ "dynamic" per-module overrides, in order (owned; lq_qconfig_free) */
    lq_qrule *dynamic;
    int64_t   n_dynamic;
} lq_qconfig;

/* What a checkpoint under c calls its format: its row's name ("gptq", ...), or
 * "compressed-tensors" for that container. */
const char *lq_qconfig_format_name(const lq_qconfig *c);

/* Defaults of each format's reference tool (AutoGPTQ, AutoAWQ, transformers
 * BitsAndBytesConfig); group_size 128 (GPTQ/AWQ) or blocksize 64 (NF4). */
void      lq_qconfig_default(lq_format f, lq_qconfig *c);
void      lq_qconfig_free(lq_qconfig *c);
lq_status lq_qconfig_add_outlier_module(lq_qconfig *c, const char *module, lq_err *err);
lq_status lq_qconfig_add_block_module(lq_qconfig *c, const char *leaf, lq_err *err);
/* Append a "dynamic" rule (pattern without its prefix; bits/group_size 0, sym/desc_act -1 keep
 * the base). An invalid pattern -> LQ_ERR_CONFIG_VALUE naming label and pattern. */
lq_status lq_qconfig_add_rule(lq_qconfig *c, const char *pattern, int negative, int bits,
                              int64_t group_size, int sym, int desc_act, const char *label,
                              lq_err *err);
/* Append module name s to buf (length n, capacity cap) as a regular expression matching it
 * literally (its dots escaped). Returns the new length; cap when s did not fit (buf then holds
 * what did, terminated). */
size_t lq_qrule_append_name(char *buf, size_t cap, size_t n, const char *s);
/* The config module `module` was written with: *eff = c with the first matching "dynamic"
 * rule applied, and no rules of its own (it shares nothing c owns: never free it); *excluded
 * = 1 when a "-:" rule matched. */
lq_status lq_qconfig_for_module(const lq_qconfig *c, const char *module, lq_qconfig *eff,
                                int *excluded, lq_err *err);

/* config.json root -> *out (LQ_FMT_DENSE without "quantization_config"). Accepts the synonyms
 * of the reference loaders (w_bit, q_group_size, version "gemm" => AWQ, format =
 * checkpoint_format, ...); what the kernels cannot run (AWQ version "gemv", GPTQ
 * checkpoint_format "marlin", bnb quant_storage other than uint8, ...) ->
 * LQ_ERR_UNSUPPORTED naming the key. label names the file in messages. */
lq_status lq_qconfig_parse(const cJSON *config_root, const char *label, lq_qconfig *out,
                           lq_err *err);
/* Just the quantization_config object (or the contents of quantize_config.json). */
lq_status lq_qconfig_parse_qc(const cJSON *qc, const char *label, lq_qconfig *out, lq_err *err);

/* quantization_config object with exactly the keys the reference tool writes. */
lq_status lq_qconfig_to_json(const lq_qconfig *c, cJSON **out, lq_err *err);
/* Set config_root["quantization_config"] (the caller writes config.json), write the format's
 * sidecar (GPTQ: <dir>/quantize_config.json, the same object, as AutoGPTQ does; dir may be
 * NULL) and add the format's block key to config.json's object alone. */
lq_status lq_qconfig_apply(const lq_qconfig *c, cJSON *config_root, const char *dir, lq_err *err);

/* Write the tensors of one linear under <prefix>.* (format from w->format). */
lq_status lq_qlinear_write(lq_st_writer *wr, const char *prefix, const lq_qlinear *w,
                           const lq_qconfig *c, lq_err *err);
/* Read the linear <prefix> of format c->format into out (views + owned copies). n, k: expected
 * [out_features, in_features] from config.json, or <= 0 to take them from the tensors. */
lq_status lq_qlinear_read(const lq_st *st, const char *prefix, const lq_qconfig *c, int64_t n,
                          int64_t k, lq_qbuf *out, lq_err *err);

/* Module names of the quantized linears present in st for format c->format (tensors ending in
 * .qweight / .weight.quant_state.bitsandbytes__* / .SCB; for DENSE every 2-D float ".weight"
 * except embeddings), sorted. *names is one malloc'd block (array + strings): free(*names). */
lq_status lq_qlinear_list(const lq_st *st, const lq_qconfig *c, char ***names, int64_t *count,
                          lq_err *err);

/* ---------------------------------------------------------------------------------------
 * Layouts
 * --------------------------------------------------------------------------------------- */
/* One array of a linear's layout, one tensor of the checkpoint: its data is the descriptor's
 * field, or `constant` for a fixed tensor (LLM.int8's weight_format) the descriptor lacks. */
typedef struct lq_qarray {
    size_t      field;     /* offsetof(lq_qlinear, pointer field); unused with constant */
    const void *constant;  /* data of a fixed tensor (not in the descriptor), else NULL */
    const char *suffix;    /* Hugging Face tensor name after "<module>." */
    lq_dtype    dtype;     /* element type in the descriptor and the file */
    lq_dtype    dev_dtype; /* element type on the device (dense: fp16) */
    int         ndim;      /* in the file: 0 (scalar), 1 or 2 */
    int64_t     shape[2];
    int model_dtype; /* float array written in the model's dtype (torch_dtype), not its own */
} lq_qarray;
#define LQ_QARRAY_MAX 8

static inline int64_t lq_qarray_numel(const lq_qarray *a) {
    return a->ndim == 0 ? 1 : a->ndim == 1 ? a->shape[0] : a->shape[0] * a->shape[1];
}
/* The array's data: the descriptor's pointer, or the constant. */
static inline const void *lq_qarray_data(const lq_qarray *a, const lq_qlinear *w) {
    const void *p;
    if (a->constant)
        return a->constant;
    memcpy(&p, (const char *)w + a->field, sizeof p);
    return p;
}

typedef struct lq_qformat {
    const char *name; /* "dense", "gptq", "awq", "nf4", "int8" */
    const char *desc; /* what the ecosystem calls the checkpoint ("GPTQ v1 (AutoGPTQ)") */
    unsigned    bits; /* code widths the layout stores (bit b set: b-bit codes); 0: fixed */
    /* quantization_config: "quant_method", and for formats sharing one (bitsandbytes) the key
     * that must be true to pick this row; legacy: keys that imply the method in files written
     * without quant_method (older AutoGPTQ/AutoAWQ) */
    const char *quant_method;
    const char *select_key;
    const char *legacy_keys[4];
    /* tensor suffixes naming a quantized linear in a checkpoint ("<module><suffix>") */
    const char *ids[3];
    int         bias_model_dtype; /* bias stored in the model dtype (else fp16) */
    /* Whether a Linear [n, k] can be stored under cfg (bits, group size); why (may be NULL)
     * receives the layout rule it breaks. */
    int (*fits)(const struct lq_qconfig *cfg, int64_t n, int64_t k, char *why, size_t cap);
    /* descriptor rules: dimensions and presence of arrays, never their contents */
    lq_status (*check)(const lq_qlinear *w, lq_err *err);
    /* the arrays of a valid descriptor (bias excluded), in the order they are written */
    int (*arrays)(const lq_qlinear *w, lq_qarray out[LQ_QARRAY_MAX]);
    /* file written beside config.json with the quantization_config alone, or NULL (AutoGPTQ
     * save_quantized: quantize_config.json) */
    const char *sidecar;
    /* config.json key listing the quantized linears of a block when some are not (transformers
     * GPTQConfig modules_in_block_to_quantize; not in the sidecar), or NULL */
    const char *block_key;
    /* fixed tensors written after the arrays (NF4's quant_state), or NULL */
    lq_status (*write_extra)(lq_st_writer *wr, const char *prefix, const lq_qlinear *w,
                             const struct lq_qconfig *cfg, lq_err *err);
    lq_status (*read_tensors)(const lq_st *st, const char *prefix, const struct lq_qconfig *cfg,
                              int64_t n, int64_t k, lq_qbuf *out, lq_err *err);
    /* the reference tool's defaults (format, torch_dtype already set) */
    void (*qconfig_default)(struct lq_qconfig *cfg);
    lq_status (*write_hf_config)(const struct lq_qconfig *cfg, cJSON *qc, lq_err *err);
    lq_status (*parse_hf_config)(const cJSON *qc, const char *label, struct lq_qconfig *cfg,
                                 lq_err *err);
    /* lq_qlinear_sort of a valid descriptor, the kernels' layout (NULL: the stored layout is
     * theirs, and perm must stay NULL): the bytes it writes (0: nothing to do), and the
     * writing into buf of cap >= those bytes. Only GPTQ has an input-channel order (perm); a
     * format whose sort changes the layout refuses perm in its check. */
    size_t (*sort_bytes)(const lq_qlinear *w);
    lq_status (*sort)(const lq_qlinear *w, void *buf, lq_qlinear *out);
} lq_qformat;

const lq_qformat *lq_qformat_get(lq_format f);

/* bitsandbytes' double-quant block: absmax values per nested absmax */
#define LQ_NF4_NESTED_BLOCKSIZE 256

/* Every array of a valid descriptor, its bias last; the count. */
int lq_qlinear_arrays(const lq_qlinear *w, lq_qarray out[LQ_QARRAY_MAX + 2]);
/* Bytes of the arrays of a linear [n, k] stored under cfg (no bias; dims that break the layout
 * count as if rounded down; -1 on overflow): plans before any descriptor exists. */
int64_t lq_qformat_bytes(const struct lq_qconfig *cfg, int64_t n, int64_t k);

/* ---------------------------------------------------------------------------------------
 * Bit-level access to the packed layouts, shared by the readers, the packers and every
 * kernel (so all of them decode the on-disk layout with the same obviously-correct code).
 *
 * GPTQ packs b-bit codes as one little-endian bit stream per column of 32-bit words (value j
 * at bit j*b, LSB first); for b = 3 a value may straddle two words, which is exactly
 * AutoGPTQ's 3-bit layout (bits 30-31 of word 0 + bit 0 of word 1, ...). `words` is the first
 * word of the stream, `stride` the distance between consecutive words of the same stream (n for
 * qweight columns, 1 for qzeros rows).
 * --------------------------------------------------------------------------------------- */
static inline uint32_t lq_stream_get(const int32_t *words, int64_t stride, int64_t j, int bits) {
    const int64_t  pos  = j * bits;
    const int64_t  wi   = pos >> 5;
    const int      sh   = (int)(pos & 31);
    const uint32_t mask = (1u << bits) - 1u;
    uint32_t       v    = (uint32_t)words[wi * stride] >> sh;
    if (sh + bits > 32)
        v |= (uint32_t)words[(wi + 1) * stride] << (32 - sh);
    return v & mask;
}

static inline void lq_stream_put(int32_t *words, int64_t stride, int64_t j, int bits, uint32_t v) {
    const int64_t  pos  = j * bits;
    const int64_t  wi   = pos >> 5;
    const int      sh   = (int)(pos & 31);
    const uint32_t mask = (1u << bits) - 1u;
    v &= mask;
    uint32_t lo = (uint32_t)words[wi * stride];
    lo &= ~(mask << sh);
    lo |= v << sh;
    words[wi * stride] = (int32_t)lo;
    if (sh + bits > 32) {
        const int spill = sh + bits - 32; /* bits that land in the next word */
        uint32_t  hi    = (uint32_t)words[(wi + 1) * stride];
        hi &= ~((1u << spill) - 1u);
        hi |= v >> (32 - sh);
        words[(wi + 1) * stride] = (int32_t)hi;
    }
}

/* GPTQ v1 stores zero - 1 in a b-bit field. Reading adds 1 back and masks, as AutoGPTQ's torch
 * dequant does, so a true zero of 0 (stored as 2^b - 1) reads back as 0 rather than 2^b. */
static inline int32_t lq_gptq_zero(const lq_qlinear *w, int64_t g, int64_t col) {
    const int64_t  zw = w->n * w->bits / 32; /* int32 words per qzeros row */
    const uint32_t f  = lq_stream_get((const int32_t *)w->qzeros + g * zw, 1, col, w->bits);
    return (int32_t)((f + 1u) & ((1u << w->bits) - 1u));
}

static inline int64_t lq_gptq_groups(const lq_qlinear *w) {
    return (w->k + w->group_size - 1) / w->group_size;
}

/* AutoAWQ GEMM interleave: field i of a word holds column 8c + lq_awq_col_of(i); the inverse
 * maps a column within its 8-column word to its field. */
static inline int lq_awq_col_of(int field) {
    static const int order[8] = {0, 2, 4, 6, 1, 3, 5, 7};
    return order[field];
}
static inline int lq_awq_field_of(int col_in_word) {
    static const int inv[8] = {0, 4, 1, 5, 2, 6, 3, 7};
    return inv[col_in_word];
}

static inline uint32_t lq_awq_get(const int32_t *row_words, int64_t col) {
    return ((uint32_t)row_words[col >> 3] >> (4 * lq_awq_field_of((int)(col & 7)))) & 15u;
}

/* NF4 code of flattened element e: byte e/2, first element in the high nibble. */
static inline uint32_t lq_nf4_code(const uint8_t *q, int64_t e) {
    const uint8_t b = q[e >> 1];
    return (e & 1) ? (uint32_t)(b & 15u) : (uint32_t)(b >> 4);
}

#endif
