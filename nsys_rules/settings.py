"""The settings of one run (what the engine reads) and how a rule option's value is checked.

:class:`Settings` is filled by the command line and the config file (:mod:`nsys_rules.config`
reads the file); :func:`option_setting` checks one ``RULE.OPTION=VALUE`` against the rule's
``Options`` dataclass (the name, the type), and :func:`build_options` builds the ``Options`` with
every value a source gives, so that the rule's own check of its values (``__post_init__``
raising ``ValueError``) is a usage error naming ``rule.option``: for the file, ``--set`` and the
test kit alike.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import sys
import typing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from nsys_rules.units import plain_number
from nsys_rules.errors import PluginError, UsageError
from nsys_rules.findings import Severity
from nsys_rules.textsafe import clip_value
from nsys_rules.units import plain_float, whole_number

if TYPE_CHECKING:  # annotations only: commands parse their flags without importing pandas
    from nsys_rules.rule import Rule

FAIL_ON = ("info", "warning", "error", "never")


#: Seconds one rule may run (``--rule-timeout``, ``rule-timeout``): generous, it only stops a rule that hangs.
DEFAULT_RULE_TIMEOUT = 300.0
#: Findings one rule may report on one trace (``--max-findings``, ``max-findings``); the rest are counted, not kept.
DEFAULT_MAX_FINDINGS = 1000


@dataclass
class Settings:
    """The effective configuration of one run (file, then flags)."""

    select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    fail_on: str = "error"
    severity: dict[str, Severity] = field(default_factory=dict)
    rule_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    steady_ranges: list[str] = field(default_factory=list)
    max_memory: int | None = None
    rule_timeout: float = DEFAULT_RULE_TIMEOUT
    #: Findings kept per rule and trace (None: no limit); a rule's further findings are dropped with a note.
    max_findings: int | None = DEFAULT_MAX_FINDINGS
    filter_time: str | None = None
    filter_nvtx: str | None = None
    export_format: str = "sqlite"  # what a .nsys-rep is exported to first (--export-format)
    source: str | None = None  # the config file read, if any
    profile: bool = False  # compute the steady-state profile (markdown/HTML reports need it)
    gpu_metrics: bool = True  # measure the budget's parts from the trace's GPU metrics, when it has them
    #: Findings that are not errors and save less than this percent of the steady state are "minor".
    noise_floor_pct: float = 0.5
    #: ``--what-if``: rules whose fixes the median step is replayed with (the JSON's ``budget.replay.what_if``).
    what_if: tuple[str, ...] = ()


def suggest(word: str, choices: typing.Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` or an empty string."""
    match = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.5)
    return f" (did you mean {match[0]!r}?)" if match else ""


def resolve_rule_name(name: str, rules: Mapping[str, type[Rule]], aliases: Mapping[str, str], where: str) -> str:
    """A rule name or alias -> the rule name; UsageError with a suggestion otherwise."""
    if name in rules:
        return name
    if name in aliases:
        return aliases[name]
    raise UsageError(f"{where}: unknown rule {name!r}{suggest(name, [*rules, *aliases])}")


def option_setting(rule: type[Rule], option: str, raw: Any, where: str) -> tuple[str, Any]:
    """``(name, value)`` of one option setting of ``rule``, checked and converted (:func:`coerce_option`).

    A former name (``rule.renamed_options``) still works for one release: its value is converted
    to the new unit and one line on stderr says what to write instead.
    """
    key = option.replace("-", "_")
    renamed = rule.renamed_options.get(key)
    if renamed is None:
        return key, coerce_option(rule, option, raw, where)
    value = coerce_option(rule, renamed.new, raw, where)
    if renamed.factor != 1 and isinstance(value, (int, float)) and not isinstance(value, bool):
        value = round(value * renamed.factor, 12)  # 0.07 x 100 is 7.000000000000001 in floats
    _deprecated(f"{rule.name}.{key}", f"{rule.name}.{renamed.new}={plain_number(value, 6)}" + (
        " (a percent, not a fraction)" if renamed.factor == 100 else ""))
    return renamed.new, value


_WARNED: set[str] = set()


def _deprecated(old: str, instead: str) -> None:
    """One line on stderr, once per run, for a setting under a name that goes away in the next release."""
    if old not in _WARNED:
        _WARNED.add(old)
        sys.stderr.write(f"nsys-rules: {clip_value(old, 120)} is deprecated and goes away in the next release; "
                         f"write {clip_value(instead, 160)}\n")


#: What an ``Options`` dataclass raises for a value it refuses, from its ``__post_init__``: the user's mistake
#: (exit 2), not the rule's. ``re.error`` because a regular-expression option is checked by compiling it;
#: ``UsageError`` because built-in parsers (sizes) raise it.
REFUSED_VALUE = (ValueError, TypeError, ArithmeticError, re.error, UsageError)


def build_options(rule: type[Rule], overrides: Mapping[str, Any], where: str) -> Any:
    """``rule.Options(**overrides)``; one :class:`UsageError` line when the Options refuse a value.

    A rule checks its option values in ``Options.__post_init__`` and raises ``ValueError`` with what
    is wrong (docs/plugins.md, "Checking option values"). The line names ``where`` (the config file,
    ``--set``, ``options``) and the option: when several were given, the first one the Options refuse
    on its own (values that are only wrong together name the rule's options). Any other exception,
    or ``sys.exit()``, is the rule's bug: a :class:`PluginError` (exit 4) naming the rule.
    """
    try:
        return rule.Options(**overrides)
    except REFUSED_VALUE as exc:
        raise UsageError(_refused(rule, overrides, where, exc)) from None
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - plugin code: a bug in it is reported, never fatal
        raise PluginError(f"rule {rule.name}: its Options failed on the values of {where}: "
                          f"{type(exc).__name__}: {clip_value(exc, 300)}") from None


def _refused(rule: type[Rule], overrides: Mapping[str, Any], where: str, exc: BaseException) -> str:
    reason = clip_value(exc, 300) or type(exc).__name__
    culprit = next((key for key in overrides if len(overrides) == 1 or _refuses(rule, key, overrides[key])), None)
    if culprit is None:
        return f"{where}: options of {rule.name} ({', '.join(overrides)}): {reason}"
    if reason.startswith(culprit) and reason[len(culprit):len(culprit) + 1] in (" ", ":"):
        return f"{where}: {rule.name}.{reason}"  # "roofline_pct must be ..." reads as "gemv-dominance.roofline_pct must be ..."
    return f"{where}: {rule.name}.{culprit}: {reason}"


def _refuses(rule: type[Rule], key: str, value: Any) -> bool:
    """Whether ``rule.Options`` refuse ``key=value`` with every other option at its default."""
    try:
        rule.Options(**{key: value})
    except REFUSED_VALUE:
        return True
    except (Exception, SystemExit):  # noqa: BLE001 - only looking for the culprit of a refusal already made
        return False
    return False


def coerce_option(rule: type[Rule], option: str, raw: Any, where: str) -> Any:
    """Check ``option`` exists on ``rule.Options`` and convert ``raw`` (TOML value or CLI text) to its type."""
    fields = {f.name: f for f in dataclasses.fields(rule.Options)}
    key = option.replace("-", "_")
    if key not in fields:
        raise UsageError(f"{where}: rule {rule.name} has no option {option!r}{suggest(key, fields)}"
                         + ("" if fields else " (it has no options)"))
    f = fields[key]
    default = f.default if f.default is not dataclasses.MISSING else (
        f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
    kind = type(default)
    try:
        value = _coerce(raw, kind, default)
    except (TypeError, ValueError, OverflowError):
        raise UsageError(f"{where}: {rule.name}.{option} expects {kind.__name__}, got {clip_value(raw, 60)!r}") from None
    if (isinstance(value, float) and not math.isfinite(value)) or (isinstance(value, int) and abs(value) >= 2**63):
        # NaN and infinity compare false with everything: a threshold of nan silently turns a rule off,
        # and JSON/SARIF have no way to write them.
        raise UsageError(f"{where}: {rule.name}.{option} must be a finite number, not {clip_value(raw, 60)!r}")
    if key.endswith("_pct") and isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
        # Every `*_pct` option is a share or a threshold on one (docs/plugins.md): below 0 it silently
        # means "always" (or "never"), whatever the rule's own checks say.
        raise UsageError(f"{where}: {rule.name}.{option} is a percent and cannot be negative, not {clip_value(raw, 60)!r}")
    ceiling = f.metadata.get("max_pct", 100.0)
    if (key.endswith("_pct") and ceiling is not None and isinstance(value, (int, float)) and not isinstance(value, bool)
            and value > ceiling):
        # A share of a whole (busy time, the steady state) above 100 % silently means "never" (issue 42:
        # launch-bound.max_busy_pct=500 was taken); an option over a reference (an excess) sets max_pct=None.
        raise UsageError(f"{where}: {rule.name}.{option} is a percent of a whole, from 0 to {plain_number(ceiling)}, "
                         f"not {clip_value(raw, 60)!r}" if ceiling == 100 else
                         f"{where}: {rule.name}.{option} is a percent from 0 to {plain_number(ceiling)}, "
                         f"not {clip_value(raw, 60)!r}")
    return value


def _coerce(raw: Any, kind: type, default: Any) -> Any:
    """``raw`` (TOML value or CLI text) as ``kind``; TypeError/ValueError when it is not one."""
    if isinstance(raw, str) and kind is not str:
        if kind is bool:
            if raw.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(raw)
            return raw.lower() in ("true", "1", "yes")
        if kind in (tuple, list):
            return tuple(p.strip() for p in raw.split(",") if p.strip())
        if default is None:
            return _number_or_text(raw)
        if kind is int:  # "1e3" is a whole number too; other scripts' digits are not (see units.plain_float)
            return int(plain_float(raw)) if "e" in raw.lower() else whole_number(raw)
        if kind is float:
            return plain_float(raw)
        return kind(raw)
    if kind in (tuple, list) and isinstance(raw, list):
        # A list option holds plain values, of the default's kind when it has one: a nested list or a table
        # (from TOML, nested any depth) is no pattern or id, and the rule would fail on it (exit 4).
        kinds = {type(v) for v in default} if default else {str, int, float, bool}
        if any(isinstance(v, (list, dict)) or (type(v) not in kinds and not (float in kinds and type(v) is int))
               for v in raw):
            raise ValueError(raw)
        return tuple(raw)
    if kind is float and isinstance(raw, int) and not isinstance(raw, bool):
        return float(raw)
    if default is not None and not isinstance(raw, kind):
        raise ValueError(raw)
    return raw


def _number_or_text(raw: str) -> Any:
    for conv in (whole_number, plain_float):
        try:
            return conv(raw)
        except ValueError:
            pass
    return raw
