"""The correlator chain after capture, shared by ``pipelines/fx.py`` and reprocessing:
capture -> X-engine -> integrate -> UVH5 writer (+ quick-look)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from .blocks import IntegrateBlock, QuicklookBlock, UVH5WriterBlock, XEngineBlock
from .geometry import Geometry
from .runtime.pipeline import Block

#: Runtimes the chain runs in: this package's own, or real Bifrost (``xengine_block.bifrost``).
RUNTIMES = ("ours", "bifrost")


def runtime(name: str = "ours") -> Any:
    """``Pipeline``, ``CaptureBlock`` and the chain's blocks of runtime ``name`` (same
    constructor arguments in both). ImportError if Bifrost is asked for and not installed."""
    if name == "bifrost":
        from . import bifrost
        return bifrost
    if name != "ours":
        raise ValueError(f"runtime must be one of {RUNTIMES}, got {name!r}")
    from .capture.receive import CaptureBlock
    from .runtime.pipeline import Pipeline
    return SimpleNamespace(Pipeline=Pipeline, CaptureBlock=CaptureBlock, XEngineBlock=XEngineBlock,
                           IntegrateBlock=IntegrateBlock, UVH5WriterBlock=UVH5WriterBlock,
                           QuicklookBlock=QuicklookBlock)


@dataclass
class Chain:
    xengine: XEngineBlock
    integrate: IntegrateBlock
    writer: UVH5WriterBlock
    quicklook: QuicklookBlock | None

    def xengine_msps(self) -> float:
        """Samples correlated per second of the X-engine block's compute time."""
        lay = self.xengine.layout
        perf = self.xengine.perf
        if lay is None or not perf.get("process_s"):
            return 0.0
        return perf["frames"] * lay.nspectra * lay.nchan / perf["process_s"] / 1e6


def correlator_chain(capture: Block, *, directory: str | Path, backend: str = "auto",
                     ninteg: int = 1, integration_spectra: int | None = None,
                     prefix: str = "xengine_", dumps_per_file: int | None = None,
                     overwrite: bool = False, new_name_if_exists: bool = False,
                     quicklook: bool = True,
                     filename: str | Path | None = None,
                     channels: list[int] | None = None,
                     geometry: Geometry | None = None, runtime_name: str = "ours",
                     backend_options: dict[str, Any] | None = None) -> Chain:
    """Add the blocks after ``capture`` (a block with frames and mask outputs) to the current
    pipeline; returns them so a script can read their counters and output paths.

    ``geometry`` (when known up front): the backend is made now, so a bad backend stops the
    script before any work, and the NPU can take frames without a copy (XEngineBlock).
    ``ninteg``: X-engine frames per dump; ``integration_spectra``: instead, spectra per dump
    (a whole number of the X-engine's frames; IntegrateBlock).
    ``runtime_name``: "ours" or "bifrost" (the current pipeline must be that runtime's).
    ``backend_options``: the backend's constructor keywords (e.g. ``{"nthreads": 1}`` for
    ``native``), with a backend name rather than ``auto``.
    """
    rt = runtime(runtime_name)
    x = rt.XEngineBlock(capture, backend=backend, geometry=geometry,
                        backend_options=backend_options)
    integ = (rt.IntegrateBlock(x, ninteg=ninteg) if integration_spectra is None
             else rt.IntegrateBlock(x, integration_spectra=integration_spectra))
    writer = rt.UVH5WriterBlock(integ, directory=directory, prefix=prefix,
                                dumps_per_file=dumps_per_file, overwrite=overwrite,
                                new_name_if_exists=new_name_if_exists,
                                filename=filename, channels=channels)
    look = rt.QuicklookBlock(integ.orings[0], directory=directory) if quicklook else None
    return Chain(x, integ, writer, look)
