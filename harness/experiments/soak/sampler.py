"""The soak's sampler: the jobs table, the MVCC horizon and this machine's CPUs every SAMPLE_S, on a connection of
its own, and every EXPLAIN_EVERY_S the claim's read under EXPLAIN (ANALYZE, BUFFERS) on another: the buffers one
claim reads."""

from __future__ import annotations

import threading
import time

import numpy as np
import pandas as pd
import psutil

from harness.config import SCHEMA
from harness.experiments.soak import vacuums as soak_vacuums
from harness.server import database

JOBS = f"{SCHEMA}.jobs"
SAMPLE_S = 1.0
EXPLAIN_EVERY_S = 5.0
STOP_GRACE_S = 5.0
# the claim's read, as EXPLAIN sees it: the rows one claim visits to find the oldest pending job (no lock taken)
READ_SQL = f"SELECT id FROM {JOBS} WHERE status = 'pending' ORDER BY id LIMIT 1"
# what holds the horizon: a backend's snapshot (backend_xmin), or a transaction id it took and sits on (backend_xid:
# an idle transaction has no snapshot, and its xid holds the horizon all the same)
HORIZON_SQL = ("SELECT max(greatest(age(backend_xmin), age(backend_xid))), "
               "extract(epoch FROM max(clock_timestamp() - xact_start) "
               "FILTER (WHERE backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)) "
               "FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND backend_type = 'client backend' "
               f"AND datname = current_database() AND application_name <> '{soak_vacuums.APPLICATION}'")
# not autovacuum's, nor an arm's own VACUUM's (harness.experiments.soak.vacuums: a VACUUM's snapshot holds nothing
# back), nor another database's


def table_sql(table: str) -> str:
    """The table's and its partitions' (a dropped one leaves the sums) tuples, vacuums and sizes, and the WAL
    position."""
    return (f"WITH parts AS (SELECT '{table}'::regclass::oid AS relid UNION ALL "
            f"SELECT inhrelid FROM pg_inherits WHERE inhparent = '{table}'::regclass) "
            "SELECT sum(s.n_live_tup), sum(s.n_dead_tup), sum(s.autovacuum_count), sum(s.vacuum_count), "
            "sum(pg_relation_size(p.relid)), sum(pg_indexes_size(p.relid)), pg_current_wal_lsn() - '0/0'::pg_lsn "
            "FROM parts p LEFT JOIN pg_stat_user_tables s ON s.relid = p.relid")


SAMPLE_COLUMNS = ["t_s", "n_live_tup", "n_dead_tup", "autovacuum_count", "vacuum_count", "table_bytes",
                  "index_bytes", "wal_bytes", "horizon_age_xids", "horizon_age_s", "buffers_per_claim", "explain_ms",
                  "cpu_busy_share"]
# what each EXPLAIN adds, on the row sampled nearest it; claim_scan: how the claim's read reached the table (scan_of)
EXPLAINED_COLUMNS = ["buffers_per_claim", "explain_ms", "claim_scan"]
COVERED_SHARE = 0.9  # a run sampled this share of its seconds or more passes its "sampled" check
EXPLAIN_TIMEOUT_S = 30.0  # an EXPLAIN of the claim's read that takes longer is cancelled, and counted as such


def cpu_reading() -> tuple[float, float]:
    """(busy, all) CPU seconds of every CPU of this machine since boot, whoever used them: guest time is counted in
    user time already, and a CPU waiting on I/O is idle."""
    times = psutil.cpu_times()
    total = sum(getattr(times, name) for name in times._fields if name not in ("guest", "guest_nice"))
    return total - times.idle - getattr(times, "iowait", 0.0), total


def busy_share(before: tuple[float, float] | None, after: tuple[float, float]) -> float | None:
    """The share of this machine's CPU time that was busy between two readings; None without an earlier one."""
    if before is None or after[1] <= before[1]:
        return None
    return min(1.0, max(0.0, (after[0] - before[0]) / (after[1] - before[1])))


class Sampler:
    """The table and the horizon every SAMPLE_S, the claim's read buffers every EXPLAIN_EVERY_S, each on a thread
    and a connection of its own, so that a slow EXPLAIN (the claims are slowest when it matters) delays no sample
    of the table. A sample that fails is counted (missed, with its first error) and the next is taken: every sample
    taken is kept. table: another jobs table (a job library's, harness.experiments.soak.library), whose claim is
    not explained (read_sql None)."""

    def __init__(self, url: str, began: float, table: str = JOBS, read_sql: str | None = READ_SQL):
        self.url, self.began = url, began
        self.table_sql, self.read_sql = table_sql(table), read_sql
        self.rows: list[dict] = []
        self.explained: list[dict] = []
        self.error: str | None = None  # the first failure: one that kept a thread from sampling at all, or a sample
        self.missed = {"table": 0, "explain": 0, "explain_timed_out": 0}
        self.cpu: tuple[float, float] | None = None  # the last reading of the machine's CPUs (cpu_reading)
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(self._table, SAMPLE_S, "claimrace-soak-sampler"),
                                         name="claimrace-soak-sampler", daemon=True)]
        if read_sql is not None:
            self.threads.append(threading.Thread(
                target=self._run, args=(self._explain, EXPLAIN_EVERY_S, "claimrace-soak-explain"),
                name="claimrace-soak-explain", daemon=True))

    def start(self) -> Sampler:
        for thread in self.threads:
            thread.start()
        return self

    def _run(self, sample, every_s: float, name: str) -> None:
        conn = None
        while True:
            t = time.monotonic() - self.began
            try:
                if conn is None or conn.closed or conn.broken:
                    conn = database.connect(self.url, application_name=name)
                    conn.execute(f"SET statement_timeout = '{EXPLAIN_TIMEOUT_S:g}s'")
                sample(conn, t)
            except Exception as exc:
                kind = "explain" if name.endswith("explain") else "table"
                timed_out = "statement timeout" in str(exc)
                self.missed[f"{kind}_timed_out" if timed_out and kind == "explain" else kind] += 1
                self.error = self.error or f"{type(exc).__name__}: {exc}".splitlines()[0]
                if conn is not None and not conn.broken:
                    try:
                        conn.rollback()
                    except Exception:
                        conn = None
            # the next sample every_s after this one started: a slow one is not followed by a burst
            if self.stopping.wait(max(0.0, every_s - (time.monotonic() - self.began - t))):
                if conn is not None:
                    conn.close()
                return

    def _table(self, conn, t: float) -> None:
        # the CPUs since the last sample taken (one that failed leaves a longer interval, not a gap)
        cpu = cpu_reading()
        busy = busy_share(self.cpu, cpu)
        conn.execute("SELECT pg_stat_clear_snapshot()")
        table = conn.execute(self.table_sql).fetchone()
        horizon = conn.execute(HORIZON_SQL).fetchone()
        self.rows.append(dict(zip(SAMPLE_COLUMNS, (
            round(t, 3), *(None if v is None else int(v) for v in table),
            None if horizon[0] is None else int(horizon[0]), None if horizon[1] is None else float(horizon[1]),
            None, None, busy))))
        self.cpu = cpu

    def _explain(self, conn, t: float) -> None:
        began = time.perf_counter()
        plan = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {self.read_sql}").fetchone()[0]
        top = plan[0]["Plan"]
        self.explained.append({"t_s": round(t, 3), "explain_ms": (time.perf_counter() - began) * 1000,
                               "buffers_per_claim": int(top.get("Shared Hit Blocks", 0))
                               + int(top.get("Shared Read Blocks", 0)), "claim_scan": scan_of(top)})

    def stop(self) -> pd.DataFrame:
        """The samples: one row per sample of the table, each EXPLAIN's buffers on the row sampled nearest it."""
        self.stopping.set()
        for thread in self.threads:
            thread.join(STOP_GRACE_S + EXPLAIN_TIMEOUT_S)
        rows = pd.DataFrame(self.rows, columns=SAMPLE_COLUMNS).sort_values("t_s").reset_index(drop=True)
        explained = pd.DataFrame(self.explained, columns=["t_s", *EXPLAINED_COLUMNS])
        rows["claim_scan"] = None
        if len(rows) and len(explained):
            nearest = np.abs(rows["t_s"].to_numpy()[:, None] - explained["t_s"].to_numpy()[None, :]).argmin(axis=0)
            rows["buffers_per_claim"], rows["explain_ms"] = np.nan, np.nan
            for column in EXPLAINED_COLUMNS:
                rows.loc[nearest, column] = explained[column].to_numpy()
        return rows


def scan_of(node: dict) -> str:
    """How a plan reaches its table: the first node, depth first, that reads a relation ("Seq Scan", "Index Scan
    using jobs_pkey"); the planner picks it from the table's statistics, which each ANALYZE (autovacuum's among
    them) renews."""
    if "Relation Name" in node:
        index = node.get("Index Name")
        return node["Node Type"] + (f" using {index}" if index else "")
    for child in node.get("Plans", ()):
        found = scan_of(child)
        if found:
            return found
    return ""


def covered(samples: pd.DataFrame, ended_s: float) -> bool:
    """Whether the table was sampled at least COVERED_SHARE of the seconds the run lasted."""
    return len(samples) >= COVERED_SHARE * ended_s / SAMPLE_S


def _max(samples: pd.DataFrame, column: str, kind=int):
    values = samples[column].dropna() if column in samples else ()
    return kind(values.max()) if len(values) else None


def _increments(samples: pd.DataFrame, column: str) -> int | None:
    """What a counter summed over the table's partitions went up by: its rises, sample to sample (a partition
    dropped takes its count with it, which is not a fall of the counter)."""
    values = samples[column].dropna() if column in samples else ()
    return int(values.diff().clip(lower=0).sum()) if len(values) else None


def _span(samples: pd.DataFrame, column: str) -> int | None:
    values = samples[column].dropna() if column in samples else ()
    return int(values.max() - values.min()) if len(values) else None


def at(samples: pd.DataFrame, t_s: float, column: str):
    """A column's last value sampled by the end of run second t_s (up to SAMPLE_S after its start; the claim's
    buffers are read every EXPLAIN_EVERY_S: the last read); None where none was."""
    values = samples.loc[samples["t_s"] <= t_s + SAMPLE_S, ["t_s", column]].dropna()
    return None if not len(values) else float(values[column].iloc[-1])


def at_hold(samples: pd.DataFrame, pin_from: float) -> dict:
    """The table as the hold found it: its dead tuples at the last sample before pin_from, and the seconds since
    autovacuum last passed over it by then (the sample at which its count rose; None where it had not yet, or no
    sample was read). Kept as what the hold found: a check of 2026-12-07 (docs/soak.md) found they do not set
    when a held delete table falls behind."""
    before = samples[samples["t_s"] < pin_from].sort_values("t_s") if "t_s" in samples else samples.iloc[:0]
    dead = before["n_dead_tup"].dropna() if "n_dead_tup" in before else before.iloc[:0]
    counts = before[["t_s", "autovacuum_count"]].dropna() if "autovacuum_count" in before else before.iloc[:0]
    rose = counts["t_s"][counts["autovacuum_count"].diff() > 0] if len(counts) else counts
    return {"dead_tuples_at_hold": int(dead.iloc[-1]) if len(dead) else None,
            "autovacuum_before_hold_s": round(pin_from - float(rose.iloc[-1]), 1) if len(rose) else None}


def summary(samples: pd.DataFrame, pin_from: float) -> dict:
    """What a run's summary keeps of its samples: the table's and the horizon's highest, the autovacuum runs on the
    table, the WAL written, and the state the hold found (at_hold)."""
    return {**at_hold(samples, pin_from),
            "dead_tuples_max": _max(samples, "n_dead_tup"), "table_bytes_max": _max(samples, "table_bytes"),
            "index_bytes_max": _max(samples, "index_bytes"), "horizon_age_max_s": _max(samples, "horizon_age_s", float),
            "buffers_per_claim_max": _max(samples, "buffers_per_claim"),
            "autovacuum_runs": _increments(samples, "autovacuum_count"), "wal_bytes": _span(samples, "wal_bytes")}
