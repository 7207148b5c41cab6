"""Geometry: the published design's values, derived sizes and one error per impossible field."""

import json

import pytest

from xengine_block.geometry import PUBLISHED, Geometry, GeometryError, small_test_geometry


def test_published_sizes():
    g = PUBLISHED
    assert (g.nstream, g.nchan_pkt, g.nspectra_pkt) == (256, 9, 480)
    assert g.payload_bytes == 8640
    assert g.frame_bytes == 256 * 8640
    assert g.max_npacket == 136  # 136 * 480 * 2^15 <= 2^31 - 1 < 137 * 480 * 2^15
    assert 136 * 480 * 2**15 <= 2**31 - 1 < 137 * 480 * 2**15
    assert g.npu_block == 256 and g.npu_nblock == 1
    assert g.kernel_samples == 120 and g.npu_ncalls_per_packet == 4
    assert g.tile_a_bytes == 15360 and g.tile_b_bytes == 7680 and g.tile_acc_bytes == 16384
    assert g.tile_data_bytes == 62464
    assert g.nbaseline == 256 * 257 // 2
    assert g.output_shape == (9, 32896, 2)
    assert g.npu_in_bytes == 136 * 256 * 8640


def test_ci4_npu_sizes():
    """ci4 sample blocks are 64 bytes (one per complex sample): A and B buffers halve and the
    int8 A and B the tile unpacks them into take their place."""
    g = PUBLISHED.replace(sample_bits=4)
    assert g.sample_block_bytes == 64 and PUBLISHED.sample_block_bytes == 128
    assert g.tile_a_bytes == 7680 and g.tile_b_bytes == 3840 and g.tile_acc_bytes == 16384
    assert g.tile_unpack_bytes == 15360 + 7680 and PUBLISHED.tile_unpack_bytes == 0
    assert g.tile_data_bytes == 62464
    assert g.npu_in_bytes * 2 == PUBLISHED.npu_in_bytes


def test_larger_arrays_split_into_npu_blocks():
    g = PUBLISHED.replace(nstream=600)
    assert g.npu_nblock == 3
    assert g.npu_block_pairs == [(0, 0), (0, 1), (1, 1), (0, 2), (1, 2), (2, 2)]


def test_roundtrip_dict():
    g = small_test_geometry()
    assert Geometry.from_dict(g.to_dict()) == g


@pytest.mark.parametrize("changes, field, limit", [
    ({"nstream": 255}, "nstream", "even"),
    ({"nstream": 0}, "nstream", "positive"),
    ({"nchan": 10}, "nchan", "multiple of nchan_pkt"),
    ({"npacket": 137}, "npacket", "P <= 136"),
    ({"npacket": 0}, "npacket", "positive"),
    ({"tile_n": 7, "rows": 4, "tile_m": 7, "cols": 4}, "tile_n", "even"),
    ({"nchan_pkt": 10, "nchan": 10}, "payload", "8800"),
    ({"nfine": 4}, "nfine", "8"),
    ({"tile_t": 16}, "tile_t", "whole number of kernel calls"),
    ({"cols": 4}, "not square", "8*tile_m*cols"),
    ({"nchan": 2.5}, "nchan", "positive integer"),
])
def test_geometry_errors(changes, field, limit):
    with pytest.raises(GeometryError) as exc:
        PUBLISHED.replace(**changes)
    assert field in str(exc.value) and limit in str(exc.value)


# ------------------------------------------------------------------------------ geometry
def test_geometry_ci4_sizes_and_int32_bound():
    g = Geometry(sample_bits=4)
    assert g.payload_bytes == 4320 and Geometry().payload_bytes == 8640
    assert g.frame_shape == (256, 9, 60, 8) and g.frame_bytes == 256 * 4320
    # |x| <= 8: one term's re or im is at most 2 * 8 * 8 = 128
    assert g.max_npacket == (2**31 - 1) // 128 // 480 == 34952
    assert Geometry(sample_bits=4, npacket=34952).npacket == 34952
    with pytest.raises(GeometryError, match="P <= 34952"):
        Geometry(sample_bits=4, npacket=34953)
    assert Geometry().max_npacket == 136  # ci8 unchanged


@pytest.mark.parametrize("field, value", [("sample_bits", 6), ("sample_bits", "4"),
                                          ("sample_bits", True), ("sample_bits", 8.0),
                                          ("nibble_order", "high"), ("nibble_order", 1)])
def test_geometry_rejects_bad_sample_fields_naming_them(field, value):
    with pytest.raises(GeometryError, match=f"^{field} must be"):
        Geometry(**{field: value})


def test_geometry_dict_round_trip_and_old_dicts_are_ci8():
    g = Geometry(sample_bits=4, nibble_order="re_low", nstream=8)
    assert Geometry.from_dict(json.loads(json.dumps(g.to_dict()))) == g
    old = {k: v for k, v in Geometry().to_dict().items()
           if k not in ("sample_bits", "nibble_order")}
    assert Geometry.from_dict(old).sample_bits == 8


def test_the_old_name_of_the_published_design_still_works_with_a_warning():
    import xengine_block.geometry as geometry

    with pytest.warns(DeprecationWarning, match="geometry.SEED is PUBLISHED"):
        assert geometry.SEED is PUBLISHED
    with pytest.raises(AttributeError, match="no attribute 'NOPE'"):
        geometry.NOPE  # noqa: B018
