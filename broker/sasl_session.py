"""One connection's SASL state on a SASL listener: :mod:`wire.sasl.session`, re-exported under its old name.

The state machine moved to wire so that the CONTROLLER listener (``controller.rpc.dispatcher``) serves the same
exchange; the broker's modules and tests keep importing it from here.
"""

from __future__ import annotations

from wire.sasl.session import CredentialLookup, SaslSession, SaslSettings, SaslStateError

__all__ = ["CredentialLookup", "SaslSession", "SaslSettings", "SaslStateError"]
