"""SpeadOutputBlock: dumps (integrated visibilities + valid counts) -> MeerKAT
baseline-correlation-products SPEAD heaps (:mod:`.spead`), next to or instead of UVH5 files.

Inputs (lockstep): ``ci64 [-1, C, nbl]`` and ``i64 [-1, G, nbl]`` from the integrate block, one
frame per dump. Each dump becomes one ``xeng_raw`` heap whose timestamp is the dump's first
spectrum in ADC samples (``samples_between_spectra`` from the constructor or the header, which
a MeerKAT capture puts there); baselines of antennas that lost data are marked missing; a dump
in which every antenna lost data (or that an unguaranteed reader lost) is not sent and is
counted in ``dumps_skipped``. :meth:`close` sends the stop heap once the pipeline is done.
The same logic runs as a real Bifrost block (:mod:`xengine_block.bifrost`).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ..array import ArrayDescription
from ..outputs.spead import (
    VisibilitySender,
    antennas_present,
    dump_rate,
    encode,
    input_labels,
    n_products,
    udp_stream,
)
from ..runtime.pipeline import Block, MultiTransformBlock
from ..runtime.ring import Ring
from .base import BlockLogic, common_frames, lost_frames_any
from .headers import paired_inputs, require_keys

log = logging.getLogger(__name__)

#: Header keys the block reads (docs/bifrost.md).
SPEAD_OUTPUT_KEYS = ("nspectra", "array", "chan0", "nchan", "fs_hz")


def parse_udp(destination: str) -> tuple[str, int]:
    """``udp://ADDRESS:PORT`` -> (address, port)."""
    host, sep, port = destination.removeprefix("udp://").rpartition(":")
    if not destination.startswith("udp://") or not sep or not host or not port.isdigit():
        raise ValueError(f"SPEAD destination {destination!r}: expected udp://ADDRESS:PORT")
    return host, int(port)


class SpeadOutputLogic(BlockLogic):
    """Sink sending each dump as a MeerKAT ``xeng_raw`` heap.

    Parameters
    ----------
    vis, valid : the integrate block (its two outputs), or the two rings.
    destination : ``udp://ADDRESS:PORT`` (unicast, or a multicast group sent from
        ``interface`` with ``ttl``); or give ``stream``, any spead2 send stream (tests).
    samples_between_spectra : ADC samples per spectrum (default: the header's).
    total_channels : the band's channels (heap counter step; default chan0 + nchan).
    rate_factor : send each heap in ``1 / rate_factor`` of a dump's duration (katgpucbf's
        ``--send-rate-factor`` 1.1); 0 sends as fast as possible.
    pol_names : the two feeds' names in the ``bls_ordering`` labels (``{antenna}{pol}``).
    """

    def __init__(self, vis: Block | Ring, valid: Block | Ring | None = None, *,
                 destination: str | None = None, stream: Any = None,
                 samples_between_spectra: int | None = None, total_channels: int | None = None,
                 rate_factor: float = 0.0, pol_names: tuple[str, str] = ("x", "y"),
                 ttl: int = 4, interface: str | None = None,
                 descriptor_interval_s: float = 5.0, **kwargs: Any) -> None:
        super().__init__(paired_inputs(vis, valid), gulp_nframe=1, **kwargs)
        self.orings = []
        if (destination is None) == (stream is None):
            raise ValueError("give a destination (udp://ADDRESS:PORT) or a stream")
        self.destination = parse_udp(destination) if destination is not None else None
        self._stream = stream
        self.samples_between_spectra, self.total_channels = samples_between_spectra, \
            total_channels
        self.rate_factor, self.pol_names = rate_factor, tuple(pol_names)
        self.ttl, self.interface = ttl, interface
        self.descriptor_interval_s = descriptor_interval_s
        self.sender: VisibilitySender | None = None
        self.dumps_sent = self.dumps_skipped = self.dumps_with_missing = self.clipped = 0

    def on_sequence(self, iseqs: list) -> list[dict[str, Any]]:
        hdr = iseqs[0].header
        require_keys(hdr, SPEAD_OUTPUT_KEYS, self.name)
        sbs = self.samples_between_spectra or hdr.get("samples_between_spectra")
        if not sbs:
            raise ValueError(f"{self.name}: timestamps are ADC samples: give "
                             f"samples_between_spectra (the header has none)")
        self.sbs = int(sbs)
        self.t0, self.nspectra = iseqs[0].time_tag, int(hdr["nspectra"])
        self._next = 0
        array = ArrayDescription.from_dict(hdr["array"])
        self.nant = array.nant
        labels = input_labels(list(array.antenna_names), self.pol_names)
        nchan, chan0 = int(hdr["nchan"]), int(hdr["chan0"])
        key = (labels, nchan, chan0, self.nspectra)
        if self.sender is None or self._key != key:  # first sequence, or the shape changed
            self.close()
            heap_bytes = nchan * n_products(self.nant) * 8
            stream = self._stream
            if stream is None:
                rate = dump_rate(heap_bytes, self.nspectra / hdr["fs_hz"], self.rate_factor)
                stream = udp_stream(*self.destination, heap_bytes=heap_bytes,
                                    rate_bytes_s=rate, ttl=self.ttl, interface=self.interface)
            self.sender = VisibilitySender(
                stream, labels, nchan=nchan, chan0=chan0,
                total_channels=self.total_channels or chan0 + nchan, n_accs=self.nspectra,
                descriptor_interval_s=self.descriptor_interval_s)
            self._key = key
        return []

    def define_output_nframes(self, input_nframes: list[int]) -> list[int]:
        return []

    def _send(self, frame: int, vis: np.ndarray, valid: np.ndarray) -> None:
        present = antennas_present(valid, self.nspectra, self.nant)
        if not present.any():  # katgpucbf skips such dumps (output_x_skipped_accs)
            self.dumps_skipped += 1
            return
        result = encode(vis, present, out=self.sender.buffer)
        self.sender.send((self.t0 + frame * self.nspectra) * self.sbs)
        self.dumps_sent += 1
        self.dumps_with_missing += bool(result.missing_ants)
        self.clipped += result.clipped

    def on_data(self, ispans: list, ospans: list) -> list[int]:
        vis_in, valid_in = self.array(ispans[0]), self.array(ispans[1])
        lo, hi = common_frames(ispans)
        for f in range(max(lo, self._next), hi):
            self._next = f + 1
            vis = vis_in[f - ispans[0].frame_offset]
            valid = valid_in[f - ispans[1].frame_offset]
            if not self.guarantee:  # copy, then check the writer did not come back meanwhile
                vis, valid = vis.copy(), valid.copy()
                if self.overwritten(ispans):
                    self.lost_frames += 1
                    self.nodata_outputs += 1
                    self.dumps_skipped += 1
                    continue
            self._send(f, vis, valid)
        return []

    def on_skip(self, lost: list[slice], ospans: list) -> list[int]:
        """Lost dumps are not sent (as katgpucbf's dumps without data)."""
        for frame in lost_frames_any(lost):
            if frame >= self._next:
                self._next = frame + 1
                self.dumps_skipped += 1
                self.nodata_outputs += 1
        return []

    def spead_counters(self) -> dict[str, int]:
        """Dumps sent, skipped (no antenna whole, or lost), with missing baselines; values
        saturated."""
        return {"dumps_sent": self.dumps_sent, "dumps_skipped": self.dumps_skipped,
                "dumps_with_missing": self.dumps_with_missing, "clipped": self.clipped}

    def close(self) -> None:
        """Send the stop heap and release the stream (after the pipeline has run)."""
        if self.sender is not None:
            self.sender.close()
            self.sender = None


class SpeadOutputBlock(SpeadOutputLogic, MultiTransformBlock):
    __doc__ = SpeadOutputLogic.__doc__
