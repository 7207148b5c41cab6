"""What a user reads first: ``xengine --help``, every subcommand's and the pipelines' help.

Each opens, after the usage, with what the command does for the person running it: whole
sentences of plain text, not a developer's note in reStructuredText (``` ``name`` ```,
``:class:``) nor a docstring's first line cut mid-sentence. ``xengine --help`` also lists the
everyday commands.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from xengine_block.cli import build_parser, subcommand_parsers

ROOT = Path(__file__).resolve().parents[2]
#: reStructuredText markup, which argparse prints as it is.
MARKUP = re.compile(r"``|:(?:mod|class|func|meth|attr|data|py:\w+):`")
#: A description cut mid-sentence ends so.
CUT = re.compile(r"(?:->|,|:|\band|\bthe|\bof|\bto)\s*$")


def helps() -> dict[str, str]:
    parser = build_parser()
    out = {"xengine": parser.format_help()}
    out.update({f"xengine {name}": sub.format_help()
                for name, sub in subcommand_parsers(parser).items()})
    for script in sorted((ROOT / "pipelines").glob("*.py")):
        run = subprocess.run([sys.executable, str(script), "--help"], capture_output=True,
                             text=True, cwd=ROOT, timeout=120)
        assert run.returncode == 0, run.stderr[-400:]
        out[f"pipelines/{script.name}"] = run.stdout
    return out


HELPS = helps()


def description(text: str) -> str:
    """The paragraph after the usage block."""
    paragraphs = text.split("\n\n")
    assert paragraphs[0].startswith("usage:"), text[:200]
    return paragraphs[1].strip()


@pytest.mark.parametrize("name", sorted(HELPS))
def test_help_opens_with_plain_whole_sentences(name: str) -> None:
    text = HELPS[name]
    markup = MARKUP.search(text)
    assert markup is None, f"{name} --help shows reStructuredText markup: " \
        f"{text[max(0, markup.start() - 80):markup.end() + 80]!r}"
    first = description(text)
    assert first and not first.startswith(("positional arguments", "options")), first
    assert not CUT.search(first.splitlines()[-1] if "\n" in first else first), \
        f"{name} --help's description is cut mid-sentence: {first!r}"


def test_xengine_help_names_the_everyday_commands() -> None:
    text = HELPS["xengine"]
    assert "correlator" in description(text)
    everyday = text[text.index("everyday commands:"):]
    for command in ("xengine correlate", "xengine reprocess", "xengine backends"):
        assert command in everyday, command


@pytest.mark.parametrize("planted", ["``xengine`` command line: parses arguments",
                                     "simulated F-engines -> SPEAD -> integrate ->",
                                     "see :class:`Capture`"])
def test_a_developer_note_or_a_cut_sentence_is_caught(planted: str) -> None:
    text = f"usage: x [-h]\n\n{planted}\n\noptions:\n  -h, --help  show this help\n"
    assert MARKUP.search(text) or CUT.search(description(text))
