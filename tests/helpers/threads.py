"""Threads of this process: their CPU masks by OS name, and a block whose first gulp is slow."""

from __future__ import annotations

import os
from pathlib import Path


def masks_of_threads_named(name: str) -> list[set[int]]:
    """CPU masks of this process's threads whose OS name is ``name`` (Linux /proc)."""
    out = []
    for tid in os.listdir("/proc/self/task"):
        try:
            comm = Path(f"/proc/self/task/{tid}/comm").read_text().strip()
            status = Path(f"/proc/self/task/{tid}/status").read_text()
        except OSError:
            continue  # the thread ended meanwhile
        if comm != name:
            continue
        cpus = next(line.split(":", 1)[1].strip() for line in status.splitlines()
                    if line.startswith("Cpus_allowed_list"))
        out.append(cpus_of(cpus))
    return out


def cpus_of(text: str) -> set[int]:
    """``0-2,5`` -> {0, 1, 2, 5} (the kernel's CPU list format, read independently)."""
    cores: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cores.update(range(int(lo), int(hi or lo) + 1))
    return cores


def slow_first_gulp(cls, source):
    """``cls`` whose first on_data waits until ``source`` has written all its frames."""

    class Slow(cls):
        waited = False

        def on_data(self, ispans, ospans):
            if not self.waited:
                assert source.done.wait(60)
                self.waited = True
            return super().on_data(ispans, ospans)

    return Slow
