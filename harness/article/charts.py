"""The shared chart grammar: sizes, titles, encodings, the spread over repeats, the CPU-bound band. A section's
charts live beside it (sections/<section>_charts.py, the race sweep's in sections/race_charts.py): one function
per chart, the data arrives prepared (harness.article.analysis), the chart is the return value.

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

from harness.article.analysis import fewer_repeats
from harness.article.labels import (CPU_BOUND_COLOUR, INDEX_COLOURS, NOTE_COLOUR, OTHER_COLOUR, REFERENCE_COLOUR,
                                    STRATEGY_COLOURS, in_order, strategies_in)
from harness.article.prose import worker_list
from harness.server.activity import CPU_BOUND_CLIENT_RUNNABLE_SHARE

WIDTH = 560
HEIGHT = 250


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


def repeats_said(data: pd.DataFrame) -> str:
    """'3 repeats', or '3 repeats (1 at 32 and 100 workers)' where some worker counts were raced fewer times."""
    said = f"{int(data['repeats'].max())} repeats"
    fewer = fewer_repeats(data)
    if fewer:
        said += " (" + "; ".join(f"{races} at {worker_list(counts)} workers" for races, counts in fewer.items()) + ")"
    return said


def spread_note(data: pd.DataFrame) -> str:
    """The subtitle line that says what the spread rules are, when there are any."""
    if not has_repeats(data):
        return ""
    return f"median of {repeats_said(data)}; vertical rules: lowest to highest"


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

# one subtitle line each: the page says what a CPU-bound figure measures (this machine's scheduler) in its prose
CPU_BOUND_NOTE = (f"grey band: CPU-bound, the workers or their backends waited for a CPU "
                  f"{CPU_BOUND_CLIENT_RUNNABLE_SHARE:.0%}+ of their time")
# where the axis is not the worker count (a round trip), each CPU-bound point sits on a grey disc instead
CPU_BOUND_DISC_NOTE = ("grey disc: CPU-bound, the workers or their backends waited for a CPU "
                       f"{CPU_BOUND_CLIENT_RUNNABLE_SHARE:.0%}+ of their time")
# where worker counts are categories or panels, the CPU-bound ones carry this after their number instead of a band
CPU_BOUND_LABEL = " (CPU-bound)"
CPU_BOUND_LABEL_NOTE = ("(CPU-bound): the workers or their backends waited for a CPU "
                        f"{CPU_BOUND_CLIENT_RUNNABLE_SHARE:.0%}+ of their time")


# where a chart's points carry no CPU readings (runs stored before they were kept), nothing can be marked
CPU_BOUND_UNREAD_NOTE = "CPU-bound points are not marked: these runs stored no reading of who waited for a CPU"


def cpu_bound_read(points: pd.DataFrame) -> bool:
    """Whether any point carries a CPU-bound reading (True or False, not None), so an unmarked point is free."""
    return "cpu_bound" in points and bool(points["cpu_bound"].notna().any())


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


def workers_labelled(data: pd.DataFrame, bound) -> tuple[pd.DataFrame, list[str]]:
    """data with a `workers` label per worker count, CPU_BOUND_LABEL appended where that count was CPU-bound (for
    a chart that draws worker counts as categories or panels, where no band can be drawn), and the labels in order."""
    counts = sorted({int(w) for w in data["worker_count"]})
    bound = {int(w) for w in bound}
    labels = {w: f"{w}{CPU_BOUND_LABEL}" if w in bound else str(w) for w in counts}
    return data.assign(workers=data["worker_count"].astype(int).map(labels)), [labels[w] for w in counts]


def with_band(layers: list, worker_counts, bound) -> list:
    """layers with the CPU-bound band underneath, when there is one."""
    band = _cpu_bound_band(worker_counts, bound)
    return ([band] if band is not None else []) + list(layers)


def band_label_note(labels) -> str:
    """What CPU_BOUND_LABEL means, where a chart's labels carry it."""
    return CPU_BOUND_LABEL_NOTE if any(label.endswith(CPU_BOUND_LABEL) for label in labels) else ""


def band_note(worker_counts, bound) -> str:
    return CPU_BOUND_NOTE if _cpu_bound_band(worker_counts, bound) is not None else ""

# --------------------------------------------------------------------------- what the plans' and the churn's charts share


def index_colour(indexes) -> alt.Color:
    drawn = in_order(indexes, INDEX_COLOURS)
    return alt.Color("index:N", scale=fixed_scale(drawn, INDEX_COLOURS), sort=drawn, title=None,
                     legend=alt.Legend(orient="bottom"))


# --------------------------------------------------------------------------- bars


def zero_labels(base: alt.Chart, field: str, y: alt.Y) -> alt.Chart:
    """A "0" over every bar of height zero, which a bar chart would otherwise not draw at all."""
    return base.transform_filter(f"datum['{field}'] == 0").mark_text(dy=-7, fontSize=11).encode(
        y=y, text=alt.value("0"), color=alt.value(NOTE_COLOUR))
