"""The faults section: a claim is not a completion (C7)."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from harness.article.findings import (ADDED, ADDED_NONE_SEEN, CONFIRMED, NOT_MEASURED, NOT_REPRODUCED, Finding,
                                      make_finding, not_measured)
from harness.article.formats import count
from harness.article.prose import join, numbered
from harness.article.sections.fault_runs import fault_facts, fault_summary
from harness.article.wording import Sentences

NAME = "faults"
READS = ("faults",)
UPSTREAM = ()
say = Sentences(NAME)


def _fault_cell(faults: pd.DataFrame, protocol: str, fault: str) -> pd.Series | None:
    rows = faults[(faults["protocol"].astype(str) == protocol) & (faults["fault"].astype(str) == fault)]
    return rows.iloc[0] if len(rows) else None


C7_PARTS = ("a dead runner's run stays running", "a lease hands it on",
            "added: a lease alone lets a stale holder complete")


def c7_claim_is_not_completion(faults: pd.DataFrame | None) -> Finding:
    """C7: a killed runner leaves its run running under the original's protocol; a lease hands it on; without a
    fencing token a runner that lost its lease still completes a run another runner holds. Only runs whose fault
    was seen to land (fault_effects) count; a run still worked on when the drain's bound came is not lost.

    Parts: the original's two statements (a dead runner's run stays running, a lease hands it on), and the addition
    (a runner paused past its lease completes a run another holds); the verdict is the original's two, confirmed with
    the addition where both hold."""
    raced = faults
    if faults is not None and len(faults) and "fault_landed" in faults:
        faults = faults[faults["fault_landed"].fillna(True).astype(bool)]
    killed = _fault_cell(faults, "none", "kill") if faults is not None and len(faults) else None
    if killed is None:
        return not_measured("C7", say("C7.no_fault_landed"))
    leased = [row for row in (_fault_cell(faults, p, "kill") for p in ("lease", "lease_holder", "lease_fenced"))
              if row is not None]
    paused = _fault_cell(faults, "lease", "pause")

    def went_wrong(protocol):
        """(its faults that landed, the runs they left lost, stuck or completed by a stale holder): the run with
        no fault is its baseline, not a fault."""
        rows = faults[(faults["protocol"].astype(str) == protocol) & (faults["fault"].astype(str) != "none")]
        return len(rows), int((rows["lost"] + rows["stuck"] + rows["stale_completion"]).sum()) if len(rows) else 0

    fenced_runs, fenced_bad = went_wrong("lease_fenced")
    holder_runs, holder_bad = went_wrong("lease_holder")
    stale = int(paused["stale_completion"]) if paused is not None else 0
    values = {"stuck": count(killed["stuck"]), "leased_stuck": count(sum(int(r["stuck"]) + int(r["lost"])
                                                                         for r in leased)),
              "stale": count(stale), "fenced_runs": count(fenced_runs), "fenced_bad": count(fenced_bad),
              "holder_runs": count(holder_runs), "holder_bad": count(holder_bad)}
    holder = (", " + say("C7.holder", holder_bad=count(holder_bad), holder_runs=numbered(holder_runs, "fault"))
              if holder_runs else "")
    values["ledger"] = ledger(raced, holder_runs, holder_bad, fenced_runs, fenced_bad)
    # a lease hands a dead holder's run on, so its work can be done twice: the runs the checked finishes ran twice,
    # over the runs queued in their faults' runs
    checked = faults[faults["protocol"].astype(str).isin(["lease_holder", "lease_fenced"])
                     & (faults["fault"].astype(str) != "none")]
    values |= {"ran_twice": count(int(checked["executed_twice"].sum())),
               "checked_runs": count(int(checked["runs"].sum()))}
    ours = say("C7.ours", stuck=numbered(int(killed["stuck"]), "run"), leased_stuck=values["leased_stuck"],
               stale=numbered(stale, "run"), fenced_bad=numbered(fenced_bad, "run"),
               fenced_runs=numbered(fenced_runs, "fault"), holder=holder)
    counter = ""
    if holder_runs and fenced_runs:
        counter = (say("C7.holder_as_counter") if holder_bad == fenced_bad == 0 else
                   say("C7.holder_against_counter", holder_bad=numbered(holder_bad, "run"),
                       fenced_bad=count(fenced_bad)))
    # the original's two statements, then what this study adds: what a lease alone lets through
    left_running = CONFIRMED if int(killed["stuck"]) > 0 else NOT_REPRODUCED
    handed_on = (NOT_MEASURED if not leased else
                 NOT_REPRODUCED if any(int(r["stuck"]) + int(r["lost"]) > 0 for r in leased) else CONFIRMED)
    # a pause that landed and saw no stale completion looked for one and saw none; no pause run measures nothing
    stale_holder = NOT_MEASURED if paused is None else ADDED if stale > 0 else ADDED_NONE_SEEN
    parts = tuple(zip(C7_PARTS, (left_running, handed_on, stale_holder)))
    if left_running != CONFIRMED:
        return make_finding("C7", NOT_REPRODUCED, ours, say("C7.not_left_running"), values, parts=parts)
    if handed_on != CONFIRMED:
        return make_finding("C7", handed_on, ours,
                            say("C7.lease_missed_some") if leased else say("C7.no_lease_raced"), values, parts=parts)
    fencing = (say("C7.fencing_refused") if fenced_bad == 0
               else say("C7.fencing_failed", fenced_bad=count(fenced_bad)))
    addition = (say("C7.lease_alone", fencing=fencing) if stale > 0
                else say("C7.no_stale_holder") + (" " + fencing if fenced_bad else ""))
    return make_finding("C7", CONFIRMED, ours, [say("C7.handed_on"), addition, counter], values, parts=parts)


def ledger(raced: pd.DataFrame, holder_faults: int, holder_bad: int, fenced_faults: int, fenced_bad: int) -> str:
    """The runs lost, stuck or completed by a stale holder under the holder check and under the fence, over the
    faults raced with each whose fault landed; and the faults left out because theirs missed its window (so the two
    counts of faults can differ, and the sentence says why)."""
    parts = ([say("C7.ledger_holder", bad=count(holder_bad), faults=numbered(holder_faults, "fault"))]
             if holder_faults else []) + [say("C7.ledger_fenced", bad=count(fenced_bad),
                                              faults=numbered(fenced_faults, "fault"))]
    missed = []
    if raced is not None and len(raced) and "fault_landed" in raced:
        for protocol, how in (("lease_holder", say("C7.missed_holder")), ("lease_fenced", say("C7.missed_fenced"))):
            rows = raced[(raced["protocol"].astype(str) == protocol) & ~raced["fault_landed"].fillna(True).astype(bool)]
            missed += [say("C7.missed_fault", fault=fault, how=how) for fault in rows["fault"].astype(str)]
    text = say("C7.ledger", parts=", ".join(parts))
    return text + (" " + say("C7.missed", missed=join(missed)) if missed else "")


# --------------------------------------------------------------------------- the section


@dataclass(frozen=True)
class Loaded:
    runs: tuple  # the fault runs (storage.Run)
    summary: pd.DataFrame  # fault_runs.fault_summary


def load(reads: dict, loaded: dict) -> Loaded | None:
    paths = reads["faults"].runs if "faults" in reads else ()
    return Loaded(paths, fault_summary(list(paths))) if paths else None


def findings(loaded: dict) -> list[Finding]:
    mine = loaded.get(NAME)
    return [c7_claim_is_not_completion(mine.summary if mine else None)]


def values(loaded: dict, found: dict[str, Finding]) -> dict[str, str]:
    """The fault runs' setup and ledger, as the prose names them."""
    mine = loaded[NAME]
    return fault_facts(list(mine.runs) if mine else [])
