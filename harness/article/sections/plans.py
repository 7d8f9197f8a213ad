"""The plans section: what a claim reads in a half-drained queue, with and without the partial index (F9, F10)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from harness.article.compare import same_size_count
from harness.article.findings import (CONFIRMED, CONFIRMED_DIFFERENT_SIZE, CORRECTED, NOT_MEASURED, NOT_REPRODUCED,
                                      ORIGINAL_F9_TIME_RATIO, ORIGINAL_F9_WITH_BUFFERS, ORIGINAL_F9_WITHOUT_BUFFERS,
                                      ORIGINAL_JOB_COUNT, Finding, make_finding, not_measured)
from harness.article.formats import DASH, MISSING, count, missing, ms, percent, ratio, span
from harness.article.prose import counted
from harness.article.wording import Sentences
from harness.storage import Run
from harness.experiments.plans.outcomes import (AFTER_CLAIMS, AFTER_RACE, FIRST_SCAN, HELD_SNAPSHOT, STEADY, TABLE_STATE_NAMES,
                                  UNHELD_STATES, VACUUMED)

NAME = "plans"
READS = ("plans",)
UPSTREAM = ()
say = Sentences(NAME)


def filter_line(plan_text: str) -> str | None:
    """The first 'Filter:' line of a text plan, stripped."""
    for line in (plan_text or "").splitlines():
        if re.match(r"\s*Filter:", line):
            return line.strip()
    return None


def _plan_buffers(point: dict) -> float:
    return float(point["shared_hit_blocks"]) + float(point["shared_read_blocks"]) if point else math.nan


def plan_key(strategy: str, statement: str, partial_index: bool, table_state: str) -> str:
    return f"{strategy}.{statement}/{'partial_index' if partial_index else 'no_index'}/{table_state}"


def plan_texts(run: Run) -> dict[str, str]:
    """The text plans at the reference point (10,000 jobs, half drained), by name.

    Keys: 'half_drained_without_index' and 'half_drained_with_index' (the
    skip_locked claim's first scan right after the drain), the same with a
    '_<state>' suffix for every other table state (for example
    'half_drained_with_index_vacuumed'), 'guarded_claim' (shows the status
    Filter, first scan), and one '<strategy>.<statement>/<index>/<state>' key
    for every statement explained there.
    """
    reference = run.results["reference_point"]
    explains = run.table("explains")
    texts = explains[(explains["format"] == "text") & (explains["job_count"] == reference["job_count"])
                     & (explains["consumed_fraction"] == reference["consumed_fraction"])]
    found = {plan_key(r.strategy, r.statement, bool(r.partial_index), r.table_state): r.plan
             for r in texts.itertuples()}
    headline = FIRST_SCAN
    aliases = {"guarded_claim": plan_key("guarded", "claim", False, headline)}
    for state in TABLE_STATE_NAMES:
        suffix = "" if state == headline else f"_{state}"
        aliases[f"half_drained_without_index{suffix}"] = plan_key("skip_locked", "claim", False, state)
        aliases[f"half_drained_with_index{suffix}"] = plan_key("skip_locked", "claim", True, state)
    named = {alias: found[key] for alias, key in aliases.items() if key in found}
    return {**named, **found}



def plan_facts(points: pd.DataFrame, reference: dict, plan_texts: dict) -> dict:
    """F9, F10 at the reference point (the fill level nearest half drained), from a stored plans run.

    Keys '<without|with>_<state>_<buffers|removed|ms|index>' for every state in
    table_states.TABLE_STATES; the ratios compare without and with the partial index
    right after the drain (first scan and later scans), where no other session
    held a snapshot.
    """

    job_count, fraction = int(reference["job_count"]), float(reference["consumed_fraction"])
    f = {"job_count": job_count, "consumed_fraction": fraction}
    for label, partial in (("without", False), ("with", True)):
        for state in TABLE_STATE_NAMES:
            point = plan_point(points, "skip_locked", "claim", job_count, fraction, partial, state)
            key = f"{label}_{state}"
            f[f"{key}_buffers"] = _plan_buffers(point)
            f[f"{key}_removed"] = float(point["rows_removed_by_filter"]) if point else math.nan
            f[f"{key}_ms"] = float(point["execution_ms"]) if point else math.nan
            f[f"{key}_index"] = point.get("index_used") if point else None
            f[f"{key}_other_snapshots"] = (float(point["other_snapshot_backends_max"])
                                           if point and "other_snapshot_backends_max" in point else math.nan)
    for state in (FIRST_SCAN, STEADY):
        f[f"{state}_buffer_ratio"] = f[f"without_{state}_buffers"] / f[f"with_{state}_buffers"]
        f[f"{state}_time_ratio"] = f[f"without_{state}_ms"] / f[f"with_{state}_ms"]
    # the server's evidence over every point: other backends holding a snapshot around the EXPLAINs
    others = points["other_snapshot_backends_max"] if "other_snapshot_backends_max" in points else None
    f["unheld_other_snapshots_max"] = (float(others[points["table_state"].isin(UNHELD_STATES)].max())
                                       if others is not None else math.nan)
    f["held_other_snapshots_min"] = (float(others[points["table_state"] == HELD_SNAPSHOT].min())
                                     if others is not None else math.nan)
    guarded = plan_point(points, "guarded", "claim", job_count, fraction, False, FIRST_SCAN)
    f["guarded_claim_ms"] = float(guarded["execution_ms"]) if guarded else math.nan
    f["guarded_node"] = guarded.get("inner_node") if guarded else None
    f["guarded_index"] = guarded.get("index_used") if guarded else None
    f["guarded_filter_line"] = filter_line(plan_texts.get("guarded_claim", ""))
    f["guarded_plan"] = plan_texts.get("guarded_claim")
    return f


# --------------------------------------------------------------------------- the plan rules (F9, F10)

# The partial index fixes the walk when it cuts the buffers a claim touches at least five-fold: the original's
# cut is about 700-fold, and repetitions of one point differ by a few buffers.
F9_INDEX_HELPS = 5

# F9's parts, as its verdict names them
F9_PARTS = ("after a bulk UPDATE", "after a drain by claims", "after a drain by a race")


def f9_half_drained_walk(plans: dict | None) -> Finding:
    """Two parts. After a bulk UPDATE of the prefix (the original's likely method): decided on the first scan (no
    other snapshot) and after VACUUM, with and without the index. After a drain by the claims themselves, one at a
    time: whether the claim still walks consumed rows there and the index still cuts its buffers."""

    if not plans:
        return not_measured("F9", say("F9.no_run"))

    def buffers(label, state):
        return plans.get(f"{label}_{state}_buffers", math.nan)

    needed = [buffers(label, state) for label in ("without", "with") for state in (FIRST_SCAN, VACUUMED)]
    if any(missing(v) for v in needed):
        return not_measured("F9", say("F9.not_explained"))
    jobs, fraction = int(plans["job_count"]), float(plans["consumed_fraction"])
    removed = plans.get(f"without_{FIRST_SCAN}_removed", math.nan)
    cut = {state: buffers("without", state) / buffers("with", state) for state in (FIRST_SCAN, STEADY, VACUUMED)}
    labels = {FIRST_SCAN: say("F9.first_scan"), STEADY: say("F9.steady"), VACUUMED: say("F9.vacuumed"),
              AFTER_CLAIMS: say("F9.after_claims"), AFTER_RACE: say("F9.after_race")}

    def drained_by_claims(state) -> str:
        """The same rule on a queue the claims drained: still walking, and the index still cutting it."""
        cut[state] = buffers("without", state) / buffers("with", state)
        walked = plans.get(f"without_{state}_removed", math.nan)
        if missing(cut[state]):
            return NOT_MEASURED
        if missing(walked) or walked == 0:
            return NOT_REPRODUCED
        return CONFIRMED if cut[state] >= F9_INDEX_HELPS else CORRECTED

    by_claims, by_race = drained_by_claims(AFTER_CLAIMS), drained_by_claims(AFTER_RACE)
    claims_removed = plans.get(f"without_{AFTER_CLAIMS}_removed", math.nan)

    def _f9(verdict, ours, notes, values):
        return make_finding("F9", verdict, ours, notes, values,
                        parts=tuple(zip(F9_PARTS, (verdict, by_claims, by_race))))
    ours = say("F9.ours", consumed=percent(fraction, 0), job_count=count(jobs), removed=count(removed),
               states="; ".join(say("F9.state", state=labels[s], without=count(buffers("without", s)),
                                    with_index=count(buffers("with", s)), cut=ratio(cut[s]))
                                for s in (FIRST_SCAN, STEADY, VACUUMED, AFTER_CLAIMS, AFTER_RACE)
                                if not missing(cut[s])),
               without_ms=ms(plans.get(f"without_{FIRST_SCAN}_ms")), with_ms=ms(plans.get(f"with_{FIRST_SCAN}_ms")))
    values = {"job_count": count(jobs), "consumed": percent(fraction, 0), "removed": count(removed),
              **{f"{label}_{state}_buffers": count(buffers(label, state))
                 for label in ("without", "with") for state in (FIRST_SCAN, STEADY, HELD_SNAPSHOT, VACUUMED)},
              **{f"{state}_cut": ratio(cut[state]) for state in cut},
              "without_ms": ms(plans.get(f"without_{FIRST_SCAN}_ms")), "with_ms": ms(plans.get(f"with_{FIRST_SCAN}_ms")),
              "without_after_claims_buffers": count(buffers("without", AFTER_CLAIMS)),
              "with_after_claims_buffers": count(buffers("with", AFTER_CLAIMS)),
              "after_claims_removed": count(claims_removed),
              "without_after_race_buffers": count(buffers("without", AFTER_RACE)),
              "with_after_race_buffers": count(buffers("with", AFTER_RACE)),
              "after_race_removed": count(plans.get(f"without_{AFTER_RACE}_removed", math.nan))}
    context = []  # the buffer counts themselves are in `ours` and the section's prose; the note says what they mean
    if by_claims != NOT_MEASURED and buffers("without", AFTER_CLAIMS) < buffers("without", FIRST_SCAN):
        context.append(say("F9.claims_read_fewer"))
    time_ratio = plans.get(f"without_{FIRST_SCAN}_ms", math.nan) / plans.get(f"with_{FIRST_SCAN}_ms", math.nan)
    if not missing(time_ratio):
        context.append(say("F9.time_ratio", time_ratio=ratio(time_ratio),
                           original_time_ratio=ratio(ORIGINAL_F9_TIME_RATIO)))
    if missing(removed) or removed == 0:
        return _f9(NOT_REPRODUCED, ours, [say("F9.no_walk")] + context, values)
    helps_now, helps_vacuumed = cut[FIRST_SCAN] >= F9_INDEX_HELPS, cut[VACUUMED] >= F9_INDEX_HELPS
    if not helps_now and not helps_vacuumed:
        return _f9(NOT_REPRODUCED, ours, [say("F9.index_no_help", fold=F9_INDEX_HELPS)] + context, values)
    if not helps_now:
        return _f9(CORRECTED, ours,
                        [say("F9.needs_vacuum", vacuumed_cut=ratio(cut[VACUUMED]),
                             first_scan_cut=ratio(cut[FIRST_SCAN]))]
                        + context, values)
    if not helps_vacuumed:
        context.insert(0, say("F9.vacuum_alone", without=count(buffers("without", VACUUMED)),
                              with_index=count(buffers("with", VACUUMED))))
    if jobs != ORIGINAL_JOB_COUNT:
        return _f9(CONFIRMED_DIFFERENT_SIZE, ours,
                        [say("F9.other_size", job_count=count(jobs), original_job_count=count(ORIGINAL_JOB_COUNT))]
                        + context, values)
    if (same_size_count(buffers("without", FIRST_SCAN), ORIGINAL_F9_WITHOUT_BUFFERS)
            and same_size_count(buffers("with", FIRST_SCAN), ORIGINAL_F9_WITH_BUFFERS)):
        return _f9(CONFIRMED, ours, context, values)

    def nearest(label, original):
        state = min((FIRST_SCAN, STEADY, VACUUMED), key=lambda s: abs(math.log(max(buffers(label, s), 1) / original)))
        return say("F9.nearest", original=count(original), label=label, state=labels[state],
                   ours=count(buffers(label, state)))

    return _f9(CONFIRMED_DIFFERENT_SIZE, ours,
                    [say("F9.not_original", without=nearest("without", ORIGINAL_F9_WITHOUT_BUFFERS),
                         with_index=nearest("with", ORIGINAL_F9_WITH_BUFFERS))]
                    + context, values)


def f10_guarded_filter(plans: dict | None) -> Finding:
    """Read from the guarded claim's plan: its Filter line and the node it sits under."""
    if not plans or not plans.get("guarded_node"):
        return not_measured("F10", say("F10.no_plan"))
    node, index, line = plans["guarded_node"], plans.get("guarded_index"), plans.get("guarded_filter_line")
    under = say("F10.under_index", node=node, index=index) if index else node
    ours = say("F10.ours", filter=line or say("F10.no_filter_line"), under=under, ms=ms(plans.get("guarded_claim_ms")))
    values = {"filter": line or "", "node": node, "index": index or "", "ms": ms(plans.get("guarded_claim_ms"))}
    if not line or "status = 'pending'" not in line:
        return make_finding("F10", NOT_REPRODUCED, ours, say("F10.no_status_filter"), values)
    # the structure is the claim; a single-row UPDATE's time is this machine's
    if node == "Index Scan" and (index or "").endswith("_pkey"):
        return make_finding("F10", CONFIRMED, ours, "", values)
    return make_finding("F10", CONFIRMED_DIFFERENT_SIZE, ours,
                    say("F10.other_node", under=under), values)


# --------------------------------------------------------------------------- the section


@dataclass(frozen=True)
class Loaded:
    """The plans run: every EXPLAIN point, the plans' texts, and the facts F9 and F10 read at the reference point."""

    run: Run
    request: object  # what the params file's plans section asked (plans.PlansParameters)
    points: pd.DataFrame
    texts: dict
    facts: dict  # plan_facts()
    reference: dict  # the point every statement is explained at (the run's results)


def load(reads: dict, loaded: dict) -> Loaded | None:
    asked = reads.get("plans")
    if asked is None or not asked.runs:
        return None
    run = asked.runs[0]
    points, texts = run.summary, plan_texts(run)
    reference = run.results["reference_point"]
    return Loaded(run, asked.request, points, texts, plan_facts(points, reference, texts), reference)


def findings(loaded: dict) -> list[Finding]:
    mine = loaded.get(NAME)
    facts = mine.facts if mine else None
    return [f9_half_drained_walk(facts), f10_guarded_filter(facts)]


def values(loaded: dict, found: dict[str, Finding]) -> dict[str, str]:
    """The plan of the guarded claim, and what a drain does to the table's files."""
    mine = loaded[NAME]
    f9, f10 = found["F9"].values, found["F10"].values
    out = {"plan_job_count": f9.get("job_count", MISSING), "plan_consumed": f9.get("consumed", MISSING),
           "guarded_filter_phrase": (say("guarded_filter", filter=f10["filter"], node=f10["node"], index=f10["index"])
                                     if f10.get("filter") else say("guarded_filter_none")),
           "guarded_claim_ms": f10.get("ms", MISSING),
           "plan_repetitions": counted(mine.request.repetitions, "run")}
    growth = relation_growth(mine.points, int(mine.facts["job_count"]))
    out |= {f"growth_{name}": DASH if value is None else count(value)
            for name, value in growth.items() if not name.endswith("consumed")}
    out |= {"growth_top": percent(growth["top_consumed"], 0), "growth_claimed": percent(growth["claimed_consumed"], 0),
            "growth_partial": span(growth["partial_min"], growth["partial_max"], count)}
    drains = pd.DataFrame(mine.run.results.get("drain_counters", []))

    def drained(kind, column):
        rows = drains[(drains["drain"] == kind) & ~drains["partial_index"]] if len(drains) else drains
        return count(rows[column].iloc[0]) if len(rows) and rows[column].iloc[0] is not None else MISSING

    out |= {"bulk_hot": drained("bulk_update", "n_tup_hot_upd"), "bulk_updates": drained("bulk_update", "n_tup_upd"),
            "claims_hot": drained("claims", "n_tup_hot_upd"), "claims_updates": drained("claims", "n_tup_upd"),
            "claims_drained": drained("claims", "consumed_jobs")}
    return out


# --------------------------------------------------------------------------- the growth of the relations, and one plan's figures


def relation_growth(points: pd.DataFrame, job_count: int) -> dict:
    """Pages of the heap, the primary key and the partial index of one queue size as it drains, from the plans'
    table states: fresh, after the bulk UPDATE of the largest prefix, after VACUUM, and after a drain by claims
    against the bulk UPDATE of the same prefix. Every key is always there; None where that state was not measured."""
    rows = points[(points["strategy"] == "skip_locked") & (points["statement"] == "claim")
                  & (points["job_count"] == job_count)]

    def pages(column, state, fraction, index=False):
        pick = rows[(rows["table_state"] == state) & (rows["partial_index"] == index)
                    & np.isclose(rows["consumed_fraction"].astype(float), fraction)]
        value = pick[column].iloc[0] if len(pick) else None
        return None if value is None or pd.isna(value) else int(value)

    top = float(rows["consumed_fraction"].astype(float).max()) if len(rows) else None
    claimed = rows[rows["table_state"] == "after_claims"]
    claimed_fraction = float(claimed["consumed_fraction"].iloc[0]) if len(claimed) else None
    partial = rows["partial_index_pages"].dropna().astype(int)
    return {"job_count": job_count, "top_consumed": top, "claimed_consumed": claimed_fraction,
            "heap_fresh": pages("heap_pages", "first_scan", 0.0),
            "heap_drained": pages("heap_pages", "first_scan", top) if top is not None else None,
            "heap_vacuumed": pages("heap_pages", "vacuumed", top) if top is not None else None,
            "pkey_fresh": pages("pkey_pages", "first_scan", 0.0),
            "pkey_drained": pages("pkey_pages", "first_scan", top) if top is not None else None,
            "pkey_vacuumed": pages("pkey_pages", "vacuumed", top) if top is not None else None,
            "partial_min": int(partial.min()) if len(partial) else None,
            "partial_max": int(partial.max()) if len(partial) else None,
            "heap_after_claims": pages("heap_pages", "after_claims", claimed_fraction) if claimed_fraction else None,
            "heap_after_bulk": pages("heap_pages", "first_scan", claimed_fraction) if claimed_fraction else None}


def plan_point(points: pd.DataFrame, strategy: str, statement: str, job_count: int, consumed_fraction: float,
               partial_index: bool, table_state: str) -> dict:
    """One EXPLAIN point as a dict (empty if it was not measured); table_state is one of plans.TABLE_STATE_NAMES."""
    rows = points[(points["strategy"] == strategy) & (points["statement"] == statement)
                  & (points["job_count"] == job_count) & (points["partial_index"] == partial_index)
                  & (points["table_state"] == table_state)
                  & np.isclose(points["consumed_fraction"].astype(float), consumed_fraction)]
    return rows.iloc[0].to_dict() if len(rows) else {}
