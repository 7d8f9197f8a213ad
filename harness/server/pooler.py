"""PgBouncer between the workers and the server: started on a free port by the harness, stopped with it.

A race through it (`--pooler transaction|session`) reaches the server the way an application behind a pooler
does. In transaction mode PgBouncer hands a client a server connection for one transaction only: an autocommit
statement may run on a different server session than the one before it, so what a session keeps between
statements (session advisory locks, prepared statements, LISTEN) is another client's next. Session mode, a server
connection per client for as long as it is connected, is the control.

The pooler is Debian's `pgbouncer` (1.18 on bookworm, before PgBouncer could carry prepared statements in
transaction mode), so the workers send their statements unprepared, through either mode. It listens on
127.0.0.1, trusts its clients, and forwards to the database URL's host and port with its user and password; its
pool holds as many server connections as the race has workers (`default_pool_size`), so a client never waits for
one and any difference is the mode's. It runs as the server's unprivileged user when the harness is root
(PgBouncer refuses root), and the kernel kills it when the harness dies (PR_SET_PDEATHSIG), SIGKILL included.
"""

from __future__ import annotations

import contextlib
import ctypes
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import psycopg
from psycopg import conninfo

from harness import scratch
from harness.errors import UserError
from harness.server import database

MODES = ("none", "transaction", "session")
INSTALL_HINT = "install Debian's pgbouncer (apt-get install pgbouncer)"
START_TIMEOUT_SECONDS = 10.0
STOP_TIMEOUT_SECONDS = 5.0
_PR_SET_PDEATHSIG = 1


def binary() -> str | None:
    """The pgbouncer executable: on the PATH, or where Debian puts it (/usr/sbin, often off a user's PATH)."""
    return shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/usr/local/sbin")


def version() -> str | None:
    """PgBouncer's version ('1.18.0'), None where it is not installed."""
    found = binary()
    if found is None:
        return None
    said = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=10).stdout.split()
    return said[1] if len(said) > 1 and said[0] == "PgBouncer" else None


def check_mode(mode: str, installed: bool = True) -> None:
    """A known mode, and (installed) pgbouncer here for a mode that needs it: a params file is checked by name
    only, so a report still builds without pgbouncer (registry.ensure_section leaves such a section out)."""
    if mode not in MODES:
        raise UserError(f"pooler must be one of {', '.join(MODES)}, not {mode!r}")
    if installed and mode != "none" and binary() is None:
        raise UserError(f"pgbouncer not found: {INSTALL_HINT}")


@dataclass
class Pooled:
    """What the workers connect to, and the pooler as it ran (mode none: no pooler)."""

    url: str
    mode: str
    settings: dict = field(default_factory=dict)

    def describe(self) -> dict:
        return {"mode": self.mode, **({"pgbouncer": version(), **self.settings} if self.mode != "none" else {})}


def _die_with_harness() -> None:
    """In the pooler's process before it runs pgbouncer: the kernel sends it SIGKILL when the harness dies."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _ini(server: dict, port: int, mode: str, pool_size: int, folder: Path) -> str:
    target = " ".join(f"{key}={server[key]}" for key in ("host", "port", "user", "password") if server.get(key))
    return "\n".join([
        "[databases]", f"* = {target}", "",
        "[pgbouncer]",
        "listen_addr = 127.0.0.1", f"listen_port = {port}", "unix_socket_dir =",
        "auth_type = trust", f"auth_file = {folder / 'users.txt'}",
        f"pool_mode = {mode}", f"default_pool_size = {pool_size}", f"max_client_conn = {pool_size + 50}",
        # psycopg and libpq send these at connect; PgBouncer would refuse a parameter it does not track
        "ignore_startup_parameters = extra_float_digits,options",
        f"logfile = {folder / 'pgbouncer.log'}", "",
    ])


class Pooler:
    """One PgBouncer process: start() returns the URL to connect through, stop() ends it (idempotent)."""

    def __init__(self, url: str, mode: str, pool_size: int):
        check_mode(mode)
        self.url, self.mode, self.pool_size = url, mode, pool_size
        self.process: subprocess.Popen | None = None
        self.folder: Path | None = None

    def start(self) -> str:
        server = conninfo.conninfo_to_dict(self.url)
        server["host"] = server.pop("hostaddr", None) or server.get("host") or "127.0.0.1"
        if "," in str(server["host"]) or "," in str(server.get("port", "")):
            raise UserError("the pooler forwards to one server; the database URL names several hosts")
        user_kwargs = database.os_user_kwargs()
        self.folder = scratch.folder("pgbouncer")
        user = server.get("user") or "postgres"
        (self.folder / "users.txt").write_text(f'"{user}" ""\n')
        port = database.free_port()
        ini = self.folder / "pgbouncer.ini"
        ini.write_text(_ini(server, port, self.mode, self.pool_size, self.folder))
        if user_kwargs:
            for path in (self.folder, *self.folder.iterdir()):
                shutil.chown(path, user_kwargs["user"], user_kwargs["group"])
        self.process = subprocess.Popen([binary(), str(ini)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, cwd="/", preexec_fn=_die_with_harness,
                                        start_new_session=True, **user_kwargs)
        params = conninfo.conninfo_to_dict(self.url)
        params.pop("hostaddr", None)
        pooled = conninfo.make_conninfo("", **{**params, "host": "127.0.0.1", "port": str(port)})
        self._wait_until_it_answers(pooled)
        return pooled

    def _wait_until_it_answers(self, pooled: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while True:
            if self.process.poll() is not None:
                said = self._log_tail() or f"exit code {self.process.returncode}"
                self.stop()
                raise UserError(f"pgbouncer could not start: {said}")
            try:
                with psycopg.connect(pooled, connect_timeout=2, autocommit=True) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError as exc:
                if time.monotonic() > deadline:
                    self.stop()
                    raise UserError(f"pgbouncer did not answer within {START_TIMEOUT_SECONDS:g} s: "
                                    f"{str(exc).strip().splitlines()[-1]}") from None
                time.sleep(0.05)

    def _log_tail(self) -> str:
        log = self.folder / "pgbouncer.log" if self.folder is not None else None
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()] \
            if log is not None and log.exists() else []
        return lines[-1].strip() if lines else ""

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGINT)  # PgBouncer's immediate shutdown
            try:
                process.wait(STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(STOP_TIMEOUT_SECONDS)
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None


@contextlib.contextmanager
def pooled(url: str, mode: str, pool_size: int) -> Iterator[Pooled]:
    """The URL to race through: url itself for mode none, else a PgBouncer in that mode, stopped on the way out."""
    check_mode(mode)
    if mode == "none":
        yield Pooled(url, mode)
        return
    pooler = Pooler(url, mode, pool_size)
    try:
        yield Pooled(pooler.start(), mode, {"default_pool_size": pool_size, "listen_addr": "127.0.0.1",
                                            "auth_type": "trust"})
    finally:
        pooler.stop()
