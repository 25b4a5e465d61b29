"""The process: a node's start-up with its roles, the ``fjord`` command line, local clusters."""
