"""Open-loop arrivals: runs enqueued at a Poisson rate, plus bursts (one push fanning out K runs at once).

The schedule is drawn before the window opens and does not wait for the
system: each push is sent at its intended time (or as soon as possible after
it, when the producer itself is late), and each run's `enqueued_at` is the
INTENDED time, so a slow system cannot hide its delay in a late enqueue
(no coordinated omission). Each run carries a spec (a job/step tree) and
secrets encrypted with the run's key, like the original's payloads.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from dataclasses import dataclass, field

import numpy as np
import psycopg
from psycopg.types.json import Jsonb

from harness.service import cipher
from harness.service.queries import ENQUEUE

APPLICATION_NAME = "claimrace-producer"
DEFAULT_JOBS_PER_RUN = 3
DEFAULT_STEPS_PER_JOB = 4
DEFAULT_SECRETS_PER_RUN = 4


@dataclass(frozen=True)
class Push:
    """One INSERT: at `offset_s` after the window opens, `count` runs."""

    offset_s: float
    count: int
    burst: bool = False


def schedule(rate_per_s: float, seconds: float, burst: int = 0, burst_at_s: float | None = None,
             seed: int = 0) -> list[Push]:
    """Poisson arrivals at rate_per_s over [0, seconds), one run per push, plus one burst of `burst` runs."""
    rng = np.random.default_rng(seed)
    pushes = []
    t = 0.0
    if rate_per_s > 0:
        while True:
            t += rng.exponential(1.0 / rate_per_s)
            if t >= seconds:
                break
            pushes.append(Push(t, 1))
    if burst > 0:
        pushes.append(Push(seconds / 3 if burst_at_s is None else burst_at_s, burst, True))
    return sorted(pushes, key=lambda push: push.offset_s)


def payload(index: int, rng: np.random.Generator, jobs: int = DEFAULT_JOBS_PER_RUN,
            steps: int = DEFAULT_STEPS_PER_JOB, secrets: int = DEFAULT_SECRETS_PER_RUN) -> tuple[dict, dict]:
    """A run's spec (its job/step tree) and its secrets, different per run."""
    spec = {"run": index, "repository": f"org/repo-{index % 17}", "commit": f"{rng.integers(0, 2**63):016x}",
            "jobs": [{"name": f"job-{j}", "runs_on": "linux",
                      "steps": [{"name": f"step-{s}", "run": f"make target-{j}-{s} ARGS={rng.integers(0, 2**31)}"}
                                for s in range(steps)]} for j in range(jobs)]}
    return spec, {f"SECRET_{k}": f"{rng.integers(0, 2**63):016x}{rng.integers(0, 2**63):016x}"
                  for k in range(secrets)}


def enqueue(conn: psycopg.Connection, key: bytes, enqueued_at: list[dt.datetime], rng: np.random.Generator,
            first_index: int = 0, secrets_per_run: int = DEFAULT_SECRETS_PER_RUN) -> list[int]:
    """One statement: len(enqueued_at) runs, each with its intended enqueue time; their ids."""
    specs, sealed = [], []
    for offset in range(len(enqueued_at)):
        spec, secrets = payload(first_index + offset, rng, secrets=secrets_per_run)
        specs.append(Jsonb(spec))
        sealed.append(cipher.encrypt(key, secrets))
    rows = conn.execute(ENQUEUE, {"specs": specs, "secrets": sealed, "enqueued_at": list(enqueued_at)}).fetchall()
    return [row[0] for row in rows]


@dataclass
class Producer:
    """A thread that sends a schedule's pushes at their intended times, on its own connection."""

    url: str
    key: bytes
    pushes: list[Push]
    seed: int = 0
    secrets_per_run: int = DEFAULT_SECRETS_PER_RUN
    sent: list[dict] = field(default_factory=list)  # per push: intended and actual time, count, ids
    error: BaseException | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self, zero_wall: float, zero_monotonic: float) -> None:
        self._thread = threading.Thread(target=self._run, args=(zero_wall, zero_monotonic), daemon=True,
                                        name="producer")
        self._thread.start()

    def _run(self, zero_wall: float, zero_monotonic: float) -> None:
        rng = np.random.default_rng(self.seed + 1)
        index = 0
        try:
            with psycopg.connect(self.url, autocommit=True, application_name=APPLICATION_NAME) as conn:
                for push in self.pushes:
                    delay = zero_monotonic + push.offset_s - time.monotonic()
                    if delay > 0 and self._stop.wait(delay):
                        return
                    intended = dt.datetime.fromtimestamp(zero_wall + push.offset_s, dt.timezone.utc)
                    began = time.monotonic()
                    ids = enqueue(conn, self.key, [intended] * push.count, rng, index, self.secrets_per_run)
                    self.sent.append({"offset_s": push.offset_s, "sent_s": began - zero_monotonic,
                                      "count": push.count, "burst": push.burst, "first_id": ids[0],
                                      "insert_ms": (time.monotonic() - began) * 1e3})
                    index += push.count
        except BaseException as exc:  # noqa: BLE001 - handed to the caller by join()
            self.error = exc

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)
        if self.error is not None:
            raise self.error

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
