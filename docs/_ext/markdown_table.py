"""Markdown tables, for every table the docs render from data: the reference tables
(``reference_tables.py``, at docs build time) and the benchmarks' results
(``benchmarks/report.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def cell(text: Any) -> str:
    """Text for one cell of a Markdown table (a ``|`` escaped, lines joined)."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table of ``rows`` under ``header``, one line each, ending in a newline."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
