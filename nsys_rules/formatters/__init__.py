"""Built-in output formats, registered through the same hook as plugin formats."""

from __future__ import annotations

from typing import Callable

from ..hooks import hookimpl
from .html import format_html
from .compact import format_compact
from .json_out import format_json
from .markdown import format_markdown
from .sarif import format_sarif
from .table import format_table


@hookimpl
def register_formatters() -> dict[str, Callable[..., str]]:
    """The built-in formats: ``table`` (compact on narrow terminals), ``compact``, ``json``, ``sarif``,
    ``markdown`` and ``html``."""
    return {"table": format_table, "compact": format_compact, "json": format_json, "sarif": format_sarif,
            "markdown": format_markdown, "html": format_html}
