"""C5's question, shared by the production experiment (which polls on in rounds until it is decided) and the
article (which decides it): the original's production polling, what "rare" means, and the interval of the share
of listing polls that met a 409."""

from __future__ import annotations

import math

from harness.stats import polls_met_interval

ORIGINAL_C5_POLL_S = 5.0  # the original's production polling: every 5 s ...
ORIGINAL_C5_HANDFUL = 10  # ... with "a handful of runners": at most this many

C5_POLL_S = ORIGINAL_C5_POLL_S
C5_HANDFUL = ORIGINAL_C5_HANDFUL
RARE_CONFLICTS_PER_POLL = 0.1  # rare: fewer than one listing poll in ten meets a 409 (one poll can meet up to five)
C5_ROUND_RUNNERS = C5_HANDFUL  # a round polls with the most runners a handful allows: the most polls per second
C5_ROUND_POLL_S = C5_POLL_S
C5_ROUND_SECONDS = 36.0  # one round's arrival window (about 90 polls, half of them listing a run)
MAX_C5_EXTRA_SECONDS = 1800.0


def is_c5_round(row) -> bool:
    """A run made to extend C5 (its seed numbers the round), not a point of the sweep."""
    return int(row.get("seed", 0) or 0) > 0


def at_c5_point(row) -> bool:
    """A steady /pending run at production polling: every C5_POLL_S or slower, a handful of runners at most."""
    return (row.get("endpoint") == "pending" and not row.get("burst") and float(row.get("poll_s")) >= C5_POLL_S
            and int(row.get("runner_count")) <= C5_HANDFUL)


def c5_interval(summaries: list[dict]) -> dict | None:
    """C5's pooled figures over the runs at its point: listing polls, those that met a 409, and the 95 % interval
    of their share (stats.polls_met_interval over whole poll rounds); None where no run is at the point."""
    rows = [row for row in summaries if at_c5_point(row)]
    if not rows:
        return None
    listing = sum(int(row["listing_polls"]) for row in rows)
    met = sum(int(row["polls_with_a_conflict"]) for row in rows)
    low, high = polls_met_interval(met, listing, [row["conflict_rounds"] for row in rows]) if listing \
        else (math.nan, math.nan)
    return {"listing": listing, "met": met, "low": low, "high": high, "runs": len(rows),
            "rounds": sum(1 for row in rows if is_c5_round(row))}


def c5_decided(interval: dict | None) -> bool:
    """Whether the interval lies wholly below or wholly above RARE_CONFLICTS_PER_POLL."""
    if interval is None or not interval["listing"] or math.isnan(interval["high"]):
        return False
    return interval["high"] <= RARE_CONFLICTS_PER_POLL or interval["low"] > RARE_CONFLICTS_PER_POLL
