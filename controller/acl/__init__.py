"""Authorization with the semantics of Kafka's StandardAuthorizer: ACL bindings, their filters, the decision, and
the controller's plans for CreateAcls/DeleteAcls.

It lives in ``controller/`` because the bindings are metadata (records replayed into the image) and both layers
need the decision: the broker's handlers ask it with the bindings of their image, and nothing here imports the
broker. Every module is pure (no I/O), so the semantics are tested without a process.
"""
