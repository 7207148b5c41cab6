"""The recording source block on real Bifrost (``bifrost.pipeline.SourceBlock``), through the
adapter :mod:`xengine_block.bifrost` runs our sources with: same arguments, same rings and
headers as :class:`xengine_block.readers.source.RecordingSource`. Importing this imports
Bifrost (ImportError with the install command where it is absent)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..array import ArrayDescription
from ..readers.base import Recording
from ..readers.source import RecordingSource as _OurSource
from ..runtime.pipeline import Pipeline as _OurPipeline
from .runtime import SourceAdapter, bfp


class RecordingSource(SourceAdapter, bfp.SourceBlock):
    """Recordings -> frames ring + presence-mask ring, in a Bifrost pipeline."""

    def __init__(self, recordings: Sequence[Recording], *, array: ArrayDescription | None = None,
                 gulp_nframe: int = 1, name: str | None = None) -> None:
        with _OurPipeline():  # the source's logic object; our runtime never runs it
            inner = _OurSource(recordings, array=array, gulp_nframe=gulp_nframe)
        super().__init__(inner, 2, name=name)

    @property
    def frames_written(self) -> int:
        return self.inner.frames_written

    @property
    def gap_frames(self) -> int:
        return self.inner.gap_frames

    def headers(self, i: int) -> list[dict[str, Any]]:
        return self.inner.headers(i)
