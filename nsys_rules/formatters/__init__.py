"""Built-in output formats, registered through the same hook as plugin formats."""

from __future__ import annotations

from typing import Callable

from nsys_rules.hooks import hookimpl
from nsys_rules.formatters.html import format_html
from nsys_rules.formatters.compact import format_compact
from nsys_rules.formatters.json_out import format_json
from nsys_rules.formatters.markdown import format_markdown
from nsys_rules.formatters.sarif import format_sarif
from nsys_rules.formatters.table import format_table


@hookimpl
def register_formatters() -> dict[str, Callable[..., str]]:
    """The built-in formats: ``table`` (compact on narrow terminals), ``compact``, ``json``, ``sarif``,
    ``markdown`` and ``html``."""
    return {"table": format_table, "compact": format_compact, "json": format_json, "sarif": format_sarif,
            "markdown": format_markdown, "html": format_html}
