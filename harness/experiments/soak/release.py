"""When a soak run's hold ends and the run with it (harness.experiments.soak.measure): with hold_until_failure,
the backlog read live at every whole second from the counters the arrivals and the workers keep in shared memory
(harness.experiments.soak.processes), and the rule's fall-behind onset (harness.experiments.soak.outcomes)
applied to it as the run goes."""

from __future__ import annotations

import math
import time

import numpy as np

from harness.experiments.soak import outcomes as soak_outcomes
from harness.experiments.soak import processes as soak_processes


class LiveSeries:
    """The backlog at the end of each whole second, from the shared counts, as the run goes: the rule's
    fall-behind onset (harness.experiments.soak.outcomes) read live, to end a hold once the queue fell behind."""

    def __init__(self):
        self.seconds: list[float] = []
        self.arrived: list[int] = []  # in the second
        self.backlog: list[int] = []  # at its end
        self._arrived_so_far = 0

    def add(self, second: float, arrived: int, claimed: int) -> None:
        self.seconds.append(second)
        self.arrived.append(arrived - self._arrived_so_far)
        self.backlog.append(arrived - claimed)
        self._arrived_so_far = arrived

    def fell_behind(self, pin_from: float) -> bool:
        seconds = np.array(self.seconds, float)
        before = (seconds >= soak_outcomes.WARMUP_S) & (seconds < pin_from)
        level = soak_outcomes.behind_level(np.array(self.backlog)[before], np.array(self.arrived)[before])
        return soak_outcomes.onset(np.array(self.backlog) > level, seconds, pin_from, math.inf,
                                   soak_outcomes.BEHIND_RUN_S) is not None


def run_until_done(p, began: float, counts, holder, processes, bar) -> dict:
    """Wait out the run: to its length (its phases'), or with hold_until_failure until RECOVER_WITHIN_S and HOLD_S after the
    release (the recovery the rule watches for), the hold released once the queue fell behind, at its cap, or where
    the server ended it first (a timeout). A run that reached the cap without falling behind has nothing to recover
    from: it ends BEHIND_RUN_S later, the seconds an onset begun just before the cap needs to be seen. Returns when
    the hold was released (s from the start) and why."""
    live = LiveSeries()
    end_at = p.length_s
    release = {"at_s": p.release_at, "because": "hold_max" if p.hold_until_failure else "pin_to"}
    waiting = p.hold_until_failure  # for the queue to fall behind, or the cap
    watch_s = soak_outcomes.RECOVER_WITHIN_S + soak_outcomes.HOLD_S
    second = 1
    while (now := time.monotonic() - began) < end_at:
        time.sleep(max(0.0, min(second, end_at) - now))
        now = time.monotonic() - began
        if now >= second:
            with counts.get_lock():
                arrived, claimed = counts[soak_processes.ARRIVED], counts[soak_processes.CLAIMED]
            live.add(second - 1, arrived, claimed)
            second += 1
            if bar is not None:
                bar.update(1)
        if waiting:
            behind = now >= p.pin_from and live.fell_behind(p.pin_from)
            ended = [event["t_s"] for event in holder.events if event["event"] == "ended_early"]
            if behind or ended or now >= p.release_at:
                waiting = False
                because = "fell_behind" if behind else "ended_early" if ended else "hold_max"
                release = {"at_s": min(now, p.release_at, *ended), "because": because}
                holder.release()
                # a queue that did not fall behind has no recovery to watch: it is watched only for an onset that
                # began in the hold's last seconds
                # (BEHIND_RUN_S more, so that an onset starting in the hold's last seconds is seen whole)
                watched_s = watch_s if because != "hold_max" else float(max(soak_outcomes.BEHIND_RUN_S,
                                                                            soak_outcomes.HOLD_S))
                end_at = min(p.length_s, release["at_s"] + watched_s)
                if bar is not None:
                    bar.total = int(math.ceil(end_at))
                    bar.refresh()
        if not all(proc.is_alive() for proc in processes):
            break
    return release
