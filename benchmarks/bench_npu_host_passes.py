"""The NPU backend's host passes, per core, beside a plain copy of the same bytes in the same
run; prints one JSON object (``--write-results``: also to ``benchmarks/results/<cpu class>/``).

The NPU performance model (``xengine_block/npu/model/perfmodel.py``) charges the host for three
passes of our backend that the published design's benchmark did not have; their per-core rates
are this benchmark's figures:

- ``copy``: regrouping ring frames into one stream block's input buffer
  (``hostio.npu_input``, S > 256 or several channel groups); rate in bytes written per second;
- ``ci4_unpack``: ci4 frames unpacked into the int8 input layout (``frames.unpack_frames``);
  rate in bytes of ci4 read per second. The backend sends ci4 packed to the compute tiles and
  does not run this pass; the model prices the host-side alternative with it
  (``ci4_unpacked_on_host``);
- ``place``: one NPU call's output placed into the packed triangle (``BlockPairJob.add``, on
  the launch thread); rate in bytes of NPU output per second.

``memcpy`` (numpy copying the pass's output bytes between two buffers of the same size) runs in
the same rounds, so each ``ratio_to_memcpy`` holds on a loaded machine where the absolute
figures do not. Buffers are larger than the last-level cache. One thread: the backend runs each
pass on one thread.
"""

from __future__ import annotations

import argparse
from functools import partial

import numpy as np
from results_file import add_option, emit

from xengine_block.bench.machine import interleaved_best, machine_identity
from xengine_block.frames import unpack_frames
from xengine_block.geometry import PUBLISHED
from xengine_block.npu.host import hostio
from xengine_block.npu.host.blockpairs import BlockPairJob


def passes(npacket: int) -> dict[str, tuple[int, object, int]]:
    """name -> (bytes the rate counts, the pass as a callable, bytes its memcpy peer moves)."""
    rng = np.random.default_rng(0)
    g512 = PUBLISHED.replace(nstream=512, npacket=npacket)
    frames = rng.integers(-128, 128, (npacket, *g512.frame_shape), dtype=np.int8)
    block = np.empty(hostio.input_shape(g512, npacket), np.int8)
    g4 = PUBLISHED.replace(sample_bits=4, npacket=npacket)
    ci4 = rng.integers(0, 256, (npacket, *g4.frame_shape), dtype=np.uint8).view(np.int8)
    unpacked = np.empty((npacket, *PUBLISHED.frame_shape), np.int8)
    npu_out = rng.integers(-2**20, 2**20, hostio.output_shape(PUBLISHED), dtype=np.int32)

    def place() -> None:
        BlockPairJob(PUBLISHED, PUBLISHED.npacket).add(0, 0, 0, npu_out)

    return {
        "copy": (block.nbytes, lambda: hostio.npu_input(frames, g512, 0, 0, out=block),
                 block.nbytes),
        "ci4_unpack": (ci4.nbytes, lambda: unpack_frames(ci4, g4, out=unpacked),
                       unpacked.nbytes),
        "place": (npu_out.nbytes, place, npu_out.nbytes),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--npacket", type=int, default=16,
                    help="packets per buffer (16: 35 MB per S = 256 block, above any LLC)")
    ap.add_argument("--repeat", type=int, default=5)
    add_option(ap)
    a = ap.parse_args()
    result: dict = {"machine": machine_identity(),
                    "threads": 1, "npacket": a.npacket, "passes": {}}
    for name, (nbytes, run, peer_bytes) in passes(a.npacket).items():
        src = np.ones(peer_bytes, np.uint8)
        memcpy = partial(np.copyto, np.empty_like(src), src)
        run()  # fault the buffers' pages in before timing
        ours, peer = interleaved_best([run, memcpy], a.repeat)
        result["passes"][name] = {"bytes_per_s": nbytes / ours,
                                  "memcpy_bytes_per_s": peer_bytes / peer,
                                  "ratio_to_memcpy": (nbytes / ours) / (peer_bytes / peer)}
    emit("bench_npu_host_passes", result, a, indent=2)


if __name__ == "__main__":
    main()
