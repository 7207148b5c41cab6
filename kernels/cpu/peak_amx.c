/* The AMX-INT8 peak loop (peak.c runs it): tdpbssd on tiles held in registers. Compiled for
 * real AMX, and a second time over the emulated tiles by kern_amx_emu.c (a check of this code
 * there, not a peak). */
#include "amx_target.h"

#if defined(XE_AMX_COMPILED)
/* Register-resident loop (no memory traffic): 4 independent accumulators, the AMX-INT8
 * ceiling of one core, in seconds. */
XE_AMX_TARGET double xe_amx_peak_loop(long iters)
{
    static const int8_t ones[XE_TILE_BYTES] = {1};
    int32_t sink[XE_ACC_INTS];
    xe_amx_tile_config();
    _tile_loadd(4, ones, 64);
    _tile_loadd(5, ones, 64);
    _tile_loadd(6, ones, 64);
    _tile_loadd(7, ones, 64);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    const double t0 = xe_now();
    for (long i = 0; i < iters; i++) {
        _tile_dpbssd(0, 4, 6);
        _tile_dpbssd(1, 4, 7);
        _tile_dpbssd(2, 5, 6);
        _tile_dpbssd(3, 5, 7);
    }
    _tile_stored(0, sink, 64);
    const double t1 = xe_now();
    xe_amx_tile_release();
    __asm__ volatile("" : : "r"(sink) : "memory");
    return t1 - t0;
}
#else
typedef int xe_amx_peak_not_compiled;  /* ISO C forbids an empty translation unit */
#endif
