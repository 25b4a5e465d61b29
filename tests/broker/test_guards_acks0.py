"""``broker.handlers.guards.split`` on a Produce with acks=0 some of whose topics are refused: there is no response
to carry TOPIC_AUTHORIZATION_FAILED, so, as Kafka does, the allowed topics are appended and the connection is
closed (the producer notices and refreshes), never a silent drop."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import pytest
from kio.schema.errors import ErrorCode

from broker.handlers.context import RequestContext
from broker.handlers.guards import split
from wire.dispatch import ConnectionClosing


@dataclass(frozen=True)
class _Topic:
    name: str


@dataclass(frozen=True)
class _Produce:
    acks: int
    topic_data: tuple[_Topic, ...]


class _Context:
    def describe(self) -> str:
        return "client 'probe' at 127.0.0.1"


@pytest.mark.parametrize("allowed", [("open",), ()])
async def test_an_acks0_produce_with_a_refused_topic_appends_the_rest_and_closes(allowed: tuple[str, ...]) -> None:
    handled: list[tuple[str, ...]] = []

    async def handler(ctx: RequestContext, request: Any) -> None:
        handled.append(tuple(t.name for t in request.topic_data))

    request = _Produce(0, (*(_Topic(n) for n in allowed), _Topic("secret")))
    with pytest.raises(ConnectionClosing, match="TOPIC_AUTHORIZATION_FAILED"):
        await split(
            cast(RequestContext, _Context()), request, handler, ("topic_data", "responses"),
            denial=lambda t: ErrorCode.topic_authorization_failed if t.name == "secret" else None,
            refused=lambda *_: None,
        )
    assert handled == ([allowed] if allowed else [])
