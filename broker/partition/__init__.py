"""Kafka partitions on s3stream: the meta stream, the partition log, producer state and the partition manager."""
