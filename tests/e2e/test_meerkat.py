"""MeerKAT end to end: simulated F-engines (the ICD sender) -> capture (MeerKAT
frames, sample_layout header) -> X-engine -> integrate -> UVH5 files and a MeerKAT visibility
stream, in both runtimes. The stream is decoded by a spead2 receiver and compared with
katgpucbf's formula on the samples sent; the UVH5 file (read by pyuvdata) holds the conjugate,
as UVH5's convention says; dumps are cut at absolute spectrum counts of integration_spectra.
"""

from __future__ import annotations

import socket

import numpy as np
import pytest
import spead2

from tests.helpers.spead import meerkat_formula, receive_heaps
from xengine_block.array import default_array
from xengine_block.blocks.chain import correlator_chain, runtime, split_integration
from xengine_block.capture.meerkat import MeerkatFormat
from xengine_block.capture.transports import InprocSource
from xengine_block.outputs.spead import MISSING
from xengine_block.sim.meerkat import MeerkatFEngines

pyuvdata = pytest.importorskip("pyuvdata", reason="pyuvdata (test extra) validates UVH5 files")

A, C, T, SBS, CHAN0, TOTAL = 8, 16, 256, 128, 16, 64
FMT = MeerkatFormat(A, C, samples_between_spectra=SBS, spectra_per_heap=T)
HEAPS_PER_DUMP = 3
FS = 1e4


def test_split_integration():
    assert split_integration(256 * 800, 256, 65535) == (256 * 200, 4)
    assert split_integration(1024, 256, 65535) == (1024, 1)
    assert split_integration(480 * 7, 480, 65535) == (480 * 7, 1)
    with pytest.raises(ValueError, match="whole number"):
        split_integration(1000, 256, 65535)


def test_meerkat_end_to_end(rt, tmp_path):
    rng = np.random.default_rng(7)
    h0, nheap = 10, 4 * HEAPS_PER_DUMP  # heap times 10..21: dumps at 9 (partial), 12, 15, 18, 21
    x = rng.integers(-128, 128, (2 * A, C, nheap * T, 2), dtype=np.int8)
    lost = {(13, 5)}  # dump [12, 15): antenna 5 lost a heap
    queue = spead2.InprocQueue()
    eng = MeerkatFEngines.inproc(queue, n_ants=A, nchan=C, spectra_per_heap=T,
                                 samples_between_spectra=SBS, frequency=CHAN0)
    eng.send_descriptors()
    eng.send(x, h0 * T, missing=lost)
    eng.close()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    got: list = []
    receiver, thread = receive_heaps(sock, got)
    array = default_array(A)
    blocks = runtime(rt.name)
    try:
        with blocks.Pipeline() as p:
            cap = blocks.CaptureBlock(InprocSource(queue), FMT, array, sync_time=1.7e9, fs_hz=FS,
                                  freq0_hz=1e9, chan_bw_hz=FS, chan0=CHAN0)
            chain = correlator_chain(
                cap, directory=tmp_path, backend="cpu", quicklook=False,
                integration_spectra=HEAPS_PER_DUMP * T, runtime_name=rt.name,
                spead=f"udp://127.0.0.1:{sock.getsockname()[1]}",
                spead_options={"total_channels": TOTAL})
            p.run()
        chain.close()
        thread.join(10)
        assert not thread.is_alive()
    finally:
        receiver.stop()
        sock.close()
    counters = cap.capture_counters()
    assert (counters["heaps"], counters["missing"], counters["bad_timestamp"]) == \
        (nheap * A - 1, 1, 0)
    # Dumps cut at multiples of 3 heaps: [9, 12) holds heaps 10, 11 only (not whole: nobody
    # complete, not sent), [12, 15) marks antenna 5, [15, 18) and [18, 21) are whole; heap 21
    # opens a dump the end of data cuts short.
    starts = [h["timestamp"] // (T * SBS) for h in got]
    assert starts == [12, 15, 18]
    assert chain.spead.spead_counters()["dumps_skipped"] == 1
    for h, start in zip(got, starts, strict=True):
        sl = slice((start - h0) * T, (start - h0 + HEAPS_PER_DUMP) * T)
        want = meerkat_formula(x[:, :, sl])
        if start == 12:
            for a2 in range(A):
                for a1 in range(a2 + 1):
                    if 5 in (a1, a2):
                        i = (a2 * (a2 + 1) // 2 + a1) * 4
                        want[:, i:i + 4] = MISSING
        assert np.array_equal(h["xeng_raw"], want), start
        assert h["frequency"] == CHAN0
    # The UVH5 file: conj(x[ant_1]) x[ant_2], i.e. MeerKAT's product conjugated.
    (path,) = chain.writer.files
    uv = pyuvdata.UVData.from_file(str(path))
    a1, a2 = 2, 6
    nums = array.antenna_numbers
    d = uv.get_data(nums[a1], nums[a2], "xx")  # [Ntimes, Nfreqs]
    i = (a2 * (a2 + 1) // 2 + a1) * 4
    k = list(np.round((uv.get_times(nums[a1], nums[a2]) - uv.time_array.min()) * 86400
                      * FS / T / HEAPS_PER_DUMP).astype(int)).index(1)  # the dump at heap 12
    want = meerkat_formula(x[:, :, (12 - h0) * T:(15 - h0) * T])[:, i]
    assert np.array_equal(d[k].real, want[:, 0]) and np.array_equal(d[k].imag, -want[:, 1])
