"""UVH5 files that exist, as a Measurement Set (our writer, a dump at a time: memory flat
however long the files) or UVFITS (pyuvdata's writer, the whole files in memory), phased to a
phase centre (:mod:`xengine_block.outputs.phasing`). ``xengine convert`` calls this.

The inputs are unprojected UVH5 files of one array and band (ours: the X-engine's drift-scan
visibilities), taken in the order given, each time after the one before; a Measurement Set
made so is the one the correlator writes live for the same dumps (``pipelines/fx.py --ms``),
up to the float rounding of a time read back from the UVH5 file.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from .baselines import POLARIZATIONS, BaselineMap
from .phasing import PhaseCentre
from .site import SiteInfo
from .times import jd_to_unix, offline_iers

#: Output suffix -> what writes it.
CONVERSIONS = (".ms", ".uvfits")
#: Bytes of dumps read from a UVH5 file at a time (pyuvdata reads the file's header, every
#: row's metadata, at each read: one read per dump made a conversion quadratic in its length).
READ_BYTES = 256 << 20


def _site(uv) -> SiteInfo:  # uv: pyuvdata.UVData (metadata)
    tel = uv.telescope
    return SiteInfo(str(tel.name), float(tel.location.lat.deg), float(tel.location.lon.deg),
                    float(tel.location.height.to_value("m")), [str(n) for n in tel.antenna_names],
                    np.asarray(tel.antenna_numbers), np.asarray(tel.antenna_positions),
                    np.asarray(tel.get_enu_antpos()))


def _rows_of(bmap: BaselineMap, ant_1: np.ndarray, ant_2: np.ndarray, path: Path) -> np.ndarray:
    """The writer's row of each (``ant_1``, ``ant_2``) pair of a dump read from ``path``;
    ValueError naming the first pair the writer has no row for."""
    size = int(max(bmap.ant_1.max(initial=0), bmap.ant_2.max(initial=0))) + 1
    keys = bmap.ant_1.astype(np.int64) * size + bmap.ant_2
    order = np.argsort(keys, kind="stable")
    a1, a2 = np.asarray(ant_1, np.int64), np.asarray(ant_2, np.int64)
    wanted = a1 * size + a2
    pos = np.minimum(np.searchsorted(keys[order], wanted), keys.size - 1)
    ok = (a1 >= 0) & (a2 >= 0) & (a1 < size) & (a2 < size) & (keys[order][pos] == wanted)
    if not ok.all():
        k = int(np.flatnonzero(~ok)[0])
        raise ValueError(f"{path}: baseline ({a1[k]}, {a2[k]}) is not in the "
                         f"antenna-number order ant_1 <= ant_2")
    return order[pos]


def _check_unprojected(uv, path: Path) -> None:
    types = {c.get("cat_type") for c in uv.phase_center_catalog.values()}
    if types != {"unprojected"}:
        raise ValueError(f"{path}: phased already ({', '.join(sorted(map(str, types)))}); "
                         f"only unprojected (drift-scan) UVH5 files are converted")


def convert(inputs: Sequence[Path], output: Path, phase_centre: PhaseCentre | str = "zenith",
            overwrite: bool = False,
            progress: Callable[[int], None] | None = None) -> Path:
    """Write ``inputs`` (UVH5) as ``output`` (``.ms`` or ``.uvfits``); ValueError naming
    what is wrong, FileExistsError for an output that exists without ``overwrite``."""
    suffix = output.suffix.lower()
    if suffix not in CONVERSIONS:
        raise ValueError(f"{output}: the output must end in {' or '.join(CONVERSIONS)}")
    if not inputs:
        raise ValueError("no input files")
    pc = phase_centre if isinstance(phase_centre, PhaseCentre) else PhaseCentre.parse(
        phase_centre)
    offline_iers()  # pyuvdata's checks of the inputs turn times into LSTs
    if (output.exists() or output.is_symlink()) and not overwrite:
        raise FileExistsError(f"{output} exists; refusing to overwrite it (--overwrite "
                              f"replaces it)")
    if suffix == ".uvfits":
        return _to_uvfits(inputs, output, pc)
    return uvh5_to_ms(inputs, output, pc, overwrite, progress)


def uvh5_to_ms(inputs: Sequence[Path], output: Path, pc: PhaseCentre, overwrite: bool = False,
               progress: Callable[[int], None] | None = None, kill_safe: bool = True) -> Path:
    """``inputs`` (UVH5, whatever their names) as the Measurement Set ``output``, a dump at a
    time through :class:`~xengine_block.outputs.ms.MSWriter` (``kill_safe`` as its: False
    for an output under a temporary name that a rerun replaces)."""
    import pyuvdata

    from .ms import MSWriter

    first = None
    writer: MSWriter | None = None
    codes = [p for p, _, _ in POLARIZATIONS]
    try:
        for path in inputs:
            meta = pyuvdata.UVData.from_file(str(path), read_data=False, file_type="uvh5")
            _check_unprojected(meta, path)
            if sorted(int(p) for p in meta.polarization_array) != sorted(codes):
                raise ValueError(f"{path}: polarisations {list(meta.polarization_array)}; "
                                 f"the four linear products are needed")
            freqs = np.asarray(meta.freq_array).ravel()
            width = float(np.ravel(meta.channel_width)[0])
            if first is None:
                first = (list(meta.telescope.antenna_names), freqs)
                writer = MSWriter(output, _site(meta), freqs, width, 1, float_visdata=True,
                                  overwrite=overwrite, phase_centre=pc, kill_safe=kill_safe,
                                  history=f"xengine convert of {path.name}")
            elif list(meta.telescope.antenna_names) != first[0] or not np.array_equal(
                    freqs, first[1]):
                raise ValueError(f"{path}: antennas or channels differ from {inputs[0]}")
            assert writer is not None
            pol = [list(meta.polarization_array).index(c) for c in codes]
            jds = np.unique(meta.time_array)
            batch = max(1, READ_BYTES // (writer.bmap.nbls * freqs.size * 4 * (16 + 1 + 8)))
            for j0 in range(0, jds.size, batch):  # the header read once per batch of dumps
                uv = pyuvdata.UVData.from_file(str(path), times=list(jds[j0:j0 + batch]),
                                              run_check=False, file_type="uvh5")
                for jd in jds[j0:j0 + batch]:
                    sel = np.flatnonzero(uv.time_array == jd)
                    rows = _rows_of(writer.bmap, uv.ant_1_array[sel], uv.ant_2_array[sel], path)
                    data = np.zeros((writer.bmap.nbls, freqs.size, 4), np.complex128)
                    flags = np.ones(data.shape, bool)
                    nsamples = np.zeros(data.shape, np.float32)
                    data[rows] = uv.data_array[sel][:, :, pol]
                    flags[rows] = uv.flag_array[sel][:, :, pol]
                    nsamples[rows] = uv.nsample_array[sel][:, :, pol]
                    writer.append_rows(data, flags, nsamples, jd_to_unix(float(jd)),
                                       float(uv.integration_time[sel[0]]))
                    if progress is not None:
                        progress(1)
        assert writer is not None
        writer.close()
    except BaseException:
        if writer is not None:
            writer.abandon()  # removes the output if no dump was complete
        raise
    return output


def _to_uvfits(inputs: Sequence[Path], output: Path, pc: PhaseCentre) -> Path:
    import pyuvdata

    uv = pyuvdata.UVData.from_file([str(p) for p in inputs])
    _check_unprojected(uv, inputs[0])
    if pc.zenith:
        uv.phase_to_time(uv.time_array[0])
    else:
        uv.phase(lon=np.deg2rad(pc.ra_deg), lat=np.deg2rad(pc.dec_deg), epoch="J2000",
                 phase_frame="icrs", cat_name=f"ra{pc.ra_deg:g}_dec{pc.dec_deg:g}")
    uv.write_uvfits(str(output), clobber=True)
    return output
