"""The soak section's chart: each held arm second by second beside its control, the hold shaded."""

from __future__ import annotations

import altair as alt
import pandas as pd

from harness.experiments.soak import outcomes as soak_outcomes
from harness.article.charts import CPU_BOUND_LABEL, WIDTH, chart_title, fixed_scale, plain_frame
from harness.article.labels import NEUTRAL, TARGET_BAND_COLOUR
from harness.article.sections import soak_model
from harness.article.sections.soak_arms import (Loaded, arm_label, control_of, cpu_marked, cpu_text, held_label,
                                                on_disk)

# the second is the series' latency: the claim statement's, or a job library's pickup (soak_outcomes.latency_of)
# what the hold leaves behind, read where it costs: the buffers one claim reads (n_dead_tup climbs in a control too)
MEASURES = ("backlog (jobs)", "claim p99 (ms)", "buffers per claim", "oldest snapshot (s)")
PICKUP = "pickup p99 (ms)"
RUN_COLOURS = {"held": NEUTRAL["charcoal"], "control": NEUTRAL["grey"], "model": NEUTRAL["ochre"]}


def _measures(mine: Loaded, position: int) -> pd.DataFrame:
    """One run's four measures per second: (second, measure, value)."""
    series, samples = mine.series[position], mine.samples[position]
    latency = soak_outcomes.latency_of(series)
    parts = [pd.DataFrame({"second": series["second"], "measure": MEASURES[0], "value": series["backlog"]}),
             pd.DataFrame({"second": series["second"], "measure": PICKUP if latency == "pickup" else MEASURES[1],
                           "value": series[f"{latency}_p99_ms"]}),
             pd.DataFrame({"second": samples["t_s"], "measure": MEASURES[2],
                           "value": samples["buffers_per_claim"] if "buffers_per_claim" in samples else None}),
             pd.DataFrame({"second": samples["t_s"], "measure": MEASURES[3], "value": samples["horizon_age_s"]})]
    return pd.concat(parts, ignore_index=True).dropna(subset=["value"])


def _cpu_bound(row) -> bool:
    value = row.get("cpu_bound")
    return bool(value) if value is not None and not pd.isna(value) else False


def timelines(mine: Loaded | None, name=arm_label) -> pd.DataFrame:
    """Every held arm off the disk with synchronous commits (its mitigation too), its first run where it has
    repeats, with the control it is read against in the end: (arm, run, second, measure, value, pin_from, pin_to,
    sample_s, explain_s, cpu_marked: the held run has the CPU mark, in its arm's name too), run "held" or "control";
    empty without a soak. name: an arm's name from its row (a job library's: harness.article.sections.
    library_soak.library_label)."""
    frames = []
    runs = mine.summaries if mine is not None else pd.DataFrame(columns=["holder"])
    # an arm raced at more than one rate (the model's check) says its rate, so that its panels stay apart
    rates = runs.groupby(runs.apply(lambda r: f"{name(r)}: {held_label(r)}", axis=1))["rate_asked"].nunique() \
        if len(runs) and "rate_asked" in runs else pd.Series(dtype=int)
    for position, row in runs.iterrows():
        if row["holder"] == "none" or on_disk(row) or row["synchronous_commit"] != "on" or row["repeat"]:
            continue
        control = control_of(runs, position)
        bound = any(_cpu_bound(runs.iloc[r]) for r in (position, control) if r is not None)
        arm = f"{name(row)}: {held_label(row)}"
        arm += (f" at {row['rate_asked']}" if rates.get(arm, 1) > 1 else "") + (CPU_BOUND_LABEL if bound else "")
        arm += cpu_text([cpu_marked(row)])
        # the model's backlog over the hold, predicted from runs other than this one (soak_model)
        predicted = soak_model.predicted_backlog(mine, position) if row.get("library") is None else None
        for which, run in (("held", position), ("control", control), ("model", position)):
            if run is None or (which == "model" and predicted is None):
                continue
            frame = _measures(mine, run) if which != "model" else predicted.assign(measure=MEASURES[0])
            frames.append(frame.assign(arm=arm, run=which, cpu_marked=cpu_marked(row) is not None,
                                       pin_from=float(row["pin_from"]),
                                       pin_to=float(row["pin_to"]), sample_s=mine.sample_s.get(run),
                                       explain_s=mine.explain_s.get(run)))
    columns = ["arm", "run", "second", "measure", "value", "pin_from", "pin_to", "sample_s", "explain_s", "cpu_marked"]
    return pd.concat(frames, ignore_index=True)[columns] if frames else pd.DataFrame(columns=columns)


def soak_timeline_chart(data: pd.DataFrame) -> alt.VConcatChart | alt.Chart:
    """Small multiples: per held arm, a panel per measure, the held run over its control, the hold shaded."""
    data = plain_frame(data)
    if not len(data):
        return alt.Chart(pd.DataFrame({"second": []})).mark_line().properties(width=WIDTH, title="no held arm")
    drawn = [run for run in RUN_COLOURS if run in set(data["run"])]
    # one data source per arm, shared by the shade and the lines, so the facet splits both
    shade = alt.Chart().mark_rect(color=TARGET_BAND_COLOUR, opacity=0.6).encode(
        x="min(pin_from):Q", x2="min(pin_to):Q")
    lines = alt.Chart().mark_line(interpolate="step-after", strokeWidth=1.2).encode(
        x=alt.X("second:Q", title="s into the run"),
        y=alt.Y("value:Q", title=None),
        color=alt.Color("run:N", scale=fixed_scale(drawn, RUN_COLOURS), sort=drawn, title=None,
                        legend=alt.Legend(orient="bottom")),
        tooltip=["run:N", "measure:N", "second:Q", alt.Tooltip("value:Q", format=",.2f")])
    measures = [m for m in (MEASURES[0], MEASURES[1], PICKUP, *MEASURES[2:]) if m in set(data["measure"])]
    width = (WIDTH + 120) // len(MEASURES) - 50  # the four panels fill the text column
    every = sorted({f"{s:g} s" for s in data["sample_s"].dropna()})
    explained = sorted({f"{s:g} s" for s in data["explain_s"].dropna()}) if "explain_s" in data else []
    arms = [alt.layer(shade, lines, data=data[data["arm"] == arm]).properties(width=width, height=70).facet(
        column=alt.Column("measure:N", title=None, sort=measures), title=arm)
        .resolve_scale(y="independent") for arm in dict.fromkeys(data["arm"])]
    return alt.vconcat(*arms).properties(title=chart_title(
        "Held against not held, second by second",
        "shaded: the hold; grey: the same arm with nothing held"
        + ("; ochre: the backlog the model predicts, fitted on the other runs" if "model" in drawn else ""),
        "the first of each arm's runs; the buffers one claim reads, by EXPLAIN every "
        f"{' or '.join(explained) or 'few seconds'}, and the oldest snapshot's age every "
        f"{' or '.join(every) or 'second'}"
        + ("; (CPU-bound): its runs waited for a CPU half their time, and decide nothing"
           if data["arm"].str.contains(CPU_BOUND_LABEL, regex=False).any() else "")
        + (f"; CPUs full: this machine's CPUs busy {soak_outcomes.CPU_BUSY_SHARE:.0%} or more for "
           f"{soak_outcomes.CPU_BUSY_RUN_S} s in a row, in the held run shown"
           if "cpu_marked" in data and data["cpu_marked"].any() else "")))
