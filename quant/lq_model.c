/* Llama-family decoder forward in float32 on the CPU.
 *
 * Shapes follow Hugging Face LlamaForCausalLM exactly (rotate-half RoPE, GQA by repeating KV
 * heads, SwiGLU, RMSNorm computed in float32 with eps inside the sqrt). GEMMs go through
 * OpenBLAS over every token of a chunk; attention runs per (sequence, head) pair with two sgemms
 * and a causal softmax, parallel over pairs with OpenMP. Memory is bounded by the workspace,
 * which holds one chunk of tokens. */
#include "lq_model.h"

#include "lq_format_io.h"
#include "lq_json.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const k_lin_names[LQ_LIN_COUNT] = {
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj",
};

const char *lq_lin_name(lq_lin_id id) {
    return (id >= 0 && id < LQ_LIN_COUNT) ? k_lin_names[id] : "?";
}

/* out_features, in_features of each linear from the config. */
static void lin_shape(const lq_model_config *c, lq_lin_id id, int64_t *n, int64_t *k) {
    int64_t d = c->hidden_size, hd = c->head_dim, NI = c->intermediate_size;
    switch (id) {
    case LQ_LIN_Q:
        *n = c->num_heads * hd, *k = d;
        break;
    case LQ_LIN_K:
    case LQ_LIN_V:
        *n = c->num_kv_heads * hd, *k = d;
        break;
    case LQ_LIN_O:
        *n = d, *k = c->num_heads * hd;
        break;
    case LQ_LIN_GATE:
    case LQ_LIN_UP:
        *n = NI, *k = d;
        break;
    default:
        *n = d, *k = NI;
        break;
    }
}

static int lin_has_bias(const lq_model_config *c, lq_lin_id id) {
    if (id <= LQ_LIN_V)
        return c->qkv_bias || c->attention_bias;
    if (id == LQ_LIN_O)
        return c->attention_bias;
    return c->mlp_bias;
}

void lq_linear_free(lq_linear *l) {
    if (!l)
        return;
    lq_qbuf_free(&l->buf);
    free(l->bias);
    l->bias = NULL;
}

void lq_layer_free(lq_layer *l) {
    if (!l)
        return;
    for (int i = 0; i < LQ_LIN_COUNT; i++)
        lq_linear_free(&l->lin[i]);
    free(l->attn_norm);
    free(l->mlp_norm);
    memset(l, 0, sizeof *l);
}

lq_status lq_linear_forward(const lq_linear *l, const float *x, int64_t m, float *y, void *ws,
                            size_t ws_size, int nthreads) {
    const lq_qlinear *q = &l->buf.q;
    if (q->format == LQ_FMT_DENSE) {
        /* y[m, n] = x[m, k] W[n, k]^T */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)q->n, (int)q->k, 1.0f,
                    x, (int)q->k, (const float *)q->dense, (int)q->k, 0.0f, y, (int)q->n);
    } else {
        const lq_format_traits *t = lq_format_traits_get((lq_format)q->format);
        if (!t || !t->gemm_cpu)
            return LQ_ERR_UNSUPPORTED;
        lq_status s = t->gemm_cpu(q, x, m, y, ws, ws_size, nthreads);
        if (s != LQ_OK)
            return s;
    }
    if (l->bias)
        for (int64_t r = 0; r < m; r++)
            for (int64_t j = 0; j < q->n; j++)
                y[r * q->n + j] += l->bias[j];
    return LQ_OK;
}

/* ------------------------------------------------------------------------------------------
 * Loading
 * ------------------------------------------------------------------------------------------ */
static lq_status read_vec(const lq_st *st, const char *name, int64_t n, float **out,
                          lq_err *err) {
    float *v = lq_malloc_n(n, sizeof(float));
    if (!v)
        LQ_FAIL(err, LQ_ERR_NOMEM, "%s: out of memory (%lld floats)", name, (long long)n);
    lq_status s = lq_st_read_f32(st, name, 1, &n, v, err);
    if (s != LQ_OK) {
        free(v);
        return s;
    }
    lq_st_release(st, lq_st_find(st, name));
    *out = v;
    return LQ_OK;
}

/* Checks a weight's presence, float dtype and shape without reading it. */
static lq_status check_tensor(const lq_model *m, const char *name, int ndim, const int64_t *shape,
                              lq_err *err) {
    const lq_st_tensor *t = lq_st_find(m->st, name);
    if (!t)
        LQ_FAIL(err, LQ_ERR_ST_MISSING_TENSOR, "%s: tensor \"%s\" not found", m->dir, name);
    const char *file = lq_st_file_of(m->st, t);
    if (!lq_dtype_is_float(t->dtype))
        LQ_FAIL(err, LQ_ERR_WEIGHT_DTYPE, "%s: tensor \"%s\" has dtype %s, expected F16/BF16/F32",
                file, name, lq_dtype_name(t->dtype));
    int ok = t->ndim == ndim;
    for (int d = 0; ok && d < ndim; d++)
        ok = t->shape[d] == shape[d];
    if (!ok)
        LQ_FAIL(err, LQ_ERR_WEIGHT_SHAPE,
                "%s: tensor \"%s\" has shape [%lld%s%lld], config.json implies [%lld%s%lld]", file,
                name, (long long)t->shape[0], t->ndim > 1 ? "," : "",
                (long long)(t->ndim > 1 ? t->shape[1] : 0), (long long)shape[0], ndim > 1 ? "," : "",
                (long long)(ndim > 1 ? shape[1] : 0));
    return LQ_OK;
}

static lq_status load_dense_linear(const lq_model *m, const char *prefix, int64_t n, int64_t k,
                                   int bias, lq_linear *out, lq_err *err) {
    char name[512];
    snprintf(name, sizeof name, "%s.weight", prefix);
    float *w = lq_qbuf_alloc(&out->buf, (size_t)(n * k) * sizeof(float));
    if (!w)
        LQ_FAIL(err, LQ_ERR_NOMEM, "%s: out of memory (%lld x %lld)", name, (long long)n,
                (long long)k);
    int64_t shape[2] = {n, k};
    LQ_TRY(lq_st_read_f32(m->st, name, 2, shape, w, err));
    lq_st_release(m->st, lq_st_find(m->st, name)); /* keep RSS at one layer, not the file */
    out->buf.q.format = LQ_FMT_DENSE;
    out->buf.q.n      = n;
    out->buf.q.k      = k;
    out->buf.q.dense  = w;
    if (bias) {
        snprintf(name, sizeof name, "%s.bias", prefix);
        LQ_TRY(read_vec(m->st, name, n, &out->bias, err));
    }
    return LQ_OK;
}

lq_status lq_model_load_layer(const lq_model *m, int64_t i, lq_layer *out, lq_err *err) {
    memset(out, 0, sizeof *out);
    const lq_model_config *c = &m->cfg;
    char                   name[512];
    lq_status              s;
    snprintf(name, sizeof name, "model.layers.%lld.input_layernorm.weight", (long long)i);
    if ((s = read_vec(m->st, name, c->hidden_size, &out->attn_norm, err)))
        goto fail;
    snprintf(name, sizeof name, "model.layers.%lld.post_attention_layernorm.weight", (long long)i);
    if ((s = read_vec(m->st, name, c->hidden_size, &out->mlp_norm, err)))
        goto fail;
    for (int l = 0; l < LQ_LIN_COUNT; l++) {
        int64_t n, k;
        lin_shape(c, (lq_lin_id)l, &n, &k);
        snprintf(name, sizeof name, "model.layers.%lld.%s", (long long)i, k_lin_names[l]);
        const lq_qconfig *qc = m->qcfg;
        int quant = qc && qc->format != LQ_FMT_DENSE && lq_st_find(m->st, name) == NULL;
        if (quant) {
            /* A module listed as not converted stays dense even in a quantized checkpoint. */
            char wname[600];
            snprintf(wname, sizeof wname, "%s.weight", name);
            const lq_st_tensor *t = lq_st_find(m->st, wname);
            quant = !(t && t->ndim == 2 && lq_dtype_is_float(t->dtype));
        }
        if (quant) {
            if ((s = lq_qlinear_read(m->st, name, qc, n, k, &out->lin[l].buf, err)))
                goto fail;
        } else if ((s = load_dense_linear(m, name, n, k, lin_has_bias(c, (lq_lin_id)l),
                                          &out->lin[l], err))) {
            goto fail;
        }
    }
    return LQ_OK;
fail:
    lq_layer_free(out);
    return s;
}

lq_status lq_model_load_all(lq_model *m, lq_err *err) {
    if (m->layers)
        return LQ_OK;
    m->layers = calloc((size_t)m->cfg.num_layers, sizeof *m->layers);
    if (!m->layers)
        LQ_FAIL(err, LQ_ERR_NOMEM, "%s: out of memory", m->dir);
    for (int64_t i = 0; i < m->cfg.num_layers; i++)
        LQ_TRY(lq_model_load_layer(m, i, &m->layers[i], err));
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
    lq_linear_free(&m->lm_head);
    free(m->embed);
    free(m->final_norm);
    if (m->qcfg) {
        lq_qconfig_free(m->qcfg);
        free(m->qcfg);
    }
    lq_st_close(m->st);
    free(m);
}

/* HF _compute_default_rope_parameters / _compute_llama3_parameters / linear scaling. */
static void rope_init(lq_model *m) {
    const lq_model_config *c    = &m->cfg;
    int64_t                half = c->head_dim / 2;
    for (int64_t i = 0; i < half; i++) {
        double f = 1.0 / pow(c->rope_theta, (double)(2 * i) / (double)c->head_dim);
        if (c->rope_type == LQ_ROPE_LINEAR) {
            f /= c->rope_factor;
        } else if (c->rope_type == LQ_ROPE_LLAMA3) {
            double lo_wl  = (double)c->rope_original_max_pos / c->rope_low_freq_factor;
            double hi_wl  = (double)c->rope_original_max_pos / c->rope_high_freq_factor;
            double wl     = 2 * 3.14159265358979323846 / f;
            if (wl > lo_wl) {
                f /= c->rope_factor;
            } else if (wl >= hi_wl) {
                double smooth = ((double)c->rope_original_max_pos / wl - c->rope_low_freq_factor) /
                                (c->rope_high_freq_factor - c->rope_low_freq_factor);
                f = (1 - smooth) * f / c->rope_factor + smooth * f;
            }
        }
        m->inv_freq[i] = f;
    }
}

static lq_status load_quant_config(lq_model *m, lq_err *err) {
    char path[4200];
    lq_path_join(path, sizeof path, m->dir, "config.json");
    cJSON *root = NULL;
    LQ_TRY(lq_json_load_file(path, 16 << 20, &root, err));
    lq_qconfig *qc = calloc(1, sizeof *qc);
    if (!qc) {
        cJSON_Delete(root);
        LQ_FAIL(err, LQ_ERR_NOMEM, "out of memory");
    }
    lq_status s = lq_qconfig_parse(root, path, qc, err);
    cJSON_Delete(root);
    if (s != LQ_OK) {
        lq_qconfig_free(qc);
        free(qc);
        return s;
    }
    m->qcfg   = qc;
    m->format = qc->format;
    return LQ_OK;
}

lq_status lq_model_open(const char *dir, lq_model **out, lq_err *err) {
    *out        = NULL;
    lq_model *m = calloc(1, sizeof *m);
    if (!m)
        LQ_FAIL(err, LQ_ERR_NOMEM, "out of memory");
    lq_status s = LQ_OK;
    snprintf(m->dir, sizeof m->dir, "%s", dir);
    m->format                 = LQ_FMT_DENSE;
    const lq_model_config *c  = &m->cfg;
    if ((s = lq_config_load(dir, &m->cfg, err)))
        goto fail;
    if (c->head_dim > 1024) {
        s = lq_fail(err, LQ_ERR_UNSUPPORTED, "%s/config.json: head_dim %lld over 1024", dir,
                    (long long)c->head_dim);
        goto fail;
    }
    if ((s = lq_st_open_dir(dir, &m->st, err)))
        goto fail;
    if (c->quantized && (s = load_quant_config(m, err)))
        goto fail;
    rope_init(m);

    int64_t d = c->hidden_size, V = c->vocab_size, shape[2];
    char    name[512];
    /* Up-front validation: every tensor present, float (or quantized), right shape. */
    shape[0] = V, shape[1] = d;
    if ((s = check_tensor(m, "model.embed_tokens.weight", 2, shape, err)) ||
        (!c->tie_word_embeddings && (s = check_tensor(m, "lm_head.weight", 2, shape, err))))
        goto fail;
    shape[0] = d;
    if ((s = check_tensor(m, "model.norm.weight", 1, shape, err)))
        goto fail;
    for (int64_t i = 0; i < c->num_layers; i++) {
        snprintf(name, sizeof name, "model.layers.%lld.input_layernorm.weight", (long long)i);
        if ((s = check_tensor(m, name, 1, shape, err)))
            goto fail;
        snprintf(name, sizeof name, "model.layers.%lld.post_attention_layernorm.weight",
                 (long long)i);
        if ((s = check_tensor(m, name, 1, shape, err)))
            goto fail;
        for (int l = 0; l < LQ_LIN_COUNT; l++) {
            int64_t ls[2];
            lin_shape(c, (lq_lin_id)l, &ls[0], &ls[1]);
            snprintf(name, sizeof name, "model.layers.%lld.%s.weight", (long long)i,
                     k_lin_names[l]);
            if (m->format != LQ_FMT_DENSE) {
                /* quantized (no .weight, or an integer one): lq_qlinear_read validates it */
                const lq_st_tensor *t = lq_st_find(m->st, name);
                if (!t || !lq_dtype_is_float(t->dtype))
                    continue;
            }
            if ((s = check_tensor(m, name, 2, ls, err)))
                goto fail;
            if (lin_has_bias(c, (lq_lin_id)l)) {
                snprintf(name, sizeof name, "model.layers.%lld.%s.bias", (long long)i,
                         k_lin_names[l]);
                if ((s = check_tensor(m, name, 1, ls, err)))
                    goto fail;
            }
        }
    }
    shape[0] = V, shape[1] = d;
    m->embed = lq_malloc_n(V * d, sizeof(float));
    if (!m->embed) {
        s = lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory for embeddings", dir);
        goto fail;
    }
    if ((s = lq_st_read_f32(m->st, "model.embed_tokens.weight", 2, shape, m->embed, err)) ||
        (lq_st_release(m->st, lq_st_find(m->st, "model.embed_tokens.weight")), 0) ||
        (s = read_vec(m->st, "model.norm.weight", d, &m->final_norm, err)))
        goto fail;
    if (c->tie_word_embeddings) {
        m->lm_head.buf.q.format = LQ_FMT_DENSE;
        m->lm_head.buf.q.n      = V;
        m->lm_head.buf.q.k      = d;
        m->lm_head.buf.q.dense  = m->embed; /* view: not registered in buf.mem */
    } else if ((s = load_dense_linear(m, "lm_head", V, d, 0, &m->lm_head, err))) {
        goto fail;
    }
    *out = m;
    return LQ_OK;
fail:
    lq_model_free(m);
    return s;
}

/* ------------------------------------------------------------------------------------------
 * Forward
 * ------------------------------------------------------------------------------------------ */
struct lq_fwd_ws {
    int64_t max_tokens, max_seq;
    float  *resid; /* [T, d] working copy of the residual stream */
    float  *xn;    /* [T, max(d, nh*hd)] */
    float  *q;     /* [T, nh*hd] */
    float  *k;     /* [T, nkv*hd] */
    float  *v;     /* [T, nkv*hd] */
    float  *ao;    /* [T, nh*hd] attention output */
    float  *tmp;   /* [T, d] */
    float  *g;     /* [T, I] */
    float  *u;     /* [T, I] */
    float  *scores;/* [nthreads, max_seq * max_seq] */
    float  *cos_t, *sin_t; /* [max_seq, hd/2] */
    int     nthreads;
    void   *lin_ws; /* workspace of quantized gemm_cpu */
    size_t  lin_ws_size;
};

void lq_fwd_ws_free(lq_fwd_ws *w) {
    if (!w)
        return;
    void *arr[] = {w->resid, w->xn,     w->q,     w->k,     w->v,      w->ao,
                   w->tmp,   w->g,      w->u,     w->scores, w->cos_t, w->sin_t};
    for (size_t i = 0; i < sizeof arr / sizeof arr[0]; i++)
        lq_aligned_free(arr[i]);
    lq_aligned_free(w->lin_ws);
    free(w);
}

static float *wsa(int64_t n, int *oom) {
    float *p = lq_aligned_alloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!p)
        *oom = 1;
    return p;
}

lq_status lq_fwd_ws_create(const lq_model_config *c, int64_t max_tokens, int64_t max_seq,
                           lq_fwd_ws **out, lq_err *err) {
    *out = NULL;
    if (max_seq < 1 || max_tokens < max_seq)
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "forward workspace: max_tokens %lld < max_seq %lld",
                (long long)max_tokens, (long long)max_seq);
    lq_fwd_ws *w = calloc(1, sizeof *w);
    if (!w)
        LQ_FAIL(err, LQ_ERR_NOMEM, "out of memory");
    int64_t T = max_tokens, d = c->hidden_size, hd = c->head_dim, NI = c->intermediate_size;
    int64_t qd = c->num_heads * hd, kvd = c->num_kv_heads * hd;
    int     oom   = 0;
    w->max_tokens = T;
    w->max_seq    = max_seq;
    w->nthreads   = omp_get_max_threads();
    w->resid      = wsa(T * d, &oom);
    w->xn         = wsa(T * (d > qd ? d : qd), &oom);
    w->q          = wsa(T * qd, &oom);
    w->k          = wsa(T * kvd, &oom);
    w->v          = wsa(T * kvd, &oom);
    w->ao         = wsa(T * qd, &oom);
    w->tmp        = wsa(T * d, &oom);
    w->g          = wsa(T * NI, &oom);
    w->u          = wsa(T * NI, &oom);
    w->scores     = wsa((int64_t)w->nthreads * max_seq * max_seq, &oom);
    w->cos_t      = wsa(max_seq * (hd / 2), &oom);
    w->sin_t      = wsa(max_seq * (hd / 2), &oom);
    if (oom) {
        lq_fwd_ws_free(w);
        LQ_FAIL(err, LQ_ERR_NOMEM, "out of memory for a %lld-token forward workspace",
                (long long)T);
    }
    *out = w;
    return LQ_OK;
}

/* Quantized linears need their own scratch; grown on demand (outside the hot loop). */
static lq_status lin_ws_reserve(lq_fwd_ws *w, const lq_layer *L, int64_t m, lq_err *err) {
    size_t need = 0;
    for (int l = 0; l < LQ_LIN_COUNT; l++) {
        const lq_qlinear *q = &L->lin[l].buf.q;
        if (q->format == LQ_FMT_DENSE)
            continue;
        const lq_format_traits *t = lq_format_traits_get((lq_format)q->format);
        size_t                  s = (t && t->ws_cpu) ? t->ws_cpu(q, m) : 0;
        if (s > need)
            need = s;
    }
    if (need <= w->lin_ws_size)
        return LQ_OK;
    lq_aligned_free(w->lin_ws);
    w->lin_ws      = lq_aligned_alloc(need);
    w->lin_ws_size = w->lin_ws ? need : 0;
    if (!w->lin_ws)
        LQ_FAIL(err, LQ_ERR_NOMEM, "out of memory for kernel workspace (%zu bytes)", need);
    return LQ_OK;
}

static void rope_tables(const lq_model *m, lq_fwd_ws *w, int64_t seqlen) {
    int64_t half = m->cfg.head_dim / 2;
    for (int64_t p = 0; p < seqlen; p++)
        for (int64_t i = 0; i < half; i++) {
            double a                  = (double)p * m->inv_freq[i];
            w->cos_t[p * half + i]    = (float)cos(a);
            w->sin_t[p * half + i]    = (float)sin(a);
        }
}

void lq_rmsnorm(const float *x, const float *w, int64_t rows, int64_t d, double eps, float *out) {
#pragma omp parallel for schedule(static) if (rows * d > 65536)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * d;
        double       ss = 0;
        for (int64_t j = 0; j < d; j++)
            ss += (double)xr[j] * xr[j];
        float inv = (float)(1.0 / sqrt(ss / (double)d + eps));
        for (int64_t j = 0; j < d; j++)
            out[r * d + j] = w[j] * (xr[j] * inv);
    }
}

/* x [T, nheads*hd] for nseq sequences of seqlen: rotate-half RoPE at position t % seqlen. */
static void apply_rope(float *x, int64_t nseq, int64_t seqlen, int64_t nheads, int64_t hd,
                       const lq_fwd_ws *w) {
    int64_t half = hd / 2;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < nseq * seqlen; t++) {
        int64_t      p = t % seqlen;
        const float *c = w->cos_t + p * half, *s = w->sin_t + p * half;
        for (int64_t h = 0; h < nheads; h++) {
            float *v = x + (t * nheads + h) * hd;
            for (int64_t i = 0; i < half; i++) {
                float a = v[i], b = v[i + half];
                v[i]        = a * c[i] - b * s[i];
                v[i + half] = b * c[i] + a * s[i];
            }
        }
    }
}

/* Causal (optionally sliding-window) attention for nseq sequences; q/k/v already roped. */
static void attention(const lq_model_config *c, const lq_fwd_ws *w, int64_t nseq, int64_t seqlen,
                      float *ao) {
    int64_t nh = c->num_heads, nkv = c->num_kv_heads, hd = c->head_dim;
    int64_t qd = nh * hd, kvd = nkv * hd, grp = nh / nkv;
    float   scale = 1.0f / sqrtf((float)hd);
    int64_t win   = c->sliding_window > 0 ? c->sliding_window : seqlen;
#pragma omp parallel for schedule(dynamic)
    for (int64_t sh = 0; sh < nseq * nh; sh++) {
        int64_t      s  = sh / nh, h = sh % nh, kvh = h / grp;
        float       *S  = w->scores + (int64_t)omp_get_thread_num() * w->max_seq * w->max_seq;
        const float *Q  = w->q + s * seqlen * qd + h * hd;
        const float *K  = w->k + s * seqlen * kvd + kvh * hd;
        const float *Vv = w->v + s * seqlen * kvd + kvh * hd;
        /* S[i, j] = Q_i . K_j * scale */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)seqlen, (int)seqlen, (int)hd,
                    scale, Q, (int)qd, K, (int)kvd, 0.0f, S, (int)seqlen);
        for (int64_t i = 0; i < seqlen; i++) {
            float  *row = S + i * seqlen;
            int64_t j0  = i - win + 1 > 0 ? i - win + 1 : 0;
            float   mx  = -INFINITY;
            for (int64_t j = j0; j <= i; j++)
                mx = row[j] > mx ? row[j] : mx;
            double sum = 0;
            for (int64_t j = j0; j <= i; j++) {
                row[j] = expf(row[j] - mx);
                sum += row[j];
            }
            float inv = (float)(1.0 / sum);
            for (int64_t j = 0; j < seqlen; j++)
                row[j] = (j >= j0 && j <= i) ? row[j] * inv : 0.0f;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)seqlen, (int)hd, (int)seqlen,
                    1.0f, S, (int)seqlen, Vv, (int)kvd, 0.0f, ao + s * seqlen * qd + h * hd,
                    (int)qd);
    }
}

#define CAP(id, x, t, kdim)                                                                    \
    do {                                                                                       \
        if (cap) {                                                                             \
            lq_status cs_ = cap(user, (id), (x), (t), (kdim));                                 \
            if (cs_ != LQ_OK)                                                                  \
                return lq_fail(err, cs_, "layer forward cancelled by capture (%s)",            \
                               lq_lin_name(id));                                               \
        }                                                                                      \
        if (stop_after == (int)(id))                                                           \
            goto next_chunk;                                                                   \
    } while (0)

#define LIN(id, x, t, y)                                                                       \
    do {                                                                                       \
        lq_status ls_ = lq_linear_forward(&L->lin[id], (x), (t), (y), ws->lin_ws,              \
                                          ws->lin_ws_size, ws->nthreads);                      \
        if (ls_ != LQ_OK)                                                                      \
            return lq_fail(err, ls_, "%s: linear %s failed (%s)", m->dir, lq_lin_name(id),     \
                           lq_status_str(ls_));                                                \
    } while (0)

static lq_status attn_block(const lq_model *m, const lq_layer *L, const float *xn, int64_t cs,
                            int64_t seqlen, float *out, lq_fwd_ws *ws, lq_capture_fn cap,
                            void *user, int stop_after, int *stopped, lq_err *err) {
    const lq_model_config *c = &m->cfg;
    int64_t                T = cs * seqlen;
    *stopped                 = 1;
    CAP(LQ_LIN_Q, xn, T, c->hidden_size);
    CAP(LQ_LIN_K, xn, T, c->hidden_size);
    CAP(LQ_LIN_V, xn, T, c->hidden_size);
    LIN(LQ_LIN_Q, xn, T, ws->q);
    LIN(LQ_LIN_K, xn, T, ws->k);
    LIN(LQ_LIN_V, xn, T, ws->v);
    apply_rope(ws->q, cs, seqlen, c->num_heads, c->head_dim, ws);
    apply_rope(ws->k, cs, seqlen, c->num_kv_heads, c->head_dim, ws);
    attention(c, ws, cs, seqlen, ws->ao);
    CAP(LQ_LIN_O, ws->ao, T, c->num_heads * c->head_dim);
    LIN(LQ_LIN_O, ws->ao, T, out);
    *stopped = 0;
next_chunk:
    return LQ_OK;
}

static lq_status mlp_block(const lq_model *m, const lq_layer *L, const float *xn, int64_t T,
                           float *out, lq_fwd_ws *ws, lq_capture_fn cap, void *user,
                           int stop_after, int *stopped, lq_err *err) {
    const lq_model_config *c = &m->cfg;
    int64_t                NI = c->intermediate_size;
    *stopped                 = 1;
    CAP(LQ_LIN_GATE, xn, T, c->hidden_size);
    CAP(LQ_LIN_UP, xn, T, c->hidden_size);
    LIN(LQ_LIN_GATE, xn, T, ws->g);
    LIN(LQ_LIN_UP, xn, T, ws->u);
#pragma omp parallel for schedule(static) if (T * NI > 65536)
    for (int64_t i = 0; i < T * NI; i++) {
        float g   = ws->g[i];
        ws->g[i]  = g / (1.0f + expf(-g)) * ws->u[i];
    }
    CAP(LQ_LIN_DOWN, ws->g, T, NI);
    LIN(LQ_LIN_DOWN, ws->g, T, out);
    *stopped = 0;
next_chunk:
    return LQ_OK;
}

static lq_status check_ws(const lq_model *m, const lq_layer *L, lq_fwd_ws *ws, int64_t seqlen,
                          int64_t *cs, lq_err *err) {
    if (seqlen > ws->max_seq)
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "sequence of %lld tokens exceeds the workspace (%lld)",
                (long long)seqlen, (long long)ws->max_seq);
    *cs = ws->max_tokens / seqlen;
    LQ_TRY(lin_ws_reserve(ws, L, *cs * seqlen, err));
    rope_tables(m, ws, seqlen);
    return LQ_OK;
}

lq_status lq_layer_forward(const lq_model *m, const lq_layer *L, float *h, int64_t nseq,
                           int64_t seqlen, lq_capture_fn cap, void *user, int stop_after,
                           lq_fwd_ws *ws, lq_err *err) {
    const lq_model_config *c = &m->cfg;
    int64_t                d = c->hidden_size, cs;
    LQ_TRY(check_ws(m, L, ws, seqlen, &cs, err));
    for (int64_t s0 = 0; s0 < nseq; s0 += cs) {
        int64_t n   = nseq - s0 < cs ? nseq - s0 : cs;
        int64_t T   = n * seqlen;
        float  *hc  = h + s0 * seqlen * d;
        int     stp = 0;
        memcpy(ws->resid, hc, (size_t)(T * d) * sizeof(float));
        lq_rmsnorm(ws->resid, L->attn_norm, T, d, c->rms_norm_eps, ws->xn);
        LQ_TRY(attn_block(m, L, ws->xn, n, seqlen, ws->tmp, ws, cap, user, stop_after, &stp, err));
        if (stp)
            continue;
        for (int64_t i = 0; i < T * d; i++)
            ws->resid[i] += ws->tmp[i];
        lq_rmsnorm(ws->resid, L->mlp_norm, T, d, c->rms_norm_eps, ws->xn);
        LQ_TRY(mlp_block(m, L, ws->xn, T, ws->tmp, ws, cap, user, stop_after, &stp, err));
        if (stp)
            continue;
        for (int64_t i = 0; i < T * d; i++)
            hc[i] = ws->resid[i] + ws->tmp[i];
    }
    return LQ_OK;
}

lq_status lq_attn_forward(const lq_model *m, const lq_layer *L, const float *xn, int64_t nseq,
                          int64_t seqlen, float *out, lq_fwd_ws *ws, lq_err *err) {
    int64_t d = m->cfg.hidden_size, cs;
    int     stp;
    LQ_TRY(check_ws(m, L, ws, seqlen, &cs, err));
    for (int64_t s0 = 0; s0 < nseq; s0 += cs) {
        int64_t n = nseq - s0 < cs ? nseq - s0 : cs;
        LQ_TRY(attn_block(m, L, xn + s0 * seqlen * d, n, seqlen, out + s0 * seqlen * d, ws, NULL,
                          NULL, -1, &stp, err));
    }
    return LQ_OK;
}

lq_status lq_mlp_forward(const lq_model *m, const lq_layer *L, const float *xn, int64_t ntok,
                         float *out, lq_fwd_ws *ws, lq_err *err) {
    int64_t d = m->cfg.hidden_size;
    int     stp;
    LQ_TRY(lin_ws_reserve(ws, L, ws->max_tokens, err));
    for (int64_t t0 = 0; t0 < ntok; t0 += ws->max_tokens) {
        int64_t n = ntok - t0 < ws->max_tokens ? ntok - t0 : ws->max_tokens;
        LQ_TRY(mlp_block(m, L, xn + t0 * d, n, out + t0 * d, ws, NULL, NULL, -1, &stp, err));
    }
    return LQ_OK;
}

lq_status lq_model_embed(const lq_model *m, const int32_t *ids, int64_t n, float *h,
                         lq_err *err) {
    int64_t d = m->cfg.hidden_size;
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= m->cfg.vocab_size)
            LQ_FAIL(err, LQ_ERR_INVALID_ARG, "token id %d at position %lld outside vocab of %lld",
                    ids[i], (long long)i, (long long)m->cfg.vocab_size);
        memcpy(h + i * d, m->embed + (int64_t)ids[i] * d, (size_t)d * sizeof(float));
    }
    return LQ_OK;
}

lq_status lq_model_logits(const lq_model *m, const float *h, int64_t t, float *logits,
                          lq_fwd_ws *ws, lq_err *err) {
    int64_t d = m->cfg.hidden_size;
    for (int64_t t0 = 0; t0 < t; t0 += ws->max_tokens) {
        int64_t n = t - t0 < ws->max_tokens ? t - t0 : ws->max_tokens;
        lq_rmsnorm(h + t0 * d, m->final_norm, n, d, m->cfg.rms_norm_eps, ws->tmp);
        lq_status s = lq_linear_forward(&m->lm_head, ws->tmp, n, logits + t0 * m->cfg.vocab_size,
                                        NULL, 0, ws->nthreads);
        if (s != LQ_OK)
            LQ_FAIL(err, s, "%s: lm_head failed", m->dir);
    }
    return LQ_OK;
}
