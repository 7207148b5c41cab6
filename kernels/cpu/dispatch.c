/* Run-time dispatch: which compiled paths this CPU and OS can run, and why not.
 *
 * AMX where CPUID, XCR0 and the kernel's arch_prctl permission allow, else AVX-512 VNNI, else
 * AVX2, else portable C (xengine_block/backends/native.py makes the choice from this table).
 * Each SIMD path exists only where the compiler accepted its target attribute (setup.py
 * defines XE_HAVE_<ISA>). The decision is a function of what was read (xe_cpu_facts) and of
 * the kernel's answer, so it is tested with the facts of CPUs this machine is not
 * (_native._decide_isas). The CPUID bits and XCR0 masks are Intel SDM vol. 2 (CPUID) and
 * vol. 1 section 13.3 (XCR0).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "native.h"

#if defined(__x86_64__) || defined(_M_X64)
#define XE_X86 1
#include <cpuid.h>
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

const char *const xe_isa_names[XE_NISA] = {
    [XE_SCALAR] = "scalar", [XE_AVX2] = "avx2", [XE_AVX512VNNI] = "avx512vnni", [XE_AMX] = "amx",
    [XE_AMX_EMU] = "amx_emulated",
};

int xe_fail(xe_error *err, enum xe_err_kind kind, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    err->kind = kind;
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return -1;
}

/* The kernel's permission for AMX tile data: 1 if granted; why says what happened. The real
 * request ignores error; the decision's test hook passes the kernel's answer in it. */
typedef int (*xe_amx_permit_fn)(char *why, size_t n, const char *error);

static void set_isa(xe_isa_table *t, int isa, int ok, const char *why)
{
    t->ok[isa] = ok;
    t->refused[isa] = 0;
    snprintf(t->why[isa], sizeof t->why[isa], "%s", why);
}

/* Not runnable though the CPU has the path: the OS or the kernel withholds it. */
static void set_refused(xe_isa_table *t, int isa, const char *why)
{
    set_isa(t, isa, 0, why);
    t->refused[isa] = 1;
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

/* Which compiled paths these facts allow, which the OS or kernel refuses, and why. The CPU's
 * lack of an instruction is reported before the OS's refusal of its state. permit is asked
 * (with permit_error) only when everything else allows AMX. */
static void decide(const xe_cpu_facts *f, xe_amx_permit_fn permit, const char *permit_error,
                   xe_isa_table *t)
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
    /* some of these go unused where a path is not compiled */
    (void)permit, (void)permit_error, (void)os_ymm, (void)os_zmm, (void)os_tile, (void)cpu_avx2,
        (void)cpu_avx512, (void)cpu_vnni, (void)cpu_amx;
#ifdef XE_HAVE_AVX2
    if (!cpu_avx2)
        set_isa(t, XE_AVX2, 0, "CPU lacks AVX2");
    else if (!os_ymm)
        set_refused(t, XE_AVX2, "OS does not enable YMM state");
    else
        set_isa(t, XE_AVX2, 1, "AVX2 vpmaddwd on sign-extended int16");
#else
    set_isa(t, XE_AVX2, 0, "not compiled: the compiler lacks -mavx2");
#endif
#ifdef XE_HAVE_AVX512VNNI
    if (!cpu_avx512 || !cpu_vnni)
        set_isa(t, XE_AVX512VNNI, 0, !cpu_avx512 ? "CPU lacks AVX-512 F/BW/VL"
                : "CPU lacks AVX512-VNNI");
    else if (!os_zmm)
        set_refused(t, XE_AVX512VNNI, "OS does not enable ZMM state");
    else
        set_isa(t, XE_AVX512VNNI, 1,
                "AVX-512 VNNI vpdpbusd with +128 bias and row-sum correction");
#else
    set_isa(t, XE_AVX512VNNI, 0, "not compiled: the compiler lacks avx512vnni");
#endif
#ifdef XE_HAVE_AMX
    if (!cpu_amx)
        set_isa(t, XE_AMX, 0, "CPU lacks AMX-TILE/AMX-INT8");
    else if (!cpu_avx512)
        set_isa(t, XE_AMX, 0, "AMX path also needs AVX-512 F/BW for its layout code");
    else if (!os_zmm)
        set_refused(t, XE_AMX, "AMX path also needs AVX-512 F/BW for its layout code, and the "
                    "OS does not enable ZMM state");
    else if (!os_tile)
        set_refused(t, XE_AMX, "AMX not enabled by the OS (XCR0 lacks XTILECFG/XTILEDATA)");
    else {
        char why[256];
        if (permit(why, sizeof why, permit_error))
            set_isa(t, XE_AMX, 1, why);
        else
            set_refused(t, XE_AMX, why);
    }
#else
    set_isa(t, XE_AMX, 0, "not compiled: the compiler lacks amx-tile/amx-int8");
#endif
#ifdef XE_HAVE_AMX_EMU
    if (!cpu_avx512)
        set_isa(t, XE_AMX_EMU, 0, "emulated AMX runs the AMX path's AVX-512 layout code, and "
                "the CPU lacks AVX-512 F/BW/VL");
    else if (!os_zmm)
        set_refused(t, XE_AMX_EMU, "emulated AMX runs the AMX path's AVX-512 layout code, and "
                    "the OS does not enable ZMM state");
    else
        set_isa(t, XE_AMX_EMU, 1, "AMX kernel (kern_amx.c) on software-emulated tiles "
                "(amx_emu.h) with the real AVX-512 layout and packing: verification only, slow, "
                "never chosen automatically");
#else
    set_isa(t, XE_AMX_EMU, 0, "not compiled: the emulated AMX path needs the AVX-512 layout "
            "code (the compiler lacks avx512bw)");
#endif
}

void xe_decide_isas(const xe_cpu_facts *f, const char *permit_error, xe_isa_table *t)
{
    decide(f, amx_permission, permit_error, t);  /* the kernel's answer as given */
}

#ifdef XE_X86
static uint64_t xgetbv0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

/* Ask Linux for the AMX tile data state (off by default since 5.16); 1 if granted. */
static int request_amx(char *why, size_t n, const char *unused)
{
    (void)unused;
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

int xe_read_cpu_facts(xe_cpu_facts *f)
{
    memset(f, 0, sizeof *f);
#ifdef XE_X86
    unsigned a, b, d;
    __cpuid(1, a, b, f->ecx1, d);
    if ((f->ecx1 >> 27) & 1)
        f->xcr0 = xgetbv0();  /* OSXSAVE: the OS manages extended state */
    if (__get_cpuid_max(0, NULL) >= 7)
        __cpuid_count(7, 0, a, f->ebx7, f->ecx7, f->edx7);
    return 1;
#else
    return 0;
#endif
}

const xe_isa_table *xe_detected_isas(void)
{
    static xe_isa_table table;
    static int detected;
    if (detected)
        return &table;
    detected = 1;
#ifdef XE_X86
    xe_cpu_facts f;
    xe_read_cpu_facts(&f);
    decide(&f, request_amx, NULL, &table);
#else
    set_isa(&table, XE_SCALAR, 1, "portable C (int32)");
    for (int i = XE_AVX2; i < XE_NISA; i++)
        set_isa(&table, i, 0, i == XE_AMX_EMU ? "not an x86-64 CPU (emulated AMX runs the "
                "AVX-512 layout code)" : "not an x86-64 CPU");
#endif
    return &table;
}

int xe_runnable_isa(const char *name, xe_error *err)
{
    const xe_isa_table *t = xe_detected_isas();
    for (int i = 0; i < XE_NISA; i++) {
        if (strcmp(name, xe_isa_names[i]) != 0)
            continue;
        if (!t->ok[i])
            return xe_fail(err, XE_ERR_RUNTIME, "isa %s cannot run here: %s", name, t->why[i]);
        return i;
    }
    char choices[160] = "";
    for (int i = 0; i < XE_NISA; i++)
        snprintf(choices + strlen(choices), sizeof choices - strlen(choices), "%s%s",
                 i ? ", " : "", xe_isa_names[i]);
    return xe_fail(err, XE_ERR_VALUE, "unknown isa '%s'; choose one of %s", name, choices);
}
