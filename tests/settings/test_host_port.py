"""``settings.host_port``: the one ``host:port`` parser of the voters, the bootstrap servers and the tools."""

from __future__ import annotations

import pytest

from settings.host_port import split_host_port


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("localhost:9092", ("localhost", 9092)),
        (" broker-1.example:0 ", ("broker-1.example", 0)),
        ("[::1]:9093", ("::1", 9093)),
        ("[fe80::1]:65535", ("fe80::1", 65535)),
    ],
)
def test_addresses_split(text: str, expected: tuple[str, int]) -> None:
    assert split_host_port(text) == expected


#: Full-width digits are digits to str.isdigit, not to a port.
FULL_WIDTH_90 = "\uff19\uff10"


@pytest.mark.parametrize(
    "text",
    ["", "localhost", "localhost:", ":9092", "[]:9092", "localhost:65536", "localhost:-1", f"localhost:{FULL_WIDTH_90}",
     "localhost:9o92", "localhost:+80"],
)
def test_what_is_not_an_address_is_none(text: str) -> None:
    assert split_host_port(text) is None
