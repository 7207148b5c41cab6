"""The glue between this package's blocks and real Bifrost's runtime (``bifrost.pipeline``).

What real Bifrost does differently from our runtime, and what this module does about it:

- dtypes: Bifrost's complex integer spans are structured numpy arrays (``ci8`` = (re, im) int8
  pairs, ``ci4`` = one byte ``re_im``); our blocks use integers with a trailing re/im axis.
  :func:`as_ours` views one as the other, derived from our ring's ``DTYPES`` table (one place:
  a dtype our rings accept is accepted from Bifrost's). Views, never copies.
- Errors: Bifrost's ``Pipeline.run()`` returns normally after a block raises (the thread just
  dies, its output silently missing). :class:`Pipeline` records the first failure, stops every
  block and raises :class:`~xengine_block.runtime.pipeline.PipelineError` naming the block,
  chained to the original; also for a user's own Bifrost blocks in the same pipeline.
- Finishing: Bifrost skips ``on_sequence_end`` when a block raises or stops early, so a file
  would stay open. :class:`BifrostBlock` runs it for the open sequence in every case.
- Capture rings: the LWA pipelines' captures write ``bifrost.ring.Ring``s with flat JSON
  headers and no ``_tensor``; :func:`as_ring` presents one as the ``ring2`` ring Bifrost's
  blocks read, and :func:`transformed_view` gives a block our header contract for it
  (:mod:`.headers`), once per sequence.
- Unguaranteed readers: Bifrost's ring size is a power of two, so the point where the writer
  overtakes a reader is mid-frame for most frame sizes and ``ReadSpan.frame_offset`` asserts
  (ring2.py). Such readers read through :func:`unguaranteed_view`, whose spans start at the next
  whole frame; and Bifrost's skip reports (slices from 0, a forced skip of the next gulp) are
  turned into absolute lost frames for :class:`~xengine_block.blocks.base.BlockLogic`.
- Counters and like_top: Bifrost's blocks write their acquire/process/reserve times to proclog
  (Bifrost's ``like_top.py`` shows them); :class:`Pipeline` also sums them into our
  ``block.perf`` counters and, with ``monitor_interval``, prints our like_top lines.
"""

from __future__ import annotations

import ctypes
import json
import logging
import math
import queue
import traceback
from collections.abc import Callable
from typing import Any, TextIO

import numpy as np

from ..runtime.monitor import BlockCounters
from ..runtime.pipeline import RunControl
from ..runtime.ring import DTYPES
from ._loader import load_bifrost
from .headers import ADAPTED_KEY

bf = load_bifrost()
from bifrost import pipeline as bfp  # noqa: E402 - after load_bifrost found the library
from bifrost.libbifrost import EndOfDataStop, _bf, _check  # noqa: E402
from bifrost.ring import Ring as OldRing  # noqa: E402
from bifrost.ring2 import ReadSequence, ReadSpan, Ring  # noqa: E402

log = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------- dtypes
def as_ours(data: np.ndarray, dtype: str) -> np.ndarray:
    """A Bifrost span's data viewed in our convention (``ring.DTYPES``): complex integers as
    an integer axis of 2 (re, im); single-byte complex types (``ci4``) as their bytes."""
    base, ncomp = _our_dtype(dtype)
    a = np.asarray(data)  # bifrost.ndarray -> plain ndarray view
    if a.dtype != base:
        a = a.view(base)
    if ncomp == 2:
        a = a.reshape((*data.shape, 2))
    return a


def _our_dtype(dtype: str) -> tuple[np.dtype, int]:
    if dtype not in DTYPES:
        raise ValueError(f"Bifrost span dtype {dtype!r} is not one this package reads "
                         f"({', '.join(sorted(DTYPES))})")
    return DTYPES[dtype]


def span_array(span: Any) -> np.ndarray:
    """:func:`as_ours` of ``span.data`` (an empty array for an empty span: Bifrost gives those
    to lockstep readers when one input was overtaken)."""
    dtype = str(span.dtype)
    if span.nframe == 0:
        base, ncomp = _our_dtype(dtype)
        return np.empty((0, *span.tensor["frame_shape"], *((2,) if ncomp == 2 else ())), base)
    return as_ours(span.data, dtype)


class SpanView:
    """A Bifrost span presented with ``data`` in our convention (for our source blocks)."""

    def __init__(self, span: Any) -> None:
        self.span, self.data, self.nframe = span, span_array(span), span.nframe
        self.frame_offset = span.frame_offset

    def __getattr__(self, name: str) -> Any:
        return getattr(self.span, name)


# ------------------------------------------------------------------------ ring views
class _ReadSequence(ReadSequence):
    """A read sequence of one of our ring views: its (transformed) header is made once per
    sequence, and a header the transform adapted from a capture's (``headers.ADAPTED_KEY``)
    gives the sequence's name and time_tag (a capture's C sequence has no name, and its
    time_tag is the pipeline's own clock, not our spectrum index)."""

    _view_header: dict[str, Any] | None = None

    @property
    def header(self) -> dict[str, Any]:
        if self._view_header is None:
            try:
                self._view_header = super().header
            except json.JSONDecodeError as exc:
                raise ValueError(f"ring {self.ring.name!r}: a sequence header is not JSON "
                                 f"({exc}); a capture needs a sequence callback that writes "
                                 f"one (docs/bifrost.md)") from None
        return self._view_header

    def increment(self) -> None:
        super().increment()
        self._view_header = None

    @property
    def time_tag(self) -> int:
        hdr = self.header
        return int(hdr["time_tag"]) if ADAPTED_KEY in hdr else super().time_tag

    @property
    def name(self) -> str:
        hdr = self.header
        return str(hdr["name"]) if ADAPTED_KEY in hdr else super().name


class _AlignedReadSpan(ReadSpan):
    """A read span that starts at a whole frame even when the writer overtook the reader
    mid-frame (the frames before the next frame boundary count as skipped)."""

    @property
    def _delta(self) -> int:
        return -int(self._info.offset) % self.frame_nbyte

    @property
    def frame_offset(self) -> int:
        return (int(self._info.offset) + self._delta) // self.frame_nbyte

    @property
    def nframe(self) -> int:
        return max(int(self._info.size) - self._delta, 0) // self.frame_nbyte

    @property
    def _data_ptr(self) -> int:
        return self._info.data + self._delta

    @property
    def nframe_overwritten(self) -> int:
        nbyte = ctypes.c_ulong()
        _check(_bf.bfRingSpanGetSizeOverwritten(self.obj, nbyte))
        return math.ceil(max(nbyte.value - self._delta, 0) / self.frame_nbyte)


class _AlignedReadSequence(_ReadSequence):
    def acquire(self, frame_offset: int, nframe: int) -> ReadSpan:
        self.ring.last_request = (frame_offset, nframe)
        return _AlignedReadSpan(self, frame_offset, nframe)


class _ViewRing(Ring):
    """A view of a ring (same ring, own read position and header transform) whose sequences
    are :class:`_ReadSequence`; ``aligned`` views (unguaranteed readers) give frame-aligned
    spans (Bifrost's ``Ring.read`` with our sequence classes)."""

    aligned = False
    last_request: tuple[int, int] = (0, 0)

    def read(self, whence: str = "earliest", guarantee: bool = True) -> Any:
        cls = _AlignedReadSequence if self.aligned else _ReadSequence
        with cls(self, which=whence, guarantee=guarantee,
                 header_transform=self.header_transform) as cur_seq:
            while True:
                try:
                    yield cur_seq
                    cur_seq.increment()
                except EndOfDataStop:
                    return


def as_ring(ring: Any) -> Any:
    """``ring`` as a ``bifrost.ring2.Ring`` (what ``bifrost.pipeline`` blocks read): a
    ``bifrost.ring.Ring`` (the API the LWA pipelines' captures write through) is wrapped, the
    same C ring; blocks and ``ring2`` rings are returned as they are."""
    if not isinstance(ring, OldRing):
        return ring
    view = Ring.__new__(_ViewRing)
    view.obj, view.base, view.is_view = ring.obj, ring, True  # never destroyed through here
    view.space, view.owner, view.header_transform = ring.space, None, None
    return view


class _BorrowedOldRing(OldRing):
    """A ``bifrost.ring.Ring`` over a ring it does not own (never destroyed through here)."""

    def _destroy(self) -> None:
        pass


def as_old_ring(ring: Any) -> OldRing:
    """A block's output (or a ``ring2`` ring) as the ``bifrost.ring.Ring`` the LWA pipelines'
    raw-ring operations read (``iseq.header`` bytes, ``iseq.read(nbyte)``, ``data_view``): the
    same C ring, kept alive by the returned object."""
    ring = getattr(ring, "orings", [ring])[0]
    old = OldRing.__new__(_BorrowedOldRing)
    old.obj, old.owner = ring.obj, ring
    return old


def _view(ring: Ring) -> _ViewRing:
    view = ring.view()
    if not isinstance(view, _ViewRing):
        view.__class__ = _ViewRing
    return view


def unguaranteed_view(ring: Ring) -> Ring:
    """``ring`` as seen by one unguaranteed reader (a view: same ring, own read position)."""
    view = _view(ring)
    view.aligned = True
    return view


def transformed_view(ring: Ring, transform: Callable[[dict], dict]) -> Ring:
    """``ring`` with each sequence header passed through ``transform`` once (after any
    transform the ring already has)."""
    view = _view(ring)
    old = ring.header_transform
    view.header_transform = transform if old is None else (lambda h: transform(old(h)))
    return view


def ring_memory(ring: Ring) -> tuple[int, int]:
    """(address, bytes) of a Bifrost ring's buffer, ghost region included (0, 0 if none)."""
    _check(_bf.bfRingLock(ring.obj))
    try:
        data, stride = ctypes.c_void_p(), ctypes.c_ulong()
        _check(_bf.bfRingLockedGetData(ring.obj, data))
        _check(_bf.bfRingLockedGetStride(ring.obj, stride))
    finally:
        _check(_bf.bfRingUnlock(ring.obj))
    return (data.value or 0), stride.value


# ------------------------------------------------------------------------------ blocks
class _PerfLog:
    """Stands in for a block's Bifrost perf proclog: writes it (like_top.py reads it) and sums
    the same times into our counters."""

    def __init__(self, proclog: Any, counters: BlockCounters) -> None:
        self.proclog, self.counters = proclog, counters

    def update(self, contents: dict[str, float]) -> None:
        self.proclog.update(contents)
        self.counters.add(**{ours: max(float(contents.get(theirs, 0.0)), 0.0) for ours, theirs in
                             (("acquire_s", "acquire_time"), ("process_s", "process_time"),
                              ("reserve_s", "reserve_time"))})


def attach_counters(block: Any) -> BlockCounters:
    """Give any Bifrost block our counters (fed by its perf proclog); idempotent."""
    counters = getattr(block, "counters", None)
    if counters is None:
        counters = block.counters = BlockCounters()
    perf_log = getattr(block, "perf_proclog", None)
    if perf_log is not None and not isinstance(perf_log, _PerfLog):
        block.perf_proclog = _PerfLog(perf_log, counters)
    return counters


class BifrostBlock:
    """Adapter mixin: first base of each of our blocks on Bifrost (before the block's logic
    mixin and Bifrost's block class)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        attach_counters(self)
        self._open_iseqs: list[Any] | None = None
        if not getattr(self, "guarantee", True):
            self.irings = [unguaranteed_view(r) for r in self.irings]

    def size_output_rings(self, frame_bytes: list[int], reserve: int) -> None:
        """Bifrost's readers size its rings (in C, at their first sequence): left to them."""

    @property
    def perf(self) -> dict[str, float]:
        """Snapshot of this block's counters (``monitor.BLOCK_COUNTERS``), as in our runtime."""
        return self.counters.snapshot()

    def array(self, span: Any) -> np.ndarray:
        return span_array(span)

    def main(self, orings: list[Any]) -> None:
        try:
            super().main(orings)
        finally:  # Bifrost skips on_sequence_end on errors and on shutdown: files must close
            iseqs, self._open_iseqs = self._open_iseqs, None
            if iseqs is not None:
                try:
                    self._on_sequence_end(iseqs)
                except Exception:
                    log.exception("%s: on_sequence_end failed while stopping", self.name)

    def _on_sequence(self, iseqs: list[Any]) -> Any:
        out = super()._on_sequence(iseqs)
        self._open_iseqs = iseqs
        self.counters.add(sequences=1)
        return out

    def _on_sequence_end(self, iseqs: list[Any]) -> Any:
        self._open_iseqs = None
        return super()._on_sequence_end(iseqs)

    def _on_data(self, ispans: list[Any], ospans: list[Any]) -> Any:
        out = super()._on_data(ispans, ospans)
        self.counters.add(frames=ispans[0].nframe,
                          bytes=sum(s.nframe * s.frame_nbyte for s in ispans))
        return out

    def _on_skip(self, islices: list[slice], ospans: list[Any]) -> Any:
        if ospans is not self._data_ospans and islices[0].start != 0:
            # Bifrost's forced skip of the gulp after one overwritten during on_data (its
            # slices say how much of this gulp was overwritten, not that all of it is dropped):
            # the rest of each input's gulp is lost.
            islices = [slice(0, max(r.last_request[0] + r.last_request[1] - p, 0))
                       for r, p in zip(self.irings, self._ipos, strict=True)]
        # (A skip before on_data comes with slices from 0 of the right lengths.)
        if ospans is not self._data_ospans:
            self.counters.add(skipped=max(sl.stop - sl.start for sl in islices))
        return super()._on_skip(islices, ospans)


class SourceAdapter:
    """Runs one of our source blocks (e.g. the capture) as a Bifrost ``SourceBlock``: its own
    ``create_reader`` / ``on_sequence`` / ``on_data`` / ``shutdown`` do the work; readers become
    context managers, spans are given in our dtype convention."""

    def __init__(self, inner: Any, noutput: int, **kwargs: Any) -> None:
        self.inner = inner
        super().__init__(inner.sourcenames, inner.gulp_nframe, **kwargs)
        self.orings = [self.create_ring(space=self.orings[0].space) for _ in range(noutput)]
        attach_counters(self)

    @property
    def perf(self) -> dict[str, float]:
        return self.counters.snapshot()

    def create_reader(self, sourcename: Any) -> Any:
        reader = self.inner.create_reader(sourcename)
        return reader if hasattr(reader, "__enter__") else _NullContext(reader)

    def on_sequence(self, reader: Any, sourcename: Any) -> list[dict[str, Any]]:
        self.counters.add(sequences=1)
        return self.inner.on_sequence(reader, sourcename)

    def on_data(self, reader: Any, ospans: list[Any]) -> list[int]:
        views = [SpanView(s) for s in ospans]
        n = self.inner.on_data(reader, views)
        n = [v.nframe if k is None else k
             for v, k in zip(views, n or [None] * len(views), strict=True)]
        self.counters.add(frames=n[0], bytes=sum(k * s.frame_nbyte
                                                 for k, s in zip(n, ospans, strict=True)))
        return n

    def shutdown(self) -> None:
        super().shutdown()
        self.inner.shutdown()


class _NullContext:
    def __init__(self, value: Any) -> None:
        self.value = value

    def __enter__(self) -> Any:
        return self.value

    def __exit__(self, *exc: object) -> None:
        return None


# ---------------------------------------------------------------------------- pipeline
class Pipeline(RunControl, bfp.Pipeline):
    """Bifrost's ``Pipeline`` that stops on the first failure of any block and raises it.

    The run control is our runtime's (:class:`~xengine_block.runtime.pipeline.RunControl`):
    ``monitor_interval`` (like_top lines), ``stop_reason``, ``stop_signal``, SIGINT/SIGTERM stop
    it cleanly (from the main thread); in addition every block gets ``perf``.
    """

    _log = log

    def __init__(self, name: str | None = None, *, monitor_interval: float | None = None,
                 monitor_stream: TextIO | None = None, shutdown_timeout: float = 5.0,
                 **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self._init_run_control(shutdown_timeout, monitor_interval, monitor_stream)

    def _label(self) -> str:
        return self._name

    def _before_run(self) -> None:
        for block in self.blocks:
            attach_counters(block)

    def _after_start(self) -> None:
        self._wait_initialised()

    def _block_error(self, block: Any, exc: BaseException) -> BaseException | None:
        # The dead block's frames hold its open ring reads (and their guarantees, which
        # would block its writers forever): drop them now; the traceback text stays.
        traceback.clear_frames(exc.__traceback__)
        return exc

    def _release_waiters(self) -> None:
        self.all_blocks_finished_initializing_event.set()

    def _wait_initialised(self) -> None:
        """Bifrost's start barrier (blocks begin their first sequences, then all go on),
        without blocking signals or waiting for blocks that have already ended."""
        pending = {id(b): t for b, t in zip(self.blocks, self.threads, strict=True)}
        while pending and not self._stopping.is_set():
            self._check_signal()
            try:
                block, _ok = self.block_init_queue.get(timeout=0.05)
                pending.pop(id(block), None)
            except queue.Empty:
                pending = {k: t for k, t in pending.items() if t.is_alive()}
        self.all_blocks_finished_initializing_event.set()
