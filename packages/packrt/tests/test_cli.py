"""``packrt inspect`` and ``packrt check``: what they print, and their exit codes (0 ok, 1 differs, 2 error)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import packrt.io
from packrt.cli import main

_MODELS = textwrap.dedent(
    """
    import packrt_core as p
    from packrt_core import nn

    class Block(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.weight = nn.Parameter(p.zeros(width, 4))
            self.bias = nn.Parameter(p.zeros(4))

    class Net(nn.Module):
        def __init__(self, width=3):
            super().__init__()
            self.embed = Block(width)
            self.head = Block(width)
            self.head.weight = self.embed.weight

    BUILT = []

    def build():
        net = Net()
        BUILT.append(net.embed.weight.has_storage)
        return net

    def wide():
        return Net(width=5)

    def broken():
        raise RuntimeError("no such config")

    NOT_CALLABLE = 3
    """
)


@pytest.fixture
def models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Importable module name of a small model file; its factories build packrt.nn modules."""
    name = f"cli_models_{os.getpid()}_{tmp_path.name}".replace("-", "_")
    (tmp_path / f"{name}.py").write_text(_MODELS)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def _save(path: Path, arrays: dict[str, np.ndarray[Any, Any]], **metadata: str) -> Path:
    packrt.io.save_file(arrays, path, metadata=metadata or None)
    return path


def _net_arrays(width: int = 3) -> dict[str, np.ndarray[Any, Any]]:
    return {
        "embed.weight": np.ones((width, 4), np.float32),
        "embed.bias": np.zeros(4, np.float32),
        "head.bias": np.zeros(4, np.float32),
    }


def test_the_io_module_re_exports_packrt_io() -> None:
    import packrt_io

    assert packrt.io.__all__ == packrt_io.__all__
    assert packrt.io.load_checkpoint is packrt_io.load_checkpoint


def test_inspect_prints_an_aligned_table_with_metadata(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _save(
        tmp_path / "m.safetensors",
        {"a.long_name": np.zeros((2, 3), np.float16), "b": np.zeros(10, np.int64)},
        note="hello",
    )
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"checkpoint: {path} (single file)" in out
    assert "tensors: 2, 92 bytes" in out
    lines = out.splitlines()
    table = lines[lines.index("name         dtype  shape   bytes") :][:3]
    assert table == [
        "name         dtype  shape   bytes",
        "a.long_name  F16    [2, 3]     12",
        "b            I64    [10]       80",
    ]
    assert "  note  hello" in lines


def test_inspect_shows_the_shard_map_of_a_sharded_checkpoint(
    tmp_path: Path, models: str, capsys: pytest.CaptureFixture[str]
) -> None:
    module = __import__(models)
    index = packrt.io.save_checkpoint(module.Net(), tmp_path / "ckpt", max_shard_size=40)
    assert main(["inspect", str(tmp_path / "ckpt")]) == 0
    out = capsys.readouterr().out
    assert f"checkpoint: {index} (sharded, 2 shards)" in out
    assert "embed.weight  F32    [3, 4]     48  model-00001-of-00002.safetensors" in out
    assert "  model-00002-of-00002.safetensors  2 tensors  32 bytes" in out
    assert '  packrt.ties     {"head.weight":"embed.weight"}' in out.splitlines()
    assert "  total_size      80" in out.splitlines()


def test_inspect_reads_no_tensor_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A header that promises more data than exists would fail any read of that data; inspect only
    # needs the header, but the header is still validated, so this must be refused, not read.
    path = _save(tmp_path / "m.safetensors", {"w": np.zeros(4, np.float32)})
    path.write_bytes(path.read_bytes()[:-1])
    assert main(["inspect", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("packrt inspect: error: checkpoint '")
    assert "truncated" in err


def test_check_reports_a_match_with_exit_0(tmp_path: Path, models: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = _save(tmp_path / "m.safetensors", _net_arrays())
    assert main(["check", str(path), "--model", f"{models}:build"]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith("result: match")
    # The model was built under meta_init: its weights had no storage.
    assert __import__(models).BUILT == [False]


def test_check_accepts_the_second_name_of_a_tie_the_model_holds(
    tmp_path: Path, models: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _save(tmp_path / "m.safetensors", {**_net_arrays(), "head.weight": np.ones((3, 4), np.float32)})
    assert main(["check", str(path), "--model", f"{models}:build"]) == 0
    assert "result: match" in capsys.readouterr().out


def test_check_lists_missing_unexpected_and_mismatched_keys_with_exit_1(
    tmp_path: Path, models: str, capsys: pytest.CaptureFixture[str]
) -> None:
    arrays = _net_arrays()
    del arrays["head.bias"]
    arrays["embed.bias"] = np.zeros(4, np.float16)
    arrays["stray"] = np.zeros(1, np.int8)
    path = _save(tmp_path / "m.safetensors", arrays)
    assert main(["check", str(path), "--model", f"{models}:wide"]) == 1
    out = capsys.readouterr().out
    assert "missing keys (in the model, not in the checkpoint): 1\n  head.bias\n" in out
    assert "unexpected keys (in the checkpoint, not in the model): 1\n  stray\n" in out
    assert "mismatched tensors: 2\n" in out
    assert "  embed.weight: model F32 [5, 4], checkpoint F32 [3, 4]\n" in out
    assert "  embed.bias: model F32 [4], checkpoint F16 [4]\n" in out
    assert out.rstrip().endswith("result: MISMATCH")


@pytest.mark.parametrize(
    ("argv", "pattern"),
    [
        (["check", "{path}", "--model", "nocolon"], "--model 'nocolon' must be 'module:factory'"),
        (["check", "{path}", "--model", "no_such_module_xyz:f"], "cannot import module 'no_such_module_xyz'"),
        (["check", "{path}", "--model", "{models}:missing"], "has no 'missing'"),
        (["check", "{path}", "--model", "{models}:NOT_CALLABLE"], "'NOT_CALLABLE' is a int, not a callable"),
        (["check", "{path}", "--model", "{models}:broken"], "building the model failed: RuntimeError"),
        (["check", "{dir}", "--model", "{models}:build"], "holds no checkpoint: looked for 'model.safetensors'"),
        (["inspect", "{dir}/nope.safetensors"], "nope.safetensors': cannot be opened"),
    ],
    ids=["no-colon", "no-module", "no-attribute", "not-callable", "factory-raises", "empty-dir", "no-file"],
)
def test_usage_and_file_errors_exit_2_with_the_reason_on_stderr(
    tmp_path: Path, models: str, capsys: pytest.CaptureFixture[str], argv: list[str], pattern: str
) -> None:
    path = _save(tmp_path / "m.safetensors", _net_arrays())
    empty = tmp_path / "empty"
    empty.mkdir()
    filled = [arg.format(path=path, models=models, dir=empty) for arg in argv]
    assert main(filled) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert pattern in captured.err
    assert captured.err.startswith(f"packrt {argv[0]}: error: ")


@pytest.mark.parametrize("argv", [[], ["frobnicate"], ["check", "x.safetensors"]], ids=["none", "unknown", "no-model"])
def test_a_malformed_command_line_exits_2_with_usage(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    assert main(argv) == 2
    assert "usage: packrt" in capsys.readouterr().err


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "inspect" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["inspect", "check", "warmup", "serve"])
def test_every_subcommand_help_is_plain_text_without_rest_markup(
    capsys: pytest.CaptureFixture[str], command: str
) -> None:
    # A terminal shows ``Retry-After`` and :class:`X` as typed: help text must read without a renderer.
    assert main([command, "--help"]) == 0
    shown = capsys.readouterr().out
    assert f"usage: packrt {command}" in shown
    assert "``" not in shown and not re.search(r":[a-z]+:`", shown), shown


def _inspect_in_a_subprocess(path: Path) -> subprocess.CompletedProcess[str]:
    """``python -m packrt.cli inspect PATH``, run to the end with its output captured as text."""
    command = [sys.executable, "-m", "packrt.cli", "inspect", str(path)]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)


def test_the_module_runs_as_a_program(tmp_path: Path) -> None:
    path = _save(tmp_path / "m.safetensors", {"w": np.zeros(2, np.float32)}, format="pt")
    result = _inspect_in_a_subprocess(path)
    assert result.returncode == 0, result.stderr
    assert "w     F32    [2]        8" in result.stdout
    missing = _inspect_in_a_subprocess(tmp_path / "none.safetensors")
    assert missing.returncode == 2
    assert "none.safetensors': cannot be opened" in missing.stderr
    assert json.loads(json.dumps(result.stdout))  # plain text, nothing binary


# -- a reader that stops early -----------------------------------------------------------------------


def _many_tensors(path: Path, count: int = 6000) -> Path:
    """A checkpoint whose inspect listing (hundreds of KiB) is far larger than a pipe's buffer."""
    return _save(path, {f"blocks.{i:05d}.attention.query.weight": np.zeros(1, np.float32) for i in range(count)})


def test_inspect_into_a_reader_that_closes_early_exits_141_with_nothing_on_stderr(tmp_path: Path) -> None:
    path = _many_tensors(tmp_path / "many.safetensors")
    process = subprocess.Popen(
        [sys.executable, "-m", "packrt.cli", "inspect", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    first = process.stdout.readline()
    process.stdout.close()  # as `| head -1` does: the rest of the listing has no reader
    stderr = process.stderr.read()
    process.stderr.close()
    assert process.wait(timeout=600) == 141
    assert first.decode().startswith(f"checkpoint: {path} (single file)")
    assert stderr == b"", stderr.decode()


def test_inspect_read_to_the_end_still_exits_0(tmp_path: Path) -> None:
    result = _inspect_in_a_subprocess(_many_tensors(tmp_path / "many.safetensors"))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "tensors: 6000, 24000 bytes" in result.stdout
    assert "blocks.05999.attention.query.weight  F32    [1]        4" in result.stdout


class _ClosedPipe:
    """A stdout whose reader is gone: every write and flush fails as a closed pipe does."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


@pytest.mark.parametrize("argv", [["inspect", "{path}"], ["--help"]], ids=["inspect", "help"])
def test_a_broken_pipe_is_not_reported_as_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    path = _save(tmp_path / "m.safetensors", {"w": np.zeros(2, np.float32)})
    monkeypatch.setattr(sys, "stdout", _ClosedPipe())
    assert main([arg.format(path=path) for arg in argv]) == 141
    assert capsys.readouterr().err == ""


def _raw_checkpoint(path: Path, names: list[str]) -> None:
    """A safetensors file whose header names are written as given (JSON escapes and all)."""
    tensors = {name: {"dtype": "F32", "shape": [1], "data_offsets": [4 * i, 4 * i + 4]} for i, name in enumerate(names)}
    header = json.dumps(tensors).encode("utf-8")
    header += b" " * (-len(header) % 8)
    path.write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * (4 * len(names)))


def test_inspect_escapes_control_characters_and_lone_surrogates_in_names(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "odd.safetensors"
    _raw_checkpoint(path, ["bell\u0007", "esc\u001b[31mred", "half\ud800surrogate"])
    code = main(["inspect", str(path)])
    captured = capsys.readouterr()
    if code == 0:
        assert "bell\\x07" in captured.out and "esc\\x1b[31mred" in captured.out
        assert "half\\ud800surrogate" in captured.out and "\u0007" not in captured.out
    else:  # the reader may refuse the names outright: then as a packrt error, exit 2, no traceback
        assert code == 2 and "Traceback" not in captured.err and "error:" in captured.err


def test_an_internal_failure_is_exit_2_with_the_reason_and_no_traceback(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import packrt.cli as cli

    def broken(path: Any) -> Any:
        raise IndexError("list index out of range")

    monkeypatch.setattr(cli.packrt_io, "inspect_checkpoint", broken)
    assert main(["inspect", str(tmp_path / "x.safetensors")]) == 2
    err = capsys.readouterr().err
    assert "internal error (IndexError): list index out of range" in err and "Traceback" not in err


def test_inspect_of_an_index_with_an_empty_weight_map_lists_no_shards_and_exits_0(tmp_path: Path, capsys: Any) -> None:
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": {}}))
    assert main(["inspect", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "tensors: 0, 0 bytes" in out and "shards:\n  (none)" in out


def test_inspect_refuses_a_lone_surrogate_key_as_safetensors_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = b'{"w\\ud800":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
    text += b" " * (-len(text) % 8)
    path = tmp_path / "lone.safetensors"
    path.write_bytes(len(text).to_bytes(8, "little") + text + np.ones(1, np.float32).tobytes())
    assert main(["inspect", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("packrt inspect: error: checkpoint '") and "lone surrogate" in err, err


def test_the_packrt_command_works_without_the_serve_extra_and_serve_names_it(tmp_path: Path) -> None:
    """FastAPI missing (``packrt`` installed without ``[serve]``): every other command still runs, and
    ``packrt serve`` says which extra to install."""
    checkpoint = _save(tmp_path / "net.safetensors", _net_arrays())
    code = textwrap.dedent(
        """
        import sys
        sys.modules["fastapi"] = None  # what an environment without the serve extra looks like to import
        from packrt.cli import main
        print("inspect exit", main(["inspect", sys.argv[1]]))
        print("serve exit", main(["serve", sys.argv[2]]))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(checkpoint), str(tmp_path)], capture_output=True, text=True, timeout=600
    )
    assert "inspect exit 0" in done.stdout, done.stdout + done.stderr
    assert "serve exit 2" in done.stdout, done.stdout + done.stderr
    assert "pip install 'packrt[serve]'" in done.stderr, done.stderr
