"""The broker's controller client on its own: clear, bounded failures when the quorum cannot be reached or the
configuration cannot work (the cluster tests cover it against a real quorum)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from controller.metadata_replica import MetadataReplica
from metadata.remote.channel import ActiveControllerChannel, ControllerUnavailableError
from metadata.rpc import stream_rpcs as m
from settings.server import ServerConfig
from storage.config import ConfigError
from storage.metadata.api import NodeIdentity
from wire.ports import free_ports


async def test_no_reachable_controller_fails_within_the_budget_naming_every_voter() -> None:
    ports = free_ports(2)  # where nothing listens
    channel = ActiveControllerChannel({0: ("127.0.0.1", ports[0]), 1: ("127.0.0.1", ports[1])},
                                      client_id="test", request_timeout_s=0.5, retry_budget_s=1.0)
    started = time.monotonic()
    with pytest.raises(ControllerUnavailableError) as caught:
        await channel.stream(m.GetKV(NodeIdentity(5, 1), "k"), "read KV k")
    elapsed = time.monotonic() - started
    await channel.close()
    assert elapsed < 3.0, f"gave up after {elapsed:.1f} s, budget 1 s"
    text = str(caught.value)
    assert text.startswith("read KV k: no active controller answered")
    assert f"127.0.0.1:{ports[0]}" in text and f"127.0.0.1:{ports[1]}" in text


def test_a_broker_cannot_share_a_voters_node_id(tmp_path: Path) -> None:
    config = ServerConfig.from_properties({
        "process.roles": "broker", "node.id": "1", "controller.quorum.voters": "0@127.0.0.1:1,1@127.0.0.1:2",
        "listeners": "PLAINTEXT://127.0.0.1:0", "controller.listener.names": "CONTROLLER",
        "log.dirs": str(tmp_path), "s3.data.buckets": f"0@file://{tmp_path}/objects",
    })
    with pytest.raises(ConfigError, match=r"node\.id 1 is one of the controller\.quorum\.voters"):
        MetadataReplica(config, "AAAAAAAAAAAAAAAAAAAAAA")
