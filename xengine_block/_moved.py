"""Old import paths of modules that moved, kept working for one release with a
``DeprecationWarning`` naming the new path.

The table is the one record of what moved where; an import of an old name gets the new module
itself (one module object, so ``isinstance`` checks and module state are shared). The module
keeps its own ``__spec__`` (the import system sets the alias's spec on whatever
``create_module`` returns; ``exec_module`` puts the original back), so ``importlib.reload`` and
anything else that reads the spec see the new name.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Callable
from types import ModuleType

#: old module name -> new module name (moved in 0.2; the old names go in the release after).
MOVED: dict[str, str] = {
    "xengine_block.layout": "xengine_block.frames",
    "xengine_block.chain": "xengine_block.blocks.chain",
    "xengine_block.blocks.xengine_input": "xengine_block.blocks.headers",
    "xengine_block.readers.correlate": "xengine_block.reprocess.recording_correlator",
    "xengine_block.service.correlate": "xengine_block.service.live",
    "xengine_block.service.sources": "xengine_block.service.endpoints",
    "xengine_block.capture.sources": "xengine_block.capture.transports",
    "xengine_block.outputs.quicklook": "xengine_block.outputs.quicklook_png",
    "xengine_block.tools": "xengine_block.console",
    "xengine_block.tools.argtypes": "xengine_block.console.argtypes",
    "xengine_block.tools.progress": "xengine_block.console.progress",
    "xengine_block.tools.benchmarking": "xengine_block.bench.correlator",
    "xengine_block.tools.library_peers": "xengine_block.bench.peers",
    "xengine_block.tools.machine_limits": "xengine_block.bench.machine",
    "xengine_block.tools.reprocess": "xengine_block.reprocess.jobs",
    "xengine_block.tools.tasks": "xengine_block.reprocess.tasks",
    "xengine_block.outputs.spead_block": "xengine_block.blocks.spead_output",
    "xengine_block.readers.bifrost_source": "xengine_block.bifrost.recording_source",
    "xengine_block.npu.cache": "xengine_block.user_cache",
    # the NPU package split by role (design and validation, model and trace, host and emulator)
    "xengine_block.npu.plan": "xengine_block.npu.design.plan",
    "xengine_block.npu.validate": "xengine_block.npu.design.validate",
    "xengine_block.npu.limits": "xengine_block.npu.design.limits",
    "xengine_block.npu.build": "xengine_block.npu.design.build",
    "xengine_block.npu.aiecc": "xengine_block.npu.design.aiecc",
    "xengine_block.npu.artifacts": "xengine_block.npu.design.artifacts",
    "xengine_block.npu.show_design": "xengine_block.npu.design.show_design",
    "xengine_block.npu.perfmodel": "xengine_block.npu.model.perfmodel",
    "xengine_block.npu.perftrace": "xengine_block.npu.model.perftrace",
    "xengine_block.npu.hostio": "xengine_block.npu.host.hostio",
    "xengine_block.npu.hostkernel": "xengine_block.npu.host.hostkernel",
    "xengine_block.npu.nativering": "xengine_block.npu.host.nativering",
    "xengine_block.npu.simdevice": "xengine_block.npu.host.simdevice",
    "xengine_block.npu.emulate": "xengine_block.npu.host.emulate",
    "xengine_block.npu.kernel_model": "xengine_block.npu.host.kernel_model",
    "xengine_block.npu.blockpairs": "xengine_block.npu.host.blockpairs",
}


def renamed_names(module: str, renamed: dict[str, str],
                  namespace: dict[str, object]) -> Callable[..., object]:
    """A module ``__getattr__`` that gives each old name in ``renamed`` (old -> new) the new
    name's value from ``namespace`` (the module's globals), with a ``DeprecationWarning``
    naming the new one, for one more release."""

    def __getattr__(name: str, stacklevel: int = 2) -> object:
        if name in renamed:
            warnings.warn(f"{module}.{name} is {renamed[name]}; the old name will be removed in "
                          f"the next release", DeprecationWarning, stacklevel=stacklevel)
            return namespace[renamed[name]]
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__


def moved_names(module: str, moved: dict[str, str], renamed: dict[str, str] | None = None,
                namespace: dict[str, object] | None = None) -> Callable[..., object]:
    """A module ``__getattr__`` that gives each name in ``moved`` (name -> the module it now
    lives in, under the same name) that module's value, and each old name in ``renamed`` the
    new name's value from ``namespace`` (as :func:`renamed_names`), each with a
    ``DeprecationWarning`` naming the new path, for one more release."""
    also = renamed_names(module, renamed or {}, namespace or {})

    def __getattr__(name: str) -> object:
        if name in moved:
            warnings.warn(f"{module}.{name} has moved to {moved[name]}.{name}; the old path "
                          f"will be removed in the next release", DeprecationWarning,
                          stacklevel=2)
            return getattr(importlib.import_module(moved[name]), name)
        return also(name, 3)

    return __getattr__


class RenamedAttribute:
    """A class attribute renamed in 0.2 (e.g. ``Capture.layout`` -> ``plan``): reading or setting
    the old name works for one more release, with a ``DeprecationWarning`` naming the new one."""

    def __init__(self, new: str) -> None:
        self.new = new
        self.old = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.old = name

    def _warn(self, owner: type) -> None:
        warnings.warn(f"{owner.__name__}.{self.old} is now {owner.__name__}.{self.new}; the old "
                      f"name will be removed in the next release", DeprecationWarning,
                      stacklevel=3)

    def __get__(self, obj: object, owner: type | None = None) -> object:
        if obj is None:
            return self
        self._warn(type(obj))
        return getattr(obj, self.new)

    def __set__(self, obj: object, value: object) -> None:
        self._warn(type(obj))
        setattr(obj, self.new, value)


class _Alias(importlib.abc.Loader):
    def __init__(self, new: str) -> None:
        self.new = new
        self.spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(f"{spec.name} has moved to {self.new}; the old name will be removed in "
                      f"the next release", DeprecationWarning, stacklevel=2)
        module = importlib.import_module(self.new)
        self.spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run (the new module is already imported); give it back its own spec,
        which the import system replaced with the alias's after ``create_module``."""
        module.__spec__ = self.spec


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path, target=None):
        new = MOVED.get(fullname)
        return importlib.util.spec_from_loader(fullname, _Alias(new)) if new else None


def install() -> None:
    """Put the finder of the old names on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _MovedFinder())  # before PathFinder: a stale directory of
        # an old package (its __pycache__ left by a checkout) must not shadow the alias
