"""PSRDADA, VDIF and MWAX subfiles: baseband's Effelsberg DADA and ARO/CHIME VDIF samples equal
baseband's own decode correlated in int64; a MeerKAT FBFUSE-style multi-antenna DADA file
(ORDER TAFTP) and MWAX subfiles written here (from mpikat's header template and mwax_udp2sub's
layout) reprocess exactly, names, frequencies and times right; damage is counted."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.mwax import NTIME, TILES, mwax_blocks
from tests.helpers.recordings import check_file, write_array
from tests.helpers.samples import as_x, one_antenna_array
from xengine_block.readers import detect_format, open_recording
from xengine_block.readers.mwax import DELAY_ENTRY, write_subfile
from xengine_block.reprocess.jobs import ReprocessOptions, reprocess

baseband = pytest.importorskip("baseband", reason="baseband (test extra) has the sample files")
pyuvdata = pytest.importorskip("pyuvdata", reason="pyuvdata (test extra) reads the outputs")
from baseband import data as bdata  # noqa: E402


def jd(unix):
    return np.asarray(unix) / 86400 + 2440587.5


# ---------------------------------------------------------------------------- PSRDADA
def test_effelsberg_dada_sample(tmp_path):
    from baseband import dada

    assert detect_format(bdata.SAMPLE_DADA) == "dada"
    with dada.open(bdata.SAMPLE_DADA, "rs") as fh:
        z = fh.read()[:, :, None]  # (time, pol) -> (time, pol, chan=1)
        start = fh.start_time.unix
    arr = one_antenna_array(tmp_path, "Effelsberg", "Effelsberg")
    (r,) = reprocess([bdata.SAMPLE_DADA], tmp_path / "out", ReprocessOptions(
        array=str(arr), integration_spectra=5000), progress=None)
    assert r.ok, r.error
    assert r.summary["dumps"] == 3 and r.summary["dropped_spectra"] == 1000
    check_file(r.task.output, as_x(z), [(k * 5000, (k + 1) * 5000) for k in range(3)],
               {"Effelsberg": 0}, ["Effelsberg"], freqs=np.array([320e6]))
    uv = pyuvdata.UVData.from_file(r.task.output)
    t = start + (np.arange(3) * 5000 + 2500) / 16e6  # UTC_START + OBS_OFFSET, TSAMP 0.0625 us
    assert np.allclose(np.unique(uv.time_array), jd(t), rtol=0, atol=1e-9)


def dada_header(**keys) -> bytes:
    lines = [f"{k} {v}" for k, v in {"HEADER": "DADA", "HDR_VERSION": "1.0", "HDR_SIZE": 4096,
                                      **keys}.items()]
    return ("\n".join(lines) + "\n").encode().ljust(4096, b"\0")


FBFUSE = dict(TELESCOPE="MeerKAT", INSTRUMENT="CBF-Feng", FREQ=1284.0, BW=-8.359375,
              TSAMP=478.4688995215311, NBIT=8, NDIM=2, NPOL=2, NCHAN=8, NANTS=3,
              ANTS="m001,m007,m002", ORDER="TAFTP", UTC_START="2024-05-01-10:00:00",
              SOURCE="J0437-4715")


def test_fbfuse_taftp_sequence_with_gap(tmp_path):
    """Two files of one observation ([heap][ant][chan][256][pol][re,im]), the second one heap
    after a missing one: reprocessed across both, the gap flagged, names from ANTS, BW < 0."""
    rng = np.random.default_rng(7)
    nheap = 5
    x = rng.integers(-128, 128, (3, 8, nheap * 256, 2, 2), dtype=np.int8)  # [A, F, T, P, 2]
    heaps = [x[:, :, h * 256:(h + 1) * 256] for h in range(nheap)]
    heap_bytes = heaps[0].nbytes
    (tmp_path / "obs_0.dada").write_bytes(dada_header(**FBFUSE, OBS_OFFSET=0)
                                          + b"".join(h.tobytes() for h in heaps[:2]))
    (tmp_path / "obs_1.dada").write_bytes(dada_header(**FBFUSE, OBS_OFFSET=3 * heap_bytes)
                                          + b"".join(h.tobytes() for h in heaps[2:]))
    files = [tmp_path / "obs_1.dada", tmp_path / "obs_0.dada"]
    rec = open_recording(sorted(files), "dada")
    assert rec.meta.antenna_names == ("m001", "m007", "m002") and rec.meta.chan_bw_hz < 0
    assert rec.damage.by_file == {"obs_1.dada": {"gap_blocks": 1, "gap_spectra": 256}}
    arr = tmp_path / "mk.toml"
    names = ["m000", "m001", "m002", "m007"]
    write_array(arr, names, numbers=[0, 1, 2, 7], telescope="MeerKAT")
    res = reprocess(files, tmp_path / "out", ReprocessOptions(array=str(arr),
                                                              integration_spectra=256),
                    progress=None)
    # the damage is obs_1's (the gap before its data): obs_0's integrations are intact
    ok = {r.task.input.name: r for r in res}
    assert ok["obs_0.dada"].ok and not ok["obs_1.dada"].ok
    assert "damaged recording: obs_1.dada: gap_blocks=1,gap_spectra=256" in ok["obs_1.dada"].error
    res = reprocess(files, tmp_path / "out", ReprocessOptions(
        array=str(arr), integration_spectra=256, allow_damaged=True), progress=None)
    assert all(r.ok for r in res), [r.error for r in res]
    out = {r.task.output.name: r.task.output for r in res}
    numbers = {"m001": 1, "m007": 7, "m002": 2}
    bw = -8.359375e6 / 8
    freqs = 1284e6 + 8.359375e6 / 2 + bw / 2 + bw * np.arange(8)
    # LSB: the file holds the conjugate of the recorded samples' correlation
    check_file(out["obs_0.uvh5"], x, [(0, 256), (256, 512)], numbers,
               list(rec.meta.antenna_names), freqs=freqs, conj=True)
    uv = pyuvdata.UVData.from_file(out["obs_1.uvh5"])
    assert uv.Ntimes == 4  # the missing heap is a flagged dump
    assert np.all(uv.nsample_array.reshape(4, uv.Nbls, -1)[0] == 0)
    y = np.concatenate([np.zeros_like(heaps[0]), *heaps[2:]], axis=2)  # heap 2 is missing
    check_file(out["obs_1.uvh5"], y, [(k * 256, (k + 1) * 256) for k in range(4)], numbers,
               list(rec.meta.antenna_names), conj=True)


def test_4bit_dada_real_in_the_low_nibble(tmp_path):
    """NBIT 4: a byte per complex sample, two's complement, real low (dspsr's
    GenericFourBitUnpacker); TAFTP with three antennas and TFP with one, full range -8..7,
    exact (read real-high, the same bytes fail it)."""
    rng = np.random.default_rng(11)
    x = rng.integers(-8, 8, (3, 8, 2 * 256, 2, 2))  # [A, F, T, P, re/im]
    packed = ((x[..., 0] & 0xF) | ((x[..., 1] & 0xF) << 4)).astype(np.uint8)  # [A, F, T, P]
    heaps = packed.reshape(3, 8, 2, 256, 2).transpose(2, 0, 1, 3, 4)  # [heap, A, F, 256, P]
    (tmp_path / "four.dada").write_bytes(dada_header(**dict(FBFUSE, NBIT=4), OBS_OFFSET=0)
                                         + heaps.tobytes())
    one = dict(FREQ=400.0, BW=8.0, TSAMP=1.0, NBIT=4, NDIM=2, NPOL=2, NCHAN=8, ORDER="TFP",
               TELESCOPE="m001", UTC_START="2024-05-01-11:00:00", OBS_OFFSET=0)
    (tmp_path / "one.dada").write_bytes(dada_header(**one)
                                        + packed[0].transpose(1, 0, 2).tobytes())  # [T, F, P]
    arr = tmp_path / "mk.toml"
    write_array(arr, ["m001", "m002", "m007"], numbers=[1, 2, 7], telescope="MeerKAT")
    res = reprocess([tmp_path / "four.dada", tmp_path / "one.dada"], tmp_path / "out",
                    ReprocessOptions(array=str(arr), integration_spectra=256), progress=None)
    assert all(r.ok for r in res), [r.error for r in res]
    out = {r.task.output.name: r.task.output for r in res}
    numbers = {"m001": 1, "m007": 7, "m002": 2}
    check_file(out["four.uvh5"], x, [(0, 256), (256, 512)], numbers,
               ["m001", "m007", "m002"], conj=True)  # BW < 0: conjugated
    check_file(out["one.uvh5"], x[:1], [(0, 256), (256, 512)], numbers, ["m001"],
               freqs=396.5e6 + 1e6 * np.arange(8))


def test_dada_channel_orders(tmp_path):
    """Without ORDER, [time][pol][chan] as baseband writes and reads it (written here by
    baseband's own DADA writer); ORDER TFP puts the channel first."""
    import astropy.units as u
    from astropy.time import Time
    from baseband import dada

    rng = np.random.default_rng(4)
    ints = rng.integers(-128, 128, (64, 2, 4, 2))  # (time, pol, chan, re/im)
    z = (ints[..., 0] + 1j * ints[..., 1]).astype(np.complex64)
    path = tmp_path / "bb.dada"
    with dada.open(path, "ws", sample_rate=1 * u.MHz, samples_per_frame=64, npol=2, nchan=4,
                   complex_data=True, bps=8, time=Time("2024-01-01T00:00:00"),
                   FREQ=400.0, BW=4.0) as fw:
        fw.write(z)
    rec = open_recording([path], "dada")
    x = np.concatenate([c.layout.natural(c.data, c.nframe)
                        for c in rec.chunks(rec.start, rec.end)], axis=2)  # [2, 4, 64, 2]
    assert np.array_equal(x, ints.transpose(1, 2, 0, 3))
    tfp = tmp_path / "tfp.dada"
    keys = dict(FREQ=400.0, BW=4.0, TSAMP=1.0, NBIT=8, NDIM=2, NPOL=2, NCHAN=4, ORDER="TFP",
                UTC_START="2024-01-01-00:00:00", OBS_OFFSET=0)
    tfp.write_bytes(dada_header(**keys) + ints.transpose(0, 2, 1, 3).astype(np.int8).tobytes())
    rec = open_recording([tfp], "dada")
    y = np.concatenate([c.layout.natural(c.data, c.nframe)
                        for c in rec.chunks(rec.start, rec.end)], axis=2)
    assert np.array_equal(y, x)


def test_dada_refusals_are_one_line(tmp_path):
    cases = {"real.dada": dict(FBFUSE, NDIM=1), "two.dada": dict(FBFUSE, NBIT=2),
             "order.dada": dict(FBFUSE, ORDER="FTP"), "ants.dada": dict(FBFUSE, ANTS="m001")}
    for i, (name, keys) in enumerate(cases.items()):  # other observations: not one sequence
        keys["UTC_START"] = f"2024-05-01-10:00:0{i}"
        (tmp_path / name).write_bytes(dada_header(**keys) + bytes(3 * 8 * 256 * 4))
    res = {r.task.input.name: r.error for r in reprocess(
        [tmp_path / n for n in cases], tmp_path / "out", ReprocessOptions(), progress=None)}
    assert "NDIM = 1: only complex" in res["real.dada"]
    assert "NBIT = 2: this reader takes [4, 8, 16]" in res["two.dada"]
    assert "ORDER = FTP" in res["order.dada"]
    assert "ANTS names 1 antennas for NANTS = 3" in res["ants.dada"]
    assert all("\n" not in e for e in res.values())


# ---------------------------------------------------------------------------- VDIF
ARO = ["--sample-rate", "390625"]


def test_arochime_vdif_sample(tmp_path):
    """4-bit, 1024 channels, two threads (pols), one sample per frame; baseband decodes
    (v - 8) / 2.95. CHIME's band runs 800 MHz down in 390.625 kHz channels."""
    import astropy.units as u
    from baseband import vdif

    assert detect_format(bdata.SAMPLE_AROCHIME_VDIF) == "vdif"
    with vdif.open(bdata.SAMPLE_AROCHIME_VDIF, "rs", sample_rate=390625 * u.Hz) as fh:
        z = fh.read()  # (5, 2 threads, 1024)
    arr = one_antenna_array(tmp_path, "AQ", "ARO")
    opts = ReprocessOptions(array=str(arr), integration_spectra=5, sample_rate_hz=390625,
                            freq0_hz=800e6, chan_bw_hz=-390625)
    (r,) = reprocess([bdata.SAMPLE_AROCHIME_VDIF], tmp_path / "out", opts, progress=None)
    assert r.ok, r.error
    check_file(r.task.output, as_x(z, scale=2.95), [(0, 5)], {"AQ": 0}, ["AQ"],
               freqs=800e6 - 390625 * np.arange(1024), conj=True)
    (r,) = reprocess([bdata.SAMPLE_AROCHIME_VDIF], tmp_path / "out2", ReprocessOptions(
        array=str(arr), sample_rate_hz=390625), progress=None)
    assert not r.ok and "VDIF headers carry no frequencies: pass --freq0 and --chan-bw" in r.error
    (r,) = reprocess([bdata.SAMPLE_AROCHIME_VDIF], tmp_path / "out3", ReprocessOptions(
        array=str(arr), freq0_hz=800e6, chan_bw_hz=-390625), progress=None)
    assert not r.ok and "pass --sample-rate" in r.error


def test_8bit_vdif_written_by_baseband_with_a_lost_frameset(tmp_path):
    """8-bit, 4 channels, two threads, 8 samples per frame, written by baseband's own VDIF
    writer (levels (v - 127.5) / 35.5, so ours are v - 128 = the integers encoded); spanning
    3 s, its frame rate is read from the headers. A frameset cut out is a gap; an invalid
    frame is counted."""
    import astropy.units as u
    from astropy.time import Time
    from baseband import vdif

    rng = np.random.default_rng(1)
    ints = rng.integers(-128, 128, (8 * 24, 2, 4, 2))  # (time, thread, chan, re/im)
    z = ((ints[..., 0] + 0.5) + 1j * (ints[..., 1] + 0.5)) / 35.5
    path = tmp_path / "st.vdif"
    with vdif.open(path, "ws", sample_rate=64 * u.Hz, samples_per_frame=8, nchan=4,
                   nthread=2, complex_data=True, bps=8, edv=0, station="Zz",
                   time=Time("2020-01-01T00:00:00")) as fw:
        fw.write(z.astype(np.complex64))
    assert detect_format(path) == "vdif"
    arr = tmp_path / "zz.toml"
    write_array(arr, ["Zz"])
    opts = ReprocessOptions(array=str(arr), integration_spectra=40, freq0_hz=1e8,
                            chan_bw_hz=1e6)
    (r,) = reprocess([path], tmp_path / "out", opts, progress=None)
    assert r.ok, r.error
    x = ints.transpose(2, 0, 1, 3)[None]  # [1, chan, time, pol, 2]
    check_file(r.task.output, x, [(k * 40, (k + 1) * 40) for k in range(4)], {"Zz": 0},
               ["Zz"], freqs=1e8 + 1e6 * np.arange(4))
    uv = pyuvdata.UVData.from_file(r.task.output)
    assert np.allclose(np.unique(uv.time_array), jd(1577836800 + (np.arange(4) * 40 + 20) / 64))
    frame = 32 + 8 * 4 * 2
    data = bytearray(path.read_bytes())
    lost = data[:4 * frame] + data[6 * frame:]  # frames 4 and 5: the third frameset
    bad = bytearray(lost)
    bad[8 * frame + 3] |= 0x80  # the invalid bit of a later frame
    (tmp_path / "lost.vdif").write_bytes(bytes(bad))
    rec = open_recording([tmp_path / "lost.vdif"], "vdif", freq0_hz=1e8, chan_bw_hz=1e6)
    # framesets 2 (cut out) and 4 (one frame invalid, its partner alone) are gaps
    assert rec.damage.by_file == {"lost.vdif": {"invalid_frames": 1, "gap_blocks": 2,
                                                "gap_spectra": 16}}


# ---------------------------------------------------------------------------- MWAX
def test_mwax_coarse_channels_form_one_recording(tmp_path):
    blocks = {ch: mwax_blocks(ch) for ch in (109, 110)}
    files = [write_subfile(tmp_path / f"1300000000_1300000008_{ch}.sub", b, coarse_channel=ch,
                           tile_ids=TILES) for ch, b in blocks.items()]
    assert detect_format(files[0]) == "mwax"
    rec = open_recording(files, "mwax")
    assert rec.meta.antenna_names == ("Tile011", "Tile012", "Tile051", "Tile052")
    assert DELAY_ENTRY.size == 6456
    names = list(rec.meta.antenna_names)
    arr = tmp_path / "mwa.toml"
    write_array(arr, names[::-1] + ["Tile099"], telescope="MWA", lat=-26.703, lon=116.671,
                alt=377.8)
    numbers = {n: i for i, n in enumerate(names[::-1])}
    (r,) = reprocess(files[::-1], tmp_path / "out", ReprocessOptions(
        array=str(arr), integration_spectra=2 * NTIME + 100), progress=None)
    assert r.ok, r.error
    assert r.task.output.name == "1300000000_1300000008_ch109-110.uvh5"
    # x[tile, chan, time, pol, 2] from [input, time, 2] blocks, input = 2 * tile + pol
    x = np.stack([np.concatenate(b, axis=1).reshape(4, 2, -1, 2).transpose(0, 2, 1, 3)
                  for b in blocks.values()], axis=1)
    check_file(r.task.output, x, [(0, 2 * NTIME + 100)], numbers, names,
               freqs=np.array([109, 110]) * 1.28e6)
    uv = pyuvdata.UVData.from_file(r.task.output)
    unix = 315964782 + 1300000000 + 8 + (NTIME + 50) / 1.28e6  # UNIXTIME + OBS_OFFSET + mid
    assert np.allclose(uv.time_array, jd(unix), rtol=0, atol=2e-9)


def test_mwax_cut_subfile_is_damaged(tmp_path):
    path = write_subfile(tmp_path / "a_109.sub", mwax_blocks(1), coarse_channel=109,
                         tile_ids=TILES)
    data = path.read_bytes()
    path.write_bytes(data[:-NTIME])  # the last block cut short
    rec = open_recording([path], "mwax")
    assert rec.damage.by_file == {"a_109.sub": {"truncated_bytes": 8 * NTIME * 2 - NTIME,
                                                "gap_blocks": 1, "gap_spectra": NTIME}}
    assert rec.end - rec.start == 2 * NTIME
