"""The deep dive "A stall shorter than the recovery" of "When a worker dies": a worker frozen with its connections
kept, a chosen time into a job for a chosen time, against what the library's heartbeat schedule (its STALL)
predicts: whether the job is handed on to another worker (report section library_stalls; the rule in
harness.experiments.libraries.outcomes)."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from harness import libraries
from harness.article.formats import count, number, percent
from harness.article.labels import library_label
from harness.article.prose import table
from harness.article.wording import Sentences
from harness.experiments.libraries import outcomes as stall_outcomes
from harness.experiments.libraries.outcomes import STALL_OUTCOMES
from harness.stats import wilson_interval

NAME = "stalls"
READS = ("library_stalls",)
UPSTREAM = ()
say = Sentences(NAME)


@dataclass(frozen=True)
class Loaded:
    runs: tuple
    summaries: pd.DataFrame  # one row per stall run: its summary (harness.experiments.libraries.faults.stalled)


def load(reads: dict, loaded: dict) -> Loaded | None:
    runs = reads["library_stalls"].runs if "library_stalls" in reads else ()
    if not runs:
        return None
    return Loaded(runs, pd.DataFrame([run.summary for run in runs]))


def findings(loaded: dict) -> list:
    return []


@dataclass(frozen=True)
class Arm:
    """One library's runs of one stall: its length and offset into the job, the runs whose stall landed, how many
    the schedule predicts hand the job on, how many it predicts nothing for, how many handed it on, and
    how many ran another job twice."""

    stall_s: float
    at_s: float
    runs: int
    predicted: int
    at_line: int
    handed_on: int
    other: int
    ages: tuple  # the oldest hit job's hold at the stall, per run (s)

    @property
    def interval(self) -> tuple[float, float]:
        """The 95 % Wilson interval of the share of runs that handed the job on."""
        return wilson_interval(self.handed_on, self.runs)


def landed(summaries: pd.DataFrame, library: str) -> pd.DataFrame:
    """A library's stall runs whose stall landed and hit a job (its hold's age known)."""
    mine = summaries[(summaries["library"] == library) & summaries["fault_landed"].astype(bool)]
    return mine[mine["stall_hold_age_s"].notna()]


def arms(summaries: pd.DataFrame, library: str) -> list[Arm]:
    """A library's landed stall runs per stall, shortest and earliest first."""
    out = []
    for (stall_s, at_s), group in landed(summaries, library).groupby(["stall_s", "stall_at_s"]):
        predicted = [_predicted(value) for value in group["stall_predicted_handed_on"]]
        out.append(Arm(float(stall_s), float(at_s), len(group), sum(p is True for p in predicted),
                       sum(p is None for p in predicted), int(group["stall_handed_on"].sum()),
                       int(group["stall_other_twice"].sum()), tuple(float(a) for a in group["stall_hold_age_s"])))
    return out


def outcome(summaries: pd.DataFrame, library: str) -> str:
    """The rule against a library's runs (outcomes.stall_outcome)."""
    runs = landed(summaries, library)
    return stall_outcomes.stall_outcome([(_predicted(p), bool(h)) for p, h in zip(runs["stall_predicted_handed_on"],
                                                                                    runs["stall_handed_on"])])


def _predicted(value) -> bool | None:
    """A run's prediction as stored: None at the line."""
    return None if value is None or pd.isna(value) else bool(value)


def library_said(summaries: pd.DataFrame, library: str) -> str:
    """A library's rule, read in its source, and what its runs made of it."""
    declared, recovery = libraries.get(library).STALL, libraries.get(library).RECOVERY
    mine = summaries[summaries["library"] == library]
    setting_s, share, wait_s = float(mine["recovery_setting_s"].iloc[0]), declared["beat_share"], \
        declared["write_wait_s"]
    rule = say("rule", library=library_label(library), version=str(mine["version"].iloc[0]),
               setting=recovery["setting"], why=declared["why"], source=declared["source"],
               beat=percent(share, 0), wait=number(wait_s, 1), raced_s=number(setting_s, 1),
               safe=number(stall_outcomes.longest_safe_stall_s(setting_s, share, wait_s), 1),
               factor=number(1 / (1 - share), 1), extra=number(wait_s / (1 - share), 1))
    found = arms(summaries, library)
    raced = "; ".join(_arm_said(arm) for arm in found)
    said = say.each("outcome", STALL_OUTCOMES, setting=recovery["setting"], raced_s=number(setting_s, 1),
                    arms=raced)[outcome(summaries, library)]
    return f"{rule} {said}"


def _arm_said(arm: Arm) -> str:
    """One stall's runs in a sentence: predicted and handed on, and those at the line."""
    figures = {"at": number(arm.at_s, 1), "runs": count(arm.runs), "predicted": count(arm.predicted),
               "handed": count(arm.handed_on)}
    said = say("arm", stall=number(arm.stall_s, 1), **figures) if arm.stall_s else say("control", **figures)
    if arm.at_line:
        said += say("at_line", n=count(arm.at_line))
    return said


def _stalled(summaries: pd.DataFrame) -> list[str]:
    return [name for name in dict.fromkeys(summaries["library"])
            if name in libraries.NAMES and libraries.get(name).STALL is not None]


COLUMNS = ("library", "stall", "into the job", "hold's age then", "runs", "predicted handed on", "not predicted",
           "handed on", "95% interval", "another job ran twice")


def stall_table(loaded: dict) -> str:
    """One row per library and stall: how long, how far into the job, the oldest hold's age then (its range over
    the runs), the runs, those the schedule predicts hand the job on and those that did, with the Wilson interval
    of that share, and the runs where another job ran twice."""
    mine = loaded.get(NAME)
    if mine is None:
        return ""
    rows = []
    for library in _stalled(mine.summaries):
        for arm in arms(mine.summaries, library):
            low, high = arm.interval
            low_age, high_age = number(min(arm.ages), 2), number(max(arm.ages), 2)
            ages = f"{low_age} s" if low_age == high_age else f"{low_age} to {high_age} s"
            stall = f"{number(arm.stall_s, 1)} s" if arm.stall_s else say("control_row")
            rows.append(dict(zip(COLUMNS, (
                library_label(library), stall, f"{number(arm.at_s, 1)} s", ages, count(arm.runs), count(arm.predicted),
                count(arm.at_line), count(arm.handed_on), f"{percent(low, 0)} to {percent(high, 0)}",
                count(arm.other)))))
    if not rows:
        return ""
    caption = say("caption", margin=number(stall_outcomes.STALL_MARGIN_S, 1))
    return table(pd.DataFrame(rows, columns=list(COLUMNS)), caption=caption)


def values(loaded: dict, found: dict) -> dict[str, str]:
    mine = loaded.get(NAME)
    if mine is None or not len(mine.summaries):
        return {"st_said": say("no_runs")}
    stalled = _stalled(mine.summaries)
    if not stalled:
        return {"st_said": say("none_declared")}
    return {"st_said": " ".join(library_said(mine.summaries, library) for library in stalled)}
