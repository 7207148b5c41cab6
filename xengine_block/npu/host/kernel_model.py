"""Numpy model of the AIE2P kernel (``kernels/aie/xcorr.cc``) at the level of its
intrinsics.

The emulator calls this on the compute-tile buffers its DMAs filled, so it must read them in
the kernel's layout: A ``[N][T][2][8][8]``, B ``[M][T][2][8][8]`` int8 with 8x8
``[stream][sample]`` blocks, accumulators ``[N][M][2][8][8]`` int32. Each intrinsic is modelled
on batches of 64-lane blocks (vectorised over n, m, t):

- ``mac_8x8_8x8(A, B, acc)``: ``acc[i*8+j] += sum_k A[i*8+k] * B[k*8+j]``; ``msc`` subtracts;
- ``shuffle_t8_8x8(w)``: ``out[r*8+c] = w[c*8+r]`` (the kernel's in-register B transpose);
- ci4: ``unpack_v64int4(v)``: 32 bytes -> 64 int8 lanes, lane 2k the sign-extended low nibble
  of byte k and lane 2k + 1 its high nibble; ``shuffle_t8_64x2(a, b, hi)``: lanes 0, 2, ..., 126
  (``hi``: 1, 3, ..., 127) of a then b (the semantics and their sources are listed in
  ``kernels/aie/aie_host_emu.h``).

:func:`xcorr_kernel` forms the 8x8 block products of every (n, m, t) at once (one BLAS product
per t, exact, see :func:`_pair_products`), combines them with the kernel's mac/msc signs and
adds the T terms into the int32 accumulators. The kernel adds them one after another instead;
integer addition modulo 2^32 is associative, so both orders give the same bits (and the
geometry's P bound rules out wrapping anyway).
``tests/npu/host/test_kernel.py`` checks this model against the compiled kernel source bit for bit.
"""

from __future__ import annotations

import numpy as np

from ...geometry import BLOCK

LANES = BLOCK * BLOCK


def _blocks(v: np.ndarray) -> np.ndarray:
    return v.reshape(*v.shape[:-1], BLOCK, BLOCK)


def shuffle_t8_8x8(v: np.ndarray) -> np.ndarray:
    """Transpose each 64-lane int8 block: ``out[r*8+c] = v[c*8+r]``."""
    return _blocks(v).swapaxes(-1, -2).reshape(v.shape)


def _matmul_8x8(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    prod = np.matmul(_blocks(a.astype(np.int32)), _blocks(b.astype(np.int32)))
    return prod.reshape(*prod.shape[:-2], LANES)


def mac_8x8_8x8(a: np.ndarray, b: np.ndarray, acc: np.ndarray) -> np.ndarray:
    """``acc + A @ B`` on (batches of) 64-lane blocks, int32."""
    return acc + _matmul_8x8(a, b)


def msc_8x8_8x8(a: np.ndarray, b: np.ndarray, acc: np.ndarray) -> np.ndarray:
    """``acc - A @ B`` on (batches of) 64-lane blocks, int32."""
    return acc - _matmul_8x8(a, b)


def unpack_v64int4(v: np.ndarray) -> np.ndarray:
    """``unpack(v64int4)`` on (batches of) 32 bytes: 64 int8 lanes, each nibble sign-extended,
    low nibble first."""
    b = v.view(np.uint8).astype(np.int16)
    lanes = np.stack([b & 0xF, b >> 4], axis=-1).reshape(*v.shape[:-1], 2 * v.shape[-1])
    return (lanes - ((lanes & 8) << 1)).astype(np.int8)


def shuffle_t8_64x2(a: np.ndarray, b: np.ndarray, hi: bool) -> np.ndarray:
    """``shuffle(a, b, T8_64x2_lo / _hi)``: the even (``hi``: odd) lanes of a then b."""
    return np.concatenate([a, b], axis=-1)[..., int(hi)::2]


def unpack_ci4_blocks(packed: np.ndarray, out: np.ndarray, nibble_order: str) -> None:
    """The kernel's unpack loop: every 64-byte ci4 block of ``packed`` to its (re, im) pair of
    int8 blocks in ``out`` (``2 x`` the bytes), as ``xcorr_unpack_ci4`` does with two
    ``unpack`` and two ``shuffle`` per block."""
    blocks = packed.reshape(-1, 2, 32)
    u0, u1 = unpack_v64int4(blocks[:, 0]), unpack_v64int4(blocks[:, 1])
    low, high = shuffle_t8_64x2(u0, u1, False), shuffle_t8_64x2(u0, u1, True)
    pairs = out.reshape(-1, 2, LANES)
    pairs[:, 0], pairs[:, 1] = (high, low) if nibble_order == "re_high" else (low, high)


def xcorr_acc_zero(acc: np.ndarray) -> None:
    """The zeroing kernel: every accumulator lane to 0 (in place)."""
    acc[...] = 0


def _pair_products(z: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``z[n, t] @ w[m, t]`` for every (n, m, t): int8 blocks (n, t, 64), (m, t, 64) -> int32
    (n, m, t, 64).

    Why float32: the products for one t form a single (8n x 8) @ (8 x 8m) matrix product
    that BLAS does at once instead of n*m tiny ones; every lane is a sum of 8 int8*int8 terms,
    |sum| <= 2^17 < 2^24, so float32 holds it exactly and the int32 result is the intrinsic's.
    """
    n, t = z.shape[:2]
    m = w.shape[0]
    zt = _blocks(z).transpose(1, 0, 2, 3).reshape(t, n * BLOCK, BLOCK).astype(np.float32)
    wt = _blocks(w).transpose(1, 2, 0, 3).reshape(t, BLOCK, m * BLOCK).astype(np.float32)
    prod = np.matmul(zt, wt).astype(np.int32)  # [t][n i][m j]
    return prod.reshape(t, n, BLOCK, m, BLOCK).transpose(1, 3, 0, 2, 4).reshape(n, m, t, LANES)


def xcorr_kernel(a: np.ndarray, b: np.ndarray, acc: np.ndarray, n: int, m: int, t: int) -> None:
    """One kernel call on flat buffers: ``acc (int32) += A B^H`` in place.

    ``a`` holds n*t*2*64 int8, ``b`` m*t*2*64 int8, ``acc`` n*m*2*64 int32 (any shapes with
    those sizes: the buffers come straight from the emulated tile memory). Per (n, m, t), as in
    the kernel's inner loop with w = shuffle_t8_8x8(b block):
    ``re = mac(z_im, w_im, mac(z_re, w_re, re))``, ``im = mac(z_im, w_re, msc(z_re, w_im, im))``;
    the 8x8 block products come from :func:`_pair_products` (the same numbers as
    :func:`mac_8x8_8x8` on each pair, computed for all pairs at once).
    """
    z = a.reshape(n, t, 2, LANES)
    w = shuffle_t8_8x8(b.reshape(m, t, 2, LANES))  # B blocks to [sample][stream]
    z_re, z_im, w_re, w_im = z[:, :, 0], z[:, :, 1], w[:, :, 0], w[:, :, 1]
    re = _pair_products(z_re, w_re) + _pair_products(z_im, w_im)
    im = _pair_products(z_im, w_re) - _pair_products(z_re, w_im)
    out = acc.reshape(n, m, 2, LANES)
    out[:, :, 0] += re.sum(axis=2, dtype=np.int32)
    out[:, :, 1] += im.sum(axis=2, dtype=np.int32)


def xcorr_kernel_ci4(a: np.ndarray, b: np.ndarray, acc: np.ndarray, ua: np.ndarray,
                     ub: np.ndarray, n: int, m: int, t: int, nibble_order: str) -> None:
    """One ci4 kernel call on flat buffers: ``a`` (n*t*64 bytes) and ``b`` (m*t*64) unpacked
    into ``ua`` and ``ub`` (tile memory, written as the kernel writes it), then
    :func:`xcorr_kernel` on them."""
    unpack_ci4_blocks(a, ua, nibble_order)
    unpack_ci4_blocks(b, ub, nibble_order)
    xcorr_kernel(ua, ub, acc, n, m, t)
