"""The reaper: returns runs whose lease expired to the queue.

A run claimed under a lease protocol carries `lease_until`; its runner moves it
forward with every heartbeat. When a runner dies, stops or loses its connection,
the lease runs out and the reaper's guarded UPDATE puts the run back to
'pending', where any runner can claim it again (the claim then increments
`attempt`, the fencing token). The guard re-checks status and lease in the
UPDATE itself, so a heartbeat or finish that lands first wins and the reaper
changes nothing.

The reaper is a thread of the harness (Reaper.start/stop), polling every
`interval_s`; it reconnects after a lost connection or a server restart, and
keeps every reap it made (time, run, the runner that lost it, the attempt).
"""

from __future__ import annotations

import threading
import time

import psycopg

from harness.config import SCHEMA

# The owner that lost the run is read in the same statement, for the record; a row locked by a heartbeat or
# finish in flight is skipped (the next pass sees it again), and the UPDATE re-checks status and lease.
REAP_SQL = f"""
WITH expired AS (
    SELECT id, claimed_by FROM {SCHEMA}.runs
     WHERE status = 'running' AND lease_until < now()
       FOR UPDATE SKIP LOCKED
)
UPDATE {SCHEMA}.runs AS r
   SET status = 'pending', lease_until = NULL, claimed_by = NULL
  FROM expired
 WHERE r.id = expired.id AND r.status = 'running' AND r.lease_until < now()
RETURNING r.id, expired.claimed_by, r.attempt
"""

APPLICATION_NAME = "claimrace-reaper"


def reap_expired(conn: psycopg.Connection) -> list[dict]:
    """One pass: every running run whose lease expired goes back to pending; what was reaped."""
    rows = conn.execute(REAP_SQL).fetchall()
    return [{"run": int(run), "runner": runner, "attempt": int(attempt)} for run, runner, attempt in rows]


class Reaper:
    """A background loop of reap_expired, every interval_s, surviving lost connections."""

    def __init__(self, url: str, interval_s: float = 0.2, clock_zero: float | None = None):
        if not 0.01 <= interval_s <= 60:
            raise ValueError(f"reaper interval must be between 0.01 and 60 s, not {interval_s}")
        self.url = url
        self.interval_s = interval_s
        self.clock_zero = time.time() if clock_zero is None else clock_zero  # unix time, as the runners' logs
        self.reaps: list[dict] = []
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="reaper", daemon=True)

    def start(self) -> "Reaper":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def __enter__(self) -> "Reaper":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def count(self) -> int:
        return len(self.reaps)

    def _loop(self) -> None:
        conn = None
        while not self._stop.is_set():
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(self.url, autocommit=True, connect_timeout=2,
                                           application_name=APPLICATION_NAME)
                for reap in reap_expired(conn):
                    now = time.time()
                    self.reaps.append({"unix": now, "t": now - self.clock_zero, **reap})
            except psycopg.Error:
                self.errors += 1  # a terminated backend or a restarting server: reconnect on the next pass
                if conn is not None:
                    conn.close()
                conn = None
            self._stop.wait(self.interval_s)
        if conn is not None:
            conn.close()
