"""The article's sections in page order, and the findings they decide.

Each section module under harness/article/sections/ declares the params-file
sections it reads (`READS`), is handed those sections' requests with their
stored runs (registry.Asked, read through storage.Run) and loads them once
(`load(reads, loaded)`, where `loaded` holds the sections before it), decides its
findings (`findings(loaded)`), may add a note to every finding
(`annotate(found, loaded)`), and formats the figures its prose names
(`values(loaded, found)`: placeholder -> text). Each placeholder has exactly one
producing section: a second one fails the build. Adding a section touches its
module, this list and the article's markdown.

    page(asked) -> Page                  # the loaded sections, the findings, every placeholder's value
    from_runs(asked) -> list[Finding]    # asked: params-file section -> registry.Asked
    evaluate(loaded) -> list[Finding]    # the same rules on sections already loaded (the tests build them)
    python -m harness findings [--json]  # the same, from the runs stored for a params file
"""

from __future__ import annotations

import json
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

from harness import config
from harness.article.findings import Finding, by_id, order
from harness.article.sections import (backend_time, bench, churn, client_layouts, decision, durable, faults,
                                      guard_cost, job_wait, libraries, library_faults, library_soak, machine, plans,
                                      production, races, should_switch, soak, stale_completions, strategies, summary,
                                      wakeups, without_guard)
from harness.errors import UserError
from harness.experiments import registry
from harness.stats import jsonable

# Load order. A section may read the ones before it while loading (bench reads the races' CPU-bound points), and the
# notes annotate adds land in this order (the client layouts' before the bench's). The decision the page opens with
# reads every finding, so it comes last here.
SECTIONS = (summary, races, without_guard, plans, guard_cost, backend_time, job_wait, should_switch, production,
            strategies, faults, churn, client_layouts, bench, libraries, stale_completions, library_faults, wakeups,
            soak, library_soak, durable, machine, decision)


def load(asked: dict[str, registry.Asked]) -> dict:
    """Every section's stored runs, loaded once: {section name: its Loaded, or None where it has no runs}. Each
    section is handed only the params-file sections it READS."""
    loaded: dict = {}
    for section in SECTIONS:
        loaded[section.NAME] = section.load({name: asked[name] for name in section.READS if name in asked}, loaded)
    return loaded


def evaluate(loaded: dict) -> list[Finding]:
    """Every finding, F1-F13, C1-C9 and A1-A12, in that order; a section missing from `loaded` (or None there)
    leaves its findings not measured."""
    found = [finding for section in SECTIONS for finding in section.findings(loaded)]
    for section in SECTIONS:
        if hasattr(section, "annotate"):
            found = section.annotate(found, loaded)
    return sorted(found, key=lambda f: order(f.id))


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
        for name, value in section.values(loaded, decided).items():
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
