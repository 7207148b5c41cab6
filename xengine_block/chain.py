"""The correlator chain after capture, shared by ``pipelines/fx.py`` and reprocessing:
capture -> X-engine -> integrate -> UVH5 writer (+ quick-look)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .blocks import IntegrateBlock, QuicklookBlock, UVH5WriterBlock, XEngineBlock
from .geometry import Geometry
from .pipeline import Block


@dataclass
class Chain:
    xengine: XEngineBlock
    integrate: IntegrateBlock
    writer: UVH5WriterBlock
    quicklook: QuicklookBlock | None

    def xengine_msps(self) -> float:
        """Samples correlated per second of the X-engine block's compute time."""
        g = self.xengine.geometry
        perf = self.xengine.perf
        if g is None or not perf.get("process_s"):
            return 0.0
        return perf["frames"] * g.nspectra_pkt * g.nchan / perf["process_s"] / 1e6


def correlator_chain(capture: Block, *, directory: str | Path, backend: str = "auto",
                     ninteg: int = 1, prefix: str = "xengine_", dumps_per_file: int | None = None,
                     overwrite: bool = False, quicklook: bool = True,
                     filename: str | Path | None = None,
                     channels: list[int] | None = None,
                     geometry: Geometry | None = None) -> Chain:
    """Add the blocks after ``capture`` (a block with frames and mask outputs) to the current
    pipeline; returns them so a script can read their counters and output paths.

    ``geometry`` (when known up front): the backend is made now, so a bad backend stops the
    script before any work, and the NPU can take frames without a copy (XEngineBlock).
    """
    x = XEngineBlock(capture, backend=backend, geometry=geometry)
    integ = IntegrateBlock(x, ninteg=ninteg)
    writer = UVH5WriterBlock(integ, directory=directory, prefix=prefix,
                             dumps_per_file=dumps_per_file, overwrite=overwrite,
                             filename=filename, channels=channels)
    look = QuicklookBlock(integ.orings[0], directory=directory) if quicklook else None
    return Chain(x, integ, writer, look)
