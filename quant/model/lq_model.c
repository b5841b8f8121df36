/* Llama-family model: opening and validating a checkpoint directory, loading layers (dense
 * float32 copies or quantized descriptors), RoPE tables, and the Linear forward.
 *
 * Validation happens entirely in lq_model_open, before any layer is loaded: every tensor the
 * config implies must be present, of a float dtype (or a valid quantized layout), of the shape
 * config.json implies and free of NaN/Inf, so a bad checkpoint fails in seconds instead of after
 * an hour of calibration. Layers are then loaded one at a time as copies (never views into the
 * mapping: AWQ folds its scales into the loaded weights in place). */
#include "lq_model.h"

#include "lq_ops.h"

#include "lq_dtype.h"
#include "lq_qformat.h"
#include "lq_json.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const k_lin_names[LQ_LIN_COUNT] = {
    [LQ_LIN_Q] = "self_attn.q_proj", [LQ_LIN_K] = "self_attn.k_proj",
    [LQ_LIN_V] = "self_attn.v_proj", [LQ_LIN_QKV] = "self_attn.qkv_proj",
    [LQ_LIN_O] = "self_attn.o_proj", [LQ_LIN_GATE] = "mlp.gate_proj",
    [LQ_LIN_UP] = "mlp.up_proj",     [LQ_LIN_GATE_UP] = "mlp.gate_up_proj",
    [LQ_LIN_DOWN] = "mlp.down_proj",
};

const char *lq_lin_name(lq_lin_id id) {
    return ((int)id >= 0 && id < LQ_LIN_COUNT) ? k_lin_names[id] : "?";
}

int lq_lin_present(const lq_model_config *c, lq_lin_id id) {
    switch (id) {
    case LQ_LIN_Q:
    case LQ_LIN_K:
    case LQ_LIN_V:
        return !c->fused;
    case LQ_LIN_GATE:
    case LQ_LIN_UP:
        return !c->fused && !c->num_experts;
    case LQ_LIN_QKV:
    case LQ_LIN_GATE_UP:
        return c->fused != 0;
    case LQ_LIN_O:
        return 1;
    case LQ_LIN_DOWN:
        return !c->num_experts;
    default:
        return 0;
    }
}

void lq_lin_shape(const lq_model_config *c, lq_lin_id id, int64_t *n, int64_t *k) {
    const int64_t d = c->hidden_size, qd = c->num_heads * c->head_dim,
                  kvd = c->num_kv_heads * c->head_dim, ff = c->intermediate_size;
    switch (id) {
    case LQ_LIN_Q:
        *n = qd, *k = d;
        break;
    case LQ_LIN_K:
    case LQ_LIN_V:
        *n = kvd, *k = d;
        break;
    case LQ_LIN_O:
        *n = d, *k = qd;
        break;
    case LQ_LIN_QKV:
        *n = qd + 2 * kvd, *k = d;
        break;
    case LQ_LIN_GATE:
    case LQ_LIN_UP:
        *n = ff, *k = d;
        break;
    case LQ_LIN_GATE_UP:
        *n = 2 * ff, *k = d;
        break;
    default:
        *n = d, *k = ff;
        break;
    }
}

int lq_lin_has_bias(const lq_model_config *c, lq_lin_id id) {
    if (id == LQ_LIN_Q || id == LQ_LIN_K || id == LQ_LIN_V || id == LQ_LIN_QKV)
        return c->qkv_bias || c->attention_bias;
    if (id == LQ_LIN_O)
        return c->attention_bias;
    return c->mlp_bias;
}

/* ---------------------------------------------------------------------------------------- */
/* Linear                                                                                     */
/* ---------------------------------------------------------------------------------------- */
void lq_linear_free(lq_linear *l) {
    if (!l)
        return;
    lq_qbuf_free(&l->buf);
    free(l->bias);
    l->bias = NULL;
}

float *lq_linear_dense_mut(lq_linear *l) {
    if (l->buf.q.format != LQ_FMT_DENSE || l->buf.q.dense_dtype != LQ_DENSE_F32)
        return NULL;
    for (int i = 0; i < l->buf.nmem; i++)
        if (l->buf.mem[i] == l->buf.q.dense)
            return l->buf.mem[i];
    return NULL;
}

size_t lq_linear_ws_size_ex(const lq_linear *l, int64_t m, unsigned flags) {
    return lq_linear_ws_cpu(&l->buf.q, m, flags);
}

size_t lq_linear_ws_size(const lq_linear *l, int64_t m) {
    return lq_linear_ws_size_ex(l, m, 0);
}

/* Every format, dense included, through its row of the kernel table (the cpu backend's). */
lq_status lq_linear_forward_ex(const lq_linear *l, const float *x, int64_t m, float *y, void *ws,
                               size_t ws_size, int nthreads, unsigned flags) {
    return lq_linear_forward_cpu(&l->buf.q, l->bias, x, m, y, ws, ws_size, nthreads, flags);
}

lq_status lq_linear_forward(const lq_linear *l, const float *x, int64_t m, float *y, void *ws,
                            size_t ws_size, int nthreads) {
    return lq_linear_forward_ex(l, x, m, y, ws, ws_size, nthreads, 0);
}

int lq_layer_vecs(const lq_model_config *cfg, lq_layer *l, lq_layer_vec out[LQ_LAYER_MAX_VECS]) {
    int n    = 0;
    out[n++] = (lq_layer_vec){"input_layernorm.weight", cfg->hidden_size, &l->attn_norm};
    if (cfg->post_norms) {
        out[n++] =
            (lq_layer_vec){"post_attention_layernorm.weight", cfg->hidden_size, &l->attn_post_norm};
        out[n++] =
            (lq_layer_vec){"pre_feedforward_layernorm.weight", cfg->hidden_size, &l->mlp_norm};
        out[n++] = (lq_layer_vec){"post_feedforward_layernorm.weight", cfg->hidden_size,
                                  &l->mlp_post_norm};
    } else {
        out[n++] =
            (lq_layer_vec){"post_attention_layernorm.weight", cfg->hidden_size, &l->mlp_norm};
    }
    if (cfg->qk_norm) {
        out[n++] = (lq_layer_vec){"self_attn.q_norm.weight", cfg->head_dim, &l->q_norm};
        out[n++] = (lq_layer_vec){"self_attn.k_norm.weight", cfg->head_dim, &l->k_norm};
    }
    return n;
}

void lq_layer_free(lq_layer *l) {
    if (!l)
        return;
    free(l->attn_norm);
    free(l->mlp_norm);
    free(l->attn_post_norm);
    free(l->mlp_post_norm);
    free(l->q_norm);
    free(l->k_norm);
    for (int i = 0; i < LQ_LIN_COUNT; i++)
        lq_linear_free(&l->lin[i]);
    lq_linear_free(&l->router);
    for (int64_t i = 0; l->experts && i < 3 * l->n_experts; i++)
        lq_linear_free(&l->experts[i]);
    free(l->experts);
    for (int i = 0; i < 4; i++)
        lq_linear_free(&l->shared[i]);
    memset(l, 0, sizeof *l);
}

int64_t lq_moe_count(const lq_model_config *c) {
    return c->num_experts ? 1 + 3 * c->num_experts + (c->shared_intermediate ? 4 : 0) : 0;
}

int lq_moe_is_float(const lq_model_config *c, int64_t j) {
    return j == 0 || j == 1 + 3 * (c->num_experts + 1);
}

void lq_moe_lin(const lq_model_config *c, lq_layer *l, int64_t j, char *leaf, size_t cap,
                int64_t *n, int64_t *k, lq_linear **slot) {
    static const char *const qwen[3] = {"gate_proj", "up_proj", "down_proj"};
    static const char *const mix[3]  = {"w1", "w3", "w2"};
    const int64_t            d = c->hidden_size, E = c->num_experts;
    const char              *blk = c->moe_mixtral ? "block_sparse_moe" : "mlp";
    lq_linear               *s   = NULL;
    if (j == 0) {
        snprintf(leaf, cap, "%s.gate", blk);
        *n = E, *k = d, s = l ? &l->router : NULL;
    } else if (j <= 3 * E) {
        const int64_t e = (j - 1) / 3, r = (j - 1) % 3, ff = c->moe_intermediate;
        snprintf(leaf, cap, "%s.experts.%lld.%s", blk, (long long)e,
                 (c->moe_mixtral ? mix : qwen)[r]);
        *n = r == 2 ? d : ff, *k = r == 2 ? ff : d;
        s = l && l->experts ? &l->experts[3 * e + r] : NULL;
    } else {
        const int64_t r = j - 1 - 3 * E, ff = c->shared_intermediate;
        if (r == 3)
            snprintf(leaf, cap, "mlp.shared_expert_gate");
        else
            snprintf(leaf, cap, "mlp.shared_expert.%s", qwen[r]);
        *n = r == 3 ? 1 : r == 2 ? d : ff, *k = r == 2 ? ff : d;
        s = l ? &l->shared[r] : NULL;
    }
    if (slot)
        *slot = s;
}

/* ---------------------------------------------------------------------------------------- */
/* Slots: a layer's quantizable linears, experts included                                     */
/* ---------------------------------------------------------------------------------------- */
static const lq_lin_id k_expert_roles[3] = {LQ_LIN_GATE, LQ_LIN_UP, LQ_LIN_DOWN};

int64_t lq_slot_count(const lq_model_config *c) {
    return LQ_LIN_COUNT + (c->num_experts ? 3 * (c->num_experts + 1) : 0);
}

int64_t lq_slot_expert(int64_t s) {
    return s < LQ_LIN_COUNT ? -1 : (s - LQ_LIN_COUNT) / 3;
}

lq_lin_id lq_slot_role(int64_t s) {
    return s < LQ_LIN_COUNT ? (lq_lin_id)s : k_expert_roles[(s - LQ_LIN_COUNT) % 3];
}

int64_t lq_slot_of(lq_lin_id role, int64_t expert) {
    if (expert < 0)
        return role;
    return LQ_LIN_COUNT + 3 * expert + (role == LQ_LIN_GATE ? 0 : role == LQ_LIN_UP ? 1 : 2);
}

int lq_slot_present(const lq_model_config *c, int64_t s) {
    const int64_t e = lq_slot_expert(s);
    if (s < 0 || s >= lq_slot_count(c))
        return 0;
    return e < 0 ? lq_lin_present(c, (lq_lin_id)s) : e < c->num_experts || c->shared_intermediate;
}

int lq_slot_kind(const lq_model_config *c, int64_t s) {
    const int64_t e = lq_slot_expert(s);
    if (e < 0)
        return (int)s;
    return LQ_LIN_COUNT + (e == c->num_experts ? 3 : 0) + (int)((s - LQ_LIN_COUNT) % 3);
}

int64_t lq_kind_slot(const lq_model_config *c, int kind) {
    if (kind < LQ_LIN_COUNT)
        return kind;
    const int r = (kind - LQ_LIN_COUNT) % 3;
    return lq_slot_of(k_expert_roles[r], kind >= LQ_LIN_COUNT + 3 ? c->num_experts : 0);
}

/* index of slot s's linear in lq_moe_lin's enumeration (after the router) */
static int64_t moe_index(int64_t s) {
    return 1 + (s - LQ_LIN_COUNT);
}

void lq_slot_shape(const lq_model_config *c, int64_t s, int64_t *n, int64_t *k) {
    char leaf[128];
    if (s < LQ_LIN_COUNT)
        lq_lin_shape(c, (lq_lin_id)s, n, k);
    else
        lq_moe_lin(c, NULL, moe_index(s), leaf, sizeof leaf, n, k, NULL);
}

void lq_slot_name(const lq_model_config *c, int64_t s, char *leaf, size_t cap) {
    int64_t n, k;
    if (s < LQ_LIN_COUNT)
        snprintf(leaf, cap, "%s", lq_lin_name((lq_lin_id)s));
    else
        lq_moe_lin(c, NULL, moe_index(s), leaf, cap, &n, &k, NULL);
}

void lq_kind_name(const lq_model_config *c, int kind, char *leaf, size_t cap) {
    lq_slot_name(c, lq_kind_slot(c, kind), leaf, cap);
    char *x = strstr(leaf, ".experts.0.");
    if (kind >= LQ_LIN_COUNT && kind < LQ_LIN_COUNT + 3 && x)
        x[sizeof ".experts." - 1] = '*';
}

int64_t lq_layer_float_bytes(const lq_model_config *c) {
    int64_t b = 4 * c->num_experts * c->hidden_size; /* the router */
    for (int64_t s = 0; s < lq_slot_count(c); s++) {
        int64_t n, k;
        lq_slot_shape(c, s, &n, &k);
        b += lq_slot_present(c, s) ? 4 * n * k : 0;
    }
    return b;
}

lq_linear *lq_layer_slot(lq_layer *l, int64_t s) {
    const int64_t e = lq_slot_expert(s);
    if (e < 0)
        return &l->lin[s];
    const int64_t r = (s - LQ_LIN_COUNT) % 3;
    return e < l->n_experts ? &l->experts[3 * e + r] : &l->shared[r];
}

int64_t lq_slot_input(const lq_model_config *c, int64_t s, const uint8_t *moe_mode) {
    const int64_t e = lq_slot_expert(s);
    if (e < 0)
        return s == LQ_LIN_K || s == LQ_LIN_V ? LQ_LIN_Q : s == LQ_LIN_UP ? LQ_LIN_GATE : s;
    const lq_lin_id role = lq_slot_role(s);
    if (role == LQ_LIN_DOWN)
        return s;
    if (e == c->num_experts || (moe_mode && moe_mode[e] == LQ_MOE_ALL))
        return LQ_SLOT_MOE_IN;
    return lq_slot_of(LQ_LIN_GATE, e);
}

/* ---------------------------------------------------------------------------------------- */
/* RoPE frequencies, exactly as transformers' rope init functions compute them (float32 ops  */
/* in the same order) so positions far out round like the reference.                          */
/* ---------------------------------------------------------------------------------------- */
void lq_rope_inv_freq(const lq_model_config *c, float *inv) {
    const int64_t half = c->head_dim / 2;
    for (int64_t j = 0; j < half; j++) {
        const float e = (float)(2 * j) / (float)c->head_dim;
        inv[j]        = 1.0f / (float)pow(c->rope_theta, (double)e);
    }
    if (c->rope_type == LQ_ROPE_LONGROPE) { /* the short factors: sequences within the original */
        for (int64_t j = 0; j < half; j++) {
            const float e = (float)(2 * j) / (float)c->head_dim;
            inv[j]        = 1.0f / (c->rope_short[j] * (float)pow(c->rope_theta, (double)e));
        }
    } else if (c->rope_type == LQ_ROPE_LINEAR) {
        for (int64_t j = 0; j < half; j++)
            inv[j] = inv[j] / (float)c->rope_factor;
    } else if (c->rope_type == LQ_ROPE_LLAMA3) {
        /* _compute_llama3_parameters: low frequencies divided by factor, high ones kept, a
         * smooth interpolation between the two wavelength bounds. */
        const float factor = (float)c->rope_factor, lo = (float)c->rope_low_freq_factor,
                    hi = (float)c->rope_high_freq_factor, old = (float)c->rope_original_max_pos;
        const float lo_wavelen = (float)(c->rope_original_max_pos / c->rope_low_freq_factor);
        const float hi_wavelen = (float)(c->rope_original_max_pos / c->rope_high_freq_factor);
        const float two_pi     = (float)6.283185307179586;
        for (int64_t j = 0; j < half; j++) {
            /* torch evaluates scalar / tensor as tensor.reciprocal() * scalar */
            const float wavelen = (1.0f / inv[j]) * two_pi;
            float       f       = wavelen > lo_wavelen ? inv[j] / factor : inv[j];
            if (!(wavelen < hi_wavelen) && !(wavelen > lo_wavelen)) {
                const float smooth = ((1.0f / wavelen) * old - lo) / (hi - lo);
                f                  = (1.0f - smooth) * f / factor + smooth * f;
            }
            inv[j] = f;
        }
    }
}

static lq_status rope_init(lq_model *m, lq_err *err) {
    float inv[512];
    LQ_RETURN_IF(m->cfg.head_dim > 1024, err, LQ_ERR_UNSUPPORTED,
                 "%s/config.json: head_dim %lld over 1024", m->dir, (long long)m->cfg.head_dim);
    lq_rope_inv_freq(&m->cfg, inv);
    for (int64_t j = 0; j < m->cfg.head_dim / 2; j++)
        m->inv_freq[j] = inv[j];
    return LQ_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Validation                                                                                 */
/* ---------------------------------------------------------------------------------------- */
static void shape_str(char *buf, size_t cap, int ndim, const int64_t *shape) {
    buf[0] = 0;
    for (int d = 0; d < ndim; d++)
        snprintf(buf + strlen(buf), cap - strlen(buf), "%s%lld", d ? "," : "", (long long)shape[d]);
}

static lq_status missing(const lq_model *m, const char *name, lq_err *err) {
    return lq_fail(err, LQ_ERR_ST_MISSING_TENSOR, "%s: tensor \"%s\" not found", m->dir, name);
}

/* Count non-finite values of a float tensor by converting it in blocks (the conversion
 * reports them); *first receives the flat index of the first one. -1: out of memory. */
static int64_t count_nonfinite(const lq_st_tensor *t, int64_t *first) {
    /* 2^16 elements: a whole number of blocks of every GGML type (32 or 256) */
    const int64_t blk = 1 << 16, nb = (t->numel + blk - 1) / blk;
    int64_t       blk_bytes, bad = 0, lo = INT64_MAX, oom = 0;
    if (!lq_dtype_nbytes(t->dtype, blk, &blk_bytes))
        return -1;
#pragma omp parallel reduction(+ : bad, oom) reduction(min : lo) if (nb > 1)
    {
        float *buf = malloc((size_t)blk * sizeof(float));
        oom += !buf;
#pragma omp for schedule(static)
        for (int64_t b = 0; b < nb; b++) {
            const int64_t off = b * blk, n = t->numel - off < blk ? t->numel - off : blk;
            if (!buf)
                continue;
            const int64_t c =
                lq_convert_to_f32(t->dtype, (const char *)t->data + b * blk_bytes, n, buf);
            if (c < 0) {
                oom++;
                continue;
            }
            bad += c;
            for (int64_t i = 0; c > 0 && i < n; i++)
                if (!isfinite(buf[i])) {
                    lo = off + i < lo ? off + i : lo;
                    break;
                }
        }
        free(buf);
    }
    *first = lo;
    return oom ? -1 : bad;
}

/* A float tensor of exactly this shape, all finite. */
static lq_status check_float(const lq_model *m, const char *name, int ndim, const int64_t *shape,
                             lq_err *err) {
    const lq_st_tensor *t = lq_st_find(m->st, name);
    if (!t)
        return missing(m, name, err);
    const char *file = lq_st_file_of(m->st, t);
    if (!lq_dtype_is_float(t->dtype))
        LQ_FAIL(err, LQ_ERR_WEIGHT_DTYPE, "%s: tensor \"%s\" has dtype %s, expected F16/BF16/F32",
                file, name, lq_dtype_name(t->dtype));
    int ok = t->ndim == ndim;
    for (int d = 0; ok && d < ndim; d++)
        ok = t->shape[d] == shape[d];
    if (!ok) {
        char got[160], want[160];
        shape_str(got, sizeof got, t->ndim, t->shape);
        shape_str(want, sizeof want, ndim, shape);
        LQ_FAIL(err, LQ_ERR_WEIGHT_SHAPE,
                "%s: tensor \"%s\" has shape [%s], config.json implies [%s]", file, name, got,
                want);
    }
    int64_t first, bad = count_nonfinite(t, &first);
    lq_st_release(m->st, t); /* the scan touched every page: keep them out of RSS */
    if (bad < 0)
        LQ_FAIL(err, LQ_ERR_NOMEM, "%s: out of memory checking tensor \"%s\"", file, name);
    if (bad > 0)
        LQ_FAIL(err, LQ_ERR_WEIGHT_NONFINITE,
                "%s: tensor \"%s\" has %lld NaN/Inf values (first at flat index %lld)", file, name,
                (long long)bad, (long long)first);
    return LQ_OK;
}

/* A Linear stored densely: "<prefix>.weight" is a float tensor (also inside a quantized
 * checkpoint, for modules the quantizer left alone). */
static int stored_dense(const lq_model *m, const char *prefix) {
    if (!m->qcfg)
        return 1;
    char name[512];
    snprintf(name, sizeof name, "%s.weight", prefix);
    const lq_st_tensor *t = lq_st_find(m->st, name);
    return t && lq_dtype_is_float(t->dtype) && t->ndim == 2;
}

/* Validate a quantized linear: the format reader checks presence, dtypes, shapes and index
 * data; dequantizing it checks that scales and friends produce finite weights. */
static lq_status check_quantized(const lq_model *m, const char *prefix, int64_t n, int64_t k,
                                 float **scratch, int64_t *scratch_n, lq_err *err) {
    lq_qbuf   b  = {0};
    lq_status st = lq_qlinear_read(m->st, prefix, m->qcfg, n, k, &b, err);
    if (st != LQ_OK)
        return st;
    const lq_format_traits *t = lq_format_traits_get((lq_format)b.q.format);
    if (!t || !t->dequant_cpu) {
        lq_qbuf_free(&b);
        LQ_FAIL(err, LQ_ERR_UNSUPPORTED, "%s: no CPU kernel for the %s format of %s", m->dir,
                lq_qformat_get((lq_format)b.q.format)->name, prefix);
    }
    if (*scratch_n < n * k) {
        free(*scratch);
        *scratch   = lq_malloc_n(n * k, sizeof(float));
        *scratch_n = *scratch ? n * k : 0;
        if (!*scratch) {
            lq_qbuf_free(&b);
            LQ_FAIL(err, LQ_ERR_NOMEM, "%s: out of memory checking %s", m->dir, prefix);
        }
    }
    st = t->dequant_cpu(&b.q, *scratch, 0);
    if (st != LQ_OK) {
        lq_qbuf_free(&b);
        return lq_fail(err, st, "%s: cannot dequantize %s", m->dir, prefix);
    }
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n * k; i++)
        if (!isfinite((*scratch)[i])) {
            if (!bad++)
                first = i;
        }
    lq_qbuf_free(&b);
    if (bad)
        LQ_FAIL(err, LQ_ERR_WEIGHT_NONFINITE,
                "%s: quantized linear \"%s\" dequantizes to %lld NaN/Inf weights (first at flat "
                "index %lld)",
                m->dir, prefix, (long long)bad, (long long)first);
    return LQ_OK;
}

/* A float "<prefix>.weight" next to quantized tensors of the same module: loaders disagree on
 * which one wins (we used to take the float one silently), so neither is guessed. */
static lq_status check_one_form(const lq_model *m, const char *prefix, lq_err *err) {
    char   dot[520];
    size_t pl = (size_t)snprintf(dot, sizeof dot, "%s.", prefix);
    for (int64_t i = lq_st_lower_bound(m->st, dot); i < lq_st_count(m->st); i++) {
        const lq_st_tensor *t = lq_st_get(m->st, i);
        if (strncmp(t->name, dot, pl) != 0)
            break;
        const char *leaf = t->name + pl;
        if (strcmp(leaf, "weight") != 0 && strcmp(leaf, "bias") != 0)
            LQ_FAIL(err, LQ_ERR_QFORMAT,
                    "%s: linear \"%s\" has both a float \"weight\" and quantized tensors "
                    "(\"%s\"): which one is meant?",
                    lq_st_file_of(m->st, t), prefix, leaf);
    }
    return LQ_OK;
}

/* Tensors of decoder layers the config does not declare: transformers drops them with a
 * warning; a quantizer that did the same would write a silently truncated model. */
static lq_status check_no_extra_layers(const lq_model *m, lq_err *err) {
    static const char pre[] = "model.layers.";
    for (int64_t i = lq_st_lower_bound(m->st, pre); i < lq_st_count(m->st); i++) {
        const lq_st_tensor *t = lq_st_get(m->st, i);
        if (strncmp(t->name, pre, sizeof pre - 1) != 0)
            break;
        const char *p = t->name + sizeof pre - 1;
        char       *end;
        errno                      = 0;
        const unsigned long long L = strtoull(p, &end, 10);
        if (end != p && *end == '.' && (errno || L >= (unsigned long long)m->cfg.num_layers))
            LQ_FAIL(err, LQ_ERR_CONFIG_VALUE,
                    "%s: tensor \"%s\" belongs to a layer the config does not have "
                    "(num_hidden_layers %lld in %s)",
                    lq_st_file_of(m->st, t), t->name, (long long)m->cfg.num_layers,
                    lq_source_config_label(m->src));
    }
    return LQ_OK;
}

static lq_status check_linear(const lq_model *m, const char *prefix, int64_t n, int64_t k, int bias,
                              float **scratch, int64_t *scratch_n, lq_err *err) {
    char name[512];
    if (stored_dense(m, prefix)) {
        if (m->qcfg)
            LQ_TRY(check_one_form(m, prefix, err));
        const int64_t shape[2] = {n, k};
        snprintf(name, sizeof name, "%s.weight", prefix);
        LQ_TRY(check_float(m, name, 2, shape, err));
    } else {
        LQ_TRY(check_quantized(m, prefix, n, k, scratch, scratch_n, err));
    }
    if (bias) {
        snprintf(name, sizeof name, "%s.bias", prefix);
        LQ_TRY(check_float(m, name, 1, &n, err));
    }
    return LQ_OK;
}

static lq_status validate(const lq_model *m, lq_err *err) {
    const lq_model_config *c = &m->cfg;
    const int64_t          d = c->hidden_size, vd[2] = {c->vocab_size, d};
    float                 *scratch   = NULL;
    int64_t                scratch_n = 0;
    lq_status              st        = LQ_OK;
    char                   name[512], prefix[512];
    LQ_TRY_GOTO(check_float(m, "model.embed_tokens.weight", 2, vd, err));
    LQ_TRY_GOTO(check_float(m, "model.norm.weight", 1, &d, err));
    LQ_TRY_GOTO(check_no_extra_layers(m, err));
    if (!c->tie_word_embeddings)
        LQ_TRY_GOTO(check_linear(m, "lm_head", c->vocab_size, d, 0, &scratch, &scratch_n, err));
    lq_layer     probe = {0};
    lq_layer_vec vecs[LQ_LAYER_MAX_VECS];
    const int    nvec = lq_layer_vecs(c, &probe, vecs);
    for (int64_t i = 0; i < c->num_layers; i++) {
        for (int v = 0; v < nvec; v++) {
            snprintf(name, sizeof name, "model.layers.%lld.%s", (long long)i, vecs[v].leaf);
            LQ_TRY_GOTO(check_float(m, name, 1, &vecs[v].len, err));
        }
        for (int l = 0; l < LQ_LIN_COUNT; l++) {
            int64_t n, k;
            if (!lq_lin_present(c, (lq_lin_id)l))
                continue;
            lq_lin_shape(c, (lq_lin_id)l, &n, &k);
            snprintf(prefix, sizeof prefix, "model.layers.%lld.%s", (long long)i, k_lin_names[l]);
            LQ_TRY_GOTO(check_linear(m, prefix, n, k, lq_lin_has_bias(c, (lq_lin_id)l), &scratch,
                                     &scratch_n, err));
        }
        for (int64_t j = 0; j < lq_moe_count(c); j++) {
            int64_t n, k;
            char    leaf[128];
            lq_moe_lin(c, NULL, j, leaf, sizeof leaf, &n, &k, NULL);
            snprintf(prefix, sizeof prefix, "model.layers.%lld.%s", (long long)i, leaf);
            LQ_TRY_GOTO(check_linear(m, prefix, n, k, 0, &scratch, &scratch_n, err));
        }
    }
done:
    free(scratch);
    return st;
}

/* ---------------------------------------------------------------------------------------- */
/* Loading                                                                                    */
/* ---------------------------------------------------------------------------------------- */
static lq_status read_vec(const lq_model *m, const char *name, int64_t n, float **out,
                          lq_err *err) {
    *out = lq_malloc_n(n, sizeof(float));
    LQ_RETURN_IF(!*out, err, LQ_ERR_NOMEM, "%s: out of memory for %s", m->dir, name);
    lq_status st = lq_st_read_f32(m->st, name, 1, &n, *out, err);
    if (st != LQ_OK) {
        free(*out);
        *out = NULL;
    }
    lq_st_release(m->st, lq_st_find(m->st, name));
    return st;
}

/* Under dense_as_stored, whether t's numel values can be used as the file holds them: fp16 / bf16
 * that need no transform on the way (a GGUF's permuted q/k rows or shifted norms go through
 * lq_st_read_f32). Shapes are validated at open. */
static int stored16(const lq_model *m, const lq_st_tensor *t, int64_t numel) {
    return m->dense_as_stored && t && (t->dtype == LQ_DT_F16 || t->dtype == LQ_DT_BF16) &&
           t->perm_heads == 0 && t->shift == 0.f && t->nbytes == numel * 2;
}

/* The stored arrays a repacked descriptor no longer reads (lq_qlinear_sort): their pages of the
 * mapping leave RSS (read once by the repacking, never again). */
static void release_replaced(const lq_model *m, const char *prefix, const lq_qlinear *stored,
                             const lq_qlinear *repacked) {
    lq_qarray a[LQ_QARRAY_MAX + 2];
    const int na = lq_qlinear_arrays(stored, a);
    char      name[512];
    for (int i = 0; i < na; i++) {
        if (a[i].constant || lq_qarray_data(&a[i], stored) == lq_qarray_data(&a[i], repacked))
            continue;
        snprintf(name, sizeof name, "%s.%s", prefix, a[i].suffix);
        lq_st_release(m->st, lq_st_find(m->st, name));
    }
}

static lq_status load_linear(const lq_model *m, const char *prefix, int64_t n, int64_t k, int bias,
                             lq_linear *out, lq_err *err) {
    char      name[512];
    lq_status st = LQ_OK;
    memset(out, 0, sizeof *out);
    snprintf(name, sizeof name, "%s.weight", prefix);
    const lq_st_tensor *t = lq_st_find(m->st, name);
    if (stored_dense(m, prefix) && stored16(m, t, n * k)) {
        void *w = lq_qbuf_alloc(&out->buf, (size_t)(n * k) * 2);
        if (!w)
            LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory for %s (%lld x %lld)", m->dir,
                         prefix, (long long)n, (long long)k);
        memcpy(w, t->data, (size_t)(n * k) * 2);
        lq_st_release(m->st, t);
        out->buf.q.format      = LQ_FMT_DENSE;
        out->buf.q.n           = n;
        out->buf.q.k           = k;
        out->buf.q.dense       = w;
        out->buf.q.dense_dtype = t->dtype == LQ_DT_F16 ? LQ_DENSE_F16 : LQ_DENSE_BF16;
    } else if (stored_dense(m, prefix)) {
        const int64_t shape[2] = {n, k};
        float        *w        = lq_qbuf_alloc(&out->buf, (size_t)(n * k) * sizeof(float));
        if (!w)
            LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory for %s (%lld x %lld)", m->dir,
                         prefix, (long long)n, (long long)k);
        LQ_TRY_GOTO(lq_st_read_f32(m->st, name, 2, shape, w, err));
        lq_st_release(m->st, lq_st_find(m->st, name)); /* RSS holds one layer, not the file */
        out->buf.q.format = LQ_FMT_DENSE;
        out->buf.q.n      = n;
        out->buf.q.k      = k;
        out->buf.q.dense  = w;
    } else {
        LQ_TRY_GOTO(lq_qlinear_read(m->st, prefix, m->qcfg, n, k, &out->buf, err));
        out->buf.q.bias = NULL; /* the float32 copy below replaces the reader's fp16 one */
        /* the kernels' layout, made once here (act-order GPTQ sorted by group, AWQ in GPTQ's
         * layout), so every forward runs the fast kernels */
        const size_t sb = lq_qlinear_sort_bytes(&out->buf.q);
        if (sb) {
            void      *sbuf = lq_qbuf_alloc(&out->buf, sb);
            lq_qlinear sorted;
            if (!sbuf)
                LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory repacking %s for the kernels",
                             m->dir, prefix);
            st = lq_qlinear_sort(&out->buf.q, sbuf, sb, &sorted);
            if (st != LQ_OK)
                LQ_FAIL_GOTO(err, st, "%s: cannot repack %s for the kernels", m->dir, prefix);
            release_replaced(m, prefix, &out->buf.q, &sorted);
            out->buf.q = sorted;
        }
    }
    if (bias) {
        snprintf(name, sizeof name, "%s.bias", prefix);
        LQ_TRY_GOTO(read_vec(m, name, n, &out->bias, err));
    }
done:
    if (st != LQ_OK)
        lq_linear_free(out);
    return st;
}

lq_status lq_model_load_layer(const lq_model *m, int64_t i, lq_layer *out, lq_err *err) {
    const lq_model_config *c  = &m->cfg;
    lq_status              st = LQ_OK;
    char                   name[512];
    memset(out, 0, sizeof *out);
    LQ_RETURN_IF(!m->st, err, LQ_ERR_INVALID_ARG, "lq_model_load_layer: model has no checkpoint");
    LQ_RETURN_IF(i < 0 || i >= c->num_layers, err, LQ_ERR_INVALID_ARG,
                 "%s: layer %lld out of range [0, %lld)", m->dir, (long long)i,
                 (long long)c->num_layers);
    out->idx = i;
    lq_layer_vec vecs[LQ_LAYER_MAX_VECS];
    const int    nvec = lq_layer_vecs(c, out, vecs);
    for (int v = 0; v < nvec; v++) {
        snprintf(name, sizeof name, "model.layers.%lld.%s", (long long)i, vecs[v].leaf);
        LQ_TRY_GOTO(read_vec(m, name, vecs[v].len, vecs[v].slot, err));
    }
    for (int l = 0; l < LQ_LIN_COUNT; l++) {
        int64_t n, k;
        if (!lq_lin_present(c, (lq_lin_id)l))
            continue;
        lq_lin_shape(c, (lq_lin_id)l, &n, &k);
        snprintf(name, sizeof name, "model.layers.%lld.%s", (long long)i, k_lin_names[l]);
        LQ_TRY_GOTO(
            load_linear(m, name, n, k, lq_lin_has_bias(c, (lq_lin_id)l), &out->lin[l], err));
    }
    if (c->num_experts) {
        out->n_experts = c->num_experts;
        out->experts   = lq_calloc_n(3 * c->num_experts, sizeof *out->experts);
        if (!out->experts)
            LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory", m->dir);
    }
    for (int64_t j = 0; j < lq_moe_count(c); j++) {
        int64_t    n, k;
        char       leaf[128];
        lq_linear *slot;
        lq_moe_lin(c, out, j, leaf, sizeof leaf, &n, &k, &slot);
        snprintf(name, sizeof name, "model.layers.%lld.%s", (long long)i, leaf);
        LQ_TRY_GOTO(load_linear(m, name, n, k, 0, slot, err));
    }
done:
    if (st != LQ_OK)
        lq_layer_free(out);
    return st;
}

lq_status lq_model_load_all(lq_model *m, lq_err *err) {
    if (m->layers)
        return LQ_OK;
    lq_layer *ls = lq_calloc_n(m->cfg.num_layers, sizeof *ls);
    LQ_RETURN_IF(!ls, err, LQ_ERR_NOMEM, "%s: out of memory", m->dir);
    for (int64_t i = 0; i < m->cfg.num_layers; i++) {
        lq_status st = lq_model_load_layer(m, i, &ls[i], err);
        if (st != LQ_OK) {
            for (int64_t j = 0; j < i; j++)
                lq_layer_free(&ls[j]);
            free(ls);
            return st;
        }
    }
    m->layers = ls;
    return LQ_OK;
}

static lq_status load_config_json(lq_model *m, lq_err *err) {
    int64_t     len;
    const char *text  = lq_source_config(m->src, &len);
    const char *label = lq_source_config_label(m->src);
    m->cfg            = *lq_source_model_config(m->src);
    if (!m->cfg.quantized)
        return LQ_OK;
    cJSON *root = NULL;
    LQ_TRY(lq_json_parse(text, (size_t)len, label, &root, err));
    lq_qconfig *qc = calloc(1, sizeof *qc);
    if (!qc) {
        cJSON_Delete(root);
        LQ_FAIL(err, LQ_ERR_NOMEM, "%s: out of memory", label);
    }
    lq_status st = lq_qconfig_parse(root, label, qc, err);
    cJSON_Delete(root);
    if (st != LQ_OK || qc->format == LQ_FMT_DENSE) {
        lq_qconfig_free(qc);
        free(qc);
        return st;
    }
    m->qcfg   = qc;
    m->format = qc->format;
    return LQ_OK;
}

static lq_status alloc_base(lq_model *m, int embed16, lq_err *err) {
    const lq_model_config *c = &m->cfg;
    const int64_t          e = c->vocab_size * c->hidden_size;
    if (embed16)
        m->embed16 = lq_malloc_n(e, sizeof(uint16_t));
    else
        m->embed = lq_calloc_n(e, sizeof(float));
    m->final_norm = lq_calloc_n(c->hidden_size, sizeof(float));
    LQ_RETURN_IF(!(m->embed || m->embed16) || !m->final_norm, err, LQ_ERR_NOMEM,
                 "%s: out of memory for embeddings (%lld x %lld)", m->dir, (long long)c->vocab_size,
                 (long long)c->hidden_size);
    return rope_init(m, err);
}

/* Tied: the lm_head is a dense view of embed or embed16 (lm_head.buf owns nothing). */
static void tie_lm_head(lq_model *m) {
    memset(&m->lm_head, 0, sizeof m->lm_head);
    m->lm_head.buf.q.format = LQ_FMT_DENSE;
    m->lm_head.buf.q.n      = m->cfg.vocab_size;
    m->lm_head.buf.q.k      = m->cfg.hidden_size;
    m->lm_head.buf.q.dense  = m->embed16 ? (void *)m->embed16 : (void *)m->embed;
    if (m->embed16)
        m->lm_head.buf.q.dense_dtype = m->embed16_dt == LQ_DT_F16 ? LQ_DENSE_F16 : LQ_DENSE_BF16;
}

lq_status lq_model_open(const char *dir, lq_model **out, lq_err *err) {
    return lq_model_open_flags(dir, 0, out, err);
}

lq_status lq_model_open_flags(const char *dir, unsigned flags, lq_model **out, lq_err *err) {
    *out = NULL;
    LQ_RETURN_IF(!dir || !*dir, err, LQ_ERR_INVALID_ARG, "lq_model_open: no directory given");
    lq_model *m = calloc(1, sizeof *m);
    LQ_RETURN_IF(!m, err, LQ_ERR_NOMEM, "%s: out of memory", dir);
    lq_status st = LQ_OK;
    if (strlen(dir) >= sizeof m->dir)
        LQ_FAIL_GOTO(err, LQ_ERR_INVALID_ARG, "%s: path too long", dir);
    strcpy(m->dir, dir);
    m->format = LQ_FMT_DENSE;
    LQ_TRY_GOTO(lq_source_open(dir, &m->src, err));
    m->st = lq_source_st(m->src);
    LQ_TRY_GOTO(load_config_json(m, err));
    LQ_TRY_GOTO(validate(m, err));
    m->dense_as_stored       = (flags & LQ_MODEL_OPEN_STORED16) != 0;
    const lq_st_tensor *et16 = lq_st_find(m->st, "model.embed_tokens.weight");
    if (!stored16(m, et16, m->cfg.vocab_size * m->cfg.hidden_size))
        et16 = NULL;
    LQ_TRY_GOTO(alloc_base(m, et16 != NULL, err));
    {
        const lq_model_config *c     = &m->cfg;
        const int64_t          vd[2] = {c->vocab_size, c->hidden_size};
        if (et16) {
            memcpy(m->embed16, et16->data, (size_t)et16->nbytes);
            m->embed16_dt = et16->dtype;
        } else {
            LQ_TRY_GOTO(lq_st_read_f32(m->st, "model.embed_tokens.weight", 2, vd, m->embed, err));
        }
        lq_st_release(m->st, lq_st_find(m->st, "model.embed_tokens.weight"));
        LQ_TRY_GOTO(
            lq_st_read_f32(m->st, "model.norm.weight", 1, &c->hidden_size, m->final_norm, err));
        if (c->tie_word_embeddings)
            tie_lm_head(m);
        else
            LQ_TRY_GOTO(
                load_linear(m, "lm_head", c->vocab_size, c->hidden_size, 0, &m->lm_head, err));
    }
done:
    if (st != LQ_OK) {
        lq_model_free(m);
        return st;
    }
    *out = m;
    return LQ_OK;
}

lq_status lq_model_create(const lq_model_config *cfg, lq_model **out, lq_err *err) {
    *out = NULL;
    LQ_RETURN_IF(!cfg || cfg->hidden_size <= 0 || cfg->num_heads <= 0 || cfg->num_kv_heads <= 0 ||
                     cfg->head_dim <= 0 || cfg->head_dim % 2 || cfg->vocab_size <= 0 ||
                     cfg->num_heads % cfg->num_kv_heads || cfg->max_position_embeddings <= 0 ||
                     cfg->intermediate_size <= 0 || cfg->num_layers < 0 ||
                     !(cfg->rms_norm_eps > 0) || !(cfg->rope_theta > 0),
                 err, LQ_ERR_INVALID_ARG, "lq_model_create: inconsistent config");
    lq_model *m = calloc(1, sizeof *m);
    LQ_RETURN_IF(!m, err, LQ_ERR_NOMEM, "lq_model_create: out of memory");
    m->cfg    = *cfg;
    m->format = LQ_FMT_DENSE;
    strcpy(m->dir, "(in memory)");
    lq_status st = alloc_base(m, 0, err);
    if (st == LQ_OK) {
        for (int64_t i = 0; i < cfg->hidden_size; i++)
            m->final_norm[i] = cfg->norm_plus_one ? 0.f : 1.f;
        if (cfg->tie_word_embeddings) {
            tie_lm_head(m);
        } else {
            float *w = lq_qbuf_alloc(&m->lm_head.buf,
                                     (size_t)(cfg->vocab_size * cfg->hidden_size) * sizeof(float));
            if (!w)
                st = lq_fail(err, LQ_ERR_NOMEM, "lq_model_create: out of memory for lm_head");
            m->lm_head.buf.q.format = LQ_FMT_DENSE;
            m->lm_head.buf.q.n      = cfg->vocab_size;
            m->lm_head.buf.q.k      = cfg->hidden_size;
            m->lm_head.buf.q.dense  = w;
        }
    }
    if (st != LQ_OK) {
        lq_model_free(m);
        return st;
    }
    *out = m;
    return LQ_OK;
}

lq_status lq_layer_alloc_dense(const lq_model_config *cfg, int64_t index, lq_layer *out,
                               lq_err *err) {
    memset(out, 0, sizeof *out);
    out->idx        = index;
    const int64_t d = cfg->hidden_size;
    (void)d;
    lq_layer_vec vecs[LQ_LAYER_MAX_VECS];
    const int    nvec = lq_layer_vecs(cfg, out, vecs);
    int          ok   = 1;
    for (int v = 0; v < nvec && ok; v++) {
        float *w = *vecs[v].slot = lq_malloc_n(vecs[v].len, sizeof(float));
        ok                       = w != NULL;
        for (int64_t i = 0; ok && i < vecs[v].len; i++)
            w[i] = cfg->norm_plus_one ? 0.f : 1.f;
    }
    for (int l = 0; ok && l < LQ_LIN_COUNT; l++) {
        int64_t n, k;
        if (!lq_lin_present(cfg, (lq_lin_id)l))
            continue;
        lq_lin_shape(cfg, (lq_lin_id)l, &n, &k);
        lq_qlinear *q = &out->lin[l].buf.q;
        q->format     = LQ_FMT_DENSE;
        q->n          = n;
        q->k          = k;
        q->dense      = lq_qbuf_alloc(&out->lin[l].buf, (size_t)(n * k) * sizeof(float));
        ok            = q->dense != NULL;
        if (ok && lq_lin_has_bias(cfg, (lq_lin_id)l))
            ok = (out->lin[l].bias = lq_calloc_n(n, sizeof(float))) != NULL;
    }
    if (ok && cfg->num_experts) {
        out->n_experts = cfg->num_experts;
        out->experts   = lq_calloc_n(3 * cfg->num_experts, sizeof *out->experts);
        ok             = out->experts != NULL;
    }
    for (int64_t j = 0; ok && j < lq_moe_count(cfg); j++) {
        int64_t    n, k;
        char       leaf[128];
        lq_linear *slot;
        lq_moe_lin(cfg, out, j, leaf, sizeof leaf, &n, &k, &slot);
        slot->buf.q.format = LQ_FMT_DENSE;
        slot->buf.q.n      = n;
        slot->buf.q.k      = k;
        slot->buf.q.dense  = lq_qbuf_alloc(&slot->buf, (size_t)(n * k) * sizeof(float));
        ok                 = slot->buf.q.dense != NULL;
    }
    if (!ok) {
        lq_layer_free(out);
        LQ_FAIL(err, LQ_ERR_NOMEM, "lq_layer_alloc_dense: out of memory");
    }
    return LQ_OK;
}

void lq_model_free(lq_model *m) {
    if (!m)
        return;
    if (m->layers) {
        for (int64_t i = 0; i < m->cfg.num_layers; i++)
            lq_layer_free(&m->layers[i]);
        free(m->layers);
    }
    lq_linear_free(&m->lm_head); /* tied: owns nothing */
    free(m->embed);
    free(m->embed16);
    free(m->final_norm);
    if (m->qcfg) {
        lq_qconfig_free(m->qcfg);
        free(m->qcfg);
    }
    lq_source_close(m->src);
    free(m);
}
