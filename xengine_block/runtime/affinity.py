"""CPU pinning for blocks: Bifrost's ``core=`` block argument on our runtime.

A block given ``core`` runs its thread on those cores only, and so does every thread it starts
(Linux threads inherit their creator's CPU mask): spead2's receiver thread for a capture block,
the native backend's workers for the X-engine. Keeping the X-engine's cores free of the capture,
integrator and writer is what lets the chain run at the bare backend's rate on the cores left to
it (``benchmarks/bench_pipeline.py``, ``inproc_dedicated``): without pinning, the capture's
bursts (its two threads) land on the X-engine's core whenever the scheduler likes.

Bifrost takes one core (an int; of a list, its first); here a list is the set of cores the
block's threads may use, so that an X-engine of several native threads can have several.
"""

from __future__ import annotations

import contextlib
import itertools
import numbers
import os
from collections.abc import Iterable, Iterator

#: What ``core=`` takes: one core, or the cores a block's threads may use.
CoreSpec = int | Iterable[int] | None


def _thread_mask() -> frozenset[int]:
    getter = getattr(os, "sched_getaffinity", None)
    return frozenset(getter(0) if getter is not None else range(os.cpu_count() or 1))


#: The cores the process could use when this module was imported (its launch mask: a cpuset,
#: ``taskset`` or ``numactl``), before any thread of it was pinned.
_PROCESS_CORES = _thread_mask()


def usable_cores() -> set[int]:
    """Cores this process may run on: its CPU mask when it started (all CPUs where the OS has
    no masks). A thread pinned since then does not narrow it."""
    return set(_PROCESS_CORES)


def parse_cores(core: CoreSpec, what: str = "core") -> frozenset[int] | None:
    """``core`` as a set of cores, checked against the cores this process may use; None for
    None. ValueError naming ``what`` for anything else (a bad config stops before any work)."""
    if core is None:
        return None
    if isinstance(core, bool):
        raise ValueError(f"{what} must be a core number or a list of them, got {core!r}")
    items = [core] if isinstance(core, numbers.Integral) else core
    try:
        cores = list(items)
    except TypeError:
        raise ValueError(f"{what} must be a core number or a list of them, "
                         f"got {core!r}") from None
    if not cores:
        raise ValueError(f"{what} is an empty list of cores")
    bad = [c for c in cores if not isinstance(c, numbers.Integral) or isinstance(c, bool)]
    if bad:
        raise ValueError(f"{what}: {bad[0]!r} is not a core number")
    usable = usable_cores()
    outside = sorted(int(c) for c in cores if int(c) not in usable)
    if outside:
        raise ValueError(f"{what}: core {outside[0]} is not one this process may run on "
                         f"({format_cores(usable)})")
    return frozenset(int(c) for c in cores)


def cores_from_text(text: str) -> list[int]:
    """``"0-2,5"`` -> [0, 1, 2, 5]: the CPU lists of ``taskset -c`` and ``/proc/*/status``
    (a command-line flag's form of ``core``). ValueError for anything else."""
    cores: list[int] = []
    for part in text.split(","):
        lo, dash, hi = part.strip().partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()) or (dash and int(hi) < int(lo)):
            raise ValueError(f"{text!r} is not a CPU list like 0-3,6")
        cores.extend(range(int(lo), int(hi if dash else lo) + 1))
    return cores


def format_cores(cores: Iterable[int]) -> str:
    """``0-3,6`` style, as ``taskset`` and ``/proc/*/status`` write CPU lists."""
    runs = [[c for _, c in run] for _, run in
            itertools.groupby(enumerate(sorted(cores)), key=lambda ic: ic[1] - ic[0])]
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


def pin_current_thread(cores: frozenset[int] | None) -> None:
    """Run the calling thread (and the threads it starts from now on) on ``cores`` only.
    Nothing for None, and nothing where the OS has no CPU masks (``parse_cores`` accepted
    only the cores there are)."""
    setter = getattr(os, "sched_setaffinity", None)
    if cores is not None and setter is not None:
        setter(0, cores)  # pid 0: the calling thread (Linux masks are per thread)


def thread_cores() -> set[int]:
    """The calling thread's cores (its CPU mask)."""
    return set(_thread_mask())


@contextlib.contextmanager
def pinned(cores: CoreSpec) -> Iterator[None]:
    """The calling thread on ``cores`` for the ``with`` body, then back on its own mask."""
    before = thread_cores()
    pin_current_thread(parse_cores(cores))
    try:
        yield
    finally:
        pin_current_thread(frozenset(before))
