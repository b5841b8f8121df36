/* The one table of options. The CLI derives its flags from it ("--group-size" <-> group_size),
 * the job API validates against it, and `--help` prints it. Add a row to add an option. */
#include "lq_base.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "lq_params_get.h"

#define Q    "rtn,gptq,awq"
#define CAL  "gptq,awq,int8"
#define ALLQ "rtn,gptq,awq,nf4,int8"
static const lq_param_info k_params[] = {
    /* name, type, default, min, max, applies to, choices, help */
    {"bits", LQ_PT_INT, "4", 2, 8, Q, NULL, "code width in bits (GPTQ/RTN: 2,3,4,8; AWQ: 4)"},
    {"group_size", LQ_PT_INT, "128", -1, 1 << 30, Q ",inspect", NULL,
     "input channels per quantization group; -1 = per output channel"},
    {"sym", LQ_PT_BOOL, "true", 0, 1, "rtn,gptq", NULL,
     "symmetric codes (zero point at 2^(bits-1))"},
    {"desc_act", LQ_PT_BOOL, "false", 0, 1, "gptq", NULL,
     "act-order: quantize columns by decreasing Hessian diagonal (writes g_idx)"},
    {"mse", LQ_PT_BOOL, "false", 0, 1, "rtn,gptq", NULL,
     "group scales from the grid search of least error (gptq quant.py --mse: range shrunk by up "
     "to 20% in 1% steps, error norm 2.4) instead of the group's min and max"},
    {"mse_weighted", LQ_PT_BOOL, "false", 0, 1, "gptq", NULL,
     "the same range search, scored by GPTQ's own loss (each column's squared error over its "
     "[chol(H^-1)]_jj^2) instead of the unweighted 2.4-norm"},
    {"static_groups", LQ_PT_BOOL, "false", 0, 1, "gptq", NULL,
     "compute group parameters up front from the unquantized weights"},
    {"damp", LQ_PT_FLOAT, "0.01", 0, 1, "gptq", NULL,
     "Hessian damping as a fraction of the mean diagonal"},
    {"damp_retries", LQ_PT_INT, "8", 0, 64, "gptq", NULL,
     "times to increase damping when Cholesky fails before giving up"},
    {"block_size", LQ_PT_INT, "128", 1, 1 << 20, "gptq", NULL, "columns per lazy-update block"},
    {"v_attn_weights", LQ_PT_BOOL, "true", 0, 1, "gptq", NULL,
     "weight v_proj's Hessian by the attention each token receives (off: the reference GPTQ "
     "Hessian, every token alike)"},
    {"true_sequential", LQ_PT_BOOL, "true", 0, 1, "gptq", NULL,
     "quantize q/k/v -> o -> gate/up -> down, re-running the layer between sub-groups"},
    {"stage_cache", LQ_PT_BOOL, "true", 0, 1, "gptq", NULL,
     "true-sequential passes start where the previous one left off (attention output, residual "
     "kept: one more activation copy); off: each pass re-runs the layer from its input, same "
     "bytes"},
    {"awq_scales", LQ_PT_BOOL, "false", 0, 1, "gptq", NULL,
     "first search and fold AWQ's per-channel scales into the layer (as awq does), then GPTQ "
     "the scaled weights"},
    {"awq_tokens", LQ_PT_INT, "65536", 1, 1 << 30, "gptq", NULL,
     "with awq_scales: calibration tokens the scale search uses (AutoAWQ's 128 x 512), whole "
     "windows from the first"},
    {"target_bpw", LQ_PT_FLOAT, "", 2, 16, "gptq", NULL,
     "mixed precision: give each layer's q/k/v, o, gate/up and down the width from --bpw-bits "
     "that measured sensitivity favours, so that the decoder linears as written (codes, scales, "
     "zeros, g_idx) average at most this many bits per weight; written as GPTQModel/vLLM "
     "\"dynamic\" overrides"},
    {"bpw_bits", LQ_PT_STR, "3,4,8", 0, 0, "gptq", NULL,
     "with --target-bpw: the widths to choose from (any of 2, 3, 4, 8)"},
    {"bpw_tokens", LQ_PT_INT, "2048", 1, 1 << 24, "gptq", NULL,
     "with --target-bpw: calibration tokens of the sensitivity pass, whole windows from the "
     "first (each layer's units run through the rest of the model in float)"},
    {"awq_grid", LQ_PT_INT, "20", 1, 1000, "gptq,awq", NULL, "scale-search grid points"},
    {"awq_duo_scaling", LQ_PT_BOOL, "true", 0, 1, "gptq,awq", NULL,
     "AutoAWQ duo scaling (activation and weight statistics)"},
    {"awq_clip", LQ_PT_BOOL, "true", 0, 1, "awq", NULL, "search per-group clipping ranges"},
    {"blocksize", LQ_PT_INT, "64", 32, 4096, "nf4", NULL, "NF4 block size (32, 64, ..., 4096)"},
    {"double_quant", LQ_PT_BOOL, "true", 0, 1, "nf4", NULL,
     "quantize the absmax statistics again (8-bit, blocks of 256)"},
    {"threshold", LQ_PT_FLOAT, "6.0", 0, 1e6, "int8", NULL,
     "LLM.int8 outlier threshold on |activation|"},
    {"moe_calib", LQ_PT_STR, "routed", 0, 0, CAL, "routed|all",
     "mixture of experts: each expert's statistics from the calibration tokens the router sends "
     "it (routed), or from every token (all); the next layer sees the real routing either way"},
    {"moe_min_tokens", LQ_PT_INT, "128", 0, 1 << 30, CAL, NULL,
     "mixture of experts, routed: an expert the router sends fewer calibration tokens than this "
     "gets its statistics from every token instead (listed in the log and the report)"},
    {"moe_batch", LQ_PT_INT, "0", 0, 1 << 20, "gptq", NULL,
     "mixture of experts: experts whose Hessians one true-sequential pass gathers (0: as many "
     "as one layer's float32 weights take in bytes); more passes, less memory, same result"},
    {"calib", LQ_PT_STR, "", 0, 0, CAL, NULL,
     "calibration text (.txt, .jsonl, .jsonl.zst, .txt.zst); default: the built-in corpus "
     "(\"builtin\": prose, code, technical and multilingual text compiled into llmquant)"},
    {"nsamples", LQ_PT_INT, "128", 1, 1 << 20, CAL, NULL, "calibration windows"},
    {"seqlen", LQ_PT_INT, "2048", 2, 1 << 20, CAL, NULL,
     "tokens per calibration window (shortened to the model's context)"},
    {"seed", LQ_PT_INT, "0", 0, 4294967295.0, CAL, NULL, "seed for window sampling"},
    {"max_memory", LQ_PT_SIZE, "", 0, 1e18, "ppl," CAL, NULL,
     "memory budget; activations spill to disk (zstd) above it (ppl: text part and "
     "activations)"},
    {"cache_dir", LQ_PT_STR, "", 0, 0, CAL, NULL,
     "reuse tokenized calibration windows and FP layer inputs across runs (batch cache)"},
    {"job_tag", LQ_PT_STR, "", 0, 0, ALLQ, NULL,
     "opaque tag recorded in llmquant_report.json (batch uses it to recognise finished jobs)"},
    {"tokenizer", LQ_PT_STR, "", 0, 0, "*", NULL,
     "tokenizer file (tokenizer.json, tokenizer.model, llama2.c tok*.bin) if not in MODEL_DIR"},
    {"device", LQ_PT_STR, "auto", 0, 0, "*", "auto|cpu|cuda", "where to compute"},
    {"threads", LQ_PT_INT, "0", 0, 4096, "*", NULL, "CPU threads (0 = all cores)"},
    {"out_dtype", LQ_PT_STR, "float16", 0, 0, ALLQ ",convert", "float16|bfloat16|float32",
     "dtype of scales and unquantized tensors in the output (float32: convert only)"},
    {"max_shard_size", LQ_PT_SIZE, "5G", 1, 1e18, ALLQ ",convert", NULL,
     "output safetensors shard size"},
    {"force", LQ_PT_BOOL, "false", 0, 1, ALLQ ",convert", NULL,
     "replace an existing output directory that llmquant wrote (or an empty one)"},
    {"check_ppl", LQ_PT_STR, "", 0, 0, ALLQ, NULL,
     "after conversion, compare original vs quantized perplexity on this text file"},
    {"max_ppl_increase", LQ_PT_FLOAT, "", 0, 1e9, ALLQ, NULL,
     "with check_ppl: fail (exit code LQ_ERR_PPL_BOUND) if ppl rises more than this percent"},
    {"ctx", LQ_PT_INT, "0", 0, 1 << 24, "ppl,inspect," ALLQ, NULL,
     "perplexity window / inspect context (0 = min(2048, max_position_embeddings))"},
    {"chunks", LQ_PT_INT, "0", 0, 1 << 30, "ppl," ALLQ, NULL,
     "perplexity on the first N windows only (0 = all), like llama-perplexity --chunks"},
    {"protocol", LQ_PT_STR, "gptq", 0, 0, "ppl," ALLQ, "gptq|llamacpp|docs",
     "perplexity protocol: gptq (BOS once, full windows), llamacpp (BOS per chunk, 2nd half) "
     "or docs (BOS + each document, split at --doc-separator)"},
    {"doc_separator", LQ_PT_STR, "<|endoftext|>", 0, 0, "ppl," ALLQ, NULL,
     "document separator for --protocol docs"},
    {"batch", LQ_PT_INT, "1", 1, 1 << 20, "inspect", NULL, "batch size for KV-cache estimates"},
};
#undef Q
#undef CAL
#undef ALLQ

#define N_PARAMS ((int)(sizeof k_params / sizeof k_params[0]))

int lq_param_count(void) {
    return N_PARAMS;
}

const lq_param_info *lq_param_get_info(int i) {
    return (i >= 0 && i < N_PARAMS) ? &k_params[i] : NULL;
}

static int param_index(const char *name) {
    for (int i = 0; i < N_PARAMS; i++)
        if (strcmp(k_params[i].name, name) == 0)
            return i;
    return -1;
}

const lq_param_info *lq_param_find(const char *name) {
    int i = name ? param_index(name) : -1;
    return i < 0 ? NULL : &k_params[i];
}

int lq_param_applies(const lq_param_info *info, const char *command) {
    if (!info || !command || !*command)
        return 0;
    size_t cl = strlen(command);
    for (const char *m = info->methods; m && *m;) {
        const char *comma = strchr(m, ',');
        size_t      ml    = comma ? (size_t)(comma - m) : strlen(m);
        if ((ml == 1 && *m == '*') || (ml == cl && strncmp(m, command, cl) == 0))
            return 1;
        if (!comma)
            break;
        m = comma + 1;
    }
    return 0;
}

struct lq_params {
    char *val[N_PARAMS]; /* NULL = unset (default applies) */
};

lq_params *lq_params_create(void) {
    return calloc(1, sizeof(lq_params));
}

void lq_params_free(lq_params *p) {
    if (!p)
        return;
    for (int i = 0; i < N_PARAMS; i++)
        free(p->val[i]);
    free(p);
}

/* Parses "512", "1.5G", "64MiB" as bytes. */
static int parse_size(const char *s, double *out) {
    char  *end;
    double v = strtod(s, &end);
    if (end == s || !isfinite(v) || v < 0)
        return 0;
    while (*end == ' ')
        end++;
    double mul = 1;
    switch (toupper((unsigned char)*end)) {
    case 0:
        break;
    case 'B':
        if (end[1])
            return 0;
        *out = v;
        return 1;
    case 'K':
        mul = 1024.0;
        break;
    case 'M':
        mul = 1024.0 * 1024;
        break;
    case 'G':
        mul = 1024.0 * 1024 * 1024;
        break;
    case 'T':
        mul = 1024.0 * 1024 * 1024 * 1024;
        break;
    default:
        return 0;
    }
    if (*end) {
        end++;
        if (strcmp(end, "") != 0 && strcasecmp(end, "B") != 0 && strcasecmp(end, "iB") != 0)
            return 0;
    }
    *out = v * mul;
    return 1;
}

static int parse_bool(const char *s, int *out) {
    if (!strcmp(s, "1") || !strcasecmp(s, "true") || !strcasecmp(s, "yes") || !strcasecmp(s, "on"))
        *out = 1;
    else if (!strcmp(s, "0") || !strcasecmp(s, "false") || !strcasecmp(s, "no") ||
             !strcasecmp(s, "off"))
        *out = 0;
    else
        return 0;
    return 1;
}

static int in_choices(const char *choices, const char *v) {
    size_t vl = strlen(v);
    for (const char *c = choices; *c;) {
        const char *bar = strchr(c, '|');
        size_t      cl  = bar ? (size_t)(bar - c) : strlen(c);
        if (cl == vl && strncmp(c, v, vl) == 0)
            return 1;
        if (!bar)
            break;
        c = bar + 1;
    }
    return 0;
}

lq_status lq_params_set(lq_params *p, const char *name, const char *value, lq_err *err) {
    if (!p || !name || !value)
        return lq_fail(err, LQ_ERR_INVALID_ARG, "lq_params_set: NULL argument");
    int i = param_index(name);
    if (i < 0)
        return lq_fail(err, LQ_ERR_INVALID_ARG, "unknown option \"%s\"", name);
    const lq_param_info *pi = &k_params[i];
    double               v  = 0;
    char                *end;
    int                  b;
    switch (pi->type) {
    case LQ_PT_INT:
        errno = 0;
        v     = (double)strtoll(value, &end, 10);
        if (errno || end == value || *end)
            return lq_fail(err, LQ_ERR_INVALID_ARG, "option %s: \"%s\" is not an integer", name,
                           value);
        break;
    case LQ_PT_FLOAT:
        v = strtod(value, &end);
        if (end == value || *end || !isfinite(v))
            return lq_fail(err, LQ_ERR_INVALID_ARG, "option %s: \"%s\" is not a number", name,
                           value);
        break;
    case LQ_PT_BOOL:
        if (!parse_bool(value, &b))
            return lq_fail(err, LQ_ERR_INVALID_ARG, "option %s: \"%s\" is not true/false", name,
                           value);
        break;
    case LQ_PT_SIZE:
        if (!parse_size(value, &v))
            return lq_fail(err, LQ_ERR_INVALID_ARG,
                           "option %s: \"%s\" is not a size (e.g. 512M, 8G)", name, value);
        break;
    default:
        if (pi->choices && !in_choices(pi->choices, value))
            return lq_fail(err, LQ_ERR_INVALID_ARG, "option %s: \"%s\" is not one of %s", name,
                           value, pi->choices);
        break;
    }
    if ((pi->type == LQ_PT_INT || pi->type == LQ_PT_FLOAT || pi->type == LQ_PT_SIZE) &&
        (v < pi->min || v > pi->max))
        return lq_fail(err, LQ_ERR_INVALID_ARG, "option %s: %s is outside [%g, %g]", name, value,
                       pi->min, pi->max);
    char *copy = strdup(value);
    if (!copy)
        return lq_fail(err, LQ_ERR_NOMEM, "out of memory");
    free(p->val[i]);
    p->val[i] = copy;
    return LQ_OK;
}

lq_params *lq_params_dup(const lq_params *p) {
    lq_params *d = lq_params_create();
    for (int i = 0; d && p && i < N_PARAMS; i++)
        if (p->val[i] && !(d->val[i] = strdup(p->val[i]))) {
            lq_params_free(d);
            return NULL;
        }
    return d;
}

const char *lq_params_get(const lq_params *p, const char *name) {
    int i = name ? param_index(name) : -1;
    if (i < 0)
        return NULL;
    if (p && p->val[i])
        return p->val[i];
    return k_params[i].def;
}

int64_t lq_params_i64(const lq_params *p, const char *name) {
    const char *v = lq_params_get(p, name);
    return (v && *v) ? (int64_t)strtoll(v, NULL, 10) : 0;
}

double lq_params_f64(const lq_params *p, const char *name) {
    const char *v = lq_params_get(p, name);
    return (v && *v) ? strtod(v, NULL) : 0.0;
}

int lq_params_bool(const lq_params *p, const char *name) {
    const char *v = lq_params_get(p, name);
    int         b = 0;
    return (v && parse_bool(v, &b)) ? b : 0;
}

int64_t lq_params_size(const lq_params *p, const char *name) {
    const char *v = lq_params_get(p, name);
    double      d = 0;
    return (v && *v && parse_size(v, &d)) ? (int64_t)d : 0;
}

int lq_params_is_set(const lq_params *p, const char *name) {
    int i = name ? param_index(name) : -1;
    return p && i >= 0 && p->val[i] != NULL;
}
