"""The subsection "On a disk" of "When a transaction holds the horizon": the sweep's strategies raced with the server's data
on a disk, where each claim's commit waits for its WAL flush with the row lock held, beside the sweep's own races on
tmpfs at the same points (harness.experiments.race.trials, storage "disk")."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from harness.article.analysis import race_summary
from harness.article.formats import DASH, ms, number, percent, span
from harness.article.prose import join, numbered, table
from harness.article.wording import Sentences

NAME = "durable"
READS = ("disk_race",)
UPSTREAM = ("races",)
say = Sentences(NAME)

SLOWER, FASTER, OVERLAP, CPU_BOUND, ONE_SIDE, ONE_RACE = ("slower", "faster", "overlap", "cpu_bound", "one_side",
                                                          "one_race")
ANSWERS = (SLOWER, FASTER, OVERLAP, CPU_BOUND, ONE_SIDE, ONE_RACE)


@dataclass(frozen=True)
class Loaded:
    points: pd.DataFrame  # one row per race: race_summary's columns and `storage`


def _storage(run) -> str:
    return run.parameters.storage


def load(reads: dict, loaded: dict) -> Loaded | None:
    disk_runs = [run for run in reads["disk_race"].runs] if "disk_race" in reads else []
    if not disk_runs:
        return None
    races = loaded.get("races")
    tmpfs_runs = [run for run in (races.runs if races is not None else ()) if _storage(run) == "tmpfs"]
    disk = race_summary([run.path for run in disk_runs]).assign(storage="disk")
    tmpfs = race_summary([run.path for run in tmpfs_runs]).assign(storage="tmpfs") if tmpfs_runs else None
    if tmpfs is not None:  # the sweep's races at the disk races' points only
        same = tmpfs.set_index(["strategy", "worker_count", "job_count"]).index.isin(
            disk.set_index(["strategy", "worker_count", "job_count"]).index)
        tmpfs = tmpfs[same]
    points = pd.concat([frame for frame in (tmpfs, disk) if frame is not None], ignore_index=True)
    points["strategy"] = points["strategy"].astype(str)
    return Loaded(points)


def findings(loaded: dict) -> list:
    return []


def on_disk(tmpfs: pd.DataFrame, disk: pd.DataFrame) -> str:
    """One strategy at one worker count: SLOWER where every disk race's claims/s lies below every tmpfs race's,
    FASTER where every one lies above, OVERLAP where they interleave; CPU_BOUND where a race of either side was
    (its rate is the machine's); ONE_SIDE where a side has no race, ONE_RACE where a side has one (no spread to
    judge by)."""
    if not len(tmpfs) or not len(disk):
        return ONE_SIDE
    if len(tmpfs) < 2 or len(disk) < 2:
        return ONE_RACE
    if (tmpfs["cpu_bound"] == True).any() or (disk["cpu_bound"] == True).any():  # noqa: E712 (None: not read)
        return CPU_BOUND
    if disk["claims_per_second"].max() < tmpfs["claims_per_second"].min():
        return SLOWER
    if disk["claims_per_second"].min() > tmpfs["claims_per_second"].max():
        return FASTER
    return OVERLAP


def _points(points: pd.DataFrame):
    """(strategy, worker count, its tmpfs races, its disk races), in the sweep's order."""
    for (strategy, workers), races in points.groupby(["strategy", "worker_count"], sort=False):
        yield strategy, int(workers), races[races["storage"] == "tmpfs"], races[races["storage"] == "disk"]


def _range(races: pd.DataFrame, column: str, fmt) -> str:
    return span(races[column].min(), races[column].max(), fmt) if len(races) else DASH


def _waste(strategy: str, races: pd.DataFrame) -> str:
    """What contention cost the strategy: naive's jobs handed to two workers, guarded's lost races per win."""
    if not len(races):
        return DASH
    if strategy == "naive":
        return _range(races.assign(shared=races["duplicate_jobs"] / races["job_count"]), "shared", percent)
    if strategy == "guarded":
        return _range(races, "losses_per_win", lambda v: number(v, 2))
    return _range(races, "duplicate_jobs", lambda v: number(v, 0))


COLUMNS = ("strategy", "workers", "claims/s: tmpfs / disk", "p99: tmpfs / disk",
           "shared jobs, lost races per win, or duplicates: tmpfs / disk", "on a disk")


def disk_table(loaded: dict) -> str:
    mine = loaded.get(NAME)
    if mine is None:
        return ""
    rows = []
    for strategy, workers, tmpfs, disk in _points(mine.points):
        rows.append(dict(zip(COLUMNS, (
            strategy, str(workers),
            f"{_range(tmpfs, 'claims_per_second', lambda v: number(v, 0))} / "
            f"{_range(disk, 'claims_per_second', lambda v: number(v, 0))}",
            f"{_range(tmpfs, 'p99_ms', ms)} / {_range(disk, 'p99_ms', ms)}",
            f"{_waste(strategy, tmpfs)} / {_waste(strategy, disk)}",
            say.each("answer", ("slower", "faster", "overlap", "cpu_bound", "one_side", "one_race"))[on_disk(tmpfs, disk)]))))
    points = mine.points
    return table(pd.DataFrame(rows, columns=list(COLUMNS)), css_class="wide", caption=say(
        "caption", jobs=join([f"{j:,}" for j in sorted(set(points["job_count"]))]),
        tmpfs=numbered(int(points[points["storage"] == "tmpfs"].groupby(["strategy", "worker_count"]).size().max()
                           if (points["storage"] == "tmpfs").any() else 0), "race"),
        disk=numbered(int(points[points["storage"] == "disk"].groupby(["strategy", "worker_count"]).size().max()),
                      "race")))


def values(loaded: dict, found: dict) -> dict[str, str]:
    mine = loaded.get(NAME)
    if mine is None:
        return {"disk_setup": say("setup.no_runs")}
    answers = [on_disk(tmpfs, disk) for _, _, tmpfs, disk in _points(mine.points)]
    counted = join([say.each("counted", ("slower", "faster", "overlap", "cpu_bound", "one_side", "one_race"),
                             n=answers.count(answer))[answer] for answer in ANSWERS if answers.count(answer)])
    return {"disk_setup": say("setup.runs", points=numbered(len(answers), "point"), counted=counted)}
