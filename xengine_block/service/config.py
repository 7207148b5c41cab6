"""``xengine correlate`` configuration: one TOML file, each key overridable by a flag.

Every key is declared once in :data:`KEYS` (section, name, parser, default, help); the TOML
reader, the command-line flags and docs/deploy.md's table all come from it. Parsers are argparse
``type=`` functions (they take the flag's text, or the TOML value) and raise
:class:`argparse.ArgumentTypeError` with a short reason; :func:`parse_config` adds the key's name,
so every error is one line naming the key. The whole configuration, cross-key rules included
(geometry, array, backend), is checked before anything is bound or written (:func:`load_config`).

Two steps: :func:`parse_config` reads and validates the file and flags, touching nothing
outside them; :func:`probe_environment` checks what they name against the machine (the output
directory takes a file, the backend is usable). Start-up runs both; SIGHUP's re-read
(:meth:`ServiceConfig.reloaded`) only the first: the probed keys cannot change live, so a probe
would only repeat, on a running service, checks it passed at start, and could fail (a full disk)
for a reason that has nothing to do with the file.
"""

from __future__ import annotations

import argparse
import ipaddress
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..array import ArrayDescription, default_array
from ..backends import BackendUnavailable, choose_backend
from ..blocks.chain import Flagging
from ..blocks.writer import FILE_FORMATS
from ..capture.meerkat import CAPTURE_FORMATS, DEFAULT_SPECTRA_PER_HEAP, FormatError, MeerkatFormat
from ..console.argtypes import directory_problem, sample_bits
from ..geometry import NIBBLE_ORDERS, Geometry, GeometryError, max_spectra_int32
from ..health.inputs import DEFAULT_THRESHOLDS, Thresholds
from ..health.rfi import LIVE_WINDOW, parse_rfi
from ..runtime.affinity import cores_from_text, parse_cores


class ConfigError(ValueError):
    """A bad configuration key; ``key`` is its dotted name (``capture.chan0``)."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"{key}: {reason}")
        self.key = key


# ---- argparse type functions (flag text or TOML value -> value) -----------------------------

def _number(value: Any, kind: type) -> Any:
    what = "an integer" if kind is int else "a number"
    if isinstance(value, str):
        try:
            return kind(value)
        except ValueError:
            pass
    elif kind is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    elif kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise argparse.ArgumentTypeError(f"expected {what}, got {value!r}")


def int_at_least(low: int, high: int | None = None) -> Callable[[Any], int]:
    """An integer in [low, high]."""
    def parse(value: Any) -> int:
        v = _number(value, int)
        if v < low or (high is not None and v > high):
            span = f">= {low}" if high is None else f"in [{low}, {high}]"
            raise argparse.ArgumentTypeError(f"must be an integer {span}, got {v}")
        return v
    parse.__name__ = f"int >= {low}"
    return parse


def positive_float(value: Any) -> float:
    """A finite number > 0."""
    v = _number(value, float)
    if not 0 < v < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {v}")
    return v


def non_negative_float(value: Any) -> float:
    """A finite number >= 0."""
    v = _number(value, float)
    if not 0 <= v < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {v}")
    return v


def text(value: Any) -> str:
    """A non-empty string."""
    if not isinstance(value, str) or not value:
        raise argparse.ArgumentTypeError(f"expected a non-empty string, got {value!r}")
    return value


def path(value: Any) -> Path:
    """A path (relative paths in a config file are relative to the file)."""
    return Path(text(value))


def ipv4(value: Any) -> str:
    """A dotted IPv4 address."""
    try:
        return str(ipaddress.IPv4Address(text(value)))
    except ipaddress.AddressValueError:
        raise argparse.ArgumentTypeError(f"expected an IPv4 address, got {value!r}") from None


def boolean(value: Any) -> bool:
    """true/false (TOML booleans, or the words on the command line)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
        return value.lower() in ("true", "yes", "1")
    raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")


def fraction(value: Any) -> float:
    """A number in (0, 1]."""
    v = _number(value, float)
    if not 0 < v <= 1:
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1], got {v}")
    return v


def above_one(value: Any) -> float:
    """A finite number > 1 (a power ratio)."""
    v = _number(value, float)
    if not 1 < v < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number > 1, got {v}")
    return v


def rfi_method(value: Any) -> str:
    """``aoflagger`` or ``aoflagger:STRATEGY.lua`` (the file must exist)."""
    try:
        parse_rfi(text(value))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def capture_format(value: Any) -> str:
    """The F-engines' wire format: ours (``xengine``) or MeerKAT's (``meerkat``)."""
    if value not in CAPTURE_FORMATS:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(CAPTURE_FORMATS)}, "
                                         f"got {value!r}")
    return value


def nibble_order(value: Any) -> str:
    """Which nibble of a ci4 byte holds the real part (``geometry.NIBBLE_ORDERS``)."""
    if value not in NIBBLE_ORDERS:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(NIBBLE_ORDERS)}, "
                                         f"got {value!r}")
    return value


@dataclass(frozen=True)
class UdpEndpoint:
    """``udp://ADDRESS:PORT``: a unicast bind address or a multicast group to join."""

    address: str
    port: int

    @property
    def multicast(self) -> bool:
        return ipaddress.IPv4Address(self.address).is_multicast

    def __str__(self) -> str:
        return f"udp://{self.address}:{self.port}"


def file_formats(value: Any) -> tuple[str, ...]:
    """The visibility files written: a TOML array (or a comma list on the command line) of
    ``uvh5`` and ``ms`` (Measurement Sets, python-casacore)."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not items:
        raise argparse.ArgumentTypeError(f"expected a list of uvh5 and ms, got {value!r}")
    formats = tuple(dict.fromkeys(str(f).strip() for f in items))
    bad = [f for f in formats if f not in FILE_FORMATS]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown format {bad[0]!r}; uvh5 and/or ms")
    if "ms" in formats:
        from ..console.argtypes import measurement_sets_available

        problem = measurement_sets_available()
        if problem:
            raise argparse.ArgumentTypeError(problem)
    return formats


def phase_centre_key(value: Any) -> str:
    """``zenith`` or ``RA,DEC`` in degrees (ICRS)."""
    from ..console.argtypes import phase_centre

    return phase_centre(str(value))


def cpu_list(value: Any) -> tuple[int, ...]:
    """Cores: a TOML integer or array of them, or a CPU list on the command line (``0-3,6``),
    each a core this process may run on."""
    try:
        if isinstance(value, str):
            value = cores_from_text(value)
        return tuple(sorted(parse_cores(value, "cores")))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("cores: ")) from None


def udp_endpoint(value: Any) -> UdpEndpoint:
    """``udp://ADDRESS:PORT`` (port 0: any free port, for tests)."""
    s = text(value)
    host, sep, port = s.removeprefix("udp://").rpartition(":")
    if not s.startswith("udp://") or not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected udp://ADDRESS:PORT, got {s!r}")
    return UdpEndpoint(ipv4(host), int_at_least(0, 65535)(port))


def host_port(value: Any) -> tuple[str, int]:
    """``ADDRESS:PORT`` (an IPv4 address; port 0: any free port), or ``PORT`` alone: on the
    loopback address."""
    s = text(value) if not isinstance(value, int) or isinstance(value, bool) else str(value)
    host, sep, port = s.rpartition(":")
    if not port.isdigit() or (sep and not host):
        raise argparse.ArgumentTypeError(f"expected ADDRESS:PORT or PORT, got {s!r}")
    return (ipv4(host) if sep else "127.0.0.1"), int_at_least(0, 65535)(port)


def udp_endpoints(value: Any) -> tuple[UdpEndpoint, ...]:
    """One ``udp://`` source or a list of them (TOML array; one per flag, repeatable)."""
    items = value if isinstance(value, list) else [value]
    if not items:
        raise argparse.ArgumentTypeError("expected at least one udp://ADDRESS:PORT")
    return tuple(udp_endpoint(v) for v in items)


# ---- the keys ------------------------------------------------------------------------------

REQUIRED = object()

#: Outcomes of re-reading the file while running (SIGHUP, :meth:`ServiceConfig.reloaded`),
#: declared once (``xengine_config_reloads_total{result}``).
RELOAD_RESULTS: dict[str, str] = {
    "applied": "the file re-read and every change in it applied (or none to apply)",
    "refused": "keys that cannot change while running were refused (one log line names them; "
               "their running values stay); the live keys' changes applied",
    "invalid": "the file did not load (unreadable, not UTF-8, not TOML, a bad key): nothing "
               "applied",
}


@dataclass(frozen=True)
class Key:
    section: str  # "" for top-level keys
    name: str
    parse: Callable[[Any], Any]
    default: Any
    help: str
    flag_name: str | None = None  # the flag, where the key's name alone would be unclear
    live: str | None = None  # when a new value re-read on SIGHUP applies; None: restart only

    @property
    def dotted(self) -> str:
        return f"{self.section}.{self.name}" if self.section else self.name

    @property
    def flag(self) -> str:
        return "--" + (self.flag_name or self.name.replace("_", "-"))


KEYS: tuple[Key, ...] = (
    Key("", "array", path, None, "array TOML file (docs/capture.md); default: the MWA layout"),
    Key("", "nant", int_at_least(1, 128), None, "without 'array': the first NANT MWA tiles"),
    Key("band", "sync_time", non_negative_float, REQUIRED, "F-engine sync time, unix seconds",
        live="from the next sequence to start"),
    Key("band", "fs_hz", positive_float, REQUIRED, "spectra per second per channel"),
    Key("band", "freq0_hz", positive_float, REQUIRED, "centre frequency of the band's channel 0"),
    Key("band", "chan_bw_hz", positive_float, None, "channel width (default: fs_hz)"),
    Key("capture", "sources", udp_endpoints, REQUIRED,
        "udp://ADDRESS:PORT, one or more (a multicast group is joined on 'interface'); the "
        "flag is repeated for more", flag_name="source"),
    Key("capture", "interface", ipv4, None, "IPv4 address of the NIC that joins multicast groups"),
    Key("capture", "format", capture_format, "xengine",
        "F-engine packets: xengine (ours: docs/design.md, 'SPEAD items') or meerkat (MeerKAT "
        "CBF feng_raw heaps)"),
    Key("capture", "chan0", int_at_least(0), 0, "this instance's first channel in the band"),
    Key("capture", "nchan", int_at_least(1), 9,
        "channels of this instance (xengine: a multiple of 9; meerkat: its substream's)"),
    Key("capture", "total_channels", int_at_least(1), None,
        "the band's channels (meerkat; default chan0 + nchan, required when chan0 > 0 and "
        "samples_between_spectra is not given)"),
    Key("capture", "spectra_per_heap", int_at_least(1), DEFAULT_SPECTRA_PER_HEAP,
        "meerkat: spectra per F-engine heap"),
    Key("capture", "samples_between_spectra", int_at_least(1), None,
        "ADC samples per spectrum (MeerKAT timestamps; default 2 * total_channels)"),
    Key("capture", "npacket", int_at_least(1), 136, "packets per X-engine frame (P)"),
    Key("capture", "sample_bits", sample_bits, 8,
        "bits per re/im part the F-engines send: 8 (ci8) or 4 (ci4, one byte per sample)"),
    Key("capture", "nibble_order", nibble_order, "re_high",
        "ci4: the nibble holding the real part, re_high (Bifrost, CASPER, LWA) or re_low"),
    Key("capture", "window", int_at_least(1), 8, "reorder window, frames"),
    Key("capture", "buffer_bytes", int_at_least(1 << 16), 64 << 20,
        "socket receive buffer per source (capped by net.core.rmem_max)"),
    Key("correlator", "backend", text, "auto", "correlator backend or 'auto'"),
    Key("correlator", "ninteg", int_at_least(1), None, "X-engine frames per dump (default 1)"),
    Key("correlator", "integration_spectra", int_at_least(1), None,
        "instead of ninteg: spectra per dump, whole heaps (480 spectra, meerkat: "
        "spectra_per_heap), cut at multiples of it from spectrum 0"),
    Key("correlator", "threads", int_at_least(1), None,
        "native backend's worker threads (default: one per core; one fewer gives the capture "
        "and the writer a core of their own)"),
    Key("cpu", "capture", cpu_list, None,
        "cores of the capture (its thread and spead2's receiver thread); default: any",
        "capture-cores"),
    Key("cpu", "xengine", cpu_list, None,
        "cores of the X-engine (the native backend's threads: one per core unless "
        "correlator.threads says otherwise); default: any", "xengine-cores"),
    Key("cpu", "output", cpu_list, None,
        "cores of the blocks after the X-engine (integration, UVH5 writer, quick-look, SPEAD "
        "output); default: any", "output-cores"),
    Key("output", "directory", path, None,
        "UVH5 output directory (created if missing); directory or spead, or both"),
    Key("output", "spead", udp_endpoint, None,
        "udp://ADDRESS:PORT: send each dump as MeerKAT baseline-correlation-products heaps",
        "spead-out"),
    Key("output", "spead_rate_factor", non_negative_float, 1.1,
        "send a dump's heap in 1/factor of a dump's duration (0: unpaced)"),
    Key("output", "prefix", text, "xengine_", "file name prefix", live="from the next file"),
    Key("output", "dumps_per_file", int_at_least(1), None, "start a new file every N dumps",
        live="from the next dump"),
    Key("output", "seconds_per_file", positive_float, None,
        "start a new file every S seconds of data (rounded to whole dumps)",
        live="from the next dump"),
    Key("output", "quicklook", boolean, False, "also write a quick-look PNG per dump"),
    Key("output", "formats", file_formats, ("uvh5",),
        "files written in directory: uvh5 and/or ms (Measurement Sets, python-casacore)"),
    Key("output", "phase_centre", phase_centre_key, "zenith",
        "the Measurement Sets' phase centre: zenith (at each file's first dump) or RA,DEC in "
        "degrees (ICRS)"),
    Key("flagging", "health", boolean, False,
        "judge every input (antenna x pol) in every dump, log each change of state and export "
        "it as metrics, without flagging (docs/flagging.md)"),
    Key("flagging", "inputs", boolean, False,
        "judge every input and flag every baseline of an input judged bad in that dump (dead, "
        "stuck, saturated, low_power, high_power, decorrelated); nsamples kept",
        "flag-inputs"),
    Key("flagging", "rfi", rfi_method, None,
        "aoflagger or aoflagger:STRATEGY.lua: flag RFI in each dump over a sliding window of "
        "rfi_window dumps (no delay)"),
    Key("flagging", "rfi_window", int_at_least(1), LIVE_WINDOW,
        "dumps in the RFI window: the dump flagged and those before it"),
    Key("flagging", "saturated_fraction", fraction, DEFAULT_THRESHOLDS.saturated_fraction,
        "fraction of sample parts at the quantiser's extremes above which an input is "
        "saturated"),
    Key("flagging", "saturated_excess", above_one, DEFAULT_THRESHOLDS.saturated_excess,
        "... and above this factor times the array's median fraction (saturation in every "
        "input at once is RFI)"),
    Key("flagging", "high_power_factor", above_one, DEFAULT_THRESHOLDS.high_power_factor,
        "power above this factor times the array's median: high_power"),
    Key("flagging", "low_power_factor", above_one, DEFAULT_THRESHOLDS.low_power_factor,
        "power below the array's median divided by this factor: low_power"),
    Key("flagging", "decorrelated_sigma", positive_float, DEFAULT_THRESHOLDS.decorrelated_sigma,
        "standard deviations above a noise correlation's mean under which an input counts as "
        "uncorrelated with another (decorrelated: with every other while the array sees a "
        "common signal)"),
    Key("monitor", "metrics_port", int_at_least(0, 65535), None,
        "Prometheus endpoint port (0: any free port; absent: off)"),
    Key("monitor", "metrics_address", ipv4, "127.0.0.1",
        "address the metrics endpoint binds (0.0.0.0 for every interface)"),
    Key("monitor", "like_top_s", non_negative_float, 10.0, "like_top line interval (0: off)"),
    Key("display", "address", host_port, None,
        "serve the signal display (docs/display.md) at ADDRESS:PORT (PORT alone: loopback; "
        "port 0: a free one, the URL is logged); absent: off", "display"),
    Key("display", "history", int_at_least(1, 4096), 64,
        "dumps the display keeps (its waterfall's depth; memory: one dump's UVH5 rows each)",
        "display-history"),
)
KEYS_BY_NAME: dict[str, Key] = {k.name: k for k in KEYS}
assert len(KEYS_BY_NAME) == len(KEYS), "key names must be unique (they are flag names)"
SECTIONS = tuple(dict.fromkeys(k.section for k in KEYS if k.section))


@dataclass(frozen=True)
class ServiceConfig:
    """A validated configuration; ``values`` holds every key by name (defaults filled in), as
    the file and flags give it (nothing of the machine's: a re-read compares them key by key)."""

    values: dict[str, Any]
    array: ArrayDescription
    geometry: Geometry  # the backend's
    wire: Geometry | MeerkatFormat  # what the capture receives
    source_file: Path | None = None
    overrides: dict[str, Any] = field(default_factory=dict)  # the flags given, by key name
    #: The backend :func:`probe_environment` found for ``correlator.backend`` (``auto``
    #: resolved); None before that probe.
    probed_backend: str | None = None

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["values"][name]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def sky(self) -> dict[str, float]:
        """The capture's header fields for this instance (freq0 of its first channel)."""
        v = self.values
        return {"sync_time": v["sync_time"], "fs_hz": v["fs_hz"],
                "freq0_hz": v["freq0_hz"] + v["chan0"] * v["chan_bw_hz"],
                "chan_bw_hz": v["chan_bw_hz"]}

    @property
    def backend_choice(self) -> tuple[str, dict[str, Any] | None]:
        """(backend name or "auto", constructor options): the native backend by name when
        ``correlator.threads`` is set (validated: only then does it apply), or when
        ``cpu.xengine`` is and the probe found the native backend: one worker per core given."""
        v = self.values
        threads = v["threads"]
        if threads is None and v["xengine"] is not None and self.probed_backend == "native":
            threads = len(v["xengine"])
        if threads is None:
            return v["backend"], None
        return "native", {"nthreads": threads}

    @property
    def flagging(self) -> Flagging | None:
        """The chain's :class:`~xengine_block.blocks.chain.Flagging`, or None (off)."""
        v = self.values
        if not (v["health"] or v["inputs"] or v["rfi"]):
            return None
        return Flagging(v["inputs"], v["rfi"], v["rfi_window"], Thresholds(
            v["saturated_fraction"], v["saturated_excess"], v["high_power_factor"],
            v["low_power_factor"], v["decorrelated_sigma"]), judge=True)

    @property
    def dump_spectra(self) -> int:
        v = self.values
        if v["integration_spectra"] is not None:
            return v["integration_spectra"]
        return (v["ninteg"] or 1) * self.geometry.npacket * self.geometry.nspectra_pkt

    @property
    def dump_seconds(self) -> float:
        return self.dump_spectra / self.values["fs_hz"]

    @property
    def samples_between_spectra(self) -> int:
        """ADC samples per spectrum (timestamps of MeerKAT heaps, in and out)."""
        v = self.values
        return v["samples_between_spectra"] or 2 * self.total_channels

    @property
    def total_channels(self) -> int:
        v = self.values
        return v["total_channels"] or v["chan0"] + v["nchan"]

    @property
    def dumps_per_file(self) -> int | None:
        """Rotation in dumps (``seconds_per_file`` rounded to whole dumps, at least one)."""
        v = self.values
        if v["seconds_per_file"] is not None:
            return max(1, round(v["seconds_per_file"] / self.dump_seconds))
        return v["dumps_per_file"]

    def reloaded(self) -> tuple[ServiceConfig, dict[str, Any], list[str]]:
        """The configuration file re-read (SIGHUP), with the same flags overriding it: (the
        running configuration with the new values of the keys that can change live, those
        keys -> new value, the dotted names of the other keys that changed: refused, their
        running values stay). Raises as :func:`parse_config` (nothing applies then). Probes
        nothing (:func:`probe_environment`): the keys it checks are restart-only, and a changed
        one is refused by name like any other."""
        if self.source_file is None:
            raise ConfigError("(file)", "the service was started without a configuration file")
        new = parse_config(self.source_file, self.overrides)
        changed = [k for k in KEYS if new.values[k.name] != self.values[k.name]]
        applied = {k.name: new.values[k.name] for k in changed if k.live}
        refused = [k.dotted for k in changed if not k.live]
        return replace(self, values={**self.values, **applied}), applied, refused


def add_flags(p: argparse.ArgumentParser) -> None:
    """One flag per key (default None: the config file's value, else the key's default)."""
    for k in KEYS:
        if k.name == "sources":
            p.add_argument(k.flag, dest="sources", action="append", type=udp_endpoint,
                           metavar="udp://ADDR:PORT",
                           help=f"[{k.dotted}] {k.help}; repeat for more (replaces the file's)")
        elif k.parse is boolean:
            p.add_argument(k.flag, dest=k.name, type=boolean, metavar="true|false",
                           help=f"[{k.dotted}] {k.help}")
        else:
            p.add_argument(k.flag, dest=k.name, type=k.parse, metavar=k.name.upper(),
                           help=f"[{k.dotted}] {k.help}")


def read_toml(path: str | Path) -> dict[str, Any]:
    """The file's keys by name; unknown sections and keys (typos) are errors."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("(file)", f"not valid TOML: {exc}") from None
    except UnicodeDecodeError as exc:  # TOML is UTF-8 (tomllib decodes before parsing)
        line = exc.object.count(b"\n", 0, exc.start) + 1
        raise ConfigError("(file)", f"not UTF-8, as TOML must be: byte "
                                    f"0x{exc.object[exc.start]:02x} on line {line}") from None
    out: dict[str, Any] = {}
    for name, value in doc.items():
        if isinstance(value, dict):
            if name not in SECTIONS:
                raise ConfigError(name, f"unknown section; expected one of {list(SECTIONS)}")
            for kname, kvalue in value.items():
                key = KEYS_BY_NAME.get(kname)
                if key is None or key.section != name:
                    raise ConfigError(f"{name}.{kname}", "unknown key")
                out[kname] = kvalue
        else:
            key = KEYS_BY_NAME.get(name)
            if key is None or key.section:
                where = f" (it belongs in [{key.section}])" if key else ""
                raise ConfigError(name, f"unknown key{where}")
            out[name] = value
    return out


def load_config(path: str | Path | None, overrides: dict[str, Any] | None = None) -> ServiceConfig:
    """Read, merge flag ``overrides`` (already parsed; None = not given), validate everything,
    the machine included (:func:`parse_config`, then :func:`probe_environment`).

    Raises :class:`ConfigError` naming the first bad key; ``OSError`` if the file is unreadable.
    """
    return probe_environment(parse_config(path, overrides))


def parse_config(path: str | Path | None, overrides: dict[str, Any] | None = None
                 ) -> ServiceConfig:
    """Read, merge flag ``overrides`` (already parsed; None = not given), validate every key
    and cross-key rule, probing nothing (the array file, where given, is read: it is part of
    the configuration). Raises as :func:`load_config`."""
    raw = read_toml(path) if path is not None else {}
    values: dict[str, Any] = {}
    for k in KEYS:
        if k.name in raw:
            try:
                values[k.name] = k.parse(raw[k.name])
            except argparse.ArgumentTypeError as exc:
                raise ConfigError(k.dotted, str(exc)) from None
        else:
            values[k.name] = k.default
    for name, value in (overrides or {}).items():
        if value is not None and name in KEYS_BY_NAME:
            values[name] = tuple(value) if name == "sources" else value
    for k in KEYS:
        if values[k.name] is REQUIRED:
            raise ConfigError(k.dotted, f"is required (or give {k.flag})")
    base = Path(path).parent if path is not None else Path.cwd()
    for name in ("array", "directory"):
        if values[name] is not None and not values[name].is_absolute():
            values[name] = base / values[name]
    if values["directory"] is None and values["spead"] is None:
        raise ConfigError("output.directory", "is required (or give --directory), unless "
                                              "output.spead sends the dumps")
    if values["chan_bw_hz"] is None:
        values["chan_bw_hz"] = values["fs_hz"]
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    return ServiceConfig(values, *_derived(values), source_file=Path(path) if path else None,
                         overrides=given)


def probe_environment(config: ServiceConfig) -> ServiceConfig:
    """``config`` checked against this machine: the output directory takes a new file (a
    probe file is created and removed, as every command's output options do) and
    ``correlator.backend`` is usable for the geometry (``auto`` resolved: the backends are
    probed, the NPU's included), ``correlator.threads`` only with the native one. Returns it
    with :attr:`ServiceConfig.probed_backend` set; raises :class:`ConfigError` naming the key."""
    v = config.values
    why = v["directory"] is not None and directory_problem(v["directory"])
    if why:
        raise ConfigError("output.directory", why)
    try:
        backend = choose_backend(v["backend"], config.geometry)[0]
    except (BackendUnavailable, KeyError, ValueError) as exc:
        raise ConfigError("correlator.backend", str(exc).strip("'\"")) from None
    if v["threads"] is not None and backend != "native":
        raise ConfigError("correlator.threads", f"applies to the native backend; this "
                                                f"configuration runs {backend!r}")
    if v["rfi"] is not None:
        from ..health.rfi import AOFlaggerRfi, RfiUnavailable

        try:
            AOFlaggerRfi(config.array.telescope_name, parse_rfi(v["rfi"])[1])
        except RfiUnavailable as exc:
            raise ConfigError("flagging.rfi", str(exc)) from None
    return replace(config, probed_backend=backend)


def _derived(v: dict[str, Any]) -> tuple[ArrayDescription, Geometry, Geometry | MeerkatFormat]:
    """Cross-key rules: array, wire format, geometry, integration, rotation, outputs,
    multicast interface (the backend's are :func:`probe_environment`'s)."""
    if v["array"] is not None and v["nant"] is not None:
        raise ConfigError("nant", "give either 'array' or 'nant', not both")
    try:
        array = ArrayDescription.from_toml(v["array"]) if v["array"] else default_array(v["nant"])
    except (ValueError, OSError) as exc:
        raise ConfigError("array", str(exc)) from None
    if v["ninteg"] is not None and v["integration_spectra"] is not None:
        raise ConfigError("correlator.integration_spectra", "give ninteg or "
                                                            "integration_spectra, not both")
    if v["format"] == "meerkat":
        wire, geometry = _meerkat(v, array)
    else:
        fields = ("nchan", "npacket", "sample_bits", "nibble_order")
        try:
            geometry = wire = Geometry(nstream=array.nstream, **{k: v[k] for k in fields})
        except GeometryError as exc:
            field = exc.field if exc.field in fields else "nchan"
            if exc.field == "nstream":
                field = "array" if v["array"] else "nant"
            raise ConfigError(KEYS_BY_NAME[field].dotted, str(exc)) from None
        _check_integration(v, geometry.nspectra_pkt, geometry.sample_bits, "480-spectrum packets")
    if v["dumps_per_file"] is not None and v["seconds_per_file"] is not None:
        raise ConfigError("output.seconds_per_file", "give dumps_per_file or seconds_per_file, "
                                                     "not both")
    if v["quicklook"] and v["directory"] is None:
        raise ConfigError("output.quicklook", "needs output.directory to write its PNGs to")
    total = v["total_channels"] or v["chan0"] + v["nchan"]
    if v["spead"] is not None and (v["chan0"] % v["nchan"] or total % v["nchan"]):
        raise ConfigError("output.spead", f"MeerKAT heap counters need chan0 ({v['chan0']}) and "
                                          f"total_channels ({total}) to be multiples of nchan "
                                          f"({v['nchan']})")
    sources = v["sources"]
    if len(set(sources)) != len(sources):
        raise ConfigError("capture.sources", "lists a source twice")
    if any(s.multicast for s in sources) and v["interface"] is None:
        raise ConfigError("capture.interface", "is required to join a multicast group "
                                               "(the IPv4 address of the receiving NIC)")
    return array, geometry, wire


def _check_integration(v: dict[str, Any], heap_spectra: int, bits: int, what: str) -> int | None:
    """The X-engine's integration in spectra for ``correlator.integration_spectra`` (whole
    heaps), via the chain's split; None when not given."""
    from ..blocks.chain import split_integration

    n = v["integration_spectra"]
    if n is None:
        return None
    if n % heap_spectra:
        raise ConfigError("correlator.integration_spectra", f"{n} is not a whole number of "
                                                            f"{what} ({heap_spectra} spectra)")
    return split_integration(n, heap_spectra, max_spectra_int32(bits))[0]


def _meerkat(v: dict[str, Any], array: ArrayDescription) -> tuple[MeerkatFormat, Geometry]:
    """``capture.format = "meerkat"``: the F-engine heaps and the backend geometry for them."""
    from ..blocks.headers import layout_geometry

    if v["sample_bits"] != 8:
        raise ConfigError("capture.sample_bits", "format meerkat carries 8-bit samples "
                                                 "(katgpucbf's X-engine input)")
    nchan, chan0 = v["nchan"], v["chan0"]
    if v["total_channels"] is None and v["samples_between_spectra"] is None and chan0 > 0:
        raise ConfigError("capture.total_channels", "is required with format meerkat when "
                                                    "chan0 > 0 (samples_between_spectra is "
                                                    "2 * total_channels)")
    total = v["total_channels"] or chan0 + nchan
    if chan0 % nchan:
        raise ConfigError("capture.chan0", f"{chan0} is not a multiple of nchan ({nchan}): an "
                                           f"X-engine receives whole F-engine substreams")
    if chan0 + nchan > total or total % nchan:
        raise ConfigError("capture.total_channels", f"{total} must be a multiple of nchan "
                                                    f"({nchan}) and >= chan0 + nchan")
    try:
        wire = MeerkatFormat(array.nant, nchan, v["samples_between_spectra"] or 2 * total,
                             v["spectra_per_heap"])
    except FormatError as exc:
        raise ConfigError(KEYS_BY_NAME[exc.field].dotted, str(exc)) from None
    if v["ninteg"] is not None:
        raise ConfigError("correlator.ninteg", "counts our X-engine frames; with format "
                                               "meerkat give integration_spectra")
    if v["integration_spectra"] is None:  # about a second of whole heaps
        v["integration_spectra"] = max(1, round(v["fs_hz"] / wire.spectra_per_heap)) \
            * wire.spectra_per_heap
    xspectra = _check_integration(v, wire.spectra_per_heap, 8, "heaps")
    try:
        geometry = layout_geometry(wire.sample_layout, None, xspectra, "capture")
    except ValueError as exc:
        raise ConfigError("capture.nchan", str(exc)) from None
    return wire, geometry
