"""The section "When a transaction holds the horizon": jobs arriving at a steady rate for a minute or more, a transaction
holding the MVCC horizon for part of it, each arm's verdict read against the arm it differs from in one setting
(harness.experiments.soak.measure, harness.experiments.soak.outcomes), and C9 from tables that keep their history.

An arm's reference is the stored arm that differs from it in one setting only:
    a mitigation          the same arm without it;
    commits off           the same arm with synchronous commits;
    disk                  held: its control on the same disk where one is stored, else the same arm on tmpfs;
                          nothing held: the same control on tmpfs;
    a holder              the same arm with nothing held (holder none), its control;
    a newer server        the same control on the oldest PostgreSQL major stored (a params section of its own,
                          soak_pg18, races arms on 18 beside the soak's on 16).
"""

from __future__ import annotations

import html

import numpy as np
import pandas as pd

from harness.article.compare import alike, alike_margin_said
from harness.article.findings import (CONFIRMED, CONFIRMED_IN_PART, CORRECTED, NOT_DISTINGUISHABLE, NOT_MEASURED,
                                      NOT_REPRODUCED, make_finding, not_measured)
from harness.article.formats import DASH, count, ms, number, span
from harness.article.prose import join, numbered, table
from harness.article.sections import soak_model
from harness.article.sections.soak_arms import (LOAD, PRACTICAL_MARGIN_S, Loaded, arm_label, base_arm, cpu_marked,
                                                cpu_note, cpu_text, held_groups, held_part, held_label, load_runs,
                                                on_disk, onset_text, onsets, reference, repeat_label, row_at,
                                                runs_each, verdict_text, verdicts_text, worst_part)
from harness.article.wording import Sentences
from harness.experiments.soak import outcomes as soak_outcomes
from harness.stats import percentile_ratio_interval

NAME = "soak"
READS = ("soak", "soak_pg18")  # the soak's arms, and the same arms on another PostgreSQL major
UPSTREAM = ()
say = Sentences(NAME)

DECISION_SHARE = 0.25  # the decision gives the model's hold at this share of the timeout arm's rate
SIX_FIGURES = 100_000  # finished jobs a table keeps after a day at six-figure daily volume (C9)

SLOWER, OVERLAP, FASTER, ALIKE = "slower", "overlap", "faster", "alike"
NOT_JUDGED_COST = "not_judged"  # a C9 pair one of whose runs could not carry its load

# The two write-ups this section answers, their figures as they give them (not raced here), as earlier sessions read
# them in each post; on 2026-12-06 the search tool's copy of brandur.org/postgres-queues showed his (50 jobs/s, 60k
# an hour in, about 15 minutes from onset to hopeless), and its copy of PlanetScale's post shows its opening only:
# its figures here agree with a summary of it (sysdesign-wiki.pages.dev, 2026-04-11). None: not given there. The
# page converts them to its own units (_their_row); Brandur's versions kept are an estimate from his rate.
ANCHORS = (
    {"source": "Brandur Leach, “Postgres Job Queues & Failure By MVCC” (2015)",
     "url": "https://brandur.org/postgres-queues", "pg": "9.x", "queue": "Que", "rate": 50.0,
     # a dead tuple per job: Que deletes a job it finished (assumed for the estimate, not read here at a tag)
     "held": "one long-lived transaction", "held_s": 3600.0, "versions_per_job": 1,
     "dead": None, "claim_before_ms": None, "claim_then_ms": None, "behind": 60_000, "hopeless_s": 15 * 60.0},
    {"source": "PlanetScale, “Keeping a Postgres queue healthy” (April 2026)",
     "url": "https://planetscale.com/blog/keeping-a-postgres-queue-healthy", "pg": "18", "queue": "its own",
     "rate": 800.0, "held": "three overlapping 120 s analytics statements", "held_s": None, "versions_per_job": 1,
     "dead": 383_000, "claim_before_ms": 2.0, "claim_then_ms": 300.0,  # "over 300 ms" of lock time
     "behind": 155_000, "hopeless_s": None},
)


def load(reads: dict, loaded: dict) -> Loaded | None:
    # a library's arm listed here is the libraries' section's to read (library_soak)
    mine = load_runs(tuple(run for name in READS for run in (reads[name].runs if name in reads else ())
                           if run.summary.get("library") is None))
    if mine is not None and mine.summaries["pg_version"].nunique() > 1:  # each arm's label names its server then
        mine.summaries["pg_shown"] = mine.summaries["pg_version"]
    return mine


# --------------------------------------------------------------------------- references


def _not_judged(row) -> bool:
    return row["verdict"] == soak_outcomes.NOT_JUDGED


# --------------------------------------------------------------------------- C9


def compared(series: pd.DataFrame, until_s: float) -> pd.DataFrame:
    """The seconds C9 compares: after the warm-up and before `until_s` (the run's hold, or where it would be), while
    the table holds about what it started with: a table that keeps its history grows all run."""
    return series[(series["second"] >= soak_outcomes.WARMUP_S) & (series["second"] < until_s)]


def claim_cost(without: pd.DataFrame, with_index: pd.DataFrame) -> str | None:
    """The claim without the partial index against with it, second by second: SLOWER where every second's median
    claim without the index lies above every second's with it, FASTER where every one lies below; where they
    interleave, ALIKE where the 95 % bootstrap interval of the ratio of their median seconds
    (stats.percentile_ratio_interval) lies inside compare.ALIKE_MARGIN, else OVERLAP (not distinguishable here); None
    without a second of each."""
    a, b = without["claim_p50_ms"].dropna(), with_index["claim_p50_ms"].dropna()
    if not len(a) or not len(b):
        return None
    if a.min() > b.max():
        return SLOWER
    if a.max() < b.min():
        return FASTER
    low, high = percentile_ratio_interval(a.to_numpy(), b.to_numpy(), percentile=50)
    return ALIKE if alike(low, high) else OVERLAP


def _controls(summaries: pd.DataFrame, history_rows: int) -> tuple[int, int] | None:
    """(without the index, with it): the positions of two skip_locked arms with nothing held, nothing changed,
    holding `history_rows` at the start, under the same load and repeat; None where a pair is not stored."""
    def control(row, shape):
        return (row["shape"], int(row["history_rows"]), row["strategy"], row["holder"]) == \
            (shape, history_rows, "skip_locked", "none") and base_arm(row) and not soak_outcomes.vacuum_every(row)
    for without, row in summaries.iterrows():
        if not control(row, "history"):
            continue
        for with_index, other in summaries.iterrows():
            if control(other, "history_indexed") and all(other[key] == row[key] for key in (*LOAD, "repeat")):
                return without, with_index
    return None


def c9_parts(mine: Loaded) -> list[tuple[str, str, dict]]:
    """(part, verdict, its figures) for each volume with both controls stored: the smallest history (small
    volumes take no index) and every history of six figures or more (they take the index). A pair one of whose
    runs could not carry its load is NOT_MEASURED."""
    runs = mine.summaries
    histories = sorted({int(h) for h in runs["history_rows"]})
    parts = []
    for rows in [h for h in histories[:1] if h < SIX_FIGURES] + [h for h in histories if h >= SIX_FIGURES]:
        pair = _controls(runs, rows)
        if pair is None:
            continue
        without, with_index = pair
        a, b = runs.iloc[without], runs.iloc[with_index]
        until = min(float(a["pin_from"]), float(b["pin_from"]))
        seconds_a, seconds_b = compared(mine.series[without], until), compared(mine.series[with_index], until)
        cost = claim_cost(seconds_a, seconds_b)
        if cost is None:
            continue
        small = rows < SIX_FIGURES
        if _not_judged(a) or _not_judged(b):
            cost, verdict = NOT_JUDGED_COST, NOT_MEASURED
        else:  # small: the claim holds where no index costs nothing (alike or faster); six figures: where it costs
            verdict = ({SLOWER: CORRECTED, ALIKE: CONFIRMED, FASTER: CONFIRMED, OVERLAP: NOT_DISTINGUISHABLE}
                       if small else
                       {SLOWER: CONFIRMED, ALIKE: NOT_REPRODUCED, FASTER: NOT_REPRODUCED,
                        OVERLAP: NOT_DISTINGUISHABLE})[cost]
        part = say("C9.part_empty") if rows == 0 else say("C9.part_rows", rows=count(rows))
        parts.append((part, verdict, {
            # the table without the index at the last second compared: every job that arrived stays in it
            "cost": cost, "grown": count(int(rows + mine.series[without].loc[
                mine.series[without]["second"] < until, "arrived"].sum())),
            "seconds": f"{soak_outcomes.WARMUP_S:g} s to {until:g} s",
            "without": _p50_span(seconds_a), "with": _p50_span(seconds_b),
            "rate_without": number(a["rate"], 0), "rate_with": number(b["rate"], 0),
            "margin": alike_margin_said()}))
    return parts


def _p50_span(seconds: pd.DataFrame) -> str:
    values = seconds["claim_p50_ms"].dropna()
    return span(values.min(), values.max(), ms) if len(values) else DASH


def c9_held_history(loaded: dict):
    mine = loaded.get(NAME)
    parts = c9_parts(mine) if mine is not None else []
    if not parts:
        return not_measured("C9", say("C9.not_measured"))
    said = [say.each("C9", ("slower", "overlap", "alike", "faster", "not_judged"), part=part, **figures)[figures["cost"]]
            for part, _, figures in parts]
    # fillfactor, the claim's third knob, is not varied with the volume: F12 and F13 measure it on its own
    verdicts = [(part, verdict) for part, verdict, _ in parts] + [(say("C9.part_fillfactor"), NOT_MEASURED)]
    verdict = worst_part(v for _, v in verdicts)
    if verdict == CONFIRMED:  # fillfactor by volume, a part of the claim, is not measured: never a bare "confirmed"
        verdict = CONFIRMED_IN_PART
    return make_finding("C9", verdict, " ".join(said), say("C9.note"), parts=tuple(verdicts))


# --------------------------------------------------------------------------- A11


def _group_of(runs: pd.DataFrame, position: int) -> tuple[list[int], list[int]] | None:
    """The held arm's repeats and their controls' that `position` is one of."""
    return next(((held, controls) for held, controls in held_groups(runs) if position in held), None)


def timeout_arm(runs: pd.DataFrame) -> tuple[int, int] | None:
    """(a held arm under a timeout, the same arm without it), the first stored off the disk whose arm without it is
    a part of A11 that the hold slowed."""
    for position, row in runs.iterrows():
        setting = row.get("mitigation_setting")
        if not isinstance(setting, str) or on_disk(row) or row["synchronous_commit"] != "on":
            continue
        without = reference(runs, position)
        group = _group_of(runs, without) if without is not None else None
        if group is not None and held_part(runs, *group) == CONFIRMED:
            return position, without
    return None


def load_said(runs: pd.DataFrame) -> str:
    """The arrivals as asked: shares of the rate the workers sustained, or fixed rates."""
    shares = sorted({r for r in runs["rate_asked"] if isinstance(r, str)}, key=lambda r: float(r[:-1]))
    fixed = sorted({float(r) for r in runs["rate_asked"] if not isinstance(r, str)})
    return join(([say("rate.share", share=join(shares))] if shares else [])
                + [say("rate.fixed", rate=number(r, 0)) for r in fixed])


def a11_held_horizon(loaded: dict):
    mine = loaded.get(NAME)
    groups = held_groups(mine.summaries) if mine is not None else []
    if not groups:
        return not_measured("A11", say("A11.not_measured"))
    runs = mine.summaries
    parts = [(f"{arm_label(runs.iloc[held[0]])}, {held_label(runs.iloc[held[0]])}", held_part(runs, held, controls))
             for held, controls in groups]
    decided = [v for _, v in parts if v in (CONFIRMED, CORRECTED)]
    held = runs.iloc[[p for h, _ in groups for p in h]]
    values = {"slowed": count(decided.count(CONFIRMED)), "decided": count(len(decided)),
              "pin": hold_said(held), "margin": f"{PRACTICAL_MARGIN_S:g} s",
              "rates": span(held["rate"].min(), held["rate"].max(), lambda v: number(v, 0)),
              "load": load_said(held), "workers": join([str(w) for w in sorted(set(held["workers"]))]),
              "pg": join([str(v) for v in sorted(set(held["pg_version"]))])}
    pair = timeout_arm(runs)
    if pair is not None and runs.iloc[pair[0]]["verdict"] != soak_outcomes.NOT_JUDGED:  # else the row is undecided
        with_it = runs.iloc[pair[0]]
        ended = with_it.get("pin_ended_early_s")
        without = _group_of(runs, pair[1])[0]
        fell_in_run = _fell_in_run(with_it)
        fell = fallen(runs, without)  # the repeats without the timeout that fell behind
        values |= {"mitigation": with_it["mitigation_setting"], "mitigated_arm": arm_label(with_it),
                   "mitigated_rate": number(with_it["rate"], 0),
                   # how long the hold lasted under the timeout: until the server ended it, or all of it
                   "mitigated_hold": f"{(ended if ended is not None and not pd.isna(ended) else with_it['pin_to']) - with_it['pin_from']:.0f} s",
                   "mitigated_verdict": verdict_text(with_it),
                   # over the whole run from the hold's start, the seconds after the server ended it included
                   "mitigated_outcome": run_outcome(with_it),
                   "mitigated_slowed": "" if pd.isna(with_it.get("seconds_to_slow_in_run")) else say(
                       "timeout.slowed", slowed=f"{with_it['seconds_to_slow_in_run']:.0f} s"),
                   "unmitigated_verdict": verdicts_text(runs, without),
                   # when the same hold without the timeout failed the queue, over its repeats: the timeout to set
                   # is below it
                   "unmitigated_behind": onset_text(runs, fell or without, "seconds_to_fall_behind"),
                   "unmitigated_cpu": cpu_text([cpu_marked(runs.iloc[p]) for p in without]),
                   "unmitigated_slow": onset_text(runs, without, "seconds_to_slow"),
                   # the timeout kept the queue from falling behind over the whole run (not only its short hold)
                   # where the same hold without it fell behind in more than half its repeats (its part confirmed:
                   # timeout_arm). Changed after runs (docs/soak.md): a slowed claim no longer counts against it;
                   # every repeat was asked to have fallen behind until the cold build of 2026-12-07 at 2a3f4f2
                   "unmitigated_share": fell_share(fell, without),
                   "mitigation_helped": str(fell_in_run is None
                                            and soak_outcomes.fell_mostly(p in fell for p in without))}
        values |= soak_model.at_share(mine, pair[0], DECISION_SHARE)
    values["runs"] = runs_each(held)
    marked = sum(cpu_marked(row) is not None for _, row in held.iterrows())
    values["cpu"] = say("A11.cpu", marked=count(marked), held=count(len(held))) if marked else ""
    ours = say("A11.ours", **{key: values[key] for key in ("pin", "rates", "load", "workers", "pg", "runs", "slowed",
                                                           "decided", "cpu")})
    return make_finding("A11", worst_part(v for _, v in parts), ours, say("A11.note", margin=values["margin"]),
                        values, parts=tuple(parts) if len(parts) > 1 else ())


def hold_said(held: pd.DataFrame) -> str:
    """How long the arms held: a fixed hold's seconds, or until the queue fell behind, at most its cap."""
    fixed = sorted({say("hold.fixed", seconds=f"{s:g} s")
                    for s in held.loc[~held["hold_until_failure"].astype(bool), "pin_s"]})
    capped = [f"{s:g}" for s in sorted(set(held.loc[held["hold_until_failure"].astype(bool), "hold_asked"]))]
    # one phrase for every cap: "until the queue fell behind, 60 or 120 s at most"
    return join(fixed + ([say("hold.until_failure", cap=join(capped).replace(" and ", " or "))] if capped else []))


def findings(loaded: dict) -> list:
    return [c9_held_history(loaded), a11_held_horizon(loaded)]


# --------------------------------------------------------------------------- the page


HELD_COLUMNS = ("table", "held by", "jobs/s", "claim ms before the hold", "slowed at", "fell behind at",
                "recovered after the release", "verdict", "its control: slowed at / fell behind at", "the hold's part",
                "a mitigation, raced where it fell behind")
OTHER_COLUMNS = ("table", "held by", "jobs/s", "claim ms before the hold", "slowed at", "fell behind at",
                 "backlog at most", "verdict", "read against")  # the arms that change one more setting; C9's controls


def recovered_text(runs: pd.DataFrame, positions) -> str:
    """After the release, over the repeats that fell behind: the span of the seconds their backlog took to come
    back, or that it had not by the run's end."""
    fell = [runs.iloc[p] for p in positions if runs.iloc[p]["verdict_if_judged"] in soak_outcomes.FAILED]
    if not fell:
        return DASH
    back = [float(row["recovered_s"]) for row in fell if row["recovered_s"] is not None
            and not pd.isna(row["recovered_s"])]
    said = [span(min(back), max(back), lambda v: f"{v:.0f}") + " s"] if back else []
    if len(back) < len(fell):
        said.append(say("recovered.not", runs=count(len(fell) - len(back))))
    return "; ".join(said)


def _level_span(runs: pd.DataFrame, positions) -> str:
    levels = runs.iloc[list(positions)]["claim_level_ms"].dropna()
    return span(levels.min(), levels.max(), lambda v: number(v, 2)) if len(levels) else DASH


def verdict_rows(mine: Loaded) -> pd.DataFrame:
    """One row per held arm with nothing else changed, over its repeats: when its claim slowed and its queue fell
    behind, from the hold's start, beside its control's, and the part the hold plays (soak_arms.held_part)."""
    runs = mine.summaries
    rows = []
    for held, controls in held_groups(runs):
        first = runs.iloc[held[0]]
        control = DASH if not controls else \
            f"{onset_text(runs, controls, 'seconds_to_slow')} / {onset_text(runs, controls, 'seconds_to_fall_behind')}"
        rows.append(dict(zip(HELD_COLUMNS, (
            arm_label(first), held_label(first),
            span(runs.iloc[held]["rate"].min(), runs.iloc[held]["rate"].max(), lambda v: number(v, 0)),
            _level_span(runs, held), onset_text(runs, held, "seconds_to_slow"),
            onset_text(runs, held, "seconds_to_fall_behind"), recovered_text(runs, held), verdicts_text(runs, held),
            control, held_part(runs, held, controls).replace("_", " "), mitigated_text(runs, held)))))
    return pd.DataFrame(rows, columns=list(HELD_COLUMNS))


def mitigated_text(runs: pd.DataFrame, held) -> str:
    """Each mitigation raced on a held arm (sweep.SoakSweep.follow_up, or an arm of its own), read over its whole
    run from the hold's start: whether its queue fell behind, and when."""
    said = []
    for position, row in runs.iterrows():
        if row["mitigation"] == "none" or reference(runs, position) not in held:
            continue
        said.append(say("mitigated", mitigation=row["mitigation"].replace("_", " "), outcome=run_outcome(row)))
    return "; ".join(said) if said else DASH


def fallen(runs: pd.DataFrame, positions) -> list[int]:
    """The runs among `positions` that fell behind."""
    found = onsets(runs, positions, "seconds_to_fall_behind")
    return [position for position, (_, censored) in zip(positions, found) if not censored]


def fell_share(fell: list[int], positions) -> str:
    """How many of an arm's repeats (positions) fell behind (fell: fallen's), where some did not ("in 2 of 3 runs");
    nothing where every one did (the onsets then say it all)."""
    if len(fell) == len(positions):
        return ""
    return " " + say("fell_share", fell=count(len(fell)), runs=count(len(positions)))


def _fell_in_run(row) -> float | None:
    fell = row.get("seconds_to_fall_behind_in_run")
    return None if fell is None or pd.isna(fell) else float(fell)


def run_outcome(row) -> str:
    """A mitigated run over its whole run from the hold's start: kept up over its seconds, or fell behind when."""
    fell = _fell_in_run(row)
    return say("timeout.kept", watched=f"{row['ended_s'] - row['pin_from']:.0f}") if fell is None \
        else say("timeout.fell", behind=f"{fell:.0f} s")


def other_rows(mine: Loaded) -> pd.DataFrame:
    """Every other arm, each run beside the arm it is read against."""
    runs = mine.summaries
    shown = {p for held, controls in held_groups(runs) for p in (*held, *controls)}
    rows = []
    for position, row in runs.iterrows():
        if position in shown:
            continue
        ref = row_at(runs, reference(runs, position))
        against = DASH if ref is None else say("against", verdict=verdict_text(ref), arm=arm_label(ref),
                                                 held=held_label(ref))
        rows.append(dict(zip(OTHER_COLUMNS, (
            arm_label(row) + repeat_label(row, runs), held_label(row), number(row["rate"], 0),
            number(row["claim_level_ms"], 2), onset_text(runs, [position], "seconds_to_slow"),
            onset_text(runs, [position], "seconds_to_fall_behind"), count(row["backlog_max"]), verdict_text(row),
            against))))
    return pd.DataFrame(rows, columns=list(OTHER_COLUMNS))


def _caption(runs: pd.DataFrame, key: str) -> str:
    return say("caption", rates=load_said(runs), workers=join([str(w) for w in sorted(set(runs["workers"]))]),
               job_ms=join([number(j, 0) for j in sorted(set(runs["job_ms"]))]),
               factor=f"{soak_outcomes.SLOW_FACTOR:g}", slow_run=f"{soak_outcomes.SLOW_RUN_S}",
               behind_run=f"{soak_outcomes.BEHIND_RUN_S}",
               against=(say("caption.control", margin=f"{PRACTICAL_MARGIN_S:g} s") if key == "held"
                        else say("caption.against")) + (f" {note}" if (note := cpu_note(runs)) else ""))


def _table(loaded: dict, rows, key: str) -> str:
    mine = loaded.get(NAME)
    frame = rows(mine) if mine is not None else pd.DataFrame()
    return table(frame, caption=_caption(mine.summaries, key), css_class="wide") if len(frame) else ""


def verdict_table(loaded: dict) -> str:
    """The held arms beside their controls, over repeats (the section's lead)."""
    return _table(loaded, verdict_rows, "held")


def other_table(loaded: dict) -> str:
    """Every other arm beside the arm it is read against (one click away)."""
    return _table(loaded, other_rows, "other")


PHASE_COLUMNS = ("arm", "phase", "seconds", "jobs/s", "claim level", "backlog at most", "slowed at",
                 "fell behind at", "recovered in", "verdict")


def phase_rows(mine: Loaded) -> pd.DataFrame:
    """A row per phase of each run raced in phases (harness.experiments.soak.phases), its verdict against the clean
    phase before it."""
    rows = []
    for run in mine.phased:
        arm = say("phases.arm", shape=run["shape"], strategy=run["strategy"], workers=count(run["workers"]),
                  repeat=count(run["repeat"] + 1))
        for phase in run["phase_results"]:
            verdict = phase["verdict"] if phase["verdict"] != soak_outcomes.NOT_JUDGED \
                else say("phases.not_judged", verdict=(phase["verdict_if_judged"] or "").replace("_", " "))
            against = say("phases.against", reference=phase["reference"]) if phase["reference"] else ""
            kind = phase["kind"] if phase["kind"] != "hold" else f"hold ({phase['holder'].replace('_', ' ')})"
            judged = phase["kind"] in ("hold", "ramp")
            rows.append({"arm": arm, "phase": f"{phase['label']}: {kind}",
                         "seconds": f"{phase['start_s']:.0f}-{phase['end_s']:.0f}",
                         "jobs/s": number(phase["rate"], 0),
                         "claim level": ms(phase["claim_level_ms"]) if phase["claim_level_ms"] is not None
                         else DASH, "backlog at most": number(phase["backlog_max"], 0)
                         if phase["backlog_max"] is not None else DASH,
                         "slowed at": _phase_onset(phase, "seconds_to_slow") if judged else DASH,
                         "fell behind at": _phase_onset(phase, "seconds_to_fall_behind") if judged else DASH,
                         "recovered in": (f"{phase['recovered_s']:.0f} s" if phase["recovered_s"] is not None
                                          else say("phases.not_back", seconds=f"{phase['end_s'] - phase['start_s']:.0f}"))
                         if phase["kind"] == "recovery" else DASH,
                         "verdict": f"{(verdict or DASH).replace('_', ' ')} {against}".strip()
                         + (cpu_text([cpu_marked(phase)], phase["kind"]) if judged else "")})
    return pd.DataFrame(rows, columns=PHASE_COLUMNS)


def _phase_onset(phase: dict, key: str) -> str:
    if phase[key] is not None:
        return f"{phase[key]:.0f} s"
    return say("phases.none_in", seconds=f"{phase['observed_s']:.0f}")


def phases_table(loaded: dict) -> str:
    """The runs raced in phases, a row per phase; nothing where none was raced."""
    mine = loaded.get(NAME)
    if mine is None or not mine.phased:
        return ""
    return table(phase_rows(mine), caption=say("phases.caption", factor=f"{soak_outcomes.SLOW_FACTOR:g}",
                                               slow_run=f"{soak_outcomes.SLOW_RUN_S}",
                                               behind_run=f"{soak_outcomes.BEHIND_RUN_S}",
                                               hold=f"{soak_outcomes.HOLD_S}"), css_class="wide")


def model_table(loaded: dict) -> str:
    """The model's predictions beside what was measured (soak_model)."""
    return soak_model.model_table(loaded.get(NAME))


ANCHOR_COLUMNS = ("source", "PostgreSQL, queue", "jobs/s", "held by", "row versions kept when it failed",
                  "claim before, then (ms)", "claim ms per 100,000 versions kept", "behind")
BRANDUR, PLANETSCALE = ANCHORS


def worst_held(runs: pd.DataFrame) -> int | None:
    """Among the held arms whose part the control confirms (soak_arms.held_part), the repeat of the arm that fell
    behind soonest (by its median repeat), else slowed soonest; None where no part is confirmed."""
    best = None
    for held, controls in held_groups(runs):
        if held_part(runs, held, controls) != CONFIRMED:
            continue
        behind = onsets(runs, held, "seconds_to_fall_behind")
        # every repeat fell behind: ranked by when; else by when the claim slowed
        key = "seconds_to_fall_behind" if not any(censored for _, censored in behind) else "seconds_to_slow"
        ordered = sorted(held, key=lambda p: onsets(runs, [p], key)[0][0])
        rank = (key != "seconds_to_fall_behind", float(np.median([onsets(runs, [p], key)[0][0] for p in held])))
        if best is None or rank < best[0]:
            best = (rank, ordered[len(held) // 2])
    return None if best is None else best[1]


def their_slope(anchor: dict) -> float | None:
    """A write-up's claim cost in this page's units: what its claim gained over the dead tuples it gives, per
    100,000 (a lower bound where its later figure is one); None where it gives no claim time."""
    if anchor["claim_then_ms"] is None or not anchor["dead"]:
        return None
    return (anchor["claim_then_ms"] - anchor["claim_before_ms"]) / anchor["dead"] * soak_outcomes.PER_VERSIONS


def _their_row(anchor: dict) -> dict:
    kept = count(anchor["dead"]) if anchor["dead"] else say(
        "anchor.kept_estimate", kept=count(anchor["rate"] * anchor["held_s"] * anchor["versions_per_job"]),
        hours=f"{anchor['held_s'] / 3600:g}")
    slope = their_slope(anchor)
    behind = say("anchor.their_behind", behind=count(anchor["behind"])) + (
        say("anchor.hopeless", minutes=f"{anchor['hopeless_s'] / 60:g}") if anchor["hopeless_s"] else "")
    return dict(zip(ANCHOR_COLUMNS, (
        f'<a href="{html.escape(anchor["url"])}">{html.escape(anchor["source"])}</a>',
        html.escape(f'{anchor["pg"]}, {anchor["queue"]}'), number(anchor["rate"], 0), html.escape(anchor["held"]),
        kept, DASH if anchor["claim_then_ms"] is None else say(
            "anchor.claim_then", before=number(anchor["claim_before_ms"], 0), then=number(anchor["claim_then_ms"], 0)),
        DASH if slope is None else say("anchor.at_least", slope=number(slope, 0)), behind)))


def _fall_claim(mine: Loaded, position: int) -> float | None:
    """The median claim of the second a run fell behind in (its series)."""
    row, series = mine.summaries.iloc[position], mine.series[position]
    at = row["pin_from"] + row["seconds_to_fall_behind"]
    found = series.loc[series["second"] == at, "claim_p50_ms"] if "claim_p50_ms" in series else ()
    return float(found.iloc[0]) if len(found) and not pd.isna(found.iloc[0]) else None


def anchors_table(loaded: dict) -> str:
    """The two write-ups' figures in this page's units, and this build's worst held arm beside them."""
    rows = [_their_row(anchor) for anchor in ANCHORS]
    mine = loaded.get(NAME)
    worst = worst_held(mine.summaries) if mine is not None else None
    if worst is not None:
        runs = mine.summaries
        row = runs.iloc[worst]
        slopes = runs.iloc[_group_of(runs, worst)[0]]["claim_ms_per_100k"].dropna() \
            if "claim_ms_per_100k" in runs else pd.Series(dtype=float)
        fell = not pd.isna(row["seconds_to_fall_behind"]) and row["seconds_to_fall_behind"] is not None
        then = _fall_claim(mine, worst) if fell else None
        rows.append(dict(zip(ANCHOR_COLUMNS, (
            html.escape(say("anchor.ours")), html.escape(f"{row['pg_version']}, {arm_label(row)}"),
            number(row["rate"], 0), html.escape(say("anchor.held", held=held_label(row), pin=f"{row['pin_s']:.0f}")),
            count(row["unremovable_at_fall_behind"]) if fell and not pd.isna(row["unremovable_at_fall_behind"])
            else DASH,
            say("anchor.claim_then", before=number(row["claim_level_ms"], 2), then=number(then, 2))
            if then is not None else DASH,
            f"{number(slopes.median(), 1)} ({span(slopes.min(), slopes.max(), lambda v: number(v, 1))})"
            if len(slopes) else DASH,
            html.escape(say("anchor.seen", slowed=onset_text(runs, [worst], "seconds_to_slow"),
                            behind=onset_text(runs, [worst], "seconds_to_fall_behind"),
                            backlog=count(row["backlog_max"])))))))
    return table(pd.DataFrame(rows, columns=list(ANCHOR_COLUMNS)), caption=say("anchor.caption"), escape=False)


def anchors_said(mine: Loaded | None) -> str:
    """Where this build and the write-ups agree in the same units, and where not: PlanetScale's claim cost against
    the slopes of this build's worst held arm (worst_held, the anchors table's row), and the model of that arm's
    table at Brandur's rate."""
    worst = worst_held(mine.summaries) if mine is not None else None
    if worst is None:
        return say("anchor.compare_none")
    runs = mine.summaries
    slopes = runs.iloc[_group_of(runs, worst)[0]]["claim_ms_per_100k"].dropna() \
        if "claim_ms_per_100k" in runs else pd.Series(dtype=float)
    if not len(slopes):
        return say("anchor.compare_none")
    ours = float(slopes.median())
    row = runs.iloc[worst]
    planetscale = say("anchor.compare", theirs=number(their_slope(PLANETSCALE), 0), ours=number(ours, 1),
                      times=str(int(their_slope(PLANETSCALE) // ours)) if ours > 0 else DASH,
                      their_behind=count(PLANETSCALE["behind"]))
    brandur = {"rate": number(BRANDUR["rate"], 0), "brandur_behind": count(BRANDUR["behind"])}
    if soak_model.plans_by(mine, worst):
        brandur = say("anchor.brandur", model=soak_model.hold_at_rate(mine, worst, BRANDUR["rate"]),
                      workers=str(int(row["workers"])), sustained=number(row["sustained_rate"], 0), **brandur)
    else:
        brandur = say("anchor.brandur_unplanned", **brandur)
    return f"{planetscale} {brandur}"


def values(loaded: dict, found: dict) -> dict[str, str]:
    mine = loaded.get(NAME)
    if mine is None:
        return soak_model.values(None) | {"soak_setup": say("setup.no_runs"), "soak_outcome": "",
                                          "soak_anchors": anchors_said(None),
                "soak_recover": f"{soak_outcomes.RECOVER_WITHIN_S:g} s", "soak_holds": DASH}
    runs = mine.summaries
    pinned = runs[runs["holder"] != "none"]
    setup = say("setup.runs", runs=numbered(len(runs), "run"),
                seconds=span(runs["ended_s"].min(), runs["ended_s"].max(), lambda v: f"{v:.0f}"),
                starts=join(sorted({f"{v:g} s" for v in pinned["pin_from"]})) if len(pinned) else DASH,
                holds=hold_said(pinned) if len(pinned) else DASH,
                recover=f"{soak_outcomes.RECOVER_WITHIN_S:g} s", factor=f"{soak_outcomes.SLOW_FACTOR:g}",
                slow_run=f"{soak_outcomes.SLOW_RUN_S}", behind_run=f"{soak_outcomes.BEHIND_RUN_S}",
                pg=join([str(v) for v in sorted(set(runs["pg_version"]))]))
    verdicts = pinned["verdict"].map(lambda v: v if v != soak_outcomes.HELD else "held without failing")\
        .value_counts()
    outcome = say("outcome", counted=join([f"{count(n)} {v.replace('_', ' ')}" for v, n in verdicts.items()])) \
        if len(pinned) else ""
    # the flush every commit waited for: the disk arms with synchronous commits
    disk = runs[runs["wal_sync_ms_per_sync"].notna() & (runs["synchronous_commit"] == "on")] \
        if "wal_sync_ms_per_sync" in runs else runs.iloc[0:0]
    flush = say("flush", flush=span(disk["wal_sync_ms_per_sync"].min(), disk["wal_sync_ms_per_sync"].max(), ms)) \
        if len(disk) else ""
    tested = disk["pg_test_fsync_ms"].dropna() if "pg_test_fsync_ms" in disk else ()
    if len(tested):  # the same disk by PostgreSQL's own tool, where the run's server took it
        flush += " " + say("flush.tool", fdatasync=span(tested.min(), tested.max(), ms))
    return soak_model.values(mine) | {"soak_setup": f"{setup} {flush}".strip(), "soak_outcome": outcome,
                                      "soak_anchors": anchors_said(mine),
            "soak_recover": f"{soak_outcomes.RECOVER_WITHIN_S:g} s",
            "soak_holds": span(pinned["pin_s"].min(), pinned["pin_s"].max(), lambda v: f"{v:.0f}") + " s"
            if len(pinned) else DASH}
