"""The original's findings and claims beside ours: one value per finding, each verdict decided once, from stored runs.

A Finding holds the original's claim and figure (typed in below, in ORIGINAL,
and shown as the original's wherever it appears), our figure computed from the
runs, a verdict from a fixed vocabulary, a note computed from the same data, the
article section it belongs to, and the formatted numbers the prose needs.

The verdicts:

confirmed
    the claim holds in our runs, at about the original's size where it gives one;
confirmed_different_size
    the claim holds in direction, at a materially different size;
corrected
    our runs show the claim as stated is wrong in a way they pin down (a different
    scaling, another mechanism, the opposite per job);
not_reproduced
    what the original reports does not appear in our runs;
added
    not in the original: measured here;
not_measured
    this build has no run that measures it.

A note states a cause only where a measurement in this build shows it; anything
else is worded as a reading ("one reading is", "may").

    from_runs(runs) -> list[Finding]     # runs: report section -> run folders
    evaluate(Measurements(...))          # the same rules on figures already loaded (the tests build them)
    table(findings) -> DataFrame         # the comparison table
    python -m harness findings [--json]  # the same, from the runs stored for a params file
"""

from __future__ import annotations

import json
import html as html_text
import math
import re
import sys
import textwrap
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pandas as pd

from harness import config
from harness.article.analysis import (at_workers, by_round_trip, churn_point, over_repeats, plan_point,
                                      production_summary, race_summary, wait_share_table)
from harness.article.formats import (DASH, MISSING, RANGE, count, missing, ms, number, percent, rate, ratio,
                                     round_trip, spread as spread_text)
from harness.article.labels import CANNOT_LOSE
from harness.article.prose import join, times
from harness.article.reliability import fault_summary
from harness.errors import UserError
from harness.experiments import bench as bench_module, churn as churn_module, plans as plans_module, registry
from harness.experiments.plans import (AFTER_CLAIMS, AFTER_RACE, FIRST_SCAN, HELD_SNAPSHOT, STEADY, TABLE_STATE_NAMES,
                                       UNHELD_STATES, VACUUMED)
from harness.server.activity import CPU_BOUND_CLIENT_RUNNABLE_SHARE
from harness.stats import (censored_percentile, censored_waits_ns, jsonable, load_attempts, percentile_ratio_interval,
                           polls_met_interval, time_to_job_ns)
from harness.storage import read_json

# --------------------------------------------------------------------------- verdicts

CONFIRMED = "confirmed"
CONFIRMED_DIFFERENT_SIZE = "confirmed_different_size"
CORRECTED = "corrected"
NOT_REPRODUCED = "not_reproduced"
ADDED = "added"
NOT_MEASURED = "not_measured"
NOT_DISTINGUISHABLE = "not_distinguishable"  # the ranges over repeats overlap: more repeats could tell
VERDICTS = (CONFIRMED, CONFIRMED_DIFFERENT_SIZE, CORRECTED, NOT_REPRODUCED, NOT_DISTINGUISHABLE, ADDED, NOT_MEASURED)
VERDICT_LABELS = {CONFIRMED: "confirmed", CONFIRMED_DIFFERENT_SIZE: "confirmed, different size",
                  CORRECTED: "corrected", NOT_REPRODUCED: "not reproduced",
                  NOT_DISTINGUISHABLE: "not distinguishable at this spread", ADDED: "added",
                  NOT_MEASURED: "not measured"}

# Within this factor of the original's figure, a count that does not vary between repeats counts as the same size.
# Used only for such counts (F9's buffers, F12's HOT share of a fixed update sequence): the plans' five
# repetitions read the same buffers to within two (the stored `repetitions` table), so no margin can come from
# spread; what moves them from one machine to another is page layout (row width, version), and a quarter either
# way is the judgement stated here. Timed figures and race counts are compared on their spread instead.
COUNT_SAME_SIZE = 1.25


def same_size_count(ours: float, original: float) -> bool:
    if missing(ours) or missing(original) or not ours or not original:
        return ours == original == 0
    return 1 / COUNT_SAME_SIZE <= ours / original <= COUNT_SAME_SIZE


# --------------------------------------------------------------------------- the article's sections


def anchor(heading: str) -> str:
    """The id nbconvert gives a Markdown heading (spaces become hyphens), so a finding can link to its section."""
    return quote(heading.replace(" ", "-"), safe="?/:@!$&'()*+,;=")


WITHOUT_GUARD = anchor("What happens without the guard?")
MECHANISM = anchor("Why does one UPDATE work, mechanically?")
GUARD_COST = anchor("What does the guard cost?")
TIME_SPENT = anchor("Where the backends' time goes")
WAIT_FOR_A_JOB = anchor("The wait for a job")
SKIP_LOCKED = anchor("So should we switch to SKIP LOCKED?")
HALF_DRAINED = anchor("The half-drained queue")
PRODUCTION = anchor("Production context")
PRODUCTION_POLLING = anchor("At production polling rates")
TABLE_CHURN = anchor("What do all these status flips do to the table?")
HARNESS_CHECK = anchor("Is the harness measuring PostgreSQL, or itself?")
LIMITS = anchor("What doesn't this prove?")
CLAIM_NOT_COMPLETION = anchor("A claim is not a completion")
FAQ = anchor("FAQ")
OTHER_CLAIMS = anchor("Other ways to claim")
LATENCY = anchor("What does a network round trip change?")

# --------------------------------------------------------------------------- the original's figures


@dataclass(frozen=True)
class Claim:
    """What the original write-up claims, its figure as it gives it, and where our article discusses it."""

    claim: str
    figure: str
    section: str


NOT_IN_THE_ORIGINAL = "not measured in the original"

# The original write-up's claims and figures (not ours), from the study brief.
ORIGINAL = {
    "F1": Claim("naive hands out duplicates already at 2 workers",
                "9,763 of 10,000 jobs claimed more than once", WITHOUT_GUARD),
    "F2": Claim("naive's duplicates compound with concurrency", "rising with workers (a chart)", WITHOUT_GUARD),
    "F3": Claim("naive's \"throughput\" looks best because duplicate work counts as work",
                "about 6,000 claims/s, the highest of the three", GUARD_COST),
    "F4": Claim("guarded: zero duplicates at every concurrency", "0 in about 700,000 tight-loop attempts",
                WITHOUT_GUARD),
    "F5": Claim("guarded: lost races grow much faster than workers", "about 22 lost races per win at 100 workers",
                GUARD_COST),
    "F6": Claim("guarded slows down as workers are added (head-of-queue contention)",
                "falling with workers; 1,100+ claims/s and p99 under 2 ms at low concurrency", GUARD_COST),
    "F7": Claim("skip_locked: no duplicates, no wasted attempts, far higher throughput under contention",
                "about 20x guarded at high concurrency", SKIP_LOCKED),
    "F8": Claim("skip_locked pays in tail latency (rows stay locked until commit)", "a higher p99", SKIP_LOCKED),
    "F9": Claim("half drained, skip_locked's inner SELECT walks the consumed rows; a partial index fixes it",
                "without the index: 5,001 rows removed by filter, 10,057 shared buffers hit, 2.277 ms; "
                "with it: 14 buffers, 0.207 ms", HALF_DRAINED),
    "F10": Claim("the guarded plan shows the status re-check as a Filter on the locked row",
                 "Filter: (status = 'pending'::text) under the primary-key Index Scan, 0.027 ms", MECHANISM),
    "F11": Claim("page pruning reclaims dead versions without autovacuum",
                 "5,002 status updates on a 10k-row table left n_dead_tup = 0 once stats settled", TABLE_CHURN),
    "F12": Claim("HOT updates need free space on the page",
                 "default fillfactor: 0 of 1,000 updates HOT; fillfactor 70: 448 of 1,000", TABLE_CHURN),
    "F13": Claim("the partial index blocks HOT, because status is in its predicate",
                 "fillfactor 70 with the partial index: 0 of 1,000 HOT", TABLE_CHURN),
    "C1": Claim("at SERIALIZABLE the naive pair aborts (serialization failures) instead of producing duplicates",
                NOT_IN_THE_ORIGINAL, OTHER_CLAIMS),
    "C2": Claim("a SELECT then UPDATE in one transaction at READ COMMITTED is still racy",
                NOT_IN_THE_ORIGINAL, OTHER_CLAIMS),
    "C3": Claim("plain FOR UPDATE without SKIP LOCKED is correct but serialises claiming", NOT_IN_THE_ORIGINAL,
                OTHER_CLAIMS),
    "C4": Claim("guarded's p99 counts only wins; the time to get a job is fatter", NOT_IN_THE_ORIGINAL,
                WAIT_FOR_A_JOB),
    "C5": Claim("at production polling (a handful of runners, every 5 s, 5 jobs per poll) conflicts are rare",
                NOT_IN_THE_ORIGINAL, PRODUCTION_POLLING),
    "C6": Claim("real network latency widens naive's window and makes each lost guarded race dearer",
                NOT_IN_THE_ORIGINAL, LATENCY),
    "C7": Claim("a claim is not a completion: a runner that dies leaves its job running; a lease is missing",
                NOT_IN_THE_ORIGINAL, CLAIM_NOT_COMPLETION),
    "C8": Claim("picking the row with SKIP LOCKED inside the claim endpoint is a one-statement server change",
                NOT_IN_THE_ORIGINAL, PRODUCTION_POLLING),
    "C9": Claim("partial index, fillfactor and HOT rate form a trade-off; small volumes take no index and the "
                "default fillfactor, six-figure daily volumes the opposite corner", NOT_IN_THE_ORIGINAL,
                TABLE_CHURN),
}
# What we measure beyond the original.
ADDED_CLAIMS = {
    "A1": Claim("time to get a job, lost races included, per strategy", NOT_IN_THE_ORIGINAL, WAIT_FOR_A_JOB),
    "A2": Claim("where guarded's backends spend their time under contention: lock waits or waiting for a CPU",
                NOT_IN_THE_ORIGINAL, TIME_SPENT),
    "A3": Claim("the Python harness gets as many claims per second out of the server as pgbench",
                NOT_IN_THE_ORIGINAL, HARNESS_CHECK),
    "A4": Claim("claimed one at a time, updates are HOT even at the default fillfactor", NOT_IN_THE_ORIGINAL,
                TABLE_CHURN),
    "A5": Claim("a batch claimed with WHERE id IN (... LIMIT k FOR UPDATE SKIP LOCKED) can take more than k rows",
                "reported by users of job libraries, not by the original", OTHER_CLAIMS),
    "A6": Claim("an advisory-lock pick takes locks on jobs it does not return",
                "reported by users of job libraries, not by the original", OTHER_CLAIMS),
}
ORIGINAL_JOB_COUNT = 10_000
ORIGINAL_F1_DUPLICATE_JOBS = 9_763
ORIGINAL_F3_PEAK = 6_000
ORIGINAL_F4_ATTEMPTS = 700_000
ORIGINAL_F5_LOSSES_PER_WIN = 22
ORIGINAL_HIGH_WORKERS = 100
ORIGINAL_F6_MIN_RATE = 1_100  # "1,100+": a lower bound
ORIGINAL_F6_MAX_P99_MS = 2.0  # "sub-2 ms"
ORIGINAL_F7_RATIO = 20
ORIGINAL_F9_WITHOUT_BUFFERS = 10_057
ORIGINAL_F9_WITH_BUFFERS = 14
ORIGINAL_F9_TIME_RATIO = 2.277 / 0.207
ORIGINAL_F11_CLAIMS = 5_002
ORIGINAL_F12_LOW_FILLFACTOR = 70
ORIGINAL_F12_LOW_HOT_SHARE = 448 / 1_000
ORIGINAL_F12_UPDATES = 1_000

# Lost races per win exist only for guarded: naive's UPDATE always finds its row and skip_locked's picks a row
# no one else holds; neither has a lost outcome in a drain.


def lost_per_win(strategy: str, value, digits: int = 2) -> str:
    """Lost races per win as the tables show it: a dash for a strategy that cannot lose."""
    return DASH if strategy in CANNOT_LOSE else number(value, digits)


# --------------------------------------------------------------------------- a finding


@dataclass(frozen=True)
class Finding:
    """One of the original's findings or claims, or one we add, beside our figure and a verdict."""

    id: str  # F1..F13 (the original's findings), C1..C9 (its unmeasured claims), A1.. (ours)
    claim: str  # the original's claim, or what we add
    original: str  # the original's figure, as it gives it
    ours: str  # our figure, median [min-max] over repeats where the runs have repeats
    verdict: str  # one of VERDICTS
    note: str  # computed from the same data: what differs, and why where a measurement shows it
    section: str  # the anchor of the article section that discusses it
    values: dict = field(default_factory=dict)  # named, formatted figures for the prose's placeholders
    # the race sweep's worker counts the verdict was decided on (rules that read the sweep; CPU-bound points left out)
    worker_counts_used: tuple = ()
    # a finding with several parts: (part, verdict) each; `verdict` is then its first part's
    parts: tuple = ()

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"{self.id}: unknown verdict {self.verdict!r}")

    @property
    def verdict_label(self) -> str:
        if len(self.parts) > 1:
            return "; ".join(f"{part}: {VERDICT_LABELS[verdict]}" for part, verdict in self.parts)
        return VERDICT_LABELS[self.verdict]

    @property
    def statement(self) -> str:
        """The finding in its general form, for a paragraph that lacks one of its figures: verdict, figure, note."""
        said = ". ".join(part.rstrip(".") for part in (self.ours, self.note) if part)
        return f"**{self.id}, {self.verdict_label}.** {said}." if said else f"**{self.id}, {self.verdict_label}.**"

    def as_dict(self) -> dict:
        return {"id": self.id, "claim": self.claim, "original": self.original, "ours": self.ours,
                "verdict": self.verdict, "note": self.note, "section": self.section, "values": dict(self.values),
                "worker_counts_used": list(self.worker_counts_used),
                "parts": [{"part": part, "verdict": verdict} for part, verdict in self.parts]}


def _finding(finding_id: str, verdict: str, ours: str = "", notes=(), values: dict | None = None,
             used=(), parts=()) -> Finding:
    claim = ORIGINAL.get(finding_id) or ADDED_CLAIMS[finding_id]
    note = " ".join(n.strip() for n in ([notes] if isinstance(notes, str) else notes) if n and n.strip())
    for _, part_verdict in parts:
        if part_verdict not in VERDICTS:
            raise ValueError(f"{finding_id}: unknown verdict {part_verdict!r}")
    return Finding(finding_id, claim.claim, claim.figure, ours, verdict, note, claim.section, dict(values or {}),
                   tuple(int(w) for w in used), tuple(parts))


def _order(finding_id: str) -> tuple:
    return ("FCA".index(finding_id[0]), int(finding_id[1:]))


def by_id(findings: list[Finding]) -> dict[str, Finding]:
    return {f.id: f for f in findings}


def table(findings: list[Finding]) -> pd.DataFrame:
    """The comparison table: one row per finding, the original's columns labelled as the original's."""
    rows = [{"finding": f.id, "the original's claim": f.claim, "the original's figure": f.original,
             "this reproduction": f.ours, "verdict": f.verdict_label, "note": f.note}
            for f in sorted(findings, key=lambda f: _order(f.id))]
    return pd.DataFrame(rows, columns=["finding", "the original's claim", "the original's figure",
                                       "this reproduction", "verdict", "note"])


# The summary table's order: what the reproduction changes first, then what it cannot tell, then what holds.
SUMMARY_ORDER = ("corrected", "not_reproduced", "not_distinguishable", "confirmed_different_size", "confirmed",
                 "added", "not_measured")


def summary_table(findings: list[Finding]) -> pd.DataFrame:
    """The page's first table: one row per finding, corrections first, each linked to the section that states it
    in full (the finding cell is HTML: render with escape=False)."""

    rows = []
    for f in sorted(findings, key=lambda f: (SUMMARY_ORDER.index(f.verdict), _order(f.id))):
        rows.append({"finding": f'<a href="#{html_text.escape(f.section)}">{f.id}</a>',
                     "the original's claim": html_text.escape(f.claim),
                     "verdict here": html_text.escape(f.verdict_label)})
    return pd.DataFrame(rows, columns=["finding", "the original's claim", "verdict here"])


def verdict_counts(findings: list[Finding]) -> dict:
    """How many findings got each verdict: {verdict: count}."""
    counts = {verdict: 0 for verdict in VERDICTS}
    for f in findings:
        counts[f.verdict] += 1
    return counts


# --------------------------------------------------------------------------- helpers


def _spearman(x, y) -> float:
    x, y = pd.Series(list(x), dtype=float).rank(), pd.Series(list(y), dtype=float).rank()
    if len(x) < 3 or x.std() == 0 or y.std() == 0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1])


# A trend counts as rising (falling) when the rank correlation with the worker count is above 0.5 (below -0.5):
# most steps go that way, a noisy step or two allowed. With two points, the second must be above (below) the first.
TREND = 0.5


def trend(x, y) -> int:
    """+1 rising, -1 falling, 0 neither, over the points (x, y) in order of x."""
    points = sorted(zip(x, y))
    ys = [v for _, v in points]
    if len(ys) < 2:
        return 0
    if len(ys) == 2:
        return int(np.sign(ys[1] - ys[0]))
    rho = _spearman([p[0] for p in points], ys)
    return 1 if rho > TREND else -1 if rho < -TREND else 0


@dataclass(frozen=True)
class Figure:
    """One figure over repeats: median, min, max."""

    median: float
    low: float
    high: float

    def text(self, fmt=number) -> str:
        return spread_text(self.median, self.low, self.high, fmt)


NO_FIGURE = Figure(math.nan, math.nan, math.nan)


def separated(a: Figure, b: Figure) -> int:
    """+1 when every repeat of a lies above every repeat of b, -1 when below, 0 when the ranges overlap (or a
    figure is missing): the comparison a verdict may draw from repeats, never from medians alone."""
    if any(missing(v) for v in (a.low, a.high, b.low, b.high)):
        return 0
    return 1 if a.low > b.high else -1 if a.high < b.low else 0


def scaled(figure: Figure, factor: float) -> Figure:
    return Figure(figure.median * factor, figure.low * factor, figure.high * factor)


@dataclass(frozen=True)
class OriginalFigure:
    """A figure of the original as it gives it: the value and the step it was rounded to ("about 22": 1,
    "about 6,000": 1,000, "9,763": 1). Ours is the same size when its range over repeats meets value +- step/2:
    the original's own precision, not a factor of ours."""

    value: float
    step: float = 1.0

    def met_by(self, ours: Figure) -> bool:
        if missing(ours.low) or missing(ours.high):
            return False
        return ours.low <= self.value + self.step / 2 and ours.high >= self.value - self.step / 2


def direction_beyond_noise(points: list[tuple[int, Figure]]) -> int:
    """+1 rising, -1 falling, 0 not distinguishable, over (workers, figure) in order of workers: the medians must
    trend that way (trend) and the last point's range must clear the first's (separated)."""
    if len(points) < 2:
        return 0
    ordered = sorted(points, key=lambda p: p[0])
    sign = trend([w for w, _ in ordered], [f.median for _, f in ordered])
    ends = separated(ordered[-1][1], ordered[0][1])
    return sign if sign and sign == ends else 0


class Races:
    """The race sweep as the rules read it: per strategy and worker count, each figure over repeats."""

    def __init__(self, summary: pd.DataFrame):
        self.summary = summary if summary is not None else pd.DataFrame()
        self.points = over_repeats(self.summary) if len(self.summary) else pd.DataFrame(
            columns=["strategy", "worker_count"])
        self.job_count = int(self.summary["job_count"].iloc[0]) if len(self.summary) else 0

    def has(self, strategy: str) -> bool:
        return bool(len(self.points)) and (self.points["strategy"] == strategy).any()

    def workers(self, strategy: str, least: int = 1, cpu_free: bool = False) -> list[int]:
        """The strategy's worker counts from `least` up; cpu_free: only the points that were not CPU-bound."""
        rows = self.points[self.points["strategy"] == strategy]
        if cpu_free and "cpu_bound" in rows:
            rows = rows[~rows["cpu_bound"].fillna(False).astype(bool)]
        return sorted(int(w) for w in rows["worker_count"] if int(w) >= least)

    def cpu_bound_workers(self, strategy: str, least: int = 1) -> list[int]:
        """The strategy's worker counts whose races were CPU-bound (harness.server.activity.cpu_bound)."""
        free = set(self.workers(strategy, least, cpu_free=True))
        return [w for w in self.workers(strategy, least) if w not in free]

    def figure(self, strategy: str, worker_count: int, column: str) -> Figure:
        if column not in self.points:
            return NO_FIGURE
        return Figure(*(float(at_workers(self.points, strategy, worker_count, c))
                        for c in (column, f"{column}_min", f"{column}_max")))

    def runs(self, strategy: str) -> pd.DataFrame:
        return self.summary[self.summary["strategy"] == strategy] if len(self.summary) else self.summary


def _listing(pairs, fmt) -> str:
    """'0.98 at 2 workers, 2.2 at 4, 18.9 at 100'"""
    parts = [f"{fmt(value)} at {w}" for w, value in pairs]
    if parts:
        parts[0] += " workers" if pairs[0][0] != 1 else " worker"
    return ", ".join(parts)


def _counted(n: int, noun: str) -> str:
    """'1 worker', '4 workers', '3 races'"""
    return f"{count(n)} {noun}{'' if n == 1 else 's'}"


def _workers(n: int) -> str:
    return _counted(n, "worker")


def _not_measured(finding_id: str, why: str) -> Finding:
    return _finding(finding_id, NOT_MEASURED, "", why)


# The findings whose verdicts read contention or latency off the race sweep: decided on points that are not CPU-bound.
CPU_FREE_FINDINGS = ("F5", "F6", "F7", "F8", "C4", "A1")


def _worker_list(counts) -> str:
    counts = sorted(int(w) for w in counts)
    return ", ".join(str(w) for w in counts[:-1]) + (" and " if len(counts) > 1 else "") + str(counts[-1])


def cpu_bound_shown(bound) -> str:
    """For a finding whose figures include CPU-bound points (it does not judge contention there): which they are."""
    if not bound:
        return ""
    return f"{_worker_list(bound)} workers: CPU-bound here."


def cpu_bound_note(bound) -> str:
    """Which worker counts a verdict leaves out because they were CPU-bound, and why; '' when none."""
    if not bound:
        return ""
    return f"Not judged at {_worker_list(bound)} workers: CPU-bound here."


# --------------------------------------------------------------------------- facts for the prose


def race_facts(summary: pd.DataFrame, by_workers: pd.DataFrame) -> dict:
    """The race figures the article's prose uses, all from stored runs."""
    workers = sorted(int(w) for w in by_workers["worker_count"].unique())
    low, high = workers[0], workers[-1]
    contended = [w for w in workers if w > 1]
    two = 2 if 2 in workers else (contended[0] if contended else low)
    strategies = set(by_workers["strategy"].astype(str))
    f: dict = {"workers": workers, "low": low, "high": high, "two": two,
               "job_count": int(summary["job_count"].iloc[0]), "repeats": int(by_workers["repeats"].max()),
               "strategies": [s for s in ("naive", "guarded", "skip_locked") if s in strategies]}

    def get(strategy, worker_count, column):
        return at_workers(by_workers, strategy, worker_count, column)

    for strategy in f["strategies"]:
        rows = summary[summary["strategy"] == strategy]
        f[f"{strategy}_total_attempts"] = int(rows["attempts"].sum())
        f[f"{strategy}_total_duplicates"] = int(rows["duplicate_jobs"].sum())
        f[f"{strategy}_total_lost"] = int(rows["lost"].sum())
        f[f"{strategy}_total_wins"] = int(rows["wins"].sum())
        for label, w in (("low", low), ("two", two), ("high", high)):
            for column in ("duplicate_jobs", "extra_claims", "claims_per_second", "unique_jobs_per_second",
                           "losses_per_win", "p50_ms", "p99_ms", "attempts", "wins", "lost",
                           "attempts_per_second"):
                f[f"{strategy}_{column}_{label}"] = get(strategy, w, column)
        series = by_workers[by_workers["strategy"] == strategy].sort_values("worker_count")
        peak = series.loc[series["claims_per_second"].idxmax()] if len(series) else None
        f[f"{strategy}_peak_claims_per_second"] = float(peak["claims_per_second"]) if peak is not None else math.nan
        f[f"{strategy}_peak_workers"] = int(peak["worker_count"]) if peak is not None else None
        f[f"{strategy}_max_claims_per_job"] = int(rows["max_claims_per_job"].max()) if len(rows) else 0
    if "naive" in strategies:
        naive = by_workers[by_workers["strategy"] == "naive"].sort_values("worker_count")
        f["naive_duplicate_share_two"] = f["naive_duplicate_jobs_two"] / f["job_count"]
        f["naive_duplicate_share_high"] = f["naive_duplicate_jobs_high"] / f["job_count"]
        f["naive_extra_claims_rho"] = _spearman(naive["worker_count"], naive["extra_claims"])
        # at how many worker counts naive's counted rate beats both safe strategies
        wide = by_workers.pivot_table(index="worker_count", columns="strategy", values="claims_per_second",
                                      observed=True)
        f["naive_fastest_at"] = [int(w) for w, row in wide.iterrows() if row.idxmax() == "naive"]
    if {"guarded", "skip_locked"} <= strategies:
        f["skip_over_guarded_high"] = f["skip_locked_claims_per_second_high"] / f["guarded_claims_per_second_high"]
        f["skip_p99_over_guarded_high"] = f["skip_locked_p99_ms_high"] / f["guarded_p99_ms_high"]
    if "guarded" in strategies:
        guarded = by_workers[by_workers["strategy"] == "guarded"].sort_values("worker_count")
        f["guarded_throughput_rho"] = _spearman(guarded["worker_count"], guarded["claims_per_second"])
        f["guarded_slowdown"] = f["guarded_claims_per_second_low"] / f["guarded_claims_per_second_high"]
    return f


def wait_facts(quantiles: pd.DataFrame, worker_count: int) -> dict:
    """C4 at one worker count: p50/p99 of the winning statement and of the wait for a job."""
    def q(measure, percentile):
        rows = quantiles[(quantiles["worker_count"] == worker_count) & (quantiles["measure"] == measure)
                         & (quantiles["percentile"] == percentile)]
        return float(rows["ms"].iloc[0]) if len(rows) else math.nan

    f = {"worker_count": worker_count}
    for percentile in ("p50", "p90", "p99"):
        f[f"claim_{percentile}"] = q("winning claim latency", percentile)
        f[f"wait_{percentile}"] = q("time to get a job", percentile)
    f["p99_ratio"] = f["wait_p99"] / f["claim_p99"] if f["claim_p99"] else math.nan
    f["p50_ratio"] = f["wait_p50"] / f["claim_p50"] if f["claim_p50"] else math.nan
    return f


def fixed_fill_latency(bench_summary: pd.DataFrame | None, most_workers: int | None = None) -> dict | None:
    """Winning claims' p99 at a fixed fill (the bench's never-draining queue), at its most workers up to
    most_workers (the most the race sweep raced without being CPU-bound; None: no bound)."""
    if bench_summary is None or "harness_win_p99_us" not in bench_summary:
        return None
    counts = bench_summary["worker_count"]
    if most_workers is not None:
        counts = counts[counts <= most_workers]
    if not len(counts):
        return None
    top = bench_summary[bench_summary["worker_count"] == counts.max()].set_index("strategy")
    if not {"guarded", "skip_locked"} <= set(top.index):
        return None
    return {"worker_count": int(top["worker_count"].iloc[0]),
            "skip_locked_p99_ms": float(top.loc["skip_locked", "harness_win_p99_us"]) / 1e3,
            "guarded_p99_ms": float(top.loc["guarded", "harness_win_p99_us"]) / 1e3}


def filter_line(plan_text: str) -> str | None:
    """The first 'Filter:' line of a text plan, stripped."""
    for line in (plan_text or "").splitlines():
        if re.match(r"\s*Filter:", line):
            return line.strip()
    return None


def _plan_buffers(point: dict) -> float:
    return float(point["shared_hit_blocks"]) + float(point["shared_read_blocks"]) if point else math.nan


def plan_facts(points: pd.DataFrame, reference: dict, plan_texts: dict) -> dict:
    """F9, F10 at the reference point (the fill level nearest half drained), from a stored plans run.

    Keys '<without|with>_<state>_<buffers|removed|ms|index>' for every state in
    plans.TABLE_STATES; the ratios compare without and with the partial index
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


# --------------------------------------------------------------------------- the race rules (F1-F8, C4, A1, A2)

# F1 needs a share of the jobs, not one duplicate: the original's point is that two workers already collide on
# nearly every job (98%), that is, the race window is hit as a matter of course. Below one job in a hundred,
# duplicates would be a rare accident; from 1% up they are routine whatever their exact rate, and the size
# is then compared with the original's.
F1_ROUTINE_SHARE = 0.01


def f1_duplicates_at_two_workers(races: Races) -> Finding:
    contended = races.workers("naive", least=2)
    if not contended:
        return _not_measured("F1", "naive was not raced with more than one worker in this build.")
    workers = 2 if 2 in contended else contended[0]
    duplicates = races.figure("naive", workers, "duplicate_jobs")
    share = scaled(duplicates, 1 / races.job_count)
    values = {"workers": count(workers), "duplicate_jobs": duplicates.text(count), "job_count": count(races.job_count),
              "share": share.text(percent)}
    ours = (f"{duplicates.text(count)} of {count(races.job_count)} jobs ({share.text(percent)}) claimed more than "
            f"once at {workers} workers")
    notes = [] if workers == 2 else [f"Our sweep has no 2-worker point; {workers} workers is its fewest above one."]
    routine = separated(share, Figure(*[F1_ROUTINE_SHARE] * 3))
    if routine < 0:
        notes.append(f"Fewer than {percent(F1_ROUTINE_SHARE, 0)} of the jobs went out twice in every repeat: a rare "
                     "accident, not the original's routine duplicates.")
        return _finding("F1", NOT_REPRODUCED, ours, notes, values)
    if routine == 0:
        notes.append(f"The share of jobs handed out twice spans {percent(F1_ROUTINE_SHARE, 0)} over the repeats.")
        return _finding("F1", NOT_DISTINGUISHABLE, ours, notes, values)
    original = OriginalFigure(ORIGINAL_F1_DUPLICATE_JOBS / ORIGINAL_JOB_COUNT, 1 / ORIGINAL_JOB_COUNT)
    if workers == 2 and original.met_by(share):
        return _finding("F1", CONFIRMED, ours, notes, values)
    notes.append(f"Duplicates are routine, but for {share.text(percent)} of the jobs rather than the original's "
                 f"{percent(original.value)}; how often two read-then-write windows overlap may depend on how each "
                 "machine schedules the workers and their backends.")
    return _finding("F1", CONFIRMED_DIFFERENT_SIZE, ours, notes, values)


def f2_duplicates_compound(races: Races) -> Finding:
    contended = races.workers("naive", least=2)
    if len(contended) < 2:
        return _not_measured("F2", f"naive was raced at {len(contended)} worker count(s) above one; a trend "
                                   "needs two or more.")
    # claims beyond the first, per job: keeps growing after nearly every job has a duplicate
    per_job = [(w, scaled(races.figure("naive", w, "extra_claims"), 1 / races.job_count)) for w in contended]
    direction = direction_beyond_noise(per_job)
    ours = "claims beyond the first, per job: " + _listing(per_job, lambda f: f.text(lambda v: number(v, 2)))
    values = {"extra_per_job_low": number(per_job[0][1].median, 2), "extra_per_job_high": number(per_job[-1][1].median, 2),
              "workers_low": count(contended[0]), "workers_high": count(contended[-1])}
    shown = cpu_bound_shown(races.cpu_bound_workers("naive", least=2))
    if direction > 0:
        return _finding("F2", CONFIRMED, ours, shown, values)
    if direction == 0:
        return _finding("F2", NOT_DISTINGUISHABLE, ours,
                        [f"At {contended[-1]} workers the range over repeats still meets the one at {contended[0]}.",
                         shown], values)
    return _finding("F2", NOT_REPRODUCED, ours,
                    [f"Extra claims per job fall with workers over our {len(contended)} worker counts.", shown], values)


def f3_naive_looks_fastest(races: Races) -> Finding:
    others = [s for s in ("guarded", "skip_locked") if races.has(s)]
    if not races.has("naive") or not others:
        return _not_measured("F3", "naive and at least one safe strategy are needed; this build raced "
                                   f"{', '.join(s for s in ('naive', 'guarded', 'skip_locked') if races.has(s))}.")

    def peak(strategy, column="claims_per_second"):
        pairs = [(w, races.figure(strategy, w, column)) for w in races.workers(strategy)]
        return max(pairs, key=lambda p: p[1].median)

    naive_w, naive_peak = peak("naive")
    best_other = max(others, key=lambda s: peak(s)[1].median)
    other_w, other_peak = peak(best_other)
    naive_distinct = races.figure("naive", naive_w, "unique_jobs_per_second")
    fastest_at = [w for w in races.workers("naive")
                  if all(separated(races.figure("naive", w, "claims_per_second"),
                                   races.figure(s, w, "claims_per_second")) > 0
                         for s in others if w in races.workers(s))]
    values = {"naive_peak": naive_peak.text(rate), "naive_peak_workers": count(naive_w),
              "naive_distinct_peak": naive_distinct.text(rate), "other_peak": other_peak.text(rate),
              "other_strategy": best_other, "fastest_at": count(len(fastest_at)),
              "worker_counts": count(len(races.workers("naive")))}
    ours = (f"naive's peak {naive_peak.text(rate)} at {_workers(naive_w)}, of which {naive_distinct.text(rate)} "
            f"distinct jobs; {best_other}'s peak {other_peak.text(rate)} at {_workers(other_w)}; naive ahead of "
            f"both beyond the spread at {len(fastest_at)} of {len(races.workers('naive'))} worker counts")
    # two parts: naive's counted rate looks best, and its lead is duplicate work counted as work
    looks_best = {1: CONFIRMED, -1: NOT_REPRODUCED, 0: NOT_DISTINGUISHABLE}[separated(naive_peak, other_peak)]
    inflated = separated(naive_peak, naive_distinct)
    lead_without = separated(naive_distinct, other_peak)
    if lead_without > 0:
        because = CORRECTED  # naive leads even counting each job once
    else:
        because = {1: CONFIRMED, -1: NOT_REPRODUCED, 0: NOT_DISTINGUISHABLE}[inflated]
    parts = (("looks fastest", looks_best), ("because duplicates count", because))
    peaks_bound = set(races.cpu_bound_workers("naive")) | set(races.cpu_bound_workers(best_other))
    notes = [cpu_bound_shown([w for w in {naive_w, other_w} if w in peaks_bound])]
    if looks_best == NOT_REPRODUCED:
        notes.append(f"naive's peak is below {best_other}'s in every repeat.")
    elif looks_best == NOT_DISTINGUISHABLE:
        notes.append(f"naive's and {best_other}'s peaks overlap over the repeats.")
    if because == CORRECTED:
        notes.append("naive leads even counting each job once: its lead is not its duplicates.")
    elif because == CONFIRMED:
        notes.append(f"Counting each job once, naive delivered {naive_distinct.text(rate)} at its peak.")
    if looks_best != CONFIRMED:
        return _finding("F3", looks_best, ours, notes, values, parts=parts)
    if because != CONFIRMED:
        return _finding("F3", because, ours, notes, values, parts=parts)
    original = OriginalFigure(ORIGINAL_F3_PEAK, 1_000)
    if original.met_by(naive_peak):
        return _finding("F3", CONFIRMED, ours, notes, values, parts=parts)
    notes.append(f"naive's peak is {ratio(naive_peak.median / ORIGINAL_F3_PEAK)} the original's about "
                 f"{count(ORIGINAL_F3_PEAK)}: absolute rates are each machine's, which is why both write-ups read "
                 "them as shapes.")
    return _finding("F3", CONFIRMED_DIFFERENT_SIZE, ours, notes, values, parts=parts)


def f4_guarded_no_duplicates(races: Races) -> Finding:
    runs = races.runs("guarded")
    if not len(runs):
        return _not_measured("F4", "guarded was not raced in this build.")
    duplicates, attempts = int(runs["duplicate_jobs"].sum()), int(runs["attempts"].sum())
    values = {"duplicate_jobs": count(duplicates), "attempts": count(attempts), "runs": count(len(runs))}
    ours = f"{count(duplicates)} jobs claimed twice in {count(attempts)} attempts over {count(len(runs))} races"
    if duplicates:
        worst = runs.loc[runs["duplicate_jobs"].idxmax()]
        return _finding("F4", NOT_REPRODUCED, ours,
                        f"The audit shows guarded handing out {count(duplicates)} jobs twice, "
                        f"{count(worst['duplicate_jobs'])} of them in one race at {int(worst['worker_count'])} "
                        "workers.", values)
    fewer = attempts < ORIGINAL_F4_ATTEMPTS - 50_000  # "about 700,000": rounded to hundred thousands
    return _finding("F4", CONFIRMED, ours,
                    f"Zero in fewer attempts than the original's about {count(ORIGINAL_F4_ATTEMPTS)}." if fewer else "",
                    values)


# A guarded worker loses a given job at most once: after a loss its next read starts after the winner's
# commit, and the job is no longer pending. So a job costs at most N-1 lost races, one per rival.
ORIGINAL_F5_AT_TWO = OriginalFigure(1, 1)  # "about 1" lost race per win at 2 workers, read off the original's chart


def f5_lost_races_per_win(races: Races) -> Finding:
    """Against the N-1 ceiling: a guarded worker loses a given job at most once, so a win costs at most N-1 lost
    races. Lost races per win cannot grow "much faster than workers" for long, and the original's own figures
    (about 1 at 2 workers, about 22 at 100) grow slower than the rivals too; what both can show is that they rise,
    and how much of the ceiling they reach. Two parts: the rise (beyond the spread, on points that are not
    CPU-bound), and the size at 2 workers against the original's about 1."""
    contended = races.workers("guarded", least=2, cpu_free=True)
    bound = races.cpu_bound_workers("guarded", least=2)
    skipped = cpu_bound_note(bound)
    if len(contended) < 2:
        single = (f" At {contended[0]} workers: "
                  f"{races.figure('guarded', contended[0], 'losses_per_win').text(lambda v: number(v, 2))} lost "
                  "races per win." if contended else "")
        return _not_measured("F5", f"guarded was raced at {len(contended)} worker count(s) above one that were not "
                                   f"CPU-bound; growth needs two or more.{single} {skipped}")
    lost = [(w, races.figure("guarded", w, "losses_per_win")) for w in contended]
    of_ceiling = [(w, scaled(f, 1 / (w - 1))) for w, f in lost]
    ours = ("lost races per win: " + _listing(lost, lambda f: f.text(lambda v: number(v, 2)))
            + "; share of the N-1 ceiling: " + _listing(of_ceiling, lambda f: f.text(percent)))
    values = {"lost_per_win_low": lost[0][1].text(lambda v: number(v, 2)), "workers_low": count(lost[0][0]),
              "lost_per_win_high": lost[-1][1].text(lambda v: number(v, 2)), "workers_high": count(lost[-1][0]),
              "ceiling_share_low": of_ceiling[0][1].text(percent), "ceiling_share_high": of_ceiling[-1][1].text(percent)}
    rise = {1: CONFIRMED, -1: NOT_REPRODUCED, 0: NOT_DISTINGUISHABLE}[direction_beyond_noise(lost)]
    notes = [f"A worker loses a given job at most once, so N-1 lost races per win is the ceiling; ours reach "
             f"{of_ceiling[0][1].text(percent)} of it at {lost[0][0]} workers and {of_ceiling[-1][1].text(percent)} "
             f"at {lost[-1][0]}, and the original's own about {ORIGINAL_F5_AT_TWO.value:g} at 2 and about "
             f"{ORIGINAL_F5_LOSSES_PER_WIN} at {ORIGINAL_HIGH_WORKERS} reach 100% and "
             f"{percent(ORIGINAL_F5_LOSSES_PER_WIN / (ORIGINAL_HIGH_WORKERS - 1), 0)}: neither grows faster than "
             "the rivals."]
    if 2 in contended:
        size = CONFIRMED if ORIGINAL_F5_AT_TWO.met_by(races.figure("guarded", 2, "losses_per_win")) \
            else CONFIRMED_DIFFERENT_SIZE
    else:
        size = NOT_MEASURED
        notes.append("Our sweep has no 2-worker point to size them against.")
    notes.append(skipped)
    parts = (("rise with workers", rise), ("size at 2 workers", size))
    if rise != CONFIRMED:
        if rise == NOT_DISTINGUISHABLE:
            notes.insert(0, f"At {lost[-1][0]} workers the range over repeats still meets the one at {lost[0][0]}.")
        return _finding("F5", rise, ours, notes, values, contended, parts)
    verdict = CONFIRMED if size == CONFIRMED else CONFIRMED_DIFFERENT_SIZE
    return _finding("F5", verdict, ours, notes, values, contended, parts)


def bottleneck(lock_share: float, runnable_share: float | None) -> str:
    """What the backends waited on more, by measurement: "locks" (sampled row/transaction lock waits) or
    "cpu" (schedstat's runnable time); "unmeasured" without schedstat (a server on another host)."""
    if runnable_share is None or pd.isna(runnable_share) or lock_share is None or pd.isna(lock_share):
        return "unmeasured"
    return "locks" if lock_share > runnable_share else "cpu"


BOTTLENECK_PHRASES = {"cpu": "they waited longer for a CPU than on locks",
                      "locks": "they waited longer on locks than for a CPU",
                      "unmeasured": "their time waiting for a CPU is not measured (the server is not a process of this "
                                    "machine)"}

LOCK_WAIT = "row or transaction lock"  # analysis.WAIT_GROUPS' group of row and transaction lock waits


def _shares_at(shares: pd.DataFrame | None, strategy: str, worker_count: int) -> dict:
    if shares is None or not len(shares):
        return {}
    rows = shares[(shares["strategy"] == strategy) & (shares["worker_count"] == worker_count)]
    return rows.iloc[0].to_dict() if len(rows) else {}


def _time_spent_sentence(shares: pd.DataFrame | None, worker_count: int) -> str:
    """Where guarded's backends' time went at one worker count, stated as a cause only when measured."""
    at = _shares_at(shares, "guarded", worker_count)
    if not at:
        return ""
    lock, runnable = at.get(LOCK_WAIT), at.get("runnable_share")
    found = bottleneck(lock, runnable)
    if found == "unmeasured":
        return (f"At {worker_count} workers guarded's backends waited on row locks in {percent(lock)} of the samples; "
                f"{BOTTLENECK_PHRASES[found]}.")
    measured = (f"At {worker_count} workers guarded's backends waited on row or transaction locks in {percent(lock)} "
                f"of the samples and were runnable, waiting for a CPU, {percent(runnable)} of their time: "
                f"{BOTTLENECK_PHRASES[found]}")
    if found == "locks":
        return measured + ", so the slowdown is contention on the head of the queue."
    return (measured + ". One reading is that the contention shows up as lost attempts competing for the CPUs rather "
            "than as time blocked on a lock.")


def f6_guarded_slows_down(races: Races, shares: pd.DataFrame | None = None) -> Finding:
    """Three parts: the rate falls with workers (beyond the spread, on points that are not CPU-bound); at one
    worker it is 1,100 claims/s or more; and its p99 is under 2 ms."""
    workers = races.workers("guarded", cpu_free=True)
    skipped = cpu_bound_note(races.cpu_bound_workers("guarded"))
    if len(workers) < 2:
        return _not_measured("F6", f"guarded was raced at {len(workers)} worker count(s) that were not CPU-bound; "
                                   f"a trend needs two or more. {skipped}")
    rates = [(w, races.figure("guarded", w, "claims_per_second")) for w in workers]
    falls = sum(b.median < a.median for (_, a), (_, b) in zip(rates, rates[1:]))
    low = workers[0]
    low_rate, low_p99 = rates[0][1], races.figure("guarded", low, "p99_ms")
    ours = (f"{_listing(rates, lambda f: f.text(rate))}; p99 {low_p99.text(ms)} at {_workers(low)}; falling at "
            f"{falls} of {len(rates) - 1} steps")
    values = {"rate_low": low_rate.text(rate), "p99_low": low_p99.text(ms), "workers_low": count(low),
              "rate_high": rates[-1][1].text(rate), "workers_high": count(workers[-1]),
              "slowdown": ratio(low_rate.median / rates[-1][1].median), "falls": count(falls),
              "steps": count(len(rates) - 1)}
    fall = {-1: CONFIRMED, 1: NOT_REPRODUCED, 0: NOT_DISTINGUISHABLE}[direction_beyond_noise(rates)]
    # the original's low-concurrency figures are bounds: "1,100+" claims/s and "sub-2 ms" p99
    rate_part = {1: CONFIRMED, -1: CONFIRMED_DIFFERENT_SIZE, 0: NOT_DISTINGUISHABLE}[
        separated(low_rate, Figure(*[ORIGINAL_F6_MIN_RATE - 0.5] * 3))]
    p99_part = {-1: CONFIRMED, 1: CONFIRMED_DIFFERENT_SIZE, 0: NOT_DISTINGUISHABLE}[
        separated(low_p99, Figure(*[ORIGINAL_F6_MAX_P99_MS] * 3))]
    if low != 1:
        rate_part = p99_part = NOT_MEASURED
    parts = (("falls with workers", fall), ("1,100+ claims/s at 1 worker", rate_part),
             ("p99 under 2 ms at 1 worker", p99_part))
    notes = []
    if fall == NOT_REPRODUCED:
        notes.append("guarded's rate rises with workers in our runs, beyond the spread.")
    elif fall == NOT_DISTINGUISHABLE:
        notes.append(f"At {workers[-1]} workers the rate's range still meets the one at {low}, or the steps "
                     "between go both ways.")
    if low != 1:
        notes.append(f"Our fewest workers is {low}, not one.")
    if rate_part == CONFIRMED_DIFFERENT_SIZE:
        notes.append(f"At {_workers(low)} our rate is below the original's {count(ORIGINAL_F6_MIN_RATE)}+ in every "
                     "repeat.")
    if p99_part == CONFIRMED_DIFFERENT_SIZE:
        note = f"Our p99 at {_workers(low)} is {low_p99.text(ms)}, not under {ms(ORIGINAL_F6_MAX_P99_MS)}."
        runnable = _shares_at(shares, "guarded", low).get("runnable_share")
        if not missing(runnable):
            note += (f" Its backend was runnable, waiting for a CPU, {percent(runnable)} of the time; one reading is "
                     "that the slowest claims include such waits.")
        notes.append(note)
    notes.append(_time_spent_sentence(shares, workers[-1]))
    notes.append(skipped)
    if fall != CONFIRMED:
        return _finding("F6", fall, ours, notes, values, workers, parts)
    same = rate_part == CONFIRMED and p99_part == CONFIRMED
    return _finding("F6", CONFIRMED if same else CONFIRMED_DIFFERENT_SIZE, ours, notes, values, workers, parts)


def empty_while_jobs_remained(attempts: pd.DataFrame) -> int:
    """Attempts that came back without a job although a job was still claimed after them.

    A drain's skip_locked worker stops at its first empty answer; an empty answer is
    wasted (and the worker lost) when a later attempt, started after it ended, still
    won a job: that job was pending and unlocked while the empty attempt looked.
    """
    won = attempts["outcome"] == "won"
    if not won.any():
        return 0
    last_win_start = attempts.loc[won, "start_ns"].max()
    empty = attempts[attempts["outcome"] == "empty"]
    return int((empty["start_ns"] + empty["latency_ns"] < last_win_start).sum())


def _paired_ratio(races: Races, numerator: str, denominator: str, worker_count: int, column: str) -> Figure:
    """numerator/denominator of one figure per repeat (repeat k with repeat k), over repeats."""
    def by_repeat(strategy):
        runs = races.runs(strategy)
        runs = runs[runs["worker_count"] == worker_count]
        return runs.set_index("repeat")[column].astype(float)

    ratios = (by_repeat(numerator) / by_repeat(denominator)).dropna()
    if not len(ratios):
        return NO_FIGURE
    return Figure(float(ratios.median()), float(ratios.min()), float(ratios.max()))


def f7_skip_locked_no_waste(races: Races) -> Finding:
    """Three parts: no duplicates (the audit), no wasted attempts, and a higher rate than guarded under contention
    (per repeat, at the most workers both raced without being CPU-bound)."""
    runs = races.runs("skip_locked")
    if not len(runs):
        return _not_measured("F7", "skip_locked was not raced in this build.")
    duplicates, attempts = int(runs["duplicate_jobs"].sum()), int(runs["attempts"].sum())
    lost = int(runs["lost"].sum()) + int(runs["errors"].sum() if "errors" in runs else 0)
    early = (int(runs["empty_while_jobs_remained"].sum()) if "empty_while_jobs_remained" in runs else None)
    wasted = lost + (early or 0)
    both = [w for w in races.workers("skip_locked", least=2, cpu_free=True)
            if w in races.workers("guarded", cpu_free=True)]
    skipped = cpu_bound_note(sorted(set(races.cpu_bound_workers("skip_locked", least=2))
                                    | set(races.cpu_bound_workers("guarded", least=2))))
    top = both[-1] if both else None
    speedup = _paired_ratio(races, "skip_locked", "guarded", top, "claims_per_second") if top else NO_FIGURE
    values = {"duplicate_jobs": count(duplicates), "attempts": count(attempts), "wasted": count(wasted),
              "empty_while_jobs_remained": count(early), "speedup": speedup.text(ratio),
              "workers": count(top) if top else DASH}
    ours = (f"{count(duplicates)} jobs claimed twice; {count(wasted)} of {count(attempts)} attempts wasted "
            f"({count(lost)} lost or failed, {count(early)} came back empty while jobs remained)"
            + (f"; {speedup.text(ratio)} guarded's claims/s at {top} workers" if top else ""))
    used = [top] if top else []
    no_duplicates = NOT_REPRODUCED if duplicates else CONFIRMED
    no_waste = CORRECTED if wasted else CONFIRMED
    if top is None:
        faster = NOT_MEASURED
    else:
        faster = {1: CONFIRMED, -1: NOT_REPRODUCED, 0: NOT_DISTINGUISHABLE}[separated(speedup, Figure(1.0, 1.0, 1.0))]
    parts = (("no duplicates", no_duplicates), ("no wasted attempts", no_waste), ("faster under contention", faster))
    notes = []
    if duplicates:
        notes.append(f"The audit shows skip_locked handing out {count(duplicates)} jobs twice.")
    if wasted:
        kinds = [f"{count(early)} came back empty while jobs remained" if early else "",
                 f"{count(lost)} lost or failed" if lost else ""]
        notes.append(f"Some attempts were wasted: {' and '.join(k for k in kinds if k)}.")
        if early:
            notes.append("A drain's worker stops at its first empty answer, so each early one also took a worker out "
                         "of the race.")
    if early is None:
        notes.append("Empty answers were not checked against the jobs that remained; only lost and failed attempts "
                     "count.")
    if faster == NOT_MEASURED:
        notes.append("No worker count above one that was not CPU-bound has both skip_locked and guarded, so the rate "
                     "under contention is not compared.")
    elif faster == NOT_REPRODUCED:
        notes.append(f"skip_locked is slower than guarded at {top} workers in every repeat.")
    elif faster == NOT_DISTINGUISHABLE:
        notes.append(f"skip_locked's rate over guarded's spans 1x at {top} workers.")
    notes.append(skipped)
    for part_verdict in (no_duplicates, no_waste, faster):
        if part_verdict != CONFIRMED:
            return _finding("F7", part_verdict, ours, notes, values, used, parts)
    original = OriginalFigure(ORIGINAL_F7_RATIO, 10)  # "about 20x": rounded to tens
    if top == ORIGINAL_HIGH_WORKERS and original.met_by(speedup):
        return _finding("F7", CONFIRMED, ours, notes, values, used, parts)
    notes.insert(0, f"{speedup.text(ratio)} guarded's rate at {top} workers, not about {ORIGINAL_F7_RATIO}x at the "
                    "original's high concurrency.")
    return _finding("F7", CONFIRMED_DIFFERENT_SIZE, ours, notes, values, used, parts)


def job_wait_figures(job_waits: pd.DataFrame | None, strategy: str, worker_count: int, column: str) -> Figure:
    """A figure of attempt_figures() over repeats: median [min-max]."""
    if job_waits is None or not len(job_waits):
        return NO_FIGURE
    rows = job_waits[(job_waits["strategy"] == strategy) & (job_waits["worker_count"] == worker_count)][column]
    rows = rows.dropna()
    return Figure(float(rows.median()), float(rows.min()), float(rows.max())) if len(rows) else NO_FIGURE


def _waits_workers(job_waits: pd.DataFrame | None, strategies, least: int = 2, cpu_free: bool = True) -> list[int]:
    """The worker counts every strategy's waits were measured at, from `least` up; cpu_free: only those none of
    whose races was CPU-bound."""
    if job_waits is None or not len(job_waits):
        return []
    sets = [set(job_waits.loc[job_waits["strategy"] == s, "worker_count"].astype(int)) for s in strategies]
    common = set.intersection(*sets)
    if cpu_free and "cpu_bound" in job_waits:
        picked = job_waits[job_waits["strategy"].isin(list(strategies))]
        common -= set(picked.loc[picked["cpu_bound"].fillna(False).astype(bool), "worker_count"].astype(int))
    return sorted(w for w in common if w >= least)


def _waits_cpu_bound(job_waits: pd.DataFrame | None, strategies, least: int = 2) -> list[int]:
    """The worker counts _waits_workers leaves out because a race there was CPU-bound."""
    every = set(_waits_workers(job_waits, strategies, least, cpu_free=False))
    return sorted(every - set(_waits_workers(job_waits, strategies, least)))


def f8_tail_latency(races: Races, job_waits: pd.DataFrame | None = None, fixed_fill: dict | None = None) -> Finding:
    """Per statement (a winning claim's p99: at a fixed fill where the bench measured it, else over whole
    drains), the original's claim; and per job (the time to get a job, lost races included), an added part."""
    both = [w for w in races.workers("skip_locked", least=2, cpu_free=True)
            if w in races.workers("guarded", cpu_free=True)]
    skipped = cpu_bound_note(sorted(set(races.cpu_bound_workers("skip_locked", least=2))
                                    | set(races.cpu_bound_workers("guarded", least=2))))
    if fixed_fill is not None:
        statement_w = fixed_fill["worker_count"]
        skip_stmt = Figure(*[fixed_fill["skip_locked_p99_ms"]] * 3)
        guarded_stmt = Figure(*[fixed_fill["guarded_p99_ms"]] * 3)
        where = f"at a fixed fill (the bench's queue), {statement_w} workers"
    elif both:
        statement_w = both[-1]
        skip_stmt = races.figure("skip_locked", statement_w, "p99_ms")
        guarded_stmt = races.figure("guarded", statement_w, "p99_ms")
        where = f"over whole drains, {statement_w} workers"
    else:
        return _not_measured("F8", f"No worker count above one that was not CPU-bound has both skip_locked and "
                                   f"guarded. {skipped}")
    job_w = _waits_workers(job_waits, ("skip_locked", "guarded"))
    per_job = None
    if job_w:
        w = job_w[-1]
        per_job = (w, job_wait_figures(job_waits, "skip_locked", w, "wait_p99_ms"),
                   job_wait_figures(job_waits, "guarded", w, "wait_p99_ms"))
    ours = f"p99 of a winning claim {where}: skip_locked {skip_stmt.text(ms)}, guarded {guarded_stmt.text(ms)}"
    values = {"statement_skip_p99": skip_stmt.text(ms), "statement_guarded_p99": guarded_stmt.text(ms),
              "statement_workers": count(statement_w), "statement_where": where}
    statement = {1: CONFIRMED, -1: NOT_REPRODUCED, 0: NOT_DISTINGUISHABLE}[separated(skip_stmt, guarded_stmt)]
    notes = {CONFIRMED: "skip_locked's winning claims have the higher p99, as in the original, in every repeat.",
             NOT_REPRODUCED: "skip_locked's winning claims have the lower p99 in every repeat.",
             NOT_DISTINGUISHABLE: "The two p99s of a winning claim overlap over the repeats."}
    notes = [notes[statement]]
    job_part = NOT_MEASURED
    if per_job:
        w, skip_job, guarded_job = per_job
        ours += (f"; p99 of the time to get a job over whole drains, {w} workers: skip_locked {skip_job.text(ms)}, "
                 f"guarded {guarded_job.text(ms)}")
        values.update(job_skip_p99=skip_job.text(ms), job_guarded_p99=guarded_job.text(ms), job_workers=count(w),
                      job_ratio=ratio(guarded_job.median / skip_job.median))
        order = separated(skip_job, guarded_job)
        job_part = ADDED
        notes.append(f"Per job, the time to get one (lost races included) at {w} workers has p99 {skip_job.text(ms)} "
                     f"for skip_locked against {guarded_job.text(ms)} for guarded: "
                     + {1: "higher for skip_locked in every repeat.",
                        -1: "lower for skip_locked in every repeat, since a guarded worker's wait includes its lost "
                            "races.",
                        0: "the two overlap over the repeats."}[order])
    else:
        notes.append("The time to get a job is not measured for both strategies in this build.")
    notes.append(skipped)
    used = sorted({statement_w} | ({per_job[0]} if per_job else set())) if fixed_fill is None else \
        ([per_job[0]] if per_job else [])
    parts = (("per winning statement", statement), ("per job", job_part))
    return _finding("F8", statement, ours, notes, values, used, parts)


C4_FATTER = 2.0


def c4_wait_for_a_job(job_waits: pd.DataFrame | None) -> Finding:
    contended = _waits_workers(job_waits, ("guarded",))
    skipped = cpu_bound_note(_waits_cpu_bound(job_waits, ("guarded",)))
    if not contended:
        return _not_measured("C4", f"guarded was not raced with more than one worker without being CPU-bound in this "
                                   f"build. {skipped}")
    w = contended[-1]
    wait, claim = (job_wait_figures(job_waits, "guarded", w, c) for c in ("wait_p99_ms", "claim_p99_ms"))
    fatter = wait.median / claim.median
    values = {"workers": count(w), "wait_p99": wait.text(ms), "claim_p99": claim.text(ms), "ratio": ratio(fatter),
              "wait_p50": job_wait_figures(job_waits, "guarded", w, "wait_p50_ms").text(ms),
              "claim_p50": job_wait_figures(job_waits, "guarded", w, "claim_p50_ms").text(ms)}
    ours = (f"guarded at {w} workers: p99 of the time to get a job {wait.text(ms)}, of a winning claim "
            f"{claim.text(ms)} ({ratio(fatter)})")
    # every repeat's wait against C4_FATTER times every repeat's winning claim
    beyond = separated(wait, scaled(claim, C4_FATTER))
    if beyond > 0:
        return _finding("C4", CONFIRMED, ours, skipped, values, [w])
    if beyond == 0:
        return _finding("C4", NOT_DISTINGUISHABLE, ours,
                        [f"Over the repeats the wait's p99 spans {number(C4_FATTER, 0)}x the winning claim's.",
                         skipped], values, [w])
    return _finding("C4", NOT_REPRODUCED, ours,
                    [f"The wait's p99 is within {number(C4_FATTER, 0)}x the winning claim's in every repeat: lost "
                     f"races add little to the tail at {w} workers.", skipped], values, [w])


def a1_time_to_get_a_job(job_waits: pd.DataFrame | None) -> Finding:
    contended = _waits_workers(job_waits, ("guarded", "skip_locked"))
    skipped = cpu_bound_note(_waits_cpu_bound(job_waits, ("guarded", "skip_locked")))
    if not contended:
        return _not_measured("A1", f"No worker count above one that was not CPU-bound has both guarded and "
                                   f"skip_locked. {skipped}")
    pairs = [(w, job_wait_figures(job_waits, "guarded", w, "wait_p99_ms"),
              job_wait_figures(job_waits, "skip_locked", w, "wait_p99_ms")) for w in contended]
    ours = "p99 of the time to get a job, guarded vs skip_locked: " + ", ".join(
        f"{g.text(ms)} vs {s.text(ms)} at {w} workers" for w, g, s in pairs)
    w, guarded, skip = pairs[-1]
    values = {"workers": count(w), "guarded_p99": guarded.text(ms), "skip_locked_p99": skip.text(ms),
              "ratio": ratio(guarded.median / skip.median)}
    order = {-1: "lower than guarded's in every repeat", 1: "higher than guarded's in every repeat",
             0: "not distinguishable from guarded's at this spread"}[separated(skip, guarded)]
    return _finding("A1", ADDED, ours,
                    [f"At {w} workers skip_locked's p99 wait for a job is {order} "
                     f"({ratio(guarded.median / skip.median)} guarded's over skip_locked's, medians).", skipped],
                    values, contended)


def a2_where_the_time_goes(races: Races, shares: pd.DataFrame | None) -> Finding:
    contended = races.workers("guarded", least=2)
    at = _shares_at(shares, "guarded", contended[-1]) if contended else {}
    if not at:
        return _not_measured("A2", "No wait events were sampled for guarded above one worker in this build.")
    w = contended[-1]
    lock, runnable, running = at.get(LOCK_WAIT), at.get("runnable_share"), at.get("running_share")
    ours = (f"guarded at {w} workers: row or transaction lock waits in {percent(lock)} of the backends' samples; "
            f"backends on a CPU {percent(running)} and runnable {percent(runnable)} of their time")
    values = {"workers": count(w), "lock_share": percent(lock), "runnable_share": percent(runnable),
              "running_share": percent(running), "bottleneck": bottleneck(lock, runnable)}
    shown = cpu_bound_shown([w] if w in races.cpu_bound_workers("guarded") else [])
    return _finding("A2", ADDED, ours, [_time_spent_sentence(shares, w), shown], values)

# --------------------------------------------------------------------------- the plan rules (F9, F10)

# The partial index fixes the walk when it cuts the buffers a claim touches at least five-fold: the original's
# cut is about 700-fold, and repetitions of one point differ by a few buffers.
F9_INDEX_HELPS = 5


def f9_half_drained_walk(plans: dict | None) -> Finding:
    """Two parts. After a bulk UPDATE of the prefix (the original's likely method): decided on the first scan (no
    other snapshot) and after VACUUM, with and without the index. After a drain by the claims themselves, one at a
    time: whether the claim still walks consumed rows there and the index still cuts its buffers."""

    if not plans:
        return _not_measured("F9", "No plans run is stored for this build.")

    def buffers(label, state):
        return plans.get(f"{label}_{state}_buffers", math.nan)

    needed = [buffers(label, state) for label in ("without", "with") for state in (FIRST_SCAN, VACUUMED)]
    if any(missing(v) for v in needed):
        return _not_measured("F9", "The skip_locked claim was not explained both right after the drain and after "
                                   "VACUUM, with and without the index.")
    jobs, fraction = int(plans["job_count"]), float(plans["consumed_fraction"])
    removed = plans.get(f"without_{FIRST_SCAN}_removed", math.nan)
    cut = {state: buffers("without", state) / buffers("with", state) for state in (FIRST_SCAN, STEADY, VACUUMED)}
    labels = {FIRST_SCAN: "right after a bulk UPDATE of the prefix (first scan)", STEADY: "on the later scans",
              VACUUMED: "after VACUUM", AFTER_CLAIMS: "after a drain by claims one at a time",
              AFTER_RACE: "after a drain by a race"}

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
        return _finding("F9", verdict, ours, notes, values,
                        parts=(("after a bulk UPDATE", verdict), ("after a drain by claims", by_claims),
                               ("after a drain by a race", by_race)))
    ours = (f"{percent(fraction, 0)} of {count(jobs)} jobs consumed; without the index {count(removed)} rows removed "
            f"by filter; buffers without / with the index: "
            + "; ".join(f"{labels[s]} {count(buffers('without', s))} / {count(buffers('with', s))} ({ratio(cut[s])})"
                        for s in (FIRST_SCAN, STEADY, VACUUMED, AFTER_CLAIMS, AFTER_RACE) if not missing(cut[s]))
            + f"; first scan {ms(plans.get(f'without_{FIRST_SCAN}_ms'))} without, "
              f"{ms(plans.get(f'with_{FIRST_SCAN}_ms'))} with")
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
        context.append("Drained one claim at a time, the claim read fewer buffers than after the bulk UPDATE; one "
                       "reading, not measured here, is that such claims prune the pages and mark dead the index "
                       "entries they step over as they go.")
    time_ratio = plans.get(f"without_{FIRST_SCAN}_ms", math.nan) / plans.get(f"with_{FIRST_SCAN}_ms", math.nan)
    if not missing(time_ratio):
        context.append(f"The time ratio ({ratio(time_ratio)} on the first scan, the original's "
                       f"{ratio(ORIGINAL_F9_TIME_RATIO)}) is each machine's; the buffer counts, which do not depend on "
                       "its speed, carry the finding.")
    if missing(removed) or removed == 0:
        return _f9(NOT_REPRODUCED, ours, ["Without the index the claim removed no rows by filter: it "
                                                     "did not walk the consumed rows."] + context, values)
    helps_now, helps_vacuumed = cut[FIRST_SCAN] >= F9_INDEX_HELPS, cut[VACUUMED] >= F9_INDEX_HELPS
    if not helps_now and not helps_vacuumed:
        return _f9(NOT_REPRODUCED, ours, [f"The index cuts the buffers less than {F9_INDEX_HELPS}-fold, "
                                                     "right after the drain and after VACUUM."] + context, values)
    if not helps_now:
        return _f9(CORRECTED, ours,
                        [f"The index cuts the buffers {ratio(cut[VACUUMED])} after VACUUM but only "
                         f"{ratio(cut[FIRST_SCAN])} right after the drain: the fix needs VACUUM. One reading is that "
                         "the partial index keeps its entries for the consumed rows until VACUUM removes them."]
                        + context, values)
    if not helps_vacuumed:
        context.insert(0, f"After VACUUM the claim touches {count(buffers('without', VACUUMED))} buffers without the "
                          f"index and {count(buffers('with', VACUUMED))} with it: VACUUM alone saves most of what the "
                          "index saves right after the drain.")
    if jobs != ORIGINAL_JOB_COUNT:
        return _f9(CONFIRMED_DIFFERENT_SIZE, ours,
                        [f"Our reference table holds {count(jobs)} jobs, not {count(ORIGINAL_JOB_COUNT)}, so only the "
                         "cut (buffers without the index over buffers with it) compares with the original's."]
                        + context, values)
    if (same_size_count(buffers("without", FIRST_SCAN), ORIGINAL_F9_WITHOUT_BUFFERS)
            and same_size_count(buffers("with", FIRST_SCAN), ORIGINAL_F9_WITH_BUFFERS)):
        return _f9(CONFIRMED, ours, context, values)

    def nearest(label, original):
        state = min((FIRST_SCAN, STEADY, VACUUMED), key=lambda s: abs(math.log(max(buffers(label, s), 1) / original)))
        return f"its {count(original)} {label} the index are nearest ours {labels[state]} ({count(buffers(label, state))})"

    return _f9(CONFIRMED_DIFFERENT_SIZE, ours,
                    [f"Right after the drain our buffer counts are not the original's: "
                     f"{nearest('without', ORIGINAL_F9_WITHOUT_BUFFERS)}, {nearest('with', ORIGINAL_F9_WITH_BUFFERS)}."]
                    + context, values)


def f10_guarded_filter(plans: dict | None) -> Finding:
    """Read from the guarded claim's plan: its Filter line and the node it sits under."""
    if not plans or not plans.get("guarded_node"):
        return _not_measured("F10", "The guarded claim was not explained in this build.")
    node, index, line = plans["guarded_node"], plans.get("guarded_index"), plans.get("guarded_filter_line")
    under = f"{node} using {index}" if index else node
    ours = f"{line or 'no Filter line'} under the {under}, {ms(plans.get('guarded_claim_ms'))}"
    values = {"filter": line or "", "node": node, "index": index or "", "ms": ms(plans.get("guarded_claim_ms"))}
    if not line or "status = 'pending'" not in line:
        return _finding("F10", NOT_REPRODUCED, ours, "Our guarded plan has no Filter on the status.", values)
    # the structure is the claim; a single-row UPDATE's time is this machine's
    if node == "Index Scan" and (index or "").endswith("_pkey"):
        return _finding("F10", CONFIRMED, ours, "", values)
    return _finding("F10", CONFIRMED_DIFFERENT_SIZE, ours,
                    f"The Filter sits under a {under}, not the primary-key Index Scan.", values)


# --------------------------------------------------------------------------- the churn rules (F11-F13, A4)


def f11_pruning_alone(churn: dict | None) -> Finding:
    """Decided by the arm with autovacuum off: is n_dead_tup zero after every page was read?"""
    if not churn or churn.get("pruning_off_after_read_dead") is None or churn.get("pruning_on_settled_dead") is None:
        return _not_measured("F11", "The pruning experiment was not part of this build's churn run.")
    on, off = churn["pruning_on_settled_dead"], churn["pruning_off_after_read_dead"]
    vacuums, analyzes = churn.get("pruning_on_autovacuum_runs", 0), churn.get("pruning_on_autoanalyze_runs", 0)
    claims, rows = churn.get("pruning_on_updates"), churn.get("pruning_job_count")
    values = {"claims": count(claims), "rows": count(rows), "on_settled_dead": count(on), "off_after_read_dead": count(off),
              "autovacuum_runs": count(vacuums), "autoanalyze_runs": count(analyzes),
              "on_immediate_dead": count(churn.get("pruning_on_immediate_dead")),
              "off_immediate_dead": count(churn.get("pruning_off_immediate_dead"))}
    ours = (f"{count(claims)} claims on {count(rows)} rows: n_dead_tup {count(on)} once settled with autovacuum on "
            f"({count(vacuums)} autovacuum and {count(analyzes)} autoanalyze runs on the table); {count(off)} with "
            "autovacuum off for the table, after a read of every page")
    size = ("" if claims == ORIGINAL_F11_CLAIMS and rows == ORIGINAL_JOB_COUNT else
            f"Our experiment makes {count(claims)} claims on {count(rows)} rows, the original "
            f"{count(ORIGINAL_F11_CLAIMS)} on {count(ORIGINAL_JOB_COUNT)}.")
    if off == 0:
        return _finding("F11", CONFIRMED if not size else CONFIRMED_DIFFERENT_SIZE, ours,
                        ["With autovacuum off, pruning alone brought n_dead_tup to zero.", size], values)
    if on == 0:
        why = (f"there, autovacuum ran {times(vacuums)} and autoanalyze {times(analyzes)}, so the zero was "
               "theirs" if vacuums or analyzes else
               "the server's counters show no autovacuum or autoanalyze run there, so what brought it to zero is "
               "not measured")
        return _finding("F11", CORRECTED, ours,
                        [f"Pruning alone does not reclaim them: with autovacuum off n_dead_tup stayed at {count(off)} "
                         f"after every page was read. It reached zero only with autovacuum on; {why}.", size], values)
    ran = ("although autovacuum or autoanalyze ran" if vacuums or analyzes else
           "and neither autovacuum nor autoanalyze ran on the table within the settle window")
    return _finding("F11", NOT_REPRODUCED, ours,
                    [f"n_dead_tup did not reach zero in either arm ({count(on)} with autovacuum on, {ran}).", size],
                    values)


def _of(hot, updates) -> str:
    return "not measured" if hot is None or updates is None else f"{count(hot)} of {count(updates)}"


def f12_hot_needs_room(churn: dict | None) -> Finding:
    """Against the original's 0 and 448 of 1,000, on the bulk UPDATE where the run has it.

    The original does not say how its 1,000 updates were made. One UPDATE over every row flips a page's rows with
    no pruning in between, the situation its zero at the default fillfactor describes; claims made one at a time
    are shown beside it.
    """
    if not churn:
        return _not_measured("F12", "No churn run is stored for this build.")
    mode = "bulk" if churn.get("bulk_default_plain_hot") is not None else "sequential"
    how = {"bulk": "one bulk UPDATE", "sequential": "claimed one at a time"}
    default_hot, default_n = churn.get(f"{mode}_default_plain_hot"), churn.get(f"{mode}_default_plain_updates")
    low_hot, low_n = churn.get(f"{mode}_low_plain_hot"), churn.get(f"{mode}_low_plain_updates")
    if None in (default_hot, default_n, low_hot, low_n) or not default_n or not low_n:
        return _not_measured("F12", "The churn run has no plain table at two fillfactors.")
    default_ff, low_ff = churn["default_ff"], churn["low_ff"]
    default_share, low_share = default_hot / default_n, low_hot / low_n
    parts = [f"{how[m]}: {_of(churn.get(f'{m}_default_plain_hot'), churn.get(f'{m}_default_plain_updates'))} HOT at "
             f"fillfactor {default_ff}, {_of(churn.get(f'{m}_low_plain_hot'), churn.get(f'{m}_low_plain_updates'))} "
             f"at {low_ff}" for m in ("bulk", "sequential") if churn.get(f"{m}_default_plain_hot") is not None]
    ours = "; ".join(parts)
    values = {"how": how[mode], "default_ff": count(default_ff), "low_ff": count(low_ff),
              "default_hot": count(default_hot), "low_hot": count(low_hot), "updates": count(low_n),
              "default_share": percent(default_share), "low_share": percent(low_share)}
    if low_share <= default_share:
        return _finding("F12", NOT_REPRODUCED, ours,
                        f"In {how[mode]}, fillfactor {low_ff} gave no more HOT updates than {default_ff}.", values)
    notes = []
    if low_ff != ORIGINAL_F12_LOW_FILLFACTOR:
        notes.append(f"Our lower fillfactor is {low_ff}, not {ORIGINAL_F12_LOW_FILLFACTOR}.")
    if default_hot:
        notes.append(f"At fillfactor {default_ff}, {percent(default_share)} of the updates were HOT, not none.")
    if not same_size_count(low_share, ORIGINAL_F12_LOW_HOT_SHARE):
        notes.append(f"At fillfactor {low_ff}, {percent(low_share)} were HOT, against the original's "
                     f"{percent(ORIGINAL_F12_LOW_HOT_SHARE)}.")
    return _finding("F12", CONFIRMED_DIFFERENT_SIZE if notes else CONFIRMED, ours,
                    [f"The original does not say how its {count(ORIGINAL_F12_UPDATES)} updates were made; ours is "
                     f"decided on {how[mode]} of {count(low_n)} rows."] + notes, values)


def f13_partial_index_blocks_hot(churn: dict | None) -> Finding:
    if not churn or churn.get("max_hot_with_index") is None:
        return _not_measured("F13", "The churn run has no setup with the partial index.")
    most = churn["max_hot_with_index"]
    low_ff = churn.get("low_ff")
    ours = (f"fillfactor {low_ff} with the partial index: "
            f"{_of(churn.get('sequential_low_indexed_hot'), churn.get('sequential_low_indexed_updates'))} HOT claimed "
            f"one at a time, {_of(churn.get('bulk_low_indexed_hot'), churn.get('bulk_low_indexed_updates'))} in one "
            f"bulk UPDATE; " + ("no setup with the index made a HOT update" if most == 0 else
                                f"at most {_counted(most, 'HOT update')} in any setup with the index"))
    values = {"max_hot_with_index": count(most), "low_ff": count(low_ff),
              "sequential_hot": count(churn.get("sequential_low_indexed_hot")),
              "bulk_hot": count(churn.get("bulk_low_indexed_hot"))}
    if most == 0:
        return _finding("F13", CONFIRMED, ours, "", values)
    return _finding("F13", NOT_REPRODUCED, ours, f"{count(most)} updates were HOT in a setup with the partial index.",
                    values)


def a4_hot_claimed_one_at_a_time(churn: dict | None) -> Finding:
    hot, updates = (churn or {}).get("sequential_default_plain_hot"), (churn or {}).get("sequential_default_plain_updates")
    if hot is None or not updates:
        return _not_measured("A4", "The churn run has no plain table drained one claim at a time.")
    ff = churn["default_ff"]
    bulk = churn.get("bulk_default_plain_hot")
    ours = (f"claimed one at a time at fillfactor {ff}: {_of(hot, updates)} updates HOT"
            + (f"; in one bulk UPDATE {_of(bulk, churn.get('bulk_default_plain_updates'))}" if bulk is not None else ""))
    values = {"hot": count(hot), "updates": count(updates), "share": percent(hot / updates), "fillfactor": count(ff)}
    note = ("One reading is that each claim's visit to a page prunes the versions earlier claims left there, which "
            "makes room for the next version." if hot else "No update was HOT: the pages had no room.")
    return _finding("A4", ADDED, ours, note, values)


# --------------------------------------------------------------------------- the bench (A3)


def a3_harness_against_pgbench(bench: pd.DataFrame | None, band: tuple[float, float] | None = None) -> Finding:
    """A3 is confirmed only where every point the bench covers passes its gates on what the server did
    (bench.point_verdicts: the lost-race or empty-answer envelope, the server's CPU per win, the CPU-predicted
    ratio); the claims/s ratio to pgbench is reported beside them, not gated."""
    if bench is None or not len(bench) or "ratio" not in bench:
        return _not_measured("A3", "No bench run is stored for this build.")
    if band is None:
        band = bench_module.TARGET_BAND
    inside = int(((bench["ratio"] >= band[0]) & (bench["ratio"] <= band[1])).sum())
    lowest, highest = bench.loc[bench["ratio"].idxmin()], bench.loc[bench["ratio"].idxmax()]
    ours = "harness / pgbench claims per second: " + ", ".join(
        f"{r.strategy} at {_workers(int(r.worker_count))} {spread_text(r.ratio, r.ratio_min, r.ratio_max, lambda v: number(v, 2))}"
        for r in bench.itertuples())
    values = {"points": count(len(bench)), "inside": count(inside), "band_low": number(band[0], 2),
              "band_high": number(band[1], 2), "lowest": number(lowest["ratio"], 2),
              "highest": number(highest["ratio"], 2)}
    if "verdict" not in bench or bench["verdict"].isna().all():
        return _finding("A3", NOT_MEASURED, ours,
                        "The stored bench run has no server CPU per win, so its gates cannot be judged; "
                        f"{count(inside)} of {count(len(bench))} claims/s ratios are within "
                        f"{number(band[0], 2)} to {number(band[1], 2)}.", values)
    failed = bench[bench["verdict"] != "pass"]
    values.update(passed=count(len(bench) - len(failed)), failed_points=", ".join(
        f"{r.strategy} at {int(r.worker_count)}" for r in failed.itertuples()))
    gates = []
    for r in failed.itertuples():
        why = [label for label, ok in (("lost-race envelope", r.envelope_ok), ("server CPU per win", r.server_cpu_ok),
                                       ("CPU-predicted ratio", r.predicted_ok)) if ok is False]
        gates.append(f"{r.strategy} at {_workers(int(r.worker_count))} ({', '.join(why) or 'server CPU not measured'})")
    ratios = (f"{count(inside)} of {count(len(bench))} claims/s ratios are within {number(band[0], 2)} to "
              f"{number(band[1], 2)} (reported, not gated).")
    if not len(failed):
        return _finding("A3", CONFIRMED, ours, [f"Every one of {count(len(bench))} points passes the gates on what the "
                                                "server did: the lost-race (or empty-answer) envelope of pgbench with "
                                                "one, two and one-per-client threads, the server's CPU per win, and "
                                                "where the CPUs were saturated the ratio their CPU per claim predicts.",
                                                ratios], values)
    return _finding("A3", CORRECTED, ours, [f"{count(len(failed))} of {count(len(bench))} points fail a gate: "
                                            f"{'; '.join(gates)}. There the harness's race is not pgbench's, and "
                                            "figures from those points are the client's as much as the server's.",
                                            ratios], values)


def bench_failures(bench: pd.DataFrame | None) -> dict[int, list[str]]:
    """{worker count: [strategy, ...]} of the bench points that failed their gates."""
    if bench is None or not len(bench) or "verdict" not in bench:
        return {}
    failed: dict[int, list[str]] = {}
    for r in bench[bench["verdict"] == "fail"].itertuples():
        failed.setdefault(int(r.worker_count), []).append(str(r.strategy))
    return failed


def bench_note(finding: Finding, failed: dict[int, list[str]]) -> str:
    """For a finding decided on the race sweep: the worker counts it used where the bench check failed."""
    hit = [w for w in finding.worker_counts_used if w in failed]
    if not hit:
        return ""
    listed = "; ".join(f"{', '.join(failed[w])} at {w} workers" for w in hit)
    return (f"The bench check against pgbench failed at a point this verdict used ({listed}): there the harness's "
            "race is not pgbench's.")


# --------------------------------------------------------------------------- the claims this build does not race


# for_update "serialises claiming" when its backends are seen waiting on a row lock in at least this share of the
# samples at its most workers: guarded, which takes no lock to pick, shows well under 1%.
C3_QUEUES = 0.10


def c1_serializable_aborts(others: Races) -> Finding:
    """C1: the naive pair in a SERIALIZABLE transaction aborts instead of handing out duplicates."""
    contended = others.workers("naive_serializable", least=2)
    if not contended:
        return _not_measured("C1", "naive_serializable was not raced above one worker in this build.")
    runs = others.runs("naive_serializable")
    duplicates, aborts = int(runs["duplicate_jobs"].sum()), int(runs["aborts"].fillna(0).sum())
    w = contended[-1]
    per_win = others.figure("naive_serializable", w, "aborts_per_win")
    ours = (f"{count(duplicates)} jobs claimed twice and {count(aborts)} serialization failures over "
            f"{_counted(len(runs), 'race')}; {per_win.text()} aborts per win at {w} workers")
    values = {"duplicates": count(duplicates), "aborts": count(aborts), "aborts_per_win": per_win.text(),
              "workers": count(w)}
    if duplicates:
        return _finding("C1", CORRECTED, ours, "SERIALIZABLE let a job be claimed twice here.", values)
    if not aborts:
        return _finding("C1", NOT_REPRODUCED, ours, "No transaction was aborted: the workers never conflicted.",
                        values)
    return _finding("C1", CONFIRMED, ours, "No job was claimed twice; conflicting transactions were aborted and "
                                          "retried instead, and the time to get a job includes the retries.", values)


def c2_one_transaction_still_racy(others: Races) -> Finding:
    """C2: the naive pair inside one READ COMMITTED transaction still hands out duplicates."""
    contended = others.workers("naive_transaction", least=2)
    if not contended:
        return _not_measured("C2", "naive_transaction was not raced above one worker in this build.")
    pairs = [(w, others.figure("naive_transaction", w, "duplicate_jobs")) for w in contended]
    ours = ("jobs claimed more than once: " + _listing([(w, f.median) for w, f in pairs], count)
            + f" (of {count(others.job_count)})")
    values = {"duplicates_low": pairs[0][1].text(count), "workers_low": count(pairs[0][0]),
              "duplicates_high": pairs[-1][1].text(count), "workers_high": count(pairs[-1][0])}
    if any(f.median > 0 for _, f in pairs):
        return _finding("C2", CONFIRMED, ours, "Each statement takes its own snapshot, so the transaction does not "
                                              "close the window between the read and the write.", values)
    return _finding("C2", NOT_REPRODUCED, ours, "No job was claimed twice inside one transaction here.", values)


def c3_for_update_queues(others: Races, shares: pd.DataFrame | None) -> Finding:
    """C3: FOR UPDATE without SKIP LOCKED is correct, and its workers queue behind the row lock."""
    contended = others.workers("for_update", least=2)
    if not contended:
        return _not_measured("C3", "for_update was not raced above one worker in this build.")
    runs = others.runs("for_update")
    duplicates = int(runs["duplicate_jobs"].sum())
    w = contended[-1]
    lock = _shares_at(shares, "for_update", w).get(LOCK_WAIT)
    speed = others.figure("for_update", w, "claims_per_second")
    ours = (f"{count(duplicates)} jobs claimed twice over {_counted(len(runs), 'race')}; at {w} workers its backends "
            f"waited on a row or transaction lock in {percent(lock)} of the samples; {speed.text(rate)}")
    values = {"duplicates": count(duplicates), "lock_share": percent(lock), "workers": count(w),
              "rate": speed.text(rate)}
    if duplicates:
        return _finding("C3", CORRECTED, ours, "FOR UPDATE handed a job to two workers here.", values)
    if lock is None or missing(lock):
        return _finding("C3", NOT_MEASURED, ours, "No wait events were sampled for it.", values)
    if lock >= C3_QUEUES:
        return _finding("C3", CONFIRMED, ours, "Correct, and its backends were seen queueing on the row lock.",
                        values)
    return _finding("C3", NOT_REPRODUCED, ours, f"Correct, but its backends waited on a lock in under "
                                               f"{percent(C3_QUEUES, 0)} of the samples.", values)


def a5_batch_over_claims(others: Races) -> Finding:
    """A5: the most rows one attempt of either batch form claimed, against the batch size it asked for."""
    runs = others.summary[others.summary["strategy"].astype(str).str.startswith("skip_locked_batch")] \
        if len(others.summary) else others.summary
    if not len(runs):
        return _finding("A5", NOT_MEASURED, "", "No batch strategy was raced in this build.",
                        {"batch_size": MISSING, "max_rows": MISSING, "phrase": "not measured in this build"})
    k, most = int(runs["batch_size"].max()), int(runs["max_rows_per_attempt"].max())
    ours = f"the most rows one attempt claimed: {count(most)}, for batches of {count(k)}, over {_counted(len(runs), 'race')}"
    values = {"batch_size": count(k), "max_rows": count(most)}
    if most > k:
        return _finding("A5", ADDED, ours, "An attempt claimed more rows than it asked for: the hazard showed here.",
                        {**values, "phrase": "an attempt claimed more rows than it asked for: the hazard showed here"})
    return _finding("A5", ADDED, ours, "No attempt claimed more than k under the plans PostgreSQL chose here; a plan "
                                      "that runs the subquery once per row of the outer scan would.",
                    {**values, "phrase": "no attempt went over k under the plans PostgreSQL chose here"})


def a6_advisory_locks_leak(others: Races) -> Finding:
    """A6: advisory locks taken by the pick on jobs it did not return, at the most workers raced."""
    contended = others.workers("advisory_lock")
    if not contended:
        return _finding("A6", NOT_MEASURED, "", "advisory_lock was not raced in this build.",
                        {"leaked": MISSING, "workers": MISSING, "duplicates": MISSING,
                         "phrase": "were not raced in this build"})
    w = contended[-1]
    leaked = others.figure("advisory_lock", w, "advisory_locks_leaked")
    duplicates = int(others.runs("advisory_lock")["duplicate_jobs"].sum())
    ours = f"{leaked.text(count)} advisory locks on jobs not returned at {w} workers; {count(duplicates)} duplicates"
    values = {"leaked": leaked.text(count), "workers": count(w), "duplicates": count(duplicates)}
    if missing(leaked.median) or leaked.median == 0:
        return _finding("A6", ADDED, ours, "The picks locked no job they did not return.",
                        {**values, "phrase": "took no lock on a job they did not return"})
    return _finding("A6", ADDED, ours, "One reading is that the pick's index scan tests pg_try_advisory_lock(id) on "
                                      "each row it reads before the status, so it locks taken jobs it steps over.",
                    {**values, "phrase": f"left {leaked.text(count)} advisory locks on jobs they did not return"})


def _round_trip_curve(points: pd.DataFrame, strategy: str, worker_count: int) -> pd.DataFrame:
    rows = points[(points["strategy"].astype(str) == strategy) & (points["worker_count"] == worker_count)]
    return rows.sort_values("rtt_ms")


def _ends(curve: pd.DataFrame, column: str, fmt) -> tuple[str, str]:
    """A figure at the shortest and at the longest round trip, each with its min-max over repeats."""
    return tuple(spread_text(row[column], row.get(f"{column}_min"), row.get(f"{column}_max"), fmt)
                 for _, row in (next(curve.iterrows()), next(curve.iloc[::-1].iterrows())))


def against_shortest(curve: pd.DataFrame, column: str) -> int:
    """+1 when the figure at every longer round trip is above the shortest round trip's highest repeat, -1 when
    every one is below its lowest repeat, 0 otherwise: a network against localhost, beyond the spread of repeats."""
    first, rest = curve.iloc[0], curve.iloc[1:]
    if not len(rest) or missing(first[column]):
        return 0
    high, low = first.get(f"{column}_max", first[column]), first.get(f"{column}_min", first[column])
    if (rest[column] > high).all():
        return 1
    if (rest[column] < low).all():
        return -1
    return 0


def _direction(sign: int, rising: str, falling: str, flat: str) -> str:
    return rising if sign > 0 else falling if sign < 0 else flat


def c6_network_round_trip(latency: pd.DataFrame | None) -> Finding:
    """C6: a round trip widens naive's window (more claims per job) and makes guarded's lost races dearer.

    Read at the most workers raced at two or more round trips by both naive and guarded: naive's claims beyond
    each job's first, per job, and the time guarded's lost races took per job claimed, at every longer round trip
    against the shortest (against_shortest: beyond the shortest's spread over repeats). Both higher: confirmed;
    either lower: corrected; else not reproduced. Guarded's lost races per win are reported beside them.
    """
    points = by_round_trip(latency, keep_straight=True) if latency is not None and len(latency) else pd.DataFrame()
    straight = pd.DataFrame()
    if len(points) and "proxy" in points and (points["proxy"].astype(bool) & (points["rtt_ms"] == 0)).any():
        # the baseline goes through the proxy too, so a longer round trip differs from it by the delay alone;
        # the straight 0 ms races measure what the proxy itself adds
        straight = points[~points["proxy"].astype(bool)]
        points = points[points["proxy"].astype(bool)]
    common = []
    if len(points):
        for w in sorted({int(w) for w in points["worker_count"]}):
            shared = set(_round_trip_curve(points, "naive", w)["rtt_ms"]) & set(
                _round_trip_curve(points, "guarded", w)["rtt_ms"])
            if len(shared) >= 2:  # both strategies at the same two round trips, at least
                common.append(w)
    if not common:
        return _not_measured("C6", "Not measured: naive and guarded were not both raced at two or more network "
                                   "round trips in this build.")
    w = common[-1]
    naive, guarded = _round_trip_curve(points, "naive", w), _round_trip_curve(points, "guarded", w)
    rtts = sorted(set(naive["rtt_ms"]) & set(guarded["rtt_ms"]))
    naive, guarded = naive[naive["rtt_ms"].isin(rtts)], guarded[guarded["rtt_ms"].isin(rtts)]
    widens = against_shortest(naive, "extra_claims_per_job")
    dearer = against_shortest(guarded, "wasted_ms_per_win")
    losses = against_shortest(guarded, "losses_per_win")
    two = lambda v: number(v, 2)  # noqa: E731
    extra = _ends(naive, "extra_claims_per_job", two)
    lost = _ends(guarded, "losses_per_win", two)
    waste = _ends(guarded, "wasted_ms_per_win", ms)
    lost_each = _ends(guarded, "wasted_attempt_p50_ms", ms)
    low, high = round_trip(rtts[0]), round_trip(rtts[-1])
    ours = (f"at {_workers(w)}, from a {low} to a {high} round trip: naive's claims beyond each job's first went "
            f"from {extra[0]} to {extra[1]} per job; guarded's lost races from {lost[0]} to {lost[1]} per win, "
            f"each taking {lost_each[0]} then {lost_each[1]} (median), {waste[0]} then {waste[1]} per job claimed")
    values = {"workers": count(w), "rtt_low": low, "rtt_high": high, "naive_extra_low": extra[0],
              "naive_extra_high": extra[1], "guarded_lost_low": lost[0], "guarded_lost_high": lost[1],
              "guarded_lost_each_low": lost_each[0], "guarded_lost_each_high": lost_each[1],
              "guarded_waste_low": waste[0], "guarded_waste_high": waste[1],
              "losses_direction": _direction(losses, "were higher", "were lower", "were not all higher or all lower")}
    losses_note = (f"Against the {low} round trip, guarded's lost races per win {values['losses_direction']} "
                   f"at every longer one ({lost[0]} to {lost[1]}).")
    baseline_note = proxy_share_note(straight, naive, guarded, w) if len(straight) else (
        f"The {low} baseline was raced without the proxy, so it differs from the longer round trips by the proxy "
        "as well as by the delay.")
    values["baseline_note"] = baseline_note
    parts = (("naive's claims per job", widens), ("the time guarded's lost races took per job", dearer))
    if widens < 0 or dearer < 0:
        which = " and ".join(part for part, sign in parts if sign < 0)
        return _finding("C6", CORRECTED, ours, [f"With a network, {which} {'were' if ' and ' in which else 'was'} "
                                                f"lower than at {low}.", losses_note, baseline_note], values)
    if widens > 0 and dearer > 0:
        return _finding("C6", CONFIRMED, ours, [f"Both were higher at every longer round trip than at {low}.",
                                                losses_note, baseline_note], values)
    flat = " and ".join(part for part, sign in parts if sign == 0)
    return _finding("C6", NOT_REPRODUCED, ours, [f"{flat[0].upper()}{flat[1:]} {'were' if ' and ' in flat else 'was'} "
                                                 f"not higher at every longer round trip than at {low}.", losses_note,
                                                 baseline_note], values)


def proxy_share_note(straight: pd.DataFrame, naive: pd.DataFrame, guarded: pd.DataFrame, worker_count: int) -> str:
    """How much of the step from a straight 0 ms race to the shortest real round trip the proxy alone makes:
    (proxied 0 ms - straight 0 ms) / (shortest round trip - straight 0 ms), per figure C6 reads."""
    parts = []
    for strategy, curve, column, label in (("naive", naive, "extra_claims_per_job", "naive's claims beyond the first"),
                                           ("guarded", guarded, "wasted_ms_per_win",
                                            "the time guarded's lost races took per job")):
        base = straight[(straight["strategy"].astype(str) == strategy) & (straight["worker_count"] == worker_count)
                        & (straight["rtt_ms"] == 0)]
        longer = curve[curve["rtt_ms"] > 0].sort_values("rtt_ms")
        proxied = curve[curve["rtt_ms"] == 0]
        if not len(base) or not len(longer) or not len(proxied):
            continue
        straight_value, proxied_value = float(base[column].iloc[0]), float(proxied[column].iloc[0])
        step = float(longer[column].iloc[0]) - straight_value
        if not step or missing(step):
            continue
        parts.append(f"{label}, {percent((proxied_value - straight_value) / step, 0)} of the step to "
                     f"{round_trip(float(longer['rtt_ms'].iloc[0]))}")
    if not parts:
        return ""
    return ("The baseline goes through the proxy too, without delay; against straight 0 ms races the proxy alone "
            f"makes, of medians, {' and '.join(parts)}.")


def _fault_cell(faults: pd.DataFrame, protocol: str, fault: str) -> pd.Series | None:
    rows = faults[(faults["protocol"].astype(str) == protocol) & (faults["fault"].astype(str) == fault)]
    return rows.iloc[0] if len(rows) else None


def c7_claim_is_not_completion(faults: pd.DataFrame | None) -> Finding:
    """C7: a killed runner leaves its run running under the original's protocol; a lease hands it on; without a
    fencing token a runner that lost its lease still completes a run another runner holds. Only runs whose fault
    was seen to land (fault_effects) count; a run still worked on when the drain's bound came is not lost."""
    if faults is not None and len(faults) and "fault_landed" in faults:
        faults = faults[faults["fault_landed"].fillna(True).astype(bool)]
    killed = _fault_cell(faults, "none", "kill") if faults is not None and len(faults) else None
    if killed is None:
        return _not_measured("C7", "No run in this build kills a runner after its claim under the original's "
                                   "protocol and sees it land.")
    leased = [row for row in (_fault_cell(faults, p, "kill") for p in ("lease", "lease_holder", "lease_fenced"))
              if row is not None]
    paused = _fault_cell(faults, "lease", "pause")

    def went_wrong(protocol):
        rows = faults[faults["protocol"].astype(str) == protocol]
        return len(rows), int((rows["lost"] + rows["stuck"] + rows["stale_completion"]).sum()) if len(rows) else 0

    fenced_runs, fenced_bad = went_wrong("lease_fenced")
    holder_runs, holder_bad = went_wrong("lease_holder")
    stale = int(paused["stale_completion"]) if paused is not None else 0
    values = {"stuck": count(killed["stuck"]), "leased_stuck": count(sum(int(r["stuck"]) + int(r["lost"])
                                                                         for r in leased)),
              "stale": count(stale), "fenced_runs": count(fenced_runs), "fenced_bad": count(fenced_bad),
              "holder_runs": count(holder_runs), "holder_bad": count(holder_bad)}
    ours = (f"runner killed after its claim: {_counted(int(killed['stuck']), 'run')} stuck without a lease, "
            f"{values['leased_stuck']} stuck or lost with one; a runner paused past its lease completed "
            f"{_counted(stale, 'run')} handed to another runner without a holder check; {_counted(fenced_bad, 'run')} lost, "
            f"stuck or completed by a stale holder over {_counted(fenced_runs, 'fenced run')}"
            + (f", {count(holder_bad)} over {_counted(holder_runs, 'run')} checking the holder by name"
               if holder_runs else ""))
    counter = ""
    if holder_runs and fenced_runs:
        counter = ("Checking the holder by name kept every run as the attempt counter did: in these faults the counter "
                   "adds nothing over it. A case where it would, not raced here: a runner that claims the same run "
                   "again under the same name."
                   if holder_bad == fenced_bad == 0 else
                   f"Checking the holder by name let {_counted(holder_bad, 'run')} go wrong, the attempt counter "
                   f"{count(fenced_bad)}.")
    if int(killed["stuck"]) == 0:
        return _finding("C7", NOT_REPRODUCED, ours, "The killed runner's run was not left running: either the kill "
                                                   "missed its window or the runs were recovered some other way.",
                        values)
    if not leased or any(int(r["stuck"]) + int(r["lost"]) > 0 for r in leased):
        return _finding("C7", NOT_REPRODUCED if leased else CONFIRMED_DIFFERENT_SIZE, ours,
                        "The killed runner's run stayed running, and the lease did not hand every run on." if leased
                        else "The killed runner's run stayed running; no lease was raced against it.", values)
    if stale > 0 or fenced_bad > 0:
        return _finding("C7", CORRECTED, ours,
                        ["A killed runner's run stayed running until a lease handed it on, as the original says; but "
                         "a lease alone let a runner that woke after losing it complete a run another runner held. "
                         + ("The fencing token (an attempt number checked by heartbeat and finish) refused that."
                            if fenced_bad == 0 else f"Even with the fencing token, {count(fenced_bad)} runs went wrong."),
                         counter], values)
    return _finding("C7", CONFIRMED, ours, ["A killed runner's run stayed running without a lease and was handed on "
                                           "with one; no run was completed by a runner that had lost its lease.",
                                           counter], values)


# C5: the original's production polling, and what "rare" means here
ORIGINAL_C5_POLL_S = 5.0
ORIGINAL_C5_HANDFUL = 10  # "a handful of runners": at most this many
RARE_CONFLICTS_PER_POLL = 0.1  # rare: fewer than one poll in ten meets a 409 (one poll can meet up to five)


def _production_points(production: pd.DataFrame | None, endpoint: str) -> pd.DataFrame:
    """The sweep's steady points (no burst) of one endpoint."""
    if production is None or not len(production):
        return pd.DataFrame(columns=["runner_count", "poll_s", "endpoint", "burst", "polls", "conflicts"])
    return production[(production["endpoint"] == endpoint) & (production["burst"] == 0)]


def c5_conflicts_at_production_polling(production: pd.DataFrame | None) -> Finding:
    """C5: with a handful of runners polling /pending every 5 s, 409s are rare: the 95 % interval of the share
    of polls that listed a run and met a 409 (stats.polls_met_interval, pooled over those points) against
    RARE_CONFLICTS_PER_POLL. Polls that listed no run cannot meet a 409 and are not counted."""
    pending = _production_points(production, "pending")
    at_production = pending[(pending["poll_s"] >= ORIGINAL_C5_POLL_S)
                             & (pending["runner_count"] <= ORIGINAL_C5_HANDFUL)]
    if not len(at_production):
        return _not_measured("C5", f"No run polled /pending every {number(ORIGINAL_C5_POLL_S, 0)} s or slower with "
                                   f"at most {count(ORIGINAL_C5_HANDFUL)} runners in this build.")
    polls, conflicts = int(at_production["polls"].sum()), int(at_production["conflicts"].sum())
    listing = int(at_production["listing_polls"].sum())
    met = int(at_production["polls_with_a_conflict"].sum())
    counts = [count(int(n)) for n in sorted(at_production["runner_count"].unique())]
    runners = join(counts)
    values = {"conflicts": count(conflicts), "polls": count(polls), "listing": count(listing), "met": count(met),
              "rare": percent(RARE_CONFLICTS_PER_POLL)}
    if not listing:
        return _finding("C5", NOT_MEASURED, f"{count(polls)} polls with {runners} runners every "
                                            f"{number(ORIGINAL_C5_POLL_S, 0)} s, none of which listed a run",
                        "No poll at production polling listed a run, so none could meet a 409.", values)
    low, high = polls_met_interval(met, listing, list(at_production["conflict_rounds"]))
    values.update(low=percent(low), high=percent(high))
    ours = (f"{count(met)} of {count(listing)} polls that listed a run met a 409 ({percent(met / listing)}, "
            f"95 % interval {percent(low)}{RANGE}{percent(high)}, resampling whole poll rounds; {count(conflicts)} "
            f"409s in all; {count(polls - listing)} of {count(polls)} polls listed nothing) with {runners} runners "
            f"every {number(ORIGINAL_C5_POLL_S, 0)} s")
    busiest = pending.sort_values(["runner_count", "poll_s"], ascending=[False, True]).head(1)
    contrast = ""
    if len(busiest):
        row = busiest.iloc[0]
        contrast = (f"At {count(int(row['runner_count']))} runners every {number(float(row['poll_s']), 1)} s: "
                    f"{count(int(row['conflicts']))} conflicts in {count(int(row['polls']))} polls.")
    if high <= RARE_CONFLICTS_PER_POLL:
        return _finding("C5", CONFIRMED, ours, [f"Rare here means under {percent(RARE_CONFLICTS_PER_POLL)} of "
                                                "the polls that listed a run; the whole interval is below it.",
                                                contrast], values)
    if low > RARE_CONFLICTS_PER_POLL:
        return _finding("C5", CORRECTED, ours, [f"More than {percent(RARE_CONFLICTS_PER_POLL)} of the polls that "
                                                "listed a run met a 409, the whole interval above it.", contrast],
                        values)
    return _finding("C5", NOT_MEASURED, ours, [f"Too few polls to tell: the interval straddles "
                                               f"{percent(RARE_CONFLICTS_PER_POLL)}; run the 5 s points longer.",
                                               contrast], values)


def c8_later_pickup(paired: pd.DataFrame) -> pd.Series:
    """Per paired point: whether POST /claim's pickup p99 is beyond /pending's, i.e. the 95 % bootstrap interval
    of their ratio (stats.percentile_ratio_interval, each endpoint's pickups resampled) lies wholly above 1. A
    point with a few dozen pickups has a wide interval and is then not distinguishable either way."""

    lows = [percentile_ratio_interval(claim, pending)[0]
            for claim, pending in zip(paired["pickups_ms_claim"], paired["pickups_ms_pending"])]
    return pd.Series([bool(low > 1) for low in lows], index=paired.index)


def c8_skip_locked_endpoint(production: pd.DataFrame | None) -> Finding:
    """C8: POST /claim (the pick inside the endpoint, SKIP LOCKED) against GET /pending + claim by id at the same
    runner counts and poll intervals: no 409, no duplicate, and a pickup p99 not beyond /pending's (c8_later_pickup:
    the interval of their ratio, from each point's own pickups, wholly above 1) at most of the points."""
    pending, claim = _production_points(production, "pending"), _production_points(production, "claim")
    keys = ["runner_count", "poll_s"]
    paired = pending.merge(claim, on=keys, suffixes=("_pending", "_claim")) if len(pending) and len(claim) \
        else pd.DataFrame()
    if not len(paired):
        return _not_measured("C8", "No runner count and poll interval was run with both endpoints in this build.")
    conflicts = int(paired["conflicts_claim"].sum())
    duplicates = int(paired["duplicate_jobs_claim"].sum())
    pending_conflicts = int(paired["conflicts_pending"].sum())
    worse = paired[c8_later_pickup(paired)]
    ours = (f"POST /claim: {count(conflicts)} conflicts and {count(duplicates)} duplicates over "
            f"{_counted(len(paired), 'point')}, where /pending met {count(pending_conflicts)} conflicts and sent "
            f"{count(int(paired['loser_payload_bytes_pending'].sum()))} payload bytes to runners that did not get the run")
    values = {"conflicts": count(conflicts), "pending_conflicts": count(pending_conflicts),
              "points": count(len(paired)), "worse_points": count(len(worse))}
    change = "What a runner changes is one call: POST /claim instead of GET /pending then POST /runs/{id}/claim."
    if conflicts or duplicates:
        return _finding("C8", NOT_REPRODUCED, ours, ["The SKIP LOCKED endpoint still answered 409 or handed a run "
                                                     "out twice.", change], values)
    where = ", ".join(f"{count(int(r.runner_count))} runners every {number(float(r.poll_s), 1)} s"
                      for r in worse.itertuples())
    beyond = "beyond /pending's (the 95 % interval of their ratio, resampling each point's pickups, above 1)"
    if len(worse) * 2 > len(paired):
        return _finding("C8", CORRECTED, ours, [f"No 409s, but the pickup p99 was {beyond} at most points "
                                                f"({where}): runners would notice.", change], values)
    exceptions = (f" It was at {count(len(worse))} of {count(len(paired))} points ({where})." if len(worse) else "")
    return _finding("C8", CONFIRMED, ours, [f"No 409s and no run handed out twice; the pickup p99 was not {beyond} "
                                            f"at most points.{exceptions}", change], values)


def unmeasured_claims() -> list[Finding]:
    """C9: what the runs would need to measure it."""
    return [
        _not_measured("C9", "The three knobs are measured one at a time (F9 the index and the walk, F12 fillfactor "
                            "and HOT, F13 the index against HOT), but no run varies the daily job volume, so which "
                            "corner suits which volume is not measured."),
    ]


# --------------------------------------------------------------------------- from stored runs


@dataclass(frozen=True)
class Measurements:
    """What the rules read, loaded from stored runs (or built by hand in the tests)."""

    summary: pd.DataFrame  # one row per race (analysis.race_summary), with empty_while_jobs_remained
    job_waits: pd.DataFrame | None = None  # attempt_figures(): per race, winning claim's and wait's p50/p99
    shares: pd.DataFrame | None = None  # analysis.wait_share_table(summary)
    fixed_fill: dict | None = None  # fixed_fill_latency(bench)
    bench: pd.DataFrame | None = None  # bench.load_bench()
    bench_band: tuple[float, float] | None = None  # bench.TARGET_BAND unless a test sets one
    plans: dict | None = None  # plan_facts()
    churn: dict | None = None  # churn_facts()
    others: pd.DataFrame | None = None  # analysis.race_summary of the other strategies' races (C1-C3)
    latency: pd.DataFrame | None = None  # analysis.race_summary of the races behind a network round trip (C6)
    production: pd.DataFrame | None = None  # one row per production run (analysis.production_summary) (C5, C8)
    faults: pd.DataFrame | None = None  # reliability.fault_summary of the fault runs (C7)
    layouts: pd.DataFrame | None = None  # analysis.race_summary of the client-layout races (notes on F1, F2, F5, F7)


def evaluate(measured: Measurements) -> list[Finding]:
    """Every finding, F1-F13, C1-C9 and A1-A4, in that order."""

    races = Races(measured.summary)
    others = Races(measured.others if measured.others is not None else pd.DataFrame())
    found = [
        f1_duplicates_at_two_workers(races), f2_duplicates_compound(races), f3_naive_looks_fastest(races),
        f4_guarded_no_duplicates(races), f5_lost_races_per_win(races), f6_guarded_slows_down(races, measured.shares),
        f7_skip_locked_no_waste(races), f8_tail_latency(races, measured.job_waits, measured.fixed_fill),
        f9_half_drained_walk(measured.plans), f10_guarded_filter(measured.plans), f11_pruning_alone(measured.churn),
        f12_hot_needs_room(measured.churn), f13_partial_index_blocks_hot(measured.churn),
        c1_serializable_aborts(others), c2_one_transaction_still_racy(others),
        c3_for_update_queues(others, wait_share_table(measured.others) if len(others.summary) else None),
        c4_wait_for_a_job(measured.job_waits), c5_conflicts_at_production_polling(measured.production),
        c6_network_round_trip(measured.latency), c7_claim_is_not_completion(measured.faults),
        c8_skip_locked_endpoint(measured.production),
        *unmeasured_claims(),
        a1_time_to_get_a_job(measured.job_waits), a2_where_the_time_goes(races, measured.shares),
        a3_harness_against_pgbench(measured.bench, measured.bench_band), a4_hot_claimed_one_at_a_time(measured.churn),
        a5_batch_over_claims(others), a6_advisory_locks_leak(others),
    ]
    failed = bench_failures(measured.bench)
    if failed:
        found = [replace(f, note=" ".join(n for n in (f.note, bench_note(f, failed)) if n)) for f in found]
    if measured.layouts is not None and len(measured.layouts):
        table = layout_table(measured.layouts)
        found = [replace(f, note=" ".join(n for n in (f.note, layout_note(table, f.id)) if n)) for f in found]
    return sorted(found, key=lambda f: _order(f.id))


# --------------------------------------------------------------------------- the client layout (F1, F2, F5, F7)

PROCESSES, ASYNCIO = "one process per worker", "one asyncio process"
# (finding, figure, workers, the original's figure or None): what the layouts are compared on
LAYOUT_FIGURES = (
    ("F1", "naive's share of the jobs claimed more than once", 2, ORIGINAL_F1_DUPLICATE_JOBS / ORIGINAL_JOB_COUNT),
    ("F2", "naive's claims beyond each job's first, per job", ORIGINAL_HIGH_WORKERS, None),
    ("F5", "guarded's lost races per win", 2, 1.0),
    ("F5", "guarded's lost races per win", 8, None),
    ("F5", "guarded's lost races per win", 32, None),
    ("F5", "guarded's lost races per win", ORIGINAL_HIGH_WORKERS, float(ORIGINAL_F5_LOSSES_PER_WIN)),
    ("F7", "skip_locked's claims/s over guarded's", 8, None),
    ("F7", "skip_locked's claims/s over guarded's", ORIGINAL_HIGH_WORKERS, float(ORIGINAL_F7_RATIO)),
)


def _layout_value(points: pd.DataFrame, figure: str, workers: int) -> float:
    def at(strategy, column):
        rows = points[(points["strategy"].astype(str) == strategy) & (points["worker_count"] == workers)]
        return float(rows[column].median()) if len(rows) else math.nan

    if figure.startswith("naive's share"):
        return at("naive", "duplicate_jobs") / at("naive", "job_count")
    if figure.startswith("naive's claims beyond"):
        return at("naive", "extra_claims") / at("naive", "job_count")
    if figure.startswith("guarded's lost"):
        return at("guarded", "losses_per_win")
    return at("skip_locked", "claims_per_second") / at("guarded", "claims_per_second")


def layout_table(summary: pd.DataFrame) -> pd.DataFrame:
    """The client-layout races: per figure the original's findings rest on, its value under each layout (median
    over repeats), the original's where it gives one, and which layout lies nearer it (on a log scale)."""
    rows = []
    for finding_id, figure, workers, original in LAYOUT_FIGURES:
        values = {}
        for layout, label in (("processes", PROCESSES), ("asyncio", ASYNCIO)):
            picked = summary[summary["client_layout"] == layout] if "client_layout" in summary else summary.iloc[0:0]
            values[label] = _layout_value(picked, figure, workers)
            if layout == "asyncio":
                at_point = picked[picked["worker_count"] == workers]
                bound = bool(len(at_point) and "cpu_bound" in at_point
                             and at_point["cpu_bound"].fillna(False).astype(bool).all())
        if all(missing(v) for v in values.values()):
            continue
        nearer = None
        if original and all(not missing(v) and v > 0 for v in values.values()):
            nearer = min(values, key=lambda label: abs(math.log(values[label] / original)))
        rows.append({"finding": finding_id, "figure": figure, "workers": workers, **values,
                     "the original": original if original is not None else math.nan, "nearer the original": nearer,
                     "asyncio CPU-bound": bound})
    return pd.DataFrame(rows, columns=["finding", "figure", "workers", PROCESSES, ASYNCIO, "the original",
                                       "nearer the original", "asyncio CPU-bound"])


def layout_note(table: pd.DataFrame, finding_id: str) -> str:
    """One sentence per finding: its figures under the original's client layout, and which layout is nearer."""
    rows = table[table["finding"] == finding_id]
    rows = rows[~rows[ASYNCIO].map(missing)]
    if not len(rows):
        return ""
    fmt = percent if finding_id == "F1" else (ratio if finding_id == "F7" else (lambda v: number(v, 2)))
    listed = ", ".join(f"{fmt(row[ASYNCIO])} against {fmt(row[PROCESSES])} at {row['workers']} workers"
                       for _, row in rows.iterrows())
    nearer = [f"at {row['workers']} the original's {fmt(row['the original'])} lies nearer "
              f"{'the asyncio layout' if row['nearer the original'] == ASYNCIO else 'one process per worker'}"
              for _, row in rows.iterrows() if isinstance(row["nearer the original"], str)]
    bound = bool(rows["asyncio CPU-bound"].all())
    return (f"With the original's client layout (one asyncio process), {rows.iloc[0]['figure']}: {listed} with one "
            f"process per worker" + (f"; {'; '.join(nearer)}" if nearer else "") + "."
            + (" That one process was CPU-bound throughout." if bound else ""))


def attempt_figures(paths: list[Path]) -> pd.DataFrame:
    """Per race, from its attempts: the winning claim's and the time to get a job's p50 and p99 (ms), and the
    attempts that came back empty while jobs remained."""

    rows = []
    for path in paths:
        attempts = load_attempts(path)
        manifest = read_json(Path(path) / "manifest.json")
        config = manifest["parameters"]
        wins = attempts.loc[attempts["outcome"] == "won", "latency_ns"].to_numpy() / 1e6
        waits = time_to_job_ns(attempts) / 1e6
        cut_off = censored_waits_ns(attempts) / 1e6  # waits the drain's end cut off: counted at their bound
        rows.append({"run_id": manifest["run_id"], "strategy": config["strategy"],
                     "worker_count": int(config["worker_count"]), "repeat": int(config["repeat"]),
                     **{f"claim_p{q}_ms": float(np.percentile(wins, q)) if len(wins) else math.nan for q in (50, 99)},
                     **{f"wait_p{q}_ms": censored_percentile(waits, cut_off, q)[0] for q in (50, 99)},
                     "wait_p99_is_lower_bound": censored_percentile(waits, cut_off, 99)[1],
                     "censored_waits": int(len(cut_off)),
                     "empty_while_jobs_remained": empty_while_jobs_remained(attempts)})
    return pd.DataFrame(rows, columns=["run_id", "strategy", "worker_count", "repeat", "claim_p50_ms", "claim_p99_ms",
                                       "wait_p50_ms", "wait_p99_ms", "wait_p99_is_lower_bound", "censored_waits",
                                       "empty_while_jobs_remained"])


def measurements(runs: dict[str, list[Path]]) -> Measurements:
    """Load what the rules read from the runs of each report section ("races", "plans", "churn", "bench")."""

    race_paths = [Path(p) for p in runs.get("races", [])]
    summary = race_summary(race_paths) if race_paths else pd.DataFrame()
    job_waits = attempt_figures(race_paths) if race_paths else None
    if job_waits is not None and len(summary):
        summary = summary.merge(job_waits[["run_id", "empty_while_jobs_remained"]], on="run_id", how="left")
        if "cpu_bound" in summary:
            job_waits = job_waits.merge(summary[["run_id", "cpu_bound"]], on="run_id", how="left")
    plans = churn = bench = None
    if runs.get("plans"):
        path = Path(runs["plans"][0])
        plans = plan_facts(plans_module.load_plans(path), read_json(path / "manifest.json")["results"]["reference_point"],
                           plans_module.load_plan_texts(path))
    if runs.get("churn"):
        path = Path(runs["churn"][0])
        churn = churn_facts(churn_module.load_churn(path), churn_module.load_pruning(path))
    if runs.get("bench"):
        bench = bench_module.load_bench(Path(runs["bench"][0]))
    other_paths = [Path(p) for p in runs.get("other_strategies", [])]
    latency_paths = [Path(p) for p in runs.get("latency", [])]
    faults = None
    if runs.get("faults"):
        faults = fault_summary([Path(p) for p in runs["faults"]])
    production = production_summary([Path(p) for p in runs["production"]]) if runs.get("production") else None
    return Measurements(production=production, summary=summary, job_waits=job_waits, others=race_summary(other_paths) if other_paths else None,
                        latency=race_summary(latency_paths) if latency_paths else None, faults=faults,
                        layouts=race_summary([Path(p) for p in runs["client_layouts"]])
                        if runs.get("client_layouts") else None,
                        shares=wait_share_table(summary) if len(summary) else None,
                        fixed_fill=fixed_fill_latency(bench, most_cpu_free_workers(summary)), bench=bench,
                        plans=plans, churn=churn)


def most_cpu_free_workers(summary: pd.DataFrame) -> int | None:
    """The most workers guarded and skip_locked both raced without being CPU-bound; None without races."""
    if not len(summary):
        return None
    races = Races(summary)
    both = set(races.workers("guarded", cpu_free=True)) & set(races.workers("skip_locked", cpu_free=True))
    return max(both) if both else 0


def from_runs(runs: dict[str, list[Path]]) -> list[Finding]:
    """Every finding from the run folders of each report section ("races", "slow_race", "plans", "churn", "bench");
    a section without runs (or with None for its run) leaves its findings not measured."""
    return evaluate(measurements({section: [p for p in paths if p is not None] for section, paths in runs.items()}))


# --------------------------------------------------------------------------- command line

def _print_text(findings: list[Finding]) -> None:
    for f in findings:
        print(f"{f.id:<4} {f.verdict}")
        for label, text in (("claim", f.claim), ("original", f.original), ("ours", f.ours), ("note", f.note)):
            if text:
                print(textwrap.fill(text, width=110, initial_indent=f"     {label:<9} ",
                                    subsequent_indent=" " * 15))
        print()


def _command(args) -> int:
    runs = registry.stored_sections(registry.load_params(args.params), Path(args.data_dir))
    empty = [section for section in registry.SECTIONS if not runs.get(section)]
    if len(empty) == len(registry.SECTIONS):
        make = "make report" if Path(args.params).resolve() == config.PARAMS_FILE.resolve() else \
            f"make report PARAMS={args.params}"
        raise UserError(f"no stored runs in {args.data_dir} for {args.params} (sections {', '.join(empty)}); "
                        f"run `{make}` first")
    if empty:
        print(f"no stored runs for {', '.join(empty)} in {args.data_dir}", file=sys.stderr)
    findings = from_runs(runs)
    if args.json:
        print(json.dumps([jsonable(f.as_dict()) for f in findings], indent=1))
    else:
        _print_text(findings)
    return 0


def register_cli(subparsers) -> None:
    parser = subparsers.add_parser("findings", help="the original's findings beside ours, with a verdict each, "
                                                    "from the runs stored for a params file")
    parser.add_argument("--json", action="store_true", help="a JSON array, one object per finding")
    parser.add_argument("--data-dir", type=Path, default=config.DATA_DIR, help="where runs are stored (default data/)")
    parser.add_argument("--params", type=Path, default=config.PARAMS_FILE,
                        help="the sweeps whose runs are read (default notebooks/params/report.yml)")
    parser.set_defaults(handler=_command)
