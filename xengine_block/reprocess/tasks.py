"""Running many independent file tasks: in this process or on a dask.distributed cluster.

Each task turns one input into one output. Outputs are written to ``NAME.partial`` and renamed
when complete, so a rerun skips finished outputs and redoes partial ones. A failed task is
reported with its input and reason while the others finish; the caller's exit status says
whether all succeeded.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from ..console.progress import Progress


@dataclass(frozen=True)
class Task:
    """One input file -> one output file."""

    input: Path
    output: Path

    @property
    def partial(self) -> Path:
        return self.output.with_name(self.output.name + ".partial")


@dataclass
class Result:
    task: Task
    ok: bool
    skipped: bool = False
    error: str = ""
    summary: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


def run_one(task: Task, fn: Callable[[Task], dict[str, Any]]) -> Result:
    """Run ``fn`` on ``task`` unless its output is complete; never raises."""
    t0 = time.monotonic()
    if task.output.exists():
        return Result(task, ok=True, skipped=True, summary={"skipped": "output exists"})
    try:
        if task.partial.is_dir() and not task.partial.is_symlink():
            shutil.rmtree(task.partial)  # a previous run died: redo it (a Measurement Set)
        elif task.partial.exists():
            task.partial.unlink()  # a previous run died: redo it
        summary = fn(task)
        os.replace(task.partial, task.output)
        return Result(task, ok=True, summary=summary, seconds=time.monotonic() - t0)
    except Exception as exc:  # noqa: BLE001 - reported per task, the others go on
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        return Result(task, ok=False, error=detail, seconds=time.monotonic() - t0)


class TaskProgress:
    """Tasks done of all, with the input rate (a bar on a terminal, lines in a log)."""

    def __init__(self, tasks: list[Task], stream: TextIO | None = sys.stderr) -> None:
        self.bar = None if stream is None else Progress("reprocess", len(tasks),
                                                        unit="files", stream=stream)
        self.done_bytes = 0
        self.t0 = time.monotonic()

    def update(self, result: Result) -> None:
        self.done_bytes += _size(result.task.input)
        if self.bar is None:
            return
        rate = self.done_bytes / max(time.monotonic() - self.t0, 1e-9)
        state = "skip" if result.skipped else ("ok" if result.ok else "FAILED")
        self.bar.update(1, f"{rate / 1e6:7.1f} MB/s  {state}: {result.task.input.name:40.40s}")
        if self.bar.done == self.bar.total:
            self.bar.close()


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def run_tasks(tasks: Iterable[Task], fn: Callable[[Task], dict[str, Any]], *,
              scheduler: str | None = None, workers: int | None = None,
              progress: TextIO | None = sys.stderr) -> list[Result]:
    """Run every task; locally, on an existing cluster (``scheduler``) or a LocalCluster of
    ``workers`` processes. ``fn`` must be picklable (a module-level function or a partial)."""
    tasks = list(tasks)
    bar = TaskProgress(tasks, progress)
    if scheduler is None and not workers:
        results = []
        for t in tasks:
            results.append(run_one(t, fn))
            bar.update(results[-1])
        return results
    from dask.distributed import Client, LocalCluster, as_completed

    cluster = None
    if scheduler is None:
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                               dashboard_address=None)
    client = Client(scheduler if scheduler is not None else cluster)
    try:
        futures = {client.submit(run_one, t, fn, pure=False): i for i, t in enumerate(tasks)}
        results: list[Result | None] = [None] * len(tasks)
        for fut in as_completed(futures):
            results[futures[fut]] = fut.result()
            bar.update(results[futures[fut]])
        return results  # type: ignore[return-value]
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def short_value(value: Any) -> Any:
    """A summary's value for its line: a list by its length, a mapping by its
    ``flagged_fraction`` (the whole is in ``summary.json``)."""
    if isinstance(value, list):
        return len(value)
    if isinstance(value, dict):
        return value.get("flagged_fraction", "...")
    return value


def summary_json(results: list[Result]) -> dict[str, Any]:
    """``OUT/summary.json`` of a reprocessing run: one entry per task (input file, output,
    outcome, counters, ``bad_inputs``, ``rfi``), and every bad input of every file, each with
    its file, in ``bad_inputs``."""
    files, bad = [], []
    for r in results:
        entry: dict[str, Any] = {"input": str(r.task.input), "output": str(r.task.output),
                                 "status": "skipped" if r.skipped else ("ok" if r.ok
                                                                        else "failed"),
                                 "seconds": round(r.seconds, 3)}
        if r.error:
            entry["error"] = r.error
        entry.update(r.summary)
        files.append(entry)
        bad += [{"file": str(r.task.input), **b} for b in r.summary.get("bad_inputs", ())]
    return {"files": files, "bad_inputs": bad}


def summarise(results: list[Result], stream: TextIO | None = None) -> bool:
    """Print one line per task (counters or the error); True if every task succeeded.

    ``stream`` defaults to the ``sys.stdout`` of the call (not of the import)."""
    stream = sys.stdout if stream is None else stream
    for r in results:
        if r.skipped:
            stream.write(f"skipped  {r.task.input}: {r.task.output} is complete\n")
        elif r.ok:
            counters = " ".join(f"{k}={short_value(v)}" for k, v in r.summary.items())
            stream.write(f"ok       {r.task.input} -> {r.task.output} ({r.seconds:.1f} s) "
                         f"{counters}\n")
        else:
            stream.write(f"FAILED   {r.task.input}: {r.error}\n")
    return all(r.ok for r in results)
