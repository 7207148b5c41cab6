"""Every reference the repository makes to itself resolves inside it.

Code, comments, docstrings, help texts (``xengine ... --help``, ``pipelines/*.py --help``), the
README and the docs name paths (``docs/capture.md``, ``xengine_block/npu/design/plan.py``,
``tests/e2e/test_fx.py``, ...) and sections of the docs (``docs/design.md, "UVH5
conventions"``, ``docs/bifrost.md#header-contract``). Each must exist, so a reader following one
lands somewhere; a renamed file or heading fails here, naming every reference it broke. Nothing
may point outside the repository either: to notes that are not in it, to a sibling checkout, or
to issue numbers no reader can look up. Upstream paths (Bifrost's, BLRI's, katgpucbf's...) are
not ours: a path is taken as upstream when the text just before it names the project it
belongs to.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.tree import repository_files

ROOT = Path(__file__).resolve().parents[1]

#: Top-level folders whose paths are ours: a path starting with one of them must exist.
OUR_TOP = ("docs", "src", "xengine_block", "tests", "benchmarks", "scripts", "pipelines", ".ci")
#: Subpackages named without ``xengine_block/`` in the docs (``capture/receive.py``); not
#: ``bifrost``, whose relative paths are usually Bifrost's own.
SUBPACKAGES = tuple(p.name for p in (ROOT / "xengine_block").iterdir()
                    if (p / "__init__.py").exists() and p.name != "bifrost")
#: Words that, shortly before a path, say it belongs to another project.
UPSTREAM = re.compile(
    r"bifrost|blri|katgpucbf|ska-sa|spead2|mlir-aie|xilinx|\bxrt\b|pyuvdata|baseband|rawspec|"
    r"dspsr|psrdada|\btcc\b|xgpu|cosmic|peano|llvm|numba|astropy|h5py|hdf5|linux|kernel's|"
    r"guppi|mydonsolutions|lwa|daniestevez|mwax_udp2sub|mwalib|mpikat|upstream|github",
    re.IGNORECASE)
#: How far before a path (characters) an upstream name counts.
UPSTREAM_WINDOW = 160
#: A repository named as ``owner/name`` just before a path: the path is in that repository.
REPOSITORY_RE = re.compile(r"\b([\w.-]+)/[\w.-]+[\s`'(,]+$")
#: Build outputs (ignored by git): named in the docs, absent from a clean checkout.
GENERATED = ("docs/_build", "docs/_generated", "xengine_block/_native", "xengine_block/_readbw")

#: Mentions of what is not in the repository. Built from parts so this file does not match.
FORBIDDEN = {
    "the old design notes": re.compile("DESIGN" r"\.md"),
    "notes outside the repository": re.compile(r"NPU_NOTES|HELPERS\.md|shared/(?:vendor|seeds)"),
    "a sibling checkout": re.compile(r"\.\./" "shared"),
    "'the seed' (name the published NPU design)": re.compile(r"\bthe seed\b|\bseed's\b|"
                                                             r"\bseed design\b", re.IGNORECASE),
    "an issue number": re.compile(r"\bissues? #?\d+", re.IGNORECASE),
    "a dated run log or one machine's timing": re.compile(
        r"\b\d{1,2} (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]* 20\d\d\b|"
        r"\b\d{1,2} Dec\b|development VM|\bthis (?:\w+ )?VM\b|dev VM|fresh VM|\bCI VM\b|"
        r"\bCI machine\b|\bproject's (?:[\w-]+ ){0,3}VM\b"),
}
#: Files allowed a forbidden mention, and which: CI's script names where CI finds its vendored
#: tarballs (its documented default).
ALLOWED = {".ci/run": {"a sibling checkout", "notes outside the repository"}}

SUFFIXES = {".py", ".md", ".c", ".h", ".cc", ".sh", ".cfg", ".toml", ".txt", ".in"}
#: Folders of the repository whose files are data or generated, not text of ours.
SKIP_DIRS = {"results"}

PATH_RE = re.compile(r"(?<![\w/.$<{-])((?:\.ci|[A-Za-z_][\w-]*)/[\w./*-]*[\w*])")
#: A docs page followed by one or more quoted section names: ``docs/x.md, "A" and "B"``.
SECTION_RE = re.compile(
    r"(docs/[\w-]+\.md)(?:[,:]\s*|\s+)((?:(?:,|;|\s+and)?\s*[\"'][^\"'\n]{1,80}"
    r"(?:\n[^\"'\n]{0,80})?[\"'])+)")
QUOTED_RE = re.compile(r"[\"']([^\"']+)[\"']")
ANCHOR_RE = re.compile(r"(docs/[\w-]+\.md)#([\w-]+)")
COMMENT_LEAD = re.compile(r"\n\s*(?:#:?|//|\*)?\s*")


@dataclass(frozen=True)
class Text:
    where: str
    text: str


def repository_texts() -> list[Text]:
    """Every text file of ours (code, comments, docs, build and CI scripts): the files git
    tracks or would add, so a virtual environment or build left in the checkout is not read."""
    out = []
    for path in repository_files(ROOT):
        rel = path.relative_to(ROOT)
        if any(part in SKIP_DIRS for part in rel.parts[:-1]) or path.name == Path(__file__).name:
            continue
        if path.suffix in SUFFIXES or path.name in ("Makefile", "run", "LICENSE"):
            out.append(Text(str(rel), path.read_text(errors="replace")))
    return out


def help_texts() -> list[Text]:
    """``xengine --help`` and every subcommand's, and the pipelines' ``--help``."""
    from xengine_block.cli import build_parser, subcommand_parsers

    parser = build_parser()
    out = [Text("xengine --help", parser.format_help())]
    out += [Text(f"xengine {name} --help", sub.format_help())
            for name, sub in subcommand_parsers(parser).items()]
    for script in sorted((ROOT / "pipelines").glob("*.py")):
        run = subprocess.run([sys.executable, str(script), "--help"], capture_output=True,
                             text=True, cwd=ROOT, timeout=120)
        assert run.returncode == 0, f"{script.name} --help failed: {run.stderr[-400:]}"
        out.append(Text(f"pipelines/{script.name} --help", run.stdout))
    return out


def headings(page: Path) -> set[str]:
    """A Markdown page's headings, as compared: no backticks, case and spacing folded."""
    found = set()
    fenced = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            found.add(normalise(line.lstrip("#")))
    return found


def normalise(title: str) -> str:
    return " ".join(title.replace("`", "").split()).casefold()


def names_heading(ref: str, heading: str) -> bool:
    """A reference names a heading by its whole text or by its start up to a word's end
    ("Header contract" names "Header contract: feeding the X-engine from ...")."""
    return heading.startswith(ref) and (len(heading) == len(ref)
                                        or not heading[len(ref)].isalnum())


def anchor(title: str) -> str:
    """MyST's anchor of a heading (GitHub's slug rule)."""
    return re.sub(r"[^\w\- ]", "", title.replace("`", "").strip().lower()).replace(" ", "-")


def upstream_context(text: str, start: int, ref: str) -> bool:
    """Whether the path at ``start`` is another project's: it names that project, the text
    just before it does, or an ``owner/name`` repository stands right before it."""
    if UPSTREAM.search(ref) or UPSTREAM.search(text, max(0, start - UPSTREAM_WINDOW), start):
        return True
    repo = REPOSITORY_RE.search(text[max(0, start - 60):start])
    return bool(repo) and repo.group(1) not in OUR_TOP + SUBPACKAGES


def matches(pattern: Path) -> bool:
    """Whether a path with wildcards names a file of the repository (a pattern that is no
    valid glob, like ``**.py``, names none)."""
    try:
        return bool(list(ROOT.glob(str(pattern.relative_to(ROOT)))))
    except ValueError:
        return False


def path_problems(t: Text) -> list[str]:
    problems = []
    for m in PATH_RE.finditer(t.text):
        ref = m.group(1).rstrip(".")
        top = ref.split("/", 1)[0]
        if top in OUR_TOP:
            candidates = [ROOT / ref]
        elif top in SUBPACKAGES and re.search(r"\.\w+$", ref):  # a file, not prose
            candidates = [ROOT / "xengine_block" / ref, ROOT / ref]
        else:
            continue
        if ("..." in ref or ref.endswith("/*") or ref.startswith(GENERATED)
                or t.text[m.end():m.end() + 1] in ("{", "<")):  # a template, not a path
            continue
        if any(c.exists() or ("*" in ref and matches(c)) for c in candidates):
            continue
        if upstream_context(t.text, m.start(), ref):
            continue
        problems.append(f"{t.where}: {ref} does not exist")
    return problems


def section_problems(t: Text) -> list[str]:
    problems = []
    for m in SECTION_RE.finditer(t.text):
        page = ROOT / m.group(1)
        if not page.exists():
            continue  # reported as a missing path
        have = headings(page)
        for q in QUOTED_RE.finditer(m.group(2)):
            title = COMMENT_LEAD.sub(" ", q.group(1))
            if not any(names_heading(normalise(title), h) for h in have):
                problems.append(f'{t.where}: {m.group(1)} has no section "{title}"')
    for m in ANCHOR_RE.finditer(t.text):
        page = ROOT / m.group(1)
        if page.exists() and m.group(2) not in {anchor(h) for h in headings(page)}:
            problems.append(f"{t.where}: {m.group(1)} has no anchor #{m.group(2)}")
    return problems


def forbidden_problems(t: Text) -> list[str]:
    problems = []
    for what, pattern in FORBIDDEN.items():
        if what in ALLOWED.get(t.where, ()):
            continue
        for m in pattern.finditer(t.text):
            line = t.text.count("\n", 0, m.start()) + 1
            problems.append(f"{t.where}:{line}: {what}: {m.group(0)!r}")
    return problems


#: A file named without its folder in prose (``config.py``).
BARE_RE = re.compile(r"(?<![\w/.$<{-])([A-Za-z_]\w*\.(?:py|c|h|cc|md))\b")
#: A folder of ours followed by a parenthesised list of its files:
#: ``xengine_block/service/ (config.py keys, endpoints.py sockets, ...)``.
LISTING_RE = re.compile(r"`?((?:\.ci|[A-Za-z_][\w-]*)/(?:[\w-]+/)*)`?\s*\(([^()]*)\)")
#: A module of ours named by its dotted path (``xengine_block.service.live``).
DOTTED_RE = re.compile(r"\b(xengine_block(?:\.\w+)+)")


def repository_names() -> tuple[set[str], set[str]]:
    """The repository's file names, and its modules' dotted names (with the compiled
    extensions setup.py builds and the old names ``_moved.MOVED`` keeps importable)."""
    from xengine_block._moved import MOVED

    files = [p.relative_to(ROOT) for p in repository_files(ROOT)]
    modules = {"xengine_block._native", "xengine_block._readbw", *MOVED}
    for rel in files:
        if rel.suffix == ".py":
            parts = rel.with_suffix("").parts
            modules.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return {rel.name for rel in files}, modules


def prose_problems(t: Text, names: tuple[set[str], set[str]]) -> list[str]:
    """Module and file names in prose (Markdown pages, help texts): a bare file name in a list
    after a folder of ours must be in that folder, any other must exist somewhere; a dotted
    module name must be a module of ours, or a name its source defines."""
    if not (t.where.endswith(".md") or t.where.endswith("--help")):
        return []
    file_names, modules = names
    problems = []
    listed = set()
    for m in LISTING_RE.finditer(t.text):
        folder = m.group(1)
        if folder.split("/", 1)[0] not in OUR_TOP or not (ROOT / folder).is_dir():
            continue
        for b in BARE_RE.finditer(m.group(2)):
            listed.add(m.start(2) + b.start())
            if not (ROOT / folder / b.group(1)).exists():
                problems.append(f"{t.where}: {b.group(1)} is not in {folder}")
    for m in BARE_RE.finditer(t.text):
        if m.start() in listed or upstream_context(t.text, m.start(), m.group(1)):
            continue
        if m.group(1) not in file_names:
            problems.append(f"{t.where}: {m.group(1)} does not exist")
    for m in DOTTED_RE.finditer(t.text):
        if not names_module_or_member(m.group(1), modules):
            problems.append(f"{t.where}: module {m.group(1)} does not exist")
    return problems


def names_module_or_member(dotted: str, modules: set[str]) -> bool:
    """Whether ``dotted`` is a module of ours, or a module followed by a name its source
    defines or uses (a class, a function, a constant)."""
    parts = dotted.split(".")
    for k in range(len(parts), 1, -1):
        module = ".".join(parts[:k])
        if module in modules:
            if k == len(parts):
                return True
            path = ROOT.joinpath(*parts[:k])
            source = path.with_suffix(".py") if path.with_suffix(".py").exists() \
                else path / "__init__.py"
            return source.exists() and re.search(rf"\b{parts[k]}\b", source.read_text()) \
                is not None
    return False


def check(texts: list[Text]) -> list[str]:
    problems = []
    names = repository_names()
    for t in texts:
        problems += (path_problems(t) + section_problems(t) + forbidden_problems(t)
                     + prose_problems(t, names))
    return problems


@pytest.fixture(scope="module")
def texts() -> list[Text]:
    return repository_texts()


def test_repository_references_resolve(texts: list[Text]) -> None:
    problems = check(texts)
    assert not problems, "references that do not resolve:\n" + "\n".join(problems)


def test_help_references_resolve() -> None:
    problems = check(help_texts())
    assert not problems, "help texts with references that do not resolve:\n" + "\n".join(problems)


@pytest.mark.parametrize("planted, expected", [
    ("see docs/nowhere.md", "docs/nowhere.md does not exist"),
    ("``xengine_block/npu/gone.py``", "xengine_block/npu/gone.py does not exist"),
    ("(``capture/gone.py``)", "capture/gone.py does not exist"),
    ('docs/design.md, "No such section"', 'has no section "No such section"'),
    ('docs/design.md, "Geometry" and "Nor this one"', 'has no section "Nor this one"'),
    ('(docs/design.md, "SPEAD\n    #: gone")', 'has no section "SPEAD gone"'),
    ("docs/bifrost.md#no-such-anchor", "has no anchor #no-such-anchor"),
    ("as " "DESIGN" ".md section 3 says", "the old design notes"),
    ("the " "seed's geometry", "'the seed'"),
    ("(issue " "12 item 2)", "an issue number"),
    ("../" "shared/vendor/x.tar.gz", "a sibling checkout"),
    ("measured 6 " "Dec 17:05", "a dated run log"),
    ("on this project's 2-core Xeon " "CI VM", "one machine's timing"),
    ("measured on the " "CI machine", "one machine's timing"),
])
def test_a_planted_bad_reference_is_caught(planted: str, expected: str) -> None:
    """The check fails on each kind of bad reference, and says which."""
    problems = check([Text("planted.py", f"x = 1  # {planted}\n")])
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize("planted, expected", [
    ("Modules: `xengine_block/service/` (`config.py` keys, `sources.py` sockets)",
     "sources.py is not in xengine_block/service/"),
    ("the service lives in `nowhere_module.py`", "nowhere_module.py does not exist"),
    ("see `xengine_block.service.gone`", "module xengine_block.service.gone does not exist"),
])
def test_a_planted_bad_module_name_in_prose_is_caught(planted: str, expected: str) -> None:
    problems = check([Text("planted.md", f"{planted}\n")])
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize("fine", [
    'docs/design.md, "UVH5 conventions"',
    'docs/design.md, "Sign and\n    #: conjugation"',
    "docs/bifrost.md#header-contract-feeding-the-x-engine-from-your-own-source-block",
    "``tests/e2e/test_fx.py``",
    "Bifrost's ``python/bifrost/blocks/correlate.py``",
    "BLRI's src/blri/dsp.py",
])
def test_good_references_pass(fine: str) -> None:
    assert check([Text("fine.py", f"x = 1  # {fine}\n")]) == []
