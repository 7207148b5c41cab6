"""Clean pcap recordings correlated in place (``xengine_block.readers.pcap``) against the same
recordings replayed through the capture pipeline (``ReprocessOptions(in_place=False)``,
``--replay``): every dataset of the UVH5 files (the history line aside) and every counter the
same, for aligned and unaligned starts, ends inside an X-engine frame and inside a dump,
channel groups in any order, a channel subset, ci4; anything out of place is replayed."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from xengine_block.array import default_array
from xengine_block.capture.recording import write_metadata
from xengine_block.capture.spead import (
    PcapWriter,
    descriptor_datagrams,
    frame_datagrams,
    max_packet_size,
    stop_datagrams,
)
from xengine_block.cli import main
from xengine_block.frames import natural_to_frames
from xengine_block.geometry import Geometry
from xengine_block.readers.pcap import pipeline_dumps
from xengine_block.reprocess.jobs import ReprocessOptions, reprocess

pytest.importorskip("pyuvdata", reason="pyuvdata (test extra) reads the outputs")
SKY = {"sync_time": 1780272000.0, "fs_hz": 40e3, "freq0_hz": 150e6, "chan_bw_hz": 40e3}
RNG = np.random.default_rng(5)


def record(path: Path, g: Geometry, nframe: int, *, frame0: int = 0, chan0: int = 0,
           order: np.ndarray | None = None, mangle=None) -> Path:
    """A recording of ``nframe`` frames of random samples from packet time ``frame0``,
    each frame's heaps in ``order`` (default: stream-major, as our senders send), between a
    descriptor heap and an end-of-stream heap; ``mangle(datagrams)`` edits the list."""
    lo, hi = g.sample_range
    x = RNG.integers(lo, hi + 1, (g.nstream, g.nchan, nframe * g.nspectra_pkt, 2), np.int8)
    frames = natural_to_frames(x, g)
    heaps = [d for *_, d in frame_datagrams(frames, g, frame0 * g.nspectra_pkt, chan0=chan0)]
    per = g.npackets_per_frame
    if order is not None:
        heaps = [heaps[f * per + j] for f in range(nframe) for j in order]
    grams = descriptor_datagrams(g) + heaps + stop_datagrams(g, len(heaps) + 1)
    if mangle is not None:
        grams = mangle(grams)
    write_metadata(path, default_array(g.nstream // 2), g, **SKY, chan0=chan0)
    with PcapWriter(path) as w:
        for d in grams:
            w.send(d)
    assert max(len(d) for d in heaps) <= max_packet_size(g)
    return path


def datasets(path: Path) -> dict[str, object]:
    """Every dataset of the file (its history line aside) and every attribute."""
    out: dict[str, object] = {}

    def visit(name: str, obj) -> None:
        for k, v in obj.attrs.items():
            out[f"{name}@{k}"] = v
        if isinstance(obj, h5py.Dataset) and name != "Header/history":
            out[name] = obj[()]

    with h5py.File(path) as f:
        f.visititems(visit)
    return out


def assert_same_files(a: Path, b: Path) -> None:
    da, db = datasets(a), datasets(b)
    assert sorted(da) == sorted(db)
    for k in da:
        x, y = np.asarray(da[k]), np.asarray(db[k])
        assert x.shape == y.shape and x.dtype == y.dtype and np.array_equal(x, y), k


def both(path: Path, tmp: Path, **opts):
    """(in place, replayed) results of one recording."""
    fast = reprocess([path], tmp / "in_place", ReprocessOptions(**opts), progress=None)[0]
    slow = reprocess([path], tmp / "replay", ReprocessOptions(in_place=False, **opts),
                     progress=None)[0]
    assert fast.ok and slow.ok, (fast.error, slow.error)
    return fast, slow


G8 = Geometry(nstream=8, nchan=9, npacket=4)
CASES = {
    # name: (geometry, frames, first frame, chan0, heap order, options)
    "aligned": (G8, 8, 0, 0, None, {}),
    "two_per_dump": (G8, 8, 0, 0, None, {"ninteg": 2}),
    # starts at frame 3 (the capture at 4, a dump aligned at 0 partial), ends inside a frame
    "unaligned_end_in_xframe": (G8, 10, 3, 0, None, {}),
    "unaligned_dropped_partial": (G8, 13, 3, 0, None, {"ninteg": 2}),
    "integration_spectra": (G8, 13, 1, 0, None, {"integration_spectra": 6 * 480}),
    "groups_in_any_order_and_channels": (
        Geometry(nstream=8, nchan=18, nchan_pkt=9, npacket=2), 5, 0, 36,
        RNG.permutation(16), {"channels": (8, 9, 10)}),
    "ci4": (Geometry(nstream=8, nchan=9, npacket=3, sample_bits=4), 7, 2, 0, None,
            {"ninteg": 2}),
    # dumps past the int32 bound (2 x 136 packets): summed in int64 from calls within it
    "beyond_int32": (Geometry(nstream=4, nchan=9, npacket=136), 272, 0, 0, None,
                     {"ninteg": 2}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_clean_recording_in_place_is_the_capture_bit_for_bit(case, tmp_path):
    g, nframe, frame0, chan0, order, opts = CASES[case]
    path = record(tmp_path / f"{case}.pcap", g, nframe, frame0=frame0, chan0=chan0,
                  order=order)
    fast, slow = both(path, tmp_path, **opts)
    assert fast.summary.pop("read") == "in place" and slow.summary.pop("read") == "capture"
    assert fast.summary == slow.summary
    assert_same_files(fast.task.output, slow.task.output)


def test_the_comparison_sees_a_difference(tmp_path):
    """The check above fails where the files differ: two recordings of other samples."""
    a, b = (reprocess([record(tmp_path / f"{n}.pcap", G8, 8)], tmp_path / n, ReprocessOptions(),
                      progress=None)[0] for n in "ab")
    assert a.summary["read"] == b.summary["read"] == "in place"
    with pytest.raises(AssertionError, match="Data/visdata"):
        assert_same_files(a.task.output, b.task.output)


def _drop(i):
    return lambda d: d[:i] + d[i + 1:]


def _swap(i, j):
    def f(d):
        d = list(d)
        d[i], d[j] = d[j], d[i]
        return d
    return f


MANGLES = {
    "a heap missing": _drop(20),
    "frames out of order": lambda d: d[:1] + d[9:17] + d[1:9] + d[17:],
    "a frame's heaps in another order": _swap(18, 19),
    "a foreign datagram": lambda d: d[:30] + [b"not spead at all"] + d[30:],
    "a duplicate heap": lambda d: d[:30] + [d[29]] + d[30:],
    "the last frame cut": _drop(-2),
}


@pytest.mark.parametrize("name", sorted(MANGLES))
def test_anything_out_of_place_is_replayed_through_the_capture(name, tmp_path):
    path = record(tmp_path / "r.pcap", G8, 8, mangle=MANGLES[name])
    r = reprocess([path], tmp_path / "out", ReprocessOptions(allow_damaged=True),
                  progress=None)[0]
    assert r.ok, r.error
    assert r.summary["read"] == "capture"


def test_a_cut_file_is_replayed_and_reported(tmp_path):
    """A file shorter than its recorder noted is not read in place: the capture says so."""
    from xengine_block.capture.recording import finish_metadata

    path = record(tmp_path / "r.pcap", G8, 8)
    finish_metadata(path)
    with open(path, "r+b") as f:  # cut at a record boundary: the last (end-of-stream) one
        f.truncate(path.stat().st_size - len(stop_datagrams(G8, 1)[0]) - 16 - 42)
    r = reprocess([path], tmp_path / "out", ReprocessOptions(), progress=None)[0]
    assert not r.ok and "size_change" in r.error


def test_pipeline_dumps_by_hand():
    # frames 3..9, P = 4: the capture starts at 4; X-engine frames [4, 8), [8, 10) (short)
    assert pipeline_dumps(3, 10, 4, 1, 480) == ([(1920, 3840), (3840, 5760)], 4, 0)
    # dumps of 2: dump 0 = X-engine frames 0, 1 (0 lacks data), written; dump 1 = 2 (short),
    # 3 (none): the integrator drops it
    assert pipeline_dumps(3, 10, 4, 2, 480) == ([(0, 3840)], 4, 1)
    assert pipeline_dumps(0, 16, 4, 2, 480) == ([(0, 3840), (3840, 7680)], 0, 0)
    assert pipeline_dumps(5, 8, 4, 1, 480) == ([], 8, 0)  # nothing from the capture's start


def test_cli_replay_flag(tmp_path, capsys):
    path = record(tmp_path / "r.pcap", G8, 8)
    assert main(["reprocess", str(path), "-o", str(tmp_path / "a")]) == 0
    assert "read=in place" in capsys.readouterr().out
    assert main(["reprocess", "--replay", str(path), "-o", str(tmp_path / "b")]) == 0
    assert "read=capture" in capsys.readouterr().out
    assert_same_files(tmp_path / "a" / "r.uvh5", tmp_path / "b" / "r.uvh5")
