"""The production section: a claim service with polling runners (C5, C8)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness.article.analysis import production_facts, production_summary
from harness.article.findings import (CONFIRMED, CORRECTED, NOT_MEASURED, NOT_REPRODUCED, ORIGINAL_C5_HANDFUL,
                                      ORIGINAL_C5_POLL_S, Finding, make_finding, not_measured)
from harness.article.formats import RANGE, count, number, percent
from harness.article.prose import join, numbered
from harness.article.wording import Sentences
from harness.stats import percentile_ratio_interval, polls_met_interval

NAME = "production"
READS = ("production",)
say = Sentences(NAME)


# C5: the original's production polling, and what "rare" means here
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
        return not_measured("C5", say("C5.no_run", poll_s=number(ORIGINAL_C5_POLL_S, 0),
                                      handful=count(ORIGINAL_C5_HANDFUL)))
    polls, conflicts = int(at_production["polls"].sum()), int(at_production["conflicts"].sum())
    listing = int(at_production["listing_polls"].sum())
    met = int(at_production["polls_with_a_conflict"].sum())
    counts = [count(int(n)) for n in sorted(at_production["runner_count"].unique())]
    runners = join(counts)
    values = {"conflicts": count(conflicts), "polls": count(polls), "listing": count(listing), "met": count(met),
              "rare": percent(RARE_CONFLICTS_PER_POLL)}
    if not listing:
        return make_finding("C5", NOT_MEASURED, say("C5.none_listed_ours", polls=count(polls), runners=runners,
                                                    poll_s=number(ORIGINAL_C5_POLL_S, 0)),
                            say("C5.none_listed"), values)
    low, high = polls_met_interval(met, listing, list(at_production["conflict_rounds"]))
    values.update(low=percent(low), high=percent(high))
    ours = say("C5.ours", met=count(met), listing=count(listing), share=percent(met / listing),
               interval=f"{percent(low)}{RANGE}{percent(high)}", conflicts=count(conflicts),
               unlisted=count(polls - listing), polls=count(polls), runners=runners,
               poll_s=number(ORIGINAL_C5_POLL_S, 0))
    busiest = pending.sort_values(["runner_count", "poll_s"], ascending=[False, True]).head(1)
    contrast = ""
    if len(busiest):
        row = busiest.iloc[0]
        contrast = say("C5.busiest", runners=count(int(row["runner_count"])), poll_s=number(float(row["poll_s"]), 1),
                       conflicts=count(int(row["conflicts"])), polls=count(int(row["polls"])))
    if high <= RARE_CONFLICTS_PER_POLL:
        return make_finding("C5", CONFIRMED, ours, [say("C5.rare", rare=percent(RARE_CONFLICTS_PER_POLL)), contrast],
                            values)
    if low > RARE_CONFLICTS_PER_POLL:
        return make_finding("C5", CORRECTED, ours, [say("C5.not_rare", rare=percent(RARE_CONFLICTS_PER_POLL)),
                                                    contrast], values)
    return make_finding("C5", NOT_MEASURED, ours, [say("C5.too_few", rare=percent(RARE_CONFLICTS_PER_POLL)),
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
        return not_measured("C8", say("C8.no_pairs"))
    conflicts = int(paired["conflicts_claim"].sum())
    duplicates = int(paired["duplicate_jobs_claim"].sum())
    pending_conflicts = int(paired["conflicts_pending"].sum())
    worse = paired[c8_later_pickup(paired)]
    ours = say("C8.ours", conflicts=count(conflicts), duplicates=count(duplicates),
               points=numbered(len(paired), "point"), pending_conflicts=count(pending_conflicts),
               payload_bytes=count(int(paired["loser_payload_bytes_pending"].sum())))
    values = {"conflicts": count(conflicts), "pending_conflicts": count(pending_conflicts),
              "points": count(len(paired)), "worse_points": count(len(worse))}
    change = say("C8.change")
    if conflicts or duplicates:
        return make_finding("C8", NOT_REPRODUCED, ours, [say("C8.still_conflicts"), change], values)
    where = ", ".join(say("C8.point", runners=count(int(r.runner_count)), poll_s=number(float(r.poll_s), 1))
                      for r in worse.itertuples())
    beyond = say("C8.beyond")
    if len(worse) * 2 > len(paired):
        return make_finding("C8", CORRECTED, ours, [say("C8.later", beyond=beyond, where=where), change], values)
    not_later = [say("C8.not_later", beyond=beyond)]
    if len(worse):
        not_later.append(say("C8.exceptions", worse=count(len(worse)), points=count(len(paired)), where=where))
    return make_finding("C8", CONFIRMED, ours, [" ".join(not_later), change], values)


# --------------------------------------------------------------------------- the section


@dataclass(frozen=True)
class Loaded:
    runs: tuple  # the production runs (storage.Run)
    summary: pd.DataFrame  # one row per run (analysis.production_summary)


def load(reads: dict, loaded: dict) -> Loaded | None:
    paths = reads["production"].runs if "production" in reads else ()
    return Loaded(paths, production_summary(list(paths))) if paths else None


def findings(loaded: dict) -> list[Finding]:
    mine = loaded.get(NAME)
    summary = mine.summary if mine else None
    return [c5_conflicts_at_production_polling(summary), c8_skip_locked_endpoint(summary)]


def values(loaded: dict, found: dict[str, Finding]) -> dict[str, str]:
    """The service's setup and the figures C5 and C8 read, as the prose names them."""
    mine = loaded[NAME]
    return production_facts(mine.summary if mine else None)
