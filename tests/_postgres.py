"""Find or start a Postgres server for the test suite.

Four sources, tried in this order by `find_server()`. Each one is callable on its own and either
returns a running `PostgresServer` or raises `Unavailable` saying why it cannot:

(a) `from_env()`    the server named by ``PDPP_TEST_POSTGRES_URL`` (SQLAlchemy form,
                    ``postgresql+psycopg://user@host:port/dbname``);
(b) `from_local()`  a server already listening on 127.0.0.1:5432 (user ``postgres``, trust auth);
(c) `from_docker()` a testcontainers ``postgres:15`` container, when a Docker daemon answers;
(d) `from_initdb()` a throwaway cluster made with the system's ``initdb``/``pg_ctl`` in a temp dir,
                    listening on 127.0.0.1 on a free port, its unix socket in the temp dir.

``PDPP_TEST_POSTGRES_SOURCE=local|docker|initdb|env`` uses that one source and no other; a list
(``initdb,local,docker``) tries those, in its order, and uses the first that works.

Rules:
1. An explicit ``PDPP_TEST_POSTGRES_URL`` is final: when it is set and does not answer, nothing
   else is tried (testing against some other server than the one asked for would mislead).
2. Probes are cheap: a refused connection or an absent Docker daemon falls through in well under
   a second.
3. Postgres refuses to run as root, so when the tests run as root the throwaway cluster runs as
   ``nobody`` (``subprocess`` switches user itself; no ``runuser``/``su`` needed).
4. Whoever gets a server calls `PostgresServer.stop()` when done; it is idempotent and does nothing
   for servers we did not start. Throwaway clusters are also stopped at interpreter exit, and one
   left behind by a killed test run is reaped by the next `from_initdb()`.
5. Speed, measured here: a per-test database (create + drop) costs ~0.05 s on a throwaway cluster
   in /dev/shm, against ~0.4 s on the disk-backed system server, where DROP DATABASE forces a
   fsynced checkpoint. ``PDPP_TEST_POSTGRES_SOURCE=initdb`` picks the former.
6. When no source works, `unavailable()` skips, except under ``CI=true``, where it fails: CI never
   passes by skipping the Postgres half of the suite.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import psycopg
import pytest
from psycopg import sql
from sqlalchemy.engine import make_url

__all__ = [
    "ENV_SOURCE",
    "ENV_URL",
    "PostgresServer",
    "Unavailable",
    "find_pg_bindir",
    "find_server",
    "from_docker",
    "from_env",
    "from_initdb",
    "from_local",
    "running_in_ci",
    "unavailable",
    "wait_until_down",
]

ENV_URL = "PDPP_TEST_POSTGRES_URL"
ENV_SOURCE = "PDPP_TEST_POSTGRES_SOURCE"
DOCKER_IMAGE = "postgres:15"
CONNECT_TIMEOUT_S = 3
UNPRIVILEGED_USER = "nobody"
OWNER_FILE = "owner.pid"  # the pid of the test process that started a throwaway cluster
# Docker gives /dev/shm 64 MiB by default: far too little for the 100 MB-field tests.
SHM_MIN_FREE_BYTES = 4 << 30


class Unavailable(Exception):
    """This source cannot provide a Postgres server here; the message says why."""


def running_in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def unavailable(reason: str) -> NoReturn:
    """Skip the calling test or fixture, or fail it under CI=true (CI never skips Postgres)."""
    if running_in_ci():
        pytest.fail(f"CI=true and Postgres is required: {reason}", pytrace=False)
    pytest.skip(reason)


@dataclass
class PostgresServer:
    """A reachable server: its URL (SQLAlchemy form, maintenance database) and how to stop it."""

    url: str
    source: str
    _stop: Callable[[], None] | None = field(default=None, repr=False)
    _admin: psycopg.Connection[Any] | None = field(default=None, init=False, repr=False)
    _stopped: bool = field(default=False, init=False, repr=False)

    def database_url(self, dbname: str) -> str:
        """The SQLAlchemy URL of database `dbname` on this server."""
        return make_url(self.url).set(database=dbname).render_as_string(hide_password=False)

    def conninfo(self, dbname: str | None = None) -> str:
        """A libpq URI (what psycopg takes) for `dbname`, or the maintenance database."""
        url = make_url(self.url).set(drivername="postgresql")
        if dbname is not None:
            url = url.set(database=dbname)
        return url.render_as_string(hide_password=False)

    def connect(self, dbname: str | None = None) -> psycopg.Connection[Any]:
        """A new autocommit connection (CREATE/DROP DATABASE cannot run in a transaction)."""
        return psycopg.connect(
            self.conninfo(dbname), autocommit=True, connect_timeout=CONNECT_TIMEOUT_S
        )

    def admin(self) -> psycopg.Connection[Any]:
        """One shared autocommit connection to the maintenance database, reopened if lost."""
        if self._admin is None or self._admin.closed:
            self._admin = self.connect()
        return self._admin

    @property
    def version_num(self) -> int:
        return self.admin().info.server_version

    def create_database(self, name: str, *, template: str = "template0") -> str:
        """Create database `name` as a copy of `template`; return its SQLAlchemy URL."""
        statement = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
            sql.Identifier(name), sql.Identifier(template)
        )
        if template == "template0":
            # template0 is the only template whose encoding may be chosen.
            statement += sql.SQL(" ENCODING 'UTF8'")
        self.admin().execute(statement)
        return self.database_url(name)

    def set_template(self, name: str, is_template: bool) -> None:
        """Make `name` a template that nobody can connect to, or an ordinary database again.

        CREATE DATABASE ... TEMPLATE needs the template idle; refusing connections also keeps
        autovacuum and stray sessions out of it."""
        statement = sql.SQL("ALTER DATABASE {} WITH IS_TEMPLATE {} ALLOW_CONNECTIONS {}").format(
            sql.Identifier(name), is_template, not is_template
        )
        self.admin().execute(statement)

    def drop_database(self, name: str) -> None:
        """Drop database `name` if it exists, ending any connection a test leaked to it."""
        conn = self.admin()
        if self.version_num >= 130000:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
            return
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        )
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))

    def stop(self) -> None:
        """Close our connection and stop the server if we started it. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        if self._admin is not None:
            self._admin.close()
        if self._stop is not None:
            self._stop()


def find_server() -> PostgresServer:
    """The first source that works, in the order (a) env, (b) local, (c) docker, (d) initdb;
    or only the one named by ``PDPP_TEST_POSTGRES_SOURCE`` (env, local, docker or initdb), or
    the first that works of the ones it lists, in its order (``initdb,local``)."""
    sources: dict[str, Callable[[], PostgresServer]] = {
        "env": from_env,
        "local": from_local,
        "docker": from_docker,
        "initdb": from_initdb,
    }
    chosen = [name.strip() for name in os.environ.get(ENV_SOURCE, "").split(",") if name.strip()]
    for name in chosen:
        if name not in sources:
            raise ValueError(f"{ENV_SOURCE}={name!r}: expected one of {', '.join(sources)}")
    if len(chosen) == 1:
        return sources[chosen[0]]()
    if not chosen:
        if os.environ.get(ENV_URL):
            return from_env()
        chosen = ["local", "docker", "initdb"]
    reasons = []
    for name in chosen:
        try:
            return sources[name]()
        except Unavailable as why:
            reasons.append(f"{name}: {why}")
    raise Unavailable("no Postgres server found (" + "; ".join(reasons) + ")")


# --- (a) an explicit URL -------------------------------------------------------------------------


def from_env() -> PostgresServer:
    raw = os.environ.get(ENV_URL, "")
    if not raw:
        raise Unavailable(f"{ENV_URL} is not set")
    url = make_url(raw)
    if url.database is None:
        url = url.set(database="postgres")
    server = PostgresServer(url.render_as_string(hide_password=False), "env")
    _check_usable(server, f"{ENV_URL}={url.render_as_string(hide_password=True)}")
    return server


# --- (b) a server on 127.0.0.1:5432 --------------------------------------------------------------


def from_local(host: str = "127.0.0.1", port: int = 5432) -> PostgresServer:
    server = PostgresServer(f"postgresql+psycopg://postgres@{host}:{port}/postgres", "local")
    _check_usable(server, f"postgres@{host}:{port}")
    return server


def _check_usable(server: PostgresServer, label: str) -> None:
    """Raise `Unavailable` unless `server` answers and its user may create databases."""
    try:
        row = (
            server.admin()
            .execute("SELECT rolsuper OR rolcreatedb FROM pg_roles WHERE rolname = current_user")
            .fetchone()
        )
    except psycopg.Error as error:
        server.stop()
        raise Unavailable(f"{label} does not answer: {_first_line(error)}") from error
    if not (row and row[0]):
        server.stop()
        raise Unavailable(f"{label} answers, but its user may not create databases")


# --- (c) testcontainers --------------------------------------------------------------------------


def from_docker(image: str = DOCKER_IMAGE) -> PostgresServer:
    try:
        import docker

        client = docker.from_env(timeout=5)
        try:
            client.ping()
        finally:
            client.close()
    except Exception as error:  # anything at all means "no usable daemon"
        raise Unavailable(f"no Docker daemon answers ({_first_line(error)})") from error
    try:
        from testcontainers.community.postgres import PostgresContainer
    except ImportError:  # testcontainers < 4.14 kept it here
        from testcontainers.postgres import PostgresContainer
    container = PostgresContainer(
        image, username="postgres", password="postgres", dbname="postgres", driver="psycopg"
    )
    try:
        container.start()
    except Exception as error:
        with contextlib.suppress(Exception):
            container.stop()
        raise Unavailable(f"Docker could not start {image}: {_first_line(error)}") from error
    return PostgresServer(container.get_connection_url(), "docker", container.stop)


# --- (d) a throwaway initdb cluster --------------------------------------------------------------


def find_pg_bindir() -> Path | None:
    """A directory holding initdb, pg_ctl and postgres: from PATH, else /usr/lib/postgresql."""
    candidates: list[Path] = []
    on_path = shutil.which("initdb")
    if on_path:
        # Resolve symlinks (/usr/local/bin/initdb -> .../15/bin/initdb) so that pg_ctl and
        # postgres come from the same installation as initdb.
        candidates.append(Path(on_path).resolve().parent)
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=_version_key, reverse=True)
    for bindir in candidates:
        if all(os.access(bindir / tool, os.X_OK) for tool in ("initdb", "pg_ctl", "postgres")):
            return bindir
    return None


def from_initdb(bindir: Path | None = None) -> PostgresServer:
    """Start a fresh cluster in a temp dir; `stop()` shuts it down and removes the dir."""
    bindir = bindir or find_pg_bindir()
    if bindir is None:
        raise Unavailable("no initdb/pg_ctl/postgres on PATH or under /usr/lib/postgresql/*/bin")
    _reap_orphaned_clusters()
    cluster = _Cluster(bindir)
    try:
        cluster.start()
    except BaseException:
        cluster.destroy()
        raise
    atexit.register(cluster.destroy)
    return PostgresServer(
        f"postgresql+psycopg://postgres@127.0.0.1:{cluster.port}/postgres",
        "initdb",
        cluster.destroy,
    )


class _Cluster:
    """One throwaway cluster: a temp dir with `data/`, the server log and the unix socket."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.owner = _unprivileged_owner()
        self.root = Path(tempfile.mkdtemp(prefix="pdpp-pg-", dir=_cluster_parent()))
        if self.owner is not None:
            os.chown(self.root, *self.owner)
        (self.root / OWNER_FILE).write_text(str(os.getpid()))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = 0
        self.running = False

    def start(self) -> None:
        self._initdb()
        for attempt in range(3):  # a "free" port can be taken before the server binds it
            self.port = _free_port()
            self._configure()
            try:
                self._run("pg_ctl", "-D", self.data, "-l", self.log, "-w", "-t", "60", "start")
            except Unavailable:
                if attempt == 2 or "could not bind" not in self._log_tail():
                    raise
                continue
            self.running = True
            return

    def destroy(self) -> None:
        """Stop the server (if running) and remove the temp dir. Idempotent."""
        if self.running:
            self.running = False
            try:
                self._run("pg_ctl", "-D", self.data, "-m", "fast", "-w", "-t", "30", "stop")
            except Unavailable:
                with contextlib.suppress(Unavailable):
                    self._run("pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)

    def _initdb(self) -> None:
        common = ("-D", self.data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync")
        try:
            # C.UTF-8: byte-order collation like SQLite's, Unicode-aware ctype; the same locale
            # as Debian's packaged cluster.
            self._run("initdb", *common, "--locale=C.UTF-8")
        except Unavailable:
            shutil.rmtree(self.data, ignore_errors=True)
            self._run("initdb", *common, "--no-locale")

    def _configure(self) -> None:
        settings = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self.root}'",
            # Durability is pointless for a cluster that is deleted after the run; these make
            # CREATE DATABASE and commits much faster.
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "wal_init_zero": "off",
            # Checkpoints are cheap without fsync; keep the WAL (RAM, in /dev/shm) small.
            "max_wal_size": "256MB",
            # Like Debian's test cluster; an autovacuum worker inside a template would also make
            # CREATE DATABASE wait for it.
            "autovacuum": "off",
            "max_connections": "200",
        }
        text = "".join(f"{key} = {value}\n" for key, value in settings.items())
        (self.data / "postgresql.auto.conf").write_text(text)

    def _run(self, tool: str, *args: str | Path) -> None:
        command = [str(self.bindir / tool), *map(str, args)]
        uid, gid = self.owner if self.owner is not None else (None, None)
        completed = subprocess.run(
            command,
            cwd=self.root,
            env={**os.environ, "LC_ALL": "C.UTF-8", "TZ": "UTC"},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            user=uid,
            group=gid,
            extra_groups=None if uid is None else [],
        )
        if completed.returncode != 0:
            output = (completed.stdout + completed.stderr).strip()
            raise Unavailable(
                f"{tool} failed ({completed.returncode}): {output[-1500:]}\n{self._log_tail()}"
            )

    def _log_tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-1500:]
        except OSError:
            return ""


def _reap_orphaned_clusters() -> None:
    """Stop and remove throwaway clusters whose test process died without stopping them (a
    SIGKILLed or SIGTERMed pytest runs no teardown), so they do not hold RAM in /dev/shm."""
    for root in [*Path("/dev/shm").glob("pdpp-pg-*"), *Path("/tmp").glob("pdpp-pg-*")]:
        try:
            owner_pid = int((root / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue  # not ours, or being set up right now
        if _process_alive(owner_pid):
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            postmaster = int((root / "data" / "postmaster.pid").read_text().split()[0])
            cmdline = Path(f"/proc/{postmaster}/cmdline").read_bytes()
            if str(root).encode() in cmdline:  # that pid is still our postmaster
                os.kill(postmaster, signal.SIGQUIT)  # immediate shutdown
                deadline = time.monotonic() + 10
                while _process_alive(postmaster) and time.monotonic() < deadline:
                    time.sleep(0.1)
        shutil.rmtree(root, ignore_errors=True)


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _unprivileged_owner() -> tuple[int, int] | None:
    """(uid, gid) to run the cluster as when we are root, else None (run as ourselves)."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(UNPRIVILEGED_USER)
    except KeyError as error:
        raise Unavailable(f"running as root and there is no {UNPRIVILEGED_USER!r} user") from error
    return entry.pw_uid, entry.pw_gid


def _cluster_parent() -> str:
    """Where to put the cluster: RAM when there is room, since creating a database opens a few
    thousand files and that costs ~4x more on this VM's disk (~70 vs ~300 ms measured); else
    /tmp. Both are short enough for a unix socket path and traversable by `nobody`."""
    with contextlib.suppress(OSError):
        shm = os.statvfs("/dev/shm")
        if shm.f_bavail * shm.f_frsize >= SHM_MIN_FREE_BYTES and os.access("/dev/shm", os.W_OK):
            return "/dev/shm"
    return "/tmp"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _version_key(bindir: Path) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", bindir.parent.name)) or (0,)


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]


def wait_until_down(server: PostgresServer, timeout_s: float = 10.0) -> bool:
    """True once `server` refuses connections (for tests of teardown)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            psycopg.connect(server.conninfo(), connect_timeout=1).close()
        except psycopg.OperationalError:
            return True
        time.sleep(0.1)
    return False
