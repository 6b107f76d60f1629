"""Communication kernels by name: the maintained list in ``comm_kernels.toml``, compiled once.

The list is data, not code: a new library's kernels are one ``[[family]]`` entry away. Names
are judged once per distinct name (a categorical's categories), never once per kernel row.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
import numpy as np
import pandas as pd

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib


@dataclass(frozen=True)
class CommNames:
    """The compiled name list: kernel families and the NVTX ranges that wrap communication calls."""

    families: tuple[tuple[str, tuple[re.Pattern[str], ...]], ...]
    nvtx_domains: tuple[str, ...]
    nvtx_ranges: tuple[re.Pattern[str], ...]

    def family(self, *names: str) -> str | None:
        """The family whose pattern matches any of ``names`` (short and demangled name), or None."""
        for family, patterns in self.families:
            for name in names:
                if name and any(p.search(name) for p in patterns):
                    return family
        return None

    @property
    def any_family(self) -> re.Pattern[str] | None:
        """One pattern that matches wherever any family's pattern does (a quick "could any name be communication");
        None when the patterns do not combine into one (global flags inside one, a group name used twice)."""
        return _alternation(tuple(p for _, patterns in self.families for p in patterns))

    def is_comm_range(self, name: str) -> bool:
        """True when an NVTX range called ``name`` wraps a communication call."""
        return bool(name) and any(p.search(name) for p in self.nvtx_ranges)


@lru_cache(maxsize=1)
def comm_names() -> CommNames:
    """The shipped list (``nsys_rules/model/job/comm_kernels.toml``)."""
    text = resources.files("nsys_rules.model.job").joinpath("comm_kernels.toml").read_text(encoding="utf-8")
    return parse_comm_names(text)


def parse_comm_names(text: str) -> CommNames:
    """Compile a list in the ``comm_kernels.toml`` format."""
    data = tomllib.loads(text)
    families = tuple((str(f["name"]), tuple(re.compile(p) for p in f["patterns"])) for f in data.get("family", []))
    nvtx = data.get("nvtx", {})
    return CommNames(families, tuple(nvtx.get("domains", ())), tuple(re.compile(p) for p in nvtx.get("ranges", ())))


@lru_cache(maxsize=8)
def _alternation(patterns: tuple[re.Pattern[str], ...]) -> re.Pattern[str] | None:
    if not patterns:
        return re.compile(r"(?!)")  # matches nothing
    try:
        return re.compile("|".join(f"(?:{p.pattern})" for p in patterns))
    except re.error:  # a pattern with its own global flags, or group names used twice: no alternation
        return None


def family_per_row(short: pd.Series, full: pd.Series, names: CommNames | None = None) -> np.ndarray | None:
    """Family name (object array, None when not communication) of each kernel row; None when no row is.

    ``short`` and ``full`` are the kernels' categorical ``short_name`` and ``name`` columns.
    """
    names = names or comm_names()
    short_codes, short_cats = _codes(short)
    full_codes, full_cats = _codes(full)
    # One judgement per distinct name (a million kernels carry a few hundred), the short name
    # first, the demangled one (namespaces: deep_ep::, symmetric_memory::) where it says nothing.
    # The trailing None is what code -1 (a NULL name) indexes.
    by_short = np.array([names.family(c) for c in short_cats] + [None], dtype=object)
    by_full = np.array([names.family("", c) for c in full_cats] + [None], dtype=object)
    if pd.isna(by_short).all() and pd.isna(by_full).all():
        return None  # the usual one-GPU trace: no per-row array at all
    family = by_short[short_codes]
    missing = pd.isna(family)
    family[missing] = by_full[full_codes[missing]]
    return family


def name_codes(short: pd.Series, full: pd.Series) -> tuple[np.ndarray, list[str]]:
    """A code per kernel row and the label of each code: the short name, else the demangled one.

    Codes, not strings per row: a million kernels carry a few hundred names.
    """
    short_codes, short_cats = _codes(short)
    full_codes, full_cats = _codes(full)
    unnamed = len(short_cats) + len(full_cats)
    blank = np.array([c == "" for c in short_cats] + [True])[short_codes]
    codes = np.where(blank, np.where(full_codes >= 0, len(short_cats) + full_codes.astype(np.int64), unnamed),
                     short_codes.astype(np.int64))
    return codes, [*short_cats, *full_cats, "(unnamed kernel)"]


def _codes(series: pd.Series) -> tuple[np.ndarray, list[str]]:
    cat = series if isinstance(series.dtype, pd.CategoricalDtype) else series.astype("category")
    return cat.cat.codes.to_numpy(), [str(c) for c in cat.cat.categories]
