/* AVX-512 pieces: the frame -> Y tile copy, the VNNI packing of Y tiles (used by AMX and
 * VNNI) and the AVX-512 VNNI kernel.
 *
 * Why vpdpbusd with a bias rather than vpdpwssd on int16: vpdpbusd multiplies UNSIGNED bytes
 * by signed bytes, 64 MACs per instruction, twice vpdpwssd's 32. The B side is stored as
 * b + 128 (a xor 0x80, in [0, 255]) and the A side is broadcast signed, so each accumulator
 * holds sum a*b + 128 * sum a; the flush subtracts 128 x the row sums of A (engine.c). Nothing
 * saturates (vpdpbusd wraps, and even the biased sum of 65,280 spectra, <= 65,280 * 128 * 255
 * < 2^31, fits), so the corrected result is exact.
 */
#include "xcorr.h"

#if defined(XE_HAVE_AVX512_LAYOUT)
#include <immintrin.h>
#include <string.h>

/* popcnt: every AVX-512 CPU has it (the extremes counts, count_rows) */
#define XE_AVX512_TARGET __attribute__((target("avx512f,avx512bw,popcnt")))

/* Frame groups -> Y rows, four groups (64 bytes: r0 i0 r1 i1 r2 i2 r3 i3) per permute. */
XE_AVX512_TARGET void xe_copy_groups_avx512(const int8_t *src, int8_t *re_row, long d0, long n)
{
    const __m512i idx = _mm512_set_epi64(7, 5, 3, 1, 6, 4, 2, 0);
    int8_t *im_row = re_row + 8 * XE_KSTEP;
    long u = 0;
    for (; u < n && ((d0 + u) & 3); u++)
        xe_copy_group(src + 16 * u, re_row, d0 + u);
    for (; u + 4 <= n; u += 4) {  /* 4 aligned groups lie in one half of one tile row */
        const __m512i v = _mm512_permutexvar_epi64(idx, _mm512_loadu_si512(src + 16 * u));
        const size_t o = xe_y_offset(d0 + u);
        _mm256_storeu_si256((__m256i *)(re_row + o), _mm512_castsi512_si256(v));
        _mm256_storeu_si256((__m256i *)(im_row + o), _mm512_extracti64x4_epi64(v, 1));
    }
    for (; u < n; u++)
        xe_copy_group(src + 16 * u, re_row, d0 + u);
}

/* ci4 bytes -> sign-extended int8 nibbles: (nibble ^ 8) - 8, on 64 or 32 bytes at once. */
static inline XE_AVX512_TARGET void unpack_ci4_512(__m512i v, __m512i *hi, __m512i *lo)
{
    const __m512i m = _mm512_set1_epi8(15), e = _mm512_set1_epi8(8);
    *hi = _mm512_sub_epi8(_mm512_xor_si512(_mm512_and_si512(_mm512_srli_epi16(v, 4), m), e), e);
    *lo = _mm512_sub_epi8(_mm512_xor_si512(_mm512_and_si512(v, m), e), e);
}

static inline XE_AVX512_TARGET void unpack_ci4_256(__m256i v, __m256i *hi, __m256i *lo)
{
    const __m256i m = _mm256_set1_epi8(15), e = _mm256_set1_epi8(8);
    *hi = _mm256_sub_epi8(_mm256_xor_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m), e), e);
    *lo = _mm256_sub_epi8(_mm256_xor_si256(_mm256_and_si256(v, m), e), e);
}

/* ci4 groups (8 bytes, one complex sample each) -> Y rows, unpacked on the way: 8 groups
 * (a whole 64-spectra tile row) per zmm where aligned, 4 per ymm, else one at a time. */
static inline XE_AVX512_TARGET void copy_ci4(const int8_t *src, int8_t *re_row, long d0, long n,
                                             int re_low)
{
    int8_t *im_row = re_row + 8 * XE_KSTEP;
    long u = 0;
    for (; u < n && ((d0 + u) & 3); u++)
        xe_copy_group_ci4(src + 8 * u, re_row, d0 + u, re_low);
    for (; u < n;) {
        const size_t o = xe_y_offset(d0 + u);
        if (((d0 + u) & 7) == 0 && u + 8 <= n) {
            __m512i hi, lo;
            unpack_ci4_512(_mm512_loadu_si512(src + 8 * u), &hi, &lo);
            _mm512_storeu_si512(re_row + o, re_low ? lo : hi);
            _mm512_storeu_si512(im_row + o, re_low ? hi : lo);
            u += 8;
        } else if (u + 4 <= n) {
            __m256i hi, lo;
            unpack_ci4_256(_mm256_loadu_si256((const __m256i *)(src + 8 * u)), &hi, &lo);
            _mm256_storeu_si256((__m256i *)(re_row + o), re_low ? lo : hi);
            _mm256_storeu_si256((__m256i *)(im_row + o), re_low ? hi : lo);
            u += 4;
        } else
            break;
    }
    for (; u < n; u++)
        xe_copy_group_ci4(src + 8 * u, re_row, d0 + u, re_low);
}

XE_AVX512_TARGET void xe_copy_ci4_hi_avx512(const int8_t *src, int8_t *re_row, long d0, long n)
{
    copy_ci4(src, re_row, d0, n, 0);
}

XE_AVX512_TARGET void xe_copy_ci4_lo_avx512(const int8_t *src, int8_t *re_row, long d0, long n)
{
    copy_ci4(src, re_row, d0, n, 1);
}

/* 16 x 16 transpose of 32-bit elements: the Y tile's 16 rows r (in registers) [16 rows][16
 * k-quads] -> VNNI [16 k-quads][16 rows][4] at dst, xor'd with bias (0x80: the +128 of the
 * unsigned vpdpbusd operand; 0: none). With sums (VNNI), each packed vector (lane m: 4 bytes
 * of row m) is also summed into lane m of *sums before the bias: the exact row sums of the
 * tile, kept in a register by the caller across its K-steps, so the VNNI correction costs no
 * pass over the tiles and no memory traffic. vpmaddubsw(1, x) adds byte pairs into int16
 * (|sum| <= 256, no saturation); 16 of them stay within +-2^12; vpmaddwd(1, .) then gives int32. */
/* xe_count_fn's count (xcorr.h) of one K-step's 16 rows, in registers: two byte compares
 * into masks and a popcnt a row, added to n[stream in the block]. */
static inline XE_AVX512_TARGET void count_rows(const __m512i *r, const xe_work *w, int64_t *n)
{
    const __m512i lo = _mm512_set1_epi8(w->ext_lo), hi = _mm512_set1_epi8(w->ext_hi);
    for (int m = 0; m < 16; m++)
        n[m & 7] += __builtin_popcountll(_mm512_cmpeq_epi8_mask(r[m], lo)
                                         | _mm512_cmpeq_epi8_mask(r[m], hi));
}

static inline XE_AVX512_TARGET void pack_rows(__m512i *r, int8_t *dst, __m512i bias,
                                              __m512i *sums)
{
    __m512i t[16];
    for (int i = 0; i < 8; i++) {  /* per 128-bit lane l: rows (2i, 2i+1) x cols 4l.. */
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {  /* r[4i+q] lane l = rows 4i..4i+3 at column 4l+q */
        r[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int q = 0; q < 4; q++) {  /* 4 x 4 transpose of 128-bit lanes */
        const __m512i y0 = _mm512_shuffle_i32x4(r[q], r[4 + q], 0x44);
        const __m512i y1 = _mm512_shuffle_i32x4(r[q], r[4 + q], 0xee);
        const __m512i y2 = _mm512_shuffle_i32x4(r[8 + q], r[12 + q], 0x44);
        const __m512i y3 = _mm512_shuffle_i32x4(r[8 + q], r[12 + q], 0xee);
        t[0 + q] = _mm512_shuffle_i32x4(y0, y2, 0x88);
        t[4 + q] = _mm512_shuffle_i32x4(y0, y2, 0xdd);
        t[8 + q] = _mm512_shuffle_i32x4(y1, y3, 0x88);
        t[12 + q] = _mm512_shuffle_i32x4(y1, y3, 0xdd);
    }
    if (sums) {
        const __m512i one8 = _mm512_set1_epi8(1);
        __m512i s16 = _mm512_maddubs_epi16(one8, t[0]);
        for (int q = 1; q < 16; q++)
            s16 = _mm512_add_epi16(s16, _mm512_maddubs_epi16(one8, t[q]));
        *sums = _mm512_add_epi32(*sums, _mm512_madd_epi16(s16, _mm512_set1_epi16(1)));
    }
    for (int q = 0; q < 16; q++)
        _mm512_storeu_si512(dst + 64 * q, _mm512_xor_si512(t[q], bias));
}

/* VNNI-pack K-steps [t0, t1) of blocks [i0, i1) of the chunk's Y tiles. */
XE_AVX512_TARGET void xe_pack_b_avx512(const xe_plan *p, xe_work *w, int t0, int t1, int i0,
                                       int i1, int bias)
{
    const size_t blk = xe_block_bytes(p);
    const __m512i x = _mm512_set1_epi8(bias ? (char)0x80 : 0);
    for (int i = i0; i < i1 && t0 < t1; i++) {
        __m512i sums = bias ? _mm512_load_si512(w->rowsum + (size_t)i * 16) : x;
        int64_t n[8] = {0};
        for (int t = t0; t < t1; t++) {
            const size_t o = i * blk + (size_t)t * XE_TILE_BYTES;
            __m512i r[16];
            for (int m = 0; m < 16; m++)
                r[m] = _mm512_loadu_si512(w->a + o + 64 * m);
            if (w->ext)
                count_rows(r, w, n);
            pack_rows(r, w->b + o, x, bias ? &sums : NULL);
        }
        if (bias)
            _mm512_store_si512(w->rowsum + (size_t)i * 16, sums);
        if (w->ext)
            for (int m = 0; m < 8; m++)
                w->ext[8 * i + m] += n[m];
    }
}

/* The 8 streams of one block of a unit, walked 4 groups at a time (one 64-byte load per
 * stream, r i r i r i r i): stream m's next 4 groups start at at + off[m] (the streams keep
 * their distances through the unit: one pointer advances for all), and q is the group within
 * the packet. Needs ncoarse % 4 == 0, so that 4 aligned groups never straddle a packet end.
 * Streams past nstream are absent (ns < 8). */
typedef struct {
    const int8_t *at;
    ptrdiff_t off[8];  /* signed: with stream offsets a stream may lie before stream 0 */
    int ns;
    long q;
} xe_quads;

static inline void quads_init(const xe_plan *p, const int8_t *frames, const xe_unit *un, int i,
                              xe_quads *c)
{
    long run;
    c->at = xe_group_src(p, frames, 0, un->c, un->g0, un->g1, &run);
    for (c->ns = 0; c->ns < 8 && 8 * i + c->ns < p->nstream; c->ns++)
        c->off[c->ns] = xe_group_src(p, frames, 8 * i + c->ns, un->c, un->g0, un->g1, &run)
            - c->at;
    c->q = un->g0 % p->ncoarse;
}

/* Where the streams' next 4 groups start (add off[m]); then past them (to the next packet's
 * groups of the channel at a packet's end). */
static inline const int8_t *quads_next(const xe_plan *p, xe_quads *c)
{
    if (c->q == p->ncoarse) {
        c->at += (size_t)p->frame_stride - p->chan_bytes;
        c->q = 0;
    }
    const int8_t *h = c->at;
    c->at += 4 * 2 * XE_GROUP;
    c->q += 4;
    return h;
}

/* The 16 Y rows of one block's K-step from its streams' two loads each (h0, h1 + off[m]: 4
 * groups r i r i r i r i each): two vpermt2q per stream give its real and its imaginary row;
 * rows of absent streams (m >= ns) are zeros. */
static inline XE_AVX512_TARGET void load_rows(const int8_t *h0, const int8_t *h1,
                                              const ptrdiff_t *off, int ns, __m512i *r)
{
    const __m512i re_idx = _mm512_set_epi64(14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i im_idx = _mm512_set_epi64(15, 13, 11, 9, 7, 5, 3, 1);
    for (int m = 0; m < 8; m++) {
        if (m < ns) {
            const __m512i v0 = _mm512_loadu_si512(h0 + off[m]);
            const __m512i v1 = _mm512_loadu_si512(h1 + off[m]);
            r[m] = _mm512_permutex2var_epi64(v0, re_idx, v1);
            r[m + 8] = _mm512_permutex2var_epi64(v0, im_idx, v1);
        } else {
            r[m] = r[m + 8] = _mm512_setzero_si512();
        }
    }
}

/* Frames -> Y tiles and their VNNI packing in one pass: the first nt (whole) K-steps of the
 * unit, blocks 2 sb and 2 sb + 1; ci8 with every 4 aligned groups inside one packet
 * (ncoarse % 4 == 0). Per stream and K-step, two 64-byte loads (r i r i r i r i: 4 groups
 * each) become its whole real and imaginary rows by two vpermt2q; the tile's 16 rows, still
 * in registers, are stored as the A tile and transposed into the B tile. Against the copy
 * then the pack (xe_copy_groups_avx512, xe_pack_b_avx512): full-line stores instead of half
 * lines, and no second pass over the A tiles. Streams past nstream read as zeros.
 * Each K-step also prefetches the same K-step of the block two ahead (the next super block's):
 * spread over the build, the reads stay ahead by a super block without the burst of a
 * separate prefetch pass (the layout pass 1.12x, AVX-512 VNNI). After the unit's last super
 * block that is the next unit's first (if next), into L2 only: the products run before its
 * build, and their tiles hold L1. */
XE_AVX512_TARGET void xe_build_tiles_avx512(const xe_plan *p, xe_work *w, const int8_t *frames,
                                            const xe_unit *un, const xe_unit *next, int sb,
                                            int nt, int bias)
{
    const size_t blk = xe_block_bytes(p);
    const __m512i x = _mm512_set1_epi8(bias ? (char)0x80 : 0);
    for (int i = 2 * sb; i < 2 * sb + 2; i++) {
        xe_quads in, ahead = {.ns = 0};
        quads_init(p, frames, un, i, &in);
        const int l2 = i + 2 >= p->nb8;  /* ahead is the next unit's */
        long ahead_left = 0;              /* 4-group steps to prefetch */
        if (!l2) {
            quads_init(p, frames, un, i + 2, &ahead);
            ahead_left = 2L * nt;
        } else if (next) {
            quads_init(p, frames, next, i + 2 - p->nb8, &ahead);
            const long quads = (next->g1 - next->g0) / 4;
            ahead_left = quads < 2L * nt ? quads : 2L * nt;
        }
        int8_t *a = w->a + (size_t)i * blk, *b = w->b + (size_t)i * blk;
        __m512i sums = bias ? _mm512_load_si512(w->rowsum + (size_t)i * 16) : x;
        int64_t n[8] = {0};
        for (int t = 0; t < nt; t++) {
            const int8_t *h0 = quads_next(p, &in), *h1 = quads_next(p, &in);
            for (int half = 0; half < 2 && ahead_left > 0; half++, ahead_left--) {
                const int8_t *f = quads_next(p, &ahead);
                for (int m = 0; m < ahead.ns; m++) {
                    if (l2)
                        __builtin_prefetch(f + ahead.off[m], 0, 2);
                    else
                        __builtin_prefetch(f + ahead.off[m], 0, 3);
                }
            }
            __m512i r[16];
            load_rows(h0, h1, in.off, in.ns, r);
            int8_t *at = a + (size_t)t * XE_TILE_BYTES;
            if (t + 1 < nt)  /* the next K-step's tiles, for writing: they wait in L2 */
                for (int m = 0; m < 16; m++) {
                    __builtin_prefetch(at + XE_TILE_BYTES + 64 * m, 1, 3);
                    __builtin_prefetch(b + (size_t)(t + 1) * XE_TILE_BYTES + 64 * m, 1, 3);
                }
            for (int m = 0; m < 16; m++)
                _mm512_store_si512(at + 64 * m, r[m]);
            if (w->ext)
                count_rows(r, w, n);
            pack_rows(r, b + (size_t)t * XE_TILE_BYTES, x, bias ? &sums : NULL);
        }
        if (bias)
            _mm512_store_si512(w->rowsum + (size_t)i * 16, sums);
        if (w->ext)
            for (int m = 0; m < 8; m++)
                w->ext[8 * i + m] += n[m];
    }
}
#endif

#if defined(XE_HAVE_AVX512VNNI)
#define XE_VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

/* The AMX tile product in zmm registers: accumulator row m (16 int32) += B row r (unsigned,
 * biased) x broadcast A[m][4r..4r+3] (signed), for r = 0..15 per K-step. The broadcast is
 * vpdpbusd's embedded {1to16} memory operand: one fused uop per product instead of a separate
 * vpbroadcastd (the products 1.08-1.11x, Xeon); GCC does not fold it from the intrinsics,
 * clang does. */
static XE_VNNI_TARGET void vnni_sub(const xe_plan *p, const xe_work *w, int nt, int I, int M,
                                    int32_t *C)
{
    const size_t blk = xe_block_bytes(p);
    const int8_t *x = w->a + I * blk, *y = w->b + M * blk;
    __m512i c[16];
#pragma GCC unroll 16
    for (int m = 0; m < 16; m++)
        c[m] = _mm512_loadu_si512(C + 16 * m);
    for (int t = 0; t < nt; t++) {
        const int8_t *xt = x + (size_t)t * XE_TILE_BYTES;
        const int8_t *yt = y + (size_t)t * XE_TILE_BYTES;
        for (int r = 0; r < 16; r++) {
            const __m512i br = _mm512_load_si512(yt + 64 * r);
#pragma GCC unroll 16
            for (int m = 0; m < 16; m++) {
                const int8_t *am = xt + XE_KSTEP * m + 4 * r;
#if defined(__clang__)
                int32_t a;
                memcpy(&a, am, 4);
                c[m] = _mm512_dpbusd_epi32(c[m], br, _mm512_set1_epi32(a));
#else
                __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(c[m]) : "v"(br),
                        "m"(*(const int32_t *)am));
#endif
            }
        }
    }
#pragma GCC unroll 16
    for (int m = 0; m < 16; m++)
        _mm512_storeu_si512(C + 16 * m, c[m]);
}

XE_VNNI_TARGET void xe_kernel_vnni(const xe_plan *p, xe_work *w, int nt, int sp0, int sp1)
{
    xe_each_sub_block(p, w, nt, sp0, sp1, vnni_sub);
}
#endif

#if !defined(XE_HAVE_AVX512_LAYOUT)
typedef int xe_avx512_not_compiled;  /* ISO C forbids an empty translation unit */
#endif
