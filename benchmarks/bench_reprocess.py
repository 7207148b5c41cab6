"""Reprocessing recordings: ``xengine reprocess`` against the bare backend on the same data, and
against BLRI (COSMIC's correlator of multi-antenna GUPPI RAW) on the same file; one JSON object.
Formats: ``guppi`` (GUPPI RAW), ``dada`` (PSRDADA, MeerKAT FBFUSE's ``TAFTP``), ``mwax`` (MWAX
subfiles, one per coarse channel) and ``pcap`` (our F-engine packets as ``xengine record``
writes them); the same keys, BLRI for GUPPI only. A clean pcap recording is correlated in place
(``runs.S*.read``: ``in place``); the same file replayed through the capture (``--replay``,
what any other pcap recording takes) is timed in the same rounds: ``replay_msps``,
``replay_ratio``.

Per format (``FORMATS``: one entry per format; another format is one more entry) and stream
count S, a recording is written, read once so that it is in the page cache, then:

- ``msps``: ``xengine_block.reprocess.jobs.reprocess`` on it, the library call the command
  makes (headers indexed, every integration correlated from the memory map, UVH5 written),
  wall time; samples of every channel per second (docs/design.md, "Measuring": C x spectra / s);
- ``bare_backend_msps``: the same backend's ``correlate_layout`` on the same chunks (same
  layouts, same calls) copied into memory beforehand, correlation time only;
- ``ratio`` = msps / bare_backend_msps: what reading, indexing and writing cost (goal >= 0.8:
  reading must not be what limits reprocessing); ``cpu_ratio``: the same from the process's
  CPU seconds (every thread; least of ``--repeat`` alternating rounds), which other programs
  on a shared machine do not move as they move wall times;
- ``layout_vs_frames``: bare_backend_msps over the same backend on the same samples in our own
  frame layout (``SampleLayout.packet``): what the recording's layout costs the backend's
  layout pass (1: nothing);
- ``writer_cpu_s``: the UVH5 appends of the same dumps alone (file made, every dump appended,
  closed, as ``reprocess`` writes its .partial files: ``kill_safe=False``; one thread's CPU
  seconds): what the output costs, which in ``reprocess`` runs on a
  thread of its own beside the backend's on the same cores (``writer_cpu_over_bare``: its share
  of the bare backend's CPU seconds, wall time x threads);
- ``speedup_vs_blri``: BLRI's ``blri_pycorr`` over ours, wall time, on one file and
  integration (``runs.S64.blri_file``: the 63 MB, 8-block file BLRI's README was timed on;
  where BLRI is installed; S = 64 by default, BLRI's per-baseline numpy loop takes minutes at
  S = 256: ``--blri-all``). Goal >= 50.

The backend uses every core (``auto``: the native backend's threads). Machines are shared:
the bare backend and ``reprocess`` (and the frame-layout run) are timed in alternation, best of
``--repeat`` rounds each, so a slow spell of the machine falls on both; compare the ratios of
one run; the load average is recorded at both ends.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from results_file import add_option, emit

from xengine_block.array import ArrayDescription
from xengine_block.bench.machine import interleaved_best, machine_identity
from xengine_block.outputs.site import site_info
from xengine_block.outputs.uvh5 import UVH5Writer
from xengine_block.readers import open_recording
from xengine_block.readers.arrays import load_array, match_antennas
from xengine_block.readers.guppi import antenna_cards, write_guppi
from xengine_block.reprocess.jobs import ReprocessOptions, reprocess
from xengine_block.reprocess.recording_correlator import RecordingCorrelator
from xengine_block.sample_layout import SampleLayout, to_packet_frames

#: GUPPI cases: S -> (antennas, channels per antenna, NTIME, blocks); integrations of two
#: blocks. 256 MB each (32 blocks: 16 / 32 integrations): a file of a few integrations times
#: the fixed costs of opening it and of making the output file (~20 ms) instead of the
#: reprocessing; BLRI's peer file is separate (``BLRI_BLOCKS``).
GUPPI_SIZES = {64: (32, 16, 3840, 32), 256: (128, 8, 2048, 32)}
#: Blocks of the S = 64 file BLRI is timed on: the file the vendor README timed it on
#: (blri_input_gen -D 32 16 3840 2 -N 8: 63 MB), ours timed on the same file.
BLRI_BLOCKS = 8
QUICK_SIZES = {64: (32, 16, 960, 4), 256: (128, 4, 512, 2)}


def page_cache(path: Path) -> None:
    """Read ``path`` once so that the measured runs read it from memory, after its dirty pages
    have gone to disk (the kernel's writeback of a file just written would otherwise run on
    the measured cores, in some runs and not others)."""
    with open(path, "rb+") as f:
        os.fsync(f.fileno())
        while f.read(1 << 24):
            pass


def array_for(nant: int, seed: int = 0, names: list[str] | None = None,
              numbers: list[int] | None = None) -> ArrayDescription:
    """``nant`` antennas at random places within 500 m (named ``a000``... and numbered from 0
    unless ``names``, ``numbers`` say otherwise)."""
    rng = np.random.default_rng(seed)
    enu = np.round(rng.uniform(-500, 500, (nant, 3)) * [1, 1, 0.01], 3)
    return ArrayDescription("BENCH", 40.8, -121.5, 1000.0,
                            names or [f"a{i:03d}" for i in range(nant)],
                            numbers or list(range(nant)), enu)


def write_telinfo(path: Path, array: ArrayDescription) -> None:
    """The array as a BLRI telinfo YAML (xyz: ECEF offsets from the site)."""
    import yaml

    doc = {"telescope_name": array.telescope_name, "latitude": array.latitude_deg,
           "longitude": array.longitude_deg, "altitude": array.altitude_m,
           "antenna_position_frame": "xyz", "antenna_diameter": 6.0,
           "antennas": [{"name": n, "number": k, "position": p}
                        for n, k, p in zip(array.antenna_names, array.antenna_numbers,
                                           array.antenna_positions.tolist(), strict=True)]}
    path.write_text(yaml.safe_dump(doc))


def guppi_recording(work: Path, nstream: int, sizes: dict,
                    nblock: int | None = None) -> tuple[list[Path], Path, int]:
    """A multi-antenna GUPPI file of S = ``nstream`` (``nblock`` blocks, default the size's);
    (files, array TOML, spectra per integration: two blocks); the array's telinfo YAML for
    BLRI beside the TOML (:func:`telinfo_of`)."""
    nant, nchan, ntime, blocks = sizes[nstream]
    nblock = blocks if nblock is None else nblock
    rng = np.random.default_rng(nstream)
    array = array_for(nant)
    block = rng.integers(-128, 128, (nant, nchan, ntime, 2, 2), dtype=np.int8)
    cards = {"TELESCOP": "BENCH", "OBSFREQ": 1400.0, "OBSBW": 0.5 * nchan, "TBIN": 2e-6,
             "SYNCTIME": 1_700_000_000, "POLS": "xy", "RA_STR": "05:00:00",
             "DEC_STR": "40:00:00", "SRC_NAME": "bench", **antenna_cards(array.antenna_names)}
    path = write_guppi(work / f"bench_s{nstream}_{nblock}.0000.raw",
                       (np.roll(block, k, axis=2) for k in range(nblock)), cards)
    toml = work / f"array_s{nstream}.toml"
    array.write_toml(toml)
    write_telinfo(telinfo_of(toml), array)
    return [path], toml, 2 * ntime


def telinfo_of(toml: Path) -> Path:
    return toml.with_suffix(".telinfo.yaml")


def measure(files: list[Path], fmt: str, toml: Path, nspec: int, work: Path,
            backend: str, repeat: int) -> dict[str, Any]:
    """Ours through reprocess, and the bare backend on the same chunks in memory."""
    for f in files:
        page_cache(f)
    rec = open_recording(files, fmt)
    meta = rec.meta
    nwin = (rec.end - rec.start) // nspec
    samples = meta.nchan * nwin * nspec
    chunks = [c for k in range(nwin)
              for c in rec.chunks(rec.start + k * nspec, rec.start + (k + 1) * nspec)]
    corr = RecordingCorrelator(rec, list(range(meta.nant)), (0, meta.nchan), backend)
    in_ram = [(np.array(c.data), c.layout, c.nframe) for c in chunks]
    b = corr.backend(chunks[0].layout)
    b.correlate_layout(*in_ram[0][:2], nframe=in_ram[0][2])  # warm-up

    def bare() -> None:
        for data, layout, nframe in in_ram:
            corr.backend(layout).correlate_layout(data, layout, nframe=nframe)

    packets = []
    for data, layout, nframe in in_ram:  # the same samples in our frame layout
        g = corr.backend(layout).geometry
        frames, _ = to_packet_frames(data, layout, g, nframe)
        packets.append((frames, SampleLayout.packet(g.replace(npacket=frames.shape[0])),
                        corr.backend(layout)))

    def frames() -> None:
        for f, layout, backend in packets:
            backend.correlate_layout(f, layout)

    name, nthreads = b.name, getattr(b, "nthreads", os.cpu_count())
    runs = ReprocessRuns(files, recording_options(fmt, toml, nspec, backend), work)
    try:
        runs.run()  # warm-up: imports, astropy's time tables, the backend's threads
        frames()
        t_bare, t_frames, t_ours = interleaved_best([bare, frames, runs.run], repeat,
                                                    runs.clean)
        c_bare, c_ours = cpu_best([bare, runs.run], repeat, runs.clean)
    finally:
        runs.clean()
    packets.clear()
    corr.close()
    rec.close()
    in_ram.clear()
    writer = writer_cpu_seconds(meta, toml, nspec, nwin, work)
    msps, bare_msps = samples / t_ours / 1e6, samples / t_bare / 1e6
    return {"S": meta.nstream, "nchan": meta.nchan, "spectra": nwin * nspec,
            "integration_spectra": nspec, "bytes": sum(f.stat().st_size for f in files),
            "backend": name, "nthreads": nthreads, "calls": len(chunks),
            "seconds": t_ours, "bare_seconds": t_bare, "msps": msps,
            "bare_backend_msps": bare_msps, "ratio": msps / bare_msps,
            "frames_seconds": t_frames, "layout_vs_frames": t_frames / t_bare,
            "writer_cpu_s": writer, "writer_cpu_per_dump_ms": 1e3 * writer / nwin,
            "writer_cpu_over_bare": writer / (t_bare * nthreads),
            "cpu_seconds": c_ours, "bare_cpu_seconds": c_bare, "cpu_ratio": c_bare / c_ours}


def cpu_best(fns: list[Callable[[], object]], repeat: int,
             between: Callable[[], object]) -> list[float]:
    """Least CPU seconds of this process (every thread) of each of ``fns`` over ``repeat``
    alternating rounds: what a call costs whatever else the machine runs (its wall time on a
    shared machine is also the others' load), beside the wall-time ratio."""
    best = [float("inf")] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            c0 = time.process_time()
            fn()
            best[i] = min(best[i], time.process_time() - c0)
            between()
    return best


def writer_cpu_seconds(meta: Any, toml: Path, nspec: int, ndump: int, work: Path) -> float:
    """CPU seconds of the UVH5 output of a run alone: ``ndump`` dumps of the recording's
    antennas and channels (per-channel valid counts, as reprocessing writes them) appended to
    a new file, best of three."""
    array = load_array(str(toml))
    sub, _ = match_antennas(meta, array, "")
    nbl = meta.nstream * (meta.nstream + 1) // 2
    tri = np.random.default_rng(0).integers(-2**20, 2**20, (meta.nchan, nbl, 2))
    valid = np.broadcast_to(np.full(meta.nchan, nspec)[:, None], (meta.nchan, nbl))
    path = work / "writer_only.uvh5"

    def write() -> float:
        c0 = time.thread_time()
        with UVH5Writer(path, site_info(sub), meta.freqs_hz, meta.chan_bw_hz, nspec,
                        sample_bits=meta.sample_bits, overwrite=True, kill_safe=False) as w:
            for k in range(ndump):
                w.append(tri, valid, nspec, meta.sync_time + k * nspec / meta.fs_hz,
                         nspec / meta.fs_hz)
        return time.thread_time() - c0

    write()  # warm-up: the compiled row pass, HDF5
    best = min(write() for _ in range(3))
    path.unlink()
    return best


def recording_options(fmt: str, toml: Path, nspec: int, backend: str) -> ReprocessOptions:
    """What the runs on a reader's recording pass ``reprocess``: the format, the array,
    integrations of ``nspec`` spectra."""
    return ReprocessOptions(format=fmt, array=str(toml), integration_spectra=nspec,
                            backend=backend, freeze_gc=True)  # as xengine reprocess runs


class ReprocessRuns:
    """Calls of ``reprocess`` of the recording ``files`` (``run``), each into a directory of
    its own, and ``clean``, which removes the outputs made so far; untimed: removing a run's
    35 MB took 1.5 ms, which is not reprocessing, and outputs left in place slow the runs after
    them (the page cache's dirty pages: 12 runs at S = 256, ~35 MB each, ran 170 ms each up
    to ~400 MB dirty, then 245-270 ms)."""

    def __init__(self, files: list[Path], options: ReprocessOptions, work: Path) -> None:
        self.files, self.options, self.work, self.made = files, options, work, 0
        self._outs: list[Path] = []  # not removed yet
        self.summary: dict[str, Any] = {}  # the last run's

    def run(self) -> None:
        out = self.work / f"out{self.made}"
        self.made += 1
        self._outs.append(out)
        results = reprocess(self.files, out, self.options, progress=None)
        for r in results:  # one task per file (GUPPI, DADA), per sub-observation (MWAX)
            if not r.ok:
                raise RuntimeError(r.error)
        self.summary = results[-1].summary

    def clean(self) -> None:
        while self._outs:
            shutil.rmtree(self._outs.pop(), ignore_errors=True)


def reprocess_seconds(files: list[Path], options: ReprocessOptions, work: Path,
                      repeat: int) -> float:
    """Best wall time of ``reprocess`` of the recording ``files`` (after a warm-up run)."""
    runs = ReprocessRuns(files, options, work)
    try:
        runs.run()  # warm-up: imports, astropy's time tables, the backend's threads
        return interleaved_best([runs.run], repeat, runs.clean)[0]
    finally:
        runs.clean()


def blri_seconds(files: list[Path], telinfo: Path, nspec: int, work: Path) -> float | None:
    """BLRI's blri_pycorr on the same file and integration (None where not installed)."""
    try:
        from blri.entrypoints.correlate import correlate_cli
    except ImportError:
        return None
    out = work / "blri.uvh5"
    t0 = time.perf_counter()
    correlate_cli(["-t", str(telinfo), "-u", "1", "-i", str(nspec), "--output-filepath",
                   str(out), *map(str, files)])
    return time.perf_counter() - t0


#: Keys every reader format's entry has, per S.
READER_KEYS = ("msps", "bare_backend_msps", "ratio", "cpu_ratio", "layout_vs_frames",
               "writer_cpu_over_bare")


def reader_entry(fmt: str, make: Callable[..., tuple[list[Path], Path, int]], sizes: dict,
                 work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """A reader format's entry: per S, ``make(work, S, sizes)`` writes a recording (files,
    array TOML, spectra per integration) that :func:`measure` times; the files removed
    after."""
    entry: dict[str, Any] = {k: {} for k in READER_KEYS}
    entry["runs"] = {}
    for s in [s for s in args.streams if s in sizes]:  # the sizes this format has
        files, toml, nspec = make(work, s, sizes)
        run = measure(files, fmt, toml, nspec, work, args.backend, args.repeat)
        entry["runs"][f"S{s}"] = run
        for k in READER_KEYS:
            entry[k][f"S{s}"] = run[k]
        for f in files:
            f.unlink()
    entry["goals"] = {"ratio": 0.8}
    return entry


def guppi_entry(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    sizes = QUICK_SIZES if args.quick else GUPPI_SIZES
    entry = reader_entry("guppi", guppi_recording, sizes, work, args)
    entry["speedup_vs_blri"] = {}
    for s in [s for s in args.streams if s in sizes]:
        key = f"S{s}"
        if not args.no_blri and (s <= 64 or args.blri_all):
            # BLRI's file: the first BLRI_BLOCKS blocks, ours timed on it too.
            small, toml, nspec = guppi_recording(work, s, sizes, min(BLRI_BLOCKS, sizes[s][3]))
            for f in small:
                page_cache(f)
            t = blri_seconds(small, telinfo_of(toml), nspec, work)
            if t is None:
                entry["speedup_vs_blri"][key] = None
                entry["blri"] = "not installed (MydonSolutions/BLRI; .ci/run installs it)"
            else:
                ours = reprocess_seconds(
                    small, recording_options("guppi", toml, nspec, args.backend), work,
                    args.repeat)
                entry["runs"][key]["blri_file"] = {
                    "bytes": sum(f.stat().st_size for f in small), "seconds": ours,
                    "blri_seconds": t}
                entry["speedup_vs_blri"][key] = t / ours
            for f in small:
                f.unlink()
    entry["goals"]["speedup_vs_blri"] = 50
    return entry


#: PSRDADA cases, MeerKAT FBFUSE's TAFTP (heaps of 256 spectra, [ant][chan][256][pol][re, im]):
#: S -> (antennas, channels, heaps, spectra per integration): 252 / 268 MB, the GUPPI cases'
#: integrations.
DADA_SIZES = {64: (32, 16, 480, 7680), 256: (128, 8, 256, 4096)}
QUICK_DADA_SIZES = {64: (32, 16, 60, 7680), 256: (128, 4, 32, 4096)}


def dada_recording(work: Path, nstream: int, sizes: dict) -> tuple[list[Path], Path, int]:
    """An FBFUSE-style DADA file of S = ``nstream``; (files, array TOML, integration)."""
    nant, nchan, nheap, nspec = sizes[nstream]
    array = array_for(nant)
    keys = {"HEADER": "DADA", "HDR_VERSION": "1.0", "HDR_SIZE": 4096, "TELESCOPE": "MeerKAT",
            "INSTRUMENT": "CBF-Feng", "FREQ": 1284.0, "BW": 0.5 * nchan, "TSAMP": 2.0,
            "NBIT": 8, "NDIM": 2, "NPOL": 2, "NCHAN": nchan, "NANTS": nant,
            "ANTS": ",".join(array.antenna_names), "ORDER": "TAFTP",
            "UTC_START": "2026-12-06-00:00:00", "SOURCE": "bench", "OBS_OFFSET": 0}
    head = ("\n".join(f"{k} {v}" for k, v in keys.items()) + "\n").encode().ljust(4096, b"\0")
    heap = np.random.default_rng(nstream).integers(-128, 128, (nant, nchan, 256, 2, 2),
                                                   dtype=np.int8)
    path = work / f"bench_s{nstream}.dada"
    with open(path, "wb") as f:
        f.write(head)
        for k in range(nheap):
            f.write(np.roll(heap, k, axis=2).tobytes())
    toml = work / f"array_s{nstream}.toml"
    array.write_toml(toml)
    return [path], toml, nspec


#: MWAX cases, one subfile per coarse channel ([input][sample][re, im] blocks after the delay
#: table's): S -> (tiles, coarse channels, samples per block, blocks, spectra per
#: integration): 262 / 268 MB.
MWAX_SIZES = {64: (32, 16, 6400, 20, 7680), 256: (128, 8, 4096, 16, 4096)}
QUICK_MWAX_SIZES = {64: (32, 4, 3840, 4, 7680), 256: (128, 2, 4096, 2, 4096)}


def mwax_recording(work: Path, nstream: int, sizes: dict) -> tuple[list[Path], Path, int]:
    """An MWAX sub-observation of S = ``nstream``: a subfile per coarse channel; (files,
    array TOML named as the files name their tiles, integration)."""
    from xengine_block.readers.mwax import write_subfile

    ntile, nchan, ntime, nblock, nspec = sizes[nstream]
    tiles = list(range(11, 11 + ntile))
    block = np.random.default_rng(nstream).integers(-128, 128, (2 * ntile, ntime, 2),
                                                    dtype=np.int8)
    files = [write_subfile(work / f"1300000000_1300000008_{109 + c}.sub",
                           [np.roll(block, c + k, axis=1) for k in range(nblock)],
                           coarse_channel=109 + c, tile_ids=tiles) for c in range(nchan)]
    with open_recording(files, "mwax") as rec:
        names = list(rec.meta.antenna_names)
    toml = work / f"array_mwax_s{nstream}.toml"
    array_for(ntile, names=names, numbers=tiles).write_toml(toml)
    return files, toml, nspec


def dada_entry(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    return reader_entry("dada", dada_recording, QUICK_DADA_SIZES if args.quick else DADA_SIZES,
                        work, args)


def mwax_entry(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    return reader_entry("mwax", mwax_recording, QUICK_MWAX_SIZES if args.quick else MWAX_SIZES,
                        work, args)


#: pcap cases (our F-engine packets, as ``xengine record`` writes them): S -> (channels, P,
#: dumps). The file is the same capture over ``PcapSource`` as live data.
PCAP_SIZES = {64: (9, 136, 8), 256: (9, 136, 2)}
QUICK_PCAP_SIZES = {64: (9, 16, 2), 256: (9, 8, 2)}


def pcap_measure(work: Path, s: int, sizes: dict, args: argparse.Namespace) -> dict[str, Any]:
    """One pcap recording of S = ``s``: reprocess wall time against the bare backend's."""
    from xengine_block.array import default_array
    from xengine_block.backends import get_backend
    from xengine_block.capture.recording import write_metadata
    from xengine_block.capture.spead import pcap_sender
    from xengine_block.geometry import Geometry

    nchan, npacket, ndump = sizes[s]
    g = Geometry(nstream=s, nchan=nchan, npacket=npacket)
    frames = np.random.default_rng(s).integers(-128, 128, (npacket, *g.frame_shape),
                                               dtype=np.int8)
    path = work / f"bench_s{s}.pcap"
    write_metadata(path, default_array(s // 2), g, sync_time=1.7e9, fs_hz=40e3,
                   freq0_hz=150e6, chan_bw_hz=40e3)
    with pcap_sender(g, path) as sender:
        for d in range(ndump):
            sender.send_frames(frames, d * npacket * g.nspectra_pkt)
    page_cache(path)
    backend = get_backend(args.backend, g)
    # freeze_gc as ``xengine reprocess`` runs its tasks
    runs = ReprocessRuns([path], ReprocessOptions(backend=args.backend, freeze_gc=True), work)
    replay = ReprocessRuns([path], ReprocessOptions(backend=args.backend, in_place=False,
                                                    freeze_gc=True), work)
    try:
        backend.correlate(frames)  # warm-ups
        runs.run()
        replay.run()
        t_bare, t_ours, t_replay = interleaved_best(
            [lambda: [backend.correlate(frames) for _ in range(ndump)], runs.run, replay.run],
            args.repeat, lambda: (runs.clean(), replay.clean()))
    finally:
        backend.close()
        runs.clean()
        replay.clean()
    samples = ndump * npacket * g.nspectra_pkt * nchan
    run = {"S": s, "nchan": nchan, "P": npacket, "dumps": ndump, "bytes": path.stat().st_size,
           "backend": backend.name, "read": runs.summary["read"], "seconds": t_ours,
           "bare_seconds": t_bare, "replay_seconds": t_replay,
           "msps": samples / t_ours / 1e6, "bare_backend_msps": samples / t_bare / 1e6,
           "replay_msps": samples / t_replay / 1e6}
    run["ratio"] = run["msps"] / run["bare_backend_msps"]
    run["replay_ratio"] = run["replay_msps"] / run["bare_backend_msps"]
    path.unlink()
    return run


def pcap_entry(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """``xengine reprocess`` of pcap recordings against the bare backend on their frames."""
    sizes = QUICK_PCAP_SIZES if args.quick else PCAP_SIZES
    keys = ("msps", "bare_backend_msps", "ratio", "replay_msps", "replay_ratio")
    entry: dict[str, Any] = {k: {} for k in keys}
    entry["runs"] = {}
    for s in [s for s in args.streams if s in sizes]:
        run = pcap_measure(work, s, sizes, args)
        entry["runs"][f"S{s}"] = run
        for k in keys:
            entry[k][f"S{s}"] = run[k]
    entry["goals"] = {"ratio": 0.8}
    return entry


#: LWA cases (TBF and TBX: 12-channel frames of every stand, time-major as a station writes
#: them; OVRO-LWA: one dump, ``[time][chan][stand][pol]``), 4+4-bit: S -> (stands, channels,
#: spectra, spectra per integration). A transient buffer holds a few seconds of a few
#: channels: 24 channels of 16384 spectra (0.68 s), 202 MB at S = 512, four integrations.
LWA_SIZES = {64: (32, 96, 16384, 8192), 256: (128, 48, 8192, 4096),
             512: (256, 24, 16384, 4096)}
QUICK_LWA_SIZES = {64: (32, 24, 1024, 512), 256: (128, 12, 1024, 512),
                   512: (256, 12, 512, 256)}


def lwa_recording(fmt: str) -> Callable[..., tuple[list[Path], Path, int]]:
    """A maker of ``fmt`` (tbf, tbx, ovro-lwa) recordings of S streams: (files, array TOML
    numbering the stands 1..N, integration)."""

    def make(work: Path, nstream: int, sizes: dict) -> tuple[list[Path], Path, int]:
        from xengine_block.readers.lwa import TBF, TBX, write_frames
        from xengine_block.readers.ovro_lwa import write_dump

        nstand, nchan, nspec, ninteg = sizes[nstream]
        rng = np.random.default_rng(nstream)
        path = work / f"bench_s{nstream}.{fmt}"
        if fmt == "ovro-lwa":
            x = rng.integers(-8, 8, (nspec, nchan, nstand, 2, 2), dtype=np.int8)
            write_dump(path, x, chan0=1000, seq=40_700_000_000_000)
        else:
            x = rng.integers(-8, 8, (nspec, nchan // 12, 12, nstand, 2, 2), dtype=np.int8)
            write_frames(path, TBF if fmt == "tbf" else TBX, x,
                         chans=[1000 + 12 * b for b in range(nchan // 12)],
                         time_tag=337_023_871_211_995_136)
        toml = work / f"array_{fmt}_s{nstream}.toml"
        array_for(nstand, numbers=list(range(1, nstand + 1))).write_toml(toml)
        return [path], toml, ninteg

    return make


def lwa_entry(fmt: str) -> Callable[[Path, argparse.Namespace], dict[str, Any]]:
    def entry(work: Path, args: argparse.Namespace) -> dict[str, Any]:
        return reader_entry(fmt, lwa_recording(fmt), QUICK_LWA_SIZES if args.quick
                            else LWA_SIZES, work, args)

    return entry


#: format -> function(work directory, args) -> its JSON entry.
FORMATS: dict[str, Callable[[Path, argparse.Namespace], dict[str, Any]]] = {
    "guppi": guppi_entry,
    "dada": dada_entry,
    "mwax": mwax_entry,
    "pcap": pcap_entry,
    "tbf": lwa_entry("tbf"),
    "tbx": lwa_entry("tbx"),
    "ovro-lwa": lwa_entry("ovro-lwa"),
}


def previous_entries(args: argparse.Namespace, measured: set[str]) -> dict[str, Any]:
    """The entries of formats not ``measured`` in this machine's results file (empty where
    there is none), each marked with the date it was measured and the load then."""
    import json

    from xengine_block.bench.machine import results_path

    path = results_path("bench_reprocess", args.results_root, machine_identity())
    if not path.exists():
        return {}
    old = json.loads(path.read_text())
    when, load = old.get("measured_utc"), old.get("load_average_1min")
    return {k: {**v, "measured_utc": v.get("measured_utc", when),
                "load_average_1min": v.get("load_average_1min", load)}
            for k, v in old.items() if k in FORMATS and k not in measured}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--formats", nargs="+", choices=sorted(FORMATS), default=sorted(FORMATS))
    p.add_argument("--streams", nargs="+", type=int, default=[64, 256, 512],
                   choices=[64, 256, 512], help="S of each format that has it (S = 512: the "
                   "LWA formats, 256 stands)")
    p.add_argument("--keep-other-formats", action="store_true",
                   help="with --write-results and some --formats: keep the results file's "
                        "entries of the other formats (each entry's ratios are of one run)")
    p.add_argument("--backend", default="auto")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--quick", action="store_true", help="smaller files (a smoke test)")
    p.add_argument("--no-blri", action="store_true", help="skip the BLRI peer")
    p.add_argument("--blri-all", action="store_true", help="BLRI at S = 256 too (minutes)")
    p.add_argument("--workdir", type=Path, default=None,
                   help="where the recordings go (default: a temporary directory)")
    add_option(p)
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench_reprocess_", dir=args.workdir))
    result: dict[str, Any] = {"cpus": os.cpu_count(), "machine": machine_identity()}
    try:
        for fmt in args.formats:
            result[fmt] = FORMATS[fmt](work, args)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.keep_other_formats:
        kept = previous_entries(args, set(args.formats))
        result.update({k: v for k, v in kept.items() if k not in result})
    emit("bench_reprocess", result, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
