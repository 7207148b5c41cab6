"""Our blocks inside real Bifrost (``xengine_block.bifrost``): exact against the reference,
files equal to our runtime's, failures stop the pipeline and reach the caller (docs/bifrost.md's
examples: tests/bifrost/test_examples.py).

Skipped, with the reason, where Bifrost does not import; CI builds it from the vendored tarball
and sets XENGINE_REQUIRE_BIFROST, which turns the skip into a failure.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from tests.conftest import bifrost_or_skip, random_frames
from tests.helpers.chain import capture_like, lossy_frames, run_file_chain
from tests.helpers.runtimes import OURS, array_source, bifrost_runtime, collector
from xengine_block.array import default_array
from xengine_block.blocks.chain import correlator_chain, runtime
from xengine_block.frames import frames_to_natural
from xengine_block.geometry import Geometry
from xengine_block.reference import reference_triangle
from xengine_block.runtime.memory import bytes_at

xb = bifrost_or_skip()
BF = bifrost_runtime()

pyuvdata = pytest.importorskip("pyuvdata", reason="pyuvdata (test extra) validates UVH5 files")
pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parents[2]


def test_xengine_sizes_and_faults_in_its_bifrost_ring_before_data():
    """With geometry= the data ring is sized in the constructor, its pages resident, and the
    run does not reallocate it (the capture would otherwise fault it in while packets arrive)."""
    from tests.helpers.rings import resident_pages
    from xengine_block.bifrost.runtime import ring_memory

    g = Geometry(nstream=8, nchan=9, npacket=4)
    frames, mask = lossy_frames(g, 8)
    with BF.Pipeline() as p:
        src = array_source(BF, capture_like(g, frames, mask), g.npacket)
        x = xb.XEngineBlock(src, backend="cpu", geometry=g)
        address, nbyte = ring_memory(x.irings[0])
        assert nbyte >= 3 * g.npacket * g.frame_bytes
        view = bytes_at(address, nbyte)
        resident, total = resident_pages(view)
        assert resident == total
        vis = collector(BF, x.orings[0])
        p.run()
    assert ring_memory(x.irings[0]) == (address, nbyte) and len(vis.out) == 2
    for f, v in enumerate(vis.out):
        sl = slice(4 * f, 4 * f + 4)
        assert np.array_equal(v, reference_triangle(frames_to_natural(frames[sl], g)))


def assert_same_h5(a: Path, b: Path) -> None:
    """Every dataset and attribute of two HDF5 files equal, bit for bit."""
    with h5py.File(a) as fa, h5py.File(b) as fb:
        names_a, names_b = [], []
        fa.visit(names_a.append)
        fb.visit(names_b.append)
        assert names_a == names_b
        for n in names_a:
            if isinstance(fa[n], h5py.Dataset):
                va, vb = fa[n][()], fb[n][()]
                assert fa[n].dtype == fb[n].dtype and np.array_equal(va, vb), n
            assert dict(fa[n].attrs) == dict(fb[n].attrs), n


def test_uvh5_on_bifrost_equals_our_runtime(tmp_path):
    g = Geometry(nstream=8, nchan=9, npacket=2)
    frames, mask = lossy_frames(g, 8)
    ours = run_file_chain(OURS, tmp_path, g, frames, mask)
    theirs = run_file_chain(BF, tmp_path, g, frames, mask)
    assert_same_h5(ours, theirs)
    uv = pyuvdata.UVData.from_file(theirs)
    uv.check()
    assert uv.Ntimes == 2


def test_capture_to_uvh5_on_bifrost_equals_our_runtime(tmp_path):
    """The fx.py chain from the same recorded packets: real capture block on both runtimes."""
    from xengine_block.capture.spead import pcap_sender
    from xengine_block.capture.transports import PcapSource
    from xengine_block.sim.fengine import FEngineSimulator

    array = default_array(8)
    g = Geometry(nstream=array.nstream, nchan=9, npacket=4)
    sky = {"sync_time": 1.8e9, "fs_hz": 40e3, "freq0_hz": 150e6, "chan_bw_hz": 40e3}
    sim = FEngineSimulator(array, g, **sky, sources=[], noise_sigma=1.0, gain=8.0, seed=3)
    pcap = tmp_path / "packets.pcap"
    sender = pcap_sender(g, pcap)
    sender.send_frames(sim.frames(0, 16), 0)
    sender.close()
    files = {}
    for name in ("ours", "bifrost"):
        rt = runtime(name)
        with rt.Pipeline() as p:
            cap = rt.CaptureBlock(PcapSource(str(pcap)), g, array, **sky, start_timestamp=0)
            # ninteg=1: once deadlocked on Bifrost (the integrator reserved 3 frames a gulp
            # while the writer, reading two rings in lockstep, held the second one's space)
            chain = correlator_chain(cap, directory=tmp_path / name, backend="cpu", ninteg=1,
                                     geometry=g, runtime_name=name)
            p.run()
        assert cap.capture_counters()["frames"] == 16
        assert chain.writer.dumps_written == 4 and chain.quicklook.images
        files[name] = chain.writer.files[0]
    assert_same_h5(files["ours"], files["bifrost"])


def test_bifrost_script_with_failing_block_exits_nonzero(tmp_path):
    script = """
import xengine_block.bifrost as xb
bfp = xb.bf.pipeline
class Src(bfp.SourceBlock):
    def create_reader(self, name):
        import contextlib
        return contextlib.nullcontext(None)
    def on_sequence(self, reader, name):
        return [{"name": name, "_tensor": {"dtype": "u8", "shape": [-1, 4]}}]
    def on_data(self, reader, ospans):
        raise ValueError("user source broke")
with xb.Pipeline() as p:
    Src(["s"], gulp_nframe=1)
    p.run()
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=60, cwd=tmp_path)
    assert r.returncode != 0
    assert "user source broke" in r.stderr and "PipelineError" in r.stderr


def test_missing_header_key_is_one_clear_line():
    g = Geometry(nstream=8, nchan=9, npacket=2)
    frames, mask = lossy_frames(g, 8)
    outputs = capture_like(g, frames, mask)
    del outputs[0][0]["fs_hz"]
    with BF.Pipeline() as p:
        xb.XEngineBlock(array_source(BF, outputs, 2), backend="cpu")
        with pytest.raises(xb.PipelineError, match=r"lacks \['fs_hz'\]"):
            p.run()


def run_npu(tmp_path: Path, xrt) -> tuple[Any, list, np.ndarray, Geometry]:
    from xengine_block.geometry import small_test_geometry
    from xengine_block.npu.host.simdevice import write_simulated_build

    g = small_test_geometry()  # S == npu_block, one channel group: frames are the NPU input
    write_simulated_build(tmp_path, g)
    nfull = 7
    frames = random_frames(g, nfull * g.npacket, seed=3)
    mask = np.ones((len(frames), g.nstream), np.uint8)
    with BF.Pipeline() as p:
        src = array_source(BF, capture_like(g, frames, mask), g.npacket)
        x = xb.XEngineBlock(src, backend="npu", geometry=g,
                            backend_options={"xrt": xrt, "build_dir": tmp_path, "nring": 2})
        vis = collector(BF, x.orings[0])
        p.run()
    x.backend.close()
    for k, got in enumerate(vis.out):
        sl = slice(k * g.npacket, (k + 1) * g.npacket)
        assert np.array_equal(got, reference_triangle(frames_to_natural(frames[sl], g))), k
    assert len(vis.out) == nfull
    return x, vis.out, frames, g


def test_npu_reads_bifrost_ring_memory_through_user_pointer_bos(tmp_path):
    """Simulated device (plan emulator on separate device copies) with user-pointer BOs: every
    gulp runs on sub-buffers of the Bifrost ring's own memory, nothing is copied."""
    from xengine_block.npu.host.simdevice import SimulatedBo, SimulatedDevice, SimulatedXrt

    class UserPtrBo(SimulatedBo):
        """``bo(device, userptr, size, group)``: host side is the user's memory."""

        def __init__(self, device, nbytes, flags, group=None):
            if isinstance(device, SimulatedDevice) and isinstance(flags, int):
                address, size = nbytes, flags
                super().__init__(device, size, SimulatedBo.host_only, group)
                self.host = bytes_at(address, size)
                self.device.xrt.count("userptr_bos")
            else:
                super().__init__(device, nbytes, flags, group)

    class UserPtrXrt(SimulatedXrt):
        bo = UserPtrBo

    xrt = UserPtrXrt()
    x, _, _, _ = run_npu(tmp_path, xrt)
    assert xrt.counters["userptr_bos"] == 1
    assert x.backend.stats["zero_copy_calls"] == 7 and x.backend.stats["copied_calls"] == 0


def test_npu_without_user_pointer_bos_copies_and_says_why(tmp_path, caplog):
    from xengine_block.npu.host.simdevice import SimulatedXrt

    caplog.set_level("INFO")
    x, _, _, _ = run_npu(tmp_path, SimulatedXrt())  # its bo() takes no user pointers
    assert x.backend.stats["zero_copy_calls"] == 0 and x.backend.stats["copied_calls"] == 7
    assert "refused a user-pointer buffer object" in caplog.text


def test_sigterm_stops_bifrost_pipeline_cleanly(tmp_path):
    script = """
import contextlib, time
import xengine_block.bifrost as xb
bfp = xb.bf.pipeline
class Endless(bfp.SourceBlock):
    def create_reader(self, name):
        return contextlib.nullcontext(None)
    def on_sequence(self, reader, name):
        return [{"name": name, "_tensor": {"dtype": "u8", "shape": [-1, 4]}}]
    def on_data(self, reader, ospans):
        time.sleep(0.01)
        return [1]
class Sink(bfp.SinkBlock):
    def on_sequence(self, iseq):
        print("running", flush=True)
    def on_data(self, ispan):
        pass
with xb.Pipeline() as p:
    Sink(Endless(["s"], gulp_nframe=1))
    p.run()
print("stopped:", p.stop_reason, flush=True)
print("signal:", p.stop_signal, flush=True)
"""
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    assert proc.stdout.readline().strip() == "running"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err[-2000:]
    assert "stopped: SIGTERM received" in out
    assert f"signal: {int(signal.SIGTERM)}" in out  # as our runtime's (fx.py reads it)
