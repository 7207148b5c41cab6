"""Per-block counters, declared once, and a periodic one-line-per-block printer (like_top).

Bifrost users watch each block's time split between waiting for input (acquire), computing
(process) and waiting for output space (reserve): the block with the highest process share is
the bottleneck; one that mostly reserves is held back by a slower reader downstream.

Shares are exact over each printed window: a phase in progress counts up to the instant of the
sample (:meth:`BlockCounters.timing`), and the window is the block's own time between samples.
Adding a wait only when it ended once put a 10 s wait that began in the previous window into
this one ("acquire 109.2%").
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TextIO


@dataclass(frozen=True)
class Counter:
    name: str
    description: str


#: Every per-block counter, in display order. Blocks may only add to these.
BLOCK_COUNTERS: tuple[Counter, ...] = (
    Counter("frames", "input frames consumed (sources: frames produced on the first output)"),
    Counter("bytes", "bytes of those frames, all inputs (sources: all outputs)"),
    Counter("skipped", "input frames lost to the writer (unguaranteed reads: skipped or "
                       "overwritten while processing)"),
    Counter("sequences", "sequences started"),
    Counter("acquire_s", "seconds waiting for input data (acquire)"),
    Counter("process_s", "seconds in on_data / on_skip"),
    Counter("reserve_s", "seconds waiting for output space (reserve): back-pressure"),
)
COUNTER_NAMES: tuple[str, ...] = tuple(c.name for c in BLOCK_COUNTERS)
#: The counters that are seconds of one phase of the block's thread (their shares sum to <= 1).
TIME_COUNTERS: tuple[str, ...] = ("acquire_s", "process_s", "reserve_s")


class BlockCounters:
    """Thread-safe accumulators for one block: its thread adds, anyone snapshots."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, float] = dict.fromkeys(COUNTER_NAMES, 0)
        self._open: dict[str, float] = {}  # phase in progress -> its start (perf_counter)

    @contextmanager
    def timing(self, name: str) -> Iterator[None]:
        """Count the seconds of the ``with`` body into ``name``, visible while it runs.

        Both ends are read under the lock, so a sample never sees a phase both as running and
        as ended: totals only grow, and by at most the time between two samples.
        """
        with self._lock:
            if name not in self._values or name in self._open:
                raise KeyError(f"{name!r} is undeclared or already being timed")
            self._open[name] = time.perf_counter()
        try:
            yield
        finally:
            with self._lock:
                self._values[name] += time.perf_counter() - self._open.pop(name)

    def add(self, **increments: float) -> None:
        with self._lock:
            for name, value in increments.items():
                if name not in self._values:
                    raise KeyError(f"undeclared counter {name!r}; declared: {COUNTER_NAMES}")
                self._values[name] += value

    def sample(self) -> tuple[float, dict[str, float]]:
        """``(perf_counter time, every counter)``, phases in progress counted up to that time."""
        with self._lock:
            now = time.perf_counter()
            values = dict(self._values)
            for name, t0 in self._open.items():
                values[name] += now - t0
            return now, values

    def snapshot(self) -> dict[str, float]:
        """A consistent copy of every counter (phases in progress counted up to now)."""
        return self.sample()[1]


def format_line(name: str, prev: dict[str, float], cur: dict[str, float], dt: float) -> str:
    """One like_top line: totals, rates over the last ``dt`` seconds, and the time split."""
    dt = max(dt, 1e-9)

    def rate(key: str) -> float:
        return (cur[key] - prev[key]) / dt

    def share(key: str) -> float:  # exact windows keep it in [0, 1]; clip float rounding only
        return min(max(rate(key), 0.0), 1.0)

    return (f"{name:<24} {int(cur['frames']):>10d} fr {rate('frames'):>9.1f} fr/s "
            f"{rate('bytes') / 1e6:>9.1f} MB/s  acquire {share('acquire_s'):>6.1%} "
            f"process {share('process_s'):>6.1%} reserve {share('reserve_s'):>6.1%}  "
            f"skipped {int(cur['skipped'])}")


class Monitor:
    """Prints one line per block every ``interval`` seconds from its own thread."""

    def __init__(self, blocks: Callable[[], Sequence[Any]], interval: float = 1.0,
                 stream: TextIO | None = None) -> None:
        if interval <= 0:
            raise ValueError(f"monitor interval must be > 0 s, got {interval}")
        self._blocks, self.interval, self._stream = blocks, interval, stream
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="pipeline-monitor", daemon=True)
        self._t0 = time.perf_counter()
        self._prev: dict[str, tuple[float, dict[str, float]]] = {}

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop and print a last report (totals up to now)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.report()

    def report(self) -> None:
        """One line per block over the window since its previous sample (or since start)."""
        stream = self._stream or sys.stderr
        for block in self._blocks():
            t, cur = block.counters.sample()
            t_prev, prev = self._prev.get(block.name, (self._t0, dict.fromkeys(COUNTER_NAMES, 0)))
            print(format_line(block.name, prev, cur, t - t_prev), file=stream, flush=True)
            self._prev[block.name] = (t, cur)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.report()
