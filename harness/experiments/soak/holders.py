"""What holds the MVCC horizon in a soak run, from pin_from to pin_to, and the mitigations that act on it.

Holders (HOLDERS), each on connections of its own:

    repeatable_read      a REPEATABLE READ transaction that took its snapshot and sits idle;
    idle_in_transaction  a transaction that took a transaction id (txid_current()) and sits idle: it has no
                         snapshot, and its transaction id holds the horizon all the same;
    analytics            ANALYTICS_SESSIONS sessions (two) running a count over the jobs table held open ANALYTICS_S
                         by pg_sleep in the same statement, each a share of that after the one before (at two, half),
                         back to back, so the horizon never frees; three of 120 s is PlanetScale's case (pg_sleep,
                         not a heavy query: the machine has two cores, and the pin, not the CPU, is measured). A
                         session the server ends connects again and goes on, as a reporting tool would;
    none                 nothing: the control.

Mitigations that act on the holder (the rest act on the table: harness.experiments.soak.measure):

    idle_timeout         idle_in_transaction_session_timeout = TIMEOUT_S: the server ends a session idle in a
                         transaction (the repeatable_read and idle_in_transaction holders);
    statement_timeout    statement_timeout = TIMEOUT_S: the server cancels each analytics statement;
    transaction_timeout  transaction_timeout = TIMEOUT_S (PostgreSQL 17 and later): the server ends a session whose
                         transaction has run that long, idle or not;
    one_analytics        the analytics sessions run one statement at a time, the second waiting for the first, as
                         a pool of one connection for them, or a role limited to one, would make them.

The settings are set on the holder's sessions; a server, database or role setting does the same to every session,
and the queue's own sessions, never idle in a transaction and never running a long statement, are not touched by it.
Events: what each session did and when (s from the start), including a session the server or anyone else ended.
"""

from __future__ import annotations

import json
import select
import threading
import time

import psycopg

from harness.config import SCHEMA
from harness.experiments.soak.outcomes import ANALYTICS_S, ANALYTICS_SESSIONS
from harness.server import database

HOLDERS = ("none", "repeatable_read", "idle_in_transaction", "analytics")
MITIGATIONS = ("none", "autovacuum", "idle_timeout", "statement_timeout", "transaction_timeout", "one_analytics")
TIMEOUT_S = 5.0  # the timeouts a mitigation sets
CONNECTION_CHECK_S = 1.0  # how soon the server notices the harness gone while a holder's statement runs
STOP_GRACE_S = 5.0
JOBS = f"{SCHEMA}.jobs"
# the holders each mitigation can act on (autovacuum acts on the table, whatever holds the horizon)
APPLIES_TO = {"none": HOLDERS, "autovacuum": HOLDERS,
              "idle_timeout": ("repeatable_read", "idle_in_transaction"),
              "statement_timeout": ("analytics",),
              "transaction_timeout": ("repeatable_read", "idle_in_transaction", "analytics"),
              "one_analytics": ("analytics",)}
SESSION_SETTINGS = {"idle_timeout": "idle_in_transaction_session_timeout",
                    "statement_timeout": "statement_timeout", "transaction_timeout": "transaction_timeout"}
TRANSACTION_TIMEOUT_SINCE = 17  # the server major version that has transaction_timeout


def analytics_sql(table: str = JOBS) -> str:
    """One analytics statement: reads every row of the jobs table, then sleeps the rest of its length."""
    return f"SELECT count(*), pg_sleep(%s) FROM (SELECT 1 FROM {table}) AS j"


class Holder:
    """Holds the horizon from pin_from to pin_to (run seconds), under a mitigation."""

    def __init__(self, url: str, kind: str, pin_from: float, pin_to: float, began: float, mitigation: str = "none",
                 table: str = JOBS, analytics_s: float = ANALYTICS_S, analytics_sessions: int = ANALYTICS_SESSIONS):
        self.url, self.kind, self.pin_from, self.pin_to, self.began = url, kind, pin_from, pin_to, began
        self.analytics_s = analytics_s  # one analytics statement's length
        self.analytics_sessions = analytics_sessions
        self.table = table  # the jobs table its snapshot and its analytics read
        self.mitigation = mitigation
        self.events: list[dict] = []
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []
        self.connections: list = []
        self.one_at_a_time = threading.Lock() if mitigation == "one_analytics" else None

    def _at(self) -> float:
        return time.monotonic() - self.began

    def _note(self, session: int, event: str, **more) -> None:
        self.events.append({"t_s": round(self._at(), 3), "session": session, "event": event,
                            "detail": json.dumps(more) if more else ""})

    def _connect(self, session: int):
        conn = database.connect(self.url, application_name=f"claimrace-soak-holder-{session}")
        self.connections.append(conn)
        if conn.info.server_version >= 140000:  # a server named by URL ends its statement once the harness is gone
            conn.execute(f"SET client_connection_check_interval = '{CONNECTION_CHECK_S:g}s'")
        setting = SESSION_SETTINGS.get(self.mitigation)
        if setting:
            conn.execute(f"SET {setting} = '{TIMEOUT_S:g}s'")
        return conn

    def _hold(self, conn) -> None:
        """Sit idle in the transaction until pin_to, watching the session's socket: a backend ended from outside
        sends its last message and closes, and the statement that reads it fails now, not at pin_to."""
        while not self.stopping.is_set() and (left := self.pin_to - self._at()) > 0:
            readable, _, _ = select.select([conn.pgconn.socket], [], [], min(0.2, left))
            if readable:
                conn.execute("SELECT 1")  # fails on a session that was ended; else it only reads what came

    def _wait_until(self, t_s: float) -> bool:
        """Wait until run second t_s; False where the run is stopping first."""
        return not self.stopping.wait(max(0.0, t_s - self._at()))

    def start(self) -> Holder:
        sessions = self.analytics_sessions if self.kind == "analytics" else (0 if self.kind == "none" else 1)
        for session in range(sessions):
            thread = threading.Thread(target=self._session, args=(session,), daemon=True,
                                      name=f"claimrace-soak-holder-{session}")
            thread.start()
            self.threads.append(thread)
        return self

    def _session(self, session: int) -> None:
        # session k starts k statements' lengths / sessions in: at two, the second half a statement later
        offset = self.analytics_s / self.analytics_sessions * session if self.kind == "analytics" else 0.0
        try:
            conn = self._connect(session)
        except Exception as exc:
            self._note(session, "could_not_connect", error=str(exc).splitlines()[0])
            return
        try:
            if not self._wait_until(self.pin_from + offset):
                return
            if self.kind == "analytics":
                self._analytics(session, conn)
                return
            if self.kind == "repeatable_read":
                conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                conn.execute(f"SELECT count(*) FROM {self.table}")  # takes the snapshot
            else:
                conn.execute("BEGIN")
                conn.execute("SELECT txid_current()")  # a transaction id: the horizon stops at it
            self._note(session, "pinned")
            self._hold(conn)
            conn.execute("COMMIT")
            self._note(session, "released")
        except Exception as exc:  # the session ended by the server (a timeout) or from outside
            self._note(session, "ended_early", error=_first_line(exc))
        finally:
            conn.close()

    def _analytics(self, session: int, conn) -> None:
        """Back-to-back statements until pin_to, each ending by then; a cancelled one is followed by the next, and
        a session the server ended is opened again."""
        statements = 0
        while not self.stopping.is_set() and (left := self.pin_to - self._at()) > 0.05:
            if not statements:
                self._note(session, "pinned")
            try:
                if self.one_at_a_time is not None:
                    with self.one_at_a_time:
                        left = self.pin_to - self._at()
                        if left > 0.05:
                            conn.execute(analytics_sql(self.table), [min(self.analytics_s, left)])
                else:
                    conn.execute(analytics_sql(self.table), [min(self.analytics_s, left)])
            except psycopg.errors.QueryCanceled as exc:
                if self.stopping.is_set() or self.pin_to - self._at() <= 0.05:  # stopped, or released early
                    break
                self._note(session, "statement_cancelled", error=_first_line(exc))
            except psycopg.Error as exc:  # the session was ended (a timeout, from outside): a reporting tool
                if self.stopping.is_set():  # connects again
                    break
                if not (conn.broken or conn.closed):
                    raise
                self._note(session, "ended_early", error=_first_line(exc))
                conn.close()
                try:
                    conn = self._connect(session)
                except Exception as again:
                    self._note(session, "could_not_connect", error=_first_line(again))
                    return
                self._note(session, "reconnected")
            statements += 1
        if statements:
            self._note(session, "released")
        conn.close()

    def release(self) -> None:
        """End the hold now, before pin_to: the idle transactions commit within their next look at the clock, and a
        running analytics statement is cancelled (and no next one starts). An idle holder's session is not sent a
        cancel: the server ignores one at an idle session, and one reaching its COMMIT would read as ended early."""
        self.pin_to = min(self.pin_to, self._at())
        if self.kind != "analytics":
            return
        for conn in self.connections:
            try:
                conn.cancel()
            except Exception:
                pass

    def stop(self) -> list[dict]:
        self.stopping.set()
        for conn in self.connections:  # a statement still sleeping is cancelled, not waited for
            try:
                conn.cancel()
            except Exception:
                pass
        for thread in self.threads:
            thread.join(STOP_GRACE_S + self.analytics_s)
        return self.events


class Holders:
    """The holders of a run's hold phases (harness.experiments.soak.phases), each in its own window, as one: started
    and stopped together; release() ends the first (hold_until_failure has one hold)."""

    def __init__(self, holders: list[Holder]):
        self.holders = holders

    @property
    def events(self) -> list[dict]:
        return sorted((event for holder in self.holders for event in holder.events), key=lambda e: e["t_s"])

    def start(self) -> Holders:
        for holder in self.holders:
            holder.start()
        return self

    def release(self) -> None:
        if self.holders:
            self.holders[0].release()

    def stop(self) -> list[dict]:
        for holder in self.holders:
            holder.stop()
        return self.events


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
