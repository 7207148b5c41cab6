"""Our blocks as real Bifrost blocks: the same logic mixins as ``xengine_block.blocks`` (one
implementation, two runtimes), on Bifrost's block classes, with :class:`BifrostBlock` first.
Constructor arguments are those of our blocks."""

from __future__ import annotations

import logging
from contextlib import ExitStack
from typing import Any

import numpy as np

from .._moved import RenamedAttribute
from ..array import ArrayDescription
from ..blocks.health import HealthLogic
from ..blocks.integrate import IntegrateLogic
from ..blocks.quicklook import QuicklookLogic
from ..blocks.spead_output import SpeadOutputLogic
from ..blocks.writer import UVH5WriterLogic
from ..blocks.xengine import XEngineLogic
from ..runtime.memory import bytes_at, populate
from .headers import LWA_TIME_TAG_HZ, HeaderAdapter
from .runtime import (
    BifrostBlock,
    SourceAdapter,
    as_ring,
    bfp,
    ring_memory,
    transformed_view,
)

log = logging.getLogger(__name__)


class XEngineBlock(BifrostBlock, XEngineLogic, bfp.MultiTransformBlock):
    __doc__ = (XEngineLogic.__doc__ or "") + """
    On Bifrost the data input may also be a capture ring (``bifrost.ring.Ring`` or ``ring2``)
    written by Bifrost's ``UDPCapture`` / ``UDPVerbsCapture`` / ``DiskReader`` with an LWA flat
    header, or a Bifrost voltage tensor ``['time', 'freq', 'station', 'pol']``: their headers
    are read through :class:`~xengine_block.bifrost.headers.HeaderAdapter` (docs/bifrost.md).

    array : the array description, where the sequence header has none (else one is assumed
        and the log says so: :func:`~xengine_block.bifrost.headers.assumed_array`).
    time_tag_hz : ticks per second of an ADP/NDP capture header's ``time_tag`` (LWA: 196 MHz).
    nibble_order : which nibble of a capture ring's ci4 byte is the real part.
    headers : the header adapter to use instead (:func:`~xengine_block.bifrost.correlate`'s).
    """

    def __init__(self, data: Any, mask: Any = None, *, array: ArrayDescription | None = None,
                 time_tag_hz: float = LWA_TIME_TAG_HZ, nibble_order: str = "re_high",
                 headers: HeaderAdapter | None = None, **kwargs: Any) -> None:
        super().__init__(as_ring(data), mask, **kwargs)
        if headers is None:
            headers = HeaderAdapter(self.name, array=array, time_tag_hz=time_tag_hz,
                                    nibble_order=nibble_order)
        headers.who = headers.who or self.name
        self.headers = headers
        self.irings[0] = transformed_view(self.irings[0], headers)

    def _ring_holds_memory(self) -> bool:
        return ring_memory(self.irings[0])[1] > 0

    def _zero_copy(self) -> bool:
        return (getattr(self.backend, "adopt_host_memory", None) is not None
                and getattr(self.backend, "zero_copy", False))

    def _allocate_input_ring(self, contiguous: int, total: int, zero_copy: bool) -> None:
        """Bifrost rings allocate in C (no allocator to install): resize, fault the pages in
        (:func:`~xengine_block.runtime.memory.populate`, as our rings do), and have an NPU
        backend map that memory as user-pointer buffer objects, where XRT allows."""
        ring = self.irings[0]
        ring.resize(contiguous, total)
        address, nbyte = ring_memory(ring)
        populate(bytes_at(address, nbyte))
        if not zero_copy:
            if getattr(self.backend, "adopt_host_memory", None) is not None:
                log.info("%s: frames are copied into NPU buffers: frame layout differs from "
                         "the NPU input (S != npu_block or several channel groups)", self.name)
            return
        self._ring_memory = (address, nbyte)
        reason = self.backend.adopt_host_memory(address, nbyte)
        if reason:
            log.info("%s: frames are copied into NPU buffers: %s", self.name, reason)
            return
        log.info("%s: data ring %r mapped as NPU user-pointer buffers (zero copy)", self.name,
                 ring.name)

    def on_data(self, ispans: list, ospans: list) -> list[int]:
        mem = getattr(self, "_ring_memory", None)
        if mem is not None and ring_memory(self.irings[0]) != mem:
            # The ring grew (a reader or writer asked for more): its old memory is gone.
            log.warning("%s: data ring reallocated; frames are copied into NPU buffers",
                        self.name)
            self.backend.forget_host_memory(mem[0])
            self._ring_memory = None
        return super().on_data(ispans, ospans)


class IntegrateBlock(BifrostBlock, IntegrateLogic, bfp.MultiTransformBlock):
    __doc__ = IntegrateLogic.__doc__


class HealthBlock(BifrostBlock, HealthLogic, bfp.MultiTransformBlock):
    __doc__ = HealthLogic.__doc__


class UVH5WriterBlock(BifrostBlock, UVH5WriterLogic, bfp.MultiTransformBlock):
    __doc__ = UVH5WriterLogic.__doc__


class SpeadOutputBlock(BifrostBlock, SpeadOutputLogic, bfp.MultiTransformBlock):
    __doc__ = SpeadOutputLogic.__doc__


class QuicklookBlock(BifrostBlock, QuicklookLogic, bfp.SinkBlock):
    __doc__ = QuicklookLogic.__doc__


class CaptureBlock(SourceAdapter, bfp.SourceBlock):
    """Our :class:`xengine_block.capture.receive.CaptureBlock` (same arguments) as a Bifrost source:
    frames ring + presence-mask ring. ``capture_counters()`` and ``receiving`` are the capture's.

    Not zero copy here: Bifrost reallocates a ring (a reader sizing it when it opens a
    sequence) only while no write span is open, so spans cannot be lent to spead2 for as long
    as it needs them without risking a deadlock; spead2 fills the capture's own slots and each
    frame is copied into a one-frame Bifrost span (one memcpy per frame, as before zero copy).
    """

    #: The old name of :attr:`plan` (0.1), kept for one release.
    layout = RenamedAttribute("plan")

    def __init__(self, *args: Any, name: str | None = None, **kwargs: Any) -> None:
        from ..capture.receive import CaptureBlock as OurCapture
        from ..runtime.pipeline import Pipeline as OurPipeline

        with OurPipeline():  # the capture's logic object; our runtime never runs it
            inner = OurCapture(*args, **kwargs)
        # Bifrost's block runs it, so Bifrost pins that thread (and spead2's, started in it)
        super().__init__(inner, 2, name=name, core=kwargs.get("core"))
        self.receiving = inner.receiving
        self.plan = inner.plan  # the capture plan's sizes (correlator_chain reads them)

    def capture_counters(self) -> dict[str, int]:
        return self.inner.capture_counters()

    def main(self, orings: list[Any]) -> None:
        self.inner.capture_into(_CaptureOutput(self, orings), self.counters)


class _CaptureOutput:
    """The capture's output (``capture.receive.CaptureOutput``) on Bifrost rings: its slots are
    the capture's own memory; a slot committed while a sequence is open is copied into it."""

    def __init__(self, block: CaptureBlock, orings: list[Any]) -> None:
        from ..capture.receive import slot_pool

        self.block, self.orings = block, orings
        self.plan = block.inner.plan
        self.slots = self
        self._pool = slot_pool(self.plan)
        self._reserved: list[tuple[np.ndarray, np.ndarray]] = []
        self._stack: ExitStack | None = None
        self._oseqs: list[Any] = []

    def begin(self, headers: list[dict[str, Any]]) -> None:
        self.end()
        self._stack = ExitStack()
        self.block.counters.add(sequences=1)
        self._oseqs, _ = bfp.SourceBlock.begin_sequences(self.block, self._stack, self.orings,
                                                         headers, [], [])

    def end(self) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            stack.close()

    # CaptureSlots
    def reserve(self) -> tuple[np.ndarray, np.ndarray]:
        slot = self._pool.reserve()
        self._reserved.append(slot)
        return slot

    def commit(self, nframe: int | None = None) -> None:
        data, present = self._reserved.pop(0)
        n = self.plan.chunk_frames if nframe is None else nframe
        if self._stack is not None:  # frames of the open sequence (else space between them)
            frames = data.reshape(self.plan.chunk_frames, -1)
            masks = self.plan.grid.mask(present)
            for i in range(n):  # frame by frame: the rings are sized for the block's gulp
                for oseq, src in zip(self._oseqs, (frames[i], masks[i]), strict=True):
                    with oseq.reserve(1) as span:
                        bytes_at(span._data_ptr, src.nbytes)[...] = (
                            src.reshape(-1).view(np.uint8))
                        span.commit(1)
        self._pool.commit()

    def cancel(self) -> None:
        self._reserved.clear()
        self._pool.cancel()
