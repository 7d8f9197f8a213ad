"""Faults injected into a running system, for real, each one logged with its time and target.

- restart_server: stop the embedded PostgreSQL the way a crash does and start it again on
  the same port and data directory (committed transactions survive, connections do not);
- terminate_backends: pg_terminate_backend of every connection with a given application_name
  (the claim service names its pool's connections);
- kill / pause: SIGKILL of a process, or SIGSTOP for a while and then SIGCONT;
- cut_sessions_of: pg_terminate_backend of every session one process holds, the process left running.

FaultLog keeps what was injected: one entry per fault, with its time from the log's start
(time.monotonic, the clock the experiment's timeline uses), the UTC wall clock, its kind,
its target and what it found (pids terminated, whether the process was alive, the restart's times).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import signal
import time
from dataclasses import dataclass, field

import psutil
import psycopg

from harness.errors import UserError

TERMINATE_SQL = """
SELECT pid, pg_terminate_backend(pid)
FROM pg_stat_activity
WHERE application_name = %s AND pid <> pg_backend_pid() AND backend_type = 'client backend'
"""


@dataclass
class FaultLog:
    """The faults injected during one run, in order."""

    began: float = field(default_factory=time.monotonic)
    began_unix: float = field(default_factory=time.time)  # the runners' event logs carry unix times
    entries: list = field(default_factory=list)

    def record(self, fault: str, target: str, **detail) -> dict:
        entry = {"t": time.monotonic() - self.began, "unix": time.time(),
                 "at": dt.datetime.now(dt.timezone.utc).isoformat(), "fault": fault, "target": target, **detail}
        self.entries.append(entry)
        return entry

    def rows(self) -> list[dict]:
        """The entries as a table's rows, a list or dict in one as its JSON; one empty row where none was injected."""
        return [{k: (json.dumps(v) if isinstance(v, (list, dict)) else v) for k, v in entry.items()}
                for entry in self.entries] or [{"t": None, "fault": None}]


def can_restart(db) -> bool:
    """Whether this harness started the server and can restart it (the embedded server only)."""
    return getattr(db, "server", None) is not None and hasattr(db.server, "restart")


def restart_server(db, log: FaultLog | None = None, mode: str = "immediate") -> dict:
    """Crash-stop the embedded server and start it again on its data directory; returns the times taken."""
    if not can_restart(db):
        raise UserError(f"a server restart needs the embedded server (this one is from {db.source})")
    times = db.server.restart(mode)
    if log is not None:
        log.record("restart", f"postgresql on port {db.server.port}", **times)
    return times


def terminate_backends(conn: psycopg.Connection, application_name: str, log: FaultLog | None = None) -> list[int]:
    """pg_terminate_backend of every client backend named application_name; the pids it signalled."""
    rows = conn.execute(TERMINATE_SQL, [application_name]).fetchall()
    pids = [int(pid) for pid, signalled in rows if signalled]
    if log is not None:
        log.record("terminate", f"backends of {application_name}", pids=pids)
    return pids


def cut_sessions_of(conn: psycopg.Connection, pid: int, log: FaultLog | None = None,
                    target: str | None = None, **detail) -> list[int]:
    """pg_terminate_backend of every session the process pid (or a child of it) holds to conn's server, found by
    its client port: the session a library's advisory locks live in ends, the process runs on. The pids
    signalled."""
    ports = set()
    with contextlib.suppress(psutil.Error):
        process = psutil.Process(pid)
        for one in [process, *process.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                ports |= {c.laddr.port for c in one.net_connections(kind="inet") if c.raddr}
    rows = conn.execute("SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity WHERE client_port = ANY(%s) "
                        "AND pid <> pg_backend_pid() AND backend_type = 'client backend'",
                        [sorted(ports)]).fetchall() if ports else []
    pids = [int(backend) for backend, signalled in rows if signalled]
    if log is not None:
        log.record("cut_sessions", target or f"pid {pid}", pid=pid, backends=pids, **detail)
    return pids


def alive(pid: int) -> bool:
    """Whether pid is a live process (a zombie counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            state = stat.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def kill(pid: int, log: FaultLog | None = None, target: str | None = None, **detail) -> bool:
    """SIGKILL pid; False when it was already gone."""
    was_alive = alive(pid)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    if log is not None:
        log.record("kill", target or f"pid {pid}", pid=pid, was_alive=was_alive, **detail)
    return was_alive


@contextlib.contextmanager
def stopped(pid: int, log: FaultLog | None = None, target: str | None = None, **detail):
    """SIGSTOP pid for the body of the with-block, then SIGCONT (also on errors)."""
    os.kill(pid, signal.SIGSTOP)
    began = time.monotonic()
    entry = log.record("pause", target or f"pid {pid}", pid=pid, **detail) if log is not None else {}
    try:
        yield entry
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
        entry["paused_seconds"] = time.monotonic() - began


def stop_state(pid: int) -> str | None:
    """The kernel's state letter of pid (T: stopped by a signal), None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None
