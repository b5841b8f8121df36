/* Mixed precision under a bits-per-weight budget: sensitivity pass and allocation (lq_mixed.h).
 *
 * Why measured KL and not the layer loss GPTQ reports: a unit's output error reaches the logits
 * through every later layer, and how much it is amplified depends on where it sits (the first
 * and last layers, v and down, are the usual suspects, which llama.cpp's Q4_K_M hard-codes).
 * The pass runs the float model once per layer for the reference states, and once per layer
 * for all its units together through the later layers, so a model of L layers costs about
 * (L + 1) / 2 * 4 forwards of the probe tokens plus 5 lm_head passes per layer. */
#include "lq_mixed.h"

#include "lq_qformat.h"
#include "lq_quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BIT(l)             (1u << (l))
#define LQ_MIXED_KL_TOKENS 512 /* tokens whose next-token distribution is compared */

unsigned lq_mixed_unit_lins(int u) {
    static const unsigned lins[LQ_MIXED_UNITS] = {
        BIT(LQ_LIN_Q) | BIT(LQ_LIN_K) | BIT(LQ_LIN_V) | BIT(LQ_LIN_QKV), BIT(LQ_LIN_O),
        BIT(LQ_LIN_GATE) | BIT(LQ_LIN_UP) | BIT(LQ_LIN_GATE_UP), BIT(LQ_LIN_DOWN)};
    return u >= 0 && u < LQ_MIXED_UNITS ? lins[u] : 0;
}

const char *lq_mixed_unit_name(int u) {
    static const char *names[LQ_MIXED_UNITS] = {"self_attn.qkv", "self_attn.o_proj", "mlp.gate_up",
                                                "mlp.down_proj"};
    return u >= 0 && u < LQ_MIXED_UNITS ? names[u] : "?";
}

int64_t lq_mixed_linear_bits(int64_t n, int64_t k, int bits, int64_t group_size) {
    lq_qconfig c;
    memset(&c, 0, sizeof c);
    c.format     = LQ_FMT_GPTQ;
    c.bits       = bits;
    c.group_size = group_size;
    return 8 * lq_qformat_bytes(&c, n, k);
}

/* Bits of the linears of cfg's decoder that are not in any unit's choice (16-bit), and the
 * weight count of all of them. */
static void fixed_bits(const lq_model_config *cfg, const int *plan, int64_t *fixed,
                       int64_t *params) {
    *fixed = *params = 0;
    for (int l = 0; l < LQ_LIN_COUNT; l++) {
        int64_t n, k;
        if (!lq_lin_present(cfg, (lq_lin_id)l))
            continue;
        lq_lin_shape(cfg, (lq_lin_id)l, &n, &k);
        *params += n * k * cfg->num_layers;
        if (!plan[l])
            *fixed += 16 * n * k * cfg->num_layers;
    }
}

static int64_t unit_params(const lq_model_config *cfg, const int *plan, int u) {
    int64_t p = 0;
    for (int l = 0; l < LQ_LIN_COUNT; l++)
        if ((lq_mixed_unit_lins(u) >> l & 1) && plan[l] && lq_lin_present(cfg, (lq_lin_id)l)) {
            int64_t n, k;
            lq_lin_shape(cfg, (lq_lin_id)l, &n, &k);
            p += n * k;
        }
    return p;
}

static int64_t unit_bits(const lq_model_config *cfg, const int *plan, int u, int bits, int64_t g) {
    int64_t b = 0;
    for (int l = 0; l < LQ_LIN_COUNT; l++)
        if ((lq_mixed_unit_lins(u) >> l & 1) && plan[l] && lq_lin_present(cfg, (lq_lin_id)l)) {
            int64_t n, k;
            lq_lin_shape(cfg, (lq_lin_id)l, &n, &k);
            b += lq_mixed_linear_bits(n, k, bits, g);
        }
    return b;
}

double lq_mixed_uniform_bpw(const lq_model_config *cfg, const int *plan, int bits,
                            int64_t group_size) {
    int64_t fixed, params, b = 0;
    fixed_bits(cfg, plan, &fixed, &params);
    for (int u = 0; u < LQ_MIXED_UNITS; u++)
        b += unit_bits(cfg, plan, u, bits, group_size);
    return params > 0 ? (double)(fixed + b * cfg->num_layers) / (double)params : 0;
}

int64_t lq_mixed_choice_group(const lq_mixed_opts *o, int c) {
    return o->choice_group[c] ? o->choice_group[c] : o->group_size;
}

/* ------------------------------------------------------------------------------------------
 * Allocation: start every unit at the narrowest width, then take, while the budget allows,
 * the upgrade (to any wider width of a unit) with the largest fall in cost per added bit.
 * ------------------------------------------------------------------------------------------ */
static double unit_cost(const lq_mixed_unit *u, int c, int probe_c) {
    const double e0 = u->err[probe_c];
    return e0 > 0 ? u->kl * u->err[c] / e0 : 0;
}

lq_status lq_mixed_allocate(const lq_model_config *cfg, const lq_mixed_opts *o,
                            lq_mixed_result *res, lq_err *err) {
    const int     nc      = o->n_choices;
    const int64_t pg      = res->probe_group ? res->probe_group : o->group_size;
    int           probe_c = 0;
    for (int c = 0; c < nc; c++)
        if (o->choices[c] == res->probe_bits && lq_mixed_choice_group(o, c) == pg)
            probe_c = c;
    int64_t fixed, params;
    fixed_bits(cfg, o->plan, &fixed, &params);
    LQ_RETURN_IF(params <= 0, err, LQ_ERR_INVALID_ARG, "mixed precision: no decoder linears");
    /* the budget in bits, rounded down: the result never exceeds the target */
    const double budget = o->target_bpw * (double)params;
    int         *cur    = calloc((size_t)(res->n_units > 0 ? res->n_units : 1), sizeof(int));
    LQ_RETURN_IF(!cur, err, LQ_ERR_NOMEM, "out of memory");
    double used = (double)fixed;
    for (int64_t i = 0; i < res->n_units; i++)
        used += (double)unit_bits(cfg, o->plan, res->units[i].unit, o->choices[0],
                                  lq_mixed_choice_group(o, 0));
    res->min_bpw = used / (double)params;
    for (;;) {
        int64_t best_u = -1;
        int     best_c = 0;
        double  best_r = 0, best_db = 0;
        for (int64_t i = 0; i < res->n_units; i++) {
            const lq_mixed_unit *u = &res->units[i];
            const int64_t        b0 = unit_bits(cfg, o->plan, u->unit, o->choices[cur[i]],
                                                lq_mixed_choice_group(o, cur[i]));
            for (int c = cur[i] + 1; c < nc; c++) {
                const double db = (double)(unit_bits(cfg, o->plan, u->unit, o->choices[c],
                                                     lq_mixed_choice_group(o, c)) -
                                           b0);
                if (db <= 0 || used + db > budget)
                    continue;
                const double r = (unit_cost(u, cur[i], probe_c) - unit_cost(u, c, probe_c)) / db;
                /* ties (and units measured as insensitive) go to the earliest layer */
                if (best_u < 0 || r > best_r) {
                    best_u = i, best_c = c, best_r = r, best_db = db;
                }
            }
        }
        if (best_u < 0)
            break;
        cur[best_u] = best_c;
        used += best_db;
    }
    for (int64_t i = 0; i < res->n_units; i++) {
        res->units[i].choice = cur[i];
        res->units[i].bits   = o->choices[cur[i]];
        res->units[i].group  = lq_mixed_choice_group(o, cur[i]);
    }
    res->bpw = used / (double)params;
    free(cur);
    return LQ_OK;
}

void lq_mixed_result_free(lq_mixed_result *r) {
    if (!r)
        return;
    free(r->units);
    memset(r, 0, sizeof *r);
}

/* ------------------------------------------------------------------------------------------
 * Sensitivity pass
 * ------------------------------------------------------------------------------------------ */
typedef struct err_ctx {
    const lq_layer      *L;
    const lq_mixed_opts *o;
    lq_mixed_unit       *units[LQ_MIXED_UNITS]; /* this layer's, NULL where none */
    float               *dw;                    /* [n, k] scratch: Q_b(W) - W */
    float               *y;                     /* [rows, n] scratch */
    int64_t              dw_cap, y_rows, y_cap;
    lq_err              *err;
} err_ctx;

/* Q_b(W) - W by round-to-nearest at group size g (the probe quantizer). */
static lq_status rtn_delta(const float *W, int64_t n, int64_t k, int bits, int64_t g,
                           const lq_mixed_opts *o, float *dw, lq_err *err) {
    lq_qspec      s  = {bits, g, o->sym, 1, LQ_MSE_OFF};
    const int64_t G  = lq_num_groups(k, g);
    uint8_t      *q  = lq_malloc_n(n * k, 1);
    float        *sc = lq_malloc_n(G * n, sizeof(float));
    int32_t      *z  = lq_malloc_n(G * n, sizeof(int32_t));
    int32_t      *gi = lq_malloc_n(k, sizeof(int32_t));
    lq_status     st = LQ_OK;
    if (!q || !sc || !z || !gi)
        st = lq_fail(err, LQ_ERR_NOMEM, "mixed precision: out of memory");
    else
        st = lq_rtn(W, n, k, &s, q, sc, z, gi, dw, err);
    if (st == LQ_OK)
        for (int64_t e = 0; e < n * k; e++)
            dw[e] -= W[e];
    free(q), free(sc), free(z), free(gi);
    return st;
}

/* The unit's output error at every width: sum over the captured rows of ||x dW^T||^2. */
static lq_status on_capture(void *user, int64_t id, const float *x, int64_t t, int64_t k) {
    err_ctx *c = user;
    int      u = -1;
    for (int i = 0; i < LQ_MIXED_UNITS; i++)
        if (lq_mixed_unit_lins(i) >> id & 1)
            u = i;
    if (u < 0 || !c->units[u] || !c->o->plan[id])
        return LQ_OK;
    const lq_linear *lin = &c->L->lin[id];
    const int64_t    n   = lin->buf.q.n;
    if (c->dw_cap < n * k) {
        free(c->dw);
        c->dw_cap = 0;
        LQ_RETURN_IF(!(c->dw = lq_malloc_n(n * k, sizeof(float))), c->err, LQ_ERR_NOMEM,
                     "mixed precision: out of memory");
        c->dw_cap = n * k;
    }
    if (c->y_cap < c->y_rows * n) {
        free(c->y);
        c->y_cap = 0;
        LQ_RETURN_IF(!(c->y = lq_malloc_n(c->y_rows * n, sizeof(float))), c->err, LQ_ERR_NOMEM,
                     "mixed precision: out of memory");
        c->y_cap = c->y_rows * n;
    }
    for (int ch = 0; ch < c->o->n_choices; ch++) {
        LQ_TRY(rtn_delta(lin->buf.q.dense, n, k, c->o->choices[ch], lq_mixed_choice_group(c->o, ch),
                         c->o, c->dw, c->err));
        double s = 0;
        for (int64_t r0 = 0; r0 < t; r0 += c->y_rows) {
            const int64_t nr = t - r0 < c->y_rows ? t - r0 : c->y_rows;
            lq_sgemm(0, 1, nr, n, k, 1.f, x + r0 * k, k, c->dw, k, 0.f, c->y, n, 0);
            for (int64_t e = 0; e < nr * n; e++)
                s += (double)c->y[e] * c->y[e];
        }
        c->units[u]->err[ch] += s;
    }
    return LQ_OK;
}

/* Logits [rows, V] -> log-probabilities, in place. */
static void log_softmax_rows(float *a, int64_t rows, int64_t V) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        float *x  = a + r * V;
        float  mx = x[0];
        for (int64_t v = 1; v < V; v++)
            mx = x[v] > mx ? x[v] : mx;
        double z = 0;
        for (int64_t v = 0; v < V; v++)
            z += expf(x[v] - mx);
        const float lse = (float)(log(z) + mx);
        for (int64_t v = 0; v < V; v++)
            x[v] -= lse;
    }
}

/* Sum over rows of KL(p || q): lp log-probabilities, pp = exp(lp), lq log-probabilities. */
static double kl_rows(const float *lp, const float *pp, const float *lq, int64_t rows, int64_t V) {
    double tot = 0;
#pragma omp parallel for schedule(static) reduction(+ : tot)
    for (int64_t r = 0; r < rows; r++) {
        const float *a = lp + r * V, *p = pp + r * V, *b = lq + r * V;
        double       s = 0;
        for (int64_t v = 0; v < V; v++)
            s += (double)(p[v] * (a[v] - b[v]));
        tot += s > 0 ? s : 0;
    }
    return tot;
}

/* Rows 0, stride, 2 stride, .. of x [*, d] from row r0 / stride on: nr of them into g. */
static void gather(const float *x, int64_t d, int64_t stride, int64_t r0, int64_t nr, float *g) {
    for (int64_t r = 0; r < nr; r++)
        memcpy(g + r * d, x + (r0 + r) * stride * d, (size_t)d * sizeof(float));
}

lq_status lq_mixed_plan(const lq_model *m, const lq_mixed_opts *o, lq_fwd_ws *ws,
                        lq_mixed_result *out, lq_err *err) {
    const lq_model_config *cfg = &m->cfg;
    const int64_t          d = cfg->hidden_size, V = cfg->vocab_size, N = cfg->num_layers;
    const int64_t          T  = o->nseq * o->seqlen;
    const double           t0 = lq_now();
    memset(out, 0, sizeof *out);
    LQ_RETURN_IF(o->n_choices < 1 || o->n_choices > LQ_MIXED_MAX_CHOICES || T <= 0, err,
                 LQ_ERR_INVALID_ARG, "mixed precision: bad options");
    /* probe width: the widest whose uniform use fits the budget */
    out->probe_bits  = o->choices[0];
    out->probe_group = lq_mixed_choice_group(o, 0);
    for (int c = 0; c < o->n_choices; c++)
        if (lq_mixed_uniform_bpw(cfg, o->plan, o->choices[c], lq_mixed_choice_group(o, c)) <=
            o->target_bpw) {
            out->probe_bits  = o->choices[c];
            out->probe_group = lq_mixed_choice_group(o, c);
        }
    int64_t nu = 0;
    for (int u = 0; u < LQ_MIXED_UNITS; u++)
        nu += unit_params(cfg, o->plan, u) > 0;
    LQ_RETURN_IF(nu == 0, err, LQ_ERR_INVALID_ARG, "mixed precision: no unit to choose for");
    out->n_units = nu * N;
    out->units   = calloc((size_t)out->n_units, sizeof *out->units);
    /* KL on every stride-th token (the lm_head would otherwise cost as much as the layers);
     * logits in blocks of `rows` so that three [rows, V] buffers stay near 16 MiB each */
    const int64_t stride = T > LQ_MIXED_KL_TOKENS ? T / LQ_MIXED_KL_TOKENS : 1;
    const int64_t S      = (T + stride - 1) / stride;
    int64_t       rows   = ((int64_t)1 << 22) / (V > 0 ? V : 1);
    rows                 = rows < 1 ? 1 : rows > 64 ? 64 : rows;
    float    *h = lq_malloc_n(T * d, sizeof(float)), *ref = lq_malloc_n(T * d, sizeof(float));
    float    *y = lq_malloc_n(nu * T * d, sizeof(float)), *g = lq_malloc_n(rows * d, sizeof(float));
    float    *lr = lq_malloc_n(rows * V, sizeof(float)), *pr = lq_malloc_n(rows * V, sizeof(float));
    float    *lq = lq_malloc_n(rows * V, sizeof(float));
    err_ctx   ec;
    lq_status st = LQ_OK;
    memset(&ec, 0, sizeof ec);
    ec.o      = o;
    ec.err    = err;
    ec.y_rows = 256;
    if (!out->units || !h || !ref || !y || !g || !lr || !pr || !lq)
        LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "mixed precision: out of memory for %lld probe tokens",
                     (long long)T);
    for (int64_t i = 0, j = 0; i < N; i++)
        for (int u = 0; u < LQ_MIXED_UNITS; u++)
            if (unit_params(cfg, o->plan, u) > 0)
                out->units[j++] =
                    (lq_mixed_unit){i, u, unit_params(cfg, o->plan, u), 0, {0}, 0, 0, 0};
    /* the float model's last hidden states: the reference distribution */
    LQ_TRY_GOTO(lq_model_embed(m, o->ids, T, h, err));
    memcpy(ref, h, (size_t)(T * d) * sizeof(float));
    for (int64_t i = 0; i < N; i++) {
        lq_layer L;
        LQ_TRY_GOTO(lq_model_load_layer(m, i, &L, err));
        st = lq_layer_forward(m, &L, ref, o->nseq, o->seqlen, NULL, NULL, -1, ws, err);
        lq_layer_free(&L);
        LQ_TRY_GOTO(st);
    }
    for (int64_t i = 0; i < N; i++) {
        if (o->progress && o->progress(o->user, i, N))
            LQ_FAIL_GOTO(err, LQ_ERR_INTERRUPTED, "interrupted at layer %lld", (long long)i);
        lq_layer L;
        LQ_TRY_GOTO(lq_model_load_layer(m, i, &L, err));
        ec.L  = &L;
        int k = 0;
        for (int u = 0; u < LQ_MIXED_UNITS; u++) {
            ec.units[u] = NULL;
            if (unit_params(cfg, o->plan, u) > 0)
                ec.units[u] = &out->units[i * nu + k++];
        }
        /* each unit rounded alone, from the float layer input */
        for (int u = 0, yu = 0; u < LQ_MIXED_UNITS && st == LQ_OK; u++) {
            if (!ec.units[u])
                continue;
            float *yy = y + (int64_t)yu++ * T * d;
            memcpy(yy, h, (size_t)(T * d) * sizeof(float));
            float *saved[LQ_LIN_COUNT] = {0};
            for (int l = 0; l < LQ_LIN_COUNT && st == LQ_OK; l++) {
                if (!(lq_mixed_unit_lins(u) >> l & 1) || !o->plan[l] ||
                    !lq_lin_present(cfg, (lq_lin_id)l))
                    continue;
                float        *W = lq_linear_dense_mut(&L.lin[l]);
                const int64_t n = L.lin[l].buf.q.n, kk = L.lin[l].buf.q.k;
                if (!W || !(saved[l] = lq_malloc_n(n * kk, sizeof(float)))) {
                    st = lq_fail(err, LQ_ERR_NOMEM, "mixed precision: out of memory");
                    break;
                }
                memcpy(saved[l], W, (size_t)(n * kk) * sizeof(float));
                st = rtn_delta(saved[l], n, kk, out->probe_bits, out->probe_group, o, W, err);
                for (int64_t e = 0; st == LQ_OK && e < n * kk; e++)
                    W[e] += saved[l][e];
            }
            if (st == LQ_OK)
                st = lq_layer_forward(m, &L, yy, o->nseq, o->seqlen, NULL, NULL, -1, ws, err);
            for (int l = 0; l < LQ_LIN_COUNT; l++)
                if (saved[l]) {
                    memcpy(lq_linear_dense_mut(&L.lin[l]), saved[l],
                           (size_t)(L.lin[l].buf.q.n * L.lin[l].buf.q.k) * sizeof(float));
                    free(saved[l]);
                }
        }
        /* the float layer, capturing each unit's input for its output error */
        if (st == LQ_OK)
            st = lq_layer_forward(m, &L, h, o->nseq, o->seqlen, on_capture, &ec, -1, ws, err);
        lq_layer_free(&L);
        LQ_TRY_GOTO(st);
        /* the perturbed states through the float later layers */
        for (int64_t j = i + 1; j < N; j++) {
            lq_layer Lj;
            LQ_TRY_GOTO(lq_model_load_layer(m, j, &Lj, err));
            for (int64_t u = 0; u < nu && st == LQ_OK; u++)
                st = lq_layer_forward(m, &Lj, y + u * T * d, o->nseq, o->seqlen, NULL, NULL, -1, ws,
                                      err);
            lq_layer_free(&Lj);
            LQ_TRY_GOTO(st);
        }
        for (int64_t r0 = 0; r0 < S; r0 += rows) {
            const int64_t nr = S - r0 < rows ? S - r0 : rows;
            gather(ref, d, stride, r0, nr, g);
            LQ_TRY_GOTO(lq_model_logits(m, g, nr, lr, ws, err));
            log_softmax_rows(lr, nr, V);
            for (int64_t e = 0; e < nr * V; e++)
                pr[e] = expf(lr[e]);
            for (int64_t u = 0; u < nu; u++) {
                gather(y + u * T * d, d, stride, r0, nr, g);
                LQ_TRY_GOTO(lq_model_logits(m, g, nr, lq, ws, err));
                log_softmax_rows(lq, nr, V);
                out->units[i * nu + u].kl += kl_rows(lr, pr, lq, nr, V) / (double)S;
            }
        }
    }
    if (o->progress)
        o->progress(o->user, N, N);
    st           = lq_mixed_allocate(cfg, o, out, err);
    out->seconds = lq_now() - t0;
done:
    free(h), free(ref), free(y), free(g), free(lr), free(pr), free(lq);
    free(ec.dw), free(ec.y);
    if (st != LQ_OK)
        lq_mixed_result_free(out);
    return st;
}
