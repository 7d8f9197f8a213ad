"""The page's opening: every finding's verdict, figure and note under its placeholders, the table of the original's
findings and claims beside ours (and of what this study adds), how many got each verdict, and how long the runs
took."""

from __future__ import annotations

import html
from dataclasses import dataclass

import pandas as pd

from harness.article.findings import (ADDED_CLAIMS, HOLDS, ORIGINAL, PART_VERDICTS, VERDICT_LABELS, Finding, order,
                                      table as findings_table, verdict_counts)
from harness.article.formats import count, number
from harness.article.prose import table
from harness.article.wording import Sentences
from harness.experiments import registry
from harness.storage import open_runs

NAME = "summary"
READS = tuple(registry.SECTIONS)  # every run the page reads
UPSTREAM = ()
say = Sentences(NAME)


@dataclass(frozen=True)
class Loaded:
    runs: tuple  # every run the page reads (storage.Run)


def load(reads: dict, loaded: dict) -> Loaded:
    return Loaded(tuple(run for asked in reads.values() for run in asked.runs))


def findings(loaded: dict) -> list[Finding]:
    return []


def values(loaded: dict, found: dict[str, Finding]) -> dict[str, str]:
    out = {}
    for finding in found.values():
        key = finding.id.lower()
        out |= {f"{key}_ours": finding.ours, f"{key}_note": finding.note, f"{key}_verdict": finding.verdict_label,
                f"{key}_original": finding.original, f"{key}_statement": finding.statement}
        out |= {f"{key}_{name}": value for name, value in finding.values.items()}
    # the headline counts the original's findings and claims only: what this study adds is not a correction of it
    verdicts = verdict_counts([finding for finding in found.values() if finding.id in ORIGINAL])
    return out | {
        "original_table": comparison_table([f for f in found.values() if f.id in ORIGINAL]),
        "added_table": comparison_table([f for f in found.values() if f.id in ADDED_CLAIMS]),
        "notes_table": notes_table(list(found.values())),
        "verdict_legend": verdict_legend(),
        "original_count": count(sum(verdicts.values())),
        # each count with its verb, which agrees with it
        "corrected_are": _with_verb(verdicts["corrected"] + verdicts["not_reproduced"], "is", "are"),
        "undecided_count": count(verdicts["not_distinguishable"]),
        "unmeasured_are": _with_verb(verdicts["not_measured"], "is", "are"),
        "confirmed_hold": _with_verb(sum(verdicts[verdict] for verdict in HOLDS), "holds", "hold"),
        "machine_minutes": number(machine_minutes(list(loaded[NAME].runs)), 0)}


def _with_verb(number: int, one: str, many: str) -> str:
    return f"{count(number)} {one if number == 1 else many}"


def comparison_table(found: list[Finding]) -> str:
    """Findings beside the original's claim and figure, ours, the verdict and where it was decided."""
    return table(findings_table(found), css_class="wide", escape=False)


def notes_table(found: list[Finding]) -> str:
    """Every finding's note, in id order: what differs from the original, and why where a run shows it. Each id links
    to its finding's section; a note the page prints there too is replaced by that link once the page is rendered
    (harness.article.build.link_repeated_notes), so no note is printed twice."""
    claims = ORIGINAL | ADDED_CLAIMS
    rows = [{"finding": f'<a href="#{claims[f.id].section}">{f.id}</a>' if f.id in claims else f.id,
             "verdict": html.escape(f.verdict_label), "note": html.escape(f.note)}
            for f in sorted(found, key=lambda f: order(f.id)) if f.note]
    return table(pd.DataFrame(rows, columns=["finding", "verdict", "note"]), css_class=f"wide {NOTES_CLASS}",
                 escape=False)


NOTES_CLASS = "notes"  # the notes table's class, by which the rendered page finds it


def note_in_section() -> str:
    """The words that replace a note the page prints under its finding's section."""
    return say("note_in_section")


def note_same_as(finding: str) -> str:
    """The words that replace a note word for word the same as an earlier finding's in the notes table."""
    return say("note_same_as", finding=finding)


def verdict_legend() -> str:
    """What each verdict word means, one line each, for the tables of findings."""
    meanings = say.each("legend", PART_VERDICTS)
    items = "".join(f"<li><b>{html.escape(VERDICT_LABELS[verdict])}</b>: {html.escape(meanings[verdict])}</li>"
                    for verdict in PART_VERDICTS)
    return f'<ul class="legend">{items}</ul>'


def machine_minutes(run_folders) -> float:
    """Minutes of machine time the given stored runs took, from their manifests (started to finished): what
    making this page's data costs on the machine it ran on, whatever was stored before the build."""
    total = 0.0
    for run in open_runs(run_folders):
        started, finished = run.started_at, run.finished_at
        if started and finished:
            total += (pd.Timestamp(finished) - pd.Timestamp(started)).total_seconds()
    return total / 60
