"""Offline reprocessing: recorded pcap files -> the same capture, X-engine, integration and UVH5
blocks -> one UVH5 file per recording (``NAME.1.uvh5``, ``NAME.2.uvh5``... for each further
sequence where the F-engines jumped in time), locally or across a dask.distributed cluster.

Each recording carries its sidecar (:mod:`~xengine_block.capture.recording`); the integration length
(P packets per X-engine frame, k frames per dump), channel selection and backend are chosen
anew. Outputs are resumable and failures are per file (:mod:`~xengine_block.tools.tasks`).

A damaged recording fails unless accepted with ``allow_damaged`` (``--allow-damaged``): heaps
missing from frames or mangled (capture counters), bytes of the pcap that are no record or not
SPEAD, a cut-off last record, or a size that differs from the one its recorder noted. The
file's line says which, and how many dumps have gaps.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .tasks import Task, run_tasks

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReprocessOptions:
    npacket: int | None = None  # P; None: the recording's
    ninteg: int = 1
    channels: tuple[int, ...] | None = None  # indices into the recording's channels
    backend: str = "auto"
    allow_damaged: bool = False  # write and accept a damaged recording (reported, exit 0)


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
    from ..capture.receive import CaptureBlock
    from ..capture.recording import read_metadata, scan_pcap
    from ..capture.sources import PcapSource
    from ..chain import correlator_chain
    from ..runtime.pipeline import Pipeline

    if not task.input.exists():
        raise FileNotFoundError(f"{task.input}: no such recording")
    info = read_metadata(task.input)
    scan = scan_pcap(task.input)
    g = info.geometry if options.npacket is None else info.geometry.replace(
        npacket=options.npacket)
    with Pipeline() as pipeline:
        capture = CaptureBlock(PcapSource(str(task.input)), g, info.array, **info.sky,
                               chan0=info.chan0)
        chain = correlator_chain(capture, directory=task.partial.parent, backend=options.backend,
                                 ninteg=options.ninteg, quicklook=False,
                                 filename=task.partial.name, overwrite=True,
                                 channels=list(options.channels) if options.channels else None,
                                 geometry=g)
        pipeline.run()
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
               "dumps_with_gaps": chain.integrate.dumps_with_gaps}
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


def extra_output(output: Path, n: int) -> Path:
    """Where the ``n``-th further sequence of a recording goes: ``obs.uvh5`` -> ``obs.1.uvh5``
    (still ``.uvh5``, so pyuvdata knows the type)."""
    return output.with_name(f"{output.stem}.{n}{output.suffix}")


def plan_tasks(inputs: list[Path], outdir: Path) -> list[Task]:
    tasks, seen = [], set()
    for path in inputs:
        out = outdir / (path.name.removesuffix(".pcap") + ".uvh5")
        if out in seen:
            raise ValueError(f"two recordings map to the same output {out}")
        seen.add(out)
        tasks.append(Task(path, out))
    return tasks


def reprocess(inputs: list[Path], outdir: Path, options: ReprocessOptions, *,
              scheduler: str | None = None, workers: int | None = None, progress=sys.stderr):
    """Plan and run; returns the per-task results."""
    outdir.mkdir(parents=True, exist_ok=True)
    fn = functools.partial(reprocess_file, options=options)
    return run_tasks(plan_tasks(inputs, outdir), fn, scheduler=scheduler, workers=workers,
                     progress=progress)
