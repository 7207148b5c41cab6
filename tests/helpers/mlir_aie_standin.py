"""A strict stand-in for mlir-aie's Python API, so the design replay runs in CI.

``xengine_block/npu/design/mlir.py`` replays its recorded calls against ``aie.dialects.aie`` and
``aie.dialects.aiex``; mlir-aie cannot be installed here. This module provides those modules
with the signatures written from upstream, so that a misspelt keyword, a keyword passed where
only positions are accepted (or the reverse), a missing required argument or arguments in the
wrong order (caught by type checks on enums, tiles, locks and blocks) fail in CI. It builds a
plain-text rendering of the module (one op per line) instead of MLIR.

Signatures, from Xilinx/mlir-aie:

- ``python/dialects/aie.py`` @ 00cfd45fa6527f14a4f97069b6a52e84a4055dea: ``external_func(name,
  inputs, outputs=None, visibility="private", link_with=None)``; ``Core(tile, link_with=None,
  dynamic_objfifo_lowering=None, stack_size=None)`` (``link_with`` raises TypeError: "Set
  link_with= on each external_func() declaration instead"); ``buffer(tile, datatype, name=None,
  address=None, initial_value=None, use_write_rtp=False, loc=None, ip=None)``; ``lock(tile, *,
  lock_id=None, init=None, sym_name=None, annot=None, loc=None, ip=None)``; ``flow(source,
  source_bundle=None, source_channel=None, dest=None, dest_bundle=None, dest_channel=None)``;
  ``dma_start(channel_dir, channel_index, *, dest=None, chain=None, repeat_count=0, loc=None,
  ip=None)``; ``next_bd(dest=None, loc=None, ip=None)``; ``tile(col, row, *, loc=None,
  ip=None, allocation_scheme=None)``; ``mem(tile)`` / ``memtile_dma(tile)`` decorators whose
  function takes zero or one argument (the block list); ``bds(parent)``.
- ``python/dialects/aiex.py`` @ 0155ebd7c8b77cd6846781dd0597a7adee9a7620:
  ``runtime_sequence(*inputs, sym_name=None, context=None)``; ``dma_configure_task(*args,
  **kwargs)`` = ``DMAConfigureTaskOp(T.index(), *args, **kwargs)``; ``shim_dma_bd(mem, tap=None,
  offset=None, sizes=None, strides=None, transfer_len=None, burst_length=0, packet=None)``
  (``len`` = product of the inner three sizes); ``dma_start_task(*args)`` and
  ``dma_await_task(*args)`` (at least one task each).
- Generated op builders (``_aie_ops_gen`` / ``_aiex_ops_gen``, MLIR's Python ODS generator):
  required operands and attributes positional, optional ones keyword-only, then ``loc``,
  ``ip``: ``use_lock(lock, action, *, value=None, blocking=None, loc=None, ip=None)``,
  ``dma_bd(buffer, *, offset=None, len=None, dimensions=None, pad_dimensions=None,
  pad_value=None, bd_id=None, next_bd_id=None, burst_length=None, packet=None, loc=None,
  ip=None)``, ``DMAConfigureTaskOp(result, tile, direction, channel, *, issue_token=None,
  repeat_count=None, loc=None, ip=None)``. These last ones follow the generator's convention;
  they were not read from a generated file (none is in the repository).
"""

from __future__ import annotations

import contextlib
import enum
import sys
import types
from collections.abc import Iterator
from typing import Any

import numpy as np


class StandinError(TypeError):
    """A call the real API would reject (wrong type, wrong place)."""


class AIEDevice(enum.Enum):
    npu1 = 1
    npu2 = 2


class WireBundle(enum.Enum):
    DMA = 1
    North = 2
    South = 3


class DMAChannelDir(enum.Enum):
    S2MM = 0
    MM2S = 1


class LockAction(enum.Enum):
    Acquire = 0
    AcquireGreaterEqual = 1
    Release = 2


class Value:
    """An SSA value the stand-in hands out (tile, buffer, lock, argument, task)."""

    def __init__(self, kind: str, name: str, **info: Any) -> None:
        self.kind, self.name, self.info = kind, name, info

    def __str__(self) -> str:
        return f"%{self.name}"


class _Module:
    """The module being built: nested op lines and the current region stack."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.depth = 0
        self.scope: list[str] = ["module"]
        self.count = 0

    def emit(self, text: str) -> None:
        self.lines.append("  " * self.depth + text)

    @contextlib.contextmanager
    def region(self, kind: str, header: str) -> Iterator[None]:
        self.emit(header + " {")
        self.depth += 1
        self.scope.append(kind)
        try:
            yield
        finally:
            self.scope.pop()
            self.depth -= 1
            self.emit("}")

    def need(self, *kinds: str, op: str) -> None:
        if self.scope[-1] not in kinds:
            raise StandinError(f"{op} outside {' / '.join(kinds)} (inside {self.scope[-1]})")

    def fresh(self, kind: str, name: str | None = None) -> str:
        self.count += 1
        return name or f"{kind}{self.count}"


_MOD: _Module | None = None


def _m() -> _Module:
    if _MOD is None:
        raise StandinError("no mlir_mod_ctx() is active")
    return _MOD


def _value(x: Any, kind: str, what: str) -> Value:
    if not isinstance(x, Value) or x.kind != kind:
        raise StandinError(f"{what} must be a {kind}, got {x!r}")
    return x


def _int(x: Any, what: str) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
        raise StandinError(f"{what} must be an integer, got {x!r}")
    return int(x)


def _enum(x: Any, cls: type[enum.Enum], what: str) -> enum.Enum:
    if not isinstance(x, cls):
        raise StandinError(f"{what} must be a {cls.__name__}, got {x!r}")
    return x


def _np_type(datatype: Any, what: str) -> str:
    """``np.ndarray[(n,), np.dtype[np.int8]]`` -> memref text."""
    args = getattr(datatype, "__args__", None)
    if getattr(datatype, "__origin__", None) is not np.ndarray or not args or len(args) != 2:
        raise StandinError(f"{what} must be np.ndarray[shape, np.dtype[...]], got {datatype!r}")
    shape, dtype = args
    elem = np.dtype(dtype.__args__[0]).name
    return f"memref<{'x'.join(str(int(s)) for s in shape)}x{elem}>"


# ---------------------------------------------------------------------- aie.dialects.aie
class _Block:
    """A block of a DMA region or task (``ContextManagedBlock``)."""

    def __init__(self, owner: str, key: Any) -> None:
        self.owner, self.key = owner, key

    def __enter__(self) -> _Block:
        m = _m()
        m.emit(f"^{self.owner}_bb{self.key}:")
        m.scope.append("block")
        return self

    def __exit__(self, *exc: object) -> None:
        _m().scope.pop()


class _Blocks:
    """``AutoInitializingContextManagedBlockList``: a new block per new key."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self.blocks: dict[Any, _Block] = {}

    def __getitem__(self, key: Any) -> _Block:
        if key not in self.blocks:
            self.blocks[key] = _Block(self.owner, key)
        return self.blocks[key]


def device(device, *, sym_name=None, loc=None, ip=None):  # noqa: ANN001, ANN201
    _enum(device, AIEDevice, "device")

    def decorator(f):  # noqa: ANN001, ANN202
        m = _m()
        m.need("module", op="aie.device")
        with m.region("device", f"aie.device({device.name})"):
            f()
    return decorator


def tile(col, row, *, loc=None, ip=None, allocation_scheme=None):  # noqa: ANN001, ANN201
    m = _m()
    m.need("device", op="aie.tile")
    c, r = _int(col, "col"), _int(row, "row")
    v = Value("tile", f"tile_{c}_{r}", col=c, row=r)
    m.emit(f"{v} = aie.tile({c}, {r})")
    return v


def buffer(tile, datatype, name=None, address=None, initial_value=None,  # noqa: ANN001, ANN201
           use_write_rtp=False, loc=None, ip=None):
    m = _m()
    m.need("device", op="aie.buffer")
    t = _value(tile, "tile", "buffer tile")
    ty = _np_type(datatype, "buffer datatype")
    extra = f" {{address = {_int(address, 'address')}}}" if address is not None else ""
    v = Value("buffer", m.fresh("buf", name), tile=t)
    m.emit(f"{v} = aie.buffer({t}) {{sym_name = \"{v.name}\"}}{extra} : {ty}")
    return v


def lock(tile, *, lock_id=None, init=None, sym_name=None, annot=None, loc=None,  # noqa: ANN001, ANN201
         ip=None):
    m = _m()
    m.need("device", op="aie.lock")
    t = _value(tile, "tile", "lock tile")
    v = Value("lock", m.fresh("lock", sym_name), tile=t)
    m.emit(f"{v} = aie.lock({t}, {_int(lock_id, 'lock_id')}) {{init = {_int(init, 'init')}}}")
    return v


def flow(source, source_bundle=None, source_channel=None, dest=None,  # noqa: ANN001, ANN201
         dest_bundle=None, dest_channel=None):
    assert dest is not None
    m = _m()
    m.need("device", op="aie.flow")
    s = _value(source, "tile", "flow source")
    d = _value(dest, "tile", "flow dest")
    sb = _enum(source_bundle, WireBundle, "source_bundle")
    db = _enum(dest_bundle, WireBundle, "dest_bundle")
    m.emit(f"aie.flow({s}, {sb.name} : {_int(source_channel, 'source_channel')}, {d}, "
           f"{db.name} : {_int(dest_channel, 'dest_channel')})")


def _dma_region(op: str, tile: Any):  # noqa: ANN202
    t = _value(tile, "tile", f"{op} tile")

    def decorator(f):  # noqa: ANN001, ANN202
        m = _m()
        m.need("device", op=op)
        nparams = f.__code__.co_argcount
        if nparams > 1:
            raise RuntimeError("Expected function to take zero or one argument(s).")
        blocks = _Blocks(f"{op}_{t.name}")
        with m.region("dma", f"aie.{op}({t})"), blocks[0]:
            f(blocks) if nparams else f()
    return decorator


def mem(tile):  # noqa: ANN001, ANN201
    return _dma_region("mem", tile)


def memtile_dma(tile):  # noqa: ANN001, ANN201
    return _dma_region("memtile_dma", tile)


def _block_ref(x: Any, what: str) -> str:
    if not isinstance(x, _Block):
        raise StandinError(f"{what} must be a block, got {x!r}")
    return f"^{x.owner}_bb{x.key}"


def dma_start(channel_dir, channel_index, *, dest=None, chain=None, repeat_count=0,  # noqa: ANN001, ANN201
              loc=None, ip=None):
    m = _m()
    m.need("block", op="aie.dma_start")
    d = _enum(channel_dir, DMAChannelDir, "channel_dir")
    m.emit(f"aie.dma_start({d.name}, {_int(channel_index, 'channel_index')}, "
           f"{_block_ref(dest, 'dest')}, {_block_ref(chain, 'chain')})")


def next_bd(dest=None, loc=None, ip=None):  # noqa: ANN001, ANN201
    m = _m()
    m.need("block", op="aie.next_bd")
    m.emit(f"aie.next_bd {_block_ref(dest, 'dest')}")


def use_lock(lock, action, *, value=None, blocking=None, loc=None, ip=None):  # noqa: ANN001, ANN201
    m = _m()
    m.need("block", "core", "for", op="aie.use_lock")
    lk = _value(lock, "lock", "use_lock lock")
    a = _enum(action, LockAction, "action")
    m.emit(f"aie.use_lock({lk}, {a.name}, {_int(value, 'value')})")


def dma_bd(buffer, *, offset=None, len=None, dimensions=None, pad_dimensions=None,  # noqa: ANN001, ANN201, A002
           pad_value=None, bd_id=None, next_bd_id=None, burst_length=None, packet=None,
           loc=None, ip=None):
    m = _m()
    m.need("block", op="aie.dma_bd")
    if not (isinstance(buffer, Value) and buffer.kind in ("buffer", "arg")):
        raise StandinError(f"dma_bd buffer must be a buffer or a sequence argument: {buffer!r}")
    dims = ""
    if dimensions is not None:
        if not all(isinstance(d, tuple) and len_(d) == 2 for d in dimensions):
            raise StandinError(f"dimensions must be (size, stride) tuples: {dimensions!r}")
        dims = ", [" + ", ".join(f"<size = {_int(s, 'size')}, stride = {_int(t, 'stride')}>"
                                 for s, t in dimensions) + "]"
    m.emit(f"aie.dma_bd({buffer} : {_int(offset, 'offset')}, {_int(len, 'len')}{dims})")


len_ = len  # dma_bd's parameter is called ``len`` upstream


class EndOp:
    def __init__(self, *, loc=None, ip=None) -> None:  # noqa: ANN001
        _m().emit("aie.end")


class external_func:  # noqa: N801 - upstream name
    def __init__(self, name: str, inputs, outputs=None, visibility="private",  # noqa: ANN001
                 link_with=None) -> None:
        m = _m()
        m.need("device", op="func.func")
        types_ = ", ".join(_np_type(t, "external_func input") for t in inputs)
        self.name = name
        attr = f" {{link_with = \"{link_with}\"}}" if link_with is not None else ""
        m.emit(f"func.func {visibility} @{name}({types_}){attr}")

    def __call__(self, *call_args: Any) -> None:
        m = _m()
        m.need("core", "for", op="func.call")
        for a in call_args:
            _value(a, "buffer", f"argument of {self.name}")
        m.emit(f"func.call @{self.name}({', '.join(map(str, call_args))})")


def core(tile, link_with=None, dynamic_objfifo_lowering=None, stack_size=None):  # noqa: ANN001, ANN201
    if link_with is not None:
        raise TypeError("Core() no longer accepts link_with. Set link_with= on each "
                        "external_func() declaration instead")
    t = _value(tile, "tile", "core tile")

    def decorator(f):  # noqa: ANN001, ANN202
        m = _m()
        m.need("device", op="aie.core")
        with m.region("core", f"aie.core({t})"):
            f()
    return decorator


@contextlib.contextmanager
def bds(parent):  # noqa: ANN001, ANN201
    task = _value(parent, "task", "bds parent")
    yield _Blocks(f"task_{task.name}")


# ---------------------------------------------------------------------- aie.dialects.aiex
def runtime_sequence(*inputs, sym_name=None, context=None):  # noqa: ANN001, ANN201
    def decorator(f):  # noqa: ANN001, ANN202
        m = _m()
        m.need("device", op="aie.runtime_sequence")
        args = [Value("arg", f"arg{k}", type=_np_type(t, "sequence input"))
                for k, t in enumerate(inputs)]
        header = ", ".join(f"{a}: {a.info['type']}" for a in args)
        with m.region("sequence", f"aie.runtime_sequence @{sym_name or f.__name__}({header})"):
            f(*args)
    return decorator


def dma_configure_task(tile, direction, channel, *, issue_token=None,  # noqa: ANN001, ANN201
                       repeat_count=None, loc=None, ip=None):
    m = _m()
    m.need("sequence", op="aiex.dma_configure_task")
    t = _value(tile, "tile", "dma_configure_task tile")
    d = _enum(direction, DMAChannelDir, "direction")
    v = Value("task", m.fresh("task"))
    opts = []
    if issue_token is not None:
        opts.append(f"issue_token = {bool(issue_token)}")
    if repeat_count is not None:
        opts.append(f"repeat_count = {_int(repeat_count, 'repeat_count')}")
    m.emit(f"{v} = aiex.dma_configure_task({t}, {d.name}, {_int(channel, 'channel')}) "
           f"{{{', '.join(opts)}}}")
    return v


def shim_dma_bd(mem, tap=None, offset=None, sizes=None, strides=None,  # noqa: ANN001, ANN201
                transfer_len=None, burst_length=0, packet=None):
    _value(mem, "arg", "shim_dma_bd mem")
    if tap is not None:
        raise StandinError("the design passes offset/sizes/strides, not a tap")
    if sizes is None or strides is None or len(sizes) != 4 or len(strides) != 4:
        raise StandinError(f"shim_dma_bd takes 4 sizes and 4 strides: {sizes}, {strides}")
    if transfer_len is None:
        transfer_len = int(np.prod(sizes[-3:]))
    dma_bd(mem, offset=0 if offset is None else offset, len=transfer_len,
           dimensions=list(zip(sizes, strides, strict=True)), burst_length=burst_length,
           packet=packet)


def _tasks(op: str, args: tuple) -> None:
    m = _m()
    m.need("sequence", op=op)
    if not args:
        raise ValueError(f"{op} must receive at least one task")
    for a in args:
        _value(a, "task", f"{op} argument")
        m.emit(f"aiex.{op}({a})")


def dma_start_task(*args):  # noqa: ANN002, ANN201
    _tasks("dma_start_task", args)


def dma_await_task(*args):  # noqa: ANN002, ANN201
    _tasks("dma_await_task", args)


# ---------------------------------------------------------------------- context, range_
class _Operation:
    def __init__(self, mod: _Module) -> None:
        self.mod = mod

    def verify(self) -> bool:
        return self.mod.depth == 0


class _ModuleText:
    """``ctx.module``: ``str()`` is the module text; ``operation.verify()``."""

    def __init__(self, mod: _Module) -> None:
        self._mod = mod
        self.operation = _Operation(mod)

    def __str__(self) -> str:
        return "module {\n" + "\n".join("  " + x for x in self._mod.lines) + "\n}"


@contextlib.contextmanager
def mlir_mod_ctx():  # noqa: ANN201
    global _MOD
    if _MOD is not None:
        raise StandinError("nested mlir_mod_ctx()")
    _MOD = _Module()
    try:
        yield types.SimpleNamespace(module=_ModuleText(_MOD))
    finally:
        _MOD = None


def range_(start, stop=None, step=None):  # noqa: ANN001, ANN201
    """``scf.for``: the body is traced once."""
    m = _m()
    m.need("core", "for", op="scf.for")
    lo, hi = (0, start) if stop is None else (start, stop)
    with m.region("for", f"scf.for %i = {_int(lo, 'start')} to {_int(hi, 'stop')}"):
        yield 0


# ---------------------------------------------------------------------- installation
AIE_NAMES = ("AIEDevice", "WireBundle", "DMAChannelDir", "LockAction", "device", "tile",
             "buffer", "lock", "flow", "mem", "memtile_dma", "dma_start", "next_bd",
             "use_lock", "dma_bd", "EndOp", "external_func", "core", "bds")
AIEX_NAMES = ("runtime_sequence", "dma_configure_task", "shim_dma_bd", "dma_start_task",
              "dma_await_task")


def modules() -> dict[str, types.ModuleType]:
    """``sys.modules`` entries that make ``from aie.dialects import aie, aiex`` the stand-in."""
    this = sys.modules[__name__]
    mods = {name: types.ModuleType(name) for name in (
        "aie", "aie.dialects", "aie.dialects.aie", "aie.dialects.aiex", "aie.extras",
        "aie.extras.context", "aie.iron", "aie.iron.controlflow")}
    for n in AIE_NAMES:
        setattr(mods["aie.dialects.aie"], n, getattr(this, n))
    for n in AIEX_NAMES:
        setattr(mods["aie.dialects.aiex"], n, getattr(this, n))
    mods["aie.dialects"].aie = mods["aie.dialects.aie"]
    mods["aie.dialects"].aiex = mods["aie.dialects.aiex"]
    mods["aie.extras.context"].mlir_mod_ctx = mlir_mod_ctx
    mods["aie.iron.controlflow"].range_ = range_
    for parent, child in (("aie", "dialects"), ("aie", "extras"), ("aie", "iron"),
                          ("aie.extras", "context"), ("aie.iron", "controlflow")):
        setattr(mods[parent], child, mods[f"{parent}.{child}"])
    return mods
