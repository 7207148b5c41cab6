"""Pipeline and blocks: data and headers through chains, back-pressure, skips, lockstep inputs,
end of data, failures, shutdown, signals, counters and the monitor."""

from __future__ import annotations

import copy
import gc
import io
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from xengine_block.runtime.pipeline import (
    MultiTransformBlock,
    Pipeline,
    PipelineError,
    SinkBlock,
    SourceBlock,
    TransformBlock,
    frozen_heap,
    get_default_pipeline,
)

pytestmark = pytest.mark.timeout(30)  # a deadlock fails instead of hanging

WIDTH = 8  # int64 values per frame


def frames(first: int, n: int) -> np.ndarray:
    """Frame i holds i*WIDTH .. i*WIDTH+WIDTH-1: any lost, repeated or moved frame shows."""
    return np.arange(first * WIDTH, (first + n) * WIDTH, dtype=np.int64).reshape(n, WIDTH)


def seq_header(name: str, time_tag: int) -> dict:
    return {"name": name, "time_tag": time_tag, "freq0_hz": 1.5e8, "array": {"ants": [1, 2, 3]},
            "_tensor": {"dtype": "i64", "shape": [-1, WIDTH], "labels": ["time", "value"],
                        "scales": [[time_tag, 0.5], None], "units": ["s", None]}}


class CountingSource(SourceBlock):
    """One sequence per (name, time_tag, nframe); nframe None runs until shutdown."""

    def __init__(self, sequences, gulp_nframe, fail_after=None, **kwargs):
        super().__init__([s[0] for s in sequences], gulp_nframe, **kwargs)
        self.sequences = {s[0]: s for s in sequences}
        self.headers = []
        self.fail_after = fail_after

    def create_reader(self, name):
        return {"next": 0, "n": self.sequences[name][2]}

    def on_sequence(self, reader, name):
        self.headers.append(seq_header(name, self.sequences[name][1]))
        return [copy.deepcopy(self.headers[-1])]

    def on_data(self, reader, ospans):
        i, left = reader["next"], reader["n"]
        if self.fail_after is not None and i >= self.fail_after:
            raise ValueError("source boom")
        n = ospans[0].nframe if left is None else min(ospans[0].nframe, left - i)
        ospans[0].data[:n] = frames(i, n)
        reader["next"] = i + n
        return [n]


class Triple(TransformBlock):
    """Triples the values; adds a header field."""

    def __init__(self, iring, fail_after=None, fail_in_on_sequence=False, **kwargs):
        super().__init__(iring, **kwargs)
        self.fail_after, self.fail_in_on_sequence = fail_after, fail_in_on_sequence
        self.seen = 0

    def on_sequence(self, iseq):
        if self.fail_in_on_sequence:
            raise ValueError("on_sequence boom")
        ohdr = copy.deepcopy(iseq.header)
        ohdr["tripled"] = True
        return ohdr

    def on_data(self, ispan, ospan):
        if self.fail_after is not None and self.seen >= self.fail_after:
            raise ValueError("transform boom")
        ospan.data[...] = 3 * ispan.data
        self.seen += ispan.nframe
        return ispan.nframe


class Collect(SinkBlock):
    """Keeps every sequence's header and data; records what on_sequence_end saw."""

    def __init__(self, iring, delay=0.0, fail_after=None, **kwargs):
        super().__init__(iring, **kwargs)
        self.delay, self.fail_after = delay, fail_after
        self.seqs: list[dict] = []
        self.ended: list[tuple[str, int]] = []
        self.first_data = threading.Event()

    def on_sequence(self, iseq):
        self.seqs.append({"name": iseq.name, "time_tag": iseq.time_tag, "header": iseq.header,
                          "data": []})

    def on_data(self, ispan):
        if self.fail_after is not None and self.nframe >= self.fail_after:
            raise ValueError("sink boom")
        self.seqs[-1]["data"].append(ispan.data.copy())
        self.first_data.set()
        if self.delay:
            time.sleep(self.delay)

    @property
    def nframe(self) -> int:
        return sum(len(d) for s in self.seqs for d in s["data"])

    def data(self, k: int) -> np.ndarray:
        return np.concatenate(self.seqs[k]["data"] or [np.empty((0, WIDTH), np.int64)])

    def on_sequence_end(self, iseq):
        self.ended.append((iseq.name, len(self.data(len(self.seqs) - 1))))


def run_checked(p: Pipeline) -> float:
    """Run; check no block, monitor or helper thread is left; return the seconds it took."""
    before = set(threading.enumerate())
    t0 = time.monotonic()
    try:
        p.run()
    finally:
        elapsed = time.monotonic() - t0
        left = [t for t in threading.enumerate() if t not in before and t.is_alive()]
        assert not left, f"threads left running: {left}"
    return elapsed


def test_chain_moves_frames_with_headers_intact():
    sequences = [("obs-1", 1000, 37), ("obs-2", 2000, 50), ("obs-3", 2500, 1)]
    with Pipeline() as p:
        src = CountingSource(sequences, gulp_nframe=8)
        tri = Triple(src, gulp_nframe=5)
        sink = Collect(tri, gulp_nframe=3)
        run_checked(p)
    assert [s["name"] for s in sink.seqs] == ["obs-1", "obs-2", "obs-3"]
    for k, (_, time_tag, n) in enumerate(sequences):
        got = sink.seqs[k]
        assert got["time_tag"] == time_tag
        expected = dict(src.headers[k], tripled=True, gulp_nframe=5)
        assert got["header"] == expected
        assert np.array_equal(sink.data(k), 3 * frames(0, n))
    assert sink.ended == [(name, n) for name, _, n in sequences]  # every frame before the end
    total = sum(s[2] for s in sequences)
    assert src.perf["frames"] == tri.perf["frames"] == sink.perf["frames"] == total
    assert sink.perf["bytes"] == total * WIDTH * 8 and sink.perf["sequences"] == 3


def test_slow_guaranteed_reader_back_pressure_without_loss():
    n = 240
    with Pipeline() as p:
        src = CountingSource([("s", 0, n)], gulp_nframe=4)
        sink = Collect(src, delay=0.002, buffer_factor=2)
        run_checked(p)
    assert src.orings[0].total_bytes < n * WIDTH * 8  # the ring cannot hold it all
    got = sink.data(0)
    assert len(got) == n and got.sum() == frames(0, n).sum()
    assert np.array_equal(got, frames(0, n))
    assert src.perf["reserve_s"] > 0.05  # the source waited for the sink: back-pressure
    assert sink.perf["skipped"] == 0


class SlowToOpen(Collect):
    """A sink whose first sequence opens only once ``go`` is set (a block sizing its rings)."""

    def __init__(self, iring, go: threading.Event, **kwargs):
        super().__init__(iring, **kwargs)
        self.go, self.went = go, None

    def on_sequence(self, iseq):
        self.went = self.go.wait(10)
        super().on_sequence(iseq)


class FirstData(CountingSource):
    """Sets ``started`` as it writes its first gulp."""

    def on_data(self, reader, ospans):
        out = super().on_data(reader, ospans)
        self.started.set()
        return out


def test_a_writer_waits_for_its_own_readers_not_for_blocks_further_down():
    """The source writes while a block two rings down is still opening its first sequence
    (that block waits for the source's first gulp: a pipeline-wide wait would time out), and
    its own reader, whose ring is a quarter of the data, still sees every frame."""
    n = 64
    with Pipeline() as p:
        src = FirstData([("s", 0, n)], gulp_nframe=4)
        src.started = threading.Event()
        tri = Triple(src, gulp_nframe=4, buffer_nframe=16)
        late = SlowToOpen(tri, src.started)
        run_checked(p)
    assert late.went, "the source waited for a block that does not read its ring"
    assert np.array_equal(late.data(0), 3 * frames(0, n))
    assert src.orings[0].total_bytes < n * WIDTH * 8


def test_a_writer_waits_until_its_reader_has_opened_the_sequence():
    """A reader slow to open its first sequence still gets it whole: the source waits for it
    (the guarantee), though its ring holds an eighth of the data."""
    n = 64
    go = threading.Event()
    with Pipeline() as p:
        src = CountingSource([("s", 0, n)], gulp_nframe=2)
        late = SlowToOpen(src, go, gulp_nframe=2, buffer_nframe=8)
        timer = threading.Timer(0.3, go.set)
        timer.start()
        run_checked(p)
    assert late.went and np.array_equal(late.data(0), frames(0, n))
    assert src.perf["frames"] == n and late.perf["skipped"] == 0


class FreezeCount(Collect):
    """Notes how many objects Python's collector had set aside while it ran."""

    def on_sequence(self, iseq):
        self.frozen = gc.get_freeze_count()
        super().on_sequence(iseq)


def test_a_plain_pipeline_leaves_the_garbage_collector_alone():
    """The collector is the process's: a library pipeline neither freezes nor thaws it."""
    assert gc.get_freeze_count() == 0
    with Pipeline() as p:
        sink = FreezeCount(CountingSource([("s", 0, 8)], gulp_nframe=2))
        run_checked(p)
    assert sink.frozen == 0 and gc.get_freeze_count() == 0


def test_frozen_heap_leaves_objects_alive_before_it_out_of_collections():
    """(a full collection stops every thread for as long as it walks the process's objects);
    given back to the collector afterwards, also after a failure; shared when nested."""
    assert gc.get_freeze_count() == 0
    for fail in (None, 2):
        with Pipeline() as p:
            src = CountingSource([("s", 0, 8)], gulp_nframe=2, fail_after=fail)
            sink = FreezeCount(src)
            with frozen_heap():
                if fail is None:
                    run_checked(p)
                else:
                    with pytest.raises(PipelineError):
                        p.run()
        assert sink.frozen > 1000  # numpy's and this package's objects at least
        assert gc.get_freeze_count() == 0
    with frozen_heap():
        outer = gc.get_freeze_count()
        with frozen_heap():  # nested: the same freeze, not a second one
            assert gc.get_freeze_count() == outer
        assert gc.get_freeze_count() == outer  # the inner one's end thaws nothing
    assert gc.get_freeze_count() == 0
    gc.freeze()  # the caller's own freeze: kept, not thawed by frozen_heap
    try:
        frozen = gc.get_freeze_count()
        with Pipeline() as p:
            sink = FreezeCount(CountingSource([("s", 0, 8)], gulp_nframe=2))
            with frozen_heap():
                run_checked(p)
        # not frozen again (what the pipeline made would count), not thawed (frozen objects
        # freed by their reference counts leave the count)
        assert 0 < sink.frozen <= frozen and 0 < gc.get_freeze_count() <= frozen
    finally:
        gc.unfreeze()


class SkipTally(SinkBlock):
    """Slow unguaranteed sink that checks every skip against the gap in frame index."""

    def __init__(self, iring, **kwargs):
        super().__init__(iring, guarantee=False, **kwargs)
        self.next_index = self.received = self.skipped = self.checked = 0
        self.gaps_ok = True

    def on_sequence(self, iseq):
        pass

    def on_skip(self, islice):
        self.gaps_ok &= islice.start == self.next_index
        self.skipped += islice.stop - islice.start
        self.next_index = islice.stop

    def on_data(self, ispan):
        first = ispan.data[0, 0] // WIDTH
        exact = np.array_equal(ispan.data, frames(ispan.frame_offset, ispan.nframe))
        if ispan.nframe_overwritten == 0:  # only data read before the writer came back count
            self.gaps_ok &= bool(first == self.next_index == ispan.frame_offset) and exact
            self.checked += 1
        self.gaps_ok &= ispan.frame_offset - ispan.requested_frame_offset == ispan.nframe_skipped
        self.received += ispan.nframe
        self.next_index = ispan.frame_offset + ispan.nframe
        time.sleep(0.001)


def test_slow_unguaranteed_reader_is_told_exactly_what_it_skipped():
    n = 3000
    with Pipeline() as p:
        src = CountingSource([("s", 0, n)], gulp_nframe=8)
        sink = SkipTally(src, gulp_nframe=8, buffer_factor=2)
        run_checked(p)
    assert sink.skipped > 0 and sink.checked > 0
    assert sink.received + sink.skipped == n
    assert sink.next_index == n and sink.gaps_ok
    assert sink.perf["skipped"] >= sink.skipped  # also counts frames overwritten mid-read
    assert src.perf["reserve_s"] < 0.5  # never held back


def test_two_sinks_at_different_speeds_and_end_of_data_reaches_both():
    n = 120
    with Pipeline() as p:
        src = CountingSource([("a", 0, n), ("b", 1, 7)], gulp_nframe=6)
        tri = Triple(src)
        fast = Collect(tri, gulp_nframe=5)
        slow = Collect(tri.orings[0], gulp_nframe=16, delay=0.002)
        run_checked(p)
    for sink in (fast, slow):
        assert np.array_equal(sink.data(0), 3 * frames(0, n))
        assert np.array_equal(sink.data(1), 3 * frames(0, 7))
        assert sink.ended == [("a", n), ("b", 7)]


class DataAndMask(SourceBlock):
    """Two outputs in step, like capture: data frames and a per-frame presence mask."""

    def __init__(self, n, gulp_nframe):
        super().__init__(["obs"], gulp_nframe)
        self.orings = [self.create_ring(), self.create_ring()]
        self.n = n

    def create_reader(self, name):
        return {"next": 0}

    def on_sequence(self, reader, name):
        mask = seq_header("obs.mask", 0)
        mask["_tensor"].update(dtype="u8", shape=[-1, WIDTH])
        return [seq_header("obs", 0), mask]

    def on_data(self, reader, ospans):
        i = reader["next"]
        k = min(ospans[0].nframe, self.n - i)
        ospans[0].data[:k] = frames(i, k)
        ospans[1].data[:k] = mask_frames(i, k)
        reader["next"] = i + k
        return [k, k]


def mask_frames(first: int, n: int) -> np.ndarray:
    return (frames(first, n) % 3 != 0).astype(np.uint8)


class ApplyMask(MultiTransformBlock):
    """Two inputs in lockstep -> masked data and the count of present values per frame."""

    def __init__(self, data, mask, **kwargs):
        super().__init__([data, mask], **kwargs)
        self.orings = [self.create_ring(), self.create_ring()]
        self.spans_checked = 0

    def on_sequence(self, iseqs):
        count = seq_header(iseqs[0].name + ".count", 0)
        count["_tensor"].update(shape=[-1], labels=["time"], scales=[None], units=[None])
        return [copy.deepcopy(iseqs[0].header), count]

    def on_data(self, ispans, ospans):
        data, mask = ispans
        assert data.frame_offset == mask.frame_offset and data.nframe == mask.nframe
        ospans[0].data[...] = data.data * mask.data
        ospans[1].data[...] = mask.data.sum(axis=1)
        self.spans_checked += 1
        return None


def test_multi_transform_reads_two_rings_in_lockstep_into_two_outputs():
    n = 101
    with Pipeline() as p:
        src = DataAndMask(n, gulp_nframe=7)
        both = ApplyMask(src.orings[0], src.orings[1], gulp_nframe=4)
        masked = Collect(both.orings[0])
        counts = Collect(both.orings[1])
        run_checked(p)
    m = mask_frames(0, n)
    assert np.array_equal(masked.data(0), frames(0, n) * m)
    assert np.array_equal(counts.data(0).ravel(), m.sum(axis=1))
    assert both.spans_checked == -(-n // 4)
    assert counts.seqs[0]["header"]["_tensor"]["shape"] == [-1]


ENDLESS = [("live", 0, None)]


@pytest.mark.parametrize("where", ["source", "transform", "transform.on_sequence", "sink"])
def test_exception_in_a_block_stops_everything_promptly(where):
    with Pipeline() as p:
        src = CountingSource(ENDLESS, gulp_nframe=4,
                             fail_after=200 if where == "source" else None)
        tri = Triple(src, name="tripler", fail_after=200 if where == "transform" else None,
                     fail_in_on_sequence=where == "transform.on_sequence")
        sink = Collect(tri, delay=0.001, fail_after=100 if where == "sink" else None)
        sink2 = Collect(src)  # another reader, blocked in acquire or reserve when it happens
        with pytest.raises(PipelineError) as info:
            run_checked(p)
    failed = {"source": src, "sink": sink}.get(where, tri)
    assert failed.name in str(info.value) and info.value.block_name == failed.name
    assert isinstance(info.value.__cause__, ValueError) and "boom" in str(info.value.__cause__)
    if where != "transform.on_sequence":  # sinks finished their sequence
        assert sink.ended and sink2.ended


def test_failure_stops_within_two_seconds():
    with Pipeline() as p:
        src = CountingSource(ENDLESS, gulp_nframe=4)
        Triple(src, fail_after=50)
        Collect(src, delay=0.001)
        t0 = time.monotonic()
        with pytest.raises(PipelineError):
            run_checked(p)
        assert time.monotonic() - t0 < 2


def test_shutdown_from_another_thread_finishes_sinks():
    with Pipeline() as p:
        src = CountingSource(ENDLESS, gulp_nframe=4)
        sink = Collect(Triple(src), delay=0.001)
        timer = threading.Timer(0.2, p.shutdown)
        timer.start()
        elapsed = run_checked(p)
        timer.join()
    assert elapsed < 2 and p.stop_reason == "shutdown() called"
    assert sink.ended == [("live", sink.nframe)] and sink.nframe > 0


def test_shutdown_wakes_blocks_waiting_on_a_stuck_writer():
    """The source hangs until the sink has finished: only interrupting the rings can get the
    transform and the sink out of their acquire (end of data would never come)."""
    release = threading.Event()

    class Stuck(CountingSource):
        def on_data(self, reader, ospans):
            if reader["next"]:
                release.wait(10)
                return [0]
            return super().on_data(reader, ospans)

    class Releasing(Collect):
        def on_sequence_end(self, iseq):
            super().on_sequence_end(iseq)
            release.set()

    with Pipeline() as p:
        sink = Releasing(Triple(Stuck(ENDLESS, gulp_nframe=4)))
        timer = threading.Timer(0.1, p.shutdown)
        timer.start()
        elapsed = run_checked(p)
        timer.join()
    assert elapsed < 2 and sink.ended == [("live", 4)]


SIGNAL_SCRIPT = textwrap.dedent("""
    import signal, sys, threading
    sys.path.insert(0, {testdir!r})
    from test_pipeline import ENDLESS, Collect, CountingSource, Triple
    from xengine_block.runtime.pipeline import Pipeline

    class Announce(Collect):
        def on_data(self, ispan):
            super().on_data(ispan)
            if self.nframe == ispan.nframe:
                print("running", flush=True)

    before = signal.getsignal(signal.{sig})
    with Pipeline() as p:
        sink = Announce(Triple(CountingSource(ENDLESS, gulp_nframe=4)), delay=0.001)
        p.run()
    print("stopped:", p.stop_reason, "threads:", threading.active_count(),
          "ended:", sink.ended == [("live", sink.nframe)],
          "restored:", signal.getsignal(signal.{sig}) is before, flush=True)
""")


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_signal_stops_pipeline_cleanly(tmp_path, sig):
    script = tmp_path / "run_pipeline.py"
    script.write_text(SIGNAL_SCRIPT.format(testdir=os.path.dirname(__file__), sig=sig))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "running"
        t0 = time.monotonic()
        proc.send_signal(getattr(signal, sig))
        out, err = proc.communicate(timeout=10)
        elapsed = time.monotonic() - t0
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert elapsed < 2
    assert f"stopped: {sig} received threads: 1 ended: True restored: True" in out, out + err


def test_signal_handlers_only_from_the_main_thread():
    seen = {}

    class Peek(Collect):
        def on_data(self, ispan):
            seen.setdefault(threading.current_thread().name, signal.getsignal(signal.SIGTERM))

    def build_and_run():
        with Pipeline() as p:
            Peek(CountingSource([("s", 0, 5)], gulp_nframe=5), name="peek")
            p.run()
        return p

    original = signal.getsignal(signal.SIGTERM)
    t = threading.Thread(target=build_and_run)
    t.start()
    t.join()
    assert seen.pop("peek") is original  # run() from a thread: handlers untouched
    p = build_and_run()
    assert seen["peek"] == p._on_signal  # from the main thread: ours while running
    assert signal.getsignal(signal.SIGTERM) is original  # and restored after


def test_counters_readable_while_running_and_monitor_prints_a_line_per_block():
    stream = io.StringIO()
    samples = []
    with Pipeline(monitor_interval=0.05, monitor_stream=stream) as p:
        src = CountingSource([("s", 0, 300)], gulp_nframe=3)
        sink = Collect(src, name="slow-sink", delay=0.001)
        stop = threading.Event()

        def sample():
            while not stop.wait(0.02):
                samples.append(sink.perf["frames"])

        sampler = threading.Thread(target=sample)
        sampler.start()
        run_checked(p)
        stop.set()
        sampler.join()
    assert any(0 < s < 300 for s in samples) and samples == sorted(samples)
    perf = sink.perf
    assert perf["frames"] == 300 and perf["process_s"] > 0.08  # 100 gulps of 1 ms
    assert set(perf) >= {"frames", "bytes", "skipped", "acquire_s", "process_s", "reserve_s"}
    lines = stream.getvalue().splitlines()
    assert len(lines) >= 4 and len(lines) % 2 == 0
    assert any(line.startswith("slow-sink") for line in lines)
    assert lines[-1].startswith("slow-sink") and " 300 fr " in lines[-1]


def test_default_pipeline_nesting_and_blocks_as_rings():
    with Pipeline() as outer:
        src = CountingSource([("s", 0, 3)], gulp_nframe=2)
        with Pipeline() as inner:
            assert get_default_pipeline() is inner
        assert get_default_pipeline() is outer
        sink = Collect(src)
    assert src.pipeline is outer and sink.irings == [src.orings[0]]
    assert outer.blocks == [src, sink] and inner.blocks == []


def test_empty_source_ends_the_pipeline():
    with Pipeline() as p:
        sink = Collect(Triple(CountingSource([], gulp_nframe=2)))
        run_checked(p)
    assert sink.seqs == [] and sink.ended == []


def _os_thread_name(tid: int) -> str:
    with open(f"/proc/self/task/{tid}/comm") as fh:
        return fh.read().strip()


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="needs Linux /proc")
def test_block_threads_carry_their_names_in_the_os_and_pass_them_on():
    """``top -H`` and per-role CPU accounting (bench_pipeline) see each block's name, also on
    the threads a block starts (spead2's receiver, the native workers)."""
    seen: dict[str, str] = {}

    class Named(Collect):
        def on_data(self, ispan):
            seen["block"] = _os_thread_name(threading.get_native_id())
            t = threading.Thread(target=lambda: seen.setdefault(
                "child", _os_thread_name(threading.get_native_id())))
            t.start()
            t.join()
            super().on_data(ispan)

    with Pipeline() as p:
        src = CountingSource([("s", 0, 4)], 2)
        Named(src, name="QuiteALongBlockName_7")
        run_checked(p)
    assert seen == {"block": "QuiteALongBlock", "child": "QuiteALongBlock"}  # 15 bytes


def test_a_finished_pipeline_gives_its_ring_memory_to_the_next_without_a_collection():
    # Blocks and rings refer to each other, so without the release at the end of run() their
    # buffers would wait for a full garbage collection (disabled here) to reach the pool.
    import gc

    from xengine_block.runtime.memory import HOST_POOL

    def once() -> None:
        with Pipeline() as p:
            src = CountingSource([("obs", 0, 40_000)], gulp_nframe=8192)  # ~2 MiB gulps
            tri = Triple(src, gulp_nframe=8192)
            sink = Collect(tri, gulp_nframe=8192)
            run_checked(p)
        assert np.array_equal(sink.data(0), 3 * frames(0, 40_000))

    gc.disable()
    try:
        once()
        before = HOST_POOL.reused
        once()
        assert HOST_POOL.reused - before == 2  # both rings' buffers, faulted in already
    finally:
        gc.enable()
