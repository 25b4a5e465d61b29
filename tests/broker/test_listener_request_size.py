"""``listener.name.<listener>.socket.request.max.bytes``: each listener its own bound on a request's size.

A node with a listener for clients it does not trust bounds that listener's requests far below the node's
``socket.request.max.bytes``: a Produce too large for it closes the connection it came on (as a frame over
``socket.request.max.bytes`` does), while the same Produce on the other listener is served. A bad value, or one
naming a listener the node does not have, stops the node naming the key.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
from kio.schema.errors import ErrorCode

from settings.server import ServerConfig
from storage.config import ConfigError
from testkit.node_process import BrokerProcess, WireClient
from testkit.waiting import eventually
from tests.broker.kafka_clients import produce_request, topic_name
from tests.topics import create_topic
from wire.record_batch import Record, build_batch

SMALL_BOUND = 16 * 1024
LISTENERS = {
    "listeners": "PLAINTEXT://127.0.0.1:0,PUBLIC://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
    "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,PUBLIC:PLAINTEXT",
}


def _produce(topic: str, value: bytes) -> object:
    batch = build_batch([Record(key=None, value=value, headers=(), timestamp=None)])
    return produce_request(topic, 0, batch)


def test_a_request_over_one_listeners_bound_is_refused_there_and_served_on_the_other(
    broker_factory: Callable[..., BrokerProcess], wire: Callable[[int], WireClient]
) -> None:
    broker = broker_factory(LISTENERS | {"listener.name.public.socket.request.max.bytes": str(SMALL_BOUND)})
    topic = topic_name("listener-bound")
    create_topic(broker.bootstrap, topic)
    public, internal = broker.listener_ports["PUBLIC"], broker.listener_ports["PLAINTEXT"]

    small = wire(public).request(_produce(topic, b"small enough"))  # the public listener serves what fits
    assert small.responses[0].partition_responses[0].error_code == ErrorCode.none

    big = _produce(topic, os.urandom(4 * SMALL_BOUND))
    refused = wire(public)
    refused.send(big)
    assert refused.is_closed_by_peer()
    served = wire(internal).request(big).responses[0].partition_responses[0]
    assert served.error_code == ErrorCode.none and served.base_offset == 1
    eventually(
        lambda: f", {SMALL_BOUND}] (listener.name.public.socket.request.max.bytes)" in broker.log_text(),
        timeout=5,
        what="the broker to log the listener's bound it closed the connection for",
    )


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ({"listener.name.public.socket.request.max.bytes": "0"}, "listener.name.public.socket.request.max.bytes"),
        ({"listener.name.pubilc.socket.request.max.bytes": "1024"}, "PUBILC is not one of the listeners"),
    ],
)
def test_a_bad_listener_bound_stops_the_node_naming_the_key(override: dict[str, str], fragment: str) -> None:
    overrides = [
        f"{k}={v}" for k, v in (LISTENERS | {"controller.quorum.voters": "0@127.0.0.1:9093"} | override).items()
    ]
    with pytest.raises(ConfigError, match=fragment):
        ServerConfig.load(None, overrides)


def test_the_node_wide_bound_applies_where_no_listener_overrides_it() -> None:
    overrides = {"socket.request.max.bytes": "5000", "listener.name.public.socket.request.max.bytes": "1000"}
    config = ServerConfig.load(None, [f"{k}={v}" for k, v in (LISTENERS | overrides).items()])
    assert config.socket_request_max_bytes_of("PUBLIC") == 1000
    assert config.socket_request_max_bytes_of("PLAINTEXT") == 5000
    assert config.socket_request_max_bytes_of("CONTROLLER") == 5000
    assert config.socket_request_max_bytes_key_of("PUBLIC") == "listener.name.public.socket.request.max.bytes"
    assert config.socket_request_max_bytes_key_of("PLAINTEXT") == "socket.request.max.bytes"
