"""Array description: default MWA array, positions against pyuvdata, TOML round trip, errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from xengine_block.array import ArrayDescription, ArrayError, default_array, ecef_from_lla


def small_dict(**changes) -> dict:
    d = {"telescope_name": "TEST",
         "site": {"latitude_deg": -30.7, "longitude_deg": 21.4, "altitude_m": 1050.0},
         "antenna": [{"name": "A0", "number": 0, "enu_m": [0.0, 0.0, 0.0]},
                     {"name": "A1", "number": 1, "enu_m": [10.0, -3.0, 0.5]}]}
    d.update(changes)
    return d


def test_default_array_is_mwa_128_tiles_256_streams():
    arr = default_array()
    assert (arr.telescope_name, arr.nant, arr.nstream) == ("MWA", 128, 256)
    assert len(set(arr.antenna_names)) == 128 and arr.antenna_numbers == tuple(range(128))
    assert arr.latitude_deg == pytest.approx(-26.703319, abs=1e-6)
    assert arr.longitude_deg == pytest.approx(116.67081, abs=1e-6)
    # Phase I tiles lie within ~1.7 km of the centre on nearly flat ground.
    assert np.abs(arr.enu_m[:, :2]).max() < 1700 and np.abs(arr.enu_m[:, 2]).max() < 10
    assert default_array(4).nstream == 8
    assert arr.stream_index(3, 1) == 7 and arr.stream_antenna_pol(7) == (3, 1)


def test_site_and_antenna_ecef_agree_with_pyuvdata():
    import pyuvdata
    from pyuvdata import utils
    arr = default_array()
    with np.load(f"{pyuvdata.__path__[0]}/data/mwa128_ant_layouts.npz") as d:
        arrcent = d["arrcent"]
    assert np.allclose(arr.site_ecef, arrcent, atol=1e-3)
    ecef = utils.ECEF_from_ENU(arr.enu_m, latitude=np.radians(arr.latitude_deg),
                               longitude=np.radians(arr.longitude_deg),
                               altitude=arr.altitude_m)
    assert np.allclose(arr.ecef_m, ecef, atol=1e-6)
    assert np.allclose(arr.antenna_positions, ecef - arr.site_ecef, atol=1e-6)
    # The rotation is orthonormal and maps "up" to the ellipsoid normal at the site.
    rot = arr.enu_to_ecef
    assert np.allclose(rot.T @ rot, np.eye(3))
    up = ecef_from_lla(arr.latitude_deg, arr.longitude_deg, arr.altitude_m + 1) - arr.site_ecef
    assert np.allclose(rot[:, 2], up, atol=1e-9)


def test_dict_is_json_and_round_trips():
    arr = default_array(16)
    d = json.loads(json.dumps(arr.to_dict()))
    assert ArrayDescription.from_dict(d) == arr
    assert ArrayDescription.from_dict(d).enu_m.tobytes() == arr.enu_m.tobytes()


def test_toml_round_trip(tmp_path):
    arr = default_array()
    path = tmp_path / "mwa.toml"
    arr.write_toml(path)
    back = ArrayDescription.from_toml(path)
    assert back == arr and back.enu_m.tobytes() == arr.enu_m.tobytes()
    assert back.subset(3) == arr.subset(3)


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d["antenna"][1].update(name="A0"), "antenna[1].name"),
    (lambda d: d["antenna"][1].update(number=0), "antenna[1].number"),
    (lambda d: d["antenna"][1].update(number=-1), "antenna[1].number"),
    (lambda d: d["antenna"][0].update(enu_m=[1.0, 2.0]), "antenna[0].enu_m"),
    (lambda d: d["antenna"][0].update(enu_m=[1.0, "x", 2.0]), "antenna[0].enu_m[1]"),
    (lambda d: d["antenna"][0].update(enu_m=[1.0, float("nan"), 2.0]), "antenna[0].enu_m[1]"),
    (lambda d: d["antenna"][0].pop("name"), "antenna[0].name"),
    (lambda d: d["antenna"][0].update(colour="red"), "antenna[0].colour"),
    (lambda d: d["site"].update(latitude_deg=91.0), "site.latitude_deg"),
    (lambda d: d["site"].update(longitude_deg=-181.0), "site.longitude_deg"),
    (lambda d: d["site"].pop("altitude_m"), "site.altitude_m"),
    (lambda d: d["site"].update(altitude_m=True), "site.altitude_m"),
    (lambda d: d.update(antenna=[]), "antenna"),
    (lambda d: d.pop("telescope_name"), "telescope_name"),
    (lambda d: d.update(x_orientation="up"), "x_orientation"),
    (lambda d: d.update(extra=1), "extra"),
])
def test_validation_errors_name_the_field(mutate, field):
    d = small_dict()
    ArrayDescription.from_dict(d)  # the unmutated description is valid
    mutate(d)
    with pytest.raises(ArrayError, match=field.replace("[", r"\[").replace("]", r"\]")):
        ArrayDescription.from_dict(d)


def test_constructor_checks_position_shape():
    with pytest.raises(ArrayError, match=r"enu_m must have shape \[2, 3\]"):
        ArrayDescription("T", 0, 0, 0, ["a", "b"], [0, 1], np.zeros((3, 3)))


def test_toml_errors_name_the_file_and_field(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('telescope_name = "T"\n[site]\nlatitude_deg = 0.0\nlongitude_deg = 0.0\n'
                    'altitude_m = 0.0\n[[antenna]]\nname = "a"\nnumber = 0\nenu_m = [0, 0]\n')
    with pytest.raises(ArrayError, match=r"bad\.toml: antenna\[0\]\.enu_m"):
        ArrayDescription.from_toml(path)
    path.write_text("telescope_name = \n")
    with pytest.raises(ArrayError, match="not valid TOML"):
        ArrayDescription.from_toml(path)


def test_subset_bounds():
    arr = default_array()
    with pytest.raises(ArrayError, match="n_ant"):
        arr.subset(0)
    with pytest.raises(ArrayError, match="n_ant"):
        arr.subset(129)
