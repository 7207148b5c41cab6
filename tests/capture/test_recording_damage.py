"""Damaged recordings and sidecars must not pass as fine.

A recording of 4 dumps is damaged in the ways disks and copies damage files (garbage inserted
mid-file, cut mid-record, cut at a record boundary, a stray non-SPEAD datagram, a lost packet):
each fails with one line saying what is wrong unless ``allow_damaged`` accepts it. Sidecars with
impossible values fail with one line naming the field.
"""

from __future__ import annotations

import io
import json
import struct
from pathlib import Path

import pytest

from tests.helpers.pcap_recordings import SKY, make_recording, simulator
from xengine_block.capture.recording import finish_metadata, metadata_path, scan_pcap
from xengine_block.capture.spead import PcapWriter
from xengine_block.cli import main
from xengine_block.geometry import Geometry, GeometryError
from xengine_block.reprocess.jobs import ReprocessOptions, reprocess
from xengine_block.reprocess.tasks import summarise

NFRAME, NPACKET = 16, 4  # 4 dumps of one X-engine frame each


def record_offsets(data: bytes) -> list[int]:
    """Start of every pcap record (our files: little-endian, well formed)."""
    pos, out = 24, []
    while pos < len(data):
        out.append(pos)
        pos += 16 + struct.unpack_from("<I", data, pos + 8)[0]
    return out


@pytest.fixture(scope="module")
def intact(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("rec") / "intact.pcap"
    make_recording(path, simulator(npacket=NPACKET, seed=4), NFRAME)
    return path


def damaged_copy(intact: Path, d: Path, name: str, data: bytes, *, finish: bool = False) -> Path:
    path = d / f"{name}.pcap"
    path.write_bytes(data)
    metadata_path(path).write_bytes(metadata_path(intact).read_bytes())
    if finish:  # the recorder noted the intact size; then the copy lost its tail
        full = d / f"{name}.full.pcap"
        full.write_bytes(intact.read_bytes())
        metadata_path(full).write_bytes(metadata_path(intact).read_bytes())
        finish_metadata(full)
        metadata_path(path).write_bytes(metadata_path(full).read_bytes())
        full.unlink()
        metadata_path(full).unlink()
    return path


def run(paths: list[Path], out: Path, **options):
    return reprocess(paths, out, ReprocessOptions(**options), progress=None)


def test_intact_recording_is_ok_and_says_so(intact, tmp_path):
    (r,) = run([intact], tmp_path / "out")
    assert r.ok and r.summary["dumps"] == NFRAME // NPACKET
    assert r.summary["dumps_with_gaps"] == 0 and "damaged" not in r.summary
    scan = scan_pcap(intact)
    assert scan.damage == {} and scan.spead == scan.records == NFRAME * 8 + 2  # + descriptors, stop


def damage_cases(intact: Path) -> dict[str, tuple[bytes, bool, str]]:
    """name -> (file bytes, sidecar notes the intact size, what the failure must say)."""
    data = intact.read_bytes()
    offs = record_offsets(data)
    mid = offs[len(offs) // 2]
    stray = intact.with_name("stray.pcap")
    with PcapWriter(stray) as w:  # one well-framed UDP datagram that is not SPEAD
        w.send(b"not a SPEAD packet")
    one_stray = stray.read_bytes()[24:]
    lost = offs[len(offs) // 2]
    return {
        "garbage": (data[:mid] + bytes(range(256)) * 4 + data[mid:], False, "garbage_bytes=1024"),
        "cut_mid_record": (data[:len(data) // 2], False, "truncated_bytes="),
        "cut_at_record": (data[:mid], True, f"size_change={mid - len(data)}"),
        "stray_datagram": (data[:mid] + one_stray + data[mid:], False, "undecodable=1"),
        "lost_packet": (data[:lost] + data[offs[offs.index(lost) + 1]:], False, "missing=1"),
    }


@pytest.mark.parametrize("name", ["garbage", "cut_mid_record", "cut_at_record",
                                  "stray_datagram", "lost_packet"])
def test_damage_fails_unless_accepted(intact, tmp_path, name):
    data, finish, says = damage_cases(intact)[name]
    path = damaged_copy(intact, tmp_path, name, data, finish=finish)
    (r,) = run([path], tmp_path / "strict")
    assert not r.ok and says in r.error and "damaged recording" in r.error
    assert "\n" not in r.error and "--allow-damaged" in r.error
    assert not (tmp_path / "strict" / f"{name}.uvh5").exists()
    (r,) = run([path], tmp_path / "lenient", allow_damaged=True)
    assert r.ok and says.split("=")[0] in r.summary["damaged"], r.summary
    assert (tmp_path / "lenient" / f"{name}.uvh5").exists()
    if name == "lost_packet":
        assert r.summary["dumps_with_gaps"] == 1 and r.summary["dumps"] == NFRAME // NPACKET


def test_cli_exit_status_and_allow_damaged(intact, tmp_path, capfd):
    data, _, _ = damage_cases(intact)["garbage"]
    path = damaged_copy(intact, tmp_path, "garbage", data)
    assert main(["reprocess", str(intact), str(path), "-o", str(tmp_path / "a")]) == 1
    out = capfd.readouterr().out
    assert out.count("FAILED") == 1 and "garbage_bytes=1024" in out
    assert main(["reprocess", str(path), "-o", str(tmp_path / "b"), "--allow-damaged"]) == 0
    assert "damaged=garbage_bytes=1024" in capfd.readouterr().out


def _set(section: str | None, key: str, value):
    def edit(doc):
        (doc if section is None else doc[section])[key] = value
    return edit


BAD_SIDECARS = [
    ("nchan_huge", _set("geometry", "nchan", 9_000_000), "nchan=9000000"),
    ("nchan_float", _set("geometry", "nchan", 9e6), "geometry.nchan must be an integer"),
    ("nstream_fraction", _set("geometry", "nstream", 32.7),
     "geometry.nstream must be an integer, got 32.7"),
    ("nstream_mismatch", _set("geometry", "nstream", 10), "geometry.nstream 10 differs"),
    ("fs_negative", _set("sky", "fs_hz", -40e3), "sky.fs_hz must be > 0"),
    ("chan_bw_negative", _set("sky", "chan_bw_hz", -40e3), "sky.chan_bw_hz must be > 0"),
    ("freq0_zero", _set("sky", "freq0_hz", 0), "sky.freq0_hz must be > 0"),
    ("fs_string", _set("sky", "fs_hz", "40e3"), "sky.fs_hz must be a finite number"),
    ("sync_missing", lambda d: d["sky"].pop("sync_time"), "sky.sync_time is missing"),
    ("array_list", _set(None, "array", []), "array must be an object, got list"),
    ("array_string", _set(None, "array", "MWA"), "array must be an object, got str"),
    ("geometry_list", _set(None, "geometry", [8, 9]), "geometry must be an object, got list"),
    ("sky_list", _set(None, "sky", [1.0]), "sky must be an object, got list"),
    ("antenna_number", lambda d: d["array"]["antenna"][0].update(number=-3),
     "array: antenna[0].number must be a non-negative integer"),
    ("chan0_negative", _set(None, "chan0", -1), "chan0 must be a non-negative integer"),
    ("top_list", lambda d: None, "the sidecar must be a JSON object, got list"),
    ("not_json", lambda d: None, "not valid JSON"),
]


@pytest.mark.parametrize(("name", "edit", "says"), BAD_SIDECARS, ids=[c[0] for c in BAD_SIDECARS])
def test_bad_sidecar_is_one_line_naming_the_field(intact, tmp_path, name, edit, says):
    path = tmp_path / f"{name}.pcap"
    path.write_bytes(intact.read_bytes())
    doc = json.loads(metadata_path(intact).read_text())
    edit(doc)
    text = {"top_list": json.dumps([doc]), "not_json": "{"}.get(name, json.dumps(doc))
    metadata_path(path).write_text(text)
    (r,) = run([path], tmp_path / "out")
    assert not r.ok and says in r.error and "\n" not in r.error, r.error
    assert str(metadata_path(path)) in r.error
    buf = io.StringIO()
    assert summarise([r], buf) is False and buf.getvalue().count("\n") == 1


def test_geometry_from_dict_refuses_non_integers_and_absurd_sizes():
    g = Geometry(nstream=8)
    assert Geometry.from_dict(g.to_dict()) == g
    for field, value in (("nstream", 32.7), ("nchan", "9"), ("npacket", True)):
        with pytest.raises(GeometryError, match=f"{field} must be an integer") as info:
            Geometry.from_dict({**g.to_dict(), field: value})
        assert info.value.field == field
    with pytest.raises(GeometryError, match="more than the 1 GiB limit") as info:
        Geometry(nstream=8, nchan=9_000_000)
    assert info.value.field == "nchan"
    with pytest.raises(GeometryError, match="geometry must be a mapping"):
        Geometry.from_dict([8, 9])


def test_recorder_notes_each_closed_file_size(tmp_path):
    """``xengine record`` closes every file with its size in the sidecar, so a copy cut at a
    record boundary is caught (``size_change``)."""
    from xengine_block.capture.record import Recorder
    from xengine_block.capture.recording import read_metadata

    sim = simulator(npacket=NPACKET)
    rec = Recorder(tmp_path / "rec", sim.array, sim.geometry, sky=SKY, port=0)
    rec.run(idle_timeout=0.2)
    (path,) = rec.files
    assert read_metadata(path).pcap_bytes == path.stat().st_size == 24  # the pcap header


def test_record_stamps_cross_a_second_as_valid_headers(tmp_path):
    """A recording whose 1-us stamps cross a second boundary is clean: each record's
    microsecond field stays below 10**6 (dpkt's writer rounded the second stamp here,
    5.9999996 s, to 1000000 us, a header the damage scan rightly refuses, so recordings
    crossing a second came out "damaged", at random)."""
    path = tmp_path / "cross.pcap"
    with PcapWriter(path, start_time=5.9999986) as w:
        for _ in range(4):
            w.send(b"S\x04" + bytes(62))
    data = path.read_bytes()
    stamps = [struct.unpack_from("<II", data, pos) for pos in record_offsets(data)]
    assert stamps == [(5, 999999), (6, 0), (6, 1), (6, 2)]
    scan = scan_pcap(path)
    assert (scan.records, scan.spead, scan.garbage_bytes) == (4, 4, 0)
