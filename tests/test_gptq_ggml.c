/* GPTQ on a GGML type's own grid (lq_gptq_ggml), every block type Q4_0 .. Q6_K, IQ4_NL, IQ4_XS:
 *  - the fake-quantized weights it returns are what its blocks decode to, bit for bit;
 *  - with H = I (no error to spread) it is round-to-nearest on ggml's own scales, searched with
 *    the Hessian diagonal as the importance matrix: the k-quants' blocks equal ggml's quantizer's
 *    with that imatrix (lq_ggml_encode_w) byte for byte, and no element of the 32-element types
 *    and the IQ4 ones (whose reference rounds with the unrounded fp32 scale) lands further from
 *    its weight than there;
 *  - on correlated inputs its output error tr((W - Q) H (W - Q)^T) is below that of
 *    round-to-nearest with diag(H) as the importance matrix (llama-quantize --imatrix) for every
 *    type;
 *  - act-order, static groups and a row that is not whole blocks are refused. */
#include "lq_dtype.h"
#include "lq_quant.h"
#include "lq_test.h"

#include <stdint.h>

static uint64_t rng = 88172645463325252ull;
static float    gauss(void) {
    double u[2];
    for (int i = 0; i < 2; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        u[i] = ((double)(rng >> 11) + 0.5) / 9007199254740992.0;
    }
    return (float)(sqrt(-2 * log(u[0])) * cos(6.283185307179586 * u[1]));
}

static lq_gptq_opts opts(void) {
    lq_gptq_opts o = {0};
    o.q            = (lq_qspec){4, -1, 0, 0, 0};
    o.damp         = 0.01;
    o.damp_retries = 4;
    o.block_size   = 128;
    o.name         = "test.linear";
    return o;
}

/* tr(D H D^T) for D = A - B, [n, k] */
static double out_err(const float *A, const float *B, const double *H, int64_t n, int64_t k) {
    double  s = 0;
    double *d = malloc((size_t)k * sizeof *d);
    for (int64_t r = 0; r < n; r++) {
        for (int64_t c = 0; c < k; c++)
            d[c] = (double)A[r * k + c] - B[r * k + c];
        for (int64_t i = 0; i < k; i++)
            for (int64_t j = 0; j < k; j++)
                s += d[i] * H[i * k + j] * d[j];
    }
    free(d);
    return s;
}

int main(void) {
    static const lq_dtype types[] = {LQ_DT_Q4_0, LQ_DT_Q4_1, LQ_DT_Q5_0, LQ_DT_Q5_1, LQ_DT_Q8_0,
                                     LQ_DT_Q2_K, LQ_DT_Q3_K, LQ_DT_Q4_K, LQ_DT_Q5_K, LQ_DT_Q6_K,
                                     LQ_DT_IQ4_NL, LQ_DT_IQ4_XS};
    const int64_t n = 24, k = 512, T = 2048;
    float  *W = malloc(sizeof(float) * n * k), *Wq = malloc(sizeof(float) * n * k);
    float  *Y = malloc(sizeof(float) * n * k), *H = malloc(sizeof(float) * k * k);
    float  *X = malloc(sizeof(float) * T * k);
    double *Hd = malloc(sizeof(double) * k * k);
    uint8_t *blk = malloc((size_t)n * k * 2), *ref = malloc((size_t)n * k * 2);
    float   *imp = malloc(sizeof(float) * k);
    for (int64_t i = 0; i < n * k; i++)
        W[i] = gauss() * (i % 53 == 0 ? 6.0f : 1.0f);
    /* correlated inputs: each feature mixes its neighbours; a few loud channels */
    for (int64_t t = 0; t < T; t++) {
        float prev = 0;
        for (int64_t c = 0; c < k; c++) {
            prev             = 0.7f * prev + gauss();
            X[t * k + c]     = prev * (c % 61 == 0 ? 8.0f : 1.0f);
        }
    }
    for (int64_t i = 0; i < k; i++)
        for (int64_t j = 0; j < k; j++) {
            double s = 0;
            for (int64_t t = 0; t < T; t++)
                s += (double)X[t * k + i] * X[t * k + j];
            Hd[i * k + j] = s / T;
        }
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const lq_dtype t = types[ti];
        int            bb;
        const int      be = lq_dtype_block(t, &bb);
        const int64_t  nb = n * k / be;
        lq_gptq_opts   o  = opts();
        lq_gptq_result res;
        lq_err         err = {0};

        /* H = I */
        for (int64_t i = 0; i < k * k; i++)
            H[i] = i % (k + 1) == 0 ? 1.0f : 0.0f;
        memcpy(Wq, W, sizeof(float) * n * k);
        CHECK_MSG(lq_gptq_ggml(Wq, H, n, k, &o, t, blk, &res, &err) == LQ_OK, "%s", err.msg);
        lq_ggml_decode(t, blk, nb, Y);
        CHECK_MSG(!memcmp(Y, Wq, sizeof(float) * n * k), "%s: returned weights are not the "
                  "blocks' values", lq_dtype_name(t));
        for (int64_t c = 0; c < k; c++)
            imp[c] = 1;
        for (int64_t r = 0; r < n; r++) /* ggml_quantize_chunk's rows, with diag(H) = 1 */
            lq_ggml_encode_w(t, W + r * k, k / be, imp, lq_ggml_row_sigma2(W + r * k, k),
                             ref + r * (k / be) * bb);
        if (be == 256 && t != LQ_DT_IQ4_XS) {
            CHECK_MSG(!memcmp(blk, ref, (size_t)(nb * bb)), "%s, H = I: blocks differ from "
                      "ggml's reference quantizer", lq_dtype_name(t));
        } else {
            int far = 0;
            lq_ggml_decode(t, ref, nb, Y);
            for (int64_t i = 0; i < n * k; i++)
                far += fabs((double)Wq[i] - W[i]) > fabs((double)Y[i] - W[i]) + 1e-6 * fabs(W[i]);
            /* value-nearest on the same scale: never further than the reference's rounding */
            CHECK_MSG(far == 0, "%s, H = I: %d elements further from the weight than ggml's",
                      lq_dtype_name(t), far);
        }

        /* correlated H: GPTQ's output error below round-to-nearest's */
        for (int64_t i = 0; i < k * k; i++)
            H[i] = (float)Hd[i];
        memcpy(Wq, W, sizeof(float) * n * k);
        CHECK_MSG(lq_gptq_ggml(Wq, H, n, k, &o, t, blk, &res, &err) == LQ_OK, "%s", err.msg);
        lq_ggml_decode(t, blk, nb, Y);
        CHECK_MSG(!memcmp(Y, Wq, sizeof(float) * n * k), "%s: returned weights are not the "
                  "blocks' values", lq_dtype_name(t));
        for (int64_t c = 0; c < k; c++)
            imp[c] = (float)Hd[c * k + c];
        for (int64_t r = 0; r < n; r++)
            lq_ggml_encode_w(t, W + r * k, k / be, imp, lq_ggml_row_sigma2(W + r * k, k),
                             ref + r * (k / be) * bb);
        lq_ggml_decode(t, ref, nb, Y);
        const double eg = out_err(W, Wq, Hd, n, k), er = out_err(W, Y, Hd, n, k);
        CHECK_MSG(eg < er,
                  "%s: GPTQ output error %.4g not below round-to-nearest's with an imatrix %.4g",
                  lq_dtype_name(t), eg, er);
        printf("%-6s output error tr(dW H dW^T): GPTQ %.4g, round-to-nearest with diag(H) as "
               "the imatrix %.4g (%.2fx)\n",
               lq_dtype_name(t), eg, er, er / eg);
    }
    lq_gptq_opts   o = opts();
    lq_gptq_result res;
    lq_err         err = {0};
    o.act_order = 1;
    CHECK(lq_gptq_ggml(Wq, H, n, k, &o, LQ_DT_Q4_K, blk, &res, &err) == LQ_ERR_INVALID_ARG);
    o = opts();
    CHECK(lq_gptq_ggml(Wq, H, n, 320, &o, LQ_DT_Q4_K, blk, &res, &err) == LQ_ERR_INVALID_ARG);
    CHECK(lq_gptq_ggml(Wq, H, n, k, &o, LQ_DT_F16, blk, &res, &err) == LQ_ERR_INVALID_ARG);
    free(W), free(Wq), free(Y), free(H), free(X), free(Hd), free(blk), free(ref), free(imp);
    return lq_test_end("gptq_ggml");
}
