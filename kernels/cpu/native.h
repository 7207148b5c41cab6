/* What the Python bindings (module.c) call: run-time dispatch, the correlate engine, the int8
 * peak loops and the host-side passes. Everything behind this header is plain C (no CPython):
 * errors come back as an xe_error, which module.c turns into the Python exception. */
#ifndef XE_NATIVE_H
#define XE_NATIVE_H

#include <stddef.h>
#include <stdint.h>

#include "xcorr.h"

/* ------------------------------------------------------------------ errors */

enum xe_err_kind { XE_OK = 0, XE_ERR_VALUE, XE_ERR_RUNTIME, XE_ERR_MEMORY };

typedef struct {
    enum xe_err_kind kind;
    char msg[256];
} xe_error;

/* Set err (kind and printf-style message); returns -1 for `return xe_fail(...)`. */
int xe_fail(xe_error *err, enum xe_err_kind kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ------------------------------------------------------------------ dispatch (dispatch.c) */

/* The one list of path names, indexed by enum xe_isa. */
extern const char *const xe_isa_names[XE_NISA];

/* What CPUID and XCR0 say: leaf 1 ECX, leaf 7 sub-leaf 0 EBX/ECX/EDX, XCR0 (0 without
 * OSXSAVE). Kept apart from the decision so that it is tested with CPUs this one is not. */
typedef struct {
    uint32_t ecx1, ebx7, ecx7, edx7;
    uint64_t xcr0;
} xe_cpu_facts;

/* Per path: runnable; refused (the CPU has every instruction the path needs but the OS or the
 * kernel withholds them: XCR0 state, the AMX permission; worth a warning, unlike a CPU that
 * lacks the path); why, in words. */
typedef struct {
    int ok[XE_NISA];
    int refused[XE_NISA];
    char why[XE_NISA][256];
} xe_isa_table;

/* This machine's table (detected once, on the first call; under the GIL). */
const xe_isa_table *xe_detected_isas(void);
/* The table these facts give, the kernel's AMX permission granted (permit_error NULL) or
 * refused with that error: the decision alone, nothing detected or changed. */
void xe_decide_isas(const xe_cpu_facts *f, const char *permit_error, xe_isa_table *t);
/* This CPU's facts; 0 off x86-64. */
int xe_read_cpu_facts(xe_cpu_facts *f);
/* The path named `name` if this machine runs it; else -1 with err saying why. */
int xe_runnable_isa(const char *name, xe_error *err);

/* ------------------------------------------------------------------ the engine (engine.c) */

/* What to run of a call. */
enum xe_mode { XE_FULL = 0, XE_LAYOUT_ONLY = 1, XE_COMPUTE_ONLY = 2 };

typedef struct {
    enum xe_isa isa;
    enum xe_mode mode;
    int bits, re_low;   /* 8 or 4 (ci4, re in the low nibble if re_low) */
    int accumulate;     /* add into out (modulo 2^32) instead of overwriting it */
    int nthreads, kt;   /* kt: K-steps per chunk, 0 for XE_DEFAULT_KT */
    int64_t *extremes;  /* [S]: add each stream's sample parts at the quantiser's extremes
                         * (-128/+127, ci4 -8/+7), counted in its Y tiles as they are built;
                         * NULL: not counted */
} xe_call;

/* Frames [P][S][C][ncoarse][2][8] (or ci4 [P][S][C][ncoarse][8]) of len bytes: plan the call,
 * with stream_off (S int64, or NULL: streams back to back in whole frames) placing each stream
 * in nframe packet times frame_bytes apart. 0, or -1 with err. */
int xe_plan_frames(xe_plan *p, const xe_call *call, int S, int C, int ncoarse, size_t len,
                   const int64_t *stream_off, long nframe, int64_t frame_bytes, xe_error *err);
/* Any layout (lay's fields set but run/simd/group) over len bytes: plan the call. 0 or -1. */
int xe_plan_layout(xe_plan *p, xe_layout *lay, const xe_call *call, int S, int C, long nframe,
                   size_t len, xe_error *err);
/* Run a planned call over input into out [C][S(S+1)/2][2] int32; the threads' CPU seconds in
 * *cpu_seconds. Call without the GIL (it allocates and starts threads). 0 or -1 with err. */
int xe_run(xe_plan *p, const xe_call *call, const int8_t *input, int32_t *out,
           double *cpu_seconds, xe_error *err);

/* ------------------------------------------------------------------ peak loops (peak.c) */

/* int8 ops per wall second (slowest thread), the instruction, ops per CPU second of all
 * threads: the register-resident loop of path isa on nthreads threads at once. 0 or -1. */
int xe_int8_peak(int isa, int nthreads, long iters, double *ops_wall, const char **what,
                 double *ops_cpu, xe_error *err);

/* ------------------------------------------------------------------ host passes */

/* host_passes.c: the SampleLayout gather (xengine_block/sample_layout.py, gather()): for
 * channels c < nchan, streams s < nstream and spectra d < nspec, the sample at src[rs[d] +
 * soff[s] + c * scs] (imaginary part sim bytes on; enc ci8, ci4 (re_low) or ci16 little
 * endian) to element rd[d] + doff[s] + c * dcs of dst (imaginary part dim elements on), dst
 * of type out_type; or, out_type XE_OUT_CI4_*, one packed ci4 byte per sample of an int8 dst
 * (dim unused). Returns 0, or 1 and *bad = the first value that does not fit the output
 * (a ci16 value outside -128..127; for ci4 out, a ci8/ci16 value outside -8..7); every
 * sample is still written (narrowed). */
enum xe_out_type { XE_OUT_I8 = 0, XE_OUT_I16, XE_OUT_I32, XE_OUT_F32, XE_OUT_F64, XE_NOUT,
                   XE_OUT_CI4_RE_HIGH = XE_NOUT, XE_OUT_CI4_RE_LOW };
int xe_gather(const uint8_t *src, const int64_t *rs, long nspec, const int64_t *soff,
              int nstream, int64_t scs, int64_t sim, int enc, int re_low, void *dst,
              int out_type, const int64_t *rd, const int64_t *doff, int64_t dcs, int64_t dim,
              int nchan, int *bad);
/* host_passes.c: ci4 rows (8 bytes each, one complex sample a byte) -> per row 8 high-nibble
 * values then 8 low-nibble ones (each sign-extended), the high ones first unless !high_first:
 * the frame unpacking of xengine_block/frames.py (unpack_frames). */
void xe_unpack_ci4_rows(const uint8_t *restrict src, long nrow, int high_first,
                        int8_t *restrict out);
/* host_passes.c: one NPU call's output placed into the packed triangle (the NPU backend's
 * placement, xengine_block/npu/host/blockpairs.py, BlockPairJob.add): for each of nchan channels
 * c and each k < n, tri[c][dst[k]] = (out[c][re_pos[k]], out[c][im_pos[k]]); out holds per_chan
 * int32 per channel, tri nbl (re, im) pairs per channel. Indices are checked by the caller. */
void xe_place_pair(const int32_t *restrict out, long per_chan, long nchan,
                   const int64_t *re_pos, const int64_t *im_pos, const int64_t *dst, long n,
                   int32_t *restrict tri, long nbl);
/* uvh5_rows.c: the UVH5 writer's rows (xengine_block/outputs/uvh5.py, DumpRows). */
enum xe_num_type { XE_I32 = 0, XE_I64, XE_F64 };
void xe_uvh5_rows(const void *tri, int tri_type, int64_t C, int64_t nbl, const int64_t *index,
                  const uint8_t *flip, const int64_t *order, int64_t nbls, int64_t P, void *vis,
                  int vis_type);
void xe_uvh5_counts(const int64_t *valid, int per_chan, int64_t C, int64_t nbl,
                    const int64_t *index, int64_t nbls, int64_t P, double nspectra,
                    uint8_t *flags, float *nsamples);

#endif
