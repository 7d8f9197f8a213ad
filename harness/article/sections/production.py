"""The production section: a claim service with polling runners (C5, C8)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness.article.findings import (CONFIRMED, CORRECTED, NOT_MEASURED, NOT_REPRODUCED, ORIGINAL_C5_HANDFUL,
                                      ORIGINAL_C5_POLL_S, Finding, make_finding, not_measured)
from harness.article.formats import MISSING, RANGE, count, ms, number, percent
from harness.article.labels import PRODUCTION_ENDPOINT_LABELS
from harness.article.prose import join, numbered
from harness.article.sections.production_charts import pickup_tail
from harness.article.wording import Sentences
from harness.stats import percentile_ratio_interval, polls_met_interval
from harness.storage import open_runs

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


def tail_phrase(row) -> str:
    """A point's pickup tail in words: the p99, or the slowest of so many pickups; "at least" where a run never
    picked up (counted at the window's end) reaches it."""
    value, bound, pickups = pickup_tail(row) if row is not None else (None, False, None)
    if value is None or pd.isna(value):
        return MISSING
    text = ms(value) if pickups is None else say("tail_slowest", value=ms(value), pickups=count(pickups))
    return say("tail_at_least", tail=text) if bound else text


def values(loaded: dict, found: dict[str, Finding]) -> dict[str, str]:
    """The service's setup and the figures C5 and C8 read, as the prose names them."""
    mine = loaded[NAME]
    return production_facts(mine.summary if mine else None)


# --------------------------------------------------------------------------- the runs, summarised once


def production_summary(paths: list[Path]) -> pd.DataFrame:
    """One row per production run: its parameters and figures, recomputed from its stored rows."""
    frame = pd.DataFrame([run.summary for run in open_runs(paths)])
    if len(frame):
        bounds = [polls_met_interval(int(c), int(p), [rounds]) for c, p, rounds
                  in zip(frame["polls_with_a_conflict"], frame["listing_polls"], frame["conflict_rounds"])]
        frame["share_of_polls_with_a_conflict_low"] = [low for low, _ in bounds]
        frame["share_of_polls_with_a_conflict_high"] = [high for _, high in bounds]
        frame["endpoint_label"] = frame["endpoint"].map(PRODUCTION_ENDPOINT_LABELS)
    return frame


def production_facts(summary: pd.DataFrame | None) -> dict:
    """Every figure the production section's prose names, formatted once (glued by the article's cell 04-03)."""
    measured = summary is not None and len(summary) > 0
    if not measured:
        summary = pd.DataFrame(columns=["endpoint", "runner_count", "poll_s", "seconds", "burst", "service_time_s", "jitter",
                                        "arrival_rate", "conflicts", "loser_payload_bytes", "loser_secrets",
                                        "duplicate_jobs", "pending_at_end"])
    steady = summary[summary["burst"] == 0]
    if not len(steady):
        steady = summary  # only burst runs: the steady figures read them
    burst = summary[summary["burst"] > 0]

    def point(endpoint: str, runner_count: int | None = None, poll_s: float | None = None, frame=steady):
        if not len(frame):
            return None
        rows = frame[frame["endpoint"] == endpoint]
        if runner_count is not None:
            rows = rows[rows["runner_count"] == runner_count]
        if poll_s is not None:
            rows = rows[rows["poll_s"] == poll_s]
        return rows.iloc[0] if len(rows) else None

    def figure(row, column: str, fmt) -> str:
        return MISSING if row is None else fmt(row[column])

    if len(steady):
        fewest, most = int(steady["runner_count"].min()), int(steady["runner_count"].max())
        slowest, fastest = float(steady["poll_s"].max()), float(steady["poll_s"].min())
        utilisation = float((steady["arrival_rate"] * steady["service_time_s"] / steady["runner_count"]).iloc[0])
        service_time = float(steady["service_time_s"].iloc[0])
    else:
        fewest = most = slowest = fastest = utilisation = service_time = float("nan")
    quiet, busy = point("pending", fewest, slowest), point("pending", most, fastest)
    quiet_claim, busy_claim = point("claim", fewest, slowest), point("claim", most, fastest)
    crowd = point("pending", most, slowest)  # many runners, slow polls
    tail = tail_phrase

    facts = {
        "prod_confidence": "95%",  # the level of harness.stats.polls_met_interval
        "prod_runner_list": join([str(int(n)) for n in sorted(steady["runner_count"].unique())]),
        "prod_poll_list": join([number(p, 1 if p < 1 else 0) for p in sorted(steady["poll_s"].unique(),
                                                                              reverse=True)]),
        "prod_runs": count(len(summary)),
        "prod_service_time": number(service_time, 1) + " s",
        "prod_utilisation": percent(utilisation),
        "prod_fewest": count(fewest), "prod_most": count(most),
        "prod_slowest": number(slowest, 1 if slowest < 1 else 0),
        "prod_fastest": number(fastest, 1 if fastest < 1 else 0),
        "prod_jitter": percent(float(summary["jitter"].iloc[0])) if measured else MISSING,
        "prod_quiet_loser_bytes": figure(quiet, "loser_payload_bytes_per_claimed_job", count),
        "prod_quiet_loser_secrets": figure(quiet, "loser_secrets_per_claimed_job", lambda v: number(v, 1)),
        "prod_quiet_window": figure(quiet, "first_claim_answer_p50_ms", ms),
        "prod_quiet_p99": tail(quiet),
        "prod_quiet_claim_p99": tail(quiet_claim),
        "prod_crowd_share": figure(crowd, "share_of_polls_with_a_conflict", percent),
        "prod_busy_p99": tail(busy), "prod_busy_claim_p99": tail(busy_claim),
        "prod_busy_statements": figure(busy, "statements_per_claimed_job", lambda v: number(v, 1)),
        "prod_busy_claim_statements": figure(busy_claim, "statements_per_claimed_job", lambda v: number(v, 1)),
        "prod_busy_cpu": figure(busy, "backend_cpu_ms_per_claimed_job", lambda v: number(v, 2)),
        "prod_busy_claim_cpu": figure(busy_claim, "backend_cpu_ms_per_claimed_job", lambda v: number(v, 2)),
        "prod_duplicates": count(int(summary["duplicate_jobs"].sum())),
        "prod_pending_at_end": count(int(summary["pending_at_end"].sum())),
        "prod_loser_bytes_total": count(int(steady.loc[steady["endpoint"] == "pending", "loser_payload_bytes"].sum())),
        "prod_loser_secrets_total": count(int(steady.loc[steady["endpoint"] == "pending", "loser_secrets"].sum())),
    }
    burst_pending, burst_claim = point("pending", frame=burst), point("claim", frame=burst)
    if burst_pending is not None:
        facts.update({
            "prod_burst": count(int(burst_pending["burst"])), "prod_burst_runners": count(int(burst_pending["runner_count"])),
            "prod_burst_poll": number(float(burst_pending["poll_s"]), 1),
            "prod_burst_conflicts": count(int(burst_pending["conflicts"])),
            "prod_burst_p99": tail(burst_pending),
            "prod_burst_claim_conflicts": figure(burst_claim, "conflicts", count),
            "prod_burst_claim_p99": tail(burst_claim),
        })
    else:
        facts.update({name: MISSING for name in ("prod_burst", "prod_burst_runners", "prod_burst_poll",
                                                 "prod_burst_conflicts", "prod_burst_p99",
                                                 "prod_burst_claim_conflicts", "prod_burst_claim_p99")})
    return facts
