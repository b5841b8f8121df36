/* Benchmarks run the kernels the llmquant program runs: where OpenBLAS fell back to kernels
 * below what the CPU supports, start again once with OPENBLAS_CORETYPE set, as cli/main.c does
 * (see lq_blas_better_coretype in llmquant.h). */
#ifndef LQ_BENCH_BLAS_H
#define LQ_BENCH_BLAS_H

#include "llmquant.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static inline void bench_blas_reexec(char **argv) {
    const char *core = lq_blas_better_coretype();
    if (core && setenv("OPENBLAS_CORETYPE", core, 1) == 0) {
        execv("/proc/self/exe", argv);
        unsetenv("OPENBLAS_CORETYPE");
    }
    fprintf(stderr, "OpenBLAS kernels: %s\n", lq_blas_coretype());
}

#endif
