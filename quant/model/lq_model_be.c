/* A decoder layer on a backend of the op table (lq_model.h: lq_layer_to_be). */
#include "lq_model.h"

#include "lq_ops.h"

#include <stdlib.h>
#include <string.h>

static lq_status keep(lq_layer_be *d, void *p, size_t bytes) {
    if (d->nmem == d->cap) {
        const int64_t cap = d->cap ? 2 * d->cap : 32;
        void        **m   = realloc(d->mem, (size_t)cap * sizeof *m);
        if (m)
            d->mem = m;
        size_t *b = realloc(d->bytes, (size_t)cap * sizeof *b);
        if (b)
            d->bytes = b;
        if (!m || !b)
            return LQ_ERR_NOMEM;
        d->cap = cap;
    }
    d->mem[d->nmem]   = p;
    d->bytes[d->nmem] = bytes;
    d->nmem++;
    return LQ_OK;
}

/* n floats of host v on the backend (NULL stays NULL) */
static lq_status put_vec(lq_layer_be *d, const float *v, int64_t n, float **out, lq_err *err) {
    *out = NULL;
    if (!v)
        return LQ_OK;
    lq_be       *be = d->be;
    void        *p  = NULL;
    const size_t b  = (size_t)n * sizeof(float);
    lq_status    st = be->ops->alloc(be, &p, b);
    if (st == LQ_OK && (st = keep(d, p, b)) != LQ_OK)
        be->ops->release(be, p, b);
    if (st == LQ_OK)
        st = be->ops->upload(be, p, v, b);
    if (st != LQ_OK)
        return lq_fail(err, st, "putting a layer on the %s backend: %s", be->ops->name,
                       lq_be_error(be));
    *out = p;
    return LQ_OK;
}

static lq_status put_linear(lq_layer_be *d, const lq_linear *h, lq_linear *o, lq_err *err) {
    memset(o, 0, sizeof *o);
    if (!h->buf.q.format && !h->buf.q.dense)
        return LQ_OK; /* absent */
    lq_be    *be  = d->be;
    void     *mem = NULL;
    size_t    b   = 0;
    lq_status st  = be->ops->linear_upload(be, &h->buf.q, &o->buf.q, &mem, &b);
    if (st == LQ_OK && mem && (st = keep(d, mem, b)) != LQ_OK)
        be->ops->release(be, mem, b);
    if (st != LQ_OK)
        return lq_fail(err, st, "putting a [%lld x %lld] linear on the %s backend: %s",
                       (long long)h->buf.q.n, (long long)h->buf.q.k, be->ops->name,
                       lq_be_error(be));
    return put_vec(d, h->bias, h->buf.q.n, &o->bias, err);
}

lq_status lq_layer_to_be(lq_be *be, const lq_model_config *cfg, const lq_layer *host,
                         lq_layer_be *out, lq_err *err) {
    memset(out, 0, sizeof *out);
    out->be = be;
    if (!be->ops->device) { /* the host layer itself */
        out->L = *host;
        return LQ_OK;
    }
    lq_layer *L = &out->L;
    L->idx      = host->idx;
    lq_status st = LQ_OK;
    /* the norm vectors, as the family names them */
    lq_layer_vec hv[LQ_LAYER_MAX_VECS], dv[LQ_LAYER_MAX_VECS];
    lq_layer     hc = *host; /* lq_layer_vecs hands out slots: of a copy, the host's stay put */
    const int    nv = lq_layer_vecs(cfg, &hc, hv);
    lq_layer_vecs(cfg, L, dv);
    for (int i = 0; i < nv && st == LQ_OK; i++)
        st = put_vec(out, *hv[i].slot, hv[i].len, dv[i].slot, err);
    for (int l = 0; l < LQ_LIN_COUNT && st == LQ_OK; l++)
        if (lq_lin_present(cfg, (lq_lin_id)l))
            st = put_linear(out, &host->lin[l], &L->lin[l], err);
    if (st == LQ_OK && host->n_experts > 0) {
        L->n_experts = host->n_experts;
        L->experts   = calloc((size_t)(3 * host->n_experts), sizeof *L->experts);
        if (!L->experts)
            st = lq_fail(err, LQ_ERR_NOMEM, "out of memory");
        if (st == LQ_OK)
            st = put_linear(out, &host->router, &L->router, err);
        for (int64_t e = 0; e < 3 * host->n_experts && st == LQ_OK; e++)
            st = put_linear(out, &host->experts[e], &L->experts[e], err);
        for (int s = 0; s < 4 && st == LQ_OK; s++)
            st = put_linear(out, &host->shared[s], &L->shared[s], err);
    }
    if (st == LQ_OK && be->ops->sync(be) != LQ_OK)
        st = lq_fail(err, LQ_ERR_CUDA, "putting a layer on the %s backend: %s", be->ops->name,
                     lq_be_error(be));
    if (st != LQ_OK)
        lq_layer_be_free(out);
    return st;
}

void lq_layer_be_free(lq_layer_be *d) {
    if (!d)
        return;
    for (int64_t i = 0; i < d->nmem; i++)
        d->be->ops->release(d->be, d->mem[i], d->bytes[i]);
    if (d->be && d->be->ops->device)
        free(d->L.experts);
    free(d->mem);
    free(d->bytes);
    memset(d, 0, sizeof *d);
}

/* Drops the allocation that starts at p from d's list (NULL: none). */
static void drop(lq_layer_be *d, const void *p) {
    for (int64_t i = 0; p && i < d->nmem; i++)
        if (d->mem[i] == p) {
            d->be->ops->release(d->be, d->mem[i], d->bytes[i]);
            d->mem[i]   = d->mem[d->nmem - 1];
            d->bytes[i] = d->bytes[d->nmem - 1];
            d->nmem--;
            return;
        }
}

lq_status lq_layer_be_update(lq_be *be, const lq_model_config *cfg, const lq_layer *host,
                             lq_layer_be *d, int64_t s, lq_err *err) {
    if (!be->ops->device)
        return LQ_OK;
    lq_layer   hc = *host;
    lq_linear *h = lq_layer_slot(&hc, s), *o = lq_layer_slot(&d->L, s);
    /* a dense linear's arrays are one allocation starting at the weights (linear_upload); the
     * layers methods rewrite are dense */
    LQ_RETURN_IF(o->buf.q.format != LQ_FMT_DENSE, err, LQ_ERR_UNSUPPORTED,
                 "updating a quantized linear on the %s backend", be->ops->name);
    drop(d, o->buf.q.dense);
    drop(d, o->bias);
    return put_linear(d, h, o, err);
}
