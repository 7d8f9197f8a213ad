"""The bench section: the harness against pgbench on the same claims (A3), and the fixed-fill latency F8 reads."""

from __future__ import annotations


from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from harness.article.compare import most_cpu_free_workers
from harness.article.findings import CONFIRMED, CORRECTED, NOT_MEASURED, Finding, make_finding, not_measured
from harness.article.formats import DASH, MISSING, count, missing, number, percent, span, spread as spread_text
from harness.article.prose import counted, join, table, workers_phrase
from harness.experiments import bench as bench_module, registry


def fixed_fill_latency(bench_summary: pd.DataFrame | None, most_workers: int | None = None) -> dict | None:
    """Winning claims' p99 at a fixed fill (the bench's never-draining queue), at its most workers up to
    most_workers (the most the race sweep raced without being CPU-bound; None: no bound)."""
    if bench_summary is None or "harness_win_p99_us" not in bench_summary:
        return None
    counts = bench_summary["worker_count"]
    if most_workers is not None:
        counts = counts[counts <= most_workers]
    if not len(counts):
        return None
    top = bench_summary[bench_summary["worker_count"] == counts.max()].set_index("strategy")
    if not {"guarded", "skip_locked"} <= set(top.index):
        return None
    return {"worker_count": int(top["worker_count"].iloc[0]),
            "skip_locked_p99_ms": float(top.loc["skip_locked", "harness_win_p99_us"]) / 1e3,
            "guarded_p99_ms": float(top.loc["guarded", "harness_win_p99_us"]) / 1e3}


# --------------------------------------------------------------------------- the bench (A3)


def a3_harness_against_pgbench(bench: pd.DataFrame | None, band: tuple[float, float] | None = None) -> Finding:
    """A3 is confirmed only where every point the bench covers passes its gates on what the server did
    (bench.point_verdicts: the lost-race or empty-answer envelope, the server's CPU per win, the CPU-predicted
    ratio); the claims/s ratio to pgbench is reported beside them, not gated."""
    if bench is None or not len(bench) or "ratio" not in bench:
        return not_measured("A3", "No bench run is stored for this build.")
    if band is None:
        band = bench_module.TARGET_BAND
    inside = int(((bench["ratio"] >= band[0]) & (bench["ratio"] <= band[1])).sum())
    lowest, highest = bench.loc[bench["ratio"].idxmin()], bench.loc[bench["ratio"].idxmax()]
    ours = "harness / pgbench claims per second: " + ", ".join(
        f"{r.strategy} at {workers_phrase(int(r.worker_count))} {spread_text(r.ratio, r.ratio_min, r.ratio_max, lambda v: number(v, 2))}"
        for r in bench.itertuples())
    values = {"points": count(len(bench)), "inside": count(inside), "band_low": number(band[0], 2),
              "band_high": number(band[1], 2), "lowest": number(lowest["ratio"], 2),
              "highest": number(highest["ratio"], 2)}
    if "verdict" not in bench or bench["verdict"].isna().all():
        return make_finding("A3", NOT_MEASURED, ours,
                        "The stored bench run has no server CPU per win, so its gates cannot be judged; "
                        f"{count(inside)} of {count(len(bench))} claims/s ratios are within "
                        f"{number(band[0], 2)} to {number(band[1], 2)}.", values)
    failed = bench[bench["verdict"] != "pass"]
    values.update(passed=count(len(bench) - len(failed)), failed_points=", ".join(
        f"{r.strategy} at {int(r.worker_count)}" for r in failed.itertuples()))
    gates = []
    for r in failed.itertuples():
        why = [label for label, ok in (("lost-race envelope", r.envelope_ok), ("server CPU per win", r.server_cpu_ok),
                                       ("CPU-predicted ratio", r.predicted_ok)) if ok is False]
        gates.append(f"{r.strategy} at {workers_phrase(int(r.worker_count))} ({', '.join(why) or 'server CPU not measured'})")
    ratios = (f"{count(inside)} of {count(len(bench))} claims/s ratios are within {number(band[0], 2)} to "
              f"{number(band[1], 2)} (reported, not gated).")
    if not len(failed):
        return make_finding("A3", CONFIRMED, ours, [f"Every one of {count(len(bench))} points passes the gates on what the "
                                                "server did: the lost-race (or empty-answer) envelope of pgbench with "
                                                "one, two and one-per-client threads, the server's CPU per win, and "
                                                "where the CPUs were saturated the ratio their CPU per claim predicts.",
                                                ratios], values)
    return make_finding("A3", CORRECTED, ours, [f"{count(len(failed))} of {count(len(bench))} points fail a gate: "
                                            f"{'; '.join(gates)}. There the harness's race is not pgbench's, and "
                                            "figures from those points are the client's as much as the server's.",
                                            ratios], values)


def bench_failures(bench: pd.DataFrame | None) -> dict[int, list[str]]:
    """{worker count: [strategy, ...]} of the bench points that failed their gates."""
    if bench is None or not len(bench) or "verdict" not in bench:
        return {}
    failed: dict[int, list[str]] = {}
    for r in bench[bench["verdict"] == "fail"].itertuples():
        failed.setdefault(int(r.worker_count), []).append(str(r.strategy))
    return failed


def bench_note(finding: Finding, failed: dict[int, list[str]]) -> str:
    """For a finding decided on the race sweep: the worker counts it used where the bench check failed."""
    hit = [w for w in finding.worker_counts_used if w in failed]
    if not hit:
        return ""
    listed = "; ".join(f"{', '.join(failed[w])} at {w} workers" for w in hit)
    return (f"The bench check against pgbench failed at a point this verdict used ({listed}): there the harness's "
            "race is not pgbench's.")


# --------------------------------------------------------------------------- the section

NAME = "bench"


@dataclass(frozen=True)
class Loaded:
    """The bench run's points, the band A3 is judged on, and the fixed-fill latency F8 reads (at the most workers
    the race sweep raced without being CPU-bound)."""

    run: Path | None
    summary: pd.DataFrame | None
    band: tuple[float, float] | None = None  # bench.TARGET_BAND unless a test sets one
    fixed_fill: dict | None = None


def load(runs: dict[str, list[Path]], loaded: dict) -> Loaded | None:
    if not runs.get("bench"):
        return None
    path = Path(runs["bench"][0])
    summary = bench_module.load_bench(path)
    races = loaded.get("races")
    most = most_cpu_free_workers(races.summary) if races is not None else None
    return Loaded(path, summary, bench_module.TARGET_BAND, fixed_fill_latency(summary, most))


def findings(loaded: dict) -> list[Finding]:
    mine = loaded.get(NAME)
    return [a3_harness_against_pgbench(mine.summary if mine else None, mine.band if mine else None)]


def annotate(found: list[Finding], loaded: dict) -> list[Finding]:
    """Every finding's note says which bench points failed their gates, where any did."""
    mine = loaded.get(NAME)
    failed = bench_failures(mine.summary if mine else None)
    if not failed:
        return found
    return [replace(f, note=" ".join(n for n in (f.note, bench_note(f, failed)) if n)) for f in found]


def values(loaded: dict, found: dict[str, Finding]) -> dict[str, str]:
    """The bench's setup and the spread it measured: the layout's effect alone, and the audit's cost."""
    mine = loaded[NAME]
    summary = mine.summary
    request = registry.request_of("bench", [mine.run])
    single = summary[summary["worker_count"] == 1]
    guarded = summary[summary["strategy"] == "guarded"]
    worst = guarded.loc[(guarded["layout_effect"] - 1).abs().idxmax()] if len(guarded) else None
    costs = summary["audit_cost"].dropna() if "audit_cost" in summary else summary.iloc[0:0]
    return {
        "bench_cpu_tolerance": percent(bench_module.SERVER_CPU_TOLERANCE, 0),
        "bench_predicted_tolerance": percent(bench_module.PREDICTED_RATIO_TOLERANCE, 0),
        "bench_windows": f"{counted(request.pairs, 'pair')} of {request.seconds} s windows",
        "bench_noise": span(single["layout_effect"].min(), single["layout_effect"].max(), _two_digits)
        if len(single) else "not measured (no one-worker point in this build)",
        "layout_effect": number(worst["layout_effect"], 2) if worst is not None else MISSING,
        "layout_workers": int(worst["worker_count"]) if worst is not None else MISSING,
        "audit_cost": join([f"{strategy} {span(rows['audit_cost'].min(), rows['audit_cost'].max(), percent)}"
                            for strategy, rows in summary.dropna(subset=["audit_cost"]).groupby("strategy", sort=False)])
        if len(costs) else MISSING}


def _two_digits(value) -> str:
    return number(value, 2)


BENCH_COLUMNS = {"strategy": "strategy", "worker_count": "workers", "pairs": "pairs", "ratio": "claims/s ratio",
                 "harness_figure": "harness lost (empty) per win", "envelope_text": "pgbench envelope",
                 "harness_server_cpu_us_per_win": "harness server µs per win",
                 "pgbench_server_cpu_us_per_win": "pgbench server µs per win", "verdict": "gates"}


def bench_table(loaded: dict) -> str:
    """One row per bench point: the harness against pgbench, and the gates it passed."""
    shown = loaded[NAME].summary.copy()
    if "envelope" in shown:
        shown["envelope_text"] = [DASH if not isinstance(e, (list, tuple)) and (e is None or missing(e))
                                  else f"{number(e[0], 2)} to {number(e[1], 2)}" for e in shown["envelope"]]
    return table(shown[[c for c in BENCH_COLUMNS if c in shown]].rename(columns=BENCH_COLUMNS),
                 formats={"claims/s ratio": _two_digits, "harness lost (empty) per win": _two_digits,
                          "harness server µs per win": lambda v: number(v, 0),
                          "pgbench server µs per win": lambda v: number(v, 0)})
