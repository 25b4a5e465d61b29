"""The one failure of the CONTROLLER listener's request handling that has no answer: :class:`ControllerProtocolError`.

A request that cannot be read (a bad frame, a Raft message that does not decode) or that names an API the listener
lists but cannot answer is not answered with an error code: the server closes the connection it came on, as a
Kafka node closes one on a request it cannot parse. Every module that answers a part of the listener's requests
raises it, so it lives apart from all of them.
"""

from __future__ import annotations

from wire.codec import ProtocolError


class ControllerProtocolError(ProtocolError):
    """The request cannot be answered at all; the server closes the connection it came on."""
