"""Where the race's processes run: every CPU shared (the default), or the server and the clients on separate CPUs.

On a machine with few cores the workers and their backends queue for the same
CPUs, and past a few workers the race measures that queue (see
`harness.server.activity.cpu_bound`). `split` gives the server the first half of
this process's CPUs and the clients (the workers, the harness, its sampler) the
rest: one CPU each on a 2-core machine, so a reader with more cores can see what
separate machines would change. The server's processes are pinned by their pids,
which needs a server that runs on this host; new backends inherit the postmaster's
CPUs. Everything pinned gets its CPUs back when the block ends.

Public API::

    CPU_LAYOUTS = ("shared", "split")
    split_cpus() -> (server_cpus, client_cpus)
    pinned(conn, layout, server_is_local) -> context manager yielding the client CPUs (None when shared)
"""

from __future__ import annotations

import os
from contextlib import contextmanager

import psutil

from harness.errors import UserError

CPU_LAYOUTS = ("shared", "split")


def split_cpus() -> tuple[frozenset[int], frozenset[int]]:
    """The server's half and the clients' half of the CPUs this process may use (at least one each)."""
    available = sorted(os.sched_getaffinity(0))
    if len(available) < 2:
        raise UserError(f"--cpus split needs at least 2 CPUs; this process may use {len(available)}")
    half = len(available) // 2
    return frozenset(available[:half]), frozenset(available[half:])


def _server_processes(conn) -> list[psutil.Process]:
    """The postmaster of conn's backend and every process it has started."""
    backend = psutil.Process(conn.pgconn.backend_pid)
    postmaster = backend.parent()
    if postmaster is None or not postmaster.name().startswith(("postgres", "postmaster")):
        raise UserError("--cpus split needs the server's processes on this host; its postmaster was not found")
    return [postmaster, *postmaster.children()]


def _set(process, cpus) -> None:
    try:
        process.cpu_affinity(sorted(cpus))
    except psutil.NoSuchProcess:  # a backend that ended meanwhile
        pass


@contextmanager
def pinned(conn, layout: str, server_is_local: bool):
    """Within the block, in `split`: the server's processes on the server's CPUs and this process on the
    clients' (children forked inside inherit them). Yields the clients' CPUs, or None when shared."""
    if layout not in CPU_LAYOUTS:
        raise UserError(f"cpus must be one of {', '.join(CPU_LAYOUTS)}, not {layout!r}")
    if layout == "shared":
        yield None
        return
    if not server_is_local:
        raise UserError("--cpus split needs a server that runs on this machine (its processes are pinned by pid)")
    server_cpus, client_cpus = split_cpus()
    everything = sorted(server_cpus | client_cpus)
    own = os.sched_getaffinity(0)
    processes = _server_processes(conn)
    try:
        for process in processes:
            _set(process, server_cpus)
        os.sched_setaffinity(0, client_cpus)
        yield client_cpus
    finally:
        os.sched_setaffinity(0, own)
        # the processes pinned, and those the postmaster started meanwhile (they inherited its CPUs)
        for process in [*processes, *processes[0].children()]:
            _set(process, everything)
