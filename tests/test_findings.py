"""Verdict rules on synthetic inputs: each rule can return each of its outcomes."""

from __future__ import annotations

import pandas as pd
import pytest

from harness.article import findings


def _facts(skip_p99: float, guarded_p99: float) -> dict:
    return {"high": 100, "skip_locked_p99_ms_high": skip_p99, "guarded_p99_ms_high": guarded_p99,
            "skip_p99_over_guarded_high": skip_p99 / guarded_p99}


@pytest.mark.parametrize("skip, guarded, verdict", [(9.0, 3.0, findings.AGREES), (2.0, 3.0, findings.DIFFERS)])
def test_f8_decides_on_the_fixed_fill_latency_when_the_bench_measured_it(skip, guarded, verdict):
    # the whole-drain figures point the other way on purpose: the fixed fill decides
    row = findings._f8_row(_facts(guarded, skip), {"worker_count": 100, "skip_locked_p99_ms": skip,
                                                   "guarded_p99_ms": guarded})
    assert row["verdict"] == verdict
    assert "fixed fill" in row["this reproduction"] and "whole drains" in row["why they differ"]


@pytest.mark.parametrize("skip, guarded, verdict", [(9.0, 3.0, findings.AGREES), (2.0, 3.0, findings.DIFFERS)])
def test_f8_falls_back_to_the_drain_without_a_bench(skip, guarded, verdict):
    assert findings._f8_row(_facts(skip, guarded), None)["verdict"] == verdict


def test_fixed_fill_latency_reads_the_bench_at_its_most_workers():
    bench = pd.DataFrame({"strategy": ["guarded", "skip_locked", "guarded", "skip_locked"],
                          "worker_count": [8, 8, 100, 100], "harness_win_p99_us": [1.0, 2.0, 3000.0, 9000.0]})
    assert findings.fixed_fill_latency(bench) == {"worker_count": 100, "skip_locked_p99_ms": 9.0,
                                                  "guarded_p99_ms": 3.0}
    assert findings.fixed_fill_latency(None) is None
    assert findings.fixed_fill_latency(bench[bench["strategy"] == "guarded"]) is None


@pytest.mark.parametrize("lock, runnable, verdict", [(0.4, 0.1, "locks"), (0.01, 0.3, "cpu"),
                                                     (0.2, None, "unmeasured"), (0.2, float("nan"), "unmeasured")])
def test_the_bottleneck_is_whichever_wait_was_measured_longer(lock, runnable, verdict):
    assert findings.bottleneck(lock, runnable) == verdict
