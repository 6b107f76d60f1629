"""Hook specifications: how plugins (and the built-in rule pack) extend nsys-rules.

A plugin is a module or object with functions marked ``@hookimpl`` whose names match
the specs below; it is found through the ``nsys_rules`` entry-point group::

    [project.entry-points.nsys_rules]
    my_plugin = "my_package.plugin"

The built-in rules register through the very same hooks.
"""

from __future__ import annotations

from typing import Any, Callable

import pluggy

PROJECT = "nsys_rules"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def register_rules() -> list[type]:
    """Return the rule classes this plugin provides.

    :return: a list of :class:`nsys_rules.rule.Rule` subclasses. Names must be unique
        across all plugins; a duplicate is reported as a plugin error.

    Called once, when the plugin manager is built (before any trace is read).
    """


@hookspec
def register_job_rules() -> list[type]:
    """Return the job rule classes this plugin provides: rules over all ranks of a job at once.

    :return: a list of :class:`nsys_rules.job_rule.JobRule` subclasses. They share one name
        space with the per-trace rules (selection, ``--set``, config); a duplicate is a plugin error.

    Called once, when the plugin manager is built. Each job rule's ``check(ctx)`` then runs once
    per ``check`` run, after every trace was read, with a :class:`nsys_rules.job_rule.JobContext`.
    """


@hookspec
def register_formatters() -> dict[str, Callable[..., str]]:
    """Return output formats this plugin provides.

    :return: a mapping of format name (as given to ``--format``) to a callable
        ``format(report: nsys_rules.engine.Report) -> str``.

    Called once, when the plugin manager is built. A name that is already taken is an error.
    A formatter that draws the steady-state profile sets ``format.needs_profile = True``; the
    engine then fills ``TraceResult.profile`` (see :mod:`nsys_rules.model.overview`).
    """


@hookspec
def register_loaders() -> dict[str, Callable[..., Any]]:
    """Return trace loaders for file types nsys-rules does not read itself.

    :return: a mapping of file suffix (for example ``".parquet"``) to a callable
        ``load(path: pathlib.Path) -> nsys_rules.model.trace.Trace``.

    Called once, when the plugin manager is built; a loader is used for inputs whose
    suffix matches.
    """
