"""debug-build: the profiled program is a debug build, so its trace misleads."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Iterable, Mapping

import numpy as np

from nsys_rules.errors import MissingData
from nsys_rules.findings import Finding, Location, Severity
from nsys_rules.rule import Rule, RuleContext, metric
from nsys_rules.textsafe import shell_join, shell_word

from ._common import pct, recapture_command
from .gemv_dominance import config_weight_bytes, device_shares, gemv_mask, measure_bandwidth, weight_bytes_value

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
class Options:
    """Options of debug-build."""

    weight_bytes: object = field(default=None, metadata={
        "help": "bytes the GEMVs read per step, for the kernel evidence (as gemv-dominance.weight_bytes); unset: the "
                "host-to-device model load when the trace holds it"})
    model_config: str = field(default="", metadata={
        "help": "path to the model's Hugging Face config.json, for the weight bytes (as gemv-dominance.model_config)"})
    weight_dtype_bytes: float = field(default=0.0, metadata={
        "help": "bytes per weight for model_config (0: from its torch_dtype)"})
    steps: int = field(default=0, metadata={
        "help": "decode steps (tokens) in the window, as gemv-dominance.steps; 0: one per step-range instance"})
    max_bandwidth_fraction: float = field(default=0.05, metadata={
        "help": "GEMV kernels below this fraction of peak bandwidth look like device code built with -G"})
    min_gemv_share: float = field(default=0.3, metadata={
        "help": "GEMV share of kernel time needed before their bandwidth is used as evidence"})
    min_load_bytes: int = field(default=16 * 1024**2, metadata={
        "help": "host-to-device bytes before the steady state needed to count them as the model load"})

    def __post_init__(self) -> None:
        object.__setattr__(self, "weight_bytes", weight_bytes_value(self.weight_bytes))
        if self.model_config:
            config_weight_bytes(self.model_config, self.weight_dtype_bytes)  # a bad path or config fails early
        if not 0 < self.max_bandwidth_fraction <= 1:
            raise ValueError(f"max_bandwidth_fraction must be in (0, 1], not {self.max_bandwidth_fraction!r}")


@dataclass(frozen=True)
class CommandEvidence:
    """Why the command line reads as a debug build, and the release equivalent."""

    reason: str
    release_command: str
    build_step: str  # the command that builds the release binary first ("" when the run command builds it)
    kind: str  # "cargo" or "cmake": device code is built with -G only in some setups
    binary: str = ""  # the cargo --bin target, unquoted ("" unless the program is a target/debug binary)


# -- command line --------------------------------------------------------------------------
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


# -- the rule ------------------------------------------------------------------------------
class DebugBuild(Rule):
    """The profiled program is a debug build.

    What it detects: the command line in the capture metadata (`PROCESS_0:COMMAND` and
    `PROCESS_0:ARGUMENT_n`) runs a debug build: an executable under `target/debug/` (also
    `target/<triple>/debug/`, `deps/`, `examples/`), `cargo run`/`cargo test` without
    `-r`/`--release` (or with `--profile dev`), a program in a Debug build folder
    (`cmake-build-debug/`, `build-debug/`, a multi-config `Debug/`), a debug Python
    interpreter (`python3-dbg`, `python3.11d`), or the program run under `compute-sanitizer` /
    `cuda-memcheck`. Kernel evidence: when the
    bytes the GEMVs read per step are known (`weight_bytes` or a captured host-to-device model
    load), GEMV-class kernels reaching under `max_bandwidth_fraction` of peak bandwidth look like
    device code built with `-G`; without a debug command line that alone is a warning.
    Why it hurts: unoptimized host code inflates launch overhead and host gaps, and device
    code built with `-G` runs 10x or more slower; every number in such a trace describes the
    debug build, not the program, so optimizing from it misleads.
    Evidence: the command line and the signal found; GEMV time per step and share; achieved
    bandwidth against peak when the bytes are known.
    Next optimizations: re-capture the release build: the exact command is given (`cargo run
    -r ...`, `target/release/...`, a Release build folder).
    Options: `weight_bytes`, `model_config`, `weight_dtype_bytes`, `steps`, `max_bandwidth_fraction`,
    `min_gemv_share`, `min_load_bytes`.
    Requires: the capture metadata (command line); the kernel table for the kernel evidence.
    False positives: a custom cargo profile (`--profile bench-fast`) is not judged; a dev
    profile made fast with `CARGO_PROFILE_DEV_OPT_LEVEL=2/3` is not reported; a CMake Debug
    build optimizes device code unless `-G` was added, so its kernels may be fine while its host
    timings are not.
    """

    name = "debug-build"
    title = "Profiled program is a debug build"
    default_severity = Severity.ERROR
    requires = ()
    optional = ("kernels", "memcpy")
    columns = {"kernels": ("start", "end", "name", "device_id", "correlation_id", "pid"),
               "memcpy": ("start", "bytes", "copy_kind", "device_id", "dst_device_id", "correlation_id", "pid")}
    window = "steady"
    Options = Options

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        capture = ctx.trace.capture
        evidence = command_evidence(capture.command, capture.environment)
        kernel = self._kernel_evidence(ctx)
        if evidence is None and kernel is None:
            if not capture.command and not ctx.trace.has("kernels"):
                raise MissingData("the export records no command line and no kernels to judge",
                                  "capture with a recent nsys (`nsys profile ...` records PROCESS_0:COMMAND)")
            return
        metrics = dict(kernel["metrics"]) if kernel else {}
        if evidence is not None:
            message = f"The profiled command `{capture.command_line}` is a debug build: {evidence.reason}."
            if kernel:
                message += " GEMV-class kernels reach only " + kernel["text"]
            else:
                summary, summary_metrics = self._gemv_summary(ctx)
                message += (" " + summary) if summary else ""
                metrics.update(summary_metrics)
            if evidence.kind == "cargo":
                message += (" A cargo debug build runs host code unoptimized (launch overhead and host gaps "
                            "inflated), and a build script that compiles the CUDA kernels may build them for debug "
                            "too (-G / -O0): kernels can run 10x+ slower than in the release build.")
            elif evidence.kind == "cmake":
                message += (" A CMake Debug build runs host code at -O0 (launch overhead and host gaps inflated); "
                            "device code is also slow if -G is in CMAKE_CUDA_FLAGS_DEBUG.")
            else:
                message += " Host and kernel timings of this trace describe the debug setup, not the program."
            recapture = recapture_command(ctx.trace, command=evidence.release_command)
            build = f"`{evidence.build_step}`, then " if evidence.build_step else ""
            alternative = ""
            if evidence.kind == "cargo" and evidence.binary:
                program_args = shell_join(capture.command[1:])
                cargo_run = f"cargo run -r --bin {shell_word(evidence.binary)}" + (
                    f" -- {program_args}" if program_args else "")
                alternative = (f" (or in one step: `{recapture_command(ctx.trace, command=cargo_run)}`)")
            recommendation = (f"Profile the release build: {build}re-capture with `{recapture}`{alternative}. "
                              "Do not optimize from this trace.")
            yield ctx.finding(message, recommendation, severity=Severity.ERROR, metrics=metrics,
                              location=Location(), key="command")
            return
        assert kernel is not None
        message = ("GEMV-class kernels reach only " + kernel["text"] + " That is typical of device code compiled "
                   "with -G (device debug), although the command line does not look like a debug build.")
        recommendation = ("Check the nvcc flags of the CUDA kernels (build script / CMAKE_CUDA_FLAGS): remove `-G` "
                          "(keep `-lineinfo` for source-level profiling) and re-capture with "
                          f"`{recapture_command(ctx.trace)}`; if the weight bytes given are wrong, fix "
                          f"`--set debug-build.weight_bytes=...`.")
        yield ctx.finding(message, recommendation, severity=Severity.WARNING, metrics=metrics,
                          title="GEMV kernels at a few percent of peak bandwidth (device debug build?)",
                          location=Location(device=kernel["device"]), key="kernels")

    def _kernel_evidence(self, ctx: RuleContext) -> dict | None:
        opts = ctx.options
        if not ctx.trace.has("kernels"):
            return None
        kernels = ctx.frame("kernels")
        if kernels.empty:
            return None
        is_gemv = gemv_mask(kernels["name"])
        shares = device_shares(kernels, is_gemv)
        device = int(shares.index[0])
        share = float(shares.iloc[0]["share"] or 0.0)
        if share < opts.min_gemv_share:
            return None
        bw, _why = measure_bandwidth(ctx, kernels, is_gemv, device, weight_bytes=opts.weight_bytes,
                                     steps_option=opts.steps, peak_option=0.0, min_load_bytes=opts.min_load_bytes)
        if bw is None or bw.fraction is None or bw.fraction >= opts.max_bandwidth_fraction:
            return None
        source = {"option": "given", "model config": "from the model config"}.get(bw.source, "from the model load")
        text = (f"{100 * bw.fraction:.1f} % of the {(bw.peak or 0) / 1e12:.2f} TB/s peak: {bw.weight_bytes / 1e9:.3f} GB of "
                f"weights per step ({source}) in "
                f"{bw.gemv_ns_per_step / 1e3:.0f} us of GEMV time per step = {bw.achieved / 1e9:.1f} GB/s.")
        metrics = {"achieved_bandwidth": metric(bw.achieved, "B/s"), "bandwidth_fraction": metric(100 * bw.fraction, "%"),
                   "gemv_time_per_step": metric(bw.gemv_ns_per_step, "ns"), "weight_bytes": metric(bw.weight_bytes, "B")}
        return {"text": text, "metrics": metrics, "device": device}

    @staticmethod
    def _gemv_summary(ctx: RuleContext) -> tuple[str, dict]:
        """GEMV time of the window (text and metrics): the kernel side when the weight bytes are unknown."""
        if not ctx.trace.has("kernels"):
            return "", {}
        kernels = ctx.frame("kernels")
        if kernels.empty:
            return "", {}
        dur = (kernels["end"] - kernels["start"]).to_numpy()
        is_gemv = gemv_mask(kernels["name"])
        steps = len(ctx.window.steps)
        gemv_ns = float(dur[is_gemv].sum())
        total_ns = float(np.sum(dur))
        metrics = {"kernel_time": metric(total_ns, "ns"), "gemv_time": metric(gemv_ns, "ns")}
        if gemv_ns <= 0:
            return "", metrics
        metrics["gemv_share"] = metric(pct(gemv_ns, total_ns), "%")
        if steps:
            metrics["gemv_time_per_step"] = metric(gemv_ns / steps, "ns")
        per_step = f", {gemv_ns / steps / 1e3:.0f} us per step" if steps else ""
        return (f"GEMV-class kernels take {gemv_ns / 1e6:.2f} ms ({pct(gemv_ns, total_ns):.0f} % of kernel time"
                f"{per_step}); give `--set debug-build.weight_bytes=<bytes per step>` to compare them with the "
                "GPU's peak bandwidth.", metrics)


RULE = DebugBuild
