"""UVH5 append cost: the writer's crash-safe commit order against HDF5's own order, measured in
the same run; prints one JSON object.

Each trial writes ``--ndump`` dumps of ``--nant`` antennas x ``--nchan`` channels into a fresh
file (in ``--dir``, default a temporary directory) and times every ``append`` (conversion, HDF5,
commit). The peer ("hdf5_order") differs in ``StagedFile._in_place``: committed bytes are
overwritten in the order HDF5 wrote them, one buffered pwrite each (the order before the atomic
publish write, and none of them a direct write: not crash safe). So the ratio is what crash
safety costs: the commit order and the direct publishing write (``StagedFile._publish``, where
the filesystem has direct I/O). Trials alternate between the two. Reported per order: median
and mean milliseconds per append over all trials (the first dump of each file excluded: it
creates the chunk indexes), the median milliseconds of the commit alone (part of the append),
and the bytes the commit writes in place per dump.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from results_file import add_option, emit

from xengine_block.array import default_array
from xengine_block.bench.machine import machine_identity
from xengine_block.outputs.site import site_info
from xengine_block.outputs.staged_file import StagedFile
from xengine_block.outputs.uvh5 import UVH5Writer


def hdf5_order(self: StagedFile, old: int) -> list[tuple[int, bytes]]:
    return [(off, data[:old - off]) for off, data in self._writes if off < old]


def trial(directory: Path, nant: int, nchan: int, ndump: int, order) -> tuple[list, list, list]:
    """Seconds per append, seconds per commit and in-place bytes per commit, for one file."""
    site = site_info(default_array(nant))
    nbl = 2 * nant * (2 * nant + 1) // 2
    rng = np.random.default_rng(1)
    tri = rng.integers(-1000, 1000, (nchan, nbl, 2)).astype(np.int64)
    valid = np.full((1, nbl), 960)
    path = directory / "bench.uvh5"
    in_place_bytes: list[int] = []
    plain, commit, publish = StagedFile._in_place, StagedFile.commit, StagedFile._publish
    commit_s: list[float] = []

    def timed(self: StagedFile) -> None:
        t0 = time.perf_counter()
        commit(self)
        commit_s.append(time.perf_counter() - t0)

    def counted(self: StagedFile, old: int) -> list[tuple[int, bytes]]:
        writes = (order or plain)(self, old)
        in_place_bytes.append(sum(len(d) for _, d in writes))
        return writes

    StagedFile._in_place, StagedFile.commit = counted, timed
    if order is not None:  # the peer writes as before: buffered, no direct publishing write
        StagedFile._publish = lambda self, data, offset: False
    try:
        times = []
        with UVH5Writer(path, site, 1e8 + 1e4 * np.arange(nchan), 1e4, 960,
                        overwrite=True) as w:
            for i in range(ndump):
                t0 = time.perf_counter()
                w.append(tri, valid, 960, 1.8e9 + i, 1.0)
                times.append(time.perf_counter() - t0)
    finally:
        StagedFile._in_place, StagedFile.commit, StagedFile._publish = plain, commit, publish
    path.unlink()
    # past creation and the first dump, before close
    return times[1:], commit_s[2:-1], in_place_bytes[2:-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nant", type=int, default=128)
    ap.add_argument("--nchan", type=int, default=9)
    ap.add_argument("--ndump", type=int, default=30)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=None)
    add_option(ap)
    a = ap.parse_args()
    orders = {"atomic_publish": None, "hdf5_order": hdf5_order}
    times: dict[str, list] = {k: [] for k in orders}
    commits: dict[str, list] = {k: [] for k in orders}
    in_place: dict[str, list] = {k: [] for k in orders}
    with tempfile.TemporaryDirectory(dir=a.dir) as tmp:
        for _ in range(a.trials):
            for name, order in orders.items():
                t, c, b = trial(Path(tmp), a.nant, a.nchan, a.ndump, order)
                times[name] += t
                commits[name] += c
                in_place[name] += b
    out = {"nant": a.nant, "nchan": a.nchan, "ndump": a.ndump, "trials": a.trials,
           "machine": machine_identity()}
    for name in orders:
        ms = np.array(times[name]) * 1e3
        out[name] = {"median_ms_per_append": round(float(np.median(ms)), 3),
                     "mean_ms_per_append": round(float(ms.mean()), 3),
                     "median_ms_per_commit": round(float(np.median(commits[name])) * 1e3, 3),
                     "in_place_bytes_per_commit": int(np.median(in_place[name]))}
    out["ratio_median"] = round(out["atomic_publish"]["median_ms_per_append"]
                                / out["hdf5_order"]["median_ms_per_append"], 3)
    emit("bench_uvh5", out, a, indent=None)


if __name__ == "__main__":
    main()
