/* Unquantized linears. On a CPU with AVX2 but not AVX-512, from LQ_GEMM256_M rows, every dtype
 * runs on lq_gemm256 (its workspace holds x packed). float32 otherwise: sgemm on the weights as
 * they are (OpenBLAS where it runs its AVX-512 kernels, else lq_sgemm_tile). fp16 / bf16: the
 * AVX-512 kernel up to LQ_DENSE16_AVX512_M rows and lq_gemm512 past it, which converts W as it
 * packs (no float32 copy, no workspace); without AVX-512 but with AVX2 the AVX2 kernel below
 * LQ_GEMM256_M rows (converting as they read: half the bytes of float32 where the rows are
 * memory-bound); otherwise tiles of TILE_ROWS weight rows converted to float32 in the
 * workspace, each multiplied with sgemm. The tiles are 4x the quantized formats' because sgemm
 * packs x again on every call: with 256-row tiles 4096 x 4096 at m = 512 ran 15-20% slower
 * than sgemm on float32 weights, with 1024 within 1-4%. */
#include "lq_kernels_impl.h"

#include <omp.h>
#include <string.h>

enum { TILE_ROWS = 1024 };

static int64_t tile_rows(const lq_qlinear *w) {
    return w->n < TILE_ROWS ? w->n : TILE_ROWS;
}

/* weights [e0, e0 + cnt) of the flattened [n, k] as float32 (exact); kind: lq_half_cvt_kind() */
static void dense_to_f32(const lq_qlinear *w, int64_t e0, int64_t cnt, int kind, float *out) {
    lq_half_to_f32(kind, (const uint16_t *)w->dense + e0, w->dense_dtype == LQ_DENSE_BF16, cnt,
                   out);
}

lq_status lq_dequant_dense_cpu(const lq_qlinear *w, float *out, int nthreads) {
    const int64_t numel = w->n * w->k;
    if (w->dense_dtype == LQ_DENSE_F32) {
        memcpy(out, w->dense, (size_t)numel * sizeof(float));
        return LQ_OK;
    }
    const int avx = lq_half_cvt_kind();
#pragma omp parallel for schedule(static) num_threads(lq_cpu_threads(nthreads))
    for (int64_t i = 0; i < w->n; i++)
        dense_to_f32(w, i * w->k, w->k, avx, out + i * w->k);
    return LQ_OK;
}

/* fp16 / bf16 past the AVX-512 row kernel: the AVX-512 GEMM, converting as it packs */
static int gemm512_ok(const lq_qlinear *w, int64_t m) {
    return w->dense_dtype != LQ_DENSE_F32 && !lq_dense16_avx512_ok(w, m) && lq_cpu_avx512();
}

/* the AVX2 GEMM where there is no AVX-512 (float32 too: see LQ_GEMM256_M) */
static int gemm256_ok(int64_t m) {
    return m >= LQ_GEMM256_M && !lq_cpu_avx512() && lq_cpu_avx2i();
}

static lq_gemm_b_kind dense_kind(const lq_qlinear *w) {
    return w->dense_dtype == LQ_DENSE_BF16  ? LQ_GEMM_B_BF16
           : w->dense_dtype == LQ_DENSE_F16 ? LQ_GEMM_B_F16
                                            : LQ_GEMM_B_F32;
}

size_t lq_ws_dense_cpu(const lq_qlinear *w, int64_t m) {
    if (gemm256_ok(m))
        return lq_gemm256_ws(m, w->k);
    if (w->dense_dtype == LQ_DENSE_F32 || lq_dense16_avx512_ok(w, m) || gemm512_ok(w, m) ||
        lq_dense16_avx2_ok(w, m))
        return 0;
    return (size_t)(tile_rows(w) * w->k) * sizeof(float);
}

lq_status lq_gemm_dense_cpu(const lq_qlinear *w, const float *x, int64_t m, float *y, void *ws,
                            size_t ws_size, int nthreads) {
    const int64_t n = w->n, k = w->k;
    if (!lq_blas_dims_ok(m, n, k))
        return LQ_ERR_UNSUPPORTED;
    if (gemm256_ok(m)) {
        const lq_gemm_b b = {.p = w->dense, .ld = k, .kind = dense_kind(w)};
        if (!ws || ws_size < lq_gemm256_ws(m, k))
            return LQ_ERR_INVALID_ARG;
        lq_gemm256(x, m, k, &b, n, y, n, ws, lq_cpu_threads(nthreads));
    } else if (w->dense_dtype == LQ_DENSE_F32 && lq_blas_avx512()) {
        /* nothing to convert, and OpenBLAS's own AVX-512 sgemm was 3-20% ahead of lq_gemm512
         * (4096 x 4096, 1 thread, 32-512 rows) */
        lq_sgemm_blas(x, m, k, w->dense, n, 0, y, n, 0.f);
    } else if (w->dense_dtype == LQ_DENSE_F32) {
        lq_sgemm_tile(x, m, k, w->dense, n, 0, y, n, 0.f, nthreads);
    } else if (lq_dense16_avx512_ok(w, m)) {
        LQ_TRY(lq_gemm_dense16_avx512(w, x, m, y, lq_cpu_threads(nthreads)));
    } else if (gemm512_ok(w, m)) {
        const lq_gemm_b b = {.p = w->dense, .ld = k, .kind = dense_kind(w)};
        lq_gemm512(x, m, k, &b, n, y, n, 0.f, lq_cpu_threads(nthreads));
    } else if (lq_dense16_avx2_ok(w, m)) {
        LQ_TRY(lq_gemm_dense16_avx2(w, x, m, y, lq_cpu_threads(nthreads)));
    } else {
        const int64_t tr = tile_rows(w);
        if (!ws || ws_size < (size_t)(tr * k) * sizeof(float))
            return LQ_ERR_INVALID_ARG;
        const int nt = lq_cpu_threads(nthreads), avx = lq_half_cvt_kind();
        for (int64_t i0 = 0; i0 < n; i0 += tr) {
            const int64_t nc = i0 + tr < n ? tr : n - i0;
#pragma omp parallel for schedule(static) num_threads(nt)
            for (int64_t i = 0; i < nc; i++)
                dense_to_f32(w, (i0 + i) * k, k, avx, (float *)ws + i * k);
            lq_sgemm_tile(x, m, k, ws, nc, 0, y + i0, n, 0.f, nthreads);
        }
    }
    lq_add_bias_f16(w->bias, m, n, y);
    return LQ_OK;
}

/* Half activations, each flag for its own weights at every m: bf16 on a CPU with AVX-512 BF16
 * (LQ_QLINEAR_BF16_X), fp16 on one with AVX-512 (LQ_QLINEAR_F16_X) */
int lq_dense_cpu_quantizes_x(const lq_qlinear *w, int64_t m, unsigned flags) {
    if (m < 1)
        return 0;
    if (w->dense_dtype == LQ_DENSE_BF16)
        return (flags & LQ_QLINEAR_BF16_X) && lq_cpu_avx512bf16();
    return w->dense_dtype == LQ_DENSE_F16 && (flags & LQ_QLINEAR_F16_X) && lq_cpu_avx512();
}

static unsigned dense_qx_flag(const lq_qlinear *w) {
    return w->dense_dtype == LQ_DENSE_BF16 ? LQ_QLINEAR_BF16_X : LQ_QLINEAR_F16_X;
}

/* fp16: the rounded activations as float32 (the row kernel's fp16 copy fits there), then the
 * float kernels' workspace */
static size_t ws_f16x(const lq_qlinear *w, int64_t m) {
    int64_t      e;
    const size_t fl = lq_ws_dense_cpu(w, m);
    if (!lq_mul_i64(m, w->k, &e) || !lq_mul_i64(e, (int64_t)sizeof(float), &e) ||
        !lq_add_i64(lq_align_up(e, 64), (int64_t)fl, &e) || (uint64_t)e > SIZE_MAX)
        return SIZE_MAX;
    return (size_t)e;
}

size_t lq_ws_dense_cpu_qx(const lq_qlinear *w, int64_t m) {
    return w->dense_dtype == LQ_DENSE_BF16 ? lq_ws_dense_bf16x(w->k, m) : ws_f16x(w, m);
}

static lq_status gemm_f16x(const lq_qlinear *w, const float *x, int64_t m, float *y, void *ws,
                           size_t ws_size, int nthreads) {
    const size_t need = ws_f16x(w, m);
    if (!ws || ws_size < need)
        return LQ_ERR_INVALID_ARG;
    if (lq_dense_f16x_row_ok(w, m, nthreads)) {
        LQ_TRY(lq_gemm_dense_f16x_row(w, x, y, ws, nthreads));
        lq_add_bias_f16(w->bias, m, w->n, y);
        return LQ_OK;
    }
    const size_t xb = (size_t)lq_align_up(m * w->k * (int64_t)sizeof(float), 64);
    lq_round_f16_avx512(x, m * w->k, ws);
    return lq_gemm_dense_cpu(w, ws, m, y, (char *)ws + xb, ws_size - xb, nthreads);
}

lq_status lq_gemm_dense_cpu_qx(const lq_qlinear *w, const float *x, int64_t m, float *y,
                               void *ws, size_t ws_size, int nthreads) {
    if (!lq_blas_dims_ok(m, w->n, w->k) || !lq_dense_cpu_quantizes_x(w, m, dense_qx_flag(w)))
        return LQ_ERR_UNSUPPORTED;
    if (w->dense_dtype == LQ_DENSE_F16)
        return gemm_f16x(w, x, m, y, ws, ws_size, lq_cpu_threads(nthreads));
    LQ_TRY(lq_gemm_dense_bf16x(w, x, m, y, ws, ws_size, lq_cpu_threads(nthreads)));
    lq_add_bias_f16(w->bias, m, w->n, y);
    return LQ_OK;
}
