"""Where the time goes: what the backends wait on during a race, and how much CPU they got.

Two measurements, taken side by side:

wait events
    `ActivitySampler` polls pg_stat_activity about every 10 ms from one extra
    connection and keeps, for every backend whose application_name starts with
    a prefix, its state and wait event. `classify` puts each such sample into
    one of WAIT_CLASSES; `wait_shares` gives the share of sampled backend time
    per class.
CPU and run queue
    `schedstat_snapshot` reads /proc/<pid>/schedstat of the backends (only
    meaningful when the server is a process of this host, see
    `server_is_local`). Taken at the start barrier and at the end, `time_split`
    turns the two snapshots into the share of backend time spent running and
    the share spent runnable but waiting for a CPU. A sampled `CPU` class
    (active, no wait event) is the sum of both: the server cannot tell them apart.

Public API::

    ActivitySampler(url, prefix="claimrace-worker-", interval_seconds=0.01)   # context manager
        .start(); .stop(timeout_seconds=2.0); .samples() -> DataFrame; .stats() -> dict; .error
    classify(state, wait_event_type, wait_event) -> str          # one of WAIT_CLASSES
    wait_shares(samples) -> dict[str, float]                      # class -> share, sums to 1
    event_share(samples, wait_event_type, wait_event) -> float | None   # one wait event's share
    backend_pids(conn, prefix="claimrace-worker-") -> list[int]
    server_is_local(conn) -> bool
    read_schedstat(pid) -> (cpu_ns, run_delay_ns, timeslices) | None
    schedstat_snapshot(pids) -> dict[int, tuple | None]
    schedstat_delta(start, end) -> (cpu_ns, run_delay_ns, timeslices) | None
    share_split(deltas) -> dict                                   # over per-process windows
    time_split(before, after, wall_ns) -> dict
    BackendWatch(list_pids).start(); .stop() -> share_split of backends a harness does not drive
    samples_frame(...) -> DataFrame                                 # no arguments: no samples
    within_windows(samples, windows) -> DataFrame                 # only samples inside each backend's window
    achieved_interval_ms(samples) -> float | None                 # median time between the sampler's ticks
    cpu_bound(client_runnable_share, client_running_share, backend_runnable_share) -> bool | None  # the rule
    cpu_bound_side(...) -> 'clients' | 'server' | 'both' | '' | None   # which side crossed the line
"""

from __future__ import annotations

import statistics
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
import psycopg

from harness.server import database

DEFAULT_PREFIX = "claimrace-worker-"
SAMPLER_APPLICATION_NAME = "claimrace-sampler"
SAMPLE_INTERVAL_SECONDS = 0.01  # what the sampler asks for; what it achieves is stored per race
SAMPLER_STATEMENT_TIMEOUT_MS = 1000  # a sampler query stuck longer than this is a failure, not a sample

# The vocabulary of every sampled backend, in the order reports show it.
WAIT_CLASSES = {
    "CPU": "active with no wait event: running on a CPU or runnable, waiting for one",
    "Lock:tuple": "heavyweight lock on a row version (a second waiter queues behind the first)",
    "Lock:transactionid": "waiting for another transaction to end (a row it changed)",
    "Lock:other": "any other heavyweight lock (relation, advisory, ...)",
    "Client": "waiting for the client: ClientRead/ClientWrite, and idle backends",
    "LWLock": "lightweight lock on a shared structure (buffer mapping, WAL insert, ...)",
    "IO": "waiting for a read, write or fsync",
    "IPC": "waiting for another server process",
    "Other": "anything else (Timeout, Activity, BufferPin, Extension, no state)",
}

SAMPLE_COLUMNS = ("sample_seq", "sample_ns", "pid", "state", "wait_event_type", "wait_event")

# One statement per tick, prepared once. starts_with, not LIKE: a prefix may hold '_' or '%'.
SAMPLE_SQL = """
SELECT pid, state, wait_event_type, wait_event
FROM pg_stat_activity
WHERE starts_with(application_name, %s) AND pid <> pg_backend_pid()
"""


class SamplerError(RuntimeError):
    """The activity sampler could not sample (its connection failed or it would not stop)."""


# --------------------------------------------------------------------------- classes


def classify(state: str | None, wait_event_type: str | None, wait_event: str | None) -> str:
    """One of WAIT_CLASSES for one sampled backend. The wait event decides; without one, the state does."""
    if wait_event_type is None:
        if state in ("active", "fastpath function call"):
            return "CPU"
        if state is not None and state.startswith("idle"):
            return "Client"  # between statements the backend waits for the client, event or not
        return "Other"
    if wait_event_type == "Lock":
        return f"Lock:{wait_event}" if wait_event in ("tuple", "transactionid") else "Lock:other"
    if wait_event_type in ("Client", "LWLock", "IO", "IPC"):
        return wait_event_type
    return "Other"


def wait_shares(samples) -> dict[str, float]:
    """Share of sampled backend time per class, every class present (zeros too); {} without samples.

    samples: a DataFrame with state, wait_event_type and wait_event columns
    (as `ActivitySampler.samples` returns), or an iterable of such triples.
    Each backend-sample counts once, so a share is a share of backend time.
    """
    if isinstance(samples, pd.DataFrame):
        triples = zip(samples["state"], samples["wait_event_type"], samples["wait_event"])
    else:
        triples = samples
    counts = dict.fromkeys(WAIT_CLASSES, 0)
    for state, wait_event_type, wait_event in triples:
        counts[classify(_none(state), _none(wait_event_type), _none(wait_event))] += 1
    total = sum(counts.values())
    return {name: count / total for name, count in counts.items()} if total else {}


def event_share(samples: pd.DataFrame, wait_event_type: str, wait_event: str) -> float | None:
    """The share of sampled backend time spent in one wait event (LWLock BufferContent, say); None without samples."""
    if not len(samples):
        return None
    hit = (samples["wait_event_type"].astype("string") == wait_event_type) & \
          (samples["wait_event"].astype("string") == wait_event)
    return float(hit.fillna(False).mean())


def _none(value):
    """pandas turns SQL NULL into None, NaN or NA; classify wants None."""
    return None if pd.isna(value) else value


# --------------------------------------------------------------------------- the sampler


class ActivitySampler:
    """pg_stat_activity every interval_seconds, from a thread with its own connection.

    Start it after forking worker processes: a fork while this thread runs
    copies a process that is mid-way through something.

    The connection is opened in start(), so an unreachable server fails there,
    in one line, before anything is measured. If the connection fails later,
    the thread ends, `error` holds the exception, stats()["error"] its text,
    and leaving the with-block raises SamplerError (unless the block itself
    raised). stop() never raises: it returns within timeout_seconds, or
    within three times that if it has to cancel a hung query.
    """

    def __init__(self, url: str, prefix: str = DEFAULT_PREFIX, interval_seconds: float = SAMPLE_INTERVAL_SECONDS):
        if interval_seconds <= 0:
            raise ValueError("interval_seconds must be positive")
        self.url = url
        self.prefix = prefix
        self.interval_seconds = interval_seconds
        self.error: BaseException | None = None
        self.backend_pid: int | None = None
        self._conn: psycopg.Connection | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        # Plain lists, one entry per tick: appends are all the thread does besides the query.
        self._sample_ns: list[int] = []
        self._query_ns: list[int] = []
        self._rows: list[list[tuple]] = []
        self._started_ns = self._stopped_ns = 0
        self._backend_schedstat_start = self._backend_schedstat_end = None
        self._local = False
        self._thread_cpu_ns: int | None = None  # set when the thread ends

    def __enter__(self) -> "ActivitySampler":
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        self.stop()
        if exc_type is None and self.error is not None:
            raise SamplerError(f"the activity sampler failed: {_first_line(self.error)}") from self.error

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> "ActivitySampler":
        if self._thread is not None:
            raise RuntimeError("an ActivitySampler samples once; make a new one")
        self._conn = database.connect(self.url, application_name=SAMPLER_APPLICATION_NAME)
        self._conn.execute(f"SET statement_timeout = {SAMPLER_STATEMENT_TIMEOUT_MS}")
        self.backend_pid = self._conn.pgconn.backend_pid
        self._local = server_is_local(self._conn)  # else the pid's /proc is some other process
        self._backend_schedstat_start = read_schedstat(self.backend_pid) if self._local else None
        self._started_ns = time.monotonic_ns()
        self._thread = threading.Thread(target=self._sample_loop, name="claimrace-activity-sampler", daemon=True)
        self._thread.start()
        return self

    def _sample_loop(self) -> None:
        conn = self._conn
        clock = time.monotonic_ns
        add_sample, add_query, add_rows = self._sample_ns.append, self._query_ns.append, self._rows.append
        interval_ns = round(self.interval_seconds * 1e9)
        params = (self.prefix,)
        thread_cpu_start = time.thread_time_ns()
        try:
            cursor = conn.cursor()
            next_tick = clock()
            while not self._stopping.is_set():
                began = clock()
                cursor.execute(SAMPLE_SQL, params, prepare=True)
                rows = cursor.fetchall()
                ended = clock()
                add_sample((began + ended) // 2)  # the server read the table somewhere in between
                add_query(ended - began)
                add_rows(rows)
                # A fixed schedule: ticks stay on start + k * interval; a late tick skips the
                # ticks it missed instead of sampling in a burst to catch up.
                next_tick += interval_ns
                if next_tick <= ended:
                    next_tick += ((ended - next_tick) // interval_ns + 1) * interval_ns
                self._stopping.wait((next_tick - ended) / 1e9)
        except Exception as exc:  # recorded and surfaced by stats() and __exit__, never swallowed
            self.error = exc
        finally:
            self._thread_cpu_ns = time.thread_time_ns() - thread_cpu_start
            self._backend_schedstat_end = read_schedstat(self.backend_pid) if self._local else None
            try:
                conn.close()
            except Exception:
                pass

    def stop(self, timeout_seconds: float = 2.0) -> None:
        """End the thread and close its connection; a query that hangs is cancelled."""
        if self._thread is None or self._stopped_ns:
            return
        self._stopping.set()
        self._thread.join(timeout_seconds)
        if self._thread.is_alive():  # stuck in a query: cancel it, the loop then ends on the error
            try:
                self._conn.cancel_safe(timeout=timeout_seconds)
            except Exception:
                pass
            self._thread.join(timeout_seconds)
            if self._thread.is_alive() and self.error is None:
                self.error = SamplerError(f"the sampler thread did not stop within {3 * timeout_seconds:g} s")
        self._stopped_ns = time.monotonic_ns()

    def samples(self) -> pd.DataFrame:
        """One row per sampled backend per tick, in SAMPLE_COLUMNS."""
        ticks = len(self._rows)  # the thread may append while we read: take what is complete
        seqs, times, pids, states, types, events = [], [], [], [], [], []
        for seq in range(ticks):
            sample_ns = self._sample_ns[seq]
            for pid, state, wait_event_type, wait_event in self._rows[seq]:
                seqs.append(seq)
                times.append(sample_ns)
                pids.append(pid)
                states.append(state)
                types.append(wait_event_type)
                events.append(wait_event)
        return samples_frame(seqs, times, pids, states, types, events)

    def stats(self) -> dict:
        """How the sampling went, and what it cost: its query time and the CPU of its backend and thread."""
        ticks = len(self._rows)
        sample_ns = self._sample_ns[:ticks]
        query_ns = sorted(self._query_ns[:ticks])
        end_ns = self._stopped_ns or time.monotonic_ns()
        wall_ns = end_ns - self._started_ns if self._started_ns else 0
        intervals = [b - a for a, b in zip(sample_ns, sample_ns[1:])]
        backend_cpu_ns = None
        if self._backend_schedstat_start is not None and self._backend_schedstat_end is not None:
            backend_cpu_ns = self._backend_schedstat_end[0] - self._backend_schedstat_start[0]
        return {
            "samples": ticks,
            "backend_samples": sum(len(rows) for rows in self._rows[:ticks]),
            "interval_ms_requested": self.interval_seconds * 1e3,
            "interval_ms_median": statistics.median(intervals) / 1e6 if intervals else None,
            "query_ms_median": statistics.median(query_ns) / 1e6 if query_ns else None,
            "query_ms_p95": query_ns[int(0.95 * (len(query_ns) - 1))] / 1e6 if query_ns else None,
            "query_ms_max": query_ns[-1] / 1e6 if query_ns else None,
            # the share of wall time the sampler spent in its query: its load on client, socket and server
            "query_time_share": sum(query_ns) / wall_ns if wall_ns else None,
            # CPU the sampling took from the machine: its server backend (local servers only) and its thread
            "sampler_backend_cpu_ms": backend_cpu_ns / 1e6 if backend_cpu_ns is not None else None,
            "sampler_thread_cpu_ms": self._thread_cpu_ns / 1e6 if self._thread_cpu_ns is not None else None,
            "wall_seconds": wall_ns / 1e9,
            "error": _first_line(self.error) if self.error is not None else None,
        }


def samples_frame(seqs=(), times=(), pids=(), states=(), types=(), events=()) -> pd.DataFrame:
    """Samples in SAMPLE_COLUMNS with their stored types; no arguments: none (a race without the sampler)."""
    return pd.DataFrame({
        "sample_seq": pd.array(list(seqs), dtype="int64"),
        "sample_ns": pd.array(list(times), dtype="int64"),
        "pid": pd.array(list(pids), dtype="int64"),
        "state": pd.array(list(states), dtype="string"),
        "wait_event_type": pd.array(list(types), dtype="string"),
        "wait_event": pd.array(list(events), dtype="string"),
    })


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


# --------------------------------------------------------------------------- CPU and run queue


def backend_pids(conn: psycopg.Connection, prefix: str = DEFAULT_PREFIX) -> list[int]:
    """The server pids of the connections whose application_name starts with prefix."""
    rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE starts_with(application_name, %s) ORDER BY pid",
                        [prefix]).fetchall()
    return [pid for (pid,) in rows]


def server_is_local(conn: psycopg.Connection) -> bool:
    """Whether conn's backend is a process of this host, so its /proc/<pid> is the backend.

    A server in a container or on another host has pids of its own; the same
    number here may be absent or an unrelated process. The backend's start time
    must match the local process's, to the second.
    """
    pid, backend_start = conn.execute(
        "SELECT pid, extract(epoch FROM backend_start)::float8 FROM pg_stat_activity WHERE pid = pg_backend_pid()"
    ).fetchone()
    try:
        process = psutil.Process(pid)
        return process.name().startswith("postgres") and abs(process.create_time() - backend_start) < 1.0
    except (psutil.Error, OSError):
        return False


def server_cpu_ns(conn) -> int | None:
    """CPU the server's processes have used so far: the postmaster's own, its reaped children's and its live
    children's. The difference over a run, read once the run's backends have exited, is what the run cost the
    server (its backends end with their connections and are reaped into the postmaster's children times)."""
    if not server_is_local(conn):
        return None
    try:
        postmaster = psutil.Process(conn.pgconn.backend_pid).parent()
        # a child reaped between reading the postmaster's times and listing its children would be in neither:
        # the reading counts only where the reaped children's times did not move across it
        for _ in range(20):
            times = postmaster.cpu_times()
            live = _live_children_us(postmaster)
            again = postmaster.cpu_times()
            if (times.children_user, times.children_system) == (again.children_user, again.children_system):
                own = _us(times.user) + _us(times.system) + _us(times.children_user) + _us(times.children_system)
                return (own + live) * 1000
        return None
    except (psutil.Error, AttributeError):
        return None


def _us(seconds: float) -> int:
    """Whole microseconds: sums of float seconds in another order would differ by a rounding."""
    return round(seconds * 1e6)


def _live_children_us(postmaster: psutil.Process) -> int:
    total = 0
    for child in postmaster.children():
        try:
            child_times = child.cpu_times()
            total += _us(child_times.user) + _us(child_times.system)
        except psutil.NoSuchProcess:
            pass  # reaped since the listing: its times are in the postmaster's children times now
    return total


def read_schedstat(pid: int) -> tuple[int, int, int] | None:
    """(ns on a CPU, ns runnable but waiting for one, timeslices) of a local process, None where /proc has none."""
    try:
        fields = Path(f"/proc/{pid}/schedstat").read_text().split()
        return int(fields[0]), int(fields[1]), int(fields[2])
    except (OSError, ValueError, IndexError):
        return None


def schedstat_snapshot(pids) -> dict[int, tuple[int, int, int] | None]:
    """read_schedstat for every pid, None for those this host cannot read."""
    return {pid: read_schedstat(pid) for pid in pids}


class BackendWatch:
    """The run-queue share of backends a harness does not drive itself (a job library's workers open them, some only
    once they start): list_pids() names them, and their schedstat is read at start() and then every interval until
    stop(), keeping each backend's first and last reading, so one that connects late or exits early counts over the
    time it was seen. Each backend's window is from its first reading to its last."""

    def __init__(self, list_pids, interval_seconds: float = 0.1):
        self.list_pids = list_pids
        self.interval_seconds = interval_seconds
        self.first: dict = {}
        self.last: dict = {}
        self.error: BaseException | None = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="claimrace-backend-watch", daemon=True)

    def _read(self) -> None:
        now = time.monotonic_ns()
        pids = set(self.list_pids()) | set(self.first)
        for pid, reading in schedstat_snapshot(pids).items():
            if reading is None:
                continue
            self.first.setdefault(pid, (reading, now))
            self.last[pid] = (reading, now)

    def _poll(self) -> None:
        while not self._stopping.wait(self.interval_seconds):
            try:
                self._read()
            except Exception as error:  # a watch that lost its readings measured nothing: stop() says None
                self.error = error
                return

    def start(self) -> BackendWatch:
        self._read()
        self._thread.start()
        return self

    def stop(self) -> dict:
        """share_split over the backends watched: running_share and runnable_share (None where none was read)."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(5)
        if self.error is not None:
            return share_split([])
        self._read()
        deltas = []
        for pid, (start, began_ns) in self.first.items():
            end, ended_ns = self.last.get(pid, (None, began_ns))
            delta = schedstat_delta(start, end)
            deltas.append(None if delta is None or ended_ns <= began_ns else (*delta, ended_ns - began_ns))
        return share_split(deltas)


def schedstat_delta(start, end) -> tuple[int, int, int] | None:
    """(CPU ns, run-queue delay ns, timeslices) between two readings of one process; None if either is missing
    or the pid now names a new process (its counters went backwards)."""
    if start is None or end is None or end[0] < start[0]:
        return None
    return end[0] - start[0], end[1] - start[1], end[2] - start[2]


def share_split(deltas) -> dict:
    """Running and runnable shares summed over processes: deltas are (cpu_ns, run_delay_ns, timeslices,
    window_ns) per process, None for one that was not measured.

    running_share = CPU time / the processes' windows, runnable_share = run-queue
    delay / the same; the rest is time off the run queue (waiting on a lock, the
    client, I/O). Without any measured process (a remote server) the shares are None.
    """
    cpu_ns = run_delay_ns = timeslices = window_ns = processes = 0
    for delta in deltas:
        if delta is None:
            continue
        cpu_ns += delta[0]
        run_delay_ns += delta[1]
        timeslices += delta[2]
        window_ns += delta[3]
        processes += 1
    return {
        "backends": processes,
        "window_ns": window_ns,
        "cpu_ns": cpu_ns,
        "run_delay_ns": run_delay_ns,
        "timeslices": timeslices,
        "running_share": cpu_ns / window_ns if window_ns else None,
        "runnable_share": run_delay_ns / window_ns if window_ns else None,
    }


def time_split(before: dict, after: dict, wall_ns: int) -> dict:
    """share_split between two snapshots of pid -> schedstat taken wall_ns apart."""
    deltas = (schedstat_delta(start, after.get(pid)) for pid, start in before.items())
    return share_split(None if d is None else (*d, wall_ns) for d in deltas)


# --------------------------------------------------------------------------- windows and the CPU-bound rule


def within_windows(samples: pd.DataFrame, windows: dict) -> pd.DataFrame:
    """The samples of each backend taken inside its worker's window: windows maps a backend pid to its worker's
    (released_ns, ended_ns), on the samples' clock. Samples of other pids, or outside the window, are dropped:
    before its release and after its last attempt a backend waits for its client by construction."""
    if not len(samples):
        return samples
    starts = samples["pid"].map({pid: start for pid, (start, _) in windows.items()})
    ends = samples["pid"].map({pid: end for pid, (_, end) in windows.items()})
    inside = starts.notna() & (samples["sample_ns"] >= starts) & (samples["sample_ns"] <= ends)
    return samples.loc[inside.fillna(False).astype(bool)].reset_index(drop=True)


def achieved_interval_ms(samples: pd.DataFrame) -> float | None:
    """The median time between consecutive ticks the samples hold (ms); None with fewer than two ticks."""
    if not len(samples):
        return None
    ticks = np.unique(samples["sample_ns"].to_numpy(dtype=np.int64))
    return float(np.median(np.diff(ticks)) / 1e6) if len(ticks) > 1 else None


# A point is CPU-bound when its worker processes, or their backends, spent at least half of their windows runnable,
# waiting for a CPU. A process's window is its time on a CPU, its time waiting on the other side (the server, or
# the client) and its time waiting for a CPU; at half, the wait for a CPU is at least as long as everything else
# together, so the race's figures say how this machine schedules its processes, not what the server's locks do.
# Either side counts: starved clients leave their backends waiting for them (the sampler's "waiting for the
# client"), and a starved backend waits for a CPU, possibly holding a row lock another backend waits on. The
# threshold is a fixed half for that reason. A point whose repeats straddle it counts as CPU-bound if any repeat is
# (analysis.over_repeats), so it is left out rather than judged.
CPU_BOUND_CLIENT_RUNNABLE_SHARE = 0.5
CPU_BOUND_BACKEND_RUNNABLE_SHARE = CPU_BOUND_CLIENT_RUNNABLE_SHARE  # the same line, on the server's side
# A client process that drives many connections (the asyncio layout) is CPU-bound when it is never idle: on a
# CPU or waiting for one at least this share of its window, so the server waits for it, not it for the server.
CPU_BOUND_CLIENT_BUSY_SHARE = 0.9
# How close to the line a point may come before its verdicts are decided again without it (the page flags a verdict
# that changes): a fixed line leaves a point just under it in and one just over it out, so a verdict resting on the
# first is shown as such.
CPU_BOUND_NEAR = 0.1
# Which side crossed the line: the values of cpu_bound_side
CLIENTS, SERVER, BOTH = "clients", "server", "both"


def _measured(share) -> bool:
    return share is not None and not pd.isna(share)


def cpu_bound_side(client_runnable_share, client_running_share=None, backend_runnable_share=None,
                   below: float = 0.0) -> str | None:
    """Which side of a race was CPU-bound: CLIENTS (they waited for a CPU CPU_BOUND_CLIENT_RUNNABLE_SHARE of their
    window, or were busy CPU_BOUND_CLIENT_BUSY_SHARE of it), SERVER (the backends waited for a CPU
    CPU_BOUND_BACKEND_RUNNABLE_SHARE of theirs), BOTH, or "" for neither; None when neither side was measured.
    below: each line moved down by this much (CPU_BOUND_NEAR: the points near the line count too)."""
    if not _measured(client_runnable_share) and not _measured(backend_runnable_share):
        return None
    clients = False
    if _measured(client_runnable_share):
        busy = client_runnable_share + (client_running_share if _measured(client_running_share) else 0.0)
        clients = client_runnable_share >= CPU_BOUND_CLIENT_RUNNABLE_SHARE - below \
            or busy >= CPU_BOUND_CLIENT_BUSY_SHARE - below
    server = _measured(backend_runnable_share) and backend_runnable_share >= CPU_BOUND_BACKEND_RUNNABLE_SHARE - below
    return BOTH if clients and server else CLIENTS if clients else SERVER if server else ""


def cpu_bound(client_runnable_share, client_running_share=None, backend_runnable_share=None,
              below: float = 0.0) -> bool | None:
    """Whether a race was CPU-bound on either side (cpu_bound_side); None when neither side was measured."""
    side = cpu_bound_side(client_runnable_share, client_running_share, backend_runnable_share, below)
    return None if side is None else bool(side)
