"""The native NPU ring loop (xengine_block/npu/host/native/npu_ring.cpp) over its fake device.

The XRT build cannot be compiled here (no XRT headers); the same ring code compiled with
-DNPU_RING_FAKE checks the logic: outputs of each block pair in order, entries reused, the
input sync of one entry overlapping the run of another, a hung run turned into an error, and
the GIL free while Python waits in the native code.
"""

import threading

import numpy as np
import pytest

from xengine_block.npu.host.nativering import (
    NativeRing,
    NativeRingHung,
    build_native_ring,
    native_ring_availability,
)

ok, why = native_ring_availability(fake=True)
pytestmark = pytest.mark.skipif(not ok, reason=why)

IN_BYTES, OUT_BYTES = 4096, 64


def ring(config: str, nblock: int = 2, nring: int = 2, timeout_s: float = 10.0) -> NativeRing:
    return NativeRing(build_native_ring(fake=True), xclbin=config, insts="", kernel="MLIR_AIE",
                      device=0, in_bytes=IN_BYTES, out_bytes=OUT_BYTES, nblock=nblock,
                      nring=nring, timeout_s=timeout_s)


def sums(out: np.ndarray) -> list[tuple[int, int, int]]:
    words = out.view(np.int32).reshape(-1, OUT_BYTES // 4)
    return [tuple(int(x) for x in w[:3]) for w in words]


def test_block_pairs_in_order_through_reused_entries():
    r = ring("kernel_us=0,sync_us=0,hang=0")
    rng = np.random.default_rng(1)
    pairs = [(0, 0), (0, 1), (1, 1)]
    try:
        run = 0
        for _ in range(5):  # more jobs than entries
            entry = r.acquire(5)
            blocks = r.inputs(entry)
            for b in blocks:
                b[:] = rng.integers(0, 256, IN_BYTES, dtype=np.uint8)
            out = np.zeros(len(pairs) * OUT_BYTES, np.uint8)
            r.wait(r.submit(entry, pairs, out), 10)
            want = [int(b.view(np.int8).sum(dtype=np.int64)) for b in blocks]
            got = sums(out)
            for (i, j), (sa, sb, n) in zip(pairs, got, strict=True):
                run += 1
                assert (sa, sb, n) == (want[i], want[j], run)
        assert r.counter("runs") == 15 and r.counter("syncs") == 10
    finally:
        r.close()


def test_input_sync_overlaps_a_running_kernel():
    r = ring("kernel_us=50000,sync_us=20000,hang=0")
    try:
        jobs = []
        for _ in range(4):
            entry = r.acquire(5)
            jobs.append(r.submit(entry, [(0, 1)], np.zeros(OUT_BYTES, np.uint8)))
        for job in jobs:
            r.wait(job, 10)
        assert r.counter("syncs_during_run") > 0
    finally:
        r.close()


def test_a_hung_run_is_an_error_and_the_ring_refuses_more():
    r = ring("kernel_us=0,sync_us=0,hang=1", timeout_s=0.2)
    try:
        job = r.submit(r.acquire(5), [(0, 0)], np.zeros(OUT_BYTES, np.uint8))
        with pytest.raises(NativeRingHung, match=r"not complete after 200 ms.*looks hung"):
            r.wait(job, 10)
        with pytest.raises(NativeRingHung):
            r.acquire(1)
    finally:
        r.close()


def test_python_runs_while_waiting_in_native_code():
    r = ring("kernel_us=300000,sync_us=0,hang=0")
    ticks = [0]
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            ticks[0] += 1

    t = threading.Thread(target=tick)
    try:
        job = r.submit(r.acquire(5), [(0, 0)], np.zeros(OUT_BYTES, np.uint8))
        t.start()
        before = ticks[0]
        r.wait(job, 10)  # ctypes releases the GIL for the call
        assert ticks[0] > before
    finally:
        stop.set()
        if t.is_alive():
            t.join()
        r.close()


def test_the_xrt_build_needs_xrt_headers(monkeypatch):
    monkeypatch.setenv("XILINX_XRT", "/nonexistent")
    from xengine_block.npu.host import nativering

    monkeypatch.setattr(nativering, "xrt_root", lambda: None)
    ok, why = native_ring_availability()
    assert not ok and "XRT headers not found" in why
    with pytest.raises(nativering.NativeRingUnavailable, match="XRT headers"):
        build_native_ring()
