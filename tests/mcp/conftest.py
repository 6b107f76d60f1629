"""The MCP server as agents meet it: ``nsys-rules mcp`` started by the SDK's own client over stdio.

:class:`McpServer` holds one client session in a background event loop (anyio's blocking portal),
so a test module shares one server (its start and the worker's imports cost about two seconds).
Every tool result is validated against the output schema the server declared for that tool, with
jsonschema, before a test sees it. The whole folder skips, with the reason, without the ``mcp``
extra (``pip install 'nsys-rules[mcp]'``; the test extra has it).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from pathlib import Path
from typing import Any, Iterator

import jsonschema
import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'nsys-rules[mcp]')")

import anyio.from_thread  # noqa: E402 - after the skip: anyio comes with mcp
from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402


class McpServer:
    """A running ``nsys-rules mcp`` and the SDK client talking to it (synchronous calls for the tests)."""

    def __init__(self, portal: Any, client: Any, garbage: list[str]) -> None:
        self.portal = portal
        self.client = client
        #: Lines on the server's stdout that were no JSON-RPC message (what a stray print would make).
        self.garbage = garbage
        listed = portal.call(client.list_tools)
        self.tools = {t.name: t for t in listed.tools}

    def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """A tool's structured result, validated against its declared output schema."""
        result = self.portal.call(self.client.call_tool, name, arguments)
        assert not result.is_error, result.content
        data = result.structured_content
        assert isinstance(data, dict), result.content
        jsonschema.Draft202012Validator(self.tools[name].output_schema).validate(data)
        return data

    def error(self, name: str, arguments: dict[str, Any]) -> MCPError:
        """The protocol error a call ends with (the test fails when it succeeds)."""
        with pytest.raises(MCPError) as caught:
            self.portal.call(self.client.call_tool, name, arguments)
        error = caught.value
        assert "Traceback" not in error.message
        return error

    def read(self, uri: str) -> str:
        """A resource's text."""
        result = self.portal.call(self.client.read_resource, uri)
        return str(result.contents[0].text)


class _Garbage(logging.Handler):
    """Collects the client's "Failed to parse JSONRPC message" records: a stray line on the protocol channel."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "parse" in record.getMessage().lower():
            self.lines.append(record.getMessage())


@contextlib.contextmanager
def mcp_server(*flags: str, cwd: Path, env: dict[str, str] | None = None) -> Iterator[McpServer]:
    """``nsys-rules mcp FLAGS`` started by the SDK client in ``cwd``, stopped on exit."""
    paths = [*(env or {}).get("PYTHONPATH", "").split(os.pathsep), str(Path(__file__).resolve().parents[2]),
             os.environ.get("PYTHONPATH", "")]
    full_env = {**(env or {}), "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    params = StdioServerParameters(command=sys.executable, args=["-m", "nsys_rules", "mcp", *flags], cwd=str(cwd),
                                   env=full_env)
    garbage = _Garbage()
    logger = logging.getLogger("mcp.client.stdio")
    logger.addHandler(garbage)
    try:
        with anyio.from_thread.start_blocking_portal() as portal:
            with portal.wrap_async_context_manager(Client(params, read_timeout_seconds=600)) as client:
                yield McpServer(portal, client, garbage.lines)
    finally:
        logger.removeHandler(garbage)
