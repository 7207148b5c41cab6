"""4-bit complex input (ci4) end to end: geometry, packing, every backend, capture, fx.py.

Expectations come from outside the code under test: nibbles are decoded here with plain
integer arithmetic, the all -8 correlation is known in closed form, and the fx.py run is
checked against its packets as read from the pcap by this file's own SPEAD parser.
"""

import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from xengine_block.backends import availability, make_backend
from xengine_block.backends.base import HostUnpack, device_geometry
from xengine_block.backends.cpu import CpuBackend
from xengine_block.backends.emulator import EmulatorBackend
from xengine_block.capture.recording import read_metadata, write_metadata
from xengine_block.geometry import Geometry, GeometryError, small_test_geometry
from xengine_block.layout import (
    frames_to_natural,
    natural_to_frames,
    pack_ci4,
    unpack_ci4,
    unpack_frames,
)
from xengine_block.reference import reference_frames, reference_triangle

ORDERS = ("re_high", "re_low")
ROOT = Path(__file__).resolve().parents[1]


def nibble(v: int) -> int:
    """Two's-complement value of a 4-bit field (independent of layout.unpack_ci4_planes)."""
    return v - 16 if v >= 8 else v


def decode(byte: int, order: str) -> tuple[int, int]:
    high, low = nibble(byte >> 4), nibble(byte & 15)
    return (high, low) if order == "re_high" else (low, high)


def random_ci4_natural(g: Geometry, nframe: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    shape = (g.nstream, g.nchan, nframe * g.nspectra_pkt, 2)
    return rng.integers(-8, 8, size=shape, dtype=np.int8)


# ------------------------------------------------------------------------------ geometry
def test_geometry_ci4_sizes_and_int32_bound():
    g = Geometry(sample_bits=4)
    assert g.payload_bytes == 4320 and Geometry().payload_bytes == 8640
    assert g.frame_shape == (256, 9, 60, 8) and g.frame_bytes == 256 * 4320
    # |x| <= 8: one term's re or im is at most 2 * 8 * 8 = 128
    assert g.max_npacket == (2**31 - 1) // 128 // 480 == 34952
    assert Geometry(sample_bits=4, npacket=34952).npacket == 34952
    with pytest.raises(GeometryError, match="P <= 34952"):
        Geometry(sample_bits=4, npacket=34953)
    assert Geometry().max_npacket == 136  # ci8 unchanged


@pytest.mark.parametrize("field, value", [("sample_bits", 6), ("sample_bits", "4"),
                                          ("sample_bits", True), ("sample_bits", 8.0),
                                          ("nibble_order", "high"), ("nibble_order", 1)])
def test_geometry_rejects_bad_sample_fields_naming_them(field, value):
    with pytest.raises(GeometryError, match=f"^{field} must be"):
        Geometry(**{field: value})


def test_geometry_dict_round_trip_and_old_dicts_are_ci8():
    g = Geometry(sample_bits=4, nibble_order="re_low", nstream=8)
    assert Geometry.from_dict(json.loads(json.dumps(g.to_dict()))) == g
    old = {k: v for k, v in Geometry().to_dict().items()
           if k not in ("sample_bits", "nibble_order")}
    assert Geometry.from_dict(old).sample_bits == 8


# ------------------------------------------------------------------------------ packing
@pytest.mark.parametrize("order", ORDERS)
def test_pack_and_unpack_every_value_pair(order):
    re, im = np.meshgrid(np.arange(-8, 8), np.arange(-8, 8), indexing="ij")
    x = np.stack([re, im], axis=-1).reshape(-1, 2).astype(np.int8)
    b = pack_ci4(x, order).view(np.uint8)
    high, low = (re, im) if order == "re_high" else (im, re)
    expected = ((high.ravel() & 15) << 4) | (low.ravel() & 15)
    assert np.array_equal(b, expected)
    assert len(set(b.tolist())) == 256  # a bijection
    assert np.array_equal(unpack_ci4(b, order), x)
    assert [decode(int(v), order) for v in b] == [tuple(p) for p in x.tolist()]


def test_pack_edges_and_range():
    edges = np.array([[-8, 7], [7, -8], [-8, -8], [7, 7], [-1, 0]], np.int8)
    assert pack_ci4(edges, "re_high").view(np.uint8).tolist() == [0x87, 0x78, 0x88, 0x77, 0xF0]
    assert pack_ci4(edges, "re_low").view(np.uint8).tolist() == [0x78, 0x87, 0x88, 0x77, 0x0F]
    with pytest.raises(ValueError, match="-8..7"):
        pack_ci4(np.array([[8, 0]]))
    with pytest.raises(ValueError, match="-8..7"):
        pack_ci4(np.array([[0, -9]]))


@pytest.mark.parametrize("order", ORDERS)
def test_frame_layout_is_chan_coarse_fine_bytes(order):
    g = small_test_geometry(sample_bits=4, nibble_order=order, nstream=4)
    x = random_ci4_natural(g, 2, seed=1)
    frames = natural_to_frames(x, g)
    assert frames.shape == (2, 4, 2, 60, 8) and frames.dtype == np.int8
    u = frames.view(np.uint8)
    for f, s, c, k, j in [(0, 0, 0, 0, 0), (1, 3, 1, 59, 7), (1, 2, 0, 17, 3)]:
        n = f * g.nspectra_pkt + k * g.nfine + j
        assert decode(int(u[f, s, c, k, j]), order) == tuple(x[s, c, n].tolist())
    assert np.array_equal(frames_to_natural(frames, g), x)
    g8 = g.replace(sample_bits=8)
    expected = natural_to_frames(x, g8)
    assert np.array_equal(unpack_frames(frames, g), expected)
    strided = np.zeros((*expected.shape[:-1], 16), np.int8)[..., ::2]  # not contiguous
    assert np.array_equal(unpack_frames(frames, g, out=strided), expected)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("nrow", [1, 2, 5])
def test_unpack_rows_pass_equals_numpy(order, nrow):
    """The C pass behind unpack_frames (rows of 8 ci4 bytes -> 8 real, 8 imaginary int8) equals
    numpy's unpack_ci4 for every byte value, an odd row count (the pass's one-row tail)
    included; mismatched buffers are refused."""
    from xengine_block.native_extension import native

    b = (np.arange(nrow * 8) * 37 % 256).astype(np.uint8).reshape(nrow, 8)
    b[0] = [0x00, 0x7F, 0x80, 0xFF, 0x08, 0xF7, 0x88, 0x77]
    want = np.moveaxis(unpack_ci4(b, order), -1, 1)  # [nrow, (re, im), 8]
    out = np.full((nrow, 2, 8), 99, np.int8)
    native().unpack_ci4_rows(b, out, order)
    assert np.array_equal(out, want)
    with pytest.raises(ValueError, match="ci4 rows"):
        native().unpack_ci4_rows(b, out[:-1], order)


# ------------------------------------------------------------------------------ backends
@pytest.fixture
def npu_sim(tmp_path):
    from xengine_block.npu.simdevice import SimulatedXrt, write_simulated_build

    xrt = SimulatedXrt()

    def make(g):
        write_simulated_build(tmp_path, device_geometry(g))
        return make_backend("npu", g, xrt=xrt, build_dir=tmp_path)

    return make


def backend_for(name, g, npu_sim):
    if name == "npu-sim":
        return npu_sim(g)
    usable, why = availability(g)[name]
    if not usable:
        print(f"{name} skipped for ci4: {why}")
        pytest.skip(f"{name}: {why}")
    return make_backend(name, g)


BACKENDS = ["cpu", "native", "emulator", "npu-sim"]


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("name", BACKENDS)
def test_every_backend_exact_on_random_ci4(name, order, npu_sim):
    g = small_test_geometry(sample_bits=4, nibble_order=order, nchan=4, npacket=3)
    x = random_ci4_natural(g, 3, seed=7)
    b = backend_for(name, g, npu_sim)
    try:
        assert np.array_equal(b.correlate(natural_to_frames(x, g)), reference_triangle(x))
    finally:
        b.close()


@pytest.mark.parametrize("name", BACKENDS)
def test_every_backend_exact_on_ci4_with_more_packets_than_the_int8_device(name, npu_sim):
    """All -8 at P = 137: an int8-only device (P <= 136) runs two calls summed on the host."""
    g = small_test_geometry(sample_bits=4, nstream=2, nchan=2, npacket=137)
    frames = np.full((137, *g.frame_shape), np.uint8(0x88)).view(np.int8)
    b = backend_for(name, g, npu_sim)
    try:
        out = b.correlate(frames)
    finally:
        b.close()
    assert np.all(out[..., 0] == 137 * 480 * 128) and np.all(out[..., 1] == 0)
    if name in ("emulator", "npu-sim"):
        assert isinstance(b, HostUnpack) and b.device.geometry.npacket == 136


def test_npu_unpacks_straight_into_its_buffer_object(npu_sim):
    g = small_test_geometry(sample_bits=4, npacket=2)
    x = random_ci4_natural(g, 2, seed=3)
    b = npu_sim(g)
    try:
        assert np.array_equal(b.correlate(natural_to_frames(x, g)), reference_triangle(x))
        assert b.device.stats["in_place_calls"] == 1 and b.device.stats["copied_calls"] == 0
    finally:
        b.close()


def test_int8_only_backends_refuse_ci4_when_built_directly():
    with pytest.raises(ValueError, match="make_backend"):
        EmulatorBackend(small_test_geometry(sample_bits=4))


LARGEST = dict(nstream=2, nchan=1, nchan_pkt=1, npacket=34952, sample_bits=4)


@pytest.mark.parametrize("name", ["cpu", "native", "host-unpack"])
def test_all_minus_8_at_the_largest_p_the_bound_allows(name):
    """re = 34952 * 480 * 128 = 2,147,450,880: 32,767 below int32's limit, exactly."""
    g = small_test_geometry(**LARGEST)
    assert g.npacket == g.max_npacket
    frames = np.full((g.npacket, *g.frame_shape), np.uint8(0x88)).view(np.int8)
    if name == "host-unpack":  # the emulator/NPU wrapper's chunk sums, with an int8 device
        b = HostUnpack(CpuBackend, g)
    else:
        b = backend_for(name, g, None)
    try:
        out = b.correlate(frames)
    finally:
        b.close()
    assert np.all(out[..., 0] == 2_147_450_880) and np.all(out[..., 1] == 0)


def test_reference_takes_ci4_frames():
    g = small_test_geometry(sample_bits=4, nstream=4, npacket=1)
    x = random_ci4_natural(g, 1, seed=11)
    assert np.array_equal(reference_frames(natural_to_frames(x, g), g), reference_triangle(x))


# ------------------------------------------------------------------------------ stages
def test_fengine_quantises_to_4_bits():
    from xengine_block.array import default_array
    from xengine_block.sim.fengine import FEngineSimulator

    array = default_array(2)
    g = Geometry(nstream=4, nchan=9, npacket=1, sample_bits=4)
    sim = FEngineSimulator(array, g, sync_time=1.78e9, fs_hz=40e3, freq0_hz=150e6,
                           chan_bw_hz=40e3, noise_sigma=4.0, seed=5)
    nat = sim.samples(0, 480)
    assert nat.min() == -8 and nat.max() == 7  # clipped to the 4-bit range, both edges
    assert np.array_equal(frames_to_natural(sim.frames(0, 1), g), nat)


def test_recording_sidecar_keeps_ci4(tmp_path):
    from xengine_block.array import default_array

    g = Geometry(nstream=4, nchan=9, npacket=2, sample_bits=4, nibble_order="re_low")
    write_metadata(tmp_path / "r.pcap", default_array(2), g, sync_time=1.0, fs_hz=1.0,
                   freq0_hz=1.0, chan_bw_hz=1.0)
    assert read_metadata(tmp_path / "r.pcap").geometry == g


def test_capture_drops_ci8_sized_heaps_on_a_ci4_stream(tmp_path):
    from xengine_block.array import default_array
    from xengine_block.capture.receive import capture_frames, capture_headers
    from xengine_block.capture.sources import PcapSource
    from xengine_block.capture.spead import PcapWriter, frame_datagrams

    g4 = Geometry(nstream=4, nchan=9, npacket=1, sample_bits=4)
    g8 = g4.replace(sample_bits=8)
    x = random_ci4_natural(g4, 3, seed=2)
    good, wrong = natural_to_frames(x, g4), natural_to_frames(x, g8)
    pcap = tmp_path / "mixed.pcap"
    with PcapWriter(pcap) as w:
        for f, s, _, pkt in frame_datagrams(good, g4, 0):
            w.send(pkt)
            if f == 1 and s == 2:  # a ci8 heap for a later slot: wrong size for ci4
                w.send(frame_datagrams(wrong[2:], g8, 2 * 480)[s][3])
    cap = capture_frames(PcapSource(str(pcap)), g4, copy=True)
    got = list(cap)
    assert np.array_equal(np.stack([c.frame for c in got]), good)
    assert cap.counters()["bad_size"] == 1
    (hdr, _) = capture_headers(cap.layout, default_array(2), time_tag=0, sync_time=0.0,
                               fs_hz=1.0, freq0_hz=1.0, chan_bw_hz=1.0, name="x")
    assert hdr["_tensor"]["dtype"] == "ci4" and hdr["_tensor"]["shape"] == [-1, 4, 9, 60, 8]
    assert hdr["_tensor"]["labels"] == ["time", "stream", "freq", "coarse", "fine"]


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


def test_fx_ci4_exact_against_the_packets_it_sent(tmp_path):
    pyuvdata = pytest.importorskip("pyuvdata", reason="pyuvdata (test extra) reads the outputs")
    out, pcap = tmp_path / "out", tmp_path / "sent.pcap"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "pipelines" / "fx.py"), "--bits", "4", "--nant", "3",
         "--npacket", "2", "--ninteg", "2", "--dumps", "2", "--transport", "udp", "--record",
         str(pcap), "--out", str(out), "--monitor", "0", "--backend", "cpu"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["dumps_written"] == 2 and summary["capture"]["missing"] == 0
    g = read_metadata(pcap).geometry
    assert g.sample_bits == 4 and g.payload_bytes == 9 * 480
    payloads = read_pcap_payloads(pcap, g)
    nframe = 8
    assert len(payloads) == nframe * g.nstream
    # natural samples decoded here, nibble by nibble, from the bytes on the wire
    x = np.zeros((g.nstream, g.nchan, nframe * g.nspectra_pkt, 2), np.int64)
    table = np.array([decode(b, g.nibble_order) for b in range(256)])
    for (ts, s, _), payload in payloads.items():
        v = table[np.frombuffer(payload, np.uint8)].reshape(g.nchan, g.nspectra_pkt, 2)
        x[s, :, ts:ts + g.nspectra_pkt] = v
    assert x.min() >= -8 and x.max() <= 7 and x.min() == -8  # 4-bit values, -8 produced
    uv = pyuvdata.UVData.from_file(summary["files"][0])
    uv.check()
    for d in range(2):
        seg = x[:, :, d * 4 * 480:(d + 1) * 4 * 480]
        k = np.einsum("jcn,kcn->cjk", seg[..., 0] + 1j * seg[..., 1],
                      seg[..., 0] - 1j * seg[..., 1])  # K[j, k] = sum x_j conj(x_k)
        for a1, a2 in [(0, 0), (0, 1), (1, 2), (2, 2)]:
            for pol, p1, p2 in [(-5, 0, 0), (-6, 1, 1), (-7, 0, 1), (-8, 1, 0)]:
                s1, s2 = 2 * a1 + p1, 2 * a2 + p2
                assert np.array_equal(uv.get_data(a1, a2, pol)[d], k[:, s2, s1]), (d, a1, a2)
    # reprocessing the recording (ci4 sidecar) gives the same visibilities
    from xengine_block.tools.reprocess import ReprocessOptions, reprocess_file
    from xengine_block.tools.tasks import Task

    task = Task(pcap, tmp_path / "again.uvh5")
    reprocess_file(task, ReprocessOptions(ninteg=2))
    again = pyuvdata.UVData.from_file(task.partial, file_type="uvh5")
    assert np.array_equal(again.data_array, uv.data_array)


def test_xengine_record_bits_option(tmp_path, capsys):
    from xengine_block.cli import main

    common = ["record", "-o", str(tmp_path / "rec"), "--port", "0", "--nant", "2",
              "--duration", "0.2", "--sync-time", "0", "--fs-hz", "1", "--freq0-hz", "1",
              "--chan-bw-hz", "1"]
    with pytest.raises(SystemExit) as exit_info:
        main(common + ["--bits", "3"])
    assert exit_info.value.code == 2
    assert "sample bits must be one of 8, 4" in capsys.readouterr().err
    assert not (tmp_path / "rec").exists()
    assert main(common + ["--bits", "4", "--nibble-order", "re_low"]) == 0
    g = read_metadata(tmp_path / "rec" / "rec0000.pcap").geometry
    assert (g.sample_bits, g.nibble_order, g.payload_bytes) == (4, "re_low", 4320)
