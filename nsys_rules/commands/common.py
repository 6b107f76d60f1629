"""Pieces shared by subcommands: the registry, the settings, progress on a terminal.

Light to import (no pandas, no rules): ``check`` parses its flags and starts reading the trace
before the engine is imported.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from nsys_rules.config import (find_config, load_config, parse_max_findings, parse_max_memory, parse_percent,
                               parse_seconds, parse_set)
from nsys_rules.settings import FAIL_ON, Settings, build_options, resolve_rule_name, suggest
from nsys_rules.errors import UsageError
from nsys_rules.textsafe import clip_value
from nsys_rules.units import plain_float, whole_number

if TYPE_CHECKING:
    from nsys_rules.registry import Registry


def add_plugin_flags(parser: argparse.ArgumentParser) -> None:
    """``--no-plugins``: skip entry-point plugins (same as NSYS_RULES_DISABLE_PLUGIN_AUTOLOAD=1)."""
    parser.add_argument("--no-plugins", action="store_true",
                        help="do not load entry-point plugins (env NSYS_RULES_DISABLE_PLUGIN_AUTOLOAD=1 does the same)")


def add_filter_flags(parser: argparse.ArgumentParser) -> None:
    """``--filter-time`` and ``--filter-nvtx``, shared by check and stats."""
    parser.add_argument("--filter-time", metavar="START/END",
                        help="only this time window, nsys syntax relative to the session start (5s/7s, 1s2ms/)")
    parser.add_argument("--filter-nvtx", metavar="RANGE[@DOMAIN][/INDEX]",
                        help="only the time of this NVTX range (all its instances unless /INDEX), on every thread")


def registry_for(args: argparse.Namespace) -> Registry:
    """The plugin registry for this invocation."""
    from nsys_rules.plugin_manager import build_registry  # the rules and pandas: only once a command runs

    timeout = getattr(args, "rule_timeout", None)
    if timeout is not None:
        from nsys_rules.config import parse_seconds

        timeout = parse_seconds(timeout)  # plugin imports and hooks are bounded by --rule-timeout as rules are
    return build_registry(autoload=not getattr(args, "no_plugins", False), timeout=timeout)


def settings_for(args: argparse.Namespace, registry: Registry) -> Settings:
    """Config file first, then command-line flags."""
    aliases = registry.aliases()
    config_path = Path(args.config) if getattr(args, "config", None) else find_config(Path.cwd())
    settings = load_config(config_path, registry.rules, aliases)
    if getattr(args, "select", None):
        settings.select = _split(args.select)
        if not settings.select:
            raise UsageError("--select needs at least one rule name (or ALL)")
    if getattr(args, "ignore", None):
        settings.ignore = _split(args.ignore)
    for name in settings.select:  # with ALL too: `--select ALL,kernel-tial` is a typo, not "all rules"
        if name.upper() != "ALL":
            resolve_rule_name(name, registry.rules, aliases, "--select")
    if getattr(args, "fail_on", None):
        settings.fail_on = args.fail_on
    for rule, opts in parse_set(getattr(args, "set", None) or [], registry.rules, aliases).items():
        settings.rule_options.setdefault(rule, {}).update(opts)
        build_options(registry.rules[rule], settings.rule_options[rule], "--set")  # with the file's values of it
    if getattr(args, "noise_floor", None) is not None:
        settings.noise_floor_pct = parse_percent(args.noise_floor, "--noise-floor")
    if getattr(args, "max_memory", None):
        settings.max_memory = parse_max_memory(args.max_memory)
    if getattr(args, "rule_timeout", None) is not None:
        settings.rule_timeout = parse_seconds(args.rule_timeout)
    if getattr(args, "max_findings", None) is not None:
        settings.max_findings = parse_max_findings(args.max_findings)
    settings.filter_time = filter_value(args, "filter_time", "START/END, e.g. 5s/7s")
    settings.filter_nvtx = filter_value(args, "filter_nvtx", "an NVTX range name")
    settings.export_format = getattr(args, "export_format", None) or "sqlite"
    if getattr(args, "no_gpu_metrics", False):
        settings.gpu_metrics = False
    if getattr(args, "what_if", None):
        settings.what_if = what_if_rules(args.what_if)
    return settings


def what_if_rules(values: list[str]) -> tuple[str, ...]:
    """``--what-if RULE[,RULE]``: the rules whose fixes are replayed, each one with a replay edit (else exit 2)."""
    from nsys_rules.model.replay_what_if import EDITS

    names = tuple(dict.fromkeys(n.strip() for v in values for n in v.split(",") if n.strip()))
    for name in names:
        if name not in EDITS:
            raise UsageError(f"--what-if: no replayed fix for rule {name!r}{suggest(name, EDITS)}; replayable: "
                             f"{', '.join(sorted(EDITS))}")
    if not names:
        raise UsageError("--what-if needs rule names, e.g. --what-if launch-bound,sync-stall")
    return names


def filter_value(args: argparse.Namespace, key: str, what: str) -> str | None:
    """A ``--filter-*`` value: None when not given; an empty or impossibly long one is a usage error."""
    from nsys_rules.loaders.export import MAX_STRING

    value = getattr(args, key, None)
    flag = "--" + key.replace("_", "-")
    if value is None:
        return None
    if not value.strip():
        raise UsageError(f"{flag} needs {what}, not an empty value")
    if len(value) > MAX_STRING:  # no name the loader keeps is longer: it cannot match anything
        raise UsageError(f"{flag} {clip_value(value, 60)!r} is longer than any name a trace can hold ({MAX_STRING:,} characters)")
    return value


def number_arg(text: str) -> float:
    """An argparse ``type``: a number written in ASCII (:func:`~nsys_rules.units.plain_float`), one usage line otherwise."""
    try:
        return plain_float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, not {clip_value(text, 40)!r}") from None


def whole_number_arg(text: str) -> int:
    """An argparse ``type``: a whole number in ASCII digits (``int()`` would also take '١' or '1_0')."""
    try:
        return whole_number(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, not {clip_value(text, 40)!r}") from None


def _split(items: list[str]) -> list[str]:
    return [p.strip() for item in items for p in item.split(",") if p.strip()]


def progress_printer(total_rules: int) -> Callable[[str], None] | None:
    """A callback that shows which rule runs, on a terminal only (stderr)."""
    if not sys.stderr.isatty():
        return None

    def show(rule: str) -> None:
        sys.stderr.write(f"\r\033[Kchecking: {rule}")
        sys.stderr.flush()

    return show


FAIL_CHOICES = FAIL_ON
