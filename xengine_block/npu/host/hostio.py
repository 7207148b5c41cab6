"""Host side of the NPU contract: what goes into the ``a``/``b`` buffers and what comes out.

Shared by the emulator and the pyxrt backend, so both feed the same DDR layout and read the
same output layout (``plan.host_args``):

- input: int8 ``[P][npu_block][payload]``, payload ``[nchan_pkt][coarse][re, im][fine]`` (ci4:
  ``[nchan_pkt][coarse][fine]`` packed bytes, ``Geometry.packet_shape``): one channel group of
  one block of ``npu_block`` streams, missing streams zero. When S equals the NPU block and
  nchan equals nchan_pkt this is exactly the ring's frames (no copy needed), for ci8 and ci4
  alike: ci4 frames travel packed to the compute tiles, which unpack them.
- output: int32 ``[nchan_pkt][cols][rows][N][M][re, im][8][8]`` with A stream
  ``8N row + 8n + r2`` and B stream ``8M col + 8m + c2``.
"""

from __future__ import annotations

import numpy as np

from ...geometry import BLOCK, Geometry


def input_shape(g: Geometry, npacket: int | None = None) -> tuple[int, int, int]:
    return (g.npacket if npacket is None else npacket, g.npu_block, g.payload_bytes)


def output_shape(g: Geometry) -> tuple[int, ...]:
    return (g.nchan_pkt, g.cols, g.rows, g.tile_n, g.tile_m, 2, BLOCK, BLOCK)


def npu_input(frames: np.ndarray, g: Geometry, block: int, group: int,
              out: np.ndarray | None = None) -> np.ndarray:
    """Frames ``[P, S, C, coarse, 2, fine]`` (ci4 ``[P, S, C, coarse, fine]``) -> the NPU input
    buffer for one stream block and channel group (streams beyond S zero-padded)."""
    npacket = frames.shape[0]
    if out is None:
        out = np.empty(input_shape(g, npacket), np.int8)
    s0 = block * g.npu_block
    s1 = min(s0 + g.npu_block, g.nstream)
    c0 = group * g.nchan_pkt
    view = out.reshape(npacket, g.npu_block, *g.packet_shape)
    view[:, :s1 - s0] = frames[:, s0:s1, c0:c0 + g.nchan_pkt]
    view[:, s1 - s0:] = 0
    return out


def npu_output_to_matrix(out: np.ndarray, g: Geometry) -> tuple[np.ndarray, np.ndarray]:
    """NPU output -> (re, im) int32 ``[nchan_pkt, npu_block (A), npu_block (B)]``."""
    v = out.reshape(output_shape(g))
    # axes: chan col row n m reim r2 c2 -> reim chan (row n r2) (col m c2)
    v = v.transpose(5, 0, 2, 3, 6, 1, 4, 7)
    full = v.reshape(2, g.nchan_pkt, g.npu_block_a, g.npu_block_b)
    return full[0], full[1]
