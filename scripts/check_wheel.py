"""Checks of an installed wheel, run by ``scripts/check_wheel.sh`` with the fresh venv's Python
from a directory outside the checkout: the package imports from the installation, the
host-compiled AIE kernel builds from the package's own sources into the cache directory and
matches the int64 reference bit for bit, and ``xengine reprocess`` of a small recording made
with the library writes visibilities equal to the reference. Nothing is written into the
installation (numba's cache included) but Python's own ``*.pyc``. Exit status 0 only if every
check passed; each failure says what differed, and the last line counts the checks passed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

#: What each check that passed reported, in order.
PASSED: list[str] = []


def fail(what: str) -> None:
    print(f"check_wheel: FAILED: {what}", file=sys.stderr)
    print(f"check_wheel: {len(PASSED)} passed, 1 failed", file=sys.stderr)
    sys.exit(1)


def passed(what: str) -> None:
    PASSED.append(what)
    print(f"check_wheel: {what}")


def installation_files(package: Path) -> dict[str, float]:
    """Every file of the installed package -> its modification time (directories change when
    Python adds a ``*.pyc``, so only files count)."""
    return {str(p): p.stat().st_mtime for p in package.rglob("*") if p.is_file()}


def check_imports_from_installation(checkout: Path) -> Path:
    import xengine_block

    package = Path(xengine_block.__file__).resolve().parent
    if checkout in package.parents or package.is_relative_to(Path.cwd()):
        fail(f"xengine_block imported from {package}, not from the installation")
    if "site-packages" not in package.parts:
        fail(f"xengine_block imported from {package}, not a site-packages directory")
    passed(f"xengine_block from {package}")
    return package


def kernel_streams(v: np.ndarray) -> np.ndarray:
    """A kernel operand [block, t, reim, stream i, sample k] as natural ``x[S, 1, nspec, 2]``."""
    nblk, t, _, nb, nk = v.shape
    return v.transpose(0, 3, 1, 4, 2).reshape(nblk * nb, 1, t * nk, 2)


def check_source_trees(package: Path) -> None:
    """``kernels/`` and ``aie/`` are inside the installed package and found there."""
    from xengine_block.kernel_sources import TREES, source_dir

    for tree, inside in TREES.items():
        found = source_dir(tree)
        if found != package / inside or not any(found.rglob("*")):
            fail(f"{tree}/ found at {found}, not in the installed package ({package / inside})")
    for need in (source_dir("kernels") / "aie" / "xcorr.cc", source_dir("kernels") / "cpu" /
                 "engine.c", source_dir("aie") / "Makefile", source_dir("aie") / "design.py"):
        if not need.is_file():
            fail(f"{need} is missing from the installed package")
    passed(f"kernels/ and aie/ in the installation ({package / TREES['kernels']}, "
           f"{package / TREES['aie']})")


def check_host_kernel(cache: Path) -> None:
    """One kernel call of the small geometry's tiling on random data and the published
    design's on -128s, against :func:`xengine_block.reference.reference_full` of the same
    streams."""
    from xengine_block.geometry import BLOCK, PUBLISHED, small_test_geometry
    from xengine_block.npu.host.hostkernel import host_kernel, host_kernel_availability
    from xengine_block.reference import reference_full

    usable, why = host_kernel_availability()
    if not usable:
        fail(f"host kernel cannot be built from the wheel: {why}")
    rng = np.random.default_rng(45)
    for g, fill in ((small_test_geometry(), None), (PUBLISHED, -128)):
        n, m, t = g.tile_n, g.tile_m, g.tile_t
        k = host_kernel(n, m, t)
        a = rng.integers(-128, 128, k.a_shape, dtype=np.int8) if fill is None else \
            np.full(k.a_shape, fill, np.int8)
        b = rng.integers(-128, 128, k.b_shape, dtype=np.int8) if fill is None else \
            np.full(k.b_shape, fill, np.int8)
        acc = np.zeros(k.acc_shape, np.int32)
        k.zero(acc)
        k.accumulate(a, b, acc)
        re, im = reference_full(np.concatenate([kernel_streams(a), kernel_streams(b)]))
        na = n * BLOCK
        want = np.stack([re[0, :na, na:], im[0, :na, na:]])  # [reim, A stream, B stream]
        got = acc.astype(np.int64).transpose(2, 0, 3, 1, 4).reshape(2, na, m * BLOCK)
        if not np.array_equal(got, want):
            fail(f"host kernel N{n}M{m}T{t}: {np.count_nonzero(got != want)} values differ "
                 "from the reference")
        passed(f"host kernel N{n}M{m}T{t} exact ({acc.size} values)")
    built = sorted(p.name for p in cache.rglob("*.so"))
    if not built:
        fail(f"no kernel library under the cache directory {cache}")
    passed(f"kernel libraries in the cache: {built}")


def check_reprocess(work: Path) -> None:
    """A pcap recording of 2 dumps (S = 8, 9 channels, P = 2) made with the library,
    reprocessed by ``xengine reprocess``; every visibility equals the reference."""
    import h5py

    from xengine_block.array import default_array
    from xengine_block.capture.recording import write_metadata
    from xengine_block.capture.spead import pcap_sender
    from xengine_block.frames import frames_to_natural
    from xengine_block.geometry import Geometry
    from xengine_block.outputs.baselines import POLARIZATIONS
    from xengine_block.reference import reference_full

    nant, npacket, ndump = 4, 2, 2
    g = Geometry(nstream=2 * nant, nchan=9, npacket=npacket)
    frames = np.random.default_rng(8).integers(-128, 128, (npacket * ndump, *g.frame_shape),
                                               dtype=np.int8)
    rec = work / "obs.pcap"
    write_metadata(rec, default_array(nant), g, sync_time=1.7e9, fs_hz=40e3, freq0_hz=150e6,
                   chan_bw_hz=40e3)
    with pcap_sender(g, rec) as sender:
        sender.send_frames(frames, 0)
    out = work / "out"
    shutil.rmtree(out, ignore_errors=True)  # a reused WORKDIR: no file of an earlier run counts
    proc = subprocess.run(["xengine", "reprocess", str(rec), "-o", str(out), "--backend", "cpu"],
                          capture_output=True, text=True)
    if proc.returncode:
        fail(f"xengine reprocess exited {proc.returncode}: {proc.stdout}{proc.stderr}")
    (uvh5,) = out.glob("*.uvh5")
    with h5py.File(uvh5) as f:
        vis = f["Data/visdata"][()]
        ant1, ant2 = f["Header/ant_1_array"][()], f["Header/ant_2_array"][()]
        times = f["Header/time_array"][()]
        pols = list(f["Header/polarization_array"][()])
        ntimes = int(f["Header/Ntimes"][()])
    if ntimes != ndump:
        fail(f"{uvh5}: {ntimes} dumps, expected {ndump}")
    dump_of_row = np.searchsorted(np.unique(times), times)
    checked = 0
    for d in range(ndump):
        re, im = reference_full(frames_to_natural(frames[d * npacket:(d + 1) * npacket], g))
        k = re + 1j * im  # [C, S, S]: K[j, k] = sum x_j conj(x_k)
        rows = np.flatnonzero(dump_of_row == d)
        if len(rows) != nant * (nant + 1) // 2:
            fail(f"{uvh5}: dump {d} has {len(rows)} baselines, expected {nant * (nant + 1) // 2}")
        for row in rows:
            a1, a2 = int(ant1[row]), int(ant2[row])
            for code, p1, p2 in POLARIZATIONS:  # the convention itself: tests/outputs
                ip = pols.index(code)
                want = k[:, 2 * a2 + p2, 2 * a1 + p1]
                got = vis["r"][row, :, ip].astype(np.int64) + 1j * vis["i"][row, :, ip]
                if not np.array_equal(got, want):
                    fail(f"{uvh5}: dump {d} baseline ({a1}, {a2}) pol {pols[ip]} differs "
                         "from the reference")
                checked += got.size
    passed(f"xengine reprocess exact ({checked} visibilities, {uvh5.name})")


def main() -> None:
    checkout, work = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    cache = Path(os.environ["XENGINE_CACHE_DIR"])
    package = check_imports_from_installation(checkout)
    before = installation_files(package)
    check_source_trees(package)
    check_host_kernel(cache)
    check_reprocess(work)
    after = installation_files(package)
    written = sorted(p for p in after if before.get(p) != after[p] and not p.endswith(".pyc"))
    if written:
        fail(f"files written into the installation: {written}")
    passed("nothing written into the installation but *.pyc")
    print(f"check_wheel: {len(PASSED)} passed, 0 failed")  # each check exits at its failure


if __name__ == "__main__":
    main()
