"""The visibility orders of Bifrost's correlate and of the TCC wrapper, to and from our packed
triangle (xengine_block/visibility_orders.py), each checked against its own upstream gold model
computed straight from the samples, both conjugations: a flipped one fails here.

No Bifrost needed: these are the pure conversions the blocks use.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.gold import bifrost_gold, tcc_gold
from xengine_block.reference import reference_triangle
from xengine_block.visibility_orders import (
    bifrost_matrix_to_triangle,
    tcc_map,
    tcc_to_triangle,
    triangle_to_bifrost_matrix,
    triangle_to_tcc,
)


def samples(nstream: int, nchan: int, ntime: int, seed: int = 0) -> np.ndarray:
    """Natural int8 ``x[stream, chan, time, reim]`` (full ci8 range: -128 included)."""
    return np.random.default_rng(seed).integers(-128, 128, (nstream, nchan, ntime, 2), np.int8)


def as_complex(v: np.ndarray) -> np.ndarray:
    return v[..., 0].astype(np.float64) + 1j * v[..., 1].astype(np.float64)


@pytest.mark.parametrize("npol", [1, 2])
def test_tcc_order_matches_the_tcc_gold_model_both_ways(npol):
    x = samples(6 if npol == 2 else 5 * 2, 3, 40)
    tri = reference_triangle(x)  # int64 K[j, k] = sum x_j conj(x_k), packed
    nstation = x.shape[0] // npol
    tcc = triangle_to_tcc(tri, nstation, npol)
    gold = tcc_gold(x, npol)
    assert tcc.dtype == np.int64 and np.array_equal(as_complex(tcc), gold)
    assert np.array_equal(tcc_to_triangle(tcc, nstation, npol), tri)
    # complex arrays convert the same way
    assert np.array_equal(triangle_to_tcc(as_complex(tri), nstation, npol), gold)
    # The other conjugation (x_i conj -> conj(x_i) x_j) differs on every cross product: the
    # check above can fail.
    assert not np.array_equal(as_complex(tcc), gold.conj())


def test_tcc_autocorrelation_yx_is_the_conjugate_of_xy():
    index, conj = tcc_map(3, 2)
    assert conj.sum() == 3  # only the Y-X entry of each station's own pair
    assert list(np.flatnonzero(conj)) == [4 * k + 2 for k in (0, 3, 5)]


def test_bifrost_matrix_lower_triangle_matches_bifrost_gold_and_upper_is_untouched():
    x = samples(8, 2, 30, seed=1)  # 4 stations x 2 pols
    tri = reference_triangle(x)
    gold = bifrost_gold(x)
    i, j = np.tril_indices(8)
    for out in (np.full((2, 8, 8), 7 + 7j, np.complex64), np.full((2, 8, 8, 2), 7, np.int32)):
        triangle_to_bifrost_matrix(tri, out)
        got = out if np.iscomplexobj(out) else as_complex(out)
        assert np.array_equal(got[:, i, j], gold[:, i, j])  # exact: |values| < 2^24
        assert not np.array_equal(got[:, i, j], gold[:, i, j].conj())  # conjugation matters
        upper = np.triu_indices(8, 1)
        assert np.all(got[:, upper[0], upper[1]] == 7 + 7j)  # as Bifrost's kernel leaves it
        back = bifrost_matrix_to_triangle(out)
        assert np.array_equal(back if np.iscomplexobj(back) else as_complex(back),
                              as_complex(tri))


def test_wrong_sizes_are_named():
    tri = reference_triangle(samples(4, 1, 3))
    with pytest.raises(ValueError, match="triangle has 10 baselines per channel; 6 streams"):
        triangle_to_tcc(tri, 3, 2)
    with pytest.raises(ValueError, match="TCC visibilities have 7 entries"):
        tcc_to_triangle(np.zeros((1, 7, 2), np.int32), 2, 2)
