"""Offline reprocessing: recordings -> UVH5 files again, locally or across a dask.distributed
cluster, one task per file or time range (:mod:`~xengine_block.reprocess.tasks`: resumable
``.partial`` outputs, a line per task, failures per file).

Two kinds of recording:

- our pcap files of F-engine SPEAD traffic with their sidecar
  (:mod:`~xengine_block.capture.recording`), replayed through the same capture, X-engine,
  integration and UVH5 blocks; one UVH5 file per recording (``NAME.1.uvh5``, ``NAME.2.uvh5``...
  for each further sequence where the F-engines jumped in time); the integration length is P
  packets per X-engine frame and k frames per dump (whole packets of 480 spectra);
- the observatories' recorded voltages (GUPPI RAW, PSRDADA, VDIF, MWAX: :mod:`xengine_block.
  readers`), correlated in place from the files' memory maps (:mod:`~xengine_block.readers.
  correlate`) in integrations of any whole number of spectra, with an array file for antenna
  positions (:mod:`~xengine_block.readers.arrays`). A multi-file recording (a GUPPI or DADA
  sequence) gives one task and one UVH5 file per file, each holding the integrations that start
  in it (they may read on into the next file), aligned to the recording's first spectrum, so
  every split gives the same integrations; an MWAX sub-observation's coarse-channel files give
  one task and one file.

A damaged recording fails unless accepted with ``allow_damaged`` (``--allow-damaged``). pcap:
heaps missing from frames or mangled (capture counters), bytes of the pcap that are no record or
not SPEAD, a cut-off last record, or a size that differs from the one its recorder noted.
Readers: missing blocks, garbage between blocks, a cut last block, headers contradicting the
file (:data:`~xengine_block.readers.base.DAMAGE`), counted per file. The file's line says which,
and how many dumps have gaps.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
import os
import shutil
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..health.inputs import Thresholds
from ..runtime.pipeline import frozen_heap
from .tasks import Task, run_tasks

if TYPE_CHECKING:
    import numpy as np

    from ..capture.recording import RecordingInfo
    from ..geometry import Geometry
    from ..health.monitor import HealthMonitor
    from ..health.rfi import AOFlaggerRfi
    from ..outputs.site import SiteInfo
    from ..readers.base import RecordingMeta
    from .recording_correlator import RecordingCorrelator

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReprocessOptions:
    npacket: int | None = None  # pcap: P; None: the recording's
    ninteg: int = 1  # pcap: X-engine frames per dump
    channels: tuple[int, ...] | None = None  # indices into the recording's channels
    backend: str = "auto"
    allow_damaged: bool = False  # write and accept a damaged recording (reported, exit 0)
    format: str = "auto"  # "auto" (from each file's first bytes) or one of readers.ALL_FORMATS
    array: str | None = None  # array TOML or telinfo YAML/TOML (readers.arrays.load_array)
    integration_spectra: int | None = None  # spectra per integration (default: 1 s)
    integration_s: float | None = None  # or seconds per integration (rounded to spectra)
    sample_rate_hz: float | None = None  # for formats whose headers lack them (VDIF)
    freq0_hz: float | None = None
    chan_bw_hz: float | None = None
    #: Cut each file's integrations into tasks of about this many seconds of data, one output
    #: each (``NAME.tNNNN.uvh5``): a long file over several workers. None: a task per file.
    split_s: float | None = None
    #: pcap: correlate a clean recording from its memory map (the capture's dumps, bit for
    #: bit, :mod:`~xengine_block.readers.pcap`); False: always replay it through the capture.
    in_place: bool = True
    #: Run each task inside :func:`~xengine_block.runtime.pipeline.frozen_heap` (the process's
    #: garbage collector frozen while it runs): the choice of the program that owns the process
    #: (``xengine reprocess`` turns it on), not of the library.
    freeze_gc: bool = False
    #: Judge every input in every dump and flag the baselines of those judged bad
    #: (:mod:`xengine_block.health`; ``--flag-inputs``).
    flag_inputs: bool = False
    #: ``aoflagger`` or ``aoflagger:STRATEGY.lua``: RFI flags over each file's time span
    #: (``--rfi``); None: none.
    rfi: str | None = None
    #: When an input is judged bad (``xengine_block.health.inputs.Thresholds``; None: the
    #: defaults).
    thresholds: Thresholds | None = None
    #: The files each task writes: ``uvh5`` and/or ``ms`` (``--output-format``). A Measurement
    #: Set is written from the task's finished UVH5 file by the Measurement Set writer, a dump
    #: at a time (:func:`~xengine_block.outputs.convert.uvh5_to_ms`), phased to
    #: ``phase_centre``; with ``ms`` alone the UVH5 file is only the task's partial output.
    output_formats: tuple[str, ...] = ("uvh5",)
    phase_centre: str = "zenith"

    @property
    def flagging(self) -> bool:
        return self.flag_inputs or self.rfi is not None

    def channel_indices(self, nchan: int) -> np.ndarray:
        """The recording channels to write (``channels``, or all ``nchan``), unchecked: each
        caller says what is wrong with them in its own way."""
        import numpy as np

        return np.arange(nchan) if self.channels is None else np.asarray(self.channels, np.intp)

    @property
    def sky_overrides(self) -> dict[str, float]:
        return {k: v for k, v in (("fs_hz", self.sample_rate_hz), ("freq0_hz", self.freq0_hz),
                                  ("chan_bw_hz", self.chan_bw_hz)) if v is not None}


@dataclass(frozen=True)
class RecordingTask(Task):
    """A task of a reader's recording: its files, the format, and which part it writes
    (``part``: the integrations starting in ``files[part]``; None: all of them; ``span``:
    of those, the ones starting in spectra ``[span[0], span[1])``, a time range of
    ``--split-s``)."""

    files: tuple[Path, ...] = ()
    format: str | None = None
    part: int | None = None
    span: tuple[int, int] | None = None


#: Capture counters that mean heaps of the recording were lost or mangled.
CAPTURE_DAMAGE = ("missing", "incomplete", "late", "bad_size", "bad_timestamp", "bad_stream",
                  "bad_channel", "out_of_window")


class DamagedRecording(ValueError):
    """The recording lost or mangled data and the user did not accept it."""


def parse_channels(text: str | None) -> tuple[int, ...] | None:
    """``"A:B"`` (half-open range) or ``"1,5,7"``; None keeps every channel."""
    if not text:
        return None
    try:
        if ":" in text:
            a, b = text.split(":")
            chans = tuple(range(int(a), int(b)))
        else:
            chans = tuple(int(c) for c in text.split(","))
    except ValueError:
        raise ValueError(f"channels {text!r}: expected A:B or a comma-separated list") from None
    if not chans:
        raise ValueError(f"channels {text!r} selects nothing")
    return chans


def reprocess_file(task: Task, options: ReprocessOptions) -> dict[str, Any]:
    """Correlate one recording into ``task.partial``; returns the capture and output counters.

    Raises with the file's name in the message for a missing/corrupt sidecar, an unreadable
    pcap, or a recording that yields no complete dump.
    """
    from ..blocks.chain import correlator_chain
    from ..capture.pcap import pcap_header
    from ..capture.receive import CaptureBlock
    from ..capture.recording import read_metadata, scan_pcap
    from ..capture.transports import PcapSource
    from ..runtime.pipeline import Pipeline

    if not task.input.exists():
        raise FileNotFoundError(f"{task.input}: no such recording")
    info = read_metadata(task.input)
    pcap_header(task.input)  # not a pcap file: said now, before anything runs
    npacket, ninteg = pcap_packets(options, info.geometry.npacket, info.sky["fs_hz"],
                                   info.geometry.nspectra_pkt)
    g = info.geometry.replace(npacket=npacket)
    done = reprocess_in_place(task, options, info, g, ninteg) if options.in_place else None
    if done is not None:
        return done
    if options.flagging:
        raise ValueError(f"{task.input}: --flag-inputs and --rfi flag recordings read in place; "
                         f"this one goes through the capture (damaged, or --replay), which "
                         f"does not flag")
    # The damage scan walks the file on its own thread (compiled, without the GIL) while the
    # pipeline captures it: it was a serial tenth of the run.
    with ThreadPoolExecutor(1, thread_name_prefix="pcap-scan") as scanner:
        scanning = scanner.submit(scan_pcap, task.input)
        with Pipeline() as pipeline:
            capture = CaptureBlock(PcapSource(str(task.input)), g, info.array, **info.sky,
                                   chan0=info.chan0)
            chain = correlator_chain(capture, directory=task.partial.parent,
                                     backend=options.backend, ninteg=ninteg, quicklook=False,
                                     filename=task.partial.name, overwrite=True,
                                     channels=(list(options.channels) if options.channels
                                               else None), geometry=g)
            pipeline.run()
        scan = scanning.result()
    if pipeline.stop_signal is not None:  # Ctrl-C stops the whole run, not just this file
        raise KeyboardInterrupt(f"{task.input}: stopped by a signal")
    counters = capture.capture_counters()
    if chain.writer.dumps_written == 0:
        raise ValueError(f"{task.input}: no complete integration in the recording "
                         f"({counters['frames']} frames, {counters['packets']} packets, "
                         f"{counters['bad_size']} wrong-size heaps)")
    extra = chain.writer.files[1:]
    summary = {"dumps": chain.writer.dumps_written, "frames": counters["frames"],
               "missing": counters["missing"], "malformed": sum(
                   counters[k] for k in ("bad_size", "bad_timestamp", "bad_stream",
                                         "bad_channel", "out_of_window")),
               "dropped_partial": chain.integrate.dropped_partial,
               "dumps_with_gaps": chain.integrate.dumps_with_gaps, "read": "capture"}
    damage = {k: counters[k] for k in CAPTURE_DAMAGE if counters[k]}
    damage.update(scan.damage)
    if info.pcap_bytes is not None and info.pcap_bytes != scan.file_bytes:
        damage["size_change"] = scan.file_bytes - info.pcap_bytes
    if damage:
        what = " ".join(f"{k}={v}" for k, v in damage.items())
        if not options.allow_damaged:
            raise DamagedRecording(
                f"{task.input}: damaged recording: {what}; {summary['dumps']} dumps, "
                f"{summary['dumps_with_gaps']} with gaps (--allow-damaged writes it anyway)")
        summary["damaged"] = what.replace(" ", ",")
    if extra:  # the F-engines jumped in time: a file per sequence, named for the output
        finals = [extra_output(task.output, i) for i in range(1, len(extra) + 1)]
        for partial, final in zip(extra, finals, strict=True):
            os.replace(partial, final)  # before the main output: a rerun redoes both
        summary["extra_files"] = [str(p) for p in finals]
    return summary


def reprocess_in_place(task: Task, options: ReprocessOptions, info: RecordingInfo, g: Geometry,
                       ninteg: int) -> dict[str, Any] | None:
    """A clean pcap recording correlated from its memory map (:mod:`~xengine_block.readers.
    pcap`): the dumps the capture pipeline would write, bit for bit, without replaying the
    packets. None where the recording is not clean, its size is not the one its recorder
    noted, or it holds no dump: the capture pipeline then reads it (and says what is wrong)."""

    from ..outputs.site import site_info
    from ..readers.pcap import open_clean
    from .recording_correlator import RecordingCorrelator

    if info.pcap_bytes is not None and info.pcap_bytes != task.input.stat().st_size:
        return None
    chans = options.channel_indices(g.nchan)
    if chans.max() >= g.nchan or chans.min() < 0:
        return None  # the pipeline's writer names the channels
    rec = open_clean(task.input, info, g, ninteg)
    if rec is None:
        return None
    wins, corr = rec.dumps, None
    span = wins[0][1] - wins[0][0]
    flags: dict[str, Any] = {}
    try:
        corr = RecordingCorrelator(rec, range(info.array.nant),
                                   (int(chans.min()), int(chans.max()) + 1), options.backend)
        site = site_info(info.array)
        _, gaps = write_dumps(
            task.partial, corr, wins, chans, span, site, rec.meta,
            file_flagging(options, site, info.array.telescope_name), flags,
            history=f"xengine_block reprocess: pcap {task.input.name} read in place; {span} "
                    f"spectra per dump")
    finally:
        if corr is not None:
            corr.close()
        rec.close()
    return {"dumps": len(wins), "frames": rec.runs[0].nframe, "missing": 0, "malformed": 0,
            "dropped_partial": rec.dropped_partial, "dumps_with_gaps": gaps, "read": "in place",
            **flags}


def extra_output(output: Path, n: int) -> Path:
    """Where the ``n``-th further sequence of a recording goes: ``obs.uvh5`` -> ``obs.1.uvh5``
    (still ``.uvh5``, so pyuvdata knows the type)."""
    return output.with_name(f"{output.stem}.{n}{output.suffix}")


def pcap_packets(options: ReprocessOptions, recorded: int, fs_hz: float,
                 nspectra_pkt: int = 480) -> tuple[int, int]:
    """(P, k) for a pcap recording: ``--npacket``/``--ninteg``, or an integration length in
    spectra (a multiple of a packet's 480) or seconds (rounded to whole packets)."""
    n = options.integration_spectra
    if n is None and options.integration_s is not None:
        n = max(1, round(options.integration_s * fs_hz / nspectra_pkt)) * nspectra_pkt
    if n is None:
        return options.npacket or recorded, options.ninteg
    if n % nspectra_pkt:
        raise ValueError(f"integration of {n} spectra: pcap recordings integrate whole packets "
                         f"of {nspectra_pkt} spectra")
    k = n // nspectra_pkt
    p = max(d for d in range(1, min(k, recorded if options.npacket is None else
                                    options.npacket) + 1) if k % d == 0)
    return p, k // p


def plan_tasks(inputs: list[Path], outdir: Path, fmt: str = "auto",
               options: ReprocessOptions | None = None) -> list[Task]:
    """One task per pcap file, per file of a reader's multi-file recording (GUPPI, DADA
    sequences; VDIF files) or per MWAX sub-observation, each cut into time ranges where
    ``options.split_s`` says so (:func:`split_task`); files of no known format become tasks
    that fail with the reason. ValueError if two tasks would write one output, or for
    ``split_s`` with pcap files (their capture pipeline reads a file whole)."""
    from ..readers import detect_format, group_recordings, reader

    tasks: list[Task] = []
    by_format: dict[str | None, list[Path]] = {}
    for path in inputs:
        f = fmt if fmt != "auto" else detect_format(path)
        by_format.setdefault(f, []).append(Path(path))
    split = options is not None and options.split_s is not None
    for f, paths in by_format.items():
        if f == "pcap":
            if split:
                raise ValueError(f"{paths[0]}: --split-s cuts recordings of the readers' "
                                 f"formats (GUPPI RAW, PSRDADA, VDIF, MWAX), not pcap files")
            tasks += [Task(p, outdir / (p.name.removesuffix(".pcap") + ".uvh5")) for p in paths]
        elif f is None:
            tasks += [RecordingTask(p, outdir / (p.name + ".uvh5"), (p,)) for p in paths]
        else:
            cls = reader(f)
            for files in group_recordings(paths, f):
                parts = range(len(files)) if cls.parts_by_file else [None]
                for part in parts:
                    stem = cls.part_name(files, 0 if part is None else part)
                    task = RecordingTask(files[part or 0], outdir / f"{stem}.uvh5",
                                         tuple(files), f, part)
                    tasks += split_task(task, options) if split else [task]
    seen: set[Path] = set()
    for t in tasks:
        if t.output in seen:
            raise ValueError(f"two recordings map to the same output {t.output}")
        seen.add(t.output)
    return tasks


def task_windows(rec: Any, nspec: int, part: int | None = None,
                 span: tuple[int, int] | None = None) -> tuple[list[tuple[int, int]], int, int,
                                                             int]:
    """The whole integrations of ``nspec`` spectra (from the recording's start) that start in
    file ``part`` (None: any) and in ``span``; (their windows, the spectra ``[lo, hi)`` they
    may start in, spectra of the recording's incomplete last integration)."""
    from .recording_correlator import windows

    wins, dropped = windows(rec.start, rec.end, nspec)
    lo, hi = rec.start, rec.end
    if part is not None:
        starts = rec.file_starts()
        lo, hi = starts[part], rec.end if part + 1 == len(rec.files) else starts[part + 1]
    if span is not None:
        lo, hi = max(lo, span[0]), min(hi, span[1])
    return [w for w in wins if lo <= w[0] < hi], lo, hi, dropped


def split_task(task: RecordingTask, options: ReprocessOptions) -> list[RecordingTask]:
    """``task`` as tasks of ``options.split_s`` seconds of whole integrations each (rounded to
    a whole number of them, at least one), named ``NAME.tNNNN.uvh5`` by range from the
    recording's start; unchanged where that is one range, or where the recording cannot be
    opened (the task then fails with the reason when it runs)."""
    from ..readers import open_recording

    try:
        rec = open_recording(task.files, task.format, **options.sky_overrides)
    except (OSError, ValueError):
        return [task]
    try:
        nspec = integration_spectra(options, rec.meta.fs_hz, rec.end - rec.start)
        step = max(1, round(options.split_s * rec.meta.fs_hz / nspec)) * nspec
        wins, lo, hi, _ = task_windows(rec, nspec, task.part)
        ranges = sorted({(w0 - rec.start) // step for w0, _ in wins})
        if len(ranges) <= 1:
            return [task]
        stem = task.output.name.removesuffix(".uvh5")
        # the last range runs to the part's end: it answers for the incomplete tail
        return [replace(task, output=task.output.with_name(f"{stem}.t{j:04d}.uvh5"),
                        span=(max(lo, rec.start + j * step),
                              hi if j == ranges[-1] else rec.start + (j + 1) * step))
                for j in ranges]
    finally:
        rec.close()


def run_task(task: Task, options: ReprocessOptions) -> dict[str, Any]:
    """Reprocess one task into ``task.partial``: a pcap recording or a reader's part."""
    # With options.freeze_gc (the application's choice) a task runs frozen, a reader's part
    # too: no pipeline, but the writer's thread and the backend's share the process with
    # astropy's, h5py's and numba's objects, and a full collection (one every few files,
    # tens of milliseconds) stopped both, in the middle of the file.
    # A pcap's pipeline hands its rings' memory back to the pool when it ends (Pipeline._after_run);
    # its blocks, rings and threads still refer to each other (Bifrost's ring.owner), and a
    # collection after each file frees them at once (without it the process grew by a few MB a
    # file until one of Python's own full collections). Frozen, the objects that were there
    # before the pipeline (modules, astropy's tables, numba's: what lives as long as the
    # process) are left out of that collection and thawed after it, so it looks at what came
    # since (a small fraction of a full collection's time). Concurrent tasks share one freeze
    # (frozen_heap) until the last ends; a freeze already in place (the caller's) is left
    # alone, and the collection is then a full one, as it is without freeze_gc.
    with frozen_heap() if options.freeze_gc else contextlib.nullcontext():
        if isinstance(task, RecordingTask):
            summary = reprocess_recording(task, options)
        else:
            try:
                summary = reprocess_file(task, options)
            finally:
                gc.collect()
    if "ms" in options.output_formats:
        write_measurement_set(task, options)
    return summary


def write_measurement_set(task: Task, options: ReprocessOptions) -> Path:
    """The task's Measurement Set from its finished UVH5 partial: ``NAME.ms`` beside
    ``NAME.uvh5``, or, for a task of Measurement Sets alone (output ``NAME.ms``), the partial
    itself replaced by the table (which the task runner then renames)."""
    from ..outputs.convert import uvh5_to_ms
    from ..outputs.phasing import PhaseCentre

    pc = PhaseCentre.parse(options.phase_centre)
    only_ms = task.output.suffix == ".ms"
    final = task.partial if only_ms else task.output.with_suffix(".ms")
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    uvh5_to_ms([task.partial], tmp, pc, kill_safe=False)  # a rerun replaces ``tmp``
    if only_ms:
        task.partial.unlink()
    elif final.exists():
        shutil.rmtree(final)  # a rerun's: its UVH5 was not complete, so neither is this
    os.replace(tmp, final)
    return final


def integration_spectra(options: ReprocessOptions, fs_hz: float, span: int) -> int:
    """Spectra per integration: given, or seconds x spectra per second (rounded), default one
    second capped at the recording's length."""
    if options.integration_spectra is not None:
        return options.integration_spectra
    if options.integration_s is not None:
        return max(1, round(options.integration_s * fs_hz))
    return max(1, min(round(fs_hz), span))


def reprocess_recording(task: RecordingTask, options: ReprocessOptions) -> dict[str, Any]:
    """Correlate a reader's recording (its part ``task.part``) into ``task.partial``.

    Raises with the file's name for an unknown format, an unreadable or damaged recording (the
    damage counted per file; ``allow_damaged`` writes it), antennas the array file lacks, or a
    part without a complete integration."""

    from ..outputs.site import site_info
    from ..readers import open_recording
    from ..readers.arrays import load_array, match_antennas
    from .recording_correlator import RecordingCorrelator

    if task.format is None:
        raise ValueError(f"{task.input}: not a recording of a known format (pcap, GUPPI RAW, "
                         f"PSRDADA, VDIF, MWAX subfile, LWA TBF/TBX, OVRO-LWA dump); give "
                         f"--format")
    where = f"{task.input}: "
    rec = open_recording(task.files, task.format, **options.sky_overrides)
    corr = None
    try:
        meta = rec.meta
        nspec = integration_spectra(options, meta.fs_hz, rec.end - rec.start)
        # the integrations that start in this file, and in this time range of it
        wins, _, hi, dropped = task_windows(rec, nspec, task.part, task.span)
        last = hi >= rec.end
        touched = {rec.files[r.file].name for r in rec.runs
                   if any(r.time_tag < w1 and w0 < r.end for w0, w1 in wins)}
        touched.add(task.input.name)
        damage = {f: c for f, c in rec.damage.by_file.items() if f in touched}
        what = "; ".join(f"{f}: " + ",".join(f"{k}={v}" for k, v in c.items())
                         for f, c in damage.items())
        if damage and not options.allow_damaged:
            raise DamagedRecording(f"{where}damaged recording: {what} (--allow-damaged writes "
                                   f"it anyway)")
        if not wins:
            raise ValueError(f"{where}no complete integration of {nspec} spectra starts in "
                             f"this file (the recording holds {rec.end - rec.start} spectra "
                             f"from {rec.start})")
        array = load_array(options.array) if options.array else rec.array()
        sub, antennas = match_antennas(meta, array, where)
        chans = options.channel_indices(meta.nchan)
        if chans.max() >= meta.nchan:
            raise ValueError(f"{where}channels {chans[chans >= meta.nchan].tolist()} are "
                             f"outside the recording's {meta.nchan} channels")
        c0, c1 = int(chans.min()), int(chans.max()) + 1
        corr = RecordingCorrelator(rec, antennas, (c0, c1), options.backend)
        names = ", ".join(f.name for f in task.files)
        site = site_info(sub)
        flags: dict[str, Any] = {}
        spectra, gaps = write_dumps(
            task.partial, corr, wins, chans, nspec, site, meta,
            file_flagging(options, site, sub.telescope_name), flags,
            history=f"xengine_block reprocess: {task.format} {names}; {nspec} spectra per dump",
            instrument=sub.instrument, x_orientation=sub.x_orientation)
        summary: dict[str, Any] = {
            "format": task.format, "dumps": len(wins), "integration_spectra": nspec,
            "spectra": spectra, "dumps_with_gaps": gaps, "antennas": sub.nant,
            "channels": int(chans.size), "backend": ",".join(corr.backend_names)}
        if last and dropped:
            summary["dropped_spectra"] = dropped
        if damage:
            summary["damaged"] = what.replace(" ", "")
        summary.update(flags)
        return summary
    finally:
        if corr is not None:
            corr.close()
        rec.close()


def file_flagging(options: ReprocessOptions, site: SiteInfo,
                  telescope: str = "") -> tuple[HealthMonitor | None, AOFlaggerRfi | None]:
    """The input judge and the RFI flagger ``options`` ask for, for the antennas of ``site``
    (the strategy: ``telescope``'s, where AOFlagger has one)."""
    from ..health.monitor import HealthMonitor
    from ..health.rfi import AOFlaggerRfi, parse_rfi

    monitor = (HealthMonitor(site.antenna_numbers, site.antenna_names,
                             options.thresholds or Thresholds(), name="reprocess")
               if options.flag_inputs else None)
    rfi = None
    if options.rfi is not None:
        _, strategy = parse_rfi(options.rfi)
        rfi = AOFlaggerRfi(telescope, strategy)
    return monitor, rfi


def write_dumps(path: Path, corr: RecordingCorrelator, wins: list[tuple[int, int]],
                chans: np.ndarray, nspec: int, site: SiteInfo, meta: RecordingMeta,
                flagging: tuple[HealthMonitor | None, AOFlaggerRfi | None] = (None, None),
                report: dict[str, Any] | None = None, **writer: Any) -> tuple[int, int]:
    """Correlate the windows ``wins`` with ``corr`` (a
    :class:`~xengine_block.reprocess.recording_correlator.RecordingCorrelator` of channels
    ``[chans.min(), chans.max()]``) and write channels ``chans`` of each as a dump of ``nspec``
    spectra into the UVH5 file ``path`` (``writer``: the writer's keywords); closes the
    correlator and its recording before the last append. Returns (spectra correlated, in the
    fullest channel of each dump, summed; dumps with gaps).

    ``flagging`` (:func:`file_flagging`): with an input judge or an RFI flagger the file's
    dumps are all correlated first and held (AOFlagger sees the whole time span; ``stuck``
    both neighbours), flagged (:func:`~xengine_block.health.monitor.flag_dumps`), then
    written, the history saying which inputs were flagged and why; ``report`` receives the
    summary's ``bad_inputs`` and ``rfi``."""
    import numpy as np

    from ..outputs.uvh5 import UVH5Writer

    if flagging != (None, None):
        return write_flagged(path, corr, wins, chans, nspec, site, meta, flagging,
                             {} if report is None else report, **writer)
    c0 = int(chans.min())
    every = np.array_equal(chans, np.arange(c0, int(chans.max()) + 1))  # no gather needed
    nbl, spectra, gaps = corr.nbaseline, 0, 0
    # The file is made, and each dump written, by one writer thread while the next
    # integration correlates (the backends release the GIL): creating the file overlaps the
    # first integration, the appends stay in order, one at a time, and the first failure stops
    # the loop and is raised here.
    with ThreadPoolExecutor(1, thread_name_prefix="reprocess-writer") as pool:
        # kill_safe=False: ``path`` is the task's .partial file, which a rerun removes when a
        # kill leaves it (reprocess.tasks), so its publishing writes need not be direct ones.
        made = pool.submit(UVH5Writer, path, site, meta.freqs_hz[chans], meta.chan_bw_hz, nspec,
                           sample_bits=meta.sample_bits, overwrite=True, kill_safe=False,
                           **writer)
        pending: Future = made
        try:
            for (t0, _), c in zip(wins, corr.integrations(wins, reuse=True), strict=True):
                valid = c.valid[chans - c0]
                pending.result()
                pending = pool.submit(
                    made.result().append, c.vis if every else c.vis[chans - c0],
                    np.broadcast_to(valid[:, None], (chans.size, nbl)), nspec,
                    meta.sync_time + t0 / meta.fs_hz, nspec / meta.fs_hz)
                spectra += int(valid.max(initial=0))
                gaps += bool((valid < nspec).any())
            # Done with the file while its last dump is written: unmapping it is not left
            # after that append, the one serial part of the run.
            corr.close()
            corr.rec.close()
            pending.result()
        finally:
            pending.exception()  # wait: the file closes after its last append
            if made.exception() is None:
                made.result().close()
    return spectra, gaps


def write_flagged(path: Path, corr: RecordingCorrelator, wins: list[tuple[int, int]],
                  chans: np.ndarray, nspec: int, site: SiteInfo, meta: RecordingMeta,
                  flagging: tuple[HealthMonitor | None, AOFlaggerRfi | None],
                  report: dict[str, Any], **writer: Any) -> tuple[int, int]:
    """:func:`write_dumps` with flags: every dump correlated and held, flagged, written."""
    import numpy as np

    from ..health.monitor import flag_dumps
    from ..outputs.uvh5 import UVH5Writer

    monitor, rfi = flagging
    c0 = int(chans.min())
    corr.count_extremes = monitor is not None
    vis, valid, extremes, parts = [], [], [], []
    for c in corr.integrations(wins):
        vis.append(c.vis[chans - c0])
        valid.append(c.valid[chans - c0])
        extremes.append(c.extremes)
        parts.append(np.full(corr.nstream, 2 * int(c.valid.sum()), np.int64))
    corr.close()
    corr.rec.close()
    counts = np.stack(valid)  # [T, C]
    flags, summary = flag_dumps(monitor, rfi, np.stack(vis), counts[:, :, None],
                                np.stack(extremes) if monitor is not None else None,
                                np.stack(parts))
    report.update(summary)
    notes = [writer.pop("history", "")]
    if monitor is not None:
        notes.append(monitor.history())
    if rfi is not None:
        notes.append(f"RFI flagged by AOFlagger, strategy {rfi.strategy_path.name}, over the "
                     f"file's {len(wins)} dumps")
    nbl = corr.nbaseline
    with UVH5Writer(path, site, meta.freqs_hz[chans], meta.chan_bw_hz, nspec,
                    sample_bits=meta.sample_bits, overwrite=True, kill_safe=False,
                    history="; ".join(n for n in notes if n), **writer) as out:
        for i, (t0, _) in enumerate(wins):
            out.append(vis[i], np.broadcast_to(counts[i][:, None], (chans.size, nbl)), nspec,
                       meta.sync_time + t0 / meta.fs_hz, nspec / meta.fs_hz, flags=flags[i])
    return (int(counts.max(axis=1, initial=0).sum()),
            int((counts < nspec).any(axis=1).sum()))


def reprocess(inputs: list[Path], outdir: Path, options: ReprocessOptions, *,
              scheduler: str | None = None, workers: int | None = None,
              progress: Any = "stderr"):
    """Plan and run; returns the per-task results. ``progress``: a stream for the progress
    line, None for none, or ``"stderr"``: the ``sys.stderr`` of the call (not of the
    import: a test's captured stream is closed by the next)."""
    progress = sys.stderr if progress == "stderr" else progress
    outdir.mkdir(parents=True, exist_ok=True)
    fn = functools.partial(run_task, options=options)
    tasks = plan_tasks(inputs, outdir, options.format, options)
    if "uvh5" not in options.output_formats:  # Measurement Sets alone: NAME.ms per task
        tasks = [replace(t, output=t.output.with_suffix(".ms")) for t in tasks]
    return run_tasks(tasks, fn,
                     scheduler=scheduler,
                     workers=workers, progress=progress)
