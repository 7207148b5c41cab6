/* The "amx_emulated" path: kern_amx.c, the AMX kernel's own source (and peak_amx.c, its peak
 * loop), compiled a second time over the software tiles of amx_emu.h (plain C, Intel's
 * definitions), so that the AMX path (its tile configuration, loads, tdpbssd and stores, fed
 * by the real AVX-512 layout and VNNI packing) is checked bit for bit against the int64
 * reference on CPUs without AMX. Slow: the dispatcher never picks it by itself (dispatch.c,
 * backends/native.py).
 */
#define XE_AMX_EMULATE 1
#include "kern_amx.c"
#include "peak_amx.c"

#if defined(XE_HAVE_AMX_EMU)
int xe_amx_emu_fault(char *msg, size_t n) { return xe_amx_emu_take_fault(msg, n); }

int xe_amx_emu_tdpbssd_test(const uint8_t cfg[64], int load_config, int dst, int src1, int src2,
                            int32_t *c, const int8_t *a, const int8_t *b, char *msg, size_t n)
{
    if (load_config)
        _tile_loadconfig(cfg);
    _tile_loadd(dst, c, 64);
    _tile_loadd(src1, a, 64);
    _tile_loadd(src2, b, 64);
    _tile_dpbssd(dst, src1, src2);
    _tile_stored(dst, c, 64);
    _tile_release();
    return xe_amx_emu_take_fault(msg, n);
}
#endif
