"""Built-in output formats, registered through the same hook as plugin formats."""

from __future__ import annotations

from typing import Callable

from ..hooks import hookimpl
from .json_out import format_json
from .table import format_table


@hookimpl
def register_formatters() -> dict[str, Callable[..., str]]:
    """The built-in formats: ``table`` and ``json``."""
    return {"table": format_table, "json": format_json}
