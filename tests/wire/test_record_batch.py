"""RecordBatch codec: our builder and decoder agree with an independent implementation (aiokafka's) for every
codec, and the in-place rewrites keep batches valid."""

from __future__ import annotations

import resource

import pytest
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hostile_batches import gzip_bomb, with_records_section, zstd_bomb
from wire.batch_validation import (
    MAX_DECOMPRESSED_BYTES,
    RecordsTooLargeError,
    UndecompressableBatchError,
    check_batch,
    validate_batch,
)
from wire.compression import CompressionError, DecompressedTooLarge, compress, decompress, decompress_bounded
from wire.record_batch import (
    CRC_POS,
    LOG_APPEND_TIME,
    Compression,
    CorruptBatchError,
    InvalidBatchError,
    Record,
    build_batch,
    compute_crc,
    decode_records,
    iter_batches,
    iter_records,
    parse_header,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)

CODECS = list(Compression)


def _aiokafka_batch(codec: Compression, records: list[Record], producer_id: int = -1, base_sequence: int = -1) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(codec),
        is_transactional=0,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=base_sequence,
        batch_size=1 << 24,
    )
    for i, r in enumerate(records):
        builder.append(i, r.timestamp, r.key, r.value, list(r.headers))
    return bytes(builder.build())


SAMPLE = [
    Record(b"key-0", b"value-0" * 50, (("trace", b"abc"), ("empty", None)), 1_700_000_000_123),
    Record(None, b"no key", (), 1_700_000_000_100),
    Record(b"k2", None, (), 1_700_000_000_999),
]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_decodes_batches_built_by_aiokafka(codec: Compression) -> None:
    batch = _aiokafka_batch(codec, SAMPLE, producer_id=42, base_sequence=7)
    header = validate_batch(batch)
    assert header.compression is codec
    assert header.producer_id == 42 and header.base_sequence == 7 and header.last_sequence == 9
    assert header.max_timestamp == 1_700_000_000_999
    decoded = decode_records(batch)
    assert [(r.key, r.value, tuple(r.headers), r.timestamp, r.offset) for r in decoded] == [
        (s.key, s.value, tuple(s.headers), s.timestamp, i) for i, s in enumerate(SAMPLE)
    ]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_aiokafka_reads_batches_we_build(codec: Compression) -> None:
    batch = build_batch(SAMPLE, base_offset=100, compression=codec, producer_id=5, producer_epoch=1, base_sequence=0)
    theirs = DefaultRecordBatch(batch)
    assert theirs.validate_crc()
    assert theirs.base_offset == 100 and theirs.compression_type == int(codec)
    got = [(r.offset, r.key, r.value, r.timestamp, [(k, v) for k, v in r.headers]) for r in theirs]
    assert got == [(100 + i, s.key, s.value, s.timestamp, list(s.headers)) for i, s in enumerate(SAMPLE)]


def test_rewrites_outside_crc_keep_batch_valid() -> None:
    buf = bytearray(build_batch(SAMPLE))
    set_base_offset(buf, 1234)
    set_partition_leader_epoch(buf, 9)
    header = validate_batch(buf)
    assert header.base_offset == 1234 and header.partition_leader_epoch == 9 and header.last_offset == 1236
    assert [r.offset for r in decode_records(bytes(buf))] == [1234, 1235, 1236]


def test_log_append_time_rewrite_recomputes_crc_and_overrides_record_timestamps() -> None:
    buf = bytearray(build_batch(SAMPLE, compression=Compression.GZIP))
    set_log_append_time(buf, 1_800_000_000_000)
    header = validate_batch(buf)
    assert header.timestamp_type == LOG_APPEND_TIME and header.max_timestamp == 1_800_000_000_000
    assert {r.timestamp for r in decode_records(bytes(buf))} == {1_800_000_000_000}


def test_corruption_is_detected() -> None:
    buf = bytearray(build_batch(SAMPLE))
    buf[-1] ^= 0xFF
    with pytest.raises(CorruptBatchError, match="CRC"):
        validate_batch(buf)


def test_wrong_magic_and_truncation_are_clear_errors() -> None:
    buf = bytearray(build_batch(SAMPLE))
    with pytest.raises(InvalidBatchError, match="remain"):
        list(iter_batches(bytes(buf[:-3])))
    with pytest.raises(InvalidBatchError, match="truncated"):
        parse_header(bytes(buf[:20]))
    buf[16] = 1
    with pytest.raises(InvalidBatchError, match="magic 1"):
        parse_header(bytes(buf))


def test_record_count_must_match_offset_delta() -> None:
    buf = bytearray(build_batch(SAMPLE))
    buf[57:61] = (5).to_bytes(4, "big")
    # the count is inside the CRC: recompute it so the count check itself is exercised
    buf[CRC_POS : CRC_POS + 4] = compute_crc(buf).to_bytes(4, "big")
    with pytest.raises(InvalidBatchError, match="5 records but last offset delta 2"):
        validate_batch(buf)


@pytest.mark.parametrize("size", [0, 50, 70, 8_100, 8_200, 1_100_000], ids=lambda n: f"value-{n}")
def test_record_length_prefixes_of_every_width_are_walked(size: int) -> None:
    # Values around the 1-, 2- and 3-byte varint boundaries of a record's length prefix (and beyond), in a batch
    # built by aiokafka: the record-count walk of validate_batch must land exactly on the batch end.
    records = [Record(b"k", bytes(size), (), 1_700_000_000_000 + i) for i in range(3)]
    batch = _aiokafka_batch(Compression.NONE, records)
    assert validate_batch(batch).records_count == 3
    # The same records under a header that claims one more: the walk runs out after 3 and says so.
    lying = bytearray(batch)
    lying[23:27] = (3).to_bytes(4, "big")  # last offset delta
    lying[57:61] = (4).to_bytes(4, "big")  # records count
    lying[CRC_POS : CRC_POS + 4] = compute_crc(lying).to_bytes(4, "big")
    with pytest.raises(InvalidBatchError, match="says 4 records but record 3 is cut short"):
        validate_batch(lying)


def test_record_set_iteration_spans_batches() -> None:
    first = build_batch(SAMPLE[:2], base_offset=0)
    second = build_batch(SAMPLE[2:], base_offset=2, compression=Compression.ZSTD)
    got = [(h.base_offset, r.offset, r.key) for h, r in iter_records(first + second)]
    assert got == [(0, 0, b"key-0"), (0, 1, None), (2, 2, b"k2")]


def test_undecompressable_payload_is_invalid_not_a_crash() -> None:
    batch = bytearray(build_batch(SAMPLE, compression=Compression.LZ4))
    batch[70:80] = b"\x00" * 10
    with pytest.raises(InvalidBatchError, match="lz4"):
        decode_records(bytes(batch))


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_every_record_is_walked_once_for_its_timestamp_and_key(codec: Compression) -> None:
    # SAMPLE's second record lies before the first (a negative timestamp delta), the middle one has no key.
    checked = check_batch(_aiokafka_batch(codec, SAMPLE), keys=True)
    assert checked.records.keyless == 1
    assert (checked.records.earliest, checked.records.earliest_at) == (1_700_000_000_100, 1)
    assert (checked.records.latest, checked.records.latest_at) == (1_700_000_000_999, 2)
    assert check_batch(_aiokafka_batch(codec, SAMPLE)).records.keyless is None  # keys read only when asked


@pytest.mark.parametrize("codec", [c for c in CODECS if c is not Compression.NONE], ids=lambda c: c.name.lower())
def test_a_compressed_batch_whose_count_lies_or_whose_records_do_not_fit_is_invalid(codec: Compression) -> None:
    batch = build_batch(SAMPLE, compression=codec)
    for count, error in ((4, "record 3 is cut short"), (2, "bytes remain after them")):
        lying = bytearray(batch)
        lying[23:27] = (count - 1).to_bytes(4, "big")
        lying[57:61] = count.to_bytes(4, "big")
        lying[CRC_POS : CRC_POS + 4] = compute_crc(lying).to_bytes(4, "big")
        with pytest.raises(InvalidBatchError, match=error):
            validate_batch(lying)
    # A record whose length prefix runs past the section, and one shorter than any record can be.
    single = build_batch([Record(b"k", b"v", (), 1_700_000_000_000)], compression=codec)
    for prefix in (b"\x7e", b"\x08"):  # 63 bytes; 4 bytes
        section = prefix + decompress(codec, single[61:])[1:]
        with pytest.raises(InvalidBatchError, match="does not fit its batch"):
            validate_batch(with_records_section(single, compress(codec, section)))
    with pytest.raises(UndecompressableBatchError):
        validate_batch(with_records_section(batch, batch[61:65] + b"\xa5" * 40))


def test_a_record_without_a_timestamp_is_left_out_of_the_bounds() -> None:
    batch = build_batch([Record(None, b"v", (), -1), Record(None, b"v", (), -1)])
    read = check_batch(batch).records
    assert (read.earliest, read.latest, read.earliest_at) == (-1, -1, -1)


def test_a_bomb_is_refused_at_the_bound_with_memory_to_match() -> None:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    for codec, bomb in ((Compression.GZIP, gzip_bomb(200 << 20)), (Compression.ZSTD, zstd_bomb(1 << 32))):
        with pytest.raises(DecompressedTooLarge):
            decompress_bounded(codec, bomb, MAX_DECOMPRESSED_BYTES)
        with pytest.raises(RecordsTooLargeError):
            validate_batch(with_records_section(build_batch(SAMPLE[:1], compression=codec), bomb))
    # 4 GiB and 200 MB claimed: the process grew by the bound at most (its peak RSS, in KiB on Linux).
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - peak <= MAX_DECOMPRESSED_BYTES + (32 << 20)


def test_gzip_inflates_in_steps_to_the_whole_stream() -> None:
    data = bytes(range(256)) * 12_000  # 3 MB: several steps of the bounded inflater
    packed = compress(Compression.GZIP, data)
    assert decompress_bounded(Compression.GZIP, packed, len(data)) == data
    with pytest.raises(DecompressedTooLarge):
        decompress_bounded(Compression.GZIP, packed, len(data) - 1)
    with pytest.raises(CompressionError, match="truncated"):
        decompress_bounded(Compression.GZIP, packed[:-100], len(data))


_records = st.lists(
    st.builds(
        Record,
        key=st.one_of(st.none(), st.binary(max_size=20)),
        value=st.one_of(st.none(), st.binary(max_size=200)),
        headers=st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5))), max_size=3),
        timestamp=st.integers(min_value=0, max_value=2**41),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=60, deadline=None)
@given(records=_records, codec=st.sampled_from(CODECS), base=st.integers(min_value=0, max_value=2**40))
def test_build_decode_round_trip(records: list[Record], codec: Compression, base: int) -> None:
    batch = build_batch(records, base_offset=base, compression=codec)
    validate_batch(batch)
    decoded = decode_records(batch)
    assert [(r.key, r.value, list(r.headers), r.timestamp, r.offset) for r in decoded] == [
        (r.key, r.value, list(r.headers), r.timestamp, base + i) for i, r in enumerate(records)
    ]
