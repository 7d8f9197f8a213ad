"""Scratch folders: what a harness writes beside a run (worker logs, gates, a service's events, a pooler's config).

Each is named after the harness's pid and removed when its run ends. A harness killed with SIGKILL runs no cleanup,
so every new folder first sweeps away those whose harness is gone: nothing a killed harness wrote outlives the
next one.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import psutil

PREFIX = "claimrace-scratch-"


def folder(purpose: str) -> Path:
    """A new folder for this harness, `purpose` in its name (a run id and what it holds)."""
    sweep()
    return Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-{purpose}-"))


def owner(path: Path) -> int | None:
    """The pid of the harness that made a scratch folder, None for a folder not made here."""
    if not path.name.startswith(PREFIX):
        return None
    pid = path.name[len(PREFIX):].split("-", 1)[0]
    return int(pid) if pid.isdigit() else None


def sweep() -> list[Path]:
    """Remove the scratch folders of harnesses no longer running; returns them."""
    removed = []
    for path in Path(tempfile.gettempdir()).glob(f"{PREFIX}*"):
        pid = owner(path)
        if pid is not None and not _running(pid):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _running(pid: int) -> bool:
    """Whether pid names a process that still runs (a zombie has ended: only its exit status is left)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
