/* Public CPU entry points of llmquant.h: validate (the format's rules, formats/), then dispatch
 * through the kernel table. */
#include "lq_kernels_impl.h"

/* The kernels of a valid descriptor, else NULL. */
static const lq_format_traits *cpu_traits(const lq_qlinear *w) {
    if (lq_qlinear_check(w, NULL) != LQ_OK)
        return NULL;
    return lq_format_traits_get((lq_format)w->format);
}

/* Whether the reduced-precision activation kernels run for w at m rows under these flags. */
static int use_qx(const lq_format_traits *t, const lq_qlinear *w, int64_t m, unsigned flags) {
    return (flags & t->qx_flag) && t->quantizes_x_cpu && t->quantizes_x_cpu(w, m, flags);
}

LQ_API size_t lq_qlinear_workspace_cpu_ex(const lq_qlinear *w, int64_t m, unsigned flags) {
    const lq_format_traits *t = cpu_traits(w);
    if (m <= 0 || !t)
        return 0;
    return use_qx(t, w, m, flags) ? t->ws_cpu_qx(w, m) : t->ws_cpu(w, m);
}

LQ_API lq_status lq_qlinear_forward_cpu_ex(const lq_qlinear *w, const float *x, int64_t m, float *y,
                                           void *ws, size_t ws_size, int nthreads, unsigned flags) {
    const lq_format_traits *t = cpu_traits(w);
    if (!t || (flags & ~(LQ_QLINEAR_INT_X | LQ_QLINEAR_BF16_X | LQ_QLINEAR_F16_X)))
        return LQ_ERR_INVALID_ARG;
    if (m <= 0 || !x || !y)
        return m == 0 ? LQ_OK : LQ_ERR_INVALID_ARG;
    const int qx = use_qx(t, w, m, flags);
    if (ws_size < (qx ? t->ws_cpu_qx(w, m) : t->ws_cpu(w, m)) || (!ws && ws_size > 0))
        return LQ_ERR_INVALID_ARG;
    return (qx ? t->gemm_cpu_qx : t->gemm_cpu)(w, x, m, y, ws, ws_size, nthreads);
}

LQ_API size_t lq_qlinear_workspace_cpu(const lq_qlinear *w, int64_t m) {
    return lq_qlinear_workspace_cpu_ex(w, m, 0);
}

LQ_API lq_status lq_qlinear_forward_cpu(const lq_qlinear *w, const float *x, int64_t m, float *y,
                                        void *ws, size_t ws_size, int nthreads) {
    return lq_qlinear_forward_cpu_ex(w, x, m, y, ws, ws_size, nthreads, 0);
}

LQ_API lq_status lq_qlinear_dequant_cpu(const lq_qlinear *w, float *out, int nthreads) {
    const lq_format_traits *t = cpu_traits(w);
    if (!t || !out)
        return LQ_ERR_INVALID_ARG;
    return t->dequant_cpu(w, out, nthreads);
}
