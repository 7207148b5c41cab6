"""Recording live SPEAD traffic (``xengine record``): datagrams from a UDP address/port into
pcap files of bounded size, each with the JSON sidecar that reprocessing needs
(:mod:`~xengine_block.capture.recording`).

A file is closed once it holds ``max_bytes`` and a packet arrives whose timestamp differs from
its predecessor's and starts a new X-engine frame (a multiple of P packets), so every file holds
whole integrations and reprocesses on its own (packets reordered across that instant excepted).
Only past the limit are SPEAD headers parsed; below the limit datagrams are written
as they come. Pure Python: about 1-2 Gb/s here. ``tcpdump -i lo -w FILE -C MB udp port N`` is
faster but cuts files anywhere; our reader takes its files too (add the sidecar with
``write_metadata``), at the cost of partial frames at the cuts.
"""

from __future__ import annotations

import logging
import socket
import struct
import threading
import time
from pathlib import Path

from ..array import ArrayDescription
from ..console.progress import Progress
from ..geometry import Geometry
from .recording import finish_metadata, write_metadata
from .spead import DEFAULT_ADDRESS, DEFAULT_PORT, TIMESTAMP, PcapWriter

log = logging.getLogger(__name__)

_SPEAD_MAGIC = 0x53


def spead_timestamp(datagram: bytes) -> int | None:
    """The timestamp item of a SPEAD packet (flavour 64-48, immediate), or None."""
    if len(datagram) < 8 or datagram[0] != _SPEAD_MAGIC:
        return None
    nitems = struct.unpack_from(">H", datagram, 6)[0]
    for i in range(min(nitems, (len(datagram) - 8) // 8)):
        word = struct.unpack_from(">Q", datagram, 8 + 8 * i)[0]
        if (word >> 48) & 0x7FFF == TIMESTAMP.id:
            return word & ((1 << 48) - 1)
    return None


class Recorder:
    """Receives datagrams on (address, port) into ``{directory}/{prefix}NNNN.pcap`` files."""

    def __init__(self, directory: str | Path, array: ArrayDescription, geometry: Geometry, *,
                 sky: dict[str, float], chan0: int = 0, address: str = DEFAULT_ADDRESS,
                 port: int = DEFAULT_PORT, max_bytes: int = 1 << 30, prefix: str = "rec",
                 buffer_size: int = 64 << 20) -> None:
        self.directory, self.prefix, self.max_bytes = Path(directory), prefix, max_bytes
        self.array, self.geometry, self.sky, self.chan0 = array, geometry, sky, chan0
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer_size)
        self.sock.bind((address, port))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.stop_event = threading.Event()
        self.files: list[Path] = []
        self.packets = 0
        self.directory.mkdir(parents=True, exist_ok=True)

    def _open(self) -> tuple[PcapWriter, int]:
        path = self.directory / f"{self.prefix}{len(self.files):04d}.pcap"
        if path.exists():
            raise FileExistsError(f"{path} exists; refusing to overwrite a recording")
        write_metadata(path, self.array, self.geometry, **self.sky, chan0=self.chan0)
        self.files.append(path)
        log.info("recording to %s", path)
        return PcapWriter(path, dst=("127.0.0.1", self.port)), 0

    def run(self, *, duration: float | None = None, idle_timeout: float | None = None,
            progress: Progress | None = None) -> None:
        """Record until ``stop()``, ``duration`` seconds, or ``idle_timeout`` without packets;
        ``progress`` counts the megabytes written."""
        step = self.geometry.npacket * self.geometry.nspectra_pkt
        t_end = None if duration is None else time.monotonic() + duration
        last = time.monotonic()
        writer, size = self._open()
        last_ts: int | None = None  # timestamp of the previous packet, once past the limit
        try:
            while not self.stop_event.is_set():
                now = time.monotonic()
                if t_end is not None and now >= t_end:
                    break
                try:
                    data = self.sock.recv(65536)
                except TimeoutError:
                    if idle_timeout is not None and now - last >= idle_timeout:
                        break
                    continue
                last = now
                if size >= self.max_bytes:
                    ts = spead_timestamp(data)
                    if ts is None:
                        pass  # not one of our heaps: keep it in the current file
                    elif last_ts is not None and ts != last_ts and ts % step == 0:
                        writer.close()
                        finish_metadata(self.files[-1])
                        writer, size = self._open()
                        last_ts = None
                    else:
                        last_ts = ts
                writer.send(data)
                size += len(data) + 58  # pcap record + Ethernet/IP/UDP headers
                self.packets += 1
                if progress is not None:
                    progress.update(len(data) / 1e6, f"{self.packets} packets, "
                                                     f"{len(self.files)} files")
        finally:
            writer.close()
            finish_metadata(self.files[-1])
            self.sock.close()

    def stop(self) -> None:
        self.stop_event.set()
