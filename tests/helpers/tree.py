"""The files of the checkout, as git sees them: what the tree-scanning tests read.

A newcomer's checkout holds more than the repository: a ``.venv`` made inside it, a ``build/``
directory, data a run left behind. Tests that read "every file of ours" (the references check,
the layering check) must read the repository's files, not those, so they ask git which files
are tracked or would be added (``git ls-files --cached --others --exclude-standard``: tracked,
plus untracked files that ``.gitignore`` does not exclude). Where there is no git work tree (an
unpacked sdist, git not installed) the same ``.gitignore`` rules are applied with ``pathspec``,
the library that implements git's matching.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


def _git_files(root: Path) -> list[str] | None:
    """Paths (relative to ``root``) below ``root`` that git tracks or would add; None where
    ``root`` is not in a git work tree, git is absent, or git lists nothing there (an installed
    package inside an ignored folder)."""
    git = shutil.which("git")
    if git is None:
        return None
    inside = subprocess.run([git, "-C", str(root), "rev-parse", "--is-inside-work-tree"],
                            capture_output=True, text=True)
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        return None
    listed = subprocess.run([git, "-C", str(root), "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], capture_output=True, text=True, check=True)
    return [p for p in listed.stdout.split("\0") if p] or None


def _ignore_rule_files(root: Path) -> list[str]:
    """Every file under ``root`` that the ``.gitignore`` files (and ``.git/`` itself) do not
    exclude, matched with git's rules by ``pathspec``."""
    import pathspec

    out = []
    specs: dict[Path, pathspec.GitIgnoreSpec] = {}

    def ignored(path: Path, is_dir: bool) -> bool:
        for base, spec in specs.items():
            if path.is_relative_to(base):
                rel = path.relative_to(base).as_posix() + ("/" if is_dir else "")
                if spec.match_file(rel):
                    return True
        return False

    def walk(directory: Path) -> None:
        rules = directory / ".gitignore"
        if rules.is_file():
            specs[directory] = pathspec.GitIgnoreSpec.from_lines(rules.read_text().splitlines())
        for entry in sorted(directory.iterdir()):
            if entry.name == ".git" or ignored(entry, entry.is_dir()):
                continue
            if entry.is_dir() and not entry.is_symlink():
                walk(entry)
            elif entry.is_file():
                out.append(entry.relative_to(root).as_posix())

    walk(root)
    return out


def repository_files(root: Path, under: str = "") -> list[Path]:
    """The repository's files under ``root`` (optionally only those below ``under``, a relative
    folder), sorted: tracked or addable per git, never what ``.gitignore`` excludes (a virtual
    environment, a build directory, output data left in the checkout)."""
    names = _git_files(root)
    if names is None:
        names = _ignore_rule_files(root)
    prefix = under.rstrip("/") + "/" if under else ""
    return sorted(root / n for n in names if n.startswith(prefix) and (root / n).is_file())
