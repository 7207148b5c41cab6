#!/usr/bin/env python3
"""The screenshots of docs/display.md (and the README's), taken in a real browser: Debian's
Chromium driven by Playwright (``pip install -e '.[browser]'``; no browser download).

    python scripts/display_screenshots.py [--out docs]

1. ``display.png``: ``xengine view`` over the files of ``pipelines/fx.py --nant 16 --dumps 8``
   (the point source at altitude 60, azimuth 120, with receiver noise);
2. ``display-live.png``: ``xengine correlate --display 127.0.0.1:0`` fed over UDP by the same
   simulator from this script (an independent sender), one input dead (its packets sent as
   zeros), so the autos mark it.
"""

from __future__ import annotations

import argparse
import glob
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from xengine_block.array import default_array
from xengine_block.capture.spead import frame_datagrams
from xengine_block.geometry import Geometry
from xengine_block.service.instances import CorrelateProcess, toml_text
from xengine_block.sim.fengine import FEngineSimulator, PointSource, icrs_at_altaz

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
NANT = 16
SYNC = 1780272000.0


def shoot(url: str, path: Path, click: tuple[int, int] | None = None) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        ctx = browser.new_context(bypass_csp=True, viewport={"width": 1400, "height": 1150})
        page = ctx.new_page()
        page.goto(url)
        page.wait_for_function("window.xdisplay && window.xdisplay.shown !== null",
                               timeout=60000)
        if click is not None:  # select a longer baseline: a clear phase slope
            page.evaluate(f"() => {{ window.xdisplay.sel = {{ant1: {click[0]}, ant2: "
                          f"{click[1]}, pol: 'xx'}}; }}")
            page.wait_for_function(f"!window.xdisplay.busy && window.xdisplay.shown !== null "
                                   f"&& JSON.parse(window.xdisplay.shown)[1].ant2 === "
                                   f"{click[1]}", timeout=60000)
        page.wait_for_timeout(800)
        page.screenshot(path=str(path), full_page=True)
        browser.close()
    print(f"wrote {path}")


def files_view(out: Path, work: Path) -> None:
    subprocess.run([sys.executable, str(ROOT / "pipelines" / "fx.py"), "--nant", str(NANT),
                    "--dumps", "8", "--transport", "inproc", "--backend", "cpu", "--out",
                    str(work / "fx")], check=True, stdout=subprocess.DEVNULL)
    files = sorted(glob.glob(str(work / "fx" / "**" / "*.uvh5"), recursive=True))
    view = subprocess.Popen([sys.executable, "-m", "xengine_block.cli", "view", *files],
                            stdout=subprocess.PIPE, text=True)
    try:
        url = view.stdout.readline().rsplit(" at ", 1)[1].strip()
        shoot(url, out / "display.png", click=(0, 11))
    finally:
        view.terminate()
        view.wait(30)


def live_view(out: Path, work: Path) -> None:
    g = Geometry(nstream=2 * NANT, nchan=9, npacket=4)
    array = default_array(NANT)
    config = {"nant": NANT, "band": {"sync_time": SYNC, "fs_hz": 40e3, "freq0_hz": 150e6,
                                     "chan_bw_hz": 1e6},
              "capture": {"sources": ["udp://127.0.0.1:0"], "nchan": 9, "npacket": 4},
              "correlator": {"backend": "cpu", "ninteg": 2},
              "output": {"directory": str(work / "live")}, "monitor": {"like_top_s": 0},
              "display": {"address": "127.0.0.1:0"}}
    path = work / "live.toml"
    path.write_text(toml_text(config))
    inst = CorrelateProcess(path)
    try:
        ready = inst.wait_ready()
        port = int(ready["sources"][0].rpartition(":")[2])
        sim = FEngineSimulator(array, g, sync_time=SYNC, fs_hz=40e3, freq0_hz=150e6,
                               chan_bw_hz=1e6, sources=[PointSource.from_skycoord(
                                   icrs_at_altaz(array, SYNC, 60, 120))],
                               noise_sigma=1.0, gain=16.0, seed=1)
        frames = sim.frames(0, 8 * 12)
        frames[:, 7] = 0  # antenna 3's y input dead
        per_frame = g.nstream * g.nchan // g.nchan_pkt
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for i, (*_, d) in enumerate(frame_datagrams(frames, g, 0)):
                s.sendto(d, ("127.0.0.1", port))
                if i % per_frame == per_frame - 1:
                    time.sleep(0.02)
        time.sleep(2)
        shoot(ready["display_url"], out / "display-live.png", click=(0, 11))
    finally:
        inst.finish()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=ROOT / "docs")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        files_view(a.out, Path(tmp))
        live_view(a.out, Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
