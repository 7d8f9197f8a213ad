"""The churn section: what the status flips do to the table (F11-F13 and A4; C9 is read from the soak)."""

from __future__ import annotations


from dataclasses import dataclass

import pandas as pd

from harness.article.compare import same_size_count
from harness.article.findings import (ADDED, CONFIRMED, CONFIRMED_DIFFERENT_SIZE, CORRECTED, NOT_REPRODUCED,
                                      ORIGINAL_F11_CLAIMS, ORIGINAL_F12_LOW_FILLFACTOR, ORIGINAL_F12_LOW_HOT_SHARE,
                                      ORIGINAL_F12_UPDATES, ORIGINAL_JOB_COUNT, Finding, make_finding, not_measured)
from harness.article.formats import count, percent
from harness.article.prose import numbered, table, times
from harness.article.sections.churn_charts import churn_modes, no_hot_updates_table
from harness.article.wording import Sentences
from harness.storage import Run

NAME = "churn"
READS = ("churn",)
UPSTREAM = ()
say = Sentences(NAME)


def churn_facts(matrix: pd.DataFrame, pruning: pd.DataFrame) -> dict:
    """F11-F13 from a stored churn run: HOT counts at the default and a lower fillfactor, and the pruning arms."""

    f: dict = {}
    fillfactors = sorted(int(v) for v in matrix["fillfactor"].unique())
    f["fillfactors"] = fillfactors
    f["default_ff"] = 100 if 100 in fillfactors else fillfactors[-1]
    f["low_ff"] = 70 if 70 in fillfactors else fillfactors[0]
    f["payload_bytes"] = sorted(int(v) for v in matrix["payload_bytes"].unique())
    for mode in ("sequential", "bulk"):
        for label, ff in (("default", f["default_ff"]), ("low", f["low_ff"])):
            for index_label, partial in (("plain", False), ("indexed", True)):
                point = churn_point(matrix, ff, partial, 0, mode)
                key = f"{mode}_{label}_{index_label}"
                f[f"{key}_hot"] = int(point["hot_updates"]) if point else None
                f[f"{key}_updates"] = int(point["updates"]) if point else None
    f["max_hot_with_index"] = int(matrix.loc[matrix["partial_index"] == True, "hot_updates"].max()) \
        if (matrix["partial_index"] == True).any() else None  # noqa: E712 (a column of bools)
    if len(pruning):
        for arm, on in (("on", True), ("off", False)):
            rows = pruning[pruning["autovacuum"] == on].set_index("phase")
            for phase in ("immediate", "settled", "after_read"):
                f[f"pruning_{arm}_{phase}_dead"] = int(rows.loc[phase, "dead_tuples"]) if phase in rows.index else None
            f[f"pruning_{arm}_autovacuum_runs"] = int(rows["autovacuum_runs"].max()) if len(rows) else 0
            f[f"pruning_{arm}_autoanalyze_runs"] = int(rows["autoanalyze_runs"].max()) if len(rows) else 0
            f[f"pruning_{arm}_updates"] = int(rows["updates"].max()) if len(rows) else 0
            f[f"pruning_{arm}_hot"] = int(rows["hot_updates"].max()) if len(rows) else 0
            f["pruning_job_count"] = int(rows["job_count"].max()) if len(rows) else None
    return f


# --------------------------------------------------------------------------- the churn rules (F11-F13, A4)


def f11_pruning_alone(churn: dict | None) -> Finding:
    """Decided by the arm with autovacuum off: is n_dead_tup zero after every page was read?"""
    if not churn or churn.get("pruning_off_after_read_dead") is None or churn.get("pruning_on_settled_dead") is None:
        return not_measured("F11", say("F11.no_run"))
    on, off = churn["pruning_on_settled_dead"], churn["pruning_off_after_read_dead"]
    vacuums, analyzes = churn.get("pruning_on_autovacuum_runs", 0), churn.get("pruning_on_autoanalyze_runs", 0)
    claims, rows = churn.get("pruning_on_updates"), churn.get("pruning_job_count")
    values = {"claims": count(claims), "rows": count(rows), "on_settled_dead": count(on), "off_after_read_dead": count(off),
              "autovacuum_runs": count(vacuums), "autoanalyze_runs": count(analyzes),
              "on_immediate_dead": count(churn.get("pruning_on_immediate_dead")),
              "off_immediate_dead": count(churn.get("pruning_off_immediate_dead"))}
    ours = say("F11.ours", claims=count(claims), rows=count(rows), on_settled_dead=count(on),
               autovacuum_runs=count(vacuums), autoanalyze_runs=count(analyzes), off_after_read_dead=count(off))
    size = ("" if claims == ORIGINAL_F11_CLAIMS and rows == ORIGINAL_JOB_COUNT else
            say("F11.other_size", claims=count(claims), rows=count(rows), original_claims=count(ORIGINAL_F11_CLAIMS),
                original_rows=count(ORIGINAL_JOB_COUNT)))
    if off == 0:
        return make_finding("F11", CONFIRMED if not size else CONFIRMED_DIFFERENT_SIZE, ours,
                        [say("F11.pruning_alone"), size], values)
    if on == 0:
        why = (say("F11.vacuum_ran", autovacuum_times=times(vacuums), autoanalyze_times=times(analyzes))
               if vacuums or analyzes else say("F11.no_vacuum_ran"))
        # each claim's flip leaves one dead version; what n_dead_tup lost of them with autovacuum off, pruning took
        made = churn.get("pruning_off_updates") or claims
        reclaimed = max(made - off, 0) if made else None
        values["off_reclaimed"] = count(reclaimed)
        pruned = (say("F11.pruned_none", dead=count(made), off_after_read_dead=count(off)) if not reclaimed else
                  say("F11.pruned_some", reclaimed=count(reclaimed), dead=count(made), off_after_read_dead=count(off)))
        return make_finding("F11", CORRECTED, ours, [pruned, say("F11.vacuum_needed", why=why), size], values)
    ran = say("F11.ran") if vacuums or analyzes else say("F11.not_ran")
    return make_finding("F11", NOT_REPRODUCED, ours,
                    [say("F11.never_zero", on_settled_dead=count(on), ran=ran), size], values)


def _of(hot, updates) -> str:
    return "not measured" if hot is None or updates is None else f"{count(hot)} of {count(updates)}"


def f12_hot_needs_room(churn: dict | None) -> Finding:
    """Against the original's 0 and 448 of 1,000, on the bulk UPDATE where the run has it.

    The original does not say how its 1,000 updates were made. One UPDATE over every row flips a page's rows with
    no pruning in between, the situation its zero at the default fillfactor describes; claims made one at a time
    are shown beside it.
    """
    if not churn:
        return not_measured("F12", say("F12.no_run"))
    mode = "bulk" if churn.get("bulk_default_plain_hot") is not None else "sequential"
    how = {"bulk": say("F12.bulk"), "sequential": say("F12.sequential")}
    default_hot, default_n = churn.get(f"{mode}_default_plain_hot"), churn.get(f"{mode}_default_plain_updates")
    low_hot, low_n = churn.get(f"{mode}_low_plain_hot"), churn.get(f"{mode}_low_plain_updates")
    if None in (default_hot, default_n, low_hot, low_n) or not default_n or not low_n:
        return not_measured("F12", say("F12.no_plain"))
    default_ff, low_ff = churn["default_ff"], churn["low_ff"]
    default_share, low_share = default_hot / default_n, low_hot / low_n
    parts = [say("F12.mode", how=how[m], default_ff=default_ff, low_ff=low_ff,
                 default_hot=_of(churn.get(f"{m}_default_plain_hot"), churn.get(f"{m}_default_plain_updates")),
                 low_hot=_of(churn.get(f"{m}_low_plain_hot"), churn.get(f"{m}_low_plain_updates")))
             for m in ("bulk", "sequential") if churn.get(f"{m}_default_plain_hot") is not None]
    ours = "; ".join(parts)
    values = {"how": how[mode], "default_ff": count(default_ff), "low_ff": count(low_ff),
              "default_hot": count(default_hot), "low_hot": count(low_hot), "updates": count(low_n),
              "default_share": percent(default_share), "low_share": percent(low_share)}
    if low_share <= default_share:
        return make_finding("F12", NOT_REPRODUCED, ours,
                        say("F12.no_more_hot", how=how[mode], low_ff=low_ff, default_ff=default_ff), values)
    notes = []
    if low_ff != ORIGINAL_F12_LOW_FILLFACTOR:
        notes.append(say("F12.other_fillfactor", low_ff=low_ff, original_low_ff=ORIGINAL_F12_LOW_FILLFACTOR))
    if default_hot:
        notes.append(say("F12.hot_at_default", default_ff=default_ff, default_share=percent(default_share)))
    if not same_size_count(low_share, ORIGINAL_F12_LOW_HOT_SHARE):
        notes.append(say("F12.other_share", low_ff=low_ff, low_share=percent(low_share),
                         original_low_share=percent(ORIGINAL_F12_LOW_HOT_SHARE)))
    return make_finding("F12", CONFIRMED_DIFFERENT_SIZE if notes else CONFIRMED, ours,
                    [say("F12.how_made", original_updates=count(ORIGINAL_F12_UPDATES), how=how[mode],
                         updates=count(low_n))] + notes, values)


def f13_partial_index_blocks_hot(churn: dict | None) -> Finding:
    if not churn or churn.get("max_hot_with_index") is None:
        return not_measured("F13", say("F13.no_index"))
    most = churn["max_hot_with_index"]
    low_ff = churn.get("low_ff")
    ours = say("F13.ours", low_ff=low_ff,
               sequential=_of(churn.get("sequential_low_indexed_hot"), churn.get("sequential_low_indexed_updates")),
               bulk=_of(churn.get("bulk_low_indexed_hot"), churn.get("bulk_low_indexed_updates")),
               most=say("F13.none_hot") if most == 0 else say("F13.most_hot", most=numbered(most, "HOT update")))
    values = {"max_hot_with_index": count(most), "low_ff": count(low_ff),
              "sequential_hot": count(churn.get("sequential_low_indexed_hot")),
              "bulk_hot": count(churn.get("bulk_low_indexed_hot"))}
    if most == 0:
        return make_finding("F13", CONFIRMED, ours, "", values)
    return make_finding("F13", NOT_REPRODUCED, ours, say("F13.some_hot", most=count(most)), values)


def a4_hot_claimed_one_at_a_time(churn: dict | None) -> Finding:
    hot, updates = (churn or {}).get("sequential_default_plain_hot"), (churn or {}).get("sequential_default_plain_updates")
    if hot is None or not updates:
        return not_measured("A4", say("A4.no_run"))
    ff = churn["default_ff"]
    bulk = churn.get("bulk_default_plain_hot")
    ours = say("A4.ours", fillfactor=ff, hot=_of(hot, updates),
               bulk=say("A4.bulk", bulk=_of(bulk, churn.get("bulk_default_plain_updates"))) if bulk is not None else "")
    values = {"hot": count(hot), "updates": count(updates), "share": percent(hot / updates), "fillfactor": count(ff)}
    note = say("A4.pruned_room") if hot else say("A4.no_room")
    return make_finding("A4", ADDED, ours, note, values)


# --------------------------------------------------------------------------- the section


@dataclass(frozen=True)
class Loaded:
    """The churn run: the fillfactor-by-index matrix, the pruning arms, and the facts F11-F13 and A4 read."""

    run: Run
    request: object  # what the params file's churn section asked (churn.ChurnParameters)
    matrix: pd.DataFrame
    pruning: pd.DataFrame
    facts: dict  # churn_facts()


def load(reads: dict, loaded: dict) -> Loaded | None:
    asked = reads.get("churn")
    if asked is None or not asked.runs:
        return None
    run = asked.runs[0]
    matrix, pruning = run.summary, run.table("pruning", absent_ok=True)
    return Loaded(run, asked.request, matrix, pruning, churn_facts(matrix, pruning))


def findings(loaded: dict) -> list[Finding]:
    mine = loaded.get(NAME)
    facts = mine.facts if mine else None
    return [f11_pruning_alone(facts), f12_hot_needs_room(facts), f13_partial_index_blocks_hot(facts),
            a4_hot_claimed_one_at_a_time(facts)]


def values(loaded: dict, found: dict[str, Finding]) -> dict[str, str]:
    """The pruning experiment's dead tuples and vacuum runs."""
    mine = loaded[NAME]
    facts = mine.facts
    return {"pruning_claims": count(facts.get("pruning_on_updates")), "pruning_rows": count(facts.get("pruning_job_count")),
            "pruning_on_immediate": count(facts.get("pruning_on_immediate_dead")),
            "pruning_on_settled": count(facts.get("pruning_on_settled_dead")),
            "pruning_on_autovacuum": times(facts.get("pruning_on_autovacuum_runs", 0)),
            "pruning_on_autoanalyze": times(facts.get("pruning_on_autoanalyze_runs", 0)),
            "pruning_off_immediate": count(facts.get("pruning_off_immediate_dead")),
            "pruning_off_settled": count(facts.get("pruning_off_settled_dead")),
            "pruning_off_after_read": count(facts.get("pruning_off_after_read_dead")),
            "churn_updates": count(mine.request.updates)}


# the columns of analysis.no_hot_updates_table that hold counts
HOT_TABLE_COUNTS = ("updates", "HOT updates", "moved to another page")


def hot_with_index_table(loaded: dict) -> str:
    """Per drain mode, the updates with the partial index in place and how many were HOT."""
    mine = loaded[NAME]
    return table(no_hot_updates_table(churn_modes(mine.matrix)), formats=dict.fromkeys(HOT_TABLE_COUNTS, count))


# --------------------------------------------------------------------------- one point of the churn matrix


def churn_point(matrix: pd.DataFrame, fillfactor: int, partial_index: bool, payload_bytes: int = 0,
                mode: str = "sequential", worker_count: int | None = None) -> dict:
    rows = matrix[(matrix["fillfactor"] == fillfactor) & (matrix["partial_index"] == partial_index)
                  & (matrix["payload_bytes"] == payload_bytes) & (matrix["mode"] == mode)]
    if worker_count is not None:
        rows = rows[rows["worker_count"] == worker_count]
    return rows.iloc[0].to_dict() if len(rows) else {}
