"""Stream and object metadata: the interface the controller serves (``api``), the records that express every change
to it and their codec (``stream_records``, ``record_codec``), and the controller's authoritative state machine
(``state``: the state and how records change it; ``state_machine``: the validated writes that produce them)."""
