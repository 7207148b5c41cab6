"""The NPU backend tests' reference: the exact correlation of frames, from the int64 oracle."""

from __future__ import annotations

from xengine_block.frames import frames_to_natural
from xengine_block.reference import reference_triangle


def reference(g, frames):
    return reference_triangle(frames_to_natural(frames, g))
