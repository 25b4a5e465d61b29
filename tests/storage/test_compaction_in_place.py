"""Compaction of an S3 WAL object committed in place (storage/failover_copy.py): the object holds batches below its
committed range's start, and of streams it commits nothing for. A reader never sees them, and compaction must not
carry them into a new object's range, where they would overlap what another object commits."""

from __future__ import annotations

from pathlib import Path

from storage.metadata.api import CommitStreamSetObjectRequest, ObjectStreamRange
from storage.objects.format import build_object, object_key
from storage.objects.reader import ObjectReader
from storage.stream_record_batch import StreamRecordBatch
from storage.wal import s3_format
from tests.storage.engine_support import payload
from tests.storage.test_compaction import Rig, make_rig


async def _commit(rig: Rig, data: bytes, *ranges: ObjectStreamRange) -> int:
    object_id = await rig.meta.prepare_objects(rig.engine.node, 1, 60_000)
    await rig.store.put(object_key(object_id, rig.config.namespace), data)
    await rig.meta.commit_stream_set_object(
        CommitStreamSetObjectRequest(rig.engine.node, object_id, len(data), tuple(ranges))
    )
    return object_id


async def test_compaction_keeps_only_the_committed_range_of_a_wal_object_committed_in_place(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    try:
        ours, foreign = rig.streams[0].stream_id, rig.streams[1].stream_id
        batches = [StreamRecordBatch(ours, 3, i, 1, payload(ours, i, 300)) for i in range(10)]
        await _commit(rig, build_object(batches[:5]), ObjectStreamRange(ours, 0, 5, 3))
        # A v2 WAL object holding offsets 2..9 of ours (2..4 were committed above, from the dead node's upload)
        # and three batches of a stream it commits nothing for; copied whole, committed from offset 5 on.
        stranger = [StreamRecordBatch(foreign, 3, i, 1, payload(foreign, i, 300)) for i in range(3)]
        header = s3_format.ObjectHeader(9, 1, 0, 0, 0)
        encoded = s3_format.encode_v2(header, [*batches[2:], *stranger], rig.config.object_block_size)
        assert encoded is not None
        wal_object = b"".join(encoded[1])
        await _commit(rig, wal_object, ObjectStreamRange(ours, 5, 10, 3))
        expected = [b.encode() for b in batches]
        assert await rig.read(ours, 1) == expected
        assert await rig.read(ours, 10**9) == expected

        result = await rig.stream_set().run_once()

        assert result.failures == [] and result.merged_objects == 2
        [merged] = await rig.meta.get_stream_set_objects(rig.node_id)
        assert [(r.stream_id, r.start_offset, r.end_offset) for r in merged.ranges] == [(ours, 0, 10)]
        index = await ObjectReader(rig.store, rig.config.namespace).index(merged.object_id)
        assert {e.stream_id for e in index} == {ours}
        assert sum(e.record_count for e in index) == 10  # each batch once: nothing from below offset 5 twice
        assert await rig.read(ours, 1) == expected
        assert await rig.read(ours, 2500) == expected
    finally:
        await rig.engine.shutdown()
