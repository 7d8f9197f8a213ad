"""What a soak run's commits cost on its storage: the WAL flushes the server counted over the run, and what one
took (harness.experiments.soak.measure and .library read them before and after a run)."""

from __future__ import annotations

from harness.server import database, pgstats


def flush_figures(db: database.Database, settings: dict, before: tuple[int, float], after: tuple[int, float]) -> dict:
    """What a run's commits cost on its storage: the WAL flushes between two wal_syncs readings, the server's own
    time per flush where it times them (track_wal_io_timing), the storage as the server's start found it, and the
    same disk's fdatasync by pg_test_fsync, taken as the server started (harness.server.flush_cost)."""
    return {"wal_syncs": after[0] - before[0],
            "wal_sync_ms_per_sync": (after[1] - before[1]) / (after[0] - before[0])
            if settings["track_wal_io_timing"] == "on" and after[0] > before[0] else None,
            "storage_found": db.details.get("storage"), "filesystem": db.details.get("filesystem"),
            "pg_test_fsync_ms": (db.details.get("pg_test_fsync") or {}).get("fdatasync_ms")}


def wal_syncs(conn) -> tuple[int, float]:
    """(WAL flushes to disk so far, the ms they took where timed): pg_stat_io's wal rows on PostgreSQL 18,
    pg_stat_wal from 14 to 17; (0, 0.0) before (nothing counts them)."""
    major = pgstats.server_major(conn)
    if major >= 18:
        row = conn.execute("SELECT sum(fsyncs), sum(fsync_time) FROM pg_stat_io WHERE object = 'wal'").fetchone()
    elif major >= 14:
        row = conn.execute("SELECT wal_sync, wal_sync_time FROM pg_stat_wal").fetchone()
    else:
        row = (0, 0.0)
    return int(row[0] or 0), float(row[1] or 0.0)
