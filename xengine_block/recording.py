"""Recordings: pcap files of F-engine SPEAD traffic plus a JSON sidecar ``FILE.pcap.json``
holding what the packets do not carry (array description, geometry, sync time, sample rate,
frequencies), so a recording can be correlated again later without any other input."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .array import ArrayDescription
from .geometry import Geometry

FORMAT = "xengine_block recording 1"


def metadata_path(pcap: str | os.PathLike) -> Path:
    return Path(str(pcap) + ".json")


@dataclass(frozen=True)
class RecordingInfo:
    array: ArrayDescription
    geometry: Geometry
    sky: dict[str, float]  # sync_time, fs_hz, freq0_hz, chan_bw_hz
    chan0: int = 0


def write_metadata(pcap: str | os.PathLike, array: ArrayDescription, geometry: Geometry, *,
                   sync_time: float, fs_hz: float, freq0_hz: float, chan_bw_hz: float,
                   chan0: int = 0) -> Path:
    path = metadata_path(pcap)
    doc: dict[str, Any] = {"format": FORMAT, "array": array.to_dict(),
                           "geometry": geometry.to_dict(), "chan0": chan0,
                           "sky": {"sync_time": sync_time, "fs_hz": fs_hz,
                                   "freq0_hz": freq0_hz, "chan_bw_hz": chan_bw_hz}}
    path.write_text(json.dumps(doc, indent=1))
    return path


def read_metadata(pcap: str | os.PathLike) -> RecordingInfo:
    """The sidecar of ``pcap``; errors name the file and what is wrong."""
    path = metadata_path(pcap)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{pcap}: no metadata sidecar {path.name} (written by "
                                f"'xengine record' and 'pipelines/fx.py --record')") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON: {exc}") from None
    if doc.get("format") != FORMAT:
        raise ValueError(f"{path}: format {doc.get('format')!r}, expected {FORMAT!r}")
    try:
        sky = {k: float(doc["sky"][k]) for k in ("sync_time", "fs_hz", "freq0_hz", "chan_bw_hz")}
        return RecordingInfo(ArrayDescription.from_dict(doc["array"]),
                             Geometry.from_dict(doc["geometry"]), sky, int(doc.get("chan0", 0)))
    except KeyError as exc:
        raise ValueError(f"{path}: missing field {exc}") from None
