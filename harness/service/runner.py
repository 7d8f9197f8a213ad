"""Runner processes: they poll the claim service by URL, claim, run a job, heartbeat under a lease, finish.

A runner knows the service only by its URL (`python -m harness runners
--service URL --count N` can run on other machines against one service).
Each runner:

- asks /health for the protocol and logs `ready`, waits at the group's start barrier (a harness opens it once
  every runner is ready), then waits a random 0..poll_s before its first poll, so runners do not start in step;
- polls: `pending` = GET /pending, then POST /runs/{id}/claim for the listed runs: all at once (`claims_listed`
  = at_once, the original's runner: one goroutine per listed run), running every run it wins side by side, or in
  order until one claim wins (in_order); a 409 is a conflict: another runner won. `claim` = POST /claim, the
  server picks one run with SKIP LOCKED; `claim_batch` = POST /claim for up to CLAIM_BATCH runs in one statement
  (as many as GET /pending lists), run side by side like the runs a /pending runner wins at once;
- with a run: runs the job for a service time drawn from the distribution (exponential or fixed, with the
  given mean); if /health says the protocol is lease or lease_fenced, heartbeats every lease_s / 3 meanwhile;
  then finishes it, and polls again at once;
- without one: waits poll_s times a random factor in [1 - jitter, 1 + jitter], then polls again.

Each runner appends one JSON line per event to its own log, flushed per line:
{"t": unix seconds, "runner", "event": ready|poll|conflict|claimed|started|heartbeat|finished|finish_rejected|
error|stopped, "run", "token", "bytes"}; a poll also lists the runs it was shown ("runs"), each one's bytes
of JSON ("run_bytes") and number of secrets ("secrets"). Runners die with their parent
(PR_SET_PDEATHSIG) and stop on SIGTERM (a job in flight is left as it is: claimed, not finished).
"""

from __future__ import annotations

import contextlib
import collections
import json
import multiprocessing as mp
import os
import random
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx

from harness.errors import UserError
from harness.children import die_with_parent
from harness.service.queries import PENDING_LIMIT

ENDPOINTS = ("pending", "claim", "claim_batch")
CLAIM_BATCH = PENDING_LIMIT  # claim_batch asks for as many runs per poll as GET /pending lists: equal capacity
CLAIMS_LISTED = ("at_once", "in_order")  # how a /pending runner claims the runs it was shown
DISTRIBUTIONS = ("exponential", "fixed")
MAX_RUNNERS = 200
MAX_POLL_SECONDS = 600.0
MIN_POLL_SECONDS = 0.01
MAX_SERVICE_TIME_SECONDS = 3600.0
REQUEST_TIMEOUT_SECONDS = 10.0
STOP_TIMEOUT_SECONDS = 5.0
_CONTEXT = mp.get_context("fork")


@dataclass(frozen=True)
class RunnerSettings:
    service: str  # the service's base URL
    poll_s: float = 5.0
    endpoint: str = "pending"
    service_time_s: float = 1.0  # mean time a job runs
    service_time_distribution: str = "exponential"
    jitter: float = 0.2  # an idle wait is poll_s times a factor in [1 - jitter, 1 + jitter]
    seconds: float | None = None  # stop after this long (None: until SIGTERM)
    seed: int = 0
    claims_listed: str = "in_order"  # pending: claim every listed run at once, or in order until one wins

    def check(self) -> None:
        if self.claims_listed not in CLAIMS_LISTED:
            raise UserError(f"claims_listed must be one of {', '.join(CLAIMS_LISTED)}, not {self.claims_listed!r}")
        if not self.service.startswith(("http://", "https://")):
            raise UserError(f"the service URL must start with http:// or https://, not {self.service!r}")
        if not MIN_POLL_SECONDS <= self.poll_s <= MAX_POLL_SECONDS:
            raise UserError(f"poll interval must be between {MIN_POLL_SECONDS:g} and {MAX_POLL_SECONDS:g} s, "
                            f"not {self.poll_s!r}")
        if self.endpoint not in ENDPOINTS:
            raise UserError(f"endpoint must be one of {', '.join(ENDPOINTS)}, not {self.endpoint!r}")
        if not 0 <= self.service_time_s <= MAX_SERVICE_TIME_SECONDS:
            raise UserError(f"service time must be between 0 and {MAX_SERVICE_TIME_SECONDS:g} s, "
                            f"not {self.service_time_s!r}")
        if self.service_time_distribution not in DISTRIBUTIONS:
            raise UserError(f"service time distribution must be one of {', '.join(DISTRIBUTIONS)}, "
                            f"not {self.service_time_distribution!r}")
        if not 0 <= self.jitter < 1:
            raise UserError(f"jitter must be at least 0 and below 1, not {self.jitter!r}")
        if self.seconds is not None and not 0 < self.seconds <= 86400:
            raise UserError(f"seconds must be above 0 and at most 86400, not {self.seconds!r}")


class _Stop(Exception):
    pass


class _Runner:
    def __init__(self, name: str, settings: RunnerSettings, log_path: Path, go=None):
        self.name = name
        self.settings = settings
        self.rng = random.Random(f"{settings.seed}/{name}")
        self.log = open(log_path, "a", buffering=1)  # noqa: SIM115 - closed in run()
        self.stopping = False
        self.interruptible = False
        self.client = httpx.Client(base_url=settings.service.rstrip("/"), timeout=REQUEST_TIMEOUT_SECONDS)
        self.lease_s: float | None = None
        self.go = go  # a multiprocessing.Event: the start barrier (None: start at once)
        self.deadline = time.monotonic() + settings.seconds if settings.seconds else float("inf")
        self.log_lock = threading.Lock()  # runs claimed at once are worked on side by side, each logging

    # ------------------------------------------------------------------ plumbing

    def event(self, event: str, run: int | None = None, token: int | None = None, bytes: int = 0, **more) -> None:
        record = {"t": time.time(), "runner": self.name, "event": event, "run": run, "token": token, "bytes": bytes}
        record.update(more)
        with self.log_lock:
            self.log.write(json.dumps(record, separators=(",", ":")) + "\n")
            self.log.flush()

    def on_sigterm(self, signum, frame) -> None:
        self.stopping = True
        if self.interruptible:
            raise _Stop

    def sleep(self, seconds: float) -> None:
        """Sleep, but a SIGTERM or the deadline ends it (and the runner)."""
        seconds = min(seconds, self.deadline - time.monotonic())
        if self.stopping or seconds < 0:
            raise _Stop
        self.interruptible = True
        try:
            if self.stopping:
                raise _Stop
            time.sleep(seconds)
        finally:
            self.interruptible = False
        if self.stopping or time.monotonic() >= self.deadline:
            raise _Stop

    def post(self, path: str, body: dict) -> httpx.Response:
        return self.client.post(path, json=body)

    # ------------------------------------------------------------------ the loop

    def run(self) -> None:
        try:
            with contextlib.suppress(_Stop):
                self.learn_protocol()
                self.event("ready")  # connected and told the protocol: a harness may start its clock now
                self.wait_for_go()
                self.sleep(self.rng.uniform(0, self.settings.poll_s))
                while True:
                    won = self.poll()
                    if won:
                        self.work_all(won)
                    else:
                        jitter = self.settings.jitter
                        self.sleep(self.settings.poll_s * self.rng.uniform(1 - jitter, 1 + jitter))
            self.event("stopped")
        finally:
            self.client.close()
            self.log.close()

    def wait_for_go(self) -> None:
        """Wait at the start barrier (a SIGTERM still ends the runner)."""
        while self.go is not None and not self.go.wait(0.05):
            if self.stopping:
                raise _Stop
        if self.go is not None and self.settings.seconds:
            self.deadline = time.monotonic() + self.settings.seconds

    def learn_protocol(self) -> None:
        while True:
            try:
                answer = self.client.get("/health")
                answer.raise_for_status()
                said = answer.json()
                self.lease_s = float(said["lease_s"]) if said.get("protocol", "none") != "none" else None
                return
            except (httpx.HTTPError, ValueError, KeyError) as exc:
                self.event("error", where="health", reason=str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
                self.sleep(min(self.settings.poll_s, 1.0))

    def poll(self) -> list[tuple[int, int]]:
        """One poll; the (run id, token) of every claim it won."""
        try:
            if self.settings.endpoint == "claim_batch":
                answer = self.post("/claim", {"runner": self.name, "batch": CLAIM_BATCH})
                handed = answer.json()["runs"] if answer.status_code == 200 else []
                self.event("poll", bytes=len(answer.content), runs=[one["run"]["id"] for one in handed],
                           run_bytes=[len(json.dumps(one, separators=(",", ":"), ensure_ascii=False).encode())
                                      for one in handed],
                           secrets=[len(one["run"]["secrets"]) for one in handed], status=answer.status_code)
                for one in handed:
                    self.event("claimed", one["run"]["id"], one["token"])
                if answer.status_code == 409:  # the endpoint never should; counted so C8 can see it if it does
                    self.event("conflict", bytes=len(answer.content))
                return [(one["run"]["id"], one["token"]) for one in handed]
            if self.settings.endpoint == "claim":
                answer = self.post("/claim", {"runner": self.name})
                if answer.status_code == 200:
                    run = answer.json()
                    self.event("poll", bytes=len(answer.content), runs=[run["run"]["id"]],
                               run_bytes=[len(answer.content)], secrets=[len(run["run"]["secrets"])])
                    self.event("claimed", run["run"]["id"], run["token"], len(answer.content))
                    return [(run["run"]["id"], run["token"])]
                self.event("poll", bytes=len(answer.content), runs=[], run_bytes=[], secrets=[],
                           status=answer.status_code)
                if answer.status_code == 409:  # the endpoint never should; counted so C8 can see it if it does
                    self.event("conflict", bytes=len(answer.content))
                return []
            answer = self.client.get("/pending")
            listed = answer.json()["runs"] if answer.status_code == 200 else []
            self.event("poll", bytes=len(answer.content), runs=[run["id"] for run in listed],
                       run_bytes=[len(json.dumps(run, separators=(",", ":"), ensure_ascii=False).encode())
                                  for run in listed],
                       secrets=[len(run["secrets"]) for run in listed], status=answer.status_code)
            if self.settings.claims_listed == "at_once" and len(listed) > 1:
                with ThreadPoolExecutor(max_workers=len(listed)) as pool:
                    answers = list(pool.map(self.claim_listed, listed))
                return [won for won in answers if won is not None]
            for run in listed:
                won = self.claim_listed(run)
                if won is not None:
                    return [won]
            return []
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            self.event("error", where="poll", reason=str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            return []

    def claim_listed(self, run: dict) -> tuple[int, int] | None:
        """POST /runs/{id}/claim for one listed run: (run id, token) when it won, None on a 409 or an error."""
        try:
            claim = self.post(f"/runs/{run['id']}/claim", {"runner": self.name})
        except httpx.HTTPError as exc:
            self.event("error", run["id"], where="claim", reason=type(exc).__name__)
            return None
        if claim.status_code == 200:
            token = claim.json()["token"]
            self.event("claimed", run["id"], token, len(claim.content))
            return run["id"], token
        if claim.status_code == 409:
            self.event("conflict", run["id"], bytes=len(claim.content))
        else:
            self.event("error", run["id"], where="claim", status=claim.status_code)
        return None

    def work_all(self, won: list[tuple[int, int]]) -> None:
        """Every run won in one poll, side by side (as the original's runner executes each in a goroutine)."""
        if len(won) == 1:
            self.work(won[0])
            return
        stopped = []

        def work_one(claimed):
            try:
                self.work(claimed)
            except _Stop:
                stopped.append(claimed)

        threads = [threading.Thread(target=work_one, args=(claimed,), daemon=True) for claimed in won]
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(0.05)
                if self.stopping:
                    raise _Stop
        if stopped:
            raise _Stop

    def service_time(self) -> float:
        mean = self.settings.service_time_s
        if self.settings.service_time_distribution == "fixed" or mean == 0:
            return mean
        return self.rng.expovariate(1.0 / mean)

    def work(self, claimed: tuple[int, int]) -> None:
        run_id, token = claimed
        self.event("started", run_id, token)
        ends = time.monotonic() + self.service_time()
        try:
            while True:
                left = ends - time.monotonic()
                if self.lease_s is None or left <= self.lease_s / 3:
                    if left > 0:
                        self.sleep(left)
                    break
                self.sleep(self.lease_s / 3)
                self.heartbeat(run_id, token)
        except _Stop:
            self.event("stopped", run_id, token)
            raise
        try:
            answer = self.post(f"/runs/{run_id}/finish", {"runner": self.name, "token": token})
            self.event("finished" if answer.status_code == 200 else "finish_rejected", run_id, token,
                       len(answer.content), status=answer.status_code)
        except httpx.HTTPError as exc:
            self.event("finish_rejected", run_id, token, where="finish", reason=type(exc).__name__)

    def heartbeat(self, run_id: int, token: int) -> None:
        try:
            answer = self.post(f"/runs/{run_id}/heartbeat", {"runner": self.name, "token": token})
            self.event("heartbeat", run_id, token, len(answer.content), status=answer.status_code)
        except httpx.HTTPError as exc:
            self.event("heartbeat", run_id, token, status=None, reason=type(exc).__name__)




def _runner_main(name: str, settings: RunnerSettings, log_path: str, parent_pid: int, go) -> None:
    die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops its runners with SIGTERM
    runner = _Runner(name, settings, Path(log_path), go)
    signal.signal(signal.SIGTERM, runner.on_sigterm)
    runner.run()


def log_path(events_dir: Path, name: str) -> Path:
    return Path(events_dir) / f"{name}.jsonl"


class RunnerGroup:
    """N runner processes; stop() ends them all (SIGTERM, then SIGKILL), also on errors."""

    def __init__(self, settings: RunnerSettings, count: int, events_dir: Path, prefix: str = "runner",
                 held: bool = False):
        settings.check()
        if not 1 <= count <= MAX_RUNNERS:
            raise UserError(f"runner count must be between 1 and {MAX_RUNNERS}, not {count}")
        self.settings = settings
        self.events_dir = Path(events_dir)
        self.events_dir.mkdir(parents=True, exist_ok=True)
        self.names = [f"{prefix}-{index:03d}" for index in range(count)]
        self.processes: list = []
        self.go = _CONTEXT.Event()  # the start barrier: runners log `ready`, then wait for release()
        if not held:  # held: the caller opens the barrier with release() once wait_ready() returns
            self.go.set()

    def start(self) -> "RunnerGroup":
        try:
            for name in self.names:
                process = _CONTEXT.Process(target=_runner_main, name=name, daemon=True,
                                           args=(name, self.settings, str(log_path(self.events_dir, name)),
                                                 os.getpid(), self.go))
                process.start()
                self.processes.append(process)
        except BaseException:
            self.stop()
            raise
        return self

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self.processes]

    def release(self) -> None:
        """Open the start barrier: every runner that is ready starts polling now."""
        self.go.set()

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Until every runner has logged `ready` (raises RuntimeError after timeout or if one died)."""
        deadline = time.monotonic() + timeout
        waiting = set(self.names)
        while waiting:
            for name in list(waiting):
                path = log_path(self.events_dir, name)
                if path.exists() and '"event":"ready"' in path.read_text():
                    waiting.discard(name)
            if not waiting:
                return
            if self.alive() < len(self.processes):
                raise RuntimeError(f"{len(self.processes) - self.alive()} runners died before they were ready")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(waiting)} runners were not ready within {timeout:g} s")
            time.sleep(0.05)

    def alive(self) -> int:
        return sum(process.is_alive() for process in self.processes)

    def wait(self, timeout: float | None = None) -> bool:
        """True once every runner has ended (their own deadline), False at the timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for process in self.processes:
            process.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return self.alive() == 0

    def stop(self) -> None:
        for process in self.processes:
            if process.is_alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
        for process in self.processes:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join(STOP_TIMEOUT_SECONDS)

    def events(self) -> list[dict]:
        return read_events(self.events_dir, self.names)

    def __enter__(self) -> "RunnerGroup":
        return self.start() if not self.processes else self

    def __exit__(self, *exc) -> None:
        self.stop()


def read_events(events_dir: Path, names: list[str] | None = None) -> list[dict]:
    """Every event of the runners' logs in a folder, in time order (a torn last line is skipped)."""
    paths = [log_path(events_dir, name) for name in names] if names else sorted(Path(events_dir).glob("*.jsonl"))
    events = []
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                events.append(json.loads(line))
    return sorted(events, key=lambda event: event["t"])


# --------------------------------------------------------------------------- python -m harness runners


def add_runner_options(parser) -> None:
    parser.add_argument("--service", required=True, help="the claim service's base URL, e.g. http://10.0.0.5:8080")
    parser.add_argument("--count", type=int, default=1, help=f"runner processes to start (1-{MAX_RUNNERS}, default 1)")
    parser.add_argument("--poll-s", type=float, default=5.0, help="seconds between idle polls (default 5)")
    parser.add_argument("--endpoint", choices=ENDPOINTS, default="pending",
                        help="pending: GET /pending then claim by id; claim: POST /claim; claim_batch: POST /claim for "
                             f"up to {CLAIM_BATCH} runs (default pending)")
    parser.add_argument("--service-time-s", type=float, default=1.0, help="mean seconds a job runs (default 1)")
    parser.add_argument("--service-time-distribution", choices=DISTRIBUTIONS, default="exponential",
                        help="how job times are drawn (default exponential)")
    parser.add_argument("--jitter", type=float, default=0.2, help="idle wait = poll-s x [1-jitter, 1+jitter]")
    parser.add_argument("--seconds", type=float, default=None, help="stop after this long (default: until Ctrl-C)")
    parser.add_argument("--events-dir", type=Path, default=Path("runner-events"),
                        help="where each runner appends its JSON-lines event log (default ./runner-events)")
    parser.add_argument("--name-prefix", default=None, help="runner names start with this (default runner-HOST)")
    parser.add_argument("--seed", type=int, default=0)


def run_runners_command(args) -> int:
    """Start the runners, wait for --seconds or a signal, stop them, print one line of event counts."""
    settings = RunnerSettings(args.service, args.poll_s, args.endpoint, args.service_time_s,
                              args.service_time_distribution, args.jitter, args.seconds, args.seed)
    prefix = args.name_prefix or f"runner-{socket.gethostname()}"
    group = RunnerGroup(settings, args.count, args.events_dir, prefix)
    stop = []
    previous = {sig: signal.signal(sig, lambda signum, frame: stop.append(signum)) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        group.start()
        while not stop and group.alive():
            time.sleep(0.2)
    finally:
        group.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    counts = collections.Counter(event["event"] for event in group.events())
    print(json.dumps({"runners": args.count, "events_dir": str(args.events_dir), **dict(sorted(counts.items()))}))
    return 0
