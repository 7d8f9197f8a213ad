"""The production section: a claim service with polling runners (C5, C8)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness.article.compare import alike, alike_margin_said
from harness.article.findings import (CONFIRMED, CORRECTED, NOT_DISTINGUISHABLE, NOT_MEASURED, NOT_REPRODUCED, Finding,
                                      make_finding, not_measured)
from harness.article.formats import MISSING, RANGE, count, ms, number, percent
from harness.article.labels import PRODUCTION_ENDPOINT_LABELS
from harness.article.prose import join, numbered
from harness.article.sections.production_charts import pickup_tail
from harness.article.wording import Sentences
from harness.experiments.production import outcomes as polling_conflicts
from harness.experiments.production.outcomes import ORIGINAL_C5_HANDFUL, ORIGINAL_C5_POLL_S
from harness.service.runner import CLAIM_BATCH
from harness.stats import percentile_ratio_interval, polls_met_interval
from harness.storage import open_runs

NAME = "production"
READS = ("production",)
UPSTREAM = ()
say = Sentences(NAME)


# C5: the original's production polling, and what "rare" means here (the experiment runs on until it can say)
RARE_CONFLICTS_PER_POLL = polling_conflicts.RARE_CONFLICTS_PER_POLL


def _production_points(production: pd.DataFrame | None, endpoint: str) -> pd.DataFrame:
    """The sweep's steady points (no burst) of one endpoint."""
    if production is None or not len(production):
        return pd.DataFrame(columns=["runner_count", "poll_s", "endpoint", "burst", "polls", "conflicts"])
    return production[(production["endpoint"] == endpoint) & (production["burst"] == 0)]


def _rows(frame: pd.DataFrame | None) -> list[dict]:
    return [] if frame is None or not len(frame) else frame.to_dict("records")


def c5_conflicts_at_production_polling(production: pd.DataFrame | None, rounds: pd.DataFrame | None = None,
                                       max_rounds: int | None = None) -> Finding:
    """C5: with a handful of runners polling /pending every 5 s, 409s are rare: the 95 % interval of the share
    of polls that listed a run and met a 409 (polling_conflicts.c5_interval, pooled over the sweep's points there and
    the rounds the build ran on while it straddled the line) against RARE_CONFLICTS_PER_POLL. Polls that listed
    no run cannot meet a 409 and are not counted. An interval that still straddles the line is not distinguishable
    from it: "not measured", saying whether the bound on rounds (max_rounds; None: not known) was reached."""
    pending = _production_points(production, "pending")
    rows = _rows(production) + _rows(rounds)
    pooled = polling_conflicts.c5_interval(rows)
    if pooled is None:
        return not_measured("C5", say("C5.no_run", poll_s=number(ORIGINAL_C5_POLL_S, 0),
                                      handful=count(ORIGINAL_C5_HANDFUL)))
    at_point = [row for row in rows if polling_conflicts.at_c5_point(row)]
    polls = sum(int(row["polls"]) for row in at_point)
    conflicts = sum(int(row["conflicts"]) for row in at_point)
    listing, met, done = pooled["listing"], pooled["met"], pooled["rounds"]
    runners = join([count(n) for n in sorted({int(row["runner_count"]) for row in at_point})])
    rare = percent(RARE_CONFLICTS_PER_POLL)
    values = {"conflicts": count(conflicts), "polls": count(polls), "listing": count(listing), "met": count(met),
              "rare": rare, "rounds": count(done)}
    if not listing:
        return make_finding("C5", NOT_MEASURED, say("C5.none_listed_ours", polls=count(polls), runners=runners,
                                                    poll_s=number(ORIGINAL_C5_POLL_S, 0)),
                            say("C5.none_listed"), values)
    low, high = pooled["low"], pooled["high"]
    values.update(low=percent(low), high=percent(high))
    ours = say("C5.ours", met=count(met), listing=count(listing), share=percent(met / listing),
               interval=f"{percent(low)}{RANGE}{percent(high)}", conflicts=count(conflicts),
               unlisted=count(polls - listing), polls=count(polls), runners=runners,
               poll_s=number(ORIGINAL_C5_POLL_S, 0))
    ran_on = say("C5.ran_on", rounds=numbered(done, "round"), seconds=number(polling_conflicts.C5_ROUND_SECONDS, 0),
                 runners=count(polling_conflicts.C5_ROUND_RUNNERS),
                 poll_s=number(polling_conflicts.C5_ROUND_POLL_S, 0)) if done else ""
    busiest = pending.sort_values(["runner_count", "poll_s"], ascending=[False, True]).head(1)
    contrast = ""
    if len(busiest):
        row = busiest.iloc[0]
        contrast = say("C5.busiest", runners=count(int(row["runner_count"])), poll_s=number(float(row["poll_s"]), 1),
                       conflicts=count(int(row["conflicts"])), polls=count(int(row["polls"])))
    if polling_conflicts.c5_decided(pooled):  # the same reading the build polls on by
        if high <= RARE_CONFLICTS_PER_POLL:
            return make_finding("C5", CONFIRMED, ours, [say("C5.rare", rare=rare), ran_on, contrast], values)
        return make_finding("C5", CORRECTED, ours, [say("C5.not_rare", rare=rare), ran_on, contrast], values)
    if max_rounds is not None and done >= max_rounds:
        bound = say("C5.bound_reached", rounds=numbered(done, "round"),
                    seconds=number(max_rounds * polling_conflicts.C5_ROUND_SECONDS, 0),
                    poll_s=number(polling_conflicts.C5_ROUND_POLL_S, 0)) if max_rounds \
            else say("C5.no_rounds")
    else:
        bound = say("C5.rounds_missing")
    return make_finding("C5", NOT_MEASURED, ours, [say("C5.too_few", rare=rare), bound, contrast], values)


# C8: the pick inside the endpoint, against /pending at equal capacity (both take up to five runs per poll)
LATER, EARLIER, ALIKE, UNCLEAR = "later", "earlier", "alike", "not distinguishable"


def c8_tail_comparison(paired: pd.DataFrame, suffix: str) -> pd.Series:
    """Per paired point: the pickup p99 of the claim endpoint (columns `pickups_ms_<suffix>`) against /pending's,
    from the 95 % bootstrap interval of their ratio (stats.percentile_ratio_interval, each endpoint's pickups
    resampled): ALIKE where it lies wholly inside compare.ALIKE_MARGIN; else LATER where it lies wholly above 1, EARLIER
    wholly below; UNCLEAR where it holds 1 and reaches past the margin (a point with a few dozen pickups has a wide
    interval, and is then not distinguishable either way)."""
    outcomes = []
    for claim, pending in zip(paired[f"pickups_ms_{suffix}"], paired["pickups_ms_pending"]):
        low, high = percentile_ratio_interval(claim, pending)
        outcomes.append(ALIKE if alike(low, high) else
                        LATER if low > 1 else EARLIER if high < 1 else UNCLEAR)
    return pd.Series(outcomes, index=paired.index, dtype=object)


def _paired(production: pd.DataFrame | None, endpoint: str) -> pd.DataFrame:
    pending, claim = _production_points(production, "pending"), _production_points(production, endpoint)
    if not len(pending) or not len(claim):
        return pd.DataFrame()
    return pending.merge(claim, on=["runner_count", "poll_s"], suffixes=("_pending", f"_{endpoint}"))


def _where(frame: pd.DataFrame) -> str:
    return ", ".join(say("C8.point", runners=count(int(r.runner_count)), poll_s=number(float(r.poll_s), 1))
                     for r in frame.itertuples())


def c8_single_claim_beside(production: pd.DataFrame | None, batch_later: int | None = None) -> str:
    """What the single claim (one run per poll, where a /pending runner takes up to CLAIM_BATCH) shows beside the
    pair; where it was later at most points and the batch claim (later at batch_later) was not, that the capacity
    made the gap."""
    single = _paired(production, "claim")
    if not len(single):
        return ""
    later = int((c8_tail_comparison(single, "claim") == LATER).sum())
    said = say("C8.single", later=count(later), points=count(len(single)), batch=count(CLAIM_BATCH),
               conflicts=count(int(single["conflicts_claim"].sum())))
    # the capacity made the gap only where the single claim was later at most points and the batch claim was not,
    # read where both had the same arrival window: a run never picked up counts at its window's end, so a shorter
    # window alone moves a tail
    if {"seconds_pending", "seconds_claim"} <= set(single):
        single = single[single["seconds_pending"] == single["seconds_claim"]]
    later_alike = int((c8_tail_comparison(single, "claim") == LATER).sum()) if len(single) else 0
    gap = batch_later is not None and len(single) and later_alike * 2 > len(single) and batch_later * 2 <= len(single)
    return said + (" " + say("C8.single_gap") if gap else "")


def c8_skip_locked_endpoint(production: pd.DataFrame | None) -> Finding:
    """C8: POST /claim (the pick inside the endpoint, SKIP LOCKED) against GET /pending + claim by id at the same
    runner counts and poll intervals, at equal capacity: the batch claim hands a runner up to as many runs per poll
    as /pending lists it, and both run them side by side. Not reproduced where it still met a 409 or handed a run
    out twice; corrected where its pickup p99 was later beyond the noise (c8_tail_comparison) at most points;
    confirmed where it was alike (inside compare.ALIKE_MARGIN) or earlier at every point; not distinguishable otherwise. The
    single claim, one run per poll, is shown beside it and decides nothing."""
    paired = _paired(production, "claim_batch")
    if not len(paired):
        single = c8_single_claim_beside(production)
        return not_measured("C8", " ".join(filter(None, [say("C8.no_pairs"), single])))
    conflicts = int(paired["conflicts_claim_batch"].sum())
    duplicates = int(paired["duplicate_jobs_claim_batch"].sum())
    pending_conflicts = int(paired["conflicts_pending"].sum())
    outcome = c8_tail_comparison(paired, "claim_batch")
    later, earlier, alike, unclear = (paired[outcome == kind] for kind in (LATER, EARLIER, ALIKE, UNCLEAR))
    single = c8_single_claim_beside(production, len(later))
    ours = say("C8.ours", batch=count(CLAIM_BATCH), conflicts=count(conflicts), duplicates=count(duplicates),
               points=numbered(len(paired), "point"), pending_conflicts=count(pending_conflicts),
               payload_bytes=count(int(paired["loser_payload_bytes_pending"].sum())))
    values = {"conflicts": count(conflicts), "pending_conflicts": count(pending_conflicts),
              "points": count(len(paired)), "later_points": count(len(later)), "earlier_points": count(len(earlier)),
              "alike_points": count(len(alike)), "unclear_points": count(len(unclear)),
              "alike_margin": alike_margin_said()}
    change = say("C8.change")
    if conflicts or duplicates:
        return make_finding("C8", NOT_REPRODUCED, ours, [say("C8.still_conflicts"), single, change], values)
    tally = say("C8.tally", batch=count(CLAIM_BATCH), later=count(len(later)), earlier=count(len(earlier)),
                alike=count(len(alike)), unclear=count(len(unclear)), points=count(len(paired)),
                margin=values["alike_margin"])
    if len(later) * 2 > len(paired):
        return make_finding("C8", CORRECTED, ours, [say("C8.later", where=_where(later)), tally, single, change],
                            values)
    if len(alike) + len(earlier) == len(paired):
        return make_finding("C8", CONFIRMED, ours, [say("C8.not_later"), tally, single, change], values)
    return make_finding("C8", NOT_DISTINGUISHABLE, ours,
                        [say("C8.undecided", where=_where(pd.concat([later, unclear]))), tally, single, change],
                        values)


# --------------------------------------------------------------------------- the section


@dataclass(frozen=True)
class Loaded:
    runs: tuple  # the production runs (storage.Run)
    summary: pd.DataFrame  # one row per run of the sweep (production_summary), C5's extra rounds left out
    c5_rounds: pd.DataFrame | None = None  # one row per extra round C5 ran while its interval was undecided
    c5_max_rounds: int | None = None  # the bound on those rounds the params set (None: not known)


def load(reads: dict, loaded: dict) -> Loaded | None:
    asked = reads.get("production")
    paths = asked.runs if asked is not None else ()
    if not paths:
        return None
    frame = production_summary(list(paths))
    rounds = frame.apply(polling_conflicts.is_c5_round, axis=1).astype(bool) if len(frame) \
        else pd.Series(False, index=frame.index)
    max_rounds = getattr(asked.request, "c5_max_rounds", None)
    return Loaded(paths, frame[~rounds].reset_index(drop=True), frame[rounds].reset_index(drop=True), max_rounds)


def findings(loaded: dict) -> list[Finding]:
    mine = loaded.get(NAME)
    summary = mine.summary if mine else None
    return [c5_conflicts_at_production_polling(summary, mine.c5_rounds if mine else None,
                                               mine.c5_max_rounds if mine else None),
            c8_skip_locked_endpoint(summary)]


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
    quiet_batch, busy_batch = point("claim_batch", fewest, slowest), point("claim_batch", most, fastest)
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
        "prod_quiet_batch_p99": tail(quiet_batch),
        "prod_batch": count(CLAIM_BATCH),
        "prod_crowd_share": figure(crowd, "share_of_polls_with_a_conflict", percent),
        "prod_busy_p99": tail(busy), "prod_busy_claim_p99": tail(busy_claim), "prod_busy_batch_p99": tail(busy_batch),
        "prod_busy_statements": figure(busy, "statements_per_claimed_job", lambda v: number(v, 1)),
        "prod_busy_claim_statements": figure(busy_claim, "statements_per_claimed_job", lambda v: number(v, 1)),
        "prod_busy_batch_statements": figure(busy_batch, "statements_per_claimed_job", lambda v: number(v, 1)),
        "prod_busy_cpu": figure(busy, "backend_cpu_ms_per_claimed_job", lambda v: number(v, 2)),
        "prod_busy_claim_cpu": figure(busy_claim, "backend_cpu_ms_per_claimed_job", lambda v: number(v, 2)),
        "prod_busy_batch_cpu": figure(busy_batch, "backend_cpu_ms_per_claimed_job", lambda v: number(v, 2)),
        "prod_duplicates": count(int(summary["duplicate_jobs"].sum())),
        "prod_pending_at_end": count(int(summary["pending_at_end"].sum())),
        "prod_loser_bytes_total": count(int(steady.loc[steady["endpoint"] == "pending", "loser_payload_bytes"].sum())),
        "prod_loser_secrets_total": count(int(steady.loc[steady["endpoint"] == "pending", "loser_secrets"].sum())),
    }
    burst_pending, burst_claim = point("pending", frame=burst), point("claim", frame=burst)
    burst_batch = point("claim_batch", frame=burst)
    if burst_pending is not None:
        facts.update({
            "prod_burst": count(int(burst_pending["burst"])), "prod_burst_runners": count(int(burst_pending["runner_count"])),
            "prod_burst_poll": number(float(burst_pending["poll_s"]), 1),
            "prod_burst_conflicts": count(int(burst_pending["conflicts"])),
            "prod_burst_p99": tail(burst_pending),
            "prod_burst_claim_conflicts": figure(burst_claim, "conflicts", count),
            "prod_burst_claim_p99": tail(burst_claim),
            "prod_burst_batch_conflicts": figure(burst_batch, "conflicts", count),
            "prod_burst_batch_p99": tail(burst_batch),
        })
    else:
        facts.update({name: MISSING for name in ("prod_burst", "prod_burst_runners", "prod_burst_poll",
                                                 "prod_burst_conflicts", "prod_burst_p99",
                                                 "prod_burst_claim_conflicts", "prod_burst_claim_p99",
                                                 "prod_burst_batch_conflicts", "prod_burst_batch_p99")})
    return facts
