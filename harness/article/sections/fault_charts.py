"""The faults section's chart: one fault run's claims, reaps and completions over time."""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

from harness.article.charts import WIDTH, chart_title, fixed_scale, plain_frame
from harness.article.labels import FAULT_EVENT_COLOURS, FAULT_EVENT_ORDER, NOTE_COLOUR, in_order


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
