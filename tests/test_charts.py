"""Every chart function, on data from real (tiny) runs, produces a valid Vega-Lite spec."""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil

import altair as alt
import pandas as pd
import pytest

from harness.article import analysis, charts, labels, vega
from harness.article.sections import fault_runs
from harness.storage import Run
from harness.article import sections
from harness.article.sections import (bench_charts, churn_charts, race_charts, fault_charts, libraries as library_section, library_charts,
                                      plan_charts, production as production_section, production_charts, soak as soak_section,
                                      soak_charts, strategy_charts)
from harness.experiments import registry
from harness.experiments.bench import measure as bench
from harness.experiments.soak.sweep import SoakSweep
from tiny_report import TINY_PARAMS, build_tiny_report


@pytest.fixture(scope="module")
def frames():
    tiny = build_tiny_report()
    runs = registry.ensure_sections(TINY_PARAMS, tiny.data_dir, progress=False)  # all stored by the tiny build
    race_runs, slow_runs = runs["races"], runs["slow_race"]
    [plans_run], [churn_run], [bench_run] = runs["plans"], runs["churn"], runs["bench"]
    summary = analysis.race_summary(race_runs)
    by_workers = analysis.over_repeats(summary)
    waits = analysis.wait_times(race_runs)
    return {
        "by_workers": by_workers,
        "summary": summary,
        "race_runs": race_runs,
        "waits": waits,
        "timeline": analysis.timeline(slow_runs),
        "plan_points": plan_charts.claim_plan_points(Run(plans_run).summary),
        "churn": churn_charts.churn_modes(Run(churn_run).summary),
        "pruning": churn_charts.pruning_phases(Run(churn_run).table("pruning", absent_ok=True)),
        "bench": Run(bench_run).summary,
        "top_workers": int(by_workers["worker_count"].max()),
        "latency": strategy_charts.by_round_trip(analysis.race_summary(runs["latency"])),
        "indexed": strategy_charts.conditions(analysis.race_summary(runs["indexed_race"])),
        "fault_events": fault_runs.timeline(runs["faults"], "lease", "pause"),
        "production": production_section.production_summary(runs["production"]),
        "production_timeline": production_charts.production_timeline(runs["production"]),
        "libraries": library_section.library_points(library_section.library_summary(runs["libraries"])),
        "soak": soak_section.load({"soak": registry.asked("soak", SoakSweep(), runs["soak"])}, {}),
    }


def all_charts(f) -> dict:
    return {
        "duplicates_chart": race_charts.duplicates_chart(f["by_workers"]),
        "throughput_chart": race_charts.throughput_chart(f["by_workers"]),
        "losses_chart": race_charts.losses_chart(f["by_workers"]),
        "latency_chart": race_charts.latency_chart(f["by_workers"]),
        "wait_quantiles_chart": race_charts.wait_quantiles_chart(analysis.wait_quantiles(f["waits"])),
        "wait_distribution_chart": race_charts.wait_distribution_chart(
            analysis.wait_distribution(f["waits"], f["top_workers"]), f["top_workers"]),
        "slow_race_chart": race_charts.slow_race_chart(f["timeline"]),
        "plan_buffers_chart": plan_charts.plan_buffers_chart(f["plan_points"]),
        "plan_time_chart": plan_charts.plan_time_chart(f["plan_points"]),
        "hot_rate_chart": churn_charts.hot_rate_chart(f["churn"]),
        "pruning_chart": churn_charts.pruning_chart(f["pruning"]),
        "bench_ratio_chart": bench_charts.bench_ratio_chart(f["bench"], bench.TARGET_BAND),
        "wait_share_chart": race_charts.wait_share_chart(analysis.wait_share_long(analysis.wait_share_table(f["summary"]))),
        "cpu_split_chart": race_charts.cpu_split_chart(analysis.cpu_split_long(analysis.wait_share_table(f["summary"]))),
        "latency_by_fill_chart": race_charts.latency_by_fill_chart(analysis.latency_by_fill(f["summary"]),
                                                              sorted(set(f["summary"]["worker_count"]))),
        "round_trip_chart": strategy_charts.round_trip_chart(strategy_charts.round_trip_long(f["latency"])),
        "side_by_side_chart": strategy_charts.side_by_side_chart(
            strategy_charts.side_by_side_long(f["indexed"], strategy_charts.INDEX), "With and without the partial index"),
        "fault_timeline_chart": fault_charts.fault_timeline_chart(f["fault_events"]),
        "production_conflicts_chart": production_charts.production_conflicts_chart(f["production"]),
        "production_pickup_chart": production_charts.production_pickup_chart(f["production"]),
        "production_timeline_chart": production_charts.production_timeline_chart(f["production_timeline"]),
        "libraries_chart": library_charts.libraries_chart(library_charts.libraries_long(f["libraries"])),
        "soak_timeline_chart": soak_charts.soak_timeline_chart(soak_charts.timelines(f["soak"])),
    }


# the shared chart grammar and every module of the sections, which draw their own charts
CHART_MODULES = (charts, *(importlib.import_module(f"{sections.__name__}.{module.name}")
                           for module in pkgutil.iter_modules(sections.__path__)))


def test_every_chart_function_is_covered(frames):
    defined = {name for module in CHART_MODULES for name, fn in inspect.getmembers(module, inspect.isfunction)
               if name.endswith("_chart") and fn.__module__ == module.__name__}
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
    spec = race_charts.slow_race_chart(frames["timeline"]).to_dict()
    [param] = spec["params"]
    assert param["bind"]["input"] == "radio"
    assert set(param["bind"]["options"]) == {"naive", "guarded", "skip_locked"}
    assert {"won a job another worker also won"} <= set(frames["timeline"]["result"])  # naive duplicated


def test_renderer_emits_a_plain_vega_embed_call(frames):
    vega.enable()
    bundle = alt.renderers.get()(race_charts.duplicates_chart(frames["by_workers"]).to_dict())
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


# --------------------------------------------------------------------------- what the specs say


def _views(spec: dict):
    """Every unit view of a spec (layers, concatenations and facets opened up)."""
    yield spec
    for key in ("layer", "hconcat", "vconcat", "concat"):
        for child in spec.get(key, []):
            yield from _views(child)
    if "spec" in spec:
        yield from _views(spec["spec"])


def _rows(spec: dict, view: dict | None = None) -> list[dict]:
    """The rows a view draws (its own named dataset), or every row the chart carries."""
    datasets = spec.get("datasets", {})
    if view is not None and "name" in view.get("data", {}):
        return datasets[view["data"]["name"]]
    return [row for rows in datasets.values() for row in rows]


def _mark(view: dict) -> str | None:
    mark = view.get("mark")
    return mark.get("type") if isinstance(mark, dict) else mark


def _domains(spec: dict, channel: str, field: str) -> list[list]:
    return [view["encoding"][channel]["scale"]["domain"] for view in _views(spec)
            if view.get("encoding", {}).get(channel, {}).get("field") == field
            and "domain" in view["encoding"][channel].get("scale", {})]


def _domain(spec: dict, channel: str, field: str) -> list:
    """The one domain every layer of a chart gives `field` on `channel`."""
    domains = _domains(spec, channel, field)
    assert domains and all(d == domains[0] for d in domains), domains
    return domains[0]


def _subtitle(spec: dict) -> str:
    title = spec.get("title", {})
    subtitle = title.get("subtitle", []) if isinstance(title, dict) else []
    return " ".join([subtitle] if isinstance(subtitle, str) else subtitle)


def _spread_views(spec: dict) -> list[dict]:
    """Layers that draw a min-max: a rule or area from a *_min (or low) field to a *_max (or high) field."""
    return [view for view in _views(spec) if _mark(view) in ("rule", "area")
            and "y2" in view.get("encoding", {})
            and (view["encoding"]["y2"]["field"].endswith("_max") or view["encoding"]["y2"]["field"] == "high")]


@pytest.fixture(scope="module")
def repeated(frames):
    """The tiny races as if each point had run twice, the second time 20% slower and with 20% more of everything."""
    summary = frames["summary"]
    second = summary.assign(repeat=summary["repeat"] + 1)
    for metric in analysis.REPEATED_METRICS:
        if metric in second:
            second[metric] = second[metric] * 1.2
    both = pd.concat([summary, second], ignore_index=True)
    waits = frames["waits"]
    return {"by_workers": analysis.over_repeats(both), "summary": both,
            "waits": pd.concat([waits, waits.assign(repeat=waits["repeat"] + 1, ms=waits["ms"] * 1.3)],
                               ignore_index=True)}


def test_strategy_legends_list_exactly_the_strategies_drawn(frames):
    for name, chart in all_charts(frames).items():
        spec = chart.to_dict()
        drawn = labels.strategies_in({row["strategy"] for row in _rows(spec) if "strategy" in row})
        for domain in _domains(spec, "color", "strategy"):
            assert domain == drawn, name


def test_every_colour_domain_is_what_the_chart_draws(frames):
    for name, chart in all_charts(frames).items():
        spec = chart.to_dict()
        for view in _views(spec):
            colour = view.get("encoding", {}).get("color", {})
            if "domain" not in colour.get("scale", {}):
                continue
            present = {row[colour["field"]] for row in _rows(spec) if colour["field"] in row}
            assert set(colour["scale"]["domain"]) == present, (name, colour["field"])


def test_lost_races_per_win_draws_only_who_can_lose_against_the_rivals(frames):
    by_workers = frames["by_workers"]
    spec = race_charts.losses_chart(by_workers).to_dict()
    assert _domain(spec, "color", "strategy") == ["guarded"]
    assert {row["strategy"] for row in _rows(spec) if "strategy" in row} == {"guarded"}
    rivals = [view for view in _views(spec) if _mark(view) == "line"
              and view.get("encoding", {}).get("y", {}).get("field") == "rivals"]
    assert len(rivals) == 1
    rows = _rows(spec, rivals[0])
    assert {row["worker_count"] for row in rows} == set(by_workers["worker_count"])
    assert all(row["rivals"] == row["worker_count"] - 1 for row in rows)
    subtitle = _subtitle(spec)
    assert "naive is not drawn" in subtitle and "skip_locked is not drawn" in subtitle and "N − 1" in subtitle


def test_bench_ratio_draws_parity_and_the_target_band_on_an_uncut_axis(frames):
    spec = bench_charts.bench_ratio_chart(frames["bench"], bench.TARGET_BAND).to_dict()
    views = list(_views(spec))
    [parity] = [v for v in views if _mark(v) == "rule" and v["encoding"]["y"]["field"] == "y"]
    assert [row["y"] for row in _rows(spec, parity)] == [1.0]
    [band] = [v for v in views if _mark(v) == "rect"]
    assert [(row["low"], row["high"]) for row in _rows(spec, band)] == [bench.TARGET_BAND]
    [points] = [v for v in views if _mark(v) == "point"]
    low, high = points["encoding"]["y"]["scale"]["domain"]
    ratios = [row[c] for row in _rows(spec, points) for c in ("ratio", "ratio_min", "ratio_max")]
    assert low < min(bench.TARGET_BAND[0], *ratios) and high > max(bench.TARGET_BAND[1], *ratios)
    assert _domain(spec, "color", "strategy") == labels.strategies_in(frames["bench"]["strategy"])


SPREAD_CHARTS = {
    "duplicates_chart": lambda f: race_charts.duplicates_chart(f["by_workers"]),
    "throughput_chart": lambda f: race_charts.throughput_chart(f["by_workers"]),
    "losses_chart": lambda f: race_charts.losses_chart(f["by_workers"]),
    "latency_chart": lambda f: race_charts.latency_chart(f["by_workers"]),
    "wait_quantiles_chart": lambda f: race_charts.wait_quantiles_chart(analysis.wait_quantiles(f["waits"])),
    "latency_by_fill_chart": lambda f: race_charts.latency_by_fill_chart(analysis.latency_by_fill(f["summary"]), [1, 4]),
}


def test_spread_over_repeats_is_drawn_when_there_are_repeats(frames, repeated):
    assert frames["by_workers"]["repeats"].max() == 1 and repeated["by_workers"]["repeats"].min() == 2
    for name, build in SPREAD_CHARTS.items():
        assert not _spread_views(build(frames).to_dict()), f"{name} draws a spread from one repeat"
        spec = build(repeated).to_dict()
        assert _spread_views(spec), f"{name} draws no spread over two repeats"
        assert "2 repeats" in _subtitle(spec), name


def test_the_spread_spans_the_repeats(repeated):
    by_workers = repeated["by_workers"]
    guarded = by_workers[(by_workers["strategy"] == "guarded") & (by_workers["worker_count"] == 4)].iloc[0]
    assert guarded["claims_per_second_max"] == pytest.approx(1.2 * guarded["claims_per_second_min"])
    assert guarded["claims_per_second_min"] < guarded["claims_per_second"] < guarded["claims_per_second_max"]
    quantiles = analysis.wait_quantiles(repeated["waits"])
    assert (quantiles["repeats"] == 2).all() and (quantiles["ms_min"] < quantiles["ms_max"]).all()


def test_zero_duplicate_lines_stay_visible_one_over_the_other(frames):
    spec = race_charts.duplicates_chart(frames["by_workers"]).to_dict()
    [line, *_] = [v for v in _views(spec) if _mark(v) == "line"]
    widths = dict(zip(line["encoding"]["strokeWidth"]["scale"]["domain"],
                      line["encoding"]["strokeWidth"]["scale"]["range"]))
    dashes = dict(zip(line["encoding"]["strokeDash"]["scale"]["domain"],
                      line["encoding"]["strokeDash"]["scale"]["range"]))
    assert widths["guarded"] > widths["skip_locked"]  # the wider one underneath
    assert dashes["skip_locked"] != [1, 0] and dashes["guarded"] == [1, 0]
    # drawn in that order: the wider line's rows come first
    order = [row["strategy"] for row in _rows(spec, line)]
    assert order.index("guarded") < order.index("skip_locked")
    assert "guarded and skip_locked handed no job to more than one worker" in _subtitle(spec)


def test_the_wait_for_a_job_has_skip_locked_beside_guarded(frames):
    assert set(frames["waits"]["strategy"]) == {"guarded", "skip_locked"}
    spec = race_charts.wait_quantiles_chart(analysis.wait_quantiles(frames["waits"])).to_dict()
    assert _domain(spec, "color", "strategy") == ["guarded", "skip_locked"]
    # skip_locked never loses, so its wait is its winning claim: the chart says the two lines are one
    assert "skip_locked: time to get a job and winning claim latency are the same" in _subtitle(spec)
    distribution = analysis.wait_distribution(frames["waits"], frames["top_workers"])
    spec = race_charts.wait_distribution_chart(distribution, frames["top_workers"]).to_dict()
    assert _domain(spec, "color", "strategy") == ["guarded", "skip_locked"]


def test_the_wait_for_a_job_of_one_strategy_still_draws(frames):
    waits = analysis.wait_times(frames["race_runs"], "guarded")
    assert set(waits["strategy"]) == {"guarded"}
    spec = race_charts.wait_quantiles_chart(analysis.wait_quantiles(waits)).to_dict()
    assert _domain(spec, "color", "strategy") == ["guarded"]


def test_the_hot_chart_leaves_the_all_zero_index_setup_to_a_table(frames):
    modes = frames["churn"]
    assert churn_charts.index_setups_without_hot(modes) == ["with partial index"]
    spec = churn_charts.hot_rate_chart(modes).to_dict()
    assert _domain(spec, "color", "index") == ["without partial index"]
    assert {row["index"] for row in _rows(spec)} == {"without partial index"}
    assert "with partial index: no update was HOT" in _subtitle(spec)
    table = churn_charts.no_hot_updates_table(modes)
    assert set(table["index"]) == {"with partial index"} and (table["HOT updates"] == 0).all()
    assert table["updates"].sum() == modes.loc[modes["partial_index"], "updates"].sum()
    assert list(table["drained by"]) == ["one connection", "race, 4 workers", "one bulk UPDATE"]


def test_labels_and_colours_are_written_once():
    import re
    from pathlib import Path

    sources = {name: Path(module.__file__).read_text() for name, module in
               (("charts", charts), ("analysis", analysis))}
    for name, text in sources.items():
        assert not re.search(r'"#[0-9a-fA-F]{3,6}"', text), \
            f"{name} has a colour of its own"
        for label in ("without partial index", "winning claim latency", "row or transaction lock",
                      "autovacuum on (default)", "right after the claims", "one bulk UPDATE"):
            assert label not in text, f"{name} types {label!r}; it belongs in labels"
    assert not hasattr(analysis, "MODE_ORDER")


def test_the_side_by_side_chart_shades_cpu_bound_worker_counts_and_only_those(frames):
    """The same races under two conditions: a CPU-bound point puts the grey band under both facets, from its
    worker count on, and the title says what it means; with no CPU-bound point there is no band."""
    indexed = frames["indexed"].copy()
    top = int(indexed["worker_count"].max())
    free = indexed.assign(cpu_bound=False)
    bound = indexed.assign(cpu_bound=indexed["worker_count"] == top)
    free_spec = strategy_charts.side_by_side_chart(strategy_charts.side_by_side_long(free, strategy_charts.INDEX),
                                                   "free").to_dict()
    assert [v for v in _views(free_spec) if _mark(v) == "rect"] == []
    spec = strategy_charts.side_by_side_chart(strategy_charts.side_by_side_long(bound, strategy_charts.INDEX),
                                              "bound").to_dict()
    [band] = [v for v in _views(spec) if _mark(v) == "rect"]
    assert {row["band_end"] for row in _rows(spec)} == {float(top)}
    assert "CPU-bound" in json.dumps(spec["title"])


def test_the_pickup_chart_draws_a_highest_pickup_where_a_point_had_too_few_for_a_p99():
    summary = pd.DataFrame([
        {"burst": 0, "endpoint_label": "/pending", "runner_count": 3, "poll_s": 1.0, "pickup_p50_ms": 400.0,
         "pickup_p99_ms": 900.0, "pickup_p99_shown": True, "pickup_max_ms": 950.0},
        {"burst": 0, "endpoint_label": "/pending", "runner_count": 3, "poll_s": 5.0, "pickup_p50_ms": 2000.0,
         "pickup_p99_ms": 4800.0, "pickup_p99_shown": False, "pickup_max_ms": 4800.0}])
    spec = production_charts.production_pickup_chart(summary).to_dict()
    rows = next(iter(spec["datasets"].values()))
    tails = {(row["poll_s"], row["percentile"]): row["seconds"] for row in rows}
    assert tails == {(1.0, "p50"): 0.4, (1.0, "p99"): 0.9, (5.0, "p50"): 2.0, (5.0, "highest"): 4.8}


def test_charts_that_draw_worker_counts_as_categories_or_panels_label_the_cpu_bound_ones():
    """Where no band can be drawn (bars per worker count, a panel per worker count, one worker count), the CPU-bound
    counts are said on their label or in the title, and the others are not."""
    shares = pd.DataFrame([{"strategy": "guarded", "worker_count": w, "wait": "CPU", "share": 0.5, "order": 0}
                           for w in (2, 32)])
    spec = json.dumps(race_charts.wait_share_chart(shares, bound=[32]).to_dict())
    assert "\"32 (CPU-bound)\"" in spec and "\"2 (CPU-bound)\"" not in spec and "waited for a CPU" in spec
    assert "(CPU-bound)" not in json.dumps(race_charts.wait_share_chart(shares).to_dict())
    fills = pd.DataFrame([{"strategy": "guarded", "worker_count": w, "drained_to": d, "p50_ms": 1.0, "p99_ms": 2.0}
                          for w in (2, 32) for d in (0.5, 1.0)])
    spec = json.dumps(race_charts.latency_by_fill_chart(fills, [2, 32], bound=[32]).to_dict())
    assert "\"32 (CPU-bound)\"" in spec and "\"2 (CPU-bound)\"" not in spec
    distribution = pd.DataFrame([{"strategy": "guarded", "measure": m, "fraction": f, "ms": 1.0 + f}
                                 for m in ("winning claim", "time to get a job") for f in (0.5, 1.0)])
    assert "CPU-bound at 32" in json.dumps(race_charts.wait_distribution_chart(distribution, 32, bound=[32]).to_dict())
    assert "CPU-bound" not in json.dumps(race_charts.wait_distribution_chart(distribution, 32, bound=[8]).to_dict())


# --------------------------------------------------------------------------- every chart of CPU-boundable points


def _summary(bound_at: int | None, **extra) -> pd.DataFrame:
    """Two races a point of naive, guarded and skip_locked at 2 and 32 workers; bound_at: the worker count whose
    races were CPU-bound (None: none was, though every race was read)."""
    rows = []
    for strategy in ("naive", "guarded", "skip_locked"):
        for workers in (2, 32):
            for repeat in (0, 1):
                rows.append({"run_id": f"{strategy}-{workers}-{repeat}", "strategy": strategy, "worker_count": workers,
                             "repeat": repeat, "job_count": 1000, "attempts": 1200 + repeat, "wins": 1000,
                             "lost": 200 * (strategy == "guarded"), "duplicate_jobs": 300 * (strategy == "naive"),
                             "extra_claims": 400 * (strategy == "naive"), "losses_per_win": 0.2 + repeat / 10,
                             "claims_per_second": 900.0 + 10 * repeat + workers,
                             "unique_jobs_per_second": 800.0 + repeat, "attempts_per_second": 1000.0 + repeat,
                             "extra_claims_per_job": 0.4 * (strategy == "naive"), "p50_ms": 0.5 + repeat,
                             "p99_ms": 2.0 + repeat, "cpu_bound": workers == bound_at, **extra})
    return pd.DataFrame(rows)


def _cpu_boundable_charts() -> dict:
    """Every chart that draws points a race can be CPU-bound at, as name -> draw(bound_at): the chart with the
    32-worker points CPU-bound (bound_at=32), or with none bound (None)."""
    def by_workers(bound_at):
        return analysis.over_repeats(_summary(bound_at))

    def bound_list(bound_at):
        return [] if bound_at is None else [bound_at]

    def waits(bound_at):
        rows = [{"strategy": s, "worker_count": w, "measure": m, "repeat": r, "ms": 1.0 + i + r}
                for s in ("guarded", "skip_locked") for w in (2, 32) for m in labels.WAIT_MEASURE_ORDER
                for r in (0, 1) for i in range(3)]
        return pd.DataFrame(rows)

    shares = pd.DataFrame([{"strategy": "guarded", "worker_count": w, "wait": "CPU", "share": 0.5, "order": 0}
                           for w in (2, 32)])
    fills = pd.DataFrame([{"strategy": "guarded", "worker_count": w, "drained_to": d, "p50_ms": 1.0, "p99_ms": 2.0}
                          for w in (2, 32) for d in (0.5, 1.0)])

    def round_trip(bound_at):
        rows = [dict(row, rtt_ms=rtt, proxy=True, run_id=f"{row['run_id']}-{rtt}",
                     cpu_bound=bool(bound_at) and rtt == 0 and row["worker_count"] == bound_at)
                for row in _summary(None).to_dict("records") for rtt in (0.0, 5.0)]
        return strategy_charts.round_trip_chart(strategy_charts.round_trip_long(
            strategy_charts.by_round_trip(pd.DataFrame(rows))))

    def side_by_side(bound_at):
        summary = pd.concat([_summary(bound_at, pg_version="16.4", partial_index=index) for index in (False, True)],
                            ignore_index=True)
        return strategy_charts.side_by_side_chart(strategy_charts.side_by_side_long(
            strategy_charts.conditions(summary), strategy_charts.INDEX), "with and without")

    def bench_points(bound_at):
        return pd.DataFrame([{"strategy": s, "worker_count": w, "pairs": 2, "ratio": 0.95, "ratio_min": 0.9,
                              "ratio_max": 1.0, "harness_claims_per_second": 950.0,
                              "pgbench_claims_per_second": 1000.0, "cpu_bound": w == bound_at}
                             for s in ("guarded", "skip_locked") for w in (1, 8, 32)])

    def library_points(bound_at):
        return pd.DataFrame([{"library": lib, "worker_count": w, "repeats": 2, "cpu_bound": w == bound_at,
                              **{f"{c}{end}": v for c, v in (("jobs_per_s", 500.0), ("pickup_p99_ms", 9.0))
                                 for end in ("", "_min", "_max")}}
                             for lib in ("river", "oban") for w in (2, 32)])

    return {
        "duplicates_chart": lambda b: race_charts.duplicates_chart(by_workers(b)),
        "throughput_chart": lambda b: race_charts.throughput_chart(by_workers(b)),
        "losses_chart": lambda b: race_charts.losses_chart(by_workers(b)),
        "latency_chart": lambda b: race_charts.latency_chart(by_workers(b)),
        "wait_quantiles_chart": lambda b: race_charts.wait_quantiles_chart(analysis.wait_quantiles(waits(b)),
                                                                      charts.cpu_bound_workers(by_workers(b))),
        "wait_distribution_chart": lambda b: race_charts.wait_distribution_chart(
            analysis.wait_distribution(waits(b), 32), 32, charts.cpu_bound_workers(by_workers(b))),
        "wait_share_chart": lambda b: race_charts.wait_share_chart(shares, bound=charts.cpu_bound_workers(by_workers(b))),
        "latency_by_fill_chart": lambda b: race_charts.latency_by_fill_chart(fills, [2, 32], bound_list(b)),
        "round_trip_chart": round_trip,
        "side_by_side_chart": side_by_side,
        "bench_ratio_chart": lambda b: bench_charts.bench_ratio_chart(bench_points(b), bench.TARGET_BAND),
        "libraries_chart": lambda b: library_charts.libraries_chart(library_charts.libraries_long(library_points(b))),
        "soak_timeline_chart": lambda b: soak_charts.soak_timeline_chart(soak_charts.timelines(soak_arms(b))),
    }


def soak_arms(bound_at):
    """A soak control and its held arm, the held one CPU-bound when bound_at is given."""
    base = {"shape": "delete", "strategy": "skip_locked", "history_rows": 0, "mitigation": "none", "storage": "tmpfs",
            "synchronous_commit": "on", "rate_asked": "80%", "workers": 4, "job_ms": 5.0, "pg_version": 16,
            "seconds": 70.0, "pin_from": 20.0, "pin_to": 40.0, "repeat": 0, "cpu_bound": False}
    frame = pd.DataFrame([base | {"holder": "none"},
                          base | {"holder": "repeatable_read", "cpu_bound": bound_at is not None}])
    series = {i: pd.DataFrame({"second": [0.0, 1.0], "backlog": [1, 2], "claim_p99_ms": [0.5, 0.6]}) for i in (0, 1)}
    samples = {i: pd.DataFrame({"t_s": [0.0, 1.0], "n_dead_tup": [5, 9], "horizon_age_s": [None, 1.0]})
               for i in (0, 1)}
    return soak_section.Loaded((), frame, series, samples, {0: 1.0, 1: 1.0})


# the charts whose points no CPU-bound reading belongs to, and why
NO_CPU_BOUND_POINTS = {
    "slow_race_chart": "one slowed-down race drawn attempt by attempt, paused on purpose",
    "cpu_split_chart": "draws the CPU readings the mark is made from, with the line they are read against",
    "plan_buffers_chart": "EXPLAIN of one statement in one session", "plan_time_chart": "EXPLAIN of one statement",
    "hot_rate_chart": "counts of the table's tuples, not rates", "pruning_chart": "counts of the table's tuples",
    "fault_timeline_chart": "when each event happened to a handful of runners",
    "production_conflicts_chart": "runners polling every 0.2-5 s: idle, not racing for a CPU",
    "production_pickup_chart": "runners polling every 0.2-5 s", "production_timeline_chart": "runners polling",
}


def test_every_chart_of_points_that_can_be_cpu_bound_marks_those_points_and_only_those():
    """Each chart function is either listed as drawing CPU-boundable points or as drawing none (with why); each of
    the first kind, given a CPU-bound point, says "CPU-bound" on the chart (a band, a label, a disc or its title),
    and given only free points, does not."""
    defined = {name for module in CHART_MODULES for name, fn in inspect.getmembers(module, inspect.isfunction)
               if name.endswith("_chart") and fn.__module__ == module.__name__}
    boundable = _cpu_boundable_charts()
    assert not set(boundable) & set(NO_CPU_BOUND_POINTS)
    assert defined == set(boundable) | set(NO_CPU_BOUND_POINTS), "a new chart: does it draw CPU-boundable points?"
    for name, draw in boundable.items():
        marked, free = json.dumps(draw(32).to_dict()), json.dumps(draw(None).to_dict())
        assert "CPU-bound" in marked, f"{name} leaves its CPU-bound point unmarked"
        assert "CPU-bound" not in free, f"{name} marks a point that was not CPU-bound"
    # a bench stored before it read who waited for a CPU says it cannot mark, rather than drawing every point free
    points = pd.DataFrame([{"strategy": "guarded", "worker_count": 8, "pairs": 1, "ratio": 1.0, "ratio_min": 1.0,
                            "ratio_max": 1.0, "harness_claims_per_second": 1.0, "pgbench_claims_per_second": 1.0,
                            "cpu_bound": None}])
    assert charts.CPU_BOUND_UNREAD_NOTE in json.dumps(bench_charts.bench_ratio_chart(points, bench.TARGET_BAND)
                                                      .to_dict())


def test_a_chart_says_which_worker_counts_were_raced_fewer_times():
    from harness.article.charts import repeats_said

    assert repeats_said(pd.DataFrame({"worker_count": [1, 2, 32, 100], "repeats": [3, 3, 1, 1]})) == \
        "3 repeats (1 at 32 and 100 workers)"
    assert repeats_said(pd.DataFrame({"worker_count": [1, 2], "repeats": [3, 3]})) == "3 repeats"
