"""Metadata records: every type survives the log codec, and the one registry also decodes the storage records."""

from __future__ import annotations

import struct
import uuid

import pytest

from metadata.cluster_records import (
    CLUSTER_RECORD_TYPES,
    AccessControlEntryRecord,
    BrokerRegistrationChangeRecord,
    ClientQuotaRecord,
    ConfigRecord,
    DelegationTokenRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveAccessControlEntryRecord,
    RemoveDelegationTokenRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    UserScramCredentialRecord,
    WALFailoverDoneRecord,
    WALFailoverRecord,
)
from settings.config_resources import RESOURCE_TOPIC
from settings.endpoint import Endpoint
from storage.metadata.api import StreamState
from storage.metadata.record_codec import (
    RECORD_TYPES as ALL_RECORD_TYPES,
)
from storage.metadata.record_codec import (
    MetadataRecord,
    RecordDecodeError,
    decode_record,
    encode_record,
)
from storage.metadata.stream_records import STREAM_RECORD_TYPES, KVRecord, StreamRecord

TOPIC_ID = str(uuid.uuid4())

SAMPLES: list[MetadataRecord] = [
    TopicRecord("orders", TOPIC_ID),
    PartitionRecord(TOPIC_ID, 3, (1, 2, 3), (1, 2), 1, 7, 9),
    PartitionChangeRecord(TOPIC_ID, 3, leader=2, leader_epoch=8, isr=(2,)),
    PartitionChangeRecord(TOPIC_ID, 0),
    RemoveTopicRecord(TOPIC_ID),
    ConfigRecord(RESOURCE_TOPIC, "orders", "retention.ms", "1000"),
    ConfigRecord(RESOURCE_TOPIC, "orders", "retention.ms", None),
    RegisterBrokerRecord(
        1,
        1700000000000,
        (Endpoint("PLAINTEXT", "127.0.0.1", 9092), Endpoint("SSL", "::1", 9093, "SSL")),
        rack="rack-a",
        fenced=False,
    ),
    RegisterBrokerRecord(2, 5, ()),
    UnregisterBrokerRecord(1, 5),
    FenceBrokerRecord(1, 5),
    UnfenceBrokerRecord(1, 5),
    BrokerRegistrationChangeRecord(1, 5, True),
    FeatureLevelRecord("transaction.version", 2),
    WALFailoverRecord(1, 1700000000000, 2, 1700000000500, 1),
    WALFailoverRecord(1, 1700000000000, -1, -1, 0),
    WALFailoverDoneRecord(1, 1700000000000),
    ProducerIdsRecord(2, 1700000000500, 3000),
    UserScramCredentialRecord("alice", 2, b"salt", b"\x00stored", b"server\xff", 8192),
    RemoveUserScramCredentialRecord("alice", 2),
    DelegationTokenRecord("User:alice", "User:admin", ("User:bob",), 1, 3, 2, "token-id"),
    RemoveDelegationTokenRecord("token-id"),
    AccessControlEntryRecord(str(uuid.uuid4()), 2, "orders-", 4, "User:alice", "*", 3, 3),
    RemoveAccessControlEntryRecord(str(uuid.uuid4())),
    ClientQuotaRecord((("client-id", None), ("user", "alice")), "producer_byte_rate", 1024.0),
    ClientQuotaRecord((("user", None),), "request_percentage", 0.0, remove=True),
]


def test_every_cluster_record_type_has_a_sample() -> None:
    assert {type(r) for r in SAMPLES} == set(CLUSTER_RECORD_TYPES)


@pytest.mark.parametrize("record", SAMPLES, ids=lambda r: type(r).__name__)
def test_round_trip(record: MetadataRecord) -> None:
    decoded = decode_record(encode_record(record))
    assert decoded == record
    assert type(decoded) is type(record)


def test_type_ids_are_kafkas_and_do_not_collide_with_storage() -> None:
    assert TopicRecord.TYPE == 2 and PartitionRecord.TYPE == 3 and PartitionChangeRecord.TYPE == 5
    assert RegisterBrokerRecord.TYPE == 0 and RemoveTopicRecord.TYPE == 9
    assert UserScramCredentialRecord.TYPE == 11 and RemoveUserScramCredentialRecord.TYPE == 12
    for cls in (*CLUSTER_RECORD_TYPES, *STREAM_RECORD_TYPES):
        assert ALL_RECORD_TYPES[cls.TYPE] is cls


def test_storage_records_decode_through_the_same_registry() -> None:
    stream = StreamRecord(42, 3, 1, 100, StreamState.OPENED, (("topic", "orders"),))
    kv = KVRecord("ns/topic/0", b"\x00\x01")
    assert decode_record(encode_record(stream)) == stream
    assert decode_record(encode_record(kv)) == kv


def test_unknown_type_is_a_clear_error() -> None:
    with pytest.raises(RecordDecodeError, match="unknown metadata record type 4242"):
        decode_record(struct.pack(">HH", 4242, 0) + b"[]")


def test_newer_version_is_refused() -> None:
    data = bytearray(encode_record(TopicRecord("t", TOPIC_ID)))
    data[2:4] = struct.pack(">H", TopicRecord.VERSION + 1)
    with pytest.raises(RecordDecodeError, match="TopicRecord"):
        decode_record(bytes(data))


def test_malformed_body_names_the_record() -> None:
    data = struct.pack(">HH", PartitionRecord.TYPE, 0) + b'["not-enough"]'
    with pytest.raises(RecordDecodeError, match="PartitionRecord"):
        decode_record(data)
