"""What every block of this package does the same way in either runtime (ours or Bifrost).

Each block is written once, as a mixin of hooks (``XEngineLogic``, ...), and runs in a runtime
by being combined with that runtime's block class: ``class XEngineBlock(XEngineLogic,
MultiTransformBlock)`` here, and the same mixin with Bifrost's ``MultiTransformBlock`` (plus a
thin adapter) in :mod:`xengine_block.bifrost`. The mixins touch spans only through
:meth:`BlockLogic.array` (numpy in this package's convention: complex integers as an integer
axis of 2 (re, im)) and the span fields both runtimes share (``frame_offset``, ``nframe``,
``nframe_overwritten``).

Lost input (unguaranteed readers, ``guarantee=False``) is handled here, once, because the two
runtimes report it differently (Bifrost passes slices that start at 0, calls ``on_skip`` with
the on_data output spans when input was overwritten while processing, and skips the next gulp
too). The mixin keeps each input's read position and turns every report into the absolute input
frames lost that no ``on_data`` has seen, so a block's ``on_skip(lost, ospans)`` produces
exactly the outputs that cover them, marked as no data (zero valid spectra), and counts them in
``lost_frames`` / ``nodata_outputs``. Input overwritten while ``on_data`` read it is the
block's own check (:meth:`BlockLogic.overwritten`, after copying what it needs); the runtime's
after-the-fact skip report then keeps what ``on_data`` committed.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class BlockLogic:
    """Mixin for the runtime-neutral blocks; goes before the runtime's block class."""

    #: Input frames lost to the writer (unguaranteed reading), all sequences.
    lost_frames: int = 0
    #: Outputs emitted as "no data" (zero valid spectra) because their input was lost.
    nodata_outputs: int = 0

    def array(self, span: Any) -> np.ndarray:
        """``span.data`` as numpy in this package's convention (runtime adapters override)."""
        return span.data

    def size_output_rings(self, frame_bytes: list[int], reserve: int) -> None:
        """Fault the output rings in now, before data flows, for this block's writes of
        ``reserve`` frames and a reader of one frame a gulp, three deep (the integrator's and
        the writer's reads). Otherwise that reader sizes them as it opens its first sequence,
        on the run's critical path: faulting megabytes in takes milliseconds, and meanwhile
        the kernel's lock on the process's mappings holds up other threads' allocations (the
        X-engine's first call). A reader that wants more grows them as before; rings that
        already hold memory are left alone."""
        if any(ring.total_bytes for ring in self.orings):
            return
        for ring, nbyte in zip(self.orings, frame_bytes, strict=True):
            ring.resize(reserve * nbyte, (reserve + 2) * nbyte)

    def overwritten(self, ispans: list[Any]) -> bool:
        """True if an unguaranteed reader's input changed while it was read (call after use)."""
        return not self.guarantee and any(s.nframe_overwritten for s in ispans)

    # ---- hooks the runtimes call (same names and arguments in ours and in Bifrost) ------------

    def _on_sequence(self, iseqs: list[Any]) -> Any:
        self._ipos = [0] * len(iseqs)  # next input frame not yet seen, per input
        self._counted = 0  # lost frames before this one are counted
        self._data_ospans: list[Any] | None = None
        self._data_commit: Any = None
        return super()._on_sequence(iseqs)

    def _on_data(self, ispans: list[Any], ospans: list[Any]) -> Any:
        commit = super()._on_data(ispans, ospans)
        self._data_ospans, self._data_commit = ospans, commit
        # (an empty span's frame_offset is where the writer is, not what was read: its
        # frames came as a skip report, which moved the position already)
        self._ipos = [max(p, s.frame_offset + s.nframe) if s.nframe else p
                      for p, s in zip(self._ipos, ispans, strict=True)]
        return commit

    def _on_sequence_end(self, iseqs: list[Any]) -> Any:
        # The last gulp's spans view the output ring: held past the sequence, they would keep
        # its buffer from the memory pool once the pipeline has run (runtime.memory).
        self._data_ospans = self._data_commit = None
        return super()._on_sequence_end(iseqs)

    def _on_skip(self, islices: list[slice], ospans: list[Any]) -> Any:
        if ospans is self._data_ospans:
            # Overwritten while on_data ran: on_data checked that itself; keep its output.
            return self._data_commit
        lost = [slice(p, p + max(sl.stop - sl.start, 0))
                for p, sl in zip(self._ipos, islices, strict=True)]
        self._ipos = [sl.stop for sl in lost]
        frames = lost_frames_any(lost)  # count each frame once, whichever input lost it
        if frames:
            self.lost_frames += max(frames.stop - max(frames.start, self._counted), 0)
            self._counted = max(self._counted, frames.stop)
        return self.on_skip(lost, ospans)

    def on_skip(self, lost: list[slice], ospans: list[Any]) -> list[int]:
        """Input frames ``lost`` (absolute, per input) will never be seen: emit their outputs."""
        raise NotImplementedError


def lost_frames_any(lost: list[slice]) -> range:
    """Frames lost on at least one input (lockstep inputs are lost together or apart)."""
    spans = [sl for sl in lost if sl.stop > sl.start]
    if not spans:
        return range(0)
    return range(min(sl.start for sl in spans), max(sl.stop for sl in spans))


def common_frames(ispans: list[Any]) -> tuple[int, int]:
    """``[lo, hi)``: the input frames present in every lockstep span (unguaranteed readers may
    get spans that start later on one input than on another)."""
    lo = max(s.frame_offset for s in ispans)
    hi = min(s.frame_offset + s.nframe for s in ispans)
    return lo, max(lo, hi)
