"""Statistics from stored rows only: the attempts Parquet and the server's audit."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from harness import config
from harness.storage import open_runs, stored_runs


def time_to_job_ns(attempts: pd.DataFrame) -> np.ndarray:
    """Per win: from the first attempt after the worker's previous win (or its start) to the end of the win.

    This is what a runner waits for a job, lost races included (C4), as opposed to
    the latency of the winning statement alone; for naive_serializable, the time a
    win costs with the aborted tries before it (C1).
    """
    waits = []
    for _, worker in attempts.sort_values(["worker_index", "attempt_seq"]).groupby("worker_index", sort=False):
        start = worker["start_ns"].to_numpy()
        end = start + worker["latency_ns"].to_numpy()
        won = (worker["outcome"] == "won").to_numpy()
        win_positions = np.flatnonzero(won)
        if not len(win_positions):
            continue
        first_after_previous = np.concatenate([[0], win_positions[:-1] + 1])
        waits.append(end[win_positions] - start[first_after_previous])
    return np.concatenate(waits) if waits else np.array([], dtype=np.int64)


def censored_waits_ns(attempts: pd.DataFrame) -> np.ndarray:
    """Per worker whose last attempt did not win: the wait it was still in when the drain ended, from its first
    attempt after its last win (or its first attempt) to the end of its last attempt. A lower bound of a wait for
    a job that never came: a worker stops at the first empty answer, not when a job would have arrived."""
    waits = []
    for _, worker in attempts.sort_values(["worker_index", "attempt_seq"]).groupby("worker_index", sort=False):
        won = (worker["outcome"] == "won").to_numpy()
        if not len(won) or won[-1]:
            continue
        start = worker["start_ns"].to_numpy()
        end = start[-1] + worker["latency_ns"].to_numpy()[-1]
        wins = np.flatnonzero(won)
        first = wins[-1] + 1 if len(wins) else 0
        waits.append(end - start[first])
    return np.array(waits, dtype=np.int64)


def censored_percentile(values, censored, percentile: float) -> tuple[float, bool]:
    """The percentile of values with the censored ones (lower bounds) counted at their bound, and whether the
    result is itself only a lower bound (some censored value lies at or above it)."""
    values, censored = np.asarray(values, dtype=float), np.asarray(censored, dtype=float)
    every = np.concatenate([values, censored])
    if not len(every):
        return float("nan"), False
    result = float(np.percentile(every, percentile))
    return result, bool(len(censored) and (censored >= result).any())


FILL_DECILES = 10


def win_latency_by_fill(attempts: pd.DataFrame, percentile: float) -> list[float]:
    """Wins' latency percentile (ms) per tenth of the drain: wins in the order they ended, split in ten.

    Without the partial index a pick walks every row claimed before it, so a
    claim costs more the further the queue has drained; a percentile over the
    whole drain mixes those positions. A tenth holds the wins that took the
    queue from k/10 to (k+1)/10 of all wins (naive's duplicate wins included).
    """
    wins = attempts.loc[attempts["outcome"] == "won"]
    if not len(wins):
        return [float("nan")] * FILL_DECILES
    ends = (wins["start_ns"] + wins["latency_ns"]).to_numpy()
    latency_ms = wins["latency_ns"].to_numpy()[np.argsort(ends, kind="stable")] / 1e6
    tenths = np.array_split(latency_ms, FILL_DECILES)
    return [float(np.percentile(part, percentile)) if len(part) else float("nan") for part in tenths]


def summarise_runs(data_dir: Path = config.DATA_DIR, run_paths: list[Path] | None = None) -> pd.DataFrame:
    """One row per race: the given run folders, or every race stored in data_dir."""
    paths = run_paths if run_paths is not None else [path for _, path in stored_runs("race", data_dir)]
    rows = [run.summary for run in open_runs(paths)]
    frame = pd.DataFrame(rows)
    if len(frame):
        frame = frame.sort_values(["strategy", "worker_count", "repeat", "started_at"]).reset_index(drop=True)
    return frame


def jsonable(value):
    """Plain JSON values: NaN becomes null, numpy scalars become numbers, at any depth."""
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def wilson_interval(successes: int, trials: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval (95 % by default) of a proportion; (nan, nan) without trials."""
    if trials <= 0:
        return math.nan, math.nan
    p = successes / trials
    centre = (p + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / (1 + z * z / trials)
    return max(0.0, centre - half), min(1.0, centre + half)


def round_bootstrap_interval(rounds_by_run: list[list[list[int]]], resamples: int = 2000, seed: int = 0,
                             level: float = 0.95) -> tuple[float, float]:
    """The percentile bootstrap interval of a pooled share (sum of hits / sum of trials) whose trials come in
    rounds that move together ([trials, hits] per round): whole rounds are resampled, within each run, so
    trials of one round are never treated as independent. (nan, nan) without trials; fixed seed, so a
    build's figures repeat."""
    runs = [np.asarray(rounds, dtype=float).reshape(-1, 2) for rounds in rounds_by_run if len(rounds)]
    if not runs or sum(run[:, 0].sum() for run in runs) <= 0:
        return math.nan, math.nan
    generator = np.random.default_rng(seed)
    trials = np.zeros(resamples)
    hits = np.zeros(resamples)
    for run in runs:
        picks = generator.integers(0, len(run), size=(resamples, len(run)))
        trials += run[picks, 0].sum(axis=1)
        hits += run[picks, 1].sum(axis=1)
    shares = np.divide(hits, trials, out=np.zeros(resamples), where=trials > 0)
    tail = (1 - level) / 2
    return float(np.quantile(shares, tail)), float(np.quantile(shares, 1 - tail))


def polls_met_interval(met: int, listing: int, rounds_by_run: list) -> tuple[float, float]:
    """The 95 % interval of the share of listing polls that met a 409: the wider of the Wilson interval (polls
    as independent trials, sound for small counts and for none met) and round_bootstrap_interval over whole
    poll rounds (runners polling together see the same runs and race for them)."""
    wilson = wilson_interval(met, listing)
    rounds = round_bootstrap_interval(rounds_by_run)
    if math.isnan(rounds[0]) or math.isnan(wilson[0]):
        return wilson
    return min(wilson[0], rounds[0]), max(wilson[1], rounds[1])


def percentile_ratio_interval(numerator, denominator, percentile: float = 99, resamples: int = 2000, seed: int = 0,
                              level: float = 0.95) -> tuple[float, float]:
    """The percentile bootstrap interval of percentile(numerator) / percentile(denominator), each sample resampled
    on its own: how far apart two points' tails are, given how few values each tail rests on. Values counted at
    a bound (censored) go in at that bound. (nan, nan) when either side is empty or the denominator's is zero."""
    top, bottom = np.asarray(numerator, dtype=float), np.asarray(denominator, dtype=float)
    if not len(top) or not len(bottom):
        return math.nan, math.nan
    generator = np.random.default_rng(seed)
    tops = np.percentile(top[generator.integers(0, len(top), size=(resamples, len(top)))], percentile, axis=1)
    bottoms = np.percentile(bottom[generator.integers(0, len(bottom), size=(resamples, len(bottom)))], percentile,
                            axis=1)
    if (bottoms <= 0).any():
        return math.nan, math.nan
    ratios = tops / bottoms
    tail = (1 - level) / 2
    return float(np.quantile(ratios, tail)), float(np.quantile(ratios, 1 - tail))
