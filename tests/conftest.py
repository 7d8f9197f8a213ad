"""One real PostgreSQL for the whole test session: the embedded server, or DATABASE_URL if set."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.server import database, schema

PROJECT_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def db():
    with database.open_database(os.environ.get("CLAIMRACE_TEST_DB") or None) as handle:
        yield handle


@pytest.fixture
def conn(db):
    with db.connect() as connection:
        schema.ensure_schema(connection)
        yield connection


def run_cli(*args: str, env_extra: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """python -m harness ... as a user would run it."""
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=PROJECT_ROOT, capture_output=True,
                          text=True, env=env, timeout=timeout)
