"""Ring semantics: sequences, spans, wrap, guarantees, skips, end of data, interrupts."""

from __future__ import annotations

import mmap
import threading
import time

import numpy as np
import pytest

from tests.helpers.rings import FRAME, frames, header, resident_pages
from xengine_block.runtime.memory import HOST_POOL, HostPool, populate
from xengine_block.runtime.ring import (
    EndOfDataStop,
    Ring,
    RingInterrupted,
    RingWouldBlock,
    Tensor,
)

pytestmark = pytest.mark.timeout(30)  # a deadlock fails instead of hanging


def write(oseq, first: int, n: int) -> None:
    with oseq.reserve(n) as span:
        span.data[...] = frames(first, n)
        span.commit(n)


def buffer_offset(span, ring: Ring) -> int:
    return span.data.ctypes.data - ring._buf.ctypes.data


@pytest.mark.parametrize("dtype, base, frame_shape, nbyte", [
    ("i8", np.int8, (3, 4), 12), ("u8", np.uint8, (5,), 5), ("f32", np.float32, (2,), 8),
    ("cf32", np.complex64, (2,), 16), ("ci8", np.int8, (3, 2), 6),
    ("ci32", np.int32, (3, 2), 24), ("ci64", np.int64, (3, 2), 48),
])
def test_tensor_dtypes(dtype, base, frame_shape, nbyte):
    shape = [-1, 3, 4] if dtype == "i8" else [-1, frame_shape[0]]
    t = Tensor.from_header({"_tensor": {"dtype": dtype, "shape": shape}})
    assert t.numpy_dtype == np.dtype(base)
    assert t.numpy_frame_shape == frame_shape
    assert t.frame_nbyte == nbyte


@pytest.mark.parametrize("tensor", [
    {"dtype": "u8", "shape": [4, 5]}, {"dtype": "u8", "shape": [4, -1]},
    {"dtype": "u8", "shape": [-1, -1]}, {"dtype": "c13", "shape": [-1, 4]}, {"dtype": "u8"},
])
def test_bad_tensor_is_rejected(tensor):
    with pytest.raises(ValueError):
        Tensor.from_header({"_tensor": tensor})


def test_span_data_shape_and_dtype_for_complex_ints():
    ring = Ring()
    with ring.begin_writing() as w, w.begin_sequence(header(dtype="ci32", frame_shape=(3,)),
                                                     4) as oseq:
        with oseq.reserve(4) as span:
            assert span.data.shape == (4, 3, 2) and span.data.dtype == np.int32
            span.data[..., 0], span.data[..., 1] = 5, -7
            span.commit(4)
    with ring.open_earliest_sequence() as iseq, iseq.acquire(0, 4) as ispan:
        assert ispan.data.shape == (4, 3, 2) and ispan.data.dtype == np.int32
        assert not ispan.data.flags.writeable
        assert (ispan.data[..., 0] == 5).all() and (ispan.data[..., 1] == -7).all()


def test_sequences_headers_data_and_end_of_data():
    ring = Ring()
    ring.resize(10 * FRAME, 100 * FRAME)
    hdrs = [header("obs-a", 1000), header("obs-b", 5000)]
    with ring.begin_writing() as w:
        for k, hdr in enumerate(hdrs):
            with w.begin_sequence(hdr, gulp_nframe=10) as oseq:
                write(oseq, 100 * k, 10)
                write(oseq, 100 * k + 10, 7)
    seen = []
    for iseq in ring.read(guarantee=False):
        assert iseq.header == hdrs[len(seen)]
        assert (iseq.name, iseq.time_tag) == (hdrs[len(seen)]["name"], hdrs[len(seen)]["time_tag"])
        got = np.concatenate([s.data.copy() for s in iseq.read(4)])
        assert np.array_equal(got, frames(100 * len(seen), 17))  # last span cut at the end
        seen.append(iseq.name)
        with pytest.raises(EndOfDataStop):
            iseq.acquire(17, 1)
    assert seen == ["obs-a", "obs-b"]


def test_partial_commit_and_uncommitted_span():
    ring = Ring()
    with ring.begin_writing() as w, w.begin_sequence(header(), 8, 32) as oseq:
        with oseq.reserve(8) as span:
            span.data[...] = 1  # never committed: Bifrost's default commit is 0 frames
        with oseq.reserve(8) as span:
            span.data[:3] = frames(0, 3)
            span.commit(3)
        write(oseq, 3, 5)
    with ring.open_earliest_sequence() as iseq, iseq.acquire(0, 20) as ispan:
        assert ispan.nframe == 8
        assert np.array_equal(ispan.data, frames(0, 8))


def test_spans_across_the_wrap_are_contiguous_views_and_exact():
    ring = Ring()
    wgulp, rgulp, total = 3, 5, 200
    wrapped = {"write": 0, "read": 0}
    with ring.begin_writing() as w:
        oseq = w.begin_sequence(header(), wgulp)
        iseq = ring.open_earliest_sequence(guarantee=True)
        iseq.resize(rgulp, buffer_factor=2.5)
        assert ring.total_bytes % (wgulp * FRAME) and ring.total_bytes % (rgulp * FRAME)
        written = read = 0
        while read < total:
            if written < total:
                try:
                    with oseq.reserve(wgulp, nonblocking=True) as span:
                        off = buffer_offset(span, ring)
                        wrapped["write"] += off + span.data.nbytes > ring.total_bytes
                        assert np.shares_memory(span.data, ring._buf)
                        span.data[...] = frames(written, wgulp)
                        span.commit(wgulp)
                    written += wgulp
                    continue
                except RingWouldBlock:
                    pass
            if written == total or written - read >= rgulp:
                if written >= total and oseq._seq.end is None:
                    oseq.end()
                with iseq.acquire(read, rgulp) as ispan:
                    off = buffer_offset(ispan, ring)
                    wrapped["read"] += off + ispan.data.nbytes > ring.total_bytes
                    assert ispan.data.flags.c_contiguous and np.shares_memory(ispan.data, ring._buf)
                    assert ispan.nframe_skipped == 0
                    assert np.array_equal(ispan.data, frames(read, ispan.nframe))
                    read += ispan.nframe
        iseq.close()
    assert wrapped["write"] >= 3 and wrapped["read"] >= 3, wrapped


def fill(oseq, first: int) -> int:
    """Write single frames until the ring refuses one; return how many were written."""
    n = 0
    while True:
        try:
            with oseq.reserve(1, nonblocking=True) as span:
                span.data[...] = frames(first + n, 1)
                span.commit(1)
        except RingWouldBlock:
            return n
        n += 1


def test_guaranteed_reader_holds_the_writer_back():
    ring = Ring()
    with ring.begin_writing() as w, w.begin_sequence(header(), 4) as oseq:
        iseq = ring.open_earliest_sequence(guarantee=True)
        iseq.resize(4, buffer_factor=3)
        capacity = ring.total_bytes // FRAME
        assert fill(oseq, 0) == capacity  # exactly a ring-full, then back-pressure
        # Acquiring further on releases what lies before: the writer may move on by that much.
        with iseq.acquire(3, 4) as ispan:
            assert np.array_equal(ispan.data, frames(3, 4))
        assert fill(oseq, capacity) == 3
        with iseq.acquire(3, capacity) as ispan:  # nothing was overwritten
            assert np.array_equal(ispan.data, frames(3, capacity))


def test_blocked_writer_resumes_when_reader_moves_on():
    ring = Ring()
    with ring.begin_writing() as w, w.begin_sequence(header(), 2) as oseq:
        iseq = ring.open_earliest_sequence(guarantee=True)
        capacity = fill(oseq, 0)
        done = threading.Event()

        def writer():
            write(oseq, capacity, 1)
            done.set()

        t = threading.Thread(target=writer)
        t.start()
        assert not done.wait(0.1)  # blocked by the guarantee
        iseq.acquire(1, 1).release()
        assert done.wait(2)
        t.join()
        with iseq.acquire(1, capacity) as ispan:
            assert np.array_equal(ispan.data, frames(1, capacity))


def test_unguaranteed_reader_is_told_exactly_what_it_skipped():
    ring = Ring()
    gulp = 7
    tally = {"received": 0, "skipped": 0, "gaps": 0}

    def walk(iseq, offset: int, written: int | None) -> int:
        """Read gulps from offset while data are there (all of them once written is None)."""
        while written is None or offset + gulp <= written:
            try:
                ispan = iseq.acquire(offset, gulp)
            except EndOfDataStop:
                break
            if ispan.nframe:  # the gap in frame index is exactly the skip count
                assert ispan.frame_offset - offset == ispan.nframe_skipped
                assert np.array_equal(ispan.data, frames(ispan.frame_offset, ispan.nframe))
            else:
                assert ispan.nframe_skipped == gulp  # wholly overtaken
            tally["received"] += ispan.nframe
            tally["skipped"] += ispan.nframe_skipped
            tally["gaps"] += ispan.nframe_skipped > 0
            offset += gulp
        return offset

    with ring.begin_writing() as w:
        with w.begin_sequence(header(), 5) as oseq:
            iseq = ring.open_earliest_sequence(guarantee=False)
            iseq.resize(gulp)
            capacity = ring.total_bytes // FRAME
            for i in range(0, 100, 5):  # never blocks although nobody reads
                with oseq.reserve(5, nonblocking=True) as span:
                    span.data[...] = frames(i, 5)
                    span.commit(5)
            offset = walk(iseq, 0, 100)
            assert tally["skipped"] >= 100 - capacity
            for i in range(100, 300, 5):
                write(oseq, i, 5)
        walk(iseq, offset, None)
        iseq.close()
    assert tally["received"] + tally["skipped"] == 300
    assert tally["gaps"] >= 2 and tally["received"] > capacity


def test_two_threaded_readers_get_everything():
    ring = Ring()
    nframe = 400
    results: dict[int, np.ndarray] = {}
    opened = threading.Barrier(3)

    def reader(gulp: int) -> None:
        with ring.open_earliest_sequence(guarantee=True) as iseq:
            iseq.resize(gulp)
            opened.wait()
            results[gulp] = np.concatenate([s.data.copy() for s in iseq.read(gulp)])

    threads = [threading.Thread(target=reader, args=(g,)) for g in (3, 11)]
    with ring.begin_writing() as w:
        with w.begin_sequence(header(), 4) as oseq:
            for t in threads:
                t.start()
            opened.wait()
            for i in range(0, nframe, 4):
                write(oseq, i, 4)
    for t in threads:
        t.join(5)
    assert np.array_equal(results[3], frames(0, nframe))
    assert np.array_equal(results[11], frames(0, nframe))


def test_open_sequence_by_name_time_tag_earliest_latest():
    ring = Ring()
    ring.resize(4 * FRAME, 64 * FRAME)
    with ring.begin_writing() as w:
        for k, tt in enumerate((100, 200, 300)):
            with w.begin_sequence(header(f"s{k}", tt), 4) as oseq:
                write(oseq, 10 * k, 4)
    assert ring.open_earliest_sequence().name == "s0"
    assert ring.open_latest_sequence().name == "s2"
    assert ring.open_sequence("s1").time_tag == 200
    assert ring.open_sequence_at(250).name == "s1"
    assert ring.open_sequence_at(300).name == "s2"
    with pytest.raises(ValueError):
        ring.open_sequence("nope")
    with pytest.raises(ValueError):
        ring.open_sequence_at(99)
    iseq = ring.open_sequence("s1", guarantee=False)
    with iseq.acquire(0, 4) as ispan:
        assert np.array_equal(ispan.data, frames(10, 4))
    iseq.increment()
    assert iseq.name == "s2"
    with pytest.raises(EndOfDataStop):
        iseq.increment()


def test_sequence_rules():
    ring = Ring()
    with ring.begin_writing() as w:
        with w.begin_sequence(header("a", 1), 1):
            with pytest.raises(RuntimeError, match="previous sequence still open"):
                w.begin_sequence(header("b", 2), 1)
        with pytest.raises(ValueError, match="unique"):
            w.begin_sequence(header("a", 3), 1)
        bad = header("c", 4)
        bad["when"] = np.float64  # not JSON
        with pytest.raises(TypeError, match="JSON"):
            w.begin_sequence(bad, 1)
    with pytest.raises(RuntimeError, match="one writer"):
        ring.begin_writing()


def test_empty_ring_ends_cleanly():
    ring = Ring()
    with ring.begin_writing():
        pass
    with pytest.raises(EndOfDataStop):
        ring.open_earliest_sequence()
    assert list(ring.read()) == []


def test_interrupt_wakes_blocked_reader_and_writer():
    data_ring, full_ring = Ring(), Ring()
    errors: list[BaseException] = []
    data_ring.begin_writing().begin_sequence(header(), 1)
    writer = full_ring.begin_writing()
    oseq = writer.begin_sequence(header(), 1)
    iseq = full_ring.open_earliest_sequence(guarantee=True)
    fill(oseq, 0)

    def blocked(fn):
        try:
            fn()
        except RingInterrupted as exc:
            errors.append(exc)

    threads = [threading.Thread(target=blocked,
                                args=(lambda: data_ring.open_earliest_sequence().acquire(0, 1),)),
               threading.Thread(target=blocked, args=(lambda: oseq.reserve(1),))]
    for t in threads:
        t.start()
    time.sleep(0.05)
    t0 = time.monotonic()
    data_ring.interrupt()
    full_ring.interrupt()
    for t in threads:
        t.join(2)
    assert time.monotonic() - t0 < 1 and len(errors) == 2
    with pytest.raises(RingInterrupted):
        iseq.acquire(0, 1)


def test_resize_moves_data_and_keeps_open_spans_valid():
    ring = Ring()
    with ring.begin_writing() as w, w.begin_sequence(header(), 3) as oseq:
        iseq = ring.open_earliest_sequence(guarantee=True)
        iseq.resize(3, buffer_factor=4)
        c = fill(oseq, 0)
        iseq.acquire(c - 4, 1).release()
        w = c + fill(oseq, c)  # these wrap around the buffer
        assert w == 2 * c - 4
        held = iseq.acquire(c + 2, 7)
        wspan = oseq.reserve(2)
        wspan.data[...] = frames(w, 2)
        ring.resize(10 * FRAME, 1000 * FRAME)  # reallocates under both open spans
        assert ring.total_bytes >= 1000 * FRAME
        wspan.commit(2)
        wspan.close()
        assert np.array_equal(held.data, frames(c + 2, 7))
        with iseq.acquire(c + 2, w - c) as ispan:
            assert np.array_equal(ispan.data, frames(c + 2, w - c))
        ring.resize(FRAME, FRAME)  # never shrinks
        assert ring.total_bytes >= 1000 * FRAME


def test_spans_larger_than_the_ring_grow_it():
    ring = Ring()
    with ring.begin_writing() as w, w.begin_sequence(header(), 1) as oseq:
        iseq = ring.open_earliest_sequence(guarantee=True)
        write(oseq, 0, 50)
        assert ring.contiguous_bytes >= 50 * FRAME
        with iseq.acquire(0, 50) as ispan:
            assert np.array_equal(ispan.data, frames(0, 50))
        # Room for the writer's gulp plus two of the reader's: neither can starve the other.
        assert ring.total_bytes >= 3 * 50 * FRAME


def test_a_sized_ring_allocates_once_before_the_first_spans():
    # The pipeline's order: the writer begins its sequence, the reader sizes the ring for its
    # gulps, then data flow. One buffer, made at the reader's resize; the first reserve and
    # acquire (whose floor is the writer's gulp plus two of the reader's) find it big enough,
    # so no reallocation lands on the first gulp.
    ring = Ring()
    with ring.begin_writing() as w, w.begin_sequence(header(), 7) as oseq:
        assert ring.total_bytes == 0  # deferred: its reader has not sized it yet
        iseq = ring.open_earliest_sequence(guarantee=True)
        iseq.resize(5, buffer_factor=1)  # asks for less than the floor: 7 + 2 * 5 frames
        sized, generation = ring.total_bytes, ring._generation
        assert sized >= 17 * FRAME and generation == 1
        write(oseq, 0, 7)
        with iseq.acquire(0, 5) as ispan:
            assert np.array_equal(ispan.data, frames(0, 5))
        assert (ring.total_bytes, ring._generation) == (sized, generation)


def test_allocator_provides_the_memory_and_data_stay_exact_across_the_wrap():
    pools: list[np.ndarray] = []

    def allocate(nbyte: int) -> np.ndarray:
        pools.append(np.full(nbyte + 5, 0xAA, np.uint8))  # odd start: the ring aligns it
        return pools[-1][5:]

    ring = Ring(allocator=allocate)
    assert ring.allocator is allocate
    wgulp, rgulp, total = 3, 5, 120
    with ring.begin_writing() as w:
        oseq = w.begin_sequence(header(), wgulp)
        iseq = ring.open_earliest_sequence(guarantee=True)
        iseq.resize(rgulp, buffer_factor=2.5)
        with pytest.raises(RuntimeError, match="already holds"):
            ring.set_allocator(None)
        written = read = wrapped = 0
        while read < total:
            if written < total and written - read + wgulp <= ring.total_bytes // FRAME - rgulp:
                write(oseq, written, wgulp)
                written += wgulp
                continue
            if written >= total and oseq._seq.end is None:
                oseq.end()
            with iseq.acquire(read, rgulp) as ispan:
                assert np.shares_memory(ispan.data, pools[-1])  # the allocator's memory
                wrapped += buffer_offset(ispan, ring) + ispan.data.nbytes > ring.total_bytes
                assert np.array_equal(ispan.data, frames(read, ispan.nframe))
                read += ispan.nframe
        iseq.close()
    assert pools and wrapped >= 3
    assert ring._buf.ctypes.data % 64 == 0 and np.shares_memory(ring._buf, pools[-1])
    short = Ring(allocator=lambda n: np.empty(n - 1, np.uint8))
    with pytest.raises(ValueError, match="allocator"):
        short.resize(64)


def test_populate_faults_every_page_in_and_keeps_the_contents():
    area = mmap.mmap(-1, 32 << 20)  # a fresh anonymous mapping: nothing resident yet
    fresh = np.frombuffer(area, np.uint8)
    resident, total = resident_pages(fresh)
    assert resident < total  # else this test could not tell
    populate(fresh)
    assert resident_pages(fresh) == (total, total)
    del fresh
    area.close()
    data = np.random.default_rng(1).integers(0, 256, (3, 5001), dtype=np.uint8)
    before = data.copy()
    populate(data)  # small and not page-aligned: touched, unchanged
    np.testing.assert_array_equal(data, before)


def test_ring_memory_is_faulted_in_when_it_is_allocated():
    """Frames at line rate from the first one: the ring takes its page faults when sized,
    not while the capture writes (a fresh page costs far more than a write to a mapped one)."""
    ring = Ring()
    ring.resize(8 << 20, 24 << 20)
    resident, total = resident_pages(ring._buf)
    assert resident == total


def test_host_pool_reuses_memory_only_when_no_view_is_left():
    """A finished ring's memory serves the next ring of the size, faulted in already; never
    while anything can still see it; the pool keeps at most its limit."""
    pool = HostPool(limit=8 << 20)
    a = pool.take(3 << 20)  # rounded up to whole huge pages: 4 MiB
    assert a.nbytes == 4 << 20 and resident_pages(a)[0] == resident_pages(a)[1]
    addr = a.ctypes.data
    view = a[100:200]
    del a
    b = pool.take(3 << 20)
    assert b.ctypes.data != addr and pool.reused == 0  # the view still holds the first
    del view
    c = pool.take(4 << 20)
    assert c.ctypes.data == addr and pool.reused == 1
    d = pool.take(8 << 20)
    del b, c, d  # 4 + 4 + 8 MiB given back: the last does not fit under the limit
    assert pool._bytes == 8 << 20
    pool.release()
    assert pool._bytes == 0


def test_ring_memory_comes_back_when_its_pipeline_is_gone():
    """Rings allocate from runtime.memory's pool: a second ring of the size gets the first's
    memory once the first (and every view of it) is gone."""
    import gc

    ring = Ring()
    ring.resize(8 << 20, 24 << 20)
    addr = ring._buf.ctypes.data
    before = HOST_POOL.reused
    del ring
    gc.collect()
    again = Ring()
    again.resize(8 << 20, 24 << 20)
    assert HOST_POOL.reused == before + 1 and again._buf.ctypes.data == addr
