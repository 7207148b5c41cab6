"""The mlir-aie design of an :class:`NpuPlan`: a pure translation to calls, then a thin replay.

Why two layers: mlir-aie cannot be installed where CI runs, yet the design must be proved to be
the plan the emulator verified. So :func:`design_calls` turns the plan into the exact sequence
of mlir-aie Python API calls as data (:class:`Call`, recorded by :class:`Recorder`), with no
mlir-aie import; tests compare those calls with the plan. :func:`to_mlir` replays the same calls
against ``aie.dialects.aie`` / ``aie.dialects.aiex`` when they are importable and returns the
MLIR module text that ``aiecc`` compiles (``python -m xengine_block.npu.design.build``).

Call vocabulary (names and arguments as in mlir-aie's low-level API; references between calls
are :class:`Ref`; enum members are their names as strings)::

    device("npu2") { ... }
    tile(col, row) -> Ref("tile")
    buffer(tile, dtype, shape, name=, [address=])  # flat shape (nelem,); compute tiles pinned
    lock(tile, lock_id=, init=, sym_name=)
    flow(src, "DMA", ch, dst, "DMA", ch)           # one per destination of a plan Flow
    mem(tile) / memtile_dma(tile) {                # one region per tile with BD chains
        dma_start(dir, ch, dest=Ref(block), chain=Ref(block))   # chain 0 in the entry block
        block(k) { use_lock(lock, "AcquireGreaterEqual", value=) ; dma_bd(buf, offset=, len=,
                   [dimensions=[(size, stride), ...]]) ; use_lock(lock, "Release", value=) ;
                   next_bd(Ref(block)) }           # the last BD of a chain loops to its first
        block(k') { dma_start(...) }               # the next chain, or end() after the last
    }
    external_func(name, inputs=[(dtype, shape), ...], link_with=KERNEL_OBJECT)
    core(tile) { for(FOREVER) { acquire acc; call(zero, acc);
                 for(calls / 2) { k = 0, 1: acquire A, B; call(kernel, a[k], b[k], acc
                 [, ua, ub]); release A, B }; release acc } }   # ua, ub: ci4's unpack buffers
    runtime_sequence((dtype, shape), ..., names=(...)) {
        dma_configure_task(shim, dir, ch, [repeat_count=], [issue_token=True]) -> Ref("task") {
            shim_dma_bd(Ref(arg), offset=, sizes=[4], strides=[4]); end() }
        dma_start_task(*tasks); dma_await_task(*tasks with wait) }
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np

from .dataflow import KERNEL_OBJECT, CoreProgram, Dim, DmaChain, LockOp, NpuPlan, ShimTask, Tile

#: Iterations of the core's outer loop: "forever" as the published design writes it (a 31-bit
#: count).
FOREVER = 0x7FFFFFFF
#: Shim BDs take exactly 4 (size, stride) pairs; shorter patterns are padded outside.
SHIM_DIMS = 4
ACQUIRE = "AcquireGreaterEqual"
RELEASE = "Release"
DEVICE = "npu2"


@dataclass(frozen=True)
class Ref:
    """A value another call produced: ``kind`` tile/buffer/lock/block/arg/func/task."""

    kind: str
    name: str | int

    def __repr__(self) -> str:
        return f"block[{self.name}]" if self.kind == "block" else str(self.name)


@dataclass(frozen=True)
class Call:
    """One mlir-aie API call; ``body`` holds the calls inside its region, ``result`` names its
    value (for :class:`Ref`)."""

    op: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    body: tuple[Call, ...] = ()
    result: str | None = None


class Recorder:
    """Records API calls as :class:`Call` data: ``rec.dma_bd(...)`` appends a call,
    ``with rec.region("core", tile):`` nests the calls made inside it."""

    def __init__(self) -> None:
        self._stack: list[list[Call]] = [[]]

    def __getattr__(self, op: str):
        if op.startswith("_"):
            raise AttributeError(op)

        def record(*args: Any, result: str | None = None, **kwargs: Any) -> None:
            self._stack[-1].append(Call(op, args, kwargs, (), result))

        return record

    @contextmanager
    def region(self, op: str, *args: Any, result: str | None = None,
               **kwargs: Any) -> Iterator[None]:
        self._stack.append([])
        yield
        body = tuple(self._stack.pop())
        self._stack[-1].append(Call(op, args, kwargs, body, result))

    @property
    def calls(self) -> tuple[Call, ...]:
        return tuple(self._stack[0])


# ---------------------------------------------------------------------- plan -> calls
def tile_ref(t: Tile) -> Ref:
    return Ref("tile", f"tile_{t.col}_{t.row}")


def _use_lock(rec: Recorder, op: LockOp | None, action: str) -> None:
    if op is not None:
        rec.use_lock(Ref("lock", op.lock), action, value=op.value)


def _dma_region(rec: Recorder, chains: list[DmaChain]) -> None:
    """One mem / memtile_dma body: chain k starts in the entry block (k = 0) or in the block
    after chain k-1's BDs; each chain's BDs occupy consecutive blocks and loop."""
    block = 1
    for k, chain in enumerate(chains):
        if not chain.loop:
            raise ValueError(f"{chain.port}: only looping BD chains are generated")
        first, after = block, block + len(chain.bds)
        start = dict(dest=Ref("block", first), chain=Ref("block", after))
        if k == 0:
            rec.dma_start(chain.port.direction, chain.port.channel, **start)
        else:
            with rec.region("block", block - 1):
                rec.dma_start(chain.port.direction, chain.port.channel, **start)
        for n, bd in enumerate(chain.bds):
            with rec.region("block", first + n):
                _use_lock(rec, bd.acquire, ACQUIRE)
                dims = {"dimensions": [tuple(d) for d in bd.dims]} if bd.dims else {}
                rec.dma_bd(Ref("buffer", bd.buffer), offset=bd.offset, len=bd.length, **dims)
                _use_lock(rec, bd.release, RELEASE)
                last = n == len(chain.bds) - 1
                rec.next_bd(Ref("block", first if last else first + n + 1))
        block = after + 1
    with rec.region("block", block - 1):
        rec.end()


def _kernel_types(plan: NpuPlan) -> dict[str, list[tuple[str, tuple[int]]]]:
    """Argument types of the two kernel functions, from the cores' buffers (all alike)."""
    types = set()
    for core in plan.cores:
        buf = [plan.buffer_map[n] for n in core.kernel_args(0)]
        types.add((core.kernel, core.zero, tuple((b.dtype, (b.nelem,)) for b in buf)))
    if len(types) != 1:
        raise ValueError(f"cores disagree on kernel functions or argument types: {types}")
    kernel, zero, args = types.pop()
    return {kernel: list(args), zero: [args[2]]}


def _core(rec: Recorder, core: CoreProgram) -> None:
    if core.calls_per_integration % 2:
        raise ValueError(f"{core.tile}: ping-pong needs an even number of calls per integration")
    with rec.region("core", tile_ref(core.tile)), rec.region("for", FOREVER):
        _use_lock(rec, core.acc_acquire, ACQUIRE)
        rec.call(Ref("func", core.zero), Ref("buffer", core.acc))
        with rec.region("for", core.calls_per_integration // 2):
            for k in range(2):
                _use_lock(rec, core.a_acquire, ACQUIRE)
                _use_lock(rec, core.b_acquire, ACQUIRE)
                rec.call(Ref("func", core.kernel),
                         *(Ref("buffer", name) for name in core.kernel_args(k)))
                _use_lock(rec, core.a_release, RELEASE)
                _use_lock(rec, core.b_release, RELEASE)
        _use_lock(rec, core.acc_release, RELEASE)


def shim_sizes_strides(task: ShimTask) -> tuple[list[int], list[int]]:
    """The task's dims as shim_dma_bd's 4 sizes and strides, padded on the outside with (1, 0)."""
    if len(task.dims) > SHIM_DIMS:
        raise ValueError(f"{task.name}: a shim BD has at most {SHIM_DIMS} dimensions")
    dims = [Dim(1, 0)] * (SHIM_DIMS - len(task.dims)) + list(task.dims)
    return [d.size for d in dims], [d.stride for d in dims]


def _runtime_sequence(rec: Recorder, plan: NpuPlan) -> None:
    types = [(a.dtype, (a.nelem,)) for a in plan.host_args]
    with rec.region("runtime_sequence", *types, names=tuple(a.name for a in plan.host_args)):
        for t in plan.tasks:
            opts: dict[str, Any] = {}
            if t.repeat_count:
                opts["repeat_count"] = t.repeat_count
            if t.wait:
                opts["issue_token"] = True
            with rec.region("dma_configure_task", tile_ref(t.port.tile), t.port.direction,
                            t.port.channel, result=t.name, **opts):
                sizes, strides = shim_sizes_strides(t)
                rec.shim_dma_bd(Ref("arg", t.host), offset=t.offset, sizes=sizes,
                                strides=strides)
                rec.end()
        rec.dma_start_task(*[Ref("task", t.name) for t in plan.tasks])
        rec.dma_await_task(*[Ref("task", t.name) for t in plan.tasks if t.wait])


def design_calls(plan: NpuPlan) -> tuple[Call, ...]:
    """The mlir-aie calls that build ``plan`` (pure: needs no mlir-aie)."""
    rec = Recorder()
    with rec.region("device", DEVICE):
        for t in plan.tiles:
            rec.tile(t.col, t.row, result=tile_ref(t).name)
        for b in plan.buffers:
            pinned = {} if b.address is None else {"address": b.address}
            rec.buffer(tile_ref(b.tile), b.dtype, (b.nelem,), name=b.name, **pinned)
        for lk in plan.locks:
            rec.lock(tile_ref(lk.tile), lock_id=lk.lock_id, init=lk.init, sym_name=lk.name)
        for f in plan.flows:
            for d in f.dests:
                rec.flow(tile_ref(f.source.tile), "DMA", f.source.channel, tile_ref(d.tile),
                         "DMA", d.channel)
        for t in plan.tiles:
            chains = plan.chains_of(t)
            if chains:
                with rec.region("mem" if t.kind == "compute" else "memtile_dma", tile_ref(t)):
                    _dma_region(rec, chains)
        for name, inputs in _kernel_types(plan).items():
            rec.external_func(name, inputs=inputs, link_with=KERNEL_OBJECT, result=name)
        for core in plan.cores:
            _core(rec, core)
        _runtime_sequence(rec, plan)
    return rec.calls


# ---------------------------------------------------------------------- inspection
def walk(calls: tuple[Call, ...], parents: tuple[Call, ...] = ()
         ) -> Iterator[tuple[Call, tuple[Call, ...]]]:
    """Every call, depth first, with the chain of regions it sits in."""
    for c in calls:
        yield c, parents
        yield from walk(c.body, (*parents, c))


def format_calls(calls: tuple[Call, ...], indent: int = 0) -> str:
    """Python-like listing of the calls (``python -m xengine_block.npu.design.show_design
    --calls``), for review and diffs."""
    lines = []
    for c in calls:
        parts = [repr(a) for a in c.args] + [f"{k}={v!r}" for k, v in c.kwargs.items()]
        text = f"{c.op}({', '.join(parts)})"
        if c.result is not None:
            text = f"{c.result} = {text}"
        lines.append("  " * indent + text + (":" if c.body else ""))
        if c.body:
            lines.append(format_calls(c.body, indent + 1))
    return "\n".join(lines)


# ---------------------------------------------------------------------- replay (mlir-aie)
class MlirAieUnavailable(ImportError):
    """mlir-aie's Python package is not importable; the message says how to install it."""


INSTALL_HINT = ("install the mlir_aie wheel from https://github.com/Xilinx/mlir-aie/releases "
                "(pip install mlir_aie -f https://github.com/Xilinx/mlir-aie/releases/"
                "expanded_assets/<release>, see its README for the current release name)")


def load_mlir_aie() -> SimpleNamespace:
    """The mlir-aie modules the replay uses, or MlirAieUnavailable."""
    try:
        from aie.dialects import aie, aiex
        from aie.extras.context import mlir_mod_ctx
    except ImportError as exc:
        raise MlirAieUnavailable(f"mlir-aie is not importable ({exc}); {INSTALL_HINT}") from exc
    try:
        from aie.iron.controlflow import range_
    except ImportError:  # older releases
        from aie.extras.dialects.ext.scf import _for as range_
    return SimpleNamespace(aie=aie, aiex=aiex, mlir_mod_ctx=mlir_mod_ctx, range_=range_)


def _np_type(dtype: str, shape: tuple[int, ...]) -> type:
    return np.ndarray[shape, np.dtype[np.dtype(dtype).type]]


class _Replayer:
    """Issues recorded calls against the real mlir-aie API (one method per op)."""

    def __init__(self, api: SimpleNamespace) -> None:
        self.api = api
        self.values: dict[tuple[str, str | int], Any] = {}
        self.blocks: Any = None  # the block list of the DMA region being built

    def value(self, x: Any) -> Any:
        if isinstance(x, Ref):
            if x.kind == "block":
                return self.blocks[x.name]
            return self.values[(x.kind, x.name)]
        return x

    def run(self, calls: tuple[Call, ...]) -> None:
        for c in calls:
            getattr(self, f"op_{c.op}")(c, *[self.value(a) for a in c.args],
                                        **{k: self.value(v) for k, v in c.kwargs.items()})

    def store(self, c: Call, kind: str, value: Any) -> None:
        self.values[(kind, c.result)] = value

    # --- device structure
    def op_device(self, c: Call, target: str) -> None:
        @self.api.aie.device(getattr(self.api.aie.AIEDevice, target))
        def _body() -> None:
            self.run(c.body)

    def op_tile(self, c: Call, col: int, row: int) -> None:
        self.store(c, "tile", self.api.aie.tile(col, row))

    def op_buffer(self, c: Call, tile: Any, dtype: str, shape: tuple[int], name: str,
                  address: int | None = None) -> None:
        self.values[("buffer", name)] = self.api.aie.buffer(tile, _np_type(dtype, shape),
                                                            name=name, address=address)

    def op_lock(self, c: Call, tile: Any, *, lock_id: int, init: int, sym_name: str) -> None:
        self.values[("lock", sym_name)] = self.api.aie.lock(tile, lock_id=lock_id, init=init,
                                                            sym_name=sym_name)

    def op_flow(self, c: Call, src: Any, sb: str, sc: int, dst: Any, db: str, dc: int) -> None:
        wb = self.api.aie.WireBundle
        self.api.aie.flow(src, getattr(wb, sb), sc, dst, getattr(wb, db), dc)

    # --- DMA regions
    def _dma(self, decorator: Any, c: Call) -> None:
        def _body(block: Any) -> None:
            self.blocks = block
            self.run(c.body)

        decorator(_body)

    def op_mem(self, c: Call, tile: Any) -> None:
        self._dma(self.api.aie.mem(tile), c)

    def op_memtile_dma(self, c: Call, tile: Any) -> None:
        self._dma(self.api.aie.memtile_dma(tile), c)

    def op_block(self, c: Call, index: int) -> None:
        with self.blocks[index]:
            self.run(c.body)

    def op_dma_start(self, c: Call, direction: str, channel: int, *, dest: Any,
                     chain: Any) -> None:
        self.api.aie.dma_start(getattr(self.api.aie.DMAChannelDir, direction), channel,
                               dest=dest, chain=chain)

    def op_use_lock(self, c: Call, lock: Any, action: str, *, value: int) -> None:
        self.api.aie.use_lock(lock, getattr(self.api.aie.LockAction, action), value=value)

    def op_dma_bd(self, c: Call, buffer: Any, **kwargs: Any) -> None:
        self.api.aie.dma_bd(buffer, **kwargs)

    def op_next_bd(self, c: Call, block: Any) -> None:
        self.api.aie.next_bd(block)

    def op_end(self, c: Call) -> None:
        self.api.aie.EndOp()

    # --- cores
    def op_external_func(self, c: Call, name: str, *, inputs: list, link_with: str) -> None:
        types = [_np_type(d, s) for d, s in inputs]
        self.values[("func", name)] = self.api.aie.external_func(name, inputs=types,
                                                                 link_with=link_with)

    def op_core(self, c: Call, tile: Any) -> None:
        @self.api.aie.core(tile)
        def _body() -> None:
            self.run(c.body)

    def op_for(self, c: Call, count: int) -> None:
        for _ in self.api.range_(count):
            self.run(c.body)

    def op_call(self, c: Call, func: Any, *args: Any) -> None:
        func(*args)

    # --- runtime sequence
    def op_runtime_sequence(self, c: Call, *types: tuple, names: tuple[str, ...]) -> None:
        @self.api.aiex.runtime_sequence(*[_np_type(d, s) for d, s in types])
        def _sequence(*args: Any) -> None:
            self.values.update({("arg", n): a for n, a in zip(names, args, strict=True)})
            self.run(c.body)

    def op_dma_configure_task(self, c: Call, tile: Any, direction: str, channel: int,
                              **opts: Any) -> None:
        aiex = self.api.aiex
        task = aiex.dma_configure_task(tile, getattr(self.api.aie.DMAChannelDir, direction),
                                       channel, **opts)
        self.store(c, "task", task)
        with self.api.aie.bds(task) as bd, bd[0]:
            self.run(c.body)

    def op_shim_dma_bd(self, c: Call, mem: Any, **kwargs: Any) -> None:
        self.api.aiex.shim_dma_bd(mem, **kwargs)

    def op_dma_start_task(self, c: Call, *tasks: Any) -> None:
        self.api.aiex.dma_start_task(*tasks)

    def op_dma_await_task(self, c: Call, *tasks: Any) -> None:
        self.api.aiex.dma_await_task(*tasks)


def to_mlir(plan: NpuPlan) -> str:
    """The verified MLIR module of ``plan`` (needs mlir-aie; MlirAieUnavailable otherwise)."""
    api = load_mlir_aie()
    with api.mlir_mod_ctx() as ctx:
        _Replayer(api).run(design_calls(plan))
        verified = ctx.module.operation.verify()
        if verified is not True:
            raise RuntimeError(f"mlir-aie rejected the generated design: {verified}")
        return str(ctx.module)


__all__ = ["Call", "MlirAieUnavailable", "Recorder", "Ref", "design_calls", "format_calls",
           "load_mlir_aie", "shim_sizes_strides", "to_mlir", "walk"]
