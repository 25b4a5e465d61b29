"""Where the controllers are, asked of the brokers: how a client that knows only the bootstrap servers reaches
the quorum (the metadata shell's ``--bootstrap``, Spark's direct reads).

A broker answers DescribeQuorum v2 with the voters' CONTROLLER listeners (forwarded to the Raft leader in a
cluster; an embedded single node names its own listener).
"""

from __future__ import annotations

from metadata.rpc.connection import ConnectionClosedError, ControllerConnection
from metadata.rpc.kafka_apis import DESCRIBE_QUORUM, METADATA_PARTITION, METADATA_TOPIC
from wire import codec, schema
from wire.sasl.client import SaslCredentials
from wire.tls import ClientTls


class QuorumDiscoveryError(Exception):
    """No broker named the controllers; the message names each broker asked and why it did not."""


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
        cls = codec.request_class(DESCRIBE_QUORUM, 2)
        topic = schema.build_nested(
            cls, "topics", topic_name=METADATA_TOPIC,
            partitions=(schema.build_nested(schema.field_entity(cls, "topics"), "partitions",
                                           partition_index=METADATA_PARTITION),),
        )
        connection = ControllerConnection(host, port, client_id=client_id, ssl_context=tls, sasl=sasl)
        try:
            await connection.connect(timeout=timeout)
            response = await connection.request(schema.build(cls, topics=(topic,)), timeout=timeout)
        except (OSError, TimeoutError, ConnectionClosedError) as exc:
            problems.append(unanswered(host, port, exc, tls))
            continue
        finally:
            await connection.close()
        voters: dict[int, tuple[str, int]] = {}
        for node in response.nodes:
            for listener in node.listeners:
                voters.setdefault(int(node.node_id), (listener.host, int(listener.port)))
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
