/* GGUF input: the container parser's validation rules (one bad file per rule, every truncation
 * of a good file), the GGML block decoders against loops written after ggml-quants.c's
 * dequantize_row_* (bit-exact on random blocks; tests/py/test_gguf_oracle.py checks real files
 * against the gguf Python package), llama.cpp's q/k permutation, the Hugging Face names, the
 * tokenizer files rebuilt from a vocabulary, and a whole model: the demo stories260K written as
 * GGUF (q/k permuted, F32/F16) must give the same config, tokens and logits as the directory.
 *
 *   test_gguf --dump FILE.gguf OUT_DIR   OUT_DIR/model.safetensors: every tensor decoded to F32
 *                                        under its GGUF name (dims reversed, rows as stored),
 *                                        for the oracle */
#include "lq_dtype.h"
#include "lq_gguf.h"
#include "lq_gguf_hf.h"
#include "lq_model.h"
#include "lq_source.h"
#include "lq_test.h"
#include "lq_test_gguf.h"
#include "lq_tok.h"
#include "lq_tok_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 11);
}

/* ------------------------------------------------------------------------------------------ */
/* dequantize_row_* of ggml-quants.c, one block, written as ggml writes them                    */
/* ------------------------------------------------------------------------------------------ */
static float h2f(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return lq_f16_to_f32(h);
}

static void ref_q4_0(const uint8_t *x, float *y) {
    const float d = h2f(x);
    for (int j = 0; j < 16; ++j) {
        const int x0 = (x[2 + j] & 0x0F) - 8, x1 = (x[2 + j] >> 4) - 8;
        y[j]      = x0 * d;
        y[j + 16] = x1 * d;
    }
}
static void ref_q4_1(const uint8_t *x, float *y) {
    const float d = h2f(x), m = h2f(x + 2);
    for (int j = 0; j < 16; ++j) {
        y[j]      = (x[4 + j] & 0x0F) * d + m;
        y[j + 16] = (x[4 + j] >> 4) * d + m;
    }
}
static void ref_q5_0(const uint8_t *x, float *y) {
    const float d = h2f(x);
    uint32_t    qh;
    memcpy(&qh, x + 2, 4);
    for (int j = 0; j < 16; ++j) {
        const uint8_t xh_0 = ((qh >> (j + 0)) << 4) & 0x10, xh_1 = ((qh >> (j + 12))) & 0x10;
        y[j]      = (((x[6 + j] & 0x0F) | xh_0) - 16) * d;
        y[j + 16] = (((x[6 + j] >> 4) | xh_1) - 16) * d;
    }
}
static void ref_q5_1(const uint8_t *x, float *y) {
    const float d = h2f(x), m = h2f(x + 2);
    uint32_t    qh;
    memcpy(&qh, x + 4, 4);
    for (int j = 0; j < 16; ++j) {
        const uint8_t xh_0 = ((qh >> (j + 0)) << 4) & 0x10, xh_1 = ((qh >> (j + 12))) & 0x10;
        y[j]      = ((x[8 + j] & 0x0F) | xh_0) * d + m;
        y[j + 16] = ((x[8 + j] >> 4) | xh_1) * d + m;
    }
}
static void ref_q8_0(const uint8_t *x, float *y) {
    const float d = h2f(x);
    for (int j = 0; j < 32; ++j)
        y[j] = (int8_t)x[2 + j] * d;
}
static void ref_q2_k(const uint8_t *x, float *y) {
    const float    d = h2f(x + 80), min = h2f(x + 82);
    const uint8_t *q  = x + 16;
    int            is = 0;
    for (int n = 0; n < 256; n += 128) {
        int shift = 0;
        for (int j = 0; j < 4; ++j) {
            uint8_t sc = x[is++];
            float   dl = d * (sc & 0xF), ml = min * (sc >> 4);
            for (int l = 0; l < 16; ++l)
                *y++ = dl * ((int8_t)((q[l] >> shift) & 3)) - ml;
            sc = x[is++];
            dl = d * (sc & 0xF), ml = min * (sc >> 4);
            for (int l = 0; l < 16; ++l)
                *y++ = dl * ((int8_t)((q[l + 16] >> shift) & 3)) - ml;
            shift += 2;
        }
        q += 32;
    }
}
static void ref_q3_k(const uint8_t *x, float *y) {
    const uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
    uint32_t       aux[4];
    int8_t         scales[16];
    const float    d_all = h2f(x + 108);
    const uint8_t *q = x + 32, *hm = x;
    uint8_t        m = 1;
    memcpy(aux, x + 96, 12);
    uint32_t tmp = aux[2];
    aux[2]       = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
    aux[3]       = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
    aux[0]       = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
    aux[1]       = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
    memcpy(scales, aux, 16);
    int is = 0;
    for (int n = 0; n < 256; n += 128) {
        int shift = 0;
        for (int j = 0; j < 4; ++j) {
            float dl = d_all * (scales[is++] - 32);
            for (int l = 0; l < 16; ++l)
                *y++ = dl * ((int8_t)((q[l + 0] >> shift) & 3) - ((hm[l + 0] & m) ? 0 : 4));
            dl = d_all * (scales[is++] - 32);
            for (int l = 0; l < 16; ++l)
                *y++ = dl * ((int8_t)((q[l + 16] >> shift) & 3) - ((hm[l + 16] & m) ? 0 : 4));
            shift += 2;
            m <<= 1;
        }
        q += 32;
    }
}
static void scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
    }
}
static void ref_q4_k(const uint8_t *x, float *y) {
    const uint8_t *q = x + 16;
    const float    d = h2f(x), min = h2f(x + 2);
    int            is = 0;
    uint8_t        sc, m;
    for (int j = 0; j < 256; j += 64) {
        scale_min_k4(is + 0, x + 4, &sc, &m);
        const float d1 = d * sc, m1 = min * m;
        scale_min_k4(is + 1, x + 4, &sc, &m);
        const float d2 = d * sc, m2 = min * m;
        for (int l = 0; l < 32; ++l)
            *y++ = d1 * (q[l] & 0xF) - m1;
        for (int l = 0; l < 32; ++l)
            *y++ = d2 * (q[l] >> 4) - m2;
        q += 32;
        is += 2;
    }
}
static void ref_q5_k(const uint8_t *x, float *y) {
    const uint8_t *ql = x + 48, *qh = x + 16;
    const float    d = h2f(x), min = h2f(x + 2);
    int            is = 0;
    uint8_t        sc, m, u1 = 1, u2 = 2;
    for (int j = 0; j < 256; j += 64) {
        scale_min_k4(is + 0, x + 4, &sc, &m);
        const float d1 = d * sc, m1 = min * m;
        scale_min_k4(is + 1, x + 4, &sc, &m);
        const float d2 = d * sc, m2 = min * m;
        for (int l = 0; l < 32; ++l)
            *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
        for (int l = 0; l < 32; ++l)
            *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        ql += 32;
        is += 2;
        u1 <<= 2;
        u2 <<= 2;
    }
}
static void ref_q6_k(const uint8_t *x, float *y) {
    const float    d  = h2f(x + 208);
    const uint8_t *ql = x, *qh = x + 128;
    const int8_t  *sc = (const int8_t *)(x + 192);
    for (int n = 0; n < 256; n += 128) {
        for (int l = 0; l < 32; ++l) {
            int          is = l / 16;
            const int8_t q1 = (int8_t)((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
            const int8_t q2 = (int8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
            const int8_t q3 = (int8_t)((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            const int8_t q4 = (int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l + 0]        = d * sc[is + 0] * q1;
            y[l + 32]       = d * sc[is + 2] * q2;
            y[l + 64]       = d * sc[is + 4] * q3;
            y[l + 96]       = d * sc[is + 6] * q4;
        }
        y += 128;
        ql += 64;
        qh += 32;
        sc += 8;
    }
}

typedef void (*ref_fn)(const uint8_t *, float *);
static const struct {
    lq_dtype dt;
    uint32_t ggml;
    ref_fn   ref;
    int      f16_at[2]; /* byte offsets of fp16 scales to keep finite (-1: none) */
} k_types[] = {
    {LQ_DT_Q4_0, 2, ref_q4_0, {0, -1}},    {LQ_DT_Q4_1, 3, ref_q4_1, {0, 2}},
    {LQ_DT_Q5_0, 6, ref_q5_0, {0, -1}},    {LQ_DT_Q5_1, 7, ref_q5_1, {0, 2}},
    {LQ_DT_Q8_0, 8, ref_q8_0, {0, -1}},    {LQ_DT_Q2_K, 10, ref_q2_k, {80, 82}},
    {LQ_DT_Q3_K, 11, ref_q3_k, {108, -1}}, {LQ_DT_Q4_K, 12, ref_q4_k, {0, 2}},
    {LQ_DT_Q5_K, 13, ref_q5_k, {0, 2}},    {LQ_DT_Q6_K, 14, ref_q6_k, {208, -1}},
};
#define N_TYPES (int)(sizeof k_types / sizeof k_types[0])

static void random_blocks(int t, uint8_t *b, int nblocks, int bb) {
    for (int i = 0; i < nblocks * bb; i++)
        b[i] = (uint8_t)rnd();
    for (int i = 0; i < nblocks; i++)
        for (int s = 0; s < 2; s++)
            if (k_types[t].f16_at[s] >= 0) { /* a finite scale of either sign, incl. subnormals */
                uint16_t h = (uint16_t)(rnd() & 0xfbff);
                memcpy(b + i * bb + k_types[t].f16_at[s], &h, 2);
            }
}

static void test_decoders(void) {
    for (int t = 0; t < N_TYPES; t++) {
        int       bb, be = lq_dtype_block(k_types[t].dt, &bb);
        const int nb  = 64;
        uint8_t  *b   = malloc((size_t)(nb * bb));
        float    *got = malloc(sizeof(float) * (size_t)(nb * be)),
              *want   = malloc(sizeof(float) * (size_t)(nb * be));
        random_blocks(t, b, nb, bb);
        for (int i = 0; i < nb; i++)
            k_types[t].ref(b + i * bb, want + i * be);
        CHECK_EQ_INT(lq_convert_to_f32(k_types[t].dt, b, nb * be, got), 0);
        int diff = 0;
        for (int i = 0; i < nb * be; i++)
            diff += memcmp(&got[i], &want[i], 4) != 0;
        CHECK_MSG(diff == 0, "%s: %d of %d values differ from ggml's dequantize_row",
                  lq_dtype_name(k_types[t].dt), diff, nb * be);
        /* geometry agrees with the GGML table, and a partial block is refused */
        int gbb, gbe = lq_ggml_type_block(k_types[t].ggml, &gbb);
        CHECK(gbe == be && gbb == bb);
        CHECK_EQ_INT(lq_dtype_from_ggml(k_types[t].ggml), k_types[t].dt);
        CHECK_EQ_INT(lq_convert_to_f32(k_types[t].dt, b, be - 1, got), -1);
        CHECK(lq_dtype_is_float(k_types[t].dt));
        CHECK_EQ_INT(
            lq_dtype_from_name(lq_dtype_name(k_types[t].dt), strlen(lq_dtype_name(k_types[t].dt))),
            -1); /* not a safetensors dtype */
        free(b);
        free(got);
        free(want);
    }
    /* NaN in a scale is counted, not hidden */
    uint8_t  blk[34] = {0};
    uint16_t nan16   = 0x7e00;
    memcpy(blk, &nan16, 2);
    blk[2] = 1;
    float y[32];
    CHECK_EQ_INT(lq_convert_to_f32(LQ_DT_Q8_0, blk, 32, y), 32);
    CHECK(lq_dtype_from_ggml(16) < 0 && !strcmp(lq_ggml_type_name(16), "IQ2_XXS"));
    CHECK(lq_ggml_type_block(999, NULL) == 0 && !strcmp(lq_ggml_type_name(999), "?"));
}

/* ------------------------------------------------------------------------------------------ */
/* Container                                                                                   */
/* ------------------------------------------------------------------------------------------ */
static float   g_f32[64];
static uint8_t g_q8[34 * 2];

static size_t good_file(uint8_t **out) {
    tg_gguf g = {0};
    tg_kv_str(&g, "general.architecture", "llama");
    tg_kv_u32(&g, "llama.block_count", 2);
    tg_kv_f32(&g, "llama.rope.freq_base", 10000.f);
    tg_kv_bool(&g, "tokenizer.ggml.add_bos_token", 1);
    tg_kv_i32(&g, "x.neg", -5);
    const char *toks[] = {"a", "bc", "d\xc3\xa9"};
    tg_kv_strs(&g, "tokenizer.ggml.tokens", toks, NULL, 3);
    const int32_t tt[] = {1, 3, 1};
    tg_kv_arr(&g, "tokenizer.ggml.token_type", 5, tt, 4, 3);
    for (int i = 0; i < 64; i++)
        g_f32[i] = (float)i - 10.f;
    for (int b = 0; b < 2; b++) {
        uint16_t one = 0x3c00;
        memcpy(g_q8 + 34 * b, &one, 2);
        for (int j = 0; j < 32; j++)
            g_q8[34 * b + 2 + j] = (uint8_t)(j - 16);
    }
    const uint64_t ne1[1] = {64}, ne2[2] = {32, 2};
    tg_tensor(&g, "w.f32", 0, 1, ne1, g_f32, sizeof g_f32);
    tg_tensor(&g, "w.q8", 8, 2, ne2, g_q8, sizeof g_q8);
    return tg_finish(&g, out);
}

static lq_status open_mem(const uint8_t *b, size_t n, lq_err *e) {
    lq_gguf  *g = NULL;
    lq_status s = lq_gguf_open_memory(b, n, "mem.gguf", &g, e);
    lq_gguf_close(g);
    return s;
}

static void test_container(void) {
    uint8_t *f = NULL;
    size_t   n = good_file(&f);
    lq_gguf *g = NULL;
    lq_err   e = {0};
    CHECK_OK(lq_gguf_open_memory(f, n, "good.gguf", &g, &e));
    if (g) {
        int64_t     v;
        double      d;
        bool        b;
        const char *s;
        int64_t     sl;
        CHECK(lq_gguf_get_i64(g, "llama.block_count", &v) && v == 2);
        CHECK(lq_gguf_get_f64(g, "llama.rope.freq_base", &d) && d == 10000.0);
        CHECK(lq_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b) && b);
        CHECK(lq_gguf_get_i64(g, "x.neg", &v) && v == -5);
        CHECK(!lq_gguf_get_i64(g, "llama.rope.freq_base", &v)); /* a float is not an int */
        CHECK(lq_gguf_get_str(g, "general.architecture", &s, &sl) && sl == 5 &&
              !memcmp(s, "llama", 5));
        CHECK(!lq_gguf_get_str(g, "missing", &s, &sl));
        const lq_gguf_kv *kv = lq_gguf_find(g, "tokenizer.ggml.tokens");
        CHECK(kv && kv->n == 3 && lq_gguf_arr_str(g, kv, 2, &s, &sl) && sl == 3 &&
              !memcmp(s, "d\xc3\xa9", 3));
        CHECK(!lq_gguf_arr_str(g, kv, 3, &s, &sl));
        kv = lq_gguf_find(g, "tokenizer.ggml.token_type");
        CHECK(kv && lq_gguf_arr_i64(kv, 1, &v) && v == 3);
        CHECK_EQ_INT(lq_gguf_tensor_count(g), 2);
        const lq_gguf_tensor *t = lq_gguf_tensor_find(g, "w.q8");
        CHECK(t && t->ndim == 2 && t->ne[0] == 32 && t->ne[1] == 2 && t->nbytes == 68 &&
              t->ggml_type == 8);
        float y[64];
        if (t) {
            CHECK_EQ_INT(lq_convert_to_f32(LQ_DT_Q8_0, t->data, 64, y), 0);
            CHECK(y[0] == -16.f && y[63] == 15.f);
        }
        t = lq_gguf_tensor_find(g, "w.f32");
        CHECK(t && t->offset % 32 == 0 && !memcmp(t->data, g_f32, sizeof g_f32));
        CHECK(lq_gguf_tensor_find(g, "w") == NULL);
    }
    lq_gguf_close(g);

    /* Every proper prefix fails cleanly (no read past the buffer: ASan watches). */
    int ok_prefix = 0;
    for (size_t k = 0; k < n; k++) {
        uint8_t *c = malloc(k ? k : 1);
        memcpy(c, f, k);
        ok_prefix += open_mem(c, k, &e) == LQ_OK;
        free(c);
    }
    CHECK_MSG(ok_prefix == 0, "%d truncated files parsed", ok_prefix);

    /* One rule at a time on a copy of the good file. */
    struct {
        const char *what;
        size_t      off; /* byte to overwrite */
        uint32_t    val;
        int         width;
        lq_status   want;
    } cases[] = {
        {"bad magic", 0, 0x46554746u, 4, LQ_ERR_GGUF_FORMAT},
        {"version 1", 4, 1, 4, LQ_ERR_GGUF_FORMAT},
        {"version 4", 4, 4, 4, LQ_ERR_GGUF_FORMAT},
        {"tensor count huge", 8, 0xffffffffu, 4, LQ_ERR_GGUF_FORMAT},
        {"kv count huge", 16, 0xffffffffu, 4, LQ_ERR_GGUF_FORMAT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t *c = malloc(n);
        memcpy(c, f, n);
        memcpy(c + cases[i].off, &cases[i].val, (size_t)cases[i].width);
        lq_status s = open_mem(c, n, &e);
        CHECK_MSG(s == cases[i].want, "%s: status %d (%s), want %d", cases[i].what, s, e.msg,
                  cases[i].want);
        CHECK_MSG(s == LQ_OK || strstr(e.msg, "mem.gguf"), "%s: message %s", cases[i].what, e.msg);
        free(c);
    }
    free(f);

    /* Rules on tensor infos and key/values, each from a fresh file. */
    struct {
        const char *what;
        int         kind;
        lq_status   want;
    } t2[] = {
        {"unknown ggml type", 1, LQ_ERR_GGUF_TYPE},
        {"row not a whole number of blocks", 2, LQ_ERR_GGUF_FORMAT},
        {"zero dimension", 3, LQ_ERR_GGUF_FORMAT},
        {"five dimensions", 4, LQ_ERR_GGUF_FORMAT},
        {"duplicate tensor", 5, LQ_ERR_GGUF_FORMAT},
        {"duplicate key", 6, LQ_ERR_GGUF_FORMAT},
        {"array of arrays", 7, LQ_ERR_GGUF_FORMAT},
        {"unknown value type", 8, LQ_ERR_GGUF_FORMAT},
        {"alignment not a power of two", 10, LQ_ERR_GGUF_FORMAT},
        {"data past the end", 11, LQ_ERR_GGUF_FORMAT},
        {"non-UTF-8 key", 12, LQ_ERR_GGUF_FORMAT},
    };
    for (size_t i = 0; i < sizeof t2 / sizeof t2[0]; i++) {
        tg_gguf        g2    = {0};
        const uint64_t ne[5] = {32, 2, 1, 1, 1}, ne0[2] = {32, 0}, ne31[1] = {31};
        switch (t2[i].kind) {
        case 1:
            tg_tensor(&g2, "t", 99, 2, ne, g_q8, 68);
            break;
        case 2:
            tg_tensor(&g2, "t", 8, 1, ne31, g_q8, 34);
            break;
        case 3:
            tg_tensor(&g2, "t", 8, 2, ne0, g_q8, 0);
            break;
        case 4:
            tg_tensor(&g2, "t", 8, 5, ne, g_q8, 68);
            break;
        case 5:
            tg_tensor(&g2, "t", 8, 2, ne, g_q8, 68);
            tg_tensor(&g2, "t", 8, 2, ne, g_q8, 68);
            break;
        case 6:
            tg_kv_u32(&g2, "k", 1);
            tg_kv_u32(&g2, "k", 2);
            break;
        case 7: {
            uint8_t inner[12] = {4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}; /* u32 type, count 0 */
            tg_kv_arr(&g2, "k", 9, inner, 12, 1);
            break;
        }
        case 8:
            tg_str(&g2.kv, "k"), tg_u32(&g2.kv, 13), tg_u32(&g2.kv, 0), g2.nkv++;
            break;
        case 10:
            tg_kv_u32(&g2, "general.alignment", 48);
            break;
        case 11:
            tg_tensor(&g2, "t", 8, 2, ne, g_q8, 34);
            break; /* half the data missing */
        case 12:
            tg_kv_u32(&g2, "bad\xff", 1);
            break;
        }
        uint8_t  *c = NULL;
        size_t    m = tg_finish(&g2, &c);
        lq_status s = open_mem(c, m, &e);
        CHECK_MSG(s == t2[i].want, "%s: status %d (%s), want %d", t2[i].what, s, e.msg, t2[i].want);
        free(c);
    }
    /* a NUL inside a tensor name, written byte by byte */
    {
        tg_buf b = {0};
        tg_u32(&b, 0x46554747u), tg_u32(&b, 3), tg_u64(&b, 1), tg_u64(&b, 0);
        tg_u64(&b, 3), tg_put(&b, "a\0b", 3), tg_u32(&b, 1), tg_u64(&b, 4), tg_u32(&b, 0),
            tg_u64(&b, 0);
        static const uint8_t zero[64] = {0};
        while (b.n % 32)
            tg_put(&b, zero, 1);
        tg_put(&b, zero, 16);
        CHECK_EQ_INT(open_mem(b.p, b.n, &e), LQ_ERR_GGUF_FORMAT);
        free(b.p);
    }
    /* overlapping tensors: two infos pointing at the same offset */
    {
        tg_gguf        g3    = {0};
        const uint64_t ne[1] = {32};
        tg_tensor(&g3, "a", 0, 1, ne, g_f32, 128);
        tg_tensor(&g3, "b", 0, 1, ne, g_f32, 128);
        uint8_t *c = NULL;
        size_t   m = tg_finish(&g3, &c);
        /* header 24 bytes, info "a" 33 bytes; info "b": len, name, ndim, ne, type, then offset */
        const size_t off_b  = 24 + 33 + 8 + 1 + 4 + 8 + 4;
        uint64_t     zero64 = 0, was;
        memcpy(&was, c + off_b, 8);
        CHECK_EQ_INT(was, 128); /* found the field */
        memcpy(c + off_b, &zero64, 8);
        CHECK_EQ_INT(open_mem(c, m, &e), LQ_ERR_GGUF_FORMAT);
        CHECK(strstr(e.msg, "overlap") != NULL);
        free(c);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Permutation and names                                                                        */
/* ------------------------------------------------------------------------------------------ */
/* convert_hf_to_gguf.py LlamaModel.permute: reshape(n_head, 2, hd/2, k).swapaxes(1, 2). */
static void llamacpp_permute(const float *w, float *out, int64_t n, int64_t k, int heads) {
    const int64_t hd = n / heads, half = hd / 2;
    for (int64_t h = 0; h < heads; h++)
        for (int64_t i = 0; i < half; i++)
            for (int64_t j = 0; j < 2; j++)
                memcpy(out + (h * hd + 2 * i + j) * k, w + (h * hd + j * half + i) * k,
                       (size_t)k * sizeof(float));
}

static void test_permute_names(void) {
    const int     heads[] = {1, 3, 4};
    const int64_t k       = 5;
    for (int hi = 0; hi < 3; hi++) {
        const int64_t n = heads[hi] * 8;
        float        *w = malloc(sizeof(float) * (size_t)(n * k)),
              *p        = malloc(sizeof(float) * (size_t)(n * k));
        for (int64_t i = 0; i < n * k; i++)
            w[i] = (float)i;
        llamacpp_permute(w, p, n, k, heads[hi]);
        CHECK(lq_gguf_unpermute_rows(p, n, k, heads[hi]));
        CHECK_MSG(!memcmp(p, w, sizeof(float) * (size_t)(n * k)),
                  "unpermute(permute) != id, %d heads", heads[hi]);
        free(w);
        free(p);
    }
    float x[6];
    CHECK(!lq_gguf_unpermute_rows(x, 6, 1, 4)); /* 6 rows do not split into 4 heads */

    tg_gguf g = {0};
    tg_kv_str(&g, "general.architecture", "llama");
    tg_kv_u32(&g, "llama.attention.head_count", 8);
    tg_kv_u32(&g, "llama.attention.head_count_kv", 2);
    uint8_t *f  = NULL;
    size_t   m  = tg_finish(&g, &f);
    lq_gguf *gg = NULL;
    lq_err   e  = {0};
    CHECK_OK(lq_gguf_open_memory(f, m, "names.gguf", &gg, &e));
    const lq_gguf_arch *a = NULL;
    CHECK_OK(lq_gguf_hf_arch(gg, &a, &e));
    struct {
        const char *in, *out;
        int         perm;
    } names[] = {
        {"token_embd.weight", "model.embed_tokens.weight", 0},
        {"output_norm.weight", "model.norm.weight", 0},
        {"output.weight", "lm_head.weight", 0},
        {"blk.0.attn_norm.weight", "model.layers.0.input_layernorm.weight", 0},
        {"blk.12.ffn_norm.weight", "model.layers.12.post_attention_layernorm.weight", 0},
        {"blk.3.attn_q.weight", "model.layers.3.self_attn.q_proj.weight", 8},
        {"blk.3.attn_k.weight", "model.layers.3.self_attn.k_proj.weight", 2},
        {"blk.3.attn_k.bias", "model.layers.3.self_attn.k_proj.bias", 2},
        {"blk.3.attn_v.weight", "model.layers.3.self_attn.v_proj.weight", 0},
        {"blk.3.attn_output.weight", "model.layers.3.self_attn.o_proj.weight", 0},
        {"blk.3.ffn_gate.weight", "model.layers.3.mlp.gate_proj.weight", 0},
        {"blk.3.ffn_up.weight", "model.layers.3.mlp.up_proj.weight", 0},
        {"blk.3.ffn_down.weight", "model.layers.3.mlp.down_proj.weight", 0},
    };
    for (size_t i = 0; a && i < sizeof names / sizeof names[0]; i++) {
        char hf[256];
        int  ph = -1;
        CHECK(lq_gguf_hf_tensor_name(gg, a, names[i].in, hf, sizeof hf, &ph));
        CHECK_MSG(!strcmp(hf, names[i].out) && ph == names[i].perm, "%s -> %s (%d)", names[i].in,
                  hf, ph);
    }
    const char *bad[] = {"rope_freqs.weight", "blk.1.attn_q_norm.weight", "blk.x.attn_q.weight",
                         "blk.1.attn_q", "token_embd.scale"};
    for (size_t i = 0; a && i < sizeof bad / sizeof bad[0]; i++) {
        char hf[256];
        int  ph;
        CHECK_MSG(!lq_gguf_hf_tensor_name(gg, a, bad[i], hf, sizeof hf, &ph), "%s mapped", bad[i]);
    }
    lq_gguf_close(gg);
    free(f);
    /* Gemma 3: its own norm names, and norm weights stored as 1 + w */
    tg_gguf g3 = {0};
    tg_kv_str(&g3, "general.architecture", "gemma3");
    m = tg_finish(&g3, &f);
    CHECK_OK(lq_gguf_open_memory(f, m, "g3.gguf", &gg, &e));
    CHECK_OK(lq_gguf_hf_arch(gg, &a, &e));
    struct {
        const char *in, *out;
        float       shift;
    } gnames[] = {
        {"blk.2.attn_norm.weight", "model.layers.2.input_layernorm.weight", 1},
        {"blk.2.post_attention_norm.weight", "model.layers.2.post_attention_layernorm.weight", 1},
        {"blk.2.ffn_norm.weight", "model.layers.2.pre_feedforward_layernorm.weight", 1},
        {"blk.2.post_ffw_norm.weight", "model.layers.2.post_feedforward_layernorm.weight", 1},
        {"blk.2.attn_q_norm.weight", "model.layers.2.self_attn.q_norm.weight", 1},
        {"output_norm.weight", "model.norm.weight", 1},
        {"blk.2.attn_q.weight", "model.layers.2.self_attn.q_proj.weight", 0},
        {"token_embd.weight", "model.embed_tokens.weight", 0},
    };
    for (size_t i = 0; a && i < sizeof gnames / sizeof gnames[0]; i++) {
        char hf[256];
        int  ph = -1;
        CHECK(lq_gguf_hf_tensor_name(gg, a, gnames[i].in, hf, sizeof hf, &ph));
        CHECK_MSG(!strcmp(hf, gnames[i].out) && ph == 0 &&
                      lq_gguf_hf_shift(a, hf) == gnames[i].shift,
                  "%s -> %s (%d)", gnames[i].in, hf, ph);
    }
    lq_gguf_close(gg);
    free(f);
    /* Phi-3: the fused attn_qkv and ffn_up (gate and up rows), no permutation; its
     * rope_factors tensors are configuration, not weights */
    tg_gguf gp = {0};
    tg_kv_str(&gp, "general.architecture", "phi3");
    m = tg_finish(&gp, &f);
    CHECK_OK(lq_gguf_open_memory(f, m, "p.gguf", &gg, &e));
    CHECK_OK(lq_gguf_hf_arch(gg, &a, &e));
    const char *pnames[][2] = {
        {"blk.1.attn_qkv.weight", "model.layers.1.self_attn.qkv_proj.weight"},
        {"blk.1.ffn_up.weight", "model.layers.1.mlp.gate_up_proj.weight"},
        {"blk.1.ffn_norm.weight", "model.layers.1.post_attention_layernorm.weight"},
    };
    for (size_t i = 0; a && i < sizeof pnames / sizeof pnames[0]; i++) {
        char hf[256];
        int  ph = -1;
        CHECK(lq_gguf_hf_tensor_name(gg, a, pnames[i][0], hf, sizeof hf, &ph));
        CHECK_MSG(!strcmp(hf, pnames[i][1]) && ph == 0 && lq_gguf_hf_shift(a, hf) == 0,
                  "%s -> %s (%d)", pnames[i][0], hf, ph);
    }
    CHECK(a && lq_gguf_hf_tensor_is_config(a, "rope_factors_long.weight") &&
          lq_gguf_hf_tensor_is_config(a, "rope_factors_short.weight") &&
          !lq_gguf_hf_tensor_is_config(a, "blk.1.ffn_up.weight"));
    lq_gguf_close(gg);
    free(f);
    /* experts: a llama with expert_count is Mixtral (block_sparse_moe names), qwen2moe keeps
     * Qwen's with the shared expert; the stacked ffn_*_exps name one tensor per expert ('*') */
    for (int mi = 0; mi < 2; mi++) {
        tg_gguf gm = {0};
        tg_kv_str(&gm, "general.architecture", mi ? "qwen2moe" : "llama");
        if (!mi)
            tg_kv_u32(&gm, "llama.expert_count", 8);
        m = tg_finish(&gm, &f);
        CHECK_OK(lq_gguf_open_memory(f, m, "moe.gguf", &gg, &e));
        CHECK_OK(lq_gguf_hf_arch(gg, &a, &e));
        CHECK(a && !strcmp(a->model_type, mi ? "qwen2_moe" : "mixtral") && a->moe == mi + 1);
        const char *mnames[2][5][2] = {
            {{"blk.0.ffn_gate_inp.weight", "model.layers.0.block_sparse_moe.gate.weight"},
             {"blk.0.ffn_gate_exps.weight", "model.layers.0.block_sparse_moe.experts.*.w1.weight"},
             {"blk.0.ffn_up_exps.weight", "model.layers.0.block_sparse_moe.experts.*.w3.weight"},
             {"blk.0.ffn_down_exps.weight", "model.layers.0.block_sparse_moe.experts.*.w2.weight"},
             {"blk.0.attn_k.weight", "model.layers.0.self_attn.k_proj.weight"}},
            {{"blk.0.ffn_gate_inp.weight", "model.layers.0.mlp.gate.weight"},
             {"blk.0.ffn_down_exps.weight", "model.layers.0.mlp.experts.*.down_proj.weight"},
             {"blk.0.ffn_up_shexp.weight", "model.layers.0.mlp.shared_expert.up_proj.weight"},
             {"blk.0.ffn_gate_inp_shexp.weight", "model.layers.0.mlp.shared_expert_gate.weight"},
             {"blk.0.attn_q.bias", "model.layers.0.self_attn.q_proj.bias"}}};
        for (int i = 0; a && i < 5; i++) {
            char hf[256];
            int  ph = -1;
            CHECK(lq_gguf_hf_tensor_name(gg, a, mnames[mi][i][0], hf, sizeof hf, &ph));
            CHECK_MSG(!strcmp(hf, mnames[mi][i][1]) &&
                          lq_gguf_hf_is_stacked(hf) == (strchr(mnames[mi][i][1], '*') != NULL),
                      "%s -> %s", mnames[mi][i][0], hf);
        }
        char hf[256];
        int  ph;
        if (!mi) /* Mixtral has no shared expert */
            CHECK(a && !lq_gguf_hf_tensor_name(gg, a, "blk.0.ffn_gate_shexp.weight", hf, sizeof hf,
                                               &ph));
        lq_gguf_close(gg);
        free(f);
    }
    /* another architecture: the error names it and the supported ones */
    tg_gguf g2 = {0};
    tg_kv_str(&g2, "general.architecture", "mamba");
    m = tg_finish(&g2, &f);
    CHECK_OK(lq_gguf_open_memory(f, m, "g.gguf", &gg, &e));
    CHECK_EQ_INT(lq_gguf_hf_arch(gg, &a, &e), LQ_ERR_UNSUPPORTED_ARCH);
    CHECK(strstr(e.msg, "unsupported architecture mamba") != NULL &&
          strstr(e.msg, "gemma3") != NULL);
    lq_gguf_close(gg);
    free(f);
}

/* ------------------------------------------------------------------------------------------ */
/* Tokenizer rebuilt from a BPE vocabulary                                                      */
/* ------------------------------------------------------------------------------------------ */
static void test_bpe_vocab(void) {
    /* byte-level pieces: "a", "b", "ab", "Ġ" (space), "Ġab", digits; merges a b, Ġ ab */
    const char   *toks[]   = {"<|endoftext|>",
                              "a",
                              "b",
                              "\xc4\xa0",
                              "ab",
                              "\xc4\xa0"
                                  "ab",
                              "1",
                              "2",
                              "12",
                              "x"};
    const char   *merges[] = {"a b", "\xc4\xa0 ab", "1 2"};
    const int32_t tt[]     = {3, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    const char   *pres[]   = {"smollm", "gpt-2", "no-such-pre"};
    for (int pi = 0; pi < 3; pi++) {
        tg_gguf g = {0};
        tg_kv_str(&g, "tokenizer.ggml.model", "gpt2");
        tg_kv_str(&g, "tokenizer.ggml.pre", pres[pi]);
        tg_kv_strs(&g, "tokenizer.ggml.tokens", toks, NULL, 10);
        tg_kv_arr(&g, "tokenizer.ggml.token_type", 5, tt, 4, 10);
        tg_kv_strs(&g, "tokenizer.ggml.merges", merges, NULL, 3);
        tg_kv_u32(&g, "tokenizer.ggml.eos_token_id", 0);
        uint8_t *f  = NULL;
        size_t   m  = tg_finish(&g, &f);
        lq_gguf *gg = NULL;
        lq_err   e  = {0};
        char    *js = NULL;
        int64_t  jl = 0;
        CHECK_OK(lq_gguf_open_memory(f, m, "bpe.gguf", &gg, &e));
        lq_status s = lq_gguf_hf_file(gg, "tokenizer.json", &js, &jl, &e);
        if (pi == 2) {
            CHECK_EQ_INT(s, LQ_ERR_GGUF_TOKENIZER);
            CHECK(strstr(e.msg, "no-such-pre") != NULL);
        } else {
            char   *sm = NULL;
            int64_t sl = 0;
            CHECK_OK(s);
            /* a BPE vocabulary travels as tokenizer.json only */
            CHECK_EQ_INT(lq_gguf_hf_file(gg, "tokenizer.model", &sm, &sl, &e), LQ_ERR_NOT_FOUND);
            free(sm);
        }
        if (s == LQ_OK) {
            lq_tokenizer *t = NULL;
            CHECK_OK(lq_tok_load_memory(js, (size_t)jl, LQ_TOK_HF_JSON, "bpe.json", &t, &e));
            if (t) {
                int32_t *ids = NULL;
                int64_t  n   = 0;
                CHECK_OK(lq_tok_encode(t, "ab 12ab", 7, lq_tok_adds_bos(t), &ids, &n, &e));
                /* smollm splits digits one by one: "ab", "Ġab"? no: " 12ab" -> Ġ,1,2,ab */
                const int32_t  smol[] = {4, 3, 6, 7, 4}, gpt2[] = {4, 3, 8, 4};
                const int32_t *want = pi == 0 ? smol : gpt2;
                const int64_t  wn   = pi == 0 ? 5 : 4;
                int            same = n == wn;
                for (int64_t i = 0; same && i < n; i++)
                    same = ids[i] == want[i];
                CHECK_MSG(same, "pre %s: %lld ids, first %d", pres[pi], (long long)n,
                          n ? ids[0] : -1);
                CHECK_EQ_INT(lq_tok_adds_bos(t), 0);
                CHECK_EQ_INT(lq_tok_eos_id(t), 0);
                free(ids);
            }
            lq_tok_free(t);
        }
        free(js);
        lq_gguf_close(gg);
        free(f);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* A whole model: the demo stories260K as GGUF                                                  */
/* ------------------------------------------------------------------------------------------ */
static const char *hf_to_gguf(const char *hf, char *buf, size_t cap, int *which) {
    static const struct {
        const char *hf, *gg;
        int         w; /* 1 q, 2 k */
    } map[] = {{"input_layernorm", "attn_norm", 0}, {"post_attention_layernorm", "ffn_norm", 0},
               {"self_attn.q_proj", "attn_q", 1},   {"self_attn.k_proj", "attn_k", 2},
               {"self_attn.v_proj", "attn_v", 0},   {"self_attn.o_proj", "attn_output", 0},
               {"mlp.gate_proj", "ffn_gate", 0},    {"mlp.up_proj", "ffn_up", 0},
               {"mlp.down_proj", "ffn_down", 0}};
    *which  = 0;
    if (!strcmp(hf, "model.embed_tokens.weight"))
        return "token_embd.weight";
    if (!strcmp(hf, "model.norm.weight"))
        return "output_norm.weight";
    int layer, used = 0;
    if (sscanf(hf, "model.layers.%d.%n", &layer, &used) != 1 || !used)
        return NULL;
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        size_t l = strlen(map[i].hf);
        if (!strncmp(hf + used, map[i].hf, l) && hf[used + l] == '.') {
            snprintf(buf, cap, "blk.%d.%s%s", layer, map[i].gg, hf + used + l);
            *which = map[i].w;
            return buf;
        }
    }
    return NULL;
}

static void test_model(void) {
    const char *src = getenv("LQ_SRC"), *tmp = getenv("LQ_TMP");
    if (!src || !tmp) {
        printf("SKIP part: LQ_SRC/LQ_TMP not set (stories260K as GGUF)\n");
        return;
    }
    char dir[2048], path[2300];
    snprintf(dir, sizeof dir, "%s/examples/stories260K", src);
    lq_model *hf = NULL;
    lq_err    e  = {0};
    CHECK_OK(lq_model_open(dir, &hf, &e));
    lq_tokenizer *tok = NULL;
    CHECK_OK(lq_tok_load_dir(dir, &tok, &e));
    if (!hf || !tok) {
        lq_model_free(hf);
        lq_tok_free(tok);
        return;
    }
    const lq_model_config *c = &hf->cfg;
    tg_gguf                g = {0};
    tg_kv_str(&g, "general.architecture", "llama");
    tg_kv_u32(&g, "llama.block_count", (uint32_t)c->num_layers);
    tg_kv_u32(&g, "llama.embedding_length", (uint32_t)c->hidden_size);
    tg_kv_u32(&g, "llama.feed_forward_length", (uint32_t)c->intermediate_size);
    tg_kv_u32(&g, "llama.attention.head_count", (uint32_t)c->num_heads);
    tg_kv_u32(&g, "llama.attention.head_count_kv", (uint32_t)c->num_kv_heads);
    tg_kv_u32(&g, "llama.context_length", (uint32_t)c->max_position_embeddings);
    tg_kv_u32(&g, "llama.rope.dimension_count", (uint32_t)c->head_dim);
    tg_kv_f32(&g, "llama.attention.layer_norm_rms_epsilon", (float)c->rms_norm_eps);
    tg_kv_f32(&g, "llama.rope.freq_base", (float)c->rope_theta);
    tg_kv_str(&g, "tokenizer.ggml.model", "llama");
    const int64_t nv     = lq_tok_vocab_size(tok);
    const char  **pieces = calloc((size_t)nv, sizeof *pieces);
    float        *scores = calloc((size_t)nv, sizeof *scores);
    int32_t      *types  = calloc((size_t)nv, sizeof *types);
    for (int64_t i = 0; i < nv; i++) {
        pieces[i] = lq_tok_piece(tok, (int32_t)i);
        scores[i] = tok->score[i];
        types[i]  = i == 0 ? 2 : i < 3 ? 3 : i < 259 ? 6 : 1;
    }
    tg_kv_strs(&g, "tokenizer.ggml.tokens", pieces, NULL, (uint64_t)nv);
    tg_kv_arr(&g, "tokenizer.ggml.scores", 6, scores, 4, (uint64_t)nv);
    tg_kv_arr(&g, "tokenizer.ggml.token_type", 5, types, 4, (uint64_t)nv);
    tg_kv_u32(&g, "tokenizer.ggml.bos_token_id", 1);
    tg_kv_u32(&g, "tokenizer.ggml.eos_token_id", 2);
    /* tensors: permuted q/k, alternately F32 and F16 */
    lq_st *st = hf->st;
    void  *blobs[256];
    int    nblob = 0;
    char   names[256][128];
    for (int64_t i = 0; i < lq_st_count(st) && nblob < 256; i++) {
        const lq_st_tensor *t = lq_st_get(st, i);
        int                 which;
        const char         *gn = hf_to_gguf(t->name, names[nblob], sizeof names[0], &which);
        CHECK_MSG(gn != NULL, "no GGUF name for %s", t->name);
        if (!gn)
            continue;
        if (gn != names[nblob])
            snprintf(names[nblob], sizeof names[0], "%s", gn);
        float *w = malloc(sizeof(float) * (size_t)t->numel);
        lq_st_read_f32(st, t->name, t->ndim, t->shape, w, &e);
        const int64_t n = t->shape[0], k = t->ndim > 1 ? t->shape[1] : 1;
        if (which) {
            float *p = malloc(sizeof(float) * (size_t)t->numel);
            llamacpp_permute(w, p, n, k, (int)(which == 1 ? c->num_heads : c->num_kv_heads));
            free(w);
            w = p;
        }
        const uint64_t ne[2] = {(uint64_t)(t->ndim == 2 ? k : n), (uint64_t)n};
        if (nblob % 2 && t->ndim == 2) { /* F16: exact for this F16 checkpoint */
            uint16_t *h = malloc(2 * (size_t)t->numel);
            lq_f32_to_f16_array(w, t->numel, h);
            free(w);
            blobs[nblob] = h;
            tg_tensor(&g, names[nblob], 1, 2, ne, h, 2 * (size_t)t->numel);
        } else {
            blobs[nblob] = w;
            tg_tensor(&g, names[nblob], 0, (uint32_t)t->ndim, ne, w, 4 * (size_t)t->numel);
        }
        nblob++;
    }
    uint8_t *file = NULL;
    size_t   fn   = tg_finish(&g, &file);
    snprintf(path, sizeof path, "%s/stories260K.gguf", tmp);
    char mk[2400];
    snprintf(mk, sizeof mk, "mkdir -p '%s'", tmp);
    CHECK(system(mk) == 0);
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(file, 1, fn, f) == fn);
    if (f)
        fclose(f);
    free(file);
    for (int i = 0; i < nblob; i++)
        free(blobs[i]);
    free(pieces);
    free(scores);
    free(types);

    /* config, tensors, tokenizer and logits through the GGUF path */
    lq_model *gm = NULL;
    CHECK_OK(lq_model_open(path, &gm, &e));
    if (gm) {
        const lq_model_config *d = &gm->cfg;
        CHECK(d->num_layers == c->num_layers && d->hidden_size == c->hidden_size &&
              d->num_heads == c->num_heads && d->num_kv_heads == c->num_kv_heads &&
              d->head_dim == c->head_dim && d->vocab_size == c->vocab_size &&
              d->tie_word_embeddings == 1 && d->rms_norm_eps == c->rms_norm_eps &&
              d->rope_theta == c->rope_theta && d->bos_token_id == 1);
        lq_tokenizer *gt = NULL;
        CHECK_OK(lq_tok_load_source(gm->src, &gt, &e));
        const char *text = "Once upon a time, there was a little girl named Lily. She liked 42 "
                           "cats and    spaces.";
        int32_t    *a = NULL, *b = NULL;
        int64_t     na = 0, nb = 0;
        if (gt) {
            CHECK_OK(lq_tok_encode(tok, text, (int64_t)strlen(text), 1, &a, &na, &e));
            CHECK_OK(lq_tok_encode(gt, text, (int64_t)strlen(text), 1, &b, &nb, &e));
            CHECK_MSG(na == nb && na > 10 && !memcmp(a, b, (size_t)na * 4),
                      "GGUF tokenizer: %lld ids vs %lld", (long long)nb, (long long)na);
        }
        /* logits of the same sequence, through both loaders */
        lq_fwd_ws    *ws1 = NULL, *ws2 = NULL;
        const int64_t T = na < 40 ? na : 40;
        CHECK_OK(lq_model_load_all(hf, &e));
        CHECK_OK(lq_model_load_all(gm, &e));
        CHECK_OK(lq_fwd_ws_create(c, T, T, &ws1, &e));
        CHECK_OK(lq_fwd_ws_create(c, T, T, &ws2, &e));
        float *h1 = malloc(sizeof(float) * (size_t)(T * c->hidden_size));
        float *h2 = malloc(sizeof(float) * (size_t)(T * c->hidden_size));
        float *l1 = malloc(sizeof(float) * (size_t)(T * c->vocab_size));
        float *l2 = malloc(sizeof(float) * (size_t)(T * c->vocab_size));
        if (a && ws1 && ws2) {
            CHECK_OK(lq_model_embed(hf, a, T, h1, &e));
            CHECK_OK(lq_model_embed(gm, a, T, h2, &e));
            for (int64_t i = 0; i < c->num_layers; i++) {
                CHECK_OK(lq_layer_forward(hf, &hf->layers[i], h1, 1, T, NULL, NULL, -1, ws1, &e));
                CHECK_OK(lq_layer_forward(gm, &gm->layers[i], h2, 1, T, NULL, NULL, -1, ws2, &e));
            }
            CHECK_OK(lq_model_logits(hf, h1, T, l1, ws1, &e));
            CHECK_OK(lq_model_logits(gm, h2, T, l2, ws2, &e));
            CHECK_MSG(!memcmp(l1, l2, sizeof(float) * (size_t)(T * c->vocab_size)),
                      "logits through the GGUF file differ from the directory's");
        }
        free(h1), free(h2), free(l1), free(l2);
        lq_fwd_ws_free(ws1);
        lq_fwd_ws_free(ws2);
        free(a);
        free(b);
        lq_tok_free(gt);
    }
    lq_model_free(gm);
    lq_model_free(hf);
    lq_tok_free(tok);
}

/* --dump: every tensor decoded, GGUF names, stored row order, F32 safetensors. */
static int dump_mode(const char *gguf, const char *out) {
    lq_gguf      *g = NULL;
    lq_err        e = {0};
    lq_st_writer *w = NULL;
    if (lq_gguf_open(gguf, &g, &e) != LQ_OK)
        goto fail;
    mkdir(out, 0755);
    if (lq_st_writer_create(out, 0, &w, &e) != LQ_OK)
        goto fail;
    for (int64_t i = 0; i < lq_gguf_tensor_count(g); i++) {
        const lq_gguf_tensor *t  = lq_gguf_tensor_get(g, i);
        int                   dt = lq_dtype_from_ggml(t->ggml_type);
        if (dt < 0) {
            fprintf(stderr, "%s: type %s not decodable\n", t->name,
                    lq_ggml_type_name(t->ggml_type));
            goto fail;
        }
        float  *v = malloc(sizeof(float) * (size_t)t->numel);
        int64_t shape[4];
        for (int d = 0; d < t->ndim; d++)
            shape[d] = t->ne[t->ndim - 1 - d];
        if (!v || lq_convert_to_f32((lq_dtype)dt, t->data, t->numel, v) < 0 ||
            lq_st_writer_add(w, t->name, LQ_DT_F32, t->ndim, shape, v, &e) != LQ_OK) {
            free(v);
            goto fail;
        }
        free(v);
    }
    if (lq_st_writer_finish(w, &e) != LQ_OK)
        goto fail;
    lq_st_writer_free(w);
    lq_gguf_close(g);
    return 0;
fail:
    fprintf(stderr, "dump: %s\n", e.msg);
    lq_st_writer_free(w);
    lq_gguf_close(g);
    return 1;
}

/* --seeds DIR: small valid GGUF files for the fuzz corpus (tests/fuzz/corpus/gguf). */
static int seeds_mode(const char *dir) {
    char     p[4096];
    uint8_t *f = NULL;
    size_t   n = good_file(&f);
    snprintf(p, sizeof p, "%s/kv_and_tensors.gguf", dir);
    FILE *o = fopen(p, "wb");
    if (o)
        fwrite(f, 1, n, o), fclose(o);
    free(f);
    /* a tiny llama with a BPE vocabulary: config, names, tokenizer.json paths */
    tg_gguf        g        = {0};
    const char    *toks[]   = {"<|endoftext|>", "a", "b", "ab", "\xc4\xa0", "1"};
    const char    *merges[] = {"a b"};
    const int32_t  tt[]     = {3, 1, 1, 1, 1, 1};
    static float   w[64 * 2];
    const uint64_t ne_e[2] = {4, 6}, ne_n[1] = {4}, ne_q[2] = {4, 4};
    tg_kv_str(&g, "general.architecture", "llama");
    tg_kv_u32(&g, "llama.block_count", 1);
    tg_kv_u32(&g, "llama.embedding_length", 4);
    tg_kv_u32(&g, "llama.feed_forward_length", 8);
    tg_kv_u32(&g, "llama.attention.head_count", 2);
    tg_kv_u32(&g, "llama.attention.head_count_kv", 1);
    tg_kv_f32(&g, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    tg_kv_str(&g, "tokenizer.ggml.model", "gpt2");
    tg_kv_str(&g, "tokenizer.ggml.pre", "smollm");
    tg_kv_strs(&g, "tokenizer.ggml.tokens", toks, NULL, 6);
    tg_kv_arr(&g, "tokenizer.ggml.token_type", 5, tt, 4, 6);
    tg_kv_strs(&g, "tokenizer.ggml.merges", merges, NULL, 1);
    tg_tensor(&g, "token_embd.weight", 0, 2, ne_e, w, 4 * 24);
    tg_tensor(&g, "output_norm.weight", 0, 1, ne_n, w, 16);
    tg_tensor(&g, "blk.0.attn_q.weight", 0, 2, ne_q, w, 64);
    n = tg_finish(&g, &f);
    snprintf(p, sizeof p, "%s/tiny_llama_bpe.gguf", dir);
    o = fopen(p, "wb");
    if (o)
        fwrite(f, 1, n, o), fclose(o);
    free(f);
    /* the same with a SentencePiece vocabulary (tokenizer.model path) */
    tg_gguf       g2   = {0};
    const char   *sp[] = {"<unk>", "<s>", "</s>",
                          "\xe2\x96\x81"
                            "a",
                          "b"};
    const float   sc[] = {0, 0, 0, -1, -2};
    const int32_t st[] = {2, 3, 3, 1, 1};
    tg_kv_str(&g2, "general.architecture", "llama");
    tg_kv_str(&g2, "tokenizer.ggml.model", "llama");
    tg_kv_strs(&g2, "tokenizer.ggml.tokens", sp, NULL, 5);
    tg_kv_arr(&g2, "tokenizer.ggml.scores", 6, sc, 4, 5);
    tg_kv_arr(&g2, "tokenizer.ggml.token_type", 5, st, 4, 5);
    n = tg_finish(&g2, &f);
    snprintf(p, sizeof p, "%s/spm_vocab.gguf", dir);
    o = fopen(p, "wb");
    if (o)
        fwrite(f, 1, n, o), fclose(o);
    free(f);
    return 0;
}

/* A qwen2moe file through lq_source: each expert's slice of the stacked ffn_gate_exps is a
 * tensor of its own with its own bytes; a stacked name on a 2-D tensor is refused. */
static void test_moe_source(void) {
    const char *tmp = getenv("LQ_TMP");
    if (!tmp) {
        printf("SKIP part: LQ_TMP not set (experts through lq_source)\n");
        return;
    }
    mkdir(tmp, 0777);
    for (int bad = 0; bad < 2; bad++) {
        tg_gguf g = {0};
        tg_kv_str(&g, "general.architecture", "qwen2moe");
        tg_kv_u32(&g, "qwen2moe.block_count", 1);
        tg_kv_u32(&g, "qwen2moe.embedding_length", 8);
        tg_kv_u32(&g, "qwen2moe.feed_forward_length", 8);
        tg_kv_u32(&g, "qwen2moe.attention.head_count", 2);
        tg_kv_u32(&g, "qwen2moe.attention.head_count_kv", 1);
        tg_kv_u32(&g, "qwen2moe.vocab_size", 4);
        tg_kv_u32(&g, "qwen2moe.expert_count", 2);
        tg_kv_u32(&g, "qwen2moe.expert_used_count", 1);
        tg_kv_u32(&g, "qwen2moe.expert_feed_forward_length", 4);
        float w[2 * 4 * 8];
        for (int i = 0; i < 64; i++)
            w[i] = (float)i;
        const uint64_t ne3[3] = {8, 4, 2}, ne2[2] = {8, 8};
        tg_tensor(&g, "blk.0.ffn_gate_exps.weight", 0, bad ? 2 : 3, bad ? ne2 : ne3, w, sizeof w);
        uint8_t *f = NULL;
        size_t   m = tg_finish(&g, &f);
        char     path[4200];
        snprintf(path, sizeof path, "%s/moe%d.gguf", tmp, bad);
        FILE *fp = fopen(path, "wb");
        CHECK(fp != NULL);
        if (fp) {
            fwrite(f, 1, m, fp);
            fclose(fp);
        }
        free(f);
        lq_source *src = NULL;
        lq_err     e   = {0};
        lq_status  st  = lq_source_open(path, &src, &e);
        if (bad) {
            CHECK_EQ_INT(st, LQ_ERR_GGUF_FORMAT);
            CHECK(strstr(e.msg, "stack of experts") != NULL);
        } else if (st == LQ_OK) {
            const int64_t shape[2] = {4, 8};
            float         got[32];
            CHECK_OK(lq_st_read_f32(lq_source_st(src),
                                    "model.layers.0.mlp.experts.1.gate_proj.weight", 2, shape, got,
                                    &e));
            CHECK(got[0] == 32.0f && got[31] == 63.0f);
            CHECK(lq_source_model_config(src)->num_experts == 2 &&
                  lq_source_model_config(src)->moe_intermediate == 4);
            /* experts quantize (tests/py/test_moe_quant.py); this file holds only the experts'
             * gate, so the job stops on the first missing tensor, nothing written */
            char       out[4300];
            lq_params *p = lq_params_create();
            snprintf(out, sizeof out, "%s/moe_rtn", tmp);
            CHECK_EQ_INT(lq_quantize("rtn", path, out, p, NULL, NULL, &e),
                         LQ_ERR_ST_MISSING_TENSOR);
            CHECK(strstr(e.msg, "model.embed_tokens.weight") != NULL);
            struct stat sb;
            CHECK(stat(out, &sb) != 0);
            lq_params_free(p);
        } else {
            CHECK_MSG(0, "%s", e.msg);
        }
        lq_source_close(src);
    }
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "--dump"))
        return dump_mode(argv[2], argv[3]);
    if (argc == 3 && !strcmp(argv[1], "--seeds"))
        return seeds_mode(argv[2]);
    test_decoders();
    test_container();
    test_permute_names();
    test_bpe_vocab();
    test_model();
    test_moe_source();
    return lq_test_end("gguf");
}
