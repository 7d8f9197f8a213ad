"""A soak run's verdict, from its per-second series, by a rule stated before any run (harness.experiments.soak.measure).

The run has three windows: before the pin (after WARMUP_S), during it, and after its release. Per second, the
series holds the jobs that arrived, the jobs claimed, the backlog at the second's end (arrived minus claimed so
far) and the claim statement's p99 over that second (a job library's run: each job's pickup, its wait from enqueue
to claim, harness.experiments.soak.library; "claim p99" below reads "pickup p99" there). Then:

    keeps_up        claims during the pin are at least KEEP_UP_SHARE of the arrivals during it;
    p99_within      the per-second claim p99s during the pin are within the spread of those before it: their
                    median is no higher than the highest before the pin (like with like: a second's p99 against
                    a second's, and most of the pin's seconds, not one, must be beyond what was seen before);
    recovered_s     from the release to the end of the first second after it from which the backlog stays at its
                    before-pin level or below for HOLD_S, or to the run's end; None where it never did in the run.
                    The level is the highest backlog of any second before the pin, or BACKLOG_SLACK_S of arrivals
                    (the median second's before the pin) if that is more: jobs in flight between a worker's polls,
                    not a queue falling behind.

    survives        keeps_up and p99_within;
    degrades        not both, and the backlog recovered within RECOVER_WITHIN_S of the release;
    spirals         not both, and RECOVER_WITHIN_S after the release the backlog had not recovered: claims fell
                    behind arrivals and had not caught up by then (recovered_s, if later, says when they did);
    cut_off         not both, and the backlog had not recovered when the run ended, less than RECOVER_WITHIN_S
                    after the release: a lower bound, not a spiral;
    not_judged      the run could not carry its load: its arrivals fell behind their schedule (arrivals_behind),
                    or its workers or their backends waited for a CPU half their time (cpu_bound). What the rule
                    would have said is kept beside it (verdict_if_judged).

A verdict says what happened in one run. Whether the pin did it is read against the control, the same shape, claim
and load with nothing pinned (holder none), judged on the same windows: a table whose claims slow down as it grows
(the history shape) can degrade without a pin.
"""

from __future__ import annotations


import numpy as np
import pandas as pd

WARMUP_S = 5.0  # the first seconds of a run: workers connecting, the first autovacuum pass; not "before the pin"
KEEP_UP_SHARE = 0.95  # claims during the pin at least this share of its arrivals
RECOVER_WITHIN_S = 30.0  # the backlog back at its before-pin level within this of the release
HOLD_S = 5  # seconds the backlog stays back at its level for it to count as recovered (a dip is not a recovery)
# a backlog of up to this many seconds of arrivals is jobs in flight, not a queue behind: two of an idle worker's
# polls (harness.experiments.soak.processes.POLL_S, 0.05 s). Runs at 600 jobs/s that kept up ended their seconds
# with 4 to 18 jobs not yet claimed (0.03 s of arrivals); a queue that spiralled held 5,189. Where arrivals come in
# steps, a step's more (judge's step_s): pgmq's backlog, read at a random point of its 0.2 s steps of 103 jobs, was
# 0 to 91 with nothing held (2026-12-06); held, it was 96 in the release's second, then 29 to 87.
BACKLOG_SLACK_S = 0.1
ARRIVALS_BEHIND_SHARE = 0.05  # arrivals this share behind their schedule at any second: the run is marked

SURVIVES, DEGRADES, SPIRALS, CUT_OFF, NOT_JUDGED = "survives", "degrades", "spirals", "cut_off", "not_judged"
VERDICTS = (SURVIVES, DEGRADES, SPIRALS, CUT_OFF, NOT_JUDGED)

SERIES_COLUMNS = ("second", "arrived", "claimed", "backlog", "claim_p50_ms", "claim_p99_ms")


def rule_settings() -> dict:
    """The rule's constants, as a run's procedure records them."""
    return {"warmup_s": WARMUP_S, "keep_up_share": KEEP_UP_SHARE, "recover_within_s": RECOVER_WITHIN_S,
            "hold_s": HOLD_S, "backlog_slack_s": BACKLOG_SLACK_S, "arrivals_behind_share": ARRIVALS_BEHIND_SHARE}


def step_of(ended_s: float, calls: int) -> float:
    """How far apart arrivals sent in steps came, on average: the run's seconds over its enqueue calls (a job
    library's arrivals: harness.experiments.soak.library); 0 where no calls were counted, arrivals sent as each job
    falls due (the soak's own)."""
    return ended_s / calls if calls else 0.0


def windows(series: pd.DataFrame, pin_from: float, pin_to: float) -> dict[str, pd.DataFrame]:
    """The seconds before the pin (after WARMUP_S), during it, and after its release. A second belongs to the
    window its start falls in."""
    second = series["second"]
    return {"before": series[(second >= WARMUP_S) & (second < pin_from)],
            "during": series[(second >= pin_from) & (second < pin_to)],
            "after": series[second >= pin_to]}


def recovered_after(series: pd.DataFrame, pin_to: float, level: float) -> float | None:
    """Seconds from the release to the end of the first second after it from which the backlog stays at `level`
    or below for HOLD_S seconds (or to the run's end, where fewer are left)."""
    after = series[series["second"] >= pin_to].reset_index(drop=True)
    down = (after["backlog"] <= level).to_numpy()
    for i in range(len(after)):
        if down[i:i + HOLD_S].all():
            return float(after["second"].iloc[i] + 1 - pin_to)
    return None


def judge(series: pd.DataFrame, pin_from: float, pin_to: float, ended_s: float, arrivals_behind: bool = False,
          cpu_bound: bool | None = None, step_s: float = 0.0) -> dict:
    """The verdict and what it rests on; ended_s: when the run ended, from its start. step_s: how far apart the
    arrivals come where they come in steps (step_of); a step's jobs, queued at once, are in flight too."""
    parts = windows(series, pin_from, pin_to)
    before, during = parts["before"], parts["during"]
    arrived_during, claimed_during = int(during["arrived"].sum()), int(during["claimed"].sum())
    keeps_up = claimed_during >= KEEP_UP_SHARE * arrived_during
    latency = latency_of(series)
    spread = before[f"{latency}_p99_ms"].dropna()
    p99s_during = during[f"{latency}_p99_ms"].dropna()
    p99_during = float(p99s_during.median()) if len(p99s_during) else None
    # nothing to compare against (no claim before the pin, or none during it): not within, so not "survives"
    p99_within = bool(len(spread)) and p99_during is not None and p99_during <= float(spread.max())
    level = max(float(before["backlog"].max()), float(before["arrived"].median()) * (BACKLOG_SLACK_S + step_s)) \
        if len(before) else 0.0
    recovered_s = recovered_after(series, pin_to, level)
    watched_s = ended_s - pin_to
    if keeps_up and p99_within:
        verdict = SURVIVES
    elif recovered_s is not None and recovered_s <= RECOVER_WITHIN_S:
        verdict = DEGRADES
    elif watched_s >= RECOVER_WITHIN_S:
        verdict = SPIRALS
    else:
        verdict = CUT_OFF
    return {"verdict": NOT_JUDGED if arrivals_behind or cpu_bound else verdict, "verdict_if_judged": verdict,
            "keeps_up": keeps_up, "p99_within": p99_within,
            "arrived_during": arrived_during, "claimed_during": claimed_during,
            f"{latency}_p99_ms_before_max": float(spread.max()) if len(spread) else None,
            f"{latency}_p99_ms_during_median": p99_during, "backlog_level": level, "recovered_s": recovered_s,
            "watched_after_s": watched_s}


def arrivals_behind(series: pd.DataFrame, rate: float, lag_s: float = 0.0) -> bool:
    """Whether the arrivals fell more than ARRIVALS_BEHIND_SHARE behind their schedule at the end of any second
    (beyond one job: a schedule of a few jobs a second is always a job behind at some instant). lag_s: how far
    arrivals sent in steps trail their schedule by design (a job library's enqueue, called once per step:
    harness.experiments.soak.library), taken off the schedule first."""
    if not len(series):
        return False
    scheduled = np.maximum(series["second"] + 1 - lag_s, 0) * rate
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
    and the p50 and p99 of claim_ms over the claims that returned in it: the claim statement's time, or with
    latency "pickup" each job's wait from its enqueue to its claim (columns pickup_p50_ms, pickup_p99_ms)."""
    count = max(int(seconds), 0)
    arrival_slot = (np.asarray(arrival_ns) - start_ns) // 1_000_000_000
    arrival_slot = arrival_slot[(arrival_slot >= 0) & (arrival_slot < count)].astype(int)
    slot = (np.asarray(claim_ns) - start_ns) // 1_000_000_000
    inside = (slot >= 0) & (slot < count)
    slot, claim_ms = slot[inside].astype(int), np.asarray(claim_ms)[inside]
    arrived = np.bincount(arrival_slot, minlength=count)[:count]
    claimed = np.bincount(slot, minlength=count)[:count]
    p50 = np.full(count, np.nan)
    p99 = np.full(count, np.nan)
    if len(slot):
        grouped = pd.Series(claim_ms).groupby(slot)
        p50[grouped.median().index] = grouped.median().to_numpy()
        p99[grouped.quantile(0.99).index] = grouped.quantile(0.99).to_numpy()
    return pd.DataFrame({"second": np.arange(count, dtype=float), "arrived": arrived, "claimed": claimed,
                         "backlog": np.cumsum(arrived) - np.cumsum(claimed), f"{latency}_p50_ms": p50,
                         f"{latency}_p99_ms": p99},
                        columns=[*SERIES_COLUMNS[:4], f"{latency}_p50_ms", f"{latency}_p99_ms"])
