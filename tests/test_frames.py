"""Natural samples <-> packet/frame layout, both directions, against hand-made indexing."""

import numpy as np
import pytest

from tests.helpers.ci4 import ORDERS, decode, random_ci4_natural
from xengine_block.frames import (
    frames_to_natural,
    natural_to_frames,
    pack_ci4,
    packet_payload,
    payload_offset,
    unpack_ci4,
    unpack_frames,
)
from xengine_block.geometry import PUBLISHED, small_test_geometry


def test_layout_matches_definition(rng):
    g = small_test_geometry(nchan=4)
    x = rng.integers(-128, 128, size=(g.nstream, g.nchan, 2 * g.nspectra_pkt, 2), dtype=np.int8)
    f = natural_to_frames(x, g)
    assert f.shape == (2, *g.frame_shape)
    # element by element from the layout's definition: [stream][chan][coarse][reim][fine]
    for _ in range(200):
        s, c, n, ri = (rng.integers(d) for d in (g.nstream, g.nchan, 2 * g.nspectra_pkt, 2))
        frame, within = divmod(n, g.nspectra_pkt)
        coarse, fine = divmod(within, g.nfine)
        assert f[frame, s, c, coarse, ri, fine] == x[s, c, n, ri]
    assert np.array_equal(frames_to_natural(f, g), x)


def test_packet_payload_is_the_stream_channel_group_bytes(rng):
    g = PUBLISHED.replace(nchan=18)
    x = rng.integers(-128, 128, size=(g.nstream, g.nchan, g.nspectra_pkt, 2), dtype=np.int8)
    frame = natural_to_frames(x, g)[0]
    payload = packet_payload(frame, g, stream=5, group=1)
    assert payload.size == g.payload_bytes == 8640
    expect = np.stack([x[5, 9:18, :, 0].reshape(9, 60, 8), x[5, 9:18, :, 1].reshape(9, 60, 8)],
                      axis=2)  # chan coarse reim fine
    assert np.array_equal(payload, expect.reshape(-1))
    assert np.array_equal(frame.reshape(-1)[payload_offset(g, 5, 1):][:g.payload_bytes], payload)


# ------------------------------------------------------------------------------ packing
@pytest.mark.parametrize("order", ORDERS)
def test_pack_and_unpack_every_value_pair(order):
    re, im = np.meshgrid(np.arange(-8, 8), np.arange(-8, 8), indexing="ij")
    x = np.stack([re, im], axis=-1).reshape(-1, 2).astype(np.int8)
    b = pack_ci4(x, order).view(np.uint8)
    high, low = (re, im) if order == "re_high" else (im, re)
    expected = ((high.ravel() & 15) << 4) | (low.ravel() & 15)
    assert np.array_equal(b, expected)
    assert len(set(b.tolist())) == 256  # a bijection
    assert np.array_equal(unpack_ci4(b, order), x)
    assert [decode(int(v), order) for v in b] == [tuple(p) for p in x.tolist()]


def test_pack_edges_and_range():
    edges = np.array([[-8, 7], [7, -8], [-8, -8], [7, 7], [-1, 0]], np.int8)
    assert pack_ci4(edges, "re_high").view(np.uint8).tolist() == [0x87, 0x78, 0x88, 0x77, 0xF0]
    assert pack_ci4(edges, "re_low").view(np.uint8).tolist() == [0x78, 0x87, 0x88, 0x77, 0x0F]
    with pytest.raises(ValueError, match="-8..7"):
        pack_ci4(np.array([[8, 0]]))
    with pytest.raises(ValueError, match="-8..7"):
        pack_ci4(np.array([[0, -9]]))


@pytest.mark.parametrize("order", ORDERS)
def test_frame_layout_is_chan_coarse_fine_bytes(order):
    g = small_test_geometry(sample_bits=4, nibble_order=order, nstream=4)
    x = random_ci4_natural(g, 2, seed=1)
    frames = natural_to_frames(x, g)
    assert frames.shape == (2, 4, 2, 60, 8) and frames.dtype == np.int8
    u = frames.view(np.uint8)
    for f, s, c, k, j in [(0, 0, 0, 0, 0), (1, 3, 1, 59, 7), (1, 2, 0, 17, 3)]:
        n = f * g.nspectra_pkt + k * g.nfine + j
        assert decode(int(u[f, s, c, k, j]), order) == tuple(x[s, c, n].tolist())
    assert np.array_equal(frames_to_natural(frames, g), x)
    g8 = g.replace(sample_bits=8)
    expected = natural_to_frames(x, g8)
    assert np.array_equal(unpack_frames(frames, g), expected)
    strided = np.zeros((*expected.shape[:-1], 16), np.int8)[..., ::2]  # not contiguous
    assert np.array_equal(unpack_frames(frames, g, out=strided), expected)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("nrow", [1, 2, 5])
def test_unpack_rows_pass_equals_numpy(order, nrow):
    """The C pass behind unpack_frames (rows of 8 ci4 bytes -> 8 real, 8 imaginary int8) equals
    numpy's unpack_ci4 for every byte value, an odd row count (the pass's one-row tail)
    included; mismatched buffers are refused."""
    from xengine_block.native_extension import native

    b = (np.arange(nrow * 8) * 37 % 256).astype(np.uint8).reshape(nrow, 8)
    b[0] = [0x00, 0x7F, 0x80, 0xFF, 0x08, 0xF7, 0x88, 0x77]
    want = np.moveaxis(unpack_ci4(b, order), -1, 1)  # [nrow, (re, im), 8]
    out = np.full((nrow, 2, 8), 99, np.int8)
    native().unpack_ci4_rows(b, out, order)
    assert np.array_equal(out, want)
    with pytest.raises(ValueError, match="ci4 rows"):
        native().unpack_ci4_rows(b, out[:-1], order)
