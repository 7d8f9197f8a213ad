"""The bench section: the harness against pgbench on the same claims (A3), and the fixed-fill latency F8 reads."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pandas as pd

from harness.article.compare import most_cpu_free_workers
from harness.article.findings import CONFIRMED, CORRECTED, NOT_MEASURED, Finding, make_finding, not_measured
from harness.article.formats import DASH, MISSING, count, missing, number, percent, span, spread as spread_text
from harness.article.prose import counted, join, table, workers_phrase
from harness.article.wording import Sentences
from harness.storage import Run

NAME = "bench"
READS = ("bench",)
UPSTREAM = ("races",)
say = Sentences(NAME)


def fixed_fill_latency(bench_summary: pd.DataFrame | None, most_workers: int | None = None) -> dict | None:
    """Winning claims' p99 at a fixed fill (the bench's never-draining queue), at its most workers from 2 up to
    most_workers (the most the race sweep raced without being CPU-bound; None: no bound); None where the bench has
    no such point."""
    if bench_summary is None or "harness_win_p99_us" not in bench_summary:
        return None
    counts = bench_summary["worker_count"]
    counts = counts[counts >= 2]  # one worker has no rival: its tail says nothing about contention
    if most_workers is not None:
        counts = counts[counts <= most_workers]
    if not len(counts):
        return None
    top = bench_summary[bench_summary["worker_count"] == counts.max()].set_index("strategy")
    if not {"guarded", "skip_locked"} <= set(top.index):
        return None
    def p99_ms(strategy: str, column: str = "harness_win_p99_us") -> float:
        return float(top.loc[strategy, column]) / 1e3 if column in top else float("nan")

    # median, lowest and highest over the bench's pairs (a run stored before the spread was kept has none)
    return {"worker_count": int(top["worker_count"].iloc[0]),
            "skip_locked_p99_ms": p99_ms("skip_locked"), "guarded_p99_ms": p99_ms("guarded"),
            **{f"{strategy}_p99_ms_{end}": p99_ms(strategy, f"harness_win_p99_us_{end}")
               for strategy in ("skip_locked", "guarded") for end in ("min", "max")}}


# --------------------------------------------------------------------------- the bench (A3)


# the bench's gates as the note names them
GATES = {"envelope": "lost-race envelope", "server_cpu": "server CPU per win", "predicted": "CPU-predicted ratio"}


def a3_harness_against_pgbench(bench: pd.DataFrame | None, band: tuple[float, float] | None = None) -> Finding:
    """A3 is confirmed only where every point the bench covers passes its gates on what the server did
    (bench.point_verdicts: the lost-race or empty-answer envelope, the server's CPU per win, the CPU-predicted
    ratio); the claims/s ratio to pgbench is reported beside them, not gated."""
    if bench is None or not len(bench) or "ratio" not in bench or band is None:
        return not_measured("A3", say("A3.no_run"))
    inside = int(((bench["ratio"] >= band[0]) & (bench["ratio"] <= band[1])).sum())
    lowest, highest = bench.loc[bench["ratio"].idxmin()], bench.loc[bench["ratio"].idxmax()]
    ours = say("A3.ours", points=", ".join(
        say("A3.point", strategy=r.strategy, workers=workers_phrase(int(r.worker_count)),
            ratio=spread_text(r.ratio, r.ratio_min, r.ratio_max, lambda v: number(v, 2)))
        for r in bench.itertuples()))
    values = {"points": count(len(bench)), "inside": count(inside), "band_low": number(band[0], 2),
              "band_high": number(band[1], 2), "lowest": number(lowest["ratio"], 2),
              "highest": number(highest["ratio"], 2)}
    ratios = {"inside": values["inside"], "points": values["points"], "band_low": values["band_low"],
              "band_high": values["band_high"]}
    if "verdict" not in bench or bench["verdict"].isna().all():
        return make_finding("A3", NOT_MEASURED, ours, say("A3.no_server_cpu", **ratios), values)
    failed = bench[bench["verdict"] != "pass"]
    values.update(passed=count(len(bench) - len(failed)), failed_points=", ".join(
        f"{r.strategy} at {int(r.worker_count)}" for r in failed.itertuples()))
    gates = []
    for r in failed.itertuples():
        why = [GATES[gate] for gate, ok in (("envelope", r.envelope_ok), ("server_cpu", r.server_cpu_ok),
                                            ("predicted", r.predicted_ok)) if ok is False]
        gates.append(say("A3.failed_point", strategy=r.strategy, workers=workers_phrase(int(r.worker_count)),
                         gates=", ".join(why) or say("A3.no_server_cpu_gate")))
    if not len(failed):
        return make_finding("A3", CONFIRMED, ours, [say("A3.passes", points=values["points"]),
                                                    say("A3.ratios", **ratios)], values)
    return make_finding("A3", CORRECTED, ours, [say("A3.fails", failed=count(len(failed)), points=values["points"],
                                                    gates="; ".join(gates)),
                                                say("A3.ratios", **ratios)], values)


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
    return say("bench_failed", points="; ".join(say("bench_failed_point", strategies=", ".join(failed[w]), workers=w)
                                                for w in hit))


# --------------------------------------------------------------------------- the section


@dataclass(frozen=True)
class Loaded:
    """The bench run's points, the band A3 is judged on, and the fixed-fill latency F8 reads (at the most workers
    the race sweep raced without being CPU-bound)."""

    run: Run | None
    request: object | None  # what the params file's bench section asked (bench.BenchParameters)
    summary: pd.DataFrame | None
    band: tuple[float, float] | None = None  # the claims/s ratio's target band, as the run stored it
    fixed_fill: dict | None = None


def load(reads: dict, loaded: dict) -> Loaded | None:
    asked = reads.get("bench")
    if asked is None or not asked.runs:
        return None
    run = asked.runs[0]
    summary = run.summary
    races = loaded.get("races")
    most = most_cpu_free_workers(races.summary) if races is not None else None
    return Loaded(run, asked.request, summary, tuple(run.results["target_band"]), fixed_fill_latency(summary, most))


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
    request = mine.request
    single = summary[summary["worker_count"] == 1]
    guarded = summary[summary["strategy"] == "guarded"]
    worst = guarded.loc[(guarded["layout_effect"] - 1).abs().idxmax()] if len(guarded) else None
    costs = summary["audit_cost"].dropna() if "audit_cost" in summary else summary.iloc[0:0]
    return {
        "bench_cpu_tolerance": _gate(summary, "server_cpu_tolerance_floor"),
        "bench_predicted_tolerance": _gate(summary, "predicted_tolerance"),
        "bench_windows": f"{counted(request.pairs, 'pair')} of {request.seconds} s windows",
        "bench_noise": span(single["layout_effect"].min(), single["layout_effect"].max(), _two_digits)
        if len(single) else say("bench_noise_unmeasured"),
        "layout_effect": number(worst["layout_effect"], 2) if worst is not None else MISSING,
        "layout_workers": int(worst["worker_count"]) if worst is not None else MISSING,
        "audit_cost": join([f"{strategy} {span(rows['audit_cost'].min(), rows['audit_cost'].max(), percent)}"
                            for strategy, rows in summary.dropna(subset=["audit_cost"]).groupby("strategy", sort=False)])
        if len(costs) else MISSING}


def _gate(summary: pd.DataFrame, column: str) -> str:
    """A gate's tolerance as the bench's summary applied it."""
    return percent(summary[column].iloc[0], 0) if column in summary and len(summary) else MISSING


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
                 formats={BENCH_COLUMNS["ratio"]: _two_digits, BENCH_COLUMNS["harness_figure"]: _two_digits,
                          BENCH_COLUMNS["harness_server_cpu_us_per_win"]: lambda v: number(v, 0),
                          BENCH_COLUMNS["pgbench_server_cpu_us_per_win"]: lambda v: number(v, 0)})
