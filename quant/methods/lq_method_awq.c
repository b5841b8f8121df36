/* AWQ method (AutoAWQ quantizer.py flow per decoder layer):
 *   1. capture the inputs of every linear (FP layer), and the FP outputs of the inspected modules
 *   2. scale search (candidates scored on the first --awq-tokens tokens, activation means over
 *      every token) for the Llama groups: input_layernorm -> q/k/v (inspect attention),
 *      v -> o (only when v and o have the same shape, i.e. no GQA), post_attention_layernorm ->
 *      gate/up (inspect MLP), up -> down (inspect down_proj)
 *   3. fold every scale into the previous op (norm weight or previous linear's rows) and the
 *      linears' columns; divide the cached inputs by it
 *   4. clip search for every linear but q/k, then zero-point quantization per group.
 * The next layer sees the FP layer's output, as in AutoAWQ.
 * Everything that touches activations runs on the job's backend (lq_ops.h): the captures stay
 * there, each candidate is rounded there (awq_fakequant) and scored by the inspected module's
 * forward there (or by the Gram matrix: syrk, gemm, dot), the clip search runs there; the host
 * keeps the layer's float weights, the scale candidates and the folding. */
#include "lq_methods.h"
#include "lq_opts.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void awq_fill(const lq_opts *o, lq_qconfig *c) {
    c->bits       = 4;
    c->group_size = o->group_size;
    c->zero_point = 1;
}

/* Captured inputs, per slot that is some linear's input (lq_slot_input): q (or qkv), o, gate
 * (or gate_up), down; in a mixture-of-experts layer the block input (LQ_SLOT_MOE_IN) and each
 * expert's gate and down inputs, as many rows as the router sent it (or every token). */
typedef struct awq_caps {
    lq_qjob       *j;       /* whose backend the captures live on */
    lq_be         *be;
    float        **x;       /* [nslots], on be, NULL where not kept */
    int64_t       *rows;    /* rows filled */
    int64_t       *cap;     /* rows allocated (experts grow) */
    int64_t       *k;       /* their widths */
    int64_t        T;       /* the first T tokens are kept */
    int            keep_in; /* routed experts: the current chunk lies within them */
    int64_t        nslots, E;
    const uint8_t *mode; /* the experts' capture modes */
    /* per lq_lin_id slot, over every token (not only the first T): sum of |x| per channel,
     * in token order, in float (on be), and the tokens summed; the scale search's activation
     * statistic */
    float   *asum[LQ_LIN_COUNT];
    int64_t  nsum[LQ_LIN_COUNT];
} awq_caps;

static lq_status be_fail(lq_qjob *j, lq_status st, const char *what) {
    return lq_fail(j->err, st, "awq: %s on the %s backend: %s", what, j->be->ops->name,
                   lq_be_error(j->be));
}

#define BE(j, what, call)                                                                          \
    do {                                                                                           \
        const lq_status be_s_ = (call);                                                            \
        if (be_s_ != LQ_OK)                                                                        \
            return be_fail((j), be_s_, (what));                                                    \
    } while (0)

/* n floats of backend memory, zeroed when zero */
static lq_status be_alloc(lq_qjob *j, float **p, int64_t n, int zero) {
    *p = NULL;
    if (n <= 0)
        return LQ_OK;
    BE(j, "allocating", j->be->ops->alloc(j->be, (void **)p, (size_t)n * sizeof(float)));
    if (zero)
        BE(j, "clearing", j->be->ops->zero(j->be, *p, (size_t)n * sizeof(float)));
    return LQ_OK;
}

static void be_release(lq_be *be, float *p, int64_t n) {
    if (p)
        be->ops->release(be, p, (size_t)n * sizeof(float));
}

/* host array h [n] on the backend: h itself on a host backend, else a copy */
static lq_status be_put(lq_qjob *j, const float *h, int64_t n, float **out) {
    if (!j->be->ops->device) {
        *out = (float *)(uintptr_t)h;
        return LQ_OK;
    }
    LQ_TRY(be_alloc(j, out, n, 0));
    BE(j, "uploading", j->be->ops->upload(j->be, *out, h, (size_t)n * sizeof(float)));
    return LQ_OK;
}

static void be_unput(lq_qjob *j, const float *h, float *d, int64_t n) {
    if (d && d != h)
        be_release(j->be, d, n);
}

/* the backend's d [n] back into the host's h (nothing to do where they are one) */
static lq_status be_get(lq_qjob *j, float *h, const float *d, int64_t n) {
    if (d != h)
        BE(j, "reading back", j->be->ops->download(j->be, h, d, (size_t)n * sizeof(float)));
    return LQ_OK;
}

static lq_status caps_want(awq_caps *c, int64_t s, int64_t k, int64_t rows) {
    if (c->x[s])
        return LQ_OK;
    c->k[s]   = k;
    c->cap[s] = rows > 0 ? rows : 1;
    LQ_TRY(be_alloc(c->j, &c->x[s], c->cap[s] * k, 0));
    if (s < LQ_LIN_COUNT)
        LQ_TRY(be_alloc(c->j, &c->asum[s], k, 1));
    return LQ_OK;
}

static void caps_free(awq_caps *c) {
    for (int64_t s = 0; c->x && s < c->nslots; s++)
        be_release(c->be, c->x[s], c->cap[s] * c->k[s]);
    for (int s = 0; s < LQ_LIN_COUNT; s++)
        be_release(c->be, c->asum[s], c->k ? c->k[s] : 0);
    free(c->x), free(c->rows), free(c->cap), free(c->k);
    memset(c, 0, sizeof *c);
}

static lq_status cap_fn(void *user, int64_t id, const float *x, int64_t t, int64_t k) {
    awq_caps     *c = user;
    lq_qjob      *j = c->j;
    const int64_t e = lq_slot_expert(id);
    int64_t       keep;
    if (!c->x[id])
        return LQ_OK;
    if (id < LQ_LIN_COUNT && c->asum[id]) {
        BE(j, "activation sums", c->be->ops->col_abssum(c->be, c->asum[id], x, t, k));
        c->nsum[id] += t;
    }
    if (e < 0 || e >= c->E || c->mode[e] == LQ_MOE_ALL) { /* every token: the first T rows */
        if (id == LQ_SLOT_MOE_IN)
            c->keep_in = c->rows[id] < c->T;
        keep = t < c->T - c->rows[id] ? t : c->T - c->rows[id];
    } else { /* a routed expert: its rows among the first T tokens */
        keep = c->keep_in ? t : 0;
    }
    if (keep <= 0)
        return LQ_OK;
    if (c->rows[id] + keep > c->cap[id]) { /* grown: a new buffer, the rows so far copied */
        int64_t n = 2 * c->cap[id] > c->rows[id] + keep ? 2 * c->cap[id] : c->rows[id] + keep, b;
        float  *p = NULL;
        if (!lq_mul_i64(n, k, &b) || !lq_mul_i64(b, (int64_t)sizeof(float), &b))
            return LQ_ERR_NOMEM;
        LQ_TRY(be_alloc(j, &p, n * k, 0));
        BE(j, "growing a capture",
           c->be->ops->copy(c->be, p, c->x[id], (size_t)(c->rows[id] * k) * sizeof(float)));
        be_release(c->be, c->x[id], c->cap[id] * k);
        c->x[id] = p, c->cap[id] = n;
    }
    BE(j, "keeping a capture",
       c->be->ops->copy(c->be, c->x[id] + c->rows[id] * k, x, (size_t)(keep * k) * sizeof(float)));
    c->rows[id] += keep;
    return LQ_OK;
}

typedef struct loss_ctx {
    lq_qjob       *j;
    int            kind; /* 0 attention, 1 single linear, 2 mlp (or the experts' block) */
    const int64_t *lins; /* slots */
    int64_t        nlin;
    const lq_layer *L;    /* the layer on the backend */
    lq_linear     *xcopy; /* a copy of its experts the candidates go into */
    const float   *x;     /* module input, on the backend */
    const float   *ref;   /* FP module output, on the backend */
    float         *out;   /* scratch output, on the backend */
    int64_t        nseq, t, nout;
    /* the group's float weights [n_i, k] on the backend, their candidates, the scales */
    float *const  *w;
    float *const  *wq;
    const int64_t *n;
    float         *s; /* [k] */
    int64_t        group;
    int            bits;  /* the candidates' code width */
    /* a single linear whose loss comes from its input's Gram matrix G [k, k] (NULL: run the
     * module); scratch of 2 nout k floats */
    const float   *G;
    float         *gs;
    int64_t        k;
} loss_ctx;

/* A candidate: the group's linears rounded with scales s (on the backend), scored. */
static lq_status loss_fn(void *user, const float *s, double *loss) {
    loss_ctx     *c  = user;
    lq_qjob      *j  = c->j;
    lq_be        *be = j->be;
    const int64_t k  = c->k;
    BE(j, "scale candidate", be->ops->upload(be, c->s, s, (size_t)k * sizeof(float)));
    for (int64_t i = 0; i < c->nlin; i++)
        BE(j, "scale candidate",
           be->ops->awq_fakequant(be, c->w[i], c->s, c->n[i], k, c->group, c->bits,
                                  c->wq[i]));
    double s2 = 0;
    if (c->G) { /* tr(dW G dW^T) / (t n) */
        const int64_t n = c->nout;
        float        *dw = c->gs, *m = c->gs + n * k;
        BE(j, "Gram loss", be->ops->sub(be, dw, c->wq[0], c->w[0], n * k));
        BE(j, "Gram loss", be->ops->gemm(be, 0, 0, n, k, k, 1.0f, dw, k, c->G, k, 0.0f, m, k));
        BE(j, "Gram loss", be->ops->dot(be, m, dw, n * k, &s2));
        *loss = s2 / ((double)c->t * (double)n);
        return LQ_OK;
    }
    lq_layer L = *c->L; /* shallow copy: swap the candidates' dense pointers */
    if (c->xcopy)
        L.experts = c->xcopy;
    for (int64_t i = 0; i < c->nlin; i++) {
        lq_qlinear *q  = &lq_layer_slot(&L, c->lins[i])->buf.q;
        q->dense       = c->wq[i];
        q->dense_dtype = LQ_DENSE_F32;
    }
    lq_status st;
    if (c->kind == 0)
        st = lq_attn_forward(j->model, &L, c->x, c->nseq, j->seqlen, c->out, j->ws, j->err);
    else if (c->kind == 2)
        st = lq_mlp_forward(j->model, &L, c->x, c->t, c->out, j->ws, j->err);
    else {
        const lq_linear *l = lq_layer_slot(&L, c->lins[0]);
        st                 = be->ops->linear(be, &l->buf.q, l->bias, c->x, c->t, c->out);
        if (st != LQ_OK)
            return be_fail(j, st, "candidate forward");
    }
    if (st != LQ_OK)
        return st;
    BE(j, "candidate loss", be->ops->sqdiff(be, c->out, c->ref, c->t * c->nout, &s2));
    *loss = s2 / (double)(c->t * c->nout);
    return LQ_OK;
}

static void scale_cols(float *W, int64_t n, int64_t k, const float *s) {
    for (int64_t r = 0; r < n; r++)
        for (int64_t c = 0; c < k; c++)
            W[r * k + c] *= s[c];
}

static float *wptr(lq_layer *L, int64_t s) {
    return (float *)(uintptr_t)lq_layer_slot(L, s)->buf.q.dense;
}

/* The candidates' code width: --format gguf: the GGUF type's of the group's first linear (the
 * search rounds on AWQ's grid of that width), else --bits. */
static int search_bits(const lq_qjob *j, int64_t slot) {
    const int b = j->ggml && j->ggml[slot] > 0 ? lq_ggml_bits((lq_dtype)j->ggml[slot]) : 0;
    return b > 0 ? b : (int)j->o->bits;
}

/* The search's group: the format's group where it divides the inputs (AWQ proper, whose layout
 * needs that), else the largest divisor of k below it (GPTQ's last group may be partial). */
static int64_t search_group_size(int64_t k, int64_t g) {
    if (g <= 0 || g >= k)
        return k;
    while (k % g)
        g--;
    return g;
}

/* The most linears one scaling group holds: every expert's gate and up, and the shared one's. */
#define LQ_AWQ_MAX_LINS (2 * (LQ_CFG_MAX_EXPERTS + 1))

/* A scaling group (AutoAWQ's get_layers_for_scaling): the linears that read one input, the
 * previous op that takes the division (-1 input_layernorm, -2 the MLP's norm, else a slot whose
 * last rows do: v_proj whole, or the v rows of a fused qkv_proj and the up rows of
 * gate_up_proj, AutoAWQ's scale_fc_fc), the inspected module and the captured input. */
typedef struct awq_grp {
    int64_t nlin, lins[3], src;
    int64_t prev;
    int     kind;
    int64_t expert_in; /* the experts' block: its linears are every expert's gate/up */
} awq_grp;

/* AutoAWQ's groups for the layer: attention in, v -> o, the MLP's (or the experts' block's)
 * gate/up, then up -> down (each expert's). Mixtral / Qwen MoE follow AutoAWQ's mixtral.py and
 * qwen2_moe.py, with two differences: the router and the shared expert's gate, which read the
 * scaled norm's output too, get the scales folded into their columns (AutoAWQ leaves them, so
 * its scaled model routes differently from the original), and the shared expert's gate/up join
 * the experts' group. */
static int64_t layer_groups(const lq_qjob *j, awq_grp *G) {
    const lq_model_config *cf    = &j->model->cfg;
    const int              fused = cf->fused;
    int64_t                n     = 0;
    if (fused) {
        G[n++] = (awq_grp){1, {LQ_LIN_QKV}, LQ_LIN_QKV, -1, 0, 0};
        G[n++] = (awq_grp){1, {LQ_LIN_O}, LQ_LIN_O, LQ_LIN_QKV, 1, 0};
    } else {
        G[n++] = (awq_grp){3, {LQ_LIN_Q, LQ_LIN_K, LQ_LIN_V}, LQ_LIN_Q, -1, 0, 0};
        G[n++] = (awq_grp){1, {LQ_LIN_O}, LQ_LIN_O, LQ_LIN_V, 1, 0};
    }
    if (!cf->num_experts) {
        if (fused) {
            G[n++] = (awq_grp){1, {LQ_LIN_GATE_UP}, LQ_LIN_GATE_UP, -2, 2, 0};
            G[n++] = (awq_grp){1, {LQ_LIN_DOWN}, LQ_LIN_DOWN, LQ_LIN_GATE_UP, 1, 0};
        } else {
            G[n++] = (awq_grp){2, {LQ_LIN_GATE, LQ_LIN_UP}, LQ_LIN_GATE, -2, 2, 0};
            G[n++] = (awq_grp){1, {LQ_LIN_DOWN}, LQ_LIN_DOWN, LQ_LIN_UP, 1, 0};
        }
        return n;
    }
    G[n++] = (awq_grp){0, {0}, LQ_SLOT_MOE_IN, -2, 2, 1};
    for (int64_t e = 0; e <= cf->num_experts; e++) {
        const int64_t dn = lq_slot_of(LQ_LIN_DOWN, e);
        if (lq_slot_present(cf, dn))
            G[n++] = (awq_grp){1, {dn}, dn, lq_slot_of(LQ_LIN_UP, e), 1, 0};
    }
    return n;
}

/* The experts' block group's linears: every present expert's gate and up. */
static int64_t expert_in_lins(const lq_model_config *cf, int64_t *lins) {
    int64_t n = 0;
    for (int64_t e = 0; e <= cf->num_experts; e++)
        for (int r = 0; r < 2; r++) {
            const int64_t s = lq_slot_of(r ? LQ_LIN_UP : LQ_LIN_GATE, e);
            if (lq_slot_present(cf, s))
                lins[n++] = s;
        }
    return n;
}

/* The captures the layer's groups and clipping read, then the fallback of experts the router
 * sent too few tokens (their down inputs taken again over every token). */
static lq_status capture_inputs(lq_qjob *j, awq_caps *c) {
    const lq_model_config *cf = &j->model->cfg;
    int64_t               *k  = lq_malloc_n(j->nslots, sizeof *k);
    lq_status              st = k ? LQ_OK : LQ_ERR_NOMEM;
    if (k)
        lq_qjob_input_widths(j, k);
    for (int64_t s = 0; s < j->nslots && st == LQ_OK; s++) /* experts' rows grow as they come */
        if (k[s])
            st = caps_want(c, s, k[s], s < LQ_LIN_COUNT ? c->T : 0);
    free(k);
    if (st != LQ_OK)
        LQ_FAIL(j->err, LQ_ERR_NOMEM, "awq: out of memory caching %lld inputs", (long long)c->T);
    LQ_TRY(lq_qjob_capture(j, (1u << LQ_LIN_COUNT) - 1, cap_fn, c));
    const int64_t E = cf->num_experts;
    if (!E)
        return LQ_OK;
    uint8_t *changed = malloc((size_t)E);
    if (!changed)
        LQ_FAIL(j->err, LQ_ERR_NOMEM, "awq: out of memory");
    if (lq_qjob_moe_fallback(j, changed) > 0) {
        for (int64_t e = 0; e < E; e++)
            if (changed[e])
                c->rows[lq_slot_of(LQ_LIN_DOWN, e)] = 0;
        st = lq_qjob_moe_recapture_down(j, changed, cap_fn, c); /* now in mode ALL */
        if (st == LQ_ERR_NOMEM)
            lq_fail(j->err, st, "awq: out of memory caching expert inputs");
    }
    free(changed);
    return st;
}

/* A single linear's candidates are cheaper to score through its input's Gram matrix than by
 * running it when t k^2 / 2 + grid n k^2 < (grid + 1) t n k (roughly k < t): the same loss
 * up to float rounding, without the module's forward per candidate. */
static int use_gram(const awq_grp *gr, int64_t n, int64_t k, int64_t t, int grid) {
    if (gr->kind != 1)
        return 0;
    const double dn = (double)n, dk = (double)k, dt = (double)t;
    return dt * dk * dk / 2 + grid * dn * dk * dk < (grid + 1) * dt * dn * dk;
}

/* The float output of the module a group inspects (attention, MLP, or its first linear) on its
 * input X [t, k], into ref [t, *nout]; L, X and ref on the job's backend. */
static lq_status ref_output(lq_qjob *j, const lq_layer *L, const awq_grp *gr, int64_t lin0,
                            const float *X, int64_t nseq, int64_t t, float *ref, int64_t *nout) {
    if (gr->kind == 0) {
        *nout = j->model->cfg.hidden_size;
        return lq_attn_forward(j->model, L, X, nseq, j->seqlen, ref, j->ws, j->err);
    }
    if (gr->kind == 2) {
        *nout = j->model->cfg.hidden_size;
        return lq_mlp_forward(j->model, L, X, t, ref, j->ws, j->err);
    }
    const lq_linear *l = lq_layer_slot((lq_layer *)(uintptr_t)L, lin0);
    *nout              = l->buf.q.n;
    BE(j, "reference forward", j->be->ops->linear(j->be, &l->buf.q, l->bias, X, t, ref));
    return LQ_OK;
}

/* A group's scales s [k] folded into the layer: divided out of what produces its input (the
 * norm, or the rows of the previous linear and its bias), multiplied into its linears' columns
 * and divided out of the captured inputs; for the experts' input also into the float readers of
 * the norm (router, shared gate) so that routing is unchanged. */
static lq_status fold_group(lq_qjob *j, const awq_grp *gr, const int64_t *lins, int64_t nlin,
                            const float *s, awq_caps *c) {
    const lq_model_config *cf = &j->model->cfg;
    const int64_t          k  = lq_qjob_linear(j, lins[0])->buf.q.k;
    if (gr->prev == -1 || gr->prev == -2) {
        float *nw = gr->prev == -1 ? j->L->attn_norm : j->L->mlp_norm;
        if (cf->norm_plus_one) /* Gemma scales by (1 + w): fold into that */
            for (int64_t ch = 0; ch < k; ch++)
                nw[ch] = (1.0f + nw[ch]) / s[ch] - 1.0f;
        else
            for (int64_t ch = 0; ch < k; ch++)
                nw[ch] /= s[ch];
    } else {
        lq_linear    *pl = lq_qjob_linear(j, gr->prev);
        const int64_t pk = pl->buf.q.k, r0 = pl->buf.q.n - k;
        float        *pw = wptr(j->L, gr->prev);
        for (int64_t r = 0; r < k; r++) {
            for (int64_t ch = 0; ch < pk; ch++)
                pw[(r0 + r) * pk + ch] /= s[r];
            if (pl->bias)
                pl->bias[r0 + r] /= s[r];
        }
    }
    for (int64_t i = 0; i < nlin; i++)
        scale_cols(wptr(j->L, lins[i]), lq_qjob_linear(j, lins[i])->buf.q.n, k, s);
    float *sd = NULL; /* the captures on the backend are divided there */
    LQ_TRY(be_put(j, s, k, &sd));
    lq_status st = j->be->ops->div_cols(j->be, c->x[gr->src], c->rows[gr->src], k, sd);
    if (gr->expert_in) {
        lq_linear *fl[2] = {&j->L->router, cf->shared_intermediate ? &j->L->shared[3] : NULL};
        for (int f = 0; f < 2; f++)
            if (fl[f])
                scale_cols((float *)(uintptr_t)fl[f]->buf.q.dense, fl[f]->buf.q.n, k, s);
        for (int64_t e = 0; e < cf->num_experts && st == LQ_OK; e++) { /* routed copies */
            const int64_t gs = lq_slot_of(LQ_LIN_GATE, e);
            if (c->x[gs])
                st = j->be->ops->div_cols(j->be, c->x[gs], c->rows[gs], k, sd);
        }
    }
    be_unput(j, s, sd, k);
    return st == LQ_OK ? LQ_OK : be_fail(j, st, "dividing the captures by the scales");
}

/* A group's search on the backend: its weights and candidate buffers there, the module's
 * reference output (or the Gram matrix of its input), then the grid. */
static lq_status search_group(lq_qjob *j, const awq_grp *gr, const int64_t *lins, int64_t nlin,
                              const lq_layer *Lb, lq_linear *xcopy, awq_caps *c, int64_t g,
                              int64_t nseq, float *ref, float *out, float *best_s) {
    const lq_model_config *cf = &j->model->cfg;
    lq_be                 *be = j->be;
    const int64_t          k = lq_qjob_linear(j, lins[0])->buf.q.k, t = c->rows[gr->src];
    const float           *X = c->x[gr->src];
    float     *w[LQ_AWQ_MAX_LINS] = {NULL}, *wq[LQ_AWQ_MAX_LINS] = {NULL}, *hw[LQ_AWQ_MAX_LINS];
    int64_t    nv[LQ_AWQ_MAX_LINS];
    float     *xm = lq_malloc_n(k, sizeof(float)), *sd = NULL, *G = NULL, *gs = NULL, *asd = NULL;
    lq_status  st = xm ? LQ_OK : lq_fail(j->err, LQ_ERR_NOMEM, "awq: out of memory");
    const int64_t n0 = lq_qjob_linear(j, lins[0])->buf.q.n;
    const int     gram = use_gram(gr, n0, k, t, (int)j->o->awq_grid);
    /* x_mean: every token's |x| when the captures summed them, else the kept rows' */
    if (st == LQ_OK && gr->src < LQ_LIN_COUNT && c->nsum[gr->src] > 0) {
        st = be_get(j, xm, c->asum[gr->src], k);
        for (int64_t ch = 0; st == LQ_OK && ch < k; ch++)
            xm[ch] = xm[ch] / (float)c->nsum[gr->src];
    } else if (st == LQ_OK) {
        st = be_alloc(j, &asd, k, 1);
        if (st == LQ_OK && (st = be->ops->col_abssum(be, asd, X, t, k)) != LQ_OK)
            st = be_fail(j, st, "activation means");
        if (st == LQ_OK)
            st = be_get(j, xm, asd, k);
        be_release(be, asd, k);
        for (int64_t ch = 0; st == LQ_OK && ch < k; ch++)
            xm[ch] /= (float)t;
    }
    for (int64_t i = 0; i < nlin && st == LQ_OK; i++) {
        hw[i] = wptr(j->L, lins[i]);
        nv[i] = lq_qjob_linear(j, lins[i])->buf.q.n;
        st    = be_put(j, hw[i], nv[i] * k, &w[i]);
        if (st == LQ_OK)
            st = be_alloc(j, &wq[i], nv[i] * k, 0);
    }
    if (st == LQ_OK)
        st = be_alloc(j, &sd, k, 0);
    loss_ctx lc = {j,  gr->kind, lins, nlin, Lb, NULL, X, ref, out, nseq, t, 0, w, wq, nv, sd,
                   search_group_size(k, g), search_bits(j, lins[0]), NULL, NULL, k};
    if (xcopy) { /* the candidates must not reach the layer's own expert array */
        memcpy(xcopy, Lb->experts, (size_t)(3 * cf->num_experts) * sizeof *xcopy);
        lc.xcopy = xcopy;
    }
    if (st == LQ_OK && gram) { /* G = X^T X, symmetric */
        st = be_alloc(j, &G, k * k, 0);
        if (st == LQ_OK)
            st = be_alloc(j, &gs, 2 * n0 * k, 0);
        if (st == LQ_OK && ((st = be->ops->syrk(be, G, X, t, k, 1.0f, 0.0f)) != LQ_OK ||
                            (st = be->ops->sym_upper(be, G, k)) != LQ_OK))
            st = be_fail(j, st, "Gram matrix");
        lc.G = G, lc.gs = gs, lc.nout = n0;
    } else if (st == LQ_OK) {
        st = ref_output(j, Lb, gr, lins[0], X, nseq, t, ref, &lc.nout);
    }
    lq_awq_group ag    = {(int)nlin,
                          hw,
                          nv,
                          k,
                          search_group_size(k, g),
                          lc.bits,
                          (int)j->o->awq_grid,
                          j->o->awq_duo_scaling};
    double       ratio = 0, loss = 0;
    if (st == LQ_OK)
        st = lq_awq_search(&ag, xm, loss_fn, &lc, best_s, &ratio, &loss, j->err);
    if (st == LQ_OK)
        j->loss[lins[0]] = loss;
    for (int64_t i = 0; i < nlin; i++) {
        be_unput(j, hw[i], w[i], w[i] ? nv[i] * k : 0);
        be_release(be, wq[i], wq[i] ? nv[i] * k : 0);
    }
    be_release(be, sd, k);
    be_release(be, G, k * k);
    be_release(be, gs, 2 * n0 * k);
    free(xm);
    return st;
}

lq_status lq_awq_smooth_layer(lq_qjob *j, int64_t g, int64_t max_seqs, lq_awq_inputs *keep) {
    const lq_model_config *cf   = &j->model->cfg;
    const int64_t          nseq = max_seqs > 0 && max_seqs < j->nseq ? max_seqs : j->nseq;
    int64_t                T = nseq * j->seqlen, d = cf->hidden_size;
    awq_caps               c   = {0};
    lq_status              st  = LQ_OK;
    float                 *ref = NULL, *out = NULL, **sc = NULL;
    awq_grp               *G   = NULL;
    int64_t               *xin = NULL, nxin = 0;
    lq_linear             *xcopy = NULL;
    int64_t                maxn = 0, ng = 0, maxt = T;
    const lq_layer        *Lx = NULL;
    c.nslots = j->nslots, c.T = T, c.keep_in = 1, c.E = cf->num_experts, c.mode = j->moe_mode;
    c.j = j, c.be = j->be;
    c.x    = lq_calloc_n(j->nslots, sizeof *c.x);
    c.rows = lq_calloc_n(j->nslots, sizeof *c.rows);
    c.cap  = lq_calloc_n(j->nslots, sizeof *c.cap);
    c.k    = lq_calloc_n(j->nslots, sizeof *c.k);
    G      = lq_calloc_n(4 + cf->num_experts + 1, sizeof *G);
    xin    = lq_calloc_n(2 * (cf->num_experts + 1) + 1, sizeof *xin);
    if (!c.x || !c.rows || !c.cap || !c.k || !G || !xin)
        LQ_FAIL_GOTO(j->err, LQ_ERR_NOMEM, "awq: out of memory");
    for (int64_t s = 0; s < j->nslots; s++) {
        int64_t n, k;
        if (!lq_slot_present(cf, s))
            continue;
        lq_slot_shape(cf, s, &n, &k);
        maxn = n > maxn ? n : maxn;
    }
    maxn = maxn > d ? maxn : d;
    LQ_TRY_GOTO(capture_inputs(j, &c));
    if (cf->num_experts) {
        nxin  = expert_in_lins(cf, xin);
        xcopy = lq_malloc_n(3 * cf->num_experts, sizeof *xcopy);
    }
    ng = layer_groups(j, G);
    for (int64_t s = 0; s < j->nslots; s++) /* an expert may hold more rows than T */
        maxt = c.x[s] && c.rows[s] > maxt ? c.rows[s] : maxt;
    sc = lq_calloc_n(ng, sizeof *sc);
    if (!sc || (cf->num_experts && !xcopy) || nxin > LQ_AWQ_MAX_LINS)
        LQ_FAIL_GOTO(j->err, LQ_ERR_NOMEM, "awq: out of memory");
    LQ_TRY_GOTO(be_alloc(j, &ref, maxt * maxn, 0));
    LQ_TRY_GOTO(be_alloc(j, &out, maxt * maxn, 0));
    /* the layer as captured, where the candidates run (the scales fold in after every search) */
    LQ_TRY_GOTO(lq_qjob_layer(j, &Lx));
    for (int64_t gi = 0; gi < ng; gi++) {
        awq_grp       *gr   = &G[gi];
        const int64_t *lins = gr->expert_in ? xin : gr->lins;
        const int64_t  nlin = gr->expert_in ? nxin : gr->nlin;
        int            ok   = nlin > 0 && c.rows[gr->src] > 0;
        for (int64_t i = 0; i < nlin; i++)
            ok &= lq_qjob_planned(j, lins[i]);
        if (gr->prev == LQ_LIN_V || gr->prev == LQ_LIN_QKV) { /* v -> o only without GQA */
            const int64_t qd = cf->num_heads * cf->head_dim, kvd = cf->num_kv_heads * cf->head_dim;
            ok &= kvd == cf->hidden_size && qd == cf->hidden_size;
        }
        if (!ok)
            continue;
        const int64_t k = lq_qjob_linear(j, lins[0])->buf.q.k;
        if (!(sc[gi] = lq_malloc_n(k, sizeof(float))))
            LQ_FAIL_GOTO(j->err, LQ_ERR_NOMEM, "awq: out of memory");
        LQ_TRY_GOTO(search_group(j, gr, lins, nlin, Lx, xcopy, &c, g, nseq, ref, out, sc[gi]));
    }
    /* Fold the scales (after all searches, as AutoAWQ's apply_scale). */
    for (int64_t gi = 0; gi < ng; gi++)
        if (sc[gi]) {
            lq_qjob_changed(j, -1); /* norms, linears, biases, the router */
            LQ_TRY_GOTO(fold_group(j, &G[gi], G[gi].expert_in ? xin : G[gi].lins,
                                   G[gi].expert_in ? nxin : G[gi].nlin, sc[gi], &c));
        }
done:
    if (keep && st == LQ_OK) {
        keep->be   = c.be;
        keep->x    = c.x;
        keep->rows = c.rows;
        keep->cap  = c.cap;
        keep->k    = c.k;
        for (int s = 0; s < LQ_LIN_COUNT; s++)
            be_release(c.be, c.asum[s], c.k[s]);
    } else {
        caps_free(&c);
    }
    for (int64_t gi = 0; sc && gi < ng; gi++)
        free(sc[gi]);
    be_release(j->be, ref, maxt * maxn);
    be_release(j->be, out, maxt * maxn);
    free(sc), free(G), free(xin), free(xcopy);
    return st;
}

void lq_awq_inputs_free(lq_awq_inputs *in, int64_t nslots) {
    for (int64_t s = 0; in->x && s < nslots; s++)
        be_release(in->be, in->x[s], in->cap[s] * in->k[s]);
    free(in->x), free(in->rows), free(in->cap), free(in->k);
    memset(in, 0, sizeof *in);
}

/* --format gguf: slot l rounded on its GGUF type by ggml's search, with the mean squares of its
 * captured (scaled) inputs as the importance matrix, as llama-quantize --imatrix rounds it; the
 * blocks go to the driver and the weights become their values. */
static lq_status gguf_round(lq_qjob *j, int64_t l, const lq_awq_inputs *in) {
    lq_linear     *lin = lq_qjob_linear(j, l);
    const int64_t  n = lin->buf.q.n, k = lin->buf.q.k;
    const int64_t  src = lq_slot_input(&j->model->cfg, l, j->moe_mode), rows = in->rows[src];
    const lq_dtype t   = (lq_dtype)j->ggml[l];
    int            bb;
    const int64_t  be  = lq_dtype_block(t, &bb);
    float         *W   = wptr(j->L, l);
    float         *imp = lq_calloc_n(k, sizeof(float));
    float         *x   = rows > 0 ? lq_malloc_n(rows * k, sizeof(float)) : NULL;
    uint8_t       *b   = lq_malloc_n(n * (k / be), (size_t)bb);
    lq_status      st  = LQ_OK;
    if (!imp || !b || (rows > 0 && !x)) {
        st = lq_fail(j->err, LQ_ERR_NOMEM, "awq: out of memory");
        goto done;
    }
    if (rows > 0) {
        LQ_TRY_GOTO(be_get(j, x, in->x[src], rows * k));
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < k; c++)
                imp[c] += x[r * k + c] * x[r * k + c];
    } else { /* no input captured (an expert no token reached): plain weights */
        for (int64_t c = 0; c < k; c++)
            imp[c] = 1;
    }
    const double t0 = lq_now();
    for (int64_t r = 0; r < n; r++) {
        lq_ggml_encode_w(t, W + r * k, k / be, imp, lq_ggml_row_sigma2(W + r * k, k),
                         b + r * (k / be) * bb);
        lq_ggml_decode(t, b + r * (k / be) * bb, k / be, W + r * k);
    }
    lq_qjob_phase(j, LQ_PH_PACK, t0);
    lq_qjob_changed(j, l);
    j->quantized[l]   = 1;
    j->ggml_blocks[l] = b;
    b                 = NULL;
done:
    free(imp), free(x), free(b);
    return st;
}

static lq_status awq_layer(lq_qjob *j) {
    /* --format gguf: the search rounds on 32-element groups, the sub-blocks of the GGUF types */
    int64_t       g  = j->ggml ? 32 : j->o->group_size;
    lq_awq_inputs in = {0};
    lq_status     st = LQ_OK;
    if (g <= 0)
        LQ_FAIL(j->err, LQ_ERR_INVALID_ARG, "awq: the AutoAWQ GEMM format needs --group-size > 0");
    const int64_t seqs = j->o->awq_tokens / j->seqlen; /* whole windows, at least one */
    LQ_TRY(lq_awq_smooth_layer(j, g, seqs > 0 ? seqs : 1, &in));
    /* Clip (not q/k: their errors are amplified by the attention softmax; AutoAWQ does clip a
     * fused qkv_proj, whose name matches none of its exceptions) on the backend, then quantize
     * on the host. */
    for (int64_t l = 0; l < j->nslots; l++) {
        if (!lq_qjob_planned(j, l))
            continue;
        if (j->ggml) { /* the GGUF type's own search sets the ranges: no AWQ clip */
            if (j->ggml[l] > 0)
                LQ_TRY_GOTO(gguf_round(j, l, &in));
            continue;
        }
        lq_linear    *lin = lq_qjob_linear(j, l);
        lq_qlinear   *w   = &lin->buf.q;
        int64_t       n = w->n, k = w->k, Gn = k / g;
        const int64_t src = lq_slot_input(&j->model->cfg, l, j->moe_mode);
        if (j->o->awq_clip && l != LQ_LIN_Q && l != LQ_LIN_K && in.rows[src] > 0) {
            if (k % g)
                LQ_FAIL_GOTO(j->err, LQ_ERR_INVALID_ARG,
                             "awq clip: group size %lld does not divide %lld inputs",
                             (long long)g, (long long)k);
            float *hw = wptr(j->L, l), *dw = NULL;
            LQ_TRY_GOTO(be_put(j, hw, n * k, &dw));
            st = j->be->ops->awq_clip(j->be, dw, n, k, in.x[src], in.rows[src], g, 4);
            if (st == LQ_OK)
                st = be_get(j, hw, dw, n * k);
            else
                st = be_fail(j, st, "clip search");
            be_unput(j, hw, dw, n * k);
            if (st != LQ_OK)
                goto done;
        }
        float   *Wc = lq_malloc_n(n * k, sizeof(float));
        uint8_t *q  = malloc((size_t)(n * k));
        float   *s  = malloc((size_t)(Gn * n) * sizeof(float));
        int32_t *z  = malloc((size_t)(Gn * n) * sizeof(int32_t));
        if (Wc && q && s && z) {
            memcpy(Wc, w->dense, (size_t)(n * k) * sizeof(float));
            lq_awq_quantize(Wc, n, k, g, 4, q, s, z);
            const double t0 = lq_now();
            st              = lq_pack_awq(n, k, g, q, z, s, lin->bias, &j->out[l], j->err);
            lq_qjob_phase(j, LQ_PH_PACK, t0);
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
    lq_awq_inputs_free(&in, j->nslots);
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
    int64_t w = 4 * tokens * (2 * d + qd + I) + 8 * tokens * mx + 4 * 3 * d * I;
    if (c->num_experts) /* each token's rows in its top-k experts' gate and down caches */
        w += 4 * tokens * c->experts_per_tok * (d + c->moe_intermediate) +
             4 * tokens * c->shared_intermediate;
    return w;
}

const lq_method_traits lq_method_awq = {
    .name                = "awq",
    .help                = "AWQ: activation-aware scaling and clipping from calibration data "
                           "(AutoAWQ GEMM checkpoint)",
    .format              = LQ_FMT_AWQ,
    .options             = "quantize,group,calib,awq_search,awq",
    .bits_hint           = " (for 8 bits use gptq --bits 8, or int8)",
    .needs_calib         = 1,
    .propagate_quantized = 0,
    .fp_first_capture    = 1,   /* its first capture is of the unmodified layer */
    .folds_scales        = 1,
    .default_seqlen      = 512, /* AutoAWQ: 128 samples x 512 tokens */
    .fill_qconfig        = awq_fill,
    .quantize_layer      = awq_layer,
    .work_bytes          = awq_work,
};
