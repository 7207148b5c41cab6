"""QuicklookBlock: a PNG of the last integration of each sequence (see ``quicklook``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..pipeline import Block, SinkBlock
from ..quicklook import quicklook_triangle
from ..ring import Ring
from .base import BlockLogic
from .headers import channel_freqs


class QuicklookLogic(BlockLogic):
    """Keeps the latest visibility frame; renders ``{directory}/{prefix}{sequence}.png``."""

    def __init__(self, vis: Block | Ring, *, directory: str | Path, prefix: str = "quicklook_",
                 **kwargs: Any) -> None:
        super().__init__(vis, gulp_nframe=1, **kwargs)
        self.directory, self.prefix = Path(directory), prefix
        self.images: list[Path] = []
        self._last = None

    def on_sequence(self, iseq: Any) -> None:
        self.hdr, self._last, self._seq = iseq.header, None, iseq.name

    def on_data(self, ispan: Any) -> None:
        self._last = self.array(ispan)[-1].copy()

    def on_skip(self, lost: list[slice], ospans: list) -> list[int]:
        return []  # shows the latest dump; lost ones are counted (lost_frames)

    def on_sequence_end(self, iseq: Any) -> None:
        if self._last is None:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in self._seq)
        path = self.directory / f"{self.prefix}{safe}.png"
        title = (f"{self.hdr.get('array', {}).get('telescope_name', '')} {self._seq}: "
                 f"{self.hdr.get('nspectra')} spectra, backend {self.hdr.get('xengine_backend')}")
        self.images.append(quicklook_triangle(path, self._last, channel_freqs(self.hdr),
                                              self.hdr["geometry"]["nstream"], title))


class QuicklookBlock(QuicklookLogic, SinkBlock):
    __doc__ = QuicklookLogic.__doc__
