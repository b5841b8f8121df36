/* Llama forward (quant/model/lq_model*.c) against an independent port of llama2.c run.c on the
 * original stories260K checkpoint, the layer-by-layer API contract (capture hook, stop_after,
 * attention/MLP sub-forwards, chunking), lq_model_open's validation of broken checkpoints, and
 * quantized checkpoints (GPTQ, NF4, INT8 written through formats/lq_qformat.h) against the
 * same model with every quantized linear replaced by its scalar-reference dequantization.
 *
 * Oracle mode for tests/py/test_forward_oracle.py:
 *   test_forward --logits MODEL_DIR IDS_FILE NSEQ OUT_FILE [MAX_TOKENS]
 * reads int32 ids [NSEQ * seqlen], runs NSEQ independent sequences and writes float32 logits
 * [NSEQ * seqlen, vocab] to OUT_FILE. */
#include "lq_base.h"
#include "lq_qformat.h"
#include "lq_json.h"
#include "lq_model.h"
#include "lq_test.h"
#include "lq_test_llama2c.h"

#include <sys/stat.h>

static float *forward_logits(const lq_model *m, const int32_t *ids, int64_t nseq, int64_t seqlen,
                             int64_t max_tokens, lq_status *st, lq_err *err) {
    const int64_t T = nseq * seqlen, d = m->cfg.hidden_size, V = m->cfg.vocab_size;
    float        *h  = malloc((size_t)(T * d) * sizeof(float));
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
    const char   *dir = argv[2], *ids_path = argv[3], *out_path = argv[5];
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
    int     n;
    int     ids[64];
    int64_t t[64], k[64];
    float  *copy[64]; /* copies of the captured inputs */
} cap_log;

static lq_status cap_fn(void *user, int64_t lin, const float *x, int64_t t, int64_t k) {
    cap_log *c = user;
    if (c->n >= 64)
        return LQ_ERR_INTERNAL;
    c->ids[c->n]  = (int)lin;
    c->t[c->n]    = t;
    c->k[c->n]    = k;
    c->copy[c->n] = malloc((size_t)(t * k) * sizeof(float));
    if (!c->copy[c->n])
        return LQ_ERR_NOMEM;
    memcpy(c->copy[c->n], x, (size_t)(t * k) * sizeof(float));
    c->n++;
    return LQ_OK;
}

/* The captured input of linear id (its first capture), NULL if none. */
static float *cap_of(const cap_log *c, lq_lin_id id) {
    for (int i = 0; i < c->n; i++)
        if (c->ids[i] == (int)id)
            return c->copy[i];
    return NULL;
}

static void cap_clear(cap_log *c) {
    for (int i = 0; i < c->n; i++)
        free(c->copy[i]);
    memset(c, 0, sizeof *c);
}

static lq_status cap_abort(void *user, int64_t lin, const float *x, int64_t t, int64_t k) {
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
    float     *h0 = malloc((size_t)(T * d) * 4), *h1 = malloc((size_t)(T * d) * 4);
    float     *h2 = malloc((size_t)(T * d) * 4), *xn = malloc((size_t)(T * d) * 4);
    float     *a = malloc((size_t)(T * d) * 4), *b = malloc((size_t)(T * d) * 4);
    float     *tmp      = malloc((size_t)(T * ff) * 4);
    lq_fwd_ws *ws_small = NULL, *ws_big = NULL;
    lq_err     err = {0};
    cap_log    cl  = {0};
    CHECK_OK(lq_fwd_ws_create(&m->cfg, seqlen, seqlen, &ws_small, &err)); /* 1 sequence a chunk */
    CHECK_OK(lq_fwd_ws_create(&m->cfg, T, seqlen, &ws_big, &err));
    if (!h0 || !h1 || !h2 || !xn || !a || !b || !tmp || !ws_small || !ws_big)
        goto done;
    /* start from layer 2's input so the residual stream is realistic */
    CHECK_OK(lq_model_embed(m, ids, T, h0, &err));
    for (int l = 0; l < 2; l++)
        CHECK_OK(
            lq_layer_forward(m, &m->layers[l], h0, nseq, seqlen, NULL, NULL, -1, ws_big, &err));
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
        for (int i = 0, id = 0; i < 7; i++, id++) {
            int64_t n, k;
            while (!lq_lin_present(&m->cfg, (lq_lin_id)id))
                id++;
            lq_lin_shape(&m->cfg, (lq_lin_id)id, &n, &k);
            CHECK_EQ_INT(cl.ids[i], id);
            CHECK_EQ_INT(cl.t[i], T);
            CHECK_EQ_INT(cl.k[i], k);
        }
        naive_rmsnorm(h0, L->attn_norm, T, d, m->cfg.rms_norm_eps, xn);
        CHECK_MSG(max_diff(cap_of(&cl, LQ_LIN_Q), xn, T * d) < 1e-6, "q input != rmsnorm(h)");
        CHECK(max_diff(cap_of(&cl, LQ_LIN_K), cap_of(&cl, LQ_LIN_Q), T * d) == 0);
        CHECK(max_diff(cap_of(&cl, LQ_LIN_V), cap_of(&cl, LQ_LIN_Q), T * d) == 0);
        /* o_proj(captured o input) == attention output */
        CHECK_OK(lq_attn_forward(m, L, xn, nseq, seqlen, a, ws_big, &err));
        CHECK_OK(lq_linear_forward(&L->lin[LQ_LIN_O], cap_of(&cl, LQ_LIN_O), T, b, NULL, 0, 0));
        /* 1e-5 like the other sub-module checks: the two o_proj products can take different
         * OpenBLAS blockings (seen once under a loaded ctest -j2: over 1e-6) */
        CHECK_MSG(max_diff(a, b, T * d) < 1e-5, "o_proj input inconsistent: %g",
                  max_diff(a, b, T * d));
        /* gate/up input == rmsnorm2(h + attn); down(down input) == mlp output */
        for (int64_t i = 0; i < T * d; i++)
            a[i] += h0[i];
        naive_rmsnorm(a, L->mlp_norm, T, d, m->cfg.rms_norm_eps, xn);
        CHECK_MSG(max_diff(cap_of(&cl, LQ_LIN_GATE), xn, T * d) < 1e-5, "gate input");
        CHECK(max_diff(cap_of(&cl, LQ_LIN_UP), cap_of(&cl, LQ_LIN_GATE), T * d) == 0);
        /* silu(gate(x)) * up(x) recomputed here */
        float *g = tmp;
        CHECK_OK(
            lq_linear_forward(&L->lin[LQ_LIN_GATE], cap_of(&cl, LQ_LIN_GATE), T, g, NULL, 0, 0));
        float *u = malloc((size_t)(T * ff) * 4);
        if (u) {
            CHECK_OK(
                lq_linear_forward(&L->lin[LQ_LIN_UP], cap_of(&cl, LQ_LIN_UP), T, u, NULL, 0, 0));
            double mx = 0;
            for (int64_t i = 0; i < T * ff; i++) {
                const double ref = (double)g[i] / (1.0 + exp(-(double)g[i])) * u[i];
                const double dd  = fabs(ref - cap_of(&cl, LQ_LIN_DOWN)[i]);
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
        CHECK_EQ_INT(cl.ids[i], cl.ids[i % 7]); /* the same order in every chunk */
        CHECK_EQ_INT(cl.t[i], seqlen);
    }
    cap_clear(&cl);

    /* stop_after: captures up to that linear, h untouched (GPTQ true-sequential groups) */
    const int stops[] = {LQ_LIN_V, LQ_LIN_O, LQ_LIN_UP, LQ_LIN_DOWN};
    for (int si = 0; si < 4; si++) {
        memcpy(h1, h0, (size_t)(T * d) * 4);
        CHECK_OK(lq_layer_forward(m, L, h1, nseq, seqlen, cap_fn, &cl, stops[si], ws_small, &err));
        int upto = 0; /* linears up to and including the stop */
        for (int id = 0; id <= stops[si]; id++)
            upto += lq_lin_present(&m->cfg, (lq_lin_id)id);
        CHECK_EQ_INT(cl.n, upto * nseq);
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

/* Attention weights for GPTQ's v_proj Hessian. With q_proj zeroed every score is 0, so the
 * causal softmax is uniform: P(q, t) = 1/(q+1) for t <= q, and the weight a key token t of a
 * sequence of S receives is H * sum_{q=t}^{S-1} 1/(q+1)^2, exactly. */
typedef struct aw_log {
    const lq_fwd_ws *ws;
    float           *a; /* [T] weights seen at the v capture, concatenated over chunks */
    int64_t          filled, v_calls, other_calls;
    int              null_seen;
    const float     *xq; /* q's input in this chunk, to check v's is the same */
    double           v_vs_q;
} aw_log;

static lq_status aw_fn(void *user, int64_t lin, const float *x, int64_t t, int64_t k) {
    aw_log *c = user;
    if (lin == LQ_LIN_Q)
        c->xq = x;
    if (lin != LQ_LIN_V) {
        c->other_calls++;
        return LQ_OK;
    }
    const float *a = lq_fwd_ws_attn_weights(c->ws);
    c->v_calls++;
    if (!a) {
        c->null_seen = 1;
        return LQ_OK;
    }
    memcpy(c->a + c->filled, a, (size_t)t * sizeof(float));
    c->filled += t;
    (void)k;
    return LQ_OK;
}

static void test_attn_weights(lq_model *m) {
    const int64_t nseq = 3, seqlen = 40, T = nseq * seqlen, d = m->cfg.hidden_size;
    const int64_t H  = m->cfg.num_heads;
    lq_layer     *L  = &m->layers[2];
    float        *wq = lq_linear_dense_mut(&L->lin[LQ_LIN_Q]);
    int64_t       nq, kq;
    lq_lin_shape(&m->cfg, LQ_LIN_Q, &nq, &kq);
    float     *save = malloc((size_t)(nq * kq) * 4), *h = malloc((size_t)(T * d) * 4);
    float     *h_off = malloc((size_t)(T * d) * 4), *a = malloc((size_t)T * 4);
    lq_fwd_ws *ws[2] = {NULL, NULL};
    lq_err     err   = {0};
    CHECK(wq != NULL);
    if (!wq || !save || !h || !h_off || !a)
        goto done;
    CHECK_OK(lq_fwd_ws_create(&m->cfg, seqlen, seqlen, &ws[0], &err)); /* a chunk per sequence */
    CHECK_OK(lq_fwd_ws_create(&m->cfg, T, seqlen, &ws[1], &err));
    if (!ws[0] || !ws[1])
        goto done;
    memcpy(save, wq, (size_t)(nq * kq) * 4);
    memset(wq, 0, (size_t)(nq * kq) * 4);
    for (int64_t i = 0; i < T * d; i++)
        h_off[i] = (float)sin(0.37 * (double)i) * 0.5f;
    float *h_ref = malloc((size_t)(T * d) * 4);
    if (!h_ref)
        goto restore;
    for (int w = 0; w < 2; w++) {
        /* the reference: the same forward without attention weights, same chunking */
        memcpy(h_ref, h_off, (size_t)(T * d) * 4);
        CHECK_OK(lq_layer_forward(m, L, h_ref, nseq, seqlen, NULL, NULL, -1, ws[w], &err));
        aw_log c = {.ws = ws[w], .a = a};
        memcpy(h, h_off, (size_t)(T * d) * 4);
        lq_fwd_ws_want_attn_weights(ws[w], 1);
        CHECK_OK(lq_layer_forward(m, L, h, nseq, seqlen, aw_fn, &c, -1, ws[w], &err));
        lq_fwd_ws_want_attn_weights(ws[w], 0);
        CHECK_EQ_INT(c.v_calls, w ? 1 : nseq);
        CHECK_EQ_INT(c.other_calls, 6 * c.v_calls);
        CHECK(!c.null_seen);
        CHECK_EQ_INT(c.filled, T);
        CHECK_MSG(max_diff(h, h_ref, T * d) == 0, "weights changed the forward (ws %d)", w);
        double worst = 0;
        for (int64_t s = 0; s < nseq; s++)
            for (int64_t t = 0; t < seqlen; t++) {
                double want = 0;
                for (int64_t q = t; q < seqlen; q++)
                    want += 1.0 / ((double)(q + 1) * (double)(q + 1));
                want *= (double)H;
                const double e = fabs(a[s * seqlen + t] - want) / want;
                worst          = e > worst ? e : worst;
            }
        CHECK_MSG(worst < 1e-4, "attention weights vs uniform causal softmax: rel %g (ws %d)",
                  worst, w);
        /* off again: the hook gets NULL and v's input comes before the attention */
        c = (aw_log){.ws = ws[w], .a = a};
        memcpy(h, h_off, (size_t)(T * d) * 4);
        CHECK_OK(lq_layer_forward(m, L, h, nseq, seqlen, aw_fn, &c, -1, ws[w], &err));
        CHECK(c.null_seen && c.filled == 0);
    }
    free(h_ref);
restore:
    memcpy(wq, save, (size_t)(nq * kq) * 4);
    {
        /* the weights do not depend on the thread schedule (they feed GPTQ's v_proj Hessian:
         * a conversion must give the same bytes every time): a sequence long enough for the
         * threaded attention, 1 thread and 2, twice each, all bit-equal */
        const int64_t S  = 512;
        lq_fwd_ws    *wl = NULL;
        float        *hl = malloc((size_t)(S * d) * 4), *al[4] = {0};
        CHECK_OK(lq_fwd_ws_create(&m->cfg, S, S, &wl, &err));
        for (int r = 0; r < 4; r++)
            al[r] = malloc((size_t)S * 4);
        if (wl && hl && al[0] && al[1] && al[2] && al[3]) {
            lq_fwd_ws_want_attn_weights(wl, 1);
            for (int r = 0; r < 4; r++) {
                aw_log c = {.ws = wl, .a = al[r]};
                for (int64_t i = 0; i < S * d; i++)
                    hl[i] = (float)sin(0.37 * (double)i) * 0.5f;
                lq_fwd_ws_set_threads(wl, r % 2 ? 2 : 1);
                CHECK_OK(lq_layer_forward(m, L, hl, 1, S, aw_fn, &c, -1, wl, &err));
                CHECK_EQ_INT(c.filled, S);
                CHECK_MSG(memcmp(al[r], al[0], (size_t)S * 4) == 0,
                          "attention weights of run %d (%d threads) differ from run 0", r,
                          r % 2 ? 2 : 1);
            }
        }
        lq_fwd_ws_free(wl);
        free(hl);
        for (int r = 0; r < 4; r++)
            free(al[r]);
    }
done:
    lq_fwd_ws_free(ws[0]);
    lq_fwd_ws_free(ws[1]);
    free(save), free(h), free(h_off), free(a);
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
        case BREAK_DROP:
            break;
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
            s               = lq_st_writer_add_f32(w, t->name, LQ_DT_F32, t->ndim, shape, v, err);
            break;
        case BREAK_INF_F16:
            v[t->numel - 1] = 1e6f; /* overflows fp16 -> Inf */
            s               = lq_st_writer_add_f32(w, t->name, LQ_DT_F16, t->ndim, shape, v, err);
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
        lq_err    e  = {0};
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

/* ---------------------------------------------------------------------------------------- */
/* 4. Quantized checkpoints.                                                                  */
/* ---------------------------------------------------------------------------------------- */

/* Round-to-nearest codes for one linear W [n, k] in format f; 0 = the format cannot hold this
 * shape (the linear stays dense, as a quantizer would leave it). corrupt: one NaN scale. */
static int quantize_rtn(lq_format f, const float *W, int64_t n, int64_t k, int corrupt,
                        lq_qbuf *out, lq_err *err) {
    lq_status st = LQ_ERR_INVALID_ARG;
    if (f == LQ_FMT_GPTQ) {
        const int64_t g = 32, G = k / g;
        if (k % g || n % 8)
            return 0;
        uint8_t *q  = malloc((size_t)(n * k));
        int32_t *z  = malloc((size_t)(G * n) * sizeof(int32_t));
        float   *sc = malloc((size_t)(G * n) * sizeof(float));
        for (int64_t gi = 0; q && z && sc && gi < G; gi++)
            for (int64_t r = 0; r < n; r++) {
                float mx = 0;
                for (int64_t c = gi * g; c < (gi + 1) * g; c++)
                    mx = fabsf(W[r * k + c]) > mx ? fabsf(W[r * k + c]) : mx;
                const float s  = mx > 0 ? mx / 7.f : 1.f;
                sc[gi * n + r] = s;
                z[gi * n + r]  = 8;
                for (int64_t c = gi * g; c < (gi + 1) * g; c++) {
                    const float v = roundf(W[r * k + c] / s) + 8;
                    q[r * k + c]  = (uint8_t)(v < 0 ? 0 : v > 15 ? 15 : v);
                }
            }
        if (q && z && sc)
            st = lq_pack_gptq(4, n, k, g, q, z, sc, NULL, NULL, out, err);
        for (int i = 0; st == LQ_OK && corrupt && i < out->nmem; i++)
            if (out->mem[i] == out->q.scales)
                ((uint16_t *)out->mem[i])[3] = 0x7e00; /* fp16 NaN */
        free(q), free(z), free(sc);
    } else if (f == LQ_FMT_NF4) {
        const int64_t bs = 64, nb = (n * k + bs - 1) / bs;
        uint8_t      *codes = malloc((size_t)(n * k));
        float        *am    = malloc((size_t)nb * sizeof(float));
        for (int64_t b = 0; codes && am && b < nb; b++) {
            const int64_t e  = (b + 1) * bs < n * k ? (b + 1) * bs : n * k;
            float         mx = 0;
            for (int64_t i = b * bs; i < e; i++)
                mx = fabsf(W[i]) > mx ? fabsf(W[i]) : mx;
            am[b] = mx;
            for (int64_t i = b * bs; i < e; i++) {
                const float x    = mx > 0 ? W[i] / mx : 0;
                int         best = 0;
                for (int c = 1; c < 16; c++)
                    if (fabsf(lq_nf4_table[c] - x) < fabsf(lq_nf4_table[best] - x))
                        best = c;
                codes[i] = (uint8_t)best;
            }
        }
        if (codes && am)
            st = lq_pack_nf4(n, k, bs, codes, am, 1, 256, NULL, out, err);
        free(codes), free(am);
    } else if (f == LQ_FMT_INT8) {
        int8_t *cb  = malloc((size_t)(n * k));
        float  *scb = malloc((size_t)n * sizeof(float));
        for (int64_t r = 0; cb && scb && r < n; r++) {
            float mx = 0;
            for (int64_t c = 0; c < k; c++)
                mx = fabsf(W[r * k + c]) > mx ? fabsf(W[r * k + c]) : mx;
            scb[r] = mx > 0 ? mx : 1;
            for (int64_t c = 0; c < k; c++)
                cb[r * k + c] = (int8_t)lrintf(W[r * k + c] * 127.f / scb[r]);
        }
        if (cb && scb)
            st = lq_pack_int8(n, k, cb, scb, NULL, 0, NULL, 0.f, NULL, out, err);
        free(cb), free(scb);
    }
    return st == LQ_OK ? 1 : -1;
}

/* Copy src to dst with every decoder linear that format f can hold quantized (RTN), the rest
 * as is; quantization_config in config.json. Returns the number of quantized linears or -1. */
/* Defects write_quantized can plant (bit flags): */
enum {
    DEF_NAN_SCALE = 1, /* one NaN scale in the first linear quantized */
    DEF_DESC_ACT  = 2, /* desc_act: true in quantize_config (GPTQ) */
    DEF_DENSE_TOO = 4, /* the first linear quantized also keeps its float .weight */
};

static int write_quantized(const lq_model *m, const char *src, const char *dst, lq_format f,
                           int defects, lq_err *err) {
    const int  corrupt = defects & DEF_NAN_SCALE;
    char       p[4200];
    cJSON     *root = NULL;
    lq_qconfig qc;
    int        nq = 0, ok = 1;
    mkdir(dst, 0755);
    snprintf(p, sizeof p, "%s/config.json", src);
    if (lq_json_load_file(p, 1 << 20, &root, err) != LQ_OK)
        return -1;
    lq_qconfig_default(f, &qc);
    if (f == LQ_FMT_GPTQ)
        qc.group_size = 32;
    qc.desc_act = (defects & DEF_DESC_ACT) != 0;
    snprintf(p, sizeof p, "%s/config.json", dst);
    ok =
        lq_qconfig_apply(&qc, root, dst, err) == LQ_OK && lq_json_write_file(root, p, err) == LQ_OK;
    cJSON_Delete(root);
    lq_st_writer *w = NULL;
    ok              = ok && lq_st_writer_create(dst, 0, &w, err) == LQ_OK;
    for (int64_t i = 0; ok && i < lq_st_count(m->st); i++) {
        const lq_st_tensor *t = lq_st_get(m->st, i);
        char                prefix[256];
        const size_t        len = strlen(t->name);
        int                 q   = 0;
        if (t->ndim == 2 && len > 7 && !strcmp(t->name + len - 7, ".weight") &&
            !strncmp(t->name, "model.layers.", 13) && len - 7 < sizeof prefix) {
            memcpy(prefix, t->name, len - 7);
            prefix[len - 7] = 0;
            float  *W       = malloc((size_t)t->numel * sizeof(float));
            lq_qbuf b       = {0};
            if (!W) {
                ok = 0;
                break;
            }
            lq_convert_to_f32(t->dtype, t->data, t->numel, W);
            /* corrupt only the first linear quantized */
            q = quantize_rtn(f, W, t->shape[0], t->shape[1], corrupt && nq == 0, &b, err);
            if (q > 0)
                ok = lq_qlinear_write(w, prefix, &b.q, &qc, err) == LQ_OK;
            const int dense_too = q > 0 && nq == 0 && (defects & DEF_DENSE_TOO);
            ok                  = ok && q >= 0;
            nq += q > 0;
            if (dense_too) /* the float weight is written too, below */
                q = 0;
            lq_qbuf_free(&b);
            free(W);
        }
        if (ok && q == 0)
            ok = lq_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data, err) == LQ_OK;
    }
    ok = ok && lq_st_writer_finish(w, err) == LQ_OK;
    lq_st_writer_free(w);
    lq_qconfig_free(&qc);
    return ok ? nq : -1;
}

/* The same layer with every quantized linear dequantized by the format's scalar reference. */
static lq_status dequantized_copy(const lq_model_config *cfg, const lq_layer *L, lq_layer *out,
                                  lq_err *err) {
    LQ_TRY(lq_layer_alloc_dense(cfg, L->idx, out, err));
    lq_layer_vec src[LQ_LAYER_MAX_VECS], dst[LQ_LAYER_MAX_VECS];
    lq_layer     view = *L; /* the same vectors, through a non-const handle */
    const int    nvec = lq_layer_vecs(cfg, &view, src);
    lq_layer_vecs(cfg, out, dst);
    for (int v = 0; v < nvec; v++)
        memcpy(*dst[v].slot, *src[v].slot, (size_t)src[v].len * sizeof(float));
    for (int l = 0; l < LQ_LIN_COUNT; l++) {
        const lq_qlinear *q = &L->lin[l].buf.q;
        float            *w = lq_linear_dense_mut(&out->lin[l]);
        if (!lq_lin_present(cfg, (lq_lin_id)l))
            continue;
        if (q->format == LQ_FMT_DENSE)
            memcpy(w, q->dense, (size_t)(q->n * q->k) * sizeof(float));
        else
            lq_format_traits_get((lq_format)q->format)->dequant_ref(q, w);
    }
    return LQ_OK;
}

/* Capture hook: the linear's CPU forward on the captured input against the format's scalar
 * reference gemm_ref (NMSE within the format's CPU bound). */
typedef struct kcheck {
    const lq_layer *L;
    double          worst; /* max NMSE seen */
    int             calls;
    lq_status       st;
} kcheck;

static lq_status kcheck_fn(void *user, int64_t id, const float *x, int64_t t, int64_t k) {
    kcheck           *c = user;
    const lq_linear  *l = &c->L->lin[id];
    const lq_qlinear *q = &l->buf.q;
    (void)k;
    if (q->format == LQ_FMT_DENSE)
        return LQ_OK;
    float *y = malloc((size_t)(t * q->n) * sizeof(float)), *r = malloc((size_t)(t * q->n) * 4);
    if (!y || !r) {
        free(y), free(r);
        return LQ_ERR_NOMEM;
    }
    c->st = lq_linear_forward(l, x, t, y, NULL, 0, 0);
    lq_format_traits_get((lq_format)q->format)->gemm_ref(q, x, t, r);
    double num = 0, den = 0;
    for (int64_t i = 0; i < t * q->n; i++) {
        const double rb = r[i] + (l->bias ? l->bias[i % q->n] : 0.f);
        num += (y[i] - rb) * (y[i] - rb);
        den += rb * rb;
    }
    const double nmse = den > 0 ? num / den : num;
    c->worst          = nmse > c->worst ? nmse : c->worst;
    c->calls++;
    free(y), free(r);
    return c->st;
}

static void test_quantized(const char *src, const char *tmp) {
    /* weight_only: the kernel equals x @ dequant(W)^T; LLM.int8 also quantizes activations */
    static const struct {
        lq_format f;
        int       weight_only;
    } fmts[]       = {{LQ_FMT_GPTQ, 1}, {LQ_FMT_NF4, 1}, {LQ_FMT_INT8, 0}};
    lq_err    err  = {0};
    lq_model *orig = NULL;
    CHECK_OK(lq_model_open(src, &orig, &err));
    if (orig)
        CHECK_OK(lq_model_load_all(orig, &err));
    if (!orig || !orig->layers) {
        lq_model_free(orig);
        return;
    }
    enum { NSEQ = 2, SEQ = 48 };
    int32_t ids[NSEQ * SEQ];
    lq_rng  rng;
    lq_rng_seed(&rng, 99);
    for (int i = 0; i < NSEQ * SEQ; i++)
        ids[i] = (int32_t)lq_rng_below(&rng, 512);
    for (size_t fi = 0; fi < sizeof fmts / sizeof fmts[0]; fi++) {
        const char *fname = lq_qformat_get(fmts[fi].f)->name;
        char        dst[4200];
        snprintf(dst, sizeof dst, "%s/quant_%s", tmp, fname);
        const int nq = write_quantized(orig, src, dst, fmts[fi].f, 0, &err);
        CHECK_MSG(nq > 0, "%s: writing %s: %s", fname, dst, err.msg);
        if (nq <= 0)
            continue;
        lq_model *m  = NULL;
        lq_status st = lq_model_open(dst, &m, &err);
        CHECK_MSG(st == LQ_OK, "%s: %s", fname, err.msg);
        if (st != LQ_OK)
            continue;
        CHECK_EQ_INT(m->format, fmts[fi].f);
        CHECK_OK(lq_model_load_all(m, &err));
        int64_t nquant = 0;
        for (int64_t l = 0; m->layers && l < m->cfg.num_layers; l++)
            for (int i = 0; i < LQ_LIN_COUNT; i++)
                nquant += m->layers[l].lin[i].buf.q.format == (int32_t)fmts[fi].f;
        CHECK_EQ_INT(nquant, nq);
        /* every quantized linear, fed its input inside the model, agrees with gemm_ref */
        {
            float     *h  = malloc((size_t)(NSEQ * SEQ * m->cfg.hidden_size) * sizeof(float));
            lq_fwd_ws *ws = NULL;
            CHECK_OK(lq_fwd_ws_create(&m->cfg, NSEQ * SEQ, SEQ, &ws, &err));
            CHECK_OK(lq_model_embed(m, ids, NSEQ * SEQ, h, &err));
            kcheck kc = {0};
            for (int64_t l = 0; h && ws && l < m->cfg.num_layers; l++) {
                kc.L = &m->layers[l];
                CHECK_OK(
                    lq_layer_forward(m, &m->layers[l], h, NSEQ, SEQ, kcheck_fn, &kc, -1, ws, &err));
            }
            const double tol = lq_format_traits_get(fmts[fi].f)->tol_nmse_cpu;
            CHECK_EQ_INT(kc.calls, nq);
            CHECK_MSG(kc.worst <= tol, "%s: NMSE vs gemm_ref %g > %g", fname, kc.worst, tol);
            lq_fwd_ws_free(ws);
            free(h);
        }
        /* quantized forward vs dense forward over the dequantized weights */
        lq_status s1 = LQ_OK, s2 = LQ_OK;
        float    *lq      = forward_logits(m, ids, NSEQ, SEQ, NSEQ * SEQ, &s1, &err);
        lq_layer *qlayers = m->layers;
        lq_layer *dl      = calloc((size_t)m->cfg.num_layers, sizeof *dl);
        for (int64_t l = 0; dl && l < m->cfg.num_layers; l++)
            CHECK_OK(dequantized_copy(&m->cfg, &qlayers[l], &dl[l], &err));
        m->layers = dl;
        float *ld = dl ? forward_logits(m, ids, NSEQ, SEQ, NSEQ * SEQ, &s2, &err) : NULL;
        m->layers = qlayers;
        /* and how far the RTN weights moved the model (sanity: quantized, not garbage) */
        float *lo = forward_logits(orig, ids, NSEQ, SEQ, NSEQ * SEQ, &s2, &err);
        CHECK(lq && ld);
        if (lq && ld && lo) {
            double dmax = 0, omax = 0, scale = 0;
            for (int64_t i = 0; i < (int64_t)NSEQ * SEQ * 512; i++) {
                dmax  = fmax(dmax, fabs((double)lq[i] - ld[i]));
                omax  = fmax(omax, fabs((double)lq[i] - lo[i]));
                scale = fmax(scale, fabs((double)ld[i]));
            }
            printf("%s checkpoint (%d linears quantized): logits vs dequantized-dense forward max "
                   "|diff| %.3g (max |logit| %.3g); vs the original model %.3g\n",
                   fname, nq, dmax, scale, omax);
            if (fmts[fi].weight_only) {
                CHECK_MSG(dmax < 1e-4 * scale, "%s: %g", fname, dmax);
                CHECK(omax > 1e-2);
            }
            CHECK(omax < 0.5 * scale); /* 8-bit / 4-bit RTN of a real model: close, not equal */
        }
        free(lq), free(ld), free(lo);
        for (int64_t l = 0; dl && l < m->cfg.num_layers; l++)
            lq_layer_free(&dl[l]);
        free(dl);
        lq_model_free(m);
    }
    /* a NaN scale is caught at open, naming the linear */
    char dst[4200];
    snprintf(dst, sizeof dst, "%s/quant_gptq_nan", tmp);
    CHECK(write_quantized(orig, src, dst, LQ_FMT_GPTQ, DEF_NAN_SCALE, &err) > 0);
    lq_model *m = NULL;
    CHECK_EQ_INT(lq_model_open(dst, &m, &err), LQ_ERR_WEIGHT_NONFINITE);
    CHECK_MSG(strstr(err.msg, "model.layers.0.") != NULL, "%s", err.msg);
    printf("  NaN scale -> %s\n", err.msg);
    lq_model_free(m);
    m = NULL;

    /* no silent choice: a float weight next to qweight, act-order without g_idx */
    snprintf(dst, sizeof dst, "%s/quant_gptq_dense_too", tmp);
    CHECK(write_quantized(orig, src, dst, LQ_FMT_GPTQ, DEF_DENSE_TOO, &err) > 0);
    CHECK_EQ_INT(lq_model_open(dst, &m, &err), LQ_ERR_QFORMAT);
    CHECK_MSG(strstr(err.msg, "both a float \"weight\"") && strstr(err.msg, "model.layers.0."),
              "%s", err.msg);
    printf("  weight + qweight -> %s\n", err.msg);
    lq_model_free(m);
    m = NULL;
    char act[4200];
    snprintf(act, sizeof act, "%s/quant_gptq_act", tmp);
    CHECK(write_quantized(orig, src, act, LQ_FMT_GPTQ, DEF_DESC_ACT, &err) > 0);
    CHECK_OK(lq_model_open(act, &m, &err)); /* intact, it loads */
    lq_model_free(m);
    m = NULL;
    snprintf(dst, sizeof dst, "%s/quant_gptq_act_no_gidx", tmp);
    CHECK_OK(write_broken(act, dst, "model.layers.2.self_attn.v_proj.g_idx", BREAK_DROP, &err));
    CHECK_EQ_INT(lq_model_open(dst, &m, &err), LQ_ERR_QFORMAT);
    CHECK_MSG(strstr(err.msg, "desc_act") && strstr(err.msg, "layers.2.self_attn.v_proj.g_idx"),
              "%s", err.msg);
    printf("  desc_act without g_idx -> %s\n", err.msg);
    lq_model_free(m);
    lq_model_free(orig);
}

/* A config declaring fewer layers than the checkpoint holds is refused, naming a tensor of the
 * first undeclared layer. */
static void test_extra_layers(const char *src, const char *tmp) {
    char   dst[4200], p[4200];
    lq_err err = {0};
    snprintf(dst, sizeof dst, "%s/extra_layers", tmp);
    CHECK_OK(write_broken(src, dst, "", BREAK_DROP, &err)); /* a faithful copy */
    snprintf(p, sizeof p, "%s/config.json", dst);
    cJSON *root = NULL;
    CHECK_OK(lq_json_load_file(p, 1 << 20, &root, &err));
    if (!root)
        return;
    const int64_t layers = cJSON_GetObjectItem(root, "num_hidden_layers")->valueint;
    cJSON_ReplaceItemInObject(root, "num_hidden_layers", cJSON_CreateNumber((double)layers - 2));
    CHECK_OK(lq_json_write_file(root, p, &err));
    cJSON_Delete(root);
    lq_model *m = NULL;
    CHECK_EQ_INT(lq_model_open(dst, &m, &err), LQ_ERR_CONFIG_VALUE);
    char want[64];
    snprintf(want, sizeof want, "\"model.layers.%lld.", (long long)layers - 2);
    CHECK_MSG(strstr(err.msg, want) && strstr(err.msg, "config.json"), "%s", err.msg);
    printf("  %lld layers declared over %lld -> %s\n", (long long)layers - 2, (long long)layers,
           err.msg);
    lq_model_free(m);
}

static const float *wof(const lq_linear *l) {
    return (const float *)l->buf.q.dense;
}

/* The mixture-of-experts MLP against a plain double-precision transcription of transformers'
 * Qwen2MoeSparseMoeBlock (router softmax, top-k, weights renormalized or not, experts, the
 * shared expert times sigmoid of its gate) on random weights: no Python needed. */
static void test_moe_mlp(void) {
    for (int norm = 0; norm < 2; norm++) {
        char js[512];
        snprintf(js, sizeof js,
                 "{\"model_type\":\"qwen2_moe\",\"hidden_size\":16,\"intermediate_size\":24,"
                 "\"num_hidden_layers\":1,\"num_attention_heads\":2,\"vocab_size\":32,"
                 "\"num_experts\":5,\"num_experts_per_tok\":2,\"moe_intermediate_size\":8,"
                 "\"shared_expert_intermediate_size\":12,\"norm_topk_prob\":%s}",
                 norm ? "true" : "false");
        lq_model_config cfg;
        lq_err          err = {0};
        lq_model       *m   = NULL;
        lq_layer        L;
        lq_fwd_ws      *ws = NULL;
        CHECK_OK(lq_config_parse(js, strlen(js), "moe", &cfg, &err));
        CHECK_OK(lq_model_create(&cfg, &m, &err));
        CHECK_OK(lq_layer_alloc_dense(&cfg, 0, &L, &err));
        const int64_t T = 37, d = 16, E = 5, K = 2;
        CHECK_OK(lq_fwd_ws_create(&cfg, 64, 64, &ws, &err));
        if (!m || !ws) {
            lq_model_free(m);
            return;
        }
        lq_rng rng;
        lq_rng_seed(&rng, 77 + (uint64_t)norm);
        for (int64_t j = 0; j < lq_moe_count(&cfg); j++) {
            int64_t    n, k;
            char       leaf[128];
            lq_linear *sl;
            lq_moe_lin(&cfg, &L, j, leaf, sizeof leaf, &n, &k, &sl);
            float *w = lq_linear_dense_mut(sl);
            for (int64_t i = 0; i < n * k; i++)
                w[i] = 0.5f * lq_rng_normal(&rng);
        }
        float x[37 * 16], y[37 * 16];
        for (int64_t i = 0; i < T * d; i++)
            x[i] = lq_rng_normal(&rng);
        CHECK_OK(lq_mlp_forward(m, &L, x, T, y, ws, &err));
        double worst = 0, scale = 0;
        for (int64_t t = 0; t < T; t++) {
            const float *xt = x + t * d;
            double       lg[5], p[5], out[16] = {0}, mx = -1e300, sum = 0;
            for (int64_t e = 0; e < E; e++) {
                lg[e] = 0;
                for (int64_t c = 0; c < d; c++)
                    lg[e] += (double)wof(&L.router)[e * d + c] * xt[c];
                mx = lg[e] > mx ? lg[e] : mx;
            }
            for (int64_t e = 0; e < E; e++)
                sum += (p[e] = exp(lg[e] - mx));
            int    sel[2];
            double wsum = 0;
            for (int64_t j = 0; j < K; j++) {
                sel[j] = -1;
                for (int64_t e = 0; e < E; e++)
                    if ((j == 0 || e != sel[0]) && (sel[j] < 0 || p[e] > p[sel[j]]))
                        sel[j] = (int)e;
                wsum += p[sel[j]] / sum;
            }
            /* a gated MLP in double: down(silu(gate x) * up x) */
            for (int64_t j = 0; j < K + 1; j++) {
                const lq_linear *g3    = j < K ? &L.experts[3 * sel[j]] : L.shared;
                const int64_t    ff    = g3[0].buf.q.n;
                double           h[16] = {0}, wt;
                if (j < K)
                    wt = p[sel[j]] / sum / (norm ? wsum : 1.0);
                else {
                    double gl = 0;
                    for (int64_t c = 0; c < d; c++)
                        gl += (double)wof(&L.shared[3])[c] * xt[c];
                    wt = 1.0 / (1.0 + exp(-gl));
                }
                for (int64_t f = 0; f < ff; f++) {
                    double gv = 0, uv = 0;
                    for (int64_t c = 0; c < d; c++) {
                        gv += (double)wof(&g3[0])[f * d + c] * xt[c];
                        uv += (double)wof(&g3[1])[f * d + c] * xt[c];
                    }
                    const double a = gv / (1.0 + exp(-gv)) * uv;
                    for (int64_t o = 0; o < d; o++)
                        h[o] += (double)wof(&g3[2])[o * ff + f] * a;
                }
                for (int64_t o = 0; o < d; o++)
                    out[o] += wt * h[o];
            }
            for (int64_t o = 0; o < d; o++) {
                const double df = fabs(out[o] - (double)y[t * d + o]);
                worst           = df > worst ? df : worst;
                scale           = fabs(out[o]) > scale ? fabs(out[o]) : scale;
            }
        }
        CHECK_MSG(worst <= 1e-5 * scale, "MoE MLP (norm_topk %d) vs double reference: %g of %g",
                  norm, worst, scale);
        printf("MoE MLP (5 experts, top 2%s, shared expert): max |diff| %.3g of %.3g vs a double "
               "reference\n",
               norm ? " renormalized" : "", worst, scale);
        lq_fwd_ws_free(ws);
        lq_layer_free(&L);
        lq_model_free(m);
    }
}

/* LQ_MODEL_OPEN_STORED16 (what ppl opens with on the CPU): the file's fp16 embeddings stay
 * 16-bit, the tied lm_head is a view of them, the embedded rows are the float model's exactly
 * and the logits agree to float32 summation order. */
static void test_stored16(const lq_model *f, const char *dir) {
    lq_model *m   = NULL;
    lq_err    err = {0};
    CHECK_OK(lq_model_open_flags(dir, LQ_MODEL_OPEN_STORED16, &m, &err));
    if (!m)
        return;
    const int64_t d = m->cfg.hidden_size, V = m->cfg.vocab_size, T = 7;
    CHECK(m->embed == NULL && m->embed16 != NULL && m->embed16_dt == LQ_DT_F16);
    CHECK(m->lm_head.buf.q.dense == (void *)m->embed16 &&
          m->lm_head.buf.q.dense_dtype == LQ_DENSE_F16);
    const int32_t ids[7] = {0, 1, 2, 3, 100, 300, (int32_t)(V - 1)};
    float        *a = malloc((size_t)(T * d) * 4), *b = malloc((size_t)(T * d) * 4);
    float        *la = malloc((size_t)(T * V) * 4), *lb = malloc((size_t)(T * V) * 4);
    lq_fwd_ws    *ws = NULL;
    CHECK_OK(lq_fwd_ws_create(&m->cfg, T, T, &ws, &err));
    if (a && b && la && lb && ws) {
        CHECK_OK(lq_model_embed(f, ids, T, a, &err));
        CHECK_OK(lq_model_embed(m, ids, T, b, &err));
        CHECK(!memcmp(a, b, (size_t)(T * d) * 4));
        CHECK_OK(lq_model_logits(f, a, T, la, ws, &err));
        CHECK_OK(lq_model_logits(m, b, T, lb, ws, &err));
        double worst = 0, big = 0;
        for (int64_t i = 0; i < T * V; i++) {
            worst = fmax(worst, fabs((double)la[i] - lb[i]));
            big   = fmax(big, fabs((double)la[i]));
        }
        CHECK_MSG(worst <= 1e-5 * big, "stored16 logits differ by %.3g (largest %.3g)", worst, big);
        int32_t bad = (int32_t)V;
        CHECK_EQ_INT(lq_model_embed(m, &bad, 1, b, &err), LQ_ERR_INVALID_ARG);
    }
    lq_fwd_ws_free(ws);
    free(a);
    free(b);
    free(la);
    free(lb);
    lq_model_free(m);
}

int main(int argc, char **argv) {
    if (argc >= 6 && strcmp(argv[1], "--logits") == 0)
        return dump_logits(argc, argv);
    test_moe_mlp(); /* needs no data */
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
        test_attn_weights(m);
        test_stored16(m, dir);
    }
    lq_model_free(m);
    test_validation(dir, tmp);
    test_extra_layers(dir, tmp);
    test_quantized(dir, tmp);
    return lq_test_end("forward");
}
