"""``nsys-rules mcp``: serve the tools to an agent over the Model Context Protocol (stdio).

Needs the ``mcp`` extra (``pip install 'nsys-rules[mcp]'``); without it, one line and exit 2.
Ends with exit 0 when the client closes the connection. See :mod:`nsys_rules.mcp_server` and
``docs/agents.md``.
"""

from __future__ import annotations

import argparse
import gc

from nsys_rules.errors import UsageError
from nsys_rules.commands.common import add_plugin_flags

#: Default time limit of one tool call, seconds (a rule's own limit, --rule-timeout, is 300 s too).
DEFAULT_CALL_TIMEOUT = 300.0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``mcp`` subcommand and its flags."""
    p = sub.add_parser("mcp", help="serve check, diff, verify and more to coding agents over MCP (stdio)",
                       description="An MCP server over stdio: tools check, explain, finding, diff, verify, stats and "
                                   "profile (dry run), and resources for the JSON Schemas and the rule pages. Paths "
                                   "are the only trace input, opened read-only. Add it to an agent as "
                                   "{\"command\": \"nsys-rules\", \"args\": [\"mcp\", \"--root\", \"DIR\"]}.")
    p.add_argument("--root", metavar="DIR",
                   help="read traces only inside DIR (symbolic links resolved; '..' refused); relative paths are "
                        "taken from DIR")
    p.add_argument("--allow-profile", action="store_true",
                   help="let the profile tool run captures (the agent's command under nsys; reports written under "
                        "--root or the working folder); without it profile only answers dry runs")
    p.add_argument("--timeout", metavar="SECONDS", default=None,
                   help=f"stop a tool call that runs longer (its worker process is killed; default "
                        f"{DEFAULT_CALL_TIMEOUT:g})")
    p.add_argument("--config", metavar="FILE", help="config file (default: as check finds one from the working folder)")
    p.add_argument("--max-memory", metavar="SIZE", help="refuse a trace that would need more (e.g. 2G), as check does")
    p.add_argument("--rule-timeout", metavar="SECONDS", help="stop a rule that runs longer, as check does (default 300)")
    add_plugin_flags(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Check the flags, then serve over stdio until the client closes the connection (exit 0)."""
    from nsys_rules.config import parse_seconds
    from nsys_rules.mcp_server.paths import PathPolicy
    from nsys_rules.units import parse_size

    timeout = DEFAULT_CALL_TIMEOUT if args.timeout is None else parse_seconds(args.timeout, "--timeout")
    if args.max_memory:
        parse_size(args.max_memory)  # a bad value is a usage error now, not on every call
    if args.rule_timeout is not None:
        parse_seconds(args.rule_timeout)
    PathPolicy.confined_to(args.root)  # a --root that is no folder: exit 2 before serving
    try:
        import anyio

        from nsys_rules.mcp_server.server import serve
        from nsys_rules.mcp_server.work import ServerConfig
    except ImportError as exc:
        raise UsageError(f"nsys-rules mcp needs the mcp extra ({exc}): pip install 'nsys-rules[mcp]'") from None
    config = ServerConfig(root=args.root, allow_profile=args.allow_profile, config=args.config,
                          max_memory=args.max_memory, rule_timeout=args.rule_timeout, call_timeout=timeout,
                          no_plugins=bool(getattr(args, "no_plugins", False)))
    gc.enable()  # the CLI pauses the collector for one command; a server lives for hours
    anyio.run(serve, config)
    return 0
