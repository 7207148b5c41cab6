"""The tree-scanning tests read the repository's files, not what a run or a newcomer left in
the checkout (``tests/helpers/tree.py``): a ``.venv`` inside the checkout, a build directory,
output data."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.helpers import tree

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A small git checkout with a virtual environment, a build and an output run in it."""
    root = tmp_path / "clone"
    for rel, text in {".gitignore": ".venv/\nbuild/\n*.uvh5\n", "README.md": "# x\n",
                      "pkg/mod.py": "x = 1\n", "pkg/new.py": "y = 2\n",
                      ".venv/lib/site-packages/other/mod.py": "see **.py\n",
                      "build/lib/pkg/mod.py": "x = 1\n", "out/run.uvh5": "data",
                      "notes/sub/.gitignore": "draft.md\n", "notes/sub/draft.md": "no\n",
                      "notes/sub/page.md": "yes\n"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run(["git", "-C", str(root), "add", ".gitignore", "README.md", "pkg/mod.py"],
                   check=True)
    return root


WANTED = [".gitignore", "README.md", "notes/sub/.gitignore", "notes/sub/page.md", "pkg/mod.py",
          "pkg/new.py"]


def test_git_lists_tracked_and_addable_files_only(checkout: Path) -> None:
    got = [p.relative_to(checkout).as_posix() for p in tree.repository_files(checkout)]
    assert got == WANTED  # untracked pkg/new.py is in (it would be added), ignored ones not


def test_without_git_the_gitignore_rules_give_the_same_files(checkout: Path, monkeypatch) -> None:
    monkeypatch.setattr(tree.shutil, "which", lambda name: None)  # as if git were absent
    got = [p.relative_to(checkout).as_posix() for p in tree.repository_files(checkout)]
    assert got == WANTED


def test_a_folder_below_the_top_lists_its_own_files(checkout: Path) -> None:
    assert [p.name for p in tree.repository_files(checkout / "pkg")] == ["mod.py", "new.py"]
    assert [p.name for p in tree.repository_files(checkout, "pkg")] == ["mod.py", "new.py"]


def test_the_two_ways_agree_on_this_repository(monkeypatch) -> None:
    if tree._git_files(ROOT) is None:
        pytest.skip("this checkout is not a git work tree (an unpacked sdist)")
    with_git = tree.repository_files(ROOT)
    monkeypatch.setattr(tree.shutil, "which", lambda name: None)
    assert tree.repository_files(ROOT) == with_git
