"""Loaders turn a file on disk into a :class:`nsys_rules.trace.Trace`.

The built-in loader reads nsys SQLite exports (and ``.nsys-rep`` through ``nsys export``);
plugins add others through the ``register_loaders`` hook.
"""
