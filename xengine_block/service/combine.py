"""``xengine combine``: join X-engine instances' UVH5 files along frequency with pyuvdata.

Instances that split the band (distinct ``chan0``) and rotate files the same way (dumps per file,
aligned starts) write files covering the same times. Files are grouped by their first
integration time; each group is read with pyuvdata, ordered by frequency, checked for
overlapping channels, cut to the times every member holds (an instance stopped a little earlier
loses nothing the others wrote twice), concatenated (``fast_concat(axis="freq")``) and written
with the inputs' visibility dtype (int32 pairs stay int32: exact). Each output is written to a
temporary name and renamed when complete; an existing output is kept unless ``overwrite``.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

import h5py
import numpy as np

from ..console.progress import Progress

log = logging.getLogger(__name__)


class CombineError(ValueError):
    """The inputs cannot be joined; the message names the files."""


def input_files(inputs: Iterable[str | Path]) -> list[Path]:
    """Files as given, directories expanded to their ``*.uvh5`` (sorted)."""
    out: list[Path] = []
    for p in map(Path, inputs):
        if p.is_dir():
            out += sorted(p.glob("*.uvh5"))
        elif p.exists():
            out.append(p)
        else:
            raise CombineError(f"{p}: no such file or directory")
    if not out:
        raise CombineError("no .uvh5 files in the inputs")
    return out


def _header(path: Path) -> tuple[float, float, np.ndarray, np.dtype]:
    """(first time, first frequency, frequencies, visdata dtype) from the file's header."""
    try:
        with h5py.File(path, "r") as f:
            h = f["Header"]
            times, freqs = h["time_array"][()], np.ravel(h["freq_array"][()])
            if times.size == 0:
                raise CombineError(f"{path}: holds no integration")
            return float(times.min()), float(freqs.min()), freqs, f["Data/visdata"].dtype
    except (OSError, KeyError) as exc:
        raise CombineError(f"{path}: not a readable UVH5 file ({exc})") from None


def plan(files: list[Path]) -> list[list[Path]]:
    """Groups of files to join (one per first integration time), each sorted by frequency."""
    groups: dict[float, list[tuple[float, Path, np.ndarray]]] = defaultdict(list)
    for f in files:
        t0, f0, freqs, _ = _header(f)
        groups[t0].append((f0, f, freqs))
    out = []
    for t0 in sorted(groups):
        members = sorted(groups[t0], key=lambda m: m[0])
        for (_, a, fa), (_, b, fb) in zip(members[:-1], members[1:], strict=True):
            if np.intersect1d(fa, fb).size:
                raise CombineError(f"{a} and {b} hold the same channels: instances must have "
                                   "distinct chan0 ranges")
        out.append([m[1] for m in members])
    return out


def combine_group(paths: list[Path], out: Path, *, overwrite: bool = False) -> Path:
    """Join one group's files (already sorted by frequency) into ``out``."""
    from pyuvdata import UVData

    if out.exists() and not overwrite:
        raise CombineError(f"{out} exists; refusing to overwrite it (use --overwrite)")
    dtype = _header(paths[0])[3]
    uvs = [UVData.from_file(str(p)) for p in paths]
    common = _common_times([np.unique(uv.time_array) for uv in uvs])
    if common.size == 0:
        raise CombineError(f"{', '.join(map(str, paths))}: no integration time in common")
    for p, uv in zip(paths, uvs, strict=True):
        if uv.Ntimes != common.size:
            log.warning("%s: keeping the %d of its %d integrations every instance has", p,
                        common.size, uv.Ntimes)
            uv.select(times=common)
    joined = uvs[0] if len(uvs) == 1 else uvs[0].fast_concat(uvs[1:], axis="freq",
                                                             inplace=False)
    joined.history += f" Combined by xengine combine from {[p.name for p in paths]}."
    tmp = out.with_name(f".{out.name}.partial.uvh5")
    joined.write_uvh5(str(tmp), clobber=True, data_write_dtype=dtype)
    tmp.replace(out)
    return out


def _common_times(times: list[np.ndarray]) -> np.ndarray:
    common = times[0]
    for t in times[1:]:
        common = np.intersect1d(common, t)
    return common


def combine(inputs: Iterable[str | Path], outdir: str | Path, *, overwrite: bool = False
            ) -> list[Path]:
    """Join every group of ``inputs`` into ``outdir`` (named after the lowest-channel file)."""
    outdir = Path(outdir)
    groups = plan(input_files(inputs))
    outdir.mkdir(parents=True, exist_ok=True)
    written = []
    with Progress("combine", len(groups), unit="files") as progress:
        for paths in groups:
            written.append(combine_group(paths, outdir / paths[0].name, overwrite=overwrite))
            progress.update(1, written[-1].name)
    return written
