"""launch-bound: the rule (``launch_bound``) and its three steps: ``measure``, ``judge``, ``phrase``."""
