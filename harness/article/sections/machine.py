"""The machine the runs ran on: its CPUs, platform, server build and settings, and how often autovacuum ran during
the races."""

from __future__ import annotations

from harness.article.analysis import autovacuum_runs
from harness.article.findings import Finding
from harness.article.formats import count, span

NAME = "machine"
READS = ()  # it reads the races' runs, loaded by their section


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
