"""What input health and RFI flagging cost beside the X-engine; prints one JSON object.

- **Saturation counts**: the native backend correlating a GUPPI-like ``[ant][chan][time][pol]``
  layout (its layout pass) and our packet frames (the live path) at S = 256 and the published
  design's 9 channels, with and without counting the samples at the quantiser's extremes,
  timed in alternation (best of ``--repeat``): the count's share of the X-engine's time.
- **Judging**: the statistics and states of one dump (``dump_stats`` and ``judge``: numpy on
  the triangle) against the X-engine's time for that dump (``--dump-spectra``).
- **AOFlagger**: the generic strategy over ``--rfi-dumps`` dumps of ``--rfi-nant`` antennas x
  ``--rfi-nchan`` channels, as reprocessing runs it: seconds per dump and per baseline-dump.

``health_share`` = (counting's extra time + judging) / the X-engine's time, per dump. Times
are CPU seconds (the X-engine's threads' sum; the judging's one thread), least of
``--repeat``: on a shared machine time slicing inflates wall time, not CPU time.
"""

from __future__ import annotations

import argparse
import functools
import time

import numpy as np
from results_file import add_option, emit

from xengine_block.backends.base import BackendUnavailable
from xengine_block.backends.native import NativeBackend
from xengine_block.geometry import Geometry
from xengine_block.health.inputs import auto_index, dump_stats, judge
from xengine_block.sample_layout import SampleLayout


def best(fn, repeat: int) -> float:
    """Least CPU seconds of this thread over ``repeat`` calls (numpy's judging: one thread)."""
    out = []
    for _ in range(repeat):
        t0 = time.thread_time()
        fn()
        out.append(time.thread_time() - t0)
    return min(out)


def counting(nstream: int, nchan: int, nspec: int, repeat: int, nthreads: int | None,
             isa: str) -> dict:
    """The X-engine's seconds for ``nspec`` spectra with and without the extremes count, on
    the GUPPI-like layout and on our frames."""
    g = Geometry(nstream=nstream, nchan=nchan, npacket=nspec // 480)
    backend = NativeBackend(g, isa=isa, nthreads=nthreads)
    rng = np.random.default_rng(0)
    nant = nstream // 2
    out = {"isa": backend.isa, "nthreads": backend.nthreads}
    guppi = rng.integers(-128, 128, (nant, nchan, nspec, 2, 2), dtype=np.int8)
    lay = SampleLayout.from_axes([("station", nant), ("freq", nchan), ("fine_time", nspec),
                                  ("pol", 2), ("reim", 2)])
    frames = rng.integers(-128, 128, (g.npacket, *g.frame_shape), dtype=np.int8)
    packet = SampleLayout.packet(g)
    res = backend.new_output()
    for name, data, layout in (("layout", guppi, lay), ("frames", frames, packet)):
        ext = np.zeros(nstream, np.int64)
        plain = functools.partial(backend.correlate_layout, data, layout, out=res)
        counted = functools.partial(backend.correlate_layout, data, layout, out=res,
                                    extremes=ext)
        t_plain, t_count = [], []
        for _ in range(repeat):  # alternating; the threads' CPU seconds (no time slicing)
            plain()
            t_plain.append(backend.last_cpu_seconds)
            counted()
            t_count.append(backend.last_cpu_seconds)
        a, b = min(t_plain), min(t_count)
        out[name] = {"xengine_cpu_s": round(a, 5), "with_counts_cpu_s": round(b, 5),
                     "count_share": round((b - a) / a, 4)}
    backend.close()
    return out


def judging(nstream: int, nchan: int, nspec: int, repeat: int) -> float:
    """Seconds to judge one dump of the packed triangle."""
    rng = np.random.default_rng(1)
    nbl = nstream * (nstream + 1) // 2
    tri = rng.integers(-(1 << 20), 1 << 20, (nchan, nbl, 2)).astype(np.int64)
    autos = auto_index(nstream)
    tri[:, autos, 0] = nspec * 200
    tri[:, autos, 1] = 0
    valid = np.full(nchan, nspec)
    ext = np.zeros(nstream, np.int64)
    parts = np.full(nstream, 2 * nchan * nspec)
    return best(lambda: judge(dump_stats(tri, valid, nstream, ext, parts)), repeat)


def aoflagger(nant: int, nchan: int, ndump: int) -> dict | None:
    try:
        from xengine_block.health.rfi import AOFlaggerRfi
        flagger = AOFlaggerRfi()
    except Exception as exc:  # noqa: BLE001 - reported, not fatal
        return {"error": str(exc)}
    nstream = 2 * nant
    nbl = nstream * (nstream + 1) // 2
    rng = np.random.default_rng(2)
    vis = np.rint(rng.standard_normal((ndump, nchan, nbl, 2)) * 1e4).astype(np.int64)
    t0 = time.perf_counter()
    flags = flagger.flag(vis, 1000)
    s = time.perf_counter() - t0
    return {"nant": nant, "nchan": nchan, "ndump": ndump, "seconds": round(s, 3),
            "ms_per_dump": round(1e3 * s / ndump, 2),
            "us_per_baseline_dump": round(1e6 * s / ndump / nbl, 2),
            "flagged_fraction": round(float(flags.mean()), 5)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nstream", type=int, default=256)
    ap.add_argument("--nchan", type=int, default=9)
    ap.add_argument("--dump-spectra", type=int, default=65280,
                    help="spectra per dump (default: the published design's P = 136 packets)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--nthreads", type=int, default=None)
    ap.add_argument("--isas", default="auto,avx2",
                    help="native paths to measure, comma-separated (those not runnable here "
                         "are left out with the reason)")
    ap.add_argument("--rfi-nant", type=int, default=32)
    ap.add_argument("--rfi-nchan", type=int, default=64)
    ap.add_argument("--rfi-dumps", type=int, default=32)
    add_option(ap)
    a = ap.parse_args()
    judge_s = judging(a.nstream, a.nchan, a.dump_spectra, a.repeat)
    out = {"S": a.nstream, "nchan": a.nchan, "dump_spectra": a.dump_spectra,
           "judge_cpu_s_per_dump": round(judge_s, 5), "per_isa": {}}
    for isa in a.isas.split(","):
        try:
            counts = counting(a.nstream, a.nchan, a.dump_spectra, a.repeat, a.nthreads, isa)
        except BackendUnavailable as exc:
            out["per_isa"][isa] = {"error": str(exc)}
            continue
        for name in ("layout", "frames"):
            c = counts[name]
            c["health_share"] = round(
                (c["with_counts_cpu_s"] - c["xengine_cpu_s"] + judge_s) / c["xengine_cpu_s"], 4)
        out["per_isa"][counts["isa"]] = counts
    out["aoflagger"] = aoflagger(a.rfi_nant, a.rfi_nchan, a.rfi_dumps)
    emit("bench_health", out, a)


if __name__ == "__main__":
    main()
