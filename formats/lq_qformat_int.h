/* lq_qformat_int.h -- internal to formats/: what the per-format files (lq_qfmt_*.c) share to
 * state their rules, write and read their tensors and their quantization_config. */
#ifndef LQ_QFORMAT_INT_H
#define LQ_QFORMAT_INT_H

#include "lq_json.h"
#include "lq_qformat.h"

#include <stddef.h>
#include <stdio.h>

/* The rows of the table (lq_qformat.c). */
extern const lq_qformat lq_qfmt_dense, lq_qfmt_gptq, lq_qfmt_awq, lq_qfmt_nf4, lq_qfmt_int8;

/* An array of the descriptor's field `f` (lq_qarray). */
#define LQ_ARRAY(f, suffix_, dt_, ndim_, d0, d1)                                                   \
    ((lq_qarray){.field     = offsetof(lq_qlinear, f),                                             \
                 .suffix    = (suffix_),                                                           \
                 .dtype     = (dt_),                                                               \
                 .dev_dtype = (dt_),                                                               \
                 .ndim      = (ndim_),                                                             \
                 .shape     = {(d0), (d1)}})

/* --- descriptor rules (check functions: `w` the descriptor, `fmt` its format's name) --- */
#define NEED(ptr, what)                                                                            \
    LQ_RETURN_IF(!(ptr), err, LQ_ERR_INVALID_ARG, "%s linear [%lld x %lld]: %s is NULL", fmt,      \
                 (long long)w->n, (long long)w->k, what)
#define RULE(cond, ...)                                                                            \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            char m_[256];                                                                          \
            snprintf(m_, sizeof m_, __VA_ARGS__);                                                  \
            return lq_fail(err, LQ_ERR_INVALID_ARG, "%s linear [%lld x %lld]: %s", fmt,            \
                           (long long)w->n, (long long)w->k, m_);                                  \
        }                                                                                          \
    } while (0)
/* n, k positive and n * k representable */
lq_status lq_qcheck_dims(const lq_qlinear *w, const char *fmt, lq_err *err);

/* --- writing --- */
#define LQ_TNAME_CAP 512
/* "<prefix>.<suffix>" into buf[LQ_TNAME_CAP] */
lq_status lq_tname(char *buf, const char *prefix, const char *suffix, lq_err *err);
lq_status lq_wr_put(lq_st_writer *wr, const char *prefix, const char *suffix, lq_dtype dt, int ndim,
                    int64_t d0, int64_t d1, const void *data, lq_err *err);
/* the model dtype of cfg->torch_dtype (float16 when unknown) */
lq_dtype lq_qconfig_model_dtype(const lq_qconfig *c);

/* --- reading one linear's tensors --- */
typedef struct lq_rd {
    const lq_st *st;
    const char  *prefix;
    lq_qbuf     *out;
    lq_err      *err;
} lq_rd;
extern const int lq_rd_float_dts[]; /* F16, BF16, F32, -1 */
const char      *lq_rd_file(const lq_rd *r, const lq_st_tensor *t);
/* <prefix>.<suffix>; *t = NULL when optional and absent */
lq_status lq_rd_find(const lq_rd *r, const char *suffix, int required, const lq_st_tensor **t);
/* dtype one of dts (-1 terminated); shape checked where d >= 0 (ndim < 0: numel only, in d0) */
lq_status lq_rd_expect(const lq_rd *r, const lq_st_tensor *t, const int *dts, int ndim, int64_t d0,
                       int64_t d1, const char *why);
/* the tensor's data when aligned for its type, else an owned copy */
lq_status lq_rd_view(const lq_rd *r, const lq_st_tensor *t, const void **p);
/* fp16: a view of F16 data or an fp16 copy of BF16/F32 data */
lq_status lq_rd_view_f16(const lq_rd *r, const lq_st_tensor *t, const uint16_t **p);
lq_status lq_rd_bias(const lq_rd *r, int64_t n);
/* t against the layout of what the reader has filled in so far (format, bits, n, k, group...):
 * the array of descriptor field `field`, its shape (numel_only: its element count, for files
 * that store it reshaped) and a dtype of dts */
lq_status lq_rd_expect_layout(const lq_rd *r, const lq_st_tensor *t, size_t field, int numel_only,
                              const int *dts, const char *why);
#define LQ_RD_EXPECT(r, t, f, dts, why)                                                            \
    lq_rd_expect_layout((r), (t), offsetof(lq_qlinear, f), 0, (dts), (why))
#define LQ_RD_EXPECT_NUMEL(r, t, f, dts, why)                                                      \
    lq_rd_expect_layout((r), (t), offsetof(lq_qlinear, f), 1, (dts), (why))
/* the descriptor rules restated as a checkpoint error naming the tensor */
lq_status lq_rd_finish(const lq_rd *r, const char *main_tensor);
/* [n, k] encoded by t against config.json's [n_exp, k_exp] (<= 0: not known) */
lq_status lq_rd_dims(const lq_rd *r, const lq_st_tensor *t, int64_t n, int64_t k, int64_t n_exp,
                     int64_t k_exp);

/* --- quantization_config (lq_qconfig.c) --- */
int lq_qc_add(cJSON *o, const char *key, cJSON *v);
#define ADD(o, key, v)                                                                             \
    do {                                                                                           \
        if (!lq_qc_add((o), (key), (v)))                                                           \
            LQ_FAIL(err, LQ_ERR_NOMEM, "out of memory building quantization_config");              \
    } while (0)
cJSON *lq_qc_str_or_null(const char *s);
/* modules_to_not_convert / llm_int8_skip_modules (null without has_skip) */
cJSON *lq_qc_skip_list(const lq_qconfig *c);
/* a number Python reads back as a float (6.0, not 6) */
cJSON *lq_qc_float(double v);
int    lq_qc_has(const cJSON *o, const char *key); /* present and not null */
int    lq_ieq(const char *a, const char *b);       /* ASCII case-insensitive equality */
/* first present key among synonyms (NULL-terminated), NULL if none */
const char *lq_qc_synonym(const cJSON *o, const char *const *keys);
lq_status   lq_qc_bool(const cJSON *o, const char *key, int *v, const char *label, lq_err *err);
lq_status   lq_qc_parse_skip(const cJSON *o, const char *key, lq_qconfig *c, const char *label,
                             lq_err *err);

/* --- compressed-tensors pack-quantized (lq_qfmt_ct.c): the LQ_CONTAINER_CT side of the
 * writer, the reader, the listing and the quantization_config --- */
#define LQ_CT_QUANT_METHOD "compressed-tensors"
#define LQ_CT_ID           ".weight_packed"
/* a GPTQ or AWQ descriptor as the layer's pack-quantized tensors (c: the checkpoint's config) */
lq_status lq_ct_write_linear(lq_st_writer *wr, const char *prefix, const lq_qlinear *w,
                             const lq_qconfig *c, lq_err *err);
/* into a GPTQ descriptor */
lq_status lq_ct_read_linear(const lq_st *st, const char *prefix, const lq_qconfig *c, int64_t n_exp,
                            int64_t k_exp, lq_qbuf *out, lq_err *err);
/* c: a GPTQ or AWQ config (its "dynamic" rules and skipped modules included) */
lq_status lq_ct_write_config(const lq_qconfig *c, cJSON *qc, lq_err *err);
/* c: defaults filled; becomes format GPTQ, container CT */
lq_status lq_ct_parse_config(const cJSON *qc, const char *label, lq_qconfig *c, lq_err *err);

#endif
