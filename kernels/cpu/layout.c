/* The layout pass of correlate_layout: samples in any layout (xe_layout, the C form of
 * xengine_block/sample_layout.py's SampleLayout) -> the Y tiles of every 8-stream block, for
 * one unit (channel, chunk of spectra), shared by every path (scalar, avx2, avx512vnni, amx,
 * amx_emulated: the kernels and the VNNI packing after it differ, this does not).
 *
 * The address of a sample splits into a part per spectrum (frame, time block, spectrum in the
 * block, channel) and a part per stream (its offset), so the unit first lists where each of
 * its spectra starts (row_starts) and every stream reads at its offset from there: one pass
 * over the input, no intermediate copy, no numpy transpose. Where the streams of a group lie
 * side by side (ci8 (re, im) pairs of 16 streams, ci4 bytes of 32: Bifrost's [time][freq]
 * [station][pol], the LWA (time, chan, stand*pol) rings) the AVX2 paths transpose 16 spectra
 * x 32 bytes in registers (kern_avx2.c), a K-step (64 spectra) of one group after the other,
 * so that the Y rows are written as whole lines and each input line, shared by two groups,
 * is read from L1 the second time (the next K-step's lines of those groups are prefetched);
 * everything else (other stream orders, a GUPPI-like [ant][chan][time][pol] with its time
 * axis inside, ci16, the spectra past a multiple of 16) is read sample by sample here, one
 * stream's spectra after another (each stream's run of the unit is contiguous there). ci16 is narrowed to int8: a value outside
 * -128..127 is recorded (xe_work.bad) and the call fails naming it.
 */
#include <string.h>

#include "xcorr.h"

/* Where spectrum t0 + d of channel c starts (stream offset 0), for d < n. */
static void row_starts(const xe_layout *L, const int8_t *data, int c, long t0, long n,
                       const int8_t **rows)
{
    long b = (t0 % L->frame_spectra) / L->time_block, u = t0 % L->time_block;
    const int8_t *frame = data + (t0 / L->frame_spectra) * L->frame_bytes
        + (int64_t)c * L->chan_stride;
    for (long d = 0; d < n; d++) {
        rows[d] = frame + b * L->block_stride + u * L->time_stride;
        if (++u == L->time_block) {
            u = 0;
            if (++b * L->time_block == L->frame_spectra) {
                b = 0;
                frame += L->frame_bytes;
            }
        }
    }
}

static inline int8_t nib_re(uint8_t v, int re_low) { return re_low ? xe_nib_lo(v) : xe_nib_hi(v); }
static inline int8_t nib_im(uint8_t v, int re_low) { return re_low ? xe_nib_hi(v) : xe_nib_lo(v); }

static inline int16_t le16(const int8_t *q)
{
    return (int16_t)((uint16_t)(uint8_t)q[0] | (uint16_t)((uint16_t)(uint8_t)q[1] << 8));
}

/* ci16 -> int8, noting the first value outside -128..127 (the call then fails). */
static inline int8_t narrow(int16_t v, xe_work *w)
{
    if ((v < -128 || v > 127) && !w->bad) {
        w->bad = 1;
        w->bad_value = v;
    }
    return (int8_t)v;
}

/* Spectra [d0, d1) of the stream at offset off into its Y rows (re_row, im_row 8 rows on). */
static void gather_stream(const xe_layout *L, const int8_t *const *rows, int64_t off,
                          int8_t *re_row, long d0, long d1, xe_work *w)
{
    int8_t *im_row = re_row + 8 * XE_KSTEP;
    const int im = L->im_offset;
    switch (L->enc) {
    case XE_CI8:
        for (long d = d0; d < d1; d++) {
            const int8_t *q = rows[d] + off;
            re_row[xe_y_spec(d)] = q[0];
            im_row[xe_y_spec(d)] = q[im];
        }
        break;
    case XE_CI4:
        for (long d = d0; d < d1; d++) {
            const uint8_t v = (uint8_t)rows[d][off];
            re_row[xe_y_spec(d)] = nib_re(v, L->re_low);
            im_row[xe_y_spec(d)] = nib_im(v, L->re_low);
        }
        break;
    default: /* XE_CI16 */
        for (long d = d0; d < d1; d++) {
            const int8_t *q = rows[d] + off;
            re_row[xe_y_spec(d)] = narrow(le16(q), w);
            im_row[xe_y_spec(d)] = narrow(le16(q + im), w);
        }
        break;
    }
}

/* Whether group g (L->group streams from g * L->group) takes the AVX2 transpose. */
static inline int simd_group(const xe_plan *p, int s)
{
    const xe_layout *L = p->lay;
    return L->simd && L->group && s % L->group == 0 && s + L->group <= p->nstream
        && L->run[s / L->group];
}

void xe_convert_layout(const xe_plan *p, xe_work *w, const int8_t *data, const xe_unit *un)
{
    const xe_layout *L = p->lay;
    const size_t blk = xe_block_bytes(p);
    const long n = un->t1 - un->t0;
    row_starts(L, data, un->c, un->t0, n, w->rows);
    if (n % XE_KSTEP)  /* past the data the last K-step reads as zeros */
        for (int i = 0; i < p->nb8; i++)
            memset(w->a + i * blk + (size_t)(n / XE_KSTEP) * XE_TILE_BYTES, 0, XE_TILE_BYTES);
    const long nsimd = L->simd ? n & ~15L : 0;
#if defined(XE_HAVE_AVX2)
    /* per K-step (64 spectra): each side-by-side group in turn, so that its Y rows are
     * written as whole lines and the next group reads the other half of the same input lines
     * from L1; the next K-step's input lines are prefetched meanwhile */
    for (long d0 = 0; d0 < nsimd; d0 += XE_KSTEP) {
        const long d1 = d0 + XE_KSTEP < nsimd ? d0 + XE_KSTEP : nsimd;
        /* the lines the side-by-side groups read in the next K-step (32 bytes a group, so
         * each group's start covers its line); only theirs: streams elsewhere (a GUPPI-like
         * layout's antennas lie megabytes apart) are gathered below, in their own order */
        for (long d = d1; d < d1 + XE_KSTEP && d < n; d++)
            for (int s = 0; s < p->nstream; s += L->group)
                if (simd_group(p, s))
                    __builtin_prefetch(w->rows[d] + L->stream_off[s], 0, 3);
        for (int s = 0; s < p->nstream; s += L->group ? L->group : p->nstream) {
            if (!simd_group(p, s))
                continue;
            if (L->enc == XE_CI8)
                xe_transpose_ci8_avx2(w->rows, L->stream_off[s], w->a, blk, s / 8, d0, d1 - d0);
            else
                xe_transpose_ci4_avx2(w->rows, L->stream_off[s], w->a, blk, s / 8, d0, d1 - d0,
                                      L->re_low);
        }
    }
#endif
    for (int s = 0; s < p->nstream; s++) {
        int8_t *re_row = w->a + (size_t)(s / 8) * blk + (size_t)(s % 8) * XE_KSTEP;
        const int in_simd = L->group && simd_group(p, s - s % L->group);
        gather_stream(L, w->rows, L->stream_off[s], re_row, in_simd ? nsimd : 0, n, w);
    }
}
