"""Hardware limits of the Ryzen AI 300 NPU ("npu2", AIE-ML v2 / AIE2P) that a plan must meet.

Every number the validator checks lives here, once, with where it comes from (the published design
and Xilinx/mlir-aie unless stated). The names are what :class:`PlanError` reports in ``err.limit``,
so a test or a user can tell which rule a plan broke.
"""

from __future__ import annotations

#: Columns of the npu2 array (shim, memory tile and 4 compute tiles each).
ARRAY_COLUMNS = 8
#: Row of the shim (NoC DMA) tiles.
SHIM_ROW = 0
#: Row of the memory tiles.
MEM_ROW = 1
#: First compute-tile row; compute rows are FIRST_COMPUTE_ROW .. FIRST_COMPUTE_ROW + 3.
FIRST_COMPUTE_ROW = 2
#: Compute-tile rows of the array.
COMPUTE_ROWS = 4

#: Compute-tile data memory (8 banks of 8 KiB).
COMPUTE_TILE_MEMORY = 64 * 1024
#: Stack the linker reserves at the base of every compute tile's data memory.
COMPUTE_TILE_STACK = 1024
#: Compute-tile memory banks as 512-bit accesses see them: 4 banks of 16 KiB laid out one
#: after another (8 banks of 8 KiB interleaved in pairs; the published post, "Memory bank
#: conflicts").
#: Two buffers the kernel streams at once in one bank cost a stall per conflicting access.
COMPUTE_TILE_BANK_BYTES = 16 * 1024
BANK_CONFLICT = "BANK_CONFLICT"
BUFFER_OVERLAP = "BUFFER_OVERLAP"
#: Memory-tile capacity.
MEM_TILE_MEMORY = 512 * 1024

#: Buffer descriptors shared by all channels of one tile.
COMPUTE_TILE_BDS = 16
MEM_TILE_BDS = 48
SHIM_TILE_BDS = 16
#: A memory tile's BDs are split by channel parity (mlir-aie AIE2 target model,
#: ``AIETargetModel::isBdChannelAccessible``): even channels use BDs 0-23, odd channels 24-47.
MEM_TILE_BD_PARITY = "MEM_TILE_BD_PARITY"
MEM_TILE_BDS_PER_PARITY = MEM_TILE_BDS // 2

#: DMA channels per direction (S2MM = stream to memory, MM2S = memory to stream).
COMPUTE_TILE_CHANNELS = 2
MEM_TILE_CHANNELS = 6
SHIM_TILE_CHANNELS = 2

#: Address-generation dimensions of one BD: compute tile 3-D, memory tile 4-D; shim 3-D plus
#: the iteration dimension (written as the outermost of 4, walked with ``repeat_count``).
COMPUTE_TILE_BD_DIMS = 3
MEM_TILE_BD_DIMS = 4
SHIM_TILE_BD_DIMS = 4

#: Every BD dimension's size must be < 1024 (de-linearise long runs, e.g. 1920 = 15 x 128).
#: The innermost, contiguous dimension is counted in 32-bit words (an int8 run of 2048 bytes
#: is 512 words); the outer sizes are counts (mlir-aie test/dialect/AIEX/bad_npu_nd.mlir).
BD_DIM_SIZE = 1024
#: DMAs move 32-bit words: offsets, strides and lengths must be multiples of 4 bytes.
BD_ALIGN_BYTES = 4
#: Shim DMA task (runtime sequence) strides, in 32-bit words, for every dimension with a size
#: > 1: [1, 2^20] (``bad_ipu_nd_stride.mlir``: "Stride 1 exceeds the [1:1M] range").
SHIM_STRIDE_WORDS = "SHIM_STRIDE_WORDS"
SHIM_STRIDE_MAX_WORDS = 1 << 20
#: The outermost (iteration / repeat) size of a shim task: [1, 64]
#: (``bad_ipu_nd_repeat.mlir``: "Length 3 exceeds the [1:64] range").
SHIM_ITERATION_SIZE = "SHIM_ITERATION_SIZE"
SHIM_ITERATION_MAX = 64

#: Hardware locks per tile (semaphores with values 0..LOCK_VALUE_MAX).
COMPUTE_TILE_LOCKS = 16
MEM_TILE_LOCKS = 64
LOCK_VALUE_MAX = 63

#: Names used in PlanError.limit for rules that are not a single number.
STATIC_FLOW_ONE_PRODUCER = "STATIC_FLOW_ONE_PRODUCER"
LOCK_PAIRING = "LOCK_PAIRING"
SHIM_REPEAT_COUNT = "SHIM_REPEAT_COUNT"
TILE_IN_ARRAY = "TILE_IN_ARRAY"
BD_IN_BUFFER = "BD_IN_BUFFER"
BD_CHAIN = "BD_CHAIN"
BD_ID = "BD_ID"
FLOW_CONNECTED = "FLOW_CONNECTED"
PING_PONG_PARITY = "PING_PONG_PARITY"
