"""`pdpp-store serve`: the real command as a subprocess on 127.0.0.1, spoken to over a socket:
REST with httpx, and MCP at `/mcp` with the SDK's Streamable HTTP client.

The server is started on a free port, waited for (by polling its metadata route), used, and
ended by its pid (SIGINT: uvicorn's own graceful stop), on every database.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from _data import MAILBOX, attachment
from _rest import NARROW, OWNER, TEXT, window_path
from _served import (
    STARTUP_SECONDS,
    Server,
    free_port,
    mcp_read,
    seed_served,
    serve_refused,
    server,
    start,
    tokens_file,
)
from sqlalchemy.engine import make_url
from uvicorn.config import STARTUP_FAILURE

from pdpp_store import AsyncStore, Store, load_tokens
from pdpp_store.serve import _Worker, serve

__all__ = ["server", "tokens_file"]  # fixtures of _served, used here too


def test_serve_answers_rest_over_a_real_socket(server: Server) -> None:
    headers = {"Authorization": f"Bearer {OWNER}"}
    with httpx.Client(base_url=server.base_url, headers=headers) as client:
        response = client.get(window_path(), params={"field": "body_text", "limit_chars": 50})
        assert response.status_code == 200, response.text
        assert response.json()["window"]["text"] == TEXT[:50]
        follow = client.get(response.json()["links"]["next"])
        assert follow.json()["window"]["text"] == TEXT[50:100]
        refused = client.get(
            window_path(), params={"field": "body_text"}, headers={"Authorization": ""}
        )
        assert refused.status_code == 401
        assert refused.headers["WWW-Authenticate"].startswith("Bearer")
        document = client.get("/openapi.json").json()
        assert "/v1/streams/{stream}/records/{record_id}/field-window" in document["paths"]
    log = server.stop()
    assert server.process.returncode == 0, log
    assert "Uvicorn running on http://127.0.0.1:" in log


def test_serve_answers_mcp_at_slash_mcp_with_the_same_tokens(server: Server) -> None:
    result = asyncio.run(mcp_read(server.base_url, OWNER))
    assert not result.is_error
    assert result.structured_content["window"]["text"] == TEXT[:40]
    header, _, text = result.content[0].text.partition("\n")
    assert text == TEXT[:40]
    assert json.loads(header)["range"] == [0, 40]
    refused = httpx.post(f"{server.base_url}/mcp", json={})
    assert refused.status_code == 401
    assert refused.headers["WWW-Authenticate"].startswith("Bearer")
    narrow = asyncio.run(mcp_read(server.base_url, NARROW))
    assert not narrow.is_error  # body_text is granted to the narrow token
    log = server.stop()
    assert server.process.returncode == 0, log


def _refusal(response: httpx.Response) -> tuple[dict[str, Any], str]:
    """A 401's envelope without its request id (checked against the header), and its
    challenge's `resource_metadata` URL."""
    assert response.status_code == 401, response.text
    assert response.headers["Cache-Control"] == "no-store"
    error = response.json()["error"]
    assert error.pop("request_id") == response.headers["X-Request-Id"]
    challenge = response.headers["WWW-Authenticate"]
    assert challenge.startswith('Bearer realm="pdpp-store", resource_metadata="')
    assert ('error="invalid_token"' in challenge) == (error["code"] == "invalid_token")
    return error, challenge.split('resource_metadata="')[1].split('"')[0]


def test_rest_and_mcp_refuse_with_one_401(server: Server) -> None:
    """Both surfaces answer a missing or unknown token with the same envelope (request id
    included) and a challenge naming their own resource's RFC 9728 metadata, which is served."""
    base = server.base_url
    metadata = f"{base}/.well-known/oauth-protected-resource"
    for authorization, code in (
        ("", "missing_token"),
        ("Bearer tok_unknown_0000", "invalid_token"),
    ):
        headers = {"Authorization": authorization} if authorization else {}
        rest, rest_metadata = _refusal(
            httpx.get(f"{base}{window_path()}", params={"field": "body_text"}, headers=headers)
        )
        mcp, mcp_metadata = _refusal(httpx.post(f"{base}/mcp", json={}, headers=headers))
        assert rest == mcp
        assert rest["code"] == code
        assert rest["type"] == "authentication_error"
        assert (rest_metadata, mcp_metadata) == (metadata, f"{metadata}/mcp")
    assert httpx.get(f"{metadata}/mcp").json()["resource"] == f"{base}/mcp"
    assert httpx.get(metadata).json()["resource"] == base
    server.stop()


BIG_BLOB_BYTES = 24 << 20
"""More than the loopback socket buffers hold, so the server is still reading when the record
goes."""


def test_a_download_whose_record_is_deleted_is_aborted_not_cut(server: Server, db_url: str) -> None:
    """Each step of a download is read through the grant: once the record naming the blob is
    deleted, the server closes the connection before the declared length (the client sees an
    incomplete body, never a shorter one taken for the whole), and says so in its log."""
    data = bytes(range(256)) * (BIG_BLOB_BYTES // 256)
    with Store.open(db_url) as store:
        blob = store.put_blob(data, "application/octet-stream")
        store.upsert_records(MAILBOX, "attachments", [attachment("a-big", blob.as_ref())])
        received = bytearray()
        headers = {"Authorization": f"Bearer {OWNER}"}
        url = f"{server.base_url}/v1/blobs/{blob.blob_id}"

        def download() -> None:
            with httpx.stream("GET", url, headers=headers, timeout=30) as response:
                assert response.status_code == 200
                assert response.headers["Content-Length"] == str(len(data))
                for part in response.iter_raw(1 << 16):
                    if not received:
                        store.delete_record(MAILBOX, "attachments", "a-big")
                    received.extend(part)

        with pytest.raises(httpx.RemoteProtocolError):
            download()
        assert 0 < len(received) < len(data)
        assert bytes(received) == data[: len(received)]
        assert httpx.get(url, headers=headers).status_code == 404
    log = server.stop()
    assert "blob download aborted after" in log
    assert "the grant no longer reaches it (blob_not_found)" in log


def test_serve_refuses_a_bad_tokens_file_before_starting(db_url: str, tmp_path: Path) -> None:
    bad = tmp_path / "tokens.json"
    bad.write_text('{"short": {}}', encoding="utf-8")
    error, log = serve_refused(db_url, bad, "--port", str(free_port()))
    assert (error["code"], error["param"]) == ("invalid_tokens", "tokens[0]")
    assert "short" not in log


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as listing:
        return [int(child) for child in listing.read().split()]


def _workers(pid: int) -> list[int]:
    """The server's worker processes (its other child is multiprocessing's resource tracker)."""
    workers = []
    for child in _children(pid):
        with open(f"/proc/{child}/cmdline", "rb") as cmdline:
            if b"spawn_main" in cmdline.read():
                workers.append(child)
    return workers


def _accepted_by(pids: list[int], port: int, client_port: int) -> int | None:
    """Which of `pids` holds the server end of the open loopback connection from `client_port`
    to `port` (the worker that accepted it), found by the socket's inode."""
    sockets = set()
    with open("/proc/net/tcp", encoding="ascii") as table:
        for line in table.read().splitlines()[1:]:
            fields = line.split()
            local, remote = (int(end.rpartition(":")[2], 16) for end in fields[1:3])
            if (local, remote) == (port, client_port):
                sockets.add(f"socket:[{fields[9]}]")
    for pid in pids:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/fd/{fd}") in sockets:
                    return pid
    return None


def _ended(pid: int) -> bool:
    """Gone, or a zombie nobody here will reap (it has ended all the same)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rpartition(")")[2].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _all_end(pids: list[int], seconds: float = 10.0) -> bool:
    """Whether every process in `pids` ends within `seconds` (the resource tracker leaves once
    its parent has gone, a moment after)."""
    deadline = time.monotonic() + seconds
    while not all(_ended(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


MIN_CONNECTIONS = 20


def test_serve_with_workers_answers_from_each_process_and_ends_them(
    db_url: str, tokens_file: Path
) -> None:
    """`--workers 2`: two processes share the port, each with its own store; both answer REST
    and MCP with the same tokens; ending the parent by its pid ends every process it started.

    Each connection is put down to the process that accepted it, by its socket, so the reads go
    on only until both workers have answered, and at least `MIN_CONNECTIONS` connections (any
    answered by another process fails the test). Until session 11 they went on to 300, a count
    kept from when the workers' share was told by their CPU time, which needed the volume."""
    seed_served(db_url)
    server = start(db_url, tokens_file, "--workers", "2")
    try:
        workers = _workers(server.process.pid)
        assert len(workers) == 2, _children(server.process.pid)
        port = int(server.base_url.rpartition(":")[2])
        headers = {"Authorization": f"Bearer {OWNER}"}
        params: dict[str, str | int] = {"field": "body_text", "limit_chars": 50}
        served: dict[int | None, int] = {}
        deadline = time.monotonic() + STARTUP_SECONDS  # the second worker may still be starting
        while (
            len(served) < 2 or sum(served.values()) < MIN_CONNECTIONS
        ) and time.monotonic() < deadline:
            # a new connection each time: the kernel hands each to a worker, which holds it
            # (kept alive) while we ask which process that is
            with httpx.Client(headers=headers) as client:
                response = client.get(f"{server.base_url}{window_path()}", params=params)
                assert response.status_code == 200, response.text
                assert response.json()["window"]["text"] == TEXT[:50]
                stream = response.extensions["network_stream"]
                client_port = stream.get_extra_info("client_addr")[1]
                worker = _accepted_by(workers, port, client_port)
                served[worker] = served.get(worker, 0) + 1
        assert set(served) == set(workers), served
        result = asyncio.run(mcp_read(server.base_url, OWNER))
        assert result.structured_content["window"]["text"] == TEXT[:40]
        children = _children(server.process.pid)
    finally:
        log = server.stop()
    assert server.process.returncode == 0, log
    assert log.count("Application startup complete.") == 2, log
    assert log.count("Application shutdown complete.") == 2, log
    assert _all_end(children), f"still running: {children}"


def test_serve_with_workers_refuses_an_unopenable_store_as_one_process_does(
    tokens_file: Path, tmp_path: Path
) -> None:
    """A bad store is the same one clear error with workers as without, from the parent, before
    any worker is started."""
    missing = f"sqlite:///{tmp_path / 'no-such-dir' / 'store.db'}"
    errors = []
    for workers in ("1", "2"):
        error, log = serve_refused(
            missing, tokens_file, "--workers", workers, "--port", str(free_port())
        )
        assert "Started parent process" not in log
        errors.append(error)
    assert errors[0] == errors[1]
    assert (errors[1]["code"], errors[1]["param"]) == ("invalid_request", "url")


class _Lifespan:
    """Drives an ASGI application's lifespan as a server does."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.incoming: asyncio.Queue[dict[str, str]] = asyncio.Queue()
        self.sent: asyncio.Queue[dict[str, str]] = asyncio.Queue()

    async def startup(self) -> dict[str, str]:
        scope = {"type": "lifespan", "asgi": {"version": "3.0"}}
        self.task = asyncio.create_task(self.app(scope, self.incoming.get, self.sent.put))
        await self.incoming.put({"type": "lifespan.startup"})
        return await self.sent.get()

    async def shutdown(self) -> dict[str, str]:
        await self.incoming.put({"type": "lifespan.shutdown"})
        answer = await self.sent.get()
        await self.task
        return answer


def _connections_held(db_url: str) -> int:
    """This process's open files on the SQLite store, or the Postgres database's sessions other
    than the one asking."""
    url = make_url(db_url)
    if url.get_backend_name() == "sqlite":
        path = os.path.realpath(url.database or "")
        held = 0
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                held += os.path.realpath(f"/proc/self/fd/{fd}").startswith(path)
        return held
    conninfo = url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(conninfo, autocommit=True) as connection:
        row = connection.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_worker_opens_its_store_at_startup_and_closes_it_at_shutdown(
    db_url: str, tokens_file: Path
) -> None:
    """What each `--workers` process serves: its store opened at startup, on the serving loop,
    answering under the grants it was sent, and closed at shutdown."""
    seed_served(db_url)
    app = _Worker(db_url, load_tokens(tokens_file))()

    async def scenario() -> None:
        assert _connections_held(db_url) == 0
        lifespan = _Lifespan(app)
        assert await lifespan.startup() == {"type": "lifespan.startup.complete"}
        assert _connections_held(db_url) > 0
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://worker") as client:
            response = await client.get(
                window_path(),
                params={"field": "body_text", "limit_chars": 50},
                headers={"Authorization": f"Bearer {OWNER}"},
            )
            assert response.json()["window"]["text"] == TEXT[:50]
            refused = await client.get(window_path(), params={"field": "body_text"})
            assert refused.status_code == 401
        assert await lifespan.shutdown() == {"type": "lifespan.shutdown.complete"}
        assert _connections_held(db_url) == 0

    asyncio.run(scenario())


def test_a_worker_that_cannot_open_its_store_fails_its_startup_saying_why(
    tmp_path: Path, tokens_file: Path
) -> None:
    """The store went away between the parent's check and a worker's start: the worker's
    startup fails with the store's own error (uvicorn then stops the whole server)."""
    missing = f"sqlite:///{tmp_path / 'gone' / 'store.db'}"
    app = _Worker(missing, load_tokens(tokens_file))()

    async def scenario() -> dict[str, str]:
        return await _Lifespan(app).startup()

    failed = asyncio.run(scenario())
    assert failed["type"] == "lifespan.startup.failed"
    assert "directory does not exist" in failed["message"]


def test_a_worker_whose_shutdown_fails_answers_shutdown_failed(
    db_url: str, tokens_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ASGI lifespan: an error while shutting down is answered `lifespan.shutdown.failed` with
    its message, as a startup error is answered `lifespan.startup.failed`; the application does
    not end the protocol by raising."""
    closing = AsyncStore.close

    async def close_then_fail(self: AsyncStore) -> None:
        await closing(self)
        raise RuntimeError("the store would not close")

    monkeypatch.setattr(AsyncStore, "close", close_then_fail)
    app = _Worker(db_url, load_tokens(tokens_file))()

    async def scenario() -> dict[str, str]:
        lifespan = _Lifespan(app)
        assert await lifespan.startup() == {"type": "lifespan.startup.complete"}
        return await asyncio.wait_for(lifespan.shutdown(), timeout=10)

    failed = asyncio.run(scenario())
    assert failed == {"type": "lifespan.shutdown.failed", "message": "the store would not close"}


def test_a_worker_factory_does_not_show_its_tokens(tokens_file: Path) -> None:
    """What is sent to each worker carries every bearer token: its repr (a log line, a traceback
    with locals, a debugger) must not show them."""
    grants = load_tokens(tokens_file)
    shown = repr(_Worker("sqlite:///store.db", grants))
    assert not [token for token in grants if token in shown], shown


_RUN_AND_REPORT = """
import json, os, signal, sys, threading, time

import httpx

from pdpp_store.serve import run


def main() -> None:
    url, tokens, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    watched = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    before = [signal.getsignal(sig) for sig in watched]

    def stop() -> None:
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/.well-known/oauth-protected-resource")
                break
            except httpx.TransportError:
                time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=stop, daemon=True).start()
    run(url, tokens, port=port, workers=2)
    after = [signal.getsignal(sig) for sig in watched]
    print(json.dumps([sig.name for sig, a, b in zip(watched, before, after) if a != b]))


if __name__ == "__main__":
    main()
"""


def test_run_with_workers_gives_the_signals_back_when_it_returns(
    db_url: str, tokens_file: Path, tmp_path: Path
) -> None:
    """`run(..., workers=2)` called from a program: once it returns, Ctrl-C and SIGTERM stop
    that program again (the supervisor's handlers, which only queue a signal for its loop, are
    gone with it), as after `run(..., workers=1)`."""
    script = tmp_path / "run_and_report.py"
    script.write_text(_RUN_AND_REPORT, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script), db_url, str(tokens_file), str(free_port())],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    left = json.loads(done.stdout.splitlines()[-1])  # the access log goes to stdout before it
    assert left == [], f"handlers left in place: {left}"


_WORKERS_CANNOT_OPEN = """
import multiprocessing

import pdpp_store

_open = pdpp_store.AsyncStore.open


async def serve_refused(url, *args, **kwargs):
    if multiprocessing.parent_process() is not None:  # a spawned worker, not the parent
        raise pdpp_store.Unavailable("storage_unavailable", "injected: no store for workers")
    return await _open(url, *args, **kwargs)


pdpp_store.AsyncStore.open = serve_refused
"""


def test_serve_with_workers_that_cannot_start_fails_with_one_envelope(
    db_url: str, tokens_file: Path, tmp_path: Path
) -> None:
    """The parent opens the store, every worker then fails to (a fault put into the workers by a
    `sitecustomize` on their path): the server stops by itself, and the command ends with the
    CLI's error envelope and status 1, after the log line naming the worker's reason."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_WORKERS_CANNOT_OPEN, encoding="utf-8")
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    error, log = serve_refused(
        db_url,
        tokens_file,
        *("--workers", "2", "--port", str(free_port())),
        env={**os.environ, "PYTHONPATH": path},
        alone=False,
    )
    assert "injected: no store for workers" in log
    assert error["code"] == "storage_unavailable", error
    assert "worker process could not start" in error["message"]


@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_refuses_an_address_it_cannot_listen_on(
    sqlite_db_url: str, tokens_file: Path, workers: str
) -> None:
    """A port in use, or a host that is not this machine's, is one `invalid_request` envelope
    naming `port` or `host`, with or without workers, before anything starts."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy_port = str(holder.getsockname()[1])
        for host, port, param in (("127.0.0.1", busy_port, "port"), ("192.0.2.1", "0", "host")):
            error, log = serve_refused(
                sqlite_db_url, tokens_file, "--workers", workers, "--host", host, "--port", port
            )
            assert "Started" not in log
            assert (error["code"], error["param"]) == ("invalid_request", param), error
            assert f"cannot listen on {host}:{port}" in error["message"]


def test_serve_awaited_on_a_port_in_use_exits_as_uvicorn_does_and_closes_its_store(
    db_url: str, tokens_file: Path
) -> None:
    """`serve` binds its socket itself (so that the loop serves it in batches): a port it cannot
    bind is uvicorn's exit (status 3, its log line), and the store it opened is closed first."""
    seed_served(db_url)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy_port = holder.getsockname()[1]

        async def scenario() -> None:
            await serve(db_url, tokens_file, port=busy_port, log_level="critical")

        with pytest.raises(SystemExit) as exited:
            asyncio.run(scenario())
    assert exited.value.code == STARTUP_FAILURE
    assert _connections_held(db_url) == 0
