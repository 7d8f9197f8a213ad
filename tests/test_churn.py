"""Table churn on a real server: HOT, dead tuples and pruning, from pg_stat_user_tables."""

from __future__ import annotations

import json

import pytest

from conftest import run_cli
from harness import storage
from harness.experiments import registry
from harness.experiments.churn import measure as churn
from harness.storage import Run, read_json


def measure(db, data_dir, **parameters):
    [run] = registry.measure("churn", churn.ChurnParameters(**parameters), data_dir, db=db, progress=False)
    return run

REQUIRED_JSON_KEYS = {"fillfactor", "partial_index", "payload_bytes", "mode", "updates", "hot_updates",
                      "newpage_updates", "dead_tuples", "live_tuples", "heap_pages"}


def test_with_the_partial_index_no_claim_is_a_hot_update(db, tmp_path):
    run = measure(db, tmp_path, fillfactors=(100, 50), payload_bytes=(0,), partial_index=(False, True), updates=300,
                  race_worker_counts=(2,), pruning=False)
    matrix = Run(run).summary
    assert len(matrix) == 2 * 2 * 3  # fillfactors x index x (sequential, race, bulk)
    assert set(matrix["mode"]) == {"sequential", "race", "bulk"}
    assert (matrix["updates"] == 300).all()  # the server counted every flip, and only those
    assert matrix["updates_match_claims"].all()
    assert (matrix["audit_claims"] == 300).all()

    with_index = matrix[matrix["partial_index"]]
    assert (with_index["hot_updates"] == 0).all(), with_index[["fillfactor", "mode", "hot_updates"]]
    # the counter is live: without the index, half-empty pages take HOT updates
    roomy = matrix[~matrix["partial_index"] & (matrix["fillfactor"] == 50)]
    assert (roomy["hot_updates"] > 0).all()
    assert (matrix["hot_updates"] + matrix["newpage_updates"] <= matrix["updates"]).all()

    manifest = read_json(run / "manifest.json")
    assert tuple(manifest) == storage.MANIFEST_KEYS and manifest["kind"] == "churn"
    assert manifest["server"]["pgstattuple_available"] in (True, False)
    assert manifest["results"]["pgstattuple_used"] in (True, False)
    assert manifest["checks"]["passed"] is True and manifest["checks"]["server_counted_every_flip"] is True
    assert manifest["procedure"]["bulk_update_sql"] == churn.BULK_UPDATE_SQL
    assert manifest["parameters"]["settle_seconds"] == churn.SETTLE_SECONDS  # a default is recorded too
    assert storage.find_runs("churn", manifest["parameters"], tmp_path, 16) == [run]


def test_pruning_experiment_reads_dead_tuples_in_every_phase(db, tmp_path):
    run = measure(db, tmp_path, fillfactors=(100,), payload_bytes=(0,), partial_index=(False,), updates=100,
                  race_worker_counts=(), bulk=False, pruning_job_count=2_000, pruning_claims=1_001, settle_seconds=3,
                  quiet_seconds=1)
    pruning = Run(run).table("pruning", absent_ok=True)
    assert len(pruning) == 2 * 3
    assert set(pruning["phase"]) == {"immediate", "settled", "after_read"}
    assert set(pruning["autovacuum"]) == {True, False}
    assert (pruning["updates"] == 1_001).all()
    assert (pruning["live_tuples"] == 2_000).all()
    off = pruning[~pruning["autovacuum"]]
    assert (off["autovacuum_runs"] == 0).all() and (off["autoanalyze_runs"] == 0).all()
    immediate = pruning[pruning["phase"] == "immediate"]
    # pruning takes HOT versions off n_dead_tup; a non-HOT version stays counted until VACUUM
    assert (immediate["updates"] - immediate["hot_updates"] <= immediate["dead_tuples"]).all()
    assert (immediate["dead_tuples"] <= immediate["updates"]).all()


def test_cli_json_prints_one_object_per_point(db, tmp_path):
    result = run_cli("churn", "--fillfactor", "100", "--payload-bytes", "0", "--partial-index", "on",
                     "--updates", "100", "--race-workers", "2", "--no-pruning", "--json", "--quiet",
                     "--data-dir", str(tmp_path), env_extra={"DATABASE_URL": db.url})
    assert result.returncode == 0, result.stderr
    points = [json.loads(line) for line in result.stdout.splitlines()]
    assert [p["mode"] for p in points] == ["sequential", "race", "bulk"]
    for point in points:
        assert REQUIRED_JSON_KEYS <= point.keys()
        assert point["updates"] == 100 and point["hot_updates"] == 0


@pytest.mark.parametrize("args, fragment", [
    (["--fillfactor", "5"], "fillfactor must be between 10 and 100"),
    (["--payload-bytes", "5000"], "payload bytes must be between 0 and"),
    (["--updates", "0"], "updates must be at least 1"),
    (["--race-workers", "0"], "race worker count must be at least 1"),
])
def test_bad_input_is_one_line_and_exit_2(args, fragment, tmp_path):
    result = run_cli("churn", *args, "--data-dir", str(tmp_path))
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert fragment in lines[0]
    assert storage.stored_runs("churn", tmp_path) == []
