"""The JSON API answers what the UVH5 file holds, value for value (read back with pyuvdata),
for the files (``xengine view``) and for the live block's dumps; bad parameters are a 400 with
one line; the live history is bounded; an unguaranteed display never holds the chain back."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from tests.display.conftest import NDUMP, point_source_run
from xengine_block.display.api import Api
from xengine_block.display.files import FileDumps, ViewError
from xengine_block.display.live import LiveDumps
from xengine_block.display.model import OUTLIER_FACTOR, Dump

pyuvdata = pytest.importorskip("pyuvdata")
C_M_S = 299792458.0


def get(api: Api, path: str, query: str = "") -> tuple[int, dict]:
    code, body = api.handle(f"/api/v1/{path}", query)
    return code, json.loads(body)


@pytest.fixture(scope="module")
def uv(known_run):
    return pyuvdata.UVData.from_file(str(known_run.file))


def stores(known_run):
    return {"files": FileDumps([known_run.file]), "live": known_run.store}


@pytest.mark.parametrize("source", ["files", "live"])
def test_baseline_autos_matrix_are_the_file_s_values(known_run, uv, source):
    api = Api(stores(known_run)[source])
    times = np.unique(uv.time_array)
    assert len(times) == NDUMP
    code, status = get(api, "status")
    assert code == 200 and status["dumps"] == NDUMP and status["nants"] == uv.Nants_data
    assert status["antennas"] == sorted(np.unique(uv.ant_1_array).tolist())
    ants = status["antennas"]
    for dump in range(NDUMP):
        sel = uv.select(times=[times[dump]], inplace=False)
        for a1, a2 in [(ants[0], ants[1]), (ants[5], ants[2]), (ants[3], ants[3])]:
            for pol in ("xx", "yy", "xy", "yx"):
                code, b = get(api, "baseline", f"ant1={a1}&ant2={a2}&pol={pol}&dump={dump}")
                assert code == 200, b
                v = sel.get_data((a1, a2, pol)).ravel()
                np.testing.assert_array_equal(np.array(b["re"]) + 1j * np.array(b["im"]), v)
                np.testing.assert_array_equal(b["flags"], sel.get_flags((a1, a2, pol)).ravel())
                np.testing.assert_array_equal(np.array(b["nsamples"], np.float32),
                                              sel.get_nsamples((a1, a2, pol)).ravel())
                np.testing.assert_array_equal(b["freq_hz"], uv.freq_array.ravel())
                assert b["time_jd"] == times[dump]
        code, autos = get(api, "autos", f"dump={dump}")
        assert code == 200 and len(autos["inputs"]) == 2 * len(ants)
        for inp in autos["inputs"]:
            pol = inp["pol"] * 2
            np.testing.assert_array_equal(
                inp["power"], sel.get_data((inp["antenna"], inp["antenna"], pol)).ravel().real)
        code, m = get(api, "matrix", f"pol=xx&dump={dump}&chan_lo=2&chan_hi=7")
        assert code == 200 and m["antennas"] == ants
        for i, a in enumerate(ants):  # independently, from pyuvdata's arrays
            for j, b_ in enumerate(ants):
                v = sel.get_data((a, b_, "xx")).ravel()[2:7]
                va = sel.get_data((a, a, "xx")).ravel()[2:7].real
                vb = sel.get_data((b_, b_, "xx")).ravel()[2:7].real
                assert m["amplitude"][i][j] == pytest.approx(np.abs(v).mean(), rel=1e-12)
                assert m["phase"][i][j] == pytest.approx(np.angle(v.mean()), abs=1e-12)
                assert m["coherence"][i][j] == pytest.approx(
                    np.mean(np.abs(v) / np.sqrt(va * vb)), rel=1e-12)
    # -1 is the latest; the lost packets of frame 3 show in dump 1's nsamples (antenna 2, y)
    assert get(api, "baseline", "ant1=0&ant2=1")[1]["time_jd"] == times[-1]
    lossy = get(api, "autos", "dump=1")[1]["inputs"]
    assert [(i["antenna"], i["pol"]) for i in lossy if i["nsamples"] < 1] == [(ants[2], "y")]


def test_phase_of_a_baseline_is_the_geometry_s(known_run):
    """fx.py's point source: the file's cross-correlation phase is 2 pi f (b . s) / c for
    baseline b = ENU(ant_2) - ENU(ant_1) and the source direction s (docs/design.md, UVH5
    conventions: conj(x[ant_1]) x[ant_2]), channel by channel, and the coherence ~1."""
    api = Api(FileDumps([known_run.file]))
    arr = known_run.array
    enu = dict(zip(arr.antenna_numbers, np.asarray(arr.enu_m), strict=True))
    s = known_run.direction_enu()
    a1, a2 = arr.antenna_numbers[0], arr.antenna_numbers[6]
    b = get(api, "baseline", f"ant1={a1}&ant2={a2}&pol=xx&dump=0")[1]
    f = np.array(b["freq_hz"])
    want = 2 * np.pi * f * ((enu[a2] - enu[a1]) @ s) / C_M_S
    got = np.angle(np.array(b["re"]) + 1j * np.array(b["im"]))
    err = np.angle(np.exp(1j * (got - want)))
    assert np.abs(err).max() < 0.1, err
    assert np.ptp(np.unwrap(want)) > 1.0  # a slope across the band, not a constant
    m = get(api, "matrix", "pol=xx&dump=0")[1]
    assert np.min(m["coherence"]) > 0.95


@pytest.mark.parametrize("path, query, says", [
    ("baseline", "ant1=0&ant2=999", "antenna 999"),
    ("baseline", "ant1=0", "ant2: required"),
    ("baseline", "ant1=x&ant2=1", "ant1: expected an integer"),
    ("baseline", "ant1=0&ant2=1&pol=zz", "pol: 'zz'"),
    ("baseline", "ant1=0&ant2=1&pol=%00%ff", "pol: expected"),
    ("baseline", "ant1=0&ant2=1&dump=4", "dump: 4 is out of range"),
    ("baseline", "ant1=0&ant2=1&dump=-5", "dump: -5"),
    ("baseline", "ant1=0&ant2=1&dump=99999999999999999999", "dump: expected an integer"),
    ("baseline", "ant1=0&ant2=1&ant1=2", "ant1: given 2 times"),
    ("autos", "file=/etc/passwd", "unknown parameter 'file'"),
    ("matrix", "chan_lo=5&chan_hi=5", "chan_lo, chan_hi"),
    ("matrix", "chan_hi=10", "chan_lo, chan_hi"),
    ("waterfall", "ant1=0&ant2=1&last=0", "last: must be"),
    ("status", "&".join(f"a{i}=1" for i in range(40)), "too many parameters"),
])
def test_bad_parameters_are_a_400_with_one_line(known_run, path, query, says):
    code, body = get(Api(FileDumps([known_run.file])), path, query)
    assert code == 400 and says in body["error"] and "\n" not in body["error"], body


def test_unknown_endpoints_are_a_404_and_no_dump_yet_a_503():
    api = Api(LiveDumps(history=2))
    assert get(api, "../../etc/passwd")[0] == 404
    assert api.handle("/etc/passwd", "")[0] == 404
    code, body = get(api, "autos")
    assert code == 503 and "no dump" in body["error"]
    assert get(api, "status")[1]["dumps"] == 0


def test_live_history_is_bounded_and_numbers_stay_the_run_s(known_run):
    store = LiveDumps(history=3)
    dumps = [known_run.store.dump(i) for i in range(NDUMP)]
    for d in dumps * 3:
        store.add(d)
    assert store.count() == (3 * NDUMP - 3, 3 * NDUMP)
    api = Api(store)
    assert get(api, "autos", "dump=0")[0] == 400
    code, w = get(api, "waterfall", "ant1=0&ant2=1&last=50")
    assert code == 200 and w["dumps"] == [9, 10, 11]
    assert len(store.health(11)["series"]) == 3 * NDUMP


def zero_input(d: Dump, antenna: int) -> Dump:
    vis = d.vis.copy()
    rows = [r for (a, b), r in d.baselines.row.items() if antenna in (a, b)]
    vis[rows] = 0
    return Dump(d.time_jd, d.freq_hz, d.pols, d.baselines, vis, d.flags, d.nsamples,
                d.integration_s)


@pytest.mark.parametrize("shape", ["mapping", "entries"])
def test_autos_mark_outliers_and_show_the_health_marks_given(known_run, shape):
    store = LiveDumps(history=2)
    store.add(zero_input(known_run.store.dump(0), 3))
    marks = ({(5, "x"): "saturated"} if shape == "mapping"
             else [{"antenna": 5, "pol": "x", "state": "saturated"}])
    a = get(Api(store, marks=lambda: marks), "autos")[1]
    flagged = {(i["antenna"], i["pol"]) for i in a["inputs"] if i["outlier"]}
    assert flagged == {(3, "x"), (3, "y")} and a["marks"]
    assert [(i["antenna"], i["pol"], i["state"]) for i in a["inputs"] if "state" in i] == \
        [(5, "x", "saturated")]
    ratios = [i["ratio"] for i in a["inputs"] if not i["outlier"]]
    assert all(1 / OUTLIER_FACTOR < r < OUTLIER_FACTOR for r in ratios)
    assert "state" not in json.dumps(get(Api(store), "autos")[1]["inputs"])


def test_an_unguaranteed_display_never_holds_the_chain_back(tmp_path, monkeypatch):
    """The display's store blocks until the writer has written every dump: were the display
    a guaranteed reader, the writer could never get there (the run would time out)."""
    from xengine_block.blocks.writer import UVH5WriterLogic

    writers = []
    original_init = UVH5WriterLogic.__init__

    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        writers.append(self)

    monkeypatch.setattr(UVH5WriterLogic, "__init__", init)
    reached = threading.Event()
    original_add = LiveDumps.add

    def slow_add(self, dump):
        for _ in range(600):
            if writers and writers[0].dumps_written == NDUMP:
                reached.set()
                break
            threading.Event().wait(0.05)
        original_add(self, dump)

    monkeypatch.setattr(LiveDumps, "add", slow_add)
    run = point_source_run(tmp_path, guarantee=False)
    assert reached.is_set()
    assert run.store.count()[1] == NDUMP  # every dump counted, held or lost
    assert pyuvdata.UVData.from_file(str(run.file)).Ntimes == NDUMP


def test_view_refuses_what_it_cannot_show_in_one_line(tmp_path, known_run):
    bad = tmp_path / "bad.uvh5"
    bad.write_bytes(b"not hdf5 at all")
    with pytest.raises(ViewError, match="bad.uvh5: not a UVH5 file pyuvdata reads"):
        FileDumps([bad])
    with pytest.raises(ViewError, match="both hold time"):
        FileDumps([known_run.file, known_run.file])
