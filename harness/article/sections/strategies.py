"""The other ways to claim (C1-C3, A5, A6) and the races behind a network round trip (C6)."""

from __future__ import annotations


from dataclasses import dataclass

import pandas as pd

from harness.article.analysis import over_repeats, race_summary, runs_of, shares_at, wait_share_table
from harness.article.compare import Races
from harness.claims.strategies import STRATEGIES
from harness.article.findings import (ADDED, CONFIRMED, CORRECTED, NOT_MEASURED, NOT_REPRODUCED, Finding,
                                      make_finding, not_measured)
from harness.article.formats import (DASH, MISSING, count, missing, ms, number, percent, rate, round_trip, spread as
                                     spread_text)
from harness.article.labels import LOCK_WAIT
from harness.article.prose import counted, join, listing, numbered, strategy_sql, table, workers_phrase
from harness.article.sections.strategy_charts import ClaimSections, by_round_trip, claim_comparison, claim_sections
from harness.article.wording import Sentences

NAME = "strategies"
READS = ("other_strategies", "latency", "indexed_race", "pg18_race", "others_indexed", "pg18_others")
UPSTREAM = ("races",)
say = Sentences(NAME)


# --------------------------------------------------------------------------- the claims this build does not race


# for_update "serialises claiming" when its backends are seen waiting on a row lock in at least this share of the
# samples at its most workers: guarded, which takes no lock to pick, shows well under 1%.
C3_QUEUES = 0.10


def c1_serializable_aborts(others: Races) -> Finding:
    """C1: the naive pair in a SERIALIZABLE transaction aborts instead of handing out duplicates."""
    contended = others.workers("naive_serializable", least=2)
    if not contended:
        return not_measured("C1", say("C1.not_raced"))
    runs = others.runs("naive_serializable")
    duplicates, aborts = int(runs["duplicate_jobs"].sum()), int(runs["aborts"].fillna(0).sum())
    w = contended[-1]
    per_win = others.figure("naive_serializable", w, "aborts_per_win")
    ours = say("C1.ours", duplicates=count(duplicates), aborts=count(aborts), races=numbered(len(runs), "race"),
               aborts_per_win=per_win.text(), workers=w)
    values = {"duplicates": count(duplicates), "aborts": count(aborts), "aborts_per_win": per_win.text(),
              "workers": count(w)}
    if duplicates:
        return make_finding("C1", CORRECTED, ours, say("C1.duplicates"), values)
    if not aborts:
        return make_finding("C1", NOT_REPRODUCED, ours, say("C1.no_aborts"), values)
    return make_finding("C1", CONFIRMED, ours, say("C1.aborted"), values)


def c2_one_transaction_still_racy(others: Races) -> Finding:
    """C2: the naive pair inside one READ COMMITTED transaction still hands out duplicates."""
    contended = others.workers("naive_transaction", least=2)
    if not contended:
        return not_measured("C2", say("C2.not_raced"))
    pairs = [(w, others.figure("naive_transaction", w, "duplicate_jobs")) for w in contended]
    ours = say("C2.ours", listing=listing([(w, f.median) for w, f in pairs], count),
               job_count=count(others.job_count))
    values = {"duplicates_low": pairs[0][1].text(count), "workers_low": count(pairs[0][0]),
              "duplicates_high": pairs[-1][1].text(count), "workers_high": count(pairs[-1][0])}
    if any(f.median > 0 for _, f in pairs):
        return make_finding("C2", CONFIRMED, ours, say("C2.window_open"), values)
    return make_finding("C2", NOT_REPRODUCED, ours, say("C2.no_duplicates"), values)


def c3_for_update_queues(others: Races, shares: pd.DataFrame | None) -> Finding:
    """C3: FOR UPDATE without SKIP LOCKED is correct, and its workers queue behind the row lock."""
    contended = others.workers("for_update", least=2)
    if not contended:
        return not_measured("C3", say("C3.not_raced"))
    runs = others.runs("for_update")
    duplicates = int(runs["duplicate_jobs"].sum())
    w = contended[-1]
    lock = shares_at(shares, "for_update", w).get(LOCK_WAIT)
    speed = others.figure("for_update", w, "claims_per_second")
    ours = say("C3.ours", duplicates=count(duplicates), races=numbered(len(runs), "race"), workers=w,
               lock_share=percent(lock), rate=speed.text(rate))
    values = {"duplicates": count(duplicates), "lock_share": percent(lock), "workers": count(w),
              "rate": speed.text(rate)}
    if duplicates:
        return make_finding("C3", CORRECTED, ours, say("C3.duplicates"), values)
    if lock is None or missing(lock):
        return make_finding("C3", NOT_MEASURED, ours, say("C3.no_waits"), values)
    if lock >= C3_QUEUES:
        return make_finding("C3", CONFIRMED, ours, say("C3.queues"), values)
    return make_finding("C3", NOT_REPRODUCED, ours, say("C3.no_queue", threshold=percent(C3_QUEUES, 0)), values)


def a5_batch_over_claims(others: Races) -> Finding:
    """A5: the most rows one attempt of either batch form claimed, against the batch size it asked for."""
    runs = others.summary[others.summary["strategy"].astype(str).str.startswith("skip_locked_batch")] \
        if len(others.summary) else others.summary
    if not len(runs):
        return make_finding("A5", NOT_MEASURED, "", say("A5.not_raced"),
                            {"batch_size": MISSING, "max_rows": MISSING, "phrase": say("A5.not_raced_phrase")})
    k, most = int(runs["batch_size"].max()), int(runs["max_rows_per_attempt"].max())
    ours = say("A5.ours", max_rows=count(most), batch_size=count(k), races=numbered(len(runs), "race"))
    values = {"batch_size": count(k), "max_rows": count(most)}
    if most > k:
        return make_finding("A5", ADDED, ours, say("A5.over"), {**values, "phrase": say("A5.over_phrase")})
    return make_finding("A5", ADDED, ours, say("A5.within"), {**values, "phrase": say("A5.within_phrase")})


def a6_advisory_locks_leak(others: Races) -> Finding:
    """A6: advisory locks taken by the pick on jobs it did not return, at the most workers raced."""
    contended = others.workers("advisory_lock")
    if not contended:
        return make_finding("A6", NOT_MEASURED, "", say("A6.not_raced"),
                            {"leaked": MISSING, "workers": MISSING, "duplicates": MISSING,
                             "phrase": say("A6.not_raced_phrase")})
    w = contended[-1]
    leaked = others.figure("advisory_lock", w, "advisory_locks_leaked")
    duplicates = int(others.runs("advisory_lock")["duplicate_jobs"].sum())
    ours = say("A6.ours", leaked=leaked.text(count), workers=w, duplicates=count(duplicates))
    values = {"leaked": leaked.text(count), "workers": count(w), "duplicates": count(duplicates)}
    if missing(leaked.median) or leaked.median == 0:
        return make_finding("A6", ADDED, ours, say("A6.no_leak"), {**values, "phrase": say("A6.no_leak_phrase")})
    return make_finding("A6", ADDED, ours, say("A6.leaks"),
                        {**values, "phrase": say("A6.leaks_phrase", leaked=leaked.text(count))})


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
        return not_measured("C6", say("C6.not_raced"))
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
    ours = say("C6.ours", workers=workers_phrase(w), rtt_low=low, rtt_high=high, naive_extra_low=extra[0],
               naive_extra_high=extra[1], guarded_lost_low=lost[0], guarded_lost_high=lost[1],
               guarded_lost_each_low=lost_each[0], guarded_lost_each_high=lost_each[1], guarded_waste_low=waste[0],
               guarded_waste_high=waste[1])
    values = {"workers": count(w), "rtt_low": low, "rtt_high": high, "naive_extra_low": extra[0],
              "naive_extra_high": extra[1], "guarded_lost_low": lost[0], "guarded_lost_high": lost[1],
              "guarded_lost_each_low": lost_each[0], "guarded_lost_each_high": lost_each[1],
              "guarded_waste_low": waste[0], "guarded_waste_high": waste[1],
              "losses_direction": _direction(losses, say("C6.losses_higher"), say("C6.losses_lower"),
                                             say("C6.losses_mixed"))}
    losses_note = say("C6.losses", rtt_low=low, direction=values["losses_direction"], guarded_lost_low=lost[0],
                      guarded_lost_high=lost[1])
    baseline_note = proxy_share_note(straight, naive, guarded, w) if len(straight) else say("C6.no_straight",
                                                                                            rtt_low=low)
    values["baseline_note"] = baseline_note
    parts = ((say("C6.naive_part"), widens), (say("C6.guarded_part"), dearer))
    if widens < 0 or dearer < 0:
        which = " and ".join(part for part, sign in parts if sign < 0)
        return make_finding("C6", CORRECTED, ours, [say("C6.lower", which=which, verb=_verb(which), rtt_low=low),
                                                    losses_note, baseline_note], values)
    if widens > 0 and dearer > 0:
        return make_finding("C6", CONFIRMED, ours, [say("C6.higher", rtt_low=low), losses_note, baseline_note],
                            values)
    flat = " and ".join(part for part, sign in parts if sign == 0)
    return make_finding("C6", NOT_REPRODUCED, ours, [say("C6.flat", which=f"{flat[0].upper()}{flat[1:]}",
                                                         verb=_verb(flat), rtt_low=low),
                                                     losses_note, baseline_note], values)


def _verb(subject: str) -> str:
    """'were' for two parts joined by 'and', 'was' for one."""
    return "were" if " and " in subject else "was"


def proxy_share_note(straight: pd.DataFrame, naive: pd.DataFrame, guarded: pd.DataFrame, worker_count: int) -> str:
    """How much of the step from a straight 0 ms race to the shortest real round trip the proxy alone makes:
    (proxied 0 ms - straight 0 ms) / (shortest round trip - straight 0 ms), per figure C6 reads."""
    parts = []
    for strategy, curve, column, label in (("naive", naive, "extra_claims_per_job", say("C6.proxy_naive_part")),
                                           ("guarded", guarded, "wasted_ms_per_win", say("C6.proxy_guarded_part"))):
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
        parts.append(say("C6.proxy_part", label=label, share=percent((proxied_value - straight_value) / step, 0),
                         rtt=round_trip(float(longer["rtt_ms"].iloc[0]))))
    if not parts:
        return ""
    return say("C6.proxy_share", parts="; ".join(parts))


# --------------------------------------------------------------------------- the section


@dataclass(frozen=True)
class Loaded:
    """The other strategies' races (C1-C3, A5, A6) and the races behind a network round trip (C6)."""

    others: pd.DataFrame | None = None  # analysis.race_summary of the other strategies' races
    latency: pd.DataFrame | None = None  # analysis.race_summary of the races behind a round trip
    other_runs: tuple = ()
    claims: ClaimSections | None = None  # the round trip, the partial index, both servers, which claim to use
    other_request: object = None  # what the params file's other_strategies section asked (a RaceSweep)


def load(reads: dict, loaded: dict) -> Loaded:
    others, latency = runs_of(reads, "other_strategies"), runs_of(reads, "latency")
    other_summary = race_summary(others) if others else None
    latency_summary = race_summary(latency) if latency else None
    races = loaded.get("races")
    sweep = races.summary if races is not None else pd.DataFrame()
    return Loaded(other_summary, latency_summary, tuple(others),
                  claim_sections(reads, sweep, other_summary, latency_summary),
                  reads["other_strategies"].request if "other_strategies" in reads else None)


def findings(loaded: dict) -> list[Finding]:
    mine = loaded.get(NAME) or Loaded()
    others = Races(mine.others if mine.others is not None else pd.DataFrame())
    shares = wait_share_table(mine.others) if len(others.summary) else None
    return [c1_serializable_aborts(others), c2_one_transaction_still_racy(others), c3_for_update_queues(others, shares),
            c6_network_round_trip(mine.latency), a5_batch_over_claims(others), a6_advisory_locks_leak(others)]


OTHER_STRATEGIES = ("naive_transaction", "naive_serializable", "for_update", "skip_locked_batch", "skip_locked_batch_in",
                    "advisory_lock")


def values(loaded: dict, found: dict[str, Finding]) -> dict[str, str]:
    """The other strategies' SQL and setup, and the sections on how to claim (round trip, index, servers)."""
    mine = loaded[NAME]
    other = mine.other_request
    out = {}
    for name in OTHER_STRATEGIES:
        strategy = STRATEGIES[name]
        out |= {f"{name}_title": strategy.title, f"{name}_summary": strategy.summary, f"{name}_sql": strategy_sql(name)}
    batches = mine.others[mine.others["strategy"].astype(str).str.startswith("skip_locked_batch")]
    out |= {"other_job_count": count(other.job_count), "other_worker_list": join([str(w) for w in other.worker_counts]),
            "other_repeats": counted(other.repeats, "race"),
            "batch_k": count(batches["batch_size"].max()) if len(batches) else MISSING}
    return out | mine.claims.facts


def _dash_or(fmt):
    return lambda value: DASH if missing(value) else fmt(value)


# the columns of strategy_charts.claim_comparison whose names run to four words or more
TIME_TO_JOB_P99 = "time to get a job, p99"
MOST_ROWS = "most rows in one attempt"


def other_table(loaded: dict) -> str:
    """One row per other strategy and worker count: duplicates, losses, aborts, rate, wait and lock figures."""
    mine = loaded[NAME]
    other = mine.other_request
    return table(claim_comparison(over_repeats(mine.others), wait_share_table(mine.others)),
                 caption=say("other_table.caption", jobs=count(other.job_count)),
                 formats={"jobs claimed twice+": count, "lost per win": _dash_or(lambda v: number(v, 2)),
                          "aborts per win": _dash_or(lambda v: number(v, 2)), "claims/s": lambda v: number(v, 0),
                          TIME_TO_JOB_P99: ms, MOST_ROWS: count,
                          "stray advisory locks": _dash_or(count), "lock waits": percent},
                 css_class="wide")
