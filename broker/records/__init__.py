"""Kafka v2 RecordBatch handling: header parsing and validation, record codec, compression codecs."""
