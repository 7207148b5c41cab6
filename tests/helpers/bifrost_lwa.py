"""Test helpers: LWA-style capture rings made by Bifrost itself.

Bifrost's own packet writer (``bifrost.packet_writer``: ``UDPTransmit`` / ``DiskWriter``, format
``chips_<nchan>``) sends ci4 samples we generate; Bifrost's own capture (``UDPCapture`` /
``DiskReader``, format ``chips``) writes them into a ``bifrost.ring.Ring`` with the sequence
callback of LWA-SV's ADP (``lwa-project/lwa_sv`` ``scripts/adp_drx.py`` ``CaptureOp
.seq_callback``: the same keys and formulas). How the loop is driven follows Bifrost's
``test/test_udp_io.py`` (CPU only).

A chips packet carries one spectrum of ``nchan`` channels x 32 inputs (16 stands x 2 pols) of
one source; the capture writes ``[time][chan][src][32 inputs]``, i.e. ``(time, chan,
stand*pol)`` with stand = 16 * src + k // 2 (Bifrost's ``src/formats/chips.hpp``).
"""

from __future__ import annotations

import ctypes
import datetime
import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from tests.conftest import bifrost_or_skip

xb = bifrost_or_skip()
from bifrost.address import Address  # noqa: E402 - Bifrost imports only after the skip
from bifrost.packet_capture import DiskReader, PacketCaptureCallback, UDPCapture  # noqa: E402
from bifrost.packet_writer import DiskWriter, HeaderInfo, UDPTransmit  # noqa: E402
from bifrost.ring import Ring  # noqa: E402
from bifrost.udp_socket import UDPSocket  # noqa: E402

#: ADP's clock and channels (lwa_sv scripts/adp/AdpCommon.py: FS, CHAN_BW).
FS, CHAN_BW = 196.0e6, 25e3
INPUTS_PER_SRC = 32
#: BFpacketcapture_status (src/bifrost/packet_capture.h): started, ended, continued, changed,
#: no data, interrupted, error.
STARTED, ENDED, CONTINUED, CHANGED, NO_DATA, INTERRUPTED, ERROR = range(7)


def ci4_samples(nstream: int, nchan: int, ntime: int, seed: int = 0) -> np.ndarray:
    """Natural int8 ``x[stream, chan, time, reim]`` in the ci4 range -8..7 (-8 included)."""
    return np.random.default_rng(seed).integers(-8, 8, (nstream, nchan, ntime, 2), np.int8)


def chips_payloads(x: np.ndarray) -> np.ndarray:
    """``x`` as chips packet payloads ``[time, src, chan * 32]`` bytes, real part in the high
    nibble (what LWA F-engines send); input ``k`` of source ``src`` is stream ``32*src + k``."""
    nstream, nchan, ntime, _ = x.shape
    b = ((x[..., 0].astype(np.uint8) & 0xF) << 4) | (x[..., 1].astype(np.uint8) & 0xF)
    b = b.reshape(nstream // INPUTS_PER_SRC, INPUTS_PER_SRC, nchan, ntime)
    return np.ascontiguousarray(b.transpose(3, 0, 2, 1)).reshape(ntime, -1, nchan * 32)


def as_ci4(payloads: np.ndarray) -> Any:
    arr = xb.bf.ndarray(shape=payloads.shape, dtype="ci4")
    arr.view(np.uint8)[...] = payloads
    return arr


class AdpCapture:
    """ADP's ``CaptureOp`` (lwa_sv scripts/adp_drx.py): its sequence callback, and a receive
    loop that ends when the capture does (bounded by ``deadline_s``)."""

    def __init__(self, ring: Ring, *, utc_start: datetime.datetime, nstand_per_src: int = 16,
                 deadline_s: float = 60.0, header_changes: dict[str, Any] | None = None) -> None:
        self.ring, self.utc_start = ring, utc_start
        self.header_changes = header_changes or {}  # tests: keys to change (None: delete)
        self.nstand_per_src, self.deadline_s = nstand_per_src, deadline_s
        self.headers: list[dict[str, Any]] = []
        self.statuses: list[int] = []

    def seq_callback(self, seq0, chan0, nchan, nsrc, time_tag_ptr, hdr_ptr, hdr_size_ptr):
        timestamp0 = int((self.utc_start - datetime.datetime(1970, 1, 1)).total_seconds())
        time_tag0 = timestamp0 * int(FS)
        time_tag = time_tag0 + seq0 * (int(FS) // int(CHAN_BW))
        time_tag_ptr[0] = time_tag
        hdr = {"time_tag": time_tag, "seq0": seq0, "chan0": chan0, "nchan": nchan,
               "cfreq": (chan0 + 0.5 * (nchan - 1)) * CHAN_BW, "bw": nchan * CHAN_BW,
               "nstand": nsrc * self.nstand_per_src, "npol": 2, "complex": True, "nbit": 4}
        for key, value in self.header_changes.items():
            if value is None:
                del hdr[key]
            else:
                hdr[key] = value
        self.headers.append(hdr)
        hdr_str = json.dumps(hdr).encode()
        self.header_buf = ctypes.create_string_buffer(hdr_str)
        hdr_ptr[0] = ctypes.cast(self.header_buf, ctypes.c_void_p)
        hdr_size_ptr[0] = len(hdr_str)
        return 0

    def callback(self) -> Any:
        cb = PacketCaptureCallback()
        cb.set_chips(self.seq_callback)
        return cb

    def run(self, capture: Any) -> None:
        """Receive until the capture ends (no packet for the socket's timeout after data)."""
        t0 = time.monotonic()
        with capture:
            while time.monotonic() - t0 < self.deadline_s:
                status = capture.recv()
                self.statuses.append(status)
                if status in (ENDED, INTERRUPTED, ERROR) or (
                        status == NO_DATA and STARTED in self.statuses):
                    break


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _capture_ring(name: str, payloads: np.ndarray, buffer_ntime: int) -> Ring:
    """A capture ring holding every spectrum of ``payloads`` (twice over), so that the capture
    can finish before any reader opens it (nothing is overwritten) and readers may start late."""
    ring = Ring(name=name)
    frame = payloads[0].nbytes
    ring.resize(buffer_ntime * frame, 2 * payloads.shape[0] * frame)
    return ring


def udp_chips_capture(x: np.ndarray, *, seq0: int, chan0: int, buffer_ntime: int,
                      utc_start: datetime.datetime, timeout_s: float = 1.0,
                      chunk: int = 16) -> tuple[Ring, AdpCapture]:
    """Bifrost sends ``x`` as chips packets over loopback UDP, Bifrost captures them into a
    new ``bifrost.ring.Ring`` (ADP callback, in a thread) that holds all of them; returns once
    the capture has ended. Packets go ``chunk`` spectra at a time with a short pause, so the
    socket buffer never overflows; the first packet's sequence number is ``seq0`` (a multiple
    of ``buffer_ntime``: the capture drops packets before its first slot boundary)."""
    ntime = x.shape[2]
    assert seq0 % buffer_ntime == 0 and ntime % buffer_ntime == 0
    payloads = chips_payloads(x)
    nsrc = payloads.shape[1]
    ring = _capture_ring(f"chips-udp-{id(x)}", payloads, buffer_ntime)
    addr = Address("127.0.0.1", free_udp_port())
    isock, osock = UDPSocket(), UDPSocket()
    isock.bind(addr)
    isock.timeout = timeout_s
    osock.connect(addr)
    op = AdpCapture(ring, utc_start=utc_start)
    capture = UDPCapture("chips", isock, ring, nsrc, 0, 9000, buffer_ntime, buffer_ntime,
                         sequence_callback=op.callback())
    thread = threading.Thread(target=op.run, args=(capture,), name="chips-capture",
                              daemon=True)
    thread.start()
    tx = UDPTransmit(f"chips_{x.shape[1]}", osock)
    desc = HeaderInfo()
    desc.set_nchan(x.shape[1])
    desc.set_chan0(chan0)
    desc.set_nsrc(nsrc)
    for t in range(0, ntime, chunk):  # the chips header's seq is 1-based (chips.hpp)
        tx.send(desc, seq0 + t + 1, 1, 0, 1, as_ci4(payloads[t:t + chunk]))
        time.sleep(0.002)
    thread.join(op.deadline_s + 5)
    del tx
    osock.close()
    isock.close()
    return ring, op


def disk_chips_capture(x: np.ndarray, path: Path, *, seq0: int, chan0: int, buffer_ntime: int,
                       utc_start: datetime.datetime,
                       header_changes: dict[str, Any] | None = None) -> tuple[Ring, AdpCapture]:
    """As :func:`udp_chips_capture`, through a packet file: Bifrost's ``DiskWriter`` writes it,
    Bifrost's ``DiskReader`` captures it (no packet can be lost). Bifrost 0.10 sizes a disk
    ``chips_N`` packet as 16 + 4 N bytes (``packet_capture.hpp``) while ``chips_N`` packets
    are 16 + 32 N: the reader is given ``chips_{8 N}``."""
    ntime, nchan = x.shape[2], x.shape[1]
    assert seq0 % buffer_ntime == 0 and ntime % buffer_ntime == 0
    payloads = chips_payloads(x)
    nsrc = payloads.shape[1]
    with open(path, "wb") as fh:
        writer = DiskWriter(f"chips_{nchan}", fh)
        desc = HeaderInfo()
        desc.set_nchan(nchan)
        desc.set_chan0(chan0)
        desc.set_nsrc(nsrc)
        writer.send(desc, seq0 + 1, 1, 0, 1, as_ci4(payloads))
        del writer
    ring = _capture_ring(f"chips-disk-{id(x)}", payloads, buffer_ntime)
    op = AdpCapture(ring, utc_start=utc_start, header_changes=header_changes)
    with open(path, "rb") as fh:
        op.run(DiskReader(f"chips_{8 * nchan}", fh, ring, nsrc, 0, buffer_ntime, buffer_ntime,
                          sequence_callback=op.callback()))
    return ring, op
