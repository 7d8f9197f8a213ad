"""Stops an embedded server when the harness that started it dies, SIGKILL included.

The harness starts `python -m harness.server.watchdog <server folder>` with a pipe
on its standard input and keeps the pipe's other end. The kernel closes that
end when the harness exits, however it exits, and the watchdog's read returns:
if the server is still there (the harness did not stop it), the watchdog
stops it and removes its folder. It runs in a session of its own, so a Ctrl-C
meant for the harness does not stop it before its work is done.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path


def stop_postmaster(data_dir: Path) -> None:
    """Stop the server that owns data_dir, by its postmaster.pid (fast, then kill)."""
    pid_file = data_dir / "pgdata" / "postmaster.pid"
    try:
        pid = int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGINT)  # "fast" shutdown
        for _ in range(100):
            time.sleep(0.1)
            os.kill(pid, 0)
        os.kill(pid, signal.SIGKILL)


def start(server_root: Path) -> subprocess.Popen:
    """The watchdog for server_root; the returned process's stdin is the pipe that keeps it waiting."""
    return subprocess.Popen([sys.executable, "-m", "harness.server.watchdog", str(server_root)], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            close_fds=True)


def main(server_root: str) -> int:
    sys.stdin.buffer.read()  # returns at EOF: the harness closed the pipe or died
    root = Path(server_root)
    if root.exists():
        stop_postmaster(root)
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
