/* Perplexity protocols over token ids (see lq_ppl.h for the exact definitions and sources). */
#include "lq_ppl.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const k_protocols[LQ_PPL_PROTOCOL_COUNT] = {"gptq", "llamacpp"};

lq_status lq_ppl_protocol_parse(const char *name, lq_ppl_protocol *out, lq_err *err) {
    for (int i = 0; i < LQ_PPL_PROTOCOL_COUNT; i++)
        if (name && strcmp(name, k_protocols[i]) == 0) {
            *out = (lq_ppl_protocol)i;
            return LQ_OK;
        }
    LQ_FAIL(err, LQ_ERR_INVALID_ARG, "unknown perplexity protocol \"%s\" (gptq, llamacpp)",
            name ? name : "");
}

const char *lq_ppl_protocol_name(lq_ppl_protocol p) {
    return ((int)p >= 0 && p < LQ_PPL_PROTOCOL_COUNT) ? k_protocols[p] : "?";
}

int64_t lq_ppl_default_ctx(lq_ppl_protocol p, const lq_model_config *cfg) {
    const int64_t want = p == LQ_PPL_LLAMACPP ? 512 : 2048;
    return cfg->max_position_embeddings < want ? cfg->max_position_embeddings : want;
}

/* ---------------------------------------------------------------------------------------- */
typedef struct ppl_run {
    lq_model          *m;
    const lq_ppl_opts *o;
    lq_err            *err;
    lq_fwd_ws         *ws;
    float             *h;      /* [batch tokens, d] residual stream */
    int64_t            h_cap;  /* floats */
    float             *logits; /* [lrows, vocab] */
    int64_t            lrows;
    double             nll_sum;
    int64_t            scored, windows_done, windows_total, tokens_run;
    double             t0;
} ppl_run;

static lq_status progress(ppl_run *r, const char *detail) {
    const lq_callbacks *cb = r->o ? r->o->cb : NULL;
    if (!cb || !cb->progress)
        return LQ_OK;
    const double el = lq_now() - r->t0;
    lq_progress  p  = {.phase     = "ppl",
                       .step      = r->windows_done,
                       .total     = r->windows_total,
                       .elapsed_s = el,
                       .eta_s     = r->windows_done > 0 ? el / (double)r->windows_done *
                                                          (double)(r->windows_total - r->windows_done)
                                                    : -1.0,
                       .detail    = detail};
    if (cb->progress(&p, cb->user))
        LQ_FAIL(r->err, LQ_ERR_INTERRUPTED, "perplexity: cancelled after %lld of %lld windows",
                (long long)r->windows_done, (long long)r->windows_total);
    return LQ_OK;
}

/* -log softmax(row)[target] in double. */
static double row_nll(const float *row, int64_t V, int32_t target) {
    double mx = row[0];
    for (int64_t i = 1; i < V; i++)
        mx = row[i] > mx ? row[i] : mx;
    double s = 0;
    for (int64_t i = 0; i < V; i++)
        s += exp((double)row[i] - mx);
    return mx + log(s) - (double)row[target];
}

/* nb sequences of L tokens each (ids [nb * L] contiguous): forward, then score the predictions
 * made at positions first .. L-2. */
static lq_status run_batch(ppl_run *r, const int32_t *ids, int64_t nb, int64_t L, int64_t first) {
    lq_model     *m = r->m;
    const int64_t d = m->cfg.hidden_size, V = m->cfg.vocab_size, T = nb * L;
    lq_err       *err = r->err;
    if (r->h_cap < T * d) {
        lq_aligned_free(r->h);
        r->h_cap = 0;
        r->h     = lq_aligned_alloc((size_t)(T * d) * sizeof(float));
        LQ_RETURN_IF(!r->h, err, LQ_ERR_NOMEM,
                     "perplexity: out of memory for activations of %lld tokens", (long long)T);
        r->h_cap = T * d;
    }
    LQ_TRY(lq_model_embed(m, ids, T, r->h, err));
    for (int64_t l = 0; l < m->cfg.num_layers; l++) {
        if (m->layers) {
            LQ_TRY(lq_layer_forward(m, &m->layers[l], r->h, nb, L, NULL, NULL, -1, r->ws, err));
            continue;
        }
        lq_layer layer;
        LQ_TRY(lq_model_load_layer(m, l, &layer, err));
        lq_status st = lq_layer_forward(m, &layer, r->h, nb, L, NULL, NULL, -1, r->ws, err);
        lq_layer_free(&layer);
        LQ_TRY(st);
        char detail[64];
        snprintf(detail, sizeof detail, "model.layers.%lld", (long long)l);
        LQ_TRY(progress(r, detail));
    }
    for (int64_t b = 0; b < nb; b++) {
        const int32_t *seq = ids + b * L;
        for (int64_t r0 = first; r0 < L - 1; r0 += r->lrows) {
            const int64_t rows = L - 1 - r0 < r->lrows ? L - 1 - r0 : r->lrows;
            LQ_TRY(lq_model_logits(m, r->h + (b * L + r0) * d, rows, r->logits, r->ws, err));
            double    sum = 0;
            int64_t   bad = -1;
            const int nt  = r->o && r->o->nthreads > 0 ? r->o->nthreads : omp_get_max_threads();
#pragma omp parallel for reduction(+ : sum) reduction(max : bad) num_threads(nt) if (rows * V >= (1 << 16))
            for (int64_t j = 0; j < rows; j++) {
                const double v = row_nll(r->logits + j * V, V, seq[r0 + j + 1]);
                sum += v;
                if (!isfinite(v))
                    bad = r0 + j > bad ? r0 + j : bad;
            }
            LQ_RETURN_IF(bad >= 0, err, LQ_ERR_NUMERIC,
                         "%s: non-finite logits at position %lld of window %lld", m->dir,
                         (long long)bad, (long long)(r->windows_done + b));
            r->nll_sum += sum;
            r->scored += rows;
        }
    }
    r->windows_done += nb;
    r->tokens_run += T;
    return progress(r, NULL);
}

static lq_status run_init(ppl_run *r, lq_model *m, const lq_ppl_opts *o, int64_t max_len,
                          int64_t total_tokens, int64_t nwin, lq_err *err) {
    memset(r, 0, sizeof *r);
    r->m             = m;
    r->o             = o;
    r->err           = err;
    r->windows_total = nwin;
    r->t0            = lq_now();
    LQ_RETURN_IF(max_len > m->cfg.max_position_embeddings, err, LQ_ERR_INVALID_ARG,
                 "%s: window of %lld tokens over max_position_embeddings %lld", m->dir,
                 (long long)max_len, (long long)m->cfg.max_position_embeddings);
    /* chunks of a few thousand tokens keep every GEMM large while the workspace stays small */
    int64_t max_tokens = total_tokens < 4096 ? total_tokens : 4096;
    max_tokens         = max_tokens < max_len ? max_len : max_tokens;
    LQ_TRY(lq_fwd_ws_create(&m->cfg, max_tokens, max_len, &r->ws, err));
    lq_fwd_ws_set_threads(r->ws, o ? o->nthreads : 0);
    /* logits rows per block: <= 64 MiB of logits */
    const int64_t V = m->cfg.vocab_size;
    r->lrows        = ((int64_t)1 << 24) / V;
    r->lrows        = r->lrows < 1 ? 1 : r->lrows > max_len ? max_len : r->lrows;
    r->logits       = lq_aligned_alloc((size_t)(r->lrows * V) * sizeof(float));
    LQ_RETURN_IF(!r->logits, err, LQ_ERR_NOMEM, "perplexity: out of memory for logits");
    return LQ_OK;
}

static void run_free(ppl_run *r) {
    lq_fwd_ws_free(r->ws);
    lq_aligned_free(r->h);
    lq_aligned_free(r->logits);
}

static void run_result(const ppl_run *r, int64_t ctx, lq_ppl_result *res) {
    res->tokens_scored = r->scored;
    res->windows       = r->windows_done;
    res->ctx           = ctx;
    res->tokens_run    = r->tokens_run;
    res->nll           = r->scored ? r->nll_sum / (double)r->scored : NAN;
    res->ppl           = exp(res->nll);
    res->seconds       = lq_now() - r->t0;
}

/* Windows per batch: a workspace chunk's worth with all layers resident; with layers streamed,
 * as many as the activation budget holds, so each layer is loaded once per batch. */
static int64_t batch_windows(const ppl_run *r, int64_t L) {
    int64_t nb;
    if (r->m->layers) {
        nb = lq_fwd_ws_max_tokens(r->ws) / L;
    } else {
        const int64_t budget = r->o && r->o->max_act_bytes > 0 ? r->o->max_act_bytes
                                                                 : (int64_t)1 << 30;
        nb = budget / (L * r->m->cfg.hidden_size * (int64_t)sizeof(float));
    }
    return nb < 1 ? 1 : nb;
}

lq_status lq_ppl_tokens(lq_model *m, const int32_t *ids, int64_t n, const lq_ppl_opts *o,
                        lq_ppl_result *res, lq_err *err) {
    memset(res, 0, sizeof *res);
    const lq_ppl_protocol p   = o ? o->protocol : LQ_PPL_GPTQ;
    const int64_t         ctx = o && o->ctx > 0 ? o->ctx : lq_ppl_default_ctx(p, &m->cfg);
    LQ_RETURN_IF((int)p < 0 || p >= LQ_PPL_PROTOCOL_COUNT, err, LQ_ERR_INVALID_ARG,
                 "perplexity: bad protocol %d", (int)p);
    LQ_RETURN_IF(ctx < 2, err, LQ_ERR_INVALID_ARG, "perplexity: ctx %lld < 2", (long long)ctx);
    const int64_t need = p == LQ_PPL_LLAMACPP ? 2 * ctx : ctx;
    LQ_RETURN_IF(n < need, err, LQ_ERR_CALIB_EMPTY,
                 "perplexity: the text has %lld tokens; the %s protocol with ctx %lld needs at "
                 "least %lld",
                 (long long)n, lq_ppl_protocol_name(p), (long long)ctx, (long long)need);
    const int64_t nwin  = n / ctx;
    const int64_t first = p == LQ_PPL_LLAMACPP ? ctx / 2 : 0;
    ppl_run       r;
    lq_status     st = run_init(&r, m, o, ctx, nwin * ctx, nwin, err);
    int32_t      *buf = NULL;
    if (st == LQ_OK) {
        const int64_t nb = batch_windows(&r, ctx);
        if (p == LQ_PPL_LLAMACPP && o && o->bos_id >= 0) {
            buf = lq_malloc_n(nb * ctx, sizeof(int32_t));
            if (!buf)
                st = lq_fail(err, LQ_ERR_NOMEM, "perplexity: out of memory");
        }
        for (int64_t w0 = 0; st == LQ_OK && w0 < nwin; w0 += nb) {
            const int64_t  k   = nwin - w0 < nb ? nwin - w0 : nb;
            const int32_t *win = ids + w0 * ctx;
            if (buf) { /* llama-perplexity: tokens[batch_start] = BOS in every chunk */
                memcpy(buf, win, (size_t)(k * ctx) * sizeof(int32_t));
                for (int64_t i = 0; i < k; i++)
                    buf[i * ctx] = o->bos_id;
                win = buf;
            }
            st = run_batch(&r, win, k, ctx, first);
        }
    }
    if (st == LQ_OK)
        run_result(&r, ctx, res);
    free(buf);
    run_free(&r);
    return st;
}

lq_status lq_ppl_sequences(lq_model *m, const int32_t *const *seqs, const int64_t *lens,
                           int64_t nseqs, int64_t first, const lq_ppl_opts *o,
                           lq_ppl_result *res, lq_err *err) {
    memset(res, 0, sizeof *res);
    int64_t maxlen = 0, total = 0;
    for (int64_t i = 0; i < nseqs; i++) {
        LQ_RETURN_IF(lens[i] < 1, err, LQ_ERR_INVALID_ARG, "perplexity: sequence %lld is empty",
                     (long long)i);
        maxlen = lens[i] > maxlen ? lens[i] : maxlen;
        total += lens[i];
    }
    LQ_RETURN_IF(first < 0 || maxlen < first + 2, err, LQ_ERR_CALIB_EMPTY,
                 "perplexity: no sequence is long enough to score (longest %lld tokens, scoring "
                 "starts at %lld)",
                 (long long)maxlen, (long long)first);
    ppl_run   r;
    lq_status st = run_init(&r, m, o, maxlen, total, nseqs, err);
    for (int64_t i = 0; st == LQ_OK && i < nseqs; i++)
        if (lens[i] >= first + 2)
            st = run_batch(&r, seqs[i], 1, lens[i], first);
        else
            r.windows_done++; /* nothing to score */
    if (st == LQ_OK)
        run_result(&r, maxlen, res);
    run_free(&r);
    return st;
}
