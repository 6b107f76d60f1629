"""Kernel taxonomy: which class of work a GPU kernel does, from its name.

The classes are the ones a performance reader asks about first: matrix-vector products
(``gemv``, the bandwidth-bound work of batch-1 decode), matrix-matrix products (``gemm``,
including convolutions lowered to implicit GEMM), ``attention``, normalization (``norm``),
``elementwise``, reductions and softmax (``reduce``), data movement done by kernels
(``memory``: copies, fills, transposes, gathers), collective ``communication`` (NCCL and
custom all-reduce) and ``other``.

The taxonomy is data: an ordered list of ``(class, regular expression)`` rules matched
against the kernel's *base name* (the function name without return type, namespaces,
template arguments and parameters), first match wins. Library GEMM kernels whose tile shape
is written into the name (cuBLASLt ``nvjet_*``: ``nvjet_sm90_tst_256x8_64x6_...`` is an
M=256 by N=8 output tile; cuBLAS ``..._tilesize64x8x64_...``; ``..._s16816gemm_bf16_64x16_...``)
are classed by that tile: the library picks a tile with one side of 8 or 16 only when that
side of the problem is that skinny, i.e. a batch-1 (or tiny batch)
matrix-vector product run through the GEMM path. The tile is the launch shape that matters
here: the grid alone does not say which side of the product is skinny.

Extend it without code: :func:`classify` takes ``extra`` patterns (tried before the built-in
rules), and rules expose them as options (``gemv-dominance.extra_gemv_patterns``).
"""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

#: The class labels, in reporting order.
CLASSES = ("gemv", "gemm", "attention", "norm", "elementwise", "reduce", "memory", "communication", "other")

#: One sentence per class, for reports.
DESCRIPTIONS = {
    "gemv": "matrix-vector products (batch-1 decode linear layers; bandwidth-bound)",
    "gemm": "matrix-matrix products and implicit-GEMM convolutions (compute-bound)",
    "attention": "attention kernels (flash/fused SDPA, paged attention)",
    "norm": "normalization (RMSNorm, LayerNorm, BatchNorm)",
    "elementwise": "elementwise and pointwise kernels (activations, adds, casts)",
    "reduce": "reductions, softmax, arg-max/top-k, split-K reductions",
    "memory": "copies, fills, transposes, gathers and concatenations done by kernels",
    "communication": "collectives (NCCL, custom all-reduce, NVSHMEM)",
    "other": "anything the taxonomy does not recognize",
}

# Ordered rules, first match wins. Order matters: attention kernels often carry GEMM words
# (wgmma, "gemm" in cuDNN fused SDPA names), MoE GEMVs carry "moe", and every cuBLAS GEMV
# name contains "gemv" while some GEMM names contain "mv" only by accident (so no bare "mv").
DEFAULT_RULES: tuple[tuple[str, str], ...] = (
    ("communication", r"nccl|nvshmem|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|cross_device_reduce"
                      r"|sendrecv"),
    ("memory", r"reshape_and_cache"),  # the KV-cache write of flash/paged attention: a copy
    ("attention", r"flash|fmha|sdpa|attention|attn|paged_?att|paged_?kv|batch(decode|prefill)with|mha_|_mha"
                  r"|xformers|scaled_dot_product"),
    ("gemv", r"gemv|matvec|mat_vec|gemvx|(^|_)mv_kernel|dot_?product_?kernel"),
    ("reduce", r"pool"),  # xmma/cuDNN pooling kernels carry GEMM-library prefixes
    ("gemm", r"gemm|nvjet|cutlass|xmma|wgmma|matmul|mat_mul|matrixmul|s1688|s884|s16816|h1688|h16816|hmma|imma"
             r"|winograd|implicit_convolve|precomputed_convolve|convolve|conv2d|conv_|fprop|dgrad|wgrad"
             r"|cudnn_fp16|scudnn|triton_tem_|(^|_)mm_|(^|_)bmm|fused_moe|mlp"),
    ("norm", r"norm(_|$)|rmsnorm|layer_?norm|batch_?norm|group_?norm|instance_?norm|bn_fw|bn_bw|normalize"),
    ("reduce", r"reduce|reduction|softmax|argmax|argmin|topk|top_k|logsumexp|cross_entropy|nll_loss|triton_red_"
               r"|triton_per_|(^|_)sum_kernel|mean_kernel|var_core|scan|inner_persistent|outer_persistent"
               r"|(^|_)dot(_|$)"),
    ("memory", r"copy|memcpy|memset|fill|transpose|cat_?array|catarray|concat|gather|scatter|index_select"
               r"|permut|(^|_)pad|nchw_?to|nhwc_?to|todevice|to_?nhwc|to_?nchw|convert|im2col|col2im"
               r"|swapdimension|shuffleintensor|reshape_and_cache|kv_?cache"),
    ("elementwise", r"elementwise|pointwise|triton_poi_|silu|gelu|relu|swiglu|act_and_mul|rotary|rope|bias"
                    r"|vector_?add|vecadd|(^|_)add(_|$)|(^|_)mul(_|$)|axpy|scale|activation|sigmoid|tanh|exp_"
                    r"|nvfuser_pointwise|fusion|(^|_)(multiply|subtract|true_divide|divide|sqrt|absolute|ceil"
                    r"|floor|negative|power)(_|$)"),
)

# A base name this generic says nothing (CUTLASS's ``cutlass::Kernel2<...gemm...>``,
# ``device_kernel<GemmUniversal...>``): then the whole demangled name is matched.
_GENERIC_BASE = re.compile(r"^(kernel\d*|device_kernel|global_kernel|_?kernel_agent)$", re.IGNORECASE)
_FULL_NAME_CLASSES = ("communication", "attention", "gemv", "gemm", "norm")

# Output tiles written into library GEMM names, M x N first:
# cuBLASLt nvjet_[sm90_]<kind>_<M>x<N>_<K>x<stages>_...; cuBLAS xmma ..._tilesize<M>x<N>x<K>_...;
# cuBLAS/CUTLASS/TensorRT <arch>_<type>_s16816gemm_[relu_][bf16_]<M>x<N>_... and volta_sgemm_<M>x<N>_nn.
# RE2 syntax (see Taxonomy.classify_codes); named groups m and n.
_TILE_PATTERNS = (r"(?i)nvjet_(?:sm\d+_)?[a-z0-9]+_(?P<m>\d+)x(?P<n>\d+)_",
                  r"(?i)tilesize(?P<m>\d+)x(?P<n>\d+)x\d+",
                  r"(?i)gemm(?:_[a-z0-9]+)*?_(?P<m>\d+)x(?P<n>\d+)(?:_|$)")
#: Characters of a kernel name the class patterns look at (hostile-input bound, see classify_one).
CLASSIFY_CHARS = 8192
_UNNAMED = re.compile(r"<unnamed>|\(anonymous namespace\)|\{anonymous\}")
_RETURN_TYPE = re.compile(r"^(?:void|int|float|double|bool|unsigned)\s+")
# RE2's \s is ASCII only; Python's (for str) is every character str.isspace() accepts.
_RETURN_TYPE_RE2 = r"^(?:void|int|float|double|bool|unsigned)[\t\n\x{0b}\f\r \x{1c}-\x{1f}\x{85}\p{Z}]+"


@dataclass(frozen=True)
class Taxonomy:
    """Ordered class rules, user rules tried first, plus the skinny-tile limit; immutable and shareable."""

    rules: tuple[tuple[str, str], ...] = DEFAULT_RULES
    extra: tuple[tuple[str, str], ...] = ()  # user rules: win over the skinny-tile test and the built-ins
    skinny_tile_max: int = 16  # a GEMM tile with a side <= this is a matrix-vector product
    _compiled: tuple[tuple[str, re.Pattern[str]], ...] = field(default=(), init=False, repr=False, compare=False)
    _compiled_extra: tuple[tuple[str, re.Pattern[str]], ...] = field(default=(), init=False, repr=False,
                                                                      compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_compiled", _compile(self.rules))
        object.__setattr__(self, "_compiled_extra", _compile(self.extra))

    def extended(self, extra: Mapping[str, Iterable[str]] | None) -> "Taxonomy":
        """A taxonomy whose ``extra`` patterns (class -> regexes) are tried before everything else."""
        added = tuple((label, pattern) for label, patterns in (extra or {}).items() for pattern in patterns if pattern)
        if not added:
            return self
        return Taxonomy(self.rules, self.extra + added, self.skinny_tile_max)

    def classify_one(self, name: str) -> str:
        """The class of one kernel name (demangled or short)."""
        return self.classify_names([name])[0]

    def classify_names(self, names: Sequence[str]) -> list[str]:
        """The class of every name, in one pass per pattern over all of them.

        Each pattern runs once over the whole list in RE2 (pyarrow's regex engine: linear in
        the text, no backtracking), so the cost is the names' total length, not names times a
        per-name scan (Python's backtracking ``re`` can be made to take seconds by one name built
        to defeat the tile pattern). First match wins, in the order the
        class docstring gives (user patterns, skinny tile, built-in rules, then the full name
        of generically named template kernels).
        """
        codes = self.classify_codes(names)
        return [CLASSES[c] for c in codes]

    def classify_codes(self, names: Sequence[str]) -> np.ndarray:
        """Like :meth:`classify_names`, as int8 indexes into :data:`CLASSES`."""
        import pyarrow as pa

        texts = [str(n)[:CLASSIFY_CHARS] for n in names]
        # Names from a trace are valid UTF-8 (the loader replaces bad bytes); a lone surrogate from
        # elsewhere becomes U+FFFD here so the Arrow array can hold it.
        full = pa.array([t.encode("utf-8", "replace").decode("utf-8") for t in texts], pa.large_string())
        base = _base_names(full)
        out = np.full(len(texts), -1, np.int8)
        gemv = CLASSES.index("gemv")
        rules = _matchers(self.rules, self._compiled)
        for label, pattern, compiled in _matchers(self.extra, self._compiled_extra):
            _assign(out, CLASSES.index(label), _search(base, pattern, compiled) | _search(full, pattern, compiled))
        _assign(out, gemv, _skinny(base, self.skinny_tile_max))
        for label, pattern, compiled in rules:
            _assign(out, CLASSES.index(label), _search(base, pattern, compiled))
        # Template arguments carry the real kernel of a generically named one; only classes whose
        # words are specific enough to trust there (functor names would make everything elementwise).
        generic = (out < 0) & _search(base, _GENERIC_BASE.pattern) & ~_equal(base, full)
        if generic.any():
            _assign(out, gemv, generic & _skinny(full, self.skinny_tile_max))
            for label, pattern, compiled in rules:
                if label in _FULL_NAME_CLASSES:
                    _assign(out, CLASSES.index(label), generic & _search(full, pattern, compiled))
        out[out < 0] = CLASSES.index("other")
        return out



def _matchers(rules: tuple[tuple[str, str], ...], compiled: tuple[tuple[str, re.Pattern[str]], ...]
              ) -> list[tuple[str, str, re.Pattern[str] | None]]:
    """Each rule with its Python regex when RE2 cannot run it (lookarounds, backreferences: user patterns)."""
    return [(label, pattern, None if _re2_ok(pattern) else python)
            for (label, pattern), (_, python) in zip(rules, compiled, strict=True)]


def _assign(out: np.ndarray, code: int, mask: np.ndarray) -> None:
    """First match wins: label the rows that match and have no label yet."""
    out[mask & (out < 0)] = code


def _search(text: Any, pattern: str, python: re.Pattern[str] | None = None) -> np.ndarray:
    """Case-insensitive regex search over every string of ``text``, as a bool array."""
    import pyarrow.compute as pc

    if python is not None:
        return np.fromiter((bool(python.search(t)) for t in text.to_pylist()), bool, len(text))
    found = pc.match_substring_regex(text, pattern=pattern, ignore_case=True)
    return found.fill_null(False).to_numpy(zero_copy_only=False)


def _equal(a: Any, b: Any) -> np.ndarray:
    import pyarrow.compute as pc

    return pc.equal(a, b).fill_null(False).to_numpy(zero_copy_only=False)


def _re2_ok(pattern: str) -> bool:
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        pc.match_substring_regex(pa.array([""], pa.large_string()), pattern=pattern, ignore_case=True)
        return True
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return False


def _skinny(text: Any, limit: int) -> np.ndarray:
    """Names whose library GEMM tile has a side of at most ``limit`` (see :func:`skinny_tile`)."""
    tiles = _tiles(text)
    return (tiles >= 0) & (tiles <= limit)


def _tiles(text: Any) -> np.ndarray:
    """The smaller tile side per name, -1 where none: the first of the tile patterns that matches wins."""
    import pyarrow as pa
    import pyarrow.compute as pc

    out = np.full(len(text), -1, np.int64)
    for pattern in _TILE_PATTERNS:
        parts = pc.extract_regex(text, pattern=pattern)
        sides = []
        for side_name in ("m", "n"):
            digits = pc.struct_field(parts, side_name)
            # A side too long for int64 is no skinny tile: clamp it, so the cast cannot overflow.
            digits = pc.if_else(pc.greater(pc.utf8_length(digits), 9), "999999999", digits)
            sides.append(pc.cast(digits, pa.int64()).fill_null(-1).to_numpy(zero_copy_only=False))
        side = np.minimum(sides[0], sides[1])
        take = (out < 0) & (side >= 0)
        out[take] = side[take]
    return out


def _base_names(full: Any) -> Any:
    """:func:`base_name` of every string of an Arrow array, with Arrow string kernels (same results)."""
    import pyarrow.compute as pc

    text = pc.utf8_trim_whitespace(full)
    text = pc.replace_substring_regex(text, pattern=_UNNAMED.pattern, replacement="")
    text = pc.replace_substring_regex(text, pattern=_RETURN_TYPE_RE2, replacement="", max_replacements=1)
    # base_name cuts at the first "<" and the first "(", each only where it is not the first character.
    head = pc.struct_field(pc.extract_regex(text, pattern=r"(?s)^(?P<b>[^<(][^<(]*|<[^(]*|\([^<]*)"), "b")
    text = pc.if_else(pc.equal(pc.utf8_length(text), 0), text, head)
    text = pc.struct_field(pc.extract_regex(text, pattern=r"(?s)^(?:.*::)?(?P<b>.*)$"), "b")
    text = pc.utf8_trim_whitespace(text)
    return pc.if_else(pc.equal(pc.utf8_length(text), 0), full, text)


def _compile(rules: tuple[tuple[str, str], ...]) -> tuple[tuple[str, re.Pattern[str]], ...]:
    out = []
    for label, pattern in rules:
        if label not in CLASSES:
            raise ValueError(f"unknown kernel class {label!r}: use one of {', '.join(CLASSES)}")
        try:
            out.append((label, re.compile(pattern, re.IGNORECASE)))
        except re.error as exc:
            raise ValueError(f"bad kernel pattern {pattern!r}: {exc}") from None
    return tuple(out)


DEFAULT = Taxonomy()


def base_name(name: str) -> str:
    """The function name of a kernel: no return type, namespaces, template arguments or parameters.

    ``void at::native::<unnamed>::reduce_kernel<512, 1, ...>(T3)`` -> ``reduce_kernel``. Short
    names pass through unchanged. Matching the base name keeps template arguments (functor
    names such as ``MulFunctor`` or ``direct_copy_kernel_cuda``) from deciding the class.
    """
    text = _UNNAMED.sub("", str(name).strip())
    text = _RETURN_TYPE.sub("", text)
    cut = len(text)
    for mark in ("<", "("):
        pos = text.find(mark)
        if 0 < pos < cut:
            cut = pos
    text = text[:cut]
    return text.rsplit("::", 1)[-1].strip() or str(name)


def skinny_tile(name: str) -> int | None:
    """The smaller side of the output tile a library GEMM name carries (nvjet, xmma, cutlass-style), or None."""
    import pyarrow as pa

    side = int(_tiles(pa.array([str(name)[:CLASSIFY_CHARS]], pa.large_string()))[0])
    return None if side < 0 else side


def classify(names: pd.Series, extra: Mapping[str, Iterable[str]] | None = None,
             taxonomy: Taxonomy = DEFAULT) -> pd.Series:
    """Class label of every kernel name in ``names`` (same index), one of :data:`CLASSES`.

    ``names`` may be demangled or short names, categorical or not; each distinct name is
    classified once (a 1M-kernel trace has a few hundred). ``extra`` maps a class to extra
    regular expressions tried first, e.g. ``{"gemv": ["my_matvec"]}``.
    """
    tax = taxonomy.extended(extra)
    if isinstance(names.dtype, pd.CategoricalDtype):
        cats = names.cat.categories
        codes = names.cat.codes.to_numpy()
        # Class codes per category, mapped by the name's code: no label string per row.
        table = _category_table(tax, cats)
        out = table[codes]  # code -1 (NULL name) indexes the trailing "other"
        return pd.Series(pd.Categorical.from_codes(out, categories=pd.Index(CLASSES), validate=False), index=names.index,
                         name="kernel_class")
    uniq = pd.unique(names.astype(object))
    known = [u for u in uniq if not (u is None or (isinstance(u, float) and u != u))]
    lookup = dict(zip(known, tax.classify_names([str(u) for u in known]), strict=True))
    lookup.update({u: "other" for u in uniq if u not in lookup})
    out = names.astype(object).map(lookup)
    return pd.Series(pd.Categorical(out, categories=list(CLASSES)), index=names.index, name="kernel_class")


#: The last (taxonomy, categories) classified and its table: several rules classify the same kernel
#: frame's names, and with 100k distinct names each pass costs ~0.3 s.
_LAST: list[tuple[Taxonomy, "weakref.ref[pd.Index]", np.ndarray]] = []


def _category_table(tax: Taxonomy, cats: pd.Index) -> np.ndarray:
    """Class code per category plus a trailing "other" (for code -1), computed once per categories object."""
    if _LAST and _LAST[0][0] == tax and _LAST[0][1]() is cats:
        return _LAST[0][2]
    table = np.append(tax.classify_codes([str(c) for c in cats]), np.int8(CLASSES.index("other")))
    _LAST[:] = [(tax, weakref.ref(cats), table)]
    return table


def category_classes(categories: pd.Index, extra: Mapping[str, Iterable[str]] | None = None,
                     taxonomy: Taxonomy = DEFAULT) -> np.ndarray:
    """Index into :data:`CLASSES` of each category's class, plus a trailing "other" (for code -1)."""
    return _category_table(taxonomy.extended(extra), categories)


def class_times(names: pd.Series, durations: pd.Series | None = None,
                extra: Mapping[str, Iterable[str]] | None = None) -> pd.Series:
    """Total duration per class (ns), all :data:`CLASSES` present, largest first."""
    labels = classify(names, extra)
    values = durations if durations is not None else pd.Series(1, index=names.index)
    totals = values.groupby(labels, observed=False).sum()
    return totals.reindex(list(CLASSES), fill_value=0).sort_values(ascending=False, kind="stable")
