"""``--check-adapter``: an adapter's own mistakes are reported as adapter problems, naming the member
and the fix, before any clause runs (the broken adapters are the torch one with one mistake each)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from packrt_conformance.adapter_check import PROBES, SURFACE, adapter_problems, format_problems
from packrt_conformance.adapters import build_adapter
from packrt_conformance.clauses import CAPABILITIES

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))  # broken_adapters.py beside this file

import broken_adapters  # noqa: E402
from cli_run import run_cli  # noqa: E402

pytest.importorskip("torch")


def test_the_shipped_torch_adapter_has_no_problem() -> None:
    assert adapter_problems(build_adapter("torch")) == []


def test_a_missing_member_is_named_with_its_fix() -> None:
    problems = adapter_problems(broken_adapters.NoRawBytes())
    assert [(p.member, p.problem) for p in problems] == [("raw_bytes", "missing")]
    assert "packrt_conformance.adapter.Adapter.raw_bytes" in problems[0].fix


def test_a_helper_signature_that_drops_a_parameter_is_named() -> None:
    problems = adapter_problems(broken_adapters.TensorWithoutDtype())
    assert [p.member for p in problems] == ["tensor"]
    assert "takes no parameter 'dtype'" in problems[0].problem
    assert "tensor(self, data: 'Any', dtype: 'str' = 'float32')" in problems[0].fix


def test_a_helper_that_ignores_meta_init_is_an_adapter_problem() -> None:
    problems = adapter_problems(broken_adapters.DevicePinned())
    assert problems[0].member == "linear"
    assert "built inside meta_init()" in problems[0].problem and "real storage" in problems[0].problem
    assert "explicit device" in problems[0].fix
    assert any("'meta-init'" in p.problem for p in problems[1:]), "the declared capability's probe fails too"


def test_a_declared_capability_that_does_not_exist_is_an_adapter_problem() -> None:
    problems = adapter_problems(broken_adapters.ClaimsPacking())
    assert sorted(p.problem.split("'")[1] for p in problems) == ["dtype-names", "packing"]
    assert all(p.member == "capabilities" and p.fix.startswith("drop '") for p in problems)
    assert "is_packed is False" in next(p.problem for p in problems if "'packing'" in p.problem)


def test_a_sequential_that_cannot_be_indexed_is_named_as_such() -> None:
    problems = adapter_problems(broken_adapters.SequentialWithoutIndexing())
    assert [p.member for p in problems] == ["nn.Sequential"]
    assert problems[0].problem.startswith("nn.Sequential cannot be indexed: seq[0] raised TypeError")
    assert "seq[i]" in problems[0].fix


@pytest.mark.usefixtures("require_packrt")
def test_the_packrt_adapter_has_no_problem_the_surface_checks_included() -> None:
    assert sorted(SURFACE) == ["linear", "nn.Module", "nn.Parameter / nn.Buffer", "nn.Sequential"]
    assert adapter_problems(build_adapter("packrt")) == []


def test_every_capability_has_a_probe() -> None:
    assert sorted(PROBES) == sorted(CAPABILITIES)


def test_the_report_names_each_problem_as_an_adapter_problem() -> None:
    problems = adapter_problems(broken_adapters.ClaimsPacking())
    text = format_problems("broken_adapters:ClaimsPacking", problems)
    assert text.splitlines()[0].endswith("has 2 problem(s) (no clause was run):")
    assert all(line.startswith("  adapter problem: capabilities: declares") for line in text.splitlines()[1:])


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))}
    return run_cli(*args, cwd=cwd, env=env)


@pytest.mark.parametrize(
    ("adapter", "named"),
    [
        ("NoRawBytes", "adapter problem: raw_bytes: missing"),
        ("DevicePinned", "adapter problem: linear: built inside meta_init()"),
        ("ClaimsPacking", "adapter problem: capabilities: declares 'packing'"),
    ],
)
def test_check_adapter_stops_before_any_clause_with_status_4(tmp_path: Path, adapter: str, named: str) -> None:
    done = _cli("--check-adapter", "--impl", f"broken_adapters:{adapter}", cwd=tmp_path)
    assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-2000:]
    assert named in done.stderr
    assert "no clause was run" in done.stderr
    assert "passed" not in done.stdout and "failed" not in done.stdout


def test_check_adapter_on_a_sound_adapter_goes_on_with_the_run(tmp_path: Path) -> None:
    done = _cli(
        "--check-adapter", "--impl", "torch", "-q", "-k", "test_fresh_module_has_empty_registries", cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "adapter torch checked" in done.stdout
    assert "1 passed" in done.stdout
