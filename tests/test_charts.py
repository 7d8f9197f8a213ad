"""Every chart function, on data from real (tiny) runs, produces a valid Vega-Lite spec."""

from __future__ import annotations

import inspect
import json

import altair as alt
import pytest

from harness.article import analysis, charts, vega
from harness.experiments import bench, churn, plans, registry
from tiny_report import TINY_PARAMS, build_tiny_report


@pytest.fixture(scope="module")
def frames():
    tiny = build_tiny_report()
    runs = registry.ensure_sections(TINY_PARAMS, tiny.data_dir, progress=False)  # all stored by the tiny build
    race_runs, slow_runs = runs["races"], runs["slow_race"]
    [plans_run], [churn_run], [bench_run] = runs["plans"], runs["churn"], runs["bench"]
    summary = analysis.race_summary(race_runs)
    by_workers = analysis.over_repeats(summary)
    waits = analysis.wait_times(race_runs, "guarded")
    return {
        "by_workers": by_workers,
        "summary": summary,
        "waits": waits,
        "timeline": analysis.timeline(slow_runs),
        "plan_points": analysis.claim_plan_points(plans.load_plans(plans_run)),
        "churn": analysis.churn_modes(churn.load_churn(churn_run)),
        "pruning": analysis.pruning_phases(churn.load_pruning(churn_run)),
        "bench": bench.load_bench(bench_run),
        "top_workers": int(by_workers["worker_count"].max()),
    }


def all_charts(f) -> dict:
    return {
        "duplicates_chart": charts.duplicates_chart(f["by_workers"]),
        "throughput_chart": charts.throughput_chart(f["by_workers"]),
        "losses_chart": charts.losses_chart(f["by_workers"]),
        "latency_chart": charts.latency_chart(f["by_workers"]),
        "wait_quantiles_chart": charts.wait_quantiles_chart(analysis.wait_quantiles(f["waits"])),
        "wait_distribution_chart": charts.wait_distribution_chart(
            analysis.wait_distribution(f["waits"], f["top_workers"]), f["top_workers"]),
        "slow_race_chart": charts.slow_race_chart(f["timeline"]),
        "plan_buffers_chart": charts.plan_buffers_chart(f["plan_points"]),
        "plan_time_chart": charts.plan_time_chart(f["plan_points"]),
        "hot_rate_chart": charts.hot_rate_chart(f["churn"]),
        "pruning_chart": charts.pruning_chart(f["pruning"]),
        "bench_ratio_chart": charts.bench_ratio_chart(f["bench"], bench.TARGET_BAND),
        "wait_share_chart": charts.wait_share_chart(analysis.wait_share_long(analysis.wait_share_table(f["summary"]))),
        "cpu_split_chart": charts.cpu_split_chart(analysis.cpu_split_long(analysis.wait_share_table(f["summary"]))),
        "latency_by_fill_chart": charts.latency_by_fill_chart(analysis.latency_by_fill(f["summary"]),
                                                              sorted(set(f["summary"]["worker_count"]))),
    }


def test_every_chart_function_is_covered(frames):
    defined = {name for name, fn in inspect.getmembers(charts, inspect.isfunction)
               if name.endswith("_chart") and fn.__module__ == charts.__name__}
    assert defined == set(all_charts(frames))


@pytest.mark.slow
def test_every_chart_is_valid_vega_lite_with_its_data(frames):
    for name, chart in all_charts(frames).items():
        spec = chart.to_dict()  # validates against the Vega-Lite schema
        assert spec["$schema"].startswith("https://vega.github.io/schema/vega-lite/"), name
        rows = sum(len(v) for v in spec.get("datasets", {}).values())
        assert rows > 0, f"{name} carries no data"
        assert rows < 5000, f"{name} carries {rows} rows: aggregate before charting"
        json.dumps(spec)  # plain JSON, nothing numpy-typed left


def test_every_chart_has_tooltips(frames):
    for name, chart in all_charts(frames).items():
        assert '"tooltip"' in json.dumps(chart.to_dict(validate=False)), f"{name} has no tooltip"


def test_slow_race_toggle_is_a_radio_bound_parameter(frames):
    spec = charts.slow_race_chart(frames["timeline"]).to_dict()
    [param] = spec["params"]
    assert param["bind"]["input"] == "radio"
    assert set(param["bind"]["options"]) == {"naive", "guarded", "skip_locked"}
    assert {"won a job another worker also won"} <= set(frames["timeline"]["result"])  # naive duplicated


def test_renderer_emits_a_plain_vega_embed_call(frames):
    vega.enable()
    bundle = alt.renderers.get()(charts.duplicates_chart(frames["by_workers"]).to_dict())
    html = bundle[vega.EMBED_MIMETYPE]
    assert 'class="claimrace-chart"' in html and "vegaEmbed(" in html
    assert "<script src" not in html and "cdn" not in html.lower() and "require" not in html
    assert "text/html" in bundle, "JupyterLab still gets altair's own output"


def test_the_slowed_down_race_draws_each_read_and_write_apart(frames):
    timeline = frames["timeline"]
    two_statements = timeline[timeline["strategy"].isin(["naive", "guarded"])]
    # the pause sits between the read's answer and the write's start, as the stored rows say
    assert (two_statements["read_end_ms"] > two_statements["start_ms"]).all()
    assert (two_statements["write_start_ms"] >= two_statements["read_end_ms"]).all()
    assert (two_statements["end_ms"] > two_statements["write_start_ms"]).all()
    assert timeline.loc[timeline["strategy"] == "skip_locked", "read_end_ms"].isna().all()
