"""The faults section: a claim is not a completion (C7)."""

from __future__ import annotations


from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness.article.findings import (CONFIRMED, CONFIRMED_DIFFERENT_SIZE, CORRECTED, NOT_REPRODUCED, Finding,
                                      make_finding, not_measured)
from harness.article.formats import count
from harness.article.prose import numbered
from harness.article.reliability import fault_facts, fault_summary



def _fault_cell(faults: pd.DataFrame, protocol: str, fault: str) -> pd.Series | None:
    rows = faults[(faults["protocol"].astype(str) == protocol) & (faults["fault"].astype(str) == fault)]
    return rows.iloc[0] if len(rows) else None


def c7_claim_is_not_completion(faults: pd.DataFrame | None) -> Finding:
    """C7: a killed runner leaves its run running under the original's protocol; a lease hands it on; without a
    fencing token a runner that lost its lease still completes a run another runner holds. Only runs whose fault
    was seen to land (fault_effects) count; a run still worked on when the drain's bound came is not lost."""
    if faults is not None and len(faults) and "fault_landed" in faults:
        faults = faults[faults["fault_landed"].fillna(True).astype(bool)]
    killed = _fault_cell(faults, "none", "kill") if faults is not None and len(faults) else None
    if killed is None:
        return not_measured("C7", "No run in this build kills a runner after its claim under the original's "
                                   "protocol and sees it land.")
    leased = [row for row in (_fault_cell(faults, p, "kill") for p in ("lease", "lease_holder", "lease_fenced"))
              if row is not None]
    paused = _fault_cell(faults, "lease", "pause")

    def went_wrong(protocol):
        rows = faults[faults["protocol"].astype(str) == protocol]
        return len(rows), int((rows["lost"] + rows["stuck"] + rows["stale_completion"]).sum()) if len(rows) else 0

    fenced_runs, fenced_bad = went_wrong("lease_fenced")
    holder_runs, holder_bad = went_wrong("lease_holder")
    stale = int(paused["stale_completion"]) if paused is not None else 0
    values = {"stuck": count(killed["stuck"]), "leased_stuck": count(sum(int(r["stuck"]) + int(r["lost"])
                                                                         for r in leased)),
              "stale": count(stale), "fenced_runs": count(fenced_runs), "fenced_bad": count(fenced_bad),
              "holder_runs": count(holder_runs), "holder_bad": count(holder_bad)}
    ours = (f"runner killed after its claim: {numbered(int(killed['stuck']), 'run')} stuck without a lease, "
            f"{values['leased_stuck']} stuck or lost with one; a runner paused past its lease completed "
            f"{numbered(stale, 'run')} handed to another runner without a holder check; {numbered(fenced_bad, 'run')} lost, "
            f"stuck or completed by a stale holder over {numbered(fenced_runs, 'fenced run')}"
            + (f", {count(holder_bad)} over {numbered(holder_runs, 'run')} checking the holder by name"
               if holder_runs else ""))
    counter = ""
    if holder_runs and fenced_runs:
        counter = ("Checking the holder by name kept every run as the attempt counter did: in these faults the counter "
                   "adds nothing over it. A case where it would, not raced here: a runner that claims the same run "
                   "again under the same name."
                   if holder_bad == fenced_bad == 0 else
                   f"Checking the holder by name let {numbered(holder_bad, 'run')} go wrong, the attempt counter "
                   f"{count(fenced_bad)}.")
    if int(killed["stuck"]) == 0:
        return make_finding("C7", NOT_REPRODUCED, ours, "The killed runner's run was not left running: either the kill "
                                                   "missed its window or the runs were recovered some other way.",
                        values)
    if not leased or any(int(r["stuck"]) + int(r["lost"]) > 0 for r in leased):
        return make_finding("C7", NOT_REPRODUCED if leased else CONFIRMED_DIFFERENT_SIZE, ours,
                        "The killed runner's run stayed running, and the lease did not hand every run on." if leased
                        else "The killed runner's run stayed running; no lease was raced against it.", values)
    if stale > 0 or fenced_bad > 0:
        return make_finding("C7", CORRECTED, ours,
                        ["A killed runner's run stayed running until a lease handed it on, as the original says; but "
                         "a lease alone let a runner that woke after losing it complete a run another runner held. "
                         + ("The fencing token (an attempt number checked by heartbeat and finish) refused that."
                            if fenced_bad == 0 else f"Even with the fencing token, {count(fenced_bad)} runs went wrong."),
                         counter], values)
    return make_finding("C7", CONFIRMED, ours, ["A killed runner's run stayed running without a lease and was handed on "
                                           "with one; no run was completed by a runner that had lost its lease.",
                                           counter], values)


# --------------------------------------------------------------------------- the section

NAME = "faults"


@dataclass(frozen=True)
class Loaded:
    runs: tuple  # the fault run folders
    summary: pd.DataFrame  # reliability.fault_summary


def load(runs: dict[str, list[Path]], loaded: dict) -> Loaded | None:
    paths = tuple(Path(p) for p in runs.get("faults", []))
    return Loaded(paths, fault_summary(list(paths))) if paths else None


def findings(loaded: dict) -> list[Finding]:
    mine = loaded.get(NAME)
    return [c7_claim_is_not_completion(mine.summary if mine else None)]


def values(loaded: dict, found: dict[str, Finding]) -> dict[str, str]:
    """The fault runs' setup and ledger, as the prose names them."""
    mine = loaded[NAME]
    return fault_facts(list(mine.runs) if mine else [])
