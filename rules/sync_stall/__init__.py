"""sync-stall: the rule (``sync_stall``) and its three steps: ``measure``, ``judge``, ``phrase``."""
