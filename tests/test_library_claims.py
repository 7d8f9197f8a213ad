"""The job libraries' claim protocols (harness.claims.protocols) raced on a real server: each model's statements
have the shape its library's source shows, each hands every job to one worker, and A8 reads each outcome it can
return from stored races, a protocol that runs jobs twice included."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest

from harness.libraries import catalogue, declaration
from harness.libraries.good_job import library as good_job
from harness.libraries.que import library as que
from harness.article.analysis import race_summary
from harness.article.findings import CONFIRMED, CORRECTED, NOT_MEASURED
from harness.article.sections import libraries as section
from harness.experiments import registry
from harness.experiments.race.trials import RaceSweep
from harness.server import schema
from harness.server.database import connect
from harness.storage import Run, read_manifest
from harness import libraries
from harness.claims.strategies import STRATEGIES
from harness.libraries.declaration import CHECK, PICK, RELEASE, WRITE
from harness.libraries.catalogue import LIBRARY_STRATEGIES, MODELLED_LIBRARY_STRATEGIES, RACED_LIBRARY_STRATEGIES


def pgmq_sql_version() -> str:
    from pgmq.install import get_embedded_sql_version
    return get_embedded_sql_version()


def race(db, tmp_path, strategies, worker_counts, job_count):
    asked = RaceSweep(strategies=list(strategies), worker_counts=list(worker_counts), job_count=job_count)
    return registry.measure("race", asked, tmp_path, db=db, progress=False)


def sequence(name: str) -> list[str]:
    """A protocol's statements in the order one job sends them."""
    strategy = STRATEGIES[name]
    texts = dict(strategy.statements)
    return [texts[step] for step, _ in strategy.protocol]


def psycopg_form(statement: str) -> str:
    """A protocol's statement as psycopg takes it: its $1 becomes %s."""
    return statement.replace("$1", "%s")


def roles(name: str) -> list[str]:
    return [role for _, role in STRATEGIES[name].protocol]


# --------------------------------------------------------------------------- the shapes their sources show


def test_river_fetches_with_one_skip_locked_cte_update_and_no_transaction():
    [statement] = sequence("river")
    assert statement.startswith("WITH") and "FOR UPDATE SKIP LOCKED" in statement and "LIMIT 1" in statement
    assert "UPDATE" in statement.split("FOR UPDATE SKIP LOCKED")[1] and statement.endswith("RETURNING j.id")
    assert STRATEGIES["river"].statements_per_attempt == 1


def test_oban_claims_inside_begin_and_commit_and_completes_by_id_afterwards():
    begin, claim, commit, complete = sequence("oban")
    assert begin.startswith("BEGIN") and commit == "COMMIT"
    assert claim == declaration.SKIP_LOCKED_CLAIM and "FOR UPDATE SKIP LOCKED" in claim and "UPDATE" in claim
    assert complete.startswith("UPDATE") and "WHERE id = $1" in complete and "status =" not in complete.split("WHERE")[1]


def test_que_locks_in_a_recursive_walk_writes_nothing_at_claim_and_unlocks_after_the_resolve():
    poll, verify, exists, resolve, unlock = sequence("que")
    assert poll.startswith("WITH RECURSIVE") and poll.count("pg_try_advisory_lock") == 2
    assert "UPDATE" not in poll and "FOR UPDATE" not in poll
    assert "status = 'pending'" in verify and "$1" in verify  # a new snapshot, after the lock
    assert roles("que") == [PICK, CHECK, CHECK, WRITE, RELEASE]
    assert "pg_advisory_unlock($1)" in unlock


def test_good_job_takes_its_lock_over_a_thousand_materialised_candidates_with_an_md5_key():
    pick, reload, begin, start, commit, begin2, finish, commit2, held, unlock, held_after = sequence("good_job")
    assert "AS MATERIALIZED" in pick and "LIMIT 1000" in pick and "LIMIT 1)" in pick
    assert "md5('jobs-' || id::text), 1, 16))::bit(64)::bigint" in pick
    assert "status <> 'done'" in reload
    assert (begin, commit, begin2, commit2) == (declaration.BEGIN, "COMMIT", declaration.BEGIN, "COMMIT")
    assert start.startswith("UPDATE") and finish.startswith("UPDATE") and "'done'" in finish
    assert "pg_locks" in held and "pg_advisory_unlock" in unlock and "pg_locks" in held_after
    assert STRATEGIES["good_job"].statements_per_attempt == 11


def test_solid_queue_holds_its_skip_locked_row_across_the_claim_and_locks_plainly_to_complete():
    statements = sequence("solid_queue")
    assert [s.split()[0] for s in statements] == ["BEGIN", "SELECT", "UPDATE", "SELECT", "COMMIT", "SELECT", "BEGIN",
                                                  "SELECT", "UPDATE", "COMMIT"]
    assert statements[1].endswith("FOR UPDATE SKIP LOCKED")
    assert statements[7].endswith("FOR UPDATE") and "SKIP LOCKED" not in statements[7]


def test_every_protocol_names_its_source_and_what_it_leaves_out():
    for name in MODELLED_LIBRARY_STRATEGIES:  # read at a commit
        source = catalogue.SOURCES[name]
        assert STRATEGIES[name].library_source == str(source) and len(source.commit) == 40 and source.files
        assert source.short.startswith(f"{source.repository} @ {source.commit[:7]}: ")
        assert catalogue.DROPPED[name] and catalogue.LIBRARY_STATEMENTS[name] >= STRATEGIES[name].statements_per_attempt
    for name in RACED_LIBRARY_STRATEGIES:  # read from the release installed here, which its own worker races
        source = catalogue.SOURCES[name]
        installed = pgmq_sql_version() if name == "pgmq" else libraries.version(name)
        assert STRATEGIES[name].library_source == str(source) and not source.commit
        assert installed is None or source.release in (installed, f"SQL {installed}")  # the release raced here
        assert source.short.startswith(f"{source.repository} @ {source.release}: ") and catalogue.DROPPED[name]
        assert name in libraries.NAMES and name not in catalogue.LIBRARY_STATEMENTS  # its count is the logged one


# --------------------------------------------------------------------------- the locks, on a real server


def test_ques_walk_tries_each_lock_once_and_holds_only_the_job_it_returns(db, conn):
    schema.create_queue(conn, 10)
    other = connect(db.url)
    try:
        other.execute("SELECT pg_advisory_lock(id) FROM generate_series(1, 3) AS id")  # three jobs held elsewhere
        with connect(db.url) as mine:
            [(picked,)] = mine.execute(que.QUE_POLL).fetchall()
            held = mine.execute("SELECT objid FROM pg_locks WHERE locktype = 'advisory' "
                                "AND pid = pg_backend_pid()").fetchall()
            assert picked == 4 and [int(h[0]) for h in held] == [4]
            assert mine.execute(psycopg_form(que.QUE_UNLOCK), (picked,)).fetchone()[0] == 0
    finally:
        other.close()


def test_good_jobs_lock_check_finds_the_key_its_pick_took_and_the_unlock_frees_it(db, conn):
    schema.create_queue(conn, 5)
    with connect(db.url) as mine:
        [(picked,)] = mine.execute(good_job.GOOD_JOB_PICK).fetchall()
        assert picked == 1
        assert mine.execute(psycopg_form(good_job.GOOD_JOB_LOCK_HELD), (picked,)).fetchall() == [(1,)]
        assert mine.execute(psycopg_form(good_job.GOOD_JOB_UNLOCK), (picked,)).fetchone()[0] is True
        assert mine.execute(psycopg_form(good_job.GOOD_JOB_LOCK_HELD), (picked,)).fetchall() == []
        assert mine.execute(good_job.GOOD_JOB_HELD_AFTER).fetchone()[0] == 0


# --------------------------------------------------------------------------- raced, and A8 on stored races


def test_each_protocol_hands_every_job_to_one_worker_and_leaves_no_lock(db, tmp_path):
    runs = race(db, tmp_path, LIBRARY_STRATEGIES, [4], 300)
    assert len(runs) == len(LIBRARY_STRATEGIES)
    for run in runs:
        summary = Run(run).summary
        procedure = read_manifest(run)["procedure"]
        assert procedure["library_source"] == STRATEGIES[summary["strategy"]].library_source
        assert procedure["protocol"] == [step for step, _ in STRATEGIES[summary["strategy"]].protocol]
        assert summary["checks_passed"] and summary["duplicate_jobs"] == 0 and summary["unclaimed_jobs"] == 0
        assert summary["wins"] == 300 and summary["errors"] == 0
        if STRATEGIES[summary["strategy"]].counts_stray_locks:
            assert summary["advisory_locks_leaked"] == 0
    claims = race_summary(runs)
    finding = section.a8_protocols_hand_each_job_once(claims.assign(cpu_bound=False))
    assert finding.verdict == CONFIRMED and [v for _, v in finding.parts] == [CONFIRMED] * len(LIBRARY_STRATEGIES)


def test_ques_protocol_without_its_re_check_runs_jobs_twice_and_a8_says_so(db, tmp_path, monkeypatch):
    # the poll's snapshot can predate another worker's resolve: without the re-check under the lock, the job is
    # run again (Que's own comment on this race); the audit sees it, and A8 turns corrected when Que's own
    # protocol does that (here the variant stands in for it, under Que's name)
    unchecked = STRATEGIES["que_without_recheck"]
    assert [step for step, _ in unchecked.protocol] == ["poll", "exists", "resolve", "unlock"]
    monkeypatch.setitem(STRATEGIES, "que", replace(unchecked, name="que"))  # the forked workers inherit it
    runs = []
    for attempt in range(3):
        runs += race(db, tmp_path / str(attempt), ["que"], [8], 1000)
        claims = race_summary(runs)
        if claims["duplicate_jobs"].sum() > 0:
            break
    assert claims["duplicate_jobs"].sum() > 0, "without the re-check some job ran twice"
    finding = section.a8_protocols_hand_each_job_once(claims.assign(cpu_bound=False))
    assert finding.verdict == CORRECTED and dict(finding.parts)["que"] == CORRECTED
    assert claims["run_id"].iloc[int(claims["duplicate_jobs"].values.argmax())] in finding.note


def test_the_section_sets_the_protocol_without_its_re_check_beside_ques_own(db, tmp_path):
    runs = race(db, tmp_path, ["que", "que_without_recheck"], [8], 1000)
    claims = race_summary(runs)
    twice = int(claims.loc[claims["strategy"].astype(str) == "que_without_recheck", "duplicate_jobs"].iloc[0])
    sentence = section._without_recheck(claims)
    assert "(que_without_recheck) claimed jobs twice" in sentence and "Que's own claimed 0 twice" in sentence
    assert f"of 1,000 per race: {twice:,} at eight workers" in sentence
    assert section._without_recheck(claims[claims["strategy"].astype(str) == "que"]) == ""


def frame(**oban) -> pd.DataFrame:
    """A race of each protocol at four workers, clean; `oban` changes Oban's."""
    base = {"worker_count": 4, "job_count": 100, "duplicate_jobs": 0, "unclaimed_jobs": 0, "cpu_bound": False}
    return pd.DataFrame([base | {"strategy": name, "run_id": f"r-{name}"} | (oban if name == "oban" else {})
                         for name in LIBRARY_STRATEGIES])


def test_a8_reads_every_outcome():
    def oban_part(found):
        return dict(found.parts)["oban"]

    assert section.a8_protocols_hand_each_job_once(None).verdict == NOT_MEASURED
    assert section.a8_protocols_hand_each_job_once(frame(strategy="skip_locked")).verdict == NOT_MEASURED
    clean = section.a8_protocols_hand_each_job_once(frame())
    assert clean.verdict == CONFIRMED and {v for _, v in clean.parts} == {CONFIRMED}
    twice = section.a8_protocols_hand_each_job_once(frame(duplicate_jobs=2))
    assert twice.verdict == CORRECTED and oban_part(twice) == CORRECTED and "r-oban" in twice.note
    # a duplicate on a CPU-bound point is still a duplicate; a clean race there, or with one worker, decides nothing
    assert oban_part(section.a8_protocols_hand_each_job_once(frame(duplicate_jobs=1, cpu_bound=True))) == CORRECTED
    for undecided in (frame(cpu_bound=True), frame(worker_count=1)):
        found = section.a8_protocols_hand_each_job_once(undecided)
        assert found.verdict == NOT_MEASURED and oban_part(found) == NOT_MEASURED and "CPU-bound" in found.note
    unclaimed = section.a8_protocols_hand_each_job_once(frame(unclaimed_jobs=3))
    assert unclaimed.verdict == NOT_MEASURED and "3 jobs unclaimed" in unclaimed.note
    # a protocol the build did not race is not measured, and so is the claim about all five
    missing = section.a8_protocols_hand_each_job_once(frame()[lambda f: f["strategy"] != "river"])
    assert missing.verdict == NOT_MEASURED and dict(missing.parts)["river"] == NOT_MEASURED


@pytest.mark.parametrize("name", LIBRARY_STRATEGIES)
def test_a_protocol_is_not_benched_and_says_why(name):
    assert STRATEGIES[name].not_benched


def test_a_protocol_races_the_tight_loop_only():
    from harness.errors import UserError
    from harness.experiments.race.trials import RaceParameters
    with pytest.raises(UserError, match="que is a job library's protocol: it races the tight loop only"):
        RaceParameters(strategy="que", worker_count=2, job_count=10, pause_ms=5).check()


def test_every_protocol_wins_in_one_step_and_releases_last():
    for name, strategy in STRATEGIES.items():
        if strategy.protocol:
            roles = [role for _, role in strategy.protocol]
            assert roles.count(WRITE) + roles.count("claim") == 1, name
            assert RELEASE not in roles or set(roles[roles.index(RELEASE):]) == {RELEASE}, name


def test_a_libraries_url_reaches_node_postgres_as_a_uri():
    from harness.libraries.node import uri
    assert uri("postgresql://postgres@127.0.0.1:5432/postgres") == "postgresql://postgres@127.0.0.1:5432/postgres"
    assert uri("host=/run/pg port=5433 dbname=q user=u password=p@ss") == \
        "postgresql://u:p%40ss@/q?host=%2Frun%2Fpg&port=5433"
    assert uri("host=::1 port=5432 dbname=q user=u") == "postgresql://u@[::1]:5432/q"
