"""Object stores behind one async interface: local filesystem, S3, in-memory, and a fault injector."""
