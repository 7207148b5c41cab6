/* AVX2 kernel: C[I, M] += Y_I Y_M^T as dot products of Y rows, on sign-extended int16.
 *
 * AVX2 has no exact 8-bit dot product: vpmaddubsw saturates its int16 pair sums (255 * 128 * 2
 * > 2^15), so bytes are widened (vpmovsxbw, once per unit: xe_widen_avx2) and multiplied with
 * vpmaddwd, whose int32 pair sums (<= 2 * 2^14) are exact. Blocks of 2 x 4 rows keep 8
 * partial-sum registers across the chunk; one horizontal sum per chunk, 4 at a time.
 */
#include "xcorr.h"

#if defined(XE_HAVE_AVX2)
#include <immintrin.h>

/* popcnt: every AVX2 CPU has it (the extremes counts in xe_widen_avx2) */
#define XE_AVX2_TARGET __attribute__((target("avx2,popcnt")))

/* c[j] += the horizontal sum of a[j], j = 0..3. */
static inline XE_AVX2_TARGET void add_sums4(int32_t *c, const __m256i *a)
{
    const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(a[0], a[1]),
                                        _mm256_hadd_epi32(a[2], a[3]));
    const __m128i s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    _mm_storeu_si128((__m128i *)c, _mm_add_epi32(_mm_loadu_si128((const __m128i *)c), s));
}

/* The int16 tiles are written once per unit: widening in the kernel instead (vpmovsxbw per
 * row load) re-widened every row for each sub-block and 2 x 4 group it enters, a shuffle-port
 * uop for every 1.3 vpmaddwd. With w->ext, the parts at the quantiser's extremes are counted
 * on the way (xe_count_fn, xcorr.h), from the same loads: byte k of a tile is in row k / 64,
 * stream (k / 64) % 8 of the block. */
XE_AVX2_TARGET void xe_widen_avx2(const xe_plan *p, xe_work *w, int nt, int i0, int i1)
{
    const size_t blk = xe_block_bytes(p);
    const __m128i lo = _mm_set1_epi8(w->ext_lo), hi = _mm_set1_epi8(w->ext_hi);
    for (int i = i0; i < i1; i++) {
        const int8_t *src = w->a + (size_t)i * blk;
        int16_t *dst = (int16_t *)w->b + (size_t)i * blk;
        int64_t n[8] = {0};
        for (size_t k = 0; k < (size_t)nt * XE_TILE_BYTES; k += 16) {
            const __m128i v = _mm_load_si128((const __m128i *)(src + k));
            _mm256_store_si256((__m256i *)(dst + k), _mm256_cvtepi8_epi16(v));
            if (w->ext)
                n[(k >> 6) & 7] += __builtin_popcount((unsigned)_mm_movemask_epi8(
                    _mm_or_si128(_mm_cmpeq_epi8(v, lo), _mm_cmpeq_epi8(v, hi))));
        }
        if (w->ext)
            for (int m = 0; m < 8; m++)
                w->ext[8 * i + m] += n[m];
    }
}

static XE_AVX2_TARGET void avx2_sub(const xe_plan *p, const xe_work *w, int nt, int I, int M,
                                     int32_t *C)
{
    const size_t blk = xe_block_bytes(p);
    const int16_t *x = (const int16_t *)w->b + I * blk, *y = (const int16_t *)w->b + M * blk;
    for (int m0 = 0; m0 < 16; m0 += 2)
        for (int n0 = 0; n0 < 16; n0 += 4) {
            __m256i acc[2][4];
            for (int i = 0; i < 2; i++)
                for (int j = 0; j < 4; j++)
                    acc[i][j] = _mm256_setzero_si256();
            for (int t = 0; t < nt; t++)
                for (int kk = 0; kk < XE_KSTEP; kk += 16) {
                    const size_t o = (size_t)t * XE_TILE_BYTES + kk;
                    const __m256i x0 = _mm256_load_si256((const __m256i *)(x + o + XE_KSTEP * m0));
                    const __m256i x1 = _mm256_load_si256(
                        (const __m256i *)(x + o + XE_KSTEP * (m0 + 1)));
                    for (int j = 0; j < 4; j++) {
                        const __m256i yj = _mm256_load_si256(
                            (const __m256i *)(y + o + XE_KSTEP * (n0 + j)));
                        acc[0][j] = _mm256_add_epi32(acc[0][j], _mm256_madd_epi16(x0, yj));
                        acc[1][j] = _mm256_add_epi32(acc[1][j], _mm256_madd_epi16(x1, yj));
                    }
                }
            for (int i = 0; i < 2; i++)  /* the 4 sums of each row at once */
                add_sums4(C + 16 * (m0 + i) + n0, acc[i]);
        }
}

XE_AVX2_TARGET void xe_kernel_avx2(const xe_plan *p, xe_work *w, int nt, int sp0, int sp1)
{
    xe_each_sub_block(p, w, nt, sp0, sp1, avx2_sub);
}

/* ------------------------------------------------------------------ layout transposes */

/* 16 x 16 byte transpose in each 128-bit lane (x[i] holds row rev[i]; on return x[j] holds
 * column j, rows in order): four rounds of unpacking rows k and k + 8 at 1, 2, 4 and 8 bytes. */
static const int xe_rev16[16] = {0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15};

#define XE_ROUND(x, y, lo, hi)                                                                 \
    for (int k = 0; k < 8; k++) {                                                              \
        y[2 * k] = lo(x[k], x[k + 8]);                                                         \
        y[2 * k + 1] = hi(x[k], x[k + 8]);                                                     \
    }

static inline XE_AVX2_TARGET void transpose16(__m256i *x)
{
    __m256i y[16];
    XE_ROUND(x, y, _mm256_unpacklo_epi8, _mm256_unpackhi_epi8)
    XE_ROUND(y, x, _mm256_unpacklo_epi16, _mm256_unpackhi_epi16)
    XE_ROUND(x, y, _mm256_unpacklo_epi32, _mm256_unpackhi_epi32)
    XE_ROUND(y, x, _mm256_unpacklo_epi64, _mm256_unpackhi_epi64)
}
#undef XE_ROUND

static inline XE_AVX2_TARGET void load_rows(__m256i *x, const int8_t *const *rows, long d,
                                            int64_t off)
{
    for (int i = 0; i < 16; i++)
        x[i] = _mm256_loadu_si256((const __m256i *)(rows[d + xe_rev16[i]] + off));
}

static inline XE_AVX2_TARGET void store_lanes(int8_t *lo_dst, int8_t *hi_dst, __m256i v)
{
    _mm_storeu_si128((__m128i *)lo_dst, _mm256_castsi256_si128(v));
    _mm_storeu_si128((__m128i *)hi_dst, _mm256_extracti128_si256(v, 1));
}

/* ci8: per spectrum 32 bytes re0 im0 re1 im1 ... re15 im15; column 2m is stream m's real
 * part, 2m + 1 its imaginary part (lane 0: streams 0-7, block blk0; lane 1: 8-15). */
XE_AVX2_TARGET void xe_transpose_ci8_avx2(const int8_t *const *rows, int64_t off, int8_t *a,
                                          size_t blk, int blk0, long d0, long n)
{
    for (long d = d0; d < d0 + n; d += 16) {
        __m256i x[16];
        load_rows(x, rows, d, off);
        transpose16(x);
        int8_t *t0 = a + (size_t)blk0 * blk + xe_y_spec(d), *t1 = t0 + blk;
        for (int m = 0; m < 8; m++) {
            store_lanes(t0 + m * XE_KSTEP, t1 + m * XE_KSTEP, x[2 * m]);
            store_lanes(t0 + (m + 8) * XE_KSTEP, t1 + (m + 8) * XE_KSTEP, x[2 * m + 1]);
        }
    }
}

/* ci4: per spectrum 32 bytes, one per stream; column j is stream j (lane 0: streams 0-15,
 * blocks blk0, blk0 + 1) or 16 + j (lane 1: blocks blk0 + 2, blk0 + 3), both nibbles. */
XE_AVX2_TARGET void xe_transpose_ci4_avx2(const int8_t *const *rows, int64_t off, int8_t *a,
                                          size_t blk, int blk0, long d0, long n, int re_low)
{
    const __m256i m15 = _mm256_set1_epi8(15), e8 = _mm256_set1_epi8(8);
    for (long d = d0; d < d0 + n; d += 16) {
        __m256i x[16];
        load_rows(x, rows, d, off);
        transpose16(x);
        int8_t *t0 = a + (size_t)blk0 * blk + xe_y_spec(d), *t2 = t0 + 2 * blk;
        for (int j = 0; j < 16; j++) {
            const __m256i v = x[j];
            const __m256i hi = _mm256_sub_epi8(
                _mm256_xor_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m15), e8), e8);
            const __m256i lo = _mm256_sub_epi8(_mm256_xor_si256(_mm256_and_si256(v, m15), e8), e8);
            int8_t *r0 = t0 + (size_t)(j / 8) * blk + (size_t)(j % 8) * XE_KSTEP;
            int8_t *r2 = t2 + (size_t)(j / 8) * blk + (size_t)(j % 8) * XE_KSTEP;
            store_lanes(r0, r2, re_low ? lo : hi);
            store_lanes(r0 + 8 * XE_KSTEP, r2 + 8 * XE_KSTEP, re_low ? hi : lo);
        }
    }
}

#else
typedef int xe_avx2_not_compiled;  /* ISO C forbids an empty translation unit */
#endif
