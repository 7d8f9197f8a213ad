"""Running the Node job libraries' scripts (each library's worker.cjs, beside its adapter) from a library module.

The libraries are installed by `make install` (`npm ci` in harness/libraries/node, from its package-lock.json)
where `node` and `npm` are on the PATH; a script finds them there (NODE_PATH) and the helpers every script shares in
common.cjs. Each script takes a command: install URL, enqueue URL N, enqueuer URL (an enqueue kept open,
sent "N FIRST" lines on stdin), or work URL LOG [ARGS]. A worker script says "ready" once connected and starts on a
line on stdin; it dies with the worker process that started it (PR_SET_PDEATHSIG), and a SIGTERM to that process is
passed on to it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path
from urllib.parse import quote, urlencode

from psycopg import conninfo

from harness.children import die_with_parent

NODE_DIR = Path(__file__).resolve().parent / "node"
# what a library's script requires, found where npm ci installed it (the script lives in its library's folder)
NODE_ENV = {"NODE_PATH": str(NODE_DIR / "node_modules")}
SCRIPT_TIMEOUT_S = 300
INSTALL_HINT = "install Node.js 20 and npm, then run make install"


def node() -> str | None:
    return shutil.which("node")


def installed_version(package: str) -> str | None:
    """The version of an npm package installed under NODE_DIR; None without node or the package."""
    manifest = NODE_DIR / "node_modules" / package / "package.json"
    if node() is None or not manifest.exists():
        return None
    return json.loads(manifest.read_text())["version"]


def uri(url: str) -> str:
    """A libpq connection string (keywords or URI) as the postgresql:// URI node-postgres reads."""
    params = conninfo.conninfo_to_dict(url)
    user, password = params.pop("user", ""), params.pop("password", None)
    host, port, dbname = params.pop("host", ""), params.pop("port", None), params.pop("dbname", "")
    if host.startswith("/"):  # a Unix socket directory: node-postgres takes it, and its port, as parameters
        params["host"], host = host, ""
        if port:
            params["port"], port = port, None
    elif ":" in host:  # an IPv6 address
        host = f"[{host}]"
    auth = quote(user, safe="") + (f":{quote(password, safe='')}" if password else "") + ("@" if user else "")
    query = f"?{urlencode(params)}" if params else ""
    return f"postgresql://{auth}{host}{f':{port}' if port else ''}/{quote(dbname, safe='')}{query}"


def _die_with(parent_pid: int):
    return lambda: die_with_parent(parent_pid)


FIRST_JOB_ENV = "CLAIMRACE_FIRST_JOB"  # where a script that numbers its jobs (pg-boss) starts numbering them


def named(script: Path) -> str:
    """A script as an error names it: its library's folder and its name."""
    return f"{script.parent.name}/{script.name}"


def run(script: Path, *args: str, first: int = 0) -> None:
    """One command of a script (install URL, enqueue URL N), to its end; its error output in the exception if it
    fails. first: the number its first job takes, told through the environment (FIRST_JOB_ENV)."""
    command, url, *rest = args
    result = subprocess.run([node() or "node", str(script), command, uri(url), *rest], cwd=NODE_DIR,
                            capture_output=True, env=os.environ | NODE_ENV | {FIRST_JOB_ENV: str(first)},
                            text=True, timeout=SCRIPT_TIMEOUT_S, preexec_fn=_die_with(os.getpid()))
    if result.returncode != 0:
        raise RuntimeError(f"{named(script)} {command}: {result.stderr.strip()[-2000:]}")


ENQUEUER_STOP_S = 10.0  # what an enqueuer is given to close its client once its stdin ends, before it is killed


@contextlib.contextmanager
def enqueuer(script: Path, url: str, *args: str):
    """The script's enqueue kept open: send(n, first) has it enqueue n jobs numbered from first and waits for its
    "ok"; it dies with this process, and is closed (its stdin ended) or killed on the way out."""
    process = subprocess.Popen([node() or "node", str(script), "enqueuer", uri(url), *args], cwd=NODE_DIR,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=os.environ | NODE_ENV, preexec_fn=_die_with(os.getpid()))

    def said(what: str) -> None:
        if process.stdout.readline().strip() != what:
            process.kill()
            raise RuntimeError(f"{named(script)} enqueuer ended before it said {what} (exit {process.wait()}): "
                               f"{process.stderr.read().strip()[-2000:]}")

    def send(n: int, first: int) -> None:
        process.stdin.write(f"{n} {first}\n")
        process.stdin.flush()
        said("ok")

    try:
        said("ready")
        yield send
        process.stdin.close()
        process.wait(timeout=ENQUEUER_STOP_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def work(script: Path, url: str, log: Path, ready, start, *args: str) -> dict | None:
    """A worker: the script's work command, ready once it says so, started when the harness releases it. Returns
    the node process's own scheduler readings (/proc/self/schedstat) at its start and at its end, as it printed
    them: the CPU the worker used is node's, not this waiting process's."""
    process = subprocess.Popen([node() or "node", str(script), "work", uri(url), str(log), *args], cwd=NODE_DIR,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=os.environ | NODE_ENV,
                               preexec_fn=_die_with(os.getpid()))
    signal.signal(signal.SIGTERM, lambda signum, frame: process.send_signal(signal.SIGTERM))
    try:
        if process.stdout.readline().strip() != "ready":
            raise RuntimeError(f"{named(script)}: the worker ended before it was ready (exit {process.wait()})")
        ready.set()
        start.wait()
        process.stdin.write("start\n")
        process.stdin.flush()
        said = process.stdout.read()
        process.wait()
        readings = [json.loads(line) for line in said.splitlines() if line.startswith("{")]
        return readings[-1] if readings else None
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def commands(package: str, script: Path, *work_args: str, fault_work_args=None, fault_enqueue_args=None):
    """A Node library module's installed_version, install, enqueue, enqueuer and work, each running its script. A
    fault run (job_s given) adds the job's length in ms to the work command's arguments, then what
    fault_work_args(job_s) returns; and to the enqueue and enqueuer commands', what fault_enqueue_args(job_s)
    returns."""

    def installed() -> str | None:
        return installed_version(package)

    def install(url: str) -> None:
        run(script, "install", url)

    def enqueue_args(job_s: float | None) -> tuple:
        return fault_enqueue_args(job_s) if job_s is not None and fault_enqueue_args else ()

    def enqueue(url: str, n: int, job_s: float | None = None, first: int = 0) -> None:
        run(script, "enqueue", url, str(n), *enqueue_args(job_s), first=first)

    def kept_open(url: str, job_s: float | None = None):
        return enqueuer(script, url, *enqueue_args(job_s))

    def worker(url: str, log: Path, ready, start, job_s: float | None = None) -> dict | None:
        extra = () if job_s is None else (str(round(job_s * 1000)), *(fault_work_args(job_s) if fault_work_args
                                                                     else ()))
        return work(script, url, log, ready, start, *work_args, *extra)

    return installed, install, enqueue, kept_open, worker
