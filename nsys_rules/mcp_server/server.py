"""The MCP server: tools and resources over stdio, on the official ``mcp`` SDK (low-level ``Server``).

Every tool call is checked against its declared input schema here, then done by the worker
process (:mod:`.worker`) within the time limit; its result goes back as structured content that
validates against the tool's output schema, with a text copy (the summary, then the JSON) for
clients that read text only. An error is a JSON-RPC error whose ``data`` carries the exit code the
CLI would have ended with and its meaning, never a traceback; the server then serves the next
call as before.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import jsonschema
import mcp_types as types
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

from nsys_rules import __version__
from nsys_rules.errors import ExitCode
from nsys_rules.mcp_server.schemas import DESCRIPTIONS, tool_schemas
from nsys_rules.mcp_server.work import ServerConfig
from nsys_rules.mcp_server.worker import MEANINGS, ToolFailure, WorkerHandle
from nsys_rules.textsafe import json_safe

#: The largest result one call returns (JSON bytes): past it the call is an error asking for a smaller page.
MAX_RESULT_BYTES = 4_000_000
#: JSON-RPC error codes by exit code: a usage error is the protocol's "invalid params"; the others sit in the
#: range JSON-RPC leaves to servers (-32000 to -32099), -32000 minus the exit code.
ERROR_CODES = {ExitCode.USAGE: types.INVALID_PARAMS, ExitCode.BAD_INPUT: -32003, ExitCode.INCOMPLETE: -32004}

SCHEMA_RESOURCES = {"nsys-rules://schema/report.json": ("report schema", "the JSON Schema of `check --format json`"),
                    "nsys-rules://schema/diff.json": ("diff schema", "the JSON Schema of `diff --format json`")}
RULES_INDEX = "nsys-rules://rules/index.md"
RULE_PAGE = "nsys-rules://rules/{rule}.md"

INSTRUCTIONS = (
    "nsys-rules judges NVIDIA Nsight Systems exports (.sqlite or parquetdir/arrowdir folders). Start with `check` on "
    "a trace and read its `summary`: findings are ranked by estimated savings (ns over the steady state; per step = "
    "savings / steps). `finding` opens one by fingerprint; `explain` documents a rule. After a change, `verify` says "
    "whether the finding's cause is gone and what the step did against the promise; `diff` compares runs. One run per "
    "side is no regression and an inconclusive verdict means: capture more runs (3+ per side), never 'slower'.")


def protocol_error(failure: ToolFailure, tool: str) -> MCPError:
    """The JSON-RPC error of a failed call: its code, its line, and the CLI's exit code with its meaning."""
    try:
        code = ExitCode(failure.exit_code)
    except ValueError:  # no documented code: the call did not complete
        code = ExitCode.INCOMPLETE
    return MCPError(ERROR_CODES.get(code, -32004), f"nsys-rules {tool}: {failure.message}",
                    {"exit_code": int(code), "meaning": MEANINGS.get(code, "error"), "tool": tool})


def _input_problem(name: str, arguments: dict[str, Any]) -> str | None:
    """The first way ``arguments`` break the tool's input schema (None when they fit)."""
    schema = tool_schemas()[name][0]
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(arguments))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "arguments"
    return f"{where}: {error.message[:300]}"


def _result(structured: dict[str, Any]) -> types.CallToolResult:
    structured = json_safe(structured)  # what a strict client parses: no NaN, no lone surrogate
    text = json.dumps(structured, indent=1, allow_nan=False)
    if len(text.encode()) > MAX_RESULT_BYTES:
        raise ToolFailure(ExitCode.BAD_INPUT, f"the result is {len(text):,} characters, more than the "
                          f"{MAX_RESULT_BYTES:,} one call returns; ask for a smaller page (limit) or fewer rules")
    summary = structured.get("summary")
    content: list[types.ContentBlock] = [types.TextContent(type="text", text=str(summary))] if isinstance(summary, str) else []
    content.append(types.TextContent(type="text", text=text))
    return types.CallToolResult(content=content, structured_content=structured)


def build_server(config: ServerConfig) -> tuple[Server[Any], WorkerHandle]:
    """The server and the handle of its worker process (the caller stops it when the server ends)."""
    worker = WorkerHandle(config)
    lock = anyio.Lock()  # one call at a time: the worker is one process, and the machine's memory one budget

    async def work(tool: str, arguments: dict[str, Any]) -> Any:
        async with lock:
            return await worker.call(tool, arguments)

    async def list_tools(ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
                         ) -> types.ListToolsResult:
        tools = []
        for name, (given, returned) in tool_schemas().items():
            capture = name == "profile"
            tools.append(types.Tool(name=name, description=DESCRIPTIONS[name], input_schema=given,
                                    output_schema=returned,
                                    annotations=types.ToolAnnotations(read_only_hint=not capture,
                                                                      destructive_hint=False,
                                                                      idempotent_hint=not capture,
                                                                      open_world_hint=capture)))
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        name = params.name
        arguments = dict(params.arguments or {})
        try:
            if name not in tool_schemas():
                raise ToolFailure(ExitCode.USAGE, f"no tool {name[:80]!r}; the tools are {', '.join(tool_schemas())}")
            problem = _input_problem(name, arguments)
            if problem:
                raise ToolFailure(ExitCode.USAGE, problem)
            return _result(await work(name, arguments))
        except ToolFailure as failure:
            raise protocol_error(failure, name) from None

    async def list_resources(ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
                             ) -> types.ListResourcesResult:
        resources = [types.Resource(name=name, uri=uri, description=about, mime_type="application/schema+json")
                     for uri, (name, about) in SCHEMA_RESOURCES.items()]
        resources.append(types.Resource(name="rule pages", uri=RULES_INDEX, mime_type="text/markdown",
                                        description="every rule's name and title; each page at " + RULE_PAGE))
        try:
            pages = await work("rule_pages", {})
        except ToolFailure as failure:
            raise protocol_error(failure, "resources/list") from None
        resources += [types.Resource(name=f"rule {r['rule']}", uri=RULE_PAGE.format(rule=r["rule"]),
                                     mime_type="text/markdown", description=r["title"]) for r in pages["rules"]]
        return types.ListResourcesResult(resources=resources)

    async def read_resource(ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
                            ) -> types.ReadResourceResult:
        uri = str(params.uri)
        try:
            text, mime = await _resource_text(uri, work)
        except ToolFailure as failure:
            raise protocol_error(failure, "resources/read") from None
        return types.ReadResourceResult(contents=[types.TextResourceContents(uri=uri, mime_type=mime, text=text)])

    server: Server[Any] = Server("nsys-rules", version=__version__, instructions=INSTRUCTIONS,
                                 on_list_tools=list_tools, on_call_tool=call_tool, on_list_resources=list_resources,
                                 on_read_resource=read_resource)
    return server, worker


async def _resource_text(uri: str, work: Any) -> tuple[str, str]:
    """A resource's text and MIME type; ToolFailure (usage) for a URI the server does not have."""
    if uri == "nsys-rules://schema/report.json":
        from nsys_rules.formatters.json_out import report_schema

        return json.dumps(report_schema(), indent=2), "application/schema+json"
    if uri == "nsys-rules://schema/diff.json":
        from nsys_rules.diff import diff_schema

        return json.dumps(diff_schema(), indent=2), "application/schema+json"
    if uri == RULES_INDEX:
        pages = await work("rule_pages", {})
        lines = ["# nsys-rules rules", ""] + [f"- [{r['rule']}]({RULE_PAGE.format(rule=r['rule'])}): {r['title']}"
                                               for r in pages["rules"]]
        return "\n".join(lines) + "\n", "text/markdown"
    prefix, suffix = RULE_PAGE.split("{rule}")
    if uri.startswith(prefix) and uri.endswith(suffix) and len(uri) > len(prefix) + len(suffix):
        page = await work("rule_pages", {"rule": uri[len(prefix): -len(suffix)]})
        return page["markdown"], "text/markdown"
    raise ToolFailure(ExitCode.USAGE, f"no resource {uri[:200]!r}; resources/list names them")


async def serve(config: ServerConfig) -> None:
    """Serve one client over this process's stdin and stdout until it closes them."""
    server, worker = build_server(config)
    try:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
    finally:
        worker.stop()
