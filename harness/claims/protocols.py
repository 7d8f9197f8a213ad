"""The job libraries' claim protocols as strategies the race runs: each library declares its protocol once, in its
folder (harness.libraries.<name>.library, listed in harness.libraries.catalogue), as statements and their roles;
this module gives it the loop step that runs it. Variants take a safeguard out of a protocol to show what it prevents.
"""

from __future__ import annotations

from harness.claims.steps import (AUTOCOMMIT, EMPTY, IDLE, LOST, OK, TUPLES_OK, WON, AttemptNotes, Strategy,
                                 abandon_transaction, failed_statement, one_statement_stepwise)
from harness.libraries.catalogue import LIBRARIES, LIBRARY_STRATEGIES, SOURCES
from harness.libraries.declaration import CHECK, CLAIM, PICK, RELEASE, WRITE

_COMMIT = b"COMMIT"
_UNLOCK_ALL = b"SELECT pg_advisory_unlock_all()"


def _protocol_steps(protocol: tuple[tuple[str, str], ...], sql: dict[str, str], counts_stray_locks: bool):
    """One attempt of a library's protocol: its statements in order, each given the picked job's id where its SQL
    takes one ($1), ended early by an empty pick or a failed check (an open transaction is committed, as the
    library's would be), its release statements run once a job was picked.

    A claim once written stays won: a statement that fails after it (a completion, an unlock) ends the attempt but
    does not undo what the audit recorded. Where the protocol takes advisory locks, its last release counts the
    locks the session still holds and releases them (a measurement and a clean-up of this harness, not the
    library's), so each attempt's note is its own; an attempt that failed before it picked a job releases them
    too, and notes none (its pick's locks are not known)."""
    steps = tuple((name.encode(), role, "$1" in sql[name]) for name, role in protocol if role != RELEASE)
    releases = tuple((name.encode(), "$1" in sql[name]) for name, role in protocol if role == RELEASE)

    def noted_steps(notes: AttemptNotes, batch: int):
        add_stray = notes.stray_locks.append

        def claim(pgconn) -> tuple[int, int]:
            job_id, outcome = None, None
            for name, role, with_job in steps:
                result = pgconn.exec_prepared(name, (job_id,) if with_job else None)
                if result.status not in OK:
                    if pgconn.transaction_status == IDLE:
                        failed = failed_statement(pgconn, job_id)[0]
                    else:
                        failed = abandon_transaction(pgconn, result, job_id)[0]
                    outcome = WON if outcome == WON else failed
                    break
                if role in (PICK, CLAIM):
                    if result.ntuples == 0:
                        outcome = EMPTY
                        break
                    job_id = result.get_value(0, 0)
                    outcome = WON if role == CLAIM else outcome
                elif role == CHECK and result.ntuples == 0:
                    outcome = LOST
                    break
                elif role == WRITE:
                    outcome = WON if (result.command_tuples or 0) >= 1 else LOST
                    if outcome == LOST:
                        break
            if outcome in (EMPTY, LOST) and pgconn.transaction_status != IDLE:
                pgconn.exec_(_COMMIT)
            if job_id is None or not releases:
                if counts_stray_locks:  # one note per attempt
                    if outcome != EMPTY:
                        pgconn.exec_(_UNLOCK_ALL)
                    add_stray(0)
                return outcome, int(job_id or 0)
            for name, with_job in releases:
                released = pgconn.exec_prepared(name, (job_id,) if with_job else None)
                if released.status != TUPLES_OK:
                    if counts_stray_locks:
                        pgconn.exec_(_UNLOCK_ALL)
                        add_stray(0)
                    return (WON if outcome == WON else failed_statement(pgconn, job_id)[0]), int(job_id)
            if counts_stray_locks:
                add_stray(int(released.get_value(0, 0)))
            return outcome, int(job_id)

        return claim, one_statement_stepwise(claim)

    return noted_steps


def library_strategy(name: str, title: str, summary: str, protocol: tuple[tuple[str, str], ...],
                      sql: dict[str, str], isolation: str, counts_stray_locks: bool = False,
                      library_name: str | None = None) -> "Strategy":
    """A job library's protocol as a strategy the race runs: its statements prepared once each, its sequence kept.
    library_name: the library a variant of its protocol comes from (its name otherwise)."""
    source = SOURCES[library_name or name]
    roles = [role for _, role in protocol]
    # one step wins the job; the releases come last
    assert sum(role in (CLAIM, WRITE) for role in roles) == 1, name
    assert RELEASE not in roles or roles[roles.index(RELEASE):] == [RELEASE] * roles.count(RELEASE), name
    return Strategy(
        name=name, title=title, summary=summary,
        statements=tuple(sql.items()), protocol=protocol,
        noted_steps=_protocol_steps(protocol, sql, counts_stray_locks),
        counts_stray_locks=counts_stray_locks, isolation=isolation, library_source=str(source),
        not_benched="a library's protocol hands the picked id from statement to statement and may end early; "
                    "the bench's scripts run a fixed list",
    )


# A library's protocol with one of its safeguards taken out, to show what the safeguard prevents: variant -> the
# library whose protocol it changes
LIBRARY_VARIANTS = {"que_without_recheck": "que"}
# Every library's protocol in LIBRARIES' order, each followed by its variants: the order the article shows them in
# (harness.article.labels), and what `libraries` stands for among a race's strategies (harness.claims.strategies)
LIBRARY_PROTOCOL_ORDER = tuple(name for library in LIBRARY_STRATEGIES for name in (
    library, *(variant for variant, of in LIBRARY_VARIANTS.items() if of == library)))
PROTOCOLS: dict[str, Strategy] = {library.name: library_strategy(
    library.name, library.protocol.title, library.protocol.summary, library.protocol.steps, library.protocol.sql,
    library.protocol.isolation or AUTOCOMMIT, library.protocol.counts_stray_locks) for library in LIBRARIES}


def _without_step(name: str, of: str, step: str, title: str, summary: str) -> Strategy:
    """A library's protocol with one step taken out (a safeguard), to show what that step prevents."""
    strategy = PROTOCOLS[of]
    protocol = tuple(s for s in strategy.protocol if s[0] != step)
    sql = {n: text for n, text in strategy.statements if n != step}
    return library_strategy(name, title, summary, protocol, sql, strategy.isolation,
                             strategy.counts_stray_locks, library_name=of)


PROTOCOLS["que_without_recheck"] = _without_step(
    "que_without_recheck", "que", "verify", "Que's poll without its re-check",
    "Que's protocol with the re-check under the lock taken out: the job runs once the poll holds its lock.")
