"""A broker of a quorum asks the active controller for delegation tokens (ChangeDelegationToken over the CONTROLLER
listener, carrying the principals the broker authenticated), and sees the new token in its own image as soon as
the answer comes: a client may log in with it at once. Two voters and a broker's controller client run in this
process."""

from __future__ import annotations

from pathlib import Path

from kio.schema.errors import ErrorCode

from metadata.delegation_tokens import CREATE, RENEW, TokenRequest
from metadata.remote.client import RemoteControllerClient
from node.controller_handle import start_quorum_client
from settings.endpoint import Endpoint
from tests.quorum_fixtures import active_voter, broker_config, quorum_configs, running_voters


async def test_a_broker_of_a_quorum_creates_and_renews_a_token(tmp_path: Path) -> None:
    configs = quorum_configs(tmp_path, 2, extra=lambda _: {"delegation.token.secret.key": "quorum-secret"})
    client: RemoteControllerClient | None = None
    async with running_voters(configs) as started:
        try:
            active = await active_voter(started)
            client = await start_quorum_client(broker_config(tmp_path, configs), catch_up_timeout_s=60)
            await client.register_broker(5, [Endpoint("PLAINTEXT", "127.0.0.1", 9092)], None)
            created = await client.change_delegation_token(
                TokenRequest(CREATE, "User:admin", owner="User:alice", renewers=("User:bob",)))
            token = created.token
            assert created.error is ErrorCode.none and token is not None
            assert (token.owner, token.requester, token.renewers) == ("User:alice", "User:admin", ("User:bob",))
            assert client.image.delegation_tokens[token.token_id] == token  # synced before the answer
            assert active.controller.image.delegation_tokens[token.token_id] == token

            renewed = await client.change_delegation_token(
                TokenRequest(RENEW, "User:bob", token_hmac=created.token_hmac, period_ms=1_000))
            assert renewed.error is ErrorCode.none
            assert client.image.delegation_tokens[token.token_id].expiry_ms == renewed.expiry_ms
            stranger = await client.change_delegation_token(
                TokenRequest(RENEW, "User:carol", token_hmac=created.token_hmac))
            assert stranger.error is ErrorCode.delegation_token_owner_mismatch
        finally:
            if client is not None:
                await client.close()
