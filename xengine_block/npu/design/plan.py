"""The NPU dataflow plan for a :class:`Geometry`, as data (docs/design.md, "NPU dataflow plan").

The plan is described once and consumed twice: by the mlir-aie design generator (``aie/``) and
by the bit-exact emulator (``xengine_block/npu/host/emulate.py``). It follows the published design
(docs/design.md, "The published NPU design") and derives every size from the geometry.

Units
-----
Offsets, lengths and BD/task dimensions are in **elements of the buffer's dtype** (int8: bytes,
int32: 4-byte words), as mlir-aie's ``dma_bd``/``shim_dma_bd`` take them. Dimensions are lists
of ``Dim(size, stride)``, **outermost first**; an empty list means a contiguous ``length``.

Placement (generalises the published design's 4 x 8 mapping to any rows <= 4, cols <= 8)
-------------------------------------------------------------------------
- Compute tile of array (row r, column c): ``Tile(c, 2 + r)``; it owns A streams
  ``8N r .. 8N (r+1)`` and B streams ``8M c .. 8M (c+1)`` of the NPU block.
- A path, by rows: memory tile ``2r``; shim tiles ``2r + h`` (h = 0, 1; MM2S 0) each read half
  of the row's streams (N/2 blocks of 8) into S2MM ``h`` of that memory tile; its MM2S 0
  broadcasts to S2MM 0 of every compute tile of row r.
- B path, by columns: memory tile ``2 (c // 2) + 1`` serves columns c and c ^ 1; shim tile c
  (MM2S 1) feeds its S2MM ``c % 2``; its MM2S ``c % 2`` broadcasts to S2MM 1 of column c.
- Output: compute MM2S 0 -> memory tile c, S2MM ``2 + r`` (join at offset r * acc words);
  memory tile MM2S 2 -> shim tile c S2MM 0 -> host ``out`` at column c.
The array spans ``max(cols, 2 rows, 2 ceil(cols / 2))`` columns of shim and memory tiles, so the
small test geometry (2 x 4) uses columns 0..3 exactly as the published design uses 0..7.

Host buffers (runtime sequence arguments, in order)
---------------------------------------------------
- ``a``, ``b``: int8 ``[P][npu_block streams][payload]`` with payload
  ``[nchan_pkt][ncoarse][re, im][8 fine]`` (the published design's DDR layout; see ``hostio.py``),
  for ci4 ``[nchan_pkt][ncoarse][8 fine]`` bytes (our ci4 packet payload as it arrives).
- ``out``: int32 ``[nchan_pkt][cols][rows][N][M][re, im][8][8]``: A stream
  ``8N row + 8n + r2``, B stream ``8M col + 8m + c2``.

ci4 (``Geometry.sample_bits == 4``)
----------------------------------
The same plan with every input buffer, BD and task sized for one byte per complex sample: an
8 x 8 sample block is 64 bytes instead of 128 (``Geometry.sample_block_bytes``), so every hop up
to the compute tiles moves half the bytes of ci8 and the memory tiles write the same
``[stream][sample]`` blocks (rows of 8 packed samples). Each compute tile has two more buffers,
the int8 A and B of one call, which its kernel (``KERNEL_FUNC_CI4``) unpacks the packed
buffers into before the MAC loop (:attr:`CoreProgram.unpacked`).
"""

from __future__ import annotations

from ...geometry import BLOCK, Geometry
from . import limits
from .dataflow import (
    BLOCK_BYTES,
    COMPUTE_A_S2MM,
    COMPUTE_B_S2MM,
    COMPUTE_OUT_MM2S,
    ELEM_BYTES,
    INT8,
    INT32,
    KERNEL_FUNC,
    KERNEL_FUNC_CI4,
    MEM_A_MM2S,
    MEM_OUT_MM2S,
    MEM_OUT_S2MM_BASE,
    MM2S,
    PAIR_BYTES,
    S2MM,
    SHIM_A_MM2S,
    SHIM_B_MM2S,
    SHIM_OUT_S2MM,
    Buffer,
    BufferDescriptor,
    CoreProgram,
    Dim,
    DmaChain,
    Flow,
    HostArg,
    Lock,
    LockOp,
    NpuPlan,
    Port,
    ShimTask,
    Tile,
)
from .validate import validate_plan


# ---------------------------------------------------------------------- placement
def compute_tile(row: int, col: int) -> Tile:
    return Tile(col, limits.FIRST_COMPUTE_ROW + row)


def a_mem_tile(row: int) -> Tile:
    return Tile(2 * row, limits.MEM_ROW)


def a_shim_tile(row: int, half: int) -> Tile:
    return Tile(2 * row + half, limits.SHIM_ROW)


def b_mem_tile(col: int) -> Tile:
    return Tile(2 * (col // 2) + 1, limits.MEM_ROW)


def b_mem_channel(col: int) -> int:
    return col % 2


def b_shim_tile(col: int) -> Tile:
    return Tile(col, limits.SHIM_ROW)


def out_mem_tile(col: int) -> Tile:
    return Tile(col, limits.MEM_ROW)


def out_shim_tile(col: int) -> Tile:
    return Tile(col, limits.SHIM_ROW)


# ---------------------------------------------------------------------- builder
class _Builder:
    """Collects plan objects, numbering locks and BDs per tile in creation order."""

    def __init__(self, g: Geometry) -> None:
        self.g = g
        self.buffers: list[Buffer] = []
        self.locks: list[Lock] = []
        self.chains: list[DmaChain] = []
        self.flows: list[Flow] = []
        self.cores: list[CoreProgram] = []
        self.tasks: list[ShimTask] = []
        self._nlock: dict[Tile, int] = {}
        self._nbd: dict[tuple[Tile, int], int] = {}

    def buffer(self, name: str, tile: Tile, dtype: str, shape: tuple[int, ...],
               address: int | None = None) -> str:
        self.buffers.append(Buffer(name, tile, dtype, shape, address))
        return name

    def lock(self, name: str, tile: Tile, init: int) -> str:
        lock_id = self._nlock.get(tile, 0)
        self._nlock[tile] = lock_id + 1
        self.locks.append(Lock(name, tile, lock_id, init))
        return name

    def buffer_len(self, name: str) -> int:
        return next(buf.nelem for buf in self.buffers if buf.name == name)

    def chain(self, port: Port, specs: list[dict]) -> None:
        """specs: BufferDescriptor fields except port and bd_id.

        BD ids count up per tile in creation order; a memory tile has two pools split by
        channel parity (even channels from 0, odd from 24), as aiecc assigns them. A pool that
        overflows runs into the other half, which the validator reports.
        """
        pool = (port.tile, port.channel % 2 if port.tile.kind == "mem" else 0)
        base = limits.MEM_TILE_BDS_PER_PARITY * pool[1]
        bds = []
        for spec in specs:
            bd_id = self._nbd.get(pool, base)
            self._nbd[pool] = bd_id + 1
            bds.append(BufferDescriptor(port=port, bd_id=bd_id, **spec))
        self.chains.append(DmaChain(port, tuple(bds)))


def _geometry_sizes(g: Geometry) -> dict[str, int]:
    """Sizes shared by several parts of the plan (elements of the buffer concerned)."""
    ncalls = g.npu_ncalls_per_packet
    return dict(
        ncalls=ncalls,
        # one stream block (8 streams) of one channel of one packet in a memory-tile buffer
        mem_block=g.ncoarse * g.sample_block_bytes,
        # one kernel call's slice of a stream block: T sample blocks (ci8: (re, im) 8x8)
        call_block=g.tile_t * g.sample_block_bytes,
        acc=g.tile_acc_bytes // ELEM_BYTES[INT32],
        acc_row=g.tile_m * PAIR_BYTES,  # one A stream-block row of accumulators, int32 words
    )


def _sample_block_shape(g: Geometry) -> tuple[int, ...]:
    """One sample block in tile memory: ci8 ``[re, im][8 s][8 f]``, ci4 ``[8 s][8 f]`` bytes."""
    return (BLOCK, BLOCK) if g.ci4 else (2, BLOCK, BLOCK)


def _mem_write_dims(g: Geometry, nblocks: int) -> tuple[Dim, ...]:
    """Memory-tile S2MM pattern: stream-major payload -> [block][coarse][reim][8 s][8 f]
    (ci4: [block][coarse][8 s][8 f] bytes).

    The stream arrives as ``nblocks*8`` streams x ``[coarse][reim][fine]`` (ci4
    ``[coarse][fine]``), i.e. rows of 8 bytes; outermost first: stream block, stream in block
    (row of an 8x8 block), row of the stream ((coarse, reim) block), fine sample.
    """
    s = _geometry_sizes(g)
    return (Dim(nblocks, s["mem_block"]), Dim(BLOCK, BLOCK),
            Dim(g.chan_bytes // BLOCK, BLOCK_BYTES), Dim(BLOCK, 1))


def _mem_read_dims(g: Geometry, nblocks: int) -> tuple[Dim, ...]:
    """Memory-tile MM2S pattern for one kernel call: T of the ncoarse sample blocks of every
    stream block; their T*128 (ci4: T*64) contiguous bytes are split as (T, 128) x (128, 1) to
    keep sizes < 1024."""
    s = _geometry_sizes(g)
    return (Dim(nblocks, s["mem_block"]), Dim(g.tile_t, g.sample_block_bytes),
            Dim(g.sample_block_bytes, 1))


def _build_a_path(b: _Builder) -> None:
    g, s = b.g, _geometry_sizes(b.g)
    half_blocks = g.tile_n // 2
    shape = (g.tile_n, g.ncoarse, *_sample_block_shape(g))
    half_len = half_blocks * s["mem_block"]
    call_len = g.tile_n * s["call_block"]
    for row in range(g.rows):
        mt = a_mem_tile(row)
        bufs = [b.buffer(f"mem_a_r{row}_buf{k}", mt, INT8, shape) for k in range(2)]
        # prod/cons lock per (buffer k, half h): the two halves are filled by two shim tiles.
        prod_ = [[b.lock(f"mem_a_r{row}_buf{k}_h{h}_prod", mt, 1) for h in range(2)]
                 for k in range(2)]
        cons = [[b.lock(f"mem_a_r{row}_buf{k}_h{h}_cons", mt, 0) for h in range(2)]
                for k in range(2)]
        for h in range(2):
            b.chain(Port(mt, S2MM, h), [
                dict(name=f"mem_a_r{row}_in{h}_buf{k}", buffer=bufs[k], offset=h * half_len,
                     length=half_len, dims=_mem_write_dims(g, half_blocks),
                     acquire=LockOp(prod_[k][h], 1), release=LockOp(cons[k][h], 1))
                for k in range(2)])
        # MM2S: wait for both halves (a zero-length BD acquires the first), send ncalls
        # transfers of T sample blocks, then release both halves (the second by a dummy BD).
        specs = []
        for k in range(2):
            specs.append(dict(name=f"mem_a_r{row}_out_buf{k}_wait", buffer=bufs[k], offset=0,
                              length=0, acquire=LockOp(cons[k][0], 1),
                              release=LockOp(cons[k][0], 0)))
            for q in range(s["ncalls"]):
                first, last = q == 0, q == s["ncalls"] - 1
                acquire = (LockOp(cons[k][1], 1) if first
                           else LockOp(cons[k][0], 0) if last else None)
                release = (LockOp(prod_[k][0], 1) if last
                           else LockOp(prod_[k][1], 0) if first else None)
                specs.append(dict(name=f"mem_a_r{row}_out_buf{k}_call{q}", buffer=bufs[k],
                                  offset=q * s["call_block"], length=call_len,
                                  dims=_mem_read_dims(g, g.tile_n), acquire=acquire,
                                  release=release))
            specs.append(dict(name=f"mem_a_r{row}_out_buf{k}_free", buffer=bufs[k], offset=0,
                              length=0, acquire=LockOp(cons[k][1], 0),
                              release=LockOp(prod_[k][1], 1)))
        b.chain(Port(mt, MM2S, MEM_A_MM2S), specs)
        for h in range(2):
            b.flows.append(Flow(Port(a_shim_tile(row, h), MM2S, SHIM_A_MM2S), (Port(mt, S2MM, h),)))
        b.flows.append(Flow(Port(mt, MM2S, MEM_A_MM2S),
                            tuple(Port(compute_tile(row, c), S2MM, COMPUTE_A_S2MM)
                                  for c in range(g.cols))))


def _build_b_path(b: _Builder) -> None:
    g, s = b.g, _geometry_sizes(b.g)
    shape = (g.tile_m, g.ncoarse, *_sample_block_shape(g))
    full_len = g.tile_m * s["mem_block"]
    call_len = g.tile_m * s["call_block"]
    for col in range(g.cols):
        mt, ch = b_mem_tile(col), b_mem_channel(col)
        bufs = [b.buffer(f"mem_b_c{col}_buf{k}", mt, INT8, shape) for k in range(2)]
        # Counting locks over sample blocks: S2MM takes ncalls per buffer, MM2S frees one each.
        prod_ = b.lock(f"mem_b_c{col}_prod", mt, 2 * s["ncalls"])
        cons = b.lock(f"mem_b_c{col}_cons", mt, 0)
        b.chain(Port(mt, S2MM, ch), [
            dict(name=f"mem_b_c{col}_in_buf{k}", buffer=bufs[k], offset=0, length=full_len,
                 dims=_mem_write_dims(g, g.tile_m), acquire=LockOp(prod_, s["ncalls"]),
                 release=LockOp(cons, s["ncalls"]))
            for k in range(2)])
        b.chain(Port(mt, MM2S, ch), [
            dict(name=f"mem_b_c{col}_out_buf{k}_call{q}", buffer=bufs[k],
                 offset=q * s["call_block"], length=call_len, dims=_mem_read_dims(g, g.tile_m),
                 acquire=LockOp(cons, 1), release=LockOp(prod_, 1))
            for k in range(2) for q in range(s["ncalls"])])
        b.flows.append(Flow(Port(b_shim_tile(col), MM2S, SHIM_B_MM2S), (Port(mt, S2MM, ch),)))
        b.flows.append(Flow(Port(mt, MM2S, ch),
                            tuple(Port(compute_tile(r, col), S2MM, COMPUTE_B_S2MM)
                                  for r in range(g.rows))))


def place_compute_buffers(g: Geometry) -> dict[str, int]:
    """Byte addresses of a compute tile's buffers, as the published design's linker map lays them
    out.

    The published design (N=8, M=4, T=15) reached ~75 % MAC efficiency with: stack at 0 (1 KiB),
    both B buffers right after it in bank 0, the accumulators alone in bank 1, A ping in bank 2 and
    A pong in bank 3 (banks of 16 KiB). So the kernel's streams (A[k], B[k], acc) never share
    a bank. The same rule for any tiling: B0, B1 after the stack, then acc, A0 and A1 each from
    the next bank boundary.

    ci4 (keys ``ua``, ``ub``: the unpacked A and B) keeps the rule for what the MAC loop streams
    (unpacked A, unpacked B, acc) and for each unpack (A[k] -> unpacked A, B[k] -> unpacked
    B): unpacked B and A0 after the stack, then acc, the unpacked A, then A1, B0, B1, each group
    from the next bank boundary; for the published tiling that fills the four banks as ci8 does
    (62,464 B). A tiling this cannot fit raises ValueError.
    """
    bank = limits.COMPUTE_TILE_BANK_BYTES

    def next_bank(addr: int) -> int:
        return -(-addr // bank) * bank

    if g.ci4:
        groups = [["ub", "a0"], ["acc"], ["ua"], ["a1", "b0", "b1"]]
        size = {"ua": g.tile_n * g.tile_t * PAIR_BYTES, "ub": g.tile_m * g.tile_t * PAIR_BYTES}
    else:
        groups = [["b0", "b1"], ["acc"], ["a0"], ["a1"]]
        size = {}
    size.update(a0=g.tile_a_bytes, a1=g.tile_a_bytes, b0=g.tile_b_bytes, b1=g.tile_b_bytes,
                acc=g.tile_acc_bytes)
    addr: dict[str, int] = {}
    end = limits.COMPUTE_TILE_STACK
    for k, group in enumerate(groups):
        end = next_bank(end) if k else end
        for name in group:
            addr[name], end = end, end + size[name]
    if end > limits.COMPUTE_TILE_MEMORY:
        raise ValueError(f"tiling N={g.tile_n}, M={g.tile_m}, T={g.tile_t} does not fit the "
                         f"published design's bank placement: it ends at {end} B of "
                         f"{limits.COMPUTE_TILE_MEMORY}")
    return addr


def _build_compute(b: _Builder) -> None:
    g, s = b.g, _geometry_sizes(b.g)
    try:
        place: dict[str, int | None] = dict(place_compute_buffers(g))
    except ValueError:  # left to the allocator; the validator reports what does not fit
        place = dict.fromkeys(("a0", "a1", "b0", "b1", "acc", "ua", "ub"))
    block = _sample_block_shape(g)
    for col in range(g.cols):
        for row in range(g.rows):
            t = compute_tile(row, col)
            tag = f"c{col}_r{row}"
            a = tuple(b.buffer(f"a_buf{k}_{tag}", t, INT8, (g.tile_n, g.tile_t, *block),
                               place[f"a{k}"]) for k in range(2))
            bb = tuple(b.buffer(f"b_buf{k}_{tag}", t, INT8, (g.tile_m, g.tile_t, *block),
                                place[f"b{k}"]) for k in range(2))
            acc = b.buffer(f"acc_{tag}", t, INT32, (g.tile_n, g.tile_m, 2, BLOCK, BLOCK),
                           place["acc"])
            unpacked = None
            if g.ci4:
                unpacked = tuple(b.buffer(f"{what}_unpacked_{tag}", t, INT8,
                                          (rows, g.tile_t, 2, BLOCK, BLOCK), place[f"u{what}"])
                                 for what, rows in (("a", g.tile_n), ("b", g.tile_m)))
            a_prod, a_cons = b.lock(f"a_prod_{tag}", t, 2), b.lock(f"a_cons_{tag}", t, 0)
            b_prod, b_cons = b.lock(f"b_prod_{tag}", t, 2), b.lock(f"b_cons_{tag}", t, 0)
            acc_prod, acc_cons = b.lock(f"acc_prod_{tag}", t, 1), b.lock(f"acc_cons_{tag}", t, 0)
            for port_ch, bufs, p, c, what in ((COMPUTE_A_S2MM, a, a_prod, a_cons, "a"),
                                              (COMPUTE_B_S2MM, bb, b_prod, b_cons, "b")):
                b.chain(Port(t, S2MM, port_ch), [
                    dict(name=f"{what}_in_buf{k}_{tag}", buffer=bufs[k], offset=0,
                         length=b.buffer_len(bufs[k]), acquire=LockOp(p, 1),
                         release=LockOp(c, 1)) for k in range(2)])
            b.chain(Port(t, MM2S, COMPUTE_OUT_MM2S), [
                dict(name=f"acc_out_{tag}", buffer=acc, offset=0, length=s["acc"],
                     acquire=LockOp(acc_cons, 1), release=LockOp(acc_prod, 1))])
            b.cores.append(CoreProgram(
                tile=t, acc=acc, a=a, b=bb,
                acc_acquire=LockOp(acc_prod, 1), acc_release=LockOp(acc_cons, 1),
                a_acquire=LockOp(a_cons, 1), a_release=LockOp(a_prod, 1),
                b_acquire=LockOp(b_cons, 1), b_release=LockOp(b_prod, 1),
                calls_per_integration=g.npacket * s["ncalls"],
                kernel=KERNEL_FUNC_CI4[g.nibble_order] if g.ci4 else KERNEL_FUNC,
                unpacked=unpacked))
            b.flows.append(Flow(Port(t, MM2S, COMPUTE_OUT_MM2S),
                                (Port(out_mem_tile(col), S2MM, MEM_OUT_S2MM_BASE + row),)))


def _build_output(b: _Builder) -> None:
    g, s = b.g, _geometry_sizes(b.g)
    for col in range(g.cols):
        mt = out_mem_tile(col)
        buf = b.buffer(f"mem_out_c{col}", mt, INT32,
                       (g.rows, g.tile_n, g.tile_m, 2, BLOCK, BLOCK))
        # Join: each row's S2MM takes one slot; the MM2S waits for all rows.
        prod_ = b.lock(f"mem_out_c{col}_prod", mt, g.rows)
        cons = b.lock(f"mem_out_c{col}_cons", mt, 0)
        for row in range(g.rows):
            b.chain(Port(mt, S2MM, MEM_OUT_S2MM_BASE + row), [
                dict(name=f"mem_out_c{col}_in_r{row}", buffer=buf, offset=row * s["acc"],
                     length=s["acc"], acquire=LockOp(prod_, 1), release=LockOp(cons, 1))])
        b.chain(Port(mt, MM2S, MEM_OUT_MM2S), [
            dict(name=f"mem_out_c{col}_out", buffer=buf, offset=0, length=g.rows * s["acc"],
                 acquire=LockOp(cons, g.rows), release=LockOp(prod_, g.rows))])
        b.flows.append(Flow(Port(mt, MM2S, MEM_OUT_MM2S),
                            (Port(out_shim_tile(col), S2MM, SHIM_OUT_S2MM),)))


def _build_tasks(b: _Builder) -> None:
    g, s = b.g, _geometry_sizes(b.g)
    packet_stride = g.npu_block * g.payload_bytes

    def read_dims(nstreams: int) -> tuple[Dim, ...]:
        # channel (walked as BD iterations) x packet x stream x one channel's samples
        return (Dim(g.nchan_pkt, g.chan_bytes), Dim(g.npacket, packet_stride),
                Dim(nstreams, g.payload_bytes), Dim(g.chan_bytes, 1))

    half_streams = BLOCK * g.tile_n // 2
    for row in range(g.rows):
        for h in range(2):
            shim = a_shim_tile(row, h)
            b.tasks.append(ShimTask(
                name=f"in_a_r{row}_h{h}", port=Port(shim, MM2S, SHIM_A_MM2S), host="a",
                offset=(2 * row + h) * half_streams * g.payload_bytes,
                dims=read_dims(half_streams), repeat_count=g.nchan_pkt - 1))
    b_streams = BLOCK * g.tile_m
    for col in range(g.cols):
        b.tasks.append(ShimTask(
            name=f"in_b_c{col}", port=Port(b_shim_tile(col), MM2S, SHIM_B_MM2S), host="b",
            offset=col * b_streams * g.payload_bytes, dims=read_dims(b_streams),
            repeat_count=g.nchan_pkt - 1))
    col_words = g.rows * s["acc"]
    for col in range(g.cols):
        b.tasks.append(ShimTask(
            name=f"out_c{col}", port=Port(out_shim_tile(col), S2MM, SHIM_OUT_S2MM), host="out",
            offset=col * col_words,
            dims=(Dim(g.nchan_pkt, g.cols * col_words), Dim(g.rows * g.tile_n, s["acc_row"]),
                  Dim(s["acc_row"], 1)),
            wait=True))


def host_args(g: Geometry) -> tuple[HostArg, ...]:
    """Runtime-sequence arguments in order: a, b (int8 inputs; ci4: packed bytes), out
    (int32)."""
    inp = (g.npacket, g.npu_block, g.payload_bytes)
    out = (g.nchan_pkt, g.cols, g.rows, g.tile_n, g.tile_m, 2, BLOCK, BLOCK)
    return (HostArg("a", INT8, inp), HostArg("b", INT8, inp), HostArg("out", INT32, out))


def build_plan(g: Geometry, *, validate: bool = True) -> NpuPlan:
    """The NPU plan for ``g`` (checked against the hardware limits unless ``validate=False``)."""
    b = _Builder(g)
    _build_a_path(b)
    _build_b_path(b)
    _build_compute(b)
    _build_output(b)
    _build_tasks(b)
    plan = NpuPlan(geometry=g, buffers=tuple(b.buffers), locks=tuple(b.locks),
                   chains=tuple(b.chains), flows=tuple(b.flows), cores=tuple(b.cores),
                   host_args=host_args(g), tasks=tuple(b.tasks))
    if validate:
        validate_plan(plan)
    return plan


def reads_diagonal_once(g: Geometry) -> bool:
    """Whether ``g``'s plan has a single-read variant for diagonal block pairs
    (:func:`single_read_diagonal`): the A and B shim reads coincide when N = 2M and there are
    twice as many columns as rows (the published 4 x 8 array with N = 8, M = 4; the small test
    geometry)."""
    return g.tile_n == 2 * g.tile_m and g.cols == 2 * g.rows


def single_read_diagonal(plan: NpuPlan) -> NpuPlan:
    """The plan for a diagonal block pair (A = B, one input buffer passed twice): host memory
    read once instead of twice.

    Shim tile k's A task reads streams ``4N k .. 4N (k+1)`` (half of row k // 2's A streams)
    and column k's B task reads streams ``8M k .. 8M (k+1)`` with the same pattern; when
    N = 2M and there are twice as many columns as rows these are the same bytes in the same
    order, and the B memory tile writes them with the same pattern as the A memory tile. So
    the B tasks go and each A task's flow fans out to the B memory tile of column k as well
    (a one-to-many static flow); the ``b`` argument is not read. Everything below the memory
    tiles is unchanged. The build writes it as a second design beside the main one
    (``design_diagonal.mlir``, validated as every plan is) and the NPU backend runs it on each
    diagonal pair; the emulator checks it bit for bit with the ``b`` argument full of garbage
    (``tests/npu/host/test_emulator.py``).
    """
    g = plan.geometry
    if not reads_diagonal_once(g):
        raise ValueError(f"A and B shim reads coincide only for N = 2M and cols = 2 rows; got "
                         f"N={g.tile_n}, M={g.tile_m}, {g.rows} x {g.cols}")
    extra = {Port(b_shim_tile(col), MM2S, SHIM_A_MM2S):
             Port(b_mem_tile(col), S2MM, b_mem_channel(col)) for col in range(g.cols)}
    flows = tuple(Flow(f.source, f.dests + (extra[f.source],)) if f.source in extra else f
                  for f in plan.flows if f.source.channel != SHIM_B_MM2S
                  or f.source.tile.kind != "shim")
    tasks = tuple(t for t in plan.tasks if not (t.port.direction == MM2S
                                                and t.port.channel == SHIM_B_MM2S))
    return plan.replace(flows=flows, tasks=tasks)
