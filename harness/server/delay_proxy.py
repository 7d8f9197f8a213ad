"""A network round trip on loopback, made in user space: a TCP proxy that delays each direction by half of it.

This machine's kernel has no netem qdisc, so `tc ... netem delay` cannot slow
the loopback. Instead the race's workers connect to a proxy that forwards
every connection to the server and holds each chunk of bytes, in either
direction, for half the round trip from the moment it arrived. Every chunk
keeps its own deadline (a burst is not delayed cumulatively) and leaves in the
order it arrived, so no chunk overtakes an earlier one; each chunk read is
written as one piece, so message boundaries stay where they arrived. What the
workers and the server see is a slower wire and nothing else: every protocol
message of every statement is delayed, whatever the client code does
(several statements, transactions, retries, pipelining), and a backend waits
for the next message exactly as it would behind a real network.

A chunk's half round trip starts when the kernel received it, not when the
proxy got round to reading it: each socket asks for the kernel's arrival
stamp (SO_TIMESTAMPNS, read with recvmsg). On two busy CPUs the proxy, one
process serving every connection, often waits for a CPU; counted from the
read, that wait would add to every leg of every connection (it did: a
guarded race of 32 workers at 5 ms won in 17 ms instead of the 11-12 ms a
delay inside the workers gives). Counted from arrival, the wait is part of
the hold, and only what exceeds half the round trip shows as lateness. This
is why the loop is a plain epoll loop over non-blocking sockets rather than
asyncio, whose protocols are handed the bytes without the stamp. Deadlines
are kept by a timerfd (nanosecond resolution), not by epoll's timeout, which
counts whole milliseconds. Chunks wait in one heap ordered by deadline, then
by arrival, and a chunk's deadline is never earlier than the one before it
from the same socket, so none overtakes an earlier one.

It dies with the process that started it (PR_SET_PDEATHSIG, SIGKILL
included), also stops when its standard input closes, and on SIGTERM prints
one JSON line of what it did: chunks and bytes forwarded, its CPU time (60 to
180 us per chunk in races on this machine, two thirds of it in the kernel:
the extra loopback TCP hop and a wake-up per chunk, which busy connections
share; an asyncio loop and a Unix-socket hop to the server cost the same),
how long bytes waited to be read, how late chunks left (the measure of
whether the proxy kept up) and its peak memory (about 17 MiB). TCP connection
setup is not delayed (workers connect before the race starts, outside every
measured window).

The harness starts and stops it with harness.server.delay.DelayProxy:

    python -m harness.server.delay_proxy --target 127.0.0.1:5432 --rtt-ms 5 --parent-pid PID
"""

from __future__ import annotations

import argparse
import bisect
import collections
import contextlib
import ctypes
import errno
import heapq
import json
import os
import resource
import select
import signal
import socket
import struct
import sys
import time

from harness.children import die_with_parent
from harness.server.delay import MAX_RTT_MS

# Bytes of one direction held in the delay line before its sender is paused: a large result streams through
# at the rate the delay allows instead of piling up in the proxy.
PENDING_LIMIT_BYTES = 4 * 2**20
LATENESS_BOUNDS_US = (50, 100, 250, 500, 1000, 5000)  # histogram of how late chunks left, in microseconds
_LATENESS_BOUNDS_NS = tuple(bound * 1000 for bound in LATENESS_BOUNDS_US)
_CLOCK_MONOTONIC = 1  # time.monotonic_ns reads this clock on Linux
_TFD_TIMER_ABSTIME = 1
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_CLOEXEC = os.O_CLOEXEC
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # the kernel stamps each packet's arrival (CLOCK_REALTIME)
_TIMESTAMP_SPACE = socket.CMSG_SPACE(16)
_READ_SIZE = 262144


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
        self.waited_ns_total = 0  # from the kernel's arrival stamp to the proxy's read
        self.waited_ns_max = 0
        self.reads = 0
        self.lateness_counts = [0] * (len(LATENESS_BOUNDS_US) + 1)
        self.max_pending_bytes = 0
        self.cpu_at_ready = 0.0
        self.system_cpu_at_ready = 0.0

    def late(self, late_ns: int) -> None:
        self.late_ns_total += late_ns
        if late_ns > self.late_ns_max:
            self.late_ns_max = late_ns
        self.lateness_counts[bisect.bisect_right(_LATENESS_BOUNDS_NS, late_ns)] += 1

    def waited(self, waited_ns: int) -> None:
        self.reads += 1
        self.waited_ns_total += waited_ns
        if waited_ns > self.waited_ns_max:
            self.waited_ns_max = waited_ns

    def report(self, rtt_ms: float) -> dict:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        cpu = usage.ru_utime + usage.ru_stime - self.cpu_at_ready
        chunks = sum(self.chunks.values())
        labels = [f"<{b}us" for b in LATENESS_BOUNDS_US] + [f">={LATENESS_BOUNDS_US[-1]}us"]
        return {
            "rtt_ms": rtt_ms, "connections": self.connections, "max_open_connections": self.max_open_connections,
            "failed_connections": self.failed_connections, "chunks": self.chunks, "bytes": self.bytes,
            "cpu_seconds": cpu, "cpu_us_per_chunk": cpu * 1e6 / chunks if chunks else None,
            "system_cpu_seconds": usage.ru_stime - self.system_cpu_at_ready,  # mostly loopback TCP, in the kernel
            "late_us_mean": self.late_ns_total / 1000 / chunks if chunks else None,
            "late_us_max": self.late_ns_max / 1000,
            # how long bytes waited in the kernel for the proxy to read them (part of the hold, not added to it)
            "read_wait_us_mean": self.waited_ns_total / 1000 / self.reads if self.reads else None,
            "read_wait_us_max": self.waited_ns_max / 1000,
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


class _Stop(Exception):
    """SIGTERM: finish the report and exit."""


class _Endpoint:
    """One socket of a proxied connection: what it reads goes to its peer, half a round trip later."""

    __slots__ = ("sock", "fd", "peer", "direction", "mask", "connecting", "eof_read", "closed", "write_shut",
                 "shut_after_flush", "outbuf", "out_bytes", "in_line_bytes", "paused_line", "paused_writer", "last_due")

    def __init__(self, sock: socket.socket, direction: str):
        self.sock = sock
        self.fd = sock.fileno()
        self.peer: _Endpoint | None = None
        self.direction = direction  # of what this endpoint reads: "to_server" or "to_client"
        self.mask = 0  # the epoll events it is registered for
        self.connecting = False
        self.eof_read = False
        self.closed = False
        self.write_shut = False
        self.shut_after_flush = False
        self.outbuf: collections.deque = collections.deque()  # what its socket would not take yet
        self.out_bytes = 0
        self.in_line_bytes = 0  # read from it and still in the delay line
        self.paused_line = False
        self.paused_writer = False
        self.last_due = 0  # the deadline of the last chunk read from it: the next is never earlier

    def wanted_mask(self) -> int:
        if self.closed:
            return 0
        if self.connecting:
            return select.EPOLLOUT
        reading = not (self.eof_read or self.paused_line or self.paused_writer or self.peer is None)
        return (select.EPOLLIN if reading else 0) | (select.EPOLLOUT if self.out_bytes else 0)


class _Proxy:
    """One epoll loop: accept, connect, read (with the kernel's arrival stamp), hold, write."""

    def __init__(self, target: str, rtt_ms: float):
        self.half_ns = int(round(rtt_ms * 1e6 / 2))
        self.rtt_ms = rtt_ms
        self.account = _Account()
        self.epoll = select.epoll()
        self.line: list = []  # a heap of (due ns, arrival order, source endpoint, bytes or None for the end)
        self.arrivals = 0
        self.endpoints: dict[int, _Endpoint] = {}
        self.timer = _Timerfd() if self.half_ns else None
        if target.startswith("/"):
            self.target_family, self.target_address = socket.AF_UNIX, target
        else:
            host, port = target.rsplit(":", 1)
            family, _, _, _, address = socket.getaddrinfo(host.strip("[]"), int(port), type=socket.SOCK_STREAM)[0]
            self.target_family, self.target_address = family, address
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(1024)
        self.listener.setblocking(False)
        self.port = self.listener.getsockname()[1]

    # ------------------------------------------------------------------ the loop

    def run(self) -> None:
        """Until SIGTERM or the end of standard input."""
        epoll, endpoints, read, deliver_due = self.epoll, self.endpoints, self._read, self._deliver_due
        listener_fd = self.listener.fileno()
        timer_fd = self.timer.fd if self.timer is not None else -1
        stdin_fd = sys.stdin.fileno()
        epoll.register(listener_fd, select.EPOLLIN)
        with contextlib.suppress(PermissionError):  # a pipe from the harness; a file cannot be watched
            epoll.register(stdin_fd, select.EPOLLIN)
        if self.timer is not None:
            epoll.register(timer_fd, select.EPOLLIN)
        while True:
            for fd, events in epoll.poll():
                endpoint = endpoints.get(fd)
                if endpoint is not None:
                    if events & select.EPOLLOUT:
                        self._writable(endpoint)
                    if events & (select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR) and not endpoint.closed:
                        if endpoint.mask & select.EPOLLIN:
                            read(endpoint)
                        elif not events & select.EPOLLIN:  # hung up while not being read: nothing left to do
                            self._abort(endpoint)
                elif fd == timer_fd:
                    deliver_due()
                elif fd == listener_fd:
                    self._accept()
                elif fd == stdin_fd:
                    try:
                        if not os.read(stdin_fd, 4096):
                            return
                    except OSError:
                        return

    def _update(self, endpoint: _Endpoint) -> None:
        mask = endpoint.wanted_mask()
        if mask != endpoint.mask and not endpoint.closed:
            self.epoll.modify(endpoint.fd, mask)
            endpoint.mask = mask

    # ------------------------------------------------------------------ connections

    def _accept(self) -> None:
        while True:
            try:
                client_sock, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # out of files, for instance: the client sees its connection refused
                return
            client_sock.setblocking(False)
            client_sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            server_sock = socket.socket(self.target_family, socket.SOCK_STREAM)
            server_sock.setblocking(False)
            if self.target_family != socket.AF_UNIX:
                server_sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for sock in (client_sock, server_sock):
                with contextlib.suppress(OSError):  # without it a chunk's hold starts when it is read
                    sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
            client, server = _Endpoint(client_sock, "to_server"), _Endpoint(server_sock, "to_client")
            client.peer, server.peer = server, client
            account = self.account
            account.connections += 1
            account.open_connections += 1
            account.max_open_connections = max(account.max_open_connections, account.open_connections)
            for endpoint in (client, server):
                self.endpoints[endpoint.fd] = endpoint
                self.epoll.register(endpoint.fd, 0)
            error = server_sock.connect_ex(self.target_address)
            if error in (0, errno.EISCONN):
                self._update(client)
                self._update(server)
            elif error in (errno.EINPROGRESS, errno.EAGAIN):
                server.connecting = True  # the client is not read until the server side is there
                self._update(server)
            else:
                self.account.failed_connections += 1
                self._abort(client)

    def _connected(self, server: _Endpoint) -> None:
        server.connecting = False
        if server.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
            self.account.failed_connections += 1
            self._abort(server)
            return
        self._update(server)
        self._update(server.peer)

    def _abort(self, endpoint: _Endpoint) -> None:
        """Close both sockets of a connection now; what is still in the line for it is dropped on delivery."""
        if endpoint.closed:
            return
        self.account.open_connections -= 1
        for side in (endpoint, endpoint.peer):
            if not side.closed:
                side.closed = True
                self.endpoints.pop(side.fd, None)
                with contextlib.suppress(OSError, ValueError):
                    self.epoll.unregister(side.fd)
                side.sock.close()

    def _finish_if_done(self, endpoint: _Endpoint) -> None:
        """Both directions ended and written out: close the connection."""
        if endpoint.write_shut and endpoint.peer.write_shut:
            self._abort(endpoint)

    # ------------------------------------------------------------------ moving bytes

    def _read(self, source: _Endpoint) -> None:
        try:
            data, stamps, _, _ = source.sock.recvmsg(_READ_SIZE, _TIMESTAMP_SPACE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # reset: the other side sees it as an end
            data, stamps = b"", None
        if data:
            source.in_line_bytes += len(data)
            if source.in_line_bytes > self.account.max_pending_bytes:
                self.account.max_pending_bytes = source.in_line_bytes
            if source.in_line_bytes > PENDING_LIMIT_BYTES:
                source.paused_line = True
                self._update(source)
        else:
            source.eof_read = True
            self._update(source)
            data = None
        if not self.half_ns:
            self._deliver(source, data)
            return
        now = time.monotonic_ns()
        arrived = now
        if stamps:  # the kernel's stamp of the last packet read (CLOCK_REALTIME): on the monotonic clock
            seconds, nanoseconds = struct.unpack_from("qq", stamps[0][2])
            arrived = min(now, seconds * 1_000_000_000 + nanoseconds - (time.time_ns() - time.monotonic_ns()))
        self.account.waited(now - arrived)
        due = max(arrived + self.half_ns, source.last_due)
        source.last_due = due
        line = self.line
        self.arrivals += 1
        heapq.heappush(line, (due, self.arrivals, source, data))
        if line[0][1] == self.arrivals:  # it is the first due: wake up for it
            self.timer.arm_at(due)

    def _deliver_due(self) -> None:
        self.timer.clear()
        line, account, deliver = self.line, self.account, self._deliver
        now = time.monotonic_ns()
        while line and line[0][0] <= now:
            due, _, source, data = heapq.heappop(line)
            account.late(now - due)
            deliver(source, data)
        if line:
            self.timer.arm_at(line[0][0])

    def _deliver(self, source: _Endpoint, data: bytes | None) -> None:
        destination = source.peer
        if data is None:
            if not destination.closed:
                if destination.out_bytes:
                    destination.shut_after_flush = True
                else:
                    self._shut(destination)
            return
        size = len(data)
        source.in_line_bytes -= size
        self.account.chunks[source.direction] += 1
        self.account.bytes[source.direction] += size
        if source.paused_line and source.in_line_bytes <= PENDING_LIMIT_BYTES // 2:
            source.paused_line = False
            self._update(source)
        if destination.closed:
            return
        if destination.out_bytes:  # earlier bytes are still waiting: keep the order
            destination.outbuf.append(data)
            destination.out_bytes += size
        else:
            try:
                sent = destination.sock.send(data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                self._abort(destination)
                return
            if sent == size:
                return
            destination.outbuf.append(data[sent:])
            destination.out_bytes += size - sent
            self._update(destination)
        if destination.out_bytes > PENDING_LIMIT_BYTES and not source.paused_writer:
            source.paused_writer = True
            self._update(source)

    def _writable(self, endpoint: _Endpoint) -> None:
        if endpoint.connecting:
            self._connected(endpoint)
            return
        outbuf = endpoint.outbuf
        while outbuf:
            chunk = outbuf[0]
            try:
                sent = endpoint.sock.send(chunk)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self._abort(endpoint)
                return
            endpoint.out_bytes -= sent
            if sent < len(chunk):
                outbuf[0] = chunk[sent:]
                break
            outbuf.popleft()
        feeder = endpoint.peer
        if feeder.paused_writer and endpoint.out_bytes <= PENDING_LIMIT_BYTES // 2:
            feeder.paused_writer = False
            self._update(feeder)
        if not outbuf and endpoint.shut_after_flush:
            self._shut(endpoint)
            return
        self._update(endpoint)

    def _shut(self, endpoint: _Endpoint) -> None:
        """The end of what goes to endpoint has been written: half-close it, as the sender did."""
        endpoint.write_shut = True
        with contextlib.suppress(OSError):
            endpoint.sock.shutdown(socket.SHUT_WR)
        self._update(endpoint)
        self._finish_if_done(endpoint)


def _raise_open_file_limit() -> None:
    """Two sockets per connection: 100 workers and more need more than a small soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 65536, hard))


def _stop(signum, frame):
    raise _Stop


def _serve(target: str, rtt_ms: float) -> dict:
    proxy = _Proxy(target, rtt_ms)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    proxy.account.cpu_at_ready = usage.ru_utime + usage.ru_stime  # its start-up is not its cost per chunk
    proxy.account.system_cpu_at_ready = usage.ru_stime
    signal.signal(signal.SIGTERM, _stop)
    print(f"listening {proxy.port}", flush=True)
    with contextlib.suppress(_Stop):
        proxy.run()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    return proxy.account.report(rtt_ms)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.server.delay_proxy", description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True, help="host:port or a Unix socket path")
    parser.add_argument("--rtt-ms", type=float, required=True)
    parser.add_argument("--parent-pid", type=int, required=True)
    args = parser.parse_args(argv)
    die_with_parent(args.parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the harness stops it, after the race it serves
    _raise_open_file_limit()
    if not 0 <= args.rtt_ms <= MAX_RTT_MS:
        print(f"rtt must be between 0 and {MAX_RTT_MS:g} ms", file=sys.stderr)
        return 2
    try:
        report = _serve(args.target, args.rtt_ms)
    except OSError as exc:
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
