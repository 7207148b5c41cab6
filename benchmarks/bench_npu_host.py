"""NPU host loop on the SIMULATED device: how much sync/compute overlap survives pyxrt's GIL.

pyxrt keeps the GIL for the whole of ``run.wait``, ``bo.sync`` and ``kernel(...)``. The
simulated device (``xengine_block/npu/host/simdevice.py``) holds one process-wide lock over those
calls and models their cost: ``kernel_s`` of device time per run (the device runs on its own
thread from the kernel call) and ``sync_s_per_mib`` of host time per MiB synced, spent holding
the lock. Two host loops run the same calls in the same run:

- ``blocking_wait``: the launch thread calls ``run.wait()`` (the plain way to wait);
  the wait holds the lock for the whole run, so the next entry's sync cannot start until the
  run is over: one call costs about sync + kernel;
- ``polled``: the backend as it is (``run.state()`` polled, sleeping between polls): the sync of
  entry k+1 runs while run k computes: about max(sync, kernel).

``baseline`` is the polled loop with no modelled cost (the emulator's own time, filling and
placing); ``overlap`` = (baseline + sync + kernel - seconds per call) / min(sync, kernel):
0 = none, 1 = full. The
simulation stops only pyxrt calls, not other Python work, so these are upper bounds; the real
numbers need the device. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from typing import Any

import numpy as np
from results_file import add_option, emit

from xengine_block.backends.npu import NpuBackend
from xengine_block.geometry import small_test_geometry
from xengine_block.npu.host.simdevice import SimulatedXrt, write_simulated_build


class BlockingWaitBackend(NpuBackend):
    """The previous host loop: ``run.wait()`` (holds the GIL for the whole run)."""

    def _wait_run(self, run: Any, what: str) -> None:
        state = run.wait()
        if state != self._completed:
            raise RuntimeError(f"NPU run of {what} ended in state {state}")


def seconds_per_call(cls: type[NpuBackend], xrt: SimulatedXrt, root: str, ncalls: int,
                     nring: int) -> float:
    g = small_test_geometry()
    backend = cls(g, xrt=xrt, build_dir=root, nring=nring)
    frames = np.random.default_rng(0).integers(-128, 128, (g.npacket, *g.frame_shape),
                                               dtype=np.int8)
    try:
        backend.correlate(frames)  # warm up (emulator index arrays, threads)
        start = time.perf_counter()
        jobs = [backend.submit(frames) for _ in range(ncalls)]
        for job in jobs:
            job.result(60)
        return (time.perf_counter() - start) / ncalls
    finally:
        backend.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernel-ms", type=float, default=100.0, help="modelled device time per run")
    ap.add_argument("--sync-ms", type=float, default=100.0,
                    help="modelled host time of one input sync (the small design's input BO)")
    ap.add_argument("--ncalls", type=int, default=12)
    ap.add_argument("--nring", type=int, default=4)
    add_option(ap)
    a = ap.parse_args()
    g = small_test_geometry()
    sync_s_per_mib = a.sync_ms / 1000 / (g.npu_in_bytes / 2**20)
    kernel_s, sync_s = a.kernel_ms / 1000, a.sync_ms / 1000
    results = {}
    with tempfile.TemporaryDirectory() as root:
        write_simulated_build(root, g)
        base = seconds_per_call(NpuBackend, SimulatedXrt(), root, a.ncalls, a.nring)
        results["baseline"] = {"seconds_per_call": base}
        for name, cls in (("blocking_wait", BlockingWaitBackend), ("polled", NpuBackend)):
            xrt = SimulatedXrt(kernel_s=kernel_s, sync_s_per_mib=sync_s_per_mib)
            per_call = seconds_per_call(cls, xrt, root, a.ncalls, a.nring)
            serial = base + sync_s + kernel_s
            results[name] = {"seconds_per_call": per_call,
                             "overlap": (serial - per_call) / min(sync_s, kernel_s)}
    emit("bench_npu_host", {"benchmark": "npu_host_loop_simulated", "device": "SIMULATED",
                            "kernel_s": kernel_s, "input_sync_s": sync_s, "ncalls": a.ncalls,
                            "nring": a.nring, "results": results}, a)


if __name__ == "__main__":
    main()
