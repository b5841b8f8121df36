/* ggml_mulmat -- llama.cpp's CPU matrix multiply timed at the shapes bench_kernels_cpu uses,
 * the comparator of issue #13's kernel table. Built against the ggml of the llama-cpp-python
 * sdist by bench/kernels_vs_llamacpp.sh (not part of the llmquant build: ggml is not a
 * dependency of the product).
 *
 * Times ggml_mul_mat(W [k, n] of TYPE, X [k, m] f32) -> [n, m] through the CPU backend's graph
 * compute, which is what llama.cpp runs per linear: for the quantized types that includes
 * quantizing the activations (Q8_K / Q8_0) on every call, as llmquant's kernels count theirs.
 *
 * Usage: ggml_mulmat TYPE N K M[,M...] THREADS [SECONDS [EVICT_MIB]]
 *        (TYPE: q4_K q3_K q8_0 f16 ...)
 * Prints per M: "ggml TYPE n k m threads ms" (best of repeats over SECONDS, at least 3 runs).
 * EVICT_MIB > 0: before each timed run, untimed, a buffer of that many MiB is read (as
 * bench_kernels_cpu -e), so that the weights come from memory.
 */
#include "ggml-cpu.h"
#include "ggml.h"
#include "ggml_pair.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: %s TYPE N K M THREADS [SECONDS]\n", argv[0]);
        return 2;
    }
    enum ggml_type type = GGML_TYPE_COUNT;
    for (int t = 0; t < GGML_TYPE_COUNT; t++) {
        const char *name = ggml_type_name((enum ggml_type)t);
        if (name && !strcmp(name, argv[1]))
            type = (enum ggml_type)t;
    }
    if (type == GGML_TYPE_COUNT) {
        fprintf(stderr, "ggml_mulmat: unknown type %s\n", argv[1]);
        return 2;
    }
    const int64_t n = atoll(argv[2]), k = atoll(argv[3]);
    int64_t       ms[32], nms = 0, msum = 0;
    for (const char *p = argv[4]; *p && nms < 32;) {
        ms[nms] = atoll(p);
        msum += ms[nms++];
        p = strchr(p, ',');
        if (!p)
            break;
        p++;
    }
    const int    nt   = atoi(argv[5]);
    const double secs = argc > 6 ? atof(argv[6]) : 0.5;
    const size_t evn  = argc > 7 && atoi(argv[7]) > 0 ? (size_t)atoi(argv[7]) << 17 : 0;
    if (n <= 0 || k <= 0 || nms == 0 || nt <= 0) {
        fprintf(stderr, "ggml_mulmat: bad arguments\n");
        return 2;
    }
    uint64_t *ev = evn ? malloc(evn * sizeof(uint64_t)) : NULL;
    if (evn && !ev) {
        fprintf(stderr, "ggml_mulmat: no memory for the %zu MiB eviction buffer\n", evn >> 17);
        return 1;
    }
    for (size_t i = 0; i < evn; i++)
        ev[i] = i;

    ggml_cpu_init();
    const size_t wbytes = ggml_row_size(type, k) * (size_t)n;
    const size_t mem    = wbytes + (size_t)(k * msum + n * msum) * 4 +
                       (size_t)nms * (ggml_graph_overhead() + 3 * ggml_tensor_overhead()) +
                       ((size_t)16 << 20);
    struct ggml_init_params ip  = {mem, NULL, false};
    struct ggml_context    *ctx = ggml_init(ip);
    if (!ctx) {
        fprintf(stderr, "ggml_mulmat: ggml_init(%zu bytes) failed\n", mem);
        return 1;
    }
    struct ggml_tensor *w = ggml_new_tensor_2d(ctx, type, k, n);
    uint64_t            s = 1;
    if (ggml_pair_fill(w, &s)) {
        fprintf(stderr, "ggml_mulmat: no memory for the float weights\n");
        return 1;
    }

    for (int64_t mi = 0; mi < nms; mi++) {
        const int64_t       m = ms[mi];
        struct ggml_tensor *x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, k, m);
        for (int64_t e = 0; e < k * m; e++)
            ((float *)x->data)[e] = 2.f * ggml_pair_rnd(&s);
        struct ggml_tensor *y  = ggml_mul_mat(ctx, w, x);
        struct ggml_cgraph *gf = ggml_new_graph(ctx);
        ggml_build_forward_expand(gf, y);
        /* one plan and work buffer for every run (ggml_graph_compute_with_ctx would take a new
         * buffer from the context on each call) */
        struct ggml_cplan cp = ggml_graph_plan(gf, nt, NULL);
        cp.work_data         = cp.work_size ? malloc(cp.work_size) : NULL;
        ggml_graph_compute(gf, &cp); /* warm up: page in, thread pool */
        double best = 1e30, t0 = now_s();
        for (int it = 0; it < 1000 && (it < 3 || now_s() - t0 < secs); it++) {
            uint64_t es = 0; /* reads only, one word a cache line */
            for (size_t i = 0; ev && i < evn; i += 8)
                es += ev[i];
            volatile uint64_t sink = es;
            (void)sink;
            const double a = now_s();
            if (ggml_graph_compute(gf, &cp) != GGML_STATUS_SUCCESS) {
                fprintf(stderr, "ggml_mulmat: graph compute failed\n");
                return 1;
            }
            const double d = now_s() - a;
            best           = d < best ? d : best;
        }
        free(cp.work_data);
        printf("ggml %s %lld %lld %lld %d %.4f\n", argv[1], (long long)n, (long long)k,
               (long long)m, nt, best * 1e3);
        fflush(stdout);
    }
    ggml_free(ctx);
    free(ev);
    return 0;
}
