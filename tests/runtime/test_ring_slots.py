"""Frame slots (runtime.ring.SlotWriter): reserved ahead, filled in any order, committed in
order, read in place; the capture's zero copy rests on these."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest

from tests.helpers.rings import FRAME, frames, header
from xengine_block.runtime.ring import Ring, RingWouldBlock, SlotWriter

pytestmark = pytest.mark.timeout(30)


def test_slots_filled_out_of_order_are_read_in_place_in_order():
    ring = Ring()
    with ring.begin_writing() as w:
        slots = SlotWriter(w, FRAME, nslot=6, gulp_nframe=3)
        views = [slots.reserve() for _ in range(6)]
        for i in (4, 1, 5, 0, 3, 2):  # someone else fills them, in any order
            views[i][...] = frames(i, 1)[0]
        with w.begin_sequence(header(), 3):
            iseq = ring.open_earliest_sequence(guarantee=True)
            for _ in range(6):
                slots.commit()
                views.append(slots.reserve())
            with iseq.acquire(0, 3) as a, iseq.acquire(3, 3) as b:
                assert np.array_equal(a.data, frames(0, 3))
                assert np.array_equal(b.data, frames(3, 3))
                # in place: the reader's frames are the slots' bytes
                assert all(np.shares_memory(a.data[i], views[i]) for i in range(3))
                assert all(np.shares_memory(b.data[i], views[3 + i]) for i in range(3))
            iseq.close()
        slots.cancel()
    assert ring.total_bytes % (3 * FRAME) == 0  # gulps never cross the buffer's end


def test_slots_between_sequences_belong_to_none():
    ring = Ring()
    with ring.begin_writing() as w:
        slots = SlotWriter(w, FRAME, nslot=8, gulp_nframe=2)
        views = [slots.reserve() for _ in range(8)]
        for i, v in enumerate(views):
            v[...] = frames(i, 1)[0]
        with w.begin_sequence(header("a", 0), 2):
            for _ in range(3):
                slots.commit()  # frames 0-2
        for _ in range(2):
            slots.commit()  # 3-4: space between the sequences
        with w.begin_sequence(header("b", 100), 2):
            for _ in range(3):
                slots.commit()  # frames 5-7 are sequence b's first frames
    got = {}
    for iseq in ring.read(guarantee=False):
        got[iseq.name] = np.concatenate([s.data.copy() for s in iseq.read(8)])
    assert list(got) == ["a", "b"]
    assert np.array_equal(got["a"], frames(0, 3))
    assert np.array_equal(got["b"], frames(5, 3))


def test_slots_of_several_frames_and_a_sequence_ending_inside_one():
    """Slots of 4 frames with gulps of 3 (the buffer a multiple of both); ``commit(2)`` ends
    sequence a two frames into a slot: a reader waiting there sees the end, not the rest of the
    slot, and sequence b begins at the next slot."""
    ring = Ring()
    with ring.begin_writing() as w:
        slots = SlotWriter(w, FRAME, nslot=4, gulp_nframe=3, slot_nframe=4)
        views = [slots.reserve() for _ in range(3)]
        for i, v in enumerate(views):
            v[...] = frames(4 * i, 4).reshape(-1)
        with w.begin_sequence(header("a", 0), 3):
            iseq = ring.open_earliest_sequence(guarantee=True)
            slots.commit()
            slots.commit(2)  # frames 4, 5 end a; 6, 7 are space
        with w.begin_sequence(header("b", 100), 3):
            slots.commit()  # frames 8-11
        got = np.concatenate([s.data.copy() for s in iseq.read(3)])
        iseq.close()
    assert np.array_equal(got, frames(0, 6))
    names = {q.name: np.concatenate([s.data.copy() for s in q.read(4)])
             for q in ring.read(guarantee=False)}
    assert np.array_equal(names["b"], frames(8, 4))
    assert ring.total_bytes % (12 * FRAME) == 0  # neither gulps nor slots cross the end


@contextmanager
def slot_sequence(guarantee: bool) -> Iterator[tuple[Ring, SlotWriter, object]]:
    """A ring with frame slots, one sequence open and one reader of it."""
    ring = Ring()
    with ring.begin_writing() as w:
        slots = SlotWriter(w, FRAME, nslot=2, gulp_nframe=2)
        with w.begin_sequence(header(), 2):
            iseq = ring.open_earliest_sequence(guarantee=guarantee)
            yield ring, slots, iseq
            iseq.close()


def test_a_guaranteed_reader_holds_the_slots_back():
    with slot_sequence(guarantee=True) as (ring, slots, iseq):
        capacity = ring.total_bytes // FRAME
        n = 0
        while True:
            try:
                slots.reserve(nonblocking=True)[...] = frames(n, 1)[0]
            except RingWouldBlock:
                break
            slots.commit()
            n += 1
        assert n == capacity  # a ring-full, then back-pressure, as for spans
        done = threading.Event()

        def more() -> None:
            slots.reserve()[...] = frames(n, 1)[0]
            slots.commit()
            done.set()

        t = threading.Thread(target=more)
        t.start()
        assert not done.wait(0.2)
        with iseq.acquire(0, 2) as span:  # nothing overwritten while it was held
            assert np.array_equal(span.data, frames(0, 2))
        with iseq.acquire(2, 2):  # releases frames 0-1: the writer moves on
            pass
        assert done.wait(5)
        t.join()


def test_an_unguaranteed_reader_is_overtaken_and_told():
    with slot_sequence(guarantee=False) as (ring, slots, iseq):
        capacity = ring.total_bytes // FRAME
        for i in range(capacity + 4):  # never waits for the unguaranteed reader
            slots.reserve(nonblocking=True)[...] = frames(i, 1)[0]
            slots.commit()
        with iseq.acquire(0, 4) as span:
            assert span.nframe_skipped > 0
            assert np.array_equal(span.data, frames(span.frame_offset, span.nframe))


def test_cancel_gives_the_slots_back_and_reallocation_keeps_their_bytes():
    ring = Ring()
    with ring.begin_writing() as w:
        slots = SlotWriter(w, FRAME, nslot=4, gulp_nframe=1)
        first = [slots.reserve() for _ in range(3)]
        slots.cancel()  # e.g. a capture that ended: those bytes are reserved again
        again = [slots.reserve() for _ in range(3)]
        assert all(np.shares_memory(a, b) for a, b in zip(first, again, strict=True))
        for i, v in enumerate(again):
            v[...] = frames(i, 1)[0]
        ring.resize(4 * FRAME, 64 * FRAME)  # a reader grows the ring: the slots' bytes move
        with w.begin_sequence(header(), 1):
            for _ in range(3):
                slots.commit()
        with ring.open_earliest_sequence(guarantee=False) as iseq, iseq.acquire(0, 3) as span:
            assert np.array_equal(span.data, frames(0, 3))


def test_slots_and_spans_do_not_mix():
    ring = Ring()
    with ring.begin_writing() as w:
        slots = SlotWriter(w, FRAME, nslot=2)
        with w.begin_sequence(header(), 2) as oseq:
            slots.reserve()
            with pytest.raises(RuntimeError, match="frame slots"):
                oseq.reserve(1)
            for _ in range(ring.total_bytes // FRAME - 1):
                slots.reserve()
            with pytest.raises(RuntimeError, match="slots reserved exceed"):
                slots.reserve()
            slots.cancel()
