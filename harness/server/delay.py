"""A network round trip on loopback, made in user space: a TCP proxy that delays each direction by half of it.

This machine's kernel has no netem qdisc, so `tc ... netem delay` cannot slow
the loopback. Instead the race's workers connect to a proxy that forwards
every connection to the server and holds each chunk of bytes, in either
direction, for half the round trip from the moment it was read. Every chunk
keeps its own deadline (a burst is not delayed cumulatively) and leaves in the
order it arrived, so no chunk overtakes an earlier one; each chunk read is
written as one piece, so message boundaries stay where they arrived. What the
workers and the server see is a slower wire and nothing else: every protocol
message of every statement is delayed, whatever the client code does
(several statements, transactions, retries, pipelining), and a backend waits
for the next message exactly as it would behind a real network.

The proxy is one process with one asyncio event loop. Deadlines are kept by a
timerfd (nanosecond resolution) rather than the loop's own timers, which wake
at whole milliseconds (epoll's timeout) and would add up to a millisecond to
every leg. Since every chunk is held for the same time, arrival order is
deadline order: one queue for all connections, one timer armed for its head.

It dies with the process that started it (PR_SET_PDEATHSIG, SIGKILL
included), also stops when its standard input closes, and on SIGTERM prints
one JSON line of what it did: chunks and bytes forwarded, its CPU time, how
late chunks left (the measure of whether the proxy kept up) and its peak
memory. TCP connection setup is not delayed (workers connect before the race
starts, outside every measured window).

`DelayedStatements` is the same delay made inside a worker instead (sleep half
the round trip before sending each statement and after reading its result);
the tests race both and check they agree. The race uses the proxy, which needs
no knowledge of how a strategy talks to the server.

    python -m harness.server.delay --target 127.0.0.1:5432 --rtt-ms 5 --parent-pid PID
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import contextlib
import ctypes
import json
import os
import resource
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

MAX_RTT_MS = 1000.0  # beyond a second a "network" is an outage; a race would only take for ever
START_TIMEOUT_SECONDS = 10.0
STOP_TIMEOUT_SECONDS = 5.0
# Bytes of one direction held in the delay line before its sender is paused: a large result streams through
# at the rate the delay allows instead of piling up in the proxy.
PENDING_LIMIT_BYTES = 4 * 2**20
LATENESS_BOUNDS_US = (50, 100, 250, 500, 1000, 5000)  # histogram of how late chunks left, in microseconds
_LATENESS_BOUNDS_NS = tuple(bound * 1000 for bound in LATENESS_BOUNDS_US)
_PR_SET_PDEATHSIG = 1
_CLOCK_MONOTONIC = 1  # time.monotonic_ns reads this clock on Linux
_TFD_TIMER_ABSTIME = 1
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_CLOEXEC = os.O_CLOEXEC


def check_rtt(rtt_ms: float) -> None:
    """One line for a round trip the harness will not make."""
    from harness.errors import UserError

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

    from harness.errors import UserError

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
        from harness.errors import UserError

        target = _target(self.url)
        self._stderr = tempfile.TemporaryFile("w+")
        # the proxy runs this very package, wherever the harness was started from
        package_root = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (package_root, os.environ.get("PYTHONPATH"))))}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "harness.server.delay", "--target", target, "--rtt-ms", repr(self.rtt_ms),
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
def network_delay(url: str, rtt_ms: float) -> Iterator[Network]:
    """The URL to race through: url itself at rtt 0 (no proxy at all), else a delay proxy, stopped on the way out."""
    check_rtt(rtt_ms)
    if rtt_ms == 0:
        yield Network(url, 0.0)
        return
    proxy = DelayProxy(url, rtt_ms)
    try:
        network = Network(proxy.start(), float(rtt_ms))
        yield network
    finally:
        report = proxy.stop()
    network.proxy = report


# --------------------------------------------------------------------------- the proxy process


class _Timerfd:
    """A kernel timer the event loop can wait on, armed to an absolute monotonic time in nanoseconds."""

    def __init__(self):
        self._libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self._libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "timerfd_create failed")
        self._spec = (ctypes.c_long * 4)()  # it_interval (0, 0), it_value (seconds, nanoseconds)

    def arm_at(self, deadline_ns: int) -> None:
        self._spec[2], self._spec[3] = divmod(max(deadline_ns, 1), 1_000_000_000)
        if self._libc.timerfd_settime(self.fd, _TFD_TIMER_ABSTIME, ctypes.byref(self._spec), None) != 0:
            raise OSError(ctypes.get_errno(), "timerfd_settime failed")

    def clear(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.read(self.fd, 8)


class _Account:
    """What the proxy did, kept as plain counters: cheap enough to update per chunk."""

    def __init__(self):
        self.connections = 0
        self.open_connections = 0
        self.max_open_connections = 0
        self.failed_connections = 0
        self.chunks = {"to_server": 0, "to_client": 0}
        self.bytes = {"to_server": 0, "to_client": 0}
        self.late_ns_total = 0
        self.late_ns_max = 0
        self.lateness_counts = [0] * (len(LATENESS_BOUNDS_US) + 1)
        self.max_pending_bytes = 0
        self.cpu_at_ready = 0.0

    def late(self, late_ns: int) -> None:
        self.late_ns_total += late_ns
        if late_ns > self.late_ns_max:
            self.late_ns_max = late_ns
        self.lateness_counts[bisect.bisect_right(_LATENESS_BOUNDS_NS, late_ns)] += 1

    def report(self, rtt_ms: float) -> dict:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        cpu = usage.ru_utime + usage.ru_stime - self.cpu_at_ready
        chunks = sum(self.chunks.values())
        labels = [f"<{b}us" for b in LATENESS_BOUNDS_US] + [f">={LATENESS_BOUNDS_US[-1]}us"]
        return {
            "rtt_ms": rtt_ms, "connections": self.connections, "max_open_connections": self.max_open_connections,
            "failed_connections": self.failed_connections, "chunks": self.chunks, "bytes": self.bytes,
            "cpu_seconds": cpu, "cpu_us_per_chunk": cpu * 1e6 / chunks if chunks else None,
            "late_us_mean": self.late_ns_total / 1000 / chunks if chunks else None,
            "late_us_max": self.late_ns_max / 1000,
            "lateness": dict(zip(labels, self.lateness_counts)),
            "max_pending_bytes": self.max_pending_bytes, "peak_rss_bytes": _peak_rss_bytes(),
        }


def _peak_rss_bytes() -> int | None:
    """This process's peak resident memory since it started (ru_maxrss would carry the harness's over exec)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


class _DelayLine:
    """Every chunk in flight, oldest first. Each is due half the round trip after it was read, so the queue is
    in deadline order; one timer is armed for its head."""

    def __init__(self, loop: asyncio.AbstractEventLoop, half_ns: int, account: _Account):
        self.half_ns = half_ns
        self.account = account
        self.queue: collections.deque = collections.deque()
        self.timer = _Timerfd() if half_ns else None
        if self.timer is not None:
            loop.add_reader(self.timer.fd, self._deliver_due)

    def push(self, pipe: "_Pipe", data: bytes | None) -> None:
        """data None: the end of the stream, delivered after everything read before it."""
        if not self.half_ns:
            pipe.deliver(data)
            return
        due = time.monotonic_ns() + self.half_ns
        self.queue.append((due, pipe, data))
        if len(self.queue) == 1:
            self.timer.arm_at(due)

    def _deliver_due(self) -> None:
        self.timer.clear()
        queue, account = self.queue, self.account
        now = time.monotonic_ns()
        while queue and queue[0][0] <= now:
            due, pipe, data = queue.popleft()
            account.late(now - due)
            pipe.deliver(data)
        if queue:
            self.timer.arm_at(queue[0][0])


class _Pipe:
    """One direction of one connection: from the side that reads it to the transport that writes it."""

    __slots__ = ("direction", "source", "destination", "pending_bytes", "blocked", "account", "connection")

    def __init__(self, direction: str, source: "_Side", account: _Account, connection: "_Connection"):
        self.direction = direction
        self.source = source
        self.destination: asyncio.Transport | None = None
        self.pending_bytes = 0
        self.blocked: set[str] = set()  # why the source is not being read: "line full", "writer full"
        self.account = account
        self.connection = connection

    def sent(self, size: int) -> None:
        self.pending_bytes += size
        if self.pending_bytes > self.account.max_pending_bytes:
            self.account.max_pending_bytes = self.pending_bytes
        if self.pending_bytes > PENDING_LIMIT_BYTES:
            self.block("line full")

    def deliver(self, data: bytes | None) -> None:
        if data is None:
            self.connection.direction_ended(self)
            return
        self.pending_bytes -= len(data)
        self.account.chunks[self.direction] += 1
        self.account.bytes[self.direction] += len(data)
        if self.destination is not None and not self.destination.is_closing():
            self.destination.write(data)
        if self.pending_bytes <= PENDING_LIMIT_BYTES // 2:
            self.unblock("line full")

    def block(self, reason: str) -> None:
        if not self.blocked:
            self.source.pause()
        self.blocked.add(reason)

    def unblock(self, reason: str) -> None:
        if reason in self.blocked:
            self.blocked.discard(reason)
            if not self.blocked:
                self.source.resume()


class _Side(asyncio.Protocol):
    """One socket of a proxied connection (the client's or the server's)."""

    def __init__(self, connection: "_Connection", outbound: "_Pipe | None" = None):
        self.connection = connection
        self.transport: asyncio.Transport | None = None
        self.outbound = outbound  # the pipe that carries what this side reads
        self.inbound: _Pipe | None = None  # the pipe that writes to this side
        self.ended = False

    def connection_made(self, transport) -> None:
        self.transport = transport

    def pause(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()

    def resume(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        self.outbound.sent(len(data))
        self.connection.line.push(self.outbound, data)

    def eof_received(self) -> bool:
        self._end()
        return True  # keep writing to this side what is still in flight towards it

    def connection_lost(self, exc) -> None:
        self._end()
        self.connection.side_lost(self)

    def pause_writing(self) -> None:  # this side's socket is full: stop reading what feeds it
        if self.inbound is not None:
            self.inbound.block("writer full")

    def resume_writing(self) -> None:
        if self.inbound is not None:
            self.inbound.unblock("writer full")

    def _end(self) -> None:
        if not self.ended and self.outbound is not None:
            self.ended = True
            self.connection.line.push(self.outbound, None)


class _ClientSide(_Side):
    """The side a worker connects to: opens the server side, and reads nothing until it is there."""

    def __init__(self, proxy: "_Proxy"):
        connection = _Connection(proxy)
        super().__init__(connection)
        connection.client = self
        self.outbound = _Pipe("to_server", self, proxy.account, connection)

    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.pause_reading()
        self.connection.opened()
        asyncio.get_running_loop().create_task(self.connection.open_server_side())


class _Connection:
    """A client socket and its server socket, joined by two pipes."""

    def __init__(self, proxy: "_Proxy"):
        self.proxy = proxy
        self.line = proxy.line
        self.client: _ClientSide | None = None
        self.server: _Side | None = None
        self.ended_directions = 0
        self.closed = False

    def opened(self) -> None:
        account = self.proxy.account
        account.connections += 1
        account.open_connections += 1
        account.max_open_connections = max(account.max_open_connections, account.open_connections)

    async def open_server_side(self) -> None:
        loop = asyncio.get_running_loop()
        to_client = None

        def server_side():
            nonlocal to_client
            side = _Side(self)
            to_client = _Pipe("to_client", side, self.proxy.account, self)
            to_client.destination = self.client.transport
            side.outbound = to_client
            return side

        try:
            if self.proxy.target.startswith("/"):
                transport, side = await loop.create_unix_connection(server_side, self.proxy.target)
            else:
                host, port = self.proxy.target.rsplit(":", 1)
                transport, side = await loop.create_connection(server_side, host, int(port))
        except OSError:
            self.proxy.account.failed_connections += 1
            self.close()
            return
        self.server = side
        if self.closed or self.client.ended or self.client.transport.is_closing():  # it left while we connected
            self.close()
            return
        self.client.outbound.destination = transport
        side.inbound, self.client.inbound = self.client.outbound, to_client
        self.client.resume()

    def direction_ended(self, pipe: _Pipe) -> None:
        """The end of one direction reached its destination: half-close it; both ended, close all."""
        self.ended_directions += 1
        destination = pipe.destination
        if destination is not None and not destination.is_closing():
            if destination.can_write_eof():
                destination.write_eof()
            else:
                destination.close()
        if self.ended_directions >= 2:
            self.close()

    def side_lost(self, side: _Side) -> None:
        if side is self.client and self.server is None:
            self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.proxy.account.open_connections -= 1
        for side in (self.client, self.server):
            if side is not None and side.transport is not None:
                side.transport.close()  # writes what is buffered, then closes


class _Proxy:
    def __init__(self, target: str, rtt_ms: float, loop: asyncio.AbstractEventLoop):
        self.target = target
        self.rtt_ms = rtt_ms
        self.account = _Account()
        self.line = _DelayLine(loop, int(round(rtt_ms * 1e6 / 2)), self.account)


def _die_with_parent(parent_pid: int) -> None:
    """SIGKILL from the kernel when the harness dies; exit now if it already has."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:
        os._exit(1)


def _raise_open_file_limit() -> None:
    """Two sockets per connection: 100 workers and more need more than a small soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 65536, hard))


async def _serve(target: str, rtt_ms: float) -> dict:
    loop = asyncio.get_running_loop()
    proxy = _Proxy(target, rtt_ms, loop)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)

    def stdin_readable():
        try:
            closed = not os.read(sys.stdin.fileno(), 4096)
        except OSError:
            closed = True
        if closed:
            loop.remove_reader(sys.stdin.fileno())
            stop.set()

    loop.add_reader(sys.stdin.fileno(), stdin_readable)
    server = await loop.create_server(lambda: _ClientSide(proxy), "127.0.0.1", 0, backlog=1024,
                                      family=socket.AF_INET)
    port = server.sockets[0].getsockname()[1]
    usage = resource.getrusage(resource.RUSAGE_SELF)
    proxy.account.cpu_at_ready = usage.ru_utime + usage.ru_stime  # its start-up is not its cost per chunk
    print(f"listening {port}", flush=True)
    await stop.wait()
    server.close()
    return proxy.account.report(rtt_ms)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m harness.server.delay", description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True, help="host:port or a Unix socket path")
    parser.add_argument("--rtt-ms", type=float, required=True)
    parser.add_argument("--parent-pid", type=int, required=True)
    args = parser.parse_args(argv)
    _die_with_parent(args.parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the harness stops it, after the race it serves
    _raise_open_file_limit()
    if not 0 <= args.rtt_ms <= MAX_RTT_MS:
        print(f"rtt must be between 0 and {MAX_RTT_MS:g} ms", file=sys.stderr)
        return 2
    try:
        report = asyncio.run(_serve(args.target, args.rtt_ms))
    except OSError as exc:
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
