"""A rule checks its own option values (``Options.__post_init__`` raising ``ValueError``): a bad value
is a usage error (exit 2) in one line naming ``rule.option``, from ``--set``, the config file and the
test kit alike; never a rule failure (exit 4) or a traceback.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pytest

from nsys_rules.api import Rule, RuleContext, UsageError, hookimpl
from nsys_rules.commands import check as check_cmd
from nsys_rules.plugin_manager import build_registry
from nsys_rules.testing import run_rule
from tests.conftest import EXAMPLE
from tests.fuzz.harness import run_cli_inprocess

E = str(EXAMPLE)
BAD = "missing ), unterminated subpattern at position 0"  # what re.compile("(") says


@dataclass(frozen=True)
class FilterOptions:
    kernel_pattern: str = field(default="", metadata={"help": "only kernels whose name matches this regular expression"})
    low_pct: float = field(default=10.0, metadata={"help": "lower bound, a percent"})
    high_pct: float = field(default=20.0, metadata={"help": "upper bound, a percent"})

    def __post_init__(self) -> None:
        try:
            re.compile(self.kernel_pattern)
        except re.error as exc:
            raise ValueError(f"kernel_pattern {self.kernel_pattern!r} is not a regular expression: {exc}") from None
        if self.low_pct > self.high_pct:
            raise ValueError(f"low_pct ({self.low_pct:g}) must not exceed high_pct ({self.high_pct:g})")


class KernelFilter(Rule):
    """Finds nothing; its options are checked.

    What it detects: nothing.
    Why it hurts: it does not.
    Evidence: none.
    Next optimizations: none.
    Options: `kernel_pattern`, `low_pct`, `high_pct`.
    Requires: kernels.
    False positives: none.
    """

    name = "kernel-filter"
    title = "Options checked"
    requires = ("kernels",)
    window = "full"
    Options = FilterOptions

    def check(self, ctx: RuleContext):
        return []


@dataclass(frozen=True)
class RawOptions:
    pattern: str = field(default="", metadata={"help": "a regular expression, compiled as is"})
    key: str = field(default="a", metadata={"help": "a key of a table"})

    def __post_init__(self) -> None:
        re.compile(self.pattern)  # re.error itself, not turned into a ValueError
        {"a": 1, "b": 2}[self.key]  # noqa: B018 - a KeyError for an unknown key: the rule's own bug


class RawChecks(KernelFilter):
    """Finds nothing; its Options raise what they raise.

    What it detects: nothing.
    Why it hurts: it does not.
    Evidence: none.
    Next optimizations: none.
    Options: `pattern`, `key`.
    Requires: kernels.
    False positives: none.
    """

    name = "raw-checks"
    Options = RawOptions


class Plugin:
    @hookimpl
    def register_rules(self):
        return [KernelFilter, RawChecks]


@pytest.fixture
def with_plugin(monkeypatch):
    monkeypatch.setattr(check_cmd, "registry_for", lambda a: build_registry(autoload=False, extra=(("opts", Plugin()),)))


def _one_line(run, code: int) -> str:
    assert run.code == code, run.stderr
    assert "Traceback" not in run.stderr and run.stdout == ""
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    return lines[0]


def test_a_bad_regex_from_set_is_exit_2_naming_the_option(with_plugin):
    run = run_cli_inprocess("check", "--set", "kernel-filter.kernel_pattern=(", E)
    assert _one_line(run, 2) == f"nsys-rules: --set: kernel-filter.kernel_pattern '(' is not a regular expression: {BAD}"


def test_a_bad_regex_from_the_config_file_is_exit_2_naming_the_file(with_plugin, tmp_path):
    config = tmp_path / "nsys-rules.toml"
    config.write_text('[rules.kernel-filter]\nkernel_pattern = "("\n')
    run = run_cli_inprocess("check", "--config", str(config), E)
    assert _one_line(run, 2) == (f"nsys-rules: {config}: kernel-filter.kernel_pattern '(' is not a regular "
                                 f"expression: {BAD}")


def test_a_good_value_runs(with_plugin):
    run = run_cli_inprocess("check", "--select", "kernel-filter", "--set", "kernel-filter.kernel_pattern=^gemv", E)
    assert run.code == 0, run.stderr


def test_a_rule_not_selected_is_checked_too(with_plugin):
    """As an unknown option name is: the command line is wrong whatever runs."""
    run = run_cli_inprocess("check", "--select", "sync-stall", "--set", "kernel-filter.kernel_pattern=(", E)
    assert _one_line(run, 2).startswith("nsys-rules: --set: kernel-filter.kernel_pattern '('")


def test_of_several_values_the_refused_one_is_named(with_plugin):
    run = run_cli_inprocess("check", "--set", "kernel-filter.low_pct=1", "--set", "kernel-filter.kernel_pattern=[",
                            "--set", "kernel-filter.high_pct=5", E)
    assert _one_line(run, 2).startswith("nsys-rules: --set: kernel-filter.kernel_pattern '[' is not a regular")


def test_values_wrong_only_together_name_the_rules_options(with_plugin, tmp_path):
    # Each is fine with the other at its default (10 <= 15 <= 20); together 15 > 12.
    config = tmp_path / "nsys-rules.toml"
    config.write_text("[rules.kernel-filter]\nlow_pct = 15.0\n")
    run = run_cli_inprocess("check", "--config", str(config), "--set", "kernel-filter.high_pct=12", E)
    assert _one_line(run, 2) == ("nsys-rules: --set: options of kernel-filter (low_pct, high_pct): low_pct (15) must "
                                 "not exceed high_pct (12)")
    # Both raised together, each in range on its own: accepted, whatever the order they are checked in.
    run = run_cli_inprocess("check", "--select", "kernel-filter", "--set", "kernel-filter.low_pct=30",
                            "--set", "kernel-filter.high_pct=40", E)
    assert run.code == 0, run.stderr


def test_re_error_raised_as_is_is_a_usage_error_too(with_plugin):
    run = run_cli_inprocess("check", "--set", "raw-checks.pattern=(", E)
    assert _one_line(run, 2) == f"nsys-rules: --set: raw-checks.pattern: {BAD}"


def test_any_other_exception_is_the_rules_bug_exit_4(with_plugin):
    run = run_cli_inprocess("check", "--set", "raw-checks.key=c", E)
    assert _one_line(run, 4) == "nsys-rules: rule raw-checks: its Options failed on the values of --set: KeyError: 'c'"


def test_the_test_kit_raises_the_same_line(tmp_path):
    with pytest.raises(UsageError) as refused:
        run_rule(KernelFilter, E, options={"kernel_pattern": "("})
    assert str(refused.value) == f"options: kernel-filter.kernel_pattern '(' is not a regular expression: {BAD}"
    assert run_rule(KernelFilter, E, options={"kernel_pattern": "gemv"}) == []


def test_a_builtin_rules_check_names_its_option():
    run = run_cli_inprocess("check", "--no-plugins", "--set", "gemv-dominance.roofline_pct=900", E)
    assert _one_line(run, 2) == "nsys-rules: --set: gemv-dominance.roofline_pct must be a percent (0-150), not 900.0"
