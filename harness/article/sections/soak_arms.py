"""A soak's arms as the soak sections read them: each run judged again by the rule as it stands, an arm's
control and reference, its label and verdict, the parts over repeats. Not a section: the soak, the libraries' soak
and the soak's chart import it, and it imports no section."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from harness.article.findings import CONFIRMED, CORRECTED, NOT_DISTINGUISHABLE, NOT_MEASURED, NOT_REPRODUCED
from harness.article.formats import count
from harness.article.wording import Sentences
from harness.experiments.soak import outcomes as soak_outcomes

SENTENCES = "soak_arms"  # its sentences' file
say = Sentences(SENTENCES)


# the settings an arm is told apart by; its reference differs in one of them (harness.article.sections.soak)
ARM = ("library", "library_version", "shape", "strategy", "history_rows", "holder", "mitigation", "storage",
       "synchronous_commit")
LOAD = ("rate_asked", "workers", "job_ms", "pg_version")  # and the same load, on the same server version
WINDOWS = ("seconds", "pin_from", "pin_to", "repeat")  # judged on the same windows; a repeat against its own


@dataclass(frozen=True)
class Loaded:
    runs: tuple
    summaries: pd.DataFrame  # one row per run: its summary (harness.experiments.soak.measure), judged again (load)
    series: dict  # run position -> its per-second series (soak_outcomes.SERIES_COLUMNS)
    samples: dict  # run position -> its per-second samples of the table and the horizon
    sample_s: dict  # run position -> how often its sampler read the table and the horizon (s)


def _judged_again(summary: dict, series: pd.DataFrame) -> dict:
    """A run's verdict by the rule as it stands (harness.experiments.soak.outcomes), from its stored series: the page reads
    every run by one rule, whichever the run was stored under. A library's run judges its pickup (its p99 keys
    are pickup_p99_ms_*: harness.experiments.soak.library)."""
    judged = soak_outcomes.judge(series, summary["pin_from"], summary["pin_to"], summary["ended_s"],
                                 bool(summary["arrivals_behind"]), summary.get("cpu_bound"),
                                 soak_outcomes.step_of(summary["ended_s"], summary.get("enqueue_calls") or 0))
    latency = soak_outcomes.latency_of(series)
    return summary | {key: judged[key] for key in ("verdict", "verdict_if_judged", "recovered_s", "keeps_up",
                                                   "p99_within", f"{latency}_p99_ms_before_max",
                                                   f"{latency}_p99_ms_during_median", "backlog_level")}


def load_runs(runs) -> Loaded | None:
    """A params section's soak runs, each judged again: this section's, or the libraries' (library_soak)."""
    if not runs:
        return None
    series = {i: run.table("series") for i, run in enumerate(runs)}
    summaries = pd.DataFrame([{"library": None, "library_version": None} | _judged_again(run.summary, series[i])
                              | {"pg_version": run.server.get("major"), "repeat": run.parameters.repeat}
                              for i, run in enumerate(runs)])
    return Loaded(tuple(runs), summaries, series, {i: run.table("samples") for i, run in enumerate(runs)},
                  {i: run.procedure.get("sample_s") for i, run in enumerate(runs)})


# a server not started here keeps its own storage, stored as "not known": it is the base the disk is read against
def on_disk(row) -> bool:
    return row["storage"] == "disk"


def base_arm(row) -> bool:
    """Nothing changed but the holder: no mitigation, not on a disk, commits synchronous."""
    return row["mitigation"] == "none" and not on_disk(row) and row["synchronous_commit"] == "on"


def reference(summaries: pd.DataFrame, position: int) -> int | None:
    """The position of the arm `position` is read against (the module's docstring): the same arm, load, windows
    and repeat but for one setting; None where none is stored."""
    arm = summaries.iloc[position]
    if arm["mitigation"] != "none":
        wanted = {"mitigation": "none"}
    elif arm["synchronous_commit"] != "on":
        wanted = {"synchronous_commit": "on"}
    elif on_disk(arm):
        wanted = {"storage": None}  # the same arm off the disk
    elif arm["holder"] != "none":
        wanted = {"holder": "none"}
    elif arm.get("pg_version") != summaries["pg_version"].min():
        wanted = {"pg_version": summaries["pg_version"].min()}  # a control on a newer server: the same on the oldest
    else:
        return None
    # .get: a summary stored before a setting existed (library) lacks it
    target = {key: arm.get(key) for key in (*ARM, *LOAD, *WINDOWS)} | wanted
    for other in range(len(summaries)):
        row = summaries.iloc[other]
        if other != position and all(not on_disk(row) if key == "storage" and value is None
                                     else row.get(key) == value for key, value in target.items()):
            return other
    return None


def control_of(summaries: pd.DataFrame, position: int) -> int | None:
    """The arm with nothing held that `position` is read against in the end (through its mitigation or storage)."""
    while position is not None and summaries.iloc[position]["holder"] != "none":
        position = reference(summaries, position)
    return position


def worst_part(verdicts) -> str:
    """A finding's verdict from its parts': a part the runs contradict first, then one they cannot tell, then
    confirmed; not measured where no part was."""
    verdicts = set(verdicts)
    for verdict in (CORRECTED, NOT_REPRODUCED, NOT_DISTINGUISHABLE, CONFIRMED):
        if verdict in verdicts:
            return verdict
    return NOT_MEASURED


SLOWED = (soak_outcomes.DEGRADES, soak_outcomes.SPIRALS, soak_outcomes.CUT_OFF)


def held_against_control(held, control) -> str:
    """One held arm's part of A11: CONFIRMED where it slowed (degrades, spirals, or was cut off slowed) and its
    control survived; CORRECTED where it survived too; NOT_DISTINGUISHABLE where the control slowed without a hold
    (the table's own growth); NOT_MEASURED where either run could not carry its load, or no control is stored."""
    if control is None or soak_outcomes.NOT_JUDGED in (held["verdict"], control["verdict"]):
        return NOT_MEASURED
    if control["verdict"] != soak_outcomes.SURVIVES:
        return NOT_DISTINGUISHABLE
    return CONFIRMED if held["verdict"] in SLOWED else CORRECTED


def held_arms(runs: pd.DataFrame) -> list[tuple[int, int | None]]:
    """(held, its control or None) for every held arm with nothing else changed (no mitigation, off the disk,
    commits synchronous)."""
    return [(position, reference(runs, position)) for position, row in runs.iterrows()
            if row["holder"] != "none" and base_arm(row)]


def row_at(runs: pd.DataFrame, position: int | None):
    return None if position is None else runs.iloc[position]


def over_repeats(parts: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """One part per arm from its repeats' (arm, part) pairs, in the order the arms first come: the part its repeats
    agree on, or NOT_DISTINGUISHABLE where they differ (the spread over repeats covers both readings)."""
    verdicts: dict[str, set] = {}
    for arm, verdict in parts:
        verdicts.setdefault(arm, set()).add(verdict)
    return [(arm, seen.pop() if len(seen) == 1 else NOT_DISTINGUISHABLE) for arm, seen in verdicts.items()]


def runs_each(held: pd.DataFrame) -> str:
    """How many runs each held arm's verdict rests on: its repeats (one where it was raced once)."""
    repeats = int(held["repeat"].max()) + 1
    return say("runs.one") if repeats == 1 else say("runs.many", runs=count(repeats))


def arm_label(row) -> str:
    """The arm in a few words: the shape, and what is not the section's usual (claim, history, storage)."""
    words = [row["shape"].replace("_", " ")]
    if row["strategy"] != "skip_locked":
        words.append(row["strategy"])
    if int(row["history_rows"]):
        words.append(say("label.history", rows=count(row["history_rows"])))
    if on_disk(row):
        words.append(say("label.disk"))
    if row["synchronous_commit"] != "on":
        words.append(say("label.commit_off"))
    if not pd.isna(row.get("pg_shown", float("nan"))):  # arms on more than one server major
        words.append(say("label.pg", pg=str(int(row["pg_shown"]))))
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


def held_and_controls(runs: pd.DataFrame) -> list[int]:
    """The held arms with nothing else changed and their controls, each control before its held arms."""
    shown = []
    for held, control in held_arms(runs):
        shown += [position for position in (control, held) if position is not None and position not in shown]
    return shown


def repeat_label(row, runs: pd.DataFrame) -> str:
    """' (repeat n)' after an arm's label where its runs were repeated, else nothing."""
    return say("label.repeat", repeat=int(row["repeat"]) + 1) if runs["repeat"].max() else ""
