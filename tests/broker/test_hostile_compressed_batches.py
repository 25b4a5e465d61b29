"""Compressed record batches that lie, produced over the wire to one real broker: each is refused with the code Kafka
answers it with, nothing is appended (a fetch from the log end sees no records), and the broker keeps serving.

A batch whose codec bit is set is decompressed and every record read on append, as Kafka's LogValidator reads it
(``wire.batch_validation``): stored unread, a batch that does not decompress, or whose records do not parse or are
not as many as its header says, would stop every consumer that fetches it. The same walk reads every record's
timestamp, compressed or not, for the topic's message.timestamp bounds.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from testkit.node_process import BrokerProcess, WireClient, api_versions_request
from tests.broker.kafka_clients import fetch_request, list_offsets_request, produce_request, topic_name
from tests.hostile_batches import gzip_bomb, with_records_section, zstd_bomb
from tests.topics import create_topic
from wire.batch_validation import MAX_DECOMPRESSED_BYTES
from wire.compression import compress
from wire.record_batch import CRC_POS, HEADER_SIZE, Compression, Record, build_batch, compute_crc

CASE_TIMEOUT_S = 10.0
_LAST_OFFSET_DELTA_POS = 23
_RECORDS_COUNT_POS = 57
_HOUR_MS = 3_600_000
CODECS = [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]


def _records(count: int = 3) -> list[Record]:
    return [Record(key=b"k", value=b"value " * 20, headers=(), timestamp=None) for _ in range(count)]


def _resealed(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, CRC_POS, compute_crc(batch))
    return bytes(batch)


def _garbage_after_magic(codec: Compression) -> bytes:
    """The codec's frame start (snappy: the xerial header) kept, the rest of the section replaced by garbage."""
    batch = build_batch(_records(), compression=codec)
    keep = 16 if codec is Compression.SNAPPY else 4
    section = batch[HEADER_SIZE:]
    return with_records_section(batch, section[:keep] + b"\xa5" * (len(section) - keep))


def _count_says(codec: Compression, count: int) -> bytes:
    """Three records under a header whose count and last offset delta agree with each other, not with them."""
    buf = bytearray(build_batch(_records(), compression=codec))
    struct.pack_into(">i", buf, _LAST_OFFSET_DELTA_POS, count - 1)
    struct.pack_into(">i", buf, _RECORDS_COUNT_POS, count)
    return _resealed(buf)


def _bomb(codec: Compression) -> bytes:
    section = zstd_bomb(1 << 32) if codec is Compression.ZSTD else gzip_bomb(2 * MAX_DECOMPRESSED_BYTES)
    return with_records_section(build_batch(_records(1), compression=codec), section)


def _unparsable(codec: Compression) -> bytes:
    """A section that decompresses well, into bytes that are no records (a length prefix past the end)."""
    return with_records_section(build_batch(_records(1), compression=codec), compress(codec, b"\xfe\x01" + bytes(8)))


def _timestamp_mid_batch(codec: Compression) -> bytes:
    """First and max timestamps now; the middle record two hours back (a negative delta) on a topic whose
    message.timestamp.before.max.ms is one hour."""
    now = int(time.time() * 1000)
    stamps = [now, now - 2 * _HOUR_MS, now]
    records = [Record(b"k", b"v", (), ts) for ts in stamps]
    return build_batch(records, compression=codec)


CASES: dict[str, tuple[Callable[[], bytes], ErrorCode]] = {
    **{f"{c.name.lower()}-garbage-after-magic": (lambda c=c: _garbage_after_magic(c), ErrorCode.unknown_server_error)
       for c in CODECS},
    **{f"{c.name.lower()}-count-too-high": (lambda c=c: _count_says(c, 4), ErrorCode.invalid_record) for c in CODECS},
    "lz4-count-too-low": (lambda: _count_says(Compression.LZ4, 2), ErrorCode.invalid_record),
    "zstd-records-do-not-parse": (lambda: _unparsable(Compression.ZSTD), ErrorCode.invalid_record),
    "gzip-records-do-not-parse": (lambda: _unparsable(Compression.GZIP), ErrorCode.invalid_record),
    "zstd-bomb-4GiB": (lambda: _bomb(Compression.ZSTD), ErrorCode.message_too_large),
    "gzip-bomb-200MB": (lambda: _bomb(Compression.GZIP), ErrorCode.message_too_large),
    "lz4-timestamp-mid-batch": (lambda: _timestamp_mid_batch(Compression.LZ4), ErrorCode.invalid_timestamp),
    "zstd-timestamp-mid-batch": (lambda: _timestamp_mid_batch(Compression.ZSTD), ErrorCode.invalid_timestamp),
    # Not compressed, the same: every record's timestamp is read in the walk that counts them.
    "none-timestamp-mid-batch": (lambda: _timestamp_mid_batch(Compression.NONE), ErrorCode.invalid_timestamp),
}


@pytest.fixture(scope="module")
def topic(shared_broker: BrokerProcess) -> str:
    name = topic_name("compressed")
    create_topic(shared_broker.bootstrap, name, config={"message.timestamp.before.max.ms": str(_HOUR_MS)})
    return name


@pytest.fixture(scope="module", autouse=True)
def no_tracebacks(shared_broker: BrokerProcess) -> Iterator[None]:
    """The refusals are answers, not failures: the broker logged no traceback for any of them."""
    yield
    log = shared_broker.log_text()
    assert "Traceback" not in log, log[log.index("Traceback") - 2000 :][:6000]


def _log_end(client: WireClient, topic: str) -> int:
    part = client.request(list_offsets_request(topic, 0, -1)).topics[0].partitions[0]
    assert part.error_code == ErrorCode.none
    return int(part.offset)


def _peak_rss(pid: int) -> int:
    """The process's peak resident set (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_lying_compressed_batch_is_refused_with_kafkas_code_and_nothing_is_appended(
    shared_broker: BrokerProcess, topic: str, case: str
) -> None:
    make, expected = CASES[case]
    peak = _peak_rss(shared_broker.proc.pid)
    with WireClient(shared_broker.port, timeout=CASE_TIMEOUT_S) as client:
        before = _log_end(client, topic)
        part = client.request(produce_request(topic, 0, make())).responses[0].partition_responses[0]
        assert (part.error_code, part.base_offset) == (expected, -1), f"{case}: {part.error_message}"
        assert topic in (part.error_message or "")
        fetched = client.request(fetch_request(topic, 0, before)).responses[0].partitions[0]
        assert fetched.error_code == ErrorCode.none and not fetched.records
        assert _log_end(client, topic) == before
        # The same partition takes a good compressed batch right after, and serves it.
        ok = client.request(produce_request(topic, 0, build_batch(_records(), compression=Compression.LZ4)))
        assert ok.responses[0].partition_responses[0].error_code == ErrorCode.none
        assert _log_end(client, topic) == before + 3
        assert client.request(api_versions_request()).error_code == ErrorCode.none
    # A bomb costs the broker its bound at most, never what it claims (4 GiB, 200 MB): refused at the bound.
    assert _peak_rss(shared_broker.proc.pid) - peak <= MAX_DECOMPRESSED_BYTES + (64 << 20)
