"""Bad input: one clear line on stderr, exit code 2, no traceback, nothing stored."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import yaml

from conftest import PROJECT_ROOT, run_cli
from harness.server import database


def assert_one_line_error(result, *fragments):
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def url_env(db):
    return {"DATABASE_URL": db.url}


@pytest.mark.parametrize("args, fragment", [
    (["--workers", "0"], "worker count must be at least 1"),
    (["--workers", "2,x"], "comma-separated"),
    (["--jobs", "0"], "job count must be at least 1"),
    (["--strategy", "optimistic"], "unknown strategy 'optimistic'"),
    (["--repeat", "0"], "repeat must be at least 1"),
    (["--fillfactor", "5"], "fillfactor"),
])
def test_bad_race_options(tmp_path, url_env, args, fragment):
    result = run_cli("race", "--data-dir", str(tmp_path), *args, env_extra=url_env)
    assert_one_line_error(result, fragment)
    assert not (tmp_path / "races").exists()


def test_more_workers_than_the_server_allows(tmp_path, url_env):
    result = run_cli("race", "--strategy", "guarded", "--workers", "2,500", "--jobs", "10",
                     "--data-dir", str(tmp_path), env_extra=url_env)
    assert_one_line_error(result, "500 workers need", "max_connections")
    assert list((tmp_path / "races").glob("*")) == []


@pytest.mark.parametrize("url, fragment", [
    ("postgresql://postgres@127.0.0.1:{port}/postgres", "cannot reach the database"),
    ("postgresql://[bad", "malformed database URL"),
    ("host=127.0.0.1 port=notaport", "cannot reach the database"),
])
def test_bad_database_url(tmp_path, url, fragment):
    result = run_cli("race", "--jobs", "10", "--workers", "1", "--data-dir", str(tmp_path),
                     env_extra={"DATABASE_URL": url.format(port=closed_port())})
    assert_one_line_error(result, fragment)


def test_unwritable_data_dir(tmp_path, url_env):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    result = run_cli("race", "--jobs", "10", "--workers", "1", "--data-dir", str(blocker / "data"),
                     env_extra=url_env)
    assert_one_line_error(result, "cannot write to data directory")


def test_foreign_object_in_schema(conn, tmp_path, url_env):
    conn.execute("CREATE TABLE claimrace.not_ours (x int)")
    try:
        result = run_cli("race", "--jobs", "10", "--workers", "1", "--data-dir", str(tmp_path), env_extra=url_env)
        assert_one_line_error(result, "claimrace.not_ours", "refusing")
    finally:
        conn.execute("DROP TABLE claimrace.not_ours")


def test_docker_without_an_engine_points_at_the_embedded_default(tmp_path):
    # no Docker engine runs here: this is the real error path, not a simulation
    result = run_cli("race", "--db", "docker", "--jobs", "10", "--workers", "1", "--data-dir", str(tmp_path),
                     env_extra={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert_one_line_error(result, "no Docker engine reachable", "embedded")


def test_docker_container_matches_the_original_setup():
    spec = database.docker_container_spec(16, 250)
    assert spec["image"] == "postgres:16"
    assert spec["tmpfs"] == {"/var/lib/postgresql/data": "rw"}
    assert "max_connections=250" in spec["command"]
    assert "pg_isready" in " ".join(spec["healthcheck"]["test"])
    assert spec["ports"]["5432/tcp"][0] == "127.0.0.1"


def test_compose_file_names_postgres_16_tmpfs_and_a_healthcheck():
    compose = yaml.safe_load((PROJECT_ROOT / "compose.yml").read_text())
    service = compose["services"]["postgres"]
    assert service["image"] == "postgres:16"
    assert "/var/lib/postgresql/data" in service["tmpfs"]
    assert "pg_isready" in " ".join(service["healthcheck"]["test"])
    assert any(port.startswith("127.0.0.1:") for port in service["ports"])


def embedded_server_owners() -> set[int]:
    """The harness processes that own a running embedded server (its folder's claimrace.owner file)."""
    owners = set()
    for proc in psutil.process_iter(["name", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if proc.info["name"] == "postgres" and "-D" in cmdline and "claimrace-pg" in " ".join(cmdline):
            owner = Path(cmdline[cmdline.index("-D") + 1]).parent / "claimrace.owner"
            try:
                owners.add(int(owner.read_text()))
            except (OSError, ValueError):
                pass
    return owners


def test_cli_race_on_the_embedded_server_then_nothing_is_left_running(tmp_path):
    # other harnesses on this machine may start and stop servers meanwhile: look only for this command's
    harness = subprocess.Popen([sys.executable, "-m", "harness", "race", "--db", "embedded", "--strategy", "all",
                                "--workers", "1,3", "--jobs", "200", "--data-dir", str(tmp_path), "--json"],
                               cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "DATABASE_URL": ""})
    stdout, stderr = harness.communicate(timeout=300)
    assert harness.returncode == 0, stderr
    assert len(stdout.strip().splitlines()) == 6
    assert harness.pid not in embedded_server_owners()
    assert len(list((tmp_path / "races").iterdir())) == 6
