"""The churn section's charts and tables: HOT updates per setup and drain, and pruning over time."""

from __future__ import annotations

import altair as alt
import pandas as pd

from harness.article.charts import (HEIGHT, WIDTH, chart_title, coinciding, dash_legend, dashed_lines, fixed_scale,
                                    index_colour, zero_labels)
from harness.article.labels import (AUTOVACUUM_COLOURS, AUTOVACUUM_LABELS, INDEX_COLOURS, INDEX_LABELS, PHASE_LABELS,
                                    drained_by, in_order)


def churn_modes(matrix: pd.DataFrame) -> pd.DataFrame:
    """The churn matrix with readable labels for the index setting and the way the queue was drained."""
    frame = matrix.copy()
    frame["index"] = frame["partial_index"].map(INDEX_LABELS)
    frame["drained_by"] = [drained_by(mode, workers) for mode, workers in zip(frame["mode"], frame["worker_count"])]
    # one connection, then the races by worker count, then the bulk UPDATE
    frame["drain_order"] = (frame["mode"].map({"sequential": 0, "race": 1, "bulk": 2}).fillna(1) * 10_000
                            + pd.to_numeric(frame["worker_count"], errors="coerce").fillna(0))
    frame["hot_fraction"] = frame["hot_fraction"].astype(float)
    return frame


def index_setups_without_hot(modes: pd.DataFrame) -> list[str]:
    """The index setups (churn_modes' `index`) under which no update at all was HOT, whatever else varied."""
    hot_by_index = modes.groupby("index")["hot_updates"].sum()
    return [index for index, hot in hot_by_index.items() if hot == 0]


def no_hot_updates_table(modes: pd.DataFrame) -> pd.DataFrame:
    """The setups a HOT chart would draw as a flat zero, summed per payload and way of draining: the fillfactors
    tried, the updates made, how many were HOT (none) and how many moved to another page."""
    flat = modes[modes["index"].isin(index_setups_without_hot(modes))]
    columns = ["index", "payload bytes", "drained by", "fillfactors", "updates", "HOT updates",
               "moved to another page"]
    if not len(flat):
        return pd.DataFrame(columns=columns)
    table = flat.groupby(["index", "payload_bytes", "drain_order", "drained_by"]).agg(
        fillfactors=("fillfactor", lambda v: ", ".join(str(f) for f in sorted(set(v), reverse=True))),
        updates=("updates", "sum"), hot_updates=("hot_updates", "sum"),
        newpage_updates=("newpage_updates", "sum")).reset_index()
    return table.rename(columns={"payload_bytes": "payload bytes", "drained_by": "drained by",
                                 "hot_updates": "HOT updates", "newpage_updates": "moved to another page"}
                        )[columns].reset_index(drop=True)


def pruning_phases(pruning: pd.DataFrame) -> pd.DataFrame:
    """The pruning experiment, one row per autovacuum arm and phase, labelled."""
    if not len(pruning):
        return pruning
    frame = pruning.copy()
    frame["phase_label"] = frame["phase"].map(PHASE_LABELS).fillna(frame["phase"])
    frame["autovacuum_label"] = frame["autovacuum"].map(AUTOVACUUM_LABELS)
    frame["phase_order"] = frame["phase"].map({p: i for i, p in enumerate(PHASE_LABELS)})
    return frame.sort_values(["autovacuum", "phase_order"], ascending=[False, True]).reset_index(drop=True)


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
