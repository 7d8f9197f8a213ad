"""Wake-ups on the real server: idle workers of procrastinate woken by LISTEN/NOTIFY against polling only, jobs
arriving one at a time, each job's pickup from the audit's enqueue to its first start."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from conftest import forked_workers, handed, run_cli, survivors_of_sigkill
from harness.article import contents
from harness.article.sections import wakeups as wake_section
from harness.errors import UserError
from harness.experiments.libraries import wakeups

S = 1_000_000_000  # ns


def test_a_job_not_started_by_the_end_counts_up_to_it_and_makes_the_figures_lower_bounds():
    audit = pd.DataFrame({"job_id": [1, 2, 3], "event": ["enqueued"] * 3, "at_ns": [0, S, 2 * S],
                          "txid": [1, 2, 3], "pid": [1, 1, 1]})
    starts = pd.DataFrame({"job_id": [1, 2, 2], "at_ns": [S // 100, S + S // 10, S + S // 5], "worker": [0, 1, 0]})
    jobs = wakeups.pickups(audit, starts, ended_ns=5 * S)
    assert jobs["pickup_ms"].tolist() == [10.0, 100.0, 3000.0] and jobs["censored"].tolist() == [False, False, True]
    summary = wakeups.summarise(wakeups.WakeupParameters("procrastinate", "poll", 1.0, 3), jobs, 30, 6.0, True)
    assert (summary["started"], summary["not_started"], summary["executed_twice"]) == (2, 1, 1)
    assert summary["pickup_is_lower_bound"] and summary["pickup_max_ms"] == 3000.0
    assert summary["transactions_per_s"] == 5.0
    clean = wakeups.summarise(wakeups.WakeupParameters("procrastinate", "poll", 1.0, 2), jobs.iloc[:2], 0, 1.0, True)
    assert not clean["pickup_is_lower_bound"] and clean["not_started"] == 0


def test_a_wakeup_run_refuses_what_it_cannot_run_in_one_line():
    with pytest.raises(UserError, match="must be one of procrastinate, chancy"):
        wakeups.WakeupParameters("pgboss")
    with pytest.raises(UserError, match="interval between jobs"):
        wakeups.WakeupParameters("procrastinate", interval_s=0.0001)
    with pytest.raises(UserError, match="take more than 300 s to arrive"):
        wakeups.WakeupParameters("procrastinate", interval_s=10, job_count=40)
    done = run_cli("wakeups", "--wake", "shout", "--data-dir", "/nonexistent")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and "shout" in done.stderr


def test_all_is_every_library_that_can_both_listen_and_poll_in_a_params_file_as_on_the_command_line():
    assert wakeups.WakeupSweep().libraries == wakeups.WakeupSweep(libraries="all").libraries == wakeups.offering()
    assert wakeups.WakeupSweep(libraries=["chancy"]).libraries == wakeups.WakeupSweep(libraries="chancy").libraries \
        == ("chancy",)
    with pytest.raises(UserError, match="must be one of"):
        wakeups.WakeupSweep(libraries="pgboss")


def test_listening_workers_pick_a_job_up_sooner_than_polling_ones(tmp_path):
    """procrastinate polls every 5 s by default: without LISTEN a job waits for the next poll, with it a worker is
    woken at once. The test asks LISTEN's slowest pickup under 1 s and below every polled one, a gap the suite's
    other tests beside it did not close in five fresh-clone suites of 2026-12-07."""
    done = run_cli("wakeups", "--library", "procrastinate", "--interval", "0.3", "--jobs", "3", "--repeat", "2",
                   "--json", "--quiet", "--data-dir", str(tmp_path), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = [json.loads(line) for line in done.stdout.splitlines()]
    for row in runs:
        assert (row["started"], row["not_started"], row["executed_twice"]) == (3, 0, 0), row
    listen = max(row["pickup_max_ms"] for row in runs if row["wake"] == "listen")
    assert listen < 1000 and min(row["pickup_max_ms"] for row in runs if row["wake"] == "poll") > listen, runs
    # the article reads the stored runs: one point, two runs a side, where LISTEN was sooner
    mine = contents.load(handed("wakeups", sorted((tmp_path / "wakeups").iterdir())))[wake_section.NAME]
    assert "Of 1 point, `LISTEN` picked jobs up sooner than polling at 1." in \
        wake_section.values({wake_section.NAME: mine}, {})["wk_setup"]
    assert "<td>sooner</td>" in wake_section.wakeup_table({wake_section.NAME: mine}).replace(' class=""', "")


def test_no_worker_outlives_the_command_killed_with_sigkill(tmp_path):
    assert survivors_of_sigkill(["wakeups", "--library", "procrastinate", "--wake", "poll", "--interval", "2",
                                 "--jobs", "10", "--quiet", "--data-dir", str(tmp_path)], forked_workers, 120) == []


def _run(wake, p50, censored=False, repeat=0, interval=2.0):
    return {"library": "procrastinate", "interval_s": interval, "wake": wake, "pickup_p50_ms": p50,
            "pickup_max_ms": p50 * 2, "pickup_is_lower_bound": censored, "transactions_per_s": 5.0,
            "worker_count": 2, "poll_s": 5.0, "repeat": repeat, "jobs": 10, "local_server": True}


def _runs(*rows):
    return pd.DataFrame(list(rows))


def test_listen_is_sooner_or_later_only_where_the_runs_medians_do_not_overlap():
    compare = wake_section.listen_against_poll
    listen = _runs(_run("listen", 5), _run("listen", 9, repeat=1))

    def poll(*p50s, censored=False):
        return _runs(*(_run("poll", p50, censored, repeat) for repeat, p50 in enumerate(p50s)))
    assert compare(listen, poll(2000, 2100)) == wake_section.SOONER
    assert compare(listen, poll(3, 4)) == wake_section.LATER
    assert compare(listen, poll(8, 2000)) == wake_section.OVERLAP
    # a median counted from a run with a job never started is a lower bound, whose true value may be higher: it
    # decides only where that cannot change the answer
    censored_listen = _runs(_run("listen", 5, censored=True), _run("listen", 9, repeat=1))
    assert compare(censored_listen, poll(2000, 2100)) == wake_section.CENSORED
    assert compare(listen, poll(2000, 2100, censored=True)) == wake_section.SOONER
    assert compare(_runs(_run("listen", 50), _run("listen", 60, repeat=1)), poll(3, 4, censored=True)) \
        == wake_section.CENSORED
    assert compare(censored_listen.assign(pickup_p50_ms=[50, 60]), poll(3, 4)) == wake_section.LATER
    assert compare(listen, poll(8, 2000, censored=True)) == wake_section.CENSORED
    # one run a side has no spread to judge by
    assert compare(listen.iloc[:1], poll(2000, 2100)) == wake_section.ONE_RUN
    assert compare(listen, poll(2000)) == wake_section.ONE_RUN
    assert compare(listen, poll(2000).iloc[:0]) is None


def test_the_subsection_counts_each_answer_and_marks_lower_bounds():
    runs = _runs(_run("listen", 5), _run("listen", 6, repeat=1), _run("poll", 2000), _run("poll", 2100, repeat=1),
                 _run("listen", 5, interval=0.02), _run("listen", 5, interval=0.02, repeat=1),
                 _run("poll", 3, interval=0.02, censored=True), _run("poll", 4, interval=0.02, repeat=1),
                 _run("listen", 5, interval=5.0), _run("poll", 5000, interval=5.0),
                 _run("listen", 5, interval=1.0))
    loaded = {wake_section.NAME: wake_section.Loaded((), runs)}
    said = wake_section.values(loaded, {})["wk_setup"]
    assert ("Of 3 points, `LISTEN` picked jobs up sooner than polling at 1, undecided at 1 (a job never picked up) "
            "and undecided at 1 (one run a side).") in said
    assert "every 2 s, 0.02 s, 5 s or 1 s, 2 runs per point" in said
    table = wake_section.wakeup_table(loaded).replace(' class=""', "")
    assert "≥ 3 to 4 / ≥ 6 to 8" in table and "<td>not decided: a job never picked up</td>" in table
    assert "<td>not decided: one run</td>" in table and "<td>—</td>" in table
    # runs at another worker count are a point of their own, named by it; a server elsewhere is marked
    elsewhere = runs.assign(local_server=True)
    elsewhere = pd.concat([elsewhere, elsewhere.iloc[:2].assign(worker_count=4, local_server=False)])
    table = wake_section.wakeup_table({wake_section.NAME: wake_section.Loaded((), elsewhere)})
    assert "procrastinate (4 workers) (server on another machine" in table and "procrastinate (2 workers)" in table
    assert wake_section.values({}, {})["wk_setup"].startswith("No library's idle workers")
    assert wake_section.wakeup_table({}) == ""
