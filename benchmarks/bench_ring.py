"""Ring throughput against numpy memcpy, measured in the same run; prints one JSON object.

Frames of 2,211,840 bytes (one capture frame: 256 streams x 9 channels x 960 bytes) go through
the ring: the writer (main thread) reserves, copies a frame in and commits; one reader thread
acquires, checksums every byte (a uint64 sum, vectorised) and releases. The peer does the same
work with numpy alone: copy each frame into a buffer of the ring's size, then checksum it.
Rates are payload bytes moved per second, in Gb/s (1e9 bits/s); ``ratio`` = ring / memcpy.
The ring is sized the way a pipeline sizes it (reader's gulp x buffer factor, Bifrost default 3),
so spans do cross the wrap point and the ghost-region copies are included.
"""

from __future__ import annotations

import argparse
import threading
import time

import numpy as np
from results_file import add_option, emit

from xengine_block.runtime.ring import Ring

FRAME_NBYTE = 2_211_840


def checksum(frames: np.ndarray) -> int:
    """Reads every byte: the sum of the data as uint64 words (wrapping)."""
    return int(frames.reshape(-1).view(np.uint64).sum())


def header() -> dict:
    return {"name": "bench", "time_tag": 0,
            "_tensor": {"dtype": "u8", "shape": [-1, FRAME_NBYTE]}}


def run_ring(sources: list[np.ndarray], nframe: int, gulp: int, buffer_factor: float,
             buffer_nframe: int | None) -> tuple:
    """Seconds to move nframe frames writer -> ring -> reader, and the reader's checksum."""
    ring = Ring(name="bench")
    result = {}
    opened = threading.Event()

    def reader() -> None:
        with ring.open_earliest_sequence(guarantee=True) as iseq:
            iseq.resize(gulp, buffer_nframe, buffer_factor)
            opened.set()
            total = 0
            for ispan in iseq.read(gulp):
                total += checksum(ispan.data)
            result["checksum"] = total

    t = threading.Thread(target=reader)
    with ring.begin_writing() as w:
        oseq = w.begin_sequence(header(), gulp)
        t.start()
        opened.wait()
        t0 = time.perf_counter()
        for i in range(0, nframe, gulp):
            with oseq.reserve(gulp) as ospan:
                np.copyto(ospan.data, sources[(i // gulp) % len(sources)])
                ospan.commit(gulp)
        oseq.end()
    t.join()
    return time.perf_counter() - t0, result["checksum"], ring.total_bytes


def run_memcpy(sources: list[np.ndarray], nframe: int, gulp: int, buffer_nbyte: int) -> tuple:
    """The same copies and checksums with numpy alone, into a ring-sized buffer."""
    slots = max(buffer_nbyte // (gulp * FRAME_NBYTE), 1)
    dst = np.empty((slots, gulp, FRAME_NBYTE), np.uint8)
    total = 0
    t0 = time.perf_counter()
    for k in range(nframe // gulp):
        slot = dst[k % slots]
        np.copyto(slot, sources[k % len(sources)])
        total += checksum(slot)
    return time.perf_counter() - t0, total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nframe", type=int, default=240, help="frames per timed run")
    ap.add_argument("--gulp", type=int, default=1, help="frames per span")
    ap.add_argument("--buffer-factor", type=float, default=3.0, help="ring size in gulps")
    ap.add_argument("--buffer-nframe", type=int, default=None,
                    help="ring size in frames instead (not a multiple of --gulp: spans wrap)")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs; the best is reported")
    add_option(ap)
    args = ap.parse_args()
    nframe = args.nframe - args.nframe % args.gulp
    rng = np.random.default_rng(0)
    sources = [rng.integers(0, 256, (args.gulp, FRAME_NBYTE), np.uint8) for _ in range(4)]
    expected = sum(checksum(sources[k % 4]) for k in range(nframe // args.gulp))
    ring_s, memcpy_s = [], []
    for _ in range(args.repeat):
        seconds, total, ring_nbyte = run_ring(sources, nframe, args.gulp, args.buffer_factor,
                                              args.buffer_nframe)
        assert total % 2**64 == expected % 2**64, "ring delivered different data"
        ring_s.append(seconds)
        seconds, total = run_memcpy(sources, nframe, args.gulp, ring_nbyte)
        assert total % 2**64 == expected % 2**64
        memcpy_s.append(seconds)
    nbit = nframe * FRAME_NBYTE * 8
    ring_gbps, memcpy_gbps = nbit / min(ring_s) / 1e9, nbit / min(memcpy_s) / 1e9
    emit("bench_ring", {
        "ring_gbps": round(ring_gbps, 2), "memcpy_gbps": round(memcpy_gbps, 2),
        "ratio": round(ring_gbps / memcpy_gbps, 3),
        "frame_nbyte": FRAME_NBYTE, "nframe": nframe, "gulp_nframe": args.gulp,
        "buffer_factor": args.buffer_factor, "ring_nbyte": ring_nbyte,
        "meets_half_memcpy": ring_gbps >= memcpy_gbps / 2,
        "reader": "one thread, uint64 checksum of every byte; peer does copy + checksum",
        "unit": "Gb/s (1e9 bit/s of frame payload)", "best_of": args.repeat,
    }, args, indent=None)


if __name__ == "__main__":
    main()
