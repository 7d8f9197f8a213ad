"""Deciding beyond the noise: a figure as its median and range over repeats, whether two figures separate,
whether a series rises, and the race sweep as the rules read it."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from harness.article.analysis import at_workers, over_repeats
from harness.article.formats import missing, number, spread as spread_text


def spearman(x, y) -> float:
    x, y = pd.Series(list(x), dtype=float).rank(), pd.Series(list(y), dtype=float).rank()
    if len(x) < 3 or x.std() == 0 or y.std() == 0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1])


# Two figures are alike where the whole interval of their ratio lies inside this margin: a practical margin chosen
# with the rules that read it (C8, C9), before the runs they judge; overlap alone is not agreement.
ALIKE_MARGIN = (0.8, 1.25)


def alike(low: float, high: float) -> bool:
    """Whether an interval of a ratio (low, high) lies wholly inside ALIKE_MARGIN."""
    return ALIKE_MARGIN[0] <= low and high <= ALIKE_MARGIN[1]


def alike_margin_said() -> str:
    return f"{number(ALIKE_MARGIN[0], 2)} to {number(ALIKE_MARGIN[1], 2)}"


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
    rho = spearman([p[0] for p in points], ys)
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

    def repeats(self, strategy: str, worker_count: int) -> int:
        """How many races the point had (0 where it was not raced)."""
        rows = self.points[(self.points["strategy"] == strategy) & (self.points["worker_count"] == worker_count)]
        return int(rows["repeats"].iloc[0]) if len(rows) and "repeats" in rows else 0

    def figure(self, strategy: str, worker_count: int, column: str) -> Figure:
        if column not in self.points:
            return NO_FIGURE
        return Figure(*(float(at_workers(self.points, strategy, worker_count, c))
                        for c in (column, f"{column}_min", f"{column}_max")))

    def runs(self, strategy: str) -> pd.DataFrame:
        return self.summary[self.summary["strategy"] == strategy] if len(self.summary) else self.summary



def free_at(sources: dict, strategies, worker_count: int) -> tuple[str | None, Races | None, bool]:
    """The first of sources (name -> Races, or None where that arm was not raced) in which every strategy was raced
    at worker_count without being CPU-bound, as (name, races, raced); (None, None, raced) where none was. raced:
    whether any source raced them all there, CPU-bound or not, so a note can tell "CPU-bound" from "not raced"."""
    raced = False
    for name, source in sources.items():
        if source is None:
            continue
        raced |= all(worker_count in source.workers(s) for s in strategies)
        if all(worker_count in source.workers(s, cpu_free=True) for s in strategies):
            return name, source, True
    return None, None, raced


def most_cpu_free_workers(summary: pd.DataFrame) -> int | None:
    """The most workers guarded and skip_locked both raced without being CPU-bound; None without races."""
    if not len(summary):
        return None
    races = Races(summary)
    both = set(races.workers("guarded", cpu_free=True)) & set(races.workers("skip_locked", cpu_free=True))
    return max(both) if both else 0


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
