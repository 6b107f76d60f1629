"""Configuration: ``[tool.nsys-rules]`` in pyproject.toml or an ``nsys-rules.toml``.

Native TOML types; unknown keys are errors (exit 2) naming the closest valid key.
Command-line flags override the file.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import sys
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from .errors import UsageError
from .findings import Severity
from .textsafe import clip_value
from .units import parse_size
from .userfiles import read_small_text

if TYPE_CHECKING:  # annotations only: commands parse their flags without importing pandas
    from .rule import Rule

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

FAIL_ON = ("info", "warning", "error", "never")
TOP_KEYS = ("select", "ignore", "fail-on", "severity", "rules", "steady-ranges", "max-memory", "rule-timeout",
            "noise-floor")
#: Seconds one rule may run (``--rule-timeout``, ``rule-timeout``): generous, it only stops a rule that hangs.
DEFAULT_RULE_TIMEOUT = 300.0


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
    filter_time: str | None = None
    filter_nvtx: str | None = None
    export_format: str = "sqlite"  # what a .nsys-rep is exported to first (--export-format)
    source: str | None = None  # the config file read, if any
    profile: bool = False  # compute the steady-state profile (markdown/HTML reports need it)
    #: Findings that are not errors and save less than this percent of the steady state are "minor".
    noise_floor_pct: float = 0.5


def suggest(word: str, choices: typing.Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` or an empty string."""
    match = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.5)
    return f" (did you mean {match[0]!r}?)" if match else ""


def find_config(start: Path) -> Path | None:
    """The nearest nsys-rules.toml, or pyproject.toml with a [tool.nsys-rules] table, from ``start`` upwards."""
    for folder in [start, *start.parents]:
        own = folder / "nsys-rules.toml"
        if own.is_file():
            return own
        project = folder / "pyproject.toml"
        if project.is_file():
            try:
                data = tomllib.loads(read_small_text(project))
            except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
                continue
            if "nsys-rules" in data.get("tool", {}):
                return project
    return None


def load_config(path: Path | None, rules: Mapping[str, type[Rule]], aliases: Mapping[str, str]) -> Settings:
    """Read and validate a config file (None: defaults)."""
    settings = Settings()
    if path is None:
        return settings
    try:
        data = tomllib.loads(read_small_text(path))
    except FileNotFoundError:
        raise UsageError(f"config file {path} not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"config file {clip_value(path, 200)}: cannot read ({clip_value(exc, 300)})") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"config file {path}: invalid TOML ({exc})") from None
    table = data.get("tool", {}).get("nsys-rules", {}) if path.name == "pyproject.toml" else data
    if not isinstance(table, dict):
        raise UsageError(f"{path}: [tool.nsys-rules] must be a table")
    settings.source = str(path)
    for key, value in table.items():
        if key not in TOP_KEYS:
            raise UsageError(f"{path}: unknown key {key!r}{suggest(key, TOP_KEYS)}")
        if key in ("select", "ignore", "steady-ranges"):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise UsageError(f"{path}: {key} must be a list of strings")
            setattr(settings, key.replace("-", "_"), list(value))
        elif key == "fail-on":
            if value not in FAIL_ON:
                raise UsageError(f"{path}: fail-on must be one of {', '.join(FAIL_ON)}{suggest(str(value), FAIL_ON)}")
            settings.fail_on = value
        elif key == "max-memory":
            settings.max_memory = parse_size(str(value))
        elif key == "noise-floor":
            settings.noise_floor_pct = parse_percent(value, f"{path}: noise-floor")
        elif key == "rule-timeout":
            settings.rule_timeout = parse_seconds(value, f"{path}: rule-timeout")
        elif key == "severity":
            if not isinstance(value, dict):
                raise UsageError(f"{path}: severity must be a table of rule = \"info|warning|error\"")
            for rule, sev in value.items():
                name = resolve_rule_name(rule, rules, aliases, where=f"{path}: severity")
                try:
                    settings.severity[name] = Severity.parse(sev)
                except ValueError as exc:
                    raise UsageError(f"{path}: severity.{rule}: {exc}") from None
        elif key == "rules":
            if not isinstance(value, dict):
                raise UsageError(f"{path}: rules must be a table of per-rule option tables")
            for rule, opts in value.items():
                name = resolve_rule_name(rule, rules, aliases, where=f"{path}: rules")
                if not isinstance(opts, dict):
                    raise UsageError(f"{path}: [rules.{rule}] must be a table of options")
                for opt, raw in opts.items():
                    key, setting = option_setting(rules[name], opt, raw, str(path))
                    settings.rule_options.setdefault(name, {})[key] = setting
    return settings


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
    _deprecated(f"{rule.name}.{key}", f"{rule.name}.{renamed.new}={value:g}" + (
        " (a percent, not a fraction)" if renamed.factor == 100 else ""))
    return renamed.new, value


_WARNED: set[str] = set()


def _deprecated(old: str, instead: str) -> None:
    """One line on stderr, once per run, for a setting under a name that goes away in the next release."""
    if old not in _WARNED:
        _WARNED.add(old)
        sys.stderr.write(f"nsys-rules: {clip_value(old, 120)} is deprecated and goes away in the next release; "
                         f"write {clip_value(instead, 160)}\n")


def coerce_option(rule: type[Rule], option: str, raw: Any, where: str) -> Any:
    """Check ``option`` exists on ``rule.Options`` and convert ``raw`` (TOML value or CLI text) to its type."""
    fields = {f.name: f for f in dataclasses.fields(rule.Options)}
    key = option.replace("-", "_")
    if key not in fields:
        raise UsageError(f"{where}: rule {rule.name} has no option {option!r}{suggest(key, fields)}"
                         + ("" if fields else " (it has no options)"))
    f = fields[key]
    default = f.default if f.default is not dataclasses.MISSING else (
        f.default_factory() if f.default_factory is not dataclasses.MISSING else None)  # type: ignore[misc]
    kind = type(default)
    try:
        value = _coerce(raw, kind, default)
    except (TypeError, ValueError, OverflowError):
        raise UsageError(f"{where}: {rule.name}.{option} expects {kind.__name__}, got {clip_value(raw, 60)!r}") from None
    if (isinstance(value, float) and not math.isfinite(value)) or (isinstance(value, int) and abs(value) >= 2**63):
        # NaN and infinity compare false with everything: a threshold of nan silently turns a rule off,
        # and JSON/SARIF have no way to write them.
        raise UsageError(f"{where}: {rule.name}.{option} must be a finite number, not {clip_value(raw, 60)!r}")
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
        return kind(float(raw)) if kind is int and "e" in raw.lower() else kind(raw)
    if kind in (tuple, list) and isinstance(raw, list):
        return tuple(raw)
    if kind is float and isinstance(raw, int) and not isinstance(raw, bool):
        return float(raw)
    if default is not None and not isinstance(raw, kind):
        raise ValueError(raw)
    return raw


def _number_or_text(raw: str) -> Any:
    for conv in (int, float):
        try:
            return conv(raw)
        except ValueError:
            pass
    return raw


def parse_percent(value: Any, where: str) -> float:
    """A percent between 0 and 100 (``0.5``, ``"2%"``); ``UsageError`` otherwise."""
    text = str(value).strip().rstrip("%").strip()
    try:
        number = float(text)
    except ValueError:
        raise UsageError(f"{where}: {value!r} is not a percent (e.g. 0.5 or 2%)") from None
    if not 0 <= number <= 100:
        raise UsageError(f"{where}: {value!r} must be between 0 and 100")
    return number


def parse_seconds(value: object, where: str = "--rule-timeout") -> float:
    """A positive, finite number of seconds (``300``, ``2.5``); UsageError otherwise."""
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        seconds = math.nan
    if isinstance(value, bool) or not math.isfinite(seconds) or seconds <= 0 or seconds > 10**7:
        raise UsageError(f"{where}: expected a number of seconds above 0 (e.g. 300), not {clip_value(value, 40)!r}")
    return seconds


def parse_set(items: list[str], rules: Mapping[str, type[Rule]], aliases: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """``--set RULE.OPTION=VALUE`` items -> {rule: {option: value}}."""
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        head, eq, value = item.partition("=")
        rule, dot, option = head.partition(".")
        if not eq or not dot or not rule or not option:
            raise UsageError(f"bad --set {item!r}: use RULE.OPTION=VALUE, e.g. kernel-tail.min_share_pct=2")
        name = resolve_rule_name(rule.strip(), rules, aliases, where="--set")
        key, setting = option_setting(rules[name], option.strip(), value.strip(), "--set")
        out.setdefault(name, {})[key] = setting
    return out
