"""The job libraries under the soak: a library's own workers on its own table, jobs arriving through its own
enqueue while a transaction holds the horizon (harness.experiments.soak.library). Short real runs of pgmq, held
and not, side by side; the refusals; each library's enqueue kept open, which the arrivals rely on; the rule's
pickup series; and the article's section over the stored runs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from conftest import assert_held_keeps_dead_rows, soak_runs
from harness.experiments.soak import outcomes as rule
from harness.article.findings import CONFIRMED, CORRECTED, NOT_DISTINGUISHABLE, NOT_MEASURED
from harness.article.sections import library_soak as section
from harness.errors import UserError
from harness.experiments.soak import library as library_soak
from harness.experiments.soak import measure as soak
from harness.experiments.soak import show as soak_show
from harness import libraries
from harness.experiments import library_runtime as runtime
from harness.server import database

pytestmark = pytest.mark.xdist_group("library_soak")

COMMON = ["--library", "pgmq", "--rate", "40", "--workers", "2", "--seconds", "26", "--pin-from", "10",
          "--pin-to", "20", "--json", "--quiet"]


@pytest.fixture(scope="module")
def arms(tmp_path_factory):
    """{holder: (its JSON row, its stored Run)}: pgmq held by a REPEATABLE READ snapshot from 10 to 20 s, and its
    control, each on its own embedded server, side by side."""
    return soak_runs(tmp_path_factory.mktemp("library-soak"),
                     {holder: [*COMMON, "--holder", holder] for holder in ("repeatable_read", "none")}, 2)


def test_a_library_arm_runs_its_own_workers_on_its_own_table_each_job_once_on_schedule(arms):
    for holder, (row, stored) in arms.items():
        assert row["library"] == "pgmq" and row["shape"] is None and row["duplicate_jobs"] == 0, row
        assert row["jobs_arrived"] >= 40 * 24 and not row["arrivals_behind"], row
        assert abs(row["arrived_per_s_before"] - 40) <= 4 and row["verdict"] in rule.VERDICTS, row
        series = stored.table("series")
        assert {"pickup_p50_ms", "pickup_p99_ms"} <= set(series) and "claim_p99_ms" not in series
        summary = stored.summary
        assert summary["finished_jobs"] == "deleted" and summary["pickup_p99_ms_before"] > 0, summary
        assert stored.manifest["procedure"]["jobs_table"] == "pgmq.q_claimrace"
        # every job the audit saw claimed was enqueued, as the server's audit saw it
        assert stored.manifest["checks"]["every_claimed_job_enqueued"]


def test_the_held_library_keeps_its_dead_rows_and_its_control_lets_them_go(arms):
    assert_held_keeps_dead_rows(*arms["repeatable_read"], arms["none"][0])


def test_the_section_reads_each_held_library_against_its_control(arms, tmp_path):
    loaded = section.arms.load_runs(tuple(stored for _, stored in arms.values()))
    frame = section.rows(loaded)
    assert list(frame["held by"]) == ["nothing (control)", "repeatable read"], frame
    assert frame["its control"].iloc[0] == "—" and frame["its control"].iloc[1] == frame["verdict"].iloc[0]
    found = section.a12_library_pickup({section.NAME: loaded})
    runs = loaded.summaries
    held, control = runs[runs["holder"] != "none"].iloc[0], runs[runs["holder"] == "none"].iloc[0]
    assert found.verdict == section.arms.hold_part(runs, [int(held.name)], [int(control.name)])
    assert "pgmq" in section.library_table({section.NAME: loaded})
    # the caption says how the jobs arrived: the mean jobs per enqueue call and the time between calls, as stored
    per_call = runs["jobs_arrived"].sum() / runs["enqueue_calls"].sum()
    every_ms = runs["ended_s"].sum() / runs["enqueue_calls"].sum() * 1000
    assert f"{per_call:.1f} jobs a call on average, a call every {every_ms:.1f} ms" in section.arrival_steps(loaded)
    said = section.values({section.NAME: loaded}, {})
    assert said["library_soak_outcome"].startswith("Held the same way on their own tables") and "pgmq" in said[
        "library_soak_outcome"] and f"control: {frame['verdict'].iloc[0]}" in said["library_soak_outcome"]
    assert section.values({}, {})["library_soak_outcome"] == ""


def test_a12_is_not_measured_without_a_library_arm_held_beside_its_control(arms):
    held_only = section.arms.load_runs((arms["repeatable_read"][1],))
    assert section.a12_library_pickup({section.NAME: held_only}).verdict == NOT_MEASURED
    assert section.a12_library_pickup({section.NAME: None}).verdict == NOT_MEASURED


@pytest.mark.parametrize("held, control, part", [
    (3.0, None, CONFIRMED), (None, None, CORRECTED), (3.0, 6.0, NOT_DISTINGUISHABLE)])
def test_each_library_part_is_the_held_arm_against_its_control(held, control, part):
    """The soak's own rule (soak_arms.hold_part, tested in full in tests/test_soak_section.py), on the pickup."""
    runs = pd.DataFrame([{"holder": "repeatable_read", "verdict": "slowed", "seconds_to_slow": held, "held_s": 15.0},
                         {"holder": "none", "verdict": "slowed", "seconds_to_slow": control, "held_s": 15.0}])
    assert section.arms.hold_part(runs, [0], [1]) == part


class Tables:
    """A stored run as pickup_by_place reads it: its tables by name."""

    def __init__(self, **tables):
        self.tables = tables

    def table(self, name):
        return self.tables[name]


def test_a_job_s_place_in_its_enqueue_call_is_its_rank_in_enqueue_order():
    # two calls of three jobs; claims listed out of order, each job's enqueue its claim minus its pickup
    pickup = np.array([30.0, 1.0, 2.0, 20.0, 3.0, 10.0])  # jobs 5, 0, 1, 4, 2, 3 in enqueue order
    enqueued = np.array([5, 0, 1, 4, 2, 3]) * 1e6
    claims = pd.DataFrame({"claimed_ns": enqueued + pickup * 1e6, "pickup_ms": pickup})
    calls = pd.DataFrame({"jobs": [3, 3]})
    # first jobs: 0 and 3 (1 and 10 ms); last: 2 and 5 (3 and 30 ms)
    assert section.pickup_by_place(Tables(claims=claims, enqueue_calls=calls)) == (5.5, 16.5)
    # the last call's jobs not yet claimed at the end: its first and last are not read
    assert section.pickup_by_place(Tables(claims=claims.iloc[[1, 2, 4]], enqueue_calls=calls)) == (1.0, 3.0)
    assert section.pickup_by_place(Tables(claims=claims.iloc[:0], enqueue_calls=calls)) is None


@pytest.mark.parametrize("second, part", [(2.0, CONFIRMED), (None, NOT_DISTINGUISHABLE)])
def test_a12_reads_a_library_over_its_repeats_and_decides_only_where_they_agree(arms, second, part):
    loaded = section.arms.load_runs(tuple(stored for _, stored in arms.values()))
    held = loaded.summaries["holder"] != "none"
    # holds of 60 s: the margin (10 s) fits between a held repeat's onset and its control's lower bound
    first = loaded.summaries.assign(verdict="slowed", seconds_to_slow=np.where(held, 1.0, None),
                                    seconds_to_fall_behind=None, held_s=60.0, observed_s=60.0)
    again = first.assign(repeat=1, seconds_to_slow=np.where(held, second, None))
    both = dataclasses.replace(loaded, summaries=pd.concat([first, again], ignore_index=True))
    found = section.a12_library_pickup({section.NAME: both})
    assert found.verdict == part and "; 2 runs of each arm)" in found.ours and not found.parts, found


@pytest.mark.parametrize("args, said", [
    (dict(library="pgmq", history_rows=10), "history rows must be 0 with --library"),
    (dict(library="pgmq", mitigation="autovacuum"), "mitigation autovacuum sets the soak's own table"),
    (dict(library="sidekiq"), "library must be one of none, "),
])
def test_a_library_soak_it_cannot_run_is_refused_in_one_line(args, said):
    with pytest.raises(UserError, match=said):
        soak.SoakParameters(**args)


@pytest.mark.parametrize("name", libraries.available())
def test_the_arrivals_send_through_one_enqueue_each_job_once_numbered_on(db, name):
    """The enqueue kept open for a run's arrivals takes call after call: every job audited once, and where the
    audit reads the number the harness gave the job (chancy's id is a uuid) the second call numbers on from the
    first's (first), so no two jobs share a number."""
    library = libraries.get(name)
    url = runtime.database_url(db.url)
    with db.connect() as admin:
        runtime.fresh_database(admin)
    try:
        library.install(url)
        with database.connect(url) as conn:
            runtime.install_audit(conn, library)
            with library.enqueuer(url, 0.005) as send:
                send(3, 0)
                send(2, 3)
            audit = runtime.read_audit(conn)
    finally:
        with db.connect() as admin:
            runtime.drop_database(admin)
    enqueued = audit[audit["event"] == "enqueued"]["job_id"]
    assert len(enqueued) == enqueued.nunique() == 5, audit
    if library.AUDIT_ID_SQL:
        assert sorted(enqueued) == [0, 1, 2, 3, 4]


def test_the_pickup_series_names_its_quantiles_and_the_rule_reads_them():
    start = 10 * 10**9
    arrivals = (start + np.array([0.1, 0.2, 1.5]) * 1e9).astype(np.int64)
    claims = (start + np.array([0.3, 1.6]) * 1e9).astype(np.int64)
    frame = rule.per_second(arrivals, claims, np.array([200.0, 100.0]), start, 2.0, latency="pickup")
    assert list(frame.columns[-3:]) == ["pickup_p50_ms", "pickup_p99_ms", "pickup_mean_ms"] \
        and rule.latency_of(frame) == "pickup"
    assert list(frame["pickup_p99_ms"]) == [200.0, 100.0]


def test_arrivals_sent_in_steps_are_behind_only_beyond_their_step():
    """At 100 jobs/s in steps of 0.2 s, a second ends with 80 jobs arrived: behind its schedule, not its steps."""
    stepped = pd.DataFrame({"second": np.arange(10, dtype=float), "arrived": np.full(10, 100)})
    stepped.loc[0, "arrived"] = 80
    assert rule.arrivals_behind(stepped, 100.0) and not rule.arrivals_behind(stepped, 100.0, lag_s=0.2)
    assert rule.arrivals_behind(stepped.assign(arrived=60), 100.0, lag_s=0.2)


def test_the_command_prints_a_library_run_by_its_library_and_pickup(arms, capsys):
    soak_show.show_runs([arms["none"][1].path], False)
    line = capsys.readouterr().out
    assert line.startswith("pgmq ") and "pickup p99" in line and "claim p99" not in line, line


def _synthetic(audit_rows, calls, ended_s=30.0):
    """A run's measured result from a synthetic audit (job, event, second), as _measured reads a real one."""
    start_ns = 10**18
    audit = pd.DataFrame([(job, event, start_ns + int(t * 1e9), 0, 0) for job, event, t in audit_rows],
                         columns=["job_id", "event", "at_ns", "txid", "pid"])
    p = soak.SoakParameters(library="pgmq", rate=10, seconds=ended_s, pin_from=10, pin_to=20)
    from types import SimpleNamespace
    return library_soak._measured(
        p, library_soak.libraries.get("pgmq"), 10.0, None, calls, audit,
        pd.DataFrame(columns=["job_id", "at_ns", "pid", "event", "worker"]), pd.DataFrame(columns=["worker", "text"]),
        [], pd.DataFrame({"t_s": [1.0], "n_dead_tup": [0]}), start_ns, ended_s, {
            "fsync": "on", "track_wal_io_timing": "off", "storage_found": "tmpfs", "filesystem": "tmpfs",
            "wal_syncs": 0, "wal_sync_ms_per_sync": None, "pg_test_fsync_ms": None},
        activity_share(), activity_share(), SimpleNamespace(exits=[], restarts=0), None)


def activity_share():
    return {"runnable_share": None, "running_share": None}


def test_a_job_still_waiting_at_the_end_counts_at_its_wait_so_far_as_a_lower_bound():
    claimed = [(i, "enqueued", 1.0 + i * 0.1) for i in range(10)] + [(i, "claimed", 1.05 + i * 0.1) for i in range(9)]
    summary = _synthetic(claimed, [(0, 10, 1_000_000)]).results["summary"]
    # job 9 arrived at 1.9 s and was never claimed: 28.1 s at the end of a 30 s run, far beyond the claimed ones
    assert summary["jobs_waiting_at_end"] == 1 and summary["pickup_p99_ms_is_lower_bound"]
    assert summary["pickup_p99_ms"] > 20_000
    done = [(i, "enqueued", 1.0 + i * 0.1) for i in range(10)] + [(i, "claimed", 1.05 + i * 0.1) for i in range(10)]
    summary = _synthetic(done, [(0, 10, 1_000_000)]).results["summary"]
    assert summary["jobs_waiting_at_end"] == 0 and not summary["pickup_p99_ms_is_lower_bound"]
    assert summary["pickup_p99_ms"] == pytest.approx(50.0, abs=1)


def test_jobs_the_library_numbered_alike_fail_the_run_s_check():
    """Two calls of the arrivals that numbered their jobs from 0 both: the audit holds ten enqueues of five
    numbers, where the arrivals sent ten jobs."""
    rows = [(i % 5, "enqueued", 1.0 + i * 0.1) for i in range(10)] + [(i, "claimed", 2.5 + i) for i in range(5)]
    checks = _synthetic(rows, [(0, 5, 1_000_000), (0, 5, 1_000_000)]).checks
    assert not checks["every_job_enqueued_once"] and not checks["passed"]
    rows = [(i, "enqueued", 1.0 + i * 0.1) for i in range(10)] + [(i, "claimed", 2.5 + i) for i in range(10)]
    assert _synthetic(rows, [(0, 5, 1_000_000), (0, 5, 1_000_000)]).checks["every_job_enqueued_once"]


def test_a_library_that_is_not_installed_is_refused_in_one_line(monkeypatch):
    monkeypatch.setattr(soak.libraries, "version", lambda name: None)
    with pytest.raises(UserError, match="pgmq is not installed here"):
        soak.SoakParameters(library="pgmq")


def test_each_section_reads_its_own_arms_whichever_params_section_listed_them(arms):
    from types import SimpleNamespace
    from harness.article.sections import soak as soak_section
    listed = {"soak": SimpleNamespace(runs=(arms["none"][1],)), "library_soak": SimpleNamespace(runs=())}
    assert soak_section.load(listed, {}) is None  # a library's arm in the soak's section is not the soak's
    assert section.load({"library_soak": SimpleNamespace(runs=(arms["none"][1],))}, {}).summaries["library"].tolist() \
        == ["pgmq"]
