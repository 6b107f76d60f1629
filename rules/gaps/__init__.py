"""Time the GPU spends idle or under-used over the capture (the ``nsys analyze`` gap and utilization rules)."""
