"""Loaders come through the plugin door: the built-in ones first, a plugin's for the paths it claims.

The built-in SQLite, parquetdir and arrowdir loaders register through ``register_loaders`` as the first
plugin, exactly as a third-party loader does; ``open_trace`` picks the loader of the path's suffix, else
the first that claims the path, and hands the export it returns the memory meter built from the settings.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from nsys_rules import builtin_loaders
from nsys_rules.api import hookimpl
from nsys_rules.api.loaders import Export, InputError
from nsys_rules.errors import NsysRulesError
from nsys_rules.inputs import open_trace
from nsys_rules.loaders.sqlite import SqliteExport
from nsys_rules.plugin_manager import BUILTIN_PLUGINS, build_registry
from tests.conftest import EXAMPLE
from tests.fuzz.harness import run_cli_inprocess

MB = 1024**2


class BundleLoader:
    """A plugin's loader: a ``.bundle`` folder holding one ``trace.db`` (an nsys SQLite export under another name);
    it also claims such a folder whatever its name."""

    def __init__(self) -> None:
        self.opened: list[Path] = []

    def __call__(self, path: Path) -> Export:
        self.opened.append(path)
        return SqliteExport(path / "trace.db")

    def claims(self, path: Path) -> bool:
        return (path / "trace.db").is_file()


def _plugin(loader: BundleLoader) -> object:
    class Plugin:
        @hookimpl
        def register_loaders(self) -> dict[str, BundleLoader]:
            return {".bundle": loader}

    return Plugin()


def _bundle(folder: Path) -> Path:
    folder.mkdir()
    shutil.copyfile(EXAMPLE, folder / "trace.db")
    return folder


def test_the_built_in_loaders_are_the_first_plugin():
    assert BUILTIN_PLUGINS[0] == ("nsys_rules.builtin_loaders", "nsys-rules (built-in) loaders")
    registry = build_registry(autoload=False)
    assert list(registry.loaders) == [".sqlite", ".parquetdir", ".arrowdir"]
    assert all(registry.loaders[s] is builtin_loaders.LOADERS[s] for s in registry.loaders)


def test_a_plugin_loader_opens_the_paths_it_claims_with_the_meter_from_the_settings(tmp_path):
    loader = BundleLoader()
    registry = build_registry(autoload=False, extra=(("bundles", _plugin(loader)),))
    assert registry.errors == [] and registry.loaders[".bundle"] is loader
    by_suffix = _bundle(tmp_path / "run.bundle")
    by_claim = _bundle(tmp_path / "plain-folder")
    for path in (by_suffix, by_claim):
        trace = open_trace(path, registry.loaders, max_memory=512 * MB)
        try:
            assert trace.label == str(path) and isinstance(trace.export, SqliteExport)
            assert trace.meter is trace.export.meter and trace.meter is not None
            assert trace.meter.limit == 512 * MB and trace.meter.label == str(path)  # type: ignore[attr-defined]
            assert len(trace.frame("kernels", ["start"])) == trace.row_count("kernels") > 0
        finally:
            trace.close()
    assert loader.opened == [by_suffix, by_claim]
    # A path no loader claims is still read as SQLite; the plugin never sees it.
    open_trace(EXAMPLE, registry.loaders).close()
    assert loader.opened == [by_suffix, by_claim]


def test_a_claimed_path_runs_end_to_end(monkeypatch, tmp_path):
    from nsys_rules.commands import check as check_cmd

    loader = BundleLoader()
    monkeypatch.setattr(check_cmd, "registry_for",
                        lambda args: build_registry(autoload=False, extra=(("bundles", _plugin(loader)),)))
    folder = _bundle(tmp_path / "capture")
    args = ("check", "--format", "json", "--fail-on", "never", "--select", "sync-stall,kernel-tail")
    run = run_cli_inprocess(*args, str(folder))
    assert run.code == 0, run.stderr
    report = json.loads(run.stdout)
    assert [t["path"] for t in report["traces"]] == [str(folder)] and loader.opened == [folder]
    assert report["errors"] == [] and report["findings"]
    direct = json.loads(run_cli_inprocess(*args, str(EXAMPLE)).stdout)  # the same file through the SQLite loader
    assert [(f["rule"], f["message"]) for f in report["findings"]] == [
        (f["rule"], f["message"].replace(str(EXAMPLE), str(folder))) for f in direct["findings"]]


def test_the_meter_given_at_open_stops_a_read_that_cannot_fit(tmp_path):
    loader = BundleLoader()
    registry = build_registry(autoload=False, extra=(("bundles", _plugin(loader)),))
    trace = open_trace(_bundle(tmp_path / "t.bundle"), registry.loaders, max_memory=1)
    try:
        with pytest.raises(InputError, match=r"t\.bundle: reading api 7,244 rows .* \(--max-memory\)"):
            trace.frame("api", ["start", "end"])
    finally:
        trace.close()


def test_a_claims_that_raises_is_the_plugins_failure_in_one_line(tmp_path):
    class Broken(BundleLoader):
        def claims(self, path: Path) -> bool:
            raise KeyError("no marker")

    registry = build_registry(autoload=False, extra=(("broken", _plugin(Broken())),))
    with pytest.raises(NsysRulesError, match=r"the plugin loader for \.bundle failed: KeyError"):
        open_trace(tmp_path, registry.loaders)
