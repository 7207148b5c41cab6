/* The UVH5 writer's row pass (xengine_block/outputs/uvh5.py, DumpRows): a dump's packed
 * triangle tri[C][nbaseline][2] (int32 or int64) gathered into visdata rows
 * vis[nbls][C][P][2] (int32, or float64 where the writer's bound needs it),
 * vis[b][c][p] = tri[c][index[b][p]], its imaginary part negated where flip[b][p]; and the
 * rows' flags and nsamples from the valid spectra per baseline. A copy and a negation: exact
 * for every value the writer stores (int32 below its bound, float64 below 2^53).
 * Plain C on purpose: the gather defeats SIMD; the loop order and restrict pointers (the
 * extension is built with -fno-strict-aliasing, which reloaded the indices after every store)
 * carry its speed. Rows are made in the caller's order (order[n]: the row made n-th; NULL:
 * file order), each row whole (every channel), so that it is written as whole lines; the
 * writer's order is the triangle's (its rows by their first triangle index), in which the
 * rows made one after another read the next pairs of the same lines of the triangle (two
 * lines per channel, each line serving four rows in turn): in file order each row read two
 * lines of each channel that the rows after it did not, and the pass took about twice as
 * long (a dump of 256 antennas x 24 channels: 7.0 against 3.0 ms with the triangle in cache,
 * 8.3 against 5.0 ms as reprocessing writes it). */
#include "native.h"

/* -x in x's type: integers through int64 and back (wrapping modulo 2^32 for int32, as the
 * writer's int32 rows of -2^31 would), floats as they are. */
#define NEG(x) _Generic((x), double: -(x), default: (__typeof__(x))(-(int64_t)(x)))

/* vis rows of element type TV from tri of element type TT; NPOL the polarisations per row
 * (P, or the constant 4 of every UVH5 file we write, which lets the compiler unroll the inner
 * loop). Each variant a function of its own (noinline), so that one loop's registers are not
 * spilled for another's. */
#define ROWS_FN(NAME, TT, TV, NPOL_ARG, NPOL)                                                \
    static __attribute__((noinline)) void NAME(                                              \
        const TT *restrict tri, int64_t C, int64_t nbl, const int64_t *restrict index,       \
        const uint8_t *restrict flip, const int64_t *restrict order, int64_t nbls,           \
        int64_t NPOL_ARG, TV *restrict vis)                                                  \
    {                                                                                        \
        (void)NPOL_ARG;                                                                      \
        for (int64_t n = 0; n < nbls; n++) {                                                 \
            const int64_t b = order ? order[n] : n;                                          \
            const int64_t *restrict k = index + b * (NPOL);                                  \
            const uint8_t *restrict f = flip + b * (NPOL);                                   \
            TV *restrict o = vis + b * C * (NPOL) * 2;                                       \
            for (int64_t c = 0; c < C; c++, o += 2 * (NPOL)) {                              \
                const TT *restrict t = tri + c * nbl * 2;                                    \
                for (int64_t p = 0; p < (NPOL); p++) {                                       \
                    const TV im = (TV)t[2 * k[p] + 1];                                       \
                    o[2 * p] = (TV)t[2 * k[p]];                                              \
                    o[2 * p + 1] = f[p] ? NEG(im) : im;                                      \
                }                                                                            \
            }                                                                                \
        }                                                                                    \
    }

ROWS_FN(rows_i32_i32_p4, int32_t, int32_t, npol, 4)
ROWS_FN(rows_i32_i32, int32_t, int32_t, npol, npol)
ROWS_FN(rows_i64_i32_p4, int64_t, int32_t, npol, 4)
ROWS_FN(rows_i64_i32, int64_t, int32_t, npol, npol)
ROWS_FN(rows_i32_f64, int32_t, double, npol, npol)
ROWS_FN(rows_i64_f64, int64_t, double, npol, npol)
ROWS_FN(rows_f64_f64, double, double, npol, npol)

typedef void (*rows_fn)(const void *, int64_t, int64_t, const int64_t *, const uint8_t *,
                        const int64_t *, int64_t, int64_t, void *);

void xe_uvh5_rows(const void *tri, int tri_type, int64_t C, int64_t nbl, const int64_t *index,
                  const uint8_t *flip, const int64_t *order, int64_t nbls, int64_t P, void *vis,
                  int vis_type)
{
    /* [vis int32, vis float64][tri int32, int64, float64][P == 4]; NULL: not supported (the
     * caller checks the types first) */
    static const rows_fn table[2][3][2] = {
        {{(rows_fn)rows_i32_i32, (rows_fn)rows_i32_i32_p4},
         {(rows_fn)rows_i64_i32, (rows_fn)rows_i64_i32_p4}, {NULL, NULL}},
        {{(rows_fn)rows_i32_f64, (rows_fn)rows_i32_f64},
         {(rows_fn)rows_i64_f64, (rows_fn)rows_i64_f64},
         {(rows_fn)rows_f64_f64, (rows_fn)rows_f64_f64}},
    };
    const rows_fn fn = table[vis_type == XE_F64][tri_type][P == 4];
    if (fn)
        fn(tri, C, nbl, index, flip, order, nbls, P, vis);
}

void xe_uvh5_counts(const int64_t *valid, int per_chan, int64_t C, int64_t nbl,
                    const int64_t *index, int64_t nbls, int64_t P, double nspectra,
                    uint8_t *flags, float *nsamples)
{
    for (int64_t b = 0; b < nbls; b++)
        for (int64_t c = 0; c < C; c++) {
            const int64_t *v = valid + (per_chan ? c * nbl : 0);
            for (int64_t p = 0; p < P; p++) {
                const int64_t n = v[index[b * P + p]];
                const int64_t o = (b * C + c) * P + p;
                flags[o] = n == 0;
                nsamples[o] = (float)((double)n / nspectra);
            }
        }
}
