"""The benchmarks' ``--write-results`` option, in one place: each benchmark prints its JSON and,
with the option, also keeps it as ``benchmarks/results/<cpu class>/<benchmark>.json`` (one file
per benchmark and CPU class, replaced when re-measured; the CPU and the date are inside), the
data that ``benchmarks/report.py`` renders into ``docs/performance.md`` and the README.

Every result records the machine's load in one shape, ``"load_average_1min": {"start": ...,
"end": ...}``: the 1-minute load average when the benchmark set up its options (its start) and
when it emitted its result."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from xengine_block.bench.machine import machine_identity, write_results

#: Where results are kept, whatever the working directory the benchmark was started from.
RESULTS_ROOT = Path(__file__).resolve().parent / "results"


def load_average() -> float:
    """The 1-minute load average now, as results keep it."""
    return round(os.getloadavg()[0], 2)


def add_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--write-results`` (and ``--results-root``, where they go) to a benchmark's options,
    and note the load average at the start of the run (every benchmark adds its options
    first)."""
    parser.add_argument("--write-results", action="store_true",
                        help="also write the JSON to benchmarks/results/<cpu class>/"
                             "<benchmark>.json, replacing this CPU class's previous one")
    parser.add_argument("--results-root", type=Path, default=RESULTS_ROOT,
                        help=f"where <cpu class>/<benchmark>.json goes (default {RESULTS_ROOT})")
    parser.set_defaults(load_average_start=load_average())


def emit(benchmark: str, result: dict[str, Any], args: argparse.Namespace,
         indent: int | None = 1) -> None:
    """Print ``result`` as JSON (with the machine it ran on and the load average at the start
    and the end) and, with ``--write-results``, write it to its results file, saying where on
    stderr."""
    result.setdefault("machine", machine_identity())
    result["load_average_1min"] = {"start": getattr(args, "load_average_start", None),
                                   "end": load_average()}
    print(json.dumps(result, indent=indent))
    if args.write_results:
        path = write_results(benchmark, result, getattr(args, "results_root", RESULTS_ROOT))
        print(f"{benchmark}: results written to {path}", file=sys.stderr)
