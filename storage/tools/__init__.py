"""Operator tools over the storage engine (the logic behind ``fjord object ...``), kept free of argument parsing
and printing so they can be tested and reused without a subprocess."""
