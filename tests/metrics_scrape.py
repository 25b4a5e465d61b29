"""A node's Prometheus endpoint in tests: the suite's one way to find it and read it.

A node started with ``metrics.port=0`` binds a free port and logs where it serves (``wire/metrics.py``); a test
finds the URL in that log line with :func:`metrics_url`, reads the text with :func:`scrape` and one sample's value
with :func:`sample`.
"""

from __future__ import annotations

import re
import urllib.request

__all__ = ["metrics_url", "sample", "scrape"]

_SERVED = re.compile(r"metrics served on http://[\d.]+:(\d+)/metrics")


def metrics_url(log: str) -> str:
    """The URL of the endpoint a node's ``log`` says it serves (the first, if it restarted)."""
    found = _SERVED.search(log)
    assert found is not None, f"the node logged no metrics endpoint:\n{log[-3000:]}"
    return f"http://127.0.0.1:{found.group(1)}/metrics"


def scrape(url: str, timeout: float = 5.0) -> str:
    """The exposition text served at ``url``."""
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return str(response.read().decode())


def sample(text: str, name: str, labels: str = "") -> float | None:
    """The value of the sample ``name`` with exactly ``labels`` (``'{api="Fetch"}'``, or none), or None if absent."""
    found = re.search(rf"^{re.escape(name)}{re.escape(labels)} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else None
