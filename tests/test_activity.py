"""Where the time goes, on a real server: what pg_stat_activity reports for a blocked, an idle and a busy backend."""

from __future__ import annotations

import os
import threading
import time

import psycopg
import pytest

from harness.server import activity
from harness.server.activity import ActivitySampler, SamplerError, classify, time_split, wait_shares

# the sampler's interval and a backend's CPU share and schedstat are timed: another test beside them would be counted
pytestmark = pytest.mark.serial

PREFIX = "claimrace-test-activity-"  # not the workers' prefix: other tests' connections stay out


@pytest.fixture
def row_table(db):
    """A one-row table every session can see (a temporary table would be private to one)."""
    with db.connect() as conn:
        conn.execute("DROP TABLE IF EXISTS activity_test_row")
        conn.execute("CREATE TABLE activity_test_row (id int PRIMARY KEY, value int NOT NULL)")
        conn.execute("INSERT INTO activity_test_row VALUES (1, 0)")
        yield "activity_test_row"
        conn.execute("DROP TABLE activity_test_row")


def shares_of(samples, pid: int) -> dict[str, float]:
    """One backend's wait shares, straight from the sampler's frame (NULLs and all)."""
    shares = wait_shares(samples[samples["pid"] == pid])
    assert shares, f"no samples of backend {pid}"
    return shares


def in_thread(target) -> tuple[threading.Thread, list]:
    errors: list = []

    def run():
        try:
            target()
        except BaseException as exc:  # handed to the test, which asserts on it
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, errors


def test_a_blocked_update_is_sampled_as_a_row_or_transaction_lock(db, row_table):
    holder = db.connect(application_name="claimrace-test-holder", autocommit=False)
    waiter = db.connect(application_name=f"{PREFIX}waiter")
    waiter_pid = waiter.pgconn.backend_pid
    try:
        waiter.execute("SET lock_timeout = '10s'")  # bounded even if the holder never lets go
        holder.execute(f"UPDATE {row_table} SET value = 1 WHERE id = 1")  # holds the row, uncommitted
        thread, errors = in_thread(lambda: waiter.execute(f"UPDATE {row_table} SET value = 2 WHERE id = 1"))
        with ActivitySampler(db.url, prefix=PREFIX) as sampler:
            time.sleep(0.3)
        holder.rollback()
        thread.join(10)
        assert not thread.is_alive() and not errors
    finally:
        holder.close()
        waiter.close()
    shares = shares_of(sampler.samples(), waiter_pid)
    assert shares["Lock:transactionid"] + shares["Lock:tuple"] >= 0.8, shares  # the first sample may precede the wait
    assert sampler.stats()["error"] is None


def test_an_idle_connection_waits_for_the_client(db):
    with db.connect(application_name=f"{PREFIX}idle") as idle:
        with ActivitySampler(db.url, prefix=PREFIX) as sampler:
            time.sleep(0.15)
        shares = shares_of(sampler.samples(), idle.pgconn.backend_pid)
    assert shares["Client"] == 1.0, shares


def test_a_cpu_bound_query_is_sampled_as_cpu_and_its_cpu_time_grows(db):
    busy = db.connect(application_name=f"{PREFIX}busy")
    busy.execute("SET work_mem = '256MB'")  # generate_series stays in memory: no temp-file I/O waits
    pid = busy.pgconn.backend_pid
    before = activity.schedstat_snapshot([pid])
    deadline = time.monotonic() + 0.5

    def spin():
        while time.monotonic() < deadline:
            busy.execute("SELECT count(*) FROM generate_series(1, 3e6)")

    try:
        thread, errors = in_thread(spin)
        with ActivitySampler(db.url, prefix=PREFIX) as sampler:
            thread.join(30)
        assert not thread.is_alive() and not errors
        after = activity.schedstat_snapshot([pid])
    finally:
        busy.close()
    shares = shares_of(sampler.samples(), pid)
    assert max(shares, key=shares.get) == "CPU", shares
    if before[pid] is None:
        pytest.skip("the server's backends are not processes of this host: no schedstat")
    split = time_split(before, after, wall_ns=10**9)
    assert split["backends"] == 1
    assert split["cpu_ns"] > 50_000_000  # 0.5 s of counting is far more than 50 ms on a CPU
    assert split["timeslices"] > 0


def test_classify_covers_every_class():
    cases = {
        ("active", None, None): "CPU",
        ("fastpath function call", None, None): "CPU",
        ("active", "Lock", "tuple"): "Lock:tuple",
        ("active", "Lock", "transactionid"): "Lock:transactionid",
        ("active", "Lock", "relation"): "Lock:other",
        ("active", "Lock", "advisory"): "Lock:other",
        ("idle", "Client", "ClientRead"): "Client",
        ("active", "Client", "ClientWrite"): "Client",
        ("idle", None, None): "Client",
        ("idle in transaction", None, None): "Client",
        ("active", "LWLock", "BufferMapping"): "LWLock",
        ("active", "IO", "DataFileRead"): "IO",
        ("active", "IPC", "ProcArrayGroupUpdate"): "IPC",
        ("active", "Timeout", "PgSleep"): "Other",
        ("active", "BufferPin", "BufferPin"): "Other",
        (None, None, None): "Other",
    }
    assert {classify(*inputs) for inputs in cases} == set(activity.WAIT_CLASSES)
    for inputs, expected in cases.items():
        assert classify(*inputs) == expected, inputs


def test_wait_shares_are_shares_of_backend_samples():
    samples = [("active", None, None)] * 2 + [("active", "Lock", "transactionid"), ("idle", "Client", "ClientRead")]
    shares = wait_shares(samples)
    assert set(shares) == set(activity.WAIT_CLASSES)
    assert shares["CPU"] == 0.5 and shares["Lock:transactionid"] == 0.25 and shares["Client"] == 0.25
    assert sum(shares.values()) == pytest.approx(1.0)
    assert wait_shares([]) == {}
    every_class = [("active", None, None), ("active", "Lock", "tuple"), ("active", "Lock", "transactionid"),
                   ("active", "Lock", "relation"), ("idle", "Client", "ClientRead"),
                   ("active", "LWLock", "WALInsert"), ("active", "IO", "WALWrite"),
                   ("active", "IPC", "MessageQueueSend"), ("active", "Timeout", "PgSleep")]
    shares = wait_shares(every_class)
    assert all(share == pytest.approx(1 / 9) for share in shares.values())


def test_time_split_divides_by_wall_time_and_backends():
    before = {1: (100, 10, 1), 2: (0, 0, 0), 3: None, 4: (50, 0, 1)}
    after = {1: (600, 210, 5), 2: (300, 100, 2), 3: (1, 1, 1)}  # 3 unreadable before, 4 gone
    split = time_split(before, after, wall_ns=1000)
    assert split["backends"] == 2 and split["cpu_ns"] == 800 and split["run_delay_ns"] == 300
    assert split["running_share"] == pytest.approx(0.4) and split["runnable_share"] == pytest.approx(0.15)
    assert time_split({1: None}, {1: None}, 1000)["running_share"] is None  # a remote server


def test_read_schedstat_of_this_process_and_of_no_process():
    own = activity.read_schedstat(os.getpid())
    assert own is not None and own[0] > 0
    assert activity.read_schedstat(2**31 - 1) is None  # above any pid_max


def test_backend_pids_and_locality(db):
    with db.connect(application_name=f"{PREFIX}a") as a, db.connect(application_name="claimrace-other") as other:
        pids = activity.backend_pids(other, PREFIX)
        assert pids == [a.pgconn.backend_pid]
        if db.source == "embedded":
            assert activity.server_is_local(other)


def test_the_sampler_stops_promptly_and_leaves_no_thread(db):
    sampler = ActivitySampler(db.url, prefix=PREFIX).start()
    time.sleep(0.05)
    began = time.monotonic()
    sampler.stop()
    assert time.monotonic() - began < 1.0
    assert not sampler.running and sampler._conn.closed

    with pytest.raises(ValueError, match="inside"):
        with ActivitySampler(db.url, prefix=PREFIX) as failing:
            time.sleep(0.05)
            raise ValueError("raised inside the block")
    assert not failing.running and failing._conn.closed
    assert failing.stats()["samples"] > 0


def test_a_lost_sampler_connection_is_reported_not_hung(db):
    with db.connect() as admin:
        with pytest.raises(SamplerError, match="sampler failed"):
            with ActivitySampler(db.url, prefix=PREFIX) as sampler:
                time.sleep(0.05)
                admin.execute("SELECT pg_terminate_backend(%s)", [sampler.backend_pid])
                deadline = time.monotonic() + 5
                while sampler.running and time.monotonic() < deadline:
                    time.sleep(0.01)
    assert not sampler.running
    assert isinstance(sampler.error, psycopg.Error)
    assert sampler.stats()["error"]


def test_the_achieved_interval_is_near_ten_milliseconds(db):
    with ActivitySampler(db.url, prefix=PREFIX) as sampler:
        time.sleep(0.5)
    stats = sampler.stats()
    assert stats["samples"] >= 10
    assert stats["interval_ms_median"] < 30  # loose: two shared cores
    assert stats["query_ms_median"] < stats["interval_ms_median"]
    assert stats["sampler_thread_cpu_ms"] > 0  # its cost is reported, not hidden
    if db.source == "embedded":
        assert stats["sampler_backend_cpu_ms"] > 0


def test_one_wait_events_share_of_the_samples():
    samples = activity.samples_frame(seqs=[0, 0, 1, 1], times=[0, 0, 1, 1], pids=[1, 2, 1, 2],
                                     states=["active"] * 4, types=["LWLock", "Client", "LWLock", None],
                                     events=["BufferContent", "ClientRead", "WALWrite", None])
    assert activity.event_share(samples, "LWLock", "BufferContent") == 0.25
    assert activity.event_share(samples, "IO", "DataFileRead") == 0.0
    assert activity.event_share(activity.samples_frame(), "LWLock", "BufferContent") is None
