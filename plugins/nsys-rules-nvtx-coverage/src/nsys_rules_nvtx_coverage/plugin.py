"""The entry-point module: nsys-rules imports it and calls the hooks it implements."""

from __future__ import annotations

from nsys_rules.api import hookimpl

from .coverage import NvtxCoverage


@hookimpl
def register_rules() -> list[type]:
    """The rules this plugin adds."""
    return [NvtxCoverage]
