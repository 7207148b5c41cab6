"""MeerKAT SPEAD visibility heaps in tests: received over UDP, and the expected values from
the ICD's formula."""

from __future__ import annotations

import socket
import threading

import numpy as np
import spead2
import spead2.recv


def meerkat_formula(x: np.ndarray) -> np.ndarray:
    """katgpucbf's ``correlate_host`` on natural samples ``[2A, C, n, 2]``: int64
    ``[C, 2A(A+1), 2]``."""
    nant = x.shape[0] // 2
    out = np.zeros((x.shape[1], 2 * nant * (nant + 1), 2), np.int64)
    for a2 in range(nant):
        for a1 in range(a2 + 1):
            for p1 in range(2):
                for p2 in range(2):
                    i = (a2 * (a2 + 1) // 2 + a1) * 4 + p1 + 2 * p2
                    r1, i1 = x[2 * a1 + p1].astype(np.int64).transpose(2, 0, 1)
                    r2, i2 = x[2 * a2 + p2].astype(np.int64).transpose(2, 0, 1)
                    out[:, i, 0] = (r1 * r2 + i1 * i2).sum(-1)
                    out[:, i, 1] = (r2 * i1 - r1 * i2).sum(-1)
    return out


def receive_heaps(sock: socket.socket, out: list) -> tuple[spead2.recv.Stream,
                                                            threading.Thread]:
    """A plain spead2 receiver (items by descriptor), collecting every data heap's items until
    the stop heap."""
    stream = spead2.recv.Stream(spead2.ThreadPool(), spead2.recv.StreamConfig(max_heaps=8))
    stream.add_udp_reader(sock, max_size=9000)

    def run() -> None:
        ig = spead2.ItemGroup()
        for heap in stream:
            items = ig.update(heap)
            if "xeng_raw" in items:
                out.append({k: (v.value.copy() if isinstance(v.value, np.ndarray) else v.value)
                            for k, v in ig.items()})
                out[-1]["descriptions"] = {k: v.description for k, v in ig.items()}
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return stream, thread
