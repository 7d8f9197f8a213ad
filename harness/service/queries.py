"""Every statement the claim service runs, written once, per protocol.

Protocols:
- `none`: a claim is a flip to 'running'; a finish is accepted while the run is 'running', whoever holds it.
- `lease`: a claim also sets lease_until = now() + lease; a heartbeat by the holder extends it; a finish is
  still accepted while the run is 'running' whoever holds it (unfenced: a runner whose run was reaped and
  claimed again by another runner can still finish it).
- `lease_holder`: heartbeat and finish require the runner that holds the run (claimed_by), no counter: a runner
  whose run was reaped and handed to another runner is refused, as with the fence, but not one that claimed the
  same run again under the same name.
- `lease_fenced`: heartbeat and finish also require the attempt (fencing token) the runner was handed.

Each statement is one round trip in autocommit; the finish records an accepted finish in the same statement.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.claims.steps import BATCH
from harness.config import SCHEMA
from harness.errors import UserError
from harness.claims.strategies import skip_locked_pick

PROTOCOLS = ("none", "lease", "lease_holder", "lease_fenced")
PENDING_LIMIT = 5  # GET /pending lists at most this many runs, oldest first, reserving nothing
MAX_CLAIM_BATCH = 100  # POST /claim hands out at most this many runs per request
MAX_LEASE_SECONDS = 3600.0

RUN_COLUMNS = "id, status, spec, secrets, enqueued_at, claimed_at, claimed_by, attempt"

PENDING = f"""SELECT {RUN_COLUMNS} FROM {SCHEMA}.runs
WHERE status = 'pending'
ORDER BY id
LIMIT {PENDING_LIMIT}"""

ENQUEUE = f"""INSERT INTO {SCHEMA}.runs (spec, secrets, enqueued_at)
SELECT spec, secrets, enqueued_at
FROM unnest(%(specs)s::jsonb[], %(secrets)s::bytea[], %(enqueued_at)s::timestamptz[]) AS pushed(spec, secrets, enqueued_at)
RETURNING id"""


def check_protocol(protocol: str, lease_s: float) -> None:
    if protocol not in PROTOCOLS:
        raise UserError(f"protocol must be one of {', '.join(PROTOCOLS)}, not {protocol!r}")
    if not 0.1 <= lease_s <= MAX_LEASE_SECONDS:  # also refuses NaN
        raise UserError(f"lease must be between 0.1 and {MAX_LEASE_SECONDS:g} seconds, not {lease_s!r}")


def _lease_set(protocol: str) -> str:
    return ", lease_until = now() + make_interval(secs => %(lease_s)s)" if protocol != "none" else ""


@dataclass(frozen=True)
class Queries:
    """The statements for one protocol; parameters are passed by name (%(id)s, %(runner)s, %(token)s, %(lease_s)s)."""

    protocol: str
    claim_by_id: str
    claim_batch: str  # POST /claim: up to BATCH runs in one statement (claim_next_for fills the number in)
    heartbeat: str
    finish: str
    pending: str = PENDING
    enqueue: str = ENQUEUE

    def claim_next_for(self, batch: int) -> str:
        """The claim of up to `batch` runs in one statement (1: the single claim)."""
        if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= MAX_CLAIM_BATCH:
            raise ValueError(f"a claim takes 1 to {MAX_CLAIM_BATCH} runs, not {batch!r}")
        return self.claim_batch.replace(BATCH, str(batch))

    @property
    def claim_next(self) -> str:
        return self.claim_next_for(1)


def queries_for(protocol: str) -> Queries:
    check_protocol(protocol, 1.0)
    lease = _lease_set(protocol)
    claim_by_id = f"""UPDATE {SCHEMA}.runs
SET status = 'running', claimed_by = %(runner)s, claimed_at = now(), attempt = attempt + 1{lease}
WHERE id = %(id)s AND status = 'pending'
RETURNING {RUN_COLUMNS}"""
    # skip_locked_batch's statement (harness.claims.strategies.BATCH_CLAIM_CTE) on the runs table: the pick runs once
    # in its CTE, so one statement never hands out more than the batch. Its WHERE id IN form can claim more
    # when the planner reruns the subquery per outer row (strategies.BATCH_CLAIM_IN), so it is not used here.
    claim_batch = f"""WITH pick AS ({skip_locked_pick('runs')})
UPDATE {SCHEMA}.runs AS r
SET status = 'running', claimed_by = %(runner)s, claimed_at = now(), attempt = r.attempt + 1{lease}
FROM pick
WHERE r.id = pick.id
RETURNING {', '.join('r.' + c.strip() for c in RUN_COLUMNS.split(','))}"""
    fence = {"lease_fenced": " AND attempt = %(token)s", "lease_holder": " AND claimed_by = %(runner)s"}.get(protocol, "")
    heartbeat_fence = fence if protocol == "lease_fenced" else ""  # every lease's heartbeat checks the holder
    if protocol == "none":  # no lease to extend: a heartbeat only says whether the runner still holds the run
        heartbeat = f"""SELECT id FROM {SCHEMA}.runs
WHERE id = %(id)s AND status = 'running' AND claimed_by = %(runner)s"""
    else:
        heartbeat = f"""UPDATE {SCHEMA}.runs
SET lease_until = now() + make_interval(secs => %(lease_s)s)
WHERE id = %(id)s AND status = 'running' AND claimed_by = %(runner)s{heartbeat_fence}
RETURNING id"""
    finish = f"""WITH done AS (
    UPDATE {SCHEMA}.runs
    SET status = 'done', finished_at = now(), finished_by = %(runner)s
    WHERE id = %(id)s AND status = 'running'{fence}
    RETURNING id
)
INSERT INTO {SCHEMA}.finishes (run_id, runner, attempt, finished_at)
SELECT id, %(runner)s, %(token)s, now() FROM done
RETURNING run_id"""
    return Queries(protocol, claim_by_id, claim_batch, heartbeat, finish)
