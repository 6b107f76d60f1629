"""The config file: ``[tool.nsys-rules]`` in pyproject.toml or an ``nsys-rules.toml``, and ``--set``.

Native TOML types; unknown keys are errors (exit 2) naming the closest valid key.
Command-line flags override the file. What it fills is :class:`nsys_rules.settings.Settings`.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from nsys_rules.errors import UsageError
from nsys_rules.findings import Severity
from nsys_rules.settings import FAIL_ON, Settings, build_options, option_setting, resolve_rule_name, suggest
from nsys_rules.textsafe import clip_value
from nsys_rules.units import parse_size, plain_float
from nsys_rules.userfiles import read_small_text, read_user_file

if TYPE_CHECKING:  # annotations only: commands parse their flags without importing pandas
    from nsys_rules.rule import Rule

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

TOP_KEYS = ("select", "ignore", "fail-on", "severity", "rules", "steady-ranges", "max-memory", "rule-timeout",
            "noise-floor", "max-findings")


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
            except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError, RecursionError):
                continue  # not this project's config: a broken or hostile pyproject.toml is no reason to stop
            if "nsys-rules" in data.get("tool", {}):
                return project
    return None


def load_config(path: Path | None, rules: Mapping[str, type[Rule]], aliases: Mapping[str, str]) -> Settings:
    """Read and validate a config file (None: defaults)."""
    settings = Settings()
    if path is None:
        return settings
    data = read_user_file(path, "config file", tomllib.loads, "TOML")
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
            settings.max_memory = parse_max_memory(value)
        elif key == "noise-floor":
            settings.noise_floor_pct = parse_percent(value, f"{path}: noise-floor")
        elif key == "rule-timeout":
            settings.rule_timeout = parse_seconds(value, f"{path}: rule-timeout")
        elif key == "max-findings":
            settings.max_findings = parse_max_findings(value, f"{path}: max-findings")
        elif key == "severity":
            if not isinstance(value, dict):
                raise UsageError(f"{path}: severity must be a table of rule = \"info|warning|error\"")
            for rule, sev in value.items():
                name = resolve_rule_name(rule, rules, aliases, where=f"{path}: severity")
                try:
                    settings.severity[name] = Severity.parse(sev)
                except ValueError as exc:
                    raise UsageError(f"{path}: severity.{clip_value(rule, 60)}: {clip_value(exc, 200)}") from None
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
    for name, options in settings.rule_options.items():  # the rule's own check of its values, all of them at once
        build_options(rules[name], options, str(path))
    return settings


def parse_max_memory(value: object) -> int:
    """``--max-memory`` or the config file's ``max-memory`` (``2G``, ``512M``, a number of bytes) in bytes: the one
    parser of the memory limit; :class:`UsageError` ("bad size") for anything else."""
    return parse_size(str(value))


def configured_max_memory(flag: str | None, config: Path | None) -> int | None:
    """The memory limit a run asks for, before its settings are built: ``--max-memory`` when given, else the
    config file's ``max-memory``; None when neither sets one (80 % of the available memory then).

    ``check`` starts reading the trace ahead before the plugins load; a set limit makes it leave the reading
    to the guard. Errors are the same as :func:`load_config`'s (:class:`UsageError`, ``OSError``).
    """
    if flag:
        return parse_max_memory(flag)
    if config is None:
        return None
    data = tomllib.loads(read_small_text(config))
    table = data.get("tool", {}).get("nsys-rules", {}) if config.name == "pyproject.toml" else data
    value = table.get("max-memory") if isinstance(table, dict) else None
    return None if value is None else parse_max_memory(value)


def parse_percent(value: Any, where: str) -> float:
    """A percent between 0 and 100 (``0.5``, ``"2%"``); ``UsageError`` otherwise."""
    text = str(value).strip().rstrip("%").strip()
    try:
        number = plain_float(text)
    except ValueError:
        raise UsageError(f"{where}: {value!r} is not a percent (e.g. 0.5 or 2%)") from None
    if not 0 <= number <= 100:
        raise UsageError(f"{where}: {value!r} must be between 0 and 100")
    return number


def parse_seconds(value: object, where: str = "--rule-timeout") -> float:
    """A positive, finite number of seconds (``300``, ``2.5``); UsageError otherwise."""
    # CLI text or a TOML value (which may also be a list, a table or a date: not seconds)
    seconds = float(value) if isinstance(value, (int, float)) else math.nan
    if isinstance(value, str):
        try:
            seconds = plain_float(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not math.isfinite(seconds) or seconds <= 0 or seconds > 10**7:
        raise UsageError(f"{where}: expected a number of seconds above 0 (e.g. 300), not {clip_value(value, 40)!r}")
    return seconds


def parse_max_findings(value: object, where: str = "--max-findings") -> int | None:
    """Findings kept per rule and trace: a whole number >= 1, or 0 for no limit (None); UsageError otherwise."""
    text = str(value).strip() if isinstance(value, (int, str)) and not isinstance(value, bool) else ""
    if not (text.isascii() and text.isdigit()) or len(text) > 12:
        raise UsageError(f"{where}: expected a whole number of findings (e.g. 1000; 0: no limit), "
                         f"not {clip_value(value, 40)!r}")
    return int(text) or None


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
