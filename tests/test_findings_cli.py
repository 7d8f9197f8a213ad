"""python -m harness findings, end to end: a tiny real race stored, then the findings read back from it."""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import run_cli
from harness.experiments import registry
from harness.experiments.race.trials import RaceSweep
from harness.storage import read_json

# Its verdicts read races at 1 and 2 workers that must not wait for a CPU: nothing runs beside them (a test that
# reads no runs runs beside others).
serial = pytest.mark.serial

RACES = {"strategies": ["naive", "guarded", "skip_locked"], "worker_counts": [1, 2], "job_count": 60, "repeats": 1,
         "partial_index": False}


def params_file(tmp_path, pg_version: int):
    """A params file whose race section is the stored sweep; its other sections have no runs."""
    params = {"pg_version": pg_version, "races": RACES,
              "slow_race": {"strategies": ["guarded"], "worker_counts": [2], "job_count": 8, "pause_ms": 1,
                            "jitter_ms": 1},
              "original_size": {"strategies": ["naive"], "worker_counts": [2], "job_count": 8},
              "other_strategies": {"strategies": ["for_update"], "worker_counts": [2], "job_count": 8},
              "latency": {"strategies": ["guarded"], "worker_counts": [2], "job_count": 8, "rtt_ms": [0, 1]},
              "indexed_race": {"strategies": ["guarded"], "worker_counts": [2], "job_count": 8,
                               "partial_index": [False, True]},
              "pg18_race": {"pg_version": 18, "strategies": ["guarded"], "worker_counts": [2], "job_count": 8},
              "others_indexed": {"strategies": ["for_update"], "worker_counts": [2], "job_count": 8,
                                 "partial_index": True},
              "pg18_others": {"pg_version": 18, "strategies": ["for_update"], "worker_counts": [2], "job_count": 8},
              "split_cpus": {"strategies": ["guarded"], "worker_counts": [2], "job_count": 8, "cpus": "split"},
              "no_sampler": {"strategies": ["guarded"], "worker_counts": [2], "job_count": 8, "sampler": False},
              "client_layouts": {"strategies": ["guarded"], "worker_counts": [2], "job_count": 8,
                                 "clients": ["processes", "asyncio"]},
              "plans": {"job_counts": [1000], "consumed_fractions": [0.5], "repetitions": 1},
              "churn": {"fillfactors": [100, 70], "updates": 50},
              "bench": {"strategies": ["guarded"], "worker_counts": [2], "pairs": 1, "seconds": 1},
              "production": {"runner_counts": [2], "poll_intervals_s": [0.2], "seconds_per_poll": [2],
                             "endpoints": ["claim"], "service_time_s": 0.1},
              "faults": {"protocols": ["none"], "faults": ["kill"], "runner_count": 2, "job_count": 2},
              "libraries": {"libraries": ["pgqueuer"], "worker_counts": [1], "job_count": 5},
              "library_claims": {"strategies": ["que"], "worker_counts": [2], "job_count": 8},
              "library_faults": {"libraries": ["pgmq"], "faults": ["kill"], "worker_counts": [2], "job_count": 2},
              "library_stalls": {"libraries": ["pgqueuer"], "faults": ["stall"], "stalls": ["4@0.5"],
                                 "worker_counts": [3], "job_count": 3},
              "library_probe": {"libraries": ["pgmq"], "probes": ["stale_completion"]},
              "library_poolers": {"libraries": ["pgmq"], "poolers": ["session", "transaction"], "worker_counts": [2],
                                  "job_count": 8},
              "pooler_claims": {"strategies": ["que"], "worker_counts": [2], "job_count": 8,
                                "poolers": ["session", "transaction"]},
              "wakeups": {"libraries": ["procrastinate"], "intervals_s": [0.5], "job_count": 2},
              "disk_race": {"strategies": ["guarded"], "worker_counts": [2], "job_count": 8, "storage": "disk"},
              "soak": {"seconds": 20, "pin_from": 10, "pin_to": 14, "rate": 10, "workers": 1,
                       "arms": [{"holder": "none"}]},
              "soak_pg18": {"pg_version": 18, "arms": []},
              "library_soak": {"seconds": 20, "pin_from": 10, "pin_to": 14, "rate": 10, "workers": 1,
                               "arms": [{"library": "pgmq", "holder": "none"}]}}
    path = tmp_path / "params.yml"
    path.write_text(yaml.safe_dump(params))
    return path


@pytest.fixture(scope="module")
def stored(db, tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("findings-data")
    paths = registry.ensure("race", RaceSweep.from_mapping(RACES, "races"), data_dir, db=db, progress=False)
    return data_dir, int(read_json(paths[0] / "manifest.json")["server"]["major"])


@pytest.fixture(scope="module")
def printed(stored, tmp_path_factory) -> dict:
    """The command's JSON and its table, from the stored races, run side by side: {"json": ..., "table": ...}."""
    from concurrent.futures import ThreadPoolExecutor

    data_dir, pg_version = stored
    params = params_file(tmp_path_factory.mktemp("findings-params"), pg_version)
    asked = {"json": ("--json",), "table": ()}
    with ThreadPoolExecutor(len(asked)) as pool:
        running = {name: pool.submit(run_cli, "findings", *extra, "--data-dir", str(data_dir), "--params", str(params))
                   for name, extra in asked.items()}
        return {name: future.result() for name, future in running.items()}


@serial
def test_findings_json_from_stored_runs(printed):
    result = printed["json"]
    assert result.returncode == 0, result.stderr
    found = {f["id"]: f for f in json.loads(result.stdout)}
    assert list(found)[:2] == ["F1", "F2"] and len(found) == 34
    for finding in found.values():
        assert {"id", "verdict", "original", "ours", "note"} <= set(finding)
    assert found["F4"]["verdict"] == "confirmed", "guarded never hands out a job twice"
    assert found["F1"]["verdict"] != "not_measured" and "60 jobs" in found["F1"]["ours"]
    assert found["C4"]["verdict"] in ("confirmed", "not_reproduced")
    assert {found[i]["verdict"] for i in ("F9", "F10", "F11", "F12", "F13", "A3")} == {"not_measured"}
    assert "plans" in result.stderr and "churn" in result.stderr, "the sections without runs are named"


@serial
def test_findings_table_from_stored_runs(printed):
    result = printed["table"]
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("F1 ") and "original" in result.stdout and "\nA4 " in result.stdout


def test_findings_without_stored_runs_is_one_line_naming_the_sections(tmp_path):
    result = run_cli("findings", "--data-dir", str(tmp_path / "empty"), "--params", str(params_file(tmp_path, 16)))
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert "races" in lines[0] and "bench" in lines[0] and "make report" in lines[0]
