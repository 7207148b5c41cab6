/* Portable C: the scalar kernel (the reference for the SIMD kernels and the last fallback) and
 * the frame-group copies that every path without AVX-512 uses to build the Y tiles. */
#include "xcorr.h"

void xe_copy_groups_c(const int8_t *src, int8_t *re_row, long d0, long n)
{
    for (long u = 0; u < n; u++)
        xe_copy_group(src + 16 * u, re_row, d0 + u);
}

void xe_copy_ci4_hi_c(const int8_t *src, int8_t *re_row, long d0, long n)
{
    for (long u = 0; u < n; u++)
        xe_copy_group_ci4(src + 8 * u, re_row, d0 + u, 0);
}

void xe_copy_ci4_lo_c(const int8_t *src, int8_t *re_row, long d0, long n)
{
    for (long u = 0; u < n; u++)
        xe_copy_group_ci4(src + 8 * u, re_row, d0 + u, 1);
}

/* C[I, M] += Y_I Y_M^T, one int32 dot product of Y rows at a time. */
static void scalar_sub(const xe_plan *p, const xe_work *w, int nt, int I, int M, int32_t *C)
{
    const size_t blk = xe_block_bytes(p);
    for (int t = 0; t < nt; t++) {
        const int8_t *x = w->a + I * blk + (size_t)t * XE_TILE_BYTES;
        const int8_t *y = w->a + M * blk + (size_t)t * XE_TILE_BYTES;
        for (int m = 0; m < 16; m++)
            for (int n = 0; n < 16; n++) {
                int32_t s = 0;
                for (int k = 0; k < XE_KSTEP; k++)
                    s += (int32_t)x[m * XE_KSTEP + k] * y[n * XE_KSTEP + k];
                C[m * 16 + n] += s;
            }
    }
}

void xe_kernel_scalar(const xe_plan *p, xe_work *w, int nt, int sp0, int sp1)
{
    xe_each_sub_block(p, w, nt, sp0, sp1, scalar_sub);
}
