"""GUPPI RAW (Breakthrough Listen, GBT/Arecibo PUPPI, and multi-antenna ATA, COSMIC at the VLA,
MeerKAT BLUSE): blocks of an ASCII header of 80-character cards up to ``END`` and ``BLOCSIZE``
bytes of samples, read in place from the file's memory map.

Facts, each checked in the file named (``docs/reprocess.md`` has the whole list):

- Cards: ``KEYWORD=`` with the key padded to 8 characters, then a FITS-style value (strings
  quoted, numbers sometimes quoted too), last card ``END`` (UCBerkeleySETI/breakthrough
  doc/RAW-File-Format.md). Writers differ on the space after ``=`` (BLRI's ``guppi`` library
  writes none).
- ``DIRECTIO`` non-zero: the header is padded to a multiple of 512 bytes, BLOCSIZE excludes the
  padding (RAW-File-Format.md), and the data block is padded to 512 too (guppirawc99, guppi's
  ``read_block``).
- Data ``[ant][chan][time][pol][re, im]``, ``OBSNCHAN = NANTS * channels per antenna``
  (lacker/raw header.h; rawspec.c ``Ncpa = obsnchan/nants``); ``NPOL`` 4 means 2 pols
  (RAW-File-Format.md); NTIME = BLOCSIZE * 8 / (2 * npol * OBSNCHAN * NBITS).
- 8-bit: int8 re then im; 4-bit: one byte, real in the high nibble, two's complement
  (RAW-File-Format.md; rawspec_gpu.cu ``copy_expand_complex4``): SampleLayout ``ci4 re_high``.
- Frequencies: ``OBSFREQ`` centre and ``OBSBW`` bandwidth of one antenna's band (MHz),
  channel i at ``OBSFREQ - OBSBW/2 + (i + 1/2) OBSBW/F`` (rawspec.c ``fch1``); negative OBSBW:
  channels run high to low and rawspec treats the samples as conjugated (``input_conjugated =
  obsbw < 0``). ``CHAN_BW`` is used only without OBSBW (the Arecibo sample's CHAN_BW disagrees
  with its OBSBW and TBIN; OBSBW agrees with TBIN).
- Time, multi-antenna hpguppi (``SYNCTIME`` and ``PIPERBLK``): block start
  ``SYNCTIME + PKTIDX * NTIME / PIPERBLK * TBIN`` (guppi ``time_unix_offset`` ...
  rao_keyvalue_property_mixin_classes guppi_raw.py; BLRI guppiraw.py); GBT/PUPPI:
  ``STT_IMJD/STT_SMJD/STT_OFFS`` plus ``PKTIDX * PKTSIZE * 8 // (OBSNCHAN * 4 * NBITS)``
  spectra (baseband guppi/header.py ``offset``, with NPOL counting re and im).
- ``OVERLAP`` (PUPPI): the last OVERLAP spectra of a block repeat the next block's first; they
  are left out by the frame's layout (``nspectra = NTIME - OVERLAP``), kept in the last block
  (baseband guppi/base.py, ``samples_per_frame`` and the appended last overlap).
- Antenna names: ``ANTNMS00, ANTNMS01 ...`` comma-separated, concatenated until NANTS names
  (rao_keyvalue_property_mixin_classes hpdaq_ata.py); ATA's carry the LO letter, dropped when
  ``TELESCOP`` is ATA (joesbright/PyCorr entrypoints.py; the ATA BLADE beamformer thread).
- Sequences ``STEM.0000.raw, STEM.0001.raw ...`` are one recording (seticore
  raw_file_group.cpp; guppirawc99 iterate.c); a PKTIDX jump is missing blocks.

``baseband`` reads single-antenna 8-bit GUPPI (decoding to complex64) but knows nothing of
NANTS, PIPERBLK or 4-bit; this module reads the headers itself and never decodes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..sample_layout import SampleLayout
from .base import Recording, RecordingError, RecordingMeta, Run, merge_runs

CARD = 80
#: Most cards a header may have before ``END`` (rawspec reads at most 25600 bytes: 320 cards;
#: we allow more, for long antenna lists).
MAX_CARDS = 2048
#: ``BITS`` -> SampleLayout encoding.
ENCODINGS = {8: "ci8", 4: "ci4", 16: "ci16"}
_SEQ = re.compile(r"^(?P<stem>.*)\.(?P<seq>\d{4,})\.raw$")
_KEY = re.compile(rb"[A-Z0-9_\-]{1,8} *")


class NotAHeader(ValueError):
    """The bytes at a position are not a GUPPI header."""


def parse_value(text: str) -> Any:
    """A card's value: quoted string (stripped), int, float, or the bare text."""
    text = text.strip()
    if text.startswith("'"):
        end = text.find("'", 1)
        return text[1:end if end > 0 else None].strip()
    if "/" in text:  # FITS comment
        text = text.split("/", 1)[0].strip()
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


#: Cards already parsed -> (key, value): a recording's headers repeat all but a few cards.
_CARDS: dict[bytes, tuple[str, Any]] = {}


def parse_card(card: bytes, p: int) -> tuple[str, Any]:
    """(key, value) of one 80-byte card at byte ``p``; :class:`NotAHeader` if it is none."""
    kv = _CARDS.get(card)
    if kv is None:
        if card[8:9] != b"=" or not _KEY.fullmatch(card[:8]):
            raise NotAHeader(f"byte {p} is not a header card")
        try:
            kv = card[:8].decode("ascii").strip(), parse_value(card[9:].decode("ascii"))
        except UnicodeDecodeError:
            raise NotAHeader(f"byte {p} is not ASCII") from None
        if len(_CARDS) >= 8192:
            _CARDS.clear()
        _CARDS[card] = kv
    return kv


def parse_header(buf: np.ndarray | bytes, pos: int) -> tuple[dict[str, Any], int]:
    """Cards from byte ``pos`` up to ``END``: (``{key: value}``, bytes of the cards incl. END,
    before any DIRECTIO padding). Raises :class:`NotAHeader` if they are not cards."""
    size = len(buf)
    view = memoryview(buf)  # slices of a memory map's array cost microseconds each
    hdr: dict[str, Any] = {}
    for i in range(MAX_CARDS):
        p = pos + i * CARD
        if p + CARD > size:
            raise NotAHeader(f"the file ends inside a header at byte {pos}")
        card = view[p:p + CARD].tobytes()
        if card[:3] == b"END" and not card[3:].strip():
            if not hdr:
                raise NotAHeader(f"empty header at byte {pos}")
            return hdr, (i + 1) * CARD
        key, value = parse_card(card, p)
        hdr[key] = value
    raise NotAHeader(f"no END card within {MAX_CARDS} cards of byte {pos}")


def number(hdr: Mapping[str, Any], key: str, default: Any = None, *, kind: type = float,
           where: str = "") -> Any:
    """Header value ``key`` as ``kind`` (numbers stored as strings too); RecordingError naming
    the key if it is missing (without a default) or not a number."""
    if key not in hdr:
        if default is None:
            raise RecordingError(f"{where}header lacks {key}")
        return default
    v = hdr[key]
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise RecordingError(f"{where}{key} = {v!r} is not a number") from None
    if not math.isfinite(f):
        raise RecordingError(f"{where}{key} = {v!r} is not finite")
    if kind is int:
        if f != int(f):
            raise RecordingError(f"{where}{key} = {v!r} is not an integer")
        return int(f)
    return f


class BlockShape:
    """The shape of a block's data from its header; RecordingError naming the key if the
    header's sizes contradict each other."""

    def __init__(self, hdr: Mapping[str, Any], where: str = "") -> None:
        self.nants = number(hdr, "NANTS", 1, kind=int, where=where)
        self.obsnchan = number(hdr, "OBSNCHAN", kind=int, where=where)
        npol = number(hdr, "NPOL", kind=int, where=where)
        self.nbits = number(hdr, "NBITS", 8, kind=int, where=where)
        self.blocsize = number(hdr, "BLOCSIZE", kind=int, where=where)
        self.overlap = number(hdr, "OVERLAP", 0, kind=int, where=where)
        self.directio = bool(number(hdr, "DIRECTIO", 0, kind=int, where=where))
        if self.nants < 1 or self.obsnchan < 1 or self.blocsize < 1:
            raise RecordingError(f"{where}NANTS, OBSNCHAN and BLOCSIZE must be positive, got "
                                 f"{self.nants}, {self.obsnchan}, {self.blocsize}")
        if npol not in (1, 2, 4):
            raise RecordingError(f"{where}NPOL = {npol}: expected 1, 2 or 4 (4 means 2)")
        self.npol = 1 if npol == 1 else 2
        if self.nbits not in ENCODINGS:
            raise RecordingError(f"{where}NBITS = {self.nbits}: this reader takes "
                                 f"{sorted(ENCODINGS)}")
        if self.obsnchan % self.nants:
            raise RecordingError(f"{where}OBSNCHAN = {self.obsnchan} is not a multiple of "
                                 f"NANTS = {self.nants}")
        self.nchan = self.obsnchan // self.nants
        bits = 2 * self.npol * self.obsnchan * self.nbits
        if (self.blocsize * 8) % bits:
            raise RecordingError(f"{where}BLOCSIZE = {self.blocsize} is not a whole number of "
                                 f"spectra of {bits // 8} bytes (OBSNCHAN x NPOL x NBITS)")
        self.ntime = self.blocsize * 8 // bits
        if not 0 <= self.overlap < self.ntime:
            raise RecordingError(f"{where}OVERLAP = {self.overlap} must be in [0, NTIME = "
                                 f"{self.ntime})")

    def key(self) -> tuple:
        return (self.nants, self.obsnchan, self.npol, self.nbits, self.blocsize, self.overlap,
                self.directio)

    def layout(self, nspectra: int, frame_bytes: int | None = None) -> SampleLayout:
        """The block ``[ant][chan][time][pol][re, im]`` as a layout of ``nspectra`` spectra."""
        if self.npol != 2:
            raise RecordingError("NPOL = 1: a single polarisation cannot be correlated here "
                                 "(streams are an antenna's X and Y)")
        full = SampleLayout.from_axes(
            [("ant", self.nants), ("freq", self.nchan), ("fine_time", self.ntime), ("pol", 2)],
            encoding=ENCODINGS[self.nbits], nibble_order="re_high")
        return full.replace(nspectra=nspectra, frame_bytes=frame_bytes or full.frame_bytes)


def align512(n: int) -> int:
    return (n + 511) & ~511


def sequence_key(path: Path) -> tuple[str, int] | None:
    """``(stem, number)`` of ``STEM.NNNN.raw``, else None."""
    m = _SEQ.match(path.name)
    return (str(path.parent / m["stem"]), int(m["seq"])) if m else None


def antenna_names(hdr: Mapping[str, Any], nants: int, where: str = "") -> tuple[str, ...] | None:
    """Names from ``ANTNMS00, ANTNMS01 ...`` (ATA's LO letter dropped), or None without them."""
    parts: list[str] = []
    for i in range(100):
        v = hdr.get(f"ANTNMS{i:02d}")
        if v is None:
            break
        parts.extend(n.strip() for n in str(v).split(",") if n.strip())
        if len(parts) >= nants:
            break
    if not parts:
        return None
    if len(parts) < nants:
        raise RecordingError(f"{where}ANTNMSxx cards name {len(parts)} antennas for NANTS = "
                             f"{nants}")
    names = parts[:nants]
    if str(hdr.get("TELESCOP", "")).strip().upper() == "ATA":
        names = [n[:-1] if len(n) > 1 else n for n in names]  # the LO letter (a, b, c, d)
    if len(set(names)) != len(names):
        raise RecordingError(f"{where}ANTNMSxx repeats an antenna name: {names}")
    return tuple(names)


def block_time(hdr: Mapping[str, Any], shape: BlockShape, where: str = "") -> tuple[float, Any]:
    """(clock origin unix s, spectrum index of the block from it as a Fraction)."""
    from fractions import Fraction

    pktidx = number(hdr, "PKTIDX", 0, kind=int, where=where)
    if "SYNCTIME" in hdr and "PIPERBLK" in hdr:
        piperblk = number(hdr, "PIPERBLK", kind=int, where=where)
        if piperblk < 1:
            raise RecordingError(f"{where}PIPERBLK = {piperblk} must be positive")
        return number(hdr, "SYNCTIME", where=where), Fraction(pktidx * shape.ntime, piperblk)
    if "STT_IMJD" in hdr:
        unix = ((number(hdr, "STT_IMJD", kind=int, where=where) - 40587) * 86400
                + number(hdr, "STT_SMJD", 0, where=where) + number(hdr, "STT_OFFS", 0,
                                                                     where=where))
        pktsize = number(hdr, "PKTSIZE", 0, kind=int, where=where)
        bpcs = shape.obsnchan * 2 * shape.npol * shape.nbits  # bits of one complete spectrum
        return unix, Fraction(pktidx * pktsize * 8, bpcs)
    raise RecordingError(f"{where}header has neither SYNCTIME with PIPERBLK (hpguppi) nor "
                         f"STT_IMJD (GUPPI/PUPPI): the blocks have no time")


class GuppiRecording(Recording):
    """A GUPPI RAW file or ``.NNNN.raw`` sequence (see the module docstring)."""

    format = "guppi"

    @classmethod
    def sniff(cls, head: bytes, path: Path) -> bool:
        try:
            hdr, _ = parse_header(head, 0)
        except NotAHeader:
            return False
        return "BLOCSIZE" in hdr

    @classmethod
    def group(cls, paths: Sequence[Path]) -> list[list[Path]]:
        """``STEM.NNNN.raw`` files of one stem form one recording, in number order."""
        groups: dict[str, list[tuple[int, Path]]] = {}
        single: list[list[Path]] = []
        for p in paths:
            key = sequence_key(p)
            if key is None:
                single.append([p])
            else:
                groups.setdefault(key[0], []).append((key[1], p))
        out = single + [[p for _, p in sorted(v)] for v in groups.values()]
        return sorted(out, key=lambda files: str(files[0]))

    def _index(self) -> tuple[RecordingMeta, list[Run]]:
        shape: BlockShape | None = None
        first_hdr: dict[str, Any] | None = None
        blocks: list[tuple[int, int, Any]] = []  # (file, data offset, time Fraction)
        origin = None
        sync_pattern: bytes | None = None
        for fi, path in enumerate(self.files):
            buf = self.map(fi)
            where = f"{path}: "
            pos, size = 0, len(buf)
            while pos < size:
                try:
                    hdr, nbytes = parse_header(buf, pos)
                except NotAHeader:
                    if shape is None:
                        raise RecordingError(f"{path}: no GUPPI header at byte {pos} (cards "
                                             f"'KEYWORD= value' up to END)") from None
                    nxt = self._resync(buf, pos + 1, sync_pattern, shape)
                    self.damage.add(path, "garbage_bytes", (nxt if nxt is not None else size)
                                    - pos)
                    if nxt is None:
                        break
                    pos = nxt
                    continue
                try:
                    bs = BlockShape(hdr, where)
                except RecordingError:
                    if shape is None:
                        raise
                    bs = None
                if shape is None:
                    shape, first_hdr = bs, hdr
                    sync_pattern = bytes(buf[pos:pos + 9])
                if bs is None or bs.key() != shape.key():
                    self.damage.add(path, "bad_headers")
                    nxt = self._resync(buf, pos + nbytes, sync_pattern, shape)
                    self.damage.add(path, "garbage_bytes",
                                    (nxt if nxt is not None else size) - pos - nbytes)
                    if nxt is None:
                        break
                    pos = nxt
                    continue
                data = pos + (align512(nbytes) if shape.directio else nbytes)
                if data + shape.blocsize > size:
                    self.damage.add(path, "truncated_bytes", size - pos)
                    break
                clock, t = block_time(hdr, shape, where)
                if origin is None:
                    origin = clock
                elif clock != origin:
                    self.damage.add(path, "time_disorder")  # a header with another clock
                    pos = self._next(data, shape)
                    continue
                blocks.append((fi, data, t))
                pos = self._next(data, shape)
        if shape is None or first_hdr is None:
            raise RecordingError(f"{self.files[0]}: no GUPPI block")
        meta = self._meta(first_hdr, shape, blocks, origin)
        return meta, self._runs(blocks, shape)

    @staticmethod
    def _next(data: int, shape: BlockShape) -> int:
        end = data + shape.blocsize
        return align512(end) if shape.directio else end

    @staticmethod
    def _resync(buf: np.ndarray, start: int, pattern: bytes | None,
                shape: BlockShape) -> int | None:
        """The next position from ``start`` where a header of the file's shape begins."""
        if not pattern:
            return None
        pos = start
        while True:
            idx = _find(buf, pattern, pos)
            if idx < 0:
                return None
            try:
                hdr, _ = parse_header(buf, idx)
                if BlockShape(hdr).key() == shape.key():
                    return idx
            except (NotAHeader, RecordingError):
                pass
            pos = idx + 1

    def _meta(self, hdr: Mapping[str, Any], shape: BlockShape, blocks: list,
              origin: float | None) -> RecordingMeta:
        where = f"{self.files[0]}: "
        if shape.npol != 2:
            raise RecordingError(f"{where}NPOL = 1: a single polarisation cannot be correlated "
                                 f"here (streams are an antenna's X and Y)")
        tbin = number(hdr, "TBIN", where=where)
        if tbin <= 0:
            raise RecordingError(f"{where}TBIN = {tbin} must be > 0")
        obsfreq = number(hdr, "OBSFREQ", where=where) * 1e6
        if "OBSBW" in hdr:
            chan_bw = number(hdr, "OBSBW", where=where) * 1e6 / shape.nchan
        else:
            chan_bw = number(hdr, "CHAN_BW", where=where) * 1e6
        if chan_bw == 0:
            raise RecordingError(f"{where}OBSBW (or CHAN_BW) is 0")
        freq0 = obsfreq - chan_bw * shape.nchan / 2 + chan_bw / 2
        telescope = str(hdr.get("TELESCOP", "")).strip() or None
        names = antenna_names(hdr, shape.nants, where)
        if names is None and shape.nants == 1:
            names = (telescope or "ant0",)
        t0 = blocks[0][2] if blocks else 0
        frac = t0 - math.floor(t0)  # a first block off the integer spectrum grid: move the clock
        self._grid = frac
        sync = (origin or 0.0) + float(frac) * tbin
        return RecordingMeta(self.format, shape.nants, shape.nchan, sync, 1.0 / tbin, freq0,
                             chan_bw, ENCODINGS[shape.nbits], names, telescope,
                             number(hdr, "SCHAN", 0, kind=int, where=where),
                             str(hdr.get("SRC_NAME", "")).strip())

    def _runs(self, blocks: list, shape: BlockShape) -> list[Run]:
        """One run per block (merged where equally spaced), overlap left out but in the last
        block, gaps and disorder counted."""
        step = shape.ntime - shape.overlap
        runs: list[Run] = []
        prev_end = None
        kept = []
        for fi, data, t in blocks:
            t = t - self._grid
            if t.denominator != 1:
                self.damage.add(self.files[fi], "time_disorder")
                continue
            t = int(t)
            if prev_end is not None and t < prev_end:
                self.damage.add(self.files[fi], "time_disorder")
                continue
            if prev_end is not None and t > prev_end:
                gap = t - prev_end
                self.damage.add(self.files[fi], "gap_blocks", max(1, round(gap / step)))
                self.damage.add(self.files[fi], "gap_spectra", gap)
            kept.append((fi, data, t))
            prev_end = t + step
        # Two layouts for every block (of one shape): made once, not per block (a layout is a
        # frozen, validated value: ~0.1 ms of Python each, a third of indexing a block)
        inner, last = shape.layout(step), shape.layout(shape.ntime)
        for i, (fi, data, t) in enumerate(kept):
            runs.append(Run(fi, data, last if i == len(kept) - 1 else inner, 1, t))
        return merge_runs(runs)

    @classmethod
    def part_name(cls, files: Sequence[Path], part: int) -> str:
        name = files[part].name
        return name[:-4] if name.endswith(".raw") else Path(name).stem


def _find(buf: np.ndarray, pattern: bytes, start: int) -> int:
    """``bytes.find`` over a memory map, a window at a time (no copy of the whole file)."""
    window = 1 << 22
    n = len(buf)
    pos = start
    while pos < n:
        stop = min(n, pos + window + len(pattern))
        idx = bytes(buf[pos:stop]).find(pattern)
        if idx >= 0:
            return pos + idx
        pos += window
    return -1


# ---------------------------------------------------------------------------- writing
def header_bytes(cards: Mapping[str, Any], *, directio: bool = False) -> bytes:
    """GUPPI cards ``KEYWORD= value`` (strings quoted) up to END, padded to 512 with DIRECTIO."""
    out = []
    for key, value in cards.items():
        if len(key) > 8:
            raise ValueError(f"GUPPI keyword {key!r} is longer than 8 characters")
        if isinstance(value, str):
            text = f"'{value:<8}'"
        elif isinstance(value, bool):
            text = str(int(value))
        else:
            text = repr(value) if isinstance(value, float) else str(value)
        card = f"{key:<8}= {text:>20}" if not isinstance(value, str) else f"{key:<8}= {text}"
        if len(card) > CARD:
            raise ValueError(f"card {card!r} is longer than {CARD} characters")
        out.append(card.ljust(CARD))
    out.append("END".ljust(CARD))
    text = "".join(out).encode("ascii")
    if directio:
        text += b" " * (align512(len(text)) - len(text))
    return text


def antenna_cards(names: Sequence[str]) -> dict[str, str]:
    """``ANTNMS00, ANTNMS01 ...`` of at most 68 characters each (comma-separated names)."""
    cards, line = {}, ""
    for n in names:
        piece = n if not line else f"{line},{n}"
        if len(piece) > 68 and line:
            cards[f"ANTNMS{len(cards):02d}"] = line
            line = n
        else:
            line = piece
    if line:
        cards[f"ANTNMS{len(cards):02d}"] = line
    return cards


def write_guppi(path: str | Path, blocks: Iterable[np.ndarray], cards: Mapping[str, Any], *,
                nbits: int = 8, directio: bool = False, pktidx: Iterable[int] | None = None,
                piperblk: int | None = None) -> Path:
    """Write a GUPPI RAW file of ``blocks``: each int8 ``[ant, chan, time, pol, 2]`` (8-bit,
    values -128..127; 4-bit: values -8..7, packed real-high). ``cards``: header keys besides
    the sizes (NANTS, OBSNCHAN, NPOL, NBITS, BLOCSIZE, PKTIDX, PIPERBLK, DIRECTIO: from the
    data). ``pktidx``: each block's PKTIDX (default: ``i * piperblk``, piperblk default NTIME).
    For tests and benchmarks: the layout a reader must understand, written independently."""
    from ..frames import pack_ci4

    path = Path(path)
    idx = iter(pktidx) if pktidx is not None else None
    with open(path, "wb") as f:
        for i, b in enumerate(blocks):
            b = np.asarray(b)
            if b.ndim != 5 or b.shape[3] != 2 or b.shape[4] != 2:
                raise ValueError(f"block {i}: expected [ant, chan, time, pol=2, 2], got "
                                 f"{b.shape}")
            nant, nchan, ntime = b.shape[:3]
            payload = (pack_ci4(b) if nbits == 4 else b.astype(np.int8)).tobytes()
            step = piperblk or ntime
            hdr = {"BACKEND": "GUPPI", "NANTS": nant, "OBSNCHAN": nant * nchan, "NPOL": 2,
                   "NBITS": nbits, "BLOCSIZE": len(payload), "DIRECTIO": int(directio),
                   "PIPERBLK": step, **dict(cards),
                   "PKTIDX": next(idx) if idx is not None else i * step}
            f.write(header_bytes(hdr, directio=directio))
            f.write(payload)
            if directio:
                f.write(b"\0" * (align512(len(payload)) - len(payload)))
    return path
