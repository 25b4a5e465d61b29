"""Kafka's UUIDs as text (a cluster id, a directory id): 16 random bytes in URL-safe base64 without padding, 22
characters, as ``kafka-storage random-uuid`` prints them. A leaf, so that the metadata directory's identity and the
quorum's voter lists check them the same way."""

from __future__ import annotations

import base64
import uuid


def new_kafka_uuid() -> str:
    """A random one that does not start with ``-``, as Kafka's ``Uuid.randomUuid`` never does: one in 64 would, and
    ``fjord storage format -t -x...`` would read it as an option."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def is_kafka_uuid(text: str) -> bool:
    if len(text) != 22:
        return False
    try:
        return len(base64.urlsafe_b64decode(text + "==")) == 16
    except ValueError:
        return False


def parse_kafka_uuid(text: str) -> uuid.UUID:
    """The UUID a Kafka UUID's text names (ValueError for anything else), as the protocol carries it."""
    if not is_kafka_uuid(text):
        raise ValueError(f"{text!r} is not a 22-character base64url UUID")
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))


def kafka_uuid_text(value: uuid.UUID) -> str:
    """Inverse of :func:`parse_kafka_uuid`."""
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")
