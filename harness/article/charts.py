"""One function per chart: the data arrives prepared (harness.article.analysis), the chart is the return value.

Charts carry their data into the page, so every function takes aggregated
frames, never raw attempts. Colours stay the same for a strategy everywhere.
"""

from __future__ import annotations

import altair as alt
import pandas as pd

from harness.article.analysis import STRATEGY_ORDER

WIDTH = 560
HEIGHT = 300
STRATEGY_COLOURS = ("#c0392b", "#2a6fb0", "#2e8b57")  # naive red, guarded blue, skip_locked green
STRATEGY_SCALE = alt.Scale(domain=list(STRATEGY_ORDER), range=list(STRATEGY_COLOURS))
INDEX_COLOURS = alt.Scale(domain=["without partial index", "with partial index"], range=["#8e44ad", "#e67e22"])


def _strategy_colour(legend_title: str = "strategy") -> alt.Color:
    return alt.Color("strategy:N", scale=STRATEGY_SCALE, title=legend_title, sort=list(STRATEGY_ORDER),
                     legend=alt.Legend(symbolOpacity=1))


def _dash_legend(**options) -> alt.Legend:
    """A legend whose symbols are line segments, so the dash pattern shows."""
    return alt.Legend(symbolType="stroke", symbolStrokeWidth=2, symbolStrokeColor="#444", symbolSize=300,
                      labelLimit=400, **options)


def _workers_axis(values) -> alt.X:
    ticks = sorted({int(v) for v in values})
    log = len(ticks) > 1 and max(ticks) / max(min(ticks), 1) >= 8
    return alt.X("worker_count:Q", title="workers",
                 scale=alt.Scale(type="log" if log else "linear", nice=False),
                 axis=alt.Axis(values=ticks, format="d", grid=False))


def _dashed_lines(base: alt.Chart, y, stroke_dash: alt.StrokeDash, tooltip) -> alt.LayerChart:
    """Lines told apart by dash pattern, with points on top (separate layers, so the legend shows the dashes)."""
    return alt.layer(base.mark_line().encode(y=y, strokeDash=stroke_dash),
                     base.mark_point(filled=True, size=40, opacity=1).encode(y=y, tooltip=tooltip))


def _plain(frame: pd.DataFrame) -> pd.DataFrame:
    """Categoricals and numpy scalars as plain values, so the spec is JSON."""
    out = frame.copy()
    for column in out.columns:
        if isinstance(out[column].dtype, pd.CategoricalDtype):
            out[column] = out[column].astype(str)
    return out


def duplicates_chart(by_workers: pd.DataFrame) -> alt.HConcatChart:
    """F1, F2: jobs the audit shows claimed more than once, and the claims beyond each job's first."""
    data = _plain(by_workers)[["strategy", "worker_count", "job_count", "repeats", "duplicate_jobs",
                               "duplicate_jobs_min", "duplicate_jobs_max", "extra_claims", "extra_claims_min",
                               "extra_claims_max"]]
    tooltip = [alt.Tooltip("strategy:N"), alt.Tooltip("worker_count:Q", title="workers"),
               alt.Tooltip("duplicate_jobs:Q", title="jobs claimed twice or more", format=","),
               alt.Tooltip("extra_claims:Q", title="claims beyond the first", format=","),
               alt.Tooltip("job_count:Q", title="jobs queued", format=","),
               alt.Tooltip("repeats:Q", title="repeats (median shown)")]
    base = alt.Chart(data).encode(x=_workers_axis(data["worker_count"]), color=_strategy_colour())
    panels = []
    for column, title, scale in (("duplicate_jobs", "jobs claimed more than once", alt.Scale()),
                                 ("extra_claims", "claims beyond each job's first", alt.Scale(type="symlog"))):
        line = base.mark_line(point=True).encode(y=alt.Y(f"{column}:Q", title=title, scale=scale), tooltip=tooltip)
        spread = base.mark_rule(strokeWidth=2, opacity=0.5).encode(y=f"{column}_min:Q", y2=f"{column}_max:Q")
        panels.append((spread + line).properties(width=WIDTH // 2 - 40, height=HEIGHT - 40))
    return alt.hconcat(*panels).properties(title="Jobs handed to more than one worker (from the audit)")


def throughput_chart(by_workers: pd.DataFrame) -> alt.Chart:
    """F3, F6, F7: claims per second; naive's counts every duplicate as work, so its distinct jobs/s is drawn too."""
    data = _plain(by_workers)
    counted = data.assign(measure="claims per second (as the workers count them)",
                          per_second=data["claims_per_second"], low=data["claims_per_second_min"],
                          high=data["claims_per_second_max"])
    distinct = data[data["strategy"] == "naive"].assign(
        measure="naive: distinct jobs per second", per_second=lambda f: f["unique_jobs_per_second"],
        low=lambda f: f["unique_jobs_per_second_min"], high=lambda f: f["unique_jobs_per_second_max"])
    long = pd.concat([counted, distinct], ignore_index=True)[
        ["strategy", "worker_count", "measure", "per_second", "low", "high", "attempts_per_second", "repeats"]]
    base = alt.Chart(long).encode(x=_workers_axis(long["worker_count"]), color=_strategy_colour())
    lines = _dashed_lines(
        base, alt.Y("per_second:Q", title="per second", scale=alt.Scale(type="log")),
        alt.StrokeDash("measure:N", title=None, legend=_dash_legend(orient="bottom", direction="vertical")),
        [alt.Tooltip("strategy:N"), alt.Tooltip("worker_count:Q", title="workers"),
         alt.Tooltip("measure:N"), alt.Tooltip("per_second:Q", title="per second", format=",.0f"),
         alt.Tooltip("attempts_per_second:Q", title="attempts per second", format=",.0f"),
         alt.Tooltip("repeats:Q", title="repeats (median shown)")],
    )
    spread = base.mark_rule(strokeWidth=2, opacity=0.5).encode(y="low:Q", y2="high:Q", detail="measure:N")
    return (spread + lines).properties(width=WIDTH, height=HEIGHT, title="Claims per second")


def losses_chart(by_workers: pd.DataFrame) -> alt.Chart:
    """F5: lost races per win (guarded; the other two never lose, they cannot tell)."""
    data = _plain(by_workers)
    data = data[data["strategy"] == "guarded"][["strategy", "worker_count", "losses_per_win", "losses_per_win_min",
                                               "losses_per_win_max", "lost", "wins", "repeats"]]
    base = alt.Chart(data).encode(x=_workers_axis(data["worker_count"]), color=_strategy_colour())
    line = base.mark_line(point=True).encode(
        y=alt.Y("losses_per_win:Q", title="lost races per win"),
        tooltip=[alt.Tooltip("worker_count:Q", title="workers"),
                 alt.Tooltip("losses_per_win:Q", title="lost races per win", format=",.2f"),
                 alt.Tooltip("lost:Q", title="lost races", format=","), alt.Tooltip("wins:Q", format=","),
                 alt.Tooltip("repeats:Q", title="repeats (median shown)")],
    )
    spread = base.mark_rule(strokeWidth=2, opacity=0.5).encode(y="losses_per_win_min:Q", y2="losses_per_win_max:Q")
    return (spread + line).properties(width=WIDTH, height=HEIGHT, title="Guarded: lost races per win")


def latency_chart(by_workers: pd.DataFrame) -> alt.Chart:
    """F6, F8: p50 and p99 of winning claims, with the min-max over repeats as a band."""
    data = _plain(by_workers)
    parts = []
    for percentile in ("p50", "p99"):
        parts.append(pd.DataFrame({
            "strategy": data["strategy"], "worker_count": data["worker_count"], "percentile": percentile,
            "ms": data[f"{percentile}_ms"], "low": data[f"{percentile}_ms_min"], "high": data[f"{percentile}_ms_max"],
            "repeats": data["repeats"]}))
    long = pd.concat(parts, ignore_index=True)
    base = alt.Chart(long).encode(x=_workers_axis(long["worker_count"]), color=_strategy_colour())
    band = base.mark_area(opacity=0.15).encode(y="low:Q", y2="high:Q", detail="percentile:N")
    lines = _dashed_lines(
        base, alt.Y("ms:Q", title="latency of a winning claim (ms)", scale=alt.Scale(type="log")),
        alt.StrokeDash("percentile:N", sort=["p50", "p99"], title="percentile", legend=_dash_legend()),
        [alt.Tooltip("strategy:N"), alt.Tooltip("worker_count:Q", title="workers"),
         alt.Tooltip("percentile:N"), alt.Tooltip("ms:Q", title="ms (median over repeats)", format=",.3f"),
         alt.Tooltip("low:Q", title="lowest repeat", format=",.3f"),
         alt.Tooltip("high:Q", title="highest repeat", format=",.3f")],
    )
    return (band + lines).properties(width=WIDTH, height=HEIGHT, title="Latency of winning claims")


WAIT_MEASURES = ["winning claim latency", "time to get a job"]
WAIT_SCALE = alt.Scale(domain=WAIT_MEASURES, range=["#2a6fb0", "#d35400"])


def wait_quantiles_chart(quantiles: pd.DataFrame) -> alt.Chart:
    """C4: guarded's p50 and p99 of the winning statement beside the whole wait for a job."""
    data = quantiles[quantiles["percentile"].isin(["p50", "p99"])][["worker_count", "measure", "percentile", "ms"]]
    base = alt.Chart(data).encode(x=_workers_axis(data["worker_count"]),
                                  color=alt.Color("measure:N", scale=WAIT_SCALE, title=None))
    return _dashed_lines(
        base, alt.Y("ms:Q", title="ms", scale=alt.Scale(type="log")),
        alt.StrokeDash("percentile:N", sort=["p50", "p99"], title="percentile", legend=_dash_legend()),
        [alt.Tooltip("measure:N"), alt.Tooltip("worker_count:Q", title="workers"),
         alt.Tooltip("percentile:N"), alt.Tooltip("ms:Q", format=",.3f")],
    ).properties(width=WIDTH, height=HEIGHT, title="Guarded: a winning claim vs the wait for a job")


def wait_distribution_chart(distribution: pd.DataFrame, worker_count: int) -> alt.Chart:
    """C4: the two distributions at one worker count, as cumulative curves."""
    data = distribution[["measure", "fraction", "ms"]]
    return alt.Chart(data).mark_line(interpolate="step-after").encode(
        x=alt.X("ms:Q", title="ms", scale=alt.Scale(type="log")),
        y=alt.Y("fraction:Q", title="share of wins at or below", axis=alt.Axis(format="%")),
        color=alt.Color("measure:N", scale=WAIT_SCALE, title=None),
        tooltip=[alt.Tooltip("measure:N"), alt.Tooltip("fraction:Q", title="quantile", format=".1%"),
                 alt.Tooltip("ms:Q", format=",.3f")],
    ).properties(width=WIDTH, height=HEIGHT, title=f"Guarded at {worker_count} workers: cumulative distribution")


RESULT_SCALE = alt.Scale(domain=["won", "won a job another worker also won", "lost"],
                         range=["#2e8b57", "#c0392b", "#9aa0a6"])


def slow_race_chart(timeline: pd.DataFrame) -> alt.LayerChart:
    """The slowed-down race: each attempt as its read (thin) and its write (thick), results marked at the write's end;
    a radio picks the strategy. The gap between the two bars is the pause, where the race window is."""
    data = _plain(timeline)[["strategy", "worker", "attempt_seq", "start_ms", "read_end_ms", "write_start_ms",
                             "end_ms", "outcome", "job_id", "times_claimed", "result"]]
    data["job_id"] = data["job_id"].astype("float").astype("Int64").astype(str).replace("<NA>", "")
    strategies = [s for s in STRATEGY_ORDER if s in set(data["strategy"])]
    choice = alt.param(name="strategy_choice", value=strategies[0],
                       bind=alt.binding_radio(options=strategies, name="strategy "))
    base = alt.Chart(data).transform_filter(alt.datum.strategy == choice).encode(
        y=alt.Y("worker:N", title=None, sort="ascending"),
    )
    tooltip = [alt.Tooltip("worker:N"), alt.Tooltip("attempt_seq:Q", title="attempt"),
               alt.Tooltip("job_id:N", title="job"), alt.Tooltip("result:N"),
               alt.Tooltip("times_claimed:Q", title="times the server flipped this job"),
               alt.Tooltip("start_ms:Q", title="read sent (ms)", format=",.1f"),
               alt.Tooltip("read_end_ms:Q", title="read answered (ms)", format=",.1f"),
               alt.Tooltip("write_start_ms:Q", title="write sent (ms)", format=",.1f"),
               alt.Tooltip("end_ms:Q", title="write answered (ms)", format=",.1f")]
    colour = alt.Color("result:N", scale=RESULT_SCALE, title=None, legend=alt.Legend(orient="bottom"))
    reads = base.transform_filter("isValid(datum.read_end_ms)").mark_rule(strokeWidth=2, color="#9aa0a6").encode(
        x=alt.X("start_ms:Q", title="ms since the start barrier"), x2="read_end_ms:Q", tooltip=tooltip)
    writes = base.mark_bar(height=9, opacity=0.85).encode(
        x="write_start_ms:Q", x2="end_ms:Q", color=colour, tooltip=tooltip)
    labels = base.mark_text(dy=-12, fontSize=9, color="#444").encode(
        x="end_ms:Q", text="job_id:N", tooltip=tooltip)
    return (reads + writes + labels).add_params(choice).properties(
        width=WIDTH, height=180, title="A few workers, one small queue, slowed down: each read (grey) and write")


# --------------------------------------------------------------------------- plans


def _index_colour() -> alt.Color:
    return alt.Color("index:N", scale=INDEX_COLOURS, title=None, legend=alt.Legend(orient="bottom"))


def _state_dash() -> alt.StrokeDash:
    from harness.experiments.plans import TABLE_STATES  # only drawn when harness.experiments.plans is in the build

    return alt.StrokeDash("table:N", title="table", sort=[state.label for state in TABLE_STATES],
                          legend=_dash_legend(orient="bottom", direction="vertical"))


def _plan_tooltip():
    return [alt.Tooltip("job_count:Q", title="jobs", format=","),
            alt.Tooltip("consumed_percent:Q", title="consumed (%)", format=".0f"),
            alt.Tooltip("index:N"), alt.Tooltip("table:N"),
            alt.Tooltip("buffers:Q", title="shared buffers", format=","),
            alt.Tooltip("rows_removed_by_filter:Q", title="rows removed by filter", format=","),
            alt.Tooltip("execution_ms:Q", title="execution (ms, median)", format=",.3f"),
            alt.Tooltip("index_used:N", title="index scanned")]


def _plan_fill_level_lines(plan_points: pd.DataFrame, field: str, axis_title: str, title: str) -> alt.FacetChart:
    """One skip_locked measure against fill level, one panel per queue size, a line per index setup."""
    data = plan_points[["job_count", "consumed_percent", "index", "table", "buffers",
                        "rows_removed_by_filter", "execution_ms", "index_used"]]
    base = alt.Chart(data).encode(x=alt.X("consumed_percent:Q", title="share of the queue already consumed (%)"),
                                  color=_index_colour())
    y = alt.Y(f"{field}:Q", title=axis_title, scale=alt.Scale(type="log"))
    return _dashed_lines(base, y, _state_dash(), _plan_tooltip()).properties(
        width=WIDTH // 2 - 20, height=240).facet(
        column=alt.Column("job_count:O", title="jobs in the table", header=alt.Header(format=",")),
    ).properties(title=title)


def plan_buffers_chart(plan_points: pd.DataFrame) -> alt.FacetChart:
    """F9: buffers the skip_locked claim touches as the queue drains, with and without the partial index."""
    return _plan_fill_level_lines(plan_points, "buffers", "shared buffers per claim",
                                  "skip_locked claim: buffers touched vs fill level")


def plan_time_chart(plan_points: pd.DataFrame) -> alt.FacetChart:
    """F9: execution time of the skip_locked claim (EXPLAIN ANALYZE, median) against fill level."""
    return _plan_fill_level_lines(plan_points, "execution_ms", "execution time (ms)",
                                  "skip_locked claim: execution time vs fill level")


# --------------------------------------------------------------------------- churn


def hot_rate_chart(churn: pd.DataFrame) -> alt.FacetChart:
    """F12, F13, C9: share of HOT updates by fillfactor, partial index, row width and how the queue was drained."""
    data = churn[["fillfactor", "index", "payload_bytes", "drained_by", "updates", "hot_updates",
                  "newpage_updates", "hot_fraction", "dead_tuples", "heap_pages_before", "heap_pages"]]
    order = sorted(data["drained_by"].unique(), key=lambda m: (m.startswith("one bulk"), m))
    base = alt.Chart(data).encode(
        x=alt.X("fillfactor:Q", title="fillfactor", scale=alt.Scale(reverse=True, zero=False),
                axis=alt.Axis(values=sorted(data["fillfactor"].unique().tolist()))),
        color=_index_colour())
    return _dashed_lines(
        base, alt.Y("hot_fraction:Q", title="HOT updates", axis=alt.Axis(format="%"), scale=alt.Scale(domain=[0, 1])),
        alt.StrokeDash("drained_by:N", title="drained by", sort=order,
                       legend=_dash_legend(orient="bottom", direction="vertical")),
        [alt.Tooltip("fillfactor:Q"), alt.Tooltip("index:N"),
         alt.Tooltip("payload_bytes:Q", title="payload (bytes)"), alt.Tooltip("drained_by:N", title="drained by"),
         alt.Tooltip("hot_updates:Q", title="HOT updates", format=","),
         alt.Tooltip("updates:Q", title="updates", format=","),
         alt.Tooltip("newpage_updates:Q", title="moved to another page", format=","),
         alt.Tooltip("heap_pages_before:Q", title="heap pages before"),
         alt.Tooltip("heap_pages:Q", title="heap pages after")],
    ).properties(width=WIDTH // 2 - 20, height=240).facet(
        column=alt.Column("payload_bytes:O", title="payload per row (bytes)"),
    ).properties(title="Share of status updates that were HOT")


def pruning_chart(pruning: pd.DataFrame) -> alt.Chart:
    """F11: n_dead_tup after the claims, once settled and after a read, with autovacuum on and off."""
    data = pruning[["autovacuum_label", "phase_label", "phase_order", "dead_tuples", "live_tuples", "updates",
                    "hot_updates", "autovacuum_runs", "autoanalyze_runs", "seconds_after_claims"]]
    phases = [p for p in PHASE_ORDER if p in set(data["phase_label"])]
    return alt.Chart(data).mark_bar().encode(
        x=alt.X("phase_label:N", title=None, sort=phases, axis=alt.Axis(labelAngle=0)),
        xOffset=alt.XOffset("autovacuum_label:N"),
        y=alt.Y("dead_tuples:Q", title="n_dead_tup"),
        color=alt.Color("autovacuum_label:N", title=None,
                        scale=alt.Scale(domain=["autovacuum on (default)", "autovacuum off for the table"],
                                        range=["#2a6fb0", "#9aa0a6"]),
                        legend=alt.Legend(orient="bottom")),
        tooltip=[alt.Tooltip("autovacuum_label:N", title="arm"), alt.Tooltip("phase_label:N", title="when"),
                 alt.Tooltip("dead_tuples:Q", title="n_dead_tup", format=","),
                 alt.Tooltip("updates:Q", title="status updates", format=","),
                 alt.Tooltip("hot_updates:Q", title="of them HOT", format=","),
                 alt.Tooltip("autovacuum_runs:Q", title="autovacuum runs"),
                 alt.Tooltip("autoanalyze_runs:Q", title="autoanalyze runs"),
                 alt.Tooltip("seconds_after_claims:Q", title="seconds after the claims", format=".1f")],
    ).properties(width=WIDTH, height=HEIGHT - 60, title="Dead row versions the statistics report")


PHASE_ORDER = ["right after the claims", "once the statistics settled", "after one full read"]


# --------------------------------------------------------------------------- bench


def bench_ratio_chart(bench: pd.DataFrame, band: tuple[float, float] = (0.85, 1.15)) -> alt.LayerChart:
    """Harness claims/s over pgbench's (one thread per client) on the same SQL, per strategy and worker count,
    the spread over pairs as rules, parity and the target band drawn."""
    data = _plain(bench)[["strategy", "worker_count", "pairs", "ratio", "ratio_min", "ratio_max",
                          "harness_claims_per_second", "pgbench_claims_per_second"]]
    base = alt.Chart(data).encode(
        x=alt.X("worker_count:O", title="workers"),
        xOffset=alt.XOffset("strategy:N", sort=list(STRATEGY_ORDER)),
        color=_strategy_colour(),
    )
    tooltip = [alt.Tooltip("strategy:N"), alt.Tooltip("worker_count:Q", title="workers"),
               alt.Tooltip("ratio:Q", title="harness / pgbench (median)", format=".2f"),
               alt.Tooltip("ratio_min:Q", title="lowest pair", format=".2f"),
               alt.Tooltip("ratio_max:Q", title="highest pair", format=".2f"),
               alt.Tooltip("harness_claims_per_second:Q", title="harness claims/s", format=",.0f"),
               alt.Tooltip("pgbench_claims_per_second:Q", title="pgbench claims/s", format=",.0f"),
               alt.Tooltip("pairs:Q")]
    low = min(band[0] - 0.1, float(data["ratio_min"].min()) - 0.05)
    high = max(band[1] + 0.1, float(data["ratio_max"].max()) + 0.05)
    scale = alt.Scale(domain=[max(0.0, low), high])
    target = alt.Chart(pd.DataFrame({"low": [band[0]], "high": [band[1]], "label": ["target band"]})).mark_rect(
        color="#2e8b57", opacity=0.08).encode(y=alt.Y("low:Q", scale=scale), y2="high:Q",
                                              tooltip=[alt.Tooltip("label:N"), alt.Tooltip("low:Q", format=".2f"),
                                                       alt.Tooltip("high:Q", format=".2f")])
    parity = alt.Chart(pd.DataFrame({"y": [1.0]})).mark_rule(strokeDash=[4, 4], color="#777").encode(y="y:Q")
    points = base.mark_point(filled=True, size=90).encode(
        y=alt.Y("ratio:Q", title="harness claims/s ÷ pgbench claims/s", scale=scale), tooltip=tooltip)
    spread = base.mark_rule(strokeWidth=2).encode(y="ratio_min:Q", y2="ratio_max:Q", tooltip=tooltip)
    return alt.layer(target, parity, spread, points).properties(
        width=WIDTH, height=HEIGHT - 40, title="Is the harness the bottleneck? Its rate over pgbench's, same SQL")


WAIT_GROUP_COLOURS = alt.Scale(
    domain=["row or transaction lock", "other lock", "waiting for the client", "on a CPU or waiting for one",
            "other (I/O, IPC, ...)"],
    range=["#c0392b", "#e67e22", "#9aa0a6", "#2a6fb0", "#8e7cc3"])


def wait_share_chart(long: pd.DataFrame) -> alt.FacetChart:
    """Where the worker backends' time went, per worker count: shares of pg_stat_activity samples, stacked."""
    data = _plain(long)
    data = data[data["share"] > 0]
    drawn = [g for g in WAIT_GROUP_COLOURS.domain if g in set(data["wait"])]
    colours = alt.Scale(domain=drawn, range=[WAIT_GROUP_COLOURS.range[WAIT_GROUP_COLOURS.domain.index(g)]
                                            for g in drawn])
    return alt.Chart(data).mark_bar().encode(
        x=alt.X("worker_count:O", title="workers"),
        y=alt.Y("share:Q", title="share of sampled backend time", axis=alt.Axis(format="%"),
                scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("wait:N", scale=colours, title=None, sort=drawn, legend=alt.Legend(orient="bottom")),
        order=alt.Order("order:Q"),
        tooltip=[alt.Tooltip("strategy:N"), alt.Tooltip("worker_count:Q", title="workers"), alt.Tooltip("wait:N"),
                 alt.Tooltip("share:Q", format=".1%", title="share (median over repeats)")],
    ).properties(width=170, height=220).facet(
        column=alt.Column("strategy:N", sort=list(STRATEGY_ORDER), title=None)
    ).properties(title="Where the worker backends' time went (pg_stat_activity every 10 ms)")


def latency_by_fill_chart(by_fill: pd.DataFrame, worker_counts: list[int]) -> alt.FacetChart:
    """Wins' p99 by how far the queue had drained, at a few worker counts: a drain's p99 mixes these."""
    data = _plain(by_fill)
    data = data[data["worker_count"].isin(worker_counts)]
    return alt.Chart(data).mark_line(point=True).encode(
        x=alt.X("drained_to:Q", title="queue drained to", axis=alt.Axis(format="%")),
        y=alt.Y("p99_ms:Q", title="p99 of winning claims (ms)", scale=alt.Scale(type="log")),
        color=_strategy_colour(),
        tooltip=[alt.Tooltip("strategy:N"), alt.Tooltip("worker_count:Q", title="workers"),
                 alt.Tooltip("drained_to:Q", format=".0%", title="drained to"),
                 alt.Tooltip("p50_ms:Q", format=",.3f", title="p50 (ms)"),
                 alt.Tooltip("p99_ms:Q", format=",.3f", title="p99 (ms)")],
    ).properties(width=170, height=200).facet(
        column=alt.Column("worker_count:O", title="workers")
    ).properties(title="p99 of winning claims by how far the queue had drained")


def cpu_split_chart(long: pd.DataFrame) -> alt.FacetChart:
    """From /proc/<pid>/schedstat: the share of each backend's and worker process's window on a CPU and runnable."""
    data = _plain(long)
    data["side"] = data["measure"].str.split(" ").str[0].map({"backend": "backend", "worker": "worker process"})
    return alt.Chart(data).mark_line(point=True).encode(
        x=alt.X("worker_count:Q", title="workers", scale=alt.Scale(type="log")),
        y=alt.Y("share:Q", title="share of the window", axis=alt.Axis(format="%")),
        color=alt.Color("side:N", title=None, scale=alt.Scale(domain=["backend", "worker process"],
                                                              range=["#2a6fb0", "#d35400"]),
                        legend=alt.Legend(orient="bottom")),
        strokeDash=alt.StrokeDash("measure:N", title=None, legend=alt.Legend(orient="bottom", direction="vertical")),
        detail="measure:N",
        tooltip=[alt.Tooltip("strategy:N"), alt.Tooltip("worker_count:Q", title="workers"), alt.Tooltip("measure:N"),
                 alt.Tooltip("share:Q", format=".1%", title="share (median over repeats)")],
    ).properties(width=170, height=200).facet(
        column=alt.Column("strategy:N", sort=list(STRATEGY_ORDER), title=None)
    ).properties(title="On a CPU or waiting for one (/proc/<pid>/schedstat)")
