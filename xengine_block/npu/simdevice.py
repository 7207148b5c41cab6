"""SIMULATION of the pyxrt surface the NPU backend uses, so its host code runs in CI.

This is not a device and not XRT: it is a stand-in with exactly the calls
``xengine_block/backends/npu.py`` makes (``NPU_NOTES.md``, "Host with pyxrt"), which executes
the plan emulator when a kernel run is waited for. Pass an instance as the backend's ``xrt=``::

    xrt = SimulatedXrt()
    write_simulated_build(tmp_path, geometry)          # what `aie/build.py` would leave
    backend = NpuBackend(geometry, xrt=xrt, build_dir=tmp_path)

What it models, so that host mistakes show up as they would on hardware:

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

import enum
import json
import threading
import uuid
from collections import Counter
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..geometry import Geometry
from .artifacts import (
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
from .emulate import EmulationError, PlanEmulator
from .plan import build_plan

#: First word of a simulated instruction stream.
INSTS_MAGIC = 0x58454E53  # "XENS"


class SimulatedSyncDirection(enum.Enum):
    """Stands for ``pyxrt.xclBOSyncDirection``."""

    XCL_BO_SYNC_BO_TO_DEVICE = 0
    XCL_BO_SYNC_BO_FROM_DEVICE = 1


class SimulatedCmdState(enum.Enum):
    """Stands for ``pyxrt.ert_cmd_state`` (the value ``run.wait()`` returns)."""

    ERT_CMD_STATE_COMPLETED = 4
    ERT_CMD_STATE_ERROR = 5


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

    def map(self) -> memoryview:
        """The host copy (wrap with ``np.frombuffer``)."""
        return memoryview(self.host)

    def size(self) -> int:
        return self.nbytes

    def sync(self, direction: SimulatedSyncDirection, size: int | None = None,
             offset: int = 0) -> None:
        end = self.nbytes if size is None else offset + size
        if direction is SimulatedSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE:
            self.dev[offset:end] = self.host[offset:end]
            self.device.xrt.count("sync_to_device_bytes", end - offset)
        elif direction is SimulatedSyncDirection.XCL_BO_SYNC_BO_FROM_DEVICE:
            self.host[offset:end] = self.dev[offset:end]
            self.device.xrt.count("sync_from_device_bytes", end - offset)
        else:
            raise ValueError(f"simulated XRT: bad sync direction {direction!r}")


@lru_cache(maxsize=8)
def _emulator(g: Geometry) -> PlanEmulator:
    return PlanEmulator(build_plan(g))


class SimulatedRun:
    """Stands for the run handle ``kernel(...)`` returns; the work happens in :meth:`wait`."""

    def __init__(self, kernel: SimulatedKernel, a: SimulatedBo, b: SimulatedBo,
                 out: SimulatedBo) -> None:
        self.kernel, self.a, self.b, self.out = kernel, a, b, out
        self.state: SimulatedCmdState | None = None
        self.error: Exception | None = None

    def wait(self, timeout_ms: int = 0) -> SimulatedCmdState:
        if self.state is None:
            emu = _emulator(self.kernel.geometry)
            try:
                with self.kernel.lock:  # one array: runs execute one at a time
                    emu.run({"a": self.a.dev.view(np.int8), "b": self.b.dev.view(np.int8),
                             "out": self.out.dev.view(np.int32)})
                self.state = SimulatedCmdState.ERT_CMD_STATE_COMPLETED
            except EmulationError as exc:
                self.error, self.state = exc, SimulatedCmdState.ERT_CMD_STATE_ERROR
            self.kernel.context.device.xrt.count("runs")
        return self.state


class SimulatedKernel:
    """Stands for ``pyxrt.kernel(context, name)``; calling it starts a (simulated) run."""

    def __init__(self, context: SimulatedHwContext, name: str) -> None:
        if name != context.xclbin.kernel_name:
            raise RuntimeError(f"simulated XRT: no kernel {name!r} in the xclbin")
        self.context = context
        self.geometry = context.xclbin.geometry
        self.lock = threading.Lock()
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
        if opcode != OPCODE:
            raise RuntimeError(f"simulated XRT: opcode {opcode}, NPU designs take {OPCODE}")
        if (not isinstance(instr, SimulatedBo) or instr.flags != SimulatedBo.cacheable
                or instr.group != self.group_id(INSTR_GROUP)):
            raise RuntimeError("simulated XRT: instructions must be a cacheable BO of group_id(1)")
        words = instr.dev.view(np.uint32)[:ninstr]
        if not np.array_equal(words, self.context.xclbin.insts):
            raise RuntimeError("simulated XRT: the instruction BO (device copy) does not hold "
                               "the build's instruction stream")
        # NPU host_only BOs share one host memory; a BO may serve as A on one call and B on
        # another, so inputs may come from either input group.
        inputs = {self.group_id(A_GROUP), self.group_id(B_GROUP)}
        return SimulatedRun(self, self._check_data(a, A_GROUP, "a", inputs),
                            self._check_data(b, B_GROUP, "b", inputs),
                            self._check_data(out, OUT_GROUP, "out", {self.group_id(OUT_GROUP)}))


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

    def __init__(self, ndevices: int = 1) -> None:
        self.ndevices = ndevices
        self.counters: Counter[str] = Counter()
        self._lock = threading.Lock()

    def device(self, index: int) -> SimulatedDevice:
        return SimulatedDevice(self, index)

    def count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self.counters[name] += n


def simulated_insts(g: Geometry) -> np.ndarray:
    """A stand-in instruction stream: magic, P, then a few words naming the design."""
    d = design_geometry(g)
    return np.array([INSTS_MAGIC, d.npacket, d.npu_block, d.nchan_pkt, d.tile_n, d.tile_m,
                     d.tile_t, d.rows, d.cols], dtype=np.uint32)


def write_simulated_build(root: str | Path, g: Geometry) -> Artifacts:
    """Write ``root/<tag>/`` as the build would, with a simulated xclbin (JSON) and insts."""
    art = Artifacts(Path(root) / geometry_tag(g))
    art.directory.mkdir(parents=True, exist_ok=True)
    insts = simulated_insts(g)
    art.xclbin.write_text(json.dumps({
        "simulated_xclbin": 1, "geometry": design_geometry(g).to_dict(),
        "kernel": KERNEL_NAME, "uuid": str(uuid.uuid4()), "insts": insts.tolist()}))
    insts.tofile(art.insts)
    art.write_manifest(g, simulated=True)
    return art


__all__ = ["SimulatedBo", "SimulatedCmdState", "SimulatedDevice",
           "SimulatedHwContext", "SimulatedKernel", "SimulatedRun", "SimulatedSyncDirection",
           "SimulatedXclbin", "SimulatedXrt", "simulated_insts", "write_simulated_build"]
