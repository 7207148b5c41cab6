"""AOFlagger through our wrapper: pure noise flags < 1 %, a tone in one channel and part of
the time is flagged there, bad inputs' visibilities stay out of its statistics and of its
output, the sliding window flags each dump as it comes; the --rfi values refused in one line."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import import_or_require
from xengine_block.health.monitor import HealthMonitor, flag_dumps
from xengine_block.health.rfi import AOFlaggerRfi, SlidingRfi, flagged_fractions, parse_rfi

import_or_require("aoflagger")

T, C, NSTREAM, NSPEC = 48, 32, 6, 1000
NBL = NSTREAM * (NSTREAM + 1) // 2


def noise(seed: int = 0) -> np.ndarray:
    """Visibilities [T, C, nbl, 2]: Gaussian, as sums of NSPEC spectra."""
    rng = np.random.default_rng(seed)
    return np.rint(rng.standard_normal((T, C, NBL, 2)) * np.sqrt(NSPEC) * 100).astype(np.int64)


@pytest.fixture(scope="module")
def flagger():
    return AOFlaggerRfi()


def test_pure_noise_flags_under_one_percent(flagger):
    flags = flagger.flag(noise(), NSPEC)
    assert flags.mean() < 0.01
    assert flagger.strategy_path.name == "generic-default.lua"


def test_a_tone_is_flagged_where_it_is(flagger):
    vis = noise(1)
    vis[10:30, 7, :, 0] += 50 * NSPEC * 100  # every baseline hears it
    flags = flagger.flag(vis, NSPEC)
    assert flags[10:30, 7].all()
    out = flags.copy()
    out[6:34, 7] = False  # the RFI and the strategy's dilation
    assert out.mean() < 0.01
    frac = flagged_fractions(flags)
    assert frac["per_channel"][7] == max(frac["per_channel"])
    assert len(frac["per_dump"]) == T


def test_given_flags_stay_out(flagger):
    vis = noise(2)
    vis[20:, :, 3, :] *= 40  # a bad input's baseline jumps
    given = np.zeros((T, C, NBL), bool)
    given[20:, :, 3] = True
    flags = flagger.flag(vis, NSPEC, given)
    assert not flags[given].any()  # not returned: flagged already
    assert flags[:, :, 3].mean() < 0.05  # nor its jump taken for RFI before it


def test_flag_dumps_together(flagger):
    vis = noise(3)
    vis[:, :, 0] = 0  # stream 0's auto: a dead input (its crosses are noise here)
    mon = HealthMonitor([1, 2, 3], ["a", "b", "c"])
    flags, summary = flag_dumps(mon, flagger, vis, NSPEC)
    assert summary["bad_inputs"][0]["reason"] == "dead"
    assert summary["rfi"]["strategy"] == "generic-default.lua"
    assert flags[:, :, [0, 1, 3, 6, 10, 15]].all()  # every baseline of stream 0


def test_sliding_window_has_no_delay(flagger):
    vis = noise(4)
    vis[:, 5, :, 0] += 50 * NSPEC * 100
    live = SlidingRfi(flagger, 8)
    got = [live.push(vis[t], NSPEC, np.zeros(1, bool)) for t in range(12)]
    assert all(g.shape == (C, NBL) for g in got)
    assert all(g[5].all() for g in got[1:])
    assert np.mean([g.mean() for g in got]) < 0.05
    with pytest.raises(ValueError, match="at least 1 dump"):
        SlidingRfi(flagger, 0)


@pytest.mark.parametrize("text", ["aoflager", "aoflagger:", "aoflagger:/no/such.lua", "",
                                  "sumthreshold"])
def test_bad_rfi_values(text):
    with pytest.raises(ValueError, match="aoflagger|AOFlagger|flagger"):
        parse_rfi(text)


def test_strategy_file_of_the_user(tmp_path, flagger):
    lua = tmp_path / "mine.lua"
    lua.write_text(flagger.strategy_path.read_text())
    assert AOFlaggerRfi(strategy=parse_rfi(f"aoflagger:{lua}")[1]).strategy_path == lua
    broken = tmp_path / "broken.lua"
    broken.write_text("this is not lua (")
    from xengine_block.health.rfi import RfiUnavailable
    with pytest.raises(RfiUnavailable, match="broken.lua"):
        AOFlaggerRfi(strategy=broken).flag(noise()[:4], NSPEC)
