"""The package finds ``kernels/`` and ``aie/``: inside itself when installed from a wheel, in the
checkout of the editable install it was imported from otherwise, never some other checkout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xengine_block import kernel_sources


class FakeDist:
    def __init__(self, record: dict | None) -> None:
        self.record = record

    def read_text(self, name: str) -> str | None:
        assert name == "direct_url.json"
        return None if self.record is None else json.dumps(self.record)


def _layout(tmp_path: Path, monkeypatch, dists: list[FakeDist], packaged: bool) -> Path:
    package = tmp_path / "site" / "xengine_block"
    package.mkdir(parents=True)
    if packaged:
        (package / "_kernels" / "aie").mkdir(parents=True)
    monkeypatch.setattr(kernel_sources.resources, "files", lambda name: package)
    monkeypatch.setattr(kernel_sources.metadata, "distributions", lambda name: iter(dists))
    return package


def test_the_installed_package_s_copy_comes_first(tmp_path, monkeypatch):
    package = _layout(tmp_path, monkeypatch, [], packaged=True)
    assert kernel_sources.source_dir.__wrapped__("kernels") == package / "_kernels"


def test_an_editable_install_finds_its_own_checkout(tmp_path, monkeypatch):
    checkout = tmp_path / "checkout"
    (checkout / "kernels").mkdir(parents=True)
    (checkout / "xengine_block").mkdir()
    other = {"url": (tmp_path / "other").as_uri(), "dir_info": {"editable": True}}
    ours = {"url": checkout.as_uri(), "dir_info": {"editable": True}}
    monkeypatch.setattr(kernel_sources.resources, "files", lambda name: checkout / "xengine_block")
    monkeypatch.setattr(kernel_sources.metadata, "distributions",
                        lambda name: iter([FakeDist(None), FakeDist(other), FakeDist(ours)]))
    assert kernel_sources.source_dir.__wrapped__("kernels") == checkout / "kernels"


def test_neither_gives_the_package_s_path_for_callers_to_report(tmp_path, monkeypatch):
    """No packaged copy and no editable record of this package (a wheel whose data was
    deleted, another checkout's record): the absent packaged path, which the kernel's
    availability check reports as missing."""
    (tmp_path / "elsewhere" / "kernels").mkdir(parents=True)
    record = {"url": (tmp_path / "elsewhere").as_uri(), "dir_info": {"editable": True}}
    package = _layout(tmp_path, monkeypatch, [FakeDist(record), FakeDist({"url": "x"})],
                      packaged=False)
    assert kernel_sources.source_dir.__wrapped__("aie") == package / "_aie"
    with pytest.raises(ValueError, match="unknown source tree 'src'"):
        kernel_sources.source_dir.__wrapped__("src")


def test_this_checkout_s_sources_are_found():
    assert kernel_sources.kernel_source("aie/xcorr.cc").is_file()
    assert (kernel_sources.source_dir("aie") / "Makefile").is_file()
