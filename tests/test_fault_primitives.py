"""The fault primitives on a real server and real processes: restart, backend termination, kill, pause."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import psycopg
import pytest

from harness.server import database, faults


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_restart_keeps_committed_data_and_drops_connections(db):
    if not faults.can_restart(db):
        pytest.skip("the restart needs the embedded server")
    with db.connect() as conn:
        conn.execute("DROP TABLE IF EXISTS public.restart_probe")
        conn.execute("CREATE TABLE public.restart_probe (id int primary key, note text)")
        conn.execute("INSERT INTO public.restart_probe SELECT g, 'committed' FROM generate_series(1, 500) g")
        pid_before = conn.execute("SELECT pg_postmaster_start_time()").fetchone()[0]
        old = db.connect()
        log = faults.FaultLog()
        times = faults.restart_server(db, log)
        assert times["mode"] == "immediate" and times["start_seconds"] > 0
        assert log.entries[0]["fault"] == "restart"
        with pytest.raises(psycopg.OperationalError):  # the old connection did not survive
            old.execute("SELECT 1")
        old.close()
    with db.connect() as conn:  # same URL, same data directory
        assert conn.execute("SELECT count(*), min(note) FROM public.restart_probe").fetchone() == (500, "committed")
        assert conn.execute("SELECT pg_postmaster_start_time()").fetchone()[0] > pid_before
        conn.execute("DROP TABLE public.restart_probe")


def test_restart_refused_without_the_embedded_server():
    with pytest.raises(faults.UserError):
        faults.restart_server(database.Database(url="postgresql://x@127.0.0.1:1/x", source="url"))


def test_terminate_hits_only_the_named_connections(db):
    with db.connect() as control, db.connect(application_name="claimrace-victim") as victim, \
            db.connect(application_name="claimrace-bystander") as bystander:
        victim_pid = victim.info.backend_pid
        log = faults.FaultLog()
        assert faults.terminate_backends(control, "claimrace-victim", log) == [victim_pid]
        assert log.entries[0]["pids"] == [victim_pid]
        with pytest.raises(psycopg.OperationalError):
            victim.execute("SELECT 1")
        assert bystander.execute("SELECT 1").fetchone() == (1,)
        # the server itself says the backend is gone
        deadline = time.monotonic() + 5
        while control.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [victim_pid]).fetchone()[0]:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert faults.terminate_backends(control, "claimrace-victim") == []


def test_kill_and_pause_real_processes():
    proc = _sleeper()
    try:
        log = faults.FaultLog()
        with faults.stopped(proc.pid, log, "sleeper"):
            deadline = time.monotonic() + 5
            while faults.stop_state(proc.pid) != "T":
                assert time.monotonic() < deadline
                time.sleep(0.01)
            time.sleep(0.2)
        # running again after SIGCONT: no longer stopped (a woken process may be in R, S, or briefly D)
        assert faults.stop_state(proc.pid) not in ("T", "t")
        assert log.entries[0]["paused_seconds"] >= 0.2
        assert faults.kill(proc.pid, log, "sleeper") is True
        assert proc.wait(5) == -signal.SIGKILL
        assert not faults.alive(proc.pid)
        assert faults.kill(proc.pid) is False
        assert [e["fault"] for e in log.entries] == ["pause", "kill"]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
