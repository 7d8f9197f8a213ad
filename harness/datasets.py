"""Find stored runs that match a set of parameters, and run only what is missing.

Raw runs are immutable and keyed by what they were asked to do (their
manifest), so a notebook, or a second `make report`, reuses every run already
on disk for the same parameters and PostgreSQL major version, and runs the
harness (with a progress bar) only for the trials that are not there.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import inspect
import json
from pathlib import Path
from typing import Callable

from harness import config
from harness.experiments.race_trials import RaceConfig, SweepPlan, run_sweep
from harness.storage import read_json, run_dirs


def _say(message: str, progress: bool) -> None:
    if progress:
        print(message, flush=True)


# --------------------------------------------------------------------------- races


def race_plan(strategies, worker_counts, job_count=config.DEFAULT_JOB_COUNT, repeats=1, partial_index=False,
              fillfactor=100, pause_ms=0.0, jitter_ms=0.0, autovacuum=True, audit=True) -> SweepPlan:
    """A SweepPlan from notebook parameters (lists and literals)."""
    return SweepPlan(list(strategies), [int(w) for w in worker_counts], int(job_count), int(repeats),
                     bool(partial_index), int(fillfactor), float(pause_ms), float(jitter_ms), bool(autovacuum),
                     bool(audit))


def _race_key(cfg: dict, pg_major: int) -> tuple:
    if "think_ms" in cfg:
        return ()  # a run from before the client kept one process per worker: not comparable
    cfg = {**dataclasses.asdict(RaceConfig("naive", 1)), **cfg}
    return (cfg["strategy"], int(cfg["worker_count"]), int(cfg["job_count"]), int(cfg["repeat"]),
            bool(cfg["partial_index"]), int(cfg["fillfactor"]), float(cfg["pause_ms"]), float(cfg["jitter_ms"]),
            bool(cfg["autovacuum"]), bool(cfg["audit"]), int(pg_major))


def stored_races(data_dir: Path) -> dict[tuple, Path]:
    """Every complete, checked race on disk, by what it was asked to do (the newest wins a tie)."""
    found: dict[tuple, tuple[str, Path]] = {}
    for run_dir in run_dirs(config.races_dir(data_dir)):
        try:
            manifest = read_json(run_dir / "manifest.json")
            if not manifest.get("checks", {}).get("passed", False):
                continue
            key = _race_key(manifest["config"], manifest["server"]["major"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not a race run we can read: not a match
        started = str(manifest.get("started_at", ""))
        if key not in found or started > found[key][0]:
            found[key] = (started, run_dir)
    return {key: path for key, (_, path) in found.items()}


def find_races(plan: SweepPlan, data_dir: Path = config.DATA_DIR,
               pg_version: int = config.DEFAULT_PG_VERSION) -> tuple[dict[RaceConfig, Path], list[RaceConfig]]:
    """(stored run per trial of the plan, trials with no stored run)."""
    stored = stored_races(data_dir)
    found, missing = {}, []
    for cfg in plan.configs:
        path = stored.get(_race_key(dataclasses.asdict(cfg), pg_version))
        if path is None:
            missing.append(cfg)
        else:
            found[cfg] = path
    return found, missing


def ensure_races(plan: SweepPlan, data_dir: Path = config.DATA_DIR, db: str | None = None,
                 pg_version: int = config.DEFAULT_PG_VERSION, progress: bool = True) -> list[Path]:
    """The plan's runs, in the plan's order: reused from disk, or raced now if missing."""
    data_dir = Path(data_dir)
    found, missing = find_races(plan, data_dir, pg_version)
    if missing:
        _say(f"races: {len(found)} of {len(plan.configs)} trials found in {data_dir}; "
             f"running the other {len(missing)}", progress)
        todo = dataclasses.replace(plan)  # same capacity needs; only the missing trials
        todo.configs = missing
        for cfg, path in zip(missing, run_sweep(todo, data_dir, db, pg_version, progress=progress)):
            found[cfg] = path
    else:
        _say(f"races: all {len(plan.configs)} trials found in {data_dir}", progress)
    return [found[cfg] for cfg in plan.configs]


# --------------------------------------------------------------------------- other kinds of run


def module_available(name: str) -> bool:
    """Whether harness.<name> exists in this build (plans, churn and bench are separate modules)."""
    return importlib.util.find_spec(f"harness.experiments.{name}") is not None


def _normalise(value):
    """Parameters as JSON would store them, so a tuple matches a list and 1 matches 1.0."""
    return json.loads(json.dumps(value, default=str))


def find_run(kind: str, parameters: dict, data_dir: Path = config.DATA_DIR,
             matches: Callable[[dict, dict], bool] | None = None) -> Path | None:
    """The newest stored run of data/<kind>/ whose manifest parameters include `parameters`."""
    wanted = _normalise(parameters)
    best: tuple[str, Path] | None = None
    for run_dir in run_dirs(Path(data_dir) / kind):
        try:
            manifest = read_json(run_dir / "manifest.json")
        except (OSError, ValueError):
            continue
        stored = _normalise(manifest.get("parameters", {}))
        ok = matches(manifest, wanted) if matches else all(stored.get(k) == v for k, v in wanted.items())
        if not ok:
            continue
        started = str(manifest.get("started_at", ""))
        if best is None or started > best[0]:
            best = (started, run_dir)
    return None if best is None else best[1]


def ensure_run(kind: str, parameters: dict, run: Callable[[], Path], data_dir: Path = config.DATA_DIR,
               progress: bool = True, matches: Callable[[dict, dict], bool] | None = None) -> Path:
    """A stored run of `kind` with these parameters, or a new one made by `run()`."""
    existing = find_run(kind, parameters, data_dir, matches)
    if existing is not None:
        _say(f"{kind}: found {existing.name} in {data_dir}", progress)
        return existing
    _say(f"{kind}: no stored run for these parameters in {data_dir}; running it", progress)
    return Path(run())


def _same_server(manifest: dict, pg_version: int) -> bool:
    return int(manifest.get("server", {}).get("major", -1)) == int(pg_version)


def _matcher(pg_version: int, section: str | None = None):
    # a module may refuse runs stored in a shape it no longer reads (plans: runs with older table states)
    current = None
    if section and module_available(section):
        current = getattr(importlib.import_module(f"harness.experiments.{section}"), "stored_run_is_current", None)

    def matches(manifest: dict, wanted: dict) -> bool:
        stored = _normalise(manifest.get("parameters", {}))
        return (_same_server(manifest, pg_version) and all(stored.get(k) == v for k, v in wanted.items())
                and (current is None or current(manifest)))
    return matches


# What each kind's run function is called with, from a params section; keys it does not know stay out.
PLANS_KEYS = ("job_counts", "consumed_fractions", "repetitions")
CHURN_KEYS = ("fillfactors", "payload_bytes", "partial_index", "updates", "race_worker_counts", "pruning",
              "pruning_job_count", "pruning_claims", "settle_seconds", "quiet_seconds", "bulk")
BENCH_KEYS = ("strategies", "worker_counts", "pairs", "seconds", "audit_cost")
SECTION_KINDS = {"plans": ("plans", PLANS_KEYS), "churn": ("churn", CHURN_KEYS), "bench": ("bench", BENCH_KEYS)}


def _run_function(section: str):
    module = importlib.import_module(f"harness.experiments.{section}")
    return {"plans": "measure_plans", "churn": "measure_churn", "bench": "run_bench"}[section], module


def section_parameters(section: str, params: dict) -> dict:
    """A params-file section as its run function takes it and its manifest records it: given keys, then defaults.

    Filling in the defaults keeps a run made with, say, a short settle time from
    standing in for a request that did not mention it.
    """
    keys = SECTION_KINDS[section][1]
    wanted = {k: params[k] for k in keys if k in params}
    if module_available(section):
        name, module = _run_function(section)
        for key, parameter in inspect.signature(getattr(module, name)).parameters.items():
            if key in keys and key not in wanted and parameter.default is not inspect.Parameter.empty:
                wanted[key] = parameter.default
    return wanted


def find_section(section: str, params: dict, data_dir: Path = config.DATA_DIR,
                 pg_version: int = config.DEFAULT_PG_VERSION) -> Path | None:
    """The stored plans/churn/bench run for a params section, or None."""
    kind = SECTION_KINDS[section][0]
    return find_run(kind, section_parameters(section, params), data_dir, _matcher(pg_version, section))


SERVER_RUNNERS = {"plans": "run_plans", "churn": "run_churn", "bench": "run_bench"}


def ensure_section(section: str, params: dict, data_dir: Path = config.DATA_DIR, db: str | None = None,
                   pg_version: int = config.DEFAULT_PG_VERSION, progress: bool = True) -> Path | None:
    """The stored run of a plans, churn or bench section, made if missing; None if its module is not in this build."""
    if not module_available(section):
        return None
    # the entry points that start and stop their own server
    run = getattr(importlib.import_module(f"harness.experiments.{section}"), SERVER_RUNNERS[section])
    wanted = section_parameters(section, params)
    return ensure_run(SECTION_KINDS[section][0], wanted,
                      lambda: run(data_dir=data_dir, db=db, pg_version=pg_version, progress=progress, **wanted),
                      data_dir, progress, _matcher(pg_version, section))


def ensure_plans(params: dict, data_dir: Path = config.DATA_DIR, db: str | None = None,
                 pg_version: int = config.DEFAULT_PG_VERSION, progress: bool = True) -> Path | None:
    """The EXPLAIN measurements for these parameters; None if harness.experiments.plans is not in this build."""
    return ensure_section("plans", params, data_dir, db, pg_version, progress)


def ensure_churn(params: dict, data_dir: Path = config.DATA_DIR, db: str | None = None,
                 pg_version: int = config.DEFAULT_PG_VERSION, progress: bool = True) -> Path | None:
    """The churn measurements for these parameters; None if harness.experiments.churn is not in this build."""
    return ensure_section("churn", params, data_dir, db, pg_version, progress)


def ensure_bench(params: dict, data_dir: Path = config.DATA_DIR, db: str | None = None,
                 pg_version: int = config.DEFAULT_PG_VERSION, progress: bool = True) -> Path | None:
    """harness vs pgbench for these parameters; None if harness.experiments.bench is not in this build."""
    return ensure_section("bench", params, data_dir, db, pg_version, progress)


def fingerprint(paths) -> str:
    """A short hash of which runs a notebook reads (their folder names are unique and immutable)."""
    names = sorted(Path(p).name for p in paths if p is not None)
    return hashlib.sha256("\n".join(names).encode()).hexdigest()[:16]
