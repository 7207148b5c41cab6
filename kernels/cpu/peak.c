/* The int8 peak loops the benchmarks divide by (xengine_block/bench/machine.py): for
 * each path, a register-resident loop of the instruction it multiplies with, run on n threads
 * at once. Each loop is the instruction's ceiling on this machine, measured now; none touches
 * memory. The AMX loop is in peak_amx.c (compiled twice, like the AMX kernel). */
#include <pthread.h>

#include "native.h"

#if defined(XE_HAVE_AVX512VNNI) || defined(XE_HAVE_AVX2)
#include <immintrin.h>
#endif

#if defined(XE_HAVE_AVX512VNNI)
/* 16 independent vpdpbusd zmm chains (zmm16-31, in asm so the compiler can neither spill nor
 * hoist them), enough to cover the instruction's latency x throughput on current cores.
 * Returns seconds. */
#define XE_DP(r) "vpdpbusd %[b], %[a], %%zmm" #r "\n\t"
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
static double vnni_peak_loop(long iters)
{
    const __m512i a = _mm512_set1_epi8(1), b = _mm512_set1_epi8(2);
    const double t0 = xe_now();
    for (long i = 0; i < iters; i++)
        __asm__ volatile(XE_DP(16) XE_DP(17) XE_DP(18) XE_DP(19) XE_DP(20) XE_DP(21) XE_DP(22)
                         XE_DP(23) XE_DP(24) XE_DP(25) XE_DP(26) XE_DP(27) XE_DP(28) XE_DP(29)
                         XE_DP(30) XE_DP(31)
                         :
                         : [a] "v"(a), [b] "v"(b)
                         : "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22",
                           "xmm23", "xmm24", "xmm25", "xmm26", "xmm27", "xmm28", "xmm29",
                           "xmm30", "xmm31");
    return xe_now() - t0;
}
#undef XE_DP
#endif

#if defined(XE_HAVE_AVX2)
/* The AVX2 path's instruction pair (vpmaddwd on sign-extended int16, then vpaddd: 16
 * int8-valued MACs), 6 independent chains in ymm4-15 (asm, so nothing is spilled or
 * hoisted). Returns seconds. */
#define XE_MA(t, c) "vpmaddwd %[b], %[a], %%ymm" #t "\n\tvpaddd %%ymm" #t ", %%ymm" #c \
    ", %%ymm" #c "\n\t"
__attribute__((target("avx2"))) static double avx2_peak_loop(long iters)
{
    const __m256i a = _mm256_set1_epi16(1), b = _mm256_set1_epi16(2);
    const double t0 = xe_now();
    for (long i = 0; i < iters; i++)
        __asm__ volatile(XE_MA(4, 10) XE_MA(5, 11) XE_MA(6, 12) XE_MA(7, 13) XE_MA(8, 14)
                         XE_MA(9, 15)
                         :
                         : [a] "x"(a), [b] "x"(b)
                         : "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11",
                           "xmm12", "xmm13", "xmm14", "xmm15");
    return xe_now() - t0;
}
#undef XE_MA
#endif

typedef double (*xe_peak_fn)(long iters);

/* The loop of path `isa`, its int8 ops per iteration (2 per MAC) and what it runs; NULL
 * where the path has none compiled. */
static xe_peak_fn peak_loop(int isa, double *ops_per_iter, const char **what)
{
    switch (isa) {
#ifdef XE_HAVE_AMX
    case XE_AMX:
        *ops_per_iter = 4.0 * 16 * 16 * 64 * 2;
        *what = "tdpbssd (AMX-INT8 tiles, 4 accumulators)";
        return xe_amx_peak_loop;
#endif
#ifdef XE_HAVE_AMX_EMU
    case XE_AMX_EMU:  /* the AMX loop's source on software tiles: checks it, measures nothing */
        *ops_per_iter = 4.0 * 16 * 16 * 64 * 2;
        *what = "tdpbssd emulated in C (amx_emu.h: not a hardware peak)";
        return xe_amx_peak_loop_emu;
#endif
#ifdef XE_HAVE_AVX512VNNI
    case XE_AVX512VNNI:
        *ops_per_iter = 16.0 * 64 * 2;
        *what = "vpdpbusd zmm (AVX-512 VNNI, 16 accumulators)";
        return vnni_peak_loop;
#endif
#ifdef XE_HAVE_AVX2
    case XE_AVX2:
        *ops_per_iter = 6.0 * 16 * 2;
        *what = "vpmaddwd+vpaddd ymm (AVX2 on sign-extended int16, 6 accumulators)";
        return avx2_peak_loop;
#endif
    default:
        (void)ops_per_iter;
        (void)what;
        return NULL;
    }
}

typedef struct {
    xe_peak_fn fn;
    long iters;
    double seconds, cpu;
    int emulated;     /* an emulated loop: collect its tile faults */
    char fault[200];  /* "" unless it faulted */
} peak_arg;

static void *peak_thread(void *arg)
{
    peak_arg *a = arg;
    const double cpu0 = xe_thread_cpu();
    a->seconds = a->fn(a->iters);
    a->cpu = xe_thread_cpu() - cpu0;
    a->fault[0] = 0;
#ifdef XE_HAVE_AMX_EMU
    if (a->emulated)
        xe_amx_emu_fault(a->fault, sizeof a->fault);
#endif
    return NULL;
}

int xe_int8_peak(int isa, int nthreads, long iters, double *ops_wall, const char **what,
                 double *ops_cpu, xe_error *err)
{
    double ops_per_iter = 0;
    *what = "";
    const xe_peak_fn fn = peak_loop(isa, &ops_per_iter, what);
    if (!fn)
        return xe_fail(err, XE_ERR_RUNTIME, "isa %s has no int8 peak loop", xe_isa_names[isa]);
    if (nthreads < 1 || nthreads > 256 || iters < 1)
        return xe_fail(err, XE_ERR_VALUE, "bad nthreads=%d or iters=%ld", nthreads, iters);
    peak_arg args[256];
    pthread_t tid[256];
    int started = 0;
    for (int i = 0; i < nthreads; i++) {
        args[i] = (peak_arg){.fn = fn, .iters = iters, .emulated = isa == XE_AMX_EMU};
        if (pthread_create(&tid[i], NULL, peak_thread, &args[i]) != 0)
            break;
        started++;
    }
    for (int i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    double slowest = 0, cpu = 0;
    for (int i = 0; i < started; i++) {
        if (args[i].fault[0])
            return xe_fail(err, XE_ERR_RUNTIME, "%s: the peak loop faulted on the emulated "
                           "tiles: %s", xe_isa_names[isa], args[i].fault);
        slowest = args[i].seconds > slowest ? args[i].seconds : slowest;
        cpu += args[i].cpu;
    }
    if (!started || slowest <= 0 || cpu <= 0)
        return xe_fail(err, XE_ERR_RUNTIME, "could not start the peak threads");
    const double ops = (double)started * iters * ops_per_iter;
    *ops_wall = ops / slowest;
    *ops_cpu = ops / cpu;
    return 0;
}
