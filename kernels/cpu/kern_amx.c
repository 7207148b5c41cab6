/* AMX-INT8 kernel: the NPU kernel's structure on Sapphire Rapids tiles.
 *
 * Eight 16 x 64-byte tile registers: 0..3 hold the int32 accumulators of one super pair
 * (16-stream super blocks J <= L, i.e. 2 x 2 blocks of 8 streams), 4..5 the Y tiles (A layout)
 * of blocks 2J, 2J+1 and 6..7 the VNNI-packed Y tiles of blocks 2L, 2L+1. Each K-step of 64
 * spectra is 4 tile loads and 4 tdpbssd (signed x signed int8, summed into int32), every MAC of
 * which is a useful complex-product term (xcorr.h): 1 load per tdpbssd, like a 2 x 2 blocked
 * GEMM; the accumulators stay in tiles for the whole chunk. The sub-tile below the diagonal of
 * a diagonal super pair is skipped. Tile loads are the limit (the products' operands live in
 * L2: ~1 MB of tiles and accumulators at S = 256), so they are hidden two ways: software
 * pipelining in the K loop, and the next super pair's operands prefetched into L1.
 */
#include "amx_target.h"

#if defined(XE_AMX_COMPILED)
#include <string.h>

typedef struct {
    uint8_t palette_id;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} xe_tilecfg;

/* Palette 1, eight tiles of 16 rows x 64 bytes. A constant object: a config built on the
 * stack can be dead-store eliminated, since the compiler does not see ldtilecfg read it. */
static const xe_tilecfg TILECFG = {
    .palette_id = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

XE_AMX_TARGET void xe_amx_tile_config(void) { _tile_loadconfig(&TILECFG); }

XE_AMX_TARGET void xe_amx_tile_release(void) { _tile_release(); }

/* Prefetch into L1 the lines of one tile (16 rows of 64 bytes). */
static inline void prefetch_tile(const void *tile)
{
    for (int r = 0; r < 16; r++)
        __builtin_prefetch((const char *)tile + 64 * r, 0, 3);
}

XE_AMX_TARGET void xe_kernel_amx(const xe_plan *p, xe_work *w, int nt, int sp0, int sp1)
{
    const size_t blk = xe_block_bytes(p);
    for (int sp = sp0; sp < sp1; sp++) {
        const int J = p->sp_j[sp], L = p->sp_l[sp], diag = J == L;
        int32_t *acc = w->acc + (size_t)sp * 4 * XE_ACC_INTS;
        const int8_t *a0 = w->a + (size_t)(2 * J) * blk, *a1 = a0 + blk;
        const int8_t *b0 = w->b + (size_t)(2 * L) * blk, *b1 = b0 + blk;
        /* What the next super pair loads from L2 (its A tiles, its accumulators, its B tiles
         * where its column differs) is prefetched into L1 during this one's products, a
         * K-step's worth per K-step, so that its tile loads find L1. */
        const int nx = sp + 1 < sp1 ? sp + 1 : -1;
        const int8_t *na = nx < 0 ? NULL : w->a + (size_t)(2 * p->sp_j[nx]) * blk;
        const int8_t *nb = nx < 0 || p->sp_l[nx] == L ? NULL
            : w->b + (size_t)(2 * p->sp_l[nx]) * blk;
        const int32_t *nacc = nx < 0 ? NULL : w->acc + (size_t)nx * 4 * XE_ACC_INTS;
        _tile_loadd(0, acc, 64);
        _tile_loadd(1, acc + XE_ACC_INTS, 64);
        _tile_loadd(2, acc + 2 * XE_ACC_INTS, 64);
        _tile_loadd(3, acc + 3 * XE_ACC_INTS, 64);
        /* Software pipelined: each operand tile is reloaded for K-step t + 1 right after its
         * last product of K-step t, so that its load runs under the products that follow
         * instead of in front of the next ones. */
        _tile_loadd(4, a0, 64);
        _tile_loadd(6, b0, 64);
        _tile_loadd(7, b1, 64);
        _tile_loadd(5, a1, 64);
        for (int t = 0; t < nt; t++) {
            const size_t o = (size_t)t * XE_TILE_BYTES, o1 = o + XE_TILE_BYTES;
            const int more = t + 1 < nt;
            if (na) {
                prefetch_tile(na + o);
                prefetch_tile(na + blk + o);
            }
            if (nb) {
                prefetch_tile(nb + o);
                prefetch_tile(nb + blk + o);
            }
            if (nacc && t < 4)
                prefetch_tile(nacc + t * XE_ACC_INTS);
            _tile_dpbssd(0, 4, 6);
            _tile_dpbssd(1, 4, 7);
            if (more)
                _tile_loadd(4, a0 + o1, 64);
            if (!diag)  /* (2J + 1, 2L) of a diagonal super pair lies below the diagonal */
                _tile_dpbssd(2, 5, 6);
            if (more)
                _tile_loadd(6, b0 + o1, 64);
            _tile_dpbssd(3, 5, 7);
            if (more) {
                _tile_loadd(5, a1 + o1, 64);
                _tile_loadd(7, b1 + o1, 64);
            }
        }
        _tile_stored(0, acc, 64);
        _tile_stored(1, acc + XE_ACC_INTS, 64);
        _tile_stored(2, acc + 2 * XE_ACC_INTS, 64);
        _tile_stored(3, acc + 3 * XE_ACC_INTS, 64);
    }
}

#else
typedef int xe_amx_not_compiled;  /* ISO C forbids an empty translation unit */
#endif
