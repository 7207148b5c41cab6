"""Test helpers that build the same pipeline in either runtime: ours, or real Bifrost.

A runtime here is a namespace of ``Pipeline``, ``SourceBlock``, ``SinkBlock``, our blocks, and
``arr(span)`` (span data in our dtype convention). The test sources and sinks below are written
once against Bifrost's block API, which both runtimes share.
"""

from __future__ import annotations

import contextlib
import copy
import threading
from types import SimpleNamespace

import numpy as np

import xengine_block.runtime.pipeline as ours
from tests.conftest import bifrost_or_skip
from xengine_block import blocks

OURS = SimpleNamespace(name="ours", Pipeline=ours.Pipeline, SourceBlock=ours.SourceBlock,
                       SinkBlock=ours.SinkBlock, arr=lambda span: span.data,
                       **{n: getattr(blocks, n) for n in blocks.__all__})


def bifrost_runtime() -> SimpleNamespace:
    xb = bifrost_or_skip()
    bfp = xb.bf.pipeline
    return SimpleNamespace(name="bifrost", Pipeline=xb.Pipeline, SourceBlock=bfp.SourceBlock,
                           SinkBlock=bfp.SinkBlock,
                           arr=lambda span: xb.as_ours(span.data, str(span.dtype)),
                           **{n: getattr(xb, n) for n in blocks.__all__})


def array_source(rt: SimpleNamespace, outputs: list[tuple[dict, np.ndarray]], gulp: int):
    """A source block emitting ``outputs`` (header, frames) as one sequence per output ring,
    ``gulp`` frames at a time; ``done`` is set once every frame is written."""

    class ArraySource(rt.SourceBlock):
        def __init__(self) -> None:
            super().__init__(["arrays"], gulp_nframe=gulp)
            self.orings = [self.create_ring(space="system") for _ in outputs]
            self.done = threading.Event()
            self.nframe = len(outputs[0][1])

        def create_reader(self, name):
            return contextlib.nullcontext(iter(range(0, self.nframe, gulp)))

        def on_sequence(self, reader, name):
            return [copy.deepcopy(h) for h, _ in outputs]

        def on_data(self, reader, ospans):
            i = next(reader, None)
            if i is None:
                self.done.set()
                return [0] * len(outputs)
            n = min(gulp, self.nframe - i)
            for ospan, (_, a) in zip(ospans, outputs, strict=True):
                rt.arr(ospan)[:n] = a[i:i + n]
            return [n] * len(outputs)

    return ArraySource()


def collector(rt: SimpleNamespace, iring, **kwargs):
    """A sink keeping a copy of every frame it reads (``out``) and the header (``hdr``)."""

    class Collect(rt.SinkBlock):
        def on_sequence(self, iseq):
            self.hdr = iseq.header

        def on_data(self, ispan):
            self.out.extend(np.array(rt.arr(ispan)))

    sink = Collect(iring, **kwargs)
    sink.out = []
    return sink
