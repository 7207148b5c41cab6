"""Pipeline and blocks with Bifrost's names and semantics (Bifrost's
``python/bifrost/pipeline.py``; docs/design.md, "Rings and blocks").

A block is a small class with a few hooks; ``Pipeline.run()`` runs each block in its own thread,
connected by :mod:`~xengine_block.runtime.ring` rings. Method names and call order are
Bifrost's, so a block moves to real Bifrost by changing imports. What this runtime adds, and why:

- Shutdown is prompt: an exception in any block, ``shutdown()`` or SIGINT/SIGTERM interrupts
  every ring, so blocks waiting in acquire/reserve wake at once; ``run()`` re-raises the first
  block exception as :class:`PipelineError` naming the block.
- ``on_sequence_end`` runs for every sequence whose ``on_sequence`` ran, also when the pipeline
  stops early, so sinks always finish their files (Bifrost skips it on exceptions).
- Counters per block (``block.perf``) and a like_top printer
  (:mod:`~xengine_block.runtime.monitor`).

Not implemented: input overlap (``define_input_overlap_nframe``), block scopes/fusing, GPU spaces.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import itertools
import logging
import signal
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import ExitStack
from typing import Any, TextIO

from .affinity import CoreSpec, parse_cores, pin_current_thread
from .monitor import BlockCounters, Monitor
from .ring import (
    EndOfDataStop,
    ReadSequence,
    ReadSpan,
    Ring,
    RingInterrupted,
    RingWriter,
    WriteSequence,
    WriteSpan,
)

logger = logging.getLogger(__name__)

_local = threading.local()


def _pipeline_stack() -> list[Pipeline]:
    if not hasattr(_local, "stack"):
        _local.stack = [Pipeline()]
    return _local.stack


def get_default_pipeline() -> Pipeline:
    """The innermost ``with Pipeline()`` of this thread (else a per-thread default one)."""
    return _pipeline_stack()[-1]


def get_ring(block_or_ring: Block | Ring) -> Ring:
    """A block stands for its first output ring wherever a ring is expected (Bifrost)."""
    orings = getattr(block_or_ring, "orings", None)
    return orings[0] if orings is not None else block_or_ring


class PipelineError(RuntimeError):
    """A block raised; ``block_name`` says which, ``__cause__`` is the original exception."""

    def __init__(self, block_name: str, exc: BaseException) -> None:
        super().__init__(f"block {block_name!r} failed: {type(exc).__name__}: {exc}")
        self.block_name = block_name


def os_thread_name(name: str) -> str:
    """What the OS shows for a thread named ``name`` by :func:`name_os_thread` (15 bytes)."""
    return name.encode("ascii", "replace")[:15].decode("ascii")


def name_os_thread(name: str) -> None:
    """Give the calling thread ``name`` in the OS (:func:`os_thread_name`), where ``top -H``
    and ``/proc/<pid>/task/*/comm`` show it; threads it starts (spead2's receiver, the native
    backend's workers) inherit it, so each block's CPU can be told apart. Linux only; elsewhere
    nothing happens."""
    with contextlib.suppress(AttributeError, OSError):
        ctypes.CDLL(None).prctl(15, os_thread_name(name).encode(), 0, 0, 0)  # PR_SET_NAME


_frozen = 0  # pipelines running inside frozen_heap
_we_froze = False  # whether the first of them froze the heap (not someone else's freeze)
_frozen_lock = threading.Lock()


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Inside this context the objects alive when the first such context began are left out of
    Python's garbage collection (``gc.freeze``; given back when the last one ends, so nested
    and concurrent uses share one freeze). A full collection walks every object of the process,
    and with astropy, h5py and numba imported one takes tens of milliseconds, every thread stopped
    meanwhile: the capture's, the X-engine's. What is made inside is collected as usual. A
    freeze already in place (someone else's) is left as it is, and not thawed here either.

    The collector is the whole process's, so freezing it is the application's choice, never
    the library's: ``Pipeline.run`` does not enter this; the programs that own their process
    do (``pipelines/fx.py``, ``xengine correlate`` around the service, ``xengine reprocess``
    through ``ReprocessOptions.freeze_gc``)."""
    global _frozen, _we_froze
    with _frozen_lock:
        _frozen += 1
        if _frozen == 1:
            _we_froze = not gc.get_freeze_count()
            if _we_froze:
                gc.freeze()
    try:
        yield
    finally:
        with _frozen_lock:
            _frozen -= 1
            if _frozen == 0 and _we_froze:
                gc.unfreeze()
                _we_froze = False


class RunControl:
    """Run control shared by our :class:`Pipeline` and the one on real Bifrost
    (``bifrost.runtime.Pipeline``): one thread per block, SIGINT/SIGTERM from the main thread,
    prompt shutdown, the first block failure re-raised as :class:`PipelineError`, the monitor.

    The runtimes differ only in the hooks: ``_before_run``, ``_after_start`` (Bifrost's start
    barrier), ``_block_error``/``_block_exited`` (what a block's exit means), ``_stop_block``
    (ours also interrupts rings), ``_release_waiters`` and ``_label`` (the name in log lines).
    The subclass calls ``_init_run_control`` from its ``__init__`` and sets ``blocks``.
    """

    _log = logger
    blocks: list[Any]

    def _init_run_control(self, shutdown_timeout: float, monitor_interval: float | None,
                          monitor_stream: TextIO | None) -> None:
        self.shutdown_timeout = shutdown_timeout
        self.stop_reason: str | None = None
        self.threads: list[threading.Thread] = []
        self._monitor_args = (monitor_interval, monitor_stream)
        self._monitor: Monitor | None = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._errors: list[tuple[Any, BaseException]] = []
        self._signal: int | None = None

    # ---- hooks --------------------------------------------------------------------------------

    def _label(self) -> str:
        return self.name  # type: ignore[attr-defined]

    def _before_run(self) -> None:
        """Called first in ``run()``."""

    def _after_start(self) -> None:
        """Called in ``run()`` once every block thread has started, before waiting for them."""

    def _block_error(self, block: Any, exc: BaseException) -> BaseException | None:
        """The failure to report for an exception out of ``block.run()`` (None: none)."""
        return exc

    def _block_exited(self, block: Any) -> None:
        """Called when a block's thread ends, however it ends."""

    def _stop_block(self, block: Any) -> None:
        block.shutdown()

    def _after_run(self) -> None:
        """Called at the end of ``run()`` once every block thread has ended."""

    def _release_waiters(self) -> None:
        """Wake whatever blocks wait on at start, once stopping."""

    # ---- running ------------------------------------------------------------------------------

    def run(self) -> None:
        """Run every block until end of data or shutdown; re-raise a block's failure.

        From the main thread, SIGINT and SIGTERM stop the pipeline cleanly (``run()`` returns;
        ``stop_reason`` and ``stop_signal`` say why) and the previous handlers are restored
        afterwards.
        """
        self._before_run()
        self.threads = [threading.Thread(target=self._run_block, args=(b,), name=b.name,
                                         daemon=True) for b in self.blocks]
        old_handlers = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                old_handlers[sig] = signal.signal(sig, self._on_signal)
        interval, stream = self._monitor_args
        if interval is not None and self._monitor is None:
            self.start_monitor(interval, stream)
        try:
            for t in self.threads:
                t.start()
            self._after_start()
            self._wait(self.threads)
        finally:
            if any(t.is_alive() for t in self.threads):  # e.g. KeyboardInterrupt in a handler
                self._stop_all("run() interrupted")
            for sig, handler in old_handlers.items():
                signal.signal(sig, handler)
            self.stop_monitor()
            if not any(t.is_alive() for t in self.threads):
                self._after_run()
        if self._errors:
            block, exc = self._errors[0]
            for other, e in self._errors[1:]:
                self._log.error("block %r also failed: %r", other.name, e)
            raise PipelineError(block.name, exc) from exc

    def _run_block(self, block: Any) -> None:
        name_os_thread(block.name)
        try:
            block.run()
        except BaseException as exc:
            failure = self._block_error(block, exc)
            if failure is not None:
                self._fail(block, failure)
        finally:
            self._block_exited(block)

    def _fail(self, block: Any, exc: BaseException) -> None:
        with self._lock:
            self._errors.append((block, exc))
        self._stop_all(f"block {block.name!r} raised {type(exc).__name__}")

    def _wait(self, threads: list[threading.Thread]) -> None:
        # Polling join keeps the main thread responsive to signals (their handlers only set a
        # flag; shutdown itself happens here, outside the handler).
        deadline = None
        while True:
            alive = [t for t in threads if t.is_alive()]
            if not alive:
                return
            self._check_signal()
            if self._stopping.is_set():
                deadline = deadline or time.monotonic() + self.shutdown_timeout
                if time.monotonic() > deadline:
                    self._log.warning("pipeline %r: blocks %s did not stop within %.1f s",
                                      self._label(), [t.name for t in alive],
                                      self.shutdown_timeout)
                    return
            alive[0].join(0.05)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._signal = signum

    def _check_signal(self) -> None:
        if self._signal is not None and not self._stopping.is_set():
            self._stop_all(f"{signal.Signals(self._signal).name} received")

    @property
    def stop_signal(self) -> int | None:
        """The signal (SIGINT or SIGTERM) that stopped ``run()``, if one did."""
        return self._signal

    def shutdown(self) -> None:
        """Stop every block now (from any thread); ``run()`` returns once they have stopped."""
        self._stop_all("shutdown() called")

    def _stop_all(self, reason: str) -> None:
        with self._lock:
            if self._stopping.is_set():
                return
            self.stop_reason = reason
            self._stopping.set()
        if not self._errors:
            self._log.warning("pipeline %r stopping: %s", self._label(), reason)
        for block in self.blocks:
            self._stop_block(block)
        self._release_waiters()

    # ---- monitoring ---------------------------------------------------------------------------

    def start_monitor(self, interval: float = 1.0, stream: TextIO | None = None) -> None:
        """Print one like_top line per block every ``interval`` s (stderr by default)."""
        self.stop_monitor()
        self._monitor = Monitor(lambda: self.blocks, interval, stream)
        self._monitor.start()

    def stop_monitor(self) -> None:
        if self._monitor is not None:
            self._monitor.stop()
            self._monitor = None


class Pipeline(RunControl):
    """A set of blocks run together, one thread each; ``with Pipeline() as p:`` makes it default.

    ``monitor_interval`` (seconds) switches on the like_top printer for the duration of ``run()``.
    """

    _ids = itertools.count()

    def __init__(self, name: str | None = None, *, monitor_interval: float | None = None,
                 monitor_stream: TextIO | None = None, shutdown_timeout: float = 5.0) -> None:
        self.name = name if name is not None else f"Pipeline_{next(Pipeline._ids)}"
        self.blocks: list[Block] = []
        self._init_run_control(shutdown_timeout, monitor_interval, monitor_stream)
        self._ready: set[int] = set()
        self._ready_cond = threading.Condition()
        self._released = False
        self._started = False

    def __enter__(self) -> Pipeline:
        _pipeline_stack().append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        popped = _pipeline_stack().pop()
        assert popped is self, "pipelines must be exited in reverse order"

    def as_default(self) -> None:
        _pipeline_stack().append(self)

    # ---- run control hooks --------------------------------------------------------------------

    def _before_run(self) -> None:
        if self._started:
            raise RuntimeError(f"pipeline {self.name!r} already ran; build a new one")
        self._started = True

    def _block_error(self, block: Any, exc: BaseException) -> BaseException | None:
        if isinstance(exc, RingInterrupted):
            if self._stopping.is_set():  # only _stop_all interrupts rings it knows about
                return None
            return RuntimeError("a ring was interrupted outside shutdown")
        return exc

    def _block_exited(self, block: Any) -> None:
        self._block_ready(block)  # a block that has exited is no longer waited for

    def _stop_block(self, block: Any) -> None:
        block.shutdown()
        for ring in block.irings + block.orings:
            ring.interrupt()

    def _after_run(self) -> None:
        # The rings' memory back to the pool now (the blocks and rings refer to each other,
        # so otherwise only a full garbage collection frees it, pipelines later): the next
        # pipeline of the process takes it already faulted in. Views still held keep theirs.
        for block in self.blocks:
            for ring in block.orings:
                try:
                    ring.release()
                except RuntimeError as exc:  # a span left reserved: keep the memory, not raise
                    logger.warning("%s", exc)

    def _release_waiters(self) -> None:
        with self._ready_cond:
            self._released = True
            self._ready_cond.notify_all()

    def _block_ready(self, block: Block) -> None:
        with self._ready_cond:
            self._ready.add(id(block))
            self._ready_cond.notify_all()

    def _wait_readers_ready(self, block: Block) -> None:
        """Writers wait here until every reader of their rings has opened its first sequence
        (and so holds its guarantee): otherwise a fast source could overwrite data a late
        reader must see. Only the rings' own readers: a capture need not wait while blocks
        further down size their rings (milliseconds per megabytes faulted in), which
        would hold back the first frames the X-engine could already be correlating."""
        self._block_ready(block)
        outs = {id(r) for r in block.orings}
        readers = [id(b) for b in self.blocks if any(id(r) in outs for r in b.irings)]
        with self._ready_cond:
            self._ready_cond.wait_for(
                lambda: self._released or all(r in self._ready for r in readers))
        if self._stopping.is_set():
            raise RingInterrupted(f"pipeline {self.name!r} is shutting down")


class Block:
    """Base of all blocks: input rings, output rings, a shutdown event and counters."""

    _counts: dict[str, int] = {}
    _counts_lock = threading.Lock()

    def __init__(self, irings: Sequence[Block | Ring], name: str | None = None,
                 type_: str | None = None, *, gulp_nframe: int | None = None,
                 buffer_nframe: int | None = None, buffer_factor: float | None = None,
                 core: CoreSpec = None) -> None:
        self.type = type_ or type(self).__name__
        with Block._counts_lock:
            count = Block._counts.get(self.type, 0)
            Block._counts[self.type] = count + 1
        self.name = name or f"{self.type}_{count}"
        self.gulp_nframe = gulp_nframe
        self.buffer_nframe = buffer_nframe
        self.buffer_factor = buffer_factor
        #: Bifrost's ``core``: the cores this block's thread, and the threads it starts, run
        #: on (:mod:`~xengine_block.runtime.affinity`); None: wherever the OS puts them.
        self.core = core
        self._cores = parse_cores(core, f"{self.name}: core")
        self.irings: list[Ring] = [get_ring(r) for r in irings]
        self.orings: list[Ring] = []
        self.shutdown_event = threading.Event()
        self.counters = BlockCounters()
        self._seq_count = 0
        self.pipeline = get_default_pipeline()
        self.pipeline.blocks.append(self)

    def __repr__(self) -> str:
        return f"<{self.type} {self.name!r}>"

    @property
    def perf(self) -> dict[str, float]:
        """Snapshot of this block's counters (safe while running); see monitor.BLOCK_COUNTERS."""
        return self.counters.snapshot()

    def shutdown(self) -> None:
        self.shutdown_event.set()

    def create_ring(self, space: str = "system", name: str | None = None) -> Ring:
        # Numbered by a count of its own: ``self.orings = [self.create_ring(), ...]`` makes
        # them all before the list is there to count. (A block that replaces the rings its
        # base class made numbers on from them: the X-engine's two on one input are out1, out2.)
        self._nring = getattr(self, "_nring", 0) + 1
        return Ring(space=space, name=name or f"{self.name}.out{self._nring - 1}", owner=self)

    def num_outputs(self) -> int:
        return len(self.orings)

    def run(self) -> None:
        """Thread body: own the output rings (ending them ends the data downstream), run main
        (on the block's cores, if it was given some)."""
        pin_current_thread(self._cores)
        with ExitStack() as stack:
            writers = [stack.enter_context(r.begin_writing()) for r in self.orings]
            self.main(writers)

    def main(self, orings: list[RingWriter]) -> None:
        raise NotImplementedError

    def define_output_nframes(self, input_nframes: list[int]) -> list[int]:
        """Output frames per output, given frames per input."""
        raise NotImplementedError

    def _define_output_nframes(self, input_nframes: list[int]) -> list[int]:
        return self.define_output_nframes(input_nframes)

    # ---- helpers shared by sources and transforms ---------------------------------------------

    def _name_sequences(self, oheaders: list[dict[str, Any]]) -> None:
        for ohdr in oheaders:
            ohdr.setdefault("time_tag", self._seq_count)
            ohdr.setdefault("name", f"unnamed-sequence-{self._seq_count}")
        self._seq_count += 1
        self.counters.add(sequences=1)

    def begin_sequences(self, stack: ExitStack, orings: list[RingWriter],
                        oheaders: list[dict[str, Any]],
                        igulp_nframes: list[int]) -> list[WriteSequence]:
        """Begin one output sequence per header; the first time, wait for the rings' readers."""
        ogulp_nframes = self._define_output_nframes(igulp_nframes)
        oseqs = []
        for oring, ohdr, ogulp in zip(orings, oheaders, ogulp_nframes, strict=True):
            ohdr["gulp_nframe"] = ogulp
            # Buffer factor 1 on the writer's side: readers size the ring (Bifrost).
            oseqs.append(stack.enter_context(oring.begin_sequence(ohdr, ogulp, ogulp)))
        self.pipeline._wait_readers_ready(self)
        return oseqs

    def reserve_spans(self, stack: ExitStack, oseqs: list[WriteSequence],
                      igulp_nframes: list[int]) -> list[WriteSpan]:
        ogulp_nframes = self._define_output_nframes(igulp_nframes)
        with self.counters.timing("reserve_s"):
            return [stack.enter_context(oseq.reserve(n))
                    for oseq, n in zip(oseqs, ogulp_nframes, strict=True)]

    @staticmethod
    def commit_spans(ospans: list[WriteSpan],
                     ostrides: Iterable[int | None] | None) -> list[int]:
        """Commit what on_data returned per output (None, or a None entry: all of it)."""
        ostrides = [None] * len(ospans) if ostrides is None else list(ostrides)
        for ospan, n in zip(ospans, ostrides, strict=True):
            ospan.commit(ospan.nframe if n is None else n)
        return [ospan.commit_nframe for ospan in ospans]

    def _check_shutdown(self) -> None:
        if self.shutdown_event.is_set():
            raise RingInterrupted(f"block {self.name!r} shut down")


class SourceBlock(Block):
    """Reads external sources (files, sockets) into its output ring(s), one sequence per source.

    Hooks: ``create_reader(sourcename)`` -> a context manager (or plain object);
    ``on_sequence(reader, sourcename)`` -> one header per output;
    ``on_data(reader, ospans)`` -> frames written per output, 0 for the end of that source.
    For more outputs (e.g. data + presence mask), set ``self.orings = [self.create_ring(), ...]``
    after ``super().__init__``. A reader that blocks should watch ``self.shutdown_event``.
    """

    def __init__(self, sourcenames: Iterable[Any], gulp_nframe: int, space: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__([], gulp_nframe=gulp_nframe, **kwargs)
        self.sourcenames = sourcenames
        self.orings = [self.create_ring(space=space or "system")]

    def main(self, orings: list[RingWriter]) -> None:
        for sourcename in self.sourcenames:
            if self.shutdown_event.is_set():
                return
            reader = self.create_reader(sourcename)
            if not hasattr(reader, "__enter__"):
                reader = contextlib.nullcontext(reader)
            with reader as ireader, ExitStack() as oseq_stack:
                oheaders = self.on_sequence(ireader, sourcename)
                self._name_sequences(oheaders)
                oseqs = self.begin_sequences(oseq_stack, orings, oheaders, [])
                while self._gulp(ireader, oseqs):
                    pass

    def _gulp(self, ireader: Any, oseqs: list[WriteSequence]) -> bool:
        """Fill one gulp; False at the end of the source."""
        self._check_shutdown()
        with ExitStack() as ospan_stack:
            ospans = self.reserve_spans(ospan_stack, oseqs, [])
            with self.counters.timing("process_s"):
                committed = self.commit_spans(ospans, self.on_data(ireader, ospans))
            self.counters.add(frames=committed[0],
                              bytes=sum(s.commit_nframe * s.frame_nbyte for s in ospans))
        return 0 not in committed

    def define_output_nframes(self, input_nframes: list[int]) -> list[int]:
        return [self.gulp_nframe] * self.num_outputs()

    def create_reader(self, sourcename: Any) -> Any:
        raise NotImplementedError

    def on_sequence(self, reader: Any, sourcename: Any) -> list[dict[str, Any]]:
        raise NotImplementedError

    def on_data(self, reader: Any, ospans: list[WriteSpan]) -> list[int | None] | None:
        raise NotImplementedError


class MultiTransformBlock(Block):
    """Reads two or more rings in lockstep (same frame offsets, gulp by gulp) into its outputs.

    Hooks: ``on_sequence(iseqs)`` -> one header per output; ``on_data(ispans, ospans)`` ->
    frames to commit per output (None: all); ``on_skip(islices, ospans)`` (default: zeros);
    ``on_sequence_end(iseqs)``; ``define_output_nframes(input_nframes)``. By default there is
    one output per input (Bifrost); for another number set ``self.orings = [self.create_ring(),
    ...]`` after ``super().__init__``. ``guarantee=False`` reads without holding writers back.
    """

    def __init__(self, irings_: Sequence[Block | Ring], guarantee: bool = True,
                 **kwargs: Any) -> None:
        super().__init__(irings_, **kwargs)
        self.guarantee = guarantee
        self.orings = [self.create_ring(space=iring.space) for iring in self.irings]

    def main(self, orings: list[RingWriter]) -> None:
        with ExitStack() as iseq_stack:
            try:
                iseqs = [iseq_stack.enter_context(
                    ReadSequence(r, which="earliest", guarantee=self.guarantee))
                    for r in self.irings]
            except EndOfDataStop:
                return
            while True:
                self._check_shutdown()
                self._sequence(orings, iseqs)
                try:
                    for iseq in iseqs:
                        iseq.increment()
                except EndOfDataStop:
                    return

    def _sequence(self, orings: list[RingWriter], iseqs: list[ReadSequence]) -> None:
        oheaders = self._on_sequence(iseqs)
        self._name_sequences(oheaders)
        try:
            igulps = []
            for iseq in iseqs:
                gulp = self.gulp_nframe or iseq.header.get("gulp_nframe")
                if not gulp:
                    raise ValueError(f"input sequence {iseq.name!r} has no 'gulp_nframe' in its "
                                     f"header; give {self.name} a gulp_nframe")
                iseq.resize(gulp, self.buffer_nframe, self.buffer_factor)
                igulps.append(gulp)
            with ExitStack() as oseq_stack:
                oseqs = self.begin_sequences(oseq_stack, orings, oheaders, igulps)
                offsets = [0] * len(iseqs)
                while self._gulp(iseqs, oseqs, igulps, offsets):
                    offsets = [o + n for o, n in zip(offsets, igulps, strict=True)]
        except BaseException:
            try:  # let sinks finish their files even when stopping early
                self._on_sequence_end(iseqs)
            except Exception:
                logger.exception("%s: on_sequence_end failed while stopping", self.name)
            raise
        self._on_sequence_end(iseqs)

    def _gulp(self, iseqs: list[ReadSequence], oseqs: list[WriteSequence], igulps: list[int],
              offsets: list[int]) -> bool:
        """Process one gulp per input at ``offsets``; False at the end of any input sequence."""
        self._check_shutdown()
        with ExitStack() as ispan_stack:
            try:
                with self.counters.timing("acquire_s"):
                    ispans = [ispan_stack.enter_context(iseq.acquire(o, n))
                              for iseq, o, n in zip(iseqs, offsets, igulps, strict=True)]
            except EndOfDataStop:
                return False
            nskip = [s.nframe_skipped for s in ispans]
            if any(nskip):
                islices = [slice(o, o + n) for o, n in zip(offsets, nskip, strict=True)]
                self._skip(islices, oseqs, nskip)
            if all(s.nframe == 0 for s in ispans):
                return True
            with ExitStack() as ospan_stack:
                ospans = self.reserve_spans(ospan_stack, oseqs, [s.nframe for s in ispans])
                with self.counters.timing("process_s"):
                    ostrides = self._on_data(ispans, ospans)
                    nover = [s.nframe_overwritten for s in ispans] if not self.guarantee else []
                    if any(nover):
                        self.counters.add(skipped=max(nover))
                    if any(nover) and ospans:  # the input changed under on_data: replace it
                        ostrides = self._on_skip([slice(s.frame_offset, s.frame_offset + n)
                                                  for s, n in zip(ispans, nover, strict=True)],
                                                 ospans)
                    self.commit_spans(ospans, ostrides)
            self.counters.add(frames=ispans[0].nframe,
                              bytes=sum(s.nframe * s.frame_nbyte for s in ispans))
        return True

    def _skip(self, islices: list[slice], oseqs: list[WriteSequence], nskip: list[int]) -> None:
        with ExitStack() as ospan_stack:
            ospans = self.reserve_spans(ospan_stack, oseqs, nskip)
            with self.counters.timing("process_s"):
                self.commit_spans(ospans, self._on_skip(islices, ospans))
            self.counters.add(skipped=max(nskip))

    def define_output_nframes(self, input_nframes: list[int]) -> list[int]:
        """Same as the inputs (Bifrost), or the first input's for every output if counts differ."""
        if len(input_nframes) == self.num_outputs():
            return list(input_nframes)
        return [input_nframes[0]] * self.num_outputs()

    def _on_sequence(self, iseqs: list[ReadSequence]) -> list[dict[str, Any]]:
        return self.on_sequence(iseqs)

    def _on_sequence_end(self, iseqs: list[ReadSequence]) -> None:
        self.on_sequence_end(iseqs)

    def _on_data(self, ispans: list[ReadSpan], ospans: list[WriteSpan]) -> Any:
        return self.on_data(ispans, ospans)

    def _on_skip(self, islices: list[slice], ospans: list[WriteSpan]) -> Any:
        return self.on_skip(islices, ospans)

    def on_sequence(self, iseqs: list[ReadSequence]) -> list[dict[str, Any]]:
        raise NotImplementedError

    def on_sequence_end(self, iseqs: list[ReadSequence]) -> None:
        """Finish per-sequence work (close files); runs also when the pipeline stops early."""

    def on_data(self, ispans: list[ReadSpan],
                ospans: list[WriteSpan]) -> list[int | None] | None:
        raise NotImplementedError

    def on_skip(self, islices: list[slice], ospans: list[WriteSpan]) -> list[int | None] | None:
        """Input frames ``islices`` were lost: by default the outputs for them are zeros."""
        for ospan in ospans:
            ospan.data[...] = 0
        return None


class TransformBlock(MultiTransformBlock):
    """One input ring, one output ring.

    Hooks: ``on_sequence(iseq) -> ohdr``; ``on_data(ispan, ospan)`` -> frames committed (None:
    all); ``on_skip(islice, ospan)`` (default zeros); ``on_sequence_end(iseq)``;
    ``define_output_nframes(input_nframe) -> output_nframe``.
    """

    def __init__(self, iring: Block | Ring, **kwargs: Any) -> None:
        super().__init__([iring], **kwargs)
        self.iring = self.irings[0]

    def _define_output_nframes(self, input_nframes: list[int]) -> list[int]:
        return [self.define_output_nframes(input_nframes[0])]

    def define_output_nframes(self, input_nframe: int) -> int:  # type: ignore[override]
        return input_nframe

    def _on_sequence(self, iseqs: list[ReadSequence]) -> list[dict[str, Any]]:
        return [self.on_sequence(iseqs[0])]

    def _on_sequence_end(self, iseqs: list[ReadSequence]) -> None:
        self.on_sequence_end(iseqs[0])

    def _on_data(self, ispans: list[ReadSpan], ospans: list[WriteSpan]) -> list[int | None]:
        return [self.on_data(ispans[0], ospans[0])]

    def _on_skip(self, islices: list[slice], ospans: list[WriteSpan]) -> list[int | None]:
        return [self.on_skip(islices[0], ospans[0])]

    def on_sequence(self, iseq: ReadSequence) -> dict[str, Any]:  # type: ignore[override]
        raise NotImplementedError

    def on_sequence_end(self, iseq: ReadSequence) -> None:  # type: ignore[override]
        """Finish per-sequence work; runs also when the pipeline stops early."""

    def on_data(self, ispan: ReadSpan, ospan: WriteSpan) -> int | None:  # type: ignore[override]
        raise NotImplementedError

    def on_skip(self, islice: slice, ospan: WriteSpan) -> int | None:  # type: ignore[override]
        ospan.data[...] = 0
        return None


class SinkBlock(MultiTransformBlock):
    """One input ring, no output: writes files, sends data, checks results.

    Hooks: ``on_sequence(iseq)``; ``on_data(ispan)``; ``on_sequence_end(iseq)`` (runs at end of
    data and when the pipeline stops early, so files are always finished); ``on_skip(islice)``:
    frames never delivered (unguaranteed readers; default: nothing). Frames overwritten while
    ``on_data`` ran are not re-reported: check ``ispan.nframe_overwritten`` after using the data.
    """

    def __init__(self, iring: Block | Ring, **kwargs: Any) -> None:
        super().__init__([iring], **kwargs)
        self.orings = []
        self.iring = self.irings[0]

    def _define_output_nframes(self, input_nframes: list[int]) -> list[int]:
        return []

    def _on_sequence(self, iseqs: list[ReadSequence]) -> list[dict[str, Any]]:
        self.on_sequence(iseqs[0])
        return []

    def _on_sequence_end(self, iseqs: list[ReadSequence]) -> None:
        self.on_sequence_end(iseqs[0])

    def _on_data(self, ispans: list[ReadSpan], ospans: list[WriteSpan]) -> list[int | None]:
        self.on_data(ispans[0])
        return []

    def _on_skip(self, islices: list[slice], ospans: list[WriteSpan]) -> list[int | None]:
        self.on_skip(islices[0])
        return []

    def on_sequence(self, iseq: ReadSequence) -> None:  # type: ignore[override]
        raise NotImplementedError

    def on_sequence_end(self, iseq: ReadSequence) -> None:  # type: ignore[override]
        """Finish the sequence's files; runs also when the pipeline stops early."""

    def on_data(self, ispan: ReadSpan) -> None:  # type: ignore[override]
        raise NotImplementedError

    def on_skip(self, islice: slice) -> None:  # type: ignore[override]
        """Input frames ``islice`` were lost (unguaranteed reading)."""


__all__ = [
    "Block", "MultiTransformBlock", "Pipeline", "PipelineError", "SinkBlock", "SourceBlock",
    "TransformBlock", "get_default_pipeline", "get_ring",
]
