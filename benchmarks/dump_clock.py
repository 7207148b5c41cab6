"""When a chain's dumps land on disk: the benchmarks' clock for whole-pipeline rates.

A thread of its own notes the moment the capture starts receiving, then polls the writer's
count of dumps written (every millisecond) and notes when each appears, until ``ndump`` have
or :meth:`DumpClock.finish` is called.
"""

from __future__ import annotations

import threading
import time
from typing import Any


class DumpClock:
    """``start``: when the capture began receiving (None if it never did); ``stamps``: when
    each dump was seen written; ``thread``: the watching thread (to leave out of CPU counts)."""

    def __init__(self, capture: Any, writer: Any, ndump: int) -> None:
        self.capture, self.writer, self.ndump = capture, writer, ndump
        self.start: float | None = None
        self.stamps: list[float] = []
        self._done = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        self.capture.receiving.wait(120)
        self.start = time.perf_counter()
        seen = 0
        while seen < self.ndump and not self._done.is_set():
            n = self.writer.dumps_written
            if n > seen:
                self.stamps.extend([time.perf_counter()] * (n - seen))
                seen = n
            time.sleep(0.001)

    def begin(self) -> DumpClock:
        self.thread.start()
        return self

    def finish(self) -> None:
        self._done.set()
        self.thread.join(5)
