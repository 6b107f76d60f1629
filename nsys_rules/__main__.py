"""``python -m nsys_rules`` runs the CLI."""

import sys

from .cli import main

sys.exit(main())
