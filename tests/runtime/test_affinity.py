"""Blocks' ``core=`` (Bifrost's block argument): each block's thread, and the threads it starts
(spead2's receiver, a block's own workers), run on the cores given; bad values stop before any
work, naming the block."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from tests.helpers.runtimes import collector
from tests.helpers.threads import cpus_of, masks_of_threads_named
from xengine_block.array import default_array
from xengine_block.blocks.chain import correlator_chain, runtime
from xengine_block.capture.receive import CaptureBlock
from xengine_block.capture.spead import repeated_frame_datagrams
from xengine_block.capture.transports import BufferSource
from xengine_block.geometry import Geometry
from xengine_block.runtime.affinity import (
    format_cores,
    parse_cores,
    pinned,
    thread_cores,
    usable_cores,
)
from xengine_block.runtime.pipeline import MultiTransformBlock, Pipeline, os_thread_name

pytestmark = [pytest.mark.timeout(60),
              pytest.mark.skipif(not hasattr(os, "sched_setaffinity"),
                                 reason="this OS has no per-thread CPU masks")]

#: The core the tests pin to: the last this process may use, so that on a machine of several
#: cores a pinned thread's mask differs from the process's.
CORE = max(usable_cores())


def test_parse_cores_accepts_a_core_or_a_list_and_names_what_is_wrong():
    assert parse_cores(None) is None
    assert parse_cores(CORE) == {CORE}
    assert parse_cores([CORE, CORE]) == {CORE}
    assert parse_cores(np.int64(CORE)) == {CORE}
    for bad, message in ((True, "core number or a list"), ([], "empty list"),
                         ([0.5], "0.5 is not a core number"), ("x", "'x' is not a core"),
                         (10_000, "core 10000 is not one this process may run on")):
        with pytest.raises(ValueError, match=message) as err:
            parse_cores(bad, "capture.core")
        assert str(err.value).startswith("capture.core")


def test_format_cores_writes_the_kernels_cpu_lists():
    assert format_cores([5, 0, 1, 2, 7, 8]) == "0-2,5,7-8"
    assert format_cores([3]) == "3"
    assert cpus_of(format_cores([0, 2, 3, 4, 9])) == {0, 2, 3, 4, 9}


def test_pinned_restores_the_threads_mask():
    before = thread_cores()
    with pinned(CORE):
        assert thread_cores() == {CORE}
    assert thread_cores() == before


class ThreadMasks(MultiTransformBlock):
    """Sink of a capture block's two rings: records, while the capture runs, the CPU masks of
    its own thread, of a thread it starts, and of every thread named after the capture block
    (its own and spead2's receiver)."""

    def __init__(self, capture: CaptureBlock, **kwargs) -> None:
        super().__init__(capture.orings, **kwargs)
        self.orings = []
        self.capture_name = os_thread_name(capture.name)
        self.mine: set[int] | None = None
        self.started: set[int] | None = None
        self.capture: list[set[int]] = []

    def define_output_nframes(self, input_nframes):
        return []

    def on_sequence(self, iseqs):
        return []

    def on_data(self, ispans, ospans):
        if self.mine is None:
            self.mine = thread_cores()
            child: list[set[int]] = []
            t = threading.Thread(target=lambda: child.append(thread_cores()))
            t.start()
            t.join()
            self.started = child[0]
            self.capture = masks_of_threads_named(self.capture_name)
        return []


G = Geometry(nstream=8, nchan=9, npacket=2)


def capture_run(capture_core, sink_core) -> ThreadMasks:
    frame = np.random.default_rng(1).integers(-128, 128, (1, *G.frame_shape), dtype=np.int8)
    blob = repeated_frame_datagrams(frame, G, 40, 0).tobytes()
    with Pipeline() as p:
        cap = CaptureBlock(BufferSource(blob), G, default_array(4), sync_time=0.0, fs_hz=40e3,
                           freq0_hz=150e6, chan_bw_hz=40e3, start_timestamp=0,
                           core=capture_core)
        sink = ThreadMasks(cap, core=sink_core)
        p.run()
    return sink


def test_blocks_and_the_threads_they_start_run_on_their_cores():
    sink = capture_run(CORE, [CORE])
    assert sink.mine == {CORE} and sink.started == {CORE}
    # the capture block's thread and spead2's receiver thread it made
    assert len(sink.capture) >= 2, "spead2's receiver thread was not found by its name"
    assert all(mask == {CORE} for mask in sink.capture)


def test_blocks_without_core_keep_the_process_mask():
    sink = capture_run(None, None)
    assert sink.mine == usable_cores() and sink.started == usable_cores()
    assert sink.capture and all(mask == usable_cores() for mask in sink.capture)


def test_a_bad_core_stops_the_pipeline_before_it_runs(tmp_path):
    with Pipeline():
        with pytest.raises(ValueError, match="core 10000 is not one this process may run on"):
            CaptureBlock(BufferSource(b""), G, default_array(4), sync_time=0.0, fs_hz=40e3,
                         freq0_hz=150e6, chan_bw_hz=40e3, core=10_000)
        cap = CaptureBlock(BufferSource(b""), G, default_array(4), sync_time=0.0, fs_hz=40e3,
                           freq0_hz=150e6, chan_bw_hz=40e3)
        with pytest.raises(ValueError, match="cores: no block 'capture' in the chain"):
            correlator_chain(cap, directory=tmp_path, geometry=G, cores={"capture": CORE})
        with pytest.raises(ValueError, match=r"XEngineBlock_\d+: core: core 10000"):
            correlator_chain(cap, directory=tmp_path, geometry=G, cores={"xengine": 10_000})
    assert not list(tmp_path.iterdir())


def test_chain_blocks_take_their_cores(tmp_path):
    with Pipeline():
        cap = CaptureBlock(BufferSource(b""), G, default_array(4), sync_time=0.0, fs_hz=40e3,
                           freq0_hz=150e6, chan_bw_hz=40e3)
        chain = correlator_chain(cap, directory=tmp_path, geometry=G, backend="cpu",
                                 cores={"xengine": [CORE], "integrate": CORE,
                                        "writer": CORE, "quicklook": None})
    assert chain.xengine.core == [CORE] and chain.integrate.core == CORE
    assert chain.writer.core == CORE and chain.quicklook.core is None


def test_the_capture_thread_and_its_receiver_run_on_the_capture_core(rt):
    """``core=`` of the capture block pins the thread that runs it, and spead2's receiver,
    started there, follows, on our runtime and on real Bifrost's (its block runs our capture
    through the adapter)."""
    blocks = runtime(rt.name)
    core = max(usable_cores())
    frame = np.random.default_rng(2).integers(-128, 128, (1, *G.frame_shape), dtype=np.int8)
    nframe = 400  # more than the rings hold: the capture still runs when the sink first looks
    blob = repeated_frame_datagrams(frame, G, nframe, 0).tobytes()
    seen: list[list[set[int]]] = []
    with rt.Pipeline() as p:
        cap = blocks.CaptureBlock(BufferSource(blob), G, default_array(4), sync_time=0.0,
                                  fs_hz=40e3, freq0_hz=150e6, chan_bw_hz=40e3,
                                  start_timestamp=0, core=core)
        sink = collector(rt, cap)
        on_data = sink.on_data

        def watch(ispan):
            if not seen:
                seen.append(masks_of_threads_named(os_thread_name(cap.name)))
            on_data(ispan)

        sink.on_data = watch
        p.run()
    assert len(sink.out) == nframe and seen
    assert len(seen[0]) >= 2, "the capture's thread and spead2's receiver were not found"
    assert all(mask == {core} for mask in seen[0])
