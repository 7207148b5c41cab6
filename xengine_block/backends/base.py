"""The interface every correlator backend implements, and the checks they share.

A backend turns up to ``geometry.max_npacket`` ring frames (``[P, S, C, coarse, 2, fine]`` int8)
into the packed upper triangle ``[C, nbaseline, 2]`` int32 (DESIGN.md sections 3 and 5).
Backends are peers: the X-engine block picks one by name or ``auto``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np

from ..geometry import Geometry
from ..layout import as_frames


class BackendUnavailable(RuntimeError):
    """The backend cannot run here; the message says what is missing."""


class Backend(ABC):
    """Exact complex-int8 correlator: frames in, packed triangle ci32 out."""

    #: Registry name (``xengine --backend NAME``).
    name: ClassVar[str] = ""
    #: Relative preference for ``auto`` (higher wins among available backends).
    priority: ClassVar[int] = 0

    def __init__(self, geometry: Geometry) -> None:
        self.geometry = geometry

    @classmethod
    def availability(cls, geometry: Geometry | None = None) -> tuple[bool, str]:
        """(usable, reason): why this backend can or cannot run here (for ``geometry`` if
        given: e.g. the NPU needs a build for it)."""
        return True, "pure numpy"

    def check_frames(self, frames: np.ndarray) -> np.ndarray:
        """View ``frames`` as ``[P, S, C, coarse, 2, fine]`` and check P keeps int32 exact."""
        f = as_frames(frames, self.geometry)
        if f.shape[0] > self.geometry.max_npacket:
            raise ValueError(f"{f.shape[0]} frames in one call can overflow int32; "
                             f"at most {self.geometry.max_npacket}")
        return f

    def new_output(self) -> np.ndarray:
        return np.empty(self.geometry.output_shape, dtype=np.int32)

    @abstractmethod
    def correlate(self, frames: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Correlate whole frames; return (and fill ``out`` if given) ``[C, nbaseline, 2]``."""

    def close(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release resources (device buffers, threads)."""
