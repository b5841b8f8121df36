/* Which OpenBLAS kernels run. OpenBLAS (DYNAMIC_ARCH, as Debian ships it) picks its kernels once,
 * when it is loaded, from the CPU's vendor, family and model. A CPU newer than the library, or
 * one a hypervisor reports by a generic model, gets a fallback: on a Sapphire Rapids VM
 * OpenBLAS 0.3.21 runs its SSE3 "Prescott" sgemm, 3x slower than its AVX-512 one; on Zen 4 it
 * runs the AVX2 kernels. The choice can only be changed before the library loads (the
 * OPENBLAS_CORETYPE environment variable), so this only names the better one. */
#include "lq_kernels_impl.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* the cores whose sgemm is the AVX-512 or the AVX2+FMA one */
static int in_list(const char *name, const char *const *list) {
    for (; *list; list++)
        if (!strcasecmp(name, *list))
            return 1;
    return 0;
}

static const char *const k_avx512_cores[] = {"SkylakeX", "Cooperlake", "SapphireRapids", NULL};

int lq_blas_avx512(void) {
    const char *core = openblas_get_corename();
    return core && in_list(core, k_avx512_cores);
}

const char *lq_blas_better_coretype(void) {
    const char *const *const avx512 = k_avx512_cores;
    static const char *const  avx2[] = {"Haswell", "Zen", "SkylakeX", "Cooperlake",
                                        "SapphireRapids", NULL};
    const char *set = getenv("OPENBLAS_CORETYPE");
    if (set && *set) /* the user's choice stands */
        return NULL;
    const char *core = openblas_get_corename();
    if (!core)
        return NULL;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        return in_list(core, avx512) ? NULL : "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return in_list(core, avx2) ? NULL : "Haswell";
    return NULL;
}
#else
int lq_blas_avx512(void) {
    return 0;
}
const char *lq_blas_better_coretype(void) {
    return NULL;
}
#endif

int lq_blas_tile_threads(int nthreads) {
    /* 2: OpenMP; with AVX-512 the tiles go to lq_gemm512, on libgomp's threads too */
    return lq_cpu_avx512() || openblas_get_parallel() == 2 ? lq_cpu_threads(nthreads) : 1;
}

const char *lq_blas_coretype(void) {
    const char *core = openblas_get_corename();
    return core ? core : "unknown";
}
