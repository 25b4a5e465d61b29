"""The client-quota requests of the quota tests over a raw :class:`WireClient`, in the shape Kafka's
``kafka-configs.sh --entity-type users/clients`` sends them (AlterClientQuotas v1, DescribeClientQuotas v1; neither
confluent-kafka nor kafka-python has a client-quota admin API), and the CreateTopics request the
``controller_mutation_rate`` tests charge.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from testkit.node_process import WireClient
from wire import codec, schema

Entity = list[tuple[str, str | None]]


def alter_quotas(
    client: WireClient, entries: list[tuple[Entity, dict[str, float | None]]], validate_only: bool = False
) -> list[tuple[ErrorCode, str | None]]:
    cls = codec.request_class(49, 1)
    entry_cls = schema.field_entity(cls, "entries")
    request = schema.build(
        cls,
        validate_only=validate_only,
        entries=tuple(
            schema.build(
                entry_cls,
                entity=tuple(schema.build_nested(entry_cls, "entity", entity_type=t, entity_name=n) for t, n in entity),
                ops=tuple(
                    schema.build_nested(entry_cls, "ops", key=k, value=0.0 if v is None else v, remove=v is None)
                    for k, v in ops.items()
                ),
            )
            for entity, ops in entries
        ),
    )
    response = client.request(request)
    return [(ErrorCode(int(e.error_code)), e.error_message) for e in response.entries]


def describe_quotas(client: WireClient, components: list[tuple[str, int, str | None]], strict: bool = False) -> Any:
    cls = codec.request_class(48, 1)
    return client.request(
        schema.build(
            cls,
            strict=strict,
            components=tuple(
                schema.build_nested(cls, "components", entity_type=t, match_type=m, match=name)
                for t, m, name in components
            ),
        )
    )


def by_entity(response: Any) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    assert response.error_code == ErrorCode.none, response.error_message
    return {
        tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)): {v.key: v.value for v in entry.values}
        for entry in response.entries
    }


def create_topics_request(version: int, topics: dict[str, int]) -> Any:
    cls = codec.request_class(19, version)
    entries = tuple(
        schema.build_nested(
            cls, "topics", name=name, num_partitions=count, replication_factor=1, assignments=(), configs=()
        )
        for name, count in topics.items()
    )
    return schema.build(cls, topics=entries, timeout=15_000, validate_only=False)
