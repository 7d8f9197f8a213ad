"""The harness touches its own schema and nothing else; it fails cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from harness.server import schema
from harness.errors import RaceError, UserError
from harness.experiments import registry
from harness.experiments.race.trials import RaceSweep
from harness.experiments.race.workers import kill_a_worker_after, run_race
from conftest import PROJECT_ROOT, run_cli


def worker_backends_left(conn, within_seconds: float = 10) -> int:
    """Worker backends still connected once they have had within_seconds to go."""
    deadline = time.monotonic() + within_seconds
    while True:
        left = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'claimrace-worker-%'"
                            ).fetchone()[0]
        if left == 0 or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def test_foreign_objects_survive_and_block_the_run(db, conn, tmp_path):
    conn.execute("DROP TABLE IF EXISTS public.jobs")
    conn.execute("CREATE TABLE public.jobs (id int PRIMARY KEY, status text)")
    conn.execute("INSERT INTO public.jobs SELECT g, 'pending' FROM generate_series(1, 50) g")
    conn.execute("CREATE TABLE claimrace.someone_elses (note text)")
    conn.execute("INSERT INTO claimrace.someone_elses VALUES ('keep me')")
    try:
        with pytest.raises(UserError, match="someone_elses"):
            registry.measure("race", RaceSweep(strategies=["guarded"], worker_counts=[2], job_count=100), tmp_path,
                             db=db, progress=False)
        assert conn.execute("SELECT note FROM claimrace.someone_elses").fetchall() == [("keep me",)]
    finally:
        conn.execute("DROP TABLE claimrace.someone_elses")
    # with the foreign table gone, a run works and public.jobs is untouched
    registry.measure("race", RaceSweep(strategies=["naive", "guarded"], worker_counts=[2], job_count=100), tmp_path,
                     db=db, progress=False)
    assert conn.execute("SELECT count(*), count(*) FILTER (WHERE status = 'pending') FROM public.jobs").fetchone() \
        == (50, 50)
    conn.execute("DROP TABLE public.jobs")


def test_a_schema_the_harness_did_not_create_is_refused(db, conn):
    conn.execute("DROP SCHEMA IF EXISTS claimrace_probe CASCADE")
    from harness import config

    original = schema.SCHEMA
    try:
        conn.execute("CREATE SCHEMA claimrace_probe")
        conn.execute("CREATE TABLE claimrace_probe.jobs (id int)")
        schema.SCHEMA = "claimrace_probe"
        with pytest.raises(UserError, match="not created by claimrace"):
            schema.ensure_schema(conn)
        assert conn.execute("SELECT count(*) FROM claimrace_probe.jobs").fetchone() == (0,)
    finally:
        schema.SCHEMA = original
        conn.execute("DROP SCHEMA claimrace_probe CASCADE")
    assert config.SCHEMA == "claimrace"


@pytest.mark.serial  # times the failure: another test beside it would slow it down
def test_a_killed_worker_fails_the_race_quickly_and_leaves_nothing(db, conn):
    schema.create_queue(conn, 100_000)
    kill_a_worker_after(1.0)
    began = time.monotonic()
    with pytest.raises(RaceError, match="died with exit code -9"):
        run_race(db.url, "guarded", 4, jitter_ms=1.0)
    assert time.monotonic() - began < 15
    me = psutil.Process(os.getpid())
    time.sleep(0.2)
    # the embedded server's watchdog is this process's child by design; no worker may be left
    left = [c for c in me.children(recursive=True) if c.is_running() and c.status() != psutil.STATUS_ZOMBIE
            and "harness.server.watchdog" not in " ".join(c.cmdline())]
    assert left == []
    assert worker_backends_left(conn) == 0, "the killed worker's server backend is gone too (its socket closed)"


def _started_by(marker: str) -> list[psutil.Process]:
    """The processes that inherited the environment variable marker: whatever the command started, even once
    it has left them to init (a server started by another test or session does not carry it)."""
    found = []
    for process in psutil.process_iter():
        try:
            if marker in process.environ():
                found.append(process)
        except psutil.Error:  # gone, or another user's
            pass
    return found


@pytest.mark.serial  # times the refusal: another test beside it would slow it down
def test_a_worker_count_beyond_this_machine_is_refused_before_anything_starts(tmp_path):
    from harness.experiments import limits

    bound, reason = limits.worker_bound()
    assert 100 <= bound < 100_000 and reason
    marker = f"CLAIMRACE_TEST_MARKER_{os.getpid()}"
    began = time.monotonic()
    result = run_cli("race", "--strategy", "guarded", "--workers", "100000", "--jobs", "10", "--data-dir",
                     str(tmp_path), "--db", "embedded", env_extra={marker: "1"})
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "at most" in result.stderr and "100000" in result.stderr
    assert time.monotonic() - began < 15
    assert not (tmp_path / "races").exists(), "nothing ran"
    assert _started_by(marker) == [], "no server (nor anything else) was started"


def test_the_check_for_started_processes_sees_one_that_outlives_its_command(tmp_path):
    """The check above can fail: a process the command leaves behind carries the marker."""
    marker = f"CLAIMRACE_TEST_MARKER_{os.getpid()}_control"
    left = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                            env={**os.environ, marker: "1"}, start_new_session=True)
    try:
        assert [p.pid for p in _started_by(marker)] == [left.pid]
    finally:
        left.kill()
        left.wait()


def test_a_job_count_this_machine_cannot_hold_is_refused(tmp_path):
    result = run_cli("race", "--strategy", "guarded", "--workers", "100", "--jobs", "9000000", "--data-dir",
                     str(tmp_path))
    assert result.returncode == 2 and "GiB" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_sigkill_of_the_harness_takes_its_workers_with_it(db, conn):
    # a harness in its own process races a long queue; SIGKILL it mid-race: no worker may survive
    schema.create_queue(conn, 200_000)
    script = ("import sys; from harness.experiments.race.workers import run_race; "
              "run_race(sys.argv[1], 'guarded', 16)")
    harness = subprocess.Popen([sys.executable, "-c", script, db.url], cwd=PROJECT_ROOT)
    deadline = time.monotonic() + 30
    workers = []
    while time.monotonic() < deadline and len(workers) < 16:
        try:
            workers = psutil.Process(harness.pid).children()
        except psutil.NoSuchProcess:
            break
        time.sleep(0.05)
    assert len(workers) == 16
    time.sleep(0.5)  # racing now
    harness.send_signal(signal.SIGKILL)
    harness.wait(10)
    gone, alive = psutil.wait_procs(workers, timeout=10)
    assert alive == [], f"{len(alive)} workers outlived the harness"
    assert worker_backends_left(conn) == 0, "their backends ended too"


def test_sigkill_of_the_harness_stops_its_embedded_server(tmp_path):
    # a harness that started an embedded server and is then killed without a chance to clean up
    ready = tmp_path / "url"
    script = ("import sys, time; from pathlib import Path; from harness.server import database\n"
              "with database.open_database('embedded') as db:\n"
              "    Path(sys.argv[1]).write_text(db.details['data_dir'])\n"
              "    time.sleep(600)\n")
    harness = subprocess.Popen([sys.executable, "-c", script, str(ready)], cwd=PROJECT_ROOT)
    deadline = time.monotonic() + 60
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    pgdata = ready.read_text()
    postmaster = int((Path(pgdata) / "postmaster.pid").read_text().split()[0])
    assert psutil.pid_exists(postmaster)
    harness.send_signal(signal.SIGKILL)
    harness.wait(10)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (psutil.pid_exists(postmaster) or Path(pgdata).exists()):
        time.sleep(0.1)
    assert not psutil.pid_exists(postmaster), "the server outlived the harness"
    assert not Path(pgdata).exists(), "its data directory was left on tmpfs"


def test_the_soak_s_partitions_are_the_harness_s_and_a_name_like_them_is_not():
    assert schema._owned_kinds("jobs") == "rp" and schema._owned_kinds("jobs_pkey") == "iI"
    assert schema._owned_kinds("jobs_p12") == "r" and schema._owned_kinds("jobs_p12_pkey") == "i"
    assert schema._owned_kinds("jobs_px") == schema._owned_kinds("jobs_p12_copy") == ""
