/* The op table (kernels/lq_ops.h) bound to its oracle, ggml's test-backend-ops in spirit: one
 * case table of every op over shapes and ragged edges, run on the backend named by -b (cpu,
 * cuda, or ref against itself) and on the ref backend from the same inputs, compared by NMSE
 * (sum (a - b)^2 / sum a^2) against a bound per op and backend; 0 means bit for bit.
 *
 *   test_ops [-b cpu|cuda|ref] [-p f32|fast|all] [-f SUBSTRING] [-v]
 *
 * -b cuda runs every case under both precisions of the cuda backend (-p picks one): LQ_PREC_F32
 * with float32 bounds, LQ_PREC_FAST with bf16 / TF32 ones; it exits 77 (SKIP) without a device.
 * Seeds are fixed and a failure prints the case, the seed and the error. */
#include "lq_test_cuda.h"
#include "lq_ops.h"
#include "lq_test.h"
#include "lq_test_qlinear.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct ctx {
    lq_be      *be;  /* backend under test */
    lq_be      *ref; /* the oracle */
    int         prec;
    int         verbose;
    const char *filter;
    int         ran;
} ctx;

/* ------------------------------------------------------------------------------------------
 * Buffers: host arrays mirrored on the backend under test
 * ------------------------------------------------------------------------------------------ */
static void *put(lq_be *be, const void *host, size_t bytes) {
    void *p = NULL;
    if (be->ops->alloc(be, &p, bytes ? bytes : 4) != LQ_OK) {
        fprintf(stderr, "test_ops: %s alloc of %zu bytes failed: %s\n", be->ops->name, bytes,
                lq_be_error(be));
        exit(1);
    }
    if (host && bytes && be->ops->upload(be, p, host, bytes) != LQ_OK) {
        fprintf(stderr, "test_ops: upload failed: %s\n", lq_be_error(be));
        exit(1);
    }
    return p;
}

static void get(lq_be *be, void *host, const void *p, size_t bytes) {
    if (be->ops->download(be, host, p, bytes) != LQ_OK) {
        fprintf(stderr, "test_ops: download failed: %s\n", lq_be_error(be));
        exit(1);
    }
}

static void drop(lq_be *be, void *p, size_t bytes) {
    be->ops->release(be, p, bytes ? bytes : 4);
}

static float *randf(lq_rng *r, int64_t n, float scale) {
    float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof *x);
    for (int64_t i = 0; i < n; i++)
        x[i] = lq_rng_normal(r) * scale;
    return x;
}

static double nmse(const float *ref, const float *got, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        const double d = (double)ref[i] - got[i];
        if (isnan(got[i]) != isnan(ref[i]))
            return INFINITY;
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? num / den : num;
}

static int want(ctx *c, const char *name) {
    return !c->filter || strstr(name, c->filter);
}

/* One comparison: exact when tol is 0. */
static void judge(ctx *c, const char *name, uint64_t seed, const float *ref, const float *got,
                  int64_t n, double tol) {
    const double e = nmse(ref, got, n);
    int          ok;
    if (tol == 0) {
        ok = !memcmp(ref, got, (size_t)n * sizeof(float));
        CHECK_MSG(ok, "%s/%s (seed %llu): not bit for bit (NMSE %.3g)", c->be->ops->name, name,
                  (unsigned long long)seed, e);
    } else {
        ok = e <= tol;
        CHECK_MSG(ok, "%s/%s (seed %llu): NMSE %.3g over %.3g", c->be->ops->name, name,
                  (unsigned long long)seed, e, tol);
    }
    c->ran++;
    if (c->verbose)
        printf("  %-48s NMSE %.3g (bound %.3g) %s\n", name, e, tol, ok ? "ok" : "FAIL");
}

static int is(const ctx *c, const char *b) {
    return !strcmp(c->be->ops->name, b);
}

/* The bound of an op on the backend under test: ref exact, cpu its own, cuda by precision. */
static double tol3(const ctx *c, double cpu, double cuda_f32, double cuda_fast) {
    return is(c, "ref")   ? 0
           : is(c, "cpu") ? cpu
                          : c->prec == LQ_PREC_F32 ? cuda_f32 : cuda_fast;
}

/* ------------------------------------------------------------------------------------------
 * Cases
 * ------------------------------------------------------------------------------------------ */
static void case_rmsnorm(ctx *c, int64_t rows, int64_t d, int plus_one, int inplace) {
    char name[96];
    snprintf(name, sizeof name, "rmsnorm rows=%lld d=%lld%s%s", (long long)rows, (long long)d,
             plus_one ? " plus_one" : "", inplace ? " in place" : "");
    if (!want(c, name))
        return;
    const uint64_t seed = 100 + (uint64_t)(rows * 131 + d);
    lq_rng         r;
    lq_rng_seed(&r, seed);
    float *x = randf(&r, rows * d, 3.f), *w = randf(&r, d, 1.f), *a = malloc((size_t)(rows * d) * 4),
          *b = malloc((size_t)(rows * d) * 4);
    memcpy(a, x, (size_t)(rows * d) * 4);
    CHECK_OK(c->ref->ops->rmsnorm(c->ref, a, w, rows, d, 1e-6, plus_one, a));
    float *dx = put(c->be, x, (size_t)(rows * d) * 4), *dw = put(c->be, w, (size_t)d * 4);
    float *dout = inplace ? dx : put(c->be, NULL, (size_t)(rows * d) * 4);
    CHECK_OK(c->be->ops->rmsnorm(c->be, dx, dw, rows, d, 1e-6, plus_one, dout));
    get(c->be, b, dout, (size_t)(rows * d) * 4);
    judge(c, name, seed, a, b, rows * d, tol3(c, 0, 1e-13, 1e-13));
    if (!inplace)
        drop(c->be, dout, (size_t)(rows * d) * 4);
    drop(c->be, dx, (size_t)(rows * d) * 4), drop(c->be, dw, (size_t)d * 4);
    free(x), free(w), free(a), free(b);
}

static void case_rope(ctx *c, int64_t T, int64_t nheads, int64_t half, int64_t seqlen,
                      int64_t extra) {
    char name[96];
    snprintf(name, sizeof name, "rope T=%lld heads=%lld half=%lld seqlen=%lld ld+%lld",
             (long long)T, (long long)nheads, (long long)half, (long long)seqlen, (long long)extra);
    if (!want(c, name))
        return;
    const uint64_t seed = 200 + (uint64_t)(T * 7 + half);
    lq_rng         r;
    lq_rng_seed(&r, seed);
    const int64_t ld = nheads * 2 * half + extra, n = T * ld;
    float        *x = randf(&r, n, 1.f), *cs = malloc((size_t)(seqlen * half) * 4),
          *sn = malloc((size_t)(seqlen * half) * 4), *a = malloc((size_t)n * 4),
          *b = malloc((size_t)n * 4);
    for (int64_t p = 0; p < seqlen; p++)
        for (int64_t j = 0; j < half; j++) {
            const double ang = (double)p * pow(10000.0, -2.0 * (double)j / (double)(2 * half));
            cs[p * half + j] = (float)cos(ang), sn[p * half + j] = (float)sin(ang);
        }
    memcpy(a, x, (size_t)n * 4);
    CHECK_OK(c->ref->ops->rope(c->ref, a, T, ld, nheads, half, seqlen, cs, sn));
    float *dx = put(c->be, x, (size_t)n * 4), *dc = put(c->be, cs, (size_t)(seqlen * half) * 4),
          *ds = put(c->be, sn, (size_t)(seqlen * half) * 4);
    CHECK_OK(c->be->ops->rope(c->be, dx, T, ld, nheads, half, seqlen, dc, ds));
    get(c->be, b, dx, (size_t)n * 4);
    judge(c, name, seed, a, b, n, tol3(c, 0, 0, 0));
    drop(c->be, dx, (size_t)n * 4), drop(c->be, dc, (size_t)(seqlen * half) * 4),
        drop(c->be, ds, (size_t)(seqlen * half) * 4);
    free(x), free(cs), free(sn), free(a), free(b);
}

typedef struct att_case {
    int64_t ns, seqlen, H, KV, hd, window;
    float   softcap;
    int     weights; /* 0 none, 1 with the output, 2 alone */
} att_case;

static void case_attention(ctx *c, att_case ac) {
    char name[128];
    snprintf(name, sizeof name, "attention ns=%lld L=%lld H=%lld KV=%lld hd=%lld win=%lld cap=%g w=%d",
             (long long)ac.ns, (long long)ac.seqlen, (long long)ac.H, (long long)ac.KV,
             (long long)ac.hd, (long long)ac.window, (double)ac.softcap, ac.weights);
    if (!want(c, name))
        return;
    const uint64_t seed = 300 + (uint64_t)(ac.seqlen * 13 + ac.H * 3 + ac.hd + ac.weights);
    lq_rng         r;
    lq_rng_seed(&r, seed);
    const int64_t T = ac.ns * ac.seqlen, qd = ac.H * ac.hd, kvd = ac.KV * ac.hd;
    float *q = randf(&r, T * qd, 1.f), *k = randf(&r, T * kvd, 1.f), *v = randf(&r, T * kvd, 1.f);
    float *oa = calloc((size_t)(T * qd), 4), *ob = calloc((size_t)(T * qd), 4);
    float *wa = calloc((size_t)T, 4), *wb = calloc((size_t)T, 4);
    lq_attn_args a = {q, k, v, ac.weights == 2 ? NULL : oa, ac.weights ? wa : NULL,
                      ac.ns, ac.seqlen, ac.H, ac.KV, ac.hd, ac.window,
                      1.0f / sqrtf((float)ac.hd), ac.softcap};
    CHECK_OK(c->ref->ops->attention(c->ref, &a));
    float *dq = put(c->be, q, (size_t)(T * qd) * 4), *dk = put(c->be, k, (size_t)(T * kvd) * 4),
          *dv = put(c->be, v, (size_t)(T * kvd) * 4), *dout = put(c->be, ob, (size_t)(T * qd) * 4),
          *dw = put(c->be, NULL, (size_t)T * 4);
    lq_attn_args b = a;
    b.q = dq, b.k = dk, b.v = dv, b.out = ac.weights == 2 ? NULL : dout, b.attn_w = ac.weights ? dw : NULL;
    CHECK_OK(c->be->ops->attention(c->be, &b));
    const double tol = tol3(c, 1e-11, 1e-11, 2e-6);
    if (ac.weights != 2) {
        get(c->be, ob, dout, (size_t)(T * qd) * 4);
        judge(c, name, seed, oa, ob, T * qd, tol);
    }
    if (ac.weights) {
        char wn[140];
        snprintf(wn, sizeof wn, "%s [weights]", name);
        get(c->be, wb, dw, (size_t)T * 4);
        judge(c, wn, seed, wa, wb, T, tol);
    }
    drop(c->be, dq, (size_t)(T * qd) * 4), drop(c->be, dk, (size_t)(T * kvd) * 4),
        drop(c->be, dv, (size_t)(T * kvd) * 4), drop(c->be, dout, (size_t)(T * qd) * 4),
        drop(c->be, dw, (size_t)T * 4);
    free(q), free(k), free(v), free(oa), free(ob), free(wa), free(wb);
}

static void case_glu(ctx *c, int64_t T, int64_t ff, int fused, int act) {
    char name[96];
    snprintf(name, sizeof name, "glu T=%lld ff=%lld %s %s", (long long)T, (long long)ff,
             fused ? "fused" : "in place", act == LQ_ACT_GELU_TANH_GLU ? "gelu_tanh" : "silu");
    if (!want(c, name))
        return;
    const uint64_t seed = 400 + (uint64_t)(T * 5 + ff + act);
    lq_rng         r;
    lq_rng_seed(&r, seed);
    const int64_t ld = fused ? 2 * ff : ff, nin = fused ? T * ld : 2 * T * ff;
    float        *in = randf(&r, nin, 2.f), *a = malloc((size_t)nin * 4), *b = malloc((size_t)nin * 4);
    memcpy(a, in, (size_t)nin * 4);
    /* fused: gate and up halves of one row, g apart; else g is gate itself */
    float *ga = fused ? a + 0 : a, *ua = fused ? a + ff : a + T * ff;
    float *outa = fused ? malloc((size_t)(T * ff) * 4) : ga;
    CHECK_OK(c->ref->ops->glu(c->ref, outa, ga, ua, ld, T, ff, act));
    float *din = put(c->be, in, (size_t)nin * 4);
    float *dg = din, *du = fused ? din + ff : din + T * ff;
    float *dout = fused ? put(c->be, NULL, (size_t)(T * ff) * 4) : dg;
    CHECK_OK(c->be->ops->glu(c->be, dout, dg, du, ld, T, ff, act));
    get(c->be, b, dout, (size_t)(T * ff) * 4);
    /* the CPU's SIMD exp is within 1.3 ulp of libm's (lq_kernels.h) */
    judge(c, name, seed, outa, b, T * ff,
          tol3(c, act == LQ_ACT_SILU_GLU ? 1e-12 : 0, 1e-12, 1e-12));
    if (fused) {
        drop(c->be, dout, (size_t)(T * ff) * 4);
        free(outa);
    }
    drop(c->be, din, (size_t)nin * 4);
    free(in), free(a), free(b);
}

static void case_elementwise(ctx *c, int64_t count) {
    char name[96];
    snprintf(name, sizeof name, "add+softcap count=%lld", (long long)count);
    if (!want(c, name))
        return;
    const uint64_t seed = 500 + (uint64_t)count;
    lq_rng         r;
    lq_rng_seed(&r, seed);
    float *x = randf(&r, count, 40.f), *y = randf(&r, count, 1.f);
    float *a = malloc((size_t)count * 4), *b = malloc((size_t)count * 4);
    CHECK_OK(c->ref->ops->add(c->ref, a, x, y, count));
    CHECK_OK(c->ref->ops->softcap(c->ref, a, count, 30.f));
    float *dx = put(c->be, x, (size_t)count * 4), *dy = put(c->be, y, (size_t)count * 4);
    CHECK_OK(c->be->ops->add(c->be, dx, dx, dy, count)); /* out = a */
    CHECK_OK(c->be->ops->softcap(c->be, dx, count, 30.f));
    get(c->be, b, dx, (size_t)count * 4);
    judge(c, name, seed, a, b, count, tol3(c, 0, 1e-13, 1e-13));
    drop(c->be, dx, (size_t)count * 4), drop(c->be, dy, (size_t)count * 4);
    free(x), free(y), free(a), free(b);
}

/* The linears of the kernel tests' case table (by name) with a float32 bias on top. */
static void case_linear(ctx *c, const char *kname, int64_t t, int fbias) {
    const kcase *kc = NULL;
    for (int i = 0; i < NCASES; i++)
        if (!strcmp(k_cases[i].name, kname))
            kc = &k_cases[i];
    char name[128];
    snprintf(name, sizeof name, "linear %s t=%lld%s", kname, (long long)t, fbias ? " +bias" : "");
    if (!kc) {
        CHECK_MSG(0, "no kernel case %s", kname);
        return;
    }
    if (!want(c, name))
        return;
    const uint64_t seed = 600 + (uint64_t)(t * 17) + (uint64_t)(kc - k_cases);
    lq_qbuf        qb;
    float         *dense = NULL;
    if (build(kc, kc->n, kc->k, 0, seed, &qb, &dense) != LQ_OK) {
        CHECK_MSG(0, "%s: building the linear failed", name);
        return;
    }
    const lq_qlinear *w = &qb.q;
    const int64_t     n = w->n, k = w->k;
    lq_rng            r;
    lq_rng_seed(&r, seed + 1);
    float *x = randf(&r, t * k, 1.f), *bias = fbias ? randf(&r, n, 1.f) : NULL;
    float *ya = malloc((size_t)(t * n) * 4), *yb = malloc((size_t)(t * n) * 4);
    CHECK_OK(c->ref->ops->linear(c->ref, w, bias, x, t, ya));
    lq_qlinear dw;
    void      *mem;
    size_t     mb;
    lq_status  st = c->be->ops->linear_upload(c->be, w, &dw, &mem, &mb);
    CHECK_MSG(st == LQ_OK, "%s: upload: %s", name, lq_be_error(c->be));
    if (st == LQ_OK) {
        float *dx = put(c->be, x, (size_t)(t * k) * 4), *dy = put(c->be, NULL, (size_t)(t * n) * 4);
        float *db = bias ? put(c->be, bias, (size_t)n * 4) : NULL;
        st        = c->be->ops->linear(c->be, &dw, db, dx, t, dy);
        CHECK_MSG(st == LQ_OK, "%s: %s", name, lq_be_error(c->be));
        if (st == LQ_OK) {
            get(c->be, yb, dy, (size_t)(t * n) * 4);
            const lq_format_traits *tr = lq_format_traits_get((lq_format)w->format);
            /* cuda: float32 dense under F32, else the kernels' fp16 activations (tol_nmse) or
             * bf16 weights and activations */
            const int    f32_dense = w->format == LQ_FMT_DENSE && w->dense_dtype == LQ_DENSE_F32;
            const double cu        = f32_dense ? (c->prec == LQ_PREC_F32 ? 1e-12 : 1e-4)
                                     : w->format == LQ_FMT_DENSE ? 1e-5
                                                                 : tr->tol_nmse;
            judge(c, name, seed, ya, yb, t * n, tol3(c, tr->tol_nmse_cpu, cu, cu));
        }
        drop(c->be, dx, (size_t)(t * k) * 4), drop(c->be, dy, (size_t)(t * n) * 4);
        if (db)
            drop(c->be, db, (size_t)n * 4);
        c->be->ops->release(c->be, mem, mb);
    }
    lq_qbuf_free(&qb);
    free(dense), free(x), free(bias), free(ya), free(yb);
}

static void case_moe(ctx *c, int64_t T, int64_t E, int64_t K, int norm, int64_t d) {
    char name[128];
    snprintf(name, sizeof name, "moe route+gather+scatter+gate T=%lld E=%lld K=%lld norm=%d d=%lld",
             (long long)T, (long long)E, (long long)K, norm, (long long)d);
    if (!want(c, name))
        return;
    const uint64_t seed = 700 + (uint64_t)(T * 3 + E + K);
    lq_rng         r;
    lq_rng_seed(&r, seed);
    float   *p = randf(&r, T * E, 2.f), *pa = malloc((size_t)(T * E) * 4);
    int32_t *sa = malloc((size_t)(T * K) * 4), *sb = malloc((size_t)(T * K) * 4);
    float   *wa = malloc((size_t)(T * K) * 4), *wb = malloc((size_t)(T * K) * 4);
    memcpy(pa, p, (size_t)(T * E) * 4);
    if (T > 2) /* a tie: the lower index wins */
        p[2 * E + 1] = p[2 * E + 0], pa[2 * E + 1] = pa[2 * E + 0];
    CHECK_OK(c->ref->ops->moe_route(c->ref, pa, T, E, K, norm, sa, wa));
    float   *dp = put(c->be, p, (size_t)(T * E) * 4);
    int32_t *ds = put(c->be, NULL, (size_t)(T * K) * 4);
    float   *dwt = put(c->be, NULL, (size_t)(T * K) * 4);
    CHECK_OK(c->be->ops->moe_route(c->be, dp, T, E, K, norm, ds, dwt));
    get(c->be, sb, ds, (size_t)(T * K) * 4);
    get(c->be, wb, dwt, (size_t)(T * K) * 4);
    CHECK_MSG(!memcmp(sa, sb, (size_t)(T * K) * 4), "%s: selections differ", name);
    judge(c, name, seed, wa, wb, T * K, tol3(c, 0, 1e-12, 1e-12));
    /* expert 0's rows: gather, a made-up expert output, scatter back weighted, then a gate */
    int32_t *rows = malloc((size_t)(T * K) * 4);
    int64_t  cnt  = 0;
    for (int64_t i = 0; i < T * K; i++)
        if (sa[i] == sa[0])
            rows[cnt++] = (int32_t)i;
    float *src = randf(&r, T * d, 1.f), *y = randf(&r, T * d, 1.f), *g = randf(&r, T, 1.f);
    float *ga = calloc((size_t)(T * d), 4), *gb = calloc((size_t)(T * d), 4);
    float *oa = randf(&r, T * d, 1.f), *ob = malloc((size_t)(T * d) * 4);
    memcpy(ob, oa, (size_t)(T * d) * 4);
    CHECK_OK(c->ref->ops->gather_rows(c->ref, ga, src, rows, cnt, d, K));
    CHECK_OK(c->ref->ops->scatter_add(c->ref, oa, y, rows, wa, cnt, d, K));
    CHECK_OK(c->ref->ops->gate_add(c->ref, oa, y, g, T, d));
    int32_t *drows = put(c->be, rows, (size_t)(T * K) * 4);
    float   *dsrc = put(c->be, src, (size_t)(T * d) * 4), *dy = put(c->be, y, (size_t)(T * d) * 4);
    float   *dgg = put(c->be, g, (size_t)T * 4), *dga = put(c->be, NULL, (size_t)(T * d) * 4);
    float   *dout = put(c->be, ob, (size_t)(T * d) * 4), *dwa = put(c->be, wa, (size_t)(T * K) * 4);
    CHECK_OK(c->be->ops->gather_rows(c->be, dga, dsrc, drows, cnt, d, K));
    CHECK_OK(c->be->ops->scatter_add(c->be, dout, dy, drows, dwa, cnt, d, K));
    CHECK_OK(c->be->ops->gate_add(c->be, dout, dy, dgg, T, d));
    get(c->be, gb, dga, (size_t)(cnt * d) * 4);
    get(c->be, ob, dout, (size_t)(T * d) * 4);
    char n2[160];
    snprintf(n2, sizeof n2, "%s [gather]", name);
    judge(c, n2, seed, ga, gb, cnt * d, 0);
    snprintf(n2, sizeof n2, "%s [scatter, gate]", name);
    judge(c, n2, seed, oa, ob, T * d, tol3(c, 0, 1e-13, 1e-13));
    drop(c->be, dp, (size_t)(T * E) * 4), drop(c->be, ds, (size_t)(T * K) * 4),
        drop(c->be, dwt, (size_t)(T * K) * 4), drop(c->be, drows, (size_t)(T * K) * 4),
        drop(c->be, dsrc, (size_t)(T * d) * 4), drop(c->be, dy, (size_t)(T * d) * 4),
        drop(c->be, dgg, (size_t)T * 4), drop(c->be, dga, (size_t)(T * d) * 4),
        drop(c->be, dout, (size_t)(T * d) * 4), drop(c->be, dwa, (size_t)(T * K) * 4);
    free(p), free(pa), free(sa), free(sb), free(wa), free(wb), free(rows), free(src), free(y),
        free(g), free(ga), free(gb), free(oa), free(ob);
}

static void case_stats(ctx *c, int64_t t, int64_t k, float beta) {
    char name[96];
    snprintf(name, sizeof name, "syrk+scale_rows+absmax+abssum t=%lld k=%lld beta=%g", (long long)t,
             (long long)k, (double)beta);
    if (!want(c, name))
        return;
    const uint64_t seed = 800 + (uint64_t)(t * 11 + k);
    lq_rng         r;
    lq_rng_seed(&r, seed);
    float *x = randf(&r, t * k, 1.f), *aw = randf(&r, t, 1.f), *H0 = randf(&r, k * k, 1.f);
    for (int64_t i = 0; i < t; i++)
        aw[i] = fabsf(aw[i]);
    float  *xa = malloc((size_t)(t * k) * 4), *xb = malloc((size_t)(t * k) * 4);
    float  *Ha = malloc((size_t)(k * k) * 4), *Hb = malloc((size_t)(k * k) * 4);
    float  *ma = calloc((size_t)k, 4), *mb = calloc((size_t)k, 4);
    float  *sa = calloc((size_t)k, 4), *sb = calloc((size_t)k, 4);
    memcpy(Ha, H0, (size_t)(k * k) * 4);
    CHECK_OK(c->ref->ops->scale_rows(c->ref, xa, x, aw, t, k));
    CHECK_OK(c->ref->ops->syrk(c->ref, Ha, xa, t, k, 0.5f, beta));
    CHECK_OK(c->ref->ops->col_absmax(c->ref, ma, x, t, k));
    CHECK_OK(c->ref->ops->col_abssum(c->ref, sa, x, t, k));
    float  *dx = put(c->be, x, (size_t)(t * k) * 4), *daw = put(c->be, aw, (size_t)t * 4);
    float  *dH = put(c->be, H0, (size_t)(k * k) * 4), *dm = put(c->be, mb, (size_t)k * 4);
    float  *ds = put(c->be, sb, (size_t)k * 4);
    float  *dxs = put(c->be, NULL, (size_t)(t * k) * 4);
    CHECK_OK(c->be->ops->scale_rows(c->be, dxs, dx, daw, t, k));
    CHECK_OK(c->be->ops->syrk(c->be, dH, dxs, t, k, 0.5f, beta));
    CHECK_OK(c->be->ops->col_absmax(c->be, dm, dx, t, k));
    CHECK_OK(c->be->ops->col_abssum(c->be, ds, dx, t, k));
    get(c->be, xb, dxs, (size_t)(t * k) * 4);
    get(c->be, Hb, dH, (size_t)(k * k) * 4);
    get(c->be, mb, dm, (size_t)k * 4);
    get(c->be, sb, ds, (size_t)k * 4);
    /* the upper triangle is the result */
    for (int64_t i = 0; i < k; i++)
        for (int64_t j = 0; j < i; j++)
            Ha[i * k + j] = Hb[i * k + j] = 0.f;
    char n2[160];
    snprintf(n2, sizeof n2, "%s [scale_rows]", name);
    judge(c, n2, seed, xa, xb, t * k, tol3(c, 0, 1e-13, 1e-13));
    snprintf(n2, sizeof n2, "%s [syrk]", name);
    judge(c, n2, seed, Ha, Hb, k * k, tol3(c, 1e-11, 1e-11, 1e-11));
    snprintf(n2, sizeof n2, "%s [absmax]", name);
    judge(c, n2, seed, ma, mb, k, 0);
    snprintf(n2, sizeof n2, "%s [abssum]", name);
    judge(c, n2, seed, sa, sb, k, 0); /* float sums, rows in order, on every backend */
    drop(c->be, dx, (size_t)(t * k) * 4), drop(c->be, daw, (size_t)t * 4),
        drop(c->be, dH, (size_t)(k * k) * 4), drop(c->be, dm, (size_t)k * 4),
        drop(c->be, ds, (size_t)k * 4), drop(c->be, dxs, (size_t)(t * k) * 4);
    free(x), free(aw), free(H0), free(xa), free(xb), free(Ha), free(Hb), free(ma), free(mb),
        free(sa), free(sb);
}

static void case_copies(ctx *c) {
    const char *name = "copy+copy2d+zero";
    if (!want(c, name))
        return;
    lq_rng r;
    lq_rng_seed(&r, 900);
    const int64_t rows = 37, lds = 53, cols = 29, ldd = 31;
    float        *src = randf(&r, rows * lds, 1.f), *a = calloc((size_t)(rows * ldd), 4),
          *b = malloc((size_t)(rows * ldd) * 4);
    CHECK_OK(c->ref->ops->copy2d(c->ref, a, ldd, src, lds, rows, cols));
    float *ds = put(c->be, src, (size_t)(rows * lds) * 4), *dd = put(c->be, NULL, (size_t)(rows * ldd) * 4);
    float *dc = put(c->be, NULL, (size_t)(rows * lds) * 4);
    CHECK_OK(c->be->ops->zero(c->be, dd, (size_t)(rows * ldd) * 4));
    CHECK_OK(c->be->ops->copy(c->be, dc, ds, (size_t)(rows * lds) * 4));
    CHECK_OK(c->be->ops->copy2d(c->be, dd, ldd, dc, lds, rows, cols));
    CHECK_OK(c->be->ops->sync(c->be));
    get(c->be, b, dd, (size_t)(rows * ldd) * 4);
    judge(c, name, 900, a, b, rows * ldd, 0);
    drop(c->be, ds, (size_t)(rows * lds) * 4), drop(c->be, dd, (size_t)(rows * ldd) * 4),
        drop(c->be, dc, (size_t)(rows * lds) * 4);
    free(src), free(a), free(b);
}

/* AWQ's candidate and clip search: exact on every backend (the same roundings in the same
 * order); the loss reductions and the small algebra. */
static void case_awq(ctx *c, int64_t n, int64_t k, int64_t g, int64_t t) {
    char name[96];
    snprintf(name, sizeof name, "awq fakequant+clip n=%lld k=%lld g=%lld t=%lld", (long long)n,
             (long long)k, (long long)g, (long long)t);
    if (!want(c, name))
        return;
    const uint64_t seed = 1000 + (uint64_t)(n * 7 + k + t);
    lq_rng         r;
    lq_rng_seed(&r, seed);
    float *w = randf(&r, n * k, 0.05f), *x = randf(&r, t * k, 1.f), *sv = randf(&r, k, 0.3f);
    for (int64_t i = 0; i < k; i++)
        sv[i] = expf(sv[i]); /* positive scales around 1 */
    float *a = malloc((size_t)(n * k) * 4), *b = malloc((size_t)(n * k) * 4);
    CHECK_OK(c->ref->ops->awq_fakequant(c->ref, w, sv, n, k, g, 4, a));
    float *dw = put(c->be, w, (size_t)(n * k) * 4), *ds = put(c->be, sv, (size_t)k * 4);
    float *dx = put(c->be, x, (size_t)(t * k) * 4), *dout = put(c->be, NULL, (size_t)(n * k) * 4);
    CHECK_OK(c->be->ops->awq_fakequant(c->be, dw, ds, n, k, g, 4, dout));
    get(c->be, b, dout, (size_t)(n * k) * 4);
    char n2[160];
    snprintf(n2, sizeof n2, "%s [fakequant]", name);
    judge(c, n2, seed, a, b, n * k, 0);
    memcpy(a, w, (size_t)(n * k) * 4);
    CHECK_OK(c->ref->ops->awq_clip(c->ref, a, n, k, x, t, g, 4));
    CHECK_OK(c->be->ops->awq_clip(c->be, dw, n, k, dx, t, g, 4));
    get(c->be, b, dw, (size_t)(n * k) * 4);
    snprintf(n2, sizeof n2, "%s [clip]", name);
    judge(c, n2, seed, a, b, n * k, 0);
    int clipped = 0; /* the search must have moved something */
    for (int64_t i = 0; i < n * k; i++)
        clipped += a[i] != w[i];
    CHECK_MSG(clipped > 0, "%s: the clip search clipped nothing", name);
    drop(c->be, dw, (size_t)(n * k) * 4), drop(c->be, ds, (size_t)k * 4),
        drop(c->be, dx, (size_t)(t * k) * 4), drop(c->be, dout, (size_t)(n * k) * 4);
    free(w), free(x), free(sv), free(a), free(b);
}

static void case_algebra(ctx *c, int64_t m, int64_t n, int64_t k) {
    char name[96];
    snprintf(name, sizeof name, "gemm+sub+sqdiff+dot+sym_upper+div_cols m=%lld n=%lld k=%lld",
             (long long)m, (long long)n, (long long)k);
    if (!want(c, name))
        return;
    const uint64_t seed = 1100 + (uint64_t)(m * 5 + n * 3 + k);
    lq_rng         r;
    lq_rng_seed(&r, seed);
    const int64_t mx = m > n ? m : n, big = mx * (k > mx ? k : mx);
    float *A = randf(&r, big, 1.f), *B = randf(&r, big, 1.f), *C0 = randf(&r, m * n, 1.f);
    float *ca = malloc((size_t)(m * n) * 4), *cb = malloc((size_t)(m * n) * 4);
    float *dA = put(c->be, A, (size_t)big * 4), *dB = put(c->be, B, (size_t)big * 4);
    float *dC = put(c->be, NULL, (size_t)(m * n) * 4);
    char   n2[200];
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            const int64_t lda = ta ? m : k, ldb = tb ? k : n;
            memcpy(ca, C0, (size_t)(m * n) * 4);
            c->be->ops->upload(c->be, dC, C0, (size_t)(m * n) * 4);
            CHECK_OK(c->ref->ops->gemm(c->ref, ta, tb, m, n, k, 0.5f, A, lda, B, ldb, 0.25f, ca, n));
            CHECK_OK(c->be->ops->gemm(c->be, ta, tb, m, n, k, 0.5f, dA, lda, dB, ldb, 0.25f, dC, n));
            get(c->be, cb, dC, (size_t)(m * n) * 4);
            snprintf(n2, sizeof n2, "%s [gemm ta=%d tb=%d]", name, ta, tb);
            judge(c, n2, seed, ca, cb, m * n, tol3(c, 1e-11, 1e-11, 1e-11));
        }
    /* sub, then the two reductions of it against A */
    float *dd = put(c->be, NULL, (size_t)(m * n) * 4);
    CHECK_OK(c->ref->ops->sub(c->ref, ca, A, B, m * n));
    CHECK_OK(c->be->ops->sub(c->be, dd, dA, dB, m * n));
    get(c->be, cb, dd, (size_t)(m * n) * 4);
    snprintf(n2, sizeof n2, "%s [sub]", name);
    judge(c, n2, seed, ca, cb, m * n, 0);
    double ra = 0, rb = 0;
    CHECK_OK(c->ref->ops->sqdiff(c->ref, A, B, m * n, &ra));
    CHECK_OK(c->be->ops->sqdiff(c->be, dA, dB, m * n, &rb));
    CHECK_MSG(fabs(ra - rb) <= 1e-12 * fabs(ra) && (!is(c, "cpu") || ra == rb),
              "%s: sqdiff %.17g vs %.17g", name, rb, ra);
    CHECK_OK(c->ref->ops->dot(c->ref, A, B, m * n, &ra));
    CHECK_OK(c->be->ops->dot(c->be, dA, dB, m * n, &rb));
    CHECK_MSG(fabs(ra - rb) <= 1e-12 * (fabs(ra) + 1) && (!is(c, "cpu") || ra == rb),
              "%s: dot %.17g vs %.17g", name, rb, ra);
    c->ran += 2;
    /* a square's upper triangle mirrored; columns divided */
    const int64_t q = mx;
    float *H = randf(&r, q * q, 1.f), *Ha = malloc((size_t)(q * q) * 4), *Hb = malloc((size_t)(q * q) * 4);
    memcpy(Ha, H, (size_t)(q * q) * 4);
    float *dH = put(c->be, H, (size_t)(q * q) * 4);
    CHECK_OK(c->ref->ops->sym_upper(c->ref, Ha, q));
    CHECK_OK(c->be->ops->sym_upper(c->be, dH, q));
    get(c->be, Hb, dH, (size_t)(q * q) * 4);
    snprintf(n2, sizeof n2, "%s [sym_upper]", name);
    judge(c, n2, seed, Ha, Hb, q * q, 0);
    float *sv = randf(&r, q, 1.f), *dsv = put(c->be, sv, (size_t)q * 4);
    CHECK_OK(c->ref->ops->div_cols(c->ref, Ha, q, q, sv));
    CHECK_OK(c->be->ops->div_cols(c->be, dH, q, q, dsv));
    get(c->be, Hb, dH, (size_t)(q * q) * 4);
    snprintf(n2, sizeof n2, "%s [div_cols]", name);
    judge(c, n2, seed, Ha, Hb, q * q, 0);
    drop(c->be, dA, (size_t)big * 4), drop(c->be, dB, (size_t)big * 4),
        drop(c->be, dC, (size_t)(m * n) * 4), drop(c->be, dd, (size_t)(m * n) * 4),
        drop(c->be, dH, (size_t)(q * q) * 4), drop(c->be, dsv, (size_t)q * 4);
    free(A), free(B), free(C0), free(ca), free(cb), free(H), free(Ha), free(Hb), free(sv);
}

/* ------------------------------------------------------------------------------------------
 * The table
 * ------------------------------------------------------------------------------------------ */
static void run_all(ctx *c) {
    case_copies(c);
    case_rmsnorm(c, 1, 1, 0, 0);
    case_rmsnorm(c, 3, 67, 1, 0);
    case_rmsnorm(c, 5, 576, 0, 1);
    case_rmsnorm(c, 2, 4096, 1, 1);
    case_rmsnorm(c, 300, 4100, 0, 0); /* over the CPU's parallel threshold */
    case_rope(c, 7, 3, 4, 7, 0);
    case_rope(c, 12, 2, 32, 5, 0);
    case_rope(c, 64, 4, 64, 32, 24); /* q of a fused row: heads from column 0 of a wider row */
    case_attention(c, (att_case){1, 1, 1, 1, 2, 0, 0, 0});
    case_attention(c, (att_case){2, 37, 4, 2, 16, 0, 0, 1});
    case_attention(c, (att_case){1, 100, 8, 2, 64, 17, 0, 1}); /* sliding window, > 2 blocks */
    case_attention(c, (att_case){2, 64, 6, 3, 32, 0, 50.f, 0}); /* soft-capping */
    case_attention(c, (att_case){1, 130, 3, 1, 8, 0, 0, 2});    /* weights alone, MQA */
    case_attention(c, (att_case){3, 49, 4, 4, 128, 0, 0, 1});   /* a block and one row */
    case_attention(c, (att_case){1, 300, 2, 1, 64, 64, 30.f, 1});
    case_glu(c, 1, 1, 0, LQ_ACT_SILU_GLU);
    case_glu(c, 5, 172, 0, LQ_ACT_SILU_GLU);
    case_glu(c, 7, 333, 1, LQ_ACT_SILU_GLU);
    case_glu(c, 4, 640, 0, LQ_ACT_GELU_TANH_GLU);
    case_glu(c, 3, 96, 1, LQ_ACT_GELU_TANH_GLU);
    case_glu(c, 300, 4000, 0, LQ_ACT_SILU_GLU);
    case_elementwise(c, 1);
    case_elementwise(c, 1001);
    case_elementwise(c, (1 << 20) + 3);
    static const char *lins[] = {"dense",          "dense_oddk", "dense_f16",  "dense_bf16_n37_oddk",
                                 "gptq4_g128",     "gptq3_g128", "awq_g128",   "nf4_b64_dq256",
                                 "int8_stored5",   "gptq4_g64_actorder_sorted"};
    for (size_t i = 0; i < sizeof lins / sizeof lins[0]; i++) {
        case_linear(c, lins[i], 1, 0);
        case_linear(c, lins[i], 7, 1);
        case_linear(c, lins[i], 40, 1);
    }
    case_moe(c, 1, 4, 1, 0, 8);
    case_moe(c, 9, 8, 2, 1, 64);
    case_moe(c, 50, 60, 4, 0, 33);
    case_stats(c, 1, 1, 0.f);
    case_stats(c, 37, 67, 0.25f);
    case_stats(c, 300, 256, 1.f);
    case_awq(c, 8, 64, 32, 5);
    case_awq(c, 37, 256, 128, 700);   /* every token sampled, two groups a row */
    case_awq(c, 24, 384, 128, 3000);  /* every 5th token */
    case_awq(c, 16, 96, 96, 1024);    /* one group a row: per-channel */
    case_algebra(c, 1, 1, 1);
    case_algebra(c, 37, 29, 53);
    case_algebra(c, 64, 200, 128);
}

static int run_backend(lq_be *be, lq_be *ref, int prec, int verbose, const char *filter) {
    ctx c = {be, ref, prec, verbose, filter, 0};
    printf("backend %s%s\n", be->ops->name,
           be->ops->device ? (prec == LQ_PREC_F32 ? " (f32)" : " (fast)") : "");
    run_all(&c);
    CHECK_MSG(c.ran > 0 || filter, "no case ran");
    CHECK_MSG(be->cur_bytes == 0 || be->scratch_cap > 0,
              "%s: %lld bytes allocated through the backend were not released", be->ops->name,
              (long long)be->cur_bytes);
    printf("  %d comparisons\n", c.ran);
    return c.ran;
}

int main(int argc, char **argv) {
    const char *b = "cpu", *p = "all", *filter = NULL;
    int         verbose = 0;
    (void)make_x; /* the kernel tests' activations: the op cases draw their own */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-b") && i + 1 < argc)
            b = argv[++i];
        else if (!strcmp(argv[i], "-p") && i + 1 < argc)
            p = argv[++i];
        else if (!strcmp(argv[i], "-f") && i + 1 < argc)
            filter = argv[++i];
        else if (!strcmp(argv[i], "-v"))
            verbose = 1;
        else {
            fprintf(stderr, "usage: %s [-b cpu|cuda|ref] [-p f32|fast|all] [-f SUB] [-v]\n",
                    argv[0]);
            return 2;
        }
    }
    lq_be ref;
    lq_be_init_host(&ref, lq_ops_ref(), 1);
    if (!strcmp(b, "cpu") || !strcmp(b, "ref")) {
        lq_be be;
        lq_be_init_host(&be, !strcmp(b, "cpu") ? lq_ops_cpu() : lq_ops_ref(), 0);
        run_backend(&be, &ref, LQ_PREC_F32, verbose, filter);
        lq_be_free(&be);
        CHECK_EQ_INT(be.cur_bytes, 0);
    } else if (!strcmp(b, "cuda")) {
        lq_cuda_ctx *cc  = lq_test_cuda_or_skip("test_ops");
        lq_err       err = {0};
        for (int prec = LQ_PREC_F32; prec <= LQ_PREC_FAST; prec++) {
            if ((prec == LQ_PREC_F32 && !strcmp(p, "fast")) ||
                (prec == LQ_PREC_FAST && !strcmp(p, "f32")))
                continue;
            lq_be be;
            CHECK_OK(lq_be_init_cuda(&be, cc, prec, &err));
            run_backend(&be, &ref, prec, verbose, filter);
            lq_be_free(&be);
            CHECK_EQ_INT(be.cur_bytes, 0);
        }
        lq_cuda_ctx_free(cc);
    } else {
        fprintf(stderr, "test_ops: unknown backend %s\n", b);
        return 2;
    }
    lq_be_free(&ref);
    return lq_test_end("test_ops");
}
