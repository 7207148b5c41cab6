"""Input statistics and states from dumps the int64 reference correlates (not our backends):
each state found where its fault is, none in a clean array, one log line per change of state,
the summary's bad_inputs and the history sentence; the numpy extremes count against a count
written here."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from xengine_block.health.inputs import STATES, Thresholds, baseline_flags, dump_stats, judge
from xengine_block.health.monitor import HealthMonitor, dump_ranges, judge_offline
from xengine_block.reference import reference_triangle
from xengine_block.sample_layout import SampleLayout
from xengine_block.triangle import triangle_streams

NANT, NCHAN, NSPEC = 5, 4, 512


def sky(seed: int, nant: int = NANT, signal: float = 0.6, rms: float = 10.0) -> np.ndarray:
    """Natural samples ``[S, C, T, 2]`` int8: a common signal plus each input's noise."""
    rng = np.random.default_rng(seed)
    common = rng.standard_normal((1, NCHAN, NSPEC, 2)) * signal
    x = (rng.standard_normal((2 * nant, NCHAN, NSPEC, 2)) + common) * rms
    return np.clip(np.rint(x), -128, 127).astype(np.int8)


def stats_of(x: np.ndarray, bits: int = 8):
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    extremes = ((x == lo) | (x == hi)).sum(axis=(1, 2, 3))
    parts = np.full(x.shape[0], x[0].size)
    tri = reference_triangle(x)
    return dump_stats(tri, np.full(NCHAN, NSPEC), x.shape[0], extremes, parts)


def test_clean_array_is_all_ok():
    for seed in range(5):
        assert set(judge(stats_of(sky(seed)))) == {"ok"}


@pytest.mark.parametrize("state", STATES[1:])
def test_each_fault_is_found_on_its_input(state):
    x = sky(1)
    s = 3
    neighbours = ()
    if state == "dead":
        x[s] = 0
    elif state == "stuck":
        x[s] = 7  # held: the next dump holds the same
        neighbours = (stats_of(np.where(np.arange(x.shape[0])[:, None, None, None] == s, x,
                                        sky(2))),)
    elif state == "saturated":
        x[s] = np.clip(x[s].astype(np.int32) * 30, -128, 127)
    elif state == "high_power":
        x[s] = np.clip(x[s].astype(np.int32) * 4, -128, 127)
    elif state == "low_power":
        x[s] = np.rint(x[s] / 5).astype(np.int8)
    elif state == "decorrelated":
        x[s] = sky(9, signal=0.0)[s]
    states = judge(stats_of(x), Thresholds(), neighbours)
    assert states[s] == state
    assert [i for i, st in enumerate(states) if st != "ok"] == [s]


def test_thresholds_are_the_documented_ones_and_checked():
    t = Thresholds()
    assert (t.saturated_fraction, t.saturated_excess, t.high_power_factor, t.low_power_factor,
            t.decorrelated_sigma) == (0.02, 4.0, 10.0, 10.0, 6.0)
    for bad in ({"saturated_fraction": 0}, {"saturated_fraction": 1.5},
                {"saturated_excess": 0.5},
                {"high_power_factor": 1}, {"low_power_factor": -2},
                {"decorrelated_sigma": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            Thresholds(**bad)


def test_saturation_of_every_input_is_rfi_not_a_broken_input():
    x = sky(6)
    x[:, 2] = np.clip(x[:, 2].astype(np.int32) * 30, -128, 127)  # one channel of four, all
    assert set(judge(stats_of(x))) == {"ok"}
    x[3] = np.clip(x[3].astype(np.int32) * 30, -128, 127)  # and one input in all of them
    assert [i for i, s in enumerate(judge(stats_of(x))) if s != "ok"] == [3]


def test_no_spectrum_judges_nothing():
    x = sky(4)
    tri = reference_triangle(x)
    stats = dump_stats(tri * 0, np.zeros(NCHAN), x.shape[0])
    assert set(judge(stats)) == {"ok"}  # missing data, flagged as missing already


def test_baseline_flags_cover_every_product_of_the_input():
    j, k = triangle_streams(2 * NANT)
    flags = baseline_flags([3], 2 * NANT)
    assert np.array_equal(flags, (j == 3) | (k == 3))
    assert flags.sum() == 2 * NANT  # with itself once


def test_monitor_logs_changes_only_and_lists_bad_inputs(caplog):
    names, numbers = [f"a{i}" for i in range(NANT)], [10, 3, 7, 22, 5]
    mon = HealthMonitor(numbers, names, name="t")
    dumps = []
    for d in range(6):
        x = sky(10 + d)
        if 2 <= d < 5:
            x[1] = 0  # antenna 0 (number 10) pol y dead in dumps 2..4
        dumps.append(stats_of(x))
    with caplog.at_level(logging.INFO, logger="xengine_block.health.monitor"):
        judge_offline(mon, dumps)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines  # ok -> dead at 2, dead -> ok at 5
    assert "a0y (antenna 10) ok -> dead from dump 2" in lines[0]
    assert "dead -> ok from dump 5" in lines[1]
    assert mon.bad_inputs() == [{"antenna": 10, "antenna_name": "a0", "pol": "y",
                                 "reason": "dead", "dumps": [2, 3, 4]}]
    assert mon.history().endswith("a0y (antenna 10) dead in dumps 2-4")
    assert mon() == {(n, p): "ok" for n in numbers for p in "xy"}  # the latest dump's
    assert {g["state"] for g in mon.gauges()} == {"ok"}


def test_stuck_found_from_the_first_dump_offline_and_second_live():
    x = [sky(20 + d) for d in range(3)]
    for d in range(3):
        x[d][4] = 5
    offline = HealthMonitor(range(NANT), [str(i) for i in range(NANT)])
    judge_offline(offline, [stats_of(v) for v in x])
    assert offline.bad_inputs()[0]["dumps"] == [0, 1, 2]
    live = HealthMonitor(range(NANT), [str(i) for i in range(NANT)])
    for d, v in enumerate(x):
        live.observe(d, reference_triangle(v), np.full(NCHAN, NSPEC))
    # live, the first dump alone shows a constant uncorrelated with the sky; then stuck
    assert [(b["reason"], b["dumps"]) for b in live.bad_inputs()] == [("decorrelated", [0]),
                                                                      ("stuck", [1, 2])]


def test_dump_ranges():
    assert dump_ranges([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    assert dump_ranges([]) == ""


@pytest.mark.parametrize("encoding", ["ci8", "ci4"])
def test_numpy_extremes_count_against_a_count_of_our_own(encoding):
    """The layout's count (what backends without a counting pass use) against one written
    here from the bytes of a GUPPI-like [chan][time][pol] layout."""
    rng = np.random.default_rng(3)
    nant, nchan, nt = 3, 5, 64
    if encoding == "ci8":
        raw = rng.integers(-128, 128, (nant, nchan, nt, 2, 2), dtype=np.int8)
        raw[0, 1, :5] = -128
        lay = SampleLayout.from_axes([("station", nant), ("freq", nchan), ("fine_time", nt),
                                      ("pol", 2), ("reim", 2)])
        want = ((raw == -128) | (raw == 127)).transpose(0, 3, 1, 2, 4).reshape(
            2 * nant, -1).sum(axis=1)
        data = raw
    else:
        re = rng.integers(-8, 8, (nant, nchan, nt, 2), dtype=np.int8)
        im = rng.integers(-8, 8, (nant, nchan, nt, 2), dtype=np.int8)
        data = ((re.astype(np.uint8) & 0xF) << 4 | (im.astype(np.uint8) & 0xF)).astype(np.uint8)
        lay = SampleLayout.from_axes([("station", nant), ("freq", nchan), ("fine_time", nt),
                                      ("pol", 2)], encoding="ci4")
        ext = lambda v: (v == -8) | (v == 7)  # noqa: E731
        want = (ext(re).astype(int) + ext(im)).transpose(0, 3, 1, 2).reshape(2 * nant, -1).sum(
            axis=1)
    assert np.array_equal(lay.count_extremes(data), want)
