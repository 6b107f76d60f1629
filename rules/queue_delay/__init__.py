"""queue-delay: the rule (``queue_delay``) and its three steps: ``measure``, ``judge``, ``phrase``."""
