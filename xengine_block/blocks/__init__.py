"""The pipeline blocks: capture -> X-engine -> integrate -> UVH5 writer / quick-look / SPEAD
visibility stream (``outputs/spead_block.py``, beside the format it sends)."""

from ..outputs.spead_block import SpeadOutputBlock
from .integrate import IntegrateBlock
from .quicklook import QuicklookBlock
from .writer import UVH5WriterBlock
from .xengine import XEngineBlock

__all__ = ["IntegrateBlock", "QuicklookBlock", "SpeadOutputBlock", "UVH5WriterBlock",
           "XEngineBlock"]
