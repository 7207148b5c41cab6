"""The pipeline blocks: capture -> X-engine -> integrate -> (health: flags) -> UVH5 writer /
quick-look / SPEAD visibility stream (``spead_output.py``; the heaps' format is
``outputs/spead.py``)."""

from .health import HealthBlock
from .integrate import IntegrateBlock
from .quicklook import QuicklookBlock
from .spead_output import SpeadOutputBlock
from .writer import UVH5WriterBlock
from .xengine import XEngineBlock

__all__ = ["HealthBlock", "IntegrateBlock", "QuicklookBlock", "SpeadOutputBlock", "UVH5WriterBlock",
           "XEngineBlock"]
