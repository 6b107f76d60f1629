"""Finding the ``nsys`` binary, the one place every command looks for it.

nsys is often installed but not on PATH: SSH and tmux sessions skip the shell profile that adds
it, the CUDA toolkit puts it under a versioned folder, and some images carry it only inside Nsight
Compute. So after an explicit choice (``--nsys`` or ``$NSYS_RULES_NSYS``) and PATH, the standard
install places are searched, newest version first. Whoever reports a missing nsys uses
:func:`missing_message`, so ``check``, ``profile`` and ``doctor`` say the same thing.

Relative ``PATH`` entries (``.``, an empty entry, ``bin``) are never searched, for nsys nor for the
tools run beside it (:func:`which_absolute`): they name a folder of wherever the command runs, and
``nsys-rules doctor`` in a folder holding an ``./nsys`` would run that file.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from nsys_rules.textsafe import shell_word

#: Environment variable naming the nsys binary to use (as ``--nsys`` does).
NSYS_ENV = "NSYS_RULES_NSYS"

#: Where nsys installs put the binary, as glob patterns; searched in this order after PATH.
STANDARD_PLACES: tuple[str, ...] = (
    "/usr/local/cuda/bin/nsys",
    "/usr/local/cuda/nsight-systems-*/bin/nsys",
    "/usr/local/cuda-*/bin/nsys",
    "/usr/local/cuda-*/nsight-systems-*/bin/nsys",
    "/opt/nvidia/nsight-systems*/bin/nsys",
    "/opt/nvidia/nsight-systems*/*/bin/nsys",
    "/opt/nvidia/nsight-systems*/target-linux-*/nsys",
    "/opt/nvidia/nsight-systems*/*/target-linux-*/nsys",
    "/opt/nvidia/nsight-compute/*/host/target-linux-*/nsys",
    "/usr/lib/nsight-systems/bin/nsys",
)

INSTALL_HINT = ("install Nsight Systems (https://developer.nvidia.com/nsight-systems, or with the CUDA toolkit) and "
                "put its bin folder on PATH")


@dataclass(frozen=True)
class NsysLocation:
    """Where nsys was found (``path`` None when nowhere) and what was searched."""

    path: Path | None
    #: "--nsys", "$NSYS_RULES_NSYS", "PATH" or "standard place"; "" when not found.
    source: str
    #: PATH followed by the standard places, as shown to the user.
    searched: tuple[str, ...]
    #: Relative PATH entries left out of the search (see :func:`absolute_path`).
    ignored: tuple[str, ...] = ()

    @property
    def found(self) -> bool:
        return self.path is not None

    @property
    def on_path(self) -> bool:
        """True when a plain ``nsys`` in a shell would run this binary."""
        return self.source == "PATH"

    def path_fix(self) -> str:
        """The shell line that puts this nsys on PATH (a placeholder folder when none was found)."""
        folder = shell_word(str(self.path.parent)) if self.path else "/opt/nvidia/nsight-systems/<version>/bin"
        return f"export PATH={folder}:$PATH"


def absolute_path(value: str) -> tuple[str, tuple[str, ...]]:
    """A ``PATH`` value without its relative entries, and those entries (an empty one shown as ``''``)."""
    entries = value.split(os.pathsep) if value else []
    kept = [e for e in entries if os.path.isabs(e)]
    return os.pathsep.join(kept), tuple(e for e in entries if not os.path.isabs(e))


def which_absolute(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """``shutil.which(name)`` over the absolute ``PATH`` entries only."""
    env = os.environ if environ is None else environ
    return shutil.which(name, path=absolute_path(env.get("PATH", ""))[0])


def ignored_note(location: NsysLocation) -> str | None:
    """A line naming the relative PATH entries the search left out; None when there were none."""
    if not location.ignored:
        return None
    shown = ", ".join(repr(e) for e in location.ignored[:5]) + (", ..." if len(location.ignored) > 5 else "")
    return (f"PATH holds relative folder(s) {shown}: not searched for nsys (they mean a different folder "
            "wherever a command runs); put absolute folders on PATH")


def locate_nsys(explicit: str | None = None, environ: Mapping[str, str] | None = None,
                places: Sequence[str] | None = None) -> NsysLocation:
    """Find nsys: ``explicit`` (the --nsys flag), then $NSYS_RULES_NSYS, PATH, the standard places.

    An explicit choice that is not an executable file counts as not found (no silent fallback to
    another nsys): the user asked for that one.
    """
    env = os.environ if environ is None else environ
    places = STANDARD_PLACES if places is None else tuple(places)
    searched = ("PATH",) + tuple(places)
    path_value, ignored = absolute_path(env.get("PATH", ""))
    for value, source in ((explicit, "--nsys"), (env.get(NSYS_ENV), f"${NSYS_ENV}")):
        if value:
            # A bare name is looked up on PATH; a path with a folder (./nsys included) is the user's own choice.
            bare = os.sep not in value and shutil.which(value, path=path_value)
            path = Path(bare or value).expanduser()
            ok = path.is_file() and os.access(path, os.X_OK)
            return NsysLocation(path if ok else None, source if ok else "", (f"{source} {value}",),
                                ignored if os.sep not in value else ())
    on_path = shutil.which("nsys", path=path_value)
    if on_path:
        return NsysLocation(Path(on_path), "PATH", searched, ignored)
    for pattern in places:
        for candidate in sorted(glob.glob(pattern), key=_version_key, reverse=True):
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return NsysLocation(Path(candidate), "standard place", searched, ignored)
    return NsysLocation(None, "", searched, ignored)


def _version_key(path: str) -> tuple[int, ...]:
    # "2025.3.1" sorts after "2024.10.2": compare the numbers, not the text.
    return tuple(int(n) for n in re.findall(r"\d+", path))


def missing_message(location: NsysLocation) -> str:
    """One line: where nsys was looked for and how to get it."""
    where, fix = missing_parts(location)
    return f"{where}; {fix}"


def missing_parts(location: NsysLocation) -> tuple[str, str]:
    """(where nsys was looked for, how to get it): ``profile`` shows them as a stop and its fix line."""
    if location.searched and location.searched[0].startswith(("--nsys", "$")):
        return f"nsys not found: {location.searched[0]} is not an executable file", f"{INSTALL_HINT}: {location.path_fix()}"
    places = _folders(location.searched[1:])
    # Two places and a count, not all ten: the whole list made a 600-character line (issue 42); doctor lists them.
    shown = ", ".join(places[:2]) + (f" and {len(places) - 2} more places (`nsys-rules doctor` lists them)"
                                     if len(places) > 2 else "")
    where = "on PATH and in " + shown if places else "on PATH"
    return f"nsys not found (looked {where})", f"{INSTALL_HINT}: {location.path_fix()}"


def _folders(patterns: Sequence[str]) -> list[str]:
    return [p.rsplit("/", 1)[0] for p in patterns]


def off_path_note(location: NsysLocation) -> str | None:
    """A note when nsys was found in a standard place but a shell would not run it; None otherwise."""
    if location.source != "standard place":
        return None
    return f"nsys is not on PATH; using {location.path} (to make it permanent: {location.path_fix()})"


def nsys_version(nsys: Path, timeout: float = 60) -> str:
    """``nsys --version`` as a version string (``2025.3.2.474-...``); raises OSError when it cannot run."""
    try:
        proc = subprocess.run([str(nsys), "--version"], capture_output=True, text=True, timeout=timeout,
                              errors="replace")
    except subprocess.TimeoutExpired:
        raise OSError(f"`{nsys} --version` did not answer within {timeout:.0f} s") from None
    text = (proc.stdout + proc.stderr).strip()
    if proc.returncode != 0:
        last = text.splitlines()[-1] if text else "no output"
        raise OSError(f"`{nsys} --version` failed with exit code {proc.returncode}: {last}")
    match = re.search(r"version\s+(\S+)", text)
    return match.group(1) if match else (text.splitlines()[0] if text else "unknown")


def importer_path(nsys: Path) -> Path | None:
    """The QdstrmImporter that turns nsys's raw recording into a report, found beside the nsys install.

    Installs differ in the host folder's name: ``host-linux-x64`` beside ``target-linux-x64`` in
    Nsight Systems, ``linux-desktop-glibc_2_11_3-x64`` beside it in the copy Nsight Compute ships;
    so every sibling folder of the nsys binary and of its parents is looked at.
    """
    real = nsys.resolve()
    for folder in (real.parent, *real.parents[:3]):
        for candidate in [folder / "QdstrmImporter", *sorted(folder.glob("*/QdstrmImporter"))]:
            if candidate.is_file():
                return candidate
    return None


def missing_libraries(binary: Path, environ: Mapping[str, str] | None = None, timeout: float = 30) -> list[str] | None:
    """Shared libraries ``binary`` needs that the loader cannot find (``ldd``); None when ldd cannot tell.

    This is how a capture that records fine but never becomes a report shows up before it is run:
    on hosts without libdw the importer cannot start, and nsys leaves only a ``.qdstrm`` behind.
    """
    ldd = which_absolute("ldd", environ)
    if ldd is None:
        return None
    try:
        proc = subprocess.run([ldd, str(binary)], capture_output=True, text=True, timeout=timeout, errors="replace",
                              env=dict(os.environ if environ is None else environ))
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_ldd(proc.stdout) if proc.returncode == 0 else None


def parse_ldd(text: str) -> list[str]:
    """The library names ``ldd`` reports as ``not found``."""
    return [line.split("=>")[0].strip() for line in text.splitlines() if "not found" in line and "=>" in line]


def importer_problem(nsys: Path, environ: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """(what is wrong, the fix) when nsys's importer misses shared libraries; None when fine or unknown."""
    importer = importer_path(nsys)
    missing = missing_libraries(importer, environ) if importer else None
    if not missing:
        return None
    problem = (f"nsys's importer {importer} cannot load {', '.join(missing)}: a capture would record but never "
               "become a report (nsys leaves only a .qdstrm)")
    packages = ("Debian/Ubuntu: `sudo apt-get install libdw1 libelf1`; RHEL/Fedora: `sudo dnf install elfutils-libs`"
                if any(lib.startswith(("libdw", "libelf")) for lib in missing) else "install the packages that hold them")
    return problem, f"{packages}; or put a folder holding them on LD_LIBRARY_PATH"

