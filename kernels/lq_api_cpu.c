/* Public CPU entry points of llmquant.h: validate (the format's rules, formats/), then dispatch
 * through the kernel table. */
#include "lq_kernels_impl.h"

/* The kernels of a valid descriptor, else NULL. */
static const lq_format_traits *cpu_traits(const lq_qlinear *w) {
    if (lq_qlinear_check(w, NULL) != LQ_OK)
        return NULL;
    return lq_format_traits_get((lq_format)w->format);
}

LQ_API size_t lq_qlinear_workspace_cpu(const lq_qlinear *w, int64_t m) {
    const lq_format_traits *t = cpu_traits(w);
    if (m <= 0 || !t)
        return 0;
    return t->ws_cpu(w, m);
}

LQ_API lq_status lq_qlinear_forward_cpu(const lq_qlinear *w, const float *x, int64_t m, float *y,
                                        void *ws, size_t ws_size, int nthreads) {
    const lq_format_traits *t = cpu_traits(w);
    if (!t)
        return LQ_ERR_INVALID_ARG;
    if (m <= 0 || !x || !y)
        return m == 0 ? LQ_OK : LQ_ERR_INVALID_ARG;
    if (ws_size < t->ws_cpu(w, m) || (!ws && ws_size > 0))
        return LQ_ERR_INVALID_ARG;
    return t->gemm_cpu(w, x, m, y, ws, ws_size, nthreads);
}

LQ_API lq_status lq_qlinear_dequant_cpu(const lq_qlinear *w, float *out, int nthreads) {
    const lq_format_traits *t = cpu_traits(w);
    if (!t || !out)
        return LQ_ERR_INVALID_ARG;
    return t->dequant_cpu(w, out, nthreads);
}
