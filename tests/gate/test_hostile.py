"""Hostile input at every public entry point: a typed 4xx, never a crash, never the database
blamed (issue 10, item 2).

One property per database drives every public method of `Store` and `AsyncStore` (and the grant
constructors, and `open` with odd URLs and options) with arguments drawn from a mix of valid
values and hostile ones: wrong types, NaN, huge integers, lone surrogates, NUL, bytes, sets,
deeply nested JSON. Every call must either succeed or raise a `StoreError` whose status is a
4xx: an exception of any other type, or a `storage_*` (503) answer, is a failure. Failures are
collected (not raised at the first) so one run tells the whole story; the test fails if there is
any, listing them.

URLs that are well formed but name a server or database that is not there are left out: those
are `storage_unavailable` (the store cannot tell a typo from an outage), shown elsewhere.

The number of calls is bounded (`EXAMPLES` per database) so the suite stays quick on two cores.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _data import MAILBOX, body, manifest, owner, setup_mailbox
from _fronts import BlockingAsyncStore
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pdpp_store import Grant, RecordRef, Store, StoreError
from pdpp_store._core.grants import StreamGrant, TimeConstraint

EXAMPLES = 400
"""Examples per database, each one call on one front: 800 calls in all, a few seconds."""

SURROGATE = "\ud800"


class _Deep(list[Any]):
    """JSON nested 3,000 deep, with a short repr (printing it would recurse as deeply)."""

    def __repr__(self) -> str:
        return "<list nested 3000 deep>"


DEEP = _Deep()
_inner: list[Any] = DEEP
for _ in range(3000):
    _inner.append([])
    _inner = _inner[0]

SPECIAL_TEXT = [
    "",
    " ",
    ".",
    "..",
    "a/b",
    "a\\b",
    SURROGATE,
    "a\x00b",
    "\x00",
    "x" * 3000,
    "é" * 1500,
    "\U0001f600",
    "message_bodies",
    "body_text",
    "id",
    MAILBOX,
    "cin_missing",
    "gmail",
    "e1",
    "blob_sha256_" + "0" * 64,
    "pdpp://record/",
    "pdpp://record/W10",
    "pdpp://field-window/",
    "pdpp://field-window/" + "A" * 40,
    f"{MAILBOX}/message_bodies:e1",
    f"{MAILBOX}/message_bodies:{SURROGATE}",
    "message_bodies:e1",
    "text/plain",
    "NaN",
]

junk: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([2**31, 2**63, 2**64, -(2**63) - 1, 10**100, -1, 0]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, 1e308]),
    st.sampled_from(SPECIAL_TEXT),
    st.text(max_size=12),
    st.text(alphabet=st.characters(categories=["Cs", "Cc", "Ll"]), max_size=6),
    st.binary(max_size=12),
    st.sets(st.integers(), max_size=3),
    st.frozensets(st.text(max_size=3), max_size=3),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=3),
    st.just(DEEP),
    st.builds(object),
)


def mixed(*valid: Any) -> st.SearchStrategy[Any]:
    """Mostly (three times in four) one of `valid`, else junk, so that most calls get past the
    first check and a hostile value meets the deeper ones."""
    if not valid:
        return junk
    return _weighted(st.sampled_from(valid), junk)


def _weighted(
    usual: st.SearchStrategy[Any], rare: st.SearchStrategy[Any]
) -> st.SearchStrategy[Any]:
    """`usual` three times in four. (Not `one_of(usual, usual, usual, rare)`: `one_of` flattens
    the branches of a nested `one_of`, so the many kinds of junk would outvote the rest.)"""
    return st.integers(0, 3).flatmap(lambda pick: rare if pick == 0 else usual)


VALID_GRANTS = [
    owner(),
    Grant("g-narrow", (StreamGrant("message_bodies", (MAILBOX,), frozenset({"body_text"})),)),
    Grant(
        "g-timed",
        (
            StreamGrant(
                "message_bodies",
                None,
                None,
                TimeConstraint("message_received_at", "2026-01-01", None),
                frozenset({"e1", "e2"}),
            ),
        ),
    ),
    Grant.owner(MAILBOX, "message_bodies", "attachments"),
    {"grant_id": "g-dict", "streams": [{"name": "message_bodies"}]},
]

grants = _weighted(
    st.sampled_from(VALID_GRANTS),
    st.one_of(
        junk,
        st.fixed_dictionaries(
            {"grant_id": mixed("g"), "streams": mixed([{"name": "message_bodies"}])},
            optional={"expires_at": junk, "status": junk},
        ),
    ),
)
records_ = mixed(f"{MAILBOX}/message_bodies:e1", RecordRef(MAILBOX, "message_bodies", "e2"))
fields_ = mixed("body_text", "id", "message_received_at")
names = mixed(MAILBOX, "message_bodies", "e1", "gmail")
selector_keys = ["offset_chars", "limit_chars", "q", "before_chars", "after_chars", "cursor"]
selectors = st.dictionaries(
    st.sampled_from(selector_keys),
    mixed(0, 1, 10, 4096, 20000, "hello", "HELLO", "ab"),
    max_size=3,
)
record_values = st.fixed_dictionaries(
    {"id": mixed("e1", "e9", 5), "body_text": mixed("hello world")},
    optional={"message_received_at": junk, "x": junk},
)
record_lists = st.one_of(
    st.lists(st.one_of(record_values, junk), max_size=4),
    junk,
)


@st.composite
def _mutated_manifest(draw: st.DrawFn) -> Any:
    document = manifest("gmail")
    target = draw(st.sampled_from(["connector_id", "streams", "stream", "pk", "consent"]))
    if target == "connector_id":
        document["connector_id"] = draw(junk)
    elif target == "streams":
        document["streams"] = draw(junk)
    elif target == "stream":
        document["streams"][0]["name"] = draw(junk)
    elif target == "pk":
        document["streams"][0]["primary_key"] = draw(st.one_of(junk, st.lists(junk, max_size=2)))
    else:
        document["streams"][0]["consent_time_field"] = draw(junk)
    return document


def manifests() -> st.SearchStrategy[Any]:
    return st.one_of(st.just(manifest("gmail")), junk, _mutated_manifest())


BAD_URLS = [
    "",
    "sqlite://",
    "sqlite:///:memory:",
    "sqlite:///",
    "sqlite:////nonexistent-dir/x/y.db",
    "sqlite:///a\x00b.db",
    f"sqlite:///{SURROGATE}.db",
    "postgresql://127.0.0.1:99999999/x",
    "postgresql://127.0.0.1:-1/x",
    "postgresql://127.0.0.1:abc/x",
    "postgresql://[::1/x",
    "mysql://127.0.0.1/x",
    "foo://",
    "://",
    "http://127.0.0.1/",
    "sqlite+pysqlite:///?mode=ro",
    "postgresql+nosuchdriver://127.0.0.1:70000/x",
    "postgresql://127.0.0.1:0/x",
    "sqlite:///x.db?timeout=abc",
]
urls = st.one_of(
    st.sampled_from(BAD_URLS),
    st.text(max_size=20).filter(lambda text: "://" not in text),
    junk,
)
open_options = st.dictionaries(
    st.sampled_from(["cursor_secret", "previous_cursor_secrets", "batch_size", "migrate"]),
    mixed(b"0123456789abcdef0123", 1, [b"x" * 16], True),
    max_size=2,
)


def calls(
    front_names: list[str],
) -> st.SearchStrategy[tuple[str, str, tuple[Any, ...], dict[str, Any]]]:
    """(front, method, args, kwargs) for every public method."""
    fronts = st.sampled_from(front_names)
    g, r, f = grants, records_, fields_
    methods: dict[str, st.SearchStrategy[tuple[tuple[Any, ...], dict[str, Any]]]] = {
        "register_manifest": st.tuples(st.tuples(manifests()), st.just({})),
        "add_connection": st.tuples(st.tuples(names, mixed("gmail")), st.just({})),
        "upsert_records": st.tuples(
            st.tuples(names, mixed("message_bodies"), record_lists), st.just({})
        ),
        "delete_record": st.tuples(
            st.tuples(mixed(MAILBOX), mixed("message_bodies"), names), st.just({})
        ),
        "put_blob": st.tuples(st.tuples(mixed(b"blob bytes"), mixed("text/plain")), st.just({})),
        "rotate_cursor_key": st.just(((), {})),
        "retire_cursor_keys": st.tuples(st.just(()), st.fixed_dictionaries({"older_than": junk})),
        "read_field_window": st.tuples(
            st.tuples(g, r, f),
            st.one_of(
                selectors,
                st.fixed_dictionaries({"connection_id": names}),
            ),
        ),
        "read_record": st.tuples(
            st.tuples(g, r), st.one_of(st.just({}), st.fixed_dictionaries({"connection_id": names}))
        ),
        "describe_field": st.tuples(
            st.tuples(g, r, f),
            st.one_of(st.just({}), st.fixed_dictionaries({"connection_id": names})),
        ),
        "read_resource": st.tuples(st.tuples(g, mixed("pdpp://record/W10")), st.just({})),
        "search": st.tuples(
            st.tuples(g, mixed("hello", "world", "hello world")),
            st.fixed_dictionaries(
                {},
                optional={
                    "streams": mixed(["message_bodies"], None),
                    "connection_id": names,
                    "limit": mixed(1, 10, 50),
                    "cursor": mixed(None, "A" * 40),
                },
            ),
        ),
        "describe_grant": st.tuples(st.tuples(g), st.just({})),
        "blob_info": st.tuples(st.tuples(g, mixed("blob_sha256_" + "0" * 64)), st.just({})),
        "read_blob_range": st.tuples(
            st.tuples(g, mixed("blob_sha256_" + "0" * 64), mixed(0, 10), mixed(1, 100)),
            st.just({}),
        ),
        "open": st.tuples(st.tuples(urls), open_options),
        "Grant.from_dict": st.tuples(st.tuples(grants), st.just({})),
        "Grant": st.tuples(st.tuples(mixed("g"), mixed(()), junk, junk), st.just({})),
        "StreamGrant": st.tuples(st.tuples(names, junk, junk, junk, junk), st.just({})),
    }
    return st.tuples(fronts, st.sampled_from(sorted(methods))).flatmap(
        lambda pair: methods[pair[1]].map(lambda argv: (pair[0], pair[1], argv[0], argv[1]))
    )


def _describe(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    try:
        text = repr((args, kwargs))
    except RecursionError:
        text = "<unprintable>"
    return text if len(text) < 300 else text[:300] + "..."


@pytest.fixture
def fronts(db_url: str, tmp_path: Path) -> Iterator[dict[str, Any]]:
    sync = Store.open(db_url)
    asynchronous = BlockingAsyncStore.open(db_url)
    try:
        setup_mailbox(sync)
        sync.upsert_records(MAILBOX, "message_bodies", [body("e1", "hello world"), body("e2", "x")])
        sync.put_blob(b"blob bytes", "text/plain")
        yield {"sync": sync, "async": asynchronous, "tmp": tmp_path}
    finally:
        asynchronous.close()
        sync.close()


def _call(
    fronts: dict[str, Any], front: str, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Callable[[], Any]:
    if method == "Grant.from_dict":
        return lambda: Grant.from_dict(*args)
    if method == "Grant":
        return lambda: Grant(*args)
    if method == "StreamGrant":
        return lambda: StreamGrant(*args)
    if method == "open":
        url = args[0]
        if front == "sync":

            def open_sync() -> None:
                Store.open(url, **kwargs).close()

            return open_sync

        def open_async() -> None:
            BlockingAsyncStore.open(url, **kwargs).close()

        return open_async
    target = getattr(fronts[front], method)
    return lambda: target(*args, **kwargs)


def test_hostile_input_gets_typed_client_errors(fronts: dict[str, Any], db_url: str) -> None:
    counts: Counter[str] = Counter()
    failures: list[str] = []

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(calls(["sync", "async"]))
    def run(call: tuple[str, str, tuple[Any, ...], dict[str, Any]]) -> None:
        front, method, args, kwargs = call
        counts["calls"] += 1
        try:
            _call(fronts, front, method, args, kwargs)()
        except StoreError as error:
            counts[f"{error.http_status}"] += 1
            counts[f"{method}:{error.code}"] += 1
            if error.http_status >= 500 or error.code.startswith("storage_"):
                failures.append(f"{front}.{method}{_describe(args, kwargs)} -> {error!r}")
        except Exception as error:  # the point of the test: nothing else may escape
            counts["untyped"] += 1
            failures.append(
                f"{front}.{method}{_describe(args, kwargs)} -> {type(error).__name__}: {error}"
            )
        else:
            counts["ok"] += 1

    run()
    print(f"hostile calls on {db_url.split(':', maxsplit=1)[0]}: {dict(counts)}")
    assert counts["calls"] >= EXAMPLES
    assert not failures, f"{len(failures)} of {counts['calls']} calls:\n" + "\n".join(failures[:40])
