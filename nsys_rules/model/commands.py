"""What a profiled command line says: whether it runs a debug build, and the command that captures it again.

Every word here comes from the trace (the recorded command line and environment), so every
word that goes into a command goes through :func:`~nsys_rules.textsafe.shell_word`.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Iterable, Mapping

from nsys_rules.textsafe import shell_join, shell_word
from nsys_rules.model.trace import Trace


def debug_build(trace: Trace) -> CommandEvidence | None:
    """Whether the recorded command line runs a debug build (a fact of the whole trace), with the release command.

    None for a release run, or when the export records no command line.
    """
    capture = trace.capture
    return command_evidence(capture.command, capture.environment)


def program_command(trace: Trace) -> str:
    """The program to capture again, shell-quoted: the release build's command when the recorded one runs a
    debug build (a recommendation never sends the user back to the debug binary), else the recorded command
    line; "" when the export records none."""
    evidence = debug_build(trace)
    return evidence.release_command if evidence is not None else trace.capture.command_line


def recapture_command(trace: Trace, flags: str = "--cuda-graph-trace=node", command: str | None = None) -> str:
    """The standard nsys capture of the same program, with ``flags`` added.

    Uses ``command`` when given (e.g. a ``cargo run -r`` form of the program; every word from the
    trace in it already quoted with :func:`~nsys_rules.textsafe.shell_word`), else :func:`program_command`
    (the release build of a debug build); a placeholder when the export records no command.
    """
    command = command or program_command(trace) or "<your program and its arguments>"
    name = Path(trace.label).stem or "report"
    return (f"nsys profile --force-overwrite=true {flags} --export=sqlite "
            f"-o {shell_word(name)} {command}").replace("  ", " ")


# Cargo puts dev-profile binaries under target/debug/ (target/<triple>/debug/ when cross
# compiling; deps/ and examples/ for test and example binaries).
_CARGO_DEBUG_EXE = re.compile(r"(^|/)target/(?:(?P<triple>[A-Za-z0-9_.-]+)/)?debug/(?:deps/|examples/)?"
                              r"(?P<exe>[^/]+)$")
# Build folders whose name says Debug: CLion's default (cmake-build-debug), build-debug /
# build_debug, and the configuration folder of multi-config generators (Visual Studio, Xcode,
# Ninja Multi-Config), which is capitalized.
_CMAKE_DEBUG_DIR = re.compile(r"(^|/)(?P<dir>cmake-build-debug|(?:cmake-)?build[-_]debug)/")
_MULTI_CONFIG_DEBUG = re.compile(r"(^|/)Debug/[^/]+$")
_NOT_PROGRAM = re.compile(r"\.(so|a|rlib|rmeta|d|dylib|dll|lib|pdb|json|txt|log|toml|o|py|cfg|yaml|yml|csv|bin|pt|"
                          r"safetensors|gguf|onnx)$", re.IGNORECASE)
_CARGO_RUNS = {"run": "-r", "r": "-r", "test": "--release", "t": "--release"}
_DEBUG_PROFILES = {"dev", "debug", "test"}
_CARGO_GLOBAL_WITH_VALUE = {"-Z", "-C", "--config", "--color"}


@dataclass(frozen=True)
class CommandEvidence:
    """Why the command line reads as a debug build, and the release equivalent."""

    reason: str
    release_command: str
    build_step: str  # the command that builds the release binary first ("" when the run command builds it)
    kind: str  # "cargo" or "cmake": device code is built with -G only in some setups
    binary: str = ""  # the cargo --bin target, unquoted ("" unless the program is a target/debug binary)


def split_args(command: Iterable[str]) -> list[list[str]]:
    """Each argument as tokens: an argument holding a whole shell command (``bash -c "cargo run"``) is split."""
    out = []
    for arg in command:
        if any(ch.isspace() for ch in arg):
            try:
                out.append(shlex.split(arg))
            except ValueError:
                out.append(arg.split())
        else:
            out.append([arg])
    return out


def _join(parts: list[list[str]], original: list[str]) -> str:
    """Shell-quoted command line; an argument that held a whole shell command stays one argument.

    Every word comes from the trace, so every word goes through :func:`shell_word`; an argument
    left unchanged is quoted as recorded, not re-split and re-joined.
    """
    words = []
    for tokens, arg in zip(parts, original, strict=True):
        if any(ch.isspace() for ch in arg):
            words.append(shell_word(arg if [tokens] == split_args([arg]) else shell_join(tokens)))
        else:
            words.extend(shell_word(t) for t in tokens)  # tokens inserted next to a plain argument
    return " ".join(words)


def command_evidence(command: tuple[str, ...], environment: Mapping[str, str] | None = None) -> CommandEvidence | None:
    """The debug-build evidence in a profiled command line, or None.

    Signals: an executable under ``target/debug/`` (cargo's dev profile); ``cargo run`` or
    ``cargo test`` without ``-r``/``--release`` or a non-debug ``--profile``; a program under a
    build folder named for Debug (``cmake-build-debug/``, ``build-debug/``, ``.../Debug/``); a
    debug Python interpreter (``python3-dbg``, ``python3.11d``); the program run under
    ``compute-sanitizer`` / ``cuda-memcheck``.
    """
    if not command:
        return None
    original = list(command)
    parts = split_args(original)
    env = dict(environment or {})
    flat = [(i, j, token) for i, tokens in enumerate(parts) for j, token in enumerate(tokens)]
    found = _tool_evidence(parts, original, flat)
    if found is not None:
        return found
    for n, (_, _, token) in enumerate(flat):
        if PurePosixPath(token).name in ("cargo", "cargo.exe"):
            found = _cargo_evidence(parts, original, flat, n, env)
            if found is not None:
                return found
    for i, tokens in enumerate(parts):
        for j, raw in enumerate(tokens):
            if _NOT_PROGRAM.search(raw):
                continue
            token = raw.replace("\\", "/")  # Windows paths: target\debug\app.exe
            m = _CARGO_DEBUG_EXE.search(token)
            if m:
                fixed = re.sub(r"(^|/)target/((?:[A-Za-z0-9_.-]+/)?)debug/", r"\1target/\2release/", token)
                if "\\" in raw:
                    fixed = fixed.replace("/", "\\")
                exe = m.group("exe")
                if exe.lower().endswith(".exe"):
                    exe = exe[:-4]
                triple = f" --target {shell_word(m.group('triple'))}" if m.group("triple") else ""
                binary = "" if "/examples/" in token or "/deps/" in token else exe
                what = "--example " + shell_word(exe) if "/examples/" in token else (
                    "--tests" if "/deps/" in token else "--bin " + shell_word(exe))
                new_parts = [list(t) for t in parts]
                new_parts[i][j] = fixed
                return CommandEvidence(f"the program `{shell_word(token)}` is a cargo dev-profile (debug) binary",
                                       _join(new_parts, original), f"cargo build --release {what}{triple}", "cargo",
                                       binary)
            m = _CMAKE_DEBUG_DIR.search(token)
            if m:
                folder = token[: m.end("dir")]
                release_folder = re.sub(r"debug$", "release", folder)
                new_parts = [list(t) for t in parts]
                new_parts[i][j] = token.replace(folder, release_folder, 1)
                return CommandEvidence(f"the program `{shell_word(token)}` lives in the debug build folder "
                                       f"`{shell_word(folder + '/')}`", _join(new_parts, original),
                                       f"cmake -S . -B {shell_word(release_folder)} -DCMAKE_BUILD_TYPE=Release && "
                                       f"cmake --build {shell_word(release_folder)}", "cmake")
            m = _MULTI_CONFIG_DEBUG.search(token)
            if m and i == 0 and j == 0:  # only the program itself: "Debug/" is too common a word elsewhere
                build_dir = token[: m.start()] or "."
                new_parts = [list(t) for t in parts]
                new_parts[i][j] = re.sub(r"(^|/)Debug/(?=[^/]+$)", r"\1Release/", token)
                return CommandEvidence(f"the program `{shell_word(token)}` is in the Debug configuration folder "
                                       "of a multi-config build", _join(new_parts, original),
                                       f"cmake --build {shell_word(build_dir)} --config Release", "cmake")
    return None


_DEBUG_PYTHON = re.compile(r"^(python[\d.]*)(?:-dbg|d)$")
_SANITIZERS = ("compute-sanitizer", "cuda-memcheck")
_SANITIZER_WORDS = {"yes", "no", "full", "all", "none", "memcheck", "racecheck", "initcheck", "synccheck"}
_SANITIZER_VALUED = {"--tool", "--log-file", "--save", "--print-limit", "--launch-timeout", "--kernel-name",
                     "--kernel-regex", "--filter", "--exclude", "--leak-check", "--racecheck-report",
                     "--error-exitcode", "--target-processes", "--show-backtrace", "--padding"}


def _tool_evidence(parts: list[list[str]], original: list[str], flat: list[tuple[int, int, str]]) -> CommandEvidence | None:
    """The program started by a debug interpreter or under a CUDA sanitizer (the first token of the command)."""
    if not flat:
        return None
    first = PurePosixPath(flat[0][2].replace("\\", "/")).name
    m = _DEBUG_PYTHON.match(first)
    if m:
        new_parts = [list(t) for t in parts]
        i, j, token = flat[0]
        new_parts[i][j] = token[: len(token) - len(first)] + m.group(1)
        return CommandEvidence(f"`{shell_word(first)}` is a debug build of the Python interpreter (unoptimized, with extra "
                               "checks): host time per launch is several times that of a release interpreter",
                               _join(new_parts, original), "", "python")
    if first.removesuffix(".exe") in _SANITIZERS:
        tokens = [t for _, _, t in flat]
        k = 1
        while k < len(tokens) and tokens[k].startswith("-"):
            takes_value = "=" not in tokens[k] and k + 1 < len(tokens) and (
                tokens[k] in _SANITIZER_VALUED or tokens[k + 1].lower() in _SANITIZER_WORDS)
            k += 2 if takes_value else 1
        program = shell_join(tokens[k:]) if k < len(tokens) else "<your program>"
        return CommandEvidence(f"the program runs under `{shell_word(first)}`, which instruments every memory access and "
                               "API call: kernels run 10x-100x slower and host gaps are the tool's", program, "",
                               "tool")
    return None


def _cargo_evidence(parts: list[list[str]], original: list[str], flat: list[tuple[int, int, str]], at: int,
                    env: Mapping[str, str]) -> CommandEvidence | None:
    """``cargo [+toolchain] [global options] run|test ...`` without a release flag (``flat[at]`` is cargo)."""
    tokens = [t for _, _, t in flat]
    k = at + 1
    while k < len(tokens) and (tokens[k].startswith("+") or tokens[k].startswith("-")):
        k += 2 if tokens[k] in _CARGO_GLOBAL_WITH_VALUE else 1  # toolchain (+nightly) and global options
    if k >= len(tokens) or tokens[k] not in _CARGO_RUNS:
        return None
    sub = tokens[k]
    end = tokens.index("--", k) if "--" in tokens[k:] else len(tokens)  # after `--`: the program's own flags
    profile, profile_at = None, []
    for n in range(k + 1, end):
        arg = tokens[n]
        if arg in ("-r", "--release") or re.fullmatch(r"-[qv]*r[qv]*", arg):
            return None
        if arg == "--profile" and n + 1 < end:
            profile, profile_at = tokens[n + 1], [n, n + 1]
        elif arg.startswith("--profile="):
            profile, profile_at = arg.split("=", 1)[1], [n]
    if profile is not None and profile not in _DEBUG_PROFILES:
        return None  # a custom profile: cannot tell whether it inherits dev or release
    # The dev profile made fast on purpose (CARGO_PROFILE_DEV_OPT_LEVEL=2/3) is not the slow debug build.
    if str(env.get("CARGO_PROFILE_DEV_OPT_LEVEL", "")).strip('"') in ("2", "3"):
        return None
    new_parts = [list(t) for t in parts]
    for n in sorted(profile_at, reverse=True):
        i, j, _ = flat[n]
        del new_parts[i][j]
    i, j, _ = flat[k]
    new_parts[i].insert(j + 1, _CARGO_RUNS[sub])
    how = f"`cargo {sub}` with the {profile} profile" if profile else f"`cargo {sub}` without `-r`/`--release`"
    return CommandEvidence(f"the program was started by {how}, which builds the dev (debug) profile",
                           _join(new_parts, original), "", "cargo")
