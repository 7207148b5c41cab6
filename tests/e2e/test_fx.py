"""pipelines/fx.py end to end, and the full capture -> UVH5 path with lost packets.

Exactness is checked against the reference correlation of the packets actually sent (read back from
the ``--record`` pcap), with the sign, order and polarisation rules of docs/design.md, "Sign and
conjugation".
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import bifrost_or_skip
from tests.helpers.ci4 import decode
from tests.helpers.packets import read_pcap_payloads
from xengine_block.capture.receive import capture_frames
from xengine_block.capture.recording import read_metadata, write_metadata
from xengine_block.capture.spead import PcapWriter, descriptor_datagrams, frame_datagrams
from xengine_block.capture.transports import PcapSource
from xengine_block.frames import frames_to_natural
from xengine_block.reference import reference_full
from xengine_block.reprocess.jobs import ReprocessOptions, reprocess_file
from xengine_block.reprocess.tasks import Task

pyuvdata = pytest.importorskip("pyuvdata", reason="pyuvdata (test extra) reads the outputs")
ROOT = Path(__file__).resolve().parents[2]
FX = ROOT / "pipelines" / "fx.py"
POLS = [(-5, 0, 0), (-6, 1, 1), (-7, 0, 1), (-8, 1, 0)]


def run_fx(*args, timeout=300):
    proc = subprocess.run([sys.executable, str(FX), *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def assert_file_is_reference(uvh5: Path, frames: np.ndarray, present: np.ndarray, g,
                             frames_per_dump: int, ants) -> None:
    """Every (baseline, pol, channel, dump) equals sum conj(x[a1,p1]) x[a2,p2] over the dump;
    nsamples and flags equal the fraction of frames where both streams' packets arrived."""
    uv = pyuvdata.UVData.from_file(uvh5)
    uv.check()
    for d in range(uv.Ntimes):
        sl = slice(d * frames_per_dump, (d + 1) * frames_per_dump)
        re, im = reference_full(frames_to_natural(frames[sl], g))
        k = re + 1j * im  # [C, S, S], K[j, k] = sum x_j conj(x_k)
        for a1, a2 in ants:
            for pol, p1, p2 in POLS:
                s1, s2 = 2 * a1 + p1, 2 * a2 + p2
                assert np.array_equal(uv.get_data(a1, a2, pol)[d], k[:, s2, s1]), (d, a1, a2)
                frac = (present[sl, s1] & present[sl, s2]).mean()
                assert np.all(uv.get_nsamples(a1, a2, pol)[d] == np.float32(frac))
                assert np.all(uv.get_flags(a1, a2, pol)[d] == (frac == 0))


@pytest.mark.parametrize("runtime", ["ours", "bifrost"])
@pytest.mark.parametrize("bits", [8, 4], ids=["ci8", "ci4"])
def test_fx_exact_against_the_packets_it_sent(bits, runtime, tmp_path):
    """fx.py over UDP, recording what its F-engines sent, on either runtime and either sample
    width: every baseline and polarisation of the file equals the correlation of the samples
    decoded here from the recorded packets (this file's SPEAD parser and nibble decoder, not
    the package's), with nsamples 1 and no flags; our capture reads the same samples back from
    the recording, and reprocessing it gives the same visibilities."""
    if runtime == "bifrost":
        bifrost_or_skip()
    out, pcap = tmp_path / "out", tmp_path / "sent.pcap"
    nant, nframe, per_dump = 4, 8, 4  # P = 2, 2 X-engine frames a dump, 2 dumps
    proc = run_fx("--bits", bits, "--runtime", runtime, "--nant", nant, "--npacket", 2,
                  "--ninteg", 2, "--dumps", 2, "--transport", "udp", "--record", pcap,
                  "--out", out, "--monitor", 0, "--backend", "cpu")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["dumps_written"] == 2 and summary["capture"]["missing"] == 0
    assert Path(summary["quicklook"][0]).stat().st_size > 10_000
    assert "xengine_msps" in proc.stdout
    g = read_metadata(pcap).geometry
    assert g.sample_bits == bits and g.payload_bytes == 9 * 480 * bits // 4
    payloads = read_pcap_payloads(pcap, g)
    assert len(payloads) == nframe * g.nstream
    # natural samples decoded here from the bytes on the wire: ci8 [chan][coarse][re,im][fine],
    # ci4 one byte per sample [chan][spectrum], nibble by nibble
    x = np.zeros((g.nstream, g.nchan, nframe * g.nspectra_pkt, 2), np.int64)
    table = np.array([decode(b, g.nibble_order) for b in range(256)])
    for (ts, s, _), payload in payloads.items():
        if bits == 4:
            v = table[np.frombuffer(payload, np.uint8)].reshape(g.nchan, g.nspectra_pkt, 2)
        else:
            v = np.frombuffer(payload, np.int8).reshape(g.nchan, g.ncoarse, 2, g.nfine)
            v = v.transpose(0, 1, 3, 2).reshape(g.nchan, g.nspectra_pkt, 2)
        x[s, :, ts:ts + g.nspectra_pkt] = v
    lo, hi = (-128, 127) if bits == 8 else (-8, 7)
    assert x.min() >= lo and x.max() <= hi
    if bits == 4:
        assert x.min() == -8  # the 4-bit edge is produced and survives
    sent = list(capture_frames(PcapSource(str(pcap)), g))
    assert len(sent) == nframe and all(c.mask.all() for c in sent)
    assert np.array_equal(frames_to_natural(np.stack([c.frame for c in sent]), g), x)
    uv = pyuvdata.UVData.from_file(summary["files"][0])
    uv.check()
    assert uv.Ntimes == 2
    for d in range(2):
        seg = x[:, :, d * per_dump * 480:(d + 1) * per_dump * 480]
        k = np.einsum("jcn,kcn->cjk", seg[..., 0] + 1j * seg[..., 1],
                      seg[..., 0] - 1j * seg[..., 1])  # K[j, k] = sum x_j conj(x_k)
        for a1 in range(nant):
            for a2 in range(a1, nant):
                for pol, p1, p2 in POLS:
                    s1, s2 = 2 * a1 + p1, 2 * a2 + p2
                    assert np.array_equal(uv.get_data(a1, a2, pol)[d], k[:, s2, s1]), (d, a1, a2)
                    assert np.all(uv.get_nsamples(a1, a2, pol)[d] == 1)
                    assert not uv.get_flags(a1, a2, pol)[d].any()
    task = Task(pcap, tmp_path / "again.uvh5")
    reprocess_file(task, ReprocessOptions(ninteg=2))
    again = pyuvdata.UVData.from_file(task.partial, file_type="uvh5")
    assert np.array_equal(again.data_array, uv.data_array)


def test_capture_to_uvh5_exact_with_lost_packets(tmp_path):
    """The fx chain on a recording where 5 % of packets were lost: data, flags, nsamples."""
    from xengine_block.array import default_array
    from xengine_block.geometry import Geometry

    array = default_array(4)
    g = Geometry(nstream=8, nchan=9, npacket=2)
    rng = np.random.default_rng(3)
    frames = rng.integers(-128, 128, size=(8, *g.frame_shape), dtype=np.int8)
    present = np.ones((8, g.nstream), bool)
    pcap = tmp_path / "lossy.pcap"
    write_metadata(pcap, array, g, sync_time=1780272000.0, fs_hz=40e3, freq0_hz=150e6,
                   chan_bw_hz=40e3)
    with PcapWriter(pcap) as w:
        for d in descriptor_datagrams(g):
            w.send(d)
        for f, s, _grp, pkt in frame_datagrams(frames, g, 0):
            if (f, s) != (0, 0) and rng.random() < 0.05:  # keep frame 0 stream 0: sets start
                present[f, s] = False
                continue
            w.send(pkt)
    assert not present.all()
    frames[~present] = 0  # what the X-engine must see: zeros where packets were lost
    task = Task(pcap, tmp_path / "lossy.uvh5")
    summary = reprocess_file(task, ReprocessOptions(ninteg=2, allow_damaged=True))
    assert summary["missing"] == int((~present).sum())
    os.replace(task.partial, task.output)
    assert_file_is_reference(task.output, frames, present, g, 4,
                             [(a1, a2) for a1 in range(4) for a2 in range(a1, 4)])


def test_fx_killed_leaves_readable_file(tmp_path):
    out = tmp_path / "out"
    args = ["--nant", 4, "--npacket", 1, "--dumps", 100000, "--transport", "inproc", "--out",
            out, "--monitor", "0.2", "--backend", "cpu"]
    proc = subprocess.Popen([sys.executable, str(FX), *map(str, args)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    written = 0
    t0 = time.monotonic()
    while written < 20 and time.monotonic() - t0 < 120:
        line = proc.stdout.readline()
        if line.startswith("UVH5WriterBlock"):
            written = int(line.split()[1])
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert written >= 20
    (uvh5,) = out.glob("*.uvh5")
    uv = pyuvdata.UVData.from_file(uvh5)
    uv.check()
    assert uv.Ntimes >= written


def test_fx_bad_config_stops_before_any_work(tmp_path):
    proc = subprocess.run([sys.executable, str(FX), "--nchan", "10", "--out", str(tmp_path / "o")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "nchan (10) must be a multiple of nchan_pkt" in proc.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_fx_defaults_under_two_minutes(tmp_path):
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, str(FX), "--monitor", "0"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - t0 < 120
    (summary,) = (tmp_path / "fx_out").glob("run-*/summary.json")
    s = json.loads(summary.read_text())
    assert s["dumps_written"] == 3 and s["capture"]["missing"] == 0


def test_fx_meerkat_format_exact(tmp_path):
    """--format meerkat: the simulator's samples sent as MeerKAT F-engine heaps (sim/meerkat.py),
    captured in MeerKAT frames, correlated from their sample layout: the files equal the
    reference of the same samples (the simulator is deterministic), dumps of 15 heaps."""
    from xengine_block.array import default_array
    from xengine_block.geometry import Geometry
    from xengine_block.sim.fengine import FEngineSimulator, PointSource, icrs_at_altaz

    out, sync = tmp_path / "out", 1.7e9
    run_fx("--format", "meerkat", "--nant", 8, "--nchan", 16, "--dumps", 2,
           "--integration-spectra", 15 * 256, "--sync-time", sync, "--out", out,
           "--monitor", 0, "--backend", "cpu", "--transport", "inproc")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["dumps_written"] == 2 and summary["capture"]["heaps"] == 2 * 15 * 8
    array = default_array(8)
    g = Geometry(nstream=16, nchan=16, nchan_pkt=1)
    sim = FEngineSimulator(array, g, sync_time=sync, fs_hz=40e3, freq0_hz=150e6,
                           chan_bw_hz=40e3, sources=[PointSource.from_skycoord(
                               icrs_at_altaz(array, sync, 60.0, 120.0))],
                           noise_sigma=1.0, seed=1, direction_interval=8)
    frames = sim.frames(0, 16)  # 2 dumps x 3840 spectra = 16 packet times of 480
    assert_file_is_reference(Path(summary["files"][0]), frames, np.ones((16, 16), bool), g, 8,
                             [(0, 0), (0, 1), (2, 5), (7, 7), (3, 6)])
