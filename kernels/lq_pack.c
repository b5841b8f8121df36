/* Packers: the neutral representation a quantization method decides (integer codes, integer
 * zero points, float scales) -> the on-disk layouts of llmquant.h, in an owning lq_qbuf.
 * Packing is not a hot path (once per layer); the loops favour obviousness. */
#include "lq_kernels_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ARG_FAIL(...) return lq_fail(err, LQ_ERR_INVALID_ARG, __VA_ARGS__)

static lq_status alloc_arr(lq_qbuf *out, size_t bytes, void **p, const char *fn, const char *what,
                           lq_err *err) {
    *p = lq_qbuf_alloc(out, bytes);
    if (!*p)
        return lq_fail(err, LQ_ERR_NOMEM, "%s: cannot allocate %s (%zu bytes)", fn, what, bytes);
    return LQ_OK;
}

static lq_status pack_bias(const float *bias, int64_t n, lq_qbuf *out, const char *fn,
                           lq_err *err) {
    if (!bias)
        return LQ_OK;
    void *p;
    LQ_TRY(alloc_arr(out, (size_t)n * 2, &p, fn, "bias", err));
    lq_f32_to_f16_array(bias, n, p);
    out->q.bias = p;
    return LQ_OK;
}

static lq_status scales_to_f16(const float *scales, int64_t count, lq_qbuf *out, const char *fn,
                               lq_err *err) {
    for (int64_t i = 0; i < count; i++)
        if (!isfinite(scales[i]))
            ARG_FAIL("%s: scale %lld is not finite", fn, (long long)i);
    void *p;
    LQ_TRY(alloc_arr(out, (size_t)count * 2, &p, fn, "scales", err));
    lq_f32_to_f16_array(scales, count, p);
    out->q.scales = p;
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
    /* dims/bits rules live in one place: validate the descriptor-to-be before allocating */
    {
        lq_qlinear probe = *w;
        probe.qweight = probe.qzeros = probe.scales = q;
        probe.g_idx                                 = (const int32_t *)q;
        LQ_TRY(lq_qlinear_check(&probe, err));
    }
    const int64_t  G    = lq_gptq_groups(w);
    const uint32_t maxq = (1u << bits) - 1u;
    for (int64_t e = 0; e < n * k; e++)
        if (q[e] > maxq)
            ARG_FAIL("%s: code %u at [%lld, %lld] exceeds %u for %d bits", fn, q[e],
                     (long long)(e / k), (long long)(e % k), maxq, bits);
    for (int64_t e = 0; e < G * n; e++)
        if (zeros[e] < 0 || (uint32_t)zeros[e] > maxq)
            ARG_FAIL("%s: zero point %d at [group %lld, col %lld] outside [0, %u]", fn, zeros[e],
                     (long long)(e / n), (long long)(e % n), maxq);
    if (g_idx)
        for (int64_t c = 0; c < k; c++)
            if (g_idx[c] < 0 || g_idx[c] >= G)
                ARG_FAIL("%s: g_idx[%lld] = %d outside [0, %lld)", fn, (long long)c, g_idx[c],
                         (long long)G);

    lq_status     st;
    void         *qw, *qz, *gi;
    const int64_t qrows = k * bits / 32, zwords = n * bits / 32;
    if ((st = alloc_arr(out, (size_t)(qrows * n) * 4, &qw, fn, "qweight", err)) ||
        (st = alloc_arr(out, (size_t)(G * zwords) * 4, &qz, fn, "qzeros", err)) ||
        (st = alloc_arr(out, (size_t)k * 4, &gi, fn, "g_idx", err)) ||
        (st = scales_to_f16(scales, G * n, out, fn, err)) ||
        (st = pack_bias(bias, n, out, fn, err))) {
        lq_qbuf_free(out);
        return st;
    }
    /* codes along k: one bit stream per output column (AutoGPTQ pack: qweight[row] |=
     * intweight[j] << (bits * (j - i)), 3-bit values straddling words) */
    for (int64_t i = 0; i < n; i++)
        for (int64_t c = 0; c < k; c++)
            lq_stream_put((int32_t *)qw + i, n, c, bits, q[i * k + c]);
    /* v1 stores zero - 1, each field masked so a zero of 0 cannot spill into its neighbours */
    for (int64_t g = 0; g < G; g++)
        for (int64_t i = 0; i < n; i++)
            lq_stream_put((int32_t *)qz + g * zwords, 1, i, bits,
                          ((uint32_t)zeros[g * n + i] - 1u) & maxq);
    for (int64_t c = 0; c < k; c++)
        ((int32_t *)gi)[c] = g_idx ? g_idx[c] : (int32_t)(c / group_size);
    w->qweight = qw;
    w->qzeros  = qz;
    w->g_idx   = gi;
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
    {
        lq_qlinear probe = *w;
        probe.qweight = probe.qzeros = probe.scales = q;
        LQ_TRY(lq_qlinear_check(&probe, err));
    }
    const int64_t G = k / group_size, words = n / 8;
    for (int64_t e = 0; e < n * k; e++)
        if (q[e] > 15)
            ARG_FAIL("%s: code %u at [%lld, %lld] exceeds 15", fn, q[e], (long long)(e / k),
                     (long long)(e % k));
    for (int64_t e = 0; e < G * n; e++)
        if (zeros[e] < 0 || zeros[e] > 15)
            ARG_FAIL("%s: zero point %d at [group %lld, col %lld] outside [0, 15]", fn, zeros[e],
                     (long long)(e / n), (long long)(e % n));
    lq_status st;
    void     *qw, *qz;
    if ((st = alloc_arr(out, (size_t)(k * words) * 4, &qw, fn, "qweight", err)) ||
        (st = alloc_arr(out, (size_t)(G * words) * 4, &qz, fn, "qzeros", err)) ||
        (st = scales_to_f16(scales, G * n, out, fn, err)) ||
        (st = pack_bias(bias, n, out, fn, err))) {
        lq_qbuf_free(out);
        return st;
    }
    /* AutoAWQ pack: qweight[c, j] |= q[c, 8j + order[f]] << 4f, order = [0,2,4,6,1,3,5,7] */
    static const int order[8] = {0, 2, 4, 6, 1, 3, 5, 7};
    for (int64_t c = 0; c < k; c++)
        for (int64_t j = 0; j < words; j++) {
            uint32_t v = 0;
            for (int f = 0; f < 8; f++)
                v |= (uint32_t)q[(8 * j + order[f]) * k + c] << (4 * f);
            ((int32_t *)qw)[c * words + j] = (int32_t)v;
        }
    for (int64_t g = 0; g < G; g++)
        for (int64_t j = 0; j < words; j++) {
            uint32_t v = 0;
            for (int f = 0; f < 8; f++)
                v |= (uint32_t)zeros[g * n + 8 * j + order[f]] << (4 * f);
            ((int32_t *)qz)[g * words + j] = (int32_t)v;
        }
    w->qweight = qw;
    w->qzeros  = qz;
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
    {
        lq_qlinear probe = *w;
        probe.qweight = probe.absmax = codes;
        probe.quant_map = probe.nested_absmax = probe.nested_code = absmax;
        LQ_TRY(lq_qlinear_check(&probe, err));
    }
    const int64_t ne = n * k, nb = (ne + blocksize - 1) / blocksize;
    for (int64_t e = 0; e < ne; e++)
        if (codes[e] > 15)
            ARG_FAIL("%s: code %u at element %lld exceeds 15", fn, codes[e], (long long)e);
    for (int64_t b = 0; b < nb; b++)
        if (!isfinite(absmax[b]) || absmax[b] < 0.f)
            ARG_FAIL("%s: absmax[%lld] = %g must be finite and >= 0", fn, (long long)b,
                     (double)absmax[b]);
    lq_status st;
    void     *qw, *qm;
    if ((st = alloc_arr(out, (size_t)(ne / 2), &qw, fn, "qweight", err)) ||
        (st = alloc_arr(out, 16 * sizeof(float), &qm, fn, "quant_map", err)) ||
        (st = pack_bias(bias, n, out, fn, err)))
        goto fail;
    for (int64_t e = 0; e < ne; e += 2)
        ((uint8_t *)qw)[e / 2] = (uint8_t)((codes[e] << 4) | codes[e + 1]);
    memcpy(qm, lq_nf4_table, sizeof lq_nf4_table);
    w->qweight   = qw;
    w->quant_map = qm;
    if (!double_quant) {
        void *am;
        if ((st = alloc_arr(out, (size_t)nb * 4, &am, fn, "absmax", err)))
            goto fail;
        memcpy(am, absmax, (size_t)nb * 4);
        w->absmax = am;
        return LQ_OK;
    }
    /* Double quant (bitsandbytes quantize_4bit, compress_statistics=True):
     * offset = mean(absmax); quantize_blockwise(absmax - offset, blocksize=256) with the
     * signed dynamic map -> uint8 absmax + float32 nested absmax. */
    {
        const int64_t nnb = (nb + nested_blocksize - 1) / nested_blocksize;
        void         *qa, *na, *nc;
        if ((st = alloc_arr(out, (size_t)nb, &qa, fn, "absmax", err)) ||
            (st = alloc_arr(out, (size_t)nnb * 4, &na, fn, "nested_absmax", err)) ||
            (st = alloc_arr(out, 256 * 4, &nc, fn, "nested_code", err)))
            goto fail;
        float *centered = lq_malloc_n(nb, sizeof(float));
        if (!centered) {
            st = lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", fn);
            goto fail;
        }
        double sum = 0.0;
        for (int64_t b = 0; b < nb; b++)
            sum += absmax[b];
        const float offset = (float)(sum / (double)nb);
        for (int64_t b = 0; b < nb; b++)
            centered[b] = absmax[b] - offset;
        lq_dynamic_map_8bit(nc);
        quantize_blockwise_dyn(centered, nb, nested_blocksize, nc, qa, na);
        free(centered);
        w->absmax        = qa;
        w->nested_absmax = na;
        w->nested_code   = nc;
        w->nested_offset = offset;
    }
    return LQ_OK;
fail:
    lq_qbuf_free(out);
    return st;
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
    {
        lq_qlinear probe  = *w;
        probe.qweight     = cb;
        probe.scb         = scb;
        probe.outlier_idx = outlier_idx;
        probe.outlier_w   = (const uint16_t *)scb;
        LQ_TRY(lq_qlinear_check(&probe, err));
    }
    for (int64_t e = 0; e < n * k; e++)
        if (cb[e] == INT8_MIN)
            ARG_FAIL("%s: CB[%lld, %lld] = -128, row-wise absmax int8 spans [-127, 127]", fn,
                     (long long)(e / k), (long long)(e % k));
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(scb[i]) || scb[i] < 0.f)
            ARG_FAIL("%s: SCB[%lld] = %g must be finite and >= 0", fn, (long long)i,
                     (double)scb[i]);
    for (int64_t j = 0; j < n_outlier; j++)
        if (outlier_idx[j] < 0 || outlier_idx[j] >= k ||
            (j > 0 && outlier_idx[j] <= outlier_idx[j - 1]))
            ARG_FAIL("%s: outlier_idx must be strictly increasing in [0, %lld): [%lld] = %d", fn,
                     (long long)k, (long long)j, outlier_idx[j]);
    lq_status st;
    void     *q8, *s, *oi = NULL, *ow = NULL;
    if ((st = alloc_arr(out, (size_t)(n * k), &q8, fn, "CB", err)) ||
        (st = alloc_arr(out, (size_t)n * 4, &s, fn, "SCB", err)) ||
        (n_outlier > 0 &&
         (st = alloc_arr(out, (size_t)n_outlier * 4, &oi, fn, "outlier_idx", err))) ||
        (n_outlier > 0 &&
         (st = alloc_arr(out, (size_t)(n * n_outlier) * 2, &ow, fn, "outlier_w", err))) ||
        (st = pack_bias(bias, n, out, fn, err))) {
        lq_qbuf_free(out);
        return st;
    }
    memcpy(q8, cb, (size_t)(n * k));
    memcpy(s, scb, (size_t)n * 4);
    if (n_outlier > 0) {
        memcpy(oi, outlier_idx, (size_t)n_outlier * 4);
        lq_f32_to_f16_array(w_outlier, n * n_outlier, ow);
    }
    w->qweight     = q8;
    w->scb         = s;
    w->outlier_idx = oi;
    w->outlier_w   = ow;
    return LQ_OK;
}
