"""What `make install` installs and what `make db-up` says when it cannot run."""

from __future__ import annotations

import os
import stat
import subprocess
import tomllib

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from harness.config import PROJECT_ROOT


def locked_versions() -> dict[str, str]:
    pins = {}
    for line in (PROJECT_ROOT / "requirements.lock").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line and not line.startswith("-"):
            name, _, version = line.partition("==")
            assert version, f"requirements.lock: {line!r} is not pinned with =="
            pins[canonicalize_name(name)] = version
    return pins


def declared_requirements() -> list[Requirement]:
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(r.split("#")[0]) for r in
            [*project["dependencies"], *project["optional-dependencies"]["dev"]]]


def test_the_lock_pins_every_declared_dependency_within_its_range():
    pins = locked_versions()
    for requirement in declared_requirements():
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement.name} is declared in pyproject.toml but not pinned in requirements.lock"
        assert requirement.specifier.contains(pins[name], prereleases=True), \
            f"requirements.lock pins {name}=={pins[name]}, outside pyproject.toml's {requirement.specifier}"


def test_the_environment_file_installs_the_lock():
    environment = yaml.safe_load((PROJECT_ROOT / "environment.yml").read_text())
    pip = next(entry["pip"] for entry in environment["dependencies"] if isinstance(entry, dict))
    assert "-r requirements.lock" in pip and "-e ." in pip
    python = [entry for entry in environment["dependencies"] if isinstance(entry, str) and entry.startswith("python")]
    assert python == ["python=3.11"], "the lock is pinned for Python 3.11"


@pytest.mark.parametrize("docker_script, says", [
    (None, "docker is not installed"),
    ("#!/bin/sh\n[ \"$1\" = compose ] && { echo \"docker: unknown command: docker compose\" >&2; exit 1; }\nexit 0\n",
     "no compose plugin"),
])
def test_db_up_without_compose_says_why_in_one_line(tmp_path, docker_script, says):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # make and a shell, but a docker that is missing or lacks the compose plugin
    for tool in ("make", "sh", "bash", "grep", "awk"):
        for folder in os.environ["PATH"].split(os.pathsep):
            if os.path.exists(os.path.join(folder, tool)):
                os.symlink(os.path.join(folder, tool), bin_dir / tool)
                break
    if docker_script:
        docker = bin_dir / "docker"
        docker.write_text(docker_script)
        docker.chmod(docker.stat().st_mode | stat.S_IXUSR)
    result = subprocess.run(["make", "--no-print-directory", "-s", "db-up"], cwd=PROJECT_ROOT, capture_output=True,
                            text=True, env={"PATH": str(bin_dir), "HOME": str(tmp_path)}, timeout=60)
    assert result.returncode != 0
    ours = [line for line in result.stderr.splitlines() if line.startswith("make db-up:")]
    assert len(ours) == 1 and says in ours[0], result.stderr
    assert "Usage" not in result.stderr and "unknown command" not in result.stderr


def test_nothing_npm_installs_is_tracked():
    """node_modules is made by `make install`; a tracked copy or symlink (one pointed at a checkout's own
    node_modules, a loop on every clone) hides the installed libraries, which are then not raced."""
    if not (PROJECT_ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    tracked = subprocess.run(["git", "ls-files", "--", "harness/libraries/node/node_modules"], cwd=PROJECT_ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
    assert tracked == []
    # without a trailing slash: a pattern ending in / matches a folder only, and a symlink slips past it
    assert "harness/libraries/node/node_modules" in (PROJECT_ROOT / ".gitignore").read_text().splitlines()
