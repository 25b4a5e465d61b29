"""s3stream for Python: append-only streams whose bytes live in object storage, written through a WAL.

This package knows nothing about Kafka. Layers, from the bottom:

- ``objectstore``: one async interface over the local filesystem, S3 and test doubles.
- ``stream_record_batch`` and ``objects``: the StreamRecordBatch codec and the object format (DESIGN.md §5).
- ``wal``: the write-ahead log (file or S3) that makes appends durable before they are uploaded.
- ``cache``: the LogCache (unuploaded tail) and the block cache (LRU of object data blocks).
- ``metadata``: the ``StreamMetadata`` interface the controller serves, its records and their codec, and the
  state machine the controller keeps it in.
- ``upload``, ``read``, ``stream_client``: the pipelines that tie the above together into the ``Stream`` objects
  of ``stream_api``.
- ``compaction``: merging and splitting objects without changing what readers see.
"""
