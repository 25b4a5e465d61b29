"""Kafka bytes and nothing else: the codec, API versions, record batches, compression and the listener."""
