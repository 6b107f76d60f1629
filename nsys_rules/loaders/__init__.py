"""Loaders turn a file on disk into a :class:`nsys_rules.model.trace.Trace`.

The built-in loader reads nsys SQLite exports (and ``.nsys-rep`` through ``nsys export``);
plugins add others through the ``register_loaders`` hook.
"""

#: What ``--export-format`` accepts: the ``nsys export --type`` a ``.nsys-rep`` is exported to
#: (here, not in :mod:`nsys_rules.inputs`, so that parsing ``check``'s flags imports nothing heavy).
EXPORT_FORMATS = ("sqlite", "parquetdir", "arrowdir")
