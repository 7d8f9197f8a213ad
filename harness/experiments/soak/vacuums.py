"""A soak arm's own VACUUM of the jobs table every few seconds (--vacuum-every), as a queue's owner may schedule
one: on a connection of its own, from the run's start to its end, each pass's start, length and error kept.

Why an arm takes it: autovacuum looks at a table once a naptime (60 s by default), so a table whose claim walks the
index entries of finished jobs (the indexed history) slows between two passes with nothing held, and its control is
not a control. A VACUUM every few seconds lets the control's dead entries go as they come; a held horizon keeps
them all the same (VACUUM removes nothing a snapshot may still see), which is what the held arm then shows.
"""

from __future__ import annotations

import threading
import time

import pandas as pd

from harness.config import SCHEMA
from harness.server import database

JOBS = f"{SCHEMA}.jobs"
APPLICATION = "claimrace-soak-vacuum"  # its session's name: the sampler does not count its snapshot as a holder
EVERY_S = (1.0, 60.0)  # the bounds of --vacuum-every (0: none)
STOP_GRACE_S = 2.0  # a pass under way when the run ends is waited for this long, then cancelled
COLUMNS = ["t_s", "took_s", "error"]


class Vacuums:
    """VACUUM the jobs table at every multiple of every_s from the run's start (began, monotonic): a pass that takes
    longer than every_s skips the passes it overlaps rather than being followed by a burst. Each pass is kept, a
    failed one with its first line; stop() cancels a pass under way."""

    def __init__(self, url: str, began: float, every_s: float):
        self.url, self.began, self.every_s = url, began, every_s
        self.passes: list[dict] = []
        self.stopping = threading.Event()
        self.conn = None
        self.thread = threading.Thread(target=self._run, name=APPLICATION, daemon=True)

    def start(self) -> Vacuums:
        self.thread.start()
        return self

    def _run(self) -> None:
        while not self.stopping.wait(max(0.0, self.every_s - (time.monotonic() - self.began) % self.every_s)):
            t = time.monotonic() - self.began
            try:
                if self.conn is None or self.conn.closed or self.conn.broken:
                    self.conn = database.connect(self.url, application_name=APPLICATION)
                self.conn.execute(f"VACUUM {JOBS}")
                self.passes.append({"t_s": round(t, 3), "took_s": time.monotonic() - self.began - t, "error": None})
            except Exception as exc:
                self.passes.append({"t_s": round(t, 3), "took_s": time.monotonic() - self.began - t,
                                    "error": f"{type(exc).__name__}: {exc}".splitlines()[0]})
        if self.conn is not None:
            self.conn.close()

    def stop(self) -> pd.DataFrame:
        """Stop after the pass under way, cancelled if it takes longer than STOP_GRACE_S; the passes so far."""
        self.stopping.set()
        self.thread.join(STOP_GRACE_S)
        if self.thread.is_alive() and self.conn is not None:
            try:
                self.conn.cancel_safe()
            except Exception:  # gone already: the thread ends on its own
                pass
            self.thread.join(5 * STOP_GRACE_S)
        return pd.DataFrame(list(self.passes), columns=COLUMNS)


def summary(passes: pd.DataFrame, every_s: float) -> dict:
    """What a run's summary keeps of its passes: the setting, how many passes ended, how many failed, and the
    median pass's length."""
    done = passes[passes["error"].isna()] if len(passes) else passes
    return {"vacuum_every": every_s, "vacuum_passes": int(len(done)),
            "vacuum_failed": int(len(passes) - len(done)),
            "vacuum_pass_ms": float(done["took_s"].median() * 1000) if len(done) else None}
