"""Shared fixtures: deterministic random frames for any geometry."""

from __future__ import annotations

import numpy as np
import pytest

from xengine_block.geometry import Geometry


def random_frames(g: Geometry, nframe: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(-128, 128, size=(nframe, *g.frame_shape), dtype=np.int8)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(12345)
