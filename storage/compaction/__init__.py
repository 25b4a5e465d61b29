"""Object compaction and the object lifecycle (DESIGN.md §10, issue 2 item 7)."""
