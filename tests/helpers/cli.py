"""Command-line test assertions: a bad option is one line naming it, exit status 2."""

from __future__ import annotations

from pathlib import Path

import pytest


def assert_usage_error(run, argv: list[str], option: str, capsys, workdir: Path) -> None:
    before = sorted(workdir.iterdir())
    with pytest.raises(SystemExit) as info:
        run(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert f"argument {option}" in lines[0] or (option == "" and "error:" in lines[0]), err
    assert sorted(workdir.iterdir()) == before  # no directory or file created
