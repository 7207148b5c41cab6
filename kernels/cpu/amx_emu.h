/* Software AMX-TILE / AMX-INT8: the intrinsics kern_amx.c uses, in plain C, so that the AMX
 * kernel's own source runs (bit for bit) on CPUs without AMX. kern_amx_emu.c compiles
 * kern_amx.c a second time with XE_AMX_EMULATE defined, which includes this header instead of
 * <immintrin.h>; the kernel text is the same, only the instructions underneath differ.
 *
 * Semantics follow Intel's definitions (read for this file, not guessed):
 *  - LDTILECFG (SDM vol. 2, "LDTILECFG - Load Tile Configuration", as on felixcloutier.com/x86/
 *    ldtilecfg, and the intrinsics guide's _tile_loadconfig): the 64-byte memory layout
 *    (palette, start_row, reserved 2-15, colsb[8] as 16-bit words at 16-31, reserved 32-47,
 *    rows[8] at 48-55, reserved 56-63); palette 0 is the init state (no configuration, tiles
 *    zero); palette 1 is 8 tiles of at most 16 rows x 64 bytes; an invalid configuration is
 *    #GP. The per-tile checks (rows <= 16, colsb <= 64, rows == 0 exactly when colsb == 0, i.e.
 *    an unused tile) are those of the Bochs emulator (bochs/cpu/avx/amx.cc, configure_tiles).
 *  - TILELOADD / TILESTORED / TILEZERO / TILERELEASE (SDM entries; intrinsics guide
 *    _tile_loadd pseudo-code): a load zeroes the tile, then reads rows(t) rows of colsb(t)
 *    bytes from base + r * stride ("write_row_and_zero", "zero_upper_rows"); a store writes
 *    rows(t) x colsb(t) bytes; TILEZERO clears the whole tile; TILERELEASE returns to the
 *    init state. Using an invalid tile (not configured, or configured empty) is #UD.
 *  - TDPBSSD (intrinsics guide, _tile_dpbssd / _tile_dpbsud "Operation", and the SDM entry
 *    "TDPBSSD/TDPBSUD/TDPBUSD/TDPBUUD"):
 *        DEFINE DPBD(c, x, y) = c + sum_{i<4} SignExtend32(x.byte[i]) * SignExtend32(y.byte[i])
 *        FOR m < dst.rows: tmp := dst.row[m]
 *            FOR k < a.colsb / 4: FOR n < dst.colsb / 4:
 *                tmp.dword[n] := DPBD(tmp.dword[n], a.row[m].dword[k], b.row[k].dword[n])
 *            write_row_and_zero(dst, m, tmp, dst.colsb)
 *        zero_upper_rows(dst, dst.rows)
 *    i.e. C[m][n] += sum_k4 sum_{i<4} sext(A[m][4 k4 + i]) * sext(B[k4][4 n + i]), int32 adds
 *    wrapping modulo 2^32. Its #UD conditions (exception class AMX-E4, as listed in Bochs'
 *    check_tiles): the three tiles distinct and valid, every colsb a multiple of 4,
 *    dst.rows == a.rows, dst.colsb == b.colsb, a.colsb / 4 == b.rows, N and K <= 16.
 *
 * Where the hardware raises #GP/#UD (SIGILL/SIGSEGV), the emulation records the first fault
 * of the calling thread and makes the offending instruction a no-op; xe_amx_emu_take_fault()
 * hands the message to the caller, which raises it as a Python exception. Tile state is per
 * thread (_Thread_local), as the hardware's is per logical CPU context. Dwords are read and
 * written in the host's byte order: this file is only built for x86-64 (little-endian).
 *
 * Include in one translation unit only (the state is static).
 */
#ifndef XE_AMX_EMU_H
#define XE_AMX_EMU_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define XE_EMU_NTILE 8    /* palette 1: max_names */
#define XE_EMU_ROWS 16    /* palette 1: max_rows */
#define XE_EMU_COLSB 64   /* palette 1: bytes_per_row */

typedef struct {
    int configured;                /* TILES_CONFIGURED (palette 1 loaded) */
    uint8_t start_row;
    uint8_t rows[XE_EMU_NTILE];
    uint16_t colsb[XE_EMU_NTILE];
    uint8_t tile[XE_EMU_NTILE][XE_EMU_ROWS][XE_EMU_COLSB];
    char fault[192];               /* the first fault since the last take; "" if none */
} xe_amx_emu_state;

static _Thread_local xe_amx_emu_state xe_emu;

static void xe_emu_fault(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void xe_emu_fault(const char *fmt, ...)
{
    if (xe_emu.fault[0])
        return;  /* keep the first: later faults are usually its consequences */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(xe_emu.fault, sizeof xe_emu.fault, fmt, ap);
    va_end(ap);
}

/* Copy the calling thread's first fault into msg (if any) and clear it; 1 if there was one. */
static inline int xe_amx_emu_take_fault(char *msg, size_t n)
{
    if (!xe_emu.fault[0])
        return 0;
    snprintf(msg, n, "%s", xe_emu.fault);
    xe_emu.fault[0] = 0;
    return 1;
}

static inline void xe_emu_init_state(void)
{
    xe_emu.configured = 0;
    xe_emu.start_row = 0;
    memset(xe_emu.rows, 0, sizeof xe_emu.rows);
    memset(xe_emu.colsb, 0, sizeof xe_emu.colsb);
    memset(xe_emu.tile, 0, sizeof xe_emu.tile);
}

/* LDTILECFG m512. */
static inline void xe_emu_ldtilecfg(const void *mem)
{
    uint8_t b[64];
    memcpy(b, mem, 64);
    if (b[0] == 0) {
        xe_emu_init_state();
        return;
    }
    if (b[0] != 1) {
        xe_emu_fault("ldtilecfg: palette %d is not supported (0 or 1) (#GP)", b[0]);
        return;
    }
    for (int i = 2; i < 64; i++)
        if ((i < 16 || (i >= 32 && i < 48) || i >= 56) && b[i]) {
            xe_emu_fault("ldtilecfg: reserved byte %d is %d, must be zero (#GP)", i, b[i]);
            return;
        }
    uint8_t rows[XE_EMU_NTILE];
    uint16_t colsb[XE_EMU_NTILE];
    for (int t = 0; t < XE_EMU_NTILE; t++) {
        colsb[t] = (uint16_t)(b[16 + 2 * t] | b[17 + 2 * t] << 8);
        rows[t] = b[48 + t];
        if (rows[t] > XE_EMU_ROWS || colsb[t] > XE_EMU_COLSB || (rows[t] == 0) != (colsb[t] == 0)) {
            xe_emu_fault("ldtilecfg: tile %d of %d rows x %d bytes is invalid (at most %d x %d, "
                         "or 0 x 0 if unused) (#GP)", t, rows[t], colsb[t], XE_EMU_ROWS,
                         XE_EMU_COLSB);
            return;
        }
    }
    xe_emu_init_state();  /* a successful load zeroes all tile data */
    xe_emu.configured = 1;
    xe_emu.start_row = b[1];
    memcpy(xe_emu.rows, rows, sizeof rows);
    memcpy(xe_emu.colsb, colsb, sizeof colsb);
}

/* 1 if tile t may be used by instruction `op`, else record why (#UD) and return 0. */
static inline int xe_emu_valid(const char *op, int t)
{
    if (t < 0 || t >= XE_EMU_NTILE) {
        xe_emu_fault("%s: tmm%d does not exist (palette 1 has %d tiles) (#UD)", op, t,
                     XE_EMU_NTILE);
        return 0;
    }
    if (!xe_emu.configured) {
        xe_emu_fault("%s: tmm%d used with no tile configuration loaded (#UD)", op, t);
        return 0;
    }
    if (xe_emu.rows[t] == 0) {
        xe_emu_fault("%s: tmm%d is not configured (0 rows x 0 bytes in the loaded "
                     "configuration) (#UD)", op, t);
        return 0;
    }
    return 1;
}

/* TILELOADD tmm, [base + stride * row]. */
static inline void xe_emu_tileloadd(int t, const void *base, long stride)
{
    if (!xe_emu_valid("tileloadd", t))
        return;
    int r = xe_emu.start_row;
    if (r == 0)
        memset(xe_emu.tile[t], 0, sizeof xe_emu.tile[t]);
    for (; r < xe_emu.rows[t]; r++) {
        memset(xe_emu.tile[t][r], 0, XE_EMU_COLSB);  /* write_row_and_zero */
        memcpy(xe_emu.tile[t][r], (const uint8_t *)base + (long)r * stride, xe_emu.colsb[t]);
    }
    xe_emu.start_row = 0;
}

/* TILESTORED [base + stride * row], tmm. */
static inline void xe_emu_tilestored(int t, void *base, long stride)
{
    if (!xe_emu_valid("tilestored", t))
        return;
    for (int r = xe_emu.start_row; r < xe_emu.rows[t]; r++)
        memcpy((uint8_t *)base + (long)r * stride, xe_emu.tile[t][r], xe_emu.colsb[t]);
    xe_emu.start_row = 0;
}

/* TILEZERO tmm. */
static inline void xe_emu_tilezero(int t)
{
    if (!xe_emu_valid("tilezero", t))
        return;
    memset(xe_emu.tile[t], 0, sizeof xe_emu.tile[t]);
    xe_emu.start_row = 0;
}

static inline int32_t xe_emu_dword(const uint8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* TDPBSSD tmm_dst, tmm_a, tmm_b (see the definition at the top). */
static inline void xe_emu_tdpbssd(int d, int a, int b)
{
    if (d == a || d == b || a == b) {
        xe_emu_fault("tdpbssd: tmm%d, tmm%d, tmm%d must be three different tiles (#UD)", d, a, b);
        return;
    }
    if (!xe_emu_valid("tdpbssd", d) || !xe_emu_valid("tdpbssd", a)
        || !xe_emu_valid("tdpbssd", b))
        return;
    const int M = xe_emu.rows[d], N = xe_emu.colsb[d] / 4, K = xe_emu.colsb[a] / 4;
    if (xe_emu.colsb[d] % 4 || xe_emu.colsb[a] % 4 || xe_emu.colsb[b] % 4
        || xe_emu.rows[a] != M || xe_emu.colsb[b] != xe_emu.colsb[d] || xe_emu.rows[b] != K
        || N > 16 || K > 16) {
        xe_emu_fault("tdpbssd: shapes do not multiply: tmm%d %d x %d += tmm%d %d x %d . "
                     "tmm%d %d x %d (rows x bytes) (#UD)", d, M, xe_emu.colsb[d], a,
                     xe_emu.rows[a], xe_emu.colsb[a], b, xe_emu.rows[b], xe_emu.colsb[b]);
        return;
    }
    for (int m = 0; m < M; m++) {
        uint32_t tmp[16];  /* unsigned: int32 adds wrap modulo 2^32, as the hardware's do */
        for (int n = 0; n < N; n++)
            tmp[n] = (uint32_t)xe_emu_dword(&xe_emu.tile[d][m][4 * n]);
        for (int k = 0; k < K; k++) {
            const int8_t *x = (const int8_t *)&xe_emu.tile[a][m][4 * k];  /* SignExtend32 */
            for (int n = 0; n < N; n++) {
                const int8_t *y = (const int8_t *)&xe_emu.tile[b][k][4 * n];
                const int32_t dot = (int32_t)x[0] * y[0] + (int32_t)x[1] * y[1]
                    + (int32_t)x[2] * y[2] + (int32_t)x[3] * y[3];  /* |dot| <= 65536 */
                tmp[n] += (uint32_t)dot;
            }
        }
        memset(xe_emu.tile[d][m], 0, XE_EMU_COLSB);  /* write_row_and_zero */
        memcpy(xe_emu.tile[d][m], tmp, 4 * (size_t)N);
    }
    for (int m = M; m < XE_EMU_ROWS; m++)  /* zero_upper_rows */
        memset(xe_emu.tile[d][m], 0, XE_EMU_COLSB);
    xe_emu.start_row = 0;
}

/* The intrinsics, as <immintrin.h> spells them (tile numbers are plain ints here). */
#define _tile_loadconfig(cfg) xe_emu_ldtilecfg(cfg)
#define _tile_release() xe_emu_init_state()
#define _tile_zero(t) xe_emu_tilezero(t)
#define _tile_loadd(t, base, stride) xe_emu_tileloadd((t), (base), (long)(stride))
#define _tile_stored(t, base, stride) xe_emu_tilestored((t), (base), (long)(stride))
#define _tile_dpbssd(d, a, b) xe_emu_tdpbssd((d), (a), (b))

#endif
