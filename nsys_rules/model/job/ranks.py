"""Which rank a trace (or a process and GPU inside one) is.

In order of trust: the file name (``-o traces/%h_rank%q{RANK}_%n`` gives ``node1_rank3_1``;
also ``rank3``, ``rank-3``, ``_r3``), then the launcher's environment recorded in the export
(``RANK``, MPI's and Slurm's rank variables, then ``LOCAL_RANK``), then the order of
(trace, GPU, process). Several processes or GPUs inside one trace are ranks of their own and
are numbered by GPU, then process: the environment recorded is the launcher's, not theirs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

#: File-name patterns that carry a rank, tried on the file name then on its folder's name.
_NAME_PATTERNS = (
    re.compile(r"(?:^|[^a-z0-9])rank[_-]?(\d+)(?![0-9])", re.IGNORECASE),
    re.compile(r"(?:^|[_.-])r(\d+)(?=$|[_.-])", re.IGNORECASE),
)

#: Environment variables that hold the global rank, most specific first; LOCAL_RANK-style ones last.
RANK_VARIABLES = ("RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "MV2_COMM_WORLD_RANK", "SLURM_PROCID",
                  "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID")


@dataclass(frozen=True)
class RankHint:
    """A rank read from a trace's file name or recorded environment, and where it came from."""

    rank: int | None
    source: str  # e.g. "file name", "environment RANK"; "" when nothing said


def rank_from_name(path: str) -> int | None:
    """The rank a trace's file name (or its folder's name) carries, or None."""
    p = Path(path)
    for text in (p.stem, p.parent.name):
        for pattern in _NAME_PATTERNS:
            found = pattern.search(text)
            if found:
                return int(found.group(1))
    return None


def rank_from_environment(env: Mapping[str, str]) -> tuple[int, str] | None:
    """(rank, variable) from the recorded environment of the profiled process, or None."""
    for key in RANK_VARIABLES:
        value = str(env.get(key, "")).strip()
        if value.isdigit():
            return int(value), key
    return None


def trace_hint(path: str, env: Mapping[str, str]) -> RankHint:
    """What the file name, then the environment, say about the rank of a one-rank trace."""
    by_name = rank_from_name(path)
    if by_name is not None:
        return RankHint(by_name, "file name")
    by_env = rank_from_environment(env)
    if by_env is not None:
        return RankHint(by_env[0], f"environment {by_env[1]}")
    return RankHint(None, "")


@dataclass(frozen=True)
class Unit:
    """One rank candidate: a (process, GPU) of one trace, with that trace's hint."""

    trace_index: int
    pid: int | None
    device: int | None
    hint: RankHint
    units_in_trace: int


def assign_ranks(units: Sequence[Unit]) -> tuple[list[int], list[str]]:
    """Rank number and how it was found, for each unit (same order as ``units``).

    Hints are used when every trace holds one unit and the hints are distinct; otherwise the
    units are numbered 0.. by (hint or trace order, GPU, process), and the source says why.
    """
    hinted = [u.hint.rank for u in units]
    known = [h for h in hinted if h is not None]
    if units and all(u.units_in_trace == 1 for u in units) and len(known) == len(hinted) \
            and len(set(known)) == len(known):
        return [int(h) for h in known], [u.hint.source for u in units]
    repeated = all(h is not None for h in hinted) and len(set(hinted)) < len(hinted)
    order = sorted(range(len(units)), key=lambda i: (
        units[i].hint.rank if units[i].hint.rank is not None and units[i].units_in_trace == 1 else -1,
        units[i].trace_index, _key(units[i].device), _key(units[i].pid)))
    ranks = [0] * len(units)
    sources = [""] * len(units)
    for number, i in enumerate(order):
        ranks[i] = number
        if units[i].units_in_trace > 1:
            sources[i] = f"GPU {units[i].device} / process {units[i].pid} of a trace with {units[i].units_in_trace} ranks"
        elif repeated:
            sources[i] = f"order of the traces ({units[i].hint.source} repeats across traces)"
        else:
            sources[i] = "order of the traces"
    return ranks, sources


def _key(value: int | None) -> int:
    return -1 if value is None else int(value)
