"""The READ COMMITTED re-check, deterministically, with two real sessions."""

from __future__ import annotations

import threading
import time

import pytest

from harness.server import schema
from harness.claims.strategies import GUARDED_CLAIM

GUARDED = GUARDED_CLAIM.replace("$1", "%s")  # the same statement, in psycopg's placeholder style


def wait_until_blocked(observer, pid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = observer.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone()
        if row and row[0] == "Lock":
            return
        time.sleep(0.02)
    pytest.fail(f"session {pid} never waited on a lock")


@pytest.mark.parametrize("first_session_ends_with, second_session_rows", [("commit", 0), ("rollback", 1)])
def test_second_guarded_update_waits_then_rechecks(db, conn, first_session_ends_with, second_session_rows):
    schema.create_queue(conn, 10)
    with db.connect(autocommit=False) as session_a, db.connect() as session_b:
        a_rows = session_a.execute(GUARDED, [1]).fetchall()  # A holds the row lock, uncommitted
        assert a_rows == [(1,)]
        outcome = {}

        def b_claims():
            outcome["rows"] = session_b.execute(GUARDED, [1]).fetchall()

        b = threading.Thread(target=b_claims)
        b.start()
        wait_until_blocked(conn, session_b.info.backend_pid)  # B is queued behind A's lock
        assert "rows" not in outcome
        getattr(session_a, first_session_ends_with)()
        b.join(10)
        assert not b.is_alive()
        # after A commits, B re-evaluates status = 'pending' on the new row version and updates nothing;
        # after A rolls back, the original version still qualifies and B wins
        assert len(outcome["rows"]) == second_session_rows
    audit = schema.audit_rows(conn)
    assert [row[1] for row in audit] == [1], "exactly one claim of job 1 reached the audit"
