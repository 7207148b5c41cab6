"""Pieces of the capture tests: a 32-stream geometry, its sky, crafted single-packet heaps
and a sink collecting what the capture block wrote."""

from __future__ import annotations

import numpy as np

from xengine_block.capture.receive import CaptureBlock
from xengine_block.capture.spead import heap_datagrams, make_heap, max_packet_size
from xengine_block.geometry import Geometry
from xengine_block.runtime.pipeline import MultiTransformBlock

#: 32 streams, 2 channel groups of 9 (mask [S, G]), P = 2.
G = Geometry(nstream=32, nchan=18, npacket=2)

CHAN0 = 18

SKY = dict(sync_time=1.8e9, fs_hz=48000.0, freq0_hz=150e6, chan_bw_hz=10e3)


def crafted(cnt: int, timestamp: int, stream: int = 0, freq: int = CHAN0,
            size: int = G.payload_bytes) -> bytes:
    """One single-packet heap with chosen item values."""
    (pkt,) = heap_datagrams(make_heap(timestamp, stream, freq, np.ones(size, np.int8)), cnt,
                            max_packet_size(G) + 64)
    return pkt


class Collect(MultiTransformBlock):
    """Sink of the capture block's two rings: keeps headers, frames and masks."""

    def __init__(self, capture: CaptureBlock) -> None:
        super().__init__(capture.orings)
        self.orings = []
        self.headers: list[list[dict]] = []
        self.frames: list[np.ndarray] = []
        self.masks: list[np.ndarray] = []

    def define_output_nframes(self, input_nframes):
        return []

    def on_sequence(self, iseqs):
        self.headers.append([s.header for s in iseqs])
        return []

    def on_data(self, ispans, ospans):
        self.frames.append(ispans[0].data.copy())
        self.masks.append(ispans[1].data.copy())
        return []
