"""Kernels whose durations have a tail, with the tail statistics the rule reads."""
