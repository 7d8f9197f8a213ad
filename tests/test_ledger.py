"""The reaper's guarded UPDATE and the final ledger, against a real server, rows written by the service's own SQL."""

from __future__ import annotations

import datetime as dt
import json
import time

import pytest

from harness.config import SCHEMA
from harness.service import ledger, reaper
from harness.service.queries import queries_for
from harness.service.schema import create_run_queue


def _enqueue(conn, count: int) -> list[int]:
    q = queries_for("none")
    rows = conn.execute(q.enqueue, {"specs": [json.dumps({"n": i}) for i in range(count)],
                                    "secrets": [b"x"] * count,
                                    "enqueued_at": [dt.datetime.now(dt.timezone.utc)] * count}).fetchall()
    return [int(r[0]) for r in rows]


@pytest.fixture
def queue(conn):
    create_run_queue(conn)
    yield conn
    conn.execute(f"DROP TABLE IF EXISTS {SCHEMA}.runs, {SCHEMA}.run_flips, {SCHEMA}.finishes")


def _claim(conn, protocol, run_id, runner, lease_s=30.0):
    q = queries_for(protocol)
    row = conn.execute(q.claim_by_id, {"id": run_id, "runner": runner, "lease_s": lease_s}).fetchone()
    return None if row is None else int(row[7])  # the attempt: the token


def _finish(conn, protocol, run_id, runner, token):
    q = queries_for(protocol)
    return conn.execute(q.finish, {"id": run_id, "runner": runner, "token": token}).fetchone() is not None


def _heartbeat(conn, protocol, run_id, runner, token, lease_s):
    q = queries_for(protocol)
    return conn.execute(q.heartbeat, {"id": run_id, "runner": runner, "token": token,
                                      "lease_s": lease_s}).fetchone() is not None


def test_reaper_returns_only_expired_running_runs(queue):
    first, second, third, fourth = _enqueue(queue, 4)
    _claim(queue, "lease", first, "a", lease_s=0.1)       # expires
    _claim(queue, "lease", second, "b", lease_s=0.1)      # expires but is heartbeated in time
    token = _claim(queue, "lease", third, "c", lease_s=0.1)
    assert _finish(queue, "lease", third, "c", token)     # done before it expires
    time.sleep(0.05)
    assert _heartbeat(queue, "lease", second, "b", 1, 30.0)
    time.sleep(0.15)
    reaped = reaper.reap_expired(queue)
    assert reaped == [{"run": first, "runner": "a", "attempt": 1}]
    status = dict(queue.execute(f"SELECT id, status FROM {SCHEMA}.runs").fetchall())
    assert status == {first: "pending", second: "running", third: "done", fourth: "pending"}
    assert reaper.reap_expired(queue) == []  # nothing twice
    # the audit saw the flip back to pending
    assert queue.execute(f"SELECT count(*) FROM {SCHEMA}.run_flips WHERE run_id = %s AND new_status = 'pending'",
                         [first]).fetchone()[0] == 1


def test_reaper_thread_reaps_and_survives_a_terminated_backend(db, queue):
    from harness.server import faults

    (run,) = _enqueue(queue, 1)
    with reaper.Reaper(db.url, interval_s=0.05) as loop:
        time.sleep(0.2)
        faults.terminate_backends(queue, reaper.APPLICATION_NAME)
        _claim(queue, "lease", run, "a", lease_s=0.2)
        deadline = time.monotonic() + 5
        while loop.count == 0:
            assert time.monotonic() < deadline
            time.sleep(0.02)
    assert loop.errors >= 1 and loop.reaps[0]["run"] == run
    assert queue.execute(f"SELECT status FROM {SCHEMA}.runs WHERE id = %s", [run]).fetchone()[0] == "pending"


def _events(*rows):
    return [{"t": i, "runner": r, "event": e, "run": run, "token": tok} for i, (r, e, run, tok) in enumerate(rows)]


def test_ledger_classes_from_the_database(queue):
    """Every class and mark, from rows the service's statements wrote."""
    once, twice_unfenced, stuck, lost, fenced = _enqueue(queue, 5)
    # once: claimed and finished by one runner
    token = _claim(queue, "lease", once, "a")
    assert _finish(queue, "lease", once, "a", token)
    # unfenced: a claims, loses its lease (reaped), b claims; a's stale finish is accepted, b's rejected
    _claim(queue, "lease", twice_unfenced, "a", lease_s=0.05)
    time.sleep(0.1)
    assert [r["run"] for r in reaper.reap_expired(queue)] == [twice_unfenced]
    token_b = _claim(queue, "lease", twice_unfenced, "b")
    assert token_b == 2
    assert _finish(queue, "lease", twice_unfenced, "a", 1)      # accepted: nothing checks who holds it
    assert not _finish(queue, "lease", twice_unfenced, "b", 2)  # already done
    # fenced: the same story, but the stale finish is refused and the holder's accepted
    _claim(queue, "lease_fenced", fenced, "a", lease_s=0.05)
    time.sleep(0.1)
    reaper.reap_expired(queue)
    _claim(queue, "lease_fenced", fenced, "b")
    assert not _finish(queue, "lease_fenced", fenced, "a", 1)
    assert _finish(queue, "lease_fenced", fenced, "b", 2)
    # stuck: claimed by a runner that died
    _claim(queue, "none", stuck, "dead")
    # lost: still pending
    events = _events(("a", "started", once, 1), ("a", "finished", once, 1),
                     ("a", "started", twice_unfenced, 1), ("b", "started", twice_unfenced, 2),
                     ("a", "finished", twice_unfenced, 1), ("b", "finish_rejected", twice_unfenced, 2),
                     ("a", "started", fenced, 1), ("b", "started", fenced, 2),
                     ("a", "finish_rejected", fenced, 1), ("b", "finished", fenced, 2),
                     ("dead", "started", stuck, 1))
    rows = {row["run"]: row for row in ledger.read_ledger(queue, events, live_runners={"a", "b"})}
    assert rows[once]["class"] == "completed_once" and not rows[once]["executed_twice"]
    assert rows[twice_unfenced]["class"] == "completed_once"
    assert rows[twice_unfenced]["executed_twice"] and rows[twice_unfenced]["stale_completion"]
    assert rows[fenced]["class"] == "completed_once"
    assert rows[fenced]["executed_twice"] and not rows[fenced]["stale_completion"]
    assert rows[stuck]["class"] == "stuck"
    assert rows[lost]["class"] == "lost"
    assert not any(row["acknowledged_lost"] for row in rows.values())
    totals = ledger.counts(list(rows.values()))
    assert totals == {"completed_once": 3, "completed_twice": 0, "stuck": 1, "lost": 1, "in_progress_at_timeout": 0,
                      "executed_twice": 2, "stale_completion": 1, "acknowledged_lost": 0, "runs": 5}


def test_ledger_twice_lost_and_acknowledged():
    """The classes the service's guards should never produce, from rows written directly."""
    runs = [{"id": 1, "status": "done", "attempt": 2, "claimed_by": "b"},
            {"id": 2, "status": "running", "attempt": 1, "claimed_by": "a"},
            {"id": 3, "status": "running", "attempt": 1, "claimed_by": "a"}]
    finishes = [{"run_id": 1, "runner": "a", "attempt": 1}, {"run_id": 1, "runner": "b", "attempt": 2}]
    events = _events(("a", "started", 2, 1), ("a", "finished", 3, 1), ("a", "claimed", 3, 1))
    rows = {row["run"]: row for row in ledger.classify(runs, finishes, events, live_runners={"a"})}
    assert rows[1]["class"] == "completed_twice" and rows[1]["stale_completion"]
    assert rows[2]["class"] == "in_progress_at_timeout"  # a live runner still holds it: not stuck, not lost
    assert rows[3]["acknowledged_lost"]
    # the same run 2 with its holder dead is stuck
    rows = {row["run"]: row for row in ledger.classify(runs, finishes, events, live_runners=set())}
    assert rows[2]["class"] == "stuck"


def test_read_events_skips_a_torn_line(tmp_path):
    log = tmp_path / "r.jsonl"
    log.write_text(json.dumps({"t": 1, "runner": "a", "event": "started", "run": 1, "token": 1}) + "\n{\"t\": 2, \"ru")
    assert [e["event"] for e in ledger.read_events([log, tmp_path / "missing.jsonl"])] == ["started"]
