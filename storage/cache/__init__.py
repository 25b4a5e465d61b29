"""In-memory caches: the LogCache (durable, not yet uploaded tail) and the block cache (object data blocks)."""
