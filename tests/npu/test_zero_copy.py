"""Zero copy from the capture ring to the NPU: the X-engine's data ring lives in NPU buffer
objects and the backend runs the kernel on sub-buffers of it (simulated device, plan emulator).

The simulated device keeps separate host and device copies of every BO, so a sub-buffer at the
wrong offset, or a sync of the wrong region, gives a wrong answer here as on hardware.
"""

import gc

import numpy as np
import pytest

from tests.conftest import random_frames
from tests.helpers.chain import FramesSource
from xengine_block.array import default_array
from xengine_block.backends.npu import NpuBackend
from xengine_block.blocks import XEngineBlock
from xengine_block.frames import frames_to_natural
from xengine_block.geometry import small_test_geometry
from xengine_block.npu.design import artifacts
from xengine_block.npu.host.simdevice import SimulatedXrt, write_simulated_build
from xengine_block.reference import reference_triangle
from xengine_block.runtime.pipeline import Pipeline, SinkBlock

pytestmark = pytest.mark.timeout(60)


class Collect(SinkBlock):
    def __init__(self, iring):
        super().__init__(iring)
        self.frames: list[np.ndarray] = []

    def on_sequence(self, iseq):
        pass

    def on_data(self, ispan):
        self.frames.extend(np.array(f) for f in ispan.data)


def run(tmp_path, g, frames, *, zero_copy_geometry, xrt, **xkw):
    write_simulated_build(tmp_path, g)
    header = {"sync_time": 1.8e9, "fs_hz": 48000.0, "chan0": 100, "nchan": g.nchan,
              "freq0_hz": 150e6, "chan_bw_hz": 10e3, "nstream": g.nstream,
              "geometry": g.to_dict(), "array": default_array(g.nstream // 2).to_dict()}
    mask = np.ones((len(frames), g.nstream), np.uint8)
    with Pipeline() as p:
        src = FramesSource(frames, mask, header, g.npacket)
        x = XEngineBlock(src, backend="npu", geometry=zero_copy_geometry,
                         backend_options={"xrt": xrt, "build_dir": tmp_path, "nring": 2},
                         **xkw)
        sink = Collect(x.orings[0])
        # The pipeline lets go of its rings' memory when it has run: keep the data ring's
        # buffer (sized by the X-engine already when it was given a geometry) to inspect.
        x.ring_buffer = x.irings[0]._buf
        p.run()
    x.backend.close()
    return src, x, sink


def check_exact(g, frames, vis):
    P = g.npacket
    assert len(vis) == -(-len(frames) // P)
    for k, got in enumerate(vis):
        want = reference_triangle(frames_to_natural(frames[k * P:(k + 1) * P], g))
        assert np.array_equal(got, want), k


def insts_bytes(tmp_path, g):
    """The instruction streams synced once: the main design's and the diagonal one's."""
    art = artifacts.Artifacts(tmp_path / artifacts.geometry_tag(g))
    return art.insts.stat().st_size + art.diagonal_insts.stat().st_size


@pytest.mark.parametrize("samples", [{}, {"sample_bits": 4, "nibble_order": "re_low"}],
                         ids=["ci8", "ci4"])
def test_pipeline_runs_the_npu_on_the_ring_memory_without_copying(tmp_path, samples):
    """ci4 as ci8: packed frames are the ci4 build's input, so the ring is its memory too."""
    g = small_test_geometry(**samples)
    assert g.nstream == g.npu_block and g.nchan == g.nchan_pkt  # frames are the NPU input
    nfull = 7  # laps of a ring of 7 frames (not whole gulps of 2): spans cross its end
    frames = random_frames(g, nfull * g.npacket + 1, seed=3)  # + a partial last gulp
    xrt = SimulatedXrt()
    src, x, sink = run(tmp_path, g, frames, zero_copy_geometry=g, xrt=xrt, buffer_nframe=7)
    check_exact(g, frames, sink.frames)
    stats = x.backend.stats
    # every full gulp ran in place; the last one (1 of P frames) is zero-padded in a ring entry
    assert stats["zero_copy_calls"] == nfull and stats["copied_calls"] == 1, stats
    assert stats["in_place_calls"] == 0
    ring = x.irings[0]
    assert ring.allocator == x.backend.allocate_host
    assert stats["host_bytes"] > 0 and len(x.backend._host_bos) == 1  # allocated once
    host = next(iter(x.backend._host_bos.values()))
    buf = x.ring_buffer
    assert np.shares_memory(buf, host.array())
    span = buf.nbytes - g.npacket * g.frame_bytes  # the ring, then its ghost of one gulp
    assert span == 7 * g.frame_bytes
    start, gulp = buf.ctypes.data, g.npacket * g.frame_bytes
    assert all(start <= a < start + buf.nbytes
               for a in src.span_addresses)  # the capture wrote straight into the BO
    assert sum(a + gulp > start + span for a in src.span_addresses) >= 1  # wrapped
    assert xrt.counters["sub_buffers"] >= 1
    # only each call's region of the ring BO was synced (+ one full entry for the last gulp)
    assert xrt.counters["sync_to_device_bytes"] == ((nfull + 1) * g.npu_in_bytes
                                                    + insts_bytes(tmp_path, g))


def test_fallback_copies_when_the_ring_was_allocated_first(tmp_path, caplog):
    g = small_test_geometry()
    frames = random_frames(g, 4 * g.npacket, seed=4)
    with caplog.at_level("INFO", logger="xengine_block.blocks.xengine"):
        src, x, sink = run(tmp_path, g, frames, zero_copy_geometry=None, xrt=SimulatedXrt())
    assert "frames are copied" in caplog.text
    check_exact(g, frames, sink.frames)
    assert x.irings[0].allocator is None
    assert x.backend.stats["zero_copy_calls"] == 0 and x.backend.stats["copied_calls"] == 4


def test_geometry_without_the_npu_layout_keeps_numpy_memory(tmp_path):
    g = small_test_geometry(nstream=64)  # two NPU blocks: frames must be regrouped
    frames = random_frames(g, 2 * g.npacket, seed=5)
    src, x, sink = run(tmp_path, g, frames, zero_copy_geometry=g, xrt=SimulatedXrt())
    check_exact(g, frames, sink.frames)
    assert not x.backend.zero_copy and x.irings[0].allocator is None
    assert x.backend.stats["zero_copy_calls"] == 0 and x.backend.stats["copied_calls"] == 2


def test_backend_recognises_frames_in_its_memory_at_any_offset(tmp_path):
    g = small_test_geometry()
    write_simulated_build(tmp_path, g)
    xrt = SimulatedXrt()
    backend = NpuBackend(g, xrt=xrt, build_dir=tmp_path, nring=2)
    try:
        assert backend.zero_copy
        memory = backend.allocate_host(3 * g.npu_in_bytes + 64)
        for k, offset in enumerate([0, 64, 2 * g.npu_in_bytes + 64, 64]):
            frames = memory[offset:offset + g.npu_in_bytes].view(np.int8).reshape(
                g.npacket, *g.frame_shape)
            frames[...] = random_frames(g, g.npacket, seed=10 + k)
            want = reference_triangle(frames_to_natural(frames, g))
            assert np.array_equal(backend.correlate(frames), want)
        assert backend.stats["zero_copy_calls"] == 4 and backend.stats["copied_calls"] == 0
        assert xrt.counters["sub_buffers"] == 3  # offset 64 reused its cached sub-buffer
        plain = random_frames(g, g.npacket, seed=20)  # not in a BO: copied, still exact
        assert np.array_equal(backend.correlate(plain),
                              reference_triangle(frames_to_natural(plain, g)))
        assert backend.stats["copied_calls"] == 1
        del frames, memory
        gc.collect()
        assert not backend._host_bos  # the BO went with the last view of its memory
    finally:
        backend.close()
