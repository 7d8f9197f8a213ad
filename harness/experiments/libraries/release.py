"""The probe of an earlier release (harness.libraries.releases), run whole in a child Python that imports it.

The harness has the installed release imported, and the probe's workers are forked from it. So the probe of an
earlier release runs in a child interpreter (`python -m harness.experiments.libraries.release IN OUT`) whose
PYTHONPATH puts the release's folder first: it imports the library afresh, checks that the release it found is the
one asked, forks its workers from there, and hands back what it measured (a pickle). The child dies with the
harness (harness.children), SIGKILL included, and its workers die with it.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from harness import children, libraries, scratch
from harness.errors import RaceError
from harness.experiments.contract import Measured
from harness.experiments.libraries import probe
from harness.libraries import releases
from harness.server import database


STOP_GRACE_S = 20.0  # a child asked to stop (SIGTERM) runs the probe's own teardown: its workers, its database


def measure(db: database.Database, p, run_id: str, progress: bool = False) -> Measured:
    """The probe of p.library at p.release, installed first where it is not yet."""
    path = releases.install(p.library, p.release, progress)
    folder = scratch.folder(f"release-{run_id}")
    child = None
    try:
        asked, answer = folder / "asked.pickle", folder / "measured.pickle"
        asked.write_bytes(pickle.dumps((dataclasses.replace(db, server=None), p, run_id, progress, os.getpid())))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(path), os.environ.get("PYTHONPATH")])))
        child = subprocess.Popen([sys.executable, "-m", __name__, str(asked), str(answer)], env=env,
                                 stderr=subprocess.PIPE, text=True)
        _, err = child.communicate()
        if child.returncode != 0 or not answer.exists():
            last = (err.strip().splitlines() or [f"exit {child.returncode}"])[-1]
            raise RaceError(f"the probe of {p.library}=={p.release} failed in its child: {last}")
        return pickle.loads(answer.read_bytes())
    finally:
        if child is not None and child.poll() is None:  # stopped from outside: the child tears its probe down
            child.terminate()
            try:
                child.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        shutil.rmtree(folder, ignore_errors=True)


def main(asked: str, answer: str) -> None:
    db, p, run_id, progress, parent = pickle.loads(Path(asked).read_bytes())
    children.die_with_parent(parent)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(1))  # the probe's finally blocks then run
    found = libraries.version(p.library)
    if found != p.release:
        raise SystemExit(f"{p.library} {found} imported where {p.release} was asked: {sys.path[:2]}")
    measured = probe.measure(db, p, run_id, progress)
    Path(answer).write_bytes(pickle.dumps(measured))


if __name__ == "__main__":
    main(*sys.argv[1:3])
