"""An earlier release of a library, installed beside the one `make install` pins, for the stale-completion probe.

A guard that is new in the release raced (chancy's claim_id) says nothing of a reader on the release before it.
`--library chancy==0.25.0` probes that release: pip installs it, without its dependencies, into a folder of its own
under the environment (RELEASES_DIR), and the probe runs in a child Python whose path puts that folder first
(harness.experiments.libraries.release); what `make install` installed for everything else is not touched. A
library offers only the releases it declares in EARLIER_RELEASES, each with what its source at that tag says the
probe should find; a release marked read_only (a model's: a model is written from one release) is read, not run.
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

from harness import libraries
from harness.errors import UserError

INSTALLED = "installed"  # the release make install put in the environment
RELEASES_DIR = Path(sys.prefix) / "claimrace-releases"
PIP_TIMEOUT_S = 300.0
_PINNED = re.compile(r"^([a-z_]+)==([0-9][0-9A-Za-z.]*)$")


def split(text: str) -> tuple[str, str]:
    """"chancy==0.25.0" -> ("chancy", "0.25.0"); "chancy" -> ("chancy", INSTALLED)."""
    match = _PINNED.match(text.strip())
    return (match.group(1), match.group(2)) if match else (text.strip(), INSTALLED)


def declared(name: str) -> dict:
    """The earlier releases a library may be probed at: release -> what its source at that tag says."""
    return libraries.get(name).EARLIER_RELEASES or {}


def check(name: str, release: str) -> None:
    """One line naming what may be asked, where this release may not."""
    if release == INSTALLED:
        return
    offered = {r: read for r, read in declared(name).items() if not read.get("read_only")}
    if release not in offered:
        choices = ", ".join(f"{name}=={r}" for r in offered) or "none"
        why = "it is read in its source, not run" if release in declared(name) else "its source there was not read"
        raise UserError(f"{name} {release} is not offered to the probe: {why} (offered: {choices})")


def expected(name: str, release: str) -> dict:
    """What the library's source at this release says the probe should find (STALE_COMPLETION's keys)."""
    return libraries.get(name).STALE_COMPLETION if release == INSTALLED else declared(name)[release]


def folder(name: str, release: str) -> Path:
    return RELEASES_DIR / f"{libraries.get(name).PACKAGE}-{release}"


def installed_version(path: Path, package: str) -> str | None:
    """The version of package installed in path (a pip --target folder); None where it is not there."""
    found = [d.version for d in importlib.metadata.distributions(path=[str(path)])
             if d.metadata["Name"].lower() == package.lower()]
    return found[0] if found else None


def install(name: str, release: str, progress: bool = False) -> Path:
    """The folder holding release (installed there first where it is not yet): its package alone, no dependencies,
    so that the child Python finds the rest in the environment as make install left it."""
    check(name, release)
    package, path = libraries.get(name).PACKAGE, folder(name, release)
    if installed_version(path, package) == release:
        return path
    if progress:
        print(f"installing {package}=={release} into {path} for the probe", file=sys.stderr)
    path.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                               "--no-deps", "--upgrade", "--target", str(path), f"{package}=={release}"],
                              capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise UserError(f"pip did not install {package}=={release} within {PIP_TIMEOUT_S:.0f} s") from None
    if done.returncode != 0 or installed_version(path, package) != release:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"pip could not install {package}=={release} into {path}: {last}")
    return path
