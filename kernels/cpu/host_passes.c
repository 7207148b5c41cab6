/* Host-side passes over samples that the Python package runs outside the correlator (one
 * implementation each, releasing the GIL in module.c):
 *  - the SampleLayout gather (xengine_block/sample_layout.py, gather()): any input layout into
 *    any two-part output layout, e.g. the cpu backend's float32 scratch or the NPU's int8
 *    device buffers; ci4 unpacked and ci16 narrowed to int8 on the way; or into packed ci4
 *    bytes (an NPU build that takes ci4), values checked to fit -8..7;
 *  - the ci4 frame unpacking (xengine_block/frames.py, unpack_frames()).
 */
#include "native.h"

static inline int16_t le16(const uint8_t *q) { return (int16_t)(q[0] | (q[1] << 8)); }

/* A ci16 value narrowed to int8, the first one outside -128..127 noted in *bad. */
static inline int narrow(int v, int *nbad, int *bad)
{
    if ((v < -128 || v > 127) && !*nbad) {
        *nbad = 1;
        *bad = v;
    }
    return (int8_t)v;
}

/* One function per output element type T: the channel, stream and spectrum loops with the
 * encoding's read of (re, im) inside. */
#define GATHER_FN(NAME, T)                                                                  \
    static int NAME(const uint8_t *src, const int64_t *rs, long nspec, const int64_t *soff,  \
                    int nstream, int64_t scs, int64_t sim, int enc, int re_low, T *dst,      \
                    const int64_t *rd, const int64_t *doff, int64_t dcs, int64_t dim,        \
                    int nchan, int *bad)                                                     \
    {                                                                                        \
        int nbad = 0;                                                                        \
        for (int c = 0; c < nchan; c++)                                                      \
            for (int s = 0; s < nstream; s++) {                                              \
                const uint8_t *in = src + soff[s] + c * scs;                                 \
                T *o = dst + doff[s] + c * dcs;                                              \
                for (long d = 0; d < nspec; d++) {                                           \
                    const uint8_t *q = in + rs[d];                                           \
                    int re, im;                                                              \
                    if (enc == XE_CI8) {                                                     \
                        re = (int8_t)q[0];                                                   \
                        im = (int8_t)q[sim];                                                 \
                    } else if (enc == XE_CI4) {                                              \
                        const int hi = xe_nib_hi(q[0]), lo = xe_nib_lo(q[0]);                \
                        re = re_low ? lo : hi;                                               \
                        im = re_low ? hi : lo;                                               \
                    } else {                                                                 \
                        re = narrow(le16(q), &nbad, bad);                                    \
                        im = narrow(le16(q + sim), &nbad, bad);                              \
                    }                                                                        \
                    o[rd[d]] = (T)re;                                                        \
                    o[rd[d] + dim] = (T)im;                                                  \
                }                                                                            \
            }                                                                                \
        return nbad;                                                                         \
    }

GATHER_FN(gather_i8, int8_t)
GATHER_FN(gather_i16, int16_t)
GATHER_FN(gather_i32, int32_t)
GATHER_FN(gather_f32, float)
GATHER_FN(gather_f64, double)

/* The same loops into one ci4 byte per sample, the real part in the low nibble if out_re_low:
 * ci4 in either order is repacked; ci8 and ci16 values must fit -8..7, the first that does
 * not noted in *bad (every sample is still written, its nibbles truncated). */
static int gather_ci4(const uint8_t *src, const int64_t *rs, long nspec, const int64_t *soff,
                      int nstream, int64_t scs, int64_t sim, int enc, int re_low, int8_t *dst,
                      const int64_t *rd, const int64_t *doff, int64_t dcs, int nchan,
                      int out_re_low, int *bad)
{
    int nbad = 0;
    for (int c = 0; c < nchan; c++)
        for (int s = 0; s < nstream; s++) {
            const uint8_t *in = src + soff[s] + c * scs;
            int8_t *o = dst + doff[s] + c * dcs;
            for (long d = 0; d < nspec; d++) {
                const uint8_t *q = in + rs[d];
                int re, im;
                if (enc == XE_CI4) {
                    const int hi = xe_nib_hi(q[0]), lo = xe_nib_lo(q[0]);
                    re = re_low ? lo : hi;
                    im = re_low ? hi : lo;
                } else {
                    re = enc == XE_CI8 ? (int8_t)q[0] : le16(q);
                    im = enc == XE_CI8 ? (int8_t)q[sim] : le16(q + sim);
                    if ((re < -8 || re > 7 || im < -8 || im > 7) && !nbad) {
                        nbad = 1;
                        *bad = (re < -8 || re > 7) ? re : im;
                    }
                }
                const int high = out_re_low ? im : re, low = out_re_low ? re : im;
                o[rd[d]] = (int8_t)(((high & 15) << 4) | (low & 15));
            }
        }
    return nbad;
}

int xe_gather(const uint8_t *src, const int64_t *rs, long nspec, const int64_t *soff,
              int nstream, int64_t scs, int64_t sim, int enc, int re_low, void *dst,
              int out_type, const int64_t *rd, const int64_t *doff, int64_t dcs, int64_t dim,
              int nchan, int *bad)
{
#define GATHER_CALL(FN) FN(src, rs, nspec, soff, nstream, scs, sim, enc, re_low, dst, rd, doff, \
                           dcs, dim, nchan, bad)
    switch (out_type) {
    case XE_OUT_CI4_RE_HIGH:
    case XE_OUT_CI4_RE_LOW:
        return gather_ci4(src, rs, nspec, soff, nstream, scs, sim, enc, re_low, dst, rd, doff,
                          dcs, nchan, out_type == XE_OUT_CI4_RE_LOW, bad);
    case XE_OUT_I8: return GATHER_CALL(gather_i8);
    case XE_OUT_I16: return GATHER_CALL(gather_i16);
    case XE_OUT_I32: return GATHER_CALL(gather_i32);
    case XE_OUT_F32: return GATHER_CALL(gather_f32);
    default: return GATHER_CALL(gather_f64);
    }
#undef GATHER_CALL
}

/* Two's-complement nibbles to int8 ((n ^ 8) - 8): 16 bytes (two rows) at a time with SSE2
 * (every x86-64 has it), the high and the low nibbles of the pair of rows interleaved back into
 * rows by 64-bit unpacks; elsewhere, and for an odd last row, byte by byte. */
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

void xe_unpack_ci4_rows(const uint8_t *restrict src, long nrow, int high_first,
                        int8_t *restrict out)
{
    long m = 0;
#if defined(__SSE2__)
    const __m128i mask = _mm_set1_epi8(15), eight = _mm_set1_epi8(8);
    for (; m + 2 <= nrow; m += 2, src += 16, out += 32) {
        const __m128i v = _mm_loadu_si128((const __m128i *)src);
        const __m128i hi = _mm_sub_epi8(_mm_xor_si128(_mm_and_si128(_mm_srli_epi16(v, 4), mask),
                                                      eight), eight);
        const __m128i lo = _mm_sub_epi8(_mm_xor_si128(_mm_and_si128(v, mask), eight), eight);
        const __m128i a = high_first ? hi : lo, b = high_first ? lo : hi;
        _mm_storeu_si128((__m128i *)out, _mm_unpacklo_epi64(a, b));
        _mm_storeu_si128((__m128i *)(out + 16), _mm_unpackhi_epi64(a, b));
    }
#endif
    for (; m < nrow; m++, src += 8, out += 16)
        for (int i = 0; i < 8; i++) {
            out[high_first ? i : i + 8] = xe_nib_hi(src[i]);
            out[high_first ? i + 8 : i] = xe_nib_lo(src[i]);
        }
}

void xe_place_pair(const int32_t *restrict out, long per_chan, long nchan,
                   const int64_t *re_pos, const int64_t *im_pos, const int64_t *dst, long n,
                   int32_t *restrict tri, long nbl)
{
    for (long c = 0; c < nchan; c++) {
        const int32_t *o = out + c * per_chan;
        int32_t *t = tri + c * nbl * 2;
        for (long k = 0; k < n; k++) {
            t[2 * dst[k]] = o[re_pos[k]];
            t[2 * dst[k] + 1] = o[im_pos[k]];
        }
    }
}
