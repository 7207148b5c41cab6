"""Ring buffer of sequences of frames, with the semantics of Bifrost's ``ring2``
(docs/design.md, "Rings and blocks").

Names and behaviour follow Bifrost (``bifrost/ring2.py`` over ``src/ring_impl.cpp``) so blocks
port to real Bifrost by changing imports:

- One writer: ``ring.begin_writing()`` -> ``writer.begin_sequence(header, gulp_nframe,
  buf_nframe)`` -> ``oseq.reserve(nframe)`` -> ``ospan.data[...] = ...; ospan.commit(n)``.
  A write span commits what ``commit()`` recorded when it closes (default 0, as in Bifrost, so a
  block that raises never publishes garbage); committing less than reserved is allowed.
- Readers: ``ring.open_earliest_sequence(guarantee=True)`` (or by name, time_tag, latest) ->
  ``iseq.acquire(frame_offset, nframe)`` -> ``ispan.data`` -> ``ispan.release()``.
- Guaranteed readers hold the writer back; unguaranteed readers never block it and learn how
  many frames they lost from ``ispan.nframe_skipped``.
- End of data: a finished sequence truncates the last span; acquiring at or past its end
  raises :class:`EndOfDataStop`, as does moving past the last sequence once writing has ended.

Memory: one byte buffer of ``span`` bytes followed by a *ghost* region of ``ghost`` bytes (the
largest span ever reserved or acquired). A span that crosses the end of the buffer is still one
contiguous numpy view: writes run on into the ghost and are mirrored to the front at commit;
reads that wrap have the front mirrored into the ghost once (tracked, so several readers pay
once). Only the wrapped part is ever copied, once per lap. Offsets are absolute Python ints, so
they never overflow and the buffer size need not be a power of two (Bifrost's C offsets must).
The buffer comes from ``np.empty`` unless the ring has an *allocator* (``Ring(allocator=fn)`` or
:meth:`Ring.set_allocator`), e.g. device-visible memory so a consumer can hand spans to a device
without copying them (the NPU backend's host-only buffer objects).

Differences from Bifrost, on purpose: ``resize`` never waits for open spans (read spans keep the
old buffer alive and stay valid; an open write span is moved at commit), so growing a ring can
never deadlock a pipeline; rings grow on their own so that a span always fits and a guaranteed
reader and the writer can always both make progress; one write span may be open at a time;
ringlets (axes before the frame axis) are not supported.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from .memory import host_buffer

#: Byte alignment of buffer sizes and of the first frame of every sequence.
ALIGN = 64

#: Memory spaces this runtime provides (``cuda_host`` is host memory in Bifrost too).
HOST_SPACES = ("system", "cuda_host")

#: Bifrost dtype name -> (numpy element dtype, components). numpy has no complex integers, so
#: ``ci8``/``ci16``/``ci32``/``ci64`` spans carry a trailing axis of 2 (re, im) of the integer
#: type; ``cf32``/``cf64`` are numpy's complex64/complex128.
DTYPES: dict[str, tuple[np.dtype, int]] = {
    **{f"i{b}": (np.dtype(f"int{b}"), 1) for b in (8, 16, 32, 64)},
    **{f"u{b}": (np.dtype(f"uint{b}"), 1) for b in (8, 16, 32, 64)},
    **{f"f{b}": (np.dtype(f"float{b}"), 1) for b in (16, 32, 64)},
    **{f"ci{b}": (np.dtype(f"int{b}"), 2) for b in (8, 16, 32, 64)},
    # Bifrost's ci4: one byte per complex sample (two nibbles), held as raw int8 bytes.
    "ci4": (np.dtype(np.int8), 1),
    "cf32": (np.dtype(np.complex64), 1),
    "cf64": (np.dtype(np.complex128), 1),
}


class EndOfDataStop(RuntimeError):
    """No more data: past the end of a finished sequence, or past the last sequence.

    A RuntimeError (as in Bifrost), not StopIteration, which generators would swallow (PEP 479).
    """


class RingInterrupted(RuntimeError):
    """The ring was interrupted (pipeline shutdown); every waiting call wakes with this."""


class RingWouldBlock(OSError):
    """A non-blocking reserve found no room (Bifrost raises IOError here too)."""


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


@dataclass(frozen=True)
class Tensor:
    """Frame description derived once from a header's ``_tensor``."""

    dtype: str
    #: Header axes after the frame axis.
    frame_shape: tuple[int, ...]
    numpy_dtype: np.dtype
    #: Shape of one frame in ``span.data`` (``frame_shape`` + ``(2,)`` for complex integers).
    numpy_frame_shape: tuple[int, ...]
    frame_nbyte: int

    @classmethod
    def from_header(cls, header: dict[str, Any]) -> Tensor:
        try:
            tensor = header["_tensor"]
            dtype, shape = str(tensor["dtype"]), list(tensor["shape"])
        except (KeyError, TypeError) as exc:
            raise ValueError("sequence header needs '_tensor' with 'dtype' and 'shape'") from exc
        if dtype not in DTYPES:
            raise ValueError(f"_tensor dtype {dtype!r} unknown; expected one of {sorted(DTYPES)}")
        if shape.count(-1) != 1 or shape[0] != -1:
            raise ValueError(f"_tensor shape {shape} must start with the frame axis -1 and "
                             "have no other -1 (ringlets, axes before the frame axis, are "
                             "unsupported)")
        frame_shape = tuple(int(n) for n in shape[1:])
        if any(n < 0 for n in frame_shape):
            raise ValueError(f"_tensor shape {shape} has a negative frame axis")
        base, ncomp = DTYPES[dtype]
        np_shape = frame_shape + ((2,) if ncomp == 2 else ())
        frame_nbyte = int(np.prod(np_shape, dtype=np.int64)) * base.itemsize
        if frame_nbyte == 0:
            raise ValueError(f"_tensor shape {shape} gives empty frames")
        return cls(dtype, frame_shape, base, np_shape, frame_nbyte)


class _Sequence:
    """Ring-side record of one sequence: where it begins and ends in absolute byte offsets."""

    __slots__ = ("name", "time_tag", "header_json", "tensor", "begin", "end", "next")

    def __init__(self, name: str, time_tag: int, header_json: str, tensor: Tensor,
                 begin: int) -> None:
        self.name, self.time_tag, self.header_json = name, time_tag, header_json
        self.tensor, self.begin = tensor, begin
        self.end: int | None = None  # set when the writer ends the sequence
        self.next: _Sequence | None = None


class _Guarantee:
    """A guaranteed reader's claim: the writer may not overwrite bytes at or after ``offset``."""

    __slots__ = ("offset",)

    def __init__(self, offset: int) -> None:
        self.offset = offset


class Ring:
    """Single-writer ring buffer of sequences of frames (see the module docstring)."""

    _ids = itertools.count()

    def __init__(self, space: str = "system", name: str | None = None, owner: Any = None,
                 core: int | None = None,
                 allocator: Callable[[int], np.ndarray] | None = None) -> None:
        if space not in HOST_SPACES:
            raise ValueError(f"ring space {space!r} unavailable; this runtime has {HOST_SPACES}")
        self.space = space
        self.name = name if name is not None else f"ring_{next(Ring._ids)}"
        self.owner = owner  # the block that writes it (Bifrost keeps it for fusing/graphs)
        self.core = core  # accepted for Bifrost compatibility; memory is not NUMA-bound here
        self._cond = threading.Condition()
        self._buf = np.empty(0, np.uint8)
        self._span = 0  # bytes addressed modulo
        self._ghost = 0  # bytes after the span mirroring its front, the longest contiguous span
        self._clean = 0  # ghost[:_clean] currently equals the front buf[:_clean]
        self._generation = 0  # bumped by every reallocation
        self._head = 0  # end of committed data
        self._reserve_head = 0  # end of reserved data
        self._tail = 0  # start of data not yet (possibly) overwritten
        self._max_reserve = 0
        self._max_acquire = 0
        self._want = (0, 0)  # (contiguous, total) bytes asked for by resizes so far
        self._guarantees: list[_Guarantee] = []
        self._live: deque[_Sequence] = deque()  # sequences still (partly) in the buffer
        self._last: _Sequence | None = None
        self._wspan: tuple[int, int] | None = None  # (begin, generation) of the open write span
        # Frame slots reserved ahead by a SlotWriter, oldest first: (begin, nbyte, generation,
        # view); committed in this order.
        self._slots: deque[tuple[int, int, int, np.ndarray]] = deque()
        self._granule = ALIGN  # buffer sizes are multiples of this (a SlotWriter's frames)
        self._writing_begun = False
        self._writing_ended = False
        self._interrupted = False
        self._allocator = allocator

    def __repr__(self) -> str:
        return f"Ring({self.name!r}, span={self._span}, ghost={self._ghost})"

    # ---- sizing -------------------------------------------------------------------------------

    @property
    def total_bytes(self) -> int:
        """Bytes the ring holds before it wraps."""
        return self._span

    @property
    def fill(self) -> float:
        """Fraction of the ring its slowest guaranteed reader has yet to release (0 without
        guaranteed readers): near 1 the writer is about to wait (monitoring)."""
        with self._cond:
            if not self._span or not self._guarantees:
                return 0.0
            return min(1.0, (self._head - min(g.offset for g in self._guarantees)) / self._span)

    @property
    def contiguous_bytes(self) -> int:
        """Longest span (bytes) that can be reserved or acquired as one view."""
        return self._ghost

    @property
    def allocator(self) -> Callable[[int], np.ndarray] | None:
        """The memory allocator (None: ``np.empty``); see :meth:`set_allocator`."""
        return self._allocator

    def set_allocator(self, allocator: Callable[[int], np.ndarray] | None) -> None:
        """Allocate the buffer with ``allocator(nbytes) -> 1-D uint8 array`` (None: numpy).

        For memory a device can read in place (e.g. an NPU's host-only buffer objects). Every
        (re)allocation goes through it; the ring keeps only views of what it returns, so the
        allocator should keep any handle that must outlive the memory alive itself. Only
        before the ring first allocates: RuntimeError once it holds memory.
        """
        with self._cond:
            if self._span:
                raise RuntimeError(f"ring {self.name!r} already holds {self._span} bytes; set "
                                   "its allocator before the first sequence or resize")
            self._allocator = allocator

    def resize(self, contiguous_bytes: int, total_bytes: int | None = None,
               nringlet: int = 1) -> None:
        """Grow (never shrink) to spans of ``contiguous_bytes`` in ``total_bytes`` (Bifrost)."""
        if nringlet != 1:
            raise ValueError("ringlets are not supported (nringlet must be 1)")
        with self._cond:
            self._size(contiguous_bytes, total_bytes or contiguous_bytes)

    def _size(self, contiguous: int, total: int, *, reserve: int = 0, acquire: int = 0,
              defer: bool = False) -> None:
        """Note the room asked for and the spans a writer (``reserve``) or reader
        (``acquire``) will take, and grow to cover them all now, so that the first spans
        find the ring at its final size (each growth is a fresh buffer faulted in, which would
        land on the first gulp). ``defer``: a ring
        holding no memory yet allocates at its first span instead, so a writer's sequence
        begun before its readers size the ring costs one allocation, not two."""
        self._max_reserve = max(self._max_reserve, reserve)
        self._max_acquire = max(self._max_acquire, acquire)
        self._want = (max(self._want[0], contiguous), max(self._want[1], total))
        if defer and not self._span:
            return
        self._grow(contiguous, total)

    def _grow(self, contiguous: int, total: int) -> None:
        # The floor keeps the writer and a guaranteed reader (or two inputs read in lockstep)
        # from waiting on each other: with span >= reserve + 2 * acquire the writer can always
        # commit what the slowest guaranteed reader waits for. (A sequence's alignment pad needs
        # no room of its own: no reader waits on the finished sequence before it.)
        contiguous = _round_up(max(contiguous, self._ghost, self._want[0]), ALIGN)
        floor = self._max_reserve + 2 * self._max_acquire
        total = _round_up(max(total, contiguous, floor, self._span, self._want[1]),
                          self._granule)
        if contiguous == self._ghost and total == self._span:
            return
        nbyte = total + contiguous + ALIGN
        if self._allocator is None:
            raw = host_buffer(nbyte)
        else:
            raw = self._allocator(nbyte)
            if raw.dtype != np.uint8 or raw.ndim != 1 or raw.size < nbyte:
                raise ValueError(f"ring {self.name!r}: the allocator returned {raw.dtype} "
                                 f"{raw.shape} for {nbyte} bytes; need 1-D uint8 of that size")
        start = -raw.ctypes.data % ALIGN
        new = raw[start:start + total + contiguous]
        pos = max(self._tail, self._head - self._span)
        while pos < self._head:  # move the committed data, each byte to its new place
            o, n = pos % self._span, pos % total
            k = min(self._head - pos, self._span - o, total - n)
            new[n:n + k] = self._buf[o:o + k]
            pos += k
        self._buf, self._span, self._ghost = new, total, contiguous
        self._clean = 0
        self._generation += 1
        self._cond.notify_all()

    def release(self) -> None:
        """Let go of the buffer once nobody reads or writes any more (the pipeline has run):
        it goes back to :data:`~xengine_block.runtime.memory.HOST_POOL` when the last view
        of it dies. What the ring held can no longer be read; a later span allocates anew."""
        with self._cond:
            if self._wspan is not None or self._slots:
                raise RuntimeError(f"ring {self.name!r}: spans are still reserved")
            self._buf = np.empty(0, np.uint8)
            self._span = self._ghost = self._clean = 0
            self._tail = self._reserve_head = self._head
            self._live.clear()
            self._generation += 1

    def _note_span(self, nbyte: int, *, write: bool) -> None:
        if write and nbyte > self._max_reserve:
            self._max_reserve = nbyte
        elif not write and nbyte > self._max_acquire:
            self._max_acquire = nbyte
        elif self._span:
            return
        self._grow(nbyte, 0)

    # ---- shutdown -----------------------------------------------------------------------------

    def interrupt(self) -> None:
        """Wake every waiter with RingInterrupted, now and from now on (pipeline shutdown)."""
        with self._cond:
            self._interrupted = True
            self._cond.notify_all()

    @property
    def interrupted(self) -> bool:
        return self._interrupted

    def _wait(self, ready) -> None:
        while not ready():
            if self._interrupted:
                raise RingInterrupted(f"ring {self.name!r} interrupted")
            self._cond.wait()
        if self._interrupted:
            raise RingInterrupted(f"ring {self.name!r} interrupted")

    # ---- writing ------------------------------------------------------------------------------

    def begin_writing(self) -> RingWriter:
        return RingWriter(self)

    def _begin_writing(self) -> None:
        with self._cond:
            if self._writing_begun:
                raise RuntimeError(f"ring {self.name!r} already has a writer (one writer only)")
            self._writing_begun = True

    def end_writing(self) -> None:
        """End of data: readers drain what is committed, then get EndOfDataStop."""
        with self._cond:
            if self._last is not None and self._last.end is None:
                self._last.end = max(self._head, self._last.begin)
            self._writing_ended = True
            self._cond.notify_all()

    def _begin_sequence(self, header: dict[str, Any], tensor: Tensor) -> _Sequence:
        name, time_tag = header.get("name"), header.get("time_tag")
        if not isinstance(name, str) or not isinstance(time_tag, int):
            raise ValueError("sequence header needs a str 'name' and an int 'time_tag', got "
                             f"{name!r}, {time_tag!r}")
        try:
            header_json = json.dumps(header)
        except TypeError as exc:
            raise TypeError(f"sequence {name!r}: header must be JSON-serialisable: {exc}") from exc
        with self._cond:
            if not self._writing_begun or self._writing_ended:
                raise RuntimeError(f"ring {self.name!r}: begin_writing() first")
            if self._last is not None and self._last.end is None:
                raise RuntimeError(f"ring {self.name!r}: previous sequence still open")
            for seq in self._live:
                if seq.name == name or seq.time_tag == time_tag:
                    raise ValueError(f"ring {self.name!r} already holds a sequence named "
                                     f"{seq.name!r} with time_tag {seq.time_tag}; both must be "
                                     "unique")
            # Aligned start; the pad is taken by the first reserve, which checks for room. With
            # frame slots reserved the next one is the sequence's first frame (Bifrost begins
            # every sequence at the head).
            begin = self._slots[0][0] if self._slots else _round_up(self._head, ALIGN)
            seq = _Sequence(name, time_tag, header_json, tensor, begin)
            if self._last is not None:
                self._last.next = seq
            self._last = seq
            self._live.append(seq)
            self._cond.notify_all()
            return seq

    def _end_sequence(self, seq: _Sequence) -> None:
        with self._cond:
            if self._wspan is not None:
                raise RuntimeError(f"ring {self.name!r}: close the write span before end()")
            if seq.end is None:
                seq.end = max(self._head, seq.begin)
                self._cond.notify_all()

    def _reserve(self, seq: _Sequence, nbyte: int, nonblocking: bool) -> tuple[int, np.ndarray]:
        with self._cond:
            if self._wspan is not None or self._slots:
                raise RuntimeError(f"ring {self.name!r}: one write span at a time (and none "
                                   "while frame slots are reserved)")
            self._note_span(nbyte, write=True)
            begin = max(self._reserve_head, seq.begin)

            self._advance_reserve(begin, nbyte, nonblocking)
            self._wspan = (begin, self._generation)
            off = begin % self._span
            return begin, self._buf[off:off + nbyte]

    def _advance_reserve(self, begin: int, nbyte: int, nonblocking: bool) -> None:
        """Wait until [begin, begin + nbyte) may be written (guaranteed readers are past it),
        then claim it: bytes more than a span behind it are overwritten from now on."""

        def room() -> bool:
            return (not self._guarantees or
                    begin + nbyte - min(g.offset for g in self._guarantees) <= self._span)

        if nonblocking and not room():
            raise RingWouldBlock(f"ring {self.name!r}: no room for {nbyte} bytes")
        self._wait(room)
        self._reserve_head = begin + nbyte
        if self._reserve_head - self._tail > self._span:
            self._tail = self._reserve_head - self._span
            while (self._live and self._live[0].end is not None
                   and self._live[0].end <= self._tail):
                self._live.popleft()  # fully overwritten: no longer openable

    # ---- frame slots (SlotWriter) ---------------------------------------------------------

    def _reserve_slot(self, nbyte: int, nonblocking: bool) -> np.ndarray:
        with self._cond:
            if self._wspan is not None:
                raise RuntimeError(f"ring {self.name!r}: a write span is open")
            begin = self._reserve_head
            if begin + nbyte - self._head > self._span:
                raise RuntimeError(f"ring {self.name!r}: {begin + nbyte - self._head} bytes of "
                                   f"slots reserved exceed its {self._span} bytes")
            self._advance_reserve(begin, nbyte, nonblocking)
            off = begin % self._span
            view = self._buf[off:off + nbyte]
            self._slots.append((begin, nbyte, self._generation, view))
            return view

    def _commit_slot(self, nbyte: int | None = None) -> None:
        """Publish the oldest slot, or its first ``nbyte`` (the open sequence ends there: the
        rest of the slot is space no sequence covers, the next slot begins the next one)."""
        with self._cond:
            begin, full, generation, view = self._slots.popleft()
            nbyte = full if nbyte is None else min(nbyte, full)
            self._publish(begin, nbyte, view[:nbyte], generation)
            self._head = begin + nbyte
            self._cond.notify_all()

    def _cancel_slots(self) -> None:
        with self._cond:
            if self._slots:
                self._reserve_head = self._slots[0][0]
                self._slots.clear()
                self._cond.notify_all()

    def _commit(self, begin: int, nbyte: int, view: np.ndarray) -> None:
        with self._cond:
            _, generation = self._wspan
            self._wspan = None
            self._publish(begin, nbyte, view, generation)
            self._reserve_head = self._head = begin + nbyte
            self._cond.notify_all()

    def _publish(self, begin: int, nbyte: int, view: np.ndarray, generation: int) -> None:
        """Make written bytes [begin, begin + nbyte) the buffer's (before the head moves)."""
        if nbyte and generation != self._generation:
            # Reallocated while the span was open: move what it wrote into the new buffer.
            pos = begin
            while pos < begin + nbyte:
                o = pos % self._span
                k = min(begin + nbyte - pos, self._span - o)
                self._buf[o:o + k] = view[pos - begin:pos - begin + k]
                pos += k
            self._clean = 0
        elif nbyte:
            off = begin % self._span
            wrapped = off + nbyte - self._span
            if wrapped > 0:  # ran on into the ghost: mirror that part to the front
                self._buf[:wrapped] = self._buf[self._span:self._span + wrapped]
                self._clean = max(self._clean, wrapped)
            self._clean = min(self._clean, off)

    # ---- reading ------------------------------------------------------------------------------

    def _find(self, which: str, key: Any) -> _Sequence | None:
        if which == "earliest":
            return self._live[0] if self._live else None
        if which == "latest":
            return self._live[-1] if self._live else None
        if which == "specific":
            match = [s for s in self._live if s.name == key]
        else:  # "at": the sequence holding time_tag key, i.e. the latest starting at or before it
            match = sorted((s for s in self._live if s.time_tag <= key), key=lambda s: s.time_tag)
        if not match:
            raise ValueError(f"ring {self.name!r} holds no sequence "
                             f"{'named' if which == 'specific' else 'at time_tag'} {key!r}")
        return match[-1]

    def _open(self, which: str, key: Any, guarantee: bool) -> tuple[_Sequence, _Guarantee | None]:
        with self._cond:
            # Held from the oldest data while waiting, so nothing is lost before the sequence
            # appears (Bifrost does the same).
            g = _Guarantee(self._tail) if guarantee else None
            if g is not None:
                self._guarantees.append(g)
            try:
                if which in ("earliest", "latest"):
                    self._wait(lambda: bool(self._live) or self._writing_ended)
                elif self._interrupted:
                    raise RingInterrupted(f"ring {self.name!r} interrupted")
                seq = self._find(which, key)
                if seq is None:
                    raise EndOfDataStop(f"ring {self.name!r} ended with no sequence to open")
            except BaseException:
                self._drop_guarantee(g)
                raise
            self._start_at(seq, g)
            return seq, g

    def _start_at(self, seq: _Sequence, g: _Guarantee | None) -> None:
        if g is not None:
            g.offset = max(seq.begin, self._tail)
            self._cond.notify_all()

    def _next(self, seq: _Sequence, g: _Guarantee | None) -> _Sequence:
        with self._cond:
            self._wait(lambda: seq.next is not None or self._writing_ended)
            if seq.next is None:
                raise EndOfDataStop(f"ring {self.name!r}: no sequence after {seq.name!r}")
            self._start_at(seq.next, g)
            return seq.next

    def _drop_guarantee(self, g: _Guarantee | None) -> None:
        if g is None:
            return
        with self._cond:
            if g in self._guarantees:
                self._guarantees.remove(g)
                self._cond.notify_all()

    def _acquire(self, seq: _Sequence, offset: int, nbyte: int,
                 g: _Guarantee | None) -> tuple[int, np.ndarray]:
        frame = seq.tensor.frame_nbyte
        with self._cond:
            begin = seq.begin + offset
            end = begin + nbyte
            if g is not None and begin > g.offset:
                g.offset = begin  # release what came before: the writer may move on
                self._cond.notify_all()
            self._note_span(nbyte, write=False)
            self._wait(lambda: self._head >= end or seq.end is not None)
            if seq.end is not None:
                if begin >= seq.end:
                    raise EndOfDataStop(f"sequence {seq.name!r} ended")
                end = min(end, seq.end)
            if self._tail > begin:  # overtaken: start at the oldest whole frame still here
                begin += _round_up(self._tail - begin, frame)
                if seq.end is not None:
                    begin = min(begin, seq.end)
            size = max(end - begin, 0)
            off = begin % self._span
            wrapped = off + size - self._span
            if wrapped > self._clean:  # first reader across this wrap: mirror the front
                self._buf[self._span + self._clean:self._span + wrapped] = \
                    self._buf[self._clean:wrapped]
                self._clean = wrapped
            return begin, self._buf[off:off + size]

    def _overwritten(self, begin: int, nbyte: int) -> int:
        with self._cond:
            return min(max(self._tail - begin, 0), nbyte)

    # ---- Bifrost's opening calls -----------------------------------------------------------

    def open_sequence(self, name: str, guarantee: bool = True) -> ReadSequence:
        return ReadSequence(self, which="specific", name=name, guarantee=guarantee)

    def open_sequence_at(self, time_tag: int, guarantee: bool = True) -> ReadSequence:
        return ReadSequence(self, which="at", time_tag=time_tag, guarantee=guarantee)

    def open_latest_sequence(self, guarantee: bool = True) -> ReadSequence:
        return ReadSequence(self, which="latest", guarantee=guarantee)

    def open_earliest_sequence(self, guarantee: bool = True) -> ReadSequence:
        return ReadSequence(self, which="earliest", guarantee=guarantee)

    def read(self, whence: str = "earliest", guarantee: bool = True) -> Iterator[ReadSequence]:
        """Yield one ReadSequence object, advanced through every sequence until end of data."""
        try:
            cur = ReadSequence(self, which=whence, guarantee=guarantee)
        except EndOfDataStop:
            return
        with cur:
            while True:
                yield cur
                try:
                    cur.increment()
                except EndOfDataStop:
                    return


class RingWriter:
    """The ring's single writer; leaving the ``with`` block ends writing (end of data)."""

    def __init__(self, ring: Ring) -> None:
        self.ring = ring
        ring._begin_writing()

    def __enter__(self) -> RingWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.ring.end_writing()

    def begin_sequence(self, header: dict[str, Any], gulp_nframe: int,
                       buf_nframe: int | None = None) -> WriteSequence:
        return WriteSequence(self.ring, header, gulp_nframe, buf_nframe)


class SlotWriter:
    """A writer's frames reserved ahead in ring order as *slots*, filled in any order by someone
    else (spead2's receiver places heaps straight into them), then committed in order: the
    frames are never copied. The capture's zero-copy delivery (``capture/receive.py``).

    A slot is ``slot_nframe`` frames (the capture's spead2 chunk). The ring is sized for
    ``nslot`` slots besides what its readers hold (and its buffer kept a multiple of both
    ``gulp_nframe`` frames and a slot, so that neither gulps nor slots wrap); ``reserve()``
    blocks while guaranteed readers hold the room (backpressure, as ``reserve`` does),
    ``commit()`` publishes the oldest slot (``commit(n)``: its first ``n`` frames only, the last
    of the open sequence). A committed slot belongs to the open sequence; a sequence begun
    while slots are reserved starts at the next slot, so slots committed between sequences
    (``end()`` of one, before ``begin_sequence`` of the next) are space no sequence covers.
    ``cancel()`` gives back every slot not committed. Bifrost's rings work the same way (several
    write spans, committed in order; sequences begin at the head).
    """

    def __init__(self, writer: RingWriter, frame_nbyte: int, nslot: int,
                 gulp_nframe: int = 1, slot_nframe: int = 1) -> None:
        ring = self.ring = writer.ring
        self.frame_nbyte, self.slot_nframe = frame_nbyte, slot_nframe
        self.slot_nbyte = slot_nframe * frame_nbyte
        gulp = gulp_nframe * frame_nbyte
        granule = int(np.lcm(gulp, self.slot_nbyte))  # neither gulps nor slots wrap
        with ring._cond:
            ring._granule = int(np.lcm(ring._granule, granule))
            # The floor (see _grow): all the slots count as the writer's reservation.
            ring._max_reserve = max(ring._max_reserve, nslot * self.slot_nbyte)
        ring.resize(max(gulp, self.slot_nbyte), nslot * self.slot_nbyte + 2 * gulp)
        with ring._cond:  # the first slot on a boundary of the buffer: dead space before
            if not ring._slots and (ring._last is None or ring._last.end is not None):
                ring._head = ring._reserve_head = _round_up(ring._head, granule)

    def reserve(self, nonblocking: bool = False) -> np.ndarray:
        """The next slot: a writable uint8 view of ``slot_nframe`` frames."""
        return self.ring._reserve_slot(self.slot_nbyte, nonblocking)

    def commit(self, nframe: int | None = None) -> None:
        """Publish the oldest reserved slot; ``nframe`` fewer than its frames: only those, the
        open sequence's last (end it before the next commit; the rest of the slot is space)."""
        self.ring._commit_slot(None if nframe is None else nframe * self.frame_nbyte)

    @property
    def nreserved(self) -> int:
        return len(self.ring._slots)

    def cancel(self) -> None:
        """Give back every slot not committed (their bytes are written again later)."""
        self.ring._cancel_slots()


class SequenceBase:
    """What writer and readers share: name, time_tag, header and frame description."""

    _seq: _Sequence

    def __init__(self, ring: Ring) -> None:
        self._ring = ring

    @property
    def ring(self) -> Ring:
        return self._ring

    @property
    def name(self) -> str:
        return self._seq.name

    @property
    def time_tag(self) -> int:
        return self._seq.time_tag

    @property
    def tensor(self) -> Tensor:
        return self._seq.tensor


class WriteSequence(SequenceBase):
    """An open output sequence; ``end()`` (or leaving ``with``) finishes it."""

    def __init__(self, ring: Ring, header: dict[str, Any], gulp_nframe: int,
                 buf_nframe: int | None = None) -> None:
        super().__init__(ring)
        header["_tensor"]["dtype"] = str(header["_tensor"]["dtype"])
        self._header = header
        tensor = Tensor.from_header(header)
        fnb = tensor.frame_nbyte
        with ring._cond:  # readers size the ring before the first gulp (Block.begin_sequences)
            ring._size(gulp_nframe * fnb, (buf_nframe or gulp_nframe) * fnb,
                       reserve=gulp_nframe * fnb, defer=True)
        self._seq = ring._begin_sequence(header, tensor)

    @property
    def header(self) -> dict[str, Any]:
        return self._header

    def __enter__(self) -> WriteSequence:
        return self

    def __exit__(self, *exc: object) -> None:
        self.end()

    def end(self) -> None:
        self._ring._end_sequence(self._seq)

    def reserve(self, nframe: int, nonblocking: bool = False) -> WriteSpan:
        return WriteSpan(self._ring, self, nframe, nonblocking)


class ReadSequence(SequenceBase):
    """A reader's position in a ring: one sequence at a time, advanced with ``increment()``."""

    def __init__(self, ring: Ring, which: str = "specific", name: str = "",
                 time_tag: int | None = None, guarantee: bool = True) -> None:
        super().__init__(ring)
        if which not in ("specific", "at", "earliest", "latest"):
            raise ValueError("which must be one of 'specific', 'at', 'earliest', 'latest'")
        self.guarantee = guarantee
        key = name if which == "specific" else time_tag
        self._seq, self._guarantee = ring._open(which, key, guarantee)
        self._header: dict[str, Any] | None = None

    @property
    def header(self) -> dict[str, Any]:
        """This reader's own copy of the header (parsed from the JSON the writer stored)."""
        if self._header is None:
            self._header = json.loads(self._seq.header_json)
        return self._header

    def __enter__(self) -> ReadSequence:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop reading: drop the guarantee so the writer is no longer held back."""
        self._ring._drop_guarantee(self._guarantee)
        self._guarantee = None

    def increment(self) -> None:
        """Move to the next sequence (waits for it); EndOfDataStop after the last one."""
        self._seq = self._ring._next(self._seq, self._guarantee)
        self._header = None

    def acquire(self, frame_offset: int, nframe: int) -> ReadSpan:
        return ReadSpan(self, frame_offset, nframe)

    def read(self, nframe: int, stride: int | None = None, begin: int = 0) -> Iterator[ReadSpan]:
        """Yield spans of ``nframe`` frames every ``stride`` frames until the sequence ends."""
        stride = nframe if stride is None else stride
        offset = begin
        while True:
            try:
                span = self.acquire(offset, nframe)
            except EndOfDataStop:
                return
            with span:
                yield span
            offset += stride

    def resize(self, gulp_nframe: int, buf_nframe: int | None = None,
               buffer_factor: float | None = None) -> None:
        """Size the ring for this reader: gulps of ``gulp_nframe``, ``buffer_factor`` (3) deep."""
        if buf_nframe is None:
            buf_nframe = int(np.ceil(gulp_nframe * (3 if buffer_factor is None else buffer_factor)))
        fnb = self.tensor.frame_nbyte
        ring = self._ring
        with ring._cond:
            ring._size(gulp_nframe * fnb, buf_nframe * fnb, acquire=gulp_nframe * fnb)


class SpanBase:
    """Frames ``[frame_offset, frame_offset + nframe)`` of a sequence as one numpy view."""

    writeable = False

    def __init__(self, ring: Ring, sequence: SequenceBase, begin: int, view: np.ndarray) -> None:
        self._ring, self._sequence = ring, sequence
        self._begin = begin
        self._tensor = sequence.tensor
        self.nframe = view.size // self._tensor.frame_nbyte
        self.frame_offset = (begin - sequence._seq.begin) // self._tensor.frame_nbyte
        t = self._tensor
        self.data = view.view(t.numpy_dtype).reshape((self.nframe,) + t.numpy_frame_shape)
        if not self.writeable:
            self.data.flags.writeable = False

    @property
    def ring(self) -> Ring:
        return self._ring

    @property
    def sequence(self) -> SequenceBase:
        return self._sequence

    @property
    def tensor(self) -> Tensor:
        return self._tensor

    @property
    def frame_nbyte(self) -> int:
        return self._tensor.frame_nbyte

    @property
    def shape(self) -> tuple[int, ...]:
        return self.data.shape

    @property
    def dtype(self) -> str:
        return self._tensor.dtype


class WriteSpan(SpanBase):
    """Reserved output frames; ``commit(n)`` then close (``with``) publishes the first n."""

    writeable = True

    def __init__(self, ring: Ring, sequence: WriteSequence, nframe: int,
                 nonblocking: bool = False) -> None:
        begin, view = ring._reserve(sequence._seq, nframe * sequence.tensor.frame_nbyte,
                                    nonblocking)
        super().__init__(ring, sequence, begin, view)
        self._view = view
        self.commit_nframe = 0
        self._closed = False

    def commit(self, nframe: int) -> None:
        if not 0 <= nframe <= self.nframe:
            raise ValueError(f"commit({nframe}) outside the span's 0..{self.nframe} frames")
        self.commit_nframe = nframe

    def __enter__(self) -> WriteSpan:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._ring._commit(self._begin, self.commit_nframe * self.frame_nbyte, self._view)


class ReadSpan(SpanBase):
    """Acquired input frames (read-only view).

    ``nframe_skipped``: frames of the request lost to the writer before the acquire
    (unguaranteed readers only); the span then starts that much later and is that much shorter,
    so ``nframe + nframe_skipped`` is the request, except that the last span of a sequence is cut
    at its end. A span wholly overtaken has ``nframe == 0`` and ``nframe_skipped == requested``.
    """

    def __init__(self, sequence: ReadSequence, frame_offset: int, nframe: int) -> None:
        fnb = sequence.tensor.frame_nbyte
        begin, view = sequence.ring._acquire(sequence._seq, frame_offset * fnb, nframe * fnb,
                                             sequence._guarantee)
        super().__init__(sequence.ring, sequence, begin, view)
        self.requested_frame_offset = frame_offset
        self.nframe_skipped = min(self.frame_offset - frame_offset, nframe)

    @property
    def nframe_overwritten(self) -> int:
        """Frames of this span the writer may have overwritten since the acquire (unguaranteed)."""
        nbyte = self._ring._overwritten(self._begin, self.nframe * self.frame_nbyte)
        return -(-nbyte // self.frame_nbyte)

    def __enter__(self) -> ReadSpan:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def release(self) -> None:
        """Done with the span (the guarantee moves on at the next acquire, as in Bifrost)."""
