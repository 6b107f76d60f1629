"""Hostile input through the protocol: every bad call is one protocol error with our exit code, and the server
keeps serving.

One server for the module, confined with ``--root`` to a folder that holds one good trace beside the
bad ones, with a plugin installed for real (a dist-info on ``PYTHONPATH``) whose rules print to
stdout in every way a rule can (``print``, ``os.write(1)``, a child process, at import) or never
return. Paths: missing, ``..``, absolute outside the root, a symbolic link out of it, a NUL byte, a
folder, a FIFO, a text file and an empty file named ``.sqlite``, a truncated export, an nsys report.
Limits: a rule that sleeps past the call's time limit (the worker is killed, the next call starts a
fresh one), a call the client cancels (the same), a trace over ``--max-memory``, a result over the
size one call returns.
"""

from __future__ import annotations

import os
import shutil
import time

import pytest

from nsys_rules.errors import ExitCode
from tests.cli.test_hostile_plugins import RULE
from tests.conftest import EXAMPLE
from tests.mcp.conftest import mcp_server
from tests.unit.test_plugin_failures import install_plugin

GOOD = "good.sqlite"
#: The plugin: two rules, `chatty` prints in every way a rule can, `sleepy` never returns.
PLUGIN = RULE.replace("Hostile", "Chatty").replace('name = "hostile"', 'name = "chatty"').format(body="""\
        print("chatty: print")
        sys.stdout.write("chatty: sys.stdout\\n")
        sys.stdout.flush()
        os.write(1, b"chatty: fd 1\\n")
        subprocess.run(["echo", "chatty: a child"])
        return iter(())""").replace("return [Chatty]", "return [Chatty, Sleepy]") + '''

class Sleepy(Chatty):
    """A rule that never returns."""
    name = "sleepy"
    title = "a rule that never returns"

    def check(self, ctx):
        time.sleep(3600)
        return iter(())


print("hostile plugin imported (a line on stdout)")
'''
#: The call's time limit of the module's server (seconds): long enough for a check of the small trace on a busy
#: machine, short enough that the sleeping rule's test waits little.
CALL_LIMIT = 15


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mcp-hostile")
    shutil.copyfile(EXAMPLE, folder / GOOD)
    (folder / "notes.sqlite").write_text("not a trace\n")
    (folder / "empty.sqlite").write_bytes(b"")
    (folder / "truncated.sqlite").write_bytes(EXAMPLE.read_bytes()[:70_000])
    (folder / "run.nsys-rep").write_bytes(b"\0" * 64)
    (folder / "plain_folder").mkdir()
    os.mkfifo(folder / "pipe.sqlite")
    os.symlink(EXAMPLE, folder / "escape.sqlite")  # a link out of the root
    os.symlink(folder / GOOD, folder / "inside.sqlite")  # a link within it
    return folder


@pytest.fixture(scope="module")
def server(root, tmp_path_factory):
    plugin = install_plugin(tmp_path_factory.mktemp("plugin"), "hostile-plugin", "hostile_plugin", PLUGIN)
    env = {"PYTHONPATH": str(plugin), "NSYS_RULES_DISABLE_PLUGIN_AUTOLOAD": ""}
    with mcp_server("--root", str(root), "--timeout", str(CALL_LIMIT), cwd=root, env=env) as s:
        yield s


def _works(server) -> None:
    """A later good call succeeds: the server kept serving."""
    got = server.call("check", {"trace": GOOD, "rules": ["kernel-tail"]})
    assert [f["rule"] for f in got["report"]["findings"]] == ["kernel-tail"]


@pytest.mark.parametrize(("trace", "code", "words"), [
    ("nope.sqlite", ExitCode.BAD_INPUT, "no such file"),
    ("../outside.sqlite", ExitCode.USAGE, "'..' part"),
    ("sub/../../etc/passwd", ExitCode.USAGE, "'..' part"),
    (str(EXAMPLE), ExitCode.USAGE, "outside the server's --root"),
    ("/etc/passwd", ExitCode.USAGE, "outside the server's --root"),
    ("escape.sqlite", ExitCode.USAGE, "symbolic links resolved"),
    ("bad\0name.sqlite", ExitCode.USAGE, "no path"),
    ("plain_folder", ExitCode.USAGE, "no parquetdir/arrowdir export"),
    ("pipe.sqlite", ExitCode.BAD_INPUT, ""),
    ("notes.sqlite", ExitCode.BAD_INPUT, "not a SQLite file"),
    ("empty.sqlite", ExitCode.BAD_INPUT, ""),
    ("truncated.sqlite", ExitCode.BAD_INPUT, ""),
    ("run.nsys-rep", ExitCode.USAGE, "nsys export"),
])
def test_a_bad_path_is_one_protocol_error_and_the_server_keeps_serving(server, trace, code, words):
    started = time.monotonic()
    error = server.error("check", {"trace": trace})
    assert time.monotonic() - started < CALL_LIMIT  # refused, not timed out (a FIFO is never opened)
    assert error.data["exit_code"] == code, error.message
    assert error.code == (-32602 if code == ExitCode.USAGE else -32003)
    assert words in error.message and "\n" not in error.message
    _works(server)


def test_every_tool_takes_paths_through_the_same_checks(server):
    assert server.error("stats", {"trace": "/etc/passwd", "report": "cuda_api_sum"}).data["exit_code"] == 2
    assert server.error("diff", {"before": [GOOD], "after": ["escape.sqlite"]}).data["exit_code"] == 2
    error = server.error("verify", {"before": "../x.sqlite", "after": GOOD, "fingerprint": "0123456789abcdef"})
    assert error.data["exit_code"] == 2
    assert server.error("finding", {"trace": "notes.sqlite", "fingerprint": "0123456789abcdef"}).data["exit_code"] == 3


def test_a_link_inside_the_root_is_followed(server):
    got = server.call("check", {"trace": "inside.sqlite", "rules": ["sync-stall"]})
    assert got["report"]["findings"][0]["estimated_savings_ns"] == 810834


def test_plugin_output_never_reaches_the_protocol_channel(server):
    got = server.call("check", {"trace": GOOD, "rules": ["chatty", "kernel-tail"]})
    assert [f["rule"] for f in got["report"]["findings"]] == ["kernel-tail"]
    assert "chatty" in [r["name"] for r in got["report"]["rules"]]
    assert server.garbage == []  # no stray line on the server's stdout, from the plugin's import or its rule


def test_a_call_past_the_time_limit_is_stopped_and_the_next_call_works(server):
    started = time.monotonic()
    error = server.error("check", {"trace": GOOD, "rules": ["sleepy"]})
    waited = time.monotonic() - started
    assert error.data["exit_code"] == 4 and error.code == -32004 and "time limit" in error.message
    assert CALL_LIMIT <= waited < CALL_LIMIT + 15
    _works(server)  # a fresh worker


def test_a_result_over_the_size_one_call_returns_is_an_error():
    from nsys_rules.mcp_server.server import MAX_RESULT_BYTES, _result
    from nsys_rules.mcp_server.worker import ToolFailure

    with pytest.raises(ToolFailure) as caught:
        _result({"summary": "big", "rows": ["x" * 1000] * (MAX_RESULT_BYTES // 1000)})
    assert caught.value.exit_code == ExitCode.BAD_INPUT and "smaller page" in caught.value.message
    assert _result({"summary": "small"}).structured_content == {"summary": "small"}


def test_a_trace_over_max_memory_is_refused_with_exit_3(root):
    with mcp_server("--root", str(root), "--max-memory", "64K", cwd=root) as small:
        error = small.error("check", {"trace": GOOD})
        assert error.data["exit_code"] == 3 and "memory" in error.message.lower()
        assert small.call("explain", {"rule": "sync-stall"})["rule"] == "sync-stall"


def test_a_call_the_client_cancels_stops_its_work(server):
    import anyio

    async def give_up_after(seconds: float) -> bool:
        with anyio.move_on_after(seconds) as scope:
            await server.client.call_tool("check", {"trace": GOOD, "rules": ["sleepy"]})
        return scope.cancelled_caught

    assert server.portal.call(give_up_after, 3.0)
    started = time.monotonic()
    _works(server)  # a worker still sleeping in the cancelled call would hold this one to the time limit
    # Not cancelled, the sleeping call would hold the server until its time limit: 12 s more at least.
    assert time.monotonic() - started < CALL_LIMIT - 3.0, time.monotonic() - started
