/* ggml_pair -- one llama.cpp matrix multiply (ggml_mul_mat through the CPU backend's graph
 * compute, as bench/llamacpp/ggml_mulmat.c times it) set up once and run on demand, so that
 * bench_kernels_ggml can alternate it call by call with llmquant's kernel in one process. */
#ifndef LQ_BENCH_GGML_PAIR_H
#define LQ_BENCH_GGML_PAIR_H

#include <stddef.h>
#include <stdint.h>

typedef struct ggml_pair ggml_pair;
struct ggml_tensor;

/* The fixed random data of both programs (an LCG: any non-degenerate data times the same). */
float ggml_pair_rnd(uint64_t *s);
/* A 2-D weight tensor [k, n] of any type from 0.04 x ggml_pair_rnd; 0, or 1 on no memory. */
int ggml_pair_fill(struct ggml_tensor *w, uint64_t *s);

/* W [k, n] of llama.cpp type `type` (q4_K, q8_0, f16, ...) from a fixed random matrix, X [k, m]
 * f32, nt threads. NULL on an unknown type or no memory. */
ggml_pair *ggml_pair_new(const char *type, int64_t n, int64_t k, int64_t m, int nt);
int        ggml_pair_run(ggml_pair *p); /* one Y = W X; 0 on success */
size_t     ggml_pair_weight_bytes(const ggml_pair *p); /* bytes of W as llama.cpp stores it */
void       ggml_pair_free(ggml_pair *p);

#endif
