"""The tables of the sections on how to claim: every strategy under every condition, a dash where not raced."""

from __future__ import annotations

import math

import pandas as pd

from harness.article.formats import DASH
from harness.article.sections import strategy_charts


def run(strategy: str, workers: int, version: str = "16.4", index: bool = False, **figures) -> dict:
    row = {"run_id": f"{strategy}-{workers}-{version}-{index}", "strategy": strategy, "worker_count": workers,
           "repeat": 0, "job_count": 2000, "pg_version": version, "partial_index": index, "duplicate_jobs": 0,
           "claims_per_second": 1000.0, "losses_per_win": 0.0, "aborts_per_win": 0.0, "p99_ms": 1.0,
           "time_to_job_p50_ms": 0.5, "time_to_job_p99_ms": 2.0, "wait_share": {"Lock:tuple": 0.25}}
    row.update(figures)
    return row


def test_which_claim_lists_every_condition_and_leaves_a_dash_where_a_strategy_was_not_raced():
    summary = pd.DataFrame([
        run("guarded", 2), run("guarded", 8, losses_per_win=3.0, claims_per_second=500.0),
        run("guarded", 2, index=True), run("guarded", 8, index=True),
        run("guarded", 2, version="18.1"), run("guarded", 8, version="18.1"),
        run("naive", 2, duplicate_jobs=700), run("naive", 8, duplicate_jobs=1500),
        run("for_update", 2), run("for_update", 8), run("for_update", 32),
    ])
    table, low, high = strategy_charts.which_claim(summary)
    assert (low, high) == (2, 8), "the worker counts every raced row shares"
    assert len(table) == 3 * 2 * 2, "every strategy on every server, with and without the index"
    at = table.set_index(["strategy", strategy_charts.SERVER, strategy_charts.INDEX])
    guarded = at.loc[("guarded", "PostgreSQL 16", "without partial index")]
    assert guarded["claims/s, high"] == 500.0 and guarded["wasted attempts per win"] == 3.0
    assert guarded["lock waits"] == 0.25
    naive = at.loc[("naive", "PostgreSQL 16", "without partial index")]
    assert naive[strategy_charts.DUPLICATES_PER_RACE] == 1500 and naive["races"] == 2, "the most in one race"
    assert guarded[strategy_charts.CPU_BOUND_AT] == "", "nothing was CPU-bound"
    not_raced = at.loc[("for_update", "PostgreSQL 18", "with partial index")]
    assert all(math.isnan(not_raced[c]) for c in ("claims/s, low", "time to get a job, p99", "lock waits"))
    html = strategy_charts.which_claim_table(table, low, high)
    assert DASH in html and "claims/s, 8 workers" in html and "500" in html
    assert strategy_charts.which_claim_table(table, 8, 8).count("claims/s, 8 workers") == 1, "one column, not two alike"


def test_which_claim_reads_at_the_most_shared_workers_no_row_was_cpu_bound_at_and_marks_the_rest():
    summary = pd.DataFrame([
        run("guarded", 2), run("guarded", 4), run("guarded", 8, cpu_bound=True),
        run("skip_locked", 2), run("skip_locked", 4), run("skip_locked", 8)])
    table, low, high = strategy_charts.which_claim(summary)
    assert (low, high) == (2, 4), "8 workers were CPU-bound for guarded"
    assert set(table[strategy_charts.CPU_BOUND_AT].dropna()) == {""}
    every_bound = pd.DataFrame([run("guarded", 2), run("guarded", 8, cpu_bound=True),
                                run("skip_locked", 2, cpu_bound=True), run("skip_locked", 8, cpu_bound=True)])
    table, low, high = strategy_charts.which_claim(every_bound)
    assert (low, high) == (2, 2), "no shared count free of the mark: the one fewest rows were bound at, marked"
    at = table.set_index("strategy")
    assert at.loc["guarded", strategy_charts.CPU_BOUND_AT].iloc[0] == ""
    assert at.loc["skip_locked", strategy_charts.CPU_BOUND_AT].iloc[0] == "2"
    assert "CPU-bound at" in strategy_charts.which_claim_table(table, low, high)
    # where the indexed and PostgreSQL 18 arms lacked 2 and 4 workers, the only shared counts were bound ones
    arms = pd.DataFrame([run(s, w, version=v, index=i, cpu_bound=w >= 8) for s in ("guarded", "for_update")
                         for v in ("16.4", "18.1") for i in (False, True) for w in (2, 8, 32)])
    assert strategy_charts.which_claim(arms)[1:] == (2, 2), "2 workers shared and free: read there"
    gap = arms[~((arms["strategy"] == "guarded") & (arms["partial_index"]) & (arms["worker_count"] == 2))]
    assert strategy_charts.which_claim(gap)[1:] == (8, 32), "no free count shared, all bound alike: the most workers"


def test_the_server_table_puts_the_servers_side_by_side_with_their_ratio():
    points = strategy_charts.conditions(pd.DataFrame([
        run("guarded", 8, claims_per_second=400.0, losses_per_win=4.0, cpu_bound=False),
        run("guarded", 8, version="18.1", claims_per_second=500.0, losses_per_win=3.0, cpu_bound=True),
        run("skip_locked", 8, claims_per_second=3000.0, cpu_bound=False)]))
    table = strategy_charts.server_comparison(points).set_index("strategy")
    assert table.loc["guarded", strategy_charts.CPU_BOUND_ON] == "18"
    assert table.loc["skip_locked", strategy_charts.CPU_BOUND_ON] == ""
    assert table.loc["guarded", "18 / 16, claims/s"] == 1.25
    assert table.loc["guarded", "lost per win, PostgreSQL 18"] == 3.0
    assert math.isnan(table.loc["skip_locked", "claims/s, PostgreSQL 18"]), "not raced there: no figure"
    assert math.isnan(table.loc["skip_locked", "lost per win, PostgreSQL 16"]), "it cannot lose"
    assert DASH in strategy_charts.server_table(table.reset_index())


def test_nothing_raced_is_an_empty_table_not_an_error():
    table, low, high = strategy_charts.which_claim(pd.DataFrame())
    assert table.empty and (low, high) == (0, 0)
    assert strategy_charts.server_comparison(pd.DataFrame()).empty


def test_the_indexed_race_says_how_its_drains_compare_with_the_sweeps():
    indexed = pd.DataFrame([run("guarded", 8, job_count=2000)])
    shorter = strategy_charts.size_phrase(indexed, pd.DataFrame([{"job_count": 10_000}]))
    assert "shorter than the sweep's 10,000 jobs" in shorter
    assert "the sweep's own runs" in strategy_charts.size_phrase(indexed, pd.DataFrame([{"job_count": 2000}]))
