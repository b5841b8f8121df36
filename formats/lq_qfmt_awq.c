/* AutoAWQ GEMM (WQLinear_GEMM, to_transformers_dict): 4-bit, zero points, G = k / group
 *   <module>.qweight I32 [k, n/8]  .qzeros I32 [G, n/8]  .scales F16 [G, n]  [.bias F16 [n]]
 * codes interleaved within each word (lq_awq_get). */
#include "lq_qformat_int.h"

#include <stdio.h>
#include <string.h>

static lq_status check_awq(const lq_qlinear *w, lq_err *err) {
    const char *fmt = "awq";
    LQ_TRY(lq_qcheck_dims(w, fmt, err));
    RULE(w->bits == 4, "bits = %d, AWQ GEMM is 4-bit only", w->bits);
    RULE(w->group_size >= 1 && w->k % w->group_size == 0, "group_size = %lld must divide k",
         (long long)w->group_size);
    RULE(w->n % 8 == 0, "AWQ packs 8 output channels per word: n %% 8 != 0");
    RULE(!w->perm, "perm is set, but AWQ has no input-channel order (only GPTQ sorts them)");
    NEED(w->qweight, "qweight");
    NEED(w->qzeros, "qzeros");
    NEED(w->scales, "scales");
    return LQ_OK;
}

/* AutoAWQ GEMM: whole groups along k, 8 codes per word along n. */
static int fits_awq(const lq_qconfig *c, int64_t n, int64_t k, char *why, size_t cap) {
    const int64_t g = c->group_size;
    if (g > 0 && k % g == 0 && n % 8 == 0)
        return 1;
    if (why) {
        if (g <= 0)
            snprintf(why, cap, "AutoAWQ GEMM needs a group size (not per-channel)");
        else if (k % g)
            snprintf(why, cap, "AutoAWQ GEMM needs in_features a multiple of the group size %lld",
                     (long long)g);
        else
            snprintf(why, cap,
                     "AutoAWQ GEMM packs 8 codes per word: out_features must be a "
                     "multiple of 8");
    }
    return 0;
}

static lq_status read_awq(const lq_st *st, const char *prefix, const lq_qconfig *c, int64_t n_exp,
                          int64_t k_exp, lq_qbuf *out, lq_err *err) {
    lq_rd               r = {st, prefix, out, err};
    const lq_st_tensor *qw, *qz, *sc;
    static const int    i32[] = {LQ_DT_I32, -1};
    lq_qlinear         *q     = &out->q;
    LQ_TRY(lq_rd_find(&r, "qweight", 1, &qw));
    LQ_TRY(lq_rd_expect(&r, qw, i32, 2, -1, -1, "AWQ qweight is I32 [k, n/8]"));
    const int64_t k = qw->shape[0], n = qw->shape[1] * 8;
    LQ_TRY(lq_rd_dims(&r, qw, n, k, n_exp, k_exp));
    const int64_t gs = c->group_size <= 0 ? k : c->group_size;
    LQ_RETURN_IF(k % gs != 0, err, LQ_ERR_QFORMAT,
                 "%s: tensor \"%s\": in_features %lld not a multiple of group_size %lld",
                 lq_rd_file(&r, qw), qw->name, (long long)k, (long long)gs);
    q->format     = LQ_FMT_AWQ;
    q->bits       = 4;
    q->n          = n;
    q->k          = k;
    q->group_size = gs;
    LQ_TRY(lq_rd_find(&r, "qzeros", 1, &qz));
    LQ_TRY(lq_rd_find(&r, "scales", 1, &sc));
    LQ_TRY(LQ_RD_EXPECT(&r, qz, qzeros, i32, "expected I32 [k/group_size, n/8] qzeros"));
    LQ_TRY(
        LQ_RD_EXPECT(&r, sc, scales, lq_rd_float_dts, "expected float [k/group_size, n] scales"));
    LQ_TRY(lq_rd_view(&r, qw, &q->qweight));
    LQ_TRY(lq_rd_view(&r, qz, &q->qzeros));
    LQ_TRY(lq_rd_view_f16(&r, sc, (const uint16_t **)&q->scales));
    LQ_TRY(lq_rd_bias(&r, n));
    return lq_rd_finish(&r, "qweight");
}

/* AutoAWQ AwqConfig.to_transformers_dict. */
static lq_status write_cfg_awq(const lq_qconfig *c, cJSON *qc, lq_err *err) {
    ADD(qc, "quant_method", cJSON_CreateString("awq"));
    ADD(qc, "zero_point", cJSON_CreateBool(1));
    ADD(qc, "group_size", cJSON_CreateNumber((double)c->group_size));
    ADD(qc, "bits", cJSON_CreateNumber(4));
    ADD(qc, "version", cJSON_CreateString("gemm"));
    ADD(qc, "modules_to_not_convert", lq_qc_skip_list(c));
    return LQ_OK;
}

static lq_status parse_cfg_awq(const cJSON *qc, const char *label, lq_qconfig *c, lq_err *err) {
    int64_t     bits = 4, gs = 128;
    const char *bk = lq_qc_synonym(qc, (const char *const[]){"bits", "w_bit", NULL});
    const char *gk = lq_qc_synonym(qc, (const char *const[]){"group_size", "q_group_size", NULL});
    LQ_RETURN_IF(!gk, err, LQ_ERR_CONFIG_MISSING_KEY, "%s: key \"group_size\" is missing", label);
    if (bk)
        LQ_TRY(lq_json_get_i64(qc, bk, 1, 0, 64, &bits, label, err));
    LQ_TRY(lq_json_get_i64(qc, gk, 1, -1, INT32_MAX, &gs, label, err));
    LQ_RETURN_IF(bits != 4, err, LQ_ERR_UNSUPPORTED, "%s: key \"%s\" = %lld (AWQ GEMM is 4-bit)",
                 label, bk, (long long)bits);
    LQ_RETURN_IF(gs == 0, err, LQ_ERR_CONFIG_VALUE, "%s: key \"%s\" = 0", label, gk);
    c->bits       = 4;
    c->group_size = gs;
    c->zero_point = 1;
    LQ_TRY(lq_qc_bool(qc, "zero_point", &c->zero_point, label, err));
    LQ_RETURN_IF(!c->zero_point, err, LQ_ERR_UNSUPPORTED,
                 "%s: key \"zero_point\" = false (AWQ GEMM kernels need zero points)", label);
    const char *vk = lq_qc_synonym(qc, (const char *const[]){"version", "format", NULL});
    if (vk) {
        char v[32];
        LQ_TRY(lq_json_get_str(qc, vk, 1, v, sizeof v, label, err));
        LQ_RETURN_IF(!lq_ieq(v, "gemm"), err, LQ_ERR_UNSUPPORTED,
                     "%s: key \"%s\" = \"%s\" (only the AutoAWQ GEMM layout is supported)", label,
                     vk, v);
    }
    return lq_qc_parse_skip(qc, "modules_to_not_convert", c, label, err);
}

static int arrays_awq(const lq_qlinear *w, lq_qarray *a) {
    const int64_t G = w->k / w->group_size;
    a[0]            = LQ_ARRAY(qweight, "qweight", LQ_DT_I32, 2, w->k, w->n / 8);
    a[1]            = LQ_ARRAY(qzeros, "qzeros", LQ_DT_I32, 2, G, w->n / 8);
    a[2]            = LQ_ARRAY(scales, "scales", LQ_DT_F16, 2, G, w->n);
    return 3;
}

/* ---------------------------------------------------------------------------------------
 * lq_qlinear_sort: the same matrix in GPTQ v1's layout (the fast kernels' layout: a word holds 8
 * input channels of one column), so kernels stop unpacking AWQ's words across channel rows on
 * every call. buf = qweight [k/8, n] | qzeros [G, n/8] (zero - 1) | g_idx [k], 64-byte
 * aligned; the scales ([G, n] in both) stay w's. Exact: v1's decoding ((z - 1 + 1) & 15) gives
 * back every zero in 0..15.
 * --------------------------------------------------------------------------------------- */
static size_t al64(size_t v) {
    return (v + 63) & ~(size_t)63;
}

static size_t sort_bytes_awq(const lq_qlinear *w) {
    const size_t G = (size_t)(w->k / w->group_size);
    if (w->k % 8 || w->group_size % 8) /* GPTQ's words (and its integer kernels' blocks) hold
                                        * whole runs of 8 channels */
        return 0;
    return al64((size_t)(w->k / 8 * w->n) * 4) + al64(G * (size_t)(w->n / 8) * 4) +
           al64((size_t)w->k * 4);
}

/* r[t] = word j of channel rows 8 wr + t; afterwards r[f] = field f of those rows as nibbles
 * 0..7 (an 8 x 8 nibble transpose in three swap stages) */
static void transpose_nibbles(uint32_t r[8]) {
    static const uint32_t mask[3] = {0x0F0F0F0Fu, 0x00FF00FFu, 0x0000FFFFu};
    for (int s = 0, st = 1; st < 8; s++, st *= 2) {
        const unsigned sh = 4u << s;
        for (int t = 0; t < 8; t++) {
            if (t & st)
                continue;
            const uint32_t d = ((r[t] >> sh) ^ r[t + st]) & mask[s];
            r[t + st] ^= d;
            r[t] ^= d << sh;
        }
    }
}

static lq_status sort_awq(const lq_qlinear *w, void *buf, lq_qlinear *out) {
    const int64_t   n = w->n, k = w->k, nw = n / 8, G = k / w->group_size;
    const uint32_t *qw = w->qweight, *qz = w->qzeros;
    uint32_t       *og = buf;
    uint32_t       *zg = (uint32_t *)((char *)buf + al64((size_t)(k / 8 * n) * 4));
    int32_t        *gi = (int32_t *)((char *)zg + al64((size_t)(G * nw) * 4));
    for (int64_t wr = 0; wr < k / 8; wr++)
        for (int64_t j = 0; j < nw; j++) {
            uint32_t r[8];
            for (int t = 0; t < 8; t++)
                r[t] = qw[(8 * wr + t) * nw + j];
            transpose_nibbles(r);
            for (int o = 0; o < 8; o++)
                og[wr * n + 8 * j + o] = r[lq_awq_field_of(o)];
        }
    for (int64_t g = 0; g < G; g++)
        for (int64_t j = 0; j < nw; j++) {
            uint32_t zw = 0;
            for (int o = 0; o < 8; o++)
                zw |= ((lq_awq_get((const int32_t *)qz + g * nw, 8 * j + o) - 1u) & 15u) << (4 * o);
            zg[g * nw + j] = zw;
        }
    for (int64_t c = 0; c < k; c++)
        gi[c] = (int32_t)(c / w->group_size);
    *out         = *w;
    out->format  = LQ_FMT_GPTQ;
    out->qweight = og;
    out->qzeros  = zg;
    out->g_idx   = gi;
    return LQ_OK;
}

static void default_awq(lq_qconfig *c) {
    c->bits       = 4;
    c->group_size = 128;
    c->zero_point = 1;
}

const lq_qformat lq_qfmt_awq = {
    .name            = "awq",
    .desc            = "AutoAWQ GEMM",
    .bits            = 1u << 4,
    .quant_method    = "awq",
    .legacy_keys     = {"w_bit", "version", "zero_point"},
    .ids             = {".qweight"},
    .fits            = fits_awq,
    .check           = check_awq,
    .arrays          = arrays_awq,
    .read_tensors    = read_awq,
    .qconfig_default = default_awq,
    .write_hf_config = write_cfg_awq,
    .parse_hf_config = parse_cfg_awq,
    .sort_bytes      = sort_bytes_awq,
    .sort            = sort_awq,
};
