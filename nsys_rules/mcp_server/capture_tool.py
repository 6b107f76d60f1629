"""``profile``: the nsys capture command for a program and the preflight verdict; running it only when allowed.

A dry run (the default) runs nothing and writes nothing: it is ``nsys-rules profile --dry-run``
(:func:`nsys_rules.commands.profile.preflight`, :func:`nsys_rules.capture.nsys_command`). Running
a capture starts the agent's command under nsys and writes a report, so it is refused unless the
person who started the server passed ``--allow-profile``; then the report goes under ``--root``
(or the working folder), the program's output to stderr, and the capture is stopped at the call's
time limit.
"""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

from nsys_rules import capture
from nsys_rules.errors import UsageError
from nsys_rules.mcp_server.work import Work
from nsys_rules.textsafe import shell_join

#: Seconds left to the call for the check of what the capture wrote.
CHECK_MARGIN_S = 30.0


def profile_tool(work: Work, a: dict[str, Any]) -> dict[str, Any]:
    """The nsys command, the preflight verdict, and (allowed and asked) the capture's exports."""
    from nsys_rules.commands.profile import preflight
    from nsys_rules.nsys_locate import locate_nsys

    command = [str(word) for word in a["command"]]
    if any("\0" in word for word in command):
        raise UsageError("profile: a command word holds a NUL byte")
    dry_run = bool(a.get("dry_run", True))
    if not dry_run and not work.config.allow_profile:
        raise UsageError("profile: running a capture is refused: the server was started without --allow-profile "
                         "(call with dry_run=true for the command, and run it yourself)")
    folder = work.policy.output_folder()
    options = capture.CaptureOptions(output=capture.normalize_output(str(folder / capture.default_name(command))),
                                     trace=str(a.get("trace") or capture.DEFAULT_TRACE),
                                     gpu_metrics=bool(a.get("metrics", False)), python=bool(a.get("python", False)))
    location = locate_nsys(None)
    problems = preflight(command, options, location)
    nsys_cmd = capture.nsys_command(str(location.path) if location.path else "nsys", options, command)
    stops = any(p.exit_code is not None for p in problems)
    out: dict[str, Any] = {
        "command": nsys_cmd, "shell": shell_join(nsys_cmd),
        "preflight": [{"kind": "stop" if p.exit_code is not None else "warning", "message": p.message,
                       "fix": p.fix or ""} for p in problems],
        "verdict": "stops" if stops else "ok", "ran": False, "exit_code": None, "traces": []}
    if dry_run or stops:
        said = "preflight stops: " + problems[0].message if stops else "preflight ok"
        out["summary"] = f"{'dry run: ' if dry_run else 'not run: '}{out['shell']}\n{said}"
        return out
    folder.mkdir(parents=True, exist_ok=True)
    started = time.time() - 2  # file times can be coarser than the clock
    limit = max(1.0, work.config.call_timeout - CHECK_MARGIN_S)
    try:
        # The program's output goes to stderr: stdout of this process is never the protocol's, but keep it quiet.
        done = subprocess.run(nsys_cmd, stdin=subprocess.DEVNULL, stdout=sys.stderr.fileno(),
                              stderr=sys.stderr.fileno(), timeout=limit, check=False)
        code: int | None = done.returncode
    except subprocess.TimeoutExpired:
        code = None
    except OSError as exc:
        raise UsageError(f"profile: cannot start {nsys_cmd[0]}: {exc.strerror or exc}") from None
    pattern = capture.output_glob(options.output)
    traces = capture.written_files(pattern, ".sqlite", started)
    out.update(ran=True, exit_code=code, traces=[str(t) for t in traces])
    ran = f"stopped at the time limit ({limit:.0f} s)" if code is None else f"nsys exited with {code}"
    wrote = f"wrote {', '.join(out['traces'])}; call check on it" if traces else "no SQLite export was written"
    out["summary"] = f"ran: {out['shell']}\n{ran}; {wrote}"
    return out
