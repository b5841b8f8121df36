/* llama-quantize's file types and per-tensor type rules (lq_gguf_write.h), after llama.cpp's
 * src/llama-quant.cpp (MIT): tensor_allows_quantization, tensor_get_category,
 * llama_tensor_get_type_impl and tensor_type_fallback, for the file types offered here (the
 * legacy and k-quant mixes, IQ4_NL and IQ4_XS; the 1-3-bit IQ mixes need encoders llmquant does
 * not have). */
#include "lq_gguf_write.h"

#include "lq_dtype.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum { /* ggml.h enum ggml_type */
    T_F32 = 0, T_F16 = 1, T_Q4_0 = 2, T_Q4_1 = 3, T_Q5_0 = 6, T_Q5_1 = 7, T_Q8_0 = 8,
    T_Q2_K = 10, T_Q3_K = 11, T_Q4_K = 12, T_Q5_K = 13, T_Q6_K = 14, T_IQ4_NL = 20,
    T_IQ4_XS = 23, T_BF16 = 30,
};

enum { /* llama.h enum llama_ftype */
    F_ALL_F32 = 0, F_F16 = 1, F_Q4_0 = 2, F_Q4_1 = 3, F_Q8_0 = 7, F_Q5_0 = 8, F_Q5_1 = 9,
    F_Q2_K = 10, F_Q3_K_S = 11, F_Q3_K_M = 12, F_Q3_K_L = 13, F_Q4_K_S = 14, F_Q4_K_M = 15,
    F_Q5_K_S = 16, F_Q5_K_M = 17, F_Q6_K = 18, F_IQ4_NL = 25, F_IQ4_XS = 30, F_BF16 = 32,
};

static const lq_gguf_ftype k_ftypes[] = {
    {"Q4_0", F_Q4_0, T_Q4_0},     {"Q4_1", F_Q4_1, T_Q4_1},     {"Q5_0", F_Q5_0, T_Q5_0},
    {"Q5_1", F_Q5_1, T_Q5_1},     {"Q2_K", F_Q2_K, T_Q2_K},     {"Q3_K_S", F_Q3_K_S, T_Q3_K},
    {"Q3_K_M", F_Q3_K_M, T_Q3_K}, {"Q3_K", F_Q3_K_M, T_Q3_K},   {"Q3_K_L", F_Q3_K_L, T_Q3_K},
    {"Q4_K_S", F_Q4_K_S, T_Q4_K}, {"Q4_K_M", F_Q4_K_M, T_Q4_K}, {"Q4_K", F_Q4_K_M, T_Q4_K},
    {"Q5_K_S", F_Q5_K_S, T_Q5_K}, {"Q5_K_M", F_Q5_K_M, T_Q5_K}, {"Q5_K", F_Q5_K_M, T_Q5_K},
    {"Q6_K", F_Q6_K, T_Q6_K},     {"Q8_0", F_Q8_0, T_Q8_0},     {"F16", F_F16, T_F16},
    {"IQ4_NL", F_IQ4_NL, T_IQ4_NL}, {"IQ4_XS", F_IQ4_XS, T_IQ4_XS},
    {"BF16", F_BF16, T_BF16},     {"F32", F_ALL_F32, T_F32},
};
#define N_FTYPES (sizeof k_ftypes / sizeof k_ftypes[0])

const lq_gguf_ftype *lq_gguf_ftype_find(const char *name) {
    for (size_t i = 0; name && i < N_FTYPES; i++)
        if (!strcasecmp(k_ftypes[i].name, name))
            return &k_ftypes[i];
    return NULL;
}

const char *lq_gguf_ftype_list(void) {
    return "Q4_0|Q4_1|Q5_0|Q5_1|Q8_0|Q2_K|Q3_K_S|Q3_K_M|Q3_K_L|Q4_K_S|Q4_K_M|Q5_K_S|Q5_K_M|Q6_K|"
           "IQ4_NL|IQ4_XS|F16|BF16|F32 (Q3_K, Q4_K, Q5_K: the _M mixes)";
}

typedef enum cat {
    C_OTHER, C_OUTPUT, C_TOKEN_EMBD, C_ATTN_QKV, C_ATTN_KV_B, C_ATTN_V, C_ATTN_K, C_ATTN_Q,
    C_ATTN_OUTPUT, C_FFN_UP, C_FFN_GATE, C_FFN_DOWN,
} cat;

static int has(const char *s, const char *sub) {
    return strstr(s, sub) != NULL;
}

static cat category(const char *n) {
    if (!strcmp(n, "output.weight"))
        return C_OUTPUT;
    if (!strcmp(n, "token_embd.weight") || !strcmp(n, "per_layer_token_embd.weight"))
        return C_TOKEN_EMBD;
    static const struct { const char *sub; cat c; } k[] = {
        {"attn_qkv.weight", C_ATTN_QKV}, {"attn_kv_b.weight", C_ATTN_KV_B},
        {"attn_v.weight", C_ATTN_V},     {"attn_k.weight", C_ATTN_K},
        {"attn_q.weight", C_ATTN_Q},     {"attn_output.weight", C_ATTN_OUTPUT},
        {"ffn_up", C_FFN_UP},            {"ffn_gate", C_FFN_GATE},
        {"ffn_down", C_FFN_DOWN},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (has(n, k[i].sub))
            return k[i].c;
    return C_OTHER;
}

static int is_attn_v(cat c) {
    return c == C_ATTN_V || c == C_ATTN_QKV || c == C_ATTN_KV_B;
}

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* ggml_n_dims: dimensions up to the last one above 1 (at least 1). */
static int n_dims(const lq_gguf_tensor *t) {
    int nd = 1;
    for (int d = 1; d < t->ndim; d++)
        if (t->ne[d] > 1)
            nd = d + 1;
    return nd;
}

static int allows_quantization(const lq_gguf_tensor *t) {
    const char *n = t->name;
    if (n_dims(t) < 2 || !ends_with(n, "weight"))
        return 0;
    static const char *const never[] = {
        "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel",
        "per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight",
        "indexer.q_proj.weight", "time_mix_first.weight", "time_mix_w0.weight",
        "time_mix_w1.weight", "time_mix_w2.weight", "time_mix_v0.weight", "time_mix_v1.weight",
        "time_mix_v2.weight", "time_mix_a0.weight", "time_mix_a1.weight", "time_mix_a2.weight",
        "time_mix_g1.weight", "time_mix_g2.weight", "time_mix_decay_w1.weight",
        "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight", "attn_rel_b.weight",
        ".position_embd", "sam.pos_embd", "sam.neck.", "sam.net_", ".rel_pos", ".patch_embd",
        ".patch_merger", "a.rvq.codebook", "mm.a.code_embd",
    };
    for (size_t i = 0; i < sizeof never / sizeof never[0]; i++)
        if (has(n, never[i]))
            return 0;
    return strcmp(n, "position_embd.weight") && strcmp(n, "token_types.weight");
}

typedef struct mix {
    int         ftype, has_imatrix;
    const char *arch;
    int         n_layer, n_gqa, n_expert, is_70b, tied;
    int         n_attn_v, i_attn_v, i_ffn_down;
    int64_t     n_fallback;
} mix;

static int more_bits(int i, int n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

static int is_falcon(const mix *m) {
    return !strcmp(m->arch, "falcon");
}

/* llama_tensor_get_type_impl, for the file types of k_ftypes (the IQ branches cannot apply). */
static uint32_t rules(mix *m, uint32_t t, const lq_gguf_tensor *x, cat c) {
    const int f = m->ftype;
    if (c == C_OUTPUT || (m->tied && c == C_TOKEN_EMBD)) {
        int bb;
        if (is_falcon(m) || x->ne[0] % lq_ggml_type_block(t, &bb))
            t = T_Q8_0;
        else if (t != T_Q8_0)
            t = T_Q6_K;
    } else if (c == C_TOKEN_EMBD) {
        /* only the IQ / ternary mixes change it */
    } else if (is_attn_v(c)) {
        if (f == F_Q2_K)
            t = m->n_gqa >= 4 ? T_Q4_K : T_Q3_K;
        else if (f == F_Q3_K_M)
            t = m->i_attn_v < 2 ? T_Q5_K : T_Q4_K;
        else if (f == F_Q3_K_L)
            t = T_Q5_K;
        else if ((f == F_IQ4_NL || f == F_IQ4_XS) && m->n_gqa >= 4)
            t = T_Q5_K;
        else if ((f == F_Q4_K_M || f == F_Q5_K_M) && more_bits(m->i_attn_v, m->n_attn_v))
            t = T_Q6_K;
        else if (f == F_Q4_K_S && m->i_attn_v < 4)
            t = T_Q5_K;
        if (m->is_70b && (t == T_Q3_K || t == T_Q4_K))
            t = T_Q5_K;
        if (m->n_expert == 8)
            t = T_Q8_0;
        m->i_attn_v++;
    } else if (c == C_ATTN_K) {
        if (m->n_expert == 8)
            t = T_Q8_0;
    } else if (c == C_FFN_DOWN) {
        int il = m->i_ffn_down, nl = m->n_layer;
        if (m->n_expert > 1) /* experts are not in layer order: the layer from the name */
            if (sscanf(x->name, "blk.%d.", &il) != 1 || il < 0 || il >= nl)
                il = -1;
        if (il >= 0) {
            if (f == F_Q2_K)
                t = T_Q3_K;
            else if (f == F_Q3_K_M)
                t = il < nl / 16 ? T_Q5_K
                    : !is_falcon(m) || more_bits(il, nl) ? T_Q4_K : T_Q3_K;
            else if (f == F_Q3_K_L)
                t = is_falcon(m) ? T_Q4_K : T_Q5_K;
            else if (f == F_Q4_K_M) {
                if (is_falcon(m))
                    t = il < nl / 16 ? T_Q6_K : more_bits(il, nl) ? T_Q5_K : T_Q4_K;
                else if (more_bits(il, nl))
                    t = T_Q6_K;
            } else if (il < nl / 8 && (f == F_IQ4_NL || f == F_IQ4_XS) && !m->has_imatrix)
                t = T_Q5_K;
            else if (f == F_Q5_K_M && more_bits(il, nl))
                t = T_Q6_K;
            else if (f == F_Q4_K_S && !is_falcon(m) && il < nl / 8)
                t = T_Q5_K;
            else if ((f == F_Q4_0 || f == F_Q5_0) && m->has_imatrix && il < nl / 8)
                t = f == F_Q4_0 ? T_Q4_1 : T_Q5_1; /* llama.cpp's guard for the first layers */
        }
        m->i_ffn_down++;
    } else if (c == C_ATTN_OUTPUT) {
        if (!is_falcon(m)) {
            if (m->n_expert == 8) {
                if (f == F_Q2_K || f == F_Q3_K_S || f == F_Q3_K_M || f == F_Q4_K_S ||
                    f == F_Q4_K_M || f == F_IQ4_NL || f == F_IQ4_XS)
                    t = T_Q5_K;
            } else if (f == F_Q2_K)
                t = T_Q3_K;
            else if (f == F_Q3_K_M)
                t = T_Q4_K;
            else if (f == F_Q3_K_L)
                t = T_Q5_K;
        } else if (f == F_Q3_K_L)
            t = T_Q4_K;
    } else if (c == C_ATTN_QKV) {
        if (f == F_Q3_K_M || f == F_Q3_K_L)
            t = T_Q4_K;
        else if (f == F_Q4_K_M)
            t = T_Q5_K;
        else if (f == F_Q5_K_M)
            t = T_Q6_K;
    }
    return t;
}

/* tensor_type_fallback: a row that is not a whole number of the type's blocks. */
static uint32_t fallback(mix *m, const lq_gguf_tensor *x, uint32_t t) {
    int bb;
    if (x->ne[0] % lq_ggml_type_block(t, &bb) == 0)
        return t;
    m->n_fallback++;
    switch (t) {
    case T_Q2_K: case T_Q3_K: t = T_Q4_0; break;
    case T_Q4_K: t = T_Q5_0; break;
    case T_Q5_K: t = T_Q5_1; break;
    case T_Q6_K: t = T_Q8_0; break;
    case T_IQ4_XS: t = T_IQ4_NL; break;
    default: break;
    }
    return x->ne[0] % lq_ggml_type_block(t, &bb) ? T_F16 : t;
}

static int is_quantized(uint32_t t) {
    return t != T_F32 && t != T_F16 && t != T_BF16;
}

int lq_gguf_layer_of(const char *name) {
    int l = -1;
    return sscanf(name, "blk.%d.", &l) == 1 ? l : -1;
}

typedef struct sort_key {
    int         layer; /* -1: not a layer's tensor */
    const char *name;
    int64_t     i;
} sort_key;

/* llama_model_loader's weight_name_comparer */
static int by_llama_order(const void *pa, const void *pb) {
    const sort_key *a = pa, *b = pb;
    return a->layer != b->layer ? (a->layer < b->layer ? -1 : 1) : strcmp(a->name, b->name);
}

static bool arch_key(const lq_gguf *g, const char *arch, const char *suffix, int64_t *v) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return lq_gguf_get_i64(g, key, v);
}

lq_status lq_gguf_plan_types(const lq_gguf *g, const lq_gguf_ftype *ft, int has_imatrix,
                             int64_t *order, uint32_t *types, int64_t *n_fallback, lq_err *err) {
    const char *path = lq_gguf_path(g);
    const char *as;
    int64_t     alen;
    char        arch[64];
    if (!lq_gguf_get_str(g, "general.architecture", &as, &alen) || alen <= 0 ||
        alen >= (int64_t)sizeof arch)
        LQ_FAIL(err, LQ_ERR_UNSUPPORTED, "%s: no general.architecture", path);
    memcpy(arch, as, (size_t)alen);
    arch[alen] = 0;
    int64_t nl = 0, nh = 0, nkv = 0, ne = 0;
    if (!arch_key(g, arch, "block_count", &nl) || nl < 1 || nl > 65536)
        LQ_FAIL(err, LQ_ERR_UNSUPPORTED, "%s: no %s.block_count", path, arch);
    /* n_gqa() of layer 0; per-layer head counts (arrays) read their first element */
    char key[160];
    snprintf(key, sizeof key, "%s.attention.head_count", arch);
    const lq_gguf_kv *kh = lq_gguf_find(g, key);
    snprintf(key, sizeof key, "%s.attention.head_count_kv", arch);
    const lq_gguf_kv *kk = lq_gguf_find(g, key);
    if (kh && !(kh->type == LQ_GGUF_ARRAY ? lq_gguf_arr_i64(kh, 0, &nh) : lq_gguf_get_i64(g, kh->key, &nh)))
        nh = 0;
    if (kk && !(kk->type == LQ_GGUF_ARRAY ? lq_gguf_arr_i64(kk, 0, &nkv) : lq_gguf_get_i64(g, kk->key, &nkv)))
        nkv = 0;
    if (!kk)
        nkv = nh; /* llama.cpp: head_count_kv defaults to head_count */
    arch_key(g, arch, "expert_count", &ne);
    mix m = {.ftype = ft->ftype, .has_imatrix = has_imatrix, .arch = arch, .n_layer = (int)nl,
             .n_gqa = nkv > 0 ? (int)(nh / nkv) : 0, .n_expert = (int)ne, .tied = 1};
    /* llama.cpp's LLM_TYPE_70B, the one model size its rules look at */
    m.is_70b = (nl == 80 && (!strcmp(arch, "qwen2") || !strcmp(arch, "deci") ||
                             !strcmp(arch, "olmo") || (!strcmp(arch, "llama") && nh != nkv))) ||
               (nl == 68 && !strcmp(arch, "jais2"));
    const int64_t nt = lq_gguf_tensor_count(g);
    sort_key     *keys = lq_malloc_n(nt > 0 ? nt : 1, sizeof *keys);
    if (!keys)
        LQ_FAIL(err, LQ_ERR_NOMEM, "%s: out of memory", path);
    for (int64_t i = 0; i < nt; i++) {
        const char *n = lq_gguf_tensor_get(g, i)->name;
        keys[i]       = (sort_key){lq_gguf_layer_of(n), n, i};
    }
    qsort(keys, (size_t)nt, sizeof *keys, by_llama_order);
    for (int64_t i = 0; i < nt; i++)
        order[i] = keys[i].i;
    free(keys);
    for (int64_t i = 0; i < nt; i++) {
        const cat c = category(lq_gguf_tensor_get(g, i)->name);
        m.n_attn_v += is_attn_v(c);
        if (c == C_OUTPUT)
            m.tied = 0;
    }
    for (int64_t i = 0; i < nt; i++) {
        const lq_gguf_tensor *x = lq_gguf_tensor_get(g, order[i]);
        uint32_t              t = x->ggml_type;
        if (allows_quantization(x)) {
            t = ft->dflt;
            if (is_quantized(t))
                t = fallback(&m, x, rules(&m, t, x, category(x->name)));
        }
        types[i] = t;
    }
    *n_fallback = m.n_fallback;
    return LQ_OK;
}
