"""Recordings: pcap files of F-engine SPEAD traffic plus a JSON sidecar ``FILE.pcap.json``
holding what the packets do not carry (array description, geometry, sync time, sample rate,
frequencies), so a recording can be correlated again later without any other input.

Both halves can be damaged, and a damaged recording must not pass as fine: :func:`read_metadata`
checks every sidecar field with bounds (one line naming the field), and :func:`scan_pcap` walks
the pcap records on its own, counting what no receiver would report (bytes that are no record,
records that are not SPEAD, a cut-off last record). A sidecar closed with
:func:`finish_metadata` also holds the file's final size, so a file cut at a record boundary
is caught too.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..array import ArrayDescription, ArrayError
from ..geometry import Geometry, GeometryError
from . import pcap

FORMAT = "xengine_block recording 1"
#: Sky fields of a sidecar: (name, lower bound, whether the bound is exclusive).
_SKY = (("sync_time", 0.0, False), ("fs_hz", 0.0, True), ("freq0_hz", 0.0, True),
        ("chan_bw_hz", 0.0, True))


def metadata_path(pcap: str | os.PathLike) -> Path:
    return Path(str(pcap) + ".json")


@dataclass(frozen=True)
class RecordingInfo:
    array: ArrayDescription
    geometry: Geometry
    sky: dict[str, float]  # sync_time, fs_hz, freq0_hz, chan_bw_hz
    chan0: int = 0
    #: Size of the pcap file when its recorder closed it (None: not recorded).
    pcap_bytes: int | None = None


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


def finish_metadata(pcap: str | os.PathLike) -> None:
    """Note the closed pcap file's size in its sidecar (reprocessing then knows a cut file)."""
    path = metadata_path(pcap)
    doc = json.loads(path.read_text())
    doc["pcap_bytes"] = os.stat(pcap).st_size
    path.write_text(json.dumps(doc, indent=1))


class MetadataError(ValueError):
    """A sidecar is missing a field or holds an impossible value; one line naming it."""


def _number(doc: Mapping[str, Any], key: str, where: str, low: float, exclusive: bool) -> float:
    if key not in doc:
        raise MetadataError(f"{where}{key} is missing")
    v = doc[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise MetadataError(f"{where}{key} must be a finite number, got {v!r}")
    if v < low or (exclusive and v == low):
        raise MetadataError(f"{where}{key} must be {'>' if exclusive else '>='} {low:g}, "
                            f"got {v!r}")
    return float(v)


def _object(doc: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    if key not in doc:
        raise MetadataError(f"{key} is missing")
    if not isinstance(doc[key], Mapping):
        raise MetadataError(f"{key} must be an object, got {type(doc[key]).__name__}")
    return doc[key]


def _count(doc: Mapping[str, Any], key: str) -> int | None:
    v = doc.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise MetadataError(f"{key} must be a non-negative integer, got {v!r}")
    return v


def parse_metadata(doc: Any) -> RecordingInfo:
    """Validate a parsed sidecar; MetadataError names the first bad field."""
    if not isinstance(doc, Mapping):
        raise MetadataError(f"the sidecar must be a JSON object, got {type(doc).__name__}")
    if doc.get("format") != FORMAT:
        raise MetadataError(f"format is {doc.get('format')!r}, expected {FORMAT!r}")
    sky_doc = _object(doc, "sky")
    sky = {k: _number(sky_doc, k, "sky.", low, excl) for k, low, excl in _SKY}
    try:
        array = ArrayDescription.from_dict(_object(doc, "array"))
    except ArrayError as exc:
        raise MetadataError(f"array: {exc}") from None
    try:
        geometry = Geometry.from_dict(_object(doc, "geometry"))
    except GeometryError as exc:
        raise MetadataError(f"geometry.{exc}" if exc.field and str(exc).startswith(exc.field)
                            else f"geometry: {exc}") from None
    if geometry.nstream != array.nstream:
        raise MetadataError(f"geometry.nstream {geometry.nstream} differs from the array's "
                            f"{array.nstream} streams (2 per antenna)")
    chan0 = _count(doc, "chan0") or 0
    return RecordingInfo(array, geometry, sky, chan0, _count(doc, "pcap_bytes"))


def read_metadata(pcap: str | os.PathLike) -> RecordingInfo:
    """The sidecar of ``pcap``; errors name the file and what is wrong, in one line."""
    path = metadata_path(pcap)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{pcap}: no metadata sidecar {path.name} (written by "
                                f"'xengine record' and 'pipelines/fx.py --record')") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise MetadataError(f"{path}: not valid JSON: {exc}") from None
    try:
        return parse_metadata(doc)
    except MetadataError as exc:
        raise MetadataError(f"{path}: {exc}") from None


# ---------------------------------------------------------------------------- pcap damage
@dataclass
class PcapScan:
    """What a pcap file holds, record by record (independent of the SPEAD receiver)."""

    records: int = 0  # well-formed records
    spead: int = 0  # of them, SPEAD packets over Ethernet/IPv4/UDP
    undecodable: int = 0  # well-formed records that are not SPEAD over Ethernet/IPv4/UDP
    garbage_regions: int = 0  # stretches of bytes that are no record (skipped to the next)
    garbage_bytes: int = 0
    truncated_bytes: int = 0  # a last record cut short by the end of the file
    file_bytes: int = 0

    @property
    def damage(self) -> dict[str, int]:
        """The non-zero damage counters."""
        d = {"undecodable": self.undecodable, "garbage_bytes": self.garbage_bytes,
             "truncated_bytes": self.truncated_bytes}
        return {k: v for k, v in d.items() if v}

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def scan_pcap(path: str | os.PathLike) -> PcapScan:
    """Walk every record; bytes that are no record are skipped up to the next position where
    two consecutive plausible record headers (or one and the end of file) follow (compiled:
    :func:`.pcap.walk`).

    Raises ValueError naming the file when it is not a pcap file at all.
    """
    buf, mm, (big, frac_limit, snaplen, linktype) = pcap.open_pcap(path)
    try:
        res = pcap.walk(buf, big, frac_limit, snaplen, linktype)
        return PcapScan(records=int(res[pcap.REC]), spead=int(res[pcap.SPEAD]),
                        undecodable=int(res[pcap.UNDECODABLE]),
                        garbage_regions=int(res[pcap.GARBAGE_REGIONS]),
                        garbage_bytes=int(res[pcap.GARBAGE_BYTES]),
                        truncated_bytes=int(res[pcap.TRUNCATED]), file_bytes=buf.size)
    finally:
        del buf
        pcap.close(mm)
