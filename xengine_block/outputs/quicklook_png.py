"""Quick-look PNG: what an engineer looks at first after a run.

Left: amplitude and phase versus channel for a few baselines (an autocorrelation, a short, a
medium and a long cross-correlation). Right: the correlation-coefficient matrix |K_jk| /
sqrt(K_jj K_kk) of one channel, which shows dead inputs, swapped cables and strong sources at a
glance. The same renderer serves the UVH5 file (``xengine quicklook FILE``) and the pipeline's
quick-look sink block (from the packed triangle).
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

from ..triangle import unpack_triangle


def _coefficients(matrix: np.ndarray) -> np.ndarray:
    d = np.sqrt(np.abs(np.diag(matrix)).real)
    d[d == 0] = 1
    return np.abs(matrix) / d[:, None] / d[None, :]


def render(path: str | Path, freq_hz: np.ndarray, spectra: dict[str, np.ndarray],
           matrix: np.ndarray, matrix_label: str, title: str) -> Path:
    """Write the quick-look PNG; ``spectra`` maps a label to complex values per channel."""
    import matplotlib

    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(13, 6.5), layout="constrained")
    gs = fig.add_gridspec(2, 2, width_ratios=[1.4, 1])
    ax_amp, ax_ph = fig.add_subplot(gs[0, 0]), fig.add_subplot(gs[1, 0])
    ax_m = fig.add_subplot(gs[:, 1])
    f_mhz = np.asarray(freq_hz) / 1e6
    for label, v in spectra.items():
        ax_amp.plot(f_mhz, np.abs(v), ".-", label=label)
        ax_ph.plot(f_mhz, np.degrees(np.angle(v)), ".-", label=label)
    ax_amp.set_yscale("log")
    ax_amp.set_ylabel("amplitude")
    ax_amp.legend(fontsize=8)
    ax_ph.set_ylabel("phase (deg)")
    ax_ph.set_ylim(-185, 185)
    ax_ph.set_xlabel("frequency (MHz)")
    im = ax_m.imshow(_coefficients(matrix), vmin=0, vmax=1, cmap="viridis",
                     interpolation="nearest")
    ax_m.set_title(matrix_label)
    fig.colorbar(im, ax=ax_m, label="|correlation coefficient|", shrink=0.8)
    fig.suptitle(title)
    path = Path(path)
    try:
        fig.savefig(path, dpi=90)
    except OSError as exc:  # e.g. a full disk: no half-written PNG, one line naming it
        path.unlink(missing_ok=True)
        msg = f"cannot write quick-look {path}: {exc.strerror or exc}"
        raise OSError(exc.errno, msg) from None
    finally:
        plt.close(fig)
    return path


def _pick_pairs(n: int) -> list[tuple[int, int]]:
    """Stream 0's autocorrelation and same-polarisation baselines to a near, a middle and a
    far stream in the list (streams 2a + pol: even offsets keep the polarisation)."""
    pairs = [(0, 0), (0, 2), (0, n // 2 - (n // 2) % 2), (0, n - 2)]
    return [p for i, p in enumerate(pairs) if p not in pairs[:i] and 0 <= p[1] < n]


def quicklook_triangle(path: str | Path, tri: np.ndarray, freq_hz: np.ndarray, nstream: int,
                       title: str = "", stream_names: list[str] | None = None) -> Path:
    """Quick-look of one X-engine/integration dump (packed triangle ``[C, nbl, 2]``).

    ``stream_names`` (``ArrayDescription.stream_names``) label the curves by antenna name and
    feed; without them streams are labelled by index.
    """
    full = unpack_triangle(tri, nstream)  # [C, S, S]
    names = stream_names or [str(s) for s in range(nstream)]
    spectra = {f"K[{names[j]}, {names[k]}]": full[:, j, k] for j, k in _pick_pairs(nstream)}
    c = tri.shape[0] // 2
    return render(path, freq_hz, spectra, full[c], f"streams, channel {c}", title)


def last_integration(path: str | Path) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray,
                                                str]:
    """What the quick-look of a UVH5 file shows: (frequencies, XX spectra labelled by antenna
    names, the antenna-by-antenna XX matrix of the middle channel in ``antenna_numbers`` order,
    title). Baselines are found by the antenna numbers in ``ant_1_array``/``ant_2_array``."""
    path = Path(path)
    with h5py.File(path, "r") as f:
        h, d = f["Header"], f["Data"]
        nbls, nblts = int(h["Nbls"][()]), int(h["Nblts"][()])
        if nblts == 0:
            raise ValueError(f"{path} holds no integrations yet")
        pols = list(h["polarization_array"][:])
        p = pols.index(-5) if -5 in pols else 0
        sl = slice(nblts - nbls, nblts)
        vis = d["visdata"][sl, :, p]
        vis = vis["r"].astype(np.float64) + 1j * vis["i"].astype(np.float64)  # [Nbls, C]
        a1, a2 = h["ant_1_array"][sl], h["ant_2_array"][sl]
        freq = np.asarray(h["freq_array"][:]).reshape(-1)
        jd = float(h["time_array"][nblts - 1])
        telescope = bytes(h["telescope_name"][()]).decode()
        ants = np.asarray(h["antenna_numbers"][:])
        names = [bytes(n).decode() for n in h["antenna_names"][:]]
        enu_len = np.linalg.norm(h["uvw_array"][sl], axis=-1)
    index = {int(a): i for i, a in enumerate(ants)}
    unknown = sorted({int(a) for a in np.concatenate([a1, a2])} - set(index))
    if unknown:
        raise ValueError(f"{path}: ant_1_array/ant_2_array name antennas {unknown[:5]} that are "
                         f"not in antenna_numbers")
    n = len(ants)
    c = vis.shape[1] // 2
    matrix = np.zeros((n, n), complex)
    ia1, ia2 = np.array([index[a] for a in a1]), np.array([index[a] for a in a2])
    matrix[ia1, ia2] = vis[:, c]
    matrix[ia2, ia1] = np.conj(vis[:, c])
    cross = np.flatnonzero(a1 != a2)
    spectra = {}
    auto = np.flatnonzero(a1 == a2)
    if auto.size:
        spectra[f"auto {names[ia1[auto[0]]]}"] = vis[auto[0]]
    if cross.size:
        order = cross[np.argsort(enu_len[cross])]
        for k in (order[0], order[order.size // 2], order[-1]):
            spectra[f"{names[ia1[k]]}-{names[ia2[k]]} ({enu_len[k]:.0f} m)"] = vis[k]
    return freq, spectra, matrix, f"{telescope} {path.name} JD {jd:.5f}"


def quicklook_uvh5(path: str | Path, png: str | Path | None = None) -> Path:
    """Quick-look of the last integration in a UVH5 file (XX polarisation)."""
    path = Path(path)
    freq, spectra, matrix, title = last_integration(path)
    png = Path(png) if png else path.with_suffix(".png")
    c = next(iter(spectra.values())).size // 2 if spectra else 0
    return render(png, freq, spectra, matrix, f"antennas, XX, channel {c}", title)
