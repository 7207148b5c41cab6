"""SIMULATION of the pyxrt surface the NPU backend uses, so its host code runs in CI.

This is not a device and not XRT: it is a stand-in with exactly the calls
``xengine_block/backends/npu.py`` makes (docs/npu_hardware.md, "Host structure"), which executes
the plan emulator on a device thread from the moment the kernel is called. Pass an instance as
the backend's ``xrt=``::

    xrt = SimulatedXrt()
    write_simulated_build(tmp_path, geometry)   # what the design's build leaves
    backend = NpuBackend(geometry, xrt=xrt, build_dir=tmp_path)

What it models, so that host mistakes show up as they would on hardware (the pyxrt calls as
XRT's ``src/python/pybind11/src/pyxrt.cpp`` binds them):

- pyxrt keeps Python's GIL for the whole of ``run.wait``, ``bo.sync`` and ``kernel(...)``
  (no ``gil_scoped_release`` there): here one process-wide lock (:data:`PYXRT_LOCK`) is held
  for the whole of each of those calls (and ``run.state()``), so two threads never overlap
  them, and a ``run.wait()`` without a timeout blocks every other pyxrt call until the run
  ends. (The real GIL would stop all other Python code as well; the simulation stops only
  pyxrt calls, so overlap measured here is an upper bound.)
- the work starts when the kernel is called: a device thread per kernel executes runs in
  order (modelled time ``kernel_s``, then the emulator), independently of ``wait``;
  ``SimulatedXrt(hang=True)`` makes every run hang (it never completes);
- ``bo.sync`` takes ``(direction)`` or ``(direction, size, offset)`` and refuses
  ``(direction, size)`` as pybind11 does; ``sync_s_per_mib`` models its cost (slept while
  holding the lock);
- ``map()`` memory is valid only while its BO lives: when a BO is freed its memory is
  overwritten (0xDB), so a view kept past its BO reads garbage, as a dangling pointer would;

- every buffer object (BO) has a host copy (``map()``) and a device copy; only ``sync`` moves
  data between them, so a forgotten or misdirected sync gives a wrong result;
- the kernel reads the instruction BO's device copy and checks it holds the build's
  instruction words (loaded, synced, counted right), checks the opcode (3), BO flags
  (instructions ``cacheable``, data ``host_only``), sizes and memory groups, then runs the plan
  of the design geometry recorded in the simulated xclbin on the device copies of ``a``, ``b``
  and writes ``out``;
- ``device(i)`` fails for i >= ``ndevices`` (``SimulatedXrt(ndevices=0)``: a machine without
  an NPU), an xclbin must be registered before a ``hw_context`` uses it;
- sub-buffers (``bo(parent, size, offset)``) share the parent's memory (the backend's zero-copy
  path runs the kernel on sub-buffers of ring memory allocated as host-only BOs).

What it cannot tell: timing, real DMA behaviour, whether XRT accepts one BO as two arguments
(the backend passes the same BO as A and B on diagonal block pairs; see docs/npu_hardware.md),
whether XRT/amdxdna accepts sub-buffers of host-only BOs as kernel arguments and with which
offset alignment.
"""

from __future__ import annotations

import collections
import enum
import json
import queue
import threading
import time
import uuid
import weakref
from collections import Counter
from functools import lru_cache
from pathlib import Path

import numpy as np

from ...geometry import Geometry
from ..design.artifacts import (
    A_GROUP,
    B_GROUP,
    INSTR_GROUP,
    KERNEL_NAME,
    OPCODE,
    OUT_GROUP,
    Artifacts,
    design_geometry,
    geometry_tag,
)
from ..design.plan import build_plan, reads_diagonal_once, single_read_diagonal
from .emulate import EmulationError, PlanEmulator

#: First word of a simulated instruction stream.
INSTS_MAGIC = 0x58454E53  # "XENS"
class FairLock:
    """A re-entrant lock handed to its waiters in the order they asked, as Python's GIL is
    handed over: a thread waiting for it asks the holder to drop it and gets it next, so a
    thread calling pyxrt back to back cannot starve the others (a plain ``RLock`` lets the
    releasing thread take it again at once)."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._owner: int | None = None
        self._depth = 0
        self._queue: collections.deque[int] = collections.deque()

    def acquire(self, blocking: bool = True) -> bool:
        me = threading.get_ident()
        with self._cond:
            if self._owner == me:
                self._depth += 1
                return True
            if self._owner is None and not self._queue:
                self._owner, self._depth = me, 1
                return True
            if not blocking:
                return False
            self._queue.append(me)
            while self._owner is not None or self._queue[0] != me:
                self._cond.wait()
            self._queue.popleft()
            self._owner, self._depth = me, 1
            return True

    def release(self) -> None:
        with self._cond:
            if self._owner != threading.get_ident():
                raise RuntimeError("FairLock released by a thread that does not hold it")
            self._depth -= 1
            if self._depth == 0:
                self._owner = None
                self._cond.notify_all()

    def __enter__(self) -> FairLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


#: Stands for Python's GIL as pyxrt holds it: one lock for the whole process, held for the
#: whole of every run.wait / run.state / bo.sync / kernel(...) call, handed over in turn.
PYXRT_LOCK = FairLock()
#: What a freed BO's memory reads as.
POISON = 0xDB


class SimulatedSyncDirection(enum.Enum):
    """Stands for ``pyxrt.xclBOSyncDirection``."""

    XCL_BO_SYNC_BO_TO_DEVICE = 0
    XCL_BO_SYNC_BO_FROM_DEVICE = 1


class SimulatedCmdState(enum.Enum):
    """Stands for ``pyxrt.ert_cmd_state`` (what ``run.wait()`` and ``run.state()`` return)."""

    ERT_CMD_STATE_NEW = 1
    ERT_CMD_STATE_QUEUED = 2
    ERT_CMD_STATE_COMPLETED = 4
    ERT_CMD_STATE_ERROR = 5
    ERT_CMD_STATE_ABORT = 6
    ERT_CMD_STATE_SUBMITTED = 7
    ERT_CMD_STATE_TIMEOUT = 8


class SimulatedXclbin:
    """Stands for ``pyxrt.xclbin(path)``: reads a file written by :func:`write_simulated_build`."""

    def __init__(self, path: str) -> None:
        try:
            data = json.loads(Path(path).read_text())
            if not data.get("simulated_xclbin"):
                raise ValueError("not marked as simulated")
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            raise RuntimeError(f"{path} is not a simulated xclbin ({exc})") from exc
        self.path = path
        self.geometry = Geometry.from_dict(data["geometry"])
        #: "main" (the geometry's plan) or "diagonal" (its single-read diagonal plan).
        self.design = data.get("design", "main")
        self.kernel_name = data["kernel"]
        self.insts = np.asarray(data["insts"], dtype=np.uint32)
        self._uuid = data["uuid"]

    def get_uuid(self) -> str:
        return self._uuid


class SimulatedDevice:
    """Stands for ``pyxrt.device(i)``."""

    def __init__(self, xrt: SimulatedXrt, index: int) -> None:
        if not 0 <= index < xrt.ndevices:
            raise RuntimeError(f"simulated XRT: no device {index} ({xrt.ndevices} devices)")
        self.xrt = xrt
        self.index = index
        self.xclbins: dict[str, SimulatedXclbin] = {}
        #: One NPU array: runs of every kernel (every xclbin) execute one at a time, in the
        #: order the kernels were called.
        self.runs: queue.Queue[SimulatedRun | None] = queue.Queue()
        threading.Thread(target=_device_loop, args=(self.runs,), name="simulated-npu",
                         daemon=True).start()
        weakref.finalize(self, self.runs.put, None)

    def register_xclbin(self, xclbin: SimulatedXclbin) -> None:
        self.xclbins[xclbin.get_uuid()] = xclbin


class SimulatedHwContext:
    """Stands for ``pyxrt.hw_context(device, uuid)``."""

    def __init__(self, device: SimulatedDevice, xclbin_uuid: str) -> None:
        if xclbin_uuid not in device.xclbins:
            raise RuntimeError("simulated XRT: hw_context for an xclbin not registered")
        self.device = device
        self.xclbin = device.xclbins[xclbin_uuid]


class SimulatedBo:
    """Stands for ``pyxrt.bo(device, nbytes, flags, group)``: host and device copies.

    ``SimulatedBo(parent, size, offset)`` stands for pyxrt's sub-buffer constructor
    (``xrt::bo(const bo& parent, size_t size, size_t offset)``): bytes ``[offset, offset +
    size)`` of the parent, sharing its host and device memory, flags and group; its ``sync``
    moves only that region.
    """

    host_only = "host_only"
    cacheable = "cacheable"

    def __init__(self, device: SimulatedDevice | SimulatedBo, nbytes: int, flags: str | int,
                 group: int | None = None) -> None:
        self.parent: SimulatedBo | None = None
        self.offset = 0
        if isinstance(device, SimulatedBo) and group is None:
            parent, offset = device, flags
            if not isinstance(offset, int) or offset < 0 or offset + nbytes > parent.nbytes:
                raise RuntimeError(f"simulated XRT: sub-buffer [{offset}, +{nbytes}) outside "
                                   f"its parent of {parent.nbytes} bytes")
            self.device, self.nbytes = parent.device, int(nbytes)
            self.flags, self.group = parent.flags, parent.group
            self.parent, self.offset = parent, parent.offset + offset
            self.host = parent.host[offset:offset + self.nbytes]
            self.dev = parent.dev[offset:offset + self.nbytes]
            self.device.xrt.count("sub_buffers")
            return
        if not isinstance(device, SimulatedDevice):
            raise TypeError("simulated XRT: bo needs a device (or a parent bo, size, offset)")
        if flags not in (self.host_only, self.cacheable):
            raise ValueError(f"simulated XRT: unknown BO flags {flags!r}")
        self.device, self.nbytes, self.flags, self.group = device, int(nbytes), flags, group
        self.host = np.zeros(self.nbytes, np.uint8)
        self.dev = np.zeros(self.nbytes, np.uint8)
        weakref.finalize(self, _poison, self.host)

    def map(self) -> memoryview:
        """The host copy (wrap with ``np.frombuffer``)."""
        return memoryview(self.host)

    def size(self) -> int:
        return self.nbytes

    def sync(self, direction: SimulatedSyncDirection, *args: int) -> None:
        """pyxrt's two overloads: ``sync(dir)`` (whole BO) or ``sync(dir, size, offset)``."""
        if len(args) not in (0, 2):
            raise TypeError("sync(): incompatible function arguments. The following argument "
                            "types are supported:\n    1. (self: pyxrt.bo, arg0: "
                            "xclBOSyncDirection, arg1: int, arg2: int) -> None\n    2. (self: "
                            "pyxrt.bo, arg0: xclBOSyncDirection) -> None")
        size, offset = args if args else (self.nbytes, 0)
        end = offset + size
        if offset < 0 or end > self.nbytes:
            raise RuntimeError(f"simulated XRT: sync [{offset}, {end}) outside a BO of "
                               f"{self.nbytes} bytes")
        xrt = self.device.xrt
        with PYXRT_LOCK:  # pyxrt holds the GIL for the whole sync
            if xrt.sync_s_per_mib:
                time.sleep(xrt.sync_s_per_mib * size / 2**20)
            if not xrt.compute:  # timing only: the modelled cost, no bytes moved
                xrt.count("syncs")
                return
            if direction is SimulatedSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE:
                self.dev[offset:end] = self.host[offset:end]
                xrt.count("sync_to_device_bytes", size)
            elif direction is SimulatedSyncDirection.XCL_BO_SYNC_BO_FROM_DEVICE:
                self.host[offset:end] = self.dev[offset:end]
                xrt.count("sync_from_device_bytes", size)
            else:
                raise ValueError(f"simulated XRT: bad sync direction {direction!r}")


def _poison(memory: np.ndarray) -> None:
    """A freed BO's memory: what a view kept past its BO reads."""
    memory[:] = POISON


@lru_cache(maxsize=8)
def _emulator(g: Geometry, design: str = "main") -> PlanEmulator:
    plan = build_plan(g)
    return PlanEmulator(single_read_diagonal(plan) if design == "diagonal" else plan)


class SimulatedRun:
    """Stands for the run handle ``kernel(...)`` returns; the device executes it on its own."""

    def __init__(self, kernel: SimulatedKernel, a: SimulatedBo, b: SimulatedBo,
                 out: SimulatedBo) -> None:
        self.kernel, self.a, self.b, self.out = kernel, a, b, out
        self.queued_at = time.perf_counter()
        self._state = SimulatedCmdState.ERT_CMD_STATE_SUBMITTED
        self._done = threading.Event()
        self.error: Exception | None = None

    def _execute(self, previous_end: float) -> float:
        """On the device thread: the modelled run time, then the emulator on device copies.

        The run starts when it was queued or when the previous run ended, whichever is later
        (device time, not when this thread got round to it: a run queued behind another
        starts as that one ends), and ends ``kernel_s`` later (or when the emulator is done,
        if later); returns its end."""
        xrt = self.kernel.context.device.xrt
        if xrt.hang:
            return previous_end  # a hung NPU: the run never completes
        start = max(self.queued_at, previous_end)
        kernel_s = xrt.kernel_s_of.get(self.kernel.design, xrt.kernel_s)
        if kernel_s:
            time.sleep(max(0.0, start + kernel_s - time.perf_counter()))
        try:
            if xrt.compute:
                _emulator(self.kernel.geometry, self.kernel.design).run(
                    {"a": self.a.dev.view(np.int8), "b": self.b.dev.view(np.int8),
                     "out": self.out.dev.view(np.int32)})
            self._state = SimulatedCmdState.ERT_CMD_STATE_COMPLETED
        except EmulationError as exc:
            self.error, self._state = exc, SimulatedCmdState.ERT_CMD_STATE_ERROR
        xrt.count("runs")
        xrt.count(f"{self.kernel.design}_runs")
        end = max(start + kernel_s, time.perf_counter() if xrt.compute else 0.0)
        xrt.busy(start, end)
        self._done.set()
        return end

    def state(self) -> SimulatedCmdState:
        with PYXRT_LOCK:
            return self._state

    def wait(self, timeout_ms: int = 0) -> SimulatedCmdState:
        """pyxrt's ``run.wait([timeout_ms])``: 0 waits for ever, holding the lock (the GIL)."""
        xrt = self.kernel.context.device.xrt
        with PYXRT_LOCK:
            if timeout_ms:
                if not self._done.wait(timeout_ms / 1000):
                    return SimulatedCmdState.ERT_CMD_STATE_TIMEOUT
            elif not self._done.wait(xrt.hang_guard_s):
                # Safety valve of the simulation only: pyxrt would block here for ever with
                # the GIL held, freezing the whole process.
                raise SimulatedHang(f"simulated XRT: run.wait() without a timeout blocked "
                                    f"{xrt.hang_guard_s} s on a hung run; with pyxrt it never "
                                    f"returns and the GIL stays held (process frozen)")
            return self._state


class SimulatedHang(RuntimeError):
    """The simulation stopped a wait that pyxrt would never return from (tests only)."""


def _device_loop(runs: queue.Queue) -> None:
    """One NPU array: runs execute one at a time, in the order the kernel was called."""
    end = 0.0
    while (run := runs.get()) is not None:
        end = run._execute(end)


class SimulatedKernel:
    """Stands for ``pyxrt.kernel(context, name)``; calling it starts a (simulated) run."""

    def __init__(self, context: SimulatedHwContext, name: str) -> None:
        if name != context.xclbin.kernel_name:
            raise RuntimeError(f"simulated XRT: no kernel {name!r} in the xclbin")
        self.context = context
        self.geometry = context.xclbin.geometry
        self.design = context.xclbin.design
        self._nbytes = {a.name: a.nbytes for a in build_plan(self.geometry).host_args}

    def group_id(self, arg: int) -> int:
        """Memory group of kernel argument ``arg`` (offset so a raw index is not mistaken)."""
        return 100 + arg

    def _check_data(self, bo: object, arg: int, name: str, groups: set[int]) -> SimulatedBo:
        if not isinstance(bo, SimulatedBo) or bo.flags != SimulatedBo.host_only:
            raise RuntimeError(f"simulated XRT: argument {name} must be a host_only BO")
        if bo.nbytes != self._nbytes[name]:
            raise RuntimeError(f"simulated XRT: BO {name} has {bo.nbytes} bytes, the design "
                               f"takes {self._nbytes[name]}")
        if bo.group not in groups:
            raise RuntimeError(f"simulated XRT: BO {name} in memory group {bo.group}")
        return bo

    def __call__(self, opcode: int, instr: SimulatedBo, ninstr: int, a: SimulatedBo,
                 b: SimulatedBo, out: SimulatedBo) -> SimulatedRun:
        with PYXRT_LOCK:
            if opcode != OPCODE:
                raise RuntimeError(f"simulated XRT: opcode {opcode}, NPU designs take {OPCODE}")
            if (not isinstance(instr, SimulatedBo) or instr.flags != SimulatedBo.cacheable
                    or instr.group != self.group_id(INSTR_GROUP)):
                raise RuntimeError("simulated XRT: instructions must be a cacheable BO of "
                                   "group_id(1)")
            words = instr.dev.view(np.uint32)[:ninstr]
            if self.context.device.xrt.compute and not np.array_equal(
                    words, self.context.xclbin.insts):
                raise RuntimeError("simulated XRT: the instruction BO (device copy) does not "
                                   "hold the build's instruction stream")
            # NPU host_only BOs share one host memory; a BO may serve as A on one call and B
            # on another, so inputs may come from either input group.
            inputs = {self.group_id(A_GROUP), self.group_id(B_GROUP)}
            run = SimulatedRun(self, self._check_data(a, A_GROUP, "a", inputs),
                               self._check_data(b, B_GROUP, "b", inputs),
                               self._check_data(out, OUT_GROUP, "out",
                                                {self.group_id(OUT_GROUP)}))
            self.context.device.runs.put(run)  # the device starts now, not at wait()
            return run


class SimulatedXrt:
    """The simulated ``pyxrt`` module (pass as ``NpuBackend(..., xrt=SimulatedXrt())``).

    ``counters`` counts runs and bytes synced each way, for tests of the host's discipline.
    """

    xclbin = SimulatedXclbin
    hw_context = SimulatedHwContext
    kernel = SimulatedKernel
    bo = SimulatedBo
    xclBOSyncDirection = SimulatedSyncDirection
    ert_cmd_state = SimulatedCmdState

    def __init__(self, ndevices: int = 1, *, kernel_s: float = 0.0,
                 sync_s_per_mib: float = 0.0, hang: bool = False,
                 hang_guard_s: float = 5.0, compute: bool = True,
                 kernel_s_of: dict[str, float] | None = None) -> None:
        self.ndevices = ndevices
        #: Modelled device time of one run and host time of a sync (benchmarks);
        #: ``kernel_s_of``: per design ("main", "diagonal"), where it differs from kernel_s.
        self.kernel_s = kernel_s
        self.kernel_s_of = dict(kernel_s_of or {})
        self.sync_s_per_mib = sync_s_per_mib
        #: False: a timing-only device for benchmarks (runs and syncs take their modelled
        #: time, but no bytes move and nothing is computed: outputs are meaningless).
        self.compute = compute
        #: (start, end) of each run on the device, perf_counter seconds (the NPU's busy time).
        self.busy_intervals: list[tuple[float, float]] = []
        #: Every run hangs (never completes): what a stuck NPU looks like to the host.
        self.hang = hang
        #: How long a timeout-less ``run.wait()`` on a hung run may block before the simulation
        #: raises SimulatedHang (pyxrt would block for ever).
        self.hang_guard_s = hang_guard_s
        self.counters: Counter[str] = Counter()
        self._lock = threading.Lock()

    def device(self, index: int) -> SimulatedDevice:
        return SimulatedDevice(self, index)

    def count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self.counters[name] += n

    def busy(self, start: float, end: float) -> None:
        with self._lock:
            self.busy_intervals.append((start, end))

    def idle_fraction(self, since: float = 0.0) -> float:
        """Share of the time from the first run started after ``since`` (perf_counter) to the
        last run's end that the device had no run executing: the time the NPU waited for
        the host."""
        with self._lock:
            runs = [(s, e) for s, e in self.busy_intervals if s >= since]
        if not runs:
            raise ValueError("no run on the device in that window")
        span = max(e for _, e in runs) - min(s for s, _ in runs)
        return 1 - sum(e - s for s, e in runs) / span if span > 0 else 0.0


def simulated_insts(g: Geometry) -> np.ndarray:
    """A stand-in instruction stream: magic, P, then a few words naming the design."""
    d = design_geometry(g)
    return np.array([INSTS_MAGIC, d.npacket, d.npu_block, d.nchan_pkt, d.tile_n, d.tile_m,
                     d.tile_t, d.rows, d.cols], dtype=np.uint32)


def write_simulated_build(root: str | Path, g: Geometry, diagonal: bool = True) -> Artifacts:
    """Write ``root/<tag>/`` as the build would, with simulated xclbins (JSON) and insts: the
    main design and, where the geometry has one (and ``diagonal``), the single-read design of
    diagonal block pairs."""
    art = Artifacts(Path(root) / geometry_tag(g))
    art.directory.mkdir(parents=True, exist_ok=True)
    designs = [("main", art.xclbin, art.insts, 0)]
    if diagonal and reads_diagonal_once(design_geometry(g)):
        designs.append(("diagonal", art.diagonal_xclbin, art.diagonal_insts, 1))
    for design, xclbin, insts_path, tweak in designs:
        insts = simulated_insts(g)
        insts[-1] += tweak << 16  # each design's instruction stream is its own
        xclbin.write_text(json.dumps({
            "simulated_xclbin": 1, "geometry": design_geometry(g).to_dict(), "design": design,
            "kernel": KERNEL_NAME, "uuid": str(uuid.uuid4()), "insts": insts.tolist()}))
        insts.tofile(insts_path)
    art.write_manifest(g, simulated=True)
    return art


__all__ = ["PYXRT_LOCK", "SimulatedBo", "SimulatedCmdState", "SimulatedDevice", "SimulatedHang",
           "SimulatedHwContext", "SimulatedKernel", "SimulatedRun", "SimulatedSyncDirection",
           "SimulatedXclbin", "SimulatedXrt", "simulated_insts", "write_simulated_build"]
