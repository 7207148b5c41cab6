"""The payloads of SPEAD packets in a pcap file, parsed here (dpkt and struct), independently of
the package's capture: what a test compares the capture's results with."""

from __future__ import annotations

import struct
from pathlib import Path

from xengine_block.geometry import Geometry


# ------------------------------------------------------------------------------ fx.py
def read_pcap_payloads(pcap: Path, g: Geometry) -> dict[tuple[int, int, int], bytes]:
    """(timestamp, stream, frequency) -> payload bytes, parsed here from the SPEAD packets."""
    import dpkt

    items = {0x1600: "ts", 0x4101: "stream", 0x4103: "freq"}
    out = {}
    with open(pcap, "rb") as fh:
        for _, buf in dpkt.pcap.Reader(fh):
            data = bytes(dpkt.ethernet.Ethernet(buf).data.data.data)
            nitems = struct.unpack_from(">H", data, 6)[0]
            fields = {}
            for i in range(nitems):
                word = struct.unpack_from(">Q", data, 8 + 8 * i)[0]
                if word >> 63 and (word >> 48) & 0x7FFF in items:
                    fields[items[(word >> 48) & 0x7FFF]] = word & ((1 << 48) - 1)
            if len(fields) == 3 and len(data) - 8 - 8 * nitems == g.payload_bytes:
                out[fields["ts"], fields["stream"], fields["freq"]] = data[-g.payload_bytes:]
    return out
