"""Array description: default MWA array, positions against pyuvdata, TOML round trip, errors."""

from __future__ import annotations

import json
import tomllib

import numpy as np
import pytest

from xengine_block.array import (
    _CANONICAL,
    ArrayDescription,
    ArrayError,
    default_array,
    ecef_from_lla,
    parse_array_toml,
)


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


def odd_array(seed: int) -> ArrayDescription:
    """Numbers repr writes with exponents, negative zeros, integers where floats go, names
    of every printable ASCII character (quotes and backslashes: escaped strings)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    scale = 10.0 ** rng.integers(-12, 12, (n, 3))
    enu = rng.uniform(-1, 1, (n, 3)) * scale
    enu[rng.random((n, 3)) < 0.1] = -0.0
    enu[rng.random((n, 3)) < 0.1] = 7.0
    chars = [chr(c) for c in range(32, 127)]
    names = [f"{k}" + "".join(rng.choice(chars, int(rng.integers(0, 6)))) for k in range(n)]
    return ArrayDescription("T" + chars[seed % len(chars)], float(rng.uniform(-90, 90)),
                            float(rng.uniform(-180, 180)), float(rng.choice([0.0, 1e-7, 5e3])),
                            names, rng.permutation(10 * n)[:n].tolist(), enu,
                            x_orientation=("east", "north")[seed % 2])


@pytest.mark.parametrize("seed", range(40))
def test_array_files_read_as_tomllib_reads_them(seed):
    """parse_array_toml's fast path gives tomllib's document, types included, for what
    to_toml writes; other texts go to tomllib (its values, its errors)."""
    text = odd_array(seed).to_toml()
    fast = _CANONICAL.fullmatch(text) is not None
    escaped = "\\" in text
    assert fast != escaped  # the fast path takes every file without escapes
    doc = parse_array_toml(text)
    assert doc == tomllib.loads(text)
    assert json.dumps(doc) == json.dumps(tomllib.loads(text))  # int stays int, -0.0 stays
    variants = [text.replace("\n", "\r\n"), text.replace(" = ", "=", 1), "# c\n" + text,
                text.replace("\n[site]", ' # c\n[site]'), text.replace("[[antenna]]\nname",
                                                                        "[[antenna]]\n name"),
                text + "x = inf\n"]
    for other in variants:
        assert _CANONICAL.fullmatch(other) is None
        assert parse_array_toml(other) == tomllib.loads(other)
    for bad in (text.replace("enu_m = [", "enu_m = [01, ", 1), text + 'name = "z"\n',
                text.replace(" = ", " = \x01", 1), text[:-2]):
        with pytest.raises(tomllib.TOMLDecodeError):
            tomllib.loads(bad)
        with pytest.raises(tomllib.TOMLDecodeError):
            parse_array_toml(bad)


def test_array_file_integers_stay_integers():
    text = ('telescope_name = "T"\ninstrument = "T"\nx_orientation = "east"\n\n[site]\n'
            'latitude_deg = 1\nlongitude_deg = -0\naltitude_m = 5e3\n\n[[antenna]]\n'
            'name = "a"\nnumber = 0\nenu_m = [1, -2.5, 0]\n')
    assert _CANONICAL.fullmatch(text)
    assert json.dumps(parse_array_toml(text)) == json.dumps(tomllib.loads(text))


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


def test_an_array_file_is_read_once_per_content(tmp_path, monkeypatch):
    """``load_array`` keeps what it made of a file's bytes (reprocessing reads the array once
    per recording file): the same bytes give the same description without parsing them again;
    an edited file is parsed anew, and a broken one is still refused naming the file."""
    from xengine_block.readers import arrays

    path = tmp_path / "a.toml"
    default_array(3).write_toml(path)
    first = arrays.load_array(path)
    parsed = []
    real = arrays.parse_array_toml
    monkeypatch.setattr(arrays, "parse_array_toml", lambda text: parsed.append(1) or real(text))
    assert arrays.load_array(str(path)) is first and not parsed
    assert not first.enu_m.flags.writeable  # shared, so nothing in it can change
    edited = default_array(4)
    edited.write_toml(path)
    again = arrays.load_array(path)
    assert parsed == [1] and again.antenna_names == edited.antenna_names
    path.write_text("telescope_name = \n")
    with pytest.raises(ArrayError, match=r"a\.toml: not valid toml"):
        arrays.load_array(path)
