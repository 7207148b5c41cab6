"""Measurement Set writer against the UVH5 writer on the same dumps: append rate and memory
over a long run; prints one JSON object.

Each writer runs in a child process of its own (so its memory is its own), appending ``--ndump``
dumps of ``--nant`` antennas x ``--nchan`` channels (the same random integers for both) into a
fresh file in ``--dir`` (default a temporary directory); the children run one after the other,
``--trials`` times each, alternating. Reported per writer: median milliseconds per append (the
first dump of each file excluded: it makes the file's tables), visibility megabytes per second
(the dump's complex64 data), the resident memory after the first tenth of the dumps and after the
last (their difference: growth over the run, flat when the writer streams), and the child's peak
resident memory. The Measurement Set writer's append includes phasing (pyuvdata's apparent
coordinates and UVW for the dump's time). Two Measurement Set writers: the kill-safe one
(two copies of the table, each dump into both: ``ms``) and one table written in place
(``kill_safe=False``, reprocessing's: ``ms_one_table``), the price of surviving a kill.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
from results_file import add_option, emit

from xengine_block.array import default_array
from xengine_block.bench.machine import machine_identity
from xengine_block.outputs.site import site_info


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def run_writer(kind: str, directory: str, nant: int, nchan: int, ndump: int, queue) -> None:
    """Child process: one file of ``ndump`` dumps; puts its timings and memory on ``queue``."""
    options = {}
    if kind.startswith("ms"):
        from xengine_block.outputs.ms import MSWriter as Writer
        path = Path(directory) / "bench.ms"
        options["kill_safe"] = kind == "ms"
    else:
        from xengine_block.outputs.uvh5 import UVH5Writer as Writer
        path = Path(directory) / "bench.uvh5"
    site = site_info(default_array(nant))
    nbl = 2 * nant * (2 * nant + 1) // 2
    rng = np.random.default_rng(1)
    tri = rng.integers(-1000, 1000, (nchan, nbl, 2)).astype(np.int32)
    valid = np.full((1, nbl), 960)
    times, rss_early = [], 0
    w = Writer(path, site, 150e6 + 1e4 * np.arange(nchan), 1e4, 960, overwrite=True, **options)
    for i in range(ndump):
        t0 = time.perf_counter()
        w.append(tri, valid, 960, 1.8e9 + i, 1.0)
        times.append(time.perf_counter() - t0)
        if i == max(ndump // 10, 1):
            rss_early = _rss_bytes()
    w.close()
    queue.put({"times": times[1:], "rss_early": rss_early, "rss_end": _rss_bytes(),
               "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024})


def result_of(proc, queue, kind: str) -> dict:
    """The child's result, or a clear exit if it died without one (no wait for ever)."""
    import queue as queues

    while True:
        try:
            return queue.get(timeout=1.0)
        except queues.Empty:
            if not proc.is_alive():
                raise SystemExit(f"bench_ms: the {kind} writer's process ended without a "
                                 f"result (exit code {proc.exitcode})") from None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nant", type=int, default=64)
    ap.add_argument("--nchan", type=int, default=8)
    ap.add_argument("--ndump", type=int, default=1000)
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--dir", type=Path, default=None)
    add_option(ap)
    a = ap.parse_args()
    ctx = mp.get_context("spawn")  # a fresh interpreter each: memory that is the writer's
    res: dict[str, list[dict]] = {"uvh5": [], "ms": [], "ms_one_table": []}
    with tempfile.TemporaryDirectory(dir=a.dir) as tmp:
        for _ in range(a.trials):
            for kind in res:
                q = ctx.Queue()
                p = ctx.Process(target=run_writer, args=(kind, tmp, a.nant, a.nchan, a.ndump, q))
                p.start()
                res[kind].append(result_of(p, q, kind))
                p.join()
    nbl = a.nant * (a.nant + 1) // 2
    data_mb = nbl * a.nchan * 4 * 8 / 1e6  # complex64, 4 polarisations
    out = {"nant": a.nant, "nchan": a.nchan, "ndump": a.ndump, "trials": a.trials,
           "data_mb_per_dump": round(data_mb, 3), "machine": machine_identity()}
    for kind, runs in res.items():
        ms = np.array([t for r in runs for t in r["times"]]) * 1e3
        out[kind] = {
            "median_ms_per_append": round(float(np.median(ms)), 3),
            "mb_per_s": round(data_mb / (float(np.median(ms)) / 1e3), 2),
            "rss_growth_mb": round(max(r["rss_end"] - r["rss_early"] for r in runs) / 1e6, 2),
            "peak_rss_mb": round(max(r["peak_rss"] for r in runs) / 1e6, 1)}
    out["ratio_ms_to_uvh5_append"] = round(out["ms"]["median_ms_per_append"]
                                           / out["uvh5"]["median_ms_per_append"], 3)
    out["ratio_two_copies_to_one_table"] = round(
        out["ms"]["median_ms_per_append"] / out["ms_one_table"]["median_ms_per_append"], 3)
    emit("bench_ms", out, a, indent=None)


if __name__ == "__main__":
    main()
