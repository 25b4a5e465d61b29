"""The classic consumer-group coordinator: a sans-I/O state machine plus the asyncio driver and its persistence."""
