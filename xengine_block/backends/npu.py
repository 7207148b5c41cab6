"""NPU backend ("npu"): the xclbin built from the plan, run through pyxrt on a Ryzen AI NPU.

Why it is shaped like this (the published design's benchmark host structure): syncing
hundreds of MiB of input to the device costs about a CPU core at full rate, so it runs in its
own thread, overlapped with the kernel runs:

- a ring of ``nring`` entries; an entry holds the input buffer objects (BOs) of one channel
  group, one per NPU stream block (one for S = ``npu_block``), in the DDR layout the plan reads
  (``hostio``: ``[P][npu_block][payload]``);
- the caller's thread takes a free entry and fills it (``blockpairs.fill_inputs``, the stream
  blocks on a few threads), the *sync thread* syncs its BOs to the device (keeping at most
  ``QUEUED + 1`` entries ahead of the launches), the *launch thread* starts one kernel call per
  block pair (``kernel(3, instr_bo, n_words, bo_A, bo_B, bo_out)``) into one of ``nout``
  output BOs, keeps ``QUEUED`` runs queued on the device behind the running one, and collects
  the oldest (polled to completion, its output synced back) for the *placement thread*, which
  places it in the packed triangle in C with the GIL released: the NPU never waits for a
  placement. An entry returns to the free list once its last run has completed;
- diagonal block pairs run the build's second design (``design_diagonal.mlir``), which reads
  its one input once (``plan.single_read_diagonal``: half the host-memory reads); builds
  without it run the main design with A = B;
- block pair (i, j) passes block i's BO as A and block j's as B; a diagonal pair passes the same
  BO twice, so S = 256 syncs its input once, not twice (``share_diagonal=False`` copies into a
  separate B BO instead, should XRT on some system refuse one BO in two arguments).

Zero copy: when the frame layout equals the NPU input layout (S == ``npu_block`` and one
channel group, see ``blockpairs.frames_are_input``), :meth:`NpuBackend.input_buffer` hands out
the next free entry's BO as a ``[P, S, C, coarse, 2, fine]`` frames array; whoever writes frames
there (a capture placing packets directly, or the X-engine block copying its ring span once)
then calls ``correlate(view[:n])``, which sees the frames already live in the BO and only syncs.

Zero copy from a ring: :meth:`NpuBackend.allocate_host` allocates memory as a host-only input
BO (group of argument 3) and returns it as a uint8 array; a ``Ring`` given it as its allocator
(``XEngineBlock(geometry=...)`` installs it) keeps its frames there. ``correlate(frames)`` on
frames lying inside such a BO (by the data pointer of ``__array_interface__``), when the layouts
coincide and the call has all P packets of the build, copies nothing: it makes an XRT sub-buffer
of the parent BO at the frames' offset (``pyxrt.bo(parent, size, offset)``, cached per offset),
syncs only that region and runs the kernel on it with A = B = the sub-buffer. Anything else
(other S, several channel groups, fewer packets, ``share_diagonal=False``, memory not in a BO)
takes the copy path. ``stats`` counts which path each call took. The frames must stay
untouched until the call's job is done (``correlate`` waits, so a ring span it got them from can
be released right after).

pyxrt keeps Python's GIL for the whole of ``run.wait``, ``bo.sync`` and ``kernel(...)`` (XRT's
``pyxrt.cpp`` releases it nowhere). A ``run.wait()`` would therefore stop every other thread
(the sync thread included) for the whole kernel run, and a hung NPU would freeze the process
with no timeout able to fire. So the launch thread never blocks in pyxrt: it polls
``run.state()`` (a short call) and sleeps ``poll_s`` between polls (sleeping releases the GIL);
the sync thread's ``sync`` of the next entry then runs while the NPU computes. A run not done
after ``timeout_s`` fails its job with :class:`NpuTimeout` naming the call, and the backend
refuses further work (the NPU is presumably hung; recreate the backend after resetting it). What
cannot overlap in Python is a ``sync`` with any other Python work (the GIL is held throughout); the
ring loop in native code (``xengine_block/npu/host/native/npu_ring.cpp``, built only where XRT's
headers exist) is the way round that.

ci4 frames (one byte per complex sample) take the same paths with the ci4 build: the buffers
hold the packed bytes as they arrive (half of ci8's, zero copy included) and the compute tiles
unpack them (``docs/npu.md``); a call of more frames than the build's P, which ci4's int32 bound
allows, is several NPU calls summed.

``correlate`` blocks until the triangle is ready; :meth:`NpuBackend.submit` returns the job at
once (``job.result()`` waits), so a caller can keep up to ``nring`` calls in flight and overlap
its filling of the next entry with the device working on the previous one.

Everything pyxrt comes through ``xrt`` (default: ``import pyxrt``); tests pass
``xengine_block.npu.host.simdevice.SimulatedXrt()``, which runs this same code on the emulator.
"""

from __future__ import annotations

import collections
import os
import queue
import threading
import time
import weakref
from collections import Counter
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from ..geometry import PUBLISHED, Geometry
from ..npu.design.artifacts import (
    A_GROUP,
    B_GROUP,
    INSTR_GROUP,
    KERNEL_NAME,
    OPCODE,
    OUT_GROUP,
    design_geometry,
    find_artifacts,
    geometry_tag,
    list_builds,
)
from ..npu.design.plan import build_plan, reads_diagonal_once
from ..npu.host import hostio
from ..npu.host.blockpairs import (
    BlockPairExecutor,
    BlockPairJob,
    correlate_layout_calls,
    fill_threads,
    frames_are_input,
)
from ..npu.model.perfmodel import HostSchedule, Prediction, predict
from ..runtime.memory import bytes_at
from ..sample_layout import SampleLayout
from .base import Backend, BackendUnavailable

PYXRT_HINT = ("pyxrt is not importable: install XRT >= 2.20 with the amdxdna driver "
              "(mainline Linux 6.14+) and `source /opt/xilinx/xrt/setup.sh` "
              "(docs/npu_hardware.md)")


class NpuTimeout(TimeoutError):
    """An NPU run did not complete in time (a hung device); the backend refuses further work."""


#: States after which a run will not change any more (pyxrt.ert_cmd_state member names).
_FINAL_FAILURES = ("ERT_CMD_STATE_ERROR", "ERT_CMD_STATE_ABORT", "ERT_CMD_STATE_TIMEOUT",
                   "ERT_CMD_STATE_NORESPONSE", "ERT_CMD_STATE_SKERROR",
                   "ERT_CMD_STATE_SKCRASHED")


def import_pyxrt() -> ModuleType:
    """pyxrt, or BackendUnavailable saying how to get it."""
    try:
        import pyxrt
    except ImportError as exc:
        raise BackendUnavailable(f"{PYXRT_HINT} ({exc})") from exc
    return pyxrt


def probe(xrt: Any = None, geometry: Geometry | None = None,
          build_dir: str | os.PathLike | None = None) -> tuple[bool, str]:
    """(usable, reason): pyxrt, an NPU device, and a build (for ``geometry`` if given)."""
    try:
        xrt = import_pyxrt() if xrt is None else xrt
    except BackendUnavailable as exc:
        return False, str(exc)
    try:
        xrt.device(0)
    except Exception as exc:  # pyxrt raises RuntimeError; be generous with driver errors
        return False, (f"pyxrt imported but no NPU device 0 ({exc}); needs the amdxdna driver "
                       f"(Linux 6.14+)")
    if geometry is not None:
        art, why = find_artifacts(geometry, build_dir)
        return art is not None, why
    builds = list_builds(build_dir)
    if not builds:
        return False, ("pyxrt and an NPU device, but no xclbin built (run "
                       "`python -m xengine_block.npu.design.build`)")
    return True, "pyxrt + NPU device; builds: " + ", ".join(b.directory.name for b in builds)


@dataclass
class _Entry:
    """One ring slot: an input BO per stream block (and a spare B BO if not sharing)."""

    bos: list[Any]
    views: list[np.ndarray]
    spare: Any = None
    spare_view: np.ndarray | None = None
    #: A zero-copy call's sub-buffer of ring memory: not a ring slot, never freed to the list.
    transient: bool = False


@dataclass
class _Design:
    """One loaded xclbin: its context, kernel and instruction BO."""

    xclbin: Any
    context: Any
    kernel: Any
    instr: Any
    ninstr: int


@dataclass
class _Pending:
    """A run launched and not yet collected, or (``run`` None) the point after a channel
    group's last run where its input entry may be freed."""

    job: BlockPairJob | None
    entry: _Entry
    run: Any = None
    out: int = -1
    group: int = 0
    pair: tuple[int, int] = (0, 0)


@dataclass
class _HostBo:
    """Memory handed out by :meth:`NpuBackend.allocate_host`: the BO and its mapped bytes."""

    end: int  # address one past the last byte
    bo: Any
    array: weakref.ref  # the uint8 array returned (alive while any view of it is)
    subs: dict[int, Any]  # offset -> sub-buffer of the input size (cached)


#: Default sleep between polls of a running kernel's state (``NpuBackend(poll_s=...)``).
POLL_S = 0.0005
#: Runs kept queued on the device behind the running one: the host's hiccups (a poll woken
#: late, a sync holding pyxrt's lock) are absorbed as long as they are shorter than that many
#: runs.
QUEUED = 3
#: Output buffers: one being placed, one written by the running call, one for each call queued
#: behind it (``NpuBackend(nout=...)``).
NOUT = QUEUED + 2


def host_schedule(geometry: Geometry) -> HostSchedule:
    """How this backend drives the NPU for one channel group of ``geometry``, as the
    performance model (:mod:`xengine_block.npu.model.perfmodel`) counts it: one NPU call per block
    pair; the sync thread syncs one input buffer per stream block (diagonal pairs pass it as A
    and B; ci4 packed, as it arrives); the caller's thread copies frames into the buffers
    unless they are the NPU input layout (zero copy), one stream block per thread of a pool;
    the launch thread polls every :data:`POLL_S`, keeps the next run queued behind the running
    one and hands each output to the placement thread, which places it in C with the GIL
    released; diagonal pairs run the design that reads their input once where the geometry
    has it; pyxrt holds the GIL through each sync (module docstring)."""
    design = design_geometry(geometry)
    nblock = geometry.npu_nblock
    fill = () if frames_are_input(geometry) else (("copy", nblock * design.npu_in_bytes),)
    return HostSchedule(name="ours", nstream=geometry.nstream,
                        sample_bits=geometry.sample_bits,
                        npu_calls=len(geometry.npu_block_pairs), diagonal_calls=nblock,
                        sync_bytes=nblock * design.npu_in_bytes, fill=fill,
                        fill_threads=fill_threads(geometry), place="thread", poll_s=POLL_S,
                        gil=True, place_gil=False,
                        diagonal_read_once=reads_diagonal_once(design))


def predicted(geometry: Geometry = PUBLISHED, device: str = "xdna2") -> Prediction:
    """This backend's predicted rate for ``geometry`` on ``device`` (modelled, not measured):
    the plan it would build, driven as :func:`host_schedule` says."""
    return predict(build_plan(design_geometry(geometry)), device, host_schedule(geometry))


#: Kernel tilings (N, M) on the same 4 x 8 array priced against ours: 256-, 128- and 64-stream
#: blocks (S = 256 as 1, 3 or 10 block pairs).
TILINGS = ((8, 4), (4, 2), (2, 1))


def tilings(geometry: Geometry = PUBLISHED, device: str = "xdna2") -> list[dict]:
    """:func:`predicted` of ``geometry`` split into each of :data:`TILINGS`' blocks: its rate,
    bottleneck and the device's own bound (host terms left out), best first. Smaller blocks
    do less of the square's work (3 pairs of 128 do 3/4 of it) but read each block once per
    pair it is in, and their kernel calls are shorter."""
    out = []
    for n, m in TILINGS:
        g = geometry.replace(tile_n=n, tile_m=m)
        p = predicted(g, device)
        out.append({"tile_n": n, "tile_m": m, "npu_block": g.npu_block,
                    "block_pairs": len(g.npu_block_pairs), "msps": p.msps,
                    "bottleneck": p.bottleneck, "device_msps": min(p.device_terms.values())})
    return sorted(out, key=lambda t: -t["msps"])


def predicted_rate(geometry: Geometry = PUBLISHED, device: str = "xdna2") -> str:
    """One line quoting :func:`predicted`, marked as predicted, not measured."""
    p = predicted(geometry, device)
    return (f"predicted, not measured: {p.msps:.1f} Msps at S = {geometry.nstream} "
            f"ci{geometry.sample_bits} on {device} (bound by {p.bottleneck}; "
            f"xengine npu-model)")


#: Sub-buffers cached per host BO (offsets repeat lap after lap in a ring of whole gulps).
MAX_SUB_BOS = 64


def _forget_host_bo(registry: dict[int, _HostBo], lock: threading.Lock, start: int,
                    bo: Any) -> None:
    with lock:
        if start in registry and registry[start].bo is bo:
            del registry[start]


class NpuBackend(Backend, BlockPairExecutor):
    """Exact correlator on the Ryzen AI NPU for any even S (block pairs of ``npu_block``).

    Parameters
    ----------
    geometry : the correlator geometry; the build for ``design_geometry(geometry)`` is used.
    xrt : the pyxrt module (default: ``import pyxrt``) or a stand-in such as ``SimulatedXrt``.
    build_dir : where the build is (else ``$XENGINE_XCLBIN_DIR``, else the user's cache); each
        is tried as ``<dir>/<geometry tag>/`` and as the build directory itself.
    nring : ring entries (input BO sets) in flight.
    share_diagonal : pass one BO as both A and B on diagonal block pairs (no copy).
    device_index : the XRT device.
    timeout_s : longest wait for a free entry, a result or one NPU run before raising
        TimeoutError (:class:`NpuTimeout` for a run: the device is then considered hung).
    poll_s : sleep between polls of a running kernel's state (the GIL is free meanwhile).
    nout : output buffers (at least 2): run k+1 is launched before run k's output is placed,
        the placement running on a thread of its own.
    """

    name = "npu"
    priority = 100

    def __init__(self, geometry: Geometry, *, xrt: Any = None,
                 build_dir: str | os.PathLike | None = None, nring: int = 4,
                 share_diagonal: bool = True, device_index: int = 0,
                 timeout_s: float = 60.0, poll_s: float = POLL_S, nout: int = NOUT) -> None:
        super().__init__(geometry)
        if nout < 2:
            raise ValueError(f"nout must be at least 2 (one run placed while the next runs), "
                             f"got {nout}")
        self._xrt = import_pyxrt() if xrt is None else xrt
        art, why = find_artifacts(geometry, build_dir)
        if art is None:
            raise BackendUnavailable(why)
        self.artifacts = art
        self.design = design_geometry(geometry)
        self.nring = nring
        self.share_diagonal = share_diagonal
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        #: Set when a run timed out: the reason every later call is refused.
        self.broken: str | None = None
        self.ncalls = 0  # kernel runs so far
        #: Calls by input path: ``zero_copy_calls`` (frames in allocate_host memory, run in
        #: place through a sub-buffer), ``in_place_calls`` (frames written into input_buffer()),
        #: ``copied_calls`` (frames copied into a ring entry's BOs).
        #: ``layout_calls``: device calls fed by the host layout pass from another layout.
        self.stats: Counter[str] = Counter(zero_copy_calls=0, in_place_calls=0, copied_calls=0,
                                           layout_calls=0)
        self._host_bos: dict[int, _HostBo] = {}  # by start address
        self._adopted: dict[int, np.ndarray] = {}  # adopt_host_memory's views, by address
        x = self._xrt
        states = x.ert_cmd_state
        self._completed = states.ERT_CMD_STATE_COMPLETED
        self._failed = {getattr(states, n) for n in _FINAL_FAILURES if hasattr(states, n)}
        self._to_device = x.xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE
        self._from_device = x.xclBOSyncDirection.XCL_BO_SYNC_BO_FROM_DEVICE
        self._device = x.device(device_index)
        self._main = self._load_design(art.xclbin, art.insts)
        self._kernel = self._main.kernel
        #: The design of diagonal block pairs reading their input once, where the build has it
        #: (``stats["diagonal_single_read_calls"]`` counts its runs).
        self._diagonal = (self._load_design(art.diagonal_xclbin, art.diagonal_insts)
                          if art.has_diagonal else None)
        self.nout = nout
        self._outs = [self._bo(geometry.npu_out_bytes, x.bo.host_only, OUT_GROUP)
                      for _ in range(nout)]
        self._out_views = [self._map(bo, np.int32, hostio.output_shape(geometry))
                           for bo in self._outs]
        self._free_outs: queue.Queue[int] = queue.Queue()
        for k in range(nout):
            self._free_outs.put(k)
        in_shape = hostio.input_shape(self.design)
        self._entries = []
        for _ in range(nring):
            bos = [self._bo(self.design.npu_in_bytes, x.bo.host_only, A_GROUP)
                   for _ in range(geometry.npu_nblock)]
            entry = _Entry(bos, [self._map(bo, np.int8, in_shape) for bo in bos])
            if not share_diagonal:
                entry.spare = self._bo(self.design.npu_in_bytes, x.bo.host_only, B_GROUP)
                entry.spare_view = self._map(entry.spare, np.int8, in_shape)
            self._entries.append(entry)
        self._entry_of = {id(e.views): e for e in self._entries}
        self._free: queue.Queue[_Entry] = queue.Queue()
        for e in self._entries:
            self._free.put(e)
        self._reserved: dict[int, _Entry] = {}  # handed out by input_buffer(), by address
        self._lock = threading.Lock()
        self._to_sync: queue.Queue = queue.Queue()
        self._to_launch: queue.Queue = queue.Queue()
        self._to_place: queue.Queue = queue.Queue()
        #: Entries synced and not yet taken by the launch thread, at most QUEUED + 1: the sync
        #: thread keeps just ahead of the runs instead of holding pyxrt (the GIL) through a
        #: backlog of syncs while the launch thread waits to poll, collect and launch.
        self._ahead = threading.Semaphore(QUEUED + 1)
        self._threads = [threading.Thread(target=self._sync_loop, name="npu-sync", daemon=True),
                         threading.Thread(target=self._launch_loop, name="npu-launch",
                                          daemon=True),
                         threading.Thread(target=self._place_loop, name="npu-place",
                                          daemon=True)]
        for t in self._threads:
            t.start()
        self._closed = False

    @classmethod
    def availability(cls, geometry: Geometry | None = None, xrt: Any = None,
                     build_dir: str | os.PathLike | None = None) -> tuple[bool, str]:
        return probe(xrt, geometry, build_dir)

    def _load_design(self, xclbin_path: os.PathLike, insts_path: os.PathLike) -> _Design:
        """Register one xclbin, make its kernel and its synced instruction BO."""
        x = self._xrt
        xclbin = x.xclbin(str(xclbin_path))
        self._device.register_xclbin(xclbin)
        context = x.hw_context(self._device, xclbin.get_uuid())
        kernel = x.kernel(context, KERNEL_NAME)
        insts = np.fromfile(insts_path, dtype=np.uint32)
        instr = x.bo(self._device, insts.nbytes, x.bo.cacheable, kernel.group_id(INSTR_GROUP))
        self._map(instr, np.uint32, (insts.size,))[:] = insts
        instr.sync(self._to_device)
        return _Design(xclbin, context, kernel, instr, int(insts.size))

    @property
    def reads_diagonal_once(self) -> bool:
        """True when diagonal block pairs run the design that reads their input once."""
        return self._diagonal is not None

    # ------------------------------------------------------------------ buffers
    def _bo(self, nbytes: int, flags: Any, group: int) -> Any:
        return self._xrt.bo(self._device, nbytes, flags, self._kernel.group_id(group))

    @staticmethod
    def _map(bo: Any, dtype: type, shape: tuple[int, ...]) -> np.ndarray:
        count = int(np.prod(shape))
        return np.frombuffer(bo.map(), dtype=dtype, count=count).reshape(shape)

    @property
    def zero_copy(self) -> bool:
        """True when frames in :meth:`allocate_host` memory are correlated without a copy.

        Needs the frame layout to be the NPU input layout (S == npu_block, one channel group)
        and ``share_diagonal`` (the one block pair is diagonal: A and B are the same memory).
        """
        return frames_are_input(self.geometry) and self.share_diagonal

    def allocate_host(self, nbytes: int) -> np.ndarray:
        """``nbytes`` of host memory the NPU reads in place: a host-only input BO, mapped.

        A ``Ring`` allocator (``ring.set_allocator(backend.allocate_host)``). The BO lives as
        long as the returned array (any view of it); frames inside it reach :meth:`correlate`'s
        zero-copy path.
        """
        bo = self._bo(nbytes, self._xrt.bo.host_only, A_GROUP)
        array = np.frombuffer(bo.map(), dtype=np.uint8, count=nbytes)
        start = array.__array_interface__["data"][0]
        with self._lock:
            self._host_bos[start] = _HostBo(start + nbytes, bo, weakref.ref(array), {})
        weakref.finalize(array, _forget_host_bo, self._host_bos, self._lock, start, bo)
        self.stats["host_bytes"] += nbytes
        return array

    def adopt_host_memory(self, address: int, nbytes: int) -> str | None:
        """Map existing host memory (e.g. a Bifrost ring's buffer, allocated in C) as one
        user-pointer input BO (``pyxrt.bo(device, userptr, size, group)``), so frames lying
        there take :meth:`correlate`'s zero-copy path as :meth:`allocate_host` memory does.

        Returns None when mapped, else why not (the caller copies frames, as before). The
        memory must stay allocated until :meth:`forget_host_memory` (or the backend closes).
        """
        page = 4096
        if not address or address % page or nbytes % page:
            return (f"memory at {address:#x}, {nbytes} bytes is not whole pages "
                    "(XRT user-pointer buffers need page alignment)")
        try:
            bo = self._xrt.bo(self._device, address, nbytes, self._kernel.group_id(A_GROUP))
        except Exception as exc:  # XRT (or the driver) refuses user pointers here
            return f"XRT refused a user-pointer buffer object: {type(exc).__name__}: {exc}"
        array = bytes_at(address, nbytes)
        with self._lock:
            self._host_bos[address] = _HostBo(address + nbytes, bo, weakref.ref(array), {})
            self._adopted[address] = array  # the registry holds only a weak reference
        self.stats["adopted_bytes"] += nbytes
        return None

    def forget_host_memory(self, address: int) -> None:
        """Stop using memory given to :meth:`adopt_host_memory` (it is about to be freed)."""
        with self._lock:
            self._adopted.pop(address, None)
            self._host_bos.pop(address, None)

    def _zero_copy_entry(self, frames: np.ndarray) -> _Entry | None:
        """A transient entry running ``frames`` in place, or None if they need the copy path."""
        size = self.design.npu_in_bytes
        if (not self.zero_copy or frames.shape[0] != self.design.npacket
                or frames.nbytes != size or not frames.flags.c_contiguous):
            return None
        ptr = frames.__array_interface__["data"][0]
        with self._lock:
            for start, host in self._host_bos.items():
                if start <= ptr and ptr + size <= host.end:
                    break
            else:
                return None
            array = host.array()
            if array is None:  # freed while we looked (cannot hold frames then)
                return None
            offset = ptr - start
            sub = host.subs.get(offset)
            if sub is None:
                if len(host.subs) >= MAX_SUB_BOS:
                    host.subs.clear()
                sub = host.subs[offset] = self._xrt.bo(host.bo, size, offset)
        view = array[offset:offset + size].view(np.int8).reshape(hostio.input_shape(self.design))
        return _Entry([sub], [view], transient=True)

    def input_buffer(self) -> np.ndarray:
        """Reserve the next free ring entry; its input BO as frames ``[P, S, C, coarse, 2, fine]``.

        Write up to P frames into it and pass them (``view[:n]``) to :meth:`correlate` or
        :meth:`submit`, which then skips the copy. Only when frames equal the NPU input layout
        (S == npu_block, nchan == nchan_pkt); every buffer handed out must be correlated.
        """
        g = self.geometry
        if not frames_are_input(g):
            raise ValueError(f"frames of S={g.nstream}, C={g.nchan} are regrouped into NPU blocks "
                             f"of {g.npu_block} x {g.nchan_pkt} channels; pass them to correlate()")
        entry = self._take_free()
        with self._lock:
            self._reserved[entry.views[0].ctypes.data] = entry
        return entry.views[0].reshape(self.design.npacket, *g.frame_shape)

    def _take_free(self) -> _Entry:
        with self._lock:
            if len(self._reserved) >= self.nring:
                raise RuntimeError(f"all {self.nring} ring entries are reserved by input_buffer() "
                                   f"and none is being correlated")
        try:
            return self._free.get(timeout=self.timeout_s)
        except queue.Empty:
            raise TimeoutError(f"no free NPU input entry within {self.timeout_s} s") from None

    # ------------------------------------------------------------------ BlockPairExecutor
    def input_buffers(self, frames: np.ndarray | None,
                      npacket: int | None = None) -> list[np.ndarray]:
        with self._lock:
            entry = None if frames is None else self._reserved.pop(frames.ctypes.data, None)
        return (entry or self._take_free()).views

    def dispatch(self, job: BlockPairJob, group: int, buffers: list[np.ndarray]) -> None:
        self._to_sync.put((job, self._entry_of[id(buffers)], group))

    def abandon(self, buffers: list[np.ndarray]) -> None:
        self._free.put(self._entry_of[id(buffers)])

    # ------------------------------------------------------------------ threads
    def _sync_loop(self) -> None:
        """Sync each filled entry's input BOs to the device, then queue it for launch."""
        while (item := self._to_sync.get()) is not None:
            job, entry, _ = item
            self._ahead.acquire()
            try:
                if not job.failed and not self.broken:
                    for bo in entry.bos:
                        bo.sync(self._to_device)
            except Exception as exc:
                job.fail(exc)
            self._to_launch.put(item)
        self._to_launch.put(None)

    def _launch_loop(self) -> None:
        """Launch every block pair's run of each synced entry, keeping the next run queued on
        the device before collecting the previous one: collecting (wait, output sync) hands
        the output to the placement thread, so the NPU never waits for a placement. An entry
        is freed once its last run has completed."""
        pending: collections.deque[_Pending] = collections.deque()
        while True:
            if pending:
                try:
                    item = self._to_launch.get_nowait()
                except queue.Empty:
                    self._collect(pending.popleft())
                    continue
            else:
                item = self._to_launch.get()
            if item is None:
                break
            self._ahead.release()
            job, entry, group = item
            try:
                if self.broken:
                    raise NpuTimeout(self.broken)
                if not job.failed:
                    self._launch_group(job, entry, group, pending)
            except Exception as exc:
                job.fail(exc)
            finally:
                pending.append(_Pending(job, entry))  # frees the entry once its runs are done
        while pending:
            self._collect(pending.popleft())
        self._to_place.put(None)

    def _launch_group(self, job: BlockPairJob, entry: _Entry, group: int,
                      pending: collections.deque[_Pending]) -> None:
        for i, j in job.pairs:
            if job.failed or self.broken:
                return
            design, a, b = self._main, entry.bos[i], entry.bos[j]
            if i == j and self._diagonal is not None:
                design = self._diagonal  # reads A once; its b argument is not read
                self.stats["diagonal_single_read_calls"] += 1
            elif i == j and entry.spare is not None:
                while any(p.run is not None for p in pending):  # a queued run may read the
                    self._collect(pending.popleft())  # spare: let it finish before rewriting
                entry.spare_view[...] = entry.views[i]
                entry.spare.sync(self._to_device)
                b = entry.spare
            out = self._take_output(pending)
            run = design.kernel(OPCODE, design.instr, design.ninstr, a, b, self._outs[out])
            pending.append(_Pending(job, entry, run, out, group, (i, j)))
            while sum(p.run is not None for p in pending) > min(QUEUED, self.nout - 2) + 1:
                self._collect(pending.popleft())  # runs k+1.. queued: collect run k

    def _take_output(self, pending: collections.deque[_Pending]) -> int:
        """A free output buffer, collecting launched runs while none is free."""
        while True:
            try:
                return self._free_outs.get_nowait()
            except queue.Empty:
                if not pending:
                    try:
                        return self._free_outs.get(timeout=self.timeout_s)
                    except queue.Empty:
                        raise TimeoutError(f"no NPU output buffer placed within "
                                           f"{self.timeout_s} s") from None
                self._collect(pending.popleft())

    def _collect(self, p: _Pending) -> None:
        """Wait for a launched run, sync its output back and queue it for placement; or free
        an entry whose runs are all collected."""
        if p.run is None:
            if not p.entry.transient:
                self._free.put(p.entry)
            return
        i, j = p.pair
        try:
            if self.broken:
                raise NpuTimeout(self.broken)
            self._wait_run(p.run, f"block pair ({i}, {j}), channel group {p.group}")
            self._outs[p.out].sync(self._from_device)
            self.ncalls += 1
        except Exception as exc:
            p.job.fail(exc)
            self._free_outs.put(p.out)
            return
        self._to_place.put((p.job, p.group, i, j, p.out))

    def _place_loop(self) -> None:
        """Place each collected output in its job's triangle, then free the output buffer."""
        while (item := self._to_place.get()) is not None:
            job, group, i, j, out = item
            try:
                if not job.failed:
                    job.add(group, i, j, self._out_views[out])
            except Exception as exc:
                job.fail(exc)
            finally:
                self._free_outs.put(out)

    def _wait_run(self, run: Any, what: str) -> None:
        """Poll ``run.state()`` until it completes, fails or ``timeout_s`` passes.

        Never ``run.wait()``: pyxrt would hold the GIL for the whole run (nothing else in the
        process runs, the sync thread included) and for ever on a hung NPU.
        """
        deadline = time.monotonic() + self.timeout_s
        while (state := run.state()) != self._completed:
            if state in self._failed:
                raise RuntimeError(f"NPU run of {what} ended in state {state}")
            if time.monotonic() > deadline:
                self.broken = (f"NPU run of {what} not complete after {self.timeout_s} s "
                               f"(state {state}): the NPU looks hung; this backend refuses "
                               f"further calls (reset the device, e.g. `xrt-smi reset`, and "
                               f"create a new backend)")
                raise NpuTimeout(self.broken)
            time.sleep(self.poll_s)

    # ------------------------------------------------------------------ Backend
    def submit(self, frames: np.ndarray, out: np.ndarray | None = None) -> BlockPairJob:
        """Start correlating up to P frames; ``job.result()`` returns the packed triangle."""
        self._check_usable()
        f = self.check_frames(frames)
        if f.shape[0] > self.design.npacket:
            raise ValueError(f"the xclbin ({geometry_tag(self.design)}) integrates at most "
                             f"{self.design.npacket} packets per call, got {f.shape[0]} frames")
        entry = self._zero_copy_entry(f)
        if entry is not None:  # one block, one channel group: the frames are the input
            self.stats["zero_copy_calls"] += 1
            job = BlockPairJob(self.geometry, f.shape[0], out)
            self._to_sync.put((job, entry, 0))
            return job
        with self._lock:
            in_place = f.size > 0 and f.ctypes.data in self._reserved
        self.stats["in_place_calls" if in_place else "copied_calls"] += 1
        return super().submit(f, out)

    def _check_usable(self) -> None:
        if self._closed:
            raise RuntimeError("the NPU backend is closed")
        if self.broken:
            raise NpuTimeout(self.broken)

    def _wait(self, job: BlockPairJob) -> np.ndarray:
        # Each run ends (or fails with NpuTimeout) within timeout_s; runs queued ahead of this
        # job's and its own bound the wait, so this outer limit only guards against a bug.
        nruns = self.geometry.nchan_group * len(job.pairs) * (self.nring + 1)
        return job.result(self.timeout_s * (nruns + 1))

    def frames_per_call(self) -> int:
        """The build's P: one device call integrates at most this many frames."""
        return self.design.npacket

    def correlate(self, frames: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """The packed triangle of ``frames`` (waits; every run is bounded by ``timeout_s``);
        more frames than the build's P (ci4's int32 bound allows that) are several calls,
        summed."""
        f = self.check_frames(frames)
        if f.shape[0] > self.design.npacket:
            return self.correlate_frames(f, out)
        return self._wait(self.submit(f, out))

    def correlate_layout(self, data: np.ndarray, layout: SampleLayout,
                         out: np.ndarray | None = None, nframe: int | None = None,
                         accumulate: bool = False,
                         extremes: np.ndarray | None = None) -> np.ndarray:
        """Our packet layout as frames (zero copy where the ring is the NPU's memory); any
        other layout through the host layout pass, written straight into the ring entries'
        input BOs (``blockpairs.fill_inputs_layout``; ``stats["layout_calls"]``), P packets of
        spectra per device call (docs/npu.md: what that pass costs and why)."""
        if layout == SampleLayout.packet(self.geometry):
            return super().correlate_layout(data, layout, out, nframe, accumulate, extremes)
        nspec = self.layout_spectra(data, layout, nframe, out, accumulate)
        self.add_extremes(extremes, data, layout, nspec // layout.nspectra)

        def submit(t0: int, n: int) -> BlockPairJob:
            self._check_usable()
            self.stats["layout_calls"] += 1
            return self.submit_layout(data, layout, t0, n)

        return correlate_layout_calls(submit, self.geometry, nspec, self.design.npacket,
                                      self.new_output() if out is None else out, accumulate,
                                      self._wait)

    def close(self) -> None:
        """Stop the threads (after the work queued so far); the BOs go with the object."""
        if self._closed:
            return
        self._closed = True
        self._to_sync.put(None)
        for t in self._threads:
            t.join()
