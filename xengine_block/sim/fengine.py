"""F-engine simulator: channelised complex-int8 (or int4) voltages of every stream for a sky of
point sources plus receiver noise (docs/design.md, "Sign and conjugation" fixes the signal
model).

Antenna k at ENU position r_k hears a source in direction s (ENU unit vector at that time)
delayed by ``tau_k = -(r_k . s) / c`` (the nearer antenna hears it first); its channel value at
sky frequency f carries ``exp(-2 pi i f tau_k)`` (numpy's forward-FFT sign). So for one source
``<conj(x_1) x_2>`` has phase ``2 pi f (tau_1 - tau_2)``, and UVH5's ``conj(x_1) x_2`` phased to
the source has zero phase.

Each source emits a complex Gaussian signal per channel and spectrum; an unpolarised source has
independent, equal-power X and Y signals (so <XY> = 0, as for a real unpolarised source); a
``polarised`` one sends the same realisation to X and Y (100 % linearly polarised, XY = XX).
Each stream adds its own complex Gaussian receiver noise. The sum is scaled by ``gain``,
rounded and clipped to [-128, 127] (-128 is legal and produced), or for a ci4 geometry to
[-8, 7] (the default gain is then 2 instead of 8: rms about 3 levels, a usual 4-bit setting)
and packed into ci4 bytes by ``layout`` in the geometry's nibble order.

Noise and source signals are Gaussian by inverse CDF on 2^16 equiprobable levels (16 random
bits per value through a table): mean 0, rms 1 within 1e-5, tails cut at 4.3 sigma. numpy's
ziggurat ``standard_normal`` costs ~3x more and would dominate the simulator; at the quantiser's
resolution the difference is invisible.

Determinism: packet time ``f`` (spectra ``f*480 .. f*480+479``) draws from its own generator
seeded by ``(seed, f)``, so any packet-aligned time range gives the same samples however the
range is split into calls: a streaming pipeline and an offline reprocessing agree bit for bit.
Directions are fixed within an interval of ``direction_interval`` packet times, evaluated at the
interval's midpoint, all intervals of a call in one vectorised astropy transform.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..array import ArrayDescription
from ..frames import natural_to_frames
from ..geometry import Geometry
from .faults import InputFault, RfiSignal, add_rfi, apply_faults

#: Speed of light in vacuum, m/s.
C_LIGHT = 299792458.0
#: Quantiser gain by sample bits: rms about 11 levels of 127 (ci8), about 3 of 7 (ci4).
DEFAULT_GAIN = {8: 8.0, 4: 2.0}

_FRAMES = ("icrs", "altaz")


def _gaussian_table() -> np.ndarray:
    from scipy.special import ndtri
    levels = (np.arange(1 << 16, dtype=np.float64) + 0.5) / (1 << 16)
    return ndtri(levels).astype(np.float32)


#: N(0, 1) quantiles at 2^16 equiprobable levels: ``_GAUSS[uint16]`` is a Gaussian draw.
_GAUSS = _gaussian_table()


def gaussian(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """float32 N(0, 1) draws of ``shape`` (16-bit inverse-CDF table; see the module doc)."""
    n = math.prod(shape)
    idx = np.frombuffer(rng.bytes(2 * n), np.uint16)
    return _GAUSS[idx].reshape(shape)


def offline_astropy() -> None:
    """No IERS downloads (machines here are offline); use the bundled tables
    (docs/design.md, "UVH5 conventions")."""
    from astropy.utils import iers
    iers.conf.auto_download = False
    iers.conf.auto_max_age = None


@dataclass(frozen=True)
class PointSource:
    """A point source: direction plus per-polarisation amplitude.

    Parameters
    ----------
    frame : ``"icrs"`` (lon = RA, lat = Dec; moves with the sky) or ``"altaz"`` (lon = azimuth
        east of north, lat = altitude; fixed to the ground).
    lon_deg, lat_deg : direction, degrees.
    amplitude_x, amplitude_y : rms of each of re and im of the source's voltage in the X and Y
        streams, in the same units as the receiver noise (before the quantiser gain).
    polarised : False (default): independent X and Y signals (unpolarised); True: the same
        signal in X and Y.
    """

    frame: str
    lon_deg: float
    lat_deg: float
    amplitude_x: float = 1.0
    amplitude_y: float = 1.0
    polarised: bool = False

    def __post_init__(self) -> None:
        if self.frame not in _FRAMES:
            raise ValueError(f"PointSource frame must be one of {_FRAMES}, got {self.frame!r}")
        if not -90.0 <= self.lat_deg <= 90.0:
            raise ValueError(f"PointSource lat_deg (Dec or altitude) must be in [-90, 90], "
                             f"got {self.lat_deg}")
        if self.amplitude_x < 0 or self.amplitude_y < 0:
            raise ValueError("PointSource amplitudes must be >= 0")

    @classmethod
    def radec(cls, ra_deg: float, dec_deg: float, amplitude: float = 1.0,
              **kw: float | bool) -> PointSource:
        """A celestial (ICRS) source."""
        kw.setdefault("amplitude_x", amplitude)
        kw.setdefault("amplitude_y", amplitude)
        return cls("icrs", float(ra_deg), float(dec_deg), **kw)

    @classmethod
    def altaz(cls, alt_deg: float, az_deg: float, amplitude: float = 1.0,
              **kw: float | bool) -> PointSource:
        """A source fixed in the ground frame (azimuth east of north)."""
        kw.setdefault("amplitude_x", amplitude)
        kw.setdefault("amplitude_y", amplitude)
        return cls("altaz", float(az_deg), float(alt_deg), **kw)

    @classmethod
    def from_skycoord(cls, coord, amplitude: float = 1.0, **kw: float | bool) -> PointSource:
        """From an astropy SkyCoord (any celestial frame; converted to ICRS)."""
        icrs = coord.icrs
        return cls.radec(icrs.ra.deg, icrs.dec.deg, amplitude, **kw)


def icrs_at_altaz(array: ArrayDescription, t_unix: float, alt_deg: float, az_deg: float):
    """The ICRS SkyCoord that is at (alt, az) seen from ``array``'s site at ``t_unix``: a sky
    source placed where a test or demo wants it at the start (it then drifts with the sky)."""
    offline_astropy()
    from astropy import units as u
    from astropy.coordinates import AltAz, SkyCoord
    from astropy.time import Time
    aa = SkyCoord(alt=alt_deg * u.deg, az=az_deg * u.deg,
                  frame=AltAz(obstime=Time(t_unix, format="unix"),
                              location=array.earth_location()))
    return aa.icrs


def altaz_to_enu(alt_deg: np.ndarray, az_deg: np.ndarray) -> np.ndarray:
    """Unit vectors ``[..., 3]`` (east, north, up) of directions (azimuth east of north)."""
    alt, az = np.radians(alt_deg), np.radians(az_deg)
    return np.stack([np.cos(alt) * np.sin(az), np.cos(alt) * np.cos(az), np.sin(alt)], axis=-1)


def geometric_delays(enu_m: np.ndarray, s_enu: np.ndarray) -> np.ndarray:
    """``tau[..., ant, src] = -(r_ant . s_src) / c`` seconds (docs/design.md, "Sign and
    conjugation")."""
    return -np.einsum("ad,...kd->...ak", enu_m, s_enu) / C_LIGHT


class FEngineSimulator:
    """Channelised voltages of all streams of ``array`` for the channels of ``geometry``.

    Parameters
    ----------
    array : antennas and site; ``array.nstream`` must equal ``geometry.nstream``.
    geometry : channels (``nchan``) and packet size (``nspectra_pkt``).
    sync_time : unix time of spectrum 0; spectrum n is at ``sync_time + n / fs_hz``.
    fs_hz : spectra per second per channel.
    freq0_hz, chan_bw_hz : sky frequency of channel c (of this X-engine) is
        ``freq0_hz + c * chan_bw_hz``.
    sources : point sources.
    noise_sigma : rms of each of re, im of the receiver noise (before gain).
    gain : quantiser gain (output level per unit of input); default ``DEFAULT_GAIN`` for the
        geometry's sample bits.
    seed : random seed (with the packet time, seeds every packet's generator).
    direction_interval : packet times over which source directions are held fixed.
    faults, rfi : input faults and RFI to inject (:mod:`~xengine_block.sim.faults`).
    """

    def __init__(self, array: ArrayDescription, geometry: Geometry, *, sync_time: float,
                 fs_hz: float, freq0_hz: float, chan_bw_hz: float,
                 sources: Sequence[PointSource] = (), noise_sigma: float = 1.0,
                 gain: float | None = None, seed: int = 0, direction_interval: int = 1,
                 faults: Sequence[InputFault] = (), rfi: Sequence[RfiSignal] = ()) -> None:
        if array.nstream != geometry.nstream:
            raise ValueError(f"array has {array.nstream} streams ({array.nant} antennas), "
                             f"geometry.nstream is {geometry.nstream}")
        if not fs_hz > 0 or not chan_bw_hz > 0:
            raise ValueError(f"fs_hz and chan_bw_hz must be > 0, got {fs_hz}, {chan_bw_hz}")
        if gain is None:
            gain = DEFAULT_GAIN[geometry.sample_bits]
        if noise_sigma < 0 or not gain > 0:
            raise ValueError(f"noise_sigma must be >= 0 and gain > 0, got {noise_sigma}, {gain}")
        if not isinstance(direction_interval, int) or direction_interval < 1:
            raise ValueError(f"direction_interval must be a positive integer (packet times), "
                             f"got {direction_interval!r}")
        self.array, self.geometry = array, geometry
        self.sync_time, self.fs_hz = float(sync_time), float(fs_hz)
        self.freq0_hz, self.chan_bw_hz = float(freq0_hz), float(chan_bw_hz)
        self.sources = tuple(sources)
        self.noise_sigma, self.gain, self.seed = float(noise_sigma), float(gain), int(seed)
        self.direction_interval = direction_interval
        self.faults, self.rfi = tuple(faults), tuple(rfi)
        k = len(self.sources)
        # [pol, src] amplitudes, and which signal realisation each (src, pol) uses.
        self._amp = np.array([[s.amplitude_x for s in self.sources],
                              [s.amplitude_y for s in self.sources]], np.float64).reshape(2, k)
        self._sig_pol = np.array([[0, 0 if s.polarised else 1] for s in self.sources],
                                 np.intp).reshape(k, 2)

    # ------------------------------------------------------------------ geometry of the sky
    @property
    def freqs_hz(self) -> np.ndarray:
        """Sky frequency of each channel, Hz."""
        return self.freq0_hz + self.chan_bw_hz * np.arange(self.geometry.nchan)

    def spectrum_time(self, spectrum: np.ndarray | float) -> np.ndarray:
        """Unix time of spectrum index(es)."""
        return self.sync_time + np.asarray(spectrum, np.float64) / self.fs_hz

    def source_enu(self, time_unix: np.ndarray | float) -> np.ndarray:
        """``[..., src, 3]`` ENU unit vectors of every source at the given unix time(s)."""
        t = np.asarray(time_unix, np.float64)
        out = np.empty(t.shape + (len(self.sources), 3))
        fixed = [i for i, s in enumerate(self.sources) if s.frame == "altaz"]
        sky = [i for i, s in enumerate(self.sources) if s.frame == "icrs"]
        for i in fixed:
            s = self.sources[i]
            out[..., i, :] = altaz_to_enu(s.lat_deg, s.lon_deg)
        if sky:
            offline_astropy()
            from astropy import units as u
            from astropy.coordinates import AltAz, SkyCoord
            from astropy.time import Time
            coords = SkyCoord(ra=[self.sources[i].lon_deg for i in sky] * u.deg,
                              dec=[self.sources[i].lat_deg for i in sky] * u.deg)
            times = Time(t.reshape(-1, 1), format="unix")
            aa = coords.reshape(1, -1).transform_to(
                AltAz(obstime=times, location=self.array.earth_location()))
            enu = altaz_to_enu(aa.alt.deg, aa.az.deg)  # [ntime, nsky, 3]
            out[..., sky, :] = enu.reshape(t.shape + (len(sky), 3))
        return out

    def delays(self, time_unix: np.ndarray | float) -> np.ndarray:
        """``[..., ant, src]`` geometric delays tau = -(r . s)/c, seconds."""
        return geometric_delays(self.array.enu_m, self.source_enu(time_unix))

    # ------------------------------------------------------------------ samples
    def _check_range(self, start_spectrum: int, nspectra: int) -> tuple[int, int]:
        n = self.geometry.nspectra_pkt
        if start_spectrum < 0 or start_spectrum % n or nspectra < 0 or nspectra % n:
            raise ValueError(f"start_spectrum ({start_spectrum}) and nspectra ({nspectra}) must "
                             f"be non-negative multiples of {n} spectra per packet")
        return start_spectrum // n, nspectra // n

    def _phases(self, first_frame: int, nframe: int) -> tuple[np.ndarray, np.ndarray]:
        """Per interval ``[nint, ant, chan, src]`` complex phases and each frame's interval."""
        k, n = self.direction_interval, self.geometry.nspectra_pkt
        frames = np.arange(first_frame, first_frame + nframe)
        intervals, which = np.unique(frames // k, return_inverse=True)
        mid = (intervals * k + 0.5 * k) * n  # spectrum index at the interval's midpoint
        tau = self.delays(self.spectrum_time(mid))  # [nint, ant, src]
        phase = -2.0 * math.pi * self.freqs_hz[None, None, :, None] * tau[:, :, None, :]
        return np.exp(1j * phase).astype(np.complex64), which

    def _frame_voltages(self, frame: int, phase: np.ndarray) -> np.ndarray:
        """Float voltages ``[S, C, nspec_pkt]`` complex64 of one packet time (before gain)."""
        g = self.geometry
        s, c, n = g.nstream, g.nchan, g.nspectra_pkt
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([self.seed, frame])))
        x = gaussian(rng, (s, c, n, 2))
        if self.noise_sigma != 1.0:
            x *= np.float32(self.noise_sigma)
        v = x.view(np.complex64)[..., 0]  # [S, C, n]
        nsrc = len(self.sources)
        if nsrc:
            sig = gaussian(rng, (nsrc, 2, c, n, 2)).view(np.complex64)
            sig = sig[..., 0]  # [src, realisation, C, n]
            for p in range(2):
                # [C, ant, src] weights @ [C, src, n] signals -> [C, ant, n]
                w = phase.transpose(1, 0, 2) * self._amp[p].astype(np.float32)
                sp = sig[np.arange(nsrc), self._sig_pol[:, p]].transpose(1, 0, 2)
                v[p::2] += np.matmul(w, sp).transpose(1, 0, 2)
        if self.rfi:
            add_rfi(v, frame * n, self.rfi, self.seed)
        return v

    def _quantise(self, v: np.ndarray, out: np.ndarray, frame: int) -> None:
        """Scale, round, clip to [-128, 127] (ci4: [-8, 7]) and store into int8 ``out``
        ([..., 2] re, im); then packet time ``frame``'s input faults."""
        f = v.view(np.float32).reshape(v.shape + (2,))
        f *= np.float32(self.gain)
        np.rint(f, out=f)
        np.clip(f, *self.geometry.sample_range, out=f)
        out[...] = f
        if self.faults:
            apply_faults(out, frame * self.geometry.nspectra_pkt, self.faults,
                         self.geometry.sample_range, self.seed)

    def samples(self, start_spectrum: int, nspectra: int) -> np.ndarray:
        """Natural samples ``[S, C, nspectra, 2]`` int8 from spectrum ``start_spectrum`` (values
        within the geometry's ``sample_range``)."""
        first, nframe = self._check_range(start_spectrum, nspectra)
        g = self.geometry
        out = np.empty((g.nstream, g.nchan, nspectra, 2), np.int8)
        phase, which = self._phases(first, nframe) if self.sources else (None, None)
        n = g.nspectra_pkt
        for i in range(nframe):
            ph = phase[which[i]] if phase is not None else None
            self._quantise(self._frame_voltages(first + i, ph), out[:, :, i * n:(i + 1) * n],
                           first + i)
        return out

    def frames(self, start_spectrum: int, nframe: int) -> np.ndarray:
        """Ring frames ``[nframe, *geometry.frame_shape]`` int8 from ``start_spectrum`` (ci4:
        packed bytes)."""
        g = self.geometry
        first, _ = self._check_range(start_spectrum, nframe * g.nspectra_pkt)
        out = np.empty((nframe, *g.frame_shape), np.int8)
        nat = np.empty((g.nstream, g.nchan, g.nspectra_pkt, 2), np.int8)
        phase, which = self._phases(first, nframe) if self.sources else (None, None)
        for i in range(nframe):
            ph = phase[which[i]] if phase is not None else None
            self._quantise(self._frame_voltages(first + i, ph), nat, first + i)
            out[i] = natural_to_frames(nat, g)[0]
        return out
