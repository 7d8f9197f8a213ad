"""A soak run's verdict, from its per-second series, by a rule stated before any run (harness.experiments.soak).

The run has three windows: before the pin (after WARMUP_S), during it, and after its release. Per second, the
series holds the jobs that arrived, the jobs claimed, the backlog at the second's end (arrived minus claimed so
far) and the claim statement's p99 over that second. Then:

    keeps_up        claims during the pin are at least KEEP_UP_SHARE of the arrivals during it;
    p99_within      the claim p99 over the whole pin is within the spread of the per-second p99s before it
                    (no higher than the highest of them);
    recovered_s     the first second after the release at which the backlog is back at its before-pin level (the
                    highest backlog of any second before the pin), counted from the release; None where it never
                    came back in the run.

    survives        keeps_up and p99_within;
    degrades        not both, and the backlog recovered within RECOVER_WITHIN_S of the release;
    spirals         not both, and the backlog had not recovered RECOVER_WITHIN_S after the release: claims fell
                    behind arrivals and did not catch up;
    cut_off         not both, and the backlog had not recovered when the run ended, less than RECOVER_WITHIN_S
                    after the release: a lower bound, not a spiral.

A run whose holder pinned nothing (holder none) is judged on the same windows: its control.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

WARMUP_S = 5.0  # the first seconds of a run: workers connecting, the first autovacuum pass; not "before the pin"
KEEP_UP_SHARE = 0.95  # claims during the pin at least this share of its arrivals
RECOVER_WITHIN_S = 30.0  # the backlog back at its before-pin level within this of the release
ARRIVALS_BEHIND_SHARE = 0.05  # arrivals this share behind their schedule at any second: the run is marked

SURVIVES, DEGRADES, SPIRALS, CUT_OFF = "survives", "degrades", "spirals", "cut_off"
VERDICTS = (SURVIVES, DEGRADES, SPIRALS, CUT_OFF)

SERIES_COLUMNS = ("second", "arrived", "claimed", "backlog", "claim_p50_ms", "claim_p99_ms")


def windows(series: pd.DataFrame, pin_from: float, pin_to: float) -> dict[str, pd.DataFrame]:
    """The seconds before the pin (after WARMUP_S), during it, and after its release. A second belongs to the
    window its start falls in."""
    second = series["second"]
    return {"before": series[(second >= WARMUP_S) & (second < pin_from)],
            "during": series[(second >= pin_from) & (second < pin_to)],
            "after": series[second >= pin_to]}


def recovered_after(series: pd.DataFrame, pin_to: float, level: float) -> float | None:
    """Seconds from the release to the end of the first second after it whose backlog is at `level` or below."""
    after = series[series["second"] >= pin_to]
    back = after[after["backlog"] <= level]
    if not len(back):
        return None
    return float(back["second"].iloc[0] + 1 - pin_to)


def judge(series: pd.DataFrame, claims_ms: dict[str, np.ndarray], pin_from: float, pin_to: float,
          ended_s: float) -> dict:
    """The verdict and what it rests on. claims_ms: each window's claim statement times (ms), pooled, for its p99;
    ended_s: when the run ended, from its start."""
    parts = windows(series, pin_from, pin_to)
    before, during = parts["before"], parts["during"]
    arrived_during, claimed_during = int(during["arrived"].sum()), int(during["claimed"].sum())
    keeps_up = claimed_during >= KEEP_UP_SHARE * arrived_during
    spread = before["claim_p99_ms"].dropna()
    p99_during = _p99(claims_ms.get("during"))
    p99_within = bool(len(spread)) and p99_during is not None and p99_during <= float(spread.max())
    level = float(before["backlog"].max()) if len(before) else 0.0
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
    return {"verdict": verdict, "keeps_up": keeps_up, "p99_within": p99_within,
            "arrived_during": arrived_during, "claimed_during": claimed_during,
            "claim_p99_ms_before_max": float(spread.max()) if len(spread) else None,
            "claim_p99_ms_during": p99_during, "backlog_level": level, "recovered_s": recovered_s,
            "watched_after_s": watched_s}


def arrivals_behind(series: pd.DataFrame, rate: float) -> bool:
    """Whether the arrivals fell more than ARRIVALS_BEHIND_SHARE behind their schedule at the end of any second
    (beyond one job: a schedule of a few jobs a second is always a job behind at some instant)."""
    if not len(series):
        return False
    scheduled = (series["second"] + 1) * rate
    arrived = series["arrived"].cumsum()
    return bool((arrived < scheduled * (1 - ARRIVALS_BEHIND_SHARE) - 1).any())


def _p99(values) -> float | None:
    if values is None or not len(values):
        return None
    value = float(np.percentile(values, 99))
    return None if math.isnan(value) else value


def per_second(arrival_ns: np.ndarray, claim_ns: np.ndarray, claim_ms: np.ndarray, start_ns: int,
               seconds: float) -> pd.DataFrame:
    """The series the rule reads: per whole second from the start (a last second cut short is left out), the jobs
    that arrived (their insert's commit), the jobs claimed (the claim's return), the backlog at the second's end,
    and the claim statement's p50 and p99 over the claims that returned in it."""
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
                         "backlog": np.cumsum(arrived) - np.cumsum(claimed), "claim_p50_ms": p50,
                         "claim_p99_ms": p99}, columns=list(SERIES_COLUMNS))
