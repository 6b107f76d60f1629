"""Fuzz suite: mutated nsys exports through the CLI, in process."""
