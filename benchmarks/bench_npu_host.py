"""NPU host loop on the SIMULATED device at the published geometry: does the host keep the NPU
busy?

The simulated device (``xengine_block/npu/host/simdevice.py``) stands in for pyxrt: it holds one
process-wide lock over ``run.wait`` / ``bo.sync`` / ``kernel(...)`` (pyxrt keeps the GIL
through them) and executes runs one at a time on its own thread from the kernel call. Here it
runs in timing mode: each run takes the device time the performance model predicts for its
design (``xengine npu-model``: the main design, and the design reading a diagonal pair's input
once) and each input sync the model's host sync time, and no bytes move; everything else is
the backend's real host work (the launch thread's polls, the output syncs, the placement in C,
Python's threads). Frames live in ``allocate_host`` memory (the zero-copy path of S = 256).

- ``npu_idle_fraction``: share of the time from the first run to the last that the device had
  no run executing, i.e. waited for the host; the model's figure for the same schedule beside
  it (``model_npu_idle_fraction``);
- ``model_without``: the model's idle fraction of the previous loop (each output placed on the
  launch thread before the next run), for comparison;
- ``exact``: one call of the published design (P = 2 packets) through the same host loop on
  the simulated device computing with the plan emulator (the diagonal design, its unused B
  argument never read), compared bit for bit with the int64 reference.

The simulation stops only pyxrt calls, not other Python work, so the idle fraction is a lower
bound of what a real device would see; the real figure needs the device. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np
from results_file import add_option, emit

from xengine_block.backends.npu import NpuBackend, predicted
from xengine_block.frames import frames_to_natural
from xengine_block.geometry import PUBLISHED
from xengine_block.npu.host.simdevice import SimulatedXrt, write_simulated_build
from xengine_block.npu.model.perfmodel import HOST, Prediction, predict
from xengine_block.reference import reference_triangle


def timing_device(pred: Prediction) -> tuple[SimulatedXrt, dict]:
    """The simulated device timed as the model predicts the published geometry (``pred``)."""
    main, *rest = pred.timings
    kernel_s_of = {"main": main[0].device_s}
    if rest:
        kernel_s_of["diagonal"] = rest[0][0].device_s
    sync_s_per_mib = 2**20 / HOST.sync_bytes_per_s
    model = {"msps": pred.msps, "npu_idle_fraction": pred.idle_fraction,
             "kernel_s": kernel_s_of, "sync_s_per_mib": sync_s_per_mib}
    return SimulatedXrt(compute=False, kernel_s_of=kernel_s_of,
                        sync_s_per_mib=sync_s_per_mib), model


def previous_idle(pred: Prediction) -> float:
    """The model's idle fraction (of ``pred``) with each output placed on the launch thread."""
    return predict(pred.base_plan, pred.device,
                   pred.schedule.replace(place="launch")).idle_fraction


def run_loop(pred: Prediction, root: str, ncalls: int, nring: int) -> dict:
    g = PUBLISHED
    xrt, model = timing_device(pred)
    backend = NpuBackend(g, xrt=xrt, build_dir=root, nring=nring)
    try:
        size = g.npacket * g.frame_bytes
        memory = backend.allocate_host(nring * size)
        frames = [memory[k * size:(k + 1) * size].view(np.int8).reshape(g.npacket,
                                                                          *g.frame_shape)
                  for k in range(nring)]
        backend.correlate(frames[0])  # warm up (index arrays, threads)
        since = time.perf_counter()
        jobs = [backend.submit(frames[k % nring]) for k in range(ncalls)]
        for job in jobs:
            job.result(120)
        wall = time.perf_counter() - since
        return {"npu_idle_fraction": xrt.idle_fraction(since), "seconds_per_call": wall / ncalls,
                "msps": g.nchan * g.npacket * g.nspectra_pkt * ncalls / wall / 1e6,
                "zero_copy_calls": backend.stats["zero_copy_calls"],
                "diagonal_single_read_calls": backend.stats["diagonal_single_read_calls"],
                "model": model}
    finally:
        backend.close()


def exact_check(root: str) -> dict:
    """One published-design call of P = 2 through the host loop, emulated, against the
    reference."""
    g = PUBLISHED.replace(npacket=2)
    write_simulated_build(root, g)
    xrt = SimulatedXrt()
    backend = NpuBackend(g, xrt=xrt, build_dir=root)
    try:
        frames = np.random.default_rng(51).integers(-128, 128, (g.npacket, *g.frame_shape),
                                                    dtype=np.int8)
        got = backend.correlate(frames)
        want = reference_triangle(frames_to_natural(frames, g))
        return {"geometry": f"published, P = {g.npacket}", "bit_exact": bool(
            np.array_equal(got, want)), "diagonal_runs": xrt.counters["diagonal_runs"]}
    finally:
        backend.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ncalls", type=int, default=60)
    ap.add_argument("--nring", type=int, default=4)
    ap.add_argument("--no-exact", action="store_true", help="skip the emulated exact call")
    add_option(ap)
    a = ap.parse_args()
    pred = predicted(PUBLISHED)
    with tempfile.TemporaryDirectory() as root:
        write_simulated_build(root, PUBLISHED)
        ours = run_loop(pred, root, a.ncalls, a.nring)
        exact = None if a.no_exact else exact_check(root)
    emit("bench_npu_host", {
        "benchmark": "npu_host_loop_simulated", "device": "SIMULATED (timing from the model)",
        "geometry": "published (S = 256, 9 channels, P = 136)", "ncalls": a.ncalls,
        "nring": a.nring, "npu_idle_fraction": ours["npu_idle_fraction"],
        "model_npu_idle_fraction": ours["model"]["npu_idle_fraction"],
        "model_npu_idle_fraction_place_on_launch": previous_idle(pred),
        "results": {"ours": ours}, "exact": exact}, a)


if __name__ == "__main__":
    main()
