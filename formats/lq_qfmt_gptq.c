/* GPTQ v1 (AutoGPTQ QuantLinear, BaseQuantizeConfig): bits 2, 3, 4, 8, G = ceil(k / group)
 *   <module>.qweight I32 [k*b/32, n]  .qzeros I32 [G, n*b/32] (zero - 1)  .scales F16 [G, n]
 *   .g_idx I32 [k]  [.bias F16 [n]]
 * GPTQModel's checkpoint_format gptq_v2 (zeros without the -1) and "dynamic" per-module
 * overrides are read too. */
#include "lq_qformat_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static lq_status check_gptq(const lq_qlinear *w, lq_err *err) {
    const char *fmt = "gptq";
    LQ_TRY(lq_qcheck_dims(w, fmt, err));
    const int b = w->bits;
    RULE(b == 2 || b == 3 || b == 4 || b == 8, "bits = %d, GPTQ supports 2, 3, 4, 8", b);
    RULE(w->group_size >= 1, "group_size = %lld, must be >= 1 (k for per-channel)",
         (long long)w->group_size);
    if (b == 3) {
        RULE(w->k % 32 == 0, "3-bit GPTQ packs 32 input channels into 3 words: k %% 32 != 0");
        RULE(w->n % 32 == 0, "3-bit GPTQ packs 32 zero points into 3 words: n %% 32 != 0");
    } else {
        RULE(w->k % (32 / b) == 0, "%d-bit GPTQ needs k %% %d == 0", b, 32 / b);
        RULE(w->n % (32 / b) == 0, "%d-bit GPTQ needs n %% %d == 0", b, 32 / b);
    }
    NEED(w->qweight, "qweight");
    NEED(w->qzeros, "qzeros");
    NEED(w->scales, "scales");
    NEED(w->g_idx, "g_idx");
    return LQ_OK;
}

/* GPTQ v1 packs codes along k into 32-bit words (3-bit: 32 values in 3 words) and zeros along
 * n; groups may be ragged (ceil(k / g) rows of scales). */
static int fits_gptq(const lq_qconfig *c, int64_t n, int64_t k, char *why, size_t cap) {
    const int per = c->bits == 3 ? 32 : 32 / (c->bits > 0 ? c->bits : 4);
    if (k % per == 0 && n % per == 0)
        return 1;
    if (why)
        snprintf(why, cap,
                 "%d-bit GPTQ packs %d values per 32-bit word: in_features and "
                 "out_features must be multiples of %d",
                 c->bits, per, per);
    return 0;
}

static lq_status read_gptq(const lq_st *st, const char *prefix, const lq_qconfig *base,
                           int64_t n_exp, int64_t k_exp, lq_qbuf *out, lq_err *err) {
    lq_rd               r = {st, prefix, out, err};
    const lq_st_tensor *qw, *qz, *sc, *gi;
    lq_qconfig          eff; /* the module's own config ("dynamic" overrides applied) */
    int                 excluded;
    LQ_TRY(lq_qconfig_for_module(base, prefix, &eff, &excluded, err));
    const lq_qconfig *c     = &eff;
    const int         b     = c->bits;
    static const int  i32[] = {LQ_DT_I32, -1};
    lq_qlinear       *q     = &out->q;
    LQ_TRY(lq_rd_find(&r, "qweight", 1, &qw));
    LQ_TRY(lq_rd_expect(&r, qw, i32, 2, -1, -1, "GPTQ qweight is I32 [k*bits/32, n]"));
    LQ_RETURN_IF((qw->shape[0] * 32) % b != 0, err, LQ_ERR_QFORMAT,
                 "%s: tensor \"%s\" has %lld rows, not a whole number of %d-bit input channels",
                 lq_rd_file(&r, qw), qw->name, (long long)qw->shape[0], b);
    const int64_t n = qw->shape[1], k = qw->shape[0] * 32 / b;
    LQ_TRY(lq_rd_dims(&r, qw, n, k, n_exp, k_exp));
    const int64_t gs = c->group_size <= 0 || c->group_size > k ? k : c->group_size;
    const int64_t G  = (k + gs - 1) / gs;
    q->format        = LQ_FMT_GPTQ;
    q->bits          = b;
    q->n             = n;
    q->k             = k;
    q->group_size    = gs;
    LQ_TRY(lq_rd_find(&r, "qzeros", 1, &qz));
    LQ_TRY(lq_rd_find(&r, "scales", 1, &sc));
    LQ_TRY(lq_rd_find(&r, "g_idx", 0, &gi));
    LQ_TRY(LQ_RD_EXPECT(&r, sc, scales, lq_rd_float_dts, "expected float [groups, n] scales"));
    LQ_TRY(LQ_RD_EXPECT(&r, qz, qzeros, i32, "expected I32 [groups, n*bits/32] qzeros"));
    LQ_TRY(lq_rd_view(&r, qw, &q->qweight));
    LQ_TRY(lq_rd_view_f16(&r, sc, (const uint16_t **)&q->scales));
    if (!c->gptq_v2) {
        LQ_TRY(lq_rd_view(&r, qz, &q->qzeros));
    } else { /* GPTQModel v2 stores z itself: rewrite as v1 (z - 1) fields */
        int32_t *z = lq_qbuf_alloc(out, (size_t)qz->nbytes);
        LQ_RETURN_IF(!z, err, LQ_ERR_NOMEM, "%s: out of memory", qz->name);
        memcpy(z, qz->data, (size_t)qz->nbytes);
        const int64_t zw = n * b / 32;
        for (int64_t g = 0; g < G; g++)
            for (int64_t i = 0; i < n; i++)
                lq_stream_put(z + g * zw, 1, i, b, lq_stream_get(z + g * zw, 1, i, b) - 1u);
        q->qzeros = z;
    }
    if (gi) {
        LQ_TRY(LQ_RD_EXPECT(&r, gi, g_idx, i32, "expected I32 [in_features] g_idx"));
        LQ_TRY(lq_rd_view(&r, gi, (const void **)&q->g_idx));
        for (int64_t cc = 0; cc < k; cc++) {
            int32_t g;
            memcpy(&g, (const char *)q->g_idx + 4 * cc, 4);
            LQ_RETURN_IF(g < 0 || g >= G, err, LQ_ERR_QFORMAT,
                         "%s: tensor \"%s\"[%lld] = %d outside [0, %lld) groups",
                         lq_rd_file(&r, gi), gi->name, (long long)cc, g, (long long)G);
        }
    } else { /* checkpoints without act-order may omit it */
        /* with act-order the columns are permuted: identity groups would be wrong weights */
        LQ_RETURN_IF(c->desc_act, err, LQ_ERR_QFORMAT,
                     "%s: desc_act is true in quantize_config but \"%s.g_idx\" is missing",
                     lq_rd_file(&r, qw), prefix);
        int32_t *g = lq_qbuf_alloc(out, (size_t)k * 4);
        LQ_RETURN_IF(!g, err, LQ_ERR_NOMEM, "%s: out of memory", qw->name);
        for (int64_t cc = 0; cc < k; cc++)
            g[cc] = (int32_t)(cc / gs);
        q->g_idx = g;
    }
    LQ_TRY(lq_rd_bias(&r, n));
    return lq_rd_finish(&r, "qweight");
}

/* The linears left in float, as one "-:" rule: GPTQModel and vLLM skip a module by a negative
 * "dynamic" match (neither reads modules_in_block_to_quantize, transformers' key, which is
 * written too): without it they look for qweight in every linear and refuse the checkpoint.
 * vLLM matches its fused modules by their own names, so a fused group whose members are all
 * skipped adds that name. */
static lq_status skip_rule(const lq_qconfig *c, char *key, size_t cap, lq_err *err) {
    static const struct {
        const char *fused, *parts[3];
    } k_fused[] = {
        {"self_attn.qkv_proj", {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}},
        {"mlp.gate_up_proj", {"mlp.gate_proj", "mlp.up_proj", NULL}},
    };
    const char *names[LQ_QCFG_MAX_SKIP + 2];
    int         nn = 0;
    for (int i = 0; i < c->n_skip; i++)
        names[nn++] = c->skip[i];
    for (size_t f = 0; f < sizeof k_fused / sizeof k_fused[0]; f++) {
        int all = 1;
        for (int p = 0; p < 3 && k_fused[f].parts[p]; p++) {
            int found = 0;
            for (int i = 0; i < c->n_skip; i++)
                found |= !strcmp(c->skip[i], k_fused[f].parts[p]);
            all &= found;
        }
        if (all)
            names[nn++] = k_fused[f].fused;
    }
    size_t n = (size_t)snprintf(key, cap, "-:.*\\.(");
    for (int i = 0; i < nn; i++) {
        n = lq_qrule_append_name(key, cap, n, i ? "|" : "");
        n = lq_qrule_append_name(key, cap, n, names[i]);
    }
    n = lq_qrule_append_name(key, cap, n, ")$");
    LQ_RETURN_IF(n >= cap, err, LQ_ERR_INTERNAL, "gptq: the skipped modules' rule is too long");
    return LQ_OK;
}

/* AutoGPTQ BaseQuantizeConfig.to_dict (+ checkpoint_format of later AutoGPTQ/GPTQModel). */
static lq_status write_cfg_gptq(const lq_qconfig *c, cJSON *qc, lq_err *err) {
    ADD(qc, "bits", cJSON_CreateNumber(c->bits));
    ADD(qc, "group_size", cJSON_CreateNumber((double)(c->group_size > 0 ? c->group_size : -1)));
    ADD(qc, "damp_percent", cJSON_CreateNumber(c->damp_percent));
    ADD(qc, "desc_act", cJSON_CreateBool(c->desc_act));
    ADD(qc, "static_groups", cJSON_CreateBool(c->static_groups));
    ADD(qc, "sym", cJSON_CreateBool(c->sym));
    ADD(qc, "true_sequential", cJSON_CreateBool(c->true_sequential));
    ADD(qc, "model_name_or_path", lq_qc_str_or_null(c->model_name_or_path));
    ADD(qc, "model_file_base_name", lq_qc_str_or_null(c->model_file_base_name));
    ADD(qc, "quant_method", cJSON_CreateString("gptq"));
    ADD(qc, "checkpoint_format", cJSON_CreateString("gptq"));
    if (c->n_dynamic > 0 || c->n_skip > 0) { /* GPTQModel / vLLM per-module overrides */
        cJSON *dyn = cJSON_CreateObject();
        ADD(qc, "dynamic", dyn);
        if (c->n_skip > 0) {
            char key[4096];
            LQ_TRY(skip_rule(c, key, sizeof key, err));
            ADD(dyn, key, cJSON_CreateObject());
        }
        for (int64_t i = 0; i < c->n_dynamic; i++) {
            const lq_qrule *r = &c->dynamic[i];
            char            key[4096];
            cJSON          *o = cJSON_CreateObject();
            snprintf(key, sizeof key, "%s%s", r->negative ? "-:" : "+:", r->pattern);
            ADD(dyn, key, o);
            if (r->bits > 0)
                ADD(o, "bits", cJSON_CreateNumber(r->bits));
            if (r->group_size != 0)
                ADD(o, "group_size", cJSON_CreateNumber((double)r->group_size));
            if (r->sym >= 0)
                ADD(o, "sym", cJSON_CreateBool(r->sym));
            if (r->desc_act >= 0)
                ADD(o, "desc_act", cJSON_CreateBool(r->desc_act));
        }
    }
    return LQ_OK;
}

/* GPTQModel's "dynamic": {"+:regex": {"bits": 8, ...}, "-:regex": {}, ...}. Keys other than
 * bits / group_size / sym / desc_act (adapters, GPTQModel-only knobs) do not change the stored
 * layout and are ignored. */
static lq_status parse_dynamic(const cJSON *qc, const char *label, lq_qconfig *c, lq_err *err) {
    const cJSON *dyn = cJSON_GetObjectItemCaseSensitive(qc, "dynamic");
    if (!dyn || cJSON_IsNull(dyn))
        return LQ_OK;
    LQ_RETURN_IF(!cJSON_IsObject(dyn), err, LQ_ERR_CONFIG_VALUE,
                 "%s: key \"dynamic\" is not an object", label);
    const cJSON *it;
    cJSON_ArrayForEach(it, dyn) {
        const char *key = it->string ? it->string : "";
        const int   neg = !strncmp(key, "-:", 2), pre = neg || !strncmp(key, "+:", 2);
        char        sub[4200];
        snprintf(sub, sizeof sub, "%s: \"dynamic\" rule \"%.120s\"", label, key);
        LQ_RETURN_IF(!cJSON_IsObject(it), err, LQ_ERR_CONFIG_VALUE, "%s is not an object", sub);
        int64_t bits = 0, gs = 0;
        int     sym = -1, da = -1;
        if (lq_qc_has(it, "bits")) {
            LQ_TRY(lq_json_get_i64(it, "bits", 1, 0, 64, &bits, sub, err));
            LQ_RETURN_IF(bits != 2 && bits != 3 && bits != 4 && bits != 8, err, LQ_ERR_UNSUPPORTED,
                         "%s: \"bits\" = %lld (GPTQ kernels: 2, 3, 4, 8)", sub, (long long)bits);
        }
        if (lq_qc_has(it, "group_size")) {
            LQ_TRY(lq_json_get_i64(it, "group_size", 1, -1, INT32_MAX, &gs, sub, err));
            LQ_RETURN_IF(gs == 0, err, LQ_ERR_CONFIG_VALUE, "%s: \"group_size\" = 0", sub);
        }
        if (lq_qc_has(it, "sym"))
            LQ_TRY(lq_qc_bool(it, "sym", &sym, sub, err));
        if (lq_qc_has(it, "desc_act"))
            LQ_TRY(lq_qc_bool(it, "desc_act", &da, sub, err));
        LQ_TRY(
            lq_qconfig_add_rule(c, key + (pre ? 2 : 0), neg, (int)bits, gs, sym, da, label, err));
    }
    return LQ_OK;
}

static lq_status parse_cfg_gptq(const cJSON *qc, const char *label, lq_qconfig *c, lq_err *err) {
    int64_t bits = 4, gs = 128;
    LQ_TRY(lq_json_get_i64(qc, "bits", 1, 0, 64, &bits, label, err));
    LQ_RETURN_IF(bits != 2 && bits != 3 && bits != 4 && bits != 8, err, LQ_ERR_UNSUPPORTED,
                 "%s: key \"bits\" = %lld (GPTQ kernels: 2, 3, 4, 8)", label, (long long)bits);
    const char *gk = lq_qc_synonym(qc, (const char *const[]){"group_size", "q_group_size", NULL});
    if (gk)
        LQ_TRY(lq_json_get_i64(qc, gk, 1, -1, INT32_MAX, &gs, label, err));
    LQ_RETURN_IF(gs == 0, err, LQ_ERR_CONFIG_VALUE, "%s: key \"%s\" = 0", label, gk);
    c->bits       = (int)bits;
    c->group_size = gs;
    LQ_TRY(lq_qc_bool(qc, "sym", &c->sym, label, err));
    LQ_TRY(lq_qc_bool(qc, "desc_act", &c->desc_act, label, err));
    LQ_TRY(lq_qc_bool(qc, "static_groups", &c->static_groups, label, err));
    LQ_TRY(lq_qc_bool(qc, "true_sequential", &c->true_sequential, label, err));
    if (lq_qc_has(qc, "damp_percent"))
        LQ_TRY(lq_json_get_f64(qc, "damp_percent", 0, &c->damp_percent, label, err));
    if (lq_qc_has(qc, "model_name_or_path"))
        LQ_TRY(lq_json_get_str(qc, "model_name_or_path", 0, c->model_name_or_path,
                               sizeof c->model_name_or_path, label, err));
    if (lq_qc_has(qc, "model_file_base_name"))
        LQ_TRY(lq_json_get_str(qc, "model_file_base_name", 0, c->model_file_base_name,
                               sizeof c->model_file_base_name, label, err));
    int marlin = 0;
    LQ_TRY(lq_qc_bool(qc, "is_marlin_format", &marlin, label, err));
    LQ_RETURN_IF(marlin, err, LQ_ERR_UNSUPPORTED,
                 "%s: key \"is_marlin_format\" = true (Marlin-repacked GPTQ is not supported)",
                 label);
    const char *fk = lq_qc_synonym(qc, (const char *const[]){"checkpoint_format", "format", NULL});
    if (fk) {
        char f[32];
        LQ_TRY(lq_json_get_str(qc, fk, 1, f, sizeof f, label, err));
        if (lq_ieq(f, "gptq_v2"))
            c->gptq_v2 = 1;
        else
            LQ_RETURN_IF(!lq_ieq(f, "gptq"), err, LQ_ERR_UNSUPPORTED,
                         "%s: key \"%s\" = \"%s\" (supported: gptq, gptq_v2)", label, fk, f);
    }
    return parse_dynamic(qc, label, c, err);
}

static int arrays_gptq(const lq_qlinear *w, lq_qarray *a) {
    const int64_t G = lq_gptq_groups(w), b = w->bits;
    a[0] = LQ_ARRAY(qweight, "qweight", LQ_DT_I32, 2, w->k * b / 32, w->n);
    a[1] = LQ_ARRAY(qzeros, "qzeros", LQ_DT_I32, 2, G, w->n * b / 32);
    a[2] = LQ_ARRAY(scales, "scales", LQ_DT_F16, 2, G, w->n);
    a[3] = LQ_ARRAY(g_idx, "g_idx", LQ_DT_I32, 1, w->k, 0);
    return 4;
}

/* ---------------------------------------------------------------------------------------
 * The kernels' layout (lq_qlinear_sort): input channels sorted by group, and 3-bit codes held
 * as 4-bit ones. buf = qweight [k*ob/32, n] | g_idx [k] | perm [k] | qzeros [G, n*ob/32], each
 * 64-byte aligned, ob the width held.
 *
 * Why 3-bit is widened: its fields straddle words, so every kernel decodes it with shuffles and
 * multiplies (AVX2: 7 instructions per 4 channels of 8 columns, against about 1 for 4-bit), and
 * at one row that decode, not the memory, bounds it: 0.92 ms against 0.51 for 4-bit at 4096 x
 * 4096 on one thread (`bench_kernels_cpu -f gptq -m 1 -t 1`, +ix rows). The same codes and zero
 * points in 4 bits are the same matrix bit for bit, for a third more code bytes.
 * --------------------------------------------------------------------------------------- */
static size_t al64(size_t v) {
    return (v + 63) & ~(size_t)63;
}

static int gptq_in_order(const lq_qlinear *w) {
    for (int64_t c = 1; c < w->k; c++)
        if (w->g_idx[c] < w->g_idx[c - 1])
            return 0;
    return 1;
}

static int sorted_bits(const lq_qlinear *w) {
    return w->bits == 3 ? 4 : w->bits;
}

static size_t sort_bytes_gptq(const lq_qlinear *w) {
    const int ob = sorted_bits(w);
    if (ob == w->bits && gptq_in_order(w))
        return 0;
    const size_t zb = ob != w->bits ? al64((size_t)(lq_gptq_groups(w) * (w->n * ob / 32)) * 4) : 0;
    return al64((size_t)(w->k * ob / 32 * w->n) * 4) + 2 * al64((size_t)w->k * 4) + zb;
}

/* qweight rows in order, 3-bit to 4-bit: a column's 32 channels are 96 bits of three word rows,
 * read as two overlapping 64-bit views (channels 0-10 in words 0|1, 11-31 in words 1|2) */
static void widen3(const uint32_t *src, int64_t n, int64_t k, uint32_t *dst) {
    for (int64_t u = 0; u < k / 32; u++)
        for (int64_t i = 0; i < n; i++) {
            const uint64_t w0 = src[3 * u * n + i], w1 = src[(3 * u + 1) * n + i],
                           w2 = src[(3 * u + 2) * n + i];
            const uint64_t a = w0 | w1 << 32, b = w1 | w2 << 32;
            for (int o = 0; o < 4; o++) {
                uint32_t word = 0;
                for (int c = 8 * o; c < 8 * o + 8; c++) {
                    const uint64_t v = c <= 10 ? a >> (3 * c) : b >> (3 * c - 32);
                    word |= (uint32_t)(v & 7u) << (4 * (c % 8));
                }
                dst[(4 * u + o) * n + i] = word;
            }
        }
}

static lq_status sort_gptq(const lq_qlinear *w, void *buf, lq_qlinear *out) {
    const int64_t n = w->n, k = w->k, G = lq_gptq_groups(w);
    const int     b = w->bits, ob = sorted_bits(w), in_order = gptq_in_order(w);
    int32_t      *qw = buf;
    int32_t      *gi = (int32_t *)((char *)buf + al64((size_t)(k * ob / 32 * n) * 4));
    int32_t      *pm = (int32_t *)((char *)gi + al64((size_t)k * 4));
    int32_t      *qz = (int32_t *)((char *)pm + al64((size_t)k * 4));
    *out             = *w;
    if (in_order) { /* only the width changes (sort_bytes_gptq: so only 3-bit gets here) */
        widen3(w->qweight, n, k, (uint32_t *)qw);
    } else {
        /* a stable counting sort by group; g_idx is in [0, G) in any descriptor the readers
         * made, but this one may come from anywhere */
        int64_t *start = calloc((size_t)G + 1, sizeof *start);
        if (!start)
            return LQ_ERR_NOMEM;
        for (int64_t c = 0; c < k; c++) {
            if (w->g_idx[c] < 0 || w->g_idx[c] >= G) {
                free(start);
                return LQ_ERR_INVALID_ARG;
            }
            start[w->g_idx[c] + 1]++;
        }
        for (int64_t g = 0; g < G; g++)
            start[g + 1] += start[g];
        for (int64_t c = 0; c < k; c++) {
            const int64_t p = start[w->g_idx[c]]++;
            pm[p]           = (int32_t)c; /* stored row c goes to position p */
            gi[p]           = w->g_idx[c];
        }
        free(start);
        const int32_t *src = w->qweight;
        memset(qw, 0, (size_t)(k * ob / 32 * n) * 4);
        if (b == 3) { /* values straddle words: one at a time, into 4-bit words */
            for (int64_t p = 0; p < k; p++)
                for (int64_t i = 0; i < n; i++)
                    qw[p / 8 * n + i] |=
                        (int32_t)(lq_stream_get(src + i, n, pm[p], b) << (4 * (p % 8)));
        } else { /* a whole word row of output at a time, along the contiguous columns */
            const int      vpw  = 32 / b;
            const uint32_t mask = (1u << b) - 1u;
            for (int64_t p = 0; p < k; p++) {
                const uint32_t *in  = (const uint32_t *)src + (int64_t)(pm[p] / vpw) * n;
                uint32_t       *o   = (uint32_t *)qw + (p / vpw) * n;
                const unsigned  ish = (unsigned)(pm[p] % vpw * b), osh = (unsigned)(p % vpw * b);
                for (int64_t i = 0; i < n; i++)
                    o[i] |= ((in[i] >> ish) & mask) << osh;
            }
        }
        /* the channel each new row holds: composed with the input's own order */
        for (int64_t p = 0; p < k; p++)
            pm[p] = w->perm ? w->perm[pm[p]] : pm[p];
        out->g_idx = gi;
        out->perm  = pm;
    }
    if (ob != b) { /* the same zero points, stored as v1 does (zero - 1, masked by the put) */
        memset(qz, 0, (size_t)(G * (n * ob / 32)) * 4);
        for (int64_t g = 0; g < G; g++)
            for (int64_t i = 0; i < n; i++)
                lq_stream_put(qz + g * (n * ob / 32), 1, i, ob,
                              (uint32_t)(lq_gptq_zero(w, g, i) - 1));
        out->qzeros = qz;
        out->bits   = ob;
    }
    out->qweight = qw;
    return LQ_OK;
}

static void default_gptq(lq_qconfig *c) {
    c->bits            = 4;
    c->group_size      = 128;
    c->sym             = 1;
    c->true_sequential = 1;
    c->damp_percent    = 0.01;
    snprintf(c->model_file_base_name, sizeof c->model_file_base_name, "model");
}

const lq_qformat lq_qfmt_gptq = {
    .name            = "gptq",
    .desc            = "GPTQ v1 (AutoGPTQ)",
    .bits            = 1u << 2 | 1u << 3 | 1u << 4 | 1u << 8, /* AutoGPTQ, vLLM */
    .quant_method    = "gptq",
    .legacy_keys     = {"bits"},
    .ids             = {".qweight"},
    .sidecar         = "quantize_config.json",
    .block_key       = "modules_in_block_to_quantize",
    .fits            = fits_gptq,
    .check           = check_gptq,
    .arrays          = arrays_gptq,
    .read_tensors    = read_gptq,
    .qconfig_default = default_gptq,
    .write_hf_config = write_cfg_gptq,
    .parse_hf_config = parse_cfg_gptq,
    .sort_bytes      = sort_bytes_gptq,
    .sort            = sort_gptq,
};
