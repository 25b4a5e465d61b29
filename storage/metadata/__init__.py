"""Stream and object metadata: the interface the controller serves, and an in-process implementation."""
