"""The job libraries under the soak, in the section "When a transaction holds the horizon": each library's own workers on
its own table, jobs arriving through its own enqueue, a transaction holding the horizon for part of the run
(harness.experiments.soak.library), each held arm read against its control by the soak's rule on each job's
pickup (A12).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.experiments.soak import outcomes as soak_outcomes
from harness.article.findings import CONFIRMED, CORRECTED, make_finding, not_measured
from harness.article.formats import DASH, count, number, span
from harness.article.prose import join, table
from harness.article.sections import soak_arms as arms
from harness.article.wording import Sentences

NAME = "library_soak"
READS = ("library_soak",)
UPSTREAM = ()
say = Sentences(NAME)

COLUMNS = ("library", "its finished jobs", "held by", "jobs/s", "pickup ms before the hold", "slowed at",
           "fell behind at", "dead tuples at most", "backlog at most", "verdict", "its control")


def load(reads: dict, loaded: dict) -> arms.Loaded | None:
    # an arm without a library listed here is the soak section's to read
    return arms.load_runs(tuple(run for run in (reads["library_soak"].runs if "library_soak" in reads else ())
                                if run.summary.get("library") is not None))


def library_label(row) -> str:
    return say("label.library", library=row["library"].replace("_", "-"), version=row["library_version"] or DASH)


def finished_label(row) -> str:
    return say("finished.kept") if row["finished_jobs"] == "kept" else say("finished.deleted")


def a12_library_pickup(loaded: dict):
    mine = loaded.get(NAME)
    groups = arms.held_groups(mine.summaries) if mine is not None else []
    if not groups:
        return not_measured("A12", say("A12.not_measured"))
    runs = mine.summaries
    parts = [(f"{library_label(runs.iloc[h[0]])}, {say('finished.part', finished=finished_label(runs.iloc[h[0]]))}",
              arms.held_part(runs, h, c)) for h, c in groups]
    held = runs.iloc[[p for h, _ in groups for p in h]]
    decided = [v for _, v in parts if v in (CONFIRMED, CORRECTED)]
    values = {"slowed": count(decided.count(CONFIRMED)), "decided": count(len(decided)),
              "pin": join(sorted({f"{s:g} s" for s in held["pin_s"]})),
              "rates": span(held["rate"].min(), held["rate"].max(), lambda v: number(v, 0)),
              "load": load_said(held),
              "libraries": join(sorted({library_label(row) for _, row in held.iterrows()})),
              "workers": join([str(w) for w in sorted(set(held["workers"]))]),
              "pg": join([str(v) for v in sorted(set(held["pg_version"]))]), "runs": arms.runs_each(held)}
    return make_finding("A12", arms.worst_part(v for _, v in parts), say("A12.ours", **values),
                        say("A12.note", margin=f"{arms.PRACTICAL_MARGIN_S:g} s"), values,
                        parts=tuple(parts) if len(parts) > 1 else ())


def load_said(runs: pd.DataFrame) -> str:
    """The arrivals as asked: a share of the rate each library's workers sustained, or a fixed rate."""
    return join(sorted({say("rate.share", share=r) if isinstance(r, str) else say("rate.fixed", rate=number(r, 0))
                        for r in runs["rate_asked"]}))


def findings(loaded: dict) -> list:
    return [a12_library_pickup(loaded)]


def rows(mine: arms.Loaded) -> pd.DataFrame:
    """The held arms and their controls, each control first; its control: the arm with nothing held it is read
    against in the end (through a mitigation or a disk)."""
    runs = mine.summaries
    shown = arms.held_and_controls(runs)
    shown += [position for position in range(len(runs)) if position not in shown]
    frame = []
    for position in shown:
        row = runs.iloc[position]
        frame.append(dict(zip(COLUMNS, (
            library_label(row), finished_label(row), arms.held_label(row), number(row["rate"], 0),
            number(row["pickup_level_ms"], 0), arms.onset_text(runs, [position], "seconds_to_slow"),
            arms.onset_text(runs, [position], "seconds_to_fall_behind"),
            count(row["dead_tuples_max"]), count(row["backlog_max"]), arms.verdict_text(row),
            DASH if row["holder"] == "none" else _control_verdict(runs, position)))))
    return pd.DataFrame(frame, columns=list(COLUMNS))


def pickup_by_place(run) -> tuple[float, float] | None:
    """The median pickup (ms) of the first job of each enqueue call and of its last, over a run's claimed jobs: how
    much of a pickup is the wait behind the jobs enqueued with it. A job's place is its rank in the order the audit
    saw the jobs enqueued (each at its own clock_timestamp); the jobs still waiting at the end come last, so the
    ranks of the claimed ones are theirs."""
    claims, calls = run.table("claims"), run.table("enqueue_calls")
    if not len(claims) or not len(calls):
        return None
    enqueued_ns = claims["claimed_ns"] - claims["pickup_ms"] * 1e6
    pickups = claims["pickup_ms"].to_numpy()[np.argsort(enqueued_ns.to_numpy(), kind="stable")]
    lasts = calls["jobs"].cumsum().to_numpy() - 1
    firsts = lasts + 1 - calls["jobs"].to_numpy()
    first, last = pickups[firsts[firsts < len(pickups)]], pickups[lasts[lasts < len(pickups)]]
    return (float(np.median(first)), float(np.median(last))) if len(first) and len(last) else None


def arrival_steps(mine: arms.Loaded) -> str:
    """How each library's jobs arrived, over its runs: the mean jobs per enqueue call, the mean time between calls
    and the median pickup of a call's first job and of its last (pickup_by_place)."""
    runs = mine.summaries
    said = []
    for library, group in runs.groupby(runs.apply(library_label, axis=1), sort=True):
        calls = group["enqueue_calls"].sum()
        if not calls:
            continue
        places = [place for position in group.index if (place := pickup_by_place(mine.runs[position])) is not None]
        said.append(say("steps.one", library=library, jobs=number(group["jobs_arrived"].sum() / calls, 1),
                        every=number(soak_outcomes.step_of(group["ended_s"].sum(), calls) * 1000, 1),
                        first=number(np.median([f for f, _ in places]), 0) if places else DASH,
                        last=number(np.median([la for _, la in places]), 0) if places else DASH))
    return "; ".join(said) if said else DASH


def _control_verdict(runs: pd.DataFrame, position: int) -> str:
    control = arms.row_at(runs, arms.control_of(runs, position))
    return DASH if control is None else arms.verdict_text(control)


def library_table(loaded: dict) -> str:
    mine = loaded.get(NAME)
    if mine is None:
        return ""
    runs = mine.summaries
    caption = say("caption", rates=load_said(runs), factor=f"{soak_outcomes.SLOW_FACTOR:g}",
                  slow_run=f"{soak_outcomes.SLOW_RUN_S}",
                  workers=join([str(w) for w in sorted(set(runs["workers"]))]),
                  job_ms=join([number(j, 0) for j in sorted(set(runs["job_ms"]))]), steps=arrival_steps(mine))
    note = arms.cpu_note(runs)
    return table(rows(mine), caption=f"{caption} {note}" if note else caption, css_class="wide")


def values(loaded: dict, found: dict) -> dict[str, str]:
    mine = loaded.get(NAME)
    if mine is None:
        return {"library_soak_setup": say("setup.no_runs"), "library_soak_outcome": ""}
    runs = mine.summaries
    held = runs[runs["holder"] != "none"]
    pins = sorted({(float(a), float(b)) for a, b in zip(held["pin_from"], held["pin_to"])})
    # for the section's opening: each held library's verdict, its control's beside it
    outcome = say("outcome", held=join([say("outcome.one", library=library_label(row), verdict=arms.verdict_text(row),
                                            control=_control_verdict(runs, position))
                                        for position, row in held.iterrows()])) if len(held) else ""
    return {"library_soak_outcome": outcome, "library_soak_setup": say(
        "setup.runs", libraries=join(sorted({library_label(row) for _, row in runs.iterrows()})),
        seconds=join([f"{s:g} s" for s in sorted(set(runs["seconds"]))]).replace(" and ", " or "),
        pins=join([f"{a:g} s to {b:g} s" for a, b in pins]) if pins else DASH)}
