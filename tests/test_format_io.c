/* test_format_io -- quantized linears through safetensors and quantization_config and back.
 *
 *  - every format variant: pack -> lq_qlinear_write -> safetensors file -> lq_qlinear_read:
 *    exact tensor names/dtypes/shapes of the reference tools, dequant bit-identical, views vs
 *    copies (the same file re-opened from a misaligned buffer)
 *  - whole checkpoint directories through the public loader lq_checkpoint_*
 *  - quantization_config: exact keys/values of the reference tools, GPTQ quantize_config.json,
 *    synonyms, and LQ_ERR_UNSUPPORTED naming the key for what we cannot run
 *  - broken checkpoints: LQ_ERR_QFORMAT / LQ_ERR_ST_MISSING_TENSOR naming file and tensor
 *
 * For tests/py/test_format_compat.py: `test_format_io --dump DIR` writes one checkpoint per
 * variant plus ref.safetensors (our dequant_ref W, activations x and gemm_ref y);
 * `test_format_io --read CKPT OUTDIR` loads a checkpoint the reference tools wrote and saves
 * our dequantization of each linear. */
#include "lq_qformat.h"
#include "lq_json.h"
#include "lq_test.h"
#include "lq_test_qlinear.h"

#include <errno.h>
#include <sys/stat.h>

static const char *k_prefix = "model.layers.0.mlp.down_proj";

typedef struct iocase {
    kcase       kc;
    const char *tensors; /* expected "<suffix>:<dtype>:<shape>" entries, ";"-separated */
} iocase;

static const iocase k_io[] = {
    {{"gptq4_g32_bias", LQ_FMT_GPTQ, 4, 64, 128, 32, 0, 0, 0, 0, 1, 0},
     "bias:F16:[64];g_idx:I32:[128];qweight:I32:[16,64];qzeros:I32:[4,8];scales:F16:[4,64]"},
    {{"gptq4_actorder", LQ_FMT_GPTQ, 4, 64, 256, 64, 1, 0, 0, 0, 0, 0},
     "g_idx:I32:[256];qweight:I32:[32,64];qzeros:I32:[4,8];scales:F16:[4,64]"},
    {{"gptq3_g64", LQ_FMT_GPTQ, 3, 64, 128, 64, 0, 0, 0, 0, 0, 0},
     "g_idx:I32:[128];qweight:I32:[12,64];qzeros:I32:[2,6];scales:F16:[2,64]"},
    {{"gptq2_g32", LQ_FMT_GPTQ, 2, 32, 128, 32, 0, 0, 0, 0, 0, 0},
     "g_idx:I32:[128];qweight:I32:[8,32];qzeros:I32:[4,2];scales:F16:[4,32]"},
    {{"gptq8_perchannel", LQ_FMT_GPTQ, 8, 32, 96, -1, 0, 0, 0, 0, 0, 0},
     "g_idx:I32:[96];qweight:I32:[24,32];qzeros:I32:[1,8];scales:F16:[1,32]"},
    {{"awq_g64_bias", LQ_FMT_AWQ, 4, 64, 128, 64, 0, 0, 0, 0, 1, 0},
     "bias:F16:[64];qweight:I32:[128,8];qzeros:I32:[2,8];scales:F16:[2,64]"},
    {{"nf4_b64", LQ_FMT_NF4, 4, 48, 128, 64, 0, 0, 0, 0, 0, 0},
     "weight:U8:[3072,1];weight.absmax:F32:[96];weight.quant_map:F32:[16];"
     "weight.quant_state.bitsandbytes__nf4:U8:*"},
    {{"nf4_b64_dq_bias", LQ_FMT_NF4, 4, 160, 256, 64, 0, 1, 0, 0, 1, 0},
     "bias:F16:[160];weight:U8:[20480,1];weight.absmax:U8:[640];weight.nested_absmax:F32:[3];"
     "weight.nested_quant_map:F32:[256];weight.quant_map:F32:[16];"
     "weight.quant_state.bitsandbytes__nf4:U8:*"},
    {{"int8_outliers_bias", LQ_FMT_INT8, 8, 48, 128, 0, 0, 0, 4, 0, 1, 0},
     "SCB:F32:[48];bias:F16:[48];outlier_idx:I32:[4];outlier_weight:F16:[48,4];"
     "weight:I8:[48,128];weight_format:U8:[]"},
    {{"int8_plain", LQ_FMT_INT8, 8, 32, 64, 0, 0, 0, 0, 0, 0, 0},
     "SCB:F32:[32];weight:I8:[32,64];weight_format:U8:[]"},
    {{"dense_bias", LQ_FMT_DENSE, 0, 32, 64, 0, 0, 0, 0, 0, 1, 0},
     "bias:F16:[32];weight:F16:[32,64]"},
    /* an fp16 descriptor is written as it is (the model dtype) */
    {{"dense_f16_bias", LQ_FMT_DENSE, 0, 32, 64, 0, 0, 0, 0, 0, 1, LQ_DENSE_F16},
     "bias:F16:[32];weight:F16:[32,64]"},
};
#define NIO ((int)(sizeof k_io / sizeof k_io[0]))

static void mkdirs(const char *p) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", p);
    for (char *s = buf + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            mkdir(buf, 0755);
            *s = '/';
        }
    mkdir(buf, 0755);
}

static const char *tmp_root(void) {
    const char *t = getenv("LQ_TMP");
    return t && *t ? t : "/tmp/lq_test_format_io";
}

static lq_qconfig cfg_for(const kcase *c) {
    lq_qconfig q;
    lq_qconfig_default(c->fmt, &q);
    if (c->fmt == LQ_FMT_GPTQ) {
        q.bits       = c->bits;
        q.group_size = c->gs;
        q.desc_act   = c->act_order;
    } else if (c->fmt == LQ_FMT_AWQ || c->fmt == LQ_FMT_NF4) {
        q.group_size   = c->gs;
        q.double_quant = c->dq;
    } else if (c->fmt == LQ_FMT_INT8) {
        q.int8_threshold = 6.0;
    }
    return q;
}

/* "[a,b]" of a tensor */
static void shape_of(const lq_st_tensor *t, char *buf, size_t cap) {
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < t->ndim; d++)
        o += (size_t)snprintf(buf + o, cap - o, d ? ",%lld" : "%lld", (long long)t->shape[d]);
    snprintf(buf + o, cap - o, "]");
}

/* Tensors named <prefix>.* in st equal the expected list exactly. */
static void check_tensor_set(const lq_st *st, const char *prefix, const char *expect,
                             const char *label) {
    char list[2048] = "";
    int  first      = 1;
    /* sorted by name: lq_st keeps file order, so collect and sort */
    const char *names[32];
    int64_t     cnt = 0;
    for (int64_t i = 0; i < lq_st_count(st) && cnt < 32; i++) {
        const lq_st_tensor *t = lq_st_get(st, i);
        if (!strncmp(t->name, prefix, strlen(prefix)) && t->name[strlen(prefix)] == '.')
            names[cnt++] = t->name;
    }
    for (int64_t i = 0; i < cnt; i++)
        for (int64_t j = i + 1; j < cnt; j++)
            if (strcmp(names[j], names[i]) < 0) {
                const char *s = names[i];
                names[i]      = names[j];
                names[j]      = s;
            }
    for (int64_t i = 0; i < cnt; i++) {
        const lq_st_tensor *t = lq_st_find(st, names[i]);
        char                sh[64];
        shape_of(t, sh, sizeof sh);
        const int star = strstr(expect, names[i] + strlen(prefix) + 1) != NULL &&
                         strstr(names[i], "quant_state") != NULL;
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s:%s:%s", first ? "" : ";",
                 names[i] + strlen(prefix) + 1, lq_dtype_name(t->dtype), star ? "*" : sh);
        first = 0;
    }
    CHECK_MSG(!strcmp(list, expect), "%s: tensors\n  got      %s\n  expected %s", label, list,
              expect);
}

static int write_linear_file(const char *dir, const lq_qlinear *w, const lq_qconfig *c,
                             lq_err *err) {
    lq_st_writer *wr;
    mkdirs(dir);
    lq_status st = lq_st_writer_create(dir, 0, &wr, err);
    if (st == LQ_OK)
        st = lq_qlinear_write(wr, k_prefix, w, c, err);
    if (st == LQ_OK)
        st = lq_st_writer_finish(wr, err);
    lq_st_writer_free(wr);
    return st;
}

static void same_dequant(const lq_qlinear *a, const lq_qlinear *b, const char *label) {
    CHECK_EQ_INT(a->format, b->format);
    CHECK_EQ_INT(a->n, b->n);
    CHECK_EQ_INT(a->k, b->k);
    if (a->n != b->n || a->k != b->k)
        return;
    const lq_format_traits *t = lq_format_traits_get((lq_format)a->format);
    float *wa = malloc((size_t)(a->n * a->k) * 4), *wb = malloc((size_t)(a->n * a->k) * 4);
    t->dequant_ref(a, wa);
    t->dequant_ref(b, wb);
    CHECK_MSG(!memcmp(wa, wb, (size_t)(a->n * a->k) * 4), "%s: dequant differs after round trip",
              label);
    CHECK_MSG(!a->bias == !b->bias, "%s: bias presence", label);
    if (a->bias && b->bias)
        CHECK_MSG(!memcmp(a->bias, b->bias, (size_t)a->n * 2), "%s: bias differs", label);
    /* the forward too (INT8 also depends on threshold and the outlier columns) */
    const int64_t m = 3;
    float        *x = malloc((size_t)(m * a->k) * 4), *ya = malloc((size_t)(m * a->n) * 4),
          *yb = malloc((size_t)(m * a->n) * 4);
    lq_rng r;
    lq_rng_seed(&r, 11);
    for (int64_t e = 0; e < m * a->k; e++)
        x[e] = 3.f * lq_rng_normal(&r);
    t->gemm_ref(a, x, m, ya);
    t->gemm_ref(b, x, m, yb);
    CHECK_MSG(!memcmp(ya, yb, (size_t)(m * a->n) * 4), "%s: forward differs after round trip",
              label);
    free(x);
    free(ya);
    free(yb);
    free(wa);
    free(wb);
}

static void test_roundtrip(void) {
    for (int ci = 0; ci < NIO; ci++) {
        const kcase *c = &k_io[ci].kc;
        lq_qbuf      qb, rb, mb;
        float       *dense;
        lq_err       err = {0};
        if (build(c, c->n, c->k, 0, 300 + (uint64_t)ci, &qb, &dense) != LQ_OK) {
            CHECK_MSG(0, "%s: build", c->name);
            continue;
        }
        lq_qconfig q   = cfg_for(c);
        qb.q.threshold = c->fmt == LQ_FMT_INT8 ? (float)q.int8_threshold : 0.f;
        for (int64_t e = 0; dense && e < c->n * c->k; e++) /* stored as the fp16 model dtype */
            dense[e] = lq_round_f16(dense[e]);
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/roundtrip/%s", tmp_root(), c->name);
        CHECK_MSG(write_linear_file(dir, &qb.q, &q, &err) == LQ_OK, "%s: write: %s", c->name,
                  err.msg);
        lq_st *st = NULL;
        CHECK_MSG(lq_st_open_dir(dir, &st, &err) == LQ_OK, "%s: open: %s", c->name, err.msg);
        if (!st)
            continue;
        check_tensor_set(st, k_prefix, k_io[ci].tensors, c->name);
        CHECK_MSG(lq_qlinear_read(st, k_prefix, &q, c->n, c->k, &rb, &err) == LQ_OK, "%s: read: %s",
                  c->name, err.msg);
        same_dequant(&qb.q, &rb.q, c->name);
        /* aligned file: arrays are views into the mapping, not copies */
        const lq_st_tensor *main_t = lq_st_find(st, c->fmt == LQ_FMT_GPTQ || c->fmt == LQ_FMT_AWQ
                                                        ? "model.layers.0.mlp.down_proj.qweight"
                                                        : "model.layers.0.mlp.down_proj.weight");
        if (c->fmt != LQ_FMT_DENSE)
            CHECK_MSG(main_t && rb.q.qweight == main_t->data, "%s: qweight is not a view", c->name);
        else /* written in the fp16 model dtype: read as stored, in place */
            CHECK_MSG(main_t && rb.q.dense == main_t->data && rb.q.dense_dtype == LQ_DENSE_F16,
                      "%s: dense weights not an fp16 view (dense_dtype %d)", c->name,
                      (int)rb.q.dense_dtype);
        if (c->fmt == LQ_FMT_NF4) { /* quant_state is json.dumps of the non-tensor state */
            const lq_st_tensor *js =
                lq_st_find(st, "model.layers.0.mlp.down_proj.weight.quant_state.bitsandbytes__nf4");
            char expect[512], off[64] = "";
            if (c->dq) {
                /* nested_offset printed as Python's repr of the float32 value */
                for (int p = 1; p <= 17; p++) {
                    snprintf(off, sizeof off, "%.*g", p, (double)qb.q.nested_offset);
                    if (strtod(off, NULL) == (double)qb.q.nested_offset)
                        break;
                }
            }
            snprintf(expect, sizeof expect,
                     "{\"quant_type\": \"nf4\", \"blocksize\": %lld, \"dtype\": \"float16\", "
                     "\"shape\": [%lld, %lld]%s%s%s}",
                     (long long)c->gs, (long long)c->n, (long long)c->k,
                     c->dq ? ", \"nested_blocksize\": 256, \"nested_dtype\": \"float32\", "
                             "\"nested_offset\": "
                           : "",
                     off, "");
            CHECK_MSG(js && js->nbytes == (int64_t)strlen(expect) &&
                          !memcmp(js->data, expect, strlen(expect)),
                      "%s: quant_state json, expected %s", c->name, expect);
        }
        /* the same bytes from a misaligned buffer: every array must come back as a copy */
        {
            char path[4200];
            snprintf(path, sizeof path, "%s/model.safetensors", dir);
            char   *data = NULL;
            int64_t len  = 0;
            CHECK_OK(lq_read_file(path, 1 << 26, &data, &len, &err));
            char *buf = malloc((size_t)len + 1);
            memcpy(buf + 1, data, (size_t)len);
            lq_st *ms = NULL;
            CHECK_OK(lq_st_open_memory(buf + 1, (size_t)len, "misaligned", &ms, &err));
            if (ms) {
                CHECK_MSG(lq_qlinear_read(ms, k_prefix, &q, 0, 0, &mb, &err) == LQ_OK,
                          "%s: read misaligned: %s", c->name, err.msg);
                /* multi-byte arrays (I8/U8 ones are always aligned) */
                const void *probe = c->fmt == LQ_FMT_INT8    ? (const void *)mb.q.scb
                                    : c->fmt == LQ_FMT_NF4   ? (const void *)mb.q.quant_map
                                    : c->fmt == LQ_FMT_DENSE ? mb.q.dense
                                                             : mb.q.qweight;
                CHECK_MSG((const char *)probe < buf || (const char *)probe >= buf + len + 1,
                          "%s: misaligned array used in place", c->name);
                same_dequant(&qb.q, &mb.q, c->name);
                lq_qbuf_free(&mb);
                lq_st_close(ms);
            }
            free(buf);
            free(data);
        }
        /* expected dims from config.json must match */
        lq_qbuf bad;
        CHECK_EQ_INT(lq_qlinear_read(st, k_prefix, &q, c->n + 8, c->k, &bad, &err), LQ_ERR_QFORMAT);
        CHECK_MSG(strstr(err.msg, "config.json expects") != NULL, "%s: %s", c->name, err.msg);
        lq_qbuf_free(&rb);
        lq_st_close(st);
        lq_qconfig_free(&q);
        free(dense);
        lq_qbuf_free(&qb);
    }
}

/* ---------------------------------------------------------------------------------------- */
static char *qc_text(const lq_qconfig *c) {
    cJSON *o   = NULL;
    lq_err err = {0};
    if (lq_qconfig_to_json(c, &o, &err) != LQ_OK)
        return NULL;
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

static lq_status parse_text(const char *js, lq_qconfig *c, lq_err *err) {
    cJSON *o = cJSON_Parse(js);
    if (!o)
        return LQ_ERR_JSON;
    lq_status st = lq_qconfig_parse_qc(o, "config.json", c, err);
    cJSON_Delete(o);
    return st;
}

static void test_config(void) {
    lq_qconfig c;
    lq_err     err = {0};
    char      *s;
    /* exact objects of the reference tools */
    lq_qconfig_default(LQ_FMT_AWQ, &c);
    s = qc_text(&c);
    CHECK_MSG(s && !strcmp(s, "{\"quant_method\":\"awq\",\"zero_point\":true,\"group_size\":128,"
                              "\"bits\":4,\"version\":\"gemm\",\"modules_to_not_convert\":null}"),
              "awq config: %s", s);
    free(s);
    lq_qconfig_default(LQ_FMT_GPTQ, &c);
    c.desc_act = 1;
    s          = qc_text(&c);
    CHECK_MSG(s && !strcmp(s, "{\"bits\":4,\"group_size\":128,\"damp_percent\":0.01,"
                              "\"desc_act\":true,\"static_groups\":false,\"sym\":true,"
                              "\"true_sequential\":true,\"model_name_or_path\":null,"
                              "\"model_file_base_name\":\"model\",\"quant_method\":\"gptq\","
                              "\"checkpoint_format\":\"gptq\"}"),
              "gptq config: %s", s);
    free(s);
    lq_qconfig_default(LQ_FMT_NF4, &c);
    c.double_quant = 1;
    snprintf(c.compute_dtype, sizeof c.compute_dtype, "float16");
    s = qc_text(&c);
    /* transformers BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
     * bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype="float16").to_dict() */
    CHECK_MSG(s && !strcmp(s, "{\"quant_method\":\"bitsandbytes\",\"_load_in_8bit\":false,"
                              "\"_load_in_4bit\":true,\"llm_int8_threshold\":6.0,"
                              "\"llm_int8_skip_modules\":null,"
                              "\"llm_int8_enable_fp32_cpu_offload\":false,"
                              "\"llm_int8_has_fp16_weight\":false,\"bnb_4bit_quant_type\":\"nf4\","
                              "\"bnb_4bit_use_double_quant\":true,"
                              "\"bnb_4bit_compute_dtype\":\"float16\","
                              "\"bnb_4bit_quant_storage\":\"uint8\",\"load_in_4bit\":true,"
                              "\"load_in_8bit\":false}"),
              "nf4 config: %s", s);
    free(s);
    lq_qconfig_default(LQ_FMT_INT8, &c);
    CHECK_OK(lq_qconfig_add_outlier_module(&c, "model.layers.1.mlp.down_proj", &err));
    s = qc_text(&c);
    CHECK_MSG(s && strstr(s, "\"_load_in_8bit\":true") && strstr(s, "\"load_in_8bit\":true") &&
                  strstr(s, "\"bnb_4bit_quant_type\":\"fp4\"") &&
                  strstr(s, "\"llmquant_int8_outlier_modules\":[\"model.layers.1.mlp.down_proj\"]"),
              "int8 config: %s", s);
    /* and it parses back */
    lq_qconfig back;
    CHECK_OK(parse_text(s, &back, &err));
    CHECK_EQ_INT(back.format, LQ_FMT_INT8);
    CHECK_EQ_INT(back.n_outlier_modules, 1);
    CHECK_NEAR(back.int8_threshold, 6.0, 0);
    lq_qconfig_free(&back);
    lq_qconfig_free(&c);
    free(s);

    /* synonyms and old files without quant_method */
    CHECK_OK(parse_text(
        "{\"w_bit\":4,\"q_group_size\":64,\"zero_point\":true,\"version\":\"GEMM\"}", &c, &err));
    CHECK_EQ_INT(c.format, LQ_FMT_AWQ);
    CHECK_EQ_INT(c.group_size, 64);
    CHECK_OK(
        parse_text("{\"bits\":3,\"group_size\":-1,\"desc_act\":true,\"sym\":false}", &c, &err));
    CHECK_EQ_INT(c.format, LQ_FMT_GPTQ);
    CHECK_EQ_INT(c.bits, 3);
    CHECK_EQ_INT(c.group_size, -1);
    CHECK_EQ_INT(c.desc_act, 1);
    CHECK_EQ_INT(c.sym, 0);
    CHECK_OK(parse_text("{\"quant_method\":\"gptq\",\"bits\":4,\"group_size\":128,"
                        "\"format\":\"gptq_v2\"}",
                        &c, &err));
    CHECK_EQ_INT(c.gptq_v2, 1);
    CHECK_OK(parse_text("{\"quant_method\":\"bitsandbytes\",\"load_in_4bit\":true,"
                        "\"bnb_4bit_quant_type\":\"nf4\",\"llm_int8_skip_modules\":[\"lm_head\"]}",
                        &c, &err));
    CHECK_EQ_INT(c.format, LQ_FMT_NF4);
    CHECK_EQ_INT(c.n_skip, 1);
    CHECK(!strcmp(c.skip[0], "lm_head"));

    lq_qconfig_free(&c);

    /* GPTQModel / vLLM "dynamic" per-module overrides: written in order, parsed back, resolved
     * as Python re.match (anchored at the start, first rule wins, "-:" excludes) */
    lq_qconfig_default(LQ_FMT_GPTQ, &c);
    CHECK_OK(lq_qconfig_add_rule(&c, "model\\.layers\\.(0|2)\\.mlp\\.down_proj$", 0, 8, 0, -1,
                                 -1, "t", &err));
    CHECK_OK(lq_qconfig_add_rule(&c, "model\\.layers\\.[0-9]+\\.mlp\\.", 0, 3, 32, 0, 1, "t",
                                 &err));
    CHECK_OK(lq_qconfig_add_rule(&c, ".*lm_head", 1, 0, 0, -1, -1, "t", &err));
    s = qc_text(&c);
    CHECK_MSG(s && strstr(s, "\"dynamic\":{\"+:model\\\\.layers\\\\.(0|2)\\\\.mlp\\\\.down_proj$\":"
                             "{\"bits\":8},\"+:model\\\\.layers\\\\.[0-9]+\\\\.mlp\\\\.\":{\"bits\":3,"
                             "\"group_size\":32,\"sym\":false,\"desc_act\":true},"
                             "\"-:.*lm_head\":{}}"),
              "dynamic: %s", s);
    lq_qconfig_free(&c);
    CHECK_OK(parse_text(s, &c, &err));
    free(s);
    CHECK_EQ_INT(c.n_dynamic, 3);
    struct {
        const char *module;
        int         bits, gs, sym, desc_act, excluded;
    } res[] = {
        {"model.layers.2.mlp.down_proj", 8, 128, 1, 0, 0},
        {"model.layers.12.mlp.down_proj", 3, 32, 0, 1, 0}, /* "$" after (0|2) fails on 12 */
        {"model.layers.1.mlp.gate_proj", 3, 32, 0, 1, 0},
        {"model.layers.1.self_attn.q_proj", 4, 128, 1, 0, 0},
        {"xmodel.layers.1.mlp.up_proj", 4, 128, 1, 0, 0}, /* anchored: no search */
        {"lm_head", 4, 128, 1, 0, 1},
    };
    for (size_t i = 0; i < sizeof res / sizeof res[0]; i++) {
        lq_qconfig e;
        int        ex = -1;
        CHECK_OK(lq_qconfig_for_module(&c, res[i].module, &e, &ex, &err));
        CHECK_MSG(e.bits == res[i].bits && e.group_size == res[i].gs && e.sym == res[i].sym &&
                      e.desc_act == res[i].desc_act && ex == res[i].excluded && !e.dynamic,
                  "%s: bits %d gs %lld sym %d desc_act %d excluded %d", res[i].module, e.bits,
                  (long long)e.group_size, e.sym, e.desc_act, ex);
    }
    lq_qconfig_free(&c);
    CHECK_EQ_INT(c.n_dynamic, 0);

    /* what we cannot run: LQ_ERR_UNSUPPORTED naming the key */
    struct {
        const char *js, *key;
        int         code;
    } bad[] = {
        {"{\"quant_method\":\"awq\",\"bits\":4,\"group_size\":128,\"version\":\"gemv\"}", "version",
         LQ_ERR_UNSUPPORTED},
        {"{\"quant_method\":\"gptq\",\"bits\":4,\"group_size\":128,\"checkpoint_format\":"
         "\"marlin\"}",
         "checkpoint_format", LQ_ERR_UNSUPPORTED},
        {"{\"quant_method\":\"gptq\",\"bits\":4,\"group_size\":128,\"is_marlin_format\":true}",
         "is_marlin_format", LQ_ERR_UNSUPPORTED},
        {"{\"quant_method\":\"gptq\",\"bits\":5,\"group_size\":128}", "bits", LQ_ERR_UNSUPPORTED},
        {"{\"quant_method\":\"awq\",\"w_bit\":8,\"q_group_size\":128}", "w_bit",
         LQ_ERR_UNSUPPORTED},
        {"{\"quant_method\":\"awq\",\"bits\":4,\"group_size\":128,\"zero_point\":false}",
         "zero_point", LQ_ERR_UNSUPPORTED},
        {"{\"quant_method\":\"bitsandbytes\",\"load_in_4bit\":true,"
         "\"bnb_4bit_quant_storage\":\"bfloat16\"}",
         "bnb_4bit_quant_storage", LQ_ERR_UNSUPPORTED},
        {"{\"quant_method\":\"bitsandbytes\",\"load_in_8bit\":true,"
         "\"llm_int8_has_fp16_weight\":true}",
         "llm_int8_has_fp16_weight", LQ_ERR_UNSUPPORTED},
        {"{\"quant_method\":\"fp8\"}", "quant_method", LQ_ERR_UNSUPPORTED},
        {"{\"quant_method\":\"bitsandbytes\",\"load_in_4bit\":true,\"load_in_8bit\":true}",
         "load_in_4bit", LQ_ERR_CONFIG_VALUE},
        {"{\"quant_method\":\"gptq\",\"bits\":\"4\"}", "bits", LQ_ERR_CONFIG_VALUE},
        {"{\"quant_method\":\"awq\",\"bits\":4}", "group_size", LQ_ERR_CONFIG_MISSING_KEY},
        {"{\"quant_method\":\"gptq\",\"bits\":4,\"group_size\":128,\"dynamic\":[1]}", "dynamic",
         LQ_ERR_CONFIG_VALUE},
        {"{\"quant_method\":\"gptq\",\"bits\":4,\"group_size\":128,\"dynamic\":"
         "{\"+:a\":{\"bits\":8},\"+:model\\\\.layers\\\\.(0\":{\"bits\":8}}}",
         "missing closing parenthesis", LQ_ERR_CONFIG_VALUE},
        {"{\"quant_method\":\"gptq\",\"bits\":4,\"group_size\":128,\"dynamic\":"
         "{\"+:a\":{\"bits\":5}}}",
         "bits", LQ_ERR_UNSUPPORTED},
        {"{\"quant_method\":\"gptq\",\"bits\":4,\"group_size\":128,\"dynamic\":"
         "{\"+:a\":{\"group_size\":0}}}",
         "group_size", LQ_ERR_CONFIG_VALUE},
        {"{\"quant_method\":\"gptq\",\"bits\":4,\"group_size\":128,\"dynamic\":"
         "{\"+:a\":{\"sym\":\"no\"}}}",
         "sym", LQ_ERR_CONFIG_VALUE},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&err, 0, sizeof err);
        const lq_status st = parse_text(bad[i].js, &c, &err);
        CHECK_MSG((int)st == bad[i].code && strstr(err.msg, bad[i].key) &&
                      strstr(err.msg, "config.json"),
                  "%s -> %s \"%s\"", bad[i].js, lq_status_name(st), err.msg);
    }

    /* config.json root: no quantization_config = dense; torch_dtype / dtype carried */
    cJSON *root = cJSON_Parse("{\"model_type\":\"llama\",\"torch_dtype\":\"bfloat16\"}");
    CHECK_OK(lq_qconfig_parse(root, "config.json", &c, &err));
    CHECK_EQ_INT(c.format, LQ_FMT_DENSE);
    CHECK(!strcmp(c.torch_dtype, "bfloat16"));
    /* apply: sets quantization_config and writes quantize_config.json for GPTQ */
    lq_qconfig g;
    lq_qconfig_default(LQ_FMT_GPTQ, &g);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/apply", tmp_root());
    mkdirs(dir);
    CHECK_OK(lq_qconfig_apply(&g, root, dir, &err));
    const cJSON *qc = cJSON_GetObjectItemCaseSensitive(root, "quantization_config");
    CHECK(qc && cJSON_IsObject(qc));
    char path[4200];
    snprintf(path, sizeof path, "%s/quantize_config.json", dir);
    cJSON *qcf = NULL;
    CHECK_OK(lq_json_load_file(path, 1 << 20, &qcf, &err));
    CHECK_MSG(qcf && cJSON_Compare(qc, qcf, 1), "quantize_config.json != quantization_config");
    CHECK_OK(lq_qconfig_parse(root, "config.json", &c, &err));
    CHECK_EQ_INT(c.format, LQ_FMT_GPTQ);
    CHECK(!strcmp(c.torch_dtype, "bfloat16"));
    cJSON_Delete(qcf);
    cJSON_Delete(root);
}

/* ---------------------------------------------------------------------------------------- */
/* Whole directories through the public loader. */
/* ct: in compressed-tensors' pack-quantized layout (GPTQ / AWQ cases; asymmetric) */
static void write_checkpoint(const char *dir, const kcase *c, uint64_t seed, int nlin, int ct,
                             lq_qbuf *bufs, lq_qconfig *q) {
    lq_err        err = {0};
    lq_st_writer *wr  = NULL;
    mkdirs(dir);
    *q = cfg_for(c);
    if (ct) {
        q->container = LQ_CONTAINER_CT;
        q->sym       = 0;
    }
    CHECK_OK(lq_st_writer_create(dir, 0, &wr, &err));
    for (int l = 0; l < nlin; l++) {
        float *dense;
        char   prefix[128];
        build(c, c->n, c->k, 0, seed + (uint64_t)l, &bufs[l], &dense);
        if (c->fmt == LQ_FMT_INT8)
            bufs[l].q.threshold = (float)q->int8_threshold;
        snprintf(prefix, sizeof prefix, "model.layers.%d.self_attn.%c_proj", l / 2,
                 l % 2 ? 'v' : 'q');
        CHECK_MSG(lq_qlinear_write(wr, prefix, &bufs[l].q, q, &err) == LQ_OK, "%s", err.msg);
        if (c->fmt == LQ_FMT_INT8 && bufs[l].q.n_outlier)
            CHECK_OK(lq_qconfig_add_outlier_module(q, prefix, &err));
        for (int64_t e = 0; dense && e < c->n * c->k; e++)
            dense[e] = lq_round_f16(dense[e]);
        if (dense && bufs[l].q.dense_dtype != LQ_DENSE_F32) { /* written as it is */
            free(dense);
        } else if (dense) { /* keep the dense array alive for the comparison: own it in the qbuf */
            float *own = lq_qbuf_alloc(&bufs[l], (size_t)(c->n * c->k) * 4);
            CHECK(own != NULL);
            memcpy(own, dense, (size_t)(c->n * c->k) * 4);
            bufs[l].q.dense = own;
            free(dense);
        }
    }
    /* an unquantized tensor alongside, as in real checkpoints */
    float   emb[16] = {0};
    int64_t es[2]   = {4, 4};
    CHECK_OK(lq_st_writer_add_f32(wr, "model.embed_tokens.weight", LQ_DT_F16, 2, es, emb, &err));
    CHECK_OK(lq_st_writer_finish(wr, &err));
    lq_st_writer_free(wr);
    cJSON *root = cJSON_Parse("{\"model_type\":\"llama\",\"torch_dtype\":\"float16\"}");
    if (c->fmt != LQ_FMT_DENSE)
        CHECK_OK(lq_qconfig_apply(q, root, dir, &err));
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    CHECK_OK(lq_json_write_file(root, path, &err));
    cJSON_Delete(root);
}

static void test_checkpoint(void) {
    for (int ci = 0; ci < NIO; ci++) {
        const kcase *c = &k_io[ci].kc;
        char         dir[4096];
        lq_qbuf      bufs[4];
        lq_qconfig   q;
        snprintf(dir, sizeof dir, "%s/ckpt/%s", tmp_root(), c->name);
        write_checkpoint(dir, c, 700 + (uint64_t)ci * 8, 4, 0, bufs, &q);
        lq_checkpoint *ck  = NULL;
        lq_err         err = {0};
        CHECK_MSG(lq_checkpoint_open(dir, &ck, &err) == LQ_OK, "%s: open: %s", c->name, err.msg);
        if (!ck)
            continue;
        CHECK_EQ_INT(lq_checkpoint_format(ck), c->fmt);
        CHECK_EQ_INT(lq_checkpoint_num_linears(ck), 4);
        CHECK(!strcmp(lq_checkpoint_linear_name(ck, 0), "model.layers.0.self_attn.q_proj"));
        CHECK(!strcmp(lq_checkpoint_linear_name(ck, 3), "model.layers.1.self_attn.v_proj"));
        CHECK(lq_checkpoint_linear_name(ck, 4) == NULL);
        for (int l = 0; l < 4; l++) {
            char prefix[128];
            snprintf(prefix, sizeof prefix, "model.layers.%d.self_attn.%c_proj", l / 2,
                     l % 2 ? 'v' : 'q');
            lq_qlinear w, w2;
            CHECK_MSG(lq_checkpoint_get_linear(ck, prefix, &w, &err) == LQ_OK, "%s: %s", prefix,
                      err.msg);
            CHECK_OK(lq_qlinear_check(&w, &err));
            same_dequant(&bufs[l].q, &w, c->name);
            /* second call: the cached descriptor */
            CHECK_OK(lq_checkpoint_get_linear(ck, prefix, &w2, &err));
            CHECK(w2.qweight == w.qweight && w2.dense == w.dense);
            lq_qbuf_free(&bufs[l]);
        }
        lq_qlinear w;
        CHECK_EQ_INT(lq_checkpoint_get_linear(ck, "model.layers.9.mlp.up_proj", &w, &err),
                     LQ_ERR_NOT_FOUND);
        lq_checkpoint_close(ck);
        lq_qconfig_free(&q);
    }
}

/* compressed-tensors can hold this case: GPTQ or AWQ with column-order groups */
static int ct_case(const kcase *c) {
    return (c->fmt == LQ_FMT_GPTQ || c->fmt == LQ_FMT_AWQ) && !c->act_order;
}

/* a and b (any formats) dequantize to the same matrix */
static void same_weights(const lq_qlinear *a, const lq_qlinear *b, const char *label) {
    CHECK_MSG(a->n == b->n && a->k == b->k, "%s: shape", label);
    if (a->n != b->n || a->k != b->k)
        return;
    float *wa = malloc((size_t)(a->n * a->k) * 4), *wb = malloc((size_t)(a->n * a->k) * 4);
    lq_format_traits_get((lq_format)a->format)->dequant_ref(a, wa);
    lq_format_traits_get((lq_format)b->format)->dequant_ref(b, wb);
    CHECK_MSG(!memcmp(wa, wb, (size_t)(a->n * a->k) * 4), "%s: dequant differs", label);
    CHECK_MSG(!a->bias == !b->bias && (!a->bias || !memcmp(a->bias, b->bias, (size_t)a->n * 2)),
              "%s: bias differs", label);
    free(wa);
    free(wb);
}

/* compressed-tensors pack-quantized: GPTQ and AWQ results written, read back through the public
 * checkpoint API as GPTQ descriptors holding the same weights; the symmetric form; the
 * quantization_config both ways; what the writer and the parser refuse. */
static void test_ct(void) {
    for (int ci = 0; ci < NIO; ci++) {
        const kcase *c = &k_io[ci].kc;
        if (!ct_case(c))
            continue;
        char       dir[4096], label[128];
        lq_qbuf    bufs[4];
        lq_qconfig q;
        lq_err     err = {0};
        snprintf(dir, sizeof dir, "%s/ct/%s", tmp_root(), c->name);
        write_checkpoint(dir, c, 1700 + (uint64_t)ci * 8, 4, 1, bufs, &q);
        lq_checkpoint *ck = NULL;
        CHECK_MSG(lq_checkpoint_open(dir, &ck, &err) == LQ_OK, "%s: open: %s", c->name, err.msg);
        if (!ck)
            continue;
        CHECK_EQ_INT(lq_checkpoint_format(ck), LQ_FMT_GPTQ);
        CHECK_EQ_INT(lq_checkpoint_num_linears(ck), 4);
        for (int l = 0; l < 4; l++) {
            char       prefix[128];
            lq_qlinear w;
            snprintf(prefix, sizeof prefix, "model.layers.%d.self_attn.%c_proj", l / 2,
                     l % 2 ? 'v' : 'q');
            snprintf(label, sizeof label, "%s ct %s", c->name, prefix);
            CHECK_MSG(lq_checkpoint_get_linear(ck, prefix, &w, &err) == LQ_OK, "%s: %s", label,
                      err.msg);
            if (lq_qlinear_check(&w, &err) == LQ_OK)
                same_weights(&bufs[l].q, &w, label);
            else
                CHECK_MSG(0, "%s: %s", label, err.msg);
        }
        lq_st *st = NULL;
        CHECK_OK(lq_st_open_dir(dir, &st, &err));
        const int64_t G = (c->k + (c->gs > 0 ? c->gs : c->k) - 1) / (c->gs > 0 ? c->gs : c->k);
        char          expect[512], bias[64] = "";
        if (c->bias)
            snprintf(bias, sizeof bias, "bias:F16:[%lld];", (long long)c->n);
        snprintf(expect, sizeof expect,
                 "%sweight_packed:I32:[%lld,%lld];weight_scale:F16:[%lld,%lld];weight_shape:I64:"
                 "[2];weight_zero_point:I32:[%lld,%lld]",
                 bias, (long long)c->n, (long long)(c->k * c->bits / 32), (long long)c->n,
                 (long long)G, (long long)((c->n * c->bits + 31) / 32), (long long)G);
        check_tensor_set(st, "model.layers.0.self_attn.q_proj", expect, c->name);
        lq_st_close(st);
        lq_checkpoint_close(ck);
        for (int l = 0; l < 4; l++)
            lq_qbuf_free(&bufs[l]);
        lq_qconfig_free(&q);
    }

    /* symmetric GPTQ: zero points 2^(b-1) are not stored */
    {
        const kcase *c = &k_io[0].kc; /* gptq4_g32_bias */
        lq_qbuf      qb;
        float       *dense = NULL;
        lq_err       err   = {0};
        CHECK_OK(build(c, c->n, c->k, 0, 31, &qb, &dense));
        free(dense);
        int32_t *qz = lq_qbuf_mut(&qb, qb.q.qzeros);
        for (int64_t g = 0; qz && g < lq_gptq_groups(&qb.q); g++)
            for (int64_t i = 0; i < c->n; i++)
                lq_stream_put(qz + g * (c->n * 4 / 32), 1, i, 4, 7u); /* v1: zero 8 - 1 */
        lq_qconfig q = cfg_for(c);
        q.container  = LQ_CONTAINER_CT;
        q.sym        = 1;
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/ct/sym", tmp_root());
        CHECK_OK(write_linear_file(dir, &qb.q, &q, &err));
        lq_st  *st = NULL;
        lq_qbuf rb;
        CHECK_OK(lq_st_open_dir(dir, &st, &err));
        char expect[256];
        snprintf(expect, sizeof expect,
                 "bias:F16:[64];weight_packed:I32:[64,16];weight_scale:F16:[64,4];"
                 "weight_shape:I64:[2]");
        check_tensor_set(st, k_prefix, expect, "ct sym");
        CHECK_MSG(lq_qlinear_read(st, k_prefix, &q, 0, 0, &rb, &err) == LQ_OK, "ct sym read: %s",
                  err.msg);
        same_weights(&qb.q, &rb.q, "ct sym");
        lq_qbuf_free(&rb);
        lq_st_close(st);
        /* a symmetric config over asymmetric zeros is a caller's bug, not a silent rewrite */
        lq_stream_put(qz, 1, 0, 4, 3u);
        snprintf(dir, sizeof dir, "%s/ct/sym_bad", tmp_root());
        CHECK_EQ_INT(write_linear_file(dir, &qb.q, &q, &err), LQ_ERR_INTERNAL);
        lq_qbuf_free(&qb);
    }

    /* act-order groups have no place in the layout */
    {
        const kcase *c = &k_io[1].kc; /* gptq4_actorder */
        lq_qbuf      qb;
        float       *dense = NULL;
        lq_err       err   = {0};
        CHECK(c->act_order);
        CHECK_OK(build(c, c->n, c->k, 0, 32, &qb, &dense));
        free(dense);
        lq_qconfig q = cfg_for(c);
        q.container  = LQ_CONTAINER_CT;
        q.sym        = 0;
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/ct/actorder", tmp_root());
        CHECK_EQ_INT(write_linear_file(dir, &qb.q, &q, &err), LQ_ERR_UNSUPPORTED);
        CHECK(strstr(err.msg, "static-groups") != NULL);
        lq_qbuf_free(&qb);
    }

    /* quantization_config: written, parsed back; mixed groups and ignores become rules */
    {
        lq_err     err = {0};
        lq_qconfig q, back;
        lq_qconfig_default(LQ_FMT_GPTQ, &q);
        q.container  = LQ_CONTAINER_CT;
        q.bits       = 4;
        q.group_size = 64;
        q.sym        = 1;
        q.desc_act   = 1;
        q.n_skip     = 1;
        q.has_skip   = 1;
        snprintf(q.skip[0], sizeof q.skip[0], "mlp.down_proj");
        CHECK_OK(lq_qconfig_add_rule(&q, "model\\.layers\\.(1|3)\\.(self_attn\\.v_proj)$", 0, 8, 0,
                                     -1, -1, "test", &err));
        cJSON *js = NULL;
        CHECK_OK(lq_qconfig_to_json(&q, &js, &err));
        char *txt = cJSON_PrintUnformatted(js);
        CHECK(strstr(txt, "\"quant_method\":\"compressed-tensors\"") != NULL);
        CHECK(strstr(txt, "\"actorder\":\"weight\"") != NULL);
        CHECK(strstr(txt, "\"re:.*\\\\.mlp\\\\.down_proj$\"") != NULL);
        CHECK_OK(lq_qconfig_parse_qc(js, "cfg", &back, &err));
        CHECK_EQ_INT(back.format, LQ_FMT_GPTQ);
        CHECK_EQ_INT(back.container, LQ_CONTAINER_CT);
        CHECK_EQ_INT(back.bits, 4);
        CHECK_EQ_INT(back.group_size, 64);
        CHECK_EQ_INT(back.sym, 1);
        CHECK_EQ_INT(back.desc_act, 1);
        static const struct {
            const char *module;
            int         bits, excluded;
        } k_mod[] = {{"model.layers.1.self_attn.v_proj", 8, 0},
                     {"model.layers.2.self_attn.v_proj", 4, 0},
                     {"model.layers.3.mlp.down_proj", 4, 1},
                     {"lm_head", 4, 1}};
        for (size_t i = 0; i < sizeof k_mod / sizeof k_mod[0]; i++) {
            lq_qconfig eff;
            int        ex = -1;
            CHECK_OK(lq_qconfig_for_module(&back, k_mod[i].module, &eff, &ex, &err));
            CHECK_MSG(eff.bits == k_mod[i].bits && ex == k_mod[i].excluded,
                      "%s: bits %d excluded %d", k_mod[i].module, eff.bits, ex);
        }
        free(txt);
        cJSON_Delete(js);
        lq_qconfig_free(&q);
        lq_qconfig_free(&back);
    }

    /* what llmquant cannot run is refused by name */
    static const struct {
        const char *json, *needle;
    } k_bad[] = {
        {"{\"quant_method\":\"compressed-tensors\",\"format\":\"float-quantized\","
         "\"config_groups\":{\"g\":{\"targets\":[\"Linear\"],\"weights\":{\"num_bits\":8,"
         "\"type\":\"float\"}}}}",
         "float-quantized"},
        {"{\"quant_method\":\"compressed-tensors\",\"format\":\"pack-quantized\","
         "\"config_groups\":{\"g\":{\"targets\":[\"Linear\"],\"weights\":{\"num_bits\":4,"
         "\"group_size\":128,\"strategy\":\"group\"},\"input_activations\":{\"num_bits\":8}}}}",
         "activations"},
        {"{\"quant_method\":\"compressed-tensors\",\"format\":\"pack-quantized\","
         "\"config_groups\":{\"g\":{\"targets\":[\"Linear\"],\"weights\":{\"num_bits\":5,"
         "\"group_size\":128,\"strategy\":\"group\"}}}}",
         "num_bits"},
        {"{\"quant_method\":\"compressed-tensors\",\"format\":\"pack-quantized\","
         "\"config_groups\":{\"g\":{\"targets\":[\"Linear\"],\"weights\":{\"num_bits\":4,"
         "\"strategy\":\"tensor\"}}}}",
         "strategy"},
        {"{\"quant_method\":\"compressed-tensors\",\"format\":\"pack-quantized\","
         "\"transform_config\":{\"config_groups\":{}},\"config_groups\":{\"g\":{\"targets\":"
         "[\"Linear\"],\"weights\":{\"num_bits\":4,\"group_size\":32}}}}",
         "transform_config"},
        {"{\"quant_method\":\"compressed-tensors\",\"format\":\"pack-quantized\","
         "\"quantization_status\":\"frozen\",\"config_groups\":{\"g\":{\"targets\":"
         "[\"Linear\"],\"weights\":{\"num_bits\":4,\"group_size\":32}}}}",
         "frozen"},
    };
    for (size_t i = 0; i < sizeof k_bad / sizeof k_bad[0]; i++) {
        cJSON     *js  = cJSON_Parse(k_bad[i].json);
        lq_err     err = {0};
        lq_qconfig q;
        CHECK(js != NULL);
        const lq_status st = lq_qconfig_parse_qc(js, "cfg", &q, &err);
        CHECK_MSG(st == LQ_ERR_UNSUPPORTED && strstr(err.msg, k_bad[i].needle),
                  "bad ct config %zu: %s (%s)", i, err.msg, lq_status_name(st));
        if (st == LQ_OK)
            lq_qconfig_free(&q);
        cJSON_Delete(js);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Rewrite one tensor of a valid file (raw header edit) and expect a named error. */
typedef lq_status (*mutate_fn)(lq_st_writer *wr, const lq_st_tensor *t, lq_err *err);

static lq_status copy_except(const lq_st *src, const char *dir, const char *victim, mutate_fn fn,
                             lq_err *err) {
    lq_st_writer *wr;
    mkdirs(dir);
    LQ_TRY(lq_st_writer_create(dir, 0, &wr, err));
    lq_status st = LQ_OK;
    for (int64_t i = 0; st == LQ_OK && i < lq_st_count(src); i++) {
        const lq_st_tensor *t = lq_st_get(src, i);
        if (victim && !strcmp(t->name, victim)) {
            if (fn)
                st = fn(wr, t, err);
            continue;
        }
        st = lq_st_writer_add(wr, t->name, t->dtype, t->ndim, t->shape, t->data, err);
    }
    if (st == LQ_OK)
        st = lq_st_writer_finish(wr, err);
    lq_st_writer_free(wr);
    return st;
}

/* same shape, dtype F32 (values irrelevant: the reader must reject the dtype) */
static lq_status as_f32(lq_st_writer *wr, const lq_st_tensor *t, lq_err *err) {
    float    *f  = calloc((size_t)t->numel + 1, sizeof *f);
    lq_status st = lq_st_writer_add(wr, t->name, LQ_DT_F32, t->ndim, t->shape, f, err);
    free(f);
    return st;
}

static lq_status bad_gidx(lq_st_writer *wr, const lq_st_tensor *t, lq_err *err) {
    int32_t *g = malloc((size_t)t->nbytes);
    memcpy(g, t->data, (size_t)t->nbytes);
    g[5]         = 99;
    lq_status st = lq_st_writer_add(wr, t->name, t->dtype, t->ndim, t->shape, g, err);
    free(g);
    return st;
}

static lq_status unsorted_outliers(lq_st_writer *wr, const lq_st_tensor *t, lq_err *err) {
    int32_t *g = malloc((size_t)t->nbytes);
    memcpy(g, t->data, (size_t)t->nbytes);
    const int32_t s = g[0];
    g[0]            = g[1];
    g[1]            = s;
    lq_status st    = lq_st_writer_add(wr, t->name, t->dtype, t->ndim, t->shape, g, err);
    free(g);
    return st;
}

static lq_status col32(lq_st_writer *wr, const lq_st_tensor *t, lq_err *err) {
    const uint8_t v = 1;
    return lq_st_writer_add(wr, t->name, t->dtype, 0, t->shape, &v, err);
}

static lq_status short_scales(lq_st_writer *wr, const lq_st_tensor *t, lq_err *err) {
    int64_t sh[2] = {t->shape[0] - 1, t->shape[1]};
    return lq_st_writer_add(wr, t->name, t->dtype, 2, sh, t->data, err);
}

/* A sorted descriptor (lq_qlinear_sort) holds the kernels' channel order: never a checkpoint. */
static void test_sorted_not_written(void) {
    const kcase c = {"gptq4_g32_actorder_sorted", LQ_FMT_GPTQ, 4, 64, 128, 32, 2, 0, 0, 0, 1, 0};
    lq_qbuf     qb;
    float      *dense;
    lq_err      err = {0};
    CHECK_OK(build(&c, c.n, c.k, 0, 4242, &qb, &dense));
    CHECK_MSG(qb.q.perm != NULL, "the case was not sorted");
    lq_qconfig q = cfg_for(&c);
    char       dir[4096];
    snprintf(dir, sizeof dir, "%s/sorted", tmp_root());
    CHECK_EQ_INT(write_linear_file(dir, &qb.q, &q, &err), LQ_ERR_INVALID_ARG);
    CHECK_MSG(strstr(err.msg, "sorted descriptor") != NULL, "%s", err.msg);
    free(dense);
    lq_qbuf_free(&qb);
}

/* lq_qbuf_alloc: zeroed arrays, 64-byte aligned, and from 2 MiB on 2 MiB boundaries (where the
 * huge pages it asks for start) */
static void test_qbuf_alloc(void) {
    const size_t sizes[] = {100, (size_t)2 << 20, ((size_t)2 << 20) + 1, (size_t)5 << 20};
    lq_qbuf      qb;
    memset(&qb, 0, sizeof qb);
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        const uint8_t *p = lq_qbuf_alloc(&qb, sizes[i]);
        CHECK_MSG(p != NULL, "%zu bytes", sizes[i]);
        if (!p)
            continue;
        const uintptr_t align = sizes[i] >= ((size_t)2 << 20) ? (uintptr_t)2 << 20 : 64;
        CHECK_MSG((uintptr_t)p % align == 0, "%zu bytes at %p", sizes[i], (const void *)p);
        CHECK_MSG(p[0] == 0 && p[sizes[i] / 2] == 0 && p[sizes[i] - 1] == 0,
                  "%zu bytes: not zeroed", sizes[i]);
        CHECK_MSG(lq_qbuf_mut(&qb, p) == p, "%zu bytes: not owned", sizes[i]);
    }
    CHECK_EQ_INT(qb.nmem, 4);
    CHECK_MSG(lq_qbuf_alloc(&qb, 0) == NULL, "0 bytes");
    lq_qbuf_free(&qb);
    CHECK_EQ_INT(qb.nmem, 0);
}

static void test_bad(void) {
    struct {
        int         io; /* index into k_io */
        const char *suffix;
        mutate_fn   fn;
        int         code;
        const char *msg;
    } cases[] = {
        {0, "qweight", as_f32, LQ_ERR_QFORMAT, "dtype F32"},
        {0, "qzeros", NULL, LQ_ERR_ST_MISSING_TENSOR, "qzeros\" is missing"},
        {0, "scales", short_scales, LQ_ERR_QFORMAT, "has shape [3, 64]"},
        {1, "g_idx", bad_gidx, LQ_ERR_QFORMAT, "= 99 outside"},
        {5, "qzeros", NULL, LQ_ERR_ST_MISSING_TENSOR, "qzeros\" is missing"},
        {7, "weight.nested_absmax", NULL, LQ_ERR_ST_MISSING_TENSOR, "nested_absmax"},
        {7, "weight.absmax", as_f32, LQ_ERR_QFORMAT, "absmax\" has dtype"},
        {8, "outlier_idx", unsorted_outliers, LQ_ERR_QFORMAT, "strictly increasing"},
        {8, "outlier_weight", NULL, LQ_ERR_QFORMAT, "without its .outlier_weight"},
        {8, "weight_format", col32, LQ_ERR_UNSUPPORTED, "row-major"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const kcase *c = &k_io[cases[i].io].kc;
        char         src[4096], dst[4200], victim[256];
        lq_err       err = {0};
        snprintf(src, sizeof src, "%s/roundtrip/%s", tmp_root(), c->name);
        snprintf(dst, sizeof dst, "%s/bad/%s_%zu", tmp_root(), c->name, i);
        snprintf(victim, sizeof victim, "%s.%s", k_prefix, cases[i].suffix);
        lq_st *st = NULL, *bs = NULL;
        if (lq_st_open_dir(src, &st, &err) != LQ_OK) {
            CHECK_MSG(0, "open %s: %s", src, err.msg);
            continue;
        }
        CHECK_OK(copy_except(st, dst, victim, cases[i].fn, &err));
        lq_st_close(st);
        CHECK_OK(lq_st_open_dir(dst, &bs, &err));
        lq_qconfig q = cfg_for(c);
        lq_qbuf    out;
        const int  s = bs ? (int)lq_qlinear_read(bs, k_prefix, &q, 0, 0, &out, &err) : -1;
        CHECK_MSG(s == cases[i].code && strstr(err.msg, cases[i].msg) &&
                      (s == LQ_ERR_ST_MISSING_TENSOR || strstr(err.msg, "model.safetensors")),
                  "%s/%s: %s \"%s\"", c->name, cases[i].suffix, lq_status_name((lq_status)s),
                  err.msg);
        lq_st_close(bs);
        lq_qconfig_free(&q);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Files for tests/py/test_format_compat.py: DIR/<case>/ is a checkpoint with one linear
 * <k_prefix>; DIR/<case>/ref/model.safetensors holds our dequant_ref W (F32 [n, k]), x and
 * gemm_ref y (F32). */
static int dump(const char *root) {
    lq_err err = {0};
    /* each case, then the GPTQ / AWQ ones again in compressed-tensors' layout ("<name>_ct") */
    for (int cc = 0; cc < 2 * NIO; cc++) {
        const int    ci = cc % NIO, ct = cc >= NIO;
        const kcase *c = &k_io[ci].kc;
        char         dir[4096], rdir[4200];
        lq_qbuf      qb;
        lq_qconfig   q;
        if (ct && !ct_case(c))
            continue;
        snprintf(dir, sizeof dir, "%s/%s%s", root, c->name, ct ? "_ct" : "");
        snprintf(rdir, sizeof rdir, "%s/ref", dir);
        write_checkpoint(dir, c, 900 + (uint64_t)ci, 1, ct, &qb, &q);
        const lq_qlinear *w = &qb.q;
        const int64_t     m = 5, n = w->n, k = w->k;
        float            *wd = malloc((size_t)(n * k) * 4), *x = malloc((size_t)(m * k) * 4),
              *y = malloc((size_t)(m * n) * 4);
        make_x(c, w, m, 0, 77, x);
        for (int64_t e = 0; e < m * k; e++) {
            if (c->fmt == LQ_FMT_INT8 && e % 97 == 3) /* runtime outliers at threshold 6 */
                x[e] = 9.f;
            x[e] = lq_round_f16(x[e]); /* the reference layers run fp16 activations */
        }
        const lq_format_traits *t = lq_format_traits_get((lq_format)w->format);
        t->dequant_ref(w, wd);
        t->gemm_ref(w, x, m, y);
        lq_st_writer *wr = NULL;
        mkdirs(rdir);
        int64_t sw[2] = {n, k}, sx[2] = {m, k}, sy[2] = {m, n};
        if (lq_st_writer_create(rdir, 0, &wr, &err) ||
            lq_st_writer_add(wr, "w", LQ_DT_F32, 2, sw, wd, &err) ||
            lq_st_writer_add(wr, "x", LQ_DT_F32, 2, sx, x, &err) ||
            lq_st_writer_add(wr, "y", LQ_DT_F32, 2, sy, y, &err) || lq_st_writer_finish(wr, &err)) {
            fprintf(stderr, "dump %s: %s\n", c->name, err.msg);
            return 1;
        }
        lq_st_writer_free(wr);
        free(wd);
        free(x);
        free(y);
        lq_qbuf_free(&qb);
        lq_qconfig_free(&q);
        printf("%s %s\n", c->name, dir);
    }
    /* double quant of a known absmax vector (3 nested blocks, the last one partial) */
    {
        const int64_t nb = 600;
        char          dir[4096];
        float        *am    = malloc((size_t)nb * 4);
        uint8_t      *codes = calloc((size_t)nb * 64, 1);
        lq_rng        r;
        lq_rng_seed(&r, 5);
        for (int64_t i = 0; i < nb; i++)
            am[i] = 0.002f + 0.05f * (float)lq_rng_uniform(&r) * (i % 7 == 0 ? 4.f : 1.f);
        lq_qbuf b;
        if (lq_pack_nf4(nb, 64, 64, codes, am, 1, 256, NULL, &b, &err))
            return 1;
        snprintf(dir, sizeof dir, "%s/double_quant", root);
        mkdirs(dir);
        lq_st_writer *wr    = NULL;
        int64_t       s1[1] = {nb}, s2[1] = {3}, s0[1] = {1};
        if (lq_st_writer_create(dir, 0, &wr, &err) ||
            lq_st_writer_add(wr, "absmax_in", LQ_DT_F32, 1, s1, am, &err) ||
            lq_st_writer_add(wr, "qabsmax", LQ_DT_U8, 1, s1, b.q.absmax, &err) ||
            lq_st_writer_add(wr, "nested_absmax", LQ_DT_F32, 1, s2, b.q.nested_absmax, &err) ||
            lq_st_writer_add(wr, "nested_offset", LQ_DT_F32, 1, s0, &b.q.nested_offset, &err) ||
            lq_st_writer_finish(wr, &err)) {
            fprintf(stderr, "dump double_quant: %s\n", err.msg);
            return 1;
        }
        lq_st_writer_free(wr);
        lq_qbuf_free(&b);
        free(am);
        free(codes);
        printf("double_quant %s\n", dir);
    }
    return 0;
}

/* Checkpoint directories written by the reference tools (tests/py/test_format_compat.py), read
 * through the public loader: OUTDIR/model.safetensors gets every linear's dequant_ref as F32
 * [n, k] under its module name. Prints the error and returns its status on failure. */
static int read_back(const char *dir, const char *outdir) {
    lq_err         err = {0};
    lq_checkpoint *ck  = NULL;
    lq_st_writer  *wr  = NULL;
    lq_status      st  = lq_checkpoint_open(dir, &ck, &err);
    if (st == LQ_OK) {
        mkdirs(outdir);
        st = lq_st_writer_create(outdir, 0, &wr, &err);
    }
    for (int64_t i = 0; st == LQ_OK && i < lq_checkpoint_num_linears(ck); i++) {
        lq_qlinear  w;
        const char *name = lq_checkpoint_linear_name(ck, i);
        st               = lq_checkpoint_get_linear(ck, name, &w, &err);
        if (st == LQ_OK)
            st = lq_qlinear_check(&w, &err);
        if (st != LQ_OK)
            break;
        float  *wd       = malloc((size_t)(w.n * w.k) * 4);
        int64_t shape[2] = {w.n, w.k};
        lq_format_traits_get((lq_format)w.format)->dequant_ref(&w, wd);
        st = lq_st_writer_add(wr, name, LQ_DT_F32, 2, shape, wd, &err);
        free(wd);
        printf("%s format %d [%lld, %lld]\n", name, w.format, (long long)w.n, (long long)w.k);
    }
    if (st == LQ_OK && wr)
        st = lq_st_writer_finish(wr, &err);
    lq_st_writer_free(wr);
    lq_checkpoint_close(ck);
    if (st != LQ_OK)
        fprintf(stderr, "%s: %s (%s)\n", dir, err.msg, lq_status_name(st));
    return (int)st;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--dump"))
        return dump(argv[2]);
    if (argc == 4 && !strcmp(argv[1], "--read"))
        return read_back(argv[2], argv[3]);
    test_roundtrip();
    test_config();
    test_checkpoint();
    test_ct();
    test_bad();
    test_sorted_not_written();
    test_qbuf_alloc();
    return lq_test_end("test_format_io");
}
