"""``packrt --version``, and where ``packrt check --model`` finds its model: a factory with ``--config``,
a config dataclass, the current directory; the hint when the import fails (model directories: test_cli_pretrained)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import packrt
import packrt.io
import packrt.models
from packrt.cli import main, versions

_FACTORY = textwrap.dedent(
    """
    import packrt_core as p
    from packrt_core import nn

    class Net(nn.Module):
        def __init__(self, width=3, depth=4):
            super().__init__()
            self.weight = nn.Parameter(p.zeros(width, depth))

    def build(width=3, depth=4):
        return Net(width, depth)
    """
)


def _checkpoint(path: Path, width: int = 5, depth: int = 4) -> Path:
    packrt.io.save_file({"weight": np.zeros((width, depth), np.float32)}, path)
    return path


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A current directory holding ``factory_<id>.py`` (not on sys.path) and a (5, 4) checkpoint."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / f"factory_{tmp_path.name}.py".replace("-", "_")).write_text(_FACTORY)
    _checkpoint(tmp_path / "m.safetensors")
    return tmp_path


def _factory_name(workdir: Path) -> str:
    return f"factory_{workdir.name}".replace("-", "_")


def test_version_prints_every_installed_packrt_distribution_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"{name} {version}" for name, version in versions()]
    assert f"packrt {metadata.version('packrt')}" in lines
    assert f"packrt-core {metadata.version('packrt-core')}" in lines


def test_a_factory_module_in_the_current_directory_is_imported_as_python_m_does(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = list(sys.path)
    assert main(["check", "m.safetensors", "--model", f"{_factory_name(workdir)}:build"]) == 1  # width 3 != 5
    assert "weight: model F32 [3, 4], checkpoint F32 [5, 4]" in capsys.readouterr().out
    assert sys.path == before  # the current directory was on sys.path only while the command ran


def test_config_json_reaches_the_factory_as_keyword_arguments(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (workdir / "config.json").write_text(json.dumps({"width": 5}))
    command = ["check", "m.safetensors", "--model", f"{_factory_name(workdir)}:build", "--config", "config.json"]
    assert main(command) == 0
    assert capsys.readouterr().out.rstrip().endswith("result: match")


def test_config_json_becomes_the_config_dataclass_a_factory_is_annotated_with(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    small: dict[str, Any] = {"vocab": 11, "hidden": 8, "heads": 2, "layers": 1, "intermediate": 16, "max_positions": 6}
    model = packrt.models.BertEncoder(packrt.models.EncoderConfig(**small))
    packrt.io.save_checkpoint(model, tmp_path / "ckpt")
    (tmp_path / "encoder.json").write_text(json.dumps(small))
    command = ["check", str(tmp_path / "ckpt"), "--model", "packrt.models:BertEncoder", "--config"]
    assert main([*command, str(tmp_path / "encoder.json")]) == 0
    assert "result: match" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("content", "pattern"),
    [
        (None, "--config 'config.json' cannot be read"),
        ("{not json", "--config 'config.json' is not valid JSON"),
        ("[1, 2]", "must hold a JSON object of arguments, not a list"),
        ('{"colour": "red"}', "building the model failed: TypeError"),
        ("[" * 100_000 + "]" * 100_000, "--config 'config.json' is not valid JSON"),
        ("fifo", "--config 'config.json' cannot be read: 'config.json' is a FIFO (named pipe), not a regular file"),
    ],
    ids=["missing", "not-json", "not-an-object", "unknown-argument", "deeply-nested", "fifo"],
)
def test_a_config_that_cannot_be_used_exits_2_with_the_reason(
    workdir: Path, capsys: pytest.CaptureFixture[str], content: str | None, pattern: str
) -> None:
    if content == "fifo":
        os.mkfifo(workdir / "config.json")  # reading it would block forever
    elif content is not None:
        (workdir / "config.json").write_text(content)
    command = ["check", "m.safetensors", "--model", f"{_factory_name(workdir)}:build", "--config", "config.json"]
    assert main(command) == 2
    err = capsys.readouterr().err
    assert err.startswith("packrt check: error: ") and pattern in err


def test_a_model_directory_takes_no_config(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (workdir / "hf").mkdir()
    assert main(["check", "m.safetensors", "--model", "hf", "--config", "c.json"]) == 2
    assert "--config applies to --model module:factory" in capsys.readouterr().err


def test_a_module_that_is_nowhere_prints_where_it_was_looked_for_and_the_fix(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", "m.safetensors", "--model", "not_here_at_all:build"]) == 2
    err = capsys.readouterr().err
    assert "cannot import module 'not_here_at_all'" in err
    assert f"from the current directory ({workdir})" in err
    assert "not_here_at_all.py" in err and "PYTHONPATH" in err


def test_a_hint_prints_on_its_own_line_not_as_a_literal_backslash_n(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", "m.safetensors", "--model", "not_here_at_all:build"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("packrt check: error: --model 'not_here_at_all:build': cannot import module")
    assert lines[1].startswith("hint: 'not_here_at_all' is imported as `python -m` would")
    assert "\\n" not in "".join(lines)


def test_a_module_whose_own_import_fails_names_the_missing_dependency(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (workdir / "needs_more.py").write_text("import a_dependency_that_is_not_installed\n")
    assert main(["check", "m.safetensors", "--model", "needs_more:build"]) == 2
    assert "'needs_more' was found, but importing it failed on 'a_dependency_that_is_not_installed'" in (
        capsys.readouterr().err
    )


def test_the_command_finds_a_factory_beside_it_when_run_as_a_program(workdir: Path) -> None:
    (workdir / "config.json").write_text(json.dumps({"width": 5}))
    model = f"{_factory_name(workdir)}:build"
    command = [sys.executable, "-m", "packrt.cli", "check", "m.safetensors", "--model", model]
    command += ["--config", "config.json"]
    done = subprocess.run(command, cwd=workdir, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    assert "result: match" in done.stdout
