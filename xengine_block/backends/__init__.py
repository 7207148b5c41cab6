"""Correlator backends behind one interface, chosen by name or ``auto``.

Backends register themselves here by name. ``auto`` picks the available backend with the highest
priority (the NPU when usable, else the fastest exact CPU backend) and says why.
"""

from __future__ import annotations

import importlib
import logging

from ..geometry import Geometry
from .base import Backend, BackendUnavailable

log = logging.getLogger(__name__)

#: name -> "module:Class"; modules import lazily so a missing optional dependency
#: (pyxrt, the compiled extension) only affects its own backend.
REGISTRY: dict[str, str] = {
    "cpu": "xengine_block.backends.cpu:CpuBackend",
    "native": "xengine_block.backends.native:NativeBackend",
    "emulator": "xengine_block.backends.emulator:EmulatorBackend",
    "npu": "xengine_block.backends.npu:NpuBackend",
}


def backend_class(name: str) -> type[Backend]:
    if name not in REGISTRY:
        raise ValueError(f"unknown backend {name!r}; choose one of {sorted(REGISTRY)} or 'auto'")
    module, cls = REGISTRY[name].split(":")
    return getattr(importlib.import_module(module), cls)


def availability(geometry: Geometry | None = None) -> dict[str, tuple[bool, str]]:
    """name -> (usable, reason) for every registered backend (for ``geometry`` if given)."""
    result = {}
    for name in REGISTRY:
        try:
            result[name] = backend_class(name).availability(geometry)
        except ImportError as exc:  # optional dependency missing
            result[name] = (False, f"import failed: {exc}")
    return result


def choose_backend(name: str = "auto", geometry: Geometry | None = None) -> tuple[str, str]:
    """Resolve ``auto`` to a backend name, for ``geometry`` if given; returns (name, reason)."""
    if name != "auto":
        usable, reason = backend_class(name).availability(geometry)
        if not usable:
            raise BackendUnavailable(f"backend {name!r} is unavailable: {reason}")
        return name, f"requested by name ({reason})"
    avail = availability(geometry)
    ranked = sorted((n for n in avail if avail[n][0] and backend_class(n).priority > 0),
                    key=lambda n: -backend_class(n).priority)
    if not ranked:
        raise BackendUnavailable(f"no backend is usable: {avail}")
    skipped = "; ".join(f"{n}: {r}" for n, (ok, r) in avail.items() if not ok)
    reason = f"auto: highest-priority usable backend ({avail[ranked[0]][1]})"
    if skipped:
        reason += f"; unavailable: {skipped}"
    return ranked[0], reason


def make_backend(name: str, geometry: Geometry, **kwargs) -> Backend:
    """Instantiate backend ``name`` (not ``auto``) for ``geometry``."""
    return backend_class(name)(geometry, **kwargs)


def get_backend(name: str, geometry: Geometry, **kwargs) -> Backend:
    """Instantiate a backend by name (or ``auto``), logging the choice and the reason."""
    chosen, reason = choose_backend(name, geometry)
    log.info("correlator backend %s: %s", chosen, reason)
    backend = make_backend(chosen, geometry, **kwargs)
    backend.choice_reason = reason
    return backend


__all__ = ["Backend", "BackendUnavailable", "REGISTRY", "availability",
           "backend_class", "choose_backend", "get_backend", "make_backend"]
