"""Configs for ``xengine correlate`` tests (instances run via the library's CorrelateProcess)."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any

import numpy as np

from xengine_block.capture.spead import frame_datagrams
from xengine_block.geometry import Geometry
from xengine_block.service.instances import CorrelateProcess as Instance  # noqa: F401
from xengine_block.service.instances import toml_text

ROOT = Path(__file__).resolve().parents[2]

BASE = {
    "nant": 8,
    "band": {"sync_time": 1.7e9, "fs_hz": 40e3, "freq0_hz": 150e6},
    "capture": {"sources": ["udp://127.0.0.1:0"], "nchan": 9, "npacket": 4},
    "correlator": {"backend": "cpu", "ninteg": 2},
    "output": {"directory": "out"},
    "monitor": {"like_top_s": 0, "metrics_port": 0},
}


def write_config(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(toml_text(config))
    return path


def write_latin1_config(path: Path, config: dict[str, Any]) -> int:
    """``config`` with output.prefix ``"café_"``, written in Latin-1 (an editor's encoding, not
    TOML's UTF-8); returns the line of the "é" byte (0xe9)."""
    text = toml_text(merged(config, output={"prefix": "cafe_"}))
    data = text.replace('"cafe_"', '"caf\u00e9_"').encode("latin-1")
    path.write_bytes(data)
    return 1 + data[:data.index(b"\xe9")].count(b"\n")


def merged(base: dict[str, Any], **sections: Any) -> dict[str, Any]:
    """``base`` with tables updated, top-level keys set, or removed (None)."""
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in base.items()}
    for name, table in sections.items():
        if isinstance(table, dict):
            out.setdefault(name, {}).update(table)
        elif table is None:
            out.pop(name, None)
        else:
            out[name] = table
    return out


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT) + os.pathsep + e.get("PYTHONPATH", "")
    return e


def send(frames: np.ndarray, g: Geometry, port: int, time_tag: int = 0, pace_s: float = 0.002,
         extra: list[bytes] = ()) -> int:
    """An independent sender: prebuilt datagrams over a plain socket; returns packets sent.

    ``extra`` datagrams go right after the first frame's (inside the reorder window)."""
    datagrams = [d for *_, d in frame_datagrams(frames, g, time_tag)]
    per_frame = g.nstream * g.nchan // g.nchan_pkt
    datagrams[per_frame:per_frame] = list(extra)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for i, d in enumerate(datagrams):
            s.sendto(d, ("127.0.0.1", port))
            if i % per_frame == per_frame - 1:
                time.sleep(pace_s)
    return len(datagrams)
