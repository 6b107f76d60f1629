"""The plugin manager: built-in rules first, then entry-point plugins.

A plugin that fails to import (also by calling ``sys.exit()`` or hanging past the time
limit), or whose hook raises or returns something unusable, is recorded in
:attr:`Registry.errors` (the run then ends with exit 4) and the rest still loads. Rules are
checked when registered (name, tables, columns, options that build); a name, format or file
suffix that is already taken, by the built-ins or an earlier plugin, is refused, never
silently replaced.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import importlib.metadata as metadata
import os
import re
from typing import Any, Callable, Iterable

import pluggy

from nsys_rules.units import plain_number
from nsys_rules import hooks
from nsys_rules.settings import DEFAULT_RULE_TIMEOUT
from nsys_rules.containment import contained, end_forked_child, signal_handlers_kept
from nsys_rules.errors import PluginError
from nsys_rules.isolation import RuleTimeout, limited, safe_repr, safe_text
from nsys_rules.records import RunError
from nsys_rules.registry import BUILTIN, Registry
from nsys_rules.rule import Rule
from nsys_rules.textsafe import clip_value

ENTRY_POINT_GROUP = "nsys_rules"
#: Set to a non-empty value (not "0") to skip entry-point plugins, like pytest's PYTEST_DISABLE_PLUGIN_AUTOLOAD.
AUTOLOAD_ENV = "NSYS_RULES_DISABLE_PLUGIN_AUTOLOAD"
#: The built-in plugins, loaded by name (as pytest loads its ``default_plugins``): the loaders (SQLite,
#: parquetdir, arrowdir), the rule pack, then the output formats. Nothing else imports the rule pack and
#: the formats, so the engine sits below what it loads (``open_trace`` falls back on the built-in loaders).
BUILTIN_PLUGINS = (("nsys_rules.builtin_loaders", BUILTIN + " loaders"), ("nsys_rules.rules", BUILTIN),
                   ("nsys_rules.formatters", BUILTIN + " formatters"))
_KEBAB = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")


def autoload_disabled() -> bool:
    """True when the environment asks to skip entry-point plugins."""
    return os.environ.get(AUTOLOAD_ENV, "") not in ("", "0")


def build_registry(autoload: bool = True, extra: tuple[tuple[str, object], ...] = (),
                   timeout: float | None = None) -> Registry:
    """Build the registry: the built-in pack, ``extra`` (name, plugin) pairs, then entry points.

    Each plugin's import and hooks run as plugin code (:func:`plugin_code`) within ``timeout`` seconds
    (``--rule-timeout``; None: the default limit).
    """
    global _timeout
    _timeout = DEFAULT_RULE_TIMEOUT if timeout is None else timeout
    pm = pluggy.PluginManager(hooks.PROJECT)
    pm.add_hookspecs(hooks)
    registry = Registry()
    for module, name in BUILTIN_PLUGINS:
        pm.register(importlib.import_module(module), name=name)
    registry.plugins.append({"name": BUILTIN, "version": _own_version()})
    for name, plugin in extra:
        pm.register(plugin, name=name)
        registry.plugins.append({"name": name, "version": ""})
    if autoload and not autoload_disabled():
        for ep in sorted(_entry_points(), key=lambda e: e.name):
            try:
                plugin = plugin_code(ep.load, _timeout)
                pm.register(plugin, name=ep.name)
            except BaseException as exc:  # noqa: BLE001 - a broken plugin must not stop the others
                registry.errors.append(RunError(f"failed to load: {failure(exc)}", plugin=ep.name))
                continue
            registry.plugins.append({"name": ep.name, "version": _dist_version(ep)})
    try:
        pm.check_pending()
    except pluggy.PluginValidationError:
        # check_pending stops at the first unknown hook; name every one, with its plugin.
        for plugin_name, message in unknown_hooks(pm):
            registry.errors.append(RunError(message, plugin=plugin_name))
    _collect(pm, registry)
    return registry


def unknown_hooks(pm: pluggy.PluginManager) -> list[tuple[str, str]]:
    """(plugin name, message) for each hook implementation that matches no hook spec (a typo)."""
    known = sorted(n for n in vars(pm.hook) if not n.startswith("_") and getattr(pm.hook, n).has_spec())
    out = []
    for name in sorted(vars(pm.hook)):
        caller = getattr(pm.hook, name)
        if name.startswith("_") or caller.has_spec():
            continue
        for impl in caller.get_hookimpls():
            if not impl.optionalhook:
                out.append((impl.plugin_name, f"unknown hook {name!r} (a typo? the hooks are: {', '.join(known)})"))
    return out


def _collect(pm: pluggy.PluginManager, registry: Registry) -> None:
    # Registration order (built-ins first): a plugin cannot shadow a built-in rule, format or
    # loader, and `nsys-rules rules` lists the built-in pack before plugins. Each plugin's trace
    # rules, then its job rules, plugin by plugin.
    from nsys_rules.inputs import REPORT_SUFFIXES

    order = {p["name"]: i for i, p in enumerate(registry.plugins)}
    rule_hooks = [(impl, "trace") for impl in pm.hook.register_rules.get_hookimpls()]
    rule_hooks += [(impl, "job") for impl in pm.hook.register_job_rules.get_hookimpls()]
    rule_hooks.sort(key=lambda hook: order.get(hook[0].plugin_name, len(order)))  # stable: trace before job
    for impl, scope in rule_hooks:
        for rule in _call(impl, registry, (list, tuple)) or []:
            problem = validate_rule(rule, scope)
            if problem is None and rule.name in registry.rules:
                problem = f"rule name {rule.name!r} is already registered by {registry.rule_plugin[rule.name]}"
            if problem:
                registry.errors.append(RunError(problem, plugin=impl.plugin_name))
                continue
            registry.rules[rule.name] = rule
            registry.rule_plugin[rule.name] = impl.plugin_name
    for impl in pm.hook.register_formatters.get_hookimpls():
        for fmt, func in (_call(impl, registry, dict) or {}).items():
            if not isinstance(fmt, str) or fmt in registry.formatters or not callable(func):
                registry.errors.append(RunError(f"formatter {clip_value(fmt, 60)!r} is taken or not callable",
                                                plugin=impl.plugin_name))
                continue
            registry.formatters[fmt] = func
    for impl in pm.hook.register_loaders.get_hookimpls():
        for suffix, func in (_call(impl, registry, dict) or {}).items():
            key = str(suffix).lower()
            if not key.startswith(".") or key in REPORT_SUFFIXES or key in registry.loaders or not callable(func):
                # The built-in loaders (registered first: .sqlite, .parquetdir, .arrowdir), the reports nsys
                # exports (.nsys-rep) and an earlier plugin's suffix are never taken over.
                registry.errors.append(RunError(f"loader for {clip_value(suffix, 60)!r} is taken, not a '.suffix' "
                                                "or not callable", plugin=impl.plugin_name))
                continue
            registry.loaders[key] = func


def _call(impl: Any, registry: Registry, kind: type | tuple[type, ...]) -> Any:
    """Call one hook implementation; its failure or a return value of the wrong kind is the plugin's error."""
    name = getattr(impl.function, "__name__", "hook")
    try:
        value = plugin_code(impl.function, _timeout)
    except BaseException as exc:  # noqa: BLE001 - isolate the plugin (a real Ctrl-C is re-raised inside)
        registry.errors.append(RunError(f"{name} failed: {failure(exc)}", plugin=impl.plugin_name))
        return None
    if value is not None and not isinstance(value, kind):
        wanted = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        registry.errors.append(RunError(f"{name} returned {type(value).__name__}, not a {wanted}",
                                        plugin=impl.plugin_name))
        return None
    return value


#: The time limit of plugin imports and hooks in the registry being built (``--rule-timeout``).
_timeout: float = DEFAULT_RULE_TIMEOUT


def plugin_code(call: Callable[[], Any], timeout: float | None) -> Any:
    """``call()``, plugin code the run does not control (an import, a hook), within ``timeout`` seconds.

    Its output goes to stderr, and the process state it changes is put back (:func:`contained`: streams, fd 1,
    cwd, umask, signal mask; :func:`signal_handlers_kept`: every signal handler). A child it forked that
    comes back here is ended. Whatever it raises is raised, for the caller to record as the plugin's error;
    a ``KeyboardInterrupt`` it raised without a Ctrl-C is a :class:`PluginError`, a real Ctrl-C still the user's.
    """
    pid = os.getpid()
    with contained() as seen, signal_handlers_kept():
        try:
            value = limited(call, timeout)
        except KeyboardInterrupt:
            if seen.interrupted:
                raise
            raise PluginError("raised KeyboardInterrupt without a Ctrl-C") from None
        finally:
            end_forked_child(pid)
    if seen.interrupted:
        raise KeyboardInterrupt  # the user's Ctrl-C, even when the plugin swallowed it
    return value


def failure(exc: BaseException) -> str:
    """One line saying what plugin code did: raised, called sys.exit(), or ran out of time."""
    if isinstance(exc, SystemExit):
        return f"called sys.exit({safe_repr(exc.code)})"
    if isinstance(exc, RuleTimeout):
        return f"did not return within {plain_number(_timeout, 6)} s"
    if isinstance(exc, PluginError):
        return safe_text(exc, 300)
    return f"{type(exc).__name__}: {safe_text(exc, 300)}"


def validate_rule(rule: object, scope: str = "trace") -> str | None:
    """Why ``rule`` cannot be registered (by the hook for ``scope`` rules), or None when it can."""
    try:
        return _rule_problem(rule, scope)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - a class attribute that blows up when read
        return f"{safe_text(rule, 80)}: cannot be checked ({failure(exc)})"


def _rule_problem(rule: object, scope: str) -> str | None:
    from nsys_rules.findings import Severity
    from nsys_rules.loaders.tables import TABLES

    if not isinstance(rule, type) or not issubclass(rule, Rule):
        return f"{clip_value(rule, 80)} is not a Rule subclass"
    if rule.scope != scope:
        hook = "register_job_rules" if rule.scope == "job" else "register_rules"
        return (f"rule {clip_value(rule.name or rule.__name__, 60)} is a {clip_value(rule.scope, 20)} rule: "
                f"register it with {hook}")
    if not isinstance(rule.name, str) or not _KEBAB.match(rule.name):
        return f"rule {rule.__name__}: name {clip_value(rule.name, 60)!r} is not kebab-case"
    if not isinstance(rule.title, str) or not isinstance(rule.default_severity, Severity):
        return f"rule {rule.name}: title must be text and default_severity a Severity"
    if rule.window not in ("steady", "full"):
        return f"rule {rule.name}: window must be 'steady' or 'full', not {clip_value(rule.window, 40)!r}"
    for attr in ("requires", "optional", "aliases"):
        value = getattr(rule, attr)
        if not isinstance(value, (tuple, list)) or not all(isinstance(v, str) for v in value):
            return f"rule {rule.name}: {attr} must be a tuple of names, not {clip_value(value, 60)!r}"
    # __dataclass_params__ is on every dataclass, but typeshed's DataclassInstance does not declare it.
    if not dataclasses.is_dataclass(rule.Options) or not rule.Options.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        return f"rule {rule.name}: Options must be a frozen dataclass"
    unknown = [t for t in (*rule.requires, *rule.optional) if t not in TABLES]
    if unknown:
        return f"rule {rule.name}: unknown tables {unknown}{_did_you_mean(unknown[0], TABLES)} (known: {sorted(TABLES)})"
    if not hasattr(rule.columns, "items"):
        return f"rule {rule.name}: columns must be a mapping of table to column names"
    listed = (*rule.requires, *rule.optional)
    for table, cols in rule.columns.items():
        if table not in listed:
            return (f"rule {rule.name}: columns given for {clip_value(table, 60)!r}, which is not in requires or "
                    f"optional{_did_you_mean(str(table), listed)}")
        known = TABLES[table].column_names
        bad = [c for c in ([cols] if isinstance(cols, str) else cols) if not isinstance(c, str) or c not in known]
        if isinstance(cols, str) or bad:
            hint = _did_you_mean(str(bad[0]), known) if bad else " (give a tuple of names)"
            return (f"rule {rule.name}: unknown columns of {table}: {clip_value(bad or [cols], 120)}{hint} "
                    f"(known: {list(known)})")
    try:
        dataclasses.asdict(rule.Options())
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - the plugin's defaults, not the user's settings
        return f"rule {rule.name}: its default Options cannot be built ({failure(exc)})"
    if not callable(getattr(rule, "check", None)) or rule.check is Rule.check:
        return f"rule {rule.name}: has no check() method"
    return None


def _did_you_mean(name: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(str(name), list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _entry_points() -> list[metadata.EntryPoint]:
    return list(metadata.entry_points(group=ENTRY_POINT_GROUP))


def _dist_version(ep: metadata.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return f"{dist.name} {dist.version}" if dist is not None else ""


def _own_version() -> str:
    from nsys_rules import __version__

    return __version__
