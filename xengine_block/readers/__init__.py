"""Readers of the observatories' recorded channelised voltages: GUPPI RAW (single- and
multi-antenna), PSRDADA, VDIF, MWAX subfiles, LWA TBF/TBX and OVRO-LWA voltage dumps; one
module per format, :mod:`.base` for what they share. A reader describes a recording's raw
samples in place (memory maps and :class:`~xengine_block.sample_layout.SampleLayout` s, never
decoding); ``docs/reprocess.md`` says which reader does what and why.

``FORMATS`` maps a format name to its reader; :func:`detect_format` recognises a file from its
first bytes; :func:`group_recordings` says which input files form one recording.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from pathlib import Path

from .base import Chunk, Damage, Recording, RecordingError, RecordingMeta, Run

#: format name -> "module:Class" (imported when used).
FORMATS: dict[str, str] = {
    "guppi": "xengine_block.readers.guppi:GuppiRecording",
    "mwax": "xengine_block.readers.mwax:MwaxRecording",
    "dada": "xengine_block.readers.dada:DadaRecording",
    "tbf": "xengine_block.readers.lwa:TbfRecording",
    "tbx": "xengine_block.readers.lwa:TbxRecording",
    "ovro-lwa": "xengine_block.readers.ovro_lwa:OvroLwaRecording",
    "vdif": "xengine_block.readers.vdif:VdifRecording",
}
#: Formats ``xengine reprocess --format`` takes: ours (pcap with a sidecar) and the readers'.
ALL_FORMATS = ("pcap", *FORMATS)
#: Formats by file name suffix, for files whose first bytes match none (a damaged start).
SUFFIXES = {".pcap": "pcap", ".raw": "guppi", ".dada": "dada", ".vdif": "vdif", ".sub": "mwax",
            ".tbf": "tbf", ".tbx": "tbx"}
#: The first bytes :func:`detect_format` looks at.
HEAD_BYTES = 1 << 16
_PCAP_MAGIC = (b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")


def reader(fmt: str) -> type[Recording]:
    if fmt not in FORMATS:
        raise ValueError(f"unknown recording format {fmt!r}; one of {', '.join(FORMATS)}")
    module, cls = FORMATS[fmt].split(":")
    return getattr(importlib.import_module(module), cls)


def detect_format(path: str | os.PathLike) -> str | None:
    """The format of ``path`` from its first bytes (MWAX before DADA: a subfile has a DADA-style
    header); failing that, from its suffix (:data:`SUFFIXES`: the reader then says what is
    wrong with the file); else None."""
    path = Path(path)
    with open(path, "rb") as f:
        head = f.read(HEAD_BYTES)
    if head[:4] in _PCAP_MAGIC:
        return "pcap"
    for fmt in FORMATS:
        if reader(fmt).sniff(head, path):
            return fmt
    fmt = SUFFIXES.get(path.suffix.lower())
    return fmt if fmt == "pcap" or fmt in FORMATS else None


def group_recordings(paths: Sequence[Path], fmt: str) -> list[list[Path]]:
    """The recordings files of one format form (a GUPPI ``.NNNN.raw`` sequence, a DADA
    observation's files, an MWAX sub-observation's coarse channels...)."""
    return reader(fmt).group([Path(p) for p in paths])


def open_recording(files: Sequence[str | os.PathLike], fmt: str, **sky: float) -> Recording:
    """The recording of ``files`` in format ``fmt``; ``sky``: ``fs_hz``, ``freq0_hz``,
    ``chan_bw_hz`` where the headers lack them (VDIF) or are to be overridden."""
    return reader(fmt)(files, **sky)


__all__ = ["ALL_FORMATS", "FORMATS", "Chunk", "Damage", "Recording", "RecordingError",
           "RecordingMeta", "Run", "detect_format", "group_recordings", "open_recording",
           "reader"]
