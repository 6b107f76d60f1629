"""kernel-tail: the rule, its three steps (``measure``, ``judge``, ``phrase``) and the tail statistics (``tails``)."""
