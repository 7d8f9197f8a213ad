"""A network round trip on loopback: the delay proxy started around a race, and the same delay inside a worker.

The proxy is a process of its own, harness.server.delay_proxy: how it holds every chunk of bytes for half the
round trip, and what it reports when it stops, are told there.

`DelayedStatements` is the same delay made inside a worker instead (sleep half
the round trip before sending each statement and after reading its result);
the tests race both and check they agree. The race uses the proxy: it delays
every byte on the wire, whatever a strategy sends and however (a wrapper
delays only the calls it wraps: not libpq's pipeline or asynchronous calls),
so a new strategy needs no knowledge of the condition, and a run records what
the wire carried. Its price is CPU on the machine under test (about 15% of
one CPU at 4 workers, 50-60% at 32), recorded with every run; a delay inside
the workers sleeps instead. Where the two were raced side by side (guarded,
5 ms, 4 and 32 workers) they agreed within the spread of repeats.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from harness.errors import UserError

MAX_RTT_MS = 1000.0  # beyond a second a "network" is an outage; a race would only take for ever
START_TIMEOUT_SECONDS = 10.0
STOP_TIMEOUT_SECONDS = 5.0


def check_rtt(rtt_ms: float) -> None:
    """One line for a round trip the harness will not make."""
    if not 0 <= rtt_ms <= MAX_RTT_MS:  # also refuses NaN
        raise UserError(f"rtt must be between 0 and {MAX_RTT_MS:g} ms, not {rtt_ms:g}")


# --------------------------------------------------------------------------- inside a worker


class DelayedStatements:
    """A worker's libpq connection with the round trip made on its own side.

    Each statement sleeps half the round trip before it is sent and half after
    its result is read. It delays only the calls it wraps, which is why the race
    uses the proxy; this is the cross-check.
    """

    __slots__ = ("pgconn", "half_seconds")

    def __init__(self, pgconn, rtt_ms: float):
        self.pgconn = pgconn
        self.half_seconds = rtt_ms / 2000.0

    def exec_prepared(self, name, params, *args, **kwargs):
        time.sleep(self.half_seconds)
        result = self.pgconn.exec_prepared(name, params, *args, **kwargs)
        time.sleep(self.half_seconds)
        return result

    def exec_params(self, command, params, *args, **kwargs):
        time.sleep(self.half_seconds)
        result = self.pgconn.exec_params(command, params, *args, **kwargs)
        time.sleep(self.half_seconds)
        return result

    def exec_(self, command):
        time.sleep(self.half_seconds)
        result = self.pgconn.exec_(command)
        time.sleep(self.half_seconds)
        return result

    def __getattr__(self, name):
        return getattr(self.pgconn, name)


# --------------------------------------------------------------------------- the harness's side


@dataclass
class Network:
    """What the workers connect to, and the proxy's own account once it has stopped (None: no proxy)."""

    url: str
    rtt_ms: float
    proxy: dict | None = None


def _proxied_url(url: str, port: int) -> str:
    from psycopg import conninfo

    params = conninfo.conninfo_to_dict(url)
    params.pop("hostaddr", None)
    params.update(host="127.0.0.1", port=str(port))
    return conninfo.make_conninfo("", **params)


def _target(url: str) -> str:
    """host:port, or the server's Unix socket path, from a connection URL."""
    from psycopg import conninfo


    params = conninfo.conninfo_to_dict(url)
    host = params.get("hostaddr") or params.get("host") or "/tmp"
    port = params.get("port") or "5432"
    if "," in host or "," in port:
        raise UserError("the delay proxy forwards to one server; the database URL names several hosts")
    return f"{host}/.s.PGSQL.{port}" if host.startswith("/") else f"{host}:{port}"


class DelayProxy:
    """The proxy process: start() returns the URL to connect through, stop() its account of what it did."""

    def __init__(self, url: str, rtt_ms: float):
        check_rtt(rtt_ms)
        self.url = url
        self.rtt_ms = float(rtt_ms)
        self.process: subprocess.Popen | None = None
        self.port: int | None = None
        self._stderr = None

    def start(self) -> str:
        target = _target(self.url)
        self._stderr = tempfile.TemporaryFile("w+")
        # the proxy runs this very package, wherever the harness was started from
        package_root = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (package_root, os.environ.get("PYTHONPATH"))))}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "harness.server.delay_proxy", "--target", target, "--rtt-ms", repr(self.rtt_ms),
             "--parent-pid", str(os.getpid())],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, close_fds=True, env=env,
            start_new_session=True)  # a Ctrl-C meant for the harness reaches it through the harness's cleanup
        line = self._first_line()
        if not line.startswith("listening "):
            self.stop()
            raise UserError(f"the delay proxy could not start: {line or 'it exited without a word'}")
        self.port = int(line.split()[1])
        return _proxied_url(self.url, self.port)

    def _first_line(self) -> str:
        """The proxy's first line on stdout, or its last word on stderr if it exits or stalls first."""
        assert self.process is not None and self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], START_TIMEOUT_SECONDS)
        line = self.process.stdout.readline().decode(errors="replace").strip() if ready else ""
        if line:
            return line
        if not ready:
            return f"no answer within {START_TIMEOUT_SECONDS:g} s"
        with contextlib.suppress(subprocess.TimeoutExpired):  # it closed its stdout: let it finish saying why
            self.process.wait(STOP_TIMEOUT_SECONDS)
        self._stderr.seek(0)
        said = [text for text in self._stderr.read().splitlines() if text.strip()]
        return said[-1].strip() if said else f"exit code {self.process.returncode}"

    def stop(self) -> dict | None:
        """Stop the proxy (idempotent); what it reported about itself, None if it could not say."""
        process, self.process = self.process, None
        if process is None:
            return None
        report = None
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            out, _ = process.communicate(timeout=STOP_TIMEOUT_SECONDS)
            lines = out.decode(errors="replace").strip().splitlines()
            if lines and lines[-1].startswith("{"):
                report = json.loads(lines[-1])
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(STOP_TIMEOUT_SECONDS)
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        return report

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


@contextlib.contextmanager
def network_delay(url: str, rtt_ms: float, proxy_at_zero: bool = False) -> Iterator[Network]:
    """The URL to race through: url itself at rtt 0 (no proxy at all), else a delay proxy, stopped on the way out.

    proxy_at_zero: the proxy even at rtt 0, forwarding without delay: the baseline a sweep of round trips is
    compared against, so that a longer round trip differs from it only by the delay."""
    check_rtt(rtt_ms)
    if rtt_ms == 0 and not proxy_at_zero:
        yield Network(url, 0.0)
        return
    proxy = DelayProxy(url, rtt_ms)
    try:
        network = Network(proxy.start(), float(rtt_ms))
        yield network
    finally:
        report = proxy.stop()
    network.proxy = report
