"""Option validation shared by every command line (``xengine`` subcommands, ``pipelines/*.py``).

Each checker is an argparse ``type=``: a bad value stops the parser with argparse's one line
``prog: error: argument --opt: why`` and exit status 2, before any side effect. Checks that need
several options (a geometry, a port to bind) raise :class:`UsageError` naming the option; the
``xengine`` front end and the scripts turn it into the same line and status
(:func:`usage_errors`).

Output paths are checked by trying: a temporary file is created (and removed) in the directory
that will be written, or a temporary directory in the nearest existing ancestor of one that will
be created, and a file to be written is opened (an existing one for appending, unchanged; a new
one created and removed), its sidecars too. So a path fails here whatever the reason the
kernel gives (ENOENT in /proc, EACCES, EROFS, a file where a directory belongs, a name too long)
and as root too, where permission bits say nothing; nothing is left behind.
:func:`directory_problem` and :func:`file_problem` give the reason as text, for checks outside
argparse (config files).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import socket
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, NoReturn

from ..array import ArrayDescription, ArrayError, default_array
from ..geometry import NIBBLE_ORDERS, SAMPLE_BITS, Geometry, GeometryError


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, but a usage error is one line (``prog: error: argument --x: why``),
    not the whole usage text first; exit status 2 as always. Subparsers inherit the class."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (--help for usage)\n")


class UsageError(ValueError):
    """A bad command-line value found after parsing; ``option`` is the option to blame."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"argument {option}: {message}")
        self.option = option


@contextlib.contextmanager
def usage_errors(parser: argparse.ArgumentParser) -> Iterator[None]:
    """Report a :class:`UsageError` raised inside as ``parser.error`` (one line, exit 2)."""
    try:
        yield
    except UsageError as exc:
        parser.error(str(exc))


def integer(low: int | None = None, high: int | None = None) -> Callable[[str], int]:
    """An integer in ``[low, high]`` (either bound optional)."""
    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if (low is not None and value < low) or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be {_range(low, high)}, got {value}")
        return value
    parse.__name__ = "integer"  # argparse names the type in some messages
    return parse


def number(low: float | None = None, high: float | None = None, *,
           exclusive_low: bool = False) -> Callable[[str], float]:
    """A finite number in ``[low, high]`` (``(low, high]`` with ``exclusive_low``)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be finite, got {text}")
        if (low is not None and (value < low or (exclusive_low and value == low))) or (
                high is not None and value > high):
            raise argparse.ArgumentTypeError(
                f"must be {_range(low, high, exclusive_low)}, got {text}")
        return value
    parse.__name__ = "number"
    return parse


def _range(low: float | None, high: float | None, exclusive_low: bool = False) -> str:
    if high is None:
        return f"{'>' if exclusive_low else '>='} {low:g}"
    if low is None:
        return f"<= {high:g}"
    return f"in {'(' if exclusive_low else '['}{low:g}, {high:g}]"


positive_int = integer(1)
nonnegative_int = integer(0)
positive_number = number(0.0, exclusive_low=True)
nonnegative_number = number(0.0)
port = integer(0, 65535)
seed = integer(0, 2**63 - 1)


def sample_bits(value: Any) -> int:
    """8 (ci8) or 4 (ci4): the text of ``--bits`` or a TOML integer, else one clear line."""
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(text, str) or text.strip() not in {str(b) for b in SAMPLE_BITS}:
        raise argparse.ArgumentTypeError(
            f"sample bits must be one of {', '.join(map(str, SAMPLE_BITS))} "
            f"(complex int8 or int4), got {value!r}")
    return int(text)


def ipv4_address(text: str) -> str:
    """An IPv4 address or a host name that resolves to one (here, without a network)."""
    try:
        infos = socket.getaddrinfo(text, None, socket.AF_INET, socket.SOCK_DGRAM)
    except (socket.gaierror, UnicodeError, ValueError) as exc:
        raise argparse.ArgumentTypeError(f"not an IPv4 address or known host: {text!r} "
                                         f"({exc})") from None
    return str(infos[0][4][0]) if infos else text


def _nearest_existing(path: Path) -> tuple[Path | None, str | None]:
    """(the nearest existing ancestor of ``path``, or ``path`` itself; why none can be used)."""
    ancestor = path
    while True:
        try:
            ancestor.lstat()
        except (FileNotFoundError, NotADirectoryError):  # the latter: a file on the way
            ancestor = ancestor.parent
            continue
        except OSError as exc:  # EACCES on a component, ENOTDIR, ENAMETOOLONG, ELOOP ...
            return None, f"cannot look up {ancestor}: {exc.strerror or exc}"
        break
    if ancestor.is_symlink() and not ancestor.exists():
        return None, f"{ancestor} is a dangling link"
    if not ancestor.is_dir() and ancestor != path:
        return None, f"{ancestor} exists and is not a directory"
    return ancestor, None


def directory_problem(path: Path) -> str | None:
    """Why ``path`` cannot be used as an output directory (None: it can).

    An existing directory must take a new file (one is created and removed); a missing one must
    be creatable: a directory is created and removed in its nearest existing ancestor."""
    ancestor, why = _nearest_existing(path)
    if why:
        return why
    assert ancestor is not None
    if not ancestor.is_dir():
        return f"{path} exists and is not a directory"
    try:
        if ancestor == path:
            fd, probe = tempfile.mkstemp(prefix=".xengine-probe-", dir=path)
            os.close(fd)
            os.unlink(probe)
        else:
            os.rmdir(tempfile.mkdtemp(prefix=".xengine-probe-", dir=ancestor))
    except OSError as exc:
        what = f"cannot write in {path}" if ancestor == path else (
            f"cannot create {path}: no directory can be made in {ancestor}")
        return f"{what}: {exc.strerror or exc}"
    return None


def file_problem(path: Path) -> str | None:
    """Why ``path`` cannot be written as a file (None: it can): an existing one is opened for
    appending (its content unchanged), a new one created and removed, a missing directory
    checked as :func:`directory_problem` does."""
    if not str(path) or str(path).endswith(os.sep):
        return f"expected a file name, got {str(path)!r}"
    ancestor, why = _nearest_existing(path)
    if why:
        return why
    if ancestor == path:
        if path.is_dir():
            return f"{path} is a directory"
        flags = os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK  # no wait on a FIFO
    elif ancestor == path.parent:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    else:
        return directory_problem(path.parent)
    try:
        os.close(os.open(path, flags, 0o644))
    except OSError as exc:
        return f"cannot write {path}: {exc.strerror or exc}"
    if flags & os.O_CREAT:
        os.unlink(path)
    return None


def output_dir(text: str) -> Path:
    """A directory that exists and takes new files, or can be created (see the module doc)."""
    if not text:
        raise argparse.ArgumentTypeError("empty path")
    path = Path(text)
    why = directory_problem(path)
    if why:
        raise argparse.ArgumentTypeError(why)
    return path


def output_file(text: str) -> Path:
    """A file that can be written (see the module doc)."""
    why = file_problem(Path(text)) if text else "empty path"
    if why:
        raise argparse.ArgumentTypeError(why)
    return Path(text)


def recording_file(text: str) -> Path:
    """A pcap recording to write: the file and its JSON sidecar (capture.recording)."""
    from ..capture.recording import metadata_path
    path = output_file(text)
    why = file_problem(metadata_path(path))
    if why:
        raise argparse.ArgumentTypeError(f"its sidecar: {why}")
    return path


def input_file(text: str) -> Path:
    """An existing file that opens for reading (tried: as root permission bits say nothing)."""
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text!r}: no such file" if not path.exists()
                                         else f"{text!r} is not a file")
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not readable: "
                                         f"{exc.strerror or exc}") from None
    return path


def input_path(text: str) -> Path:
    """An existing file that opens for reading, or a directory that can be listed."""
    path = Path(text)
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{text!r}: no such file or directory")
    if not path.is_dir():
        return input_file(text)
    try:
        with os.scandir(path):
            pass
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} cannot be listed: "
                                         f"{exc.strerror or exc}") from None
    return path


def backend_name(text: str) -> str:
    """``auto`` or a registered correlator backend (whether it can run is checked later)."""
    from ..backends import REGISTRY
    if text != "auto" and text not in REGISTRY:
        raise argparse.ArgumentTypeError(
            f"unknown backend {text!r}; choose 'auto' or one of {sorted(REGISTRY)}")
    return text


def phase_centre(text: str) -> str:
    """``zenith`` or ``RA,DEC`` (degrees, ICRS): a Measurement Set's phase centre."""
    from ..outputs.phasing import PhaseCentre

    try:
        return str(PhaseCentre.parse(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def measurement_sets_available() -> str | None:
    """Why Measurement Sets cannot be written here (python-casacore missing), or None."""
    try:
        import casacore.tables  # noqa: F401
    except ImportError as exc:
        return (f"writing Measurement Sets needs python-casacore ({exc}): pip install "
                "'xengine_block[ms]'")
    return None


def geometry(options: Mapping[str, str], **fields: int) -> Geometry:
    """A Geometry from command-line values; a GeometryError becomes a UsageError naming the
    option of the field at fault (``options`` maps field -> option, e.g. nchan -> --nchan)."""
    try:
        return Geometry(**fields)
    except GeometryError as exc:
        option = options.get(exc.field or "", "/".join(options.values()) or "geometry")
        raise UsageError(option, str(exc)) from None


def add_sample_format_args(p: argparse.ArgumentParser) -> None:
    """``--bits`` and ``--nibble-order``: the F-engines' sample format (Geometry's
    ``sample_bits`` / ``nibble_order``), for every command that reads or makes their packets."""
    p.add_argument("--bits", type=sample_bits, default=8,
                   help="bits per re/im part the F-engines send: 8 (ci8) or 4 (ci4)")
    p.add_argument("--nibble-order", choices=NIBBLE_ORDERS, default="re_high",
                   help="ci4: which nibble of a byte holds the real part")


def array_of(a: argparse.Namespace) -> ArrayDescription:
    """The array of ``--array`` (a TOML file), else the first ``--nant`` antennas of the
    default; UsageError names the option."""
    try:
        return ArrayDescription.from_toml(a.array) if a.array else default_array(a.nant)
    except (ArrayError, OSError) as exc:
        raise UsageError("--array" if a.array else "--nant", str(exc)) from None


def array_geometry(a: argparse.Namespace) -> tuple[ArrayDescription, Geometry]:
    """The array (``--array`` TOML, else the first ``--nant`` of the default) and the Geometry
    of ``--nchan``/``--npacket``/``--bits``/``--nibble-order`` for it; UsageError names the
    option at fault."""
    array_option = "--array" if a.array else "--nant"
    array = array_of(a)
    g = geometry({"nstream": array_option, "nchan": "--nchan", "npacket": "--npacket",
                  "sample_bits": "--bits"},
                 nstream=array.nstream, nchan=a.nchan, npacket=a.npacket,
                 sample_bits=a.bits, nibble_order=a.nibble_order)
    return array, g
