"""The display's JSON API, ``/api/v1/...`` (docs/display.md, "API"): a request's path and
query string -> (HTTP status, JSON body), with no HTTP in it, so every answer can be tested
without a socket.

Endpoints (``dump`` counts from 0 in time order; negative counts back from the latest, -1 by
default): ``status``, ``baseline`` (``ant1``, ``ant2``, ``pol``, ``dump``), ``autos``
(``dump``), ``matrix`` (``pol``, ``dump``, ``chan_lo``, ``chan_hi``, ``quantity``: one of amplitude,
phase, coherence; all three by default), ``waterfall`` (``ant1``,
``ant2``, ``pol``, ``dump``, ``last``: that many dumps up to ``dump``), ``health`` (``dump``).
A parameter that is unknown, repeated, not an integer where one is due, or names something the
data lacks is a 400 with ``{"error": one line}``; no dump yet (a live display just started) is
a 503. Answers about a dump are cached (a dump never changes once held), and computed once
when several requests ask together: three browsers polling the same panels (the page polls
on the second) cost the work of one.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import parse_qs

from . import model
from .model import Dump, HealthMarks, ParamError

PREFIX = "/api/v1/"
_INT = re.compile(r"-?[0-9]{1,12}")
#: Cached answers kept (JSON bytes of dump questions).
CACHE_ENTRIES = 128


class DumpStore(Protocol):
    """What the API reads: :class:`~.files.FileDumps` or :class:`~.live.LiveDumps`."""

    live: bool

    def count(self) -> tuple[int, int]: ...
    def dump(self, index: int) -> Dump: ...
    def status(self) -> dict[str, Any]: ...
    def health(self, index: int) -> dict[str, Any]: ...


class NoData(LookupError):
    """No dump is held yet (HTTP 503)."""


class Query:
    """A request's parameters: each read once, by name, checked; the rest refused."""

    def __init__(self, query: str, allowed: tuple[str, ...]) -> None:
        try:
            parsed = parse_qs(query, keep_blank_values=True, strict_parsing=False,
                              max_num_fields=16)
        except ValueError:
            raise ParamError("too many parameters") from None
        for name, values in parsed.items():
            if name not in allowed:
                raise ParamError(f"unknown parameter {name[:40]!r} (this endpoint takes: "
                                 f"{', '.join(allowed) or 'none'})")
            if len(values) > 1:
                raise ParamError(f"{name}: given {len(values)} times")
        self.values = {k: v[0] for k, v in parsed.items()}

    def integer(self, name: str, default: int | None = None) -> int | None:
        text = self.values.get(name)
        if text is None:
            return default
        if not _INT.fullmatch(text):
            raise ParamError(f"{name}: expected an integer, got {text[:40]!r}")
        return int(text)

    def required_int(self, name: str) -> int:
        value = self.integer(name)
        if value is None:
            raise ParamError(f"{name}: required")
        return value

    def text(self, name: str, default: str | None = None) -> str:
        value = self.values.get(name, default)
        if value is None:
            raise ParamError(f"{name}: required")
        if not re.fullmatch(r"[A-Za-z]{1,8}", value):
            raise ParamError(f"{name}: expected a polarisation name (xx, yy, xy, yx), got "
                             f"{value[:40]!r}")
        return value.lower()


def resolve_dump(store: DumpStore, requested: int | None) -> int:
    """The absolute index of ``requested`` (negative: from the latest)."""
    first, total = store.count()
    if total == first:
        raise NoData("no dump has arrived yet")
    index = total + requested if requested < 0 else requested
    if not first <= index < total:
        held = f"{first}..{total - 1}"
        raise ParamError(f"dump: {requested} is out of range (dumps held: {held}"
                         f"{', or -1 for the latest' if total else ''})")
    return index


class Api:
    """Answers ``/api/v1/...`` requests over ``store``; ``marks``: the input health states to
    show with the autos (optional, :data:`~.model.HealthMarks`)."""

    def __init__(self, store: DumpStore, marks: HealthMarks | None = None) -> None:
        self.store, self.marks = store, marks
        self._cache: OrderedDict[tuple, bytes | threading.Event] = OrderedDict()
        self._lock = threading.Lock()
        self.routes: dict[str, tuple[tuple[str, ...], Callable[[Query], Any]]] = {
            "status": ((), self._status),
            "baseline": (("ant1", "ant2", "pol", "dump"), self._baseline),
            "autos": (("dump",), self._autos),
            "matrix": (("pol", "dump", "chan_lo", "chan_hi", "quantity"), self._matrix),
            "waterfall": (("ant1", "ant2", "pol", "dump", "last"), self._waterfall),
            "health": (("dump",), self._health),
        }

    def handle(self, path: str, query: str) -> tuple[int, bytes]:
        """(status, JSON bytes) for a GET of ``path?query``."""
        name = path[len(PREFIX):] if path.startswith(PREFIX) else None
        if name not in self.routes:
            return 404, _json({"error": f"no endpoint {path[:80]!r} (endpoints: "
                                        f"{', '.join(PREFIX + n for n in self.routes)})"})
        allowed, answer = self.routes[name]
        try:
            q = Query(query, allowed)
            return 200, answer(q)
        except ParamError as exc:
            return 400, _json({"error": str(exc)})
        except NoData as exc:
            return 503, _json({"error": str(exc)})

    # ---- cached answers about one dump ----------------------------------------------------
    def _cached(self, key: tuple, make: Callable[[], dict[str, Any]]) -> bytes:
        """The answer for ``key``, computed once: a request that comes while another computes
        the same answer waits for it (browsers polling on the second ask together)."""
        with self._lock:
            hit = self._cache.get(key)
            if isinstance(hit, bytes):
                self._cache.move_to_end(key)
                return hit
            if hit is None:  # ours to compute; others wait on this event
                self._cache[key] = threading.Event()
        if hit is not None:
            hit.wait(30)
            with self._lock:
                body = self._cache.get(key)
            return body if isinstance(body, bytes) else self._cached(key, make)
        try:
            body = _json(make())
        except BaseException:
            with self._lock:
                waiting = self._cache.pop(key)
            waiting.set()
            raise
        with self._lock:
            waiting = self._cache[key]
            self._cache[key] = body
            while len(self._cache) > CACHE_ENTRIES:
                self._cache.popitem(last=False)
        waiting.set()
        return body

    def _dump(self, q: Query) -> tuple[int, Dump]:
        index = resolve_dump(self.store, q.integer("dump", -1))
        return index, self.store.dump(index)

    def _status(self, q: Query) -> bytes:
        return _json(self.store.status())

    def _baseline(self, q: Query) -> bytes:
        a1, a2, pol = q.required_int("ant1"), q.required_int("ant2"), q.text("pol", "xx")
        i, d = self._dump(q)
        d.where(a1, a2, pol)  # refused before anything is cached
        return self._cached(("baseline", i, d.time_jd, a1, a2, pol),
                            lambda: dict(model.baseline(d, a1, a2, pol), dump=i))

    def _autos(self, q: Query) -> bytes:
        i, d = self._dump(q)
        if self.marks is not None:  # marks change without the dump changing: not cached
            return _json(dict(model.autos(d, self.marks), dump=i))
        return self._cached(("autos", i, d.time_jd), lambda: dict(model.autos(d), dump=i))

    def _matrix(self, q: Query) -> bytes:
        pol = q.text("pol", "xx")
        lo, hi = q.integer("chan_lo"), q.integer("chan_hi")
        i, d = self._dump(q)
        d.pol_index(pol)
        lo, hi = model.channel_range(d, lo, hi)
        which = q.values.get("quantity")
        if which is not None and which not in model.MATRIX_QUANTITIES:
            raise ParamError(f"quantity: expected one of {', '.join(model.MATRIX_QUANTITIES)}, "
                             f"got {which[:40]!r}")
        quantities = (which,) if which else model.MATRIX_QUANTITIES
        return self._cached(("matrix", i, d.time_jd, pol, lo, hi, quantities),
                            lambda: dict(model.matrix(d, pol, lo, hi, quantities), dump=i))

    def _waterfall(self, q: Query) -> bytes:
        a1, a2, pol = q.required_int("ant1"), q.required_int("ant2"), q.text("pol", "xx")
        last = q.integer("last", 32)
        if not 1 <= last <= model.MAX_WATERFALL:
            raise ParamError(f"last: must be in [1, {model.MAX_WATERFALL}], got {last}")
        i, d = self._dump(q)
        d.where(a1, a2, pol)
        first = max(self.store.count()[0], i - last + 1)
        dumps = [(k, self.store.dump(k)) for k in range(first, i + 1)]
        for _, other in dumps:
            other.where(a1, a2, pol)
        return _json(model.waterfall(dumps, a1, a2, pol))

    def _health(self, q: Query) -> bytes:
        i, _ = self._dump(q)
        return _json(dict(self.store.health(i), dump=i))


def _json(value: Any) -> bytes:
    """``value`` as JSON; a top-level list of lists (a matrix, a waterfall) encoded a row at a
    time, so the encoder (which holds the GIL for the whole of one call) lets the pipeline's
    threads in between rows: a 128-antenna matrix is 16,384 floats, ~20 ms in one call."""
    if not isinstance(value, dict):
        return _dumps(value)
    parts = []
    for key, item in value.items():
        if isinstance(item, list) and item and isinstance(item[0], list):
            text = "[" + ",".join(_dumps(row).decode() for row in item) + "]"
        else:
            text = _dumps(item).decode()
        parts.append(f"{_dumps(key).decode()}:{text}")
    return ("{" + ",".join(parts) + "}").encode()


def _dumps(value: Any) -> bytes:
    return json.dumps(value, allow_nan=False, separators=(",", ":")).encode()
