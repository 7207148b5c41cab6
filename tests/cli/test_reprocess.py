"""``xengine reprocess`` options for recordings: each bad value is one line naming the option
(exit 2, nothing created); a telinfo YAML and TOML are accepted as ``--array``."""

from __future__ import annotations

import pytest

from tests.helpers.cli import assert_usage_error
from xengine_block.array import ArrayError
from xengine_block.cli import main
from xengine_block.readers.arrays import array_from_telinfo, load_array

TELINFO = """telescope_name: ATA
longitude: -121.4733
latitude: '40:49:02.75'
altitude: 1019.222
antenna_position_frame: {frame}
antennas:
- {{name: 1c, number: 3, position: [10.0, 20.0, 30.0], diameter: 6.1}}
- {{name: 2b, number: 5, position: [-5.0, 1.0, 2.0]}}
"""


@pytest.fixture
def given(tmp_path):
    d = tmp_path / "given"
    d.mkdir()
    (d / "a.raw").write_bytes(b"x")
    (d / "bad.toml").write_text("telescope_name = 'X'\n")
    (d / "bad.yaml").write_text(TELINFO.format(frame="polar"))
    (d / "tel.yaml").write_text(TELINFO.format(frame="enu"))
    return d


CASES = [
    (["--integration-spectra", "0"], "--integration-spectra"),
    (["--integration-s", "-1"], "--integration-s"),
    (["--integration-spectra", "4", "--integration-s", "1"], "--integration-s"),
    (["--format", "fits"], "--format"),
    (["--array", "{d}/missing.toml"], "--array"),
    (["--array", "{d}/bad.toml"], "--array"),
    (["--array", "{d}/bad.yaml"], "--array"),
    (["--sample-rate", "0"], "--sample-rate"),
    (["--chan-bw", "0"], "--chan-bw"),
    (["--chan-bw", "x"], "--chan-bw"),
]


@pytest.mark.parametrize(("args", "option"), CASES, ids=[" ".join(a) for a, _ in CASES])
def test_bad_option_is_one_line(given, tmp_path, capsys, args, option):
    work = tmp_path / "work"
    work.mkdir()
    argv = ["reprocess", f"{given}/a.raw", "-o", str(work / "out"),
            *[a.replace("{d}", str(given)) for a in args]]
    assert_usage_error(main, argv, option, capsys, work)


@pytest.mark.parametrize("frame", ["enu", "xyz", "ecef"])
def test_telinfo_frames_give_the_same_enu(tmp_path, frame):
    """The three frames of one array: ENU as given; xyz = ECEF offsets from the site; ecef =
    absolute (BLRI's telinfo.py semantics)."""
    import yaml

    enu = load_array(_telinfo(tmp_path, "enu"))
    assert enu.antenna_names == ("1c", "2b") and enu.antenna_numbers == (3, 5)
    assert abs(enu.latitude_deg - (40 + 49 / 60 + 2.75 / 3600)) < 1e-12
    doc = yaml.safe_load(TELINFO.format(frame="enu"))
    offsets = enu.antenna_positions  # ECEF minus the site
    if frame != "enu":
        pos = offsets + (enu.site_ecef if frame == "ecef" else 0)
        for a, p in zip(doc["antennas"], pos.tolist(), strict=True):
            a["position"] = p
        doc["antenna_position_frame"] = frame
    got = array_from_telinfo(doc)
    assert abs(got.enu_m - enu.enu_m).max() < 1e-6
    with pytest.raises(ArrayError, match="antennas\\[1\\].position must be 3 numbers"):
        doc["antennas"][1]["position"] = [1, 2]
        array_from_telinfo(doc)


def _telinfo(tmp_path, frame):
    path = tmp_path / f"tel_{frame}.yaml"
    path.write_text(TELINFO.format(frame=frame))
    return path
