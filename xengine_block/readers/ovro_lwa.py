"""OVRO-LWA triggered voltage buffer dumps: a JSON header, then every stand's channels for
each spectrum, read in place.

Facts (LSL's ``ovro_tbf`` branch, ``lsl/reader/ovro.py`` and ``ovro.c``; the writer, the
OVRO-LWA X-engine pipeline's ``TriggeredDump`` block, whose docstring gives the file layout):

- little-endian uint32 ``hsize`` (bytes of JSON), uint32 ``hblock_size`` (the header block:
  1 MiB, ``HEADER_SIZE``), the JSON header (the Bifrost sequence header, with ``seq``: the
  spectrum number of the file's first spectrum), data from byte ``hblock_size`` to the end;
- header keys used: ``nchan``, ``nstand`` (352), ``npol`` (2), ``chan0`` (first channel),
  ``seq``; ``nbit`` where given must be 4;
- data ``[time][chan][stand][pol]``, one byte per sample, 4+4-bit two's complement with the
  real part in the high nibble (``gofast.c`` ``ovroLUT``: ``t = (i >> 4*(1-j)) & 15``, j = 0
  real; ``ovro.c`` indexes it with a plain ``char``, i.e. a negative index for bytes >= 128 on
  x86: the table is what is meant, the indexing an LSL bug): SampleLayout ``ci4 re_high``;
- spectrum ``k`` of a file has time tag ``(seq + k) * 8192`` ticks of 196 MHz since the Unix
  epoch (``ovro.py`` ``read_frame``; the writer's ``seq_to_time_tag``), not the header's
  ``time_tag`` (a counter); channel c is centred at ``c * 196 MHz / 8192``
  (``channel_freqs``).
- The writer names its files ``lwa-dump-<trigger time>.tbf.<N>``, N = 0, 1, ... for one
  trigger's consecutive files: one recording here, each file a part (its own output).

Stand positions are not in the file: ``--array`` (an array TOML whose antenna numbers are the
stand numbers, 1..nstand in the file's order).
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..frames import pack_ci4
from ..sample_layout import SampleLayout
from .base import Recording, RecordingError, RecordingMeta, Run
from .guppi import number
from .lwa import FS_HZ, NDP_TICKS

#: The writer's header block (``HEADER_SIZE``).
HEADER_BLOCK = 1 << 20
#: Largest JSON header believed (the header block's size, at most 64 MiB).
MAX_HEADER = 64 << 20
_PART = re.compile(r"^(?P<stem>.*)\.(?P<n>\d+)$")


def dump_header(head: bytes) -> tuple[int, dict[str, Any]] | None:
    """(header block size, JSON header) if ``head`` starts an OVRO-LWA dump; else None."""
    if len(head) < 9:
        return None
    hsize, hblock = struct.unpack_from("<II", head)
    if not 2 <= hsize <= len(head) - 8 or hblock < hsize + 8 or hblock > MAX_HEADER:
        return None
    if head[8:9] != b"{":
        return None
    try:
        hdr = json.loads(head[8:8 + hsize].decode("utf-8").rstrip("\0"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(hdr, dict) or not {"nchan", "nstand", "npol"} <= set(hdr):
        return None
    return hblock, hdr


class OvroLwaRecording(Recording):
    """One trigger's OVRO-LWA voltage buffer dump files (see the module docstring)."""

    format = "ovro-lwa"

    @classmethod
    def sniff(cls, head: bytes, path: Path) -> bool:
        return dump_header(head) is not None

    @classmethod
    def group(cls, paths: Sequence[Path]) -> list[list[Path]]:
        """One recording per trigger: ``NAME.0, NAME.1, ...`` in order (others alone)."""
        by_stem: dict[str, list[tuple[int, Path]]] = {}
        for p in paths:
            m = _PART.match(p.name)
            key = str(p.with_name(m["stem"])) if m else str(p)
            by_stem.setdefault(key, []).append((int(m["n"]) if m else 0, p))
        return [[p for _, p in sorted(v)] for _, v in sorted(by_stem.items())]

    def _index(self) -> tuple[RecordingMeta, list[Run]]:
        runs: list[Run] = []
        ref: _Shape | None = None  # the first file's
        for fi, path in enumerate(self.files):
            buf = self.map(fi)
            where = f"{path}: "
            hsize = int(buf[:4].view("<u4")[0]) if len(buf) >= 8 else 0
            got = dump_header(bytes(buf[:8 + min(hsize, MAX_HEADER)]))
            if got is None:
                raise RecordingError(f"{where}no OVRO-LWA dump header (uint32 sizes, then JSON "
                                     f"with nchan, nstand, npol)")
            hblock, hdr = got
            shape = _Shape(hdr, where)
            if ref is None:
                ref = shape
            elif shape.key() != ref.key():
                raise RecordingError(f"{where}not the shape and channels of "
                                     f"{self.files[0].name}")
            data = max(len(buf) - hblock, 0)
            nspec, cut = divmod(data, shape.layout.frame_bytes)
            self.damage.add(path, "truncated_bytes", cut)
            if len(buf) < hblock:
                self.damage.add(path, "truncated_bytes", len(buf))
            if nspec:
                runs.append(Run(fi, hblock, shape.layout, nspec, shape.seq - ref.seq))
        assert ref is not None
        runs.sort(key=lambda r: r.time_tag)
        kept: list[Run] = []
        for r in runs:  # a file overlapping the one before: its spectra repeat, skipped
            if kept and r.time_tag < kept[-1].end:
                self.damage.add(self.files[r.file], "time_disorder", r.nframe)
                continue
            if kept and r.time_tag > kept[-1].end:
                self.damage.add(self.files[r.file], "gap_blocks", 1)
                self.damage.add(self.files[r.file], "gap_spectra", r.time_tag - kept[-1].end)
            kept.append(r)
        fc = FS_HZ / NDP_TICKS
        meta = RecordingMeta(self.format, ref.nstand, ref.nchan, ref.seq * NDP_TICKS / FS_HZ,
                             fc, ref.chan0 * fc, fc, "ci4", None, "OVRO-LWA", ref.chan0,
                             antenna_numbers=tuple(range(1, ref.nstand + 1)))
        return meta, kept

    def array(self) -> None:
        raise RecordingError(f"{self.files[0]}: an OVRO-LWA dump holds no stand positions: pass "
                             f"--array ARRAY.toml whose antenna numbers are the stand numbers "
                             f"(1..{self.meta.nant})")

    @classmethod
    def part_name(cls, files: Sequence[Path], part: int) -> str:
        return files[part].name


class _Shape:
    """A dump header's sizes; RecordingError naming the key."""

    def __init__(self, hdr: Mapping[str, Any], where: str) -> None:
        self.nchan = number(hdr, "nchan", kind=int, where=where)
        self.nstand = number(hdr, "nstand", kind=int, where=where)
        npol = number(hdr, "npol", kind=int, where=where)
        nbit = number(hdr, "nbit", 4, kind=int, where=where)
        self.chan0 = number(hdr, "chan0", kind=int, where=where)
        self.seq = number(hdr, "seq", kind=int, where=where)
        if npol != 2:
            raise RecordingError(f"{where}npol = {npol}: streams are a stand's two pols")
        if nbit != 4:
            raise RecordingError(f"{where}nbit = {nbit}: OVRO-LWA dumps are 4+4-bit")
        if not 1 <= self.nchan <= 4096 or not 1 <= self.nstand <= 4096:
            raise RecordingError(f"{where}nchan = {self.nchan}, nstand = {self.nstand}: "
                                 f"expected 1..4096 each")
        if not 0 <= self.chan0 <= 4096 - self.nchan or self.seq < 0:
            raise RecordingError(f"{where}chan0 = {self.chan0}, seq = {self.seq}: channels "
                                 f"must lie in 0..4095 and seq be a spectrum number")
        self.layout = SampleLayout.from_axes([("freq", self.nchan), ("stream", 2 * self.nstand)],
                                             encoding="ci4", nibble_order="re_high")

    def key(self) -> tuple:
        return (self.nchan, self.nstand, self.chan0)


def write_dump(path: str | Path, samples: np.ndarray, *, chan0: int, seq: int,
               extra: Mapping[str, Any] | None = None) -> Path:
    """An OVRO-LWA dump of ``samples`` (int8 ``[time, chan, stand, pol, 2]`` within -8..7)
    laid out as ``TriggeredDump`` writes it. For tests and examples."""
    x = np.asarray(samples)
    ntime, nchan, nstand = x.shape[:3]
    hdr = {"seq0": seq, "seq": seq, "chan0": chan0, "nchan": nchan, "nstand": nstand,
           "npol": 2, "nbit": 4, "fs_hz": FS_HZ, "time_tag": 12345, "pipeline_id": 0,
           "_tensor": {"dtype": "ci4", "shape": [-1, nchan, nstand, 2],
                       "labels": ["time", "freq", "station", "pol"]}, **(extra or {})}
    text = json.dumps(hdr).encode()
    packed = pack_ci4(x)
    path = Path(path)
    with open(path, "wb") as f:
        f.write((struct.pack("<II", len(text), HEADER_BLOCK) + text).ljust(HEADER_BLOCK, b"\0"))
        f.write(packed.tobytes())
    return path
