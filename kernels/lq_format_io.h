/* lq_format_io.h -- quantized linears <-> safetensors tensors under the exact Hugging Face names,
 * and quantization_config <-> lq_qconfig.
 *
 * Tensor names per Linear `<prefix>` (module name, e.g. "model.layers.0.self_attn.q_proj"):
 *   GPTQ  <prefix>.qweight I32 [k*b/32, n]  .qzeros I32 [G, n*b/32]  .scales F16 [G, n]
 *         .g_idx I32 [k]  [.bias F16 [n]]                             (AutoGPTQ, v1 zero - 1)
 *   AWQ   <prefix>.qweight I32 [k, n/8]  .qzeros I32 [G, n/8]  .scales F16 [G, n]  [.bias]
 *   NF4   <prefix>.weight U8 [n*k/2, 1]  .weight.absmax F32|U8 [nblocks]  .weight.quant_map
 *         F32 [16]  [.weight.nested_absmax F32, .weight.nested_quant_map F32 [256]]
 *         .weight.quant_state.bitsandbytes__nf4 U8 (json.dumps of the non-tensor state)  [.bias]
 *   INT8  <prefix>.weight I8 [n, k]  .SCB F32 [n]  .weight_format U8 [] (0 = row)  [.bias]
 *         plus llmquant's .outlier_idx I32 [n_outlier] and .outlier_weight F16 [n, n_outlier]
 *         (listed in quantization_config["llmquant_int8_outlier_modules"])
 *   DENSE <prefix>.weight [n, k] in the model dtype  [.bias]
 *
 * Reading validates presence, dtype and shape of every tensor (LQ_ERR_ST_MISSING_TENSOR /
 * LQ_ERR_QFORMAT naming file and tensor) and the index data the kernels trust (g_idx range,
 * outlier_idx order). Arrays are views into the mapping when their alignment allows (valid until
 * lq_st_close) and copies owned by the lq_qbuf otherwise (bf16/f32 scales and biases become
 * fp16 copies, GPTQ v2 zeros become v1 copies). */
#ifndef LQ_FORMAT_IO_H
#define LQ_FORMAT_IO_H

#include "lq_kernels.h"
#include "lq_st.h"

#include <cjson/cJSON.h>

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

typedef struct lq_qconfig {
    lq_format format; /* LQ_FMT_DENSE: no quantization_config */
    int       bits;
    int64_t   group_size; /* GPTQ: -1 = per-channel; AWQ group; NF4 blocksize (per tensor) */

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

    /* INT8 modules carrying stored outlier columns (owned; lq_qconfig_free) */
    char  **outlier_modules;
    int64_t n_outlier_modules;

    /* GPTQ "dynamic" per-module overrides, in order (owned; lq_qconfig_free) */
    lq_qrule *dynamic;
    int64_t   n_dynamic;
} lq_qconfig;

/* Defaults of each format's reference tool (AutoGPTQ, AutoAWQ, transformers
 * BitsAndBytesConfig); group_size 128 (GPTQ/AWQ) or blocksize 64 (NF4). */
void      lq_qconfig_default(lq_format f, lq_qconfig *c);
void      lq_qconfig_free(lq_qconfig *c);
lq_status lq_qconfig_add_outlier_module(lq_qconfig *c, const char *module, lq_err *err);
/* Append a "dynamic" rule (pattern without its prefix; bits/group_size 0, sym/desc_act -1 keep
 * the base). An invalid pattern -> LQ_ERR_CONFIG_VALUE naming label and pattern. */
lq_status lq_qconfig_add_rule(lq_qconfig *c, const char *pattern, int negative, int bits,
                              int64_t group_size, int sym, int desc_act, const char *label,
                              lq_err *err);
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
/* Set config_root["quantization_config"] (the caller writes config.json) and, for GPTQ, write
 * <dir>/quantize_config.json with the same object as AutoGPTQ does. dir may be NULL. */
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

/* Per-format pieces the traits table binds (write_tensors, read_tensors, write/parse config). */
#define LQ_FMT_IO_DECL(fmt)                                                                        \
    lq_status lq_write_##fmt(lq_st_writer *wr, const char *prefix, const lq_qlinear *w,            \
                             const lq_qconfig *c, lq_err *err);                                    \
    lq_status lq_read_##fmt(const lq_st *st, const char *prefix, const lq_qconfig *c, int64_t n,   \
                            int64_t k, lq_qbuf *out, lq_err *err);                                 \
    lq_status lq_hfcfg_write_##fmt(const lq_qconfig *c, cJSON *qc, lq_err *err);                   \
    lq_status lq_hfcfg_parse_##fmt(const cJSON *qc, const char *label, lq_qconfig *c, lq_err *err);
LQ_FMT_IO_DECL(dense)
LQ_FMT_IO_DECL(gptq)
LQ_FMT_IO_DECL(awq)
LQ_FMT_IO_DECL(nf4)
LQ_FMT_IO_DECL(int8)
#undef LQ_FMT_IO_DECL

#endif
