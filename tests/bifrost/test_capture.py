"""LWA capture rings (Bifrost's UDPCapture / DiskReader, flat JSON headers, no _tensor) read
through our header contract (xengine_block/bifrost/headers.py): the mapping of each pipeline's
keys checked against the formulas of the callbacks that write them, bad headers named, and
Bifrost's own writer -> Bifrost's own capture -> our reading of the ring exact, every baseline.
"""

from __future__ import annotations

import datetime
import logging
from fractions import Fraction

import numpy as np
import pytest

from tests.conftest import bifrost_or_skip
from tests.helpers.bifrost_lwa import (
    CHAN_BW,
    FS,
    ci4_samples,
    disk_chips_capture,
    udp_chips_capture,
)
from tests.helpers.runtimes import bifrost_runtime, collector
from xengine_block.array import ArrayDescription, default_array
from xengine_block.backends import get_backend
from xengine_block.geometry import Geometry
from xengine_block.reference import reference_triangle
from xengine_block.sample_layout import SampleLayout

xb = bifrost_or_skip()
BF = bifrost_runtime()
from xengine_block.bifrost.headers import HeaderAdapter, HeaderError, flat_to_contract  # noqa: E402
from xengine_block.bifrost.runtime import as_ring, transformed_view  # noqa: E402

pytestmark = pytest.mark.timeout(120)
UTC_START = datetime.datetime(2024, 3, 1, 12, 0, 0)
UNIX_START = (UTC_START - datetime.datetime(1970, 1, 1)).total_seconds()


def adp_header(seq0: int, chan0: int, nchan: int, nsrc: int, chan_bw: float = CHAN_BW,
               per_src: int = 16) -> dict:
    """lwa_sv scripts/adp_drx.py (ndp_drx.py with per_src 32) CaptureOp.seq_callback."""
    time_tag = int(UNIX_START) * int(FS) + seq0 * (int(FS) // int(chan_bw))
    return {"time_tag": time_tag, "seq0": seq0, "chan0": chan0, "nchan": nchan,
            "cfreq": (chan0 + 0.5 * (nchan - 1)) * chan_bw, "bw": nchan * chan_bw,
            "nstand": nsrc * per_src, "npol": 2, "complex": True, "nbit": 4}


def lwa352_header(seq0: int, chan0: int, nchan: int, chan_bw: float = 23925.78125) -> dict:
    """caltech-bifrost-dsp lwa352_pipeline/blocks/capture_block.py Capture.seq_callback."""
    return {"time_tag": 1, "sync_time": 1700000000, "seq0": seq0, "chan0": chan0,
            "nchan": nchan, "system_nchan": 182 * 16, "fs_hz": 196000000,
            "sfreq": chan0 * chan_bw, "bw_hz": nchan * chan_bw, "nstand": 352, "npol": 2,
            "complex": True, "nbit": 4}


# ----------------------------------------------------------------------------- mapping
def test_adp_header_maps_to_spectra_utc_start_and_channel_centres():
    hdr, assumed = flat_to_contract(adp_header(seq0=25000 * 7, chan0=1456, nchan=136, nsrc=16))
    assert hdr["time_tag"] == 25000 * 7  # our time_tag: spectra since sync_time
    assert hdr["sync_time"] == UNIX_START  # utc_start, exactly
    assert hdr["fs_hz"] == hdr["chan_bw_hz"] == CHAN_BW
    assert hdr["freq0_hz"] == 1456 * CHAN_BW  # channel chan0's centre, from cfreq, exactly
    assert hdr["capture_time_tag"] == adp_header(25000 * 7, 1456, 136, 16)["time_tag"]
    assert hdr["ticks_per_spectrum"] == 7840 and hdr["name"] == "lwa-sv-175000"
    t = hdr["_tensor"]
    assert t["dtype"] == "ci4" and t["shape"] == [-1, 136, 256, 2]
    assert t["labels"] == ["time", "freq", "station", "pol"]
    assert t["scales"][0] == [UNIX_START + 7.0, 1 / CHAN_BW]  # the first spectrum's time
    layout = SampleLayout.from_dict(hdr["sample_layout"])
    assert (layout.encoding, layout.nibble_order, layout.nspectra) == ("ci4", "re_high", 1)
    assert layout.stream_offsets[:4] == (0, 1, 2, 3) and layout.chan_stride == 512
    assert any("no array given" in a for a in assumed)
    assert len(hdr["array"]["antenna"]) == 256


def test_ndp_header_with_its_inexact_channel_width():
    chan_bw = 196e6 / 8192  # NdpCommon.py CHAN_BW
    hdr, _ = flat_to_contract(adp_header(seq0=480, chan0=1234, nchan=96, nsrc=2,
                                         chan_bw=chan_bw, per_src=32))
    assert hdr["fs_hz"] == chan_bw and hdr["ticks_per_spectrum"] == 8192
    # cfreq and bw are rounded floats; channel 0 follows from them in exact arithmetic
    want = float(Fraction((1234 + 0.5 * 95) * chan_bw) - Fraction(95, 2) * Fraction(96 * chan_bw)
                 / 96)
    assert hdr["freq0_hz"] == want and abs(want - 1234 * chan_bw) < 1e-6
    assert hdr["sync_time"] == UNIX_START and hdr["array"]["antenna"][63]["name"] == "station63"


def test_lwa352_header_keeps_its_adc_rate_and_sync_time():
    array = ArrayDescription("OVRO-LWA", 37.2, -118.3, 1222.0,
                             [f"LWA-{i:03d}" for i in range(352)], range(352), np.zeros((352, 3)))
    hdr, assumed = flat_to_contract(lwa352_header(seq0=96000, chan0=1500, nchan=96), array=array)
    assert hdr["time_tag"] == 96000 and hdr["sync_time"] == 1700000000.0
    assert hdr["fs_hz"] == 23925.78125 and hdr["adc_fs_hz"] == 196000000
    assert hdr["freq0_hz"] == 1500 * 23925.78125 and hdr["capture_time_tag"] == 1
    assert hdr["array"] == array.to_dict() and not any("array" in a for a in assumed)


def test_lwa352_input_to_ant_orders_the_streams():
    h = lwa352_header(seq0=0, chan0=0, nchan=2)
    h["nstand"] = 2
    h["input_to_ant"] = [[1, 0], [0, 0], [1, 1], [0, 1]]  # input n is stand S, pol P
    layout = SampleLayout.from_dict(flat_to_contract(h)[0]["sample_layout"])
    assert layout.stream_offsets == (1, 3, 0, 2)  # stream 2*S + P lies at its input


@pytest.mark.parametrize("change, match", [
    ({"npol": 3}, r"header npol = 3: must be 1 or 2"),
    ({"nbit": 16}, r"header nbit = 16: 4 \(ci4\) or 8"),
    ({"complex": False}, r"header complex = False: real samples"),
    ({"npol": 1}, r"header npol = 1: one polarisation: .* xengine_block\.bifrost\.correlate"),
    ({"bw": -1.0}, r"header bw = -1.0: must be > 0"),
    ({"nchan": "8"}, r"header nchan = '8': must be an integer >= 1"),
])
def test_bad_flat_headers_are_named(change, match):
    with pytest.raises(HeaderError, match=match):
        flat_to_contract({**adp_header(0, 100, 8, 1), **change})


@pytest.mark.parametrize("key", ["seq0", "nstand", "bw", "nbit"])
def test_a_missing_flat_key_is_named(key):
    hdr = adp_header(0, 100, 8, 1)
    del hdr[key]
    with pytest.raises(HeaderError, match=rf"lwa-sv capture header lacks \['{key}'\]"):
        flat_to_contract(hdr)


def test_single_pol_capture_headers_need_an_even_stand_count_for_correlate():
    h = {**adp_header(0, 100, 8, 1), "npol": 1, "nstand": 3}
    with pytest.raises(HeaderError, match=r"header nstand = 3: 3 stations of one pol .* even"):
        flat_to_contract(h, single_pol=True)
    hdr, _ = flat_to_contract({**h, "nstand": 4}, single_pol=True)
    assert hdr["_tensor"]["shape"] == [-1, 8, 4, 1]
    assert SampleLayout.from_dict(hdr["sample_layout"]).stream_offsets == (0, 1, 2, 3)


def test_headers_of_neither_dialect_are_refused():
    with pytest.raises(HeaderError, match="no _tensor and is no LWA capture header"):
        flat_to_contract({"nchan": 4})


def test_adapter_logs_each_assumption_once(caplog):
    adapter = HeaderAdapter("xe")
    with caplog.at_level(logging.INFO, logger="xengine_block.bifrost.headers"):
        adapter(adp_header(0, 100, 8, 1))
        adapter(adp_header(8, 100, 8, 1))
    said = [r.getMessage() for r in caplog.records if "no array given" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("xe: sequence 'lwa-sv-0'")


# --------------------------------------------------------------- Bifrost's own capture
def read_capture_ring(ring) -> tuple[dict, np.ndarray, int]:
    """Read a capture ring through our header view with a Bifrost sink."""
    class Collect(BF.SinkBlock):
        def on_sequence(self, iseq):
            self.hdr, self.time_tag, self.out = iseq.header, iseq.time_tag, []

        def on_data(self, ispan):
            self.out.extend(np.array(BF.arr(ispan)))

    view = transformed_view(as_ring(ring), HeaderAdapter("test"))
    with BF.Pipeline() as p:
        sink = Collect(view, gulp_nframe=16)
        p.run()
    return sink.hdr, np.asarray(sink.out), sink.time_tag


@pytest.mark.parametrize("via", ["udp", "disk"])
def test_bifrost_writes_and_captures_chips_and_we_read_it_exactly(via, tmp_path):
    nchan, buffer_ntime = 6, 16
    x = ci4_samples(64, nchan, 6 * buffer_ntime, seed=4)  # 2 sources x 32 inputs
    kw = dict(seq0=25000 * 16, chan0=1500, buffer_ntime=buffer_ntime, utc_start=UTC_START)
    ring, op = (udp_chips_capture(x, **kw) if via == "udp"
                else disk_chips_capture(x, tmp_path / "chips.pkt", **kw))
    assert len(op.headers) == 1, op.statuses  # one sequence: nothing lost, nothing split
    hdr, data, time_tag = read_capture_ring(ring)
    assert hdr["time_tag"] == time_tag == 25000 * 16 and hdr["sync_time"] == UNIX_START
    assert hdr["freq0_hz"] == 1500 * CHAN_BW and hdr["nchan"] == nchan
    layout = SampleLayout.from_dict(hdr["sample_layout"])
    assert data.shape == (x.shape[2], nchan, 32, 2) and data.dtype == np.int8
    assert np.array_equal(layout.natural(np.ascontiguousarray(data)), x)  # every sample
    g = Geometry(nstream=64, nchan=nchan, nchan_pkt=nchan, npacket=1, sample_bits=4)
    vis = get_backend("cpu", g).correlate_layout(np.ascontiguousarray(data), layout)
    assert np.array_equal(vis, reference_triangle(x))  # every baseline, exact


# ------------------------------------------------------- our X-engine on the capture ring
@pytest.mark.parametrize("via", ["udp", "disk"])
def test_xengine_correlates_bifrosts_capture_ring_exactly(via, tmp_path):
    """Bifrost writes, Bifrost captures (a ``bifrost.ring.Ring``, flat header), our X-engine
    block correlates the ring as it is: every integration, every baseline, exact."""
    nchan, buffer_ntime, n = 6, 16, 32
    x = ci4_samples(64, nchan, 6 * buffer_ntime, seed=5)
    kw = dict(seq0=25000 * 16, chan0=1500, buffer_ntime=buffer_ntime, utc_start=UTC_START)
    ring, op = (udp_chips_capture(x, **kw) if via == "udp"
                else disk_chips_capture(x, tmp_path / "chips.pkt", **kw))
    assert len(op.headers) == 1, op.statuses
    with BF.Pipeline() as p:
        xe = xb.XEngineBlock(ring, backend="cpu", integration_spectra=n)
        vis, valid = collector(BF, xe.orings[0]), collector(BF, xe.orings[1])
        p.run()
    assert len(vis.out) == x.shape[2] // n
    assert vis.hdr["time_tag"] == 25000 * 16 and vis.hdr["nspectra"] == n
    assert vis.hdr["sync_time"] == UNIX_START and vis.hdr["freq0_hz"] == 1500 * CHAN_BW
    for k, (v, c) in enumerate(zip(vis.out, valid.out, strict=True)):
        want = reference_triangle(x[:, :, k * n:(k + 1) * n])
        assert np.array_equal(v, want)
        assert np.all(c == n)


@pytest.mark.parametrize("changes, match", [
    ({"bw": None}, r"lwa-sv capture header lacks \['bw'\]"),
    ({"npol": 4}, r"header npol = 4: must be 1 or 2"),
])
def test_a_bad_capture_header_stops_the_pipeline_naming_the_key(changes, match, tmp_path):
    x = ci4_samples(32, 2, 32)
    ring, _ = disk_chips_capture(x, tmp_path / "c.pkt", seq0=0, chan0=10, buffer_ntime=16,
                                 utc_start=UTC_START, header_changes=changes)
    with pytest.raises(xb.PipelineError, match=r"XEngineBlock.* failed: HeaderError: " + match):
        with BF.Pipeline() as p:
            xb.XEngineBlock(ring, backend="cpu", integration_spectra=16)
            p.run()


def test_capture_metadata_reaches_the_uvh5_file(tmp_path, caplog):
    """Frequencies, times and antenna names from an ADP capture header into UVH5, with an
    array given, and with none (assumed, logged once)."""
    pyuvdata = pytest.importorskip("pyuvdata", reason="pyuvdata (test extra) reads UVH5")
    nchan, buffer_ntime, n = 4, 16, 32
    x = ci4_samples(32, nchan, 4 * buffer_ntime, seed=7)  # one source: 16 stands
    seq0 = 25000 * 16
    ring, _ = disk_chips_capture(x, tmp_path / "chips.pkt", seq0=seq0, chan0=1200,
                                 buffer_ntime=buffer_ntime, utc_start=UTC_START)
    array = default_array(16)
    files = {}
    for given in (array, None):
        out = tmp_path / ("given" if given else "assumed")
        with caplog.at_level(logging.INFO, logger="xengine_block.bifrost.headers"), \
                BF.Pipeline() as p:
            xe = xb.XEngineBlock(ring, backend="cpu", integration_spectra=n, array=given)
            writer = xb.UVH5WriterBlock(xe, directory=out)
            p.run()
        files[given is not None] = writer.files
    said = [r for r in caplog.records if "no array given" in r.getMessage()]
    assert len(said) == 1  # the run without an array, once
    for given, names in ((True, list(array.antenna_names)),
                         (False, [f"station{i}" for i in range(16)])):
        uv = pyuvdata.UVData.from_file(files[given][0])
        assert list(uv.telescope.antenna_names) == names
        assert np.array_equal(uv.freq_array, (1200 + np.arange(nchan)) * CHAN_BW)
        assert np.allclose(uv.channel_width, CHAN_BW)
        starts = UNIX_START + (seq0 + n * np.arange(2)) / CHAN_BW
        want_jd = (starts + n / CHAN_BW / 2) / 86400 + 2440587.5
        assert np.allclose(np.unique(uv.time_array), want_jd, rtol=0, atol=1e-9)
        assert np.allclose(uv.integration_time, n / CHAN_BW)
        ant = uv.telescope.antenna_numbers[3]
        xx = uv.get_data(ant, ant, "xx")  # stream 6 = stand 3, pol X
        z = x[6].astype(np.int64)
        want = (z[..., 0] ** 2 + z[..., 1] ** 2).reshape(nchan, 2, n).sum(-1).T
        assert np.array_equal(xx.real, want)
