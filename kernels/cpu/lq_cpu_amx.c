/* Whether this process may use AMX's tiles (lq_gemm_amx_bf16x, the NF4 kernel's AMX-INT8
 * tiles). Linux keeps the tile registers off for a process until it asks for them (arch_prctl
 * ARCH_REQ_XCOMP_PERM with XFEATURE_XTILEDATA, Linux 5.16 and later): the first tile
 * instruction would otherwise be SIGILL. The request is granted once per process and repeating
 * it is a cheap no-op, so it is made at every check rather than remembered in a global. */
#define _DEFAULT_SOURCE /* syscall() */
#include "lq_kernels_impl.h"

#if defined(__linux__) && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

enum { ARCH_REQ_XCOMP_PERM_ = 0x1023, XFEATURE_XTILEDATA_ = 18 };

/* CPUID leaf 7 EDX: bit (AMX-BF16 22, AMX-INT8 25) and AMX-TILE (24), and the tiles granted */
static int amx_with(unsigned bit) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return 0;
    if (!(d & (1u << bit)) || !(d & (1u << 24)))
        return 0;
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM_, XFEATURE_XTILEDATA_) == 0;
}

int lq_cpu_amx_bf16(void) {
    return lq_cpu_avx512bf16() && amx_with(22);
}

int lq_cpu_amx_int8(void) {
    return lq_cpu_vnni() && amx_with(25);
}
#else
int lq_cpu_amx_bf16(void) {
    return 0;
}
int lq_cpu_amx_int8(void) {
    return 0;
}
#endif
