"""Raw results on disk: one folder per run, written whole or not at all.

data/races/<run_id>/attempts.parquet   one row per claim attempt
data/races/<run_id>/claims.parquet     the server's audit of every flip to 'running'
data/races/<run_id>/workers.parquet    one row per worker: client CPU, backend CPU and run-queue delay
data/races/<run_id>/activity.parquet   pg_stat_activity of the worker backends, sampled every ~10 ms
data/races/<run_id>/manifest.json      parameters, server, client, checks
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from harness.errors import UserError

ATTEMPT_SCHEMA = pa.schema(
    [
        ("run_id", pa.dictionary(pa.int8(), pa.string())),
        ("strategy", pa.dictionary(pa.int8(), pa.string())),
        ("worker_count", pa.int32()),
        ("worker_index", pa.int32()),
        ("attempt_seq", pa.int64()),
        ("start_ns", pa.int64()),  # since the barrier released the first worker
        ("latency_ns", pa.int64()),  # monotonic clock, around the claim's round trips
        ("outcome", pa.dictionary(pa.int8(), pa.string())),
        ("job_id", pa.int64()),  # null when the attempt saw no job
        # slowed-down races only (null otherwise), since the barrier: the read's result, the write's start
        ("read_end_ns", pa.int64()),
        ("write_start_ns", pa.int64()),
    ]
)

# One row per worker: the client process's CPU, and its backend's CPU and run-queue delay from
# /proc/<pid>/schedstat over the worker's window (null for a server on another host).
WORKER_SCHEMA = pa.schema(
    [
        ("worker_index", pa.int32()),
        ("backend_pid", pa.int32()),
        ("released_ns", pa.int64()),  # since the barrier
        ("ended_ns", pa.int64()),
        ("attempts", pa.int64()),
        ("client_cpu_ns", pa.int64()),
        ("client_run_delay_ns", pa.int64()),  # the worker process's own wait for a CPU
        ("client_private_bytes", pa.int64()),
        ("backend_cpu_ns", pa.int64()),
        ("backend_run_delay_ns", pa.int64()),
        ("backend_timeslices", pa.int64()),
    ]
)

# pg_stat_activity sampled about every 10 ms during the race, one row per worker backend per sample.
ACTIVITY_SCHEMA = pa.schema(
    [
        ("sample_seq", pa.int32()),
        ("sample_ns", pa.int64()),  # since the barrier
        ("pid", pa.int32()),
        ("state", pa.dictionary(pa.int8(), pa.string())),
        ("wait_event_type", pa.dictionary(pa.int8(), pa.string())),
        ("wait_event", pa.dictionary(pa.int16(), pa.string())),
    ]
)

CLAIM_SCHEMA = pa.schema(
    [
        ("claim_seq", pa.int64()),
        ("job_id", pa.int64()),
        ("previous_status", pa.string()),
        ("backend_pid", pa.int32()),
        ("txid", pa.int64()),
        ("claimed_at", pa.timestamp("us", tz="UTC")),
    ]
)


def ensure_writable(data_dir: Path) -> Path:
    """The data directory, created if needed; one clear error if it cannot hold results."""
    data_dir = Path(data_dir)
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=data_dir, prefix=".write-test-"):
            pass
    except OSError as exc:
        raise UserError(f"cannot write to data directory {data_dir}: {exc.strerror or exc}") from None
    return data_dir


def write_json(path: Path, payload: dict) -> None:
    path.write_text(json.dumps(payload, indent=2, sort_keys=False, default=str) + "\n")


def read_json(path: Path) -> dict:
    return json.loads(Path(path).read_text())


class RunWriter:
    """Collects a run's files in a hidden folder and moves it into place only when complete."""

    def __init__(self, parent: Path, run_id: str):
        self.parent = Path(parent)
        self.parent.mkdir(parents=True, exist_ok=True)
        self.final = self.parent / run_id
        self.staging = Path(tempfile.mkdtemp(prefix=f".staging-{run_id}-", dir=self.parent))

    def table(self, name: str, table: pa.Table) -> None:
        pq.write_table(table, self.staging / f"{name}.parquet", compression="zstd")

    def json(self, name: str, payload: dict) -> None:
        write_json(self.staging / f"{name}.json", payload)

    def commit(self) -> Path:
        os.rename(self.staging, self.final)
        return self.final

    def discard(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)

    def __enter__(self) -> "RunWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.staging.exists():
            self.discard()


def latest_run_dir(parent: Path) -> Path | None:
    """The newest complete run under parent (run ids start with their UTC time), or None."""
    runs = run_dirs(parent)
    return runs[-1] if runs else None


def run_dirs(parent: Path) -> list[Path]:
    """Complete runs (staging folders and failed runs are not results)."""
    parent = Path(parent)
    if not parent.is_dir():
        return []
    return sorted(p for p in parent.iterdir() if p.is_dir() and not p.name.startswith(".")
                  and (p / "manifest.json").exists())
