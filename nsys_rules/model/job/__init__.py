"""A multi-rank job: the ranks, their communication and their steps, built once from every trace."""
