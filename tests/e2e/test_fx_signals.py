"""SIGTERM / SIGINT end ``pipelines/fx.py`` normally: exit 0 within a few
seconds, the UVH5 file closed and readable by pyuvdata, the summary written and saying which
signal stopped the run; further Ctrl-Cs print no traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pyuvdata = pytest.importorskip("pyuvdata", reason="pyuvdata (test extra) reads the outputs")
ROOT = Path(__file__).resolve().parents[2]
FX = ROOT / "pipelines" / "fx.py"


def start_fx(out: Path, transport: str) -> subprocess.Popen:
    args = ["--nant", "4", "--npacket", "1", "--dumps", "100000", "--transport", transport,
            "--out", str(out), "--monitor", "0.2", "--backend", "cpu"]
    return subprocess.Popen([sys.executable, "-u", str(FX), *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_for_dumps(proc: subprocess.Popen, n: int, timeout: float = 120) -> str:
    """Read the monitor lines until the writer has written ``n`` dumps; returns the output."""
    seen, t0 = [], time.monotonic()
    while time.monotonic() - t0 < timeout:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        if line.startswith("UVH5WriterBlock") and int(line.split()[1]) >= n:
            return "".join(seen)
    raise AssertionError(f"fx.py did not write {n} dumps: {''.join(seen[-20:])}")


@pytest.mark.parametrize(("signals", "transport"), [
    ([signal.SIGTERM], "inproc"),
    ([signal.SIGINT], "udp"),
    ([signal.SIGINT, signal.SIGINT, signal.SIGINT], "inproc"),  # impatient Ctrl-C Ctrl-C Ctrl-C
], ids=["SIGTERM-inproc", "SIGINT-udp", "SIGINTx3-inproc"])
def test_signal_is_a_normal_end(tmp_path, signals, transport):
    out = tmp_path / "out"
    proc = start_fx(out, transport)
    try:
        head = wait_for_dumps(proc, 3)
        t0 = time.monotonic()
        for i, sig in enumerate(signals):
            if i:
                time.sleep(0.4)  # the later ones land during shutdown and after the pipeline
            if proc.poll() is None:
                try:
                    os.kill(proc.pid, sig)
                except ProcessLookupError:
                    pass
        tail, _ = proc.communicate(timeout=30)
        elapsed = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    text = head + tail
    assert proc.returncode == 0, text[-3000:]
    # ~1.5 s of shutdown (files closed, quick-look drawn) plus ~2 s of interpreter teardown; a
    # sender thread that is not joined promptly would hold it to the 30 s timeout above. The
    # bound sits between, with room for a loaded 2-core machine.
    assert elapsed < 20.0, f"took {elapsed:.1f} s to stop"
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text[-3000:]
    name = signal.Signals(signals[0]).name
    assert f"fx: stopped by {name} after" in text
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stopped_by"] == name and summary["dumps_written"] >= 3
    (uvh5,) = out.glob("*.uvh5")
    assert [str(uvh5)] == summary["files"]
    uv = pyuvdata.UVData.from_file(uvh5)
    uv.check()
    assert uv.Ntimes == summary["dumps_written"]
