"""A cluster's namespace: the middle part of its object keys (DESIGN.md §5) and the prefix of its KV keys (§4).

A leaf module, so that the configuration, the object format and the controller name it without importing each
other.
"""

from __future__ import annotations


def namespace_for(cluster_id: str) -> str:
    """``_fjord_<clusterId>``: objects and KV entries of one cluster never collide with another's in one bucket."""
    return f"_fjord_{cluster_id}"
