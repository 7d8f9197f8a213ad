"""The claim service over real HTTP, against the real server: claims, conflicts, finishes, malformed requests,
and no process left behind."""

from __future__ import annotations

import datetime as dt
import signal
import subprocess
import sys
import threading
import time

import httpx
import numpy as np
import psutil
import pytest

from harness.config import SCHEMA
from harness.server import schema as server_schema
from harness.service import producer, runner, schema
from harness.service.process import running_service
from conftest import PROJECT_ROOT


def enqueue(conn, service, count: int) -> list[int]:
    now = dt.datetime.now(dt.timezone.utc)
    return producer.enqueue(conn, service.key, [now] * count, np.random.default_rng(count))


def row(conn, run_id: int) -> tuple:
    return conn.execute(f"SELECT status, claimed_by, attempt, claimed_at, lease_until, finished_by "
                        f"FROM {SCHEMA}.runs WHERE id = %s", [run_id]).fetchone()


def flips(conn) -> list[tuple]:
    return conn.execute(f"SELECT run_id, old_status, new_status, runner, attempt FROM {SCHEMA}.run_flips "
                        "ORDER BY flip_seq").fetchall()


@pytest.fixture
def queue(conn):
    schema.create_run_queue(conn)
    yield conn


@pytest.fixture
def service(db, queue):
    with running_service(db.url, "none") as handle:
        yield handle


@pytest.fixture
def client(service):
    with httpx.Client(base_url=service.url, timeout=10) as http:
        yield http


def test_health_says_the_protocol(client):
    assert client.get("/health").json() == {"ok": True, "protocol": "none", "lease_s": 30.0}


def test_pending_lists_five_oldest_reserves_nothing_and_decrypts_secrets(queue, service, client):
    ids = enqueue(queue, service, 7)
    first, second = client.get("/pending").json()["runs"], client.get("/pending").json()["runs"]
    assert [run["id"] for run in first] == ids[:5] == [run["id"] for run in second]  # every poller sees the same
    assert schema.status_counts(queue) == {"pending": 7, "running": 0, "done": 0}
    stored = queue.execute(f"SELECT secrets FROM {SCHEMA}.runs WHERE id = %s", [ids[0]]).fetchone()[0]
    shown = first[0]["secrets"]
    assert len(shown) == producer.DEFAULT_SECRETS_PER_RUN
    assert all(value.encode() not in bytes(stored) for value in shown.values()), "stored encrypted"


def test_a_lost_claim_returns_409_and_changes_nothing(queue, service, client):
    [run_id] = enqueue(queue, service, 1)
    won = client.post(f"/runs/{run_id}/claim", json={"runner": "a"})
    assert won.status_code == 200 and won.json()["token"] == 1 and won.json()["run"]["id"] == run_id
    before, audit_before = row(queue, run_id), flips(queue)
    lost = client.post(f"/runs/{run_id}/claim", json={"runner": "b"})
    assert lost.status_code == 409 and len(lost.json()["error"].splitlines()) == 1
    assert row(queue, run_id) == before and before[:3] == ("running", "a", 1)  # what the database holds
    assert flips(queue) == audit_before == [(run_id, "pending", "running", "a", 1)]


def test_claim_next_says_204_when_nothing_is_pending(client):
    answer = client.post("/claim", json={"runner": "a"})
    assert answer.status_code == 204 and answer.content == b""


def test_claim_never_hands_out_a_run_twice_under_concurrent_runners(queue, service):
    ids = enqueue(queue, service, 300)
    won: list[int] = []
    empty = []

    def claim_until_empty(name: str) -> None:
        with httpx.Client(base_url=service.url, timeout=10) as http:
            while True:
                answer = http.post("/claim", json={"runner": name})
                if answer.status_code == 204:
                    empty.append(name)
                    return
                assert answer.status_code == 200
                won.append(answer.json()["run"]["id"])

    threads = [threading.Thread(target=claim_until_empty, args=(f"r{i}",)) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(empty) == 12
    audit = flips(queue)  # what the server recorded
    claimed = [run_id for run_id, old, new, _, _ in audit if new == "running"]
    assert sorted(claimed) == ids, "every run claimed exactly once, by the audit"
    assert sorted(won) == ids
    assert schema.duplicate_claims(queue) == []
    assert schema.status_counts(queue) == {"pending": 0, "running": 300, "done": 0}


def test_a_batch_claim_hands_out_up_to_k_runs_in_one_statement_oldest_first(queue, service, client):
    ids = enqueue(queue, service, 7)
    first = client.post("/claim", json={"runner": "a", "batch": 5})
    assert first.status_code == 200
    assert [claimed["run"]["id"] for claimed in first.json()["runs"]] == ids[:5]
    assert [claimed["token"] for claimed in first.json()["runs"]] == [1] * 5
    rest = client.post("/claim", json={"runner": "b", "batch": 5}).json()["runs"]
    assert [claimed["run"]["id"] for claimed in rest] == ids[5:], "only what is left, never more than asked"
    assert client.post("/claim", json={"runner": "c", "batch": 5}).status_code == 204
    assert sorted(run_id for run_id, _, new, _, _ in flips(queue) if new == "running") == ids
    assert schema.duplicate_claims(queue) == []


def test_concurrent_batch_claims_never_hand_out_a_run_twice(queue, service):
    ids = enqueue(queue, service, 300)
    won: list[int] = []

    def claim_until_empty(name: str) -> None:
        with httpx.Client(base_url=service.url, timeout=10) as http:
            while (answer := http.post("/claim", json={"runner": name, "batch": 5})).status_code == 200:
                runs = answer.json()["runs"]
                assert 1 <= len(runs) <= 5
                won.extend(claimed["run"]["id"] for claimed in runs)
            assert answer.status_code == 204

    threads = [threading.Thread(target=claim_until_empty, args=(f"r{i}",)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(won) == ids
    assert schema.duplicate_claims(queue) == []


@pytest.mark.parametrize("batch", [0, 101, -1, "5", 1.5, True, None])
def test_a_bad_batch_gets_a_400_with_one_line(client, batch):
    answer = client.post("/claim", json={"runner": "a", "batch": batch})
    assert answer.status_code == 400 and len(answer.text.splitlines()) == 1 and "batch" in answer.text


@pytest.mark.parametrize("path", ["/runs/abc/claim", "/runs/0/claim", "/runs/-1/claim", "/runs/1.5/claim",
                                  "/runs/99999999999999999999/claim", "/runs/%20/finish", "/runs/x/heartbeat"])
def test_malformed_ids_get_a_4xx_with_one_line(client, path):
    answer = client.post(path, json={"runner": "a", "token": 1})
    assert 400 <= answer.status_code < 500
    assert len(answer.text.splitlines()) == 1


MALFORMED_BODIES = [b"", b"not json", b"[1]", b'"runner"', b'{"runner": 5}', b'{"runner": ""}',
                    b'{"runner": "' + b"x" * 300 + b'"}', b"{" * 5000]
MALFORMED_TOKENS = [b'{"runner": "a"}', b'{"runner": "a", "token": "1"}', b'{"runner": "a", "token": -1}',
                    b'{"runner": "a", "token": true}', b'{"runner": "a", "token": 1.5}']


@pytest.mark.parametrize("endpoint", ["/runs/{id}/claim", "/claim", "/runs/{id}/finish", "/runs/{id}/heartbeat"])
def test_malformed_bodies_get_a_4xx_and_change_nothing(queue, service, client, endpoint):
    [run_id] = enqueue(queue, service, 1)
    needs_token = endpoint.endswith(("finish", "heartbeat"))
    for body in MALFORMED_BODIES + (MALFORMED_TOKENS if needs_token else []):
        answer = client.post(endpoint.format(id=run_id), content=body, headers={"content-type": "application/json"})
        assert 400 <= answer.status_code < 500, (body[:40], answer.text)
        assert len(answer.text.splitlines()) == 1
    assert row(queue, run_id)[:3] == ("pending", None, 0)
    assert flips(queue) == []


def test_unknown_paths_and_methods_are_4xx(client):
    assert client.get("/runs/1/claim").status_code == 405
    assert client.post("/pending").status_code == 405
    assert client.get("/nowhere").status_code == 404


def test_finish_is_accepted_once_and_recorded(queue, service, client):
    [run_id] = enqueue(queue, service, 1)
    token = client.post(f"/runs/{run_id}/claim", json={"runner": "a"}).json()["token"]
    assert client.post(f"/runs/{run_id}/finish", json={"runner": "a", "token": token}).status_code == 200
    again = client.post(f"/runs/{run_id}/finish", json={"runner": "b", "token": token})
    assert again.status_code == 409, "a finish of a run already done is rejected"
    assert row(queue, run_id)[0] == "done" and row(queue, run_id)[5] == "a"
    assert queue.execute(f"SELECT run_id, runner, attempt FROM {SCHEMA}.finishes").fetchall() == [(run_id, "a", 1)]
    assert [flip[1:3] for flip in flips(queue)] == [("pending", "running"), ("running", "done")]


def reap(conn, run_id: int) -> None:
    """What a reaper does to an expired lease (here by hand): the run goes back to pending."""
    conn.execute(f"UPDATE {SCHEMA}.runs SET status = 'pending', lease_until = NULL WHERE id = %s", [run_id])


@pytest.mark.parametrize("protocol, stale_finish", [("lease", 200), ("lease_fenced", 409)])
def test_a_stale_finish_after_a_reclaim_is_accepted_only_unfenced(db, queue, protocol, stale_finish):
    with running_service(db.url, protocol, lease_s=5) as service, \
            httpx.Client(base_url=service.url, timeout=10) as http:
        [run_id] = enqueue(queue, service, 1)
        first = http.post(f"/runs/{run_id}/claim", json={"runner": "a"}).json()["token"]
        status, _, _, claimed_at, lease_until, _ = row(queue, run_id)
        assert (lease_until - claimed_at).total_seconds() == pytest.approx(5)
        assert http.post(f"/runs/{run_id}/heartbeat", json={"runner": "a", "token": first}).status_code == 200
        assert row(queue, run_id)[4] > lease_until, "the heartbeat extended the lease"
        reap(queue, run_id)
        second = http.post(f"/runs/{run_id}/claim", json={"runner": "b"}).json()["token"]
        assert second == first + 1, "the fencing token grows per claim"
        assert http.post(f"/runs/{run_id}/heartbeat", json={"runner": "a", "token": first}).status_code == 409
        stale = http.post(f"/runs/{run_id}/finish", json={"runner": "a", "token": first})
        assert stale.status_code == stale_finish
        finishes = queue.execute(f"SELECT runner, attempt FROM {SCHEMA}.finishes").fetchall()
        assert finishes == ([("a", first)] if stale_finish == 200 else [])


@pytest.mark.parametrize("place", ["claim", "finish"])
def test_a_held_request_alone_changes_nothing_but_its_timing(db, queue, tmp_path, place):
    """The control of the faults injected inside a request's window: held and released without a fault, the
    claim is answered and the finish commits as if nothing happened."""
    with running_service(db.url, "lease_fenced", lease_s=5, hold_dir=str(tmp_path)) as service, \
            httpx.Client(base_url=service.url, timeout=10) as http:
        [run_id] = enqueue(queue, service, 1)
        token = None
        if place == "finish":
            token = http.post("/claim", json={"runner": "a"}).json()["token"]
        (tmp_path / f"arm-{place}").touch()
        answers = []
        request = (lambda: http.post("/claim", json={"runner": "a"})) if place == "claim" else \
            (lambda: http.post(f"/runs/{run_id}/finish", json={"runner": "a", "token": token}))
        caller = threading.Thread(target=lambda: answers.append(request()))
        caller.start()
        deadline = time.monotonic() + 10
        while not (tmp_path / f"held-{place}").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        held = (tmp_path / f"held-{place}").read_text()
        assert f'"run": {run_id}' in held and not (tmp_path / f"arm-{place}").exists()
        time.sleep(0.3)
        assert not answers, "held: not answered yet"
        if place == "finish":  # written, not committed: nobody else sees it yet
            assert row(queue, run_id)[0] == "running"
        (tmp_path / f"release-{place}").touch()
        caller.join(10)
        assert answers[0].status_code == 200
        assert row(queue, run_id)[0] == ("running" if place == "claim" else "done")


def test_the_service_tables_count_as_the_harness_own(queue):
    assert server_schema._foreign_objects(queue) == []


def test_runners_log_every_event_and_stop(queue, service, tmp_path):
    ids = enqueue(queue, service, 20)
    settings = runner.RunnerSettings(service.url, poll_s=0.05, endpoint="pending", service_time_s=0.01, seconds=30)
    group = runner.RunnerGroup(settings, 3, tmp_path, prefix="t")
    with group:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and schema.status_counts(queue)["done"] < 20:
            time.sleep(0.1)
        pids = group.pids
    assert psutil.wait_procs([psutil.Process(pid) for pid in pids if psutil.pid_exists(pid)], timeout=5)[1] == []
    events = group.events()
    finished = sorted(event["run"] for event in events if event["event"] == "finished")
    assert finished == ids == sorted(run_id for run_id, _, new, _, _ in flips(queue) if new == "done")
    assert {event["event"] for event in events} >= {"poll", "claimed", "started", "finished", "stopped"}
    assert all({"t", "runner", "event", "run", "token", "bytes"} <= set(event) for event in events)


def test_the_service_dies_with_a_killed_harness(db, queue):
    script = ("import sys, time; from harness.service.process import running_service\n"
              "with running_service(sys.argv[1]) as s:\n"
              "    print(s.pid, flush=True); time.sleep(600)\n")
    harness = subprocess.Popen([sys.executable, "-c", script, db.url], cwd=PROJECT_ROOT, stdout=subprocess.PIPE,
                               text=True)
    service_pid = int(harness.stdout.readline())
    assert psutil.pid_exists(service_pid)
    harness.send_signal(signal.SIGKILL)
    harness.wait(10)
    gone, alive = psutil.wait_procs([psutil.Process(service_pid)], timeout=10)
    assert alive == []


def test_stop_and_restart_on_the_same_port(db, queue):
    with running_service(db.url) as service:
        first_pid, port = service.pid, service.port
        service.restart()
        assert service.port == port and service.pid != first_pid
        assert httpx.get(f"{service.url}/health").status_code == 200
        assert not psutil.pid_exists(first_pid) or psutil.Process(first_pid).status() == psutil.STATUS_ZOMBIE
        last_pid = service.pid
    assert not psutil.pid_exists(last_pid)
