/* Whether this process may use AMX's BF16 tiles (lq_gemm_amx_bf16x). Linux keeps the tile
 * registers off for a process until it asks for them (arch_prctl ARCH_REQ_XCOMP_PERM with
 * XFEATURE_XTILEDATA, Linux 5.16 and later): the first tile instruction would otherwise be
 * SIGILL. The request is granted once per process and repeating it is a cheap no-op, so it is
 * made at every check rather than remembered in a global. */
#define _DEFAULT_SOURCE /* syscall() */
#include "lq_kernels_impl.h"

#if defined(__linux__) && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

enum { ARCH_REQ_XCOMP_PERM_ = 0x1023, XFEATURE_XTILEDATA_ = 18 };

int lq_cpu_amx_bf16(void) {
    unsigned a, b, c, d;
    if (!lq_cpu_avx512bf16() || !__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return 0;
    if (!(d & (1u << 22)) || !(d & (1u << 24))) /* AMX-BF16, AMX-TILE */
        return 0;
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM_, XFEATURE_XTILEDATA_) == 0;
}
#else
int lq_cpu_amx_bf16(void) {
    return 0;
}
#endif
