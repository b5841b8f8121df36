/* The cpu op backend (lq_ops.h): the model forward's and the statistics' ops on host memory,
 * spread over OpenMP threads, on the ISA kernels (lq_vec_ops, lq_sgemm, lq_ssyrk_upper, the
 * format table). Elementwise ops run the ref backend's row bodies (lq_ops_impl.h), so they give
 * its bits; attention, linears and SYRK sum in another order. */
#include "lq_kernels_impl.h"
#include "lq_ops_impl.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* Below these sizes a loop runs on the calling thread: waking the OpenMP team (whose idle
 * threads then spin and compete with OpenBLAS's own threads for the cores) costs more than
 * the loop. Elementwise loops are counted in elements, attention in multiply-adds. */
#define PAR_ELEMS (1 << 20)
#define PAR_MACS  (1 << 22)

/* Query rows per attention job: large enough for GEMM efficiency, small enough that the
 * per-thread score block (QB x seqlen floats) stays in cache-friendly sizes and that causal
 * blocks skip most masked keys. A multiple of lq_gemm512's 6-row tile (a 64-row block left a
 * 4-row tail in every block: SmolLM2 ppl at ctx 2048 ran 8-10 % slower). */
#define QB 48

static int be_threads(const lq_be *be) {
    return be->nthreads > 0 ? be->nthreads : omp_get_max_threads();
}

static lq_status cpu_rmsnorm(lq_be *be, const float *x, const float *w, int64_t rows, int64_t d,
                             double eps, int plus_one, float *out) {
#pragma omp parallel for schedule(static) if (rows * d >= PAR_ELEMS)
    for (int64_t r = 0; r < rows; r++)
        lq_rmsnorm_row(x + r * d, w, d, eps, plus_one, out + r * d);
    return LQ_OK;
}

static lq_status cpu_rope(lq_be *be, float *x, int64_t T, int64_t ld, int64_t nheads,
                          int64_t half, int64_t seqlen, const float *cs, const float *sn) {
#pragma omp parallel for schedule(static) num_threads(be_threads(be)) if (T * ld >= PAR_ELEMS)
    for (int64_t t = 0; t < T; t++) {
        const int64_t p = t % seqlen;
        lq_rope_row(x + t * ld, nheads, half, cs + p * half, sn + p * half);
    }
    return LQ_OK;
}

/* Independent jobs of (sequence, head, block of QB query rows), each two GEMMs around a masked
 * softmax, spread over the threads; a query block only multiplies against the keys it may see,
 * so the causal half of QK^T is mostly skipped. With attention weights a job is all blocks of
 * one (sequence, head), heaviest first, so that the head's row of partial sums has one writer,
 * and the rows are summed over heads in order: the weights do not depend on the schedule. */
static lq_status cpu_attention(lq_be *be, const lq_attn_args *a) {
    const int64_t ns = a->ns, seqlen = a->seqlen, T = ns * seqlen, H = a->heads;
    const int64_t hd = a->head_dim, qd = H * hd, kvd = a->kv_heads * hd, W = a->window;
    const int     nt = be_threads(be), wts = a->attn_w != NULL, wts_only = a->out == NULL;
    const int64_t sstride = (int64_t)QB * seqlen;
    int64_t       need;
    if (!lq_mul_i64(sstride, nt, &need) || !lq_add_i64(need, wts ? H * T : 0, &need) ||
        !lq_mul_i64(need, (int64_t)sizeof(float), &need))
        return LQ_ERR_NOMEM;
    void *scr;
    LQ_TRY(lq_be_scratch(be, (size_t)need, &scr));
    float *scores = scr, *aw_thr = scores + sstride * nt;
    if (wts)
        memset(aw_thr, 0, (size_t)(H * T) * sizeof(float));
    const int64_t nqb = (seqlen + QB - 1) / QB, per = wts ? nqb : 1, njobs = ns * H * nqb / per,
                  group = H / a->kv_heads;
    const float   scale = a->scale, softcap = a->softcap;
    const float  *q = a->q, *k = a->k, *v = a->v;
    float        *out  = a->out;
    const int64_t macs = ns * H * seqlen * seqlen * hd; /* QK^T + PV over the causal half */
    void (*const softmax)(float *, int64_t, int64_t, int64_t) = lq_vec_ops_get()->softmax_row;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt) if (macs >= PAR_MACS)
    for (int64_t job = 0; job < njobs; job++)
        for (int64_t bi = 0; bi < per; bi++) {
            /* the heaviest (last) query blocks first: better balance under dynamic scheduling */
            const int64_t u = job * per + bi;
            const int64_t b = nqb - 1 - u % nqb, h = (u / nqb) % H, s = u / (nqb * H);
            const int64_t i0 = b * QB, i1 = i0 + QB < seqlen ? i0 + QB : seqlen, rows = i1 - i0;
            const int64_t j0 = (W > 0 && i0 - W + 1 > 0) ? i0 - W + 1 : 0, cols = i1 - j0;
            const int64_t kvh = h / group, base = s * seqlen;
            float        *S = scores + (int64_t)omp_get_thread_num() * sstride;
            lq_sgemm(0, 1, rows, cols, hd, scale, q + (base + i0) * qd + h * hd, qd,
                     k + (base + j0) * kvd + kvh * hd, kvd, 0.f, S, cols, 1);
            if (softcap > 0) /* Gemma 2: cap * tanh(score / cap), before the mask */
                for (int64_t e = 0; e < rows * cols; e++)
                    S[e] = tanhf(S[e] / softcap) * softcap;
            for (int64_t r = 0; r < rows; r++) {
                const int64_t i  = i0 + r;
                const int64_t lo = (W > 0 && i - W + 1 > j0) ? i - W + 1 : j0;
                softmax(S + r * cols, cols, lo - j0, i - j0);
            }
            if (wts) { /* squared probabilities each key receives, per head */
                float *aw = aw_thr + h * T + base + j0;
                for (int64_t r = 0; r < rows; r++)
                    for (int64_t jj = 0; jj < cols; jj++)
                        aw[jj] += S[r * cols + jj] * S[r * cols + jj];
            }
            if (!wts_only)
                lq_sgemm(0, 0, rows, hd, cols, 1.f, S, cols, v + (base + j0) * kvd + kvh * hd, kvd,
                         0.f, out + (base + i0) * qd + h * hd, qd, 1);
        }
    if (wts)
        for (int64_t t = 0; t < T; t++) {
            float sum = 0.f;
            for (int64_t hh = 0; hh < H; hh++)
                sum += aw_thr[hh * T + t];
            a->attn_w[t] = sum;
        }
    return LQ_OK;
}

static lq_status cpu_glu(lq_be *be, float *g, const float *gate, const float *up, int64_t ld,
                         int64_t T, int64_t ff, int act) {
    const int     nt = be_threads(be);
    const int64_t n  = T * ff;
    if (act == LQ_ACT_GELU_TANH_GLU) {
#pragma omp parallel for schedule(static) num_threads(nt) if (n >= PAR_ELEMS)
        for (int64_t t = 0; t < T; t++)
            for (int64_t e = 0; e < ff; e++)
                g[t * ff + e] = lq_gelu_tanh(gate[t * ld + e]) * up[t * ld + e];
    } else {
        const lq_vec_ops *v = lq_vec_ops_get();
#pragma omp parallel for schedule(static) num_threads(nt) if (n >= PAR_ELEMS)
        for (int64_t t = 0; t < T; t++)
            v->silu_mul(g + t * ff, gate + t * ld, up + t * ld, ff);
    }
    return LQ_OK;
}

static lq_status cpu_add(lq_be *be, float *out, const float *a, const float *b, int64_t count) {
#pragma omp parallel for schedule(static) num_threads(be_threads(be)) if (count >= PAR_ELEMS)
    for (int64_t i = 0; i < count; i++)
        out[i] = a[i] + b[i];
    return LQ_OK;
}

static lq_status cpu_softcap(lq_be *be, float *x, int64_t count, float cap) {
#pragma omp parallel for schedule(static) num_threads(be_threads(be)) if (count >= PAR_ELEMS)
    for (int64_t e = 0; e < count; e++)
        x[e] = tanhf(x[e] / cap) * cap;
    return LQ_OK;
}

static int int_x_rows(const lq_format_traits *t, const lq_qlinear *q, int64_t mc, unsigned flags) {
    return (flags & t->qx_flag) && t->quantizes_x_cpu && t->quantizes_x_cpu(q, mc, flags);
}

size_t lq_linear_ws_cpu(const lq_qlinear *w, int64_t m, unsigned flags) {
    const lq_format_traits *t = lq_format_traits_get((lq_format)w->format);
    if (!t || !t->ws_cpu)
        return 0;
    const int64_t mc = m < LQ_QLINEAR_INT_X_ROWS ? m : LQ_QLINEAR_INT_X_ROWS;
    /* chunks of mc rows, a full chunk needing the most scratch; a short last chunk may fall
     * back to the float kernel (where a format takes integer activations from some rows on) */
    if (int_x_rows(t, w, mc, flags)) {
        const int64_t last = m % mc ? m % mc : mc;
        const size_t  qx   = t->ws_cpu_qx(w, mc);
        const size_t  fl   = int_x_rows(t, w, last, flags) ? 0 : t->ws_cpu(w, last);
        return qx > fl ? qx : fl;
    }
    return t->ws_cpu(w, m);
}

/* Every format, dense included, through its row of the kernel table. */
lq_status lq_linear_forward_cpu(const lq_qlinear *q, const float *bias, const float *x, int64_t m,
                                float *y, void *ws, size_t ws_size, int nthreads, unsigned flags) {
    const int64_t n = q->n;
    if (m <= 0)
        return LQ_OK;
    if (lq_qlinear_check(q, NULL) != LQ_OK)
        return LQ_ERR_INVALID_ARG;
    const lq_format_traits *t = lq_format_traits_get((lq_format)q->format);
    if (!t->gemm_cpu)
        return LQ_ERR_UNSUPPORTED;
    const size_t need = lq_linear_ws_cpu(q, m, flags);
    void        *own  = NULL;
    if (need > ws_size) { /* callers without a workspace (one-off calls) */
        own = lq_aligned_alloc(need);
        if (!own)
            return LQ_ERR_NOMEM;
        ws      = own;
        ws_size = need;
    }
    lq_status st = LQ_OK;
    if (flags) { /* row chunks the reduced-precision activation kernels take */
        for (int64_t r0 = 0; r0 < m && st == LQ_OK; r0 += LQ_QLINEAR_INT_X_ROWS) {
            const int64_t mc = m - r0 < LQ_QLINEAR_INT_X_ROWS ? m - r0 : LQ_QLINEAR_INT_X_ROWS;
            st               = (int_x_rows(t, q, mc, flags) ? t->gemm_cpu_qx : t->gemm_cpu)(
                q, x + r0 * q->k, mc, y + r0 * n, ws, ws_size, nthreads);
        }
    } else {
        st = t->gemm_cpu(q, x, m, y, ws, ws_size, nthreads);
    }
    lq_aligned_free(own);
    LQ_TRY(st);
    if (bias)
        for (int64_t r = 0; r < m; r++)
            for (int64_t i = 0; i < n; i++)
                y[r * n + i] += bias[i];
    return LQ_OK;
}

static lq_status cpu_linear(lq_be *be, const lq_qlinear *w, const float *bias, const float *x,
                            int64_t t, float *y) {
    if (t <= 0)
        return LQ_OK;
    const size_t need = lq_linear_ws_cpu(w, t, be->kflags);
    void        *ws   = NULL;
    if (need)
        LQ_TRY(lq_be_scratch(be, need, &ws));
    return lq_linear_forward_cpu(w, bias, x, t, y, ws, need, be_threads(be), be->kflags);
}

static lq_status cpu_moe_route(lq_be *be, float *p, int64_t T, int64_t E, int64_t K, int norm,
                               int32_t *sel, float *w) {
#pragma omp parallel for schedule(static) num_threads(be_threads(be)) if (T * E >= PAR_ELEMS)
    for (int64_t t = 0; t < T; t++)
        lq_moe_route_row(p + t * E, E, K, norm, sel + t * K, w + t * K);
    return LQ_OK;
}

static lq_status cpu_syrk(lq_be *be, float *H, const float *x, int64_t t, int64_t k, float alpha,
                          float beta) {
    lq_ssyrk_upper(k, t, alpha, x, beta, H, be->nthreads);
    return LQ_OK;
}

static lq_status cpu_awq_fakequant(lq_be *be, const float *w, const float *s, int64_t n, int64_t k,
                                   int64_t group, int bits, float *out) {
    const int64_t g = group <= 0 || group > k ? k : group;
#pragma omp parallel for schedule(static) num_threads(be_threads(be)) if (n * k >= PAR_ELEMS)
    for (int64_t r = 0; r < n; r++)
        lq_awq_fakequant_row(w + r * k, s, k, g, (1 << bits) - 1, out + r * k);
    return LQ_OK;
}

/* The sampled tokens transposed, [k, ts]: a group's outputs for all tokens are then vector loops
 * over tokens, each token's dot product still summed in input order (the same floats as one
 * token at a time); the (row, group) pairs spread over the threads. */
static lq_status cpu_awq_clip(lq_be *be, float *w, int64_t n, int64_t k, const float *x, int64_t t,
                              int64_t group, int bits) {
    const int64_t g = group <= 0 || group > k ? k : group, G = k / g;
    if (k % g) /* AutoAWQ groups must tile k exactly (the GEMM layout requires it too) */
        return LQ_ERR_INVALID_ARG;
    int64_t ts;
    float  *xs = lq_awq_clip_sample(x, t, k, &ts);
    if (!xs)
        return LQ_ERR_NOMEM;
    lq_status st = LQ_OK;
#pragma omp parallel num_threads(be_threads(be))
    {
        float *wq   = malloc((size_t)g * sizeof(float));
        float *orig = malloc((size_t)ts * sizeof(float));
        float *out  = malloc((size_t)ts * sizeof(float));
        if (!wq || !orig || !out) {
#pragma omp critical
            st = LQ_ERR_NOMEM;
        }
#pragma omp for schedule(dynamic) collapse(2)
        for (int64_t r = 0; r < n; r++)
            for (int64_t gi = 0; gi < G; gi++)
                if (wq && orig && out)
                    lq_awq_clip_group(w + r * k + gi * g, xs + gi * g * ts, ts, g, (1 << bits) - 1,
                                      wq, orig, out);
        free(wq);
        free(orig);
        free(out);
    }
    free(xs);
    return st;
}

static lq_status cpu_sub(lq_be *be, float *out, const float *a, const float *b, int64_t count) {
#pragma omp parallel for schedule(static) num_threads(be_threads(be)) if (count >= PAR_ELEMS)
    for (int64_t i = 0; i < count; i++)
        out[i] = a[i] - b[i];
    return LQ_OK;
}

static lq_status cpu_gemm(lq_be *be, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha,
                          const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                          float *C, int64_t ldc) {
    lq_sgemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, be->nthreads);
    return LQ_OK;
}

static lq_status cpu_sym_upper(lq_be *be, float *H, int64_t k) {
    enum { TB = 64 }; /* in tiles: the upper triangle is read down its columns */
    for (int64_t i0 = 0; i0 < k; i0 += TB)
        for (int64_t j0 = 0; j0 <= i0; j0 += TB) {
            const int64_t i1 = i0 + TB < k ? i0 + TB : k, j1 = j0 + TB < k ? j0 + TB : k;
            for (int64_t i = i0; i < i1; i++)
                for (int64_t j = j0; j < j1 && j < i; j++)
                    H[i * k + j] = H[j * k + i];
        }
    return LQ_OK;
}

static const lq_ops k_ops_cpu = {
    .name          = "cpu",
    .device        = 0,
    .alloc         = lq_ops_host_alloc,
    .release       = lq_ops_host_release,
    .upload        = lq_ops_host_copy,
    .download      = lq_ops_host_copy,
    .copy          = lq_ops_host_copy,
    .zero          = lq_ops_host_zero,
    .copy2d        = lq_ops_host_copy2d,
    .sync          = lq_ops_host_sync,
    .rmsnorm       = cpu_rmsnorm,
    .rope          = cpu_rope,
    .attention     = cpu_attention,
    .glu           = cpu_glu,
    .add           = cpu_add,
    .softcap       = cpu_softcap,
    .linear        = cpu_linear,
    .linear_upload = lq_ops_host_linear_upload,
    .moe_route     = cpu_moe_route,
    .gather_rows   = lq_ref_op_gather_rows,
    .scatter_add   = lq_ref_op_scatter_add,
    .gate_add      = lq_ref_op_gate_add,
    .syrk          = cpu_syrk,
    .scale_rows    = lq_ref_op_scale_rows,
    .col_absmax    = lq_ref_op_col_absmax,
    .col_abssum    = lq_ref_op_col_abssum,
    .awq_fakequant = cpu_awq_fakequant,
    .awq_clip      = cpu_awq_clip,
    .sqdiff        = lq_ref_op_sqdiff,
    .dot           = lq_ref_op_dot,
    .sub           = cpu_sub,
    .gemm          = cpu_gemm,
    .sym_upper     = cpu_sym_upper,
    .div_cols      = lq_ref_op_div_cols,
};

const lq_ops *lq_ops_cpu(void) {
    return &k_ops_cpu;
}
