"""The production shape: a claim service over HTTP, runners polling it, runs arriving over time (C5, C8).

One run: a fresh runs queue (harness.service.schema), the claim service as its
own process, `runner_count` runner processes polling it every `poll_s` through
one endpoint (`pending`: GET /pending then claim by id, 409 to the loser;
`claim`: POST /claim, the server's SKIP LOCKED pick), and an open-loop
producer enqueuing runs at a Poisson rate over `seconds` (plus one burst of
`burst` runs a third of the way in). After the arrival window the runners
go on for a drain of at most two idle polls (ended early once nothing is
pending), so the runs that arrived last are picked up instead of censored.

Everything figured from stored rows: the runners' event logs (polls,
conflicts, bytes and secrets shown to runners that did not get the run), the
runs table (pickup latency = claimed_at - the INTENDED enqueue time), the
audit of status flips (duplicates), the database's transaction counters
(statements per claimed job: in autocommit each statement is one transaction)
and the service's backends' CPU from /proc/<pid>/schedstat.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
import psutil
from tqdm.auto import tqdm

from harness import scratch
from harness.storage import Run

from harness.errors import UserError
from harness.experiments.production.outcomes import (C5_ROUND_POLL_S, C5_ROUND_RUNNERS, C5_ROUND_SECONDS, MAX_C5_EXTRA_SECONDS,
                                      c5_decided, c5_interval, is_c5_round)
from harness.experiments.contract import Kind
from harness.experiments.contract import (Measured, Option, Parameters, as_float, as_floats, as_int, as_ints,
                                          check_each, setting)
from harness.experiments.contract import one_of
from harness.server import activity, database, pgstats
from harness.stats import censored_percentile
from harness.service import producer as producer_module
from harness.service import runner as runner_module
from harness.service import schema as service_schema
from harness.service.app import APPLICATION_NAME, DEFAULT_POOL_SIZE
from harness.service.process import running_service
from harness.service.queries import MAX_LEASE_SECONDS, PROTOCOLS, queries_for

MAX_RUNNERS = runner_module.MAX_RUNNERS
MAX_SECONDS = 3600.0
MAX_ARRIVAL_RATE = 500.0  # runs per second
MAX_BURST = 10_000
MAX_ENQUEUED = 200_000  # rate x seconds + burst: every run's row is kept and stored
MIN_POLL_SECONDS, MAX_POLL_SECONDS = 0.05, 60.0
DRAIN_IDLE_POLLS = 2  # after the window, runners go on for at most this many idle polls (less once nothing is pending)
TIMELINE_BIN_SECONDS = 1.0


as_endpoint = one_of(runner_module.ENDPOINTS, "endpoint")


def as_endpoints(name: str, values) -> tuple[str, ...]:
    if isinstance(values, str) or not hasattr(values, "__iter__"):
        raise UserError(f"endpoints must be a list, not {values!r}")
    return tuple(as_endpoint(name, value) for value in values)


as_claims_listed = one_of(runner_module.CLAIMS_LISTED, "claims listed")


as_protocol = one_of(PROTOCOLS, "protocol")


def _bounded(name: str, value: float, low: float, high: float, unit: str = "") -> None:
    if not low <= value <= high:  # also refuses NaN
        raise UserError(f"{name} must be between {low:g} and {high:g}{unit}, not {value!r}")


def _check_point(runner_count: int, poll_s: float, seconds: float, arrival_rate: float, burst: int,
                 service_time_s: float) -> None:
    _bounded("runner count", runner_count, 1, MAX_RUNNERS)
    _bounded("poll interval", poll_s, MIN_POLL_SECONDS, MAX_POLL_SECONDS, " s")
    _bounded("seconds", seconds, 1, MAX_SECONDS)
    _bounded("arrival rate", arrival_rate, 0, MAX_ARRIVAL_RATE, " runs/s")
    _bounded("burst", burst, 0, MAX_BURST)
    _bounded("service time", service_time_s, 0, runner_module.MAX_SERVICE_TIME_SECONDS, " s")
    if arrival_rate == 0 and burst == 0:
        raise UserError("nothing would arrive: give an arrival rate above 0 or a burst")
    expected = arrival_rate * seconds + burst
    if expected > MAX_ENQUEUED:
        raise UserError(f"arrival rate x seconds + burst must stay within {MAX_ENQUEUED:,} runs, "
                        f"not {expected:,.0f}")


@dataclass(frozen=True)
class ProductionParameters(Parameters):
    """One run: runner_count runners polling every poll_s through one endpoint while runs arrive for seconds."""

    runner_count: int = setting(3, as_int, Option("--runners", "runner processes polling the service", int,
                                                                         metavar="N"))
    poll_s: float = setting(5.0, as_float, Option("--poll-s", "seconds between a runner's idle polls", float,
                                                               metavar="S"))
    seconds: float = setting(30.0, as_float, Option("--seconds", "how long runs arrive (the window)", float,
                                                                metavar="T"))
    endpoint: str = setting("pending", as_endpoint, Option(
        "--endpoint", "pending: GET /pending, then claim the listed runs (409 to the loser); "
                      "claim: POST /claim, the server picks with SKIP LOCKED", str, metavar="{pending,claim}"))
    arrival_rate: float = setting(1.0, as_float, Option("--arrival-rate", "Poisson arrivals, runs per second",
                                                        float, metavar="R"))
    burst: int = setting(0, as_int, Option("--burst", "one push of this many runs a third of the way in", int,
                                                    metavar="K"))
    service_time_s: float = setting(2.0, as_float, Option("--service-time-s", "mean seconds a job runs "
                                                                              "(exponential)", float))
    jitter: float = setting(0.2, as_float)  # an idle wait is poll_s x a factor in [1 - jitter, 1 + jitter]
    protocol: str = setting("none", as_protocol)
    lease_s: float = setting(30.0, as_float)
    pool_size: int = setting(DEFAULT_POOL_SIZE, as_int)
    seed: int = setting(0, as_int)
    # how a /pending runner claims the runs it was shown: every one at once, running each it wins (the original's
    # runner), or in order until one wins. Not added_later: runs stored before it claimed in order, and are not
    # what a request without it asks for.
    claims_listed: str = setting("at_once", as_claims_listed, Option(
        "--claims-listed", "pending: claim every listed run at once and run each one won, as the original's runner "
                           "does (at_once), or in order until one wins (in_order)", str, metavar="{at_once,in_order}"))

    def check(self) -> None:
        _check_point(self.runner_count, self.poll_s, self.seconds, self.arrival_rate, self.burst,
                     self.service_time_s)
        _bounded("jitter", self.jitter, 0, 0.9)
        _bounded("lease", self.lease_s, 0.1, MAX_LEASE_SECONDS, " s")
        _bounded("pool size", self.pool_size, 1, 100)

    @property
    def utilisation(self) -> float:
        """Offered load: the share of the runners' time the arrivals would keep busy."""
        return self.arrival_rate * self.service_time_s / self.runner_count


@dataclass(frozen=True)
class ProductionSweep(Parameters):
    """The report's sweep: runner counts x poll intervals x endpoints, plus one burst scenario per endpoint.

    Each point's arrival rate keeps `utilisation` of its runners busy (rate = utilisation x runners /
    service time); each poll interval has its own window length (`seconds_per_poll`, in the same order), long
    enough for the polls its conflict rate needs.
    """

    runner_counts: tuple = setting((3, 10, 50), as_ints)
    poll_intervals_s: tuple = setting((5.0, 1.0, 0.2), as_floats)
    seconds_per_poll: tuple = setting((16.0, 8.0, 4.0), as_floats)
    endpoints: tuple = setting(("pending", "claim_batch", "claim"), as_endpoints)
    service_time_s: float = setting(2.0, as_float)
    utilisation: float = setting(0.5, as_float)
    burst: int = setting(0, as_int)  # 0: no burst scenario
    burst_runner_count: int = setting(10, as_int)
    burst_poll_s: float = setting(1.0, as_float)
    burst_seconds: float = setting(8.0, as_float)
    claims_listed: str = setting("at_once", as_claims_listed)
    # the single claim's window per poll interval (empty: seconds_per_poll): the single claim is shown beside the
    # equal-capacity pair (pending, claim_batch), which no verdict reads at a shorter window
    single_claim_seconds_per_poll: tuple = setting((), as_floats)
    # C5 runs on until its interval is decided: rounds of C5_ROUND_SECONDS with C5_ROUND_RUNNERS runners polling
    # /pending every C5_ROUND_POLL_S, while the interval straddles the line, at most this many seconds of rounds
    c5_extra_seconds: float = setting(0.0, as_float)

    def check(self) -> None:
        check_each(self.runner_counts, "runner count", 1, MAX_RUNNERS)
        check_each(self.poll_intervals_s, "poll interval", MIN_POLL_SECONDS, MAX_POLL_SECONDS)
        check_each(self.seconds_per_poll, "seconds", 1, MAX_SECONDS)
        if len(self.seconds_per_poll) != len(self.poll_intervals_s):
            raise UserError(f"give one window length per poll interval ({len(self.poll_intervals_s)}), "
                            f"not {len(self.seconds_per_poll)}")
        if self.single_claim_seconds_per_poll:
            check_each(self.single_claim_seconds_per_poll, "seconds", 1, MAX_SECONDS)
            if len(self.single_claim_seconds_per_poll) != len(self.poll_intervals_s):
                raise UserError(f"give one single-claim window length per poll interval "
                                f"({len(self.poll_intervals_s)}), not {len(self.single_claim_seconds_per_poll)}")
        if not (self.c5_extra_seconds == 0 or C5_ROUND_SECONDS <= self.c5_extra_seconds <= MAX_C5_EXTRA_SECONDS):
            raise UserError(f"c5_extra_seconds must be 0 (no rounds) or between {C5_ROUND_SECONDS:g} (one round) "
                            f"and {MAX_C5_EXTRA_SECONDS:g} s, not {self.c5_extra_seconds!r}")
        if not self.endpoints:
            raise UserError("give at least one endpoint")
        _bounded("utilisation", self.utilisation, 0.01, 1.0)
        _bounded("burst", self.burst, 0, MAX_BURST)
        for point in self.points():
            point.check()

    def window(self, endpoint: str, index: int) -> float:
        """The arrival window of one poll interval (by its position) for one endpoint."""
        if endpoint == "claim" and self.single_claim_seconds_per_poll:
            return self.single_claim_seconds_per_poll[index]
        return self.seconds_per_poll[index]

    def points(self) -> list[ProductionParameters]:
        points = [ProductionParameters(runner_count, poll_s, self.window(endpoint, index), endpoint,
                                       _rate(self.utilisation, runner_count, self.service_time_s), 0,
                                       self.service_time_s, claims_listed=self.claims_listed)
                  for runner_count in self.runner_counts
                  for index, poll_s in enumerate(self.poll_intervals_s)
                  for endpoint in self.endpoints]
        if self.burst:
            points += [ProductionParameters(self.burst_runner_count, self.burst_poll_s, self.burst_seconds, endpoint,
                                            _rate(self.utilisation, self.burst_runner_count, self.service_time_s),
                                            self.burst, self.service_time_s, claims_listed=self.claims_listed)
                       for endpoint in self.endpoints]
        return points


    @property
    def c5_max_rounds(self) -> int:
        return int(self.c5_extra_seconds // C5_ROUND_SECONDS)

    def c5_round(self, number: int) -> ProductionParameters:
        """The C5 round `number` (1, 2, ...): the production point once more, its own arrivals (seed = number)."""
        return ProductionParameters(C5_ROUND_RUNNERS, C5_ROUND_POLL_S, C5_ROUND_SECONDS, "pending",
                                    _rate(self.utilisation, C5_ROUND_RUNNERS, self.service_time_s), 0,
                                    self.service_time_s, seed=number, claims_listed=self.claims_listed)

    def follow_up(self, summaries: list[dict]) -> list[ProductionParameters]:
        """The next C5 round while the stored runs leave C5's interval undecided and the bound allows one more;
        none once it is decided (checked after every round: the build stops as soon as it can say)."""
        rounds = sum(1 for row in summaries if is_c5_round(row))
        if rounds >= self.c5_max_rounds or c5_decided(c5_interval(summaries)):
            return []
        return [self.c5_round(rounds + 1)]


def _rate(utilisation: float, runner_count: int, service_time_s: float) -> float:
    return round(utilisation * runner_count / max(service_time_s, 1e-3), 6)



def workers_needed(parameters: ProductionParameters) -> int:
    return parameters.pool_size + 1  # the service's pool and the producer's connection


def label(parameters: ProductionParameters) -> str:
    burst = f" burst {parameters.burst}" if parameters.burst else ""
    return f"{parameters.endpoint} x{parameters.runner_count} every {parameters.poll_s:g}s{burst}"


# --------------------------------------------------------------------------- measuring


def _pending(conn) -> int:
    return int(conn.execute("SELECT count(*) FROM claimrace.runs WHERE status = 'pending'").fetchone()[0])


def measure_production(db: database.Database, parameters: ProductionParameters, run_id: str,
                       progress: bool = False) -> Measured:
    cfg = parameters
    pushes = producer_module.schedule(cfg.arrival_rate, cfg.seconds, cfg.burst, seed=cfg.seed)
    if not pushes:
        raise UserError("the arrival schedule is empty: raise the arrival rate or the seconds, or add a burst")
    events_dir = scratch.folder(f"{run_id}-events")
    harness_statements = 0  # the control connection's own transactions between the two counter readings
    with db.connect() as conn:
        service_schema.create_run_queue(conn)
        local = activity.server_is_local(conn)
        with running_service(db.url, cfg.protocol, cfg.lease_s, pool_size=cfg.pool_size) as service:
            backends = activity.backend_pids(conn, APPLICATION_NAME)
            service_process = psutil.Process(service.pid)
            transactions_before = pgstats.transactions(conn)
            harness_statements += 1  # the counter reading itself (its force_flush)
            backend_before = activity.schedstat_snapshot(backends) if local else {}
            service_cpu_before = sum(service_process.cpu_times()[:2])
            settings = runner_module.RunnerSettings(service.url, cfg.poll_s, cfg.endpoint, cfg.service_time_s,
                                                    "exponential", cfg.jitter, None, cfg.seed, cfg.claims_listed)
            produce = producer_module.Producer(db.url, service.key, pushes, cfg.seed)
            drain_limit = DRAIN_IDLE_POLLS * cfg.poll_s * (1 + cfg.jitter)
            with runner_module.RunnerGroup(settings, cfg.runner_count, events_dir, held=True) as group:
                group.wait_ready()  # process start and the first /health are not part of the window
                zero_wall, zero_monotonic = time.time(), time.monotonic()
                group.release()
                produce.start(zero_wall, zero_monotonic)
                _wait_with_progress(zero_monotonic + cfg.seconds, progress, label(cfg))
                produce.join(timeout=30)
                drain_started = time.monotonic()
                while time.monotonic() - drain_started < drain_limit:
                    harness_statements += 1
                    if _pending(conn) == 0:
                        break
                    time.sleep(min(0.2, cfg.poll_s / 2))
                ended_wall = time.time()
                if group.alive() != cfg.runner_count:
                    raise RuntimeError(f"{cfg.runner_count - group.alive()} runners died during the run")
            backend_after = activity.schedstat_snapshot(backends) if local else {}
            service_cpu_after = sum(service_process.cpu_times()[:2])
            service_backend_pids = activity.backend_pids(conn, APPLICATION_NAME)
        producer_pids = activity.backend_pids(conn, producer_module.APPLICATION_NAME)
        # a backend flushes its counts as it exits: the service's pool and the producer's connection are closed
        pgstats.wait_for_backends_to_exit(conn, service_backend_pids + backends + producer_pids)
        transactions_after = pgstats.transactions(conn)
        runs = _runs_frame(conn, zero_wall)
        flips = _flips_frame(conn, zero_wall)
        finishes = conn.execute("SELECT run_id, runner, attempt, finished_at FROM claimrace.finishes "
                                "ORDER BY finish_seq").fetchall()
    events = _events_frame(runner_module.read_events(events_dir), zero_wall)
    for path in events_dir.glob("*.jsonl"):
        path.unlink()
    events_dir.rmdir()
    backend_cpu = [activity.schedstat_delta(backend_before.get(pid), backend_after.get(pid)) for pid in backends]
    pushes_frame = pd.DataFrame(produce.sent)
    resources = {
        "transactions": transactions_after - transactions_before - harness_statements,
        "harness_statements_subtracted": harness_statements,
        "producer_statements": len(produce.sent),
        "service_backends": len(backends),
        "backend_cpu_ms": (sum(d[0] for d in backend_cpu) / 1e6) if local and all(backend_cpu) else None,
        "backend_run_delay_ms": (sum(d[1] for d in backend_cpu) / 1e6) if local and all(backend_cpu) else None,
        "service_process_cpu_ms": (service_cpu_after - service_cpu_before) * 1e3,
        "window_seconds": cfg.seconds,
        "ended_s": ended_wall - zero_wall,
        "drain_limit_s": drain_limit,
        "accepted_finishes": len(finishes),
    }
    summary = figures(runs, flips, events, resources)
    # against the schedule, not against what the producer reports sent: a push it never made must show
    checks = production_checks(runs, flips, events, pd.DataFrame([asdict(push) for push in pushes]))
    return Measured(
        tables={"runs": runs, "flips": flips, "events": events, "pushes": pushes_frame,
                "timeline": timeline(runs, events)},
        procedure={
            "sql": {name: getattr(queries_for(cfg.protocol), name)
                    for name in ("pending", "claim_by_id", "claim_next", "heartbeat", "finish", "enqueue")},
            "service": "harness.service (Starlette on uvicorn, one process on 127.0.0.1, psycopg_pool of "
                       f"{cfg.pool_size} connections, secrets decrypted per request with Fernet)",
            "runners": "one process each, polling by URL (harness.service.runner), all ready and held at a "
                       "start barrier until the window opens; each first polls after U[0, poll_s]; after an idle poll they wait "
                       "poll_s x U[1-jitter, 1+jitter], after a finished job they poll at once",
            "arrivals": "open loop: Poisson arrivals drawn before the window, enqueued_at = the intended time",
            "drain": f"after the window, runners go on for at most {DRAIN_IDLE_POLLS} idle polls, "
                     "ended early once nothing is pending",
            "statements": "transactions counted by pg_stat_database over the run (autocommit: one statement "
                          "each), minus the harness's own readings; the producer's inserts are counted apart",
        },
        checks=checks,
        results={"summary": summary, "resources": resources, "utilisation_offered": cfg.utilisation,
                 "local_server": local})


def _wait_with_progress(until_monotonic: float, progress: bool, what: str) -> None:
    total = max(0.0, until_monotonic - time.monotonic())
    with tqdm(total=round(total, 1), desc=f"production {what}", unit="s", disable=not progress) as bar:
        while (left := until_monotonic - time.monotonic()) > 0:
            time.sleep(min(0.5, left))
            bar.n = round(total - max(left, 0), 1)
            bar.refresh()


def _runs_frame(conn, zero_wall: float) -> pd.DataFrame:
    rows = conn.execute(
        """SELECT id, status, extract(epoch FROM enqueued_at)::float8, extract(epoch FROM claimed_at)::float8,
                  claimed_by, attempt, extract(epoch FROM finished_at)::float8, finished_by,
                  octet_length(spec::text), octet_length(secrets)
           FROM claimrace.runs ORDER BY id""").fetchall()
    frame = pd.DataFrame(rows, columns=["run_id", "status", "enqueued_s", "claimed_s", "claimed_by", "attempt",
                                        "finished_s", "finished_by", "spec_bytes", "sealed_secret_bytes"])
    for column in ("enqueued_s", "claimed_s", "finished_s"):
        frame[column] = frame[column].astype("float64") - zero_wall
    frame["pickup_ms"] = (frame["claimed_s"] - frame["enqueued_s"]) * 1e3
    return frame


def _flips_frame(conn, zero_wall: float) -> pd.DataFrame:
    rows = conn.execute("""SELECT flip_seq, run_id, old_status, new_status, runner, attempt, backend_pid,
                                  extract(epoch FROM flipped_at)::float8
                           FROM claimrace.run_flips ORDER BY flip_seq""").fetchall()
    frame = pd.DataFrame(rows, columns=["flip_seq", "run_id", "old_status", "new_status", "runner", "attempt",
                                        "backend_pid", "flipped_s"])
    frame["flipped_s"] = frame["flipped_s"].astype("float64") - zero_wall
    return frame


EVENT_COLUMNS = ("t_s", "runner", "event", "run_id", "token", "bytes", "status", "listed_runs", "listed_bytes",
                 "listed_secrets", "lost_bytes", "lost_secrets")


def _events_frame(events: list[dict], zero_wall: float) -> pd.DataFrame:
    """The runners' events, one row each; a poll row also says what it showed its runner that the runner did
    not get (lost_bytes, lost_secrets): the listed runs other than the one it then claimed."""
    rows = []
    last_poll: dict[str, dict] = {}
    for event in events:  # time order
        row = {"t_s": event["t"] - zero_wall, "runner": event["runner"], "event": event["event"],
               "run_id": event.get("run"), "token": event.get("token"), "bytes": event.get("bytes", 0),
               "status": event.get("status"), "listed_runs": len(event.get("runs", [])),
               "listed_bytes": sum(event.get("run_bytes", [])), "listed_secrets": sum(event.get("secrets", [])),
               "lost_bytes": 0, "lost_secrets": 0}
        if event["event"] == "poll":
            row["lost_bytes"], row["lost_secrets"] = row["listed_bytes"], row["listed_secrets"]
            last_poll[event["runner"]] = (row, event)
        elif event["event"] == "claimed" and event["runner"] in last_poll:
            # every run a poll led its runner to win is not a loser's payload: a /pending runner claiming at once,
            # or a batch claim, can win several of the runs one poll showed
            poll_row, poll = last_poll[event["runner"]]
            for run, size, secrets in zip(poll.get("runs", []), poll.get("run_bytes", []), poll.get("secrets", [])):
                if run == event.get("run"):
                    poll_row["lost_bytes"] -= size
                    poll_row["lost_secrets"] -= secrets
        rows.append(row)
    frame = pd.DataFrame(rows, columns=list(EVENT_COLUMNS))
    for column in ("run_id", "token", "status"):
        frame[column] = frame[column].astype("Int64")
    return frame


def timeline(runs: pd.DataFrame, events: pd.DataFrame, bin_s: float = TIMELINE_BIN_SECONDS) -> pd.DataFrame:
    """Per second: runs enqueued (intended time), claimed, polls, conflicts, and pending at the second's end."""
    ends = [runs["enqueued_s"].max() if len(runs) else 0.0, runs["claimed_s"].max() if len(runs) else 0.0,
            events["t_s"].max() if len(events) else 0.0]
    last = max(0.0, *[e for e in ends if pd.notna(e)])
    edges = np.arange(0.0, last + bin_s, bin_s)
    if len(edges) < 2:
        edges = np.array([0.0, bin_s])

    def count(values) -> np.ndarray:
        return np.histogram(pd.Series(values).dropna().to_numpy(dtype=float), bins=edges)[0]

    enqueued, claimed = count(runs["enqueued_s"]), count(runs["claimed_s"])
    frame = pd.DataFrame({
        "second": edges[:-1], "enqueued": enqueued, "claimed": claimed,
        "polls": count(events.loc[events["event"] == "poll", "t_s"]),
        "conflicts": count(events.loc[events["event"] == "conflict", "t_s"]),
    })
    frame["pending"] = np.cumsum(enqueued) - np.cumsum(claimed)
    return frame


PICKUPS_FOR_A_P99 = 100  # below this a p99 is the maximum of the runs, and is shown as the maximum


def _percentile(values: np.ndarray, q: float) -> float | None:
    return float(np.percentile(values, q)) if len(values) else None


def first_claim_answer_ms(events: pd.DataFrame) -> np.ndarray:
    """Per poll that listed runs, the time from its answer to the answer of the first claim it led to (ms): how
    long a run the runner chose stays open to another runner's claim (GET /pending's claims only)."""
    steps = events[events["event"].isin(["poll", "claimed", "conflict"])].sort_values(["runner", "t_s"])
    previous = steps.groupby("runner")[["event", "t_s"]].shift(1)
    after_poll = steps["event"].isin(["claimed", "conflict"]) & (previous["event"] == "poll")
    return ((steps.loc[after_poll, "t_s"] - previous.loc[after_poll, "t_s"]) * 1e3).to_numpy(dtype=float)


def polls_met(events: pd.DataFrame) -> pd.DataFrame:
    """Every poll with its time, its runner, how many runs it listed and whether its runner met at least one 409
    before its next poll (`met`; a poll can meet up to five)."""
    steps = events[events["event"].isin(["poll", "conflict"])].sort_values(["runner", "t_s"])
    poll_number = (steps["event"] == "poll").astype(int).groupby(steps["runner"]).cumsum()
    met = (steps["event"] == "conflict") & (poll_number > 0)
    met_keys = set(zip(steps.loc[met, "runner"], poll_number[met]))
    polls = steps[steps["event"] == "poll"][["t_s", "runner", "listed_runs"]].copy()
    polls["met"] = [key in met_keys for key in zip(polls["runner"], poll_number[steps["event"] == "poll"])]
    return polls


def polls_with_a_conflict(events: pd.DataFrame) -> int:
    """Polls after which their runner met at least one 409 before its next poll."""
    return int(polls_met(events)["met"].sum())


def conflict_rounds(events: pd.DataFrame, poll_s: float) -> list[list[int]]:
    """Per poll round ([listing polls, of them met a 409]): the polls of every runner in one poll interval.
    Runners polling in one interval see the same listed runs and race each other for them, so their outcomes
    are not independent; the round, not the poll, is what an interval over polls resamples. Polls that listed
    no run cannot meet a 409 and are left out."""
    polls = polls_met(events)
    listing = polls[polls["listed_runs"] > 0]
    if not len(listing) or not poll_s:
        return []
    round_of = (listing["t_s"] // poll_s).astype(int)
    grouped = listing.groupby(round_of)["met"].agg(["size", "sum"])
    return [[int(n), int(m)] for n, m in zip(grouped["size"], grouped["sum"])]


def pickups_ms(runs: pd.DataFrame, resources: dict) -> tuple[np.ndarray, np.ndarray]:
    """Every run's pickup (ms): those picked up, and those never picked up counted at the end of the
    observation (censored: lower bounds of their pickup)."""
    pickup = runs["pickup_ms"].dropna().to_numpy(dtype=float)
    never = runs[runs["claimed_s"].isna()]
    ended_s = resources.get("ended_s")
    censored = ((ended_s - never["enqueued_s"]).to_numpy(dtype=float) * 1e3 if ended_s is not None
                else np.full(len(never), np.nan))
    return pickup, np.maximum(censored[~np.isnan(censored)], 0.0)


def pickups_counted_ms(runs: pd.DataFrame, resources: dict) -> list[float]:
    """The pickups a tail is read from: the censored ones at their bound."""
    pickup, censored = pickups_ms(runs, resources)
    return [float(v) for v in np.concatenate([pickup, censored])]


def figures(runs: pd.DataFrame, flips: pd.DataFrame, events: pd.DataFrame, resources: dict) -> dict:
    """A run's figures, from its stored rows."""
    kinds = events["event"].value_counts()
    polls = int(kinds.get("poll", 0))
    conflicts = int(kinds.get("conflict", 0))
    to_running = flips[flips["new_status"] == "running"]
    claimed = int(to_running["run_id"].nunique())
    per_run = to_running.groupby("run_id").size()
    pickup, censored = pickups_ms(runs, resources)
    never = runs[runs["claimed_s"].isna()]
    p50, _ = censored_percentile(pickup, censored, 50) if len(pickup) + len(censored) else (None, False)
    p99, p99_lower = censored_percentile(pickup, censored, 99) if len(pickup) + len(censored) else (None, False)
    observed = len(pickup) + len(censored)
    polls_rows = events[events["event"] == "poll"]
    transactions = resources.get("transactions")
    producer = resources.get("producer_statements", 0)
    service_statements = transactions - producer if transactions is not None else None
    backend_cpu = resources.get("backend_cpu_ms")

    def per(value, count):
        return value / count if value is not None and count else None

    with_conflict = polls_with_a_conflict(events)
    lost_bytes, lost_secrets = int(polls_rows["lost_bytes"].sum()), int(polls_rows["lost_secrets"].sum())
    return {
        "enqueued": int(len(runs)),
        "polls": polls,
        "conflicts": conflicts,
        "claimed": claimed,
        "finished": resources.get("accepted_finishes"),
        "pending_at_end": int((runs["status"] == "pending").sum()),
        "duplicate_jobs": int((per_run > 1).sum()),
        "polls_with_a_conflict": with_conflict,
        "conflicts_per_poll": per(conflicts, polls),
        # of the polls that listed a run: a poll that listed none cannot meet a 409
        "share_of_polls_with_a_conflict": per(with_conflict, int((polls_rows["listed_runs"] > 0).sum())),
        "conflicts_per_claimed_job": per(conflicts, claimed),
        "polls_per_claimed_job": per(polls, claimed),
        "empty_polls": int((polls_rows["listed_runs"] == 0).sum()),
        "listing_polls": int((polls_rows["listed_runs"] > 0).sum()),
        "loser_payload_bytes": lost_bytes,
        "loser_secrets": lost_secrets,
        "payload_bytes": int(polls_rows["bytes"].sum()),
        "loser_payload_bytes_per_claimed_job": per(lost_bytes, claimed),
        "loser_secrets_per_claimed_job": per(lost_secrets, claimed),
        "never_picked": int(len(never)),
        "pickup_p50_ms": p50,
        # with the never-picked runs at their bound: "at least" this when one of them lies at or above it
        "pickup_p99_ms": p99,
        "pickup_p99_is_lower_bound": bool(p99_lower),
        "pickups_observed": int(observed),
        # a p99 of fewer than PICKUPS_FOR_A_P99 runs is their maximum: the tail the article shows is then the max
        "pickup_p99_shown": bool(observed >= PICKUPS_FOR_A_P99),
        "pickup_max_ms": float(max(pickup.max() if len(pickup) else 0.0, censored.max() if len(censored) else 0.0))
        if observed else None,
        "pickup_max_is_lower_bound": bool(len(censored) and censored.max() >= (pickup.max() if len(pickup) else 0.0)),
        "statements": service_statements,
        "statements_per_claimed_job": per(service_statements, claimed),
        "backend_cpu_ms_per_claimed_job": per(backend_cpu, claimed),
        "service_cpu_ms_per_claimed_job": per(resources.get("service_process_cpu_ms"), claimed),
        "first_claim_answer_p50_ms": _percentile(first_claim_answer_ms(events), 50)
        if (polls_rows["listed_runs"] > 1).any() else None,
        "errors": int(kinds.get("error", 0)),
    }


def production_checks(runs: pd.DataFrame, flips: pd.DataFrame, events: pd.DataFrame,
                      pushes: pd.DataFrame) -> dict:
    """What must hold, checked against the database's own records: every enqueued run claimed exactly once or
    still pending; what the runners say they claimed is what the audit recorded; every push arrived."""
    to_running = flips[flips["new_status"] == "running"]
    per_run = to_running.groupby("run_id").size()
    claimed_ids = set(int(i) for i in per_run.index)
    pending_ids = set(int(i) for i in runs.loc[runs["status"] == "pending", "run_id"])
    all_ids = set(int(i) for i in runs["run_id"])
    runner_claims = sorted(int(i) for i in events.loc[events["event"] == "claimed", "run_id"].dropna())
    audit_claims = sorted(int(i) for i in to_running["run_id"])
    expected = int(pushes["count"].sum()) if len(pushes) else 0
    checks = {
        "enqueued": len(all_ids),
        "pushed": expected,
        "every_push_enqueued": len(all_ids) == expected,
        "duplicate_jobs": int((per_run > 1).sum()),
        "no_duplicates": bool((per_run <= 1).all()),
        "claimed_once_or_pending": claimed_ids.isdisjoint(pending_ids) and claimed_ids | pending_ids == all_ids,
        "runner_claims_match_audit": runner_claims == audit_claims,
    }
    checks["passed"] = all(checks[name] for name in ("every_push_enqueued", "no_duplicates",
                                                     "claimed_once_or_pending", "runner_claims_match_audit"))
    return checks


# --------------------------------------------------------------------------- reading stored runs


def summarise(run: Run) -> dict:
    """A stored run's parameters and figures, recomputed from its stored rows."""
    tables = {name: run.table(name) for name in ("runs", "flips", "events")}
    resources = run.results["resources"]
    return {**run.asked, "run_id": run.run_id,
            **figures(tables["runs"], tables["flips"], tables["events"], resources),
            "conflict_rounds": conflict_rounds(tables["events"], run.asked["poll_s"]),
            "pickups_ms": pickups_counted_ms(tables["runs"], resources)}


RAW_ROWS = ("conflict_rounds", "pickups_ms")  # what the article resamples; not printed per run

SHOWN = ("endpoint", "runner_count", "poll_s", "seconds", "arrival_rate", "burst", "enqueued", "claimed", "polls",
         "conflicts", "conflicts_per_poll", "pending_at_end", "duplicate_jobs", "pickup_p50_ms", "pickup_p99_ms",
         "loser_payload_bytes", "statements_per_claimed_job")


def show_runs(paths, as_json: bool) -> None:
    """What `python -m harness production` prints: one line (or JSON object) per run."""
    rows = [{key: value for key, value in Run(path).summary.items() if key not in RAW_ROWS}
            for path in paths]
    if as_json:
        for row in rows:
            print(json.dumps(row, default=lambda v: None if isinstance(v, float) and math.isnan(v) else str(v)))
        return
    frame = pd.DataFrame(rows)
    print(frame.loc[:, list(SHOWN)].to_string(index=False, float_format=lambda v: f"{v:,.3f}"))


# The kind as the store, the command line and the report see it (harness.experiments.registry).
KIND = Kind("production", ProductionParameters, measure_production, summarise,
            help="a claim service over HTTP, runner processes polling it and runs arriving over time (drops and "
                 "recreates claimrace.runs, claimrace.run_flips and claimrace.finishes before every run)",
            show=show_runs, sections=("production",), request=ProductionSweep,
            expand=ProductionSweep.points, workers=workers_needed,
            label=label, command=ProductionParameters,
            follow_up=lambda request, summaries: request.follow_up(summaries))
