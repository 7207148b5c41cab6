"""This package's blocks as real Bifrost blocks (``bifrost.pipeline``); docs/bifrost.md.

Importing it imports Bifrost (library found without ``LD_LIBRARY_PATH`` when installed by
``scripts/install_bifrost.sh``; telemetry disabled) and raises ImportError with the install
command when Bifrost is absent. Use :class:`Pipeline` from here: Bifrost's own does not report
a block's failure.
"""

from ..runtime.pipeline import PipelineError
from .blocks import (
    CaptureBlock,
    HealthBlock,
    IntegrateBlock,
    QuicklookBlock,
    SpeadOutputBlock,
    UVH5WriterBlock,
    XEngineBlock,
)
from .correlate_dropin import correlate
from .runtime import BifrostBlock, Pipeline, as_old_ring, as_ours, as_ring, attach_counters, bf

__all__ = ["BifrostBlock", "CaptureBlock", "HealthBlock", "IntegrateBlock", "Pipeline",
           "PipelineError", "QuicklookBlock", "SpeadOutputBlock", "UVH5WriterBlock", "XEngineBlock",
           "as_old_ring", "as_ours", "as_ring", "attach_counters", "bf", "correlate"]
