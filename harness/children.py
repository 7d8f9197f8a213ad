"""What every child process the harness starts does first: die with the harness.

Workers, runners, the claim service and the delay proxy each call die_with_parent
at start, so that no process outlives the harness, SIGKILL of the harness included.
"""

from __future__ import annotations

import ctypes
import os
import signal

_PR_SET_PDEATHSIG = 1  # prctl(2): the signal the kernel sends this process when its parent dies


def die_with_parent(parent_pid: int) -> None:
    """Ask the kernel to SIGKILL this process when its parent dies; exit now if it already has."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the parent's cleanup still stops us
        pass
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        os._exit(1)
