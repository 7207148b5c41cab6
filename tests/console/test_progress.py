"""Progress: a bar redrawn in place on a terminal, plain rate-limited lines otherwise."""

from __future__ import annotations

import io

from xengine_block.console.progress import Progress


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_log_stream_gets_plain_lines_without_carriage_returns():
    s = io.StringIO()
    with Progress("combine", 4, unit="files", stream=s, interval_s=3600) as p:
        for _ in range(4):
            p.update(1, "x")
    lines = s.getvalue().splitlines()
    assert "\r" not in s.getvalue() and len(lines) == 1  # rate-limited: only the final line
    assert lines[0].startswith("combine: [4/4] files 100%")


def test_terminal_gets_one_bar_redrawn_in_place():
    s = Tty()
    with Progress("reprocess", 2, stream=s) as p:
        p.update(1)
        p.update(1)
    out = s.getvalue()
    assert out.count("\n") == 1 and out.count("\r") >= 2 and "#" * 30 in out


def test_open_ended_count():
    s = io.StringIO()
    with Progress("record", unit="MB", stream=s, interval_s=0) as p:
        p.update(2.5)
    assert s.getvalue().splitlines()[-1].startswith("record: 2.5 MB in")
