"""The correlator chain after capture, shared by ``pipelines/fx.py``, the service and
reprocessing: capture -> X-engine -> integrate -> UVH5 writer (+ quick-look) and/or a MeerKAT
SPEAD visibility stream."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ..capture.placement import CapturePlan
from ..geometry import Geometry, max_spectra_int32
from ..health.inputs import DEFAULT_THRESHOLDS, Thresholds
from ..health.rfi import LIVE_WINDOW
from ..runtime.affinity import CoreSpec
from ..runtime.pipeline import Block
from . import (
    HealthBlock,
    IntegrateBlock,
    QuicklookBlock,
    SpeadOutputBlock,
    UVH5WriterBlock,
    XEngineBlock,
)
from .writer import FILE_FORMATS

#: Runtimes the chain runs in: this package's own, or real Bifrost (``xengine_block.bifrost``).
RUNTIMES = ("ours", "bifrost")


def runtime(name: str = "ours") -> Any:
    """``Pipeline``, ``CaptureBlock`` and the chain's blocks of runtime ``name`` (same
    constructor arguments in both). ImportError if Bifrost is asked for and not installed."""
    if name == "bifrost":
        from .. import bifrost
        return bifrost
    if name != "ours":
        raise ValueError(f"runtime must be one of {RUNTIMES}, got {name!r}")
    from ..capture.receive import CaptureBlock
    from ..runtime.pipeline import Pipeline
    return SimpleNamespace(Pipeline=Pipeline, CaptureBlock=CaptureBlock, XEngineBlock=XEngineBlock,
                           IntegrateBlock=IntegrateBlock, UVH5WriterBlock=UVH5WriterBlock,
                           HealthBlock=HealthBlock,
                           QuicklookBlock=QuicklookBlock, SpeadOutputBlock=SpeadOutputBlock)


def split_integration(integration_spectra: int, frame_spectra: int,
                      max_spectra: int) -> tuple[int, int]:
    """A dump of ``integration_spectra`` spectra (whole frames of ``frame_spectra``) as
    (X-engine integration spectra, X-engine integrations per dump): the longest X-engine
    integration of whole frames that divides the dump and stays within the int32 bound
    ``max_spectra``; the integrate block sums the rest exactly in int64. Both cut at multiples
    of their length from spectrum 0, so every instance dumps at the same spectra."""
    if integration_spectra < 1 or integration_spectra % frame_spectra:
        raise ValueError(f"integration_spectra {integration_spectra} is not a whole number of "
                         f"the input's frames of {frame_spectra} spectra")
    nframe = integration_spectra // frame_spectra
    best = max(f for f in range(1, min(nframe, max_spectra // frame_spectra) + 1)
               if nframe % f == 0)
    return best * frame_spectra, nframe // best


@dataclass(frozen=True)
class Flagging:
    """What the chain flags (``docs/flagging.md``; the service's ``[flagging]`` keys): the
    inputs judged bad (``inputs``), RFI with AOFlagger (``rfi``: ``aoflagger[:STRATEGY.lua]``,
    over ``rfi_window`` dumps); ``judge``: judge and report the inputs even without flags."""

    inputs: bool = False
    rfi: str | None = None
    rfi_window: int = LIVE_WINDOW
    thresholds: Thresholds = DEFAULT_THRESHOLDS
    judge: bool = False

    @property
    def on(self) -> bool:
        return self.inputs or self.rfi is not None or self.judge


@dataclass
class Chain:
    xengine: XEngineBlock
    integrate: IntegrateBlock
    writer: UVH5WriterBlock | None
    quicklook: QuicklookBlock | None
    spead: SpeadOutputBlock | None = None
    health: HealthBlock | None = None
    #: The Measurement Set writer where the chain writes both formats (``writer`` is then the
    #: UVH5 one; a chain of Measurement Sets alone has its writer in ``writer``).
    ms_writer: UVH5WriterBlock | None = None

    @property
    def writers(self) -> list[UVH5WriterBlock]:
        """Every file writer of the chain."""
        return [w for w in (self.writer, self.ms_writer) if w is not None]

    def close(self) -> None:
        """After the pipeline has run: end the visibility stream (its stop heap)."""
        if self.spead is not None:
            self.spead.close()

    def xengine_msps(self) -> float:
        """Samples correlated per second of the X-engine block's compute time."""
        lay = self.xengine.layout
        perf = self.xengine.perf
        if lay is None or not perf.get("process_s"):
            return 0.0
        return perf["frames"] * lay.nspectra * lay.nchan / perf["process_s"] / 1e6


#: The chain's blocks, by the names :class:`Chain` gives them (``correlator_chain(cores=)``).
CHAIN_BLOCKS = tuple(f.name for f in fields(Chain))


def correlator_chain(capture: Block, *, directory: str | Path | None, backend: str = "auto",
                     ninteg: int = 1, integration_spectra: int | None = None,
                     xengine_spectra: int | None = None, prefix: str = "xengine_",
                     dumps_per_file: int | None = None,
                     overwrite: bool = False, new_name_if_exists: bool = False,
                     quicklook: bool = True,
                     filename: str | Path | None = None,
                     channels: list[int] | None = None,
                     geometry: Geometry | None = None, runtime_name: str = "ours",
                     backend_options: dict[str, Any] | None = None,
                     spead: str | None = None,
                     spead_options: dict[str, Any] | None = None,
                     cores: dict[str, CoreSpec] | None = None,
                     on_write_error: str = "stop", flagging: Flagging | None = None,
                     formats: tuple[str, ...] = ("uvh5",),
                     phase_centre: str = "zenith") -> Chain:
    """Add the blocks after ``capture`` (a block with frames and mask outputs) to the current
    pipeline; returns them so a script can read their counters and output paths.

    Dumps: ``ninteg`` X-engine integrations (the geometry's P packets each), or
    ``integration_spectra`` spectra (any whole number of the capture's frames: our packets of
    480 spectra, MeerKAT heaps), split by :func:`split_integration` between the X-engine and
    the integrate block.
    ``directory``: UVH5 files (and quick-looks) there; None writes none (a SPEAD stream only).
    ``spead``: ``udp://ADDRESS:PORT`` to send each dump to as MeerKAT baseline-correlation-
    products heaps (:class:`~xengine_block.blocks.spead_output.SpeadOutputBlock`, keywords in
    ``spead_options``); call :meth:`Chain.close` after the run to end that stream.
    ``geometry`` (when known up front): the backend is made now, so a bad backend stops the
    script before any work, and the NPU can take frames without a copy (XEngineBlock).
    A source without a capture plan (a reader) integrates ``integration_spectra`` in the
    integrate block alone (a whole number of the X-engine's frames). ``xengine_spectra``:
    spectra per X-engine output frame (its ``integration_spectra``): needed where the source's
    header has no geometry to take P from (a recording's ``sample_layout``,
    :mod:`xengine_block.readers.source`).
    ``runtime_name``: "ours" or "bifrost" (the current pipeline must be that runtime's).
    ``backend_options``: the backend's constructor keywords (e.g. ``{"nthreads": 1}`` for
    ``native``), with a backend name rather than ``auto``.
    ``cores``: each block's ``core`` (:mod:`~xengine_block.runtime.affinity`), by its name in
    :class:`Chain` (``xengine``, ``integrate``, ``writer``, ``quicklook``, ``spead``): e.g. the
    X-engine on cores the capture, integrator and writer do not use.
    ``on_write_error``: the UVH5 writer's answer to a dump it cannot write (full disk, quota,
    I/O error): ``"stop"`` the pipeline (a job), or ``"skip"`` it, counted, and write again
    into a new file once that works (a live service; :mod:`~xengine_block.blocks.writer`).
    ``flagging``: a health block judges every dump's inputs and flags them and RFI
    (:class:`Flagging`); the UVH5 writer reads its flags with the dumps. Off by default.
    ``formats``: the files written in ``directory``, ``uvh5`` and/or ``ms`` (Measurement
    Sets phased to ``phase_centre``: ``zenith`` or ``RA,DEC`` in degrees), a writer block each.
    """
    unknown_formats = sorted(set(formats) - set(FILE_FORMATS))
    if unknown_formats or not formats:
        raise ValueError(f"formats: {unknown_formats or 'none'}; each one of "
                         f"{', '.join(sorted(FILE_FORMATS))}")
    if directory is None and spead is None:
        raise ValueError("the chain needs an output: a directory for UVH5 files or a SPEAD "
                         "destination")
    cores = dict(cores or {})
    unknown = sorted(set(cores) - set(CHAIN_BLOCKS))
    if unknown:
        raise ValueError(f"cores: no block {unknown[0]!r} in the chain (blocks: "
                         f"{', '.join(CHAIN_BLOCKS)})")
    rt = runtime(runtime_name)
    xspectra = None
    plan = getattr(capture, "plan", None)  # a capture block's: spectra per frame, bits
    if integration_spectra is not None and isinstance(plan, CapturePlan):
        bits = plan.geometry.sample_bits if plan.geometry is not None else 8
        xspectra, ninteg = split_integration(integration_spectra, plan.frame_spectra,
                                             max_spectra_int32(bits))
    flag = flagging is not None and flagging.on
    x = rt.XEngineBlock(capture, backend=backend, geometry=geometry,
                        integration_spectra=xspectra or xengine_spectra,
                        backend_options=backend_options, core=cores.get("xengine"),
                        overlap_capture=isinstance(plan, CapturePlan), count_extremes=flag)
    length = ({"ninteg": ninteg} if integration_spectra is None or xspectra
              else {"integration_spectra": integration_spectra})
    integ = rt.IntegrateBlock(x, **length, geometry=geometry, core=cores.get("integrate"))
    writer = look = out = health = None
    if flag:
        from ..health.rfi import AOFlaggerRfi, parse_rfi

        rfi = None
        if flagging.rfi is not None:
            rfi = AOFlaggerRfi(telescope_name(capture), parse_rfi(flagging.rfi)[1])
        health = rt.HealthBlock(integ, flag_inputs=flagging.inputs, rfi=rfi,
                                rfi_window=flagging.rfi_window,
                                thresholds=flagging.thresholds, xengine=x,
                                core=cores.get("health"))
    writers = []
    if directory is not None:
        for fmt in formats:
            name = filename
            if filename is not None and fmt != formats[0]:
                name = Path(filename).with_suffix(FILE_FORMATS[fmt])
            writers.append(rt.UVH5WriterBlock(
                integ, flags=health, directory=directory, prefix=prefix,
                dumps_per_file=dumps_per_file, overwrite=overwrite,
                new_name_if_exists=new_name_if_exists, filename=name, channels=channels,
                on_write_error=on_write_error, file_format=fmt, phase_centre=phase_centre,
                core=cores.get("ms_writer" if writers else "writer")))
        writer = writers[0] if writers else None
        look = (rt.QuicklookBlock(integ.orings[0], directory=directory,
                                  core=cores.get("quicklook")) if quicklook else None)
    if spead is not None:
        out = rt.SpeadOutputBlock(integ, destination=spead, **(spead_options or {}),
                                  core=cores.get("spead"))
    return Chain(x, integ, writer, look, out, health,
                 writers[1] if len(writers) > 1 else None)


def telescope_name(capture: Block) -> str:
    """The telescope of a capture's array (AOFlagger's strategy), or "" if it has none."""
    array = getattr(capture, "array", None)
    return getattr(array, "telescope_name", "") or ""
