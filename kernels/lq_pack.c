/* Packers: the neutral representation a quantization method decides (integer codes, integer
 * zero points, float scales) -> the on-disk layouts of llmquant.h, in an owning lq_qbuf.
 * Packing is not a hot path (once per layer); the loops favour obviousness. */
#include "lq_kernels_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ARG_FAIL(...) return lq_fail(err, LQ_ERR_INVALID_ARG, __VA_ARGS__)
/* after the arrays exist: free them with the error */
#define PACK_FAIL(...)                                                                             \
    do {                                                                                           \
        lq_qbuf_free(out);                                                                         \
        return lq_fail(err, LQ_ERR_INVALID_ARG, __VA_ARGS__);                                      \
    } while (0)

static lq_status pack_bias(const float *bias, int64_t n, lq_qbuf *out, const char *fn,
                           lq_err *err) {
    if (!bias)
        return LQ_OK;
    void *p = lq_qbuf_alloc(out, (size_t)n * 2);
    if (!p) {
        lq_qbuf_free(out);
        return lq_fail(err, LQ_ERR_NOMEM, "%s: cannot allocate the bias", fn);
    }
    lq_f32_to_f16_array(bias, n, p);
    out->q.bias = p;
    return LQ_OK;
}

/* float scales -> the layout's fp16 scales array */
static lq_status scales_to_f16(const float *scales, int64_t count, lq_qbuf *out, const char *fn,
                               lq_err *err) {
    for (int64_t i = 0; i < count; i++)
        if (!isfinite(scales[i]))
            PACK_FAIL("%s: scale %lld is not finite", fn, (long long)i);
    lq_f32_to_f16_array(scales, count, lq_qbuf_mut(out, out->q.scales));
    return LQ_OK;
}

/* ---------------------------------------------------------------------------------------- */
lq_status lq_pack_gptq(int bits, int64_t n, int64_t k, int64_t group_size, const uint8_t *q,
                       const int32_t *zeros, const float *scales, const int32_t *g_idx,
                       const float *bias, lq_qbuf *out, lq_err *err) {
    const char *fn = "lq_pack_gptq";
    memset(out, 0, sizeof *out);
    if (group_size <= 0 || group_size > k)
        group_size = k; /* per-channel: one group */
    lq_qlinear *w = &out->q;
    w->format     = LQ_FMT_GPTQ;
    w->bits       = bits;
    w->n          = n;
    w->k          = k;
    w->group_size = group_size;
    if (!q || !zeros || !scales)
        ARG_FAIL("%s: q, zeros and scales are required", fn);
    LQ_TRY(lq_qbuf_alloc_layout(out, err)); /* the dims/bits rules, then the arrays */
    const int64_t  G    = lq_gptq_groups(w);
    const uint32_t maxq = (1u << bits) - 1u;
    for (int64_t e = 0; e < n * k; e++)
        if (q[e] > maxq)
            PACK_FAIL("%s: code %u at [%lld, %lld] exceeds %u for %d bits", fn, q[e],
                      (long long)(e / k), (long long)(e % k), maxq, bits);
    for (int64_t e = 0; e < G * n; e++)
        if (zeros[e] < 0 || (uint32_t)zeros[e] > maxq)
            PACK_FAIL("%s: zero point %d at [group %lld, col %lld] outside [0, %u]", fn, zeros[e],
                      (long long)(e / n), (long long)(e % n), maxq);
    if (g_idx)
        for (int64_t c = 0; c < k; c++)
            if (g_idx[c] < 0 || g_idx[c] >= G)
                PACK_FAIL("%s: g_idx[%lld] = %d outside [0, %lld)", fn, (long long)c, g_idx[c],
                          (long long)G);
    LQ_TRY(scales_to_f16(scales, G * n, out, fn, err));
    LQ_TRY(pack_bias(bias, n, out, fn, err));
    int32_t      *qw = lq_qbuf_mut(out, w->qweight), *qz = lq_qbuf_mut(out, w->qzeros);
    int32_t      *gi     = lq_qbuf_mut(out, w->g_idx);
    const int64_t zwords = n * bits / 32;
    /* codes along k: one bit stream per output column (AutoGPTQ pack: qweight[row] |=
     * intweight[j] << (bits * (j - i)), 3-bit values straddling words) */
    for (int64_t i = 0; i < n; i++)
        for (int64_t c = 0; c < k; c++)
            lq_stream_put(qw + i, n, c, bits, q[i * k + c]);
    /* v1 stores zero - 1, each field masked so a zero of 0 cannot spill into its neighbours */
    for (int64_t g = 0; g < G; g++)
        for (int64_t i = 0; i < n; i++)
            lq_stream_put(qz + g * zwords, 1, i, bits, ((uint32_t)zeros[g * n + i] - 1u) & maxq);
    for (int64_t c = 0; c < k; c++)
        gi[c] = g_idx ? g_idx[c] : (int32_t)(c / group_size);
    return LQ_OK;
}

/* ---------------------------------------------------------------------------------------- */
lq_status lq_pack_awq(int64_t n, int64_t k, int64_t group_size, const uint8_t *q,
                      const int32_t *zeros, const float *scales, const float *bias, lq_qbuf *out,
                      lq_err *err) {
    const char *fn = "lq_pack_awq";
    memset(out, 0, sizeof *out);
    lq_qlinear *w = &out->q;
    w->format     = LQ_FMT_AWQ;
    w->bits       = 4;
    w->n          = n;
    w->k          = k;
    w->group_size = group_size;
    if (!q || !zeros || !scales)
        ARG_FAIL("%s: q, zeros and scales are required", fn);
    LQ_TRY(lq_qbuf_alloc_layout(out, err));
    const int64_t G = k / group_size, words = n / 8;
    for (int64_t e = 0; e < n * k; e++)
        if (q[e] > 15)
            PACK_FAIL("%s: code %u at [%lld, %lld] exceeds 15", fn, q[e], (long long)(e / k),
                      (long long)(e % k));
    for (int64_t e = 0; e < G * n; e++)
        if (zeros[e] < 0 || zeros[e] > 15)
            PACK_FAIL("%s: zero point %d at [group %lld, col %lld] outside [0, 15]", fn, zeros[e],
                      (long long)(e / n), (long long)(e % n));
    LQ_TRY(scales_to_f16(scales, G * n, out, fn, err));
    LQ_TRY(pack_bias(bias, n, out, fn, err));
    int32_t *qw = lq_qbuf_mut(out, w->qweight), *qz = lq_qbuf_mut(out, w->qzeros);
    /* AutoAWQ pack: qweight[c, j] |= q[c, 8j + order[f]] << 4f, order = [0,2,4,6,1,3,5,7] */
    static const int order[8] = {0, 2, 4, 6, 1, 3, 5, 7};
    for (int64_t c = 0; c < k; c++)
        for (int64_t j = 0; j < words; j++) {
            uint32_t v = 0;
            for (int f = 0; f < 8; f++)
                v |= (uint32_t)q[(8 * j + order[f]) * k + c] << (4 * f);
            qw[c * words + j] = (int32_t)v;
        }
    for (int64_t g = 0; g < G; g++)
        for (int64_t j = 0; j < words; j++) {
            uint32_t v = 0;
            for (int f = 0; f < 8; f++)
                v |= (uint32_t)zeros[g * n + 8 * j + order[f]] << (4 * f);
            qz[g * words + j] = (int32_t)v;
        }
    return LQ_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* bitsandbytes quantize_blockwise (backends/default/ops.py) with the dynamic map: per block
 * absmax, x * (1 / absmax) (the tail block divides), clamp to [-1, 1], then bucketize against
 * the midpoints of the sorted code (ties go to the lower code, torch.bucketize right=False). */
static void quantize_blockwise_dyn(const float *a, int64_t n, int64_t bs, const float code[256],
                                   uint8_t *q, float *absmax) {
    float bounds[255];
    for (int j = 0; j < 255; j++)
        bounds[j] = (code[j] + code[j + 1]) / 2.f;
    const int64_t full = n - n % bs;
    for (int64_t b0 = 0; b0 < n; b0 += bs) {
        const int64_t b1 = b0 + bs < n ? b0 + bs : n;
        float         am = 0.f;
        for (int64_t e = b0; e < b1; e++)
            am = fmaxf(am, fabsf(a[e]));
        absmax[b0 / bs] = am;
        const float amc = am < 1e-38f ? 1e-38f : am;
        const float inv = 1.f / amc;
        for (int64_t e = b0; e < b1; e++) {
            float s = b0 < full ? a[e] * inv : a[e] / amc;
            s       = s < -1.f ? -1.f : (s > 1.f ? 1.f : s);
            int lo = 0, hi = 255; /* count of bounds < s */
            while (lo < hi) {
                const int mid = (lo + hi) / 2;
                if (bounds[mid] < s)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            q[e] = (uint8_t)lo;
        }
    }
}

lq_status lq_pack_nf4(int64_t n, int64_t k, int64_t blocksize, const uint8_t *codes,
                      const float *absmax, int double_quant, int nested_blocksize,
                      const float *bias, lq_qbuf *out, lq_err *err) {
    const char *fn = "lq_pack_nf4";
    memset(out, 0, sizeof *out);
    lq_qlinear *w = &out->q;
    w->format     = LQ_FMT_NF4;
    w->bits       = 4;
    w->n          = n;
    w->k          = k;
    w->group_size = blocksize;
    if (!codes || !absmax)
        ARG_FAIL("%s: codes and absmax are required", fn);
    if (double_quant && nested_blocksize <= 0)
        ARG_FAIL("%s: nested_blocksize = %d must be positive with double quant", fn,
                 nested_blocksize);
    w->nested_blocksize = double_quant ? nested_blocksize : 0;
    LQ_TRY(lq_qbuf_alloc_layout(out, err));
    const int64_t ne = n * k, nb = (ne + blocksize - 1) / blocksize;
    for (int64_t e = 0; e < ne; e++)
        if (codes[e] > 15)
            PACK_FAIL("%s: code %u at element %lld exceeds 15", fn, codes[e], (long long)e);
    for (int64_t b = 0; b < nb; b++)
        if (!isfinite(absmax[b]) || absmax[b] < 0.f)
            PACK_FAIL("%s: absmax[%lld] = %g must be finite and >= 0", fn, (long long)b,
                      (double)absmax[b]);
    LQ_TRY(pack_bias(bias, n, out, fn, err));
    uint8_t *qw = lq_qbuf_mut(out, w->qweight);
    for (int64_t e = 0; e < ne; e += 2)
        qw[e / 2] = (uint8_t)((codes[e] << 4) | codes[e + 1]);
    memcpy(lq_qbuf_mut(out, w->quant_map), lq_nf4_table, sizeof lq_nf4_table);
    if (!double_quant) {
        memcpy(lq_qbuf_mut(out, w->absmax), absmax, (size_t)nb * 4);
        return LQ_OK;
    }
    /* Double quant (bitsandbytes quantize_4bit, compress_statistics=True):
     * offset = mean(absmax); quantize_blockwise(absmax - offset, blocksize=256) with the
     * signed dynamic map -> uint8 absmax + float32 nested absmax. */
    float *centered = lq_malloc_n(nb, sizeof(float));
    if (!centered) {
        lq_qbuf_free(out);
        return lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", fn);
    }
    double sum = 0.0;
    for (int64_t b = 0; b < nb; b++)
        sum += absmax[b];
    const float offset = (float)(sum / (double)nb);
    for (int64_t b = 0; b < nb; b++)
        centered[b] = absmax[b] - offset;
    float *nc = lq_qbuf_mut(out, w->nested_code);
    lq_dynamic_map_8bit(nc);
    quantize_blockwise_dyn(centered, nb, nested_blocksize, nc, lq_qbuf_mut(out, w->absmax),
                           lq_qbuf_mut(out, w->nested_absmax));
    free(centered);
    w->nested_offset = offset;
    return LQ_OK;
}

/* ---------------------------------------------------------------------------------------- */
lq_status lq_pack_int8(int64_t n, int64_t k, const int8_t *cb, const float *scb,
                       const int32_t *outlier_idx, int64_t n_outlier, const float *w_outlier,
                       float threshold, const float *bias, lq_qbuf *out, lq_err *err) {
    const char *fn = "lq_pack_int8";
    memset(out, 0, sizeof *out);
    lq_qlinear *w = &out->q;
    w->format     = LQ_FMT_INT8;
    w->bits       = 8;
    w->n          = n;
    w->k          = k;
    w->n_outlier  = n_outlier;
    w->threshold  = threshold;
    if (!cb || !scb)
        ARG_FAIL("%s: cb and scb are required", fn);
    if (n_outlier > 0 && (!outlier_idx || !w_outlier))
        ARG_FAIL("%s: %lld outlier columns need outlier_idx and w_outlier", fn,
                 (long long)n_outlier);
    LQ_TRY(lq_qbuf_alloc_layout(out, err));
    for (int64_t e = 0; e < n * k; e++)
        if (cb[e] == INT8_MIN)
            PACK_FAIL("%s: CB[%lld, %lld] = -128, row-wise absmax int8 spans [-127, 127]", fn,
                      (long long)(e / k), (long long)(e % k));
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(scb[i]) || scb[i] < 0.f)
            PACK_FAIL("%s: SCB[%lld] = %g must be finite and >= 0", fn, (long long)i,
                      (double)scb[i]);
    for (int64_t j = 0; j < n_outlier; j++)
        if (outlier_idx[j] < 0 || outlier_idx[j] >= k ||
            (j > 0 && outlier_idx[j] <= outlier_idx[j - 1]))
            PACK_FAIL("%s: outlier_idx must be strictly increasing in [0, %lld): [%lld] = %d", fn,
                      (long long)k, (long long)j, outlier_idx[j]);
    LQ_TRY(pack_bias(bias, n, out, fn, err));
    memcpy(lq_qbuf_mut(out, w->qweight), cb, (size_t)(n * k));
    memcpy(lq_qbuf_mut(out, w->scb), scb, (size_t)n * 4);
    if (n_outlier > 0) {
        memcpy(lq_qbuf_mut(out, w->outlier_idx), outlier_idx, (size_t)n_outlier * 4);
        lq_f32_to_f16_array(w_outlier, n * n_outlier, lq_qbuf_mut(out, w->outlier_w));
    }
    return LQ_OK;
}
