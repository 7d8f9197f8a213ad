"""The production experiment over real HTTP against the real service and server: its contract, its checks,
conservation against the audit, and no service or runner left behind."""

from __future__ import annotations

import math

import json
import signal
import subprocess
import sys
import time

import pandas as pd
import psutil
import pytest

from harness import storage
from harness.experiments import registry
from harness.experiments.production.measure import ProductionParameters, ProductionSweep, production_checks
from harness.errors import UserError
from conftest import PROJECT_ROOT, run_cli

CONTRACT_KEYS = ("polls", "conflicts", "claimed", "enqueued", "pending_at_end", "duplicate_jobs", "pickup_p50_ms",
                 "pickup_p99_ms", "loser_payload_bytes")


def service_processes(parent_pid: int) -> list[psutil.Process]:
    """Claim services started by a given harness process (they name it with --parent-pid)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if "harness.service" in cmdline and "--parent-pid" in cmdline \
                and cmdline[cmdline.index("--parent-pid") + 1] == str(parent_pid):
            found.append(process)
    return found


def run(db, tmp_path, **asked):
    [path] = registry.measure("production", ProductionParameters(**asked), tmp_path, db=db, progress=False)
    return path


def test_the_command_prints_the_contract_and_leaves_nothing(tmp_path):
    cli = subprocess.Popen([sys.executable, "-m", "harness", "production", "--runners", "3", "--poll-s", "0.2",
                            "--seconds", "3", "--endpoint", "pending", "--arrival-rate", "4", "--burst", "5",
                            "--service-time-s", "0.2", "--json", "--quiet", "--data-dir", str(tmp_path)],
                           cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen_service = []
    while cli.poll() is None:
        seen_service += [p.pid for p in service_processes(cli.pid) if p.pid not in seen_service]
        time.sleep(0.2)
    out, err = cli.communicate()
    assert cli.returncode == 0, err
    [line] = out.strip().splitlines()
    result = json.loads(line)
    assert all(key in result for key in CONTRACT_KEYS)
    assert result["duplicate_jobs"] == 0
    assert result["enqueued"] == result["claimed"] + result["pending_at_end"]
    assert seen_service, "the service ran as its own process"
    assert not any(psutil.pid_exists(pid) for pid in seen_service), "the service is gone after the run"
    assert service_processes(cli.pid) == []


@pytest.mark.parametrize("args, words", [
    (["--runners", "0"], "runner count"), (["--runners", "100000"], "runner count"),
    (["--poll-s", "0"], "poll interval"), (["--seconds", "0"], "seconds"), (["--seconds", "1e9"], "seconds"),
    (["--arrival-rate", "-1"], "arrival rate"), (["--arrival-rate", "nan"], "arrival rate"),
    (["--burst", "-3"], "burst"), (["--burst", "99999999"], "burst"), (["--endpoint", "poll"], "endpoint"),
    (["--arrival-rate", "0"], "nothing would arrive"), (["--arrival-rate", "400", "--seconds", "3000"], "within"),
    (["--runners", "x"], "invalid int"),
])
def test_bad_arguments_are_one_line_and_exit_2(tmp_path, args, words):
    result = run_cli("production", *args, "--data-dir", str(tmp_path), timeout=60)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and words in result.stderr


def test_sigterm_of_the_harness_stops_the_service_and_the_runners(tmp_path):
    cli = subprocess.Popen([sys.executable, "-m", "harness", "production", "--runners", "4", "--poll-s", "0.5",
                            "--seconds", "120", "--arrival-rate", "2", "--quiet", "--data-dir", str(tmp_path)],
                           cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    services, children = [], []
    while time.monotonic() < deadline and not (services and len(children) >= 5):
        services = service_processes(cli.pid)
        children = psutil.Process(cli.pid).children(recursive=True)
        time.sleep(0.2)
    assert services and len(children) >= 5, "the service and the runners were running"
    time.sleep(1)
    cli.send_signal(signal.SIGTERM)
    cli.communicate(timeout=60)
    assert cli.returncode != 0
    gone, alive = psutil.wait_procs(children + services, timeout=15)
    assert alive == [], f"left behind: {[p.cmdline() for p in alive]}"


def test_claim_endpoint_conserves_every_run_and_sends_no_loser_payload(db, tmp_path):
    path = run(db, tmp_path, runner_count=6, poll_s=0.1, seconds=3, endpoint="claim", arrival_rate=10, burst=20,
               service_time_s=0.05)
    runs, flips = pd.read_parquet(path / "runs.parquet"), pd.read_parquet(path / "flips.parquet")
    claims = flips[flips["new_status"] == "running"].groupby("run_id").size()  # what the database recorded
    assert claims.max() == 1
    assert set(claims.index) | set(runs.loc[runs["status"] == "pending", "run_id"]) == set(runs["run_id"])
    summary = json.loads((path / "manifest.json").read_text())["results"]["summary"]
    assert summary["conflicts"] == 0 and summary["loser_payload_bytes"] == 0
    assert summary["claimed"] == len(claims) and summary["enqueued"] == len(runs)
    assert summary["statements_per_claimed_job"] >= 2, "a claim and a finish at least, by the server's counters"


def test_pending_endpoint_shows_conflicts_when_runners_collide(db, tmp_path):
    # the negative control of C5's measurement: many runners polling fast over few runs must see 409s
    path = run(db, tmp_path, runner_count=12, poll_s=0.05, seconds=3, endpoint="pending", arrival_rate=8, burst=30,
               service_time_s=0.05)
    summary = json.loads((path / "manifest.json").read_text())["results"]["summary"]
    assert summary["conflicts"] > 0 and summary["duplicate_jobs"] == 0
    assert summary["loser_payload_bytes"] > 0 and summary["loser_secrets"] > 0
    events = pd.read_parquet(path / "events.parquet")
    assert (events["event"] == "conflict").sum() == summary["conflicts"]


def frames(flips_rows, run_status, claimed_events, pushed):
    runs = pd.DataFrame({"run_id": list(run_status), "status": list(run_status.values())})
    flips = pd.DataFrame(flips_rows, columns=["run_id", "new_status"])
    events = pd.DataFrame({"event": ["claimed"] * len(claimed_events), "run_id": claimed_events})
    return runs, flips, events, pd.DataFrame({"count": [pushed]})


@pytest.mark.parametrize("case, failed", [
    ("clean", None),
    ("duplicate", "no_duplicates"),
    ("claimed_and_pending", "claimed_once_or_pending"),
    ("lost", "claimed_once_or_pending"),
    ("runner_disagrees", "runner_claims_match_audit"),
    ("push_missing", "every_push_enqueued"),
])
def test_each_check_can_fail(case, failed):
    flips = [(1, "running"), (1, "done"), (2, "running")]
    status = {1: "done", 2: "running", 3: "pending"}
    claimed, pushed = [1, 2], 3
    if case == "duplicate":
        flips += [(2, "running")]
        claimed = [1, 2, 2]
    elif case == "claimed_and_pending":
        flips += [(3, "running")]
        claimed = [1, 2, 3]
    elif case == "lost":
        status[3] = "running"
    elif case == "runner_disagrees":
        claimed = [1]
    elif case == "push_missing":
        pushed = 4
    checks = production_checks(*frames(flips, status, claimed, pushed))
    assert checks["passed"] is (failed is None)
    if failed:
        assert checks[failed] is False


def test_the_sweep_expands_into_points_that_read_back_from_what_is_stored():
    sweep = ProductionSweep(runner_counts=(3, 10), poll_intervals_s=(5, 0.2), seconds_per_poll=(20, 4),
                            endpoints=("pending", "claim"), service_time_s=2, utilisation=0.5, burst=30)
    points = sweep.points()
    assert len(points) == 2 * 2 * 2 + 2
    assert {p.arrival_rate for p in points if p.runner_count == 10 and not p.burst} == {2.5}
    stored = [storage.plain(vars(p)) for p in points]  # as a manifest keeps them
    assert [ProductionParameters.from_mapping(asked, "a stored run") for asked in stored] == points


@pytest.mark.parametrize("settings", [dict(poll_intervals_s=(1,), seconds_per_poll=(1, 2)),
                                      dict(runner_counts=()), dict(utilisation=2.0), dict(burst=-1)])
def test_a_bad_sweep_is_refused(settings):
    with pytest.raises(UserError):
        ProductionSweep(**settings)


def test_polls_with_a_conflict_counts_each_poll_once():
    from harness.experiments.production.measure import polls_with_a_conflict

    events = pd.DataFrame({"runner": ["a", "a", "a", "a", "b", "b", "a"],
                           "t_s": [0.0, 0.1, 0.2, 1.0, 0.05, 0.06, 2.0],
                           "event": ["poll", "conflict", "conflict", "poll", "conflict", "poll", "claimed"],
                           "listed_runs": [2, None, None, 1, None, 0, None]})
    assert polls_with_a_conflict(events) == 1  # b's conflict came before any poll of b's
    assert polls_with_a_conflict(events[events["event"] != "conflict"]) == 0


def test_conflict_rounds_group_every_runners_polls_of_one_interval_and_leave_out_empty_polls():
    from harness.experiments.production.measure import conflict_rounds

    events = pd.DataFrame({"runner": ["a", "b", "c", "a", "b", "a", "c"],
                           "t_s": [0.1, 0.2, 0.3, 0.35, 1.1, 1.2, 1.3],
                           "event": ["poll", "poll", "poll", "conflict", "poll", "poll", "poll"],
                           "listed_runs": [3, 3, 0, None, 2, 0, 2]})
    # round 0: a and b listed runs (a met a 409), c listed none; round 1: b and c listed, a none
    assert conflict_rounds(events, 1.0) == [[2, 1], [2, 0]]
    assert conflict_rounds(events[events["event"] != "poll"], 1.0) == []


def test_the_round_bootstrap_widens_where_runners_fail_together_and_the_wilson_floor_holds_without_hits():
    from harness.stats import polls_met_interval, round_bootstrap_interval, wilson_interval

    # 100 polls in 20 rounds of 5; all 10 hits in two rounds: polls of a round move together
    together = [[5, 5]] * 2 + [[5, 0]] * 18
    spread = [[5, 1]] * 10 + [[5, 0]] * 10
    low_t, high_t = round_bootstrap_interval([together])
    low_s, high_s = round_bootstrap_interval([spread])
    assert high_t - low_t > high_s - low_s
    assert high_t > wilson_interval(10, 100)[1]
    assert polls_met_interval(10, 100, [together]) == (min(low_t, wilson_interval(10, 100)[0]), high_t)
    # none met: the bootstrap collapses to zero, the Wilson interval still says how few polls that was
    assert round_bootstrap_interval([[[5, 0]] * 4]) == (0.0, 0.0)
    assert polls_met_interval(0, 20, [[[5, 0]] * 4]) == wilson_interval(0, 20)
    assert all(math.isnan(v) for v in round_bootstrap_interval([[]]))


def wins_per_poll(path) -> list[int]:
    """Per runner and poll, how many runs the runner won between that poll and its next."""
    events = pd.read_parquet(path / "events.parquet").sort_values("t_s")
    wins = []
    for _, runner in events.groupby("runner"):
        poll_number = (runner["event"] == "poll").cumsum()
        claimed = runner[runner["event"] == "claimed"]
        wins += list(claimed.groupby(poll_number[claimed.index]).size())
    return wins


def test_a_pending_runner_claims_every_listed_run_at_once_as_the_original_does(db, tmp_path):
    path = run(db, tmp_path, runner_count=2, poll_s=0.2, seconds=3, endpoint="pending", arrival_rate=2.0, burst=10,
               service_time_s=0.3)
    # between two of a runner's polls, the runs it won: with a burst listed five at a time, some poll wins several
    assert max(wins_per_poll(path)) > 1, "a runner ran more than one run won in one poll"
    in_order = run(db, tmp_path / "in_order", runner_count=2, poll_s=0.2, seconds=3, endpoint="pending",
                   arrival_rate=2.0, burst=10, service_time_s=0.3, claims_listed="in_order")
    assert max(wins_per_poll(in_order)) == 1, "in order: one run per poll"


def test_runs_never_picked_up_count_at_the_end_of_the_window():
    from harness.experiments.production.measure import figures

    runs = pd.DataFrame({"run_id": [1, 2, 3], "status": ["finished", "finished", "pending"],
                         "enqueued_s": [0.0, 1.0, 2.0], "claimed_s": [0.1, 1.1, None]})
    runs["pickup_ms"] = (runs["claimed_s"] - runs["enqueued_s"]) * 1e3
    events = pd.DataFrame({"event": ["poll"], "listed_runs": [0], "lost_bytes": [0], "lost_secrets": [0],
                           "bytes": [10], "runner": ["r0"], "t_s": [0.0]})
    flips = pd.DataFrame({"run_id": [1, 2], "new_status": ["running", "running"]})
    summary = figures(runs, flips, events, {"ended_s": 12.0})
    assert summary["never_picked"] == 1
    assert summary["pickup_p99_is_lower_bound"] and summary["pickup_p99_ms"] > 9_000  # at least 10 s, censored
    assert summary["pickup_max_ms"] == pytest.approx(10_000) and summary["pickup_max_is_lower_bound"]
    assert summary["pickup_p99_shown"] is False, "three runs: the tail is their maximum"
    picked_all = figures(runs.iloc[:2], flips, events, {"ended_s": 12.0})
    assert picked_all["never_picked"] == 0 and not picked_all["pickup_p99_is_lower_bound"]


def test_a_batch_runner_wins_several_runs_per_poll_in_one_claim_and_sends_no_loser_payload(db, tmp_path):
    path = run(db, tmp_path, runner_count=2, poll_s=0.2, seconds=3, endpoint="claim_batch", arrival_rate=2.0,
               burst=10, service_time_s=0.3)
    wins = wins_per_poll(path)
    assert max(wins) > 1, "a poll handed its runner several runs (the burst)"
    assert max(wins) <= 5, "never more than the batch"
    summary = json.loads((path / "manifest.json").read_text())["results"]["summary"]
    assert summary["conflicts"] == 0 and summary["duplicate_jobs"] == 0 and summary["loser_payload_bytes"] == 0
    assert summary["enqueued"] == summary["claimed"] + summary["pending_at_end"]


def test_the_sweep_races_the_batch_claim_and_gives_the_single_claim_its_own_windows():
    sweep = ProductionSweep(runner_counts=(3,), poll_intervals_s=(5, 1), seconds_per_poll=(36, 8),
                            single_claim_seconds_per_poll=(6, 4))
    windows = {(p.endpoint, p.poll_s): p.seconds for p in sweep.points()}
    assert windows == {("pending", 5): 36, ("claim_batch", 5): 36, ("claim", 5): 6,
                       ("pending", 1): 8, ("claim_batch", 1): 8, ("claim", 1): 4}
    with pytest.raises(UserError, match="single-claim window"):
        ProductionSweep(poll_intervals_s=(5, 1), seconds_per_poll=(36, 8), single_claim_seconds_per_poll=(6,))


def test_follow_up_runs_are_found_or_made_until_the_kind_asks_for_none(monkeypatch, tmp_path):
    from harness.experiments import registry
    from harness.experiments.production import measure as production

    class Stored:
        def __init__(self, path):
            self.path, self.summary = path, {"seed": int(path.name)}

    asked = []

    def follow_up(self, summaries):  # one more round while fewer than three are stored
        rounds = sum(1 for row in summaries if row["seed"] > 0)
        asked.append(rounds)
        return [self.c5_round(rounds + 1)] if rounds < 3 else []

    stored = {1: tmp_path / "1"}  # round 1 is stored, rounds 2 and 3 are not
    monkeypatch.setattr(production.ProductionSweep, "follow_up", follow_up)
    monkeypatch.setattr(registry.storage, "open_runs", lambda paths: [Stored(p) for p in paths])
    monkeypatch.setattr(registry, "find", lambda kind, sets, *rest: (
        [stored.get(sets[0].seed)], [] if sets[0].seed in stored else list(sets)))
    made = []

    def make(sets):
        made.extend(one.seed for one in sets)
        return [tmp_path / str(one.seed) for one in sets]

    sweep = production.ProductionSweep(c5_extra_seconds=108)
    paths, count = registry._follow_ups("production", sweep, [tmp_path / "0"], tmp_path, 16, make)
    assert [p.name for p in paths] == ["1", "2", "3"] and count == 2 and made == [2, 3]
    assert asked == [0, 1, 2, 3]
    # reading what is stored, nothing made: the loop stops at the first round missing
    paths, count = registry._follow_ups("production", sweep, [tmp_path / "0"], tmp_path, 16)
    assert [p.name for p in paths] == ["1"] and count == 0


def test_the_pickup_tail_reads_as_a_p99_or_the_slowest_pickup_in_words():
    from harness.article.sections import production as production_section
    from harness.article.sections.production_charts import pickup_tail_text
    p99 = {"pickup_p99_shown": True, "pickup_p99_ms": 900.0, "pickup_p99_is_lower_bound": False}
    slowest = {"pickup_p99_shown": False, "pickup_max_ms": 1752.0, "pickup_max_is_lower_bound": False,
               "pickups_observed": 54}
    waiting = {**slowest, "pickup_max_ms": 7742.0, "pickup_max_is_lower_bound": True}
    assert [pickup_tail_text(row) for row in (p99, slowest, waiting)] == [
        "900 ms", "max 1,752 ms of 54", "at least max 7,742 ms of 54"]  # the table's compact cells
    said = production_section.tail_phrase
    assert [said(row) for row in (p99, slowest, waiting)] == [
        "900 ms", "1,752 ms (the slowest of 54 pickups)", "at least 7,742 ms (the slowest of 54 pickups)"]
