"""The correlator chain on given frames: a source block standing in for the capture, a run of
the whole chain on one header, and capture-like rings (frames with lost packets and their
presence mask) fed to the chain on either runtime (tests/helpers/runtimes.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.conftest import random_frames
from tests.helpers.runtimes import array_source
from xengine_block.array import default_array
from xengine_block.blocks import IntegrateBlock, QuicklookBlock, UVH5WriterBlock, XEngineBlock
from xengine_block.geometry import Geometry
from xengine_block.runtime.pipeline import Pipeline, SourceBlock


class FramesSource(SourceBlock):
    """Emits given capture frames and presence mask as one sequence (stands in for capture);
    records where each output span lay (zero-copy tests)."""

    def __init__(self, frames, mask, header, gulp_nframe, time_tag=0):
        super().__init__(["frames"], gulp_nframe=gulp_nframe)
        self.orings = [self.create_ring(), self.create_ring()]
        self.frames, self.mask, self.header, self.time_tag = frames, mask, header, time_tag
        self.span_addresses: list[int] = []

    def create_reader(self, name):
        return iter(range(0, len(self.frames), self.gulp_nframe))

    def on_sequence(self, reader, name):
        g = Geometry.from_dict(self.header["geometry"])  # ci8 or ci4 frames
        ndim = 1 + len(g.frame_shape)
        data = dict(self.header, name="test", time_tag=self.time_tag, _tensor={
            "dtype": g.frame_dtype, "shape": [-1, *g.frame_shape],
            "labels": ["time", *g.frame_labels], "scales": [None] * ndim,
            "units": [None] * ndim})
        mask = dict(self.header, name="test.mask", time_tag=self.time_tag, _tensor={
            "dtype": "u8", "shape": [-1, g.nstream], "labels": ["time", "stream"],
            "scales": [None, None], "units": [None, None]})
        return [data, mask]

    def on_data(self, reader, ospans):
        i = next(reader, None)
        if i is None:
            return [0, 0]
        n = min(self.gulp_nframe, len(self.frames) - i)
        self.span_addresses.append(ospans[0].data.ctypes.data)
        ospans[0].data[:n] = self.frames[i:i + n]  # the one copy: capture -> ring
        ospans[1].data[:n] = self.mask[i:i + n]
        return [n, n]


def run_chain_with_header(tmp_path, g, frames, mask, ninteg, array, **fields):
    """The chain with a header describing ``array`` and the given sky/time fields."""
    header = dict(fields, chan0=0, nchan=g.nchan, nstream=g.nstream, geometry=g.to_dict(),
                  array=array.to_dict())
    return run_header(tmp_path, g, frames, mask, ninteg, header, 0)[0]


def run_header(tmp_path, g, frames, mask, ninteg, header, time_tag, **writer_kw):
    with Pipeline() as p:
        src = FramesSource(frames, mask, header, g.npacket, time_tag)
        x = XEngineBlock(src, backend="cpu")
        integ = IntegrateBlock(x, ninteg=ninteg)
        w = UVH5WriterBlock(integ, directory=tmp_path, **writer_kw)
        q = QuicklookBlock(integ.orings[0], directory=tmp_path)
        p.run()
    return w, q, x


def capture_like(g: Geometry, frames: np.ndarray, mask: np.ndarray) -> list:
    hdr = {"name": "cap", "time_tag": 0, "sync_time": 1.8e9, "fs_hz": 48000.0, "chan0": 0,
           "freq0_hz": 150e6, "chan_bw_hz": 10e3, "nchan": g.nchan, "nstream": g.nstream,
           "geometry": g.to_dict(), "array": default_array(g.nstream // 2).to_dict()}
    return [(dict(hdr, _tensor={"dtype": "i8", "shape": [-1, *g.frame_shape]}), frames),
            (dict(hdr, name="cap.mask", _tensor={"dtype": "u8", "shape": [-1, g.nstream]}),
             mask)]


def lossy_frames(g: Geometry, nframe: int) -> tuple[np.ndarray, np.ndarray]:
    frames = random_frames(g, nframe, seed=11)
    mask = np.ones((nframe, g.nstream), np.uint8)
    for f, s in [(0, 3), (2, 0), (3, 0), (5, 7)]:  # lost packets: zero-filled, mask cleared
        frames[f, s], mask[f, s] = 0, 0
    return frames, mask


def run_file_chain(rt, tmp_path: Path, g: Geometry, frames, mask) -> Path:
    with rt.Pipeline() as p:
        x = rt.XEngineBlock(array_source(rt, capture_like(g, frames, mask), g.npacket),
                            backend="cpu")
        w = rt.UVH5WriterBlock(rt.IntegrateBlock(x, ninteg=2), directory=tmp_path / rt.name)
        p.run()
    assert len(w.files) == 1
    return w.files[0]
