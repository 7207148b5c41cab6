"""PSRDADA files of channelised complex voltages: an ASCII header of ``KEY value`` lines in
``HDR_SIZE`` bytes, then the samples, read in place from the file's memory map.

Facts (checked in the files named; ``docs/reprocess.md`` has the list):

- Header: ``KEY value # comment`` lines, ``HDR_SIZE`` bytes (default 4096) padded with NULs;
  ``UTC_START`` (``yyyy-mm-dd-hh:mm:ss``) of the first sample, ``OBS_OFFSET`` bytes since it,
  ``TSAMP`` microseconds, ``FREQ`` centre and ``BW`` bandwidth in MHz (negative: lower
  sideband, channels high to low), ``NBIT``, ``NDIM`` (2 = complex), ``NPOL``, ``NCHAN``
  (baseband dada/header.py and the Effelsberg sample).
- Sample order: ``ORDER`` where the header says it. Without it, time-major with the
  polarisation before the channel (``[time][pol][chan][re, im]``), as baseband decodes every
  DADA payload (dada/payload.py: sample shape ``(npol, nchan)``); ``ORDER TFP`` puts the channel
  before the polarisation. One channel: the two are the same.
- MeerKAT FBFUSE (F-engine capture of several antennas): ``NANTS``, ``ANTS`` (comma-separated
  names), ``ORDER TAFTP``: ``[heap time][antenna][chan][256 spectra][pol][re, im]``
  (MPIfR-BDG/mpikat fbfuse_mkrecv_config.py header template; psrdada_cpp fbfuse
  ``FBFUSE_NSAMPLES_PER_HEAP 256`` and the TAFTP kernels).
- 8-bit (int8) and 16-bit samples, and 4-bit: one byte per complex sample, two's complement
  nibbles, the **real part in the low nibble** (first value least significant), as dspsr's
  ``GenericFourBitUnpacker`` unpacks every ``NBIT 4`` file (``BitTable::TwosComplement``,
  ``LeastToMost``: the nibbles in TFPD order, so with ``NDIM 2`` re then im in one byte). That
  is the opposite of GUPPI's and Bifrost's ci4 (real high). Real-sampled data (``NDIM 1``) are
  not channelised voltages: refused.
- A sequence of files of one observation (same ``UTC_START``) continues through ``OBS_OFFSET``;
  a jump is missing data.
"""

from __future__ import annotations

import calendar
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..sample_layout import SampleLayout
from .base import Recording, RecordingError, RecordingMeta, Run, merge_runs
from .guppi import number

HDR_SIZE = 4096
#: Spectra per heap in MeerKAT FBFUSE's TAFTP order (psrdada_cpp fbfuse_constants.hpp).
FBFUSE_HEAP_SPECTRA = 256
ORDERS = ("TPF", "TFP", "TAFTP")
ENCODINGS = {4: "ci4", 8: "ci8", 16: "ci16"}


def parse_dada_header(head: bytes | np.ndarray) -> dict[str, str]:
    """``KEY value`` lines up to the first NUL (comments after ``#`` dropped); values are
    kept as text (:func:`~xengine_block.readers.guppi.number` converts)."""
    raw = bytes(head[:HDR_SIZE]) if len(head) >= HDR_SIZE else bytes(head)
    text = raw.split(b"\0", 1)[0].decode("latin-1")
    hdr: dict[str, str] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        key, _, value = line.partition(" ")
        hdr[key] = value.strip()
    return hdr


def looks_dada(head: bytes) -> dict[str, str] | None:
    """The header if ``head`` starts with a DADA header (``HDR_SIZE`` among its keys)."""
    if not head[:1].isalpha():
        return None
    try:
        hdr = parse_dada_header(head)
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes anything
        return None
    return hdr if "HDR_SIZE" in hdr else None


def utc_unix(text: str, where: str = "") -> float:
    """``yyyy-mm-dd-hh:mm:ss[.fff]`` (UTC) -> unix seconds."""
    try:
        y, mo, d, rest = text.split("-", 3)
        hh, mm, ss = rest.split(":")
        sec = float(ss)
        whole = calendar.timegm((int(y), int(mo), int(d), int(hh), int(mm), int(sec), 0, 0, 0))
        return whole + (sec - int(sec))
    except ValueError:
        raise RecordingError(f"{where}UTC_START = {text!r} is not yyyy-mm-dd-hh:mm:ss") from None


class DadaRecording(Recording):
    """A PSRDADA file, or the files of one observation (see the module docstring)."""

    format = "dada"

    @classmethod
    def sniff(cls, head: bytes, path: Path) -> bool:
        return looks_dada(head) is not None

    @classmethod
    def group(cls, paths: Sequence[Path]) -> list[list[Path]]:
        """Files of one observation (same directory and UTC_START) in OBS_OFFSET order."""
        groups: dict[tuple, list[tuple[float, Path]]] = {}
        for p in paths:
            with open(p, "rb") as f:
                hdr = looks_dada(f.read(HDR_SIZE)) or {}
            key = (str(p.parent), hdr.get("UTC_START") or str(p), hdr.get("ANTS", ""))
            try:
                offset = float(hdr.get("OBS_OFFSET", 0))
            except ValueError:
                offset = 0.0
            groups.setdefault(key, []).append((offset, p))
        return sorted(([p for _, p in sorted(v)] for v in groups.values()),
                      key=lambda files: str(files[0]))

    def _index(self) -> tuple[RecordingMeta, list[Run]]:
        runs: list[Run] = []
        first: Mapping[str, Any] | None = None
        prev_end = None
        for fi, path in enumerate(self.files):
            buf = self.map(fi)
            hdr = looks_dada(bytes(buf[:HDR_SIZE]))
            where = f"{path}: "
            if hdr is None:
                raise RecordingError(f"{where}no DADA header (KEY value lines with HDR_SIZE)")
            shape = DadaShape(hdr, where)
            if first is None:
                first, ref = hdr, shape
            elif shape.key() != ref.key():
                raise RecordingError(f"{where}the samples' shape differs from "
                                     f"{self.files[0].name}'s")
            offset = number(hdr, "OBS_OFFSET", 0, kind=int, where=where)
            if offset % shape.spectrum_bytes:
                raise RecordingError(f"{where}OBS_OFFSET = {offset} is not a whole number of "
                                     f"spectra of {shape.spectrum_bytes} bytes")
            t = offset // shape.spectrum_bytes
            data = len(buf) - shape.hdr_size
            nframe, cut = divmod(max(data, 0), shape.frame_bytes)
            self.damage.add(path, "truncated_bytes", cut)
            if prev_end is not None and t != prev_end:
                if t < prev_end:
                    self.damage.add(path, "time_disorder")
                    continue
                self.damage.add(path, "gap_blocks", 1)
                self.damage.add(path, "gap_spectra", t - prev_end)
            if nframe:
                layout = shape.layout()
                runs.append(Run(fi, shape.hdr_size, layout, nframe, t))
                prev_end = t + nframe * layout.nspectra
        if first is None:
            raise RecordingError(f"{self.files[0]}: no DADA file")
        return self._meta(first, ref), merge_runs(runs)

    def _meta(self, hdr: Mapping[str, Any], shape: DadaShape) -> RecordingMeta:
        where = f"{self.files[0]}: "
        tsamp = number(hdr, "TSAMP", where=where)
        if tsamp <= 0:
            raise RecordingError(f"{where}TSAMP = {tsamp} must be > 0 (microseconds)")
        freq = number(hdr, "FREQ", where=where) * 1e6
        bw = number(hdr, "BW", where=where) * 1e6
        if bw == 0:
            raise RecordingError(f"{where}BW is 0")
        chan_bw = bw / shape.nchan
        utc = hdr.get("UTC_START")
        if utc and utc != "unset":
            sync = utc_unix(utc, where)
        elif "MJD_START" in hdr:
            sync = (number(hdr, "MJD_START", where=where) - 40587) * 86400
        else:
            raise RecordingError(f"{where}header lacks UTC_START (or MJD_START): no time")
        telescope = hdr.get("TELESCOPE") or None
        names = shape.names or (None if shape.nants > 1 else (telescope or "ant0",))
        return RecordingMeta(self.format, shape.nants, shape.nchan, sync, 1e6 / tsamp,
                             freq - bw / 2 + chan_bw / 2, chan_bw, ENCODINGS[shape.nbit],
                             names, telescope, source=hdr.get("SOURCE", ""))


class DadaShape:
    """Sizes and sample order of a DADA header; RecordingError naming the key."""

    def __init__(self, hdr: Mapping[str, Any], where: str = "") -> None:
        self.hdr_size = number(hdr, "HDR_SIZE", kind=int, where=where)
        self.nbit = number(hdr, "NBIT", kind=int, where=where)
        ndim = number(hdr, "NDIM", kind=int, where=where)
        self.npol = number(hdr, "NPOL", kind=int, where=where)
        self.nchan = number(hdr, "NCHAN", 1, kind=int, where=where)
        self.nants = number(hdr, "NANTS", 1, kind=int, where=where)
        self.order = str(hdr.get("ORDER", "TPF")).upper()
        if self.hdr_size < 1:
            raise RecordingError(f"{where}HDR_SIZE = {self.hdr_size} must be positive")
        if ndim != 2:
            raise RecordingError(f"{where}NDIM = {ndim}: only complex (NDIM 2) channelised "
                                 f"voltages can be correlated")
        if self.npol != 2:
            raise RecordingError(f"{where}NPOL = {self.npol}: streams are an antenna's two "
                                 f"polarisations, NPOL must be 2")
        if self.nbit not in ENCODINGS:
            raise RecordingError(f"{where}NBIT = {self.nbit}: this reader takes "
                                 f"{sorted(ENCODINGS)}")
        if self.nchan < 1 or self.nants < 1:
            raise RecordingError(f"{where}NCHAN and NANTS must be positive")
        if self.order not in ORDERS and not (self.nchan == 1 and self.order in ("FTP", "FPT")):
            raise RecordingError(f"{where}ORDER = {self.order}: this reader takes "
                                 f"{', '.join(ORDERS)}")
        if self.nants > 1 and self.order != "TAFTP":
            raise RecordingError(f"{where}NANTS = {self.nants} needs ORDER TAFTP (MeerKAT "
                                 f"FBFUSE), got {self.order}")
        self.names: tuple[str, ...] | None = None
        if "ANTS" in hdr:
            names = tuple(n.strip() for n in str(hdr["ANTS"]).split(",") if n.strip())
            if len(names) != self.nants:
                raise RecordingError(f"{where}ANTS names {len(names)} antennas for NANTS = "
                                     f"{self.nants}")
            self.names = names
        sample = 2 * self.nbit // 8  # bytes of one complex sample
        self.spectrum_bytes = self.nants * self.nchan * 2 * sample
        heap = FBFUSE_HEAP_SPECTRA if self.order == "TAFTP" else 1
        self.frame_bytes = self.spectrum_bytes * heap

    def key(self) -> tuple:
        return (self.nbit, self.nchan, self.nants, self.order, self.names)

    def layout(self) -> SampleLayout:
        enc: dict[str, str] = {"encoding": ENCODINGS[self.nbit]}
        if self.nbit == 4:
            enc["nibble_order"] = "re_low"  # dspsr's order (module docstring)
        if self.order == "TAFTP":
            return SampleLayout.from_axes(
                [("ant", self.nants), ("freq", self.nchan),
                 ("fine_time", FBFUSE_HEAP_SPECTRA), ("pol", 2)], **enc)
        pol_first = self.order in ("TPF", "FTP")  # (one channel: FTP is TP, FPT is PT)
        axes = [("pol", 2), ("freq", self.nchan)] if pol_first else [("freq", self.nchan),
                                                                   ("pol", 2)]
        return SampleLayout.from_axes([("ant", 1), *axes], **enc)
