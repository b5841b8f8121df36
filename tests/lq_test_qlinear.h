/* lq_test_qlinear.h -- random quantized linears of every format for the kernel and format-I/O
 * tests: built through the packers from a neutral representation, either with small integers
 * and power-of-2 scales ("exact": every product and sum is exact in float) or with realistic
 * random values. Static functions: include from one test source. */
#ifndef LQ_TEST_QLINEAR_H
#define LQ_TEST_QLINEAR_H

#include "lq_dtype.h"
#include "lq_kernels.h"
#include "lq_kernels_impl.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct kcase {
    const char *name;
    lq_format   fmt;
    int         bits;
    int64_t     n, k, gs;  /* gs: GPTQ/AWQ group (<= 0: per-channel), NF4 blocksize */
    int         act_order; /* GPTQ: permuted g_idx; 2: then sorted by group (lq_qlinear_sort);
                            * AWQ 2: repacked by lq_qlinear_sort into GPTQ's layout */
    int         dq;        /* NF4 double quant (nested block 256) */
    int         n_outlier; /* INT8 stored outlier columns */
    float       threshold; /* INT8 runtime threshold (random mode; exact mode uses 200) */
    int         bias;
    int         dense_dt; /* dense: lq_dense_dtype of the descriptor (values rounded to it) */
} kcase;

/* The one case table of the kernel tests, run per backend (test_kernels: cpu; test_kernels_gpu:
 * cuda), like ggml's test-backend-ops: formats x widths x group sizes x odd shapes, and k = 4096
 * where the CUDA GEMV splits k (act-order included). */
static const kcase k_cases[] = {
    {"dense", LQ_FMT_DENSE, 0, 96, 160, 0, 0, 0, 0, 0, 1, 0},
    {"dense_oddk", LQ_FMT_DENSE, 0, 40, 77, 0, 0, 0, 0, 0, 0, 0},
    /* fp16 / bf16 storage: n not a multiple of the 4-row tiles, k tails of the 16-wide loads */
    {"dense_f16", LQ_FMT_DENSE, 0, 96, 160, 0, 0, 0, 0, 0, 1, LQ_DENSE_F16},
    {"dense_f16_n37_oddk", LQ_FMT_DENSE, 0, 37, 77, 0, 0, 0, 0, 0, 0, LQ_DENSE_F16},
    {"dense_bf16", LQ_FMT_DENSE, 0, 64, 256, 0, 0, 0, 0, 0, 1, LQ_DENSE_BF16},
    {"dense_bf16_n37_oddk", LQ_FMT_DENSE, 0, 37, 77, 0, 0, 0, 0, 0, 0, LQ_DENSE_BF16},
    /* bf16 activations (LQ_QLINEAR_BF16_X) at 300 rows: two k ranges, the second's tail masked */
    {"dense_bf16_n21_k2100", LQ_FMT_DENSE, 0, 21, 2100, 0, 0, 0, 0, 0, 1, LQ_DENSE_BF16},
    /* ... and its rows kernel's k ranges (1 MiB of activations: 2 at 16 rows) */
    {"dense_bf16_n4_k66000", LQ_FMT_DENSE, 0, 4, 66000, 0, 0, 0, 0, 0, 0, LQ_DENSE_BF16},
    {"dense_f16_two_tiles", LQ_FMT_DENSE, 0, 1030, 48, 0, 0, 0, 0, 0, 1, LQ_DENSE_F16},
    {"gptq4_g128", LQ_FMT_GPTQ, 4, 128, 256, 128, 0, 0, 0, 0, 1, 0},
    {"gptq4_g32", LQ_FMT_GPTQ, 4, 96, 256, 32, 0, 0, 0, 0, 0, 0},
    {"gptq4_perchannel", LQ_FMT_GPTQ, 4, 64, 256, -1, 0, 0, 0, 0, 0, 0},
    {"gptq4_g64_actorder", LQ_FMT_GPTQ, 4, 64, 256, 64, 1, 0, 0, 0, 1, 0},
    {"gptq4_ragged_k200_n72", LQ_FMT_GPTQ, 4, 72, 200, 128, 0, 0, 0, 0, 0, 0},
    {"gptq4_g20", LQ_FMT_GPTQ, 4, 32, 160, 20, 0, 0, 0, 0, 0, 0},
    {"gptq2_g64", LQ_FMT_GPTQ, 2, 64, 256, 64, 0, 0, 0, 0, 0, 0},
    {"gptq2_g32_actorder", LQ_FMT_GPTQ, 2, 48, 192, 32, 1, 0, 0, 0, 1, 0},
    {"gptq3_g128", LQ_FMT_GPTQ, 3, 64, 256, 128, 0, 0, 0, 0, 1, 0},
    {"gptq3_g32_actorder", LQ_FMT_GPTQ, 3, 32, 128, 32, 1, 0, 0, 0, 0, 0},
    {"gptq8_g128_n20", LQ_FMT_GPTQ, 8, 20, 256, 128, 0, 0, 0, 0, 0, 0},
    {"gptq8_perchannel_actorder", LQ_FMT_GPTQ, 8, 48, 128, -1, 1, 0, 0, 0, 0, 0},
    /* act-order's group accumulators (CPU, m <= 2): 256 groups fill them at one row and outgrow
     * them at two; 8 columns past the 32-column blocks */
    {"gptq4_g16_actorder_n40", LQ_FMT_GPTQ, 4, 40, 4096, 16, 1, 0, 0, 0, 1, 0},
    {"gptq8_g32_actorder_n40", LQ_FMT_GPTQ, 8, 40, 256, 32, 1, 0, 0, 0, 0, 0},
    /* AVX2 integer kernel, 16 rows: the words copied 2 blocks at a time, a short last block */
    {"gptq8_g128_k1000", LQ_FMT_GPTQ, 8, 32, 1000, 128, 0, 0, 0, 0, 0, 0},
    /* AVX-512 VNNI, up to 4 rows: 8- and 4-bit blocks in slices of 8 word rows, the last block
     * one (4-bit: under one; gptq4_ragged_k200_n72: one and a row) */
    {"gptq8_g128_k928", LQ_FMT_GPTQ, 8, 40, 928, 128, 0, 0, 0, 0, 0, 0},
    {"gptq4_g128_k928", LQ_FMT_GPTQ, 4, 40, 928, 128, 0, 0, 0, 0, 0, 0},
    /* many column blocks a thread, the slices' sums of each kept (see VNNI_SLICE), a last
     * partial vector */
    {"gptq8_g128_n4200", LQ_FMT_GPTQ, 8, 4200, 256, 128, 0, 0, 0, 0, 1, 0},
    {"gptq4_splitk_actorder", LQ_FMT_GPTQ, 4, 160, 4096, 128, 1, 0, 0, 0, 1, 0},
    /* act-order sorted by group at load: the plain kernels on x gathered by perm */
    {"gptq4_g64_actorder_sorted", LQ_FMT_GPTQ, 4, 64, 256, 64, 2, 0, 0, 0, 1, 0},
    {"gptq2_g32_actorder_sorted", LQ_FMT_GPTQ, 2, 48, 192, 32, 2, 0, 0, 0, 0, 0},
    {"gptq3_g32_actorder_sorted", LQ_FMT_GPTQ, 3, 32, 128, 32, 2, 0, 0, 0, 1, 0},
    {"gptq8_g32_actorder_sorted", LQ_FMT_GPTQ, 8, 40, 128, 32, 2, 0, 0, 0, 0, 0},
    {"gptq4_splitk_actorder_sorted", LQ_FMT_GPTQ, 4, 160, 4096, 128, 2, 0, 0, 0, 1, 0},
    {"gptq3_splitk", LQ_FMT_GPTQ, 3, 64, 4096, 128, 0, 0, 0, 0, 0, 0},
    {"awq_g128", LQ_FMT_AWQ, 4, 128, 256, 128, 0, 0, 0, 0, 1, 0},
    {"awq_g32_n72", LQ_FMT_AWQ, 4, 72, 256, 32, 0, 0, 0, 0, 0, 0},
    /* from 16 rows each 128-column block's codes are repacked where the GPTQ kernel copies its
     * words, at one row the blocks are read in runs of 16: several blocks and runs a thread,
     * the last block partial */
    {"awq_g64_n4360", LQ_FMT_AWQ, 4, 4360, 128, 64, 0, 0, 0, 0, 1, 0},
    {"awq_splitk", LQ_FMT_AWQ, 4, 136, 4096, 128, 0, 0, 0, 0, 1, 0},
    {"awq_g32_n32_k64", LQ_FMT_AWQ, 4, 32, 64, 32, 0, 0, 0, 0, 1, 0},
    /* int8 activations at 1-4 rows: the channels in segments summed apart (two here, of 10 and
     * 11 activation blocks; on 3 threads both split by columns); at one row in a team runs of up
     * to 128 blocks (two a thread here on 2 threads), alone runs of up to 32 (nine) */
    {"awq_segs_k2688", LQ_FMT_AWQ, 4, 264, 2688, 128, 0, 0, 0, 0, 1, 0},
    {"awq_runs_n33032", LQ_FMT_AWQ, 4, 33032, 64, 32, 0, 0, 0, 0, 0, 0},
    /* a group of two decoded runs (the buffered kernel) */
    {"awq_g256_n48", LQ_FMT_AWQ, 4, 48, 512, 256, 0, 0, 0, 0, 0, 0},
    /* repacked into GPTQ's layout at load (lq_qlinear_sort): GPTQ's kernels from then on */
    {"awq_g32_n72_sorted", LQ_FMT_AWQ, 4, 72, 256, 32, 2, 0, 0, 0, 1, 0},
    {"awq_splitk_sorted", LQ_FMT_AWQ, 4, 136, 4096, 128, 2, 0, 0, 0, 0, 0},
    {"nf4_b64", LQ_FMT_NF4, 4, 64, 256, 64, 0, 0, 0, 0, 1, 0},
    {"nf4_b64_dq256", LQ_FMT_NF4, 4, 128, 256, 64, 0, 1, 0, 0, 0, 0},
    {"nf4_b64_tail", LQ_FMT_NF4, 4, 33, 62, 64, 0, 0, 0, 0, 0, 0},
    {"nf4_b32_oddk_dq", LQ_FMT_NF4, 4, 34, 63, 32, 0, 1, 0, 0, 1, 0},
    {"nf4_b4096", LQ_FMT_NF4, 4, 40, 256, 4096, 0, 1, 0, 0, 0, 0},
    {"nf4_b64_k4096_dq", LQ_FMT_NF4, 4, 72, 4096, 64, 0, 1, 0, 0, 1, 0},
    /* AVX-512: a column tail, a partial run of 64 channels */
    {"nf4_b64_n37_k576_dq", LQ_FMT_NF4, 4, 37, 576, 64, 0, 1, 0, 0, 1, 0},
    /* AVX-512 VNNI at one row: 37 blocks a row (two runs of 16, then 5), a group of 8 rows */
    {"nf4_b64_n40_k2368", LQ_FMT_NF4, 4, 40, 2368, 64, 0, 0, 0, 0, 1, 0},
    /* AVX2 integer kernel: 9 blocks a column (a run of 8, then one alone), column 28's run
     * across a nested block; 512-channel blocks (2 of its 256-channel activation blocks each) */
    {"nf4_b64_n40_k576_dq", LQ_FMT_NF4, 4, 40, 576, 64, 0, 1, 0, 0, 0, 0},
    {"nf4_b512_k4096_dq", LQ_FMT_NF4, 4, 24, 4096, 512, 0, 1, 0, 0, 1, 0},
    {"nf4_b32_k4096", LQ_FMT_NF4, 4, 24, 4096, 32, 0, 0, 0, 0, 0, 0}, /* 128 blocks a row */
    /* AVX2 float kernel from 4 rows: chunks of k whose x is too large to copy (5-8 rows) */
    {"nf4_b1024_k3072", LQ_FMT_NF4, 4, 16, 3072, 1024, 0, 0, 0, 0, 0, 0},
    /* NF4 blocks longer than the AVX-512 integer kernel's 1024-channel chunks: a chunk starts in
     * the middle of its block */
    {"nf4_b2048_k4096", LQ_FMT_NF4, 4, 24, 4096, 2048, 0, 0, 0, 0, 0, 0},
    {"int8_plain", LQ_FMT_INT8, 8, 96, 256, 0, 0, 0, 0, 0, 1, 0},
    {"int8_oddk", LQ_FMT_INT8, 8, 24, 100, 0, 0, 0, 2, 0, 0, 0},
    {"int8_stored5", LQ_FMT_INT8, 8, 64, 256, 0, 0, 0, 5, 0, 0, 0},
    {"int8_runtime_thr", LQ_FMT_INT8, 8, 64, 256, 0, 0, 0, 0, 2.5f, 1, 0},
    {"int8_stored3_thr", LQ_FMT_INT8, 8, 40, 192, 0, 0, 0, 3, 2.5f, 0, 0},
};
#define NCASES ((int)(sizeof k_cases / sizeof k_cases[0]))

/* ---------------------------------------------------------------------------------------- */
static float rnd_normal(lq_rng *r) {
    return lq_rng_normal(r);
}
static int rnd_int(lq_rng *r, int lo, int hi) { /* inclusive */
    return lo + (int)lq_rng_below(r, (uint64_t)(hi - lo + 1));
}
static float pow2(int e) {
    return ldexpf(1.f, e);
}

/* Build the quantized linear of case c. exact != 0: small integers and power-of-2 scales. */
static lq_status build(const kcase *c, int64_t n, int64_t k, int exact, uint64_t seed, lq_qbuf *out,
                       float **dense_owned) {
    lq_rng r;
    lq_rng_seed(&r, seed);
    lq_err    err  = {0};
    lq_status st   = LQ_OK;
    float    *bias = NULL;
    if (c->bias) {
        bias = malloc((size_t)n * sizeof(float));
        for (int64_t i = 0; i < n; i++)
            bias[i] = exact ? (float)rnd_int(&r, -3, 3) : 0.1f * rnd_normal(&r);
    }
    *dense_owned = NULL;
    if (c->fmt == LQ_FMT_DENSE) {
        float *d = malloc((size_t)(n * k) * sizeof(float));
        for (int64_t e = 0; e < n * k; e++)
            d[e] = exact ? (float)rnd_int(&r, -8, 8) * 0.25f : 0.05f * rnd_normal(&r);
        memset(out, 0, sizeof *out);
        out->q.format = LQ_FMT_DENSE;
        out->q.n      = n;
        out->q.k      = k;
        out->q.dense  = d;
        if (c->dense_dt != LQ_DENSE_F32) {
            uint16_t *h = lq_qbuf_alloc(out, (size_t)(n * k) * 2);
            for (int64_t e = 0; e < n * k; e++)
                h[e] = c->dense_dt == LQ_DENSE_BF16 ? lq_f32_to_bf16(d[e]) : lq_f32_to_f16(d[e]);
            out->q.dense       = h;
            out->q.dense_dtype = c->dense_dt;
        }
        if (bias) {
            uint16_t *b = lq_qbuf_alloc(out, (size_t)n * 2);
            lq_f32_to_f16_array(bias, n, b);
            out->q.bias = b;
        }
        *dense_owned = d;
    } else if (c->fmt == LQ_FMT_GPTQ || c->fmt == LQ_FMT_AWQ) {
        const int     b    = c->fmt == LQ_FMT_AWQ ? 4 : c->bits;
        const int64_t gs   = c->gs <= 0 ? k : c->gs;
        const int64_t G    = (k + gs - 1) / gs;
        const int     maxq = (1 << b) - 1;
        uint8_t      *q    = malloc((size_t)(n * k));
        int32_t      *z    = malloc((size_t)(G * n) * 4);
        float        *s    = malloc((size_t)(G * n) * 4);
        int32_t      *gi   = NULL;
        for (int64_t e = 0; e < n * k; e++)
            q[e] = (uint8_t)rnd_int(&r, 0, maxq);
        for (int64_t e = 0; e < G * n; e++) {
            /* v1 GPTQ keeps zeros >= 1 portable (see lq_gptq_zero); AWQ any */
            z[e] = rnd_int(&r, c->fmt == LQ_FMT_GPTQ ? 1 : 0, maxq);
            s[e] = exact ? pow2(rnd_int(&r, -4, 0)) : 0.002f + 0.01f * (float)lq_rng_uniform(&r);
        }
        if (c->act_order) {
            int64_t *perm = malloc((size_t)k * sizeof *perm);
            for (int64_t i = 0; i < k; i++)
                perm[i] = i;
            for (int64_t i = k - 1; i > 0; i--) {
                int64_t j = (int64_t)lq_rng_below(&r, (uint64_t)(i + 1)), t = perm[i];
                perm[i] = perm[j];
                perm[j] = t;
            }
            gi = malloc((size_t)k * 4);
            for (int64_t p = 0; p < k; p++)
                gi[perm[p]] = (int32_t)(p / gs); /* g_idx[c] = position of c in perm // g */
            free(perm);
        }
        st = c->fmt == LQ_FMT_GPTQ ? lq_pack_gptq(b, n, k, c->gs, q, z, s, gi, bias, out, &err)
                                   : lq_pack_awq(n, k, gs, q, z, s, bias, out, &err);
        const size_t sb = st == LQ_OK && c->act_order == 2 ? lq_qlinear_sort_bytes(&out->q) : 0;
        if (sb) { /* what a runtime does at load time */
            void *sbuf = lq_qbuf_alloc(out, sb);
            st         = sbuf ? lq_qlinear_sort(&out->q, sbuf, sb, &out->q) : LQ_ERR_NOMEM;
        } else if (st == LQ_OK && c->act_order == 2) {
            st = LQ_ERR_INVALID_ARG; /* a sorted case always has something to sort */
        }
        free(q);
        free(z);
        free(s);
        free(gi);
    } else if (c->fmt == LQ_FMT_NF4) {
        const int64_t ne = n * k, nb = (ne + c->gs - 1) / c->gs;
        uint8_t      *codes = malloc((size_t)ne);
        float        *am    = malloc((size_t)nb * 4);
        for (int64_t e = 0; e < ne; e++)
            codes[e] = (uint8_t)rnd_int(&r, 0, 15);
        for (int64_t bi = 0; bi < nb; bi++)
            am[bi] = exact ? pow2(rnd_int(&r, -3, 1)) : 0.01f + 0.1f * (float)lq_rng_uniform(&r);
        st = lq_pack_nf4(n, k, c->gs, codes, am, c->dq, 256, bias, out, &err);
        free(codes);
        free(am);
        if (st == LQ_OK && exact) {
            /* Kernels are generic over the descriptor's tables: values on a binary grid (of
             * 2^-7 here) make every product and sum exact while the sums stay below 2^17 (the
             * sizes tested), so any summation order must agree bit for bit.
             * The largest code value is 127/16, so that the integer-activation semantics
             * (lq_gemm_nf4_qx_ref) scales the table to int8 exactly (by 16: 127 and multiples
             * of 8) and its scale is 1/16; make_x gives each 64 activations a +-127. */
            float *qm = (float *)(uintptr_t)out->q.quant_map;
            for (int j = 0; j < 15; j++)
                qm[j] = 0.5f * (float)(j - 8);
            qm[15] = 127.f / 16.f;
            if (c->dq) {
                float        *nc  = (float *)(uintptr_t)out->q.nested_code;
                float        *na  = (float *)(uintptr_t)out->q.nested_absmax;
                const int64_t nnb = (nb + 255) / 256;
                for (int j = 0; j < 256; j++)
                    nc[j] = (float)(j % 7 - 3);
                for (int64_t j = 0; j < nnb; j++)
                    na[j] = pow2(rnd_int(&r, -3, 0));
                out->q.nested_offset = 0.5f;
            }
        }
    } else { /* INT8 */
        int8_t  *cb  = malloc((size_t)(n * k));
        float   *scb = malloc((size_t)n * 4);
        int32_t *oi  = malloc((size_t)(c->n_outlier + 1) * 4);
        float   *ow  = malloc((size_t)(n * c->n_outlier + 1) * 4);
        for (int64_t e = 0; e < n * k; e++)
            cb[e] = (int8_t)rnd_int(&r, -127, 127);
        for (int64_t i = 0; i < n; i++)
            scb[i] = exact ? 127.f * pow2(rnd_int(&r, -6, -2))
                           : 0.05f + 0.2f * (float)lq_rng_uniform(&r);
        for (int j = 0; j < c->n_outlier; j++) /* spread, strictly increasing */
            oi[j] = (int32_t)((2 * j + 1) * k / (2 * c->n_outlier + 1));
        for (int64_t e = 0; e < n * c->n_outlier; e++)
            ow[e] = exact ? (float)rnd_int(&r, -8, 8) * 0.5f : 0.3f * rnd_normal(&r);
        const float thr = c->threshold > 0.f ? (exact ? 200.f : c->threshold) : 0.f;
        st              = lq_pack_int8(n, k, cb, scb, oi, c->n_outlier, ow, thr, bias, out, &err);
        free(cb);
        free(scb);
        free(oi);
        free(ow);
    }
    free(bias);
    if (st != LQ_OK)
        fprintf(stderr, "build %s: %s\n", c->name, err.msg);
    return st;
}

/* Activations. NF4 exact mode: one +-127 in every 64 (see build). AWQ exact mode: one +-127 in
 * every block of the integer-activation semantics (lq_awq_qx_block), so each block's scale is 1
 * and the kernels' partial sums are integers times the power-of-2 scales: exact in any order
 * (the kernel on int8 activations adds segments of the channels apart). INT8 exact mode: one +-127
 * per row (outside stored columns) so 127 / rowmax == 1 and the quantized activations equal x;
 * runtime outliers are +-256 >= the exact threshold 200, which the absmax skips. */
static void make_x(const kcase *c, const lq_qlinear *w, int64_t m, int exact, uint64_t seed,
                   float *x) {
    lq_rng r;
    lq_rng_seed(&r, seed);
    const int64_t k = w->k;
    for (int64_t e = 0; e < m * k; e++)
        x[e] = exact ? (float)rnd_int(&r, c->fmt == LQ_FMT_INT8 ? -20 : -4,
                                      c->fmt == LQ_FMT_INT8 ? 20 : 4)
                     : rnd_normal(&r);
    const int64_t xb = !exact                 ? 0
                       : c->fmt == LQ_FMT_NF4 ? 64
                       : c->fmt == LQ_FMT_AWQ ? lq_awq_qx_block(w)
                                              : 0;
    if (xb > 0) /* each block's scale 127 / 127 = 1 */
        for (int64_t rr = 0; rr < m; rr++)
            for (int64_t c0 = 0; c0 < k; c0 += xb) {
                const int64_t len = k - c0 < xb ? k - c0 : xb;
                x[rr * k + c0 + (int64_t)lq_rng_below(&r, (uint64_t)len)] =
                    lq_rng_below(&r, 2) ? 127.f : -127.f;
            }
    if (c->fmt != LQ_FMT_INT8)
        return;
    for (int64_t rr = 0; rr < m; rr++) {
        if (exact) {
            int64_t col;
            int     stored;
            do {
                col    = (int64_t)lq_rng_below(&r, (uint64_t)k);
                stored = 0;
                for (int64_t j = 0; j < w->n_outlier; j++)
                    stored |= w->outlier_idx[j] == col;
            } while (stored);
            x[rr * k + col] = lq_rng_below(&r, 2) ? 127.f : -127.f;
        }
        /* a few large activations so runtime outlier columns appear */
        if (c->threshold > 0.f && lq_rng_below(&r, 3) == 0) {
            const int64_t col = (int64_t)lq_rng_below(&r, (uint64_t)k);
            x[rr * k + col]   = exact ? 256.f : (lq_rng_below(&r, 2) ? 6.f : -7.f);
        }
    }
}

#endif
