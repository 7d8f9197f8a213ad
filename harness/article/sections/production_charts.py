"""The production section's charts and table: conflicts and pickup per polling setup, and one run over time."""

from __future__ import annotations
from pathlib import Path

import altair as alt
import pandas as pd

from harness.article.charts import HEIGHT, WIDTH, chart_title, dash_legend, fixed_scale, plain_frame, zero_labels
from harness.article.formats import MISSING, count, ms, number, percent
from harness.article.labels import (ENDPOINT_COLOURS, NOTE_COLOUR, PRODUCTION_ENDPOINT_LABELS, RUNNER_COUNT_TONES,
                                    in_order)
from harness.storage import open_runs


def production_table(summary: pd.DataFrame) -> pd.DataFrame:
    """The sweep as the article's table: one row per point, the burst scenario last."""
    frame = summary.sort_values(["burst", "runner_count", "poll_s", "endpoint"],
                                ascending=[True, True, False, False]).copy()
    frame["scenario"] = ["burst of " + str(int(b)) if b else "steady" for b in frame["burst"]]
    frame["pickup_tail"] = [pickup_tail_text(row) for _, row in frame.iterrows()]
    # the columns that fit the page; `python -m harness production` prints every figure of a run
    columns = {"scenario": "arrivals", "endpoint": "endpoint", "runner_count": "runners", "poll_s": "poll every (s)",
               "polls": "polls", "conflicts": "409s",
               "share_of_polls_with_a_conflict": "listing polls meeting a 409",
               "loser_payload_bytes_per_claimed_job": "bytes to losers per job",
               "pickup_p50_ms": "pickup p50", "pickup_tail": "pickup p99 (or max)",
               "statements_per_claimed_job": "statements per job", "backend_cpu_ms_per_claimed_job":
               "server CPU ms per job", "duplicate_jobs": "duplicates"}
    return frame[list(columns)].rename(columns=columns)


def pickup_tail(row) -> tuple[float, bool, int | None]:
    """A point's pickup tail: its p99 where it has at least 100 runs, else its slowest pickup, as (ms, whether runs
    never picked up, counted at the window's end, reach it, the pickups the slowest is one of: None for a p99)."""
    shown = row.get("pickup_p99_shown")
    if shown is None or pd.isna(shown):  # runs stored before the tail was judged
        return row.get("pickup_p99_ms"), False, None
    if bool(shown):
        return row.get("pickup_p99_ms"), bool(row.get("pickup_p99_is_lower_bound")), None
    return row.get("pickup_max_ms"), bool(row.get("pickup_max_is_lower_bound")), row.get("pickups_observed")


def pickup_tail_text(row) -> str:
    """pickup_tail as the table's cell prints it: the p99, or "max" and of how many pickups; "at least" where runs
    never picked up reach it (the prose says it in words: sections.production)."""
    value, bound, pickups = pickup_tail(row)
    if value is None or pd.isna(value):
        return MISSING
    text = ms(value) if pickups is None else f"max {ms(value)} of {count(pickups)}"
    return f"at least {text}" if bound else text


def production_table_formats() -> dict:
    """How production_table's columns read in the article."""
    def two(value):
        return number(value, 2)

    return {"runners": count, "poll every (s)": lambda v: number(v, 1), "polls": count, "409s": count,
            "listing polls meeting a 409": percent, "bytes to losers per job": count,
            "pickup p50": ms, "pickup p99 (or max)": str, "statements per job": lambda v: number(v, 1),
            "server CPU ms per job": two, "duplicates": count}


def production_timeline(paths: list[Path]) -> pd.DataFrame:
    """The burst runs' timelines (runs pending and 409s per second), one row per run and second, long form."""
    rows = []
    for run in open_runs(paths):
        if not run.parameters.burst:
            continue
        frame = run.table("timeline")
        frame["endpoint_label"] = PRODUCTION_ENDPOINT_LABELS[run.parameters.endpoint]
        rows.append(frame)
    if not rows:
        return pd.DataFrame(columns=["second", "endpoint_label", "measure", "value"])
    frame = pd.concat(rows, ignore_index=True).rename(columns={"pending": "runs pending", "conflicts": "409s"})
    return frame.melt(id_vars=["second", "endpoint_label"], value_vars=["runs pending", "409s"],
                      var_name="measure", value_name="value")


def _poll_axis(values) -> alt.X:
    return alt.X("poll_s:O", title="poll interval (s)", sort=sorted(set(values), reverse=True))


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


# the tail a point shows: its p99 where it had enough pickups for one (production.PICKUPS_FOR_A_P99), else its highest
TAILS = ("p50", "p99", "highest")


def production_pickup_chart(summary: pd.DataFrame) -> alt.FacetChart:
    """Pickup latency (enqueue to claim) p50 and its tail by poll interval, per endpoint, one panel per runner count:
    the tail is the p99 where a point had enough pickups for one, else the highest pickup (pickup_p99_shown)."""
    rows = summary[summary["burst"] == 0].copy()
    tails = [pickup_tail(row) for _, row in rows.iterrows()]  # the tail the table and the prose show
    rows["pickup_tail_ms"] = [value for value, _, _ in tails]
    rows["tail"] = ["highest" if row.get("pickup_p99_shown") is False or row.get("pickup_p99_shown") == 0 else "p99"
                    for _, row in rows.iterrows()]
    data = plain_frame(rows[["endpoint_label", "runner_count", "poll_s", "pickup_p50_ms", "pickup_tail_ms", "tail"]])
    long = data.melt(id_vars=["endpoint_label", "runner_count", "poll_s", "tail"],
                     value_vars=["pickup_p50_ms", "pickup_tail_ms"], var_name="percentile", value_name="ms")
    long["percentile"] = long["percentile"].map({"pickup_p50_ms": "p50"}).fillna(long["tail"])
    long = long.drop(columns=["tail"])
    long["seconds"] = long["ms"] / 1e3
    base = alt.Chart().encode(
        x=_poll_axis(long["poll_s"]),
        y=alt.Y("seconds:Q", title="pickup latency (s)", scale=alt.Scale(type="log")),
        color=_endpoint_colour(long["endpoint_label"]))
    # lines and points in layers of their own, so the legend draws the dashes (a line with points draws none)
    lines = base.mark_line().encode(
        strokeDash=alt.StrokeDash("percentile:N", title="percentile", legend=dash_legend(),
                                  scale=alt.Scale(domain=list(TAILS), range=[[1, 0], [5, 3], [2, 2]])),
        detail="percentile:N")
    points = base.mark_point(filled=True, size=30, opacity=1).encode(
        tooltip=["endpoint_label:N", "runner_count:Q", "poll_s:O", "percentile:N",
                 alt.Tooltip("seconds:Q", format=".3f")])
    return alt.layer(lines, points, data=long).properties(width=WIDTH // 3 - 20, height=HEIGHT).facet(
        column=alt.Column("runner_count:O", title="runners")).properties(
        title=chart_title("The wait from enqueue to claim", "from each run's intended enqueue time (open-loop "
                                                            "arrivals); the tail is the highest pickup where a point "
                                                            "had too few for a p99"))


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
