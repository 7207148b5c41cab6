"""Randomised stress: random gulps, partial commits, frame sizes, delays and several sequences,
through bare rings and through a diamond-shaped pipeline. No deadlock (pytest-timeout), exact
data for guaranteed readers, exact skip accounting for unguaranteed ones."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from xengine_block.runtime.pipeline import (
    MultiTransformBlock,
    Pipeline,
    SinkBlock,
    SourceBlock,
    TransformBlock,
)
from xengine_block.runtime.ring import EndOfDataStop, Ring

pytestmark = pytest.mark.timeout(60)


def values(first: int, n: int, width: int) -> np.ndarray:
    """Frame i of a sequence holds i*width .. i*width+width-1 (int32)."""
    return np.arange(first * width, (first + n) * width, dtype=np.int32).reshape(n, width)


def header(name: str, time_tag: int, width: int) -> dict:
    return {"name": name, "time_tag": time_tag, "width": width,
            "_tensor": {"dtype": "i32", "shape": [-1, width]}}


def pause(rng: np.random.Generator) -> None:
    if rng.random() < 0.2:
        time.sleep(rng.random() * 5e-4)


def random_sequences(rng: np.random.Generator) -> list[tuple[str, int, int, int]]:
    """(name, time_tag, nframe, width): odd widths so frames straddle every alignment."""
    return [(f"seq{k}", 1000 * k + int(rng.integers(100)), int(rng.integers(0, 1500)),
             int(rng.integers(1, 14))) for k in range(int(rng.integers(2, 5)))]


@pytest.mark.parametrize("seed", range(4))
def test_bare_rings_random_spans(seed):
    rng = np.random.default_rng(seed)
    sequences = random_sequences(rng)
    ring = Ring()
    results: dict[str, dict] = {}
    errors: list[BaseException] = []
    opened = threading.Barrier(4)

    def reader(key: str, guarantee: bool, rseed: int) -> None:
        # The unguaranteed reader is slow on purpose, so that it gets overtaken.
        r = np.random.default_rng(rseed)
        got = results.setdefault(key, {})
        try:
            seqs = ring.read(guarantee=guarantee)
            for i, iseq in enumerate(seqs):
                if i == 0:
                    opened.wait()
                width, offset = iseq.header["width"], 0
                parts, skipped = [], 0
                while True:
                    try:
                        ispan = iseq.acquire(offset, int(r.integers(1, 40)))
                    except EndOfDataStop:
                        break
                    with ispan:
                        data = ispan.data.copy()
                        if ispan.nframe_overwritten == 0:
                            assert np.array_equal(data, values(ispan.frame_offset, ispan.nframe,
                                                               width))
                        skipped += ispan.nframe_skipped
                        parts.append(data)
                        offset = ispan.requested_frame_offset + ispan.nframe_skipped + ispan.nframe
                    pause(r) if guarantee else time.sleep(0.001)
                got[iseq.name] = (np.concatenate(parts) if parts else np.empty((0, width)),
                                  skipped, iseq.time_tag)
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)
            opened.abort()

    threads = [threading.Thread(target=reader, args=(k, g, seed * 10 + i))
               for i, (k, g) in enumerate([("g1", True), ("g2", True), ("u", False)])]
    for t in threads:
        t.start()
    with ring.begin_writing() as w:
        for k, (name, time_tag, nframe, width) in enumerate(sequences):
            with w.begin_sequence(header(name, time_tag, width), int(rng.integers(1, 30))) as oseq:
                if k == 0:
                    opened.wait()
                i = 0
                while i < nframe:
                    with oseq.reserve(int(rng.integers(1, 30))) as span:
                        n = min(int(rng.integers(0, span.nframe + 1)), nframe - i)  # partial
                        span.data[:n] = values(i, n, width)
                        span.commit(n)
                    i += n
                    pause(rng)
    for t in threads:
        t.join(30)
    assert not errors, errors
    for name, time_tag, nframe, width in sequences:
        for key in ("g1", "g2"):
            data, skipped, tt = results[key][name]
            assert skipped == 0 and tt == time_tag
            assert np.array_equal(data, values(0, nframe, width))
        data, skipped, _ = results["u"][name]
        assert len(data) + skipped == nframe
    assert sum(results["u"][name][1] for name, *_ in sequences) > 0


class Source(SourceBlock):
    def __init__(self, sequences, rng, **kwargs):
        super().__init__([s[0] for s in sequences], int(rng.integers(1, 20)), **kwargs)
        self.sequences, self.rng = {s[0]: s for s in sequences}, rng

    def create_reader(self, name):
        return {"next": 0}

    def on_sequence(self, reader, name):
        _, time_tag, nframe, width = self.sequences[name]
        reader.update(n=nframe, width=width)
        return [header(name, time_tag, width)]

    def on_data(self, reader, ospans):
        i = reader["next"]
        n = min(int(self.rng.integers(0, ospans[0].nframe + 1)), reader["n"] - i)
        if n == 0 and i < reader["n"]:
            n = 1  # 0 would end the sequence early
        ospans[0].data[:n] = values(i, n, reader["width"])
        reader["next"] = i + n
        pause(self.rng)
        return [n]


class Double(TransformBlock):
    def __init__(self, iring, rng, **kwargs):
        super().__init__(iring, gulp_nframe=int(rng.integers(1, 20)), **kwargs)
        self.rng = rng

    def on_sequence(self, iseq):
        return dict(iseq.header)

    def on_data(self, ispan, ospan):
        ospan.data[...] = 2 * ispan.data
        pause(self.rng)


class Difference(MultiTransformBlock):
    """Diamond: reads the source and the doubled ring in lockstep, emits doubled - source."""

    def __init__(self, a, b, rng, **kwargs):
        super().__init__([a, b], gulp_nframe=int(rng.integers(1, 20)), **kwargs)
        self.orings = [self.create_ring()]
        self.rng = rng

    def on_sequence(self, iseqs):
        return [dict(iseqs[0].header)]

    def on_data(self, ispans, ospans):
        assert ispans[0].frame_offset == ispans[1].frame_offset
        ospans[0].data[...] = ispans[1].data - ispans[0].data
        pause(self.rng)
        return [ispans[0].nframe]


class Keep(SinkBlock):
    def __init__(self, iring, rng, delay=0.0, gulp=None, **kwargs):
        super().__init__(iring, gulp_nframe=gulp or int(rng.integers(1, 20)), **kwargs)
        self.rng, self.delay, self.got, self.skipped = rng, delay, {}, {}

    def on_sequence(self, iseq):
        self.cur = iseq.name
        self.got[self.cur], self.skipped[self.cur] = [], 0

    def on_skip(self, islice):
        self.skipped[self.cur] += islice.stop - islice.start

    def on_data(self, ispan):
        data = ispan.data.copy()
        self.got[self.cur].append((ispan.frame_offset, data, ispan.nframe_overwritten == 0))
        pause(self.rng)
        time.sleep(self.delay)

    def data(self, name, width):
        parts = [d for _, d, _ in self.got[name]]
        return np.concatenate(parts) if parts else np.empty((0, width), np.int32)


@pytest.mark.parametrize("seed", range(4))
def test_random_diamond_pipeline(seed):
    seeds = np.random.SeedSequence(100 + seed)
    rngs = [np.random.default_rng(s) for s in seeds.spawn(7)]  # one per thread
    sequences = random_sequences(rngs[0])
    with Pipeline() as p:
        src = Source(sequences, rngs[1])
        dbl = Double(src, rngs[2])
        diff = Difference(src, dbl, rngs[3])
        sinks = {"src": Keep(src, rngs[4]), "dbl": Keep(dbl, rngs[5]), "diff": Keep(diff, rngs[6])}
        # Unguaranteed and slow (500 frames/s) so that it is overtaken.
        lossy = Keep(dbl, np.random.default_rng(seed), delay=0.002, gulp=1, guarantee=False)
        p.run()
    for name, _, nframe, width in sequences:
        x = values(0, nframe, width)
        for key, expected in (("src", x), ("dbl", 2 * x), ("diff", x)):
            assert np.array_equal(sinks[key].data(name, width), expected), (key, name)
        received = lossy.data(name, width)
        assert len(received) + lossy.skipped[name] == nframe
        for offset, data, intact in lossy.got[name]:
            assert not intact or np.array_equal(data, 2 * values(offset, len(data), width))
    assert sum(lossy.skipped.values()) > 0  # the slow unguaranteed sink was overtaken
