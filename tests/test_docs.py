"""The README and docs/ name only commands, flags, pages and make targets that exist.

A command is `python -m PROGRAM [SUBCOMMAND] ...` anywhere in a page (a code block, an inline span, a table cell),
up to the end of its line, a `#` comment, a closing backtick or a table bar; an inline span that starts with a
subcommand of `python -m harness` (`summary --json`) is one too. Each flag of a command must exist on that
program's parser (the subcommand's, for `python -m harness`). A flag named anywhere else on a page must exist on one
of the commands the page runs (on any of them, where the page runs none). Links to files must resolve, every page of
docs/ must be linked from the README, and `make TARGET` in code must name a target of the Makefile.

The parsers are read, nothing is run: `harness.cli.build_parser()` for `python -m harness`, and `--help` once for
the other programs.
"""

from __future__ import annotations

import argparse
import functools
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]

# Programs a page may run with `python -m` (besides `harness`, whose subcommands come from build_parser()), and
# the one other program whose flags the pages show; each answers --help without running anything.
OTHER_PROGRAMS = {
    "harness.service": [sys.executable, "-m", "harness.service", "--help"],
    "harness.report": [sys.executable, "-m", "harness.report", "--help"],
    "papermill": [str(Path(sys.executable).with_name("papermill")), "--help"],
}

FLAG = re.compile(r"(?<![\w-])(--[A-Za-z][\w-]*)")
COMMAND = re.compile(r"python -m ([\w.]+)|(?:^\s*|(?<=`))[\w./-]*?\b(papermill)(?= )")  # papermill starts its line or span
COMMAND_END = re.compile(r"`|\s#|\||;|&&")
INLINE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
MAKE = re.compile(r"(?<![\w-])make ([A-Za-z][\w-]*)")
FENCE = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)


@functools.cache
def known_flags() -> dict[str, dict[str | None, frozenset[str]]]:
    """program -> {subcommand (None for a program without any) -> its flags}."""
    from harness.cli import build_parser

    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    known = {"harness": {name: frozenset(o for a in sub._actions for o in a.option_strings)
                         for name, sub in subparsers.choices.items()}}
    for program, argv in OTHER_PROGRAMS.items():
        result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, f"{' '.join(argv[-3:])}: {result.stderr[-500:]}"
        known[program] = {None: frozenset(FLAG.findall(result.stdout))}
    return known


@functools.cache
def make_targets() -> frozenset[str]:
    text = (ROOT / "Makefile").read_text()
    return frozenset(re.findall(r"^([A-Za-z][\w-]*):", text, re.MULTILINE))


def logical_lines(text: str) -> list[str]:
    """The page's lines, a shell line continued with a backslash joined to the next."""
    return re.sub(r"\\\n\s*", " ", text).split("\n")


def commands_in(line: str, known: dict) -> list[tuple[int, int, str, str | None, list[str]]]:
    """(start, end, program, subcommand, flags) of each command on one line."""
    found = []
    for match in COMMAND.finditer(line):
        program = match.group(1) or match.group(2)
        end = match.end()
        stop = COMMAND_END.search(line, end)
        end = stop.start() if stop else len(line)
        words = line[match.end():end].split()
        subcommand = None
        if program == "harness":
            first = words[0].rstrip("),.:;") if words else ""
            if not re.fullmatch(r"[a-z][\w-]*", first):
                continue  # `python -m harness` alone, or `python -m harness ...`
            subcommand = first
        found.append((match.start(), end, program, subcommand, FLAG.findall(" ".join(words))))
    # an inline span that starts with a subcommand: `summary --json`
    for span in INLINE.finditer(line):
        words = span.group(1).split()
        if words and words[0] in known["harness"] and FLAG.search(span.group(1)) \
                and not any(start <= span.start() < end for start, end, *_ in found):
            found.append((span.start(), span.end(), "harness", words[0], FLAG.findall(span.group(1))))
    return found


def problems(text: str, page: Path, known: dict | None = None, targets: frozenset[str] | None = None,
             root: Path = ROOT) -> list[str]:
    """Every command, flag, link or make target the text names that does not exist."""
    known = known_flags() if known is None else known
    targets = make_targets() if targets is None else targets
    where = page.name
    found: list[str] = []
    runs: set[tuple[str, str | None]] = set()
    rest = []  # the text with its commands blanked, for the flags named in prose
    for line in logical_lines(text):
        commands = commands_in(line, known)
        for start, end, program, subcommand, flags in commands:
            if program not in known:
                found.append(f"{where}: no program `python -m {program}`")
                continue
            if subcommand not in known[program]:
                found.append(f"{where}: `python -m {program}` has no subcommand {subcommand!r}")
                continue
            runs.add((program, subcommand))
            for flag in flags:
                if flag not in known[program][subcommand]:
                    name = f"python -m {program} {subcommand}" if subcommand else program
                    found.append(f"{where}: `{name}` has no flag {flag}")
        for start, end, *_ in sorted(commands, reverse=True):
            line = line[:start] + " " * (end - start) + line[end:]
        rest.append(line)
    pool = runs or {(program, sub) for program, subs in known.items() for sub in subs}
    allowed = set().union(*(known[program][sub] for program, sub in pool))
    for flag in sorted(set(FLAG.findall("\n".join(rest))) - allowed):
        ran = ", ".join(sorted(sub or program for program, sub in runs)) or "any program"
        found.append(f"{where}: no flag {flag} on {ran}")
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:|#", target):
            continue
        if not (page.parent / target.split("#")[0]).exists():
            found.append(f"{where}: the link {target} leads nowhere")
    code = "\n".join(FENCE.findall(text) + INLINE.findall(FENCE.sub("", text)))
    for target in sorted(set(MAKE.findall(code)) - targets):
        found.append(f"{where}: the Makefile has no target {target}")
    return found


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_command_flag_link_and_make_target_a_page_names_exists(page):
    assert problems(page.read_text(), page) == []


def test_every_page_of_docs_is_linked_from_the_readme():
    linked = {(ROOT / target.split("#")[0]).resolve() for target in LINK.findall(README.read_text())}
    assert [str(p.relative_to(ROOT)) for p in PAGES[1:] if p.resolve() not in linked] == []


def test_the_readme_keeps_its_two_commands_and_its_size():
    text = README.read_text()
    assert "make report" in text and "make test" in text
    assert len(text.split()) <= 2000, "the manual belongs in docs/"


def test_the_check_reports_what_does_not_exist(tmp_path):
    """A made-up flag, an unknown subcommand and program, a flag in prose, a dead link and a missing target."""
    known = {"harness": {"race": frozenset({"--workers", "--help"}), "summary": frozenset({"--json"})},
             "papermill": {None: frozenset({"-p"})}}
    text = "\n".join([
        "```sh",
        ".venv/bin/python -m harness race --workers 4 \\",
        "    --made-up-flag 3   # a comment --in-a-comment",
        "python -m harness nosuchcommand --workers 2",
        "python -m harness.nowhere --x",
        ".venv/bin/papermill in.ipynb out.ipynb --no-such-option   # run with papermill --help",
        "make report PARAMS=x.yml",
        "make nosuchtarget",
        "```",
        "`summary --json` and `summary --tables`; in prose, `--workers` and `--prose-flag`.",
        "[a page](docs/nowhere.md), [the web](https://example.org), [here](#anchor)",
    ])
    found = problems(text, tmp_path / "PAGE.md", known, frozenset({"report"}))
    assert found == [
        "PAGE.md: `python -m harness race` has no flag --made-up-flag",
        "PAGE.md: `python -m harness` has no subcommand 'nosuchcommand'",
        "PAGE.md: no program `python -m harness.nowhere`",
        "PAGE.md: `papermill` has no flag --no-such-option",
        "PAGE.md: `python -m harness summary` has no flag --tables",
        "PAGE.md: no flag --in-a-comment on papermill, race, summary",
        "PAGE.md: no flag --prose-flag on papermill, race, summary",
        "PAGE.md: the link docs/nowhere.md leads nowhere",
        "PAGE.md: the Makefile has no target nosuchtarget",
    ]
