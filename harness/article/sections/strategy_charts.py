"""The strategies section's charts and tables: the other ways to claim side by side, behind a network round trip,
with and without the partial index, on two servers, and which claim to use; the figures their prose names."""

from __future__ import annotations

from dataclasses import dataclass, field

import altair as alt
import numpy as np
import pandas as pd

from harness.article.analysis import over_repeats, race_summary, runs_of, wait_share_table
from harness.article.charts import (CPU_BOUND_DISC_NOTE, CPU_BOUND_NOTE, HEIGHT, REPEATS_TOOLTIP, WIDTH, chart_title,
                                    dash_legend, dashed_lines, facet_band, has_repeats, listed_names, plain_frame, spread_note,
                                    spread_rules, strategy_colour, workers_axis)
from harness.article.formats import DASH, MISSING, count, missing, ms, number, percent, rate, round_trip
from harness.article.labels import (CANNOT_LOSE, CPU_BOUND_COLOUR, INDEX_LABELS, LOCK_WAIT, ROUND_TRIP_MEASURES,
                                    SIDE_BY_SIDE_MEASURES, STRATEGY_ORDER, in_order)
from harness.article.prose import table


# --------------------------------------------------------------------------- the other ways, and a round trip


def claim_comparison(points: pd.DataFrame, shares: pd.DataFrame) -> pd.DataFrame:
    """Per strategy and worker count, what each way of claiming costs and whether it is correct: the medians over
    repeats of duplicates, lost races and aborts per win, claims per second, the time to get a job, the most
    rows one attempt claimed, advisory locks left on jobs not returned, and the share of samples waiting on a lock."""
    columns = {"strategy": "strategy", "worker_count": "workers", "duplicate_jobs": "jobs claimed twice+",
               "losses_per_win": "lost per win", "aborts_per_win": "aborts per win",
               "claims_per_second": "claims/s", "time_to_job_p99_ms": "time to get a job, p99",
               "max_rows_per_attempt": "most rows in one attempt", "advisory_locks_leaked": "stray advisory locks"}
    table = points[[c for c in columns if c in points]].copy()
    table["strategy"] = table["strategy"].astype(str)
    # a figure a strategy cannot have is left empty (a dash in the table), not shown as a measured zero
    if "losses_per_win" in table:
        table.loc[table["strategy"].isin(CANNOT_LOSE), "losses_per_win"] = np.nan
    if "aborts_per_win" in table:
        table.loc[table["strategy"] != "naive_serializable", "aborts_per_win"] = np.nan
    if len(shares):
        locks = shares[["strategy", "worker_count", LOCK_WAIT]].copy()
        locks["strategy"] = locks["strategy"].astype(str)
        table = table.merge(locks, on=["strategy", "worker_count"], how="left")
    columns[LOCK_WAIT] = "lock waits"
    return table.rename(columns=columns).reset_index(drop=True)


def by_round_trip(summary: pd.DataFrame, keep_straight: bool = False) -> pd.DataFrame:
    """over_repeats() of races behind a network round trip, in order of strategy, workers and round trip.

    Where 0 ms was raced through the proxy too, that is the 0 ms point; the straight 0 ms races (no proxy) are
    kept only with keep_straight (to tell what the proxy alone adds)."""
    points = over_repeats(summary)
    if not len(points):
        return points
    if not keep_straight and "proxy" in points:
        proxied_zero = points["proxy"].astype(bool) & (points["rtt_ms"] == 0)
        if proxied_zero.any():
            points = points[points["proxy"].astype(bool)]
    return points.sort_values(["strategy", "worker_count", "rtt_ms"]).reset_index(drop=True)


def round_trip_long(points: pd.DataFrame) -> pd.DataFrame:
    """by_round_trip() as the latency chart draws it: one row per strategy, round trip and measure, with its
    min-max; naive's claims beyond each job's first and guarded's lost races per win, and every strategy's
    claims per second; cpu_bound where any repeat of the point was (None where none was read)."""
    measures = (("naive", "extra_claims_per_job", ROUND_TRIP_MEASURES[0]),
                ("guarded", "losses_per_win", ROUND_TRIP_MEASURES[1]),
                (None, "claims_per_second", ROUND_TRIP_MEASURES[2]))
    frames = []
    for strategy, column, measure in measures:
        rows = points if strategy is None else points[points["strategy"].astype(str) == strategy]
        if not len(rows) or column not in rows:
            continue
        frames.append(pd.DataFrame({
            "strategy": rows["strategy"].astype(str), "worker_count": rows["worker_count"],
            "rtt_ms": rows["rtt_ms"], "measure": measure, "value": rows[column],
            "low": rows[f"{column}_min"], "high": rows[f"{column}_max"], "repeats": rows["repeats"],
            "cpu_bound": rows["cpu_bound"] if "cpu_bound" in rows else None}))
    columns = ["strategy", "worker_count", "rtt_ms", "measure", "value", "low", "high", "repeats", "cpu_bound"]
    return pd.concat(frames, ignore_index=True)[columns] if frames else pd.DataFrame(columns=columns)


# --------------------------------------------------------------------------- the sections on how to claim


@dataclass
class ClaimSections:
    """What the article's sections on the network round trip, the partial index, the two server versions and
    "which claim should I use" draw and say: their frames, and every figure their prose names (`facts`)."""

    facts: dict = field(default_factory=dict)  # placeholder name -> formatted value
    latency: pd.DataFrame = field(default_factory=pd.DataFrame)  # by_round_trip() of the latency section
    index_points: pd.DataFrame = field(default_factory=pd.DataFrame)  # conditions() of the indexed race, on one server
    server_points: pd.DataFrame = field(default_factory=pd.DataFrame)  # conditions(): unindexed, on both servers
    server_table: pd.DataFrame = field(default_factory=pd.DataFrame)  # server_comparison()
    which_claim: pd.DataFrame = field(default_factory=pd.DataFrame)  # which_claim()
    which_low: int = 0  # the worker counts which_claim() reads claims per second at
    which_high: int = 0


def _list_text(values, fmt=str) -> str:
    items = [fmt(v) for v in values]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1] if items else MISSING


def _point(points: pd.DataFrame, strategy: str, column: str, **where):
    rows = points[points["strategy"].astype(str) == strategy]
    for key, value in where.items():
        rows = rows[rows[key] == value]
    return rows[column].iloc[0] if len(rows) and column in rows else np.nan


def latency_facts(latency: pd.DataFrame) -> dict:
    """The latency section's setup and the figures its prose names beside C6's, at the most workers raced."""
    if not len(latency):
        return {name: MISSING for name in ("latency_job_count", "latency_worker_list", "latency_rtt_list",
                                            "latency_repeats", "latency_skip_rate_low", "latency_skip_rate_high",
                                            "latency_guarded_rate_low", "latency_guarded_rate_high",
                                            "latency_skip_p50_high", "latency_guarded_p50_high", "latency_workers")}
    workers = sorted({int(w) for w in latency["worker_count"]})
    rtts = sorted({float(r) for r in latency["rtt_ms"]})
    top, low, high = workers[-1], rtts[0], rtts[-1]
    at = {"worker_count": top}
    repeats = int(latency["repeats"].max())
    return {
        "latency_job_count": count(latency["job_count"].max()) if "job_count" in latency else MISSING,
        "latency_worker_list": _list_text(workers), "latency_workers": count(top),
        "latency_rtt_list": _list_text(rtts, round_trip),
        "latency_repeats": f"{count(repeats)} race{'' if repeats == 1 else 's'}",
        "latency_skip_rate_low": rate(_point(latency, "skip_locked", "claims_per_second", rtt_ms=low, **at)),
        "latency_skip_rate_high": rate(_point(latency, "skip_locked", "claims_per_second", rtt_ms=high, **at)),
        "latency_guarded_rate_low": rate(_point(latency, "guarded", "claims_per_second", rtt_ms=low, **at)),
        "latency_guarded_rate_high": rate(_point(latency, "guarded", "claims_per_second", rtt_ms=high, **at)),
        "latency_skip_p50_high": ms(_point(latency, "skip_locked", "p50_ms", rtt_ms=high, **at)),
        "latency_guarded_p50_high": ms(_point(latency, "guarded", "p50_ms", rtt_ms=high, **at)),
    }


SERVER = "server"
INDEX = "partial index"


def server_label(version) -> str:
    """'PostgreSQL 16' from a server_version such as '16.4' (a run's pg_version)."""
    return f"PostgreSQL {str(version).split('.')[0]}" if not missing(version) else MISSING


def with_conditions(summary: pd.DataFrame) -> pd.DataFrame:
    """A race summary with the conditions a run was raced under as labels: its server and its partial index."""
    if not len(summary):
        return summary.assign(**{SERVER: [], INDEX: []})
    return summary.assign(**{SERVER: summary["pg_version"].map(server_label),
                             INDEX: summary["partial_index"].map(INDEX_LABELS)})


def conditions(summary: pd.DataFrame) -> pd.DataFrame:
    """over_repeats() of runs under several conditions, each point labelled with its server and partial index."""
    points = over_repeats(summary) if len(summary) else summary
    return with_conditions(points) if len(points) else points


def side_by_side_long(points: pd.DataFrame, condition: str) -> pd.DataFrame:
    """conditions() as a chart draws one condition against another: claims per second and a win's p99, with
    min-max, one row per strategy, workers, condition and measure."""
    frames = []
    for column, measure in (("claims_per_second", SIDE_BY_SIDE_MEASURES[0]), ("p99_ms", SIDE_BY_SIDE_MEASURES[1])):
        if not len(points):
            break
        frames.append(pd.DataFrame({
            "strategy": points["strategy"].astype(str), "worker_count": points["worker_count"],
            "condition": points[condition], "measure": measure, "value": points[column],
            "low": points[f"{column}_min"], "high": points[f"{column}_max"], "repeats": points["repeats"],
            # any repeat CPU-bound marks the point (over_repeats); a summary without the marking has none
            "cpu_bound": (points["cpu_bound"].fillna(False).astype(bool) if "cpu_bound" in points else False)}))
    columns = ["strategy", "worker_count", "condition", "measure", "value", "low", "high", "repeats", "cpu_bound"]
    return pd.concat(frames, ignore_index=True)[columns] if frames else pd.DataFrame(columns=columns)


CPU_BOUND_ON = "CPU-bound on"


def server_comparison(points: pd.DataFrame) -> pd.DataFrame:
    """Per strategy and worker count, one column per server for claims per second, lost races per win and a
    win's p99, the ratio of the newer server's claims per second to the older's, and the servers whose race there
    was CPU-bound (their major versions)."""
    if not len(points):
        return pd.DataFrame()
    servers = sorted(points[SERVER].unique(), key=lambda label: int(label.split()[-1]))
    keyed = points.assign(strategy=points["strategy"].astype(str)).set_index(["strategy", "worker_count", SERVER])
    rows = []
    for (strategy, worker_count), _ in points.groupby([points["strategy"].astype(str), "worker_count"], sort=False):
        row = {"strategy": strategy, "workers": int(worker_count)}
        for server in servers:
            key = (strategy, worker_count, server)
            found = key in keyed.index
            row[f"claims/s, {server}"] = keyed.loc[key, "claims_per_second"] if found else np.nan
            row[f"lost per win, {server}"] = (keyed.loc[key, "losses_per_win"]
                                              if found and strategy not in CANNOT_LOSE else np.nan)
            row[f"p99, {server}"] = keyed.loc[key, "p99_ms"] if found else np.nan
        if len(servers) >= 2:
            row[f"{servers[-1].split()[-1]} / {servers[0].split()[-1]}, claims/s"] = (
                row[f"claims/s, {servers[-1]}"] / row[f"claims/s, {servers[0]}"])
        # the servers whose race at this point was CPU-bound: those figures are this machine's scheduler
        row[CPU_BOUND_ON] = ", ".join(server.split()[-1] for server in servers  # == 1: an unmarked NaN is not
                                      if (strategy, worker_count, server) in keyed.index and "cpu_bound" in keyed
                                      and keyed.loc[(strategy, worker_count, server), "cpu_bound"] == 1)
        rows.append(row)
    order = {name: i for i, name in enumerate(STRATEGY_ORDER)}
    return pd.DataFrame(rows).sort_values(["strategy", "workers"], key=lambda c: c.map(order) if c.name ==
                                          "strategy" else c).reset_index(drop=True)


DUPLICATES_PER_RACE = "jobs claimed twice+, most in a race"
CPU_BOUND_AT = "CPU-bound at"
WHICH_CLAIM_COLUMNS = ("strategy", SERVER, INDEX, "races", DUPLICATES_PER_RACE, "claims/s, low", "claims/s, high",
                       "time to get a job, p50", "time to get a job, p99", "wasted attempts per win", "lock waits",
                       CPU_BOUND_AT)


def which_claim(summary: pd.DataFrame) -> tuple[pd.DataFrame, int, int]:
    """"Which claim should I use": for every strategy, on every server and with and without the partial index
    raced for any strategy, its correctness and costs; NaN (a dash) where it was not raced under that condition.

    Jobs claimed twice+ is the most in one race of the strategy under that condition (a sum would grow with the
    number of races a row has), beside that number; claims per second at the fewest and the most workers above one
    that every raced row shares (low, high), high being the most at which no row was CPU-bound where there is
    one, else the one at which the fewest rows were; the time to get a job, the attempts wasted per win (lost races
    and aborted transactions) and the share of samples waiting on a row or transaction lock at high; and the worker counts of the row's figures whose point was
    CPU-bound (harness.server.activity.cpu_bound), which measure this machine's scheduler. Returns (table, low, high).
    """
    columns = list(WHICH_CLAIM_COLUMNS)
    if not len(summary):
        return pd.DataFrame(columns=columns), 0, 0
    runs = with_conditions(summary)
    runs = runs.assign(strategy=runs["strategy"].astype(str))
    points = conditions(summary)
    points = points.assign(strategy=points["strategy"].astype(str))
    groups = {key: set(int(w) for w in frame["worker_count"] if int(w) > 1)
              for key, frame in points.groupby(["strategy", SERVER, INDEX])}
    shared = set.intersection(*groups.values()) if groups else set()
    everything = set.union(*groups.values()) if groups else set()
    bound = (points["cpu_bound"].fillna(False).astype(bool) if "cpu_bound" in points
             else pd.Series(False, index=points.index))
    if shared:
        # per shared worker count, how many rows were CPU-bound there: where none is free of the mark, the figures
        # are read where the fewest are (the most workers among those), not where the most are
        bound_rows = {w: int((bound & (points["worker_count"] == w)).sum()) for w in shared}
        free = [w for w in shared if not bound_rows[w]]
        low = min(shared)
        high = max(free) if free else min(shared, key=lambda w: (bound_rows[w], -w))
    else:
        low, high = min(everything or {0}), max(everything or {0})
    servers = sorted(runs[SERVER].unique(), key=lambda label: int(label.split()[-1]))
    indexes = [label for label in INDEX_LABELS.values()]
    strategies = [name for name in STRATEGY_ORDER if name in set(runs["strategy"])]
    rows = []
    for strategy in strategies:
        for server in servers:
            for index in indexes:
                at = points[(points["strategy"] == strategy) & (points[SERVER] == server) & (points[INDEX] == index)]
                raced = runs[(runs["strategy"] == strategy) & (runs[SERVER] == server) & (runs[INDEX] == index)]
                row = {"strategy": strategy, SERVER: server, INDEX: index}
                if not len(raced):
                    rows.append(row)
                    continue

                def figure(column, workers):
                    hit = at[at["worker_count"] == workers]
                    return float(hit[column].iloc[0]) if len(hit) and column in hit else np.nan

                wasted = np.nansum([figure("losses_per_win", high), figure("aborts_per_win", high)])
                shares = wait_share_table(raced)
                lock = shares[(shares["worker_count"] == high)][LOCK_WAIT] if len(shares) else pd.Series(dtype=float)
                bound_here = [w for w in sorted({low, high}) if bound[at.index[at["worker_count"] == w]].any()]
                row.update({"races": int(len(raced)), DUPLICATES_PER_RACE: int(raced["duplicate_jobs"].max()),
                            CPU_BOUND_AT: ", ".join(str(w) for w in bound_here),
                            "claims/s, low": figure("claims_per_second", low),
                            "claims/s, high": figure("claims_per_second", high),
                            "time to get a job, p50": figure("time_to_job_p50_ms", high),
                            "time to get a job, p99": figure("time_to_job_p99_ms", high),
                            "wasted attempts per win": wasted if not np.isnan(figure("claims_per_second", high))
                            else np.nan,
                            "lock waits": float(lock.iloc[0]) if len(lock) else np.nan})
                rows.append(row)
    table = pd.DataFrame(rows, columns=columns)
    return table, low, high


def claim_sections(runs: dict, sweep: pd.DataFrame, others: pd.DataFrame | None,
                   latency: pd.DataFrame | None) -> ClaimSections:
    """The frames and facts of the sections on how to claim, from the report's runs, reusing the summaries
    already loaded: the sweep's races, the other strategies' and the ones behind a round trip."""
    latency = by_round_trip(latency) if latency is not None else pd.DataFrame()
    indexed = race_summary(runs_of(runs, "indexed_race"))
    newer = race_summary(runs_of(runs, "pg18_race"))
    index_points = conditions(indexed)
    unindexed, newer_unindexed = (frame[~frame["partial_index"].astype(bool)] if len(frame) else frame
                                  for frame in (indexed, newer))
    # the server comparison is made without the index, as the original raced; the closing table has both arms
    both_servers = pd.concat([frame for frame in (unindexed, newer_unindexed) if len(frame)], ignore_index=True) \
        if len(unindexed) or len(newer_unindexed) else pd.DataFrame()
    server_points = conditions(both_servers)
    others = others if others is not None else pd.DataFrame()
    other_conditions = race_summary([*runs_of(runs, "others_indexed"), *runs_of(runs, "pg18_others")])
    frames = [frame for frame in (others, other_conditions, indexed, newer) if len(frame)]
    every = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    table, low, high = which_claim(every)
    facts = {**latency_facts(latency), **comparison_facts(indexed, newer_unindexed, every, low, high),
             "indexed_size_phrase": size_phrase(indexed, sweep)}
    return ClaimSections(facts=facts, latency=latency, index_points=index_points, server_points=server_points,
                         server_table=server_comparison(server_points), which_claim=table, which_low=low,
                         which_high=high)


def size_phrase(indexed: pd.DataFrame, sweep: pd.DataFrame) -> str:
    """How the indexed race's drains compare with the sweep's, as the prose says it."""
    if not len(indexed) or sweep is None or not len(sweep):
        return "Both arms drain queues of the same size, so they compare with each other"
    mine, theirs = int(indexed["job_count"].max()), int(sweep["job_count"].max())
    if mine < theirs:
        return (f"These drains are shorter than the sweep's {count(theirs)} jobs, so that both arms fit in the "
                "build; both arms have the same size, so they compare with each other rather than with the sweep")
    return f"These drains are the sweep's size, {count(theirs)} jobs, so the arm without the index is the sweep's own runs"


def comparison_facts(indexed: pd.DataFrame, newer: pd.DataFrame, every: pd.DataFrame, low: int, high: int) -> dict:
    """The setup of the indexed race, the second server and the closing table, as the prose names it."""
    def setup(frame, prefix):
        if not len(frame):
            return {f"{prefix}_job_count": MISSING, f"{prefix}_worker_list": MISSING, f"{prefix}_repeats": MISSING}
        repeats = int(frame["repeat"].nunique())
        return {f"{prefix}_job_count": count(frame["job_count"].max()),
                f"{prefix}_worker_list": _list_text(sorted({int(w) for w in frame["worker_count"]})),
                f"{prefix}_repeats": f"{count(repeats)} race{'' if repeats == 1 else 's'}"}

    def at_top(frame, **where):
        """Each original strategy's claims per second at the frame's most workers, under a condition."""
        if not len(frame):
            return {}, 0
        top = int(frame["worker_count"].max())
        points = over_repeats(frame[np.logical_and.reduce([frame[k] == v for k, v in where.items()])]
                              if where else frame)
        return {name: _point(points, name, "claims_per_second", worker_count=top)
                for name in ("naive", "guarded", "skip_locked")}, top

    without, top = at_top(indexed, partial_index=False) if len(indexed) else ({}, 0)
    with_index, _ = at_top(indexed, partial_index=True) if len(indexed) else ({}, 0)
    on_newer, newer_top = at_top(newer)
    facts = {"indexed_top": count(top) if top else MISSING, "newer_top": count(newer_top) if newer_top else MISSING}
    for name in ("naive", "guarded", "skip_locked"):
        facts[f"indexed_{name}_without"] = rate(without.get(name, np.nan))
        facts[f"indexed_{name}_with"] = rate(with_index.get(name, np.nan))
        older = without.get(name, np.nan) if newer_top == top else np.nan
        facts[f"newer_{name}_rate"] = rate(on_newer.get(name, np.nan))
        facts[f"older_{name}_rate"] = rate(older)
    job_counts = sorted({int(j) for j in every["job_count"]}) if len(every) else []
    return {**facts, **setup(indexed, "indexed"), **setup(newer, "newer_server"),
            "newer_server_version": server_label(newer["pg_version"].iloc[0]) if len(newer) else MISSING,
            "older_server_version": server_label(indexed["pg_version"].iloc[0]) if len(indexed) else MISSING,
            "which_low": count(low) if low else MISSING, "which_high": count(high) if high else MISSING,
            "which_rate_workers": MISSING if not high else count(high) if low == high else
            f"{count(low)} and at {count(high)}",
            "which_job_counts": _list_text(job_counts, count) if job_counts else MISSING}


# --------------------------------------------------------------------------- their charts


def round_trip_chart(long: pd.DataFrame) -> alt.FacetChart:
    """C6: against the network round trip, naive's claims beyond each job's first, guarded's lost races per win,
    and every strategy's claims per second (round_trip_long), one panel each with its own scale.

    The round trip is the axis, so a CPU-bound point cannot sit in a band of worker counts: each one sits on a disc
    of the CPU-bound grey instead, and the title says what the disc means."""
    data = plain_frame(long)
    if "cpu_bound" not in data:
        data = data.assign(cpu_bound=None)
    data = data.assign(cpu_bound=data["cpu_bound"].map(lambda v: v is True or v == 1))
    measures = in_order(data["measure"], ROUND_TRIP_MEASURES)
    ticks = sorted({float(v) for v in data["rtt_ms"]})
    base = alt.Chart().encode(
        x=alt.X("rtt_ms:Q", title="round trip (ms)", scale=alt.Scale(type="symlog", nice=False),
                axis=alt.Axis(values=ticks, grid=False)),
        color=strategy_colour(data["strategy"]))
    tooltip = [alt.Tooltip("strategy:N"), alt.Tooltip("measure:N"), alt.Tooltip("rtt_ms:Q", title="round trip, ms"),
               alt.Tooltip("worker_count:Q", title="workers"), alt.Tooltip("value:Q", format=",.2f"),
               REPEATS_TOOLTIP]
    y = alt.Y("value:Q", title=None)
    layers = [base.mark_line().encode(y=y, detail="worker_count:N"),
              base.mark_point(filled=True, size=40, opacity=1).encode(
                  y=y, tooltip=tooltip, shape=alt.Shape("worker_count:N", title="workers"))]
    if has_repeats(data):
        layers.insert(0, spread_rules(base, "low", "high", detail="worker_count:N"))
    on_discs = bool(data["cpu_bound"].any())
    if on_discs:  # underneath everything: a wide grey disc behind each CPU-bound point
        layers.insert(0, base.transform_filter("datum.cpu_bound").mark_point(
            filled=True, size=260, opacity=0.55, color=CPU_BOUND_COLOUR).encode(
            y=y, color=alt.value(CPU_BOUND_COLOUR), tooltip=[alt.Tooltip("worker_count:Q", title="CPU-bound at workers"),
                                                            alt.Tooltip("rtt_ms:Q", title="round trip, ms")]))
    workers = sorted({int(w) for w in data["worker_count"]})
    return alt.layer(*layers, data=data).properties(width=WIDTH // 3 - 10, height=HEIGHT - 80).facet(
        column=alt.Column("measure:N", title=None, sort=measures, header=alt.Header(labelFontSize=12,
                                                                                    labelLimit=WIDTH // 3 + 40)),
    ).resolve_scale(y="independent").properties(title=chart_title(
        "Behind a network round trip",
        f"{listed_names(workers)} workers; the round trip is added by a delay proxy between each worker and the server; "
        "extra claims: the audit's claims beyond each job's first", spread_note(data),
        CPU_BOUND_DISC_NOTE if on_discs else ""))


def side_by_side_chart(long: pd.DataFrame, title: str) -> alt.FacetChart:
    """The same races under two conditions (side_by_side_long: with and without the partial index, or one
    server against another): claims per second and a win's p99 against workers, the condition as the dash."""
    data = plain_frame(long)
    conditions = sorted(data["condition"].unique(), key=str)
    base = alt.Chart().encode(x=workers_axis(data["worker_count"]), color=strategy_colour(data["strategy"]))
    tooltip = [alt.Tooltip("strategy:N"), alt.Tooltip("condition:N", title="raced"),
               alt.Tooltip("worker_count:Q", title="workers"), alt.Tooltip("measure:N"),
               alt.Tooltip("value:Q", format=",.2f"), REPEATS_TOOLTIP]
    y = alt.Y("value:Q", title=None, scale=alt.Scale(type="log"))
    layers = [dashed_lines(base, y, alt.StrokeDash("condition:N", title=None, sort=conditions,
                                                    legend=dash_legend(orient="bottom", direction="vertical")),
                            tooltip)]
    if has_repeats(data):
        layers.insert(0, spread_rules(base, "low", "high", detail="condition:N"))
    bound = sorted({int(w) for w in data.loc[data["cpu_bound"].fillna(False).astype(bool), "worker_count"]}) \
        if "cpu_bound" in data else []
    data, edges = facet_band(base, data, bound, layers)
    measures = in_order(data["measure"], SIDE_BY_SIDE_MEASURES)
    return alt.layer(*layers, data=data).properties(width=WIDTH // 2 - 20, height=HEIGHT - 60).facet(
        column=alt.Column("measure:N", title=None, sort=measures, header=alt.Header(labelFontSize=13)),
    ).resolve_scale(y="independent").properties(title=chart_title(title, spread_note(data),
                                                             CPU_BOUND_NOTE if edges is not None else ""))


# --------------------------------------------------------------------------- their tables


def _dash_or(fmt):
    """fmt for a measured value; the dash where the figure does not exist or was not raced."""
    return lambda value: DASH if missing(value) else fmt(value)


def server_table(frame: pd.DataFrame, caption: str | None = None) -> str:
    """server_comparison() as HTML: claims/s, lost per win and p99 per server, and the ratio."""
    formats = {}
    for column in frame.columns:
        if column.startswith("claims/s,"):
            formats[column] = _dash_or(lambda v: number(v, 0))
        elif column.startswith("lost per win,") or column.endswith(", claims/s"):
            formats[column] = _dash_or(lambda v: number(v, 2))
        elif column.startswith("p99,"):
            formats[column] = _dash_or(ms)
    return table(frame, caption=caption, formats=formats, css_class="wide")


def which_claim_table(frame: pd.DataFrame, low: int, high: int, caption: str | None = None) -> str:
    """which_claim() as HTML, its low and high worker counts named in the headers; a dash wherever a
    strategy was not raced under that condition."""
    two = _dash_or(lambda v: number(v, 2))
    formats = {"races": _dash_or(count), DUPLICATES_PER_RACE: _dash_or(count),
               "claims/s, low": _dash_or(lambda v: number(v, 0)),
               "claims/s, high": _dash_or(lambda v: number(v, 0)), "time to get a job, p50": _dash_or(ms),
               "time to get a job, p99": _dash_or(ms), "wasted attempts per win": two,
               "lock waits": _dash_or(percent)}
    if low == high:  # one worker count shared by every row: one column
        frame = frame.drop(columns=["claims/s, high"])
    named = {"claims/s, low": f"claims/s, {low} workers", "claims/s, high": f"claims/s, {high} workers"}
    formats = {named.get(column, column): fmt for column, fmt in formats.items()}
    return table(frame.rename(columns=named), caption=caption, formats=formats, css_class="wide")
