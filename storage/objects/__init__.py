"""The object format shared by stream-set objects and stream objects (DESIGN.md §5)."""
