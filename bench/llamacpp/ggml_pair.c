/* See ggml_pair.h. Built only with -DLQ_BENCH_GGML=<llama.cpp tree> (bench/CMakeLists.txt):
 * ggml is not a dependency of the product. */
#include "ggml_pair.h"

#include "ggml-cpu.h"
#include "ggml.h"

#include <stdlib.h>
#include <string.h>

struct ggml_pair {
    struct ggml_context *ctx;
    struct ggml_cgraph  *gf;
    struct ggml_cplan    cp;
    struct ggml_tensor  *w;
};

float ggml_pair_rnd(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xffffff) / (float)0x1000000 - 0.5f;
}

int ggml_pair_fill(struct ggml_tensor *w, uint64_t *s) {
    const int64_t k = w->ne[0], n = w->ne[1];
    float        *wf = malloc((size_t)(n * k) * sizeof(float));
    if (!wf)
        return 1;
    for (int64_t e = 0; e < n * k; e++)
        wf[e] = 0.04f * ggml_pair_rnd(s);
    if (w->type == GGML_TYPE_F32)
        memcpy(w->data, wf, (size_t)(n * k) * 4);
    else if (w->type == GGML_TYPE_F16)
        ggml_fp32_to_fp16_row(wf, w->data, n * k);
    else if (w->type == GGML_TYPE_BF16)
        ggml_fp32_to_bf16_row(wf, w->data, n * k);
    else
        ggml_quantize_chunk(w->type, wf, w->data, 0, n, k, NULL);
    free(wf);
    return 0;
}

ggml_pair *ggml_pair_new(const char *type_name, int64_t n, int64_t k, int64_t m, int nt) {
    enum ggml_type type = GGML_TYPE_COUNT;
    for (int t = 0; t < GGML_TYPE_COUNT; t++) {
        const char *name = ggml_type_name((enum ggml_type)t);
        if (name && !strcmp(name, type_name))
            type = (enum ggml_type)t;
    }
    if (type == GGML_TYPE_COUNT || n <= 0 || k <= 0 || m <= 0 || nt <= 0)
        return NULL;
    ggml_cpu_init();
    ggml_pair *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    const size_t mem = ggml_row_size(type, k) * (size_t)n + (size_t)(k * m + n * m) * 4 +
                       ggml_graph_overhead() + 3 * ggml_tensor_overhead() + ((size_t)16 << 20);
    struct ggml_init_params ip = {mem, NULL, false};
    p->ctx                     = ggml_init(ip);
    if (!p->ctx) {
        ggml_pair_free(p);
        return NULL;
    }
    struct ggml_tensor *w = ggml_new_tensor_2d(p->ctx, type, k, n);
    uint64_t            s = 1;
    p->w                  = w;
    if (ggml_pair_fill(w, &s)) {
        ggml_pair_free(p);
        return NULL;
    }
    struct ggml_tensor *x = ggml_new_tensor_2d(p->ctx, GGML_TYPE_F32, k, m);
    for (int64_t e = 0; e < k * m; e++)
        ((float *)x->data)[e] = 2.f * ggml_pair_rnd(&s);
    p->gf = ggml_new_graph(p->ctx);
    ggml_build_forward_expand(p->gf, ggml_mul_mat(p->ctx, w, x));
    p->cp = ggml_graph_plan(p->gf, nt, NULL);
    if (p->cp.work_size && !(p->cp.work_data = malloc(p->cp.work_size))) {
        ggml_pair_free(p);
        return NULL;
    }
    return p;
}

int ggml_pair_run(ggml_pair *p) {
    return ggml_graph_compute(p->gf, &p->cp) == GGML_STATUS_SUCCESS ? 0 : 1;
}

size_t ggml_pair_weight_bytes(const ggml_pair *p) {
    return ggml_nbytes(p->w);
}

void ggml_pair_free(ggml_pair *p) {
    if (!p)
        return;
    free(p->cp.work_data);
    if (p->ctx)
        ggml_free(p->ctx);
    free(p);
}
