"""`pdpp_store.serve`: the REST server, with the MCP server at `/mcp`, under uvicorn.

    run(url, tokens_path, host="127.0.0.1", port=8787, workers=1)   # what `pdpp-store serve` runs
    await serve(url, tokens, ...)                                    # the same, on a running loop

It stands above both servers: it imports `pdpp_store.rest` and `pdpp_store.mcp` to mount one on
the other, and neither imports it (nor each other), so no import circle runs between the HTTP
surfaces. Behind the `[server]` extra.

Rules:
1. The tokens file is read and checked before the database is opened: a bad file is one clear
   `invalid_tokens` error and nothing is started.
2. The `AsyncStore` is opened on the loop that serves (its connections belong to that loop) and
   closed by the application's shutdown, before uvicorn hands a captured Ctrl-C back.
3. `run` serves on uvicorn's fastest available parts (uvloop, httptools), as `uvicorn.run`
   would choose them ("auto"); without them it serves on asyncio and h11, slower but the same.
   Its loop (`pdpp_store.door.door_loop`, in every worker too) accepts new connections in
   batches, from the listening socket `serve` binds (one address: the host given, a name
   resolved to its IPv4 address, as with workers): a burst of connections shares the loop
   with the requests already in. Awaited on another loop, `serve` accepts as that loop does.
4. With `workers` > 1, `run` is uvicorn's supervisor over that many worker processes sharing one
   listening socket, the only way a Python server uses more than one core (a second thread in one
   process slows even the bare SQLite driver down: docs/decisions.md). The parent opens the store
   once first (a bad URL or an unmigratable database is the same one error as with one process,
   and the migration runs once); each worker then opens its own store at its application's
   startup, on its own loop (rule 2), under the grants the parent read (rule 1). Ending the
   parent by its pid (SIGINT or SIGTERM) ends every worker gracefully; a worker that dies is
   replaced; a worker that cannot start stops the whole server, as soon as it has exited
   (`_Supervisor`), and `run` then raises `storage_unavailable` (uvicorn has logged the
   worker's reason). Workers are spawned, so a
   program calling `run(..., workers=N)` keeps it under `if __name__ == "__main__":`.
5. An address `run` cannot listen on (the port in use, a host not of this machine) is an
   `invalid_request` naming `port` or `host`, checked before the store is opened; uvicorn, which
   binds again a moment later, only logs such a failure and exits with status 3.
6. The server names itself (RFC 9728 metadata, 401 challenges) by `public_url` when given (an
   http or https origin, else `invalid_request` naming `public_url`, checked with the tokens
   before anything starts), else by the address it listens on; listening on a wildcard
   (0.0.0.0, ::), by the address each connection reached. Never by a request's `Host`.
7. Bearer tokens resolve through one `pdpp_store.http.Resolver` (`resolver_for`): the tokens
   file (`pdpp_store.auth.TokensFile`: hashed entries, stored grants by id, read again when it
   changes), then an OAuth authorization server (`pdpp_store.auth.OAuth`: RFC 7662
   introspection, RFC 9068 JWTs), whose tokens must name this server's public base URL as their
   audience (so with one, a wildcard listening address needs `public_url`). The RFC 9728
   metadata names its issuer; a server given a map of tokens resolves by that map alone.
8. What the server writes to stdout and stderr holds no personal data and no token: uvicorn's
   access log (the whole URL) is off, and `pdpp_store.access_log.AccessLog` logs each request
   by method, route template, status, time and request id.
9. Every connection passes the door (`pdpp_store.door`) before any app sees it: bounded heads,
   bodies, timeouts and connections (`limits`), and on `/mcp` the `Host` must name the server
   (by name, any port: the public URL's host, the listening address, and on loopback
   `localhost` too, plus `allow_hosts`; not checked when listening on a wildcard without a
   public URL or `allow_hosts`) and an `Origin` must be the server's own or one of
   `allow_origins`, which also get CORS (`pdpp_store.door_headers`). Large JSON answers are
   gzip-compressed for clients that accept it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import os
import signal
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.types import Receive, Scope, Send
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors import Multiprocess
from uvicorn.supervisors.multiprocess import SIGNALS

from pdpp_store import AsyncStore, BadRequest, Grant, Store, Unavailable
from pdpp_store.access_log import AccessLog
from pdpp_store.auth import OAuth, Resolvers, TokensFile
from pdpp_store.door import (
    DOOR_LOOP,
    DoorMiddleware,
    DoorNames,
    Gate,
    Limits,
    door_loop,
    door_protocol,
    host_name,
    keep_heap,
)
from pdpp_store.door_headers import Cors, GzipJson
from pdpp_store.http import PUBLIC_URL_KEY, Resolver, check_public_url
from pdpp_store.mcp import http_app
from pdpp_store.rest import create_app

__all__ = ["Limits", "run", "serve"]


def _config(
    app: Any, host: str, port: int, log_level: str, gate: Gate, **options: Any
) -> uvicorn.Config:
    """uvicorn's settings for every way of serving here: its httptools protocol under the door's
    limits, judging heads by the application's `gate` (rule 9), no websockets."""
    limits = gate.limits
    keep_alive: Any = limits.idle_timeout_s  # uvicorn's timer takes any number of seconds
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        proxy_headers=False,
        server_header=False,
        access_log=False,  # uvicorn's names the full URL: ours (rule 8) does not
        http=door_protocol(limits, gate),  # type: ignore[arg-type]
        ws="none",
        timeout_keep_alive=keep_alive,
        loop=DOOR_LOOP,
        **options,
    )


@dataclass(frozen=True)
class _Access:
    """Who may call in (rule 7): the checked allowed origins and hosts, and the limits."""

    limits: Limits = field(default_factory=Limits)
    origins: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()

    @classmethod
    def checked(
        cls, limits: Limits | None, origins: Sequence[str], hosts: Sequence[str]
    ) -> _Access:
        """`serve`'s options, checked (the default limits when none are given)."""
        return cls(limits or Limits(), _checked_origins(origins), _checked_hosts(hosts))


def _checked_origins(origins: Sequence[str]) -> tuple[str, ...]:
    checked = []
    for origin in origins:
        try:
            checked.append(check_public_url(origin).lower())
        except BadRequest as error:
            raise BadRequest(
                "invalid_request",
                error.message.replace("public_url", f"allow_origin {origin!r}", 1),
                param="allow_origin",
            ) from None
    return tuple(checked)


def _checked_hosts(hosts: Sequence[str]) -> tuple[str, ...]:
    checked = []
    for host in hosts:
        try:
            checked.append(check_public_url(f"http://{host}").removeprefix("http://").lower())
        except BadRequest:
            raise BadRequest(
                "invalid_request",
                f"allow_host {host!r} must be a host name or address (a port, if any, is ignored)",
                param="allow_host",
            ) from None
    return tuple(checked)


_LOOPBACK = {"127.0.0.1", "::1", "[::1]", "localhost"}


def _names(access: _Access, named: str | None, host: str) -> DoorNames:
    """The host names and origins the door allows on `/mcp` (rule 7)."""
    hosts = {host_name(allowed) for allowed in access.hosts}
    if named is not None:  # the public URL, or the listening address (not a wildcard)
        hosts.add(host_name(named.partition("://")[2]))
    if host not in _WILDCARDS:
        hosts.add(host_name(_bracketed(host)))
        if host in _LOOPBACK:
            hosts.update(("localhost", "127.0.0.1", "[::1]"))
    return DoorNames(hosts=frozenset(hosts), origins=frozenset(access.origins))


_WILDCARDS = {"", "0.0.0.0", "::", "[::]"}


def _public_url(public_url: str | None, host: str, port: int) -> str | None:
    """What the server names itself by (rule 6): `public_url` checked, else the listening
    address, or None when that is a wildcard (each connection then names the address it
    reached)."""
    if public_url is not None:
        return check_public_url(public_url)
    if host in _WILDCARDS:
        return None
    return f"http://{_bracketed(host)}:{port}"


def _bracketed(host: str) -> str:
    """`host` as a URL's authority names it (an IPv6 address in brackets)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


class _Door:
    """The ASGI application uvicorn runs: it tells the application below what the server's
    public base URL is (rule 6), then hands every request through the door's middleware
    (rule 7)."""

    def __init__(self, app: Any, public_url: str | None, access: _Access, gate: Gate) -> None:
        inner = DoorMiddleware(GzipJson(app), access.limits, gate.names, gate)
        self.app = Cors(inner, frozenset(access.origins)) if access.origins else inner
        self._public_url = public_url

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._public_url is not None and scope["type"] in ("http", "websocket"):
            scope = {**scope, PUBLIC_URL_KEY: self._public_url}
        await self.app(scope, receive, send)


Tokens = Mapping[str, Grant] | Resolver
"""What a server is given to know its tokens by: a map of token -> grant, or a resolver."""


def resolver_for(
    tokens_path: str | os.PathLike[str] | TokensFile | None,
    oauth: OAuth | None,
    resource: str | None,
) -> Resolver:
    """The server's one token resolver (rule 7): the tokens file (checked now: a bad one is
    `invalid_tokens` and nothing starts), then the OAuth authorization server, whose tokens must
    name `resource` (this server's public base URL) as their audience."""
    sources: list[TokensFile | OAuth] = []
    if isinstance(tokens_path, TokensFile):
        sources.append(tokens_path)
    elif tokens_path is not None:
        sources.append(TokensFile(tokens_path))
    if oauth is not None:
        if oauth.resource is None:
            if resource is None:
                raise BadRequest(
                    "invalid_request",
                    "with an authorization server, give the server's public_url: the audience "
                    "its tokens must name",
                    param="public_url",
                )
            oauth = dataclasses.replace(oauth, resource=resource)
        sources.append(oauth)
    if not sources:
        raise BadRequest(
            "invalid_request",
            "give a tokens file, an authorization server, or both",
            param="tokens",
        )
    return (
        sources[0]
        if len(sources) == 1 and isinstance(sources[0], TokensFile)
        else Resolvers(*sources)
    )


async def _application(store: AsyncStore, grants: Tokens) -> Any:
    """The served application over an open store, which its shutdown closes (rule 2)."""
    try:
        return create_app(store, grants, mcp_app=http_app(store, grants), owns_store=True)
    except BaseException:
        await store.close()  # nothing owns the store until the application exists
        raise


async def serve(
    url: str,
    tokens: str | os.PathLike[str] | Tokens,
    *,
    host: str = "127.0.0.1",
    port: int = 8787,
    log_level: str = "info",
    public_url: str | None = None,
    limits: Limits | None = None,
    allow_origins: Sequence[str] = (),
    allow_hosts: Sequence[str] = (),
    audit: bool = True,
) -> None:
    """Serve the store at `url` to the holders of `tokens` (a tokens file, or token -> grant)
    until stopped, naming itself by `public_url` (rule 6), behind the door (rule 9); with
    `audit=False` its reads are not recorded in the read audit."""
    named = _public_url(public_url, host, port)
    grants = tokens if isinstance(tokens, Mapping | Resolver) else resolver_for(tokens, None, named)
    access = _Access.checked(limits, allow_origins, allow_hosts)
    store = await AsyncStore.open(url, audit=audit)
    app = await _application(store, grants)
    gate = Gate(access.limits, _names(access, named, host))
    door = _Door(AccessLog(app), named, access, gate)
    config = _config(door, host, port, log_level, gate)
    # Served from a socket bound here, so that the loop's server is the door's (rule 3).
    try:
        listening = config.bind_socket()  # logs and exits (status 3) when it cannot bind
    except BaseException:
        await store.close()  # no lifespan will run to close it (rule 2)
        raise
    with listening:  # closed too when startup fails (uvicorn closes it only at shutdown)
        await uvicorn.Server(config).serve(sockets=[listening])


@dataclass(frozen=True)
class _Worker:
    """What a worker process is sent (pickled): the store's URL and the checked grants. uvicorn
    calls it, as an application factory, in the worker."""

    url: str
    grants: Tokens = field(repr=False)  # token -> grant, or a resolver: the tokens are secrets
    public_url: str | None = None
    access: _Access = field(default_factory=_Access)
    gate: Gate = field(default_factory=lambda: Gate(Limits(), DoorNames()))
    """The one its protocol judges heads by (the same object in the worker: one pickle)."""
    audit: bool = True

    def __call__(self) -> _Door:
        keep_heap()  # this process serves (pdpp_store.door._heap)
        opened = _OpenedAtStartup(self.url, self.grants, self.audit)
        return _Door(AccessLog(opened), self.public_url, self.access, self.gate)


class _OpenedAtStartup:
    """An ASGI application whose store is opened at lifespan startup, on the loop that serves,
    and whose real application (with its own lifespan) runs from then until shutdown."""

    def __init__(self, url: str, grants: Tokens, audit: bool = True) -> None:
        self._url = url
        self._grants = grants
        self._audit = audit
        self._app: Any = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        # uvicorn runs with lifespan "on": nothing is served before startup completed.
        await self._app(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        await receive()  # lifespan.startup
        running = contextlib.AsyncExitStack()
        try:
            store = await AsyncStore.open(self._url, audit=self._audit)
            app = await _application(store, self._grants)
            await running.enter_async_context(app.router.lifespan_context(app))
        except Exception as error:
            await send({"type": "lifespan.startup.failed", "message": str(error)})
            return
        self._app = app
        await send({"type": "lifespan.startup.complete"})
        await receive()  # lifespan.shutdown
        try:
            await running.aclose()
        except Exception as error:
            await send({"type": "lifespan.shutdown.failed", "message": str(error)})
            return
        await send({"type": "lifespan.shutdown.complete"})


class _Supervisor(Multiprocess):
    """uvicorn's supervisor, which sees a worker's end as soon as it comes.

    It pings each worker and waits up to the healthcheck timeout for the answer, on a pipe whose
    worker end it also holds: a worker that ended after the ping (one whose startup failed, a
    fraction of a second after it answered the previous ping) never closed the pipe, and the
    supervisor waited the whole 30 s before seeing that it had exited. Once a worker is started
    its end of the pipe is the worker's alone, so its exit closes it and the waiting ping ends at
    once; a worker that is alive but does not answer is still given the whole timeout."""

    def init_processes(self) -> None:
        super().init_processes()
        self._let_go_of_worker_ends()

    def keep_subprocess_alive(self) -> None:
        super().keep_subprocess_alive()
        self._let_go_of_worker_ends()  # of the workers started in place of those that died

    def _let_go_of_worker_ends(self) -> None:
        for process in self.processes:
            if process.process.pid is not None:  # started: the worker holds its own copy
                process.child_conn.close()


def _run_workers(
    url: str,
    grants: Tokens,
    *,
    workers: int,
    host: str,
    port: int,
    log_level: str,
    public_url: str | None,
    access: _Access,
    audit: bool = True,
) -> None:
    Store.open(url).close()  # one error for a bad store, and one migration (rule 4)
    gate = Gate(access.limits, _names(access, public_url, host))
    config = _config(
        _Worker(url, grants, public_url, access, gate, audit),
        host,
        port,
        log_level,
        gate,
        factory=True,
        interface="asgi3",
        lifespan="on",
        workers=workers,
        # A worker answers the supervisor's pings once it has imported everything, which takes
        # seconds on a busy machine; uvicorn's 5 s would kill and replace it while it starts.
        timeout_worker_healthcheck=30,
    )
    handlers = {sig: signal.getsignal(sig) for sig in SIGNALS}
    try:
        supervisor = _Supervisor(config, sockets=[config.bind_socket()])
        supervisor.run()
    finally:  # the supervisor's handlers only queue a signal for its loop, which has ended
        for sig, handler in handlers.items():
            if handler is not None:  # None: set outside Python, nothing to put back
                signal.signal(sig, handler)
    if any(process.exitcode == STARTUP_FAILURE for process in supervisor.processes):
        raise Unavailable(
            "storage_unavailable",
            "a worker process could not start, so the server stopped (its log above says why)",
        )


def _check_address(host: str, port: int) -> None:
    """Bind `host`:`port` as uvicorn will (rule 5), and let go at once."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family=family) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            in_use = error.errno == errno.EADDRINUSE
            raise BadRequest(
                "invalid_request",
                f"cannot listen on {host}:{port}: {error.strerror or error}",
                param="port" if in_use else "host",
            ) from None


def run(
    url: str,
    tokens_path: str | os.PathLike[str] | None,
    *,
    host: str = "127.0.0.1",
    port: int = 8787,
    log_level: str = "info",
    workers: int = 1,
    public_url: str | None = None,
    oauth: OAuth | None = None,
    limits: Limits | None = None,
    allow_origins: Sequence[str] = (),
    allow_hosts: Sequence[str] = (),
    audit: bool = True,
) -> None:
    """`serve` on a loop of uvicorn's choosing, in `workers` processes (rule 4), naming itself
    by `public_url` (rule 6), to the holders of the tokens of `tokens_path` and of `oauth`'s
    authorization server (rule 7), behind the door (rule 9); returns when the server stops
    (Ctrl-C is a normal stop, not an error)."""
    tokens_file = None if tokens_path is None else TokensFile(tokens_path)  # rule 1
    if public_url is not None:
        check_public_url(public_url)
    access = _Access.checked(limits, allow_origins, allow_hosts)
    named = _public_url(public_url, host, port)
    tokens = resolver_for(tokens_file, oauth, named)
    _check_address(host, port)
    if workers > 1:
        _run_workers(
            url,
            tokens,
            workers=workers,
            host=host,
            port=port,
            log_level=log_level,
            public_url=named,
            access=access,
            audit=audit,
        )
        return
    keep_heap()  # this process serves (pdpp_store.door._heap)
    try:
        with asyncio.Runner(loop_factory=door_loop) as runner:
            runner.run(
                serve(
                    url,
                    tokens,
                    host=host,
                    port=port,
                    log_level=log_level,
                    public_url=public_url,
                    limits=access.limits,
                    allow_origins=access.origins,
                    allow_hosts=access.hosts,
                    audit=audit,
                )
            )
    except KeyboardInterrupt:  # uvicorn stopped gracefully, then handed Ctrl-C back
        pass
