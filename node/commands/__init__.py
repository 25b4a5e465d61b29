"""``fjord`` command groups. A module here defines ``register(subparsers)``, which adds its parser and sets
``run`` (a function of the parsed arguments returning the exit code) as a default."""
