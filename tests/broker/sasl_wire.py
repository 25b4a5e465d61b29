"""What the SASL tests against a broker process share (``test_sasl.py``, ``test_sasl_timing.py``): the users'
passwords (each checked never to reach the broker's log), the PLAIN users' JAAS line, the mechanisms served, and
the SASL requests over a raw :class:`WireClient` (SaslHandshake, SaslAuthenticate, and a Metadata request to send
before or after authenticating).
"""

from __future__ import annotations

from typing import Any

from testkit.node_process import WireClient
from wire import codec, schema

PLAIN_PASSWORD = "plain-pass-never-logged"


SCRAM_PASSWORD = "scram-pass-never-logged"


WRONG_PASSWORD = "wrong-pass-never-logged"


JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
    f'password="{PLAIN_PASSWORD}" user_admin="{PLAIN_PASSWORD}" user_alice="{PLAIN_PASSWORD}";'
)


MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def handshake(client: WireClient, mechanism: str, version: int = 1) -> Any:
    return client.request(schema.build(codec.request_class(17, version), mechanism=mechanism))


def authenticate(client: WireClient, token: bytes, version: int = 2) -> Any:
    return client.request(schema.build(codec.request_class(36, version), auth_bytes=token))


def metadata_request() -> Any:
    return schema.build(
        codec.request_class(3, 12),
        topics=None,
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
