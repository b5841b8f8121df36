/* Llama forward (quant/lq_model*.c) against an independent port of llama2.c run.c on the
 * original stories260K checkpoint, the layer-by-layer API contract (capture hook, stop_after,
 * attention/MLP sub-forwards, chunking), and lq_model_open's validation of broken checkpoints.
 *
 * Oracle mode for tests/py/test_forward_oracle.py:
 *   test_forward --logits MODEL_DIR IDS_FILE NSEQ OUT_FILE [MAX_TOKENS]
 * reads int32 ids [NSEQ * seqlen], runs NSEQ independent sequences and writes float32 logits
 * [NSEQ * seqlen, vocab] to OUT_FILE. */
#include "lq_base.h"
#include "lq_model.h"
#include "lq_test.h"
#include "lq_test_llama2c.h"

#include <sys/stat.h>

static float *forward_logits(const lq_model *m, const int32_t *ids, int64_t nseq, int64_t seqlen,
                             int64_t max_tokens, lq_status *st, lq_err *err) {
    const int64_t T = nseq * seqlen, d = m->cfg.hidden_size, V = m->cfg.vocab_size;
    float        *h = malloc((size_t)(T * d) * sizeof(float));
    float        *lg = malloc((size_t)(T * V) * sizeof(float));
    lq_fwd_ws    *ws = NULL;
    *st              = LQ_ERR_NOMEM;
    if (!h || !lg)
        goto fail;
    if ((*st = lq_fwd_ws_create(&m->cfg, max_tokens, seqlen, &ws, err)) != LQ_OK)
        goto fail;
    if ((*st = lq_model_embed(m, ids, T, h, err)) != LQ_OK)
        goto fail;
    for (int64_t l = 0; l < m->cfg.num_layers; l++)
        if ((*st = lq_layer_forward(m, &m->layers[l], h, nseq, seqlen, NULL, NULL, -1, ws, err)) !=
            LQ_OK)
            goto fail;
    if ((*st = lq_model_logits(m, h, T, lg, ws, err)) != LQ_OK)
        goto fail;
    lq_fwd_ws_free(ws);
    free(h);
    return lg;
fail:
    lq_fwd_ws_free(ws);
    free(h);
    free(lg);
    return NULL;
}

static int dump_logits(int argc, char **argv) {
    const char *dir = argv[2], *ids_path = argv[3], *out_path = argv[5];
    const int64_t nseq = atoll(argv[4]);
    char         *buf  = NULL;
    int64_t       len  = 0;
    lq_err        err  = {0};
    lq_model     *m    = NULL;
    lq_status     st   = lq_read_file(ids_path, 1 << 30, &buf, &len, &err);
    if (st == LQ_OK)
        st = lq_model_open(dir, &m, &err);
    if (st == LQ_OK)
        st = lq_model_load_all(m, &err);
    if (st != LQ_OK || nseq < 1 || len % (4 * nseq)) {
        fprintf(stderr, "test_forward --logits: %s: %s\n", lq_status_name(st), err.msg);
        free(buf);
        lq_model_free(m);
        return 1;
    }
    const int64_t seqlen     = len / 4 / nseq;
    const int64_t max_tokens = argc > 6 ? atoll(argv[6]) : nseq * seqlen;
    float        *lg = forward_logits(m, (const int32_t *)buf, nseq, seqlen, max_tokens, &st, &err);
    int           rc = 1;
    if (lg) {
        FILE *f = fopen(out_path, "wb");
        rc      = !f || fwrite(lg, sizeof(float), (size_t)(nseq * seqlen * m->cfg.vocab_size), f) !=
                       (size_t)(nseq * seqlen * m->cfg.vocab_size);
        if (f)
            fclose(f);
    } else {
        fprintf(stderr, "test_forward --logits: %s: %s\n", lq_status_name(st), err.msg);
    }
    free(lg);
    free(buf);
    lq_model_free(m);
    return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* 1. Logits vs the llama2.c port.                                                            */
/* ---------------------------------------------------------------------------------------- */
static double max_abs_diff_l2c(l2c_model *ref, const float *lg, const int32_t *ids, int n, int V) {
    double mx = 0;
    for (int pos = 0; pos < n; pos++) {
        const float *r = l2c_forward(ref, ids[pos], pos);
        for (int i = 0; i < V; i++) {
            const double dd = fabs((double)r[i] - lg[(int64_t)pos * V + i]);
            mx              = dd > mx ? dd : mx;
        }
    }
    return mx;
}

/* The HF file's q/k rows are the llama2.c rows permuted from interleaved pairs to rotate-half
 * halves (transformers' convert_llama_weights_to_hf permute): HF row h*hd + half*i2 + j holds
 * llama2.c row h*hd + 2j + i2. With the .bin rounded to fp16 the two must agree exactly. */
static void check_permutation(const lq_model *m, const l2c_model *ref) {
    const int64_t hd = m->cfg.head_dim, d = m->cfg.hidden_size, half = hd / 2;
    int64_t       mismatches = 0;
    for (int64_t l = 0; l < m->cfg.num_layers; l++) {
        const float *hq = m->layers[l].lin[LQ_LIN_Q].buf.q.dense;
        const float *hk = m->layers[l].lin[LQ_LIN_K].buf.q.dense;
        const float *lq = ref->wq + l * d * d;
        const float *lk = ref->wk + l * m->cfg.num_kv_heads * hd * d;
        for (int64_t which = 0; which < 2; which++) {
            const int64_t heads = which ? m->cfg.num_kv_heads : m->cfg.num_heads;
            const float  *hw = which ? hk : hq, *lw = which ? lk : lq;
            for (int64_t h = 0; h < heads; h++)
                for (int64_t i2 = 0; i2 < 2; i2++)
                    for (int64_t j = 0; j < half; j++)
                        for (int64_t c = 0; c < d; c++)
                            mismatches += hw[(h * hd + half * i2 + j) * d + c] !=
                                          lw[(h * hd + 2 * j + i2) * d + c];
        }
    }
    CHECK_EQ_INT(mismatches, 0);
}

static void test_vs_llama2c(const lq_model *m, const char *bin, const char *tokbin,
                            const char *text_path) {
    l2c_model ref16, ref32;
    l2c_tok   tok;
    CHECK_EQ_INT(l2c_load(bin, 1, &ref16), 0);
    CHECK_EQ_INT(l2c_load(bin, 0, &ref32), 0);
    CHECK_EQ_INT(l2c_tok_load(tokbin, 512, &tok), 0);
    char   *text = NULL;
    int64_t tlen = 0;
    lq_err  err  = {0};
    CHECK_OK(lq_read_file(text_path, 1 << 20, &text, &tlen, &err));
    if (!ref16.data || !ref32.data || !tok.vocab || !text)
        goto done;
    CHECK_EQ_INT(ref16.dim, m->cfg.hidden_size);
    CHECK_EQ_INT(ref16.n_kv_heads, m->cfg.num_kv_heads);
    check_permutation(m, &ref16);

    /* the first story: BOS + text, 256 tokens (positions up to 255 exercise RoPE well) */
    int      n   = 0;
    int32_t *ids = l2c_encode(&tok, text, tlen > 1500 ? 1500 : tlen, 1, &n);
    CHECK(ids && n >= 256);
    if (ids && n >= 256) {
        n            = 256;
        lq_status st = LQ_OK;
        float    *lg = forward_logits(m, ids, 1, n, n, &st, &err);
        CHECK_MSG(lg, "forward failed: %s", err.msg);
        if (lg) {
            const double d16 = max_abs_diff_l2c(&ref16, lg, ids, n, 512);
            const double d32 = max_abs_diff_l2c(&ref32, lg, ids, n, 512);
            printf("logits vs llama2.c run.c port over %d positions: max |diff| %.3g with the .bin "
                   "rounded to fp16 (as stored in the HF file), %.3g with the fp32 .bin\n",
                   n, d16, d32);
            CHECK_MSG(d16 < 1e-4, "max |diff| vs fp16-rounded llama2.c = %g", d16);
            /* fp32 weights vs the fp16 HF export: the export's rounding, not a bug */
            CHECK_MSG(d32 < 0.05, "max |diff| vs fp32 llama2.c = %g", d32);
        }
        free(lg);
    }
    free(ids);
done:
    free(text);
    l2c_tok_free(&tok);
    l2c_free(&ref16);
    l2c_free(&ref32);
}

/* ---------------------------------------------------------------------------------------- */
/* 2. Layer API contract.                                                                     */
/* ---------------------------------------------------------------------------------------- */
typedef struct cap_log {
    int      n;
    int      ids[64];
    int64_t  t[64], k[64];
    float   *copy[64]; /* copies of the captured inputs */
} cap_log;

static lq_status cap_fn(void *user, lq_lin_id lin, const float *x, int64_t t, int64_t k) {
    cap_log *c = user;
    if (c->n >= 64)
        return LQ_ERR_INTERNAL;
    c->ids[c->n] = (int)lin;
    c->t[c->n]   = t;
    c->k[c->n]   = k;
    c->copy[c->n] = malloc((size_t)(t * k) * sizeof(float));
    if (!c->copy[c->n])
        return LQ_ERR_NOMEM;
    memcpy(c->copy[c->n], x, (size_t)(t * k) * sizeof(float));
    c->n++;
    return LQ_OK;
}

static void cap_clear(cap_log *c) {
    for (int i = 0; i < c->n; i++)
        free(c->copy[i]);
    memset(c, 0, sizeof *c);
}

static lq_status cap_abort(void *user, lq_lin_id lin, const float *x, int64_t t, int64_t k) {
    (void)user, (void)x, (void)t, (void)k;
    return lin == LQ_LIN_UP ? LQ_ERR_INTERRUPTED : LQ_OK;
}

static double max_diff(const float *a, const float *b, int64_t n) {
    double mx = 0;
    for (int64_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - b[i]);
        mx             = d > mx || d != d ? d : mx;
    }
    return mx;
}

static void naive_rmsnorm(const float *x, const float *w, int64_t rows, int64_t d, double eps,
                          float *out) {
    for (int64_t r = 0; r < rows; r++) {
        double ss = 0;
        for (int64_t i = 0; i < d; i++)
            ss += (double)x[r * d + i] * x[r * d + i];
        const double inv = 1.0 / sqrt(ss / d + eps);
        for (int64_t i = 0; i < d; i++)
            out[r * d + i] = (float)(w[i] * x[r * d + i] * inv);
    }
}

static void test_layer_api(const lq_model *m) {
    const int64_t nseq = 3, seqlen = 40, T = nseq * seqlen, d = m->cfg.hidden_size;
    const int64_t ff = m->cfg.intermediate_size;
    lq_rng        rng;
    lq_rng_seed(&rng, 1234);
    int32_t ids[3 * 40];
    for (int64_t i = 0; i < T; i++)
        ids[i] = (int32_t)lq_rng_below(&rng, (uint64_t)m->cfg.vocab_size);
    float *h0 = malloc((size_t)(T * d) * 4), *h1 = malloc((size_t)(T * d) * 4);
    float *h2 = malloc((size_t)(T * d) * 4), *xn = malloc((size_t)(T * d) * 4);
    float *a  = malloc((size_t)(T * d) * 4), *b = malloc((size_t)(T * d) * 4);
    float *tmp = malloc((size_t)(T * ff) * 4);
    lq_fwd_ws *ws_small = NULL, *ws_big = NULL;
    lq_err     err      = {0};
    cap_log    cl       = {0};
    CHECK_OK(lq_fwd_ws_create(&m->cfg, seqlen, seqlen, &ws_small, &err)); /* 1 sequence a chunk */
    CHECK_OK(lq_fwd_ws_create(&m->cfg, T, seqlen, &ws_big, &err));
    if (!h0 || !h1 || !h2 || !xn || !a || !b || !tmp || !ws_small || !ws_big)
        goto done;
    /* start from layer 2's input so the residual stream is realistic */
    CHECK_OK(lq_model_embed(m, ids, T, h0, &err));
    for (int l = 0; l < 2; l++)
        CHECK_OK(lq_layer_forward(m, &m->layers[l], h0, nseq, seqlen, NULL, NULL, -1, ws_big,
                                  &err));
    const lq_layer *L = &m->layers[2];

    /* chunking: one sequence per chunk vs all at once, and 1 thread vs all */
    memcpy(h1, h0, (size_t)(T * d) * 4);
    memcpy(h2, h0, (size_t)(T * d) * 4);
    lq_fwd_ws_set_threads(ws_small, 1);
    CHECK_OK(lq_layer_forward(m, L, h1, nseq, seqlen, NULL, NULL, -1, ws_small, &err));
    CHECK_OK(lq_layer_forward(m, L, h2, nseq, seqlen, NULL, NULL, -1, ws_big, &err));
    CHECK_MSG(max_diff(h1, h2, T * d) < 1e-5, "chunked vs whole: %g", max_diff(h1, h2, T * d));
    CHECK(max_diff(h0, h2, T * d) > 1e-3); /* the layer did something */

    /* layer = h + attn(norm1(h)); then + mlp(norm2(.)), through the sub-module forwards */
    naive_rmsnorm(h0, L->attn_norm, T, d, m->cfg.rms_norm_eps, xn);
    CHECK_OK(lq_attn_forward(m, L, xn, nseq, seqlen, a, ws_small, &err));
    for (int64_t i = 0; i < T * d; i++)
        a[i] += h0[i];
    naive_rmsnorm(a, L->mlp_norm, T, d, m->cfg.rms_norm_eps, xn);
    CHECK_OK(lq_mlp_forward(m, L, xn, T, b, ws_small, &err));
    for (int64_t i = 0; i < T * d; i++)
        b[i] += a[i];
    CHECK_MSG(max_diff(b, h2, T * d) < 1e-5, "attn+mlp composition vs layer: %g",
              max_diff(b, h2, T * d));

    /* capture hook, full run: 7 captures per chunk in lq_lin_id order with the right inputs */
    memcpy(h1, h0, (size_t)(T * d) * 4);
    CHECK_OK(lq_layer_forward(m, L, h1, nseq, seqlen, cap_fn, &cl, -1, ws_big, &err));
    CHECK_EQ_INT(cl.n, 7);
    CHECK_MSG(max_diff(h1, h2, T * d) == 0, "the hook changed the result");
    if (cl.n == 7) {
        for (int i = 0; i < 7; i++) {
            int64_t n, k;
            lq_lin_shape(&m->cfg, (lq_lin_id)i, &n, &k);
            CHECK_EQ_INT(cl.ids[i], i);
            CHECK_EQ_INT(cl.t[i], T);
            CHECK_EQ_INT(cl.k[i], k);
        }
        naive_rmsnorm(h0, L->attn_norm, T, d, m->cfg.rms_norm_eps, xn);
        CHECK_MSG(max_diff(cl.copy[LQ_LIN_Q], xn, T * d) < 1e-6, "q input != rmsnorm(h)");
        CHECK(max_diff(cl.copy[LQ_LIN_K], cl.copy[LQ_LIN_Q], T * d) == 0);
        CHECK(max_diff(cl.copy[LQ_LIN_V], cl.copy[LQ_LIN_Q], T * d) == 0);
        /* o_proj(captured o input) == attention output */
        CHECK_OK(lq_attn_forward(m, L, xn, nseq, seqlen, a, ws_big, &err));
        CHECK_OK(lq_linear_forward(&L->lin[LQ_LIN_O], cl.copy[LQ_LIN_O], T, b, NULL, 0, 0));
        CHECK_MSG(max_diff(a, b, T * d) < 1e-6, "o_proj input inconsistent");
        /* gate/up input == rmsnorm2(h + attn); down(down input) == mlp output */
        for (int64_t i = 0; i < T * d; i++)
            a[i] += h0[i];
        naive_rmsnorm(a, L->mlp_norm, T, d, m->cfg.rms_norm_eps, xn);
        CHECK_MSG(max_diff(cl.copy[LQ_LIN_GATE], xn, T * d) < 1e-5, "gate input");
        CHECK(max_diff(cl.copy[LQ_LIN_UP], cl.copy[LQ_LIN_GATE], T * d) == 0);
        /* silu(gate(x)) * up(x) recomputed here */
        float *g = tmp;
        CHECK_OK(lq_linear_forward(&L->lin[LQ_LIN_GATE], cl.copy[LQ_LIN_GATE], T, g, NULL, 0, 0));
        float *u = malloc((size_t)(T * ff) * 4);
        if (u) {
            CHECK_OK(lq_linear_forward(&L->lin[LQ_LIN_UP], cl.copy[LQ_LIN_UP], T, u, NULL, 0, 0));
            double mx = 0;
            for (int64_t i = 0; i < T * ff; i++) {
                const double ref = (double)g[i] / (1.0 + exp(-(double)g[i])) * u[i];
                const double dd  = fabs(ref - cl.copy[LQ_LIN_DOWN][i]);
                mx               = dd > mx ? dd : mx;
            }
            CHECK_MSG(mx < 1e-5, "down input vs silu(gate)*up: %g", mx);
            free(u);
        }
    }
    cap_clear(&cl);

    /* capture with several chunks: 7 calls per chunk, each over one sequence */
    memcpy(h1, h0, (size_t)(T * d) * 4);
    CHECK_OK(lq_layer_forward(m, L, h1, nseq, seqlen, cap_fn, &cl, -1, ws_small, &err));
    CHECK_EQ_INT(cl.n, 7 * nseq);
    for (int i = 0; i < cl.n; i++) {
        CHECK_EQ_INT(cl.ids[i], i % 7);
        CHECK_EQ_INT(cl.t[i], seqlen);
    }
    cap_clear(&cl);

    /* stop_after: captures up to that linear, h untouched (GPTQ true-sequential groups) */
    const int stops[] = {LQ_LIN_V, LQ_LIN_O, LQ_LIN_UP, LQ_LIN_DOWN};
    for (int si = 0; si < 4; si++) {
        memcpy(h1, h0, (size_t)(T * d) * 4);
        CHECK_OK(lq_layer_forward(m, L, h1, nseq, seqlen, cap_fn, &cl, stops[si], ws_small, &err));
        CHECK_EQ_INT(cl.n, (stops[si] + 1) * nseq);
        CHECK(max_diff(h1, h0, T * d) == 0);
        cap_clear(&cl);
    }
    /* a hook error aborts the forward with its status and a message naming the linear */
    memcpy(h1, h0, (size_t)(T * d) * 4);
    lq_status st = lq_layer_forward(m, L, h1, nseq, seqlen, cap_abort, NULL, -1, ws_big, &err);
    CHECK_EQ_INT(st, LQ_ERR_INTERRUPTED);
    CHECK(strstr(err.msg, "mlp.up_proj") != NULL);
    /* workspace too small for the sequence */
    st = lq_layer_forward(m, L, h1, 1, 2 * seqlen, NULL, NULL, -1, ws_small, &err);
    CHECK_EQ_INT(st, LQ_ERR_INVALID_ARG);
done:
    cap_clear(&cl);
    lq_fwd_ws_free(ws_small);
    lq_fwd_ws_free(ws_big);
    free(h0), free(h1), free(h2), free(xn), free(a), free(b), free(tmp);
}

/* ---------------------------------------------------------------------------------------- */
/* 3. Validation of broken checkpoints (each a copy of stories260K with one defect).          */
/* ---------------------------------------------------------------------------------------- */
typedef enum { BREAK_DROP, BREAK_SHAPE, BREAK_DTYPE, BREAK_NAN, BREAK_INF_F16 } break_kind;

static lq_status write_broken(const char *src, const char *dst, const char *victim, break_kind how,
                              lq_err *err) {
    char p[4200], q[4200];
    mkdir(dst, 0755);
    snprintf(p, sizeof p, "%s/config.json", src);
    snprintf(q, sizeof q, "%s/config.json", dst);
    char   *cfg = NULL;
    int64_t len = 0;
    LQ_TRY(lq_read_file(p, 1 << 20, &cfg, &len, err));
    FILE *f = fopen(q, "wb");
    if (!f || fwrite(cfg, 1, (size_t)len, f) != (size_t)len) {
        free(cfg);
        if (f)
            fclose(f);
        return lq_fail(err, LQ_ERR_IO, "%s: write failed", q);
    }
    fclose(f);
    free(cfg);
    lq_st        *st = NULL;
    lq_st_writer *w  = NULL;
    LQ_TRY(lq_st_open_dir(src, &st, err));
    lq_status s = lq_st_writer_create(dst, 0, &w, err);
    for (int64_t i = 0; s == LQ_OK && i < lq_st_count(st); i++) {
        const lq_st_tensor *t = lq_st_get(st, i);
        if (strcmp(t->name, victim) != 0) {
            s = lq_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data, err);
            continue;
        }
        float *v = malloc((size_t)t->numel * 4);
        if (!v) {
            s = LQ_ERR_NOMEM;
            break;
        }
        lq_convert_to_f32(t->dtype, t->data, t->numel, v);
        int64_t shape[LQ_ST_MAX_DIMS];
        memcpy(shape, t->shape, sizeof shape);
        switch (how) {
        case BREAK_DROP: break;
        case BREAK_SHAPE:
            shape[0] -= 1; /* one row short */
            s = lq_st_writer_add_f32(w, t->name, LQ_DT_F16, t->ndim, shape, v, err);
            break;
        case BREAK_DTYPE: {
            int32_t *iv = malloc((size_t)t->numel * 4);
            for (int64_t j = 0; iv && j < t->numel; j++)
                iv[j] = (int32_t)v[j];
            s = iv ? lq_st_writer_add(w, t->name, LQ_DT_I32, t->ndim, shape, iv, err)
                   : LQ_ERR_NOMEM;
            free(iv);
            break;
        }
        case BREAK_NAN:
            v[t->numel / 2] = NAN;
            s = lq_st_writer_add_f32(w, t->name, LQ_DT_F32, t->ndim, shape, v, err);
            break;
        case BREAK_INF_F16:
            v[t->numel - 1] = 1e6f; /* overflows fp16 -> Inf */
            s = lq_st_writer_add_f32(w, t->name, LQ_DT_F16, t->ndim, shape, v, err);
            break;
        }
        free(v);
    }
    if (s == LQ_OK)
        s = lq_st_writer_finish(w, err);
    lq_st_writer_free(w);
    lq_st_close(st);
    return s;
}

static void test_validation(const char *src, const char *tmp) {
    static const struct {
        const char *victim;
        break_kind  how;
        lq_status   want;
    } cases[] = {
        {"model.layers.3.mlp.up_proj.weight", BREAK_DROP, LQ_ERR_ST_MISSING_TENSOR},
        {"model.layers.4.post_attention_layernorm.weight", BREAK_DROP, LQ_ERR_ST_MISSING_TENSOR},
        {"model.embed_tokens.weight", BREAK_DROP, LQ_ERR_ST_MISSING_TENSOR},
        {"model.layers.1.self_attn.k_proj.weight", BREAK_SHAPE, LQ_ERR_WEIGHT_SHAPE},
        {"model.norm.weight", BREAK_DTYPE, LQ_ERR_WEIGHT_DTYPE},
        {"model.layers.4.mlp.down_proj.weight", BREAK_NAN, LQ_ERR_WEIGHT_NONFINITE},
        {"model.layers.0.self_attn.o_proj.weight", BREAK_INF_F16, LQ_ERR_WEIGHT_NONFINITE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dst[4200];
        snprintf(dst, sizeof dst, "%s/broken_%zu", tmp, i);
        lq_err e = {0};
        lq_status ws = write_broken(src, dst, cases[i].victim, cases[i].how, &e);
        CHECK_MSG(ws == LQ_OK, "writing %s: %s", dst, e.msg);
        if (ws != LQ_OK)
            continue;
        lq_model *m  = NULL;
        lq_status st = lq_model_open(dst, &m, &e);
        CHECK_MSG(st == cases[i].want, "%s: got %s (%s), want %s", cases[i].victim,
                  lq_status_name(st), e.msg, lq_status_name(cases[i].want));
        CHECK(m == NULL);
        CHECK_MSG(strstr(e.msg, cases[i].victim) != NULL, "message does not name the tensor: %s",
                  e.msg);
        CHECK_MSG(strstr(e.msg, dst) != NULL, "message does not name the file: %s", e.msg);
        printf("  %-48s -> %s: %s\n", cases[i].victim, lq_status_name(st), e.msg);
        lq_model_free(m);
    }
    lq_model *m = NULL;
    lq_err    e = {0};
    char      nodir[4200];
    snprintf(nodir, sizeof nodir, "%s/does_not_exist", tmp);
    CHECK_EQ_INT(lq_model_open(nodir, &m, &e), LQ_ERR_NOT_FOUND);
}

int main(int argc, char **argv) {
    if (argc >= 6 && strcmp(argv[1], "--logits") == 0)
        return dump_logits(argc, argv);
    const char *sh  = lq_test_env_or_skip("LQ_SHARED");
    const char *tmp = lq_test_env_or_skip("LQ_TMP");
    char        dir[4096], bin[4200], tok[4200], text[4200];
    snprintf(dir, sizeof dir, "%s/models/stories260K", sh);
    snprintf(bin, sizeof bin, "%s/llama2c/stories260K.bin", dir);
    snprintf(tok, sizeof tok, "%s/llama2c/tok512.bin", dir);
    snprintf(text, sizeof text, "%s/data/tinystories/tinystories_sample.txt", sh);
    if (!lq_dir_exists(dir) || !lq_file_exists(bin) || !lq_file_exists(text)) {
        printf("SKIP: stories260K or the TinyStories sample not under %s\n", sh);
        return 77;
    }
    mkdir(tmp, 0755);
    lq_model *m   = NULL;
    lq_err    err = {0};
    lq_status st  = lq_model_open(dir, &m, &err);
    CHECK_MSG(st == LQ_OK, "lq_model_open: %s", err.msg);
    if (st == LQ_OK) {
        CHECK_EQ_INT(m->format, LQ_FMT_DENSE);
        CHECK(m->lm_head.buf.q.dense == m->embed); /* tied */
        st = lq_model_load_all(m, &err);
        CHECK_MSG(st == LQ_OK, "load: %s", err.msg);
    }
    if (st == LQ_OK) {
        test_vs_llama2c(m, bin, tok, text);
        test_layer_api(m);
    }
    lq_model_free(m);
    test_validation(dir, tmp);
    return lq_test_end("forward");
}
