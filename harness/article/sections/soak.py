"""The section "When the queue runs for hours": jobs arriving at a steady rate for a minute or more, a transaction
holding the MVCC horizon for part of it, each arm's verdict read against the arm it differs from in one setting
(harness.experiments.soak, harness.soak_outcomes), and C9 from tables that keep their history.

An arm's reference is the stored arm that differs from it in one setting only:
    a mitigation          the same arm without it;
    disk, or commits off  the same arm on tmpfs with synchronous commits;
    a holder              the same arm with nothing held (holder none), its control.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

import pandas as pd

from harness import soak_outcomes
from harness.article.findings import (CONFIRMED, CORRECTED, NOT_DISTINGUISHABLE, NOT_MEASURED, NOT_REPRODUCED,
                                      make_finding, not_measured)
from harness.article.formats import DASH, count, ms, number, span
from harness.article.prose import join, numbered, table
from harness.article.wording import Sentences

NAME = "soak"
READS = ("soak",)
say = Sentences(NAME)

# the settings an arm is told apart by; its reference differs in one of them (the module's docstring)
ARM = ("shape", "strategy", "history_rows", "holder", "mitigation", "storage", "synchronous_commit")
LOAD = ("rate_asked", "workers", "job_ms", "pg_version")  # and the same load, on the same server version
SIX_FIGURES = 100_000  # finished jobs a table keeps after a day at six-figure daily volume (C9)

SLOWER, OVERLAP, FASTER = "slower", "overlap", "faster"

# The two write-ups this section answers, their figures as they give them (read in each, not raced here).
ANCHORS = (
    {"source": "Brandur Leach, “Postgres Job Queues & Failure By MVCC” (2015)",
     "url": "https://brandur.org/postgres-queues",
     "setup": "Que on PostgreSQL 9.x, about 50 jobs/s of churn",
     "held": "one long-lived transaction",
     "seen": "60,000 jobs queued an hour in; about 15 minutes from onset to hopeless"},
    {"source": "PlanetScale, “Keeping a Postgres queue healthy” (April 2026)",
     "url": "https://planetscale.com/blog/keeping-a-postgres-queue-healthy",
     "setup": "PostgreSQL 18, 800 jobs/s",
     "held": "three overlapping 120 s analytics queries; then one at a time",
     "seen": "155k backlog, lock time over 300 ms, 383k dead tuples; one at a time: no backlog, about 2 ms, "
             "dead tuples cycling 0 to 23k"},
)
VERDICT_ORDER = (soak_outcomes.SPIRALS, soak_outcomes.CUT_OFF, soak_outcomes.DEGRADES, soak_outcomes.SURVIVES,
                 soak_outcomes.NOT_JUDGED)


@dataclass(frozen=True)
class Loaded:
    runs: tuple
    summaries: pd.DataFrame  # one row per run: its summary (harness.experiments.soak), in the section's order
    series: dict  # run position -> its per-second series (soak_outcomes.SERIES_COLUMNS)
    samples: dict  # run position -> its per-second samples of the table and the horizon
    sample_s: dict  # run position -> how often its sampler read the table and the horizon (s)


def load(reads: dict, loaded: dict) -> Loaded | None:
    runs = reads["soak"].runs if "soak" in reads else ()
    if not runs:
        return None
    summaries = pd.DataFrame([run.summary | {"pg_version": run.manifest.get("server", {}).get("major")}
                              for run in runs])
    return Loaded(tuple(runs), summaries, {i: run.table("series") for i, run in enumerate(runs)},
                  {i: run.table("samples") for i, run in enumerate(runs)},
                  {i: run.manifest.get("procedure", {}).get("sample_s") for i, run in enumerate(runs)})


# --------------------------------------------------------------------------- references


def reference(summaries: pd.DataFrame, position: int) -> int | None:
    """The position of the arm `position` is read against (the module's docstring), None where none is stored."""
    arm = summaries.iloc[position]
    if arm["mitigation"] != "none":
        wanted = {"mitigation": "none"}
    elif arm["storage"] != "tmpfs" or arm["synchronous_commit"] != "on":
        wanted = {"storage": "tmpfs", "synchronous_commit": "on"}
    elif arm["holder"] != "none":
        wanted = {"holder": "none"}
    else:
        return None
    target = {key: arm[key] for key in (*ARM, *LOAD)} | wanted
    for other in range(len(summaries)):
        row = summaries.iloc[other]
        if other != position and all(row[key] == value for key, value in target.items()):
            return other
    return None


# --------------------------------------------------------------------------- C9


def claim_cost(without: pd.DataFrame, with_index: pd.DataFrame) -> str | None:
    """The claim without the partial index against with it, second by second after the warm-up: SLOWER where every
    second's median claim without the index lies above every second's with it, FASTER where every one lies below,
    OVERLAP where they interleave (not distinguishable here); None without a second of each."""
    a = without.loc[without["second"] >= soak_outcomes.WARMUP_S, "claim_p50_ms"].dropna()
    b = with_index.loc[with_index["second"] >= soak_outcomes.WARMUP_S, "claim_p50_ms"].dropna()
    if not len(a) or not len(b):
        return None
    if a.min() > b.max():
        return SLOWER
    if a.max() < b.min():
        return FASTER
    return OVERLAP


def _controls(summaries: pd.DataFrame, history_rows: int) -> tuple[int, int] | None:
    """(without the index, with it): the positions of two unpinned, unmitigated tmpfs skip_locked arms holding
    `history_rows` at the start, under the same load; None where a pair is not stored."""
    def control(row, shape):
        return (row["shape"], int(row["history_rows"]), row["strategy"], row["holder"], row["mitigation"],
                row["storage"], row["synchronous_commit"]) == (shape, history_rows, "skip_locked", "none", "none",
                                                               "tmpfs", "on")
    for without, row in summaries.iterrows():
        if not control(row, "history"):
            continue
        for with_index, other in summaries.iterrows():
            if control(other, "history_indexed") and all(other[key] == row[key] for key in LOAD):
                return without, with_index
    return None


def c9_parts(mine: Loaded) -> list[tuple[str, str, dict]]:
    """(part, verdict, its figures) for each volume with both controls stored: the smallest history (small
    volumes take no index) and every history of six figures or more (they take the index)."""
    runs = mine.summaries
    histories = sorted({int(h) for h in runs["history_rows"]})
    parts = []
    for rows in [h for h in histories[:1] if h < SIX_FIGURES] + [h for h in histories if h >= SIX_FIGURES]:
        pair = _controls(runs, rows)
        if pair is None:
            continue
        without, with_index = pair
        cost = claim_cost(mine.series[without], mine.series[with_index])
        if cost is None:
            continue
        small = rows < SIX_FIGURES
        # small: the claim holds where no index costs nothing beyond the spread; six figures: where it does
        verdict = ({SLOWER: CORRECTED, OVERLAP: CONFIRMED, FASTER: CONFIRMED} if small else
                   {SLOWER: CONFIRMED, OVERLAP: NOT_DISTINGUISHABLE, FASTER: NOT_REPRODUCED})[cost]
        a, b = runs.iloc[without], runs.iloc[with_index]
        parts.append((say("C9.part_small") if small else say("C9.part_large", rows=count(rows)), verdict, {
            "rows": count(rows), "cost": cost,
            "without": _p50_span(mine.series[without]), "with": _p50_span(mine.series[with_index]),
            "rate_without": number(a["sustained_rate"], 0), "rate_with": number(b["sustained_rate"], 0),
            "grown": count(int(rows + a["jobs_arrived"]))}))
    return parts


def _p50_span(series: pd.DataFrame) -> str:
    values = series.loc[series["second"] >= soak_outcomes.WARMUP_S, "claim_p50_ms"].dropna()
    return span(values.min(), values.max(), ms) if len(values) else DASH


def c9_held_history(loaded: dict):
    mine = loaded.get(NAME)
    parts = c9_parts(mine) if mine is not None else []
    if not parts:
        return not_measured("C9", say("C9.not_measured"))
    said = [say.each("C9", ("slower", "overlap", "faster"), part=part, **figures)[figures["cost"]]
            for part, _, figures in parts]
    verdicts = [(part, verdict) for part, verdict, _ in parts]
    return make_finding("C9", verdicts[0][1], " ".join(said), say("C9.note"),
                        parts=tuple(verdicts) if len(verdicts) > 1 else ())


# --------------------------------------------------------------------------- A11

SLOWED = (soak_outcomes.DEGRADES, soak_outcomes.SPIRALS, soak_outcomes.CUT_OFF)


def held_against_control(held, control) -> str:
    """One shape's part of A11: CONFIRMED where the held arm slowed (degrades, spirals, or was cut off slowed) and
    its control survived; CORRECTED where the held arm survived too; NOT_DISTINGUISHABLE where the control slowed
    without a hold (the table's own growth); NOT_MEASURED where either run could not carry its load."""
    if soak_outcomes.NOT_JUDGED in (held["verdict"], control["verdict"]):
        return NOT_MEASURED
    if control["verdict"] != soak_outcomes.SURVIVES:
        return NOT_DISTINGUISHABLE
    return CONFIRMED if held["verdict"] in SLOWED else CORRECTED


def _overall(verdicts) -> str:
    verdicts = set(verdicts)
    for verdict in (CORRECTED, CONFIRMED, NOT_DISTINGUISHABLE):
        if verdict in verdicts:
            return verdict
    return NOT_MEASURED


def held_arms(runs: pd.DataFrame) -> list[tuple[int, int]]:
    """(held, its control) for every held arm on tmpfs with synchronous commits and no mitigation whose control is
    stored."""
    pairs = []
    for position, row in runs.iterrows():
        if row["holder"] == "none" or row["mitigation"] != "none" or row["storage"] != "tmpfs" \
                or row["synchronous_commit"] != "on":
            continue
        control = reference(runs, position)
        if control is not None:
            pairs.append((position, control))
    return pairs


def mitigated(runs: pd.DataFrame) -> tuple[int, int] | None:
    """(a mitigated held arm, the same arm without it), the first stored, on tmpfs."""
    for position, row in runs.iterrows():
        if row["mitigation"] != "none" and row["storage"] == "tmpfs":
            without = reference(runs, position)
            if without is not None:
                return position, without
    return None


def a11_held_horizon(loaded: dict):
    mine = loaded.get(NAME)
    pairs = held_arms(mine.summaries) if mine is not None else []
    if not pairs:
        return not_measured("A11", say("A11.not_measured"))
    runs = mine.summaries
    parts = [(f"{arm_label(runs.iloc[h])}, {held_label(runs.iloc[h])}",
              held_against_control(runs.iloc[h], runs.iloc[c])) for h, c in pairs]
    slowed = [p for p, v in parts if v == CONFIRMED]
    held = runs.iloc[pairs[0][0]]
    values = {"slowed": count(len(slowed)), "held": count(len(parts)), "pin": f"{held['pin_s']:g} s",
              "rate": number(held["rate"], 0), "share": str(held["rate_asked"]), "workers": str(held["workers"]),
              "pg": str(held["pg_version"])}
    pair = mitigated(runs)
    if pair is not None:
        with_it, without = runs.iloc[pair[0]], runs.iloc[pair[1]]
        setting = with_it.get("mitigation_setting")
        values |= {"mitigation": setting if isinstance(setting, str) else with_it["mitigation"],
                   "mitigated_verdict": verdict_text(with_it),
                   "unmitigated_verdict": verdict_text(without),
                   "mitigation_helped": str(with_it["verdict"] == soak_outcomes.SURVIVES
                                            and without["verdict"] in SLOWED)}
    ours = say("A11.ours", **values)
    return make_finding("A11", _overall(v for _, v in parts), ours, say("A11.note"), values,
                        parts=tuple(parts) if len(parts) > 1 else ())


def findings(loaded: dict) -> list:
    return [c9_held_history(loaded), a11_held_horizon(loaded)]


# --------------------------------------------------------------------------- the page


def arm_label(row) -> str:
    """The arm in a few words: the shape, and what is not the section's usual (claim, history, storage)."""
    words = [row["shape"].replace("_", " ")]
    if row["strategy"] != "skip_locked":
        words.append(row["strategy"])
    if int(row["history_rows"]):
        words.append(say("label.history", rows=count(row["history_rows"])))
    if row["storage"] != "tmpfs":
        words.append(say("label.storage", storage=row["storage"]))
    if row["synchronous_commit"] != "on":
        words.append(say("label.commit_off"))
    return ", ".join(words)


def held_label(row) -> str:
    held = say("held.none") if row["holder"] == "none" else row["holder"].replace("_", " ")
    return held if row["mitigation"] == "none" else say("held.mitigated", held=held,
                                                        mitigation=row["mitigation"].replace("_", " "))


def verdict_text(row) -> str:
    """The verdict as the table says it: a run not judged says why, and what the rule would have said."""
    if row["verdict"] != soak_outcomes.NOT_JUDGED:
        return row["verdict"].replace("_", " ")
    why = say("not_judged.cpu_bound") if row.get("cpu_bound") else say("not_judged.arrivals_behind")
    return say("not_judged.verdict", why=why, verdict=row["verdict_if_judged"].replace("_", " "))


COLUMNS = ("table", "held by", "jobs/s", "claim p99 ms: before / held", "dead tuples at most", "backlog at most",
           "verdict", "read against")


def verdict_rows(mine: Loaded) -> pd.DataFrame:
    rows = []
    runs = mine.summaries
    for position, row in runs.iterrows():
        ref = reference(runs, position)
        against = DASH if ref is None else say("against", verdict=verdict_text(runs.iloc[ref]),
                                                 held=held_label(runs.iloc[ref]))
        rows.append(dict(zip(COLUMNS, (
            arm_label(row), held_label(row), number(row["rate"], 0),
            f"{number(row['claim_p99_ms_before'], 2)} / {number(row['claim_p99_ms_during'], 2)}",
            count(row["dead_tuples_max"]), count(row["backlog_max"]), verdict_text(row), against))))
    return pd.DataFrame(rows, columns=list(COLUMNS))


def verdict_table(loaded: dict) -> str:
    mine = loaded.get(NAME)
    if mine is None:
        return ""
    runs = mine.summaries
    return table(verdict_rows(mine), caption=say(
        "caption", rates=join(sorted({say("rate.share", share=r) if isinstance(r, str) else
                                      say("rate.fixed", rate=number(r, 0)) for r in runs["rate_asked"]})),
        workers=join([str(w) for w in sorted(set(runs["workers"]))]),
        job_ms=join([number(j, 0) for j in sorted(set(runs["job_ms"]))])), css_class="wide")


ANCHOR_COLUMNS = ("source", "load", "held by", "seen")


def worst_held(runs: pd.DataFrame) -> int | None:
    """The held arm on tmpfs that fared worst: by verdict (a spiral first), then by its highest backlog."""
    held = runs[(runs["holder"] != "none") & (runs["storage"] == "tmpfs")]
    if not len(held):
        return None
    rank = held["verdict"].map({v: i for i, v in enumerate(VERDICT_ORDER)})
    return int(held.assign(rank=rank).sort_values(["rank", "backlog_max"], ascending=[True, False]).index[0])


def anchors_table(loaded: dict) -> str:
    """The two write-ups' figures as they give them, and this build's worst held arm beside them."""
    rows = [dict(zip(ANCHOR_COLUMNS, (f'<a href="{html.escape(a["url"])}">{html.escape(a["source"])}</a>',
                                      html.escape(a["setup"]), html.escape(a["held"]), html.escape(a["seen"]))))
            for a in ANCHORS]
    mine = loaded.get(NAME)
    worst = worst_held(mine.summaries) if mine is not None else None
    if worst is not None:
        row = mine.summaries.iloc[worst]
        rows.append(dict(zip(ANCHOR_COLUMNS, (html.escape(say("anchor.ours")), html.escape(say(
            "anchor.load", pg=str(row["pg_version"]), rate=number(row["rate"], 0), shape=arm_label(row))),
            html.escape(say("anchor.held", held=held_label(row), pin=f"{row['pin_s']:g}")),
            html.escape(say("anchor.seen", backlog=count(row["backlog_max"]),
                            before=ms(row["claim_p99_ms_before"]), during=ms(row["claim_p99_ms_during"]),
                            dead=count(row["dead_tuples_max"]), verdict=verdict_text(row)))))))
    return table(pd.DataFrame(rows, columns=list(ANCHOR_COLUMNS)), caption=say("anchor.caption"), escape=False)


def values(loaded: dict, found: dict) -> dict[str, str]:
    mine = loaded.get(NAME)
    if mine is None:
        return {"soak_setup": say("setup.no_runs"), "soak_outcome": ""}
    runs = mine.summaries
    pinned = runs[runs["holder"] != "none"]
    pins = sorted({(float(a), float(b)) for a, b in zip(pinned["pin_from"], pinned["pin_to"])})
    setup = say("setup.runs", arms=numbered(len(runs), "arm"),
                seconds=join([f"{s:g} s" for s in sorted(set(runs["seconds"]))]),
                pins=join([f"{a:g} s to {b:g} s" for a, b in pins]) if pins else DASH,
                recover=f"{soak_outcomes.RECOVER_WITHIN_S:g} s",
                pg=join([str(v) for v in sorted(set(runs["pg_version"]))]))
    verdicts = pinned["verdict"].value_counts()
    outcome = say("outcome", counted=join([f"{count(n)} {v.replace('_', ' ')}" for v, n in verdicts.items()])) \
        if len(pinned) else ""
    disk = runs[runs["wal_sync_ms_per_sync"].notna()] if "wal_sync_ms_per_sync" in runs else runs.iloc[0:0]
    if len(disk):
        outcome += " " + say("flush", flush=span(disk["wal_sync_ms_per_sync"].min(),
                                                 disk["wal_sync_ms_per_sync"].max(), ms))
    return {"soak_setup": setup, "soak_outcome": outcome}
