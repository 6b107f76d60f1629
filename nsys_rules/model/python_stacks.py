"""nsys's Python stacks of a trace, decoded once: the samples and the backtraces at CUDA calls, each stack's site.

A trace captured with nsys's Python sampling (``--python-sampling=true``) holds the Python stack of
each sampled thread every sampling period (1 ms by default); one captured with
``--python-backtrace=cuda`` (which nsys honours only with ``--cudabacktrace`` and CPU sampling)
holds the stack at each CUDA call it took a backtrace of. :mod:`.python_payload` decodes the
payloads; this module resolves them into :class:`PythonStacks` (kept per trace), each stack with its
*site*: the innermost frame of the user's own code, or the innermost frame when the stack holds
none (library frames: :func:`is_library_file`). :mod:`.python_sites` groups them into places.

A trace without Python stacks gives empty stacks and says why (:attr:`PythonStacks.reason`, with
the capture or export that would record them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from nsys_rules.model.python_payload import (BACKTRACE_SCHEMA, NVTX_MARK, SAMPLING_SCHEMA, Stacks, decode,
                                             display_name, read_layouts)
from nsys_rules.model.trace import Trace

#: Path pieces of code that is not the user's: installed packages, the standard library, the
#: interpreter's frozen modules, and the source trees of frameworks run from a checkout.
_LIBRARY_PATH = re.compile(
    r"(^<|[/\\](site|dist)-packages[/\\]|[/\\]lib[/\\]python\d+(\.\d+)?[/\\]|[/\\]lib-python[/\\]"
    r"|[/\\]Lib[/\\]"  # Windows standard library
    r"|[/\\](torch|transformers|accelerate|deepspeed|vllm|sglang|jax|jaxlib|flax|triton|numpy|tensorflow|keras"
    r"|lightning|pytorch_lightning|apex|tensorrt_llm|diffusers|datasets|tokenizers|safetensors)[/\\])")

CAPTURE_FIX = ("capture with `nsys-rules profile --python -- CMD` (nsys --python-sampling=true "
               "--python-backtrace=cuda --cudabacktrace=sync:0,memory:0 --sample=process-tree), then export with "
               "`nsys export --type=sqlite --include-blobs=true`")
BLOBS_FIX = ("re-export the report with its payloads: `nsys export --type=sqlite --include-blobs=true "
             "--force-overwrite=true -o NAME.sqlite NAME.nsys-rep`")


def is_library_file(path: str) -> bool:
    """Whether a frame's file is library code (installed packages, the standard library, frameworks), not the user's."""
    return bool(_LIBRARY_PATH.search(path)) or not path


@dataclass(frozen=True)
class PythonFrame:
    """One Python frame: function, file and line."""

    function: str
    file: str
    line: int

    @property
    def where(self) -> str:
        """``file:line``."""
        return f"{self.file}:{self.line}"

    @property
    def short_where(self) -> str:
        """``file:line`` with an installed package's path cut to the package (``transformers/generation/utils.py:383``).

        The user's own files keep their path: it is what they open.
        """
        # The last packages folder of the path: what follows it names the package.
        cut = max(self.file.replace("\\", "/").rfind(f"/{folder}/") for folder in ("site-packages", "dist-packages"))
        where = self.file[cut + len("/site-packages/"):] if cut >= 0 else self.file
        return f"{where}:{self.line}"

    def __str__(self) -> str:
        return f"{self.function} ({self.where})"


@dataclass(frozen=True)
class PythonSite:
    """Where a share of samples or calls sits in the program.

    ``frame`` is the innermost frame of the user's code (``user_code``), or the innermost frame when
    the stacks held none of it; ``inner`` is the innermost frame seen most often under it (the
    library line actually running, or making the CUDA call), None when that is ``frame`` itself.
    ``count`` samples or calls, ``share`` of all given; ``time_ns``: the calls' summed duration
    (:func:`call_site`), or samples x the sampling period (:func:`host_sites`, an estimate);
    ``source``: where its stacks came from, ``+``-joined: ``backtraces`` (taken at the calls),
    ``samples`` (taken while the calls ran, or in the host intervals), ``nearby samples`` (just before a
    call: the user frame holds, ``inner`` is only near the call).
    """

    frame: PythonFrame
    user_code: bool
    count: int
    share: float
    time_ns: int
    inner: PythonFrame | None
    source: str

    def to_json(self) -> dict[str, Any]:
        """The site as JSON values."""
        out: dict[str, Any] = {"function": self.frame.function, "file": self.frame.file, "line": self.frame.line,
                               "user_code": self.user_code, "count": self.count, "share": round(self.share, 4),
                               "time_ns": self.time_ns, "source": self.source}
        if self.inner is not None:
            out["inner"] = {"function": self.inner.function, "file": self.inner.file, "line": self.inner.line}
        return out


@dataclass(frozen=True, eq=False)
class StackSet:
    """Decoded stacks of one kind with their names resolved and each stack's site."""

    stacks: Stacks
    #: Distinct function names and files; frame ``j`` is ``functions[function_code[j]]`` in ``files[file_code[j]]``.
    functions: np.ndarray
    function_code: np.ndarray
    files: np.ndarray
    file_code: np.ndarray
    #: Per stack: the frame index of its site (-1: an empty stack) and whether it is the user's code.
    site: np.ndarray
    user: np.ndarray

    def __len__(self) -> int:
        return len(self.stacks)

    def frame(self, j: int) -> PythonFrame:
        """Frame ``j`` (an index into the frame arrays)."""
        return PythonFrame(str(self.functions[self.function_code[j]]), str(self.files[self.file_code[j]]),
                           int(self.stacks.line[j]))

    def stack(self, i: int) -> list[PythonFrame]:
        """Stack ``i``, innermost frame first."""
        first = int(self.stacks.first[i])
        return [self.frame(j) for j in range(first, first + int(self.stacks.depth[i]))]


@dataclass(frozen=True, eq=False)
class PythonStacks:
    """A trace's Python stacks: periodic samples and backtraces at CUDA calls.

    Either may be None. ``reason``/``fix``: why the trace has no samples, and the capture or
    export that records them (None when it has); ``backtrace_note``: why it has no backtraces at
    CUDA calls when it has samples. ``period_ns``: the median time between two samples of a thread.
    """

    samples: StackSet | None
    backtraces: StackSet | None
    period_ns: int
    reason: str | None = None
    fix: str | None = None
    backtrace_note: str | None = None
    undecodable: int = 0

    @property
    def available(self) -> bool:
        """Whether the trace holds any decoded Python stack."""
        return bool(self.samples is not None and len(self.samples) or self.backtraces is not None and len(self.backtraces))


def python_stacks(trace: Trace) -> PythonStacks:
    """The trace's Python stacks (decoded once per trace)."""
    return trace.memo(("python_stacks.python_stacks",), lambda: _read(trace))


def _read(trace: Trace) -> PythonStacks:
    export = trace.export
    layouts = read_layouts(
        export.rows("NVTX_PAYLOAD_SCHEMAS", ["domainId", "schemaId", "name", "payloadSize"]),
        export.rows("NVTX_PAYLOAD_SCHEMA_ENTRIES", ["domainId", "schemaId", "idx", "flags", "type", "name",
                                                    "arrayOrUnionDetail", "offset"]),
        export.rows("NVTX_PAYLOAD_ENUMS", ["domainId", "schemaId", "size"]))
    if not layouts or not trace.has("nvtx"):
        return PythonStacks(None, None, 0, "the capture recorded no Python stacks", CAPTURE_FIX)
    nvtx = trace.frame("nvtx", ["start", "pid", "tid", "event_type", "payload"])
    marks = nvtx["event_type"].to_numpy() == NVTX_MARK
    payload = nvtx["payload"].to_numpy()[marks]
    with_blob = np.fromiter((isinstance(b, (bytes, bytearray)) for b in payload), bool, len(payload))
    if not with_blob.any():
        why = ("the export left the Python frames out (nsys writes NVTX payloads only with --include-blobs=true)"
               if len(payload) and SAMPLING_SCHEMA in layouts else "the capture recorded no Python stacks")
        return PythonStacks(None, None, 0, why, BLOBS_FIX if "left" in why else CAPTURE_FIX)
    start = nvtx["start"].to_numpy()[marks][with_blob]
    pid = np.asarray(nvtx["pid"].to_numpy()[marks])[with_blob]
    tid = np.asarray(nvtx["tid"].to_numpy()[marks])[with_blob]
    payload = payload[with_blob]
    decoded: dict[str, StackSet] = {}
    undecodable = 0
    for name, layout in layouts.items():
        stacks = decode(payload, start, pid, tid, layout)
        undecodable += stacks.undecodable
        if len(stacks):
            decoded[name] = _resolve(trace, stacks, name)
    samples, backtraces = decoded.get(SAMPLING_SCHEMA), decoded.get(BACKTRACE_SCHEMA)
    reason = fix = note = None
    if samples is None:
        reason, fix = "the capture recorded no periodic Python samples", CAPTURE_FIX
    if backtraces is None:
        note = ("no Python backtraces at CUDA calls: nsys takes one only at a call it takes a CUDA backtrace of "
                "(--python-backtrace=cuda needs --cudabacktrace, e.g. sync:0, and CPU sampling)")
    return PythonStacks(samples, backtraces, _period(samples), reason, fix, note, undecodable)


def _resolve(trace: Trace, stacks: Stacks, name: str) -> StackSet:
    functions, function_code = _names(trace, stacks.function, f"python.{name}.function")
    files, file_code = _names(trace, stacks.file, f"python.{name}.file")
    library = np.fromiter((is_library_file(f) for f in files), bool, len(files))
    user_frame = ~library[file_code] if len(file_code) else np.zeros(0, bool)
    site = np.full(len(stacks), -1, np.int64)
    full = np.flatnonzero(stacks.depth > 0)
    if len(full):
        big = np.iinfo(np.int64).max
        candidates = np.where(user_frame, np.arange(len(user_frame), dtype=np.int64), big)
        innermost_user = np.minimum.reduceat(candidates, stacks.first[full])
        site[full] = np.where(innermost_user < big, innermost_user, stacks.first[full])
    user = np.zeros(len(stacks), bool)
    user[full] = user_frame[site[full]]
    return StackSet(stacks, functions, function_code, files, file_code, site, user)


def _names(trace: Trace, ids: np.ndarray, what: str) -> tuple[np.ndarray, np.ndarray]:
    """String ids as (distinct display names, a code per id)."""
    if not len(ids):
        return np.empty(0, object), np.zeros(0, np.int32)
    names = trace.export.resolve_strings(ids, what)
    categories = np.array([display_name(str(c)) for c in names.categories], dtype=object)
    codes = np.asarray(names.codes, np.int64)
    if (codes < 0).any():  # a NULL handle: an empty name
        categories = np.append(categories, "")
        codes = np.where(codes < 0, len(categories) - 1, codes)
    return categories, codes.astype(np.int32)


def _period(samples: StackSet | None) -> int:
    if samples is None or len(samples) < 2:
        return 0
    frame = pd.DataFrame({"tid": samples.stacks.tid, "time": samples.stacks.time}).sort_values(["tid", "time"])
    steps = frame.groupby("tid")["time"].diff().dropna().to_numpy()
    return int(np.median(steps)) if len(steps) else 0
