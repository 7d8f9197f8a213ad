"""A soak's arms as the soak sections read them: each run judged again by the rule as it stands, an arm's
control and reference, its label and verdict, the parts over repeats. Not a section: the soak, the libraries' soak
and the soak's chart import it, and it imports no section."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from harness.article.findings import CONFIRMED, CORRECTED, NOT_DISTINGUISHABLE, NOT_MEASURED, NOT_REPRODUCED
from harness.article.formats import DASH, count, percent, span, wait
from harness.article.wording import Sentences
from harness.experiments.soak import outcomes as soak_outcomes
from harness.experiments.soak.outcomes import ANALYTICS_S, ANALYTICS_SESSIONS

SENTENCES = "soak_arms"  # its sentences' file
say = Sentences(SENTENCES)


# the settings an arm is told apart by; its reference differs in one of them (harness.article.sections.soak)
ARM = ("library", "library_version", "shape", "strategy", "history_rows", "holder", "mitigation", "storage",
       "synchronous_commit", "vacuum_every")
LOAD = ("rate_asked", "workers", "job_ms", "pg_version")  # and the same load, on the same server version
# judged on the same windows (the hold asked: its cap where it ends once the queue fell behind); a repeat against
# its own
WINDOWS = ("seconds", "pin_from", "hold_asked", "repeat")
def analytics_of(row) -> tuple[float, int] | None:
    """(a statement's length, the sessions) of an analytics holder, as load_runs reads them from each run's
    parameters: they tell held arms apart, and a control (nothing held) has none to match. None for any other
    holder."""
    return None if row["holder"] != "analytics" else (float(row["analytics_s"]), int(row["analytics_sessions"]))


# a difference in onset under the rule's own run of seconds is not one the rule can tell apart
PRACTICAL_MARGIN_S = float(soak_outcomes.BEHIND_RUN_S)


@dataclass(frozen=True)
class Loaded:
    runs: tuple
    summaries: pd.DataFrame  # one row per run: its summary (harness.experiments.soak.measure), judged again (load)
    series: dict  # run position -> its per-second series (soak_outcomes.SERIES_COLUMNS)
    samples: dict  # run position -> its per-second samples of the table and the horizon
    sample_s: dict  # run position -> how often its sampler read the table and the horizon (s)
    explain_s: dict = field(default_factory=dict)  # run position -> how often it read the claim's buffers (s)
    # the runs raced in phases (harness.experiments.soak.phases), read by their own table and not among the arms
    # above: each a summary with its phases judged again by the rule as it stands
    phased: tuple = ()


def _judged_again(summary: dict, series: pd.DataFrame, samples: pd.DataFrame, cpus: int | None) -> dict:
    """A run's verdict and CPU mark by the rule as it stands (harness.experiments.soak.outcomes), from its stored
    series and samples, and the model's CPU figures (outcomes.with_cpu): the page reads every run by one rule,
    whichever the run was stored under. A library's run judges its pickup (harness.experiments.soak.library)."""
    judged = soak_outcomes.judge(series, summary["pin_from"], summary["pin_to"], summary["ended_s"],
                                 bool(summary["arrivals_behind"]), summary.get("cpu_bound"),
                                 soak_outcomes.step_of(summary["ended_s"], summary.get("enqueue_calls") or 0),
                                 held=summary["holder"] != "none")
    again = summary | {key: judged[key] for key in soak_outcomes.judged_keys(soak_outcomes.latency_of(series))} \
        | soak_outcomes.cpu_mark(samples, summary["pin_from"], summary["pin_to"])
    return soak_outcomes.with_cpu(again, series, samples, cpus)


def _phases_again(run) -> dict:
    """A run raced in phases, each phase judged again by the rule as it stands, from its stored series, and each
    hold or ramp's CPU mark from its samples."""
    summary = run.summary
    phases = [{key: phase[key] for key in ("label", "kind", "start_s", "end_s", "holder", "rate_asked", "rate")}
              for phase in summary["phase_results"]]
    return summary | {"repeat": run.parameters.repeat, "pg_version": run.server.get("major"),
                      "phase_results": soak_outcomes.judge_phases(run.table("series"), phases,
                                                                  bool(summary["arrivals_behind"]),
                                                                  summary.get("cpu_bound"), run.table("samples"))}


def load_runs(runs) -> Loaded | None:
    """A params section's soak runs, each judged again: this section's, or the libraries' (library_soak). Runs
    raced in phases are kept apart (Loaded.phased), beside the arms: a section of phased runs alone shows none."""
    phased = tuple(_phases_again(run) for run in runs if run.parameters.phases)
    runs = tuple(run for run in runs if not run.parameters.phases)
    if not runs:
        return None
    series = {i: run.table("series") for i, run in enumerate(runs)}
    samples = {i: run.table("samples") for i, run in enumerate(runs)}
    summaries = pd.DataFrame([{"library": None, "library_version": None}
                              | _judged_again(run.summary, series[i], samples[i], run.client.get("cpu_count"))
                              | {"pg_version": run.server.get("major"), "repeat": run.parameters.repeat,
                                 "hold_asked": run.parameters.release_at - run.parameters.pin_from,
                                 "hold_until_failure": run.parameters.hold_until_failure,
                                 # from the parameters: a library's run and one stored before the settings lack them
                                 "analytics_s": run.parameters.analytics_s,
                                 "analytics_sessions": run.parameters.analytics_sessions,
                                 "vacuum_every": run.parameters.vacuum_every,
                                 "poll_s": run.procedure.get("poll_s")}  # an idle worker's wait between polls
                              for i, run in enumerate(runs)])
    return Loaded(tuple(runs), summaries, series, samples,
                  {i: run.procedure.get("sample_s") for i, run in enumerate(runs)},
                  {i: run.procedure.get("explain_every_s") for i, run in enumerate(runs)}, phased)


# a server not started here keeps its own storage, stored as "not known": it is the base the disk is read against
def on_disk(row) -> bool:
    return row["storage"] == "disk"


def base_arm(row) -> bool:
    """Nothing changed but the holder: no mitigation, not on a disk, commits synchronous."""
    return row["mitigation"] == "none" and not on_disk(row) and row["synchronous_commit"] == "on"


def reference(summaries: pd.DataFrame, position: int) -> int | None:
    """The position of the arm `position` is read against (the module's docstring): the same arm, load, windows
    and repeat but for one setting; None where none is stored. A held arm on a disk is read against its control on
    the same disk where one is stored (the hold's part there), else against itself off the disk."""
    arm = summaries.iloc[position]
    if arm["mitigation"] != "none":
        wanted = [{"mitigation": "none"}]
    elif arm["synchronous_commit"] != "on":
        wanted = [{"synchronous_commit": "on"}]
    elif on_disk(arm):
        wanted = [{"holder": "none"}] if arm["holder"] != "none" else []
        wanted.append({"storage": None})  # the same arm off the disk
    elif arm["holder"] != "none":
        wanted = [{"holder": "none"}]
    elif arm.get("pg_version") != summaries["pg_version"].min():
        wanted = [{"pg_version": summaries["pg_version"].min()}]  # a control on a newer server: the same on the oldest
    else:
        return None
    for one in wanted:
        found = _differing_in(summaries, position, one)
        if found is not None:
            return found
    return None


def _differing_in(summaries: pd.DataFrame, position: int, wanted: dict) -> int | None:
    """The arm stored with position's settings, load, windows and repeat but for `wanted`'s."""
    arm = summaries.iloc[position]
    # .get: a summary stored before a setting existed (library) lacks it
    target = {key: arm.get(key) for key in (*ARM, *LOAD, *WINDOWS)} | wanted
    analytics = analytics_of(arm) if target["holder"] == "analytics" else None
    for other in range(len(summaries)):
        row = summaries.iloc[other]
        if other != position and all(not on_disk(row) if key == "storage" and value is None
                                     else row.get(key) == value for key, value in target.items()) \
                and analytics_of(row) == analytics:
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


ONSETS = ("seconds_to_slow", "seconds_to_fall_behind")


def onsets(runs: pd.DataFrame, positions, key: str) -> list[tuple[float, bool]]:
    """Each run's onset (key: seconds_to_slow or seconds_to_fall_behind) as (seconds, censored): where none came,
    the seconds of the hold it was watched for (observed_s), a lower bound (censored)."""
    found = []
    for position in positions:
        row = runs.iloc[position]
        value = row[key]
        found.append((watched(row), True) if value is None or pd.isna(value) else (float(value), False))
    return found


def watched(row) -> float:
    """The seconds of a run's hold an onset could be seen in: its hold, or less where the run ended too soon after
    it for an onset's run of seconds (outcomes.judge's observed_s)."""
    observed = row.get("observed_s")
    return float(row["held_s"]) if observed is None or pd.isna(observed) else float(observed)


def hold_part(runs: pd.DataFrame, held, controls, key: str = "seconds_to_slow") -> str:
    """One held arm's part, over its repeats against its control's, on an onset (a difference in differences):
    CONFIRMED where every held repeat came to it and the latest did so PRACTICAL_MARGIN_S or more before the
    earliest control's (a control that never did counts at the hold it lasted through, a lower bound); CORRECTED
    where no held repeat came to it within its hold (a lower bound too: "held N s without" it); NOT_DISTINGUISHABLE
    otherwise (the repeats disagree, or the control came to it as soon); NOT_MEASURED where no control is stored or
    a run could not carry its load."""
    if not len(held) or not len(controls) or any(runs.iloc[p]["verdict"] == soak_outcomes.NOT_JUDGED
                                                 for p in (*held, *controls)):
        return NOT_MEASURED
    mine, theirs = onsets(runs, held, key), onsets(runs, controls, key)
    if all(censored for _, censored in mine):
        return CORRECTED
    if any(censored for _, censored in mine):
        return NOT_DISTINGUISHABLE
    latest = max(value for value, _ in mine)
    earliest = min(value for value, _ in theirs)
    return CONFIRMED if latest + PRACTICAL_MARGIN_S <= earliest else NOT_DISTINGUISHABLE


def held_part(runs: pd.DataFrame, held, controls) -> str:
    """A held arm's part of A11 (and A12): the hold slowed the queue where hold_part confirms it on either onset,
    the claim's slowing or the queue's falling behind (claims slowed past the workers' headroom); CORRECTED where
    neither came within any held repeat's hold; else NOT_MEASURED or NOT_DISTINGUISHABLE."""
    parts = [hold_part(runs, held, controls, key) for key in ONSETS]
    if NOT_MEASURED in parts:
        return NOT_MEASURED
    if CONFIRMED in parts:
        return CONFIRMED
    return CORRECTED if all(part == CORRECTED for part in parts) else NOT_DISTINGUISHABLE


def arm_key(row) -> tuple:
    """An arm across its repeats: its settings, load and windows but the repeat."""
    return (*(row.get(key) for key in (*ARM, *LOAD, *WINDOWS) if key != "repeat"), analytics_of(row))


def held_groups(runs: pd.DataFrame) -> list[tuple[list[int], list[int]]]:
    """(the held repeats, their controls') for every held arm with nothing else changed, in the order the arms first
    come. A held arm with no control stored, where the same arm under another load has one, is left out: it was
    raced to check the model at another rate (soak_model), not to be read against a control."""
    groups: dict[tuple, tuple[list[int], list[int]]] = {}
    for held, control in held_arms(runs):
        mine, theirs = groups.setdefault(arm_key(runs.iloc[held]), ([], []))
        mine.append(held)
        if control is not None:
            theirs.append(control)
    controlled = {_arm_only(runs.iloc[held[0]]) for held, controls in groups.values() if controls}
    return [(held, controls) for held, controls in groups.values()
            if controls or _arm_only(runs.iloc[held[0]]) not in controlled]


def _arm_only(row) -> tuple:
    return tuple(row.get(key) for key in ARM)


def onset_text(runs: pd.DataFrame, positions, key: str) -> str:
    """An onset over repeats as the tables say it: the span of those that came to it, in seconds from the hold's
    start; "none in N s" for those that did not (the hold they lasted through)."""
    found = onsets(runs, positions, key)
    came = [value for value, censored in found if not censored]
    held = [value for value, censored in found if censored]
    # seconds as the model's predictions say them: minutes from two of them (formats.wait)
    said = ([span(min(came), max(came), lambda v: f"{v:.0f}") + " s"] if max(came) < 120
            else [span(min(came), max(came), wait)]) if came else []
    if held:
        said.append(say("onset.none", held=f"{min(held):.0f}"))
    return "; ".join(said) if said else DASH


def held_arms(runs: pd.DataFrame) -> list[tuple[int, int | None]]:
    """(held, its control or None) for every held arm with nothing else changed (no mitigation, off the disk,
    commits synchronous)."""
    return [(position, reference(runs, position)) for position, row in runs.iterrows()
            if row["holder"] != "none" and base_arm(row)]


def row_at(runs: pd.DataFrame, position: int | None):
    return None if position is None else runs.iloc[position]


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
    if soak_outcomes.vacuum_every(row):
        words.append(say("label.vacuumed", every=f"{soak_outcomes.vacuum_every(row):g}"))
    if on_disk(row):
        words.append(say("label.disk"))
    if row["synchronous_commit"] != "on":
        words.append(say("label.commit_off"))
    if not pd.isna(row.get("pg_shown", float("nan"))):  # arms on more than one server major
        words.append(say("label.pg", pg=str(int(row["pg_shown"]))))
    return ", ".join(words)


def held_label(row) -> str:
    held = say("held.none") if row["holder"] == "none" else row["holder"].replace("_", " ")
    analytics = analytics_of(row)
    if analytics is not None and analytics != (ANALYTICS_S, ANALYTICS_SESSIONS):
        seconds = f"{analytics[0]:g}"
        held = say("held.analytics", sessions=count(analytics[1]), seconds=seconds) if analytics[1] > 1 \
            else say("held.analytics_one", seconds=seconds)
    return held if row["mitigation"] == "none" else say("held.mitigated", held=held,
                                                        mitigation=row["mitigation"].replace("_", " "))


def verdict_text(row) -> str:
    """The verdict as the table says it (bare_verdict), and the run's CPU mark where it has one."""
    return bare_verdict(row) + cpu_text([cpu_marked(row)])


def bare_verdict(row) -> str:
    """The verdict alone: an arm held without failing says for how long (a lower bound); a run not judged says why,
    and what the rule would have said."""
    if row["verdict"] == soak_outcomes.HELD:
        return say("verdict.held", held=f"{watched(row):.0f}")
    if row["verdict"] != soak_outcomes.NOT_JUDGED:
        return row["verdict"].replace("_", " ")
    why = say("not_judged.cpu_bound") if row.get("cpu_bound") else say("not_judged.arrivals_behind")
    said = say("verdict.held", held=f"{watched(row):.0f}") if row["verdict_if_judged"] == soak_outcomes.HELD \
        else row["verdict_if_judged"].replace("_", " ")
    return say("not_judged.verdict", why=why, verdict=said)


def verdicts_text(runs: pd.DataFrame, positions) -> str:
    """Several repeats' verdicts: each verdict with how many said it, and the CPU mark of those that carry it."""
    said = [bare_verdict(runs.iloc[p]) for p in positions]
    verdicts = "; ".join(f"{text} ({said.count(text)} of {len(said)})" if len(said) > 1 else text
                         for text in dict.fromkeys(said))
    return verdicts + cpu_text([cpu_marked(runs.iloc[p]) for p in positions])


def cpu_marked(row) -> float | None:
    """Seconds from the hold's start to the CPU mark (soak_outcomes.cpu_mark), None where the run has none."""
    value = row.get("cpu_bound_from_s")
    return None if value is None or pd.isna(value) else float(value)


def cpu_note(runs: pd.DataFrame) -> str:
    """What "CPUs full" means, where any of the runs carries the mark; else nothing."""
    if not any(cpu_marked(row) is not None for _, row in runs.iterrows()):
        return ""
    return say("cpu.note", share=percent(soak_outcomes.CPU_BUSY_SHARE, 0), run=count(soak_outcomes.CPU_BUSY_RUN_S),
               gap=f"{soak_outcomes.CPU_GAP_S:g}")


def cpu_text(marks: list, window: str = "hold") -> str:
    """The CPU mark of the runs that carry it (each run's cpu_marked), after their verdicts: how many, and from
    when (soak_outcomes.cpu_mark), in seconds into the window judged (a hold, or a phased run's ramp)."""
    marked = [at for at in marks if at is not None]
    if not marked:
        return ""
    how_many = f"{len(marked)} of {len(marks)}, " if len(marks) > 1 else ""
    low, high = min(marked), max(marked)
    if high < 0:
        return say("cpu.before", runs=how_many, window=window)
    if low < 0:
        return say("cpu.before_to", runs=how_many, at=f"{high:.0f}", window=window)
    return say("cpu.from", runs=how_many, at=span(low, high, lambda v: f"{v:.0f}"), window=window)


def held_and_controls(runs: pd.DataFrame) -> list[int]:
    """The held arms with nothing else changed and their controls, each control before its held arms."""
    shown = []
    for held, control in held_arms(runs):
        shown += [position for position in (control, held) if position is not None and position not in shown]
    return shown


def repeat_label(row, runs: pd.DataFrame) -> str:
    """' (repeat n)' after an arm's label where that arm was raced more than once, else nothing."""
    key = arm_key(row)
    repeated = any(arm_key(other) == key and other["repeat"] for _, other in runs.iterrows())
    return " " + say("label.repeat", repeat=int(row["repeat"]) + 1) if repeated else ""
