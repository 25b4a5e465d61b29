"""Kafka wire protocol: framing, the kio-based codec and the advertised ApiVersions table."""
