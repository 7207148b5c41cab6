"""How fast an NPU plan would run: a performance model computed from the plan itself.

No NPU is at hand and the design has never been compiled, so this model is the project's only
number for the NPU path. It is built from what the plan says (tiles used, buffers, the bytes each
DMA channel and shim task moves per kernel call, the kernel's N, M, T) and from the hardware and
measured figures in :data:`FIGURES`, the one table of every constant, each with its kind and
source. Nothing is fitted to the answer: the published design's own figures are predicted from
the same table and compared with what its author measured (``tests/npu/model/test_perfmodel.py``).

How a prediction is made, for one channel group (``nchan_pkt`` channels of P packets)
---------------------------------------------------------------------------------
1. Traffic (:func:`plan_traffic`): bytes per NPU call through every DMA channel, propagated
   from the shim tasks along the flows and through each memory tile's BD chains (a memory-tile
   MM2S chain runs as many laps as the S2MM chains that fill its buffers).
2. Kernel (:func:`kernel_cycles`): cycles per call from the kernel's loop structure
   (``kernels/aie/xcorr.cc``): one 8x8x8 MAC per cycle in the inner loop, 4NMT of
   them, plus per (pair of A rows, B block) body the 4 accumulators loaded (one bank: one
   512-bit load a cycle) and stored (one store unit). The inner loop's pipeline fill is not
   counted (no published figure); the published trace shows it as the remaining ~5 %. A ci4
   plan's cores (:attr:`~.plan.CoreProgram.unpacked`) first unpack their A and B
   (:func:`tile_unpack_cycles`).
3. Steady state: a kernel call takes the longest of the core's cycles, each DMA channel's bytes
   at its width, each input channel's bytes at its rate, and all inputs against their shared
   rate (XDNA2: the measured DDR read rate of all shim DMAs together).
4. An NPU call: its integrations (accumulators drained once per channel; the core waits for
   them to leave, then zeroes them), the pipeline fill before the first kernel call and the last
   output drain, plus, on a host-driven device, the launch thread's work between calls (XRT
   launch latency, polling, output sync, output placement), which the NPU waits for.
5. Per channel group: the NPU calls (one per block pair), against what runs beside them: the
   host's sync thread, fill thread (frame copy), a placement thread, and for a Python
   loop over pyxrt the syncs and placements taking turns on the GIL; on a PL-fed device
   (AIE-ML v2) the array holds ``columns // plan columns`` copies of the plan working on
   different calls, and the wire (external IO) bounds the unique input bytes.

Each term's own limit is reported in Msps (samples per second of all the group's channels,
the published convention); :attr:`Prediction.bottleneck` names the one that holds the rate.
:func:`design_changes` prices the changes that would lift it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ...triangle import full_int8_tops, triangle_int8_tops
from ..design.dataflow import ELEM_BYTES, MM2S, S2MM, DmaChain, NpuPlan, Port
from ..design.plan import build_plan, reads_diagonal_once, single_read_diagonal

HARDWARE = "hardware"  # a manual, the device model, or the published post's hardware facts
MEASURED = "measured"  # measured on hardware (the published benchmarks and trace, XRT issues)
#: measured by this project's benchmarks on a CPU that is not a Ryzen host (the source names
#: the results file); docs/npu.md says what to measure on a Ryzen host instead
MEASURED_HERE = "measured here"

POST = "D. Estévez, \"X-engine correlator on a Ryzen NPU\""
AM027 = "AMD AM027, Versal AIE-ML v2 Architecture Manual"
TARGET_MODEL = "Xilinx/mlir-aie include/aie/Dialect/AIE/IR/AIETargetModel.h"
UG1603 = "AMD UG1603, AI Engine-ML Kernel and Graph Programming Guide"
#: The results file the host passes' rates are taken from (an Intel Xeon of CPU class
#: intel-avx512vnni), and the figure each of its passes gives.
HOST_PASSES_RESULTS = "benchmarks/results/intel-avx512vnni/bench_npu_host_passes.json"
HOST_PASS_FIGURES = {"copy": "host_copy_bytes_per_s", "ci4_unpack": "host_ci4_unpack_bytes_per_s",
                     "place": "host_place_bytes_per_s"}
HOST_PASSES = (f"benchmarks/bench_npu_host_passes.py, one thread of an intel-avx512vnni Xeon "
               f"({HOST_PASSES_RESULTS}, to 3 significant figures)")


@dataclass(frozen=True)
class Figure:
    """One constant of the model: value, unit, kind (:data:`HARDWARE`, :data:`MEASURED`,
    :data:`MEASURED_HERE`) and where it comes from."""

    value: float
    unit: str
    kind: str
    source: str


#: Every constant the model uses, once.
FIGURES: dict[str, Figure] = {
    # ---- XDNA2 (Ryzen AI 7 350, "npu2")
    "xdna2_columns": Figure(8, "columns", HARDWARE,
                            f"{TARGET_MODEL}: NPU2TargetModel::columns() = 8"),
    "xdna2_compute_rows": Figure(4, "rows", HARDWARE,
                                 f"{TARGET_MODEL}: BaseNPU2TargetModel::rows() = 6 = shim + "
                                 "memory tile + 4 core rows"),
    "xdna2_clock_hz": Figure(1.8e9, "Hz", HARDWARE, f"{POST}: 1.8 GHz array clock on Ryzen"),
    "xdna2_ddr_read_bytes_per_s": Figure(
        65.335e9, "B/s", MEASURED,
        f"{POST}: ingest benchmark (x-engine/ingest_throughput_benchmark.py), all 16 shim "
        "MM2S channels of 8 columns reading host DDR: 65.335 GB/s average (per call "
        "54.6-77.6); its 4 KiB contiguous reads"),
    "xdna2_ddr_min_run_bytes": Figure(
        960, "B", MEASURED,
        f"{POST}: the shortest contiguous DDR read run shown at the full rate (one channel of "
        "one packet, 60 x 16 B); shorter runs 'drop measurably', 16-byte runs are bad"),
    # ---- both arrays (AIE-ML v2 tiles)
    "int8_macs_per_cycle": Figure(512, "MAC/cycle/tile", HARDWARE,
                                  f"{POST}: mac_8x8_8x8, an 8x8 by 8x8 int8 matrix product "
                                  "issued every cycle (59 TOPS for 32 tiles at 1.8 GHz)"),
    "dma_bytes_per_cycle": Figure(8, "B/cycle/channel", HARDWARE,
                                  f"{AM027}, AXI4-Stream Interconnect: 64-bit data path, DMA "
                                  "sources and destinations at 64 bits per cycle; memory tile "
                                  "DMA channels with 64-bit stream interfaces"),
    "core_store_bytes_per_cycle": Figure(64, "B/cycle", HARDWARE,
                                         f"{AM027}, AIE-ML v2 Interfaces: one 512-bit store "
                                         "unit (and two 512-bit load units)"),
    "core_permute_ops_per_cycle": Figure(
        2, "ops/cycle", HARDWARE,
        f"{UG1603}, Architecture Overview: a VLIW instruction carries at most two loads, one "
        "store, one scalar, one vector and one move operation; the ci4 unpack loop's unpack "
        "and shuffle operations are counted against the vector and move slots together"),
    "acc_bank_loads_per_cycle": Figure(1, "loads/cycle", HARDWARE,
                                       f"{POST}: the accumulators sit in one bank, so the two "
                                       "load units cannot load two of their 512-bit words in "
                                       "one cycle"),
    # ---- AIE-ML v2 array of a Versal AI Edge Gen2 part (2VE3804 / 2VE3858)
    "versal_columns": Figure(36, "columns", HARDWARE,
                             f"{POST}: a 2VE38xx has 36 columns and 4 rows of compute tiles "
                             "(144 tiles)"),
    "versal_compute_rows": Figure(4, "rows", HARDWARE, f"{POST}: as above"),
    "versal_clock_hz": Figure(1e9, "Hz", HARDWARE,
                              f"{AM027}, Performance: array clock 1 GHz (-1 speed grade)"),
    "versal_pl_stream_bytes_per_s": Figure(
        4e9, "B/s/stream", HARDWARE,
        f"{AM027}, Array Interface: 64-bit PL streams; Performance: PL clock 500 MHz; "
        f"{POST}: 8 x 64-bit 500 MHz AXI4-S per column, up to 32 GB/s per column"),
    "versal_external_bytes_per_s": Figure(
        62.5e9, "B/s", HARDWARE,
        f"{POST}: 500 Gb/s of external IO (3 integrated 100G MACs and 2 x 100GbE in the PL on "
        "the 20 GTYP lanes)"),
    # ---- the host (Ryzen AI 7 350, Zen 5 at ~5 GHz, XRT)
    "host_sync_bytes_per_s": Figure(
        65.76e9, "B/s/core", MEASURED,
        f"{POST}: the producer thread at ~100 % of one core syncing A and B (2 x 300,810,240 B) "
        "109.3 times a second; a floor (the thread 'still has a small margin')"),
    "host_launch_s": Figure(45e-6, "s/call", MEASURED,
                            "an empty kernel through XRT kernel() + wait() takes ~45 us "
                            "(github.com/Xilinx/mlir-aie/issues/2381, "
                            "github.com/Xilinx/XRT/issues/9018)"),
    "host_copy_bytes_per_s": Figure(6.68e9, "B/s/core", MEASURED_HERE,
                                    f"frames regrouped into an input buffer (hostio.npu_input), "
                                    f"bytes written; {HOST_PASSES}"),
    "host_ci4_unpack_bytes_per_s": Figure(2.70e9, "B/s/core", MEASURED_HERE,
                                          f"ci4 frames unpacked to int8 (frames.unpack_frames), "
                                          f"ci4 bytes read; {HOST_PASSES}"),
    "host_place_bytes_per_s": Figure(1.59e9, "B/s/core", MEASURED_HERE,
                                     f"one call's output placed in the triangle "
                                     f"(BlockPairJob.add), output bytes; {HOST_PASSES}"),
    # ---- what the published design measured (compared with, never used to predict)
    "published_msps": Figure(64.0, "Msps", MEASURED,
                             f"{POST}: benchmark lines 62.2-64.4 Msps, typically ~64"),
    "published_calls_per_s": Figure(109.0, "calls/s", MEASURED,
                                    f"{POST}: 105.9-109.5 NPU calls/s, typically ~109"),
    "published_tops": Figure(33.6, "TOPS", MEASURED,
                             f"{POST}: 32.6-33.7 TOPS (full 256 x 256 square, 2 ops per MAC)"),
    "published_kernel_cycles": Figure(2559, "cycles", MEASURED,
                                      f"{POST}: trace, 2553-2566 cycles from event0 to event1, "
                                      "typically 2559 (1920 of them vector MACs)"),
}

#: The limit the published post names: input, at the NPU's measured DDR ingest rate.
PUBLISHED_BOTTLENECK = "ddr"
#: The published measurements (``published_<key>`` in :data:`FIGURES`) a prediction of the
#: published design is compared with, by :class:`Prediction` attribute.
PUBLISHED_KEYS = ("msps", "calls_per_s", "tops", "kernel_cycles")


def figure(name: str) -> float:
    return FIGURES[name].value


# ---------------------------------------------------------------------- devices
@dataclass(frozen=True)
class HostRates:
    """The host CPU's per-core rates for the work it does around NPU calls (one thread each)."""

    sync_bytes_per_s: float
    launch_s: float
    copy_bytes_per_s: float
    ci4_unpack_bytes_per_s: float
    place_bytes_per_s: float

    def rate(self, host_pass: str) -> float:
        """Rate of a fill pass named in :attr:`HostSchedule.fill` ("copy" or "ci4_unpack")."""
        return {"copy": self.copy_bytes_per_s,
                "ci4_unpack": self.ci4_unpack_bytes_per_s}[host_pass]


@dataclass(frozen=True)
class Device:
    """An AIE-ML v2 array as the model sees it.

    ``input_name``: what the shim input channels are ("ddr": shim DMAs reading host memory,
    sharing ``input_bytes_per_s``; "pl": PL streams, each at ``shim_bytes_per_s``).
    ``host``: the CPU that syncs buffers and launches calls (None: a PL-fed array, whose
    unique input is bounded by ``external_bytes_per_s`` instead).
    """

    name: str
    description: str
    columns: int
    compute_rows: int
    clock_hz: float
    macs_per_cycle: int
    dma_bytes_per_cycle: float
    shim_bytes_per_s: float
    input_name: str
    input_bytes_per_s: float | None
    external_bytes_per_s: float | None
    host: HostRates | None

    @property
    def tiles(self) -> int:
        return self.columns * self.compute_rows

    @property
    def peak_tops(self) -> float:
        """int8 ops per second of every compute tile, 2 per MAC, in TOPS."""
        return 2 * self.macs_per_cycle * self.tiles * self.clock_hz / 1e12

    def replace(self, **changes: object) -> Device:
        return dataclasses.replace(self, **changes)


HOST = HostRates(sync_bytes_per_s=figure("host_sync_bytes_per_s"),
                 launch_s=figure("host_launch_s"),
                 copy_bytes_per_s=figure("host_copy_bytes_per_s"),
                 ci4_unpack_bytes_per_s=figure("host_ci4_unpack_bytes_per_s"),
                 place_bytes_per_s=figure("host_place_bytes_per_s"))

DEVICES: dict[str, Device] = {
    "xdna2": Device(
        name="xdna2", description="Ryzen AI 7 350 NPU (XDNA2, 8 x 4 AIE2P tiles at 1.8 GHz)",
        columns=int(figure("xdna2_columns")), compute_rows=int(figure("xdna2_compute_rows")),
        clock_hz=figure("xdna2_clock_hz"), macs_per_cycle=int(figure("int8_macs_per_cycle")),
        dma_bytes_per_cycle=figure("dma_bytes_per_cycle"),
        shim_bytes_per_s=figure("dma_bytes_per_cycle") * figure("xdna2_clock_hz"),
        input_name="ddr", input_bytes_per_s=figure("xdna2_ddr_read_bytes_per_s"),
        external_bytes_per_s=None, host=HOST),
    "aie-ml-v2": Device(
        name="aie-ml-v2",
        description="Versal AI Edge Gen2 2VE38xx AIE-ML v2 array (36 x 4 tiles at 1 GHz, "
                    "fed by PL streams)",
        columns=int(figure("versal_columns")), compute_rows=int(figure("versal_compute_rows")),
        clock_hz=figure("versal_clock_hz"), macs_per_cycle=int(figure("int8_macs_per_cycle")),
        dma_bytes_per_cycle=figure("dma_bytes_per_cycle"),
        shim_bytes_per_s=figure("versal_pl_stream_bytes_per_s"), input_name="pl",
        input_bytes_per_s=None, external_bytes_per_s=figure("versal_external_bytes_per_s"),
        host=None),
}


# ---------------------------------------------------------------------- kernel
#: Bytes of one v64acc32 accumulator register (64 int32 lanes).
ACC_REGISTER_BYTES = 64 * 4


def kernel_cycles(n: int, m: int, t: int) -> int:
    """Cycles of one kernel call (event0 to event1), from the loop structure of
    ``kernels/aie/xcorr.cc``: 4NMT vector MACs at one a cycle, and for each of the
    N/2 x M bodies (a pair of A rows against one B block) its 4 accumulator registers loaded
    from one bank (one 512-bit load a cycle) and stored back (one 512-bit store unit)."""
    words = 4 * ACC_REGISTER_BYTES / figure("core_store_bytes_per_cycle")  # 512-bit words
    per_body = words / figure("acc_bank_loads_per_cycle") + words
    return int(4 * n * m * t + (n // 2) * m * per_body)


#: The ci4 unpack loop of ``xcorr.cc`` (``xcorr_unpack_ci4``), per 64-byte block of ci4
#: samples: 2 loads of 32 bytes, 2 ``unpack`` and 2 ``shuffle`` (the permute operations) and 2
#: stores of one int8 block (64 bytes) each.
UNPACK_BLOCK_PERMUTES = 4
UNPACK_BLOCK_STORE_BYTES = 2 * 64


def tile_unpack_cycles(n: int, m: int, t: int) -> int:
    """Cycles a ci4 kernel call spends unpacking its A and B before the MAC loop: (N + M) T
    blocks of 64 ci4 bytes, each as long as the busier of the one store unit (its two int8
    blocks out) and the vector and move slots (its unpacks and shuffles); the two 256-bit loads
    issue beside them. The loop's pipeline fill is not counted, as for :func:`kernel_cycles`."""
    per_block = max(UNPACK_BLOCK_STORE_BYTES / figure("core_store_bytes_per_cycle"),
                    UNPACK_BLOCK_PERMUTES / figure("core_permute_ops_per_cycle"))
    return int((n + m) * t * per_block)


# ---------------------------------------------------------------------- traffic
@dataclass(frozen=True)
class Traffic:
    """What one NPU call moves, read off the plan.

    ``port_bytes``: bytes through every DMA channel per NPU call; ``inputs``: the channels
    that carry input samples (the rest carry accumulators out); ``shim_inputs``: the shim
    channels reading the input; ``kernel_calls``: kernel calls per core; ``integrations``:
    accumulator drains per core; ``mem_fill_calls``: kernel calls one memory-tile input buffer
    serves; ``columns``: columns spanned (shim and memory tiles included); ``rows``: compute
    rows; ``unpacks``: the cores unpack ci4 before each call's MAC loop.
    """

    port_bytes: dict[Port, int]
    inputs: frozenset[Port]
    shim_inputs: tuple[Port, ...]
    n: int
    m: int
    t: int
    cores: int
    kernel_calls: int
    integrations: int
    acc_bytes: int
    mem_fill_calls: int
    columns: int
    rows: int
    unpacks: bool = False

    def per_call(self, port: Port) -> float:
        """Bytes through ``port`` per kernel call."""
        return self.port_bytes.get(port, 0) / self.kernel_calls

    @property
    def input_bytes(self) -> int:
        """Bytes all shim input channels read per NPU call."""
        return sum(self.port_bytes[p] for p in self.shim_inputs)

    @property
    def fills(self) -> int:
        """Memory-tile input buffer fills per NPU call (per memory-tile buffer pair)."""
        return self.kernel_calls // self.mem_fill_calls


def _lap_bytes(plan: NpuPlan, chain: DmaChain) -> int:
    return sum(bd.length * ELEM_BYTES[plan.buffer_map[bd.buffer].dtype] for bd in chain.bds)


def _moved(chain: DmaChain) -> set[str]:
    return {bd.buffer for bd in chain.bds if bd.length}


def writers_of(plan: NpuPlan, chain: DmaChain) -> list[DmaChain]:
    """S2MM chains on the same tile that write the buffers ``chain`` reads."""
    return [c for c in plan.chains_of(chain.port.tile)
            if c.port.direction == S2MM and _moved(chain) & _moved(c)]


def plan_traffic(plan: NpuPlan) -> Traffic:
    """Bytes per NPU call through every DMA channel of ``plan`` (see the module docstring)."""
    if not plan.cores:
        raise ValueError("the plan has no compute cores")
    core = plan.cores[0]
    a_buf, b_buf = plan.buffer_map[core.a[0]], plan.buffer_map[core.b[0]]
    if core.unpacked is not None:  # the kernel's dimensions: its unpacked A and B
        a_kernel, b_kernel = (plan.buffer_map[n] for n in core.unpacked)
    else:
        a_kernel, b_kernel = a_buf, b_buf
    dests = {f.source: f.dests for f in plan.flows}
    known = {t.port: t.length * plan.host_arg_map[t.host].elem_bytes
             for t in plan.tasks if t.port.direction == MM2S}
    shim_inputs = tuple(known)
    inputs = set(known)
    a_port = next(c.port for c in plan.chains_of(core.tile)
                  if c.port.direction == S2MM and _moved(c) & set(core.a))
    changed = True
    while changed:  # shim -> mem -> compute, then accumulators: compute -> mem -> shim
        changed = False
        for src, bytes_ in list(known.items()):
            for dest in dests.get(src, ()):
                if dest not in known:
                    known[dest], changed = bytes_, True
                    if src in inputs:
                        inputs.add(dest)
        for chain in plan.chains:
            if chain.port in known or chain.port.direction != MM2S:
                continue
            writers = [w for w in writers_of(plan, chain) if w.port in known]
            if chain.port.tile.kind == "mem" and writers:
                laps = known[writers[0].port] / _lap_bytes(plan, writers[0])
                known[chain.port], changed = round(laps * _lap_bytes(plan, chain)), True
                if writers[0].port in inputs:
                    inputs.add(chain.port)
            elif chain.port.tile.kind == "compute" and a_port in known:
                drains = known[a_port] // a_buf.nbytes // core.calls_per_integration
                known[chain.port], changed = drains * _lap_bytes(plan, chain), True
    if a_port not in known:
        raise ValueError("the plan's shim tasks and flows do not reach the compute tiles")
    kernel_calls = known[a_port] // a_buf.nbytes
    mem_chain = next(c for c in plan.chains if a_port in dests.get(c.port, ()))
    fills_per_lap = sum(1 for bd in writers_of(plan, mem_chain)[0].bds if bd.length)
    calls_per_lap = sum(1 for bd in mem_chain.bds if bd.length)
    return Traffic(port_bytes=known, inputs=frozenset(inputs), shim_inputs=shim_inputs,
                   n=a_kernel.shape[0], m=b_kernel.shape[0], t=a_kernel.shape[1],
                   cores=len(plan.cores), kernel_calls=kernel_calls,
                   integrations=kernel_calls // core.calls_per_integration,
                   acc_bytes=plan.buffer_map[core.acc].nbytes,
                   mem_fill_calls=calls_per_lap // fills_per_lap,
                   columns=max(tile.col for tile in plan.tiles) + 1,
                   rows=len({c.tile.row for c in plan.cores}),
                   unpacks=core.unpacked is not None)


def shortest_input_run(plan: NpuPlan) -> int:
    """Shortest contiguous run (bytes) a shim input task reads from host memory."""
    runs = []
    for task in plan.tasks:
        if task.port.direction == MM2S:
            elem, inner = plan.host_arg_map[task.host].elem_bytes, task.dims[-1]
            runs.append(inner.size * elem if inner.stride == 1 else elem)
    return min(runs)


# ---------------------------------------------------------------------- host schedule
@dataclass(frozen=True)
class HostSchedule:
    """How the host drives the plan for one channel group (``nchan_pkt`` channels, P packets).

    ``npu_calls``: NPU calls per group (one per block pair), of which ``diagonal_calls`` have
    A = B (a plan that reads such an input once can serve them); ``sync_bytes``: input buffer
    bytes synced to the device per group (sync thread); ``fill``: (pass, bytes) the caller's
    thread handles per group ("copy": bytes written, "ci4_unpack": ci4 bytes read);
    ``fill_threads``: threads sharing those passes; ``place``: where each call's output is
    placed in the triangle ("launch": on the launch thread, between runs; "thread": on a
    thread of its own, beside the runs; None: nowhere); ``poll_s``: the launch thread polls
    for completion this often (0: a blocking wait); ``gil``: the loop is Python over pyxrt,
    whose syncs hold the interpreter lock, so the syncs and, where ``place_gil`` (a placement
    in Python), the placements take turns (they add up) wherever they run.
    ``diagonal_read_once``: the diagonal calls run the plan that reads their one input once
    (:func:`~xengine_block.npu.design.plan.single_read_diagonal`). ``nstream`` and
    ``sample_bits``: the array's S and its samples on the wire.
    """

    name: str
    nstream: int
    sample_bits: int
    npu_calls: int
    sync_bytes: int
    diagonal_calls: int = 0
    fill: tuple[tuple[str, int], ...] = ()
    fill_threads: int = 1
    place: str | None = None
    poll_s: float = 0.0
    gil: bool = False
    place_gil: bool = True
    diagonal_read_once: bool = False

    def replace(self, **changes: object) -> HostSchedule:
        return dataclasses.replace(self, **changes)


def published_comparison(pred: Prediction) -> dict[str, dict[str, float]]:
    """``pred`` (the published design on xdna2) beside what its author measured: per
    :data:`PUBLISHED_KEYS` key the measured and predicted values and their ratio."""
    return {key: {"measured": figure(f"published_{key}"), "predicted": getattr(pred, key),
                  "ratio": getattr(pred, key) / figure(f"published_{key}")}
            for key in PUBLISHED_KEYS}


def published_schedule(plan: NpuPlan) -> HostSchedule:
    """The published benchmark's host (x-engine/benchmark.cc): pre-generated inputs, a sync
    thread syncing separate A and B buffers for every call, a C++ launch thread that waits on
    the run and syncs the output back, nothing placed."""
    g = plan.geometry
    return HostSchedule(name="published", nstream=g.npu_block, sample_bits=8, npu_calls=1,
                        sync_bytes=2 * g.npu_in_bytes)


# ---------------------------------------------------------------------- prediction
@dataclass(frozen=True)
class PlanTiming:
    """One plan on one device: its traffic, kernel cycles (``kernel``: the MAC loop;
    ``core``: with the ci4 unpack of a plan whose cores unpack), cycles per kernel call of each
    resource (``per_call``) and seconds of one NPU call on the device (``device_s``)."""

    plan: NpuPlan
    traffic: Traffic
    kernel: int
    core: int
    per_call: dict[str, float]
    device_s: float

    @property
    def period(self) -> float:
        """Steady-state cycles per kernel call: the slowest resource."""
        return max(self.per_call.values())

    @property
    def limit(self) -> str:
        return max(self.per_call, key=self.per_call.__getitem__)


def plan_timing(plan: NpuPlan, dev: Device) -> PlanTiming:
    """Cycles per kernel call of each resource of ``plan`` on ``dev``, and one NPU call's
    seconds on the device (module docstring, steps 2-4)."""
    tr = plan_traffic(plan)
    if tr.rows > dev.compute_rows or tr.columns > dev.columns:
        raise ValueError(f"the plan spans {tr.columns} columns x {tr.rows} compute rows; "
                         f"{dev.name} has {dev.columns} x {dev.compute_rows}")
    kc = kernel_cycles(tr.n, tr.m, tr.t)
    core = kc + (tile_unpack_cycles(tr.n, tr.m, tr.t) if tr.unpacks else 0)
    per_call = _per_call_cycles(tr, dev, core)
    cycles = _npu_call_cycles(tr, dev, core, max(per_call.values()))
    return PlanTiming(plan, tr, kc, core, per_call, cycles / dev.clock_hz)


def _per_call_cycles(tr: Traffic, dev: Device, core: int) -> dict[str, float]:
    """Cycles each resource needs per kernel call."""
    shim_key = "shim_dma" if dev.input_name == "ddr" else "pl_stream"
    per_call = {"compute": float(core), "tile_dma": 0.0, "memtile_dma": 0.0, shim_key: 0.0}
    for port in tr.port_bytes:
        moved = tr.per_call(port)
        if port in tr.shim_inputs:
            key, cycles = shim_key, moved * dev.clock_hz / dev.shim_bytes_per_s
        else:
            key = {"compute": "tile_dma", "mem": "memtile_dma"}.get(port.tile.kind, shim_key)
            cycles = moved / dev.dma_bytes_per_cycle
        per_call[key] = max(per_call[key], cycles)
    if dev.input_bytes_per_s is not None:
        per_call[dev.input_name] = (tr.input_bytes / tr.kernel_calls * dev.clock_hz
                                    / dev.input_bytes_per_s)
    return per_call


def _npu_call_cycles(tr: Traffic, dev: Device, core: int, period: float) -> float:
    """One NPU call on the device: its integrations, each as long as its kernel calls at the
    steady-state period or, if longer, their core cycles plus the accumulator drain the core
    waits for (out at DMA speed, then zeroed at one store a cycle); plus the first memory-tile
    fill and first transfer to the compute tiles, and the last accumulators' way out."""
    dma = dev.dma_bytes_per_cycle
    per_int = tr.kernel_calls // tr.integrations
    drain = tr.acc_bytes / dma + tr.acc_bytes / figure("core_store_bytes_per_cycle")
    integration = max(per_int * period, per_int * core + drain)
    fill_bytes = {p: tr.port_bytes[p] / tr.fills for p in tr.shim_inputs}
    first_fill = max(max(fill_bytes.values()) * dev.clock_hz / dev.shim_bytes_per_s,
                     sum(fill_bytes.values()) * dev.clock_hz / (dev.input_bytes_per_s or 1e300))
    first_call = max(tr.per_call(p) for p in tr.inputs if p.tile.kind == "compute") / dma
    last_out = tr.rows * tr.acc_bytes / dma
    return tr.integrations * integration + first_fill + first_call + last_out


@dataclass(frozen=True)
class Prediction:
    """A channel group's predicted time on one device; :meth:`to_dict` is the CLI's JSON.

    ``timings``: (plan timing, NPU calls per group on one copy of the plan) for each plan the
    schedule uses; ``group``: seconds per channel group of each activity that runs beside the
    others ("npu": the NPU calls, the launch thread's work between them included);
    ``launch_s``: that launch work per NPU call; ``terms``: each limit alone, in Msps.
    """

    device: Device
    schedule: HostSchedule
    timings: tuple[tuple[PlanTiming, float], ...]
    launch_s: float
    group: dict[str, float]
    partitions: int
    terms: dict[str, float]

    @property
    def main(self) -> PlanTiming:
        """The plan that serves most of the calls (the one the trace draws)."""
        return max(self.timings, key=lambda tc: tc[1])[0]

    @property
    def plan(self) -> NpuPlan:
        return self.main.plan

    @property
    def base_plan(self) -> NpuPlan:
        """The plan the schedule drives (its diagonal calls may run a variant of it)."""
        return self.timings[0][0].plan

    @property
    def kernel_cycles(self) -> int:
        """Cycles of one kernel call (the published figure's event0 to event1)."""
        return self.main.kernel

    @property
    def samples_per_group(self) -> int:
        return _samples(self.plan)

    @property
    def group_s(self) -> float:
        return max(self.group.values())

    @property
    def msps(self) -> float:
        """Samples per second of all the group's channels (the published convention), M."""
        return self.samples_per_group / self.group_s / 1e6

    @property
    def calls_per_s(self) -> float:
        """NPU calls per second (host launches; every copy of the plan together)."""
        return self.schedule.npu_calls / self.group_s

    @property
    def tops(self) -> float:
        """int8 ops per second the array executes (full blocks, 2 ops per MAC), in TOPS."""
        g = self.plan.geometry
        return self.schedule.npu_calls * full_int8_tops(self.msps, g.npu_block_a, g.npu_block_b)

    @property
    def tops_useful(self) -> float:
        """The Hermitian triangle's useful int8 TOPS: 8 S(S+1)/2 ops per sample time."""
        return triangle_int8_tops(self.msps, self.schedule.nstream)

    @property
    def device_s(self) -> float:
        """Seconds per group the NPU works (one copy of the plan), launch work excluded."""
        return sum(t.device_s * calls for t, calls in self.timings)

    @property
    def idle_fraction(self) -> float:
        """Share of the NPU calls' time the NPU waits for the launch thread."""
        return 1 - self.device_s / self.group["npu"]

    @property
    def bottleneck(self) -> str:
        """What holds the rate: the longest activity of the group; for the NPU calls, the
        device's slowest resource or the launch thread's work between runs, whichever takes
        longer. (``terms`` gives every limit on its own.)"""
        longest = max(self.group, key=self.group.__getitem__)
        if longest != "npu":
            return longest
        if self.device_s < self.group["npu"] - self.device_s:
            return "host_launch"
        return min(self.device_terms, key=self.device_terms.__getitem__)

    @property
    def device_terms(self) -> dict[str, float]:
        """The limits of the NPU's own resources (``terms`` less the host's)."""
        return {k: v for k, v in self.terms.items() if k in self.main.per_call}

    def caveats(self) -> list[str]:
        """Where the prediction leaves what was measured."""
        notes = []
        run = shortest_input_run(self.plan)
        if self.device.input_name == "ddr" and run < figure("xdna2_ddr_min_run_bytes"):
            notes.append(f"host-memory reads in runs of {run:g} B, shorter than the "
                         f"{figure('xdna2_ddr_min_run_bytes'):g} B measured at the full DDR "
                         "rate: the ddr term may be optimistic")
        if self.device.host is None:
            notes.append("PL-fed array: the PL's buffering, re-reads of a block for several "
                         "block pairs, and control are not modelled")
        if any(FIGURES[n].kind == MEASURED_HERE for n in HOST_PASS_FIGURES.values()) and (
                self.schedule.fill or self.schedule.place) and self.device.host is not None:
            notes.append("host copy / unpack / placement rates were measured on an "
                         f"intel-avx512vnni Xeon ({HOST_PASSES_RESULTS}), not on a Ryzen host")
        return notes

    def to_dict(self) -> dict:
        main = self.main
        g, tr = main.plan.geometry, main.traffic
        macs = 4 * tr.n * tr.m * tr.t
        return {
            "design": self.schedule.name, "device": self.device.name,
            "device_description": self.device.description,
            "nstream": self.schedule.nstream, "bits": self.schedule.sample_bits,
            "msps": self.msps, "calls_per_s": self.calls_per_s,
            "kernel_cycles": self.kernel_cycles, "tops": self.tops,
            "tops_useful_triangle": self.tops_useful, "peak_tops": self.device.peak_tops,
            "fraction_of_peak": self.tops / self.device.peak_tops,
            "bottleneck": self.bottleneck,
            "terms_msps": dict(sorted(self.terms.items(), key=lambda kv: kv[1])),
            "npu_idle_fraction": self.idle_fraction,
            "kernel": {"n": tr.n, "m": tr.m, "t": tr.t, "vector_macs": macs,
                       "cycles": self.kernel_cycles, "mac_efficiency": macs / self.kernel_cycles,
                       "ci4_unpacked_on_tiles": tr.unpacks,
                       "core_cycles_per_call": main.core},
            "kernel_call_cycles": {k: round(v, 1) for k, v in main.per_call.items()},
            "npu_call_seconds": main.device_s + self.launch_s,
            "launch_thread_seconds_per_call": self.launch_s,
            "group_seconds": self.group,
            "npu_calls_per_group": self.schedule.npu_calls,
            "kernel_calls_per_npu_call": tr.kernel_calls,
            "samples_per_group": self.samples_per_group,
            "tiles_used": self.partitions * tr.cores, "tiles": self.device.tiles,
            "plan_copies": self.partitions,
            "input_bytes_per_npu_call": tr.input_bytes,
            "geometry": {"npu_block": g.npu_block, "nchan_pkt": g.nchan_pkt,
                         "npacket": g.npacket, "tile_n": g.tile_n, "tile_m": g.tile_m,
                         "tile_t": g.tile_t, "rows": g.rows, "cols": g.cols},
            "caveats": self.caveats(),
        }


def _samples(plan: NpuPlan) -> int:
    g = plan.geometry
    return g.nchan_pkt * g.npacket * g.nspectra_pkt


def predict(plan: NpuPlan, device: Device | str, schedule: HostSchedule | None = None
            ) -> Prediction:
    """The predicted rate of ``plan`` on ``device`` driven as ``schedule`` (default: the
    published host); the schedule's diagonal calls run
    :func:`~xengine_block.npu.design.plan.single_read_diagonal` of ``plan`` where it says
    ``diagonal_read_once``."""
    dev = DEVICES[device] if isinstance(device, str) else device
    sched = schedule or published_schedule(plan)
    diagonal_plan = (single_read_diagonal(plan) if sched.diagonal_read_once
                     and sched.diagonal_calls and reads_diagonal_once(plan.geometry) else None)
    main = plan_timing(plan, dev)
    partitions = dev.columns // main.traffic.columns
    diagonal = sched.diagonal_calls if diagonal_plan is not None else 0
    timings = [(main, (sched.npu_calls - diagonal) / partitions)]
    if diagonal:
        timings.append((plan_timing(diagonal_plan, dev), diagonal / partitions))
    samples = _samples(plan)
    terms: dict[str, float] = {}
    for key in main.per_call:
        seconds = sum(calls * t.traffic.kernel_calls * t.per_call.get(key, 0.0) / dev.clock_hz
                      for t, calls in timings)
        if seconds > 0:
            terms[key] = samples / seconds / 1e6
    group: dict[str, float] = {}
    launch = 0.0
    if dev.host is not None:
        host, out_bytes = dev.host, plan.geometry.npu_out_bytes
        launch = host.launch_s + sched.poll_s / 2 + out_bytes / host.sync_bytes_per_s
        if sched.place == "launch":
            launch += out_bytes / host.place_bytes_per_s
        terms["host_launch"] = samples / (sched.npu_calls / partitions * launch) / 1e6
        group["host_sync"] = sched.sync_bytes / host.sync_bytes_per_s
        if sched.fill:
            group["host_fill"] = sum(b / host.rate(p) for p, b in sched.fill) / \
                sched.fill_threads
        place = sched.npu_calls * out_bytes / host.place_bytes_per_s if sched.place else 0.0
        if sched.place == "thread":
            group["host_place"] = place
        if sched.gil:
            group["host_gil"] = group["host_sync"] + (place if sched.place_gil else 0.0)
    if dev.external_bytes_per_s is not None:
        wire = sched.nstream * samples * 2 * sched.sample_bits // 8
        group["external_io"] = wire / dev.external_bytes_per_s
    terms.update({k: samples / s / 1e6 for k, s in group.items()})
    group["npu"] = sum(calls * (t.device_s + launch) for t, calls in timings)
    return Prediction(device=dev, schedule=sched, timings=tuple(timings), launch_s=launch,
                      group=group, partitions=partitions, terms=terms)


# ---------------------------------------------------------------------- design changes


@dataclass(frozen=True)
class DesignChange:
    """A change the model can price: ``applies(schedule, device)``, and the prediction with it
    (:meth:`options`) or, once ``made``, without it (:meth:`undone`); ``status``: how far the
    project has taken it."""

    name: str
    what: str
    status: str
    made: bool = False

    def applies(self, sched: HostSchedule, dev: Device) -> bool:
        """Whether the change concerns ``sched`` on ``dev`` (made or not)."""
        host = dev.host is not None
        return {"place_beside_runs": host and sched.place is not None,
                "single_read_diagonal": sched.diagonal_calls > 0,
                "ci4_on_tiles": sched.sample_bits == 4,
                "parallel_host_fill": host and bool(sched.fill) and sched.npu_calls > 1,
                "placement_off_gil": host and sched.gil and sched.place is not None,
                "native_ring": host and sched.gil}[self.name]

    def options(self, sched: HostSchedule) -> HostSchedule:
        """The schedule with this change made (changes not made yet)."""
        return {"place_beside_runs": lambda: sched.replace(place="thread"),
                "single_read_diagonal": lambda: sched.replace(diagonal_read_once=True),
                "placement_off_gil": lambda: sched.replace(place_gil=False),
                "native_ring": lambda: sched.replace(gil=False),
                }[self.name]()

    def undone(self, plan: NpuPlan, sched: HostSchedule) -> tuple[NpuPlan, HostSchedule]:
        """The plan and schedule without this made change."""
        if self.name == "ci4_on_tiles":
            return ci4_unpacked_on_host(plan, sched)
        return plan, {"place_beside_runs": lambda: sched.replace(place="launch"),
                      "single_read_diagonal": lambda: sched.replace(diagonal_read_once=False),
                      "placement_off_gil": lambda: sched.replace(place_gil=True),
                      "parallel_host_fill": lambda: sched.replace(fill_threads=1),
                      }[self.name]()


def ci4_unpacked_on_host(plan: NpuPlan, sched: HostSchedule) -> tuple[NpuPlan, HostSchedule]:
    """The ci4 path ``ci4_on_tiles`` replaced, for a ci4 ``plan`` and its ``sched``: the ci8
    plan of the same shape (P capped at ci8's int32 bound) fed by the host, which unpacks each
    call's ci4 frames into int8 buffers (one pass, ci4 bytes read): the bytes synced and copied
    are those of ci8."""
    g = plan.geometry
    if not g.ci4:
        raise ValueError("ci4_unpacked_on_host needs a ci4 plan")
    twin = g.replace(sample_bits=8, nibble_order="re_high", npacket=1)
    twin = twin.replace(npacket=min(g.npacket, twin.max_npacket))
    scale = twin.npu_in_bytes / g.npu_in_bytes
    unpack = sched.nstream * g.nchan_pkt * twin.npacket * g.nspectra_pkt
    fill = (("ci4_unpack", unpack), *((p, round(b * scale)) for p, b in sched.fill))
    return build_plan(twin), sched.replace(sync_bytes=round(sched.sync_bytes * scale),
                                           fill=fill)


DESIGN_CHANGES = (
    DesignChange("place_beside_runs",
                 "launch run k+1 before placing run k's output (several output buffers), placing "
                 "on a thread of its own: the NPU no longer waits for the triangle placement",
                 "made: the npu backend's launch thread (nout output BOs, a placement thread); "
                 "measured on the simulated device (benchmarks/bench_npu_host.py)",
                 made=True),
    DesignChange("single_read_diagonal",
                 "diagonal block pairs read their one input once: each shim A read fans out to "
                 "the B memory tile as well (plan.single_read_diagonal), halving host-memory "
                 "reads on those calls",
                 "made: the build writes it as a second design (design_diagonal.mlir, validated) "
                 "and the npu backend runs it on every diagonal pair; bit-exact in the emulator "
                 "(b full of garbage) and on the simulated device; not yet run on an NPU",
                 made=True),
    DesignChange("ci4_on_tiles",
                 "send ci4 as ci4 (half the bytes synced and read) and unpack it on the compute "
                 "tiles before the MAC loop, instead of on the host",
                 "made: the ci4 plan (plan.py), the kernel's ci4 entry points (xcorr.cc), "
                 "bit-exact in the emulator and on the simulated device; not yet run on an NPU",
                 made=True),
    DesignChange("placement_off_gil",
                 "place each output in one pass of the C extension with the GIL released, so "
                 "the placements no longer take turns with pyxrt's syncs",
                 "made: BlockPairJob.add through _native.place_pair (kernels/cpu/host_passes.c)",
                 made=True),
    DesignChange("native_ring",
                 "run the syncs, launches and waits in the native ring (C++ threads over XRT), "
                 "so an input sync no longer takes turns with Python work",
                 "built and tested over a fake device (npu/host/nativering.py); not wired into "
                 "the npu backend: listed where the model finds the GIL binding"),
    DesignChange("parallel_host_fill",
                 "split the host's frame copy over threads, one per stream block "
                 "(blockpairs.FILL_THREADS at most)",
                 "made: blockpairs.fill_inputs copies the stream blocks on a thread pool",
                 made=True),
)


#: Smallest relative gain for which a change is listed.
MIN_GAIN = 0.005


def design_changes(base: Prediction) -> list[dict]:
    """The :data:`DESIGN_CHANGES` not yet made that would raise the rate of ``base`` (a
    :func:`predict` of a plan on a device driven by a schedule) on their own (by more than
    :data:`MIN_GAIN`), each with its predicted rate and gain, largest first; then, where it adds
    to them, every applicable change that does not lower the rate, together (a change can
    matter only once another has moved the bottleneck)."""
    plan, dev, schedule = base.base_plan, base.device, base.schedule
    found, together = [], []
    for change in DESIGN_CHANGES:
        if change.made or not change.applies(schedule, dev):
            continue
        pred = predict(plan, dev, change.options(schedule))
        if pred.msps >= base.msps * (1 - MIN_GAIN):
            together.append(change)
        if pred.msps > base.msps * (1 + MIN_GAIN):
            found.append({"name": change.name, "what": change.what, "status": change.status,
                          "msps": pred.msps, "gain": pred.msps / base.msps,
                          "bottleneck": pred.bottleneck, "caveats": pred.caveats()})
    found.sort(key=lambda c: -c["gain"])
    sched = schedule
    for change in together:
        sched = change.options(sched)
    pred = predict(plan, dev, sched)
    best = max((c["msps"] for c in found), default=base.msps)
    if len(together) > 1 and pred.msps > best * (1 + MIN_GAIN):
        found.append({"name": "all", "what": "these changes together: "
                      + ", ".join(c.name for c in together), "status": "",
                      "msps": pred.msps, "gain": pred.msps / base.msps,
                      "bottleneck": pred.bottleneck, "caveats": pred.caveats()})
    return found


def made_changes(base: Prediction) -> list[dict]:
    """The made :data:`DESIGN_CHANGES` that apply to ``base``'s plan and schedule, each with
    ``base``'s rate and the rate, gain and bottleneck of the design without the change
    (:meth:`DesignChange.undone`)."""
    plan, dev, schedule = base.base_plan, base.device, base.schedule
    made = []
    for change in DESIGN_CHANGES:
        if not (change.made and change.applies(schedule, dev)):
            continue
        old_plan, old_schedule = change.undone(plan, schedule)
        without = predict(old_plan, dev, old_schedule)
        made.append({"name": change.name, "what": change.what, "status": change.status,
                     "msps": base.msps, "msps_without": without.msps,
                     "gain": base.msps / without.msps, "bottleneck_without": without.bottleneck})
    return made
