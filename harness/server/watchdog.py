"""Stops an embedded server when the harness that started it dies, SIGKILL included.

The harness starts `python -m harness.server.watchdog <server folder>` with a pipe
on its standard input and keeps the pipe's other end. The kernel closes that
end when the harness exits, however it exits, and the watchdog's read returns:
if the server is still there (the harness did not stop it), the watchdog
stops it and removes its folder. It runs in a session of its own, so a Ctrl-C
meant for the harness does not stop it before its work is done.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path


def start(server_root: Path) -> subprocess.Popen:
    """The watchdog for server_root; the returned process's stdin is the pipe that keeps it waiting."""
    return subprocess.Popen([sys.executable, "-m", "harness.server.watchdog", str(server_root)], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            close_fds=True)


def main(server_root: str) -> int:
    sys.stdin.buffer.read()  # returns at EOF: the harness closed the pipe or died
    root = Path(server_root)
    if root.exists():
        from harness.server.database import _stop_postmaster

        _stop_postmaster(root)
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
