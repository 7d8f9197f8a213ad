"""python -m harness: race, summary, and the commands the other modules register.

Errors a user can cause print one line on stderr and exit 2; bugs keep their traceback.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
from pathlib import Path

from harness import config
from harness.errors import UserError

# Modules that add a subcommand with register_cli(subparsers); one place to list them.
COMMAND_MODULES = ("harness.experiments.plans", "harness.experiments.churn", "harness.experiments.bench",
                   "harness.article.findings")


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit 2."""

    def error(self, message: str):
        raise UserError(f"{self.prog}: {message}")


def int_list(text: str) -> list[int]:
    """Comma-separated whole numbers; their range is checked where they are used."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one number")
    return values


def add_server_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pg-version", type=int, default=config.DEFAULT_PG_VERSION,
                        choices=config.SUPPORTED_PG_VERSIONS, help="embedded/docker server major version (default 16)")
    parser.add_argument("--db", choices=("embedded", "docker", "url"), default=None,
                        help="where the server comes from (default: DATABASE_URL if set, else embedded)")
    parser.add_argument("--data-dir", type=Path, default=config.DATA_DIR, help="where results go (default data/)")


def _race(args) -> int:
    from harness.experiments.race_trials import SweepPlan, run_sweep
    from harness.stats import summarise_runs
    from harness.strategies import parse_strategies

    plan = SweepPlan(parse_strategies(args.strategy), args.workers, args.jobs, args.repeat,
                     args.partial_index, args.fillfactor, args.pause_ms, args.jitter_ms,
                     autovacuum=args.autovacuum == "on", audit=not args.no_audit)
    paths = run_sweep(plan, args.data_dir, args.db, args.pg_version, progress=not args.quiet)
    frame = summarise_runs(run_paths=paths)
    _print_summary(frame, as_json=args.json)
    return 0


SUMMARY_COLUMNS = ("strategy", "worker_count", "repeat", "attempts", "wins", "lost", "duplicate_jobs",
                   "unclaimed_jobs", "losses_per_win", "claims_per_second", "p50_ms", "p99_ms", "wall_seconds")


def jsonable(value):
    """Plain JSON values: NaN becomes null, numpy scalars become numbers, at any depth."""
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _print_summary(frame, as_json: bool, per_run: bool = True) -> None:
    from harness.stats import spread_by_point

    if as_json:
        for record in frame.to_dict(orient="records"):
            print(json.dumps(jsonable(record), default=str))
        return
    if not len(frame):
        print("no runs stored yet")
        return
    if per_run:
        print(frame.loc[:, list(SUMMARY_COLUMNS)].to_string(index=False, float_format=lambda v: f"{v:,.3f}"))
        return
    spread = spread_by_point(frame)
    table = spread[["strategy", "worker_count", "job_count", "partial_index", "repeats"]].copy()
    for figure, digits in (("claims_per_second", 0), ("losses_per_win", 2), ("duplicate_jobs", 0), ("p99_ms", 2)):
        table[figure] = [f"{m:,.{digits}f} [{lo:,.{digits}f}-{hi:,.{digits}f}]"
                         for m, lo, hi in zip(spread[f"{figure}_median"], spread[f"{figure}_min"],
                                              spread[f"{figure}_max"])]
    print("median [min-max] over the repeats of each point")
    print(table.to_string(index=False))


def _summary(args) -> int:
    from harness.stats import summarise_runs

    data_dir = Path(args.data_dir)
    if not data_dir.is_dir():
        raise UserError(f"no data directory at {data_dir}")
    _print_summary(summarise_runs(data_dir), as_json=args.json, per_run=args.runs)
    return 0


def _reap(args) -> int:
    from harness.server.database import reap_stale_embedded_servers

    for path in reap_stale_embedded_servers():
        print(f"stopped and removed {path}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m harness", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)

    race = sub.add_parser("race", help="race claim strategies over a fresh queue (drops and recreates "
                                       "claimrace.jobs and claimrace.claims before every trial)")
    race.add_argument("--strategy", default="all", help="naive, guarded, skip_locked, a comma list, or all")
    race.add_argument("--workers", type=int_list, default=list(config.DEFAULT_WORKER_COUNTS),
                      help="worker counts, comma-separated: a sweep (default 1,2,4,8,16,32,64,100)")
    race.add_argument("--jobs", type=int, default=config.DEFAULT_JOB_COUNT, help="jobs queued per trial")
    race.add_argument("--repeat", type=int, default=1, help="trials per strategy and worker count")
    race.add_argument("--partial-index", action="store_true", help="add jobs (id) WHERE status = 'pending'")
    race.add_argument("--fillfactor", type=int, default=100, help="the jobs table's fillfactor")
    race.add_argument("--pause-ms", type=float, default=0.0,
                      help="a slowed-down race: pause between the read and the write of a claim")
    race.add_argument("--jitter-ms", type=float, default=0.0,
                      help="a slowed-down race: random pause of up to this between a worker's attempts")
    race.add_argument("--autovacuum", choices=("on", "off"), default="on",
                      help="autovacuum on the race's table (default on, the server's default)")
    race.add_argument("--no-audit", action="store_true",
                      help="no audit trigger: wins counted from what the claims returned (measures the audit's cost)")
    race.add_argument("--json", action="store_true", help="print one JSON object per run")
    race.add_argument("--quiet", action="store_true", help="no progress bar")
    add_server_options(race)
    race.set_defaults(handler=_race)

    summary = sub.add_parser("summary", help="one line per stored run, computed from its rows and audit")
    summary.add_argument("--data-dir", type=Path, default=config.DATA_DIR)
    summary.add_argument("--json", action="store_true", help="one JSON object per run")
    summary.add_argument("--runs", action="store_true",
                         help="one line per run (default: one per point, median and min-max over its repeats)")
    summary.set_defaults(handler=_summary)

    reap = sub.add_parser("reap", help="stop embedded servers left behind by a harness that was killed")
    reap.set_defaults(handler=_reap)

    for module_name in COMMAND_MODULES:
        if importlib.util.find_spec(module_name) is not None:
            importlib.import_module(module_name).register_cli(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    return run_command(lambda: _dispatch(build_parser().parse_args(argv)))


def _dispatch(args) -> int:
    return args.handler(args)


def run_command(command) -> int:
    """Run an entry point: a user's error is one line and exit 2; bugs keep their traceback."""
    try:
        return command()
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader (head, less) went away: stop quietly, as Unix tools do
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
