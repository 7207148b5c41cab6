"""The NPU dataflow plan's vocabulary: tiles, ports, buffers, locks, buffer descriptors, flows,
core programs and host tasks, and the constants every consumer shares (kernel entry points,
channel assignment, block sizes).

The types are plain data; :mod:`.plan` builds one :class:`NpuPlan` per geometry and
:mod:`.validate` checks it against the hardware limits. The validator imports only this module
and the builder imports both, so the design has no import cycle.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property
from math import prod
from typing import NamedTuple

from ...geometry import BLOCK, Geometry
from ...kernel_sources import kernel_source
from . import limits

INT8 = "int8"
INT32 = "int32"
ELEM_BYTES = {INT8: 1, INT32: 4}
S2MM = "S2MM"
MM2S = "MM2S"

#: Kernel entry points (extern "C" in kernels/aie/xcorr.cc): ci8, and ci4 by nibble
#: order (the nibble holding the real part; docs/design.md, ci4 nibble orders).
KERNEL_FUNC = "xcorr_kernel"
KERNEL_FUNC_CI4 = {"re_high": "xcorr_kernel_ci4_re_high", "re_low": "xcorr_kernel_ci4_re_low"}
ZERO_FUNC = "xcorr_acc_zero"
#: The kernel's source (``kernels/aie/xcorr.cc``): compiled by Peano for the design, by g++
#: over its host emulation header for the tests.
KERNEL_SOURCE = kernel_source("aie/xcorr.cc")
#: Object file the design links the kernel from.
KERNEL_OBJECT = "xcorr.o"

# Channel assignment (see module docstring).
SHIM_A_MM2S = 0
SHIM_B_MM2S = 1
SHIM_OUT_S2MM = 0
MEM_A_MM2S = 0
MEM_OUT_S2MM_BASE = 2
MEM_OUT_MM2S = 2
COMPUTE_A_S2MM = 0
COMPUTE_B_S2MM = 1
COMPUTE_OUT_MM2S = 0
#: Bytes of one (re or im) 8x8 int8 block and of one complex block pair.
BLOCK_BYTES = BLOCK * BLOCK
PAIR_BYTES = 2 * BLOCK_BYTES
#: Most packets one NPU call walks: the shim tasks step through them in one BD dimension
#: (sizes < ``limits.BD_DIM_SIZE``). Only ci4's int32 bound allows more (ci8: 136).
MAX_NPACKET = limits.BD_DIM_SIZE - 1


class Tile(NamedTuple):
    """Array coordinates (column, row); row 0 shim, row 1 memory tile, rows 2.. compute."""

    col: int
    row: int

    @property
    def kind(self) -> str:
        if self.row == limits.SHIM_ROW:
            return "shim"
        if self.row == limits.MEM_ROW:
            return "mem"
        return "compute"

    def __str__(self) -> str:
        return f"{self.kind}({self.col},{self.row})"


class Port(NamedTuple):
    """One DMA channel of a tile: direction S2MM (stream to memory) or MM2S, and its index."""

    tile: Tile
    direction: str
    channel: int

    def __str__(self) -> str:
        return f"{self.tile} {self.direction}{self.channel}"


class Dim(NamedTuple):
    """One address-generation dimension: ``size`` steps of ``stride`` elements."""

    size: int
    stride: int


class _Sized:
    """Sizes of anything with a ``dtype`` name and a ``shape`` (tile buffers, host buffers)."""

    dtype: str
    shape: tuple[int, ...]

    @property
    def nelem(self) -> int:
        return prod(self.shape)

    @property
    def elem_bytes(self) -> int:
        return ELEM_BYTES[self.dtype]

    @property
    def nbytes(self) -> int:
        return self.nelem * self.elem_bytes


@dataclass(frozen=True)
class Buffer(_Sized):
    """A named buffer in one tile's memory; ``shape`` documents its layout.

    ``address``: byte offset in the tile's data memory where the design pins it (compute
    tiles, see :func:`place_compute_buffers`), or None to leave it to aiecc's allocator.
    """

    name: str
    tile: Tile
    dtype: str
    shape: tuple[int, ...]
    address: int | None = None

    @property
    def banks(self) -> range:
        """The compute-tile banks (16 KiB, 512-bit view) the buffer touches (needs an address)."""
        if self.address is None:
            raise ValueError(f"{self.name} has no address")
        bank = limits.COMPUTE_TILE_BANK_BYTES
        return range(self.address // bank, (self.address + max(self.nbytes, 1) - 1) // bank + 1)


@dataclass(frozen=True)
class Lock:
    """A hardware semaphore of one tile with its initial value."""

    name: str
    tile: Tile
    lock_id: int
    init: int


@dataclass(frozen=True)
class LockOp:
    """An acquire (wait until value >= ``value``, then subtract it) or a release (add)."""

    lock: str
    value: int


@dataclass(frozen=True)
class BufferDescriptor:
    """One BD: move ``length`` elements of ``buffer`` from ``offset`` along ``dims``.

    ``acquire`` happens before the transfer, ``release`` after it. A zero ``length`` is the
    published design's dummy BD that only waits on / releases a lock.
    """

    name: str
    port: Port
    bd_id: int
    buffer: str
    offset: int
    length: int
    dims: tuple[Dim, ...] = ()
    acquire: LockOp | None = None
    release: LockOp | None = None

    @property
    def tile(self) -> Tile:
        return self.port.tile


@dataclass(frozen=True)
class DmaChain:
    """The BDs one channel runs, in order; ``loop``: after the last, start again (forever)."""

    port: Port
    bds: tuple[BufferDescriptor, ...]
    loop: bool = True


@dataclass(frozen=True)
class Flow:
    """A static stream-switch route from one MM2S channel to one or more S2MM channels."""

    source: Port
    dests: tuple[Port, ...]


@dataclass(frozen=True)
class CoreProgram:
    """What one compute tile's core runs, forever::

        acquire(acc_acquire); ZERO_FUNC(acc)
        for i in range(calls_per_integration):      # ping-pong: buffers a[i % 2], b[i % 2]
            acquire(a_acquire); acquire(b_acquire)
            kernel(*kernel_args(i % 2))             # (a, b, acc) or, ci4, (a, b, acc, ua, ub)
            release(a_release); release(b_release)
        release(acc_release)                        # the accumulators go out to the host
    """

    tile: Tile
    acc: str
    a: tuple[str, str]
    b: tuple[str, str]
    acc_acquire: LockOp
    acc_release: LockOp
    a_acquire: LockOp
    a_release: LockOp
    b_acquire: LockOp
    b_release: LockOp
    calls_per_integration: int
    kernel: str = KERNEL_FUNC
    zero: str = ZERO_FUNC
    #: ci4: the (A, B) buffers the kernel unpacks a[i % 2], b[i % 2] into, its last two
    #: arguments; None for ci8.
    unpacked: tuple[str, str] | None = None

    def kernel_args(self, k: int) -> tuple[str, ...]:
        """The buffers of a kernel call on ping-pong slot ``k``, in argument order."""
        return (self.a[k], self.b[k], self.acc, *(self.unpacked or ()))

    def streamed(self) -> list[tuple[str, ...]]:
        """Buffers the kernel reads or writes in one phase of a call (they should sit in
        different banks): ci8 A[k], B[k] and the accumulators; ci4 the unpack of A[k] and of
        B[k], then the unpacked A, B and the accumulators."""
        if self.unpacked is None:
            return [(self.a[k], self.b[k], self.acc) for k in range(2)]
        ua, ub = self.unpacked
        return [(*self.unpacked, self.acc)] + [pair for k in range(2)
                                               for pair in ((self.a[k], ua), (self.b[k], ub))]


@dataclass(frozen=True)
class HostArg(_Sized):
    """A runtime-sequence argument (host buffer object), in argument order."""

    name: str
    dtype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class ShimTask:
    """A runtime shim DMA task: one BD over host buffer ``host`` (dims up to 4-D).

    With 4 dims and an outermost size > 1 the hardware walks the outermost dimension as BD
    iterations, so ``repeat_count`` must be ``dims[0].size - 1`` (the published design's quirk); the
    task as a whole moves ``prod(sizes)`` elements once. ``wait``: the sequence awaits this task.
    """

    name: str
    port: Port
    host: str
    offset: int
    dims: tuple[Dim, ...]
    repeat_count: int = 0
    wait: bool = False

    @property
    def length(self) -> int:
        return prod(d.size for d in self.dims)


@dataclass(frozen=True)
class NpuPlan:
    """The whole array for one geometry: buffers, locks, BD chains, flows, cores, host tasks.

    Iterate a tile's BDs with :meth:`chains_of` (per channel, in chain order, with hardware
    ``bd_id``) or :meth:`bds_of`. The runtime sequence starts ``tasks`` in order and awaits
    those with ``wait``.
    """

    geometry: Geometry
    buffers: tuple[Buffer, ...]
    locks: tuple[Lock, ...]
    chains: tuple[DmaChain, ...]
    flows: tuple[Flow, ...]
    cores: tuple[CoreProgram, ...]
    host_args: tuple[HostArg, ...]
    tasks: tuple[ShimTask, ...]

    # ------------------------------------------------------------------ lookups
    @cached_property
    def buffer_map(self) -> dict[str, Buffer]:
        return {b.name: b for b in self.buffers}

    @cached_property
    def lock_map(self) -> dict[str, Lock]:
        return {lk.name: lk for lk in self.locks}

    @cached_property
    def host_arg_map(self) -> dict[str, HostArg]:
        return {h.name: h for h in self.host_args}

    @property
    def tiles(self) -> list[Tile]:
        """Every tile the plan uses, sorted by (col, row)."""
        used = {b.tile for b in self.buffers} | {lk.tile for lk in self.locks}
        used |= {c.port.tile for c in self.chains} | {t.port.tile for t in self.tasks}
        used |= {c.tile for c in self.cores}
        return sorted(used)

    def bds(self) -> list[BufferDescriptor]:
        return [bd for chain in self.chains for bd in chain.bds]

    def bd(self, name: str) -> BufferDescriptor:
        for bd in self.bds():
            if bd.name == name:
                return bd
        raise KeyError(f"no BD named {name!r}")

    def chains_of(self, tile: Tile) -> list[DmaChain]:
        return [c for c in self.chains if c.port.tile == tile]

    def bds_of(self, tile: Tile) -> list[BufferDescriptor]:
        return [bd for c in self.chains_of(tile) for bd in c.bds]

    def buffers_of(self, tile: Tile) -> list[Buffer]:
        return [b for b in self.buffers if b.tile == tile]

    def locks_of(self, tile: Tile) -> list[Lock]:
        return [lk for lk in self.locks if lk.tile == tile]

    def tasks_of(self, tile: Tile) -> list[ShimTask]:
        return [t for t in self.tasks if t.port.tile == tile]

    # ------------------------------------------------------------------ mutation (tests, tools)
    def replace(self, **changes: object) -> NpuPlan:
        return dataclasses.replace(self, **changes)

    def replace_bd(self, name: str, **changes: object) -> NpuPlan:
        """A copy with one BD changed (e.g. ``dims=...``); raises KeyError if absent."""
        self.bd(name)
        chains = tuple(
            dataclasses.replace(c, bds=tuple(dataclasses.replace(bd, **changes)
                                             if bd.name == name else bd for bd in c.bds))
            for c in self.chains)
        return self.replace(chains=chains)

    def replace_task(self, name: str, **changes: object) -> NpuPlan:
        if name not in {t.name for t in self.tasks}:
            raise KeyError(f"no task named {name!r}")
        return self.replace(tasks=tuple(dataclasses.replace(t, **changes) if t.name == name
                                        else t for t in self.tasks))

    def replace_buffer(self, name: str, **changes: object) -> NpuPlan:
        if name not in self.buffer_map:
            raise KeyError(f"no buffer named {name!r}")
        return self.replace(buffers=tuple(dataclasses.replace(b, **changes) if b.name == name
                                          else b for b in self.buffers))
