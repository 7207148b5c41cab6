"""The benchmarks' ``--write-results`` option, in one place: each benchmark prints its JSON and,
with the option, also keeps it as ``benchmarks/results/<cpu class>/<benchmark>.json`` (one file
per benchmark and CPU class, replaced when re-measured; the CPU and the date are inside), the
data that ``benchmarks/report.py`` renders into ``docs/performance.md`` and the README."""

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


def add_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--write-results`` (and ``--results-root``, where they go) to a benchmark's options."""
    parser.add_argument("--write-results", action="store_true",
                        help="also write the JSON to benchmarks/results/<cpu class>/"
                             "<benchmark>.json, replacing this CPU class's previous one")
    parser.add_argument("--results-root", type=Path, default=RESULTS_ROOT,
                        help=f"where <cpu class>/<benchmark>.json goes (default {RESULTS_ROOT})")


def emit(benchmark: str, result: dict[str, Any], args: argparse.Namespace,
         indent: int | None = 1) -> None:
    """Print ``result`` as JSON (with the machine it ran on and the load average at the end)
    and, with ``--write-results``, write it to its results file, saying where on stderr."""
    result.setdefault("machine", machine_identity())
    result.setdefault("load_average_1min_end", round(os.getloadavg()[0], 2))
    print(json.dumps(result, indent=indent))
    if args.write_results:
        path = write_results(benchmark, result, getattr(args, "results_root", RESULTS_ROOT))
        print(f"{benchmark}: results written to {path}", file=sys.stderr)
