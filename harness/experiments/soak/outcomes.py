"""A soak run's verdict, from its per-second series, by a rule stated before any run (harness.experiments.soak.measure).

The run has three windows: before the hold (after WARMUP_S), the hold (from pin_from to its release, pin_to: a
fixed second, or the second the arm fell behind, or its cap: measure's hold_until_failure), and after the release.
Per second, the series holds the jobs that arrived, the jobs claimed, the backlog at the second's end (arrived minus
claimed so far) and the claim statement's p50 and p99 over that second (a job library's run: each job's pickup, its
wait from enqueue to claim, harness.experiments.soak.library; "claim" below reads "pickup" there). Two levels come
from the seconds before the hold:

    claim level     the median of those seconds' median claims: robust to a slow second, as one worst second is not;
    backlog level   the highest backlog of any of those seconds, or BACKLOG_SLACK_S of arrivals (the median second's)
                    if that is more: jobs in flight between a worker's polls, not a queue falling behind.

From the hold's first second on, the rule reads two onsets, each the first second from which a condition holds for
a run of seconds (it may run on past the release), in seconds from the hold's start:

    seconds_to_slow         the second's median claim at SLOW_FACTOR times the claim level or more, for SLOW_RUN_S
                            seconds; a second in which no claim returned while the queue was behind (the backlog
                            above the fall-behind threshold below) counts as slow (every claim in it took longer
                            than the second);
    seconds_to_fall_behind  the backlog above its level and above BEHIND_S of arrivals, for BEHIND_RUN_S seconds:
                            claims behind arrivals by a delay a user notices, staying;
    recovered_s             from the release to the end of the first second from which the backlog stays at its
                            level or below for HOLD_S; None where it never did in the run.

Then, for the run:

    held_without_failing  neither onset within the hold: "held N s without failing", a lower bound on the hold the
                          arm takes (never "survives": a longer hold may fail it). N is observed_s: the hold, or
                          less where the run ended before an onset's run of seconds could be seen;
    slowed                the claim slowed, the queue kept up;
    fell_behind           the queue fell behind, and its backlog was back at its level within RECOVER_WITHIN_S of
                          the release;
    spirals               it fell behind, and RECOVER_WITHIN_S after the release had not recovered;
    cut_off               it fell behind, and the run ended less than RECOVER_WITHIN_S after the release with the
                          backlog not back: a lower bound, not a spiral;
    not_judged            the run could not carry its load: its arrivals fell behind their schedule (arrivals_behind),
                          or its workers or their backends waited for a CPU half their time (cpu_bound). What the rule
                          would have said is kept beside it (verdict_if_judged).

The machine's limit is marked, not judged: a soak's workers sleep through their jobs, so a runnable share of their
window (cpu_bound) stays low with every CPU full. cpu_mark reads the sampler's share of this machine's CPU time that
was busy (whoever used it), from the warm-up's end to the release: cpu_bound_from_s, the first of CPU_BUSY_RUN_S
samples in a row (each within CPU_GAP_S of the one before) at CPU_BUSY_SHARE or more, in seconds from the hold's
start (below 0 before it). A held claim reads more rows per call and uses more CPU as it slows, as it would on
any machine, so the verdict stands, and says from when the machine, not the table alone, may have set its pace.

A verdict says what happened in one run. Whether the hold did it is read against the control, the same arm with
nothing held, judged on the same windows, over repeats (harness.article.sections.soak_arms): a table whose claims
slow as it grows (the history shape) can fall behind without a hold.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

WARMUP_S = 5.0  # the first seconds of a run: workers connecting, the first autovacuum pass; not "before the hold"
SLOW_FACTOR = 2.0  # a claim this many times its level before the hold is slow
SLOW_RUN_S = 5  # seconds in a row the claim stays slow for the onset to count
BEHIND_RUN_S = 10  # seconds in a row the backlog stays above its level for the queue to have fallen behind
RECOVER_WITHIN_S = 30.0  # the backlog back at its level within this of the release
HOLD_S = 5  # seconds the backlog stays back at its level for it to count as recovered (a dip is not a recovery)
# a backlog of up to this many seconds of arrivals is jobs in flight, not a queue behind: two of an idle worker's
# polls (harness.experiments.soak.processes.POLL_S, 0.05 s). Runs at 600 jobs/s that kept up ended their seconds
# with 4 to 18 jobs not yet claimed (0.03 s of arrivals); a queue that spiralled held 5,189. Where arrivals come in
# steps, a step's more (judge's step_s): pgmq's backlog, read at a random point of its 0.2 s steps of 103 jobs, was
# 0 to 91 with nothing held (2026-12-06); held, it was 96 in the release's second, then 29 to 87. Since a library's
# jobs are sent as each falls due (2026-12-07), a step is the jobs that fell due during one call: about one.
BACKLOG_SLACK_S = 0.1
# the queue has fallen behind where its backlog is more than this many seconds of arrivals (and above its level): a
# second's delay to every job a user notices. Changed after a run (2026-12-06, issue #41): at the in-flight level
# (0.1 s of arrivals) the indexed history table's control, nothing held at 416 jobs/s, read as fallen behind when
# its backlog rose to 331 (0.8 s of arrivals) for 10 s while dead tuples piled up before autovacuum's first pass,
# and came back 4 s later.
BEHIND_S = 1.0
ARRIVALS_BEHIND_SHARE = 0.05  # arrivals this share behind their schedule at any second: the run is marked
VERSIONS_PER_JOB = 2  # row versions a job of the soak's own leaves: its claim's UPDATE and its finish
# the analytics holder's defaults (harness.experiments.soak.holders): a statement's length (--analytics-s), and the
# sessions, each starting a share of a statement's length after the one before so that their statements overlap
# (--analytics-sessions); the page names an arm that differs from them
ANALYTICS_S = 20.0
ANALYTICS_SESSIONS = 2

HELD, SLOWED, FELL_BEHIND, SPIRALS, CUT_OFF, NOT_JUDGED = (
    "held_without_failing", "slowed", "fell_behind", "spirals", "cut_off", "not_judged")
VERDICTS = (HELD, SLOWED, FELL_BEHIND, SPIRALS, CUT_OFF, NOT_JUDGED)
FAILED = (FELL_BEHIND, SPIRALS, CUT_OFF)  # the queue fell behind

SERIES_COLUMNS = ("second", "arrived", "claimed", "backlog", "claim_p50_ms", "claim_p99_ms", "claim_mean_ms")

# The model (issue #41): while the horizon is held, every job claimed leaves VERSIONS_PER_JOB row versions nothing can
# remove, and the claim steps over them; its mean time grows with them at a slope fitted per run (claim_slope), in
# milliseconds per PER_VERSIONS versions. A worker's time per job is workers / sustained rate with nothing held,
# plus what the claim gained; the queue falls behind once that leaves the workers short of the arrivals by
# BEHIND_S of them (predict_fall_behind). The rule that checks it (model_check) was written before the runs at a
# second rate that test it.
# The CPU note: the model's second limit (2026-12-07, written after the hour at 18 % fell behind at the machine's
# CPUs, not at its workers' headroom, and before the runs that check it: docs/soak.md). Every claim statement, and
# every idle worker's empty poll, reads the versions kept, at a CPU cost that grows with them at a slope fitted per
# run (cpu_slope), in CPU ms per statement per PER_VERSIONS versions; the CPUs serve at most CPU_BUSY_SHARE of
# their time. The queue's capacity is the lesser of the workers' and the CPUs'.
PER_VERSIONS = 100_000
FIT_MIN_S = 10  # hold seconds with a claim, at least, for a slope
MODEL_STEP_S = 0.05  # the prediction's time step
MODEL_HORIZON_S = 7200.0  # predictions beyond this are "not within two hours"
MODEL_FACTOR = 1.5  # a prediction holds where the measured onset lies within this factor of it, either way
MODEL_HOLDS, MODEL_OFF, MODEL_UNTESTED = "holds", "off", "untested"
WORKERS_LIMIT, CPUS_LIMIT = "workers", "cpus"  # the model's two limits (its CPU note)
CPU_BUSY_SHARE = 0.9  # a sample with this share of the machine's CPU time busy, or more, is CPU-bound
CPU_BUSY_RUN_S = 5  # samples in a row (one a second) CPU-bound for the mark
CPU_GAP_S = 1.5  # a sample taken longer than this after the one before starts a new run of them


def rule_settings() -> dict:
    """The rule's constants, as a run's procedure records them."""
    return {"warmup_s": WARMUP_S, "slow_factor": SLOW_FACTOR, "slow_run_s": SLOW_RUN_S,
            "behind_run_s": BEHIND_RUN_S, "behind_s": BEHIND_S, "recover_within_s": RECOVER_WITHIN_S, "hold_s": HOLD_S,
            "backlog_slack_s": BACKLOG_SLACK_S, "arrivals_behind_share": ARRIVALS_BEHIND_SHARE,
            "cpu_busy_share": CPU_BUSY_SHARE, "cpu_busy_run_s": CPU_BUSY_RUN_S, "cpu_gap_s": CPU_GAP_S}


def cpu_mark(samples: pd.DataFrame, pin_from: float, pin_to: float) -> dict:
    """The CPU mark (the module's docstring) from the sampler's samples: cpu_bound_from_s (None where no run of
    samples came to it, or none was read), the median busy share before the hold and in it, and cpu_measured:
    whether the busy share was read (a run stored before it was not)."""
    if "cpu_busy_share" not in samples or not samples["cpu_busy_share"].notna().any():
        return {"cpu_measured": False, "cpu_bound_from_s": None, "cpu_busy_before": None, "cpu_busy_hold": None}
    read = samples.loc[(samples["t_s"] >= WARMUP_S) & (samples["t_s"] < pin_to) & samples["cpu_busy_share"].notna(),
                       ["t_s", "cpu_busy_share"]].sort_values("t_s")
    busy = (read["cpu_busy_share"] >= CPU_BUSY_SHARE).to_numpy()
    times = read["t_s"].to_numpy(float)
    joined = np.concatenate([[False], np.diff(times) <= CPU_GAP_S])  # each sample: close enough to the one before
    start = next((i for i in range(len(busy) - CPU_BUSY_RUN_S + 1)
                  if busy[i:i + CPU_BUSY_RUN_S].all() and joined[i + 1:i + CPU_BUSY_RUN_S].all()), None)

    def median(inside) -> float | None:
        values = read.loc[inside, "cpu_busy_share"]
        return float(values.median()) if len(values) else None

    return {"cpu_measured": True,
            "cpu_bound_from_s": None if start is None else round(float(times[start]) - pin_from, 1),
            "cpu_busy_before": median(read["t_s"] < pin_from), "cpu_busy_hold": median(read["t_s"] >= pin_from)}


def judged_keys(latency: str = "claim") -> tuple[str, ...]:
    """What a run's summary keeps of judge's answer."""
    return ("verdict", "verdict_if_judged", "seconds_to_slow", "seconds_to_fall_behind", "held_s", "observed_s",
            "seconds_to_slow_in_run", "seconds_to_fall_behind_in_run", "held_without_failing", "recovered_s",
            f"{latency}_level_ms", "backlog_level", "watched_after_s", "unremovable_at_slow",
            "unremovable_at_fall_behind", "claim_ms_per_100k")


def step_of(ended_s: float, calls: int) -> float:
    """How far apart arrivals sent a call at a time came, on average: the run's seconds over its enqueue calls (a
    job library's arrivals: harness.experiments.soak.library); 0 where no calls were counted (the soak's own)."""
    return ended_s / calls if calls else 0.0


def windows(series: pd.DataFrame, pin_from: float, pin_to: float) -> dict[str, pd.DataFrame]:
    """The seconds before the hold (after WARMUP_S), during it, and after its release. A second belongs to the
    window its start falls in."""
    second = series["second"]
    return {"before": series[(second >= WARMUP_S) & (second < pin_from)],
            "during": series[(second >= pin_from) & (second < pin_to)],
            "after": series[second >= pin_to]}


def backlog_level(before_backlog, before_arrived, step_s: float = 0.0) -> float:
    """The backlog a queue keeping up may show (the module's docstring), from the seconds before the hold: their
    backlogs and arrivals. step_s: how far apart arrivals come where they come in steps; a step's jobs are in
    flight too."""
    backlog, arrived = np.asarray(before_backlog, float), np.asarray(before_arrived, float)
    if not len(backlog):
        return 0.0
    return max(float(backlog.max()), float(np.median(arrived)) * (BACKLOG_SLACK_S + step_s))


def behind_level(before_backlog, before_arrived, step_s: float = 0.0) -> float:
    """The backlog above which the queue has fallen behind: its level, or BEHIND_S of arrivals (the median
    second's before the hold) if that is more."""
    arrived = np.asarray(before_arrived, float)
    return max(backlog_level(before_backlog, before_arrived, step_s),
               float(np.median(arrived)) * BEHIND_S if len(arrived) else 0.0)


def onset(flags, seconds, start_s: float, end_s: float, run: int) -> float | None:
    """The first second wholly within [start_s, end_s) from which `flags` holds for `run` seconds in a row (the run
    may go on past end_s), in seconds from start_s; None where there is none. A release stamped just after a whole
    second (the live one) leaves the second it falls in out."""
    flags, seconds = np.asarray(flags, bool), np.asarray(seconds, float)
    for i in np.flatnonzero((seconds >= start_s) & (seconds + 1 <= end_s)):
        if i + run <= len(flags) and flags[i:i + run].all():
            return float(seconds[i] - start_s)
    return None


def recovered_after(series: pd.DataFrame, pin_to: float, level: float) -> float | None:
    """Seconds from the release to the end of the first second after it from which the backlog stays at `level`
    or below for HOLD_S seconds; None where no such HOLD_S seconds were seen."""
    after = series[series["second"] >= pin_to].reset_index(drop=True)
    down = (after["backlog"] <= level).to_numpy()
    for i in range(len(after) - HOLD_S + 1):  # HOLD_S seconds seen, not fewer at the run's end
        if down[i:i + HOLD_S].all():
            return float(after["second"].iloc[i] + 1 - pin_to)
    return None


def slow_seconds(p50, claim_level: float | None, behind) -> np.ndarray:
    """Per second, whether the claim was slow: its median at SLOW_FACTOR times the level or more; a second with no
    claim returned while jobs waited beyond the level counts too (every claim in it ran past the second)."""
    if claim_level is None:
        return np.zeros(len(p50), bool)
    return (np.nan_to_num(p50, nan=np.inf) >= SLOW_FACTOR * claim_level) & (~np.isnan(p50) | behind)


def observed(series: pd.DataFrame, start_s: float, end_s: float) -> float:
    """How long a window was watched for either onset: an onset needs its run of seconds inside the run, so a
    window cut off by the run's end is a lower bound only to the last second one could start."""
    return max(0.0, min(end_s, float(len(series) - BEHIND_RUN_S)) - start_s)


def judge(series: pd.DataFrame, pin_from: float, pin_to: float, ended_s: float, arrivals_behind: bool = False,
          cpu_bound: bool | None = None, step_s: float = 0.0, held: bool = False) -> dict:
    """The verdict and what it rests on; ended_s: when the run ended, from its start. step_s: how far apart the
    arrivals come where they come in steps (step_of). held: something held the horizon (the row versions the queue
    wrote since the hold began are then counted as unremovable; a job library's are not counted: None)."""
    parts = windows(series, pin_from, pin_to)
    before = parts["before"]
    latency = latency_of(series)
    p50 = series[f"{latency}_p50_ms"].to_numpy(float)
    before_p50 = before[f"{latency}_p50_ms"].dropna()
    claim_level = float(before_p50.median()) if len(before_p50) else None
    level = backlog_level(before["backlog"], before["arrived"], step_s)
    backlog = series["backlog"].to_numpy(float)
    behind = backlog > behind_level(before["backlog"], before["arrived"], step_s)
    slow = slow_seconds(p50, claim_level, behind)
    seconds = series["second"].to_numpy(float)
    to_slow = onset(slow, seconds, pin_from, pin_to, SLOW_RUN_S)
    to_behind = onset(behind, seconds, pin_from, pin_to, BEHIND_RUN_S)
    observed_s = observed(series, pin_from, pin_to)
    recovered_s = recovered_after(series, pin_to, level)
    watched_s = ended_s - pin_to
    if to_behind is None:
        verdict = SLOWED if to_slow is not None else HELD
    elif recovered_s is not None and recovered_s <= RECOVER_WITHIN_S:
        verdict = FELL_BEHIND
    elif watched_s >= RECOVER_WITHIN_S:
        verdict = SPIRALS
    else:
        verdict = CUT_OFF
    # the jobs claimed from the hold's start to the onset second's start (not that second's own)
    claimed = np.where(seconds >= pin_from, series["claimed"].to_numpy(float), 0.0)
    claimed_before = np.cumsum(claimed) - claimed

    def unremovable(at: float | None) -> int | None:
        if at is None or not held or latency != "claim":
            return None
        return int(VERSIONS_PER_JOB * claimed_before[np.searchsorted(seconds, pin_from + at)])

    fitted_until = pin_from + to_behind if to_behind is not None else pin_to
    slope = claim_slope(series, pin_from, fitted_until) if held and latency == "claim" else None
    return {"verdict": NOT_JUDGED if arrivals_behind or cpu_bound else verdict, "verdict_if_judged": verdict,
            "seconds_to_slow": to_slow, "seconds_to_fall_behind": to_behind, "held_s": pin_to - pin_from,
            "observed_s": observed_s,
            # over the whole run from the hold's start, released or not: whether a hold the server ended early (a
            # timeout) still left the queue slowed or behind
            "seconds_to_slow_in_run": onset(slow, seconds, pin_from, ended_s, SLOW_RUN_S),
            "seconds_to_fall_behind_in_run": onset(behind, seconds, pin_from, ended_s, BEHIND_RUN_S),
            "held_without_failing": verdict == HELD, "recovered_s": recovered_s,
            f"{latency}_level_ms": claim_level, "backlog_level": level, "watched_after_s": watched_s,
            "unremovable_at_slow": unremovable(to_slow), "unremovable_at_fall_behind": unremovable(to_behind),
            "claim_ms_per_100k": None if slope is None else slope * PER_VERSIONS}


REFERENCE, WARMUP, RECOVERED, NOT_RECOVERED = "reference", "warmup", "recovered", "not_recovered"
PHASE_VERDICTS = (WARMUP, REFERENCE, HELD, SLOWED, FELL_BEHIND, RECOVERED, NOT_RECOVERED, NOT_JUDGED)


def judge_phases(series: pd.DataFrame, phases: list[dict], arrivals_behind: bool = False,
                 cpu_bound: bool | None = None, samples: pd.DataFrame | None = None) -> list[dict]:
    """Each phase of a run (harness.experiments.soak.phases: label, kind, start_s, end_s, rate, holder) judged
    against the clean phase before it, its reference, by the rule's constants:

        warmup     not judged;
        clean      the reference: its claim level and backlog level, from its seconds after WARMUP_S;
        hold/ramp  seconds_to_slow and seconds_to_fall_behind from the phase's start, as judge's, except that the
                   backlog is behind above BEHIND_S of the phase's own arrivals (a ramp's are more); held without
                   failing (observed_s, a lower bound), slowed, or fell behind;
        recovery   recovered_s, from its start to the end of the first second from which the backlog stays at the
                   reference's level for HOLD_S seconds inside the phase; recovered, or not.

    A run that could not carry its load (arrivals behind, CPU-bound) is not judged, what the rule would have said
    kept beside it. With the sampler's samples, a hold or ramp also carries its CPU mark (cpu_mark), read from its
    reference's start to its own end: the reference's seconds are its "before"."""
    seconds = series["second"].to_numpy(float)
    latency = latency_of(series)
    p50 = series[f"{latency}_p50_ms"].to_numpy(float)
    backlog = series["backlog"].to_numpy(float)
    arrived = series["arrived"].to_numpy(float)
    reference, judged = None, []
    for phase in phases:
        start, end = float(phase["start_s"]), float(phase["end_s"])
        inside = (seconds >= start) & (seconds < end)
        row = dict(phase) | {"reference": None, "claim_level_ms": None, "backlog_level": None, "seconds_to_slow": None,
                             "seconds_to_fall_behind": None, "observed_s": None, "recovered_s": None,
                             "arrived_per_s": float(arrived[inside].mean()) if inside.any() else None,
                             "backlog_max": float(backlog[inside].max()) if inside.any() else None}
        if phase["kind"] == "warmup" or (phase["kind"] != "clean" and reference is None):
            row["verdict_if_judged"] = WARMUP if phase["kind"] == "warmup" else None
        elif phase["kind"] == "clean":
            counted = inside & (seconds >= WARMUP_S)
            levels = series[counted]
            p50s = levels[f"{latency}_p50_ms"].dropna()
            reference = {"label": phase["label"], "claim_level_ms": float(p50s.median()) if len(p50s) else None,
                         "backlog_level": backlog_level(levels["backlog"], levels["arrived"]), "start_s": start}
            row |= {"claim_level_ms": reference["claim_level_ms"], "backlog_level": reference["backlog_level"],
                    "verdict_if_judged": REFERENCE}
        else:
            row |= {"reference": reference["label"], "claim_level_ms": reference["claim_level_ms"],
                    "backlog_level": reference["backlog_level"]}
            if phase["kind"] == "recovery":  # back within the phase: its HOLD_S seconds inside it
                row["recovered_s"] = recovered_after(series[seconds < end], start, reference["backlog_level"])
                row["verdict_if_judged"] = RECOVERED if row["recovered_s"] is not None else NOT_RECOVERED
            else:
                own = arrived[inside]
                behind = backlog > max(reference["backlog_level"], float(np.median(own)) * BEHIND_S if len(own) else 0)
                slow = slow_seconds(p50, reference["claim_level_ms"], behind)
                row["seconds_to_slow"] = onset(slow, seconds, start, end, SLOW_RUN_S)
                row["seconds_to_fall_behind"] = onset(behind, seconds, start, end, BEHIND_RUN_S)
                row["observed_s"] = observed(series, start, end)
                if samples is not None:
                    row |= cpu_mark(samples[samples["t_s"] >= reference["start_s"]], start, end)
                row["verdict_if_judged"] = FELL_BEHIND if row["seconds_to_fall_behind"] is not None \
                    else SLOWED if row["seconds_to_slow"] is not None else HELD
        unjudged = row["verdict_if_judged"] in (None, WARMUP, REFERENCE)
        row["verdict"] = row["verdict_if_judged"] if unjudged or not (arrivals_behind or cpu_bound) else NOT_JUDGED
        judged.append(row)
    return judged


def kept_versions(series: pd.DataFrame, pin_from: float) -> np.ndarray:
    """Per second, the row versions the hold kept by the second's middle: VERSIONS_PER_JOB per job claimed since the
    hold began (half the second's own); 0 before the hold."""
    seconds = series["second"].to_numpy(float)
    claimed = np.where(seconds >= pin_from, series["claimed"].to_numpy(float), 0.0)
    return VERSIONS_PER_JOB * (np.cumsum(claimed) - claimed / 2)


def claim_slope(series: pd.DataFrame, pin_from: float, until_s: float) -> float | None:
    """What a claim gains per row version the hold kept, in ms: the Theil-Sen slope (the median of the slopes
    between every two seconds: a slow second or an autovacuum pass moves it little) of each second's mean claim
    against the versions kept by then, over the hold's seconds before until_s (the second the queue fell behind, or
    the release: a queue behind makes its workers' claims wait for each other too). None with fewer than
    FIT_MIN_S seconds, or for a series stored without the mean."""
    if "claim_mean_ms" not in series:
        return None
    seconds = series["second"].to_numpy(float)
    mean = series["claim_mean_ms"].to_numpy(float)
    keep = (seconds >= pin_from) & (seconds < until_s) & ~np.isnan(mean)
    x, y = kept_versions(series, pin_from)[keep], mean[keep]
    if len(x) < FIT_MIN_S:
        return None
    return _theil_sen(x, y)


def _theil_sen(x: np.ndarray, y: np.ndarray) -> float | None:
    """The median of the slopes between every two points (at most 400, evenly spaced, so the pairs stay few)."""
    if len(x) > 400:
        pick = np.linspace(0, len(x) - 1, 400).round().astype(int)
        x, y = x[pick], y[pick]
    i, j = np.triu_indices(len(x), 1)
    apart = x[j] - x[i]
    slopes = (y[j] - y[i])[apart > 0] / apart[apart > 0]
    return float(np.median(slopes)) if len(slopes) else None


def empty_per_s(summary) -> float:
    """The claim statements a second that claimed no job, all workers together, over the run: idle workers' empty
    polls, lost races and failed claims. The run counts them, not when they came (0 for a run stored without the
    counts)."""
    ended = summary.get("ended_s")
    none = sum(float(summary.get(key) or 0) for key in ("empty_polls", "lost_races", "claim_errors"))
    return none / float(ended) if ended else 0.0


def cpu_slope(series: pd.DataFrame, samples: pd.DataFrame, pin_from: float, until_s: float, cpus: int,
              empty: float = 0.0) -> dict:
    """The model's CPU limit, from a run's own seconds (the CPU note above): the CPUs busy before the hold (cores:
    the median sampled share times `cpus`), and the Theil-Sen slope, over the hold's seconds before until_s, of
    the cores busy beyond that per statement (the second's jobs claimed, and `empty` statements a second that
    claimed none: empty_per_s) against the versions kept, in CPU ms per statement per PER_VERSIONS versions. A
    sample's share is of the time since the sample before it: one taken more than CPU_GAP_S after it (a sample
    missed) is left out, the rest read as the whole second before them. None for each where the share was not
    sampled or fewer than FIT_MIN_S seconds were."""
    none = {"cpu_ms_per_100k": None, "busy_cores_before": None}
    if "cpu_busy_share" not in samples or not cpus or not len(series):
        return none
    times = samples["t_s"].to_numpy(float)
    after_one = np.concatenate([[False], np.diff(times) <= CPU_GAP_S])  # the first sample's window is not known
    read = samples[samples["cpu_busy_share"].notna().to_numpy() & after_one]
    second = np.floor(read["t_s"].to_numpy(float) - 1)
    cores = read["cpu_busy_share"].to_numpy(float) * cpus
    before = cores[(second >= WARMUP_S) & (second + 1 <= pin_from)]
    if not len(before):
        return none
    busy = float(np.median(before))
    row = np.searchsorted(series["second"].to_numpy(float), second)
    inside = (second >= pin_from) & (second + 1 <= until_s) & (row < len(series))
    row = row[inside]
    statements = series["claimed"].to_numpy(float)[row] + empty
    x, y = kept_versions(series, pin_from)[row], (cores[inside] - busy) * 1000 / np.maximum(statements, 1.0)
    slope = _theil_sen(x, y) if len(x) >= FIT_MIN_S else None
    return {"cpu_ms_per_100k": None if slope is None else slope * PER_VERSIONS, "busy_cores_before": busy}


def _backlog_ends(ms_per_100k: float, rate: float, workers: int, sustained_rate: float, job_ms_more: float,
                  cpu: tuple | None = None):
    """The model's backlog at the end of each whole second of a hold, one second at a time, for as long as asked
    (predict_fall_behind's docstring); nothing where the workers could not keep up with nothing held."""
    base_s = workers / sustained_rate + job_ms_more / 1000
    if rate <= 0 or workers / base_s <= rate:
        return
    per_version_s = max(ms_per_100k, 0.0) / PER_VERSIONS / 1000
    if cpu is not None:  # the CPUs' own limit: CPU seconds per job, before the hold and per version kept
        cpu_ms, busy, empty, cpus = cpu
        cpu_job_s, cpu_version_s = busy / rate, max(cpu_ms, 0.0) * (1 + empty / rate) / PER_VERSIONS / 1000
        cpu_s = CPU_BUSY_SHARE * cpus
        if busy >= cpu_s:  # the CPUs could not keep up with nothing held: not the hold's doing
            return
    steps = int(round(1 / MODEL_STEP_S))
    kept = backlog = 0.0
    first = None  # the limit whose capacity fell below the arrivals first
    while True:
        for _ in range(steps):
            capacity = workers / (base_s + per_version_s * kept)
            if first is None and capacity < rate:
                first = WORKERS_LIMIT
            if cpu is not None and cpu_job_s + cpu_version_s * kept > 0:
                cpus_capacity = cpu_s / (cpu_job_s + cpu_version_s * kept)
                if first is None and cpus_capacity < rate:
                    first = CPUS_LIMIT
                capacity = min(capacity, cpus_capacity)
            served = min(capacity * MODEL_STEP_S, backlog + rate * MODEL_STEP_S)
            backlog += rate * MODEL_STEP_S - served
            kept += VERSIONS_PER_JOB * served
        yield backlog, first


def predicted_backlog(ms_per_100k: float, rate: float, workers: int, sustained_rate: float, seconds: float,
                      job_ms_more: float = 0.0, cpu: tuple | None = None) -> np.ndarray | None:
    """The model's backlog at the end of each whole second of a hold, for `seconds` seconds; None where the workers
    could not keep up with nothing held."""
    ends = np.fromiter((backlog for backlog, _ in itertools.islice(
        _backlog_ends(ms_per_100k, rate, workers, sustained_rate, job_ms_more, cpu), int(seconds))), float)
    return ends if len(ends) or int(seconds) == 0 else None


def predict_fall_behind(ms_per_100k: float, rate: float, workers: int, sustained_rate: float,
                        job_ms_more: float = 0.0, horizon_s: float = MODEL_HORIZON_S,
                        cpu: tuple | None = None) -> float | None:
    """The seconds from a hold's start until the queue falls behind (the rule's seconds_to_fall_behind), by the
    model: per worker, a job takes workers / sustained_rate with nothing held (job_ms_more: a job that much longer),
    plus ms_per_100k per PER_VERSIONS versions kept; jobs arrive at `rate`, two versions are kept per job claimed,
    and the onset is the first second whose end finds more than BEHIND_S of arrivals waiting. cpu: the CPUs' limit
    as well (cpu_inputs), the lesser of the two capacities serving. None where that is beyond horizon_s, or where
    the workers could not keep up with nothing held."""
    found = limit_met(ms_per_100k, rate, workers, sustained_rate, job_ms_more, horizon_s, cpu)
    return None if found is None else found[0]


def limit_met(ms_per_100k: float, rate: float, workers: int, sustained_rate: float, job_ms_more: float = 0.0,
              horizon_s: float = MODEL_HORIZON_S, cpu: tuple | None = None) -> tuple[float, str] | None:
    """predict_fall_behind's second, and the limit whose capacity fell below the arrivals first (WORKERS_LIMIT or
    CPUS_LIMIT); None where the model puts no fall within horizon_s."""
    ends = _backlog_ends(ms_per_100k, rate, workers, sustained_rate, job_ms_more, cpu)
    for second, (backlog, first) in enumerate(itertools.islice(ends, int(horizon_s))):
        if backlog > rate * BEHIND_S:
            return float(second), first
    return None

FIT_ALIKE = ("shape", "strategy", "holder", "workers", "job_ms", "storage", "synchronous_commit")  # a fit's runs share these


def vacuum_every(summary) -> float:
    """An arm's own VACUUM every so many seconds (harness.experiments.soak.vacuums), 0 for none: a run stored before
    the setting, or a frame without it, was not vacuumed."""
    value = summary.get("vacuum_every")
    return 0.0 if value is None or pd.isna(value) else float(value)


def fit_key(summary) -> tuple:
    """What a fit's runs share (FIT_ALIKE) and their own VACUUM's schedule, from a summary (a dict or a row)."""
    return (*(summary.get(key) for key in FIT_ALIKE), vacuum_every(summary))


def fits(summary) -> bool:
    """Whether a run's summary (a dict or a row) can be fitted on: held with nothing else changed (no mitigation),
    judged, with a slope."""
    slope = summary.get("claim_ms_per_100k")
    return summary.get("holder") not in (None, "none") and summary.get("mitigation", "none") == "none" \
        and summary.get("verdict") != NOT_JUDGED and slope is not None and not pd.isna(slope)


def fitted(summaries, like: dict) -> tuple[float, float, float, int] | None:
    """The model's slope for a run like `like`, from other runs' summaries: those held with nothing else changed (no
    mitigation), judged, with a slope, and alike in FIT_ALIKE. (median, lowest, highest, runs) of their slopes, in
    ms per PER_VERSIONS versions; None where none is stored. The caller leaves the run it predicts out."""
    slopes = _slopes_alike(summaries, like, "claim_ms_per_100k")
    if not slopes:
        return None
    return float(np.median(slopes)), min(slopes), max(slopes), len(slopes)


def fitted_cpu(summaries, like: dict) -> tuple[float, int] | None:
    """The CPU limit's slope for a run like `like`, from fitted's runs that carry one (a run stored before the CPUs
    were sampled does not): (median, runs); None where none does."""
    slopes = _slopes_alike(summaries, like, "cpu_ms_per_100k")
    return (float(np.median(slopes)), len(slopes)) if slopes else None


def _slopes_alike(summaries, like: dict, key: str) -> list[float]:
    """`key` of the summaries a fit may take (fits) alike `like` (fit_key), where they carry it."""
    return [float(s[key]) for s in summaries if fits(s) and fit_key(s) == fit_key(like)
            and s.get(key) is not None and not pd.isna(s[key])]


def cpu_inputs(cpu_fit: tuple | None, run) -> tuple | None:
    """The CPU limit's inputs for `run` (a summary or a row): the slope fitted on other runs (fitted_cpu), and the
    run's own CPUs busy before its hold, statements a second that claimed none, and CPUs (with_cpu); None where any
    is missing."""
    found = [run.get(key) for key in ("busy_cores_before", "empty_per_s", "cpus")]
    if cpu_fit is None or any(value is None or pd.isna(value) for value in found):
        return None
    return (cpu_fit[0], *(float(value) for value in found))


def with_cpu(summary: dict, series: pd.DataFrame, samples: pd.DataFrame, cpus: int | None) -> dict:
    """A held run's summary with its CPU limit's figures (cpu_slope), fitted over the hold's seconds before the
    queue fell behind as the claim's slope is; a summary without a hold, or without the samples, gets None."""
    held = summary.get("holder") not in (None, "none") and summary.get("latency", "claim") == "claim"
    empty = empty_per_s(summary)
    behind = summary.get("seconds_to_fall_behind")
    until = summary["pin_from"] + behind if behind is not None and not pd.isna(behind) else summary["pin_to"]
    found = cpu_slope(series, samples, summary["pin_from"], until, cpus or 0, empty) if held \
        else {"cpu_ms_per_100k": None, "busy_cores_before": None}
    return summary | found | {"empty_per_s": empty, "cpus": cpus}


def predicted_for(summaries, run: dict) -> float | None:
    """predict_fall_behind for `run` (a summary) from the slopes fitted on `summaries` (without it): the workers'
    limit, and the CPUs' where the runs carry it (with_cpu)."""
    fit = fitted(summaries, run)
    if fit is None or run.get("holder") in (None, "none") or not run.get("sustained_rate"):
        return None
    return predict_fall_behind(fit[0], float(run["rate"]), int(run["workers"]), float(run["sustained_rate"]),
                               cpu=cpu_inputs(fitted_cpu(summaries, run), run))


def fell_mostly(fell) -> bool:
    """Whether more than half of an arm's repeats fell behind (each a bool): an arm that fails here most times, the
    mitigations' follow-up and the decision's (harness.experiments.soak.sweep, harness.article.sections.soak)."""
    fell = list(fell)
    return 2 * sum(fell) > len(fell)


def model_check(predicted: float | None, measured: float | None, observed_s: float) -> str:
    """A prediction against a run the fit left out. measured: its seconds_to_fall_behind, None where it held
    observed_s without falling behind (a lower bound); predicted: None where the model put the fall beyond its
    horizon. MODEL_HOLDS where the measured onset lies within MODEL_FACTOR of the predicted, either way; MODEL_OFF
    where it lies outside, where the run fell behind and the model said it would not, or where the run held more
    than MODEL_FACTOR times the predicted seconds without falling behind; else MODEL_UNTESTED (the run ended
    before a fall the model put later, or too soon after it to tell)."""
    if measured is None:
        return MODEL_OFF if predicted is not None and observed_s > MODEL_FACTOR * max(predicted, 1.0) \
            else MODEL_UNTESTED
    if predicted is None:
        return MODEL_OFF
    ratio = max(measured, 1.0) / max(predicted, 1.0)  # an onset is a whole second: 0 s counts as 1
    return MODEL_HOLDS if 1 / MODEL_FACTOR <= ratio <= MODEL_FACTOR else MODEL_OFF


def arrivals_behind(series: pd.DataFrame, rate: float, lag_s: float = 0.0, scheduled=None) -> bool:
    """Whether the arrivals fell more than ARRIVALS_BEHIND_SHARE behind their schedule at the end of any second
    (beyond one job: a schedule of a few jobs a second is always a job behind at some instant). lag_s: how far
    arrivals sent a call at a time trail their schedule by design (a job library's enqueue, whose jobs due during a
    call wait for it: harness.experiments.soak.library), taken off the schedule first. scheduled: the jobs due by
    each second's end, where the rate changes from phase to phase (harness.experiments.soak.phases); else `rate`
    from the start."""
    if not len(series):
        return False
    if scheduled is None:
        scheduled = np.maximum(series["second"] + 1 - lag_s, 0) * rate
    scheduled = np.asarray(scheduled, float)
    arrived = series["arrived"].cumsum()
    return bool((arrived < scheduled * (1 - ARRIVALS_BEHIND_SHARE) - 1).any())


def latency_of(series: pd.DataFrame) -> str:
    """What a series' p50 and p99 are of: "claim" (the claim statement's time, the soak's own workers) or "pickup"
    (a job's claim minus its enqueue, a job library's workers: harness.experiments.soak.library)."""
    return "pickup" if "pickup_p99_ms" in series else "claim"


def per_second(arrival_ns: np.ndarray, claim_ns: np.ndarray, claim_ms: np.ndarray, start_ns: int,
               seconds: float, latency: str = "claim") -> pd.DataFrame:
    """The series the rule reads: per whole second from the start (a last second cut short is left out), the jobs
    that arrived (their insert's commit), the jobs claimed (the claim's return), the backlog at the second's end,
    and the p50, p99 and mean of claim_ms over the claims that returned in it: the claim statement's time, or with
    latency "pickup" each job's wait from its enqueue to its claim (columns pickup_p50_ms, pickup_p99_ms,
    pickup_mean_ms). Runs stored before the mean was kept have no mean column: the model leaves them out."""
    count = max(int(seconds), 0)
    arrival_slot = (np.asarray(arrival_ns) - start_ns) // 1_000_000_000
    arrival_slot = arrival_slot[(arrival_slot >= 0) & (arrival_slot < count)].astype(int)
    slot = (np.asarray(claim_ns) - start_ns) // 1_000_000_000
    inside = (slot >= 0) & (slot < count)
    slot, claim_ms = slot[inside].astype(int), np.asarray(claim_ms)[inside]
    arrived = np.bincount(arrival_slot, minlength=count)[:count]
    claimed = np.bincount(slot, minlength=count)[:count]
    p50, p99, mean = np.full(count, np.nan), np.full(count, np.nan), np.full(count, np.nan)
    if len(slot):
        grouped = pd.Series(claim_ms).groupby(slot)
        p50[grouped.median().index] = grouped.median().to_numpy()
        p99[grouped.quantile(0.99).index] = grouped.quantile(0.99).to_numpy()
        mean[grouped.mean().index] = grouped.mean().to_numpy()  # what the workers' capacity turns on (the model)
    return pd.DataFrame({"second": np.arange(count, dtype=float), "arrived": arrived, "claimed": claimed,
                         "backlog": np.cumsum(arrived) - np.cumsum(claimed), f"{latency}_p50_ms": p50,
                         f"{latency}_p99_ms": p99, f"{latency}_mean_ms": mean},
                        columns=[*SERIES_COLUMNS[:4], f"{latency}_p50_ms", f"{latency}_p99_ms", f"{latency}_mean_ms"])
