/* The ref op backend (lq_ops.h): plain loops on host memory, no threads, no SIMD; sums of
 * products in double. The oracle every other backend's ops are bound to by tests/test_ops.c.
 * Its memory helpers serve the cpu backend too (both keep tensors in host memory). */
/* MAP_ANONYMOUS (not in POSIX.1-2008, which the build asks for) */
#define _DEFAULT_SOURCE 1

#include "lq_kernels_impl.h"
#include "lq_ops_impl.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Host buffers carry a 64-byte header saying how they were made. From HOST_MAP_MIN bytes they
 * are pages of their own (mmap): the buffers a conversion makes and drops each layer and group
 * (captures, candidates, Gram matrices) then go back to the system when released, where heap
 * blocks of a few MiB at 64-byte alignment fragmented the heap (SmolLM2 AWQ: RSS +7-10 MiB a
 * layer). */
#define HOST_MAP_MIN ((size_t)1 << 20)
#define HOST_HDR     64
typedef struct host_hdr {
    size_t   total; /* bytes mapped or allocated, header included */
    uint32_t magic;
    uint32_t mapped;
} host_hdr;
#define HOST_MAGIC 0x6c71686bu

lq_status lq_ops_host_alloc(lq_be *be, void **p, size_t bytes) {
    *p = NULL;
    if (bytes == 0)
        return LQ_OK;
    if (bytes > SIZE_MAX - 2 * HOST_HDR)
        return LQ_ERR_NOMEM;
    const size_t total = bytes + HOST_HDR;
    char        *base  = NULL;
    int          mapped = 0;
    if (bytes >= HOST_MAP_MIN) {
        void *m = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m != MAP_FAILED)
            base = m, mapped = 1;
    }
    if (!base)
        base = lq_aligned_alloc(total);
    if (!base)
        return LQ_ERR_NOMEM;
    host_hdr *h = (host_hdr *)(void *)base;
    h->total    = total;
    h->magic    = HOST_MAGIC;
    h->mapped   = (uint32_t)mapped;
    *p          = base + HOST_HDR;
    lq_be_count(be, (int64_t)bytes);
    return LQ_OK;
}

void lq_ops_host_release(lq_be *be, void *p, size_t bytes) {
    if (!p)
        return;
    char     *base = (char *)p - HOST_HDR;
    host_hdr *h    = (host_hdr *)(void *)base;
    if (h->magic != HOST_MAGIC) /* not ours: a caller bug, left alone rather than corrupted */
        return;
    h->magic = 0;
    if (h->mapped)
        munmap(base, h->total);
    else
        lq_aligned_free(base);
    lq_be_count(be, -(int64_t)bytes);
}

lq_status lq_ops_host_copy(lq_be *be, void *dst, const void *src, size_t bytes) {
    if (bytes && dst != src)
        memmove(dst, src, bytes);
    return LQ_OK;
}

lq_status lq_ops_host_zero(lq_be *be, void *dst, size_t bytes) {
    if (bytes)
        memset(dst, 0, bytes);
    return LQ_OK;
}

lq_status lq_ops_host_copy2d(lq_be *be, float *dst, int64_t ldd, const float *src, int64_t lds,
                             int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; r++)
        memmove(dst + r * ldd, src + r * lds, (size_t)cols * sizeof(float));
    return LQ_OK;
}

lq_status lq_ops_host_sync(lq_be *be) {
    return LQ_OK;
}

lq_status lq_ops_host_linear_upload(lq_be *be, const lq_qlinear *w, lq_qlinear *dw, void **mem,
                                    size_t *bytes) {
    *dw    = *w;
    *mem   = NULL;
    *bytes = 0;
    return LQ_OK;
}

static lq_status ref_rmsnorm(lq_be *be, const float *x, const float *w, int64_t rows, int64_t d,
                             double eps, int plus_one, float *out) {
    for (int64_t r = 0; r < rows; r++)
        lq_rmsnorm_row(x + r * d, w, d, eps, plus_one, out + r * d);
    return LQ_OK;
}

static lq_status ref_rope(lq_be *be, float *x, int64_t T, int64_t ld, int64_t nheads,
                          int64_t half, int64_t seqlen, const float *cs, const float *sn) {
    for (int64_t t = 0; t < T; t++) {
        const int64_t p = t % seqlen;
        lq_rope_row(x + t * ld, nheads, half, cs + p * half, sn + p * half);
    }
    return LQ_OK;
}

/* Query by query: scores in double rounded to float, the reference softmax, P V in double. */
static lq_status ref_attention(lq_be *be, const lq_attn_args *a) {
    const int64_t L = a->seqlen, T = a->ns * L, hd = a->head_dim, H = a->heads;
    const int64_t qd = H * hd, kvd = a->kv_heads * hd, group = H / a->kv_heads;
    float        *S  = malloc((size_t)L * sizeof *S);
    float        *aw = a->attn_w ? calloc((size_t)(H * T), sizeof *aw) : NULL;
    if (!S || (a->attn_w && !aw)) {
        free(S), free(aw);
        return LQ_ERR_NOMEM;
    }
    for (int64_t s = 0; s < a->ns; s++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < L; i++) {
                const int64_t lo = a->window > 0 && i - a->window + 1 > 0 ? i - a->window + 1 : 0;
                const float  *qi = a->q + (s * L + i) * qd + h * hd;
                for (int64_t j = lo; j <= i; j++) {
                    const float *kj  = a->k + (s * L + j) * kvd + (h / group) * hd;
                    double       acc = 0;
                    for (int64_t c = 0; c < hd; c++)
                        acc += (double)qi[c] * kj[c];
                    float sc = (float)acc * a->scale;
                    if (a->softcap > 0)
                        sc = tanhf(sc / a->softcap) * a->softcap;
                    S[j] = sc;
                }
                lq_vec_ops_ref.softmax_row(S, i + 1, lo, i);
                if (aw)
                    for (int64_t j = lo; j <= i; j++)
                        aw[h * T + s * L + j] += S[j] * S[j];
                if (!a->out)
                    continue;
                float *o = a->out + (s * L + i) * qd + h * hd;
                for (int64_t c = 0; c < hd; c++) {
                    double acc = 0;
                    for (int64_t j = lo; j <= i; j++)
                        acc += (double)S[j] * a->v[(s * L + j) * kvd + (h / group) * hd + c];
                    o[c] = (float)acc;
                }
            }
    for (int64_t t = 0; aw && t < T; t++) {
        float sum = 0.f;
        for (int64_t h = 0; h < H; h++)
            sum += aw[h * T + t];
        a->attn_w[t] = sum;
    }
    free(S), free(aw);
    return LQ_OK;
}

static lq_status ref_glu(lq_be *be, float *g, const float *gate, const float *up, int64_t ld,
                         int64_t T, int64_t ff, int act) {
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < ff; i++) {
            const float x = gate[t * ld + i], u = up[t * ld + i];
            g[t * ff + i] = act == LQ_ACT_GELU_TANH_GLU ? lq_gelu_tanh(x) * u
                                                        : x / (1.0f + expf(-x)) * u;
        }
    return LQ_OK;
}

static lq_status ref_add(lq_be *be, float *out, const float *a, const float *b, int64_t count) {
    for (int64_t i = 0; i < count; i++)
        out[i] = a[i] + b[i];
    return LQ_OK;
}

static lq_status ref_softcap(lq_be *be, float *x, int64_t count, float cap) {
    for (int64_t i = 0; i < count; i++)
        x[i] = tanhf(x[i] / cap) * cap;
    return LQ_OK;
}

static lq_status ref_linear(lq_be *be, const lq_qlinear *w, const float *bias, const float *x,
                            int64_t t, float *y) {
    if (t <= 0)
        return LQ_OK;
    if (lq_qlinear_check(w, NULL) != LQ_OK)
        return LQ_ERR_INVALID_ARG;
    const lq_format_traits *tr = lq_format_traits_get((lq_format)w->format);
    if (!tr || !tr->gemm_ref)
        return LQ_ERR_UNSUPPORTED;
    tr->gemm_ref(w, x, t, y);
    if (bias)
        for (int64_t r = 0; r < t; r++)
            for (int64_t i = 0; i < w->n; i++)
                y[r * w->n + i] += bias[i];
    return LQ_OK;
}

static lq_status ref_moe_route(lq_be *be, float *p, int64_t T, int64_t E, int64_t K, int norm,
                               int32_t *sel, float *w) {
    for (int64_t t = 0; t < T; t++)
        lq_moe_route_row(p + t * E, E, K, norm, sel + t * K, w + t * K);
    return LQ_OK;
}

lq_status lq_ref_op_gather_rows(lq_be *be, float *dst, const float *src, const int32_t *idx,
                                 int64_t cnt, int64_t d, int64_t div) {
    for (int64_t i = 0; i < cnt; i++)
        memcpy(dst + i * d, src + (idx[i] / div) * d, (size_t)d * sizeof(float));
    return LQ_OK;
}

lq_status lq_ref_op_scatter_add(lq_be *be, float *out, const float *y, const int32_t *idx,
                                 const float *wt, int64_t cnt, int64_t d, int64_t div) {
    for (int64_t i = 0; i < cnt; i++) {
        const float w = wt[idx[i]];
        float      *o = out + (idx[i] / div) * d;
        for (int64_t x = 0; x < d; x++)
            o[x] += y[i * d + x] * w;
    }
    return LQ_OK;
}

lq_status lq_ref_op_gate_add(lq_be *be, float *out, const float *y, const float *g, int64_t T,
                              int64_t d) {
    for (int64_t t = 0; t < T; t++) {
        const float gt = 1.0f / (1.0f + expf(-g[t]));
        for (int64_t i = 0; i < d; i++)
            out[t * d + i] += gt * y[t * d + i];
    }
    return LQ_OK;
}

static lq_status ref_syrk(lq_be *be, float *H, const float *x, int64_t t, int64_t k, float alpha,
                          float beta) {
    for (int64_t i = 0; i < k; i++)
        for (int64_t j = i; j < k; j++) {
            double acc = 0;
            for (int64_t r = 0; r < t; r++)
                acc += (double)x[r * k + i] * x[r * k + j];
            const double prev = beta != 0.f ? (double)beta * H[i * k + j] : 0.0;
            H[i * k + j]      = (float)(prev + (double)alpha * acc);
        }
    return LQ_OK;
}

lq_status lq_ref_op_scale_rows(lq_be *be, float *dst, const float *x, const float *a, int64_t t,
                                int64_t k) {
    for (int64_t r = 0; r < t; r++) {
        const float sa = sqrtf(a[r]);
        for (int64_t c = 0; c < k; c++)
            dst[r * k + c] = x[r * k + c] * sa;
    }
    return LQ_OK;
}

lq_status lq_ref_op_col_absmax(lq_be *be, float *amax, const float *x, int64_t t, int64_t k) {
    for (int64_t r = 0; r < t; r++)
        for (int64_t c = 0; c < k; c++) {
            const float v = fabsf(x[r * k + c]);
            amax[c]       = v > amax[c] ? v : amax[c];
        }
    return LQ_OK;
}

lq_status lq_ref_op_col_abssum(lq_be *be, float *sum, const float *x, int64_t t, int64_t k) {
    for (int64_t r = 0; r < t; r++)
        for (int64_t c = 0; c < k; c++)
            sum[c] += fabsf(x[r * k + c]);
    return LQ_OK;
}


static lq_status ref_awq_fakequant(lq_be *be, const float *w, const float *s, int64_t n, int64_t k,
                                   int64_t group, int bits, float *out) {
    const int64_t g = group <= 0 || group > k ? k : group;
    for (int64_t r = 0; r < n; r++)
        lq_awq_fakequant_row(w + r * k, s, k, g, (1 << bits) - 1, out + r * k);
    return LQ_OK;
}

static lq_status ref_awq_clip(lq_be *be, float *w, int64_t n, int64_t k, const float *x, int64_t t,
                              int64_t group, int bits) {
    const int64_t g = group <= 0 || group > k ? k : group;
    if (k % g)
        return LQ_ERR_INVALID_ARG;
    int64_t ts;
    float  *xs = lq_awq_clip_sample(x, t, k, &ts);
    float  *wq = malloc((size_t)g * sizeof *wq), *orig = malloc((size_t)ts * sizeof *orig),
          *out = malloc((size_t)ts * sizeof *out);
    if (xs && wq && orig && out)
        for (int64_t r = 0; r < n; r++)
            for (int64_t c0 = 0; c0 < k; c0 += g)
                lq_awq_clip_group(w + r * k + c0, xs + c0 * ts, ts, g, (1 << bits) - 1, wq, orig,
                                  out);
    const lq_status st = xs && wq && orig && out ? LQ_OK : LQ_ERR_NOMEM;
    free(xs), free(wq), free(orig), free(out);
    return st;
}

lq_status lq_ref_op_sqdiff(lq_be *be, const float *a, const float *b, int64_t count, double *out) {
    double s = 0;
    for (int64_t i = 0; i < count; i++) {
        const double d = (double)a[i] - b[i];
        s += d * d;
    }
    *out = s;
    return LQ_OK;
}

lq_status lq_ref_op_dot(lq_be *be, const float *a, const float *b, int64_t count, double *out) {
    double s = 0;
    for (int64_t i = 0; i < count; i++)
        s += (double)a[i] * b[i];
    *out = s;
    return LQ_OK;
}

static lq_status ref_sub(lq_be *be, float *out, const float *a, const float *b, int64_t count) {
    for (int64_t i = 0; i < count; i++)
        out[i] = a[i] - b[i];
    return LQ_OK;
}

static lq_status ref_sym_upper(lq_be *be, float *H, int64_t k) {
    for (int64_t i = 0; i < k; i++)
        for (int64_t j = 0; j < i; j++)
            H[i * k + j] = H[j * k + i];
    return LQ_OK;
}

lq_status lq_ref_op_div_cols(lq_be *be, float *x, int64_t t, int64_t k, const float *s) {
    for (int64_t r = 0; r < t; r++)
        for (int64_t c = 0; c < k; c++)
            x[r * k + c] /= s[c];
    return LQ_OK;
}

static lq_status ref_gemm(lq_be *be, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha,
                          const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                          float *C, int64_t ldc) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double acc = 0;
            for (int64_t p = 0; p < k; p++)
                acc += (double)(ta ? A[p * lda + i] : A[i * lda + p]) *
                       (tb ? B[j * ldb + p] : B[p * ldb + j]);
            const double prev = beta != 0.f ? (double)beta * C[i * ldc + j] : 0.0;
            C[i * ldc + j]    = (float)(prev + (double)alpha * acc);
        }
    return LQ_OK;
}

static const lq_ops k_ops_ref = {
    .name          = "ref",
    .device        = 0,
    .alloc         = lq_ops_host_alloc,
    .release       = lq_ops_host_release,
    .upload        = lq_ops_host_copy,
    .download      = lq_ops_host_copy,
    .copy          = lq_ops_host_copy,
    .zero          = lq_ops_host_zero,
    .copy2d        = lq_ops_host_copy2d,
    .sync          = lq_ops_host_sync,
    .rmsnorm       = ref_rmsnorm,
    .rope          = ref_rope,
    .attention     = ref_attention,
    .glu           = ref_glu,
    .add           = ref_add,
    .softcap       = ref_softcap,
    .linear        = ref_linear,
    .linear_upload = lq_ops_host_linear_upload,
    .moe_route     = ref_moe_route,
    .gather_rows   = lq_ref_op_gather_rows,
    .scatter_add   = lq_ref_op_scatter_add,
    .gate_add      = lq_ref_op_gate_add,
    .syrk          = ref_syrk,
    .scale_rows    = lq_ref_op_scale_rows,
    .col_absmax    = lq_ref_op_col_absmax,
    .col_abssum    = lq_ref_op_col_abssum,
    .awq_fakequant = ref_awq_fakequant,
    .awq_clip      = ref_awq_clip,
    .sqdiff        = lq_ref_op_sqdiff,
    .dot           = lq_ref_op_dot,
    .sub           = ref_sub,
    .gemm          = ref_gemm,
    .sym_upper     = ref_sym_upper,
    .div_cols      = lq_ref_op_div_cols,
};

const lq_ops *lq_ops_ref(void) {
    return &k_ops_ref;
}
