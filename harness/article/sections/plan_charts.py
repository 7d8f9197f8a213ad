"""The plans section's charts: what a claim reads at each fill level, and the table states they are drawn in."""

from __future__ import annotations

import altair as alt
import pandas as pd

from harness.article.charts import WIDTH, chart_title, coinciding, dash_legend, index_colour
from harness.article.labels import INDEX_LABELS, TABLE_STATE_DASHES, TABLE_STATE_LABELS, TABLE_STATE_SHAPES, in_order
from harness.experiments.plans.outcomes import TABLE_STATES


def table_states() -> pd.DataFrame:
    """The table states the plans are measured in, as harness.experiments.plans.outcomes describes them, in their order."""
    return pd.DataFrame([{"table_state": s.name, "table": s.label, "what it is": s.description}
                         for s in TABLE_STATES])


def claim_plan_points(points: pd.DataFrame, strategy: str = "skip_locked", statement: str = "claim") -> pd.DataFrame:
    """One strategy statement's EXPLAIN figures at every fill level, ready for charting.

    `table` is the table state's label from harness.experiments.plans.outcomes.TABLE_STATES, and rows
    come in that order within each queue size and index setup.
    """
    order = {name: i for i, name in enumerate(TABLE_STATE_LABELS)}
    chosen = points[(points["strategy"] == strategy) & (points["statement"] == statement)].copy()
    chosen["index"] = chosen["partial_index"].map(INDEX_LABELS)
    chosen["table"] = chosen["table_state"].map(TABLE_STATE_LABELS).fillna(chosen["table_state"])
    chosen["state_order"] = chosen["table_state"].map(order)
    chosen["buffers"] = chosen["shared_hit_blocks"].astype(float) + chosen["shared_read_blocks"].astype(float)
    chosen["consumed_percent"] = 100 * chosen["consumed_fraction"].astype(float)
    return chosen.sort_values(["job_count", "partial_index", "state_order", "consumed_fraction"]).reset_index(drop=True)


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
