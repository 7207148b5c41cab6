/* xengine_block._native: exact complex-int8 X-engine correlator at the CPU's int8 limit.
 *
 * Work is cut into units (channel, chunk of kt K-steps of 64 spectra). A worker thread takes
 * units in channel-major order from a shared counter; for each it
 *   1. converts the chunk's frames [P][S][C][coarse][re/im][8] into Y tiles (xcorr.h) in its
 *      own cache-resident scratch (the layout work: once per gulp, at memory speed);
 *   2. for AMX and VNNI, packs each Y tile into the VNNI "B" layout [K/4][16][4], which is the
 *      4-byte transpose of the tile (for VNNI also biased by +128, see kern_avx512.c); for ci8
 *      frames whose packets hold a multiple of 4 groups (the published design's 60), steps 1 and 2 are one
 *      pass per whole K-step, the tile never leaving registers between them
 *      (xe_build_tiles_avx512; its measured gain is in docs/native.md);
 *   3. runs the ISA kernel over the Hermitian triangle of 16-stream super-block pairs, adding
 *      into int32 accumulator tiles that persist across the channel's chunks.
 * When a thread moves on to another channel it adds its accumulators (re = rr + ii,
 * im = ir - ri, in int64) into the packed triangle under a lock; two threads may both hold
 * partial sums of one channel. int32 accumulation is exact for P <= Geometry.max_npacket.
 *
 * Dispatch is at run time: AMX where CPUID, XCR0 and the kernel's arch_prctl permission allow,
 * else AVX-512 VNNI, else AVX2, else portable C. Each SIMD kernel is compiled only where the
 * compiler accepts its target attribute (setup.py defines XE_HAVE_<ISA>). "amx_emulated" runs
 * the AMX kernel's source over software tiles (kern_amx_emu.c, amx_emu.h) wherever the AVX-512
 * layout code runs: only when asked for by name, to verify the AMX path without AMX.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "xcorr.h"

#if defined(__x86_64__) || defined(_M_X64)
#define XE_X86 1
#include <cpuid.h>
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

/* The one list of path names (the module's ISA_NAMES, isa_status(), the isa argument). */
static const char *const ISA_NAMES[XE_NISA] = {
    [XE_SCALAR] = "scalar", [XE_AVX2] = "avx2", [XE_AVX512VNNI] = "avx512vnni", [XE_AMX] = "amx",
    [XE_AMX_EMU] = "amx_emulated",
};

/* K-steps per chunk by default: 8 (512 spectra) keeps one super block's A and B tiles
 * (2 x 2 x 8 KiB) in L1 while the accumulators and the chunk's tiles stay in L2 at S = 256. */
#define XE_DEFAULT_KT 8

/* ------------------------------------------------------------------ run-time ISA detection */

/* What the CPU and the OS say, read once: CPUID leaf 1 ECX, leaf 7 sub-leaf 0 EBX/ECX/EDX, and
 * XCR0 (0 unless OSXSAVE). Kept apart from the decision so that the decision can be tested
 * with the facts of CPUs this machine is not (decide_isas, _decide_isas). */
typedef struct {
    uint32_t ecx1, ebx7, ecx7, edx7;
    uint64_t xcr0;
} xe_cpu_facts;

/* The kernel's permission for AMX tile data: 1 if granted; why says what happened. */
typedef int (*xe_amx_permit_fn)(char *why, size_t n);

typedef struct {
    int ok[XE_NISA];
    char why[XE_NISA][256];
} xe_isa_table;

static xe_isa_table detected_isas;
static int detected;

static void set_isa(xe_isa_table *t, int isa, int ok, const char *why)
{
    t->ok[isa] = ok;
    snprintf(t->why[isa], sizeof t->why[isa], "%s", why);
}

/* Which compiled paths these facts allow, and why (Intel SDM vol. 2 CPUID, vol. 1 13.3 XCR0).
 * permit is asked only when everything else allows AMX. */
static void decide_isas(const xe_cpu_facts *f, xe_amx_permit_fn permit, xe_isa_table *t)
{
    set_isa(t, XE_SCALAR, 1, "portable C (int32)");
    const uint64_t xcr0 = (f->ecx1 >> 27) & 1 ? f->xcr0 : 0;  /* OSXSAVE, else no XCR0 */
    const int os_ymm = (xcr0 & 0x6) == 0x6, os_zmm = (xcr0 & 0xe6) == 0xe6;
    const int os_tile = (xcr0 & 0x60000) == 0x60000;
    const int cpu_avx2 = (f->ebx7 >> 5) & 1;
    const int cpu_avx512 = ((f->ebx7 >> 16) & 1) && ((f->ebx7 >> 30) & 1)
        && ((f->ebx7 >> 31) & 1);
    const int cpu_vnni = (f->ecx7 >> 11) & 1;
    const int cpu_amx = ((f->edx7 >> 24) & 1) && ((f->edx7 >> 25) & 1);
    const int avx512_ok = cpu_avx512 && os_zmm;
    /* some of these go unused where a path is not compiled */
    (void)permit, (void)os_ymm, (void)os_tile, (void)cpu_avx2, (void)cpu_vnni, (void)cpu_amx,
        (void)avx512_ok;
#ifdef XE_HAVE_AVX2
    if (!cpu_avx2 || !os_ymm)
        set_isa(t, XE_AVX2, 0, !cpu_avx2 ? "CPU lacks AVX2" : "OS does not enable YMM state");
    else
        set_isa(t, XE_AVX2, 1, "AVX2 vpmaddwd on sign-extended int16");
#else
    set_isa(t, XE_AVX2, 0, "not compiled: the compiler lacks -mavx2");
#endif
#ifdef XE_HAVE_AVX512VNNI
    if (!avx512_ok || !cpu_vnni)
        set_isa(t, XE_AVX512VNNI, 0, !cpu_avx512 ? "CPU lacks AVX-512 F/BW/VL"
                : !os_zmm ? "OS does not enable ZMM state" : "CPU lacks AVX512-VNNI");
    else
        set_isa(t, XE_AVX512VNNI, 1,
                "AVX-512 VNNI vpdpbusd with +128 bias and row-sum correction");
#else
    set_isa(t, XE_AVX512VNNI, 0, "not compiled: the compiler lacks avx512vnni");
#endif
#ifdef XE_HAVE_AMX
    if (!cpu_amx)
        set_isa(t, XE_AMX, 0, "CPU lacks AMX-TILE/AMX-INT8");
    else if (!avx512_ok)
        set_isa(t, XE_AMX, 0, "AMX path also needs AVX-512 F/BW for its layout code");
    else if (!os_tile)
        set_isa(t, XE_AMX, 0, "AMX not enabled by the OS (XCR0 lacks XTILECFG/XTILEDATA)");
    else {
        char why[256];
        const int ok = permit(why, sizeof why);
        set_isa(t, XE_AMX, ok, why);
    }
#else
    set_isa(t, XE_AMX, 0, "not compiled: the compiler lacks amx-tile/amx-int8");
#endif
#ifdef XE_HAVE_AMX_EMU
    if (!avx512_ok)
        set_isa(t, XE_AMX_EMU, 0, !cpu_avx512 ? "emulated AMX runs the AMX path's AVX-512 "
                "layout code, and the CPU lacks AVX-512 F/BW/VL" : "emulated AMX runs the AMX "
                "path's AVX-512 layout code, and the OS does not enable ZMM state");
    else
        set_isa(t, XE_AMX_EMU, 1, "AMX kernel (kern_amx.c) on software-emulated tiles "
                "(amx_emu.h) with the real AVX-512 layout and packing: verification only, slow, "
                "never chosen automatically");
#else
    set_isa(t, XE_AMX_EMU, 0, "not compiled: the emulated AMX path needs the AVX-512 layout "
            "code (the compiler lacks avx512bw)");
#endif
}

/* The reason string of the AMX permission request: granted when error is NULL. */
static int amx_permission(char *why, size_t n, const char *error)
{
    if (error)
        snprintf(why, n, "AMX not permitted by kernel: arch_prctl(ARCH_REQ_XCOMP_PERM, "
                 "XTILEDATA) failed: %s", error);
    else
        snprintf(why, n, "AMX-INT8 tiles (CPUID, XCR0 and arch_prctl permission ok)");
    return error == NULL;
}

#ifdef XE_X86
static uint64_t xgetbv0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static xe_cpu_facts read_cpu_facts(void)
{
    xe_cpu_facts f = {0};
    unsigned a, b, d;
    __cpuid(1, a, b, f.ecx1, d);
    if ((f.ecx1 >> 27) & 1)
        f.xcr0 = xgetbv0();  /* OSXSAVE: the OS manages extended state */
    if (__get_cpuid_max(0, NULL) >= 7)
        __cpuid_count(7, 0, a, f.ebx7, f.ecx7, f.edx7);
    return f;
}

/* Ask Linux for the AMX tile data state (off by default since 5.16); 1 if granted. */
static int request_amx(char *why, size_t n)
{
#if defined(__linux__) && defined(SYS_arch_prctl)
    const long ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18;
    const int ok = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
    return amx_permission(why, n, ok ? NULL : strerror(errno));
#else
    snprintf(why, n, "AMX needs Linux arch_prctl(ARCH_REQ_XCOMP_PERM) to enable tile data");
    return 0;
#endif
}
#endif

static void detect_isas(void)
{
    if (detected)
        return;
    detected = 1;
#ifndef XE_X86
    xe_isa_table *t = &detected_isas;
    set_isa(t, XE_SCALAR, 1, "portable C (int32)");
    set_isa(t, XE_AVX2, 0, "not an x86-64 CPU");
    set_isa(t, XE_AVX512VNNI, 0, "not an x86-64 CPU");
    set_isa(t, XE_AMX, 0, "not an x86-64 CPU");
    set_isa(t, XE_AMX_EMU, 0, "not an x86-64 CPU (emulated AMX runs the AVX-512 layout code)");
#else
    const xe_cpu_facts f = read_cpu_facts();
    decide_isas(&f, request_amx, &detected_isas);
#endif
}

/* ------------------------------------------------------------------ portable pieces */

static void copy_groups_generic(const int8_t *src, int8_t *re_row, long d0, long n)
{
    for (long u = 0; u < n; u++)
        xe_copy_group(src + 16 * u, re_row, d0 + u);
}

static void copy_ci4_hi_generic(const int8_t *src, int8_t *re_row, long d0, long n)
{
    for (long u = 0; u < n; u++)
        xe_copy_group_ci4(src + 8 * u, re_row, d0 + u, 0);
}

static void copy_ci4_lo_generic(const int8_t *src, int8_t *re_row, long d0, long n)
{
    for (long u = 0; u < n; u++)
        xe_copy_group_ci4(src + 8 * u, re_row, d0 + u, 1);
}

static inline int stream_end(const xe_plan *p, int sb)
{
    return 16 * sb + 16 < p->nstream ? 16 * sb + 16 : p->nstream;
}

/* Frames -> Y tiles (step 1 above) for the unit's groups d0.. of the streams of super block
 * sb. A partial last K-step is cleared first: past the data it must read as zeros. */
static void convert_super_block(const xe_plan *p, xe_work *w, const int8_t *frames,
                                const xe_unit *un, int sb, xe_copy_fn copy, long d0)
{
    const size_t blk = xe_block_bytes(p);
    const long n = un->g1 - un->g0;
    if (d0 >= n)
        return;
    if (n % (XE_KSTEP / XE_GROUP))
        for (int i = 2 * sb; i < 2 * sb + 2; i++)
            memset(w->a + i * blk + (size_t)(n / 8) * XE_TILE_BYTES, 0, XE_TILE_BYTES);
    for (int s = 16 * sb; s < stream_end(p, sb); s++) {
        int8_t *re_row = w->a + (size_t)(s / 8) * blk + (size_t)(s % 8) * XE_KSTEP;
        long run;
        for (long g = un->g0 + d0; g < un->g1; g += run) {
            const int8_t *src = xe_group_src(p, frames, s, un->c, g, un->g1, &run);
            copy(src, re_row, g - un->g0, run);
        }
    }
}

/* Prefetch (into L2) the source lines of super block sb of a unit. One stream's chunk is
 * ~1 KiB, C * 960 bytes from the next stream's: too short and too scattered for the hardware
 * prefetchers, so without this the conversion waits on DRAM latency line by line (measured
 * ~1.6x slower). Issued one super block ahead of the conversion. */
static void prefetch_super_block(const xe_plan *p, const int8_t *frames, const xe_unit *un,
                                 int sb)
{
    for (int s = 16 * sb; s < stream_end(p, sb); s++) {
        long run;
        for (long g = un->g0; g < un->g1; g += run) {
            const int8_t *src = xe_group_src(p, frames, s, un->c, g, un->g1, &run);
            const uintptr_t end = (uintptr_t)(src + run * p->group_bytes);
            for (uintptr_t a = (uintptr_t)src & ~(uintptr_t)63; a < end; a += 64)
                __builtin_prefetch((const void *)a, 0, 2);
        }
    }
}

/* Sum of Y row m of block i since the last write-out: the lanes of the biased sums less the
 * bias of every K-step packed (zero padding included, as the products saw it). */
static int64_t row_sum(const xe_work *w, int i, int m)
{
    const int64_t *v = w->rowsum + ((size_t)i * 16 + m) * 8;
    return v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7] - 128L * XE_KSTEP * w->ntiles;
}

/* C[I, M] += Y_I Y_M^T in plain C: the reference for the SIMD kernels and the last fallback. */
static void kernel_scalar(const xe_plan *p, xe_work *w, int nt, int sp0, int sp1)
{
    const size_t blk = xe_block_bytes(p);
    for (int sp = sp0; sp < sp1; sp++) {
        for (int sub = 0; sub < 4; sub++) {
            int I, M;
            int32_t *C;
            if (!xe_sub_block(p, w->acc, sp, sub, &I, &M, &C))
                continue;
            for (int t = 0; t < nt; t++) {
                const int8_t *x = w->a + I * blk + (size_t)t * XE_TILE_BYTES;
                const int8_t *y = w->a + M * blk + (size_t)t * XE_TILE_BYTES;
                for (int m = 0; m < 16; m++)
                    for (int n = 0; n < 16; n++) {
                        int32_t s = 0;
                        for (int k = 0; k < XE_KSTEP; k++)
                            s += (int32_t)x[m * XE_KSTEP + k] * y[n * XE_KSTEP + k];
                        C[m * 16 + n] += s;
                    }
            }
        }
    }
}

/* ------------------------------------------------------------------ accumulators -> triangle */

typedef struct {
    const xe_plan *plan;
    const int8_t *frames;
    int32_t *out;
    int layout_only;   /* time the layout: convert and pack only */
    int compute_only;  /* time the kernels: convert each thread's first unit only */
    long next_unit;
    pthread_mutex_t lock;
    xe_kernel_fn kernel;
    xe_copy_fn copy;
    int pack_b, bias;
    int build;         /* whole K-steps built and packed in one pass (xe_build_tiles_avx512) */
    void (*tile_config)(void);   /* AMX paths: per-thread tile configuration, else NULL */
    void (*tile_release)(void);
    int (*tile_fault)(char *msg, size_t n);  /* emulated AMX: the thread's first #GP/#UD */
    int failed;
    int value_error;     /* the failure is the input's (a ci16 value out of range) */
    char error[256];     /* why a worker failed, if not for memory (under lock) */
    double cpu_seconds;  /* summed over the workers (under lock) */
} xe_job;

/* Add one thread's accumulators for channel c into the packed triangle (locked). */
static void flush(xe_job *job, const xe_work *w, int c)
{
    const xe_plan *p = job->plan;
    const long S = p->nstream;
    int32_t *out = job->out + (size_t)c * (size_t)(S * (S + 1) / 2) * 2;
    pthread_mutex_lock(&job->lock);
    for (int sp = 0; sp < p->nsp; sp++) {
        for (int sub = 0; sub < 4; sub++) {
            int I, M;
            int32_t *t;
            if (!xe_sub_block(p, w->acc, sp, sub, &I, &M, &t))
                continue;
            for (int m = 0; m < 8 && 8 * I + m < S; m++) {
                const long j = 8 * I + m;
                const int64_t rs_re = job->bias ? row_sum(w, I, m) : 0;
                const int64_t rs_im = job->bias ? row_sum(w, I, m + 8) : 0;
                const int64_t re_bias = 128 * (rs_re + rs_im), im_bias = 128 * (rs_im - rs_re);
                for (int n = 0; n < 8 && 8 * M + n < S; n++) {
                    const long k = 8 * M + n;
                    if (j > k)
                        continue;
                    const int64_t re = (int64_t)t[m * 16 + n] + t[(m + 8) * 16 + n + 8] - re_bias;
                    const int64_t im = (int64_t)t[(m + 8) * 16 + n] - t[m * 16 + n + 8] - im_bias;
                    int32_t *o = out + 2 * (k * (k + 1) / 2 + j);
                    o[0] = (int32_t)(o[0] + re);
                    o[1] = (int32_t)(o[1] + im);
                }
            }
        }
    }
    pthread_mutex_unlock(&job->lock);
}

/* ------------------------------------------------------------------ workers */

static void work_free(xe_work *w)
{
    free(w->a);
    free(w->b);
    free(w->acc);
    free(w->rowsum);
    free((void *)w->rows);
}

static int work_alloc(const xe_plan *p, xe_work *w, int need_b)
{
    const size_t ybytes = (size_t)p->nb8 * xe_block_bytes(p);
    memset(w, 0, sizeof *w);
    w->a = aligned_alloc(64, ybytes);
    w->b = need_b ? aligned_alloc(64, ybytes) : NULL;
    w->acc = aligned_alloc(64, (size_t)p->nsp * 4 * XE_TILE_BYTES);
    w->rowsum = aligned_alloc(64, (size_t)p->nb8 * 16 * 8 * sizeof(int64_t));
    w->rows = p->lay ? malloc((size_t)p->kt * XE_KSTEP * sizeof *w->rows) : NULL;
    if (!w->a || (need_b && !w->b) || !w->acc || !w->rowsum || (p->lay && !w->rows)) {
        work_free(w);
        return -1;
    }
    memset(w->a, 0, ybytes);  /* padding streams stay zero for the whole call */
    return 0;
}

static int take_unit(xe_job *job, xe_unit *un)
{
    const xe_plan *p = job->plan;
    const long per_chunk = (long)p->kt * (XE_KSTEP / XE_GROUP);
    const long u = __atomic_fetch_add(&job->next_unit, 1, __ATOMIC_RELAXED);
    if (u >= (long)p->nchan * p->nchunk)
        return 0;
    un->c = (int)(u / p->nchunk);
    if (p->lay) {  /* any layout: chunks of spectra */
        const long spec = (long)p->kt * XE_KSTEP;
        un->t0 = (u % p->nchunk) * spec;
        un->t1 = un->t0 + spec < p->lay->nspec ? un->t0 + spec : p->lay->nspec;
        un->nt = (int)((un->t1 - un->t0 + XE_KSTEP - 1) / XE_KSTEP);
        un->g0 = un->g1 = 0;
        return 1;
    }
    un->g0 = (u % p->nchunk) * per_chunk;
    un->g1 = un->g0 + per_chunk < p->ngroup ? un->g0 + per_chunk : p->ngroup;
    un->nt = (int)((un->g1 - un->g0 + 7) / 8);
    return 1;
}

/* One unit: convert and pack every super block (its successor's source prefetched one block
 * ahead), then the kernel over all pairs, then prefetch the next unit's first super block.
 * Converting super block L + 1 between the pairs of column L, to overlap its DRAM reads with
 * the tile products, measured 1.1-1.5x SLOWER: the conversion's DRAM misses hold the line
 * fill buffers that the tile loads from L2 need, so the phases are kept apart. */
static void process_unit(xe_job *job, xe_work *w, const xe_unit *un, const xe_unit *next,
                         int convert)
{
    const xe_plan *p = job->plan;
    const int nsb = p->nb8 / 2;
    const int whole = job->build ? (int)((un->g1 - un->g0) / (XE_KSTEP / XE_GROUP)) : 0;
    if (convert && p->lay) {  /* any layout: every block, then the VNNI packing */
        xe_convert_layout(p, w, job->frames, un);
#ifdef XE_HAVE_AVX512_LAYOUT
        if (job->pack_b)
            xe_pack_b_avx512(p, w, 0, un->nt, 0, p->nb8, job->bias);
#endif
    }
    for (int L = 0; convert && !p->lay && L < nsb; L++) {
        if (L + 1 < nsb)
            prefetch_super_block(p, job->frames, un, L + 1);
#ifdef XE_HAVE_AVX512_LAYOUT
        if (whole)
            xe_build_tiles_avx512(p, w, job->frames, un, L, whole, job->bias);
#endif
        convert_super_block(p, w, job->frames, un, L, job->copy,
                            (long)whole * (XE_KSTEP / XE_GROUP));
#ifdef XE_HAVE_AVX512_LAYOUT
        if (job->pack_b)
            xe_pack_b_avx512(p, w, whole, un->nt, 2 * L, 2 * L + 2, job->bias);
#endif
    }
    if (convert)
        w->ntiles += un->nt;
    if (!job->layout_only)
        job->kernel(p, w, un->nt, 0, p->nsp);
    if (convert && next && !p->lay)
        prefetch_super_block(p, job->frames, next, 0);
}

static void *worker(void *arg)
{
    xe_job *job = arg;
    const xe_plan *p = job->plan;
    const double cpu0 = xe_thread_cpu();
    xe_work w;
    if (work_alloc(p, &w, job->pack_b) != 0) {
        __atomic_store_n(&job->failed, 1, __ATOMIC_RELAXED);
        return NULL;
    }
    if (job->tile_config && !job->layout_only)
        job->tile_config();  /* tile configuration is per thread */
    xe_unit un, next;
    int cur = -1, have = take_unit(job, &un), converted = 0;
    if (have && !p->lay)
        prefetch_super_block(p, job->frames, &un, 0);
    while (have) {
        const int have_next = take_unit(job, &next);
        if (un.c != cur) {
            if (cur >= 0 && !job->layout_only)
                flush(job, &w, cur);
            memset(w.acc, 0, (size_t)p->nsp * 4 * XE_TILE_BYTES);
            memset(w.rowsum, 0, (size_t)p->nb8 * 16 * 8 * sizeof(int64_t));
            w.ntiles = 0;
            cur = un.c;
        }
        process_unit(job, &w, &un, have_next ? &next : NULL,
                     !job->compute_only || !converted++);
        un = next;
        have = have_next;
    }
    if (cur >= 0 && !job->layout_only)
        flush(job, &w, cur);
    if (job->tile_release && !job->layout_only)
        job->tile_release();
    const int bad = w.bad, bad_value = w.bad_value;
    work_free(&w);
    char fault[200];
    const int faulted = job->tile_fault && job->tile_fault(fault, sizeof fault);
    const double cpu = xe_thread_cpu() - cpu0;
    pthread_mutex_lock(&job->lock);
    job->cpu_seconds += cpu;
    if (bad && !job->error[0]) {
        snprintf(job->error, sizeof job->error, "ci16 sample value %d is outside -128..127: "
                 "16-bit samples are correlated exactly only in the int8 range", bad_value);
        job->failed = job->value_error = 1;
    }
    if (faulted && !job->error[0]) {
        snprintf(job->error, sizeof job->error, "%s: the AMX kernel faulted on the emulated "
                 "tiles: %s", ISA_NAMES[p->isa], fault);
        job->failed = 1;
    }
    pthread_mutex_unlock(&job->lock);
    return NULL;
}

/* Fill the job's ISA-specific hooks for samples of `bits` (8, or 4 with re in the low nibble
 * if re_low); 0 if the ISA was not compiled in. */
static int select_isa(xe_job *job, enum xe_isa isa, int bits, int re_low)
{
    job->kernel = kernel_scalar;
    job->copy = bits == 8 ? copy_groups_generic : re_low ? copy_ci4_lo_generic
        : copy_ci4_hi_generic;
    job->pack_b = job->bias = job->build = 0;
    job->tile_config = job->tile_release = NULL;
    job->tile_fault = NULL;
#ifdef XE_HAVE_AVX512_LAYOUT
    const int build = bits == 8 && job->plan->ncoarse % 4 == 0;  /* one-pass tiles */
    const xe_copy_fn copy_avx512 = bits == 8 ? xe_copy_groups_avx512 : re_low
        ? xe_copy_ci4_lo_avx512 : xe_copy_ci4_hi_avx512;
#endif
    switch (isa) {
    case XE_SCALAR:
        return 1;
#ifdef XE_HAVE_AVX2
    case XE_AVX2:
        job->kernel = xe_kernel_avx2;
        return 1;
#endif
#ifdef XE_HAVE_AVX512VNNI
    case XE_AVX512VNNI:
        job->kernel = xe_kernel_vnni;
        job->copy = copy_avx512;
        job->pack_b = job->bias = 1;
        job->build = build;
        return 1;
#endif
#ifdef XE_HAVE_AMX
    case XE_AMX:
        job->kernel = xe_kernel_amx;
        job->copy = copy_avx512;
        job->pack_b = 1;
        job->build = build;
        job->tile_config = xe_amx_tile_config;
        job->tile_release = xe_amx_tile_release;
        return 1;
#endif
#ifdef XE_HAVE_AMX_EMU
    case XE_AMX_EMU:  /* the AMX path, instruction for instruction, on software tiles */
        job->kernel = xe_kernel_amx_emu;
        job->copy = copy_avx512;
        job->pack_b = 1;
        job->build = build;
        job->tile_config = xe_amx_tile_config_emu;
        job->tile_release = xe_amx_tile_release_emu;
        job->tile_fault = xe_amx_emu_fault;
        return 1;
#endif
    default:
        return 0;
    }
}

/* Run the job on nthreads threads (the caller's thread is one of them). */
static int run_job(xe_job *job, int nthreads)
{
    pthread_t tid[256];
    int started = 0;
    if (nthreads > 256)
        nthreads = 256;
    for (int i = 1; i < nthreads; i++) {
        if (pthread_create(&tid[started], NULL, worker, job) != 0)
            break;  /* fewer threads: the shared counter still covers every unit */
        started++;
    }
    worker(job);
    for (int i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    return job->failed ? -1 : 0;
}

/* Super pairs (J <= L) of 16-stream super blocks, L-major. */
static uint16_t *super_pairs(int nsb, int *nsp)
{
    *nsp = nsb * (nsb + 1) / 2;
    uint16_t *list = malloc(2 * (size_t)*nsp * sizeof(uint16_t));
    if (!list)
        return NULL;
    int q = 0;
    for (int L = 0; L < nsb; L++)
        for (int J = 0; J <= L; J++, q++) {
            list[q] = (uint16_t)J;
            list[*nsp + q] = (uint16_t)L;
        }
    return list;
}

/* ------------------------------------------------------------------ Python interface */

/* The path named `name`, or -1 with ValueError set (naming the choices). */
static int parse_isa(const char *name)
{
    char choices[160] = "";
    for (int i = 0; i < XE_NISA; i++) {
        if (strcmp(name, ISA_NAMES[i]) == 0)
            return i;
        snprintf(choices + strlen(choices), sizeof choices - strlen(choices), "%s%s",
                 i ? ", " : "", ISA_NAMES[i]);
    }
    PyErr_Format(PyExc_ValueError, "unknown isa '%s'; choose one of %s", name, choices);
    return -1;
}

/* The ISA named `name` if this CPU runs it; else -1 with a Python exception naming why. */
static int runnable_isa(const char *name)
{
    detect_isas();
    const int isa = parse_isa(name);
    if (isa >= 0 && !detected_isas.ok[isa]) {
        PyErr_Format(PyExc_RuntimeError, "isa %s cannot run here: %s", name,
                     detected_isas.why[isa]);
        return -1;
    }
    return isa;
}

static PyObject *isa_dict(const xe_isa_table *t)
{
    PyObject *d = PyDict_New();
    for (int i = 0; d && i < XE_NISA; i++) {
        PyObject *v = Py_BuildValue("(Os)", t->ok[i] ? Py_True : Py_False, t->why[i]);
        if (!v || PyDict_SetItemString(d, ISA_NAMES[i], v) != 0) {
            Py_XDECREF(v);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(v);
    }
    return d;
}

static PyObject *py_isa_status(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    detect_isas();
    return isa_dict(&detected_isas);
}

/* _decide_isas' stand-in for the kernel: the error it is to report, or NULL to grant. */
static const char *permit_error;

static int fake_permission(char *why, size_t n) { return amx_permission(why, n, permit_error); }

static PyObject *py_cpu_facts(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
#ifdef XE_X86
    const xe_cpu_facts f = read_cpu_facts();
    return Py_BuildValue("(IIIIK)", f.ecx1, f.ebx7, f.ecx7, f.edx7, (unsigned long long)f.xcr0);
#else
    Py_RETURN_NONE;
#endif
}

PyDoc_STRVAR(decide_isas_doc,
"_decide_isas(ecx1, ebx7, ecx7, edx7, xcr0, amx_permit_error=None)\n\n"
"Test hook: what isa_status() would say on a CPU with these CPUID words (leaf 1 ECX, leaf 7\n"
"EBX/ECX/EDX) and this XCR0, of the paths compiled into this build; the kernel's AMX\n"
"permission is granted, or refused with amx_permit_error. Nothing is detected or changed.");

static PyObject *py_decide_isas(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"ecx1", "ebx7", "ecx7", "edx7", "xcr0", "amx_permit_error", NULL};
    unsigned int ecx1, ebx7, ecx7, edx7;
    unsigned long long xcr0;
    const char *error = NULL;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "IIIIK|z", kwlist, &ecx1, &ebx7, &ecx7, &edx7,
                                     &xcr0, &error))
        return NULL;
    const xe_cpu_facts f = {.ecx1 = ecx1, .ebx7 = ebx7, .ecx7 = ecx7, .edx7 = edx7,
                            .xcr0 = xcr0};
    xe_isa_table t;
    permit_error = error;  /* under the GIL */
    decide_isas(&f, fake_permission, &t);
    return isa_dict(&t);
}

PyDoc_STRVAR(correlate_doc,
"correlate(frames, out, nstream, nchan, ncoarse, isa, nthreads, kt=0, mode='full',\n"
"          sample_bits=8, nibble_order='re_high', accumulate=False, stream_offsets=None,\n"
"          frame_bytes=0, nframe=0)\n\n"
"Correlate whole frames (C-contiguous buffer) into the packed triangle out\n"
"[C, S(S+1)/2, 2] int32 (overwritten, or added to modulo 2^32 with accumulate).\n"
"sample_bits=8: int8 frames [P, S, C, ncoarse, 2, 8]; sample_bits=4: ci4 frames\n"
"[P, S, C, ncoarse, 8] bytes, one complex sample per byte as two two's-complement nibbles,\n"
"re in the high nibble ('re_high') or the low one ('re_low'), unpacked inside the layout\n"
"pass. isa is one of isa_status()'s names. kt: K-steps of 64 spectra per chunk (0:\n"
"default). mode: 'full'; 'layout' runs only the frame-to-tile conversion and leaves out\n"
"untouched; 'compute' converts only each thread's first chunk (a wrong result) so the\n"
"kernels can be timed alone. stream_offsets (int64, one per stream): the streams lie\n"
"anywhere, each its [C, ncoarse, ...] bytes at its offset in each of nframe packet times\n"
"frame_bytes apart (our packets in place: a pcap file's records). Releases the GIL.\n"
"Returns the CPU seconds its threads used (their sum), which time slicing on a shared\n"
"machine does not inflate.");

PyDoc_STRVAR(correlate_layout_doc,
"correlate_layout(data, out, stream_offsets, nchan, nframe, frame_spectra, frame_bytes,\n"
"                 chan_stride, time_stride, time_block, block_stride, encoding, im_offset,\n"
"                 nibble_order, isa, nthreads, kt=0, mode='full', accumulate=False)\n\n"
"Correlate nframe frames of data (a C-contiguous buffer) in any layout (SampleLayout's\n"
"fields: the byte of spectrum t of channel c of stream s is f*frame_bytes +\n"
"stream_offsets[s] + c*chan_stride + (t/time_block)*block_stride + (t%time_block)*\n"
"time_stride, t < frame_spectra, f < nframe; im_offset bytes on for the imaginary part)\n"
"into out as correlate() does. encoding: 'ci8', 'ci4' (nibble_order) or 'ci16' (int16\n"
"little endian, narrowed to int8: a value outside -128..127 raises ValueError naming it).\n"
"stream_offsets: int64 array, one per stream (S even). Read in one pass into the tiles\n"
"(layout.c), AVX2 transposes where streams lie side by side. Releases the GIL; returns\n"
"the threads' CPU seconds.");

/* Largest |re| or |im| of one complex product term a conj(b) for samples of `bits`: 2 x 128^2
 * for ci8, 2 x 8^2 for ci4. The packed int32 output is exact while spectra x this fits. */
static long max_complex_term(int bits) { return bits == 8 ? 2L * 128 * 128 : 2L * 8 * 8; }

/* The mode string's flags; -1 with ValueError for an unknown one. */
static int parse_mode(const char *mode, int *layout_only, int *compute_only)
{
    *layout_only = strcmp(mode, "layout") == 0;
    *compute_only = strcmp(mode, "compute") == 0;
    if (!*layout_only && !*compute_only && strcmp(mode, "full") != 0) {
        PyErr_Format(PyExc_ValueError, "unknown mode '%s'; choose full, layout or compute",
                     mode);
        return -1;
    }
    return 0;
}

/* 1 for re_low, 0 for re_high, -1 with ValueError otherwise. */
static int parse_nibble_order(const char *nibble_order)
{
    if (strcmp(nibble_order, "re_low") == 0)
        return 1;
    if (strcmp(nibble_order, "re_high") == 0)
        return 0;
    PyErr_Format(PyExc_ValueError, "unknown nibble_order '%s'; choose re_high or re_low",
                 nibble_order);
    return -1;
}

/* The out buffer of a call: C-contiguous, writable, [C, S(S+1)/2, 2] int32; 0 or -1. */
static int get_out(PyObject *oobj, Py_buffer *ob, int S, int C)
{
    if (PyObject_GetBuffer(oobj, ob, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) != 0)
        return -1;
    const size_t out_bytes = (size_t)C * ((size_t)S * (S + 1) / 2) * 2 * sizeof(int32_t);
    if ((size_t)ob->len != out_bytes) {
        PyErr_Format(PyExc_ValueError, "out holds %zd bytes; expected %zu ([C, nbaseline, 2] "
                     "int32)", ob->len, out_bytes);
        PyBuffer_Release(ob);
        return -1;
    }
    return 0;
}

/* Every accumulation (int32 tiles, the biased VNNI sums, their int64 correction cast back
 * to int32) is exact modulo 2^32, so the output is exact whenever the true value fits in
 * int32: up to INT32_MAX / max_complex_term spectra per call (Geometry.max_npacket: 65535
 * for ci8, 16.7 M for ci4). Beyond that a result could wrap, so refuse. 0 or -1. */
static int check_spectra(size_t nspec, int bits)
{
    const size_t max_spec = (size_t)(INT32_MAX / max_complex_term(bits));
    if (nspec > max_spec) {
        PyErr_Format(PyExc_ValueError, "%zu spectra in one call can overflow int32; at most "
                     "%zu for %d-bit samples", nspec, max_spec, bits);
        return -1;
    }
    return 0;
}

/* Run a planned call (plan.nstream/nchan/kt/nchunk set; lay or the frame fields) over
 * `input` into `out`; the CPU seconds as a float, or NULL with an exception. */
static PyObject *run_plan(xe_plan *plan, const int8_t *input, int32_t *out, const char *isa_name,
                          int isa, const char *mode, int bits, int re_low, int accumulate)
{
    int layout_only, compute_only;
    if (parse_mode(mode, &layout_only, &compute_only) != 0)
        return NULL;
    const int S = plan->nstream;
    const size_t out_bytes = (size_t)plan->nchan * ((size_t)S * (S + 1) / 2) * 2
        * sizeof(int32_t);
    plan->nb8 = 2 * ((S + 15) / 16);
    plan->isa = (enum xe_isa)isa;
    uint16_t *pairs = super_pairs(plan->nb8 / 2, &plan->nsp);
    if (!pairs)
        return PyErr_NoMemory();
    plan->sp_j = pairs;
    plan->sp_l = pairs + plan->nsp;
    xe_job job = {0};
    job.plan = plan;
    job.frames = input;
    job.out = out;
    job.layout_only = layout_only;
    job.compute_only = compute_only;
    PyObject *result = NULL;
    if (!select_isa(&job, plan->isa, bits, re_low)) {
        PyErr_Format(PyExc_RuntimeError, "isa %s was not compiled in", isa_name);
        goto done;
    }
    if (plan->lay)
        job.build = 0;  /* the frames' one-pass build reads packets; layouts have their own */
    pthread_mutex_init(&job.lock, NULL);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    if (!layout_only && !accumulate)
        memset(job.out, 0, out_bytes);
    rc = run_job(&job, plan->nthreads);
    Py_END_ALLOW_THREADS
    pthread_mutex_destroy(&job.lock);
    if (rc != 0) {
        if (job.error[0])
            PyErr_SetString(job.value_error ? PyExc_ValueError : PyExc_RuntimeError, job.error);
        else
            PyErr_NoMemory();
        goto done;
    }
    result = PyFloat_FromDouble(job.cpu_seconds);
done:
    free(pairs);
    return result;
}

/* The stream offsets of a frames call placed anywhere (stream_offsets not None): an int64
 * array of S entries, each stream's C channels inside every one of nframe packet times of
 * frame_bytes within len bytes; 0, or -1 with ValueError (ob released by the caller). */
static int get_stream_offsets(PyObject *sobj, Py_buffer *sb, int S, size_t stream_bytes,
                              long nframe, int64_t frame_bytes, Py_ssize_t len)
{
    if (PyObject_GetBuffer(sobj, sb, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0)
        return -1;
    if (sb->len != (Py_ssize_t)(S * sizeof(int64_t)) || sb->itemsize != sizeof(int64_t)) {
        PyErr_Format(PyExc_ValueError, "stream_offsets must be %d int64 values", S);
        goto bad;
    }
    if (nframe < 1 || frame_bytes < 1) {
        PyErr_Format(PyExc_ValueError, "stream_offsets need nframe >= 1 and frame_bytes >= 1, "
                     "got %ld and %lld", nframe, (long long)frame_bytes);
        goto bad;
    }
    const int64_t *off = sb->buf;
    for (int s = 0; s < S; s++) {
        if (off[s] < 0 || (size_t)(nframe - 1) * (size_t)frame_bytes + (size_t)off[s]
                + stream_bytes > (size_t)len) {
            PyErr_Format(PyExc_ValueError, "stream %d at offset %lld: %ld frames of %lld bytes "
                         "reach past the %zd-byte buffer", s, (long long)off[s], nframe,
                         (long long)frame_bytes, len);
            goto bad;
        }
    }
    return 0;
bad:
    PyBuffer_Release(sb);
    return -1;
}

static PyObject *py_correlate(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"frames", "out", "nstream", "nchan", "ncoarse", "isa", "nthreads",
                             "kt", "mode", "sample_bits", "nibble_order", "accumulate",
                             "stream_offsets", "frame_bytes", "nframe", NULL};
    PyObject *fobj, *oobj, *sobj = Py_None;
    int S, C, ncoarse, nthreads, kt = 0, bits = 8, accumulate = 0;
    long long stride = 0;
    long nframe = 0;
    const char *isa_name, *mode = "full", *nibble_order = "re_high";
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOiiisi|isispOLl", kwlist, &fobj, &oobj, &S,
                                     &C, &ncoarse, &isa_name, &nthreads, &kt, &mode, &bits,
                                     &nibble_order, &accumulate, &sobj, &stride, &nframe))
        return NULL;
    if (bits != 8 && bits != 4)
        return PyErr_Format(PyExc_ValueError, "sample_bits must be 8 or 4, got %d", bits);
    const int re_low = parse_nibble_order(nibble_order);
    if (re_low < 0)
        return NULL;
    const int isa = runnable_isa(isa_name);
    if (isa < 0)
        return NULL;
    if (S < 1 || C < 1 || ncoarse < 1 || nthreads < 1 || kt < 0 || kt > 1024 || S > 8 * 65535)
        return PyErr_Format(PyExc_ValueError, "bad sizes: nstream=%d nchan=%d ncoarse=%d "
                            "nthreads=%d kt=%d", S, C, ncoarse, nthreads, kt);
    Py_buffer fb, ob, sb = {0};
    if (PyObject_GetBuffer(fobj, &fb, PyBUF_C_CONTIGUOUS) != 0)
        return NULL;
    if (get_out(oobj, &ob, S, C) != 0) {
        PyBuffer_Release(&fb);
        return NULL;
    }
    PyObject *result = NULL;
    const int group_bytes = bits == 8 ? 2 * XE_GROUP : XE_GROUP;
    const size_t stream_bytes = (size_t)C * ncoarse * group_bytes;
    const size_t frame_bytes = (size_t)S * stream_bytes;
    xe_plan plan = {0};
    if (sobj != Py_None) {  /* streams anywhere in packet times of `stride` bytes */
        if (get_stream_offsets(sobj, &sb, S, stream_bytes, nframe, stride, fb.len) != 0)
            goto done;
        plan.stream_off = sb.buf;
        plan.frame_stride = stride;
        plan.nframe = nframe;
    } else {
        if ((size_t)fb.len % frame_bytes) {
            PyErr_Format(PyExc_ValueError, "frames hold %zd bytes, not a whole number of "
                         "%zu-byte frames", fb.len, frame_bytes);
            goto done;
        }
        plan.frame_stride = (int64_t)frame_bytes;
        plan.nframe = (long)((size_t)fb.len / frame_bytes);
    }
    if (check_spectra((size_t)plan.nframe * (size_t)ncoarse * XE_GROUP, bits) != 0)
        goto done;
    plan.nstream = S;
    plan.nchan = C;
    plan.ncoarse = ncoarse;
    plan.group_bytes = group_bytes;
    plan.chan_bytes = (size_t)ncoarse * group_bytes;
    plan.kt = kt ? kt : XE_DEFAULT_KT;
    plan.ngroup = plan.nframe * ncoarse;
    plan.nchunk = (plan.ngroup + plan.kt * 8 - 1) / (plan.kt * 8);
    plan.nthreads = nthreads;
    result = run_plan(&plan, fb.buf, ob.buf, isa_name, isa, mode, bits, re_low, accumulate);
done:
    if (sb.obj)
        PyBuffer_Release(&sb);
    PyBuffer_Release(&fb);
    PyBuffer_Release(&ob);
    return result;
}

static int parse_encoding(const char *enc)
{
    if (strcmp(enc, "ci8") == 0)
        return XE_CI8;
    if (strcmp(enc, "ci4") == 0)
        return XE_CI4;
    if (strcmp(enc, "ci16") == 0)
        return XE_CI16;
    PyErr_Format(PyExc_ValueError, "unknown encoding '%s'; choose ci8, ci4 or ci16", enc);
    return -1;
}

/* Which groups of streams lie side by side for the AVX2 transposes (ci8: 16 streams of
 * (re, im) pairs, im_offset 1; ci4: 32 bytes); NULL with no groups. */
static uint8_t *side_by_side(xe_layout *L, int S)
{
    L->group = L->enc == XE_CI8 && L->im_offset == 1 ? 16 : L->enc == XE_CI4 ? 32 : 0;
    if (!L->group)
        return NULL;
    const int step = L->enc == XE_CI8 ? 2 : 1, ngroup = S / L->group;
    uint8_t *run = calloc((size_t)ngroup + 1, 1);
    if (!run)
        return NULL;
    int any = 0;
    for (int g = 0; g < ngroup; g++) {
        run[g] = 1;
        for (int i = 1; i < L->group; i++)
            if (L->stream_off[g * L->group + i] != L->stream_off[g * L->group] + step * i)
                run[g] = 0;
        any |= run[g];
    }
    if (!any) {  /* no group to transpose: every stream is gathered on its own */
        free(run);
        return NULL;
    }
    return run;
}

static PyObject *py_correlate_layout(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"data", "out", "stream_offsets", "nchan", "nframe",
                             "frame_spectra", "frame_bytes", "chan_stride", "time_stride",
                             "time_block", "block_stride", "encoding", "im_offset",
                             "nibble_order", "isa", "nthreads", "kt", "mode", "accumulate",
                             NULL};
    PyObject *dobj, *oobj, *sobj;
    int C, im_offset, nthreads, kt = 0, accumulate = 0;
    long nframe, fs, tb;
    long long frame_bytes, chan_stride, time_stride, block_stride;
    const char *enc_name, *nibble_order, *isa_name, *mode = "full";
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOillLLLlLsissi|isp", kwlist, &dobj, &oobj,
                                     &sobj, &C, &nframe, &fs, &frame_bytes, &chan_stride,
                                     &time_stride, &tb, &block_stride, &enc_name, &im_offset,
                                     &nibble_order, &isa_name, &nthreads, &kt, &mode,
                                     &accumulate))
        return NULL;
    const int enc = parse_encoding(enc_name), re_low = parse_nibble_order(nibble_order);
    if (enc < 0 || re_low < 0)
        return NULL;
    const int isa = runnable_isa(isa_name);
    if (isa < 0)
        return NULL;
    if (C < 1 || nframe < 1 || fs < 1 || tb < 1 || fs % tb || frame_bytes < 1
        || chan_stride < 0 || time_stride < 0 || block_stride < 0 || im_offset < 0
        || nthreads < 1 || kt < 0 || kt > 1024)
        return PyErr_Format(PyExc_ValueError, "bad layout: nchan=%d nframe=%ld "
                            "frame_spectra=%ld time_block=%ld frame_bytes=%lld strides "
                            "%lld %lld %lld im_offset=%d nthreads=%d kt=%d", C, nframe, fs, tb,
                            frame_bytes, chan_stride, time_stride, block_stride, im_offset,
                            nthreads, kt);
    Py_buffer db, ob, sb;
    if (PyObject_GetBuffer(sobj, &sb, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0)
        return NULL;
    const int S = (int)(sb.len / (Py_ssize_t)sizeof(int64_t));
    if (sb.itemsize != 8 || S < 2 || S % 2 || S > 8 * 65535) {
        PyBuffer_Release(&sb);
        return PyErr_Format(PyExc_ValueError, "stream_offsets must be an even number of int64 "
                            "(%zd bytes given)", sb.len);
    }
    if (PyObject_GetBuffer(dobj, &db, PyBUF_C_CONTIGUOUS) != 0) {
        PyBuffer_Release(&sb);
        return NULL;
    }
    if (get_out(oobj, &ob, S, C) != 0) {
        PyBuffer_Release(&sb);
        PyBuffer_Release(&db);
        return NULL;
    }
    PyObject *result = NULL;
    uint8_t *run = NULL;
    xe_layout lay = {0};
    lay.stream_off = sb.buf;
    lay.frame_bytes = frame_bytes;
    lay.chan_stride = chan_stride;
    lay.time_stride = time_stride;
    lay.block_stride = block_stride;
    lay.frame_spectra = fs;
    lay.time_block = tb;
    lay.enc = enc;
    lay.im_offset = im_offset;
    lay.re_low = re_low;
    lay.nspec = nframe * fs;
    /* the last byte any sample touches must lie in the buffer */
    int64_t lo = INT64_MAX, hi = 0;
    for (int s = 0; s < S; s++) {
        lo = lay.stream_off[s] < lo ? lay.stream_off[s] : lo;
        hi = lay.stream_off[s] > hi ? lay.stream_off[s] : hi;
    }
    const int64_t part = enc == XE_CI4 ? 0 : im_offset, part_bytes = enc == XE_CI16 ? 2 : 1;
    const int64_t last = (int64_t)(nframe - 1) * frame_bytes + hi + (int64_t)(C - 1) * chan_stride
        + ((fs - 1) / tb) * block_stride + ((fs - 1) % tb) * time_stride + part + part_bytes - 1;
    if (lo < 0 || (enc != XE_CI4 && im_offset == 0) || last >= (int64_t)db.len) {
        PyErr_Format(PyExc_ValueError, "the layout reaches byte %lld of a %zd-byte buffer (or "
                     "has a negative offset or a zero im_offset)", (long long)last, db.len);
        goto done;
    }
    if (check_spectra((size_t)lay.nspec, enc == XE_CI4 ? 4 : 8) != 0)
        goto done;
    run = side_by_side(&lay, S);
    lay.run = run;
#ifdef XE_HAVE_AVX2
    lay.simd = isa != XE_SCALAR && run != NULL;
#endif
    xe_plan plan = {0};
    plan.nstream = S;
    plan.nchan = C;
    plan.kt = kt ? kt : XE_DEFAULT_KT;
    plan.nchunk = (lay.nspec + (long)plan.kt * XE_KSTEP - 1) / ((long)plan.kt * XE_KSTEP);
    plan.lay = &lay;
    plan.nthreads = nthreads;
    result = run_plan(&plan, db.buf, ob.buf, isa_name, isa, mode, enc == XE_CI4 ? 4 : 8, re_low,
                      accumulate);
done:
    free(run);
    PyBuffer_Release(&sb);
    PyBuffer_Release(&db);
    PyBuffer_Release(&ob);
    return result;
}

/* ------------------------------------------------------------------ int8 peak loops */

typedef double (*xe_peak_fn)(long iters);

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

/* The register-resident loop of the instruction path `isa` runs, and its int8 ops per
 * iteration (2 per MAC); NULL where the path has none compiled. */
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
        return xe_vnni_peak_loop;
#endif
#ifdef XE_HAVE_AVX2
    case XE_AVX2:
        *ops_per_iter = 6.0 * 16 * 2;
        *what = "vpmaddwd+vpaddd ymm (AVX2 on sign-extended int16, 6 accumulators)";
        return xe_avx2_peak_loop;
#endif
    default:
        (void)ops_per_iter;
        (void)what;
        return NULL;
    }
}

PyDoc_STRVAR(int8_peak_doc,
"int8_peak(isa, nthreads, iters) -> (int8 ops/s, instruction, int8 ops per CPU second)\n\n"
"Register-resident loop of the instruction the native path `isa` multiplies with (amx:\n"
"tdpbssd; avx512vnni: vpdpbusd; avx2: vpmaddwd), iters iterations on each of nthreads threads\n"
"at once, operands loaded once: the ceiling of that path on this machine, measured now.\n"
"Ops are int8 MACs x 2; ops/s over the slowest thread's wall time, and per CPU second of\n"
"all threads (insensitive to time slicing). amx_emulated runs the AMX loop's source on the\n"
"emulated tiles (a check of that code, not a peak). Raises RuntimeError where the path cannot\n"
"run.");

static PyObject *py_int8_peak(PyObject *self, PyObject *args)
{
    const char *isa_name;
    int nthreads;
    long iters;
    (void)self;
    if (!PyArg_ParseTuple(args, "sil", &isa_name, &nthreads, &iters))
        return NULL;
    const int isa = runnable_isa(isa_name);
    if (isa < 0)
        return NULL;
    double ops_per_iter = 0;
    const char *what = "";
    const xe_peak_fn fn = peak_loop(isa, &ops_per_iter, &what);
    if (!fn)
        return PyErr_Format(PyExc_RuntimeError, "isa %s has no int8 peak loop", isa_name);
    if (nthreads < 1 || nthreads > 256 || iters < 1)
        return PyErr_Format(PyExc_ValueError, "bad nthreads=%d or iters=%ld", nthreads, iters);
    peak_arg args_[256];
    pthread_t tid[256];
    int started = 0;
    Py_BEGIN_ALLOW_THREADS
    for (int i = 0; i < nthreads; i++) {
        args_[i].fn = fn;
        args_[i].iters = iters;
        args_[i].seconds = args_[i].cpu = 0;
        args_[i].emulated = isa == XE_AMX_EMU;
        if (pthread_create(&tid[i], NULL, peak_thread, &args_[i]) != 0)
            break;
        started++;
    }
    for (int i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    Py_END_ALLOW_THREADS
    double slowest = 0, cpu = 0;
    for (int i = 0; i < started; i++) {
        if (args_[i].fault[0])
            return PyErr_Format(PyExc_RuntimeError, "%s: the peak loop faulted on the "
                                "emulated tiles: %s", isa_name, args_[i].fault);
        slowest = args_[i].seconds > slowest ? args_[i].seconds : slowest;
        cpu += args_[i].cpu;
    }
    if (!started || slowest <= 0 || cpu <= 0)
        return PyErr_Format(PyExc_RuntimeError, "could not start the peak threads");
    const double ops = (double)started * iters * ops_per_iter;
    return Py_BuildValue("(dsd)", ops / slowest, what, ops / cpu);
}

PyDoc_STRVAR(amx_emu_tdpbssd_doc,
"_amx_emu_tdpbssd(config, dst, src1, src2, c, a, b, load_config=True)\n\n"
"Test hook of the AMX emulation (amx_emu.h) alone: load the 64-byte tile configuration\n"
"`config` (unless load_config is false), load tiles dst, src1, src2 from the 1024-byte\n"
"buffers c (int32), a, b (int8; rows 64 bytes apart, as much as each tile's configured\n"
"rows x colsb), run TDPBSSD dst, src1, src2, store dst back into c and release the tiles.\n"
"Raises RuntimeError with the emulated #GP/#UD where the hardware would fault.");

static PyObject *py_amx_emu_tdpbssd(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"config", "dst", "src1", "src2", "c", "a", "b", "load_config",
                             NULL};
    Py_buffer cfg, c, a, b;
    int dst, src1, src2, load_config = 1;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "y*iiiw*y*y*|p", kwlist, &cfg, &dst, &src1,
                                     &src2, &c, &a, &b, &load_config))
        return NULL;
    PyObject *result = NULL;
#ifdef XE_HAVE_AMX_EMU
    char fault[200];
    if (cfg.len != 64 || c.len != XE_TILE_BYTES || a.len != XE_TILE_BYTES
        || b.len != XE_TILE_BYTES || !PyBuffer_IsContiguous(&c, 'C')
        || !PyBuffer_IsContiguous(&a, 'C') || !PyBuffer_IsContiguous(&b, 'C'))
        PyErr_Format(PyExc_ValueError, "config must be 64 bytes and c, a, b contiguous "
                     "1024-byte tiles (got %zd, %zd, %zd, %zd bytes)", cfg.len, c.len, a.len,
                     b.len);
    else if (xe_amx_emu_tdpbssd_test(cfg.buf, load_config, dst, src1, src2, c.buf, a.buf,
                                     b.buf, fault, sizeof fault))
        PyErr_SetString(PyExc_RuntimeError, fault);
    else
        result = (Py_INCREF(Py_None), Py_None);
#else
    PyErr_SetString(PyExc_RuntimeError, "the AMX emulation was not compiled in (it is built "
                    "with the AVX-512 layout code, which the compiler lacked)");
#endif
    PyBuffer_Release(&cfg);
    PyBuffer_Release(&c);
    PyBuffer_Release(&a);
    PyBuffer_Release(&b);
    return result;
}

/* uvh5_rows.c: the UVH5 writer's row pass. */
PyObject *xe_py_uvh5_rows(PyObject *self, PyObject *args);

static PyMethodDef methods[] = {
    {"isa_status", py_isa_status, METH_NOARGS,
     "isa_status() -> {name: (runnable, reason)} for every name in ISA_NAMES."},
    {"correlate", (PyCFunction)(void (*)(void))py_correlate, METH_VARARGS | METH_KEYWORDS,
     correlate_doc},
    {"correlate_layout", (PyCFunction)(void (*)(void))py_correlate_layout,
     METH_VARARGS | METH_KEYWORDS, correlate_layout_doc},
    {"int8_peak", py_int8_peak, METH_VARARGS, int8_peak_doc},
    {"uvh5_rows", xe_py_uvh5_rows, METH_VARARGS,
     "uvh5_rows(tri, index, flip, vis): vis[b, c, p] = tri[c, index[b, p]], the imaginary "
     "part negated where flip[b, p] (int32/int64 tri [C, nbaseline, 2], int64 index and uint8 "
     "flip [nbls, npol], int32 vis [nbls, C, npol, 2]); the UVH5 writer's row pass."},
    {"_decide_isas", (PyCFunction)(void (*)(void))py_decide_isas, METH_VARARGS | METH_KEYWORDS,
     decide_isas_doc},
    {"_cpu_facts", py_cpu_facts, METH_NOARGS,
     "_cpu_facts() -> (ecx1, ebx7, ecx7, edx7, xcr0) as the detection reads them (None off "
     "x86-64): the test of _decide_isas against this machine."},
    {"_amx_emu_tdpbssd", (PyCFunction)(void (*)(void))py_amx_emu_tdpbssd,
     METH_VARARGS | METH_KEYWORDS, amx_emu_tdpbssd_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_native",
    "Exact complex-int8 correlator kernels (AMX-INT8, AVX-512 VNNI, AVX2, C); see xcorr.c.",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void)
{
    PyObject *m = PyModule_Create(&moduledef);
    if (!m)
        return NULL;
    PyObject *names = PyTuple_New(XE_NISA);
    for (int i = 0; names && i < XE_NISA; i++) {
        PyObject *name = PyUnicode_FromString(ISA_NAMES[i]);
        if (!name) {
            Py_CLEAR(names);
            break;
        }
        PyTuple_SET_ITEM(names, i, name);
    }
    if (!names || PyModule_AddObject(m, "ISA_NAMES", names) != 0) {
        Py_XDECREF(names);
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "DEFAULT_KT", XE_DEFAULT_KT);
    return m;
}
