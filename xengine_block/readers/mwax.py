"""MWAX voltage subfiles (the MWA's ``.sub``: one coarse channel of every tile for an 8 s
sub-observation), read in place; the coarse channels of one sub-observation form one recording.

Layout (MWATelescope/mwax_udp2sub src/makesub.c and src/mwax_udp2sub.h; mwalib's voltage
context agrees on the sizes):

- a 4096-byte header (``SUBFILE_HEADER_SIZE``) of ``KEY value`` lines, NUL-padded: ``HDR_SIZE``,
  ``OBS_ID``, ``SUBOBS_ID``, ``UTC_START``, ``OBS_OFFSET`` (seconds since the observation
  started), ``NBIT 8``, ``NPOL 2``, ``NTIMESAMPLES`` (samples per block and input),
  ``NINPUTS``, ``COARSE_CHANNEL``, ``UNIXTIME`` (the observation's start), ``BANDWIDTH_HZ``,
  ``SAMPLE_RATE``, ``MWAX_SUB_VER``;
- block 0, the size of a data block (``NINPUTS * SUB_LINE_SIZE``), beginning with one
  ``delay_table_entry_t`` per input (packed: ``uint16 rf_input, int16 ws_delay_applied``,
  6 doubles, ``int16 num_pointings, int16 reserved``, 1600 floats: 6456 bytes), the rest the
  packet map and margin samples;
- 160 data blocks of 50 ms, each ``[input][sample][re, im]`` int8, ``SUB_LINE_SIZE =
  NTIMESAMPLES * 2`` bytes per input: 64,000 samples at the critically sampled 1.28 MHz
  (``CS_NTIMESAMPLES = 1280000 * 8 / 160``; 81,920 oversampled). (The header file's comment
  says "6400 samples ... or 8192": a factor of ten below its own arithmetic.)

Inputs are in the subfile order ``antenna * 2 + pol`` (mwalib rfinput.rs ``get_mwax_order``:
"For Correlator v2, the data is already in this order"; mwax_udp2sub's ``read_metafits``:
``metafits2sub_order = Antenna << 1 | (Pol == 'Y')``, ``Antenna`` the metafits column), so
input ``s`` is our stream ``s``; ``rf_input`` is ``Tile << 1 | (Pol == 'Y')`` (udp2sub, "LSB
is 0 for X, 1 for Y"): the antennas' numbers are their tile ids, and without a metafits they
are named ``Tile%03d`` of it. The MWA's own names are the metafits ``TileName`` s (``HexE6``
for tile 1006, ``LBG4`` for 2052): ``--array OBSID_metafits.fits`` gives them, matched by tile
id (:mod:`.metafits`). Coarse channel ``n`` is centred at ``n * 1.28 MHz``. The delay
table's residual fractional delays are not applied: the samples are correlated as recorded
(with the whole-sample delays udp2sub applied).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..sample_layout import SampleLayout
from .base import Recording, RecordingError, RecordingMeta, Run, merge_runs
from .dada import looks_dada
from .guppi import number

SUBFILE_HEADER_SIZE = 4096
BLOCKS_PER_SUB = 160
COARSE_CHANNEL_HZ = 1_280_000
#: ``delay_table_entry_t`` (mwax_udp2sub.h, ``#pragma pack(1)``).
DELAY_ENTRY = struct.Struct("<Hh6dhh1600f")


def subfile_header(head: bytes | np.ndarray) -> dict[str, str] | None:
    """The header if ``head`` is an MWAX subfile's (a DADA-style header with MWAX keys)."""
    hdr = looks_dada(bytes(head[:SUBFILE_HEADER_SIZE]))
    if hdr is None or not ({"NTIMESAMPLES", "NINPUTS"} <= set(hdr)):
        return None
    return hdr if "MWAX_SUB_VER" in hdr or "COARSE_CHANNEL" in hdr else None


def rf_inputs(block0: np.ndarray, ninputs: int) -> list[int] | None:
    """The ``rf_input`` of every input from block 0's delay table, or None if it holds no
    table in the subfile order (pairs of one tile, X then Y)."""
    need = ninputs * DELAY_ENTRY.size
    if len(block0) < need:
        return None
    raw = bytes(block0[:need])
    ids = [DELAY_ENTRY.unpack_from(raw, i * DELAY_ENTRY.size)[0] for i in range(ninputs)]
    ok = all(ids[2 * a] & 1 == 0 and ids[2 * a + 1] == ids[2 * a] + 1
             for a in range(ninputs // 2))
    return ids if ok and len({i >> 1 for i in ids}) == ninputs // 2 else None


class MwaxRecording(Recording):
    """The coarse-channel subfiles of one sub-observation (see the module docstring)."""

    format = "mwax"
    parts_by_file = False  # the files are channels of the same time

    @classmethod
    def sniff(cls, head: bytes, path: Path) -> bool:
        return subfile_header(head) is not None

    @classmethod
    def group(cls, paths: Sequence[Path]) -> list[list[Path]]:
        """One recording per sub-observation and run of consecutive coarse channels."""
        subs: dict[tuple, list[tuple[int, Path]]] = {}
        for p in paths:
            with open(p, "rb") as f:
                hdr = subfile_header(f.read(SUBFILE_HEADER_SIZE)) or {}
            key = (hdr.get("OBS_ID", str(p)), hdr.get("SUBOBS_ID", ""))
            try:
                chan = int(hdr.get("COARSE_CHANNEL", 0))
            except ValueError:
                chan = 0
            subs.setdefault(key, []).append((chan, p))
        out = []
        for files in subs.values():
            files.sort()
            run = [files[0]]
            for c, p in files[1:]:
                if c == run[-1][0] + 1:
                    run.append((c, p))
                else:
                    out.append([q for _, q in run])
                    run = [(c, p)]
            out.append([q for _, q in run])
        return sorted(out, key=lambda f: str(f[0]))

    @classmethod
    def part_name(cls, files: Sequence[Path], part: int) -> str:
        if len(files) == 1:
            return files[0].stem
        with open(files[0], "rb") as f:
            hdr = subfile_header(f.read(SUBFILE_HEADER_SIZE)) or {}
        first, last = files[0].stem.rsplit("_", 1)[-1], files[-1].stem.rsplit("_", 1)[-1]
        return f"{hdr.get('OBS_ID', files[0].stem)}_{hdr.get('SUBOBS_ID', '')}_ch{first}-{last}"

    def _index(self) -> tuple[RecordingMeta, list[Run]]:
        runs: list[Run] = []
        first: Mapping[str, Any] | None = None
        chans = []
        for fi, path in enumerate(self.files):
            buf = self.map(fi)
            where = f"{path}: "
            hdr = subfile_header(bytes(buf[:SUBFILE_HEADER_SIZE]))
            if hdr is None:
                raise RecordingError(f"{where}no MWAX subfile header (NTIMESAMPLES, NINPUTS)")
            shape = SubfileShape(hdr, where)
            if first is None:
                first, ref, ids = hdr, shape, None
            elif shape.key() != ref.key() or hdr.get("SUBOBS_ID") != first.get("SUBOBS_ID"):
                raise RecordingError(f"{where}not the same sub-observation and shape as "
                                     f"{self.files[0].name}")
            chans.append(shape.coarse_channel)
            data = len(buf) - shape.hdr_size - shape.block_bytes
            nblock, cut = divmod(max(data, 0), shape.block_bytes)
            self.damage.add(path, "truncated_bytes", cut if data > 0 else max(
                len(buf) - shape.hdr_size, 0))
            if nblock < shape.nblock and data > 0:  # a cut file: its last blocks are missing
                self.damage.add(path, "gap_blocks", shape.nblock - nblock)
                self.damage.add(path, "gap_spectra", (shape.nblock - nblock) * shape.ntime)
            nblock = min(nblock, shape.nblock)
            if fi == 0 and data >= 0:
                ids = rf_inputs(buf[shape.hdr_size:shape.hdr_size + shape.block_bytes],
                                shape.ninputs)
            if nblock:
                runs.append(Run(fi, shape.hdr_size + shape.block_bytes, shape.layout(),
                                nblock, shape.time_tag, chan0=fi))
        if first is None:
            raise RecordingError(f"{self.files[0]}: no MWAX subfile")
        if chans != list(range(chans[0], chans[0] + len(chans))):
            raise RecordingError(f"{self.files[0]}: coarse channels {chans} are not consecutive")
        runs.sort(key=lambda r: (r.time_tag, r.chan0))
        return self._meta(first, ref, ids, len(self.files)), merge_runs(runs)

    def _meta(self, hdr: Mapping[str, Any], shape: SubfileShape, ids: list[int] | None,
              nchan: int) -> RecordingMeta:
        where = f"{self.files[0]}: "
        bw = number(hdr, "BANDWIDTH_HZ", COARSE_CHANNEL_HZ, where=where)
        tiles = None if ids is None else tuple(i >> 1 for i in ids[::2])
        names = None if tiles is None else tuple(f"Tile{t:03d}" for t in tiles)
        return RecordingMeta(self.format, shape.ninputs // 2, nchan, shape.sync_time,
                             shape.sample_rate, shape.coarse_channel * COARSE_CHANNEL_HZ, bw,
                             "ci8", names, "MWA", source=str(hdr.get("OBS_ID", "")),
                             antenna_numbers=tiles)


class SubfileShape:
    """Sizes and times of a subfile header; RecordingError naming the key."""

    def __init__(self, hdr: Mapping[str, Any], where: str = "") -> None:
        self.hdr_size = number(hdr, "HDR_SIZE", SUBFILE_HEADER_SIZE, kind=int, where=where)
        self.ninputs = number(hdr, "NINPUTS", kind=int, where=where)
        self.ntime = number(hdr, "NTIMESAMPLES", kind=int, where=where)
        nbit = number(hdr, "NBIT", 8, kind=int, where=where)
        self.sample_rate = number(hdr, "SAMPLE_RATE", COARSE_CHANNEL_HZ, where=where)
        self.coarse_channel = number(hdr, "COARSE_CHANNEL", kind=int, where=where)
        if nbit != 8:
            raise RecordingError(f"{where}NBIT = {nbit}: MWAX subfiles are 8-bit")
        if self.ninputs < 2 or self.ninputs % 2:
            raise RecordingError(f"{where}NINPUTS = {self.ninputs} must be a positive even "
                                 f"number (tiles x 2 pols)")
        if self.ntime < 1 or self.sample_rate <= 0 or self.hdr_size < 1:
            raise RecordingError(f"{where}NTIMESAMPLES, SAMPLE_RATE and HDR_SIZE must be "
                                 f"positive")
        self.block_bytes = self.ninputs * self.ntime * 2
        #: Data blocks the file should hold: TRANSFER_SIZE is block 0 and them (makesub.c).
        transfer = number(hdr, "TRANSFER_SIZE", (BLOCKS_PER_SUB + 1) * self.block_bytes,
                          kind=int, where=where)
        if transfer % self.block_bytes or transfer < 2 * self.block_bytes:
            raise RecordingError(f"{where}TRANSFER_SIZE = {transfer} is not block 0 and data "
                                 f"blocks of {self.block_bytes} bytes (NINPUTS x NTIMESAMPLES "
                                 f"x 2)")
        self.nblock = transfer // self.block_bytes - 1
        offset = number(hdr, "OBS_OFFSET", 0, where=where)
        self.sync_time = number(hdr, "UNIXTIME", where=where)
        t = offset * self.sample_rate
        if t != int(t):
            raise RecordingError(f"{where}OBS_OFFSET = {offset} s is not a whole number of "
                                 f"samples")
        self.time_tag = int(t)

    def key(self) -> tuple:
        return (self.ninputs, self.ntime, self.sample_rate, self.sync_time, self.time_tag)

    def layout(self) -> SampleLayout:
        return SampleLayout.from_axes([("stream", self.ninputs), ("freq", 1),
                                       ("fine_time", self.ntime)])


def write_subfile(path: str | Path, blocks: Sequence[np.ndarray], *, coarse_channel: int,
                  tile_ids: Sequence[int], obs_id: int = 1_300_000_000, subobs: int = 8,
                  sample_rate: int = COARSE_CHANNEL_HZ) -> Path:
    """A subfile of ``blocks`` (each int8 ``[input, sample, 2]``, inputs ``tile * 2 + pol``
    in ``tile_ids`` order), with the header keys and the block-0 delay table of
    mwax_udp2sub's makesub.c (TRANSFER_SIZE counts the blocks given: udp2sub always writes
    160). Samples per block must be at least 3228 for the delay table to fit block 0. For
    tests and examples."""
    b0 = np.asarray(blocks[0])
    ninputs, ntime = b0.shape[:2]
    if ninputs != 2 * len(tile_ids):
        raise ValueError(f"{ninputs} inputs for {len(tile_ids)} tiles")
    if ntime * 2 < DELAY_ENTRY.size:
        raise ValueError(f"{ntime} samples per block: block 0 cannot hold the delay table")
    unixtime = 315964782 + obs_id  # GPS -> unix (18 leap seconds)
    hdr = (f"HDR_SIZE {SUBFILE_HEADER_SIZE}\nPOPULATED 1\nOBS_ID {obs_id}\n"
           f"SUBOBS_ID {obs_id + subobs}\nMODE MWAX_VCS\nUTC_START 2021-03-16-00:00:00\n"
           f"OBS_OFFSET {subobs}\nNBIT 8\nNPOL 2\nNTIMESAMPLES {ntime}\nNINPUTS {ninputs}\n"
           f"NINPUTS_XGPU {(ninputs + 31) & ~31}\nAPPLY_PATH_WEIGHTS 0\nAPPLY_PATH_DELAYS 0\n"
           f"INT_TIME_MSEC 500\nFSCRUNCH_FACTOR 1\nTRANSFER_SIZE "
           f"{ninputs * ntime * 2 * (len(blocks) + 1)}\nPROJ_ID C001\nEXPOSURE_SECS 8\n"
           f"COARSE_CHANNEL {coarse_channel}\nCORR_COARSE_CHANNEL 1\nSECS_PER_SUBOBS 8\n"
           f"UNIXTIME {unixtime}\nUNIXTIME_MSEC 0\nFINE_CHAN_WIDTH_HZ 10000\nNFINE_CHAN 128\n"
           f"BANDWIDTH_HZ {COARSE_CHANNEL_HZ}\nSAMPLE_RATE {sample_rate}\nMWAX_SUB_VER 2\n")
    block0 = bytearray(ninputs * ntime * 2)
    for i in range(ninputs):
        rf = tile_ids[i // 2] * 2 + i % 2
        DELAY_ENTRY.pack_into(block0, i * DELAY_ENTRY.size, rf, 0, *([0.0] * 6), 1, 0,
                              *([0.0] * 1600))
    path = Path(path)
    with open(path, "wb") as f:
        f.write(hdr.encode("ascii").ljust(SUBFILE_HEADER_SIZE, b"\0"))
        f.write(bytes(block0))
        for b in blocks:
            f.write(np.asarray(b, np.int8).tobytes())
    return path
