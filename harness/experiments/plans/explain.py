"""EXPLAIN (ANALYZE, BUFFERS) of the strategies' statements, rolled back, and the figures read from a plan.

The plans experiment explains every statement in a transaction that is rolled back, so the table keeps its
state; with an embedded server it also reads the backend's CPU time and run-queue wait during the EXPLAIN.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import psycopg
from psycopg import pq as libpq

from harness.server.activity import read_schedstat
from harness.claims.strategies import ORIGINAL_STRATEGIES, STRATEGIES


@dataclass(frozen=True)
class PlannedStatement:
    """One statement of one strategy, as strategies.py holds it."""

    strategy: str
    statement: str  # the prepared name the race uses: 'pick' or 'claim'
    sql: str

    @property
    def needs_job_id(self) -> bool:
        return "$1" in self.sql

    @property
    def label(self) -> str:
        return f"{self.strategy}.{self.statement}"


SKIP_LOCKED = PlannedStatement("skip_locked", "claim", dict(STRATEGIES["skip_locked"].statements)["claim"])


def strategy_statements() -> list[PlannedStatement]:
    """Every statement of the original three strategies, skip_locked's claim first."""
    found = [SKIP_LOCKED]
    for strategy in (STRATEGIES[name] for name in ORIGINAL_STRATEGIES):
        for name, text in strategy.statements:
            planned = PlannedStatement(strategy.name, name, text)
            if planned not in found:
                found.append(planned)
    return found



def explain(conn: psycopg.Connection, sql: str, params: tuple = (), fmt: str = "json"):
    """EXPLAIN (ANALYZE, BUFFERS) of one statement, inside a transaction that is rolled back.

    params bind $1.. through the extended protocol, so the statement text is
    exactly the one in strategies.py. Returns the parsed JSON document
    (fmt="json") or the text a reader would see (fmt="text").
    """
    return explain_on_cpu(conn, sql, params, fmt)[0]


def explain_on_cpu(conn: psycopg.Connection, sql: str, params: tuple = (), fmt: str = "json",
                   local_backend: bool = False):
    """explain(), plus the backend's CPU time and run-queue wait during the EXPLAIN (ns, or None).

    EXPLAIN's times are wall-clock: on a busy machine a backend that waits for
    a CPU looks slow. When the server runs on this host, /proc/<pid>/schedstat
    says how long the backend actually ran and how long it waited to run.
    """
    if fmt not in ("json", "text"):
        raise ValueError(f"fmt must be json or text, not {fmt!r}")
    options = "ANALYZE, BUFFERS, FORMAT JSON" if fmt == "json" else "ANALYZE, BUFFERS"
    pgconn = conn.pgconn
    _run(pgconn, b"BEGIN")
    try:
        before = read_schedstat(pgconn.backend_pid) if local_backend else None
        result = pgconn.exec_params(f"EXPLAIN ({options}) {sql}".encode(),
                                    [str(p).encode() for p in params] or None)
        after = read_schedstat(pgconn.backend_pid) if before is not None else None
        if result.status != libpq.ExecStatus.TUPLES_OK:
            raise RuntimeError(f"EXPLAIN failed: {result.error_message.decode(errors='replace').strip()}")
        lines = [result.get_value(i, 0).decode() for i in range(result.ntuples)]
    finally:
        _run(pgconn, b"ROLLBACK")  # the claim ran for real; undo it
    cpu_ns = wait_ns = None
    if before is not None and after is not None:
        cpu_ns, wait_ns = after[0] - before[0], after[1] - before[1]
    plan = json.loads(lines[0])[0] if fmt == "json" else "\n".join(lines)
    return plan, cpu_ns, wait_ns


def _run(pgconn, command: bytes) -> None:
    result = pgconn.exec_(command)
    if result.status != libpq.ExecStatus.COMMAND_OK:
        raise RuntimeError(f"{command.decode()} failed: {result.error_message.decode(errors='replace').strip()}")


def _walk(node: dict, in_subplan: bool = False):
    """Every plan node in order, with whether it runs inside an InitPlan or SubPlan."""
    inside = in_subplan or node.get("Parent Relationship") in ("InitPlan", "SubPlan")
    yield node, inside
    for child in node.get("Plans", ()):
        yield from _walk(child, inside)


def inner_scan(root: dict) -> dict | None:
    """The scan that looks for a pending row: the one in the subquery if there is one, else the first scan."""
    scans = [(node, inside) for node, inside in _walk(root) if node["Node Type"].endswith("Scan")]
    for node, inside in scans:
        if inside:
            return node
    return scans[0][0] if scans else None


def plan_metrics(document: dict) -> dict:
    """The figures of one EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) document."""
    root = document["Plan"]
    inner = inner_scan(root) or {}
    planning = document.get("Planning", {})
    return {
        "shared_hit_blocks": int(root.get("Shared Hit Blocks", 0)),
        "shared_read_blocks": int(root.get("Shared Read Blocks", 0)),
        "shared_dirtied_blocks": int(root.get("Shared Dirtied Blocks", 0)),
        "inner_node": inner.get("Node Type"),
        "index_used": inner.get("Index Name"),
        "inner_filter": inner.get("Filter"),
        "inner_shared_hit_blocks": int(inner.get("Shared Hit Blocks", 0)),
        "inner_shared_read_blocks": int(inner.get("Shared Read Blocks", 0)),
        "rows_removed_by_filter": int(inner.get("Rows Removed by Filter", 0)),
        "rows_returned": int(root.get("Actual Rows", 0)),
        "planning_ms": float(document.get("Planning Time", float("nan"))),
        "execution_ms": float(document.get("Execution Time", float("nan"))),
        "planning_shared_hit_blocks": int(planning.get("Shared Hit Blocks", 0)),
        "top_node": root.get("Node Type"),
        "estimated_total_cost": float(root.get("Total Cost", float("nan"))),
    }
