"""One real PostgreSQL for the whole test session: the embedded server, or DATABASE_URL if set.

`make test` runs the files in parallel worker processes (pytest-xdist, --dist loadgroup), each worker with its
own embedded server from the session-scoped `db` fixture. What keeps the workers from getting in each other's way:

- tests marked `serial` measure CPU shares or timing (the sampler, the CPU-bound rule, the bench, the delay
  proxy, wake-up latency): beside another test they would measure it. They form one group, which the scheduler
  below hands out only once every other group is out, and each runs holding the machine alone (a file lock:
  the other workers finish the test they are in and wait until the serial tests are done);
- the tiny report (tests/tiny_report.py) is built once, in the session's folder, by the first worker to need it:
  the scheduler hands one module that reads it out first and the others last (one with a test marked `long`
  first among them), so the build runs while the other workers run everything else, and the tests that read it
  spread over every worker once it is there;
- tests sharing a module-scoped fixture stay in one worker, which sets it up once.

Without xdist (`pytest tests/test_x.py`) all of this stays out of the way: one process runs the tests in order.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import fcntl
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import psutil
import pytest

from harness import storage
from harness.experiments import registry
from harness.server import database, schema

PROJECT_ROOT = Path(__file__).resolve().parent.parent

SERIAL_GROUP = "serial"  # the xdist group of the tests marked serial
LOCK_DIR_VARIABLE = "CLAIMRACE_TEST_LOCKS"  # the folder of the workers' lock files, made by the controller
PR_SET_PDEATHSIG = 1  # linux/prctl.h


# --------------------------------------------------------------------------- parallel workers, serial tests


def _is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _is_xdist_controller(config: pytest.Config) -> bool:
    return (not _is_xdist_worker(config) and config.pluginmanager.hasplugin("xdist")
            and bool(config.getoption("numprocesses", None)) and config.getoption("dist", "no") != "no")


def _die_with_parent() -> None:
    """A worker gets SIGKILL when the pytest that started it dies, however it dies; its embedded server's
    watchdog then stops the server."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() == 1:  # the parent died before the line above
            os.kill(os.getpid(), signal.SIGKILL)


LOCK_DIR_PREFIX = "claimrace-test-locks-"


def _remove_folders_of_dead_sessions() -> None:
    """A session killed with SIGKILL leaves its folder (and the tiny build in it); the next one removes it."""
    for folder in Path(tempfile.gettempdir()).glob(f"{LOCK_DIR_PREFIX}*"):
        try:
            owner = int((folder / "owner").read_text())
        except (OSError, ValueError):
            continue
        if not psutil.pid_exists(owner):
            shutil.rmtree(folder, ignore_errors=True)


def pytest_configure(config: pytest.Config) -> None:
    if _is_xdist_controller(config):  # the workers inherit the variable: they start after this
        _remove_folders_of_dead_sessions()
        folder = tempfile.mkdtemp(prefix=LOCK_DIR_PREFIX)
        (Path(folder) / "owner").write_text(f"{os.getpid()}\n")
        os.environ[LOCK_DIR_VARIABLE] = folder
    if _is_xdist_worker(config) and sys.platform == "linux":
        _die_with_parent()


def pytest_unconfigure(config: pytest.Config) -> None:
    if _is_xdist_controller(config) and os.environ.get(LOCK_DIR_VARIABLE):
        shutil.rmtree(os.environ.pop(LOCK_DIR_VARIABLE), ignore_errors=True)


def _group_of(item: pytest.Item) -> str | None:
    """The xdist group a test joins: serial, its module's (a module- or class-scoped fixture is set up once, in
    one worker), or none (the test goes to whichever worker is free)."""
    if item.get_closest_marker("serial") is not None:
        return SERIAL_GROUP
    fixtures = getattr(item, "_fixtureinfo", None)
    if fixtures is not None and any(definition.scope in ("class", "module", "package")
                                    for definitions in fixtures.name2fixturedefs.values()
                                    for definition in definitions):
        return item.nodeid.split("::", 1)[0]
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    groups, tiny, long = {}, [], []
    for item in items:
        mark = item.get_closest_marker("xdist_group")
        group = (mark.args[0] if mark is not None and mark.args else None) or _group_of(item)
        if getattr(item.module, "build_tiny_report", None) is not None:
            tiny.append(group or item.nodeid)
        if item.get_closest_marker("long") is not None:
            long.append(group or item.nodeid)
        if group is None:
            continue
        groups[item.nodeid] = group
        if mark is None:
            item.add_marker(pytest.mark.xdist_group(group))
    folder = os.environ.get(LOCK_DIR_VARIABLE)
    if _is_xdist_worker(config) and folder:
        # xdist 3.8 cannot add a group to a test id under pytest 9 (it sets an attribute pytest no longer reads),
        # so the scheduler reads the groups from here: every worker writes the same file, each whole at once
        mine = Path(folder) / f"groups-{config.workerinput['workerid']}.json"
        mine.write_text(json.dumps({"groups": groups, "tiny": tiny, "long": long}))
        mine.replace(Path(folder) / "groups.json")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    if config.getoption("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class SerialLast(LoadGroupScheduling):
        """--dist loadgroup, with the groups read from the workers' file; of the work that reads the tiny build,
        the largest is handed out first (it builds, the longest chain) and the rest last, those with a test marked
        long first among them; the serial group is held back until it is the last group not yet handed out."""

        held: dict | None = None
        found: dict | None = None
        ordered = False

        def _read_groups(self) -> dict:
            if self.found is None:
                try:
                    self.found = json.loads((Path(os.environ[LOCK_DIR_VARIABLE]) / "groups.json").read_text())
                except (KeyError, OSError, ValueError):
                    self.found = {}
            return self.found

        def _split_scope(self, nodeid: str) -> str:
            return self._read_groups().get("groups", {}).get(nodeid) or super()._split_scope(nodeid)

        def _arrange(self) -> None:
            if not self.ordered:
                self.ordered = True
                wanted, long = set(self._read_groups().get("tiny", [])), set(self._read_groups().get("long", []))
                tiny = sorted((s for s in self.workqueue if s in wanted), key=lambda s: -len(self.workqueue[s]))
                # of the rest, a group with a long test first: last, it would keep the serial tests waiting
                for scope in sorted(tiny[1:], key=lambda s: s not in long):
                    self.workqueue.move_to_end(scope)
                if tiny:
                    self.workqueue.move_to_end(tiny[0], last=False)
            if SERIAL_GROUP in self.workqueue and len(self.workqueue) > 1:
                self.held = self.workqueue.pop(SERIAL_GROUP)
            elif self.held is not None and not self.workqueue:
                self.workqueue[SERIAL_GROUP] = self.held
                self.held = None

        def _assign_work_unit(self, node) -> None:
            self._arrange()
            super()._assign_work_unit(node)

        def _reschedule(self, node) -> None:
            self._arrange()
            super()._reschedule(node)

        def remove_node(self, node):
            crashed = super().remove_node(node)
            self._arrange()
            return crashed

        @property
        def tests_finished(self) -> bool:
            return self.held is None and super().tests_finished

        @property
        def has_pending(self) -> bool:
            return self.held is not None or super().has_pending

    return SerialLast(config, log)


class _MachineLock:
    """A readers-writer lock over the worker processes: every test holds it shared, a serial test alone.

    A turnstile gives the writer priority: a serial test waiting for the lock keeps new tests from starting, so it
    waits only for the tests already running. The flocks die with their process, SIGKILL included.
    """

    def __init__(self, folder: Path):
        self.turnstile = os.open(folder / "turnstile", os.O_RDWR | os.O_CREAT, 0o600)
        self.machine = os.open(folder / "machine", os.O_RDWR | os.O_CREAT, 0o600)
        self.alone = False

    def share(self) -> None:
        fcntl.flock(self.turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(self.machine, fcntl.LOCK_SH)
        finally:
            fcntl.flock(self.turnstile, fcntl.LOCK_UN)

    def take_alone(self) -> None:
        fcntl.flock(self.turnstile, fcntl.LOCK_EX)
        fcntl.flock(self.machine, fcntl.LOCK_EX)
        self.alone = True

    def release(self) -> None:
        fcntl.flock(self.machine, fcntl.LOCK_UN)
        if self.alone:
            fcntl.flock(self.turnstile, fcntl.LOCK_UN)
            self.alone = False


_machine_lock: _MachineLock | None = None


def _lock_for(config: pytest.Config) -> _MachineLock | None:
    global _machine_lock
    folder = os.environ.get(LOCK_DIR_VARIABLE)
    if _machine_lock is None and _is_xdist_worker(config) and folder:
        _machine_lock = _MachineLock(Path(folder))
    return _machine_lock


def _is_serial(item: pytest.Item | None) -> bool:
    return item is not None and item.get_closest_marker("serial") is not None


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """Each test's setup, call and teardown under the machine lock; consecutive serial tests keep it alone."""
    lock = _lock_for(item.config)
    if lock is None:
        yield
        return
    if _is_serial(item):
        if not lock.alone:
            lock.take_alone()
    else:
        lock.share()
    try:
        yield
    finally:
        if not (_is_serial(item) and _is_serial(nextitem)):
            lock.release()


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
    """python -m harness ... as a user would run it; its pid as `pid` (what its scratch folders are named after)."""
    env = {**os.environ, **(env_extra or {})}
    with subprocess.Popen([sys.executable, "-m", "harness", *args], cwd=PROJECT_ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env=env) as process:
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            raise
    done = subprocess.CompletedProcess(process.args, process.returncode, out, err)
    done.pid = process.pid
    return done


def poolers_of(pid: int) -> list:
    """The pgbouncer processes a harness process started (their config lies in a scratch folder named after it) and
    left running: another test's, beside this one, are not counted."""
    import psutil

    from harness import scratch

    mine = f"{scratch.PREFIX}{pid}-"
    found = []
    for process in psutil.process_iter(["name", "cmdline"]):
        if process.info["name"] == "pgbouncer" and any(mine in part for part in process.info["cmdline"] or ()):
            found.append(process)
    return found


def soak_runs(root: Path, commands: dict[str, list[str]], batch: int) -> dict:
    """{name: (its JSON row, its stored Run)}: each `python -m harness soak ...` command run with a data folder of
    its own under root, `batch` side by side at most (each has its own server: the machine has two cores), the next
    started as soon as one ends, in the order given (the longest first keeps the pool full); a command that fails or
    hangs fails the fixture, and is killed with the rest."""
    from harness.storage import Run
    waiting, done, running = list(commands), {}, {}
    try:
        while waiting or running:
            while waiting and len(running) < batch:
                name = waiting.pop(0)
                (root / name).mkdir()
                with open(root / name / "out", "w") as out, open(root / name / "err", "w") as err:
                    running[name] = (time.monotonic(), subprocess.Popen(  # into files: a full pipe would block it
                        [sys.executable, "-m", "harness", "soak", *commands[name], "--data-dir", str(root / name)],
                        cwd=PROJECT_ROOT, stdout=out, stderr=err, text=True))
            for name, (began, process) in list(running.items()):
                if process.poll() is None:
                    assert time.monotonic() - began < 300, f"{name}: still running after 300 s"
                    continue
                del running[name]
                assert process.returncode == 0, f"{name}: {(root / name / 'err').read_text()[-3000:]}"
                done[name] = (json.loads((root / name / "out").read_text()),
                              Run(next((root / name / "soak").iterdir())))
            time.sleep(0.2)
    finally:
        for _, process in running.values():
            if process.poll() is None:
                process.kill()
                process.wait(30)
    return {name: done[name] for name in commands}


def assert_held_keeps_dead_rows(held: dict, stored, free: dict) -> None:
    """A REPEATABLE READ snapshot held from 10 to 20 s of a soak at 40 jobs/s: the oldest snapshot's age grows with
    the hold and the finished jobs' dead rows pile up during it; its control, nothing held, sees neither."""
    assert held["horizon_age_max_s"] >= 8 and (free["horizon_age_max_s"] or 0) < 5, (held, free)
    samples = stored.table("samples")
    during = samples[(samples["t_s"] >= 12) & (samples["t_s"] < 20)]
    assert during["n_dead_tup"].max() >= 250, during  # ten seconds of finished jobs at 40/s, kept while held
    holder = stored.table("holder")
    assert list(holder["event"]) == ["pinned", "released"] and 9.5 <= holder["t_s"].iloc[0] <= 11, holder


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
            try:
                found = find(harness)
            except psutil.NoSuchProcess:  # a child gone between listing it and reading it: look again
                found = []
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


def spin() -> None:
    """Keep a CPU busy until killed, dying with the process that started it (SIGKILL included): a spinner."""
    _die_with_parent()
    while True:
        pass


@contextlib.contextmanager
def cpu_spinners(count: int):
    """count spinners, each a forked process, until the block ends."""
    context = multiprocessing.get_context("fork")
    spinning = [context.Process(target=spin, daemon=True) for _ in range(count)]
    for process in spinning:
        process.start()
    try:
        yield spinning
    finally:
        for process in spinning:
            process.kill()
            process.join(5)
