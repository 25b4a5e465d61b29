"""Kafka bytes and nothing else: the codec (frames <-> kio entities), the schema helpers that build entities, API
versions, record batches, compression and the listener."""
