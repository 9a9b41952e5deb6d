"""``packrt-conformance``: ``--impl module:object`` imports from the current directory as ``python -m``
does, and an import that fails prints what failed and the fix, with pytest's usage-error status."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from cli_run import run_cli

from packrt_conformance.cli import _impl_spec, import_hint, main

_USAGE_ERROR = 4


@pytest.mark.parametrize(
    ("argv", "spec"),
    [
        (["--impl", "mine:Adapter", "-q"], "mine:Adapter"),
        (["-q", "--impl=mine:Adapter"], "mine:Adapter"),
        (["--impl", "first:A", "--impl", "second:B"], "second:B"),
        (["-q"], None),
    ],
    ids=["separate", "equals", "last-wins", "absent"],
)
def test_the_impl_value_is_read_in_both_option_forms(argv: list[str], spec: str | None) -> None:
    assert _impl_spec(argv) == spec


def test_an_impl_module_that_does_not_exist_exits_4_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    before = list(sys.path)
    assert main(["--impl", "no_such_adapter_mod:Adapter", "-q"]) == _USAGE_ERROR
    err = capsys.readouterr().err
    assert err.startswith("packrt-conformance: error: --impl no_such_adapter_mod:Adapter: cannot import module")
    assert f"from the current directory ({tmp_path})" in err
    assert "PYTHONPATH" in err and "no_such_adapter_mod.py" in err
    assert sys.path == before  # the current directory was on sys.path only for the run


def test_an_impl_module_whose_own_import_fails_names_the_missing_dependency(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "broken_adapter_mod.py").write_text("import a_dependency_that_is_not_installed\n")
    monkeypatch.chdir(tmp_path)
    assert main(["--impl", "broken_adapter_mod:Adapter"]) == _USAGE_ERROR
    err = capsys.readouterr().err
    assert "'broken_adapter_mod' was found, but importing it failed on 'a_dependency_that_is_not_installed'" in err


def test_the_hint_for_a_dotted_module_names_its_top_package() -> None:
    hint = import_hint("mypkg.adapters", ModuleNotFoundError("No module named 'mypkg'", name="mypkg"))
    assert "mypkg.py (or the package mypkg/)" in hint


@pytest.mark.usefixtures("require_packrt")
def test_an_adapter_module_in_the_current_directory_is_found_as_python_m_finds_it(tmp_path: Path) -> None:
    (tmp_path / "cwd_adapter.py").write_text(
        "from packrt_conformance.adapters.packrt_adapter import PackrtAdapter as Adapter\n"
    )
    done = run_cli("--impl", "cwd_adapter:Adapter", "-q", "-k", "signature", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "passed" in done.stdout


def test_help_prints_the_commands_own_usage_and_options_first(capsys: pytest.CaptureFixture[str]) -> None:
    for flag in ("--help", "-h"):
        assert main([flag]) == 0
        out = capsys.readouterr().out
        lines = out.splitlines()
        assert lines[0].startswith("usage: packrt-conformance [--impl SPEC]")
        assert len(lines) < 60 and "pytest.main()" not in out
        for option in ("--impl SPEC", "--revision {1,2}", "--expectations FILE", "--report-json PATH"):
            assert any(line.strip().startswith(option) for line in lines), option
        assert "--pytest-help" in out  # where pytest's own options are


def test_help_stays_the_commands_own_beside_other_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--impl", "torch", "-q", "--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: packrt-conformance")


def test_pytest_help_prints_pytests_options_with_the_suites_group(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--pytest-help"]) == 0
    out = capsys.readouterr().out
    assert "-k EXPRESSION" in out and "--impl=SPEC" in out
