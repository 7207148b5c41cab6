"""Check an :class:`NpuPlan` against the hardware limits in :mod:`.limits`.

Why a validator: aiecc rejects some of these mistakes late and with little context, and some
(two producers into one channel, a BD that waits on a lock and never releases) only show up as
a hang on the device. Every rule raises :class:`PlanError` with ``limit`` (the constant's name
in :mod:`.limits`) and ``where`` (tile, channel, BD or task).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from math import prod

from . import limits
from .dataflow import (
    ELEM_BYTES,
    MM2S,
    S2MM,
    BufferDescriptor,
    CoreProgram,
    Dim,
    NpuPlan,
    Port,
    ShimTask,
    Tile,
)


class PlanError(ValueError):
    """The plan breaks a hardware limit; ``limit`` names the rule, ``where`` the place."""

    def __init__(self, limit: str, where: object, message: str) -> None:
        self.limit = limit
        self.where = str(where)
        super().__init__(f"{limit} violated at {where}: {message}")


@dataclass(frozen=True)
class TileUsage:
    """Resources one tile uses: data buffers, stack, capacity, BDs and locks."""

    tile: Tile
    data_bytes: int
    stack_bytes: int
    capacity_bytes: int
    bds: int
    bd_limit: int
    locks: int

    @property
    def total_bytes(self) -> int:
        return self.data_bytes + self.stack_bytes


@dataclass(frozen=True)
class PlanReport:
    """What a valid plan uses, per tile."""

    usage: dict[Tile, TileUsage]

    def summary(self) -> str:
        lines = [f"{'tile':<16}{'data B':>9}{'stack B':>9}{'free B':>9}{'BDs':>8}{'locks':>7}"]
        for tile, u in sorted(self.usage.items()):
            free = u.capacity_bytes - u.total_bytes
            lines.append(f"{tile!s:<16}{u.data_bytes:>9}{u.stack_bytes:>9}{free:>9}"
                         f"{u.bds:>4}/{u.bd_limit:<3}{u.locks:>7}")
        return "\n".join(lines)


_BY_KIND = {
    # kind: (memory, stack, BDs, BD limit name, channels, channel limit name, dims, dims name,
    #        locks, locks name)
    "compute": (limits.COMPUTE_TILE_MEMORY, limits.COMPUTE_TILE_STACK, limits.COMPUTE_TILE_BDS,
                "COMPUTE_TILE_BDS", limits.COMPUTE_TILE_CHANNELS, "COMPUTE_TILE_CHANNELS",
                limits.COMPUTE_TILE_BD_DIMS, "COMPUTE_TILE_BD_DIMS", limits.COMPUTE_TILE_LOCKS,
                "COMPUTE_TILE_LOCKS"),
    "mem": (limits.MEM_TILE_MEMORY, 0, limits.MEM_TILE_BDS, "MEM_TILE_BDS",
            limits.MEM_TILE_CHANNELS, "MEM_TILE_CHANNELS", limits.MEM_TILE_BD_DIMS,
            "MEM_TILE_BD_DIMS", limits.MEM_TILE_LOCKS, "MEM_TILE_LOCKS"),
    "shim": (0, 0, limits.SHIM_TILE_BDS, "SHIM_TILE_BDS", limits.SHIM_TILE_CHANNELS,
             "SHIM_TILE_CHANNELS", limits.SHIM_TILE_BD_DIMS, "SHIM_TILE_BD_DIMS", 0,
             "SHIM_TILE_LOCKS"),
}
_MEMORY_NAME = {"compute": "COMPUTE_TILE_MEMORY", "mem": "MEM_TILE_MEMORY",
                "shim": "SHIM_TILE_MEMORY"}


def _check_tile(tile: Tile, where: object) -> None:
    last_row = limits.FIRST_COMPUTE_ROW + limits.COMPUTE_ROWS - 1
    if not (0 <= tile.col < limits.ARRAY_COLUMNS and 0 <= tile.row <= last_row):
        raise PlanError(limits.TILE_IN_ARRAY, where,
                        f"tile {tuple(tile)} is outside the {limits.ARRAY_COLUMNS}-column, "
                        f"rows 0..{last_row} array")


def _check_port(port: Port) -> None:
    _check_tile(port.tile, port)
    kind = port.tile.kind
    nchan, name = _BY_KIND[kind][4], _BY_KIND[kind][5]
    if port.direction not in (S2MM, MM2S):
        raise PlanError("DMA_DIRECTION", port, f"direction {port.direction!r} is not S2MM/MM2S")
    if not 0 <= port.channel < nchan:
        raise PlanError(name, port, f"channel {port.channel} does not exist: a {kind} tile has "
                        f"{nchan} {port.direction} channels")


def _words(elements: int, elem_bytes: int) -> int:
    """Elements as 32-bit words (the DMAs' unit), rounded up (alignment is checked apart)."""
    return -(-elements * elem_bytes // limits.BD_ALIGN_BYTES)


def _check_dims(kind: str, offset: int, length: int, dims: tuple[Dim, ...], elem_bytes: int,
                capacity: int, where: object) -> None:
    """Dimension count, sizes < 1024, 32-bit alignment, and that the pattern stays in bounds."""
    ndim_max, ndim_name = _BY_KIND[kind][6], _BY_KIND[kind][7]
    if len(dims) > ndim_max:
        raise PlanError(ndim_name, where, f"{len(dims)} dimensions; a {kind} BD has at most "
                        f"{ndim_max}")
    for i, d in enumerate(dims):
        contiguous = i == len(dims) - 1 and d.stride == 1
        size = _words(d.size, elem_bytes) if contiguous else d.size
        if not 1 <= size < limits.BD_DIM_SIZE:
            unit = " 32-bit words" if contiguous else ""
            raise PlanError("BD_DIM_SIZE", where, f"dimension size {size}{unit} must be in 1.."
                            f"{limits.BD_DIM_SIZE - 1} (de-linearise long runs)")
    if dims and prod(d.size for d in dims) != length:
        raise PlanError("BD_LENGTH", where, f"dimension sizes {[d.size for d in dims]} move "
                        f"{prod(d.size for d in dims)} elements, length says {length}")
    align = limits.BD_ALIGN_BYTES
    checks = [("offset", offset), ("length", length)]
    for i, d in enumerate(dims):
        innermost = i == len(dims) - 1
        if innermost and d.stride == 1:
            checks.append(("innermost run", d.size))  # contiguous words: the run's bytes count
        else:
            checks.append((f"stride of dimension {i}", d.stride))
    for what, value in checks:
        if (value * elem_bytes) % align:
            raise PlanError("BD_ALIGN_BYTES", where, f"{what} {value} x {elem_bytes} B is not a "
                            f"multiple of {align} bytes (DMAs move 32-bit words)")
    if length == 0:
        return
    if dims:
        lo = offset + sum(min(0, (d.size - 1) * d.stride) for d in dims)
        hi = offset + sum(max(0, (d.size - 1) * d.stride) for d in dims)
    else:
        lo, hi = offset, offset + length - 1
    if lo < 0 or hi >= capacity:
        raise PlanError(limits.BD_IN_BUFFER, where, f"touches elements {lo}..{hi} of a "
                        f"{capacity}-element buffer")


def _check_bd(plan: NpuPlan, bd: BufferDescriptor) -> None:
    if bd.buffer not in plan.buffer_map:
        raise PlanError(limits.BD_IN_BUFFER, bd.name, f"unknown buffer {bd.buffer!r}")
    buf = plan.buffer_map[bd.buffer]
    if buf.tile != bd.tile:
        raise PlanError(limits.BD_IN_BUFFER, bd.name, f"buffer {buf.name} lives on {buf.tile}, "
                        f"the BD runs on {bd.tile}")
    _check_dims(bd.tile.kind, bd.offset, bd.length, bd.dims, buf.elem_bytes, buf.nelem,
                f"{bd.port} BD {bd.name}")
    if (bd.acquire is None) != (bd.release is None):
        raise PlanError(limits.LOCK_PAIRING, bd.name, "a BD that acquires a lock must release "
                        "one and vice versa (use a value-0 dummy)")
    for op in (bd.acquire, bd.release):
        if op is None:
            continue
        lock = plan.lock_map.get(op.lock)
        if lock is None or lock.tile != bd.tile:
            raise PlanError(limits.LOCK_PAIRING, bd.name, f"lock {op.lock!r} is not a lock of "
                            f"{bd.tile}")
        if not 0 <= op.value <= limits.LOCK_VALUE_MAX:
            raise PlanError("LOCK_VALUE_MAX", bd.name, f"lock value {op.value} outside "
                            f"0..{limits.LOCK_VALUE_MAX}")


def _check_task(plan: NpuPlan, task: ShimTask) -> None:
    where = f"{task.port} task {task.name}"
    if task.port.tile.kind != "shim":
        raise PlanError(limits.TILE_IN_ARRAY, where, "runtime tasks run on shim tiles")
    host = plan.host_arg_map.get(task.host)
    if host is None:
        raise PlanError(limits.BD_IN_BUFFER, where, f"unknown host buffer {task.host!r}")
    iterated = len(task.dims) == limits.SHIM_TILE_BD_DIMS and task.dims[0].size > 1
    elem = ELEM_BYTES[host.dtype]
    for i, d in enumerate(task.dims):
        innermost_run = i == len(task.dims) - 1 and d.stride == 1
        if d.size > 1 and not innermost_run:
            words = d.stride * elem // limits.BD_ALIGN_BYTES
            if not 1 <= words <= limits.SHIM_STRIDE_MAX_WORDS:
                raise PlanError(limits.SHIM_STRIDE_WORDS, where, f"stride of dimension {i} is "
                                f"{words} 32-bit words; a shim task's strides are in [1, "
                                f"{limits.SHIM_STRIDE_MAX_WORDS}]")
    if len(task.dims) == limits.SHIM_TILE_BD_DIMS and not (
            1 <= task.dims[0].size <= limits.SHIM_ITERATION_MAX):
        raise PlanError(limits.SHIM_ITERATION_SIZE, where, f"iteration (outermost) size "
                        f"{task.dims[0].size} is outside [1, {limits.SHIM_ITERATION_MAX}]")
    _check_dims("shim", task.offset, task.length, task.dims, ELEM_BYTES[host.dtype],
                host.nelem, where)
    want = task.dims[0].size - 1 if iterated else 0
    if task.repeat_count != want:
        raise PlanError(limits.SHIM_REPEAT_COUNT, where, f"repeat_count is {task.repeat_count}; "
                        f"with outermost size {task.dims[0].size} it must be {want}")


def _check_bd_ids(plan: NpuPlan, tile: Tile, bd_limit: int, bd_name: str) -> None:
    """BD ids in range and unique per tile; on memory tiles in their channel parity's half."""
    seen: dict[int, str] = {}
    for bd in plan.bds_of(tile):
        if tile.kind == "mem":
            half = limits.MEM_TILE_BDS_PER_PARITY
            lo = half * (bd.port.channel % 2)
            if not lo <= bd.bd_id < lo + half:
                parity = "odd" if bd.port.channel % 2 else "even"
                n = sum(1 for b in plan.bds_of(tile) if b.port.channel % 2 == bd.port.channel % 2)
                raise PlanError(limits.MEM_TILE_BD_PARITY, f"{bd.port} BD {bd.name}",
                                f"BD id {bd.bd_id} on an {parity} channel; {parity} channels "
                                f"use BDs {lo}-{lo + half - 1} ({n} BDs on {parity} channels "
                                f"of this tile, at most {half})")
        if not 0 <= bd.bd_id < bd_limit:
            raise PlanError(bd_name, bd.name, f"BD id {bd.bd_id} outside 0..{bd_limit - 1}")
        if bd.bd_id in seen:
            raise PlanError(limits.BD_ID, bd.name, f"BD id {bd.bd_id} also used by "
                            f"{seen[bd.bd_id]}")
        seen[bd.bd_id] = bd.name


def _check_placement(plan: NpuPlan, tile: Tile, stack: int, memory: int) -> None:
    """Pinned buffers: inside memory, clear of the stack and of each other."""
    placed = sorted((b for b in plan.buffers_of(tile) if b.address is not None),
                    key=lambda b: b.address or 0)
    prev_end, prev = stack, "the stack"
    for buf in placed:
        start, end = buf.address or 0, (buf.address or 0) + buf.nbytes
        if start < prev_end or end > memory:
            raise PlanError(limits.BUFFER_OVERLAP, f"{tile} {buf.name}",
                            f"bytes {start}..{end - 1} overlap {prev} (ends at {prev_end}) or "
                            f"leave the {memory}-byte memory")
        prev_end, prev = end, buf.name


def _check_banks(plan: NpuPlan, core: CoreProgram) -> None:
    """Buffers the kernel streams at once (:meth:`CoreProgram.streamed`: A[k], B[k], acc; ci4
    each unpack and then the MAC loop) must not share a bank."""
    for names in core.streamed():
        together = [plan.buffer_map[n] for n in names]
        if any(b.address is None for b in together):
            continue  # left to aiecc's bank-aware allocator
        for i, x in enumerate(together):
            for y in together[i + 1:]:
                shared = sorted(set(x.banks) & set(y.banks))
                if shared:
                    raise PlanError(limits.BANK_CONFLICT, f"{core.tile} {x.name}/{y.name}",
                                    f"the kernel streams both at once and they share bank(s) "
                                    f"{shared} ({limits.COMPUTE_TILE_BANK_BYTES} B banks): a "
                                    f"stall per conflicting access")


def validate_plan(plan: NpuPlan) -> PlanReport:
    """Check every hardware limit; return the per-tile usage or raise :class:`PlanError`."""
    for what, names in (("buffer", [b.name for b in plan.buffers]),
                        ("lock", [lk.name for lk in plan.locks]),
                        ("BD", [bd.name for bd in plan.bds()]),
                        ("task", [t.name for t in plan.tasks])):
        dup = [n for n, k in Counter(names).items() if k > 1]
        if dup:
            raise PlanError("UNIQUE_NAMES", dup[0], f"{what} name used more than once")
    for tile in plan.tiles:
        _check_tile(tile, tile)

    # Ports: channel counts, one chain per channel, one producer per S2MM.
    chain_ports = [c.port for c in plan.chains]
    task_ports = [t.port for t in plan.tasks]
    for port in chain_ports + task_ports:
        _check_port(port)
    for port, n in Counter(chain_ports).items():
        if n > 1:
            raise PlanError(limits.BD_CHAIN, port, f"{n} BD chains on one channel")
    for chain in plan.chains:
        for bd in chain.bds:
            if bd.port != chain.port:
                raise PlanError(limits.BD_CHAIN, bd.name, f"BD on {bd.port} listed in the chain "
                                f"of {chain.port}")
    sources: Counter[Port] = Counter()
    dests: Counter[Port] = Counter()
    for flow in plan.flows:
        for port in (flow.source, *flow.dests):
            _check_port(port)
        if flow.source.direction != MM2S or any(d.direction != S2MM for d in flow.dests):
            raise PlanError("FLOW_DIRECTION", flow.source, "flows go from MM2S to S2MM channels")
        sources[flow.source] += 1
        dests.update(flow.dests)
    for port, n in (dests + sources).items():
        if n > 1:
            raise PlanError(limits.STATIC_FLOW_ONE_PRODUCER, port,
                            f"{n} static flows meet at this channel; flows are one-to-many "
                            f"(one producer per S2MM, one route per MM2S)")
    endpoints = set(chain_ports) | set(task_ports)
    routed = set(sources) | set(dests)
    for port in sorted(endpoints ^ routed):
        what = "has BDs but no flow" if port in endpoints else "is routed but runs no BDs"
        raise PlanError(limits.FLOW_CONNECTED, port, what)

    # BDs, tasks, locks, memory, per tile.
    for bd in plan.bds():
        _check_bd(plan, bd)
    for task in plan.tasks:
        _check_task(plan, task)
    for core in plan.cores:
        if core.tile.kind != "compute":
            raise PlanError(limits.TILE_IN_ARRAY, core.tile, "a core program needs a compute tile")
        for name in (core.acc, *core.a, *core.b, *(core.unpacked or ())):
            if name not in plan.buffer_map or plan.buffer_map[name].tile != core.tile:
                raise PlanError(limits.BD_IN_BUFFER, core.tile, f"core uses buffer {name!r} "
                                f"that is not on its tile")
        _check_banks(plan, core)
        if core.calls_per_integration % 2:
            raise PlanError(limits.PING_PONG_PARITY, core.tile,
                            f"{core.calls_per_integration} calls per integration is odd: the "
                            f"core's ping-pong would fall out of step with its DMAs")

    usage: dict[Tile, TileUsage] = {}
    for tile in plan.tiles:
        kind = tile.kind
        memory, stack, bd_limit, bd_name = _BY_KIND[kind][:4]
        lock_limit, lock_name = _BY_KIND[kind][8:10]
        data = sum(b.nbytes for b in plan.buffers_of(tile))
        if data and data + stack > memory:
            raise PlanError(_MEMORY_NAME[kind], tile, f"buffers {data} B + stack {stack} B = "
                            f"{data + stack} B exceed {memory} B")
        _check_placement(plan, tile, stack, memory)
        nbd = len(plan.bds_of(tile)) + len(plan.tasks_of(tile))
        if nbd > bd_limit:
            raise PlanError(bd_name, tile, f"{nbd} buffer descriptors; a {kind} tile has "
                            f"{bd_limit}")
        _check_bd_ids(plan, tile, bd_limit, bd_name)
        locks = plan.locks_of(tile)
        if len(locks) > lock_limit:
            raise PlanError(lock_name, tile, f"{len(locks)} locks; a {kind} tile has "
                            f"{lock_limit}")
        for lock in locks:
            if not 0 <= lock.init <= limits.LOCK_VALUE_MAX or not 0 <= lock.lock_id < lock_limit:
                raise PlanError("LOCK_VALUE_MAX", lock.name, f"id {lock.lock_id} / init "
                                f"{lock.init} out of range")
        usage[tile] = TileUsage(tile, data, stack if kind == "compute" else 0, memory, nbd,
                                bd_limit, len(locks))
    return PlanReport(usage)
