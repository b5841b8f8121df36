/* Perplexity: the protocols of lq_ppl.h over token ids, and the public lq_perplexity job. */
#include "lq_ppl.h"

#include "lq_dataset.h"
#include "lq_gpu.h"
#include "lq_opts.h"
#include "lq_tok.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *const k_protocols[LQ_PPL_PROTOCOL_COUNT] = {"gptq", "llamacpp", "docs"};

lq_status lq_ppl_protocol_parse(const char *name, int *protocol, lq_err *err) {
    for (int i = 0; i < LQ_PPL_PROTOCOL_COUNT; i++)
        if (name && strcmp(name, k_protocols[i]) == 0) {
            *protocol = i;
            return LQ_OK;
        }
    LQ_FAIL(err, LQ_ERR_INVALID_ARG, "unknown perplexity protocol \"%s\" (gptq, llamacpp, docs)",
            name ? name : "");
}

const char *lq_ppl_protocol_name(int p) {
    return (p >= 0 && p < LQ_PPL_PROTOCOL_COUNT) ? k_protocols[p] : "?";
}

int64_t lq_ppl_default_ctx(const lq_model_config *c, int protocol) {
    const int64_t want = protocol == LQ_PPL_LLAMACPP ? 512 : 2048;
    return c->max_position_embeddings < want ? c->max_position_embeddings : want;
}

/* ---------------------------------------------------------------------------------------- */
/* The engine: batches of equal-length sequences through every layer, then logits of the     */
/* scored rows in blocks, -log softmax[target] summed in double.                              */
/* ---------------------------------------------------------------------------------------- */
typedef struct ppl_run {
    lq_model          *m;
    const lq_ppl_opts *o;
    lq_ppl_exec        ex;
    lq_err            *err;
    lq_fwd_ws         *ws;
    float             *h;      /* [batch tokens, d] residual stream */
    int64_t            h_cap;  /* floats */
    float             *logits; /* [lrows, vocab] */
    int64_t            lrows;
    int                nthreads;
    double             nll_sum;
    int64_t            scored, windows_done, windows_total, tokens_run;
    double             t0;
} ppl_run;

static lq_status progress(ppl_run *r, const char *detail) {
    const lq_callbacks *cb = r->o ? r->o->cb : NULL;
    if (!cb || !cb->progress)
        return LQ_OK;
    const double el   = lq_now() - r->t0;
    const double done = (double)r->windows_done;
    lq_progress  p    = {.phase     = "ppl",
                         .step      = r->windows_done,
                         .total     = r->windows_total,
                         .elapsed_s = el,
                         .eta_s     = done > 0 && r->windows_total > 0
                                          ? el / done * (double)(r->windows_total - r->windows_done)
                                          : -1.0,
                         .detail    = detail};
    if (cb->progress(&p, cb->user))
        LQ_FAIL(r->err, LQ_ERR_INTERRUPTED, "perplexity: cancelled after %lld windows",
                (long long)r->windows_done);
    return LQ_OK;
}

/* -log softmax(row)[target], in double. */
static double row_nll(const float *row, int64_t V, int32_t target) {
    double mx = row[0];
    for (int64_t i = 1; i < V; i++)
        mx = row[i] > mx ? row[i] : mx;
    double s = 0;
    for (int64_t i = 0; i < V; i++)
        s += exp((double)row[i] - mx);
    return mx + log(s) - (double)row[target];
}

/* nb sequences of L tokens (ids [nb * L] contiguous): forward, then score the predictions made
 * at positions first .. L-2. */
static lq_status run_batch(ppl_run *r, const int32_t *ids, int64_t nb, int64_t L, int64_t first) {
    lq_model     *m = r->m;
    const int64_t d = m->cfg.hidden_size, V = m->cfg.vocab_size, T = nb * L;
    lq_err       *err = r->err;
    if (r->h_cap < T * d) {
        lq_aligned_free(r->h);
        r->h_cap = 0;
        r->h     = lq_aligned_alloc((size_t)(T * d) * sizeof(float));
        LQ_RETURN_IF(!r->h, err, LQ_ERR_NOMEM,
                     "perplexity: out of memory for the activations of %lld tokens", (long long)T);
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
        const lq_status st = lq_layer_forward(m, &layer, r->h, nb, L, NULL, NULL, -1, r->ws, err);
        lq_layer_free(&layer);
        LQ_TRY(st);
        char detail[64];
        snprintf(detail, sizeof detail, "model.layers.%lld", (long long)l);
        LQ_TRY(progress(r, detail)); /* streamed batches are long: keep cancel responsive */
    }
    for (int64_t b = 0; b < nb; b++) {
        const int32_t *seq = ids + b * L;
        for (int64_t r0 = first; r0 < L - 1; r0 += r->lrows) {
            const int64_t rows = L - 1 - r0 < r->lrows ? L - 1 - r0 : r->lrows;
            LQ_TRY(lq_model_logits(m, r->h + (b * L + r0) * d, rows, r->logits, r->ws, err));
            double       sum = 0;
            int64_t      bad = -1;
            const float *lg  = r->logits;
#pragma omp parallel for reduction(+ : sum) reduction(max : bad) num_threads(r->nthreads) \
    if (rows * V >= (1 << 18))
            for (int64_t j = 0; j < rows; j++) {
                const double v = row_nll(lg + j * V, V, seq[r0 + j + 1]);
                sum += v;
                if (!isfinite(v))
                    bad = r0 + j > bad ? r0 + j : bad;
            }
            LQ_RETURN_IF(bad >= 0, err, LQ_ERR_NUMERIC,
                         "%s: NaN/Inf logits at position %lld of window %lld", m->dir,
                         (long long)bad, (long long)(r->windows_done + b));
            r->nll_sum += sum;
            r->scored += rows;
        }
    }
    r->windows_done += nb;
    r->tokens_run += T;
    return progress(r, NULL);
}

static lq_status run_init(ppl_run *r, lq_model *m, const lq_ppl_opts *o, const lq_ppl_exec *ex,
                          int64_t max_len, int64_t total_tokens, int64_t nwin, lq_err *err) {
    memset(r, 0, sizeof *r);
    r->m = m;
    r->o = o;
    if (ex)
        r->ex = *ex;
    r->err           = err;
    r->windows_total = nwin;
    r->nthreads      = r->ex.nthreads > 0 ? r->ex.nthreads : omp_get_max_threads();
    r->t0            = lq_now();
    /* chunks of a few thousand tokens keep every GEMM wide while the workspace stays small */
    int64_t max_tokens = total_tokens < 4096 ? total_tokens : 4096;
    max_tokens         = max_tokens < max_len ? max_len : max_tokens;
    LQ_TRY(lq_fwd_ws_create(&m->cfg, max_tokens, max_len, &r->ws, err));
    lq_fwd_ws_set_threads(r->ws, r->nthreads);
    lq_fwd_ws_set_kernel_flags(r->ws, o->kernel_flags);
    if (r->ex.lin_dev)
        lq_fwd_ws_set_linear_dev(r->ws, r->ex.lin_dev, r->ex.lin_dev_user);
    /* logits in blocks of <= 64 MiB */
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

static void run_result(const ppl_run *r, int64_t ctx, int64_t tokens, lq_ppl_result *res) {
    res->tokens        = tokens;
    res->tokens_scored = r->scored;
    res->windows       = r->windows_done;
    res->ctx           = ctx;
    res->tokens_run    = r->tokens_run;
    res->nll           = r->scored ? r->nll_sum / (double)r->scored : NAN;
    res->ppl           = exp(res->nll);
    res->seconds       = lq_now() - r->t0;
    int64_t        nl, ne;
    const int64_t *cnt = r->ws ? lq_fwd_ws_expert_tokens(r->ws, &nl, &ne) : NULL;
    if (cnt && nl > 0 && ne > 0) {
        res->experts    = ne;
        res->expert_min = res->expert_max = cnt[0];
        for (int64_t i = 0; i < nl * ne; i++) {
            if (cnt[i] < res->expert_min) {
                res->expert_min       = cnt[i];
                res->expert_min_layer = i / ne;
                res->expert_min_id    = i % ne;
            }
            res->expert_max = cnt[i] > res->expert_max ? cnt[i] : res->expert_max;
            res->experts_unused += cnt[i] == 0;
        }
    }
}

/* The window a protocol runs must fit the model's context. */
static lq_status check_ctx(const lq_model *m, int64_t ctx, lq_err *err) {
    LQ_RETURN_IF(ctx < 2 || ctx > m->cfg.max_position_embeddings, err, LQ_ERR_INVALID_ARG,
                 "perplexity: window of %lld tokens outside [2, max_position_embeddings = %lld]",
                 (long long)ctx, (long long)m->cfg.max_position_embeddings);
    return LQ_OK;
}

/* One document / sequence of n ids: cut to ctx, all its next-token predictions scored; under 2
 * tokens it scores nothing (*used not counted). */
static lq_status run_sequence(ppl_run *r, const int32_t *ids, int64_t n, int64_t ctx,
                              int64_t *used) {
    const int64_t L = n < ctx ? n : ctx;
    if (L < 2)
        return LQ_OK;
    ++*used;
    return run_batch(r, ids, 1, L, 0);
}

/* Windows per batch: a workspace chunk's worth with all layers resident; with layers streamed,
 * as many as the activation budget holds, so each layer is loaded once per batch. */
static int64_t batch_windows(const ppl_run *r, int64_t L) {
    int64_t nb;
    if (r->m->layers) {
        nb = lq_fwd_ws_max_tokens(r->ws) / L;
    } else {
        const int64_t budget = r->ex.max_act_bytes > 0 ? r->ex.max_act_bytes : (int64_t)1 << 30;
        nb                   = budget / (L * r->m->cfg.hidden_size * (int64_t)sizeof(float));
    }
    return nb < 1 ? 1 : nb;
}

/* ---------------------------------------------------------------------------------------- */
/* Windows as the ids arrive: gptq / llamacpp windows are collected into a buffer of whole      */
/* windows and run a batch at a time, so the ids of a text never need to be held at once.        */
/* ---------------------------------------------------------------------------------------- */
typedef struct win_feed {
    ppl_run              r;
    int                  started; /* r initialised */
    int64_t              ctx, need, first, nb, max_windows;
    int32_t              bos; /* llamacpp: over each window's first id; -1 none */
    int32_t             *buf; /* [cap] ids of whole windows not run yet */
    int64_t              nbuf, cap;
    int64_t              seen;      /* ids received */
    int64_t              est_total; /* windows expected, for progress (0 unknown) */
    const lq_tok_stream *ts;        /* the ids' source, and the size of its text, to estimate it */
    int64_t              file_bytes;
    int                  full; /* max_windows reached: the rest of the text is not needed */
} win_feed;

static lq_status feed_init(win_feed *f, lq_model *m, const lq_ppl_opts *o, const lq_ppl_exec *ex,
                           lq_err *err) {
    memset(f, 0, sizeof *f);
    const int p = o ? o->protocol : LQ_PPL_GPTQ;
    LQ_RETURN_IF(p != LQ_PPL_GPTQ && p != LQ_PPL_LLAMACPP, err, LQ_ERR_INVALID_ARG,
                 "perplexity: protocol %s does not window a token stream (gptq, llamacpp)",
                 lq_ppl_protocol_name(p));
    f->ctx = o && o->ctx > 0 ? o->ctx : lq_ppl_default_ctx(&m->cfg, p);
    LQ_TRY(check_ctx(m, f->ctx, err));
    f->need             = p == LQ_PPL_LLAMACPP ? 2 * f->ctx : f->ctx;
    f->first            = p == LQ_PPL_LLAMACPP ? f->ctx / 2 : 0;
    f->bos              = p == LQ_PPL_LLAMACPP && o && o->bos >= 0 ? o->bos : -1;
    f->max_windows      = o && o->max_windows > 0 ? o->max_windows : 0;
    const int64_t total = f->max_windows ? f->max_windows * f->ctx : (int64_t)1 << 40;
    LQ_TRY(run_init(&f->r, m, o, ex, f->ctx, total, f->max_windows, err));
    f->started = 1;
    f->nb      = batch_windows(&f->r, f->ctx);
    /* whole windows only; room for the `need` ids that must be seen before anything runs */
    const int64_t wins = f->nb > f->need / f->ctx ? f->nb : f->need / f->ctx;
    f->cap             = wins * f->ctx;
    f->buf             = lq_malloc_n(f->cap, sizeof(int32_t));
    LQ_RETURN_IF(!f->buf, err, LQ_ERR_NOMEM, "perplexity: out of memory for %lld token ids",
                 (long long)f->cap);
    return LQ_OK;
}

/* Run the whole windows buffered (at most max_windows in all), nb at a time. */
static lq_status feed_run(win_feed *f) {
    if (f->ts && f->file_bytes > 0) { /* ids so far per byte of text encoded */
        const lq_tok_stream_stats st = lq_tok_stream_get_stats(f->ts);
        if (st.text_bytes > 0)
            f->est_total = (int64_t)((double)st.ids * (double)f->file_bytes /
                                     (double)st.text_bytes / (double)f->ctx);
    }
    int64_t w = f->nbuf / f->ctx;
    if (f->max_windows && w > f->max_windows - f->r.windows_done)
        w = f->max_windows - f->r.windows_done;
    if (f->est_total > 0 || f->max_windows)
        f->r.windows_total = f->max_windows                         ? f->max_windows
                             : f->est_total > f->r.windows_done + w ? f->est_total
                                                                    : f->r.windows_done + w;
    for (int64_t w0 = 0; w0 < w; w0 += f->nb) {
        const int64_t k   = w - w0 < f->nb ? w - w0 : f->nb;
        int32_t      *win = f->buf + w0 * f->ctx;
        if (f->bos >= 0) /* llama-perplexity: tokens[batch_start] = BOS in every chunk */
            for (int64_t i = 0; i < k; i++)
                win[i * f->ctx] = f->bos;
        LQ_TRY(run_batch(&f->r, win, k, f->ctx, f->first));
    }
    f->full            = f->max_windows && f->r.windows_done >= f->max_windows;
    const int64_t used = (f->nbuf / f->ctx) * f->ctx;
    memmove(f->buf, f->buf + used, (size_t)(f->nbuf - used) * sizeof *f->buf);
    f->nbuf -= used;
    return LQ_OK;
}

static lq_status feed_ids(void *user, const int32_t *ids, int64_t n, lq_err *err) {
    win_feed *f = user;
    (void)err;
    for (int64_t i = 0; i < n && !f->full;) {
        const int64_t k = n - i < f->cap - f->nbuf ? n - i : f->cap - f->nbuf;
        memcpy(f->buf + f->nbuf, ids + i, (size_t)k * sizeof *ids);
        f->nbuf += k;
        f->seen += k;
        i += k;
        if (f->nbuf == f->cap) /* cap >= need: a full buffer has seen enough to run */
            LQ_TRY(feed_run(f));
    }
    return LQ_OK;
}

/* The end of the stream: the text's last whole windows, the tail dropped. */
static lq_status feed_finish(win_feed *f, lq_ppl_result *res, lq_err *err) {
    const int p = f->first ? LQ_PPL_LLAMACPP : LQ_PPL_GPTQ;
    LQ_RETURN_IF(f->seen < f->need && !f->r.windows_done, err, LQ_ERR_CALIB_EMPTY,
                 "perplexity: the text has %lld tokens; the %s protocol with ctx %lld needs at "
                 "least %lld",
                 (long long)f->seen, lq_ppl_protocol_name(p), (long long)f->ctx,
                 (long long)f->need);
    if (!f->full) {
        f->est_total       = 0;
        int64_t w          = f->r.windows_done + f->nbuf / f->ctx;
        f->r.windows_total = f->max_windows && f->max_windows < w ? f->max_windows : w;
        LQ_TRY(feed_run(f));
    }
    run_result(&f->r, f->ctx, f->seen, res);
    return LQ_OK;
}

static void feed_free(win_feed *f) {
    if (f->started)
        run_free(&f->r);
    free(f->buf);
}

lq_status lq_ppl_tokens(lq_model *m, const int32_t *ids, int64_t n, const lq_ppl_opts *o,
                        lq_ppl_result *res, lq_err *err) {
    return lq_ppl_tokens_ex(m, ids, n, o, NULL, res, err);
}

lq_status lq_ppl_tokens_ex(lq_model *m, const int32_t *ids, int64_t n, const lq_ppl_opts *o,
                           const lq_ppl_exec *ex, lq_ppl_result *res, lq_err *err) {
    memset(res, 0, sizeof *res);
    win_feed  f;
    lq_status st = feed_init(&f, m, o, ex, err);
    if (st == LQ_OK)
        st = feed_ids(&f, ids, n, err);
    if (st == LQ_OK)
        st = feed_finish(&f, res, err);
    feed_free(&f);
    return st;
}

lq_status lq_ppl_sequences(lq_model *m, const int32_t *ids, const int64_t *off, int64_t nseq,
                           const lq_ppl_opts *o, lq_ppl_result *res, lq_err *err) {
    return lq_ppl_sequences_ex(m, ids, off, nseq, o, NULL, res, err);
}

static int64_t docs_ctx(const lq_model *m, const lq_ppl_opts *o) {
    return o && o->ctx > 0 ? o->ctx : lq_ppl_default_ctx(&m->cfg, LQ_PPL_DOCS);
}

lq_status lq_ppl_sequences_ex(lq_model *m, const int32_t *ids, const int64_t *off, int64_t nseq,
                              const lq_ppl_opts *o, const lq_ppl_exec *ex, lq_ppl_result *res,
                              lq_err *err) {
    memset(res, 0, sizeof *res);
    int64_t ctx = docs_ctx(m, o);
    LQ_TRY(check_ctx(m, ctx, err));
    int64_t maxlen = 0, total = 0, used = 0;
    for (int64_t i = 0; i < nseq; i++) {
        LQ_RETURN_IF(off[i + 1] < off[i], err, LQ_ERR_INVALID_ARG,
                     "perplexity: sequence offsets decrease at %lld", (long long)i);
        const int64_t L = off[i + 1] - off[i] < ctx ? off[i + 1] - off[i] : ctx;
        maxlen          = L > maxlen ? L : maxlen;
        total += L;
        used += L >= 2;
    }
    LQ_RETURN_IF(used == 0, err, LQ_ERR_CALIB_EMPTY,
                 "perplexity: none of the %lld documents has the 2 tokens needed to score one",
                 (long long)nseq);
    ppl_run   r;
    int64_t   ran = 0;
    lq_status st  = run_init(&r, m, o, ex, maxlen, total, used, err);
    for (int64_t i = 0; st == LQ_OK && i < nseq; i++)
        st = run_sequence(&r, ids + off[i], off[i + 1] - off[i], ctx, &ran);
    if (st == LQ_OK)
        run_result(&r, ctx, off[nseq], res);
    run_free(&r);
    return st;
}

/* ---------------------------------------------------------------------------------------- */
/* Public job                                                                                 */
/* ---------------------------------------------------------------------------------------- */

/* docs protocol as the text arrives: split at sep, each document stripped (Python str.strip
 * whitespace), encoded as [BOS +] doc, cut to ctx and scored. One document is held at a time. */
typedef struct doc_feed {
    ppl_run             r;
    int                 started;
    const lq_tokenizer *tok;
    const char         *sep, *label;
    int64_t             sl, ctx;
    char               *buf;          /* the document being read */
    int64_t             n, cap, scan; /* no separator starts before scan */
    int64_t             docs, used, tokens;
} doc_feed;

static lq_status doc_init(doc_feed *f, lq_model *m, const lq_tokenizer *tok, const char *sep,
                          const char *label, const lq_ppl_opts *o, const lq_ppl_exec *ex,
                          lq_err *err) {
    memset(f, 0, sizeof *f);
    f->tok   = tok;
    f->sep   = sep ? sep : "";
    f->sl    = (int64_t)strlen(f->sep);
    f->label = label;
    f->ctx   = docs_ctx(m, o);
    LQ_TRY(check_ctx(m, f->ctx, err));
    LQ_TRY(run_init(&f->r, m, o, ex, f->ctx, (int64_t)1 << 40, 0, err));
    f->started = 1;
    return LQ_OK;
}

static lq_status doc_score(doc_feed *f, const char *a, const char *b, lq_err *err) {
    while (a < b && lq_ascii_space(*a))
        a++;
    while (b > a && lq_ascii_space(b[-1]))
        b--;
    if (b == a)
        return LQ_OK;
    int32_t *ids = NULL;
    int64_t  nt  = 0;
    LQ_TRY(lq_tok_encode(f->tok, a, b - a, lq_tok_adds_bos(f->tok), &ids, &nt, err));
    f->docs++;
    f->tokens += nt;
    const lq_status st = run_sequence(&f->r, ids, nt, f->ctx, &f->used);
    free(ids);
    return st;
}

static lq_status doc_push(doc_feed *f, const char *s, int64_t n, lq_err *err) {
    LQ_RETURN_IF(f->n + n > LQ_TEXT_MAX_DOC_BYTES + f->sl, err, LQ_ERR_CALIB_FORMAT,
                 "%s: a document of more than %lld MiB (the docs protocol splits the text at "
                 "\"%s\")",
                 f->label, LQ_TEXT_MAX_DOC_BYTES >> 20, f->sep);
    if (f->n + n + 1 > f->cap) {
        int64_t nc = f->cap ? f->cap : 1 << 16;
        while (nc < f->n + n + 1)
            nc *= 2;
        char *nb = realloc(f->buf, (size_t)nc);
        LQ_RETURN_IF(!nb, err, LQ_ERR_NOMEM, "perplexity: out of memory");
        f->buf = nb;
        f->cap = nc;
    }
    memcpy(f->buf + f->n, s, (size_t)n);
    f->n += n;
    if (!f->sl)
        return LQ_OK;
    int64_t from = 0;
    for (int64_t i = f->scan; i + f->sl <= f->n; i++) {
        if (f->buf[i] != f->sep[0] || memcmp(f->buf + i, f->sep, (size_t)f->sl))
            continue;
        LQ_TRY(doc_score(f, f->buf + from, f->buf + i, err));
        from = i + f->sl;
        i    = from - 1;
    }
    memmove(f->buf, f->buf + from, (size_t)(f->n - from));
    f->n -= from;
    f->scan = f->n - f->sl + 1 > 0 ? f->n - f->sl + 1 : 0;
    return LQ_OK;
}

static lq_status doc_finish(doc_feed *f, lq_ppl_result *res, lq_err *err) {
    f->r.windows_total = f->used + 1; /* the last document, if it scores: progress completes */
    LQ_TRY(doc_score(f, f->buf, f->buf + f->n, err));
    LQ_RETURN_IF(f->used == 0, err, LQ_ERR_CALIB_EMPTY,
                 "perplexity: none of the %lld documents has the 2 tokens needed to score one",
                 (long long)f->docs);
    run_result(&f->r, f->ctx, f->tokens, res);
    return LQ_OK;
}

static void doc_free(doc_feed *f) {
    if (f->started)
        run_free(&f->r);
    free(f->buf);
}

/* The text reader's sink: pieces of text into the tokenizer stream (whose ids go to the
 * window feed) or the document splitter; progress estimated from the file size. */
typedef struct text_feed {
    lq_tok_stream *ts;
    win_feed      *wf;
    doc_feed      *df;
    int64_t        file_bytes; /* 0: unknown (compressed) */
    int64_t        bytes;
} text_feed;

static lq_status text_sink(void *user, const char *s, int64_t n, int *stop, lq_err *err) {
    text_feed *t = user;
    t->bytes += n;
    if (t->df) {
        LQ_TRY(doc_push(t->df, s, n, err));
        if (t->file_bytes > 0)
            t->df->r.windows_total =
                (int64_t)((double)t->df->used * (double)t->file_bytes / (double)t->bytes);
        return LQ_OK;
    }
    LQ_TRY(lq_tok_stream_push(t->ts, s, n, err));
    *stop = t->wf->full;
    return LQ_OK;
}

/* Bytes of all decoder layers if loaded dense, per_weight bytes a weight. */
static double dense_layer_bytes(const lq_model_config *c, double per_weight) {
    double per = 0;
    for (int l = 0; l < LQ_LIN_COUNT; l++) {
        int64_t n, k;
        lq_lin_shape(c, (lq_lin_id)l, &n, &k);
        per += lq_lin_present(c, (lq_lin_id)l) ? (double)n * (double)k * per_weight : 0;
    }
    for (int64_t j = 0; j < lq_moe_count(c); j++) { /* experts: most of a MoE model */
        int64_t n, k;
        char    leaf[128];
        lq_moe_lin(c, NULL, j, leaf, sizeof leaf, &n, &k, NULL);
        per += (double)n * (double)k * per_weight;
    }
    return per * (double)c->num_layers;
}

static void log_msg(const lq_callbacks *cb, lq_log_level lv, const char *fmt, ...) LQ_PRINTF(3, 4);
static void log_msg(const lq_callbacks *cb, lq_log_level lv, const char *fmt, ...) {
    if (!cb || !cb->log)
        return;
    char    buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    cb->log(lv, buf, cb->user);
}

lq_status lq_ppl_text(lq_model *m, const lq_tokenizer *tok, const char *data_file,
                      const lq_opts *op, lq_gpu *gpu, const lq_callbacks *cb, lq_ppl_result *r,
                      lq_ppl_text_info *info, lq_err *err) {
    lq_status   st = LQ_OK;
    lq_ppl_opts o  = {0};
    memset(info, 0, sizeof *info);
    memset(r, 0, sizeof *r);
    LQ_TRY(lq_ppl_protocol_parse(op->protocol, &o.protocol, err));
    o.ctx          = op->ctx;
    o.max_windows  = op->chunks;
    o.kernel_flags = (op->int_activations ? LQ_QLINEAR_INT_X : 0u) |
                     (op->bf16_activations ? LQ_QLINEAR_BF16_X : 0u) |
                     (op->f16_activations ? LQ_QLINEAR_F16_X : 0u);
    o.bos          = lq_tok_adds_bos(tok) ? lq_tok_bos_id(tok) : -1;
    o.cb           = cb;
    lq_ppl_exec ex = {.nthreads = (int)op->threads};
    if (gpu) {
        ex.lin_dev      = lq_gpu_qlinear;
        ex.lin_dev_user = gpu;
    }
    /* --max-memory: the text is tokenized a 64th of it at a time (tokenizing costs up to ~40
     * bytes per text byte), between 64 KiB and 8 MiB; streamed layers get a quarter for their
     * activations */
    const int64_t maxmem = op->max_memory;
    int64_t       part   = maxmem > 0 ? maxmem / 64 : (int64_t)8 << 20;
    part                 = part < (64 << 10) ? 64 << 10 : part > (8 << 20) ? 8 << 20 : part;
    if (maxmem > 0)
        ex.max_act_bytes = maxmem / 4;

    /* All layers resident when their dense copies fit in half the RAM (quantized layers are
     * mostly views into the mapping); otherwise each batch of windows streams the layers. On
     * the CPU, fp16 / bf16 weights stay 16-bit (the kernels convert them as they read). */
    const double t0    = lq_now();
    m->dense_as_stored = gpu == NULL;
    const int dt16 =
        !strcmp(m->cfg.torch_dtype, "float16") || !strcmp(m->cfg.torch_dtype, "bfloat16");
    const double per_w = m->dense_as_stored && dt16 ? 2.0 : 4.0;
    const double need  = m->format == LQ_FMT_DENSE ? dense_layer_bytes(&m->cfg, per_w) : 0;
    const double ram  = (double)lq_phys_mem_bytes();
    info->resident    = m->layers != NULL || ram <= 0 || need <= ram / 2;
    if (info->resident)
        LQ_TRY(lq_model_load_all(m, err));
    else
        log_msg(cb, LQ_LOG_INFO,
                "%s: %.1f GiB of dense layers over half the RAM: layers are streamed per batch "
                "of windows",
                m->dir, need / (1 << 30));
    info->load_seconds = lq_now() - t0;

    /* The text is read, tokenized and scored as it streams: windows run as their ids arrive
     * and nothing holds the whole text or all of its ids (--chunks stops the reading once its
     * windows are full). */
    win_feed    wf;
    doc_feed    df;
    text_feed   tf      = {0};
    int         wf_init = 0, df_init = 0;
    struct stat sb;
    if (!(lq_text_flags_from_path(data_file) & LQ_TEXT_ZSTD) && stat(data_file, &sb) == 0)
        tf.file_bytes = (int64_t)sb.st_size;
    if (o.protocol == LQ_PPL_DOCS) {
        df_init = 1;
        LQ_TRY_GOTO(
            doc_init(&df, m, tok, op->doc_separator, data_file, &o, &ex, err));
        tf.df = &df;
    } else {
        wf_init = 1;
        LQ_TRY_GOTO(feed_init(&wf, m, &o, &ex, err));
        tf.wf = &wf;
        LQ_TRY_GOTO(
            lq_tok_stream_create(tok, lq_tok_adds_bos(tok), part, feed_ids, &wf, &tf.ts, err));
        wf.ts         = tf.ts;
        wf.file_bytes = tf.file_bytes;
    }
    lq_text_stream_info ti;
    st                   = lq_text_stream_file(data_file, 0, part / 8, text_sink, &tf, &ti, err);
    info->text_bytes     = ti.len;
    info->text_truncated = ti.truncated || ti.stopped;
    if (st == LQ_OK && tf.ts && !ti.stopped)
        st = lq_tok_stream_finish(tf.ts, err);
    if (st == LQ_OK)
        st = tf.df ? doc_finish(&df, r, err) : feed_finish(&wf, r, err);
    if (st != LQ_OK && !strstr(err->msg, data_file))
        lq_err_prefix(err, "%s", data_file);
done:
    lq_tok_stream_free(tf.ts);
    if (wf_init)
        feed_free(&wf);
    if (df_init)
        doc_free(&df);
    return st;
}

lq_status lq_perplexity(const char *model_dir, const char *data_file, const lq_params *p,
                        const lq_callbacks *cb, char **report_json, lq_err *err) {
    if (report_json)
        *report_json = NULL;
    if (!model_dir || !data_file || !*model_dir || !*data_file)
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "lq_perplexity: model_dir and data_file are required");
    lq_model        *m   = NULL;
    lq_tokenizer    *tok = NULL;
    lq_status        st  = LQ_OK;
    const double     t0  = lq_now();
    lq_gpu          *gpu = NULL;
    lq_ppl_result    r;
    lq_ppl_text_info info;
    int              proto = LQ_PPL_GPTQ;
    lq_opts          op;
    lq_opts_read(p, &op);
    LQ_TRY(lq_ppl_protocol_parse(op.protocol, &proto, err));
    /* every format's linears have a row on the GPU (lq_gpu_qlinear); on the CPU fp16 / bf16
     * embeddings stay 16-bit like the layers (lq_ppl_text) */
    LQ_TRY_GOTO(lq_device_pick(op.device, 1, cb, &gpu, err));
    LQ_TRY_GOTO(lq_model_open_flags(model_dir, gpu ? 0u : LQ_MODEL_OPEN_STORED16, &m, err));
    const char *tp = op.tokenizer;
    LQ_TRY_GOTO(tp && *tp ? lq_tok_load_file(tp, &tok, err)
                          : lq_tok_load_source(m->src, &tok, err));
    const double open_s = lq_now() - t0;
    LQ_TRY_GOTO(lq_ppl_text(m, tok, data_file, &op, gpu, cb, &r, &info, err));
    const double load_s = open_s + info.load_seconds;
    if (report_json) {
        cJSON *j = cJSON_CreateObject();
        if (!j)
            LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "out of memory");
        cJSON_AddNumberToObject(j, "ppl", r.ppl);
        cJSON_AddNumberToObject(j, "nll", r.nll);
        cJSON_AddNumberToObject(j, "tokens", (double)r.tokens);
        cJSON_AddNumberToObject(j, "tokens_scored", (double)r.tokens_scored);
        cJSON_AddNumberToObject(j, "windows", (double)r.windows);
        if (op.chunks > 0)
            cJSON_AddNumberToObject(j, "max_windows", (double)op.chunks);
        cJSON_AddNumberToObject(j, "ctx", (double)r.ctx);
        cJSON_AddStringToObject(j, "protocol", lq_ppl_protocol_name(proto));
        if (op.int_activations)
            cJSON_AddBoolToObject(j, "int_activations", 1);
        if (op.bf16_activations)
            cJSON_AddBoolToObject(j, "bf16_activations", 1);
        if (op.f16_activations)
            cJSON_AddBoolToObject(j, "f16_activations", 1);
        cJSON_AddNumberToObject(j, "seconds", r.seconds);
        /* forward throughput: every token pushed through the model, scored or not */
        cJSON_AddNumberToObject(j, "tokens_per_second",
                                r.seconds > 0 ? (double)r.tokens_run / r.seconds : 0);
        cJSON_AddNumberToObject(j, "load_seconds", load_s);
        cJSON_AddStringToObject(j, "layers", info.resident ? "resident" : "streamed");
        cJSON_AddStringToObject(j, "format",
                                m->qcfg ? lq_qconfig_format_name(m->qcfg)
                                        : lq_qformat_get(m->format)->name);
        cJSON_AddStringToObject(j, "device", gpu ? lq_gpu_describe(gpu) : "cpu");
        cJSON_AddStringToObject(j, "model_dir", model_dir);
        cJSON_AddStringToObject(j, "data_file", data_file);
        cJSON_AddNumberToObject(j, "text_bytes", (double)info.text_bytes);
        cJSON_AddBoolToObject(j, "text_truncated", info.text_truncated);
        if (r.experts) { /* what the routers did with this text: a calibration set's coverage */
            cJSON *e = cJSON_AddObjectToObject(j, "expert_tokens");
            cJSON_AddNumberToObject(e, "experts", (double)(r.experts * m->cfg.num_layers));
            cJSON_AddNumberToObject(e, "min", (double)r.expert_min);
            cJSON_AddNumberToObject(e, "min_layer", (double)r.expert_min_layer);
            cJSON_AddNumberToObject(e, "min_expert", (double)r.expert_min_id);
            cJSON_AddNumberToObject(e, "max", (double)r.expert_max);
            cJSON_AddNumberToObject(e, "unused", (double)r.experts_unused);
        }
        cJSON_AddNumberToObject(j, "peak_rss_bytes", (double)lq_peak_rss_bytes());
        *report_json = cJSON_PrintUnformatted(j);
        cJSON_Delete(j);
        if (!*report_json)
            LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "out of memory");
    }
done:
    lq_tok_free(tok);
    lq_model_free(m);
    lq_gpu_close(gpu);
    return st;
}
