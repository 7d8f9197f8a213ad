"""The article's sections in page order, and the findings they decide.

Each section module under harness/article/sections/ declares the params-file
sections it reads (`READS`) and the sections whose loaded data it reads
(`UPSTREAM`). It is handed those params-file sections' requests with their
stored runs (registry.Asked, read through storage.Run) and loads them once
(`load(reads, upstream)`), decides its findings (`findings(upstream)`), may add
a note to every finding (`annotate(found, upstream)`), and formats the figures
its prose names (`values(upstream, found)`: placeholder -> text). `upstream`
holds its own loaded data and its UPSTREAM's, nothing else: reading another
section's fails. Sections load in an order where each follows its UPSTREAM, and
no section imports another (tests/test_imports.py). Each placeholder has exactly
one producing section: a second one fails the build. Adding a section touches
its module, this list and the article's markdown.

    page(asked) -> Page                  # the loaded sections, the findings, every placeholder's value
    from_runs(asked) -> list[Finding]    # asked: params-file section -> registry.Asked
    evaluate(loaded) -> list[Finding]    # the same rules on sections already loaded (the tests build them)
    python -m harness findings [--json]  # the same, from the runs stored for a params file
"""

from __future__ import annotations

import dataclasses
import json
import sys
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from harness import config
from harness.article.findings import Finding, by_id, order
from harness.article.sections import (backend_time, bench, churn, client_layouts, decision, durable, faults,
                                      guard_cost, job_wait, libraries, library_faults, library_soak, machine, plans,
                                      production, races, should_switch, soak, stalls, strategies, summary,
                                      wakeups, without_guard)
from harness.article.sections import race_sweep
from harness.errors import UserError
from harness.experiments import registry
from harness.stats import jsonable

# Page order: the notes annotate adds land in this order (the client layouts' before the bench's). Sections load
# in this order too, except where a section's UPSTREAM comes later (load_order).
SECTIONS = (summary, races, without_guard, plans, guard_cost, backend_time, job_wait, should_switch, production,
            strategies, faults, churn, client_layouts, bench, libraries, library_faults, stalls, wakeups,
            soak, library_soak, durable, machine, decision)


class UndeclaredUpstream(Exception):
    """A section read a section it does not declare in UPSTREAM."""


class Upstream(Mapping):
    """What a section is handed of the loaded sections: its own and its UPSTREAM's (None where one has no runs or
    was not loaded); any other name fails, so a section's reads are what it declares."""

    def __init__(self, loaded: dict, section):
        self._loaded, self._name = loaded, section.NAME
        self._names = (section.NAME, *section.UPSTREAM)

    def _check(self, name: str) -> None:
        if name not in self._names:
            raise UndeclaredUpstream(f"section {self._name} reads section {name}, which its UPSTREAM does not name")

    def __getitem__(self, name: str):
        self._check(name)
        return self._loaded.get(name)

    def get(self, name: str, default=None):
        self._check(name)
        return self._loaded.get(name, default)

    def __iter__(self):
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def load_order(sections=None) -> list:
    """The sections in page order, each moved after the UPSTREAM it names; an UPSTREAM naming no section, or a
    circle, fails."""
    sections = tuple(SECTIONS if sections is None else sections)
    by_name = {section.NAME: section for section in sections}
    for section in sections:
        unknown = [name for name in section.UPSTREAM if name not in by_name]
        if unknown:
            raise ValueError(f"section {section.NAME}: UPSTREAM names {', '.join(unknown)}, which is no section")
    ordered, placed = [], set()
    while len(ordered) < len(sections):
        ready = next((s for s in sections if s.NAME not in placed and set(s.UPSTREAM) <= placed), None)
        if ready is None:
            waiting = sorted(s.NAME for s in sections if s.NAME not in placed)
            raise ValueError(f"sections {', '.join(waiting)} name each other in UPSTREAM: a circle")
        ordered.append(ready)
        placed.add(ready.NAME)
    return ordered


def load(asked: dict[str, registry.Asked]) -> dict:
    """Every section's stored runs, loaded once: {section name: its Loaded, or None where it has no runs}. Each
    section is handed only the params-file sections it READS and the loaded sections it names in UPSTREAM."""
    loaded: dict = {}
    for section in load_order():
        loaded[section.NAME] = section.load({name: asked[name] for name in section.READS if name in asked},
                                            Upstream(loaded, section))
    return loaded


def evaluate(loaded: dict) -> list[Finding]:
    """Every finding, F1-F13, C1-C9 and A1-A12, in that order; a section missing from `loaded` (or None there)
    leaves its findings not measured. Each is decided again with the race points near the CPU-bound line left out
    too (race_sweep.near_the_line), and a finding whose verdict then differs says what it would read (near_line)."""
    found = _decided(loaded, SECTIONS)
    near = race_sweep.near_the_line(loaded.get(race_sweep.RACES))
    if near is not None:  # only the sections that read the sweep can decide otherwise
        readers = [s for s in SECTIONS if race_sweep.RACES in (s.NAME, *s.UPSTREAM)]
        again = by_id(_decided({**loaded, race_sweep.RACES: near}, readers))
        found = [dataclasses.replace(f, near_line=again[f.id].verdict)
                 if f.id in again and again[f.id].verdict != f.verdict else f for f in found]
    for section in SECTIONS:
        if hasattr(section, "annotate"):
            found = section.annotate(found, Upstream(loaded, section))
    return sorted(found, key=lambda f: order(f.id))


def _decided(loaded: dict, sections) -> list[Finding]:
    return [finding for section in sections for finding in section.findings(Upstream(loaded, section))]


def from_runs(asked: dict[str, registry.Asked]) -> list[Finding]:
    """Every finding from the requests and stored runs of each params-file section; a section without runs leaves
    its findings not measured."""
    return evaluate(load(asked))


@dataclass(frozen=True)
class Page:
    loaded: dict  # section name -> its Loaded
    findings: list[Finding]
    values: dict[str, str]  # placeholder -> its text
    producers: dict[str, str]  # placeholder -> the section that produced it

    def __getitem__(self, section: str):
        return self.loaded[section]


def page(asked: dict[str, registry.Asked]) -> Page:
    """Every section loaded once, every finding decided once, every placeholder's value produced once."""
    loaded = load(asked)
    found = evaluate(loaded)
    values, producers, decided = {}, {}, by_id(found)
    for section in SECTIONS:
        for name, value in section.values(Upstream(loaded, section), decided).items():
            if name in producers:
                raise ValueError(f"placeholder {name} is produced by both {producers[name]} and {section.NAME}")
            values[name], producers[name] = str(value), section.NAME
    return Page(loaded, found, values, producers)


# --------------------------------------------------------------------------- command line

def _print_text(findings: list[Finding]) -> None:
    for f in findings:
        print(f"{f.id:<4} {f.verdict}")
        for label, text in (("claim", f.claim), ("original", f.original), ("ours", f.ours), ("note", f.note)):
            if text:
                print(textwrap.fill(text, width=110, initial_indent=f"     {label:<9} ",
                                    subsequent_indent=" " * 15))
        print()


def findings_command(args) -> int:
    """`python -m harness findings`: the verdicts for a params file's stored runs, as text or JSON."""
    runs = registry.stored_sections(registry.load_params(args.params), Path(args.data_dir))
    empty = [section for section in registry.SECTIONS if not runs[section].runs]
    if len(empty) == len(registry.SECTIONS):
        make = "make report" if Path(args.params).resolve() == config.PARAMS_FILE.resolve() else \
            f"make report PARAMS={args.params}"
        raise UserError(f"no stored runs in {args.data_dir} for {args.params} (sections {', '.join(empty)}); "
                        f"run `{make}` first")
    if empty:
        print(f"no stored runs for {', '.join(empty)} in {args.data_dir}", file=sys.stderr)
    findings = from_runs(runs)
    if args.json:
        print(json.dumps([jsonable(f.as_dict()) for f in findings], indent=1))
    else:
        _print_text(findings)
    return 0
