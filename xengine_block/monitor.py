"""Per-block counters, declared once, and a periodic one-line-per-block printer (like_top).

Bifrost users watch each block's time split between waiting for input (acquire), computing
(process) and waiting for output space (reserve): the block with the highest process share is
the bottleneck; one that mostly reserves is held back by a slower reader downstream.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Sequence
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


class BlockCounters:
    """Thread-safe accumulators for one block: its thread adds, anyone snapshots."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, float] = dict.fromkeys(COUNTER_NAMES, 0)

    def add(self, **increments: float) -> None:
        with self._lock:
            for name, value in increments.items():
                if name not in self._values:
                    raise KeyError(f"undeclared counter {name!r}; declared: {COUNTER_NAMES}")
                self._values[name] += value

    def snapshot(self) -> dict[str, float]:
        """A consistent copy of every counter."""
        with self._lock:
            return dict(self._values)


def format_line(name: str, prev: dict[str, float], cur: dict[str, float], dt: float) -> str:
    """One like_top line: totals, rates over the last ``dt`` seconds, and the time split."""
    dt = max(dt, 1e-9)

    def rate(key: str) -> float:
        return (cur[key] - prev[key]) / dt

    return (f"{name:<24} {int(cur['frames']):>10d} fr {rate('frames'):>9.1f} fr/s "
            f"{rate('bytes') / 1e6:>9.1f} MB/s  acquire {rate('acquire_s'):>6.1%} "
            f"process {rate('process_s'):>6.1%} reserve {rate('reserve_s'):>6.1%}  "
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
        self._prev: dict[str, dict[str, float]] = {}
        self._t = time.perf_counter()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop and print a last report (totals up to now)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.report()

    def report(self) -> None:
        now = time.perf_counter()
        dt, self._t = now - self._t, now
        stream = self._stream or sys.stderr
        for block in self._blocks():
            cur = block.counters.snapshot()
            prev = self._prev.get(block.name, dict.fromkeys(COUNTER_NAMES, 0))
            print(format_line(block.name, prev, cur, dt), file=stream, flush=True)
            self._prev[block.name] = cur

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.report()
