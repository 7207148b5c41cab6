"""Scale-out by frequency on one host: N ``xengine correlate`` processes, each with its own
channel group (``chan0``, port), fed by the F-engines' packets for their channels, then
``xengine combine`` joins their files (katgpucbf's XB-engines and HERA's X-engines split the
band the same way). ``pipelines/fx.py --xengines N`` runs it on loopback."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..capture.spead import FrameSender, udp_sender
from ..geometry import Geometry
from .combine import combine
from .instances import CorrelateProcess, channel_split, toml_text


class ChannelSlice:
    """Sends one channel group of full-band frames through an instance's sender."""

    def __init__(self, sender: FrameSender, chan0: int, nchan: int) -> None:
        self.sender, self.chan0, self.nchan = sender, chan0, nchan

    def send_frames(self, frames: np.ndarray, time_tag: int) -> None:
        self.sender.send_frames(frames[:, :, self.chan0:self.chan0 + self.nchan], time_tag)

    def close(self) -> None:
        self.sender.close()


def instance_config(*, chan0: int, nchan: int, g: Geometry, sky: dict[str, float],
                    array: Path | None, nant: int, backend: str, ninteg: int,
                    like_top_s: float) -> dict[str, Any]:
    """One instance's config (band-wide ``freq0_hz``; loopback, any free ports)."""
    cfg: dict[str, Any] = {"array": str(array.resolve())} if array else {"nant": nant}
    cfg.update({
        "band": {k: sky[k] for k in ("sync_time", "fs_hz", "freq0_hz", "chan_bw_hz")},
        "capture": {"sources": ["udp://127.0.0.1:0"], "chan0": chan0, "nchan": nchan,
                    "npacket": g.npacket, "sample_bits": g.sample_bits,
                    "nibble_order": g.nibble_order},
        "correlator": {"backend": backend, "ninteg": ninteg},
        "output": {"directory": "data"},
        "monitor": {"metrics_port": 0, "like_top_s": like_top_s},
    })
    return cfg


def run_scaleout(n: int, g: Geometry, *, out: Path, sky: dict[str, float], nframe: int,
                 send: Callable[[list[Any]], None], array: Path | None = None, nant: int = 0,
                 backend: str = "auto", ninteg: int = 1, rate_gbps: float = 0.0,
                 like_top_s: float = 0.0) -> dict[str, Any]:
    """Start ``n`` instances under ``out/xengine-<i>/``, ``send(senders)`` the band (one sender
    per instance, each taking its channel group of full-band frames), stop them with SIGTERM
    once their packets arrived, join their files into ``out/combined``; the summary."""
    splits = channel_split(g.nchan, g.nchan_pkt, n)
    procs: list[CorrelateProcess] = []
    try:
        for i, (c0, nc) in enumerate(splits):
            d = out / f"xengine-{i}"
            d.mkdir(parents=True, exist_ok=True)
            cfg = d / "correlate.toml"
            cfg.write_text(toml_text(instance_config(
                chan0=c0, nchan=nc, g=g, sky=sky, array=array, nant=nant, backend=backend,
                ninteg=ninteg, like_top_s=like_top_s)))
            procs.append(CorrelateProcess(cfg, stderr_to=sys.stderr))
        senders = []
        for p, (c0, nc) in zip(procs, splits, strict=True):
            sub = g.replace(nchan=nc)  # sample bits and nibble order as the band's
            senders.append(ChannelSlice(udp_sender(sub, port=p.port, rate_gbps=rate_gbps / n,
                                                   chan0=c0), c0, nc))
        send(senders)
        for p, (_, nc) in zip(procs, splits, strict=True):
            p.wait_packets(nframe * g.nstream * (nc // g.nchan_pkt))
        summaries = [p.finish() for p in procs]
    finally:
        for p in procs:
            if p.proc.poll() is None:
                p.proc.kill()
    combined = combine([out / f"xengine-{i}" / "data" for i in range(n)], out / "combined")
    return {"instances": summaries, "combined": [str(f) for f in combined]}
