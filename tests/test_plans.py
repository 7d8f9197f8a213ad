"""The claims' plans on a real server: buffer counts as EXPLAIN reports them, and no trace left in the table."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from conftest import run_cli
from harness import storage
from harness.article.sections import plans as plan_section
from harness.experiments import registry
from harness.experiments.plans import explain
from harness.experiments.plans import drains as plan_drains
from harness.experiments.plans import measure as plans
from harness.server import schema
from harness.storage import Run, read_json
from harness.claims.strategies import PICK_OLDEST_PENDING, SKIP_LOCKED_CLAIM

REQUIRED_JSON_KEYS = {"job_count", "consumed_fraction", "partial_index", "shared_hit_blocks", "shared_read_blocks",
                      "rows_removed_by_filter", "execution_ms"}


@pytest.fixture(scope="module")
def plan_run(db, tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("plans-data")
    [run] = registry.measure("plans", plans.PlansParameters(job_counts=(10_000,), consumed_fractions=(0, 0.5, 0.99),
                                                             repetitions=2), data_dir, db=db, progress=False)
    return run


def skip_locked_buffers(frame, partial_index: bool, table_state: str) -> list[int]:
    """The skip_locked claim's shared buffers (hit + read) at each fill level, lowest fill first."""
    rows = frame[(frame["strategy"] == "skip_locked") & (frame["partial_index"] == partial_index)
                 & (frame["table_state"] == table_state)].sort_values("consumed_fraction")
    return (rows["shared_hit_blocks"] + rows["shared_read_blocks"]).tolist()


def test_every_table_state_is_measured_and_described(plan_run):
    frame = Run(plan_run).summary
    claims = frame[frame["strategy"] == "skip_locked"]
    # fractions x index x the states of every point, and the two drains by claims at the reference point, each
    # with and without the index
    assert len(claims) == 3 * 2 * len(plans.EVERY_POINT_STATES) + 2 * 2
    assert set(claims["table_state"]) == set(plans.TABLE_STATE_NAMES)
    assert plans.TABLE_STATE_NAMES == ("first_scan", "steady", "held_snapshot", "vacuumed", "after_claims",
                                       "after_race")
    manifest = read_json(plan_run / "manifest.json")
    assert manifest["results"]["table_states"] == list(plans.TABLE_STATE_NAMES)
    assert set(manifest["procedure"]["table_states"]) == set(plans.TABLE_STATE_NAMES)
    for state in plans.TABLE_STATES:
        assert state.name in plans.__doc__ and state.label and state.description


def test_buffer_hits_grow_with_the_consumed_prefix_only_without_the_partial_index(plan_run):
    frame = Run(plan_run).summary
    claims = frame[frame["strategy"] == "skip_locked"]
    for state in plans.EVERY_POINT_STATES:
        without_index = skip_locked_buffers(frame, False, state)
        assert without_index[0] < without_index[1] < without_index[2], (state, without_index)
        with_index = skip_locked_buffers(frame, True, state)
        assert max(with_index) < 200, (state, with_index)
    first = skip_locked_buffers(frame, False, "first_scan")
    assert 1_000 <= first[1] < 100_000  # half drained: thousands of buffers for one claim
    vacuumed = skip_locked_buffers(frame, True, "vacuumed")
    assert max(vacuumed) - min(vacuumed) <= 5
    for state in plans.UNHELD_STATES:
        assert skip_locked_buffers(frame, True, state)[1] * 50 < skip_locked_buffers(frame, False, state)[1], state

    half = claims[claims["consumed_fraction"] == 0.5].set_index(["partial_index", "table_state"])
    for state in plans.EVERY_POINT_STATES:
        assert half.loc[(False, state), "rows_removed_by_filter"] == 5_000, state
        assert half.loc[(False, state), "index_used"] == "jobs_pkey", state
        assert half.loc[(True, state), "rows_removed_by_filter"] == 0, state
        assert half.loc[(True, state), "index_used"] == "jobs_pending_idx", state
    assert (claims["rows_returned"] == 1).all()  # every measured claim found a job

    repetitions = Run(plan_run).table("repetitions")
    buffers = repetitions["shared_hit_blocks"] + repetitions["shared_read_blocks"]
    spread = buffers.groupby([repetitions[k] for k in plans.POINT_KEYS]).agg(lambda s: s.max() - s.min())
    assert spread.max() <= 3  # fresh tables for first scans, consecutive scans of one table for the rest


def test_a_held_snapshot_keeps_the_claim_as_dear_as_the_first_scan(plan_run):
    frame = Run(plan_run).summary
    held = skip_locked_buffers(frame, False, "held_snapshot")
    steady = skip_locked_buffers(frame, False, "steady")
    assert held[1] > steady[1], (held, steady)  # half drained, no partial index


def test_the_first_scan_after_a_drain_reads_at_least_what_later_scans_read(plan_run):
    frame = Run(plan_run).summary
    for partial_index in (False, True):
        first = skip_locked_buffers(frame, partial_index, "first_scan")
        steady = skip_locked_buffers(frame, partial_index, "steady")
        assert all(f >= s for f, s in zip(first, steady)), (partial_index, first, steady)
    assert skip_locked_buffers(frame, False, "first_scan")[1] > skip_locked_buffers(frame, False, "steady")[1]


def test_vacuum_leaves_the_partial_index_cheaper_than_the_steady_state(plan_run):
    frame = Run(plan_run).summary
    assert skip_locked_buffers(frame, True, "vacuumed")[1] < skip_locked_buffers(frame, True, "steady")[1]


def test_nothing_held_a_snapshot_during_the_first_and_later_scans(plan_run):
    """The server's own evidence, per repetition: no other backend had backend_xmin set around the EXPLAIN."""
    repetitions = Run(plan_run).table("repetitions")
    unheld = repetitions[repetitions["table_state"].isin(plans.UNHELD_STATES)]
    assert len(unheld) and (unheld["other_snapshot_backends"] == 0).all()
    held = repetitions[repetitions["table_state"] == "held_snapshot"]
    assert len(held) and (held["other_snapshot_backends"] >= 1).all()  # the control: the holder is seen
    vacuumed = repetitions[repetitions["table_state"] == "vacuumed"]
    assert (vacuumed["other_snapshot_backends"] == 0).all()
    first_scans = unheld[unheld["table_state"] == "first_scan"]
    assert first_scans.groupby(list(plans.POINT_KEYS)).size().eq(2).all()  # one per repetition, each its own table


def test_plan_texts_and_manifest(plan_run):
    texts = plan_section.plan_texts(Run(plan_run))
    assert "Rows Removed by Filter: 5000" in texts["half_drained_without_index"]
    assert texts["half_drained_without_index"] == texts["skip_locked.claim/no_index/first_scan"]
    assert "jobs_pending_idx" in texts["half_drained_with_index"]
    for state in plans.TABLE_STATE_NAMES[1:]:
        assert f"half_drained_without_index_{state}" in texts and f"half_drained_with_index_{state}" in texts
    guarded = texts["guarded_claim"]
    assert "Index Scan using jobs_pkey" in guarded
    assert "Filter: (status = 'pending'::text)" in guarded
    manifest = read_json(plan_run / "manifest.json")
    assert tuple(manifest) == storage.MANIFEST_KEYS and manifest["kind"] == "plans"
    assert manifest["parameters"] == {"job_counts": [10_000], "consumed_fractions": [0.0, 0.5, 0.99], "repetitions": 2}
    assert "pgstattuple_available" in manifest["server"]
    assert manifest["procedure"]["statements"]["skip_locked.claim"] == SKIP_LOCKED_CLAIM
    assert manifest["checks"] == {"every_point_measured": True, "every_claim_found_a_job": True,
                                  "snapshot_holder_seen": True, "drains_took_the_prefix": True, "passed": True}
    assert manifest["results"]["reference_point"] == {"job_count": 10_000, "consumed_fraction": 0.5}
    assert isinstance(manifest["results"]["unheld_other_snapshot_backends_max"], int)  # its value: the test below


def test_a_queue_drained_by_claims_is_not_the_bulk_update_one(plan_run):
    """The claims drain the prefix one at a time: the server counts them, and the claim after them still walks
    the consumed rows without the index and not with it."""
    frame = Run(plan_run).summary
    after = frame[(frame["strategy"] == "skip_locked") & (frame["table_state"] == "after_claims")].set_index(
        "partial_index")
    reference = read_json(plan_run / "manifest.json")["results"]["reference_point"]
    assert set(after["consumed_fraction"]) == {reference["consumed_fraction"]}
    assert after.loc[False, "rows_removed_by_filter"] > 0 and after.loc[True, "rows_removed_by_filter"] == 0
    assert after.loc[True, "shared_hit_blocks"] < after.loc[False, "shared_hit_blocks"]
    counters = read_json(plan_run / "manifest.json")["results"]["drain_counters"]
    by_kind = {(c["drain"], c["partial_index"]): c for c in counters}
    consumed = int(after.loc[False, "consumed_jobs"])
    for index in (False, True):
        assert by_kind[("bulk_update", index)]["n_tup_upd"] == consumed
        for drain in ("claims", "race"):
            assert by_kind[(drain, index)]["n_tup_upd"] == consumed == by_kind[(drain, index)]["consumed_jobs"]
            # exactly the prefix, as the bulk UPDATE flips it
            assert by_kind[(drain, index)]["first_pending_id"] == consumed + 1
    # the partial index blocks HOT for both; without it, one-at-a-time claims find room the bulk UPDATE does not
    assert by_kind[("claims", True)]["n_tup_hot_upd"] == 0
    assert by_kind[("claims", False)]["n_tup_hot_upd"] > by_kind[("bulk_update", False)]["n_tup_hot_upd"]


def test_plan_capture_leaves_the_table_as_it_found_it(conn):
    schema.create_queue(conn, 500)  # with the audit trigger: a claim that stuck would leave an audit row
    conn.execute(plan_drains.CONSUME_PREFIX_SQL, [200])
    snapshot = "SELECT id, status, started_at FROM claimrace.jobs ORDER BY id"
    rows_before = conn.execute(snapshot).fetchall()
    counts_before = schema.status_counts(conn)
    first_pending = conn.execute(PICK_OLDEST_PENDING).fetchone()[0]

    for planned in explain.strategy_statements():
        params = (first_pending,) if planned.needs_job_id else ()
        document = explain.explain(conn, planned.sql, params, "json")
        assert explain.inner_scan(document["Plan"])["Actual Rows"] == 1, planned.label
        if planned.sql.startswith("UPDATE"):  # it really flipped the job: the audit trigger fired, then rolled back
            fired = {t["Trigger Name"]: t["Calls"] for t in document.get("Triggers", [])}
            assert fired == {"jobs_claim_audit": 1}, (planned.label, fired)
        assert explain.explain(conn, planned.sql, params, "text")

    assert schema.status_counts(conn) == counts_before == {"done": 200, "pending": 300}
    assert conn.execute(snapshot).fetchall() == rows_before
    assert schema.audit_rows(conn) == []


def test_cli_json_prints_one_object_per_point(db, tmp_path):
    result = run_cli("plans", "--jobs", "2000", "--consumed", "0,0.5", "--repetitions", "1", "--json", "--quiet",
                     "--data-dir", str(tmp_path), env_extra={"DATABASE_URL": db.url})
    assert result.returncode == 0, result.stderr
    points = [json.loads(line) for line in result.stdout.splitlines()]
    skip_locked = [p for p in points if p["strategy"] == "skip_locked"]
    assert len(skip_locked) == 2 * 2 * len(plans.EVERY_POINT_STATES) + 2 * len(plans.REFERENCE_ONLY_STATES)
    states = {p["state"] for p in skip_locked}
    assert {"after_claims", "after_race", "after_bulk_update"} <= states and all(p["buffers"] > 0 for p in skip_locked)
    for point in points:
        assert REQUIRED_JSON_KEYS <= point.keys()
    half = [p for p in skip_locked if p["consumed_fraction"] == 0.5 and not p["partial_index"]]
    assert all(p["rows_removed_by_filter"] == 1_000 for p in half)
    assert all(p["other_snapshot_backends_max"] == 0 for p in half if p["table_state"] in plans.UNHELD_STATES)
    assert len(storage.find_runs("plans", {"job_counts": [2000], "consumed_fractions": [0.0, 0.5], "repetitions": 1},
                                 tmp_path, None)) == 1


@pytest.mark.parametrize("args, fragment", [
    (["--jobs", "0"], "job count must be between 1"),
    (["--consumed", "0,1.5"], "consumed fraction must be between 0 and 1"),
    (["--consumed", "half"], "comma-separated fractions"),
    (["--repetitions", "0"], "repetitions must be at least 1"),
])
def test_bad_input_is_one_line_and_exit_2(args, fragment, tmp_path):
    result = run_cli("plans", *args, "--data-dir", str(tmp_path))
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert fragment in lines[0]
    assert storage.stored_runs("plans", tmp_path) == []


def test_relation_growth_reads_each_file_at_each_state_and_says_none_where_a_state_is_missing():
    def point(state, fraction, index, heap, pkey, partial=None):
        return {"strategy": "skip_locked", "statement": "claim", "job_count": 100, "table_state": state,
                "consumed_fraction": fraction, "partial_index": index, "heap_pages": heap, "pkey_pages": pkey,
                "partial_index_pages": partial}

    points = pd.DataFrame([point("first_scan", 0.0, False, 5, 3), point("first_scan", 0.5, False, 8, 5),
                           point("vacuumed", 0.5, False, 8, 5), point("after_claims", 0.5, False, 6, 3),
                           point("first_scan", 0.0, True, 5, 3, 2), point("vacuumed", 0.5, True, 8, 5, 2)])
    growth = plan_section.relation_growth(points, 100)
    assert (growth["heap_fresh"], growth["heap_drained"], growth["heap_vacuumed"]) == (5, 8, 8)
    assert (growth["pkey_fresh"], growth["pkey_drained"]) == (3, 5)
    assert (growth["partial_min"], growth["partial_max"]) == (2, 2)
    assert (growth["heap_after_claims"], growth["heap_after_bulk"]) == (6, 8)
    none = plan_section.relation_growth(points, 1_000)
    assert set(none) == set(growth) and none["heap_fresh"] is None and none["top_consumed"] is None
