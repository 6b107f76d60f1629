"""One unit per kind of option: shares are percents named ``*_pct`` (checked for every rule by
``nsys_rules.testing.assert_rule_conventions``, tests/meta); the former names still work for one release."""

from __future__ import annotations

import dataclasses

import pytest

from nsys_rules.config import load_config, parse_set
from nsys_rules.plugin_manager import build_registry
from nsys_rules.testing import TraceBuilder, run_rule
from tests.conftest import EXAMPLE, run_cli

REGISTRY = build_registry(autoload=True)
RULES = REGISTRY.rules


def _fields(rule: type) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(rule.Options)}


@pytest.mark.parametrize("name", sorted(n for n, r in RULES.items() if r.renamed_options))
def test_each_former_name_points_at_a_current_option(name):
    fields = _fields(RULES[name])
    for old, renamed in RULES[name].renamed_options.items():
        assert old not in fields and renamed.new in fields and renamed.factor in (1, 100)


def test_old_name_through_set_is_converted_with_one_warning(capsys):
    got = parse_set(["kernel-tail.warn_share=0.07", "kernel-tail.warn_share=0.07", "sync-stall.warn_share=4"], RULES,
                    REGISTRY.aliases())
    assert got == {"kernel-tail": {"warn_share_pct": 7.0}, "sync-stall": {"warn_share_pct": 4.0}}
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "nsys-rules: kernel-tail.warn_share is deprecated and goes away in the next release; write "
        "kernel-tail.warn_share_pct=7 (a percent, not a fraction)",
        "nsys-rules: sync-stall.warn_share is deprecated and goes away in the next release; write "
        "sync-stall.warn_share_pct=4"]


def test_old_name_in_the_config_file_is_converted(tmp_path, capsys):
    path = tmp_path / "nsys-rules.toml"
    path.write_text("[rules.gemv-dominance]\nroofline_fraction = 0.9\n[rules.queue-delay]\nwarning_share = 0.2\n")
    settings = load_config(path, RULES, REGISTRY.aliases())
    assert settings.rule_options == {"gemv-dominance": {"roofline_pct": 90.0}, "queue-delay": {"warn_share_pct": 20.0}}
    err = capsys.readouterr().err
    assert "gemv-dominance.roofline_fraction is deprecated" in err and "gemv-dominance.roofline_pct=90" in err


def test_old_and_new_name_judge_alike(tmp_path):
    b = TraceBuilder()
    for step in range(30):  # a kernel whose every tenth launch runs 10x longer
        b.nvtx("step", step * 1_000_000, step * 1_000_000 + 900_000)
        for k in range(10):
            b.kernel("gemv_kernel", start=step * 1_000_000 + 10_000 + k * 60_000,
                     duration=500_000 if (step + k) % 10 == 0 and k == 0 else 50_000)
    path = b.write(tmp_path / "t.sqlite")
    new = run_rule("kernel-tail", path, options={"warn_share_pct": 90.0, "min_share_pct": 0.5})
    old = run_rule("kernel-tail", path, options={"warn_share": 0.9, "min_share": 0.005})
    assert new and [(f.severity, f.metrics) for f in new] == [(f.severity, f.metrics) for f in old]


def test_old_name_on_the_command_line_warns_once_and_the_report_shows_the_new_name():
    proc = run_cli("check", str(EXAMPLE), "--format", "json", "--fail-on", "never", "--no-plugins",
                   "--set", "kernel-tail.min_share=0.02", "--set", "launch-blocking.blocking_share=0.5")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        "nsys-rules: kernel-tail.min_share is deprecated and goes away in the next release; write "
        "kernel-tail.min_share_pct=2 (a percent, not a fraction)",
        "nsys-rules: launch-blocking.blocking_share is deprecated and goes away in the next release; write "
        "launch-blocking.blocking_pct=50 (a percent, not a fraction)"]
    assert '"min_share_pct": 2.0' in proc.stdout and '"blocking_pct": 50.0' in proc.stdout


def test_a_name_that_never_existed_is_still_a_usage_error():
    proc = run_cli("check", str(EXAMPLE), "--set", "kernel-tail.min_shares=2")
    assert proc.returncode == 2 and "did you mean" in proc.stderr


@pytest.mark.parametrize("text", ["١", "²", "\uff11", "1_000", "", "+", "1e", "0x10", "1,5"])
def test_numbers_in_other_scripts_are_not_numbers(text):
    from nsys_rules.units import plain_float, whole_number

    with pytest.raises(ValueError):
        plain_float(text)
    with pytest.raises(ValueError):
        whole_number(text)


@pytest.mark.parametrize(("text", "value"), [("2", 2.0), (" 2.5 ", 2.5), ("-1e3", -1000.0), (".5", 0.5), ("5.", 5.0),
                                             ("1E2", 100.0)])
def test_plain_numbers_read_as_float(text, value):
    from nsys_rules.units import plain_float

    assert plain_float(text) == value


def test_whole_numbers_take_a_sign_and_no_fraction():
    from nsys_rules.units import whole_number

    assert whole_number(" -12 ") == -12 and whole_number("+7") == 7
    with pytest.raises(ValueError):
        whole_number("1.0")


def test_a_negative_percent_is_refused_for_every_rule_and_zero_is_not():
    from nsys_rules.errors import UsageError

    pct_options = [(n, f) for n, r in RULES.items() for f in _fields(r) if f.endswith("_pct")]
    assert len(pct_options) > 20
    for name, option in pct_options:
        with pytest.raises(UsageError, match="cannot be negative"):
            parse_set([f"{name}.{option}=-1"], RULES, REGISTRY.aliases())
        assert parse_set([f"{name}.{option}=0"], RULES, REGISTRY.aliases())[name][option] == 0
