/* Calibration activations on a backend (lq_acts.h). */
#include "lq_acts.h"

#include <stdlib.h>
#include <string.h>

typedef struct chunk {
    float  *dev;   /* device memory, or NULL: in the spill */
    int64_t numel;
    int64_t spill; /* index in the spill (dev NULL) */
} chunk;

struct lq_acts {
    lq_be    *be;
    lq_spill *spill;
    int64_t   dev_budget, dev_bytes;
    chunk    *ch; /* device backends only */
    int64_t   n, cap;
    float    *stage; /* host staging of spilled chunks (device backends) */
    int64_t   stage_cap;
};

static int on_host(const lq_acts *a) {
    return !a->be->ops->device;
}

lq_status lq_acts_create(lq_be *be, int64_t dev_budget, int64_t host_budget, const char *tmp_dir,
                         lq_acts **out, lq_err *err) {
    *out       = NULL;
    lq_acts *a = calloc(1, sizeof *a);
    LQ_RETURN_IF(!a, err, LQ_ERR_NOMEM, "out of memory");
    a->be         = be;
    a->dev_budget = dev_budget;
    const lq_status st = lq_spill_create(host_budget, tmp_dir, &a->spill, err);
    if (st != LQ_OK) {
        free(a);
        return st;
    }
    *out = a;
    return LQ_OK;
}

static void release_dev(lq_acts *a) {
    for (int64_t i = 0; i < a->n; i++)
        if (a->ch[i].dev)
            a->be->ops->release(a->be, a->ch[i].dev, (size_t)a->ch[i].numel * sizeof(float));
    a->n         = 0;
    a->dev_bytes = 0;
}

void lq_acts_free(lq_acts *a) {
    if (!a)
        return;
    release_dev(a);
    lq_spill_free(a->spill);
    free(a->ch);
    free(a->stage);
    free(a);
}

int64_t lq_acts_count(const lq_acts *a) {
    return on_host(a) ? lq_spill_count(a->spill) : a->n;
}

int64_t lq_acts_numel(const lq_acts *a, int64_t i) {
    if (on_host(a))
        return lq_spill_chunk_numel(a->spill, i);
    return i >= 0 && i < a->n ? a->ch[i].numel : -1;
}

lq_spill *lq_acts_spill(lq_acts *a) {
    return a->spill;
}

static lq_status be_fail(lq_acts *a, lq_status st, const char *what, lq_err *err) {
    return lq_fail(err, st, "activations: %s on the %s backend: %s", what, a->be->ops->name,
                   lq_be_error(a->be));
}

static lq_status stage_grow(lq_acts *a, int64_t n, lq_err *err) {
    if (n <= a->stage_cap)
        return LQ_OK;
    free(a->stage);
    a->stage_cap = 0;
    a->stage     = lq_malloc_n(n, sizeof(float));
    LQ_RETURN_IF(!a->stage, err, LQ_ERR_NOMEM, "out of memory for an activation chunk");
    a->stage_cap = n;
    return LQ_OK;
}

/* The next chunk's slot on a device backend: device memory when it fits (dev NULL otherwise). */
static lq_status slot(lq_acts *a, int64_t n, chunk **c, lq_err *err) {
    if (a->n == a->cap) {
        const int64_t cap = a->cap ? 2 * a->cap : 64;
        chunk        *ch  = realloc(a->ch, (size_t)cap * sizeof *ch);
        LQ_RETURN_IF(!ch, err, LQ_ERR_NOMEM, "out of memory");
        a->ch  = ch;
        a->cap = cap;
    }
    *c          = &a->ch[a->n];
    (*c)->dev   = NULL;
    (*c)->numel = n;
    (*c)->spill = -1;
    const int64_t bytes = n * (int64_t)sizeof(float);
    if (a->dev_budget < 0 || a->dev_bytes + bytes <= a->dev_budget) {
        void     *p  = NULL;
        lq_status st = a->be->ops->alloc(a->be, &p, (size_t)bytes);
        if (st == LQ_OK) {
            (*c)->dev = p;
            a->dev_bytes += bytes;
        } else if (st != LQ_ERR_NOMEM) {
            return be_fail(a, st, "allocating a chunk", err);
        } /* the device is full: this chunk goes to the host */
    }
    if (!(*c)->dev)
        (*c)->spill = lq_spill_count(a->spill);
    return LQ_OK;
}

/* x [n] as the next chunk, from backend memory or (from_host) host memory */
static lq_status append(lq_acts *a, const float *x, int64_t n, int from_host, lq_err *err) {
    if (on_host(a))
        return lq_spill_append(a->spill, x, n, err);
    chunk *c = NULL;
    LQ_TRY(slot(a, n, &c, err));
    const size_t b = (size_t)n * sizeof(float);
    if (c->dev) {
        const lq_status st = from_host ? a->be->ops->upload(a->be, c->dev, x, b)
                                       : a->be->ops->copy(a->be, c->dev, x, b);
        if (st != LQ_OK)
            return be_fail(a, st, "storing a chunk", err);
    } else if (from_host) {
        LQ_TRY(lq_spill_append(a->spill, x, n, err));
    } else { /* a device's chunk that does not fit there: to the host spill */
        LQ_TRY(stage_grow(a, n, err));
        const lq_status st = a->be->ops->download(a->be, a->stage, x, b);
        if (st != LQ_OK)
            return be_fail(a, st, "reading a chunk back", err);
        LQ_TRY(lq_spill_append(a->spill, a->stage, n, err));
    }
    a->n++;
    return LQ_OK;
}

lq_status lq_acts_append(lq_acts *a, const float *x, int64_t n, lq_err *err) {
    return append(a, x, n, 0, err);
}

lq_status lq_acts_append_host(lq_acts *a, const float *x, int64_t n, lq_err *err) {
    return append(a, x, n, 1, err);
}

static lq_status check_index(const lq_acts *a, int64_t i, lq_err *err) {
    LQ_RETURN_IF(i < 0 || i >= a->n, err, LQ_ERR_INTERNAL,
                 "activations: chunk %lld of %lld read", (long long)i, (long long)a->n);
    return LQ_OK;
}

lq_status lq_acts_read(lq_acts *a, int64_t i, float *dst, lq_err *err) {
    if (on_host(a))
        return lq_spill_read(a->spill, i, dst, err);
    LQ_TRY(check_index(a, i, err));
    const chunk *c = &a->ch[i];
    const size_t b = (size_t)c->numel * sizeof(float);
    lq_status    st;
    if (c->dev) {
        st = a->be->ops->copy(a->be, dst, c->dev, b);
    } else {
        LQ_TRY(stage_grow(a, c->numel, err));
        LQ_TRY(lq_spill_read(a->spill, c->spill, a->stage, err));
        st = a->be->ops->upload(a->be, dst, a->stage, b);
    }
    return st == LQ_OK ? LQ_OK : be_fail(a, st, "reading a chunk", err);
}

lq_status lq_acts_clear(lq_acts *a, lq_err *err) {
    release_dev(a);
    return lq_spill_clear(a->spill, err);
}
