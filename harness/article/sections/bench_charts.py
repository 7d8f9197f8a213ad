"""The bench section's chart: the harness's rate over pgbench's on the same SQL, against the target band."""

from __future__ import annotations

import altair as alt
import pandas as pd

from harness.article.charts import (CPU_BOUND_UNREAD_NOTE, HEIGHT, WIDTH, band_label_note, chart_title,
                                    cpu_bound_read, cpu_bound_workers, plain_frame, strategy_colour, workers_labelled)
from harness.article.labels import REFERENCE_COLOUR, TARGET_BAND_COLOUR, strategies_in


def bench_ratio_chart(bench: pd.DataFrame, band: tuple[float, float]) -> alt.LayerChart:
    """Harness claims/s over pgbench's (one thread per client) on the same SQL, per strategy and worker count,
    the spread over pairs as rules, parity (1.0) and the target band drawn.

    The axis always reaches past the band and parity, so a ratio's distance from them is never cut away. The
    worker counts at which the harness's runs were CPU-bound (the bench's cpu_bound, by the race's rule) say so on
    their label; a run stored without those readings says that instead.
    """
    data = plain_frame(bench)[["strategy", "worker_count", "pairs", "ratio", "ratio_min", "ratio_max",
                          "harness_claims_per_second", "pgbench_claims_per_second"]]
    data, order = workers_labelled(data, cpu_bound_workers(bench))
    strategies = strategies_in(data["strategy"])
    base = alt.Chart(data).encode(
        x=alt.X("workers:O", title="workers", sort=order, axis=alt.Axis(labelAngle=0)),
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
            f"median of {pairs} pairs; vertical rules: lowest to highest" if pairs > 1 else "",
            band_label_note(order) if cpu_bound_read(bench) else CPU_BOUND_UNREAD_NOTE))
