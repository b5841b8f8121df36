/* The forward written over the op table (quant/model/lq_model_fwd.c) runs on any backend and
 * touches backend memory only through the ops, checked without a GPU:
 *   - a "guard" backend: the cpu backend's ops, but every buffer it hands out is mapped
 *     PROT_NONE except while one of its ops runs, so a forward (or a capture path) that reads or
 *     writes backend memory itself faults here instead of on a device;
 *   - on it, every family's layer forward (llama with GQA, qwen2 biases, qwen3 q/k norms, gemma2
 *     soft-capping + sliding window + post norms + GeGLU, gemma3 local RoPE, mistral's window,
 *     phi3's fused linears, qwen2-moe with a shared expert, mixtral), its captures, attention
 *     weights, stage save / resume, the attention and MLP sub-forwards and the logits equal the
 *     cpu backend's bit for bit;
 *   - the ref backend (the scalar oracle) runs the same layers within float rounding.
 * `-b cuda` runs the same comparison on the device under both precisions (ctest forward_be_gpu,
 * label gpu). */
/* MAP_ANONYMOUS (not in POSIX.1-2008, which the build asks for) */
#define _DEFAULT_SOURCE 1

#include "lq_test_cuda.h"
#include "lq_model.h"
#include "lq_ops.h"
#include "lq_test.h"
#include "lq_test_guard.h"

#include <stdint.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------------
 * Backend buffers from the test's side
 * ------------------------------------------------------------------------------------------ */
static float *bput(lq_be *be, const float *h, int64_t n) {
    void *p = NULL;
    if (be->ops->alloc(be, &p, (size_t)n * 4) != LQ_OK || be->ops->upload(be, p, h, (size_t)n * 4))
        exit(1);
    return p;
}

static float *bget(lq_be *be, const float *p, int64_t n) {
    float *h = malloc((size_t)n * 4);
    if (be->ops->download(be, h, p, (size_t)n * 4) != LQ_OK)
        exit(1);
    return h;
}

/* ------------------------------------------------------------------------------------------
 * Captures: each a copy on the host, in order
 * ------------------------------------------------------------------------------------------ */
#define MAXCAP 256
typedef struct caplog {
    lq_be           *be; /* where x lives */
    const lq_fwd_ws *ws;
    int              n;
    int64_t          slot[MAXCAP], t[MAXCAP], k[MAXCAP];
    float           *x[MAXCAP];
    float           *aw[MAXCAP]; /* attention weights at v_proj's capture, when wanted */
} caplog;

static lq_status cap_fn(void *user, int64_t slot, const float *x, int64_t t, int64_t k) {
    caplog *c = user;
    if (c->n == MAXCAP)
        return LQ_ERR_INTERNAL;
    c->slot[c->n] = slot, c->t[c->n] = t, c->k[c->n] = k;
    c->x[c->n]    = bget(c->be, x, t * k);
    const float *a = slot == LQ_LIN_V ? lq_fwd_ws_attn_weights(c->ws) : NULL;
    c->aw[c->n]    = a ? bget(c->be, a, t) : NULL;
    c->n++;
    return LQ_OK;
}

static void caplog_free(caplog *c) {
    for (int i = 0; i < c->n; i++)
        free(c->x[i]), free(c->aw[i]);
    c->n = 0;
}

static double nmse(const float *a, const float *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)a[i] * a[i];
    }
    return den > 0 ? num / den : num;
}

/* exact (tol 0: same bytes) or within tol */
static void same(const char *what, const char *fam, const float *a, const float *b, int64_t n,
                 double tol) {
    if (tol == 0)
        CHECK_MSG(!memcmp(a, b, (size_t)n * 4), "%s: %s differs (NMSE %.3g)", fam, what,
                  nmse(a, b, n));
    else
        CHECK_MSG(nmse(a, b, n) <= tol, "%s: %s NMSE %.3g over %.3g", fam, what, nmse(a, b, n),
                  tol);
}

static void same_caps(const char *fam, const caplog *a, const caplog *b, double tol) {
    CHECK_MSG(a->n == b->n, "%s: %d captures on the cpu backend, %d on %s", fam, a->n, b->n,
              b->be->ops->name);
    for (int i = 0; i < a->n && i < b->n; i++) {
        char what[96];
        snprintf(what, sizeof what, "capture %d (slot %lld)", i, (long long)a->slot[i]);
        CHECK_MSG(a->slot[i] == b->slot[i] && a->t[i] == b->t[i] && a->k[i] == b->k[i],
                  "%s: %s shape", fam, what);
        if (a->slot[i] == b->slot[i] && a->t[i] == b->t[i] && a->k[i] == b->k[i])
            same(what, fam, a->x[i], b->x[i], a->t[i] * a->k[i], tol);
        CHECK_MSG(!a->aw[i] == !b->aw[i], "%s: %s attention weights on one side", fam, what);
        if (a->aw[i] && b->aw[i])
            same("attention weights", fam, a->aw[i], b->aw[i], a->t[i], tol);
    }
}

/* ------------------------------------------------------------------------------------------
 * The families
 * ------------------------------------------------------------------------------------------ */
typedef struct family {
    const char *name;
    const char *json;
    int64_t     layer; /* which layer index (sliding or full) */
} family;

#define BASE "\"vocab_size\":40,\"num_hidden_layers\":2,\"rms_norm_eps\":1e-6"
static const family k_fams[] = {
    {"llama", "{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":96,"
              "\"num_attention_heads\":4,\"num_key_value_heads\":2," BASE "}", 0},
    {"qwen2", "{\"model_type\":\"qwen2\",\"hidden_size\":64,\"intermediate_size\":80,"
              "\"num_attention_heads\":4,\"num_key_value_heads\":1," BASE "}", 0},
    {"qwen3", "{\"model_type\":\"qwen3\",\"hidden_size\":48,\"intermediate_size\":80,"
              "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":24," BASE "}", 1},
    {"gemma2", "{\"model_type\":\"gemma2\",\"hidden_size\":64,\"intermediate_size\":96,"
               "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":16,"
               "\"sliding_window\":9,\"attn_logit_softcapping\":50.0,"
               "\"final_logit_softcapping\":30.0,\"query_pre_attn_scalar\":16," BASE "}", 0},
    {"gemma3", "{\"model_type\":\"gemma3_text\",\"hidden_size\":64,\"intermediate_size\":96,"
               "\"num_attention_heads\":4,\"num_key_value_heads\":1,\"head_dim\":32,"
               "\"sliding_window\":7,\"rope_local_base_freq\":10000.0,\"rope_theta\":1000000.0,"
               "\"sliding_window_pattern\":2,\"query_pre_attn_scalar\":32," BASE "}", 0},
    {"mistral", "{\"model_type\":\"mistral\",\"hidden_size\":64,\"intermediate_size\":96,"
                "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"sliding_window\":6," BASE "}",
     1},
    {"phi3", "{\"model_type\":\"phi3\",\"hidden_size\":64,\"intermediate_size\":96,"
             "\"num_attention_heads\":4,\"num_key_value_heads\":4," BASE "}", 0},
    {"qwen2_moe", "{\"model_type\":\"qwen2_moe\",\"hidden_size\":32,\"intermediate_size\":48,"
                  "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"num_experts\":5,"
                  "\"num_experts_per_tok\":2,\"moe_intermediate_size\":16,"
                  "\"shared_expert_intermediate_size\":24,\"norm_topk_prob\":false," BASE "}", 0},
    {"mixtral", "{\"model_type\":\"mixtral\",\"hidden_size\":32,\"intermediate_size\":40,"
                "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"num_local_experts\":4,"
                "\"num_experts_per_tok\":2," BASE "}", 1},
};

/* Random weights: linears N(0, 0.3), norms 1 + N(0, 0.1) (Gemma's (1 + w): N(0, 0.1)), biases
 * N(0, 0.1); lm_head and the final norm too. */
static void randomize(lq_model *m, lq_layer *L, uint64_t seed) {
    const lq_model_config *c = &m->cfg;
    lq_rng                 r;
    lq_rng_seed(&r, seed);
    lq_layer_vec v[LQ_LAYER_MAX_VECS];
    const int    nv = lq_layer_vecs(c, L, v);
    for (int i = 0; i < nv; i++)
        for (int64_t j = 0; j < v[i].len; j++)
            (*v[i].slot)[j] = (c->norm_plus_one ? 0.f : 1.f) + 0.1f * lq_rng_normal(&r);
    for (int64_t s = 0; s < lq_slot_count(c) + 2; s++) {
        lq_linear *l = s < lq_slot_count(c) ? (lq_slot_present(c, s) ? lq_layer_slot(L, s) : NULL)
                       : s == lq_slot_count(c) ? (c->num_experts ? &L->router : NULL)
                                               : (c->shared_intermediate ? &L->shared[3] : NULL);
        float *w = l ? lq_linear_dense_mut(l) : NULL;
        if (!w)
            continue;
        for (int64_t i = 0; i < l->buf.q.n * l->buf.q.k; i++)
            w[i] = 0.3f * lq_rng_normal(&r);
        if (l->bias)
            for (int64_t i = 0; i < l->buf.q.n; i++)
                l->bias[i] = 0.1f * lq_rng_normal(&r);
    }
    for (int64_t j = 0; j < c->hidden_size; j++)
        m->final_norm[j] = (c->norm_plus_one ? 0.f : 1.f) + 0.1f * lq_rng_normal(&r);
    float *lm = lq_linear_dense_mut(&m->lm_head);
    float *em = m->embed;
    for (int64_t i = 0; i < c->vocab_size * c->hidden_size; i++) {
        if (lm)
            lm[i] = 0.3f * lq_rng_normal(&r);
        if (em)
            em[i] = lq_rng_normal(&r);
    }
}

typedef struct stage_keep {
    lq_be  *be;
    float  *buf[4]; /* backend copies of what a forward saved, by stage */
    int64_t k[4];
} stage_keep;

static lq_status save_fn(void *user, lq_fwd_stage stage, const float *x, int64_t row0, int64_t t,
                         int64_t k) {
    stage_keep *s = user;
    if (!s->buf[stage])
        return LQ_ERR_INTERNAL;
    s->k[stage] = k;
    return s->be->ops->copy(s->be, s->buf[stage] + row0 * k, x, (size_t)(t * k) * 4);
}

/* One family on backend `be` against the cpu backend: full forward with captures and
 * attention weights, then each stage saved and resumed, the sub-forwards, the logits. */
static void run_family(const family *f, lq_be *be, double tol) {
    lq_model_config cfg;
    lq_err          err = {0};
    lq_model       *m   = NULL;
    lq_layer        L;
    if (lq_config_parse(f->json, strlen(f->json), f->name, &cfg, &err) != LQ_OK) {
        CHECK_MSG(0, "%s: config: %s", f->name, err.msg);
        return;
    }
    CHECK_OK(lq_model_create(&cfg, &m, &err));
    CHECK_OK(lq_layer_alloc_dense(&cfg, f->layer, &L, &err));
    randomize(m, &L, 1234);
    const int64_t nseq = 3, seqlen = 11, T = nseq * seqlen, d = cfg.hidden_size;
    const int64_t maxT = 2 * seqlen; /* two chunks: 2 sequences, then 1 */
    lq_rng        r;
    lq_rng_seed(&r, 99);
    float *h0 = malloc((size_t)(T * d) * 4);
    for (int64_t i = 0; i < T * d; i++)
        h0[i] = lq_rng_normal(&r);

    lq_fwd_ws  *wc = NULL, *wb = NULL;
    lq_layer_be Lb;
    CHECK_OK(lq_fwd_ws_create(&cfg, maxT, seqlen, &wc, &err));
    CHECK_OK(lq_fwd_ws_create_be(&cfg, maxT, seqlen, be, &wb, &err));
    CHECK_OK(lq_layer_to_be(be, &cfg, &L, &Lb, &err));
    if (!wc || !wb) {
        CHECK_MSG(0, "%s: workspaces: %s", f->name, err.msg);
        return;
    }
    /* 1. the full forward with every capture and the attention weights */
    const int wv = !cfg.fused && !cfg.num_experts;
    lq_fwd_ws_want_attn_weights(wc, wv);
    lq_fwd_ws_want_attn_weights(wb, wv);
    caplog ca = {lq_fwd_ws_backend(wc), wc, 0, {0}, {0}, {0}, {0}, {0}};
    caplog cb = {be, wb, 0, {0}, {0}, {0}, {0}, {0}};
    float *hc = malloc((size_t)(T * d) * 4);
    memcpy(hc, h0, (size_t)(T * d) * 4);
    float *hb = bput(be, h0, T * d);
    CHECK_OK(lq_layer_forward(m, &L, hc, nseq, seqlen, cap_fn, &ca, -1, wc, &err));
    CHECK_OK(lq_layer_forward(m, &Lb.L, hb, nseq, seqlen, cap_fn, &cb, -1, wb, &err));
    float *got = bget(be, hb, T * d), *hfull = malloc((size_t)(T * d) * 4);
    memcpy(hfull, hc, (size_t)(T * d) * 4);
    same("layer output", f->name, hc, got, T * d, tol);
    same_caps(f->name, &ca, &cb, tol);
    caplog_free(&ca), caplog_free(&cb);
    free(got);
    lq_fwd_ws_want_attn_weights(wc, 0);
    lq_fwd_ws_want_attn_weights(wb, 0);

    /* 2. stop after o_proj's capture: the same captures, h unchanged */
    be->ops->upload(be, hb, h0, (size_t)(T * d) * 4);
    memcpy(hc, h0, (size_t)(T * d) * 4);
    CHECK_OK(lq_layer_forward(m, &L, hc, nseq, seqlen, cap_fn, &ca, LQ_LIN_O, wc, &err));
    CHECK_OK(lq_layer_forward(m, &Lb.L, hb, nseq, seqlen, cap_fn, &cb, LQ_LIN_O, wb, &err));
    same_caps(f->name, &ca, &cb, tol);
    got = bget(be, hb, T * d);
    same("h after a stopped forward", f->name, h0, got, T * d, 0);
    caplog_free(&ca), caplog_free(&cb);
    free(got);

    /* 3. every stage saved by one forward and resumed by another: the resumed output equals
     *    the full forward's (what the cpu backend computes) */
    const int     dense_mlp = !cfg.num_experts;
    const int64_t qd = cfg.num_heads * cfg.head_dim, ff = cfg.intermediate_size;
    for (int st = LQ_STAGE_ATTN; st <= (dense_mlp ? LQ_STAGE_ACT : LQ_STAGE_RESID); st++) {
        stage_keep keep = {be, {NULL}, {0}};
        void      *p    = NULL;
        be->ops->alloc(be, &p, (size_t)(T * (st == LQ_STAGE_ATTN ? qd : st == LQ_STAGE_ACT ? ff : d)) * 4);
        keep.buf[st] = p;
        if (st == LQ_STAGE_ACT) { /* resuming there needs the residual too */
            be->ops->alloc(be, &p, (size_t)(T * d) * 4);
            keep.buf[LQ_STAGE_RESID] = p;
        }
        be->ops->upload(be, hb, h0, (size_t)(T * d) * 4);
        lq_fwd_resume sv = {LQ_STAGE_INPUT, NULL, (lq_fwd_stage)st, save_fn, &keep, NULL};
        CHECK_OK(lq_layer_forward_ex(m, &Lb.L, hb, nseq, seqlen, NULL, NULL, -1, &sv, wb, &err));
        if (st == LQ_STAGE_ACT) { /* the residual of a second forward saving it */
            float *tmp = bput(be, h0, T * d);
            sv.save    = LQ_STAGE_RESID;
            CHECK_OK(lq_layer_forward_ex(m, &Lb.L, tmp, nseq, seqlen, NULL, NULL, -1, &sv, wb,
                                         &err));
            be->ops->release(be, tmp, (size_t)(T * d) * 4);
        }
        float        *hr = bput(be, h0, T * d);
        lq_fwd_resume rs = {(lq_fwd_stage)st, keep.buf[st], LQ_STAGE_INPUT, NULL, NULL,
                            keep.buf[LQ_STAGE_RESID]};
        CHECK_OK(lq_layer_forward_ex(m, &Lb.L, hr, nseq, seqlen, NULL, NULL, -1, &rs, wb, &err));
        got = bget(be, hr, T * d);
        char what[64];
        snprintf(what, sizeof what, "output resumed at stage %d", st);
        same(what, f->name, hfull, got, T * d, tol);
        free(got);
        be->ops->release(be, hr, (size_t)(T * d) * 4);
        for (int i = 0; i < 4; i++)
            if (keep.buf[i])
                be->ops->release(be, keep.buf[i],
                                 (size_t)(T * (i == LQ_STAGE_ATTN ? qd : i == LQ_STAGE_ACT ? ff : d)) * 4);
    }

    /* 4. the sub-forwards (AWQ's module2inspect) and the logits */
    float *oc = malloc((size_t)(T * d) * 4);
    float *ob = bput(be, h0, T * d), *xb = bput(be, h0, T * d);
    CHECK_OK(lq_attn_forward(m, &L, h0, nseq, seqlen, oc, wc, &err));
    CHECK_OK(lq_attn_forward(m, &Lb.L, xb, nseq, seqlen, ob, wb, &err));
    got = bget(be, ob, T * d);
    same("attention sub-forward", f->name, oc, got, T * d, tol);
    free(got);
    CHECK_OK(lq_mlp_forward(m, &L, h0, T, oc, wc, &err));
    CHECK_OK(lq_mlp_forward(m, &Lb.L, xb, T, ob, wb, &err));
    got = bget(be, ob, T * d);
    same("MLP sub-forward", f->name, oc, got, T * d, tol);
    free(got);
    const int64_t V  = cfg.vocab_size;
    float        *lc = malloc((size_t)(T * V) * 4), *lb = NULL, *fnb = bput(be, m->final_norm, d);
    lq_linear     lmb;
    void         *lmem = NULL;
    size_t        lbytes = 0;
    memset(&lmb, 0, sizeof lmb);
    CHECK_OK(be->ops->linear_upload(be, &m->lm_head.buf.q, &lmb.buf.q, &lmem, &lbytes));
    be->ops->alloc(be, (void **)&lb, (size_t)(T * V) * 4);
    CHECK_OK(lq_model_logits(m, h0, T, lc, wc, &err));
    CHECK_OK(lq_model_logits_be(m, fnb, &lmb, xb, T, lb, wb, &err));
    got = bget(be, lb, T * V);
    same("logits", f->name, lc, got, T * V, tol);
    free(got);
    printf("%-10s %s backend: layer %lld, %lld tokens in chunks of %lld: %s\n", f->name,
           be->ops->name, (long long)f->layer, (long long)T, (long long)maxT,
           tol == 0 ? "bit for bit" : "within float rounding");

    be->ops->release(be, lmem, lbytes);
    be->ops->release(be, lb, (size_t)(T * V) * 4);
    be->ops->release(be, fnb, (size_t)d * 4);
    be->ops->release(be, ob, (size_t)(T * d) * 4);
    be->ops->release(be, xb, (size_t)(T * d) * 4);
    be->ops->release(be, hb, (size_t)(T * d) * 4);
    free(oc), free(lc), free(hc), free(h0), free(hfull);
    lq_layer_be_free(&Lb);
    lq_fwd_ws_free(wb);
    lq_fwd_ws_free(wc);
    lq_layer_free(&L);
    lq_model_free(m);
}

/* -b guard|ref (default: both) or -b cuda (both precisions; 77 without a device) */
int main(int argc, char **argv) {
    const char *b = argc > 2 && !strcmp(argv[1], "-b") ? argv[2] : "host";
    const size_t nf = sizeof k_fams / sizeof k_fams[0];
    if (!strcmp(b, "cuda")) {
        lq_cuda_ctx *cc  = lq_test_cuda_or_skip("test_forward_be");
        lq_err       err = {0};
        /* float32 products in another order; bf16 weights and activations, TF32 attention */
        const double tol[2] = {1e-9, 1e-3};
        for (int prec = LQ_PREC_F32; prec <= LQ_PREC_FAST; prec++) {
            lq_be be;
            CHECK_OK(lq_be_init_cuda(&be, cc, prec, &err));
            for (size_t i = 0; i < nf; i++)
                run_family(&k_fams[i], &be, tol[prec]);
            lq_be_free(&be);
            CHECK_EQ_INT(be.cur_bytes, 0);
        }
        lq_cuda_ctx_free(cc);
        return lq_test_end("test_forward_be -b cuda");
    }
    if (!strcmp(b, "host") || !strcmp(b, "guard")) {
        guard g;
        guard_init(&g);
        for (size_t i = 0; i < nf; i++)
            run_family(&k_fams[i], &g.be, 0);
        CHECK_MSG(guard_free(&g), "guard: %lld bytes in %d buffers not released",
                  (long long)g.be.cur_bytes, g.n);
    }
    if (!strcmp(b, "host") || !strcmp(b, "ref")) {
        lq_be ref;
        lq_be_init_host(&ref, lq_ops_ref(), 1);
        for (size_t i = 0; i < nf; i++)
            run_family(&k_fams[i], &ref, 1e-10);
        lq_be_free(&ref);
    }
    return lq_test_end("test_forward_be");
}
