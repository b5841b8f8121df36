/* AWQ method (AutoAWQ quantizer.py flow per decoder layer):
 *   1. capture the inputs of every linear (FP layer), and the FP outputs of the inspected modules
 *   2. scale search for the Llama groups: input_layernorm -> q/k/v (inspect attention),
 *      v -> o (only when v and o have the same shape, i.e. no GQA), post_attention_layernorm ->
 *      gate/up (inspect MLP), up -> down (inspect down_proj)
 *   3. fold every scale into the previous op (norm weight or previous linear's rows) and the
 *      linears' columns; divide the cached inputs by it
 *   4. clip search for every linear but q/k, then zero-point quantization per group.
 * The next layer sees the FP layer's output, as in AutoAWQ. */
#include "lq_methods.h"
#include "lq_params_get.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void awq_fill(const lq_params *p, lq_qconfig *c) {
    c->bits       = 4;
    c->group_size = lq_params_i64(p, "group_size");
    c->zero_point = 1;
}

typedef struct awq_caps {
    float  *x[LQ_LIN_COUNT]; /* captured inputs, per source linear (q, o, gate, down) */
    int64_t t;               /* rows filled */
    int64_t T;
} awq_caps;

/* The linear whose captured input a linear shares (q/k/v: q's; gate/up: gate's). */
static int src_of(int l) {
    return l == LQ_LIN_K || l == LQ_LIN_V ? LQ_LIN_Q : l == LQ_LIN_UP ? LQ_LIN_GATE : l;
}

static lq_status cap_fn(void *user, lq_lin_id id, const float *x, int64_t t, int64_t k) {
    awq_caps *c = user;
    if (src_of(id) != (int)id)
        return LQ_OK;
    /* Within a chunk the captures come in order q (or qkv), o, gate (or gate_up), down: rows
     * c->t.. of each. */
    const int64_t keep = t < c->T - c->t ? t : c->T - c->t; /* rows past T are not kept */
    if (keep > 0)
        memcpy(c->x[id] + c->t * k, x, (size_t)(keep * k) * sizeof(float));
    if (id == LQ_LIN_DOWN) /* last capture of the chunk */
        c->t += keep > 0 ? keep : 0;
    return LQ_OK;
}

typedef struct loss_ctx {
    lq_qjob     *j;
    int          kind; /* 0 attention, 1 single linear, 2 mlp */
    int          lins[3];
    int          nlin;
    const float *x;   /* module input */
    const float *ref; /* FP module output */
    float       *out; /* scratch output */
    int64_t      nseq, t, nout;
} loss_ctx;

static lq_status loss_fn(void *user, float *const *wq, double *loss) {
    loss_ctx *c = user;
    lq_layer  L = *c->j->L; /* shallow copy: swap the candidates' dense pointers */
    for (int i = 0; i < c->nlin; i++)
        L.lin[c->lins[i]].buf.q.dense = wq[i];
    lq_status st;
    if (c->kind == 0)
        st = lq_attn_forward(c->j->model, &L, c->x, c->nseq, c->j->seqlen, c->out, c->j->ws,
                             c->j->err);
    else if (c->kind == 2)
        st = lq_mlp_forward(c->j->model, &L, c->x, c->t, c->out, c->j->ws, c->j->err);
    else
        st = lq_linear_forward(&L.lin[c->lins[0]], c->x, c->t, c->out, NULL, 0, 0);
    if (st != LQ_OK)
        return st;
    double s = 0;
    for (int64_t i = 0; i < c->t * c->nout; i++) {
        double d = (double)c->out[i] - c->ref[i];
        s += d * d;
    }
    *loss = s / (double)(c->t * c->nout);
    return LQ_OK;
}

static void scale_cols(float *W, int64_t n, int64_t k, const float *s) {
    for (int64_t r = 0; r < n; r++)
        for (int64_t c = 0; c < k; c++)
            W[r * k + c] *= s[c];
}

static void div_cols(float *X, int64_t t, int64_t k, const float *s) {
    for (int64_t r = 0; r < t; r++)
        for (int64_t c = 0; c < k; c++)
            X[r * k + c] /= s[c];
}

#define WPTR(l) ((float *)(uintptr_t)j->L->lin[l].buf.q.dense)

/* The search's group: the format's group where it divides the inputs (AWQ proper, whose layout
 * needs that), else the largest divisor of k below it (GPTQ's last group may be partial). */
static int64_t search_group(int64_t k, int64_t g) {
    if (g <= 0 || g >= k)
        return k;
    while (k % g)
        g--;
    return g;
}

lq_status lq_awq_smooth_layer(lq_qjob *j, int64_t g, int64_t max_seqs, float **keep) {
    const int64_t nseq = max_seqs > 0 && max_seqs < j->nseq ? max_seqs : j->nseq;
    int64_t       T = nseq * j->seqlen, d = j->model->cfg.hidden_size;
    awq_caps      c   = {{0}, 0, T};
    lq_status     st  = LQ_OK;
    float        *ref = NULL, *out = NULL, *xm = NULL, *sc[4] = {0};
    const int     fused = j->model->cfg.fused;
    const int     qkv = fused ? LQ_LIN_QKV : LQ_LIN_Q, gu = fused ? LQ_LIN_GATE_UP : LQ_LIN_GATE;
    const int     srcs[4] = {qkv, LQ_LIN_O, gu, LQ_LIN_DOWN};
    int64_t       maxk = 0, maxn = 0;
    for (int i = 0; i < 4; i++) {
        int64_t k    = j->L->lin[srcs[i]].buf.q.k;
        maxk         = k > maxk ? k : maxk;
        c.x[srcs[i]] = lq_malloc_n(T * k, sizeof(float));
        if (!c.x[srcs[i]])
            LQ_FAIL_GOTO(j->err, LQ_ERR_NOMEM, "awq: out of memory caching %lld inputs",
                         (long long)T);
    }
    for (int l = 0; l < LQ_LIN_COUNT; l++)
        maxn = j->L->lin[l].buf.q.n > maxn ? j->L->lin[l].buf.q.n : maxn;
    maxn = maxn > d ? maxn : d;
    ref  = lq_malloc_n(T * maxn, sizeof(float));
    out  = lq_malloc_n(T * maxn, sizeof(float));
    xm   = lq_malloc_n(maxk, sizeof(float));
    for (int i = 0; i < 4; i++)
        sc[i] = lq_malloc_n(maxk, sizeof(float));
    if (!ref || !out || !xm || !sc[0] || !sc[1] || !sc[2] || !sc[3])
        LQ_FAIL_GOTO(j->err, LQ_ERR_NOMEM, "awq: out of memory");
    LQ_TRY_GOTO(lq_qjob_capture(j, (1u << LQ_LIN_COUNT) - 1, cap_fn, &c));

    /* Search groups: prev op, linears, inspected module, input source. A previous linear's
     * last rows (as many as the scales) take the division: v_proj whole, or the v rows of a
     * fused qkv_proj and the up rows of gate_up_proj (AutoAWQ's scale_fc_fc). */
    struct grp {
        int nlin, lins[3], kind, src, prev; /* prev: -1 attn_norm, -2 mlp_norm, else linear */
    } G[4] = {
        {3, {LQ_LIN_Q, LQ_LIN_K, LQ_LIN_V}, 0, LQ_LIN_Q, -1},
        {1, {LQ_LIN_O}, 1, LQ_LIN_O, LQ_LIN_V},
        {2, {LQ_LIN_GATE, LQ_LIN_UP}, 2, LQ_LIN_GATE, -2},
        {1, {LQ_LIN_DOWN}, 1, LQ_LIN_DOWN, LQ_LIN_UP},
    };
    if (fused) {
        G[0]      = (struct grp){1, {LQ_LIN_QKV}, 0, LQ_LIN_QKV, -1};
        G[1].prev = LQ_LIN_QKV;
        G[2]      = (struct grp){1, {LQ_LIN_GATE_UP}, 2, LQ_LIN_GATE_UP, -2};
        G[3].prev = LQ_LIN_GATE_UP;
    }
    int active[4] = {0};
    for (int gi = 0; gi < 4; gi++) {
        struct grp *gr = &G[gi];
        int         ok = 1;
        for (int i = 0; i < gr->nlin; i++)
            ok &= j->plan[gr->lins[i]];
        if (gi == 1) { /* AutoAWQ: v -> o only when the shapes match (no GQA) */
            const lq_model_config *cf = &j->model->cfg;
            const int64_t qd = cf->num_heads * cf->head_dim, kvd = cf->num_kv_heads * cf->head_dim;
            ok &= kvd == cf->hidden_size && qd == cf->hidden_size;
        }
        if (!ok)
            continue;
        active[gi]     = 1;
        int64_t      k = j->L->lin[gr->lins[0]].buf.q.k;
        const float *X = c.x[gr->src];
        /* x_mean = mean |x| per channel */
        for (int64_t ch = 0; ch < k; ch++)
            xm[ch] = 0;
        for (int64_t r = 0; r < T; r++)
            for (int64_t ch = 0; ch < k; ch++)
                xm[ch] += fabsf(X[r * k + ch]);
        for (int64_t ch = 0; ch < k; ch++)
            xm[ch] /= (float)T;
        loss_ctx lc = {
            j, gr->kind, {gr->lins[0], gr->lins[1], gr->lins[2]}, gr->nlin, X, ref, out, nseq,
            T, 0};
        /* FP reference output of the inspected module */
        if (gr->kind == 0) {
            lc.nout = d;
            LQ_TRY_GOTO(lq_attn_forward(j->model, j->L, X, nseq, j->seqlen, ref, j->ws, j->err));
        } else if (gr->kind == 2) {
            lc.nout = d;
            LQ_TRY_GOTO(lq_mlp_forward(j->model, j->L, X, T, ref, j->ws, j->err));
        } else {
            lc.nout = j->L->lin[gr->lins[0]].buf.q.n;
            LQ_TRY_GOTO(lq_linear_forward(&j->L->lin[gr->lins[0]], X, T, ref, NULL, 0, 0));
        }
        float  *ws_[3];
        int64_t ns_[3];
        for (int i = 0; i < gr->nlin; i++) {
            ws_[i] = WPTR(gr->lins[i]);
            ns_[i] = j->L->lin[gr->lins[i]].buf.q.n;
        }
        lq_awq_group ag    = {gr->nlin,
                              ws_,
                              ns_,
                              k,
                              search_group(k, g),
                              (int)lq_params_i64(j->p, "bits"),
                              (int)lq_params_i64(j->p, "awq_grid"),
                              lq_params_bool(j->p, "awq_duo_scaling")};
        double       ratio = 0, loss = 0;
        LQ_TRY_GOTO(lq_awq_search(&ag, xm, loss_fn, &lc, sc[gi], &ratio, &loss, j->err));
        j->loss[gr->lins[0]] = loss;
    }
    /* Fold the scales (after all searches, as AutoAWQ's apply_scale). */
    for (int gi = 0; gi < 4; gi++) {
        if (!active[gi])
            continue;
        struct grp  *gr = &G[gi];
        int64_t      k  = j->L->lin[gr->lins[0]].buf.q.k;
        const float *s  = sc[gi];
        if (gr->prev == -1 || gr->prev == -2) {
            float *nw = gr->prev == -1 ? j->L->attn_norm : j->L->mlp_norm;
            if (j->model->cfg.norm_plus_one) /* Gemma scales by (1 + w): fold into that */
                for (int64_t ch = 0; ch < k; ch++)
                    nw[ch] = (1.0f + nw[ch]) / s[ch] - 1.0f;
            else
                for (int64_t ch = 0; ch < k; ch++)
                    nw[ch] /= s[ch];
        } else {
            lq_linear    *pl = &j->L->lin[gr->prev];
            const int64_t pk = pl->buf.q.k, r0 = pl->buf.q.n - k;
            float        *pw = WPTR(gr->prev);
            for (int64_t r = 0; r < k; r++) {
                for (int64_t ch = 0; ch < pk; ch++)
                    pw[(r0 + r) * pk + ch] /= s[r];
                if (pl->bias)
                    pl->bias[r0 + r] /= s[r];
            }
        }
        for (int i = 0; i < gr->nlin; i++)
            scale_cols(WPTR(gr->lins[i]), j->L->lin[gr->lins[i]].buf.q.n, k, s);
        div_cols(c.x[gr->src], T, k, s);
    }
done:
    for (int i = 0; i < LQ_LIN_COUNT; i++) {
        if (keep && st == LQ_OK)
            keep[i] = c.x[i];
        else
            free(c.x[i]);
    }
    for (int i = 0; i < 4; i++)
        free(sc[i]);
    free(ref), free(out), free(xm);
    return st;
}

static lq_status awq_layer(lq_qjob *j) {
    int64_t   g = lq_params_i64(j->p, "group_size"), T = j->nseq * j->seqlen;
    float    *x[LQ_LIN_COUNT] = {0};
    lq_status st              = LQ_OK;
    if (g <= 0)
        LQ_FAIL(j->err, LQ_ERR_INVALID_ARG, "awq: the AutoAWQ GEMM format needs --group-size > 0");
    LQ_TRY(lq_awq_smooth_layer(j, g, 0, x));
    /* Clip (not q/k: their errors are amplified by the attention softmax; AutoAWQ does clip a
     * fused qkv_proj, whose name matches none of its exceptions) and quantize. */
    for (int l = 0; l < LQ_LIN_COUNT; l++) {
        if (!j->plan[l])
            continue;
        lq_qlinear *w = &j->L->lin[l].buf.q;
        int64_t     n = w->n, k = w->k, Gn = k / g;
        if (lq_params_bool(j->p, "awq_clip") && l != LQ_LIN_Q && l != LQ_LIN_K)
            LQ_TRY_GOTO(lq_awq_clip(WPTR(l), n, k, x[src_of(l)], T, g, 4, j->err));
        float   *Wc = lq_malloc_n(n * k, sizeof(float));
        uint8_t *q  = malloc((size_t)(n * k));
        float   *s  = malloc((size_t)(Gn * n) * sizeof(float));
        int32_t *z  = malloc((size_t)(Gn * n) * sizeof(int32_t));
        if (Wc && q && s && z) {
            memcpy(Wc, w->dense, (size_t)(n * k) * sizeof(float));
            lq_awq_quantize(Wc, n, k, g, 4, q, s, z);
            st = lq_pack_awq(n, k, g, q, z, s, j->L->lin[l].bias, &j->out[l], j->err);
            if (st == LQ_OK)
                j->quantized[l] = 1;
        } else {
            st = lq_fail(j->err, LQ_ERR_NOMEM, "awq: out of memory");
        }
        free(Wc), free(q), free(s), free(z);
        if (st != LQ_OK)
            goto done;
    }
done:
    for (int i = 0; i < LQ_LIN_COUNT; i++)
        free(x[i]);
    return st;
}

static int64_t awq_work(const lq_model_config *c, int64_t tokens) {
    int64_t d = c->hidden_size, I = c->intermediate_size, qd = c->num_heads * c->head_dim;
    int64_t mx = 0; /* the widest output: reference and candidate outputs are that wide */
    for (int l = 0; l < LQ_LIN_COUNT; l++) {
        int64_t n, k;
        lq_lin_shape(c, (lq_lin_id)l, &n, &k);
        mx = lq_lin_present(c, (lq_lin_id)l) && n > mx ? n : mx;
    }
    mx = mx > d ? mx : d;
    /* cached inputs of q/o/gate/down, reference + candidate outputs, candidate weights */
    return 4 * tokens * (2 * d + qd + I) + 8 * tokens * mx + 4 * 3 * d * I;
}

const lq_method_traits lq_method_awq = {
    .name                = "awq",
    .help                = "AWQ: activation-aware scaling and clipping from calibration data "
                           "(AutoAWQ GEMM checkpoint)",
    .format              = LQ_FMT_AWQ,
    .needs_calib         = 1,
    .propagate_quantized = 0,
    .fp_first_capture    = 1,   /* its first capture is of the unmodified layer */
    .default_seqlen      = 512, /* AutoAWQ: 128 samples x 512 tokens */
    .fill_qconfig        = awq_fill,
    .quantize_layer      = awq_layer,
    .work_bytes          = awq_work,
};
