#include "lq_ppl.h"

#include "lq_dataset.h"
#include "lq_params_get.h"
#include "lq_tok.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int64_t lq_ppl_default_ctx(const lq_model_config *c, int protocol) {
    int64_t d = protocol == LQ_PPL_LLAMACPP ? 512 : 2048;
    return c->max_position_embeddings < d ? c->max_position_embeddings : d;
}

/* Sum of -log softmax(logits)[target] over rows [r0, r1) predicting ids[r+1]. */
static double nll_rows(const float *logits, int64_t V, const int32_t *tgt, int64_t r0,
                       int64_t r1) {
    double s = 0;
#pragma omp parallel for reduction(+ : s) schedule(static)
    for (int64_t r = r0; r < r1; r++) {
        const float *l  = logits + r * V;
        float        mx = l[0];
        for (int64_t j = 1; j < V; j++)
            mx = l[j] > mx ? l[j] : mx;
        double z = 0;
        for (int64_t j = 0; j < V; j++)
            z += exp((double)(l[j] - mx));
        s += log(z) + mx - l[tgt[r + 1]];
    }
    return s;
}

lq_status lq_ppl_tokens(lq_model *m, const int32_t *ids, int64_t n, const lq_ppl_opts *o,
                        lq_ppl_result *r, lq_err *err) {
    memset(r, 0, sizeof *r);
    double  t0  = lq_now();
    int64_t ctx = o->ctx > 0 ? o->ctx : lq_ppl_default_ctx(&m->cfg, o->protocol);
    if (ctx < 2 || ctx > m->cfg.max_position_embeddings)
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "perplexity window %lld outside [2, %lld]",
                (long long)ctx, (long long)m->cfg.max_position_embeddings);
    int64_t need = o->protocol == LQ_PPL_LLAMACPP ? 2 * ctx : ctx;
    if (n < need)
        LQ_FAIL(err, LQ_ERR_CALIB_EMPTY,
                "text has %lld tokens, the %s protocol needs at least %lld (ctx %lld)",
                (long long)n, o->protocol == LQ_PPL_LLAMACPP ? "llamacpp" : "gptq",
                (long long)need, (long long)ctx);
    if (o->protocol == LQ_PPL_LLAMACPP && o->bos < 0)
        LQ_FAIL(err, LQ_ERR_UNSUPPORTED, "the llamacpp protocol needs a tokenizer with BOS");
    LQ_TRY(lq_model_load_all(m, err));
    int64_t nwin = n / ctx, d = m->cfg.hidden_size, V = m->cfg.vocab_size;
    /* Several windows per forward keep the GEMMs wide; bounded to ~16k tokens of activations. */
    int64_t per = 16384 / ctx > 0 ? 16384 / ctx : 1;
    if (per > nwin)
        per = nwin;
    lq_fwd_ws *ws     = NULL;
    float     *h      = lq_malloc_n(per * ctx * d, sizeof(float));
    float     *logits = lq_malloc_n(ctx * V, sizeof(float));
    int32_t   *win    = lq_malloc_n(per * ctx, sizeof(int32_t));
    lq_status  st     = LQ_OK;
    if (!h || !logits || !win) {
        st = lq_fail(err, LQ_ERR_NOMEM, "out of memory for perplexity (%lld-token windows)",
                     (long long)ctx);
        goto done;
    }
    LQ_TRY_GOTO(lq_fwd_ws_create(&m->cfg, per * ctx, ctx, &ws, err));
    int64_t first = o->protocol == LQ_PPL_LLAMACPP ? ctx / 2 : 0;
    double  sum   = 0;
    int64_t cnt   = 0;
    for (int64_t w0 = 0; w0 < nwin; w0 += per) {
        int64_t nw = nwin - w0 < per ? nwin - w0 : per;
        memcpy(win, ids + w0 * ctx, (size_t)(nw * ctx) * sizeof(int32_t));
        if (o->protocol == LQ_PPL_LLAMACPP)
            for (int64_t w = 0; w < nw; w++)
                win[w * ctx] = o->bos;
        LQ_TRY_GOTO(lq_model_embed(m, win, nw * ctx, h, err));
        for (int64_t l = 0; l < m->cfg.num_layers; l++)
            LQ_TRY_GOTO(lq_layer_forward(m, &m->layers[l], h, nw, ctx, NULL, NULL, -1, ws, err));
        for (int64_t w = 0; w < nw; w++) {
            /* only rows that are scored need logits */
            LQ_TRY_GOTO(lq_model_logits(m, h + (w * ctx + first) * d, ctx - 1 - first,
                                        logits + first * V, ws, err));
            sum += nll_rows(logits, V, win + w * ctx, first, ctx - 1);
            cnt += ctx - 1 - first;
        }
        if (o->cb && o->cb->progress) {
            double       el = lq_now() - t0;
            int64_t      dn = w0 + nw;
            lq_progress  p  = {"ppl", dn, nwin, el, el / (double)dn * (double)(nwin - dn), NULL};
            if (o->cb->progress(&p, o->cb->user)) {
                st = lq_fail(err, LQ_ERR_INTERRUPTED, "perplexity interrupted");
                goto done;
            }
        }
    }
    r->nll           = sum / (double)cnt;
    r->ppl           = exp(r->nll);
    r->tokens        = n;
    r->tokens_scored = cnt;
    r->windows       = nwin;
    r->ctx           = ctx;
    r->seconds       = lq_now() - t0;
    if (!isfinite(r->nll))
        st = lq_fail(err, LQ_ERR_NUMERIC, "%s: perplexity is not finite", m->dir);
done:
    lq_fwd_ws_free(ws);
    free(h);
    free(logits);
    free(win);
    return st;
}

lq_status lq_ppl_sequences(lq_model *m, const int32_t *ids, const int64_t *off, int64_t nseq,
                           const lq_ppl_opts *o, lq_ppl_result *r, lq_err *err) {
    memset(r, 0, sizeof *r);
    double  t0  = lq_now();
    int64_t ctx = o->ctx > 0 ? o->ctx : lq_ppl_default_ctx(&m->cfg, LQ_PPL_GPTQ);
    if (ctx > m->cfg.max_position_embeddings)
        ctx = m->cfg.max_position_embeddings;
    LQ_TRY(lq_model_load_all(m, err));
    int64_t    d = m->cfg.hidden_size, V = m->cfg.vocab_size;
    lq_fwd_ws *ws     = NULL;
    float     *h      = lq_malloc_n(ctx * d, sizeof(float));
    float     *logits = lq_malloc_n(ctx * V, sizeof(float));
    lq_status  st     = LQ_OK;
    double     sum    = 0;
    int64_t    cnt = 0, used = 0;
    if (!h || !logits) {
        st = lq_fail(err, LQ_ERR_NOMEM, "out of memory for perplexity");
        goto done;
    }
    LQ_TRY_GOTO(lq_fwd_ws_create(&m->cfg, ctx, ctx, &ws, err));
    for (int64_t i = 0; i < nseq; i++) {
        int64_t L = off[i + 1] - off[i];
        if (L > ctx)
            L = ctx;
        if (L < 2)
            continue;
        LQ_TRY_GOTO(lq_model_embed(m, ids + off[i], L, h, err));
        for (int64_t l = 0; l < m->cfg.num_layers; l++)
            LQ_TRY_GOTO(lq_layer_forward(m, &m->layers[l], h, 1, L, NULL, NULL, -1, ws, err));
        LQ_TRY_GOTO(lq_model_logits(m, h, L - 1, logits, ws, err));
        sum += nll_rows(logits, V, ids + off[i], 0, L - 1);
        cnt += L - 1;
        used++;
        if (o->cb && o->cb->progress) {
            double      el = lq_now() - t0;
            lq_progress p  = {"ppl", i + 1, nseq, el, el / (double)(i + 1) * (double)(nseq - i - 1),
                              NULL};
            if (o->cb->progress(&p, o->cb->user)) {
                st = lq_fail(err, LQ_ERR_INTERRUPTED, "perplexity interrupted");
                goto done;
            }
        }
    }
    if (cnt == 0) {
        st = lq_fail(err, LQ_ERR_CALIB_EMPTY, "no document with at least 2 tokens");
        goto done;
    }
    r->nll           = sum / (double)cnt;
    r->ppl           = exp(r->nll);
    r->tokens        = off[nseq];
    r->tokens_scored = cnt;
    r->windows       = used;
    r->ctx           = ctx;
    r->seconds       = lq_now() - t0;
    if (!isfinite(r->nll))
        st = lq_fail(err, LQ_ERR_NUMERIC, "%s: perplexity is not finite", m->dir);
done:
    lq_fwd_ws_free(ws);
    free(h);
    free(logits);
    return st;
}

/* Split at sep, strip (Python str.strip whitespace), encode BOS + doc. */
static lq_status encode_docs(const lq_tokenizer *tok, const char *text, int64_t len,
                             const char *sep, int32_t **ids_out, int64_t **off_out,
                             int64_t *ndocs, lq_err *err) {
    size_t   sl  = strlen(sep);
    int64_t  cap = 1024, n = 0, nd = 0, ocap = 64;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    int64_t *off = malloc((size_t)ocap * sizeof *off);
    if (!ids || !off) {
        free(ids);
        free(off);
        LQ_FAIL(err, LQ_ERR_NOMEM, "out of memory");
    }
    off[0]        = 0;
    const char *p = text, *end = text + len;
    while (p <= end) {
        const char *q = sl ? strstr(p, sep) : NULL;
        if (!q || q > end)
            q = end;
        const char *a = p, *b = q;
        while (a < b && strchr(" \t\n\r\f\v", *a))
            a++;
        while (b > a && strchr(" \t\n\r\f\v", b[-1]))
            b--;
        if (b > a) {
            int32_t  *t  = NULL;
            int64_t   nt = 0;
            lq_status s  = lq_tok_encode(tok, a, b - a, lq_tok_bos_id(tok) >= 0, &t, &nt, err);
            if (s != LQ_OK) {
                free(ids);
                free(off);
                return s;
            }
            if (n + nt > cap || nd + 2 > ocap) {
                while (n + nt > cap)
                    cap *= 2;
                while (nd + 2 > ocap)
                    ocap *= 2;
                int32_t *ni = realloc(ids, (size_t)cap * sizeof *ids);
                int64_t *no = realloc(off, (size_t)ocap * sizeof *off);
                if (ni)
                    ids = ni;
                if (no)
                    off = no;
                if (!ni || !no) {
                    free(t);
                    free(ids);
                    free(off);
                    LQ_FAIL(err, LQ_ERR_NOMEM, "out of memory");
                }
            }
            memcpy(ids + n, t, (size_t)nt * sizeof *t);
            free(t);
            n += nt;
            off[++nd] = n;
        }
        if (q == end)
            break;
        p = q + sl;
    }
    *ids_out = ids;
    *off_out = off;
    *ndocs   = nd;
    return LQ_OK;
}

/* ------------------------------------------------------------------------------------------
 * Public job: lq_perplexity
 * ------------------------------------------------------------------------------------------ */
lq_status lq_perplexity(const char *model_dir, const char *data_file, const lq_params *p,
                        const lq_callbacks *cb, char **report_json, lq_err *err) {
    if (report_json)
        *report_json = NULL;
    if (!model_dir || !data_file)
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "lq_perplexity: model_dir and data_file are required");
    lq_model     *m   = NULL;
    lq_tokenizer *tok = NULL;
    lq_text       txt = {0};
    int32_t      *ids = NULL;
    int64_t       nid = 0;
    lq_status     st  = LQ_OK;
    LQ_TRY_GOTO(lq_model_open(model_dir, &m, err));
    const char *tp = lq_params_get(p, "tokenizer");
    LQ_TRY_GOTO(tp && *tp ? lq_tok_load_file(tp, &tok, err) : lq_tok_load_dir(model_dir, &tok, err));
    LQ_TRY_GOTO(lq_text_read_file(data_file, 0, &txt, err));
    const char *proto = lq_params_get(p, "protocol");
    lq_ppl_opts o     = {0};
    o.protocol        = (proto && !strcmp(proto, "llamacpp")) ? LQ_PPL_LLAMACPP
                        : (proto && !strcmp(proto, "docs")) ? LQ_PPL_DOCS
                                                            : LQ_PPL_GPTQ;
    o.ctx             = lq_params_i64(p, "ctx");
    o.bos             = lq_tok_bos_id(tok);
    o.cb              = cb;
    /* gptq: BOS once if the tokenizer adds it; llamacpp tokenizes with BOS too (replaced per
     * chunk anyway). */
    lq_ppl_result r;
    if (o.protocol == LQ_PPL_DOCS) {
        int64_t *off = NULL, nd = 0;
        LQ_TRY_GOTO(encode_docs(tok, txt.data, txt.len, lq_params_get(p, "doc_separator"), &ids,
                                &off, &nd, err));
        st = lq_ppl_sequences(m, ids, off, nd, &o, &r, err);
        free(off);
    } else {
        LQ_TRY_GOTO(lq_tok_encode(tok, txt.data, txt.len, lq_tok_adds_bos(tok), &ids, &nid, err));
        st = lq_ppl_tokens(m, ids, nid, &o, &r, err);
    }
    if (st != LQ_OK) {
        lq_err_prefix(err, "%s", data_file);
        goto done;
    }
    if (report_json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "model_dir", model_dir);
        cJSON_AddStringToObject(j, "data_file", data_file);
        cJSON_AddStringToObject(j, "protocol", proto ? proto : "gptq");
        cJSON_AddNumberToObject(j, "ctx", (double)r.ctx);
        cJSON_AddNumberToObject(j, "ppl", r.ppl);
        cJSON_AddNumberToObject(j, "nll", r.nll);
        cJSON_AddNumberToObject(j, "tokens", (double)r.tokens);
        cJSON_AddNumberToObject(j, "tokens_scored", (double)r.tokens_scored);
        cJSON_AddNumberToObject(j, "windows", (double)r.windows);
        cJSON_AddNumberToObject(j, "seconds", r.seconds);
        cJSON_AddNumberToObject(j, "tokens_per_second",
                                r.seconds > 0 ? (double)r.tokens_scored / r.seconds : 0);
        cJSON_AddStringToObject(j, "format", lq_format_traits_get(m->format)->name);
        *report_json = cJSON_PrintUnformatted(j);
        cJSON_Delete(j);
    }
done:
    free(ids);
    lq_text_free(&txt);
    lq_tok_free(tok);
    lq_model_free(m);
    return st;
}
