"""The claim service as its own process on 127.0.0.1: started, waited for, stopped (also on errors).

    with running_service(dsn, protocol="lease", lease_s=5) as service:
        service.url            # http://127.0.0.1:PORT
        service.kill()         # SIGKILL, as a crash would
        service.restart()      # a new process on the same port (same key, same database)

The process dies with the harness (PR_SET_PDEATHSIG, SIGKILL of the harness
included) and is stopped with SIGTERM, then SIGKILL, on the way out.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from harness.errors import UserError
from harness.service import cipher
from harness.service.app import DEFAULT_POOL_SIZE
from harness.service.queries import check_protocol

START_TIMEOUT_SECONDS = 30.0
STOP_TIMEOUT_SECONDS = 5.0
HOST = "127.0.0.1"


def _package_env(key: bytes) -> dict:
    package_root = str(Path(__file__).resolve().parents[2])  # the service runs this very package
    return {**os.environ, cipher.KEY_ENVIRONMENT: key.decode(),
            "PYTHONPATH": os.pathsep.join(filter(None, (package_root, os.environ.get("PYTHONPATH"))))}


def health(url: str, timeout: float = 2.0) -> dict:
    """GET /health as JSON (raises OSError when the service does not answer)."""
    with urllib.request.urlopen(f"{url}/health", timeout=timeout) as answer:
        return json.loads(answer.read())


@dataclass
class ServiceHandle:
    """A running service process: where it listens, and how to stop, kill or restart it."""

    dsn: str
    protocol: str
    lease_s: float
    key: bytes
    pool_size: int = DEFAULT_POOL_SIZE
    port: int = 0
    hold_dir: str | None = None  # fault injection: where AnswerHold's arms are (harness.service.app)
    process: subprocess.Popen | None = None
    _stderr: object = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def start(self) -> "ServiceHandle":
        if self.process is not None:
            raise RuntimeError("the service is already running")
        self._stderr = tempfile.TemporaryFile("w+")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "harness.service", "--dsn", self.dsn, "--protocol", self.protocol,
             "--lease-s", repr(float(self.lease_s)), "--pool-size", str(self.pool_size), "--host", HOST,
             "--port", str(self.port), "--parent-pid", str(os.getpid()),
             *(["--hold-dir", str(self.hold_dir)] if self.hold_dir else [])],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._stderr, close_fds=True,
            env=_package_env(self.key), start_new_session=True)  # a Ctrl-C reaches it through our cleanup
        try:
            self.port = self._listening_port()
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def _last_words(self) -> str:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(STOP_TIMEOUT_SECONDS)
        self._stderr.seek(0)
        said = [line.strip() for line in self._stderr.read().splitlines() if line.strip()]
        return said[-1] if said else f"exit code {self.process.returncode}"

    def _listening_port(self) -> int:
        ready, _, _ = select.select([self.process.stdout], [], [], START_TIMEOUT_SECONDS)
        line = self.process.stdout.readline().decode(errors="replace").strip() if ready else ""
        if not line.startswith("listening "):
            reason = self._last_words() if ready else f"no answer within {START_TIMEOUT_SECONDS:g} s"
            raise UserError(f"the claim service could not start: {reason}")
        return int(line.split()[1])

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while True:
            if self.process.poll() is not None:
                raise UserError(f"the claim service exited before it was ready: {self._last_words()}")
            with contextlib.suppress(OSError, ValueError):
                if health(self.url).get("ok"):
                    return
            if time.monotonic() > deadline:
                raise UserError(f"the claim service did not answer /health within {START_TIMEOUT_SECONDS:g} s")
            time.sleep(0.05)

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL after a grace period (idempotent); the process's exit code."""
        process, self.process = self.process, None
        if process is None:
            return None
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(STOP_TIMEOUT_SECONDS)
        self._close_streams(process)
        return process.returncode

    def kill(self) -> None:
        """SIGKILL, as a crash would: nothing of the service runs its cleanup."""
        process, self.process = self.process, None
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        process.wait(STOP_TIMEOUT_SECONDS)
        self._close_streams(process)

    def restart(self) -> "ServiceHandle":
        """A new process on the same port, same database, protocol and key (the old one killed if still up)."""
        self.kill()
        return self.start()

    def _close_streams(self, process: subprocess.Popen) -> None:
        if process.stdout is not None:
            process.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def __enter__(self) -> "ServiceHandle":
        return self if self.process is not None else self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


@contextlib.contextmanager
def running_service(dsn: str, protocol: str = "none", lease_s: float = 30.0, key: bytes | None = None,
                    pool_size: int = DEFAULT_POOL_SIZE, port: int = 0,
                    hold_dir: str | None = None) -> Iterator[ServiceHandle]:
    """A started, healthy service; stopped on the way out, also on errors."""
    check_protocol(protocol, lease_s)
    handle = ServiceHandle(dsn, protocol, float(lease_s), key or cipher.new_key(), pool_size, port, hold_dir)
    handle.start()
    try:
        yield handle
    finally:
        handle.stop()
