"""QuicklookBlock: a PNG of the last integration of each sequence (see ``quicklook``).

A PNG that cannot be written (full disk) is one error line naming it, kept in ``failures``;
the block does not stop the pipeline for it: the PNG is a convenience, and stopping here could
cut the UVH5 writer off before data it already holds is written (and would race the writer's own
error, which must stay the one reported). Scripts turn ``failures`` into a non-zero exit.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ..array import ArrayDescription
from ..outputs.quicklook_png import quicklook_triangle
from ..runtime.pipeline import Block, SinkBlock
from ..runtime.ring import Ring
from .base import BlockLogic
from .headers import channel_freqs

log = logging.getLogger(__name__)


class QuicklookLogic(BlockLogic):
    """Keeps the latest visibility frame; renders ``{directory}/{prefix}{sequence}.png``."""

    def __init__(self, vis: Block | Ring, *, directory: str | Path, prefix: str = "quicklook_",
                 **kwargs: Any) -> None:
        super().__init__(vis, gulp_nframe=1, **kwargs)
        self.directory, self.prefix = Path(directory), prefix
        self.images: list[Path] = []
        #: One line per PNG that could not be written (file and errno).
        self.failures: list[str] = []
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
        safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in self._seq)
        path = self.directory / f"{self.prefix}{safe}.png"
        title = (f"{self.hdr.get('array', {}).get('telescope_name', '')} {self._seq}: "
                 f"{self.hdr.get('nspectra')} spectra, backend {self.hdr.get('xengine_backend')}")
        names = (ArrayDescription.from_dict(self.hdr["array"]).stream_names
                 if "array" in self.hdr else None)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self.images.append(quicklook_triangle(path, self._last, channel_freqs(self.hdr),
                                                  self.hdr["geometry"]["nstream"], title,
                                                  names))
        except OSError as exc:
            self.failures.append(str(exc))
            log.error("%s: %s", self.name, exc)


class QuicklookBlock(QuicklookLogic, SinkBlock):
    __doc__ = QuicklookLogic.__doc__
