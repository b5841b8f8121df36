/* GPU side of the quantization pipeline (see lq_gpu.h): GPTQ factorization and column sweep,
 * perplexity's linears. This file
 * only orchestrates: every device operation is a primitive of the one device layer
 * (kernels/cuda/lq_cuda.h), so it builds the same with and without CUDA (then opening a device
 * fails with LQ_ERR_NO_CUDA_BUILD and nothing below runs). Everything is fp32 so that a GPU
 * conversion and a CPU conversion agree to rounding; the O(k^3) factorization and the O(n k^2)
 * sweep are where the device pays off. */
#include "lq_gpu.h"

#include "cuda/lq_cuda.h"
#include "lq_qformat.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct lq_gpu {
    lq_cuda_ctx *kc; /* the device layer's context: stream, cuBLAS, cuSOLVER, memory count */
    char         desc[320];
    int64_t      mem; /* the device's memory in bytes */
    /* GPTQ backend state: U [k, k] (row-major upper = column-major lower of the factor). */
    float  *dU;
    int64_t U_k;
    /* perplexity's linears: float32 weights on their way to fp16, activations (grown, reused) */
    float  *dgW, *dgx, *dgy;
    int64_t gW_cap, gx_cap, gy_cap; /* elements */
    /* the kernels' linears (lq_gpu_qlinear): descriptor arrays, fp16 activations, workspace */
    void   *dq, *dxh, *dyh, *dkws;
    int64_t q_cap, xh_cap, yh_cap, kws_cap; /* bytes */
};

/* ------------------------------------------------------------------------------------------
 * Errors and allocation
 * ------------------------------------------------------------------------------------------ */
static lq_status gpu_fail(lq_gpu *g, lq_status st, const char *what, lq_err *err) {
    if (st == LQ_ERR_NOMEM)
        return lq_fail(err, st, "GPU: out of device memory (%s)", what);
    const char *why = lq_cuda_ctx_error(g->kc);
    return lq_fail(err, st, "GPU: %s: %s", what, why && *why ? why : lq_status_name(st));
}

#define GPU_TRY(call, what)                                                                        \
    do {                                                                                           \
        const lq_status s_ = (call);                                                               \
        if (s_ != LQ_OK)                                                                           \
            return gpu_fail(g, s_, (what), err);                                                   \
    } while (0)

/* Sizes are counted by the context so the report can state peak device memory. */
static lq_status dev_alloc(lq_gpu *g, void **p, int64_t bytes, const char *what, lq_err *err) {
    *p = NULL;
    if (bytes <= 0)
        return LQ_OK;
    const lq_status st = lq_cuda_alloc(g->kc, p, (size_t)bytes);
    if (st == LQ_ERR_NOMEM)
        return lq_fail(err, st, "GPU: out of device memory for %s (%.1f MiB)", what,
                       (double)bytes / 1048576.0);
    return st == LQ_OK ? LQ_OK : gpu_fail(g, st, what, err);
}

static void dev_free(lq_gpu *g, void *p, int64_t bytes) {
    lq_cuda_free(g->kc, p, (size_t)(bytes > 0 ? bytes : 0));
}

/* *p grows to hold `bytes` (contents not kept). */
static lq_status grow_bytes(lq_gpu *g, void **p, int64_t *cap, int64_t bytes, const char *what,
                            lq_err *err) {
    if (bytes <= *cap)
        return LQ_OK;
    dev_free(g, *p, *cap);
    *p   = NULL;
    *cap = 0;
    LQ_TRY(dev_alloc(g, p, bytes, what, err));
    *cap = bytes;
    return LQ_OK;
}

static lq_status grow(lq_gpu *g, float **p, int64_t *cap, int64_t elems, const char *what,
                      lq_err *err) {
    int64_t   bytes = *cap * (int64_t)sizeof(float);
    void     *v     = *p;
    lq_status st    = grow_bytes(g, &v, &bytes, elems * (int64_t)sizeof(float), what, err);
    *p              = (float *)v;
    *cap            = bytes / (int64_t)sizeof(float);
    return st;
}

/* ------------------------------------------------------------------------------------------
 * Context
 * ------------------------------------------------------------------------------------------ */
lq_status lq_gpu_open(int device, lq_gpu **out, lq_err *err) {
    *out = NULL;
    if (!lq_cuda_built())
        LQ_FAIL(err, LQ_ERR_NO_CUDA_BUILD, "llmquant was built without CUDA");
    const int cnt = lq_gpu_device_count();
    if (device < 0 || device >= cnt)
        LQ_FAIL(err, LQ_ERR_NO_DEVICE, "GPU: no CUDA device %d (%d usable)", device, cnt);
    lq_gpu *g = calloc(1, sizeof *g);
    if (!g)
        LQ_FAIL(err, LQ_ERR_NOMEM, "out of memory");
    lq_status s = lq_cuda_ctx_create(device, &g->kc, err); /* sets the device current */
    if (s == LQ_OK && !lq_cuda_ctx_stream(g->kc))
        s = gpu_fail(g, LQ_ERR_CUDA, "initializing the device", err);
    if (s != LQ_OK) {
        lq_gpu_close(g);
        return s;
    }
    char   name[256];
    int    major = 0, minor = 0;
    size_t mem = 0;
    if (lq_cuda_device_info(device, name, sizeof name, &major, &minor, &mem, NULL) == LQ_OK) {
        g->mem = (int64_t)mem;
        snprintf(g->desc, sizeof g->desc, "%.200s (cc %d.%d, %.1f GiB)", name, major, minor,
                 (double)mem / 1073741824.0);
    } else {
        snprintf(g->desc, sizeof g->desc, "CUDA device %d", device);
    }
    *out = g;
    return LQ_OK;
}

void lq_gpu_close(lq_gpu *g) {
    if (!g)
        return;
    if (g->kc)
        (void)lq_cuda_sync(g->kc);
    dev_free(g, g->dU, g->U_k * g->U_k * (int64_t)sizeof(float));
    dev_free(g, g->dgW, g->gW_cap * (int64_t)sizeof(float));
    dev_free(g, g->dgx, g->gx_cap * (int64_t)sizeof(float));
    dev_free(g, g->dgy, g->gy_cap * (int64_t)sizeof(float));
    dev_free(g, g->dq, g->q_cap);
    dev_free(g, g->dxh, g->xh_cap);
    dev_free(g, g->dyh, g->yh_cap);
    dev_free(g, g->dkws, g->kws_cap);
    lq_cuda_ctx_free(g->kc);
    free(g);
}

const char *lq_gpu_describe(const lq_gpu *g) {
    return g ? g->desc : "none";
}

int64_t lq_gpu_peak_bytes(const lq_gpu *g) {
    return g ? lq_cuda_ctx_peak_bytes(g->kc) : 0;
}

lq_cuda_ctx *lq_gpu_ctx(lq_gpu *g) {
    return g ? g->kc : NULL;
}

int64_t lq_gpu_mem_bytes(const lq_gpu *g) {
    return g ? g->mem : 0;
}

/* ------------------------------------------------------------------------------------------
 * GPTQ backend: the factor U of the inverse Hessian kept on the device for the sweep.
 * ------------------------------------------------------------------------------------------ */
static lq_status gpu_factor(void *ctx, float *Hp, int64_t k, lq_err *err) {
    lq_gpu *g = (lq_gpu *)ctx;
    if (g->U_k != k) {
        dev_free(g, g->dU, g->U_k * g->U_k * (int64_t)sizeof(float));
        g->dU  = NULL;
        g->U_k = 0;
        LQ_TRY(
            dev_alloc(g, (void **)&g->dU, k * k * (int64_t)sizeof(float), "the GPTQ inverse", err));
        g->U_k = k;
    }
    GPU_TRY(lq_cuda_copy(g->kc, g->dU, Hp, (size_t)(k * k) * sizeof(float), LQ_CUDA_H2D),
            "copying the Hessian");
    float *dB = NULL; /* the right-hand sides of the inverse, then the inverse */
    LQ_TRY(dev_alloc(g, (void **)&dB, k * k * (int64_t)sizeof(float), "the GPTQ inverse", err));
    lq_status st = lq_cuda_chol_inverse_upper(g->kc, g->dU, dB, k);
    dev_free(g, dB, k * k * (int64_t)sizeof(float));
    if (st == LQ_ERR_CHOLESKY)
        return st; /* lq_gptq_ex retries with more damping */
    return st == LQ_OK ? LQ_OK : gpu_fail(g, st, "GPTQ factorization", err);
}

/* The sweep's device arrays, one allocation. */
typedef struct sweep_mem {
    char    *base;
    int64_t  total;
    float   *ds, *dz; /* static groups */
    int32_t *gcol;    /* the kernel's read-only view of it is a->gcol */
    int32_t *perm;    /* [k] the input column of each permuted position */
    uint8_t *q;       /* [n, k] the codes in the checkpoint's order */
} sweep_mem;

static lq_status sweep_alloc(lq_gpu *g, const lq_gptq_sweep *sw, int64_t bs, int64_t G,
                             lq_cuda_sweep *a, sweep_mem *m, lq_err *err) {
    const int64_t n = sw->n, k = sw->k, nk = n * k;
    const int64_t szs[] = {nk * 4,    bs * n * 4, nk,        n * 4, n * 4, G * n * 4,
                           G * n * 4, k * 4,      G * n * 4, G * n * 4, n * 8, k * 4, nk};
    int64_t       off[13];
    m->total = 0;
    for (int i = 0; i < 13; i++) {
        off[i] = m->total;
        m->total += (szs[i] + 255) / 256 * 256;
    }
    LQ_TRY(dev_alloc(g, (void **)&m->base, m->total, "the GPTQ sweep", err));
    char *b = m->base;
    memset(a, 0, sizeof *a);
    a->Wt     = (float *)(b + off[0]);
    a->Err    = (float *)(b + off[1]);
    a->qt     = (uint8_t *)(b + off[2]);
    a->sc_r   = (float *)(b + off[3]);
    a->zr_r   = (float *)(b + off[4]);
    m->ds     = (float *)(b + off[5]);
    m->dz     = (float *)(b + off[6]);
    m->gcol   = (int32_t *)(b + off[7]);
    a->gcol   = m->gcol;
    a->scales = (float *)(b + off[8]);
    a->zeros  = (int32_t *)(b + off[9]);
    a->loss   = (double *)(b + off[10]);
    m->perm   = (int32_t *)(b + off[11]);
    m->q      = (uint8_t *)(b + off[12]);
    a->U      = g->dU;
    a->ssc    = sw->ssc ? m->ds : NULL;
    a->szr    = sw->szr ? m->dz : NULL;
    a->n = n, a->k = k, a->g = sw->g;
    a->bits = sw->qs.bits, a->sym = sw->qs.sym, a->v1_safe = sw->qs.v1_safe;
    a->static_groups = sw->static_groups;
    return LQ_OK;
}

static lq_status sweep_upload(lq_gpu *g, const lq_gptq_sweep *sw, int64_t G, const lq_cuda_sweep *a,
                              const sweep_mem *m, lq_err *err) {
    lq_cuda_ctx  *kc = g->kc;
    const int64_t n = sw->n, k = sw->k;
    GPU_TRY(lq_cuda_copy(kc, a->Wt, sw->Wt, (size_t)(n * k) * 4, LQ_CUDA_H2D), "copying weights");
    GPU_TRY(lq_cuda_copy(kc, a->sc_r, sw->sc_r, (size_t)n * 4, LQ_CUDA_H2D), "copying parameters");
    GPU_TRY(lq_cuda_copy(kc, a->zr_r, sw->zr_r, (size_t)n * 4, LQ_CUDA_H2D), "copying parameters");
    GPU_TRY(lq_cuda_copy(kc, m->gcol, sw->gcol, (size_t)k * 4, LQ_CUDA_H2D), "copying groups");
    int32_t *p32 = lq_malloc_n(k, sizeof *p32);
    if (!p32)
        LQ_FAIL(err, LQ_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < k; i++)
        p32[i] = (int32_t)sw->perm[i];
    const lq_status ps = lq_cuda_copy(kc, m->perm, p32, (size_t)k * 4, LQ_CUDA_H2D);
    free(p32); /* from pageable memory the copy is done when the call returns */
    GPU_TRY(ps, "copying the column order");
    if (sw->ssc) {
        GPU_TRY(lq_cuda_copy(kc, m->ds, sw->ssc, (size_t)(G * n) * 4, LQ_CUDA_H2D),
                "copying static groups");
        GPU_TRY(lq_cuda_copy(kc, m->dz, sw->szr, (size_t)(G * n) * 4, LQ_CUDA_H2D),
                "copying static groups");
    }
    GPU_TRY(lq_cuda_zero(kc, a->loss, (size_t)n * sizeof(double)), "clearing the loss");
    return LQ_OK;
}

/* Column blocks of bs: each quantized on the device, then the rest of W updated lazily. */
static lq_status sweep_blocks(lq_gpu *g, lq_cuda_sweep *a, int64_t bs, lq_err *err) {
    const int64_t n = a->n, k = a->k;
    for (int64_t i1 = 0; i1 < k; i1 += bs) {
        int64_t i2 = i1 + bs < k ? i1 + bs : k, cnt = i2 - i1;
        a->i1 = i1, a->i2 = i2;
        GPU_TRY(lq_cuda_gptq_sweep_block(g->kc, a), "GPTQ column sweep");
        if (i2 < k) /* Row-major Wt[i2:] -= U[i1:i2, i2:]^T Err, i.e. column-major
                     * Wt'(n x k-i2) -= Err'(n x cnt) * U'(k-i2 x cnt)^T. */
            GPU_TRY(lq_cuda_sgemm(g->kc, 0, 1, n, k - i2, cnt, -1.f, a->Err, n, g->dU + i1 * k + i2,
                                  k, 1.f, a->Wt + i2 * n, n),
                    "GPTQ lazy update");
    }
    return LQ_OK;
}

/* The codes come back in the checkpoint's order, put there on the device. */
static lq_status sweep_read(lq_gpu *g, lq_gptq_sweep *sw, int64_t G, const lq_cuda_sweep *a,
                            const sweep_mem *m, double *row_loss, lq_err *err) {
    lq_cuda_ctx  *kc = g->kc;
    const int64_t n = sw->n, k = sw->k;
    GPU_TRY(lq_cuda_copy(kc, sw->Wt, a->Wt, (size_t)(n * k) * 4, LQ_CUDA_D2H), "reading weights");
    GPU_TRY(lq_cuda_codes_unpermute(kc, a->qt, m->perm, n, k, m->q), "ordering codes");
    GPU_TRY(lq_cuda_copy(kc, sw->q, m->q, (size_t)(n * k), LQ_CUDA_D2H), "reading codes");
    GPU_TRY(lq_cuda_copy(kc, sw->sc_r, a->sc_r, (size_t)n * 4, LQ_CUDA_D2H), "reading parameters");
    GPU_TRY(lq_cuda_copy(kc, sw->zr_r, a->zr_r, (size_t)n * 4, LQ_CUDA_D2H), "reading parameters");
    if (sw->g && !sw->static_groups) {
        GPU_TRY(lq_cuda_copy(kc, sw->scales, a->scales, (size_t)(G * n) * 4, LQ_CUDA_D2H),
                "reading scales");
        GPU_TRY(lq_cuda_copy(kc, sw->zeros, a->zeros, (size_t)(G * n) * 4, LQ_CUDA_D2H),
                "reading zeros");
    }
    GPU_TRY(lq_cuda_copy(kc, row_loss, a->loss, (size_t)n * sizeof(double), LQ_CUDA_D2H),
            "reading the loss");
    GPU_TRY(lq_cuda_sync(kc), "GPTQ column sweep");
    return LQ_OK;
}

static lq_status gpu_sweep(void *ctx, lq_gptq_sweep *sw, lq_err *err) {
    lq_gpu *g = (lq_gpu *)ctx;
    int64_t n = sw->n, k = sw->k, bs = sw->bs, G = sw->g ? (k + sw->g - 1) / sw->g : 1;
    if (!g->dU || g->U_k != k)
        LQ_FAIL(err, LQ_ERR_INTERNAL, "GPU GPTQ sweep without a factorization");
    if (bs > LQ_SWEEP_MAX_COLS)
        bs = LQ_SWEEP_MAX_COLS;
    lq_cuda_sweep a;
    sweep_mem     m        = {0};
    double       *row_loss = malloc((size_t)n * sizeof(double));
    lq_status     st = !row_loss ? lq_fail(err, LQ_ERR_NOMEM, "out of memory for GPTQ codes")
                                 : sweep_alloc(g, sw, bs, G, &a, &m, err);
    if (st == LQ_OK)
        st = sweep_upload(g, sw, G, &a, &m, err);
    if (st == LQ_OK)
        st = sweep_blocks(g, &a, bs, err);
    if (st == LQ_OK)
        st = sweep_read(g, sw, G, &a, &m, row_loss, err);
    if (st == LQ_OK) {
        sw->loss = 0;
        for (int64_t r = 0; r < n; r++)
            sw->loss += row_loss[r];
    } else {
        (void)lq_cuda_sync(g->kc);
    }
    free(row_loss);
    dev_free(g, m.base, m.total);
    return st;
}

void lq_gpu_gptq_backend(lq_gpu *g, lq_gptq_backend *be) {
    be->ctx    = g;
    be->factor = gpu_factor;
    be->sweep  = gpu_sweep;
    be->reuse  = NULL; /* the device keeps its last factor until the next one */
}

/* ------------------------------------------------------------------------------------------
 * Any format's linear on the kernels (perplexity).
 * ------------------------------------------------------------------------------------------ */
/* The descriptor on the device. Dense weights are float32 on the host and fp16 on the device:
 * they go up as float32 and are rounded there; the other formats' arrays go up as they are. */
static lq_status upload_linear(lq_gpu *g, const lq_qlinear *w, lq_qlinear *dw, lq_err *err) {
    if (w->format != LQ_FMT_DENSE) {
        const size_t bytes = lq_qlinear_device_bytes(w);
        LQ_TRY(grow_bytes(g, &g->dq, &g->q_cap, (int64_t)bytes, "layer weights", err));
        GPU_TRY(lq_qlinear_upload(w, g->dq, bytes, dw, lq_cuda_ctx_stream(g->kc)),
                "copying layer weights");
        return LQ_OK;
    }
    const int64_t nk = w->n * w->k, wb = (nk * 2 + 255) & ~(int64_t)255;
    LQ_TRY(grow(g, &g->dgW, &g->gW_cap, nk, "layer weights", err));
    LQ_TRY(grow_bytes(g, &g->dq, &g->q_cap, wb + (w->bias ? w->n * 2 : 0), "layer weights", err));
    GPU_TRY(lq_cuda_copy(g->kc, g->dgW, w->dense, (size_t)nk * sizeof(float), LQ_CUDA_H2D),
            "copying layer weights");
    GPU_TRY(lq_cuda_f32_to_f16(g->dgW, g->dq, nk, lq_cuda_ctx_stream(g->kc)),
            "rounding layer weights to fp16");
    *dw       = *w;
    dw->dense = g->dq;
    if (w->bias) {
        GPU_TRY(lq_cuda_copy(g->kc, (char *)g->dq + wb, w->bias, (size_t)w->n * 2, LQ_CUDA_H2D),
                "copying the bias");
        dw->bias = (const uint16_t *)((char *)g->dq + wb);
    }
    return LQ_OK;
}

lq_status lq_gpu_qlinear(void *user, const lq_qlinear *w, const float *x, int64_t t, float *y,
                         lq_err *err) {
    lq_gpu       *g      = (lq_gpu *)user;
    void         *stream = lq_cuda_ctx_stream(g->kc);
    const int64_t n = w->n, k = w->k;
    lq_qlinear    dw;
    LQ_TRY(upload_linear(g, w, &dw, err));
    const size_t ws = lq_qlinear_workspace_cuda(&dw, t);
    LQ_TRY(grow(g, &g->dgx, &g->gx_cap, t * k, "activations", err));
    LQ_TRY(grow(g, &g->dgy, &g->gy_cap, t * n, "activations", err));
    LQ_TRY(grow_bytes(g, &g->dxh, &g->xh_cap, t * k * 2, "activations", err));
    LQ_TRY(grow_bytes(g, &g->dyh, &g->yh_cap, t * n * 2, "activations", err));
    LQ_TRY(grow_bytes(g, &g->dkws, &g->kws_cap, (int64_t)ws, "kernel workspace", err));
    GPU_TRY(lq_cuda_copy(g->kc, g->dgx, x, (size_t)(t * k) * sizeof(float), LQ_CUDA_H2D),
            "copying activations");
    lq_status s = lq_cuda_f32_to_f16(g->dgx, g->dxh, t * k, stream);
    if (s == LQ_OK)
        s = lq_qlinear_forward_cuda(g->kc, &dw, g->dxh, t, g->dyh, g->dkws, ws, stream);
    if (s == LQ_OK)
        s = lq_cuda_f16_to_f32(g->dyh, g->dgy, t * n, stream);
    if (s != LQ_OK) {
        const lq_qformat *f = lq_qformat_get((lq_format)w->format);
        char              what[160];
        snprintf(what, sizeof what, "%s linear [%lld x %lld] over %lld tokens", f ? f->name : "?",
                 (long long)n, (long long)k, (long long)t);
        return gpu_fail(g, s, what, err);
    }
    GPU_TRY(lq_cuda_copy(g->kc, y, g->dgy, (size_t)(t * n) * sizeof(float), LQ_CUDA_D2H),
            "reading activations");
    GPU_TRY(lq_cuda_sync(g->kc), "linear forward");
    return LQ_OK;
}
