"""The pipeline blocks: capture -> X-engine -> integrate -> UVH5 writer / quick-look."""

from .integrate import IntegrateBlock
from .quicklook import QuicklookBlock
from .writer import UVH5WriterBlock
from .xengine import XEngineBlock

__all__ = ["IntegrateBlock", "QuicklookBlock", "UVH5WriterBlock", "XEngineBlock"]
