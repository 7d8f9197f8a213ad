"""The experiment contract and the run store: one manifest shape, one lookup, runs made only where missing."""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from conftest import PROJECT_ROOT, run_cli
from harness import storage
from harness.errors import ConservationError, UserError
from harness.experiments import contract, registry
from harness.experiments.bench import measure as bench
from harness.experiments.churn import measure as churn
from harness.experiments.plans import measure as plans
from harness.experiments.soak import measure as soak
from harness.experiments.race.trials import RaceParameters, RaceSweep, conservation_checks
from harness.stats import summarise_runs
from harness.claims.strategies import ORIGINAL_STRATEGIES, parse_strategies
from harness.claims.steps import ABORTED, EMPTY, LOST, WON

SERVER = {"source": "embedded", "version": "PostgreSQL 16.0", "major": 16, "settings": {}}


def store(data_dir, kind="probe", parameters=None, checks=None, major=16) -> Path:
    return storage.write_run(
        data_dir, kind=kind, run_id=storage.new_run_id(kind), started_at=storage.utc_now(),
        parameters=parameters if parameters is not None else {"size": 3, "modes": ("a", "b")},
        server={**SERVER, "major": major}, client={"python": "3"}, procedure={"sql": "SELECT 1"},
        checks=checks if checks is not None else {"rows_add_up": True, "passed": True}, results={"note": "x"},
        tables={"rows": pd.DataFrame({"value": [1, 2, 3]})})


# --------------------------------------------------------------------------- the store


def test_every_run_has_the_same_top_level_keys_and_one_id_format(tmp_path):
    run_dir = store(tmp_path)
    manifest = storage.read_manifest(run_dir)
    assert tuple(manifest) == storage.MANIFEST_KEYS == (
        "format", "kind", "run_id", "started_at", "finished_at", "parameters", "server", "client", "procedure",
        "checks", "results")
    assert manifest["format"] == storage.FORMAT
    assert re.fullmatch(r"\d{8}T\d{6}-probe-[0-9a-f]{6}", manifest["run_id"]) and run_dir.name == manifest["run_id"]
    assert manifest["parameters"] == {"size": 3, "modes": ["a", "b"]}  # as JSON stores it
    assert pd.read_parquet(run_dir / "rows.parquet")["value"].tolist() == [1, 2, 3]
    assert not [p for p in run_dir.parent.iterdir() if p.name.startswith(".staging")]


def test_runs_are_found_by_kind_exact_parameters_and_major_version(tmp_path):
    first = store(tmp_path)
    time.sleep(0.01)  # runs sort by their start time, kept to the millisecond
    second = store(tmp_path)
    other_size = store(tmp_path, parameters={"size": 4, "modes": ["a", "b"]})
    on_18 = store(tmp_path, major=18)
    assert storage.find_runs("probe", {"size": 3, "modes": ["a", "b"]}, tmp_path, 16) == [first, second]
    assert storage.find_runs("probe", {"size": 3.0, "modes": ("a", "b")}, tmp_path, 16) == [first, second]
    assert storage.find_runs("probe", {"size": 4, "modes": ["a", "b"]}, tmp_path, 16) == [other_size]
    assert storage.find_runs("probe", {"size": 3, "modes": ["a", "b"]}, tmp_path, 18) == [on_18]
    assert len(storage.find_runs("probe", {"size": 3, "modes": ["a", "b"]}, tmp_path, None)) == 3
    assert storage.find_runs("probe", {"size": 3}, tmp_path, 16) == [], "a subset of the parameters is not a match"
    assert storage.find_runs("other", {"size": 3, "modes": ["a", "b"]}, tmp_path, 16) == []


def test_a_run_stored_before_a_setting_existed_is_found_by_that_settings_default(tmp_path):
    before = store(tmp_path)  # {"size": 3, "modes": [...]}: made when there was no "batch"
    with_it = store(tmp_path, parameters={"size": 3, "modes": ["a", "b"], "batch": 5})
    asked = {"size": 3, "modes": ["a", "b"]}
    assert storage.find_runs("probe", {**asked, "batch": 1}, tmp_path, 16, implied={"batch": 1}) == [before]
    assert storage.find_runs("probe", {**asked, "batch": 5}, tmp_path, 16, implied={"batch": 1}) == [with_it]
    assert storage.find_runs("probe", {**asked, "batch": 1}, tmp_path, 16) == [], "only a declared default is implied"
    assert contract.implied_settings(RaceParameters("guarded", 1)) == {"batch": 1, "rtt_ms": 0.0, "proxy_at_zero": False,
                                                                     "sampler": True, "cpus": "shared",
                                                                     "client": "processes", "pooler": "none",
                                                                     "storage": "tmpfs"}
    assert contract.implied_settings(plans.PlansParameters()) == {}


def test_a_run_stored_before_a_setting_existed_is_found_by_what_its_own_parameters_imply(tmp_path):
    # a library soak's runs stored before "arrivals" sent them in steps; the soak's own, as each job fell due
    own = store(tmp_path, parameters={"size": 3, "library": "none"})
    library = store(tmp_path, parameters={"size": 3, "library": "pgmq"})
    implied = {"arrivals": lambda stored: "as_due" if stored.get("library") == "none" else "steps"}
    assert storage.find_runs("probe", {"size": 3, "library": "none", "arrivals": "as_due"}, tmp_path, 16,
                             implied=implied) == [own]
    assert storage.find_runs("probe", {"size": 3, "library": "pgmq", "arrivals": "as_due"}, tmp_path, 16,
                             implied=implied) == []
    assert storage.find_runs("probe", {"size": 3, "library": "pgmq", "arrivals": "steps"}, tmp_path, 16,
                             implied=implied) == [library]
    arrivals = contract.implied_settings(soak.SoakParameters())["arrivals"]
    assert (arrivals({"library": "pgmq"}), arrivals({"library": "none"}), arrivals({})) == ("steps", "as_due", "as_due")


def test_a_run_that_fails_its_checks_is_kept_apart_and_never_found(tmp_path):
    with pytest.raises(ConservationError, match="rows_add_up"):
        store(tmp_path, checks={"rows_add_up": False, "passed": False})
    [kept] = (tmp_path / "probe" / ".failed").iterdir()
    assert storage.read_manifest(kept)["checks"]["passed"] is False
    assert storage.stored_runs("probe", tmp_path) == []
    with pytest.raises(ValueError, match="boolean 'passed'"):
        store(tmp_path, checks={"rows_add_up": True})


def test_a_manifest_without_a_format_is_format_1_and_read_as_before(tmp_path):
    run_dir = store(tmp_path)
    manifest = storage.read_manifest(run_dir)
    del manifest["format"]
    storage.write_json(run_dir / "manifest.json", manifest)
    storage._manifests.clear()
    assert storage.format_of(manifest) == 1
    assert storage.find_runs("probe", {"size": 3, "modes": ["a", "b"]}, tmp_path, 16) == [run_dir]


def test_a_run_stored_in_a_newer_format_is_refused_in_one_line(tmp_path):
    run_dir = store(tmp_path, kind="race", parameters=dataclasses.asdict(RaceParameters("guarded", 1)))
    manifest = storage.read_manifest(run_dir)
    storage.write_json(run_dir / "manifest.json", {**manifest, "format": storage.FORMAT + 1})
    storage._manifests.clear()
    with pytest.raises(UserError, match=f"manifest format {storage.FORMAT + 1}, newer than this code's") as refused:
        storage.stored_runs("race", tmp_path)
    assert "\n" not in str(refused.value)
    with pytest.raises(UserError, match="newer than this code's"):
        storage.Run(run_dir).manifest
    result = run_cli("summary", "--data-dir", str(tmp_path))
    assert result.returncode != 0 and "newer than this code's" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_run_reads_its_parameters_summary_and_tables_through_one_reader(tmp_path):
    asked = plans.PlansParameters(job_counts=[500])
    stored = store(tmp_path, kind="plans", parameters=dataclasses.asdict(asked))
    (stored / "points.parquet").write_bytes((stored / "rows.parquet").read_bytes())
    run = storage.Run(stored)
    assert run.parameters == asked and run.kind == "plans" and run.run_id == stored.name
    assert run.summary["value"].tolist() == [1, 2, 3], "the plans kind's summary is its points table"
    first = run.table("rows")
    first.loc[0, "value"] = 99  # a reader's change stays its own
    assert storage.Run(stored).table("rows")["value"].tolist() == [1, 2, 3]
    assert run.has_table("rows") and not run.has_table("pruning")
    assert run.table("pruning", absent_ok=True).empty
    with pytest.raises(FileNotFoundError):
        run.table("pruning")
    with pytest.raises(UserError, match="is not a stored run"):
        storage.Run(tmp_path)
    other = storage.Run(store(tmp_path, kind="probe"))
    with pytest.raises(ValueError, match="no reader declared for probe runs"):
        other.summary


def test_runs_in_an_older_shape_or_unreadable_are_ignored_not_fatal(db, tmp_path):
    races = storage.kind_dir(tmp_path, "race")
    shapes = {
        "20240101T000000-guarded-w1-j10-r0-abcdef": {"run_id": "x", "kind": "race", "config": {"strategy": "guarded"},
                                                     "server": {"major": 16}, "checks": {"passed": True}},
        "20240101T000001-race-000001": {key: {} for key in storage.MANIFEST_KEYS},  # keys right, contents not
        "20240101T000002-race-000002": ["not", "a", "mapping"],
    }
    for name, manifest in shapes.items():
        (races / name).mkdir(parents=True)
        (races / name / "manifest.json").write_text(json.dumps(manifest))
    (races / "20240101T000003-race-000003").mkdir()
    (races / "20240101T000003-race-000003" / "manifest.json").write_text("{ not json")
    assert storage.stored_runs("race", tmp_path) == []
    assert storage.find_runs("race", {"strategy": "guarded"}, tmp_path, 16) == []
    assert summarise_runs(tmp_path).empty
    result = run_cli("summary", "--data-dir", str(tmp_path))
    assert result.returncode == 0 and "no runs stored yet" in result.stdout, result.stderr
    # and a race run now is found beside them
    [made] = registry.ensure("race", RaceParameters("guarded", 1, job_count=50), tmp_path, db=db, progress=False)
    assert [path for _, path in storage.stored_runs("race", tmp_path)] == [made]


# --------------------------------------------------------------------------- the registry


def test_ensure_makes_only_the_missing_runs_and_keeps_the_sweeps_order(db, tmp_path, capsys):
    small = RaceSweep(strategies=["guarded", "skip_locked"], worker_counts=[1], job_count=60)
    first = registry.ensure("race", small, tmp_path, db=db)
    assert "race: 0 of 2 runs found" in capsys.readouterr().out
    bigger = RaceSweep(strategies=["naive", "guarded", "skip_locked"], worker_counts=[1], job_count=60)
    second = registry.ensure("race", bigger, tmp_path, db=db)
    assert "race: 2 of 3 runs found" in capsys.readouterr().out
    assert second[1:] == first, "the stored trials are reused, in the sweep's order"
    assert [storage.read_manifest(p)["parameters"]["strategy"] for p in second] == ["naive", "guarded", "skip_locked"]
    assert registry.ensure("race", bigger, tmp_path, db=db) == second
    assert "race: all 3 runs found" in capsys.readouterr().out
    assert [storage.Run(p).parameters for p in second] == bigger.trials(), "each run reads back as it was asked"


def test_all_means_the_original_three_and_a_batch_belongs_to_the_batch_strategies():
    assert parse_strategies("all") == list(ORIGINAL_STRATEGIES) == ["naive", "guarded", "skip_locked"]
    assert RaceSweep().strategies == ORIGINAL_STRATEGIES and bench.BenchParameters().strategies == ORIGINAL_STRATEGIES
    sweep = RaceSweep(strategies=["skip_locked_batch", "guarded", "skip_locked_batch_in"], worker_counts=[2],
                      batch=3)
    assert [(t.strategy, t.batch) for t in sweep.trials()] == [
        ("skip_locked_batch", 3), ("guarded", 1), ("skip_locked_batch_in", 3)]
    assert RaceSweep(strategies=["guarded"], batch=3).trials()[0].batch == 1


def test_libraries_among_the_strategies_stands_for_every_job_library_s_protocol():
    """A params section (a list) and --strategy (text) say `libraries` for every protocol the libraries' declaration
    holds, each followed by its variants: a library declared there is raced without editing the list."""
    from harness.claims.protocols import LIBRARY_PROTOCOL_ORDER, LIBRARY_VARIANTS
    from harness.libraries.catalogue import LIBRARY_STRATEGIES

    assert set(LIBRARY_PROTOCOL_ORDER) == {*LIBRARY_STRATEGIES, *LIBRARY_VARIANTS}
    for variant, library in LIBRARY_VARIANTS.items():
        assert LIBRARY_PROTOCOL_ORDER.index(variant) == LIBRARY_PROTOCOL_ORDER.index(library) + 1
    assert RaceSweep(strategies=["skip_locked", "libraries"]).strategies == ("skip_locked", *LIBRARY_PROTOCOL_ORDER)
    assert parse_strategies("skip_locked,libraries") == ["skip_locked", *LIBRARY_PROTOCOL_ORDER]
    assert parse_strategies("libraries,naive") == [*LIBRARY_PROTOCOL_ORDER, "naive"]
    with pytest.raises(UserError, match="guarded claims one job per attempt"):
        RaceParameters("guarded", 2, batch=5)
    for bad in (0, 1001):
        with pytest.raises(UserError, match="batch must be between 1 and 1000"):
            RaceSweep(batch=bad)
        with pytest.raises(UserError, match="batch must be between 1 and 1000"):
            RaceParameters("skip_locked_batch", 2, batch=bad)


@pytest.mark.parametrize("name", ["naive_transaction", "naive_serializable", "skip_locked_batch",
                                  "skip_locked_batch_in", "advisory_lock"])
def test_the_bench_refuses_what_a_pgbench_script_cannot_count_in_one_line(name):
    from harness.experiments.bench.pgbench import pgbench_script
    from harness.claims.strategies import STRATEGIES

    with pytest.raises(UserError, match=f"the bench cannot take {name}: ") as refused:
        bench.BenchParameters(strategies=["guarded", name])
    assert "\n" not in str(refused.value)
    with pytest.raises(UserError, match=f"the bench cannot take {name}"):
        pgbench_script(STRATEGIES[name])
    assert bench.BenchParameters(strategies=["for_update"]).strategies == ("for_update",)


def test_a_sweep_is_a_list_of_trials_and_reads_back_from_them():
    sweep = RaceSweep(strategies=["naive", "guarded"], worker_counts=[4, 1], job_count=40, repeats=2, pause_ms=5)
    trials = sweep.trials()
    assert len(trials) == 2 * 2 * 2 and all(isinstance(t, RaceParameters) for t in trials)
    assert [t.repeat for t in trials] == [0] * 4 + [1] * 4, "repeats outermost"
    assert registry.parameter_sets("race", sweep) == trials == registry.parameter_sets("race", trials)
    assert registry.parameter_sets("race", trials[0]) == [trials[0]]
    with pytest.raises(TypeError):
        registry.parameter_sets("race", plans.PlansParameters())


def test_a_sweep_of_round_trips_stores_one_round_trip_per_trial_and_finds_runs_stored_before_it(tmp_path):
    sweep = RaceSweep(strategies=["naive", "guarded"], worker_counts=[4], job_count=40, rtt_ms=[0, 1, 5, 20])
    trials = sweep.trials()
    # 0 ms twice, straight and through the proxy: the baseline the longer round trips are compared with
    assert [(t.strategy, t.rtt_ms, t.proxy_at_zero) for t in trials] == [
        (s, r, p) for s in ("naive", "guarded") for r, p in ((0, False), (0, True), (1, False), (5, False), (20, False))]
    assert all(isinstance(dataclasses.asdict(t)["rtt_ms"], float) for t in trials), "each run keeps a scalar"
    assert RaceSweep(rtt_ms=5) == RaceSweep(rtt_ms=[5.0]), "one number is a sweep of one"
    assert RaceSweep().rtt_ms == (0.0,)
    # a trial stored before the round trip existed (no rtt_ms in its parameters) is the sweep's 0 ms point
    old = {key: value for key, value in dataclasses.asdict(trials[0]).items() if key != "rtt_ms"}
    before = store(tmp_path, kind="race", parameters=old)
    assert registry.find("race", sweep, tmp_path, 16)[0] == [before] + [None] * 9
    assert storage.Run(before).parameters == trials[0], "read back with the round trip's default"
    for bad in ([], [0, -1], [1001], [float("nan")]):
        with pytest.raises(UserError, match="round trip|rtt must be between 0 and 1000 ms"):
            RaceSweep(rtt_ms=bad)
    with pytest.raises(UserError, match="must be a list"):
        RaceSweep(rtt_ms="5")


def test_a_sweep_races_with_and_without_the_partial_index_and_each_trial_keeps_one():
    sweep = RaceSweep(strategies=["guarded"], worker_counts=[1, 8], job_count=40, partial_index=[False, True])
    trials = sweep.trials()
    assert [(t.worker_count, t.partial_index) for t in trials] == [(1, False), (1, True), (8, False), (8, True)]
    assert RaceSweep(partial_index=True).partial_index == (True,) and RaceSweep().partial_index == (False,)
    unindexed = RaceSweep(strategies=["guarded"], worker_counts=[1, 8], job_count=40)
    assert [t for t in trials if not t.partial_index] == unindexed.trials(), "the same runs as an unindexed sweep"
    with pytest.raises(UserError, match="partial index"):
        RaceSweep(partial_index=[])
    with pytest.raises(UserError, match="true or false"):
        RaceSweep(partial_index=["yes"])


def test_the_command_line_takes_a_list_of_round_trips():
    from harness.cli import build_parser

    args = build_parser().parse_args(["race", "--rtt-ms", "0,1,5,20"])
    assert args.rtt_ms == (0.0, 1.0, 5.0, 20.0)
    result = run_cli("race", "--strategy", "guarded", "--workers", "1", "--rtt-ms", "0,x")
    assert result.returncode == 2 and result.stderr.strip().count("\n") == 0
    assert "comma-separated numbers" in result.stderr


def test_a_section_may_name_its_own_server_version_and_is_found_by_it(tmp_path):
    params = {"pg_version": 16, "latency": {"pg_version": 18, "strategies": ["guarded"], "worker_counts": [2],
                                             "job_count": 40}}
    assert registry.section_pg_version(params, "latency") == 18
    assert registry.section_request(params, "latency") == RaceSweep(strategies=["guarded"], worker_counts=[2],
                                                                    job_count=40)
    params["latency"].pop("pg_version")
    assert registry.section_pg_version(params, "latency") == 16, "the file's version is every section's default"
    [trial] = RaceSweep(strategies=["guarded"], worker_counts=[2], job_count=40).trials()
    on_18 = store(tmp_path, kind="race", parameters=dataclasses.asdict(trial), major=18)
    params["latency"]["pg_version"] = 18
    found = registry.stored_sections({**params, **{s: {} for s in registry.SECTIONS if s != "latency"}}, tmp_path)
    assert found["latency"].paths == [on_18]
    assert found["latency"].request == registry.section_request(params, "latency")
    params["latency"]["pg_version"] = 16
    found = registry.stored_sections({**params, **{s: {} for s in registry.SECTIONS if s != "latency"}}, tmp_path)
    assert found["latency"].runs == (), "a run on another major version is not this section's"


def test_a_section_on_its_own_version_is_refused_on_a_database_url_server_before_it_runs(tmp_path, monkeypatch):
    params = {"pg_version": 16, "latency": {"pg_version": 18, "strategies": ["guarded"], "worker_counts": [2],
                                             "job_count": 40}}
    monkeypatch.setenv("DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    with pytest.raises(UserError, match="latency runs on PostgreSQL 18, which a DATABASE_URL server cannot be"):
        registry.ensure_section(params, "latency", tmp_path, progress=False)
    assert not (tmp_path / "races").exists(), "nothing ran"


@pytest.mark.parametrize("name", list(registry.KINDS))
def test_every_kind_declares_one_frozen_parameters_dataclass_that_is_its_manifest(name):
    entry = registry.KINDS[name]
    assert dataclasses.is_dataclass(entry.parameters) and entry.parameters.__dataclass_params__.frozen
    assert issubclass(entry.parameters, contract.Parameters) and issubclass(entry.asks, contract.Parameters)
    asked = entry.asks()  # every setting a section or the command line fills has a default
    for one in entry.runs(asked):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(one, dataclasses.fields(one)[0].name, None)
        assert entry.parameters(**storage.plain(dataclasses.asdict(one))) == one, "a manifest reads back"
    # the subcommand's flags: what a section asks, unless the kind's command line asks for one run (production)
    flags = [f.metadata["option"].flag for f in dataclasses.fields(entry.command_asks) if f.metadata.get("option")]
    assert len(flags) == len(set(flags)) > 0
    assert set(entry.sections) <= set(registry.SECTIONS)
    with pytest.raises(UserError, match="unknown setting 'nonsense'"):
        entry.asks.from_mapping({"nonsense": 1}, name)


@pytest.mark.parametrize("convert, value, fragment", [
    (contract.as_int, "3", "must be a whole number"),
    (contract.as_int, 2.5, "must be a whole number"),
    (contract.as_int, True, "must be a whole number"),
    (contract.as_float, "fast", "must be a number"),
    (contract.as_bool, "yes", "must be true or false"),
    (contract.as_ints, 3, "must be a list"),
    (contract.as_ints, "1,2", "must be a list"),
    (contract.as_strategies, [], "at least one strategy"),
    (contract.as_strategies, ["optimistic"], "unknown strategy 'optimistic'"),
])
def test_a_setting_of_the_wrong_type_is_one_line(convert, value, fragment):
    with pytest.raises(UserError, match=fragment):
        convert("job_count", value)


def test_the_converters_accept_what_yaml_and_the_command_line_give():
    assert contract.as_int("n", 3.0) == 3 and contract.as_float("x", 2) == 2.0
    assert contract.as_ints("n", [1, 2]) == (1, 2) and contract.as_bools("b", [False, True]) == (False, True)
    assert churn.ChurnParameters(race_worker_counts=[]).race_worker_counts == ()
    assert churn.index_settings("both") == (False, True) and contract.int_list_or_none("none") == ()


def test_the_dependency_rules_hold():
    """The store imports no experiment; no experiment imports the command line."""
    def imports(path: Path) -> set[str]:
        tree = ast.parse(path.read_text())
        found = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
        found |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        return found

    assert not {m for m in imports(PROJECT_ROOT / "harness" / "storage.py") if m.startswith("harness.experiments")}
    for module in (PROJECT_ROOT / "harness" / "experiments").glob("*.py"):
        assert "harness.cli" not in imports(module), module.name
    assert not (PROJECT_ROOT / "harness" / "datasets.py").exists()
    assert not (PROJECT_ROOT / "harness" / "manifest.py").exists()


# --------------------------------------------------------------------------- each kind's checks, every outcome


def worker(outcomes, job_ids, starts=None, rows=None, claimed=None):
    """A worker's attempts, one every 10 ns lasting 5 ns unless `starts` says when they began."""
    starts = np.arange(len(outcomes), dtype=np.int64) * 10 if starts is None else np.array(starts, dtype=np.int64)
    return SimpleNamespace(outcome=np.array(outcomes, dtype=np.int8), job_id=np.array(job_ids, dtype=np.int64),
                           start_ns=starts, latency_ns=np.full(len(outcomes), 5, dtype=np.int64),
                           rows=None if rows is None else np.array(rows, dtype=np.int32),
                           claimed_job_ids=None if claimed is None else np.array(claimed, dtype=np.int64))


@pytest.mark.parametrize("audit_jobs, status, passed, broken", [
    ([1, 2], {"running": 2}, True, None),
    ([1], {"running": 2}, False, "worker_wins_match_audit"),
    ([1, 2], {"running": 1, "pending": 1}, False, "every_job_claimed"),
])
def test_race_checks_every_outcome(audit_jobs, status, passed, broken):
    result = SimpleNamespace(workers=[worker([WON, LOST, EMPTY], [1, 0, 0]), worker([WON, EMPTY], [2, 0])])
    checks = conservation_checks(RaceParameters("guarded", 2, job_count=2), result,
                                 [(i, job) for i, job in enumerate(audit_jobs)], status)
    assert checks["passed"] is passed
    if broken:
        assert checks[broken] is False


def test_race_checks_count_aborted_attempts_as_attempts():
    result = SimpleNamespace(workers=[worker([ABORTED, ABORTED, WON, EMPTY], [1, 1, 1, 0])])
    checks = conservation_checks(RaceParameters("naive_serializable", 1, job_count=1), result, [(0, 1)],
                                 {"running": 1})
    assert checks["aborted"] == 2 and checks["attempts"] == 4 and checks["outcomes_add_up"] is True
    assert checks["passed"] is True


@pytest.mark.parametrize("rows, claimed, audit_jobs, rows_match, passed", [
    ([2, 1, 0], [1, 2, 3], [1, 2, 3], True, True),
    ([3, 1, 0], [1, 2, 3], [1, 2, 3], False, False),  # rows say four jobs, the ids three
    ([2, 1, 1], [1, 2, 3, 4], [1, 2, 3, 4], False, False),  # an empty answer that claimed a row
    ([2, 1, 0], [1, 2, 3], [1, 2, 2, 3], True, False),  # the audit saw a job claimed twice
])
def test_race_checks_every_outcome_of_a_batch(rows, claimed, audit_jobs, rows_match, passed):
    result = SimpleNamespace(workers=[worker([WON, WON, EMPTY], [1, 3, 0], rows=rows, claimed=claimed)])
    job_count = len(set(claimed))
    checks = conservation_checks(RaceParameters("skip_locked_batch", 1, job_count=job_count, batch=2), result,
                                 [(i, job) for i, job in enumerate(audit_jobs)], {"running": job_count})
    assert checks["rows_match_wins"] is rows_match and checks["passed"] is passed
    assert checks["max_rows_per_attempt"] == max(rows)


@pytest.mark.parametrize("batch, over", [(2, 0), (1, 1)])
def test_a_batch_over_its_size_is_counted_and_shown_not_refused(batch, over):
    result = SimpleNamespace(workers=[worker([WON, WON, EMPTY], [1, 3, 0], rows=[2, 1, 0], claimed=[1, 2, 3])])
    checks = conservation_checks(RaceParameters("skip_locked_batch_in", 1, job_count=3, batch=batch), result,
                                 [(0, 1), (1, 2), (2, 3)], {"running": 3})
    assert checks["attempts_over_batch"] == over and checks["batch"] == batch and checks["passed"] is True


@pytest.mark.parametrize("first_starts, second_starts, early", [
    ([0, 30], [0, 10, 40], 0),  # both empty answers ended after the last win began (at 10)
    ([0, 10], [0, 20, 30], 1),  # the first worker's empty answer ended at 15; the other's win began at 20
])
def test_an_empty_answer_followed_by_a_later_win_is_counted(first_starts, second_starts, early):
    result = SimpleNamespace(workers=[worker([WON, EMPTY], [1, 0], starts=first_starts),
                                      worker([WON, WON, EMPTY], [2, 3, 0], starts=second_starts)])
    checks = conservation_checks(RaceParameters("advisory_lock", 2, job_count=3), result,
                                 [(0, 1), (1, 2), (2, 3)], {"running": 3})
    assert checks["early_empty_answers"] == early and checks["passed"] is True


def test_race_checks_without_the_audit_count_the_workers_wins():
    result = SimpleNamespace(workers=[worker([WON, EMPTY], [1, 0])])
    assert conservation_checks(RaceParameters("guarded", 1, job_count=1, audit=False), result, [],
                               {"running": 1})["passed"] is True
    assert conservation_checks(RaceParameters("guarded", 1, job_count=2, audit=False), result, [],
                               {"running": 1, "pending": 1})["passed"] is False


def plan_frames(rows_returned=1, holder_seen=1, drop_state=None):
    asked = plans.PlansParameters(job_counts=[100], consumed_fractions=[0.5], repetitions=1)
    points = pd.DataFrame([{"job_count": 100, "consumed_fraction": 0.5, "consumed_jobs": 50, "partial_index": index,
                            "table_state": state, "strategy": "skip_locked", "statement": "claim",
                            "rows_returned": rows_returned}
                           for index in (False, True) for state in plans.TABLE_STATE_NAMES if state != drop_state])
    repetitions = points.assign(other_snapshot_backends=[holder_seen if s == plans.HELD_SNAPSHOT else 0
                                                         for s in points["table_state"]])
    return points, repetitions, asked


@pytest.mark.parametrize("frames, broken", [
    (plan_frames(), None),
    (plan_frames(drop_state=plans.VACUUMED), "every_point_measured"),
    (plan_frames(rows_returned=0), "every_claim_found_a_job"),
    (plan_frames(holder_seen=0), "snapshot_holder_seen"),
])
def test_plans_checks_every_outcome(frames, broken):
    checks = plans.plan_checks(*frames)
    assert checks["passed"] is (broken is None)
    assert [name for name, ok in checks.items() if ok is False and name != "passed"] == ([broken] if broken else [])


def churn_rows(updates=10, audit=10, drains=None):
    asked = churn.ChurnParameters(fillfactors=[100], payload_bytes=[0], partial_index=[False], updates=10,
                                  race_worker_counts=[2], bulk=False)
    drains = asked.drains if drains is None else drains
    matrix = [{"updates": updates, "claims": 10, "audit_claims": audit} for _ in drains]
    return matrix, asked


@pytest.mark.parametrize("rows, pruning, broken", [
    (churn_rows(), [{"updates": 5, "claims": 5}], None),
    (churn_rows(drains=[("sequential", 1)]), [], "every_drain_measured"),
    (churn_rows(updates=9), [], "server_counted_every_flip"),
    (churn_rows(audit=9), [], "audit_saw_every_flip"),
    (churn_rows(), [{"updates": 4, "claims": 5}], "pruning_counted_every_claim"),
])
def test_churn_checks_every_outcome(rows, pruning, broken):
    matrix, asked = rows
    checks = churn.churn_checks(matrix, pruning, asked)
    assert checks["passed"] is (broken is None)
    assert [name for name, ok in checks.items() if ok is False and name != "passed"] == ([broken] if broken else [])


def bench_pairs(drop_client=None, pending=100, plan_index="jobs_pending_idx"):
    rows = [{"strategy": "guarded", "worker_count": 2, "pair_index": 0, "client": client, "pending_after": pending,
             "plan_index": plan_index} for client in bench.CLIENTS if client != drop_client]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("pairs, broken", [
    (bench_pairs(), None),
    (bench_pairs(drop_client="pgbench_j2"), "every_pair_complete"),
    (bench_pairs(pending=1), "queue_never_drained"),
    (bench_pairs(plan_index="jobs_pkey"), "partial_index_read"),
])
def test_bench_checks_every_outcome(pairs, broken):
    checks = bench.bench_checks(pairs, bench.CLIENTS)
    assert checks["passed"] is (broken is None)
    assert [name for name, ok in checks.items() if ok is False and name != "passed"] == ([broken] if broken else [])


def test_ensure_reuses_a_stored_run_without_starting_a_server(tmp_path, capsys):
    asked = plans.PlansParameters(job_counts=[500])
    stored = store(tmp_path, kind="plans", parameters=dataclasses.asdict(asked))
    assert registry.ensure("plans", asked, tmp_path, db="docker") == [stored]  # docker is never reached
    assert f"plans: found the stored run for these parameters in {tmp_path}" in capsys.readouterr().out
    assert storage.Run(stored).parameters == asked
    assert registry.find("plans", plans.PlansParameters(job_counts=[501]), tmp_path) == ([None], [
        plans.PlansParameters(job_counts=[501])])


def test_worker_counts_from_once_from_workers_up_are_raced_once_and_the_rest_repeats_times():
    from harness.experiments.race.trials import RaceSweep

    sweep = RaceSweep(strategies=("naive",), worker_counts=(2, 8, 32, 100), job_count=100, repeats=3,
                      once_from_workers=32)
    assert sorted((t.worker_count, t.repeat) for t in sweep.trials()) == [
        (2, 0), (2, 1), (2, 2), (8, 0), (8, 1), (8, 2), (32, 0), (100, 0)]
    every = RaceSweep(strategies=("naive",), worker_counts=(2, 100), job_count=100, repeats=2)
    assert len(every.trials()) == 4, "0, the default, races every count `repeats` times"
    with pytest.raises(UserError, match="once from workers"):
        RaceSweep(strategies=("naive",), worker_counts=(2,), job_count=100, once_from_workers=-1).check()


def test_the_prose_names_the_worker_counts_raced_fewer_times():
    from harness.article.analysis import fewer_repeats
    from harness.article.sections.races import fewer_repeats_said

    points = pd.DataFrame({"worker_count": [2, 8, 32, 100], "repeats": [3, 2, 1, 1]})
    assert fewer_repeats(points) == {1: [32, 100], 2: [8]}
    assert fewer_repeats(points.assign(repeats=3)) == {}
    assert fewer_repeats_said({}) == ""
    assert fewer_repeats_said({1: [32, 100]}) == " (one race at 32 and 100 workers)"
    assert fewer_repeats_said({1: [100], 2: [8]}) == " (one race at 100 workers; two races at 8 workers)"
