/* Which AVX2 operations share an execution pipe on this CPU: throughput of independent
 * instructions, alone and in pairs, in cycles per loop of 8 or 16 (the decode kernels of
 * cpu/lq_cpu_avx2.c are bound by the busiest pipe, not by their instruction count). Each loop
 * writes registers no later instruction reads (FMAs: 8 accumulators, no more than their latency
 * hides), so throughput, not latency, bounds it. The clock is taken from a chain of dependent
 * vpaddd (one a cycle). Two operations that run 8 + 8 in about 4 cycles use different pipes;
 * about 8, the same two.
 *
 *   bench_ports [iterations (millions, default 20)]
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#define CLOBBER                                                                                    \
    "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",       \
        "xmm11", "xmm12", "xmm13", "xmm14", "xmm15"
/* op with sources ymm14 / ymm15 into ymm k (written, never read) */
#define O(op, k) #op " %%ymm14, %%ymm15, %%ymm" #k "\n\t"
#define O8(op)   O(op, 0) O(op, 1) O(op, 2) O(op, 3) O(op, 4) O(op, 5) O(op, 6) O(op, 7)
#define P8(op)   O(op, 8) O(op, 9) O(op, 10) O(op, 11) O(op, 12) O(op, 13) O(op, 8) O(op, 9)
#define CVT(k)   "vcvtdq2ps %%ymm14, %%ymm" #k "\n\t"
#define CVT8     CVT(8) CVT(9) CVT(10) CVT(11) CVT(12) CVT(13) CVT(8) CVT(9)
#define SRL(k)   "vpsrlw $13, %%ymm15, %%ymm" #k "\n\t"
#define SRL8     SRL(8) SRL(9) SRL(10) SRL(11) SRL(12) SRL(13) SRL(8) SRL(9)
#define FMA(k)   "vfmadd231ps %%ymm14, %%ymm15, %%ymm" #k "\n\t"
#define FMA8     FMA(0) FMA(1) FMA(2) FMA(3) FMA(4) FMA(5) FMA(6) FMA(7)
#define BC(k)    "vpbroadcastd " #k "*4(%0), %%ymm" #k "\n\t"
#define BC8      BC(0) BC(1) BC(2) BC(3) BC(4) BC(5) BC(6) BC(7)

#define PROBE(fn, body)                                                                            \
    static double fn(long n, const void *buf) {                                                    \
        const double t0 = now();                                                                   \
        for (long i = 0; i < n; i++)                                                               \
            __asm__ volatile(body ::"r"(buf) : CLOBBER);                                           \
        return (now() - t0) / (double)n;                                                           \
    }
PROBE(p_clock, "vpaddd %%ymm0, %%ymm0, %%ymm0\n\tvpaddd %%ymm0, %%ymm0, %%ymm0\n\t"
               "vpaddd %%ymm0, %%ymm0, %%ymm0\n\tvpaddd %%ymm0, %%ymm0, %%ymm0\n\t"
               "vpaddd %%ymm0, %%ymm0, %%ymm0\n\tvpaddd %%ymm0, %%ymm0, %%ymm0\n\t"
               "vpaddd %%ymm0, %%ymm0, %%ymm0\n\tvpaddd %%ymm0, %%ymm0, %%ymm0\n\t")
PROBE(p_shufb, O8(vpshufb))
PROBE(p_mullw, O8(vpmullw))
PROBE(p_maddubs, O8(vpmaddubsw))
PROBE(p_cvt, CVT8)
PROBE(p_fma, FMA8)
PROBE(p_and, O8(vpand))
PROBE(p_bcast, BC8)
PROBE(p_shufb_srl, O8(vpshufb) SRL8)
PROBE(p_shufb_unpck, O8(vpshufb) P8(vpunpckldq))
PROBE(p_shufb_pack, O8(vpshufb) P8(vpackuswb))
PROBE(p_shufb_mullw, O8(vpshufb) P8(vpmullw))
PROBE(p_shufb_mulhuw, O8(vpshufb) P8(vpmulhuw))
PROBE(p_mullw_maddubs, O8(vpmaddubsw) P8(vpmullw))
PROBE(p_fma_cvt, FMA8 CVT8)
PROBE(p_fma_shufb, FMA8 P8(vpshufb))
PROBE(p_cvt_addps, O8(vaddps) CVT8)
PROBE(p_and_or, O8(vpand) P8(vpor))
PROBE(p_bcast_shufb, BC8 P8(vpshufb))

int main(int argc, char **argv) {
    const long    n = (argc > 1 ? atol(argv[1]) : 20) * 1000000L;
    static float  buf[16];
    const double  cyc = p_clock(n, buf) / 8.0; /* seconds a cycle */
    const struct {
        const char *name;
        double (*fn)(long, const void *);
    } probes[] = {
        {"8 vpshufb", p_shufb},
        {"8 vpmullw", p_mullw},
        {"8 vpmaddubsw", p_maddubs},
        {"8 vcvtdq2ps", p_cvt},
        {"8 vfmadd231ps (8 chains)", p_fma},
        {"8 vpand", p_and},
        {"8 vpbroadcastd m32", p_bcast},
        {"8 vpshufb + 8 vpsrlw", p_shufb_srl},
        {"8 vpshufb + 8 vpunpckldq", p_shufb_unpck},
        {"8 vpshufb + 8 vpackuswb", p_shufb_pack},
        {"8 vpshufb + 8 vpmullw", p_shufb_mullw},
        {"8 vpshufb + 8 vpmulhuw", p_shufb_mulhuw},
        {"8 vpmaddubsw + 8 vpmullw", p_mullw_maddubs},
        {"8 vfmadd231ps + 8 vcvtdq2ps", p_fma_cvt},
        {"8 vfmadd231ps + 8 vpshufb", p_fma_shufb},
        {"8 vaddps + 8 vcvtdq2ps", p_cvt_addps},
        {"8 vpand + 8 vpor", p_and_or},
        {"8 vpbroadcastd m32 + 8 vpshufb", p_bcast_shufb},
    };
    printf("clock %.2f GHz (dependent vpaddd)\n", 1e-9 / cyc);
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++)
        printf("%-34s %6.2f cycles\n", probes[i].name, probes[i].fn(n, buf) / cyc);
    return 0;
}
#else
int main(void) {
    fprintf(stderr, "bench_ports: x86-64 with GCC or clang only\n");
    return 2;
}
#endif
