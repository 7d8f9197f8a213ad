"""What one WAL flush costs on a disk, by PostgreSQL's own pg_test_fsync (shipped with the server): the time of an
fdatasync (Linux's default wal_sync_method) after one 8 kB write, beside the server's own timing of its flushes
(track_wal_io_timing), so a reader can scale a disk's figures to theirs.

pg_test_fsync compares every sync method for SECONDS each; only its first comparison is read, and the tool is
stopped once its fdatasync line is out (two methods, about two seconds).
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

from harness.children import die_with_parent

SECONDS = 1  # per method tested: the least pg_test_fsync takes
TIMEOUT_S = 30.0
FIRST_COMPARISON = "Compare file sync methods using one 8kB write"
FDATASYNC = re.compile(r"^\s*fdatasync\s+([\d.]+) ops/sec\s+(\d+) usecs/op")


def fdatasync(bin_dir: Path, directory: Path) -> dict | None:
    """{"fdatasync_ms", "ops_per_s", "tool"} for one 8 kB write and its fdatasync in `directory`, or None where the
    tool is not shipped or says nothing readable (a filesystem where fdatasync is n/a)."""
    tool = bin_dir / "pg_test_fsync"
    if not tool.exists():
        return None
    target = directory / "pg_test_fsync.out"
    parent = os.getpid()
    process = subprocess.Popen([str(tool), "-s", str(SECONDS), "-f", str(target)], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True, preexec_fn=lambda: die_with_parent(parent))
    found, in_first = None, False
    deadline = time.monotonic() + TIMEOUT_S
    try:
        for line in process.stdout:
            in_first = in_first or line.startswith(FIRST_COMPARISON)
            match = FDATASYNC.match(line) if in_first else None
            if match:
                found = {"fdatasync_ms": int(match.group(2)) / 1000, "ops_per_s": float(match.group(1)),
                         "tool": f"pg_test_fsync -s {SECONDS}, one 8kB write, fdatasync"}
                break
            if time.monotonic() > deadline:
                break
    finally:
        process.kill()
        process.wait(10)
        target.unlink(missing_ok=True)
    return found
