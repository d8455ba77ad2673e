"""`serve --public-url`: what is accepted as the server's public base URL (issue 26, item 5)."""

from __future__ import annotations

import pytest

from pdpp_store import StoreError
from pdpp_store.http import check_public_url, public_base


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ("https://pdpp.example.org", "https://pdpp.example.org"),
        ("https://pdpp.example.org/", "https://pdpp.example.org"),
        ("http://127.0.0.1:8787", "http://127.0.0.1:8787"),
        ("https://[::1]:8443", "https://[::1]:8443"),
        ("https://xn--pdp-fla.example", "https://xn--pdp-fla.example"),
    ],
)
def test_an_origin_is_a_public_url(given: str, kept: str) -> None:
    assert check_public_url(given) == kept


@pytest.mark.parametrize(
    "given",
    [
        "",
        None,
        8787,
        "pdpp.example.org",
        "ftp://pdpp.example.org",
        "https://",
        "https://user:secret@pdpp.example.org",
        "https://pdpp.example.org/prefix",
        "https://pdpp.example.org?x=1",
        "https://pdpp.example.org?",
        "https://pdpp.example.org#top",
        "https://pdpp.example.org:99999",
        "https://pdpp.example.org:0",
        "https://pdpp.example.org:http",
        "https://pdpp example.org",
        'https://pdpp.example.org"',
        "https://pdpp.example.org\\",
        "https://pdpp.éxample.org",
        "https://pdpp.example.org\x00",
        "https://[::1",
        "https://" + "a" * 3000,
    ],
)
def test_anything_else_is_invalid_request_naming_public_url(given: object) -> None:
    with pytest.raises(StoreError) as caught:
        check_public_url(given)
    assert (caught.value.code, caught.value.param) == ("invalid_request", "public_url")


def test_without_a_public_url_the_base_is_the_address_reached_not_the_host() -> None:
    headers = [(b"host", b"attacker.example")]
    scope = {"scheme": "http", "server": ("127.0.0.1", 8787), "headers": headers}
    assert public_base(scope) == "http://127.0.0.1:8787"
    assert public_base({**scope, "server": ("::1", 443), "scheme": "https"}) == "https://[::1]"
    assert public_base({**scope, "server": None}) == "http://localhost"
    assert public_base({**scope, "pdpp_store.public_url": "https://x.example"}) == (
        "https://x.example"
    )
