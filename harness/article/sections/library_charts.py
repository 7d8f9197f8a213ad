"""The job libraries' chart: each library's rate and pickup against workers."""

from __future__ import annotations

import altair as alt
import pandas as pd

from harness.article.charts import (CPU_BOUND_NOTE, HEIGHT, REPEATS_TOOLTIP, WIDTH, chart_title, facet_band,
                                    fixed_scale, has_repeats, plain_frame, spread_note, spread_rules, workers_axis)
from harness.article.labels import LIBRARY_COLOURS, LIBRARY_DASHES, LIBRARY_SHAPES


LIBRARY_MEASURES = ("jobs per second", "pickup p99 (ms)")


def libraries_long(points: pd.DataFrame) -> pd.DataFrame:
    """sections.libraries' points as the chart draws them: one row per library, workers and measure."""
    frames = [pd.DataFrame({"library": points["library"], "worker_count": points["worker_count"], "measure": measure,
                            "value": points[column], "low": points[f"{column}_min"], "high": points[f"{column}_max"],
                            "repeats": points["repeats"], "cpu_bound": points["cpu_bound"]})
              for column, measure in zip(("jobs_per_s", "pickup_p99_ms"), LIBRARY_MEASURES)] if len(points) else []
    columns = ["library", "worker_count", "measure", "value", "low", "high", "repeats", "cpu_bound"]
    return pd.concat(frames, ignore_index=True)[columns] if frames else pd.DataFrame(columns=columns)


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
