"""The transaction coordinator (KIP-98): transactional ids, their state in ``__transaction_state``, and markers.

``coordinator`` serves the requests (ownership, persistence, completion, timers) with the rules of ``state``;
``state_topic`` is the ``__transaction_state`` topic (its creation and replay) whose records ``log_schema`` encodes;
``markers``, ``marker_sender`` and ``peers`` write the markers; ``produce_verification`` asks another broker's
coordinator whether a produce belongs to its transaction (KIP-890).
"""
