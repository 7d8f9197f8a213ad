"""What sets a race's point apart, and each figure's spread over a point's repeats: what the article reads of
the race beside each run's summary (harness.experiments.race.summary)."""

from __future__ import annotations

import pandas as pd

POINT_KEYS = ("strategy", "worker_count", "batch_size", "job_count", "partial_index", "fillfactor", "pause_ms",
              "jitter_ms", "autovacuum", "audit", "rtt_ms", "proxy", "cpus", "client_layout", "pooler", "pg_version")
SPREAD_FIGURES = ("claims_per_second", "losses_per_win", "duplicate_jobs", "p50_ms", "p99_ms", "wall_seconds")


def spread_by_point(frame: pd.DataFrame, figures=SPREAD_FIGURES) -> pd.DataFrame:
    """Per point (everything but the repeat): how many repeats, and each figure's median, min and max."""
    if not len(frame):
        return frame
    keys = [k for k in POINT_KEYS if k in frame]
    grouped = frame.groupby(keys, sort=False, dropna=False)
    spread = grouped.size().rename("repeats").to_frame()
    for figure in figures:
        if figure in frame:
            spread[f"{figure}_median"] = grouped[figure].median()
            spread[f"{figure}_min"] = grouped[figure].min()
            spread[f"{figure}_max"] = grouped[figure].max()
    return spread.reset_index()
