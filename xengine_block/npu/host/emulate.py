"""Execute an :class:`NpuPlan` on numpy arrays: DMAs, locks, stream flows and kernel calls.

Why this exists: without hardware, CI must still prove that the plan's access patterns, lock
protocol and kernel arithmetic give the exact correlation. So the emulator takes nothing from
the geometry beyond what the plan says: every tile buffer is a flat byte array, every BD and
shim task is walked by one generic n-D ``(size, stride)`` address generator, every flow is a
byte FIFO, and the cores call the numpy kernel model on whatever their DMAs wrote. A wrong
stride, offset, lock or route gives a wrong answer or a reported deadlock.

Model
-----
- A DMA channel runs its BD chain (looping): acquire the BD's lock (wait while the value is
  below the request, then subtract), move ``length`` elements, release (add). MM2S gathers from
  its buffer into the FIFO of every destination of its flow; S2MM scatters from its FIFO as
  data arrives (partial progress, like the hardware). Producers stall while a destination FIFO
  holds more than ``FIFO_BYTES`` (back-pressure), so memory stays bounded.
- A shim task moves its whole pattern once (host buffer <-> stream) and then is done.
- A core runs its :class:`CoreProgram` loop with the kernel model (the ci4 entry point named
  in the plan unpacks into the tile buffers the plan gives it, as the kernel does).
- Scheduling is round-robin until nothing can move. If a task is then still pending, that is a
  deadlock (:class:`EmulationError` lists who waits on what). At the end every FIFO must be
  empty (bytes left over: producer and consumer patterns disagree) and every lock back at its
  initial value (so the next run starts in step, as the hardware keeps its state).
- Address patterns are turned into byte index arrays once per BD and cached per plan.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from ..design import limits
from ..design.dataflow import (
    ELEM_BYTES,
    KERNEL_FUNC,
    KERNEL_FUNC_CI4,
    MM2S,
    BufferDescriptor,
    CoreProgram,
    Dim,
    LockOp,
    NpuPlan,
    Port,
    ShimTask,
)
from . import kernel_model

#: Stream back-pressure threshold per destination FIFO.
FIFO_BYTES = 256 * 1024
#: Largest piece one MM2S step moves (keeps huge shim reads incremental).
CHUNK_BYTES = 64 * 1024
#: Patterns up to this many bytes keep a full cached index array.
CACHE_BYTES = 4 * 1024 * 1024
#: Steps one process may take per turn before yielding to the others.
STEPS_PER_TURN = 64


class EmulationError(RuntimeError):
    """The plan cannot run to completion: deadlock, lock overflow or stream mismatch."""


class Pattern:
    """Byte addresses of one transfer: ``offset`` + n-D (size, stride) walk, element units."""

    def __init__(self, offset: int, length: int, dims: tuple[Dim, ...], elem_bytes: int) -> None:
        if not dims:
            dims = (Dim(length, 1),) if length else ()
        sizes = [d.size for d in dims]
        strides = [d.stride * elem_bytes for d in dims]
        if elem_bytes > 1:  # each element is elem_bytes consecutive bytes
            sizes.append(elem_bytes)
            strides.append(1)
        self.base = offset * elem_bytes
        self.sizes = tuple(sizes)
        self.strides = tuple(strides)
        self.nbytes = length * elem_bytes
        self.contiguous = self._is_contiguous()
        self._full: np.ndarray | None = None

    def _is_contiguous(self) -> bool:
        span = 1
        for size, stride in zip(reversed(self.sizes), reversed(self.strides), strict=True):
            if size > 1 and stride != span:
                return False
            span *= size
        return True

    def _compute(self, start: int, stop: int) -> np.ndarray:
        k = np.arange(start, stop, dtype=np.int64)
        idx = np.full(k.shape, self.base, dtype=np.int64)
        for size, stride in zip(reversed(self.sizes), reversed(self.strides), strict=True):
            idx += (k % size) * stride
            k //= size
        return idx

    def index(self, start: int, stop: int) -> slice | np.ndarray:
        """Byte addresses of pattern positions [start, stop)."""
        if self.contiguous:
            return slice(self.base + start, self.base + stop)
        if self.nbytes <= CACHE_BYTES:
            if self._full is None:
                self._full = self._compute(0, self.nbytes)
            return self._full[start:stop]
        return self._compute(start, stop)


class _Fifo:
    """Bytes in flight on one stream into one S2MM channel."""

    def __init__(self) -> None:
        self.chunks: deque[np.ndarray] = deque()
        self.size = 0

    def push(self, data: np.ndarray) -> None:
        self.chunks.append(data)
        self.size += data.size

    def pop(self, n: int) -> np.ndarray:
        parts = []
        while n:
            head = self.chunks[0]
            if head.size <= n:
                parts.append(self.chunks.popleft())
                n -= head.size
            else:
                parts.append(head[:n])
                self.chunks[0] = head[n:]
                n = 0
        out = parts[0] if len(parts) == 1 else np.concatenate(parts)
        self.size -= out.size
        return out


class _Machine:
    """Shared state of one run: memories, locks, FIFOs."""

    def __init__(self, plan: NpuPlan, host: dict[str, np.ndarray]) -> None:
        self.plan = plan
        self.mem = {b.name: np.zeros(b.nbytes, np.uint8) for b in plan.buffers}
        self.mem.update(host)
        self.locks = {lk.name: lk.init for lk in plan.locks}
        self.fifos: dict[Port, _Fifo] = {}
        self.routes: dict[Port, list[_Fifo]] = {}
        for flow in plan.flows:
            fifos = [self.fifos.setdefault(d, _Fifo()) for d in flow.dests]
            self.routes[flow.source] = fifos
        self.kernel_calls = 0

    def acquire(self, op: LockOp | None) -> bool:
        if op is None:
            return True
        if self.locks[op.lock] < op.value:
            return False
        self.locks[op.lock] -= op.value
        return True

    def release(self, op: LockOp | None, who: str) -> None:
        if op is None:
            return
        value = self.locks[op.lock] + op.value
        if value > limits.LOCK_VALUE_MAX:
            raise EmulationError(f"{who}: release of {op.lock} to {value} overflows the lock")
        self.locks[op.lock] = value


class _Transfer:
    """One BD or task in progress: a pattern over a memory, moved in pieces."""

    def __init__(self, pattern: Pattern, memory: str) -> None:
        self.pattern = pattern
        self.memory = memory
        self.done = 0

    def step(self, m: _Machine, direction: str, port: Port) -> int:
        """Move as much as possible now; returns bytes moved."""
        left = self.pattern.nbytes - self.done
        mem = m.mem[self.memory]
        if direction == MM2S:
            dests = m.routes.get(port, [])
            if not dests or any(f.size >= FIFO_BYTES for f in dests):
                return 0
            n = min(left, CHUNK_BYTES)
            data = mem[self.pattern.index(self.done, self.done + n)].copy()
            for f in dests:
                f.push(data)
        else:
            fifo = m.fifos.get(port)
            n = min(left, fifo.size) if fifo is not None else 0
            if not n:
                return 0
            mem[self.pattern.index(self.done, self.done + n)] = fifo.pop(n)
        self.done += n
        return n

    @property
    def finished(self) -> bool:
        return self.done == self.pattern.nbytes


class _Channel:
    """A tile DMA channel running its BD chain."""

    def __init__(self, m: _Machine, port: Port, bds: tuple[BufferDescriptor, ...],
                 patterns: dict[str, Pattern], loop: bool) -> None:
        self.m, self.port, self.bds, self.loop = m, port, bds, loop
        self.patterns = patterns
        self.i = 0
        self.xfer: _Transfer | None = None  # set once the BD's lock is held

    def describe(self) -> str:
        if self.i >= len(self.bds):
            return f"{self.port}: chain finished"
        bd = self.bds[self.i]
        if self.xfer is None:
            return f"{self.port} BD {bd.name}: waits for {bd.acquire}"
        return (f"{self.port} BD {bd.name}: moved {self.xfer.done}/{self.xfer.pattern.nbytes} B "
                f"(stream {'full' if self.port.direction == MM2S else 'empty'})")

    def holding(self) -> list[LockOp]:
        """Locks held by a BD waiting for data; a half-moved BD is an error at the end."""
        if self.xfer is None:
            return []
        if self.xfer.done:
            raise EmulationError(f"run ended inside a transfer: {self.describe()}")
        bd = self.bds[self.i]
        return [bd.acquire] if bd.acquire else []

    def step(self) -> bool:
        if self.i >= len(self.bds):
            return False
        bd = self.bds[self.i]
        if self.xfer is None:
            if not self.m.acquire(bd.acquire):
                return False
            self.xfer = _Transfer(self.patterns[bd.name], bd.buffer)
            progressed = True
        else:
            progressed = False
        if not self.xfer.finished:
            progressed |= self.xfer.step(self.m, self.port.direction, self.port) > 0
        if self.xfer.finished:
            self.m.release(bd.release, bd.name)
            self.xfer = None
            self.i += 1
            if self.loop and self.i == len(self.bds):
                self.i = 0
            progressed = True
        return progressed


class _Task:
    """A runtime shim task: one pattern over a host buffer, run once."""

    def __init__(self, m: _Machine, task: ShimTask, pattern: Pattern) -> None:
        self.m, self.task = m, task
        self.xfer = _Transfer(pattern, task.host)

    @property
    def finished(self) -> bool:
        return self.xfer.finished

    def describe(self) -> str:
        return (f"task {self.task.name} on {self.task.port}: moved {self.xfer.done}/"
                f"{self.xfer.pattern.nbytes} B")

    def holding(self) -> list[LockOp]:
        return []

    def step(self) -> bool:
        if self.xfer.finished:
            return False
        return self.xfer.step(self.m, self.task.port.direction, self.task.port) > 0


#: The kernel model of each entry point a plan may name: nibble order for ci4, None for ci8.
_ENTRY_POINTS = {KERNEL_FUNC: None, **{f: order for order, f in KERNEL_FUNC_CI4.items()}}


class _Core:
    """A compute tile's core running its CoreProgram with the kernel model."""

    def __init__(self, m: _Machine, core: CoreProgram) -> None:
        self.m, self.core = m, core
        g = m.plan.geometry
        self.dims = (g.tile_n, g.tile_m, g.tile_t)
        if core.kernel not in _ENTRY_POINTS:
            raise EmulationError(f"core {core.tile}: no kernel entry point {core.kernel!r}")
        self.nibble_order = _ENTRY_POINTS[core.kernel]
        if (self.nibble_order is None) != (core.unpacked is None):
            raise EmulationError(f"core {core.tile}: {core.kernel} takes "
                                 f"{'no' if self.nibble_order is None else 'two'} unpack "
                                 f"buffers, the plan gives {core.unpacked}")
        self.state = "acc"  # acc -> a -> b -> (call) -> a ... -> release acc -> acc
        self.call = 0       # calls done in this integration
        self.slot = 0       # ping-pong index, continues across integrations like the DMAs

    def describe(self) -> str:
        c = self.core
        wait = {"acc": c.acc_acquire, "a": c.a_acquire, "b": c.b_acquire}[self.state]
        return f"core {c.tile}: call {self.call}, waits for {wait}"

    def holding(self) -> list[LockOp]:
        """The accumulators once acquired; A while waiting for B."""
        c = self.core
        if self.state == "acc":
            return []
        return [c.acc_acquire] + ([c.a_acquire] if self.state == "b" else [])

    def step(self) -> bool:
        c, m = self.core, self.m
        if self.state == "acc":
            if not m.acquire(c.acc_acquire):
                return False
            kernel_model.xcorr_acc_zero(m.mem[c.acc].view(np.int32))
            self.state = "a"
            return True
        progressed = False
        if self.state == "a":
            if not m.acquire(c.a_acquire):
                return False
            self.state = "b"
            progressed = True
        if not m.acquire(c.b_acquire):
            return progressed  # holds A, waits for B
        a, b, acc, *unpacked = (m.mem[name] for name in c.kernel_args(self.slot))
        if self.nibble_order is None:
            kernel_model.xcorr_kernel(a.view(np.int8), b.view(np.int8), acc.view(np.int32),
                                      *self.dims)
        else:
            ua, ub = unpacked
            kernel_model.xcorr_kernel_ci4(a.view(np.int8), b.view(np.int8), acc.view(np.int32),
                                          ua.view(np.int8), ub.view(np.int8), *self.dims,
                                          self.nibble_order)
        m.kernel_calls += 1
        m.release(c.a_release, str(c.tile))
        m.release(c.b_release, str(c.tile))
        self.slot ^= 1
        self.call += 1
        self.state = "a"
        if self.call == c.calls_per_integration:
            m.release(c.acc_release, str(c.tile))
            self.call = 0
            self.state = "acc"
        return True


class PlanEmulator:
    """Runs one plan many times; address patterns are built once and reused."""

    def __init__(self, plan: NpuPlan) -> None:
        self.plan = plan
        self.patterns: dict[str, Pattern] = {}
        for bd in plan.bds():
            eb = plan.buffer_map[bd.buffer].elem_bytes
            self.patterns[bd.name] = Pattern(bd.offset, bd.length, bd.dims, eb)
        self.task_patterns = {
            t.name: Pattern(t.offset, t.length, t.dims, ELEM_BYTES[plan.host_arg_map[t.host].dtype])
            for t in plan.tasks}
        self.last_kernel_calls = 0

    def run(self, host: dict[str, np.ndarray]) -> None:
        """Run the plan once on host arrays keyed by ``plan.host_args`` names (``out`` filled).

        Inputs are read, the output is written in place; arrays must be C-contiguous with the
        sizes in ``plan.host_args``.
        """
        plan = self.plan
        flat = {}
        for arg in plan.host_args:
            arr = host[arg.name]
            if arr.nbytes != arg.nbytes or not arr.flags.c_contiguous:
                raise ValueError(f"host buffer {arg.name!r} must be C-contiguous with "
                                 f"{arg.nbytes} bytes, got {arr.nbytes}")
            flat[arg.name] = arr.reshape(-1).view(np.uint8)
        m = _Machine(plan, flat)
        tasks = [_Task(m, t, self.task_patterns[t.name]) for t in plan.tasks]
        procs = [_Channel(m, c.port, c.bds, self.patterns, c.loop) for c in plan.chains]
        procs += [_Core(m, c) for c in plan.cores]
        procs += tasks
        while True:
            progressed = False
            for p in procs:
                for _ in range(STEPS_PER_TURN):
                    if not p.step():
                        break
                    progressed = True
            if progressed:
                continue
            if all(t.finished for t in tasks):
                break  # quiescent: every channel and core waits for the next run's data
            blocked = "\n  ".join(p.describe() for p in procs
                                  if not (isinstance(p, _Task) and p.finished))
            raise EmulationError(f"deadlock with tasks pending:\n  {blocked}")
        left = {str(port): f.size for port, f in m.fifos.items() if f.size}
        if left:
            raise EmulationError(f"bytes left in streams after the run: {left}")
        # Quiescent state must be a clean restart point (the hardware keeps it for the next
        # run): no half-done transfer, and every lock at its initial value once the amounts
        # held by waiting channels and cores are counted back.
        held = dict.fromkeys(m.locks, 0)
        for p in procs:
            for op in p.holding():
                held[op.lock] += op.value
        moved = {lk.name: (lk.init, m.locks[lk.name] + held[lk.name]) for lk in plan.locks
                 if m.locks[lk.name] + held[lk.name] != lk.init}
        if moved:
            raise EmulationError(f"locks not back at their initial values (init, now): {moved}")
        self.last_kernel_calls = m.kernel_calls


def expected_kernel_calls(plan: NpuPlan) -> int:
    """Kernel calls one run makes: every core, every channel, every call of an integration."""
    return plan.geometry.nchan_pkt * sum(c.calls_per_integration for c in plan.cores)
