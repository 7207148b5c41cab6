"""Progress of long work a person waits for (reprocess, record, combine): a bar on a terminal,
plain lines at most every few seconds otherwise (a log or a journal has no carriage return)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """``update()`` as items finish; ``close()`` prints the final state.

    ``total`` None: an open-ended count (e.g. bytes recorded until stopped).
    """

    def __init__(self, what: str, total: float | None = None, *, unit: str = "",
                 stream: TextIO | None = None, interval_s: float = 5.0, width: int = 30) -> None:
        self.what, self.total, self.unit = what, total, unit
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval_s, self.width = interval_s, width
        self.done = 0.0
        self._t0 = self._last = time.monotonic()
        self._closed = False

    def _text(self) -> str:
        elapsed = time.monotonic() - self._t0
        unit = f" {self.unit}" if self.unit else ""
        if not self.total:
            return f"{self.what}: {self.done:g}{unit} in {elapsed:.0f} s"
        frac = min(self.done / self.total, 1.0)
        eta = elapsed * (self.total - self.done) / self.done if self.done else float("nan")
        count = f"[{self.done:g}/{self.total:g}]{unit} {frac:4.0%} {elapsed:.0f} s, ETA {eta:.0f} s"
        if self.tty:
            fill = int(frac * self.width)
            return f"{self.what} {'#' * fill}{'.' * (self.width - fill)} {count}"
        return f"{self.what}: {count}"

    def update(self, n: float = 1, note: str = "") -> None:
        self.done += n
        now = time.monotonic()
        if self.tty:
            if now - self._last >= 0.2 or (self.total and self.done >= self.total):
                self.stream.write(f"\r{self._text()} {note}"[:200].ljust(80))
                self.stream.flush()
                self._last = now
        elif now - self._last >= self.interval_s:
            print(f"{self._text()} {note}".rstrip(), file=self.stream, flush=True)
            self._last = now

    def close(self, note: str = "") -> None:
        if self._closed:
            return
        self._closed = True
        prefix = "\r" if self.tty else ""
        print(f"{prefix}{self._text()} {note}".rstrip(), file=self.stream, flush=True)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
