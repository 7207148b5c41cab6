/* AVX2 kernel: C[I, M] += Y_I Y_M^T as dot products of Y rows, on sign-extended int16.
 *
 * AVX2 has no exact 8-bit dot product: vpmaddubsw saturates its int16 pair sums (255 * 128 * 2
 * > 2^15), so bytes are widened (vpmovsxbw) and multiplied with vpmaddwd, whose int32 pair
 * sums (<= 2 * 2^14) are exact. Needs only the Y tiles (no VNNI packing). Blocks of 2 x 4 rows
 * keep 8 partial-sum registers across the chunk; one horizontal sum per chunk.
 */
#include "xcorr.h"

#if defined(XE_HAVE_AVX2)
#include <immintrin.h>

#define XE_AVX2_TARGET __attribute__((target("avx2")))

static inline XE_AVX2_TARGET int32_t hsum(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

static inline XE_AVX2_TARGET __m256i widen(const int8_t *p)
{
    return _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)p));
}

XE_AVX2_TARGET void xe_kernel_avx2(const xe_plan *p, xe_work *w, int nt, int sp0, int sp1)
{
    const size_t blk = xe_block_bytes(p);
    for (int sp = sp0; sp < sp1; sp++) {
        for (int sub = 0; sub < 4; sub++) {
            int I, M;
            int32_t *C;
            if (!xe_sub_block(p, w->acc, sp, sub, &I, &M, &C))
                continue;
            const int8_t *x = w->a + I * blk, *y = w->a + M * blk;
            for (int m0 = 0; m0 < 16; m0 += 2)
                for (int n0 = 0; n0 < 16; n0 += 4) {
                    __m256i acc[2][4];
                    for (int i = 0; i < 2; i++)
                        for (int j = 0; j < 4; j++)
                            acc[i][j] = _mm256_setzero_si256();
                    for (int t = 0; t < nt; t++)
                        for (int kk = 0; kk < XE_KSTEP; kk += 16) {
                            const size_t o = (size_t)t * XE_TILE_BYTES + kk;
                            const __m256i x0 = widen(x + o + XE_KSTEP * m0);
                            const __m256i x1 = widen(x + o + XE_KSTEP * (m0 + 1));
                            for (int j = 0; j < 4; j++) {
                                const __m256i yj = widen(y + o + XE_KSTEP * (n0 + j));
                                acc[0][j] = _mm256_add_epi32(acc[0][j], _mm256_madd_epi16(x0, yj));
                                acc[1][j] = _mm256_add_epi32(acc[1][j], _mm256_madd_epi16(x1, yj));
                            }
                        }
                    for (int i = 0; i < 2; i++)
                        for (int j = 0; j < 4; j++)
                            C[16 * (m0 + i) + n0 + j] += hsum(acc[i][j]);
                }
        }
    }
}

/* Register-resident loop of the AVX2 path's instruction pair (vpmaddwd on sign-extended int16,
 * then vpaddd: 16 int8-valued MACs), 6 independent chains in ymm4-15 (asm, so nothing is
 * spilled or hoisted). Returns seconds. */
#define XE_MA(t, c) "vpmaddwd %[b], %[a], %%ymm" #t "\n\tvpaddd %%ymm" #t ", %%ymm" #c \
    ", %%ymm" #c "\n\t"
XE_AVX2_TARGET double xe_avx2_peak_loop(long iters)
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

#else
typedef int xe_avx2_not_compiled;  /* ISO C forbids an empty translation unit */
#endif
