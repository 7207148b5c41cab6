"""Natural samples <-> packet/frame layout, both directions, against hand-made indexing."""

import numpy as np

from xengine_block.frames import (
    frames_to_natural,
    natural_to_frames,
    packet_payload,
    payload_offset,
)
from xengine_block.geometry import SEED, small_test_geometry


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
    g = SEED.replace(nchan=18)
    x = rng.integers(-128, 128, size=(g.nstream, g.nchan, g.nspectra_pkt, 2), dtype=np.int8)
    frame = natural_to_frames(x, g)[0]
    payload = packet_payload(frame, g, stream=5, group=1)
    assert payload.size == g.payload_bytes == 8640
    expect = np.stack([x[5, 9:18, :, 0].reshape(9, 60, 8), x[5, 9:18, :, 1].reshape(9, 60, 8)],
                      axis=2)  # chan coarse reim fine
    assert np.array_equal(payload, expect.reshape(-1))
    assert np.array_equal(frame.reshape(-1)[payload_offset(g, 5, 1):][:g.payload_bytes], payload)
