"""Where the controllers are, asked of the brokers or of the controllers themselves: how a client that knows only
the bootstrap servers reaches the quorum (the metadata shell's ``--bootstrap``, Spark's direct reads), and how a
broker-only node configured as Kafka 4 ships it (``controller.quorum.bootstrap.servers``, no voter listed) learns
the voters as it starts.

A broker answers DescribeQuorum v2 with the voters' CONTROLLER listeners (forwarded to the Raft leader in a
cluster; an embedded single node names its own listener); a controller answers it on its CONTROLLER listener.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

from metadata.rpc.connection import ConnectionClosedError, ControllerConnection
from metadata.rpc.raft_codec import describe_quorum_request, described_voters
from settings.quorum_voters import BOOTSTRAP_KEY, QuorumVoter, parse_bootstrap_servers
from settings.server import ServerConfig
from wire.sasl.client import SaslCredentials
from wire.tls import ClientTls

logger = logging.getLogger(__name__)

#: Between rounds of asking a broker-only node's bootstrap servers, while its controllers start.
_RETRY_BACKOFF_S = 0.5


class QuorumDiscoveryError(Exception):
    """No broker named the controllers; the message names each broker asked and why it did not."""


async def with_bootstrap_voters(config: ServerConfig, timeout_s: float) -> ServerConfig:
    """``config`` with the voters its ``controller.quorum.bootstrap.servers`` name, for a broker-only node that
    lists none (Kafka 4's shipped ``broker.properties``); ``config`` itself when it lists them. Asks until one
    answers or ``timeout_s`` passed: a broker may start before its controllers, as Kafka's waits for them. Raises
    QuorumDiscoveryError naming the key and every server's last problem."""
    if config.voters:
        return config
    servers = list(parse_bootstrap_servers(config.value(BOOTSTRAP_KEY)))
    if not servers:
        return config  # nothing to ask: ActiveControllerChannel says a broker needs a controller
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    attempt_s = int(config.value("controller.quorum.request.timeout.ms")) / 1000
    while True:
        try:
            found = await quorum_voters(
                servers, min(attempt_s, max(0.1, deadline - loop.time())), f"broker-{config.node_id}",
                tls=config.controller_client_tls(), sasl=config.controller_client_sasl(),
            )
        except QuorumDiscoveryError as exc:
            if loop.time() + _RETRY_BACKOFF_S >= deadline:
                raise QuorumDiscoveryError(f"{BOOTSTRAP_KEY}: broker {config.node_id} found no controller quorum "
                                           f"in {timeout_s:.0f} s: {exc}") from None
            logger.debug("broker %d: %s; asking again", config.node_id, exc)
            await asyncio.sleep(_RETRY_BACKOFF_S)
            continue
        voters = tuple(QuorumVoter(node_id, host, port) for node_id, (host, port) in sorted(found.items()))
        logger.info("broker %d found the controller quorum through %s: voters %s", config.node_id, BOOTSTRAP_KEY,
                    ",".join(f"{v.node_id}@{v.host}:{v.port}" for v in voters))
        return dataclasses.replace(config, voters=voters)


async def quorum_voters(
    addresses: list[tuple[str, int]],
    timeout: float,
    client_id: str,
    *,
    tls: ClientTls | None = None,
    sasl: SaslCredentials | None = None,
) -> dict[int, tuple[str, int]]:
    """The controller voters (id → listener address) that the first broker in ``addresses`` to answer names in its
    DescribeQuorum answer (v2, forwarded to the Raft leader): how a client that knows only the bootstrap servers
    reaches the quorum. ``tls``/``sasl``: how the brokers' listener is reached."""
    problems = []
    for host, port in addresses:
        connection = ControllerConnection(host, port, client_id=client_id, ssl_context=tls, sasl=sasl)
        try:
            await connection.connect(timeout=timeout)
            response = await connection.request(describe_quorum_request(), timeout=timeout)
        except (OSError, TimeoutError, ConnectionClosedError) as exc:
            problems.append(unanswered(host, port, exc, tls))
            continue
        finally:
            await connection.close()
        voters = described_voters(response)
        if not voters:
            problems.append(f"{host}:{port}: DescribeQuorum named no controller (error {int(response.error_code)})")
            continue
        return voters
    raise QuorumDiscoveryError("no broker told where the controllers are: " + "; ".join(problems))


def unanswered(host: str, port: int, exc: BaseException, tls: ClientTls | None) -> str:
    """Why ``host:port`` gave no answer, for the one-line error. A listener that requires a client certificate
    ends a TLS 1.3 connection without one only after the handshake, so the client sees no more than a closed
    connection: the likely cause is named with it. So does a listener with an authorizer to a caller whose principal
    (SASL user, certificate, or User:ANONYMOUS) lacks the right: DescribeMetadata, the whole metadata, is served to
    super users only."""
    text = f"{host}:{port}: {type(exc).__name__} {exc}".rstrip()
    if tls is not None and isinstance(exc, ConnectionClosedError):
        text += " (closed unanswered over TLS, as a listener with ssl.client.auth=required does without a client "
        text += "certificate: ssl.keystore.location, and one with an authorizer when the certificate's principal is "
        text += "not a super user: DescribeMetadata is served to super users only)"
    elif isinstance(exc, ConnectionClosedError):
        text += " (closed unanswered, as a listener with an authorizer does when the caller is not a super user: "
        text += "DescribeMetadata is served to super users only)"
    return text
