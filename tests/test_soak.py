"""The soak: a queue that runs with jobs arriving on schedule while a transaction holds the horizon. The command's
refusals, and short real runs on the real server, in one pool: a pinned horizon is seen to keep the dead rows, a
hold long enough fails the queue, a run in phases is judged phase by phase, and nothing outlives the command (the
verdict rule on synthetic series is tests/test_soak_rule.py's)."""

from __future__ import annotations

import dataclasses
import threading
import time

import pandas as pd
import psutil
import pytest

from conftest import assert_held_keeps_dead_rows, run_cli, soak_runs, survivors_of_sigkill
from harness.article.sections import soak as section
from harness.article.sections import soak_arms
from harness.experiments.soak import outcomes as rule
from harness.errors import UserError
from harness.experiments.soak import measure as soak
from harness.storage import Run

@pytest.mark.parametrize("args, said", [
    (dict(rate=0.5), "rate must be between 1 and 5000 jobs/s, not 0.5"),
    (dict(workers=17), "workers must be between 1 and 16, not 17"),
    (dict(seconds=5), "seconds must be between 20 and 14400, not 5"),
    (dict(pin_from=5, pin_to=10, seconds=30), "the pin must start at 10 s or later"),
    (dict(pin_from=20, pin_to=15), "the pin must start at 10 s or later and end before the run's 120 s, after it"),
    (dict(pin_from=20, pin_to=130), "end before the run's 120 s"),
    (dict(rate=5000, seconds=14400), "make more than 5,000,000 jobs"),
    (dict(holder="vacuum_full"), "holder must be one of none, repeatable_read, idle_in_transaction, analytics"),
    (dict(rate="0%"), "a rate as a share of the sustained rate must be between 1% and 200%, not 0%"),
    (dict(rate="fast"), "rate must be jobs per second, or a share of the sustained rate like 50%, not 'fast'"),
    (dict(hold_until_failure=True, hold_max=0), "hold max must be between 10 s (the rule's 10 s of backlog, past "
                                                "the 5 s warm-up) and the 80 s the run has after --pin-from, not 0"),
    (dict(hold_until_failure=True, hold_max=5), "hold max must be between 10 s"),
    (dict(hold_until_failure=True, hold_max=81), "the 80 s the run has after --pin-from, not 81"),
    (dict(hold_until_failure=True, pin_from=5), "the hold must start at 10 s or later"),
    (dict(hold_until_failure=True, library="pgmq", hold_max=20), "--hold-until-failure is not raced with --library"),
    (dict(holder="analytics", analytics_s=0.5), "analytics s must be between 1 and 600, not 0.5"),
    (dict(holder="analytics", analytics_sessions=0), "analytics sessions must be between 1 and 8, not 0"),
    (dict(holder="analytics", analytics_sessions=9), "analytics sessions must be between 1 and 8, not 9"),
    (dict(vacuum_every=0.5), "vacuum every must be 0 (none) or between 1 and 60 s, not 0.5"),
    (dict(vacuum_every=61), "vacuum every must be 0 (none) or between 1 and 60 s, not 61"),
    (dict(vacuum_every=5, library="pgmq", holder="none"), "--vacuum-every sets the soak's own table: it is not raced "
                                                           "with --library"),
])
def test_a_soak_out_of_bounds_is_refused_in_one_line(args, said):
    with pytest.raises(UserError, match=said.replace("(", r"\(").replace(")", r"\)")):
        soak.SoakParameters(**args)


@pytest.mark.parametrize("args, said", [
    (("--pin-from", "50", "--pin-to", "40"), "the pin must start"),
    (("--hold-until-failure", "--hold-max", "0"), "hold max must be between 10 s"),
    (("--hold-until-failure", "--hold-max", "500", "--seconds", "120"), "the 80 s the run has after --pin-from"),
])
def test_the_command_refuses_a_bad_pin_or_hold_in_one_line_before_anything_starts(tmp_path, args, said):
    done = run_cli("soak", *args, "--data-dir", str(tmp_path))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert said in done.stderr and not (tmp_path / "soak").exists()


# The rule's sensitivity on real runs. A positive control: a hold long enough that the arm must fall behind (the
# indexed history's claim walks every index entry the hold keeps, so its cost grows with the hold, past the 2.5 ms
# of headroom 2 workers have per job at 400 jobs/s of 2 ms; at 300 jobs/s it fell behind 28 s into a hold, the
# rule's 10 s then past a 45 s cap). A negative control: nothing held on the table whose claim stays flat (finished
# jobs deleted), at a load a loaded machine keeps up with: beside the held arm and the suite's other workers, it fell
# behind at 400 jobs/s (three workers) and at 250 (four) in fresh-clone suites of 2026-12-07, the machine's doing,
# not a hold's; at 120, its 2 ms jobs keep its two workers busy an eighth of the time. So it shows
# that the rule does not fire with nothing held, not that 400 jobs/s alone keeps up here: the held arm's fall is
# read against its own seconds before the hold, as the rule reads every arm.
UNTIL_FAILURE = ["--workers", "2", "--job-ms", "2", "--seconds", "100", "--pin-from", "10",
                 "--hold-until-failure", "--hold-max", "45", "--json", "--quiet"]


UNTIL_FAILURE_ARMS = {
    "held": ["--shape", "history_indexed", "--holder", "repeatable_read", "--rate", "400", *UNTIL_FAILURE],
    "none": ["--shape", "delete", "--holder", "none", "--rate", "120", *UNTIL_FAILURE]}


@pytest.fixture(scope="module")
def until_failure(tmp_path_factory):
    """The held run at 400 jobs/s and its control, the two side by side alone: in the pool beside other soaks and the
    tiny build's races, the held run's backlog grew before its claim slowed in a fresh-clone suite (2026-12-07)."""
    return soak_runs(tmp_path_factory.mktemp("soak-until-failure"), UNTIL_FAILURE_ARMS, 2)


def test_a_hold_long_enough_fails_the_queue_and_is_released_then_and_its_control_runs_to_the_cap(until_failure):
    (held, stored), (none, control) = until_failure["held"], until_failure["none"]
    # what the rule says, whether or not the run carried its load on a machine the other tests share
    assert stored.summary["verdict_if_judged"] in rule.FAILED and held["released_because"] == "fell_behind", held
    # what the hold kept when it fell is recorded: none where the suite's load had the queue behind as the hold began
    # (0 s into it, once, in a fresh-clone suite of 2026-12-07 at four workers with other work on the machine)
    assert 0 <= held["seconds_to_fall_behind"] < 45 and held["unremovable_at_fall_behind"] is not None, held
    # its claim slowed too, before or after: on a machine the other tests share, workers waiting for a CPU can let
    # the backlog grow first (slowed at 12 s, behind at 8 s, in one fresh-clone suite of 2026-12-06)
    assert held["seconds_to_slow"] is not None and held["seconds_to_slow"] >= 0, held
    # released once the rule's run of seconds behind was seen live, then watched for the recovery
    assert held["seconds_to_fall_behind"] + rule.BEHIND_RUN_S <= held["pin_s"] <= held["seconds_to_fall_behind"] + \
        rule.BEHIND_RUN_S + 3, held
    assert list(stored.table("holder")["event"]) == ["pinned", "released"]
    # the model's slope: a claim gains time with every version the hold keeps, fitted on the hold's seconds before
    # the fall (none where it fell before FIT_MIN_S: the suite's load can hasten it); a control keeps none
    if held["seconds_to_fall_behind"] >= rule.FIT_MIN_S:
        assert held["claim_ms_per_100k"] is not None and held["claim_ms_per_100k"] > 0, held
    else:
        assert held["claim_ms_per_100k"] is None, held
    assert none["claim_ms_per_100k"] is None
    assert control.summary["verdict_if_judged"] not in rule.FAILED and none["seconds_to_fall_behind"] is None, none
    assert none["released_because"] == "hold_max" and none["pin_s"] == pytest.approx(45, abs=1.5)
    # nothing to recover from: it ends 10 s past the cap, for an onset begun in the hold's last seconds to be seen
    assert control.summary["ended_s"] == pytest.approx(65, abs=2)
    # the sampler kept a sample of the table for every second, and the claim's buffers while it was slow
    samples = stored.table("samples")
    assert soak.soak_sampler.covered(samples, stored.summary["ended_s"]) and samples["buffers_per_claim"].notna().sum() >= 3
    # and how the claim's read reached the table, on every row with an EXPLAIN: its plan, read from the statistics
    explained = samples[samples["buffers_per_claim"].notna()]
    assert explained["claim_scan"].str.contains("Scan").all(), explained["claim_scan"]


def test_a_held_arm_that_fell_behind_asks_for_its_mitigation_from_its_stored_run(until_failure):
    """The follow-up through the store: a section of this run's arm and its control, asking for the idle timeout
    where a held arm failed, asks for it once this run is stored; the control alone asks for nothing."""
    from harness.experiments.soak.sweep import SoakSweep
    (_, held), (_, control) = until_failure["held"], until_failure["none"]
    request = SoakSweep.from_mapping({
        "rate": 400, "workers": 2, "job_ms": 2, "seconds": 100, "pin_from": 10, "hold_until_failure": True,
        "hold_max": 45, "mitigate": ["idle_timeout"],
        "arms": [{"shape": "history_indexed", "holder": "none"},
                 {"shape": "history_indexed", "holder": "repeatable_read"}]}, "soak")
    wanted = request.follow_up([held.summary, control.summary])
    assert [(p.shape, p.holder, p.mitigation, p.rate) for p in wanted] == [
        ("history_indexed", "repeatable_read", "idle_timeout", 400.0)]
    assert request.follow_up([control.summary]) == []  # the held arm not stored: nothing known to have failed


# Every arm below runs once, all side by side, each on its own embedded server: the tests after it read them.
ARMS = {
    "repeatable_read": ["--holder", "repeatable_read", "--shape", "history"],
    "none": ["--holder", "none", "--shape", "history"],
    "indexed_none": ["--holder", "none", "--shape", "history_indexed"],  # C9's other control
    "analytics": ["--holder", "analytics", "--shape", "delete", "--strategy", "guarded"],
    "idle_in_transaction": ["--holder", "idle_in_transaction", "--shape", "history_indexed"],
    "disk_on": ["--holder", "none", "--storage", "disk", "--synchronous-commit", "on"],
    "disk_off": ["--holder", "none", "--storage", "disk", "--synchronous-commit", "off"],
    "idle_timeout": ["--holder", "idle_in_transaction", "--mitigation", "idle_timeout"],
    "statement_timeout": ["--holder", "analytics", "--mitigation", "statement_timeout"],
    "transaction_timeout": ["--holder", "repeatable_read", "--mitigation", "transaction_timeout",
                            "--pg-version", "18"],
    "batch": ["--holder", "none", "--shape", "history_indexed", "--strategy", "skip_locked_batch"],
    "vacuumed_held": ["--holder", "repeatable_read", "--shape", "history_indexed", "--vacuum-every", "2"],
}
COMMON = ["--rate", "40", "--workers", "2", "--seconds", "26", "--pin-from", "10", "--pin-to", "20", "--json",
          "--quiet"]


# Three sessions of analytics statements of 4 s (PlanetScale's case, at 120 s, in full.yml; two of 20 s by default),
# staggered and one at a time: 30 s each.
ANALYTICS_ARMS = {f"analytics_{mitigation}": ["--holder", "analytics", "--analytics-s", "4", "--analytics-sessions", "3",
                                              "--mitigation", mitigation,
                                              "--rate", "20", "--workers", "2", "--seconds", "30", "--pin-from",
                                              "10", "--pin-to", "26", "--json", "--quiet"]
                  for mitigation in ("none", "one_analytics")}
BATCH = 5  # runs side by side at most: each has its own server, and the machine has two cores


@pytest.fixture(scope="module")
def soaks(tmp_path_factory):
    """The light soak runs this module reads, in one pool: the run in phases and the analytics first, then the arms
    (about half a minute each) as places free up. {name: (its JSON row, its stored Run)}; a command that
    fails or hangs is killed with the rest."""
    commands = {"phased": PHASED} | ANALYTICS_ARMS
    commands |= {arm: [*ARMS[arm], *COMMON] for arm in ARMS}
    return soak_runs(tmp_path_factory.mktemp("soaks"), commands, BATCH)


@pytest.fixture(scope="module")
def arms(soaks):
    """{arm: (its JSON row, its stored Run)}."""
    return {arm: soaks[arm] for arm in ARMS}


def test_every_arm_claims_each_job_once_at_the_rate_asked(arms):
    for arm, (row, _) in arms.items():
        assert row["duplicate_jobs"] == 0 and row["jobs_arrived"] >= 40 * 24 and row["verdict"] in rule.VERDICTS, arm
        assert abs(row["arrived_per_s_before"] - 40) <= 4 and not row["arrivals_behind"], (arm, row)


def test_a_pinned_horizon_keeps_the_dead_rows_and_the_control_lets_them_go(arms):
    """A REPEATABLE READ snapshot held from 10 to 20 s: the oldest snapshot's age grows with the pin, and the dead
    rows of the finished jobs pile up during it; the control (no holder) on the same table sees neither. Two
    staggered analytics sessions over a table that deletes its finished jobs, claimed by the original's guarded
    claim, hold the horizon for the whole pin; so does an idle transaction, by its transaction id alone."""
    assert_held_keeps_dead_rows(*arms["repeatable_read"], arms["none"][0])
    analytics, stored = arms["analytics"]
    assert analytics["horizon_age_max_s"] >= 8 and analytics["strategy"] == "guarded", analytics
    # the second session's turn, half a statement later, comes only in a pin longer than this one
    statements = stored.table("holder")
    assert list(statements["event"]) == ["pinned", "released"] and statements["session"].tolist() == [0, 0]
    horizon = stored.table("samples")
    assert horizon[(horizon["t_s"] >= 11) & (horizon["t_s"] < 19.5)]["horizon_age_s"].notna().all(), horizon
    assert arms["idle_in_transaction"][0]["horizon_age_max_s"] >= 8, arms["idle_in_transaction"][0]


def test_a_vacuum_every_few_seconds_lets_the_dead_rows_go_until_a_hold_keeps_them(arms):
    """Vacuumed every 2 s from the run's start, each pass kept: before the hold, the finished jobs' dead rows go at
    each pass (the control's part, in the run's own seconds); a REPEATABLE READ snapshot held from 10 to 20 s keeps
    them through every pass."""
    held, stored = arms["vacuumed_held"]
    passes = stored.table("vacuums")
    # a pass every 2 s of the 26 s run, beside four other soaks on two CPUs: a late one skips a turn
    assert held["vacuum_every"] == 2 and held["vacuum_passes"] >= 9 and not held["vacuum_failed"], held
    assert passes["error"].isna().all() and passes["t_s"].diff().median() == pytest.approx(2, abs=0.3), passes
    samples = stored.table("samples")
    assert samples["vacuum_count"].max() - samples["vacuum_count"].min() >= 8, samples
    assert_held_keeps_dead_rows(held, stored, arms["indexed_none"][0])
    before = samples[(samples["t_s"] >= 6) & (samples["t_s"] < 10)]["n_dead_tup"].max()
    during = samples[(samples["t_s"] >= 15) & (samples["t_s"] < 20)]["n_dead_tup"].max()
    assert before < during / 2, samples  # a few seconds of finished jobs between passes, then all of the hold's
    assert "vacuumed every 2 s" in soak_arms.arm_label(soak_arms.load_runs([stored]).summaries.iloc[0])


def test_each_timeout_ends_the_holder_it_is_set_against(arms):
    """idle_in_transaction_session_timeout ends the idle transaction, transaction_timeout (PostgreSQL 18) the
    REPEATABLE READ one, each 5 s into the pin; statement_timeout cancels each analytics statement at 5 s."""
    for arm in ("idle_timeout", "transaction_timeout"):
        row, stored = arms[arm]
        events = stored.table("holder")
        assert list(events["event"]) == ["pinned", "ended_early"], (arm, events)
        assert 14 <= events["t_s"].iloc[1] <= 17, (arm, events)
        assert row["horizon_age_max_s"] < 7 and row["mitigation"] == arm, (arm, row)
    assert arms["transaction_timeout"][0]["pg_version"] == 18
    row, stored = arms["statement_timeout"]
    events = stored.table("holder")
    assert (events["event"] == "statement_cancelled").sum() >= 1 and row["horizon_age_max_s"] < 7, (row, events)


def test_no_soak_process_or_server_outlives_the_command_killed_with_sigkill_mid_pin(tmp_path):
    """Killed 3 s into an idle-in-transaction pin: its workers, its arrivals and the server with the holder's
    session in it all end. The clock is the forked soak processes' (started a second before the run's own), not
    the command's, whose server takes a while to start."""
    first_seen: list[float] = []

    def command_line(process) -> str:
        try:
            return " ".join(process.cmdline())
        except psutil.Error:  # gone, or a zombie
            return ""

    def mid_pin(harness):
        children = harness.children(recursive=True)
        forked = [child for child in children if "soak" in command_line(child)]
        if forked and not first_seen:
            first_seen.append(time.monotonic())
        return children if first_seen and time.monotonic() - first_seen[0] >= 14 else []

    assert survivors_of_sigkill(["soak", "--holder", "idle_in_transaction", "--seconds", "40", "--pin-from", "10",
                                 "--pin-to", "30", "--rate", "20", "--workers", "2", "--quiet", "--data-dir",
                                 str(tmp_path)], mid_pin, 120) == []


def test_a_run_on_a_disk_times_its_flushes_and_synchronous_commit_off_flushes_less(arms):
    """Data directories on a disk: every commit waits for its WAL flush, and the server times each
    (track_wal_io_timing); with synchronous_commit off the commits do not wait, and far fewer flushes are made per
    job."""
    per_job = {}
    for mode in ("on", "off"):
        row, stored = arms[f"disk_{mode}"]
        assert row["storage"] == "disk" and row["synchronous_commit"] == mode, row
        assert row["wal_sync_ms_per_sync"] is not None and row["wal_sync_ms_per_sync"] > 0, row
        assert stored.summary["filesystem"] not in ("tmpfs", "ramfs", None), stored.summary
        assert not stored.manifest["server"]["tmpfs"] and stored.manifest["server"]["storage"] == "disk"
        # the same disk's fdatasync by pg_test_fsync, taken as its server started
        assert 0 < row["pg_test_fsync_ms"] < 1000 and stored.manifest["server"]["pg_test_fsync"]["tool"], row
        per_job[mode] = stored.summary["wal_syncs"] / row["jobs_claimed"]
    assert per_job["off"] < per_job["on"] / 2, per_job
    # on tmpfs the server does not time its flushes
    assert arms["none"][0]["wal_sync_ms_per_sync"] is None and arms["none"][0]["storage"] == "tmpfs"
    assert arms["none"][0]["pg_test_fsync_ms"] is None  # tested on a disk only


def test_a_batch_claim_runs_each_of_its_jobs_once_and_its_statement_serves_them_all(arms):
    """skip_locked_batch: up to soak.BATCH jobs a statement, each run and finished in turn; the jobs of one
    statement share its return time and its statement time."""
    row, stored = arms["batch"]
    assert row["strategy"] == "skip_locked_batch" and row["duplicate_jobs"] == 0, row
    claims = stored.table("claims")
    per_statement = claims.groupby(["worker", "returned_ns"]).size()
    assert per_statement.max() <= soak.BATCH and len(claims) == row["jobs_claimed"], per_statement
    assert stored.manifest["procedure"]["claim"].count("LIMIT 10 FOR UPDATE SKIP LOCKED") == 1


def test_a_storage_is_asked_of_the_embedded_server_only(db):
    done = run_cli("soak", "--storage", "disk", "--seconds", "20", "--pin-from", "10", "--pin-to", "12",
                   env_extra={"DATABASE_URL": db.url})
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "storage disk needs the embedded server (a url server keeps its own storage)" in done.stderr


def test_a_holder_ended_from_outside_ends_the_pin_early_and_the_run_says_when_at_a_share_of_the_sustained_rate(
        db, tmp_path):
    from harness.experiments import registry

    def end_the_holder():
        deadline = time.monotonic() + 60
        with db.connect() as conn:
            while time.monotonic() < deadline:
                ended = conn.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "
                                     "application_name = 'claimrace-soak-holder-0' AND backend_xmin IS NOT NULL "
                                     "AND now() - xact_start > interval '2 seconds'").fetchone()[0]
                if ended:
                    return
                time.sleep(0.2)

    killer = threading.Thread(target=end_the_holder, daemon=True)
    killer.start()
    # at half the rate the workers sustain, measured first on the same table (the holder only comes after)
    [run] = registry.measure("soak", soak.SoakParameters(rate="50%", workers=2, seconds=24, pin_from=10, pin_to=20),
                             tmp_path, db, progress=False)
    killer.join(5)
    summary, holder = Run(run).summary, Run(run).table("holder")
    assert summary["rate_asked"] == "50%" and summary["sustained_rate"] > 20, summary
    assert summary["rate"] == pytest.approx(summary["sustained_rate"] / 2)
    assert not summary["arrivals_behind"] and summary["claimed_per_s_before"] >= 0.9 * summary["rate"], summary
    assert list(holder["event"]) == ["pinned", "ended_early"], holder
    assert 11.5 <= summary["pin_ended_early_s"] <= 16, summary
    assert summary["horizon_age_max_s"] < 7, summary  # the pin did not last its 10 s


def test_a_partitioned_table_drops_its_finished_partitions_and_keeps_making_new_ones(db, tmp_path, monkeypatch):
    """Partitions of 500 ids and a retention of 500 here (pgmq's 10,000 and 100,000 would take minutes at this
    rate): the oldest is dropped once past it with every job in it finished, new ones are made ahead of the ids,
    and no job is lost or claimed twice."""
    from harness.experiments import registry
    from harness.experiments.soak import partitions as soak_partitions

    monkeypatch.setattr(soak_partitions, "PARTITION_IDS", 500)
    monkeypatch.setattr(soak_partitions, "RETENTION_IDS", 500)
    monkeypatch.setattr(soak_partitions, "MAINTENANCE_S", 1.0)
    [run] = registry.measure("soak", soak.SoakParameters(shape="partitioned", rate=100, workers=2, seconds=22,
                                                         pin_from=10, pin_to=14, holder="none"),
                             tmp_path, db, progress=False)
    stored = Run(run)
    summary, events = stored.summary, stored.table("partitions")
    assert summary["duplicate_jobs"] == 0 and summary["jobs_claimed"] >= summary["jobs_arrived"] - 10, summary
    dropped = events[events["event"] == "dropped"]["partition"].tolist()
    assert summary["partitions_dropped"] == len(dropped) >= 2 and dropped[:2] == ["jobs_p0", "jobs_p1"], events
    assert (events["event"] == "made").sum() >= 2, events
    with db.connect() as conn:
        left = [r[0] for r in conn.execute("SELECT inhrelid::regclass::text FROM pg_inherits "
                                           "WHERE inhparent = 'claimrace.jobs'::regclass")]
    assert "claimrace.jobs_p0" not in left and len(left) >= soak_partitions.PREMAKE, left


def test_the_maintenance_keeps_a_partition_with_a_pending_job_and_gives_up_a_drop_a_reader_blocks(db, monkeypatch):
    from harness.experiments.soak import partitions as parts
    from harness.server import schema

    monkeypatch.setattr(parts, "PARTITION_IDS", 10)
    monkeypatch.setattr(parts, "RETENTION_IDS", 10)
    with db.connect() as conn:
        schema.ensure_schema(conn)
        schema.drop_owned(conn)
        made = parts.create_table(conn, 0)
        conn.execute(f"INSERT INTO {parts.JOBS} (status) SELECT 'done' FROM generate_series(1, 25)")
        conn.execute(f"UPDATE {parts.JOBS} SET status = 'pending' WHERE id = 12")  # in jobs_p1
        conn.execute(f"SET lock_timeout = '{parts.LOCK_TIMEOUT_MS}ms'")
        upkeep = parts.Maintenance(db.url, time.monotonic(), made)
        with db.connect() as reader:  # a long reader of the table: its lock blocks the DROP
            reader.execute("BEGIN")
            reader.execute(f"SELECT count(*) FROM {parts.JOBS}")
            upkeep.run_once(conn)
            reader.execute("COMMIT")
        # the new partitions are attached beside the reader; the drop waits for it, and is given up
        assert [(e["event"], e["partition"]) for e in upkeep.events] == [
            ("made", "jobs_p5"), ("made", "jobs_p6"), ("dropped_waited", "jobs_p0")], upkeep.events
        upkeep.run_once(conn)
        # p0 goes; p1 holds a pending job and stays, and so does every newer one
        assert [(e["event"], e["partition"]) for e in upkeep.events][3:] == [("dropped", "jobs_p0")]
        assert upkeep.partitions[0] == 1
        schema.drop_owned(conn)


def test_analytics_one_at_a_time_free_the_horizon_between_statements(soaks):
    """Three sessions of statements of 4 s here: staggered by a third of one, a statement is always open and the
    oldest snapshot is never younger than two thirds of one; one at a time, each waits for the one before, and the
    horizon frees between them."""
    ages = {}
    for mitigation in ANALYTICS_ARMS:
        row, stored = soaks[mitigation]
        assert stored.manifest["procedure"]["analytics_s"] == 4.0 and row["mitigation"] == mitigation.removeprefix(
            "analytics_"), row
        assert stored.manifest["procedure"]["analytics_sessions"] == 3 and row["analytics_sessions"] == 3, row
        pinned = stored.table("holder").query("event == 'pinned'").sort_values("session")
        assert list(pinned["session"]) == [0, 1, 2], pinned
        # each session a third of a statement after the one before, or later (a loaded machine wakes it late)
        assert all(t >= 10 + k * 4 / 3 - 0.05 for k, t in enumerate(pinned["t_s"])), pinned
        samples = stored.table("samples")
        inside = samples[(samples["t_s"] >= 13) & (samples["t_s"] < 25.5)]
        ages[mitigation] = inside["horizon_age_s"].fillna(0.0)
    assert ages["analytics_none"].min() >= 1.5, ages["analytics_none"].tolist()
    assert ages["analytics_one_analytics"].min() < 1.0, ages["analytics_one_analytics"].tolist()


def test_the_autovacuum_mitigation_sets_the_table_and_every_partition_made_later(db):
    from harness.experiments.soak import partitions as soak_partitions

    with db.connect() as conn:
        soak.create_table(conn, "history", 0, "autovacuum")
        [options] = conn.execute("SELECT reloptions FROM pg_class WHERE oid = 'claimrace.jobs'::regclass").fetchone()
        assert "autovacuum_vacuum_scale_factor=0" in options and "autovacuum_vacuum_cost_delay=0" in options
        made = soak.create_table(conn, "partitioned", 0, "autovacuum")
        upkeep = soak_partitions.Maintenance(db.url, time.monotonic(), made, soak.autovacuum_options("autovacuum"))
        conn.execute("SELECT setval('claimrace.jobs_id_seq', %s)", [soak_partitions.PARTITION_IDS * 2])
        conn.execute("INSERT INTO claimrace.jobs (status) VALUES ('pending')")
        upkeep.run_once(conn)
        rows = conn.execute("SELECT c.relname, c.reloptions FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                            "WHERE i.inhparent = 'claimrace.jobs'::regclass ORDER BY c.relname").fetchall()
        names = [name for name, _ in rows]
        assert {"jobs_p5", "jobs_p6"} <= set(names), names  # made by the pass, ahead of the newest id
        assert all("autovacuum_vacuum_threshold=500" in (o or []) for _, o in rows), rows
        assert soak.autovacuum_options("none") == ""


def test_the_article_section_reads_the_stored_arms_each_against_its_reference(arms):
    """Through the store: each held arm is read against its control, a mitigated one against the same arm without
    it where stored, and C9 is decided from the two controls that keep their history, in agreement with their
    seconds; the tables and the chart are made from the runs."""
    from harness.article.sections import soak as section, soak_arms, soak_charts
    from harness.experiments.registry import asked
    from harness.experiments.soak.sweep import SoakSweep

    names = ["none", "repeatable_read", "indexed_none", "idle_in_transaction", "disk_on"]
    loaded = section.load({"soak": asked("soak", SoakSweep(), [arms[name][1].path for name in names])}, {})
    runs = loaded.summaries
    assert section.reference(runs, 1) == 0 and section.reference(runs, 0) is None
    assert section.reference(runs, 4) == 0  # disk_on, nothing held: the same arm off the disk
    assert section.reference(runs, 3) == 2  # the idle transaction over the indexed table: its control
    c9, _ = section.findings({"soak": loaded})
    until = min(float(runs.iloc[0]["pin_from"]), float(runs.iloc[2]["pin_from"]))  # the seconds C9 compares
    cost = section.claim_cost(section.compared(loaded.series[0], until), section.compared(loaded.series[2], until))
    judged = "not_judged" not in (runs.iloc[0]["verdict"], runs.iloc[2]["verdict"])  # five arms share two cores
    expected = {"slower": "corrected", "alike": "confirmed", "faster": "confirmed",
                "overlap": "not_distinguishable"}[cost] if judged else "not_measured"
    assert c9.parts[0] == ("a table starting empty", expected), (c9, cost)
    table = section.verdict_table({"soak": loaded})  # a row per held arm, its control's onsets beside it
    assert table.count("<tr>") == 1 + 2 and "repeatable read" in table and "idle in transaction" in table
    for held, control in ((1, 0), (3, 2)):  # each row's control cell is its control run's onsets
        said = f"{soak_arms.onset_text(runs, [control], 'seconds_to_slow')} / " \
               f"{soak_arms.onset_text(runs, [control], 'seconds_to_fall_behind')}"
        assert said in table, (said, table)
    other = section.other_table({"soak": loaded})  # the disk arm, beside the same arm off the disk
    assert other.count("<tr>") == 1 + 1 and "on a disk" in other and "history, nothing (control)" in other
    assert "brandur.org" in section.anchors_table({"soak": loaded})
    timeline = soak_charts.timelines(loaded)
    assert set(timeline["run"]) == {"held", "control"} and len(set(timeline["arm"])) == 2  # each held arm
    soak_charts.soak_timeline_chart(timeline).to_dict()


# One real run in phases (harness.experiments.soak.phases), stored, judged and shown on the page.
PHASED = ["--shape", "delete", "--holder", "repeatable_read", "--workers", "2", "--job-ms", "20", "--rate", "30",
          "--phases", "w=warmup:5,base=clean:6,h=hold:10,back=recovery:6,over=ramp(300):10,tail=recovery:6", "--json"]


@pytest.fixture(scope="module")
def phased(soaks):
    return soaks["phased"]


def test_a_run_in_phases_arrives_at_each_phase_s_rate_holds_in_its_hold_and_is_judged_phase_by_phase(phased):
    """Two workers on 20 ms jobs claim about 100 jobs/s: 30 a second keeps up held for 10 s, and a ramp to 300 falls
    behind and is not back within the 6 s after it."""
    row, stored = phased
    judged = {p["label"]: p for p in row["phase_results"]}
    assert row["duplicate_jobs"] == 0 and row["seconds"] == 43 and row["pin_from"] == 11 and row["pin_s"] == 10
    assert abs(judged["base"]["arrived_per_s"] - 30) <= 3 and abs(judged["over"]["arrived_per_s"] - 300) <= 30, judged
    holder = stored.table("holder")
    assert list(holder["event"]) == ["pinned", "released"] and 10.5 <= holder["t_s"].iloc[0] <= 12, holder
    assert 20.5 <= holder["t_s"].iloc[1] <= 22.5, holder
    # what the rule says, whether or not the run carried its load on a machine the other tests share
    assert judged["h"]["verdict_if_judged"] in (rule.HELD, rule.SLOWED) and judged["h"]["reference"] == "base"
    assert judged["back"]["verdict_if_judged"] == rule.RECOVERED, judged["back"]
    assert judged["over"]["verdict_if_judged"] == rule.FELL_BEHIND and judged["over"]["seconds_to_fall_behind"] <= 3
    assert judged["tail"]["verdict_if_judged"] == rule.NOT_RECOVERED, judged["tail"]


def test_the_page_shows_a_run_in_phases_a_row_per_phase_apart_from_the_arms(phased):
    _, stored = phased
    assert soak_arms.load_runs([stored]) is None  # not among the arms: the arms' tables read none of it
    again = soak_arms._phases_again(stored)
    loaded = soak_arms.Loaded((), pd.DataFrame(), {}, {}, {}, phased=(again,))
    rows = section.phase_rows(loaded)
    assert list(rows["phase"]) == ["w: warmup", "base: clean", "h: hold (repeatable read)", "back: recovery",
                                   "over: ramp", "tail: recovery"]
    over = rows.iloc[4]
    assert over["jobs/s"] == "300" and over["fell behind at"].endswith(" s") and "(against base)" in over["verdict"]
    assert rows.iloc[5]["recovered in"] == "not back in 6 s"
    assert "<table" in section.phases_table({"soak": loaded}) and section.phases_table({"soak": None}) == ""
    assert dataclasses.asdict(stored.parameters)["phases"] == tuple(PHASED[PHASED.index("--phases") + 1].split(","))
