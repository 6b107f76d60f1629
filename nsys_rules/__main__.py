"""``python -m nsys_rules`` runs the CLI."""

from .cli import console

console()
