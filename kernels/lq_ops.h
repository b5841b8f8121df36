/* lq_ops.h -- the op table: every tensor operation a model forward or a method's statistics
 * perform, once per backend, over buffers that live on that backend.
 *
 * Three backends fill the same table:
 *   ref   scalar loops on host memory, no threads, no SIMD: the oracle (kernels/ref/);
 *   cpu   the optimized CPU code (OpenMP, the ISA kernels, OpenBLAS; kernels/cpu/);
 *   cuda  device memory, kernels and cuBLAS on one stream (kernels/cuda/; NULL without CUDA).
 * The forward (quant/model) and the methods call ops through an lq_be and never ask which
 * backend it is; tests/test_ops.c binds every op of every backend to the ref backend by one case
 * table (`test_ops -b cpu|cuda`).
 *
 * Conventions: tensors are row-major float32 unless said otherwise; a pointer named in an op is
 * backend memory (host memory for ref and cpu, device memory for cuda); ops run in the order
 * they are called and may be asynchronous on a device (download and sync wait); an op never
 * frees what it was given. Scratch an op needs comes from the backend (lq_be_scratch), so the
 * ops of one lq_be run one at a time: one lq_be per thread. */
#ifndef LQ_OPS_H
#define LQ_OPS_H

#include "lq_base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lq_ops lq_ops;

/* What the dense products of a device backend compute in: LQ_PREC_F32 keeps them float32
 * (cuBLAS pedantic: the CPU-parity switch); LQ_PREC_FAST keeps dense weights as bf16 on the
 * device and multiplies bf16 x bf16 with float32 accumulation, attention's products in TF32
 * (the residual stream, norms, softmax and statistics stay float32). CPU backends are float32
 * whatever this says. */
enum { LQ_PREC_F32 = 0, LQ_PREC_FAST = 1 };

/* A backend instance: the table, its settings and the scratch its ops share. */
typedef struct lq_be {
    const lq_ops *ops;
    int           nthreads;  /* cpu: OpenMP threads of an op (<= 0: the default) */
    unsigned      kflags;    /* cpu: lq_qlinear_forward_cpu_ex flags of quantized linears */
    int           precision; /* LQ_PREC_* */
    lq_cuda_ctx  *cuda;      /* cuda: the device context (borrowed) */
    void         *stream;    /* cuda: cudaStream_t of every op (the context's) */
    void         *scratch;   /* backend memory shared by the ops (grown, never shrunk) */
    size_t        scratch_cap;
    int64_t       cur_bytes, peak_bytes; /* memory allocated through ops->alloc, and its peak */
    char          errmsg[192];           /* cause of the last failed op (device errors) */
} lq_be;

/* Attention of ns sequences of seqlen tokens (token t of the chunk is at position t % seqlen):
 * causal, a query seeing keys within `window` positions when window > 0 (sliding window), query
 * head h reading KV head h / (heads / kv_heads), scores times scale, then
 * softcap * tanh(score / softcap) when softcap > 0, softmax in float32. */
typedef struct lq_attn_args {
    const float *q;      /* [T, heads * head_dim], T = ns * seqlen */
    const float *k, *v;  /* [T, kv_heads * head_dim] */
    float       *out;    /* [T, heads * head_dim], or NULL: attn_w alone (v not read) */
    float       *attn_w; /* [T] or NULL: for each key token, the sum over heads and queries of
                            its squared attention probability (summed over heads in order, so
                            the result does not depend on the schedule) */
    int64_t      ns, seqlen, heads, kv_heads, head_dim, window;
    float        scale, softcap;
} lq_attn_args;

enum { LQ_ACT_SILU_GLU = 0, LQ_ACT_GELU_TANH_GLU = 1 };

struct lq_ops {
    const char *name;   /* "ref", "cpu", "cuda" */
    int         device; /* buffers live apart from host memory: reach them by upload/download */

    /* --- memory ------------------------------------------------------------------------- */
    /* 64-byte aligned on the host, 256 on a device; LQ_ERR_NOMEM when full */
    lq_status (*alloc)(lq_be *be, void **p, size_t bytes);
    void (*release)(lq_be *be, void *p, size_t bytes);     /* NULL: nothing */
    lq_status (*upload)(lq_be *be, void *dst, const void *host_src, size_t bytes);
    lq_status (*download)(lq_be *be, void *host_dst, const void *src, size_t bytes); /* waits */
    lq_status (*copy)(lq_be *be, void *dst, const void *src, size_t bytes);
    lq_status (*zero)(lq_be *be, void *dst, size_t bytes);
    /* dst[r * ldd + c] = src[r * lds + c] for r < rows, c < cols */
    lq_status (*copy2d)(lq_be *be, float *dst, int64_t ldd, const float *src, int64_t lds,
                        int64_t rows, int64_t cols);
    lq_status (*sync)(lq_be *be);

    /* --- the forward -------------------------------------------------------------------- */
    /* out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w, or * (1 + w) when plus_one (Gemma), the
     * mean in double; out may be x. */
    lq_status (*rmsnorm)(lq_be *be, const float *x, const float *w, int64_t rows, int64_t d,
                         double eps, int plus_one, float *out);
    /* Rotate-half RoPE in place on x [T, ld]: nheads heads of 2 * half values from column 0,
     * token t at position t % seqlen, cs / sn [positions, half] the cos / sin table. */
    lq_status (*rope)(lq_be *be, float *x, int64_t T, int64_t ld, int64_t nheads, int64_t half,
                      int64_t seqlen, const float *cs, const float *sn);
    lq_status (*attention)(lq_be *be, const lq_attn_args *a);
    /* g[t, i] = act(gate[t * ld + i]) * up[t * ld + i] for i < ff (g may be gate when ld is
     * ff); act LQ_ACT_SILU_GLU or LQ_ACT_GELU_TANH_GLU (PyTorch's tanh approximation) */
    lq_status (*glu)(lq_be *be, float *g, const float *gate, const float *up, int64_t ld,
                     int64_t T, int64_t ff, int act);
    /* out[i] = a[i] + b[i] (out may be a or b) */
    lq_status (*add)(lq_be *be, float *out, const float *a, const float *b, int64_t count);
    /* x[i] = cap * tanh(x[i] / cap) */
    lq_status (*softcap)(lq_be *be, float *x, int64_t count, float cap);
    /* y[t, n] = x[t, k] W^T (+ the descriptor's fp16 bias) (+ bias[n], float32, when not NULL),
     * w's arrays in backend memory (lq_be_linear_upload makes them so). */
    lq_status (*linear)(lq_be *be, const lq_qlinear *w, const float *bias, const float *x,
                        int64_t t, float *y);
    /* The descriptor of host linear w on the backend: *dw with its arrays in one backend
     * buffer *mem of *bytes (the cpu backends: *dw = *w, nothing allocated). Dense float32
     * weights become bf16 on a device under LQ_PREC_FAST. Release with release(mem, bytes). */
    lq_status (*linear_upload)(lq_be *be, const lq_qlinear *w, lq_qlinear *dw, void **mem,
                               size_t *bytes);
    /* Mixture-of-experts routing of T tokens over E experts: p [T, E] router logits in,
     * softmax probabilities out; sel [T, K] the K most probable experts in order (ties to the
     * lower index), w [T, K] their probabilities, divided by their sum when norm. */
    lq_status (*moe_route)(lq_be *be, float *p, int64_t T, int64_t E, int64_t K, int norm,
                           int32_t *sel, float *w);
    /* dst[i] = src row idx[i] / div, d values each, i < cnt */
    lq_status (*gather_rows)(lq_be *be, float *dst, const float *src, const int32_t *idx,
                             int64_t cnt, int64_t d, int64_t div);
    /* out row idx[i] / div += y[i] * wt[idx[i]], i < cnt in order (no two idx[i] / div of one
     * call may be equal) */
    lq_status (*scatter_add)(lq_be *be, float *out, const float *y, const int32_t *idx,
                             const float *wt, int64_t cnt, int64_t d, int64_t div);
    /* out[t, :] += sigmoid(g[t]) * y[t, :] (a shared expert's gate) */
    lq_status (*gate_add)(lq_be *be, float *out, const float *y, const float *g, int64_t T,
                          int64_t d);

    /* --- the methods' statistics -------------------------------------------------------- */
    /* H[k, k] = beta * H + alpha * x^T x on the upper triangle (j >= i; the lower one is
     * undefined afterwards), x [t, k] */
    lq_status (*syrk)(lq_be *be, float *H, const float *x, int64_t t, int64_t k, float alpha,
                      float beta);
    /* dst[r, :] = x[r, :] * sqrt(a[r]) (dst may be x) */
    lq_status (*scale_rows)(lq_be *be, float *dst, const float *x, const float *a, int64_t t,
                            int64_t k);
    /* amax[c] = max(amax[c], max_r |x[r, c]|) */
    lq_status (*col_absmax)(lq_be *be, float *amax, const float *x, int64_t t, int64_t k);
    /* sum[c] += |x[r, c]| for the rows in order, in float32 (AWQ's activation means: one
     * accumulation whether the rows come at once or in capture chunks) */
    lq_status (*col_abssum)(lq_be *be, float *sum, const float *x, int64_t t, int64_t k);

    /* --- AWQ's searches and the small algebra around them --------------------------------- */
    /* out[r, c] = Q(w[r, c] s[c]) / s[c]: each row's groups of `group` inputs rounded to `bits`
     * with min/max zero-point codes (lq_awq_quant_group), AWQ's candidate; out may be w */
    lq_status (*awq_fakequant)(lq_be *be, const float *w, const float *s, int64_t n, int64_t k,
                               int64_t group, int bits, float *out);
    /* AWQ's clip search of one linear w [n, k] in place (AutoAWQ auto_clip_layer): per row and
     * group, the max |w| shrunk in 10 steps of 5 %, the one whose rounded group gives the least
     * squared output error over every (t / 512)-th row of x [t, k] kept */
    lq_status (*awq_clip)(lq_be *be, float *w, int64_t n, int64_t k, const float *x, int64_t t,
                          int64_t group, int bits);
    /* *out = sum (a[i] - b[i])^2, in double (the value comes to the host: it waits) */
    lq_status (*sqdiff)(lq_be *be, const float *a, const float *b, int64_t count, double *out);
    /* *out = sum a[i] b[i], in double (waits) */
    lq_status (*dot)(lq_be *be, const float *a, const float *b, int64_t count, double *out);
    /* out[i] = a[i] - b[i] */
    lq_status (*sub)(lq_be *be, float *out, const float *a, const float *b, int64_t count);
    /* row-major C [m, n] = alpha op(A) op(B) + beta C (lq_sgemm's conventions; C not read when
     * beta is 0), float32 on every backend and precision */
    lq_status (*gemm)(lq_be *be, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha,
                      const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                      float *C, int64_t ldc);
    /* H[i, j] = H[j, i] for j < i: the upper triangle of H [k, k] mirrored */
    lq_status (*sym_upper)(lq_be *be, float *H, int64_t k);
    /* x[r, c] /= s[c] */
    lq_status (*div_cols)(lq_be *be, float *x, int64_t t, int64_t k, const float *s);
};

/* The tables: ref and cpu always, cuda in a CUDA build (NULL otherwise). */
const lq_ops *lq_ops_ref(void);
const lq_ops *lq_ops_cpu(void);
const lq_ops *lq_ops_cuda(void);

/* A host backend (ref or cpu): nothing to release but the scratch. */
void lq_be_init_host(lq_be *be, const lq_ops *ops, int nthreads);
/* The cuda backend on ctx (borrowed; its stream), LQ_ERR_NO_CUDA_BUILD without CUDA. */
lq_status lq_be_init_cuda(lq_be *be, lq_cuda_ctx *ctx, int precision, lq_err *err);
/* Frees the scratch (not what the caller allocated through the backend). */
void lq_be_free(lq_be *be);
/* At least `bytes` of backend scratch (valid until the next op that asks for scratch). */
lq_status lq_be_scratch(lq_be *be, size_t bytes, void **p);
/* Memory counters of alloc / release (the backends call them). */
void lq_be_count(lq_be *be, int64_t delta);
/* "cuda: <op>: <cause>" after a failed op, for the caller's message. */
const char *lq_be_error(const lq_be *be);

/* The cpu backend's linear for callers with their own scratch (lq_linear_forward_ex): the
 * format's kernel (its reduced-precision-activation kernel where flags and the format say so,
 * in chunks of LQ_QLINEAR_INT_X_ROWS rows), then + bias. ws: at least lq_linear_ws_cpu bytes,
 * 64-byte aligned, or NULL to allocate for the call. */
size_t    lq_linear_ws_cpu(const lq_qlinear *w, int64_t m, unsigned flags);
lq_status lq_linear_forward_cpu(const lq_qlinear *w, const float *bias, const float *x, int64_t m,
                                float *y, void *ws, size_t ws_size, int nthreads, unsigned flags);

#ifdef __cplusplus
}
#endif
#endif
