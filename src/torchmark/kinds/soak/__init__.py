"""``torchmark soak``: one heavy step repeated for a duration, throughput over time beside
telemetry (``kind``). Nothing is imported here: ``kind`` imports torch."""
