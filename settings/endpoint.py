"""A broker's advertised endpoint: what ``advertised.listeners`` names and what Metadata and DescribeCluster report.

It is a setting before it is metadata: a node reads it from its properties, and the broker registration record
carries it to the others (``metadata.cluster_records.RegisterBrokerRecord``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A listener a broker accepts connections on (what Metadata and DescribeCluster report)."""

    name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"
