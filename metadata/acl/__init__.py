"""Authorization with the semantics of Kafka's StandardAuthorizer: ACL bindings, their filters, the decision, and
the denial log (the controller's plans for CreateAcls/DeleteAcls are ``controller.decisions.acls``).

It lives in the shared ``metadata`` layer because the bindings are metadata (records replayed into the image) and
both roles need the decision: the broker's handlers ask it with the bindings of their image, the controller's
CONTROLLER listener with its own. Every module is pure (no I/O), so the semantics are tested without a process.
"""
