/* AMX-INT8 kernel: the NPU kernel's structure on Sapphire Rapids tiles.
 *
 * Eight 16 x 64-byte tile registers: 0..3 hold the int32 accumulators of one super pair
 * (16-stream super blocks J <= L, i.e. 2 x 2 blocks of 8 streams), 4..5 the Y tiles (A layout)
 * of blocks 2J, 2J+1 and 6..7 the VNNI-packed Y tiles of blocks 2L, 2L+1. Each K-step of 64
 * spectra is 4 tile loads and 4 tdpbssd (signed x signed int8, summed into int32), every MAC of
 * which is a useful complex-product term (xcorr.h): 1 load per tdpbssd, like a 2 x 2 blocked
 * GEMM. The sub-tile below the diagonal of a diagonal super pair is skipped.
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

XE_AMX_TARGET void xe_kernel_amx(const xe_plan *p, xe_work *w, int nt, int sp0, int sp1)
{
    const size_t blk = xe_block_bytes(p);
    for (int sp = sp0; sp < sp1; sp++) {
        const int J = p->sp_j[sp], L = p->sp_l[sp];
        int32_t *acc = w->acc + (size_t)sp * 4 * XE_ACC_INTS;
        const int8_t *a0 = w->a + (size_t)(2 * J) * blk, *a1 = a0 + blk;
        const int8_t *b0 = w->b + (size_t)(2 * L) * blk, *b1 = b0 + blk;
        _tile_loadd(0, acc, 64);
        _tile_loadd(1, acc + XE_ACC_INTS, 64);
        _tile_loadd(2, acc + 2 * XE_ACC_INTS, 64);
        _tile_loadd(3, acc + 3 * XE_ACC_INTS, 64);
        if (J != L) {
            for (int t = 0; t < nt; t++) {
                const size_t o = (size_t)t * XE_TILE_BYTES;
                _tile_loadd(4, a0 + o, 64);
                _tile_loadd(6, b0 + o, 64);
                _tile_dpbssd(0, 4, 6);
                _tile_loadd(7, b1 + o, 64);
                _tile_dpbssd(1, 4, 7);
                _tile_loadd(5, a1 + o, 64);
                _tile_dpbssd(2, 5, 6);
                _tile_dpbssd(3, 5, 7);
            }
        } else {
            for (int t = 0; t < nt; t++) {
                const size_t o = (size_t)t * XE_TILE_BYTES;
                _tile_loadd(4, a0 + o, 64);
                _tile_loadd(6, b0 + o, 64);
                _tile_dpbssd(0, 4, 6);
                _tile_loadd(7, b1 + o, 64);
                _tile_dpbssd(1, 4, 7);
                _tile_loadd(5, a1 + o, 64);
                _tile_dpbssd(3, 5, 7);
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
