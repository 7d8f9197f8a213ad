"""The race sweep's charts: duplicates, throughput, lost races, latency, the wait for a job and where the
backends' time went, each from the sweep as loaded (harness.article.sections.race_sweep). A part: the races'
notebook and the article draw them."""

from __future__ import annotations

import altair as alt
import pandas as pd

from harness.article.charts import (CPU_BOUND_NOTE, HEIGHT, REPEATS_TOOLTIP, WIDTH, band_label_note, band_note,
                                    chart_title, coinciding, cpu_bound_workers, dash_legend, dashed_lines, facet_band,
                                    fixed_scale, has_repeats, listed_names, plain_frame, repeats_said, spread_note,
                                    spread_rules, strategy_colour, with_band, workers_axis, workers_labelled)
from harness.article.labels import (CANNOT_LOSE, CLAIMS_PER_SECOND, CPU_STATE_ORDER, DISTINCT_JOBS_PER_SECOND,
                                    PROCESS_COLOURS, READ_COLOUR, REFERENCE_COLOUR, RESULT_COLOURS, WAIT_GROUPS,
                                    WAIT_GROUP_COLOURS, WAIT_MEASURE_ORDER, WINDOW_COLOUR, in_order, strategies_in)
from harness.server.activity import CPU_BOUND_CLIENT_RUNNABLE_SHARE, SAMPLE_INTERVAL_SECONDS


def duplicates_chart(by_workers: pd.DataFrame) -> alt.HConcatChart:
    """F1, F2: jobs the audit shows claimed more than once, and the claims beyond each job's first.

    Strategies that never handed a job out twice all lie on zero; the first of them is drawn widest and
    underneath, the others narrower and dashed on top, so every one of them stays visible.
    """
    bound = cpu_bound_workers(by_workers)
    data = plain_frame(by_workers)[["strategy", "worker_count", "job_count", "repeats", "duplicate_jobs",
                               "duplicate_jobs_min", "duplicate_jobs_max", "extra_claims", "extra_claims_min",
                               "extra_claims_max"]]
    strategies = strategies_in(data["strategy"])
    peak = data.groupby("strategy")[["duplicate_jobs_max", "extra_claims_max"]].max().max(axis=1)
    on_zero = [s for s in strategies if peak.get(s, 0) == 0]
    widths = {s: 2.0 for s in strategies}
    dashes = {s: [1, 0] for s in strategies}
    for rank, strategy in enumerate(on_zero):
        widths[strategy] = 2.0 + 3.0 * (len(on_zero) - 1 - rank)
        if rank:
            dashes[strategy] = [6, 3]
    # the order rows first appear in is the order lines are drawn in: the widest first, underneath
    drawing_order = sorted(strategies, key=lambda s: -widths[s])
    data = data.sort_values(["strategy", "worker_count"],
                            key=lambda c: c.map(drawing_order.index) if c.name == "strategy" else c)
    tooltip = [alt.Tooltip("strategy:N"), alt.Tooltip("worker_count:Q", title="workers"),
               alt.Tooltip("duplicate_jobs:Q", title="jobs claimed twice or more", format=","),
               alt.Tooltip("extra_claims:Q", title="claims beyond the first", format=","),
               alt.Tooltip("job_count:Q", title="jobs queued", format=","), REPEATS_TOOLTIP]
    base = alt.Chart(data).encode(
        x=workers_axis(data["worker_count"]), color=strategy_colour(strategies),
        strokeDash=alt.StrokeDash("strategy:N", sort=strategies, title="strategy", legend=dash_legend(),
                                  scale=alt.Scale(domain=strategies, range=[dashes[s] for s in strategies])),
        strokeWidth=alt.StrokeWidth("strategy:N", legend=None,
                                    scale=alt.Scale(domain=strategies, range=[widths[s] for s in strategies])))
    panels = []
    for column, title, scale in (("duplicate_jobs", "jobs claimed more than once", alt.Scale()),
                                 ("extra_claims", "claims beyond each job's first", alt.Scale(type="symlog"))):
        # a linear axis over thousands draws only its ends at this height unless asked for more ticks
        y = alt.Y(f"{column}:Q", title=title, scale=scale, axis=alt.Axis(tickCount=5, format=","))
        layers = [base.mark_line().encode(y=y),
                  base.mark_point(filled=True, size=30, opacity=1).encode(y=y, tooltip=tooltip)]
        if has_repeats(data):
            layers.insert(0, spread_rules(base, f"{column}_min", f"{column}_max"))
        layers = with_band(layers, data["worker_count"], bound)
        panels.append(alt.layer(*layers).properties(width=WIDTH // 2 - 40, height=HEIGHT - 40))
    if len(on_zero) > 1:
        note = (f"{listed_names(on_zero)} handed no job to more than one worker at any worker count: their lines lie "
                f"on zero, {on_zero[0]}'s the wide one underneath")
    elif on_zero:
        note = f"{on_zero[0]} handed no job to more than one worker at any worker count: its line lies on zero"
    else:
        note = ""
    return alt.hconcat(*panels).properties(
        title=chart_title("Jobs handed to more than one worker (from the audit)", note,
                     spread_note(data), band_note(data["worker_count"], bound)))


def throughput_chart(by_workers: pd.DataFrame) -> alt.LayerChart:
    """F3, F6, F7: claims per second; naive's counts every duplicate as work, so its distinct jobs/s is drawn too."""
    data = plain_frame(by_workers)
    counted = data.assign(measure=CLAIMS_PER_SECOND,
                          per_second=data["claims_per_second"], low=data["claims_per_second_min"],
                          high=data["claims_per_second_max"])
    distinct = data[data["strategy"] == "naive"].assign(
        measure=DISTINCT_JOBS_PER_SECOND, per_second=lambda f: f["unique_jobs_per_second"],
        low=lambda f: f["unique_jobs_per_second_min"], high=lambda f: f["unique_jobs_per_second_max"])
    long = pd.concat([counted, distinct], ignore_index=True)[
        ["strategy", "worker_count", "measure", "per_second", "low", "high", "attempts_per_second", "repeats"]]
    measures = in_order(long["measure"], (CLAIMS_PER_SECOND, DISTINCT_JOBS_PER_SECOND))
    base = alt.Chart(long).encode(x=workers_axis(long["worker_count"]), color=strategy_colour(long["strategy"]))
    lines = dashed_lines(
        base, alt.Y("per_second:Q", title="per second", scale=alt.Scale(type="log")),
        alt.StrokeDash("measure:N", title=None, sort=measures,
                       legend=dash_legend(orient="bottom", direction="vertical")),
        [alt.Tooltip("strategy:N"), alt.Tooltip("worker_count:Q", title="workers"),
         alt.Tooltip("measure:N"), alt.Tooltip("per_second:Q", title="per second", format=",.0f"),
         alt.Tooltip("attempts_per_second:Q", title="attempts per second", format=",.0f"), REPEATS_TOOLTIP],
    )
    layers = [lines]
    if has_repeats(long):
        layers.insert(0, spread_rules(base, "low", "high", detail="measure:N"))
    bound = cpu_bound_workers(by_workers)
    return alt.layer(*with_band(layers, long["worker_count"], bound)).properties(
        width=WIDTH, height=HEIGHT,
        title=chart_title("Claims per second", spread_note(long), band_note(long["worker_count"], bound)))


def losses_chart(by_workers: pd.DataFrame) -> alt.LayerChart:
    """F5: lost races per win against N - 1, the number of rivals each of N workers has.

    Only strategies that lost a race are drawn; the subtitle names the others, and says why a strategy cannot
    lose where its SQL decides it (labels.CANNOT_LOSE).
    """
    data = plain_frame(by_workers)[["strategy", "worker_count", "losses_per_win", "losses_per_win_min",
                               "losses_per_win_max", "lost", "lost_max", "wins", "repeats"]]
    present = strategies_in(data["strategy"])
    most_lost = data.groupby("strategy")["lost_max"].max()
    drawn = [s for s in present if most_lost.get(s, 0) > 0] or [s for s in present if s not in CANNOT_LOSE]
    data = data[data["strategy"].isin(drawn)]
    rivals = pd.DataFrame({"worker_count": sorted({int(w) for w in by_workers["worker_count"]})})
    rivals["rivals"] = rivals["worker_count"] - 1
    rivals["label"] = "N − 1: each worker's rivals"
    x = workers_axis(rivals["worker_count"])
    # symlog: the rivals run from 0 to N - 1, and a log axis cannot show the 0 at one worker
    top = max(float(rivals["rivals"].max()), float(data["losses_per_win_max"].max()) if len(data) else 0.0)
    steps = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)
    ticks = [t for t in steps if t <= top] + [t for t in steps if t > top][:1]
    y_scale = alt.Scale(type="symlog", domain=[0, ticks[-1]], nice=False)
    reference = alt.Chart(rivals).encode(x=x, y=alt.Y("rivals:Q", scale=y_scale))
    reference_line = reference.mark_line(color=REFERENCE_COLOUR, strokeDash=[4, 4], strokeWidth=1.5).encode(
        tooltip=[alt.Tooltip("label:N", title="reference"), alt.Tooltip("worker_count:Q", title="workers (N)"),
                 alt.Tooltip("rivals:Q", title="rivals (N − 1)")])
    reference_label = reference.transform_filter(alt.datum.worker_count == int(rivals["worker_count"].max())).mark_text(
        align="right", dx=-4, dy=-8, color=REFERENCE_COLOUR, fontSize=11).encode(text="label:N")
    base = alt.Chart(data).encode(x=x, color=strategy_colour(drawn))
    line = base.mark_line(point=True).encode(
        y=alt.Y("losses_per_win:Q", title="lost races per win", scale=y_scale,
                  axis=alt.Axis(values=ticks, format=",")),
        tooltip=[alt.Tooltip("strategy:N"), alt.Tooltip("worker_count:Q", title="workers"),
                 alt.Tooltip("losses_per_win:Q", title="lost races per win", format=",.2f"),
                 alt.Tooltip("lost:Q", title="lost races", format=","), alt.Tooltip("wins:Q", format=","),
                 REPEATS_TOOLTIP],
    )
    layers = [reference_line, reference_label, line]
    if has_repeats(data):
        layers.insert(2, spread_rules(base, "losses_per_win_min", "losses_per_win_max"))
    bound = cpu_bound_workers(by_workers)
    layers = with_band(layers, rivals["worker_count"], bound)
    left_out = [s for s in present if s not in drawn]
    notes = ["dashed: N − 1, the rivals each of N workers has"]
    notes += [f"{s} is not drawn: {CANNOT_LOSE[s]}" for s in left_out if s in CANNOT_LOSE]
    no_losses = [s for s in left_out if s not in CANNOT_LOSE]
    if no_losses:
        notes.append(f"not drawn: {listed_names(no_losses)} lost no race")
    return alt.layer(*layers).properties(
        width=WIDTH, height=HEIGHT,
        title=chart_title(f"{listed_names(drawn)}: lost races per win", *notes, spread_note(data),
                     band_note(rivals["worker_count"], bound)))


def latency_chart(by_workers: pd.DataFrame) -> alt.LayerChart:
    """F6, F8: p50 and p99 of winning claims, with the min-max over repeats as a band."""
    data = plain_frame(by_workers)
    parts = []
    for percentile in ("p50", "p99"):
        parts.append(pd.DataFrame({
            "strategy": data["strategy"], "worker_count": data["worker_count"], "percentile": percentile,
            "ms": data[f"{percentile}_ms"], "low": data[f"{percentile}_ms_min"], "high": data[f"{percentile}_ms_max"],
            "repeats": data["repeats"]}))
    long = pd.concat(parts, ignore_index=True)
    base = alt.Chart(long).encode(x=workers_axis(long["worker_count"]), color=strategy_colour(long["strategy"]))
    lines = dashed_lines(
        base, alt.Y("ms:Q", title="latency of a winning claim (ms)", scale=alt.Scale(type="log")),
        alt.StrokeDash("percentile:N", sort=["p50", "p99"], title="percentile", legend=dash_legend()),
        [alt.Tooltip("strategy:N"), alt.Tooltip("worker_count:Q", title="workers"),
         alt.Tooltip("percentile:N"), alt.Tooltip("ms:Q", title="ms (median over repeats)", format=",.3f"),
         alt.Tooltip("low:Q", title="lowest repeat", format=",.3f"),
         alt.Tooltip("high:Q", title="highest repeat", format=",.3f"), REPEATS_TOOLTIP],
    )
    layers = [lines]
    note = ""
    if has_repeats(long):
        layers.insert(0, base.mark_area(opacity=0.15).encode(y="low:Q", y2="high:Q", detail="percentile:N"))
        note = f"median of {repeats_said(long)}; the shaded band spans the lowest to the highest"
    bound = cpu_bound_workers(by_workers)
    return alt.layer(*with_band(layers, long["worker_count"], bound)).properties(
        width=WIDTH, height=HEIGHT,
        title=chart_title("Latency of winning claims", "the whole attempt, read and write, of each win", note,
                     band_note(long["worker_count"], bound)))


def wait_quantiles_chart(quantiles: pd.DataFrame, cpu_bound: list[int] = ()) -> alt.FacetChart:
    """C4: the winning claim's p50 and p99 beside the whole wait for a job, lost races included, per strategy."""
    data = plain_frame(quantiles[quantiles["percentile"].isin(["p50", "p99"])])[
        ["strategy", "worker_count", "measure", "percentile", "ms", "ms_min", "ms_max", "repeats"]]
    measures = in_order(data["measure"], WAIT_MEASURE_ORDER)
    base = alt.Chart().encode(x=workers_axis(data["worker_count"]), color=strategy_colour(data["strategy"]))
    tooltip = [alt.Tooltip("strategy:N"), alt.Tooltip("measure:N"), alt.Tooltip("worker_count:Q", title="workers"),
               alt.Tooltip("percentile:N"), alt.Tooltip("ms:Q", title="ms (pooled over repeats)", format=",.3f")]
    y = alt.Y("ms:Q", title="ms", scale=alt.Scale(type="log"))
    layers = [base.mark_line().encode(y=y, strokeDash=alt.StrokeDash(
                  "measure:N", sort=measures, title=None, legend=dash_legend(orient="bottom", direction="vertical"))),
              base.mark_point(filled=True, size=40, opacity=1).encode(y=y, tooltip=tooltip)]
    if has_repeats(data):
        layers.insert(0, spread_rules(base, "ms_min", "ms_max", detail="measure:N"))
    data, edges = facet_band(base, data, cpu_bound, layers)
    strategies = strategies_in(data["strategy"])
    same = coinciding(data, "measure", WAIT_MEASURE_ORDER, ["percentile", "worker_count"], "ms", ["strategy"])
    return alt.layer(*layers, data=data).properties(width=WIDTH // 2 - 20, height=HEIGHT - 40).facet(
        column=alt.Column("percentile:N", title=None, sort=["p50", "p99"], header=alt.Header(labelFontSize=13)),
    ).properties(title=chart_title(
        f"{listed_names(strategies)}: a winning claim vs the wait for a job",
        "time to get a job: from a worker's first attempt after its previous win to the end of its next win, "
        "lost races included",
        *_same_measure_notes(same),
        (f"pooled over {repeats_said(data)}; vertical rules: the lowest to the highest repeat's own "
         "percentile") if has_repeats(data) else "", CPU_BOUND_NOTE if edges is not None else ""))


def _same_measure_notes(pairs: list[tuple]) -> list[str]:
    """For the wait charts: where a strategy's two measures are one line (it lost no race on the way)."""
    return [f"{strategy}: {hidden} and {shown} are the same at every point (one line)"
            for (strategy,), hidden, shown in pairs]


def wait_distribution_chart(distribution: pd.DataFrame, worker_count: int, bound=()) -> alt.Chart:
    """C4: each strategy's two distributions at one worker count, as cumulative curves; its title says so where
    that worker count was CPU-bound (bound)."""
    data = plain_frame(distribution)[["strategy", "measure", "fraction", "ms"]]
    strategies = strategies_in(data["strategy"])
    same = coinciding(data, "measure", WAIT_MEASURE_ORDER, ["fraction"], "ms", ["strategy"])
    bound_note = [f"CPU-bound at {worker_count} workers: this machine's scheduler, not the server"] \
        if int(worker_count) in {int(w) for w in bound} else []
    return alt.Chart(data).mark_line(interpolate="step-after").encode(
        x=alt.X("ms:Q", title="ms", scale=alt.Scale(type="log")),
        y=alt.Y("fraction:Q", title="share of wins at or below", axis=alt.Axis(format="%")),
        color=strategy_colour(strategies),
        strokeDash=alt.StrokeDash("measure:N", sort=in_order(data["measure"], WAIT_MEASURE_ORDER), title=None,
                                  legend=dash_legend(orient="bottom", direction="vertical")),
        tooltip=[alt.Tooltip("strategy:N"), alt.Tooltip("measure:N"),
                 alt.Tooltip("fraction:Q", title="quantile", format=".1%"), alt.Tooltip("ms:Q", format=",.3f")],
    ).properties(width=WIDTH, height=HEIGHT, title=chart_title(
        f"{listed_names(strategies)} at {worker_count} workers: cumulative distribution", "pooled over repeats",
        *bound_note, *_same_measure_notes(same)))


def slow_race_chart(timeline: pd.DataFrame) -> alt.LayerChart:
    """The slowed-down race: each attempt as a bar from its read to its write's answer (the read-to-write window in
    which another worker can take the same job), and a tick at the write's answer coloured by the result; a radio
    picks the strategy. A statement that reads and writes at once (skip_locked) has no window, only its tick."""
    data = plain_frame(timeline)[["strategy", "worker", "attempt_seq", "start_ms", "read_end_ms", "write_start_ms",
                             "end_ms", "outcome", "job_id", "times_claimed", "result"]]
    data["job_id"] = data["job_id"].astype("float").astype("Int64").astype(str).replace("<NA>", "")
    strategies = strategies_in(data["strategy"])
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
    results = in_order(data["result"], RESULT_COLOURS)
    colour = alt.Color("result:N", scale=fixed_scale(results, RESULT_COLOURS), sort=results, title=None,
                       legend=alt.Legend(orient="bottom", symbolType="square"))
    windows = base.transform_filter("isValid(datum.read_end_ms)").mark_bar(
        height=12, color=WINDOW_COLOUR, stroke=READ_COLOUR, strokeWidth=0.5).encode(
        x=alt.X("start_ms:Q", title="ms since the start barrier"), x2="end_ms:Q", tooltip=tooltip)
    answers = base.mark_tick(thickness=4, size=22).encode(x="end_ms:Q", color=colour, tooltip=tooltip)
    return (windows + answers).add_params(choice).properties(
        width=WIDTH, height=200, title=chart_title(
            "A few workers, one small queue, slowed down",
            "pale bar: an attempt from its read to its write's answer, the window in which another worker can take "
            "the same job; tick: the write's answer, by result"))


def wait_share_chart(long: pd.DataFrame, achieved_ms: tuple[float, float] | None = None,
                     bound=()) -> alt.FacetChart:
    """Where the worker backends' time went, per worker count: shares of pg_stat_activity samples, stacked.

    achieved_ms: the lowest and highest of the races' median sampling intervals (the title says them); bound: the
    CPU-bound worker counts, labelled so on the axis."""
    data = plain_frame(long)
    data = data[data["share"] > 0]
    data, order = workers_labelled(data, bound)
    drawn = in_order(data["wait"], WAIT_GROUPS)
    return alt.Chart(data).mark_bar().encode(
        x=alt.X("workers:O", title="workers", sort=order, axis=alt.Axis(labelAngle=0)),
        y=alt.Y("share:Q", title="share of sampled backend time", axis=alt.Axis(format="%"),
                scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("wait:N", scale=fixed_scale(drawn, WAIT_GROUP_COLOURS), title=None, sort=drawn,
                        legend=alt.Legend(orient="bottom")),
        order=alt.Order("order:Q"),
        tooltip=[alt.Tooltip("strategy:N"), alt.Tooltip("worker_count:Q", title="workers"), alt.Tooltip("wait:N"),
                 alt.Tooltip("share:Q", format=".1%", title="share (median over repeats)")],
    ).properties(width=170, height=220).facet(
        column=alt.Column("strategy:N", sort=strategies_in(data["strategy"]), title=None)
    ).properties(title=chart_title("Where the worker backends' time went (pg_stat_activity samples)",
                                   "; ".join(note for note in (_interval_note(achieved_ms),
                                                               band_label_note(order)) if note)))


def _interval_note(achieved_ms) -> str:
    if not achieved_ms:
        return ""
    low, high = achieved_ms
    spread = f"{low:,.0f} ms" if round(low) == round(high) else f"{low:,.0f} to {high:,.0f} ms"
    return (f"one sample about every {spread} (each race's median interval; {SAMPLE_INTERVAL_SECONDS * 1e3:g} ms "
            "asked), inside each worker's window only")


def latency_by_fill_chart(by_fill: pd.DataFrame, worker_counts: list[int], bound=()) -> alt.FacetChart:
    """Wins' p99 by how far the queue had drained, at a few worker counts: a drain's p99 mixes these. bound: the
    CPU-bound worker counts, labelled so on their panels."""
    data = plain_frame(by_fill)
    data = data[data["worker_count"].isin(worker_counts)]
    data, order = workers_labelled(data, bound)
    base = alt.Chart().encode(
        x=alt.X("drained_to:Q", title="queue drained to", axis=alt.Axis(format="%")),
        color=strategy_colour(data["strategy"]))
    tooltip = [alt.Tooltip("strategy:N"), alt.Tooltip("worker_count:Q", title="workers"),
               alt.Tooltip("drained_to:Q", format=".0%", title="drained to"),
               alt.Tooltip("p50_ms:Q", format=",.3f", title="p50 (ms)"),
               alt.Tooltip("p99_ms:Q", format=",.3f", title="p99 (ms, median over repeats)")]
    layers = [base.mark_line(point=True).encode(
        y=alt.Y("p99_ms:Q", title="p99 of winning claims (ms)", scale=alt.Scale(type="log")), tooltip=tooltip)]
    if has_repeats(data) and "p99_ms_min" in data:
        layers.insert(0, spread_rules(base, "p99_ms_min", "p99_ms_max"))
    return alt.layer(*layers, data=data).properties(width=170, height=200).facet(
        column=alt.Column("workers:O", title="workers", sort=order)
    ).properties(title=chart_title("p99 of winning claims by how far the queue had drained",
                                   "; ".join(note for note in (spread_note(data), band_label_note(order)) if note)))


def cpu_split_chart(long: pd.DataFrame) -> alt.FacetChart:
    """From /proc/<pid>/schedstat: the share of each backend's and worker process's window on a CPU and runnable.

    Colour tells the process (backend or worker), the dash what it was doing (on a CPU or waiting for one).
    """
    data = plain_frame(long)[["strategy", "worker_count", "measure", "process", "state", "share"]]
    processes = in_order(data["process"], PROCESS_COLOURS)
    base = alt.Chart().encode(
        x=workers_axis(data["worker_count"]),
        color=alt.Color("process:N", title=None, scale=fixed_scale(processes, PROCESS_COLOURS), sort=processes,
                        legend=alt.Legend(orient="bottom")),
        detail="measure:N")
    lines = dashed_lines(
        base, alt.Y("share:Q", title="share of the window", axis=alt.Axis(format="%")),
        alt.StrokeDash("state:N", title=None, sort=in_order(data["state"], CPU_STATE_ORDER),
                       legend=dash_legend(orient="bottom", direction="vertical")),
        [alt.Tooltip("strategy:N"), alt.Tooltip("worker_count:Q", title="workers"), alt.Tooltip("measure:N"),
         alt.Tooltip("share:Q", format=".1%", title="share (median over repeats)")],
    )
    threshold = alt.Chart().mark_rule(color=REFERENCE_COLOUR, strokeDash=[2, 2]).encode(
        y=alt.datum(CPU_BOUND_CLIENT_RUNNABLE_SHARE))
    return alt.layer(lines, threshold).properties(data=data, width=170, height=200).facet(
        column=alt.Column("strategy:N", sort=strategies_in(data["strategy"]), title=None)
    ).properties(title=chart_title("On a CPU or waiting for one (/proc/<pid>/schedstat)",
                              f"dotted: a point is CPU-bound where its worker processes wait for a CPU "
                              f"{CPU_BOUND_CLIENT_RUNNABLE_SHARE:.0%} of their window or more"))
