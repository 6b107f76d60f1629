"""alloc-churn: the rule (``alloc_churn``) and its three steps: ``measure``, ``judge``, ``phrase``."""
