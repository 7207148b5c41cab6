"""``xengine_block.bifrost.correlate``: Bifrost's ``bifrost.blocks.correlate`` on CPU.

Bifrost's own ``test_correlate`` (test/test_pipeline.py of Bifrost 0.10) is ported here with
only what needs a GPU replaced (its ``copy(data, space='cuda')`` is dropped, and its CUDA-only
``convert_visibilities(data, 'matrix')`` is a CPU block doing the same Hermitian fill); its
checks are kept. Then: the output header equals what Bifrost's own ``CorrelateBlock.on_sequence``
makes of the same input header; values exact against the int64 reference (every baseline, both
conjugations: a flipped one fails); ci32 and ci4; Bifrost's gulp rule and error; bad input
stopping the pipeline with one line naming the header key; the TCC order from an LWA capture.
"""

from __future__ import annotations

import copy
import datetime
import types
import unittest
from copy import deepcopy

import numpy as np
import pytest

from tests.conftest import bifrost_or_skip
from tests.helpers.bifrost_lwa import ci4_samples, disk_chips_capture
from tests.helpers.gold import bifrost_gold, tcc_gold
from tests.helpers.runtimes import bifrost_runtime
from xengine_block.reference import reference_triangle
from xengine_block.visibility_orders import triangle_to_bifrost_matrix

xb = bifrost_or_skip()
BF = bifrost_runtime()
bf = xb.bf
from bifrost.blocks.correlate import CorrelateBlock as BifrostCorrelateBlock  # noqa: E402
from bifrost.pipeline import SinkBlock, SourceBlock, TransformBlock  # noqa: E402

from xengine_block.bifrost import correlate  # noqa: E402 - the one import that changes

pytestmark = pytest.mark.timeout(120)
RTOL = 1e-4
ATOL = 1e-5


# ---------------------------------------------------- Bifrost's test_correlate, ported
class DictReader:
    def __init__(self, dict_):
        self.dict = dict_

    def __enter__(self):
        return self.dict

    def __exit__(self, type, value, tb):
        pass


class CorrelateTestInputBlock(SourceBlock):
    """Bifrost test/test_pipeline.py, unchanged."""

    def create_reader(self, idict):
        return DictReader(idict)

    def on_sequence(self, idict, _):
        ohdr = {
            '_tensor': {
                'dtype': 'ci8',
                'shape': [-1, idict['nchan'], idict['nstation'], idict['npol']],
                'labels': ['time', 'freq', 'station', 'pol'],
                'scales': [(0, 1. / idict['chan_bw']), (idict['cfreq'], idict['chan_bw']),
                           None, None],
                'units': ['s', 'Hz', None, ('X', 'Y')]
            }
        }
        self.nframe = idict['ntime']
        return [ohdr]

    def on_data(self, reader, ospans):
        ospan = ospans[0]
        odata = ospan.data
        i = np.arange(odata.shape[-2] * odata.shape[-1] * 2) % 255 - 127
        odata.view(np.int8)[...] = i.reshape((odata.shape[-2], odata.shape[-1] * 2))
        nframe = min(ospan.nframe, self.nframe)
        self.nframe -= nframe
        return [nframe]


class CallbackBlock(SinkBlock):
    """Bifrost test/test_pipeline.py, unchanged."""

    def __init__(self, iring, seq_callback, data_callback, data_ref=None, *args, **kwargs):
        super().__init__(iring, *args, **kwargs)
        self.seq_callback = seq_callback
        self.data_callback = data_callback
        self.data_ref = data_ref

    def on_sequence(self, iseq):
        if self.seq_callback is not None:
            self.seq_callback(iseq)

    def on_data(self, ispan):
        if self.data_callback is not None:
            self.data_callback(ispan)
        if self.data_ref is not None:
            self.data_ref['idata'] = ispan.data.copy()


class ConvertVisibilitiesMatrixBlock(TransformBlock):
    """What ``bifrost.blocks.convert_visibilities(data, 'matrix')`` does from a 'lower' matrix
    (its kernel is CUDA only): the upper triangle is the conjugate of the lower, per 2 x 2 pol
    block, ``matrix_fill_mode`` 'hermitian'; numpy here."""

    def on_sequence(self, iseq):
        ohdr = deepcopy(iseq.header)
        ohdr['matrix_fill_mode'] = 'hermitian'
        return ohdr

    def on_data(self, ispan, ospan):
        idata = np.asarray(ispan.data)
        n, c, s = idata.shape[0], idata.shape[1], idata.shape[2] * idata.shape[3]
        m = idata.reshape(n, c, s, s).copy()
        lower = np.tril(np.ones((s, s), bool))
        m = np.where(lower, m, np.conj(np.swapaxes(m, -1, -2)))
        np.asarray(ospan.data)[...] = m.reshape(idata.shape)


class PipelineTest(unittest.TestCase):
    def test_correlate(self):
        gulp_nframe = 100
        nreduce_time = 1000
        metadata = {
            'ntime': 10000,
            'nchan': 128,
            'nstation': 60,
            'npol': 2,
            'chan_bw': 25e3,
            'cfreq': 50e6
        }

        def check_sequence(seq):
            tensor = seq.header['_tensor']
            self.assertEqual(seq.header['gulp_nframe'], 1)
            self.assertEqual(tensor['shape'], [-1, metadata['nchan'], metadata['nstation'],
                                               metadata['npol'], metadata['nstation'],
                                               metadata['npol']])
            self.assertEqual(tensor['dtype'], 'cf32')
            self.assertEqual(tensor['labels'], ['time', 'freq', 'station_i', 'pol_i',
                                                'station_j', 'pol_j'])
            self.assertEqual(tensor['scales'], [[0, nreduce_time / metadata['chan_bw']],
                                                [metadata['cfreq'], metadata['chan_bw']],
                                                None, None, None, None])
            pol_units = ['X', 'Y']
            self.assertEqual(tensor['units'], ['s', 'Hz', None, pol_units, None, pol_units])

        def check_data(ispan):
            pass
        with xb.Pipeline() as pipeline:  # ours: a failing block fails the test
            data = CorrelateTestInputBlock([metadata], gulp_nframe=gulp_nframe)
            data = correlate(data, nreduce_time)
            ref1 = {}
            CallbackBlock(data, check_sequence, check_data, data_ref=ref1)
            data = ConvertVisibilitiesMatrixBlock(data)
            ref2 = {}
            CallbackBlock(data, check_sequence, check_data, data_ref=ref2)
            pipeline.run()

        # Now we check the results
        i = np.arange(metadata['nstation'] * metadata['npol'] * 2) % 255 - 127
        input_data = np.empty((metadata['nchan'], metadata['nstation'] * metadata['npol']),
                              dtype=np.complex64)
        input_data[...].real = i[0::2]
        input_data[...].imag = i[1::2]
        expected_data = nreduce_time * input_data[:, :, None].conj() * input_data[:, None, :]
        expected_data_shaped = expected_data.reshape(
            (1, metadata['nchan'],
             metadata['nstation'], metadata['npol'],
             metadata['nstation'], metadata['npol']))

        # Check full matrix output
        idata = ref2['idata']
        idata = idata.copy('system')
        np.testing.assert_allclose(idata, expected_data_shaped, RTOL, ATOL)

        # Check lower-tri matrix output
        triu = np.triu_indices(metadata['nstation'] * metadata['npol'], 1)
        expected_data[..., triu[0], triu[1]] = 0
        expected_data = expected_data.reshape(
            (1, metadata['nchan'],
             metadata['nstation'], metadata['npol'],
             metadata['nstation'], metadata['npol']))
        idata = ref1['idata']
        idata = idata.copy('system')
        idata = idata.reshape(1, metadata['nchan'],
                              metadata['nstation'] * metadata['npol'],
                              metadata['nstation'] * metadata['npol'])
        idata = np.array(idata)
        idata[..., triu[0], triu[1]] = 0
        idata = idata.reshape(
            (1, metadata['nchan'],
             metadata['nstation'], metadata['npol'],
             metadata['nstation'], metadata['npol']))
        np.testing.assert_allclose(idata, expected_data, RTOL, ATOL)


# ------------------------------------------------------------------ beyond Bifrost's test
def tensor_source(x: np.ndarray, gulp: int, *, dtype: str = "ci8", time_tag: int = 0,
                  t0: float = 1.7e9, cfreq: float = 60e6, chan_bw: float = 24e3, npol: int = 2):
    """A Bifrost source of natural samples ``x[stream, chan, time, reim]`` as the tensor
    ``['time', 'freq', 'station', 'pol']`` (ci8 pairs, or ci4 bytes real-high)."""
    nstream, nchan, ntime, _ = x.shape
    shape = [nchan, nstream // npol, npol]
    frames = np.ascontiguousarray(x.transpose(2, 1, 0, 3))  # [time, chan, stream, reim]
    if dtype == "ci4":
        f8 = frames.astype(np.uint8)
        frames = ((f8[..., 0] & 0xF) << 4) | (f8[..., 1] & 0xF)

    class Source(SourceBlock):
        def create_reader(self, name):
            return DictReader(iter(range(0, ntime, gulp)))

        def on_sequence(self, reader, name):
            return [{"name": name, "time_tag": time_tag,
                     "_tensor": {"dtype": dtype, "shape": [-1, *shape],
                                 "labels": ["time", "freq", "station", "pol"],
                                 "scales": [[t0, 1 / chan_bw], [cfreq, chan_bw], None, None],
                                 "units": ["s", "Hz", None, None]}}]

        def on_data(self, reader, ospans):
            t = next(reader, None)
            if t is None:
                return [0]
            n = min(gulp, ntime - t)
            out = ospans[0].data
            if dtype == "ci4":
                out["re_im"][:n] = frames[t:t + n].reshape(n, *shape)
            else:
                out["re"][:n] = frames[t:t + n, ..., 0].reshape(n, *shape)
                out["im"][:n] = frames[t:t + n, ..., 1].reshape(n, *shape)
            return [n]

    return Source(["voltages"], gulp_nframe=gulp)


class Keep(SinkBlock):
    def on_sequence(self, iseq):
        self.hdr, self.time_tag, self.out = iseq.header, iseq.time_tag, []

    def on_data(self, ispan):
        self.out.append(np.array(BF.arr(ispan)))


def run(block_fn, source) -> Keep:
    """Run ``source() -> block_fn -> Keep`` (blocks join the pipeline they are made in)."""
    with xb.Pipeline() as p:
        sink = Keep(block_fn(source() if callable(source) else source))
        p.run()
    sink.frames = np.concatenate(sink.out) if sink.out else np.empty(0)
    return sink


def test_output_header_is_what_bifrosts_own_correlate_makes():
    x = ci4_samples(8, 3, 60, seed=1)
    sink = run(lambda s: correlate(s, 20, backend="cpu"), lambda: tensor_source(x, 10, time_tag=7))
    ihdr = {"name": "voltages", "time_tag": 7, "gulp_nframe": 10,
            "_tensor": {"dtype": "ci8", "shape": [-1, 3, 4, 2],
                        "labels": ["time", "freq", "station", "pol"],
                        "scales": [[1.7e9, 1 / 24e3], [60e6, 24e3], None, None],
                        "units": ["s", "Hz", None, None]}}
    # Bifrost's CorrelateBlock.on_sequence on the same header (its __init__ needs CUDA)
    me = types.SimpleNamespace(nframe_per_integration=20, gulp_nframe=None)
    want = BifrostCorrelateBlock.on_sequence(me, types.SimpleNamespace(header=copy.deepcopy(
        ihdr)))
    assert sink.hdr["_tensor"] == want["_tensor"]
    assert sink.hdr["matrix_fill_mode"] == want["matrix_fill_mode"] == "lower"
    # every key of Bifrost's header, same value (gulp_nframe: its pipeline then writes the
    # block's output frames per gulp, 1, over on_sequence's min(10, 20); ours too)
    assert {k: sink.hdr[k] for k in want if k != "gulp_nframe"} == {
        k: v for k, v in want.items() if k != "gulp_nframe"}
    assert sink.hdr["gulp_nframe"] == 1 and sink.time_tag == 7
    assert sink.frames.shape == (3, 3, 4, 2, 4, 2) and sink.frames.dtype == np.complex64


@pytest.mark.parametrize("dtype, bits, npol, gulp", [
    ("cf32", "ci8", 2, None), ("ci32", "ci8", 2, 48), ("ci32", "ci4", 2, 24),
    ("ci32", "ci8", 1, 12)])
def test_values_exact_against_the_reference_every_baseline(dtype, bits, npol, gulp):
    n, nint, nstream = 48, 3, 10
    x = ci4_samples(nstream, 4, n * nint, seed=2) if bits == "ci4" else \
        np.random.default_rng(3).integers(-128, 128, (nstream, 4, n * nint, 2), np.int8)
    def src():
        return tensor_source(x, 16, dtype=bits, npol=npol, time_tag=5 if dtype == "cf32" else 0)
    kw = {} if gulp is None else {"gulp_nframe": gulp}
    sink = run(lambda s: correlate(s, n, dtype=dtype, backend="cpu", **kw), src)
    got = sink.frames
    nst = nstream // npol
    assert sink.hdr["_tensor"]["shape"] == [-1, 4, nst, npol, nst, npol]
    if dtype == "ci32":
        assert got.dtype == np.int32
        got = got[..., 0].astype(np.float64) + 1j * got[..., 1]
    got = got.reshape(nint, 4, nstream, nstream)
    i, j = np.tril_indices(nstream)
    for k in range(nint):  # integrations from the sequence's start, as Bifrost's
        want = bifrost_gold(x[:, :, k * n:(k + 1) * n])  # sum conj(x_i) x_j
        assert np.array_equal(got[k][:, i, j], want[:, i, j])
        assert not np.array_equal(got[k][:, i, j], want[:, i, j].conj())
        tri = reference_triangle(x[:, :, k * n:(k + 1) * n])  # independent int64 reference
        mat = np.zeros((4, nstream, nstream), np.complex128)
        assert np.array_equal(triangle_to_bifrost_matrix(tri, mat)[:, i, j], got[k][:, i, j])


def test_bifrosts_gulp_rule_and_its_error():
    def src():
        return tensor_source(ci4_samples(4, 2, 96), 16)
    with pytest.raises(xb.PipelineError, match=r"gulp_nframe \(7\) does not divide "
                                               r"nframe_per_integration \(48\)"):
        run(lambda s: correlate(s, 48, backend="cpu", gulp_nframe=7), src)
    with pytest.raises(xb.PipelineError, match=r"gulp_nframe \(32\) does not divide"):
        # the input's gulp, 32, does not divide 48
        run(lambda s: correlate(s, 48, backend="cpu"),
            lambda: tensor_source(ci4_samples(4, 2, 96), 32))


@pytest.mark.parametrize("change, match", [
    ({"dtype": "cf32"}, r"header _tensor\.dtype = 'cf32': ci32 output is correlated exactly "
                        r"from integer samples"),
    ({"labels": ["time", "freq", "pol", "station"]}, r"header _tensor\.labels = \['time', "
                                                    r"'freq', 'pol', 'station'\]"),
    ({"shape": [-1, 3, 4, 3]}, r"pol axis of 3"),
    ({"shape": [-1, 3, 5, 1]}, r"header _tensor\.shape = \[-1, 3, 5, 1\]: 5 stations of one "
                               r"pol .* must be even"),
])
def test_bad_tensors_stop_the_pipeline_naming_the_key(change, match):
    tensor = {"dtype": "ci8", "shape": [-1, 3, 4, 2], "labels": ["time", "freq", "station", "pol"],
              "scales": [[0, 1e-3], [1e6, 1e3], None, None], "units": ["s", "Hz", None, None]}
    tensor.update(change)

    class Source(SourceBlock):
        def create_reader(self, name):
            return DictReader(iter([1]))

        def on_sequence(self, reader, name):
            return [{"name": name, "time_tag": 0, "_tensor": tensor}]

        def on_data(self, reader, ospans):
            return [0] if next(reader, None) is None else [1]

    with pytest.raises(xb.PipelineError, match=match):
        run(lambda s: correlate(s, 4, dtype="ci32", backend="cpu"), lambda: Source(["bad"], 1))


def test_tcc_order_from_an_lwa_capture_matches_the_tcc_gold_model(tmp_path):
    """LWA-style: Bifrost's DiskReader captures chips packets (ADP callback), we correlate in
    the TCC wrapper's order, ci32, with the keys NDP's packetizer reads; integrations on
    absolute spectrum counts (the capture starts mid-integration: the first is partial)."""
    utc = datetime.datetime(2024, 3, 1, 12, 0, 0)
    n, seq0 = 250, 350  # 250 spectra = 10 ms at 25 kHz: navg 1
    x = ci4_samples(64, 4, 750, seed=6)
    ring, _ = disk_chips_capture(x, tmp_path / "c.pkt", seq0=seq0, chan0=800,
                                 buffer_ntime=50, utc_start=utc)
    sink = run(lambda s: correlate(s, n, dtype="ci32", order="tcc", backend="cpu"), ring)
    h = sink.hdr
    assert (h["nchan"], h["nstand"], h["npol"], h["nbit"], h["complex"]) == (4, 32, 2, 32, True)
    assert (h["navg"], h["seq0"], h["acc_len"], h["visibility_order"]) == (1, 250, n, "tcc")
    unix = int((utc - datetime.datetime(1970, 1, 1)).total_seconds())
    assert h["start_tag"] == unix * 196_000_000 + 250 * 7840 and sink.time_tag == 250
    assert sink.hdr["_tensor"]["shape"] == [-1, 4, 32 * 33 // 2 * 4]
    got = sink.frames[..., 0].astype(np.float64) + 1j * sink.frames[..., 1]
    assert len(got) >= 3
    for k in range(len(got)):  # integration k: spectra [250 + k n, 250 + (k+1) n)
        lo, hi = max(250 + k * n - seq0, 0), min(250 + (k + 1) * n - seq0, x.shape[2])
        want = tcc_gold(x[:, :, lo:hi], 2)
        assert np.array_equal(got[k], want)
        assert not np.array_equal(got[k], want.conj())


@pytest.mark.parametrize("order, dtype", [("matrix", "ci32"), ("matrix", "cf32"),
                                          ("tcc", "ci32")])
def test_uvh5_writer_takes_the_bifrost_and_tcc_orders(order, dtype, tmp_path):
    """correlate's outputs into our UVH5 writer: the same file content as our X-engine's own
    triangle gives (values, flags, nsamples, times, frequencies, antennas)."""
    pyuvdata = pytest.importorskip("pyuvdata", reason="pyuvdata (test extra) reads UVH5")
    from xengine_block.array import default_array

    utc = datetime.datetime(2024, 3, 1, 12, 0, 0)
    n = 32
    x = ci4_samples(32, 4, 3 * n, seed=8)
    ring, _ = disk_chips_capture(x, tmp_path / "c.pkt", seq0=400 * n, chan0=900,
                                 buffer_ntime=n, utc_start=utc)
    array = default_array(16)
    with xb.Pipeline() as p:
        ours = xb.UVH5WriterBlock(xb.XEngineBlock(ring, backend="cpu", integration_spectra=n,
                                                  array=array), directory=tmp_path / "ours")
        p.run()
    with xb.Pipeline() as p:
        theirs = xb.UVH5WriterBlock(correlate(ring, n, dtype=dtype, order=order, backend="cpu",
                                              array=array), directory=tmp_path / order)
        p.run()
    a, b = (pyuvdata.UVData.from_file(w.files[0]) for w in (ours, theirs))
    assert a.Ntimes == b.Ntimes == 3
    for attr in ("data_array", "flag_array", "nsample_array", "time_array", "freq_array",
                 "ant_1_array", "ant_2_array", "uvw_array"):
        assert np.array_equal(getattr(a, attr), getattr(b, attr)), attr


@pytest.mark.parametrize("order", ["matrix", "tcc"])
def test_integrate_block_takes_the_bifrost_and_tcc_orders(order, tmp_path):
    """correlate's integer outputs (no valid counts) through our IntegrateBlock: the dumps,
    written as UVH5, equal those of our X-engine's triangle integrated the same way; float
    (cf32) visibilities are refused, their sums would not be exact."""
    pyuvdata = pytest.importorskip("pyuvdata", reason="pyuvdata (test extra) reads UVH5")
    from xengine_block.array import default_array
    from xengine_block.runtime.pipeline import PipelineError

    utc = datetime.datetime(2024, 3, 1, 12, 0, 0)
    n = 32
    x = ci4_samples(32, 4, 6 * n, seed=9)
    ring, _ = disk_chips_capture(x, tmp_path / "c.pkt", seq0=600 * n, chan0=900,
                                 buffer_ntime=n, utc_start=utc)
    array = default_array(16)
    with xb.Pipeline() as p:
        ours = xb.UVH5WriterBlock(xb.IntegrateBlock(xb.XEngineBlock(
            ring, backend="cpu", integration_spectra=n, array=array), ninteg=3),
            directory=tmp_path / "ours")
        p.run()
    with xb.Pipeline() as p:
        theirs = xb.UVH5WriterBlock(xb.IntegrateBlock(correlate(
            ring, n, dtype="ci32", order=order, backend="cpu", array=array), ninteg=3),
            directory=tmp_path / order)
        p.run()
    a, b = (pyuvdata.UVData.from_file(w.files[0]) for w in (ours, theirs))
    assert a.Ntimes == b.Ntimes == 2
    for attr in ("data_array", "flag_array", "nsample_array", "time_array", "freq_array"):
        assert np.array_equal(getattr(a, attr), getattr(b, attr)), attr
    with pytest.raises(PipelineError, match="cf32.*cannot be integrated exactly"):
        with xb.Pipeline() as p:
            xb.IntegrateBlock(correlate(ring, n, dtype="cf32", order=order, backend="cpu",
                                        array=array), ninteg=3)
            p.run()
