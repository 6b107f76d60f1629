"""``python -m nsys_rules`` runs the CLI."""

from nsys_rules.cli import console

console()
