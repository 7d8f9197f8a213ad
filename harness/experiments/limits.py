"""How many workers this machine can run: checked before any server or process starts.

A worker is a client process and, on a server of this machine, a backend.
Measured at 100 workers on the embedded PostgreSQL 16 (skip_locked, a timed
race): a worker process holds 3.3-4.6 MiB of its own memory (USS) and a
backend about 1.7 MiB (its shared buffers are shared). The budgets below are
several times that, so lists of raw attempts in a long drain and a backend's
work memory fit too. Besides memory, each worker costs the harness a process
(the kernel's and the user's process limits) and a file descriptor (the
process's sentinel pipe).

A race with a network round trip (`--rtt-ms`) adds one delay-proxy process
for the whole race, not one per worker: measured at 100 workers it peaks at
about 17 MiB (16 MiB at 4 workers: some 10 KiB per connection), well inside
RESERVED_BYTES. Its two sockets per connection count against its own
open-file limit, which it raises itself, not the harness's. Nothing below
changes for it.
"""

from __future__ import annotations

import os
import resource

import psutil

from harness.errors import UserError

CLIENT_PROCESS_BYTES = 12 * 2**20  # one worker process: the interpreter's private pages and its raw lists
BACKEND_BYTES = 8 * 2**20  # one server backend's private memory, when the server runs on this machine
RESERVED_BYTES = 2 * 2**30  # left for the server's shared memory, the harness and everything else
RESERVED_PROCESSES = 256  # left for the rest of the machine
RESERVED_FILES = 64  # the harness's own files, sockets and pipes
# A drain keeps one raw record per attempt in its worker until the race ends: four list slots and
# two boxed ints (start and end times), about 128 bytes; at worst every worker tries for every job.
ATTEMPT_BYTES = 128


def _read_int(path: str) -> int | None:
    try:
        with open(path) as handle:
            return int(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def worker_bound(server_on_this_machine: bool = True) -> tuple[int, str]:
    """The largest worker count this machine can run now, and what sets it."""
    per_worker = CLIENT_PROCESS_BYTES + (BACKEND_BYTES if server_on_this_machine else 0)
    available = psutil.virtual_memory().available
    bounds = {
        f"memory ({available / 2**30:.1f} GiB available, {per_worker / 2**20:.0f} MiB per worker"
        f"{' and its backend' if server_on_this_machine else ''})": (available - RESERVED_BYTES) // per_worker,
    }
    soft_processes, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    if soft_processes != resource.RLIM_INFINITY:
        running = len(psutil.pids())
        bounds[f"the user's process limit ({soft_processes}, {running} running)"] = soft_processes - running
    for path, name in (("/proc/sys/kernel/pid_max", "the kernel's pid_max"),
                       ("/proc/sys/kernel/threads-max", "the kernel's threads-max")):
        limit = _read_int(path)
        if limit is not None:
            bounds[f"{name} ({limit})"] = (limit - len(psutil.pids()) - RESERVED_PROCESSES) // \
                (2 if server_on_this_machine else 1)
    _, hard_files = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard_files != resource.RLIM_INFINITY:
        bounds[f"open files ({hard_files})"] = hard_files - RESERVED_FILES
    reason, bound = min(bounds.items(), key=lambda item: item[1])
    return max(0, int(bound)), reason


def check_race_size(worker_count: int, job_count: int | None = None, server_on_this_machine: bool = True) -> None:
    """One line naming the bound if a race is beyond what this machine can run (job_count None: a timed race)."""
    bound, reason = worker_bound(server_on_this_machine)
    if worker_count > bound:
        raise UserError(f"{worker_count} workers exceed what this machine can run: at most {bound}, "
                        f"set by {reason}; use fewer workers")
    if job_count is not None:
        worst = job_count * worker_count * ATTEMPT_BYTES
        room = psutil.virtual_memory().available - RESERVED_BYTES - worker_count * CLIENT_PROCESS_BYTES
        if worst > room:
            raise UserError(f"{job_count:,} jobs for {worker_count} workers could need {worst / 2**30:.1f} GiB of "
                            f"attempt records (every worker trying every job) and {max(room, 0) / 2**30:.1f} GiB "
                            "are free; use fewer jobs or workers")
    _raise_open_file_limit(worker_count)


def _raise_open_file_limit(worker_count: int) -> None:
    """The harness holds a pipe per worker process: lift the soft limit towards the hard one if needed."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = worker_count + RESERVED_FILES
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted if hard == resource.RLIM_INFINITY else min(hard, wanted),
                                                    hard))


def server_on_this_machine(db: str | None) -> bool:
    """Whether the chosen server's backends run on this machine (embedded, docker, or a local URL)."""
    if db is None:
        db = "url" if os.environ.get("DATABASE_URL") else "embedded"
    if db != "url":
        return True
    url = os.environ.get("DATABASE_URL", "")
    return any(host in url for host in ("localhost", "127.0.0.1", "[::1]", "@/", "host=/")) or "@" not in url
