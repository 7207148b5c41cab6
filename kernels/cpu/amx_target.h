/* What the AMX sources (kern_amx.c, peak_amx.c) compile against: the real AMX intrinsics, or,
 * with XE_AMX_EMULATE defined (kern_amx_emu.c), the software tiles of amx_emu.h with every
 * exported function renamed to its _emu twin. XE_AMX_COMPILED says whether either applies. */
#ifndef XE_AMX_TARGET_H
#define XE_AMX_TARGET_H

#include "xcorr.h"

#if defined(XE_AMX_EMULATE)
#if defined(XE_HAVE_AMX_EMU)
#define XE_AMX_COMPILED 1
#include "amx_emu.h"
#define XE_AMX_TARGET
#define xe_kernel_amx xe_kernel_amx_emu
#define xe_amx_tile_config xe_amx_tile_config_emu
#define xe_amx_tile_release xe_amx_tile_release_emu
#define xe_amx_peak_loop xe_amx_peak_loop_emu
#endif
#elif defined(XE_HAVE_AMX)
#define XE_AMX_COMPILED 1
#include <immintrin.h>
#define XE_AMX_TARGET __attribute__((target("amx-tile,amx-int8")))
#endif

#endif
