"""One function per chart: the data arrives prepared (harness.article.analysis), the chart is the return value.

Charts carry their data into the page, so every function takes aggregated
frames, never raw attempts. Names and colours come from harness.article.labels,
and every legend lists only what its chart draws. Where a point was measured
more than once, the chart draws the spread (min to max) beside the median.
"""

from __future__ import annotations

import textwrap

import altair as alt
import numpy as np
import pandas as pd

from harness.article.analysis import LIBRARY_MEASURES, index_setups_without_hot
from harness.article.labels import (ENDPOINT_COLOURS, RUNNER_COUNT_TONES, FAULT_EVENT_COLOURS, FAULT_EVENT_ORDER, AUTOVACUUM_COLOURS, CANNOT_LOSE, CLAIMS_PER_SECOND, CPU_STATE_ORDER,
                                    CPU_BOUND_COLOUR, DISTINCT_JOBS_PER_SECOND, INDEX_COLOURS, LIBRARY_COLOURS, LIBRARY_DASHES, LIBRARY_SHAPES, NOTE_COLOUR, OTHER_COLOUR, PHASE_LABELS,
                                    PROCESS_COLOURS, READ_COLOUR, REFERENCE_COLOUR, RESULT_COLOURS, ROUND_TRIP_MEASURES,
                                    SIDE_BY_SIDE_MEASURES, STRATEGY_COLOURS, WINDOW_COLOUR,
                                    TABLE_STATE_DASHES, TABLE_STATE_LABELS, TABLE_STATE_SHAPES, TARGET_BAND_COLOUR, WAIT_GROUP_COLOURS, WAIT_GROUPS,
                                    WAIT_MEASURE_ORDER, in_order, strategies_in)
from harness.server.activity import CPU_BOUND_CLIENT_RUNNABLE_SHARE, SAMPLE_INTERVAL_SECONDS

WIDTH = 560
HEIGHT = 300


def fixed_scale(drawn: list, colours: dict, other=OTHER_COLOUR) -> alt.Scale:
    """A scale over exactly the values drawn, each in its fixed colour (or shape, or dash)."""
    return alt.Scale(domain=list(drawn), range=[colours.get(value, other) for value in drawn])


def strategy_colour(strategies, legend_title: str = "strategy") -> alt.Color:
    drawn = strategies_in(strategies)
    return alt.Color("strategy:N", scale=fixed_scale(drawn, STRATEGY_COLOURS), title=legend_title, sort=drawn,
                     legend=alt.Legend(symbolOpacity=1))


def dash_legend(**options) -> alt.Legend:
    """A legend whose symbols are line segments, so the dash pattern shows."""
    return alt.Legend(symbolType="stroke", symbolStrokeWidth=2, symbolStrokeColor=NOTE_COLOUR, symbolSize=300,
                      labelLimit=400, **options)


SUBTITLE_CHARACTERS = 95  # a subtitle line wider than this would widen the chart on the page


def chart_title(text: str, *subtitle: str) -> alt.TitleParams:
    lines = [part for line in subtitle if line for part in textwrap.wrap(line, SUBTITLE_CHARACTERS)]
    return alt.TitleParams(text=text, subtitle=lines or alt.Undefined, subtitleColor=REFERENCE_COLOUR, anchor="start")


def listed_names(names) -> str:
    names = [str(n) for n in names]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def has_repeats(data: pd.DataFrame, column: str = "repeats") -> bool:
    """Whether any point was measured more than once, so there is a spread to draw."""
    return column in data and len(data) > 0 and float(data[column].max()) > 1


def coinciding(data: pd.DataFrame, series: str, order, along: list[str], value: str,
                within: list[str] = ()) -> list[tuple]:
    """Pairs of series a chart would draw one on top of the other: (group, hidden, shown), where `hidden` repeats
    `shown` at every point along `along` (within 0.5%). `group` is the value of `within` the pair shares."""
    pairs = []
    groups = data.groupby(list(within), sort=False) if within else [((), data)]
    for group, frame in groups:
        curves = {name: curve.set_index(along)[value].sort_index() for name, curve in frame.groupby(series)}
        names = in_order(curves, order)
        for position, name in enumerate(names):
            for earlier in names[:position]:
                hidden, shown = curves[name], curves[earlier]
                if hidden.index.equals(shown.index) and np.allclose(hidden, shown, rtol=0.005, atol=0):
                    pairs.append((group, name, earlier))
                    break
    return pairs


def spread_note(data: pd.DataFrame) -> str:
    """The subtitle line that says what the spread rules are, when there are any."""
    if not has_repeats(data):
        return ""
    return f"median of {int(data['repeats'].max())} repeats; the vertical rules span the lowest to the highest"


def workers_axis(values) -> alt.X:
    ticks = sorted({int(v) for v in values})
    log = len(ticks) > 1 and max(ticks) / max(min(ticks), 1) >= 8
    return alt.X("worker_count:Q", title="workers",
                 scale=alt.Scale(type="log" if log else "linear", nice=False),
                 axis=alt.Axis(values=ticks, format="d", grid=False))


def dashed_lines(base: alt.Chart, y, stroke_dash: alt.StrokeDash, tooltip) -> alt.LayerChart:
    """Lines told apart by dash pattern, with points on top (separate layers, so the legend shows the dashes)."""
    return alt.layer(base.mark_line().encode(y=y, strokeDash=stroke_dash),
                     base.mark_point(filled=True, size=40, opacity=1).encode(y=y, tooltip=tooltip))


def spread_rules(base: alt.Chart, low: str, high: str, **encoding) -> alt.Chart:
    """The min-max over repeats as a vertical rule at each point."""
    return base.mark_rule(strokeWidth=2, opacity=0.5).encode(y=f"{low}:Q", y2=f"{high}:Q", **encoding)


def plain_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Categoricals and numpy scalars as plain values, so the spec is JSON."""
    out = frame.copy()
    for column in out.columns:
        if isinstance(out[column].dtype, pd.CategoricalDtype):
            out[column] = out[column].astype(str)
    return out


REPEATS_TOOLTIP = alt.Tooltip("repeats:Q", title="repeats (median shown)")

CPU_BOUND_NOTE = (f"grey band: CPU-bound points (the worker processes waited for a CPU at least "
                  f"{CPU_BOUND_CLIENT_RUNNABLE_SHARE:.0%} of their time): this machine's scheduler, not the server")


def cpu_bound_workers(by_workers: pd.DataFrame) -> list[int]:
    """The worker counts at which some strategy's races were CPU-bound (analysis.over_repeats' cpu_bound)."""
    if "cpu_bound" not in by_workers or not len(by_workers):
        return []
    bound = by_workers["cpu_bound"].fillna(False).astype(bool)
    return sorted({int(w) for w in by_workers.loc[bound, "worker_count"]})


def _band_edges(worker_counts, bound) -> tuple[float, float] | None:
    """Where the CPU-bound band starts and ends on the workers axis; None when no drawn point was CPU-bound."""
    counts = sorted({int(w) for w in worker_counts})
    bound = sorted({int(w) for w in bound if int(w) in counts})
    if not bound:
        return None
    below = [w for w in counts if w < bound[0]]
    return (float(np.sqrt(below[-1] * bound[0])) if below else float(bound[0])), float(counts[-1])


def _cpu_bound_band(worker_counts, bound) -> alt.Chart | None:
    """A grey band over the CPU-bound worker counts: from halfway (geometric) after the last free count below the
    first bound one, to the most workers drawn. None when no point was CPU-bound."""
    edges = _band_edges(worker_counts, bound)
    if edges is None:
        return None
    band = pd.DataFrame({"start": [edges[0]], "end": [edges[1]], "label": ["CPU-bound"]})
    base = alt.Chart(band)
    return alt.layer(
        base.mark_rect(color=CPU_BOUND_COLOUR, opacity=0.35).encode(
            x=alt.X("start:Q"), x2="end:Q", tooltip=[alt.Tooltip("label:N", title="")]),
        base.mark_text(align="left", baseline="top", dx=4, dy=4, color=NOTE_COLOUR, fontSize=10).encode(
            x="start:Q", y=alt.value(0), text="label:N"))


def facet_band(base: alt.Chart, data: pd.DataFrame, cpu_bound, layers: list) -> tuple[pd.DataFrame, tuple | None]:
    """For a faceted chart: the CPU-bound band under every facet (inserted first into layers). The edges ride on
    every row of the data, aggregated back to one rect per facet. Returns the data with the edges and the edges
    (None when no drawn point was CPU-bound)."""
    edges = _band_edges(data["worker_count"], cpu_bound)
    if edges is None:
        return data, None
    data = data.assign(band_start=edges[0], band_end=edges[1])
    layers.insert(0, base.transform_aggregate(start="min(band_start)", end="max(band_end)").mark_rect(
        color=CPU_BOUND_COLOUR, opacity=0.35).encode(x="start:Q", x2="end:Q", color=alt.value(CPU_BOUND_COLOUR)))
    return data, edges


def with_band(layers: list, worker_counts, bound) -> list:
    """layers with the CPU-bound band underneath, when there is one."""
    band = _cpu_bound_band(worker_counts, bound)
    return ([band] if band is not None else []) + list(layers)


def band_note(worker_counts, bound) -> str:
    return CPU_BOUND_NOTE if _cpu_bound_band(worker_counts, bound) is not None else ""

# --------------------------------------------------------------------------- races


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
        y = alt.Y(f"{column}:Q", title=title, scale=scale)
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
        note = f"median of {int(long['repeats'].max())} repeats; the shaded band spans the lowest to the highest"
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
        (f"pooled over {int(data['repeats'].max())} repeats; the vertical rules span the lowest to the highest "
         "repeat's own percentile") if has_repeats(data) else "", CPU_BOUND_NOTE if edges is not None else ""))


def _same_measure_notes(pairs: list[tuple]) -> list[str]:
    """For the wait charts: where a strategy's two measures are one line (it lost no race on the way)."""
    return [f"{strategy}: {hidden} and {shown} are the same at every point (one line)"
            for (strategy,), hidden, shown in pairs]


def wait_distribution_chart(distribution: pd.DataFrame, worker_count: int) -> alt.Chart:
    """C4: each strategy's two distributions at one worker count, as cumulative curves."""
    data = plain_frame(distribution)[["strategy", "measure", "fraction", "ms"]]
    strategies = strategies_in(data["strategy"])
    same = coinciding(data, "measure", WAIT_MEASURE_ORDER, ["fraction"], "ms", ["strategy"])
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
        *_same_measure_notes(same)))


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


def round_trip_chart(long: pd.DataFrame) -> alt.FacetChart:
    """C6: against the network round trip, naive's claims beyond each job's first, guarded's lost races per win,
    and every strategy's claims per second (analysis.round_trip_long), one panel each with its own scale."""
    data = plain_frame(long)
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
    workers = sorted({int(w) for w in data["worker_count"]})
    return alt.layer(*layers, data=data).properties(width=WIDTH // 3 - 10, height=HEIGHT - 80).facet(
        column=alt.Column("measure:N", title=None, sort=measures, header=alt.Header(labelFontSize=12,
                                                                                    labelLimit=WIDTH // 3 + 40)),
    ).resolve_scale(y="independent").properties(title=chart_title(
        "Behind a network round trip",
        f"{listed_names(workers)} workers; the round trip is added by a delay proxy between each worker and the server; "
        "extra claims: the audit's claims beyond each job's first", spread_note(data)))


def side_by_side_chart(long: pd.DataFrame, title: str) -> alt.FacetChart:
    """The same races under two conditions (analysis.side_by_side_long: with and without the partial index, or one
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


def wait_share_chart(long: pd.DataFrame, achieved_ms: tuple[float, float] | None = None) -> alt.FacetChart:
    """Where the worker backends' time went, per worker count: shares of pg_stat_activity samples, stacked.

    achieved_ms: the lowest and highest of the races' median sampling intervals (the title says them)."""
    data = plain_frame(long)
    data = data[data["share"] > 0]
    drawn = in_order(data["wait"], WAIT_GROUPS)
    return alt.Chart(data).mark_bar().encode(
        x=alt.X("worker_count:O", title="workers", axis=alt.Axis(labelAngle=0)),
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
                              _interval_note(achieved_ms)))


def _interval_note(achieved_ms) -> str:
    if not achieved_ms:
        return ""
    low, high = achieved_ms
    spread = f"{low:,.0f} ms" if round(low) == round(high) else f"{low:,.0f} to {high:,.0f} ms"
    return (f"one sample about every {spread} (each race's median interval; {SAMPLE_INTERVAL_SECONDS * 1e3:g} ms "
            "asked), inside each worker's window only")


def latency_by_fill_chart(by_fill: pd.DataFrame, worker_counts: list[int]) -> alt.FacetChart:
    """Wins' p99 by how far the queue had drained, at a few worker counts: a drain's p99 mixes these."""
    data = plain_frame(by_fill)
    data = data[data["worker_count"].isin(worker_counts)]
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
        column=alt.Column("worker_count:O", title="workers")
    ).properties(title=chart_title("p99 of winning claims by how far the queue had drained", spread_note(data)))


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


# --------------------------------------------------------------------------- plans


def index_colour(indexes) -> alt.Color:
    drawn = in_order(indexes, INDEX_COLOURS)
    return alt.Color("index:N", scale=fixed_scale(drawn, INDEX_COLOURS), sort=drawn, title=None,
                     legend=alt.Legend(orient="bottom"))


def _state_layers(base: alt.Chart, y: alt.Y, states) -> list[alt.Chart]:
    """Each table state drawn against fill level: the states measured at every fill as lines with their own dash
    (labels.TABLE_STATE_DASHES) and a legend of dashes; the drains measured at one fill as points with their own
    shape (TABLE_STATE_SHAPES) and a legend of shapes. The two legends read different fields, so they stay apart."""
    drawn = in_order(states, TABLE_STATE_LABELS.values())
    name = {label: state for state, label in TABLE_STATE_LABELS.items()}
    shapes = {d: TABLE_STATE_SHAPES.get(name.get(d), "circle") for d in drawn}
    lines = [d for d in drawn if shapes[d] == "circle"]
    one_fill = [d for d in drawn if shapes[d] != "circle"]
    dash = alt.StrokeDash("table:N", title="table", sort=lines, legend=dash_legend(orient="bottom",
                                                                                     direction="vertical"),
                          scale=alt.Scale(domain=lines, range=[TABLE_STATE_DASHES[name[d]] for d in lines]))
    on_lines = base.transform_filter(alt.FieldOneOfPredicate(field="table", oneOf=lines))
    layers = [on_lines.mark_line().encode(y=y, strokeDash=dash),
              on_lines.mark_point(filled=True, size=40, opacity=1).encode(y=y, tooltip=_plan_tooltip())]
    if one_fill:
        layers.append(base.transform_filter(alt.FieldOneOfPredicate(field="table", oneOf=one_fill))
                      .transform_calculate(drained_at_one_fill="datum.table")
                      .mark_point(filled=True, size=70, opacity=1).encode(
                          y=y, tooltip=_plan_tooltip(),
                          shape=alt.Shape("drained_at_one_fill:N", title="measured at one fill", sort=one_fill,
                                          legend=alt.Legend(orient="bottom", direction="vertical"),
                                          scale=alt.Scale(domain=one_fill, range=[shapes[d] for d in one_fill]))))
    return layers


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
                                  color=index_colour(data["index"]))
    y = alt.Y(f"{field}:Q", title=axis_title, scale=alt.Scale(type="log"))
    panels = data["job_count"].nunique()
    notes = []
    for (index, job_count), hidden, shown in coinciding(data, "table", TABLE_STATE_LABELS.values(),
                                                         ["consumed_percent"], field, ["index", "job_count"]):
        where = f"{index}, {job_count:,} jobs" if panels > 1 else index
        notes.append(f"{where}: '{hidden}' lies on '{shown}'")
    return alt.layer(*_state_layers(base, y, data["table"])).properties(
        width=WIDTH // 2 - 20, height=240).facet(
        column=alt.Column("job_count:O", title="jobs in the table", header=alt.Header(format=",")),
    ).properties(title=chart_title(title, *notes))


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
    """F12, F13, C9: share of HOT updates by fillfactor, row width and how the queue was drained.

    An index setup under which no update was HOT anywhere would be a flat line at zero: it is left out and
    named in the subtitle, and analysis.no_hot_updates_table lists it. If every setup is flat, all are drawn.
    """
    flat = in_order(index_setups_without_hot(churn), INDEX_COLOURS)
    if len(flat) == churn["index"].nunique():
        flat = []
    drawn = churn[~churn["index"].isin(flat)]
    data = drawn[["fillfactor", "index", "payload_bytes", "drained_by", "updates", "hot_updates",
                  "newpage_updates", "hot_fraction", "heap_pages_before", "heap_pages"]
                 + (["drain_order"] if "drain_order" in drawn else [])]
    if "drain_order" in data:
        order = list(data.sort_values("drain_order")["drained_by"].drop_duplicates())
    else:
        order = sorted(data["drained_by"].unique(), key=lambda m: (m.startswith("one bulk"), m))
    base = alt.Chart(data).encode(
        x=alt.X("fillfactor:Q", title="fillfactor", scale=alt.Scale(reverse=True, zero=False),
                axis=alt.Axis(values=sorted(data["fillfactor"].unique().tolist()))),
        color=index_colour(data["index"]))
    notes = [f"{index}: no update was HOT in any setup, so it is not drawn (the table lists them)"
             for index in flat]
    panels = data["payload_bytes"].nunique()
    same = coinciding(data, "drained_by", order, ["fillfactor"], "hot_fraction", ["index", "payload_bytes"])
    for (index, payload), hidden, shown in same:
        where = f"{index}, {payload}-byte payload" if panels > 1 else index
        notes.append(f"{where}: {hidden} lies on {shown}'s line")
    return dashed_lines(
        base, alt.Y("hot_fraction:Q", title="HOT updates", axis=alt.Axis(format="%"), scale=alt.Scale(domain=[0, 1])),
        alt.StrokeDash("drained_by:N", title="drained by", sort=order,
                       legend=dash_legend(orient="bottom", direction="vertical")),
        [alt.Tooltip("fillfactor:Q"), alt.Tooltip("index:N"),
         alt.Tooltip("payload_bytes:Q", title="payload (bytes)"), alt.Tooltip("drained_by:N", title="drained by"),
         alt.Tooltip("hot_updates:Q", title="HOT updates", format=","),
         alt.Tooltip("updates:Q", title="updates", format=","),
         alt.Tooltip("newpage_updates:Q", title="moved to another page", format=","),
         alt.Tooltip("heap_pages_before:Q", title="heap pages before"),
         alt.Tooltip("heap_pages:Q", title="heap pages after")],
    ).properties(width=WIDTH // 2 - 20, height=240).facet(
        column=alt.Column("payload_bytes:O", title="payload per row (bytes)"),
    ).properties(title=chart_title("Share of status updates that were HOT", *notes))


def pruning_chart(pruning: pd.DataFrame) -> alt.Chart:
    """F11: n_dead_tup after the claims, once settled and after a read, with autovacuum on and off."""
    data = pruning[["autovacuum_label", "phase_label", "phase_order", "dead_tuples", "live_tuples", "updates",
                    "hot_updates", "autovacuum_runs", "autoanalyze_runs", "seconds_after_claims"]]
    phases = in_order(data["phase_label"], PHASE_LABELS.values())
    arms = in_order(data["autovacuum_label"], AUTOVACUUM_COLOURS)
    base = alt.Chart(data).encode(
        x=alt.X("phase_label:N", title=None, sort=phases, axis=alt.Axis(labelAngle=0)),
        xOffset=alt.XOffset("autovacuum_label:N", sort=arms),
        color=alt.Color("autovacuum_label:N", title=None, scale=fixed_scale(arms, AUTOVACUUM_COLOURS), sort=arms,
                        legend=alt.Legend(orient="bottom")))
    y = alt.Y("dead_tuples:Q", title="n_dead_tup")
    bars = base.mark_bar().encode(
        y=y,
        tooltip=[alt.Tooltip("autovacuum_label:N", title="arm"), alt.Tooltip("phase_label:N", title="when"),
                 alt.Tooltip("dead_tuples:Q", title="n_dead_tup", format=","),
                 alt.Tooltip("updates:Q", title="status updates", format=","),
                 alt.Tooltip("hot_updates:Q", title="of them HOT", format=","),
                 alt.Tooltip("autovacuum_runs:Q", title="autovacuum runs"),
                 alt.Tooltip("autoanalyze_runs:Q", title="autoanalyze runs"),
                 alt.Tooltip("seconds_after_claims:Q", title="seconds after the claims", format=".1f")])
    return (bars + zero_labels(base, "dead_tuples", y)).properties(
        width=WIDTH, height=HEIGHT - 60, title="Dead row versions the statistics report")


# --------------------------------------------------------------------------- bench


def bench_ratio_chart(bench: pd.DataFrame, band: tuple[float, float]) -> alt.LayerChart:
    """Harness claims/s over pgbench's (one thread per client) on the same SQL, per strategy and worker count,
    the spread over pairs as rules, parity (1.0) and the target band drawn.

    The axis always reaches past the band and parity, so a ratio's distance from them is never cut away.
    """
    data = plain_frame(bench)[["strategy", "worker_count", "pairs", "ratio", "ratio_min", "ratio_max",
                          "harness_claims_per_second", "pgbench_claims_per_second"]]
    strategies = strategies_in(data["strategy"])
    base = alt.Chart(data).encode(
        x=alt.X("worker_count:O", title="workers", axis=alt.Axis(labelAngle=0)),
        xOffset=alt.XOffset("strategy:N", sort=strategies),
        color=strategy_colour(strategies),
    )
    tooltip = [alt.Tooltip("strategy:N"), alt.Tooltip("worker_count:Q", title="workers"),
               alt.Tooltip("ratio:Q", title="harness / pgbench (median)", format=".2f"),
               alt.Tooltip("ratio_min:Q", title="lowest pair", format=".2f"),
               alt.Tooltip("ratio_max:Q", title="highest pair", format=".2f"),
               alt.Tooltip("harness_claims_per_second:Q", title="harness claims/s", format=",.0f"),
               alt.Tooltip("pgbench_claims_per_second:Q", title="pgbench claims/s", format=",.0f"),
               alt.Tooltip("pairs:Q")]
    low = min(band[0], 1.0, float(data[["ratio", "ratio_min"]].min().min())) - 0.05
    high = max(band[1], 1.0, float(data[["ratio", "ratio_max"]].max().max())) + 0.05
    scale = alt.Scale(domain=[round(max(0.0, low), 2), round(high, 2)], zero=False, nice=False)
    target = alt.Chart(pd.DataFrame({"low": [band[0]], "high": [band[1]], "label": ["target band"]})).mark_rect(
        color=TARGET_BAND_COLOUR, opacity=0.1).encode(y=alt.Y("low:Q", scale=scale), y2="high:Q",
                                             tooltip=[alt.Tooltip("label:N"), alt.Tooltip("low:Q", format=".2f"),
                                                      alt.Tooltip("high:Q", format=".2f")])
    parity = alt.Chart(pd.DataFrame({"y": [1.0], "label": ["parity: as fast as pgbench"]})).mark_rule(
        strokeDash=[4, 4], color=REFERENCE_COLOUR).encode(y=alt.Y("y:Q", scale=scale),
                                                         tooltip=[alt.Tooltip("label:N", title="reference")])
    points = base.mark_point(filled=True, size=90).encode(
        y=alt.Y("ratio:Q", title="harness claims/s ÷ pgbench claims/s", scale=scale), tooltip=tooltip)
    spread = base.mark_rule(strokeWidth=2).encode(y="ratio_min:Q", y2="ratio_max:Q", tooltip=tooltip)
    pairs = int(data["pairs"].max()) if len(data) else 0
    return alt.layer(target, parity, spread, points).properties(
        width=WIDTH, height=HEIGHT - 40, title=chart_title(
            "Is the harness the bottleneck? Its rate over pgbench's, same SQL",
            f"dashed: parity (1.0); shaded: the target band {band[0]:.2f}–{band[1]:.2f}",
            f"median of {pairs} pairs; the vertical rules span the lowest to the highest" if pairs > 1 else ""))


# --------------------------------------------------------------------------- a claim is not a completion



def fault_timeline_chart(events: pd.DataFrame) -> alt.LayerChart:
    """One fault's run, event by event: who claimed it (with which token), heartbeats (grey when refused), the
    reaper handing it on, and which finish the server accepted. Times from the run the fault hit being claimed."""
    data = plain_frame(events)
    data = data[data["event"].isin(FAULT_EVENT_ORDER)].copy()
    if not len(data):
        return alt.Chart(pd.DataFrame({"t": []})).mark_point().properties(width=WIDTH, title="no fault run")
    zero = data.loc[data["event"] == "claimed", "t"].min() if (data["event"] == "claimed").any() else data["t"].min()
    data["seconds"] = data["t"] - zero
    data["who"] = np.where(data["source"] == "runner", data["runner"], data["source"])
    data["outcome"] = np.where(data["event"] == "heartbeat",
                               np.where(data["status"].fillna(0).astype(int) == 200, "accepted", "refused"), "")
    data["token"] = data["token"].astype("float").astype("Int64").astype(str).replace("<NA>", "")
    data["status"] = data["status"].astype("float").astype("Int64").astype(str).replace("<NA>", "")
    drawn = in_order(data["event"], FAULT_EVENT_ORDER)
    tooltip = [alt.Tooltip("who:N", title="who"), alt.Tooltip("event:N"), alt.Tooltip("token:N", title="token"),
               alt.Tooltip("status:N", title="HTTP status"), alt.Tooltip("seconds:Q", format=".2f")]
    base = alt.Chart(data).encode(
        x=alt.X("seconds:Q", title="seconds since the run was first claimed"),
        y=alt.Y("who:N", title=None, sort=sorted(set(data["who"]))))
    points = base.mark_point(filled=True, size=90).encode(
        color=alt.Color("event:N", scale=fixed_scale(drawn, FAULT_EVENT_COLOURS), sort=drawn, title=None,
                        legend=alt.Legend(orient="bottom")),
        shape=alt.Shape("outcome:N", legend=None), tooltip=tooltip)
    labels = base.transform_filter("datum.event == 'claimed' || datum.event == 'finished' || "
                                   "datum.event == 'finish_rejected'").mark_text(dy=-12, fontSize=9,
                                                                                 color=NOTE_COLOUR).encode(
        text="label:N").transform_calculate(label="datum.event + ' (token ' + datum.token + ')'")
    protocol, fault = str(data["protocol"].iloc[0]), str(data["fault"].iloc[0])
    return alt.layer(points, labels).properties(
        width=WIDTH, height=200, title=chart_title(f"One fault, one run: {fault} under {protocol}",
                                               "every event of the run the fault hit, from the runners' logs, "
                                               "the reaper and the fault log"))


def _poll_axis(values) -> alt.X:
    return alt.X("poll_s:O", title="poll interval (s)", sort=sorted(set(values), reverse=True))


def zero_labels(base: alt.Chart, field: str, y: alt.Y) -> alt.Chart:
    """A "0" over every bar of height zero, which a bar chart would otherwise not draw at all."""
    return base.transform_filter(f"datum['{field}'] == 0").mark_text(dy=-7, fontSize=11).encode(
        y=y, text=alt.value("0"), color=alt.value(NOTE_COLOUR))


def _ordered_tones(n: int) -> list[str]:
    """n tones for an ordered category, light to dark; the darkest repeats past the palette's length."""
    tones = list(RUNNER_COUNT_TONES)
    return tones[-n:] if n <= len(tones) else tones + [tones[-1]] * (n - len(tones))


def _endpoint_colour(labels) -> alt.Color:
    """Each claim endpoint in the colour of the strategy it runs."""
    drawn = in_order(labels, ENDPOINT_COLOURS)
    return alt.Color("endpoint_label:N", title="endpoint", sort=drawn, scale=fixed_scale(drawn, ENDPOINT_COLOURS),
                     legend=alt.Legend(orient="bottom", direction="vertical"))


def production_conflicts_chart(summary: pd.DataFrame) -> alt.Chart:
    """The share of polls that met a 409 (with its 95 % interval) by poll interval and runner count, one panel per
    endpoint."""
    data = plain_frame(summary[summary["burst"] == 0][["endpoint_label", "runner_count", "poll_s",
                                                  "share_of_polls_with_a_conflict", "share_of_polls_with_a_conflict_low",
                                                  "share_of_polls_with_a_conflict_high", "polls", "conflicts"]])
    data["runners"] = data["runner_count"].astype(int).astype(str)
    order = [str(n) for n in sorted(data["runner_count"].unique())]
    base = alt.Chart(data).encode(
        x=_poll_axis(data["poll_s"]), xOffset=alt.XOffset("runners:N", sort=order),
        color=alt.Color("runners:N", sort=order, title="runners",
                        scale=alt.Scale(domain=order, range=_ordered_tones(len(order)))))
    share = alt.Y("share_of_polls_with_a_conflict:Q", title="listing polls that met a 409", axis=alt.Axis(format="%"))
    bars = base.mark_bar().encode(
        y=share,
        tooltip=["endpoint_label:N", "runners:N", "poll_s:O", "polls:Q", alt.Tooltip("conflicts:Q", title="409s"),
                 alt.Tooltip("share_of_polls_with_a_conflict:Q", format=".1%", title="polls that met a 409")])
    rules = base.mark_rule(color=NOTE_COLOUR).encode(y="share_of_polls_with_a_conflict_low:Q",
                                                     y2="share_of_polls_with_a_conflict_high:Q")
    zeros = zero_labels(base, "share_of_polls_with_a_conflict", share)
    return alt.layer(bars, rules, zeros).properties(width=WIDTH // 2 - 20, height=HEIGHT).facet(
        column=alt.Column("endpoint_label:N", title=None)).properties(
        title=chart_title("Polls that met a conflict", "bars: the share of polls listing a run after which the runner "
                                                   "met a 409; lines: its 95 % interval (whole poll rounds resampled)"))


def production_pickup_chart(summary: pd.DataFrame) -> alt.FacetChart:
    """Pickup latency (enqueue to claim) p50 and p99 by poll interval, per endpoint, one panel per runner count."""
    data = plain_frame(summary[summary["burst"] == 0][["endpoint_label", "runner_count", "poll_s", "pickup_p50_ms",
                                                  "pickup_p99_ms"]])
    long = data.melt(id_vars=["endpoint_label", "runner_count", "poll_s"], value_vars=["pickup_p50_ms", "pickup_p99_ms"],
                     var_name="percentile", value_name="ms")
    long["percentile"] = long["percentile"].map({"pickup_p50_ms": "p50", "pickup_p99_ms": "p99"})
    long["seconds"] = long["ms"] / 1e3
    base = alt.Chart().encode(
        x=_poll_axis(long["poll_s"]),
        y=alt.Y("seconds:Q", title="pickup latency (s)", scale=alt.Scale(type="log")),
        color=_endpoint_colour(long["endpoint_label"]))
    # lines and points in layers of their own, so the legend draws the dashes (a line with points draws none)
    lines = base.mark_line().encode(
        strokeDash=alt.StrokeDash("percentile:N", title="percentile", legend=dash_legend(),
                                  scale=alt.Scale(domain=["p50", "p99"], range=[[1, 0], [5, 3]])),
        detail="percentile:N")
    points = base.mark_point(filled=True, size=30, opacity=1).encode(
        tooltip=["endpoint_label:N", "runner_count:Q", "poll_s:O", "percentile:N",
                 alt.Tooltip("seconds:Q", format=".3f")])
    return alt.layer(lines, points, data=long).properties(width=WIDTH // 3 - 20, height=HEIGHT).facet(
        column=alt.Column("runner_count:O", title="runners")).properties(
        title=chart_title("The wait from enqueue to claim", "from each run's intended enqueue time (open-loop arrivals)"))


def production_timeline_chart(timeline: pd.DataFrame) -> alt.FacetChart:
    """The burst, second by second: runs pending and 409s, one line per endpoint."""
    data = plain_frame(timeline)
    return alt.Chart(data).mark_line(point=True, interpolate="step-after").encode(
        x=alt.X("second:Q", title="seconds since the window opened"),
        y=alt.Y("value:Q", title=None),
        color=_endpoint_colour(data["endpoint_label"]),
        tooltip=["endpoint_label:N", "measure:N", "second:Q", "value:Q"],
    ).properties(width=WIDTH // 2 - 20, height=HEIGHT * 2 // 3).facet(
        column=alt.Column("measure:N", title=None), resolve=alt.Resolve(scale={"y": "independent"})).properties(
        title=chart_title("The burst, second by second", "runs pending at the end of each second (intended enqueue "
                                                     "times), and the 409s the runners met in it"))


# --------------------------------------------------------------------------- the job libraries

def libraries_chart(long: pd.DataFrame) -> alt.FacetChart:
    """Each job library's own workers draining one queue: jobs per second and the pickup p99 against workers."""
    data = plain_frame(long)
    drawn = list(dict.fromkeys(data["library"]))
    base = alt.Chart().encode(x=workers_axis(data["worker_count"]), color=alt.Color(
        "library:N", scale=fixed_scale(drawn, LIBRARY_COLOURS), title="library", sort=drawn))
    tooltip = [alt.Tooltip("library:N"), alt.Tooltip("worker_count:Q", title="workers"), alt.Tooltip("measure:N"),
               alt.Tooltip("value:Q", format=",.1f"), REPEATS_TOOLTIP]
    y = alt.Y("value:Q", title=None, scale=alt.Scale(type="log"))
    shape = alt.Shape("library:N", scale=fixed_scale(drawn, LIBRARY_SHAPES, "circle"), title="library", sort=drawn)
    dash = alt.StrokeDash("library:N", scale=fixed_scale(drawn, LIBRARY_DASHES, [1, 0]), title="library", sort=drawn)
    layers = [base.mark_line().encode(y=y, strokeDash=dash),
              base.mark_point(filled=True, size=60, opacity=1).encode(y=y, shape=shape, tooltip=tooltip)]
    if has_repeats(data):
        layers.insert(0, spread_rules(base, "low", "high"))
    bound = sorted({int(w) for w in data.loc[data["cpu_bound"].fillna(False).astype(bool), "worker_count"]})
    data, edges = facet_band(base, data, bound, layers)
    return alt.layer(*layers, data=data).properties(width=WIDTH // 2 - 20, height=HEIGHT - 60).facet(
        column=alt.Column("measure:N", title=None, sort=list(LIBRARY_MEASURES), header=alt.Header(labelFontSize=13)),
    ).resolve_scale(y="independent").properties(title=chart_title(
        "The job libraries' own workers draining one queue", spread_note(data),
        CPU_BOUND_NOTE if edges is not None else ""))
