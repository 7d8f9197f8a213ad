"""The gate a fault run's job waits on in the stale-completion probe (harness.experiments.libraries.probe).

A worker process started with GATE_ENV set to a directory runs each job until the harness opens that job's gate
for this process (a file named "<job>-<pid>" there), instead of for the job's length: the harness then decides
which of two holders finishes first. A gate never opened ends the job after MAX_HOLD_S, so no worker waits for
ever. Without GATE_ENV a job lasts its length, as every other fault run's does. The Node workers read the same
variable (harness/libraries/node/common.cjs, hold).
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

GATE_ENV = "CLAIMRACE_GATE_DIR"
POLL_S = 0.01
MAX_HOLD_S = 300.0


def gate_path(directory: Path, job, pid: int) -> Path:
    return Path(directory) / f"{job}-{pid}"


def open_gate(directory: Path, job, pid: int) -> None:
    gate_path(directory, job, pid).touch()


def hold(job, job_s: float) -> None:
    """A job's length: job_s, or, behind a gate, until the harness opens it (at most MAX_HOLD_S)."""
    directory = os.environ.get(GATE_ENV)
    if not directory:
        time.sleep(job_s)
        return
    path, deadline = gate_path(Path(directory), job, os.getpid()), time.monotonic() + MAX_HOLD_S
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(POLL_S)


async def hold_async(job, job_s: float) -> None:
    """hold, for a job that runs on an event loop."""
    directory = os.environ.get(GATE_ENV)
    if not directory:
        await asyncio.sleep(job_s)
        return
    path, deadline = gate_path(Path(directory), job, os.getpid()), time.monotonic() + MAX_HOLD_S
    while not path.exists() and time.monotonic() < deadline:
        await asyncio.sleep(POLL_S)
