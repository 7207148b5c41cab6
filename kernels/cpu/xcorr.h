/* The native X-engine correlator's data model and kernel interface (engine.c runs them).
 *
 * Data model. Per channel, the samples of a chunk of K-steps (64 spectra each) are laid out as
 * "Y tiles": for each block of 8 streams and each K-step, a 16 x 64 int8 tile whose rows 0..7
 * are the real parts of the 8 streams and rows 8..15 their imaginary parts (row-major, the AMX
 * "A" layout). The Gram product C = Y_I Y_L^T of two such blocks is a 16 x 16 int32 tile
 *     [[rr, ri], [ir, ii]]   (rr[m][n] = sum re_j re_k, ri = sum re_j im_k, ...)
 * from which K[j,k] = (rr + ii) + i (ir - ri): every product is a plain signed x signed int8
 * product and the subtraction happens in int32 at the end, so no int8 value is ever negated.
 */
#ifndef XE_XCORR_H
#define XE_XCORR_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define XE_KSTEP 64          /* spectra per tile row: the K of one tile product */
#define XE_GROUP 8           /* spectra per (re, im) group of the frame layout */
#define XE_TILE_BYTES 1024   /* one 16 x 64 int8 tile, or one 16 x 16 int32 tile */
#define XE_ACC_INTS 256      /* int32 per accumulator tile */

/* K-steps per chunk by default: 8 (512 spectra) keeps one super block's A and B tiles
 * (2 x 2 x 8 KiB) in L1 while the accumulators and the chunk's tiles stay in L2 at S = 256. */
#define XE_DEFAULT_KT 8

/* The native paths; dispatch.c's xe_isa_names names them (the one list: Python reads it as
 * _native.ISA_NAMES).
 * XE_AMX_EMU is the AMX kernel's source over software tiles (amx_emu.h): verification only. */
enum xe_isa { XE_SCALAR = 0, XE_AVX2 = 1, XE_AVX512VNNI = 2, XE_AMX = 3, XE_AMX_EMU = 4,
              XE_NISA = 5 };

/* The AVX-512 layout code (frame copy, VNNI packing; kern_avx512.c) is compiled for either
 * AVX-512 VNNI or AMX; the emulated AMX path needs it too, and nothing else SIMD. */
#if defined(XE_HAVE_AVX512VNNI) || defined(XE_HAVE_AMX)
#define XE_HAVE_AVX512_LAYOUT 1
#define XE_HAVE_AMX_EMU 1
#endif

/* Sample encodings of a layout (SampleLayout.encoding). */
enum xe_enc { XE_CI8 = 0, XE_CI4 = 1, XE_CI16 = 2 };

/* Any input layout (xengine_block/sample_layout.py, the one description): the byte of
 * spectrum t (t = f * frame_spectra + tt) of channel c of stream s is
 *   f * frame_bytes + stream_off[s] + c * chan_stride
 *     + (tt / time_block) * block_stride + (tt % time_block) * time_stride
 * imaginary part im_offset bytes later (ci8, ci16: int16 little endian); ci4: the same byte,
 * re in the high nibble unless re_low. layout.c reads it into the Y tiles. */
typedef struct {
    const int64_t *stream_off;
    int64_t frame_bytes, chan_stride, time_stride, block_stride;
    long frame_spectra, time_block;  /* time_block >= 1 */
    long nspec;                      /* spectra of the call: nframe * frame_spectra */
    int enc, im_offset, re_low;
    int simd;                        /* AVX2 transposes where streams lie side by side */
    const uint8_t *run;              /* [per group] 1 if the group's streams lie side by side:
                                      * ci8 16 streams of (re, im) pairs, ci4 32 bytes */
    int group;                       /* streams per group: 16 (ci8) or 32 (ci4); 0: none */
} xe_layout;

/* One correlate() call: sizes derived once, shared read-only by the worker threads. */
typedef struct {
    int nstream, nchan, ncoarse;
    long nframe;
    size_t chan_bytes;     /* bytes of one (packet, stream, channel): ncoarse * group_bytes */
    int group_bytes;       /* bytes of one group of 8 spectra: 16 (ci8: 8 re, 8 im) or 8 (ci4) */
    int nb8;               /* 8-stream blocks, padded to an even count */
    int nsp;               /* super pairs (J <= L) of 16-stream super blocks */
    const uint16_t *sp_j;  /* super pair list, L-major so the B side stays cached */
    const uint16_t *sp_l;
    int kt;                /* K-steps per chunk */
    long ngroup;           /* (re, im) groups per stream and channel: nframe * ncoarse */
    long nchunk;           /* chunks per channel */
    enum xe_isa isa;
    const xe_layout *lay;  /* any layout (correlate_layout); NULL: frames [P][S][C][coarse]... */
    int64_t frame_stride;  /* frames: bytes from one packet time to the next */
    const int64_t *stream_off;  /* frames: where each stream's [C][coarse]... lies in its
                                 * packet time (our packets in place, in a pcap file's records);
                                 * NULL: stream s at s * C * chan_bytes, back to back */
    int nthreads;          /* worker threads (the caller's among them) */
} xe_plan;

/* One worker thread's scratch, sized for the plan. */
typedef struct {
    int8_t *a;        /* Y tiles  [nb8][kt][16][64] */
    int8_t *b;        /* the same tiles VNNI-packed [nb8][kt][16 k/4][16 rows][4] (AMX, VNNI),
                       * or widened to int16 [nb8][kt][16][64] (AVX2) */
    int32_t *acc;     /* accumulators [nsp][4 sub-tiles][16][16] */
    int32_t *rowsum;  /* [nb8][16] Y row sums since the last write-out (VNNI bias correction),
                       * added by the packing while the rows are in registers; |sum| <= 128 x
                       * the call's spectra (8.4 M for ci8, 134 M for ci4): int32 holds it */
    const int8_t **rows;  /* layout input: [kt * 64] where each spectrum of the unit's channel
                           * starts (stream offset 0) */
    int bad;              /* layout input: a ci16 value outside -128..127 was read ... */
    int bad_value;        /* ... the first such value */
    int64_t *ext;         /* [nb8 * 8] parts at the quantiser's extremes per stream, this
                           * thread's (NULL: not counted) ... */
    int8_t ext_lo, ext_hi;  /* ... the extremes: -128, 127 (ci8) or -8, 7 (ci4) */
} xe_work;

/* One unit of work: channel c, groups [g0, g1) (frames), or spectra [t0, t1) (any layout),
 * spanning nt K-steps. */
typedef struct {
    int c, nt;
    long g0, g1;
    long t0, t1;
} xe_unit;

/* Y tile byte offset of spectrum d of a chunk in a real row (xe_y_offset in spectra). */
static inline size_t xe_y_spec(long d)
{
    return (size_t)(d / XE_KSTEP) * XE_TILE_BYTES + (size_t)(d % XE_KSTEP);
}

/* layout.c: the unit's samples in any layout -> Y tiles of every block (zero past the data). */
void xe_convert_layout(const xe_plan *p, xe_work *w, const int8_t *data, const xe_unit *un);
/* The AVX2 transposes layout.c uses where lay->simd (kern_avx2.c): 16 ci8 streams (32 bytes of
 * (re, im) pairs per spectrum at rows[i] + off) or 32 ci4 streams (32 bytes) x n spectra (a
 * multiple of 16, d0 too) into the Y rows of the blocks from blk0 (a: the work's tiles). */
void xe_transpose_ci8_avx2(const int8_t *const *rows, int64_t off, int8_t *a, size_t blk,
                           int blk0, long d0, long n);
void xe_transpose_ci4_avx2(const int8_t *const *rows, int64_t off, int8_t *a, size_t blk,
                           int blk0, long d0, long n, int re_low);

/* Where group g of stream s, channel c starts in the frames, and how many groups follow it
 * contiguously (to the end of its packet or of the chunk at g1). */
static inline const int8_t *xe_group_src(const xe_plan *p, const int8_t *frames, int s, int c,
                                         long g, long g1, long *run)
{
    const long pk = g / p->ncoarse, q = g % p->ncoarse;
    *run = (p->ncoarse - q < g1 - g) ? p->ncoarse - q : g1 - g;
    const size_t at = p->stream_off ? (size_t)p->stream_off[s]
        : (size_t)s * p->nchan * p->chan_bytes;
    return frames + (size_t)pk * p->frame_stride + at + (size_t)c * p->chan_bytes
        + (size_t)q * p->group_bytes;
}

/* Monotonic wall time in seconds (the peak loops time themselves). */
static inline double xe_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* CPU seconds of the calling thread: what a worker really got on a shared machine. */
static inline double xe_thread_cpu(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static inline size_t xe_block_bytes(const xe_plan *p) { return (size_t)p->kt * XE_TILE_BYTES; }

/* Sub-block `sub` (0..3) of super pair `sp`: the 8-stream blocks (*I, *M) and their int32
 * accumulator tile in `acc`. Returns 0 for the block below the diagonal, which the Hermitian
 * triangle skips: the one place that says which sub-blocks exist. */
static inline int xe_sub_block(const xe_plan *p, int32_t *acc, int sp, int sub, int *I, int *M,
                               int32_t **C)
{
    *I = 2 * p->sp_j[sp] + (sub >> 1);
    *M = 2 * p->sp_l[sp] + (sub & 1);
    *C = acc + ((size_t)sp * 4 + sub) * XE_ACC_INTS;
    return *I <= *M;
}

/* The products of one sub-block: C[I, M] (16 x 16 int32) += Y_I Y_M^T over nt K-steps. */
typedef void (*xe_sub_fn)(const xe_plan *p, const xe_work *w, int nt, int I, int M,
                          int32_t *C);

/* fn over every sub-block of super pairs [sp0, sp1) that the triangle needs (fn is inlined
 * where it is a constant of the caller). */
static inline void xe_each_sub_block(const xe_plan *p, xe_work *w, int nt, int sp0, int sp1,
                                     xe_sub_fn fn)
{
    for (int sp = sp0; sp < sp1; sp++)
        for (int sub = 0; sub < 4; sub++) {
            int I, M;
            int32_t *C;
            if (xe_sub_block(p, w->acc, sp, sub, &I, &M, &C))
                fn(p, w, nt, I, M, C);
        }
}

/* Byte offset, inside one block's Y tiles, of group d (8 spectra) of the chunk's real row. */
static inline size_t xe_y_offset(long d)
{
    return (size_t)(d / 8) * XE_TILE_BYTES + (size_t)(d % 8) * 8;
}

/* Copy one frame group (8 re bytes then 8 im bytes) to its real and imaginary Y rows. */
static inline void xe_copy_group(const int8_t *src, int8_t *re_row, long d)
{
    const size_t o = xe_y_offset(d);
    __builtin_memcpy(re_row + o, src, 8);
    __builtin_memcpy(re_row + 8 * XE_KSTEP + o, src + 8, 8);
}

/* Two's-complement nibble -> int8: the high and the low nibble of a ci4 byte. */
static inline int8_t xe_nib_hi(uint8_t b) { return (int8_t)((int)(b >> 4) ^ 8) - 8; }
static inline int8_t xe_nib_lo(uint8_t b) { return (int8_t)((int)(b & 15) ^ 8) - 8; }

/* Unpack one ci4 group (8 bytes, one complex sample each; re in the high nibble unless
 * re_low) to its real and imaginary Y rows. */
static inline void xe_copy_group_ci4(const int8_t *src, int8_t *re_row, long d, int re_low)
{
    const size_t o = xe_y_offset(d);
    for (int i = 0; i < 8; i++) {
        const uint8_t b = (uint8_t)src[i];
        re_row[o + i] = re_low ? xe_nib_lo(b) : xe_nib_hi(b);
        re_row[8 * XE_KSTEP + o + i] = re_low ? xe_nib_hi(b) : xe_nib_lo(b);
    }
}

/* Copy n consecutive groups of one (packet, stream, channel) to chunk groups d0 .. d0+n-1
 * (ci8 groups of 16 bytes, or ci4 groups of 8 bytes unpacked on the way). */
typedef void (*xe_copy_fn)(const int8_t *src, int8_t *re_row, long d0, long n);

/* Accumulate every super pair of the chunk (nt K-steps) into w->acc.
 * Sub-tile s = 2a + b of super pair (J, L) is C[2J+a, 2L+b]; the sub-tile below the diagonal
 * of a diagonal super pair (J == L, a=1, b=0) may be left untouched. */
typedef void (*xe_kernel_fn)(const xe_plan *p, xe_work *w, int nt, int sp0, int sp1);
/* Parts equal to lo or hi in the Y tiles (w->a) of blocks [i0, i1), K-steps [0, nt), added
 * per stream to w->ext (rows m and m + 8 of a block's tile are stream 8i + m's re and im):
 * input health's count of samples at the quantiser's extremes. One definition, three
 * instruction sets (C; AVX2 inside the int16 widening; AVX-512 BW inside the VNNI packing and
 * the one-pass build; the last two from the loads they make anyway): the same comparisons,
 * the same counts. */
typedef void (*xe_count_fn)(const xe_plan *p, xe_work *w, int nt, int i0, int i1, int8_t lo,
                            int8_t hi);
void xe_count_extremes_c(const xe_plan *p, xe_work *w, int nt, int i0, int i1, int8_t lo,
                         int8_t hi);

/* kern_scalar.c: the portable kernel and frame-group copies (ci8, ci4 re high, ci4 re low). */
void xe_kernel_scalar(const xe_plan *p, xe_work *w, int nt, int sp0, int sp1);
void xe_copy_groups_c(const int8_t *src, int8_t *re_row, long d0, long n);
void xe_copy_ci4_hi_c(const int8_t *src, int8_t *re_row, long d0, long n);
void xe_copy_ci4_lo_c(const int8_t *src, int8_t *re_row, long d0, long n);

#if defined(XE_HAVE_AMX)
void xe_kernel_amx(const xe_plan *p, xe_work *w, int nt, int sp0, int sp1);
void xe_amx_tile_config(void);
void xe_amx_tile_release(void);
double xe_amx_peak_loop(long iters);
#endif
#if defined(XE_HAVE_AMX_EMU)
/* kern_amx.c and peak_amx.c compiled over amx_emu.h (kern_amx_emu.c): the same functions,
 * _emu names. */
void xe_kernel_amx_emu(const xe_plan *p, xe_work *w, int nt, int sp0, int sp1);
void xe_amx_tile_config_emu(void);
void xe_amx_tile_release_emu(void);
double xe_amx_peak_loop_emu(long iters);
/* The calling thread's first emulated #GP/#UD since the last call, into msg; 1 if any. */
int xe_amx_emu_fault(char *msg, size_t n);
/* One emulated TDPBSSD on tiles loaded from 16 x 64-byte buffers (stride 64) under the
 * 64-byte configuration cfg (not loaded if !load_config), dst stored back to c: the unit test
 * of the emulation against a model of Intel's definition. Returns xe_amx_emu_fault's. */
int xe_amx_emu_tdpbssd_test(const uint8_t cfg[64], int load_config, int dst, int src1, int src2,
                            int32_t *c, const int8_t *a, const int8_t *b, char *msg, size_t n);
#endif
#if defined(XE_HAVE_AVX512_LAYOUT)
void xe_pack_b_avx512(const xe_plan *p, xe_work *w, int t0, int t1, int i0, int i1,
                      int bias);
void xe_build_tiles_avx512(const xe_plan *p, xe_work *w, const int8_t *frames,
                           const xe_unit *un, const xe_unit *next, int sb, int nt, int bias);
void xe_copy_groups_avx512(const int8_t *src, int8_t *re_row, long d0, long n);
void xe_copy_ci4_hi_avx512(const int8_t *src, int8_t *re_row, long d0, long n);
void xe_copy_ci4_lo_avx512(const int8_t *src, int8_t *re_row, long d0, long n);
#endif
#if defined(XE_HAVE_AVX512VNNI)
void xe_kernel_vnni(const xe_plan *p, xe_work *w, int nt, int sp0, int sp1);
#endif
#if defined(XE_HAVE_AVX2)
void xe_kernel_avx2(const xe_plan *p, xe_work *w, int nt, int sp0, int sp1);
/* The first nt K-steps of blocks [i0, i1) of the Y tiles (w->a) widened to int16 (w->b);
 * with w->ext, their extremes counted on the way. */
void xe_widen_avx2(const xe_plan *p, xe_work *w, int nt, int i0, int i1);
#endif

#endif
