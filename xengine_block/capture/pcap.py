"""pcap files walked at memory speed: the compiled record walk of the damage scan
(:func:`.recording.scan_pcap`: every record header checked, bytes that are no record skipped
to the next place where records line up again, SPEAD over Ethernet/IPv4/UDP told apart) over a
memory map whose page tables are filled in one call.

Tried and not kept: copying a clean recording's SPEAD packets back to back into memory for
spead2's buffer reader instead of its libpcap reader: the copy into fresh memory cost more
than libpcap's reads saved.
"""

from __future__ import annotations

import mmap
import os
import struct

import numba
import numpy as np

from . import numba_cache

numba_cache.install()  # the cache=True loops below cache in the user cache

_MAGIC = {b"\xd4\xc3\xb2\xa1": (False, 10**6), b"\xa1\xb2\xc3\xd4": (True, 10**6),
          b"\x4d\x3c\xb2\xa1": (False, 10**9), b"\xa1\xb2\x3c\x4d": (True, 10**9)}
LINKTYPE_ETHERNET = 1
MAX_RECORD = 262144  # libpcap's largest snaplen
#: What our writer (:class:`.spead.PcapWriter`) writes: little-endian, microseconds.
PCAP_FILE_HEADER = struct.Struct("<IHHiIII")  # magic, version 2.4, zone, sigfigs, snaplen, link
PCAP_RECORD_HEADER = struct.Struct("<IIII")  # seconds, microseconds, bytes kept, bytes on wire
PCAP_SNAPLEN = 65535

# walk() results.
REC, SPEAD, UNDECODABLE, GARBAGE_REGIONS, GARBAGE_BYTES, TRUNCATED = range(6)


@numba.njit(cache=True)
def _u32(buf, pos, big):  # pragma: no cover - compiled
    if big:
        return ((np.uint32(buf[pos]) << 24) | (np.uint32(buf[pos + 1]) << 16)
                | (np.uint32(buf[pos + 2]) << 8) | np.uint32(buf[pos + 3]))
    return ((np.uint32(buf[pos + 3]) << 24) | (np.uint32(buf[pos + 2]) << 16)
            | (np.uint32(buf[pos + 1]) << 8) | np.uint32(buf[pos]))


@numba.njit(cache=True)
def _plausible(buf, pos, size, big, frac_limit, limit):  # pragma: no cover - compiled
    """Length of the record at ``pos`` if its header is plausible and it fits, else -1 (-2:
    plausible but cut short by the end of the file)."""
    if pos + 16 > size:
        return -2
    frac, incl, orig = _u32(buf, pos + 4, big), _u32(buf, pos + 8, big), _u32(buf, pos + 12, big)
    if frac >= frac_limit or incl > limit or incl > orig or orig > MAX_RECORD:
        return -1
    return 16 + np.int64(incl) if pos + 16 + incl <= size else -2


@numba.njit(cache=True)
def _is_spead(buf, start, end):  # pragma: no cover - compiled
    """Ethernet (optionally one VLAN tag) / IPv4 / UDP carrying a SPEAD version 4 header."""
    off = start + 12
    if end - off < 2:
        return False
    ethertype = (np.int64(buf[off]) << 8) | buf[off + 1]
    if ethertype == 0x8100:
        off += 4
        ethertype = ((np.int64(buf[off]) << 8) | buf[off + 1]) if end - off >= 2 else 0
    off += 2
    if ethertype != 0x0800 or end - off < 20 or buf[off] >> 4 != 4 or buf[off + 9] != 17:
        return False
    off += (buf[off] & 0x0F) * 4 + 8  # IPv4 header, then the UDP header
    return end - off >= 8 and buf[off] == 0x53 and buf[off + 1] == 4


@numba.njit(cache=True, nogil=True)  # nogil: reprocessing walks beside its pipeline
def walk(buf, big, frac_limit, snaplen, linktype):  # pragma: no cover - compiled
    """One pass over the records: the counters REC ... TRUNCATED."""
    size = buf.size
    limit = min(snaplen if snaplen else MAX_RECORD, MAX_RECORD)
    res = np.zeros(6, np.int64)
    eth = linktype == LINKTYPE_ETHERNET
    pos = 24
    while pos < size:
        n = _plausible(buf, pos, size, big, frac_limit, limit)
        if n == -2:  # the file ends inside this record
            res[TRUNCATED] = size - pos
            break
        if n < 0:  # garbage: find the next place where records line up again
            start = pos
            found = False
            while pos < size:
                pos += 1
                n = _plausible(buf, pos, size, big, frac_limit, limit)
                if n > 0 and (pos + n == size
                              or _plausible(buf, pos + n, size, big, frac_limit, limit) > 0):
                    found = True
                    break
            if not found:
                n = -1
            res[GARBAGE_REGIONS] += 1
            res[GARBAGE_BYTES] += pos - start
            if n < 0:
                break
        res[REC] += 1
        if eth and _is_spead(buf, pos + 16, pos + n):
            res[SPEAD] += 1
        elif eth:
            res[UNDECODABLE] += 1
        pos += n
    return res


def pcap_header(path: str | os.PathLike) -> tuple[bool, int, int, int]:
    """(big-endian, fraction limit, snaplen, linktype) of the file's header; ValueError naming
    the file when it is not a pcap file."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(24)
    if size < 24:
        raise ValueError(f"{path}: {size} bytes, too short for a pcap file header")
    magic = head[:4]
    if magic not in _MAGIC:
        raise ValueError(f"{path}: not a pcap file (magic {magic.hex()})")
    big, frac_limit = _MAGIC[magic]
    order = ">" if big else "<"
    snaplen, linktype = (int(x) for x in np.frombuffer(head[16:24], f"{order}u4"))
    return big, frac_limit, snaplen, linktype


def open_pcap(path: str | os.PathLike) -> tuple[np.ndarray, mmap.mmap | None, tuple]:
    """(the file's bytes, its mapping to close, :func:`pcap_header`); ValueError naming the
    file when it is not a pcap file."""
    header = pcap_header(path)
    with open(path, "rb") as f:
        # MAP_POPULATE: the page tables filled in one call (faulting 4 KiB at a time
        # while walking can cost as much as the walk)
        mm = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0),
                       prot=mmap.PROT_READ)
    return np.frombuffer(mm, np.uint8), mm, header


def close(mm: mmap.mmap) -> None:
    """Unmap now, or (a view still held, e.g. by a traceback) when the last view goes."""
    try:
        mm.close()
    except BufferError:
        pass


# ---------------------------------------------------------------------------- clean recordings
# regular_heaps() results.
CLEAN, FIRST, RECORD, PAYLOAD_AT, NHEAP, TS0 = range(6)
#: The items of one of our F-engine heaps (docs/design.md, "SPEAD items"): heap counter, heap size,
#: heap offset, payload length, timestamp, stream id, frequency, the payload's pointer;
#: ``regular_heaps`` wants each once, in any order, and no other.
_HEAP_ITEMS = np.array([0x1, 0x2, 0x3, 0x4, 0x1600, 0x4101, 0x4103, 0x4300], np.int64)


@numba.njit(cache=True)
def _u64be(buf, pos):  # pragma: no cover - compiled
    v = np.uint64(0)
    for i in range(8):
        v = (v << np.uint64(8)) | np.uint64(buf[pos + i])
    return v


@numba.njit(cache=True)
def _heap(buf, start, end, payload, value):  # pragma: no cover - compiled
    """One record's frame, ``buf[start:end]``, as one of our single-packet heaps: (offset of
    its payload in ``buf``, timestamp, stream id, frequency); offset -1: a SPEAD packet
    without a timestamp (descriptors, the end-of-stream heap); -2: anything else (VLAN
    tags, IP options or fragments, other items or sizes, a payload not ending the record).
    ``value``: int64 scratch of ``_HEAP_ITEMS.size``, the item values by their index there."""
    off = start + 14  # Ethernet, no VLAN tag: IPv4 of 20 bytes, UDP, SPEAD-64-48
    if end - off < 36 or buf[start + 12] != 0x08 or buf[start + 13] != 0x00:
        return -2, 0, 0, 0
    if buf[off] != 0x45 or buf[off + 9] != 17 or (buf[off + 6] & 0x3F) or buf[off + 7]:
        return -2, 0, 0, 0
    ip_len = (np.int64(buf[off + 2]) << 8) | buf[off + 3]
    udp_len = (np.int64(buf[off + 24]) << 8) | buf[off + 25]
    if ip_len != end - off or udp_len != ip_len - 20:  # no padding after the datagram
        return -2, 0, 0, 0
    sp = off + 28
    if buf[sp] != 0x53 or buf[sp + 1] != 4 or buf[sp + 2] != 2 or buf[sp + 3] != 6:
        return -2, 0, 0, 0
    nitem = (np.int64(buf[sp + 6]) << 8) | buf[sp + 7]
    if end - sp < 8 + 8 * nitem:
        return -2, 0, 0, 0
    seen = 0  # which of _HEAP_ITEMS were seen (bits); their values go to `value`
    has_ts, other = False, False
    for i in range(nitem):
        w = _u64be(buf, sp + 8 + 8 * i)
        ident = np.int64((w >> np.uint64(48)) & np.uint64(0x7FFF))
        has_ts = has_ts or ident == 0x1600
        k = -1
        for j in range(_HEAP_ITEMS.size):
            if _HEAP_ITEMS[j] == ident:
                k = j
        immediate = (w >> np.uint64(63)) == np.uint64(1)
        if k < 0 or (seen >> k) & 1 or immediate != (ident != 0x4300):
            other = True
            continue
        seen |= 1 << k
        value[k] = np.int64(w & np.uint64((1 << 48) - 1))
    if not has_ts:
        return -1, 0, 0, 0
    if other or nitem != _HEAP_ITEMS.size:
        return -2, 0, 0, 0
    at = sp + 8 + 8 * nitem
    if (value[1] != payload or value[2] != 0 or value[3] != payload or value[7] != 0
            or end - at != payload):
        return -2, 0, 0, 0
    return at, value[4], value[5], value[6]


@numba.njit(cache=True, nogil=True)
def regular_heaps(buf, big, frac_limit, snaplen, linktype, payload, per_frame, slots,
                  step):  # pragma: no cover - compiled
    """Whether the file is a clean recording of our heaps that can be read in place: after
    any SPEAD records without a timestamp (descriptors), whole frames of ``per_frame``
    single-packet heaps of ``payload`` bytes in records of one size, every frame's heaps in
    the first frame's order (its (stream, frequency) pairs go to ``slots[per_frame, 2]``),
    timestamps ``ts0 + frame * step``; then only SPEAD records without a timestamp (the
    end-of-stream heap); not a byte that is no record. Returns CLEAN ... TS0 (CLEAN 0: not
    such a file, where the others mean nothing)."""
    res = np.zeros(6, np.int64)
    size = buf.size
    limit = min(snaplen if snaplen else MAX_RECORD, MAX_RECORD)
    if linktype != LINKTYPE_ETHERNET:
        return res
    pos, nheap, record, first, at0 = 24, 0, -1, -1, -1
    ts0 = np.int64(0)
    tail = False
    value = np.zeros(_HEAP_ITEMS.size, np.int64)
    while pos < size:
        n = _plausible(buf, pos, size, big, frac_limit, limit)
        if n < 0 or _u32(buf, pos + 8, big) != _u32(buf, pos + 12, big):
            return res  # garbage, a cut record, or a packet cut by the snap length
        at, ts, stream, freq = _heap(buf, pos + 16, pos + n, payload, value)
        if at == -2 or (at >= 0 and tail):
            return res
        if at == -1:
            tail = nheap > 0  # descriptors before the heaps; after them, nothing but these
        else:
            if record < 0:
                record, first, at0, ts0 = n, pos, at - pos, ts
            if n != record or at - pos != at0:
                return res
            frame, j = nheap // per_frame, nheap % per_frame
            if ts != ts0 + frame * step:
                return res
            if frame == 0:
                slots[j, 0], slots[j, 1] = stream, freq
            elif slots[j, 0] != stream or slots[j, 1] != freq:
                return res
            nheap += 1
        pos += n
    if nheap == 0 or nheap % per_frame:
        return res
    res[CLEAN], res[FIRST], res[RECORD], res[PAYLOAD_AT], res[NHEAP], res[TS0] = (
        1, first, record, at0, nheap, ts0)
    return res
