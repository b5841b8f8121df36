/* Public CPU entry points of llmquant.h: validate, then dispatch through the format table. */
#include "lq_kernels_impl.h"

static lq_status traits_of(const lq_qlinear *w, const lq_format_traits **t, lq_err *err) {
    LQ_RETURN_IF(!w, err, LQ_ERR_INVALID_ARG, "lq_qlinear: NULL descriptor");
    *t = lq_format_traits_get((lq_format)w->format);
    LQ_RETURN_IF(!*t, err, LQ_ERR_INVALID_ARG, "lq_qlinear: unknown format %d", (int)w->format);
    return LQ_OK;
}

LQ_API lq_status lq_qlinear_check(const lq_qlinear *w, lq_err *err) {
    const lq_format_traits *t;
    LQ_TRY(traits_of(w, &t, err));
    return t->check(w, err);
}

LQ_API size_t lq_qlinear_bytes(const lq_qlinear *w) {
    const lq_format_traits *t;
    if (traits_of(w, &t, NULL) != LQ_OK || t->check(w, NULL) != LQ_OK)
        return 0;
    return t->bytes(w);
}

LQ_API size_t lq_qlinear_workspace_cpu(const lq_qlinear *w, int64_t m) {
    const lq_format_traits *t;
    if (m <= 0 || traits_of(w, &t, NULL) != LQ_OK || t->check(w, NULL) != LQ_OK)
        return 0;
    return t->ws_cpu(w, m);
}

LQ_API lq_status lq_qlinear_forward_cpu(const lq_qlinear *w, const float *x, int64_t m, float *y,
                                        void *ws, size_t ws_size, int nthreads) {
    const lq_format_traits *t;
    LQ_TRY(traits_of(w, &t, NULL));
    LQ_TRY(t->check(w, NULL));
    if (m <= 0 || !x || !y)
        return m == 0 ? LQ_OK : LQ_ERR_INVALID_ARG;
    if (ws_size < t->ws_cpu(w, m) || (!ws && ws_size > 0))
        return LQ_ERR_INVALID_ARG;
    return t->gemm_cpu(w, x, m, y, ws, ws_size, nthreads);
}

LQ_API lq_status lq_qlinear_dequant_cpu(const lq_qlinear *w, float *out, int nthreads) {
    const lq_format_traits *t;
    LQ_TRY(traits_of(w, &t, NULL));
    LQ_TRY(t->check(w, NULL));
    if (!out)
        return LQ_ERR_INVALID_ARG;
    return t->dequant_cpu(w, out, nthreads);
}
