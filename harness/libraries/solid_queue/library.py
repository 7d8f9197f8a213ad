"""Solid Queue (Ruby), modelled from its source: its declaration and its claim protocol
(harness.libraries.declaration)."""

from __future__ import annotations

from harness.libraries.declaration import (BEGIN, COMMIT, COMPLETE, JOBS, PICK, PLAIN, WRITE, Library, Protocol,
                                           Source)

# rails/solid_queue, app/models/solid_queue/ready_execution.rb (claim) and claimed_execution.rb: in one
# transaction, SELECT the next ready execution FOR UPDATE SKIP LOCKED, insert its claimed execution, re-select the
# claimed rows, delete the ready one; the row lock is held across those statements. The job's row is then loaded
# and the job run; its completion is a second transaction that locks the claimed row (plain FOR UPDATE), marks the
# job finished and deletes the claimed row. Solid Queue moves a job between tables where the model writes its
# status: the model's claim is one UPDATE where Solid Queue sends an INSERT and a DELETE, and its completion one
# UPDATE where it sends an UPDATE and a DELETE; its pause check before each claim is left out.
SOLID_QUEUE_PICK = f"SELECT id FROM {JOBS} WHERE status = 'pending' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED"
SOLID_QUEUE_CLAIM = f"UPDATE {JOBS} SET status = 'running', started_at = now() WHERE id = $1"
SOLID_QUEUE_RESELECT = f"SELECT id FROM {JOBS} WHERE id = $1 AND status = 'running'"
SOLID_QUEUE_LOAD = f"SELECT id, status, started_at FROM {JOBS} WHERE id = $1"
SOLID_QUEUE_LOCK = f"SELECT id FROM {JOBS} WHERE id = $1 FOR UPDATE"

LIBRARY = Library(
    "solid_queue", "Solid Queue (Ruby)",
    Source("rails/solid_queue", ("app/models/solid_queue/ready_execution.rb",
                                 "app/models/solid_queue/claimed_execution.rb"),
           "61a9f08a2bbdf02e60fac2371fbca0553f628dac", "1.5.0"),
    "the ready and claimed tables (an INSERT and a DELETE at claim and at completion), the pause check", False,
    Protocol("Solid Queue's claim and completion",
             "BEGIN, SELECT the next job FOR UPDATE SKIP LOCKED, claim it, re-select it, COMMIT; load the job; then "
             "BEGIN, lock it FOR UPDATE, finish it, COMMIT.",
             (("begin", PLAIN), ("pick", PICK), ("claim", WRITE), ("reselect", PLAIN), ("commit", PLAIN),
              ("load", PLAIN), ("begin", PLAIN), ("lock", PLAIN), ("finish", PLAIN), ("commit", PLAIN)),
             {"begin": BEGIN, "pick": SOLID_QUEUE_PICK, "claim": SOLID_QUEUE_CLAIM, "reselect": SOLID_QUEUE_RESELECT,
              "commit": COMMIT, "load": SOLID_QUEUE_LOAD, "lock": SOLID_QUEUE_LOCK, "finish": COMPLETE},
             "the claim and the completion each one READ COMMITTED transaction; the SKIP LOCKED row lock held across "
             "the claim's statements"),
    statements=13)
