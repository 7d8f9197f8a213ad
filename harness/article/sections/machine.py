"""The machine the runs ran on: its CPUs, platform, server build and settings, and how often autovacuum ran during
the races."""

from __future__ import annotations

import pandas as pd

from harness.article.findings import Finding
from harness.article.formats import count, span

NAME = "machine"
READS = ()
UPSTREAM = ("races",)


def load(reads: dict, loaded: dict) -> None:
    return None


def findings(loaded: dict) -> list[Finding]:
    return []


def values(loaded: dict, found: dict[str, Finding]) -> dict[str, str]:
    races = loaded["races"]
    site = races.site
    settings = site.get("settings", {})
    vacuum = autovacuum_runs(races.summary)
    return {"platform": site.get("platform"), "python": site.get("python"),
            "server_version_string": site.get("server_version_string"),
            "data_storage": "tmpfs" if site.get("tmpfs") else "disk",
            "fsync": settings.get("fsync"), "synchronous_commit": settings.get("synchronous_commit"),
            "shared_buffers": settings.get("shared_buffers"), "max_connections": settings.get("max_connections"),
            "first_started": site.get("first_started_at", "")[:19].replace("T", " "),
            "last_started": site.get("last_started_at", "")[:19].replace("T", " "),
            "load_average": span(site.get("load_average_min"), site.get("load_average_max")),
            "race_count": count(vacuum["races"]), "with_autovacuum": count(vacuum["with_autovacuum"])}


def autovacuum_runs(summary: pd.DataFrame) -> dict:
    """How many races saw autovacuum or autoanalyze run on their table, and whether any had it turned off."""
    runs = summary.get("autovacuum_runs", pd.Series(dtype=float)).fillna(0)
    analyses = summary.get("autoanalyze_runs", pd.Series(dtype=float)).fillna(0)
    return {"races": int(len(summary)), "with_autovacuum": int((runs > 0).sum()),
            "with_autoanalyze": int((analyses > 0).sum()), "autovacuum_total": int(runs.sum()),
            "autovacuum_off": int((~summary.get("autovacuum", pd.Series(True, index=summary.index))).sum())}
