"""What a visibility file needs of the array: its site and antennas (made from the array
description by the writer blocks)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..array import ArrayDescription


@dataclass(frozen=True)
class SiteInfo:
    """What the file needs of the array (built from the array description)."""

    telescope_name: str
    latitude_deg: float
    longitude_deg: float
    altitude_m: float
    antenna_names: list[str]
    antenna_numbers: np.ndarray  # [Nants]
    antenna_positions: np.ndarray  # [Nants, 3] ECEF minus site ECEF, metres
    enu: np.ndarray  # [Nants, 3] metres
    #: [Nants] bool or None: antennas whose baselines are written flagged, their visibilities
    #: and nsamples as correlated (an MWA metafits' flagged tiles)
    flagged: np.ndarray | None = None

    @property
    def nant(self) -> int:
        return len(self.antenna_names)


def site_info(array: ArrayDescription) -> SiteInfo:
    """What a visibility writer needs of an array description."""
    return SiteInfo(array.telescope_name, array.latitude_deg, array.longitude_deg,
                    array.altitude_m, list(array.antenna_names),
                    np.asarray(array.antenna_numbers), array.antenna_positions, array.enu_m,
                    array.flagged_mask)
