"""One real PostgreSQL for the whole test session: the embedded server, or DATABASE_URL if set."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import psutil
import pytest

from harness import storage
from harness.experiments import registry
from harness.server import database, schema

PROJECT_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def db():
    with database.open_database(os.environ.get("CLAIMRACE_TEST_DB") or None) as handle:
        yield handle


@pytest.fixture
def conn(db):
    with db.connect() as connection:
        schema.ensure_schema(connection)
        yield connection


def handed(section: str, paths) -> dict:
    """Runs a test made, as the article is handed a params-file section ({section: registry.Asked}): what each run
    was asked, read back from its manifest, and the runs."""
    runs = storage.open_runs(paths)
    return {section: registry.Asked(section, [run.parameters for run in runs], tuple(runs))}


def run_cli(*args: str, env_extra: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """python -m harness ... as a user would run it."""
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=PROJECT_ROOT, capture_output=True,
                          text=True, env=env, timeout=timeout)


def forked_workers(harness: psutil.Process) -> list[psutil.Process]:
    """The harness's children that run its own command line: the forked workers (not the watchdog, not pg_ctl)."""
    found, command = [], harness.cmdline()
    for process in harness.children():
        try:
            if process.cmdline() == command:
                found.append(process)
        except psutil.Error:  # a short-lived child (pg_ctl) gone or not yet reaped
            pass
    return found


def survivors_of_sigkill(args: list[str], find: Callable[[psutil.Process], list], wait_s: float,
                         watch: Callable[[psutil.Process], list] = forked_workers) -> list[psutil.Process]:
    """Run `python -m harness *args`, wait up to wait_s until find(harness) returns processes, SIGKILL the command
    then, and return those processes, and the ones watch(harness) returned, still alive 15 s later."""
    command = subprocess.Popen([sys.executable, "-m", "harness", *args], cwd=PROJECT_ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        harness = psutil.Process(command.pid)
        deadline, found = time.monotonic() + wait_s, []
        while time.monotonic() < deadline and not found:
            found = find(harness)
            time.sleep(0.05)
        assert found, f"nothing to watch ever started: {' '.join(args)}"
        watched = found + [p for p in watch(harness) if p not in found]
        os.kill(command.pid, signal.SIGKILL)
        command.wait(30)
        return psutil.wait_procs(watched, timeout=15)[1]
    finally:
        if command.poll() is None:
            command.kill()
            command.wait(30)
